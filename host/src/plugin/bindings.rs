//! Every `bindgen!` of the host in one module; the rest of the crate uses these re-exports.
//!
//! Three worlds: `wisp:plugin/plugin@0.3.0` ([`v03`], whose `wisp` module is re-exported here:
//! batches and cache reads are byte lists in the layout of [`wisp_abi`]; with [`v03_admission`]
//! for the `admission` export of the world `admission-plugin`), `wisp:plugin/plugin@0.2.0`
//! ([`v02`]: the same imports and `listener` without `admission`, from `wit/v0.2/`) and
//! `wisp:plugin/plugin@0.1.0` ([`v01`]: records, from `wit/v0.1/`). The host keeps loading the
//! older two so plugins can move at their own pace; their imports convert and call 0.3's
//! (`host_api::v02`, `host_api::v01`). The world of a component is chosen when it is loaded,
//! from the `listener` interface it exports.
//!
//! Ownership is `Borrowing`: 0.1 deliveries are lowered into the guest straight from the cached
//! objects' strings (`*Param<'a>` types), without a host-side copy.
#![allow(unsafe_code)] // generated glue

/// The 0.3.0 world `plugin` (byte lists).
pub mod v03 {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "plugin",
        ownership: Borrowing { duplicate_if_necessary: true },
    });
}

/// The `admission` export of the 0.3.0 world `admission-plugin`, looked up apart from the
/// world (a 0.3.0 component may export `listener` alone); its imports are [`v03`]'s.
pub mod v03_admission {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "admission-plugin",
        with: {
            "wisp:plugin/types@0.3.0": super::v03::wisp::plugin::types,
            "wisp:plugin/host@0.3.0": super::v03::wisp::plugin::host,
            "wisp:plugin/policy@0.3.0": super::v03::wisp::plugin::policy,
            "wisp:plugin/actions@0.3.0": super::v03::wisp::plugin::actions,
        },
    });

    pub use exports::wisp::plugin::admission::{
        GroupVersionKind, GroupVersionResource, Guest as Admission,
        GuestIndices as AdmissionIndices, Operation, Request, Response, UserInfo,
    };
}

pub use v03::wisp;
pub use v03::wisp::plugin::types::{CacheError, Level, Outcome, PluginInfo};

/// The 0.2.0 world (byte lists; no `admission`).
pub mod v02 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2",
        world: "plugin",
        ownership: Borrowing { duplicate_if_necessary: true },
    });
}

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
    /// `wisp:plugin@0.3.0`: 0.2's, and the `admission` call.
    V0_3,
}

impl Abi {
    /// `0.1.0`, `0.2.0`, `0.3.0`.
    pub fn version(self) -> &'static str {
        match self {
            Abi::V0_1 => "0.1.0",
            Abi::V0_2 => "0.2.0",
            Abi::V0_3 => "0.3.0",
        }
    }

    /// The name of the `listener` interface a component of this ABI exports.
    pub fn listener_export(self) -> String {
        format!("wisp:plugin/listener@{}", self.version())
    }

    /// The name of the `admission` interface a component of this ABI may export (none before
    /// 0.3).
    pub fn admission_export(self) -> Option<String> {
        (self >= Abi::V0_3).then(|| format!("wisp:plugin/admission@{}", self.version()))
    }

    /// Every ABI the host loads, newest first.
    pub const ALL: [Abi; 3] = [Abi::V0_3, Abi::V0_2, Abi::V0_1];
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
    /// A 0.3.0 component, and its `admission` export when it has one.
    V0_3(v03::PluginPre<T>, Option<v03_admission::AdmissionIndices>),
}

// Not derived: that would ask `T: Clone`, and a store's data need not be.
impl<T: 'static> Clone for PluginPre<T> {
    fn clone(&self) -> Self {
        match self {
            PluginPre::V0_1(p) => PluginPre::V0_1(p.clone()),
            PluginPre::V0_2(p) => PluginPre::V0_2(p.clone()),
            PluginPre::V0_3(p, a) => PluginPre::V0_3(p.clone(), a.clone()),
        }
    }
}

impl<T: 'static> PluginPre<T> {
    /// The ABI of the component.
    pub fn abi(&self) -> Abi {
        match self {
            PluginPre::V0_1(_) => Abi::V0_1,
            PluginPre::V0_2(_) => Abi::V0_2,
            PluginPre::V0_3(..) => Abi::V0_3,
        }
    }

    /// Whether the component takes admission requests (exports `admission`).
    pub fn admits(&self) -> bool {
        matches!(self, PluginPre::V0_3(_, Some(_)))
    }

    /// The engine the component was compiled for (a store for it must be of this engine).
    pub fn engine(&self) -> &wasmtime::Engine {
        match self {
            PluginPre::V0_1(p) => p.engine(),
            PluginPre::V0_2(p) => p.engine(),
            PluginPre::V0_3(p, _) => p.engine(),
        }
    }
}
