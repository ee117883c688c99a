//! Admission webhooks as kube-apiserver calls them, against small HTTPS webhooks of the test
//! (`test_support::webhook`, certificates by openssl): a denial and a warning as kubectl prints
//! them, a mutating webhook's patch, the selectors, the failure policy on a webhook down, too
//! slow or not trusted, dry runs and side effects, reinvocation, and the Python client's view
//! of a denial.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use wisp_apiserver::test_support::webhook::{
    Answer, Certs, WebhookServer, allow, deny, patch, warn,
};
use wisp_apiserver::test_support::{Kubectl, kubectl, python, run_python};
use wisp_apiserver::{TestApiServer, pod};

/// A Validating (or Mutating) WebhookConfiguration named `name` with one webhook `hook` on
/// pod CREATE and UPDATE, called at `url`; `extra` is merged into the webhook.
fn configuration(kind: &str, name: &str, hook: &str, client: Value, extra: Value) -> Value {
    let mut webhook = json!({
        "name": hook,
        "clientConfig": client,
        "rules": [{
            "operations": ["CREATE", "UPDATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
        }],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    });
    if let (Some(w), Some(extra)) = (webhook.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            w.insert(k.clone(), v.clone());
        }
    }
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [webhook],
    })
}

fn url_client(hook: &WebhookServer, certs: &Certs, path: &str) -> Value {
    json!({"url": hook.url(path), "caBundle": certs.ca_bundle()})
}

fn pods(server: &TestApiServer, namespace: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod"));
    Api::namespaced_with(server.client_no_retry(), namespace, &ar)
}

/// A pod to create through the API: the fixture without status and owner.
fn new_pod(namespace: &str, name: &str) -> DynamicObject {
    let mut p = pod(namespace, name);
    if let Some(m) = p.as_object_mut() {
        m.remove("status");
    }
    if let Some(meta) = p["metadata"].as_object_mut() {
        meta.remove("ownerReferences");
    }
    serde_json::from_value(p).expect("a pod")
}

/// Creates a configuration through the API, as a user would.
async fn install(server: &TestApiServer, config: Value) -> anyhow::Result<()> {
    let kind = config["kind"].as_str().unwrap_or("").to_string();
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "admissionregistration.k8s.io",
        "v1",
        &kind,
    ));
    let api: Api<DynamicObject> = Api::all_with(server.client_no_retry(), &ar);
    api.create(&PostParams::default(), &serde_json::from_value(config)?)
        .await?;
    Ok(())
}

