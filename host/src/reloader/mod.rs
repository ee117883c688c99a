//! Live changes while the host runs: a changed plugin module or config file (watched with a
//! debounce), `POST /reload`, `POST /plugins/{name}/reload` and SIGHUP.
//!
//! - A module change reloads the plugins using that module (checked off the delivery path,
//!   swapped between two batches, rolled back if it fails its first events).
//! - A config change is validated first: a config that fails validation changes nothing and the
//!   error is logged. Then plugins removed are stopped (their queues dropped), plugins added are
//!   started (they receive the cache as initial-list adds), plugins changed are reloaded in place
//!   (or restarted when their informers, resync or relistResyncs changed: what their listeners
//!   were registered with). Informer changes need a restart.

pub mod oci_poll;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify_debouncer_mini::notify::RecursiveMode;
use notify_debouncer_mini::{DebounceEventResult, new_debouncer};
use sha2::{Digest, Sha256};

use crate::config::Config;
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

/// Applies live changes to a running host.
pub struct Reloader {
    config_path: PathBuf,
    config: Mutex<Config>,
    manager: PluginManager,
    plugins: PluginSet,
    /// Serialises reloads (file events, admin calls and signals can race).
    busy: Mutex<()>,
    /// The config text last applied (file events without a change are ignored).
    config_text: Mutex<String>,
    /// Per plugin, the module hash last refused after a file event (it is not retried until
    /// the content changes again).
    tried: Mutex<BTreeMap<String, String>>,
}

fn same_config(a: &Config, b: &Config) -> bool {
    a.informers == b.informers
}

/// What changed from `a` to `b` that a running host cannot take: settings read once at start.
fn needs_restart(a: &Config, b: &Config) -> Option<&'static str> {
    if a.executor != b.executor {
        Some("executor changed; the number of workers needs a restart")
    } else if a.policy_reports != b.policy_reports {
        Some("policyReports changed; the report writer's settings need a restart")
    } else if a.dir != b.dir {
        Some("dir changed; the dir source's settings need a restart")
    } else if !same_config(a, b) {
        Some("informers changed; informer changes need a restart")
    } else {
        None
    }
}

impl Reloader {
    /// A reloader for the host started from `config` (read from `config_path`).
    pub fn new(
        config_path: PathBuf,
        config: Config,
        manager: PluginManager,
        plugins: PluginSet,
    ) -> Arc<Self> {
        let text = std::fs::read_to_string(&config_path).unwrap_or_default();
        Arc::new(Self {
            config_path,
            config: Mutex::new(config),
            manager,
            plugins,
            busy: Mutex::new(()),
            config_text: Mutex::new(text),
            tried: Mutex::default(),
        })
    }

    fn specs(&self) -> BTreeMap<String, PluginSpec> {
        let cfg = lock(&self.config);
        cfg.plugin_specs()
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect()
    }

    fn handle(&self, name: &str) -> Option<Arc<PluginHandle>> {
        self.plugins.get(name)
    }

