//! The shared executor: a fixed pool of worker threads that runs the listeners whose handlers
//! ask for it ([`Placement::Shared`]), so a host with a thousand plugins has a thousand queues
//! but only as many threads as it was given workers.
//!
//! # Scheduling
//!
//! - A listener with work is *ready*: it waits in one FIFO ready queue (once, however much it has
//!   queued). A worker takes the listener at the front, hands its handler **one batch**, then puts
//!   it at the **back** of the ready queue if it has more. So a listener with a huge backlog gets
//!   one batch per turn, like every other ready listener: round-robin, nobody starves.
//! - A listener is never run by two workers at once (it is in the ready queue, or running, or
//!   idle, never two of these), so its notifications reach its handler in order.
//! - Listeners may form a *group* (the handlers of one plugin, which share one instance behind a
//!   mutex). At most one listener of a group runs at a time: a worker that takes a listener whose
//!   group is busy parks it in the group's own queue and takes the next ready listener instead,
//!   so no worker ever waits on a group (or on the plugin's mutex). When the running listener
//!   finishes its batch, the group's first parked listener goes back to the ready queue, and the
//!   one that just ran, if it has more, queues behind it in the group. A plugin therefore never
//!   holds more than one worker, and its listeners take turns.
//! - A handler may leave a batch unfinished until a given time (a plugin retrying a failed
//!   notification after a backoff: [`super::EventHandler::unfinished`]). The listener then sits
//!   in the executor's timers, **keeping its group** (so the plugin's other listeners wait, as
//!   they would behind a sleeping thread) but **holding no worker**; when the time comes it is
//!   ready again and its handler is resumed. Stopping the listener ends the wait at once.
//!   A handler whose time has come already (a plugin going on, one call per turn, with a batch
//!   whose call was cut) goes straight to the **back** of the ready queue, still keeping its
//!   group: every listener that was ready before it gets its turn first.
//!
//! # Threads
//!
//! The workers are started by [`Executor::new`], which fails (with the OS error) when a thread
//! cannot be started; nothing starts a thread later. A worker that runs a handler catches its
//! panics (the listener counts them), so a handler cannot take a worker down.
//!
//! Handlers that may block for long (a native handler waiting on the network) should keep a
//! thread of their own ([`Placement::OwnThread`], the default): on the executor they would hold a
//! worker for that long.

