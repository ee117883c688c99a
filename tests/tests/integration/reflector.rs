//! Reflector behaviours (CONFORMANCE.md "Reflector"), driven through a real `kube::Client`
//! against the in-tree test API server.

use crate::common;

use std::time::Duration;

use common::*;
use wisp_host::informer::Notification;
use wisp_host::informer::SharedInformer;
use wisp_host::informer::handler::Recorder;
use wisp_host::informer::reflector::ReflectorConfig;
use wisp_host::informer::shared_informer::InformerConfig;
use wisp_host::source::kube::KubeSource;
use wisp_host::source::multi::MultiNamespace;
use wisp_tests::{Verb, config_map, pod};

#[tokio::test]
async fn first_list_asks_for_resource_version_0_in_pages_of_500_and_continuations_drop_it() {
    let server = server_with_pods(1200).await;
    let inf = pod_informer(&server, fast_config());
    let _stop = start(&inf);
    until("synced", || inf.has_synced()).await;
    assert_eq!(inf.cache().len(), 1200);
    let pages = requests_of(&server, Verb::List);
    assert_eq!(pages.len(), 3, "1200 objects in pages of 500");
    assert_eq!(rv_of(&pages[0]), "0");
    assert!(
        pages
            .iter()
            .all(|p| p.query.get("limit").map(String::as_str) == Some("500"))
    );
    for p in &pages[1..] {
        assert!(p.query.contains_key("continue"));
        assert!(
            !p.query.contains_key("resourceVersion"),
            "continuation pages drop the RV: {:?}",
            p.query
        );
    }
}

#[tokio::test]
async fn watch_starts_from_the_list_version_with_bookmarks_and_a_5_to_10_minute_timeout() {
    let server = server_with_pods(3).await;
    let list_rv = server.resource_version().to_string();
    let inf = pod_informer(&server, fast_config());
    let _stop = start(&inf);
    watching(&server, &inf).await;
    let w = &requests_of(&server, Verb::Watch)[0];
    assert_eq!(rv_of(w), list_rv);
    assert_eq!(
        w.query.get("allowWatchBookmarks").map(String::as_str),
        Some("true")
    );
    let timeout: u32 = w.query["timeoutSeconds"].parse().unwrap();
    assert!((300..=600).contains(&timeout), "timeout {timeout}");
}

#[tokio::test]
async fn a_normally_closed_watch_is_resumed_from_the_last_version_without_relist() {
    let server = server_with_pods(3).await;
    let inf = pod_informer(&server, fast_config());
    let _stop = start(&inf);
    watching(&server, &inf).await;
    let changed = server.update(touched(pod("default", "web-0"), 1)).unwrap();
    let rv = changed["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    until("update seen", || {
        inf.stats().last_sync_resource_version == rv
    })
    .await;
    server.close_watches();
    until("second watch", || {
        requests_of(&server, Verb::Watch).len() == 2 && server.open_watches() == 1
    })
    .await;
    assert_eq!(rv_of(&requests_of(&server, Verb::Watch)[1]), rv);
    assert_eq!(lists(&server).len(), 1, "no relist after a normal close");
}

#[tokio::test]
async fn bookmarks_advance_the_resource_version_without_touching_the_store() {
    let server = server_with_pods(2).await;
    server.faults().bookmark_interval(Duration::from_millis(20));
    let inf = pod_informer(&server, fast_config());
    let rec = Recorder::new();
    inf.add_event_handler("rec", Box::new(rec.clone()), Duration::ZERO)
        .unwrap();
    let _stop = start(&inf);
    until("synced", || inf.has_synced() && rec.len() == 2).await;
    // Changes in another collection move the global resourceVersion but send no pod event.
    for i in 0..3 {
        server
            .create(config_map("default", &format!("cm-{i}"), &[("k", "v")]))
            .unwrap();
    }
    let latest = server.resource_version().to_string();
    until("bookmark at the latest RV", || {
        inf.stats().last_sync_resource_version == latest
    })
    .await;
    assert_eq!(rec.len(), 2, "bookmarks reach no handler");
    assert_eq!(inf.cache().len(), 2);
    server.close_watches();
    until("re-watch", || requests_of(&server, Verb::Watch).len() >= 2).await;
    assert_eq!(
        rv_of(&requests_of(&server, Verb::Watch)[1]),
        latest,
        "re-watch from the bookmark's RV"
    );
}

