//! What a plugin's runtime holds ([`PluginRuntime`]): its spec, linked module, live instance,
//! failure count, version, the version on probation, and the batch in hand. Its behaviour is
//! in [`super::calls`] (calls, failure policy, retries), [`super::probation`] (rollback) and
//! [`super::reload`] (swapping a new version in).

use std::sync::Arc;
use std::time::Instant;

use crate::informer::backoff::Backoff;

use crate::informer;
use crate::plugin::bindings::{Abi, PluginInfo, PluginPre};
use crate::plugin::compile::Tier;
use crate::plugin::engine::PluginEngine;
use crate::plugin::sandbox::instance::Instance;
use crate::plugin::sandbox::state::{Grants, StoreData};
use crate::plugin::spec::PluginSpec;
use crate::plugin::status::{PluginStatus, Running};

/// The mutable heart of a plugin.
pub struct PluginRuntime {
    pub(super) name: Arc<str>,
    pub(super) spec: PluginSpec,
    pub(super) settings: String,
    pub(super) engine: Arc<PluginEngine>,
    pub(super) pre: PluginPre<StoreData>,
    pub(super) grants: Grants,
    pub(super) status: Arc<PluginStatus>,
    /// The running version's actions (its instances share the rate limit and sender).
    pub(super) actions: Arc<crate::actions::PluginActions>,
    /// `None` after a failure until the next delivery makes a fresh one.
    pub(super) instance: Option<Instance>,
    /// The instance admission calls use (made by the first, of the version whose generation it
    /// holds; `None` after a failed one).
    pub(super) admitter: Option<(u64, Instance)>,
    pub(super) consecutive_failures: u32,
    /// What the running version said about itself, and its module hash.
    pub(super) version: VersionInfo,
    /// The previous version, kept while a newly loaded one proves itself.
    pub(super) probation: Option<Probation>,
    /// While set (during a listener's turn: [`PluginRuntime::begin`], [`PluginRuntime::resume`]),
    /// a failed notification under the retry policy is queued in `retries` instead of retried on
    /// the spot.
    pub(super) defer_retries: bool,
    /// Failed notifications of the batch in hand waiting for their retry, first due first.
    pub(super) retries: std::collections::VecDeque<PendingRetry>,
    /// The batch in hand while the rest of it waits: items of a cut call to deliver again, or
    /// retries.
    pub(super) in_hand: Option<InHand>,
}

/// A notification that failed and waits for its next retry.
pub(super) struct PendingRetry {
    pub(super) informer: String,
    pub(super) delivery: informer::Delivery,
    /// Retries left.
    pub(super) left: u32,
    /// The waits before the next ones.
    pub(super) backoff: Backoff,
    pub(super) due: Instant,
    /// Why its first attempt failed (what the log and quarantine say if it never succeeds).
    pub(super) why: String,
}

/// A batch not finished in the turn that began it: its call was cut, so its items are delivered
/// again one by one, a turn each; or some of its notifications wait for their retries.
pub(super) struct InHand {
    pub(super) informer: String,
    pub(super) batch: Vec<informer::Delivery>,
    pub(super) failed_before: u64,
    /// The next item of `batch` to deliver again alone (the call with the whole batch was cut:
    /// deadline, trap, memory, fuel); `batch.len()` when none is left.
    pub(super) redeliver: usize,
}

impl InHand {
    /// Whether items of a cut batch are still to be delivered again.
    pub(super) fn redelivering(&self) -> bool {
        self.redeliver < self.batch.len()
    }

    /// The next item to deliver again alone, if any; it counts as taken.
    pub(super) fn next_redelivery(&mut self) -> Option<informer::Delivery> {
        let d = self.batch.get(self.redeliver)?.clone();
        self.redeliver += 1;
        Some(d)
    }
}

/// Identity of a version (the running one, or the one kept on probation).
#[derive(Clone, Debug)]
pub struct VersionInfo {
    /// What the plugin said about itself.
    pub info: PluginInfo,
    /// SHA-256 of its module.
    pub hash: String,
    /// 1 for the first version, +1 per reload (and per rollback).
    pub generation: u64,
    /// The version of the `wisp:plugin` world its component targets.
    pub abi: Abi,
    /// Which compiler its code comes from.
    pub tier: Tier,
}

impl VersionInfo {
    /// Publishes this version, loaded from `spec`'s module, in the plugin's status.
    pub(super) fn publish(&self, spec: &PluginSpec, status: &PluginStatus) {
        status.set_running(Running {
            plugin_name: self.info.name.clone(),
            version: self.info.version.clone(),
            module: spec.module.clone(),
            origin: spec.origin.clone(),
            hash: self.hash.clone(),
            generation: self.generation,
            abi: self.abi.version(),
            tier: self.tier,
        });
    }
}

/// The version being replaced, kept while the new one proves itself.
pub struct Probation {
    pub(super) spec: PluginSpec,
    pub(super) settings: String,
    pub(super) pre: PluginPre<StoreData>,
    pub(super) instance: Option<Instance>,
    pub(super) version: VersionInfo,
    pub(super) actions: Arc<crate::actions::PluginActions>,
    /// Notifications the new version handled so far, and how many of them failed.
    pub(super) seen: u32,
    pub(super) failed: u32,
    /// Those notifications (with their informer), to give to the previous version on a rollback.
    pub(super) buffer: Vec<(String, crate::informer::Delivery)>,
}
