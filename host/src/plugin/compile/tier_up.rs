//! The first-load tier (`engine.firstLoadTier`): a large module in neither cache is compiled
//! with Winch so its plugin starts at once, and with Cranelift in the background (a tier-up);
//! its plugins are moved onto the Cranelift code once it lands
//! (by the plugin manager, in the runtime). This is the tier's state: its Winch engine and code,
//! the tier-ups running and what they ended with, and the holds that keep them from starting.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::compiler::ArtifactSettings;
use super::loaded::LoadError;
use crate::sync::{lock, wait};

/// The first-load tier's engine, on Winch (a Winch artifact loads only into an engine on
/// Winch), and its components by module hash while their Cranelift compile runs.
pub struct Baseline {
    /// The Winch engine.
    pub engine: Engine,
    /// What a compile child compiles with for it.
    pub settings: ArtifactSettings,
    /// Its components, by module hash, until their Cranelift code lands.
    pub compiled: Mutex<HashMap<String, Component>>,
    /// The least module size the tier applies to, bytes.
    pub min: usize,
}

/// A Cranelift compile in the background: its outcome once in.
#[derive(Default)]
pub struct Upgrade {
    done: Mutex<Option<Result<(), LoadError>>>,
    landed: Condvar,
}

/// While alive, the first-load tier's background Cranelift compiles wait to start: what a
/// plugin does on its first-load (Winch) code can be observed before it is moved. From
/// `PluginEngine::hold_tier_up`.
#[must_use = "the hold ends when this is dropped"]
pub struct TierUpHold(Arc<(Mutex<usize>, Condvar)>);

impl Drop for TierUpHold {
    fn drop(&mut self) {
        *lock(&self.0.0) -= 1;
        self.0.1.notify_all();
    }
}

/// The tier's state.
#[derive(Default)]
pub struct TierUps {
    /// The first-load tier, when on.
    pub baseline: Option<Baseline>,
    /// Cranelift compiles running in the background, by module hash.
    upgrades: Mutex<HashMap<String, Arc<Upgrade>>>,
    /// How many [`TierUpHold`]s are alive: background compiles wait to start while any is.
    held: Arc<(Mutex<usize>, Condvar)>,
}

impl TierUps {
    /// The tier's state, with its Winch engine when on.
    pub fn new(baseline: Option<Baseline>) -> Self {
        Self {
            baseline,
            ..Self::default()
        }
    }

    /// Registers the tier-up of module `hash`: `None` when one already runs (once per module).
    pub fn begin(&self, hash: &str) -> Option<Arc<Upgrade>> {
        let mut running = lock(&self.upgrades);
        if running.contains_key(hash) {
            return None;
        }
        let up = Arc::new(Upgrade::default());
        running.insert(hash.to_owned(), up.clone());
        Some(up)
    }

    /// Forgets the tier-up of `hash` that could not start.
    pub fn forget(&self, hash: &str) {
        lock(&self.upgrades).remove(hash);
    }

    /// Waits while a [`TierUpHold`] is alive.
    pub fn wait_unheld(&self) {
        let (count, released) = &*self.held;
        let mut n = lock(count);
        while *n > 0 {
            n = wait(released, n);
        }
    }

    /// The tier-up of `module` ended with `out`: its Winch code is dropped, its waiters told.
    pub fn land(&self, module: &str, up: &Upgrade, out: Result<(), LoadError>) {
        if let Some(b) = &self.baseline {
            lock(&b.compiled).remove(module);
        }
        *lock(&up.done) = Some(out);
        up.landed.notify_all();
        lock(&self.upgrades).remove(module);
    }

    /// Holds the tier-ups (those started meanwhile too) until the guard is dropped.
    pub fn hold(&self) -> TierUpHold {
        *lock(&self.held.0) += 1;
        TierUpHold(self.held.clone())
    }

    /// Waits for the tier-up of `hash` to end, if one runs: what it ended with.
    pub fn wait(&self, hash: &str) -> Option<Result<(), LoadError>> {
        let up = lock(&self.upgrades).get(hash).cloned()?;
        let mut done = lock(&up.done);
        loop {
            if let Some(out) = done.as_ref() {
                return Some(out.clone());
            }
            done = wait(&up.landed, done);
        }
    }

    /// Whether `engine` is the tier's Winch engine.
    pub fn is_baseline(&self, engine: &Engine) -> bool {
        self.baseline
            .as_ref()
            .is_some_and(|b| Engine::same(engine, &b.engine))
    }
}
