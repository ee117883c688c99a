//! The test API server answers as a real kube-apiserver (1.36) does where it used to be lenient:
//! finalizers and namespace termination, delete options, reads at a resourceVersion it has not
//! reached, field selectors per kind, validation, request media types and discovery.
//!
//! Driven through a real `kube::Client`, and through raw HTTP where a client would not send the
//! request (a protobuf or YAML body, an unknown propagation policy).

use wisp_apiserver::test_support::patience;

use std::time::{Duration, Instant};

use futures::{Stream, StreamExt, TryStreamExt};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
    VersionMatch, WatchEvent, WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wisp_apiserver::{TestApiServer, config_map, pod};

/// Upper bound for anything that should happen promptly; only hit when a test fails.
const PATIENCE: Duration = Duration::from_secs(10);

fn resource(group: &str, version: &str, kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

fn config_maps(server: &TestApiServer, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        server.client_no_retry(),
        ns,
        &resource("", "v1", "ConfigMap"),
    )
}

fn typed(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a Kubernetes object")
}

/// The Status of a failed request.
fn status(err: kube::Error) -> Box<kube::core::Status> {
    match err {
        kube::Error::Api(status) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// (field, reason) of every cause of a Status.
fn causes(status: &kube::core::Status) -> Vec<(String, String)> {
    status
        .details
        .as_ref()
        .map(|d| {
            d.causes
                .iter()
                .map(|c| (c.field.clone(), c.reason.clone()))
                .collect()
        })
        .unwrap_or_default()
}

type Event = kube::Result<WatchEvent<DynamicObject>>;

/// The next non-bookmark event of a watch.
async fn next_change<S: Stream<Item = Event> + Unpin>(stream: &mut S) -> WatchEvent<DynamicObject> {
    loop {
        let event = tokio::time::timeout(patience(PATIENCE), stream.next())
            .await
            .expect("watch stream stalled")
            .expect("watch stream ended")
            .expect("watch error");
        if !matches!(event, WatchEvent::Bookmark(_)) {
            return event;
        }
    }
}

fn finalizers(obj: &DynamicObject) -> Vec<String> {
    obj.metadata.finalizers.clone().unwrap_or_default()
}

/// One raw HTTP/1.1 request; returns (status, parsed JSON body).
async fn raw(
    server: &TestApiServer,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> (u16, Value) {
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let content_type = content_type
        .map(|c| format!("Content-Type: {c}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{content_type}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream.write_all(body).await.expect("write");
    let mut reply = Vec::new();
    tokio::time::timeout(patience(PATIENCE), stream.read_to_end(&mut reply))
        .await
        .expect("a reply in time")
        .expect("read");
    let reply = String::from_utf8(reply).expect("utf-8");
    let (head, mut body) = reply.split_once("\r\n\r\n").expect("headers");
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let mut text = String::new();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        loop {
            let (size, rest) = body.split_once("\r\n").expect("chunk size");
            let n = usize::from_str_radix(size.trim(), 16).expect("hex size");
            if n == 0 {
                break;
            }
            text.push_str(&rest[..n]);
            body = &rest[n + 2..];
        }
    } else {
        text = body.to_string();
    }
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

// ---------------------------------------------------------------------------------------------
// Finalizers and deletion
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn deleting_an_object_with_finalizers_marks_it_and_watchers_see_modified()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let cms = config_maps(&server, "default");
    let mut held = config_map("default", "held", &[("k", "v")]);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    cms.create(&PostParams::default(), &typed(held)).await?;
    let mut events = cms.watch(&WatchParams::default(), "0").await?.boxed();
    assert!(matches!(
        next_change(&mut events).await,
        WatchEvent::Added(_)
    ));

    let answer = cms.delete("held", &DeleteParams::default()).await?;
    let marked = answer.left().expect("the object, still there");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(0));
    assert_eq!(finalizers(&marked), ["example.com/hold"]);

    match next_change(&mut events).await {
        WatchEvent::Modified(o) => assert!(o.metadata.deletion_timestamp.is_some()),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    let still = cms.get("held").await?;
    assert!(still.metadata.deletion_timestamp.is_some());
    // A second DELETE changes nothing.
    let again = cms.delete("held", &DeleteParams::default()).await?;
    assert_eq!(
        again.left().and_then(|o| o.metadata.resource_version),
        still.metadata.resource_version
    );
    Ok(())
}

#[tokio::test]
async fn removing_the_last_finalizer_deletes_the_object_and_watchers_see_deleted()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let cms = config_maps(&server, "default");
    for name in ["by-put", "by-patch"] {
        let mut held = config_map("default", name, &[]);
        held["metadata"]["finalizers"] = json!(["example.com/a", "example.com/b"]);
        cms.create(&PostParams::default(), &typed(held)).await?;
        cms.delete(name, &DeleteParams::default()).await?;
    }
    let mut events = cms
        .watch(
            &WatchParams::default(),
            &server.resource_version().to_string(),
        )
        .await?
        .boxed();

    // One finalizer left: still there, MODIFIED.
    let mut obj = cms.get("by-put").await?;
    obj.metadata.finalizers = Some(vec!["example.com/b".into()]);
    cms.replace("by-put", &PostParams::default(), &obj).await?;
    assert!(matches!(
        next_change(&mut events).await,
        WatchEvent::Modified(_)
    ));
    // The last one goes: DELETED, and the object is gone.
    let mut obj = cms.get("by-put").await?;
    obj.metadata.finalizers = Some(vec![]);
    cms.replace("by-put", &PostParams::default(), &obj).await?;
    match next_change(&mut events).await {
        WatchEvent::Deleted(o) => assert_eq!(o.metadata.name.as_deref(), Some("by-put")),
        other => panic!("expected DELETED, got {other:?}"),
    }
    assert_eq!(status(cms.get("by-put").await.expect_err("gone")).code, 404);

    // The same through a merge patch.
    let patch = json!({"metadata": {"finalizers": null}});
    cms.patch("by-patch", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    match next_change(&mut events).await {
        WatchEvent::Deleted(o) => assert_eq!(o.metadata.name.as_deref(), Some("by-patch")),
        other => panic!("expected DELETED, got {other:?}"),
    }
    assert_eq!(server.objects("v1", "ConfigMap").len(), 0);
    Ok(())
}

#[tokio::test]
async fn adding_a_finalizer_to_an_object_being_deleted_is_invalid() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let cms = config_maps(&server, "default");
    let mut held = config_map("default", "held", &[]);
    held["metadata"]["finalizers"] = json!(["example.com/a"]);
    cms.create(&PostParams::default(), &typed(held)).await?;
    cms.delete("held", &DeleteParams::default()).await?;

    let mut obj = cms.get("held").await?;
    obj.metadata.finalizers = Some(vec!["example.com/a".into(), "example.com/b".into()]);
    let err = status(
        cms.replace("held", &PostParams::default(), &obj)
            .await
            .expect_err("422"),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        "ConfigMap \"held\" is invalid: metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/b\"}"
    );
    assert_eq!(
        causes(&err),
        [(
            "metadata.finalizers".to_string(),
            "FieldValueForbidden".to_string()
        )]
    );
    Ok(())
}

#[tokio::test]
async fn deleting_a_namespace_terminates_it_deletes_its_content_then_itself() -> anyhow::Result<()>
{
    let server = TestApiServer::start().await?;
    let client = server.client_no_retry();
    let namespaces: Api<DynamicObject> =
        Api::all_with(client.clone(), &resource("", "v1", "Namespace"));
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}});
    let created = namespaces
        .create(&PostParams::default(), &typed(ns))
        .await?;
    assert_eq!(created.data["status"]["phase"], "Active");
    assert_eq!(created.data["spec"]["finalizers"], json!(["kubernetes"]));
    let cms = config_maps(&server, "shop");
    cms.create(
        &PostParams::default(),
        &typed(config_map("shop", "plain", &[])),
    )
    .await?;
    let mut held = config_map("shop", "held", &[]);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    cms.create(&PostParams::default(), &typed(held)).await?;

    let marked = namespaces
        .delete("shop", &DeleteParams::default())
        .await?
        .left()
        .expect("the namespace, still there");
    assert_eq!(marked.data["status"]["phase"], "Terminating");
    assert!(marked.metadata.deletion_timestamp.is_some());
    // Content without finalizers is gone; content with them is marked.
    assert_eq!(status(cms.get("plain").await.expect_err("gone")).code, 404);
    assert!(cms.get("held").await?.metadata.deletion_timestamp.is_some());
    let list = namespaces
        .list(&ListParams::default().fields("status.phase=Terminating"))
        .await?;
    assert_eq!(list.items.len(), 1);

    // Nothing new may be created in it.
    let err = status(
        cms.create(
            &PostParams::default(),
            &typed(config_map("shop", "late", &[])),
        )
        .await
        .expect_err("403"),
    );
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        err.message,
        "configmaps \"late\" is forbidden: unable to create new content in namespace shop because it is being terminated"
    );
    assert_eq!(
        causes(&err),
        [(
            "metadata.namespace".to_string(),
            "NamespaceTerminating".to_string()
        )]
    );

    // Once the last object lets go, the namespace goes too.
    let patch = json!({"metadata": {"finalizers": null}});
    cms.patch("held", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    assert_eq!(status(cms.get("held").await.expect_err("gone")).code, 404);
    assert_eq!(
        status(namespaces.get("shop").await.expect_err("gone")).code,
        404
    );
    Ok(())
}

