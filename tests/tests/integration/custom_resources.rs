//! Plugins as custom resources end to end: the CRDs deploy/crds.yaml ships installed in the
//! test API server, a host started from a config with `customResources`, and `WispPlugin`s
//! created, changed and deleted through the server; the host watches them with its real
//! `kube::Client`, runs their plugins (the image policy) and writes their status by
//! server-side apply, which the tests read back from the server.

use crate::common;

use std::path::PathBuf;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use wisp_host::app;
use wisp_host::config::Config;
use wisp_host::informer::shared_informer::wait_for;
use wisp_tests::{TestApiServer, pod};

mod cluster_scoped;
mod counts;
mod module_paths;

const CRDS: &str = include_str!("../../../deploy/crds.yaml");
const API_VERSION: &str = "wisp.io/v1alpha1";

/// A server with the CRDs and a pod on a `latest` image in `default`.
async fn server() -> TestApiServer {
    let server = TestApiServer::start().await.unwrap();
    for crd in wisp_kinds::yaml::documents(CRDS).unwrap() {
        server.create(crd).unwrap();
    }
    let mut p = pod("default", "web");
    p["spec"]["containers"][0]["image"] = json!("nginx:latest");
    server.create(p).unwrap();
    server
}

struct Host {
    host: app::Host,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

/// The directory of the built plugins: where the tests' custom resources take their modules.
fn plugin_dir() -> PathBuf {
    let m = plugin_path("image_policy");
    m.parent().expect("a plugin's directory").to_owned()
}

/// `modulePaths: [...]` allowing `dirs`.
fn module_paths(dirs: &[PathBuf]) -> String {
    let dirs: Vec<String> = dirs
        .iter()
        .map(|d| format!("{:?}", d.display().to_string()))
        .collect();
    format!("modulePaths: [{}]", dirs.join(", "))
}

impl Host {
    /// A host reading custom resources, their modules allowed from the built plugins'
    /// directory, `custom` added to its `customResources`.
    async fn start(server: &TestApiServer, custom: &str) -> Self {
        Self::start_with(server, &[plugin_dir()], custom).await
    }

