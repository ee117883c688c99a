//! Listeners on the shared executor: order, fairness between listeners and groups, stop and
//! join, panics, unfinished batches.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{Listener, ListenerOptions};
use crate::informer::executor::{Executor, GroupId, Placement};
use crate::informer::handler::{Delivery, EventHandler, Notification, Recorder};
use crate::informer::object::test_util::obj;
use crate::sync::{lock, wait};

const T: Duration = Duration::from_secs(30);

fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + crate::test_time::patience(T);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A gate a handler waits at until a test opens it.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    fn wait(&self) {
        let (m, c) = &*self.0;
        let mut open = lock(m);
        while !*open {
            open = wait(c, open);
        }
    }

    fn open(&self) {
        *lock(&self.0.0) = true;
        self.0.1.notify_all();
    }
}

type OnBatch = Box<dyn FnMut(&[Delivery]) + Send>;

/// A handler on the executor that records what it gets and runs `on_batch` first.
struct Probe {
    rec: Recorder,
    group: Option<GroupId>,
    batch_max: Option<usize>,
    on_batch: OnBatch,
    /// Batches to leave unfinished, each for this long.
    unfinished_for: Option<Duration>,
    resume_at: Option<Instant>,
    resumed: Arc<AtomicUsize>,
    dropped: Arc<AtomicBool>,
}

impl Probe {
    fn new(rec: &Recorder) -> Self {
        Self {
            rec: rec.clone(),
            group: None,
            batch_max: None,
            on_batch: Box::new(|_| {}),
            unfinished_for: None,
            resume_at: None,
            resumed: Arc::default(),
            dropped: Arc::default(),
        }
    }

    fn group(mut self, g: GroupId) -> Self {
        self.group = Some(g);
        self
    }

    fn batch(mut self, n: usize) -> Self {
        self.batch_max = Some(n);
        self
    }

    fn on_batch(mut self, f: impl FnMut(&[Delivery]) + Send + 'static) -> Self {
        self.on_batch = Box::new(f);
        self
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
    }
}

impl EventHandler for Probe {
    fn handle(&mut self, batch: &[Delivery]) {
        (self.on_batch)(batch);
        self.rec.handle(batch);
        self.resume_at = self.unfinished_for.map(|d| Instant::now() + d);
    }

    fn unfinished(&mut self) -> Option<Instant> {
        self.resume_at
    }

    fn resume(&mut self) {
        self.resumed.fetch_add(1, Ordering::SeqCst);
        self.resume_at = None;
    }
}

fn listener(exec: &Executor, name: &str, h: Probe) -> Arc<Listener> {
    let options = ListenerOptions {
        batch_max: h.batch_max.unwrap_or(64),
        placement: Placement::Shared { group: h.group },
        ..ListenerOptions::default()
    };
    Listener::new(
        name.into(),
        Box::new(h),
        options,
        Arc::new(|| true),
        Some(exec.clone()),
    )
    .unwrap()
}

fn add(l: &Listener, i: usize) {
    l.add(Notification::Add {
        obj: obj(Some("ns"), &format!("p{i}"), "1"),
        initial_list: true,
    });
}

fn seqs(rec: &Recorder) -> Vec<u64> {
    rec.deliveries().iter().map(|d| d.seq).collect()
}

/// Counts handlers inside `handle` at once, keeping the highest count seen.
#[derive(Clone, Default)]
struct Inside {
    now: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
}

impl Inside {
    fn enter(&self) {
        let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(n, Ordering::SeqCst);
        std::thread::yield_now();
    }

    fn leave(&self) {
        self.now.fetch_sub(1, Ordering::SeqCst);
    }

    fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }
}

