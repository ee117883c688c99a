//! Wasm plugins end to end: the test API server, a real `kube::Client`, the informer, and the
//! compiled plugins in `plugins/`.

use crate::common;

use std::time::Duration;

use common::rig::*;
use common::*;
use serde_json::{Value, json};
use wisp_host::plugin::{
    EngineConfig, FailurePolicy, LoadSource, OnFailure, PluginEngine, PluginError, PluginHandle,
    PluginManager, PluginSpec, PluginState,
};
use wisp_tests::pod;

fn pod_with(ns: &str, name: &str, image: &str, limits: bool, node: &str) -> Value {
    let mut p = pod(ns, name);
    p["spec"]["nodeName"] = json!(node);
    for c in p["spec"]["containers"].as_array_mut().unwrap() {
        c["image"] = json!(image);
        if !limits {
            c["resources"] = json!({});
        }
    }
    p
}

#[tokio::test]
async fn audit_log_logs_each_lifecycle_event_including_a_late_join_replay() {
    let r = rig(vec![pod("default", "web-1")]).await;
    let h = r
        .manager
        .start(spec("audit", "audit_log", json!({})))
        .unwrap();
    until("initial list", || h.has_synced()).await;
    r.server
        .update(touched(pod("default", "web-1"), 1))
        .unwrap();
    r.server.create(pod("default", "web-2")).unwrap();
    r.server
        .delete("v1", "Pod", Some("default"), "web-1")
        .unwrap();
    until("4 delivered", || counter(&h, |c| &c.delivered) == 4).await;
    let l = logs(&h);
    assert!(
        l.iter()
            .any(|x| x.starts_with("info: ADDED v1 Pod default/web-1")
                && x.ends_with("(initial list)")),
        "{l:#?}"
    );
    assert!(
        l.iter()
            .any(|x| x.starts_with("info: UPDATED v1 Pod default/web-1")),
        "{l:#?}"
    );
    assert!(
        l.iter()
            .any(|x| x.starts_with("info: ADDED v1 Pod default/web-2") && !x.contains("initial")),
        "{l:#?}"
    );
    assert!(
        l.iter()
            .any(|x| x.starts_with("info: DELETED v1 Pod default/web-1")),
        "{l:#?}"
    );
    let s = h.status();
    assert_eq!(
        s.guest_counter(
            "audit_events_total",
            &[("informer", "pods"), ("event", "added")]
        ),
        2
    );
    assert_eq!(
        s.guest_counter(
            "audit_events_total",
            &[("informer", "pods"), ("event", "deleted")]
        ),
        1
    );
    assert_eq!(h.running().plugin_name, "audit-log");
}

#[tokio::test]
async fn image_policy_reports_latest_images_and_missing_limits_and_clears_fixed_pods() {
    let r = rig(vec![
        pod_with("default", "good-1", "nginx:1.27", true, "n1"),
        pod_with("default", "latest-1", "nginx:latest", true, "n1"),
        pod_with(
            "default",
            "untagged-1",
            "registry.local:5000/nginx",
            true,
            "n1",
        ),
        pod_with("default", "nolimits-1", "nginx:1.27", false, "n1"),
        pod_with("kube-system", "latest-2", "nginx", false, "n1"),
    ])
    .await;
    let h = r
        .manager
        .start(spec(
            "policy",
            "image_policy",
            json!({"exemptNamespaces": ["kube-system"]}),
        ))
        .unwrap();
    until("synced", || h.has_synced()).await;
    let s = h.status().clone();
    let gauge = |rule: &str| s.guest_gauge("policy_violating_pods", &[("rule", rule)]);
    until("gauges", || {
        gauge("latest-tag") == Some(2.0) && gauge("missing-limits") == Some(1.0)
    })
    .await;
    assert!(
        logs(&h)
            .iter()
            .any(|l| l.starts_with("warn: violation latest-tag default/latest-1"))
    );
    assert!(
        !logs(&h).iter().any(|l| l.contains("kube-system/")),
        "exempt namespace"
    );

    r.server
        .update(pod_with("default", "latest-1", "nginx:1.27", true, "n1"))
        .unwrap();
    r.server
        .delete("v1", "Pod", Some("default"), "nolimits-1")
        .unwrap();
    until("cleared", || {
        gauge("latest-tag") == Some(1.0) && gauge("missing-limits") == Some(0.0)
    })
    .await;
    assert_eq!(
        s.guest_counter("policy_violations_total", &[("rule", "latest-tag")]),
        2
    );
    assert!(
        logs(&h)
            .iter()
            .any(|l| l == "info: pass latest-tag default/latest-1: fixed")
    );
}

