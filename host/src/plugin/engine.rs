//! One [`PluginEngine`] per host: the compiled modules ([`super::compile`]), the host's linker
//! (WASI p2 with nothing granted, `wasi:http` with every request refused, the deadline-bounded
//! `poll`, plus both worlds' host interfaces, [`super::host_api`]), each module linked once, and
//! the epoch ticker that cuts calls at their deadline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wasmtime::Engine;
use wasmtime::component::{Component, HasSelf, Linker};

use super::bindings::{PluginPre, v01, v02, v03};
use super::compile::{EngineConfig, LoadError, LoadedComponent, Modules, Tier, TierUpHold};
use super::error::PluginError;
use super::sandbox::instance::Metering;
use super::sandbox::linker::{self, LinkError};
use super::sandbox::state::StoreData;
use crate::sync::lock;

/// The shared engine.
pub struct PluginEngine {
    /// The compiled modules and the compiles that make them.
    modules: Arc<Modules>,
    /// The host's linker on the optimizing engine.
    linker: Linker<StoreData>,
    /// The host's linker on the first-load tier's engine (Winch), when on.
    baseline_linker: Option<Linker<StoreData>>,
    /// Each compiled component linked against the host once, by content hash: its imports
    /// resolved (~7 KiB of host heap per plugin when each plugin linked its own), shared by
    /// every plugin of that module. It holds the host's functions only: what a plugin may do
    /// (its grants, budget, status) is in its own store.
    linked: Mutex<HashMap<String, PluginPre<StoreData>>>,
    /// The epoch tick and fuel metering, as a store needs them.
    metering: Metering,
    /// `engine.maxModuleSize`: the loader reads no larger module file.
    max_module_size: u64,
    stop: Arc<AtomicBool>,
    /// The epoch ticker's thread, until [`PluginEngine::stop_ticker`] joins it.
    ticker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// The host's linker on `engine`: WASI p2 with nothing granted, `wasi:http` refusing every
/// request, the deadline-bounded `poll`, and every world's host interfaces.
fn host_linker(engine: &Engine) -> Result<Linker<StoreData>, PluginError> {
    let mut linker: Linker<StoreData> = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
        .and_then(|()| wasmtime_wasi_http::p2::add_only_http_to_linker_sync(&mut linker))
        .and_then(|()| super::host_api::poll::add_to_linker(&mut linker))
        .map_err(|e| PluginError::Engine(format!("{e:#}")))?;
    v03::Plugin::add_to_linker::<StoreData, HasSelf<StoreData>>(&mut linker, |s| s)
        .map_err(|e| PluginError::Engine(format!("{e:#}")))?;
    v02::Plugin::add_to_linker::<StoreData, HasSelf<StoreData>>(&mut linker, |s| s)
        .map_err(|e| PluginError::Engine(format!("{e:#}")))?;
    v01::Plugin::add_to_linker::<StoreData, HasSelf<StoreData>>(&mut linker, |s| s)
        .map_err(|e| PluginError::Engine(format!("{e:#}")))?;
    Ok(linker)
}

impl Drop for PluginEngine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl PluginEngine {
    /// Builds the engine and starts its epoch ticker thread.
    pub fn new(config: EngineConfig) -> Result<Arc<Self>, PluginError> {
        let modules = Modules::new(&config).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        let linker = host_linker(modules.engine())?;
        let baseline_linker = modules.baseline_engine().map(host_linker).transpose()?;

        let stop = Arc::new(AtomicBool::new(false));
        // Both tiers' engines: a deadline holds on either code.
        let mut ticked = vec![modules.engine().clone()];
        ticked.extend(modules.baseline_engine().cloned());
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
            modules: Arc::new(modules),
            linker,
            baseline_linker,
            linked: Mutex::default(),
            metering: Metering {
                tick,
                fuel: config.fuel,
            },
            max_module_size: config.max_module_size,
            stop,
            ticker: Mutex::new(Some(ticker)),
        }))
    }

    /// Stops the epoch ticker and joins its thread (deadlines no longer cut calls after it).
    pub fn stop_ticker(&self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = lock(&self.ticker).take() {
            crate::tasks::report_join("wisp-epoch", t.join());
        }
    }

    /// Where the engine's background threads run (the first-load tier's).
    pub fn tasks(&self) -> &crate::tasks::Tasks {
        self.modules.tasks()
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        self.modules.engine()
    }

    /// The epoch tick and fuel metering, as a store needs them.
    pub fn metering(&self) -> Metering {
        self.metering
    }

    /// Whether fuel metering is on.
    pub fn fuel(&self) -> bool {
        self.metering.fuel
    }

    /// The largest module file read, bytes (`engine.maxModuleSize`).
    pub fn max_module_size(&self) -> u64 {
        self.max_module_size
    }

    /// The epoch tick.
    pub fn tick(&self) -> Duration {
        self.metering.tick
    }

    /// Epoch ticks for a deadline (at least one).
    pub fn deadline_ticks(&self, deadline: Duration) -> u64 {
        self.metering.deadline_ticks(deadline)
    }

    /// Compiles `bytes`, or takes the compiled component from memory or the disk cache. With
    /// the first-load tier, a large module in neither cache is compiled with Winch and returned
    /// as [`Tier::Baseline`] while its Cranelift compile runs in the background
    /// ([`PluginEngine::wait_optimized`]).
    pub fn load(&self, bytes: &[u8]) -> Result<LoadedComponent, LoadError> {
        self.modules.load(bytes)
    }

    /// [`PluginEngine::load`], with the first-load tier only when `first_load` (a reload keeps
    /// the running version meanwhile, so it waits for the Cranelift code).
    pub fn load_with(&self, bytes: &[u8], first_load: bool) -> Result<LoadedComponent, LoadError> {
        self.modules.load_with(bytes, first_load)
    }

    /// Holds the first-load tier's background compiles (those started meanwhile too) until
    /// the returned guard is dropped.
    pub fn hold_tier_up(&self) -> TierUpHold {
        self.modules.hold_tier_up()
    }

    /// Waits for the background Cranelift compile of module `hash` (SHA-256, hex) to end: `Ok`
    /// once its artifact is in memory (and the module cache), or why it failed.
    pub fn wait_optimized(&self, hash: &str) -> Result<(), LoadError> {
        self.modules.wait_optimized(hash)
    }

    /// Which tier a linked component's code comes from.
    pub fn tier(&self, pre: &PluginPre<StoreData>) -> Tier {
        self.modules.tier(pre.engine())
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
    /// names (0.3.0, 0.2.0 or 0.1.0): fails when it exports none, or imports what the host does not
    /// provide.
    pub fn instance_pre(&self, component: &Component) -> Result<PluginPre<StoreData>, LinkError> {
        let linker = match &self.baseline_linker {
            Some(l) if self.modules.tier(component.engine()) == Tier::Baseline => l,
            _ => &self.linker,
        };
        linker::instance_pre(linker, component)
    }
}