#[test]
fn each_listener_gets_its_notifications_in_order_never_on_two_workers_at_once() {
    let exec = Executor::new(2).unwrap();
    let n = 3000;
    let mut ls = Vec::new();
    for i in 0..4 {
        let rec = Recorder::new();
        let inside = Inside::default();
        let seen = inside.clone();
        // Small batches: many turns, many chances to be picked by both workers.
        let l = listener(
            &exec,
            &format!("l{i}"),
            Probe::new(&rec).batch(3).on_batch(move |_| {
                seen.enter();
                seen.leave();
            }),
        );
        ls.push((l, rec, inside));
    }
    for i in 0..n {
        for (l, _, _) in &ls {
            add(l, i);
        }
    }
    for (l, rec, inside) in &ls {
        eventually("all delivered", || l.stats().delivered == n as u64);
        assert_eq!(seqs(rec), (1..=n as u64).collect::<Vec<_>>());
        assert_eq!(inside.max(), 1, "{} ran on two workers at once", l.name());
        assert!(l.has_synced());
    }
    exec.shutdown();
}

#[test]
fn a_listener_with_a_huge_backlog_does_not_starve_another() {
    // One worker: whoever it runs, the others wait; round-robin gives each one batch per turn.
    let exec = Executor::new(1).unwrap();
    let gate = Gate::default();
    let (big_rec, small_rec) = (Recorder::new(), Recorder::new());
    let big_batches = Arc::new(AtomicUsize::new(0));
    let (g, b) = (gate.clone(), big_batches.clone());
    let big = listener(
        &exec,
        "big",
        Probe::new(&big_rec).batch(10).on_batch(move |_| {
            if b.fetch_add(1, Ordering::SeqCst) == 0 {
                g.wait();
            }
        }),
    );
    let big_when_small_ran = Arc::new(AtomicUsize::new(usize::MAX));
    let (b, seen) = (big_batches.clone(), big_when_small_ran.clone());
    let small = listener(
        &exec,
        "small",
        Probe::new(&small_rec).on_batch(move |_| {
            seen.store(b.load(Ordering::SeqCst), Ordering::SeqCst);
        }),
    );
    add(&big, 0);
    eventually("big's first batch in the handler", || {
        big_batches.load(Ordering::SeqCst) == 1
    });
    for i in 1..100_000 {
        add(&big, i);
    }
    add(&small, 0);
    gate.open();
    eventually("small handled", || small_rec.len() == 1);
    assert_eq!(
        big_when_small_ran.load(Ordering::SeqCst),
        1,
        "small ran right after big's batch in hand, not after big's 10 000 batches"
    );
    eventually("big drained", || big.stats().delivered == 100_000);
    assert_eq!(seqs(&big_rec), (1..=100_000).collect::<Vec<_>>());
    exec.shutdown();
}

#[test]
fn a_group_runs_one_listener_at_a_time_and_its_waiting_listeners_hold_no_worker() {
    let exec = Executor::new(2).unwrap();
    let group = GroupId::new();
    let gate = Gate::default();
    let entered = Arc::new(AtomicBool::new(false));
    let (first_rec, second_rec, other_rec) = (Recorder::new(), Recorder::new(), Recorder::new());
    let (g, e) = (gate.clone(), entered.clone());
    let first = listener(
        &exec,
        "plugin-a",
        Probe::new(&first_rec).group(group).on_batch(move |_| {
            e.store(true, Ordering::SeqCst);
            g.wait();
        }),
    );
    let second = listener(&exec, "plugin-b", Probe::new(&second_rec).group(group));
    let other = listener(&exec, "other", Probe::new(&other_rec));
    add(&first, 0);
    eventually("the group's first listener in its handler", || {
        entered.load(Ordering::SeqCst)
    });
    add(&second, 0);
    add(&other, 0);
    // With two workers, `other` can only run if `second` did not take the free worker to wait
    // for its group.
    eventually("the other listener handled", || other_rec.len() == 1);
    eventually("the group's second listener parked", || {
        exec.stats().parked == 1
    });
    assert_eq!(second_rec.len(), 0, "not while the first runs");
    assert_eq!(exec.stats().running, 1, "only the first holds a worker");
    gate.open();
    eventually("the second listener handled once the group is free", || {
        second_rec.len() == 1
    });

    // Under load: three listeners of one group, two workers, never two inside at once.
    let inside = Inside::default();
    let group = GroupId::new();
    let mut ls = Vec::new();
    for i in 0..3 {
        let rec = Recorder::new();
        let seen = inside.clone();
        let l = listener(
            &exec,
            &format!("g{i}"),
            Probe::new(&rec).group(group).batch(2).on_batch(move |_| {
                seen.enter();
                seen.leave();
            }),
        );
        ls.push((l, rec));
    }
    for i in 0..2000 {
        for (l, _) in &ls {
            add(l, i);
        }
    }
    for (l, rec) in &ls {
        eventually("all delivered", || l.stats().delivered == 2000);
        assert_eq!(seqs(rec), (1..=2000).collect::<Vec<_>>());
    }
    assert_eq!(inside.max(), 1, "two listeners of one group ran at once");
    exec.shutdown();
}

