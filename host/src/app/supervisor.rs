//! The one owner of the host's tasks and threads, and the order they stop in.
//!
//! Every long-lived task of a running host is started here, by name, in a [`Phase`]. The
//! threads the host starts outside an informer (the executor's workers, the engine's epoch
//! ticker, the admin servers' runtime, the background work's threads) are registered here to be
//! joined; an informer joins its own (its process loop, a native handler's thread) when it stops.
//! [`Supervisor::stop_phase`] cancels one phase's token and waits for its tasks;
//! [`crate::app::Host::finish`] walks the phases in order within the grace period:
//!
//! 1. [`Phase::Intake`]: the reloader's file watch, the OCI poll; reloads are refused from then
//!    on (the reload action reads [`Supervisor::stopping`]), and a standby stops trying to lead.
//! 2. [`Phase::Informers`]: informers and their process loops, the `dir:` watcher, the "synced"
//!    loggers. An informer's task ends once its listeners finished the batch in hand; nothing is
//!    delivered after this phase, so plugins ask for no new actions.
//! 3. (not a phase) the actions plugins queued are sent, or audited as not sent at the deadline.
//! 4. [`Phase::Handover`]: the final policy-report write, the Lease's release (leader mode) or
//!    the membership Lease's deletion (shards); the elector renews until then, so the actions of
//!    step 3 are still sent by a leader.
//! 5. [`Phase::Servers`]: the admin and metrics servers (they answer `/healthz` to the end).
//! 6. Threads: the executor's workers and the engine's epoch ticker are joined, the servers'
//!    runtime shut down (1 s at most); the background work started inside the layers through the
//!    supervisor's [`Tasks`] (the first-load tier's threads, the plugins' action senders, the
//!    refusal summary timers) is told to stop, waited for, and its threads joined. A panic there
//!    is an [`OnError::Log`] failure like any other. All of it within the grace period: a thread
//!    still running at its end is not waited for (a warning says so) and ends with the process.
//!
//! Not joined: an in-process compile (`wisp-compile`, only where no compiler process is set: an
//! embedder's engine, tests) past its timeout, which cannot be interrupted and finishes on its
//! own; and the threads of Tokio's blocking pool, which end with the runtime.
//!
//! **When a task ends with an error**, what happens is the task's [`OnError`], chosen where it is
//! spawned, by this rule: a task without which the host would go on *silently wrong* is
//! [`OnError::Fatal`] (an informer whose `onPanic` is `exit`, the elector losing its Lease, a
//! plugin that cannot attach when this replica starts leading, a server that stops serving):
//! the host shuts down and `wisp run` exits non-zero naming the task. Any other task is
//! [`OnError::Log`]: its error is logged with the task's name and counted in
//! `wisp_host_task_failures_total{task}`, and the host goes on. A panic is an error like any
//! other. A task that ends without error before its phase was cancelled just ends.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::sync::lock;
use crate::tasks::{Tasks, panic_text};

/// When a task is told to stop (see the module doc for the order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Intake,
    Informers,
    Handover,
    Servers,
}

impl Phase {
    /// Every phase, in shutdown order.
    pub const ALL: [Phase; 4] = [
        Phase::Intake,
        Phase::Informers,
        Phase::Handover,
        Phase::Servers,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// What an error (or a panic) of a task does; see the module doc for which to choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnError {
    /// The host shuts down, and reports this error.
    Fatal,
    /// Logged and counted; the host goes on.
    Log,
}

/// Why the host must shut down on its own: the first fatal error.
#[derive(Default)]
struct Fatal {
    error: Mutex<Option<String>>,
    raised: CancellationToken,
}

struct PhaseTasks {
    token: CancellationToken,
    tracker: TaskTracker,
}

type Joiner = Box<dyn FnOnce() + Send>;

/// Owns the host's tasks (by phase) and threads; cheap to share behind an `Arc`.
pub struct Supervisor {
    phases: [PhaseTasks; 4],
    fatal: Fatal,
    failures: Arc<Mutex<BTreeMap<String, u64>>>,
    threads: Mutex<Vec<(String, Joiner)>>,
    /// The background work the layers start (see the module doc, step 6).
    tasks: Tasks,
}

/// Logs and counts the failure of an [`OnError::Log`] task.
fn log_failure(failures: &Mutex<BTreeMap<String, u64>>, task: &str, error: String) {
    tracing::error!(task, %error, "a task of the host failed; the host goes on without it");
    *lock(failures).entry(task.to_owned()).or_default() += 1;
}

impl Default for Supervisor {
    /// A supervisor whose background [`Tasks`] run on the current runtime, if any.
    fn default() -> Self {
        let failures: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
        let counted = failures.clone();
        let tasks = Tasks::new(
            tokio::runtime::Handle::try_current().ok(),
            Arc::new(move |task: &str, error: String| log_failure(&counted, task, error)),
        );
        Self {
            phases: Phase::ALL.map(|_| PhaseTasks {
                token: CancellationToken::new(),
                tracker: TaskTracker::new(),
            }),
            fatal: Fatal::default(),
            failures,
            threads: Mutex::default(),
            tasks,
        }
    }
}

impl Supervisor {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The token cancelled when `phase` stops.
    pub fn token(&self, phase: Phase) -> CancellationToken {
        self.phases[phase.index()].token.clone()
    }

