//! Hot reload: a new version is compiled and checked off the delivery path, then swapped in
//! between two turns of the plugin under the runtime's lock. The listeners' queues are
//! untouched, so notifications queued meanwhile go to the new version and none is lost or
//! delivered twice; so does what is left of a batch in hand (retries waiting for their backoff,
//! items of a cut batch going again one per turn).
//!
//! - State hand-off: the old instance's `snapshot` is given to the new one's `restore`.
//! - The version replaced goes on probation ([`super::probation`]).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::loader::{LoadReport, check_with};
use super::state::{PluginRuntime, VersionInfo};
use crate::plugin::bindings::PluginPre;
use crate::plugin::error::PluginError;
use crate::plugin::sandbox::instance::Instance;
use crate::plugin::sandbox::state::StoreData;
use crate::plugin::spec::PluginSpec;
use crate::plugin::status::PluginCounters;
use crate::sync::lock;

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
    let checked = check_with(&engine, &spec, grants, Some(status.clone())).map_err(fail)?;
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
    /// Swaps a checked version in (called with the runtime locked, so between two turns).
    fn install(
        &mut self,
        spec: PluginSpec,
        pre: PluginPre<StoreData>,
        mut instance: Instance,
        info: crate::plugin::bindings::PluginInfo,
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
            tier: self.engine.tier(&pre),
        };
        let settings = spec.settings.to_string();
        let old = super::state::Probation {
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
        self.status.reloaded();
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
}
