//! The `wisp` binary as a user runs it: separate processes (never the library in this test's
//! runtime) against the test API server over TCP, through a kubeconfig file, signalled with
//! SIGTERM, SIGHUP and SIGKILL, with a cold module cache and a port already taken. Each test
//! asserts the bound a user relies on: takeover seconds, exit codes, audit lines, probe answers.
//!
//! A test binary of its own: the processes it starts take the machine's cores, and the timing
//! bounds are on them, not on a runtime shared with other tests.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::plugin_path;
use serde_json::Value;
use wisp_tests::TestApiServer;

/// The `wisp` binary next to this test's directory (`target/debug/wisp`), built when missing.
fn wisp_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test's path");
        let profile = exe
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>");
        let bin = profile.join("wisp");
        if !bin.exists() {
            let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args(["build", "-p", "wisp-host", "--bin", "wisp"])
                .status()
                .expect("run cargo build");
            assert!(status.success(), "building the wisp binary failed");
        }
        bin
    })
    .clone()
}

/// One `wisp run` process; its stderr is collected line by line. Killed when dropped.
struct Wisp {
    name: String,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    spawned: Instant,
}

impl Wisp {
    /// `wisp run --config <config> --grace <grace>` in `dir`, with `KUBECONFIG` at
    /// `dir/kubeconfig` and a module cache of its own under `dir`.
    fn run(name: &str, dir: &Path, config: &Path, grace: &str) -> Self {
        let mut c = Command::new(wisp_bin());
        c.args(["run", "--config"])
            .arg(config)
            .args(["--grace", grace])
            .current_dir(dir)
            .env("KUBECONFIG", dir.join("kubeconfig"))
            .env("RUST_LOG", "info")
            .env("XDG_CACHE_HOME", dir.join("cache"))
            .env_remove("POD_NAME")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let spawned = Instant::now();
        let mut child = c.spawn().expect("start wisp");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (stderr, lines) = (child.stderr.take().unwrap(), log.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        Self {
            name: name.to_owned(),
            child,
            log,
            spawned,
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Sends `signal` (`TERM`, `HUP`, `KILL`) with kill(1).
    fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -{signal} {}", self.name);
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }

    /// Waits up to `timeout` for the process to exit.
    async fn exited(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + timeout;
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return Some(s);
            }
            if Instant::now() >= end {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until the log has a line containing `needle`; panics after `timeout` with the log.
    async fn logged(&mut self, needle: &str, timeout: Duration) -> String {
        let end = Instant::now() + timeout;
        loop {
            if let Some(l) = self.log.lock().unwrap().iter().find(|l| l.contains(needle)) {
                return l.clone();
            }
            let running = self.running();
            assert!(
                Instant::now() < end && running,
                "{}: no line with {needle:?} (running: {running}):\n{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The admin server's address, from its "listening" line.
    async fn admin(&mut self) -> SocketAddr {
        let line = self
            .logged("admin server listening", Duration::from_secs(60))
            .await;
        let addr = line
            .split("addr=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .unwrap_or_else(|| panic!("no addr in {line:?}"));
        addr.parse().unwrap()
    }
}

impl Drop for Wisp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- log of {} ---\n{}", self.name, self.log());
        }
    }
}

/// `GET path` on `addr`: status and body, or `None` when nothing answers.
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut raw))
        .await
        .ok()?
        .ok()?;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_owned()))
}

/// Polls `cond` every 20 ms until it holds; panics with `what` after `timeout` (a `Wisp`
/// prints its log as the test panics). Returns how long it took.
async fn until<F, Fut>(what: &str, timeout: Duration, mut cond: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !cond().await {
        assert!(
            start.elapsed() < timeout,
            "timed out ({timeout:?}) waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

/// Whether `admin`'s `/metrics` has the sample line `line`, exactly.
async fn has_metric(admin: SocketAddr, line: &str) -> bool {
    let (_, metrics) = get(admin, "/metrics").await.unwrap_or_default();
    metrics.lines().any(|l| l == line)
}

/// The Lease's holder, as the server has it.
fn holder(server: &TestApiServer) -> Option<String> {
    server
        .get("coordination.k8s.io/v1", "Lease", Some("default"), "wisp")?
        .pointer("/spec/holderIdentity")?
        .as_str()
        .map(str::to_owned)
}

/// Every line of an audit file, parsed: a torn line fails the test.
fn audit_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("torn audit line {l:?}: {e}")))
        .collect()
}

