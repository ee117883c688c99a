//! The admin HTTP server over a real pod informer (test API server, real `kube::Client`) and the
//! compiled plugins, fetched with a plain HTTP/1.1 client over TCP.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;

use common::http::{Reply, get, scrape_openmetrics};
use common::rig::engine;
use common::*;
use serde_json::{Value, json};
use wisp_host::admin::{self, AdminState};
use wisp_host::informer::SharedInformer;
use wisp_host::plugin::status::PluginCounters;
use wisp_host::plugin::{
    FailurePolicy, OnFailure, PluginHandle, PluginManager, PluginSet, PluginSpec, PluginState,
};
use wisp_tests::{TestApiServer, pod};

/// A pod informer over a server holding `pods` pods, and a plugin manager on it.
struct Rig {
    server: TestApiServer,
    inf: Arc<SharedInformer>,
    manager: PluginManager,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Rig {
    /// Not running yet: [`Rig::run`] starts the informer.
    async fn new(pods: usize) -> Self {
        let server = server_with_pods(pods).await;
        let inf = pod_informer(&server, fast_config());
        let mut manager = PluginManager::new(engine());
        manager.add_informer(inf.clone());
        Self {
            server,
            inf,
            manager,
            stop: None,
        }
    }

    /// Runs the informer and waits for it to sync.
    async fn run(&mut self) {
        self.stop = Some(start(&self.inf));
        until("informer synced", || self.inf.has_synced()).await;
    }

    async fn running(pods: usize) -> Self {
        let mut r = Self::new(pods).await;
        r.run().await;
        r
    }

    fn plugin(&self, name: &str, module: &str, settings: Value) -> Arc<PluginHandle> {
        let mut s = PluginSpec::new(name, plugin_path(module), &["pods"]);
        s.settings = settings;
        self.start(s)
    }

    fn start(&self, spec: PluginSpec) -> Arc<PluginHandle> {
        Arc::new(self.manager.start(spec).unwrap())
    }

    fn state(&self, plugins: &[&Arc<PluginHandle>]) -> AdminState {
        AdminState {
            informers: vec![self.inf.clone()],
            plugins: PluginSet::new(plugins.iter().map(|p| (*p).clone()).collect()),
            ..AdminState::default()
        }
    }
}

fn delivered(h: &PluginHandle) -> u64 {
    PluginCounters::get(&h.status().counters.delivered)
}

/// A running admin server.
struct Admin {
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Admin {
    async fn start(state: AdminState) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(admin::serve(listener, state, async {
            let _ = rx.await;
        }));
        Self { addr, stop, task }
    }

    async fn get(&self, path: &str) -> Reply {
        get(self.addr, path).await
    }

    /// Signals shutdown and checks that `serve` returns cleanly.
    async fn stop(self) {
        self.stop.send(()).unwrap();
        let done = tokio::time::timeout(patience(T), self.task)
            .await
            .expect("serve returns after shutdown");
        done.unwrap().unwrap();
    }
}

#[tokio::test]
async fn healthz_answers_ok_unknown_paths_are_not_found_and_serve_returns_on_shutdown() {
    let admin = Admin::start(AdminState::default()).await;
    let r = admin.get("/healthz").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));
    let r = admin.get("/nope").await;
    assert_eq!(r.status, 404, "{r:?}");
    let r = admin.get("/metrics").await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8"),
        "a scrape that asks for nothing gets the Prometheus text"
    );
    assert!(!r.body.contains("# EOF"), "{}", r.body);
    let r = scrape_openmetrics(admin.addr).await;
    assert!(r.body.ends_with("# EOF\n"), "{}", r.body);
    admin.stop().await;
}

