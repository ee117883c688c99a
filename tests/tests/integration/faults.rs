//! Reliability under faults: the API server misbehaving in each way it can, plugins misbehaving in
//! each way they can, and a bounded soak of both with hot reloads. After each: the informer's cache
//! equals the server, a native listener's history is consistent (with a tombstone for every
//! deletion the watch missed), every plugin's view equals the server with no sequence number lost
//! or repeated, and a bad plugin hurts only itself.
//!
//! The soak runs for `WISP_SOAK_SECS` seconds (default 60) and prints its figures:
//! `WISP_SOAK_SECS=300 cargo xtask test -- --test integration faults::soak --nocapture` for a longer one.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::churn::{Cluster, Lcg};
use common::http::get;
use common::rig::{counter, engine, faults_spec, gauge, server_checksum, variant};
use common::*;
use serde_json::{Value, json};
use wisp_host::admin::{self, AdminState};
use wisp_host::informer::SharedInformer;
use wisp_host::informer::handler::Recorder;
use wisp_host::informer::shared_informer::HandlerRegistration;
use wisp_host::plugin::{
    FailurePolicy, OnFailure, PluginError, PluginHandle, PluginManager, PluginSpec, PluginState,
};
use wisp_tests::{TestApiServer, Verb, pod};

/// Notifications a test-faults plugin saw, and how many sequence numbers it found missing or
/// repeated.
fn seq_figures(h: &PluginHandle) -> (u64, u64, u64) {
    let s = h.status();
    (
        s.guest_counter("seen_total", &[("informer", "pods")]),
        s.guest_counter("gaps_total", &[]),
        s.guest_counter("dups_total", &[]),
    )
}

