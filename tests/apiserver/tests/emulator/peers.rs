//! The test API server as other clients than kube-rs see it: kubectl and the official Python
//! client, each given the server's plain-HTTP address, and answered as a real API server
//! answers them.
//!
//! Peers: `kubectl` (`$WISP_KUBECTL`, else on `PATH`) and a Python with the `kubernetes` package
//! (`$WISP_PYTHON`, else `python3`); `.ci/run` installs the Python client (pinned) in a venv.
//! A missing peer skips its tests with a message, except under `CI=true`, where it fails them.

use wisp_apiserver::test_support::{self as common, Kubectl, kubectl, python, rows, run_python};

use serde_json::{Value, json};
use wisp_apiserver::{TestApiServer, pod};

#[tokio::test]
async fn kubectl_get_pods_discovers_pods_and_prints_the_servers_table() -> anyhow::Result<()> {
    let Some(program) = kubectl() else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    server.create(pod("default", "web-1"))?;
    let kubectl = Kubectl::new(program, &server);
    let out = kubectl.ok(&["get", "pods"]).await;
    let table = rows(&out);
    assert_eq!(table[0], ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    assert_eq!(table[1][..4], ["web-1", "2/2", "Running", "0"]);
    // By short name, wide.
    let wide = rows(&kubectl.ok(&["get", "po", "-o", "wide"]).await);
    assert_eq!(wide[1][5..7], ["10.244.1.23", "node-1"]);
    // One object as JSON.
    let json: Value =
        serde_json::from_str(&kubectl.ok(&["get", "pod", "web-1", "-o", "json"]).await)?;
    assert_eq!(json["status"]["containerStatuses"][0]["name"], "app");
    // describe reads the pod, then its events by field selector (involvedObject.*).
    let described = kubectl.ok(&["describe", "pod", "web-1"]).await;
    assert!(
        described.contains("Status:") && described.contains("Running"),
        "{described}"
    );
    let events = server
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/events"))
        .and_then(|r| r.query.get("fieldSelector").cloned())
        .unwrap_or_default();
    assert!(events.contains("involvedObject.name=web-1"), "{events}");
    Ok(())
}

#[tokio::test]
async fn kubectl_get_watch_prints_each_event_as_a_row_of_the_servers_table() -> anyhow::Result<()> {
    let Some(program) = kubectl() else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    server.create(pod("default", "web-1"))?;
    let kubectl = Kubectl::new(program, &server);
    let writer = server.clone();
    tokio::spawn(async move {
        // Once kubectl's watch is open.
        if writer
            .wait_for_open_watches(1, common::patience(std::time::Duration::from_secs(20)))
            .await
            .is_ok()
        {
            writer.create(pod("default", "web-2")).ok();
        }
    });
    // The watch ends with the request timeout; what was printed until then is the test.
    let (_, out, stderr) = kubectl
        .run(&[
            "get",
            "pods",
            "-w",
            "--output-watch-events=true",
            "--request-timeout=6s",
        ])
        .await;
    let table = rows(&out);
    assert_eq!(
        table.first().map(|r| r[..5].to_vec()),
        Some(
            ["EVENT", "NAME", "READY", "STATUS", "RESTARTS"]
                .map(String::from)
                .to_vec()
        ),
        "{out}{stderr}"
    );
    assert!(
        table
            .iter()
            .any(|r| r[..5] == ["ADDED", "web-2", "2/2", "Running", "0"]),
        "{out}{stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn kubectl_api_resources_lists_the_served_kinds_with_short_names_and_scope()
-> anyhow::Result<()> {
    let Some(program) = kubectl() else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let kubectl = Kubectl::new(program, &server);
    let table = rows(&kubectl.ok(&["api-resources"]).await);
    // kubectl asks for aggregated discovery and gets it: /api and /apis, no per-version fetch.
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert!(paths.iter().any(|p| p == "/apis"), "{paths:?}");
    assert!(
        !paths.iter().any(|p| p == "/api/v1" || p == "/apis/apps/v1"),
        "{paths:?}"
    );
    assert_eq!(
        table[0],
        ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    );
    for want in [
        vec!["pods", "po", "v1", "true", "Pod"],
        vec!["namespaces", "ns", "v1", "false", "Namespace"],
        vec!["deployments", "deploy", "apps/v1", "true", "Deployment"],
        vec!["secrets", "v1", "true", "Secret"],
    ] {
        assert!(
            table.contains(&want.iter().map(|s| s.to_string()).collect()),
            "{want:?} in {table:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn kubectl_create_configmap_and_apply_work_against_the_server() -> anyhow::Result<()> {
    let Some(program) = kubectl() else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let kubectl = Kubectl::new(program, &server);
    // kubectl's typed client posts this as protobuf.
    let out = kubectl
        .ok(&[
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=fast",
        ])
        .await;
    assert_eq!(out.trim(), "configmap/settings created");
    let stored = server
        .get("v1", "ConfigMap", Some("default"), "settings")
        .expect("created");
    assert_eq!(stored["data"], json!({"mode": "fast"}));

    // apply with validation on (kubectl reads /openapi/v3 to leave it to the server).
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("cm.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  k: one\n",
    )?;
    let file = file.to_string_lossy().into_owned();
    assert_eq!(
        kubectl.ok(&["apply", "-f", &file]).await.trim(),
        "configmap/applied created"
    );
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  k: two\n",
    )?;
    assert_eq!(
        kubectl.ok(&["apply", "-f", &file]).await.trim(),
        "configmap/applied configured"
    );
    let applied = server
        .get("v1", "ConfigMap", Some("default"), "applied")
        .expect("applied");
    assert_eq!(applied["data"]["k"], "two");
    // An invalid name is the server's 422.
    let (ok, _, stderr) = kubectl
        .run(&["create", "configmap", "Bad_Name", "--from-literal=a=b"])
        .await;
    assert!(!ok);
    assert!(
        stderr.contains(
            "ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\""
        ),
        "{stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn kubectl_delete_leaves_an_object_with_finalizers_terminating_until_they_go()
-> anyhow::Result<()> {
    let Some(program) = kubectl() else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let kubectl = Kubectl::new(program, &server);
    let mut held = wisp_apiserver::config_map("default", "held", &[("k", "v")]);
    held["metadata"]["finalizers"] = json!(["example.com/hold"]);
    server.create(held)?;

    let out = kubectl
        .ok(&["delete", "configmap", "held", "--wait=false"])
        .await;
    assert_eq!(out.trim(), "configmap \"held\" deleted");
    let stamp = kubectl
        .ok(&[
            "get",
            "configmap",
            "held",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ])
        .await;
    assert!(!stamp.trim().is_empty(), "still there, being deleted");

    kubectl
        .ok(&[
            "patch",
            "configmap",
            "held",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ])
        .await;
    let (ok, _, stderr) = kubectl.run(&["get", "configmap", "held"]).await;
    assert!(!ok);
    assert!(
        stderr.contains("Error from server (NotFound): configmaps \"held\" not found"),
        "{stderr}"
    );

    // A namespace: its content goes, then the namespace.
    kubectl.ok(&["create", "namespace", "shop"]).await;
    kubectl
        .ok(&[
            "create",
            "configmap",
            "c",
            "-n",
            "shop",
            "--from-literal=a=b",
        ])
        .await;
    kubectl.ok(&["delete", "namespace", "shop"]).await;
    assert!(server.get("v1", "Namespace", None, "shop").is_none());
    assert!(server.get("v1", "ConfigMap", Some("shop"), "c").is_none());
    Ok(())
}

#[tokio::test]
async fn kubectl_reports_the_servers_field_selector_errors() -> anyhow::Result<()> {
    let Some(program) = kubectl() else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    server.create(pod("default", "web-1"))?;
    let kubectl = Kubectl::new(program, &server);
    let (ok, _, stderr) = kubectl
        .run(&["get", "pods", "--field-selector", "spec.foo=x"])
        .await;
    assert!(!ok);
    assert!(
        stderr.contains("Error from server (BadRequest)")
            && stderr.contains("field label not supported: spec.foo"),
        "{stderr}"
    );
    let (ok, _, stderr) = kubectl
        .run(&["get", "configmaps", "--field-selector", "data.a=b"])
        .await;
    assert!(!ok);
    assert!(
        stderr.contains(
            "\"data.a\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        ),
        "{stderr}"
    );
    let out = kubectl
        .ok(&[
            "get",
            "pods",
            "--field-selector",
            "status.phase=Running",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(out.trim(), "pod/web-1");
    Ok(())
}

/// Lists pods into typed models, creates a ConfigMap, watches it arrive, and reads a field
/// selector error; prints one JSON object with what it saw.
const PYTHON_SCRIPT: &str = r#"
import json, sys
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

config = client.Configuration()
config.host = sys.argv[1]
api = client.CoreV1Api(client.ApiClient(config))
out = {}

pods = api.list_namespaced_pod("default")
pod = pods.items[0]
out["pod_type"] = type(pod).__name__
out["pod_name"] = pod.metadata.name
out["image_ids"] = [s.image_id for s in pod.status.container_statuses]
out["phase"] = pod.status.phase

cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="from-python"), data={"k": "v"})
created = api.create_namespaced_config_map("default", cm)
out["created_uid"] = bool(created.metadata.uid)

events = []
w = watch.Watch()
for event in w.stream(api.list_namespaced_config_map, "default", resource_version="0", timeout_seconds=5):
    events.append([event["type"], event["object"].metadata.name])
    if event["object"].metadata.name == "from-python":
        w.stop()
out["watch"] = events

try:
    api.list_namespaced_pod("default", field_selector="spec.foo=x")
    out["selector_error"] = None
except ApiException as e:
    out["selector_error"] = [e.status, json.loads(e.body)["message"]]

print(json.dumps(out))
"#;

#[tokio::test]
async fn the_python_client_decodes_pods_creates_and_watches() -> anyhow::Result<()> {
    let Some(program) = python() else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    server.create(pod("default", "web-1"))?;
    let seen = run_python(program, PYTHON_SCRIPT, server.url()).await?;
    assert_eq!(seen["pod_type"], "V1Pod");
    assert_eq!(seen["pod_name"], "web-1");
    assert_eq!(seen["phase"], "Running");
    assert!(
        seen["image_ids"]
            .as_array()
            .is_some_and(|ids| ids.len() == 2
                && ids
                    .iter()
                    .all(|i| i.as_str().is_some_and(|s| s.contains("@sha256:")))),
        "{seen}"
    );
    assert_eq!(seen["created_uid"], true);
    assert_eq!(seen["watch"], json!([["ADDED", "from-python"]]));
    assert_eq!(
        seen["selector_error"],
        json!([400, "field label not supported: spec.foo"])
    );
    Ok(())
}

/// What kubectl meant to create: its `--dry-run=client -o json` rendering, without the
/// metadata a server sets.
fn as_meant(mut obj: Value) -> Value {
    if let Some(meta) = obj["metadata"].as_object_mut() {
        for field in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "namespace",
        ] {
            meta.remove(field);
        }
    }
    obj
}

#[tokio::test]
async fn kubectl_creates_every_builtin_kind_its_typed_clients_post_as_protobuf()
-> anyhow::Result<()> {
    let Some(program) = kubectl() else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let kubectl = Kubectl::new(program, &server);
    let creates: &[(&[&str], &str, &str, &str)] = &[
        (
            &[
                "deployment",
                "web",
                "--image=nginx:1.27",
                "--replicas=0",
                "--port=8080",
            ],
            "apps/v1",
            "Deployment",
            "deployment.apps/web created",
        ),
        (
            &["serviceaccount", "robot"],
            "v1",
            "ServiceAccount",
            "serviceaccount/robot created",
        ),
        (
            &[
                "service",
                "clusterip",
                "api",
                "--tcp=80:http",
                "--tcp=443:8443",
            ],
            "v1",
            "Service",
            "service/api created",
        ),
        (
            &[
                "job",
                "once",
                "--image=busybox",
                "--",
                "sh",
                "-c",
                "echo hi",
            ],
            "batch/v1",
            "Job",
            "job.batch/once created",
        ),
        (
            &[
                "cronjob",
                "nightly",
                "--image=busybox",
                "--schedule=0 3 * * *",
                "--",
                "date",
            ],
            "batch/v1",
            "CronJob",
            "cronjob.batch/nightly created",
        ),
        (
            &[
                "role",
                "reader",
                "--verb=get,list",
                "--resource=pods,configmaps",
            ],
            "rbac.authorization.k8s.io/v1",
            "Role",
            "role.rbac.authorization.k8s.io/reader created",
        ),
        (
            &[
                "priorityclass",
                "high",
                "--value=1000",
                "--description=urgent work",
            ],
            "scheduling.k8s.io/v1",
            "PriorityClass",
            "priorityclass.scheduling.k8s.io/high created",
        ),
        // Beyond the issue's list: other kinds `kubectl create` posts, with quantities,
        // int-or-strings and pointers to strings.
        (
            &["clusterrole", "watcher", "--verb=watch", "--resource=nodes"],
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            "clusterrole.rbac.authorization.k8s.io/watcher created",
        ),
        (
            &[
                "rolebinding",
                "read",
                "--role=reader",
                "--serviceaccount=default:robot",
            ],
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            "rolebinding.rbac.authorization.k8s.io/read created",
        ),
        (
            &["quota", "small", "--hard=cpu=1500m,memory=1Gi,pods=10"],
            "v1",
            "ResourceQuota",
            "resourcequota/small created",
        ),
        (
            &[
                "poddisruptionbudget",
                "web",
                "--selector=app=web",
                "--min-available=50%",
            ],
            "policy/v1",
            "PodDisruptionBudget",
            "poddisruptionbudget.policy/web created",
        ),
        (
            &["ingress", "site", "--rule=example.com/app*=api:80"],
            "networking.k8s.io/v1",
            "Ingress",
            "ingress.networking.k8s.io/site created",
        ),
        (
            &["secret", "generic", "creds", "--from-literal=user=admin"],
            "v1",
            "Secret",
            "secret/creds created",
        ),
    ];
    for (args, api_version, kind, said) in creates {
        // Flags before the args: a Job's and a CronJob's end with `-- command`.
        let create = [&["create"][..], args].concat();
        let dry = [&["create", "--dry-run=client", "-o", "json"][..], args].concat();
        let dry_out = kubectl.ok(&dry).await;
        let meant: Value = serde_json::from_str(&dry_out)
            .map_err(|e| anyhow::anyhow!("{kind}: dry run printed {dry_out:?}: {e}"))?;
        // At -v=8 kubectl prints its request headers: the body it posts is protobuf.
        let (ok, out, log) = kubectl.run(&[&["create", "-v=8"][..], args].concat()).await;
        assert!(ok, "{create:?}: {log}");
        assert_eq!(out.trim(), *said);
        assert!(
            log.contains("Content-Type: application/vnd.kubernetes.protobuf"),
            "{kind} not posted as protobuf: {log}"
        );
        let namespace = (!matches!(*kind, "PriorityClass" | "ClusterRole")).then_some("default");
        let name = args[1 + usize::from(matches!(*kind, "Service" | "Secret"))];
        let stored = server
            .get(api_version, kind, namespace, name)
            .unwrap_or_else(|| panic!("{kind} not stored"));
        // A server defaults what it decodes: kubectl's rendering gets the same defaults.
        let mut meant = as_meant(meant);
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        wisp_apiserver::defaults::apply_defaults(group, version, kind, &mut meant);
        assert_eq!(as_meant(stored.clone()), meant, "{kind}");
        // And kubectl reads back what it wrote.
        let reference = format!("{}/{name}", kind.to_ascii_lowercase());
        let got = kubectl.ok(&["get", &reference, "-o", "json"]).await;
        let read: Value = serde_json::from_str(&got)
            .map_err(|e| anyhow::anyhow!("{kind}: kubectl get printed {got:?}: {e}"))?;
        // kubectl leaves managedFields out of what it prints.
        let mut shown = stored.clone();
        if let Some(meta) = shown["metadata"].as_object_mut() {
            meta.remove("managedFields");
        }
        assert_eq!(read, shown, "{kind}");
    }
    // The zero a pointer holds survives: `replicas: 0` is not the default 1.
    let web = server
        .get("apps/v1", "Deployment", Some("default"), "web")
        .expect("stored");
    assert_eq!(web["spec"]["replicas"], json!(0));
    assert_eq!(
        web["spec"]["template"]["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 8080, "protocol": "TCP"}]),
        "the empty protocol left out of the protobuf body, then defaulted"
    );
    let api = server
        .get("v1", "Service", Some("default"), "api")
        .expect("stored");
    assert_eq!(api["spec"]["ports"][0]["targetPort"], json!("http"));
    assert_eq!(api["spec"]["ports"][1]["targetPort"], json!(8443));
    let quota = server
        .get("v1", "ResourceQuota", Some("default"), "small")
        .expect("stored");
    assert_eq!(
        quota["spec"]["hard"],
        json!({"cpu": "1500m", "memory": "1Gi", "pods": "10"})
    );
    let pdb = server
        .get("policy/v1", "PodDisruptionBudget", Some("default"), "web")
        .expect("stored");
    assert_eq!(pdb["spec"]["minAvailable"], json!("50%"));
    Ok(())
}

#[tokio::test]
async fn kubectl_scale_writes_replicas_through_the_scale_subresource() -> anyhow::Result<()> {
    use futures::StreamExt;
    use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};
    use kube::core::{ApiResource, GroupVersionKind};
    let Some(program) = kubectl() else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let kubectl = Kubectl::new(program, &server);
    kubectl
        .ok(&[
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=1",
        ])
        .await;
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        server.client(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")),
    );
    let mut stream = deployments
        .watch(
            &WatchParams::default(),
            &server.resource_version().to_string(),
        )
        .await?
        .boxed();
    assert_eq!(
        kubectl
            .ok(&["scale", "deployment/web", "--replicas=3"])
            .await
            .trim(),
        "deployment.apps/web scaled"
    );
    let modified = loop {
        let event = tokio::time::timeout(
            common::patience(std::time::Duration::from_secs(10)),
            stream.next(),
        )
        .await?
        .expect("watch open")?;
        match event {
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Modified(obj) => break obj,
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(modified.data["spec"]["replicas"], json!(3));
    assert_eq!(modified.metadata.generation, Some(2));
    // With a precondition kubectl reads the Scale and replaces it.
    kubectl
        .ok(&[
            "scale",
            "deployment/web",
            "--current-replicas=3",
            "--replicas=0",
        ])
        .await;
    let (ok, _, stderr) = kubectl
        .run(&[
            "scale",
            "deployment/web",
            "--current-replicas=3",
            "--replicas=1",
        ])
        .await;
    assert!(
        !ok && stderr.contains("Expected replicas to be 3, was 0"),
        "{stderr}"
    );
    let stored = server
        .get("apps/v1", "Deployment", Some("default"), "web")
        .expect("stored");
    assert_eq!(stored["spec"]["replicas"], json!(0));
    Ok(())
}

#[tokio::test]
async fn kubectl_auth_can_i_and_whoami_are_answered_and_the_reviews_are_not_stored()
-> anyhow::Result<()> {
    let Some(program) = kubectl() else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let kubectl = Kubectl::new(program, &server);
    // A SelfSubjectAccessReview posted as protobuf.
    assert_eq!(
        kubectl
            .ok(&["auth", "can-i", "create", "deployments"])
            .await
            .trim(),
        "yes"
    );
    assert_eq!(
        kubectl
            .ok(&["auth", "can-i", "get", "/healthz"])
            .await
            .trim(),
        "yes"
    );
    // A SelfSubjectRulesReview.
    let rules = kubectl.ok(&["auth", "can-i", "--list"]).await;
    assert!(rules.lines().any(|l| l.starts_with("*.*")), "{rules}");
    assert!(
        server
            .objects("authorization.k8s.io/v1", "SelfSubjectAccessReview")
            .is_empty()
    );
    // A SelfSubjectReview: the server authenticates nobody.
    let whoami = kubectl.ok(&["auth", "whoami", "-o", "json"]).await;
    let whoami: Value = serde_json::from_str(&whoami)?;
    assert_eq!(
        whoami["status"]["userInfo"],
        json!({"username": "system:anonymous", "groups": ["system:unauthenticated"]})
    );
    assert!(
        server
            .objects("authentication.k8s.io/v1", "SelfSubjectReview")
            .is_empty()
    );
    Ok(())
}

/// kubectl agrees with the test API server on a Pod's immutable spec (issue 29, item 7) and on
/// its graceful deletion (item 8): `kubectl patch` prints the server's 422, `kubectl delete`
/// (which waits for the Pod to be gone) returns once the grace ends.
#[tokio::test]
async fn kubectl_sees_pod_updates_refused_and_pods_deleted_gracefully() -> anyhow::Result<()> {
    let Some(program) = kubectl() else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    server
        .faults()
        .pod_stop_time(std::time::Duration::from_millis(500));
    server.create(pod("default", "web-1"))?;
    let kubectl = Kubectl::new(program, &server);
    let (ok, _, stderr) = kubectl
        .run(&[
            "patch",
            "pod",
            "web-1",
            "-p",
            r#"{"spec":{"nodeName":"node-2"}}"#,
        ])
        .await;
    assert!(!ok);
    assert!(
        stderr.contains(
            "The Pod \"web-1\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"
        ),
        "{stderr}"
    );
    let out = kubectl
        .ok(&["delete", "pod", "web-1", "--wait=false"])
        .await;
    assert_eq!(out.trim(), "pod \"web-1\" deleted");
    let grace = kubectl
        .ok(&[
            "get",
            "pod",
            "web-1",
            "-o",
            "jsonpath={.metadata.deletionGracePeriodSeconds}",
        ])
        .await;
    assert_eq!(grace, "30");
    kubectl
        .ok(&["wait", "--for=delete", "pod/web-1", "--timeout=10s"])
        .await;
    assert!(server.get("v1", "Pod", Some("default"), "web-1").is_none());
    Ok(())
}

#[tokio::test]
async fn kubectl_waits_for_a_crd_to_be_established_and_prints_its_schemas_refusals()
-> anyhow::Result<()> {
    let Some(program) = kubectl() else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    let kubectl = Kubectl::new(program, &server);
    let dir = tempfile::tempdir()?;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "string", "enum": ["low", "medium", "high"]}}}}}}}]}
    });
    let file = dir.path().join("crd.json");
    std::fs::write(&file, crd.to_string())?;
    let file = file.to_string_lossy().into_owned();
    kubectl.ok(&["apply", "-f", &file]).await;
    let out = kubectl
        .ok(&[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=20s",
        ])
        .await;
    assert_eq!(
        out.trim(),
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com condition met"
    );
    // A Widget its schema refuses: the server's 422, as kubectl prints it.
    let cr = dir.path().join("widget.yaml");
    std::fs::write(
        &cr,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: a\nspec:\n  size: urgent\n",
    )?;
    let cr = cr.to_string_lossy().into_owned();
    let (ok, _, stderr) = kubectl.run(&["create", "-f", &cr]).await;
    assert!(!ok);
    assert!(
        stderr.contains(
            "is invalid: spec.size: Unsupported value: \"urgent\": supported values: \"low\", \"medium\", \"high\""
        ),
        "{stderr}"
    );
    assert!(
        server
            .get("example.com/v1", "Widget", Some("default"), "a")
            .is_none()
    );
    // An unknown field: kubectl asks for strict field validation and shows the server's 400.
    std::fs::write(
        &cr,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: a\nspec:\n  size: low\n  colour: red\n",
    )?;
    let (ok, _, stderr) = kubectl.run(&["create", "-f", &cr]).await;
    assert!(!ok);
    assert!(
        stderr.contains("strict decoding error: unknown field \"spec.colour\""),
        "{stderr}"
    );
    // Without validation it is stored, the field pruned.
    kubectl.ok(&["create", "--validate=false", "-f", &cr]).await;
    let stored = server
        .get("example.com/v1", "Widget", Some("default"), "a")
        .expect("created");
    assert_eq!(stored["spec"], json!({"size": "low"}));
    Ok(())
}

