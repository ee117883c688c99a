//! The host's compiled modules: each module (content hash) compiled once per engine settings,
//! taken from memory, from the on-disk cache ([`super::cache`]) or compiled (in a child process,
//! [`super::compiler`], or on a thread of this one) within the compile slots
//! ([`super::slots`]); a failed compile remembered until its backoff ends; the first-load tier's
//! Winch compile and its background Cranelift compile ([`super::tier_up`]).

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::budget::CgroupMemory;
use super::cache::ModuleCache;
use super::compiler::{ArtifactSettings, ChildCompiler, Urgency, wasm_config};
use super::config::{BoundNames, EngineConfig};
use super::loaded::{LoadError, LoadSource, LoadedComponent, Tier, is_wasm_header};
use super::slots::CompileSlots;
use super::tier_up::{Baseline, TierUpHold, TierUps};
use crate::sync::lock;
use crate::tasks::Tasks;

/// The compiled modules, and the compiles that make them.
pub struct Modules {
    /// The optimizing (Cranelift) engine: the host's.
    engine: Engine,
    /// The checked on-disk cache, if its directory and key passed their checks.
    cache: Option<ModuleCache>,
    /// Identifies engine settings + wasmtime version: artifacts only load into a matching engine.
    fingerprint: String,
    /// Each module compiled with Cranelift, by cache key (module hash + fingerprint).
    compiled: Mutex<HashMap<String, Component>>,
    compile_timeout: Duration,
    bound_names: BoundNames,
    /// Compiles in child processes, when the engine was given a compiler.
    child: Option<ChildCompiler>,
    /// What a child must compile with.
    settings: ArtifactSettings,
    /// Compiles at once, at most `max_compiles`.
    slots: CompileSlots,
    /// Modules whose compile ran past the timeout and still runs, by hash.
    overdue: Arc<Mutex<HashSet<String>>>,
    /// The first-load tier: its engine and the background compiles.
    tier_ups: TierUps,
    /// Modules whose Cranelift compile failed, by cache key, until their backoff ends.
    failed: Mutex<HashMap<String, Failed>>,
    /// Where the tier-up threads run.
    tasks: Tasks,
}

/// The first-load tier's engine, when `config` asks for it.
fn baseline(config: &EngineConfig, settings: ArtifactSettings) -> Option<Baseline> {
    if !config.first_load_tier {
        return None;
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
            return None;
        }
    };
    Some(Baseline {
        engine,
        settings,
        compiled: Mutex::default(),
        min: config.first_load_tier_min,
    })
}

impl Modules {
    /// The host's engine (and the first-load tier's, when on) and the module cache.
    pub fn new(config: &EngineConfig) -> wasmtime::Result<Self> {
        let settings = ArtifactSettings {
            epoch_interruption: config.epoch_interruption,
            fuel: config.fuel,
            baseline: false,
        };
        let engine = Engine::new(&wasm_config(settings))?;
        let baseline = baseline(config, settings);

        let mut h = ShaHasher(Sha256::new());
        engine.precompile_compatibility_hash().hash(&mut h);
        env!("CARGO_PKG_VERSION").hash(&mut h);
        let fingerprint = hex::encode(&h.0.finalize()[..8]);

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
        Ok(Self {
            engine,
            cache,
            fingerprint,
            compiled: Mutex::default(),
            compile_timeout: config.compile_timeout,
            bound_names: config.bound_names,
            child: config.compiler.clone().map(|exe| ChildCompiler {
                exe,
                timeout: config.compile_timeout,
                memory: config.compile_memory,
                names: config.bound_names,
                container: CgroupMemory::of_self(),
            }),
            settings,
            slots: CompileSlots::new(config.max_compiles),
            overdue: Arc::default(),
            tier_ups: TierUps::new(baseline),
            failed: Mutex::default(),
            tasks: config.tasks.clone(),
        })
    }

    /// Where the engine's background threads run.
    pub fn tasks(&self) -> &Tasks {
        &self.tasks
    }

    /// The optimizing engine (the host's).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The first-load tier's engine (Winch), when on.
    pub fn baseline_engine(&self) -> Option<&Engine> {
        self.tier_ups.baseline.as_ref().map(|b| &b.engine)
    }

    /// Compiles `bytes`, or takes the compiled component from memory or the disk cache. With
    /// the first-load tier, a large module in neither cache is compiled with Winch and returned
    /// as [`Tier::Baseline`] while its Cranelift compile runs in the background
    /// ([`Modules::wait_optimized`]).
    pub fn load(self: &Arc<Self>, bytes: &[u8]) -> Result<LoadedComponent, LoadError> {
        self.load_with(bytes, true)
    }

