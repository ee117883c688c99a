//! The imports of ABI 0.1 (records): each converts its arguments and calls the 0.3 function,
//! so both ABIs keep one behaviour.

use crate::plugin::bindings::v01::wisp::plugin::host;
use crate::plugin::bindings::v01::{
    CacheError, Level, ObjectMetaResult, ObjectResult, OwnerRefResult,
};
use crate::plugin::bindings::wisp::plugin as v03;
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

impl host::Host for StoreData {
    fn log(&mut self, l: Level, message: String) {
        v03::host::Host::log(self, level(l), message);
    }

    fn log_enabled(&mut self, l: Level) -> bool {
        v03::host::Host::log_enabled(self, level(l))
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

super::forward_to_v03!(crate::plugin::bindings::v01::wisp::plugin);
