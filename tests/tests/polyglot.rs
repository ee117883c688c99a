//! The Python and JavaScript SDKs and example plugins (`plugin-sdk/python`, `plugin-sdk/js`,
//! `plugins/python/*`, `plugins/js/*`, built by `cargo xtask plugins` into
//! `plugins/dist/<name>-py.wasm` / `<name>-js.wasm`): their decoders read every ABI test vector,
//! and their audit-log and image-policy do what the Rust examples do, notification by
//! notification and in batches of 64 under the default limits: same outcomes, log lines,
//! metrics and verdicts. A notification that makes them raise is that notification's error
//! outcome; the instance and its state stay.
//!
//! Without the components (or python3 / node for the SDK tests) these tests skip with a printed
//! reason, except under `CI=true`, where they fail.
//!
//! A test binary of its own (not a module of `integration`): compiling the 12 to 20 MB
//! components is a load the timed tests there should not share.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use wisp_host::informer::{Delivery, Indexer, Notification};
use wisp_host::plugin::status::{PluginCounters, PluginStatus};
use wisp_host::plugin::{EngineConfig, PluginEngine};

/// Skips (returns None) with a printed reason, or fails under `CI=true`.
fn missing<T>(what: &str) -> Option<T> {
    common::skip_unless_ci(what);
    None
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo root")
        .to_path_buf()
}

/// `plugins/dist/<name>.wasm` of a Python or JavaScript plugin, when built.
fn component(name: &str) -> Option<PathBuf> {
    let dist = common::plugin_path("audit_log")
        .parent()
        .expect("dist")
        .to_path_buf();
    let p = dist.join(format!("{name}.wasm"));
    if p.is_file() {
        Some(p)
    } else {
        missing(&format!(
            "{} is not built: `cargo xtask plugins` builds it (needs python3 and node)",
            p.display()
        ))
    }
}

/// What the module cache's artifacts were compiled from: the components in `dist`, by name,
/// size and modification time.
fn cache_key(dist: &Path) -> String {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dist)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|x| x == "wasm"));
    files.sort();
    files
        .iter()
        .map(|p| {
            let m = std::fs::metadata(p).ok();
            let mtime = m.as_ref().and_then(|m| m.modified().ok());
            format!("{} {:?} {mtime:?}\n", p.display(), m.map(|m| m.len()))
        })
        .collect()
}

/// One engine for the binary, on a module cache kept between runs (in the target dir's test
/// tmpdir): a debug host spends ~20-60 s compiling each interpreted component, once. The cache
/// is emptied when a component changed, so stale ~37 MB artifacts do not pile up (the host's
/// cache keeps every artifact it wrote).
fn engine() -> Arc<PluginEngine> {
    static ENGINE: std::sync::OnceLock<Arc<PluginEngine>> = std::sync::OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
            let dir = tmp.join("polyglot-modules");
            let stamp = tmp.join("polyglot-modules.from");
            let key = cache_key(common::plugin_path("audit_log").parent().expect("dist"));
            if std::fs::read_to_string(&stamp).ok().as_deref() != Some(key.as_str()) {
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::write(&stamp, &key).unwrap();
            }
            std::fs::create_dir_all(&dir).unwrap();
            PluginEngine::new(EngineConfig {
                cache_dir: Some(dir),
                ..EngineConfig::default()
            })
            .unwrap()
        })
        .clone()
}

/// Runs a language's unit tests (which read `wit/abi-vectors.json`).
fn sdk_tests(program: &str, args: &[&str]) {
    let out = match std::process::Command::new(program)
        .args(args)
        .current_dir(root())
        .output()
    {
        Ok(o) => o,
        Err(e) => return missing(&format!("{program} cannot run: {e}")).unwrap_or(()),
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program} {args:?}:\n{text}");
    eprintln!("{text}");
}

#[test]
fn the_python_sdk_reads_every_abi_vector() {
    sdk_tests(
        "python3",
        &[
            "-m",
            "unittest",
            "discover",
            "-v",
            "-s",
            "plugin-sdk/python/tests",
        ],
    );
}

#[test]
fn the_js_sdk_reads_every_abi_vector() {
    sdk_tests("node", &["--test", "plugin-sdk/js/test/"]);
}

