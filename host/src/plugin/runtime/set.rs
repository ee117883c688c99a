//! The running plugins of a host, shared by the host, its reloader and its admin server: plugins
//! come and go while they look.

use std::sync::{Arc, RwLock, RwLockWriteGuard};

use super::manager::PluginHandle;
use crate::sync::{read, write};

/// The running plugins, in start order. Cloning shares the set.
#[derive(Clone, Default)]
pub struct PluginSet(Arc<RwLock<Vec<Arc<PluginHandle>>>>);

impl PluginSet {
    /// A set of `plugins`.
    pub fn new(plugins: Vec<Arc<PluginHandle>>) -> Self {
        Self(Arc::new(RwLock::new(plugins)))
    }

    /// The plugins as they are now (the lock is held only to clone the list).
    pub fn list(&self) -> Vec<Arc<PluginHandle>> {
        read(&self.0).clone()
    }

    /// The plugin named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<PluginHandle>> {
        read(&self.0).iter().find(|p| p.name() == name).cloned()
    }

    /// How many run.
    pub fn len(&self) -> usize {
        read(&self.0).len()
    }

    /// Whether none runs.
    pub fn is_empty(&self) -> bool {
        read(&self.0).is_empty()
    }

    /// Adds a started plugin.
    pub fn push(&self, plugin: Arc<PluginHandle>) {
        write(&self.0).push(plugin);
    }

    /// The list, locked for a change made of several steps (the reloader's stop, start and
    /// reload of a config change).
    pub(crate) fn lock(&self) -> RwLockWriteGuard<'_, Vec<Arc<PluginHandle>>> {
        write(&self.0)
    }
}
