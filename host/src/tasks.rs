//! Background work started deep inside a layer (a tier-up compile thread, a plugin's action
//! sender, the refusal summary timer), run under the host's supervisor all the same: [`Tasks`]
//! starts each by name, keeps it to be stopped and joined at shutdown, and reports its panic
//! (by name, to the supervisor's failure count and log) instead of swallowing it.
//!
//! A leaf: the supervisor ([`crate::app::supervisor`]) owns the host's `Tasks` and hands a
//! clone down (the engine's settings, the host services); without a supervisor (a library
//! embedder, `wisp check`, a test) [`Tasks::default`] logs a panic and leaves the joining to
//! whoever calls [`Tasks::join_threads`].

use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::sync::lock;

/// What is told of a task or thread that panicked: its name and the panic's message.
pub type Report = Arc<dyn Fn(&str, String) + Send + Sync>;

/// Starts, tracks and joins background tasks and threads; cheap to clone (shared).
#[derive(Clone)]
pub struct Tasks(Arc<Inner>);

struct Inner {
    /// The runtime async tasks run on (captured where the owner was made, inside it); `None`
    /// outside any runtime: async tasks are then not started (see [`Tasks::spawn`]).
    runtime: Option<tokio::runtime::Handle>,
    /// The async tasks, waited for at shutdown.
    tracker: TaskTracker,
    /// Cancelled at shutdown: a task waiting on a timer ends early (see [`Tasks::spawn`]).
    stop: CancellationToken,
    /// The threads started, to be joined at shutdown (finished ones are dropped as new ones
    /// start).
    threads: Mutex<Vec<(String, std::thread::JoinHandle<()>)>>,
    /// Where a panic is told.
    report: Report,
}

impl Default for Tasks {
    /// On the current runtime, if any; a panic is logged.
    fn default() -> Self {
        Self::new(
            tokio::runtime::Handle::try_current().ok(),
            Arc::new(|task: &str, error: String| {
                tracing::error!(task, %error, "a background task of the host failed");
            }),
        )
    }
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks")
            .field("runtime", &self.0.runtime.is_some())
            .field("tasks", &self.0.tracker.len())
            .finish_non_exhaustive()
    }
}

impl Tasks {
    /// Tasks on `runtime` whose panics are told to `report`.
    pub fn new(runtime: Option<tokio::runtime::Handle>, report: Report) -> Self {
        Self(Arc::new(Inner {
            runtime,
            tracker: TaskTracker::new(),
            stop: CancellationToken::new(),
            threads: Mutex::default(),
            report,
        }))
    }

    /// Starts thread `name` running `f`; a panic of `f` is reported. It is joined by
    /// [`Tasks::join_threads`].
    pub fn spawn_thread(
        &self,
        name: &str,
        f: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<()> {
        let (report, task) = (self.0.report.clone(), name.to_owned());
        let handle = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                    report(&task, format!("panicked: {}", panic_text(&*panic)));
                }
            })?;
        let mut threads = lock(&self.0.threads);
        threads.retain(|(_, t)| !t.is_finished());
        threads.push((name.to_owned(), handle));
        Ok(())
    }

    /// Starts async task `name` (`task` gets a token cancelled at shutdown); a panic is
    /// reported. `None` outside a runtime (nothing is started). The handle completes when the
    /// task ended, however it ended; shutdown waits for it too ([`Tasks::wait`]).
    pub fn spawn<F, Fut>(&self, name: &str, task: F) -> Option<tokio::task::JoinHandle<()>>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let runtime = self.0.runtime.as_ref()?;
        let fut = std::panic::AssertUnwindSafe(task(self.0.stop.clone())).catch_unwind();
        let (report, name) = (self.0.report.clone(), name.to_owned());
        Some(self.0.tracker.spawn_on(
            async move {
                if let Err(panic) = fut.await {
                    report(&name, format!("panicked: {}", panic_text(&*panic)));
                }
            },
            runtime,
        ))
    }

    /// Tells the async tasks to stop (their token) and waits until they ended or `deadline`
    /// passed; `true` when they all ended.
    pub async fn wait(&self, deadline: tokio::time::Instant) -> bool {
        self.0.stop.cancel();
        self.0.tracker.close();
        tokio::time::timeout_at(deadline, self.0.tracker.wait())
            .await
            .is_ok()
    }

    /// Joins the threads started so far (blocking), in the order they started.
    pub fn join_threads(&self) {
        let threads = std::mem::take(&mut *lock(&self.0.threads));
        for (name, t) in threads {
            tracing::debug!(thread = %name, "joining");
            // Its panic was reported by the thread itself.
            let _ = t.join();
        }
    }

    /// Async tasks still running.
    pub fn running(&self) -> usize {
        self.0.tracker.len()
    }
}

/// Says the panic of a joined thread (one its own code did not catch), by name, instead of
/// dropping it with the join's result.
pub fn report_join(thread: &str, joined: std::thread::Result<()>) {
    if let Err(panic) = joined {
        let panic = panic_text(&*panic);
        tracing::error!(thread, %panic, "a thread of the host panicked");
    }
}

/// Says the panic of a blocking task that was awaited (its result is otherwise unused).
pub fn report_blocking(task: &str, joined: Result<(), tokio::task::JoinError>) {
    if let Err(e) = joined {
        tracing::error!(task, error = %e, "a blocking task of the host failed");
    }
}

/// The message of a panic payload.
pub fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn recorded() -> (Tasks, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let tasks = Tasks::new(
            tokio::runtime::Handle::try_current().ok(),
            Arc::new(move |task: &str, error: String| lock(&s).push(format!("{task}: {error}"))),
        );
        (tasks, seen)
    }

    #[test]
    fn a_threads_panic_is_reported_by_name_and_the_thread_joined() {
        let (tasks, seen) = recorded();
        tasks
            .spawn_thread("wisp-tier-up", || panic!("compile blew up"))
            .unwrap();
        tasks.join_threads();
        assert_eq!(*lock(&seen), ["wisp-tier-up: panicked: compile blew up"]);
    }

    #[tokio::test]
    async fn a_tasks_panic_is_reported_and_shutdown_cancels_and_waits_for_the_rest() {
        let (tasks, seen) = recorded();
        let boom = tasks.spawn("sender", |_| async { panic!("lost") }).unwrap();
        boom.await
            .expect("the panic is caught and reported, not rethrown");
        tasks.spawn("timer", |stop| async move {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(3600)) => {}
                () = stop.cancelled() => {}
            }
        });
        let deadline =
            tokio::time::Instant::now() + crate::test_time::patience(Duration::from_secs(5));
        assert!(tasks.wait(deadline).await, "the timer ended when told");
        assert_eq!(*lock(&seen), ["sender: panicked: lost"]);
    }
}
