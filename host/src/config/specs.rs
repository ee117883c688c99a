//! What a config makes of its plugins: their specs, with defaults and paths resolved.

use super::*;

impl Config {
    /// `engine.maxModuleSize` in force, bytes: as set, else the default or, when larger,
    /// `oci.maxModuleSize` (a module pulled under that bound is read under this one).
    pub fn max_module_size(&self) -> u64 {
        use crate::plugin::module_file::DEFAULT_MAX_MODULE_SIZE;
        self.engine.max_module_size.map_or_else(
            || {
                let pulled = self.oci.max_module_size.map_or(0, |b| b.0);
                DEFAULT_MAX_MODULE_SIZE.max(pulled)
            },
            |b| b.0,
        )
    }

    /// The plugin specs, with paths resolved; an `oci://` module is the file `pulled` has
    /// for it (see `crate::reloader::modules`).
    pub fn plugin_specs(&self, pulled: &crate::oci::PulledModules) -> Vec<PluginSpec> {
        self.plugins
            .iter()
            .map(|p| {
                let informers: Vec<&str> = p.informers.iter().map(String::as_str).collect();
                let pulled = p.module.to_str().and_then(|m| pulled.get(m));
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
                            retries: p.on_failure.retries.unwrap_or(DEFAULT_RETRIES),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A config of one plugin of `module` (in a directory with `p.wasm`, 32 bytes), with
    /// `extra` added.
    fn config(module: &str, extra: &str) -> Result<Config, ConfigError> {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("p.wasm"),
            [b"\0asm".as_slice(), &[0; 28]].concat(),
        )
        .unwrap();
        let text = format!(
            "source: kube\ninformers: [{{name: pods, apiVersion: v1, kind: Pod}}]\n\
             plugins: [{{name: p, module: {module}, informers: [pods]}}]\n{extra}"
        );
        Config::parse(&text, "wisp.yaml", d.path())
    }

    #[test]
    fn the_module_size_cap_follows_a_larger_oci_one_and_refuses_a_module_over_it() {
        let cap = |extra: &str| config("p.wasm", extra).unwrap().max_module_size();
        assert_eq!(cap(""), 64 << 20);
        assert_eq!(cap("oci: { maxModuleSize: 100Mi }\n"), 100 << 20);
        assert_eq!(cap("oci: { maxModuleSize: 1Mi }\n"), 64 << 20);
        assert_eq!(cap("engine: { maxModuleSize: 1Mi }\n"), 1 << 20);
        let e = config("p.wasm", "engine: { maxModuleSize: 16 }\n").unwrap_err();
        assert_eq!(e.path, "plugins[0].module");
        assert!(
            e.problem
                .ends_with("p.wasm is 32 bytes, over engine.maxModuleSize (16 bytes)"),
            "{e}"
        );
        let e = config("p.wasm", "engine: { maxModuleSize: 4 }\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "wisp.yaml: engine.maxModuleSize: must be at least 8 bytes (a WebAssembly header)"
        );
        let both = "engine: { maxModuleSize: 1Mi }\noci: { maxModuleSize: 2Mi }\n";
        let e = config("p.wasm", both).unwrap_err();
        assert_eq!(e.path, "engine.maxModuleSize");
        assert!(e.problem.contains("less than oci.maxModuleSize"), "{e}");
    }

    #[test]
    fn a_module_that_is_not_a_regular_file_is_refused_naming_what_it_is() {
        let e = config("/dev/zero", "").unwrap_err();
        assert_eq!(
            e.to_string(),
            "wisp.yaml: plugins[0].module: /dev/zero is a character device, not a regular file \
             (only regular files are read)"
        );
    }
}