/// An informer over a server with churn, a native recorder and a test-faults plugin keeping a
/// view of the pods.
struct Harness {
    cluster: Cluster,
    inf: Arc<SharedInformer>,
    rec: Recorder,
    rec_reg: HandlerRegistration,
    manager: PluginManager,
    view: Arc<PluginHandle>,
    changes: u64,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Harness {
    async fn start(pods: usize) -> Self {
        let server = server_with_pods(pods).await;
        let live = (0..pods)
            .map(|i| ("default".to_owned(), format!("web-{i}")))
            .collect();
        let cluster = Cluster::new(server.clone(), live, 7);
        let inf = pod_informer(&server, fast_config());
        let rec = Recorder::new();
        let rec_reg = inf
            .add_event_handler("recorder", Box::new(rec.clone()), Duration::ZERO)
            .unwrap();
        let stop = start(&inf);
        until("synced", || rec_reg.has_synced()).await;
        let mut manager = PluginManager::new(engine());
        manager.add_informer(inf.clone());
        let view = Arc::new(manager.start(faults_spec("view", json!({}))).unwrap());
        Harness {
            cluster,
            inf,
            rec,
            rec_reg,
            manager,
            view,
            changes: 0,
            _stop: stop,
        }
    }

    fn server(&self) -> &TestApiServer {
        &self.cluster.server
    }

    /// `n` random changes (60% updates, 20% creates, 20% deletes).
    async fn churn(&mut self, n: u64) {
        for _ in 0..n {
            self.changes += 1;
            self.cluster.change(self.changes);
            if self.changes.is_multiple_of(50) {
                tokio::task::yield_now().await;
            }
        }
    }

    /// Deletes `n` pods the informer knows, while its watch is down and the history is compacted
    /// past the deletions: only a relist can tell, with tombstones. Returns their keys.
    async fn delete_while_down(&mut self, n: usize) -> Vec<String> {
        let server = self.cluster.server.clone();
        let inf = self.inf.clone();
        while_watch_down(&server, &inf, || {
            let mut gone = Vec::new();
            for _ in 0..n {
                let (ns, name) = self.cluster.live.swap_remove(0);
                server.delete("v1", "Pod", Some(&ns), &name).unwrap();
                gone.push(format!("{ns}/{name}"));
            }
            gone
        })
        .await
    }

    /// Keys the recorder got tombstones for.
    fn tombstones(&self) -> BTreeSet<String> {
        tombstone_keys(&self.rec.deliveries())
    }

    /// Waits until everything agrees with the server; checks every history. Returns the
    /// notifications the plugin checked.
    async fn settle(&self, what: &str) -> u64 {
        let want = server_state(self.server());
        until(&format!("{what}: cache equals the server"), || {
            cache_state(&self.inf) == want
        })
        .await;
        until_replayed(&format!("{what}: the recorder"), &self.rec, &want).await;
        let (n, sum) = server_checksum(self.server());
        until(
            &format!("{what}: the plugin's view equals the server"),
            || {
                gauge(&self.view, "view_size") == Some(n as f64)
                    && gauge(&self.view, "view_checksum") == Some(sum)
            },
        )
        .await;
        let (seen, gaps, dups) = seq_figures(&self.view);
        assert_eq!((gaps, dups), (0, 0), "{what}: nothing lost or repeated");
        seen
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_closed_mid_stream_resumes_without_relist_and_misses_nothing() {
    let mut h = Harness::start(100).await;
    watching(h.server(), &h.inf).await;
    // The next three watches each end after 5 events.
    h.server().faults().close_watch_after(5, 3);
    h.server().close_watches();
    h.churn(300).await;
    h.settle("watch closed mid-stream").await;
    assert_eq!(
        lists(h.server()).len(),
        1,
        "a closed watch is resumed, not relisted"
    );
    assert!(requests_of(h.server(), Verb::Watch).len() >= 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_with_a_new_history_relists_with_a_tombstone_per_missed_delete() {
    let mut h = Harness::start(100).await;
    h.churn(50).await;
    h.settle("before").await;
    let lists_before = lists(h.server()).len();
    let server = h.server().clone();
    let inf = h.inf.clone();
    let gone = while_watch_down(&server, &inf, || {
        server.restart();
        let mut gone = Vec::new();
        for _ in 0..10 {
            let (ns, name) = h.cluster.live.swap_remove(0);
            server.delete("v1", "Pod", Some(&ns), &name).unwrap();
            gone.push(format!("{ns}/{name}"));
        }
        gone
    })
    .await;
    h.churn(50).await;
    h.settle("after a restart").await;
    assert!(lists(h.server()).len() > lists_before, "relisted");
    let t = h.tombstones();
    assert!(
        gone.iter().all(|k| t.contains(k)),
        "{gone:?} not all in {t:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_410_expired_relists_each_time_and_stays_consistent() {
    let mut h = Harness::start(100).await;
    for _ in 0..5 {
        h.churn(40).await;
        watching(h.server(), &h.inf).await;
        h.server().compact();
        h.server().expire_watches();
    }
    h.churn(40).await;
    h.settle("410 storm").await;
    assert!(
        lists(h.server()).len() >= 6,
        "{} lists",
        lists(h.server()).len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_with_retry_after_backs_off_and_rewatches_without_relist() {
    let mut h = Harness::start(100).await;
    watching(h.server(), &h.inf).await;
    let watches = requests_of(h.server(), Verb::Watch).len();
    h.server().faults().fail_next(Verb::Watch, 429, Some(1), 2);
    h.server().close_watches();
    h.churn(100).await;
    h.settle("429 with Retry-After").await;
    assert_eq!(
        lists(h.server()).len(),
        1,
        "a throttled watch is retried, not relisted"
    );
    assert!(requests_of(h.server(), Verb::Watch).len() >= watches + 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_errors_on_list_and_watch_are_retried() {
    let mut h = Harness::start(100).await;
    watching(h.server(), &h.inf).await;
    h.server().faults().fail_next(Verb::Watch, 500, None, 2);
    h.server().faults().fail_next(Verb::List, 500, None, 2);
    h.server().expire_watches();
    h.churn(100).await;
    h.settle("500s").await;
    let failed_lists = lists(h.server()).len();
    assert!(
        failed_lists >= 4,
        "two failed relists, then one that worked: {failed_lists}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_responses_delay_but_lose_nothing() {
    let mut h = Harness::start(100).await;
    watching(h.server(), &h.inf).await;
    h.server().faults().slow(Duration::from_millis(40));
    h.server().close_watches();
    h.churn(100).await;
    h.server().expire_watches();
    h.churn(100).await;
    h.settle("slow responses").await;
    h.server().faults().reset();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_watch_line_restarts_the_watch_and_loses_nothing() {
    let mut h = Harness::start(100).await;
    watching(h.server(), &h.inf).await;
    h.server().faults().malformed_line_next_watch();
    h.server().close_watches();
    h.churn(200).await;
    h.settle("malformed line").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_list_page_is_retried_and_missed_deletes_become_tombstones() {
    let mut h = Harness::start(1_200).await;
    h.server().faults().fail_list_page(1, 500);
    let gone = h.delete_while_down(20).await;
    h.churn(100).await;
    h.settle("a failed list page").await;
    let t = h.tombstones();
    assert!(
        gone.iter().all(|k| t.contains(k)),
        "{gone:?} not all in {t:?}"
    );
    let pages = requests_of(h.server(), Verb::List)
        .iter()
        .filter(|r| r.query.contains_key("continue"))
        .count();
    assert!(pages >= 4, "paged relists: {pages} continuation pages");
}

/// A plugin's entry in `/plugins`.
fn plugin_json<'a>(all: &'a Value, name: &str) -> &'a Value {
    all.as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("{name} in /plugins"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_plugin_fault_hurts_only_that_plugin_and_is_reported() {
    let mut h = Harness::start(30).await;
    for i in 1..=2 {
        h.server()
            .create(pod("default", &format!("bad-{i}")))
            .unwrap();
    }
    let start = |name: &str, settings: Value, tweak: &dyn Fn(&mut PluginSpec)| {
        let mut s = faults_spec(name, settings);
        tweak(&mut s);
        Arc::new(h.manager.start(s).unwrap())
    };
    let bad = |mode: &str| json!({"mode": mode, "namePrefix": "bad-"});
    let spinner = start("spinner", bad("spin"), &|s| {
        s.limits.deadline = Duration::from_millis(50)
    });
    let bomber = start("bomber", bad("alloc"), &|s| s.limits.memory = 16 << 20);
    let trap_one = start("trap-one", bad("trap"), &|_| {});
    let trap_all = start("trap-all", json!({"mode": "trap"}), &|s| {
        s.on_failure.quarantine_after = 5
    });
    let slow = start("slow", json!({"mode": "busy", "busyMs": 20}), &|_| {});
    let erring = start("erring", bad("error"), &|s| {
        s.on_failure = OnFailure {
            policy: FailurePolicy::Retry {
                retries: 2,
                backoff: Duration::from_millis(5),
            },
            quarantine_after: 0,
        }
    });
    // Refused at start, with the panic's message; nothing else is touched.
    let e = h
        .manager
        .start(faults_spec("init-panic", json!({"panicInInit": true})))
        .err()
        .expect("a plugin panicking in init is refused");
    assert!(
        matches!(e, PluginError::Failed { phase: "init", .. }),
        "{e}"
    );
    assert!(e.to_string().contains("panic in init on purpose"), "{e}");

    h.server().create(pod("default", "bad-3")).unwrap();
    h.churn(60).await;
    let seen = h.settle("plugin faults").await;
    let total = h.rec_reg.stats().queued;
    assert_eq!(
        seen, total,
        "the healthy plugin saw every notification in order"
    );

    let all = [&spinner, &bomber, &trap_one, &slow, &erring];
    for p in all {
        until(&format!("{} caught up", p.name()), || {
            p.queues()
                .iter()
                .all(|(_, q)| q.depth == 0 && q.delivered == q.queued)
        })
        .await;
    }
    // Each fault hit the three bad- objects only (their adds; churn never touches them). A batch
    // that failed is delivered again one by one, so a call can fail twice for one notification.
    assert!((3..=6).contains(&counter(&spinner, |c| &c.deadline_hits)));
    assert!((3..=6).contains(&counter(&bomber, |c| &c.out_of_memory)));
    assert!((3..=6).contains(&counter(&trap_one, |c| &c.traps)));
    for p in [&spinner, &bomber, &trap_one] {
        assert_eq!(counter(p, |c| &c.delivered), total - 3, "{}", p.name());
        assert_eq!(counter(p, |c| &c.failed), 3, "{}", p.name());
        assert_eq!(p.state(), PluginState::Running, "{}", p.name());
    }
    assert_eq!(
        counter(&erring, |c| &c.errors),
        9,
        "first attempt + 2 retries, 3 times"
    );
    assert_eq!(counter(&erring, |c| &c.retries), 6);
    assert_eq!(counter(&slow, |c| &c.delivered), total);
    assert!(matches!(trap_all.state(), PluginState::Quarantined { .. }));
    assert_eq!(counter(&trap_all, |c| &c.failed), 5);

    // /plugins and /metrics say what happened.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let plugins = vec![
        h.view.clone(),
        spinner.clone(),
        bomber.clone(),
        trap_one,
        trap_all,
        slow,
        erring,
    ];
    let state = AdminState {
        informers: vec![h.inf.clone()],
        plugins: wisp_host::plugin::PluginSet::new(plugins),
        ..AdminState::default()
    };
    let (_stop_admin, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(admin::serve(listener, state, async {
        let _ = rx.await;
    }));
    let all = get(addr, "/plugins").await.json();
    let q = plugin_json(&all, "trap-all");
    assert_eq!(q["state"], "quarantined", "{q}");
    assert!(
        q["lastError"]
            .as_str()
            .unwrap()
            .contains("5 notifications failed in a row"),
        "{q}"
    );
    assert_eq!(
        plugin_json(&all, "spinner")["counters"]["deadlineHits"],
        counter(&spinner, |c| &c.deadline_hits)
    );
    assert_eq!(
        plugin_json(&all, "bomber")["counters"]["outOfMemory"],
        counter(&bomber, |c| &c.out_of_memory)
    );
    assert_eq!(plugin_json(&all, "view")["state"], "running");
    let m = get(addr, "/metrics").await;
    assert_eq!(
        m.sample(r#"wisp_plugin_quarantined{plugin="trap-all"}"#),
        Some(1.0),
        "{}",
        m.body
    );
    assert_eq!(
        m.sample(r#"wisp_plugin_failed_total{plugin="trap-one"}"#),
        Some(3.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_of_api_faults_plugin_traps_reloads_and_churn_loses_and_repeats_nothing() {
    let secs: u64 = std::env::var("WISP_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let mut h = Harness::start(500).await;
    // A neighbour that traps on a tenth of the new objects (skip policy, never quarantined).
    let mut t = faults_spec("trapper", json!({"mode": "trap", "namePrefix": "new-3"}));
    t.on_failure.quarantine_after = 0;
    let trapper = Arc::new(h.manager.start(t).unwrap());
    // The view plugin is reloaded again and again, alternating two builds of the same module.
    let dir = tempfile::tempdir().unwrap();
    let builds = [
        variant(&plugin_path("test_faults"), "a", dir.path()),
        variant(&plugin_path("test_faults"), "b", dir.path()),
    ];
    let mut rng = Lcg(99);
    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    let mut reloads = 0u64;
    let mut last_reload = Instant::now();
    let started = Instant::now();
    // At least `secs` seconds and at least a reload for each (one every 0.7 s when the
    // machine keeps up): a busy machine makes the soak longer, not thinner.
    while started.elapsed() < Duration::from_secs(secs) || reloads < secs {
        assert!(
            started.elapsed() < patience(Duration::from_secs(secs * 5)),
            "only {reloads} reloads in {:?}",
            started.elapsed()
        );
        h.churn(20).await;
        let server = h.server().clone();
        let f = server.faults();
        let fault = match rng.next(100) {
            0..=14 => {
                server.close_watches();
                "watch closed"
            }
            15..=24 => {
                f.close_watch_after(2, 1);
                "watch closed mid-stream"
            }
            25..=34 => {
                f.fail_next(Verb::Watch, 429, Some(0), 1);
                server.close_watches();
                "429"
            }
            35..=44 => {
                f.fail_next(Verb::List, 500, None, 1);
                server.expire_watches();
                "500 on relist"
            }
            45..=54 => {
                server.compact();
                server.expire_watches();
                "410 expired"
            }
            55..=59 => {
                f.malformed_line_next_watch();
                server.close_watches();
                "malformed line"
            }
            60..=61 => {
                server.restart();
                "restart"
            }
            62..=66 => {
                f.fail_list_page(1, 500);
                server.expire_watches();
                "failed list page"
            }
            _ => "none",
        };
        *faults.entry(fault).or_default() += 1;
        if last_reload.elapsed() > Duration::from_millis(700) {
            let view = h.view.clone();
            let spec = faults_spec("view", json!({}));
            let spec = PluginSpec {
                module: builds[(reloads % 2) as usize].clone(),
                ..spec
            };
            tokio::task::spawn_blocking(move || view.reload(spec))
                .await
                .unwrap()
                .expect("the new build is accepted");
            reloads += 1;
            last_reload = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    h.server().faults().reset();
    let checked = h.settle("soak").await;
    let (_, lost, repeated) = seq_figures(&h.view);
    // The trapper: everything delivered or failed, exactly once each.
    let total = h.rec_reg.stats().queued;
    until("trapper caught up", || {
        trapper
            .queues()
            .iter()
            .all(|(_, q)| q.depth == 0 && q.delivered == q.queued)
    })
    .await;
    let (ok, failed) = (
        counter(&trapper, |c| &c.delivered),
        counter(&trapper, |c| &c.failed),
    );
    assert_eq!(
        ok + failed,
        total,
        "trapper: delivered + failed = notifications"
    );
    // Exactly the notifications about its objects failed (a batch that trapped is delivered again
    // one by one, so it traps more often than that).
    let its = h
        .rec
        .deliveries()
        .iter()
        .filter(|d| d.notification.object().meta().name().starts_with("new-3"))
        .count() as u64;
    assert!(its > 0, "some objects make the trapper trap");
    assert_eq!(failed, its, "trapper: failed = notifications about new-3*");
    assert!(counter(&trapper, |c| &c.traps) >= failed);
    let injected: u64 = faults
        .iter()
        .filter(|(k, _)| **k != "none")
        .map(|(_, v)| v)
        .sum();
    println!(
        "soak: {secs} s, {} changes, {injected} faults injected {faults:?}, {reloads} reloads, {} relists; view plugin checked {checked} notifications: {lost} lost, {repeated} duplicated; trapper {ok} ok + {failed} trapped of {total}",
        h.changes,
        lists(h.server()).len() - 1,
    );
    assert_eq!(h.view.running().generation, reloads + 1);
}
