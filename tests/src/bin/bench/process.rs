//! The `wisp` binary as a process (issue 42's rows): its probes on both ports while 100 plugins
//! spin to their deadline, `/plugins` is read 10 times a second and a `dir:` source ingests
//! 10,000 objects, against the same host idle; and a cold start of eight plugins (Rust, Python,
//! JavaScript) on an empty module cache in a 0.5-core CPU quota, against the same start without
//! one. Both from one run each, on whatever else the machine does (say its load beside them).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::common::{ms, percentile};
use crate::Args;

/// The release `wisp` next to this bench (`cargo build --release -p wisp-host --bin wisp`), or
/// `$WISP_BIN`.
pub(super) fn wisp_binary() -> anyhow::Result<PathBuf> {
    let path = match std::env::var_os("WISP_BIN") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()?.with_file_name("wisp"),
    };
    anyhow::ensure!(
        path.is_file(),
        "no wisp binary at {} (build it: cargo build --release -p wisp-host --bin wisp, or set WISP_BIN)",
        path.display()
    );
    Ok(path)
}

/// A running `wisp run`, its stderr kept.
pub(super) struct Host {
    child: Child,
    log: Arc<Mutex<String>>,
    spawned: Instant,
}

impl Host {
    /// `wisp run --config wisp.yaml` in `dir` (`KUBECONFIG` at `dir/kubeconfig`); in the CPU
    /// cgroup whose `cgroup.procs` is `cgroup` when given (entered before exec, so its compile
    /// children are in it too).
    pub(super) fn start(wisp: &Path, dir: &Path, cgroup: Option<&Path>) -> anyhow::Result<Self> {
        let mut c = match cgroup {
            None => Command::new(wisp),
            Some(procs) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg("echo $$ > \"$1\" && shift && exec \"$@\"")
                    .arg("sh")
                    .arg(procs)
                    .arg(wisp);
                c
            }
        };
        c.args(["run", "--config", "wisp.yaml", "--grace", "10s"])
            .current_dir(dir)
            .env("RUST_LOG", "info")
            .env("KUBECONFIG", dir.join("kubeconfig"))
            .env("XDG_CACHE_HOME", dir.join("cache"))
            .env_remove("POD_NAME")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let spawned = Instant::now();
        let mut child = c.spawn()?;
        let log = Arc::new(Mutex::new(String::new()));
        let (mut stderr, into) = (child.stderr.take().expect("piped"), log.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n @ 1..) = stderr.read(&mut buf) {
                into.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Ok(Self {
            child,
            log,
            spawned,
        })
    }

