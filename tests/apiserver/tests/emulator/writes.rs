//! The test API server's write semantics are a real API server's: strategic merge patch of
//! built-in kinds, JSON patch, dry runs, server-side apply and managedFields.
//!
//! Every test drives the server through a real `kube::Client` or through kubectl
//! (`/usr/bin/kubectl`, skipped with a note when it is not installed).

use wisp_apiserver::test_support::patience;

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use wisp_apiserver::TestApiServer;

/// Upper bound for anything that should happen promptly; only hit when a test fails.
const PATIENCE: Duration = Duration::from_secs(10);

fn resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

fn deployments(server: &TestApiServer) -> Api<DynamicObject> {
    Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &resource("apps/v1", "Deployment"),
    )
}

fn deployment(name: &str, replicas: i64, containers: &[(&str, &str)]) -> Value {
    let containers: Vec<Value> = containers
        .iter()
        .map(|(n, image)| json!({"name": n, "image": image}))
        .collect();
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": containers}
            }
        }
    })
}

fn value(obj: &DynamicObject) -> Value {
    serde_json::to_value(obj).expect("objects serialize")
}

fn stored(server: &TestApiServer, name: &str) -> Value {
    server
        .get("apps/v1", "Deployment", Some("default"), name)
        .unwrap_or(Value::Null)
}

fn container_images(obj: &Value) -> Vec<(String, String)> {
    obj["spec"]["template"]["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    let s = |f: &str| c[f].as_str().unwrap_or_default().to_string();
                    (s("name"), s("image"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// (code, reason, message) of an API error.
fn api_error<T: std::fmt::Debug>(result: kube::Result<T>) -> (u16, String, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.reason, status.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// The managedFields entries of an object as (manager, operation).
fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|e| {
                    let s = |f: &str| e[f].as_str().unwrap_or_default().to_string();
                    (s("manager"), s("operation"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The FieldsV1 of `manager`'s entry with `operation`.
fn fields_of(obj: &Value, manager: &str, operation: &str) -> Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .and_then(|list| {
            list.iter()
                .find(|e| e["manager"] == manager && e["operation"] == operation)
        })
        .map(|e| e["fieldsV1"].clone())
        .unwrap_or(Value::Null)
}

async fn raw(
    server: &TestApiServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: Value,
) -> (u16, Value) {
    raw_as(server, None, method, path, content_type, body).await
}

/// A request with a body, sent by a client calling itself `user_agent`.
async fn raw_as(
    server: &TestApiServer,
    user_agent: Option<&str>,
    method: &str,
    path: &str,
    content_type: &str,
    body: Value,
) -> (u16, Value) {
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type);
    if let Some(agent) = user_agent {
        request = request.header("user-agent", agent);
    }
    let request = request
        .body(kube::client::Body::from(body.to_string().into_bytes()))
        .expect("a valid request");
    let response = server
        .client_no_retry()
        .send(request)
        .await
        .expect("the server answers");
    let code = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

// ------------------------------------------------------------------------------------------
// Strategic merge patch
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name_and_stores_no_directives() {
    let server = TestApiServer::start().await.expect("server");
    server
        .create(deployment(
            "web",
            2,
            &[("app", "app:1"), ("sidecar", "sc:1")],
        ))
        .expect("created");
    let patch = json!({"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
        "containers": [{"name": "sidecar", "image": "sc:2"}]
    }}}});
    let patched = deployments(&server)
        .patch("web", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("patched");
    let patched = value(&patched);
    assert_eq!(
        container_images(&patched),
        pairs(&[("app", "app:1"), ("sidecar", "sc:2")])
    );
    assert!(
        !patched.to_string().contains("$setElementOrder"),
        "directives are not stored: {patched}"
    );
    assert_eq!(patched, stored(&server, "web"));
}

#[tokio::test]
async fn strategic_merge_patch_follows_merge_keys_and_directives_of_built_in_types() {
    let server = TestApiServer::start().await.expect("server");
    let mut d = deployment("web", 1, &[("app", "app:1"), ("old", "old:1")]);
    d["metadata"]["finalizers"] = json!(["example.com/a", "example.com/b"]);
    d["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]);
    d["spec"]["template"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}]);
    d["spec"]["template"]["spec"]["tolerations"] = json!([{"key": "k1", "operator": "Exists"}]);
    server.create(d).expect("created");
    let patch = json!({
        "metadata": {
            "finalizers": ["example.com/c"],
            "$deleteFromPrimitiveList/finalizers": ["example.com/a"]
        },
        "spec": {"template": {"spec": {
            "tolerations": [{"key": "k2", "operator": "Exists"}],
            "containers": [
                {"name": "old", "$patch": "delete"},
                {"name": "app",
                 "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}],
                 "ports": [{"containerPort": 443}]}
            ]
        }}}
    });
    let patched = deployments(&server)
        .patch("web", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .expect("patched");
    let patched = value(&patched);
    assert_eq!(
        patched["metadata"]["finalizers"],
        json!(["example.com/b", "example.com/c"]),
        "finalizers merge as a set"
    );
    let pod_spec = &patched["spec"]["template"]["spec"];
    assert_eq!(
        pod_spec["tolerations"],
        json!([{"key": "k2", "operator": "Exists"}]),
        "tolerations have no merge key: replaced"
    );
    assert_eq!(
        container_images(&patched),
        pairs(&[("app", "app:1")]),
        "$patch: delete removed one container"
    );
    assert_eq!(
        pod_spec["containers"][0]["env"],
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "20"}, {"name": "C", "value": "3"}])
    );
    assert_eq!(
        pod_spec["containers"][0]["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443, "protocol": "TCP"}]),
        "merged by containerPort, then defaulted as every write is"
    );
}

#[tokio::test]
async fn strategic_merge_patch_of_a_custom_resource_is_unsupported_media_type() {
    let server = TestApiServer::start().await.expect("server");
    server
        .create(json!({"apiVersion": "example.com/v1", "kind": "Widget",
                       "metadata": {"name": "w", "namespace": "default"}, "spec": {"size": 1}}))
        .expect("created");
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &resource("example.com/v1", "Widget"),
    );
    let (code, reason, message) = api_error(
        widgets
            .patch(
                "w",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"size": 2}})),
            )
            .await,
    );
    assert_eq!((code, reason.as_str()), (415, "UnsupportedMediaType"));
    assert!(
        !message.contains("strategic-merge-patch") && message.contains("merge-patch+json"),
        "{message}"
    );
    let merged = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .expect("merge patches are fine");
    assert_eq!(value(&merged)["spec"]["size"], 2);
}