#[test]
fn a_stopped_listener_finishes_its_batch_then_nothing_more_and_join_waits_for_it() {
    let exec = Executor::new(1).unwrap();
    let gate = Gate::default();
    // The size of the batch in hand (1 or 2: the worker may take the first add alone).
    let entered = Arc::new(AtomicUsize::new(0));
    let rec = Recorder::new();
    let (g, e) = (gate.clone(), entered.clone());
    let probe = Probe::new(&rec).batch(2).on_batch(move |batch| {
        e.store(batch.len(), Ordering::SeqCst);
        g.wait();
    });
    let dropped = probe.dropped.clone();
    let l = listener(&exec, "stopped", probe);
    for i in 0..5 {
        add(&l, i);
    }
    eventually("the first batch in the handler", || {
        entered.load(Ordering::SeqCst) > 0
    });
    let in_hand = entered.load(Ordering::SeqCst) as u64;
    l.stop();
    add(&l, 99);
    let joined = Arc::new(AtomicBool::new(false));
    let (l2, j) = (l.clone(), joined.clone());
    let joiner = std::thread::spawn(move || {
        l2.join();
        j.store(true, Ordering::SeqCst);
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        !joined.load(Ordering::SeqCst),
        "join waits for the batch in hand"
    );
    gate.open();
    joiner.join().unwrap();
    assert!(dropped.load(Ordering::SeqCst), "the handler is let go");
    assert_eq!(
        seqs(&rec),
        (1..=in_hand).collect::<Vec<_>>(),
        "the batch in hand finished, nothing after"
    );
    let s = l.stats();
    assert_eq!((s.delivered, s.depth), (in_hand, 0));

    // The worker is free for others.
    let other_rec = Recorder::new();
    let other = listener(&exec, "other", Probe::new(&other_rec));
    add(&other, 0);
    eventually("the other listener handled", || other_rec.len() == 1);

    // A listener stopped while idle lets its handler go at join, without a worker.
    let idle = Probe::new(&Recorder::new());
    let idle_dropped = idle.dropped.clone();
    let l = listener(&exec, "idle", idle);
    l.stop();
    l.join();
    assert!(idle_dropped.load(Ordering::SeqCst));
    exec.shutdown();
}

#[test]
fn a_panicking_handler_is_counted_and_keeps_neither_its_listener_nor_the_worker() {
    let exec = Executor::new(1).unwrap();
    let rec = Recorder::new();
    let bad = listener(
        &exec,
        "bad",
        Probe::new(&rec).batch(1).on_batch(|batch| {
            if batch[0].seq == 2 {
                panic!("handler failure on purpose");
            }
        }),
    );
    for i in 0..4 {
        add(&bad, i);
    }
    eventually("all handed over", || {
        let s = bad.stats();
        s.delivered + s.failed == 4
    });
    let s = bad.stats();
    assert_eq!(
        (s.panics, s.failed, s.delivered),
        (1, 1, 3),
        "a handler taking its batch whole loses that batch, counted"
    );
    assert_eq!(seqs(&rec), [1, 3, 4], "the panicking batch is skipped");
    let other_rec = Recorder::new();
    let other = listener(&exec, "other", Probe::new(&other_rec));
    add(&other, 0);
    eventually("the only worker still runs listeners", || {
        other_rec.len() == 1
    });
    exec.shutdown();
}

#[test]
fn an_unfinished_batch_waits_off_the_workers_keeps_its_group_and_stays_in_hand() {
    let exec = Executor::new(1).unwrap();
    let group = GroupId::new();
    let rec = Recorder::new();
    let mut probe = Probe::new(&rec).group(group);
    probe.unfinished_for = Some(Duration::from_millis(300));
    let resumed = probe.resumed.clone();
    let waiting = listener(&exec, "retrying", probe);
    let peer_rec = Recorder::new();
    let peer = listener(&exec, "peer", Probe::new(&peer_rec).group(group));
    let other_rec = Recorder::new();
    let other = listener(&exec, "other", Probe::new(&other_rec));

    add(&waiting, 0);
    eventually("the batch handled once", || rec.len() == 1);
    add(&peer, 0);
    add(&other, 0);
    // The only worker is free: the other listener runs during the wait.
    eventually("the other listener handled", || other_rec.len() == 1);
    assert_eq!(exec.stats().waiting, 1);
    assert_eq!(peer_rec.len(), 0, "the group is held during the wait");
    assert_eq!(waiting.stats().delivered, 0, "the batch is still in hand");
    assert!(
        !waiting.has_synced(),
        "its initial-list add is not done yet"
    );
    eventually("resumed", || resumed.load(Ordering::SeqCst) == 1);
    eventually("the batch finished", || waiting.stats().delivered == 1);
    assert!(waiting.has_synced());
    eventually("the peer runs once the group is free", || {
        peer_rec.len() == 1
    });

    // Stopping a listener that waits ends the wait at once and frees its group.
    let long = Recorder::new();
    let mut probe = Probe::new(&long).group(group);
    probe.unfinished_for = Some(Duration::from_secs(3600));
    let resumed = probe.resumed.clone();
    let l = listener(&exec, "waits-an-hour", probe);
    add(&l, 0);
    eventually("waiting", || exec.stats().waiting == 1);
    add(&peer, 1);
    l.stop();
    l.join();
    eventually("the peer runs", || peer_rec.len() == 2);
    assert_eq!(
        resumed.load(Ordering::SeqCst),
        0,
        "a stopped listener is not resumed"
    );
    exec.shutdown();
}

/// Same handler on a thread of its own: an unfinished batch sleeps on that thread, and `stop`
/// interrupts the sleep.
#[test]
fn on_its_own_thread_an_unfinished_batch_is_resumed_and_stop_ends_the_wait() {
    struct Own(Probe);
    impl EventHandler for Own {
        fn handle(&mut self, batch: &[Delivery]) {
            self.0.handle(batch);
        }
        fn unfinished(&mut self) -> Option<Instant> {
            self.0.unfinished()
        }
        fn resume(&mut self) {
            self.0.resume();
        }
    }
    let own = |probe: Probe| {
        Listener::new(
            "own".into(),
            Box::new(Own(probe)),
            ListenerOptions {
                batch_max: 64,
                ..ListenerOptions::default()
            },
            Arc::new(|| true),
            None,
        )
        .unwrap()
    };
    let rec = Recorder::new();
    let mut probe = Probe::new(&rec);
    probe.unfinished_for = Some(Duration::from_millis(50));
    let resumed = probe.resumed.clone();
    let l = own(probe);
    assert!(!l.on_executor());
    add(&l, 0);
    eventually("resumed and finished", || l.stats().delivered == 1);
    assert_eq!(resumed.load(Ordering::SeqCst), 1);
    l.stop();
    l.join();

    let mut probe = Probe::new(&rec);
    probe.unfinished_for = Some(Duration::from_secs(3600));
    let l = own(probe);
    add(&l, 0);
    eventually("waiting", || rec.len() == 2);
    let start = Instant::now();
    l.stop();
    l.join();
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "stop ended the wait"
    );
}

