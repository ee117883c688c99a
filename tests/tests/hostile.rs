//! The sandbox against a hostile plugin (plugins/test-hostile, never shipped with the
//! examples): each test attacks one limit and asserts the bound a user relies on: a call cut
//! at its deadline whatever it blocks in, one memory budget for all of an instance's memories,
//! bounded bytes for what crosses into the host (logs, metrics, names, messages), log text that
//! cannot forge host lines, and metric families no plugin can take from another.
//!
//! A test binary of its own (not a module of `integration`): the log flood's bound is on the
//! process's resident memory, which other tests' allocations would move.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::rig::{counter, logs, put_leb, rig, spec};
use common::*;
use serde_json::{Value, json};
use wisp_host::admin::{AdminState, metrics};
use wisp_host::plugin::status::{LOG_BURST_BYTES, LOG_BYTES_PER_SEC, LOG_RING_BYTES, MAX_LOG_LINE};
use wisp_host::plugin::{OnFailure, PluginError, PluginHandle, PluginSet, PluginSpec};
use wisp_tests::pod;

fn hostile(name: &str, settings: Value) -> PluginSpec {
    spec(name, "test_hostile", settings)
}

fn pods(n: usize) -> Vec<Value> {
    (0..n).map(|i| pod("default", &format!("p-{i}"))).collect()
}

/// The epoch tick plus what a cut call adds of its own (the instance's teardown, a fresh one).
const SLACK: Duration = Duration::from_millis(400);

/// The host's wall-clock backstop of a call with this deadline: cut by then whatever CPU time
/// it used (`WALL_CAP_FACTOR` times the deadline, at least `MIN_WALL_CAP`).
fn wall_cap(deadline: Duration) -> Duration {
    use wisp_host::plugin::clock::{MIN_WALL_CAP, WALL_CAP_FACTOR};
    (deadline * WALL_CAP_FACTOR).max(MIN_WALL_CAP)
}