// ------------------------------------------------------------------------------------------
// JSON patch
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn json_patch_applies_rfc_6902_operations_with_pointer_escapes() {
    let server = TestApiServer::start().await.expect("server");
    server
        .create(deployment("web", 1, &[("app", "app:1")]))
        .expect("created");
    let ops = json!([
        {"op": "test", "path": "/spec/replicas", "value": 1},
        {"op": "add", "path": "/metadata/labels/app.kubernetes.io~1name", "value": "web"},
        {"op": "add", "path": "/spec/template/spec/containers/-", "value": {"name": "b", "image": "b:1"}},
        {"op": "replace", "path": "/spec/replicas", "value": 3},
        {"op": "copy", "from": "/spec/template/spec/containers/0/name", "path": "/metadata/labels/copied"},
        {"op": "move", "from": "/metadata/labels/copied", "path": "/metadata/labels/moved"},
        {"op": "remove", "path": "/metadata/labels/app"}
    ]);
    let patch: json_patch::Patch = serde_json::from_value(ops).expect("a JSON patch");
    let patched = deployments(&server)
        .patch("web", &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .expect("patched");
    let patched = value(&patched);
    assert_eq!(
        patched["metadata"]["labels"],
        json!({"app.kubernetes.io/name": "web", "moved": "app"})
    );
    assert_eq!(patched["spec"]["replicas"], 3);
    assert_eq!(
        container_images(&patched),
        pairs(&[("app", "app:1"), ("b", "b:1")])
    );
}

#[tokio::test]
async fn json_patch_with_a_failing_test_is_422_invalid_and_changes_nothing() {
    let server = TestApiServer::start().await.expect("server");
    server
        .create(deployment("web", 1, &[("app", "app:1")]))
        .expect("created");
    let rv = server.resource_version();
    let ops = json!([
        {"op": "replace", "path": "/spec/replicas", "value": 9},
        {"op": "test", "path": "/spec/replicas", "value": 1}
    ]);
    let patch: json_patch::Patch = serde_json::from_value(ops).expect("a JSON patch");
    let (code, reason, message) = api_error(
        deployments(&server)
            .patch("web", &PatchParams::default(), &Patch::<()>::Json(patch))
            .await,
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert_eq!(
        message,
        "the server rejected our request due to an error in our request"
    );
    assert_eq!(server.resource_version(), rv, "nothing was written");
    assert_eq!(stored(&server, "web")["spec"]["replicas"], 1);
    let (code, _) = raw(
        &server,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web",
        "application/json-patch+json",
        json!({"op": "add"}),
    )
    .await;
    assert_eq!(code, 400, "a patch that is not a list is a bad request");
}

// ------------------------------------------------------------------------------------------
// Dry runs
// ------------------------------------------------------------------------------------------

#[tokio::test]
async fn dry_run_writes_answer_as_usual_but_store_nothing_and_notify_no_watch() {
    let server = TestApiServer::start().await.expect("server");
    server
        .create(deployment("web", 1, &[("app", "app:1")]))
        .expect("created");
    let api = deployments(&server);
    let rv = server.resource_version();
    let mut watch = api
        .watch(&WatchParams::default(), &rv.to_string())
        .await
        .expect("watch")
        .boxed();
    let dry_post = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let dry_patch = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let new: DynamicObject =
        serde_json::from_value(deployment("new", 1, &[("app", "app:1")])).expect("object");
    let created = api.create(&dry_post, &new).await.expect("dry-run create");
    assert!(
        created.metadata.uid.is_some(),
        "a dry run create is defaulted"
    );
    assert_eq!(created.metadata.resource_version, None);

    let mut current: DynamicObject = api.get("web").await.expect("get");
    current.data["spec"]["replicas"] = json!(7);
    let replaced = api
        .replace("web", &dry_post, &current)
        .await
        .expect("dry-run replace");
    assert_eq!(value(&replaced)["spec"]["replicas"], 7);
    assert_eq!(value(&replaced)["metadata"]["generation"], 2);
    assert_eq!(
        replaced.metadata.resource_version,
        Some(rv.to_string()),
        "no resourceVersion is taken"
    );
    let patched = api
        .patch(
            "web",
            &dry_patch,
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .expect("dry-run patch");
    assert_eq!(value(&patched)["spec"]["replicas"], 5);
    let applied = api
        .patch(
            "web",
            &PatchParams {
                dry_run: true,
                ..PatchParams::apply("dry")
            },
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                                 "metadata": {"name": "web"}, "spec": {"paused": true}})),
        )
        .await
        .expect("dry-run apply");
    assert_eq!(value(&applied)["spec"]["paused"], true);
    api.delete(
        "web",
        &DeleteParams {
            dry_run: true,
            ..DeleteParams::default()
        },
    )
    .await
    .expect("dry-run delete");

    assert_eq!(
        server.resource_version(),
        rv,
        "no resourceVersion was taken"
    );
    assert!(
        stored(&server, "new").is_null(),
        "the dry-run create stored nothing"
    );
    assert_eq!(stored(&server, "web")["spec"]["replicas"], 1);
    assert!(stored(&server, "web")["spec"]["paused"].is_null());

    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .expect("a real patch");
    let first = tokio::time::timeout(patience(PATIENCE), watch.try_next())
        .await
        .expect("an event in time")
        .expect("a watch event")
        .expect("the stream is open");
    match first {
        WatchEvent::Modified(obj) => assert_eq!(value(&obj)["spec"]["replicas"], 2),
        other => panic!("the first event is the real patch, got {other:?}"),
    }
}

