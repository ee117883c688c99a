//! The test API server speaks the Kubernetes list/watch protocol as kube 5 expects it.
//!
//! Every test drives the server through a real `kube::Client` (`Api<DynamicObject>` or the typed
//! `Api<Pod>`), never through a mock.

use wisp_apiserver::test_support::patience;

use std::time::{Duration, Instant};

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, VersionMatch,
    WatchEvent, WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use wisp_apiserver::{TestApiServer, Verb, config_map, pod};

/// Upper bound for anything that should happen promptly; only hit when a test fails.
const PATIENCE: Duration = Duration::from_secs(10);

fn pod_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod"))
}

fn pods(client: kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client, "default", &pod_resource())
}

fn names(objects: &[DynamicObject]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o.metadata.name.clone().unwrap_or_default())
        .collect()
}

fn rv_of(obj: &serde_json::Value) -> String {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

type Event = kube::Result<WatchEvent<DynamicObject>>;

/// The next item of a watch stream, `None` at its end; fails the test if nothing comes.
async fn next<S: Stream<Item = Event> + Unpin>(stream: &mut S) -> Option<Event> {
    tokio::time::timeout(patience(PATIENCE), stream.next())
        .await
        .expect("watch stream stalled")
}

/// The next non-bookmark item.
async fn next_change<S: Stream<Item = Event> + Unpin>(stream: &mut S) -> Option<Event> {
    loop {
        match next(stream).await {
            Some(Ok(WatchEvent::Bookmark(_))) => continue,
            other => return other,
        }
    }
}

/// (type, name) of a watch event.
fn describe(event: &WatchEvent<DynamicObject>) -> (&'static str, String) {
    let name = |o: &DynamicObject| o.metadata.name.clone().unwrap_or_default();
    match event {
        WatchEvent::Added(o) => ("ADDED", name(o)),
        WatchEvent::Modified(o) => ("MODIFIED", name(o)),
        WatchEvent::Deleted(o) => ("DELETED", name(o)),
        WatchEvent::Bookmark(b) => ("BOOKMARK", b.metadata.resource_version.clone()),
        WatchEvent::Error(s) => ("ERROR", s.reason.clone()),
    }
}

async fn expect_changes<S: Stream<Item = Event> + Unpin>(stream: &mut S, want: &[(&str, &str)]) {
    for (kind, name) in want {
        let event = next_change(stream)
            .await
            .expect("stream ended early")
            .expect("watch error");
        assert_eq!(describe(&event), (*kind, name.to_string()));
    }
}

fn api_error(err: kube::Error) -> (u16, String) {
    match err {
        kube::Error::Api(status) => (status.code, status.reason),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn paginated_list_returns_every_object_across_pages_at_one_resource_version()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    for i in 0..25 {
        server.create(pod("default", &format!("web-{i:02}")))?;
    }
    server.create(pod("other", "elsewhere-1"))?;
    let api = pods(server.client());
    let first = api.list(&ListParams::default().limit(10)).await?;
    let list_rv = first.metadata.resource_version.clone();
    let mut all = names(&first.items);
    let mut token = first.metadata.continue_.clone();
    assert_eq!(first.metadata.remaining_item_count, Some(15));
    // Writes between pages are not visible: the pages come from the first page's snapshot.
    server.create(pod("default", "web-late"))?;
    let mut pages = 1;
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = api
            .list(&ListParams::default().limit(10).continue_token(&t))
            .await?;
        assert_eq!(page.metadata.resource_version, list_rv);
        all.extend(names(&page.items));
        token = page.metadata.continue_.clone();
        pages += 1;
    }
    assert_eq!(pages, 3);
    let want: Vec<String> = (0..25).map(|i| format!("web-{i:02}")).collect();
    assert_eq!(all, want);
    let lists: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.verb == Verb::List)
        .collect();
    assert_eq!(lists.len(), 3);
    assert!(
        lists[1..]
            .iter()
            .all(|r| r.query.contains_key("continue") && !r.query.contains_key("resourceVersion"))
    );
    Ok(())
}

