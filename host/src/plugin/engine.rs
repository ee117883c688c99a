//! One wasmtime `Engine` per host: epoch ticker, shared linker (WASI p2 with nothing granted,
//! `wasi:http` with every request refused, plus the `host` interface), and compilation once per
//! content hash, bounded in time and memory in a child process ([`super::compiler`]), with an
//! on-disk cache of precompiled artifacts.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine};

use super::bindings::{Abi, PluginPre, v01, v02};
use super::cache::ModuleCache;
use super::compiler::{ArtifactSettings, ChildCompiler, Urgency};
use super::error::PluginError;
use super::state::StoreData;
use crate::sync::{lock, wait};

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
    /// [`PluginEngine::load`]).
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
    /// bytes that is in neither cache is compiled with Winch (~6x faster to compile, ~1.75x
    /// slower to run) so its plugin starts at once, and with Cranelift in the background into
    /// the module cache; the plugins running the Winch code are then reloaded onto it
    /// ([`super::manager`]). Off: every module is compiled with Cranelift before it starts.
    pub first_load_tier: bool,
    /// The least module size the first-load tier applies to, bytes.
    pub first_load_tier_min: usize,
    /// The largest module file read (`engine.maxModuleSize`), bytes: a larger one is refused
    /// before it is read (see [`super::module_file`]).
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
            max_module_size: super::module_file::DEFAULT_MAX_MODULE_SIZE,
        }
    }
}

/// The wasmtime settings of an engine: the parent's and a compile child's are made here, so an
/// artifact the child writes loads into the parent's engine.
pub(super) fn wasm_config(s: ArtifactSettings) -> Config {
    let mut c = Config::new();
    c.wasm_component_model(true);
    c.epoch_interruption(s.epoch_interruption);
    c.consume_fuel(s.fuel);
    if s.baseline {
        // Winch compiles the same epoch checks (function entries, loop headers) and fuel.
        c.strategy(wasmtime::Strategy::Winch);
    }
    c
}

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

/// Where a component came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoadSource {
    /// Already compiled in this process.
    Memory,
    /// Loaded from the on-disk cache of precompiled artifacts.
    Disk,
    /// Compiled now.
    Compiled,
}

impl LoadSource {
    /// How a load came about, as the CLI says it (`compiled`, `loaded from the module cache`).
    pub fn how(self) -> &'static str {
        match self {
            Self::Compiled => "compiled",
            Self::Disk => "loaded from the module cache",
            Self::Memory => "loaded from memory",
        }
    }
}

/// Which compiler a component's code comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tier {
    /// Cranelift, optimizing: what the module cache holds.
    #[default]
    Optimized,
    /// Winch, the first-load tier, until the Cranelift compile lands.
    Baseline,
}

impl Tier {
    /// As `/plugins` and the log say it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Optimized => "optimized",
            Self::Baseline => "baseline",
        }
    }
}

/// A compiled component and how it was obtained.
#[derive(Clone)]
pub struct LoadedComponent {
    /// The component.
    pub component: Component,
    /// Where it came from.
    pub source: LoadSource,
    /// How long loading took.
    pub elapsed: Duration,
    /// SHA-256 of the module bytes, hex.
    pub hash: String,
    /// Its compiler.
    pub tier: Tier,
}

/// Why bytes could not become a component (the caller adds the plugin and path).
#[derive(Clone, Debug)]
pub enum LoadError {
    /// No `\0asm` header.
    NotWasm,
    /// A core module.
    NotComponent,
    /// Invalid component.
    Invalid(String),
    /// Its compile ran over the engine's `compile_timeout`: that much CPU time, or (`wall`)
    /// its wall-clock backstop, [`WALL_BACKSTOP`] times as long.
    TooSlow {
        /// The bound (`compile_timeout`).
        limit: Duration,
        /// How the user sets it ([`BoundNames`]).
        setting: &'static str,
        /// The wall-clock backstop ended it, not its CPU time.
        wall: bool,
    },
    /// Its compile needed more than the engine's `compile_memory` bytes.
    TooBig {
        /// The bound, bytes.
        limit: u64,
        /// How the user sets it ([`BoundNames`]).
        setting: &'static str,
    },
    /// The compiler process failed otherwise (what it said, or how it ended).
    Crashed(String),
}

struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The compiles running, at most `max` at once. Starts and reloads (a plugin or an operator
/// waits for them) go first: a background tier-up starts only while none of them waits, and
/// leaves one slot free for them (with `max` of 2 or more).
struct CompileSlots {
    state: Mutex<Slots>,
    freed: Condvar,
    max: usize,
}

/// What [`CompileSlots`] holds and who waits.
#[derive(Debug, Default)]
struct Slots {
    running: usize,
    /// Of `running`, the background compiles.
    background: usize,
    /// Starts and reloads waiting for a slot.
    foreground_waiting: usize,
}

impl Slots {
    /// Whether a compile of `urgency` may take a slot now, out of `max`.
    fn may_take(&self, urgency: Urgency, max: usize) -> bool {
        match urgency {
            Urgency::Foreground => self.running < max,
            Urgency::Background => {
                self.running < max
                    && self.foreground_waiting == 0
                    && (max == 1 || self.background + 1 < max)
            }
        }
    }
}

/// One compile's place among [`CompileSlots`], given back when dropped.
struct CompileSlot<'a>(&'a CompileSlots, Urgency);