#[tokio::test]
async fn delete_preconditions_that_do_not_hold_are_a_409_conflict() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let cms = config_maps(&server, "default");
    let created = cms
        .create(
            &PostParams::default(),
            &typed(config_map("default", "c", &[])),
        )
        .await?;
    let uid = created.metadata.uid.clone().unwrap_or_default();
    let rv = created
        .metadata
        .resource_version
        .clone()
        .unwrap_or_default();

    let with = |uid: Option<&str>, rv: Option<&str>| DeleteParams {
        preconditions: Some(Preconditions {
            uid: uid.map(str::to_string),
            resource_version: rv.map(str::to_string),
        }),
        ..DeleteParams::default()
    };
    let err = status(
        cms.delete("c", &with(Some("not-the-uid"), None))
            .await
            .expect_err("409"),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        err.message,
        format!(
            "Operation cannot be fulfilled on configmaps \"c\": Precondition failed: UID in precondition: not-the-uid, UID in object meta: {uid}"
        )
    );
    let err = status(
        cms.delete("c", &with(None, Some("1")))
            .await
            .expect_err("409"),
    );
    assert_eq!(
        err.message,
        format!(
            "Operation cannot be fulfilled on configmaps \"c\": Precondition failed: ResourceVersion in precondition: 1, ResourceVersion in object meta: {rv}"
        )
    );
    assert!(
        cms.get("c").await.is_ok(),
        "a failed precondition deletes nothing"
    );
    // Deleted at once: a ConfigMap's registry answers with a Status naming it, not the object.
    let answer = cms.delete("c", &with(Some(&uid), Some(&rv))).await?;
    let done = answer.right().expect("a Status");
    let details = done.details.expect("details");
    assert_eq!(
        (
            details.name.as_str(),
            details.kind.as_str(),
            details.uid.as_str()
        ),
        ("c", "configmaps", uid.as_str())
    );
    assert_eq!(status(cms.get("c").await.expect_err("gone")).code, 404);
    // A Pod's registry answers with the pod.
    server.create(pod("default", "web-1"))?;
    let pods: Api<DynamicObject> = Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &resource("", "v1", "Pod"),
    );
    let gone = pods.delete("web-1", &DeleteParams::default()).await?;
    assert_eq!(
        gone.left().and_then(|p| p.metadata.name).as_deref(),
        Some("web-1")
    );
    Ok(())
}

#[tokio::test]
async fn foreground_deletion_passes_through_the_garbage_collectors_finalizer() -> anyhow::Result<()>
{
    let server = TestApiServer::start().await?;
    let cms = config_maps(&server, "default");
    cms.create(
        &PostParams::default(),
        &typed(config_map("default", "c", &[])),
    )
    .await?;
    let mut events = cms
        .watch(
            &WatchParams::default(),
            &server.resource_version().to_string(),
        )
        .await?
        .boxed();
    cms.delete("c", &DeleteParams::foreground()).await?;
    match next_change(&mut events).await {
        WatchEvent::Modified(o) => {
            assert_eq!(finalizers(&o), ["foregroundDeletion"]);
            assert!(o.metadata.deletion_timestamp.is_some());
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    assert!(matches!(
        next_change(&mut events).await,
        WatchEvent::Deleted(_)
    ));
    Ok(())
}

#[tokio::test]
async fn an_unknown_propagation_policy_is_invalid_and_delete_options_bodies_are_read()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.create(config_map("default", "c", &[]))?;
    let path = "/api/v1/namespaces/default/configmaps/c";
    let (code, body) = raw(
        &server,
        "DELETE",
        &format!("{path}?propagationPolicy=Sideways"),
        None,
        b"",
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")));
    assert_eq!(
        body["message"],
        "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"Sideways\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
    );
    // A DeleteOptions body (as kubectl sends it) is honoured: a wrong uid precondition.
    let options =
        json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "x"}});
    let (code, _) = raw(
        &server,
        "DELETE",
        path,
        Some("application/json"),
        options.to_string().as_bytes(),
    )
    .await;
    assert_eq!(code, 409);
    let (code, _) = raw(
        &server,
        "DELETE",
        path,
        Some("application/json"),
        br#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}"#,
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        server
            .get("v1", "ConfigMap", Some("default"), "c")
            .is_none()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reads at a resourceVersion the server has not reached
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_list_at_a_future_resource_version_waits_then_answers_504_too_large() -> anyhow::Result<()>
{
    let server = TestApiServer::start().await?;
    server
        .faults()
        .too_large_resource_version_wait(Duration::from_millis(300));
    let current = server.resource_version();
    let future = current + 100;
    let cms = config_maps(&server, "default");
    let started = Instant::now();
    let err = status(
        cms.list(&ListParams::default().at(&future.to_string()))
            .await
            .expect_err("504"),
    );
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "it waited first"
    );
    assert_eq!((err.code, err.reason.as_str()), (504, "Timeout"));
    assert_eq!(
        err.message,
        format!("Timeout: Too large resource version: {future}, current: {current}")
    );
    let details = err.details.as_ref().expect("details");
    assert_eq!(details.retry_after_seconds, 1);
    assert_eq!(details.causes[0].reason, "ResourceVersionTooLarge");
    assert_eq!(details.causes[0].message, "Too large resource version");
    // NotOlderThan spelled out, Exact, and paginated lists wait the same way.
    for params in [
        ListParams::default()
            .at(&future.to_string())
            .matching(VersionMatch::NotOlderThan),
        ListParams::default()
            .at(&future.to_string())
            .matching(VersionMatch::Exact),
        ListParams::default().at(&future.to_string()).limit(10),
    ] {
        let started = Instant::now();
        let err = status(cms.list(&params).await.expect_err("504"));
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "{params:?}"
        );
        assert_eq!(
            (err.code, err.details.map(|d| d.retry_after_seconds)),
            (504, Some(1))
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_list_at_a_future_resource_version_is_served_once_the_server_reaches_it()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let next = server.resource_version() + 1;
    let writer = server.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        writer.create(config_map("default", "late", &[])).ok();
    });
    let list = config_maps(&server, "default")
        .list(&ListParams::default().at(&next.to_string()))
        .await?;
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.metadata.resource_version, Some(next.to_string()));
    Ok(())
}

