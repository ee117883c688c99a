//! Helpers shared by the informer integration tests.
#![allow(dead_code)]

pub mod churn;
pub mod http;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use wisp_host::informer::backoff::BackoffConfig;
use wisp_host::informer::handler::Delivery;
use wisp_host::informer::reflector::ReflectorConfig;
use wisp_host::informer::shared_informer::{InformerConfig, wait_for};
use wisp_host::informer::{Notification, SharedInformer};
use wisp_host::source::kube::KubeSource;
use wisp_tests::{RecordedRequest, TestApiServer, Verb};

/// Give-up bound for anything that should happen promptly, before [`patience`] scales it:
/// pass it through `patience(T)`.
pub const T: Duration = Duration::from_secs(30);

// Every test binary includes this module and each uses a different few of these.
#[allow(unused_imports)]
pub use wisp_apiserver::test_support::{in_ci, kubeconfig, patience, skip_unless_ci, time_scale};

/// The queue the informer suites run over: `WISP_TEST_QUEUE` names it as the config does
/// (`realFIFO`, the default; `realFIFONonAtomic`; `deltaFIFO`); `cargo xtask test` runs them
/// over each.
pub fn queue_under_test() -> wisp_host::informer::QueueKind {
    use wisp_host::informer::QueueKind;
    match std::env::var("WISP_TEST_QUEUE").as_deref() {
        Ok("deltaFIFO") => QueueKind::DeltaFifo,
        Ok("realFIFONonAtomic") => QueueKind::RealFifoNonAtomic,
        Ok("realFIFO") | Err(_) => QueueKind::RealFifo,
        Ok(other) => {
            panic!("WISP_TEST_QUEUE={other:?}: expected realFIFO, realFIFONonAtomic or deltaFIFO")
        }
    }
}

/// Informer settings with a short backoff so fault tests run quickly, over
/// [`queue_under_test`].
pub fn fast_config() -> InformerConfig {
    InformerConfig {
        queue: queue_under_test(),
        reflector: ReflectorConfig {
            backoff: BackoffConfig {
                initial: Duration::from_millis(20),
                max: Duration::from_millis(200),
                ..BackoffConfig::default()
            },
            // The tests drive the list path; streaming lists (the default) are tested with
            // their own settings.
            use_watch_list: false,
            ..ReflectorConfig::default()
        },
        ..InformerConfig::default()
    }
}

/// A pod informer on all namespaces of `server`, through a real `kube::Client` without retries.
pub fn pod_informer(server: &TestApiServer, config: InformerConfig) -> Arc<SharedInformer> {
    informer_of(server, "pods", "v1", "Pod", config)
}

/// An informer `name` on every object of `api_version` / `kind` of `server`, through a real
/// `kube::Client` without retries.
pub fn informer_of(
    server: &TestApiServer,
    name: &str,
    api_version: &str,
    kind: &str,
    config: InformerConfig,
) -> Arc<SharedInformer> {
    let source = KubeSource::new(server.client_no_retry(), api_version, kind, None);
    SharedInformer::new(name, Arc::new(source), config)
}

/// Keys (`namespace/name`) of the objects `deliveries` deleted with a tombstone (a deletion the
/// watch missed).
pub fn tombstone_keys(deliveries: &[Delivery]) -> std::collections::BTreeSet<String> {
    deliveries
        .iter()
        .filter_map(|d| match &d.notification {
            Notification::Delete { obj } if obj.is_tombstone() => {
                let m = obj.object().meta();
                Some(format!("{}/{}", m.namespace().unwrap_or(""), m.name()))
            }
            _ => None,
        })
        .collect()
}

/// Runs the informer in the background; dropping the sender stops it.
pub fn start(inf: &Arc<SharedInformer>) -> tokio::sync::oneshot::Sender<()> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(inf.clone().run(async {
        let _ = rx.await;
    }));
    tx
}

/// Makes a FIFO at `path` (for tests of what refuses one).
pub fn mkfifo(path: &std::path::Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo {}", path.display());
}

/// Waits for `cond` (panics with `what` after `patience(T)`).
pub async fn until(what: &str, cond: impl FnMut() -> bool) {
    until_within(what, T, cond).await;
}

/// Waits for `cond` (panics with `what` after `patience(limit)`).
pub async fn until_within(what: &str, limit: Duration, cond: impl FnMut() -> bool) {
    let limit = patience(limit);
    assert!(
        wait_for(limit, cond).await,
        "timed out ({limit:?}) waiting for: {what}"
    );
}

