//! Wasm plugins: each registered listener is a sandboxed WebAssembly component (world
//! `wisp:plugin/plugin`, see `wit/`) receiving its notifications over WIT from its own queue.
//!
//! Cut by job into sub-modules, each importing only those listed before it (no import cycle
//! between them, nor between the files inside one: `.ci/circles.py` fails CI on one). Lowest
//! first:
//!
//! 1. Leaves: [`spec`] (what to run), [`bindings`] (every `bindgen!` output), [`batch`] (the
//!    batches 0.2 plugins receive, in wire form).
//! 2. [`compile`]: bytes to a compiled component, once per module: the engine's settings, the
//!    compile child bounded in time and memory, the on-disk cache, compile slots, failed
//!    compiles' backoff, the first-load tier ([`compile::Tier`], [`compile::LoadError`]).
//! 3. [`error`] (what went wrong, as the user reads it); [`status`] (what can be read of a
//!    plugin: state, counters, logs, its running version).
//! 4. [`sandbox`]: one instance: its store, limits, call clock, output, and its link against
//!    the host.
//! 5. [`host_api`]: the host's side of each WIT interface plugins import, one file each.
//! 6. [`engine`]: the shared [`PluginEngine`]: the compiled modules, the host's linker, each
//!    module linked once, the epoch ticker.
//! 7. [`runtime`]: running plugins: calls and failure policy, loading and checking a module,
//!    attaching to informers, reload, probation, tier-up reloads.
//!
//! Nothing here knows about HTTP or kube.

pub mod batch;
pub mod bindings;
pub mod compile;
pub mod engine;
pub mod error;
pub mod host_api;
pub mod runtime;
pub mod sandbox;
pub mod spec;
pub mod status;

// The paths of the files before `plugin/` was cut by job, kept for callers outside it.
pub use compile::{budget, cache, compiler, cputime};
pub use runtime::{loader, manager, module_file, probation, reload, set};
pub use sandbox::{clock, instance, output, state};

pub use compile::{EngineConfig, LoadSource};
pub use engine::PluginEngine;
pub use error::PluginError;
pub use runtime::loader::{CheckedPlugin, LoadReport, check_module};
pub use runtime::manager::{PluginHandle, PluginManager};
pub use runtime::set::PluginSet;
pub use spec::{FailurePolicy, Limits, LogLevel, OnFailure, PluginSpec};
pub use status::{PluginState, PluginStatus};