#[tokio::test]
async fn continue_token_after_compaction_is_expired_with_410() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    for i in 0..5 {
        server.create(pod("default", &format!("web-{i}")))?;
    }
    let api = pods(server.client_no_retry());
    let first = api.list(&ListParams::default().limit(2)).await?;
    let token = first.metadata.continue_.expect("a continue token");
    server.create(pod("default", "web-new"))?;
    server.compact();
    let err = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .expect_err("410");
    assert_eq!(api_error(err), (410, "Expired".to_string()));
    Ok(())
}

/// A list in progress when its server stops sending a list without end (an injected fault)
/// cannot go on into the real objects: its continue token is 410, and a new list reads them.
#[tokio::test]
async fn the_continue_token_of_a_list_without_end_is_410_once_the_fault_is_off()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    for i in 0..3 {
        server.create(pod("default", &format!("web-{i}")))?;
    }
    server
        .faults()
        .endless_lists(Some(wisp_apiserver::EndlessList {
            object_bytes: 1 << 10,
            give_up_after: 1 << 20,
        }));
    let api = pods(server.client_no_retry());
    let first = api.list(&ListParams::default().limit(10)).await?;
    assert_eq!(first.items.len(), 10, "a page of the endless list");
    let token = first.metadata.continue_.expect("a continue token");
    server.faults().endless_lists(None);
    let err = api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .expect_err("410");
    assert_eq!(api_error(err), (410, "Expired".to_string()));
    let fresh = api.list(&ListParams::default().limit(10)).await?;
    assert_eq!(names(&fresh.items), ["web-0", "web-1", "web-2"]);
    Ok(())
}

#[tokio::test]
async fn list_at_an_exact_old_resource_version_returns_the_old_state() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.create(pod("default", "a-1"))?;
    let b = server.create(pod("default", "b-1"))?;
    let old_rv = rv_of(&b);
    let mut a = server
        .get("v1", "Pod", Some("default"), "a-1")
        .expect("a-1");
    a["metadata"]["labels"]["app"] = json!("changed");
    server.update(a)?;
    server.delete("v1", "Pod", Some("default"), "b-1")?;
    server.create(pod("default", "c-1"))?;

    let api = pods(server.client_no_retry());
    let exact = api
        .list(
            &ListParams::default()
                .at(&old_rv)
                .matching(VersionMatch::Exact),
        )
        .await?;
    assert_eq!(
        exact.metadata.resource_version.as_deref(),
        Some(old_rv.as_str())
    );
    assert_eq!(names(&exact.items), ["a-1", "b-1"]);
    assert_eq!(
        exact.items[0]
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str),
        Some("a")
    );
    // Legacy exact semantics: an RV with a limit and no match.
    let legacy = api
        .list(&ListParams::default().at(&old_rv).limit(1))
        .await?;
    assert_eq!(names(&legacy.items), ["a-1"]);
    let rest = api
        .list(
            &ListParams::default()
                .limit(1)
                .continue_token(legacy.metadata.continue_.as_deref().unwrap_or("")),
        )
        .await?;
    assert_eq!(names(&rest.items), ["b-1"]);
    // The current state, for contrast.
    assert_eq!(
        names(&api.list(&ListParams::default()).await?.items),
        ["a-1", "c-1"]
    );
    // After compaction the old RV is gone.
    server.compact();
    let err = api
        .list(
            &ListParams::default()
                .at(&old_rv)
                .matching(VersionMatch::Exact),
        )
        .await
        .expect_err("410");
    assert_eq!(api_error(err), (410, "Expired".to_string()));
    Ok(())
}

#[tokio::test]
async fn list_at_a_future_resource_version_times_out_with_504() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let future = (server.resource_version() + 100).to_string();
    let api = pods(server.client_no_retry());
    let err = api
        .list(&ListParams::default().at(&future))
        .await
        .expect_err("504");
    assert_eq!(api_error(err), (504, "Timeout".to_string()));
    Ok(())
}