    /// [`Host::start`], the modules of custom resources allowed from `dirs`.
    async fn start_with(server: &TestApiServer, dirs: &[PathBuf], custom: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = format!(
            "source: kube\ninformers:\n  - {{name: namespaces, apiVersion: v1, kind: Namespace}}\n\
             customResources: {{enabled: true, statusInterval: 1s, {paths}{custom}}}\n\
             admin: {{listen: \"127.0.0.1:0\"}}\n",
            paths = module_paths(dirs)
        );
        let path = dir.path().join("wisp.yaml");
        std::fs::write(&path, config).unwrap();
        let config = Config::load(&path).unwrap();
        let (host, stop) = start_host(&config, server.client(), Some(path)).await;
        Self {
            host,
            stop: Some(stop),
            _dir: dir,
        }
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.host
            .finish(tokio::time::Instant::now() + Duration::from_secs(5))
            .await;
    }
}

/// A WispPlugin in `default` running the image policy over its pods.
fn wisp_plugin(name: &str, spec_extra: Value) -> Value {
    let mut spec = json!({
        "module": plugin_path("image_policy").display().to_string(),
        "informers": [{"name": "pods", "apiVersion": "v1", "kind": "Pod"}],
        "settings": {"requireLimits": false},
    });
    for (k, v) in spec_extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({"apiVersion": API_VERSION, "kind": "WispPlugin",
        "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

fn status(server: &TestApiServer, name: &str) -> Value {
    status_in(server, "default", name)
}

/// The status of WispPlugin `name` of namespace `ns`.
fn status_in(server: &TestApiServer, ns: &str, name: &str) -> Value {
    server
        .get(API_VERSION, "WispPlugin", Some(ns), name)
        .map(|o| o["status"].clone())
        .unwrap_or(Value::Null)
}

fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

/// Waits for the status of `name` to hold `cond`; returns it.
async fn until_status(
    server: &TestApiServer,
    name: &str,
    what: &str,
    cond: impl Fn(&Value) -> bool,
) -> Value {
    let ok = wait_for(patience(Duration::from_secs(20)), || {
        cond(&status(server, name))
    })
    .await;
    let s = status(server, name);
    assert!(ok, "timed out waiting for: {what}; status: {s:#}");
    s
}

/// Create: the plugin runs on the pods of its namespace, and its status says so (generation,
/// conditions, module digest, ABI, counters); bad settings: Degraded, the running version stays
/// and keeps delivering; delete: the plugin stops.
#[tokio::test]
async fn a_wisp_plugin_runs_reports_its_status_keeps_running_on_bad_settings_and_stops_on_delete() {
    let server = server().await;
    let host = Host::start(&server, "").await;
    server.create(wisp_plugin("images", json!({}))).unwrap();
    let s = until_status(&server, "images", "running with a violation", |s| {
        condition(s, "Running")["status"] == "True" && s["counters"]["violations"] == 1
    })
    .await;
    assert_eq!(s["observedGeneration"], 1);
    assert_eq!(s["plugin"], "default/images");
    assert_eq!(condition(&s, "ModuleReady")["status"], "True");
    assert_eq!(condition(&s, "Degraded")["status"], "False");
    assert!(
        s["module"]["digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"),
        "{s}"
    );
    assert_eq!(s["abi"], "0.3.0");
    assert!(s["counters"]["delivered"].as_u64().unwrap() >= 1, "{s}");
    let plugin = host
        .host
        .plugins
        .get("default/images")
        .expect("the plugin runs");
    assert_eq!(plugin.running().generation, 1);
    // Nothing changes: no status write, though conditions are looked at every second and the
    // counters may be written every second (statusInterval 1s).
    let writes = || {
        server
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/wispplugins/images/status") && r.method == "PATCH")
            .count()
    };
    let before = writes();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(writes(), before, "status written with nothing changed");
    assert!(before <= 3, "{before} writes to reach running");
    eprintln!("status writes from create to running: {before}");

    // Settings its init refuses: Degraded, the running version stays and keeps delivering.
    let mut bad = server
        .get(API_VERSION, "WispPlugin", Some("default"), "images")
        .unwrap();
    bad["spec"]["settings"] = json!({"requireLimits": false, "denyLatest": false});
    server.update(bad).unwrap();
    let s = until_status(&server, "images", "degraded at generation 2", |s| {
        s["observedGeneration"] == 2 && condition(s, "Degraded")["status"] == "True"
    })
    .await;
    assert_eq!(
        condition(&s, "Degraded")["reason"],
        "SettingsRefused",
        "{s}"
    );
    assert!(
        s["lastError"]
            .as_str()
            .unwrap()
            .contains("nothing to check"),
        "{s}"
    );
    assert_eq!(condition(&s, "ModuleReady")["status"], "False");
    assert_eq!(condition(&s, "Running")["status"], "True");
    let plugin = host.host.plugins.get("default/images").expect("still runs");
    assert_eq!(plugin.running().generation, 1, "the old version runs");
    let mut p = pod("default", "api");
    p["spec"]["containers"][0]["image"] = json!("redis:latest");
    server.create(p).unwrap();
    until_status(&server, "images", "the old version sees the new pod", |s| {
        s["counters"]["violations"] == 2
    })
    .await;

    server
        .delete(API_VERSION, "WispPlugin", Some("default"), "images")
        .unwrap();
    until("the plugin stopped", || {
        host.host.plugins.get("default/images").is_none()
    })
    .await;
    assert!(
        host.host.admin.services.verdicts.is_empty(),
        "its verdicts went with it"
    );
    host.stop().await;
}

/// A WispPlugin asking for another namespace, or for more than `maxLimits`, is refused, and its
/// status says why; nothing of it runs.
#[tokio::test]
async fn a_wisp_plugin_over_its_namespace_or_the_operators_caps_is_refused_in_its_status() {
    let server = server().await;
    let host = Host::start(&server, ", maxLimits: {memory: 32Mi}").await;
    server
        .create(wisp_plugin(
            "elsewhere",
            json!({"informers": [{"name": "pods", "apiVersion": "v1", "kind": "Pod",
                "namespaces": ["kube-system"]}], "limits": {"memory": "16Mi"}}),
        ))
        .unwrap();
    server
        .create(wisp_plugin(
            "greedy",
            json!({"limits": {"memory": "128Mi"}}),
        ))
        .unwrap();
    let s = until_status(&server, "elsewhere", "refused", |s| {
        condition(s, "Degraded")["status"] == "True"
    })
    .await;
    assert_eq!(condition(&s, "Degraded")["reason"], "NotAllowed", "{s}");
    let msg = condition(&s, "Degraded")["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        msg.contains("spec.informers[0].namespaces") && msg.contains("\"kube-system\""),
        "{msg}"
    );
    assert_eq!(condition(&s, "Running")["status"], "False");
    let s = until_status(&server, "greedy", "refused", |s| {
        condition(s, "Degraded")["status"] == "True"
    })
    .await;
    assert_eq!(condition(&s, "Degraded")["reason"], "OverCap", "{s}");
    assert!(
        s["lastError"]
            .as_str()
            .unwrap()
            .contains("spec.limits.memory: over customResources.maxLimits"),
        "{s}"
    );
    assert!(host.host.plugins.get("default/elsewhere").is_none());
    assert!(host.host.plugins.get("default/greedy").is_none());
    host.stop().await;
}

/// A ClusterWispPlugin sees every namespace; one named as a plugin of the config file is
/// refused, and says so, while the file's plugin runs on.
#[tokio::test]
async fn a_cluster_wisp_plugin_sees_every_namespace_and_a_name_clash_with_the_file_is_refused() {
    let server = server().await;
    let mut p = pod("shop", "cart");
    p["spec"]["containers"][0]["image"] = json!("redis:latest");
    server.create(p).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "source: kube\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod}}\n\
         plugins:\n  - {{name: images, module: {m}, informers: [pods], settings: {{requireLimits: false}}}}\n\
         customResources: {{enabled: true, statusInterval: 1s, {paths}}}\nadmin: {{listen: \"127.0.0.1:0\"}}\n",
        m = plugin_path("image_policy").display(),
        paths = module_paths(&[plugin_dir()])
    );
    let path = dir.path().join("wisp.yaml");
    std::fs::write(&path, config).unwrap();
    let (mut host, stop) =
        start_host(&Config::load(&path).unwrap(), server.client(), Some(path)).await;
    let cluster = |name: &str| {
        let mut p = wisp_plugin(name, json!({}));
        p["kind"] = json!("ClusterWispPlugin");
        p["metadata"].as_object_mut().unwrap().remove("namespace");
        p
    };
    server.create(cluster("images")).unwrap();
    server.create(cluster("all-images")).unwrap();
    let cstatus = |name: &str| {
        server
            .get(API_VERSION, "ClusterWispPlugin", None, name)
            .map(|o| o["status"].clone())
            .unwrap_or(Value::Null)
    };
    until("both statuses written", || {
        condition(&cstatus("images"), "Degraded")["status"] == "True"
            && cstatus("all-images")["counters"]["violations"] == 2
    })
    .await;
    let s = cstatus("images");
    assert_eq!(condition(&s, "Degraded")["reason"], "NameClash", "{s}");
    assert!(
        s["lastError"]
            .as_str()
            .unwrap()
            .contains("the config file defines a plugin named \"images\""),
        "{s}"
    );
    assert_eq!(s["plugin"], "images");
    let file_plugin = host.plugins.get("images").expect("the file's plugin runs");
    assert!(
        file_plugin
            .status()
            .counters
            .delivered
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 2
    );
    assert_eq!(
        condition(&cstatus("all-images"), "Running")["status"],
        "True"
    );
    let _ = stop.send(());
    host.finish(tokio::time::Instant::now() + Duration::from_secs(5))
        .await;
}

/// A standby reconciles nothing and writes no status; once it takes the Lease it runs the
/// plugin and writes.
#[tokio::test]
async fn a_standby_writes_no_status_until_it_leads() {
    let server = server().await;
    server
        .create(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "wisp", "namespace": "default"},
            "spec": {"holderIdentity": "other", "leaseDurationSeconds": 3600}}),
        )
        .unwrap();
    let host = Host::start(
        &server,
        "}\nsharding: {mode: leader, identity: a, leaseNamespace: default, leaseDuration: 2s, \
         renewDeadline: 1500ms, retryPeriod: 300ms",
    )
    .await;
    server.create(wisp_plugin("images", json!({}))).unwrap();
    let lease_reads = || {
        server
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/leases/wisp"))
            .count()
    };
    let seen = lease_reads();
    until("three more tries at the Lease", || {
        lease_reads() >= seen + 3
    })
    .await;
    assert!(!host.host.leadership.as_ref().unwrap().is_leader());
    let writes = |server: &TestApiServer| {
        server
            .requests()
            .iter()
            .filter(|r| r.path.contains("/wispplugins/") && r.method == "PATCH")
            .count()
    };
    assert_eq!(writes(&server), 0, "a standby writes no status");
    assert_eq!(status(&server, "images"), Value::Null);
    assert!(host.host.plugins.get("default/images").is_none());

    let mut lease = server
        .get("coordination.k8s.io/v1", "Lease", Some("default"), "wisp")
        .unwrap();
    lease["spec"]["holderIdentity"] = json!("");
    server.update(lease).unwrap();
    until_status(&server, "images", "running once leading", |s| {
        condition(s, "Running")["status"] == "True"
    })
    .await;
    host.stop().await;
}

