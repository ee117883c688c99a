//! The host's imports, as the SDK calls them: in a component (wasm), the host itself; natively
//! (under `cargo test`), the fake host of [`crate::testing`].

use crate::bindings::wisp::plugin::actions::{Accepted, ActionError, EventType};
use crate::bindings::wisp::plugin::policy::{VerdictError, Violation};
use crate::bindings::wisp::plugin::types::{CacheError, Level, ObjectRef};

#[cfg(target_family = "wasm")]
mod imp {
    pub use crate::bindings::wisp::plugin::actions::{apply, create_event, patch_metadata};
    pub use crate::bindings::wisp::plugin::host::{
        cache_by_index, cache_get, cache_list, counter_add, gauge_set, log, log_enabled,
    };
    pub use crate::bindings::wisp::plugin::policy::report;
}

#[cfg(not(target_family = "wasm"))]
use crate::testing::host as imp;

pub fn log(level: Level, message: &str) {
    imp::log(level, message)
}

pub fn log_enabled(level: Level) -> bool {
    imp::log_enabled(level)
}

pub fn cache_get(
    informer: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Vec<u8>>, CacheError> {
    imp::cache_get(informer, namespace, name)
}

pub fn cache_list(
    informer: &str,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<u8>, CacheError> {
    imp::cache_list(informer, namespace, label_selector)
}

pub fn cache_by_index(informer: &str, index: &str, value: &str) -> Result<Vec<u8>, CacheError> {
    imp::cache_by_index(informer, index, value)
}

pub fn counter_add(name: &str, labels: &[(String, String)], value: u64) {
    imp::counter_add(name, labels, value)
}

pub fn gauge_set(name: &str, labels: &[(String, String)], value: f64) {
    imp::gauge_set(name, labels, value)
}

pub fn report(
    informer: &str,
    namespace: Option<&str>,
    name: &str,
    rule: &str,
    violation: Option<&Violation>,
) -> Result<(), VerdictError> {
    imp::report(informer, namespace, name, rule, violation)
}

pub fn patch_metadata(
    target: &ObjectRef,
    labels: &[(String, Option<String>)],
    annotations: &[(String, Option<String>)],
) -> Result<Accepted, ActionError> {
    imp::patch_metadata(target, labels, annotations)
}

pub fn apply(manifest: &str) -> Result<Accepted, ActionError> {
    imp::apply(manifest)
}

pub fn create_event(
    regarding: &ObjectRef,
    event_type: EventType,
    reason: &str,
    message: &str,
) -> Result<Accepted, ActionError> {
    imp::create_event(regarding, event_type, reason, message)
}
