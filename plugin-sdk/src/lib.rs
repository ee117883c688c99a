//! Wisp plugin SDK: write a Wisp plugin as a plain Rust type.
//!
//! A plugin is a WebAssembly component of world `wisp:plugin/admission-plugin` (see
//! `wit/wisp.wit`: `wisp:plugin/plugin`, and the `admission` call),
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
//!     fn init(_settings: &str) -> wisp_sdk::Result<Self> {
//!         Ok(Hello)
//!     }
//!     fn on_add(&mut self, _cx: &Context, obj: &Object, _initial: bool) -> wisp_sdk::Result<()> {
//!         wisp_sdk::info!("hello {}", obj.key());
//!         Ok(())
//!     }
//! }
//!
//! wisp_sdk::export_plugin!(Hello);
//! ```
//!
//! Plugins target ABI `wisp:plugin@0.3.0`: each batch of notifications arrives as one byte buffer
//! (`docs/abi.md`), read in place:
//! - [`Object`]: zero-copy views of an object (`name()`, `label(k)`, `labels()`, `owner_refs()`,
//!   `json()`), parsed only on demand: [`Object::parse`] into k8s-openapi types,
//!   [`Object::parse_partial`] into a struct of just the fields needed.
//! - [`cache`]: reads of the host's cache (only informers granted in the host's config).
//! - [`metrics`]: counters and gauges, exported by the host.
//! - [`policy`]: verdicts on cached objects; [`actions`]: changes to the cluster through the
//!   host, within the grants of the host's config.
//! - [`Error`]: what a plugin's methods return; `?` takes the SDK's errors, `serde_json`'s and
//!   strings, [`ResultExt::context`] says what was being done.
//! - Logging macros ([`info!`], [`warn!`], ...) skip formatting when the level is off.
//! - [`admission`]: the plugin's decision on a write, before it is stored; by default its own
//!   rules (`on_add`, `on_update`) decide, with the violations they report.
//! - [`testing`] (native builds only): run the plugin under `cargo test` against a fake host
//!   (cache fixtures, captured logs, metrics, verdicts and actions).
//!
//! The generated bindings hold the only `unsafe` (the ABI glue wit-bindgen writes).
#![deny(unsafe_code)]

/// Guest bindings generated from `wit/` (for what the SDK does not wrap).
#[allow(missing_docs, unsafe_code)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit",
        world: "admission-plugin",
        pub_export_macro: true,
        export_macro_name: "__export_wisp_plugin",
        default_bindings_module: "::wisp_sdk::bindings",
    });
}

pub mod abi;
pub mod admission;
mod error;
mod sys;
#[cfg(not(target_family = "wasm"))]
pub mod testing;

/// The guest allocator chosen by a feature (see `Cargo.toml`).
#[cfg(all(target_family = "wasm", feature = "alloc-dlmalloc"))]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// The guest allocator chosen by a feature (see `Cargo.toml`).
#[cfg(all(
    target_family = "wasm",
    feature = "alloc-talc",
    not(feature = "alloc-dlmalloc")
))]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

use serde::de::DeserializeOwned;

pub use abi::{Object, ObjectList, OwnerRef};
pub use bindings::wisp::plugin::types::{Level, PluginInfo};
pub use error::{Error, Result, ResultExt};

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
    fn init(settings: &str) -> Result<Self>;

    /// An object appeared (`initial_list`: part of the first list or of a late-join replay).
    fn on_add(&mut self, _cx: &Context, _obj: &Object<'_>, _initial_list: bool) -> Result<()> {
        Ok(())
    }

    /// An object changed (`resync`: nothing changed, a periodic resync or an unchanged relist).
    fn on_update(
        &mut self,
        _cx: &Context,
        _old: &Object<'_>,
        _new: &Object<'_>,
        _resync: bool,
    ) -> Result<()> {
        Ok(())
    }

    /// An object is gone (`final_state_unknown`: the deletion was missed; `obj` is the last state
    /// the host knew).
    fn on_delete(
        &mut self,
        _cx: &Context,
        _obj: &Object<'_>,
        _final_state_unknown: bool,
    ) -> Result<()> {
        Ok(())
    }

    /// Called after each batch of notifications (e.g. to publish gauges once per batch).
    fn after_batch(&mut self) {}

    /// State to hand to the next version at a hot reload.
    fn snapshot(&self) -> Option<Vec<u8>> {
        None
    }

    /// Takes the previous version's snapshot (after `init`).
    fn restore(&mut self, _state: Vec<u8>) -> Result<()> {
        Ok(())
    }

    /// Decides on a write before it is stored (only called for a plugin the host's config
    /// gives admission). By default the plugin's rules decide: [`admission::by_rules`] runs
    /// `on_add` / `on_update` on the object and denies with the violations they report. An `Err`
    /// is the plugin failing (the host's `failurePolicy` answers), not a denial.
    fn admit(&mut self, request: &admission::Request<'_>) -> Result<admission::Response> {
        admission::by_rules(self, request)
    }
}

