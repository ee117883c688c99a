//! A processor listener (client-go `processorListener`): its own queue between `add` (called by
//! the informer's fan-out, never blocking on the handler) and its handler, which runs on the
//! listener's own thread. Each listener keeps its own resync period and its own HasSynced (the
//! informer synced, and every initial-list notification handled).
//!
//! The queue is unbounded unless the handler asks for a bound ([`EventHandler::queue_bound`]);
//! a bounded queue drops or coalesces on overflow, counts it, tells the handler's
//! [`OverflowObserver`] and logs a warning at most every [`OVERFLOW_WARN_EVERY`]. The policies,
//! the coalescing rules and what sequence numbers show are described in [`queue`].

pub mod queue;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::time::Instant;

use super::handler::{Delivery, EventHandler, Notification};
use queue::Queue;
pub use queue::{Discarded, Overflow, QueueBound};

/// Default largest batch handed to a handler at once.
pub const DEFAULT_BATCH_MAX: usize = 64;

/// A listener whose queue overflows logs a warning at most this often.
pub const OVERFLOW_WARN_EVERY: Duration = Duration::from_secs(10);

/// Told of every notification a listener's bounded queue drops or coalesces, as it happens (on
/// the informer's thread, under the queue lock: keep it to a counter update). A plugin's status
/// implements it, so its counters include its queues' overflow.
pub trait OverflowObserver: Send + Sync {
    /// `discarded` notifications were just dropped or merged.
    fn overflowed(&self, discarded: Discarded);
}

/// Counters of one listener.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenerStats {
    /// Notifications queued so far (the last sequence number).
    pub queued: u64,
    /// Notifications handed to the handler so far.
    pub delivered: u64,
    /// Current queue depth.
    pub depth: usize,
    /// Deepest the queue has been.
    pub max_depth: usize,
    /// Handler panics caught.
    pub panics: u64,
    /// Notifications the queue's overflow policy dropped (each a gap in the sequence).
    pub dropped: u64,
    /// Notifications merged into an earlier one for the same object (each a gap too).
    pub coalesced: u64,
    /// The queue's bound.
    pub bound: QueueBound,
}

/// What the listener's lock guards.
struct State {
    queue: Queue,
    /// Notifications handed to the handler so far.
    delivered: u64,
    /// Entries carrying an initial-list notification that are in the handler now.
    initial_in_handler: usize,
    panics: u64,
    /// Set when removed or stopped: the thread exits and buffered items are dropped.
    closed: bool,
    /// Overflow not logged yet, and when it was last logged (rate-limits the warning).
    unreported: Discarded,
    warned_at: Option<std::time::Instant>,
}

struct Resync {
    /// What the handler asked for (0 = never).
    requested: Duration,
    /// In force (raised to the informer's check period).
    period: Duration,
    next: Instant,
}

pub(crate) struct Shared {
    queue: Mutex<State>,
    cond: Condvar,
    resync: Mutex<Resync>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One listener. Created by [`super::SharedInformer::add_event_handler`].
pub struct Listener {
    id: u64,
    name: String,
    batch_max: usize,
    shared: Arc<Shared>,
    upstream_synced: Arc<dyn Fn() -> bool + Send + Sync>,
    /// Told of overflow (the handler's choice).
    observer: Option<Arc<dyn OverflowObserver>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Listener {
    pub(crate) fn new(
        name: String,
        handler: Box<dyn EventHandler>,
        requested_resync: Duration,
        resync_period: Duration,
        batch_max: usize,
        upstream_synced: Arc<dyn Fn() -> bool + Send + Sync>,
    ) -> Arc<Self> {
        let observer = handler.overflow_observer();
        let shared = Arc::new(Shared {
            queue: Mutex::new(State {
                queue: Queue::new(handler.queue_bound()),
                delivered: 0,
                initial_in_handler: 0,
                panics: 0,
                closed: false,
                unreported: Discarded::default(),
                warned_at: None,
            }),
            cond: Condvar::new(),
            resync: Mutex::new(Resync {
                requested: requested_resync,
                period: resync_period,
                next: Instant::now() + resync_period,
            }),
        });
        let worker = shared.clone();
        let thread_name = format!("wisp-listener-{name}");
        let batch = handler.batch_max().unwrap_or(batch_max).max(1);
        let log_name = name.clone();
        let handle = std::thread::Builder::new()
            .name(thread_name)
            .spawn(move || run(worker, handler, batch, log_name))
            .ok();
        if handle.is_none() {
            tracing::error!(listener = %name, "could not start the listener thread");
        }
        Arc::new(Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            name,
            batch_max: batch,
            shared,
            upstream_synced,
            observer,
            thread: Mutex::new(handle),
        })
    }

