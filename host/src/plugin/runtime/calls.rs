//! A running plugin: its instance, failure policy and quarantine. Shared by the plugin's
//! listeners (one per informer it receives), each of which hands it batches from its own queue.
//!
//! A listener's turn makes one `handle` call into the plugin (plus, after a failed call, the
//! fresh instance's `init`): what a batch needs beyond its first call (its items delivered again
//! one by one after the call was cut, its retries) is left in hand, and the listener comes back
//! for it ([`PluginRuntime::retry_at`], [`PluginRuntime::resume`]) behind the other plugins
//! waiting for a worker. So a plugin whose every call spins to its deadline costs the others one
//! deadline per turn, not one per notification of its batch.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::state::{InHand, PendingRetry, PluginRuntime, VersionInfo};
use crate::informer::backoff::{Backoff, BackoffConfig};
use crate::informer::{self, EventHandler};
use crate::plugin::bindings::Outcome;
use crate::plugin::engine::PluginEngine;
use crate::plugin::sandbox::instance::{CallError, Instance, with_panic_message};
use crate::plugin::sandbox::state::{Grants, HostApi};
use crate::plugin::spec::{FailurePolicy, PluginSpec};
use crate::plugin::status::{PluginCounters, PluginState, PluginStatus};
use crate::sync::lock;

/// Longest wait between two retries of a notification (the backoff doubles up to it).
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);

/// The waits between a notification's retries: `backoff` doubling to [`MAX_RETRY_WAIT`].
fn retry_backoff(backoff: Duration) -> Backoff {
    Backoff::new(BackoffConfig::doubling(backoff, MAX_RETRY_WAIT))
}

/// `now + wait`, or a year from now when that overflows (a backoff may be configured up to 292
/// years).
fn after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

impl PluginRuntime {
    /// A runtime around an already checked first instance.
    pub(crate) fn new(
        checked: super::loader::CheckedPlugin,
        engine: Arc<PluginEngine>,
        version: VersionInfo,
    ) -> Self {
        let super::loader::CheckedPlugin {
            spec,
            pre,
            mut instance,
            status,
            grants,
            actions,
            ..
        } = checked;
        instance.started();
        Self {
            version,
            probation: None,
            name: spec.name.as_str().into(),
            settings: spec.settings.to_string(),
            spec,
            engine,
            pre,
            grants,
            status,
            actions,
            instance: Some(instance),
            admitter: None,
            consecutive_failures: 0,
            defer_retries: false,
            retries: std::collections::VecDeque::new(),
            in_hand: None,
        }
    }

    pub(crate) fn api(
        name: &Arc<str>,
        spec: &PluginSpec,
        grants: &Grants,
        status: &Arc<PluginStatus>,
        actions: &Arc<crate::actions::PluginActions>,
    ) -> HostApi {
        HostApi {
            plugin: name.clone(),
            grants: grants.clone(),
            log_level: spec.log_level,
            status: status.clone(),
            actions: actions.clone(),
            verdict_events: spec.verdict_events,
        }
    }

    /// A new instance of the running version, initialised with the plugin's settings.
    pub(super) fn new_instance(&self) -> Result<Instance, String> {
        let api = Self::api(
            &self.name,
            &self.spec,
            &self.grants,
            &self.status,
            &self.actions,
        );
        let mut inst = Instance::new(self.engine.metering(), &self.pre, api, &self.spec.limits)
            .map_err(|e| e.to_string())?;
        inst.set_metadata_only(self.version.info.metadata_only);
        match inst.init(&self.settings) {
            Ok(Ok(())) => {}
            Ok(Err(msg)) => return Err(format!("init refused its settings on restart: {msg}")),
            Err(e) => return Err(format!("init failed on restart: {e}")),
        }
        inst.started();
        Ok(inst)
    }

    /// A fresh instance, initialised with the plugin's settings.
    fn fresh(&mut self) -> Result<&mut Instance, String> {
        if self.instance.is_none() {
            let inst = self.new_instance()?;
            PluginCounters::add(&self.status.counters.restarts, 1);
            self.instance = Some(inst);
        }
        self.instance
            .as_mut()
            .ok_or_else(|| "no instance".to_owned())
    }

    fn record_call_error(&mut self, e: &CallError, logs_before: u64) {
        // The store is unusable after a trap: the next call gets a fresh instance.
        self.instance = None;
        self.count_call_error(e, logs_before);
    }

