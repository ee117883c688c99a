//! The `wisp` binary end to end: `check`, config errors, `run` on a `dir:` source with plugins
//! (files created, edited, deleted while it runs), the admin endpoints, `record` then `replay`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn wisp() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_wisp"));
    c.env("RUST_LOG", "info").env(
        "XDG_CACHE_HOME",
        std::env::temp_dir().join("wisp-cli-test-cache"),
    );
    c
}

fn plugin(name: &str) -> PathBuf {
    let dir = std::env::var_os("WISP_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist"));
    let p = dir.join(format!("{name}.wasm"));
    assert!(
        p.exists(),
        "{} missing: run `cargo xtask plugins` (or `cargo xtask test`)",
        p.display()
    );
    p
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    request(addr, "GET", path)
}

fn until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Running(Child);

/// `wisp run` on `cfg` with its admin server on `admin`, stopping by itself after `run_for`
/// (and killed when the guard drops).
fn run_host(cfg: &Path, admin: SocketAddr, run_for: &str) -> Running {
    let child = wisp()
        .args(["run", "--config"])
        .arg(cfg)
        .args(["--admin", &admin.to_string(), "--for", run_for])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Running(child)
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: NAME, namespace: shop}\nspec:\n  nodeName: n1\n  containers: [{name: c, image: IMAGE}]\n";

fn pod(name: &str, image: &str) -> String {
    POD.replace("NAME", name).replace("IMAGE", image)
}

/// A dir-source config with the audit and policy plugins.
fn setup() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("cluster")).unwrap();
    std::fs::write(
        d.path().join("cluster/web.yaml"),
        pod("web-1", "nginx:1.27"),
    )
    .unwrap();
    let cfg = format!(
        "source: dir:cluster\nexecutor: {{workers: 3}}\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod}}\nplugins:\n  - name: audit\n    module: {}\n    informers: [pods]\n  - name: policy\n    module: {}\n    informers: [pods]\n    settings: {{requireLimits: false}}\n",
        plugin("audit_log").display(),
        plugin("image_policy").display()
    );
    let path = d.path().join("wisp.yaml");
    std::fs::write(&path, cfg).unwrap();
    (d, path)
}

#[test]
fn check_accepts_a_plugin_and_prints_what_it_says_about_itself() {
    let o = wisp()
        .arg("check")
        .arg(plugin("audit_log"))
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.starts_with("ok: audit-log 0.1.0 is a wisp:plugin/plugin@0.3.0 component"),
        "{out}"
    );
    // Built with the Rust SDK of ABI 0.3: it can decide at admission; a 0.2 build cannot.
    assert!(
        out.contains("takes admission requests (exports wisp:plugin/admission@0.3.0)"),
        "{out}"
    );
    let o = wisp()
        .arg("check")
        .arg(plugin("test_raw_batch"))
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("is a wisp:plugin/plugin@0.2.0 component"),
        "{out}"
    );
    assert!(!out.contains("admission"), "{out}");
}