    /// The background work of the layers, run under this supervisor (see the module doc).
    pub fn tasks(&self) -> Tasks {
        self.tasks.clone()
    }

    /// Whether the shutdown has begun (intake stopped).
    pub fn stopping(&self) -> bool {
        self.phases[Phase::Intake.index()].token.is_cancelled()
    }

    /// Tells every task of every phase to stop, without waiting (a host dropped without a
    /// shutdown).
    pub fn cancel_all(&self) {
        for p in &self.phases {
            p.token.cancel();
        }
    }

    /// Starts task `name` in `phase`: `task` gets the phase's token and should end soon after
    /// it is cancelled. An error or panic is handled as `on_error` says.
    pub fn spawn<F, Fut>(self: &Arc<Self>, phase: Phase, name: &str, on_error: OnError, task: F)
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        self.spawn_on(
            &tokio::runtime::Handle::current(),
            phase,
            name,
            on_error,
            task,
        )
    }

    /// [`Supervisor::spawn`] on the runtime of `handle` (the servers' own runtime, which no
    /// blocking work of the host's runtime can starve); tracked and stopped with `phase` all
    /// the same.
    pub fn spawn_on<F, Fut>(
        self: &Arc<Self>,
        handle: &tokio::runtime::Handle,
        phase: Phase,
        name: &str,
        on_error: OnError,
        task: F,
    ) where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        drop(self.spawn_tracked(handle, phase, name, on_error, task));
    }

    /// [`Supervisor::spawn`] for an owner that stops the task before its phase does: the handle
    /// completes once the task ended, however it ended (its error or panic was handled as
    /// `on_error` says; the handle's own error is only a task the runtime dropped).
    pub fn spawn_owned<F, Fut>(
        self: &Arc<Self>,
        phase: Phase,
        name: &str,
        on_error: OnError,
        task: F,
    ) -> tokio::task::JoinHandle<()>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let handle = tokio::runtime::Handle::current();
        self.spawn_tracked(&handle, phase, name, on_error, task)
    }

    fn spawn_tracked<F, Fut>(
        self: &Arc<Self>,
        handle: &tokio::runtime::Handle,
        phase: Phase,
        name: &str,
        on_error: OnError,
        task: F,
    ) -> tokio::task::JoinHandle<()>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        let p = &self.phases[phase.index()];
        let fut = std::panic::AssertUnwindSafe(task(p.token.clone())).catch_unwind();
        let (me, name) = (Arc::downgrade(self), name.to_owned());
        p.tracker.spawn_on(
            async move {
                let error = match fut.await {
                    Ok(Ok(())) => return,
                    Ok(Err(e)) => format!("{e:#}"),
                    Err(panic) => format!("panicked: {}", panic_text(&*panic)),
                };
                if let Some(me) = me.upgrade() {
                    me.failed(&name, on_error, error);
                }
            },
            handle,
        )
    }

    /// Registers a thread (or group of threads) to be joined, by `join`, once every phase
    /// stopped. `join` blocks; it runs on a blocking thread, in registration order.
    pub fn join_on_stop(&self, name: &str, join: impl FnOnce() + Send + 'static) {
        lock(&self.threads).push((name.to_owned(), Box::new(join)));
    }

    /// Handles a task's error: raises it (fatal) or logs and counts it.
    pub fn failed(&self, task: &str, on_error: OnError, error: String) {
        match on_error {
            OnError::Fatal => {
                tracing::error!(task, %error, "a task the host cannot run without failed; the host shuts down");
                lock(&self.fatal.error).get_or_insert_with(|| format!("{task}: {error}"));
                self.fatal.raised.cancel();
            }
            OnError::Log => log_failure(&self.failures, task, error),
        }
    }

    /// Completes once a fatal error was raised.
    pub async fn fatal_raised(&self) {
        self.fatal.raised.cancelled().await
    }

    /// The first fatal error, if any.
    pub fn fatal_error(&self) -> Option<String> {
        lock(&self.fatal.error).clone()
    }

    /// Failures of [`OnError::Log`] tasks so far, by task name.
    pub fn failures(&self) -> BTreeMap<String, u64> {
        lock(&self.failures).clone()
    }

    /// Tasks still running in `phase`.
    pub fn running(&self, phase: Phase) -> usize {
        self.phases[phase.index()].tracker.len()
    }

    /// Cancels `phase` and waits until its tasks ended or `deadline` passed; `true` when they
    /// all ended. Later phases keep running.
    pub async fn stop_phase(&self, phase: Phase, deadline: Instant) -> bool {
        let p = &self.phases[phase.index()];
        p.token.cancel();
        p.tracker.close();
        let ended = tokio::time::timeout_at(deadline, p.tracker.wait())
            .await
            .is_ok();
        if !ended {
            tracing::warn!(
                ?phase,
                left = p.tracker.len(),
                "tasks still running when the grace period ran out"
            );
        }
        ended
    }

    /// Stops and waits for the background [`Tasks`], then joins the registered threads, in
    /// order, and the tasks' threads, on a blocking thread; `true` when all were joined by
    /// `deadline` (those left are detached and end with the process).
    pub async fn join_threads(&self, deadline: Instant) -> bool {
        let tasks_ended = self.tasks.wait(deadline).await;
        if !tasks_ended {
            tracing::warn!(
                left = self.tasks.running(),
                "background tasks still running when the grace period ran out"
            );
        }
        let threads = std::mem::take(&mut *lock(&self.threads));
        let tasks = self.tasks.clone();
        let join = tokio::task::spawn_blocking(move || {
            for (name, join) in threads {
                tracing::debug!(thread = %name, "joining");
                join();
            }
            tasks.join_threads();
        });
        let joined =
            tasks_ended & matches!(tokio::time::timeout_at(deadline, join).await, Ok(Ok(())));
        if !joined {
            tracing::warn!("threads still running when the grace period ran out");
        }
        joined
    }

    /// Stops every phase in order, then joins the threads, each step bounded by `deadline`
    /// (for hosts without actions to drain between phases: tests, `wisp record`).
    pub async fn stop_all(&self, deadline: Instant) -> bool {
        let mut all = true;
        for phase in Phase::ALL {
            all &= self.stop_phase(phase, deadline).await;
        }
        all & self.join_threads(deadline).await
    }
}

