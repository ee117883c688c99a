//! `cargo xtask <task>`: project tasks that need more than one cargo command.
//!
//! - `demo`: build the plugins, run the host on `deploy/demo` (no cluster needed).
//! - `plugins`: build the plugins for wasm32-wasip2 into `plugins/dist/`.
//! - `test`: build the plugins, then run the whole test suite.
//! - `bench`: build the plugins, then run `wisp-bench` in release mode.
//! - `fuzz`: run each fuzz target of `tests/fuzz` for a bounded time (nightly, cargo-fuzz).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

mod polyglot;

const USAGE: &str = "usage: cargo xtask <demo|plugins|test|bench|fuzz> [args]

  demo     the host on the bundled demo cluster (deploy/demo) with the example plugins,
           editing manifests while it runs; no cluster needed
  plugins  build the plugins (plugins/*) for wasm32-wasip2 into plugins/dist/, and the Python
           and JavaScript ones (plugins/python/*, plugins/js/*) with componentize-py and
           componentize-js, installed when missing into ~/.cache/wisp-toolchains/
  test     build the plugins, then run the whole test suite (unit and integration tests),
           the example plugins' own tests (native, against wisp_sdk::testing), then the
           informer suites again over the other queues (WISP_TEST_QUEUE=deltaFIFO,
           realFIFONonAtomic); each test binary and each pass runs even when one fails
           (--no-fail-fast), and the task fails at the end if any did;
           further args go to cargo test (and skip the rest); on a busy machine,
           WISP_TEST_TIME_SCALE=3 (default 1) makes the tests wait longer before giving up
  bench    build the plugins, then run the benchmark harness (release); `--quick` for a short run,
           `--only pipeline,latency` for some sections (see `cargo xtask bench -- --help`);
           `--callgrind` for the delivery rows' instruction counts under valgrind instead
  fuzz     run the fuzz targets (tests/fuzz: watch_event, config, host_api) one after the other,
           each for `--seconds N` (default 60); name targets to run only those. Needs the nightly
           toolchain and cargo-fuzz (`cargo install cargo-fuzz`)";

/// The fuzz targets of `tests/fuzz`, in the order `cargo xtask fuzz` runs them.
const FUZZ_TARGETS: &[&str] = &["watch_event", "config", "host_api"];

/// The modules of the `integration` test binary that exercise the informer pipeline end to end;
/// `cargo xtask test` runs them again over the other queues.
const INFORMER_SUITES: [&str; 4] = [
    "informer_conformance::",
    "reflector::",
    "informer_e2e::",
    "faults::",
];

/// The workspace root: found from the current directory (`cargo xtask` runs from anywhere in the
/// workspace), else where xtask was compiled. A target dir shared by several checkouts can hold
/// an xtask binary compiled in another checkout, so the compile-time path comes last.
fn root() -> PathBuf {
    let is_root =
        |d: &Path| d.join("xtask").join("Cargo.toml").is_file() && d.join("plugins").is_dir();
    if let Ok(cwd) = std::env::current_dir()
        && let Some(found) = cwd.ancestors().find(|d| is_root(d))
    {
        return found.to_path_buf();
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The example plugins: the demo's, and those whose unit tests run natively (`cargo xtask test`,
/// `.ci/run`'s lints).
const EXAMPLE_PLUGINS: [&str; 4] = ["audit-log", "image-policy", "inventory", "team-labeler"];

/// Which plugins `build_plugins` builds.
#[derive(Clone, Copy, PartialEq)]
enum Plugins {
    /// The example plugins alone (the demo's).
    Examples,
    /// Every Rust plugin crate (the examples, the benchmarks' and the tests' own), and the
    /// Python and JavaScript ones.
    All,
}

/// Builds plugin crates in release mode for wasm32-wasip2 and copies the components to
/// `plugins/dist/<crate>.wasm`; with `Plugins::All`, the Python and JavaScript plugins too
/// (`plugins/dist/<name>-py.wasm`, `<name>-js.wasm`; see `polyglot.rs`).
fn build_plugins(which: Plugins) -> anyhow::Result<PathBuf> {
    build_plugins_at(which, false)
}

/// `build_plugins`, with the cargo build at the lowest CPU priority when `low` (see `demo`).
fn build_plugins_at(which: Plugins, low: bool) -> anyhow::Result<PathBuf> {
    let root = root();
    // The target is a rustup component: add it when rustup is there (a no-op when installed).
    if let Ok(out) = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        && !String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.trim() == "wasm32-wasip2")
    {
        let mut add = Command::new("rustup");
        add.args(["target", "add", "wasm32-wasip2"]);
        run(add)?;
    }
    let mut c = cargo();
    c.current_dir(root.join("plugins"))
        .args(["build", "--release", "--target", "wasm32-wasip2"]);
    if which == Plugins::Examples {
        c.args(EXAMPLE_PLUGINS.iter().flat_map(|p| ["-p", p]));
    }
    if low {
        c = niced(&c);
    }
    run(c).context(
        "building the plugins (is the target installed? `rustup target add wasm32-wasip2`)",
    )?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("plugins").join("target"));
    let built = target.join("wasm32-wasip2").join("release");
    let dist = root.join("plugins").join("dist");
    std::fs::create_dir_all(&dist).with_context(|| format!("creating {}", dist.display()))?;
    let mut n = 0;
    for entry in
        std::fs::read_dir(&built).with_context(|| format!("reading {}", built.display()))?
    {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "wasm") {
            let to = dist.join(path.file_name().unwrap_or_default());
            std::fs::copy(&path, &to)
                .with_context(|| format!("copying {} to {}", path.display(), to.display()))?;
            n += 1;
        }
    }
    println!("xtask: {n} plugins in {}", dist.display());
    if which == Plugins::All {
        polyglot::build(&root, &dist)?;
    }
    Ok(dist)
}

/// A cargo command, without what `cargo run` told xtask about itself. Build scripts (ring's,
/// through the `cc` crate) ask to rerun when `CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR` and the like
/// change, and cargo reads those from its own environment: left in, every crate of such a build
/// script's chain (ring, rustls, kube-client, ...) built by `cargo xtask ...` would be built
/// again by a plain `cargo test`, and back.
fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(cargo_run_var) {
            c.env_remove(k);
        }
    }
    c
}

/// `cmd` under `nice -n 19`: it gets only the CPU time other processes leave.
fn niced(cmd: &Command) -> Command {
    let mut n = Command::new("nice");
    n.args(["-n", "19"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => n.env(k, v),
            None => n.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        n.current_dir(dir);
    }
    n
}

/// A variable `cargo run` sets for the program it runs (not one a user sets for cargo).
fn cargo_run_var(name: &str) -> bool {
    [
        "CARGO_PKG_",
        "CARGO_MANIFEST_",
        "CARGO_BIN_",
        "CARGO_CRATE_",
    ]
    .iter()
    .any(|p| name.starts_with(p))
        || ["CARGO_PRIMARY_PACKAGE", "OUT_DIR"].contains(&name)
}

/// Whether `nice` can run commands here (coreutils; not on Windows).
fn has_nice() -> bool {
    Command::new("nice")
        .args(["-n", "19", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

fn run(cmd: Command) -> anyhow::Result<()> {
    start(cmd)?.wait()
}

/// A command started by [`start`], named as it was for its errors.
struct Running {
    child: std::process::Child,
    shown: String,
}

fn start(mut cmd: Command) -> anyhow::Result<Running> {
    let shown = format!("{cmd:?}");
    let child = cmd
        .spawn()
        .with_context(|| format!("could not start {shown}"))?;
    Ok(Running { child, shown })
}

impl Running {
    /// Waits for the command; an error when it failed.
    fn wait(mut self) -> anyhow::Result<()> {
        let status = self
            .child
            .wait()
            .with_context(|| format!("waiting for {}", self.shown))?;
        if !status.success() {
            bail!("{} failed with {status}", self.shown);
        }
        Ok(())
    }
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let p = e?.path();
        let dest = to.join(p.file_name().unwrap_or_default());
        if p.is_dir() {
            copy_dir(&p, &dest)?;
        } else {
            std::fs::copy(&p, &dest)?;
        }
    }
    Ok(())
}

/// A plain HTTP/1.1 GET; the body when the status is 200.
fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(500)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// Polls `/readyz` until it answers 200.
fn wait_ready(addr: std::net::SocketAddr, timeout: std::time::Duration) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < timeout {
        if http_get(addr, "/readyz").is_some() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    false
}

/// The demo: the host on a copy of `deploy/demo/cluster` with the example plugins, while this
/// task creates, edits and deletes manifests so the plugins see live changes.
fn demo() -> anyhow::Result<()> {
    let root = root();
    // The `wisp` binary alone, but with the features the whole workspace gives its dependencies
    // (`--workspace` selects every member for feature resolution; `--bin` builds only what the
    // binary needs). The test crates turn on features of shared crates (tokio's, kube's), so
    // `cargo xtask test` then reuses every crate built here instead of building much of the
    // graph again, and builds only what the tests alone need (the SDK natively, its bindgen).
    let mut b = cargo();
    b.args(["build", "--quiet", "--workspace", "--bin", "wisp"]);
    // Only the example plugins: the demo's config runs no other. The benchmarks' and the tests'
    // plugins, and installing the Python and JavaScript toolchains to build theirs, would add to
    // a cold demo what only `cargo xtask test` needs.
    // Cold, the host's build is the long one, and its chain through cranelift and wasmtime
    // leaves cores idle at times: the plugins build meanwhile at the lowest priority, taking
    // only that idle time. (At equal priority the two builds share the cores and the host's
    // chain ends later: the demo was slower than with one build after the other.) With one
    // target dir for both (`CARGO_TARGET_DIR`), cargo's lock would serialise them anyway.
    let dist = if std::env::var_os("CARGO_TARGET_DIR").is_none() && has_nice() {
        let host = start(b)?;
        let dist = build_plugins_at(Plugins::Examples, true);
        let built = host.wait();
        let dist = dist?;
        built?;
        dist
    } else {
        let dist = build_plugins(Plugins::Examples)?;
        run(b)?;
        dist
    };
    let work = std::env::temp_dir().join(format!("wisp-demo-{}", std::process::id()));
    let cluster = work.join("cluster");
    copy_dir(&root.join("deploy/demo/cluster"), &cluster)?;
    let config = std::fs::read_to_string(root.join("deploy/demo/wisp.yaml"))?
        .replace("../../plugins/dist", &dist.display().to_string())
        .replace("127.0.0.1:9090", "127.0.0.1:0");
    std::fs::write(work.join("wisp.yaml"), config)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let admin = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?
    };
    let mut host = Command::new(target.join("debug").join("wisp"));
    host.args(["run", "--config"])
        .arg(work.join("wisp.yaml"))
        .args(["--for", "20s", "--admin", &admin.to_string()]);
    host.env(
        "RUST_LOG",
        std::env::var("RUST_LOG")
            .unwrap_or_else(|_| "warn,wisp::plugin=info,wisp_host::app=info".into()),
    );
    println!(
        "xtask: running the host on {}; editing manifests once it is ready",
        cluster.display()
    );
    let mut child = host.spawn().context("starting wisp")?;
    if !wait_ready(admin, std::time::Duration::from_secs(60)) {
        let _ = child.kill();
        bail!("the host did not become ready within 60 s");
    }
    let step = |secs: u64, what: &str| {
        std::thread::sleep(std::time::Duration::from_secs(secs));
        println!("\nxtask: {what}\n");
    };
    step(
        1,
        "adding cluster/cache.yaml (a pod using redis:latest without limits)",
    );
    std::fs::write(
        cluster.join("cache.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: cache-0, namespace: shop, labels: {app: cache}}\nspec:\n  nodeName: node-b\n  containers: [{name: redis, image: redis:latest}]\n",
    )?;
    step(
        1,
        "editing cluster/db.yaml (pinning postgres:16.4 with limits)",
    );
    std::fs::write(
        cluster.join("db.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: db-0, namespace: shop, labels: {app: db}}\nspec:\n  nodeName: node-a\n  containers: [{name: postgres, image: 'postgres:16.4', resources: {limits: {cpu: '1', memory: 1Gi}}}]\n",
    )?;
    step(1, "deleting cluster/system.yaml");
    std::fs::remove_file(cluster.join("system.yaml"))?;
    std::thread::sleep(std::time::Duration::from_secs(1));
    if let Some(m) = http_get(admin, "/metrics") {
        println!("\nxtask: what the plugins did (from /metrics; counters still at 0 left out):\n");
        print!("{}", plugin_metrics(&m));
    }
    if let Some(body) = http_get(admin, "/verdicts") {
        println!("\nxtask: current policy verdicts (from /verdicts):\n");
        print!("{}", verdicts(&body));
    }
    if let Some(body) = http_get(admin, "/audit") {
        println!("\nxtask: actions the plugins asked for (from /audit):\n");
        print!("{}", audit(&body));
    }
    println!("\nxtask: stopping the host\n");
    // The host stops by itself at --for; ask it sooner with SIGTERM where we can.
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let status = child.wait()?;
    let _ = std::fs::remove_dir_all(&work);
    if !status.success() {
        bail!("wisp exited with {status}");
    }
    Ok(())
}

/// The `wisp_plugin_*` samples of a `/metrics` page that say something, per plugin: counters
/// and gauges that are not 0 (without the `wisp_plugin_` prefix and the `plugin` label), and
/// each plugin's mean call time instead of its latency histogram.
fn plugin_metrics(page: &str) -> String {
    let mut by_plugin: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut latency: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
    for line in page.lines().filter(|l| l.starts_with("wisp_plugin_")) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
        let labels: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
        let Some(plugin) = labels.iter().find_map(|l| l.strip_prefix("plugin=")) else {
            continue;
        };
        let plugin = plugin.trim_matches('"').to_owned();
        let name = name.trim_start_matches("wisp_plugin_");
        if let Some(h) = name.strip_prefix("handle_latency_seconds_") {
            let e = latency.entry(plugin).or_default();
            match h {
                "sum" => e.0 = value,
                "count" => e.1 = value,
                _ => {}
            }
            continue;
        }
        if value == 0.0 {
            continue;
        }
        let rest: Vec<&str> = labels
            .into_iter()
            .filter(|l| !l.starts_with("plugin=") && !l.is_empty())
            .collect();
        let shown = if rest.is_empty() {
            name.to_owned()
        } else {
            format!("{name}{{{}}}", rest.join(","))
        };
        by_plugin
            .entry(plugin)
            .or_default()
            .push(format!("{shown} {value}"));
    }
    let mut out = String::new();
    for (plugin, (sum, count)) in &latency {
        if *count > 0.0 {
            by_plugin.entry(plugin.clone()).or_default().push(format!(
                "mean handle time {:.2} ms over {count} calls",
                sum / count * 1000.0
            ));
        }
    }
    for (plugin, lines) in by_plugin {
        out.push_str(&format!("  {plugin}:\n"));
        for l in lines {
            out.push_str(&format!("    {l}\n"));
        }
    }
    out
}

/// One indented line per entry of a JSON list answer, made by `line` from the entry's string
/// fields (a missing one reads as empty); `none` for an empty or unreadable answer.
fn entries(body: &str, line: impl Fn(&dyn Fn(&str) -> String) -> String) -> String {
    let list: Vec<serde_json::Value> = serde_json::from_str(body).unwrap_or_default();
    if list.is_empty() {
        return "  none\n".into();
    }
    list.iter()
        .map(|v| {
            let field = |k: &str| v[k].as_str().unwrap_or("").to_owned();
            format!("  {}\n", line(&field))
        })
        .collect()
}

/// One line per verdict of a `/verdicts` answer.
fn verdicts(body: &str) -> String {
    entries(body, |f| {
        format!(
            "{} {} {} {} {}/{}: {}",
            f("plugin"),
            f("rule"),
            f("severity"),
            f("kind"),
            f("namespace"),
            f("name"),
            f("message")
        )
    })
}

/// One line per entry of an `/audit` answer.
fn audit(body: &str) -> String {
    entries(body, |f| {
        format!(
            "{} {} {} {}/{}: {} ({})",
            f("plugin"),
            f("verb"),
            f("kind"),
            f("namespace"),
            f("name"),
            f("result"),
            f("detail")
        )
    })
}

/// What one bounded fuzz run did, from libFuzzer's last status line and its exit.
struct FuzzRun {
    target: String,
    runs: String,
    /// libFuzzer's own count, else the wall time with the build.
    seconds: u64,
    cov: String,
    ft: String,
    ok: bool,
}

/// The value after `key` in a libFuzzer status line (`#4096 pulse cov: 812 ft: 2100 ...`).
fn stat<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let mut words = line.split_whitespace();
    words.find(|w| *w == key)?;
    words.next()
}

/// Runs one target for `seconds` with `cargo +nightly fuzz run`, new inputs going to the
/// untracked `tests/fuzz/corpus/<target>`, the committed seeds read too. libFuzzer's output is
/// passed through; its last status line is kept for the summary.
fn fuzz_one(root: &Path, target: &str, seconds: u64) -> anyhow::Result<FuzzRun> {
    use std::io::BufRead;
    let fuzz = root.join("tests").join("fuzz");
    let corpus = fuzz.join("corpus").join(target);
    std::fs::create_dir_all(&corpus).with_context(|| format!("creating {}", corpus.display()))?;
    // `rustup run`: the xtask's own cargo is the stable one, which knows no `+nightly`.
    let mut c = Command::new("rustup");
    c.current_dir(root)
        .args(["run", "nightly", "cargo", "fuzz", "run", "--fuzz-dir"])
        .arg(&fuzz)
        // No sanitizer: the host forbids unsafe code, and without ASan the build and the runs
        // are about twice as fast on a small machine.
        .args(["--sanitizer", "none", target])
        .arg(&corpus)
        .arg(fuzz.join("seeds").join(target))
        .arg("--")
        .arg(format!("-max_total_time={seconds}"))
        .arg("-print_final_stats=1")
        .stderr(std::process::Stdio::piped());
    println!("xtask: fuzzing {target} for {seconds} s");
    let started = std::time::Instant::now();
    let mut child = c
        .spawn()
        .context("starting `rustup run nightly cargo fuzz`")?;
    let mut last = String::new();
    let mut runs = String::from("?");
    let mut fuzzed = None;
    if let Some(err) = child.stderr.take() {
        for line in std::io::BufReader::new(err).lines() {
            let line = line?;
            eprintln!("{line}");
            if line.starts_with('#') && line.contains(" cov: ") {
                last = line.clone();
            }
            if let Some(n) = line.strip_prefix("stat::number_of_executed_units:") {
                runs = n.trim().to_owned();
            }
            // `Done 4133247 runs in 61 second(s)`: the fuzzing time, without the build.
            if let Some(secs) = line
                .strip_prefix("Done ")
                .and_then(|l| stat(l, "in"))
                .and_then(|n| n.parse().ok())
            {
                fuzzed = Some(secs);
            }
        }
    }
    let status = child.wait()?;
    Ok(FuzzRun {
        target: target.to_owned(),
        runs,
        seconds: fuzzed.unwrap_or_else(|| started.elapsed().as_secs()),
        cov: stat(&last, "cov:").unwrap_or("?").to_owned(),
        ft: stat(&last, "ft:").unwrap_or("?").to_owned(),
        ok: status.success(),
    })
}

/// `cargo xtask fuzz [--seconds N] [target...]`: each target in turn, then a summary.
fn fuzz(args: &[String]) -> anyhow::Result<()> {
    let mut seconds = 60;
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => {
                let n = it.next().context("--seconds needs a number")?;
                seconds = n
                    .parse()
                    .with_context(|| format!("--seconds {n:?}: expected a number"))?;
            }
            t if FUZZ_TARGETS.contains(&t) => targets.push(t),
            other => {
                bail!("unknown fuzz argument {other:?} (targets: {FUZZ_TARGETS:?})\n\n{USAGE}")
            }
        }
    }
    if targets.is_empty() {
        targets = FUZZ_TARGETS.to_vec();
    }
    let check = Command::new("rustup")
        .args(["run", "nightly", "cargo", "fuzz", "--version"])
        .output();
    if !check.is_ok_and(|o| o.status.success()) {
        bail!(
            "fuzzing needs the nightly toolchain and cargo-fuzz: \
             `rustup toolchain install nightly` and `cargo install cargo-fuzz`"
        );
    }
    let root = root();
    let mut done = Vec::new();
    for t in targets {
        done.push(fuzz_one(&root, t, seconds)?);
    }
    println!("\n| target | runs | seconds | cov | ft | result |\n|---|---|---|---|---|---|");
    for r in &done {
        let result = if r.ok {
            "no failure".to_owned()
        } else {
            format!("FAILED: see tests/fuzz/artifacts/{}/", r.target)
        };
        println!(
            "| {} | {} | {} | {} | {} | {result} |",
            r.target, r.runs, r.seconds, r.cov, r.ft
        );
    }
    if done.iter().any(|r| !r.ok) {
        bail!(
            "a fuzz target failed; reproduce with `cargo +nightly fuzz run --fuzz-dir tests/fuzz -s none <target> <artifact>`"
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (task, rest) = match args.split_first() {
        Some((t, rest)) => (t.as_str(), rest),
        None => {
            println!("{USAGE}");
            return Ok(());
        }
    };
    match task {
        "demo" => demo(),
        "plugins" => build_plugins(Plugins::All).map(|_| ()),
        "bench" => {
            // The `process` section runs the release `wisp` with the Python and JS plugins too.
            let dist = build_plugins(Plugins::All)?;
            let mut wisp = cargo();
            wisp.args([
                "build",
                "--release",
                "--package",
                "wisp-host",
                "--bin",
                "wisp",
            ]);
            run(wisp)?;
            let mut c = cargo();
            c.env("WISP_PLUGIN_DIR", dist);
            c.args([
                "run",
                "--release",
                "--package",
                "wisp-tests",
                "--features",
                "bench",
                "--bin",
                "wisp-bench",
                "--",
            ])
            .args(rest);
            run(c)
        }
        "test" => {
            let dist = build_plugins(Plugins::All)?;
            // Every test binary and every pass runs even when one fails (`--no-fail-fast`, and
            // the passes after a failed one); the task fails at the end, naming what failed.
            let mut failed = Vec::new();
            let mut c = cargo();
            c.env("WISP_PLUGIN_DIR", &dist);
            c.args(["test", "--workspace"]);
            let rest: Vec<&String> = rest.iter().skip_while(|a| *a == "--").collect();
            if !rest
                .iter()
                .take_while(|a| **a != "--")
                .any(|a| *a == "--no-fail-fast")
            {
                c.arg("--no-fail-fast");
            }
            c.args(rest.iter().copied());
            if let Err(e) = run(c) {
                failed.push(e);
            }
            if rest.is_empty() {
                // The example plugins' own tests, natively, against the SDK's fake host
                // (`wisp_sdk::testing`): what a plugin author runs with `cargo test`.
                println!("== the example plugins' tests (native, wisp_sdk::testing)");
                let mut c = cargo();
                c.current_dir(root().join("plugins"))
                    .args(["test", "--no-fail-fast"]);
                for p in EXAMPLE_PLUGINS {
                    c.args(["-p", p]);
                }
                if let Err(e) = run(c) {
                    failed.push(e);
                }
                // The informer suites again over the other queues (the first pass ran them
                // over the default, client-go 1.36's atomic RealFIFO).
                for (queue, suites) in [
                    ("deltaFIFO", &INFORMER_SUITES[..]),
                    // The soak of `faults` adds a minute; the others cover this queue.
                    ("realFIFONonAtomic", &INFORMER_SUITES[..3]),
                ] {
                    println!("== the informer suites over WISP_TEST_QUEUE={queue}");
                    let mut c = cargo();
                    c.env("WISP_PLUGIN_DIR", &dist)
                        .env("WISP_TEST_QUEUE", queue);
                    c.args([
                        "test",
                        "--no-fail-fast",
                        "-p",
                        "wisp-tests",
                        "--test",
                        "integration",
                        "--",
                    ])
                    .args(suites);
                    if let Err(e) = run(c).with_context(|| format!("WISP_TEST_QUEUE={queue}")) {
                        failed.push(e);
                    }
                }
            }
            if !failed.is_empty() {
                for e in &failed {
                    eprintln!("xtask: failed: {e:#}");
                }
                bail!("{} of the test runs failed (see above)", failed.len());
            }
            Ok(())
        }
        "fuzz" => fuzz(rest),
        "-h" | "--help" | "help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown task {other:?}\n\n{USAGE}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_runs_without_what_cargo_run_told_xtask() {
        for v in [
            "CARGO_PKG_NAME",
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_LINKS",
            "OUT_DIR",
        ] {
            assert!(cargo_run_var(v), "{v}");
        }
        for v in [
            "CARGO",
            "CARGO_TARGET_DIR",
            "CARGO_HOME",
            "CARGO_INCREMENTAL",
            "CC",
        ] {
            assert!(!cargo_run_var(v), "{v}");
        }
    }

    #[test]
    fn the_demo_shows_what_plugins_did_not_every_zero_counter() {
        let page = "# HELP wisp_plugin_delivered Notifications delivered.\n\
            wisp_plugin_delivered_total{plugin=\"audit\"} 8\n\
            wisp_plugin_failed_total{plugin=\"audit\"} 0\n\
            wisp_plugin_handle_latency_seconds_sum{plugin=\"audit\"} 0.002\n\
            wisp_plugin_handle_latency_seconds_count{plugin=\"audit\"} 5\n\
            wisp_plugin_handle_latency_seconds_bucket{le=\"0.001\",plugin=\"audit\"} 5\n\
            wisp_plugin_pods_per_node{node=\"node-a\",plugin=\"inventory\"} 2.0\n\
            wisp_informer_objects{informer=\"pods\"} 4\n";
        assert_eq!(
            plugin_metrics(page),
            "  audit:\n    delivered_total 8\n    mean handle time 0.40 ms over 5 calls\n  \
             inventory:\n    pods_per_node{node=\"node-a\"} 2\n"
        );
        assert_eq!(verdicts("[]"), "  none\n");
        assert_eq!(
            audit(
                r#"[{"plugin":"p","verb":"patch","kind":"Pod","namespace":"shop","name":"a","result":"applied","detail":"resourceVersion 9"}]"#
            ),
            "  p patch Pod shop/a: applied (resourceVersion 9)\n"
        );
    }
}