#[tokio::test]
async fn a_streaming_list_from_a_future_resource_version_ends_with_a_504_error_event()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server
        .faults()
        .too_large_resource_version_wait(Duration::from_millis(200));
    server.create(config_map("default", "c", &[]))?;
    let current = server.resource_version();
    let future = current + 50;
    let cms = config_maps(&server, "default");
    let started = Instant::now();
    let events: Vec<_> = cms
        .watch(&WatchParams::streaming_lists(), &future.to_string())
        .await?
        .try_collect()
        .await?;
    assert!(started.elapsed() >= Duration::from_millis(200));
    match events.as_slice() {
        [WatchEvent::Error(e)] => {
            assert_eq!((e.code, e.reason.as_str()), (504, "Timeout"));
            assert_eq!(
                e.message,
                format!("Timeout: Too large resource version: {future}, current: {current}")
            );
        }
        other => panic!("expected one ERROR event, got {other:?}"),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Field selectors
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn field_labels_a_kind_does_not_support_are_refused_with_its_message() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let client = server.client_no_retry();
    let refused =
        |group: &'static str, version: &'static str, kind: &'static str, sel: &'static str| {
            let client = client.clone();
            async move {
                let api: Api<DynamicObject> =
                    Api::all_with(client, &resource(group, version, kind));
                let err = status(
                    api.list(&ListParams::default().fields(sel))
                        .await
                        .expect_err("400"),
                );
                assert_eq!(
                    (err.code, err.reason.as_str()),
                    (400, "BadRequest"),
                    "{kind} {sel}"
                );
                err.message
            }
        };
    assert_eq!(
        refused("", "v1", "Pod", "status.hostIP=10.0.0.1").await,
        "field label not supported: status.hostIP"
    );
    assert_eq!(
        refused("", "v1", "ConfigMap", "data.key=v").await,
        "\"data.key\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    );
    assert_eq!(
        refused("batch", "v1", "Job", "status.failed=1").await,
        "field label \"status.failed\" not supported for batchv1.Job"
    );
    assert_eq!(
        refused("", "v1", "Node", "metadata.namespace=x").await,
        "field label not supported: metadata.namespace"
    );
    assert_eq!(
        refused("example.com", "v1", "Widget", "spec.color=blue").await,
        "field label not supported: spec.color"
    );
    // Watches are checked the same way.
    let pods: Api<DynamicObject> = Api::all_with(client, &resource("", "v1", "Pod"));
    let err = status(
        pods.watch(&WatchParams::default().fields("spec.nope=x"), "0")
            .await
            .err()
            .expect("400"),
    );
    assert_eq!(err.message, "field label not supported: spec.nope");
    // A label selector that does not parse is a 400 too, for lists and watches.
    let err = status(
        pods.list(&ListParams::default().labels("a in b"))
            .await
            .expect_err("400"),
    );
    assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"));
    let err = status(
        pods.watch(&WatchParams::default().labels("a in b"), "0")
            .await
            .err()
            .expect("400"),
    );
    assert_eq!(err.code, 400);
    Ok(())
}

/// The selector table shared with config validation and the `dir:` source: the server
/// takes what apimachinery takes (200) and refuses the rest with its message (400).
#[tokio::test]
async fn selectors_are_parsed_and_checked_as_apimachinery_does() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let client = server.client_no_retry();
    let table: Value = serde_json::from_str(include_str!("../../../fixtures/selectors.json"))?;
    let answer = |group: &str, kind: &str, params: ListParams| {
        // Every kind of the table is served at v1 of its group.
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(group, "v1", kind));
        async move { api.list(&params).await.map(|_| ()).map_err(status) }
    };
    for row in table["label"].as_array().expect("label rows") {
        let (sel, want) = (row[0].as_str().expect("selector"), row[1].as_str());
        match (
            answer("", "Pod", ListParams::default().labels(sel)).await,
            want,
        ) {
            (Ok(()), None) => {}
            (Err(e), Some(want)) if e.code == 400 && e.message.contains(want) => {}
            (got, want) => panic!("label selector {sel:?}: got {got:?}, want {want:?}"),
        }
    }
    for row in table["field"].as_array().expect("field rows") {
        let [group, kind, sel, want] = row.as_array().expect("row").as_slice() else {
            panic!("{row}")
        };
        let (group, kind) = (group.as_str().expect("group"), kind.as_str().expect("kind"));
        let sel = sel.as_str().expect("selector");
        match (
            answer(group, kind, ListParams::default().fields(sel)).await,
            want.as_str(),
        ) {
            (Ok(()), None) => {}
            (Err(e), Some(want)) if e.code == 400 && e.message.contains(want) => {}
            (got, want) => panic!("{kind} field selector {sel:?}: got {got:?}, want {want:?}"),
        }
    }
    Ok(())
}

#[tokio::test]
async fn supported_field_labels_select_on_the_values_a_real_server_derives() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.create(pod("default", "web-1"))?;
    let mut pending = pod("default", "web-2");
    pending["status"] = json!({"phase": "Pending"});
    pending["spec"]["hostNetwork"] = json!(true);
    server.create(pending)?;
    let pods: Api<DynamicObject> = Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &resource("", "v1", "Pod"),
    );
    let names = |list: kube::core::ObjectList<DynamicObject>| -> Vec<String> {
        list.items
            .into_iter()
            .map(|o| o.metadata.name.unwrap_or_default())
            .collect()
    };
    let select = |sel: &'static str| {
        let pods = pods.clone();
        async move { pods.list(&ListParams::default().fields(sel)).await }
    };
    assert_eq!(names(select("status.phase=Running").await?), ["web-1"]);
    // hostNetwork is "false" when unset, as the pod's selectable field set has it.
    assert_eq!(names(select("spec.hostNetwork=false").await?), ["web-1"]);
    assert_eq!(names(select("spec.hostNetwork=true").await?), ["web-2"]);
    assert_eq!(names(select("status.podIP=10.244.1.23").await?), ["web-1"]);
    // The old v1 label spec.host means spec.nodeName.
    assert_eq!(names(select("spec.host=node-1").await?).len(), 2);

    // Jobs: status.successful is status.succeeded, 0 when unset.
    server.create(json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "j", "namespace": "default"}, "spec": {}}))?;
    let jobs: Api<DynamicObject> =
        Api::all_with(server.client_no_retry(), &resource("batch", "v1", "Job"));
    assert_eq!(
        jobs.list(&ListParams::default().fields("status.successful=0"))
            .await?
            .items
            .len(),
        1
    );
    Ok(())
}

