//! Every `bindgen!` of the host in one module; the rest of the crate uses these re-exports.
//!
//! Two worlds: `wisp:plugin/plugin@0.2.0` ([`v02`], whose `wisp` module is re-exported here: batches and cache reads are
//! byte lists in the layout of [`wisp_abi`]) and `wisp:plugin/plugin@0.1.0` ([`v01`]: records,
//! from `wit/v0.1/`), which the host keeps loading so plugins can move at their own pace. The
//! world of a component is chosen when it is loaded, from the `listener` interface it exports.
//!
//! Ownership is `Borrowing`: 0.1 deliveries are lowered into the guest straight from the cached
//! objects' strings (`*Param<'a>` types), without a host-side copy.
#![allow(unsafe_code)] // generated glue

/// The 0.2.0 world (byte lists).
pub mod v02 {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "plugin",
        ownership: Borrowing { duplicate_if_necessary: true },
    });
}

pub use v02::wisp;
pub use v02::wisp::plugin::types::{CacheError, Level, Outcome, PluginInfo};

/// The 0.1.0 world (records).
pub mod v01 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1",
        world: "plugin",
        ownership: Borrowing { duplicate_if_necessary: true },
    });

    pub use wisp::plugin::types::{
        Added, CacheError, Deleted, Delivery, Level, Notification, ObjectMetaParam,
        ObjectMetaResult, ObjectParam, ObjectResult, Outcome, OwnerRefParam, OwnerRefResult,
        PluginInfo, Updated,
    };
}

/// The ABI of a plugin: the version of the `wisp:plugin` world its component targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Abi {
    /// `wisp:plugin@0.1.0`: records per object.
    V0_1,
    /// `wisp:plugin@0.2.0`: one byte list per batch.
    V0_2,
}

impl Abi {
    /// `0.1.0`, `0.2.0`.
    pub fn version(self) -> &'static str {
        match self {
            Abi::V0_1 => "0.1.0",
            Abi::V0_2 => "0.2.0",
        }
    }

    /// The name of the `listener` interface a component of this ABI exports.
    pub fn listener_export(self) -> String {
        format!("wisp:plugin/listener@{}", self.version())
    }

    /// Every ABI the host loads, newest first.
    pub const ALL: [Abi; 2] = [Abi::V0_2, Abi::V0_1];
}

impl std::fmt::Display for Abi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.version())
    }
}

/// A component linked against the host, ready to instantiate, in its world.
pub enum PluginPre<T: 'static> {
    /// A 0.1.0 component.
    V0_1(v01::PluginPre<T>),
    /// A 0.2.0 component.
    V0_2(v02::PluginPre<T>),
}

// Not derived: that would ask `T: Clone`, and a store's data need not be.
impl<T: 'static> Clone for PluginPre<T> {
    fn clone(&self) -> Self {
        match self {
            PluginPre::V0_1(p) => PluginPre::V0_1(p.clone()),
            PluginPre::V0_2(p) => PluginPre::V0_2(p.clone()),
        }
    }
}

impl<T: 'static> PluginPre<T> {
    /// The ABI of the component.
    pub fn abi(&self) -> Abi {
        match self {
            PluginPre::V0_1(_) => Abi::V0_1,
            PluginPre::V0_2(_) => Abi::V0_2,
        }
    }

    /// The engine the component was compiled for (a store for it must be of this engine).
    pub fn engine(&self) -> &wasmtime::Engine {
        match self {
            PluginPre::V0_1(p) => p.engine(),
            PluginPre::V0_2(p) => p.engine(),
        }
    }
}
