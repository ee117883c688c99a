//! Live changes while the host runs: a changed plugin module or config file (watched with a
//! debounce), `POST /reload`, `POST /plugins/{name}/reload` and SIGHUP.
//!
//! - A module change reloads the plugins using that module (checked off the delivery path,
//!   swapped between two batches, rolled back if it fails its first events).
//! - Reloads of different modules run at once: each plugin's reloads are one at a time (a file
//!   event during one is queued once), and no lock is held across a compile but that plugin's
//!   own, so a module that compiles for long (up to `engine.compileTimeout`) holds up no other
//!   plugin's reload (the engine runs as many compiles at once as `executor.workers`).
//! - A config change is validated first: a config that fails validation changes nothing and the
//!   error is logged. Then plugins removed are stopped (their queues dropped), plugins added are
//!   started (they receive the cache as initial-list adds), plugins changed are reloaded in place
//!   (or restarted when their informers, resync or relistResyncs changed: what their listeners
//!   were registered with). Informer changes need a restart.

pub mod custom;
pub mod modules;
pub mod oci_poll;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify_debouncer_mini::notify::RecursiveMode;
use notify_debouncer_mini::{DebounceEventResult, new_debouncer};
use sha2::{Digest, Sha256};

use crate::config::Config;
use crate::oci::PulledModules;
use crate::plugin::{PluginHandle, PluginManager, PluginSet, PluginSpec};
use crate::sync::lock;

/// Debounce of file events: a burst of writes is one change. A half-written module fails its
/// check and keeps the running version; the write that completes it triggers another reload.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

/// How many times, and how far apart, a refused module file is looked at again.
const RECHECKS: u32 = 5;
const RECHECK_DELAY: Duration = Duration::from_millis(100);

/// Why a reload did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadError {
    /// No plugin of that name.
    UnknownPlugin(String),
    /// The new config or module was refused; what runs is unchanged.
    Refused(String),
}

/// One plugin's reloads: one at a time (file events, admin calls and signals can race).
#[derive(Default)]
struct Slot {
    /// Held for the whole of a reload of the plugin.
    running: Mutex<()>,
    /// A file event waits for the running reload: later ones need not wait too.
    queued: AtomicBool,
}

/// Applies live changes to a running host.
pub struct Reloader {
    config_path: PathBuf,
    /// The config in force; locked only to read or replace it, never across a compile.
    config: Mutex<Config>,
    /// The config's `oci://` modules as pulled (`modules::pull`); replaced with the config, and
    /// a module alone when its tag moves. Locked after `config` when both are.
    pulled: Mutex<PulledModules>,
    manager: PluginManager,
    plugins: PluginSet,
    /// Serialises config reloads (not plugin reloads: see `slots`).
    busy: Mutex<()>,
    /// Per plugin, its reloads one at a time.
    slots: Mutex<BTreeMap<String, Arc<Slot>>>,
    /// The config text last applied (file events without a change are ignored).
    config_text: Mutex<String>,
    /// Per plugin, the module hash last refused after a file event (it is not retried until
    /// the content changes again).
    tried: Mutex<BTreeMap<String, String>>,
    /// The plugins of custom resources (see [`custom`]), by name: not in the config file, left
    /// alone by its reloads, reloaded by name and on module file changes as the others are.
    custom: Mutex<BTreeMap<String, PluginSpec>>,
}

fn same_config(a: &Config, b: &Config) -> bool {
    a.informers == b.informers
}

impl Reloader {
    /// A reloader for the host started from `config` (read from `config_path`).
    pub fn new(
        config_path: PathBuf,
        config: Config,
        pulled: PulledModules,
        manager: PluginManager,
        plugins: PluginSet,
    ) -> Arc<Self> {
        let text = std::fs::read_to_string(&config_path).unwrap_or_default();
        Arc::new(Self {
            config_path,
            config: Mutex::new(config),
            pulled: Mutex::new(pulled),
            manager,
            plugins,
            busy: Mutex::new(()),
            slots: Mutex::default(),
            config_text: Mutex::new(text),
            tried: Mutex::default(),
            custom: Mutex::default(),
        })
    }

