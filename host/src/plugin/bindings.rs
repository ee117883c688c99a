//! Every `bindgen!` of the host in one module; the rest of the crate uses these re-exports.
//!
//! Ownership is `Borrowing`: deliveries are lowered into the guest straight from the cached
//! objects' strings (`*Param<'a>` types), without a host-side copy; what plugins get back from
//! cache reads is owned (`*Result` types).
#![allow(unsafe_code)] // generated glue

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
    ownership: Borrowing { duplicate_if_necessary: true },
});

pub use wisp::plugin::types::{
    Added, CacheError, Deleted, Delivery, Level, Notification, ObjectMetaParam, ObjectMetaResult,
    ObjectParam, ObjectResult, Outcome, OwnerRefParam, OwnerRefResult, PluginInfo, Updated,
};