/// Lists of pods the server answered: plain lists, and streaming lists (watches that send
/// the initial events).
fn pod_lists(server: &TestApiServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.path == "/api/v1/pods" && !r.query.contains_key("continue"))
        .filter(|r| {
            r.verb == wisp_tests::Verb::List
                || r.query
                    .get("sendInitialEvents")
                    .is_some_and(|v| v == "true")
        })
        .count()
}

const LABELER: &str = r#"  - name: labeler
    module: {module}
    informers: [pods, namespaces]
    actions:
      grants: [{verbs: [patch], apiVersion: v1, kind: Pod, namespaces: [shop]}]
      rateLimit: {perSecond: 1000, burst: 1000}"#;

/// A `kube` source config with the team labeler; `extra` is appended.
fn labeler_config(dir: &Path, file: &str, extra: &str) -> PathBuf {
    let config = format!(
        "source: kube\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod}}\n  \
         - {{name: namespaces, apiVersion: v1, kind: Namespace}}\nplugins:\n{}\n\
         admin: {{listen: \"127.0.0.1:0\"}}\n{extra}",
        LABELER.replace(
            "{module}",
            &plugin_path("team_labeler").display().to_string()
        ),
    );
    let path = dir.join(file);
    std::fs::write(&path, config).unwrap();
    path
}

/// client-go's default timings, as docs/scale-out.md ships them.
const RETRY_PERIOD: Duration = Duration::from_secs(2);

fn leader_config(dir: &Path, identity: &str) -> PathBuf {
    labeler_config(
        dir,
        &format!("wisp-{identity}.yaml"),
        &format!(
            "audit: {{file: audit-{identity}.jsonl}}\nsharding:\n  mode: leader\n  \
             leaseName: wisp\n  leaseNamespace: default\n  identity: {identity}\n  \
             leaseDuration: 15s\n  renewDeadline: 10s\n  retryPeriod: 2s\n"
        ),
    )
}

/// Two leader-mode replicas: SIGHUP to the standby leaves it running and standing by; SIGTERM
/// to the leader releases the Lease before the process exits, and the standby leads within
/// `retryPeriod` + 1 s of the signal (not after the 15 s lease duration).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_survives_sighup_and_leads_within_a_retry_period_of_the_leaders_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::shop_server(2).await;
    common::kubeconfig(dir.path(), &server);
    let mut a = Wisp::run("a", dir.path(), &leader_config(dir.path(), "a"), "10s");
    until("a holds the Lease", Duration::from_secs(60), || async {
        holder(&server).as_deref() == Some("a")
    })
    .await;
    let mut b = Wisp::run("b", dir.path(), &leader_config(dir.path(), "b"), "10s");
    let b_admin = b.admin().await;
    b.logged("standing by for the Lease", Duration::from_secs(60))
        .await;
    let standby = || async {
        let (_, body) = get(b_admin, "/readyz").await.unwrap_or_default();
        body.contains("standby: this replica does not lead (a does)")
    };
    until("b sees a lead", Duration::from_secs(30), standby).await;

    b.signal("HUP");
    b.logged(
        "SIGHUP: reload refused: this replica stands by",
        Duration::from_secs(10),
    )
    .await;
    assert!(b.running(), "SIGHUP killed the standby:\n{}", b.log());
    assert!(standby().await, "b still stands by after SIGHUP");
    assert_eq!(holder(&server).as_deref(), Some("a"));

    let term = Instant::now();
    a.signal("TERM");
    let took = until("b holds the Lease", Duration::from_secs(30), || async {
        holder(&server).as_deref() == Some("b")
    })
    .await;
    eprintln!("takeover: b holds the Lease {took:?} after a's SIGTERM");
    assert!(
        took <= RETRY_PERIOD + Duration::from_secs(1),
        "b took {took:?} to lead (bound: retryPeriod + 1 s)\n--- a ---\n{}\n--- b ---\n{}",
        a.log(),
        b.log()
    );
    let status = a.exited(Duration::from_secs(12)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "a exits 0 within its grace: {status:?}\n{}",
        a.log()
    );
    eprintln!("a exited {:?} after its SIGTERM", term.elapsed());
    assert!(a.log().contains("released the Lease"), "{}", a.log());
    b.logged("leading", Duration::from_secs(5)).await;
    until("b labels the pods", Duration::from_secs(30), || async {
        server
            .objects("v1", "Pod")
            .iter()
            .all(|p| p.pointer("/metadata/labels/team").is_some())
    })
    .await;
    b.signal("TERM");
    assert!(
        b.exited(Duration::from_secs(12))
            .await
            .is_some_and(|s| s.success())
    );
}

