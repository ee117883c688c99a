//! Plugins of custom resources (`WispPlugin`, `ClusterWispPlugin`), started, changed and
//! stopped through the reload path of the config file's plugins: a new or restarted version is
//! checked (compiled, `init` with its settings) before anything running is touched, a changed
//! one is reloaded in place (state handed over, on probation, rolled back if it fails its first
//! events), and a refused one leaves the running version as it was.

use std::sync::Arc;

use super::{ReloadError, Reloader};
use crate::plugin::{PluginManager, PluginSpec};
use crate::sync::lock;

impl Reloader {
    /// The manager the plugins start through (custom resources register their informers
    /// with it).
    pub fn manager(&self) -> &PluginManager {
        &self.manager
    }

    /// The config in force (the last one applied).
    pub fn config(&self) -> crate::config::Config {
        lock(&self.config).clone()
    }

    /// The specs of the config file's plugins, as they run (`oci://` modules as pulled).
    pub fn config_specs(&self) -> Vec<PluginSpec> {
        let cfg = lock(&self.config);
        let pulled = lock(&self.pulled);
        cfg.plugin_specs(&pulled)
    }

    /// The specs the custom resources' plugins run with, by name.
    pub fn custom_specs(&self) -> std::collections::BTreeMap<String, PluginSpec> {
        lock(&self.custom).clone()
    }

    /// Whether the config file defines a plugin named `name`.
    pub fn is_config_plugin(&self, name: &str) -> bool {
        lock(&self.config).plugins.iter().any(|p| p.name == name)
    }

    /// The running plugin named `name`, if any.
    pub fn running_plugin(&self, name: &str) -> Option<Arc<crate::plugin::PluginHandle>> {
        self.handle(name)
    }

    /// The spec a custom resource's plugin runs with, if it runs.
    pub fn custom_spec(&self, name: &str) -> Option<PluginSpec> {
        lock(&self.custom).get(name).cloned()
    }

    /// Starts a custom resource's plugin, or changes the running one to `spec`: in place when
    /// its informers, resync and relistResyncs are those it runs with, else checked, then
    /// swapped for the running one. Refused (a name the config file uses, a module or settings
    /// the check refuses): what runs is unchanged.
    pub fn apply_custom(&self, spec: PluginSpec) -> Result<String, ReloadError> {
        let name = spec.name.clone();
        if self.is_config_plugin(&name) {
            return Err(ReloadError::Refused(format!(
                "the config file defines a plugin named {name:?}; rename one of them"
            )));
        }
        let slot = self.slot(&name);
        let _one = lock(&slot.running);
        let refused = |e: &dyn std::fmt::Display| ReloadError::Refused(e.to_string());
        let old = self.custom_spec(&name);
        let running = self.handle(&name);
        if let (Some(old), Some(h)) = (&old, &running)
            && !restart_needed(old, &spec)
        {
            let r = h.reload(spec.clone()).map_err(|e| refused(&e))?;
            lock(&self.custom).insert(name.clone(), spec);
            return Ok(format!(
                "plugin {name:?} changed: generation {}",
                r.generation
            ));
        }
        let checked = self.manager.check(&spec).map_err(|e| refused(&e))?;
        let mut list = self.plugins.lock();
        if let Some(h) = &running {
            h.stop();
            list.retain(|p| p.name() != name);
        }
        let h = self.manager.attach(checked).map_err(|e| refused(&e))?;
        list.push(Arc::new(h));
        lock(&self.custom).insert(name.clone(), spec);
        Ok(match running {
            Some(_) => format!("plugin {name:?} restarted (its informers changed)"),
            None => format!("plugin {name:?} started"),
        })
    }

    /// Stops a custom resource's plugin (its queues and verdicts dropped); whether it ran.
    pub fn remove_custom(&self, name: &str) -> bool {
        let slot = self.slot(name);
        let _one = lock(&slot.running);
        let known = lock(&self.custom).remove(name).is_some();
        let mut list = self.plugins.lock();
        let before = list.len();
        list.retain(|h| {
            let stop = h.name() == name;
            if stop {
                h.stop();
            }
            !stop
        });
        known || list.len() != before
    }
}

/// Whether going from `old` to `new` needs the plugin's listeners registered again.
fn restart_needed(old: &PluginSpec, new: &PluginSpec) -> bool {
    old.informer_scope != new.informer_scope
        || old.informers != new.informers
        || old.resync != new.resync
        || old.relist_resyncs != new.relist_resyncs
}
