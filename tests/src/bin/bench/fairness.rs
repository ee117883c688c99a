//! Fairness on the shared executor: a healthy plugin's delivery latency (write at the test API
//! server to the end of its call) when it shares the workers with busy plugins, and with plugins
//! stuck to their deadline on every new pod (quarantine off), as ratios against the same plugin
//! alone on the same workers, in the same run. The `latency` section's other table keeps each
//! plugin on a thread of its own; this one is the shipped placement.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wisp_host::informer::shared_informer::InformerConfig;
use wisp_host::informer::{
    Executor, GroupId, HandlerOptions, HandlerRegistration, Placement, SharedInformer,
};
use wisp_host::plugin::status::PluginCounters;
use wisp_host::plugin::{PluginEngine, PluginHandle, PluginManager, PluginSpec};

use super::pipeline::{Clock, TimedWasm};
use super::{percentile, wait_until};

/// Workers of the executor the plugins share: the measurement (20 plugins on 2 workers,
/// 2 of them stuck), whatever this machine's cores.
const WORKERS: usize = 2;

/// Who shares the workers with the bystander.
#[derive(Clone, Copy)]
struct Neighbours {
    /// Healthy plugins doing the same work as the bystander (a full parse) on every pod.
    busy: usize,
    /// Plugins spinning to their deadline (50 ms) on every new pod, never quarantined.
    stuck: usize,
}

impl Neighbours {
    fn describe(self) -> String {
        match (self.busy, self.stuck) {
            (0, 0) => "alone (baseline)".into(),
            (b, 0) => format!("beside {b} busy plugins"),
            (0, s) => format!("beside {s} stuck plugins"),
            (b, s) => format!("beside {b} busy and {s} stuck plugins"),
        }
    }
}

/// What one run measured.
struct Figures {
    p50: Duration,
    p99: Duration,
    /// Notifications the bystander handled.
    handled: usize,
    /// Calls of the stuck plugins cut at their deadline.
    cut: u64,
}

/// A plugin on pods: `module` from `plugin_dir`, with `settings`.
fn on_pods(plugin_dir: &Path, name: String, module: &str, settings: Value) -> PluginSpec {
    let mut s = PluginSpec::new(name, plugin_dir.join(module), &["pods"]);
    s.settings = settings;
    s
}

