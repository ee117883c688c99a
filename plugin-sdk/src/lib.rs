//! Wisp plugin SDK: write a Wisp plugin as a plain Rust type.
//!
//! A plugin is a WebAssembly component of world `wisp:plugin/plugin` (see `wit/wisp.wit`),
//! built with `cargo build --release --target wasm32-wasip2`. With this crate:
//!
//! ```ignore
//! use wisp_sdk::{Context, Object, Plugin, PluginInfo};
//!
//! #[derive(Default)]
//! struct Hello;
//!
//! impl Plugin for Hello {
//!     fn describe() -> PluginInfo {
//!         wisp_sdk::info("hello", env!("CARGO_PKG_VERSION"), &["pods"])
//!     }
//!     fn init(_settings: &str) -> Result<Self, String> {
//!         Ok(Hello)
//!     }
//!     fn on_add(&mut self, _cx: &Context, obj: &Object, _initial: bool) -> Result<(), String> {
//!         wisp_sdk::info!("hello {}", obj.key());
//!         Ok(())
//!     }
//! }
//!
//! wisp_sdk::export_plugin!(Hello);
//! ```
//!
//! - [`Object`]: metadata without parsing; [`Object::parse`] into k8s-openapi types on demand.
//! - [`cache`]: reads of the host's cache (only informers granted in the host's config).
//! - [`metrics`]: counters and gauges, exported by the host.
//! - [`policy`]: verdicts on cached objects; [`actions`]: changes to the cluster through the
//!   host, within the grants of the host's config.
//! - Logging macros ([`info!`], [`warn!`], ...) skip formatting when the level is off.
//!
//! The generated bindings hold the only `unsafe` (the ABI glue wit-bindgen writes).
#![deny(unsafe_code)]

/// Guest bindings generated from `wit/` (for what the SDK does not wrap).
#[allow(missing_docs, unsafe_code)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "plugin",
        pub_export_macro: true,
        export_macro_name: "__export_wisp_plugin",
        default_bindings_module: "::wisp_sdk::bindings",
    });
}

use serde::de::DeserializeOwned;

use bindings::wisp::plugin::host;
pub use bindings::wisp::plugin::types::{CacheError, Level, ObjectMeta, OwnerRef, PluginInfo};

/// A Kubernetes object handed to a plugin: metadata already extracted, JSON parsed only on demand.
#[derive(Clone, Debug)]
pub struct Object(bindings::wisp::plugin::types::Object);

impl Object {
    /// Wraps the raw WIT object.
    pub fn from_raw(o: bindings::wisp::plugin::types::Object) -> Self {
        Self(o)
    }

    /// Extracted metadata (no parsing).
    pub fn meta(&self) -> &ObjectMeta {
        &self.0.meta
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.0.meta.name
    }

    /// `metadata.namespace` (None when cluster-scoped).
    pub fn namespace(&self) -> Option<&str> {
        self.0.meta.namespace.as_deref()
    }

    /// `namespace/name`, or `name` when cluster-scoped.
    pub fn key(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{ns}/{}", self.name()),
            None => self.name().to_owned(),
        }
    }

    /// The value of a label.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.0
            .meta
            .labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The value of an annotation.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.0
            .meta
            .annotations
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The whole object as JSON text.
    pub fn json(&self) -> &str {
        &self.0.json
    }

    /// Parses the JSON into `T` (e.g. `k8s_openapi::api::core::v1::Pod`).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_str(&self.0.json)
            .map_err(|e| format!("{}: cannot parse as the requested type: {e}", self.key()))
    }

    /// Parses the JSON into a generic value.
    pub fn value(&self) -> Result<serde_json::Value, String> {
        self.parse()
    }
}

/// Where a notification comes from.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// Sequence number in this (plugin, informer) stream: 1, 2, 3, ... with no gaps.
    pub seq: u64,
    /// The informer's name in the host's config.
    pub informer: &'a str,
}