/// The shipped example applied with kubectl (its module paths pointed at the built plugins);
/// `kubectl get wispplugins` prints the CRD's columns from the status the host wrote.
#[tokio::test]
async fn kubectl_applies_the_example_and_prints_the_columns_of_the_status() {
    let Some(program) = wisp_apiserver::test_support::kubectl() else {
        return;
    };
    let server = server().await;
    server
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}))
        .unwrap();
    let mut p = pod("shop", "cart");
    p["spec"]["containers"][0]["image"] = json!("redis:latest");
    server.create(p).unwrap();
    let host = Host::start(&server, "").await;
    let example = include_str!("../../../deploy/wispplugin-example.yaml")
        .replace(
            "/plugins/image_policy.wasm",
            &plugin_path("image_policy").display().to_string(),
        )
        .replace(
            "/plugins/inventory.wasm",
            &plugin_path("inventory").display().to_string(),
        );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("example.yaml");
    std::fs::write(&file, example).unwrap();
    let kubectl = wisp_apiserver::test_support::Kubectl::new(program, &server);
    kubectl.ok(&["apply", "-f", file.to_str().unwrap()]).await;
    let shop = |server: &TestApiServer| {
        server
            .get(API_VERSION, "WispPlugin", Some("shop"), "image-policy")
            .map(|o| o["status"].clone())
            .unwrap_or(Value::Null)
    };
    until("the example's status", || {
        let s = shop(&server);
        condition(&s, "Running")["status"] == "True" && s["counters"]["violations"] == 1
    })
    .await;
    let table = wisp_apiserver::test_support::rows(
        &kubectl.ok(&["get", "wispplugins", "-n", "shop"]).await,
    );
    assert_eq!(
        table[0],
        [
            "NAME",
            "MODULE",
            "RUNNING",
            "DEGRADED",
            "DELIVERED",
            "VIOLATIONS",
            "AGE"
        ]
    );
    assert_eq!(table[1][0], "image-policy");
    assert_eq!(table[1][2..4], ["True", "AsExpected"]);
    assert_eq!(table[1][5], "1");
    let cluster = wisp_apiserver::test_support::rows(&kubectl.ok(&["get", "cwp"]).await);
    assert_eq!(cluster[1][0], "inventory");
    host.stop().await;
}