/// Starts the neighbours: `bench` plugins parsing every pod, `test_faults` plugins spinning on
/// every pod.
fn neighbours(
    manager: &PluginManager,
    plugin_dir: &Path,
    n: Neighbours,
) -> anyhow::Result<(Vec<PluginHandle>, Vec<PluginHandle>)> {
    let start = |spec: PluginSpec| manager.start(spec).map_err(|e| anyhow::anyhow!("{e}"));
    let busy = (0..n.busy)
        .map(|j| {
            let parse = json!({ "work": "parse" });
            start(on_pods(
                plugin_dir,
                format!("busy-{j}"),
                "bench.wasm",
                parse,
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    let stuck = (0..n.stuck)
        .map(|j| {
            let spin = json!({ "mode": "spin" });
            let mut s = on_pods(plugin_dir, format!("stuck-{j}"), "test_faults.wasm", spin);
            s.on_failure.quarantine_after = 0;
            start(s)
        })
        .collect::<anyhow::Result<_>>()?;
    Ok((busy, stuck))
}

/// The bystander: the bench plugin parsing every pod, on the executor in a group of its own as
/// a plugin is (`PluginManager::attach`), stamping when each of its batches is handled.
fn bystander(
    manager: &PluginManager,
    inf: &SharedInformer,
    plugin_dir: &Path,
    clock: &Arc<Clock>,
) -> anyhow::Result<HandlerRegistration> {
    let parse = json!({ "work": "parse" });
    let spec = on_pods(plugin_dir, "bystander".into(), "bench.wasm", parse);
    let rt = manager
        .check(&spec)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .into_runtime(manager.engine().clone());
    let options = HandlerOptions {
        batch_max: Some(spec.batch_max),
        placement: Placement::Shared {
            group: Some(GroupId::new()),
        },
        ..HandlerOptions::default()
    };
    let clock = clock.clone();
    let handler = Box::new(TimedWasm { rt, clock });
    Ok(inf.add_event_handler_with_options("bystander", handler, options)?)
}

/// Steady load: `rate` new pods per second in ticks of 10 ms, for `secs` seconds, each stamped
/// on `clock` as it is written.
async fn new_pods(
    server: &wisp_tests::TestApiServer,
    clock: &Clock,
    (rate, secs): (u64, u64),
) -> anyhow::Result<()> {
    let per_tick = (rate / 100).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let (mut k, end) = (0u64, Instant::now() + Duration::from_secs(secs));
    while Instant::now() < end {
        tick.tick().await;
        for _ in 0..per_tick {
            let name = format!("new-{k}");
            k += 1;
            clock.wrote(&name);
            server.create(wisp_tests::pod("default", &name))?;
        }
    }
    Ok(())
}

/// Bystander latency p50 / p99 under `load` (new pods per second, seconds), on [`WORKERS`]
/// workers shared with `n`.
async fn shared_run(
    engine: &Arc<PluginEngine>,
    plugin_dir: &Path,
    n: Neighbours,
    load: (u64, u64),
) -> anyhow::Result<Figures> {
    let server = wisp_tests::TestApiServer::start().await?;
    let source =
        wisp_host::source::kube::KubeSource::new(server.client_no_retry(), "v1", "Pod", None);
    let executor = Executor::new(WORKERS)?;
    let config = InformerConfig {
        executor: Some(executor.clone()),
        ..InformerConfig::default()
    };
    let inf = SharedInformer::new("pods", Arc::new(source), config);
    let mut manager = PluginManager::new(engine.clone());
    manager.add_informer(inf.clone());
    let clock = Arc::new(Clock::default());
    let reg = bystander(&manager, &inf, plugin_dir, &clock)?;
    let (busy, stuck) = neighbours(&manager, plugin_dir, n)?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(inf.clone().run(async {
        let _ = stop_rx.await;
    }));
    wait_until("synced", Duration::from_secs(120), || reg.has_synced()).await?;
    new_pods(&server, &clock, load).await?;
    wait_until("the bystander drained", Duration::from_secs(600), || {
        let s = reg.stats();
        s.depth == 0 && s.delivered == s.queued
    })
    .await?;
    let cut = stuck
        .iter()
        .map(|h| PluginCounters::get(&h.status().counters.deadline_hits))
        .sum();
    let _ = stop_tx.send(());
    for h in busy.iter().chain(&stuck) {
        h.stop();
    }
    inf.remove_event_handler(&reg);
    executor.shutdown();
    server.shutdown();
    let l = clock.latencies();
    Ok(Figures {
        p50: percentile(l.clone(), 0.5),
        p99: percentile(l.clone(), 0.99),
        handled: l.len(),
        cut,
    })
}

/// Bystander latency on the shared executor: alone, beside busy plugins, beside stuck ones.
pub async fn fairness_figures(
    engine: &Arc<PluginEngine>,
    plugin_dir: &Path,
    quick: bool,
) -> anyhow::Result<()> {
    let load = if quick { (100, 2) } else { (100, 10) };
    println!(
        "\n## Delivery latency on the shared executor ({WORKERS} workers; {} new pods/s for {} s, parse work; stuck plugins spin to their 50 ms deadline on every new pod, quarantine off)\n",
        load.0, load.1
    );
    println!("| bystander plugin | p50 / p99 | p99 / alone | notifications | stuck calls cut |");
    println!("|---|---|---|---|---|");
    let rows = [(0, 0), (18, 0), (0, 2), (18, 2)];
    let mut alone = None;
    for (busy, stuck) in rows {
        let n = Neighbours { busy, stuck };
        let f = shared_run(engine, plugin_dir, n, load).await?;
        let base = *alone.get_or_insert(f.p99);
        println!(
            "| {} | {} / {} | {:.1}x | {} | {} |",
            n.describe(),
            super::ms(f.p50),
            super::ms(f.p99),
            f.p99.as_secs_f64() / base.as_secs_f64().max(1e-9),
            f.handled,
            f.cut,
        );
    }
    Ok(())
}
