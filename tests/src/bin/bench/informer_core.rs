//! The informer core vs kube-runtime's watcher + reflector over the test API server, in both list
//! modes (paginated list, streaming list), and the test API server's own heap per object.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{Config, Event};
use serde_json::json;
use wisp_tests::TestApiServer;

use super::common::*;
use crate::Args;

/// How a consumer lists before it watches.
#[derive(Clone, Copy)]
enum ListMode {
    /// Paginated list (pages of 500), then a watch from its resourceVersion.
    Paged,
    /// Streaming list: a watch with `sendInitialEvents=true` up to its end bookmark.
    Streaming,
}

impl ListMode {
    fn label(self) -> &'static str {
        match self {
            ListMode::Paged => "paged list",
            ListMode::Streaming => "streaming list",
        }
    }
}

/// One consumer's figures: time to a synced cache, and the replay's watch events per second.
struct Figures {
    list: Duration,
    watch: Duration,
}

/// The section: N pods, then per consumer and list mode a list into a synced cache, then a watch
/// replaying M updates from the server's history as fast as the consumer reads. The replay: once
/// the consumer has seen one live update (so its watch is an established one, not a "very short
/// watch"), the server closes every watch and answers re-watches with 429 while the M updates are
/// written, then lets the re-watch (from the consumer's last resourceVersion) through. Nothing
/// holds a list: a streaming list is a watch, and it runs to its end bookmark unhindered.
pub(crate) async fn core_figures(a: &Args) -> anyhow::Result<()> {
    let (n, m) = if a.quick {
        (2_000u64, 5_000u64)
    } else {
        (100_000, 200_000)
    };
    let server = TestApiServer::start().await?;
    server_heap(&server, n, m)?;
    // From here on only the replayed window has to stay (etcd's compaction window): every
    // consumer lists at the current resourceVersion and re-watches after its last one.
    server.history_limit((m + 10) as usize);
    println!(
        "\n## Informer core vs kube-runtime ({n} pods listed, then {m} watch updates replayed; one handler)\n"
    );
    println!(
        "| list mode | consumer | list | list objects/s | watch events/s | ratio (objects/s, events/s) |"
    );
    println!("|---|---|---|---|---|---|");
    let rate = |count: u64, d: Duration| count as f64 / d.as_secs_f64().max(1e-9);
    let mut round = 1;
    for mode in [ListMode::Paged, ListMode::Streaming] {
        let k = kube_runtime(&server, mode, n, m, &mut round).await?;
        let w = wisp(&server, mode, n, m, &mut round).await?;
        let (kl, kw) = (rate(n, k.list), rate(m, k.watch));
        let (wl, ww) = (rate(n, w.list), rate(m, w.watch));
        println!(
            "| {} | kube-runtime `watcher` + `reflector` (baseline) | {} | {kl:.0} | {kw:.0} | 1.00x |",
            mode.label(),
            ms(k.list)
        );
        println!(
            "| {} | Wisp informer (reflector, FIFO, indexer, listener) | {} | {wl:.0} | {ww:.0} | {:.2}x list, {:.2}x watch (target >= 1.0x) |",
            mode.label(),
            ms(w.list),
            wl / kl,
            ww / kw
        );
    }
    // Later sections must not share the cores with this server's watches and bookmarks.
    server.shutdown();
    Ok(())
}

/// The test API server's heap per stored object and per logged update (counting allocator,
/// the server's in-process store: objects, their serialized form, indexes, history).
fn server_heap(server: &TestApiServer, n: u64, m: u64) -> anyhow::Result<()> {
    server.history_limit((n + m + 10) as usize);
    COUNTING.store(true, Relaxed);
    let before = live();
    let created = create_pods(server, n);
    let after_create = live();
    let updated = created.and_then(|()| write_updates(server, n, m, 0));
    let after_update = live();
    // What the store kept per version before it kept the JSON only: a parsed tree beside it.
    let objects = server.objects("v1", "Pod");
    let trees =
        live() - after_update - (objects.capacity() * size_of::<serde_json::Value>()) as i64;
    COUNTING.store(false, Relaxed);
    drop(objects);
    updated?;
    println!("\n## Test API server heap ({n} pods, then {m} updates kept in its history)\n");
    println!("| what | heap | per item |");
    println!("|---|---|---|");
    println!(
        "| {n} pods created (objects, serialized form, indexes, history) | {:.1} MiB | {} B per pod |",
        (after_create - before) as f64 / 1048576.0,
        (after_create - before) / n as i64
    );
    println!(
        "| {m} updates (history: each new version, the previous one kept) | {:.1} MiB | {} B per update |",
        (after_update - after_create) as f64 / 1048576.0,
        (after_update - after_create) / m as i64
    );
    println!(
        "| a parsed `Value` of each pod (kept beside the JSON, per version, until issue 31) | {:.1} MiB | {} B per pod |",
        trees as f64 / 1048576.0,
        trees / n as i64
    );
    Ok(())
}

