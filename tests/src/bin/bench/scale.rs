//! Scale-out: what one replica costs and carries with 1, 2 and 3 replicas in `sharding: {mode:
//! shards}`, over one test API server of N pods. Each replica is the informer of a `pods`
//! informer with its share of the 64 hash slots (the assignment of members `r0..rk`), listing and
//! watching through `shardSelector` with a real `kube::Client`; the election is left out (its
//! cost is a Lease update every `retryPeriod`). Per replica: objects held, heap, list time, and
//! the rate at which it takes M watch updates spread over every pod (held back while written, then
//! replayed from the server's history, as in the core section).

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use serde_json::json;
use wisp_host::informer::SharedInformer;
use wisp_host::scale::shards::{Ranges, ShardField, ShardView, assignment};
use wisp_host::source::kube::KubeSource;

use super::{COUNTING, Counter, Seen, live, ms, wait_until};

pub async fn scale_figures(quick: bool) -> anyhow::Result<()> {
    // 300,000 pods: the in-process test API server keeps each version as its JSON only (about
    // 5 KB per pod with its indexes and history entry; the core section prints the figure), so
    // they and three replicas' caches fit this machine's 24 GiB.
    let (n, m) = if quick {
        (3_000u64, 3_000u64)
    } else {
        (300_000, 100_000)
    };
    let server = wisp_tests::TestApiServer::start().await?;
    server.history_limit((n + m + 10) as usize);
    for i in 0..n {
        server.create(wisp_tests::pod(
            &format!("ns-{}", i % 50),
            &format!("web-{i}"),
        ))?;
    }
    println!(
        "\n## Scale-out: per replica, `mode: shards` ({n} pods, then {m} watch updates over all of them)\n"
    );
    println!(
        "| replicas | objects per replica | heap per replica (per object) | list (slowest replica) | watch events/s per replica | events/s, all replicas |"
    );
    println!("|---|---|---|---|---|---|");
    let mut round = 0u64;
    for k in 1..=3usize {
        let members: Vec<String> = (0..k).map(|i| format!("r{i}")).collect();
        let parts = assignment(&members);
        // Heap counted from here to the end of the lists: the replicas' caches, sources and
        // queues (the server's own allocations for the lists are freed by then).
        COUNTING.store(true, Relaxed);
        let before = live();
        // Watches are held back (429) until the updates are written, so each replica's watch
        // replays them from the server's history as fast as it reads.
        server
            .faults()
            .fail_next(wisp_tests::Verb::Watch, 429, None, 1_000_000);
        let mut replicas = Vec::new();
        let started = Instant::now();
        for member in &members {
            let ranges = parts.get(member).cloned().unwrap_or_else(Ranges::none);
            let view = ShardView::new(ShardField::Uid, ranges);
            let source = KubeSource::new(server.client_no_retry(), "v1", "Pod", None).sharded(view);
            // A paginated list (the streaming list is a watch, which is held back below).
            let settings = wisp_host::informer::shared_informer::InformerConfig {
                reflector: wisp_host::informer::reflector::ReflectorConfig {
                    use_watch_list: false,
                    // One replica holds all 300,000 pods (~2.8 KB each as the list caps count
                    // them): over the default 512 MiB a whole list may take. A cluster of this
                    // size would set `maxListTotalSize: 2Gi` likewise.
                    list_caps: wisp_host::informer::lister_watcher::ListCaps {
                        bytes: 2 << 30,
                        ..Default::default()
                    },
                    ..Default::default()
                },
                ..Default::default()
            };
            let inf = SharedInformer::new("pods", Arc::new(source), settings);
            let seen = Arc::new(Seen::default());
            let reg =
                inf.add_event_handler("count", Box::new(Counter(seen.clone())), Duration::ZERO)?;
            let (stop, rx) = tokio::sync::oneshot::channel::<()>();
            tokio::spawn(inf.clone().run(async {
                let _ = rx.await;
            }));
            replicas.push((inf, reg, seen, stop));
        }
        wait_until("sharded lists", Duration::from_secs(900), || {
            replicas.iter().all(|(_, reg, _, _)| reg.has_synced())
                && replicas
                    .iter()
                    .map(|(_, _, s, _)| s.adds.load(Relaxed))
                    .sum::<u64>()
                    >= n
        })
        .await?;
        let list = started.elapsed();
        let held: Vec<usize> = replicas.iter().map(|(i, ..)| i.cache().len()).collect();
        let heap = (live() - before).max(0) as f64 / k as f64;
        COUNTING.store(false, Relaxed);
        round += 1;
        for j in 0..m {
            let i = j % n;
            let mut p = wisp_tests::pod(&format!("ns-{}", i % 50), &format!("web-{i}"));
            p["metadata"]["annotations"]["bench/round"] = json!(format!("{round}-{j}"));
            server.update(p)?;
        }
        server.faults().reset();
        wait_until("sharded watches", Duration::from_secs(900), || {
            replicas
                .iter()
                .map(|(_, _, s, _)| s.updates.load(Relaxed))
                .sum::<u64>()
                >= m
        })
        .await?;
        let rates: Vec<f64> = replicas
            .iter()
            .map(|(_, _, s, _)| {
                s.updates.load(Relaxed) as f64 / s.watch_time().as_secs_f64().max(1e-9)
            })
            .collect();
        let per = rates.iter().sum::<f64>() / k as f64;
        let slowest = rates.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "| {k} | {} | {:.1} MiB ({:.0} B) | {} | {per:.0} (slowest {slowest:.0}) | {:.0} |",
            held.iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(" / "),
            heap / (1 << 20) as f64,
            heap * k as f64 / n as f64,
            ms(list),
            rates.iter().sum::<f64>(),
        );
        for (_, _, _, stop) in replicas {
            let _ = stop.send(());
        }
        // The stopped replicas free their caches before the next round counts its own.
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    server.shutdown();
    Ok(())
}