/// Waits until the informer has a watch open that has delivered at least one event (a bookmark
/// will do: the server should send them often). Closing a watch that lasted under a second with no
/// event is, as in client-go, a "very short watch" that relists; tests that close watches to test
/// a re-watch wait for this first.
pub async fn watching(server: &TestApiServer, inf: &SharedInformer) {
    let before = inf.stats().events;
    until("an open watch with an event", || {
        server.open_watches() == 1 && inf.stats().events > before
    })
    .await;
}

/// Takes the informer's watch down and keeps it down (re-watches refused with 429) while
/// `change` runs, compacts the history past those changes, then lets the watch come back: it
/// finds its resourceVersion expired and the informer relists. Returns what `change` returned.
pub async fn while_watch_down<R>(
    server: &TestApiServer,
    inf: &SharedInformer,
    change: impl FnOnce() -> R,
) -> R {
    watching(server, inf).await;
    server.faults().fail_next(Verb::Watch, 429, None, 1_000_000);
    server.close_watches();
    let out = change();
    server.compact();
    let watches = requests_of(server, Verb::Watch).len();
    until("a refused re-watch", || {
        requests_of(server, Verb::Watch).len() > watches
    })
    .await;
    server.faults().reset();
    out
}

/// A test server with `n` pods in `default`, sending bookmarks every 10 ms.
pub async fn server_with_pods(n: usize) -> TestApiServer {
    let server = TestApiServer::start()
        .await
        .expect("test API server starts");
    server.faults().bookmark_interval(Duration::from_millis(10));
    for i in 0..n {
        server
            .create(wisp_tests::pod("default", &format!("web-{i}")))
            .expect("create pod");
    }
    server
}

/// A test server with namespace `shop` (label team=payments, which the team-labeler example
/// reads) and `n` unlabelled pods in it.
pub async fn shop_server(n: usize) -> TestApiServer {
    let server = TestApiServer::start()
        .await
        .expect("test API server starts");
    server
        .create(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "shop", "labels": {"team": "payments"}}}))
        .expect("create namespace");
    for i in 0..n {
        server
            .create(wisp_tests::pod("shop", &format!("web-{i}")))
            .expect("create pod");
    }
    server
}

/// Requests of one verb.
pub fn requests_of(server: &TestApiServer, verb: Verb) -> Vec<RecordedRequest> {
    server
        .requests()
        .into_iter()
        .filter(|r| r.verb == verb)
        .collect()
}

/// First-page list requests (no continue token): one per list or relist.
pub fn lists(server: &TestApiServer) -> Vec<RecordedRequest> {
    requests_of(server, Verb::List)
        .into_iter()
        .filter(|r| !r.query.contains_key("continue"))
        .collect()
}

/// The resourceVersion a request asked for ("" when absent).
pub fn rv_of(r: &RecordedRequest) -> String {
    r.query.get("resourceVersion").cloned().unwrap_or_default()
}

/// The server's pods as key -> resourceVersion ([`wisp_tests::view::server_state`]).
pub fn server_state(server: &TestApiServer) -> BTreeMap<String, String> {
    wisp_tests::view::server_state(server)
}

/// The informer's cache as key -> resourceVersion.
pub fn cache_state(inf: &SharedInformer) -> BTreeMap<String, String> {
    inf.cache()
        .snapshot()
        .into_iter()
        .map(|(k, o)| (k, o.resource_version().to_owned()))
        .collect()
}

/// A pod with a changed annotation (a real update).
pub fn touched(mut pod: Value, n: u64) -> Value {
    pod["metadata"]["annotations"]["wisp.test/generation"] = Value::from(n.to_string());
    pod
}

/// Waits until replaying `rec`'s notifications gives `want` (failing at once on an inconsistent
/// history). The cache can equal the server before the listeners have been told: an atomic
/// relist replaces the cache first, then hands out the notifications.
pub async fn until_replayed(
    what: &str,
    rec: &wisp_host::informer::handler::Recorder,
    want: &BTreeMap<String, String>,
) {
    until(
        &format!("{what}: its history ends at the server's state"),
        || {
            let view = replay(&rec.deliveries())
                .unwrap_or_else(|e| panic!("{what}: inconsistent history: {e}"));
            &view == want
        },
    )
    .await;
}