#[tokio::test]
async fn watch_from_a_resource_version_replays_later_events_then_streams_live_ones()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let a = server.create(pod("default", "a-1"))?;
    let mut changed = a.clone();
    changed["spec"]["nodeName"] = json!("node-2");
    server.update(changed)?;
    server.create(pod("default", "b-1"))?;
    server.delete("v1", "Pod", Some("default"), "a-1")?;
    server.create(pod("other", "c-1"))?;

    let api = pods(server.client());
    let mut stream = api
        .watch(&WatchParams::default(), &rv_of(&a))
        .await?
        .boxed();
    expect_changes(
        &mut stream,
        &[("MODIFIED", "a-1"), ("ADDED", "b-1"), ("DELETED", "a-1")],
    )
    .await;
    server.create(pod("default", "d-1"))?;
    expect_changes(&mut stream, &[("ADDED", "d-1")]).await;
    let watch = server
        .requests()
        .into_iter()
        .find(|r| r.verb == Verb::Watch)
        .expect("a watch request");
    assert_eq!(watch.path, "/api/v1/namespaces/default/pods");
    assert_eq!(watch.query.get("resourceVersion"), Some(&rv_of(&a)));
    Ok(())
}

#[tokio::test]
async fn watch_from_a_compacted_resource_version_yields_an_error_410_event() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let a = server.create(pod("default", "a-1"))?;
    server.create(pod("default", "b-1"))?;
    server.compact();
    let api = pods(server.client_no_retry());
    let mut stream = api
        .watch(&WatchParams::default(), &rv_of(&a))
        .await?
        .boxed();
    match next(&mut stream).await {
        Some(Ok(WatchEvent::Error(status))) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert!(
                status.message.starts_with("too old resource version"),
                "{}",
                status.message
            );
        }
        other => panic!("expected an ERROR event, got {other:?}"),
    }
    assert!(
        next(&mut stream).await.is_none(),
        "the stream closes after the error"
    );
    Ok(())
}

#[tokio::test]
async fn bookmarks_arrive_and_carry_kind_api_version_and_the_latest_resource_version()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.faults().bookmark_interval(Duration::from_millis(50));
    let a = server.create(pod("default", "a-1"))?;
    server.create(config_map("default", "unrelated", &[("k", "v")]))?;
    let api = pods(server.client());
    let mut stream = api
        .watch(&WatchParams::default(), &rv_of(&a))
        .await?
        .boxed();
    match next(&mut stream).await {
        Some(Ok(WatchEvent::Bookmark(bookmark))) => {
            assert_eq!(bookmark.types.kind, "Pod");
            assert_eq!(bookmark.types.api_version, "v1");
            // Bookmarks track the global RV, including changes to other collections.
            assert_eq!(
                bookmark.metadata.resource_version,
                server.resource_version().to_string()
            );
        }
        other => panic!("expected a BOOKMARK, got {other:?}"),
    }
    // The typed API parses them too.
    let typed: Api<Pod> = Api::namespaced(server.client(), "default");
    let mut typed_stream = typed
        .watch(
            &WatchParams::default(),
            &server.resource_version().to_string(),
        )
        .await?
        .boxed();
    let event = tokio::time::timeout(patience(PATIENCE), typed_stream.try_next()).await??;
    assert!(matches!(event, Some(WatchEvent::Bookmark(_))), "{event:?}");
    Ok(())
}

#[tokio::test]
async fn send_initial_events_ends_with_the_initial_events_end_bookmark() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.faults().bookmark_interval(Duration::ZERO);
    for name in ["a-1", "b-1", "c-1"] {
        server.create(pod("default", name))?;
    }
    let api = pods(server.client());
    let mut stream = api
        .watch(&WatchParams::default().initial_events(), "0")
        .await?
        .boxed();
    expect_changes(
        &mut stream,
        &[("ADDED", "a-1"), ("ADDED", "b-1"), ("ADDED", "c-1")],
    )
    .await;
    match next(&mut stream).await {
        Some(Ok(WatchEvent::Bookmark(bookmark))) => {
            assert_eq!(bookmark.types.kind, "Pod");
            assert_eq!(
                bookmark
                    .metadata
                    .annotations
                    .get("k8s.io/initial-events-end")
                    .map(String::as_str),
                Some("true")
            );
            assert_eq!(
                bookmark.metadata.resource_version,
                server.resource_version().to_string()
            );
        }
        other => panic!("expected the initial-events-end BOOKMARK, got {other:?}"),
    }
    server.create(pod("default", "d-1"))?;
    expect_changes(&mut stream, &[("ADDED", "d-1")]).await;
    let watch = server
        .requests()
        .into_iter()
        .find(|r| r.verb == Verb::Watch)
        .expect("a watch request");
    assert_eq!(
        watch.query.get("sendInitialEvents").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        watch.query.get("resourceVersionMatch").map(String::as_str),
        Some("NotOlderThan")
    );
    Ok(())
}