#[tokio::test]
async fn unknown_dry_run_and_field_validation_values_are_refused_as_invalid_options() {
    let server = TestApiServer::start().await.expect("server");
    let (code, status) = raw(
        &server,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments?dryRun=Some",
        "application/json",
        deployment("web", 1, &[("app", "app:1")]),
    )
    .await;
    assert_eq!((code, &status["reason"]), (422, &json!("Invalid")));
    assert_eq!(
        status["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"Some\"}: supported values: \"All\""
    );
    assert!(stored(&server, "web").is_null());
    let (code, status) = raw(
        &server,
        "POST",
        "/apis/apps/v1/namespaces/default/deployments?fieldValidation=Loose",
        "application/json",
        deployment("web", 1, &[("app", "app:1")]),
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert!(stored(&server, "web").is_null());
}

// ------------------------------------------------------------------------------------------
// Server-side apply and managedFields
// ------------------------------------------------------------------------------------------

fn apply_params(manager: &str, force: bool) -> PatchParams {
    let mut params = PatchParams::apply(manager);
    params.force = force;
    params
}

#[tokio::test]
async fn server_side_apply_creates_the_object_and_records_its_fields_in_fields_v1() {
    let server = TestApiServer::start().await.expect("server");
    let api = deployments(&server);
    let created = api
        .patch(
            "web",
            &apply_params("alpha", false),
            &Patch::Apply(deployment("web", 2, &[("app", "app:1")])),
        )
        .await
        .expect("created by apply");
    let created = value(&created);
    assert_eq!(managers(&created), vec![("alpha".into(), "Apply".into())]);
    let entry = &created["metadata"]["managedFields"][0];
    assert_eq!(entry["apiVersion"], "apps/v1");
    assert_eq!(entry["fieldsType"], "FieldsV1");
    assert!(entry["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    let fields = &entry["fieldsV1"];
    assert_eq!(fields["f:spec"]["f:replicas"], json!({}));
    assert_eq!(
        fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"],
        json!({".": {}, "f:image": {}, "f:name": {}})
    );
    assert_eq!(fields["f:metadata"]["f:labels"]["f:app"], json!({}));
    assert_eq!(
        fields["f:spec"]["f:selector"],
        json!({}),
        "a label selector is an atomic struct"
    );
    assert!(fields["f:metadata"].get("f:name").is_none());
    assert_eq!(created, stored(&server, "web"));
}

#[tokio::test]
async fn apply_by_a_second_manager_conflicts_with_409_unless_forced() {
    let server = TestApiServer::start().await.expect("server");
    let api = deployments(&server);
    api.patch(
        "web",
        &apply_params("alpha", false),
        &Patch::Apply(deployment("web", 2, &[("app", "app:1")])),
    )
    .await
    .expect("created by apply");
    let rv = server.resource_version();
    let beta = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": "web"}, "spec": {"replicas": 5}});
    let result = api
        .patch("web", &apply_params("beta", false), &Patch::Apply(&beta))
        .await;
    let status = match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected a conflict, got {other:?}"),
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"alpha\": .spec.replicas"
    );
    let causes = status.details.map(|d| d.causes).unwrap_or_default();
    assert_eq!(causes.len(), 1);
    assert_eq!(
        (
            causes[0].reason.as_str(),
            causes[0].field.as_str(),
            causes[0].message.as_str()
        ),
        (
            "FieldManagerConflict",
            ".spec.replicas",
            "conflict with \"alpha\""
        )
    );
    assert_eq!(server.resource_version(), rv, "a conflict writes nothing");

    let same = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": "web"}, "spec": {"replicas": 2}});
    api.patch("web", &apply_params("beta", false), &Patch::Apply(&same))
        .await
        .expect("applying the same value is no conflict: shared ownership");

    let forced = api
        .patch("web", &apply_params("beta", true), &Patch::Apply(&beta))
        .await
        .expect("forced");
    let forced = value(&forced);
    assert_eq!(forced["spec"]["replicas"], 5);
    assert!(
        fields_of(&forced, "alpha", "Apply")["f:spec"]
            .get("f:replicas")
            .is_none(),
        "force moved .spec.replicas away from alpha: {}",
        forced["metadata"]["managedFields"]
    );
    assert_eq!(
        fields_of(&forced, "beta", "Apply")["f:spec"]["f:replicas"],
        json!({})
    );
}

#[tokio::test]
async fn fields_a_manager_drops_from_its_applied_configuration_are_removed() {
    let server = TestApiServer::start().await.expect("server");
    let api = deployments(&server);
    let mut first = deployment("web", 2, &[("app", "app:1"), ("sidecar", "sc:1")]);
    first["metadata"]["annotations"] = json!({"team": "a", "owner": "alpha"});
    api.patch("web", &apply_params("alpha", false), &Patch::Apply(&first))
        .await
        .expect("applied");
    api.patch(
        "web",
        &PatchParams {
            field_manager: Some("labeler".into()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({"metadata": {"annotations": {"team": "b"}}})),
    )
    .await
    .expect("merge patch by another manager");
    let mut second = deployment("web", 2, &[("app", "app:1")]);
    second["metadata"]["annotations"] = json!({});
    let applied = api
        .patch("web", &apply_params("alpha", false), &Patch::Apply(&second))
        .await
        .expect("applied again");
    let applied = value(&applied);
    assert_eq!(
        container_images(&applied),
        pairs(&[("app", "app:1")]),
        "the dropped container is removed"
    );
    assert_eq!(
        applied["metadata"]["annotations"],
        json!({"team": "b"}),
        "owner (only alpha's) is removed; team, taken over by labeler, stays"
    );
}

#[tokio::test]
async fn updates_record_update_entries_and_apply_conflicts_with_them() {
    let server = TestApiServer::start().await.expect("server");
    let api = deployments(&server);
    let new: DynamicObject =
        serde_json::from_value(deployment("web", 1, &[("app", "app:1")])).expect("object");
    let created = api
        .create(
            &PostParams {
                field_manager: Some("creator".into()),
                ..PostParams::default()
            },
            &new,
        )
        .await
        .expect("created");
    assert_eq!(
        managers(&value(&created)),
        vec![("creator".into(), "Update".into())]
    );
    let scaled = api
        .patch(
            "web",
            &PatchParams {
                field_manager: Some("scaler".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .expect("scaled");
    let scaled = value(&scaled);
    assert_eq!(
        managers(&scaled),
        vec![
            ("creator".into(), "Update".into()),
            ("scaler".into(), "Update".into())
        ]
    );
    assert_eq!(
        fields_of(&scaled, "scaler", "Update"),
        json!({"f:spec": {"f:replicas": {}}})
    );
    assert!(
        fields_of(&scaled, "creator", "Update")["f:spec"]
            .get("f:replicas")
            .is_none()
    );
    let (code, _, message) = api_error(
        api.patch(
            "web",
            &apply_params("alpha", false),
            &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                                 "metadata": {"name": "web"}, "spec": {"replicas": 1}})),
        )
        .await,
    );
    assert_eq!(code, 409);
    assert_eq!(
        message,
        "Apply failed with 1 conflict: conflict with \"scaler\" using apps/v1: .spec.replicas"
    );
}

#[tokio::test]
async fn status_writes_are_owned_under_the_status_subresource() {
    let server = TestApiServer::start().await.expect("server");
    let api = deployments(&server);
    let mut config = deployment("web", 1, &[("app", "app:1")]);
    config["status"] = json!({"replicas": 99});
    let created = api
        .patch("web", &apply_params("alpha", false), &Patch::Apply(&config))
        .await
        .expect("created by apply");
    assert!(
        value(&created)["status"].is_null(),
        "the main resource ignores status"
    );
    let status = json!({"status": {"replicas": 1, "conditions": [
        {"type": "Available", "status": "False"}, {"type": "Progressing", "status": "True"}]}});
    api.patch_status(
        "web",
        &PatchParams {
            field_manager: Some("controller".into()),
            ..PatchParams::default()
        },
        &Patch::Merge(&status),
    )
    .await
    .expect("status patched");
    let patched = api
        .patch_status(
            "web",
            &PatchParams {
                field_manager: Some("controller".into()),
                ..PatchParams::default()
            },
            &Patch::Strategic(json!({"status": {"conditions": [
                {"type": "Available", "status": "True"}]}})),
        )
        .await
        .expect("status patched strategically");
    let patched = value(&patched);
    assert_eq!(
        patched["status"]["conditions"],
        json!([{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True"}]),
        "conditions merge by type"
    );
    let entry = patched["metadata"]["managedFields"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["manager"] == "controller"))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(entry["operation"], "Update");
    assert_eq!(entry["subresource"], "status");
    assert_eq!(
        entry["fieldsV1"]["f:status"]["f:conditions"]["k:{\"type\":\"Available\"}"],
        json!({".": {}, "f:status": {}, "f:type": {}})
    );
    assert!(
        fields_of(&patched, "alpha", "Apply")
            .get("f:status")
            .is_none()
    );
}

#[tokio::test]
async fn a_write_without_field_manager_is_owned_by_its_user_agent_name() {
    let server = TestApiServer::start().await.expect("server");
    let (code, created) = raw_as(
        &server,
        Some("kubectl/v1.36.0 (linux/amd64) kubernetes/0123456"),
        "POST",
        "/apis/apps/v1/namespaces/default/deployments",
        "application/json",
        deployment("web", 1, &[("app", "app:1")]),
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(
        managers(&created),
        vec![("kubectl".into(), "Update".into())]
    );
    let scaled = deployments(&server)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("patched by kube-rs, which sends no User-Agent");
    let scaled = value(&scaled);
    let entries = scaled["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let nameless: Vec<&Value> = entries
        .iter()
        .filter(|e| e.get("manager").is_none())
        .collect();
    assert_eq!(nameless.len(), 1, "{entries:?}");
    assert_eq!(
        nameless[0]["fieldsV1"],
        json!({"f:spec": {"f:replicas": {}}})
    );
}

#[tokio::test]
async fn apply_needs_a_field_manager_and_force_belongs_to_apply_only() {
    let server = TestApiServer::start().await.expect("server");
    let (code, status) = raw(
        &server,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web",
        "application/apply-patch+yaml",
        deployment("web", 1, &[("app", "app:1")]),
    )
    .await;
    assert_eq!((code, &status["reason"]), (422, &json!("Invalid")));
    assert_eq!(
        status["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );
    server
        .create(deployment("web", 1, &[("app", "app:1")]))
        .expect("created");
    let (code, _) = raw(
        &server,
        "PATCH",
        "/apis/apps/v1/namespaces/default/deployments/web?force=true",
        "application/merge-patch+json",
        json!({"spec": {"replicas": 2}}),
    )
    .await;
    assert_eq!(code, 422);
}

#[tokio::test]
async fn applying_to_an_object_without_managed_fields_conflicts_with_before_first_apply() {
    let server = TestApiServer::start().await.expect("server");
    server
        .create(deployment("web", 1, &[("app", "app:1")]))
        .expect("created without managedFields");
    let labeled = deployments(&server)
        .patch(
            "web",
            &PatchParams {
                field_manager: Some("labeler".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "web"}}})),
        )
        .await
        .expect("labeled");
    assert_eq!(
        managers(&value(&labeled)),
        vec![],
        "updates of an object without managedFields record none"
    );
    let (code, _, message) = api_error(
        deployments(&server)
            .patch(
                "web",
                &apply_params("alpha", false),
                &Patch::Apply(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                                     "metadata": {"name": "web"}, "spec": {"replicas": 3}})),
            )
            .await,
    );
    assert_eq!(code, 409);
    assert_eq!(
        message,
        "Apply failed with 1 conflict: conflict with \"before-first-apply\" using apps/v1: .spec.replicas"
    );
    let mut with_fields = deployment("web", 1, &[("app", "app:1")]);
    with_fields["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Apply"}]);
    let (code, reason, message) = api_error(
        deployments(&server)
            .patch(
                "web",
                &apply_params("alpha", true),
                &Patch::Apply(&with_fields),
            )
            .await,
    );
    assert_eq!(
        (code, reason.as_str(), message.as_str()),
        (400, "BadRequest", "metadata.managedFields must be nil")
    );
}

#[tokio::test]
async fn writes_that_change_nothing_take_no_resource_version() {
    let server = TestApiServer::start().await.expect("server");
    let api = deployments(&server);
    let config = deployment("web", 2, &[("app", "app:1")]);
    let first = api
        .patch("web", &apply_params("alpha", false), &Patch::Apply(&config))
        .await
        .expect("created by apply");
    let rv = server.resource_version();
    let again = api
        .patch("web", &apply_params("alpha", false), &Patch::Apply(&config))
        .await
        .expect("applied again");
    assert_eq!(
        value(&again),
        value(&first),
        "the same apply is a no-op, managedFields time included"
    );
    api.patch(
        "web",
        &PatchParams {
            field_manager: Some("alpha".into()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await
    .expect("a merge patch to the same value");
    let current = api.get("web").await.expect("get");
    api.replace("web", &PostParams::default(), &current)
        .await
        .expect("a replace with the same object");
    assert_eq!(server.resource_version(), rv, "nothing was written");
}

// ------------------------------------------------------------------------------------------
// kubectl
// ------------------------------------------------------------------------------------------

const KUBECTL: &str = "/usr/bin/kubectl";

/// kubectl pointed at the server by a kubeconfig in a temporary directory, with a discovery
/// cache seeded so it needs no discovery endpoints.
// TODO(discovery): once the server serves /api and /apis (tests/apiserver/src/server/discovery.rs),
// drop the seeded cache and let kubectl discover.
struct Kubectl {
    dir: tempfile::TempDir,
}

impl Kubectl {
    fn new(server: &TestApiServer) -> Option<Self> {
        if !Path::new(KUBECTL).exists() {
            eprintln!("kubectl is not installed at {KUBECTL}: skipping");
            return None;
        }
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = server.url();
        std::fs::write(dir.path().join("kubeconfig"), server.kubeconfig())
            .expect("kubeconfig written");
        let host = url.trim_start_matches("http://").replace(':', "_");
        let discovery = dir.path().join("cache").join("discovery").join(host);
        let write = |rel: &str, body: Value| {
            let path = discovery.join(rel);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("cache dir");
            std::fs::write(path, body.to_string()).expect("cache file");
        };
        let group = |name: &str, gv: &str, version: &str| {
            json!({"name": name, "versions": [{"groupVersion": gv, "version": version}],
                   "preferredVersion": {"groupVersion": gv, "version": version}})
        };
        write(
            "servergroups.json",
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                group("", "v1", "v1"), group("apps", "apps/v1", "v1")]}),
        );
        let verbs = json!([
            "create", "delete", "get", "list", "patch", "update", "watch"
        ]);
        let res = |name: &str, singular: &str, kind: &str| {
            json!({"name": name, "singularName": singular, "namespaced": true, "kind": kind,
                   "verbs": verbs})
        };
        write(
            "v1/serverresources.json",
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
                   "resources": [res("configmaps", "configmap", "ConfigMap"),
                                 res("pods", "pod", "Pod")]}),
        );
        write(
            "apps/v1/serverresources.json",
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "apps/v1",
                   "resources": [res("deployments", "deployment", "Deployment")]}),
        );
        Some(Self { dir })
    }

    fn file(&self, name: &str, body: &Value) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, body.to_string()).expect("manifest written");
        path
    }

    /// Runs kubectl; (success, stdout, stderr).
    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let home = self.dir.path().to_path_buf();
        let mut all: Vec<String> = vec![
            format!("--cache-dir={}", home.join("cache").display()),
            "--request-timeout=20s".into(),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(KUBECTL)
                .args(&all)
                .env("KUBECONFIG", home.join("kubeconfig"))
                .env("HOME", &home)
                .env_remove("KUBERNETES_SERVICE_HOST")
                .output()
        })
        .await
        .expect("kubectl ran")
        .expect("kubectl started");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    async fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed:\n{out}\n{err}");
        out
    }
}

