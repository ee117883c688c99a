use std::sync::atomic::AtomicBool;

use serde_json::json;

use super::*;
use crate::informer::Object;
use crate::informer::delta_fifo::Delta;
use crate::informer::handler::{Delivery, Recorder};
use crate::informer::memory::MemorySource;
use crate::informer::object::test_util::obj;
use crate::informer::real_fifo::Popped;

fn pod(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}})
}

/// The queue these tests run over: the RealFIFO when this file is included again as
/// `tests_over_real_fifo` (see the bottom of `shared_informer.rs`), else the DeltaFIFO.
fn queue() -> QueueKind {
    if module_path!().ends_with("over_real_fifo") {
        QueueKind::RealFifo
    } else {
        QueueKind::DeltaFifo
    }
}

fn informer_over(src: &MemorySource) -> Arc<SharedInformer> {
    let config = InformerConfig {
        queue: queue(),
        ..InformerConfig::default()
    };
    SharedInformer::new("pods", Arc::new(src.clone()), config)
}

/// Starts the informer; returns a guard that stops it when dropped.
fn start(inf: &Arc<SharedInformer>) -> tokio::sync::oneshot::Sender<()> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(inf.clone().run(async {
        let _ = rx.await;
    }));
    tx
}

const T: Duration = Duration::from_secs(10);

fn kinds(d: &[Delivery]) -> Vec<&'static str> {
    d.iter()
        .map(|d| match &d.notification {
            Notification::Add {
                initial_list: true, ..
            } => "add(initial)",
            Notification::Add { .. } => "add",
            Notification::Update { .. } if d.notification.is_resync() => "resync",
            Notification::Update { .. } => "update",
            Notification::Delete { .. } => "delete",
        })
        .collect()
}

#[tokio::test]
async fn a_handler_added_while_running_first_receives_every_cached_object_as_initial_list() {
    let src = MemorySource::new();
    for i in 0..50 {
        src.apply(pod(&format!("p{i}"))).unwrap();
    }
    let inf = informer_over(&src);
    let early = Recorder::new();
    let r1 = inf
        .add_event_handler("early", Box::new(early.clone()), Duration::ZERO)
        .unwrap();
    let _stop = start(&inf);
    assert!(wait_for(crate::test_time::patience(T), || r1.has_synced()).await);

    let late = Recorder::new();
    let r2 = inf
        .add_event_handler("late", Box::new(late.clone()), Duration::ZERO)
        .unwrap();
    assert!(wait_for(crate::test_time::patience(T), || r2.has_synced()).await);
    let seen = late.deliveries();
    assert_eq!(seen.len(), 50);
    assert!(kinds(&seen).iter().all(|k| *k == "add(initial)"));
    assert_eq!(
        seen.iter().map(|d| d.seq).collect::<Vec<_>>(),
        (1..=50).collect::<Vec<u64>>()
    );

    src.apply(pod("after")).unwrap();
    assert!(
        wait_for(crate::test_time::patience(T), || late.len() == 51
            && early.len() == 51)
        .await
    );
    assert_eq!(kinds(&late.deliveries()[50..]), ["add"]);
}

/// A handler that blocks until released.
struct Gate {
    open: Arc<AtomicBool>,
    inner: Recorder,
}

impl EventHandler for Gate {
    fn handle(&mut self, batch: &[Delivery]) {
        while !self.open.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(2));
        }
        self.inner.handle(batch);
    }
}

#[tokio::test]
async fn a_late_handler_is_not_synced_until_its_replay_is_handled() {
    let src = MemorySource::new();
    src.apply(pod("a")).unwrap();
    let inf = informer_over(&src);
    let _stop = start(&inf);
    assert!(wait_for(crate::test_time::patience(T), || inf.has_synced()).await);
    let open = Arc::new(AtomicBool::new(false));
    let rec = Recorder::new();
    let reg = inf
        .add_event_handler(
            "gated",
            Box::new(Gate {
                open: open.clone(),
                inner: rec.clone(),
            }),
            Duration::ZERO,
        )
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(inf.has_synced());
    assert!(!reg.has_synced(), "replayed objects are not handled yet");
    open.store(true, Ordering::SeqCst);
    assert!(wait_for(crate::test_time::patience(T), || reg.has_synced()).await);
    assert_eq!(rec.len(), 1);
}