/// The Status of a refused request made with kube.
fn refusal<T: std::fmt::Debug>(result: kube::Result<T>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

async fn kubectl_create(
    kubectl: &Kubectl,
    manifest: &Value,
    extra: &[&str],
) -> (bool, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("pod.json");
    std::fs::write(&path, manifest.to_string()).expect("write manifest");
    let path = path.to_string_lossy().into_owned();
    let mut args = vec!["create", "-f", path.as_str()];
    args.extend(extra);
    let (ok, out, err) = kubectl.run(&args).await;
    (ok, out, err.replace(path.as_str(), "POD"))
}

#[tokio::test]
async fn kubectl_prints_a_denial_and_a_warning_as_a_real_server_sends_them() -> anyhow::Result<()> {
    let (Some(program), Some(certs)) = (kubectl(), Certs::generate(&["127.0.0.1"])) else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let hook = WebhookServer::start(&certs, |request| {
        let labels = &request["object"]["metadata"]["labels"];
        if labels.get("team").is_none() {
            deny(403, "pods need a team label")
        } else {
            warn(&["image nginx uses no digest"])
        }
    })
    .await?;
    install(
        &server,
        configuration(
            "ValidatingWebhookConfiguration",
            "team-policy",
            "team.wisp.test",
            url_client(&hook, &certs, "/validate"),
            json!({}),
        ),
    )
    .await?;
    let kubectl = Kubectl::new(program, &server);
    let mut manifest = serde_json::to_value(new_pod("default", "web-1"))?;
    let (ok, _, err) = kubectl_create(&kubectl, &manifest, &[]).await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        "Error from server (Forbidden): error when creating \"POD\": admission webhook \"team.wisp.test\" denied the request: pods need a team label"
    );
    assert!(server.get("v1", "Pod", Some("default"), "web-1").is_none());

    manifest["metadata"]["labels"]["team"] = json!("shop");
    let (ok, out, err) = kubectl_create(&kubectl, &manifest, &[]).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "pod/web-1 created");
    assert_eq!(err.trim(), "Warning: image nginx uses no digest");

    // What the webhook was sent.
    let reviews = hook.reviews();
    assert_eq!(reviews.len(), 2);
    let review = &reviews[1];
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    let request = &review["request"];
    assert_eq!(
        request["kind"],
        json!({"group": "", "version": "v1", "kind": "Pod"})
    );
    assert_eq!(
        request["resource"],
        json!({"group": "", "version": "v1", "resource": "pods"})
    );
    assert_eq!(request["requestKind"], request["kind"]);
    assert_eq!(request["operation"], "CREATE");
    assert_eq!(
        (request["namespace"].as_str(), request["name"].as_str()),
        (Some("default"), Some("web-1"))
    );
    assert_eq!(request["userInfo"]["username"], "system:admin");
    assert_eq!(request["dryRun"], false);
    assert_eq!(request["options"]["kind"], "CreateOptions");
    assert_eq!(request["object"]["metadata"]["labels"]["team"], "shop");
    assert!(request["oldObject"].is_null());
    assert!(request["uid"].as_str().is_some_and(|u| !u.is_empty()));
    Ok(())
}

#[tokio::test]
async fn a_mutating_webhooks_patch_is_stored_and_validating_webhooks_see_it() -> anyhow::Result<()>
{
    let (Some(program), Some(certs)) = (kubectl(), Certs::generate(&["guard.webhooks.svc"])) else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let mutator = WebhookServer::start(&certs, |_| {
        patch(json!([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}]))
    })
    .await?;
    let validator = WebhookServer::start(&certs, |_| allow()).await?;
    // Reached as a Service, as in a cluster.
    server.resolve_service("webhooks", "guard", 443, mutator.addr());
    server.resolve_service("webhooks", "check", 8443, validator.addr());
    let service = |name: &str, port: u16| {
        json!({
            "service": {"namespace": "webhooks", "name": name, "path": "/mutate", "port": port},
            "caBundle": certs.ca_bundle(),
        })
    };
    install(
        &server,
        configuration(
            "MutatingWebhookConfiguration",
            "labeler",
            "label.wisp.test",
            service("guard", 443),
            json!({}),
        ),
    )
    .await?;
    // The validator's certificate is for guard.webhooks.svc, not check.webhooks.svc.
    install(
        &server,
        configuration(
            "ValidatingWebhookConfiguration",
            "checker",
            "check.wisp.test",
            service("check", 8443),
            json!({"failurePolicy": "Ignore"}),
        ),
    )
    .await?;
    let kubectl = Kubectl::new(program, &server);
    let manifest = serde_json::to_value(new_pod("default", "web-1"))?;
    let (ok, _, err) = kubectl_create(&kubectl, &manifest, &[]).await;
    assert!(ok, "{err}");
    let label = kubectl
        .ok(&[
            "get",
            "pod",
            "web-1",
            "-o",
            "jsonpath={.metadata.labels.mutated}",
        ])
        .await;
    assert_eq!(label, "yes");
    assert!(validator.reviews().is_empty(), "the wrong name was trusted");
    let sent = &mutator.reviews()[0]["request"];
    assert!(
        sent["object"]["metadata"]["labels"]
            .get("mutated")
            .is_none()
    );

    // An update is reviewed with its old object.
    let api = pods(&server, "default");
    let mut current = api.get("web-1").await?;
    current
        .metadata
        .labels
        .get_or_insert_default()
        .insert("tier".into(), "front".into());
    api.replace("web-1", &PostParams::default(), &current)
        .await?;
    let update = &mutator.reviews()[1]["request"];
    assert_eq!(update["operation"], "UPDATE");
    assert_eq!(update["oldObject"]["metadata"]["labels"]["tier"], "backend");
    assert_eq!(update["object"]["metadata"]["labels"]["tier"], "front");
    assert_eq!(update["options"]["kind"], "UpdateOptions");
    Ok(())
}