    /// Unique id of this listener.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The name given at registration.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Largest batch handed to the handler.
    pub fn batch_max(&self) -> usize {
        self.batch_max
    }

    /// Queues a notification under the next sequence number, applying the queue's bound;
    /// never waits for the handler.
    pub(crate) fn add(&self, notification: Notification) {
        let mut st = lock(&self.shared.queue);
        if st.closed {
            return;
        }
        let discarded = st.queue.push(notification);
        let warn = self.overflowed(&mut st, discarded);
        drop(st);
        self.shared.cond.notify_one();
        if let Some(w) = warn {
            w.log(&self.name);
        }
    }

    /// Counts `d` and tells the observer; returns a warning to log (after unlocking) when one is
    /// due.
    fn overflowed(&self, st: &mut State, d: Discarded) -> Option<OverflowWarning> {
        if d.is_empty() {
            return None;
        }
        if let Some(o) = &self.observer {
            o.overflowed(d);
        }
        st.unreported.dropped += d.dropped;
        st.unreported.coalesced += d.coalesced;
        let now = std::time::Instant::now();
        if st
            .warned_at
            .is_some_and(|t| now.duration_since(t) < OVERFLOW_WARN_EVERY)
        {
            return None;
        }
        st.warned_at = Some(now);
        Some(OverflowWarning {
            discarded: std::mem::take(&mut st.unreported),
            depth: st.queue.len(),
            bound: st.queue.bound(),
        })
    }

    /// Changes the queue's bound; a smaller one applies its overflow policy at once.
    pub(crate) fn set_queue_bound(&self, bound: QueueBound) {
        let mut st = lock(&self.shared.queue);
        if st.closed || st.queue.bound() == bound {
            return;
        }
        let discarded = st.queue.set_bound(bound);
        let warn = self.overflowed(&mut st, discarded);
        drop(st);
        if let Some(w) = warn {
            w.log(&self.name);
        }
    }

    /// The informer has synced and every initial-list notification queued for this listener
    /// has been handled (or dropped).
    pub fn has_synced(&self) -> bool {
        (self.upstream_synced)() && {
            let st = lock(&self.shared.queue);
            st.queue.pending_initial + st.initial_in_handler == 0
        }
    }

    /// Counters.
    pub fn stats(&self) -> ListenerStats {
        let st = lock(&self.shared.queue);
        let q = &st.queue;
        ListenerStats {
            queued: q.last_seq,
            delivered: st.delivered,
            depth: q.len(),
            max_depth: q.max_depth,
            panics: st.panics,
            dropped: q.dropped,
            coalesced: q.coalesced,
            bound: q.bound(),
        }
    }

    /// Stops the listener: buffered notifications are dropped, the thread ends after the batch
    /// in hand. Idempotent.
    pub(crate) fn stop(&self) {
        let mut st = lock(&self.shared.queue);
        st.closed = true;
        st.queue.clear();
        st.initial_in_handler = 0;
        drop(st);
        self.shared.cond.notify_all();
    }

    /// Waits for the handler thread to end (after [`Listener::stop`]).
    pub(crate) fn join(&self) {
        if let Some(h) = lock(&self.thread).take() {
            let _ = h.join();
        }
    }

    /// The resync period in force (0 = never).
    pub fn resync_period(&self) -> Duration {
        lock(&self.shared.resync).period
    }

    pub(crate) fn requested_resync_period(&self) -> Duration {
        lock(&self.shared.resync).requested
    }

    pub(crate) fn set_resync_period(&self, period: Duration) {
        lock(&self.shared.resync).period = period;
    }

    /// Whether this listener's resync is due at `now`.
    pub(crate) fn should_resync(&self, now: Instant) -> bool {
        let r = lock(&self.shared.resync);
        !r.period.is_zero() && now >= r.next
    }

