//! Starting plugins: read, compile (or take from cache), check the world, `describe`, `init`,
//! then attach one listener per granted informer.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::bindings::PluginInfo;
use super::engine::{LinkError, LoadError, LoadSource, LoadedComponent, PluginEngine};
use super::error::PluginError;
use super::instance::{CallError, Instance};
use super::runtime::{PluginRuntime, VersionInfo, WasmHandler};
use super::spec::PluginSpec;
use super::state::Grants;
use super::status::{PluginState, PluginStatus};
use crate::actions::{HostServices, PluginActions};
use crate::informer::shared_informer::HandlerRegistration;
use crate::informer::{Cache, SharedInformer};
use crate::sync::lock;

/// How a plugin was loaded: timings for the benchmarks and the log.
#[derive(Clone, Debug)]
pub struct LoadReport {
    /// Where the compiled component came from.
    pub source: LoadSource,
    /// Time to obtain the compiled component.
    pub load: Duration,
    /// Time to link, instantiate, `describe` and `init`.
    pub instantiate: Duration,
    /// SHA-256 of the module.
    pub hash: String,
}

/// A plugin that passed every check: compiled, right world, `describe` and `init` accepted.
pub struct CheckedPlugin {
    /// What the plugin says about itself.
    pub info: PluginInfo,
    /// Timings.
    pub report: LoadReport,
    pub(super) spec: PluginSpec,
    pub(super) pre: super::bindings::PluginPre<super::state::StoreData>,
    pub(super) instance: Instance,
    pub(super) status: Arc<PluginStatus>,
    pub(super) grants: Grants,
    pub(super) actions: Arc<PluginActions>,
}

impl CheckedPlugin {
    /// The plugin's configured name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The plugin's status (counters, logs, its own metrics).
    pub fn status(&self) -> &Arc<PluginStatus> {
        &self.status
    }

    /// A runtime not attached to any informer: deliveries are handed to it directly (offline
    /// replay, benchmarks).
    pub fn into_runtime(self, engine: Arc<PluginEngine>) -> PluginRuntime {
        let version = self.version_info();
        PluginRuntime::new(self, engine, version)
    }

    /// The ABI (world version) of the component.
    pub fn abi(&self) -> super::bindings::Abi {
        self.pre.abi()
    }

    fn version_info(&self) -> VersionInfo {
        let v = VersionInfo {
            info: self.info.clone(),
            hash: self.report.hash.clone(),
            generation: 1,
            abi: self.pre.abi(),
        };
        v.publish(&self.spec, &self.status);
        v
    }
}

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
    pub fn running(&self) -> super::status::Running {
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
            for (inf, reg) in &self.registrations {
                let n = inf.resend_cache(reg);
                tracing::info!(plugin = %self.name, informer = %inf.name(), objects = n, "cache replayed to the new version");
            }
        }
        Ok(report)
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

/// Loads and starts plugins against a set of informers.
pub struct PluginManager {
    engine: Arc<PluginEngine>,
    informers: BTreeMap<String, Arc<SharedInformer>>,
    services: HostServices,
}

