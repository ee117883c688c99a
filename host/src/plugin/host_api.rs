//! The `host` interface as plugins see it: logging, cache reads limited to granted informers,
//! counters and gauges.

use super::bindings::wisp::plugin::{host, types};
use super::bindings::{CacheError, Level, ObjectMetaResult, ObjectResult, OwnerRefResult};
use super::spec::LogLevel;
use super::state::StoreData;
use super::status::PluginCounters;
use crate::informer::key::key_for;
use crate::informer::selector::LabelSelector;
use crate::informer::{Cache, indexer::NAMESPACE_INDEX};

/// Most objects one cache query returns to a plugin (more would not fit its memory anyway).
pub const MAX_QUERY_RESULTS: usize = 10_000;

fn level(l: Level) -> LogLevel {
    match l {
        Level::Trace => LogLevel::Trace,
        Level::Debug => LogLevel::Debug,
        Level::Info => LogLevel::Info,
        Level::Warn => LogLevel::Warn,
        Level::Error => LogLevel::Error,
    }
}

fn level_name(l: LogLevel) -> &'static str {
    match l {
        LogLevel::Trace => "trace",
        LogLevel::Debug => "debug",
        LogLevel::Info => "info",
        LogLevel::Warn => "warn",
        LogLevel::Error => "error",
    }
}

/// Converts a cached object to its owned WIT form (for cache reads).
pub fn to_wit(o: &crate::informer::Object) -> ObjectResult {
    let m = o.meta();
    ObjectResult {
        meta: ObjectMetaResult {
            api_version: m.api_version.clone(),
            kind: m.kind.clone(),
            namespace: m.namespace.clone(),
            name: m.name.clone(),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            labels: m.labels.clone(),
            annotations: m.annotations.clone(),
            owner_references: m
                .owner_references
                .iter()
                .map(|r| OwnerRefResult {
                    api_version: r.api_version.clone(),
                    kind: r.kind.clone(),
                    name: r.name.clone(),
                    uid: r.uid.clone(),
                    controller: r.controller,
                })
                .collect(),
        },
        json: o.json().to_owned(),
    }
}

/// A valid Prometheus metric or label name.
fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

impl StoreData {
    fn granted(&self, informer: &str) -> Result<&Cache, CacheError> {
        self.api.grants.get(informer).ok_or_else(|| {
            tracing::warn!(target: "wisp::plugin", plugin = %self.api.plugin, informer, "cache read of an informer not granted to the plugin refused");
            self.api.status.logs.push(format!("warn: cache read of informer {informer:?} refused: not granted"));
            PluginCounters::add(&self.api.status.counters.denied, 1);
            CacheError::NotGranted(informer.to_owned())
        })
    }

    fn series(
        &self,
        name: &str,
        labels: Vec<(String, String)>,
    ) -> Option<(String, Vec<(String, String)>)> {
        if !valid_name(name) || labels.iter().any(|(k, _)| !valid_name(k)) {
            tracing::warn!(target: "wisp::plugin", plugin = %self.api.plugin, metric = name, "invalid metric or label name ignored");
            return None;
        }
        let mut labels = labels;
        labels.sort();
        Some((name.to_owned(), labels))
    }
}

impl types::Host for StoreData {}

impl host::Host for StoreData {
    fn log(&mut self, l: Level, message: String) {
        let l = level(l);
        if l < self.api.log_level {
            return;
        }
        let plugin = &*self.api.plugin;
        match l {
            LogLevel::Trace => tracing::trace!(target: "wisp::plugin", plugin, "{message}"),
            LogLevel::Debug => tracing::debug!(target: "wisp::plugin", plugin, "{message}"),
            LogLevel::Info => tracing::info!(target: "wisp::plugin", plugin, "{message}"),
            LogLevel::Warn => tracing::warn!(target: "wisp::plugin", plugin, "{message}"),
            LogLevel::Error => tracing::error!(target: "wisp::plugin", plugin, "{message}"),
        }
        self.api
            .status
            .logs
            .push(format!("{}: {message}", level_name(l)));
    }

    fn log_enabled(&mut self, l: Level) -> bool {
        level(l) >= self.api.log_level
    }

    fn cache_get(
        &mut self,
        informer: String,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<ObjectResult>, CacheError> {
        let cache = self.granted(&informer)?;
        Ok(cache
            .get_by_key(&key_for(namespace.as_deref(), &name))
            .map(|o| to_wit(&o)))
    }

    fn cache_list(
        &mut self,
        informer: String,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<ObjectResult>, CacheError> {
        let cache = self.granted(&informer)?;
        let selector = match label_selector.as_deref() {
            Some(s) => {
                LabelSelector::parse(s).map_err(|e| CacheError::BadSelector(e.to_string()))?
            }
            None => LabelSelector::default(),
        };
        let objs = match &namespace {
            Some(ns) => cache.by_index(NAMESPACE_INDEX, ns).unwrap_or_default(),
            None => cache.list(),
        };
        Ok(objs
            .iter()
            .filter(|o| selector.matches(&o.meta().labels))
            .take(MAX_QUERY_RESULTS)
            .map(|o| to_wit(o))
            .collect())
    }

    fn cache_by_index(
        &mut self,
        informer: String,
        index: String,
        value: String,
    ) -> Result<Vec<ObjectResult>, CacheError> {
        let cache = self.granted(&informer)?;
        let objs = cache
            .by_index(&index, &value)
            .map_err(|_| CacheError::UnknownIndex(index.clone()))?;
        Ok(objs
            .iter()
            .take(MAX_QUERY_RESULTS)
            .map(|o| to_wit(o))
            .collect())
    }

    fn counter_add(&mut self, name: String, labels: Vec<(String, String)>, value: u64) {
        if let Some(key) = self.series(&name, labels)
            && !self.api.status.counter_add(key, value)
        {
            tracing::debug!(target: "wisp::plugin", plugin = %self.api.plugin, "metric series limit reached; dropped");
        }
    }

    fn gauge_set(&mut self, name: String, labels: Vec<(String, String)>, value: f64) {
        if let Some(key) = self.series(&name, labels)
            && !self.api.status.gauge_set(key, value)
        {
            tracing::debug!(target: "wisp::plugin", plugin = %self.api.plugin, "metric series limit reached; dropped");
        }
    }
}