fn container(name: &str, image: &str, limits: bool) -> Value {
    let mut c = json!({"name": name, "image": image});
    if limits {
        c["resources"] = json!({"limits": {"cpu": "1", "memory": "1Gi"}});
    }
    c
}

fn pod(ns: &str, name: &str, rv: u64, spec: Option<Value>) -> Value {
    let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "namespace": ns, "name": name, "uid": format!("uid-{name}"),
        "resourceVersion": rv.to_string(), "labels": {"app": name}}});
    if let Some(s) = spec {
        p["spec"] = s;
    }
    p
}

fn pod_of(ns: &str, name: &str, rv: u64, containers: Vec<Value>) -> Value {
    pod(ns, name, rv, Some(json!({ "containers": containers })))
}

/// A recording (as `wisp record` writes it) touching every branch of both examples: initial
/// list and live adds, changes and resyncs, deletes seen and missed, exempt namespaces, tags,
/// digests, registry ports, init containers, two violations in one pod, an image to escape, a
/// pod without spec, a cluster-scoped object of another informer, and a pod neither plugin can
/// read (`spec.containers` not a list: an error outcome in every language).
fn recording() -> Vec<Value> {
    let web = pod_of(
        "shop",
        "web-0",
        10,
        vec![container("web", "nginx:1.27", true)],
    );
    let cache = pod_of(
        "shop",
        "cache-0",
        2,
        vec![container("redis", "redis:latest", false)],
    );
    let api = {
        let mut p = pod_of(
            "shop",
            "api-0",
            4,
            vec![container("api", "registry:5000/api", true)],
        );
        p["spec"]["initContainers"] = json!([container("migrate", "busybox", false)]);
        p
    };
    let two = pod_of(
        "shop",
        "cache-1",
        6,
        vec![
            container("a", "redis", false),
            container("b", "memcached:latest", false),
        ],
    );
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u-n1",
        "resourceVersion": "3"}});
    let mut seq = BTreeMap::<&str, u64>::new();
    let mut out = Vec::new();
    let mut push = |inf: &'static str, mut v: Value| {
        let s = seq.entry(inf).or_default();
        *s += 1;
        v["informer"] = json!(inf);
        v["seq"] = json!(*s);
        out.push(v);
    };
    let added =
        |o: &Value, initial: bool| json!({"event": "added", "initialList": initial, "object": o});
    let updated = |old: &Value, new: &Value| json!({"event": "updated", "old": old, "object": new});
    let deleted = |o: &Value, unknown: bool| json!({"event": "deleted", "finalStateUnknown": unknown, "object": o});
    push("pods", added(&web, true));
    push("pods", added(&cache, true));
    push(
        "pods",
        added(
            &pod_of(
                "kube-system",
                "proxy",
                3,
                vec![container("p", "kube-proxy", false)],
            ),
            true,
        ),
    );
    push("nodes", added(&node, true));
    push("pods", added(&api, false));
    push(
        "pods",
        added(
            &pod_of(
                "shop",
                "pinned-0",
                5,
                vec![container("app", "nginx@sha256:0123", false)],
            ),
            false,
        ),
    );
    push(
        "pods",
        added(
            &pod_of(
                "shop",
                "odd-0",
                7,
                vec![container("w", "wé\"ird\\img\t\u{1}", true)],
            ),
            false,
        ),
    );
    push("pods", added(&pod("shop", "nospec-0", 8, None), false));
    push("pods", added(&two, false));
    let bad = pod("shop", "bad-0", 9, Some(json!({"containers": 5})));
    push("pods", added(&bad, false));
    let fixed = pod_of(
        "shop",
        "cache-0",
        11,
        vec![container("redis", "redis:7.2", true)],
    );
    push("pods", updated(&cache, &fixed));
    push("pods", updated(&web, &web));
    let broken = pod_of("shop", "web-0", 12, vec![container("web", "nginx", true)]);
    push("pods", updated(&web, &broken));
    // After the error: the plugin still knows cache-1 violates, so fixing it logs "fixed".
    let two_fixed = pod_of(
        "shop",
        "cache-1",
        13,
        vec![
            container("a", "redis:7", true),
            container("b", "memcached:1.6", true),
        ],
    );
    push("pods", updated(&two, &two_fixed));
    push("pods", deleted(&api, false));
    push("pods", deleted(&broken, true));
    push("pods", deleted(&bad, false));
    push("nodes", deleted(&node, true));
    out
}

