//! What a config makes of its plugins: their specs, with defaults and paths resolved.

use super::*;

impl Config {
    /// The plugin specs, with paths resolved.
    pub fn plugin_specs(&self) -> Vec<PluginSpec> {
        self.plugins
            .iter()
            .map(|p| {
                let informers: Vec<&str> = p.informers.iter().map(String::as_str).collect();
                let pulled = p.module.to_str().and_then(|m| self.oci_pulled.get(m));
                let module = match pulled {
                    Some(x) => x.path.clone(),
                    None => self.resolve(&p.module),
                };
                let mut s = PluginSpec::new(p.name.clone(), module, &informers);
                s.origin = pulled.map(crate::oci::Pulled::origin);
                s.settings = p.settings.clone().unwrap_or_else(|| serde_json::json!({}));
                s.resync = p.resync.0;
                s.relist_resyncs = p.relist_resyncs;
                let d = Limits::default();
                s.limits = Limits {
                    memory: p.limits.memory.map_or(d.memory, |b| b.0),
                    deadline: p.limits.deadline.map_or(d.deadline, |x| x.0),
                    deadline_per_notification: p
                        .limits
                        .deadline_per_notification
                        .map_or(d.deadline_per_notification, |x| x.0),
                    startup_deadline: p
                        .limits
                        .startup_deadline
                        .map_or(d.startup_deadline, |x| x.0),
                    fuel: p.limits.fuel,
                };
                let def = OnFailure::default();
                s.on_failure = OnFailure {
                    policy: match p.on_failure.policy {
                        PolicyName::Skip => FailurePolicy::Skip,
                        PolicyName::Retry => FailurePolicy::Retry {
                            retries: p.on_failure.retries.unwrap_or(3),
                            backoff: p
                                .on_failure
                                .backoff
                                .map_or(Duration::from_millis(100), |b| b.0),
                        },
                    },
                    quarantine_after: p
                        .on_failure
                        .quarantine_after
                        .unwrap_or(def.quarantine_after),
                };
                s.log_level = p.log_level;
                s.batch_max = p.batch.unwrap_or(DEFAULT_BATCH_MAX);
                s.queue = QueueBound::bounded(
                    p.queue.max.unwrap_or(DEFAULT_QUEUE_MAX),
                    p.queue.overflow.unwrap_or(DEFAULT_OVERFLOW),
                )
                .with_max_bytes(
                    p.queue.max_bytes.as_ref().map_or(DEFAULT_QUEUE_BYTES, |b| {
                        usize::try_from(b.0).unwrap_or(usize::MAX)
                    }),
                );
                s.reload_probation = p.reload.probation.unwrap_or(s.reload_probation);
                s.rollback_threshold = p.reload.rollback_threshold.unwrap_or(s.rollback_threshold);
                s.replay_on_reload = p.reload.replay_cache;
                s.verdict_events = p.verdicts.events;
                let d = ActionSpec::default();
                s.actions = ActionSpec {
                    grants: p.actions.grants.clone(),
                    per_second: p
                        .actions
                        .rate_limit
                        .as_ref()
                        .map_or(d.per_second, |r| r.per_second),
                    burst: p.actions.rate_limit.as_ref().map_or(d.burst, |r| r.burst),
                    dry_run: p.actions.dry_run,
                    retries: p.actions.retries.unwrap_or(d.retries),
                    backoff: p.actions.backoff.map_or(d.backoff, |b| b.0),
                    queue: p.actions.queue.unwrap_or(d.queue),
                };
                s
            })
            .collect()
    }
}