#[tokio::test]
async fn namespace_and_object_selectors_leave_out_what_they_do_not_select() -> anyhow::Result<()> {
    let Some(certs) = Certs::generate(&["127.0.0.1"]) else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let hook = WebhookServer::start(&certs, |_| deny(403, "guarded")).await?;
    install(
        &server,
        configuration(
            "ValidatingWebhookConfiguration",
            "guard",
            "guard.wisp.test",
            url_client(&hook, &certs, "/"),
            json!({
                "namespaceSelector": {"matchLabels": {"guarded": "true"}},
                "objectSelector": {"matchExpressions": [{"key": "exempt", "operator": "DoesNotExist"}]},
            }),
        ),
    )
    .await?;
    server.create(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "vault", "labels": {"guarded": "true"}},
    }))?;
    // Not selected: the namespace has no label.
    pods(&server, "default")
        .create(&PostParams::default(), &new_pod("default", "free-1"))
        .await?;
    // Selected.
    let status = refusal(
        pods(&server, "vault")
            .create(&PostParams::default(), &new_pod("vault", "web-1"))
            .await,
    );
    assert_eq!(status.code, 403);
    assert_eq!(
        status.message,
        "admission webhook \"guard.wisp.test\" denied the request: guarded"
    );
    // The object selector leaves out an exempt pod.
    let mut exempt = new_pod("vault", "exempt-1");
    exempt
        .metadata
        .labels
        .get_or_insert_default()
        .insert("exempt".into(), "yes".into());
    pods(&server, "vault")
        .create(&PostParams::default(), &exempt)
        .await?;
    assert_eq!(hook.reviews().len(), 1);
    // A DELETE is reviewed with the old object; the exempt pod's is left out.
    pods(&server, "vault")
        .delete("exempt-1", &DeleteParams::default())
        .await?;
    assert_eq!(hook.reviews().len(), 1);
    Ok(())
}

