//! A processor listener (client-go `processorListener`): its own queue between `add` (called by
//! the informer's fan-out, never blocking on the handler) and its handler. Each listener keeps
//! its own resync period and its own HasSynced (the informer synced, and every initial-list
//! notification handled).
//!
//! Where the handler runs is its registration's choice (`HandlerOptions::placement`): on a thread of
//! the listener's own (the default, like client-go's goroutine per listener: a handler that
//! blocks delays nobody else), or on the informer's shared [`Executor`], a fixed pool of workers
//! that takes ready listeners in turn, one batch each (plugins: a thousand of them need no
//! thousand threads). Either way the handler gets one batch at a time, in order, a panic is
//! caught per notification and counted (the panicking notification is not delivered, the rest
//! of its batch is: [`super::handler::handle_each`]), and a stopped listener finishes the batch
//! in hand and then nothing more.
//!
//! A handler may leave a batch unfinished until a given time ([`EventHandler::unfinished`]: a
//! plugin waiting out the backoff before retrying a failed notification): the listener keeps the
//! batch in hand (not delivered; its initial-list notifications keep HasSynced false) and calls
//! [`EventHandler::resume`] then — on its own thread after a sleep that `stop` interrupts, on the
//! executor from its timers, holding no worker meanwhile.
//!
//! The queue is unbounded unless its registration sets a bound (`HandlerOptions::queue`);
//! a bounded queue drops or coalesces on overflow, counts it, tells the handler's
//! [`OverflowObserver`] and logs a warning at most every [`OVERFLOW_WARN_EVERY`]. The policies,
//! the coalescing rules and what sequence numbers show are described in [`queue`].

pub mod queue;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::time::Instant;

use super::executor::{Executor, GroupId, Placement, Ran, Task};
use super::handler::{Delivery, EventHandler, Notification, take_caught};
use crate::sync::{lock, wait, wait_timeout};
use queue::Queue;
pub use queue::{Discarded, Overflow, QueueBound};

/// Default largest batch handed to a handler at once.
pub const DEFAULT_BATCH_MAX: usize = 64;

/// A listener whose queue overflows logs a warning at most this often.
pub const OVERFLOW_WARN_EVERY: Duration = Duration::from_secs(10);

/// Told of every notification a listener's bounded queue drops or coalesces, as it happens (on
/// the informer's thread, under the queue lock: keep it to counter updates and, at most once, a
/// state change and its log line; never wait on anything). A plugin's status implements it
/// (`QueueOverflow`), so its counters include its queues' overflow, and a quarantine.
pub trait OverflowObserver: Send + Sync {
    /// `discarded` notifications were just dropped or merged.
    fn overflowed(&self, discarded: Discarded);
}

/// Counters of one listener.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenerStats {
    /// Notifications queued so far (the last sequence number).
    pub queued: u64,
    /// Notifications the handler finished without panicking.
    pub delivered: u64,
    /// Current queue depth.
    pub depth: usize,
    /// Deepest the queue has been.
    pub max_depth: usize,
    /// Handler panics caught (per notification; per batch for a handler that takes its batches
    /// whole).
    pub panics: u64,
    /// Notifications in a handler call that panicked: handed over, not delivered.
    pub failed: u64,
    /// Notifications the queue's overflow policy dropped (each a gap in the sequence).
    pub dropped: u64,
    /// Notifications merged into an earlier one for the same object (each a gap too).
    pub coalesced: u64,
    /// The queue's bound.
    pub bound: QueueBound,
    /// Bytes of the notifications queued now (see [`queue`]).
    pub bytes: usize,
    /// How long the oldest notification queued now has waited.
    pub oldest_age: Option<Duration>,
}

/// What the listener is doing with its handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Run {
    /// Nothing in hand; on the executor, not queued either.
    Idle,
    /// Queued on the executor (ready, or parked behind its group).
    Scheduled,
    /// A batch is in the handler.
    Running,
    /// The handler left its batch unfinished until then.
    Unfinished(std::time::Instant),
}