/// The most wall-clock time a call cut at `deadline` may take here before the test calls it
/// stuck: its [`wall_cap`] plus [`SLACK`], scaled by [`patience`]. A give-up bound: that the
/// deadline cut the call shows in counters and messages (and, where the test runs the call
/// on its own thread, in that thread's CPU time), not in how soon a busy machine got there.
fn cut_by(deadline: Duration) -> Duration {
    patience(wall_cap(deadline) + SLACK)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_sleeping_in_init_is_cut_at_its_startup_deadline() {
    let r = rig(pods(1)).await;
    let mut s = hostile("sleeper", json!({"sleepInInitMs": 60_000}));
    s.limits.deadline = Duration::from_millis(50);
    s.limits.startup_deadline = Duration::from_millis(200);
    let began = Instant::now();
    let e = r
        .manager
        .start(s)
        .err()
        .expect("a plugin sleeping in init is refused");
    let took = began.elapsed();
    assert!(
        matches!(e, PluginError::Failed { phase: "init", .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains("startup deadline of 200ms exceeded"),
        "{e}"
    );
    // Instantiation, describe and init share the one startup deadline (not the call's 50 ms,
    // not the 60 s sleep: the message names the deadline that cut it).
    assert!(
        took >= Duration::from_millis(200) && took < cut_by(Duration::from_millis(200)),
        "refused after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_slower_than_the_call_deadline_fits_the_startup_deadline() {
    // As an interpreted plugin (Python, JavaScript) whose instantiation alone costs ~15 ms of
    // CPU: its start-up is measured against startupDeadline, not the per-call deadline.
    let r = rig(pods(2)).await;
    let mut s = spec("slow-start", "test_faults", json!({"busyInInitMs": 60}));
    s.limits.deadline = Duration::from_millis(10);
    let h = r
        .manager
        .start(s)
        .expect("starts within its startup deadline");
    until("both pods handled", || counter(&h, |c| &c.delivered) == 2).await;
    assert_eq!(counter(&h, |c| &c.deadline_hits), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_spinning_in_init_is_refused_at_its_startup_deadline() {
    let r = rig(pods(1)).await;
    let mut s = spec("spinner", "test_faults", json!({"spinInInit": true}));
    s.limits.deadline = Duration::from_millis(10);
    s.limits.startup_deadline = Duration::from_millis(300);
    let began = Instant::now();
    let e = r.manager.start(s).err().expect("refused");
    let took = began.elapsed();
    assert_eq!(
        e.to_string(),
        "plugin \"spinner\": init: startup deadline of 300ms exceeded (instantiate, describe, init and restore together: limits.startupDeadline)"
    );
    // Cut at the startup deadline (CPU time is at most wall time), not at the call's 10 ms:
    // the message names it. The deadline counts the plugin's CPU time: on a loaded 2-core
    // machine 300 ms of it took 876 ms of wall time, so the upper bound is the give-up.
    assert!(
        took >= Duration::from_millis(300) && took < cut_by(Duration::from_millis(300)),
        "refused after {took:?}"
    );
}

/// `n` pods as added notifications, for a runtime driven directly.
fn batch_of(n: usize) -> Vec<wisp_host::informer::Delivery> {
    (0..n)
        .map(|i| {
            let mut v = pod("default", &format!("b-{i}"));
            v["metadata"]["resourceVersion"] = json!(format!("{}", i + 1));
            v["metadata"]["uid"] = json!(format!("uid-{i}"));
            wisp_host::informer::Delivery {
                seq: i as u64 + 1,
                notification: wisp_host::informer::Notification::Add {
                    obj: Arc::new(wisp_host::informer::Object::from_value(v, true).unwrap()),
                    initial_list: false,
                },
            }
        })
        .collect()
}

/// The test-faults plugin as a runtime handed batches directly (as `wisp replay` does).
fn faults_runtime(
    settings: Value,
    limits: impl FnOnce(&mut wisp_host::plugin::Limits),
) -> (
    wisp_host::plugin::runtime::PluginRuntime,
    Arc<wisp_host::plugin::status::PluginStatus>,
) {
    let engine = common::rig::engine();
    let mut s = spec("batcher", "test_faults", settings);
    s.on_failure = OnFailure {
        quarantine_after: 0,
        ..OnFailure::default()
    };
    limits(&mut s.limits);
    let checked = wisp_host::plugin::loader::check_with(
        &engine,
        &s,
        wisp_host::plugin::state::Grants::default(),
        None,
    )
    .unwrap();
    let status = checked.status().clone();
    (checked.into_runtime(engine), status)
}

fn get(
    status: &wisp_host::plugin::status::PluginStatus,
    f: impl Fn(&wisp_host::plugin::status::PluginCounters) -> &std::sync::atomic::AtomicU64,
) -> u64 {
    wisp_host::plugin::status::PluginCounters::get(f(&status.counters))
}

#[test]
fn a_batch_has_a_deadline_per_notification_so_a_healthy_batch_is_not_cut() {
    // 32 notifications of ~2 ms each: 64 ms, over a call deadline of 20 ms, within the batch's
    // 20 ms + 31 x 5 ms.
    let (mut rt, status) = faults_runtime(json!({"mode": "busy", "busyMs": 2}), |l| {
        l.deadline = Duration::from_millis(20);
        l.deadline_per_notification = Duration::from_millis(5);
    });
    let calls0 = get(&status, |c| &c.calls);
    rt.handle("pods", &batch_of(32));
    assert_eq!(
        get(&status, |c| &c.deadline_hits),
        0,
        "{:?}",
        status.last_error()
    );
    assert_eq!(
        get(&status, |c| &c.calls) - calls0,
        1,
        "one call for the batch"
    );
    assert_eq!(get(&status, |c| &c.delivered), 32);
}

#[test]
fn a_spinning_plugin_is_still_cut_within_a_bound_per_batch_and_loses_no_notification() {
    // Bound: the batch's call (20 ms + 7 x 5 ms), then each notification alone (8 x 20 ms), plus
    // a fresh instance per cut. The calls run on this thread, and their deadlines count its
    // CPU time: the bound is on that, which a busy machine does not stretch.
    let (mut rt, status) = faults_runtime(json!({"mode": "spin"}), |l| {
        l.deadline = Duration::from_millis(20);
        l.deadline_per_notification = Duration::from_millis(5);
    });
    let cpu_time = || wisp_host::plugin::cputime::thread_cpu_time().expect("thread CPU time");
    let (began, cpu0) = (Instant::now(), cpu_time());
    rt.handle("pods", &batch_of(8));
    let (took, cpu) = (began.elapsed(), cpu_time() - cpu0);
    let bound = Duration::from_millis(20 + 7 * 5 + 8 * 20);
    eprintln!("a spinning batch of 8: {cpu:?} of CPU time, {took:?} of wall time");
    assert!(
        cpu >= bound && cpu < bound + SLACK * 2,
        "the batch used {cpu:?} of CPU time ({took:?} of wall time)"
    );
    let give_up = cut_by(Duration::from_millis(20 + 7 * 5)) + cut_by(Duration::from_millis(20)) * 8;
    assert!(took < give_up, "the batch took {took:?}");
    assert_eq!(
        get(&status, |c| &c.deadline_hits),
        9,
        "the batch, then each alone"
    );
    // Every notification is accounted for: none delivered, each failed (none lost).
    assert_eq!(get(&status, |c| &c.delivered), 0);
    assert_eq!(get(&status, |c| &c.failed), 8);
    assert!(
        status
            .last_error()
            .is_some_and(|e| e.contains("deadline of 20ms exceeded")),
        "{:?}",
        status.last_error()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasi_http_is_linked_and_every_request_is_refused_before_the_network() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!("http://{}/probe", listener.local_addr().unwrap());
    let r = rig(pods(1)).await;
    let h = r
        .manager
        .start(spec("http", "test_http", json!({ "url": url })))
        .expect("a plugin importing wasi:http loads");
    until("init's and the pod's requests answered", || {
        logs(&h).iter().filter(|l| l.contains("http GET")).count() >= 2
    })
    .await;
    let said: Vec<String> = logs(&h)
        .into_iter()
        .filter(|l| l.contains("http GET"))
        .collect();
    assert!(
        said.iter()
            .all(|l| l.ends_with(&format!("http GET {url}: denied: HttpRequestDenied"))),
        "{said:?}"
    );
    assert_eq!(
        listener.accept().err().map(|e| e.kind()),
        Some(std::io::ErrorKind::WouldBlock),
        "nothing connected"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wasi_http_bodies_that_are_never_sent_hold_a_few_kib_of_host_memory() {
    let r = rig(pods(1)).await;
    let h = r
        .manager
        .start(spec("bodies", "test_http", json!({ "bodies": 20 })))
        .unwrap();
    let line = logs(&h)
        .into_iter()
        .find(|l| l.contains("bodies: 20 buffered"))
        .expect("init filled the bodies");
    let bytes: u64 = line
        .split_whitespace()
        .nth(4)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    // Two writes of at most MAX_HTTP_BODY_CHUNK per body (wasmtime's default: 2 x 1 MiB).
    let chunk = wisp_host::plugin::state::MAX_HTTP_BODY_CHUNK as u64;
    assert!(bytes > 0 && bytes <= 20 * 2 * chunk, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_importing_what_the_host_does_not_provide_is_told_which_import() {
    let r = rig(pods(1)).await;
    let e = r
        .manager
        .start(spec("kv", "test_missing_import", json!({})))
        .err()
        .expect("refused");
    assert!(matches!(e, PluginError::MissingImport { .. }), "{e}");
    let path = plugin_path("test_missing_import");
    assert_eq!(
        e.to_string(),
        format!(
            "plugin \"kv\": module {}: imports wasi:keyvalue/store@0.2.0-draft, which Wisp does not provide (Wisp provides WASI 0.2 (cli, clocks, io, random, with nothing granted) and wasi:http 0.2 (every request refused)): `get` is missing",
            path.display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_sleeping_in_handle_is_cut_at_its_deadline_and_reload_does_not_wait() {
    let r = rig(pods(3)).await;
    let mut s = hostile("sleeper", json!({"sleepMs": 60_000}));
    s.limits.deadline = Duration::from_millis(50);
    s.on_failure = OnFailure {
        quarantine_after: 0,
        ..OnFailure::default()
    };
    let h = r.manager.start(s.clone()).unwrap();
    // Three pods, each cut (and maybe once more alone after its batch was cut): a call that
    // slept its 60 s would hold the rest past this give-up.
    until("three calls cut", || counter(&h, |c| &c.deadline_hits) >= 3).await;
    // And no call slept on: the time in calls, as the host measured it, is what cut calls take.
    let (buckets, in_calls, calls) = h.status().counters.handle_latency.snapshot();
    assert!(
        in_calls < calls as f64 * cut_by(s.limits.deadline).as_secs_f64(),
        "{calls} calls took {in_calls:.2} s: {buckets:?}"
    );

    // While it sleeps again, a reload takes the runtime once the call is cut, not after 60 s.
    r.server.create(pod("default", "more")).unwrap();
    let began = Instant::now();
    let mut calm = s.clone();
    calm.settings = json!({});
    let report = tokio::task::spawn_blocking({
        let h = Arc::new(h);
        move || h.reload(calm).map(|_| ())
    })
    .await
    .unwrap();
    report.unwrap();
    let took = began.elapsed();
    // A call cut, then a fresh instance of the new version: seconds at most, not the 60 s sleep.
    assert!(
        took < cut_by(s.limits.deadline) + patience(SLACK * 4),
        "reload waited {took:?}"
    );
}

/// The test-hostile component with `extra` more core instances, each with a linear memory of
/// `mib` MiB of its own (multi-memory, as a component made of several core modules has).
fn with_memories(extra: usize, mib: u32, dir: &std::path::Path) -> std::path::PathBuf {
    let mut bytes = std::fs::read(plugin_path("test_hostile")).unwrap();
    // Top-level core module sections (id 1) already there: the new module's index follows.
    let mut modules = 0u32;
    let mut at = 8;
    while at < bytes.len() {
        let id = bytes[at];
        let (len, n) = leb(&bytes[at + 1..]);
        if id == 1 {
            modules += 1;
        }
        at += 1 + n + len as usize;
    }
    let mut module = b"\0asm\x01\0\0\0".to_vec();
    let mut mem = vec![1, 0]; // one memory, no maximum...
    put_leb(&mut mem, mib * 16); // ...of this many 64 KiB pages
    section(&mut module, 5, &mem);
    section(&mut bytes, 1, &module);
    let mut instances = Vec::new();
    put_leb(&mut instances, extra as u32);
    for _ in 0..extra {
        instances.push(0); // instantiate
        put_leb(&mut instances, modules);
        instances.push(0); // no arguments
    }
    section(&mut bytes, 2, &instances);
    let out = dir.join(format!("hostile-{extra}x{mib}.wasm"));
    std::fs::write(&out, bytes).unwrap();
    out
}

fn leb(b: &[u8]) -> (u32, usize) {
    let (mut v, mut shift, mut i) = (0u32, 0, 0);
    loop {
        v |= u32::from(b[i] & 0x7f) << shift;
        shift += 7;
        i += 1;
        if b[i - 1] & 0x80 == 0 {
            return (v, i);
        }
    }
}

fn section(out: &mut Vec<u8>, id: u8, payload: &[u8]) {
    out.push(id);
    put_leb(out, payload.len() as u32);
    out.extend_from_slice(payload);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_memory_of_an_instance_counts_against_one_budget() {
    let r = rig(pods(1)).await;
    let dir = tempfile::tempdir().unwrap();
    // Within the budget: the plugin runs.
    let mut s = hostile("some-memories", json!({}));
    s.module = with_memories(2, 8, dir.path());
    s.limits.memory = 64 << 20;
    r.manager
        .start(s)
        .expect("two more memories of 8 MiB fit 64 MiB");
    // 40 memories of 48 MiB, each under the 64 MiB budget, all together 30 times over it.
    let mut s = hostile("many-memories", json!({}));
    s.module = with_memories(40, 48, dir.path());
    s.limits.memory = 64 << 20;
    let e = r.manager.start(s).err().expect("refused");
    assert!(e.to_string().contains("memory limit"), "{e}");
}

/// The host's resident memory, in bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap();
    kb * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_flood_is_cut_to_the_plugins_log_rate_and_lines_are_bounded() {
    let r = rig(pods(40)).await;
    let before = rss();
    let began = Instant::now();
    // 40 notifications x 20 lines of 256 KiB, and a 256 KiB stdout line each.
    let mut s = hostile(
        "logger",
        json!({"logLines": 20, "logBytes": 256 << 10, "stdoutBytes": 256 << 10}),
    );
    s.limits.deadline = Duration::from_secs(10);
    let h = r.manager.start(s).unwrap();
    until("all handled", || counter(&h, |c| &c.delivered) >= 40).await;
    let secs = began.elapsed().as_secs_f64();
    let logs = h.status().logs.lines();
    let kept: usize = logs.iter().map(String::len).sum();
    assert!(kept <= LOG_RING_BYTES, "{kept} bytes kept");
    assert!(logs.iter().all(|l| l.len() <= MAX_LOG_LINE + 16));
    // What was logged fits the budget: the burst plus the rate over the time it ran.
    let spent = h.status().logs.spent() as f64;
    let budget = LOG_BURST_BYTES + LOG_BYTES_PER_SEC * secs;
    assert!(spent <= budget, "{spent} bytes logged, budget {budget}");
    let logged = h.status().logs.total() as f64;
    let dropped = counter(&h, |c| &c.log_lines_dropped);
    assert!(
        dropped as f64 >= 40.0 * 21.0 - logged - 1.0,
        "{dropped} dropped"
    );
    let grew = rss().saturating_sub(before);
    assert!(grew < 256 << 20, "the host grew by {} MiB", grew >> 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_log_text_cannot_forge_host_log_lines() {
    let r = rig(pods(1)).await;
    let forged = "ok\n2026-12-03T00:00:00.000000Z  INFO wisp::app: plugin started\r\u{1b}[2K";
    let h = r
        .manager
        .start(hostile("forger", json!({"logLines": 1, "logText": forged})))
        .unwrap();
    until("handled", || counter(&h, |c| &c.delivered) >= 1).await;
    let line = h
        .status()
        .logs
        .lines()
        .into_iter()
        .find(|l| l.contains("plugin started"))
        .expect("logged");
    assert!(!line.contains(['\n', '\r', '\u{1b}']), "{line:?}");
    assert!(line.contains(r"ok\n2026"), "{line:?}");
    // What its describe says is bounded and escaped too (a 1 MiB version, a newline in its name).
    let running = h.running();
    assert!(running.version.len() <= 64, "{}", running.version.len());
    assert!(
        !running.plugin_name.contains('\n'),
        "{:?}",
        running.plugin_name
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_metrics_and_messages_are_bounded_in_bytes() {
    let r = rig(pods(10)).await;
    // 10 notifications x 1,000 series with 1000-byte label values (10 MB asked), and error
    // outcomes of 1 MiB each.
    let mut s = hostile(
        "flooder",
        json!({"series": 1000, "labelBytes": 1000, "errorBytes": 1 << 20}),
    );
    s.on_failure = OnFailure {
        quarantine_after: 0,
        ..OnFailure::default()
    };
    let h = r.manager.start(s).unwrap();
    until("all failed", || counter(&h, |c| &c.failed) >= 10).await;
    let gauges = h.status().guest_gauges();
    let bytes: usize = gauges
        .keys()
        .map(|(n, l)| n.len() + l.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>())
        .sum();
    assert!(bytes <= 256 * 1024, "{bytes} bytes of series");
    assert!(counter(&h, |c| &c.series_refused) >= 9_000);
    let e = h.status().last_error().unwrap();
    assert!(e.len() <= 8 * 1024, "last error of {} bytes", e.len());
    // A label value over 1 KiB is refused outright.
    let h2 = r
        .manager
        .start(hostile(
            "big-label",
            json!({"series": 1, "labelBytes": 1 << 20}),
        ))
        .unwrap();
    until("handled", || counter(&h2, |c| &c.delivered) >= 10).await;
    assert!(h2.status().guest_gauges().is_empty());
    assert!(counter(&h2, |c| &c.series_refused) >= 10);
}

fn exposition(
    inf: &Arc<wisp_host::informer::SharedInformer>,
    plugins: &[&Arc<PluginHandle>],
) -> String {
    let state = AdminState {
        informers: vec![inf.clone()],
        plugins: PluginSet::new(plugins.iter().map(|p| (*p).clone()).collect()),
        ..AdminState::default()
    };
    metrics::encode(&metrics::registry(state)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_cannot_hide_another_plugins_metric_family() {
    let r = rig(pods(2)).await;
    let victim = Arc::new(
        r.manager
            .start(hostile("victim", json!({"gauge": "backlog"})))
            .unwrap(),
    );
    let squatter = Arc::new(
        r.manager
            .start(hostile("squatter", json!({"counter": "backlog_total"})))
            .unwrap(),
    );
    until("both reported", || {
        counter(&victim, |c| &c.delivered) >= 2 && counter(&squatter, |c| &c.delivered) >= 2
    })
    .await;
    let text = exposition(&r.inf, &[&victim, &squatter]);
    let has = |series: &str| text.lines().any(|l| l.starts_with(series));
    assert!(
        has(r#"wisp_plugin_backlog_total{plugin="squatter"}"#),
        "{text}"
    );
    assert!(
        has(r#"wisp_plugin_backlog_gauge{plugin="victim"}"#),
        "{text}"
    );
}

/// An admission call has no side effects, whatever the plugin tries: test-hostile's `admit`
/// reports a verdict on a cached object and asks for two actions its grants allow, and each is
/// refused (the verdict is not kept, nothing is audited or sent); its answer's warnings are cut
/// to the host's bound however many it gives.
#[test]
fn an_admission_call_keeps_no_verdict_takes_no_action_and_its_answer_is_bounded() {
    use wisp_host::plugin::sandbox::instance::MAX_ADMISSION_WARNINGS;
    let dir = tempfile::tempdir().unwrap();
    let pod = |rv: &str| {
        format!(
            "{{apiVersion: v1, kind: Pod, metadata: {{name: web-0, namespace: shop, uid: u-web, \
             resourceVersion: \"{rv}\"}}, spec: {{containers: [{{name: web, image: nginx}}]}}}}"
        )
    };
    // The flood's warnings after the three attempts', up to the bound.
    let flood: Vec<String> = (0..MAX_ADMISSION_WARNINGS - 3)
        .map(|i| format!("'w{i}-'"))
        .collect();
    let fixture = format!(
        "informer: pods
actions:
  grants:
    - {{verbs: [apply], apiVersion: v1, kind: ConfigMap}}
    - {{verbs: [create], apiVersion: v1, kind: Event}}
cases:
  - name: granted actions and a verdict on a cached object are refused
    cache: {{pods: [{old}]}}
    steps:
      - admit: {{operation: UPDATE, object: {new}}}
    expect:
      outcomes: [allowed]
      admissions:
        - allowed: true
          warnings:
            - 'verdict: Err('
            - 'no action during an admission call'
            - 'no action during an admission call'
      verdicts: []
      actions: []
  - name: an answer's warnings are bounded
    settings: {{admitWarnings: 1000, admitWarningBytes: 100}}
    steps:
      - admit: {{object: {new}}}
    expect:
      admissions:
        - warnings: ['no verdict is kept during an admission call', 'no action', 'no action', {flood}]
",
        old = pod("1"),
        new = pod("2"),
        flood = flood.join(", ")
    );
    let file = dir.path().join("admission.yaml");
    std::fs::write(&file, fixture).unwrap();
    let mut out = Vec::new();
    let summary = wisp_host::fixture::run(
        &common::rig::engine(),
        &plugin_path("test_hostile"),
        &file,
        &mut out,
    )
    .unwrap();
    let text = String::from_utf8_lossy(&out);
    assert_eq!((summary.cases, summary.passed), (2, 2), "{text}");
}
