//! The shared processor (client-go `sharedProcessor`): fans notifications out to every listener
//! (or, for resyncs, to the listeners whose resync is due) without ever blocking on one.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::handler::Notification;
use super::listener::Listener;
use crate::sync::lock;

#[derive(Default)]
struct Inner {
    listeners: Vec<Arc<Listener>>,
    /// Receivers of sync notifications (periodic resyncs, and relist updates that found an
    /// object unchanged): the listeners whose resync is due, as set by `should_resync`.
    syncing: Vec<Arc<Listener>>,
}

/// Fan-out to listeners.
#[derive(Default)]
pub struct SharedProcessor {
    inner: Mutex<Inner>,
}

impl SharedProcessor {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// Registers a listener. As in client-go every listener starts out in the syncing set and
    /// stays there until the first resync check (which keeps only those whose resync is due):
    /// so a listener without a resync period still receives a relist's unchanged objects while
    /// its informer does not resync, or has not checked yet. `syncing: false` keeps a listener
    /// without a period out of it (Wisp's `relistResyncs: skip`).
    pub(crate) fn add_listener(&self, l: Arc<Listener>, syncing: bool) {
        let mut inner = self.lock();
        inner.listeners.push(l.clone());
        if syncing || !l.resync_period().is_zero() {
            inner.syncing.push(l);
        }
    }

    /// Removes a listener by id; returns it if it was there.
    pub(crate) fn remove_listener(&self, id: u64) -> Option<Arc<Listener>> {
        let mut inner = self.lock();
        let pos = inner.listeners.iter().position(|l| l.id() == id)?;
        let l = inner.listeners.remove(pos);
        inner.syncing.retain(|s| s.id() != id);
        Some(l)
    }

    /// Hands `n` to every listener, or with `sync` only to the listeners whose resync is due.
    pub fn distribute(&self, n: Notification, sync: bool) {
        let inner = self.lock();
        let targets = if sync {
            &inner.syncing
        } else {
            &inner.listeners
        };
        for l in targets {
            l.add(n.clone());
        }
    }

    /// Whether any listener's resync is due; the due ones become the syncing set.
    pub fn should_resync(&self, now: Instant) -> bool {
        let mut inner = self.lock();
        let due: Vec<Arc<Listener>> = inner
            .listeners
            .iter()
            .filter(|l| l.should_resync(now))
            .cloned()
            .collect();
        for l in &due {
            l.determine_next_resync(now);
        }
        let any = !due.is_empty();
        inner.syncing = due;
        any
    }

    /// The informer's check period changed: re-derive every listener's period.
    pub(crate) fn resync_check_period_changed(&self, check: Duration) {
        for l in &self.lock().listeners {
            l.set_resync_period(determine_resync_period(l.requested_resync_period(), check));
        }
    }

    /// Every registered listener.
    pub fn listeners(&self) -> Vec<Arc<Listener>> {
        self.lock().listeners.clone()
    }

    /// Stops every listener (buffered notifications are dropped) and waits for their threads.
    pub(crate) fn stop(&self) {
        let listeners = std::mem::take(&mut self.lock().listeners);
        self.lock().syncing.clear();
        for l in &listeners {
            l.stop();
        }
        for l in &listeners {
            l.join();
        }
    }
}

/// client-go `determineResyncPeriod`: 0 stays 0; a check period of 0 disables resync; below the
/// check period is raised to it.
pub(crate) fn determine_resync_period(desired: Duration, check: Duration) -> Duration {
    if desired.is_zero() || check.is_zero() {
        return Duration::ZERO;
    }
    desired.max(check)
}