#[tokio::test]
async fn kubectl_apply_twice_keeps_both_containers() {
    let server = TestApiServer::start().await.expect("server");
    let Some(kubectl) = Kubectl::new(&server) else {
        return;
    };
    let first = kubectl.file(
        "v1.json",
        &deployment("web", 1, &[("app", "app:1"), ("sidecar", "sc:1")]),
    );
    let first = first.to_string_lossy().into_owned();
    kubectl
        .ok(&["apply", "--validate=false", "-f", &first])
        .await;
    let second = kubectl.file(
        "v2.json",
        &deployment("web", 1, &[("app", "app:1"), ("sidecar", "sc:2")]),
    );
    let second = second.to_string_lossy().into_owned();
    kubectl
        .ok(&["apply", "--validate=false", "-f", &second])
        .await;
    let obj = stored(&server, "web");
    assert_eq!(
        container_images(&obj),
        pairs(&[("app", "app:1"), ("sidecar", "sc:2")]),
        "{obj}"
    );
    assert!(!obj.to_string().contains("$setElementOrder"), "{obj}");
    let patches: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .collect();
    assert_eq!(patches.len(), 1, "the second apply is one patch");
    assert_eq!(
        managers(&obj),
        vec![("kubectl-client-side-apply".into(), "Update".into())]
    );
}

