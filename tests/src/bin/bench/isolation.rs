//! Idle instance memory, and a stuck call's cut time against its deadline.

use std::time::{Duration, Instant};

use serde_json::json;
use wisp_host::plugin::{EngineConfig, PluginEngine, check_module};

use super::common::*;
use crate::Args;

/// Resident set size of this process, in bytes (Linux).
pub(crate) fn rss() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|p| p.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

/// Memory of idle instances, and how long a stuck call runs against its deadline.
pub(crate) fn isolation_figures(a: &Args) -> anyhow::Result<()> {
    let engine = PluginEngine::new(EngineConfig {
        cache_dir: None,
        ..EngineConfig::default()
    })?;
    println!("\n## Instances and isolation\n");
    println!("| figure | value | baseline / target |");
    println!("|---|---|---|");
    let n = if a.quick { 50 } else { 500 };
    let path = a.plugin_dir.join("audit_log.wasm");
    let bytes = std::fs::read(&path)?;
    let prepared = Prepared::new(&engine, &path, &bytes, "idle")?;
    let spec = &prepared.spec;
    let before = rss();
    let mut keep = Vec::with_capacity(n);
    for _ in 0..n {
        let mut inst = prepared.instance(&engine, prepared.api())?;
        let _ = inst.init("{}").map_err(|e| anyhow::anyhow!("{e}"))?;
        keep.push(inst);
    }
    let per = (rss().saturating_sub(before)) / n as u64;
    println!(
        "| resident memory per idle instance (audit-log, after init; {n} instances) | {} KiB | DESIGN target <= 128 KiB, issue 6 <= 1 MiB |",
        per / 1024
    );
    drop(keep);

    let rounds = if a.quick { 3 } else { 20 };
    let checked = check_module(
        &engine,
        &a.plugin_dir.join("test_faults.wasm"),
        json!({"mode": "spin"}),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let status = checked.status().clone();
    let mut rt = checked.into_runtime(engine.clone());
    let items = deliveries(1);
    let mut times = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        rt.handle("pods", &items);
        times.push(t.elapsed());
    }
    let hits = wisp_host::plugin::status::PluginCounters::get(&status.counters.deadline_hits);
    println!(
        "| stuck call (infinite loop) cut after, median / max ({rounds} calls, {hits} deadline hits) | {} / {} | deadline {} + one {} tick |",
        ms(median(times.clone())),
        ms(*times.iter().max().unwrap_or(&Duration::ZERO)),
        ms(spec.limits.deadline),
        ms(wisp_host::plugin::compile::DEFAULT_EPOCH_TICK)
    );
    Ok(())
}