#[tokio::test]
async fn the_failure_policy_decides_when_the_webhook_is_down_slow_or_not_trusted()
-> anyhow::Result<()> {
    let (Some(certs), Some(other)) = (
        Certs::generate(&["127.0.0.1"]),
        Certs::generate(&["127.0.0.1"]),
    ) else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let free = std::net::TcpListener::bind("127.0.0.1:0")?;
    let down = format!("https://{}/validate", free.local_addr()?);
    drop(free);
    let slow = WebhookServer::start(&certs, |_| Answer::Hang).await?;
    let untrusted = WebhookServer::start(&other, |_| allow()).await?;
    let absent = WebhookServer::start(&certs, |_| {
        let review = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#;
        Answer::Raw(200, review.into())
    })
    .await?;
    let client = |url: &str| json!({"url": url, "caBundle": certs.ca_bundle()});
    let call = "failed to call webhook";
    let cases = [
        (
            "down",
            client(&down),
            format!(
                "{call}: Post \"{down}?timeout=10s\": dial tcp {}: connect: connection refused",
                down.trim_start_matches("https://")
                    .trim_end_matches("/validate")
            ),
        ),
        (
            "slow",
            client(&slow.url("/v")),
            format!(
                "{call}: Post \"{}?timeout=1s\": context deadline exceeded",
                slow.url("/v")
            ),
        ),
        (
            "untrusted",
            client(&untrusted.url("/v")),
            format!(
                "{call}: Post \"{}?timeout=10s\": tls: failed to verify certificate: x509: certificate signed by unknown authority",
                untrusted.url("/v")
            ),
        ),
        (
            "absent",
            client(&absent.url("/v")),
            "received invalid webhook response: webhook response was absent".into(),
        ),
        (
            "not-pem",
            json!({"url": absent.url("/v"), "caBundle": "bm90IGEgY2VydGlmaWNhdGU="}),
            "could not get REST client: unable to load root certificates: unable to parse bytes as PEM block".into(),
        ),
    ];
    for (i, (name, client, cause)) in cases.into_iter().enumerate() {
        let hook = format!("{name}.wisp.test");
        let timeout = if name == "slow" { json!(1) } else { json!(10) };
        let config = configuration(
            "ValidatingWebhookConfiguration",
            name,
            &hook,
            client,
            json!({"timeoutSeconds": timeout}),
        );
        install(&server, config).await?;
        let status = refusal(
            pods(&server, "default")
                .create(
                    &PostParams::default(),
                    &new_pod("default", &format!("fail-{i}")),
                )
                .await,
        );
        assert_eq!(
            (status.code, status.reason.as_str()),
            (500, "InternalError")
        );
        assert_eq!(
            status.message,
            format!("Internal error occurred: failed calling webhook \"{hook}\": {cause}")
        );
        // failurePolicy: Ignore lets the request through.
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
        ));
        let configs: Api<DynamicObject> = Api::all_with(server.client_no_retry(), &ar);
        let mut stored = configs.get(name).await?;
        stored.data["webhooks"][0]["failurePolicy"] = json!("Ignore");
        configs
            .replace(name, &PostParams::default(), &stored)
            .await?;
        pods(&server, "default")
            .create(
                &PostParams::default(),
                &new_pod("default", &format!("ignored-{i}")),
            )
            .await?;
        configs.delete(name, &DeleteParams::default()).await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_server_dry_run_reaches_the_webhook_stores_nothing_and_needs_no_side_effects()
-> anyhow::Result<()> {
    let (Some(program), Some(certs)) = (kubectl(), Certs::generate(&["127.0.0.1"])) else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let hook = WebhookServer::start(&certs, |_| allow()).await?;
    install(
        &server,
        configuration(
            "ValidatingWebhookConfiguration",
            "pure",
            "pure.wisp.test",
            url_client(&hook, &certs, "/"),
            json!({"sideEffects": "NoneOnDryRun"}),
        ),
    )
    .await?;
    let kubectl = Kubectl::new(program, &server);
    let manifest = serde_json::to_value(new_pod("default", "dry-1"))?;
    let (ok, out, err) = kubectl_create(&kubectl, &manifest, &["--dry-run=server"]).await;
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "pod/dry-1 created (server dry run)");
    assert_eq!(hook.reviews()[0]["request"]["dryRun"], true);
    assert_eq!(
        hook.reviews()[0]["request"]["options"]["dryRun"],
        json!(["All"])
    );
    assert!(server.get("v1", "Pod", Some("default"), "dry-1").is_none());

    // v1 refuses sideEffects Unknown through the API ...
    let unknown = configuration(
        "ValidatingWebhookConfiguration",
        "unknown",
        "unknown.wisp.test",
        url_client(&hook, &certs, "/"),
        json!({"sideEffects": "Unknown"}),
    );
    let status = refusal(
        install(&server, unknown.clone())
            .await
            .map_err(|e| e.downcast::<kube::Error>().expect("a kube error")),
    );
    assert_eq!(status.code, 422);
    // ... but one stored before (seeded) refuses every dry run, whatever its failure policy.
    server.create(unknown)?;
    let (ok, _, err) = kubectl_create(&kubectl, &manifest, &["--dry-run=server"]).await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        "Error from server (BadRequest): error when creating \"POD\": admission webhook \"unknown.wisp.test\" does not support dry run"
    );
    assert_eq!(
        hook.reviews().len(),
        2,
        "pure.wisp.test is called, unknown.wisp.test is not"
    );
    Ok(())
}

