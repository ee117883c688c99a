//! A processor listener (client-go `processorListener`): its own unbounded queue between
//! `add` (called by the informer's fan-out, never blocking on the handler) and its handler,
//! which runs on the listener's own thread. Each listener keeps its own resync period and its
//! own HasSynced (the informer synced, and every initial-list notification handled).

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::time::Instant;

use super::handler::{Delivery, EventHandler, Notification};

/// Default largest batch handed to a handler at once.
pub const DEFAULT_BATCH_MAX: usize = 64;

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
}

struct Queue {
    items: VecDeque<Delivery>,
    /// Sequence number of the last queued notification.
    last_seq: u64,
    /// Initial-list notifications queued or in the handler, not yet finished.
    pending_initial: usize,
    delivered: u64,
    max_depth: usize,
    panics: u64,
    /// Set when removed or stopped: the thread exits and buffered items are dropped.
    closed: bool,
}

struct Resync {
    /// What the handler asked for (0 = never).
    requested: Duration,
    /// In force (raised to the informer's check period).
    period: Duration,
    next: Instant,
}

pub(crate) struct Shared {
    queue: Mutex<Queue>,
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
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                items: VecDeque::with_capacity(1024),
                last_seq: 0,
                pending_initial: 0,
                delivered: 0,
                max_depth: 0,
                panics: 0,
                closed: false,
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

    /// Queues a notification; never waits for the handler.
    pub(crate) fn add(&self, notification: Notification) {
        let mut q = lock(&self.shared.queue);
        if q.closed {
            return;
        }
        q.last_seq += 1;
        let d = Delivery {
            seq: q.last_seq,
            notification,
        };
        if d.is_initial_list() {
            q.pending_initial += 1;
        }
        q.items.push_back(d);
        q.max_depth = q.max_depth.max(q.items.len());
        drop(q);
        self.shared.cond.notify_one();
    }

    /// The informer has synced and every initial-list notification queued for this listener
    /// has been handled.
    pub fn has_synced(&self) -> bool {
        (self.upstream_synced)() && lock(&self.shared.queue).pending_initial == 0
    }

    /// Counters.
    pub fn stats(&self) -> ListenerStats {
        let q = lock(&self.shared.queue);
        ListenerStats {
            queued: q.last_seq,
            delivered: q.delivered,
            depth: q.items.len(),
            max_depth: q.max_depth,
            panics: q.panics,
        }
    }

    /// Stops the listener: buffered notifications are dropped, the thread ends after the batch
    /// in hand. Idempotent.
    pub(crate) fn stop(&self) {
        let mut q = lock(&self.shared.queue);
        q.closed = true;
        q.items.clear();
        q.pending_initial = 0;
        drop(q);
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

fn run(shared: Arc<Shared>, mut handler: Box<dyn EventHandler>, batch_max: usize, name: String) {
    let mut batch: Vec<Delivery> = Vec::with_capacity(batch_max);
    loop {
        {
            let mut q = lock(&shared.queue);
            while q.items.is_empty() && !q.closed {
                q = shared.cond.wait(q).unwrap_or_else(PoisonError::into_inner);
            }
            if q.closed {
                return;
            }
            let n = q.items.len().min(batch_max);
            batch.extend(q.items.drain(..n));
        }
        let initial = batch.iter().filter(|d| d.is_initial_list()).count();
        let panicked = catch_unwind(AssertUnwindSafe(|| handler.handle(&batch))).is_err();
        if panicked {
            tracing::error!(listener = %name, first_seq = batch[0].seq, "event handler panicked; continuing with the next notification");
        }
        let mut q = lock(&shared.queue);
        q.delivered += batch.len() as u64;
        q.pending_initial = q.pending_initial.saturating_sub(initial);
        if panicked {
            q.panics += 1;
        }
        batch.clear();
    }
}