/// Replays a listener's deliveries and checks they form a consistent history: sequence numbers
/// 1..=n, adds only of absent keys, updates and deletes only of present keys with the old state
/// equal to what the listener last saw (tombstones allowed to be stale). Returns the final view.
pub fn replay(deliveries: &[Delivery]) -> Result<BTreeMap<String, String>, String> {
    let mut view: BTreeMap<String, String> = BTreeMap::new();
    for (i, d) in deliveries.iter().enumerate() {
        if d.seq != i as u64 + 1 {
            return Err(format!(
                "delivery {i} has seq {} (expected {})",
                d.seq,
                i + 1
            ));
        }
        let key = |o: &wisp_host::informer::Object| {
            format!("{}/{}", o.meta().namespace().unwrap_or(""), o.meta().name())
        };
        match &d.notification {
            Notification::Add { obj, .. } => {
                if let Some(prev) = view.insert(key(obj), obj.resource_version().to_owned()) {
                    return Err(format!(
                        "seq {}: add of {} already present at rv {prev}",
                        d.seq,
                        key(obj)
                    ));
                }
            }
            Notification::Update { old, new } => {
                let k = key(new);
                match view.get(&k) {
                    Some(rv) if rv == old.resource_version() => {}
                    other => {
                        return Err(format!(
                            "seq {}: update of {k} from rv {} but view has {other:?}",
                            d.seq,
                            old.resource_version()
                        ));
                    }
                }
                view.insert(k, new.resource_version().to_owned());
            }
            Notification::Delete { obj } => {
                let k = key(obj.object());
                if view.remove(&k).is_none() {
                    return Err(format!("seq {}: delete of absent {k}", d.seq));
                }
            }
        }
    }
    Ok(view)
}

/// The informers a `wisp.yaml` text (`source: kube`) builds over `server`, as `wisp run`
/// builds them, through a real `kube::Client` without retries.
pub async fn informers_from_yaml(server: &TestApiServer, yaml: &str) -> Vec<Arc<SharedInformer>> {
    try_informers_from_yaml(server, yaml).await.unwrap()
}

/// [`informers_from_yaml`], the error as the host reports it.
pub async fn try_informers_from_yaml(
    server: &TestApiServer,
    yaml: &str,
) -> Result<Vec<Arc<SharedInformer>>, String> {
    let d = tempfile::tempdir().unwrap();
    let config = wisp_host::config::Config::parse(yaml, "wisp.yaml", d.path()).unwrap();
    let opts = wisp_host::app::RunOptions {
        client: Some(server.client_no_retry()),
        ..wisp_host::app::RunOptions::default()
    };
    let (informers, _, _) = wisp_host::app::build_informers(&config, &opts, None)
        .await
        .map_err(|e| format!("{e:#}"))?;
    Ok(informers)
}

/// Path of a compiled plugin (`plugins/dist/<name>.wasm`), building the plugins once if needed
/// (`cargo xtask test` builds them first and says where through `WISP_PLUGIN_DIR`).
pub fn plugin_path(name: &str) -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("repo root")
            .to_path_buf();
        if let Some(d) = std::env::var_os("WISP_PLUGIN_DIR") {
            return d.into();
        }
        let status =
            std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args(["xtask", "plugins"])
                .current_dir(&root)
                .status()
                .expect("run cargo xtask plugins");
        assert!(status.success(), "building the plugins failed");
        root.join("plugins").join("dist")
    });
    let p = dir.join(format!("{name}.wasm"));
    assert!(
        p.exists(),
        "{} is missing: run `cargo xtask plugins`",
        p.display()
    );
    p
}
pub mod rig;

/// Starts a host on `config` with `client` (and `config_path` for live reloads, when given), as
/// `wisp run` does; it runs until the returned sender is sent to or dropped.
pub async fn start_host(
    config: &wisp_host::config::Config,
    client: kube::Client,
    config_path: Option<std::path::PathBuf>,
) -> (wisp_host::app::Host, tokio::sync::oneshot::Sender<()>) {
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let opts = wisp_host::app::RunOptions {
        client: Some(client),
        config_path,
        ..wisp_host::app::RunOptions::default()
    };
    let host = wisp_host::app::start(config, &opts, async {
        let _ = rx.await;
    })
    .await
    .expect("the host starts");
    (host, stop)
}

/// Audit-log entries grouped by object name: the results of each, in order.
pub fn results_by_object(entries: &[serde_json::Value]) -> BTreeMap<String, Vec<String>> {
    let mut by_name: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in entries {
        by_name
            .entry(e["name"].as_str().unwrap().to_owned())
            .or_default()
            .push(e["result"].as_str().unwrap().to_owned());
    }
    by_name
}

/// The `wisp` binary next to this test's directory (`target/debug/wisp`), built when missing.
pub fn wisp_bin() -> std::path::PathBuf {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test's path");
        let profile = exe
            .parent()
            .and_then(std::path::Path::parent)
            .expect("target/<profile>");
        let bin = profile.join("wisp");
        if !bin.exists() {
            let status = std::process::Command::new(
                std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()),
            )
            .args(["build", "-p", "wisp-host", "--bin", "wisp"])
            .status()
            .expect("run cargo build");
            assert!(status.success(), "building the wisp binary failed");
        }
        bin
    })
    .clone()
}