#[tokio::test]
async fn an_if_needed_webhook_is_called_again_after_a_later_change() -> anyhow::Result<()> {
    let Some(certs) = Certs::generate(&["127.0.0.1"]) else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let first = WebhookServer::start(&certs, move |request| {
        counted.fetch_add(1, Ordering::SeqCst);
        let saw = request["object"]["metadata"]["labels"].get("second").is_some();
        patch(json!([{"op": "add", "path": "/metadata/labels/first-saw-second", "value": saw.to_string()}]))
    })
    .await?;
    let second = WebhookServer::start(&certs, |_| {
        patch(json!([{"op": "add", "path": "/metadata/labels/second", "value": "yes"}]))
    })
    .await?;
    // Called in the order of their configurations' names.
    for (name, hook, policy) in [
        ("b-second", &second, "Never"),
        ("a-first", &first, "IfNeeded"),
    ] {
        install(
            &server,
            configuration(
                "MutatingWebhookConfiguration",
                name,
                &format!("{name}.wisp.test"),
                url_client(hook, &certs, "/"),
                json!({"reinvocationPolicy": policy}),
            ),
        )
        .await?;
    }
    let created = pods(&server, "default")
        .create(&PostParams::default(), &new_pod("default", "web-1"))
        .await?;
    let labels = created.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("second").map(String::as_str), Some("yes"));
    assert_eq!(
        labels.get("first-saw-second").map(String::as_str),
        Some("true")
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(second.reviews().len(), 1);
    Ok(())
}

const PYTHON_SCRIPT: &str = r#"
import json, sys
from kubernetes import client
from kubernetes.client.rest import ApiException

config = client.Configuration()
config.host = sys.argv[1]
api = client.CoreV1Api(client.ApiClient(config))
out = []
for name in ["forbidden-1", "plain-1"]:
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(containers=[client.V1Container(name="app", image="nginx")]),
    )
    try:
        api.create_namespaced_pod("default", pod)
        out.append(None)
    except ApiException as e:
        out.append([e.status, json.loads(e.body)])
print(json.dumps(out))
"#;

#[tokio::test]
async fn the_python_client_gets_the_denials_status() -> anyhow::Result<()> {
    let (Some(program), Some(certs)) = (python(), Certs::generate(&["127.0.0.1"])) else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let hook = WebhookServer::start(&certs, |request| {
        if request["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("forbidden"))
        {
            deny(403, "no forbidden pods")
        } else {
            // No code: a denial is at least 400.
            Answer::Response(json!({"allowed": false, "status": {"message": "not today"}}))
        }
    })
    .await?;
    install(
        &server,
        configuration(
            "ValidatingWebhookConfiguration",
            "py",
            "py.wisp.test",
            url_client(&hook, &certs, "/"),
            json!({}),
        ),
    )
    .await?;
    let seen = run_python(program, PYTHON_SCRIPT, server.url()).await?;
    let status = |code: u16, message: &str, reason: Option<&str>| {
        let mut s = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("admission webhook \"py.wisp.test\" denied the request: {message}"),
            "code": code,
        });
        if let Some(reason) = reason {
            s["reason"] = json!(reason);
        }
        s
    };
    assert_eq!(
        seen,
        json!([
            [403, status(403, "no forbidden pods", Some("Forbidden"))],
            [400, status(400, "not today", None)],
        ])
    );
    Ok(())
}

/// A recorder webhook on every namespaced resource and subresource (`*/*`), denying what is
/// labelled `keep`.
fn recorder(hook: &WebhookServer, certs: &Certs) -> Value {
    configuration(
        "ValidatingWebhookConfiguration",
        "recorder",
        "record.wisp.test",
        url_client(hook, certs, "/"),
        json!({"rules": [{
            "operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"],
            "resources": ["*/*", "*"], "scope": "Namespaced",
        }]}),
    )
}