#[tokio::test]
async fn custom_resources_select_on_the_selectable_fields_of_their_crd() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.create(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "selectableFields": [{"jsonPath": ".spec.color"}]}]
        }
    }))?;
    for (name, color) in [("a", "blue"), ("b", "red")] {
        server.create(json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"color": color, "size": 1}}))?;
    }
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &resource("example.com", "v1", "Widget"),
    );
    let blue = widgets
        .list(&ListParams::default().fields("spec.color=blue"))
        .await?;
    assert_eq!(blue.items.len(), 1);
    let err = status(
        widgets
            .list(&ListParams::default().fields("spec.size=1"))
            .await
            .expect_err("400"),
    );
    assert_eq!(err.message, "field label not supported: spec.size");
    // Deleted at once, a custom resource is answered with a Status, as its registry does.
    let done = widgets.delete("a", &DeleteParams::default()).await?;
    assert_eq!(
        done.right().map(|s| s.status),
        Some(Some(kube::core::response::StatusSummary::Success))
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_object_without_a_name_or_with_a_bad_one_is_invalid_with_field_causes()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let cms = config_maps(&server, "default");
    let mut nameless = config_map("default", "", &[]);
    nameless["metadata"]
        .as_object_mut()
        .map(|m| m.remove("name"));
    let err = status(
        cms.create(&PostParams::default(), &typed(nameless))
            .await
            .expect_err("422"),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        err.message,
        "ConfigMap \"\" is invalid: metadata.name: Required value: name or generateName is required"
    );
    assert_eq!(
        causes(&err),
        [(
            "metadata.name".to_string(),
            "FieldValueRequired".to_string()
        )]
    );

    let err = status(
        cms.create(
            &PostParams::default(),
            &typed(config_map("default", "Bad_Name", &[])),
        )
        .await
        .expect_err("422"),
    );
    assert!(
        err.message.starts_with(
            "ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"
        ),
        "{}",
        err.message
    );

    let mut labelled = config_map("default", "labelled", &[("bad key", "v")]);
    labelled["metadata"]["labels"] = json!({"app": "bad value!", "ok/key": "v"});
    let err = status(
        cms.create(&PostParams::default(), &typed(labelled))
            .await
            .expect_err("422"),
    );
    assert_eq!(
        causes(&err),
        [
            (
                "metadata.labels".to_string(),
                "FieldValueInvalid".to_string()
            ),
            ("data[bad key]".to_string(), "FieldValueInvalid".to_string()),
        ]
    );
    // generateName stands in for the name.
    let mut generated = config_map("default", "", &[]);
    generated["metadata"] = json!({"generateName": "gen-", "namespace": "default"});
    let created = cms
        .create(&PostParams::default(), &typed(generated))
        .await?;
    assert!(
        created
            .metadata
            .name
            .unwrap_or_default()
            .starts_with("gen-")
    );
    Ok(())
}

#[tokio::test]
async fn a_pod_without_containers_and_a_deployment_not_matching_its_selector_are_invalid()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let pods: Api<DynamicObject> = Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &resource("", "v1", "Pod"),
    );
    let mut bare = pod("default", "bare");
    bare["spec"]["containers"] = json!([]);
    let err = status(
        pods.create(&PostParams::default(), &typed(bare))
            .await
            .expect_err("422"),
    );
    assert_eq!(
        err.message,
        "Pod \"bare\" is invalid: spec.containers: Required value"
    );

    let deployments: Api<DynamicObject> = Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &resource("apps", "v1", "Deployment"),
    );
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "other"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
        }
    });
    let err = status(
        deployments
            .create(&PostParams::default(), &typed(deployment))
            .await
            .expect_err("422"),
    );
    assert_eq!(
        causes(&err),
        [(
            "spec.template.metadata.labels".to_string(),
            "FieldValueInvalid".to_string()
        )]
    );
    assert!(
        err.message
            .starts_with("Deployment.apps \"web\" is invalid")
    );
    Ok(())
}

#[tokio::test]
async fn a_replace_may_not_change_what_is_immutable() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let cms = config_maps(&server, "default");
    let mut frozen = config_map("default", "frozen", &[("k", "v")]);
    frozen["immutable"] = json!(true);
    cms.create(&PostParams::default(), &typed(frozen)).await?;
    let mut changed = cms.get("frozen").await?;
    changed.data["data"] = json!({"k": "other"});
    let err = status(
        cms.replace("frozen", &PostParams::default(), &changed)
            .await
            .expect_err("422"),
    );
    assert_eq!(
        err.message,
        "ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    assert_eq!(
        causes(&err),
        [("data".to_string(), "FieldValueForbidden".to_string())]
    );
    // Labels may still change.
    let mut labelled = cms.get("frozen").await?;
    labelled.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
    cms.replace("frozen", &PostParams::default(), &labelled)
        .await?;

    let deployments: Api<DynamicObject> = Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &resource("apps", "v1", "Deployment"),
    );
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web", "v": "1"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}
        }
    });
    deployments
        .create(&PostParams::default(), &typed(deployment))
        .await?;
    let mut moved = deployments.get("web").await?;
    moved.data["spec"]["selector"] = json!({"matchLabels": {"app": "web", "v": "1"}});
    let err = status(
        deployments
            .replace("web", &PostParams::default(), &moved)
            .await
            .expect_err("422"),
    );
    assert_eq!(
        causes(&err),
        [("spec.selector".to_string(), "FieldValueInvalid".to_string())]
    );
    assert!(
        err.message.ends_with("field is immutable"),
        "{}",
        err.message
    );
    Ok(())
}