impl Drop for Supervisor {
    /// A host dropped without a shutdown still tells its tasks to stop.
    fn drop(&mut self) {
        self.cancel_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn phases_stop_in_order_and_later_phases_run_until_theirs() {
        let sup = Supervisor::new();
        let order = Arc::new(Mutex::new(Vec::new()));
        for (phase, name) in [
            (Phase::Servers, "server"),
            (Phase::Informers, "informer"),
            (Phase::Handover, "lease"),
            (Phase::Intake, "reloader"),
        ] {
            let order = order.clone();
            sup.spawn(phase, name, OnError::Log, move |stop| async move {
                stop.cancelled().await;
                lock(&order).push(name);
                Ok(())
            });
        }
        let deadline = Instant::now() + crate::test_time::patience(Duration::from_secs(5));
        assert!(sup.stop_phase(Phase::Intake, deadline).await);
        assert!(sup.stop_phase(Phase::Informers, deadline).await);
        assert_eq!(sup.running(Phase::Handover), 1, "the Lease task still runs");
        assert!(sup.stop_all(deadline).await);
        assert_eq!(
            *lock(&order),
            ["reloader", "informer", "lease", "server"],
            "stopped in phase order"
        );
    }

    #[tokio::test]
    async fn a_fatal_error_or_panic_is_raised_and_a_logged_one_counted() {
        let sup = Supervisor::new();
        sup.spawn(Phase::Intake, "poll", OnError::Log, |_| async {
            anyhow::bail!("registry unreachable")
        });
        sup.spawn(Phase::Intake, "poll", OnError::Log, |_| async {
            panic!("boom");
        });
        let deadline = Instant::now() + crate::test_time::patience(Duration::from_secs(5));
        assert!(sup.stop_phase(Phase::Intake, deadline).await);
        assert_eq!(sup.failures().get("poll"), Some(&2));
        assert_eq!(sup.fatal_error(), None);

        sup.spawn(Phase::Servers, "admin server", OnError::Fatal, |_| async {
            panic!("bind lost")
        });
        tokio::time::timeout(
            crate::test_time::patience(Duration::from_secs(5)),
            sup.fatal_raised(),
        )
        .await
        .expect("a fatal panic is raised");
        assert_eq!(
            sup.fatal_error().as_deref(),
            Some("admin server: panicked: bind lost")
        );
    }

    #[tokio::test]
    async fn a_task_that_ignores_its_token_is_left_at_the_deadline_and_threads_are_joined() {
        let sup = Supervisor::new();
        sup.spawn(Phase::Informers, "stuck", OnError::Log, |_| async {
            futures::future::pending::<()>().await;
            Ok(())
        });
        let joined = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let j = joined.clone();
        sup.join_on_stop("worker", move || {
            j.store(true, std::sync::atomic::Ordering::SeqCst)
        });
        let deadline = Instant::now() + Duration::from_millis(200);
        assert!(!sup.stop_phase(Phase::Informers, deadline).await);
        assert!(
            sup.join_threads(Instant::now() + crate::test_time::patience(Duration::from_secs(5)))
                .await
        );
        assert!(joined.load(std::sync::atomic::Ordering::SeqCst));
    }
}
