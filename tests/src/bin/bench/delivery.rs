//! Per-notification delivery cost, wasm plugin vs native Rust handler doing the same work.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::json;
use wisp_host::informer::{Delivery, EventHandler};
use wisp_host::plugin::{EngineConfig, PluginEngine, check_module};

use super::common::*;
use crate::Args;

/// Time per notification of the bench plugin doing `work` over `items` in batches of `batch`.
pub(crate) fn wasm_time(
    engine: &Arc<PluginEngine>,
    path: &std::path::Path,
    work: &str,
    batch: usize,
    items: &[Delivery],
) -> anyhow::Result<Duration> {
    let checked =
        check_module(engine, path, json!({ "work": work })).map_err(|e| anyhow::anyhow!("{e}"))?;
    let status = checked.status().clone();
    let mut rt = checked.into_runtime(engine.clone());
    // Warm up (first calls fault in memory).
    rt.handle("pods", &items[..batch.min(items.len())]);
    let t = Instant::now();
    for chunk in items.chunks(batch) {
        rt.handle("pods", chunk);
    }
    let took = per_item(t.elapsed(), items.len());
    let failed = wisp_host::plugin::status::PluginCounters::get(&status.counters.failed);
    if failed > 0 {
        bail!(
            "the bench plugin failed {failed} notifications: {:?}",
            status.last_error()
        );
    }
    Ok(took)
}

pub(crate) fn delivery_figures(a: &Args) -> anyhow::Result<()> {
    let n = if a.quick { 2_000 } else { 20_000 };
    let items = deliveries(n);
    let engine = PluginEngine::new(EngineConfig {
        cache_dir: None,
        ..EngineConfig::default()
    })?;
    let path = a.plugin_dir.join("bench.wasm");
    println!(
        "\n## Delivery cost per notification ({n} pods of ~1.5 KB; wasm vs native handler, same work)\n"
    );
    println!("| work | batch | native | wasm | wasm/native time | wasm throughput vs native |");
    println!("|---|---|---|---|---|---|");
    // Where the wasm cost goes: the host writing each batch (ABI 0.2), here into a buffer
    // reused from batch to batch; a plugin gets it written straight into its memory.
    let mut buf = Vec::new();
    let t = Instant::now();
    let mut keep = 0usize;
    for chunk in items.chunks(64) {
        let batch = wisp_host::plugin::batch::Batch::new("pods", chunk, false);
        buf.resize(batch.size(), 0);
        batch.write(&mut buf);
        keep += buf.len();
    }
    std::hint::black_box(keep);
    println!(
        "| (the host writing batches of 64, part of every wasm figure below) | 64 | - | {} | - | - |",
        ns(per_item(t.elapsed(), n))
    );
    let no_epochs = PluginEngine::new(EngineConfig {
        cache_dir: None,
        epoch_interruption: false,
        ..EngineConfig::default()
    })?;
    let meta_path = a.plugin_dir.join("bench_meta.wasm");
    let epochs_off = " (epochs off: no deadline, cost of the checks)";
    let meta_only = " (metadata-only plugin: objects without JSON)";
    let mut runs: Vec<(&str, usize, &Arc<PluginEngine>, &std::path::Path, &str)> = Vec::new();
    for w in ["noop", "labels", "meta", "parse", "pod", "partial"] {
        runs.extend([(w, 1, &engine, &*path, ""), (w, 64, &engine, &*path, "")]);
    }
    for w in ["noop", "labels", "meta"] {
        runs.extend([
            (w, 1, &engine, &*meta_path, meta_only),
            (w, 64, &engine, &*meta_path, meta_only),
        ]);
    }
    for w in ["parse", "pod", "partial"] {
        runs.push((w, 64, &no_epochs, &*path, epochs_off));
    }
    for (work, batch, engine, path, note) in runs {
        let mut native = Native { work, total: 0 };
        let t = Instant::now();
        for chunk in items.chunks(batch) {
            native.handle(chunk);
        }
        let native_t = per_item(t.elapsed(), n);
        let wasm_t = wasm_time(engine, path, work, batch, &items)?;
        println!(
            "| {work}{note} | {batch} | {} | {} | {:.2}x | {:.2}x |",
            ns(native_t),
            ns(wasm_t),
            wasm_t.as_secs_f64() / native_t.as_secs_f64().max(1e-12),
            native_t.as_secs_f64() / wasm_t.as_secs_f64().max(1e-12),
        );
    }
    Ok(())
}
