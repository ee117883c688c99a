//! Whole-pipeline figures: throughput into 1, 8 and 64 listeners (wasm plugins vs native handlers
//! doing the same work) from an in-process source, and delivery latency from a write at the test
//! API server to the end of the plugin's call, under steady load, for a healthy plugin alone and
//! next to a stuck one.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use wisp_host::informer::shared_informer::InformerConfig;
use wisp_host::informer::{Delivery, EventHandler, HandlerOptions, SharedInformer};
use wisp_host::plugin::runtime::PluginRuntime;
use wisp_host::plugin::status::PluginCounters;
use wisp_host::plugin::{PluginEngine, PluginManager, PluginSpec};
use wisp_host::source::memory::MemorySource;

use super::{Native, percentile, wait_until};

/// A pod of the fixture, with a changed annotation for update `k`.
fn pod(i: u64, k: u64) -> serde_json::Value {
    let mut p = wisp_tests::pod(&format!("ns-{}", i % 50), &format!("web-{i}"));
    p["metadata"]["annotations"]["bench/k"] = json!(k.to_string());
    p
}

/// A native handler doing `work`, counting what it handled.
struct CountingNative {
    inner: Native,
    done: Arc<AtomicU64>,
}

impl EventHandler for CountingNative {
    fn handle(&mut self, batch: &[Delivery]) {
        self.inner.handle(batch);
        self.done.fetch_add(batch.len() as u64, Relaxed);
    }
}

