//! A thousand plugins on one host: the test API server, one pod informer, 1,000 instances of the
//! test-faults plugin, all run by the shared executor's fixed pool of workers. Every plugin must
//! receive every notification in order, and the process must not grow a thread per plugin.
//!
//! Its own test binary, so the thread count is this test's alone. Figures (start time, memory
//! per idle instance, delivery time, threads by name) are printed; see them with
//! `cargo xtask test -- --test many_plugins -- --nocapture`.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::rig::*;
use common::*;
use serde_json::json;
use wisp_host::informer::Executor;
use wisp_host::informer::executor::default_workers;
use wisp_host::informer::shared_informer::InformerConfig;
use wisp_tests::pod;

const PLUGINS: usize = 1000;
/// Pods before the plugins start (each plugin's initial list).
const INITIAL: usize = 10;
/// Changes made through the server while they run (250): creates, updates, deletes. Each is a
/// notification for every plugin: 260,000 in all, about 12 s of plugin calls (6 s on 2 workers)
/// in a debug build.
const CREATES: usize = 100;
const UPDATES: usize = 100;
const DELETES: usize = 50;

/// Threads besides the executor's workers, whatever the number of plugins. Measured on this
/// test (names from /proc/self/task/*/comm, printed below), on 2 cores: the test harness's main
/// thread and this test's thread (2), this test's Tokio runtime (2 workers, set below), the
/// informer's process loop and the engine's epoch ticker (2), and the compiler's thread pool
/// (cranelift's parallel compilation, one per core; unnamed, so they show under the name of the
/// test thread that started them): 8 here. wasmtime-wasi's own Tokio runtime (one per core)
/// would add as many when a plugin writes to stdio, and the kube client's blocking pool (DNS)
/// a few while they idle out: 4 more for those. Counted while every plugin works, so a thread
/// per plugin, per listener or per call would show as a thousand more.
fn fixed_threads() -> usize {
    let cores = default_workers();
    6 + 2 * cores + 4
}

fn status_field(name: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /proc/self/status"))
}

/// `Threads:` of /proc/self/status.
fn threads() -> usize {
    status_field("Threads:") as usize
}