#[tokio::test]
async fn label_selector_watch_sends_deleted_when_an_object_stops_matching_and_added_when_it_matches_again()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let web = server.create(pod("default", "web-1"))?;
    server.create(pod("default", "db-1"))?;
    let api = pods(server.client());
    let list = api
        .list(&ListParams::default().labels("app in (web)"))
        .await?;
    assert_eq!(names(&list.items), ["web-1"]);
    let rv = list.metadata.resource_version.unwrap_or_default();
    let mut stream = api
        .watch(&WatchParams::default().labels("app=web"), &rv)
        .await?
        .boxed();
    let mut moved = web.clone();
    moved["metadata"]["labels"]["app"] = json!("db");
    let moved = server.update(moved)?;
    server.update(
        server
            .get("v1", "Pod", Some("default"), "db-1")
            .expect("db-1"),
    )?; // never matches
    let mut back = moved.clone();
    back["metadata"]["labels"]["app"] = json!("web");
    server.update(back)?;
    expect_changes(&mut stream, &[("DELETED", "web-1"), ("ADDED", "web-1")]).await;
    Ok(())
}

#[tokio::test]
async fn fail_next_429_carries_retry_after_and_kube_retries_after_it() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.create(pod("default", "a-1"))?;
    // Without kube's retry layer, the 429 and its Retry-After header reach the caller.
    server.faults().fail_next(Verb::List, 429, Some(1), 1);
    let request = axum::http::Request::get("/api/v1/namespaces/default/pods")
        .body(kube::client::Body::from(Vec::new()))?;
    let response = server.client_no_retry().send(request).await?;
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    server.faults().fail_next(Verb::List, 429, Some(1), 1);
    let err = pods(server.client_no_retry())
        .list(&ListParams::default())
        .await
        .expect_err("429");
    assert_eq!(api_error(err), (429, "TooManyRequests".to_string()));
    // kube's default client waits Retry-After seconds, then succeeds.
    server.faults().fail_next(Verb::List, 429, Some(1), 1);
    server.clear_requests();
    let started = Instant::now();
    let list = pods(server.client()).list(&ListParams::default()).await?;
    assert_eq!(names(&list.items), ["a-1"]);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "retried after {:?}",
        started.elapsed()
    );
    assert_eq!(server.requests().len(), 2);
    Ok(())
}

#[tokio::test]
async fn fail_next_500_and_fail_list_page_answer_with_internal_error_statuses() -> anyhow::Result<()>
{
    let server = TestApiServer::start().await?;
    for i in 0..6 {
        server.create(pod("default", &format!("web-{i}")))?;
    }
    let api = pods(server.client_no_retry());
    server.faults().fail_next(Verb::Watch, 500, None, 1);
    let err = api
        .watch(&WatchParams::default(), "0")
        .await
        .err()
        .expect("500");
    assert_eq!(api_error(err), (500, "InternalError".to_string()));
    server.faults().fail_list_page(1, 500);
    let first = api.list(&ListParams::default().limit(2)).await?;
    let token = first.metadata.continue_.unwrap_or_default();
    let err = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .expect_err("page 1 fails");
    assert_eq!(api_error(err), (500, "InternalError".to_string()));
    // The fault is spent: the same token now works.
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await?;
    assert_eq!(names(&second.items), ["web-2", "web-3"]);
    Ok(())
}

#[tokio::test]
async fn close_watch_after_closes_the_stream_after_that_many_events() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    for i in 0..5 {
        server.create(pod("default", &format!("web-{i}")))?;
    }
    server.faults().close_watch_after(2, 1);
    let api = pods(server.client());
    let mut stream = api.watch(&WatchParams::default(), "0").await?.boxed();
    expect_changes(&mut stream, &[("ADDED", "web-0"), ("ADDED", "web-1")]).await;
    assert!(
        next_change(&mut stream).await.is_none(),
        "the stream ends after 2 events"
    );
    // Only one watch was affected.
    let mut stream = api.watch(&WatchParams::default(), "0").await?.boxed();
    for i in 0..5 {
        expect_changes(&mut stream, &[("ADDED", &format!("web-{i}"))]).await;
    }
    Ok(())
}