fn write_recording(events: &[Value]) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    let text: String = events.iter().map(|e| format!("{e}\n")).collect();
    std::fs::write(f.path(), text).unwrap();
    f
}

/// `wisp replay`'s report without its first line (which names the file) and with failure
/// messages cut to `failed` (each language words its exceptions its own way).
fn replayed(module: &Path, settings: &Value, events: &Path) -> String {
    let mut out = Vec::new();
    let s = wisp_host::record::replay(&engine(), module, settings.clone(), events, &mut out)
        .unwrap_or_else(|e| panic!("{}: {e:#}", module.display()));
    assert_eq!(s.notifications, s.ok + s.failed);
    let text = String::from_utf8(out).unwrap();
    text.lines()
        .skip(1)
        .map(|l| match l.split_once(" -> failed: ") {
            Some((head, _)) => format!("{head} -> failed\n"),
            None if l.trim_start().starts_with("host: ") => String::new(),
            None => format!("{l}\n"),
        })
        .collect()
}

/// The examples with the settings each diff uses.
const CASES: &[(&str, &str, &str)] = &[
    ("audit_log", "audit-log", "{}"),
    (
        "audit_log",
        "audit-log",
        r#"{"includeResyncs": true, "includeInitialList": false}"#,
    ),
    ("image_policy", "image-policy", "{}"),
    (
        "image_policy",
        "image-policy",
        r#"{"exemptNamespaces": ["kube-system"], "requireLimits": false}"#,
    ),
];

fn replays_like_rust(suffix: &str) {
    let events = write_recording(&recording());
    for (rust, name, settings) in CASES {
        let Some(other) = component(&format!("{name}-{suffix}")) else {
            return;
        };
        let settings: Value = serde_json::from_str(settings).unwrap();
        let want = replayed(&common::plugin_path(rust), &settings, events.path());
        let got = replayed(&other, &settings, events.path());
        assert_eq!(got, want, "{name}-{suffix} with {settings}");
        if *name == "image-policy" {
            assert!(
                want.contains("-> failed"),
                "the unreadable pod fails:\n{want}"
            );
            assert!(
                want.contains("pass missing-limits shop/cache-1: fixed")
                    || want.contains("pass latest-tag shop/cache-1: fixed"),
                "the state survives the failure:\n{want}"
            );
            assert!(want.contains("counter policy_violations_total"), "{want}");
        } else {
            assert!(want.contains("counter audit_events_total"), "{want}");
        }
    }
}

#[test]
fn python_examples_replay_as_the_rust_ones() {
    replays_like_rust("py");
}

#[test]
fn js_examples_replay_as_the_rust_ones() {
    replays_like_rust("js");
}

/// What a plugin did with a whole run of batches.
#[derive(Debug, PartialEq)]
struct Run {
    delivered: u64,
    failed: u64,
    logs: Vec<String>,
    counters: Vec<String>,
    verdicts: Vec<String>,
}

fn get(s: &PluginStatus, f: impl Fn(&PluginCounters) -> &std::sync::atomic::AtomicU64) -> u64 {
    PluginCounters::get(f(&s.counters))
}