impl CompileSlots {
    /// Waits for a place (as long as the compiles that hold them take: each at most its
    /// bound).
    fn take(&self, urgency: Urgency) -> CompileSlot<'_> {
        let mut st = lock(&self.state);
        let foreground = urgency == Urgency::Foreground;
        st.foreground_waiting += usize::from(foreground);
        while !st.may_take(urgency, self.max) {
            st = wait(&self.freed, st);
        }
        st.foreground_waiting -= usize::from(foreground);
        st.running += 1;
        st.background += usize::from(!foreground);
        CompileSlot(self, urgency)
    }
}

impl Drop for CompileSlot<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.0.state);
        st.running -= 1;
        st.background -= usize::from(self.1 == Urgency::Background);
        drop(st);
        // Waiters wait on different conditions: each checks its own.
        self.0.freed.notify_all();
    }
}

/// The first-load tier: an engine on Winch with its own linker (a Winch artifact loads only
/// into an engine on Winch), and its components by module hash while their Cranelift compile
/// runs.
struct Baseline {
    engine: Engine,
    linker: Linker<StoreData>,
    settings: ArtifactSettings,
    compiled: Mutex<HashMap<String, Component>>,
    min: usize,
}

/// A module whose Cranelift compile failed: not compiled again before `until` (a reload, a
/// restart of its plugin or another plugin of the same module gets the same refusal at once),
/// so a module over a bound costs its compile once per backoff, not once per try.
struct Failed {
    error: LoadError,
    until: Instant,
    /// Failures in a row (the backoff doubles with each).
    times: u32,
}

/// The first wait after a failed compile of a module; it doubles with each failure in a row,
/// up to [`MAX_COMPILE_BACKOFF`].
pub const COMPILE_BACKOFF: Duration = Duration::from_secs(30);
/// The longest wait between two compiles of a module that failed.
pub const MAX_COMPILE_BACKOFF: Duration = Duration::from_secs(30 * 60);
/// How many times a background (tier-up) compile that failed for a reason that may pass (the
/// wall-clock backstop, a crashed compiler) is tried, the backoff apart.
pub const TIER_UP_TRIES: u32 = 3;

impl Failed {
    /// The wait after the `times`-th failure in a row.
    fn backoff(times: u32) -> Duration {
        COMPILE_BACKOFF
            .saturating_mul(1 << times.saturating_sub(1).min(16))
            .min(MAX_COMPILE_BACKOFF)
    }
}

impl LoadError {
    /// Whether compiling again may succeed: the wall-clock backstop (a machine too busy) or a
    /// compiler that crashed; not a module over its CPU or memory bound, nor an invalid one.
    pub fn may_pass(&self) -> bool {
        matches!(self, Self::TooSlow { wall: true, .. } | Self::Crashed(_))
    }
}

/// A Cranelift compile in the background: its outcome once in.
#[derive(Default)]
struct Upgrade {
    done: Mutex<Option<Result<(), LoadError>>>,
    landed: Condvar,
}

/// The shared engine.
pub struct PluginEngine {
    engine: Engine,
    linker: Linker<StoreData>,
    /// The checked on-disk cache, if its directory and key passed their checks.
    cache: Option<ModuleCache>,
    /// Identifies engine settings + wasmtime version: artifacts only load into a matching engine.
    fingerprint: String,
    compiled: Mutex<HashMap<String, Component>>,
    /// Each compiled component linked against the host once, by content hash: its imports
    /// resolved (~7 KiB of host heap per plugin when each plugin linked its own), shared by
    /// every plugin of that module. It holds the host's functions only: what a plugin may do
    /// (its grants, budget, status) is in its own store.
    linked: Mutex<HashMap<String, PluginPre<StoreData>>>,
    tick: Duration,
    fuel: bool,
    /// `engine.maxModuleSize`: the loader reads no larger module file.
    max_module_size: u64,
    compile_timeout: Duration,
    bound_names: BoundNames,
    /// Compiles in child processes, when the engine was given a compiler.
    child: Option<ChildCompiler>,
    /// What a child must compile with.
    settings: ArtifactSettings,
    /// Compiles at once, at most `max_compiles`.
    slots: CompileSlots,
    /// Modules whose compile ran past the timeout and still runs, by hash.
    overdue: Arc<Mutex<std::collections::HashSet<String>>>,
    stop: Arc<AtomicBool>,
    /// The epoch ticker's thread, until [`PluginEngine::stop_ticker`] joins it.
    ticker: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// The first-load tier, when on.
    baseline: Option<Baseline>,
    /// Cranelift compiles running in the background, by module hash.
    upgrades: Mutex<HashMap<String, Arc<Upgrade>>>,
    /// Modules whose Cranelift compile failed, by cache key, until their backoff ends.
    failed: Mutex<HashMap<String, Failed>>,
    /// How many [`TierUpHold`]s are alive: background compiles wait to start while any is.
    held: Arc<(Mutex<usize>, Condvar)>,
}

