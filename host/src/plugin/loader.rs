//! Loading a plugin: read its module, compile it (or take it from a cache), link it (the right
//! world, every import provided), instantiate it, `describe` it and `init` it with its settings,
//! all under its limits. Every way a module enters the host goes through here: a plugin started
//! or reloaded (`manager`, `reload`), `wisp check`, `wisp replay` and `wisp test`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::bindings::PluginInfo;
use super::engine::{LinkError, LoadError, LoadSource, LoadedComponent, PluginEngine};
use super::error::PluginError;
use super::instance::{CallError, Instance};
use super::runtime::{PluginRuntime, VersionInfo};
use super::spec::PluginSpec;
use super::state::Grants;
use super::status::PluginStatus;
use crate::actions::PluginActions;

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

    pub(super) fn version_info(&self) -> VersionInfo {
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

/// Reads, compiles and checks a plugin (no informers needed: `grants` may be empty). Its
/// counters and logs go to `status` (a reload's: the running plugin's), or to a new one.
pub fn check_with(
    engine: &Arc<PluginEngine>,
    spec: &PluginSpec,
    grants: Grants,
    status: Option<Arc<PluginStatus>>,
) -> Result<CheckedPlugin, PluginError> {
    let bytes = std::fs::read(&spec.module).map_err(|source| PluginError::Read {
        plugin: spec.name.clone(),
        path: spec.module.clone(),
        source,
    })?;
    check_bytes(engine, spec, &bytes, grants, status)
}

/// Why `spec`'s module did not load, as the error naming the plugin and the module.
fn load_error(spec: &PluginSpec, e: LoadError) -> PluginError {
    let (plugin, path) = (spec.name.clone(), spec.module.clone());
    match e {
        LoadError::NotWasm => PluginError::NotWasm { plugin, path },
        LoadError::NotComponent => PluginError::NotComponent { plugin, path },
        LoadError::Invalid(detail) => PluginError::Compile {
            plugin,
            path,
            detail,
        },
        LoadError::TooSlow(limit) => PluginError::CompileTimeout {
            plugin,
            path,
            limit,
        },
        LoadError::TooBig(limit) => PluginError::CompileMemory {
            plugin,
            path,
            limit,
        },
        LoadError::Crashed(detail) => PluginError::CompilerFailed {
            plugin,
            path,
            detail,
        },
    }
}

/// [`check_with`] on bytes already read.
fn check_bytes(
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
    } = engine.load(bytes).map_err(|e| load_error(spec, e))?;
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
    let informers: Vec<&str> = grants.caches.keys().map(String::as_str).collect();
    let mut spec = PluginSpec::new("", module, &informers);
    spec.settings = settings;
    check_file(engine, spec, grants)
}

/// Checks `spec.module`, a file, with `spec`'s settings and actions and `grants` (for `wisp
/// replay` and `wisp test`). The plugin is named as it names itself (logs and errors say what
/// the config would call it), the file being only where it was read from; when it cannot say,
/// the file's stem stands in and the check tells what is wrong.
pub fn check_file(
    engine: &Arc<PluginEngine>,
    mut spec: PluginSpec,
    grants: Grants,
) -> Result<CheckedPlugin, PluginError> {
    let module = spec.module.clone();
    spec.name = module
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".into());
    let mut first_load = None;
    if let Ok(bytes) = std::fs::read(&module) {
        // A module that does not load is refused now: loading it again would compile it again
        // (a compile bomb twice).
        let loaded = engine.load(&bytes).map_err(|e| load_error(&spec, e))?;
        if let Some(name) = declared_name(engine, &spec, &loaded.component) {
            spec.name = name;
        }
        first_load = Some((loaded.source, loaded.elapsed));
    }
    let mut checked = check_with(engine, &spec, grants, None)?;
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
    let info = describe_component(engine, spec, component)?;
    Some(info.name).filter(|n| !n.trim().is_empty())
}

/// What the module file says of itself in `describe`, from an instance of its own under the
/// default limits (no settings, no `init`); `None` when it cannot be read, compiled, linked,
/// instantiated or described (checking it says why).
pub fn describe_file(engine: &Arc<PluginEngine>, module: &Path) -> Option<PluginInfo> {
    let loaded = engine.load(&std::fs::read(module).ok()?).ok()?;
    describe_component(engine, &PluginSpec::new("", module, &[]), &loaded.component)
}

fn describe_component(
    engine: &Arc<PluginEngine>,
    spec: &PluginSpec,
    component: &wasmtime::component::Component,
) -> Option<PluginInfo> {
    let pre = engine.instance_pre(component).ok()?;
    let (_, api) = host_api(spec, &Grants::default(), &Arc::default());
    Instance::new(engine, &pre, api, &spec.limits)
        .ok()?
        .describe()
        .ok()
}
