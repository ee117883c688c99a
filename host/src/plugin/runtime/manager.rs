//! Starting plugins: load and check them (see [`super::loader`]), then attach one listener per
//! granted informer; reloading and stopping them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::calls::WasmHandler;
use super::loader::{CheckedPlugin, LoadReport, check_with};
use super::state::PluginRuntime;
use crate::actions::HostServices;
use crate::informer::shared_informer::HandlerRegistration;
use crate::informer::{Cache, SharedInformer};
use crate::plugin::compile::Tier;
use crate::plugin::engine::PluginEngine;
use crate::plugin::error::PluginError;
use crate::plugin::sandbox::state::Grants;
use crate::plugin::spec::PluginSpec;
use crate::plugin::status::{PluginState, PluginStatus};
use crate::sync::lock;

/// A running plugin.
pub struct PluginHandle {
    runtime: Arc<Mutex<PluginRuntime>>,
    name: String,
    report: LoadReport,
    status: Arc<PluginStatus>,
    registrations: Vec<(Arc<SharedInformer>, HandlerRegistration)>,
}

impl PluginHandle {
    /// The plugin's configured name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The version running now: what it says about itself, its module, hash and generation.
    pub fn running(&self) -> crate::plugin::status::Running {
        self.status.running()
    }

    /// Load timings of the first version (see [`PluginHandle::running`] for the current one).
    pub fn report(&self) -> &LoadReport {
        &self.report
    }

    /// Counters, state, last error, logs and the plugin's own metrics.
    pub fn status(&self) -> &Arc<PluginStatus> {
        &self.status
    }

    /// Whether the plugin is running (not quarantined).
    pub fn state(&self) -> PluginState {
        self.status.state()
    }

    /// Every listener of the plugin has handled its initial list.
    pub fn has_synced(&self) -> bool {
        self.registrations.iter().all(|(_, r)| r.has_synced())
    }

    /// Each notification's time from the plugin's queues to its outcome: cumulative `(bound,
    /// count)` buckets over all its informers, sum in seconds, count.
    pub fn waited(&self) -> crate::informer::latency::Snapshot {
        use crate::informer::latency::{LatencyHistogram, WAIT_BUCKETS};
        let mut all = LatencyHistogram::with_buckets(&WAIT_BUCKETS).snapshot();
        for (_, r) in &self.registrations {
            let (buckets, sum, count) = r.waited();
            for ((_, n), (_, m)) in all.0.iter_mut().zip(buckets) {
                *n += m;
            }
            all.1 += sum;
            all.2 += count;
        }
        all
    }

    /// Per-informer queue counters.
    pub fn queues(&self) -> Vec<(String, crate::informer::listener::ListenerStats)> {
        self.registrations
            .iter()
            .map(|(i, r)| (i.name().to_owned(), r.stats()))
            .collect()
    }

    /// Replaces the running version with `spec` (new module and/or settings, limits, policy),
    /// between two batches, keeping the queues (a changed `queue` bound applies to them at
    /// once). On error the running version stays.
    pub fn reload(&self, spec: PluginSpec) -> Result<super::reload::ReloadReport, PluginError> {
        let queue = spec.queue;
        let report = super::reload::reload(&self.runtime, spec)?;
        for (_, reg) in &self.registrations {
            reg.set_queue_bound(queue);
        }
        if report.replay {
            replay(&self.name, &self.registrations);
        }
        Ok(report)
    }

    /// Which compiler the running version's code comes from: [`Tier::Baseline`] (Winch) from
    /// a first load until the background Cranelift compile lands and the plugin is moved onto it.
    /// Read from the published status: never waits on a call in progress.
    pub fn tier(&self) -> Tier {
        self.status.running().tier
    }