/// While alive, the first-load tier's background Cranelift compiles wait to start: what a
/// plugin does on its first-load (Winch) code can be observed before it is moved. From
/// [`PluginEngine::hold_tier_up`].
#[must_use = "the hold ends when this is dropped"]
pub struct TierUpHold(Arc<(Mutex<usize>, Condvar)>);

impl Drop for TierUpHold {
    fn drop(&mut self) {
        *lock(&self.0.0) -= 1;
        self.0.1.notify_all();
    }
}

/// The host's linker on `engine`: WASI p2 with nothing granted, `wasi:http` refusing every
/// request, the clocks, and both worlds' `host` interface.
fn host_linker(engine: &Engine) -> Result<Linker<StoreData>, PluginError> {
    let mut linker: Linker<StoreData> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
        .and_then(|()| wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker))
        .and_then(|()| super::clock::add_to_linker(&mut linker))
        .map_err(|e| PluginError::Engine(format!("{e:#}")))?;
    v02::Plugin::add_to_linker::<StoreData, HasSelf<StoreData>>(&mut linker, |s| s)
        .map_err(|e| PluginError::Engine(format!("{e:#}")))?;
    v01::Plugin::add_to_linker::<StoreData, HasSelf<StoreData>>(&mut linker, |s| s)
        .map_err(|e| PluginError::Engine(format!("{e:#}")))?;
    Ok(linker)
}

/// The first-load tier's engine, when `config` asks for it.
fn baseline(
    config: &EngineConfig,
    settings: ArtifactSettings,
) -> Result<Option<Baseline>, PluginError> {
    if !config.first_load_tier {
        return Ok(None);
    }
    let settings = ArtifactSettings {
        baseline: true,
        ..settings
    };
    // Winch does not support every target (x86_64 and aarch64 only): without it, the tier is off.
    let engine = match Engine::new(&wasm_config(settings)) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %format!("{e:#}"), "engine.firstLoadTier: Winch is not available here; every module is compiled with Cranelift before it starts");
            return Ok(None);
        }
    };
    Ok(Some(Baseline {
        linker: host_linker(&engine)?,
        engine,
        settings,
        compiled: Mutex::default(),
        min: config.first_load_tier_min,
    }))
}

impl Drop for PluginEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl PluginEngine {
    /// Builds the engine and starts its epoch ticker thread.
    pub fn new(config: EngineConfig) -> Result<Arc<Self>, PluginError> {
        let settings = ArtifactSettings {
            epoch_interruption: config.epoch_interruption,
            fuel: config.fuel,
            baseline: false,
        };
        let engine = Engine::new(&wasm_config(settings))
            .map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        let linker = host_linker(&engine)?;
        let baseline = baseline(&config, settings)?;

        let mut h = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut h);
        env!("CARGO_PKG_VERSION").hash(&mut h);
        let fingerprint = hex(&h.0.finalize()[..8]);