fn create_pods(server: &TestApiServer, n: u64) -> anyhow::Result<()> {
    for i in 0..n {
        server.create(wisp_tests::pod(
            &format!("ns-{}", i % 50),
            &format!("web-{i}"),
        ))?;
    }
    Ok(())
}

/// Updates pods 0..m (mod n) with an annotation naming the round.
fn write_updates(server: &TestApiServer, n: u64, m: u64, round: u64) -> anyhow::Result<()> {
    for k in 0..m {
        let i = k % n;
        let mut p = wisp_tests::pod(&format!("ns-{}", i % 50), &format!("web-{i}"));
        p["metadata"]["annotations"]["bench/round"] = json!(format!("{round}-{k}"));
        server.update(p)?;
    }
    Ok(())
}

/// Once the consumer has seen one live update: closes the watches, holds re-watches with 429s
/// while M updates are written, lets the re-watch through and waits for every update.
async fn replay(
    server: &TestApiServer,
    seen: &Seen,
    n: u64,
    m: u64,
    round: &mut u64,
) -> anyhow::Result<Duration> {
    *round += 1;
    write_updates(server, n, 1, *round)?;
    wait_until("the first live update", Duration::from_secs(600), || {
        seen.updates.load(Relaxed) >= 1
    })
    .await?;
    seen.restart();
    server
        .faults()
        .fail_next(wisp_tests::Verb::Watch, 429, None, 1_000_000);
    server.close_watches();
    write_updates(server, n, m, *round)?;
    server.faults().reset();
    wait_until("the replayed updates", Duration::from_secs(600), || {
        seen.updates.load(Relaxed) >= m
    })
    .await?;
    Ok(seen.watch_time())
}

/// kube-runtime's watcher (with its default backoff, as applications run it) into a reflector
/// `Store<DynamicObject>`.
async fn kube_runtime(
    server: &TestApiServer,
    mode: ListMode,
    n: u64,
    m: u64,
    round: &mut u64,
) -> anyhow::Result<Figures> {
    let ar = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::all_with(server.client_no_retry(), &ar);
    let writer =
        kube::runtime::reflector::store::Writer::<kube::api::DynamicObject>::new(ar.clone());
    let config = match mode {
        ListMode::Paged => Config::default().page_size(500),
        ListMode::Streaming => Config::default().streaming_lists(),
    };
    let seen = Arc::new(Seen::default());
    let listed_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let (sk, la) = (seen.clone(), listed_at.clone());
    let stream = kube::runtime::reflector(
        writer,
        kube::runtime::watcher(api, config).default_backoff(),
    );
    let started = Instant::now();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::InitApply(_)) => {
                    sk.adds.fetch_add(1, Relaxed);
                }
                Ok(Event::InitDone) => {
                    if let Ok(mut l) = la.lock() {
                        *l = Some(Instant::now());
                    }
                }
                Ok(Event::Apply(_)) => sk.update(),
                _ => {}
            }
        }
    });
    let synced = || listed_at.lock().ok().and_then(|l| *l);
    let result = async {
        wait_until("kube-runtime list", Duration::from_secs(600), || {
            synced().is_some()
        })
        .await?;
        let list = synced().map_or(Duration::ZERO, |t| t - started);
        let watch = replay(server, &seen, n, m, round).await?;
        Ok(Figures { list, watch })
    }
    .await;
    task.abort();
    let _ = task.await;
    result
}

/// The Wisp informer over the kube source, one native handler.
async fn wisp(
    server: &TestApiServer,
    mode: ListMode,
    n: u64,
    m: u64,
    round: &mut u64,
) -> anyhow::Result<Figures> {
    let source =
        wisp_host::source::kube::KubeSource::new(server.client_no_retry(), "v1", "Pod", None);
    let mut config = wisp_host::informer::shared_informer::InformerConfig::default();
    config.reflector.use_watch_list = matches!(mode, ListMode::Streaming);
    let inf = wisp_host::informer::SharedInformer::new("pods", Arc::new(source), config);
    let seen = Arc::new(Seen::default());
    let reg = inf.add_event_handler("count", Box::new(Counter(seen.clone())), Duration::ZERO)?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let started = Instant::now();
    let run = tokio::spawn(inf.clone().run(async {
        let _ = stop_rx.await;
    }));
    let result = async {
        wait_until("wisp list", Duration::from_secs(600), || {
            reg.has_synced() && seen.adds.load(Relaxed) >= n
        })
        .await?;
        let list = started.elapsed();
        let watch = replay(server, &seen, n, m, round).await?;
        Ok(Figures { list, watch })
    }
    .await;
    let _ = stop_tx.send(());
    let _ = run.await;
    drop(inf);
    result
}
