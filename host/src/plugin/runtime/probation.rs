//! Probation after a hot reload: the previous version (and its live instance) is kept for the
//! new version's first notifications; if more than the threshold of them fail, it is swapped
//! back and those notifications are delivered to it again, so it misses nothing.

use super::state::{PluginRuntime, VersionInfo};
use crate::plugin::status::PluginCounters;

impl PluginRuntime {
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
        self.status.rolled_back();
        PluginCounters::add(&self.status.counters.rollbacks, 1);
        self.version.publish(&self.spec, &self.status);
        let msg = format!(
            "rolled back to the previous version (now generation {generation}): the new one failed: {reason}"
        );
        tracing::error!(plugin = %self.name, %reason, "new version rolled back to the previous one");
        self.status.set_last_error(msg.clone());
        self.status.logs.push(format!("host: {msg}"));
        // The previous version missed what the new one was given: deliver it again.
        // One at a time: a call with one notification is never cut into re-deliveries.
        for (informer, d) in p.buffer {
            self.deliver(&informer, std::slice::from_ref(&d));
        }
    }
}