impl PluginManager {
    /// A manager on `engine` with no informers yet.
    pub fn new(engine: Arc<PluginEngine>) -> Self {
        Self {
            engine,
            informers: BTreeMap::new(),
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

    fn grants(&self, spec: &PluginSpec) -> Result<Grants, PluginError> {
        let mut g: BTreeMap<String, Cache> = BTreeMap::new();
        for name in &spec.informers {
            let inf = self
                .informers
                .get(name)
                .ok_or_else(|| PluginError::UnknownInformer {
                    plugin: spec.name.clone(),
                    informer: name.clone(),
                    known: self
                        .informers
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
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
        check_with(&self.engine, spec, grants)
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
            overflow: Some(checked.status.clone()),
            placement: crate::informer::Placement::Shared { group: Some(group) },
        };
        let informers = checked.spec.informers.clone();
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
            let Some(inf) = self.informers.get(&inf_name) else {
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
        tracing::info!(plugin = %name, version = %info.version, source = ?report.source, load = ?report.load, "plugin started");
        Ok(PluginHandle {
            runtime,
            name,
            report,
            status,
            registrations,
        })
    }
}

/// Reads, compiles and checks a plugin (no informers needed: `grants` may be empty).
pub fn check_with(
    engine: &Arc<PluginEngine>,
    spec: &PluginSpec,
    grants: Grants,
) -> Result<CheckedPlugin, PluginError> {
    let bytes = std::fs::read(&spec.module).map_err(|source| PluginError::Read {
        plugin: spec.name.clone(),
        path: spec.module.clone(),
        source,
    })?;
    check_bytes(engine, spec, &bytes, grants, None)
}

/// [`check_with`] on bytes already read.
pub fn check_bytes(
    engine: &Arc<PluginEngine>,
    spec: &PluginSpec,
    bytes: &[u8],
    grants: Grants,
    status: Option<Arc<PluginStatus>>,
) -> Result<CheckedPlugin, PluginError> {
    let (plugin, path) = (spec.name.clone(), spec.module.clone());
    if spec.limits.fuel.is_some() && !engine.fuel() {
        return Err(PluginError::FuelDisabled { plugin });
    }
    let LoadedComponent {
        component,
        source,
        elapsed,
        hash,
    } = engine.load(bytes).map_err(|e| match e {
        LoadError::NotWasm => PluginError::NotWasm {
            plugin: plugin.clone(),
            path: path.clone(),
        },
        LoadError::NotComponent => PluginError::NotComponent {
            plugin: plugin.clone(),
            path: path.clone(),
        },
        LoadError::Invalid(detail) => PluginError::Compile {
            plugin: plugin.clone(),
            path: path.clone(),
            detail,
        },
    })?;
    let start = std::time::Instant::now();
    let pre = engine.instance_pre(&component).map_err(|e| match e {
        LinkError::WrongWorld(detail) => PluginError::WrongWorld {
            plugin: plugin.clone(),
            path: path.clone(),
            detail,
        },
        LinkError::Import {
            import,
            missing: true,
            detail,
        } => PluginError::MissingImport {
            plugin: plugin.clone(),
            path: path.clone(),
            hint: format!("{}: {detail}", LinkError::hint(&import)),
            import,
        },
        LinkError::Import { import, detail, .. } => PluginError::MismatchedImport {
            plugin: plugin.clone(),
            path: path.clone(),
            import,
            detail,
        },
    })?;
    let status = status.unwrap_or_default();
    let (actions, api) = host_api(spec, &grants, &status);
    let logs_before = status.logs.total();
    let failed = |phase, e: CallError| PluginError::Failed {
        plugin: plugin.clone(),
        phase,
        detail: super::runtime::with_panic_message(&e, &status.logs, logs_before),
    };
    let mut instance =
        Instance::new(engine, &pre, api, &spec.limits).map_err(|e| failed("instantiate", e))?;
    let info = instance.describe().map_err(|e| failed("describe", e))?;
    instance
        .init(&spec.settings.to_string())
        .map_err(|e| failed("init", e))?
        .map_err(|message| PluginError::SettingsRejected {
            plugin: plugin.clone(),
            message,
        })?;
    let report = LoadReport {
        source,
        load: elapsed,
        instantiate: start.elapsed(),
        hash,
    };
    Ok(CheckedPlugin {
        info,
        report,
        spec: spec.clone(),
        pre,
        instance,
        status,
        grants,
        actions,
    })
}

/// Checks a module file with settings, with no informers granted (for `wisp check`). The plugin
/// is named as its `describe` names itself (the file's stem when it cannot say).
pub fn check_module(
    engine: &Arc<PluginEngine>,
    module: &Path,
    settings: serde_json::Value,
) -> Result<CheckedPlugin, PluginError> {
    check_with_grants(engine, module, settings, Grants::default())
}

/// Checks a module file with settings and the given caches granted (for `wisp replay`), named as
/// [`check_module`] names it.
pub fn check_with_grants(
    engine: &Arc<PluginEngine>,
    module: &Path,
    settings: serde_json::Value,
    grants: Grants,
) -> Result<CheckedPlugin, PluginError> {
    let stem = module
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".into());
    let informers: Vec<&str> = grants.caches.keys().map(String::as_str).collect();
    let mut spec = PluginSpec::new(stem, module, &informers);
    spec.settings = settings;
    // Named as it names itself (logs and errors say what the config would call it), the file
    // being only where it was read from. When it cannot say, the file's stem stands in and the
    // check below tells what is wrong.
    let mut first_load = None;
    if let Ok(bytes) = std::fs::read(module)
        && let Ok(loaded) = engine.load(&bytes)
    {
        if let Some(name) = declared_name(engine, &spec, &loaded.component) {
            spec.name = name;
        }
        first_load = Some((loaded.source, loaded.elapsed));
    }
    let mut checked = check_with(engine, &spec, grants)?;
    // The module was loaded for the name: report that load (a compile, or the disk cache), not
    // the second one from memory.
    if let Some((source, elapsed)) = first_load {
        checked.report.source = source;
        checked.report.load = elapsed;
    }
    Ok(checked)
}

/// The actions of an instance of `spec` and the state its imports work on.
fn host_api(
    spec: &PluginSpec,
    grants: &Grants,
    status: &Arc<PluginStatus>,
) -> (Arc<PluginActions>, super::state::HostApi) {
    let name: Arc<str> = spec.name.as_str().into();
    let actions = Arc::new(PluginActions::new(
        name.clone(),
        spec.actions.clone(),
        status.clone(),
        grants.services.clone(),
    ));
    let api = PluginRuntime::api(&name, spec, grants, status, &actions);
    (actions, api)
}

/// The name the plugin gives itself in `describe`, from an instance of its own (no `init`);
/// `None` when it cannot be linked, instantiated or described, or gives an empty name.
fn declared_name(
    engine: &Arc<PluginEngine>,
    spec: &PluginSpec,
    component: &wasmtime::component::Component,
) -> Option<String> {
    let pre = engine.instance_pre(component).ok()?;
    let (_, api) = host_api(spec, &Grants::default(), &Arc::default());
    let info = Instance::new(engine, &pre, api, &spec.limits)
        .ok()?
        .describe()
        .ok()?;
    Some(info.name).filter(|n| !n.trim().is_empty())
}