#[tokio::test]
async fn expired_watch_relists_at_the_last_version_then_at_empty_when_that_is_expired_too() {
    // client-go TestReflectorFullListIfExpired / ExpiredExactResourceVersion: "0", "10", "", "10".
    let server = server_with_pods(5).await;
    let inf = pod_informer(&server, fast_config());
    let _stop = start(&inf);
    watching(&server, &inf).await;
    let synced_rv = server.resource_version().to_string();

    server.faults().fail_next(Verb::List, 410, None, 1);
    server.expire_watches();
    until("relisted twice", || lists(&server).len() == 3).await;
    watching(&server, &inf).await;

    server.expire_watches();
    until("relisted again", || lists(&server).len() == 4).await;
    let rvs: Vec<String> = lists(&server).iter().map(rv_of).collect();
    assert_eq!(rvs, ["0", synced_rv.as_str(), "", synced_rv.as_str()]);
}

#[tokio::test]
async fn too_many_requests_on_watch_backs_off_and_rewatches_without_relist() {
    let server = server_with_pods(2).await;
    let inf = pod_informer(&server, fast_config());
    let _stop = start(&inf);
    watching(&server, &inf).await;
    server.faults().fail_next(Verb::Watch, 429, Some(1), 3);
    server.close_watches();
    until("watch open again", || {
        requests_of(&server, Verb::Watch).len() == 5 && server.open_watches() == 1
    })
    .await;
    assert_eq!(lists(&server).len(), 1, "429 never causes a relist");
}

#[tokio::test]
async fn a_watch_stream_cut_mid_body_is_resumed_from_the_last_version_without_relist() {
    // client-go's StreamWatcher ends a watch on EOF, unexpected EOF or a reset connection as on
    // a normal close; the reflector then re-watches (TestReflectorListAndWatch: each watch
    // resumes from the last event's resourceVersion).
    let server = server_with_pods(3).await;
    let inf = pod_informer(&server, fast_config());
    let _stop = start(&inf);
    watching(&server, &inf).await;
    server.faults().cut_watch_after(1);
    server.close_watches();
    until("second watch", || {
        requests_of(&server, Verb::Watch).len() == 2 && server.open_watches() == 1
    })
    .await;
    let changed = server.update(touched(pod("default", "web-0"), 1)).unwrap();
    let rv = changed["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    until("third watch", || {
        requests_of(&server, Verb::Watch).len() >= 3
    })
    .await;
    assert_eq!(
        rv_of(&requests_of(&server, Verb::Watch)[2]),
        rv,
        "re-watch from the last event before the cut"
    );
    // The reflector has the event (it re-watched from it); the cache has it once the queue
    // hands it on.
    until("the cache holds the change", || {
        cache_state(&inf) == server_state(&server)
    })
    .await;
    assert_eq!(lists(&server).len(), 1, "no relist after a cut stream");
}

#[tokio::test]
async fn an_undecodable_watch_event_is_retried_as_an_internal_error_without_relist() {
    // client-go reports an undecodable event as a 500 (ClientWatchDecoding): retried within
    // the internal-error window.
    let server = server_with_pods(2).await;
    let inf = pod_informer(&server, fast_config());
    let _stop = start(&inf);
    watching(&server, &inf).await;
    server.faults().malformed_line_next_watch();
    server.close_watches();
    until("third watch", || {
        requests_of(&server, Verb::Watch).len() >= 3 && server.open_watches() == 1
    })
    .await;
    server.update(touched(pod("default", "web-1"), 7)).unwrap();
    let rv = server.resource_version().to_string();
    until("change seen", || {
        inf.stats().last_sync_resource_version == rv
    })
    .await;
    assert_eq!(lists(&server).len(), 1);
}

#[tokio::test]
async fn a_500_at_watch_start_relists_after_backoff() {
    let server = server_with_pods(2).await;
    let inf = pod_informer(&server, fast_config());
    let _stop = start(&inf);
    watching(&server, &inf).await;
    server.faults().fail_next(Verb::Watch, 500, None, 1);
    server.close_watches();
    until("relist", || lists(&server).len() == 2).await;
    until("watching", || server.open_watches() == 1).await;
}

#[tokio::test]
async fn reflector_not_paginating_not_consistent_reads() {
    // client-go TestReflectorNotPaginatingNotConsistentReads: a relist at an exact
    // resourceVersion asks for no pages, so the watch cache can serve it.
    let server = server_with_pods(3).await;
    let inf = pod_informer(&server, fast_config());
    let _stop = start(&inf);
    watching(&server, &inf).await;
    let synced_rv = server.resource_version().to_string();
    server.expire_watches();
    until("relisted", || lists(&server).len() == 2).await;
    let relist = &lists(&server)[1];
    assert_eq!(rv_of(relist), synced_rv);
    assert!(
        !relist.query.contains_key("limit"),
        "unpaged relist: {:?}",
        relist.query
    );
}