        let cache = config
            .cache_dir
            .as_deref()
            .and_then(|dir| match ModuleCache::open(dir) {
                Ok(c) => Some(c),
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "module cache not used; compiling in memory only");
                    None
                }
            });

        let stop = Arc::new(AtomicBool::new(false));
        // Both tiers' engines: a deadline holds on either code.
        let mut ticked = vec![engine.clone()];
        ticked.extend(baseline.as_ref().map(|b| b.engine.clone()));
        let (flag, tick) = (
            stop.clone(),
            config.epoch_tick.max(Duration::from_millis(1)),
        );
        let ticker = std::thread::Builder::new()
            .name("wisp-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    ticked.iter().for_each(Engine::increment_epoch);
                }
            })
            .map_err(|e| PluginError::Engine(format!("cannot start the epoch thread: {e}")))?;
        Ok(Arc::new(Self {
            engine,
            linker,
            cache,
            fingerprint,
            compiled: Mutex::default(),
            linked: Mutex::default(),
            tick,
            fuel: config.fuel,
            max_module_size: config.max_module_size,
            compile_timeout: config.compile_timeout,
            bound_names: config.bound_names,
            child: config.compiler.map(|exe| ChildCompiler {
                exe,
                timeout: config.compile_timeout,
                memory: config.compile_memory,
                names: config.bound_names,
                container: super::budget::CgroupMemory::of_self(),
            }),
            settings,
            slots: CompileSlots {
                state: Mutex::default(),
                freed: Condvar::new(),
                max: config.max_compiles.max(1),
            },
            overdue: Arc::default(),
            stop,
            ticker: Mutex::new(Some(ticker)),
            baseline,
            upgrades: Mutex::default(),
            failed: Mutex::default(),
            held: Arc::default(),
        }))
    }

    /// Stops the epoch ticker and joins its thread (deadlines no longer cut calls after it).
    pub fn stop_ticker(&self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = lock(&self.ticker).take() {
            let _ = t.join();
        }
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether fuel metering is on.
    pub fn fuel(&self) -> bool {
        self.fuel
    }

    /// The largest module file read, bytes (`engine.maxModuleSize`).
    pub fn max_module_size(&self) -> u64 {
        self.max_module_size
    }

    /// The epoch tick.
    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// Epoch ticks for a deadline (at least one).
    pub fn deadline_ticks(&self, deadline: Duration) -> u64 {
        (deadline.as_nanos().div_ceil(self.tick.as_nanos())).max(1) as u64
    }

    /// Compiles `bytes`, or takes the compiled component from memory or the disk cache. With
    /// the first-load tier, a large module in neither cache is compiled with Winch and returned
    /// as [`Tier::Baseline`] while its Cranelift compile runs in the background
    /// ([`PluginEngine::wait_optimized`]).
    pub fn load(self: &Arc<Self>, bytes: &[u8]) -> Result<LoadedComponent, LoadError> {
        self.load_with(bytes, true)
    }

    /// [`PluginEngine::load`], with the first-load tier only when `first_load` (a reload keeps
    /// the running version meanwhile, so it waits for the Cranelift code).
    pub fn load_with(
        self: &Arc<Self>,
        bytes: &[u8],
        first_load: bool,
    ) -> Result<LoadedComponent, LoadError> {
        let start = Instant::now();
        if !super::module_file::is_wasm_header(bytes) {
            return Err(LoadError::NotWasm);
        }
        if bytes[4..8] == [1, 0, 0, 0] {
            return Err(LoadError::NotComponent);
        }
        let hash = hex(&Sha256::digest(bytes));
        let key = format!("{hash}-{}", self.fingerprint);
        let done = |component: Component, source, tier| LoadedComponent {
            component,
            source,
            elapsed: start.elapsed(),
            hash: hash.clone(),
            tier,
        };
        if let Some(c) = lock(&self.compiled).get(&key) {
            return Ok(done(c.clone(), LoadSource::Memory, Tier::Optimized));
        }
        if let Some(c) = self.cached_on_disk(&key) {
            return Ok(done(c, LoadSource::Disk, Tier::Optimized));
        }
        let tiered = self
            .baseline
            .as_ref()
            .filter(|b| first_load && bytes.len() >= b.min);
        if let Some(b) = tiered {
            if let Some(c) = lock(&b.compiled).get(&hash) {
                return Ok(done(c.clone(), LoadSource::Memory, Tier::Baseline));
            }
            match self.compile_baseline(b, bytes, &hash) {
                Ok(c) => {
                    self.start_upgrade(bytes, &hash, &key);
                    return Ok(done(c, LoadSource::Compiled, Tier::Baseline));
                }
                // Winch refuses some features (GC, tail calls, exceptions): Cranelift then,
                // which also names what is wrong with an invalid module.
                Err(e) => {
                    tracing::info!(module = %&hash[..12], error = ?e, "not compiled by the first-load tier; compiling with Cranelift")
                }
            }
        }
        let c = self.compile_optimized(bytes, &hash, &key, Urgency::Foreground)?;
        Ok(done(c, LoadSource::Compiled, Tier::Optimized))
    }

    /// The precompiled artifact of `key` from the disk cache, when there and trusted.
    fn cached_on_disk(&self, key: &str) -> Option<Component> {
        let cache = self.cache.as_ref()?;
        match cache.get(key) {
            Ok(None) => None,
            Ok(Some(art)) => match load_precompiled(&self.engine, &art) {
                Ok(c) => {
                    self.remember(key, &c);
                    Some(c)
                }
                Err(e) => {
                    tracing::warn!(path = %cache.artifact_path(key).display(), error = %e, "precompiled module unusable; compiling again");
                    None
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "precompiled module not trusted; compiling again");
                None
            }
        }
    }

    /// Compiles with Cranelift (a compile slot, the child's bounds), into the module cache and
    /// memory.
    fn compile_optimized(
        &self,
        bytes: &[u8],
        hash: &str,
        key: &str,
        urgency: Urgency,
    ) -> Result<Component, LoadError> {
        if let Some(f) = lock(&self.failed).get(key)
            && Instant::now() < f.until
        {
            tracing::info!(module = %&hash[..12], retry_in = ?f.until.saturating_duration_since(Instant::now()), "not compiled again yet: its last compile failed");
            return Err(f.error.clone());
        }
        let slot = self.slots.take(urgency);
        let compiled = match &self.child {
            Some(child) => {
                self.compile_in_child(child, self.settings, &self.engine, bytes, hash, urgency)
            }
            None => self.compile(&self.engine, bytes, hash).map(|c| (c, None)),
        };
        drop(slot);
        let (c, artifact) = match compiled {
            Ok(done) => {
                lock(&self.failed).remove(key);
                done
            }
            Err(error) => {
                let mut failed = lock(&self.failed);
                let times = failed.get(key).map_or(0, |f| f.times) + 1;
                failed.insert(
                    key.to_owned(),
                    Failed {
                        error: error.clone(),
                        until: Instant::now() + Failed::backoff(times),
                        times,
                    },
                );
                return Err(error);
            }
        };
        if let Some(cache) = &self.cache {
            match artifact.map_or_else(|| c.serialize(), Ok) {
                Ok(art) => {
                    if let Err(e) = cache.put(key, &art) {
                        tracing::warn!(error = %e, "could not write the precompiled module");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not serialize the compiled module"),
            }
        }
        self.remember(key, &c);
        Ok(c)
    }

    /// Compiles with Winch, within the same bounds; kept in memory only, until the Cranelift
    /// artifact replaces it.
    fn compile_baseline(
        &self,
        b: &Baseline,
        bytes: &[u8],
        hash: &str,
    ) -> Result<Component, LoadError> {
        let slot = self.slots.take(Urgency::Foreground);
        let c = match &self.child {
            Some(child) => {
                self.compile_in_child(
                    child,
                    b.settings,
                    &b.engine,
                    bytes,
                    hash,
                    Urgency::Foreground,
                )?
                .0
            }
            None => self.compile(&b.engine, bytes, hash)?,
        };
        drop(slot);
        lock(&b.compiled).insert(hash.to_owned(), c.clone());
        Ok(c)
    }

    /// Starts the Cranelift compile of a module just compiled with Winch, on a thread of its
    /// own (once per module).
    fn start_upgrade(self: &Arc<Self>, bytes: &[u8], hash: &str, key: &str) {
        let up = Arc::new(Upgrade::default());
        {
            let mut running = lock(&self.upgrades);
            if running.contains_key(hash) {
                return;
            }
            running.insert(hash.to_owned(), up.clone());
        }
        let (engine, bytes, module, key) = (
            self.clone(),
            bytes.to_vec(),
            hash.to_owned(),
            key.to_owned(),
        );
        let spawned = std::thread::Builder::new()
            .name("wisp-tier-up".into())
            .spawn(move || {
                {
                    let (count, released) = &*engine.held;
                    let mut n = lock(count);
                    while *n > 0 {
                        n = wait(released, n);
                    }
                }
                let began = Instant::now();
                let mut out = engine
                    .compile_optimized(&bytes, &module, &key, Urgency::Background)
                    .map(drop);
                // A failure that may pass is tried again after its backoff, a few times.
                for _ in 1..TIER_UP_TRIES {
                    match &out {
                        Err(e) if e.may_pass() => {}
                        _ => break,
                    }
                    let wait = lock(&engine.failed)
                        .get(&key)
                        .map_or(Duration::ZERO, |f| f.until.saturating_duration_since(Instant::now()));
                    tracing::info!(module = %&module[..12], ?wait, "the background compile failed; trying again after its backoff");
                    std::thread::sleep(wait);
                    out = engine
                        .compile_optimized(&bytes, &module, &key, Urgency::Background)
                        .map(drop);
                }
                tracing::info!(module = %&module[..12], took = ?began.elapsed(), ok = out.is_ok(), "background Cranelift compile of a first-load module ended");
                if let Some(b) = &engine.baseline {
                    lock(&b.compiled).remove(&module);
                }
                *lock(&up.done) = Some(out);
                up.landed.notify_all();
                lock(&engine.upgrades).remove(&module);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the background compile; the module stays on its first-load code");
            lock(&self.upgrades).remove(hash);
        }
    }

    /// Holds the first-load tier's background compiles (those started meanwhile too) until
    /// the returned guard is dropped.
    pub fn hold_tier_up(&self) -> TierUpHold {
        *lock(&self.held.0) += 1;
        TierUpHold(self.held.clone())
    }

    /// Waits for the background Cranelift compile of module `hash` (SHA-256, hex) to end: `Ok`
    /// once its artifact is in memory (and the module cache), or why it failed.
    pub fn wait_optimized(&self, hash: &str) -> Result<(), LoadError> {
        let running = lock(&self.upgrades).get(hash).cloned();
        if let Some(up) = running {
            let mut done = lock(&up.done);
            loop {
                if let Some(out) = done.as_ref() {
                    return out.clone();
                }
                done = wait(&up.landed, done);
            }
        }
        let key = format!("{hash}-{}", self.fingerprint);
        if lock(&self.compiled).contains_key(&key) {
            Ok(())
        } else {
            Err(LoadError::Crashed(
                "its Cranelift compile did not complete".into(),
            ))
        }
    }

    /// Which tier a linked component's code comes from.
    pub fn tier(&self, pre: &PluginPre<StoreData>) -> Tier {
        match &self.baseline {
            Some(b) if Engine::same(pre.engine(), &b.engine) => Tier::Baseline,
            _ => Tier::Optimized,
        }
    }

    /// Compiles in a child process within the engine's time and memory bounds, and loads the
    /// artifact it wrote (returned too, for the module cache).
    fn compile_in_child(
        &self,
        child: &ChildCompiler,
        settings: ArtifactSettings,
        engine: &Engine,
        bytes: &[u8],
        hash: &str,
        urgency: Urgency,
    ) -> Result<(Component, Option<Vec<u8>>), LoadError> {
        let out = child.compile(settings, bytes, urgency)?;
        tracing::info!(
            module = %&hash[..12],
            took = ?out.elapsed,
            cpu = ?out.cpu,
            peak_rss_mib = out.peak_rss >> 20,
            baseline = settings.baseline,
            "compiled in a child process"
        );
        let c = load_from_child(engine, &out.artifact).map_err(|e| {
            LoadError::Crashed(format!("the compiler's artifact does not load: {e:#}"))
        })?;
        Ok((c, Some(out.artifact)))
    }

    /// Compiles on a thread of its own, waiting at most the compile timeout. A compile over it
    /// is refused; its thread cannot be interrupted (Cranelift has no cancellation), so it
    /// finishes on its own and its result is dropped. While it runs, the same module (`hash`)
    /// is refused at once instead of compiled again: retries cannot pile compiles up.
    fn compile(&self, engine: &Engine, bytes: &[u8], hash: &str) -> Result<Component, LoadError> {
        if lock(&self.overdue).contains(hash) {
            return Err(self.too_slow());
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let (engine, bytes) = (engine.clone(), bytes.to_vec());
        let (overdue, key) = (self.overdue.clone(), hash.to_owned());
        std::thread::Builder::new()
            .name("wisp-compile".into())
            .spawn(move || {
                let compiled = Component::new(&engine, &bytes)
                    .map_err(|e| LoadError::Invalid(format!("{e:#}")));
                // Under the lock: the waiter either receives this or marks the module overdue
                // before it is unmarked here.
                let mut overdue = lock(&overdue);
                overdue.remove(&key);
                let _ = tx.send(compiled);
            })
            .map_err(|e| LoadError::Invalid(format!("cannot start a compile thread: {e}")))?;
        match rx.recv_timeout(self.compile_timeout) {
            Ok(compiled) => compiled,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let mut overdue = lock(&self.overdue);
                // (Unless it finished just now.)
                if let Ok(compiled) = rx.try_recv() {
                    return compiled;
                }
                overdue.insert(hash.to_owned());
                Err(self.too_slow())
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err(LoadError::Invalid("the compiler panicked".into()))
            }
        }
    }

    /// The refusal of an in-process compile over the timeout (measured on the wall clock: the
    /// thread's CPU time is not watched).
    fn too_slow(&self) -> LoadError {
        LoadError::TooSlow {
            limit: self.compile_timeout,
            setting: self.bound_names.timeout,
            wall: false,
        }
    }

    fn remember(&self, key: &str, c: &Component) {
        lock(&self.compiled).insert(key.to_owned(), c.clone());
    }

    /// [`PluginEngine::instance_pre`] of a loaded component, made once per module (content
    /// hash) and shared by the plugins of that module; a link error is not remembered.
    pub fn linked(&self, loaded: &LoadedComponent) -> Result<PluginPre<StoreData>, LinkError> {
        // A module's Winch code (the first-load tier) is another engine's, and lives only
        // until its Cranelift code replaces it: linked apart, and not kept here.
        if loaded.tier == Tier::Baseline {
            return self.instance_pre(&loaded.component);
        }
        if let Some(pre) = lock(&self.linked).get(&loaded.hash) {
            return Ok(pre.clone());
        }
        let pre = self.instance_pre(&loaded.component)?;
        lock(&self.linked).insert(loaded.hash.clone(), pre.clone());
        Ok(pre)
    }

    /// How many modules [`PluginEngine::linked`] holds a link of.
    pub fn linked_modules(&self) -> usize {
        lock(&self.linked).len()
    }

    /// Links the component against the host in the world its exported `listener` interface
    /// names (0.2.0 or 0.1.0): fails when it exports neither, or imports what the host does not
    /// provide.
    pub fn instance_pre(&self, component: &Component) -> Result<PluginPre<StoreData>, LinkError> {
        let ty = component.component_type();
        let exports: Vec<&str> = ty
            .exports(component.engine())
            .map(|(name, _)| name)
            .collect();
        let Some(abi) = Abi::ALL
            .into_iter()
            .find(|a| exports.contains(&a.listener_export().as_str()))
        else {
            let loaded: Vec<String> = Abi::ALL.iter().map(|a| a.listener_export()).collect();
            return Err(LinkError::WrongWorld(format!(
                "it exports none of {} (its exports: {})",
                loaded.join(", "),
                if exports.is_empty() {
                    "none".to_owned()
                } else {
                    exports.join(", ")
                }
            )));
        };
        let linker = match &self.baseline {
            Some(b) if Engine::same(component.engine(), &b.engine) => &b.linker,
            _ => &self.linker,
        };
        let pre = linker
            .instantiate_pre(component)
            .map_err(|e| link_error(&e))?;
        match abi {
            Abi::V0_2 => v02::PluginPre::new(pre).map(PluginPre::V0_2),
            Abi::V0_1 => v01::PluginPre::new(pre).map(PluginPre::V0_1),
        }
        .map_err(|e| LinkError::WrongWorld(format!("{e:#}")))
    }
}

/// Why a component could not be linked against the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkError {
    /// It is not a plugin of a world the host loads (what it exports, or a listener of another
    /// shape).
    WrongWorld(String),
    /// It imports something the host does not provide: `import` is the import's name
    /// (`wasi:keyvalue/store@0.2.0`); `missing` when nothing of that name (or a part of it)
    /// is provided, otherwise it is provided with another type (`detail` says what differs).
    Import {
        /// The import's name.
        import: String,
        /// Nothing of that name is provided.
        missing: bool,
        /// wasmtime's words.
        detail: String,
    },
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::WrongWorld(d) => write!(f, "not a wisp:plugin/plugin component: {d}"),
            LinkError::Import {
                import,
                missing: true,
                detail,
            } => write!(
                f,
                "imports {import}, which Wisp does not provide{}: {detail}",
                Self::hint(import)
            ),
            LinkError::Import { import, detail, .. } => write!(
                f,
                "imports {import}, which does not match what Wisp provides: {detail}"
            ),
        }
    }
}