#[tokio::test]
async fn malformed_line_makes_the_kube_watch_stream_yield_an_error_item_then_continue()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.create(pod("default", "a-1"))?;
    server.faults().malformed_line_next_watch();
    let api = pods(server.client());
    let mut stream = api.watch(&WatchParams::default(), "0").await?.boxed();
    match next(&mut stream).await {
        Some(Err(kube::Error::SerdeError(_))) => {}
        other => panic!("expected a parse error item, got {other:?}"),
    }
    expect_changes(&mut stream, &[("ADDED", "a-1")]).await;
    Ok(())
}

#[tokio::test]
async fn timeout_seconds_ends_the_watch_stream() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let api = pods(server.client());
    let started = Instant::now();
    let mut stream = api
        .watch(&WatchParams::default().timeout(1).disable_bookmarks(), "0")
        .await?
        .boxed();
    assert!(next(&mut stream).await.is_none());
    assert!(started.elapsed() >= Duration::from_secs(1));
    let watch = server
        .requests()
        .into_iter()
        .find(|r| r.verb == Verb::Watch)
        .expect("a watch request");
    assert_eq!(
        watch.query.get("timeoutSeconds").map(String::as_str),
        Some("1")
    );
    assert!(!watch.query.contains_key("allowWatchBookmarks"));
    Ok(())
}

#[tokio::test]
async fn requests_record_method_path_verb_and_decoded_query_parameters() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let api = pods(server.client());
    api.list(
        &ListParams::default()
            .labels("app in (web,db),!legacy")
            .fields("metadata.name!=x")
            .limit(7),
    )
    .await?;
    let _ = api.get_opt("missing").await?;
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let list = &requests[0];
    assert_eq!(
        (list.method.as_str(), list.path.as_str(), list.verb),
        ("GET", "/api/v1/namespaces/default/pods", Verb::List)
    );
    assert_eq!(
        list.query.get("labelSelector").map(String::as_str),
        Some("app in (web,db),!legacy")
    );
    assert_eq!(
        list.query.get("fieldSelector").map(String::as_str),
        Some("metadata.name!=x")
    );
    assert_eq!(list.query.get("limit").map(String::as_str), Some("7"));
    assert_eq!(
        (requests[1].verb, requests[1].path.as_str()),
        (Verb::Get, "/api/v1/namespaces/default/pods/missing")
    );
    server.clear_requests();
    assert!(server.requests().is_empty());
    Ok(())
}

#[tokio::test]
async fn typed_pod_api_and_dynamic_api_share_one_collection() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.create(pod("default", "web-1"))?;
    server.create(pod("kube-system", "dns-1"))?;
    let typed: Api<Pod> = Api::default_namespaced(server.client());
    let list = typed.list(&ListParams::default()).await?;
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0].spec.as_ref().map(|s| s.containers.len()),
        Some(2)
    );
    let all: Api<Pod> = Api::all(server.client());
    let everywhere = all
        .list(&ListParams::default().fields("metadata.namespace=kube-system"))
        .await?;
    assert_eq!(
        everywhere
            .items
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>(),
        ["dns-1"]
    );
    let mut stream = typed.watch(&WatchParams::default(), "0").await?.boxed();
    let first = tokio::time::timeout(patience(PATIENCE), stream.try_next()).await??;
    assert!(
        matches!(first, Some(WatchEvent::Added(p)) if p.metadata.name.as_deref() == Some("web-1"))
    );
    Ok(())
}