/// `events` in batches of `size` (per informer, in order) to `module` under the default limits,
/// the cache updated before each batch as an informer does; asserts no call was cut, trapped or
/// restarted.
fn batched(module: &Path, settings: &Value, events: &[Value], size: usize) -> Run {
    let parsed: Vec<(String, Delivery)> = events
        .iter()
        .map(|e| wisp_host::record::from_record(&e.to_string()).unwrap())
        .collect();
    let mut caches: BTreeMap<String, Indexer> = BTreeMap::new();
    for (inf, _) in &parsed {
        caches.entry(inf.clone()).or_default();
    }
    let grants = wisp_host::plugin::state::Grants::caches(
        caches.iter().map(|(k, v)| (k.clone(), v.cache())).collect(),
    );
    let verdicts = grants.services.verdicts.clone();
    let checked =
        wisp_host::plugin::loader::check_with_grants(&engine(), module, settings.clone(), grants)
            .unwrap_or_else(|e| panic!("{}: {e:#}", module.display()));
    let status = checked.status().clone();
    let report = (
        checked.report.source,
        checked.report.load,
        checked.report.instantiate,
    );
    let mut rt = checked.into_runtime(engine());
    let mut i = 0;
    while i < parsed.len() {
        let inf = parsed[i].0.clone();
        let mut batch = Vec::new();
        while i < parsed.len() && parsed[i].0 == inf && batch.len() < size {
            let d = parsed[i].1.clone();
            let ix = &caches[&inf];
            match &d.notification {
                Notification::Add { obj, .. } => ix.add(obj.clone()),
                Notification::Update { new, .. } => ix.update(new.clone()),
                Notification::Delete { obj } => ix.delete(obj),
            }
            batch.push(d);
            i += 1;
        }
        rt.handle(&inf, &batch);
    }
    let what = module.display();
    // What it cost (shown with --nocapture; docs/plugins/ quotes it).
    eprintln!(
        "cost {}: load {:?} ({:?}), instantiate + describe + init {:?}, {} calls, \
         {:.3} ms per notification in handle",
        module.file_name().unwrap().to_string_lossy(),
        report.1,
        report.0,
        report.2,
        get(&status, |c| &c.calls),
        get(&status, |c| &c.handle_nanos) as f64 / 1e6 / parsed.len() as f64,
    );
    assert_eq!(
        get(&status, |c| &c.deadline_hits),
        0,
        "{what}: {:?}",
        status.last_error()
    );
    assert_eq!(
        get(&status, |c| &c.traps),
        0,
        "{what}: {:?}",
        status.last_error()
    );
    assert_eq!(
        get(&status, |c| &c.restarts),
        0,
        "{what}: {:?}",
        status.last_error()
    );
    assert_eq!(get(&status, |c| &c.out_of_memory), 0, "{what}");
    let mut counters: Vec<String> = status
        .guest_counters()
        .into_iter()
        .map(|((n, l), v)| format!("{n}{l:?}={v}"))
        .collect();
    counters.extend(
        status
            .guest_gauges()
            .into_iter()
            .map(|((n, l), v)| format!("{n}{l:?}={v}")),
    );
    Run {
        delivered: get(&status, |c| &c.delivered),
        failed: get(&status, |c| &c.failed),
        logs: status
            .logs
            .lines()
            .into_iter()
            .filter(|l| !l.starts_with("host: "))
            .collect(),
        counters,
        verdicts: verdicts
            .list(&Default::default())
            .into_iter()
            .map(|v| {
                format!(
                    "{} {} {} {}: {}",
                    v.rule,
                    v.severity.as_str(),
                    v.subject.key(),
                    v.subject.resource_version,
                    v.message
                )
            })
            .collect(),
    }
}

/// 256 pods added, 128 changed, 64 deleted, one unreadable pod in the middle: 449
/// notifications of one informer.
fn churn() -> Vec<Value> {
    let images = [
        "nginx:latest",
        "nginx:1.27",
        "registry:5000/app",
        "app@sha256:00",
    ];
    let spec = |i: usize, rev: usize| {
        pod_of(
            ["shop", "kube-system", "web"][i % 3],
            &format!("p-{i}"),
            (i * 10 + rev) as u64,
            vec![container(
                "c",
                images[(i + rev) % 4],
                !(i + rev).is_multiple_of(3),
            )],
        )
    };
    let mut out = Vec::new();
    let mut seq = 0;
    let mut push = |mut v: Value| {
        seq += 1;
        v["informer"] = json!("pods");
        v["seq"] = json!(seq);
        out.push(v);
    };
    for i in 0..256 {
        push(json!({"event": "added", "initialList": i < 128, "object": spec(i, 0)}));
        if i == 100 {
            push(json!({"event": "added", "initialList": true,
                "object": pod("shop", "bad-0", 1, Some(json!({"containers": 5})))}));
        }
    }
    for i in 0..128 {
        push(json!({"event": "updated", "old": spec(i, 0), "object": spec(i, 1)}));
    }
    for i in 0..64_usize {
        push(
            json!({"event": "deleted", "finalStateUnknown": i.is_multiple_of(2), "object": spec(i, 1)}),
        );
    }
    out
}