/// What the handlers of the fairness test did, in order, across listeners.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn push(&self, what: String) {
        lock(&self.0).push(what);
    }

    fn all(&self) -> Vec<String> {
        lock(&self.0).clone()
    }
}

/// A plugin whose every call is cut, as the runtime treats it: its turn is the one call with the
/// whole batch, then each item goes again alone, one per turn, coming back at once
/// (`unfinished() == now`) until none is left.
struct CutEveryCall {
    log: Log,
    again: VecDeque<u64>,
}

impl EventHandler for CutEveryCall {
    fn handle(&mut self, batch: &[Delivery]) {
        self.log.push(format!("cut batch of {}", batch.len()));
        self.again = batch.iter().map(|d| d.seq).collect();
    }

    fn unfinished(&mut self) -> Option<Instant> {
        (!self.again.is_empty()).then(Instant::now)
    }

    fn resume(&mut self) {
        if let Some(seq) = self.again.pop_front() {
            self.log.push(format!("cut {seq} again"));
        }
    }
}

/// Holds `exec`'s worker (its only one, in the tests that use it) until the gate returned is
/// opened.
fn hold_a_worker(exec: &Executor) -> (Arc<Listener>, Gate) {
    let (gate, entered) = (Gate::default(), Arc::new(AtomicBool::new(false)));
    let (g, e) = (gate.clone(), entered.clone());
    let blocker = listener(
        exec,
        "blocker",
        Probe::new(&Recorder::new()).on_batch(move |_| {
            e.store(true, Ordering::SeqCst);
            g.wait();
        }),
    );
    add(&blocker, 0);
    eventually("the blocker holds the worker", || {
        entered.load(Ordering::SeqCst)
    });
    (blocker, gate)
}