#[tokio::test]
async fn the_scope_of_a_kind_decides_where_it_can_be_created() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let body = config_map("default", "c", &[]).to_string();
    // A namespaced kind is not created through its cluster-wide path.
    let (code, _) = raw(
        &server,
        "POST",
        "/api/v1/configmaps",
        Some("application/json"),
        body.as_bytes(),
    )
    .await;
    assert_eq!(code, 405);
    // A cluster-scoped kind has no namespaced path.
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}).to_string();
    let (code, _) = raw(
        &server,
        "POST",
        "/api/v1/namespaces/default/nodes",
        Some("application/json"),
        node.as_bytes(),
    )
    .await;
    assert_eq!(code, 404);
    // A namespace in the body of a cluster-scoped object is dropped, as the server does.
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "namespace": "default"}})
        .to_string();
    let (code, body) = raw(
        &server,
        "POST",
        "/api/v1/nodes",
        Some("application/json"),
        node.as_bytes(),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(body["metadata"].get("namespace"), None);
    assert!(server.get("v1", "Node", None, "n1").is_some());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Media types
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn protobuf_is_read_for_built_in_kinds_custom_kinds_are_415_and_yaml_is_accepted()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let path = "/api/v1/namespaces/default/configmaps";
    // An empty Deployment in protobuf: decoded, then refused as a nameless object is.
    let (code, body) = raw(
        &server,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        Some("application/vnd.kubernetes.protobuf"),
        b"k8s\x00\x0a\x15\x0a\x07apps/v1\x12\x0aDeployment\x12\x00",
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (422, Some("Invalid")),
        "{body}"
    );
    // A custom resource in protobuf: no protobuf type, as on a real server.
    let (code, body) = raw(
        &server,
        "POST",
        "/apis/example.com/v1/namespaces/default/widgets",
        Some("application/vnd.kubernetes.protobuf"),
        b"k8s\x00\x0a\x18\x0a\x0eexample.com/v1\x12\x06Widget\x12\x00",
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
    assert_eq!(
        body["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml"
    );
    // A ConfigMap in protobuf, byte for byte what `kubectl create configmap cm2
    // --from-literal=a=b --from-literal=key2=value2` sends.
    let (code, body) = raw(
        &server,
        "POST",
        path,
        Some("application/vnd.kubernetes.protobuf"),
        b"k8s\x00\x0a\x0f\x0a\x02v1\x12\x09ConfigMap\x12\x2d\x0a\x13\x0a\x03cm2\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\x42\x00\x12\x06\x0a\x01a\x12\x01b\x12\x0e\x0a\x04key2\x12\x06value2\x1a\x00\x22\x00",
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["data"], json!({"a": "b", "key2": "value2"}));
    // Neither JSON nor YAML nor protobuf.
    let (code, _) = raw(&server, "POST", path, Some("text/plain"), b"name: x").await;
    assert_eq!(code, 415);
    let yaml = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\ndata:\n  k: v\n";
    let (code, body) = raw(
        &server,
        "POST",
        path,
        Some("application/yaml"),
        yaml.as_bytes(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["data"]["k"], "v");
    assert_eq!(body["metadata"]["namespace"], "default");
    Ok(())
}

#[tokio::test]
async fn lists_and_gets_asked_for_as_a_table_are_printed_by_the_server() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.create(pod("default", "web-1"))?;
    let url = format!("{}/api/v1/namespaces/default/pods", server.url());
    let mut request = axum::http::Request::get(url);
    request = request.header(
        "Accept",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    );
    let table: Value = server
        .client_no_retry()
        .request(request.body(Vec::new())?)
        .await?;
    assert_eq!(table["kind"], "Table");
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(columns[..5], ["Name", "Ready", "Status", "Restarts", "Age"]);
    let cells = table["rows"][0]["cells"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        cells[..4],
        [json!("web-1"), json!("2/2"), json!("Running"), json!("0")]
    );
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Discovery
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn discovery_describes_the_served_kinds_with_scope_verbs_and_short_names()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let version = server.client_no_retry().apiserver_version().await?;
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "36")
    );

    let discovery = kube::discovery::Discovery::new(server.client_no_retry())
        .run()
        .await?;
    let (pods, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Pod"))
        .expect("pods are discovered");
    assert_eq!(pods.plural, "pods");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    assert!(caps.supports_operation(kube::discovery::verbs::WATCH));
    let (_, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Namespace"))
        .expect("namespaces are discovered");
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    assert!(
        discovery
            .resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
            .is_some()
    );

    let (code, core) = raw(&server, "GET", "/api/v1", None, b"").await;
    assert_eq!(code, 200);
    let pods = core["resources"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["name"] == "pods"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(pods["kind"], "Pod");
    let (code, _) = raw(&server, "GET", "/apis/apps", None, b"").await;
    assert_eq!(code, 200);
    // A custom resource defined by a CRD is discovered with its short names.
    server.create(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Cluster",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true}]}
    }))?;
    let (code, widgets) = raw(&server, "GET", "/apis/example.com/v1", None, b"").await;
    assert_eq!(code, 200);
    assert_eq!(widgets["resources"][0]["shortNames"], json!(["wd"]));
    assert_eq!(widgets["resources"][0]["namespaced"], json!(false));
    Ok(())
}

#[tokio::test]
async fn aggregated_discovery_is_served_to_clients_that_ask_for_it() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let accept =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let get = |path: &str| {
        axum::http::Request::get(format!("{}{path}", server.url()))
            .header("Accept", accept)
            .body(Vec::new())
    };
    let client = server.client_no_retry();
    let groups: Value = client.request(get("/apis")?).await?;
    assert_eq!(groups["kind"], "APIGroupDiscoveryList");
    assert_eq!(groups["apiVersion"], "apidiscovery.k8s.io/v2");
    let apps = groups["items"]
        .as_array()
        .and_then(|items| items.iter().find(|g| g["metadata"]["name"] == "apps"))
        .cloned()
        .unwrap_or_default();
    let deployments = apps["versions"][0]["resources"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["resource"] == "deployments"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(deployments["scope"], "Namespaced");
    assert_eq!(deployments["shortNames"], json!(["deploy"]));
    assert_eq!(
        deployments["responseKind"],
        json!({"group": "apps", "version": "v1", "kind": "Deployment"})
    );
    let core: Value = client.request(get("/api")?).await?;
    assert_eq!(core["items"][0]["versions"][0]["version"], "v1");
    Ok(())
}

#[tokio::test]
async fn creates_in_a_namespace_that_does_not_exist_are_a_404() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let client = server.client_no_retry();
    let namespaces: Api<DynamicObject> =
        Api::all_with(client.clone(), &resource("", "v1", "Namespace"));
    // A fresh cluster has its four namespaces.
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|ns| ns.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        ["default", "kube-node-lease", "kube-public", "kube-system"]
    );

    let expect_missing = |err: kube::Error| {
        let err = status(err);
        assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
        assert_eq!(err.message, "namespaces \"nowhere\" not found");
        let details = err.details.expect("details");
        assert_eq!(
            (details.name.as_str(), details.kind.as_str()),
            ("nowhere", "namespaces")
        );
    };
    let cms = config_maps(&server, "nowhere");
    expect_missing(
        cms.create(
            &PostParams::default(),
            &typed(config_map("nowhere", "c", &[])),
        )
        .await
        .expect_err("404"),
    );
    // The admission runs before validation: an invalid object gets the same answer.
    let mut invalid = config_map("nowhere", "c", &[]);
    invalid["metadata"]["name"] = json!("Not_A_Name");
    expect_missing(
        cms.create(&PostParams::default(), &typed(invalid))
            .await
            .expect_err("404"),
    );
    // Dry runs and creating applies are refused alike.
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    expect_missing(
        cms.create(&dry, &typed(config_map("nowhere", "c", &[])))
            .await
            .expect_err("404"),
    );
    expect_missing(
        cms.patch(
            "c",
            &PatchParams::apply("test"),
            &Patch::Apply(config_map("nowhere", "c", &[])),
        )
        .await
        .expect_err("404"),
    );
    assert!(server.objects("v1", "ConfigMap").is_empty());

    // Once the namespace exists, the same create succeeds.
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nowhere"}});
    namespaces
        .create(&PostParams::default(), &typed(ns))
        .await?;
    cms.create(
        &PostParams::default(),
        &typed(config_map("nowhere", "c", &[])),
    )
    .await?;

    // Seeding through the handle creates a missing namespace instead.
    server.create(config_map("seeded", "c", &[]))?;
    assert!(server.get("v1", "Namespace", None, "seeded").is_some());

    // The namespaces a cluster needs may not be deleted; others may.
    let err = status(
        namespaces
            .delete("default", &DeleteParams::default())
            .await
            .expect_err("403"),
    );
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        err.message,
        "namespaces \"default\" is forbidden: this namespace may not be deleted"
    );
    namespaces
        .delete("kube-node-lease", &DeleteParams::default())
        .await?;
    Ok(())
}