#[test]
fn check_refuses_bad_modules_and_bad_settings_with_one_clear_error() {
    let d = tempfile::tempdir().unwrap();
    let junk = d.path().join("junk.wasm");
    std::fs::write(&junk, "not wasm at all").unwrap();
    let o = wisp().arg("check").arg(&junk).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let (_, err) = text(&o);
    assert!(
        err.trim_end()
            .ends_with("not a WebAssembly file (it does not start with \"\\0asm\")"),
        "{err}"
    );
    assert_eq!(err.lines().filter(|l| l.starts_with("error:")).count(), 1);

    let o = wisp()
        .arg("check")
        .arg(plugin("test_wrong_world"))
        .output()
        .unwrap();
    assert!(
        text(&o)
            .1
            .contains("not a wisp:plugin/plugin component (0.3.0, 0.2.0 or 0.1.0)"),
        "{}",
        text(&o).1
    );

    let o = wisp()
        .arg("check")
        .arg(plugin("image_policy"))
        .args(["--settings", r#"{"denyLatest": 1}"#])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).1.contains("init: settings rejected: settings.denyLatest: invalid type: integer `1`, expected a boolean"), "{}", text(&o).1);

    // A plugin that panics in init (printing to stderr on its way down) is one clear error, not
    // a crash of the host.
    let o = wisp()
        .arg("check")
        .arg(plugin("test_faults"))
        .args(["--settings", r#"{"panicInInit": true}"#])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o).1);
    let (_, err) = text(&o);
    assert!(
        err.contains("init") && err.contains("panic in init on purpose"),
        "{err}"
    );
    assert!(!err.contains("Cannot start a runtime"), "{err}");
}

#[test]
fn run_refuses_a_bad_config_naming_file_field_and_problem() {
    let (d, cfg) = setup();
    let bad = std::fs::read_to_string(&cfg).unwrap().replace(
        "informers: [pods]\n  - name: policy",
        "informers: [nodes]\n  - name: policy",
    );
    std::fs::write(&cfg, bad).unwrap();
    let o = wisp().args(["run", "--config"]).arg(&cfg).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o).1;
    assert!(
        err.contains(&format!(
            "error: {}: plugins[0].informers[0]: unknown informer \"nodes\" (defined: pods)",
            cfg.display()
        )),
        "{err}"
    );
    let good = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("[nodes]", "[pods]");
    std::fs::write(&cfg, good.replace("workers: 3", "workers: 0")).unwrap();
    let o = wisp().args(["run", "--config"]).arg(&cfg).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o).1;
    assert!(
        err.contains(&format!(
            "error: {}: executor.workers: must be at least 1 (omit it for one worker per core)",
            cfg.display()
        )),
        "{err}"
    );

    // A kind the directory cluster does not serve refuses the start, naming the field.
    std::fs::write(&cfg, good.replace("kind: Pod}", "kind: Podd}")).unwrap();
    let o = wisp().args(["run", "--config"]).arg(&cfg).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o).1;
    assert!(
        err.contains(&format!(
            "error: {}: informers[0].kind: Kubernetes 1.36 serves no kind \"Podd\" in v1; it serves: Binding,",
            cfg.display()
        )),
        "{err}"
    );
    drop(d);
}

#[test]
fn run_on_a_directory_delivers_file_changes_to_plugins_and_serves_admin_endpoints() {
    let (d, cfg) = setup();
    let admin = free_addr();
    let _running = run_host(&cfg, admin, "60s");
    assert_eq!(
        get(admin, "/healthz").map(|r| r.0).or_else(|| {
            until("admin up", || get(admin, "/healthz").is_some());
            get(admin, "/healthz").map(|r| r.0)
        }),
        Some(200)
    );
    until("ready", || {
        get(admin, "/readyz").is_some_and(|r| r.0 == 200)
    });

    let cluster = d.path().join("cluster");
    std::fs::write(cluster.join("bad.yaml"), pod("bad-1", "redis:latest")).unwrap();
    std::fs::write(cluster.join("web.yaml"), pod("web-1", "nginx:1.28")).unwrap();
    let metric = |name: &str| -> Option<String> {
        let body = get(admin, "/metrics")?.1;
        body.lines()
            .find(|l| l.starts_with(name))
            .map(str::to_owned)
    };
    until("add and update seen", || {
        metric("wisp_plugin_audit_events_total{event=\"updated\"")
            .is_some_and(|l| l.ends_with(" 1"))
            && metric("wisp_plugin_audit_events_total{event=\"added\"")
                .is_some_and(|l| l.ends_with(" 2"))
    });
    until("policy violation", || {
        metric("wisp_plugin_policy_violating_pods{plugin=\"policy\",rule=\"latest-tag\"}")
            .is_some_and(|l| l.ends_with(" 1.0") || l.ends_with(" 1"))
    });
    std::fs::remove_file(cluster.join("bad.yaml")).unwrap();
    until("delete seen", || {
        metric("wisp_plugin_audit_events_total{event=\"deleted\"")
            .is_some_and(|l| l.ends_with(" 1"))
    });
    until("violation cleared", || {
        metric("wisp_plugin_policy_violating_pods{plugin=\"policy\",rule=\"latest-tag\"}")
            .is_some_and(|l| l.ends_with(" 0.0") || l.ends_with(" 0"))
    });

    let (code, plugins) = get(admin, "/plugins").unwrap();
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&plugins).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names, ["audit", "policy"]);
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .all(|p| p["state"] == "running")
    );
    let (_, m) = get(admin, "/metrics").unwrap();
    assert!(
        m.contains("wisp_informer_cache_size{informer=\"pods\"} 1"),
        "{m}"
    );
    assert!(m.contains("wisp_executor_workers 3"), "{m}");
    assert!(m.contains("wisp_dir_files_unread 0"), "{m}");

    // A manifest that does not parse is named in /readyz and counted in /metrics; the host
    // stays ready (the other files count), and fixing the file clears it.
    let broken = cluster.join("broken.yaml");
    std::fs::write(&broken, "apiVersion: v1\nkind: Pod\nmetadata: {name: x\n").unwrap();
    until("the broken file reported", || {
        get(admin, "/readyz").is_some_and(|(code, body)| {
            code == 200
                && body
                    .lines()
                    .any(|l| l.starts_with("manifest ") && l.contains("broken.yaml"))
        })
    });
    assert!(metric("wisp_dir_files_unread").is_some_and(|l| l.ends_with(" 1")));
    // An object an API server would refuse is left out and named, as far as /plugins.
    std::fs::write(
        &broken,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: no-containers}\nspec: {}\n",
    )
    .unwrap();
    until("the refused object named in /plugins", || {
        get(admin, "/plugins").is_some_and(|(_, body)| {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            v.as_array().unwrap().iter().all(|p| {
                p["unreadManifests"].as_array().is_some_and(|u| {
                    u.len() == 1
                        && u[0].as_str().is_some_and(|l| {
                            l.contains("broken.yaml: Pod \"no-containers\" is invalid: spec.containers: Required value")
                        })
                })
            })
        })
    });
    assert!(metric("wisp_dir_files_unread").is_some_and(|l| l.ends_with(" 1")));
    std::fs::write(&broken, pod("fixed-1", "nginx:1.28")).unwrap();
    until("the fixed file read", || {
        metric("wisp_dir_files_unread").is_some_and(|l| l.ends_with(" 0"))
            && get(admin, "/readyz").is_some_and(|(_, body)| !body.contains("broken.yaml"))
            && get(admin, "/plugins").is_some_and(|(_, body)| !body.contains("unreadManifests"))
    });
}