#[tokio::test]
async fn a_slow_listener_does_not_delay_a_fast_one() {
    let src = MemorySource::new();
    let inf = informer_over(&src);
    let open = Arc::new(AtomicBool::new(false));
    let slow = Recorder::new();
    let fast = Recorder::new();
    let rs = inf
        .add_event_handler(
            "slow",
            Box::new(Gate {
                open: open.clone(),
                inner: slow.clone(),
            }),
            Duration::ZERO,
        )
        .unwrap();
    inf.add_event_handler("fast", Box::new(fast.clone()), Duration::ZERO)
        .unwrap();
    let _stop = start(&inf);
    for i in 0..2000 {
        src.apply(pod(&format!("p{i}"))).unwrap();
    }
    assert!(
        wait_for(crate::test_time::patience(T), || fast.len() == 2000).await,
        "fast listener got {}",
        fast.len()
    );
    assert!(slow.is_empty(), "the slow listener is still blocked");
    assert!(
        rs.stats().depth > 0,
        "its notifications wait in its own queue"
    );
    open.store(true, Ordering::SeqCst);
    assert!(wait_for(crate::test_time::patience(T), || slow.len() == 2000).await);
    let seqs: Vec<u64> = slow.deliveries().iter().map(|d| d.seq).collect();
    assert_eq!(
        seqs,
        (1..=2000).collect::<Vec<u64>>(),
        "in order, no loss, no duplicates"
    );
}

struct Panicky {
    inner: Recorder,
}

impl EventHandler for Panicky {
    fn on_add(&mut self, obj: &Arc<Object>, _initial: bool) {
        if obj.meta().name() == "boom" {
            panic!("handler failure on purpose");
        }
        self.inner.handle(&[]);
    }
}

#[tokio::test]
async fn a_panicking_handler_neither_stops_the_host_nor_stalls_other_listeners() {
    let src = MemorySource::new();
    let inf = informer_over(&src);
    let other = Recorder::new();
    let bad = inf
        .add_event_handler(
            "bad",
            Box::new(Panicky {
                inner: Recorder::new(),
            }),
            Duration::ZERO,
        )
        .unwrap();
    inf.add_event_handler("other", Box::new(other.clone()), Duration::ZERO)
        .unwrap();
    let _stop = start(&inf);
    src.apply(pod("boom")).unwrap();
    src.apply(pod("fine")).unwrap();
    assert!(wait_for(crate::test_time::patience(T), || other.len() == 2).await);
    assert!(
        wait_for(crate::test_time::patience(T), || bad.stats().delivered == 1).await,
        "the bad listener goes on after the panic"
    );
    let s = bad.stats();
    assert_eq!(
        (s.panics, s.failed),
        (1, 1),
        "the panicking call is not delivered"
    );
}

#[tokio::test]
async fn removing_a_handler_is_idempotent_drops_its_buffer_and_ignores_foreign_handles() {
    let src = MemorySource::new();
    let inf = informer_over(&src);
    let other_inf = informer_over(&src);
    let open = Arc::new(AtomicBool::new(false));
    let gated = Recorder::new();
    let reg = inf
        .add_event_handler(
            "gated",
            Box::new(Gate {
                open: open.clone(),
                inner: gated.clone(),
            }),
            Duration::ZERO,
        )
        .unwrap();
    let keep = Recorder::new();
    let keep_reg = inf
        .add_event_handler("keep", Box::new(keep.clone()), Duration::ZERO)
        .unwrap();
    let _stop = start(&inf);
    for i in 0..100 {
        src.apply(pod(&format!("p{i}"))).unwrap();
    }
    assert!(wait_for(crate::test_time::patience(T), || keep.len() == 100).await);
    inf.remove_event_handler(&reg);
    inf.remove_event_handler(&reg);
    other_inf.remove_event_handler(&keep_reg);
    open.store(true, Ordering::SeqCst);
    src.apply(pod("after")).unwrap();
    assert!(
        wait_for(crate::test_time::patience(T), || keep.len() == 101).await,
        "the foreign removal was a no-op"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        gated.len() <= 64,
        "at most the batch in hand was delivered, got {}",
        gated.len()
    );
    assert!(
        gated
            .deliveries()
            .iter()
            .all(|d| d.notification.object().meta().name() != "after")
    );
}

#[tokio::test]
async fn adding_a_handler_to_a_stopped_informer_is_an_error() {
    let src = MemorySource::new();
    let inf = informer_over(&src);
    let stop = start(&inf);
    assert!(wait_for(crate::test_time::patience(T), || inf.has_synced()).await);
    stop.send(()).unwrap();
    assert!(wait_for(crate::test_time::patience(T), || lock(&inf.state).stopped).await);
    let err = inf
        .add_event_handler("late", Box::new(Recorder::new()), Duration::ZERO)
        .err();
    assert_eq!(err, Some(InformerError::Stopped("pods".into())));
}

