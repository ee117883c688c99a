//! A `WispPlugin` watches only namespaced kinds, custom ones included: the host asks discovery
//! for the scope of each informer's kind when the resource is reconciled.

use super::*;

/// A WispPlugin of `default` watching pods and, as `extra`, `kind` of `api_version`.
fn watching(name: &str, api_version: &str, kind: &str) -> Value {
    wisp_plugin(
        name,
        json!({"informers": [{"name": "pods", "apiVersion": "v1", "kind": "Pod"},
            {"name": "extra", "apiVersion": api_version, "kind": kind}]}),
    )
}

/// `ClusterWispPlugin` (the host's own cluster-scoped CRD) and a CRD of `scope: Cluster` are
/// refused in the status, naming the informer and the kind, and nothing of them runs; a
/// namespaced custom kind (`WispPlugin`) is watched; a kind not served is `KindNotServed`
/// (tried again every minute).
#[tokio::test]
async fn a_wisp_plugin_watching_a_cluster_scoped_custom_kind_is_refused_in_its_status() {
    let server = server().await;
    server
        .create(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true}]}
        }))
        .unwrap();
    let host = Host::start(&server, "").await;
    server
        .create(watching(
            "cluster-plugins",
            API_VERSION,
            "ClusterWispPlugin",
        ))
        .unwrap();
    server
        .create(watching("widgets", "example.com/v1", "Widget"))
        .unwrap();
    server
        .create(watching("peers", API_VERSION, "WispPlugin"))
        .unwrap();
    server
        .create(watching("gadgets", "example.com/v1", "Gadget"))
        .unwrap();
    for (name, kind) in [
        ("cluster-plugins", "ClusterWispPlugin (wisp.io/v1alpha1)"),
        ("widgets", "Widget (example.com/v1)"),
    ] {
        let s = until_status(&server, name, "refused", |s| {
            condition(s, "Degraded")["status"] == "True"
        })
        .await;
        let degraded = condition(&s, "Degraded");
        assert_eq!(degraded["reason"], "NotAllowed", "{s}");
        assert_eq!(
            degraded["message"],
            format!(
                "WispPlugin default/{name}: spec.informers[1].kind: {kind} is cluster-scoped, as \
                 the API server lists it (informer \"extra\"): a WispPlugin sees only its own \
                 namespace \"default\" (a ClusterWispPlugin may watch it)"
            ),
            "{s}"
        );
        assert_eq!(condition(&s, "Running")["status"], "False", "{s}");
        assert!(host.host.plugins.get(&format!("default/{name}")).is_none());
    }
    until_status(&server, "peers", "a namespaced custom kind watched", |s| {
        condition(s, "Running")["status"] == "True"
    })
    .await;
    let s = until_status(&server, "gadgets", "refused", |s| {
        condition(s, "Degraded")["status"] == "True"
    })
    .await;
    assert_eq!(condition(&s, "Degraded")["reason"], "KindNotServed", "{s}");
    assert!(
        s["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("spec.informers[1].kind: the API server serves no kind")),
        "{s}"
    );
    host.stop().await;
}