#[tokio::test]
async fn kubectl_apply_without_a_container_deletes_only_that_container() {
    let server = TestApiServer::start().await.expect("server");
    let Some(kubectl) = Kubectl::new(&server) else {
        return;
    };
    let mut first = deployment("web", 1, &[("app", "app:1"), ("sidecar", "sc:1")]);
    first["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]);
    let first = kubectl.file("v1.json", &first);
    let first = first.to_string_lossy().into_owned();
    kubectl
        .ok(&["apply", "--validate=false", "-f", &first])
        .await;
    // Someone else adds an env var kubectl never applied: a three-way merge keeps it.
    let mut live = stored(&server, "web");
    live["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array_mut()
        .expect("env")
        .push(json!({"name": "EXTRA", "value": "x"}));
    server.update(live).expect("updated out of band");
    let mut second = deployment("web", 1, &[("app", "app:1")]);
    second["spec"]["template"]["spec"]["containers"][0]["env"] =
        json!([{"name": "B", "value": "2"}]);
    let second = kubectl.file("v2.json", &second);
    let second = second.to_string_lossy().into_owned();
    kubectl
        .ok(&["apply", "--validate=false", "-f", &second])
        .await;
    let obj = stored(&server, "web");
    assert_eq!(container_images(&obj), pairs(&[("app", "app:1")]), "{obj}");
    assert_eq!(
        obj["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "B", "value": "2"}, {"name": "EXTRA", "value": "x"}]),
        "A was deleted by the patch, EXTRA (never applied) kept"
    );
}

#[tokio::test]
async fn kubectl_server_side_apply_takes_over_a_client_side_applied_object() {
    let server = TestApiServer::start().await.expect("server");
    let Some(kubectl) = Kubectl::new(&server) else {
        return;
    };
    let first = kubectl.file("v1.json", &deployment("web", 1, &[("app", "app:1")]));
    let first = first.to_string_lossy().into_owned();
    kubectl
        .ok(&["apply", "--validate=false", "-f", &first])
        .await;
    let second = kubectl.file("v2.json", &deployment("web", 3, &[("app", "app:2")]));
    let second = second.to_string_lossy().into_owned();
    // Without the last-applied takeover this is a conflict with kubectl-client-side-apply on
    // .spec.replicas and the image.
    kubectl
        .ok(&["apply", "--server-side", "--validate=false", "-f", &second])
        .await;
    let obj = stored(&server, "web");
    assert_eq!(obj["spec"]["replicas"], 3);
    assert_eq!(container_images(&obj), pairs(&[("app", "app:2")]));
    let last: Value = serde_json::from_str(
        obj["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap_or("null"),
    )
    .expect("the annotation is JSON");
    assert_eq!(
        last["spec"]["replicas"], 3,
        "the annotation follows the apply"
    );
    assert_eq!(
        managers(&obj),
        vec![
            ("kubectl".into(), "Apply".into()),
            ("kubectl-last-applied".into(), "Apply".into())
        ],
        "kubectl migrated the client-side entry to its own"
    );
}

#[tokio::test]
async fn kubectl_server_side_apply_from_two_managers_conflicts_until_forced() {
    let server = TestApiServer::start().await.expect("server");
    let Some(kubectl) = Kubectl::new(&server) else {
        return;
    };
    let one = kubectl.file("one.json", &deployment("web", 2, &[("app", "app:1")]));
    let one = one.to_string_lossy().into_owned();
    kubectl
        .ok(&[
            "apply",
            "--server-side",
            "--validate=false",
            "--field-manager=team-a",
            "-f",
            &one,
        ])
        .await;
    let two = kubectl.file(
        "two.json",
        &json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 5}}),
    );
    let two = two.to_string_lossy().into_owned();
    let (ok, _, err) = kubectl
        .run(&[
            "apply",
            "--server-side",
            "--validate=false",
            "--field-manager=team-b",
            "-f",
            &two,
        ])
        .await;
    assert!(!ok, "a conflicting apply fails");
    assert!(
        err.contains("conflict with \"team-a\": .spec.replicas"),
        "{err}"
    );
    assert_eq!(stored(&server, "web")["spec"]["replicas"], 2);
    kubectl
        .ok(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--validate=false",
            "--field-manager=team-b",
            "-f",
            &two,
        ])
        .await;
    let obj = stored(&server, "web");
    assert_eq!(obj["spec"]["replicas"], 5);
    assert_eq!(
        managers(&obj),
        vec![
            ("team-a".into(), "Apply".into()),
            ("team-b".into(), "Apply".into())
        ]
    );
}