#[test]
fn resync_periods_follow_client_go_rules() {
    let inf = informer_with_resync(&MemorySource::new(), Duration::from_secs(3600));
    assert_eq!(inf.resync_check_period(), Duration::from_secs(3600));
    let never = inf
        .add_event_handler("never", Box::new(Recorder::new()), Duration::ZERO)
        .unwrap();
    let tiny = inf
        .add_event_handler("tiny", Box::new(Recorder::new()), Duration::from_millis(10))
        .unwrap();
    assert_eq!(
        tiny.resync_period(),
        MINIMUM_RESYNC_PERIOD,
        "below 1 s is raised to 1 s"
    );
    assert_eq!(
        inf.resync_check_period(),
        MINIMUM_RESYNC_PERIOD,
        "the check period is the smallest listener period"
    );
    let slow = inf
        .add_event_handler("slow", Box::new(Recorder::new()), Duration::from_secs(30))
        .unwrap();
    assert_eq!(never.resync_period(), Duration::ZERO, "0 means never");
    assert_eq!(slow.resync_period(), Duration::from_secs(30));
}

#[tokio::test]
async fn a_listener_added_after_start_with_a_shorter_period_is_raised_to_the_check_period() {
    let src = MemorySource::new();
    let inf = SharedInformer::new(
        "pods",
        Arc::new(src.clone()),
        InformerConfig {
            default_resync: Duration::from_secs(10),
            queue: queue(),
            ..Default::default()
        },
    );
    let _stop = start(&inf);
    assert!(wait_for(crate::test_time::patience(T), || inf.has_synced()).await);
    let reg = inf
        .add_event_handler("late", Box::new(Recorder::new()), Duration::from_secs(2))
        .unwrap();
    assert_eq!(reg.resync_period(), Duration::from_secs(10));
    assert_eq!(inf.resync_check_period(), Duration::from_secs(10));
}

/// Registers one recorder per `(name, resync, relist)`, delivers a first list of `a` and `b`
/// (RV 1), then a relist where `a` is unchanged and `b` changed, calling the resync check first
/// when `check` is set. Returns each recorder's notification kinds, in registration order.
fn relist_seen_by(
    informer_resync: Duration,
    check: bool,
    handlers: &[(&str, Duration, RelistResyncs)],
) -> Vec<Vec<&'static str>> {
    let inf = informer_with_resync(&MemorySource::new(), informer_resync);
    let regs: Vec<(Recorder, HandlerRegistration)> = handlers
        .iter()
        .map(|&(name, resync, relist_resyncs)| {
            let rec = Recorder::new();
            let opts = HandlerOptions {
                resync,
                relist_resyncs,
                ..HandlerOptions::default()
            };
            let reg = inf
                .add_event_handler_with_options(name, Box::new(rec.clone()), opts)
                .unwrap();
            (rec, reg)
        })
        .collect();
    inf.handle_deltas(
        vec![
            Delta::Added(obj(Some("ns"), "a", "1")),
            Delta::Added(obj(Some("ns"), "b", "1")),
        ],
        true,
    );
    if check {
        // The reflector's resync loop asks at its first tick; nobody is due yet.
        assert!(!inf.processor.should_resync(Instant::now()));
    }
    // A relist: a unchanged, b changed.
    inf.handle_deltas(vec![Delta::Replaced(obj(Some("ns"), "a", "1"))], false);
    inf.handle_deltas(vec![Delta::Replaced(obj(Some("ns"), "b", "2"))], false);
    inf.handle_deltas(vec![Delta::Added(obj(Some("ns"), "c", "3"))], false);
    regs.iter()
        .map(|(rec, reg)| {
            // Every handler gets at least the two adds, b's update and c's add.
            let deadline = std::time::Instant::now() + crate::test_time::patience(T);
            while rec
                .deliveries()
                .last()
                .map(|d| d.notification.object().meta().name().to_owned())
                != Some("c".into())
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(2));
            }
            assert!(reg.stats().delivered >= 4);
            kinds(&rec.deliveries())
        })
        .collect()
}

const WITH_RELIST_RESYNC: [&str; 5] = ["add(initial)", "add(initial)", "resync", "update", "add"];
const WITHOUT: [&str; 4] = ["add(initial)", "add(initial)", "update", "add"];