/// (operation, resource, subResource, name) of each review.
fn calls(hook: &WebhookServer) -> Vec<(String, String, String, String)> {
    hook.reviews()
        .iter()
        .map(|r| {
            let t = |p: &str| {
                r["request"]
                    .pointer(p)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            (
                t("/operation"),
                t("/resource/resource"),
                t("/subResource"),
                t("/name"),
            )
        })
        .collect()
}

#[tokio::test]
async fn status_scale_every_patch_type_and_deletes_are_admitted() -> anyhow::Result<()> {
    let (Some(program), Some(certs)) = (kubectl(), Certs::generate(&["127.0.0.1"])) else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let hook = WebhookServer::start(&certs, |request| {
        let old = &request["oldObject"]["metadata"]["labels"]["keep"];
        if request["operation"] == "DELETE" && !old.is_null() {
            deny(403, "kept")
        } else if request["subResource"] == "scale"
            && request["object"]["spec"]["replicas"].as_i64() > Some(5)
        {
            deny(422, "at most 5 replicas")
        } else {
            allow()
        }
    })
    .await?;
    install(&server, recorder(&hook, &certs)).await?;
    let kubectl = Kubectl::new(program, &server);
    let api = pods(&server, "default");
    api.create(&PostParams::default(), &new_pod("default", "web-1"))
        .await?;
    use kube::api::{Patch, PatchParams};
    let merge = json!({"metadata": {"labels": {"merged": "yes"}}});
    api.patch("web-1", &PatchParams::default(), &Patch::Merge(&merge))
        .await?;
    let strategic = json!({"metadata": {"labels": {"strategic": "yes"}}});
    api.patch(
        "web-1",
        &PatchParams::default(),
        &Patch::Strategic(&strategic),
    )
    .await?;
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/labels/json", "value": "yes"}
    ]))?;
    api.patch("web-1", &PatchParams::default(), &Patch::Json::<()>(ops))
        .await?;
    let status = json!({"status": {"phase": "Running"}});
    api.patch_status("web-1", &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "labels": {"keep": "yes"}}, "data": {"a": "b"}});
    let cms: Api<DynamicObject> = Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")),
    );
    cms.patch(
        "settings",
        &PatchParams::apply("test"),
        &Patch::Apply(&applied),
    )
    .await?;
    // kubectl scale: an UPDATE of deployments/scale whose object is a Scale.
    server.create(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "shop", "namespace": "default"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "shop"}},
            "template": {"metadata": {"labels": {"app": "shop"}},
                "spec": {"containers": [{"name": "app", "image": "nginx"}]}}},
    }))?;
    kubectl
        .ok(&["scale", "deployment", "shop", "--replicas=3"])
        .await;
    let scale = hook.reviews().last().cloned().unwrap_or_default();
    assert_eq!(
        scale["request"]["kind"],
        json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
    );
    assert_eq!(scale["request"]["oldObject"]["spec"]["replicas"], 1);
    let (ok, _, err) = kubectl
        .run(&["scale", "deployment", "shop", "--replicas=9"])
        .await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        "Error from server: admission webhook \"record.wisp.test\" denied the request: at most 5 replicas"
    );
    // Deletes see the object as oldObject; a deletecollection asks for each item.
    let status = refusal(cms.delete("settings", &DeleteParams::default()).await);
    assert_eq!(
        status.message,
        "admission webhook \"record.wisp.test\" denied the request: kept"
    );
    api.delete_collection(&DeleteParams::default(), &Default::default())
        .await?;
    let s = |v: &str| v.to_string();
    let want = [
        ("CREATE", "pods", "", "web-1"),
        ("UPDATE", "pods", "", "web-1"),
        ("UPDATE", "pods", "", "web-1"),
        ("UPDATE", "pods", "", "web-1"),
        ("UPDATE", "pods", "status", "web-1"),
        ("CREATE", "configmaps", "", "settings"),
        ("UPDATE", "deployments", "scale", "shop"),
        ("UPDATE", "deployments", "scale", "shop"),
        ("DELETE", "configmaps", "", "settings"),
        // An item of a deletecollection is reviewed without its name, as a real server does.
        ("DELETE", "pods", "", ""),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|(a, b, c, d)| (s(a), s(b), s(c), s(d)))
        .collect();
    assert_eq!(calls(&hook), want);
    let deleted = &hook.reviews()[9]["request"];
    assert!(deleted["object"].is_null());
    assert_eq!(deleted["oldObject"]["metadata"]["labels"]["json"], "yes");
    assert_eq!(deleted["options"]["kind"], "DeleteOptions");
    assert_eq!(
        server
            .get("apps/v1", "Deployment", Some("default"), "shop")
            .map(|d| d["spec"]["replicas"].clone()),
        Some(json!(3))
    );
    Ok(())
}

