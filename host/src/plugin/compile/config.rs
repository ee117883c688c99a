//! The engine's settings ([`EngineConfig`]): epoch tick, fuel, the compile bounds and how
//! refusals name them, the first-load tier, the module size cap; and where Wisp's caches live.

use std::path::PathBuf;
use std::time::Duration;

/// Default epoch tick: deadlines are enforced to within one tick.
pub const DEFAULT_EPOCH_TICK: Duration = Duration::from_millis(10);

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Directory of precompiled artifacts (`None`: compile in memory only). It must be a
    /// directory owned by this user with no access for others (created 0700 when absent), its
    /// MAC key is the sibling file `<dir>.key`; see [`super::cache`]. When either fails its
    /// checks the engine warns once and compiles in memory only.
    pub cache_dir: Option<PathBuf>,
    /// Epoch tick.
    pub epoch_tick: Duration,
    /// Fuel metering (needed for `limits.fuel`; costs some speed).
    pub fuel: bool,
    /// Epoch interruption: how a call's deadline cuts it. Always on in a host; off only to
    /// measure what the checks cost (`wisp-bench`): without it no deadline holds.
    pub epoch_interruption: bool,
    /// How much CPU time one module's compile may take (`engine.compileTimeout`; the child's
    /// wall clock is bounded at [`WALL_BACKSTOP`] times it); a module over it is refused (see
    /// `PluginEngine::load`).
    pub compile_timeout: Duration,
    /// How refusals name the bounds (default: the config's keys).
    pub bound_names: BoundNames,
    /// How much address space one module's compile may take (`engine.compileMemory`), bytes;
    /// a module over it is refused. Enforced only with a `compiler`.
    pub compile_memory: u64,
    /// The executable to compile in (the `wisp` binary, run as `wisp __compile`; see
    /// [`super::compiler`]): each compile is a child process, killed at `compile_timeout` and
    /// limited to `compile_memory`. `None` (library embedders, in-process tests): compiles run
    /// on a thread of this process, bounded by `compile_timeout` only in that the module is
    /// refused then; the compile itself runs on to its end, in unbounded memory.
    pub compiler: Option<PathBuf>,
    /// How many modules compile at once at most (`wisp run`: `executor.workers`); a compile
    /// beyond waits for one to end. The memory plan counts this many `compile_memory`.
    pub max_compiles: usize,
    /// The first-load tier (`engine.firstLoadTier`): a module of at least `first_load_tier_min`
    /// bytes that is in neither cache is compiled with Winch (~6x faster to compile, 1.6-2.2x
    /// slower to run) so its plugin starts at once, and with Cranelift in the background into
    /// the module cache; the plugins running the Winch code are then reloaded onto it
    /// (by the plugin manager). Off: every module is compiled with Cranelift before it starts.
    pub first_load_tier: bool,
    /// The least module size the first-load tier applies to, bytes.
    pub first_load_tier_min: usize,
    /// Where the first-load tier's background threads run (the host's supervisor's: named,
    /// joined at shutdown, a panic reported).
    pub tasks: crate::tasks::Tasks,
    /// The largest module file read (`engine.maxModuleSize`), bytes: a larger one is refused
    /// before it is read (the runtime's module file reader).
    pub max_module_size: u64,
}

/// The default of [`EngineConfig::first_load_tier_min`]: the Rust plugins (0.1-1 MB) compile
/// with Cranelift in 0.1-2 s; the Python and JavaScript ones (12-20 MB) in 9-11 s of CPU, with
/// Winch in 1.6 s (BENCHMARKS.md, "Cold compiles").
pub const FIRST_LOAD_TIER_MIN: usize = 4 << 20;

/// The default of `engine.compileTimeout`, CPU time of one compile: the release host compiles
/// the example Python and JavaScript components (~20 MB) in 9-11 s of CPU, a debug host in ~25 s.
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(120);

/// A compile's wall-clock backstop, in multiples of its CPU-time bound: a compile starved of CPU
/// (a pod's CPU quota, a busy node: at 0.5 core a compile takes twice its CPU time, behind
/// other work far more) still ends, while one that sleeps or waits cannot run for ever.
pub const WALL_BACKSTOP: u32 = 10;

/// How a user sets the compile bounds, as refusals name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundNames {
    /// The CPU-time bound.
    pub timeout: &'static str,
    /// The memory bound.
    pub memory: &'static str,
}

impl BoundNames {
    /// `wisp run`: the config's keys.
    pub const CONFIG: Self = Self {
        timeout: "engine.compileTimeout",
        memory: "engine.compileMemory",
    };
    /// `wisp check`, `test` and `replay`: their flags.
    pub const FLAGS: Self = Self {
        timeout: "--compile-timeout",
        memory: "--compile-memory",
    };
}

/// The default of `engine.compileMemory`, the address space of a compile's child process. The
/// example Python and JavaScript components (19 and 12 MB) each fail to compile in 480 MiB and
/// compile in 512 MiB, peaking at 374 and 383 MiB resident; a Rust one (0.9 MB) at 66 MiB
/// (debug host, 2 cores; `cargo xtask plugins`, then `RUST_LOG=info wisp check` with an empty
/// cache logs each child's peak, `--compile-memory` sets the bound). 1 GiB leaves them twice that.
pub const DEFAULT_COMPILE_MEMORY: u64 = 1 << 30;

/// The least `engine.compileMemory` accepted: the child's own code, threads and engine.
pub const MIN_COMPILE_MEMORY: u64 = 128 << 20;

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            cache_dir: default_cache_dir(),
            epoch_tick: DEFAULT_EPOCH_TICK,
            fuel: false,
            epoch_interruption: true,
            compile_timeout: DEFAULT_COMPILE_TIMEOUT,
            bound_names: BoundNames::CONFIG,
            compile_memory: DEFAULT_COMPILE_MEMORY,
            compiler: None,
            max_compiles: std::thread::available_parallelism().map_or(1, |n| n.get()),
            first_load_tier: false,
            first_load_tier_min: FIRST_LOAD_TIER_MIN,
            tasks: crate::tasks::Tasks::default(),
            max_module_size: DEFAULT_MAX_MODULE_SIZE,
        }
    }
}

/// The default of `engine.maxModuleSize`: the example Python and JavaScript components are 19
/// and 12 MB, a Rust one under 1 MB; also the default of `oci.maxModuleSize`.
pub const DEFAULT_MAX_MODULE_SIZE: u64 = 64 << 20;

/// `$XDG_CACHE_HOME/wisp/<sub>` or `$HOME/.cache/wisp/<sub>`: Wisp's caches (modules, OCI
/// pulls, plugin toolchains).
pub fn wisp_cache_dir(sub: &str) -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("wisp").join(sub))
}

/// `$XDG_CACHE_HOME/wisp/modules` or `$HOME/.cache/wisp/modules`.
pub fn default_cache_dir() -> Option<PathBuf> {
    wisp_cache_dir("modules")
}
