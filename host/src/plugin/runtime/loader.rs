//! Loading a plugin: read its module ([`super::module_file`]), compile it (or take it from a cache), link it (the right
//! world, every import provided), instantiate it, `describe` it and `init` it with its settings,
//! all under its limits. Every way a module enters the host goes through here: a plugin started
//! or reloaded (`manager`, `reload`), `wisp check`, `wisp replay` and `wisp test`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::state::{PluginRuntime, VersionInfo};
use crate::actions::PluginActions;
use crate::plugin::bindings::PluginInfo;
use crate::plugin::compile::{LoadError, LoadSource, LoadedComponent, Tier};
use crate::plugin::engine::PluginEngine;
use crate::plugin::error::PluginError;
use crate::plugin::sandbox::instance::{CallError, Instance};
use crate::plugin::sandbox::linker::LinkError;
use crate::plugin::sandbox::state::Grants;
use crate::plugin::spec::PluginSpec;
use crate::plugin::status::PluginStatus;

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
    /// Which compiler its code comes from (the first-load tier's until the background compile
    /// lands: the plugin is then moved onto the Cranelift code by a reload).
    pub tier: Tier,
}

/// A plugin that passed every check: compiled, right world, `describe` and `init` accepted.
pub struct CheckedPlugin {
    /// What the plugin says about itself.
    pub info: PluginInfo,
    /// Timings.
    pub report: LoadReport,
    pub(super) spec: PluginSpec,
    pub(super) pre: crate::plugin::bindings::PluginPre<crate::plugin::sandbox::state::StoreData>,
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
    pub fn abi(&self) -> crate::plugin::bindings::Abi {
        self.pre.abi()
    }

    /// Whether its component takes admission requests (exports `admission`, ABI 0.3).
    pub fn admits(&self) -> bool {
        self.pre.admits()
    }