/// SIGTERM while a slow server holds queued actions: the process exits within its grace
/// period (plus the handover's bound), exit code 0, and every action the plugin asked for is
/// in the audit file exactly once: applied, or not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_a_slow_server_audits_every_accepted_action_once_and_exits_in_grace() {
    const PODS: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let server = common::shop_server(PODS).await;
    common::kubeconfig(dir.path(), &server);
    let config = labeler_config(dir.path(), "wisp.yaml", "audit: {file: audit.jsonl}\n");
    // Every answer takes 300 ms: the 12 patches queue up behind each other.
    server.faults().slow(Duration::from_millis(300));
    let mut w = Wisp::run("slow", dir.path(), &config, "1200ms");
    let admin = w.admin().await;
    let asked = format!("wisp_plugin_labelled_total{{plugin=\"labeler\"}} {PODS}");
    until(
        "the plugin asked for every patch",
        Duration::from_secs(60),
        || has_metric(admin, &asked),
    )
    .await;
    let term = Instant::now();
    w.signal("TERM");
    let status = w.exited(Duration::from_secs(10)).await;
    let took = term.elapsed();
    eprintln!("exited {took:?} after SIGTERM (grace 1.2 s)");
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        w.log()
    );
    assert!(
        took < Duration::from_millis(1200) + Duration::from_secs(2),
        "{took:?}"
    );

    let entries: Vec<Value> = audit_lines(&dir.path().join("audit.jsonl"))
        .into_iter()
        .filter(|e| e["plugin"] == "labeler")
        .collect();
    let by_pod = common::results_by_object(&entries);
    assert_eq!(by_pod.len(), PODS, "{entries:#?}");
    for (pod, results) in &by_pod {
        assert!(
            results.len() == 1 && ["applied", "not-sent"].contains(&results[0].as_str()),
            "{pod}: {results:?}"
        );
    }
    let not_sent = by_pod.values().filter(|r| r[0] == "not-sent").count();
    assert!(
        not_sent >= 1,
        "300 ms a patch cannot send 12 in 1.2 s: {by_pod:#?}"
    );
    assert!(
        w.log().contains(&format!("not_sent={not_sent}")),
        "the shutdown names what was not sent:\n{}",
        w.log()
    );
}

