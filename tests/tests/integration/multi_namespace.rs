//! An informer on several namespaces lists and watches in each of them, never cluster-wide, so
//! the Role per namespace that `wisp rbac` prints is enough for it.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use wisp_tests::{Verb, pod};

fn expected(server: &wisp_tests::TestApiServer) -> BTreeMap<String, String> {
    server_state(server)
        .into_iter()
        .filter(|(k, _)| k.starts_with("team-a/") || k.starts_with("team-b/"))
        .collect()
}

#[tokio::test]
async fn an_informer_on_two_namespaces_lists_and_watches_only_in_them() {
    let server = wisp_tests::TestApiServer::start().await.unwrap();
    for (ns, name) in [("team-a", "a-1"), ("team-b", "b-1"), ("other", "o-1")] {
        server.create(pod(ns, name)).unwrap();
    }
    let informers = informers_from_yaml(
        &server,
        "source: kube\ninformers:\n  - {name: pods, apiVersion: v1, kind: Pod, namespaces: [team-a, team-b], watchList: false}\n",
    )
    .await;
    let inf = informers[0].clone();
    let _stop = start(&inf);
    until("synced", || inf.has_synced()).await;
    assert_eq!(cache_state(&inf), expected(&server));

    // Changes in both namespaces arrive; the other namespace's do not.
    server.create(pod("team-b", "b-2")).unwrap();
    server.update(touched(pod("team-a", "a-1"), 1)).unwrap();
    server.create(pod("other", "o-2")).unwrap();
    until("watched", || cache_state(&inf) == expected(&server)).await;

    // The watches end; each namespace resumes from its own resourceVersion, without a relist.
    server.wait_for_open_watches(2, patience(T)).await.unwrap();
    server.close_watches();
    server.create(pod("team-a", "a-2")).unwrap();
    server.delete("v1", "Pod", Some("team-b"), "b-1").unwrap();
    until("watched again", || cache_state(&inf) == expected(&server)).await;
    assert_eq!(lists(&server).len(), 2, "one list per namespace, no relist");

    let requests: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| matches!(r.verb, Verb::List | Verb::Watch))
        .collect();
    assert!(requests.len() >= 6, "{requests:#?}");
    for r in &requests {
        assert!(
            r.path == "/api/v1/namespaces/team-a/pods"
                || r.path == "/api/v1/namespaces/team-b/pods",
            "only namespaced requests: {} {:?}",
            r.path,
            r.query
        );
    }
    let rewatch: Vec<String> = requests
        .iter()
        .filter(|r| r.verb == Verb::Watch)
        .skip(2)
        .take(2)
        .map(rv_of)
        .collect();
    assert_eq!(rewatch.len(), 2);
    assert!(
        rewatch.iter().all(|rv| rv.parse::<u64>().is_ok()),
        "each namespace resumes from a plain resourceVersion of its own: {rewatch:?}"
    );
}

/// `maxListObjects` bounds the whole list of an informer over several namespaces, not each
/// namespace's: 300 pods in each of two namespaces under a cap of 450 (set in the config, as a
/// user sets it) never sync, each list stops in the second namespace and is counted, and the
/// informer keeps relisting after backoff.
#[tokio::test]
async fn the_whole_list_cap_counts_every_namespace_of_an_informer() {
    use wisp_host::informer::reflector::lists_over_cap;
    let server = wisp_tests::TestApiServer::start().await.unwrap();
    for ns in ["capped-a", "capped-b"] {
        for i in 0..300 {
            server.create(pod(ns, &format!("p-{i}"))).unwrap();
        }
    }
    let informers = informers_from_yaml(
        &server,
        "source: kube\ninformers:\n  - {name: capped-two, apiVersion: v1, kind: Pod, namespaces: [capped-a, capped-b], watchList: false, maxListObjects: 450}\n",
    )
    .await;
    let inf = informers[0].clone();
    let _stop = start(&inf);
    let over = || lists_over_cap().get("capped-two").copied().unwrap_or(0);
    until("two lists over the cap", || over() >= 2).await;
    assert!(!inf.has_synced() && cache_state(&inf).is_empty());
    let lists_in = |ns: &str| {
        lists(&server)
            .iter()
            .filter(|r| r.path == format!("/api/v1/namespaces/{ns}/pods"))
            .count()
    };
    assert!(lists_in("capped-b") >= 2 && lists_in("capped-b") <= lists_in("capped-a"));
}