    /// [`Modules::load`], with the first-load tier only when `first_load` (a reload keeps
    /// the running version meanwhile, so it waits for the Cranelift code).
    pub fn load_with(
        self: &Arc<Self>,
        bytes: &[u8],
        first_load: bool,
    ) -> Result<LoadedComponent, LoadError> {
        let start = Instant::now();
        if !is_wasm_header(bytes) {
            return Err(LoadError::NotWasm);
        }
        if bytes[4..8] == [1, 0, 0, 0] {
            return Err(LoadError::NotComponent);
        }
        let hash = hex::encode(Sha256::digest(bytes));
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
            .tier_ups
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
    /// own (once per module), under the engine's [`Tasks`].
    fn start_upgrade(self: &Arc<Self>, bytes: &[u8], hash: &str, key: &str) {
        let Some(up) = self.tier_ups.begin(hash) else {
            return;
        };
        let (me, bytes, module, key) = (
            self.clone(),
            bytes.to_vec(),
            hash.to_owned(),
            key.to_owned(),
        );
        let spawned = self.tasks.spawn_thread("wisp-tier-up", move || {
            me.tier_ups.wait_unheld();
            let began = Instant::now();
            let out = me.tier_up(&bytes, &module, &key);
            tracing::info!(module = %&module[..12], took = ?began.elapsed(), ok = out.is_ok(), "background Cranelift compile of a first-load module ended");
            me.tier_ups.land(&module, &up, out);
        });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the background compile; the module stays on its first-load code");
            self.tier_ups.forget(hash);
        }
    }

    /// The background Cranelift compile of a first-load module: a failure that may pass is
    /// tried again after its backoff, a few times.
    fn tier_up(&self, bytes: &[u8], module: &str, key: &str) -> Result<(), LoadError> {
        let mut out = self
            .compile_optimized(bytes, module, key, Urgency::Background)
            .map(drop);
        for _ in 1..TIER_UP_TRIES {
            match &out {
                Err(e) if e.may_pass() => {}
                _ => break,
            }
            let wait = lock(&self.failed).get(key).map_or(Duration::ZERO, |f| {
                f.until.saturating_duration_since(Instant::now())
            });
            tracing::info!(module = %&module[..12], ?wait, "the background compile failed; trying again after its backoff");
            std::thread::sleep(wait);
            out = self
                .compile_optimized(bytes, module, key, Urgency::Background)
                .map(drop);
        }
        out
    }

    /// Holds the first-load tier's background compiles (those started meanwhile too) until
    /// the returned guard is dropped.
    pub fn hold_tier_up(&self) -> TierUpHold {
        self.tier_ups.hold()
    }

    /// Waits for the background Cranelift compile of module `hash` (SHA-256, hex) to end: `Ok`
    /// once its artifact is in memory (and the module cache), or why it failed.
    pub fn wait_optimized(&self, hash: &str) -> Result<(), LoadError> {
        if let Some(out) = self.tier_ups.wait(hash) {
            return out;
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

    /// Which tier code compiled into `engine` comes from.
    pub fn tier(&self, engine: &Engine) -> Tier {
        if self.tier_ups.is_baseline(engine) {
            Tier::Baseline
        } else {
            Tier::Optimized
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

struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
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
    fn a_module_whose_compile_failed_is_not_compiled_again_before_its_backoff() {
        let engine = Arc::new(
            Modules::new(&EngineConfig {
                cache_dir: None,
                ..EngineConfig::default()
            })
            .unwrap(),
        );
        // A component header, then nothing valid: the compile fails.
        let bytes = b"\0asm\x0d\0\x01\0garbage".to_vec();
        let key = |e: &Modules| lock(&e.failed).keys().next().cloned();
        let first = engine.load(&bytes).err().expect("refused");
        assert!(matches!(first, LoadError::Invalid(_)), "{first:?}");
        let again = engine.load(&bytes).err().expect("refused");
        assert!(matches!(again, LoadError::Invalid(_)), "the same refusal");
        let key = key(&engine).expect("the failure is remembered");
        let times = lock(&engine.failed)[&key].times;
        assert_eq!(times, 1, "refused from memory: not compiled a second time");
        assert_eq!(Failed::backoff(1), COMPILE_BACKOFF);
        assert_eq!(Failed::backoff(2), 2 * COMPILE_BACKOFF);
        assert_eq!(Failed::backoff(40), MAX_COMPILE_BACKOFF);
        assert!(!first.may_pass());
        assert!(LoadError::Crashed("killed".into()).may_pass());
    }
}
