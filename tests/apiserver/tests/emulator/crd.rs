//! Custom resources as a real API server admits them: defaulted, pruned and validated by the
//! `openAPIV3Schema` of their CRD version on create, update, patch, apply and status writes
//! (422 with the server's words, unknown fields dropped, refused under
//! `fieldValidation=Strict`, named in `Warning` headers under `Warn`), and CRDs stored with
//! `NamesAccepted` and `Established` conditions.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use wisp_apiserver::TestApiServer;

fn widgets(server: &TestApiServer) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"));
    Api::namespaced_with(server.client_no_retry(), "default", &ar)
}

/// A Widget CRD with a schema: `spec.replicas` an integer defaulting to 1, `spec.size` one of
/// three values and required, `status.ready` a boolean; the status subresource.
fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "required": ["size"], "properties": {
                        "replicas": {"type": "integer", "default": 1},
                        "size": {"type": "string", "enum": ["low", "medium", "high"]},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                    "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}}}]}
    })
}

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

fn typed(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("an object")
}

fn api_error<T: std::fmt::Debug>(result: kube::Result<T>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A raw request: status, the `Warning` headers, the body.
async fn send(
    server: &TestApiServer,
    method: &str,
    path: &str,
    content_type: &str,
    body: &Value,
) -> (u16, Vec<String>, Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(kube::client::Body::from(body.to_string().into_bytes()))
        .expect("a valid request");
    let response = server
        .client_no_retry()
        .send(request)
        .await
        .expect("the server answers");
    let code = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap_or("").to_string())
        .collect();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    (
        code,
        warnings,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn custom_resources_breaking_their_schema_are_422_in_the_servers_words() {
    let server = TestApiServer::start().await.expect("server");
    server.create(widget_crd()).expect("crd");
    let api = widgets(&server);
    let pp = PostParams::default();
    let (code, message) = api_error(
        api.create(
            &pp,
            &typed(widget("a", json!({"size": "low", "replicas": "one"}))),
        )
        .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (
            422,
            "Widget.example.com \"a\" is invalid: spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        )
    );
    let (code, message) = api_error(
        api.create(&pp, &typed(widget("a", json!({"size": "urgent"}))))
            .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (
            422,
            "Widget.example.com \"a\" is invalid: spec.size: Unsupported value: \"urgent\": supported values: \"low\", \"medium\", \"high\""
        )
    );
    let (_, message) = api_error(api.create(&pp, &typed(widget("a", json!({})))).await);
    assert!(message.ends_with("spec.size: Required value"), "{message}");
    assert!(
        server
            .get("example.com/v1", "Widget", Some("default"), "a")
            .is_none()
    );
}

#[tokio::test]
async fn unknown_fields_are_pruned_defaults_applied_and_named_as_the_request_asks() {
    let server = TestApiServer::start().await.expect("server");
    server.create(widget_crd()).expect("crd");
    let path = "/apis/example.com/v1/namespaces/default/widgets";
    let body = widget(
        "a",
        json!({"size": "low", "colour": "red", "free": {"any": 1}}),
    );
    // Strict: refused, nothing stored.
    let (code, _, status) = send(
        &server,
        "POST",
        &format!("{path}?fieldValidation=Strict"),
        "application/json",
        &body,
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "Widget in version \"v1\" cannot be handled as a Widget: strict decoding error: unknown field \"spec.colour\""
    );
    // The default (Warn): stored pruned and defaulted, the field named in a Warning header.
    let (code, warnings, created) = send(&server, "POST", path, "application/json", &body).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(warnings, ["299 - \"unknown field \\\"spec.colour\\\"\""]);
    assert_eq!(
        created["spec"],
        json!({"size": "low", "replicas": 1, "free": {"any": 1}})
    );
    let stored = server
        .get("example.com/v1", "Widget", Some("default"), "a")
        .expect("stored");
    assert_eq!(stored["spec"], created["spec"]);
    // Ignore: pruned silently.
    let (code, warnings, _) = send(
        &server,
        "POST",
        &format!("{path}?fieldValidation=Ignore"),
        "application/json",
        &widget("b", json!({"size": "low", "colour": "red"})),
    )
    .await;
    assert_eq!((code, warnings.len()), (201, 0));
}

#[tokio::test]
async fn updates_patches_applies_and_status_writes_are_checked_by_the_schema_too() {
    let server = TestApiServer::start().await.expect("server");
    server.create(widget_crd()).expect("crd");
    let api = widgets(&server);
    api.create(
        &PostParams::default(),
        &typed(widget("a", json!({"size": "low"}))),
    )
    .await
    .expect("created");
    let (code, message) = api_error(
        api.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": "two"}})),
        )
        .await,
    );
    assert_eq!(code, 422, "{message}");
    assert!(message.contains("spec.replicas in body must be of type integer"));
    let apply = PatchParams::apply("ci").force();
    let (code, message) = api_error(
        api.patch(
            "a",
            &apply,
            &Patch::Apply(widget("a", json!({"size": "huge"}))),
        )
        .await,
    );
    assert_eq!(code, 422, "{message}");
    assert!(message.contains("Unsupported value: \"huge\""), "{message}");
    let mut current = serde_json::to_value(api.get("a").await.expect("get")).expect("json");
    current["spec"]["size"] = json!(7);
    let (code, message) = api_error(
        api.replace("a", &PostParams::default(), &typed(current))
            .await,
    );
    assert_eq!(code, 422, "{message}");
    let (code, message) = api_error(
        api.patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": "yes"}})),
        )
        .await,
    );
    assert_eq!(
        (code, message.as_str()),
        (
            422,
            "Widget.example.com \"a\" is invalid: status.ready: Invalid value: \"string\": status.ready in body must be of type boolean: \"string\""
        )
    );
    // A valid status write is stored, its unknown fields pruned.
    let written = api
        .patch_status(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true, "phase": "x"}})),
        )
        .await
        .expect("status written");
    assert_eq!(
        serde_json::to_value(written).expect("json")["status"],
        json!({"ready": true})
    );
}

#[tokio::test]
async fn a_crd_whose_schema_does_not_compile_is_refused_naming_where() {
    let server = TestApiServer::start().await.expect("server");
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
    ));
    let crds: Api<DynamicObject> = Api::all_with(server.client_no_retry(), &ar);
    let mut crd = widget_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"]
        ["pattern"] = json!("([");
    let (code, message) = api_error(crds.create(&PostParams::default(), &typed(crd)).await);
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains(
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].pattern"
        ),
        "{message}"
    );
}

#[tokio::test]
async fn crds_are_established_with_their_names_accepted_and_storage_version_recorded() {
    let server = TestApiServer::start().await.expect("server");
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
    ));
    let crds: Api<DynamicObject> = Api::all_with(server.client_no_retry(), &ar);
    crds.create(&PostParams::default(), &typed(widget_crd()))
        .await
        .expect("created");
    let crd =
        serde_json::to_value(crds.get("widgets.example.com").await.expect("get")).expect("json");
    let status = &crd["status"];
    let condition = |ty: &str| {
        status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == ty))
            .map(|c| (c["status"].clone(), c["reason"].clone()))
    };
    assert_eq!(
        condition("NamesAccepted"),
        Some((json!("True"), json!("NoConflicts")))
    );
    assert_eq!(
        condition("Established"),
        Some((json!("True"), json!("InitialNamesAccepted")))
    );
    assert_eq!(
        status["acceptedNames"],
        json!({"plural": "widgets", "kind": "Widget", "singular": "widget", "listKind": "WidgetList"})
    );
    assert_eq!(status["storedVersions"], json!(["v1"]));
}