/// A cold module cache with a Python and a JavaScript plugin: `/healthz` answers within 2 s
/// of the start while the modules compile, `/readyz` names each plugin compiling, then the
/// host is ready. Prints the timeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_start_answers_health_at_once_and_names_the_plugins_compiling() {
    let (py, js) = (plugin_path("audit-log-py"), plugin_path("audit-log-js"));
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster");
    std::fs::create_dir(&cluster).unwrap();
    std::fs::write(
        cluster.join("pod.yaml"),
        serde_json::to_string(&wisp_tests::pod("shop", "web-0")).unwrap(),
    )
    .unwrap();
    let config = dir.path().join("wisp.yaml");
    std::fs::write(
        &config,
        format!(
            "source: dir:cluster\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod}}\n\
             plugins:\n  - {{name: audit-py, module: {}, informers: [pods]}}\n  \
             - {{name: audit-js, module: {}, informers: [pods]}}\n\
             executor: {{workers: 2}}\nengine: {{cacheDir: modules}}\n\
             admin: {{listen: \"127.0.0.1:0\"}}\n",
            py.display(),
            js.display()
        ),
    )
    .unwrap();
    let mut w = Wisp::run("cold", dir.path(), &config, "5s");
    let admin = w.admin().await;
    let mut healthy = None;
    while healthy.is_none() {
        if let Some((200, _)) = get(admin, "/healthz").await {
            healthy = Some(w.spawned.elapsed());
        }
        assert!(w.spawned.elapsed() < Duration::from_secs(10), "no /healthz");
    }
    let healthy = healthy.unwrap();
    let (code, body) = get(admin, "/readyz").await.expect("/readyz answers");
    eprintln!("cold start: /healthz 200 at {healthy:?}; /readyz {code}: {body}");
    assert!(
        healthy <= Duration::from_secs(2),
        "/healthz first answered at {healthy:?}"
    );
    assert_eq!(code, 503, "{body}");
    // Two workers: both compile at once.
    for p in ["audit-py", "audit-js"] {
        assert!(
            body.contains(&format!("plugin {p}: compiling"))
                || body.contains(&format!("plugin {p}: waiting to compile")),
            "{body}"
        );
    }
    let compiling = || async {
        let (_, body) = get(admin, "/readyz").await.unwrap_or_default();
        ["audit-py", "audit-js"]
            .iter()
            .all(|p| body.contains(&format!("plugin {p}: compiling")))
    };
    until("both compiling at once", Duration::from_secs(10), compiling).await;
    let ready = loop {
        if let Some((200, _)) = get(admin, "/readyz").await {
            break w.spawned.elapsed();
        }
        assert!(
            w.spawned.elapsed() < Duration::from_secs(300) && w.running(),
            "never ready:\n{}",
            w.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for line in w.log().lines().filter(|l| l.contains("checked")) {
        eprintln!("cold start: {line}");
    }
    eprintln!("cold start: ready at {ready:?}");
    w.signal("TERM");
    assert!(
        w.exited(Duration::from_secs(10))
            .await
            .is_some_and(|s| s.success())
    );
}

/// A port already in use fails the start at once: exit code 1, one error line naming the
/// config field and the address, and nothing started before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_in_use_fails_the_start_with_one_error_naming_the_field() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("cluster")).unwrap();
    for (field, admin) in [
        ("admin.listen", format!("{{listen: \"{addr}\"}}")),
        (
            "admin.metricsAddress",
            format!("{{listen: \"127.0.0.1:0\", metricsAddress: \"{addr}\"}}"),
        ),
    ] {
        let config = dir.path().join("wisp.yaml");
        std::fs::write(
            &config,
            format!(
                "source: dir:cluster\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod}}\n\
                 admin: {admin}\n"
            ),
        )
        .unwrap();
        let mut w = Wisp::run("port", dir.path(), &config, "5s");
        let status = w.exited(Duration::from_secs(20)).await.expect("it exits");
        // The stderr reader may lag the exit by a moment.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let log = w.log();
        assert_eq!(status.code(), Some(1), "{log}");
        let errors: Vec<&str> = log.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(errors.len(), 1, "{log}");
        assert!(
            errors[0].contains(&format!("wisp.yaml: {field} {addr}: cannot listen"))
                && errors[0].contains("in use"),
            "{}",
            errors[0]
        );
        assert!(
            !log.contains("executor started"),
            "started before binding:\n{log}"
        );
    }
    drop(taken);
}