/// A new generation that fails its probation is rolled back, and one that keeps failing is
/// quarantined: both say so in `Degraded`, and `Running` goes False once quarantined.
#[tokio::test]
async fn a_rolled_back_or_quarantined_plugin_is_degraded_with_the_reason() {
    let server = server().await;
    let host = Host::start(&server, "").await;
    let faults = |settings: Value, extra: Value| {
        let mut p = wisp_plugin("faults", extra);
        p["spec"]["module"] = json!(plugin_path("test_faults").display().to_string());
        p["spec"]["settings"] = settings;
        p
    };
    server
        .create(faults(json!({"mode": "ok"}), json!({})))
        .unwrap();
    until_status(&server, "faults", "running", |s| {
        condition(s, "Running")["status"] == "True"
    })
    .await;

    // Generation 2 traps on every object named bad-*: its probation of 2 fails, it goes back.
    let next = |settings: Value, extra: Value| {
        let mut cr = server
            .get(API_VERSION, "WispPlugin", Some("default"), "faults")
            .unwrap();
        let new = faults(settings, extra);
        cr["spec"] = new["spec"].clone();
        server.update(cr).unwrap();
    };
    next(
        json!({"mode": "trap", "namePrefix": "bad-"}),
        json!({"reload": {"probation": 2, "rollbackThreshold": 0.4}}),
    );
    until_status(&server, "faults", "generation 2 applied", |s| {
        s["observedGeneration"] == 2 && condition(s, "ModuleReady")["status"] == "True"
    })
    .await;
    for i in 0..2 {
        server.create(pod("default", &format!("bad-{i}"))).unwrap();
    }
    let s = until_status(&server, "faults", "rolled back", |s| {
        condition(s, "Degraded")["reason"] == "RolledBack"
    })
    .await;
    assert_eq!(condition(&s, "Running")["status"], "True", "{s}");

    // Generation 3 traps on every bad-* for good (no probation): quarantined after 2.
    next(
        json!({"mode": "trap", "namePrefix": "bad-"}),
        json!({"reload": {"probation": 0}, "onFailure": {"quarantineAfter": 2}}),
    );
    until_status(&server, "faults", "generation 3 applied", |s| {
        s["observedGeneration"] == 3 && condition(s, "Degraded")["status"] == "False"
    })
    .await;
    for i in 2..5 {
        server.create(pod("default", &format!("bad-{i}"))).unwrap();
    }
    let s = until_status(&server, "faults", "quarantined", |s| {
        condition(s, "Degraded")["reason"] == "Quarantined"
    })
    .await;
    assert_eq!(condition(&s, "Running")["status"], "False", "{s}");
    assert_eq!(condition(&s, "Running")["reason"], "Quarantined", "{s}");
    assert!(s["counters"]["failed"].as_u64().unwrap() >= 2, "{s}");
    host.stop().await;
}