#[tokio::test]
async fn deletecollection_deletes_what_the_selectors_select_and_answers_the_list()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let seed = |ns: &str, name: &str, app: &str, finalizer: bool| {
        let mut cm = config_map(ns, name, &[]);
        cm["metadata"]["labels"] = json!({"app": app});
        if finalizer {
            cm["metadata"]["finalizers"] = json!(["example.com/hold"]);
        }
        server.create(cm).map(|_| ())
    };
    seed("shop", "a", "web", false)?;
    seed("shop", "b", "web", true)?;
    seed("shop", "c", "db", false)?;
    seed("default", "d", "web", false)?;
    let cms = config_maps(&server, "shop");
    let names = |list: &kube::core::ObjectList<DynamicObject>| -> Vec<String> {
        list.items
            .iter()
            .filter_map(|o| o.metadata.name.clone())
            .collect()
    };
    let web = ListParams::default().labels("app=web");

    // A dry run answers the list and deletes nothing.
    let dry = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    let listed = cms
        .delete_collection(&dry, &web)
        .await?
        .left()
        .expect("a list");
    assert_eq!(names(&listed), ["a", "b"]);
    assert_eq!(server.objects("v1", "ConfigMap").len(), 4);

    let rv = server.resource_version().to_string();
    let mut events = cms.watch(&WatchParams::default(), &rv).await?.boxed();
    let deleted = cms
        .delete_collection(&DeleteParams::default(), &web)
        .await?
        .left()
        .expect("a list");
    assert_eq!(names(&deleted), ["a", "b"]);
    assert_eq!(deleted.types.kind, "ConfigMapList");
    // Without finalizers an object goes; with them it is marked; others stay.
    assert_eq!(status(cms.get("a").await.expect_err("gone")).code, 404);
    assert!(cms.get("b").await?.metadata.deletion_timestamp.is_some());
    cms.get("c").await?;
    config_maps(&server, "default").get("d").await?;
    match next_change(&mut events).await {
        WatchEvent::Deleted(obj) => assert_eq!(obj.metadata.name.as_deref(), Some("a")),
        other => panic!("expected DELETED a, got {other:?}"),
    }
    match next_change(&mut events).await {
        WatchEvent::Modified(obj) => assert_eq!(obj.metadata.name.as_deref(), Some("b")),
        other => panic!("expected MODIFIED b, got {other:?}"),
    }

    // Field selectors select too; a selector that does not parse is 400.
    let by_name = ListParams::default().fields("metadata.name=c");
    cms.delete_collection(&DeleteParams::default(), &by_name)
        .await?;
    assert_eq!(status(cms.get("c").await.expect_err("gone")).code, 404);
    let err = status(
        cms.delete_collection(
            &DeleteParams::default(),
            &ListParams::default().fields("data.key=x"),
        )
        .await
        .expect_err("400"),
    );
    assert_eq!(err.code, 400);

    // Discovery advertises the verb, but Namespaces have none.
    let doc: Value = server
        .client_no_retry()
        .request(axum::http::Request::get("/api/v1").body(Vec::new())?)
        .await?;
    let verbs_of = |name: &str| -> Vec<String> {
        doc["resources"]
            .as_array()
            .and_then(|r| r.iter().find(|r| r["name"] == name))
            .and_then(|r| r["verbs"].as_array())
            .map(|v| {
                v.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert!(verbs_of("configmaps").contains(&"deletecollection".to_string()));
    assert!(!verbs_of("namespaces").contains(&"deletecollection".to_string()));
    let namespaces: Api<DynamicObject> =
        Api::all_with(server.client_no_retry(), &resource("", "v1", "Namespace"));
    let err = status(
        namespaces
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .expect_err("405"),
    );
    assert_eq!(err.code, 405);
    Ok(())
}

/// An ownerReference to `owner` (a stored object).
fn owned_by(owner: &Value, block: bool) -> Value {
    json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": block,
    })
}

fn api(server: &TestApiServer, group: &str, kind: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &resource(group, "v1", kind),
    )
}

/// A namespaced object of `api_version`/`kind` in `default`, owned by `owners`.
fn dependent(api_version: &str, kind: &str, name: &str, owners: &[Value]) -> Value {
    json!({"apiVersion": api_version, "kind": kind,
           "metadata": {"name": name, "namespace": "default", "ownerReferences": owners}})
}

#[tokio::test]
async fn deleting_an_owner_in_the_background_deletes_its_dependents() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let deploy = server.create(dependent("apps/v1", "Deployment", "web", &[]))?;
    let rs = server.create(dependent(
        "apps/v1",
        "ReplicaSet",
        "web-1",
        &[owned_by(&deploy, true)],
    ))?;
    server.create(dependent("v1", "Pod", "web-1-a", &[owned_by(&rs, true)]))?;
    let keeper = server.create(config_map("default", "keeper", &[]))?;
    server.create(dependent(
        "v1",
        "ConfigMap",
        "shared",
        &[owned_by(&deploy, false), owned_by(&keeper, false)],
    ))?;
    let pods = api(&server, "", "Pod");
    let rv = server.resource_version().to_string();
    let mut events = pods.watch(&WatchParams::default(), &rv).await?.boxed();

    api(&server, "apps", "Deployment")
        .delete("web", &DeleteParams::default())
        .await?;
    // The ReplicaSet, and through it the Pod, are collected; watchers see the Pod go.
    assert!(
        server
            .get("apps/v1", "ReplicaSet", Some("default"), "web-1")
            .is_none()
    );
    assert!(
        server
            .get("v1", "Pod", Some("default"), "web-1-a")
            .is_none()
    );
    match next_change(&mut events).await {
        WatchEvent::Deleted(obj) => assert_eq!(obj.metadata.name.as_deref(), Some("web-1-a")),
        other => panic!("expected DELETED web-1-a, got {other:?}"),
    }
    // A dependent with another live owner only loses its reference to the deleted one.
    let shared = config_maps(&server, "default").get("shared").await?;
    let owners: Vec<String> = shared
        .metadata
        .owner_references
        .unwrap_or_default()
        .into_iter()
        .map(|o| o.name)
        .collect();
    assert_eq!(owners, ["keeper"]);
    Ok(())
}