fn batches_like_rust(suffix: &str) {
    let events = churn();
    for (rust, name, settings) in CASES {
        let Some(other) = component(&format!("{name}-{suffix}")) else {
            return;
        };
        let settings: Value = serde_json::from_str(settings).unwrap();
        let want = batched(&common::plugin_path(rust), &settings, &events, 64);
        let got = batched(&other, &settings, &events, 64);
        assert_eq!(want.delivered + want.failed, events.len() as u64);
        if *name == "image-policy" {
            assert_eq!(want.failed, 1, "the unreadable pod");
            assert!(!want.verdicts.is_empty());
        }
        assert_eq!(got, want, "{name}-{suffix} with {settings}");
    }
}

#[test]
fn python_examples_in_batches_of_64_match_rust_under_the_default_limits() {
    batches_like_rust("py");
}

#[test]
fn js_examples_in_batches_of_64_match_rust_under_the_default_limits() {
    batches_like_rust("js");
}

/// The smallest memory cap (in MiB, of those tried) under which `module` starts, if any.
fn smallest_cap(module: &Path, caps: &[u64]) -> Option<u64> {
    caps.iter().copied().find(|mib| {
        let mut s = wisp_host::plugin::PluginSpec::new("sizing", module, &["pods"]);
        s.limits.memory = mib * 1024 * 1024;
        wisp_host::plugin::loader::check_with(
            &engine(),
            &s,
            wisp_host::plugin::state::Grants::default(),
            None,
        )
        .is_ok()
    })
}

/// The memory sizing docs/plugins/ gives (printed with --nocapture): the interpreted plugins
/// start under a cap of at most half the default `limits.memory`.
#[test]
fn the_default_memory_cap_is_at_least_twice_what_the_interpreted_examples_start_in() {
    let caps: Vec<u64> = (8..=32).collect();
    let default_mib = wisp_host::plugin::spec::DEFAULT_MEMORY / 1024 / 1024;
    for name in [
        "audit-log-py",
        "image-policy-py",
        "audit-log-js",
        "image-policy-js",
    ] {
        let Some(p) = component(name) else { return };
        let mib = smallest_cap(&p, &caps).unwrap_or_else(|| panic!("{name}: none of {caps:?}"));
        eprintln!(
            "cost {name}: starts under a memory cap of {mib} MiB, not {} MiB",
            mib - 1
        );
        assert!(mib * 2 <= default_mib, "{name}: {mib} MiB");
        assert!(
            mib > 4,
            "{name}: {mib} MiB: the interpreter needs more than a Rust plugin"
        );
    }
    let rust = smallest_cap(&common::plugin_path("image_policy"), &[1, 2, 4, 8]);
    eprintln!("cost image_policy.wasm: starts under a memory cap of {rust:?} MiB");
}

/// The Rust examples' fixture files (`plugins/<name>/fixtures.yaml`, `wisp test`) hold for the
/// Python and JavaScript builds as they are: one contract, whatever the language.
#[test]
fn the_rust_examples_fixtures_pass_against_the_python_and_js_builds() {
    for name in ["audit-log", "image-policy"] {
        let fixtures = root().join("plugins").join(name).join("fixtures.yaml");
        for lang in ["py", "js"] {
            let Some(module) = component(&format!("{name}-{lang}")) else {
                continue;
            };
            let mut out = Vec::new();
            let s = wisp_host::fixture::run(&engine(), &module, &fixtures, &mut out)
                .unwrap_or_else(|e| panic!("{}: {e:#}", module.display()));
            let text = String::from_utf8_lossy(&out);
            assert!(s.cases > 0, "{text}");
            assert_eq!(s.passed, s.cases, "{name}-{lang}:\n{text}");
        }
    }
}

