//! The senders' lifecycle at shutdown: while the host runs, accepted actions are sent; when it
//! stops, no new action is taken, the senders send what is queued until the grace period runs
//! out, and whatever is left then is audited as not sent (never dropped without a trace).

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::sync::lock;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Where the senders are in their life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Taking and sending actions.
    Running,
    /// Shutting down: no new actions; the queued ones are being sent.
    Draining,
    /// The grace period ran out: nothing more is sent; what is left is audited as not sent.
    Abandoned,
}

/// The per-plugin sender tasks of a host and their phase.
pub struct Senders {
    phase: watch::Sender<Phase>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    not_sent: AtomicU64,
}

impl Default for Senders {
    fn default() -> Self {
        Self {
            phase: watch::Sender::new(Phase::Running),
            tasks: Mutex::default(),
            not_sent: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for Senders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Senders")
            .field("phase", &self.phase())
            .finish_non_exhaustive()
    }
}

/// What draining did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainReport {
    /// Every queued action was sent (or failed at the API server) before the deadline.
    pub drained: bool,
    /// Actions audited as not sent (the grace period ran out first).
    pub not_sent: u64,
}

impl Senders {
    /// The current phase.
    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// Whether new actions are taken.
    pub fn is_running(&self) -> bool {
        self.phase() == Phase::Running
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    pub(crate) fn register(&self, task: JoinHandle<()>) {
        let mut tasks = lock(&self.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    pub(crate) fn count_not_sent(&self) {
        self.not_sent.fetch_add(1, Ordering::Relaxed);
    }

    /// Stops taking actions and lets the senders send what is queued until `deadline`; then
    /// abandons the rest, which the senders audit as not sent. Returns once every sender has
    /// ended (they only write audit entries once abandoned).
    pub async fn drain(&self, deadline: tokio::time::Instant) -> DrainReport {
        self.phase.send_replace(Phase::Draining);
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.tasks));
        let mut all = futures::future::join_all(tasks);
        let drained = tokio::time::timeout_at(deadline, &mut all).await.is_ok();
        if !drained {
            self.phase.send_replace(Phase::Abandoned);
            all.await;
        }
        DrainReport {
            drained,
            not_sent: self.not_sent.load(Ordering::Relaxed),
        }
    }
}

/// Resolves once the phase satisfies `f`; never when the senders' owner is gone (nothing can
/// change the phase any more).
pub(crate) async fn reached(phase: &mut watch::Receiver<Phase>, f: impl FnMut(&Phase) -> bool) {
    if phase.wait_for(f).await.is_err() {
        std::future::pending::<()>().await;
    }
}
