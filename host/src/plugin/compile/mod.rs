//! Compiling modules: bytes to a wasmtime `Component`, once per module and engine settings.
//! Knows nothing of stores, instances or plugins. Lowest first:
//!
//! - [`config`]: the engine's settings; [`loaded`]: what a load gives, or why not ([`Tier`],
//!   [`LoadError`]); [`budget`]: the container's memory, the host's memory plan;
//!   [`cputime`]: a thread's CPU time; [`cache`]: the on-disk artifacts, authenticated before
//!   use.
//! - [`compiler`]: a compile in a child process, bounded in time and memory, and the wasmtime
//!   `Config` parent and child share.
//! - [`slots`]: how many compile at once, starts before tier-ups; [`tier_up`]: the first-load
//!   tier's state.
//! - [`modules`]: the compiled modules (memory, disk, compile), failed compiles' backoff, the
//!   background tier-up compiles.

pub mod budget;
pub mod cache;
pub mod compiler;
pub mod config;
pub mod cputime;
pub mod loaded;
pub mod modules;
pub mod slots;
pub mod tier_up;

pub use config::{
    BoundNames, DEFAULT_COMPILE_MEMORY, DEFAULT_COMPILE_TIMEOUT, DEFAULT_EPOCH_TICK,
    DEFAULT_MAX_MODULE_SIZE, EngineConfig, FIRST_LOAD_TIER_MIN, MIN_COMPILE_MEMORY, WALL_BACKSTOP,
    default_cache_dir, wisp_cache_dir,
};
pub use loaded::{LoadError, LoadSource, LoadedComponent, Tier};
pub use modules::{COMPILE_BACKOFF, MAX_COMPILE_BACKOFF, Modules, TIER_UP_TRIES};
pub use tier_up::TierUpHold;