#[tokio::test]
async fn writes_over_http_are_stored_and_watched() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let cms: Api<DynamicObject> = Api::namespaced_with(
        server.client(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")),
    );
    let mut stream = cms.watch(&WatchParams::default(), "0").await?.boxed();
    let obj: DynamicObject =
        serde_json::from_value(config_map("default", "settings", &[("a", "1")]))?;
    let created = cms.create(&PostParams::default(), &obj).await?;
    assert!(created.metadata.uid.is_some());
    let patch = Patch::Merge(json!({"data": {"b": "2"}}));
    cms.patch("settings", &PatchParams::default(), &patch)
        .await?;
    let apply = Patch::Apply(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"x": "y"}}),
    );
    cms.patch("applied", &PatchParams::apply("test"), &apply)
        .await?;
    let mut stale = created.clone();
    stale.data["data"] = json!({"c": "3"});
    let err = cms
        .replace("settings", &PostParams::default(), &stale)
        .await
        .expect_err("stale RV");
    assert_eq!(api_error(err), (409, "Conflict".to_string()));
    cms.delete("settings", &DeleteParams::default()).await?;
    expect_changes(
        &mut stream,
        &[
            ("ADDED", "settings"),
            ("MODIFIED", "settings"),
            ("ADDED", "applied"),
            ("DELETED", "settings"),
        ],
    )
    .await;
    let stored = server
        .get("v1", "ConfigMap", Some("default"), "applied")
        .expect("applied");
    assert_eq!(stored["data"], json!({"x": "y"}));
    assert_eq!(server.objects("v1", "ConfigMap").len(), 1);
    Ok(())
}

#[tokio::test]
async fn restart_closes_watches_and_starts_a_new_resource_version_epoch() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let a = server.create(pod("default", "a-1"))?;
    let api = pods(server.client());
    let mut stream = api
        .watch(&WatchParams::default(), &rv_of(&a))
        .await?
        .boxed();
    server.wait_for_open_watches(1, patience(PATIENCE)).await?;
    let before = server.resource_version();
    server.restart();
    assert!(
        next_change(&mut stream).await.is_none(),
        "restart ends open watches"
    );
    assert_eq!(server.open_watches(), 0);
    assert_eq!(server.resource_version(), before + 1_000_000);
    let mut stream = api
        .watch(&WatchParams::default(), &rv_of(&a))
        .await?
        .boxed();
    assert!(matches!(next(&mut stream).await, Some(Ok(WatchEvent::Error(s))) if s.code == 410));
    // close_watches ends streams cleanly; expire_watches ends them with ERROR 410.
    let mut closed = api
        .watch(
            &WatchParams::default(),
            &server.resource_version().to_string(),
        )
        .await?
        .boxed();
    server.wait_for_open_watches(1, patience(PATIENCE)).await?;
    server.close_watches();
    assert!(next_change(&mut closed).await.is_none());
    let mut expired = api
        .watch(
            &WatchParams::default(),
            &server.resource_version().to_string(),
        )
        .await?
        .boxed();
    server.wait_for_open_watches(1, patience(PATIENCE)).await?;
    server.expire_watches();
    assert!(
        matches!(next_change(&mut expired).await, Some(Ok(WatchEvent::Error(s))) if s.code == 410 && s.reason == "Expired")
    );
    assert!(next_change(&mut expired).await.is_none());
    Ok(())
}

#[tokio::test]
async fn slow_delays_every_response() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.faults().slow(Duration::from_millis(300));
    let started = Instant::now();
    pods(server.client()).list(&ListParams::default()).await?;
    assert!(started.elapsed() >= Duration::from_millis(300));
    server.faults().slow(Duration::ZERO);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_objects_list_in_pages_and_a_watcher_that_does_not_read_never_stalls_writers()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    for i in 0..10_000 {
        server.create(pod("default", &format!("web-{i:05}")))?;
    }
    let api = pods(server.client());
    let mut seen = 0;
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().limit(500);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = api.list(&params).await?;
        seen += page.items.len();
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    assert_eq!(seen, 10_000);
    // A watch whose stream nobody polls yet, while 5,000 updates go in.
    let start_rv = server.resource_version().to_string();
    let mut stream = api
        .watch(&WatchParams::default().disable_bookmarks(), &start_rv)
        .await?
        .boxed();
    server.wait_for_open_watches(1, patience(PATIENCE)).await?;
    for i in 0..5_000 {
        let mut obj = server
            .get("v1", "Pod", Some("default"), &format!("web-{i:05}"))
            .expect("exists");
        obj["status"]["phase"] = json!("Succeeded");
        server.update(obj)?;
    }
    for i in 0..5_000 {
        expect_changes(&mut stream, &[("MODIFIED", &format!("web-{i:05}"))]).await;
    }
    Ok(())
}