    /// A plugin started on the first-load tier's code: once the module's Cranelift compile
    /// lands, it is reloaded onto it (the reload path: `describe`, `init`, state handed over by
    /// `snapshot`/`restore`, probation, a replay when it asks for one), unless it was reloaded
    /// to another module meanwhile. A failed compile leaves it where it is, said in its log.
    fn tier_up_when_compiled(&self, hash: String) {
        let engine = lock(&self.runtime).engine.clone();
        let runtime = Arc::downgrade(&self.runtime);
        let (name, regs) = (self.name.clone(), self.registrations.clone());
        let tasks = engine.tasks().clone();
        let spawned = tasks.spawn_thread("wisp-tier-up-reload", move || {
            let compiled = engine.wait_optimized(&hash);
            let Some(runtime) = runtime.upgrade() else {
                return;
            };
            let spec = {
                let rt = lock(&runtime);
                if let Err(e) = compiled {
                    let e = super::loader::load_error(&rt.spec, e);
                    tracing::warn!(plugin = %name, error = %e, "the optimized compile failed; the plugin stays on its first-load code");
                    rt.status.logs.push(format!("host: stays on its first-load (Winch) code: {e}"));
                    return;
                }
                if rt.version.hash != hash || engine.tier(&rt.pre) != Tier::Baseline {
                    return;
                }
                rt.spec.clone()
            };
            match super::reload::reload(&runtime, spec) {
                Ok(report) => {
                    lock(&runtime).status.logs.push(format!(
                        "host: moved onto the optimized (Cranelift) code: generation {}",
                        report.generation
                    ));
                    tracing::info!(plugin = %name, generation = report.generation, "moved onto the optimized code");
                    if report.replay {
                        replay(&name, &regs);
                    }
                }
                Err(e) => {
                    tracing::warn!(plugin = %name, error = %e, "not moved onto the optimized code; it stays on its first-load code")
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!(plugin = %self.name, error = %e, "cannot start the thread that moves the plugin onto its optimized code");
        }
    }

    /// Detaches the plugin from its informers; what was queued for it is dropped, and so are
    /// its verdicts.
    pub fn stop(&self) {
        for (inf, reg) in &self.registrations {
            inf.remove_event_handler(reg);
        }
        let verdicts = lock(&self.runtime).grants.services.verdicts.clone();
        verdicts.clear_plugin(&self.name);
    }
}

/// Gives every cached object of the plugin's informers to its new version again.
fn replay(name: &str, registrations: &[(Arc<SharedInformer>, HandlerRegistration)]) {
    for (inf, reg) in registrations {
        let n = inf.resend_cache(reg);
        tracing::info!(plugin = %name, informer = %inf.name(), objects = n, "cache replayed to the new version");
    }
}

/// Loads and starts plugins against a set of informers.
pub struct PluginManager {
    engine: Arc<PluginEngine>,
    informers: BTreeMap<String, Arc<SharedInformer>>,
    /// Informers of one plugin alone (a custom resource's inline informers), by the scope its
    /// spec names ([`PluginSpec::informer_scope`]), then by the name the plugin knows them by.
    scoped: Mutex<BTreeMap<String, BTreeMap<String, Arc<SharedInformer>>>>,
    services: HostServices,
}

impl PluginManager {
    /// A manager on `engine` with no informers yet.
    pub fn new(engine: Arc<PluginEngine>) -> Self {
        Self {
            engine,
            informers: BTreeMap::new(),
            scoped: Mutex::default(),
            services: HostServices::default(),
        }
    }

    /// Verdicts and actions of the plugins started from now on go through `services`.
    pub fn set_services(&mut self, services: HostServices) {
        self.services = services;
    }

    /// The services plugins share (verdict store, action sink, audit log).
    pub fn services(&self) -> &HostServices {
        &self.services
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<PluginEngine> {
        &self.engine
    }

    /// Makes an informer available to plugins under its name.
    pub fn add_informer(&mut self, informer: Arc<SharedInformer>) {
        self.informers.insert(informer.name().to_owned(), informer);
    }

    /// Makes `informers` available, under their own names, to the plugins whose spec names
    /// `scope` (and to no other plugin).
    pub fn add_scoped_informers(&self, scope: &str, informers: Vec<Arc<SharedInformer>>) {
        let map = informers
            .into_iter()
            .map(|i| (i.name().to_owned(), i))
            .collect();
        lock(&self.scoped).insert(scope.to_owned(), map);
    }

    /// Forgets the informers of `scope` (they are stopped by whoever runs them).
    pub fn remove_scoped_informers(&self, scope: &str) {
        lock(&self.scoped).remove(scope);
    }

    /// The informers `spec` may be given: those of its scope, or the host's.
    fn informers_of(&self, spec: &PluginSpec) -> BTreeMap<String, Arc<SharedInformer>> {
        match &spec.informer_scope {
            Some(scope) => lock(&self.scoped).get(scope).cloned().unwrap_or_default(),
            None => self.informers.clone(),
        }
    }

    fn grants(&self, spec: &PluginSpec) -> Result<Grants, PluginError> {
        let mut g: BTreeMap<String, Cache> = BTreeMap::new();
        let known = self.informers_of(spec);
        for name in &spec.informers {
            let inf = known
                .get(name)
                .ok_or_else(|| PluginError::UnknownInformer {
                    plugin: spec.name.clone(),
                    informer: name.clone(),
                    known: known.keys().cloned().collect::<Vec<_>>().join(", "),
                })?;
            g.insert(name.clone(), inf.cache());
        }
        Ok(Grants {
            caches: Arc::new(g),
            services: self.services.clone(),
        })
    }

    /// Compiles and checks a plugin without attaching it: right world, `describe` works, `init`
    /// accepts the settings. Nothing running is touched.
    pub fn check(&self, spec: &PluginSpec) -> Result<CheckedPlugin, PluginError> {
        let grants = self.grants(spec)?;
        check_with(&self.engine, spec, grants, None)
    }

    /// Checks, then attaches the plugin to each of its informers (a late-joining plugin first
    /// receives every cached object as an initial-list add).
    pub fn start(&self, spec: PluginSpec) -> Result<PluginHandle, PluginError> {
        let checked = self.check(&spec)?;
        self.attach(checked)
    }

    /// Attaches a checked plugin to its informers: one listener per informer, all in one group
    /// on the informers' shared executor (they share the plugin's instance, so they take turns).
    /// Fails, attached to none, when an informer has stopped or its executor cannot start.
    pub fn attach(&self, checked: CheckedPlugin) -> Result<PluginHandle, PluginError> {
        let version = checked.version_info();
        let name = checked.spec.name.clone();
        let group = crate::informer::GroupId::new();
        // Its handlers share its instance: one group on the shared executor, so they take
        // turns; its queue is bounded as its spec says, and overflow counts in its status.
        let options = crate::informer::HandlerOptions {
            resync: checked.spec.resync,
            relist_resyncs: checked.spec.relist_resyncs,
            batch_max: Some(checked.spec.batch_max.max(1)),
            queue: checked.spec.queue,
            overflow: Some(Arc::new(crate::plugin::status::QueueOverflow {
                plugin: name.clone(),
                status: checked.status.clone(),
            })),
            placement: crate::informer::Placement::Shared { group: Some(group) },
        };
        let informers = checked.spec.informers.clone();
        let known = self.informers_of(&checked.spec);
        let (info, report, status) = (
            checked.info.clone(),
            checked.report.clone(),
            checked.status.clone(),
        );
        let runtime = Arc::new(Mutex::new(PluginRuntime::new(
            checked,
            self.engine.clone(),
            version,
        )));
        let mut registrations: Vec<(Arc<SharedInformer>, HandlerRegistration)> = Vec::new();
        for inf_name in informers {
            let Some(inf) = known.get(&inf_name) else {
                continue;
            };
            let handler = WasmHandler {
                runtime: runtime.clone(),
                informer: inf_name.clone(),
            };
            match inf.add_event_handler_with_options(
                name.clone(),
                Box::new(handler),
                options.clone(),
            ) {
                Ok(reg) => registrations.push((inf.clone(), reg)),
                Err(e) => {
                    for (inf, reg) in &registrations {
                        inf.remove_event_handler(reg);
                    }
                    return Err(PluginError::Attach {
                        plugin: name,
                        informer: inf_name,
                        detail: e.to_string(),
                    });
                }
            }
        }
        tracing::info!(plugin = %name, version = %info.version, source = ?report.source, tier = report.tier.as_str(), load = ?report.load, "plugin started");
        let baseline = (report.tier == Tier::Baseline).then(|| report.hash.clone());
        let handle = PluginHandle {
            runtime,
            name,
            report,
            status,
            registrations,
        };
        if let Some(hash) = baseline {
            handle.tier_up_when_compiled(hash);
        }
        Ok(handle)
    }
}