#[tokio::test]
async fn a_plugin_that_rejects_its_settings_is_refused_with_the_field_named() {
    let r = rig(vec![]).await;
    let err = r
        .manager
        .start(spec("policy", "image_policy", json!({"denyLatest": "yes"})))
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(matches!(err, PluginError::SettingsRejected { .. }), "{msg}");
    assert!(
        msg.starts_with(
            "plugin \"policy\": init: settings rejected: settings.denyLatest: invalid type"
        ),
        "{msg}"
    );
    let err = r
        .manager
        .start(spec(
            "policy",
            "image_policy",
            json!({"denyLatest": false, "requireLimits": false}),
        ))
        .err()
        .unwrap();
    assert!(err.to_string().contains("nothing to check"), "{err}");
}

#[tokio::test]
async fn inventory_counts_pods_per_node_and_owner_from_the_cache_indexes() {
    let r = rig(vec![
        pod_with("default", "web-1", "nginx:1", true, "node-a"),
        pod_with("default", "web-2", "nginx:1", true, "node-a"),
        pod_with("default", "db-1", "pg:1", true, "node-b"),
    ])
    .await;
    let h = r
        .manager
        .start(spec("inventory", "inventory", json!({})))
        .unwrap();
    until("synced", || h.has_synced()).await;
    let s = h.status().clone();
    let node = |n: &str| s.guest_gauge("pods_per_node", &[("node", n)]);
    until("per node", || {
        node("node-a") == Some(2.0) && node("node-b") == Some(1.0)
    })
    .await;
    assert_eq!(
        s.guest_gauge("pods_per_owner", &[("owner", "ReplicaSet/web-7d9f8b6c5d")]),
        Some(3.0)
    );
    r.server
        .delete("v1", "Pod", Some("default"), "web-1")
        .unwrap();
    until("after delete", || node("node-a") == Some(1.0)).await;
}

fn seq_ok(h: &PluginHandle, n: u64) -> bool {
    let s = h.status();
    s.guest_gauge("last_seq", &[("informer", "pods")]) == Some(n as f64)
        && s.guest_counter("gaps_total", &[]) == 0
        && s.guest_counter("dups_total", &[]) == 0
}

#[tokio::test]
async fn a_stuck_plugin_is_cut_by_its_deadline_and_a_healthy_neighbour_gets_everything_in_order() {
    let r = rig(vec![pod("default", "web-0")]).await;
    let mut stuck = faults_spec("stuck", json!({"mode": "spin", "namePrefix": "stuck-"}));
    stuck.limits.deadline = Duration::from_millis(30);
    let stuck = r.manager.start(stuck).unwrap();
    let healthy = r.manager.start(faults_spec("healthy", json!({}))).unwrap();
    r.server.create(pod("default", "stuck-1")).unwrap();
    for i in 1..200 {
        r.server
            .create(pod("default", &format!("web-{i}")))
            .unwrap();
    }
    until("healthy saw all 201 in order", || seq_ok(&healthy, 201)).await;
    until("stuck call cut", || {
        counter(&stuck, |c| &c.deadline_hits) >= 1
    })
    .await;
    until("stuck plugin went on", || {
        stuck
            .status()
            .guest_counter("seen_total", &[("informer", "pods")])
            >= 201
    })
    .await;
    assert_eq!(stuck.state(), PluginState::Running);
    assert!(
        stuck.status().last_error().unwrap().contains("deadline"),
        "{:?}",
        stuck.status().last_error()
    );
}

