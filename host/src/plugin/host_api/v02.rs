//! The imports of ABI 0.2: 0.3's less `admission` (an export), under 0.2's names. Each converts
//! and calls the 0.3 function, so both ABIs keep one behaviour.

use crate::plugin::bindings::wisp::plugin as v03;
use crate::plugin::sandbox::state::StoreData;

super::forward_to_v03!(crate::plugin::bindings::v02::wisp::plugin);

impl old::host::Host for StoreData {
    fn log(&mut self, l: old::types::Level, message: String) {
        v03::host::Host::log(self, level(l), message);
    }

    fn log_enabled(&mut self, l: old::types::Level) -> bool {
        v03::host::Host::log_enabled(self, level(l))
    }

    fn cache_get(
        &mut self,
        informer: String,
        namespace: Option<String>,
        name: String,
    ) -> Result<Option<Vec<u8>>, old::types::CacheError> {
        v03::host::Host::cache_get(self, informer, namespace, name).map_err(cache_error)
    }

    fn cache_list(
        &mut self,
        informer: String,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<u8>, old::types::CacheError> {
        v03::host::Host::cache_list(self, informer, namespace, label_selector).map_err(cache_error)
    }

    fn cache_by_index(
        &mut self,
        informer: String,
        index: String,
        value: String,
    ) -> Result<Vec<u8>, old::types::CacheError> {
        v03::host::Host::cache_by_index(self, informer, index, value).map_err(cache_error)
    }

    fn counter_add(&mut self, name: String, labels: Vec<(String, String)>, value: u64) {
        v03::host::Host::counter_add(self, name, labels, value);
    }

    fn gauge_set(&mut self, name: String, labels: Vec<(String, String)>, value: f64) {
        v03::host::Host::gauge_set(self, name, labels, value);
    }
}