#[tokio::test]
async fn scale_subresource_reads_and_writes_replicas_and_watchers_see_the_new_generation()
-> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    let server = TestApiServer::start().await?;
    server.create(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]},
            "template": {"metadata": {"labels": {"app": "web", "tier": "a"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}},
        },
        "status": {"replicas": 2},
    }))?;
    let deployments: Api<Deployment> = Api::namespaced(server.client(), "default");
    let watched: Api<DynamicObject> = Api::namespaced_with(
        server.client(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")),
    );
    let mut stream = watched
        .watch(
            &WatchParams::default(),
            &server.resource_version().to_string(),
        )
        .await?
        .boxed();
    let scale = deployments.get_scale("web").await?;
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    let status = scale.status.expect("status");
    assert_eq!(
        (status.replicas, status.selector.as_deref()),
        (2, Some("app=web,tier in (a,b)"))
    );

    // kubectl scale's merge patch: one MODIFIED of the Deployment, generation bumped.
    let patched = deployments
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await?;
    assert_eq!(patched.spec.and_then(|s| s.replicas), Some(3));
    let Some(Ok(WatchEvent::Modified(modified))) = next_change(&mut stream).await else {
        panic!("no MODIFIED");
    };
    assert_eq!(modified.data["spec"]["replicas"], json!(3));
    assert_eq!(modified.metadata.generation, Some(2));

    // A JSON patch, and a replace with the current resourceVersion, then a stale one.
    let ops = json!([{"op": "replace", "path": "/spec/replicas", "value": 1}]);
    let json_patch: json_patch::Patch = serde_json::from_value(ops)?;
    deployments
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::<()>::Json(json_patch),
        )
        .await?;
    let mut current = deployments.get_scale("web").await?;
    current.spec = Some(k8s_openapi::api::autoscaling::v1::ScaleSpec { replicas: Some(5) });
    let replaced = deployments
        .replace_scale("web", &PostParams::default(), &current)
        .await?;
    assert_eq!(replaced.spec.and_then(|s| s.replicas), Some(5));
    let err = deployments
        .replace_scale("web", &PostParams::default(), &current)
        .await
        .expect_err("stale resourceVersion");
    assert_eq!(api_error(err), (409, "Conflict".to_string()));
    // client-go's typed UpdateScale sends the Scale as protobuf: metadata {name}, spec {6}.
    let type_meta = [&[10u8, 14][..], b"autoscaling/v1", &[18, 5], b"Scale"].concat();
    let raw = [&[10u8, 5, 10, 3][..], b"web", &[18, 2, 8, 6]].concat();
    let body = [
        b"k8s\0".as_slice(),
        &[10, type_meta.len() as u8],
        &type_meta,
        &[18, raw.len() as u8],
        &raw,
    ]
    .concat();
    let put = http::Request::put("/apis/apps/v1/namespaces/default/deployments/web/scale")
        .header("Content-Type", "application/vnd.kubernetes.protobuf")
        .body(body)?;
    let answer: serde_json::Value =
        serde_json::from_str(&server.client().request_text(put).await?)?;
    assert_eq!(answer["spec"]["replicas"], json!(6));
    // Apply needs a field manager; negative replicas are invalid.
    let apply = Patch::Apply(
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": 4}}),
    );
    let applied = deployments
        .patch_scale("web", &PatchParams::apply("hpa"), &apply)
        .await?;
    assert_eq!(applied.spec.and_then(|s| s.replicas), Some(4));
    let err = deployments
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": -1}})),
        )
        .await
        .expect_err("negative");
    assert_eq!(api_error(err).0, 422);
    let stored = server
        .get("apps/v1", "Deployment", Some("default"), "web")
        .expect("stored");
    assert_eq!(
        (
            stored["spec"]["replicas"].clone(),
            stored["metadata"]["generation"].clone()
        ),
        (json!(4), json!(6))
    );
    // No scale subresource on a ConfigMap.
    server.create(config_map("default", "settings", &[]))?;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(server.client(), "default");
    let err = cms.get_scale("settings").await.expect_err("no scale");
    assert_eq!(api_error(err).0, 404);
    Ok(())
}