/// `kill -9` while actions are being audited, then a restart: the audit file has no torn line,
/// the new process lists again and its cache holds what the server has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_run_leaves_no_torn_audit_line_and_a_restart_lists_again() {
    const PODS: usize = 30;
    let dir = tempfile::tempdir().unwrap();
    let server = common::shop_server(PODS).await;
    common::kubeconfig(dir.path(), &server);
    let audit = dir.path().join("audit.jsonl");
    let config = labeler_config(dir.path(), "wisp.yaml", "audit: {file: audit.jsonl}\n");
    server.faults().slow(Duration::from_millis(20));
    let mut w = Wisp::run("first", dir.path(), &config, "5s");
    until("some actions audited", Duration::from_secs(60), || async {
        audit_lines(&audit).len() >= 3
    })
    .await;
    w.signal("KILL");
    let status = w.exited(Duration::from_secs(5)).await.expect("killed");
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    let after_kill = audit_lines(&audit).len();
    assert!(after_kill >= 3);
    server.faults().slow(Duration::ZERO);

    let lists_before = pod_lists(&server);
    server
        .create(wisp_tests::pod("shop", "after-restart"))
        .unwrap();
    let mut w = Wisp::run("second", dir.path(), &config, "5s");
    let admin = w.admin().await;
    let pods = server.objects("v1", "Pod").len();
    let cached = format!("wisp_informer_cache_size{{informer=\"pods\"}} {pods}");
    until(
        "the cache holds the server's pods",
        Duration::from_secs(60),
        || has_metric(admin, &cached),
    )
    .await;
    assert!(pod_lists(&server) > lists_before, "the restart lists again");
    until("every pod labelled", Duration::from_secs(60), || async {
        server
            .objects("v1", "Pod")
            .iter()
            .all(|p| p.pointer("/metadata/labels/team").is_some())
    })
    .await;
    w.signal("TERM");
    assert!(
        w.exited(Duration::from_secs(10))
            .await
            .is_some_and(|s| s.success())
    );
    let lines = audit_lines(&audit);
    assert!(lines.len() > after_kill, "the restart audits on");
}

/// A compile is bounded by `engine.compileTimeout`: at start, a module over it refuses the
/// start naming the field; written over a running plugin's module, it is refused and the
/// running version goes on (a Python component takes far longer than 3 s to compile in a
/// debug host; the Rust one well under).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_compiling_past_compile_timeout_is_refused_and_the_running_one_stays() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("cluster")).unwrap();
    std::fs::write(
        dir.path().join("cluster/pod.yaml"),
        serde_json::to_string(&wisp_tests::pod("shop", "web-0")).unwrap(),
    )
    .unwrap();
    let module = dir.path().join("plugin.wasm");
    let config = |timeout: &str| {
        let path = dir.path().join("wisp.yaml");
        std::fs::write(
            &path,
            format!(
                "source: dir:cluster\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod}}\n\
                 plugins:\n  - {{name: audit, module: plugin.wasm, informers: [pods]}}\n\
                 engine: {{cacheDir: modules, compileTimeout: {timeout}}}\n\
                 admin: {{listen: \"127.0.0.1:0\"}}\n"
            ),
        )
        .unwrap();
        path
    };
    let python = plugin_path("audit-log-py");

    std::fs::copy(&python, &module).unwrap();
    let mut w = Wisp::run("refused", dir.path(), &config("50ms"), "5s");
    let status = w.exited(Duration::from_secs(30)).await.expect("it exits");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(status.code(), Some(1), "{}", w.log());
    assert!(
        w.log()
            .contains("compiling took longer than engine.compileTimeout (50ms); refused"),
        "{}",
        w.log()
    );

    std::fs::copy(plugin_path("audit_log"), &module).unwrap();
    let mut w = Wisp::run("running", dir.path(), &config("3s"), "5s");
    let admin = w.admin().await;
    let delivered = "wisp_plugin_delivered_total{plugin=\"audit\"} 1";
    let metrics = || async { get(admin, "/metrics").await.unwrap_or_default().1 };
    until("the first pod delivered", Duration::from_secs(60), || {
        has_metric(admin, delivered)
    })
    .await;
    // Written over the running plugin's module: the watch reloads it, the compile runs out.
    std::fs::copy(&python, dir.path().join("next.wasm")).unwrap();
    std::fs::rename(dir.path().join("next.wasm"), &module).unwrap();
    w.logged(
        "engine.compileTimeout (3s); refused",
        Duration::from_secs(60),
    )
    .await;
    let m = metrics().await;
    assert!(
        m.lines().any(
            |l| l.starts_with("wisp_plugin_reload_failures_total{plugin=\"audit\"} ")
                && !l.ends_with(" 0")
        ),
        "{m}"
    );
    assert!(
        m.lines()
            .any(|l| l == "wisp_plugin_quarantined{plugin=\"audit\"} 0"),
        "{m}"
    );
    // The running version still delivers.
    std::fs::write(
        dir.path().join("cluster/pod-1.yaml"),
        serde_json::to_string(&wisp_tests::pod("shop", "web-1")).unwrap(),
    )
    .unwrap();
    let delivered = "wisp_plugin_delivered_total{plugin=\"audit\"} 2";
    until(
        "the running version delivers",
        Duration::from_secs(30),
        || has_metric(admin, delivered),
    )
    .await;
    w.signal("TERM");
    assert!(
        w.exited(Duration::from_secs(10))
            .await
            .is_some_and(|s| s.success())
    );
}