/// client-go `sharedProcessor`: every listener starts in the syncing set, so until the first
/// resync check a relist's unchanged object reaches listeners without a resync period too.
#[test]
fn a_relists_unchanged_objects_reach_every_listener_before_the_first_resync_check() {
    let seen = relist_seen_by(
        Duration::from_secs(1),
        false,
        &[
            ("resync", Duration::from_secs(1), RelistResyncs::Deliver),
            ("no-resync", Duration::ZERO, RelistResyncs::Deliver),
            ("skip", Duration::ZERO, RelistResyncs::Skip),
        ],
    );
    assert_eq!(
        seen,
        [&WITH_RELIST_RESYNC[..], &WITH_RELIST_RESYNC, &WITHOUT]
    );
}

/// client-go `shouldResync`: the check keeps only listeners whose resync is due; a listener
/// without a period leaves the syncing set for good.
#[test]
fn after_a_resync_check_a_relists_unchanged_objects_go_only_to_listeners_whose_resync_is_due() {
    let seen = relist_seen_by(
        Duration::from_secs(1),
        true,
        &[
            ("resync", Duration::from_secs(1), RelistResyncs::Deliver),
            ("no-resync", Duration::ZERO, RelistResyncs::Deliver),
        ],
    );
    assert_eq!(seen, [WITHOUT, WITHOUT]);
}

/// An informer with resync 0 never checks: its listeners stay in the syncing set and get every
/// relist's unchanged objects as resyncs (flagged so), unless registered with
/// [`RelistResyncs::Skip`].
#[test]
fn an_informer_that_never_resyncs_hands_relist_resyncs_to_every_listener_but_those_that_skip() {
    let seen = relist_seen_by(
        Duration::ZERO,
        false,
        &[
            ("deliver", Duration::ZERO, RelistResyncs::Deliver),
            ("skip", Duration::ZERO, RelistResyncs::Skip),
        ],
    );
    assert_eq!(seen, [&WITH_RELIST_RESYNC[..], &WITHOUT]);
}

#[tokio::test(start_paused = true)]
async fn the_resync_timer_delivers_syncs_only_to_due_listeners() {
    let inf = informer_with_resync(&MemorySource::new(), Duration::from_secs(1));
    let fast = Recorder::new();
    let slow = Recorder::new();
    let rf = inf
        .add_event_handler("fast", Box::new(fast.clone()), Duration::from_secs(1))
        .unwrap();
    let rs = inf
        .add_event_handler("slow", Box::new(slow.clone()), Duration::from_secs(3))
        .unwrap();
    inf.handle_deltas(vec![Delta::Added(obj(Some("ns"), "a", "1"))], true);
    // Like the reflector's resync loop: every check period, resync when any listener is due.
    for _ in 0..3 {
        tokio::time::advance(Duration::from_secs(1)).await;
        if inf.processor.should_resync(Instant::now()) {
            inf.fifo.resync();
            while !inf.fifo.is_empty() {
                inf.fifo
                    .pop_batch(&mut |p, i| inf.handle_popped(p, i))
                    .unwrap();
            }
        }
    }
    let settle = |r: &HandlerRegistration, n| {
        let deadline = std::time::Instant::now() + crate::test_time::patience(T);
        while r.stats().delivered < n && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    };
    settle(&rf, 4);
    settle(&rs, 2);
    assert_eq!(
        kinds(&fast.deliveries()),
        ["add(initial)", "resync", "resync", "resync"]
    );
    assert_eq!(kinds(&slow.deliveries()), ["add(initial)", "resync"]);
}

#[tokio::test]
async fn a_running_informer_resyncs_due_listeners_on_its_timer() {
    let src = MemorySource::new();
    src.apply(pod("a")).unwrap();
    let inf = informer_with_resync(&src, Duration::from_secs(1));
    let syncing = Recorder::new();
    let quiet = Recorder::new();
    inf.add_event_handler("syncing", Box::new(syncing.clone()), Duration::from_secs(1))
        .unwrap();
    let rq = inf
        .add_event_handler("quiet", Box::new(quiet.clone()), Duration::ZERO)
        .unwrap();
    let _stop = start(&inf);
    assert!(wait_for(crate::test_time::patience(T), || rq.has_synced()).await);
    let resyncs = || {
        kinds(&syncing.deliveries())
            .iter()
            .filter(|k| **k == "resync")
            .count()
    };
    assert!(
        wait_for(crate::test_time::patience(T), || resyncs() >= 2).await,
        "two resyncs within the timeout"
    );
    assert_eq!(
        kinds(&quiet.deliveries()),
        ["add(initial)"],
        "a listener without resync gets none"
    );
}