#[tokio::test]
async fn an_explicit_page_size_pages_the_relist_at_an_exact_resource_version() {
    // client-go TestReflectorWatchListPageSize: a page size set explicitly pages every list;
    // only the automatic choice leaves a relist at an exact resourceVersion unpaged.
    let server = server_with_pods(10).await;
    let mut config = fast_config();
    config.reflector.page_size = std::num::NonZeroU32::new(4);
    let inf = pod_informer(&server, config);
    let _stop = start(&inf);
    watching(&server, &inf).await;
    let synced_rv = server.resource_version().to_string();
    server.expire_watches();
    until("relisted", || lists(&server).len() == 2).await;
    let relist = &lists(&server)[1];
    assert_eq!(
        rv_of(relist),
        synced_rv,
        "a relist at an exact resourceVersion"
    );
    assert_eq!(relist.query.get("limit").map(String::as_str), Some("4"));
    until("the relist's pages", || {
        requests_of(&server, Verb::List).len() == 3 + 3
    })
    .await;
    let pages = requests_of(&server, Verb::List);
    assert!(
        pages
            .iter()
            .all(|r| r.query.get("limit").map(String::as_str) == Some("4")),
        "every request paged by 4: {pages:#?}"
    );
    until("the cache equals the server", || {
        cache_state(&inf) == server_state(&server)
    })
    .await;
}

#[tokio::test]
async fn reflector_paginating_non_consistent_reads_if_watch_cache_disabled() {
    // client-go TestReflectorPaginatingNonConsistentReadsIfWatchCacheDisabled: the list at "0"
    // came back in pages (no watch cache), so relists at an exact resourceVersion are paged.
    let server = server_with_pods(600).await;
    let inf = pod_informer(&server, fast_config());
    let _stop = start(&inf);
    watching(&server, &inf).await;
    assert_eq!(
        requests_of(&server, Verb::List).len(),
        2,
        "the first list came in two pages"
    );
    let synced_rv = server.resource_version().to_string();
    server.expire_watches();
    until("relisted", || lists(&server).len() == 2).await;
    let relist = &lists(&server)[1];
    assert_eq!(rv_of(relist), synced_rv);
    assert_eq!(relist.query.get("limit").map(String::as_str), Some("500"));
}

#[tokio::test]
async fn an_expired_continuation_page_falls_back_to_one_full_list() {
    let server = server_with_pods(1100).await;
    server.faults().fail_list_page(1, 410);
    let inf = pod_informer(&server, fast_config());
    let _stop = start(&inf);
    until("synced", || inf.has_synced()).await;
    assert_eq!(cache_state(&inf), server_state(&server));
    let reqs = requests_of(&server, Verb::List);
    assert_eq!(
        reqs.len(),
        3,
        "first page, failed continuation, full list: {reqs:#?}"
    );
    assert!(
        !reqs[2].query.contains_key("limit"),
        "the fallback list is not paginated"
    );
}

fn watch_list_config() -> InformerConfig {
    let mut c = fast_config();
    c.reflector = ReflectorConfig {
        use_watch_list: true,
        ..c.reflector
    };
    c
}

#[tokio::test]
async fn streaming_list_fills_the_cache_at_the_initial_events_end_bookmark_without_a_list() {
    let server = server_with_pods(300).await;
    let inf = pod_informer(&server, watch_list_config());
    let rec = Recorder::new();
    let reg = inf
        .add_event_handler("rec", Box::new(rec.clone()), Duration::ZERO)
        .unwrap();
    let _stop = start(&inf);
    until("synced", || reg.has_synced()).await;
    assert_eq!(cache_state(&inf), server_state(&server));
    assert!(
        requests_of(&server, Verb::List).is_empty(),
        "no list request"
    );
    let w = &requests_of(&server, Verb::Watch)[0];
    assert_eq!(
        w.query.get("sendInitialEvents").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        w.query.get("resourceVersionMatch").map(String::as_str),
        Some("NotOlderThan")
    );
    let d = rec.deliveries();
    assert_eq!(d.len(), 300);
    assert!(d.iter().all(|d| matches!(
        d.notification,
        Notification::Add {
            initial_list: true,
            ..
        }
    )));
    server.create(pod("default", "late-1")).unwrap();
    until("the same stream goes on", || inf.cache().len() == 301).await;
    assert_eq!(requests_of(&server, Verb::Watch).len(), 1);
}