#[tokio::test]
async fn match_policy_equivalent_matches_a_crds_other_served_version() -> anyhow::Result<()> {
    let Some(certs) = Certs::generate(&["127.0.0.1"]) else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    server.create(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                {"name": "v2", "served": true, "storage": false,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
            ]},
    }))?;
    let hook = WebhookServer::start(&certs, |_| {
        patch(json!([{"op": "add", "path": "/metadata/annotations", "value": {"seen": "v1"}}]))
    })
    .await?;
    let rules = json!({"rules": [{
        "operations": ["CREATE"], "apiGroups": ["example.com"], "apiVersions": ["v1"],
        "resources": ["widgets"],
    }]});
    let mut exact = rules.clone();
    exact["matchPolicy"] = json!("Exact");
    install(
        &server,
        configuration(
            "MutatingWebhookConfiguration",
            "exact",
            "exact.wisp.test",
            url_client(&hook, &certs, "/"),
            exact,
        ),
    )
    .await?;
    let v2: Api<DynamicObject> = Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("example.com", "v2", "Widget")),
    );
    let widget = |name: &str| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "example.com/v2", "kind": "Widget",
            "metadata": {"name": name, "namespace": "default"}, "spec": {"size": 1}}))
        .expect("a widget")
    };
    // Exact: a v1 rule does not see a v2 request.
    v2.create(&PostParams::default(), &widget("w-1")).await?;
    assert!(hook.reviews().is_empty());
    install(
        &server,
        configuration(
            "MutatingWebhookConfiguration",
            "equivalent",
            "eq.wisp.test",
            url_client(&hook, &certs, "/"),
            rules,
        ),
    )
    .await?;
    let created = v2.create(&PostParams::default(), &widget("w-2")).await?;
    assert_eq!(
        created.types.as_ref().map(|t| t.api_version.as_str()),
        Some("example.com/v2")
    );
    assert_eq!(
        created
            .metadata
            .annotations
            .unwrap_or_default()
            .get("seen")
            .map(String::as_str),
        Some("v1")
    );
    let request = &hook.reviews()[0]["request"];
    assert_eq!(
        request["kind"],
        json!({"group": "example.com", "version": "v1", "kind": "Widget"})
    );
    assert_eq!(request["resource"]["version"], "v1");
    assert_eq!(request["requestKind"]["version"], "v2");
    assert_eq!(request["requestResource"]["version"], "v2");
    assert_eq!(request["object"]["apiVersion"], "example.com/v1");
    Ok(())
}

#[tokio::test]
async fn match_conditions_are_refused_not_ignored() -> anyhow::Result<()> {
    let Some(certs) = Certs::generate(&["127.0.0.1"]) else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let hook = WebhookServer::start(&certs, |_| allow()).await?;
    let config = configuration(
        "ValidatingWebhookConfiguration",
        "cel",
        "cel.wisp.test",
        url_client(&hook, &certs, "/"),
        json!({"matchConditions": [{"name": "not-system", "expression": "!request.userInfo.username.startsWith('system:')"}]}),
    );
    let status = refusal(
        install(&server, config.clone())
            .await
            .map_err(|e| e.downcast::<kube::Error>().expect("a kube error")),
    );
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains(
            "webhooks[0].matchConditions: Forbidden: not supported by the test API server"
        ),
        "{}",
        status.message
    );
    // Seeded anyway: every request its rules match fails closed.
    server.create(config)?;
    let status = refusal(
        pods(&server, "default")
            .create(&PostParams::default(), &new_pod("default", "web-1"))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert!(hook.reviews().is_empty());
    Ok(())
}