impl std::error::Error for LinkError {}

impl LinkError {
    /// A hint after "which Wisp does not provide": what plugins get instead.
    pub fn hint(import: &str) -> &'static str {
        let family = import.split('/').next().unwrap_or(import);
        match family.split('@').next().unwrap_or(family) {
            "wasi:sockets" => " (plugins get no sockets)",
            "wasi:http" => " (Wisp links wasi:http 0.2 and refuses every request)",
            "wasi:filesystem" => " (plugins get no files)",
            f if f.starts_with("wasi:") => {
                " (Wisp provides WASI 0.2 (cli, clocks, io, random, with nothing granted) and wasi:http 0.2 (every request refused))"
            }
            _ => " (plugins import only wisp:plugin and WASI 0.2)",
        }
    }
}

/// Names the import wasmtime could not satisfy: its top context reads "component imports
/// instance `NAME`, but a matching implementation was not found in the linker", its root cause
/// "... implementation is missing" when the name (or an item in it) is not provided at all.
fn link_error(e: &wasmtime::Error) -> LinkError {
    let top = e.to_string();
    let detail = format!("{e:#}");
    let name = top
        .strip_prefix("component imports ")
        .and_then(|rest| rest.split('`').nth(1))
        .filter(|_| top.contains("a matching implementation was not found"));
    let Some(import) = name else {
        return LinkError::WrongWorld(detail);
    };
    let root = e.root_cause().to_string();
    let missing = root.ends_with("implementation is missing");
    // The item of the interface that failed ("instance export `fields` has the wrong type").
    let item = e
        .chain()
        .filter_map(|c| {
            c.to_string()
                .strip_prefix("instance export `")
                .and_then(|r| r.split('`').next())
                .map(str::to_owned)
        })
        .last();
    let detail = match (missing, item) {
        (true, Some(item)) => format!("`{item}` is missing"),
        (true, None) => root,
        (false, Some(item)) => format!("`{item}`: {root}"),
        (false, None) => root,
    };
    LinkError::Import {
        import: import.to_owned(),
        missing,
        detail,
    }
}

