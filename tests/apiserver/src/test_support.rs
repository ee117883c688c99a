//! What every test of the workspace that runs a [`TestApiServer`](crate::TestApiServer) shares:
//! how long to wait before giving up, scaled for a busy machine, and whether a missing peer
//! (kubectl, the Python client) fails the test or skips it; kubectl run against a server; an
//! HTTPS admission webhook ([`webhook`]).

pub mod webhook;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

/// How much longer than on an idle machine the tests wait before giving up:
/// `WISP_TEST_TIME_SCALE` (a float, default 1). A pod with a CPU limit, or CI on two loaded
/// cores, is a busy machine all the time; set it there to 2 or more.
pub fn time_scale() -> f64 {
    static SCALE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *SCALE.get_or_init(|| match std::env::var("WISP_TEST_TIME_SCALE") {
        Err(_) => 1.0,
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 => s,
            _ => panic!("WISP_TEST_TIME_SCALE={v:?}: expected a positive number"),
        },
    })
}

/// `d`, a give-up bound of a test (how long to wait for a condition, or the most a step may
/// take before the test calls it stuck), scaled by [`time_scale`]. Every such bound in the
/// tests goes through here; what a test asserts is the condition, or a lower bound, never that
/// a busy machine was quick.
pub fn patience(d: Duration) -> Duration {
    d.mul_f64(time_scale())
}

/// Whether a test must fail rather than skip when a peer it needs (kubectl, docker-registry,
/// python3, node, a built component) is missing: under `CI=true`, `.ci/run` installs them all.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Says why a test skips (a peer is missing), or fails it under `CI=true`, where nothing may
/// be skipped.
pub fn skip_unless_ci(why: &str) {
    assert!(!in_ci(), "{why}: CI must have it (see .ci/run)");
    eprintln!("skipped: {why}");
}

/// A kubeconfig file in `dir` pointing at the server (namespace `default`, no credentials), as
/// kubectl, the Python client and `wisp run` read it.
pub fn kubeconfig(dir: &std::path::Path, server: &crate::TestApiServer) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(&path, server.kubeconfig()).expect("write kubeconfig");
    path
}

/// `None` (after saying why) when the peer is missing outside CI; panics in CI.
fn peer(program: &str, probe: &[&str], what: &str) -> Option<String> {
    let found = Command::new(program)
        .args(probe)
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(program.to_string());
    }
    skip_unless_ci(&format!(
        "{what} ({program}) is not installed; install it to run this test"
    ));
    None
}

/// kubectl (`$WISP_KUBECTL`, else on `PATH`), or `None` after saying why it is missing.
pub fn kubectl() -> Option<String> {
    let program = std::env::var("WISP_KUBECTL").unwrap_or_else(|_| "kubectl".into());
    peer(&program, &["version", "--client"], "kubectl")
}

/// A Python with the `kubernetes` package (`$WISP_PYTHON`, else `python3`), or `None` after saying
/// why it is missing.
pub fn python() -> Option<String> {
    let program = std::env::var("WISP_PYTHON").unwrap_or_else(|_| "python3".into());
    peer(
        &program,
        &["-c", "import kubernetes"],
        "Python with the kubernetes client",
    )
}

/// Runs the Python `script` with `program` (from [`python`]) against the server at `url` (its
/// one argument), off the runtime so the server keeps serving; what it printed on stdout, read
/// as JSON. Panics, with what it wrote on stderr, when it fails.
pub async fn run_python(
    program: String,
    script: &str,
    url: String,
) -> anyhow::Result<serde_json::Value> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("client.py");
    std::fs::write(&path, script)?;
    let out =
        tokio::task::spawn_blocking(move || Command::new(program).arg(&path).arg(url).output())
            .await??;
    assert!(
        out.status.success(),
        "python client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// kubectl against one server, with its own kubeconfig and discovery cache. Runs off the
/// runtime so the server keeps serving.
pub struct Kubectl {
    program: String,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Kubectl {
    pub fn new(program: String, server: &crate::TestApiServer) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = kubeconfig(dir.path(), server);
        Self {
            program,
            config,
            _dir: dir,
        }
    }

    /// Runs kubectl with `args`: (success, stdout, stderr).
    pub async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut command = Command::new(&self.program);
        command
            .args(args)
            .env("KUBECONFIG", &self.config)
            // Its discovery cache under the temp dir, not the user's.
            .env("HOME", self.config.parent().unwrap_or(Path::new("/tmp")));
        if !args.iter().any(|a| a.starts_with("--request-timeout")) {
            command.args(["--request-timeout", "20s"]);
        }
        let out: Output = tokio::task::spawn_blocking(move || command.output())
            .await
            .expect("kubectl task")
            .expect("kubectl runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Runs and expects success; returns stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed: {stderr}{stdout}");
        stdout
    }
}

/// Every line of a table, its cells split on runs of spaces.
pub fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}