    /// Counts a failed call, logs it and keeps it as the plugin's last error.
    pub(super) fn count_call_error(&self, e: &CallError, logs_before: u64) {
        let c = &self.status.counters;
        match e {
            CallError::Deadline(_) | CallError::StartupDeadline(_) => {
                PluginCounters::add(&c.deadline_hits, 1)
            }
            CallError::OutOfMemory(_) => PluginCounters::add(&c.out_of_memory, 1),
            CallError::OutOfFuel => PluginCounters::add(&c.out_of_fuel, 1),
            CallError::Trap(_) => PluginCounters::add(&c.traps, 1),
        }
        let msg = with_panic_message(e, &self.status.logs, logs_before);
        tracing::warn!(plugin = %self.name, error = %msg, "plugin call failed; its instance will be replaced");
        self.status.set_last_error(msg);
        self.status.logs.push(format!("host: call failed: {e}"));
    }

    fn call(
        &mut self,
        informer: &str,
        batch: &[informer::Delivery],
    ) -> Result<Vec<Outcome>, CallError> {
        let start = Instant::now();
        match self.fresh() {
            Ok(_) => {}
            Err(msg) => {
                self.quarantine(format!("cannot make a fresh instance: {msg}"));
                return Err(CallError::Trap(msg));
            }
        }
        let logs_before = self.status.logs.total();
        let inst = match self.instance.as_mut() {
            Some(i) => i,
            None => return Err(CallError::Trap("no instance".into())),
        };
        let r = inst.handle(informer, batch);
        let c = &self.status.counters;
        PluginCounters::add(&c.calls, 1);
        let took = start.elapsed();
        PluginCounters::add(&c.handle_nanos, took.as_nanos() as u64);
        c.handle_latency.observe(took);
        if let Err(e) = &r {
            self.record_call_error(e, logs_before);
        }
        r
    }

    fn quarantine(&mut self, reason: String) {
        self.status.quarantine(&self.name, reason);
    }

    /// Whether the plugin is quarantined.
    pub fn is_quarantined(&self) -> bool {
        matches!(self.status.state(), PluginState::Quarantined { .. })
    }

    fn succeeded(&mut self, n: u64) {
        self.consecutive_failures = 0;
        PluginCounters::add(&self.status.counters.delivered, n);
    }

    /// Applies the failure policy to one delivery whose first attempt failed with `why`.
    ///
    /// Under `retry`, the retries wait out a backoff (doubled each time, at most
    /// [`MAX_RETRY_WAIT`]). On a listener ([`PluginRuntime::begin`]) the failed notification is
    /// queued and the caller is told when to come back ([`PluginRuntime::retry_at`]): the
    /// thread, a worker of the shared executor, is not held for the wait, which can add up to
    /// minutes. Elsewhere (a rollback's redelivery to the previous version) the retries run
    /// here, sleeping on the calling thread, as they always did.
    fn settle(&mut self, informer: &str, d: &informer::Delivery, why: String) {
        if let FailurePolicy::Retry { retries, backoff } = self.spec.on_failure.policy.clone() {
            if self.defer_retries {
                if retries > 0 && !self.is_quarantined() {
                    let mut backoff = retry_backoff(backoff);
                    self.retries.push_back(PendingRetry {
                        informer: informer.to_owned(),
                        delivery: d.clone(),
                        left: retries,
                        due: after(backoff.next_delay()),
                        backoff,
                        why,
                    });
                    return;
                }
            } else {
                let mut backoff = retry_backoff(backoff);
                for _ in 0..retries {
                    if self.is_quarantined() {
                        break;
                    }
                    std::thread::sleep(backoff.next_delay());
                    if self.retry_once(informer, d) {
                        return;
                    }
                }
            }
        }
        self.give_up(d.seq, informer, why);
    }

    /// Delivers `d` alone again; whether it succeeded.
    fn retry_once(&mut self, informer: &str, d: &informer::Delivery) -> bool {
        PluginCounters::add(&self.status.counters.retries, 1);
        match self.call(informer, std::slice::from_ref(d)) {
            Ok(o) if matches!(o.first(), Some(Outcome::Ok)) => {
                self.succeeded(1);
                true
            }
            Ok(o) => {
                if let Some(Outcome::Error(m)) = o.first() {
                    PluginCounters::add(&self.status.counters.errors, 1);
                    self.status.set_last_error(m.clone());
                }
                false
            }
            Err(_) => false,
        }
    }

    /// A notification failed for good: counted, and the plugin quarantined after too many in a
    /// row.
    fn give_up(&mut self, seq: u64, informer: &str, why: String) {
        PluginCounters::add(&self.status.counters.failed, 1);
        self.consecutive_failures += 1;
        let limit = self.spec.on_failure.quarantine_after;
        tracing::debug!(plugin = %self.name, seq, informer, error = %why, "notification failed");
        if limit > 0 && self.consecutive_failures >= limit {
            self.quarantine(format!(
                "{} notifications failed in a row; last: {why}",
                self.consecutive_failures
            ));
        }
    }