#[tokio::test]
async fn a_memory_bomb_is_stopped_at_its_cap_and_gets_a_fresh_instance() {
    let r = rig(vec![]).await;
    let mut bomb = faults_spec("bomb", json!({"mode": "alloc", "namePrefix": "bomb-"}));
    bomb.limits.memory = 16 * 1024 * 1024;
    bomb.limits.deadline = Duration::from_secs(5);
    let bomb = r.manager.start(bomb).unwrap();
    r.server.create(pod("default", "bomb-1")).unwrap();
    r.server.create(pod("default", "web-1")).unwrap();
    // Once in the batch, once more when the batch's items are retried one by one.
    until("oom hit", || counter(&bomb, |c| &c.out_of_memory) >= 1).await;
    until("next delivered", || {
        counter(&bomb, |c| &c.delivered) >= 1 && counter(&bomb, |c| &c.restarts) >= 1
    })
    .await;
    assert_eq!(
        counter(&bomb, |c| &c.deadline_hits),
        0,
        "stopped by the memory cap, not the deadline"
    );
    assert!(bomb.status().last_error().unwrap().contains("memory limit"));
}

#[tokio::test]
async fn a_trap_gets_a_fresh_instance_and_delivery_goes_on() {
    let r = rig(vec![]).await;
    let h = r
        .manager
        .start(faults_spec(
            "trappy",
            json!({"mode": "trap", "namePrefix": "bad-"}),
        ))
        .unwrap();
    r.server.create(pod("default", "ok-1")).unwrap();
    r.server.create(pod("default", "bad-1")).unwrap();
    r.server.create(pod("default", "ok-2")).unwrap();
    until("two delivered", || {
        counter(&h, |c| &c.delivered) == 2 && counter(&h, |c| &c.failed) == 1
    })
    .await;
    assert!(counter(&h, |c| &c.traps) >= 1);
    assert!(counter(&h, |c| &c.restarts) >= 1);
    let err = h.status().last_error().unwrap();
    assert!(
        err.contains("unreachable") && err.contains("trap on purpose at default/bad-1"),
        "{err}"
    );
    assert!(
        logs(&h)
            .iter()
            .any(|l| l.starts_with("stderr: ") && l.contains("trap on purpose")),
        "the panic message reaches the log"
    );
    assert_eq!(h.state(), PluginState::Running);
}

#[tokio::test]
async fn a_plugin_failing_n_times_in_a_row_is_quarantined_and_receives_nothing_more() {
    let r = rig(vec![]).await;
    let mut s = faults_spec("failing", json!({"mode": "error"}));
    s.on_failure = OnFailure {
        policy: FailurePolicy::Skip,
        quarantine_after: 3,
    };
    let h = r.manager.start(s).unwrap();
    for i in 0..3 {
        r.server
            .create(pod("default", &format!("web-{i}")))
            .unwrap();
    }
    until("quarantined", || {
        matches!(h.state(), PluginState::Quarantined { .. })
    })
    .await;
    for i in 3..6 {
        r.server
            .create(pod("default", &format!("web-{i}")))
            .unwrap();
    }
    until("later ones dropped", || counter(&h, |c| &c.dropped) == 3).await;
    assert_eq!(counter(&h, |c| &c.failed), 3);
    assert_eq!(
        h.status()
            .guest_counter("seen_total", &[("informer", "pods")]),
        3,
        "nothing reached it after"
    );
}

#[tokio::test]
async fn the_retry_policy_redelivers_a_failed_notification_alone_with_backoff() {
    let r = rig(vec![]).await;
    let mut s = faults_spec("retrying", json!({"mode": "error", "namePrefix": "bad-"}));
    s.on_failure = OnFailure {
        policy: FailurePolicy::Retry {
            retries: 2,
            backoff: Duration::from_millis(5),
        },
        quarantine_after: 0,
    };
    let h = r.manager.start(s).unwrap();
    r.server.create(pod("default", "bad-1")).unwrap();
    r.server.create(pod("default", "ok-1")).unwrap();
    until("settled", || {
        counter(&h, |c| &c.failed) == 1 && counter(&h, |c| &c.delivered) == 1
    })
    .await;
    assert_eq!(
        counter(&h, |c| &c.errors),
        3,
        "first attempt and two retries"
    );
    assert_eq!(counter(&h, |c| &c.retries), 2);
}

