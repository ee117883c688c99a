//! The imports of ABI 0.1 (records): each converts its arguments and calls the 0.2 function,
//! so both ABIs keep one behaviour.

use crate::plugin::bindings::v01::wisp::plugin::{actions, host, policy, types};
use crate::plugin::bindings::v01::{
    CacheError, Level, ObjectMetaResult, ObjectResult, OwnerRefResult,
};
use crate::plugin::bindings::wisp::plugin as v02;
use crate::plugin::sandbox::state::StoreData;

/// Converts a cached object to its owned 0.1 WIT form (for cache reads).
pub fn to_wit(o: &crate::informer::Object) -> ObjectResult {
    let m = o.meta();
    ObjectResult {
        meta: ObjectMetaResult {
            api_version: m.api_version().to_owned(),
            kind: m.kind().to_owned(),
            namespace: m.namespace().map(str::to_owned),
            name: m.name().to_owned(),
            uid: m.uid().to_owned(),
            resource_version: m.resource_version().to_owned(),
            labels: owned(m.labels()),
            annotations: owned(m.annotations()),
            owner_references: m
                .owner_references()
                .map(|r| OwnerRefResult {
                    api_version: r.api_version.to_owned(),
                    kind: r.kind.to_owned(),
                    name: r.name.to_owned(),
                    uid: r.uid.to_owned(),
                    controller: r.controller,
                })
                .collect(),
        },
        json: o.json().to_owned(),
    }
}

fn owned(pairs: crate::informer::object::Pairs<'_>) -> Vec<(String, String)> {
    pairs.map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

fn level(l: Level) -> v02::types::Level {
    match l {
        Level::Trace => v02::types::Level::Trace,
        Level::Debug => v02::types::Level::Debug,
        Level::Info => v02::types::Level::Info,
        Level::Warn => v02::types::Level::Warn,
        Level::Error => v02::types::Level::Error,
    }
}

fn cache_error(e: v02::types::CacheError) -> CacheError {
    match e {
        v02::types::CacheError::NotGranted(m) => CacheError::NotGranted(m),
        v02::types::CacheError::UnknownIndex(m) => CacheError::UnknownIndex(m),
        v02::types::CacheError::BadSelector(m) => CacheError::BadSelector(m),
    }
}

impl types::Host for StoreData {}

impl host::Host for StoreData {
    fn log(&mut self, l: Level, message: String) {
        v02::host::Host::log(self, level(l), message);
    }

    fn log_enabled(&mut self, l: Level) -> bool {
        v02::host::Host::log_enabled(self, level(l))
    }

    fn cache_get(
        &mut self,
        informer: String,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<ObjectResult>, CacheError> {
        self.cache_object(&informer, namespace.as_deref(), &name)
            .map(|o| o.map(|o| to_wit(&o)))
            .map_err(cache_error)
    }

    fn cache_list(
        &mut self,
        informer: String,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<ObjectResult>, CacheError> {
        self.cache_objects(&informer, namespace.as_deref(), label_selector.as_deref())
            .map(|v| v.iter().map(|o| to_wit(o)).collect())
            .map_err(cache_error)
    }

    fn cache_by_index(
        &mut self,
        informer: String,
        index: String,
        value: String,
    ) -> Result<Vec<ObjectResult>, CacheError> {
        self.cache_indexed(&informer, &index, &value)
            .map(|v| v.iter().map(|o| to_wit(o)).collect())
            .map_err(cache_error)
    }

    fn counter_add(&mut self, name: String, labels: Vec<(String, String)>, value: u64) {
        self.counter(name, labels, value);
    }

    fn gauge_set(&mut self, name: String, labels: Vec<(String, String)>, value: f64) {
        self.gauge(name, labels, value);
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
        let violation = violation.map(|v| v02::policy::Violation {
            severity: match v.severity {
                types::Severity::Info => v02::types::Severity::Info,
                types::Severity::Low => v02::types::Severity::Low,
                types::Severity::Medium => v02::types::Severity::Medium,
                types::Severity::High => v02::types::Severity::High,
                types::Severity::Critical => v02::types::Severity::Critical,
            },
            message: v.message,
        });
        v02::policy::Host::report(self, informer, namespace, name, rule, violation).map_err(|e| {
            match e {
                v02::policy::VerdictError::NotGranted(m) => policy::VerdictError::NotGranted(m),
                v02::policy::VerdictError::NotFound(m) => policy::VerdictError::NotFound(m),
                v02::policy::VerdictError::Invalid(m) => policy::VerdictError::Invalid(m),
            }
        })
    }
}

fn object_ref(r: types::ObjectRef) -> v02::types::ObjectRef {
    v02::types::ObjectRef {
        api_version: r.api_version,
        kind: r.kind,
        namespace: r.namespace,
        name: r.name,
    }
}

fn accepted(
    r: Result<v02::actions::Accepted, v02::actions::ActionError>,
) -> Result<actions::Accepted, actions::ActionError> {
    use v02::actions::{Accepted as A, ActionError as E};
    match r {
        Ok(A::Queued) => Ok(actions::Accepted::Queued),
        Ok(A::DryRun) => Ok(actions::Accepted::DryRun),
        Err(E::NotGranted(m)) => Err(actions::ActionError::NotGranted(m)),
        Err(E::RateLimited(m)) => Err(actions::ActionError::RateLimited(m)),
        Err(E::Invalid(m)) => Err(actions::ActionError::Invalid(m)),
        Err(E::QueueFull(m)) => Err(actions::ActionError::QueueFull(m)),
        Err(E::Unavailable(m)) => Err(actions::ActionError::Unavailable(m)),
    }
}

impl actions::Host for StoreData {
    fn patch_metadata(
        &mut self,
        target: types::ObjectRef,
        labels: Vec<(String, Option<String>)>,
        annotations: Vec<(String, Option<String>)>,
    ) -> Result<actions::Accepted, actions::ActionError> {
        accepted(v02::actions::Host::patch_metadata(
            self,
            object_ref(target),
            labels,
            annotations,
        ))
    }

    fn apply(&mut self, manifest: String) -> Result<actions::Accepted, actions::ActionError> {
        accepted(v02::actions::Host::apply(self, manifest))
    }

    fn create_event(
        &mut self,
        regarding: types::ObjectRef,
        event_type: actions::EventType,
        reason: String,
        message: String,
    ) -> Result<actions::Accepted, actions::ActionError> {
        let event_type = match event_type {
            actions::EventType::Normal => v02::actions::EventType::Normal,
            actions::EventType::Warning => v02::actions::EventType::Warning,
        };
        accepted(v02::actions::Host::create_event(
            self,
            object_ref(regarding),
            event_type,
            reason,
            message,
        ))
    }
}