#[tokio::test]
async fn a_foreground_delete_waits_for_blocking_dependents() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let deploy = server.create(dependent("apps/v1", "Deployment", "web", &[]))?;
    let mut held = dependent("apps/v1", "ReplicaSet", "web-1", &[owned_by(&deploy, true)]);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    server.create(held)?;
    server.create(dependent(
        "apps/v1",
        "ReplicaSet",
        "web-2",
        &[owned_by(&deploy, true)],
    ))?;
    let deployments = api(&server, "apps", "Deployment");
    let replica_sets = api(&server, "apps", "ReplicaSet");

    let marked = deployments
        .delete("web", &DeleteParams::foreground())
        .await?
        .left()
        .expect("the owner, still there");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(finalizers(&marked), ["foregroundDeletion"]);
    // Its dependents are deleted; the one held by a finalizer blocks the owner.
    assert_eq!(
        status(replica_sets.get("web-2").await.expect_err("gone")).code,
        404
    );
    let blocking = replica_sets.get("web-1").await?;
    assert!(blocking.metadata.deletion_timestamp.is_some());
    assert_eq!(
        finalizers(&deployments.get("web").await?),
        ["foregroundDeletion"]
    );

    // Once the last blocking dependent is gone, so is the owner.
    let patch = json!({"metadata": {"finalizers": null}});
    replica_sets
        .patch("web-1", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    assert_eq!(
        status(deployments.get("web").await.expect_err("gone")).code,
        404
    );
    Ok(())
}

#[tokio::test]
async fn an_orphaning_delete_keeps_dependents_without_their_owner_reference() -> anyhow::Result<()>
{
    let server = TestApiServer::start().await?;
    let deploy = server.create(dependent("apps/v1", "Deployment", "web", &[]))?;
    server.create(dependent(
        "apps/v1",
        "ReplicaSet",
        "web-1",
        &[owned_by(&deploy, true)],
    ))?;
    let replica_sets = api(&server, "apps", "ReplicaSet");
    let rv = server.resource_version().to_string();
    let mut events = replica_sets
        .watch(&WatchParams::default(), &rv)
        .await?
        .boxed();
    api(&server, "apps", "Deployment")
        .delete("web", &DeleteParams::orphan())
        .await?;
    assert!(
        server
            .get("apps/v1", "Deployment", Some("default"), "web")
            .is_none()
    );
    let orphan = replica_sets.get("web-1").await?;
    assert_eq!(orphan.metadata.owner_references, None);
    match next_change(&mut events).await {
        WatchEvent::Modified(obj) => assert_eq!(obj.metadata.owner_references, None),
        other => panic!("expected MODIFIED web-1, got {other:?}"),
    }

    // batch/v1 Jobs orphan their dependents unless told otherwise, as on a real server.
    let job = server.create(dependent("batch/v1", "Job", "once", &[]))?;
    server.create(dependent("v1", "Pod", "once-a", &[owned_by(&job, true)]))?;
    api(&server, "batch", "Job")
        .delete("once", &DeleteParams::default())
        .await?;
    let pod = api(&server, "", "Pod").get("once-a").await?;
    assert_eq!(pod.metadata.owner_references, None);
    let job = server.create(dependent("batch/v1", "Job", "twice", &[]))?;
    server.create(dependent("v1", "Pod", "twice-a", &[owned_by(&job, true)]))?;
    api(&server, "batch", "Job")
        .delete("twice", &DeleteParams::background())
        .await?;
    assert!(
        server
            .get("v1", "Pod", Some("default"), "twice-a")
            .is_none()
    );
    Ok(())
}

#[tokio::test]
async fn label_selectors_that_do_not_parse_are_a_400_with_the_apimachinery_message()
-> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.create(pod("default", "web-1"))?;
    let pods: Api<DynamicObject> = Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &resource("", "v1", "Pod"),
    );
    for (selector, message) in [
        (
            "app in web",
            "unable to parse requirement: found 'web' expected: '('",
        ),
        ("app=web,", "found '', expected: identifier after ','"),
        (
            "app web",
            "unable to parse requirement: found 'web', expected: in, notin, =, ==, !=, gt, lt",
        ),
        ("app=web x", "found 'x', expected: ',' or 'end of string'"),
        (
            "app=-web",
            "unable to parse requirement: values[0][app]: Invalid value: \"-web\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
        ),
        (
            "a/b/c",
            "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        ),
    ] {
        let params = ListParams::default().labels(selector);
        let err = status(pods.list(&params).await.expect_err("400"));
        assert_eq!(
            (err.code, err.reason.as_str(), err.message.as_str()),
            (400, "BadRequest", message),
            "{selector}"
        );
        // A watch parses it alike.
        let watch = WatchParams::default().labels(selector);
        let err = match pods.watch(&watch, "0").await {
            Err(e) => status(e),
            Ok(_) => panic!("{selector}: the watch started"),
        };
        assert_eq!(
            (err.code, err.message.as_str()),
            (400, message),
            "{selector}"
        );
    }
    // Set-based and integer requirements parse as they do on a real server.
    let matched = pods
        .list(&ListParams::default().labels("app in (,web),!missing"))
        .await?;
    assert_eq!(matched.items.len(), 1);
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Graceful deletion of Pods (issue 29, item 8)
// ------------------------------------------------------------------------------------------

fn pods_api(server: &TestApiServer) -> Api<DynamicObject> {
    Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &resource("", "v1", "Pod"),
    )
}

/// Seconds since the epoch of an RFC 3339 timestamp.
fn epoch_seconds(value: &Value) -> i64 {
    serde_json::from_value::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>(value.clone())
        .expect("a timestamp")
        .0
        .as_second()
}

#[tokio::test]
async fn a_scheduled_pod_is_marked_with_its_grace_period_then_removed() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.faults().pod_stop_time(Duration::from_millis(300));
    let created = server.create(pod("default", "web-1"))?;
    let api = pods_api(&server);
    let rv = server.resource_version().to_string();
    let mut events = api.watch(&WatchParams::default(), &rv).await?.boxed();

    let answer = api
        .delete("web-1", &DeleteParams::default())
        .await?
        .left()
        .expect("the object, not a Status");
    // The fixture's terminationGracePeriodSeconds (30): deletionTimestamp 30 s ahead.
    assert_eq!(answer.metadata.deletion_grace_period_seconds, Some(30));
    let at = answer
        .metadata
        .deletion_timestamp
        .clone()
        .expect("marked")
        .0;
    let ahead = at.as_second() - epoch_seconds(&created["metadata"]["creationTimestamp"]);
    assert!(
        (29..=32).contains(&ahead),
        "deletionTimestamp {at} is {ahead} s after creation"
    );
    assert_eq!(
        answer.metadata.generation,
        Some(2),
        "a graceful delete bumps generation"
    );
    assert_ne!(
        answer.metadata.resource_version.as_deref(),
        created["metadata"]["resourceVersion"].as_str()
    );
    let WatchEvent::Modified(marked) = next_change(&mut events).await else {
        panic!("the mark is a MODIFIED event");
    };
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(30));
    assert!(
        api.get("web-1").await.is_ok(),
        "the pod stays during its grace"
    );
    let WatchEvent::Deleted(gone) = next_change(&mut events).await else {
        panic!("then DELETED");
    };
    assert_eq!(gone.metadata.name.as_deref(), Some("web-1"));
    assert_eq!(status(api.get("web-1").await.expect_err("gone")).code, 404);
    Ok(())
}