/// What the handler is given next.
enum Work {
    /// A new batch.
    Batch,
    /// The rest of an unfinished one.
    Resume,
}

/// What the listener's lock guards.
struct State {
    queue: Queue,
    /// Notifications the handler finished without panicking.
    delivered: u64,
    /// Notifications whose handler call panicked.
    failed: u64,
    /// Entries carrying an initial-list notification that are in the handler now.
    initial_in_handler: usize,
    /// Size and first sequence number of the batch in the handler.
    in_hand: usize,
    /// When each notification of the batch in the handler was queued.
    in_hand_at: Vec<std::time::Instant>,
    first_seq: u64,
    /// Of the batch in hand, notifications whose call panicked (not delivered).
    failed_in_hand: usize,
    panics: u64,
    /// Set when removed or stopped: nothing more is handed to the handler, buffered items are
    /// dropped.
    closed: bool,
    run: Run,
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

/// The part of a listener its runner (own thread or executor) shares.
pub(crate) struct Shared {
    id: u64,
    name: String,
    batch_max: usize,
    group: Option<GroupId>,
    queue: Mutex<State>,
    /// Signalled on new work (own thread), on stop, and when a batch ends (for `join`).
    cond: Condvar,
    resync: Mutex<Resync>,
    /// `None` once the listener has stopped and let it go.
    handler: Mutex<Option<Box<dyn EventHandler>>>,
    /// Each notification's time from its queue to its outcome (the end of the handler's
    /// batch, retries included), on [`super::latency::WAIT_BUCKETS`].
    waited: super::latency::LatencyHistogram,
}

/// Where the handler runs.
enum Runner {
    Thread(Mutex<Option<JoinHandle<()>>>),
    Pool(Executor),
}

/// One listener. Created by [`super::SharedInformer::add_event_handler`].
pub struct Listener {
    shared: Arc<Shared>,
    upstream_synced: Arc<dyn Fn() -> bool + Send + Sync>,
    /// Told of overflow (the handler's choice).
    observer: Option<Arc<dyn OverflowObserver>>,
    runner: Runner,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// How a listener queues and runs its handler, fixed at registration.
#[derive(Clone, Default)]
pub(crate) struct ListenerOptions {
    /// The resync period the handler asked for.
    pub requested_resync: Duration,
    /// The period it gets.
    pub resync_period: Duration,
    /// The largest batch it gets at once.
    pub batch_max: usize,
    /// Its queue's bound.
    pub queue: QueueBound,
    /// Who is told of the queue's overflow.
    pub overflow: Option<Arc<dyn OverflowObserver>>,
    /// Where it runs.
    pub placement: Placement,
}

impl Listener {
    /// A listener whose handler runs on `executor` when given (in the group the handler names
    /// in its registration's `placement`), else on a thread of its own, started here: the
    /// error is the OS refusing the thread.
    pub(crate) fn new(
        name: String,
        handler: Box<dyn EventHandler>,
        options: ListenerOptions,
        upstream_synced: Arc<dyn Fn() -> bool + Send + Sync>,
        executor: Option<Executor>,
    ) -> std::io::Result<Arc<Self>> {
        let ListenerOptions {
            requested_resync,
            resync_period,
            batch_max,
            queue,
            overflow: observer,
            placement,
        } = options;
        let group = match placement {
            Placement::Shared { group } => group,
            Placement::OwnThread => None,
        };
        let shared = Arc::new(Shared {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            batch_max: batch_max.max(1),
            group,
            queue: Mutex::new(State {
                queue: Queue::new(queue),
                delivered: 0,
                failed: 0,
                initial_in_handler: 0,
                in_hand: 0,
                in_hand_at: Vec::new(),
                first_seq: 0,
                failed_in_hand: 0,
                panics: 0,
                closed: false,
                run: Run::Idle,
                unreported: Discarded::default(),
                warned_at: None,
            }),
            cond: Condvar::new(),
            resync: Mutex::new(Resync {
                requested: requested_resync,
                period: resync_period,
                next: Instant::now() + resync_period,
            }),
            handler: Mutex::new(Some(handler)),
            waited: super::latency::LatencyHistogram::with_buckets(&super::latency::WAIT_BUCKETS),
            name,
        });
        let runner = match executor {
            Some(e) => Runner::Pool(e),
            None => {
                let worker = shared.clone();
                let handle = std::thread::Builder::new()
                    .name(format!("wisp-listener-{}", shared.name))
                    .spawn(move || run_thread(&worker))?;
                Runner::Thread(Mutex::new(Some(handle)))
            }
        };
        Ok(Arc::new(Self {
            shared,
            upstream_synced,
            observer,
            runner,
        }))
    }