    /// Reloads one plugin from its module file (as the config says).
    pub fn reload_plugin(&self, name: &str) -> Result<String, ReloadError> {
        let _busy = lock(&self.busy);
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

    /// Re-reads the config and applies it, then reloads every plugin's module.
    pub fn reload_all(&self) -> Result<String, ReloadError> {
        let mut done = vec![self.reload_config()?];
        for name in self.specs().keys() {
            match self.reload_plugin(name) {
                Ok(m) => done.push(m),
                Err(ReloadError::Refused(e)) => {
                    done.push(format!("plugin {name:?} kept its running version: {e}"))
                }
                Err(ReloadError::UnknownPlugin(_)) => {}
            }
        }
        Ok(done.join("\n"))
    }

    /// Re-reads the config file and applies plugin changes; a bad config changes nothing.
    pub fn reload_config(&self) -> Result<String, ReloadError> {
        let _busy = lock(&self.busy);
        let refused = |e: &dyn std::fmt::Display| {
            tracing::error!(error = %e, "config reload refused; nothing changed");
            ReloadError::Refused(format!("config reload refused, nothing changed: {e}"))
        };
        let mut next = Config::load(&self.config_path).map_err(|e| refused(&e))?;
        // OCI modules already pulled stay as they are (a moved tag is the poller's business);
        // new references are pulled now. Changed `oci` settings pull everything again. The
        // config's lock is not held across the pull (`busy` keeps reloads one at a time).
        let previous = {
            let cfg = lock(&self.config);
            (cfg.oci == next.oci).then(|| cfg.oci_pulled.clone())
        };
        crate::oci::block_on(next.pull_oci(previous.as_ref()))
            .and_then(|pulled| pulled)
            .map_err(|e| refused(&e))?;
        let mut cfg = lock(&self.config);
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
            .plugin_specs()
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect();
        // Check every added or restarted plugin before touching anything.
        let mut started = Vec::new();
        let mut actions = Vec::new();
        for p in &next.plugins {
            let spec = &new_specs[&p.name];
            match old.get(&p.name) {
                None => {
                    let c = self.manager.check(spec).map_err(|e| {
                        ReloadError::Refused(format!("config reload refused, nothing changed: {e}"))
                    })?;
                    started.push(c);
                    actions.push(format!("plugin {:?} added", p.name));
                }
                Some(o) if registration_changed(o, p) => {
                    let c = self.manager.check(spec).map_err(|e| {
                        ReloadError::Refused(format!("config reload refused, nothing changed: {e}"))
                    })?;
                    started.push(c);
                    actions.push(format!(
                        "plugin {:?} restarted (its informers, resync or relistResyncs changed)",
                        p.name
                    ));
                }
                _ => {}
            }
        }
        // Apply: stop removed and restarted ones, attach the checked ones, reload changed ones.
        let mut list = self.plugins.lock();
        list.retain(|h| {
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
                if !new_specs.contains_key(h.name()) {
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
        for p in &next.plugins {
            if let Some(o) = old.get(&p.name)
                && o != p
                && o.informers == p.informers
                && let Some(h) = list.iter().find(|h| h.name() == p.name)
            {
                match h.reload(new_specs[&p.name].clone()) {
                    Ok(r) => actions.push(format!(
                        "plugin {:?} changed: generation {}",
                        p.name, r.generation
                    )),
                    Err(e) => {
                        actions.push(format!("plugin {:?} kept its running version: {e}", p.name))
                    }
                }
            }
        }
        drop(list);
        *cfg = next;
        if actions.is_empty() {
            actions.push("config reloaded: no plugin changed".into());
        }
        for a in &actions {
            tracing::info!("{a}");
        }
        Ok(actions.join("\n"))
    }

    /// Applies what changed while nothing watched: the config file, as [`Self::reload_config`]
    /// does, then every plugin's module whose content differs from what runs. A standby calls it
    /// when it takes the Lease, so it leads with the files as they are then.
    pub fn catch_up(&self) {
        // A refused config is logged by `reload_config`; the plugins keep the one they started
        // with, as a refused reload leaves a leader's.
        let _ = self.reload_config();
        for name in self.specs().into_keys() {
            self.reload_if_changed(&name);
        }
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
        for n in names {
            self.reload_if_changed(&n);
        }
    }

    /// Reloads `name` from its module file if the content differs from what runs. A refused
    /// file is looked at again a few times shortly after: an event can arrive while the file is
    /// still being written, and the write that completes it may send no further event.
    fn reload_if_changed(&self, name: &str) {
        let hash_of = |p: &Path| -> Option<String> {
            let bytes = std::fs::read(p).ok()?;
            Some(
                Sha256::digest(&bytes)
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect(),
            )
        };
        for attempt in 0..RECHECKS {
            if attempt > 0 {
                std::thread::sleep(RECHECK_DELAY);
            }
            let Some(h) = self.handle(name) else { return };
            let Some(module) = self.specs().get(name).map(|s| s.module.clone()) else {
                return;
            };
            let Some(hash) = hash_of(&module) else {
                continue;
            };
            let refused_before = lock(&self.tried).get(name).cloned();
            if hash == h.status().version().0 || refused_before.as_deref() == Some(hash.as_str()) {
                if attempt == 0 || hash == h.status().version().0 {
                    return;
                }
                continue;
            }
            let ok = self.reload_plugin(name).is_ok();
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
    /// blocking thread, never on the delivery path.
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
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                Some(paths) = rx.recv() => {
                    let me = self.clone();
                    let _ = tokio::task::spawn_blocking(move || me.on_changed(&paths)).await;
                    rewatch(&mut debouncer, self.watched_dirs());
                }
            }
        }
    }
}

impl Reloader {
    /// `oci.poll` of the current config (zero when no module is a tag, or `oci.poll` is 0).
    pub fn oci_poll_interval(&self) -> Duration {
        let cfg = lock(&self.config);
        if cfg.oci_pulled.values().all(|p| !p.reference.is_tag()) {
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
            let tags: Vec<(String, crate::oci::Pulled)> = cfg
                .oci_pulled
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
                let mut cfg = lock(&self.config);
                cfg.oci_pulled.insert(module.clone(), pulled);
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
    }
}