fn informer_with_resync(src: &MemorySource, resync: Duration) -> Arc<SharedInformer> {
    SharedInformer::new(
        "pods",
        Arc::new(src.clone()),
        InformerConfig {
            default_resync: resync,
            queue: queue(),
            ..Default::default()
        },
    )
}

/// client-go `TestListenerResyncPeriods`: a listener whose period equals the check period
/// resyncs at every check. Checks run on a fixed tick, each a little late by a varying amount;
/// an early one must not skip a whole period.
#[test]
fn listener_resync_periods_a_listener_at_the_check_period_resyncs_at_every_check() {
    let inf = informer_with_resync(&MemorySource::new(), Duration::from_secs(1));
    inf.add_event_handler("h", Box::new(Recorder::new()), Duration::from_secs(1))
        .unwrap();
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let ms = Duration::from_millis;
    assert!(inf.processor.should_resync(t0 + s + ms(5)));
    assert!(
        inf.processor.should_resync(t0 + 2 * s + ms(1)),
        "a check less late than the previous one still finds the listener due"
    );
    assert!(inf.processor.should_resync(t0 + 3 * s + ms(3)));
    assert!(inf.processor.should_resync(t0 + 4 * s));
    assert!(
        !inf.processor.should_resync(t0 + 4 * s + ms(500)),
        "but never twice in one period"
    );
}

/// client-go `AddEventHandlerWithResyncPeriod`: an informer whose resync (check period) is 0
/// never resyncs; a handler's period does not turn resync on.
#[test]
fn resync_check_period_zero_means_the_informer_never_resyncs() {
    let inf = informer_over(&MemorySource::new());
    let reg = inf
        .add_event_handler("h", Box::new(Recorder::new()), Duration::from_secs(5))
        .unwrap();
    assert_eq!(inf.resync_check_period(), Duration::ZERO);
    assert_eq!(reg.resync_period(), Duration::ZERO);
    assert!(
        !inf.processor
            .should_resync(Instant::now() + Duration::from_secs(3600))
    );
}

/// client-go `processReplacedAllInfo`: a `ReplacedAll` replaces the cache at once, then tells
/// listeners: a tombstone for each cached object missing from the list first, then the list
/// in its order (an update for what was cached, a sync when unchanged, an add otherwise); the
/// store's resourceVersion is the list's. A `SyncAll` resyncs what the cache holds; a
/// `Bookmark` moves the store's resourceVersion.
#[test]
fn an_atomic_relist_replaces_the_cache_at_once_then_notifies_deletions_first() {
    let inf = informer_with_resync(&MemorySource::new(), Duration::from_secs(1));
    let rec = Recorder::new();
    let reg = inf
        .add_event_handler("rec", Box::new(rec.clone()), Duration::from_secs(1))
        .unwrap();
    inf.handle_popped(
        Popped::ReplacedAll {
            objects: vec![obj(Some("ns"), "a", "1"), obj(Some("ns"), "b", "2")],
            resource_version: "2".into(),
        },
        true,
    );
    assert_eq!(inf.stats().store_resource_version, "2");
    inf.handle_popped(
        Popped::ReplacedAll {
            objects: vec![obj(Some("ns"), "c", "7"), obj(Some("ns"), "a", "1")],
            resource_version: "9".into(),
        },
        false,
    );
    let mut names: Vec<String> = inf.cache().list_keys();
    names.sort();
    assert_eq!(names, ["ns/a", "ns/c"]);
    assert_eq!(inf.stats().store_resource_version, "9");
    inf.handle_popped(Popped::SyncAll, false);
    inf.handle_popped(Popped::Bookmark("12".into()), false);
    assert_eq!(inf.stats().store_resource_version, "12");

    let deadline = std::time::Instant::now() + crate::test_time::patience(T);
    while reg.stats().delivered < 7 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    let seen: Vec<String> = rec
        .deliveries()
        .iter()
        .map(|d| {
            let o = d.notification.object();
            format!("{} {}", kinds(std::slice::from_ref(d))[0], o.meta().name())
        })
        .collect();
    assert_eq!(
        seen,
        [
            "add(initial) a",
            "add(initial) b",
            "delete b",
            "add c",
            "resync a",
            "resync a",
            "resync c"
        ]
    );
}