    pub(crate) fn determine_next_resync(&self, now: Instant) {
        let mut r = lock(&self.shared.resync);
        r.next = now + r.period;
    }
}

/// A rate-limited warning about overflow, logged once the lock is released.
struct OverflowWarning {
    discarded: Discarded,
    depth: usize,
    bound: QueueBound,
}

impl OverflowWarning {
    fn log(&self, listener: &str) {
        tracing::warn!(
            listener = %listener,
            dropped = self.discarded.dropped,
            coalesced = self.discarded.coalesced,
            depth = self.depth,
            bound = ?self.bound,
            "listener queue full: the handler is slower than the event rate; notifications were \
             dropped or coalesced (counts since the last warning; they show as gaps in the \
             sequence numbers)"
        );
    }
}

fn run(shared: Arc<Shared>, mut handler: Box<dyn EventHandler>, batch_max: usize, name: String) {
    let mut batch: Vec<Delivery> = Vec::with_capacity(batch_max);
    loop {
        {
            let mut st = lock(&shared.queue);
            while st.queue.is_empty() && !st.closed {
                st = shared.cond.wait(st).unwrap_or_else(PoisonError::into_inner);
            }
            if st.closed {
                return;
            }
            // Not synced until the handler is done with them.
            st.initial_in_handler = st.queue.take(batch_max, &mut batch);
        }
        let panicked = catch_unwind(AssertUnwindSafe(|| handler.handle(&batch))).is_err();
        if panicked {
            tracing::error!(listener = %name, first_seq = batch[0].seq, "event handler panicked; continuing with the next notification");
        }
        let mut st = lock(&shared.queue);
        st.delivered += batch.len() as u64;
        st.initial_in_handler = 0;
        if panicked {
            st.panics += 1;
        }
        batch.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::informer::handler::Recorder;
    use crate::informer::object::test_util::obj;

    /// Records batches, but only once the gate is open.
    struct Gated {
        open: Arc<(Mutex<bool>, Condvar)>,
        entered: Arc<AtomicBool>,
        rec: Recorder,
        bound: QueueBound,
        observer: Arc<Counted>,
    }

    impl EventHandler for Gated {
        fn handle(&mut self, batch: &[Delivery]) {
            self.entered.store(true, Ordering::SeqCst);
            let (m, c) = &*self.open;
            let mut open = lock(m);
            while !*open {
                open = c.wait(open).unwrap_or_else(PoisonError::into_inner);
            }
            drop(open);
            self.rec.handle(batch);
        }

        fn queue_bound(&self) -> QueueBound {
            self.bound
        }

        fn overflow_observer(&self) -> Option<Arc<dyn OverflowObserver>> {
            Some(self.observer.clone())
        }
    }

    #[derive(Default)]
    struct Counted(AtomicU64, AtomicU64);

    impl OverflowObserver for Counted {
        fn overflowed(&self, d: Discarded) {
            self.0.fetch_add(d.dropped, Ordering::SeqCst);
            self.1.fetch_add(d.coalesced, Ordering::SeqCst);
        }
    }

    fn eventually(what: &str, cond: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !cond() {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn initial(i: usize) -> Notification {
        Notification::Add {
            obj: obj(Some("ns"), &format!("p{i}"), "1"),
            initial_list: true,
        }
    }

    #[test]
    fn a_bounded_listener_behind_a_stuck_handler_drops_counts_and_still_syncs() {
        let open = Arc::new((Mutex::new(false), Condvar::new()));
        let entered = Arc::new(AtomicBool::new(false));
        let rec = Recorder::new();
        let observer = Arc::new(Counted::default());
        let l = Listener::new(
            "gated".into(),
            Box::new(Gated {
                open: open.clone(),
                entered: entered.clone(),
                rec: rec.clone(),
                bound: QueueBound::bounded(3, Overflow::DropOldest),
                observer: observer.clone(),
            }),
            Duration::ZERO,
            Duration::ZERO,
            64,
            Arc::new(|| true),
        );
        l.add(initial(0));
        eventually("the handler to hold the first", || {
            entered.load(Ordering::SeqCst)
        });
        for i in 1..=10 {
            l.add(initial(i));
        }
        let s = l.stats();
        assert_eq!((s.queued, s.depth, s.max_depth, s.dropped), (11, 3, 3, 7));
        assert_eq!(observer.0.load(Ordering::SeqCst), 7);
        assert!(!l.has_synced(), "the kept initial-list adds are pending");

        *lock(&open.0) = true;
        open.1.notify_all();
        eventually("the rest delivered", || l.stats().delivered == 4);
        assert!(l.has_synced(), "the dropped ones do not keep it unsynced");
        let seqs: Vec<u64> = rec.deliveries().iter().map(|d| d.seq).collect();
        assert_eq!(seqs, [1, 9, 10, 11], "the drops show as a gap");
        l.stop();
        l.join();
    }

    #[test]
    fn a_handler_without_a_bound_gets_an_unbounded_queue() {
        let l = Listener::new(
            "plain".into(),
            Box::new(Recorder::new()),
            Duration::ZERO,
            Duration::ZERO,
            64,
            Arc::new(|| true),
        );
        assert_eq!(l.stats().bound, QueueBound::Unbounded);
        l.set_queue_bound(QueueBound::bounded(5, Overflow::Coalesce));
        assert_eq!(l.stats().bound.max(), Some(5));
        l.stop();
        l.join();
    }
}