use crate::sync::{lock, wait, wait_timeout};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most workers an executor may have: more is a configuration mistake (a worker is an OS thread
/// with its stack; the pool exists to keep their number small).
pub const MAX_WORKERS: usize = 1024;

/// The default number of workers: the number of cores (at least 1).
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// Handlers that take turns on the executor: at most one of a group's listeners runs at a time
/// (see the [module docs](self)). A plugin's handlers form one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(u64);

impl GroupId {
    /// A group no other handler is in yet.
    #[allow(clippy::new_without_default)] // each call makes a different group
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// Where a listener's handler runs (its registration's `HandlerOptions::placement`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// A thread of its own, started when the handler is registered (client-go's goroutine per
    /// listener). For handlers that may block: they delay nobody else.
    #[default]
    OwnThread,
    /// The informer's shared executor, in `group` (or alone).
    Shared {
        /// The handlers it takes turns with.
        group: Option<GroupId>,
    },
}

/// Why an executor could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// The number of workers is out of range.
    #[error("executor workers must be between 1 and {MAX_WORKERS}, not {0}")]
    Workers(usize),
    /// The OS refused a thread.
    #[error("cannot start executor worker thread {index} of {workers}: {source}")]
    Spawn {
        /// Which worker (from 0).
        index: usize,
        /// How many were asked for.
        workers: usize,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// What one turn of a task left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ran {
    /// Nothing more to do (queue empty or listener stopped): the task is idle until submitted
    /// again.
    Idle,
    /// More work: back of the ready queue.
    Again,
    /// Unfinished until this instant: the task keeps its group, off the workers, until then.
    Later(Instant),
}

/// Something the executor runs: a listener.
pub(crate) trait Task: Send + Sync {
    /// Unique id.
    fn id(&self) -> u64;
    /// Its group, if any.
    fn group(&self) -> Option<GroupId>;
    /// One turn: one batch (or the resumption of an unfinished one).
    fn run(&self) -> Ran;
}

#[derive(Default)]
struct Group {
    /// The task running, or waiting in the timers, for this group.
    holder: Option<u64>,
    /// Ready tasks of the group waiting for the holder to finish.
    parked: VecDeque<Arc<dyn Task>>,
}

/// A task in the ready queue.
struct Entry {
    task: Arc<dyn Task>,
    /// It comes from the timers: it kept its group while it waited. Any other entry must take
    /// its group: even its own id as the group's holder only means its previous turn has not
    /// been accounted for yet (it was submitted again in between), and then it waits like any
    /// other listener of the group.
    resumed: bool,
}

impl Entry {
    fn new(task: Arc<dyn Task>) -> Self {
        Self {
            task,
            resumed: false,
        }
    }
}

#[derive(Default)]
struct Sched {
    ready: VecDeque<Entry>,
    groups: HashMap<GroupId, Group>,
    /// Unfinished tasks by (when, id).
    timers: BTreeMap<(Instant, u64), Arc<dyn Task>>,
    /// Tasks woken (stopped) while not in the timers: between the end of their turn and its
    /// accounting, or already ready. Their next wait, if any, ends at once.
    woken: std::collections::HashSet<u64>,
    running: usize,
    shutdown: bool,
}

impl Sched {
    /// The next task a worker may run: ready, and its group free (or kept by itself while it
    /// waited in the timers). Tasks of a busy group are parked in the group.
    fn next(&mut self) -> Option<Arc<dyn Task>> {
        while let Some(Entry { task: t, resumed }) = self.ready.pop_front() {
            let Some(g) = t.group() else {
                return Some(t);
            };
            let group = self.groups.entry(g).or_default();
            match group.holder {
                None => {
                    group.holder = Some(t.id());
                    return Some(t);
                }
                Some(h) if resumed && h == t.id() => return Some(t),
                Some(_) => group.parked.push_back(t),
            }
        }
        None
    }

    /// Moves the timers that are due to the ready queue; returns how long until the next one.
    fn due_timers(&mut self, now: Instant) -> Option<Duration> {
        while let Some(e) = self.timers.first_entry() {
            if e.key().0 > now {
                return Some(e.key().0 - now);
            }
            self.ready.push_back(Entry {
                task: e.remove(),
                resumed: true,
            });
        }
        None
    }

    /// Accounts for a finished turn of `task`; returns whether the earliest timer changed.
    fn after(&mut self, task: Arc<dyn Task>, ran: Ran) -> bool {
        self.running -= 1;
        let woken = self.woken.remove(&task.id());
        if let (Ran::Later(_), true) = (ran, woken) {
            self.ready.push_back(Entry {
                task,
                resumed: true,
            });
            return false;
        }
        if let Ran::Later(at) = ran {
            if at <= Instant::now() {
                // Due already (a plugin coming back for the rest of a cut batch): the back of
                // the ready queue at once, behind the tasks already waiting there, keeping its
                // group as if it had waited in the timers.
                self.ready.push_back(Entry {
                    task,
                    resumed: true,
                });
                return false;
            }
            let earliest = self.timers.first_key_value().is_none_or(|(k, _)| at < k.0);
            self.timers.insert((at, task.id()), task);
            return earliest;
        }
        let again = ran == Ran::Again;
        let Some(g) = task.group() else {
            if again {
                self.ready.push_back(Entry::new(task));
            }
            return false;
        };
        let group = self.groups.entry(g).or_default();
        group.holder = None;
        if let Some(next) = group.parked.pop_front() {
            self.ready.push_back(Entry::new(next));
            if again {
                group.parked.push_back(task);
            }
        } else if again {
            self.ready.push_back(Entry::new(task));
        }
        if group.holder.is_none() && group.parked.is_empty() {
            self.groups.remove(&g);
        }
        false
    }
}

struct Inner {
    workers: usize,
    sched: Mutex<Sched>,
    /// Workers wait here for ready tasks (or their next timer).
    work: Condvar,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// A handle on a pool of workers (cheap to clone; every clone is the same pool).
#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

/// What an executor is doing now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExecutorStats {
    /// Worker threads.
    pub workers: usize,
    /// Listeners running a batch now.
    pub running: usize,
    /// Listeners with work waiting for a worker.
    pub ready: usize,
    /// Listeners with work waiting for their group.
    pub parked: usize,
    /// Listeners with an unfinished batch waiting for its time.
    pub waiting: usize,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("workers", &self.inner.workers)
            .finish_non_exhaustive()
    }
}