#[tokio::test]
async fn a_plugin_cannot_open_files_read_env_open_sockets_read_an_ungranted_informer_or_act() {
    let r = rig(vec![]).await;
    let h = r
        .manager
        .start(faults_spec("prober", json!({"mode": "probe"})))
        .unwrap();
    r.server.create(pod("default", "probe-1")).unwrap();
    until("probed", || counter(&h, |c| &c.delivered) == 1).await;
    let s = h.status();
    for what in [
        "file",
        "dir",
        "env",
        "socket",
        "ungranted-informer",
        "ungranted-action",
    ] {
        assert_eq!(
            s.guest_counter("probe_total", &[("what", what), ("result", "refused")]),
            1,
            "{what}: {:#?}",
            logs(&h)
        );
        assert_eq!(
            s.guest_counter("probe_total", &[("what", what), ("result", "allowed")]),
            0,
            "{what}"
        );
    }
    assert_eq!(
        counter(&h, |c| &c.denied),
        2,
        "the refused cache read and action are counted"
    );
    assert_eq!(counter(&h, |c| &c.actions_refused), 1);
    let l = logs(&h);
    assert!(
        l.iter()
            .any(|x| x.contains("cache read of informer \"secrets\" refused: not granted")),
        "{l:#?}"
    );
    assert!(
        l.iter()
            .any(|x| x.contains("patch Secret \"anything\" refused: not granted")),
        "{l:#?}"
    );
}

#[tokio::test]
async fn sequence_numbers_show_no_loss_or_duplication_under_batches() {
    let r = rig((0..500)
        .map(|i| pod("default", &format!("init-{i}")))
        .collect())
    .await;
    let h = r.manager.start(faults_spec("counter", json!({}))).unwrap();
    for i in 0..1500 {
        r.server
            .create(pod("default", &format!("web-{i}")))
            .unwrap();
    }
    until("all 2000 seen in order", || seq_ok(&h, 2000)).await;
    let calls = counter(&h, |c| &c.calls);
    assert!(
        calls < 2000,
        "delivered in batches ({calls} calls for 2000 notifications)"
    );
    assert_eq!(r.inf.cache().len(), 2000);
}

#[tokio::test]
async fn modules_that_are_not_plugins_are_refused_with_a_clear_error() {
    let r = rig(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let try_module = |name: &str, bytes: Option<&[u8]>| {
        let path = dir.path().join(format!("{name}.wasm"));
        if let Some(b) = bytes {
            std::fs::write(&path, b).unwrap();
        }
        let s = PluginSpec::new(name, &path, &["pods"]);
        r.manager.start(s).err().expect("refused").to_string()
    };
    let e = try_module("missing", None);
    assert!(
        e.contains("plugin \"missing\": module") && e.contains("cannot read"),
        "{e}"
    );
    let e = try_module("text", Some(b"(component)"));
    assert!(e.contains("not a WebAssembly file"), "{e}");
    let e = try_module("core", Some(b"\0asm\x01\0\0\0"));
    assert!(
        e.contains("a core WebAssembly module, not a component") && e.contains("wasm32-wasip2"),
        "{e}"
    );
    let mut truncated = std::fs::read(plugin_path("audit_log")).unwrap();
    truncated.truncate(truncated.len() / 2);
    let e = try_module("truncated", Some(&truncated));
    assert!(e.contains("invalid component"), "{e}");

    let e = start_wrong_world(&r.manager);
    assert!(
        e.to_string()
            .contains("not a wisp:plugin/plugin component (0.3.0, 0.2.0 or 0.1.0)"),
        "{e}"
    );

    let e = r
        .manager
        .start(PluginSpec::new(
            "lost",
            plugin_path("audit_log"),
            &["nodes"],
        ))
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        "plugin \"lost\": informers: \"nodes\" is not a configured informer (configured: pods)"
    );
}

/// Starts `test_wrong_world` as plugin "other": refused, its component of another world.
fn start_wrong_world(manager: &PluginManager) -> PluginError {
    let e = manager
        .start(PluginSpec::new(
            "other",
            plugin_path("test_wrong_world"),
            &["pods"],
        ))
        .err()
        .unwrap();
    assert!(matches!(e, PluginError::WrongWorld { .. }), "{e}");
    e
}

