//! `wisp-bench`: Wisp's benchmark harness. Every figure is printed next to a baseline measured
//! in the same run, with the ratio. Run it with `cargo xtask bench` (release build, plugins
//! built first); `--quick` runs fewer iterations (to keep it building and running in CI).
//!
//! Figures (BENCHMARKS.md has the table and what limits each):
//! - plugin load: compile, disk-cache hit, memory hit, fresh instance;
//! - per-notification delivery cost, wasm plugin vs native Rust handler doing the same work
//!   (nothing, counting labels from metadata, full JSON parse), one at a time and in batches;
//! - idle instance memory, a stuck call's cut time against its deadline;
//! - heap per cached object vs kube-runtime's Store;
//! - hot reload latency (call and file change, cache hit and miss);
//! - the first-load tier: each example plugin on its Winch and its Cranelift code, compile and
//!   per-notification cost (`bench/tiers.rs`);
//! - the informer core vs kube-runtime's watcher + reflector over the test API server;
//! - pipeline throughput into 1, 8, 64 listeners, wasm vs native (`bench/pipeline.rs`);
//! - delivery latency p50 / p99 under steady load, alone and next to a stuck plugin, each on a
//!   thread of its own; and on the shared executor, beside busy and stuck plugins
//!   (`bench/fairness.rs`).
//!
//! `--callgrind` runs none of these: it prints the delivery rows' instructions per notification,
//! host and guest apart, under `valgrind --tool=callgrind` (`bench/callgrind.rs`).

use std::path::PathBuf;

use anyhow::bail;

#[path = "bench/callgrind.rs"]
mod callgrind;
#[path = "bench/common.rs"]
mod common;
#[path = "bench/delivery.rs"]
mod delivery;
#[path = "bench/fairness.rs"]
mod fairness;
#[path = "bench/informer_core.rs"]
mod informer_core;
#[path = "bench/isolation.rs"]
mod isolation;
#[path = "bench/load.rs"]
mod load;
#[path = "bench/memory.rs"]
mod memory;
#[path = "bench/pipeline.rs"]
mod pipeline;
#[path = "bench/process.rs"]
mod process;
#[path = "bench/reload.rs"]
mod reload;
#[path = "bench/scale.rs"]
mod scale;
#[path = "bench/smaps.rs"]
mod smaps;
#[path = "bench/soak.rs"]
mod soak;
#[path = "bench/tiers.rs"]
mod tiers;
use common::*;

use wisp_host::plugin::{EngineConfig, PluginEngine};

struct Args {
    quick: bool,
    plugin_dir: PathBuf,
    /// Sections to run (all when empty).
    only: Vec<String>,
    /// What runs: the sections, the instruction counts, or their child under valgrind.
    mode: Mode,
}

enum Mode {
    Sections,
    /// `--callgrind`: the delivery rows' instruction counts (`bench/callgrind.rs`).
    Callgrind,
    /// `--callgrind-child CACHE`: the rows under callgrind, modules from the cache `CACHE`.
    CallgrindChild(PathBuf),
    /// `--callgrind-prepare CACHE`: compiles the modules into `CACHE` under `valgrind
    /// --tool=none` (its CPU's features are in the artifacts' compatibility key).
    CallgrindPrepare(PathBuf),
}

/// The sections, in the order they run.
const SECTIONS: [&str; 12] = [
    "load",
    "delivery",
    "isolation",
    "memory",
    "reload",
    "tiers",
    "core",
    "pipeline",
    "latency",
    "scale",
    "process",
    "soak",
];

impl Args {
    fn runs(&self, section: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|s| s == section)
    }
}

fn args() -> anyhow::Result<Args> {
    let mut quick = false;
    let mut only = Vec::new();
    let mut mode = Mode::Sections;
    let mut plugin_dir = std::env::var_os("WISP_PLUGIN_DIR").map(PathBuf::from);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--plugins" => plugin_dir = it.next().map(PathBuf::from),
            "--callgrind" => mode = Mode::Callgrind,
            "--callgrind-child" => {
                mode = Mode::CallgrindChild(it.next().map(PathBuf::from).unwrap_or_default())
            }
            "--callgrind-prepare" => {
                mode = Mode::CallgrindPrepare(it.next().map(PathBuf::from).unwrap_or_default())
            }
            "--only" => {
                for s in it.next().unwrap_or_default().split(',') {
                    if !SECTIONS.contains(&s) {
                        bail!(
                            "--only: unknown section {s:?} (sections: {})",
                            SECTIONS.join(", ")
                        );
                    }
                    only.push(s.to_owned());
                }
            }
            "-h" | "--help" => {
                println!(
                    "usage: wisp-bench [--quick] [--plugins DIR] [--only SECTION,...] [--callgrind]\n\nDIR holds the compiled plugins (default: $WISP_PLUGIN_DIR or plugins/dist).\nSECTION: {} (default: all but soak, which runs 30 min, WISP_SOAK_MINUTES).\n--callgrind: instead of the sections, the delivery rows' instructions per notification\n(host and guest apart) under valgrind --tool=callgrind, modules from a precompiled cache;\nwith --only tiers, the audit-log examples on their Winch and Cranelift code instead\n(WISP_TIERS_ONLY=-js: only the plugins whose file names contain -js).",
                    SECTIONS.join(", ")
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    let plugin_dir = plugin_dir
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist"));
    Ok(Args {
        quick,
        plugin_dir,
        only,
        mode,
    })
}

fn main() -> anyhow::Result<()> {
    let a = args()?;
    match &a.mode {
        Mode::Sections => {}
        Mode::Callgrind => return callgrind::callgrind_figures(&a),
        Mode::CallgrindChild(cache) => return callgrind::child(&a, cache),
        Mode::CallgrindPrepare(cache) => return callgrind::prepare(&a, cache),
    }
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    println!("# wisp-bench{}", if a.quick { " (quick)" } else { "" });
    println!(
        "machine: {} cores; plugins from {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        a.plugin_dir.display()
    );
    if a.runs("load") {
        load::load_figures(&a)?;
    }
    if a.runs("delivery") {
        delivery::delivery_figures(&a)?;
    }
    if a.runs("isolation") {
        isolation::isolation_figures(&a)?;
    }
    let rt = tokio::runtime::Runtime::new()?;
    if a.runs("memory") {
        // First: its resident-memory figure needs a heap that has not been larger before.
        rt.block_on(memory::idle_plugin_figures(&a))?;
        memory::memory_figures(&a)?;
    }
    if a.runs("reload") {
        rt.block_on(reload::reload_figures(&a))?;
    }
    if a.runs("tiers") {
        tiers::tier_figures(&a)?;
    }
    if a.runs("core") {
        rt.block_on(informer_core::core_figures(&a))?;
    }
    let engine = PluginEngine::new(EngineConfig {
        cache_dir: None,
        ..EngineConfig::default()
    })?;
    if a.runs("pipeline") {
        rt.block_on(pipeline::pipeline_figures(&engine, &a.plugin_dir, a.quick))?;
    }
    if a.runs("latency") {
        rt.block_on(pipeline::latency_figures(&engine, &a.plugin_dir, a.quick))?;
        rt.block_on(fairness::fairness_figures(&engine, &a.plugin_dir, a.quick))?;
    }
    if a.runs("scale") {
        rt.block_on(scale::scale_figures(a.quick))?;
    }
    if a.runs("process") {
        process::process_figures(&a)?;
    }
    // Half an hour: only when named.
    if a.only.iter().any(|s| s == "soak") {
        rt.block_on(soak::soak_figures(&a))?;
    }
    Ok(())
}