    /// Delivers one batch from `informer`'s listener, all of it: a cut batch's items again one
    /// by one, and the retries, waiting for their backoff on this thread (offline replay,
    /// benchmarks). Listeners use
    /// [`PluginRuntime::begin`] and [`PluginRuntime::resume`] instead.
    pub fn handle(&mut self, informer: &str, batch: &[informer::Delivery]) {
        self.begin(informer, batch);
        while let Some(at) = self.retry_at() {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            self.resume();
        }
    }

    /// Delivers one batch from `informer`'s listener, in one call into the plugin: a turn of
    /// the plugin on the shared executor calls it once, so a plugin whose calls are cut holds a
    /// worker for one deadline per turn, and the other ready plugins run between its turns.
    ///
    /// What is left of the batch goes on in later turns, when [`PluginRuntime::retry_at`] says,
    /// by [`PluginRuntime::resume`], one call each: the items of a batch whose call was cut,
    /// delivered again one by one (so only the one at fault meets the failure policy), then
    /// the notifications that failed under the retry policy, after their backoff. The batch is
    /// finished (probation verdict, deleted objects' verdicts cleared) once they are settled. A
    /// plugin's next batch, from any of its listeners, comes only after that (its listeners
    /// form one group on the executor).
    pub fn begin(&mut self, informer: &str, batch: &[informer::Delivery]) {
        // Left by a listener that stopped during its wait: they will not be delivered.
        self.abandon_pending();
        if self.is_quarantined() {
            PluginCounters::add(&self.status.counters.dropped, batch.len() as u64);
            self.clear_deleted_verdicts(informer, batch);
            return;
        }
        let failed_before = PluginCounters::get(&self.status.counters.failed);
        self.defer_retries = true;
        let cut = self.deliver(informer, batch);
        self.defer_retries = false;
        if !cut && self.retries.is_empty() {
            self.finish(informer, batch, failed_before);
        } else {
            self.in_hand = Some(InHand {
                informer: informer.to_owned(),
                batch: batch.to_vec(),
                failed_before,
                redeliver: if cut { 0 } else { batch.len() },
            });
        }
    }

    /// When the batch in hand goes on: now while items of a cut batch wait to be delivered
    /// again (or when the plugin was quarantined meanwhile: what is left is dropped or given
    /// up), else when its next retry is due; `None` when the batch is finished.
    pub fn retry_at(&self) -> Option<Instant> {
        let h = self.in_hand.as_ref()?;
        if h.redelivering() || self.is_quarantined() {
            return Some(Instant::now());
        }
        self.retries.front().map(|r| r.due)
    }

    /// Goes on with the batch in hand, with one call into the plugin at most: delivers the next
    /// item of a cut batch again, or else runs the first retry if it is due (a retry that fails
    /// again waits its doubled backoff, and the ones behind it wait too). When nothing is left,
    /// the batch in hand is finished.
    pub fn resume(&mut self) {
        if self.is_quarantined() {
            self.abandon_pending();
            return;
        }
        if let Some(h) = self.in_hand.as_mut()
            && let Some(d) = h.next_redelivery()
        {
            let informer = h.informer.clone();
            self.defer_retries = true;
            self.redeliver_one(&informer, &d);
            self.defer_retries = false;
        } else if self
            .retries
            .front()
            .is_some_and(|r| r.due <= Instant::now())
        {
            self.retry_first();
        }
        if self.retries.is_empty()
            && !self.redelivering()
            && let Some(h) = self.in_hand.take()
        {
            self.finish(&h.informer, &h.batch, h.failed_before);
        }
    }

    /// Whether items of a cut batch wait to be delivered again.
    fn redelivering(&self) -> bool {
        self.in_hand.as_ref().is_some_and(InHand::redelivering)
    }

    /// Runs the first retry (due): it succeeds, fails for good, or waits its doubled backoff at
    /// the front.
    fn retry_first(&mut self) {
        let Some(mut r) = self.retries.pop_front() else {
            return;
        };
        if self.retry_once(&r.informer, &r.delivery) {
            return;
        }
        r.left -= 1;
        if r.left == 0 {
            self.give_up(r.delivery.seq, &r.informer, r.why);
        } else {
            r.due = after(r.backoff.next_delay());
            self.retries.push_front(r);
        }
    }