/// The default reflector settings, with short backoffs.
fn default_config() -> InformerConfig {
    let mut c = fast_config();
    c.reflector = ReflectorConfig {
        backoff: c.reflector.backoff,
        ..ReflectorConfig::default()
    };
    c
}

#[tokio::test]
async fn watch_list_is_the_default() {
    // client-go 1.35+: the WatchListClient feature is on by default.
    let server = server_with_pods(20).await;
    let inf = pod_informer(&server, default_config());
    let _stop = start(&inf);
    until("synced", || inf.has_synced()).await;
    assert_eq!(cache_state(&inf), server_state(&server));
    assert!(lists(&server).is_empty(), "no list request");
    let w = &requests_of(&server, Verb::Watch)[0];
    assert_eq!(
        w.query.get("sendInitialEvents").map(String::as_str),
        Some("true")
    );
}

#[tokio::test]
async fn watch_list_falls_back_to_a_list_when_the_server_refuses_it() {
    // A server with the WatchList feature gate off answers 422: list instead, then watch.
    let server = server_with_pods(20).await;
    server.faults().refuse_watch_list(true);
    let inf = pod_informer(&server, default_config());
    let _stop = start(&inf);
    until("synced", || inf.has_synced()).await;
    watching(&server, &inf).await;
    assert_eq!(cache_state(&inf), server_state(&server));
    assert_eq!(lists(&server).len(), 1);
    let watches = requests_of(&server, Verb::Watch);
    assert_eq!(
        watches[0]
            .query
            .get("sendInitialEvents")
            .map(String::as_str),
        Some("true"),
        "the streaming list was tried first"
    );
    assert!(!watches[1].query.contains_key("sendInitialEvents"));
    server.create(pod("default", "late-1")).unwrap();
    until("watch events flow", || inf.cache().len() == 21).await;
}

#[tokio::test]
async fn streaming_list_falls_back_to_a_list_on_error() {
    let server = server_with_pods(10).await;
    server.faults().fail_next(Verb::Watch, 500, None, 1);
    let inf = pod_informer(&server, watch_list_config());
    let _stop = start(&inf);
    until("synced", || inf.has_synced()).await;
    assert_eq!(cache_state(&inf), server_state(&server));
    assert_eq!(lists(&server).len(), 1);
}

#[tokio::test]
async fn a_deletion_missed_while_the_watch_was_down_is_delivered_as_a_tombstone() {
    let server = server_with_pods(4).await;
    let inf = pod_informer(&server, fast_config());
    let rec = Recorder::new();
    inf.add_event_handler("rec", Box::new(rec.clone()), Duration::ZERO)
        .unwrap();
    let _stop = start(&inf);
    until("synced", || inf.has_synced()).await;
    watching(&server, &inf).await;

    // web-2 is deleted while the watch is down, and history is compacted past it.
    while_watch_down(&server, &inf, || {
        server
            .delete("v1", "Pod", Some("default"), "web-2")
            .unwrap()
    })
    .await;

    until("relisted", || lists(&server).len() >= 2).await;
    let deletes = || -> Vec<Notification> {
        rec.deliveries()
            .into_iter()
            .map(|d| d.notification)
            .filter(|n| matches!(n, Notification::Delete { .. }))
            .collect()
    };
    until("tombstone delivered", || deletes().len() == 1).await;
    match deletes().pop().unwrap() {
        Notification::Delete { obj } => {
            assert!(obj.is_tombstone(), "the deletion was missed: a tombstone");
            assert_eq!(obj.object().meta().name(), "web-2");
        }
        other => panic!("expected a delete, got {other:?}"),
    }
    assert_eq!(cache_state(&inf), server_state(&server));
}

/// Updates of `r`: object name and whether it was a resync.
fn updates(r: &Recorder) -> Vec<(String, bool)> {
    r.deliveries()
        .iter()
        .filter(|d| matches!(d.notification, Notification::Update { .. }))
        .map(|d| {
            (
                d.notification.object().meta().name().to_owned(),
                d.notification.is_resync(),
            )
        })
        .collect()
}