/// A Wisp plugin. Every event method defaults to doing nothing; an `Err` is reported to the host,
/// which applies the plugin's failure policy (skip, or retry with backoff, then quarantine).
pub trait Plugin: Sized + 'static {
    /// Name, version and the informers it expects.
    fn describe() -> PluginInfo;

    /// Builds the plugin from its settings (JSON, `{}` when none). An `Err` refuses the plugin;
    /// see [`parse_settings`] for messages that name the field.
    fn init(settings: &str) -> Result<Self, String>;

    /// An object appeared (`initial_list`: part of the first list or of a late-join replay).
    fn on_add(&mut self, _cx: &Context, _obj: &Object, _initial_list: bool) -> Result<(), String> {
        Ok(())
    }

    /// An object changed (`resync`: nothing changed, a periodic resync or an unchanged relist).
    fn on_update(
        &mut self,
        _cx: &Context,
        _old: &Object,
        _new: &Object,
        _resync: bool,
    ) -> Result<(), String> {
        Ok(())
    }

    /// An object is gone (`final_state_unknown`: the deletion was missed; `obj` is the last state
    /// the host knew).
    fn on_delete(
        &mut self,
        _cx: &Context,
        _obj: &Object,
        _final_state_unknown: bool,
    ) -> Result<(), String> {
        Ok(())
    }

    /// Called after each batch of notifications (e.g. to publish gauges once per batch).
    fn after_batch(&mut self) {}

    /// State to hand to the next version at a hot reload.
    fn snapshot(&self) -> Option<Vec<u8>> {
        None
    }

    /// Takes the previous version's snapshot (after `init`).
    fn restore(&mut self, _state: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
}

/// A [`PluginInfo`] from parts (set `replay_on_reload` on the result to be sent every cached
/// object again after a hot reload, instead of handing state over with snapshot/restore).
pub fn info(name: &str, version: &str, informers: &[&str]) -> PluginInfo {
    PluginInfo {
        name: name.to_owned(),
        version: version.to_owned(),
        informers: informers.iter().map(|s| (*s).to_owned()).collect(),
        replay_on_reload: false,
    }
}

/// Parses settings JSON into `T`; errors name the field: `settings.denyLatest: invalid type: ...`.
pub fn parse_settings<T: DeserializeOwned>(json: &str) -> Result<T, String> {
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            format!("settings: {inner}")
        } else {
            format!("settings.{path}: {inner}")
        }
    })
}

/// Logs at `level` (use the macros, which skip formatting when the level is off).
pub fn log(level: Level, message: &str) {
    host::log(level, message);
}

/// Whether the host keeps messages at `level`.
pub fn log_enabled(level: Level) -> bool {
    host::log_enabled(level)
}

/// Logs with `format!` syntax at a level, formatting only when the host keeps that level.
#[macro_export]
macro_rules! log {
    ($level:expr, $($arg:tt)+) => {{
        let level = $level;
        if $crate::log_enabled(level) {
            $crate::log(level, &format!($($arg)+));
        }
    }};
}

/// Logs at trace level.
#[macro_export]
macro_rules! trace { ($($arg:tt)+) => { $crate::log!($crate::Level::Trace, $($arg)+) }; }
/// Logs at debug level.
#[macro_export]
macro_rules! debug { ($($arg:tt)+) => { $crate::log!($crate::Level::Debug, $($arg)+) }; }
/// Logs at info level.
#[macro_export]
macro_rules! info { ($($arg:tt)+) => { $crate::log!($crate::Level::Info, $($arg)+) }; }
/// Logs at warn level.
#[macro_export]
macro_rules! warn { ($($arg:tt)+) => { $crate::log!($crate::Level::Warn, $($arg)+) }; }
/// Logs at error level.
#[macro_export]
macro_rules! error { ($($arg:tt)+) => { $crate::log!($crate::Level::Error, $($arg)+) }; }

/// Reads of the host's cache. Only informers granted to the plugin in the host's config can be
/// read; others give [`CacheError::NotGranted`].
pub mod cache {
    use super::{CacheError, Object, host};

