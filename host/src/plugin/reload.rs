//! Hot reload: a new version is compiled and checked off the delivery path, then swapped in
//! between two batches under the runtime's lock. The listeners' queues are untouched, so
//! notifications queued meanwhile go to the new version and none is lost or delivered twice.
//!
//! - State hand-off: the old instance's `snapshot` is given to the new one's `restore`.
//! - Probation: the previous version (and its live instance) is kept for the new version's first
//!   notifications; if more than the threshold of them fail, it is swapped back and those
//!   notifications are delivered to it again, so it misses nothing.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::bindings::PluginPre;
use super::error::PluginError;
use super::instance::Instance;
use super::manager::{LoadReport, check_bytes};
use super::runtime::{PluginRuntime, VersionInfo};
use super::spec::PluginSpec;
use super::state::StoreData;
use super::status::PluginCounters;
use crate::sync::lock;

/// The version being replaced, kept while the new one proves itself.
pub struct Probation {
    spec: PluginSpec,
    settings: String,
    pre: PluginPre<StoreData>,
    instance: Option<Instance>,
    version: VersionInfo,
    actions: Arc<crate::actions::PluginActions>,
    /// Notifications the new version handled so far, and how many of them failed.
    seen: u32,
    failed: u32,
    /// Those notifications (with their informer), to give to the previous version on a rollback.
    buffer: Vec<(String, crate::informer::Delivery)>,
}

/// What a reload did.
#[derive(Clone, Debug)]
pub struct ReloadReport {
    /// Load timings of the new version.
    pub load: LoadReport,
    /// Generation now running.
    pub generation: u64,
    /// Whether state was handed over with snapshot/restore.
    pub state_handed_over: bool,
    /// When the new version was swapped in.
    pub swapped_at: Instant,
    /// Whether the new version asked for (or was configured with) a replay of the cache.
    pub replay: bool,
}

/// Compiles and checks `spec` off the delivery path (nothing running is touched), then swaps it
/// in between two batches. An error leaves the running version as it was.
pub fn reload(
    runtime: &Arc<Mutex<PluginRuntime>>,
    spec: PluginSpec,
) -> Result<ReloadReport, PluginError> {
    let (engine, grants, status, current) = {
        let rt = lock(runtime);
        (
            rt.engine.clone(),
            rt.grants.clone(),
            rt.status.clone(),
            rt.spec.informers.clone(),
        )
    };
    let plugin = spec.name.clone();
    let fail = |e: PluginError| {
        PluginCounters::add(&status.counters.reload_failures, 1);
        let msg = format!("reload refused, previous version kept: {e}");
        tracing::error!(plugin = %plugin, error = %e, "reload refused; the running version keeps running");
        status.set_last_error(msg.clone());
        status.logs.push(format!("host: {msg}"));
        e
    };
    if spec.informers != current {
        return Err(fail(PluginError::Failed {
            plugin: spec.name.clone(),
            phase: "reload",
            detail: "its informers changed; remove and add the plugin instead".into(),
        }));
    }
    let bytes = std::fs::read(&spec.module).map_err(|source| {
        fail(PluginError::Read {
            plugin: spec.name.clone(),
            path: spec.module.clone(),
            source,
        })
    })?;
    let checked =
        check_bytes(&engine, &spec, &bytes, grants, Some(status.clone())).map_err(fail)?;
    let mut rt = lock(runtime);
    let actions = checked.actions.clone();
    rt.install(
        spec,
        checked.pre,
        checked.instance,
        checked.info,
        checked.report,
        actions,
    )
    .map_err(fail)
}