#[tokio::test]
async fn a_module_is_compiled_once_then_served_from_memory_and_from_the_disk_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || EngineConfig {
        cache_dir: Some(dir.path().into()),
        ..EngineConfig::default()
    };
    let bytes = std::fs::read(plugin_path("audit_log")).unwrap();
    let first = PluginEngine::new(cfg()).unwrap();
    assert_eq!(first.load(&bytes).unwrap().source, LoadSource::Compiled);
    assert_eq!(first.load(&bytes).unwrap().source, LoadSource::Memory);
    let second = PluginEngine::new(cfg()).unwrap();
    let loaded = second.load(&bytes).unwrap();
    assert_eq!(
        loaded.source,
        LoadSource::Disk,
        "a restart loads the precompiled artifact"
    );
    let artifacts = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(artifacts, 1);
}

#[tokio::test]
async fn plugins_of_one_module_share_its_link_and_each_keeps_its_own_instance() {
    let r = rig(vec![pod("default", "web-0")]).await;
    // An engine of its own: the rig's is shared by the binary's tests, which run at once.
    let engine = PluginEngine::new(EngineConfig {
        cache_dir: None,
        ..EngineConfig::default()
    })
    .unwrap();
    let mut manager = PluginManager::new(engine.clone());
    manager.add_informer(r.inf.clone());
    let a = manager.start(faults_spec("a", json!({}))).unwrap();
    let b = manager.start(faults_spec("b", json!({}))).unwrap();
    assert_eq!(engine.linked_modules(), 1, "two plugins of one module");
    let audit = manager
        .start(spec("audit", "audit_log", json!({})))
        .unwrap();
    assert_eq!(
        engine.linked_modules(),
        2,
        "another module links on its own"
    );
    // A module that does not link is refused each time the same way, and not remembered.
    for _ in 0..2 {
        start_wrong_world(&manager);
    }
    assert_eq!(engine.linked_modules(), 2);
    // Each plugin of the shared link has its own instance: both see every pod, in order, and a
    // trap in one (a fresh instance for it) leaves the other's state alone.
    r.server.create(pod("default", "web-1")).unwrap();
    until("both saw both pods", || seq_ok(&a, 2) && seq_ok(&b, 2)).await;
    let c = manager
        .start(faults_spec(
            "c",
            json!({"mode": "trap", "namePrefix": "boom-"}),
        ))
        .unwrap();
    assert_eq!(engine.linked_modules(), 2);
    r.server.create(pod("default", "boom-1")).unwrap();
    until("the trap counted", || counter(&c, |c| &c.traps) >= 1).await;
    r.server.create(pod("default", "web-2")).unwrap();
    until("a and b went on", || seq_ok(&a, 4) && seq_ok(&b, 4)).await;
    assert_eq!(counter(&a, |c| &c.traps), 0);
    assert_eq!(counter(&b, |c| &c.traps), 0);
    assert_eq!(audit.state(), PluginState::Running);
}

#[tokio::test]
async fn fuel_limits_cut_a_runaway_call_when_the_engine_meters_fuel() {
    let r = rig(vec![]).await;
    let dir = tempfile::tempdir().unwrap();
    let fuel_engine = PluginEngine::new(EngineConfig {
        cache_dir: Some(dir.path().into()),
        fuel: true,
        ..EngineConfig::default()
    })
    .unwrap();
    let mut manager = PluginManager::new(fuel_engine);
    manager.add_informer(r.inf.clone());
    let mut s = faults_spec("metered", json!({"mode": "spin", "namePrefix": "spin-"}));
    s.limits.fuel = Some(50_000_000);
    let h = manager.start(s).unwrap();
    r.server.create(pod("default", "spin-1")).unwrap();
    r.server.create(pod("default", "ok-1")).unwrap();
    until("out of fuel", || counter(&h, |c| &c.out_of_fuel) >= 1).await;
    until("next delivered", || counter(&h, |c| &c.delivered) >= 1).await;
    assert_eq!(
        counter(&h, |c| &c.deadline_hits),
        0,
        "cut by fuel, well before the 10 s deadline"
    );
    assert!(h.status().last_error().unwrap().contains("fuel exhausted"));

    // Without fuel metering in the engine, asking for fuel is refused at load.
    let mut s = faults_spec("unmetered", json!({}));
    s.limits.fuel = Some(1);
    let e = r.manager.start(s).err().unwrap();
    assert!(
        e.to_string()
            .contains("limits.fuel is set but the engine runs without fuel metering"),
        "{e}"
    );
}