/// The pids of `pid`'s child processes (from each process's `PPid` in /proc).
fn children(pid: u32) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    procs
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/status")).is_ok_and(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("PPid:"))
                    .is_some_and(|v| v.trim() == pid.to_string())
            })
        })
        .collect()
}

/// A process's peak resident memory (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap();
    kb << 10
}

/// Writes `bytes` over `path` as an editor or a deploy would: a new file renamed into place.
fn replace(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("next");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// A bomb that compiles slowly in little memory: 4,000 functions of 200 locals in 40 loops,
/// 7.5 MB (the debug host compiles ~25 of them a second on two cores, growing ~3 MB a second).
fn slow_bomb() -> Vec<u8> {
    common::rig::compile_bomb(4000, 200, 40)
}

/// The issue's bomb: one function of 3,000 locals in 5,000 loops (over 1 GiB to compile).
fn big_bomb() -> Vec<u8> {
    common::rig::compile_bomb(1, 3000, 5000)
}

/// Issue 32, hole 1: a compile bomb written over a running plugin's module (hot reload). The
/// host compiles in a child process, killed at the first bound it passes: the slow bomb at
/// `engine.compileTimeout`, the large one at `engine.compileMemory`. Each is refused naming the
/// bound, the running version goes on delivering, another plugin's reload completes while the
/// bomb compiles, no compile process is left, and the host's own peak memory stays small (the
/// issue's host was OOM-killed at 384 MiB; another plugin's reload waited 19 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compile_bomb_over_a_running_plugin_is_refused_at_its_bound_and_holds_up_no_other_reload()
{
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("cluster")).unwrap();
    let pod = |name: &str| {
        std::fs::write(
            dir.path().join(format!("cluster/{name}.yaml")),
            serde_json::to_string(&wisp_tests::pod("shop", name)).unwrap(),
        )
        .unwrap();
    };
    pod("web-0");
    let (a, b) = (dir.path().join("a.wasm"), dir.path().join("b.wasm"));
    std::fs::copy(plugin_path("audit_log"), &a).unwrap();
    std::fs::copy(plugin_path("audit_log"), &b).unwrap();
    let config = dir.path().join("wisp.yaml");
    std::fs::write(
        &config,
        "source: dir:cluster\ninformers:\n  - {name: pods, apiVersion: v1, kind: Pod}\n\
         plugins:\n  - {name: audit, module: a.wasm, informers: [pods]}\n  \
         - {name: other, module: b.wasm, informers: [pods]}\n\
         engine: {cacheDir: modules, compileTimeout: 15s, compileMemory: 512Mi}\n\
         executor: {workers: 2}\nadmin: {listen: \"127.0.0.1:0\"}\n",
    )
    .unwrap();
    let mut w = Wisp::run("bombed", dir.path(), &config, "5s");
    let admin = w.admin().await;
    let pid = w.child.id();
    for p in ["audit", "other"] {
        let line = format!("wisp_plugin_delivered_total{{plugin=\"{p}\"}} 1");
        until("the first pod delivered", Duration::from_secs(60), || {
            has_metric(admin, &line)
        })
        .await;
    }

    // The slow bomb: the compile runs in a child, killed at the timeout.
    replace(&a, &slow_bomb());
    let began = Instant::now();
    until(
        "a compile process runs",
        Duration::from_secs(10),
        || async { !children(pid).is_empty() },
    )
    .await;
    // It is the kernel's first choice in an OOM, and runs at nice 10 (set between its fork and
    // its exec: looked at once it runs `wisp __compile`).
    until(
        "the compile at nice 10, OOM score 1000",
        Duration::from_secs(5),
        || async {
            children(pid).iter().all(|c| {
                let read =
                    |f: &str| std::fs::read_to_string(format!("/proc/{c}/{f}")).unwrap_or_default();
                let stat = read("stat");
                let nice = stat
                    .rsplit(')')
                    .next()
                    .and_then(|s| s.split_whitespace().nth(16));
                read("oom_score_adj").trim() == "1000" && nice == Some("10")
            })
        },
    )
    .await;
    // Meanwhile a new version of the other plugin: its reload does not wait for the bomb.
    let next = common::rig::variant(&plugin_path("audit_log"), "next", dir.path());
    replace(&b, &std::fs::read(next).unwrap());
    let reloaded = "wisp_plugin_reloads_total{plugin=\"other\"} 1";
    let other = until("the other plugin reloaded", Duration::from_secs(12), || {
        has_metric(admin, reloaded)
    })
    .await;
    let timeout = "compiling took longer than engine.compileTimeout (15s); refused";
    assert!(
        !w.log().contains(timeout) && !children(pid).is_empty(),
        "the other plugin's reload waited for the bomb's compile:\n{}",
        w.log()
    );
    w.logged(timeout, Duration::from_secs(40)).await;
    let took = began.elapsed();
    assert!(
        took >= Duration::from_secs(15) && took < Duration::from_secs(25),
        "refused after {took:?}"
    );
    eprintln!("slow bomb refused after {took:?}; the other plugin reloaded in {other:?} meanwhile");
    until(
        "no compile process left",
        Duration::from_secs(5),
        || async { children(pid).is_empty() },
    )
    .await;

    // The large bomb: its child runs out of its address space.
    replace(&a, &big_bomb());
    let began = Instant::now();
    w.logged(
        "compiling needed more memory than engine.compileMemory (512 MiB); refused",
        Duration::from_secs(40),
    )
    .await;
    let took = began.elapsed();
    assert!(took < Duration::from_secs(15), "{took:?}");
    eprintln!("large bomb refused after {took:?}");
    assert!(children(pid).is_empty(), "a compile process is left");

    // The running version of each plugin still delivers, and neither is quarantined.
    pod("web-1");
    for (p, n) in [("audit", 2), ("other", 2)] {
        let line = format!("wisp_plugin_delivered_total{{plugin=\"{p}\"}} {n}");
        until(
            "the running version delivers",
            Duration::from_secs(30),
            || has_metric(admin, &line),
        )
        .await;
    }
    let (_, m) = get(admin, "/metrics").await.unwrap();
    assert!(
        m.lines()
            .any(|l| l == "wisp_plugin_reload_failures_total{plugin=\"audit\"} 2"),
        "{m}"
    );
    assert!(
        m.lines()
            .any(|l| l == "wisp_plugin_quarantined{plugin=\"audit\"} 0"),
        "{m}"
    );
    let peak = peak_rss(pid);
    eprintln!("the host peaked at {} MiB", peak >> 20);
    assert!(peak < HOST_PEAK, "the host peaked at {} MiB", peak >> 20);
    w.signal("TERM");
    assert!(
        w.exited(Duration::from_secs(10))
            .await
            .is_some_and(|s| s.success())
    );
}

