//! `wisp:plugin/host@0.2.0` (and its `types`): logs, cache reads limited to the granted
//! informers, counters and gauges.

use super::grants::{MAX_ECHO, cache_key};
use crate::informer::indexer::NAMESPACE_INDEX;
use crate::plugin::bindings::wisp::plugin::{host, types};
use crate::plugin::bindings::{CacheError, Level};
use crate::plugin::sandbox::state::StoreData;
use crate::plugin::spec::LogLevel;
use crate::plugin::status::{PluginCounters, clip};
use wisp_kinds::selector::LabelSelector;

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

/// Longest metric name or label name a plugin may use (bytes).
pub const MAX_METRIC_NAME: usize = 128;
/// Longest label value a plugin may use (bytes).
pub const MAX_LABEL_VALUE: usize = 1024;
/// Most labels on one series.
pub const MAX_LABELS: usize = 16;
/// A valid Prometheus metric or label name, within [`MAX_METRIC_NAME`].
fn valid_name(s: &str) -> bool {
    if s.len() > MAX_METRIC_NAME {
        return false;
    }
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

impl StoreData {
    pub(super) fn series(
        &self,
        name: &str,
        labels: Vec<(String, String)>,
    ) -> Option<(String, Vec<(String, String)>)> {
        let bad = if !valid_name(name) {
            Some("a metric name must match [a-zA-Z_:][a-zA-Z0-9_:]* and be at most 128 bytes")
        } else if labels.len() > MAX_LABELS {
            Some("a series has at most 16 labels")
        } else if labels.iter().any(|(k, _)| !valid_name(k)) {
            Some("a label name must match [a-zA-Z_][a-zA-Z0-9_]* and be at most 128 bytes")
        } else if labels.iter().any(|(_, v)| v.len() > MAX_LABEL_VALUE) {
            Some("a label value is at most 1024 bytes")
        } else {
            None
        };
        if let Some(why) = bad {
            PluginCounters::add(&self.api.status.counters.series_refused, 1);
            let name = clip(name, MAX_ECHO);
            self.host_says(LogLevel::Debug, &format!("metric {name:?} refused: {why}"));
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
        let s = &self.api.status;
        s.logs.emit(
            &self.api.plugin,
            l,
            "log",
            &message,
            &s.counters.log_lines_dropped,
        );
    }

    fn log_enabled(&mut self, l: Level) -> bool {
        level(l) >= self.api.log_level
    }

    fn cache_get(
        &mut self,
        informer: String,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<Vec<u8>>, CacheError> {
        Ok(self
            .cache_object(&informer, namespace.as_deref(), &name)?
            .map(|o| o.wire().to_vec()))
    }

    fn cache_list(
        &mut self,
        informer: String,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<u8>, CacheError> {
        let objs =
            self.cache_objects(&informer, namespace.as_deref(), label_selector.as_deref())?;
        Ok(crate::plugin::batch::encode_list(objs.iter().map(|o| &**o)))
    }

    fn cache_by_index(
        &mut self,
        informer: String,
        index: String,
        value: String,
    ) -> Result<Vec<u8>, CacheError> {
        let objs = self.cache_indexed(&informer, &index, &value)?;
        Ok(crate::plugin::batch::encode_list(objs.iter().map(|o| &**o)))
    }

    fn counter_add(&mut self, name: String, labels: Vec<(String, String)>, value: u64) {
        self.counter(name, labels, value);
    }

    fn gauge_set(&mut self, name: String, labels: Vec<(String, String)>, value: f64) {
        self.gauge(name, labels, value);
    }
}

/// The cache reads and metrics of both ABIs.
impl StoreData {
    pub(super) fn cache_object(
        &self,
        informer: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<std::sync::Arc<crate::informer::Object>>, CacheError> {
        let cache = self.granted(informer)?;
        Ok(cache_key(namespace, name).and_then(|k| cache.get_by_key(&k)))
    }

    pub(super) fn cache_objects(
        &self,
        informer: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<std::sync::Arc<crate::informer::Object>>, CacheError> {
        let cache = self.granted(informer)?;
        let selector = match label_selector {
            Some(s) => {
                LabelSelector::parse(s).map_err(|e| CacheError::BadSelector(e.to_string()))?
            }
            None => LabelSelector::default(),
        };
        let objs = match namespace {
            Some(ns) => cache.by_index(NAMESPACE_INDEX, ns).unwrap_or_default(),
            None => cache.list(),
        };
        let objs = objs
            .into_iter()
            .filter(|o| {
                let m = o.meta();
                selector.matches_by(|k| m.label(k))
            })
            .take(MAX_QUERY_RESULTS)
            .collect();
        Ok(self.what_fits(objs))
    }

    /// The first of `objs` that fit the plugin's memory budget together: an answer it could
    /// not hold is not built in host memory either (a cache of large objects would otherwise
    /// cost the host gigabytes per query).
    fn what_fits(
        &self,
        mut objs: Vec<std::sync::Arc<crate::informer::Object>>,
    ) -> Vec<std::sync::Arc<crate::informer::Object>> {
        let budget = self.limiter.cap();
        let mut bytes = 0usize;
        if let Some(over) = objs.iter().position(|o| {
            bytes = bytes.saturating_add(o.wire().len() + 8);
            bytes > budget
        }) {
            objs.truncate(over);
        }
        objs
    }

    pub(super) fn cache_indexed(
        &self,
        informer: &str,
        index: &str,
        value: &str,
    ) -> Result<Vec<std::sync::Arc<crate::informer::Object>>, CacheError> {
        let cache = self.granted(informer)?;
        let mut objs = cache
            .by_index(index, value)
            .map_err(|_| CacheError::UnknownIndex(index.to_owned()))?;
        objs.truncate(MAX_QUERY_RESULTS);
        Ok(self.what_fits(objs))
    }

    pub(super) fn counter(&self, name: String, labels: Vec<(String, String)>, value: u64) {
        if let Some(key) = self.series(&name, labels)
            && !self.api.status.counter_add(key, value)
        {
            self.host_says(
                LogLevel::Debug,
                "metric series bound reached; series dropped",
            );
        }
    }

    pub(super) fn gauge(&self, name: String, labels: Vec<(String, String)>, value: f64) {
        if let Some(key) = self.series(&name, labels)
            && !self.api.status.gauge_set(key, value)
        {
            self.host_says(
                LogLevel::Debug,
                "metric series bound reached; series dropped",
            );
        }
    }
}