#[tokio::test]
async fn kubectl_patch_type_json_applies_operations() {
    let server = TestApiServer::start().await.expect("server");
    let Some(kubectl) = Kubectl::new(&server) else {
        return;
    };
    server
        .create(deployment("web", 1, &[("app", "app:1")]))
        .expect("created");
    let ops = json!([
        {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "app:2"},
        {"op": "add", "path": "/metadata/annotations", "value": {"a/b": "c"}}
    ])
    .to_string();
    kubectl
        .ok(&["patch", "deployment", "web", "--type=json", "-p", &ops])
        .await;
    let obj = stored(&server, "web");
    assert_eq!(container_images(&obj), pairs(&[("app", "app:2")]));
    assert_eq!(obj["metadata"]["annotations"], json!({"a/b": "c"}));
    let failing = json!([{"op": "test", "path": "/spec/replicas", "value": 9}]).to_string();
    let (ok, _, err) = kubectl
        .run(&["patch", "deployment", "web", "--type=json", "-p", &failing])
        .await;
    assert!(!ok, "a failing test fails the patch");
    assert!(
        err.contains("the server rejected our request due to an error in our request"),
        "{err}"
    );
}

#[tokio::test]
async fn kubectl_create_dry_run_server_stores_nothing() {
    let server = TestApiServer::start().await.expect("server");
    let Some(kubectl) = Kubectl::new(&server) else {
        return;
    };
    let rv = server.resource_version();
    let manifest = kubectl.file("d.json", &deployment("web", 1, &[("app", "app:1")]));
    let manifest = manifest.to_string_lossy().into_owned();
    let out = kubectl
        .ok(&[
            "create",
            "--dry-run=server",
            "--validate=false",
            "-o",
            "json",
            "-f",
            &manifest,
        ])
        .await;
    let answered: Value = serde_json::from_str(&out).expect("kubectl printed the object");
    assert_eq!(answered["metadata"]["name"], "web");
    assert!(answered["metadata"]["uid"].is_string());
    assert!(stored(&server, "web").is_null(), "nothing stored");
    assert_eq!(server.resource_version(), rv);
    let creates: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(creates.len(), 1);
    assert_eq!(
        creates[0].query.get("dryRun").map(String::as_str),
        Some("All")
    );
}

// ------------------------------------------------------------------------------------------
// Status subresource
// ------------------------------------------------------------------------------------------

fn crd(plural: &str, kind: &str, status: bool) -> Value {
    let mut version = json!({"name": "v1", "served": true, "storage": true});
    if status {
        version["subresources"] = json!({"status": {}});
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
                 "versions": [version]}
    })
}

#[tokio::test]
async fn the_main_resource_keeps_status_and_the_status_subresource_keeps_spec() {
    let server = TestApiServer::start().await.expect("server");
    let mut seeded = deployment("web", 1, &[("app", "app:1")]);
    seeded["status"] = json!({"replicas": 3});
    server.create(seeded).expect("seeded");
    let api = deployments(&server);

    // Writes to the main resource ignore status: replace, merge patch, apply.
    let mut sent = value(&api.get("web").await.expect("get"));
    sent["spec"]["replicas"] = json!(5);
    sent["status"] = json!({"replicas": 99});
    let replaced = value(
        &api.replace(
            "web",
            &PostParams::default(),
            &serde_json::from_value(sent).expect("typed"),
        )
        .await
        .expect("replaced"),
    );
    assert_eq!(
        (
            replaced["spec"]["replicas"].clone(),
            replaced["status"].clone()
        ),
        (json!(5), json!({"replicas": 3}))
    );
    let patched = value(
        &api.patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 98}})),
        )
        .await
        .expect("patched"),
    );
    assert_eq!(patched["status"], json!({"replicas": 3}));
    let mut config = deployment("web", 5, &[("app", "app:1")]);
    config["status"] = json!({"replicas": 97});
    let applied = value(
        &api.patch("web", &apply_params("ci", true), &Patch::Apply(config))
            .await
            .expect("applied"),
    );
    assert_eq!(applied["status"], json!({"replicas": 3}));

    // Writes to status ignore spec, and a Deployment's status strategy keeps its labels too;
    // other metadata follows the write.
    let mut sent = value(&api.get("web").await.expect("get"));
    sent["spec"]["replicas"] = json!(1);
    sent["status"] = json!({"replicas": 4});
    sent["metadata"]["labels"] = json!({"app": "other"});
    sent["metadata"]["annotations"] = json!({"note": "from status"});
    let body: DynamicObject = serde_json::from_value(sent).expect("typed");
    let written = value(
        &api.replace_status("web", &PostParams::default(), &body)
            .await
            .expect("status replaced"),
    );
    assert_eq!(written["spec"]["replicas"], 5);
    assert_eq!(written["status"], json!({"replicas": 4}));
    assert_eq!(written["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(
        written["metadata"]["annotations"],
        json!({"note": "from status"})
    );
    let written = value(
        &api.patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}, "status": {"replicas": 5}})),
        )
        .await
        .expect("status patched"),
    );
    assert_eq!(
        (
            written["spec"]["replicas"].clone(),
            written["status"]["replicas"].clone()
        ),
        (json!(5), json!(5))
    );

    // A Pod's status may carry new labels, but not new ownerReferences.
    let pods: Api<DynamicObject> =
        Api::namespaced_with(server.client_no_retry(), "default", &resource("v1", "Pod"));
    server
        .create(wisp_apiserver::pod("default", "p"))
        .expect("seeded");
    let mut sent = value(&pods.get("p").await.expect("get"));
    let owners = sent["metadata"]["ownerReferences"].clone();
    sent["metadata"]["labels"] = json!({"phase": "seen"});
    sent["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node",
        "name": "n", "uid": "u"}]);
    sent["status"] = json!({"phase": "Running"});
    let body: DynamicObject = serde_json::from_value(sent).expect("typed");
    let written = value(
        &pods
            .replace_status("p", &PostParams::default(), &body)
            .await
            .expect("status replaced"),
    );
    assert_eq!(written["metadata"]["labels"], json!({"phase": "seen"}));
    assert_eq!(written["metadata"]["ownerReferences"], owners);
    assert_eq!(written["status"]["phase"], "Running");

    // Kinds without a status subresource: 404 on it, and a write keeps status as sent.
    let (code, status) = raw(
        &server,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/none/status",
        "application/merge-patch+json",
        json!({}),
    )
    .await;
    assert_eq!((code, &status["reason"]), (404, &json!("NotFound")));
}