/// An `oci://` module of a custom resource is pulled under the host's signature policy (a real
/// registry, signatures made by openssl): a signed one runs and its status names the reference
/// and the digest pulled; an unsigned one is refused, `SignatureRefused`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_module_is_pulled_under_the_signature_policy_and_an_unsigned_one_refused() {
    use crate::oci::{Registry, keypair, openssl_sign, tools};
    if !tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::start(&dir.path().join("reg"));
    let (key, public) = keypair(dir.path(), "good");
    let push = |tag: &str| {
        let r = reg.reference(&format!("acme/images:{tag}"));
        let s = reg.settings(&dir.path().join("push"));
        let m = std::fs::read(common::rig::variant(
            &plugin_path("image_policy"),
            tag,
            dir.path(),
        ))
        .unwrap();
        async move {
            wisp_host::oci::push::push(&s, &m, &r, None)
                .await
                .unwrap()
                .digest
        }
    };
    let signed = push("signed").await;
    openssl_sign(&reg, "acme/images", &signed, &signed, &key);
    push("unsigned").await;

    let server = server().await;
    let cache = dir.path().join("oci-cache").display().to_string();
    let host = Host::start(
        &server,
        &format!(
            "}}\noci: {{insecure: [\"{}\"], keys: [{}], cacheDir: {cache}",
            reg.host,
            public.display()
        ),
    )
    .await;
    let module = |tag: &str| json!(format!("oci://{}/acme/images:{tag}", reg.host));
    server
        .create(wisp_plugin("signed", json!({"module": module("signed")})))
        .unwrap();
    server
        .create(wisp_plugin(
            "unsigned",
            json!({"module": module("unsigned")}),
        ))
        .unwrap();
    let s = until_status(&server, "signed", "running", |s| {
        condition(s, "Running")["status"] == "True"
    })
    .await;
    assert_eq!(s["module"]["digest"], signed.as_str(), "{s}");
    assert_eq!(s["module"]["reference"], module("signed"), "{s}");
    let s = until_status(&server, "unsigned", "refused", |s| {
        condition(s, "Degraded")["status"] == "True"
    })
    .await;
    assert_eq!(
        condition(&s, "Degraded")["reason"],
        "SignatureRefused",
        "{s}"
    );
    assert!(
        s["lastError"].as_str().unwrap().contains("not signed"),
        "{s}"
    );
    assert!(host.host.plugins.get("default/unsigned").is_none());
    host.stop().await;
}

/// A generation that changes the informers restarts the plugin on new informers (checked first)
/// and stops the old ones: the pods a new label selector leaves out are no longer seen.
#[tokio::test]
async fn changed_informers_restart_the_plugin_on_new_informers_and_stop_the_old() {
    let server = server().await;
    let host = Host::start(&server, "").await;
    server.create(wisp_plugin("images", json!({}))).unwrap();
    until_status(&server, "images", "running with a violation", |s| {
        s["counters"]["violations"] == 1
    })
    .await;
    let first = host.host.plugins.get("default/images").unwrap();
    let watches = server.open_watches();
    let mut cr = server
        .get(API_VERSION, "WispPlugin", Some("default"), "images")
        .unwrap();
    cr["spec"]["informers"][0]["labelSelector"] = json!("app=none");
    server.update(cr).unwrap();
    let s = until_status(&server, "images", "generation 2 running", |s| {
        s["observedGeneration"] == 2
            && condition(s, "Running")["status"] == "True"
            && s["counters"]["violations"] == 0
    })
    .await;
    assert_eq!(condition(&s, "Degraded")["status"], "False", "{s}");
    let second = host.host.plugins.get("default/images").unwrap();
    assert!(!std::sync::Arc::ptr_eq(&first, &second), "a new plugin");
    assert_eq!(host.host.plugins.len(), 1);
    until("the new informer watches", || {
        server.requests().iter().any(|r| {
            r.verb == wisp_tests::Verb::Watch
                && r.query.get("labelSelector").map(String::as_str) == Some("app=none")
        })
    })
    .await;
    until(
        "the old informer's watch closed (one pods watch open)",
        || server.open_watches() == watches,
    )
    .await;
    host.stop().await;
}