/// The host's own peak resident memory through the bombs (a debug build; what compiles is in
/// its children).
const HOST_PEAK: u64 = 128 << 20;

/// `wisp check` of a compile bomb fails at the bound given (`--compile-timeout`,
/// `--compile-memory`), naming it, within the timeout plus a little.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wisp_check_refuses_a_compile_bomb_at_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let check = |module: &str, bytes: Vec<u8>, bounds: &[&str]| {
        let path = dir.path().join(module);
        std::fs::write(&path, bytes).unwrap();
        let began = Instant::now();
        let out = Command::new(wisp_bin())
            .arg("check")
            .arg(&path)
            .args(bounds)
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        (began.elapsed(), stderr)
    };
    let (took, e) = check(
        "slow.wasm",
        slow_bomb(),
        &["--compile-timeout", "3s", "--compile-memory", "256Mi"],
    );
    assert!(
        e.contains("compiling took longer than engine.compileTimeout (3s); refused"),
        "{e}"
    );
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(8),
        "{took:?}"
    );
    let (took, e) = check(
        "big.wasm",
        big_bomb(),
        &["--compile-timeout", "60s", "--compile-memory", "256Mi"],
    );
    assert!(
        e.contains("compiling needed more memory than engine.compileMemory (256 MiB); refused"),
        "{e}"
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
}
