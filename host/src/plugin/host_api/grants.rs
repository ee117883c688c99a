//! What the interfaces share: a plugin's granted caches (a read of another informer is refused,
//! logged and counted), the cache key of a name, and the host's lines in the plugin's log.

use crate::informer::Cache;
use crate::informer::key::key_for;
use crate::plugin::bindings::CacheError;
use crate::plugin::sandbox::state::StoreData;
use crate::plugin::spec::LogLevel;
use crate::plugin::status::{PluginCounters, clip};

/// Longest informer name, index name or value echoed in a log line (informer names are config
/// names; a longer one is not a name).
pub(super) const MAX_ECHO: usize = 253;

/// The cache key of `namespace`/`name`, or `None` when a `/` in either would make it another
/// object's key (`None`, `"a/p"` is the key of `"a"`, `"p"`): Kubernetes names have no `/`.
pub(super) fn cache_key(namespace: Option<&str>, name: &str) -> Option<String> {
    (!name.contains('/') && !namespace.is_some_and(|n| n.contains('/')))
        .then(|| key_for(namespace, name))
}

impl StoreData {
    /// The cache of `informer`, when granted to the plugin (a refusal is logged and counted).
    pub(super) fn granted(&self, informer: &str) -> Result<&Cache, CacheError> {
        self.api.grants.caches.get(informer).ok_or_else(|| {
            let informer = clip(informer, MAX_ECHO);
            self.host_says(
                LogLevel::Warn,
                &format!("cache read of informer {informer:?} refused: not granted"),
            );
            PluginCounters::add(&self.api.status.counters.denied, 1);
            CacheError::NotGranted(informer.into_owned())
        })
    }

    /// A line the host logs about something the plugin did: within the plugin's log budget.
    pub(super) fn host_says(&self, level: LogLevel, text: &str) {
        let s = &self.api.status;
        s.logs.emit(
            &self.api.plugin,
            level,
            "host",
            text,
            &s.counters.log_lines_dropped,
        );
    }
}