    /// The address of the server that logs `what` ("admin server listening").
    pub(super) fn listening(&mut self, what: &str) -> anyhow::Result<SocketAddr> {
        let start = Instant::now();
        loop {
            let found = self.log.lock().unwrap().lines().find_map(|l| {
                l.contains(what)
                    .then(|| l.split("addr=").nth(1)?.split_whitespace().next())
                    .flatten()
                    .and_then(|a| a.parse().ok())
            });
            if let Some(a) = found {
                return Ok(a);
            }
            if start.elapsed() > Duration::from_secs(120) || self.child.try_wait()?.is_some() {
                anyhow::bail!("no {what:?} in the host's log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(super) fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// The process id.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, and how long the host took to exit (`None`: not within `limit`, then killed).
    pub(super) fn stop(mut self, limit: Duration) -> anyhow::Result<Option<Duration>> {
        let sent = Instant::now();
        Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        while sent.elapsed() < limit {
            if self.child.try_wait()?.is_some() {
                return Ok(Some(sent.elapsed()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Ok(None)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` with `Connection: close`: status, body and how long the answer took; `None`
/// when nothing answered within `timeout`.
pub(super) fn get(
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Option<(u16, String, Duration)> {
    let start = Instant::now();
    let mut s = TcpStream::connect_timeout(&addr, timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let took = start.elapsed();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    Some((status, body, took))
}

/// A pod manifest for the `dir:` source.
fn write_pod(cluster: &Path, ns: &str, name: &str) -> std::io::Result<()> {
    std::fs::write(
        cluster.join(format!("{ns}-{name}.json")),
        serde_json::to_string(&wisp_tests::pod(ns, name)).expect("a pod is JSON"),
    )
}

/// What the prober saw on one port.
struct Probed {
    took: Vec<Duration>,
    failed: usize,
}

impl Probed {
    fn row(&self) -> String {
        if self.took.is_empty() {
            return format!("no answer ({} failed)", self.failed);
        }
        format!(
            "p50 {} / p99 {} / max {} ({} probes, {} failed)",
            ms(percentile(self.took.clone(), 0.5)),
            ms(percentile(self.took.clone(), 0.99)),
            ms(*self.took.iter().max().expect("not empty")),
            self.took.len(),
            self.failed
        )
    }
}

/// `/healthz` on `addr` every 50 ms until `stop`.
fn probe(addr: SocketAddr, stop: &AtomicBool) -> Probed {
    let mut p = Probed {
        took: Vec::new(),
        failed: 0,
    };
    while !stop.load(Ordering::Relaxed) {
        match get(addr, "/healthz", Duration::from_secs(10)) {
            Some((200, _, took)) => p.took.push(took),
            _ => p.failed += 1,
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    p
}

/// The admin row: probes of an idle host, then of one with `spinners` plugins spinning to their
/// 50 ms deadline on every object (never quarantined), `/plugins` read 10 times a second and
/// `ingest` manifests written into its `dir:` source meanwhile; then SIGTERM.
fn probes(a: &Args, wisp: &Path) -> anyhow::Result<()> {
    let (spinners, ingest, window) = if a.quick {
        (20, 1_000, Duration::from_secs(10))
    } else {
        (100, 10_000, Duration::from_secs(30))
    };
    println!("\n## The binary's probes while plugins spin and a dir: source ingests\n");
    println!(
        "`wisp run` (this bench's sibling binary), `/healthz` every 50 ms on the admin and the \
         metrics port for {} s; loaded: {spinners} plugins (test-faults, mode spin) held to their \
         50 ms deadline on every object with quarantine off, `/plugins` read 10 times a second, \
         and {ingest} pod manifests written into the `dir:` source during the window; then \
         SIGTERM with a 10 s grace.\n",
        window.as_secs()
    );
    println!(
        "| host | /healthz, admin port | /healthz, metrics port | /plugins reads | SIGTERM to exit |"
    );
    println!("|---|---|---|---|---|");
    let faults = std::fs::canonicalize(&a.plugin_dir)?.join("test_faults.wasm");
    for loaded in [false, true] {
        let dir = tempfile::tempdir()?;
        let cluster = dir.path().join("cluster");
        std::fs::create_dir(&cluster)?;
        write_pod(&cluster, "shop", "web-0")?;
        let plugins: String = if loaded {
            (0..spinners)
                .map(|i| {
                    format!(
                        "  - {{name: spin-{i}, module: {}, informers: [pods], settings: {{mode: spin}}, \
                         limits: {{deadline: 50ms}}, batch: 1, \
                         onFailure: {{policy: skip, quarantineAfter: 0}}}}\n",
                        faults.display()
                    )
                })
                .collect()
        } else {
            format!(
                "  - {{name: idle, module: {}, informers: [pods], settings: {{mode: ok}}}}\n",
                faults.display()
            )
        };
        std::fs::write(
            dir.path().join("wisp.yaml"),
            format!(
                "source: dir:cluster\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod}}\n\
                 plugins:\n{plugins}engine: {{cacheDir: modules}}\n\
                 admin: {{listen: \"127.0.0.1:0\", metricsAddress: \"127.0.0.1:0\"}}\n"
            ),
        )?;
        let mut host = Host::start(wisp, dir.path(), None)?;
        let admin = host.listening("admin server listening")?;
        let metrics = host.listening("metrics server listening")?;
        // Every plugin running (the spinners' one module compiled once).
        let expect = if loaded { spinners } else { 1 };
        let started = Instant::now();
        loop {
            let running = get(admin, "/plugins", Duration::from_secs(10))
                .and_then(|(_, b, _)| serde_json::from_str::<Value>(&b).ok())
                .and_then(|v| {
                    v.as_array()
                        .map(|p| p.iter().filter(|p| p["state"] == "running").count())
                });
            if running == Some(expect) {
                break;
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(300),
                "{expect} plugins never all running:\n{}",
                host.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let stop = AtomicBool::new(false);
        let (on_admin, on_metrics, reads) = std::thread::scope(|s| {
            let on_admin = s.spawn(|| probe(admin, &stop));
            let on_metrics = s.spawn(|| probe(metrics, &stop));
            let reads = s.spawn(|| {
                let mut took = Vec::new();
                while loaded && !stop.load(Ordering::Relaxed) {
                    if let Some((200, _, t)) = get(admin, "/plugins", Duration::from_secs(10)) {
                        took.push(t);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                took
            });
            let begun = Instant::now();
            if loaded {
                for i in 0..ingest {
                    let _ = write_pod(&cluster, &format!("ns-{}", i % 20), &format!("p-{i}"));
                }
            }
            std::thread::sleep(window.saturating_sub(begun.elapsed()));
            stop.store(true, Ordering::Relaxed);
            (
                on_admin.join().expect("prober"),
                on_metrics.join().expect("prober"),
                reads.join().expect("reader"),
            )
        });
        let exit = host.stop(Duration::from_secs(60))?;
        println!(
            "| {} | {} | {} | {} | {} |",
            if loaded {
                format!("{spinners} spinning, {ingest} ingested")
            } else {
                "idle (baseline)".into()
            },
            on_admin.row(),
            on_metrics.row(),
            if reads.is_empty() {
                "-".into()
            } else {
                format!(
                    "{} answered, p99 {}",
                    reads.len(),
                    ms(percentile(reads.clone(), 0.99))
                )
            },
            exit.map_or("not within 60 s (killed)".into(), ms)
        );
    }
    Ok(())
}

/// A CPU cgroup with `quota` of a core (v1 `cpu.cfs_quota_us`, or v2 `cpu.max`), under this
/// process's own; removed when dropped.
struct CpuCgroup {
    dir: PathBuf,
}

impl CpuCgroup {
    fn new(quota: f64) -> Result<Self, String> {
        let own = std::fs::read_to_string("/proc/self/cgroup").map_err(|e| e.to_string())?;
        let name = format!("wisp-bench-{}", std::process::id());
        let period = 100_000u64;
        let us = (quota * period as f64) as u64;
        for line in own.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
            let (Some(controllers), Some(path)) = (controllers, path) else {
                continue;
            };
            let path = path.trim_start_matches('/');
            if controllers.split(',').any(|c| c == "cpu") {
                let dir = Path::new("/sys/fs/cgroup/cpu").join(path).join(&name);
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                let c = Self { dir };
                std::fs::write(c.dir.join("cpu.cfs_period_us"), period.to_string())
                    .and_then(|()| std::fs::write(c.dir.join("cpu.cfs_quota_us"), us.to_string()))
                    .map_err(|e| e.to_string())?;
                return Ok(c);
            }
            if controllers.is_empty() {
                let dir = Path::new("/sys/fs/cgroup").join(path).join(&name);
                std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                let c = Self { dir };
                std::fs::write(c.dir.join("cpu.max"), format!("{us} {period}"))
                    .map_err(|e| format!("cpu.max: {e}"))?;
                return Ok(c);
            }
        }
        Err("no cpu controller in /proc/self/cgroup".into())
    }

    fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The cold-start row's plugins: name, module file and language (the team labeler also
/// reads namespaces).
const COLD: [(&str, &str, &str); 8] = [
    ("audit", "audit_log.wasm", "Rust"),
    ("images", "image_policy.wasm", "Rust"),
    ("inventory", "inventory.wasm", "Rust"),
    ("labels", "team_labeler.wasm", "Rust"),
    ("audit-py", "audit-log-py.wasm", "Python"),
    ("images-py", "image-policy-py.wasm", "Python"),
    ("audit-js", "audit-log-js.wasm", "JavaScript"),
    ("images-js", "image-policy-js.wasm", "JavaScript"),
];

/// When each plugin first delivered and when every tier-up had landed, from spawn.
struct ColdStart {
    first: Vec<Option<Duration>>,
    optimized: Option<Duration>,
}

/// One cold start of the [`COLD`] plugins (empty module cache) in `cgroup` when given.
fn cold_start_once(a: &Args, wisp: &Path, cgroup: Option<&CpuCgroup>) -> anyhow::Result<ColdStart> {
    let dir = tempfile::tempdir()?;
    let cluster = dir.path().join("cluster");
    std::fs::create_dir(&cluster)?;
    write_pod(&cluster, "shop", "web-0")?;
    let plugin_dir = std::fs::canonicalize(&a.plugin_dir)?;
    let plugins: String = COLD
        .iter()
        .map(|(name, file, _)| {
            let informers = if *name == "labels" {
                "pods, namespaces"
            } else {
                "pods"
            };
            format!(
                "  - {{name: {name}, module: {}, informers: [{informers}]}}\n",
                plugin_dir.join(file).display()
            )
        })
        .collect();
    std::fs::write(
        dir.path().join("wisp.yaml"),
        format!(
            "source: dir:cluster\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod}}\n  \
             - {{name: namespaces, apiVersion: v1, kind: Namespace}}\n\
             plugins:\n{plugins}engine: {{cacheDir: modules}}\n\
             admin: {{listen: \"127.0.0.1:0\"}}\n"
        ),
    )?;
    let mut host = Host::start(wisp, dir.path(), cgroup.map(CpuCgroup::procs).as_deref())?;
    let admin = host.listening("admin server listening")?;
    let mut first = vec![None; COLD.len()];
    let optimized = loop {
        let at = host.spawned.elapsed();
        if let Some((_, text, _)) = get(admin, "/metrics", Duration::from_secs(10)) {
            for (i, (name, ..)) in COLD.iter().enumerate() {
                let line = format!("wisp_plugin_delivered_total{{plugin=\"{name}\"}} ");
                let delivered = text
                    .lines()
                    .find_map(|l| l.strip_prefix(&line))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .is_some_and(|v| v >= 1.0);
                if delivered && first[i].is_none() {
                    first[i] = Some(at);
                }
            }
        }
        let all_optimized = get(admin, "/plugins", Duration::from_secs(10))
            .and_then(|(_, b, _)| serde_json::from_str::<Value>(&b).ok())
            .and_then(|v| {
                v.as_array()
                    .map(|p| p.len() == COLD.len() && p.iter().all(|p| p["tier"] == "optimized"))
            })
            .unwrap_or(false);
        if all_optimized && first.iter().all(Option::is_some) {
            break Some(at);
        }
        if at > Duration::from_secs(900) {
            break None;
        }
        anyhow::ensure!(
            host.child.try_wait()?.is_none(),
            "the host exited:\n{}",
            host.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // Where the time went: each check and compile, from the host's log.
    let log = host.log();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("checked plugin=") || l.contains("compiled in a child process"))
        .collect();
    let setting = if cgroup.is_some() {
        "0.5 core"
    } else {
        "no quota"
    };
    for line in said {
        eprintln!("cold start, {setting}: {line}");
    }
    host.stop(Duration::from_secs(30))?;
    Ok(ColdStart { first, optimized })
}

/// The cold-start row: without a quota (baseline), then in a 0.5-core quota.
fn cold_start(a: &Args, wisp: &Path) -> anyhow::Result<()> {
    println!("\n## A cold start in a 0.5-core CPU quota\n");
    let cgroup = match CpuCgroup::new(0.5) {
        Ok(c) => c,
        Err(why) => {
            println!("skipped: no CPU cgroup can be made here ({why})");
            return Ok(());
        }
    };
    println!(
        "`wisp run` with {} plugins on an empty module cache (`executor.workers` and compile \
         slots at their default), one pod in a `dir:` source: from spawn to each plugin's first \
         delivery (`wisp_plugin_delivered_total` read every 100 ms), and to every plugin on \
         Cranelift code (`tier: optimized` in `/plugins`).\n",
        COLD.len()
    );
    let free = cold_start_once(a, wisp, None)?;
    let quota = cold_start_once(a, wisp, Some(&cgroup))?;
    println!("| plugin | language | first delivery, no quota | in 0.5 core | ratio |");
    println!("|---|---|---|---|---|");
    let show = |d: Option<Duration>| {
        d.map_or("never (900 s)".into(), |d| {
            format!("{:.1} s", d.as_secs_f64())
        })
    };
    for (i, (name, _, language)) in COLD.iter().enumerate() {
        let ratio = match (free.first[i], quota.first[i]) {
            (Some(f), Some(q)) => format!("{:.1}x", q.as_secs_f64() / f.as_secs_f64()),
            _ => "-".into(),
        };
        println!(
            "| {name} | {language} | {} | {} | {ratio} |",
            show(free.first[i]),
            show(quota.first[i])
        );
    }
    println!(
        "| every tier-up landed | | {} | {} | |",
        show(free.optimized),
        show(quota.optimized)
    );
    Ok(())
}

/// Both rows.
pub(crate) fn process_figures(a: &Args) -> anyhow::Result<()> {
    let wisp = wisp_binary()?;
    probes(a, &wisp)?;
    cold_start(a, &wisp)
}