#[tokio::test]
async fn readyz_names_the_informer_and_the_plugin_until_they_sync_then_answers_ready() {
    let mut rig = Rig::new(3).await;
    let audit = rig.plugin("audit", "audit_log", json!({}));
    let admin = Admin::start(rig.state(&[&audit])).await;

    let r = admin.get("/readyz").await;
    assert_eq!(r.status, 503, "{r:?}");
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let lines: Vec<&str> = r.body.lines().collect();
    assert_eq!(
        lines,
        [
            "informer pods: not synced",
            "plugin audit: initial list not handled"
        ]
    );

    rig.run().await;
    until("plugin synced", || audit.has_synced()).await;
    let r = admin.get("/readyz").await;
    let rv = rig.inf.stats().last_sync_resource_version;
    assert!(!rv.is_empty());
    assert_eq!(
        (r.status, r.body.as_str()),
        (
            200,
            format!("ready\ninformer pods: synced, last resourceVersion {rv}\n").as_str()
        )
    );
    admin.stop().await;
}

#[tokio::test]
async fn metrics_report_cache_size_deliveries_latency_buckets_and_the_plugins_own_counters() {
    let rig = Rig::running(3).await;
    let audit = rig.plugin("audit", "audit_log", json!({}));
    until("3 delivered", || delivered(&audit) == 3).await;
    rig.server.create(pod("default", "late-1")).unwrap();
    until("4 delivered", || delivered(&audit) == 4).await;
    let admin = Admin::start(rig.state(&[&audit])).await;

    // The test API server sends a watch bookmark every second, which the informer's queue
    // holds as an item until its process loop takes it: scrape when the queue is empty (on a
    // busy machine the loop can be a while about it).
    let started = std::time::Instant::now();
    let r = loop {
        let r = scrape_openmetrics(admin.addr).await;
        if r.sample(r#"wisp_informer_queued_items{informer="pods"}"#) == Some(0.0)
            || started.elapsed() > patience(std::time::Duration::from_secs(10))
        {
            break r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let m = |series: &str| {
        r.sample(series)
            .unwrap_or_else(|| panic!("no {series} in\n{}", r.body))
    };
    assert_eq!(m(r#"wisp_informer_cache_size{informer="pods"}"#), 4.0);
    assert_eq!(m(r#"wisp_informer_synced{informer="pods"}"#), 1.0);
    assert_eq!(m(r#"wisp_informer_lists_total{informer="pods"}"#), 1.0);
    assert_eq!(m(r#"wisp_informer_relists_total{informer="pods"}"#), 0.0);
    assert_eq!(m(r#"wisp_informer_queued_items{informer="pods"}"#), 0.0);
    let rv: f64 = rig.inf.stats().last_sync_resource_version.parse().unwrap();
    assert_eq!(
        m(r#"wisp_informer_store_resource_version{informer="pods"}"#),
        rv
    );
    assert_eq!(m(r#"wisp_plugin_delivered_total{plugin="audit"}"#), 4.0);
    assert_eq!(m(r#"wisp_plugin_quarantined{plugin="audit"}"#), 0.0);
    assert_eq!(m(r#"wisp_plugin_queue_depth{plugin="audit"}"#), 0.0);
    let calls = PluginCounters::get(&audit.status().counters.calls) as f64;
    assert!(calls >= 1.0);
    assert_eq!(
        m(r#"wisp_plugin_handle_latency_seconds_bucket{le="+Inf",plugin="audit"}"#),
        calls
    );
    assert_eq!(
        m(r#"wisp_plugin_handle_latency_seconds_count{plugin="audit"}"#),
        calls
    );
    assert_eq!(
        m(r#"wisp_plugin_audit_events_total{event="added",informer="pods",plugin="audit"}"#),
        4.0
    );
    assert!(r.body.contains("# TYPE wisp_plugin_audit_events counter\n"));
    assert!(r.body.ends_with("# EOF\n"));
    admin.stop().await;
}

#[tokio::test]
async fn plugins_lists_a_running_plugin_with_its_hash_counters_queues_and_logs() {
    let rig = Rig::running(2).await;
    let audit = rig.plugin("audit", "audit_log", json!({}));
    until("2 delivered", || delivered(&audit) == 2).await;
    let admin = Admin::start(rig.state(&[&audit])).await;

    let r = admin.get("/plugins").await;
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    let v = r.json();
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 1);
    let p = &list[0];
    assert_eq!(p["name"], "audit");
    assert_eq!(p["pluginName"], "audit-log");
    assert_eq!(p["version"], audit.running().version.as_str());
    assert_eq!(p["module"], plugin_path("audit_log").display().to_string());
    assert_eq!(p["hash"], audit.report().hash.as_str());
    assert_eq!(p["hash"].as_str().unwrap().len(), 64);
    assert_eq!(p["abi"], "0.3.0", "the world its component targets");
    assert!(
        ["compiled", "disk-cache", "memory"].contains(&p["loadedFrom"].as_str().unwrap()),
        "{p}"
    );
    assert_eq!(
        p["tier"], "optimized",
        "a Rust plugin is compiled with Cranelift before it starts"
    );
    assert_eq!(p["state"], "running");
    assert_eq!(p["quarantineReason"], Value::Null);
    assert_eq!(p["lastError"], Value::Null);
    assert_eq!(p["synced"], true);
    assert_eq!(p["counters"]["delivered"], 2);
    assert_eq!(p["counters"]["failed"], 0);
    assert_eq!(p["counters"]["deadlineHits"], 0);
    assert_eq!(p["counters"]["queueDropped"], 0);
    assert_eq!(p["counters"]["queueCoalesced"], 0);
    let queues = p["queues"].as_array().unwrap();
    assert_eq!(queues.len(), 1, "{queues:?}");
    let mut q = queues[0].clone();
    let max_depth = q.as_object_mut().unwrap().remove("maxDepth").unwrap();
    assert!([1, 2].contains(&max_depth.as_u64().unwrap()), "{max_depth}");
    assert_eq!(
        q,
        json!({"informer": "pods", "depth": 0, "delivered": 2, "failed": 0, "queued": 2,
            "max": 100000, "overflow": "coalesce", "dropped": 0, "coalesced": 0,
            "bytes": 0, "maxBytes": 64 << 20, "oldestAgeSeconds": null})
    );
    let logs: Vec<&str> = p["recentLogs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert_eq!(logs.len(), 2, "{logs:#?}");
    assert!(
        logs[0].starts_with("info: ADDED v1 Pod default/web-"),
        "{logs:#?}"
    );
    admin.stop().await;
}

#[tokio::test]
async fn a_quarantined_plugin_is_listed_with_its_reason_and_does_not_hold_readiness_back() {
    let rig = Rig::running(0).await;
    let mut spec = PluginSpec::new("failing", plugin_path("test_faults"), &["pods"]);
    spec.settings = json!({"mode": "error"});
    spec.on_failure = OnFailure {
        policy: FailurePolicy::Skip,
        quarantine_after: 1,
    };
    let failing = rig.start(spec);
    let audit = rig.plugin("audit", "audit_log", json!({}));
    rig.server.create(pod("default", "web-1")).unwrap();
    until("quarantined", || {
        matches!(failing.state(), PluginState::Quarantined { .. })
    })
    .await;
    until("audit delivered", || delivered(&audit) == 1).await;
    let admin = Admin::start(rig.state(&[&failing, &audit])).await;

    let v = admin.get("/plugins").await.json();
    let p = &v[0];
    assert_eq!(p["name"], "failing");
    assert_eq!(p["state"], "quarantined");
    let reason = p["quarantineReason"].as_str().expect("a reason");
    assert!(!reason.is_empty());
    assert!(p["lastError"].is_string(), "{p}");
    assert_eq!(p["counters"]["failed"], 1);
    assert_eq!(v[1]["state"], "running");

    let r = admin.get("/readyz").await;
    assert_eq!(r.status, 200, "{r:?}");
    let lines: Vec<&str> = r.body.lines().collect();
    assert_eq!(lines[0], "ready");
    assert!(
        lines[1].starts_with("informer pods: synced, last resourceVersion "),
        "{lines:?}"
    );
    assert_eq!(
        lines[2], "plugin failing: quarantined (why: /plugins)",
        "{lines:?}"
    );
    assert_eq!(lines.len(), 3, "{lines:?}");

    let r = admin.get("/metrics").await;
    assert_eq!(
        r.sample(r#"wisp_plugin_quarantined{plugin="failing"}"#),
        Some(1.0)
    );
    assert_eq!(
        r.sample(r#"wisp_plugin_errors_total{plugin="failing"}"#),
        Some(1.0)
    );
    admin.stop().await;
}

/// The quarantine reason embeds the plugin's last error: text the plugin wrote, which can hold
/// what it read from its cache (a Secret's data; here an object name carrying a marker). The
/// open endpoints (`/healthz`, `/readyz`, `/metrics`) name the plugin and its state only, on the
/// metrics port and on the admin port; `/plugins`, behind the token, says why.
#[tokio::test]
async fn open_endpoints_carry_no_plugin_text_and_the_quarantine_reason_needs_the_token() {
    const MARKER: &str = "s3cret-7f1c2";
    let rig = Rig::running(0).await;
    let mut spec = PluginSpec::new("leaky", plugin_path("test_faults"), &["pods"]);
    spec.settings = json!({"mode": "error"});
    assert_eq!(
        spec.on_failure.quarantine_after, 20,
        "the default onFailure"
    );
    let leaky = rig.start(spec);
    for i in 0..20 {
        rig.server
            .create(pod("default", &format!("{MARKER}-{i}")))
            .unwrap();
    }
    until("quarantined", || {
        matches!(leaky.state(), PluginState::Quarantined { .. })
    })
    .await;
    let PluginState::Quarantined { reason } = leaky.state() else {
        unreachable!()
    };
    assert!(
        reason.contains(MARKER),
        "the reason holds plugin text: {reason}"
    );
    let state = rig.state(&[&leaky]);

    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_port = l.local_addr().unwrap();
    tokio::spawn(admin::serve_metrics(
        l,
        state.clone(),
        std::future::pending(),
    ));
    let d = tempfile::tempdir().unwrap();
    let token = d.path().join("token");
    std::fs::write(&token, "t0ken\n").unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_port = l.local_addr().unwrap();
    let auth = admin::AdminAuth {
        token_file: Some(token),
    };
    tokio::spawn(admin::serve_with_auth(
        l,
        state,
        auth,
        std::future::pending(),
    ));

    for addr in [metrics_port, admin_port] {
        for path in ["/healthz", "/readyz", "/metrics"] {
            let r = get(addr, path).await;
            assert!(r.status == 200, "{addr}{path}: {r:?}");
            assert!(!r.body.contains(MARKER), "{addr}{path}: {}", r.body);
        }
        let r = get(addr, "/readyz").await;
        assert!(
            r.body
                .lines()
                .any(|l| l == "plugin leaky: quarantined (why: /plugins)"),
            "{}",
            r.body
        );
        let r = get(addr, "/metrics").await;
        assert_eq!(
            r.sample(r#"wisp_plugin_quarantined{plugin="leaky"}"#),
            Some(1.0)
        );
    }
    assert_eq!(get(metrics_port, "/plugins").await.status, 404);
    let r = get(admin_port, "/plugins").await;
    assert_eq!(r.status, 401, "{r:?}");
    assert!(!r.body.contains(MARKER), "{}", r.body);
    let r = common::http::request(admin_port, "GET", "/plugins", Some("t0ken")).await;
    assert_eq!(r.status, 200, "{r:?}");
    let v: Value = r.json();
    assert!(
        v[0]["quarantineReason"].as_str().unwrap().contains(MARKER),
        "{v}"
    );
}