    /// The cached object `namespace/name` (or `name`) of `informer`.
    pub fn get(
        informer: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object>, CacheError> {
        host::cache_get(informer, namespace, name).map(|o| o.map(Object))
    }

    /// Cached objects of `informer`, optionally in one namespace and matching a label selector.
    pub fn list(
        informer: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Object>, CacheError> {
        host::cache_list(informer, namespace, label_selector)
            .map(|v| v.into_iter().map(Object).collect())
    }

    /// Cached objects of `informer` whose index `index` holds `value`.
    pub fn by_index(informer: &str, index: &str, value: &str) -> Result<Vec<Object>, CacheError> {
        host::cache_by_index(informer, index, value).map(|v| v.into_iter().map(Object).collect())
    }
}

/// Policy verdicts: tell the host whether a cached object passes a rule. The host keeps the
/// current violation per (plugin, rule, object) and shows it on `/verdicts`, in metrics and, when
/// the host's config says so, as a Warning Event on the object; a pass or the object's deletion
/// clears it.
pub mod policy {
    use super::Object;
    use super::bindings::wisp::plugin::policy as wit;
    pub use super::bindings::wisp::plugin::policy::VerdictError;
    pub use super::bindings::wisp::plugin::types::Severity;

    /// Reports `obj` (from `informer`) as violating `rule`.
    pub fn violation(
        informer: &str,
        obj: &Object,
        rule: &str,
        severity: Severity,
        message: &str,
    ) -> Result<(), VerdictError> {
        let v = wit::Violation {
            severity,
            message: message.to_owned(),
        };
        wit::report(informer, obj.namespace(), obj.name(), rule, Some(&v))
    }

    /// Reports that `obj` passes `rule` (clearing an earlier violation).
    pub fn pass(informer: &str, obj: &Object, rule: &str) -> Result<(), VerdictError> {
        wit::report(informer, obj.namespace(), obj.name(), rule, None)
    }
}

/// Automation: ask the host to change the cluster. Only what the host's config grants the plugin
/// (verb, kind, namespaces) is done, within its rate limit; accepted actions are sent after the
/// call returns and their effect comes back through the informers.
pub mod actions {
    use super::Object;
    use super::bindings::wisp::plugin::actions as wit;
    pub use super::bindings::wisp::plugin::actions::{Accepted, ActionError, EventType};
    pub use super::bindings::wisp::plugin::types::ObjectRef;

    /// A reference to `obj`.
    pub fn object_ref(obj: &Object) -> ObjectRef {
        let m = obj.meta();
        ObjectRef {
            api_version: m.api_version.clone(),
            kind: m.kind.clone(),
            namespace: m.namespace.clone(),
            name: m.name.clone(),
        }
    }

    fn owned(pairs: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
            .collect()
    }

    /// Merge-patches labels and annotations of `target` (`Some` sets, `None` removes a key).
    /// Needs verb `patch` on the target's kind.
    pub fn patch_metadata(
        target: &ObjectRef,
        labels: &[(&str, Option<&str>)],
        annotations: &[(&str, Option<&str>)],
    ) -> Result<Accepted, ActionError> {
        wit::patch_metadata(target, &owned(labels), &owned(annotations))
    }

    /// Server-side apply of `manifest` with the plugin's field manager (never forced). Needs
    /// verb `apply` on the manifest's kind.
    pub fn apply(manifest: &serde_json::Value) -> Result<Accepted, ActionError> {
        wit::apply(&manifest.to_string())
    }

    /// Records a Kubernetes Event about `regarding`. Needs verb `create` on kind `Event`.
    pub fn create_event(
        regarding: &ObjectRef,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<Accepted, ActionError> {
        wit::create_event(regarding, event_type, reason, message)
    }
}

/// Counters and gauges the host exports under the plugin's name.
pub mod metrics {
    use super::host;

    fn owned(labels: &[(&str, &str)]) -> Vec<(String, String)> {
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Adds `value` to a counter.
    pub fn counter_add(name: &str, labels: &[(&str, &str)], value: u64) {
        host::counter_add(name, &owned(labels), value);
    }

    /// Sets a gauge.
    pub fn gauge_set(name: &str, labels: &[(&str, &str)], value: f64) {
        host::gauge_set(name, &owned(labels), value);
    }
}

#[doc(hidden)]
pub mod __private {
    use std::cell::RefCell;

    use super::bindings::wisp::plugin::types::{Delivery, Notification, Outcome};
    use super::{Context, Object, Plugin};

    pub fn init<P: Plugin>(state: &RefCell<Option<P>>, settings: String) -> Result<(), String> {
        let p = P::init(&settings)?;
        *state.borrow_mut() = Some(p);
        Ok(())
    }

    pub fn handle<P: Plugin>(state: &RefCell<Option<P>>, batch: Vec<Delivery>) -> Vec<Outcome> {
        let mut guard = state.borrow_mut();
        let Some(p) = guard.as_mut() else {
            return batch
                .iter()
                .map(|_| Outcome::Error("plugin used before init".into()))
                .collect();
        };
        let out = batch
            .into_iter()
            .map(
                |Delivery {
                     seq,
                     informer,
                     notification,
                 }| {
                    let cx = Context {
                        seq,
                        informer: &informer,
                    };
                    let r = match notification {
                        Notification::Added(a) => p.on_add(&cx, &Object(a.object), a.initial_list),
                        Notification::Updated(u) => {
                            p.on_update(&cx, &Object(u.old), &Object(u.new), u.resync)
                        }
                        Notification::Deleted(d) => {
                            p.on_delete(&cx, &Object(d.object), d.final_state_unknown)
                        }
                    };
                    match r {
                        Ok(()) => Outcome::Ok,
                        Err(e) => Outcome::Error(e),
                    }
                },
            )
            .collect();
        p.after_batch();
        out
    }

    pub fn snapshot<P: Plugin>(state: &RefCell<Option<P>>) -> Option<Vec<u8>> {
        state.borrow().as_ref().and_then(|p| p.snapshot())
    }

    pub fn restore<P: Plugin>(state: &RefCell<Option<P>>, bytes: Vec<u8>) -> Result<(), String> {
        match state.borrow_mut().as_mut() {
            Some(p) => p.restore(bytes),
            None => Err("restore before init".into()),
        }
    }
}

/// Exports a [`Plugin`] type as the component's `listener`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        ::std::thread_local! {
            static __WISP_STATE: ::std::cell::RefCell<::std::option::Option<$plugin>> =
                const { ::std::cell::RefCell::new(::std::option::Option::None) };
        }

        struct __WispGuest;

        impl $crate::bindings::exports::wisp::plugin::listener::Guest for __WispGuest {
            fn describe() -> $crate::PluginInfo {
                <$plugin as $crate::Plugin>::describe()
            }
            fn init(
                settings: ::std::string::String,
            ) -> ::std::result::Result<(), ::std::string::String> {
                __WISP_STATE.with(|s| $crate::__private::init::<$plugin>(s, settings))
            }
            fn handle(
                batch: ::std::vec::Vec<$crate::bindings::wisp::plugin::types::Delivery>,
            ) -> ::std::vec::Vec<$crate::bindings::wisp::plugin::types::Outcome> {
                __WISP_STATE.with(|s| $crate::__private::handle::<$plugin>(s, batch))
            }
            fn snapshot() -> ::std::option::Option<::std::vec::Vec<u8>> {
                __WISP_STATE.with(|s| $crate::__private::snapshot::<$plugin>(s))
            }
            fn restore(
                state: ::std::vec::Vec<u8>,
            ) -> ::std::result::Result<(), ::std::string::String> {
                __WISP_STATE.with(|s| $crate::__private::restore::<$plugin>(s, state))
            }
        }

        $crate::bindings::__export_wisp_plugin!(__WispGuest);
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)]
    struct S {
        deny_latest: bool,
    }

    #[test]
    fn settings_errors_name_the_field() {
        let e = parse_settings::<S>(r#"{"denyLatest": "yes"}"#).unwrap_err();
        assert!(e.starts_with("settings.denyLatest: invalid type"), "{e}");
        let e = parse_settings::<S>(r#"{"denyLatest": true, "x": 1}"#).unwrap_err();
        assert!(e.contains("unknown field `x`"), "{e}");
    }
}