impl PluginRuntime {
    /// Swaps a checked version in (called with the runtime locked, so between two batches).
    fn install(
        &mut self,
        spec: PluginSpec,
        pre: PluginPre<StoreData>,
        mut instance: Instance,
        info: super::bindings::PluginInfo,
        load: LoadReport,
        actions: Arc<crate::actions::PluginActions>,
    ) -> Result<ReloadReport, PluginError> {
        // Hand the state over: what the old instance knows up to the last handled batch.
        let snapshot = match self.instance.as_mut() {
            Some(old) => old.snapshot().unwrap_or_else(|e| {
                tracing::warn!(plugin = %self.name, error = %e, "snapshot failed; the new version starts without state");
                None
            }),
            None => None,
        };
        let handed = snapshot.is_some();
        if let Some(state) = snapshot {
            let refused = |detail: String| PluginError::Failed {
                plugin: spec.name.clone(),
                phase: "restore",
                detail,
            };
            match instance.restore(&state) {
                Ok(Ok(())) => {}
                Ok(Err(msg)) => {
                    return Err(refused(format!(
                        "the new version refused the old state: {msg}"
                    )));
                }
                Err(e) => return Err(refused(e.to_string())),
            }
        }
        instance.started();
        // A reload during probation settles the probation first: the version being replaced
        // becomes the one to fall back to.
        self.probation = None;
        let generation = self.version.generation + 1;
        let new_version = VersionInfo {
            info,
            hash: load.hash.clone(),
            generation,
            abi: pre.abi(),
        };
        let settings = spec.settings.to_string();
        let old = Probation {
            spec: std::mem::replace(&mut self.spec, spec),
            settings: std::mem::replace(&mut self.settings, settings),
            pre: std::mem::replace(&mut self.pre, pre),
            instance: self.instance.replace(instance),
            version: std::mem::replace(&mut self.version, new_version),
            actions: std::mem::replace(&mut self.actions, actions),
            seen: 0,
            failed: 0,
            buffer: Vec::new(),
        };
        if self.spec.reload_probation > 0 {
            self.probation = Some(old);
        }
        self.consecutive_failures = 0;
        let c = &self.status.counters;
        PluginCounters::add(&c.reloads, 1);
        self.version.publish(&self.spec, &self.status);
        self.status.set_state(super::status::PluginState::Running);
        self.status.logs.push(format!(
            "host: reloaded: generation {generation}, {} {}",
            self.version.info.name, self.version.info.version
        ));
        tracing::info!(plugin = %self.name, generation, version = %self.version.info.version, state_handed_over = handed, source = ?load.source, "plugin reloaded");
        let replay = self.spec.replay_on_reload || self.version.info.replay_on_reload;
        Ok(ReloadReport {
            load,
            generation,
            state_handed_over: handed,
            swapped_at: Instant::now(),
            replay,
        })
    }

    /// Counts a batch handled on probation; commits or rolls back when the verdict is in.
    pub(super) fn after_probation_batch(
        &mut self,
        informer: &str,
        batch: &[crate::informer::Delivery],
        failed: u64,
    ) {
        let (limit, threshold) = (self.spec.reload_probation, self.spec.rollback_threshold);
        let Some(p) = self.probation.as_mut() else {
            return;
        };
        p.seen += batch.len() as u32;
        p.failed += failed as u32;
        p.buffer
            .extend(batch.iter().map(|d| (informer.to_owned(), d.clone())));
        let too_many = f64::from(p.failed) > threshold * f64::from(limit);
        if too_many {
            let reason = format!("{} of its first {} notifications failed", p.failed, p.seen);
            self.rollback(reason);
        } else if p.seen >= limit {
            let failed = p.failed;
            self.probation = None;
            tracing::info!(plugin = %self.name, generation = self.version.generation, failed, "new version passed its probation");
        }
    }

    fn rollback(&mut self, reason: String) {
        let Some(p) = self.probation.take() else {
            return;
        };
        let from = self.version.generation;
        self.spec = p.spec;
        self.settings = p.settings;
        self.pre = p.pre;
        self.instance = p.instance;
        self.actions = p.actions;
        let generation = from + 1;
        self.version = VersionInfo {
            generation,
            ..p.version
        };
        self.consecutive_failures = 0;
        self.status.set_state(super::status::PluginState::Running);
        PluginCounters::add(&self.status.counters.rollbacks, 1);
        self.version.publish(&self.spec, &self.status);
        let msg = format!(
            "rolled back to the previous version (now generation {generation}): the new one failed: {reason}"
        );
        tracing::error!(plugin = %self.name, %reason, "new version rolled back to the previous one");
        self.status.set_last_error(msg.clone());
        self.status.logs.push(format!("host: {msg}"));
        // The previous version missed what the new one was given: deliver it again.
        for (informer, d) in p.buffer {
            self.deliver(&informer, std::slice::from_ref(&d));
        }
    }
}
