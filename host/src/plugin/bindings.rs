//! Every `bindgen!` of the host in one module; the rest of the crate uses these re-exports.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
});

pub use wisp::plugin::types::{
    Added, CacheError, Deleted, Delivery, Level, Notification, Object, ObjectMeta, Outcome,
    OwnerRef, PluginInfo, Updated,
};
