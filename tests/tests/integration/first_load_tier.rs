//! The first-load tier (`engine.firstLoadTier`): a module in neither cache starts on Winch code
//! at once, is compiled with Cranelift in the background into the module cache, and the running
//! plugin is moved onto that code through the reload path; its deadline and memory cap hold on
//! both, and `/plugins` says which code runs.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use wisp_host::admin::plugins::view;
use wisp_host::plugin::compile::Tier;
use wisp_host::plugin::{EngineConfig, PluginEngine, PluginManager};
use wisp_tests::pod;

use crate::common::rig::{counter, faults_spec, logs, variant};
use crate::common::*;

/// An engine on an empty module cache in `dir`, the tier on for every module size.
fn tiered_engine(dir: &std::path::Path) -> Arc<PluginEngine> {
    PluginEngine::new(EngineConfig {
        cache_dir: Some(dir.join("modules")),
        first_load_tier: true,
        first_load_tier_min: 0,
        ..EngineConfig::default()
    })
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_module_starts_on_winch_then_runs_on_the_cached_cranelift_code_within_its_limits() {
    let dir = tempfile::tempdir().unwrap();
    let server = wisp_tests::TestApiServer::start().await.unwrap();
    for i in 0..3 {
        server.create(pod("default", &format!("ok-{i}"))).unwrap();
    }
    let inf = pod_informer(&server, fast_config());
    let _stop = start(&inf);
    until("informer synced", || inf.has_synced()).await;
    let engine = tiered_engine(dir.path());
    // The background Cranelift compile waits until the plugin has worked on the Winch code.
    let hold = engine.hold_tier_up();
    let mut manager = PluginManager::new(engine.clone());
    manager.add_informer(inf.clone());
    // A module no other test compiled: a cold cache in this engine and on disk.
    let module = variant(&plugin_path("test_faults"), "first-load", dir.path());
    let mut spec = faults_spec("tiered", json!({"mode": "spin", "namePrefix": "spin-"}));
    spec.module = module;
    spec.limits.deadline = Duration::from_millis(100);
    let h = manager.start(spec).unwrap();

    // Started on the Winch code, delivering, and its deadline cuts a spinning call there.
    assert_eq!(h.report().tier, Tier::Baseline);
    until("the initial list delivered", || {
        counter(&h, |c| &c.delivered) == 3
    })
    .await;
    server.create(pod("default", "spin-0")).unwrap();
    until("the spinning call cut on the Winch code", || {
        counter(&h, |c| &c.deadline_hits) >= 1
    })
    .await;
    let winch_hits = counter(&h, |c| &c.deadline_hits);
    server.create(pod("default", "ok-3")).unwrap();
    until("delivers on a fresh Winch instance after the cut", || {
        counter(&h, |c| &c.delivered) == 4
    })
    .await;
    assert_eq!(h.tier(), Tier::Baseline);
    assert_eq!(h.running().generation, 1);
    assert_eq!(view(&h).tier, "baseline", "/plugins says which code runs");
    drop(hold);
    // Then moved onto the Cranelift code by a reload, the state handed over.
    until("moved onto the optimized code", || {
        h.tier() == Tier::Optimized
    })
    .await;
    assert_eq!(h.running().generation, 2);
    assert_eq!(counter(&h, |c| &c.reloads), 1);
    assert_eq!(counter(&h, |c| &c.reload_failures), 0);
    assert_eq!(view(&h).tier, "optimized");
    assert_eq!(h.status().guest_counter("restored_total", &[]), 1);
    // (Said once the reload returned, just after the swap.)
    until("the move said in its log", || {
        logs(&h)
            .iter()
            .any(|l| l.contains("moved onto the optimized (Cranelift) code: generation 2"))
    })
    .await;
    // The artifact is in the module cache: the next start uses it.
    let cached = std::fs::read_dir(dir.path().join("modules"))
        .unwrap()
        .count();
    assert!(cached >= 1, "the module cache holds the Cranelift artifact");

    // On the optimized code the deadline still cuts a spinning call, and the plugin goes on.
    server.create(pod("default", "spin-1")).unwrap();
    until("the spinning call cut", || {
        counter(&h, |c| &c.deadline_hits) > winch_hits
    })
    .await;
    server.create(pod("default", "ok-9")).unwrap();
    until("delivers after the cut", || {
        counter(&h, |c| &c.delivered) == 5
    })
    .await;

    // A second plugin on the same module starts on the optimized code at once (no second
    // compile, no tier), and its memory cap holds.
    let mut hog = faults_spec("hog", json!({"mode": "alloc", "namePrefix": "hog-"}));
    hog.module = h.running().module.clone();
    hog.limits.memory = 16 << 20;
    let hog = manager.start(hog).unwrap();
    assert_eq!(hog.report().tier, Tier::Optimized);
    assert_eq!(hog.tier(), Tier::Optimized);
    server.create(pod("default", "hog-1")).unwrap();
    until("the allocation cut at the cap", || {
        counter(&hog, |c| &c.out_of_memory) >= 1
    })
    .await;
    // A reload keeps the running version meanwhile: a cold module reloaded is compiled with
    // Cranelift before the swap, no tier.
    let before = h.running().generation;
    let mut spec = faults_spec("tiered", json!({"mode": "spin", "namePrefix": "spin-"}));
    spec.module = variant(&plugin_path("test_faults"), "reloaded", dir.path());
    spec.limits.deadline = Duration::from_millis(100);
    let report = h.reload(spec).unwrap();
    assert_eq!(report.load.tier, Tier::Optimized);
    assert_eq!(h.tier(), Tier::Optimized);
    assert_eq!(h.running().generation, before + 1);
    h.stop();
    hog.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_tier_a_cold_module_starts_on_cranelift_code() {
    let dir = tempfile::tempdir().unwrap();
    let engine = PluginEngine::new(EngineConfig {
        cache_dir: Some(dir.path().join("modules")),
        first_load_tier: false,
        first_load_tier_min: 0,
        ..EngineConfig::default()
    })
    .unwrap();
    let module = variant(&plugin_path("test_faults"), "no-tier", dir.path());
    let bytes = std::fs::read(module).unwrap();
    let loaded = engine.load(&bytes).unwrap();
    assert_eq!(loaded.tier, Tier::Optimized);
    // A tiered engine: the same bytes compile with Winch first, and wait_optimized sees the
    // Cranelift compile land in the cache.
    let tiered = tiered_engine(dir.path().join("t").as_path());
    let first = tiered.load(&bytes).unwrap();
    assert_eq!(first.tier, Tier::Baseline);
    tiered.wait_optimized(&first.hash).unwrap();
    assert_eq!(tiered.load(&bytes).unwrap().tier, Tier::Optimized);
}