/// A plugin waiting out a retry backoff holds no worker: on an executor of one worker, another
/// plugin on the same informer goes on handling its notifications meanwhile (a backoff slept on
/// the worker would hold it for the whole wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_waiting_to_retry_holds_no_worker() {
    let executor = wisp_host::informer::Executor::new(1).unwrap();
    let config = wisp_host::informer::shared_informer::InformerConfig {
        executor: Some(executor.clone()),
        ..fast_config()
    };
    let r = rig_with(vec![pod("default", "web-0")], config).await;
    let (server, manager) = (&r.server, &r.manager);
    let mut s = faults_spec("retrying", json!({"mode": "error", "namePrefix": "bad-"}));
    s.on_failure = OnFailure {
        policy: FailurePolicy::Retry {
            retries: 1,
            backoff: Duration::from_secs(60),
        },
        quarantine_after: 0,
    };
    let retrying = manager.start(s).unwrap();
    let healthy = manager.start(faults_spec("healthy", json!({}))).unwrap();
    until("both synced", || {
        retrying.has_synced() && healthy.has_synced()
    })
    .await;

    server.create(pod("default", "bad-1")).unwrap();
    until("the first attempt failed", || {
        counter(&retrying, |c| &c.errors) == 1
    })
    .await;
    for i in 0..5 {
        server.create(pod("default", &format!("ok-{i}"))).unwrap();
    }
    until("the healthy plugin handled everything", || {
        counter(&healthy, |c| &c.delivered) == 7
    })
    .await;
    assert_eq!(
        counter(&retrying, |c| &c.retries),
        0,
        "still waiting out its backoff"
    );
    let q = &retrying.queues()[0].1;
    assert_eq!(
        (q.delivered, q.depth),
        (1, 5),
        "its batch with bad-1 is still in hand, the rest waits behind it: {q:?}"
    );
    executor.shutdown();
}

/// client-go hands a relist's unchanged objects to every listener of an informer that does not
/// resync, as updates with an unchanged resourceVersion; plugins see them flagged `resync`, and
/// `relistResyncs: skip` keeps them away from a plugin that has no use for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_hands_unchanged_objects_to_plugins_as_resyncs_unless_they_skip_them() {
    let pods = (0..5)
        .map(|i| pod("default", &format!("web-{i}")))
        .collect();
    let r = rig(pods).await;
    let deliver = r
        .manager
        .start(spec("deliver", "audit_log", json!({})))
        .unwrap();
    let mut quiet = spec("skip", "audit_log", json!({}));
    quiet.relist_resyncs = wisp_host::informer::RelistResyncs::Skip;
    let skip = r.manager.start(quiet).unwrap();
    until("both synced", || deliver.has_synced() && skip.has_synced()).await;

    // While the watch is down a pod is added and the history compacted: the informer relists,
    // finds the five pods unchanged and the sixth new.
    let lists = r.inf.stats().lists;
    while_watch_down(&r.server, &r.inf, || {
        r.server.create(pod("default", "web-new")).unwrap();
    })
    .await;
    let seen = |h: &PluginHandle, event: &str| {
        h.status().guest_counter(
            "audit_events_total",
            &[("informer", "pods"), ("event", event)],
        )
    };
    until("both got the new pod", || {
        seen(&deliver, "added") == 6 && seen(&skip, "added") == 6
    })
    .await;
    assert!(r.inf.stats().lists > lists, "the informer relisted");
    until("the relist's unchanged pods reached `deliver`", || {
        seen(&deliver, "resynced") == 5
    })
    .await;
    // The relist has been handed to every listener by now; `skip`'s queue was given the new pod
    // and nothing else.
    until("skip caught up", || {
        skip.queues()
            .iter()
            .all(|(_, q)| q.depth == 0 && q.delivered == q.queued)
    })
    .await;
    assert_eq!(skip.queues()[0].1.queued, 6);
    assert_eq!(seen(&skip, "resynced"), 0);
    assert_eq!(seen(&deliver, "updated") + seen(&skip, "updated"), 0);
}