#[tokio::test]
async fn custom_resources_have_a_status_subresource_only_when_their_crd_says_so() {
    let server = TestApiServer::start().await.expect("server");
    server.create(crd("widgets", "Widget", true)).expect("crd");
    server.create(crd("gadgets", "Gadget", false)).expect("crd");
    let api = |kind: &str| -> Api<DynamicObject> {
        Api::namespaced_with(
            server.client_no_retry(),
            "default",
            &resource("example.com/v1", kind),
        )
    };
    let (widgets, gadgets) = (api("Widget"), api("Gadget"));
    for (kind, api) in [("Widget", &widgets), ("Gadget", &gadgets)] {
        let obj = json!({"apiVersion": "example.com/v1", "kind": kind,
            "metadata": {"name": "x", "namespace": "default", "labels": {"a": "1"}},
            "spec": {"size": 1}, "status": {"ready": false}});
        server.create(obj).expect("seeded");
        let mut sent = value(&api.get("x").await.expect("get"));
        sent["spec"]["size"] = json!(2);
        sent["status"] = json!({"ready": true});
        api.replace(
            "x",
            &PostParams::default(),
            &serde_json::from_value(sent).expect("typed"),
        )
        .await
        .expect("replaced");
    }
    // With the subresource, the main resource keeps status; without, status is as written.
    let widget = value(&widgets.get("x").await.expect("get"));
    assert_eq!(
        (widget["spec"]["size"].clone(), widget["status"].clone()),
        (json!(2), json!({"ready": false}))
    );
    let gadget = value(&gadgets.get("x").await.expect("get"));
    assert_eq!(
        (gadget["spec"]["size"].clone(), gadget["status"].clone()),
        (json!(2), json!({"ready": true}))
    );
    // An apply to a Gadget applies its status too.
    let config = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "x", "namespace": "default"}, "status": {"ready": "applied"}});
    let applied = value(
        &gadgets
            .patch("x", &apply_params("ci", true), &Patch::Apply(config))
            .await
            .expect("applied"),
    );
    assert_eq!(applied["status"]["ready"], "applied");

    // A custom resource's status write changes its status only, metadata included.
    let written = value(
        &widgets
            .patch_status(
                "x",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"labels": {"a": "2"}}, "spec": {"size": 9},
                    "status": {"ready": true}}),
                ),
            )
            .await
            .expect("status patched"),
    );
    assert_eq!(written["metadata"]["labels"], json!({"a": "1"}));
    assert_eq!(
        (written["spec"]["size"].clone(), written["status"].clone()),
        (json!(2), json!({"ready": true}))
    );
    let (code, _, _) = api_error(
        gadgets
            .patch_status(
                "x",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"ready": 1}})),
            )
            .await,
    );
    assert_eq!(code, 404);

    // Discovery says so too.
    let (code, doc) = raw(
        &server,
        "GET",
        "/apis/example.com/v1",
        "application/json",
        json!({}),
    )
    .await;
    assert_eq!(code, 200);
    let names: Vec<&str> = doc["resources"]
        .as_array()
        .map(|r| r.iter().filter_map(|r| r["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(names.contains(&"widgets/status"), "{names:?}");
    assert!(!names.contains(&"gadgets/status"), "{names:?}");
}

#[tokio::test]
async fn update_entries_own_the_maps_and_lists_they_create() {
    let server = TestApiServer::start().await.expect("server");
    let as_manager = |manager: &str| PostParams {
        field_manager: Some(manager.into()),
        ..PostParams::default()
    };
    // A create owns the maps it brings (`.`), but not the nodes the type's zero value has
    // (`spec`, the pod template), nor `metadata`; list items are nodes; atomic maps are leaves.
    // The fields the create's defaulting set are the creator's too (as `kubectl create
    // deployment` shows on a real server).
    let created = deployments(&server)
        .create(
            &as_manager("creator"),
            &serde_json::from_value(deployment("web", 1, &[("app", "app:1")])).expect("object"),
        )
        .await
        .expect("created");
    assert_eq!(
        fields_of(&value(&created), "creator", "Update"),
        json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:progressDeadlineSeconds": {},
                "f:replicas": {},
                "f:revisionHistoryLimit": {},
                "f:selector": {},
                "f:strategy": {
                    "f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}},
                    "f:type": {}
                },
                "f:template": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {
                        "f:containers": {"k:{\"name\":\"app\"}": {
                            ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                            "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                        "f:dnsPolicy": {},
                        "f:restartPolicy": {},
                        "f:schedulerName": {},
                        "f:securityContext": {},
                        "f:terminationGracePeriodSeconds": {}
                    }
                }
            }
        })
    );
    let cms: Api<DynamicObject> = Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &resource("v1", "ConfigMap"),
    );
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"}, "data": {"k": "v"}});
    let created = cms
        .create(
            &as_manager("creator"),
            &serde_json::from_value(cm).expect("object"),
        )
        .await
        .expect("created");
    assert_eq!(
        fields_of(&value(&created), "creator", "Update"),
        json!({"f:data": {".": {}, "f:k": {}}})
    );

    // A patch owns what it adds: a new map and a new set, but not a map that existed.
    let patched = cms
        .patch(
            "c",
            &PatchParams {
                field_manager: Some("tagger".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"metadata": {"annotations": {"note": "x"},
                "finalizers": ["example.com/keep"]}, "data": {"k2": "v2"}})),
        )
        .await
        .expect("patched");
    assert_eq!(
        fields_of(&value(&patched), "tagger", "Update"),
        json!({
            "f:data": {"f:k2": {}},
            "f:metadata": {
                "f:annotations": {".": {}, "f:note": {}},
                "f:finalizers": {".": {}, "v:\"example.com/keep\"": {}}
            }
        })
    );
    // The creator keeps owning the data map it created.
    assert_eq!(
        fields_of(&value(&patched), "creator", "Update"),
        json!({"f:data": {".": {}, "f:k": {}}})
    );
}

// ------------------------------------------------------------------------------------------
// Immutable fields on update, through every write path (issue 29, item 7)
// ------------------------------------------------------------------------------------------

const POD_UPDATE: &str = "Pod \"web\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n";
const ADD_OR_REMOVE: &str = "Pod \"web\" is invalid: spec.containers: Forbidden: pod updates may not add or remove containers";

fn running_pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "nodeName": "node-1",
            "containers": [{"name": "app", "image": "app:1"}, {"name": "side", "image": "side:1"}]
        }
    })
}