#[test]
fn record_then_replay_round_trips_the_notifications() {
    let (d, cfg) = setup();
    std::fs::write(
        d.path().join("cluster/db.yaml"),
        pod("db-0", "postgres:latest"),
    )
    .unwrap();
    let out = d.path().join("events.jsonl");
    let o = wisp()
        .args(["record", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .arg("--until-synced")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let lines = std::fs::read_to_string(&out).unwrap();
    assert_eq!(lines.lines().count(), 2, "{lines}");
    assert!(
        lines
            .lines()
            .all(|l| l.contains("\"event\":\"added\"") && l.contains("\"initialList\":true"))
    );

    let o = wisp()
        .args(["replay", "--plugin"])
        .arg(plugin("image_policy"))
        .arg("--events")
        .arg(&out)
        .output()
        .unwrap();
    let (stdout, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(stdout.starts_with("plugin image-policy 0.1.0"), "{stdout}");
    assert!(
        stdout.contains("pods added shop/db-0 rv=") && stdout.contains("-> ok"),
        "{stdout}"
    );
    assert!(
        stdout.contains("    warn: violation latest-tag shop/db-0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("2 notifications: 2 ok, 0 failed"),
        "{stdout}"
    );
    assert!(
        stdout.contains("counter policy_violations_total{rule=\"latest-tag\"} = 1"),
        "{stdout}"
    );
}

#[test]
fn check_and_replay_name_the_plugin_as_it_names_itself_with_the_file_as_its_path() {
    let (d, cfg) = setup();
    let copy = d.path().join("renamed.wasm");
    std::fs::copy(plugin("test_faults"), &copy).unwrap();

    let o = wisp()
        .arg("check")
        .arg(&copy)
        .env("XDG_CACHE_HOME", d.path().join("cache"))
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    // The load reported is the first (a compile here), not the second, from memory, in words
    // and whole milliseconds (or seconds with one decimal).
    let load = |out: &str, how: &str| {
        let line = out
            .lines()
            .find(|l| l.starts_with(how))
            .unwrap_or_else(|| panic!("no line starting {how:?}: {out}"));
        let took = line[how.len()..].split(';').next().unwrap();
        let (n, unit) = took.split_once(' ').unwrap_or(("", ""));
        assert!(
            matches!(unit, "µs" | "ms" | "s" | "min") && n.parse::<f64>().is_ok(),
            "{line}"
        );
        assert!(
            line.contains("; instantiate + describe + init in "),
            "{line}"
        );
    };
    load(&out, "compiled in ");
    assert!(
        out.starts_with(&format!(
            "ok: test-faults 0.1.0 is a wisp:plugin/plugin@0.3.0 component ({})",
            copy.display()
        )),
        "{out}"
    );

    // Again with the same cache: the compiled module comes from it.
    let o = wisp()
        .arg("check")
        .arg(&copy)
        .env("XDG_CACHE_HOME", d.path().join("cache"))
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    load(&out, "loaded from the module cache in ");

    // Its errors and its log lines (stderr as it panics) carry its declared name.
    let o = wisp()
        .arg("check")
        .arg(&copy)
        .args(["--settings", r#"{"panicInInit": true}"#])
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("plugin \"test-faults\": init:"), "{err}");
    assert!(err.contains("plugin=\"test-faults\""), "{err}");
    assert!(!err.contains("renamed\""), "{err}");
    assert!(!err.contains("plugin=\"renamed\""), "{err}");

    let events = d.path().join("events.jsonl");
    let o = wisp()
        .args(["record", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(&events)
        .arg("--until-synced")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let o = wisp()
        .args(["replay", "--plugin"])
        .arg(&copy)
        .arg("--events")
        .arg(&events)
        .args(["--settings", r#"{"mode": "trap"}"#])
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(
        out.starts_with(&format!("plugin test-faults 0.1.0 ({})", copy.display())),
        "{out}"
    );
    assert!(out.contains("-> failed"), "{out}");
    assert!(err.contains("plugin=\"test-faults\""), "{err}");
    assert!(!err.contains("plugin=\"renamed\""), "{err}");
}

#[test]
fn check_names_an_import_the_host_does_not_provide() {
    let o = wisp()
        .arg("check")
        .arg(plugin("test_missing_import"))
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("imports wasi:keyvalue/store@0.2.0-draft, which Wisp does not provide"),
        "{err}"
    );
    assert!(!err.contains("not a wisp:plugin/plugin component"), "{err}");
    assert_eq!(
        err.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{err}"
    );
    // A plugin importing wasi:http (as a default JavaScript build does) loads.
    let o = wisp()
        .arg("check")
        .arg(plugin("test_http"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
}

#[test]
fn rbac_grants_exactly_list_and_watch_on_what_the_config_reads() {
    let (_d, cfg) = setup();
    let o = wisp()
        .args(["rbac", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("kind: ClusterRole\n")
            && out.contains("resources: [\"pods\"]\n    verbs: [list, watch]"),
        "{out}"
    );
}

#[test]
fn help_explains_each_command() {
    let o = wisp().arg("--help").output().unwrap();
    let out = text(&o).0;
    for cmd in [
        "run", "check", "replay", "test", "record", "rbac", "push", "demo",
    ] {
        assert!(
            out.lines().any(|l| l.trim_start().starts_with(cmd)),
            "{cmd} missing from --help:\n{out}"
        );
    }
}

fn request(addr: SocketAddr, method: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    // A plain HTTP/1.1 request; the reply is read to the end (Connection: close).
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let (head, body) = buf.split_once("\r\n\r\n")?;
    Some((
        head.split_whitespace().nth(1)?.parse().ok()?,
        body.to_owned(),
    ))
}

fn plugins_json(admin: SocketAddr) -> Vec<serde_json::Value> {
    get(admin, "/plugins")
        .and_then(|(_, b)| serde_json::from_str::<Vec<serde_json::Value>>(&b).ok())
        .unwrap_or_default()
}

fn plugin_field(admin: SocketAddr, name: &str, field: &str) -> serde_json::Value {
    plugins_json(admin)
        .into_iter()
        .find(|p| p["name"] == name)
        .map(|p| p[field].clone())
        .unwrap_or_default()
}

/// Same component with a custom section appended: a new hash, the same behaviour.
fn variant_bytes(module: &Path, tag: u8) -> Vec<u8> {
    let mut b = std::fs::read(module).unwrap();
    b.extend_from_slice(&[0, 3, 1, b'w', tag]);
    b
}

#[test]
fn a_running_host_takes_module_and_config_changes_live_and_refuses_bad_ones() {
    let (d, cfg) = setup();
    let module = d.path().join("audit.wasm");
    std::fs::copy(plugin("audit_log"), &module).unwrap();
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(&plugin("audit_log").display().to_string(), "audit.wasm");
    std::fs::write(&cfg, &text).unwrap();
    let admin = free_addr();
    let _running = run_host(&cfg, admin, "120s");
    until("ready", || {
        get(admin, "/readyz").is_some_and(|r| r.0 == 200)
    });
    assert_eq!(plugin_field(admin, "audit", "generation"), 1);

    // A new module file: reloaded in place.
    std::fs::write(&module, variant_bytes(&plugin("audit_log"), b'2')).unwrap();
    until("module reload", || {
        plugin_field(admin, "audit", "generation") == 2
    });
    // A broken module file: refused, the running version stays.
    std::fs::write(&module, b"\0asm broken").unwrap();
    until("refused", || {
        plugin_field(admin, "audit", "counters")["reloadFailures"] == 1
    });
    assert_eq!(plugin_field(admin, "audit", "generation"), 2);
    assert!(
        plugin_field(admin, "audit", "lastError")
            .as_str()
            .unwrap_or("")
            .starts_with("reload refused, previous version kept")
    );
    std::fs::write(&module, variant_bytes(&plugin("audit_log"), b'3')).unwrap();
    let start = Instant::now();
    while plugin_field(admin, "audit", "generation") != 3 {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "good again: {:#?}",
            plugins_json(admin)
                .into_iter()
                .find(|p| p["name"] == "audit")
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Admin trigger.
    let (code, body) = request(admin, "POST", "/plugins/audit/reload").unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(plugin_field(admin, "audit", "generation"), 4);
    assert_eq!(
        request(admin, "POST", "/plugins/nope/reload").unwrap().0,
        404
    );

    // Config: a plugin added gets the cache replayed; a bad config changes nothing; removal.
    let added = format!("{text}  - name: audit2\n    module: audit.wasm\n    informers: [pods]\n");
    std::fs::write(&cfg, &added).unwrap();
    until("added", || {
        plugin_field(admin, "audit2", "counters")["delivered"] == 1
    });
    std::fs::write(
        &cfg,
        added.replace(
            "informers: [pods]\n  - name: audit2",
            "informers: [nodes]\n  - name: audit2",
        ),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        plugins_json(admin).len(),
        3,
        "a config that fails validation changes nothing"
    );
    std::fs::write(&cfg, &text).unwrap();
    until("removed", || plugins_json(admin).len() == 2);
    let (code, _) = request(admin, "POST", "/reload").unwrap();
    assert_eq!(code, 200);

    // The number of workers needs a restart: such a config changes nothing.
    std::fs::write(&cfg, added.replace("workers: 3", "workers: 5")).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(plugins_json(admin).len(), 2, "nothing changed");
    let (code, body) = request(admin, "POST", "/reload").unwrap();
    assert_eq!(code, 409, "{body}");
    assert!(
        body.contains("executor changed; the number of workers needs a restart"),
        "{body}"
    );
}

#[test]
fn log_format_json_writes_one_json_object_per_line() {
    let (d, cfg) = setup();
    let out = d.path().join("e.jsonl");
    let o = wisp()
        .args(["--log-format", "json", "record", "--config"])
        .arg(&cfg)
        .arg("--out")
        .arg(&out)
        .arg("--until-synced")
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with('{')).collect();
    assert!(!lines.is_empty(), "{err}");
    for l in &lines {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(v.get("level").is_some() && v.get("fields").is_some(), "{l}");
    }
    assert!(
        lines.iter().any(|l| l.contains("informer started")),
        "{err}"
    );
}

/// The example plugins ship fixture files (`plugins/NAME/fixtures.yaml`); `wisp test` runs each
/// against its built module.
#[test]
fn the_example_plugins_pass_their_fixtures() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins");
    let mut ran = Vec::new();
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path();
        let fixtures = dir.join("fixtures.yaml");
        if !fixtures.is_file() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().replace('-', "_");
        let o = wisp()
            .args(["test", "--plugin"])
            .arg(plugin(&name))
            .arg(&fixtures)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{name}:\n{out}\n{err}");
        let last = out.lines().last().unwrap_or_default().to_owned();
        assert!(
            last.ends_with("failed") && last.contains(" 0 failed"),
            "{out}"
        );
        ran.push(name);
    }
    ran.sort();
    assert_eq!(
        ran,
        ["audit_log", "image_policy", "inventory", "team_labeler"]
    );
}

/// A case that does not hold fails the command, and the output says what differs: outcomes,
/// verdicts, actions, logs and counters, each against what the plugin did.
#[test]
fn test_names_what_differs_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("wrong.yaml");
    std::fs::write(
        &f,
        r#"
informer: pods
cases:
  - name: right
    steps:
      - add: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: ns, uid: u1, resourceVersion: "1"}, spec: {containers: [{name: c, image: "x:1", resources: {limits: {cpu: "1", memory: 1Gi}}}]}}
    expect: {verdicts: []}
  - name: wrong
    steps:
      - add: {apiVersion: v1, kind: Pod, metadata: {name: b, namespace: ns, uid: u2, resourceVersion: "2"}, spec: {containers: [{name: c, image: "x"}]}}
      - add: {apiVersion: v1, kind: Pod, metadata: {name: c, namespace: ns, uid: u3, resourceVersion: "3"}, spec: "not a pod spec"}
    expect:
      outcomes: [ok, ok]
      verdicts: [{rule: latest-tag, object: ns/b, severity: low}]
      actions: [{verb: patch, kind: Pod, object: ns/b}]
      logs: ["no such line"]
      counters: {'policy_violations_total{rule="latest-tag"}': 2}
  - name: init
    settings: {denyLatest: 3}
    expect: {init: "something else"}
"#,
    )
    .unwrap();
    let o = wisp()
        .args(["test", "--plugin"])
        .arg(plugin("image_policy"))
        .arg(&f)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}");
    assert!(err.contains("2 of 3 cases failed"), "{err}");
    let shown: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("ok   ") || l.starts_with("FAIL "))
        .map(|l| l.rsplit_once(" (").map_or(l, |(case, _)| case))
        .collect();
    assert_eq!(shown, ["ok   right", "FAIL wrong", "FAIL init"], "{out}");
    for want in [
        // The second pod's spec does not parse: its outcome is the plugin's error.
        "outcomes: expected",
        "error: ",
        // The severity is high, not low; both rules' violations are listed.
        "verdicts: expected",
        "latest-tag ns/b high: container c uses image \"x\" without a pinned tag",
        "missing-limits ns/b medium",
        "actions: expected",
        "logs: no line containing \"no such line\"",
        "counter policy_violations_total{rule=\"latest-tag\"}: expected 2, got 1",
        "FAIL init",
        "init: expected a refusal containing \"something else\", got \"settings.denyLatest: invalid type",
    ] {
        assert!(out.contains(want), "{want:?} not in:\n{out}");
    }
}

/// `wisp test` grants the informers the plugin's describe names (the team labeler: pods and
/// namespaces) when the fixture names none, so a pod's step reads the namespaces cache; a case's
/// `informers` grants only those. Two fixture files, five cases: the module is loaded (compiled,
/// in a fresh module cache) once for the run, and each case gets a fresh instance (its counter
/// starts at 0).
#[test]
fn test_grants_the_plugins_own_informers_and_compiles_once_per_run() {
    let dir = tempfile::tempdir().unwrap();
    let pod = |name: &str, rv: u32| {
        format!(
            "{{apiVersion: v1, kind: Pod, metadata: {{name: {name}, namespace: shop, uid: u-{name}, resourceVersion: \"{rv}\"}}}}"
        )
    };
    let ns = "{apiVersion: v1, kind: Namespace, metadata: {name: shop, uid: u-ns, resourceVersion: \"1\", labels: {team: payments}}}";
    let grants =
        "actions:\n  grants: [{verbs: [patch], apiVersion: v1, kind: Pod, namespaces: [shop]}]\n";
    let labelled = |name: &str| {
        format!(
            "    expect:\n      actions: [{{verb: patch, kind: Pod, object: shop/{name}}}]\n      counters: {{labelled_total: 1}}\n"
        )
    };
    let one = format!(
        "{grants}cases:\n\
         - name: no namespace cached, nothing to copy\n    steps: [{{add: {}}}]\n    expect: {{actions: [], outcomes: [ok]}}\n\
         - name: the namespace cached\n    cache: {{namespaces: [{ns}]}}\n    steps: [{{add: {}}}]\n{}\
         - name: only pods granted\n    informers: [pods]\n    steps: [{{add: {}}}]\n    expect: {{outcomes: [\"error: reading namespace shop: \"]}}\n",
        pod("a", 2),
        pod("b", 3),
        labelled("b"),
        pod("c", 4),
    );
    let two = format!(
        "{grants}cases:\n\
         - name: a namespace step\n    cache: {{pods: [{}]}}\n    steps: [{{add: {ns}, informer: namespaces}}]\n{}\
         - name: another\n    cache: {{namespaces: [{ns}]}}\n    steps: [{{add: {}}}]\n{}",
        pod("d", 5),
        labelled("d"),
        pod("e", 6),
        labelled("e"),
    );
    let (f1, f2) = (dir.path().join("one.yaml"), dir.path().join("two.yaml"));
    std::fs::write(&f1, one.replace("\n- name", "\n  - name")).unwrap();
    std::fs::write(&f2, two.replace("\n- name", "\n  - name")).unwrap();
    let o = wisp()
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .args(["test", "--plugin"])
        .arg(plugin("team_labeler"))
        .args([&f1, &f2])
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("3 cases: 3 passed, 0 failed"), "{out}");
    assert!(out.contains("2 cases: 2 passed, 0 failed"), "{out}");
    let loads: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(", compiled in") || l.contains(", loaded from"))
        .collect();
    assert_eq!(loads.len(), 1, "{out}");
    assert!(
        loads[0].contains("team-labeler 0.1.0 (informers: pods, namespaces), compiled in"),
        "{out}"
    );
    assert_eq!(
        err.matches("compiled in a child process").count(),
        1,
        "{err}"
    );
    // Once more: the module cache has it, still one load.
    let o = wisp()
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .args(["test", "--plugin"])
        .arg(plugin("team_labeler"))
        .args([&f1, &f2])
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let loads: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(", compiled in") || l.contains(", loaded from"))
        .collect();
    assert_eq!(loads.len(), 1, "{out}");
    assert!(
        loads[0].contains("loaded from the module cache in"),
        "{out}"
    );
    assert!(!err.contains("compiled in a child process"), "{err}");
}

/// A fixture that cannot be run is one error naming the file, the case and what is wrong.
#[test]
fn test_refuses_a_bad_fixture_naming_where() {
    let dir = tempfile::tempdir().unwrap();
    for (fixture, want) in [
        (
            "cases:\n  - name: x\n    stpes: []\n",
            "unknown field `stpes`",
        ),
        ("cases: []\n", "no cases"),
        (
            "cases:\n  - name: upd\n    steps:\n      - update: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: ns}}\n",
            "case 1 (\"upd\"): step 1: ns/a is not in the cache",
        ),
        (
            // A plain `n` is a boolean in YAML as kubectl reads it: said, not keyed as "a".
            "cases:\n  - name: upd\n    steps:\n      - update: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: n}}\n",
            "case 1 (\"upd\"): step 1: metadata.namespace: expected a string, got false",
        ),
        (
            "cases:\n  - name: f\n    steps:\n      - add: {file: missing.yaml}\n",
            "missing.yaml",
        ),
        (
            "informers: [pods]\ncases:\n  - name: c\n    cache: {nodes: [{apiVersion: v1, kind: Node, metadata: {name: n1}}]}\n",
            "case 1 (\"c\"): cache.nodes: informer \"nodes\" is not granted (the file's informers: pods)",
        ),
        (
            "cases:\n  - name: s\n    informers: []\n    steps:\n      - add: {apiVersion: v1, kind: Pod, metadata: {name: a, namespace: ns}}\n",
            "case 1 (\"s\"): step 1: informer \"objects\" is not granted (the case's informers: none)",
        ),
    ] {
        let f = dir.path().join("bad.yaml");
        std::fs::write(&f, fixture).unwrap();
        let o = wisp()
            .args(["test", "--plugin"])
            .arg(plugin("audit_log"))
            .arg(&f)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(!o.status.success(), "{fixture}: {out}");
        assert!(err.contains("bad.yaml"), "{fixture}: {err}");
        assert!(err.contains(want), "{want:?} not in {err}");
    }
}

/// A fixture may come with a plugin under review: its object files are read only inside the
/// fixture's directory, only as regular files of at most 16 MiB. A `..` or a link out of it,
/// an absolute path, `/dev/zero`, a FIFO and a larger file are each one error naming the path
/// and why, at once (`/dev/zero` used to be read until the OOM killer came; a FIFO blocked for
/// ever), and nothing of the file read reaches the output.
#[cfg(unix)]
#[test]
fn test_reads_object_files_only_inside_the_fixtures_directory_and_under_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::create_dir(&secret).unwrap();
    let token = "token: s3cr3t-t0ken";
    std::fs::write(secret.join("kubeconfig"), format!("{token}\n")).unwrap();
    let fx = dir.path().join("fx");
    std::fs::create_dir(&fx).unwrap();
    std::os::unix::fs::symlink("../secret/kubeconfig", fx.join("link.yaml")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", fx.join("zero.yaml")).unwrap();
    let fifo = fx.join("pipe.yaml");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let big = std::fs::File::create(fx.join("big.yaml")).unwrap();
    big.set_len((16 << 20) + 1).unwrap();
    let absolute = secret.join("kubeconfig").display().to_string();
    let outside = format!(
        "resolves to {}, outside {} (only files inside it are read)",
        secret.canonicalize().unwrap().join("kubeconfig").display(),
        fx.canonicalize().unwrap().display()
    );
    let absolute_refused = format!(
        "is an absolute path (only paths relative to {} are read)",
        fx.display()
    );
    for (file, want) in [
        ("../secret/kubeconfig", outside.as_str()),
        ("link.yaml", outside.as_str()),
        (absolute.as_str(), absolute_refused.as_str()),
        ("/dev/zero", absolute_refused.as_str()),
        ("zero.yaml", "resolves to /dev/zero, outside"),
        (
            "pipe.yaml",
            "is a FIFO, not a regular file (only regular files are read)",
        ),
        (
            "big.yaml",
            "is 16777217 bytes, over the cap of 16777216 bytes",
        ),
    ] {
        let f = fx.join("hostile.yaml");
        std::fs::write(
            &f,
            format!("cases:\n  - name: f\n    steps:\n      - add: {{file: {file:?}}}\n"),
        )
        .unwrap();
        let start = Instant::now();
        let o = wisp()
            .args(["test", "--plugin"])
            .arg(plugin("audit_log"))
            .arg(&f)
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert!(start.elapsed() < Duration::from_secs(20), "{file}");
        assert!(!o.status.success(), "{file}: {out}");
        assert!(
            err.contains(&format!("object file {file:?}: {want}")),
            "{file}: {want:?} not in {err}"
        );
        assert!(
            !out.contains("s3cr3t") && !err.contains("s3cr3t"),
            "{out}{err}"
        );
    }
    // The fixture file itself: a FIFO is refused, not waited on.
    let o = wisp()
        .args(["test", "--plugin"])
        .arg(plugin("audit_log"))
        .arg(&fifo)
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("pipe.yaml: is a FIFO, not a regular file"),
        "{err}"
    );
}