/// Loads the artifact a compile child of this host ([`super::compiler`]) just wrote.
#[allow(unsafe_code)]
fn load_from_child(engine: &Engine, artifact: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `deserialize` trusts the bytes to be an artifact produced by
    // `Component::serialize` (or `Engine::precompile_component`) for a compatible engine. These
    // bytes are what a child process running this host's own executable wrote on a pipe only
    // it and this process hold, from `Engine::precompile_component` with this engine's
    // settings: native code this host compiled, as an in-process compile would have made it.
    // wasmtime still checks the header and engine compatibility before using the code.
    unsafe { Component::deserialize(engine, artifact) }
}

/// Loads artifact bytes this engine wrote, once [`ModuleCache::get`] has verified them.
#[allow(unsafe_code)]
fn load_precompiled(engine: &Engine, verified: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `deserialize` trusts the bytes to be an artifact produced by
    // `Component::serialize` for a compatible engine. These bytes were read once from a file in
    // a directory owned by this user and closed to others, and carry a valid HMAC-SHA256 under
    // this host's key (kept outside that directory) over their cache key (module hash + engine
    // fingerprint) and contents: they are what this engine serialized for this very module.
    // wasmtime still checks the header and engine compatibility before using the code.
    unsafe { Component::deserialize(engine, verified) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tier_up_never_takes_the_last_slot_nor_one_a_start_waits_for() {
        let fg = Urgency::Foreground;
        let bg = Urgency::Background;
        let at = |running, background, foreground_waiting| Slots {
            running,
            background,
            foreground_waiting,
        };
        // Two slots: one tier-up runs, a second waits though a slot is free (the last one,
        // kept for a start or a reload), which a start takes.
        assert!(at(0, 0, 0).may_take(bg, 2));
        assert!(!at(1, 1, 0).may_take(bg, 2));
        assert!(at(1, 1, 0).may_take(fg, 2));
        // A start waits: no tier-up starts, even on a free slot.
        assert!(!at(0, 0, 1).may_take(bg, 4));
        assert!(at(2, 0, 0).may_take(bg, 4) && !at(3, 3, 0).may_take(bg, 4));
        // Starts take every slot; one slot: a tier-up takes it only while no start waits.
        assert!(at(3, 2, 0).may_take(fg, 4) && !at(4, 2, 0).may_take(fg, 4));
        assert!(at(0, 0, 0).may_take(bg, 1) && !at(0, 0, 1).may_take(bg, 1));
    }

    #[test]
    fn a_module_whose_compile_failed_is_not_compiled_again_before_its_backoff() {
        let engine = PluginEngine::new(EngineConfig {
            cache_dir: None,
            ..EngineConfig::default()
        })
        .unwrap();
        // A component header, then nothing valid: the compile fails.
        let bytes = b"\0asm\x0d\0\x01\0garbage".to_vec();
        let key = |e: &PluginEngine| lock(&e.failed).keys().next().cloned();
        let first = engine.load(&bytes).err().expect("refused");
        assert!(matches!(first, LoadError::Invalid(_)), "{first:?}");
        let again = engine.load(&bytes).err().expect("refused");
        assert!(matches!(again, LoadError::Invalid(_)), "the same refusal");
        let key = key(&engine).expect("the failure is remembered");
        let times = lock(&engine.failed)[&key].times;
        assert_eq!(times, 1, "refused from memory: not compiled a second time");
        engine.stop_ticker();
        assert_eq!(Failed::backoff(1), COMPILE_BACKOFF);
        assert_eq!(Failed::backoff(2), 2 * COMPILE_BACKOFF);
        assert_eq!(Failed::backoff(40), MAX_COMPILE_BACKOFF);
        assert!(!first.may_pass());
        assert!(LoadError::Crashed("killed".into()).may_pass());
    }

    #[test]
    fn a_start_goes_before_a_tier_up_when_a_slot_frees() {
        let slots = Arc::new(CompileSlots {
            state: Mutex::default(),
            freed: Condvar::new(),
            max: 1,
        });
        let first = slots.take(Urgency::Foreground);
        let order = Arc::new(Mutex::new(Vec::new()));
        let spawn = |urgency, name: &'static str| {
            let (slots, order) = (slots.clone(), order.clone());
            std::thread::spawn(move || {
                let _slot = slots.take(urgency);
                order.lock().unwrap().push(name);
            })
        };
        let waiting = |n: usize| {
            let (slots, want) = (slots.clone(), n);
            move || {
                let st = slots.state.lock().unwrap();
                st.foreground_waiting == want
            }
        };
        let tier_up = spawn(Urgency::Background, "tier-up");
        let start = spawn(Urgency::Foreground, "start");
        let started_waiting = waiting(1);
        while !started_waiting() {
            std::thread::yield_now();
        }
        drop(first);
        start.join().unwrap();
        tier_up.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["start", "tier-up"]);
    }

    #[test]
    fn a_missing_import_is_named_with_what_plugins_get_instead() {
        assert_eq!(
            LinkError::hint("wasi:sockets/tcp@0.2.3"),
            " (plugins get no sockets)"
        );
        assert!(LinkError::hint("wasi:keyvalue/store@0.2.0-draft").contains("WASI 0.2"));
        assert!(LinkError::hint("acme:thing/api").contains("only wisp:plugin and WASI"));
    }
}