#[tokio::test]
async fn unscheduled_pods_and_zero_grace_deletes_go_at_once() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let mut pending = pod("default", "pending-1");
    pending["spec"]
        .as_object_mut()
        .expect("a spec")
        .remove("nodeName");
    server.create(pending)?;
    server.create(pod("default", "forced-1"))?;
    let api = pods_api(&server);
    let answer = api
        .delete("pending-1", &DeleteParams::default())
        .await?
        .left()
        .expect("a Pod's delete answers the object");
    assert!(answer.metadata.deletion_timestamp.is_none(), "{answer:?}");
    assert_eq!(
        status(api.get("pending-1").await.expect_err("gone")).code,
        404
    );
    let forced = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    api.delete("forced-1", &forced).await?;
    assert_eq!(
        status(api.get("forced-1").await.expect_err("gone")).code,
        404
    );
    Ok(())
}

#[tokio::test]
async fn a_shorter_grace_period_ends_a_pending_one_and_finalizers_outlast_it() -> anyhow::Result<()>
{
    let server = TestApiServer::start().await?;
    let mut held = pod("default", "held-1");
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    server.create(held)?;
    server.create(pod("default", "slow-1"))?;
    let api = pods_api(&server);
    // No stop time set: the pods keep their 30 s.
    api.delete("slow-1", &DeleteParams::default()).await?;
    assert!(
        api.get("slow-1")
            .await?
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    api.delete("slow-1", &now).await?;
    assert_eq!(status(api.get("slow-1").await.expect_err("gone")).code, 404);

    api.delete("held-1", &DeleteParams::default()).await?;
    api.delete("held-1", &now).await?;
    let kept = api.get("held-1").await?;
    assert_eq!(kept.metadata.deletion_grace_period_seconds, Some(0));
    assert_eq!(finalizers(&kept), ["example.com/hold"]);
    let release = json!({"metadata": {"finalizers": null}});
    api.patch("held-1", &PatchParams::default(), &Patch::Merge(&release))
        .await?;
    assert_eq!(status(api.get("held-1").await.expect_err("gone")).code, 404);
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Deletes, continue tokens, generation and scope as a real server answers them (item 11)
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn foreground_and_orphan_deletes_answer_with_the_marked_object() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let cms = config_maps(&server, "default");
    for (name, policy, finalizer) in [
        ("fg", DeleteParams::foreground(), "foregroundDeletion"),
        ("or", DeleteParams::orphan(), "orphan"),
    ] {
        server.create(config_map("default", name, &[("k", "v")]))?;
        let answer = cms.delete(name, &policy).await?;
        let obj = answer.left().expect("the object, not a Status");
        assert_eq!(
            obj.types.as_ref().map(|t| t.kind.as_str()),
            Some("ConfigMap")
        );
        assert_eq!(finalizers(&obj), [finalizer]);
        assert!(obj.metadata.deletion_timestamp.is_some(), "{obj:?}");
        // Nothing depends on it: the garbage collector lets it go.
        assert_eq!(status(cms.get(name).await.expect_err("gone")).code, 404);
    }
    // A background delete of a kind without ReturnDeletedObject still answers a Status.
    server.create(config_map("default", "bg", &[("k", "v")]))?;
    assert!(
        cms.delete("bg", &DeleteParams::background())
            .await?
            .is_right()
    );
    Ok(())
}

#[tokio::test]
async fn a_compacted_continue_token_gets_410_with_a_token_for_the_rest() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    for i in 0..5 {
        server.create(config_map("default", &format!("cm-{i}"), &[("k", "v")]))?;
    }
    let path = "/api/v1/namespaces/default/configmaps";
    let (code, first) = raw(&server, "GET", &format!("{path}?limit=2"), None, b"").await;
    assert_eq!(code, 200);
    let token = first["metadata"]["continue"].as_str().expect("a token");
    // A change after the first page, then compaction past it: the page's version is gone.
    server.create(config_map("default", "cm-9", &[("k", "v")]))?;
    server.compact();
    let (code, expired) = raw(
        &server,
        "GET",
        &format!("{path}?limit=2&continue={token}"),
        None,
        b"",
    )
    .await;
    assert_eq!((code, expired["reason"].as_str()), (410, Some("Expired")));
    assert!(
        expired["message"]
            .as_str()
            .unwrap_or_default()
            .contains("use the continue token in this response"),
        "{expired}"
    );
    let rest = expired["metadata"]["continue"]
        .as_str()
        .expect("the promised token");
    let (code, page) = raw(
        &server,
        "GET",
        &format!("{path}?limit=10&continue={rest}"),
        None,
        b"",
    )
    .await;
    assert_eq!(code, 200, "{page}");
    let names: Vec<&str> = page["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    // Inconsistent, as the message warns: the rest at the latest version, cm-9 included.
    assert_eq!(names, ["cm-2", "cm-3", "cm-4", "cm-9"]);
    assert_eq!(
        page["metadata"]["resourceVersion"].as_str(),
        Some(server.resource_version().to_string().as_str())
    );
    Ok(())
}

#[tokio::test]
async fn only_kinds_whose_strategy_tracks_it_get_a_generation() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let cms = config_maps(&server, "default");
    let cm = cms
        .create(
            &PostParams::default(),
            &typed(config_map("default", "plain", &[("k", "v")])),
        )
        .await?;
    assert_eq!(cm.metadata.generation, None, "{cm:?}");
    let patch = json!({"data": {"k": "w"}});
    let cm = cms
        .patch("plain", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    assert_eq!(cm.metadata.generation, None, "{cm:?}");
    let created = server.create(pod("default", "p-1"))?;
    assert_eq!(created["metadata"]["generation"], 1);
    let svc = server.create(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"ports": [{"port": 80}]}
    }))?;
    assert!(svc["metadata"].get("generation").is_none(), "{svc}");
    Ok(())
}

#[tokio::test]
async fn a_namespaced_path_for_a_cluster_scoped_kind_is_404() {
    let server = TestApiServer::start().await.expect("server");
    for path in [
        "/api/v1/namespaces/default/namespaces",
        "/api/v1/namespaces/default/namespaces/default",
        "/apis/rbac.authorization.k8s.io/v1/namespaces/default/clusterroles",
    ] {
        let (code, body) = raw(&server, "GET", path, None, b"").await;
        assert_eq!(
            (code, body["reason"].as_str()),
            (404, Some("NotFound")),
            "{path}: {body}"
        );
    }
    let (code, _) = raw(&server, "GET", "/api/v1/namespaces/default", None, b"").await;
    assert_eq!(code, 200);
}