impl Executor {
    /// Starts `workers` worker threads (1 to [`MAX_WORKERS`]). Fails, and starts nothing, if
    /// the number is out of range or a thread cannot be started.
    pub fn new(workers: usize) -> Result<Self, ExecutorError> {
        if !(1..=MAX_WORKERS).contains(&workers) {
            return Err(ExecutorError::Workers(workers));
        }
        let inner = Arc::new(Inner {
            workers,
            sched: Mutex::new(Sched::default()),
            work: Condvar::new(),
            threads: Mutex::new(Vec::with_capacity(workers)),
        });
        let exec = Self { inner };
        for index in 0..workers {
            let me = exec.inner.clone();
            match std::thread::Builder::new()
                .name(format!("wisp-worker-{index}"))
                .spawn(move || worker(&me))
            {
                Ok(h) => lock(&exec.inner.threads).push(h),
                Err(source) => {
                    exec.shutdown();
                    return Err(ExecutorError::Spawn {
                        index,
                        workers,
                        source,
                    });
                }
            }
        }
        Ok(exec)
    }

    /// The process-wide executor with [`default_workers`] workers, started on first use: where
    /// informers built without an executor of their own run their shared handlers.
    pub fn process_default() -> Result<Self, ExecutorError> {
        static DEFAULT: OnceLock<Mutex<Option<Executor>>> = OnceLock::new();
        let mut slot = lock(DEFAULT.get_or_init(Mutex::default));
        if let Some(e) = slot.as_ref() {
            return Ok(e.clone());
        }
        let e = Self::new(default_workers())?;
        *slot = Some(e.clone());
        Ok(e)
    }

    /// Number of worker threads.
    pub fn workers(&self) -> usize {
        self.inner.workers
    }

    /// What the pool is doing now.
    pub fn stats(&self) -> ExecutorStats {
        let s = lock(&self.inner.sched);
        ExecutorStats {
            workers: self.inner.workers,
            running: s.running,
            ready: s.ready.len(),
            parked: s.groups.values().map(|g| g.parked.len()).sum(),
            waiting: s.timers.len(),
        }
    }

    /// Stops the workers once their current batches are done, and waits for them (unless
    /// called from a worker). Tasks still queued are dropped; listeners submitted afterwards
    /// never run. Idempotent.
    pub fn shutdown(&self) {
        let threads = {
            let mut s = lock(&self.inner.sched);
            s.shutdown = true;
            s.ready.clear();
            s.groups.clear();
            s.timers.clear();
            s.woken.clear();
            std::mem::take(&mut *lock(&self.inner.threads))
        };
        self.inner.work.notify_all();
        let me = std::thread::current().id();
        for t in threads {
            if t.thread().id() != me {
                let name = t.thread().name().unwrap_or("wisp-worker").to_owned();
                crate::tasks::report_join(&name, t.join());
            }
        }
    }

    /// Queues a task that has work, at the back. The caller guarantees it is not queued or
    /// running already (a listener submits itself only from idle).
    pub(crate) fn submit(&self, task: Arc<dyn Task>) {
        {
            let mut s = lock(&self.inner.sched);
            if s.shutdown {
                return;
            }
            s.ready.push_back(Entry::new(task));
        }
        self.inner.work.notify_one();
    }

    /// Ends a task's wait now (it was stopped): it leaves the timers for the ready queue, or, if
    /// the turn that left it unfinished is still being accounted for, it goes there instead of
    /// the timers.
    pub(crate) fn wake(&self, id: u64) {
        {
            let mut s = lock(&self.inner.sched);
            let Some(key) = s.timers.keys().find(|k| k.1 == id).copied() else {
                s.woken.insert(id);
                return;
            };
            if let Some(task) = s.timers.remove(&key) {
                s.ready.push_back(Entry {
                    task,
                    resumed: true,
                });
            }
        }
        self.inner.work.notify_one();
    }
}