/// `wisp push` through the binary: bad input gets one clear error; against a real
/// `docker-registry` (skipped when it is missing, except under `CI=true`), it publishes and
/// prints the digest, which the registry then serves (tests/tests/integration/oci.rs covers the rest).
#[test]
fn push_names_bad_input_and_publishes_to_a_real_registry() {
    let d = tempfile::tempdir().unwrap();
    let module = d.path().join("m.wasm");
    std::fs::write(&module, b"\0asm\x01\0\0\0").unwrap();
    let m = module.to_str().unwrap();
    for (args, want) in [
        (
            vec![m, "oci://localhost:5000/acme/m"],
            "no tag and no digest",
        ),
        (
            vec!["missing.wasm", "oci://localhost:5000/acme/m:v1"],
            "missing.wasm",
        ),
        (
            vec![m, "oci://localhost:5000/acme/m:v1", "--sign", "nokey.pem"],
            "--sign: key file nokey.pem does not exist",
        ),
        (
            vec![m, "oci://127.0.0.1:9/acme/m:v1", "--insecure"],
            "http://127.0.0.1:9/v2/acme/m/blobs/",
        ),
    ] {
        let o = wisp().arg("push").args(&args).output().unwrap();
        let (_, err) = text(&o);
        assert!(!o.status.success() && err.contains(want), "{args:?}: {err}");
    }
    if Command::new("docker-registry")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "docker-registry is missing: CI must have it (see .ci/run)"
        );
        eprintln!("skipped the registry part: docker-registry is missing");
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = d.path().join("registry.yml");
    std::fs::write(
        &cfg,
        format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            d.path().join("storage").display()
        ),
    )
    .unwrap();
    let mut registry = Command::new("docker-registry")
        .args(["serve", cfg.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let t0 = Instant::now();
    while TcpStream::connect(addr).is_err() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let key = d.path().join("key.pem");
    let signing = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
        ])
        .arg(&key)
        .status()
        .is_ok_and(|s| s.success());
    let mut cmd = wisp();
    cmd.args([
        "push",
        m,
        &format!("oci://127.0.0.1:{port}/acme/m:v1"),
        "--insecure",
    ]);
    if signing {
        cmd.arg("--sign").arg(&key);
    }
    let o = cmd.output().unwrap();
    let (out, err) = text(&o);
    let _ = registry.kill();
    let _ = registry.wait();
    assert!(o.status.success(), "{out}{err}");
    let digest = out
        .split('@')
        .nth(1)
        .and_then(|s| s.lines().next())
        .unwrap_or_else(|| panic!("no digest printed: {out}"));
    assert!(digest.starts_with("sha256:") && digest.len() == 71, "{out}");
    if signing {
        // A keyed Sigstore bundle attached as a referrer; the legacy `.sig` tag only when asked
        // (`--legacy-signature`, tests/tests/integration/oci.rs).
        assert!(out.contains("signed: Sigstore bundle 127.0.0.1:"), "{out}");
        assert!(!out.contains(".sig"), "{out}");
    }
}