    /// Ends the batch in hand (the plugin was quarantined, or its listener stopped): the items
    /// of a cut batch not delivered again are dropped, the retries left are given up, and the
    /// batch is finished.
    fn abandon_pending(&mut self) {
        if let Some(h) = self.in_hand.as_mut() {
            let left = h.batch.len() - h.redeliver;
            h.redeliver = h.batch.len();
            PluginCounters::add(&self.status.counters.dropped, left as u64);
        }
        while let Some(r) = self.retries.pop_front() {
            self.give_up(r.delivery.seq, &r.informer, r.why);
        }
        if let Some(h) = self.in_hand.take() {
            self.finish(&h.informer, &h.batch, h.failed_before);
        }
    }

    /// A batch is done: the probation verdict counts its failures, deleted objects lose their
    /// verdicts.
    fn finish(&mut self, informer: &str, batch: &[informer::Delivery], failed_before: u64) {
        let failed = PluginCounters::get(&self.status.counters.failed) - failed_before;
        if self.probation.is_some() {
            self.after_probation_batch(informer, batch, failed);
        }
        self.clear_deleted_verdicts(informer, batch);
    }

    /// A deleted object's verdicts go with it (also when the plugin is quarantined).
    fn clear_deleted_verdicts(&self, informer: &str, batch: &[informer::Delivery]) {
        let verdicts = &self.grants.services.verdicts;
        if verdicts.is_empty() {
            return;
        }
        for d in batch {
            if let informer::Notification::Delete { obj } = &d.notification {
                let key = informer::key::deleted_object_key(obj);
                verdicts.clear_object(&self.name, informer, &key);
            }
        }
    }

    /// Delivers notifications from `informer` in one call, applying the failure policy. Returns
    /// whether the call was cut with more than one notification in it (deadline, trap, memory,
    /// fuel): the batch died with its instance, and its items are to be delivered again one by
    /// one ([`PluginRuntime::redeliver_one`]), so only the one at fault meets the failure policy.
    pub(super) fn deliver(&mut self, informer: &str, batch: &[informer::Delivery]) -> bool {
        match self.call(informer, batch) {
            Ok(outcomes) if outcomes.len() == batch.len() => {
                for (d, o) in batch.iter().zip(outcomes) {
                    match o {
                        Outcome::Ok => self.succeeded(1),
                        Outcome::Error(msg) => {
                            PluginCounters::add(&self.status.counters.errors, 1);
                            self.status.set_last_error(msg.clone());
                            self.settle(informer, d, msg);
                        }
                    }
                }
            }
            Ok(outcomes) => {
                let why = format!(
                    "returned {} outcomes for {} deliveries",
                    outcomes.len(),
                    batch.len()
                );
                self.status.set_last_error(why.clone());
                for d in batch {
                    self.settle(informer, d, why.clone());
                }
            }
            Err(e) if batch.len() == 1 => self.settle(informer, &batch[0], e.to_string()),
            Err(_) => return true,
        }
        false
    }

    /// Delivers `d`, an item of a cut batch, again alone (to a fresh instance), applying the
    /// failure policy; dropped when the plugin was quarantined meanwhile.
    fn redeliver_one(&mut self, informer: &str, d: &informer::Delivery) {
        if self.is_quarantined() {
            PluginCounters::add(&self.status.counters.dropped, 1);
            return;
        }
        match self.call(informer, std::slice::from_ref(d)) {
            Ok(o) if matches!(o.first(), Some(Outcome::Ok)) => self.succeeded(1),
            Ok(o) => {
                let msg = match o.into_iter().next() {
                    Some(Outcome::Error(m)) => m,
                    _ => "no outcome".to_owned(),
                };
                PluginCounters::add(&self.status.counters.errors, 1);
                self.settle(informer, d, msg);
            }
            Err(e) => self.settle(informer, d, e.to_string()),
        }
    }
}

/// The informer-side handler of one (plugin, informer) pair. It runs on the informer's shared
/// executor, in its plugin's group: the plugin's handlers share one instance, so they take turns
/// instead of holding several workers that wait on its mutex.
pub struct WasmHandler {
    pub(crate) runtime: Arc<Mutex<PluginRuntime>>,
    pub(crate) informer: String,
}

impl WasmHandler {
    fn runtime(&self) -> std::sync::MutexGuard<'_, PluginRuntime> {
        lock(&self.runtime)
    }
}

impl EventHandler for WasmHandler {
    fn handle(&mut self, batch: &[informer::Delivery]) {
        self.runtime().begin(&self.informer, batch);
    }

    /// A failed notification waiting for its retry keeps the batch in hand, off the worker.
    fn unfinished(&mut self) -> Option<Instant> {
        self.runtime().retry_at()
    }

    fn resume(&mut self) {
        self.runtime().resume();
    }
}
