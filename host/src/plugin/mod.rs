//! Wasm plugins: each registered listener is a sandboxed WebAssembly component (world
//! `wisp:plugin/plugin`, see `wit/`) receiving its notifications over WIT from its own queue.
//!
//! - [`bindings`]: every `bindgen!` output.
//! - [`engine`]: the shared engine, epoch ticker, compile cache; [`cache`]: its on-disk
//!   artifacts, authenticated before use; [`compiler`]: compiles in a child process, bounded in
//!   time and memory.
//! - [`state`] / [`host_api`]: store data and the `host` interface (logs, cache reads within
//!   grants, metrics); [`output`]: stdout/stderr to the log.
//! - [`instance`]: one store + instance with deadline, memory cap and fuel.
//! - [`runtime`]: failure policy, fresh instances, quarantine; the informer handler.
//! - [`loader`]: read, compile, link, instantiate, `describe` and `init` a module, the one way
//!   every module enters the host (start, reload, `wisp check`/`replay`/`test`);
//!   [`module_file`]: the one reader of module files (regular files under a size cap).
//! - [`manager`]: attach checked plugins to their informers; [`reload`]: swap a new version in;
//!   [`probation`]: keep the old one until the new one proves itself, roll back if it does not.
//! - [`spec`] / [`status`] / [`error`]: what to run, what can be read, what went wrong.
//!
//! Nothing here knows about HTTP or kube.

pub mod batch;
pub mod bindings;
pub mod budget;
pub mod cache;
pub mod clock;
pub mod compiler;
pub mod cputime;
pub mod engine;
pub mod error;
pub mod host_api;
pub mod instance;
pub mod loader;
pub mod manager;
pub mod module_file;
pub mod output;
pub mod probation;
pub mod reload;
pub mod runtime;
pub mod set;
pub mod spec;
pub mod state;
pub mod status;

pub use engine::{EngineConfig, LoadSource, PluginEngine};
pub use error::PluginError;
pub use loader::{CheckedPlugin, LoadReport, check_module};
pub use manager::{PluginHandle, PluginManager};
pub use set::PluginSet;
pub use spec::{FailurePolicy, Limits, LogLevel, OnFailure, PluginSpec};
pub use status::{PluginState, PluginStatus};