    /// Every plugin's spec: the config file's and the custom resources'.
    fn specs(&self) -> BTreeMap<String, PluginSpec> {
        let mut specs: BTreeMap<String, PluginSpec> = lock(&self.custom).clone();
        let cfg = lock(&self.config);
        let pulled = lock(&self.pulled);
        specs.extend(
            cfg.plugin_specs(&pulled)
                .into_iter()
                .map(|s| (s.name.clone(), s)),
        );
        specs
    }

    fn handle(&self, name: &str) -> Option<Arc<PluginHandle>> {
        self.plugins.get(name)
    }

    fn slot(&self, name: &str) -> Arc<Slot> {
        lock(&self.slots)
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// Runs `reload` for each of `names` (plugins), those of one module one after the other (the
    /// first compiles it, the others find it compiled), those of different modules at once.
    /// Returns what each said, in the order of `names`.
    fn each_module_at_once<T: Send>(
        &self,
        names: &[String],
        reload: impl Fn(&str) -> T + Sync,
    ) -> Vec<T> {
        let specs = self.specs();
        let mut groups: BTreeMap<Option<PathBuf>, Vec<usize>> = BTreeMap::new();
        for (i, n) in names.iter().enumerate() {
            let module = specs.get(n).map(|s| s.module.clone());
            groups.entry(module).or_default().push(i);
        }
        let reload = &reload;
        let mut done: Vec<(usize, T)> = std::thread::scope(|s| {
            let running: Vec<_> = groups
                .into_values()
                .map(|group| {
                    s.spawn(move || {
                        group
                            .into_iter()
                            .map(|i| (i, reload(&names[i])))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            running
                .into_iter()
                .flat_map(|t| t.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        done.sort_by_key(|(i, _)| *i);
        done.into_iter().map(|(_, t)| t).collect()
    }

    /// Reloads one plugin from its module file (as the config says), after any reload of it
    /// that runs (reloads of other plugins run meanwhile).
    pub fn reload_plugin(&self, name: &str) -> Result<String, ReloadError> {
        let slot = self.slot(name);
        let _one = lock(&slot.running);
        self.reload_plugin_now(name)
    }

    /// [`Self::reload_plugin`] with its slot held.
    fn reload_plugin_now(&self, name: &str) -> Result<String, ReloadError> {
        let spec = self
            .specs()
            .remove(name)
            .ok_or_else(|| ReloadError::UnknownPlugin(name.to_owned()))?;
        let h = self
            .handle(name)
            .ok_or_else(|| ReloadError::UnknownPlugin(name.to_owned()))?;
        let r = h
            .reload(spec)
            .map_err(|e| ReloadError::Refused(e.to_string()))?;
        Ok(format!(
            "plugin {name:?} reloaded: generation {} ({:?}, {:?})",
            r.generation, r.load.source, r.load.load
        ))
    }

    /// Re-reads the config and applies it, then reloads every plugin's module (different
    /// modules at once).
    pub fn reload_all(&self) -> Result<String, ReloadError> {
        let mut done = vec![self.reload_config()?];
        let names: Vec<String> = self.specs().into_keys().collect();
        let results = self.each_module_at_once(&names, |n| self.reload_plugin(n));
        for (name, r) in names.iter().zip(results) {
            match r {
                Ok(m) => done.push(m),
                Err(ReloadError::Refused(e)) => {
                    done.push(format!("plugin {name:?} kept its running version: {e}"))
                }
                Err(ReloadError::UnknownPlugin(_)) => {}
            }
        }
        Ok(done.join("\n"))
    }

    /// Re-reads the config file and applies plugin changes; a bad config changes nothing. The
    /// config's lock is held only to read and replace it: plugins are checked (compiled) and
    /// reloaded without it, so reloads of other plugins go on meanwhile.
    pub fn reload_config(&self) -> Result<String, ReloadError> {
        let _busy = lock(&self.busy);
        let refused = |e: &dyn std::fmt::Display| {
            tracing::error!(error = %e, "config reload refused; nothing changed");
            ReloadError::Refused(format!("config reload refused, nothing changed: {e}"))
        };
        let next = Config::load(&self.config_path).map_err(|e| refused(&e))?;
        // OCI modules already pulled stay as they are (a moved tag is the poller's business);
        // new references are pulled now. Changed `oci` settings pull everything again. The
        // config's lock is not held across the pull (`busy` keeps reloads one at a time).
        let previous = {
            let cfg = lock(&self.config);
            (cfg.oci == next.oci).then(|| lock(&self.pulled).clone())
        };
        let next_pulled = crate::oci::block_on(modules::pull(&next, previous.as_ref()))
            .map_err(|e| refused(&e))?
            .map_err(|e| refused(&e))?;
        let cfg = lock(&self.config).clone();
        if let Some(p) = next
            .plugins
            .iter()
            .find(|p| lock(&self.custom).contains_key(&p.name))
        {
            let msg = format!(
                "config reload refused, nothing changed: {}: plugin {:?} is already defined by a \
                 custom resource; rename one of them",
                next.file, p.name
            );
            tracing::error!("{msg}");
            return Err(ReloadError::Refused(msg));
        }
        if let Some(why) = needs_restart(&cfg, &next) {
            let msg = format!(
                "config reload refused, nothing changed: {}: {why}",
                next.file
            );
            tracing::error!("{msg}");
            return Err(ReloadError::Refused(msg));
        }
        let old: BTreeMap<String, _> = cfg
            .plugins
            .iter()
            .map(|p| (p.name.clone(), p.clone()))
            .collect();
        let new_specs: BTreeMap<String, PluginSpec> = next
            .plugin_specs(&next_pulled)
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect();
        // Check every added or restarted plugin before touching anything.
        let mut started = Vec::new();
        let mut actions = Vec::new();
        for p in &next.plugins {
            let spec = &new_specs[&p.name];
            let what = match old.get(&p.name) {
                None => format!("plugin {:?} added", p.name),
                Some(o) if registration_changed(o, p) => format!(
                    "plugin {:?} restarted (its informers, resync or relistResyncs changed)",
                    p.name
                ),
                _ => continue,
            };
            let c = self.manager.check(spec).map_err(|e| {
                ReloadError::Refused(format!("config reload refused, nothing changed: {e}"))
            })?;
            started.push(c);
            actions.push(what);
        }
        let changed = self.swap_plugins(&old, &next, started, &mut actions);
        *lock(&self.config) = next;
        *lock(&self.pulled) = next_pulled;
        // Reload changed ones, different modules at once, each after any reload of it running.
        let results = self.each_module_at_once(&changed, |name| {
            let slot = self.slot(name);
            let _one = lock(&slot.running);
            let h = self.handle(name)?;
            Some(h.reload(new_specs[name].clone()))
        });
        for (name, r) in changed.iter().zip(results) {
            match r {
                Some(Ok(r)) => actions.push(format!(
                    "plugin {name:?} changed: generation {}",
                    r.generation
                )),
                Some(Err(e)) => {
                    actions.push(format!("plugin {name:?} kept its running version: {e}"))
                }
                None => {}
            }
        }
        if actions.is_empty() {
            actions.push("config reloaded: no plugin changed".into());
        }
        for a in &actions {
            tracing::info!("{a}");
        }
        Ok(actions.join("\n"))
    }

    /// Stops the plugins `next` removes or restarts, attaches the `started` ones (checked), and
    /// returns the names of those to reload in place (changed, same informers).
    fn swap_plugins(
        &self,
        old: &BTreeMap<String, crate::config::PluginConfig>,
        next: &Config,
        started: Vec<crate::plugin::CheckedPlugin>,
        actions: &mut Vec<String>,
    ) -> Vec<String> {
        let mut list = self.plugins.lock();
        let custom = lock(&self.custom).clone();
        list.retain(|h| {
            if custom.contains_key(h.name()) {
                return true;
            }
            let keep = match (
                old.get(h.name()),
                next.plugins.iter().find(|p| p.name == h.name()),
            ) {
                (_, None) => false,
                (Some(o), Some(n)) => !registration_changed(o, n),
                (None, Some(_)) => true,
            };
            if !keep {
                h.stop();
                if !next.plugins.iter().any(|p| p.name == h.name()) {
                    actions.push(format!("plugin {:?} removed", h.name()));
                }
            }
            keep
        });
        for c in started {
            let name = c.name().to_owned();
            match self.manager.attach(c) {
                Ok(h) => list.push(Arc::new(h)),
                Err(e) => {
                    tracing::error!(plugin = %name, error = %e, "cannot start the plugin");
                    actions.push(format!("plugin {name:?} not started: {e}"));
                }
            }
        }
        next.plugins
            .iter()
            .filter(|p| {
                old.get(&p.name)
                    .is_some_and(|o| o != *p && o.informers == p.informers)
                    && list.iter().any(|h| h.name() == p.name)
            })
            .map(|p| p.name.clone())
            .collect()
    }

    /// Applies what changed while nothing watched: the config file, as [`Self::reload_config`]
    /// does, then every plugin's module whose content differs from what runs. A standby calls it
    /// when it takes the Lease, so it leads with the files as they are then.
    pub fn catch_up(&self) {
        // A refused config is logged by `reload_config`; the plugins keep the one they started
        // with, as a refused reload leaves a leader's.
        let _ = self.reload_config();
        let names: Vec<String> = self.specs().into_keys().collect();
        self.each_module_at_once(&names, |n| self.reload_if_changed(n));
    }

    /// Plugins whose module is `path`.
    fn plugins_using(&self, path: &Path) -> Vec<String> {
        let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        let target = canon(path);
        self.specs()
            .into_values()
            .filter(|s| canon(&s.module) == target)
            .map(|s| s.name)
            .collect()
    }

    /// Acts on changed paths (from the watcher). File events also come for reads and for
    /// writes that leave the content as it was: only a content change reloads.
    pub fn on_changed(&self, paths: &[PathBuf]) {
        let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
        if paths.iter().any(|p| canon(p) == canon(&self.config_path)) {
            let text = std::fs::read_to_string(&self.config_path).unwrap_or_default();
            let changed = *lock(&self.config_text) != text;
            if changed {
                *lock(&self.config_text) = text;
                let _ = self.reload_config();
            }
        }
        let mut names: Vec<String> = paths.iter().flat_map(|p| self.plugins_using(p)).collect();
        names.sort();
        names.dedup();
        self.each_module_at_once(&names, |n| self.reload_if_changed(n));
    }

    /// Reloads `name` from its module file if the content differs from what runs, once any
    /// reload of it that runs is done; when another event already waits for that, this one
    /// leaves it to that one (which reads the file after). A refused file is looked at again a
    /// few times shortly after: an event can arrive while the file is still being written, and
    /// the write that completes it may send no further event.
    fn reload_if_changed(&self, name: &str) {
        let slot = self.slot(name);
        if slot.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let _one = lock(&slot.running);
        slot.queued.store(false, Ordering::Release);
        let engine = self.manager.engine();
        // The content's hash; a file the reader refuses (not wasm, not a regular file, over
        // the cap) is keyed by its refusal, so the reload says why once; one that cannot be
        // read (gone, being renamed) is looked at again.
        let hash_of = |spec: &PluginSpec| -> Option<String> {
            match crate::plugin::loader::read_module(engine, spec) {
                Ok(bytes) => Some(hex::encode(Sha256::digest(&bytes))),
                Err(crate::plugin::PluginError::Read { .. }) => None,
                Err(e) => Some(format!("refused: {e}")),
            }
        };
        for attempt in 0..RECHECKS {
            if attempt > 0 {
                std::thread::sleep(RECHECK_DELAY);
            }
            let Some(h) = self.handle(name) else { return };
            let Some(spec) = self.specs().remove(name) else {
                return;
            };
            let Some(hash) = hash_of(&spec) else {
                continue;
            };
            let refused_before = lock(&self.tried).get(name).cloned();
            if hash == h.status().version().0 || refused_before.as_deref() == Some(hash.as_str()) {
                if attempt == 0 || hash == h.status().version().0 {
                    return;
                }
                continue;
            }
            let ok = self.reload_plugin_now(name).is_ok();
            let mut tried = lock(&self.tried);
            if ok {
                tried.remove(name);
                return;
            }
            tried.insert(name.to_owned(), hash);
        }
    }

    /// The directories to watch: the config's and every module's.
    fn watched_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = self
            .specs()
            .values()
            .filter(|s| s.origin.is_none())
            .map(|s| s.module.clone())
            .chain(std::iter::once(self.config_path.clone()))
            .filter_map(|p| {
                p.canonicalize()
                    .ok()
                    .and_then(|c| c.parent().map(Path::to_path_buf))
            })
            .collect();
        dirs.sort();
        dirs.dedup();
        dirs
    }

    /// Watches the config file and the modules until `shutdown` completes. Reloads run on a
    /// blocking thread, never on the delivery path, and each batch of events on its own: a
    /// module that compiles for long holds up no later event. The directories watched are
    /// looked at again after each batch.
    pub async fn watch(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<PathBuf>>();
        let mut debouncer = match new_debouncer(DEBOUNCE, move |res: DebounceEventResult| {
            if let Ok(events) = res {
                let _ = tx.send(events.into_iter().map(|e| e.path).collect());
            }
        }) {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "cannot watch files; use POST /reload or SIGHUP to reload");
                return shutdown.await;
            }
        };
        let mut watching = Vec::new();
        let mut rewatch = |d: &mut notify_debouncer_mini::Debouncer<_>, dirs: Vec<PathBuf>| {
            for dir in dirs {
                if !watching.contains(&dir) {
                    match d.watcher().watch(&dir, RecursiveMode::NonRecursive) {
                        Ok(()) => watching.push(dir),
                        Err(e) => {
                            tracing::warn!(dir = %dir.display(), error = %e, "cannot watch directory")
                        }
                    }
                }
            }
        };
        rewatch(&mut debouncer, self.watched_dirs());
        tokio::pin!(shutdown);
        let mut running = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                Some(paths) = rx.recv() => {
                    let me = self.clone();
                    running.spawn_blocking(move || me.on_changed(&paths));
                }
                Some(_) = running.join_next(), if !running.is_empty() => {
                    rewatch(&mut debouncer, self.watched_dirs());
                }
            }
        }
        // The reloads under way end before the watch does.
        while running.join_next().await.is_some() {}
    }
}

impl Reloader {
    /// `oci.poll` of the current config (zero when no module is a tag, or `oci.poll` is 0).
    pub fn oci_poll_interval(&self) -> Duration {
        let cfg = lock(&self.config);
        if lock(&self.pulled).values().all(|p| !p.reference.is_tag()) {
            return Duration::ZERO;
        }
        cfg.oci
            .poll
            .map_or(crate::reloader::oci_poll::DEFAULT_POLL, |d| d.0)
    }

    /// Looks up every tag of the config once; a tag that moved is pulled and its plugins
    /// reloaded (checked, then on probation). Failures keep what runs and are logged and counted.
    pub async fn poll_oci(self: &Arc<Self>) {
        let (settings, tags) = {
            let cfg = lock(&self.config);
            let settings = match cfg.oci_settings() {
                Ok(s) => s,
                Err((field, e)) => {
                    crate::reloader::oci_poll::failed();
                    tracing::error!("OCI tags not looked up: {}: {field}: {e}", cfg.file);
                    return;
                }
            };
            let tags: Vec<(String, crate::oci::Pulled)> = lock(&self.pulled)
                .iter()
                .filter(|(_, p)| p.reference.is_tag())
                .map(|(m, p)| (m.clone(), p.clone()))
                .collect();
            (settings, tags)
        };
        for (module, old) in tags {
            let r = &old.reference;
            let digest = match crate::oci::pull::resolve(&settings, r).await {
                Ok(d) => d,
                Err(e) => {
                    crate::reloader::oci_poll::failed();
                    tracing::warn!(reference = %r, error = %e, "tag look-up failed; the running module stays");
                    continue;
                }
            };
            if digest == old.digest {
                continue;
            }
            let pulled = match crate::oci::pull::pull(&settings, r).await {
                Ok(p) => p,
                Err(e) => {
                    crate::reloader::oci_poll::failed();
                    tracing::error!(reference = %r, from = %old.digest, to = %digest, error = %e, "the tag moved, but its new module was refused; the running module stays");
                    continue;
                }
            };
            crate::reloader::oci_poll::moved();
            tracing::info!(reference = %r, from = %old.digest, to = %pulled.digest, "tag moved; reloading its plugins");
            let names: Vec<String> = {
                let cfg = lock(&self.config);
                lock(&self.pulled).insert(module.clone(), pulled);
                cfg.plugins
                    .iter()
                    .filter(|p| p.module.to_str() == Some(module.as_str()))
                    .map(|p| p.name.clone())
                    .collect()
            };
            for n in names {
                // A reload compiles: off the runtime's threads.
                let (me, name) = (self.clone(), n.clone());
                let reloaded = tokio::task::spawn_blocking(move || me.reload_plugin(&name))
                    .await
                    .unwrap_or_else(|e| {
                        Err(ReloadError::Refused(format!("the reload failed: {e}")))
                    });
                match reloaded {
                    Ok(m) => tracing::info!("{m}"),
                    Err(e) => {
                        tracing::error!(plugin = %n, error = ?e, "the moved tag's module was refused; the running version stays")
                    }
                }
            }
        }
    }
}

/// Why `next` cannot be applied to a host started from `cfg` (what needs a restart), if so.
fn needs_restart(cfg: &Config, next: &Config) -> Option<&'static str> {
    if cfg.executor != next.executor {
        return Some("executor changed; the number of workers needs a restart");
    }
    if cfg.policy_reports != next.policy_reports {
        return Some("policyReports changed; the report writer's settings need a restart");
    }
    if cfg.custom_resources != next.custom_resources {
        return Some(
            "customResources changed; what the host reads of custom resources needs a restart",
        );
    }
    if cfg.dir != next.dir {
        return Some("dir changed; the dir source's settings need a restart");
    }
    if !same_config(cfg, next) {
        return Some("informers changed; informer changes need a restart");
    }
    if cfg.engine.compile_timeout != next.engine.compile_timeout
        || cfg.engine.compile_memory != next.engine.compile_memory
    {
        return Some("engine changed; the compile bounds need a restart");
    }
    if cfg.max_module_size() != next.max_module_size() {
        return Some("engine.maxModuleSize changed; it needs a restart");
    }
    None
}

/// Whether a plugin's listeners must be registered again (what is fixed at registration
/// changed): a reload in place keeps them.
fn registration_changed(
    old: &crate::config::PluginConfig,
    new: &crate::config::PluginConfig,
) -> bool {
    old.informers != new.informers
        || old.resync != new.resync
        || old.relist_resyncs != new.relist_resyncs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings read once at start are named when a reload would change them; `dir` among them
    /// (the dir source's cap is fixed when it opens).
    #[test]
    fn a_reload_changing_settings_read_at_start_names_them() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("cluster")).unwrap();
        let base = "source: dir:cluster\ninformers: [{name: pods, apiVersion: v1, kind: Pod}]\n";
        let parse = |extra: &str| Config::parse(&format!("{base}{extra}"), "w.yaml", d.path());
        let a = parse("").unwrap();
        assert_eq!(needs_restart(&a, &parse("").unwrap()), None);
        assert_eq!(
            needs_restart(&a, &parse("dir: {maxFileSize: 1Mi}\n").unwrap()),
            Some("dir changed; the dir source's settings need a restart")
        );
        assert_eq!(
            needs_restart(&a, &parse("executor: {workers: 3}\n").unwrap()),
            Some("executor changed; the number of workers needs a restart")
        );
        assert_eq!(
            needs_restart(&a, &parse("customResources: {enabled: false}\n").unwrap()),
            Some(
                "customResources changed; what the host reads of custom resources needs a restart"
            )
        );
    }

    fn config(engine: &str) -> Config {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("cluster")).unwrap();
        std::fs::write(d.path().join("p.wasm"), b"\0asm").unwrap();
        let text = format!(
            "source: dir:cluster\ninformers:\n  - {{name: pods, apiVersion: v1, kind: Pod}}\n\
             plugins:\n  - {{name: a, module: p.wasm, informers: [pods]}}\n{engine}"
        );
        Config::parse(&text, "wisp.yaml", d.path()).unwrap()
    }

    #[test]
    fn a_config_reload_changing_the_compile_bounds_needs_a_restart() {
        let old = config("engine: {compileTimeout: 60s}\n");
        assert_eq!(
            needs_restart(&old, &config("engine: {compileTimeout: 60s}\n")),
            None
        );
        for next in [
            "engine: {compileTimeout: 30s}\n",
            "engine: {compileTimeout: 60s, compileMemory: 512Mi}\n",
        ] {
            assert_eq!(
                needs_restart(&old, &config(next)),
                Some("engine changed; the compile bounds need a restart"),
                "{next}"
            );
        }
    }
}