/// Threads by name, with a number in the name replaced by `N` (`wisp-worker-N: 2`).
fn thread_names() -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let Ok(e) = e else { continue };
        let Ok(name) = std::fs::read_to_string(e.path().join("comm")) else {
            continue;
        };
        let name: String = name
            .trim()
            .chars()
            .map(|c| if c.is_ascii_digit() { 'N' } else { c })
            .collect();
        let name = name.replace("NN", "N").replace("NN", "N");
        *out.entry(name).or_default() += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_plugins_get_every_notification_in_order_on_a_fixed_pool_of_workers() {
    let test_start = Instant::now();
    let workers = default_workers();
    let executor = Executor::new(workers).unwrap();
    let pods = (0..INITIAL)
        .map(|i| pod("default", &format!("web-{i}")))
        .collect();
    let config = InformerConfig {
        executor: Some(executor.clone()),
        ..fast_config()
    };
    let r = rig_with(pods, config).await;
    let (server, manager) = (&r.server, r.manager);
    // Compile the module (once for all) and start the engine's pools before counting.
    let setup = test_start.elapsed();
    let first = manager.start(faults_spec("faults-0", json!({}))).unwrap();
    until("the first plugin synced", || first.has_synced()).await;
    let first_time = test_start.elapsed() - setup;

    let threads_before = threads();
    let rss_before = status_field("VmRSS:");
    let started = Instant::now();
    // Off the runtime: a plugin's checks run wasm, which must not block async code.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let handles: Vec<_> = (1..PLUGINS)
            .map(|i| {
                manager
                    .start(faults_spec(&format!("faults-{i}"), json!({})))
                    .unwrap()
            })
            .collect();
        let _ = tx.send((manager, handles));
    });
    let (_manager, mut handles) = rx.await.unwrap();
    handles.insert(0, first);
    let start_time = started.elapsed();
    until_within("every plugin synced", Duration::from_secs(60), || {
        handles.iter().all(|h| h.has_synced())
    })
    .await;
    let synced_time = started.elapsed();
    let rss_idle = status_field("VmRSS:");
    let threads_idle = threads();

    // Changes through the server while every plugin is attached.
    let changes = Instant::now();
    for i in 0..CREATES {
        server.create(pod("default", &format!("new-{i}"))).unwrap();
    }
    for i in 0..UPDATES {
        let name = format!("web-{}", i % INITIAL);
        let current = server
            .objects("v1", "Pod")
            .into_iter()
            .find(|o| o["metadata"]["name"] == json!(name))
            .unwrap();
        server.update(touched(current, i as u64)).unwrap();
    }
    for i in 0..DELETES {
        server
            .delete("v1", "Pod", Some("default"), &format!("new-{i}"))
            .unwrap();
    }
    let per_plugin = (INITIAL + CREATES + UPDATES + DELETES) as u64;
    let mut max_threads = threads_idle;
    until_within(
        "every plugin handled every notification",
        Duration::from_secs(120),
        || {
            max_threads = max_threads.max(threads());
            handles
                .iter()
                .all(|h| counter(h, |c| &c.delivered) == per_plugin)
        },
    )
    .await;
    let delivery_time = changes.elapsed();
    let calls: u64 = handles.iter().map(|h| counter(h, |c| &c.calls)).sum();
    let in_calls: u64 = handles
        .iter()
        .map(|h| counter(h, |c| &c.handle_nanos))
        .sum();
    let names = thread_names();
    let threads_after = threads();

    for h in &handles {
        let s = h.status();
        let q = &h.queues()[0].1;
        let seq = s.guest_gauge("last_seq", &[("informer", "pods")]);
        assert_eq!(q.queued, per_plugin, "{}: {q:?}", h.name());
        assert_eq!(
            (
                seq,
                s.guest_counter("seen_total", &[("informer", "pods")]),
                s.guest_counter("gaps_total", &[]),
                s.guest_counter("dups_total", &[]),
                counter(h, |c| &c.failed),
            ),
            (Some(per_plugin as f64), per_plugin, 0, 0, 0),
            "{}: every notification, in order (last seq, seen, gaps, dups, failed)",
            h.name()
        );
    }

    eprintln!(
        "setup {setup:?}, first plugin (compiles the module) {first_time:?}; {calls} calls, \
         {:.1} notifications each, {:?} in calls",
        (per_plugin * PLUGINS as u64) as f64 / calls as f64,
        Duration::from_nanos(in_calls)
    );
    eprintln!(
        "{PLUGINS} plugins, {workers} workers: started in {start_time:?} ({:?} each), all synced \
         after {synced_time:?}; {per_plugin} notifications each ({} in all) handled {delivery_time:?} \
         after the first change; whole test {:?}",
        start_time / (PLUGINS as u32 - 1),
        per_plugin * PLUGINS as u64,
        test_start.elapsed()
    );
    eprintln!(
        "VmRSS {rss_before} KiB -> {rss_idle} KiB with {} more idle plugins: {} KiB each",
        PLUGINS - 1,
        (rss_idle.saturating_sub(rss_before)) / (PLUGINS as u64 - 1)
    );
    eprintln!(
        "threads: {threads_before} with one plugin, {threads_idle} with {PLUGINS} idle, at most \
         {max_threads} while they worked, {threads_after} after; by name: {names:?}"
    );
    assert!(
        !names.keys().any(|n| n.starts_with("wisp-listener")),
        "no listener has a thread of its own: {names:?}"
    );
    assert_eq!(names.get("wisp-worker-N"), Some(&workers), "{names:?}");
    let limit = workers + fixed_threads();
    assert!(
        max_threads <= limit && threads_idle <= limit,
        "{max_threads} threads at most while working, {threads_idle} idle: more than {workers} \
         workers + {} others ({names:?})",
        fixed_threads()
    );
    assert!(
        max_threads <= threads_before + 4,
        "999 more plugins added threads: {threads_before} -> {max_threads} ({names:?})"
    );
    executor.shutdown();
}