/// A PATCH of the pod `web`: (code, message).
async fn patch_pod(server: &TestApiServer, content_type: &str, body: Value) -> (u16, String) {
    let path = "/api/v1/namespaces/default/pods/web?fieldManager=test&force=true";
    let path = if content_type.starts_with("application/apply") {
        path
    } else {
        path.trim_end_matches("&force=true")
    };
    let (code, status) = raw(server, "PATCH", path, content_type, body).await;
    (
        code,
        status["message"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test]
async fn pod_updates_beyond_images_are_refused_through_every_write_path() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    server.create(running_pod())?;
    let refused = |(code, message): (u16, String), want: &str| {
        assert_eq!(code, 422, "{message}");
        assert!(message.starts_with(want), "{message}");
    };
    // Update (PUT) adding a container.
    let mut added = server
        .get("v1", "Pod", Some("default"), "web")
        .expect("stored");
    added["spec"]["containers"]
        .as_array_mut()
        .expect("containers")
        .push(json!({"name": "extra", "image": "x:1"}));
    let (code, status) = raw(
        &server,
        "PUT",
        "/api/v1/namespaces/default/pods/web",
        "application/json",
        added,
    )
    .await;
    refused(
        (code, status["message"].as_str().unwrap_or_default().into()),
        ADD_OR_REMOVE,
    );
    // Merge patch moving it to another node.
    let moved = json!({"spec": {"nodeName": "node-2"}});
    refused(
        patch_pod(&server, "application/merge-patch+json", moved).await,
        POD_UPDATE,
    );
    // Strategic merge patch deleting a container.
    let dropped = json!({"spec": {"containers": [{"name": "side", "$patch": "delete"}]}});
    refused(
        patch_pod(&server, "application/strategic-merge-patch+json", dropped).await,
        ADD_OR_REMOVE,
    );
    // JSON patch adding a port.
    let port = json!([{"op": "add", "path": "/spec/containers/0/ports", "value": [{"containerPort": 80}]}]);
    refused(
        patch_pod(&server, "application/json-patch+json", port).await,
        POD_UPDATE,
    );
    // Server-side apply of one container only (the other manager's container stays, so the
    // applied node name is what changes).
    let mut applied = running_pod();
    applied["spec"]["nodeName"] = json!("node-3");
    refused(
        patch_pod(&server, "application/apply-patch+yaml", applied).await,
        POD_UPDATE,
    );
    // Images may change; nothing else was stored.
    let image = json!({"spec": {"containers": [{"name": "app", "image": "app:2"}]}});
    let (code, message) = patch_pod(&server, "application/strategic-merge-patch+json", image).await;
    assert_eq!(code, 200, "{message}");
    let stored = server
        .get("v1", "Pod", Some("default"), "web")
        .expect("stored");
    assert_eq!(stored["spec"]["nodeName"], "node-1");
    assert_eq!(stored["spec"]["containers"][0]["image"], "app:2");
    assert_eq!(
        stored["spec"]["containers"].as_array().map(Vec::len),
        Some(2)
    );
    Ok(())
}

#[tokio::test]
async fn services_jobs_stateful_sets_and_claims_keep_their_immutable_fields() -> anyhow::Result<()>
{
    let server = TestApiServer::start().await?;
    let template = json!({
        "metadata": {"labels": {"app": "x"}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "c:1"}]}
    });
    server.create(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "svc", "namespace": "default"},
        "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}
    }))?;
    server.create(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "job", "namespace": "default"},
        "spec": {"template": template}
    }))?;
    server.create(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "sts", "namespace": "default"},
        "spec": {"replicas": 1, "serviceName": "svc", "selector": {"matchLabels": {"app": "x"}},
                 "template": template}
    }))?;
    server.create(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "fast",
                 "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Bound"}
    }))?;
    let cases = [
        (
            "/api/v1/namespaces/default/services/svc",
            json!({"spec": {"clusterIP": "10.96.0.11"}}),
            "Service \"svc\" is invalid: spec.clusterIPs[0]: Invalid value: []string{\"10.96.0.11\"}: may not change once set",
        ),
        (
            "/apis/batch/v1/namespaces/default/jobs/job",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "c:2"}]}}}}),
            "Job.batch \"job\" is invalid: spec.template: Invalid value: ",
        ),
        (
            "/apis/apps/v1/namespaces/default/statefulsets/sts",
            json!({"spec": {"serviceName": "other"}}),
            "StatefulSet.apps \"sts\" is invalid: spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        ),
        (
            "/api/v1/namespaces/default/persistentvolumeclaims/data",
            json!({"spec": {"storageClassName": "slow"}}),
            "PersistentVolumeClaim \"data\" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims\n",
        ),
    ];
    for (path, patch, want) in cases {
        let (code, status) = raw(
            &server,
            "PATCH",
            path,
            "application/merge-patch+json",
            patch,
        )
        .await;
        let message = status["message"].as_str().unwrap_or_default();
        assert_eq!(code, 422, "{path}: {message}");
        assert!(message.starts_with(want), "{path}: {message}");
    }
    // What may change does: replicas, a bigger claim, a Service's ports.
    for (path, patch) in [
        (
            "/apis/apps/v1/namespaces/default/statefulsets/sts",
            json!({"spec": {"replicas": 3}}),
        ),
        (
            "/api/v1/namespaces/default/persistentvolumeclaims/data",
            json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
        ),
        (
            "/api/v1/namespaces/default/services/svc",
            json!({"spec": {"ports": [{"port": 81}]}}),
        ),
    ] {
        let (code, status) = raw(
            &server,
            "PATCH",
            path,
            "application/merge-patch+json",
            patch,
        )
        .await;
        assert_eq!(code, 200, "{path}: {status}");
    }
    Ok(())
}

/// A create is defaulted as a real API server defaults it (pkg/apis/core/v1/defaults.go, the
/// pod strategy's PrepareForCreate): `kubectl run` makes a Pod that `status.phase=Pending`
/// selects, with the PodSpec's and the container's defaults.
#[tokio::test]
async fn kubectl_run_makes_a_pending_pod_with_the_api_servers_defaults() {
    let server = TestApiServer::start().await.expect("server");
    let Some(kubectl) = Kubectl::new(&server) else {
        return;
    };
    kubectl.ok(&["run", "web", "--image=nginx"]).await;
    let pending = kubectl
        .ok(&[
            "get",
            "pods",
            "--field-selector=status.phase=Pending",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(pending.trim(), "pod/web");
    let fields = kubectl
        .ok(&[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.spec.dnsPolicy},{.spec.restartPolicy},{.spec.schedulerName},{.spec.terminationGracePeriodSeconds},{.spec.enableServiceLinks},{.spec.containers[0].imagePullPolicy},{.spec.containers[0].terminationMessagePath},{.status.qosClass}",
        ])
        .await;
    assert_eq!(
        fields,
        "ClusterFirst,Always,default-scheduler,30,true,Always,/dev/termination-log,BestEffort"
    );
}

/// A real API server defaults the object of every write, not only of a create: a PUT of the
/// manifest as written (no `dnsPolicy`, `imagePullPolicy`, ... which the create defaulted)
/// changing only an image is an image change, not a change of every defaulted field, and the
/// stored pod keeps its defaults.
#[tokio::test]
async fn an_update_is_defaulted_as_a_create_is() -> anyhow::Result<()> {
    let server = TestApiServer::start().await?;
    let (code, created) = raw(
        &server,
        "POST",
        "/api/v1/namespaces/default/pods",
        "application/json",
        running_pod(),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["spec"]["dnsPolicy"], "ClusterFirst");
    let mut sent = running_pod();
    sent["spec"]["containers"][0]["image"] = json!("app:2");
    let (code, updated) = raw(
        &server,
        "PUT",
        "/api/v1/namespaces/default/pods/web",
        "application/json",
        sent,
    )
    .await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["spec"]["containers"][0]["image"], "app:2");
    assert_eq!(updated["spec"]["dnsPolicy"], "ClusterFirst");
    assert_eq!(
        updated["spec"]["containers"][1]["imagePullPolicy"],
        "IfNotPresent"
    );
    Ok(())
}
