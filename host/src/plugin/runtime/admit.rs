//! Admission calls of a running plugin, on an instance of their own: apart from the instance its
//! notifications use, so an admission call never waits behind a batch and never changes the state
//! its notifications build. The instance is made by the first call (of the running version) and
//! replaced after a failed one, as the notifications' instance is. Verdicts and actions are
//! refused while it runs (see `Instance::admit`).

use std::time::Instant;

use super::state::PluginRuntime;
use crate::plugin::bindings::v03_admission::{Request, Response};
use crate::plugin::sandbox::instance::CallError;
use crate::plugin::status::PluginCounters;

/// Why a plugin gave no answer to an admission request: its `failurePolicy` answers instead.
#[derive(Debug)]
#[non_exhaustive]
pub enum AdmitFailure {
    /// Its component does not export `wisp:plugin/admission` (ABI 0.1 or 0.2, or 0.3 without
    /// it).
    NotAdmitting,
    /// No instance could be made for the call.
    NoInstance(String),
    /// The call failed: trap, deadline, memory.
    Call(CallError),
    /// The plugin answered with an error of its own.
    Plugin(String),
}

impl std::fmt::Display for AdmitFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdmitFailure::NotAdmitting => f.write_str(
                "the plugin takes no admission requests (its component does not export \
                 wisp:plugin/admission@0.3.0: build it with an SDK of ABI 0.3)",
            ),
            AdmitFailure::NoInstance(m) => write!(f, "cannot make an instance: {m}"),
            AdmitFailure::Call(e) => write!(f, "admit failed: {e}"),
            AdmitFailure::Plugin(m) => write!(f, "the plugin's error: {m}"),
        }
    }
}

impl std::error::Error for AdmitFailure {}

impl PluginRuntime {
    /// Whether the running version takes admission requests.
    pub fn admits(&self) -> bool {
        self.pre.admits()
    }

    /// The plugin's answer to `request`, from its admission instance.
    pub fn admit(&mut self, request: &Request) -> Result<Response, AdmitFailure> {
        if !self.admits() {
            return Err(AdmitFailure::NotAdmitting);
        }
        let generation = self.version.generation;
        if self.admitter.as_ref().is_none_or(|(g, _)| *g != generation) {
            let inst = self.new_instance().map_err(AdmitFailure::NoInstance)?;
            self.admitter = Some((generation, inst));
        }
        let Some((_, inst)) = self.admitter.as_mut() else {
            return Err(AdmitFailure::NoInstance("no instance".into()));
        };
        let logs_before = self.status.logs.total();
        let start = Instant::now();
        let r = inst.admit(request);
        let c = &self.status.counters;
        PluginCounters::add(&c.admission_calls, 1);
        c.admission_latency.observe(start.elapsed());
        match r {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(m)) => {
                PluginCounters::add(&c.admission_errors, 1);
                self.status.set_last_error(format!("admit: {m}"));
                Err(AdmitFailure::Plugin(m))
            }
            Err(e) => {
                PluginCounters::add(&c.admission_errors, 1);
                // The store is unusable after a trap: the next call gets a fresh instance.
                self.admitter = None;
                self.count_call_error(&e, logs_before);
                Err(AdmitFailure::Call(e))
            }
        }
    }
}