#[tokio::test]
async fn protobuf_bodies_are_refused_naming_the_field_or_the_kind() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let client = server.client();
    let post = |path: &str, body: Vec<u8>| {
        http::Request::post(path)
            .header("Content-Type", "application/vnd.kubernetes.protobuf")
            .body(body)
    };
    // k8s\0, TypeMeta {apps/v1, Deployment}, raw: spec (2) { replicas (1) as a string }.
    let envelope = |api_version: &str, kind: &str, raw: &[u8]| {
        let type_meta = [
            &[10, api_version.len() as u8],
            api_version.as_bytes(),
            &[18, kind.len() as u8],
            kind.as_bytes(),
        ]
        .concat();
        [
            b"k8s\0".as_slice(),
            &[10, type_meta.len() as u8],
            &type_meta,
            &[18, raw.len() as u8],
            raw,
        ]
        .concat()
    };
    let bad = envelope("apps/v1", "Deployment", &[18, 5, 10, 3, b'o', b'n', b'e']);
    let err = client
        .request_text(post("/apis/apps/v1/namespaces/default/deployments", bad)?)
        .await
        .expect_err("malformed");
    let (code, message) = match err {
        kube::Error::Api(s) => (s.code, s.message),
        other => panic!("{other}"),
    };
    assert_eq!(code, 400);
    assert!(
        message.contains("Deployment spec.replicas: expected a varint"),
        "{message}"
    );
    let custom = envelope("example.com/v1", "Widget", &[]);
    let err = client
        .request_text(post(
            "/apis/example.com/v1/namespaces/default/widgets",
            custom,
        )?)
        .await
        .expect_err("no protobuf for custom resources");
    assert_eq!(api_error(err).0, 415);
    Ok(())
}

#[tokio::test]
async fn access_reviews_are_create_only_checked_and_never_stored() -> anyhow::Result<()> {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let server = TestApiServer::start().await?;
    let reviews: Api<SubjectAccessReview> = Api::all(server.client());
    let review = |spec: serde_json::Value| -> anyhow::Result<SubjectAccessReview> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "metadata": {}, "spec": spec,
        }))?)
    };
    let asked = review(json!({"user": "alice",
        "resourceAttributes": {"verb": "delete", "resource": "pods", "namespace": "default"}}))?;
    let answered = reviews.create(&PostParams::default(), &asked).await?;
    assert_eq!(answered.status.map(|s| s.allowed), Some(true));
    assert!(
        server
            .objects("authorization.k8s.io/v1", "SubjectAccessReview")
            .is_empty()
    );
    // Nobody to review, or both kinds of attributes: 422 naming the field.
    let nobody = review(json!({"nonResourceAttributes": {"verb": "get", "path": "/healthz"}}))?;
    let err = reviews
        .create(&PostParams::default(), &nobody)
        .await
        .expect_err("no user");
    let kube::Error::Api(status) = err else {
        panic!("{err}")
    };
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains("spec.user: Invalid value"),
        "{}",
        status.message
    );
    let both = review(
        json!({"user": "alice", "nonResourceAttributes": {"verb": "get"},
        "resourceAttributes": {"verb": "get"}}),
    )?;
    let err = reviews
        .create(&PostParams::default(), &both)
        .await
        .expect_err("both");
    assert_eq!(api_error(err).0, 422);
    // Create only.
    let err = reviews
        .list(&ListParams::default())
        .await
        .expect_err("no list");
    assert_eq!(api_error(err).0, 405);
    Ok(())
}

// ------------------------------------------------------------------------------------------
// A watch from a resourceVersion the server has not reached (issue 29, item 9)
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_watch_from_a_future_resource_version_sends_only_events_newer_than_it()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let asked = server.resource_version() + 5;
    let api = pods(server.client());
    let mut stream = api
        .watch(&WatchParams::default(), &asked.to_string())
        .await?
        .boxed();
    // The watch starts at once (a plain watch does not wait for the server to catch up);
    // the first five changes are at or below the asked version and are never sent.
    for i in 0..8 {
        server.create(pod("default", &format!("p-{i}")))?;
    }
    let event = next_change(&mut stream)
        .await
        .expect("stream ended early")
        .expect("watch error");
    let WatchEvent::Added(first) = &event else {
        panic!("expected ADDED, got {:?}", describe(&event));
    };
    let rv: u64 = first
        .metadata
        .resource_version
        .as_deref()
        .unwrap_or_default()
        .parse()?;
    assert_eq!(rv, asked + 1, "{:?}", describe(&event));
    expect_changes(&mut stream, &[("ADDED", "p-6"), ("ADDED", "p-7")]).await;
    Ok(())
}
