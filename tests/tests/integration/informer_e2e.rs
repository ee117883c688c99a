//! End to end: 10,000 objects listed in pages, 5,000 changes while watching with two forced watch
//! drops and one compaction while the watch was down. The cache must end equal to the server's
//! state and every handler must have seen a consistent history (tombstones for missed deletes).

use crate::common;

use std::time::Duration;

use common::churn::Cluster;
use common::*;
use wisp_host::informer::Notification;
use wisp_host::informer::handler::Recorder;
use wisp_tests::{TestApiServer, Verb, pod};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_objects_and_five_thousand_changes_through_drops_and_compaction_stay_consistent()
 {
    let server = TestApiServer::start().await.unwrap();
    server.faults().bookmark_interval(Duration::from_millis(50));
    let mut live = Vec::new();
    for i in 0..10_000 {
        let (ns, name) = (format!("ns-{}", i % 10), format!("pod-{i}"));
        server.create(pod(&ns, &name)).unwrap();
        live.push((ns, name));
    }
    let mut cluster = Cluster::new(server.clone(), live, 42);

    let inf = pod_informer(&server, fast_config());
    let early = Recorder::new();
    let early_reg = inf
        .add_event_handler("early", Box::new(early.clone()), Duration::ZERO)
        .unwrap();
    let _stop = start(&inf);
    until("synced", || early_reg.has_synced()).await;
    assert_eq!(inf.cache().len(), 10_000);
    assert_eq!(
        requests_of(&server, Verb::List).len(),
        20,
        "listed in 20 pages of 500"
    );
    watching(&server, &inf).await;

    let late = Recorder::new();
    let mut late_reg = None;
    let mut deleted_while_down: Vec<String> = Vec::new();
    for n in 1..=5_000u64 {
        match n {
            1_000 | 3_000 => {
                watching(&server, &inf).await;
                server.close_watches();
            }
            2_500 => {
                late_reg = Some(
                    inf.add_event_handler("late", Box::new(late.clone()), Duration::ZERO)
                        .unwrap(),
                )
            }
            4_000 => {
                // The watch goes down; 200 changes happen; history is compacted past them.
                deleted_while_down = while_watch_down(&server, &inf, || {
                    let before = cluster.deleted.len();
                    let first_new = cluster.next_name;
                    for m in 0..200 {
                        cluster.change(100_000 + m);
                    }
                    // Objects both created and deleted while down were never known: no tombstone.
                    let known_before = |k: &String| {
                        k.rsplit_once("/new-")
                            .is_none_or(|(_, n)| n.parse::<u64>().is_ok_and(|n| n < first_new))
                    };
                    cluster.deleted[before..]
                        .iter()
                        .filter(|k| known_before(k))
                        .cloned()
                        .collect()
                })
                .await;
            }
            _ => {}
        }
        cluster.change(n);
        if n % 500 == 0 {
            tokio::task::yield_now().await;
        }
    }
    assert!(
        !deleted_while_down.is_empty(),
        "the scenario deletes objects while the watch is down"
    );

    let want = server_state(&server);
    until("cache equals the server", || cache_state(&inf) == want).await;
    let late_reg = late_reg.unwrap();
    for (name, rec) in [("early", &early), ("late", &late)] {
        until_replayed(name, rec, &want).await;
    }
    until("handlers caught up", || {
        let (e, l) = (early_reg.stats(), late_reg.stats());
        e.depth == 0 && l.depth == 0 && e.delivered == e.queued && l.delivered == l.queued
    })
    .await;

    for (name, rec) in [("early", &early), ("late", &late)] {
        let seen = rec.deliveries();
        let tombstones = tombstone_keys(&seen);
        for key in &deleted_while_down {
            assert!(
                tombstones.contains(key),
                "{name}: {key} was deleted while the watch was down: expected a tombstone"
            );
        }
        let deleted: std::collections::BTreeSet<&String> = cluster.deleted.iter().collect();
        assert!(
            tombstones.iter().all(|k| deleted.contains(k)),
            "{name}: a tombstone only for an object really deleted"
        );
    }
    let late_initial = late
        .deliveries()
        .iter()
        .take_while(|d| {
            matches!(
                d.notification,
                Notification::Add {
                    initial_list: true,
                    ..
                }
            )
        })
        .count();
    assert!(
        late_initial > 9_000,
        "the late handler started with a replay of the cache ({late_initial})"
    );
    assert!(late_reg.has_synced());
    assert!(inf.stats().lists >= 2, "the compaction forced a relist");
    eprintln!(
        "lists: {}, watches: {}, deletes: {}, missed while down: {}",
        inf.stats().lists,
        inf.stats().watches,
        cluster.deletes,
        deleted_while_down.len()
    );
}

/// End to end: an informer (and so a plugin) sees a Pod's graceful deletion as a cluster shows
/// it: an update that sets `deletionTimestamp`, then the delete.
#[tokio::test]
async fn an_informer_sees_a_graceful_pod_delete_as_update_then_delete() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.faults().pod_stop_time(Duration::from_millis(200));
    server.create(pod("default", "web-1"))?;
    let inf = pod_informer(&server, fast_config());
    let rec = Recorder::new();
    let reg = inf.add_event_handler("h", Box::new(rec.clone()), Duration::ZERO)?;
    let _stop = start(&inf);
    until("synced", || reg.has_synced()).await;
    let pods: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("", "v1", "Pod")),
    );
    pods.delete("web-1", &kube::api::DeleteParams::default())
        .await?;
    until("the delete", || {
        rec.deliveries()
            .iter()
            .any(|d| matches!(d.notification, Notification::Delete { .. }))
    })
    .await;
    let seen: Vec<(&str, bool)> = rec
        .deliveries()
        .iter()
        .map(|d| {
            let marked = d
                .notification
                .object()
                .to_value()
                .pointer("/metadata/deletionTimestamp")
                .is_some();
            let kind = match &d.notification {
                Notification::Add { .. } => "add",
                Notification::Update { .. } => "update",
                Notification::Delete { obj } if obj.is_tombstone() => "tombstone",
                Notification::Delete { .. } => "delete",
            };
            (kind, marked)
        })
        .collect();
    assert_eq!(seen, [("add", false), ("update", true), ("delete", true)]);
    Ok(())
}