fn worker(inner: &Inner) {
    let mut s = lock(&inner.sched);
    loop {
        if s.shutdown {
            return;
        }
        let next_timer = s.due_timers(Instant::now());
        let Some(task) = s.next() else {
            s = match next_timer {
                Some(d) => wait_timeout(&inner.work, s, d),
                None => wait(&inner.work, s),
            };
            continue;
        };
        s.running += 1;
        // Another worker may take the rest of the ready queue meanwhile.
        let more = !s.ready.is_empty();
        drop(s);
        if more {
            inner.work.notify_one();
        }
        let ran = task.run();
        s = lock(&inner.sched);
        if s.shutdown {
            s.running = s.running.saturating_sub(1);
            continue;
        }
        let earliest = s.after(task, ran);
        if earliest {
            // Workers sleeping until a later timer (or none) must see the new one.
            inner.work.notify_all();
        } else if !s.ready.is_empty() {
            inner.work.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_worker_counts_are_refused() {
        assert!(matches!(Executor::new(0), Err(ExecutorError::Workers(0))));
        let too_many = MAX_WORKERS + 1;
        let e = Executor::new(too_many).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("executor workers must be between 1 and {MAX_WORKERS}, not {too_many}")
        );
    }

    /// A task for driving the scheduler by hand.
    struct Fake(u64, Option<GroupId>);

    impl Task for Fake {
        fn id(&self) -> u64 {
            self.0
        }
        fn group(&self) -> Option<GroupId> {
            self.1
        }
        fn run(&self) -> Ran {
            Ran::Idle
        }
    }

    /// The race the group test once hit, step by step: a listener whose turn ended idle is given work
    /// and submitted again before its worker accounts for the turn. It must wait for its group like
    /// any other listener (its own stale turn still holds the group), not run while the group is
    /// released behind it and a second listener of the group starts.
    #[test]
    fn a_listener_submitted_again_before_its_turn_is_accounted_for_waits_for_its_group() {
        let g = GroupId::new();
        let a: Arc<dyn Task> = Arc::new(Fake(1, Some(g)));
        let b: Arc<dyn Task> = Arc::new(Fake(2, Some(g)));
        let mut s = Sched::default();
        s.ready.push_back(Entry::new(a.clone()));
        let first = s.next().expect("a runs");
        assert_eq!(first.id(), 1);
        s.running += 1;
        // Its handler returned idle; the informer gives it work again, and b gets work too.
        s.ready.push_back(Entry::new(a.clone()));
        s.ready.push_back(Entry::new(b.clone()));
        assert!(
            s.next().is_none(),
            "neither runs while a's turn holds the group"
        );
        assert_eq!(s.groups[&g].parked.len(), 2);
        // The turn is accounted for: the group goes to the first parked, a.
        assert!(!s.after(first, Ran::Idle));
        let again = s.next().expect("a runs again");
        assert_eq!(again.id(), 1);
        s.running += 1;
        assert!(s.next().is_none(), "b still waits");
        s.after(again, Ran::Idle);
        assert_eq!(s.next().map(|t| t.id()), Some(2));

        // Resumed from the timers, a task keeps the group it held.
        let mut s = Sched::default();
        s.ready.push_back(Entry::new(a.clone()));
        let t = s.next().unwrap();
        s.running += 1;
        let at = Instant::now() + Duration::from_secs(3600);
        assert!(s.after(t, Ran::Later(at)), "the earliest timer");
        s.ready.push_back(Entry::new(b.clone()));
        assert!(
            s.next().is_none(),
            "b waits: a keeps the group while it waits"
        );
        s.due_timers(at);
        assert_eq!(s.next().map(|t| t.id()), Some(1), "a resumes in its group");
    }

    /// A task that asks to come back at a time already past (the runtime going on with a cut batch)
    /// goes behind every task ready before it, keeping its group.
    #[test]
    fn a_task_due_again_at_once_queues_behind_the_ready_tasks_and_keeps_its_group() {
        let g = GroupId::new();
        let a: Arc<dyn Task> = Arc::new(Fake(1, Some(g)));
        let peer: Arc<dyn Task> = Arc::new(Fake(2, Some(g)));
        let b: Arc<dyn Task> = Arc::new(Fake(3, None));
        let c: Arc<dyn Task> = Arc::new(Fake(4, Some(GroupId::new())));
        let mut s = Sched::default();
        s.ready.push_back(Entry::new(a.clone()));
        let t = s.next().unwrap();
        s.running += 1;
        s.ready.push_back(Entry::new(peer));
        s.ready.push_back(Entry::new(b));
        s.ready.push_back(Entry::new(c));
        assert!(
            !s.after(t, Ran::Later(Instant::now())),
            "no timer: nobody to wake for it"
        );
        assert!(s.timers.is_empty());
        let order: Vec<u64> = std::iter::from_fn(|| {
            let t = s.next()?;
            Some(t.id())
        })
        .collect();
        assert_eq!(
            order,
            [3, 4, 1],
            "b and c first, then a; its peer parked behind it in the group"
        );
        assert_eq!(s.groups[&g].parked.len(), 1);
    }
}