/// Events per second through the whole pipeline (source, reflector, DeltaFIFO, indexer,
/// processor, one queue per listener; native handlers on a thread each, plugins on the shared
/// executor's workers) into `listeners` handlers: the time from the
/// first of `m` updates until every listener has handled all of them.
async fn throughput(
    engine: &Arc<PluginEngine>,
    plugin_dir: &Path,
    listeners: usize,
    work: &'static str,
    wasm: bool,
    (n, m): (u64, u64),
) -> anyhow::Result<(f64, usize)> {
    let src = MemorySource::new();
    for i in 0..n {
        src.apply(pod(i, 0))?;
    }
    let inf = SharedInformer::new("pods", Arc::new(src.clone()), InformerConfig::default());
    let mut done: Vec<Box<dyn Fn() -> u64>> = Vec::new();
    let mut plugins = Vec::new();
    if wasm {
        let mut manager = PluginManager::new(engine.clone());
        manager.add_informer(inf.clone());
        for j in 0..listeners {
            let mut spec = PluginSpec::new(
                format!("bench-{j}"),
                plugin_dir.join("bench.wasm"),
                &["pods"],
            );
            spec.settings = json!({ "work": work });
            let h = Arc::new(
                manager
                    .start(spec)
                    .map_err(|e| anyhow::anyhow!("starting the bench plugin: {e}"))?,
            );
            let hc = h.clone();
            done.push(Box::new(move || {
                PluginCounters::get(&hc.status().counters.delivered)
            }));
            plugins.push(h);
        }
    } else {
        for j in 0..listeners {
            let count = Arc::new(AtomicU64::new(0));
            let handler = CountingNative {
                inner: Native { work, total: 0 },
                done: count.clone(),
            };
            inf.add_event_handler(format!("native-{j}"), Box::new(handler), Duration::ZERO)?;
            done.push(Box::new(move || count.load(Relaxed)));
        }
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(inf.clone().run(async {
        let _ = stop_rx.await;
    }));
    let all = |target: u64| done.iter().all(|d| d() >= target);
    wait_until("initial list handled", Duration::from_secs(600), || all(n)).await?;
    let start = Instant::now();
    for k in 0..m {
        src.apply(pod(k % n, k + 1))?;
    }
    wait_until("updates handled", Duration::from_secs(600), || all(n + m)).await?;
    let took = start.elapsed();
    let threads = threads();
    let _ = stop_tx.send(());
    for p in &plugins {
        let failed = PluginCounters::get(&p.status().counters.failed);
        if failed > 0 {
            anyhow::bail!("{} failed {failed} notifications", p.name());
        }
        p.stop();
    }
    Ok((m as f64 / took.as_secs_f64().max(1e-9), threads))
}

/// Threads of this process now (`Threads:` of /proc/self/status; 0 where unreadable).
fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Throughput into 1, 8, 64, 256 and 1,000 listeners, wasm vs native.
pub async fn pipeline_figures(
    engine: &Arc<PluginEngine>,
    plugin_dir: &Path,
    quick: bool,
) -> anyhow::Result<()> {
    let (n, m) = if quick { (500, 2_000) } else { (5_000, 20_000) };
    // Hundreds of listeners: fewer objects, so each run stays within a minute.
    let (n_many, m_many) = if quick { (100, 400) } else { (500, 2_000) };
    println!(
        "\n## Pipeline throughput into L listeners (in-process source; up to 64 listeners {n} pods listed then {m} updates, 256 and 1,000 listeners {n_many} then {m_many}; each update goes to every listener; wasm plugins run on the executor's workers, native handlers on a thread each)\n"
    );
    println!(
        "| listeners | work | native handlers (baseline), events/s | wasm plugins, events/s | ratio | threads native / wasm |"
    );
    // (The producer is in the same process: it turns each update into an object, about 30k/s
    // here, which bounds the 1-listener figures on both sides.)
    println!("|---|---|---|---|---|---|");
    for listeners in [1usize, 8, 64, 256, 1000] {
        let sizes = if listeners > 64 {
            (n_many, m_many)
        } else {
            (n, m)
        };
        for work in ["labels", "meta", "parse", "pod"] {
            let (native, nt) =
                throughput(engine, plugin_dir, listeners, work, false, sizes).await?;
            let (wasm, wt) = throughput(engine, plugin_dir, listeners, work, true, sizes).await?;
            println!(
                "| {listeners} | {work} | {native:.0} | {wasm:.0} | {:.2}x | {nt} / {wt} |",
                wasm / native
            );
        }
    }
    Ok(())
}

/// When each pod was last written (by name), and how long each delivery took to be handled.
#[derive(Default)]
pub(crate) struct Clock {
    written: Mutex<HashMap<String, Instant>>,
    latencies: Mutex<Vec<Duration>>,
}

impl Clock {
    /// `name` is written now.
    pub(crate) fn wrote(&self, name: &str) {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        written.insert(name.to_owned(), Instant::now());
    }

    /// The latencies so far.
    pub(crate) fn latencies(&self) -> Vec<Duration> {
        let l = self.latencies.lock().unwrap_or_else(|p| p.into_inner());
        l.clone()
    }

    fn handled(&self, batch: &[Delivery]) {
        let now = Instant::now();
        let written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let mut lat = self.latencies.lock().unwrap_or_else(|p| p.into_inner());
        for d in batch {
            if let Some(t) = written.get(d.notification.object().meta().name()) {
                lat.push(now - *t);
            }
        }
    }
}

/// A plugin runtime driven like the host's own handler, stamping when each batch is handled.
pub(crate) struct TimedWasm {
    pub(crate) rt: PluginRuntime,
    pub(crate) clock: Arc<Clock>,
}

impl EventHandler for TimedWasm {
    fn handle(&mut self, batch: &[Delivery]) {
        self.rt.handle("pods", batch);
        self.clock.handled(batch);
    }
}

struct TimedNative {
    inner: Native,
    clock: Arc<Clock>,
}

impl EventHandler for TimedNative {
    fn handle(&mut self, batch: &[Delivery]) {
        self.inner.handle(batch);
        self.clock.handled(batch);
    }
}

/// p50 and p99 from write to handled, under `rate` updates per second for `secs` seconds, with or
/// without a stuck neighbour (a plugin whose calls on a tenth of the pods spin to the deadline).
async fn latency_run(
    engine: &Arc<PluginEngine>,
    plugin_dir: &Path,
    stuck_neighbour: bool,
    (pods, rate, secs): (u64, u64, u64),
) -> anyhow::Result<((Duration, Duration), (Duration, Duration), usize)> {
    let server = wisp_tests::TestApiServer::start().await?;
    for i in 0..pods {
        server.create(pod(i, 0))?;
    }
    let source =
        wisp_host::source::kube::KubeSource::new(server.client_no_retry(), "v1", "Pod", None);
    let inf = SharedInformer::new("pods", Arc::new(source), InformerConfig::default());
    let mut manager = PluginManager::new(engine.clone());
    manager.add_informer(inf.clone());
    let (native_clock, wasm_clock) = (Arc::new(Clock::default()), Arc::new(Clock::default()));
    let mut spec = PluginSpec::new("healthy", plugin_dir.join("bench.wasm"), &["pods"]);
    spec.settings = json!({ "work": "parse" });
    let rt = manager
        .check(&spec)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .into_runtime(engine.clone());
    let wasm_reg = inf.add_event_handler_with_options(
        "healthy",
        Box::new(TimedWasm {
            rt,
            clock: wasm_clock.clone(),
        }),
        HandlerOptions {
            batch_max: Some(64),
            ..HandlerOptions::default()
        },
    )?;
    let native_reg = inf.add_event_handler(
        "native",
        Box::new(TimedNative {
            inner: Native {
                work: "parse",
                total: 0,
            },
            clock: native_clock.clone(),
        }),
        Duration::ZERO,
    )?;
    let mut stuck = None;
    if stuck_neighbour {
        let mut s = PluginSpec::new("stuck", plugin_dir.join("test_faults.wasm"), &["pods"]);
        // web-1, web-10..web-19, web-100..: about a tenth of the pods.
        s.settings = json!({"mode": "spin", "namePrefix": "web-1"});
        s.on_failure.quarantine_after = 0;
        stuck = Some(manager.start(s).map_err(|e| anyhow::anyhow!("{e}"))?);
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(inf.clone().run(async {
        let _ = stop_rx.await;
    }));
    wait_until("synced", Duration::from_secs(120), || {
        wasm_reg.has_synced() && native_reg.has_synced()
    })
    .await?;
    // Steady load: `rate` updates per second in ticks of 10 ms, for `secs` seconds.
    let per_tick = (rate / 100).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let mut k = 0u64;
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        tick.tick().await;
        for _ in 0..per_tick {
            let i = k % pods;
            k += 1;
            let name = format!("web-{i}");
            let at = Instant::now();
            for c in [&native_clock, &wasm_clock] {
                c.written
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.clone(), at);
            }
            server.update(pod(i, k))?;
        }
    }
    wait_until("drained", Duration::from_secs(120), || {
        let (w, n) = (wasm_reg.stats(), native_reg.stats());
        w.depth == 0 && n.depth == 0 && w.delivered == w.queued && n.delivered == n.queued
    })
    .await?;
    let _ = stop_tx.send(());
    server.shutdown();
    if let Some(s) = &stuck {
        s.stop();
    }
    let take = |c: &Clock| {
        let l = c
            .latencies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let n = l.len();
        ((percentile(l.clone(), 0.5), percentile(l, 0.99)), n)
    };
    let (native, _) = take(&native_clock);
    let (wasm, n) = take(&wasm_clock);
    Ok((native, wasm, n))
}

/// Delivery latency p50 / p99, alone and next to a stuck plugin.
pub async fn latency_figures(
    engine: &Arc<PluginEngine>,
    plugin_dir: &Path,
    quick: bool,
) -> anyhow::Result<()> {
    let load = if quick {
        (200, 500, 2)
    } else {
        (1_000, 1_000, 10)
    };
    println!(
        "\n## Delivery latency, write at the test API server to the end of the handler's call ({} pods, {} updates/s for {} s, parse work)\n",
        load.0, load.1, load.2
    );
    println!(
        "| setup | native handler p50 / p99 (baseline) | healthy wasm plugin p50 / p99 | notifications |"
    );
    println!("|---|---|---|---|");
    for stuck in [false, true] {
        let ((np50, np99), (wp50, wp99), n) = latency_run(engine, plugin_dir, stuck, load).await?;
        println!(
            "| {} | {} / {} | {} / {} | {n} |",
            if stuck {
                "next to a stuck plugin (a tenth of the pods spin to its 50 ms deadline)"
            } else {
                "alone"
            },
            super::ms(np50),
            super::ms(np99),
            super::ms(wp50),
            super::ms(wp99),
        );
    }
    Ok(())
}