impl CutEveryCall {
    /// A listener on `exec`, in a group of its own, logging to `log`.
    fn listener(exec: &Executor, log: &Log, batch_max: usize) -> Arc<Listener> {
        let options = ListenerOptions {
            batch_max,
            placement: Placement::Shared {
                group: Some(GroupId::new()),
            },
            ..ListenerOptions::default()
        };
        let handler = Box::new(CutEveryCall {
            log: log.clone(),
            again: VecDeque::new(),
        });
        Listener::new(
            "cut".into(),
            handler,
            options,
            Arc::new(|| true),
            Some(exec.clone()),
        )
        .unwrap()
    }
}

#[test]
fn a_group_whose_calls_are_cut_lets_the_other_groups_run_between_its_redeliveries() {
    // One worker: whatever runs, the others wait, so the log is the schedule. It is held while
    // every queue fills, so each batch is whole and the ready queue is cut, a, b.
    let exec = Executor::new(1).unwrap();
    let (_blocker, gate) = hold_a_worker(&exec);
    let log = Log::default();
    let cut = CutEveryCall::listener(&exec, &log, 4);
    for i in 0..4 {
        add(&cut, i);
    }
    let mut fast = Vec::new();
    for name in ["a", "b"] {
        let l = log.clone();
        let probe = Probe::new(&Recorder::new())
            .group(GroupId::new())
            .batch(1)
            .on_batch(move |b| l.push(format!("{name} {}", b[0].seq)));
        let f = listener(&exec, name, probe);
        for i in 0..5 {
            add(&f, i);
        }
        fast.push(f);
    }
    gate.open();
    eventually("everything handled", || {
        cut.stats().delivered == 4 && fast.iter().all(|f| f.stats().delivered == 5)
    });
    let expected = [
        "cut batch of 4",
        "a 1",
        "b 1",
        "cut 1 again",
        "a 2",
        "b 2",
        "cut 2 again",
        "a 3",
        "b 3",
        "cut 3 again",
        "a 4",
        "b 4",
        "cut 4 again",
        "a 5",
        "b 5",
    ];
    assert_eq!(
        log.all(),
        expected,
        "each ready group runs once between two redeliveries, not after all of them"
    );
    exec.shutdown();
}
