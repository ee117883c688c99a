//! The kube ListerWatcher: any apiVersion/kind, namespaced or cluster-wide, label and field
//! selectors, through a real `kube::Client` against the test API server.

use crate::common;

use std::sync::Arc;

use common::*;
use serde_json::json;
use wisp_host::informer::SharedInformer;
use wisp_host::source::kube::KubeSource;
use wisp_tests::{TestApiServer, Verb, config_map, pod};

fn names(inf: &SharedInformer) -> Vec<String> {
    let mut v: Vec<String> = inf.cache().list_keys();
    v.sort();
    v
}

#[tokio::test]
async fn a_label_selected_informer_caches_only_matching_objects_and_drops_those_that_stop_matching()
{
    let server = TestApiServer::start().await.unwrap();
    server.create(pod("default", "web-1")).unwrap();
    server.create(pod("default", "db-1")).unwrap();
    let source = KubeSource::new(server.client_no_retry(), "v1", "Pod", None).labels("app=web");
    let inf = SharedInformer::new("web", Arc::new(source), fast_config());
    let _stop = start(&inf);
    until("synced", || inf.has_synced()).await;
    assert_eq!(names(&inf), ["default/web-1"]);
    let mut relabelled = pod("default", "web-1");
    relabelled["metadata"]["labels"]["app"] = json!("other");
    server.update(relabelled).unwrap();
    server.create(pod("default", "web-2")).unwrap();
    until("web-1 dropped, web-2 added", || {
        names(&inf) == ["default/web-2"]
    })
    .await;
    let w = &requests_of(&server, Verb::Watch)[0];
    assert_eq!(
        w.query.get("labelSelector").map(String::as_str),
        Some("app=web")
    );
}

#[tokio::test]
async fn a_namespaced_field_selected_informer_sees_one_namespace_and_one_name() {
    let server = TestApiServer::start().await.unwrap();
    for ns in ["a", "b"] {
        for n in ["x-1", "y-1"] {
            server.create(pod(ns, n)).unwrap();
        }
    }
    let source = KubeSource::new(server.client_no_retry(), "v1", "Pod", Some("a"))
        .fields("metadata.name=x-1");
    let inf = SharedInformer::new("x", Arc::new(source), fast_config());
    let _stop = start(&inf);
    until("synced", || inf.has_synced()).await;
    assert_eq!(names(&inf), ["a/x-1"]);
    assert!(
        requests_of(&server, Verb::List)
            .iter()
            .all(|r| r.path == "/api/v1/namespaces/a/pods")
    );
}

#[tokio::test]
async fn any_group_version_kind_works_including_cluster_scoped_ones() {
    let server = TestApiServer::start().await.unwrap();
    server
        .create(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 2}}))
        .unwrap();
    server
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}))
        .unwrap();
    server
        .create(config_map("default", "settings", &[("k", "v")]))
        .unwrap();

    let deploys = SharedInformer::new(
        "deploys",
        Arc::new(KubeSource::new(
            server.client_no_retry(),
            "apps/v1",
            "Deployment",
            None,
        )),
        fast_config(),
    );
    let namespaces = SharedInformer::new(
        "namespaces",
        Arc::new(KubeSource::new(
            server.client_no_retry(),
            "v1",
            "Namespace",
            None,
        )),
        fast_config(),
    );
    let _s1 = start(&deploys);
    let _s2 = start(&namespaces);
    until("synced", || deploys.has_synced() && namespaces.has_synced()).await;
    assert_eq!(names(&deploys), ["default/web"]);
    // A cluster starts with its own four namespaces.
    assert_eq!(
        names(&namespaces),
        [
            "default",
            "kube-node-lease",
            "kube-public",
            "kube-system",
            "team-a"
        ],
        "cluster-scoped keys are bare names"
    );
    let d = deploys.cache().get_by_key("default/web").unwrap();
    assert_eq!(
        (d.meta().api_version(), d.meta().kind()),
        ("apps/v1", "Deployment")
    );
    assert_eq!(d.to_value()["spec"]["replicas"], json!(2));
    assert!(
        requests_of(&server, Verb::List)
            .iter()
            .any(|r| r.path == "/apis/apps/v1/deployments")
    );
}

#[tokio::test]
async fn managed_fields_are_stripped_by_default_and_kept_on_request() {
    let server = TestApiServer::start().await.unwrap();
    let mut p = pod("default", "web-1");
    p["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Apply"}]);
    server.create(p).unwrap();
    let stripped = SharedInformer::new(
        "s",
        Arc::new(KubeSource::new(server.client_no_retry(), "v1", "Pod", None)),
        fast_config(),
    );
    let kept = SharedInformer::new(
        "k",
        Arc::new(
            KubeSource::new(server.client_no_retry(), "v1", "Pod", None)
                .strip_managed_fields(false),
        ),
        fast_config(),
    );
    let _s1 = start(&stripped);
    let _s2 = start(&kept);
    until("synced", || stripped.has_synced() && kept.has_synced()).await;
    assert!(
        !stripped
            .cache()
            .get_by_key("default/web-1")
            .unwrap()
            .json()
            .contains("managedFields")
    );
    assert!(
        kept.cache()
            .get_by_key("default/web-1")
            .unwrap()
            .json()
            .contains("managedFields")
    );
}

/// A kind or apiVersion the API server does not serve refuses the start, naming the informer
/// and what the server serves (it used to sync nothing, silently, exit code 0); the plural is
/// the one discovery gives.
#[tokio::test]
async fn an_informer_on_a_kind_the_server_does_not_serve_is_refused_at_start() {
    let server = TestApiServer::start().await.unwrap();
    server.create(pod("default", "web-1")).unwrap();
    let yaml = |api_version: &str, kind: &str| {
        format!(
            "source: kube\ninformers:\n  - {{name: ok, apiVersion: v1, kind: Pod}}\n  - {{name: typo, apiVersion: {api_version}, kind: {kind}}}\n"
        )
    };
    let refused = |r: Result<Vec<Arc<SharedInformer>>, String>| match r {
        Ok(_) => panic!("started"),
        Err(e) => e,
    };
    let e = refused(try_informers_from_yaml(&server, &yaml("v1", "Podd")).await);
    assert!(
        e.contains("wisp.yaml: informers[1].kind")
            && e.contains("\"Podd\"")
            && e.contains("\"typo\"")
            && e.contains("it serves: ")
            && e.contains("Pod, "),
        "{e}"
    );
    let e = refused(try_informers_from_yaml(&server, &yaml("apps/v9", "Deployment")).await);
    assert!(
        e.contains("informers[1].apiVersion") && e.contains("\"apps/v9\""),
        "{e}"
    );
    let informers = try_informers_from_yaml(&server, &yaml("v1", "Endpoints"))
        .await
        .expect("served kinds start");
    let endpoints = informers[1].clone();
    let _stop = start(&endpoints);
    until("synced", || endpoints.has_synced()).await;
    // A streaming list (the default) is a watch request.
    let asked = [Verb::List, Verb::Watch]
        .into_iter()
        .flat_map(|v| requests_of(&server, v))
        .map(|r| r.path)
        .collect::<Vec<_>>();
    assert!(asked.iter().any(|p| p == "/api/v1/endpoints"), "{asked:?}");
}