/// Reads a CRD into the typed model, creates a Widget its schema refuses and one with an
/// unknown field; prints one JSON object with what it saw.
const PYTHON_CRD_SCRIPT: &str = r#"
import json, sys
from kubernetes import client
from kubernetes.client.rest import ApiException

config = client.Configuration()
config.host = sys.argv[1]
api_client = client.ApiClient(config)
out = {}

crd = client.ApiextensionsV1Api(api_client).read_custom_resource_definition("widgets.example.com")
out["conditions"] = sorted([c.type, c.status, c.reason] for c in crd.status.conditions)
out["stored_versions"] = crd.status.stored_versions

custom = client.CustomObjectsApi(api_client)
def widget(name, spec):
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}
try:
    custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", widget("bad", {"size": "urgent"}))
    out["refused"] = None
except ApiException as e:
    out["refused"] = [e.status, json.loads(e.body)["message"]]
created = custom.create_namespaced_custom_object("example.com", "v1", "default", "widgets", widget("good", {"size": "low", "colour": "red"}))
out["created_spec"] = created["spec"]
print(json.dumps(out))
"#;

#[tokio::test]
async fn the_python_client_reads_an_established_crd_and_meets_its_schema() -> anyhow::Result<()> {
    let Some(program) = python() else {
        return Ok(());
    };
    let server = TestApiServer::start().await?;
    server.create(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "replicas": {"type": "integer", "default": 1},
                        "size": {"type": "string", "enum": ["low", "medium", "high"]}}}}}}}]}
    }))?;
    let seen = run_python(program, PYTHON_CRD_SCRIPT, server.url()).await?;
    assert_eq!(
        seen["conditions"],
        json!([
            ["Established", "True", "InitialNamesAccepted"],
            ["NamesAccepted", "True", "NoConflicts"]
        ])
    );
    assert_eq!(seen["stored_versions"], json!(["v1"]));
    assert_eq!(
        seen["refused"],
        json!([
            422,
            "Widget.example.com \"bad\" is invalid: spec.size: Unsupported value: \"urgent\": supported values: \"low\", \"medium\", \"high\""
        ])
    );
    assert_eq!(seen["created_spec"], json!({"size": "low", "replicas": 1}));
    Ok(())
}