    /// Unique id of this listener.
    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// The name given at registration.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Largest batch handed to the handler.
    pub fn batch_max(&self) -> usize {
        self.shared.batch_max
    }

    /// Whether the handler runs on the shared executor (else on a thread of its own).
    pub fn on_executor(&self) -> bool {
        matches!(self.runner, Runner::Pool(_))
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
        // On the executor, an idle listener with work queues itself (once: it is `Scheduled`
        // until a worker finds it has nothing left).
        let submit = matches!(self.runner, Runner::Pool(_)) && st.run == Run::Idle;
        if submit {
            st.run = Run::Scheduled;
        }
        drop(st);
        match &self.runner {
            Runner::Pool(e) if submit => e.submit(self.shared.clone()),
            Runner::Pool(_) => {}
            Runner::Thread(_) => self.shared.cond.notify_one(),
        }
        if let Some(w) = warn {
            w.log(&self.shared.name);
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
            w.log(&self.shared.name);
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

    /// Each notification's time from its queue to its outcome so far: cumulative `(bound,
    /// count)` buckets, sum in seconds, count.
    pub fn waited(&self) -> (Vec<(f64, u64)>, f64, u64) {
        self.shared.waited.snapshot()
    }

    /// Counters.
    pub fn stats(&self) -> ListenerStats {
        let st = lock(&self.shared.queue);
        let q = &st.queue;
        let now = std::time::Instant::now();
        ListenerStats {
            bytes: q.bytes(),
            oldest_age: q.oldest().map(|at| now.saturating_duration_since(at)),
            queued: q.last_seq,
            delivered: st.delivered,
            depth: q.len(),
            max_depth: q.max_depth,
            panics: st.panics,
            failed: st.failed,
            dropped: q.dropped,
            coalesced: q.coalesced,
            bound: q.bound(),
        }
    }

    /// Stops the listener: buffered notifications are dropped, the batch in the handler (if
    /// any) finishes, then nothing more; an unfinished batch waiting for its time is not resumed.
    /// Idempotent.
    pub(crate) fn stop(&self) {
        let mut st = lock(&self.shared.queue);
        st.closed = true;
        st.queue.clear();
        st.initial_in_handler = 0;
        let waiting = matches!(st.run, Run::Unfinished(_));
        drop(st);
        self.shared.cond.notify_all();
        if let (Runner::Pool(e), true) = (&self.runner, waiting) {
            // Off the timers now, so its group is let go without waiting for the time.
            e.wake(self.shared.id);
        }
    }

    /// Waits for the batch in the handler to finish (after [`Listener::stop`]) and lets the
    /// handler go: its own thread ends; on the executor it is dropped here.
    pub(crate) fn join(&self) {
        match &self.runner {
            Runner::Thread(t) => {
                if let Some(h) = lock(t).take() {
                    let name = h.thread().name().unwrap_or("wisp-listener").to_owned();
                    crate::tasks::report_join(&name, h.join());
                }
            }
            Runner::Pool(_) => {
                let mut st = lock(&self.shared.queue);
                while st.run == Run::Running {
                    st = wait(&self.shared.cond, st);
                }
                let closed = st.closed;
                drop(st);
                if closed {
                    drop(lock(&self.shared.handler).take());
                }
            }
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

    /// Re-arms after a resync (client-go `determineNextResync`). client-go sets `now + period`
    /// and its reflector re-arms its check timer after each check, so the next check is never
    /// early. Wisp's checks run on a fixed tick, each late by a varying amount: `now + period`
    /// would then make a check that is less late than the previous one find the listener not
    /// yet due and skip a whole period. So the next resync is the first point of the listener's
    /// own schedule (`next + k * period`) after `now`: a listener whose period equals the check
    /// period is due at every check whatever the timer's jitter, and a period that is not a
    /// multiple of the check period is honoured on average instead of drifting later.
    pub(crate) fn determine_next_resync(&self, now: Instant) {
        let mut r = lock(&self.shared.resync);
        if r.period.is_zero() {
            return;
        }
        if r.next > now {
            return;
        }
        let period = r.period.as_nanos();
        let behind = now.duration_since(r.next).as_nanos();
        let steps = behind / period + 1;
        let ahead = u64::try_from(steps * period).unwrap_or(u64::MAX);
        r.next = r
            .next
            .checked_add(Duration::from_nanos(ahead))
            .unwrap_or(now + r.period);
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

impl Shared {
    /// Takes the next batch into `batch` and marks the listener running; `None` when the queue
    /// is empty. The caller has checked that the listener is open and has no unfinished batch.
    fn take(&self, st: &mut State, batch: &mut Vec<Delivery>) -> Option<Work> {
        if st.queue.is_empty() {
            return None;
        }
        // Not synced until the handler is done with them.
        st.in_hand_at.clear();
        let State {
            queue, in_hand_at, ..
        } = st;
        st.initial_in_handler = queue.take(self.batch_max, batch, in_hand_at);
        st.in_hand = batch.len();
        st.failed_in_hand = 0;
        st.first_seq = batch.first().map_or(0, |d| d.seq);
        st.run = Run::Running;
        Some(Work::Batch)
    }

    /// Hands the handler `batch` (or resumes its unfinished one), catching panics: per
    /// notification in the default `handle` ([`super::handler::handle_each`], which reports
    /// them here through [`take_caught`]), per call around it (a handler taking its batch whole:
    /// none of the batch is delivered). Returns when the handler wants to be resumed, if it left
    /// the batch unfinished.
    fn call(&self, work: Work, batch: &[Delivery]) -> Option<std::time::Instant> {
        let mut guard = lock(&self.handler);
        let handler = guard.as_mut()?;
        // Nothing is left over from another listener on this thread (each call takes its own),
        // but start clean whatever a handler did outside a listener.
        take_caught();
        let whole = catch_unwind(AssertUnwindSafe(|| match work {
            Work::Batch => handler.handle(batch),
            Work::Resume => handler.resume(),
        }))
        .is_err();
        let caught = take_caught();
        let later = catch_unwind(AssertUnwindSafe(|| handler.unfinished())).unwrap_or_else(|p| {
            // Not swallowed: said, and the batch taken as finished (nothing to resume).
            let panic = crate::tasks::panic_text(&*p);
            tracing::error!(listener = %self.name, %panic, "event handler panicked saying whether its batch is finished; taken as finished");
            None
        });
        drop(guard);
        if whole || caught.panics > 0 {
            let mut st = lock(&self.queue);
            st.panics += caught.panics + u64::from(whole);
            let failed = usize::try_from(caught.panics).unwrap_or(usize::MAX);
            st.failed_in_hand = if whole {
                st.in_hand
            } else {
                st.in_hand.min(st.failed_in_hand.saturating_add(failed))
            };
            let first_seq = st.first_seq;
            drop(st);
            if caught.panics > 0 {
                tracing::error!(listener = %self.name, seq = caught.first_seq, panics = caught.panics, "event handler panicked; that notification is not delivered, the rest of the batch is");
            }
            if whole {
                tracing::error!(listener = %self.name, first_seq, "event handler panicked taking a whole batch; the batch is not delivered, continuing with the next");
            }
        }
        later
    }

    /// Ends a turn: an unfinished batch waits for its time (unless the listener stopped),
    /// else the batch counts as delivered. Returns what the executor does next with it.
    fn end(&self, later: Option<std::time::Instant>) -> Ran {
        let mut st = lock(&self.queue);
        if let Some(at) = later
            && !st.closed
        {
            st.run = Run::Unfinished(at);
            return Ran::Later(at);
        }
        let now = std::time::Instant::now();
        for at in st.in_hand_at.drain(..) {
            self.waited.observe(now.saturating_duration_since(at));
        }
        let failed = st.failed_in_hand.min(st.in_hand);
        st.delivered += (st.in_hand - failed) as u64;
        st.failed += failed as u64;
        st.in_hand = 0;
        st.failed_in_hand = 0;
        st.initial_in_handler = 0;
        let ran = if !st.closed && !st.queue.is_empty() {
            st.run = Run::Scheduled;
            Ran::Again
        } else {
            st.run = Run::Idle;
            Ran::Idle
        };
        drop(st);
        // `join` waits for the end of a running batch.
        self.cond.notify_all();
        ran
    }
}

/// One turn on an executor worker: one batch, or the rest of an unfinished one.
impl Task for Shared {
    fn id(&self) -> u64 {
        self.id
    }

    fn group(&self) -> Option<GroupId> {
        self.group
    }

    fn run(&self) -> Ran {
        let mut batch = Vec::new();
        let work = {
            let mut st = lock(&self.queue);
            if st.closed {
                st.run = Run::Idle;
                return Ran::Idle;
            }
            match st.run {
                Run::Unfinished(_) => {
                    st.run = Run::Running;
                    Some(Work::Resume)
                }
                _ => {
                    let w = self.take(&mut st, &mut batch);
                    if w.is_none() {
                        st.run = Run::Idle;
                    }
                    w
                }
            }
        };
        let Some(work) = work else {
            return Ran::Idle;
        };
        let later = self.call(work, &batch);
        drop(batch);
        self.end(later)
    }
}

/// The listener's own thread: waits for work, runs it, until stopped; then lets the handler go.
fn run_thread(shared: &Shared) {
    let mut batch: Vec<Delivery> = Vec::with_capacity(shared.batch_max);
    loop {
        let work = {
            let mut st = lock(&shared.queue);
            loop {
                if st.closed {
                    break None;
                }
                if let Run::Unfinished(at) = st.run {
                    let now = std::time::Instant::now();
                    if now >= at {
                        st.run = Run::Running;
                        break Some(Work::Resume);
                    }
                    st = wait_timeout(&shared.cond, st, at - now);
                    continue;
                }
                if let Some(w) = shared.take(&mut st, &mut batch) {
                    break Some(w);
                }
                st = wait(&shared.cond, st);
            }
        };
        let Some(work) = work else {
            break;
        };
        let later = shared.call(work, &batch);
        batch.clear();
        shared.end(later);
    }
    lock(&shared.queue).run = Run::Idle;
    drop(lock(&shared.handler).take());
}

#[cfg(test)]
mod on_executor;

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
    }

    impl EventHandler for Gated {
        fn handle(&mut self, batch: &[Delivery]) {
            self.entered.store(true, Ordering::SeqCst);
            let (m, c) = &*self.open;
            let mut open = lock(m);
            while !*open {
                open = wait(c, open);
            }
            drop(open);
            self.rec.handle(batch);
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
        let deadline =
            std::time::Instant::now() + crate::test_time::patience(Duration::from_secs(30));
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
            }),
            ListenerOptions {
                batch_max: 64,
                queue: QueueBound::bounded(3, Overflow::DropOldest),
                overflow: Some(observer.clone()),
                ..ListenerOptions::default()
            },
            Arc::new(|| true),
            None,
        )
        .unwrap();
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

    /// A handler whose every add panics, counting its calls.
    struct PanicsOnAdd(Arc<AtomicU64>);

    impl EventHandler for PanicsOnAdd {
        fn on_add(&mut self, _obj: &Arc<crate::informer::Object>, _initial_list: bool) {
            self.0.fetch_add(1, Ordering::SeqCst);
            panic!("handler failure on purpose");
        }
    }

    /// client-go TestEventPanics: a handler whose add panics is called for each of 5 adds, here
    /// all in one batch (the executor's only worker is held until the 5 are queued); none of
    /// them counts as delivered.
    #[test]
    fn a_handler_panic_is_caught_per_notification_and_the_rest_of_the_batch_is_delivered() {
        let exec = Executor::new(1).unwrap();
        let open = Arc::new((Mutex::new(false), Condvar::new()));
        let entered = Arc::new(AtomicBool::new(false));
        let on_pool = |name: &str, handler: Box<dyn EventHandler>| {
            let options = ListenerOptions {
                batch_max: 64,
                placement: Placement::Shared { group: None },
                ..ListenerOptions::default()
            };
            Listener::new(
                name.into(),
                handler,
                options,
                Arc::new(|| true),
                Some(exec.clone()),
            )
            .unwrap()
        };
        let holder = on_pool(
            "holder",
            Box::new(Gated {
                open: open.clone(),
                entered: entered.clone(),
                rec: Recorder::new(),
            }),
        );
        holder.add(initial(0));
        eventually("the worker to be held", || entered.load(Ordering::SeqCst));

        let calls = Arc::new(AtomicU64::new(0));
        let bad = on_pool("bad", Box::new(PanicsOnAdd(calls.clone())));
        for i in 1..=5 {
            bad.add(initial(i));
        }
        *lock(&open.0) = true;
        open.1.notify_all();
        eventually("the 5 handed over", || bad.stats().failed == 5);
        assert_eq!(calls.load(Ordering::SeqCst), 5, "called for each add");
        let s = bad.stats();
        assert_eq!((s.panics, s.delivered, s.failed), (5, 0, 5));
        assert!(bad.has_synced(), "handled, though not delivered");
        for l in [&holder, &bad] {
            l.stop();
            l.join();
        }
        exec.shutdown();
    }

    /// One panicking notification in a batch: the others are delivered, and counted.
    #[test]
    fn a_panicking_notification_is_not_counted_delivered_and_its_batch_mates_are() {
        struct Picky(Recorder);
        impl EventHandler for Picky {
            fn on_add(&mut self, obj: &Arc<crate::informer::Object>, initial_list: bool) {
                assert_ne!(obj.meta().name(), "p2", "handler failure on purpose");
                self.0.handle(&[Delivery {
                    seq: 0,
                    notification: Notification::Add {
                        obj: obj.clone(),
                        initial_list,
                    },
                }]);
            }
        }
        let rec = Recorder::new();
        let l = Listener::new(
            "picky".into(),
            Box::new(Picky(rec.clone())),
            ListenerOptions {
                batch_max: 64,
                ..ListenerOptions::default()
            },
            Arc::new(|| true),
            None,
        )
        .unwrap();
        for i in 1..=4 {
            l.add(initial(i));
        }
        eventually("all handed over", || {
            let s = l.stats();
            s.delivered + s.failed == 4
        });
        let s = l.stats();
        assert_eq!((s.delivered, s.failed, s.panics), (3, 1, 1));
        let names: Vec<String> = rec
            .deliveries()
            .iter()
            .map(|d| d.notification.object().meta().name().to_owned())
            .collect();
        assert_eq!(names, ["p1", "p3", "p4"]);
        l.stop();
        l.join();
    }

    #[test]
    fn a_handler_without_a_bound_gets_an_unbounded_queue() {
        let l = Listener::new(
            "plain".into(),
            Box::new(Recorder::new()),
            ListenerOptions {
                batch_max: 64,
                ..ListenerOptions::default()
            },
            Arc::new(|| true),
            None,
        )
        .unwrap();
        assert_eq!(l.stats().bound, QueueBound::Unbounded);
        l.set_queue_bound(QueueBound::bounded(5, Overflow::Coalesce));
        assert_eq!(l.stats().bound.max(), Some(5));
        l.stop();
        l.join();
    }
}
