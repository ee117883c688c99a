//! The informer core vs kube-runtime's watcher + reflector over the test API server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::common::*;
use crate::Args;

/// The informer core vs kube-runtime's watcher + reflector, through the test API server over
/// loopback: a paginated list of N pods, then a watch that replays M updates from the server's
/// history (the watch is held back with 429s while the updates are written, so the replay runs
/// as fast as the consumer reads).
pub(crate) async fn core_figures(a: &Args) -> anyhow::Result<()> {
    use futures::StreamExt;
    use std::sync::atomic::Ordering::Relaxed;
    let (n, m) = if a.quick {
        (2_000u64, 5_000u64)
    } else {
        (100_000, 200_000)
    };
    let server = wisp_tests::TestApiServer::start().await?;
    server.history_limit((n + 3 * m + 10) as usize);
    for i in 0..n {
        server.create(wisp_tests::pod(
            &format!("ns-{}", i % 50),
            &format!("web-{i}"),
        ))?;
    }
    let write_updates = |round: u64| -> anyhow::Result<()> {
        for k in 0..m {
            let i = k % n;
            let mut p = wisp_tests::pod(&format!("ns-{}", i % 50), &format!("web-{i}"));
            p["metadata"]["annotations"]["bench/round"] = json!(format!("{round}-{k}"));
            server.update(p)?;
        }
        Ok(())
    };
    println!(
        "\n## Informer core vs kube-runtime ({n} pods listed in pages of 500, then {m} watch updates; one handler)\n"
    );
    println!("| consumer | list | list objects/s | watch events/s | ratio (events/s) |");
    println!("|---|---|---|---|---|");

    // kube-runtime watcher + reflector Store<DynamicObject>.
    server
        .faults()
        .fail_next(wisp_tests::Verb::Watch, 429, None, 1_000_000);
    let ar = kube::core::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::all_with(server.client_no_retry(), &ar);
    let writer =
        kube::runtime::reflector::store::Writer::<kube::api::DynamicObject>::new(ar.clone());
    let seen_k = Arc::new(Seen::default());
    let sk = seen_k.clone();
    let started = Instant::now();
    let listed_at: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let la = listed_at.clone();
    let stream = kube::runtime::reflector(
        writer,
        kube::runtime::watcher(
            api,
            kube::runtime::watcher::Config::default().page_size(500),
        ),
    );
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(kube::runtime::watcher::Event::InitApply(_)) => {
                    sk.adds.fetch_add(1, Relaxed);
                }
                Ok(kube::runtime::watcher::Event::InitDone) => {
                    if let Ok(mut l) = la.lock() {
                        *l = Some(Instant::now());
                    }
                }
                Ok(kube::runtime::watcher::Event::Apply(_)) => sk.update(),
                _ => {}
            }
        }
    });
    wait_until("kube-runtime list", Duration::from_secs(600), || {
        listed_at.lock().map(|l| l.is_some()).unwrap_or(false)
    })
    .await?;
    let k_list = listed_at
        .lock()
        .ok()
        .and_then(|l| *l)
        .map_or(Duration::ZERO, |t| t - started);
    write_updates(1)?;
    server.faults().reset();
    wait_until("kube-runtime watch", Duration::from_secs(600), || {
        seen_k.updates.load(Relaxed) >= m
    })
    .await?;
    task.abort();

    // Wisp informer (kube source), one native handler.
    server
        .faults()
        .fail_next(wisp_tests::Verb::Watch, 429, None, 1_000_000);
    let source =
        wisp_host::source::kube::KubeSource::new(server.client_no_retry(), "v1", "Pod", None);
    let inf =
        wisp_host::informer::SharedInformer::new("pods", Arc::new(source), Default::default());
    let seen_w = Arc::new(Seen::default());
    let reg = inf.add_event_handler("count", Box::new(Counter(seen_w.clone())), Duration::ZERO)?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let started = Instant::now();
    tokio::spawn(inf.clone().run(async {
        let _ = stop_rx.await;
    }));
    wait_until("wisp list", Duration::from_secs(600), || {
        reg.has_synced() && seen_w.adds.load(Relaxed) >= n
    })
    .await?;
    let w_list = started.elapsed();
    write_updates(2)?;
    server.faults().reset();
    wait_until("wisp watch", Duration::from_secs(600), || {
        seen_w.updates.load(Relaxed) >= m
    })
    .await?;
    let _ = stop_tx.send(());
    // Later sections must not share the cores with this server's watches and bookmarks.
    server.shutdown();
    drop(inf);

    let rate = |count: u64, d: Duration| count as f64 / d.as_secs_f64().max(1e-9);
    let (kl, kw) = (rate(n, k_list), rate(m, seen_k.watch_time()));
    let (wl, ww) = (rate(n, w_list), rate(m, seen_w.watch_time()));
    println!(
        "| kube-runtime watcher + reflector (baseline) | {} | {:.0} | {:.0} | 1.00x |",
        ms(k_list),
        kl,
        kw
    );
    println!(
        "| Wisp informer (reflector, DeltaFIFO, indexer, listener) | {} | {:.0} | {:.0} | {:.2}x list, {:.2}x watch (target >= 1.0x) |",
        ms(w_list),
        wl,
        ww,
        wl / kl,
        ww / kw
    );
    Ok(())
}
