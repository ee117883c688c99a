//! The imports as plugins see them: `host` (logging, cache reads limited to granted informers,
//! counters and gauges), `policy` (verdicts) and `actions` (changes through the host, within
//! grants), in ABI 0.2 here and in 0.1 in [`v01`] (which converts and calls these).

mod v01;

use super::bindings::wisp::plugin::{actions, host, policy, types};
use super::bindings::{CacheError, Level};
use super::spec::LogLevel;
use super::state::StoreData;
use super::status::{PluginCounters, clip};
use crate::actions::{
    Accepted, ActionBody, ActionError, ActionVerb, Target, apply_target, event_body, metadata_patch,
};
use crate::informer::key::key_for;
use crate::informer::selector::LabelSelector;
use crate::informer::{Cache, indexer::NAMESPACE_INDEX};
use crate::policy::{Change, Severity, Subject};

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

pub use v01::to_wit;

/// The cache key of `namespace`/`name`, or `None` when a `/` in either would make it another
/// object's key (`None`, `"a/p"` is the key of `"a"`, `"p"`): Kubernetes names have no `/`.
fn cache_key(namespace: Option<&str>, name: &str) -> Option<String> {
    (!name.contains('/') && !namespace.is_some_and(|n| n.contains('/')))
        .then(|| key_for(namespace, name))
}