/// A [`PluginInfo`] from parts. On the result, set `replay_on_reload` to be sent every cached
/// object again after a hot reload (instead of handing state over with snapshot/restore), and
/// `metadata_only` to receive objects without their JSON ([`Object::json`] is then empty and
/// [`Object::parse`] an error; [`cache::get`] still returns the whole object).
pub fn info(name: &str, version: &str, informers: &[&str]) -> PluginInfo {
    PluginInfo {
        name: name.to_owned(),
        version: version.to_owned(),
        informers: informers.iter().map(|s| (*s).to_owned()).collect(),
        replay_on_reload: false,
        metadata_only: false,
    }
}

/// Parses settings JSON into `T`; errors name the field: `settings.denyLatest: invalid type: ...`.
pub fn parse_settings<T: DeserializeOwned>(json: &str) -> Result<T> {
    let de = &mut serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = without_position(e.into_inner());
        Error::new(if path == "." || path.is_empty() {
            format!("settings: {inner}")
        } else {
            format!("settings.{path}: {inner}")
        })
    })
}

/// The message of a settings error: a data error names its field by path, so serde_json's
/// ` at line 1 column 33` is noise there (the Python and JavaScript SDKs say no position
/// either); a syntax error keeps its position, the only pointer to what is wrong.
fn without_position(e: serde_json::Error) -> String {
    let text = e.to_string();
    if !e.is_data() {
        return text;
    }
    let position = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&position) {
        Some(message) => message.to_owned(),
        None => text,
    }
}

/// Logs at `level` (use the macros, which skip formatting when the level is off).
pub fn log(level: Level, message: &str) {
    sys::log(level, message);
}

/// Whether the host keeps messages at `level`.
pub fn log_enabled(level: Level) -> bool {
    sys::log_enabled(level)
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
/// read; others give [`cache::Error::NotGranted`]. Objects come back in the ABI's encoding,
/// read as they are used (see [`Object`]).
pub mod cache {
    use super::bindings::wisp::plugin::types::CacheError;
    use super::{Object, ObjectList, sys};

    /// Why a cache read gave nothing.
    #[derive(Clone, Debug, PartialEq, Eq)]
    #[non_exhaustive]
    pub enum Error {
        /// The host's config does not grant this informer to the plugin.
        NotGranted(String),
        /// The informer has no such index.
        UnknownIndex(String),
        /// The label selector does not parse.
        BadSelector(String),
        /// The host's answer could not be decoded (a host of another ABI layout).
        Malformed(String),
    }

    impl std::fmt::Display for Error {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                Error::NotGranted(m) => write!(f, "informer not granted: {m}"),
                Error::UnknownIndex(m) => write!(f, "unknown index: {m}"),
                Error::BadSelector(m) => write!(f, "bad label selector: {m}"),
                Error::Malformed(m) => write!(f, "{m}"),
            }
        }
    }

    impl std::error::Error for Error {}

    impl From<CacheError> for Error {
        fn from(e: CacheError) -> Self {
            match e {
                CacheError::NotGranted(m) => Error::NotGranted(m),
                CacheError::UnknownIndex(m) => Error::UnknownIndex(m),
                CacheError::BadSelector(m) => Error::BadSelector(m),
            }
        }
    }

    fn decode_list(bytes: Result<Vec<u8>, CacheError>) -> Result<ObjectList, Error> {
        ObjectList::decode(bytes?).map_err(|e| Error::Malformed(e.to_string()))
    }

    /// The cached object `namespace/name` (or `name`) of `informer`.
    pub fn get(
        informer: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Object<'static>>, Error> {
        match sys::cache_get(informer, namespace, name)? {
            Some(b) => Object::decode_owned(b)
                .map(Some)
                .map_err(|e| Error::Malformed(e.to_string())),
            None => Ok(None),
        }
    }

    /// Cached objects of `informer`, optionally in one namespace and matching a label selector.
    pub fn list(
        informer: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<ObjectList, Error> {
        decode_list(sys::cache_list(informer, namespace, label_selector))
    }

    /// Cached objects of `informer` whose index `index` holds `value`.
    pub fn by_index(informer: &str, index: &str, value: &str) -> Result<ObjectList, Error> {
        decode_list(sys::cache_by_index(informer, index, value))
    }
}

