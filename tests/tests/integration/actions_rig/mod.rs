//! The rig of the automation tests: the test API server, pods and namespaces informers, a plugin
//! manager whose actions go to the server through a real `kube::Client`, an audit log file, and
//! an admin server.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::rig::engine;
use crate::common::*;
use serde_json::{Value, json};
use wisp_host::actions::audit::AuditLog;
use wisp_host::actions::kube::KubeActionSink;
use wisp_host::actions::{ActionGrant, ActionVerb, HostServices};
use wisp_host::admin::{self, AdminState};
use wisp_host::informer::SharedInformer;
use wisp_host::plugin::{PluginHandle, PluginManager, PluginSet, PluginSpec};
use wisp_host::policy::VerdictFilter;
use wisp_tests::{TestApiServer, Verb, pod};

/// The audit log's refusal window in these tests (10 s in the host).
pub const REFUSAL_WINDOW: Duration = Duration::from_secs(1);

/// Pods and namespaces informers over a server, a plugin manager whose actions go to the server,
/// an audit log file, and an admin server.
pub struct Rig {
    pub server: TestApiServer,
    pub pods: Arc<SharedInformer>,
    pub manager: PluginManager,
    pub services: HostServices,
    pub audit_file: std::path::PathBuf,
    pub admin: std::net::SocketAddr,
    pub plugins: PluginSet,
    pub _dir: tempfile::TempDir,
    pub _stops: Vec<tokio::sync::oneshot::Sender<()>>,
}

pub fn namespace(name: &str, team: Option<&str>) -> Value {
    let mut ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    if let Some(t) = team {
        ns["metadata"]["labels"] = json!({ "team": t });
    }
    ns
}

pub fn pod_image(ns: &str, name: &str, image: &str) -> Value {
    let mut p = pod(ns, name);
    for c in p["spec"]["containers"].as_array_mut().unwrap() {
        c["image"] = json!(image);
    }
    p
}

impl Rig {
    pub async fn start(objects: Vec<Value>) -> Self {
        Self::start_with(objects, Duration::ZERO).await
    }

    /// With informers resyncing every `resync` (0: never).
    pub async fn start_with(objects: Vec<Value>, resync: Duration) -> Self {
        let server = TestApiServer::start().await.unwrap();
        for o in objects {
            server.create(o).unwrap();
        }
        let mut config = fast_config();
        config.default_resync = resync;
        let pods = pod_informer(&server, config.clone());
        let nss = informer_of(&server, "namespaces", "v1", "Namespace", config);
        let stops = vec![start(&pods), start(&nss)];
        until("informers synced", || pods.has_synced() && nss.has_synced()).await;
        let dir = tempfile::tempdir().unwrap();
        let audit_file = dir.path().join("audit.jsonl");
        let services = HostServices::with_sink(
            // Without kube's own retry layer, so the host's retries are what is tested.
            Arc::new(KubeActionSink::new(server.client_no_retry())),
            Arc::new(
                AuditLog::to_file(&audit_file)
                    .unwrap()
                    .with_refusal_window(REFUSAL_WINDOW),
            ),
        );
        let mut manager = PluginManager::new(engine());
        manager.set_services(services.clone());
        manager.add_informer(pods.clone());
        manager.add_informer(nss.clone());
        let plugins = PluginSet::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = listener.local_addr().unwrap();
        let state = AdminState {
            informers: vec![pods.clone(), nss],
            plugins: plugins.clone(),
            services: services.clone(),
            ..AdminState::default()
        };
        let (stop_admin, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(admin::serve(listener, state, async {
            let _ = rx.await;
        }));
        let mut stops = stops;
        stops.push(stop_admin);
        Rig {
            server,
            pods,
            manager,
            services,
            audit_file,
            admin,
            plugins,
            _dir: dir,
            _stops: stops,
        }
    }

    pub fn start_plugin(&self, spec: PluginSpec) -> Arc<PluginHandle> {
        let h = Arc::new(self.manager.start(spec).unwrap());
        self.plugins.push(h.clone());
        h
    }

    pub fn verdicts(&self, plugin: &str) -> Vec<(String, String, String)> {
        self.services
            .verdicts
            .list(&VerdictFilter {
                plugin: Some(plugin.into()),
                ..VerdictFilter::default()
            })
            .into_iter()
            .map(|v| (v.subject.key(), v.rule, v.severity.as_str().to_owned()))
            .collect()
    }

    pub fn writes(&self) -> Vec<wisp_tests::RecordedRequest> {
        self.server
            .requests()
            .into_iter()
            .filter(|r| r.verb == Verb::Other && r.method != "GET")
            .collect()
    }

    pub fn audit_lines(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit_file)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    pub fn server_label(&self, ns: &str, name: &str, key: &str) -> Option<String> {
        self.server
            .get("v1", "Pod", Some(ns), name)
            .and_then(|p| p["metadata"]["labels"][key].as_str().map(str::to_owned))
    }
}

pub fn spec(name: &str, module: &str, informers: &[&str], settings: Value) -> PluginSpec {
    let mut s = PluginSpec::new(name, plugin_path(module), informers);
    s.settings = settings;
    s
}

pub fn grant(
    verbs: &[ActionVerb],
    api_version: &str,
    kind: &str,
    ns: Option<&[&str]>,
) -> ActionGrant {
    ActionGrant {
        verbs: verbs.to_vec(),
        api_version: api_version.into(),
        kind: kind.into(),
        namespaces: ns.map(|l| l.iter().map(|s| (*s).to_owned()).collect()),
    }
}

/// test-faults in `actions` mode asks for `n` actions on the first sight of each matching object.
pub fn asker(n: u32, verb: &str) -> PluginSpec {
    spec(
        "asker",
        "test_faults",
        &["pods"],
        json!({"mode": "actions", "namePrefix": "ask-", "actions": n, "actionVerb": verb}),
    )
}

/// Whether nothing `h` asked for can still reach the server: it has handled every notification
/// it was given (it asks for nothing more until something changes), and each of the `accepted`
/// actions it was told were queued has been sent and answered (applied, or failed for good).
/// The server records a request when it arrives, before it answers: a write that was on its way
/// has been recorded, and a negative check of the server's requests needs no wait after this.
pub fn settled(h: &PluginHandle, accepted: u64) -> bool {
    use crate::common::rig::{counter, handled_all};
    handled_all(h)
        && counter(h, |c| &c.actions_applied) + counter(h, |c| &c.actions_failed) == accepted
}

pub fn answers(h: &PluginHandle) -> BTreeMap<&'static str, u64> {
    [
        "queued",
        "dry-run",
        "not-granted",
        "rate-limited",
        "invalid",
        "queue-full",
        "unavailable",
    ]
    .into_iter()
    .map(|k| {
        (
            k,
            h.status().guest_counter("action_total", &[("result", k)]),
        )
    })
    .filter(|(_, v)| *v > 0)
    .collect()
}