/// Longest metric name or label name a plugin may use (bytes).
pub const MAX_METRIC_NAME: usize = 128;
/// Longest label value a plugin may use (bytes).
pub const MAX_LABEL_VALUE: usize = 1024;
/// Most labels on one series.
pub const MAX_LABELS: usize = 16;
/// Longest informer name, index name or value echoed in a log line (informer names are config
/// names; a longer one is not a name).
const MAX_ECHO: usize = 253;

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
    fn granted(&self, informer: &str) -> Result<&Cache, CacheError> {
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
    fn host_says(&self, level: LogLevel, text: &str) {
        let s = &self.api.status;
        s.logs.emit(
            &self.api.plugin,
            level,
            "host",
            text,
            &s.counters.log_lines_dropped,
        );
    }

    fn series(
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
        Ok(super::batch::encode_list(objs.iter().map(|o| &**o)))
    }

    fn cache_by_index(
        &mut self,
        informer: String,
        index: String,
        value: String,
    ) -> Result<Vec<u8>, CacheError> {
        let objs = self.cache_indexed(&informer, &index, &value)?;
        Ok(super::batch::encode_list(objs.iter().map(|o| &**o)))
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
    fn cache_object(
        &self,
        informer: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<std::sync::Arc<crate::informer::Object>>, CacheError> {
        let cache = self.granted(informer)?;
        Ok(cache_key(namespace, name).and_then(|k| cache.get_by_key(&k)))
    }

    fn cache_objects(
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

    fn cache_indexed(
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

    fn counter(&self, name: String, labels: Vec<(String, String)>, value: u64) {
        if let Some(key) = self.series(&name, labels)
            && !self.api.status.counter_add(key, value)
        {
            self.host_says(
                LogLevel::Debug,
                "metric series bound reached; series dropped",
            );
        }
    }

    fn gauge(&self, name: String, labels: Vec<(String, String)>, value: f64) {
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

fn severity(s: types::Severity) -> Severity {
    match s {
        types::Severity::Info => Severity::Info,
        types::Severity::Low => Severity::Low,
        types::Severity::Medium => Severity::Medium,
        types::Severity::High => Severity::High,
        types::Severity::Critical => Severity::Critical,
    }
}

fn target_of(r: types::ObjectRef) -> Target {
    Target {
        api_version: r.api_version,
        kind: r.kind,
        namespace: r.namespace,
        name: r.name,
    }
}

fn accepted(r: Result<Accepted, ActionError>) -> Result<actions::Accepted, actions::ActionError> {
    match r {
        Ok(Accepted::Queued) => Ok(actions::Accepted::Queued),
        Ok(Accepted::DryRun) => Ok(actions::Accepted::DryRun),
        Err(ActionError::NotGranted(m)) => Err(actions::ActionError::NotGranted(m)),
        Err(ActionError::RateLimited(m)) => Err(actions::ActionError::RateLimited(m)),
        Err(ActionError::Invalid(m)) => Err(actions::ActionError::Invalid(m)),
        Err(ActionError::QueueFull(m)) => Err(actions::ActionError::QueueFull(m)),
        Err(ActionError::Unavailable(m)) => Err(actions::ActionError::Unavailable(m)),
    }
}

/// Largest manifest a plugin may apply.
pub const MAX_MANIFEST: usize = 1 << 20;

impl StoreData {
    /// The uid and resourceVersion of `t` when one of the plugin's informers caches it.
    fn ids_of(&self, t: &Target) -> Option<(String, String)> {
        let key = cache_key(t.namespace.as_deref(), &t.name)?;
        self.api.grants.caches.values().find_map(|c| {
            c.get_by_key(&key).and_then(|o| {
                let m = o.meta();
                (m.api_version() == t.api_version && m.kind() == t.kind)
                    .then(|| (m.uid().to_owned(), m.resource_version().to_owned()))
            })
        })
    }

    /// Records a verdict's Event on its object (when the plugin is configured so), as if the
    /// plugin had asked for it: it needs the plugin's grant to create Events there and a token
    /// of its rate limit, and a repeat counts on the first one; a refusal is counted and
    /// audited like the plugin's own.
    fn verdict_event(&self, s: &Subject, rule: &str, sev: Severity, message: &str) {
        let target = Target {
            api_version: s.api_version.clone(),
            kind: s.kind.clone(),
            namespace: s.namespace.clone(),
            name: s.name.clone(),
        };
        let text = format!("[{}] {rule} ({}): {message}", self.api.plugin, sev.as_str());
        let made = event_body(
            &self.api.plugin,
            &target,
            Some((s.uid.clone(), s.resource_version.clone())),
            true,
            "PolicyViolation",
            &text,
        );
        let (t, body) = match made {
            Ok((t, body)) => (t, Ok(ActionBody::CreateEvent(body))),
            Err(e) => (target, Err(e)),
        };
        // Refusals are counted and audited by `request`; the verdict stands either way.
        let _ = self.api.actions.request(t, body, ActionVerb::Create);
    }
}

impl policy::Host for StoreData {
    fn report(
        &mut self,
        informer: String,
        namespace: Option<String>,
        name: String,
        rule: String,
        violation: Option<policy::Violation>,
    ) -> Result<(), policy::VerdictError> {
        let cache = self.granted(&informer).map_err(|_| {
            policy::VerdictError::NotGranted(format!(
                "informer {informer:?} is not granted to this plugin"
            ))
        })?;
        let key = key_for(namespace.as_deref(), &name);
        let Some(obj) = cache_key(namespace.as_deref(), &name).and_then(|k| cache.get_by_key(&k))
        else {
            return Err(policy::VerdictError::NotFound(format!(
                "informer {informer:?} has no object {key:?}"
            )));
        };
        let m = obj.meta();
        let subject = Subject {
            informer,
            api_version: m.api_version().to_owned(),
            kind: m.kind().to_owned(),
            namespace: m.namespace().map(str::to_owned),
            name: m.name().to_owned(),
            uid: m.uid().to_owned(),
            resource_version: m.resource_version().to_owned(),
        };
        let violation = violation.map(|v| (severity(v.severity), v.message));
        // What an Event would need, kept only when the plugin's violations become Events.
        let event = self
            .api
            .verdict_events
            .then(|| (subject.clone(), violation.clone()));
        let version = self.api.status.plugin_version();
        let store = &self.api.grants.services.verdicts;
        let change = store
            .report(&self.api.plugin, &version, &rule, subject, violation)
            .map_err(policy::VerdictError::Invalid)?;
        PluginCounters::add(&self.api.status.counters.verdicts, 1);
        if matches!(change, Change::Raised | Change::Changed)
            && let Some((subject, Some((sev, msg)))) = &event
        {
            self.verdict_event(subject, &rule, *sev, msg);
        }
        Ok(())
    }
}

impl actions::Host for StoreData {
    fn patch_metadata(
        &mut self,
        target: types::ObjectRef,
        labels: Vec<(String, Option<String>)>,
        annotations: Vec<(String, Option<String>)>,
    ) -> Result<actions::Accepted, actions::ActionError> {
        let target = target_of(target);
        // Conditional on the version the plugin's cache holds, when one of its informers has
        // the object: a patch decided on a view the object has since left is refused (409).
        let ids = self.ids_of(&target);
        let rv = ids
            .as_ref()
            .map(|(_, rv)| rv.as_str())
            .filter(|rv| !rv.is_empty());
        let body = metadata_patch(&labels, &annotations, rv).map(ActionBody::PatchMetadata);
        accepted(self.api.actions.request(target, body, ActionVerb::Patch))
    }

    fn apply(&mut self, manifest: String) -> Result<actions::Accepted, actions::ActionError> {
        let parsed = if manifest.len() > MAX_MANIFEST {
            Err(format!("the manifest is over {MAX_MANIFEST} bytes"))
        } else {
            serde_json::from_str::<serde_json::Value>(&manifest)
                .map_err(|e| format!("the manifest is not JSON: {e}"))
        };
        let (target, body) = match parsed.and_then(|v| apply_target(&v).map(|t| (t, v))) {
            Ok((t, v)) => (t, Ok(ActionBody::Apply(v))),
            Err(e) => (
                Target {
                    api_version: "?".into(),
                    kind: "?".into(),
                    namespace: None,
                    name: "?".into(),
                },
                Err(e),
            ),
        };
        accepted(self.api.actions.request(target, body, ActionVerb::Apply))
    }

    fn create_event(
        &mut self,
        regarding: types::ObjectRef,
        event_type: actions::EventType,
        reason: String,
        message: String,
    ) -> Result<actions::Accepted, actions::ActionError> {
        let regarding = target_of(regarding);
        let ids = self.ids_of(&regarding);
        let warning = matches!(event_type, actions::EventType::Warning);
        let r = match event_body(
            &self.api.plugin,
            &regarding,
            ids,
            warning,
            &reason,
            &message,
        ) {
            Ok((t, body)) => {
                self.api
                    .actions
                    .request(t, Ok(ActionBody::CreateEvent(body)), ActionVerb::Create)
            }
            Err(e) => self
                .api
                .actions
                .request(regarding, Err(e), ActionVerb::Create),
        };
        accepted(r)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::actions::PluginActions;
    use crate::informer::Indexer;
    use crate::informer::object::test_util::obj;
    use crate::plugin::state::{Grants, HostApi};
    use crate::plugin::status::PluginStatus;

    /// Store data of a plugin granted `pods`, which caches `a/p` and the cluster-scoped `n`.
    fn store() -> StoreData {
        let pods = Indexer::new();
        pods.add(obj(Some("a"), "p", "1"));
        pods.add(obj(None, "n", "1"));
        let grants = Grants::caches(BTreeMap::from([("pods".to_owned(), pods.cache())]));
        let status = Arc::new(PluginStatus::default());
        let actions = PluginActions::new(
            "t".into(),
            Default::default(),
            status.clone(),
            grants.services.clone(),
        );
        let api = HostApi {
            plugin: "t".into(),
            grants,
            log_level: LogLevel::Info,
            status,
            actions: Arc::new(actions),
            verdict_events: false,
        };
        StoreData::new(api, 1 << 20, std::time::Duration::from_millis(50))
    }

    #[test]
    fn a_name_with_a_slash_names_no_object_rather_than_another_ones_key() {
        let mut s = store();
        let get = |s: &mut StoreData, ns: Option<&str>, name: &str| {
            let wire =
                host::Host::cache_get(s, "pods".into(), ns.map(Into::into), name.into()).unwrap();
            // 0.1 reads the same object as a record.
            let record = crate::plugin::bindings::v01::wisp::plugin::host::Host::cache_get(
                s,
                "pods".into(),
                ns.map(Into::into),
                name.into(),
            )
            .unwrap();
            assert_eq!(wire.is_some(), record.is_some());
            if let Some(w) = wire {
                let cached = s.api.grants.caches["pods"].get_by_key(&key_for(ns, name));
                assert_eq!(Some(w.as_slice()), cached.as_ref().map(|o| o.wire()));
            }
            record.map(|o| o.meta.name)
        };
        assert_eq!(get(&mut s, Some("a"), "p").as_deref(), Some("p"));
        assert_eq!(get(&mut s, None, "n").as_deref(), Some("n"));
        assert_eq!(
            get(&mut s, None, "a/p"),
            None,
            "the key of a/p, not its name"
        );
        assert_eq!(get(&mut s, Some("a/b"), "p"), None);
        let r = policy::Host::report(&mut s, "pods".into(), None, "a/p".into(), "r".into(), None);
        assert!(matches!(r, Err(policy::VerdictError::NotFound(_))), "{r:?}");
    }
}