#[tokio::test]
async fn after_a_resync_check_a_relist_gives_a_listener_without_resync_only_changed_objects() {
    // client-go TestSharedInformerWatchDisruption: the informer resyncs every second; its first
    // check takes the listener without a resync period out of the syncing set, so the relist's
    // unchanged objects reach only the listener that resyncs.
    let server = server_with_pods(3).await;
    let mut config = fast_config();
    config.default_resync = Duration::from_secs(1);
    let inf = pod_informer(&server, config);
    let with = Recorder::new();
    let without = Recorder::new();
    inf.add_event_handler("resync", Box::new(with.clone()), Duration::from_secs(1))
        .unwrap();
    let rn = inf
        .add_event_handler("no-resync", Box::new(without.clone()), Duration::ZERO)
        .unwrap();
    let _stop = start(&inf);
    until("synced", || rn.has_synced()).await;
    until("a resync check has run", || {
        updates(&with).iter().any(|(_, resync)| *resync)
    })
    .await;

    while_watch_down(&server, &inf, || {
        server.update(touched(pod("default", "web-1"), 1)).unwrap()
    })
    .await;
    until("relisted", || lists(&server).len() >= 2).await;
    until("both got web-1's change", || {
        [&with, &without]
            .iter()
            .all(|r| updates(r).contains(&("web-1".to_owned(), false)))
    })
    .await;
    assert_eq!(updates(&without), [("web-1".to_owned(), false)]);
}

#[tokio::test]
async fn without_resync_checks_a_relist_gives_every_listener_the_unchanged_objects_as_resyncs() {
    // The same disruption under an informer that never resyncs: nothing ever takes a listener
    // out of client-go's syncing set, so the relist's unchanged objects reach it, flagged as
    // resyncs.
    let server = server_with_pods(3).await;
    let inf = pod_informer(&server, fast_config());
    let rec = Recorder::new();
    let reg = inf
        .add_event_handler("no-resync", Box::new(rec.clone()), Duration::ZERO)
        .unwrap();
    let _stop = start(&inf);
    until("synced", || reg.has_synced()).await;
    while_watch_down(&server, &inf, || {
        server.update(touched(pod("default", "web-1"), 1)).unwrap()
    })
    .await;
    until("relisted and delivered", || updates(&rec).len() == 3).await;
    let mut u = updates(&rec);
    u.sort();
    assert_eq!(
        u,
        [
            ("web-0".to_owned(), true),
            ("web-1".to_owned(), false),
            ("web-2".to_owned(), true)
        ]
    );
}

fn multi_informer(
    server: &wisp_tests::TestApiServer,
    config: InformerConfig,
) -> std::sync::Arc<SharedInformer> {
    let parts = ["a", "b"]
        .iter()
        .map(|ns| {
            let src = KubeSource::new(server.client_no_retry(), "v1", "Pod", Some(ns));
            (ns.to_string(), src)
        })
        .collect();
    SharedInformer::new(
        "multi",
        std::sync::Arc::new(MultiNamespace::new(parts)),
        config,
    )
}

#[tokio::test]
async fn a_multi_namespace_informer_streams_its_lists_by_default() {
    let server = server_with_pods(0).await;
    for (ns, name) in [("a", "p1"), ("b", "p2"), ("c", "p3")] {
        server.create(pod(ns, name)).unwrap();
    }
    let inf = multi_informer(&server, default_config());
    let _stop = start(&inf);
    until("synced", || inf.has_synced()).await;
    assert_eq!(inf.cache().len(), 2, "only namespaces a and b");
    assert!(lists(&server).is_empty(), "no list request");
    until("watching", || server.open_watches() == 2).await;
    server.create(pod("b", "p4")).unwrap();
    until("watch events flow", || inf.cache().len() == 3).await;
    assert_eq!(
        requests_of(&server, Verb::Watch).len(),
        2,
        "the same streams go on"
    );
}

#[tokio::test]
async fn a_multi_namespace_watch_counts_each_event_once() {
    let server = wisp_tests::TestApiServer::start()
        .await
        .expect("test API server starts");
    server.faults().bookmark_interval(Duration::ZERO);
    let inf = multi_informer(&server, fast_config());
    let _stop = start(&inf);
    until("synced and watching", || {
        inf.has_synced() && server.open_watches() == 2
    })
    .await;
    for (ns, name) in [("a", "p1"), ("a", "p2"), ("b", "p3")] {
        server.create(pod(ns, name)).unwrap();
    }
    until("events seen", || inf.cache().len() == 3).await;
    let stats = inf.stats();
    assert_eq!(stats.events, 3, "one count per server event");
    assert!(
        stats.last_sync_resource_version.starts_with("multi:"),
        "{}",
        stats.last_sync_resource_version
    );
}