/// Policy verdicts: tell the host whether a cached object passes a rule. The host keeps the
/// current violation per (plugin, rule, object) and shows it on `/verdicts`, in metrics and, when
/// the host's config says so, as a Warning Event on the object; a pass or the object's deletion
/// clears it.
pub mod policy {
    use super::Object;
    pub use super::bindings::wisp::plugin::policy::VerdictError;
    pub use super::bindings::wisp::plugin::types::Severity;

    /// Reports `obj` (from `informer`) as violating `rule`.
    pub fn violation(
        informer: &str,
        obj: &Object<'_>,
        rule: &str,
        severity: Severity,
        message: &str,
    ) -> Result<(), VerdictError> {
        if super::admission::collect(rule, severity, message) {
            return Ok(());
        }
        let v = super::bindings::wisp::plugin::policy::Violation {
            severity,
            message: message.to_owned(),
        };
        super::sys::report(informer, obj.namespace(), obj.name(), rule, Some(&v))
    }

    /// Reports that `obj` passes `rule` (clearing an earlier violation).
    pub fn pass(informer: &str, obj: &Object<'_>, rule: &str) -> Result<(), VerdictError> {
        if super::admission::collecting() {
            return Ok(());
        }
        super::sys::report(informer, obj.namespace(), obj.name(), rule, None)
    }
}

/// Automation: ask the host to change the cluster. Only what the host's config grants the plugin
/// (verb, kind, namespaces) is done, within its rate limit; accepted actions are sent after the
/// call returns and their effect comes back through the informers.
pub mod actions {
    use super::Object;
    pub use super::bindings::wisp::plugin::actions::{Accepted, ActionError, EventType};
    pub use super::bindings::wisp::plugin::types::ObjectRef;

    /// A reference to `obj`.
    pub fn object_ref(obj: &Object<'_>) -> ObjectRef {
        ObjectRef {
            api_version: obj.api_version().to_owned(),
            kind: obj.kind().to_owned(),
            namespace: obj.namespace().map(str::to_owned),
            name: obj.name().to_owned(),
        }
    }

    fn owned(pairs: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
            .collect()
    }

    /// Merge-patches labels and annotations of `target` (`Some` sets, `None` removes a key).
    /// Needs verb `patch` on the target's kind. Conditional on the resourceVersion the host's
    /// cache holds for `target` now: a patch that meets a newer version (written by anyone but
    /// this plugin) fails at the server and is not retried; the change is delivered instead.
    pub fn patch_metadata(
        target: &ObjectRef,
        labels: &[(&str, Option<&str>)],
        annotations: &[(&str, Option<&str>)],
    ) -> Result<Accepted, ActionError> {
        super::sys::patch_metadata(target, &owned(labels), &owned(annotations))
    }

    /// Server-side apply of `manifest` with the plugin's field manager (never forced). Needs
    /// verb `apply` on the manifest's kind.
    pub fn apply(manifest: &serde_json::Value) -> Result<Accepted, ActionError> {
        super::sys::apply(&manifest.to_string())
    }

    /// Records a Kubernetes Event about `regarding`. Needs verb `create` on kind `Event`.
    /// `reason` is machine-readable, as a Condition's: 1 to 128 characters [A-Za-z0-9_,:],
    /// starting with a letter, ending alphanumeric or '_' (`PolicyViolation`); another is
    /// `ActionError::Invalid`. `message` is cut to 1024 bytes.
    pub fn create_event(
        regarding: &ObjectRef,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<Accepted, ActionError> {
        super::sys::create_event(regarding, event_type, reason, message)
    }
}

/// Counters and gauges the host exports under the plugin's name.
pub mod metrics {
    use super::sys;

    fn owned(labels: &[(&str, &str)]) -> Vec<(String, String)> {
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// Adds `value` to a counter.
    pub fn counter_add(name: &str, labels: &[(&str, &str)], value: u64) {
        sys::counter_add(name, &owned(labels), value);
    }

    /// Sets a gauge.
    pub fn gauge_set(name: &str, labels: &[(&str, &str)], value: f64) {
        sys::gauge_set(name, &owned(labels), value);
    }
}

#[doc(hidden)]
pub mod __private {
    use std::cell::RefCell;