    pub(super) fn version_info(&self) -> VersionInfo {
        let v = VersionInfo {
            info: self.info.clone(),
            hash: self.report.hash.clone(),
            generation: 1,
            abi: self.pre.abi(),
            tier: self.report.tier,
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
    let bytes = read_module(engine, spec)?;
    check_bytes(engine, spec, &bytes, grants, status)
}

/// The bytes of `spec`'s module file, read as [`super::module_file`] reads any (a regular file
/// of at most `engine.maxModuleSize`, starting as WebAssembly does).
pub fn read_module(engine: &PluginEngine, spec: &PluginSpec) -> Result<Vec<u8>, PluginError> {
    super::module_file::read_module(
        &spec.name,
        &spec.module,
        spec.module_links,
        engine.max_module_size(),
    )
}

/// Why `spec`'s module did not load, as the error naming the plugin and the module.
pub(super) fn load_error(spec: &PluginSpec, e: LoadError) -> PluginError {
    let (plugin, path) = (spec.name.clone(), spec.module.clone());
    match e {
        LoadError::NotWasm => PluginError::NotWasm { plugin, path },
        LoadError::NotComponent => PluginError::NotComponent { plugin, path },
        LoadError::Invalid(detail) => PluginError::Compile {
            plugin,
            path,
            detail,
        },
        LoadError::TooSlow {
            limit,
            setting,
            wall,
        } => PluginError::CompileTimeout {
            plugin,
            path,
            limit,
            setting,
            wall,
        },
        LoadError::TooBig { limit, setting } => PluginError::CompileMemory {
            plugin,
            path,
            limit,
            setting,
        },
        LoadError::Crashed(detail) => PluginError::CompilerFailed {
            plugin,
            path,
            detail,
        },
    }
}

/// A module compiled (or taken from a cache) and linked against the host: instantiated afresh
/// for each check of it.
#[derive(Clone)]
pub struct Prepared {
    pre: crate::plugin::bindings::PluginPre<crate::plugin::sandbox::state::StoreData>,
    source: LoadSource,
    elapsed: Duration,
    hash: String,
    tier: Tier,
}

impl Prepared {
    /// Where the compiled component came from, and how long obtaining it took.
    pub fn load(&self) -> (LoadSource, Duration) {
        (self.source, self.elapsed)
    }

    /// SHA-256 of the module.
    pub fn hash(&self) -> &str {
        &self.hash
    }
}

/// Loads (compiles, or takes from a cache) and links `bytes`, the module of `spec`.
fn prepare(
    engine: &Arc<PluginEngine>,
    spec: &PluginSpec,
    bytes: &[u8],
    first_load: bool,
) -> Result<Prepared, PluginError> {
    let (plugin, path) = (spec.name.clone(), spec.module.clone());
    let loaded = engine
        .load_with(bytes, first_load)
        .map_err(|e| load_error(spec, e))?;
    let pre = engine.linked(&loaded).map_err(|e| match e {
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
    let LoadedComponent {
        source,
        elapsed,
        hash,
        tier,
        ..
    } = loaded;
    Ok(Prepared {
        pre,
        source,
        elapsed,
        hash,
        tier,
    })
}

/// Whether a plugin's informers must be those its `describe` names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Informers {
    /// From the host's config: every informer `describe` names must be among them.
    Configured,
    /// Offline (`wisp check`, `replay`, `test`): whatever the caller grants.
    Offline,
}

/// [`check_with`] on bytes already read.
fn check_bytes(
    engine: &Arc<PluginEngine>,
    spec: &PluginSpec,
    bytes: &[u8],
    grants: Grants,
    status: Option<Arc<PluginStatus>>,
) -> Result<CheckedPlugin, PluginError> {
    if spec.limits.fuel.is_some() && !engine.fuel() {
        return Err(PluginError::FuelDisabled {
            plugin: spec.name.clone(),
        });
    }
    // A start (no status yet) may take the first-load tier; a reload (the running plugin's
    // status) keeps the running version meanwhile and waits for the Cranelift code.
    let prepared = prepare(engine, spec, bytes, status.is_none())?;
    instantiate(
        engine,
        spec,
        &prepared,
        grants,
        status,
        Informers::Configured,
    )
}

/// A fresh instance of `prepared`, described and initialised with `spec`'s settings, limits and
/// actions and `grants`. With [`Informers::Configured`], a plugin whose `describe` names an
/// informer `spec` does not give it is refused before `init`.
fn instantiate(
    engine: &Arc<PluginEngine>,
    spec: &PluginSpec,
    prepared: &Prepared,
    grants: Grants,
    status: Option<Arc<PluginStatus>>,
    informers: Informers,
) -> Result<CheckedPlugin, PluginError> {
    let plugin = spec.name.clone();
    let start = std::time::Instant::now();
    let pre = prepared.pre.clone();
    let status = status.unwrap_or_default();
    let (actions, api) = host_api(spec, &grants, &status);
    let logs_before = status.logs.total();
    let failed = |phase, e: CallError| PluginError::Failed {
        plugin: plugin.clone(),
        phase,
        detail: crate::plugin::sandbox::instance::with_panic_message(&e, &status.logs, logs_before),
    };
    let mut instance = Instance::new(engine.metering(), &pre, api, &spec.limits)
        .map_err(|e| failed("instantiate", e))?;
    let info = instance.describe().map_err(|e| failed("describe", e))?;
    if informers == Informers::Configured {
        check_informers(spec, &info)?;
    }
    instance
        .init(&spec.settings.to_string())
        .map_err(|e| failed("init", e))?
        .map_err(|message| PluginError::SettingsRejected {
            plugin: plugin.clone(),
            message,
        })?;
    let report = LoadReport {
        source: prepared.source,
        tier: prepared.tier,
        load: prepared.elapsed,
        instantiate: start.elapsed(),
        hash: prepared.hash.clone(),
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

/// Refuses a plugin whose `describe` names an informer its config entry does not give it (its
/// cache reads and deliveries from there would all fail), naming both lists.
fn check_informers(spec: &PluginSpec, info: &PluginInfo) -> Result<(), PluginError> {
    let missing: Vec<String> = info
        .informers
        .iter()
        .filter(|i| !spec.informers.contains(i))
        .cloned()
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(PluginError::InformersNotGiven {
        plugin: spec.name.clone(),
        missing,
        wanted: info.informers.clone(),
        given: spec.informers.clone(),
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
    spec: PluginSpec,
    grants: Grants,
) -> Result<CheckedPlugin, PluginError> {
    let module = prepare_file(engine, &spec.module)?;
    check_prepared(engine, &module, spec, grants)
}

/// A module file loaded and linked once, for as many fresh instances as a caller checks
/// (`wisp test`: one per case), with what its `describe` says when it can say.
#[derive(Clone)]
pub struct PreparedFile {
    /// The compiled, linked module.
    pub prepared: Prepared,
    /// What its `describe` says, from an instance of its own (`None` when it cannot say:
    /// checking it tells why).
    pub info: Option<PluginInfo>,
    module: std::path::PathBuf,
}

/// Reads, loads (a compile, or a cache's) and links the module file `module` once; named, in
/// errors, by the file's stem.
pub fn prepare_file(
    engine: &Arc<PluginEngine>,
    module: &Path,
) -> Result<PreparedFile, PluginError> {
    let spec = PluginSpec::new(stem(module), module, &[]);
    let bytes = read_module(engine, &spec)?;
    let prepared = prepare(engine, &spec, &bytes, true)?;
    let info = describe_pre(engine, &spec, &prepared.pre);
    Ok(PreparedFile {
        prepared,
        info,
        module: module.to_owned(),
    })
}

/// Checks a fresh instance of `module` (loaded once with [`prepare_file`]) with `spec`'s
/// settings and actions and `grants`, named as [`check_file`] names it.
pub fn check_prepared(
    engine: &Arc<PluginEngine>,
    module: &PreparedFile,
    mut spec: PluginSpec,
    grants: Grants,
) -> Result<CheckedPlugin, PluginError> {
    spec.module = module.module.clone();
    spec.name = module
        .info
        .as_ref()
        .map(|i| i.name.clone())
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| stem(&module.module));
    if spec.limits.fuel.is_some() && !engine.fuel() {
        return Err(PluginError::FuelDisabled { plugin: spec.name });
    }
    instantiate(
        engine,
        &spec,
        &module.prepared,
        grants,
        None,
        Informers::Offline,
    )
}

/// A module file's stem, the plugin's name when it cannot say its own.
fn stem(module: &Path) -> String {
    module
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".into())
}

/// The actions of an instance of `spec` and the state its imports work on.
fn host_api(
    spec: &PluginSpec,
    grants: &Grants,
    status: &Arc<PluginStatus>,
) -> (Arc<PluginActions>, crate::plugin::sandbox::state::HostApi) {
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

/// What the module file says of itself in `describe`, from an instance of its own under the
/// default limits (no settings, no `init`); `None` when it cannot be read, compiled, linked,
/// instantiated or described (checking it says why).
pub fn describe_file(engine: &Arc<PluginEngine>, module: &Path) -> Option<PluginInfo> {
    prepare_file(engine, module).ok()?.info
}

/// What a linked module says of itself in `describe`, from an instance of its own under
/// `spec`'s limits (no settings, no `init`, no grants); `None` when it cannot be instantiated
/// or described.
fn describe_pre(
    engine: &Arc<PluginEngine>,
    spec: &PluginSpec,
    pre: &crate::plugin::bindings::PluginPre<crate::plugin::sandbox::state::StoreData>,
) -> Option<PluginInfo> {
    let (_, api) = host_api(spec, &Grants::default(), &Arc::default());
    Instance::new(engine.metering(), pre, api, &spec.limits)
        .ok()?
        .describe()
        .ok()
}