/// Refused settings read the same from the Rust, Python and JavaScript image-policy: each SDK
/// passes the message of the error `init` raises as it is (the JS SDK no longer prefixes a plain
/// `Error`'s with `Error: `), but for the position serde_json adds to the Rust SDK's.
#[test]
fn refused_settings_read_alike_in_every_language() {
    let settings = json!({"exemptNamespaces": "kube-system"});
    let refusal = |module: &Path| match wisp_host::plugin::check_module(
        &engine(),
        module,
        settings.clone(),
    ) {
        Ok(_) => panic!("{}: settings {settings} accepted", module.display()),
        Err(e) => e.to_string(),
    };
    let want = refusal(&common::plugin_path("image_policy"));
    assert!(
        want.contains(
            "settings rejected: settings.exemptNamespaces: invalid type: string \"kube-system\", \
             expected a sequence"
        ),
        "{want}"
    );
    assert!(
        !want.contains(" at line "),
        "the field names where, not a position: {want}"
    );
    for suffix in ["py", "js"] {
        let Some(module) = component(&format!("image-policy-{suffix}")) else {
            return;
        };
        let got = refusal(&module);
        assert!(!got.contains("Error: "), "image-policy-{suffix}: {got}");
        assert_eq!(got, want, "image-policy-{suffix}");
    }
}

/// Updates of the ~2 KB fixture pods (`wisp_tests::pod`, what `wisp-bench --only tiers`
/// delivers), 200 pods in turn, each to a new resourceVersion.
fn pod_updates(n: usize) -> Vec<Delivery> {
    use wisp_host::informer::Object;
    let object = |i: usize, rv: usize| {
        let mut v = wisp_tests::pod(&format!("ns-{}", i % 10), &format!("web-{}", i % 200));
        v["metadata"]["resourceVersion"] = json!(rv.to_string());
        v["metadata"]["uid"] = json!(format!("uid-{}", i % 200));
        Arc::new(Object::from_value(v, true).expect("fixture is an object"))
    };
    (0..n)
        .map(|i| Delivery {
            seq: i as u64 + 1,
            notification: Notification::Update {
                old: object(i, i + 1),
                new: object(i, i + 2),
            },
        })
        .collect()
}

/// How many of `updates`, one per call, `module` delivers on one instance under the default
/// limits (64 MiB of memory) before the first that fails (all of them when none does), with the
/// failure.
fn delivered_on_one_instance(module: &Path, updates: &[Delivery]) -> (usize, Option<String>) {
    let spec = wisp_host::plugin::PluginSpec::new("", module, &["pods"]);
    assert_eq!(spec.limits.memory, wisp_host::plugin::spec::DEFAULT_MEMORY);
    let checked = wisp_host::plugin::loader::check_with(
        &engine(),
        &spec,
        wisp_host::plugin::state::Grants::default(),
        None,
    )
    .unwrap_or_else(|e| panic!("{}: {e:#}", module.display()));
    let status = checked.status().clone();
    let mut rt = checked.into_runtime(engine());
    for (i, d) in updates.iter().enumerate() {
        rt.handle("pods", std::slice::from_ref(d));
        if get(&status, |c| &c.failed) > 0 {
            return (i, status.last_error());
        }
    }
    assert_eq!(get(&status, |c| &c.delivered), updates.len() as u64);
    assert_eq!(get(&status, |c| &c.restarts), 0);
    (updates.len(), None)
}

/// The JavaScript audit-log delivers 3,000 updates of the ~2 KB pods, one per call, on one
/// instance under the default limits. Its SDK used to copy each batch through the iterator
/// protocol (see `bytesOf` in plugin-sdk/js/abi.js), whose garbage filled SpiderMonkey's heap:
/// every call failed (`cannot read the batch: undefined`) after 490-770 updates. (The
/// instance still grows by ~5 KB per notification in the component's glue, with no SDK at all,
/// and hits the cap after ~10,000 of these: BENCHMARKS.md, *The first-load tier's price*.)
#[test]
fn the_js_audit_log_delivers_thousands_of_pod_updates_on_one_instance_under_the_default_limits() {
    let Some(module) = component("audit-log-js") else {
        return;
    };
    let updates = pod_updates(3_000);
    let (delivered, error) = delivered_on_one_instance(&module, &updates);
    assert_eq!(delivered, updates.len(), "{error:?}");
}