    use super::abi::Kind;
    use super::bindings::wisp::plugin::types::Outcome;
    use super::{Context, Level, Object, Plugin};

    pub fn init<P: Plugin>(state: &RefCell<Option<P>>, settings: String) -> Result<(), String> {
        let p = P::init(&settings).map_err(crate::Error::into_message)?;
        *state.borrow_mut() = Some(p);
        Ok(())
    }

    pub fn handle<P: Plugin>(state: &RefCell<Option<P>>, batch: Vec<u8>) -> Vec<Outcome> {
        // The codec's batch view: its notifications' objects become the SDK's `Object`s (a
        // borrowed view each) without a `Notification` of the SDK's in between.
        let batch = match wisp_abi::Batch::decode(&batch) {
            Ok(b) => b,
            Err(e) => {
                // No outcomes: the host counts every notification of the batch as failed.
                crate::log(Level::Error, &format!("cannot read the batch: {e}"));
                return Vec::new();
            }
        };
        let mut guard = state.borrow_mut();
        let Some(p) = guard.as_mut() else {
            return (0..batch.len())
                .map(|_| Outcome::Error("plugin used before init".into()))
                .collect();
        };
        let informer = batch.informer();
        let out = (0..batch.len())
            .map(|i| {
                let n = match batch.get(i) {
                    Ok(n) => n,
                    Err(e) => return Outcome::Error(e.to_string()),
                };
                let cx = Context {
                    seq: n.seq,
                    informer,
                };
                let object = Object::from(n.object);
                let r = match n.kind {
                    Kind::Added { initial_list } => p.on_add(&cx, &object, initial_list),
                    Kind::Updated { resync } => match n.old {
                        Some(old) => p.on_update(&cx, &Object::from(old), &object, resync),
                        None => p.on_update(&cx, &object, &object, resync),
                    },
                    Kind::Deleted {
                        final_state_unknown,
                    } => p.on_delete(&cx, &object, final_state_unknown),
                    other => Err(crate::Error::new(format!(
                        "a notification of kind {other:?}, which this SDK does not know"
                    ))),
                };
                match r {
                    Ok(()) => Outcome::Ok,
                    Err(e) => Outcome::Error(e.into_message()),
                }
            })
            .collect();
        p.after_batch();
        out
    }

    pub fn snapshot<P: Plugin>(state: &RefCell<Option<P>>) -> Option<Vec<u8>> {
        state.borrow().as_ref().and_then(|p| p.snapshot())
    }

    pub fn admit<P: Plugin>(
        state: &RefCell<Option<P>>,
        request: crate::bindings::exports::wisp::plugin::admission::Request,
    ) -> Result<crate::bindings::exports::wisp::plugin::admission::Response, String> {
        let mut guard = state.borrow_mut();
        let Some(p) = guard.as_mut() else {
            return Err("plugin used before init".into());
        };
        let request =
            crate::admission::Request::new(&request).map_err(crate::Error::into_message)?;
        p.admit(&request)
            .map(crate::admission::Response::into_wit)
            .map_err(crate::Error::into_message)
    }

    pub fn restore<P: Plugin>(state: &RefCell<Option<P>>, bytes: Vec<u8>) -> Result<(), String> {
        match state.borrow_mut().as_mut() {
            Some(p) => p.restore(bytes).map_err(crate::Error::into_message),
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
                batch: ::std::vec::Vec<u8>,
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

        impl $crate::bindings::exports::wisp::plugin::admission::Guest for __WispGuest {
            fn admit(
                request: $crate::bindings::exports::wisp::plugin::admission::Request,
            ) -> ::std::result::Result<
                $crate::bindings::exports::wisp::plugin::admission::Response,
                ::std::string::String,
            > {
                __WISP_STATE.with(|s| $crate::__private::admit::<$plugin>(s, request))
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
        let e = parse_settings::<S>(r#"{"denyLatest": "yes"}"#)
            .unwrap_err()
            .into_message();
        assert!(e.starts_with("settings.denyLatest: invalid type"), "{e}");
        let e = parse_settings::<S>(r#"{"denyLatest": true, "x": 1}"#)
            .unwrap_err()
            .into_message();
        assert!(e.contains("unknown field `x`"), "{e}");
        assert!(
            !e.contains(" at line "),
            "a data error names its field, not a position: {e}"
        );
        let e = parse_settings::<S>(r#"{"denyLatest": tru}"#)
            .unwrap_err()
            .into_message();
        assert!(
            e.starts_with("settings") && e.ends_with("expected ident at line 1 column 19"),
            "{e}"
        );
    }
}
