//! Errors of loading and starting plugins. Each names the plugin, the part and the fix.

use std::path::PathBuf;

/// Why a plugin could not be loaded or started. None of these disturb plugins already running.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The module file cannot be read.
    #[error("plugin {plugin:?}: module {path}: cannot read: {source}")]
    Read {
        /// Plugin name.
        plugin: String,
        /// Module path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The module path names something other than a regular file (a FIFO, a device, a socket,
    /// a directory, or a link where links are not followed): refused before any byte is read.
    #[error("plugin {plugin:?}: module {path}: is {kind}, not a regular file; refused")]
    NotRegularFile {
        /// Plugin name.
        plugin: String,
        /// Module path.
        path: PathBuf,
        /// What it is, e.g. `a FIFO`.
        kind: &'static str,
    },
    /// The module file is larger than `engine.maxModuleSize`: by its size, before it is read,
    /// or by what reading it gave (it grew, or its size said nothing, as in `/proc`).
    #[error(
        "plugin {plugin:?}: module {path}: is over engine.maxModuleSize ({limit} bytes): at least {size} bytes; refused"
    )]
    ModuleTooLarge {
        /// Plugin name.
        plugin: String,
        /// Module path.
        path: PathBuf,
        /// Its size, or the bytes read when reading stopped (`limit + 1`).
        size: u64,
        /// `engine.maxModuleSize`, bytes.
        limit: u64,
    },
    /// The file is not WebAssembly at all.
    #[error(
        "plugin {plugin:?}: module {path}: not a WebAssembly file (it does not start with \"\\0asm\")"
    )]
    NotWasm {
        /// Plugin name.
        plugin: String,
        /// Module path.
        path: PathBuf,
    },
    /// A core module, not a component.
    #[error(
        "plugin {plugin:?}: module {path}: a core WebAssembly module, not a component; build the plugin with `cargo build --target wasm32-wasip2`"
    )]
    NotComponent {
        /// Plugin name.
        plugin: String,
        /// Module path.
        path: PathBuf,
    },
    /// The component does not validate or compile.
    #[error("plugin {plugin:?}: module {path}: invalid component: {detail}")]
    Compile {
        /// Plugin name.
        plugin: String,
        /// Module path.
        path: PathBuf,
        /// Compiler message.
        detail: String,
    },
    /// Its compile took more CPU time than `engine.compileTimeout` (or `--compile-timeout`),
    /// or ran past its wall-clock backstop.
    #[error(
        "plugin {plugin:?}: module {path}: {}; refused",
        too_slow(*limit, setting, *wall)
    )]
    CompileTimeout {
        /// Plugin name.
        plugin: String,
        /// Module path.
        path: PathBuf,
        /// The limit.
        limit: std::time::Duration,
        /// The setting (or flag) that gives it.
        setting: &'static str,
        /// The wall-clock backstop ended it, not its CPU time.
        wall: bool,
    },
    /// The component is not of world `wisp:plugin/plugin` at a version the host loads.
    #[error(
        "plugin {plugin:?}: module {path}: not a wisp:plugin/plugin component (0.3.0, 0.2.0 or 0.1.0): {detail}"
    )]
    WrongWorld {
        /// Plugin name.
        plugin: String,
        /// Module path.
        path: PathBuf,
        /// What is missing or mismatched.
        detail: String,
    },
    /// Its compile needed more memory than `engine.compileMemory` (or `--compile-memory`).
    #[error(
        "plugin {plugin:?}: module {path}: compiling needed more memory than {setting} ({}); refused",
        super::compile::compiler::mib(*limit)
    )]
    CompileMemory {
        /// Plugin name.
        plugin: String,
        /// Module path.
        path: PathBuf,
        /// The limit, bytes.
        limit: u64,
        /// The setting (or flag) that gives it.
        setting: &'static str,
    },
    /// The compiler process failed otherwise (killed by another, crashed).
    #[error("plugin {plugin:?}: module {path}: not compiled: {detail}; refused")]
    CompilerFailed {
        /// Plugin name.
        plugin: String,
        /// Module path.
        path: PathBuf,
        /// How it failed.
        detail: String,
    },
    /// The component imports an interface (or a function or resource in it) the host does not
    /// provide.
    #[error(
        "plugin {plugin:?}: module {path}: imports {import}, which Wisp does not provide{hint}"
    )]
    MissingImport {
        /// Plugin name.
        plugin: String,
        /// Module path.
        path: PathBuf,
        /// The import, e.g. `wasi:keyvalue/store@0.2.0-draft`.
        import: String,
        /// What plugins get instead (starts with a space), and wasmtime's words.
        hint: String,
    },
    /// The component imports an interface the host provides, but of another type.
    #[error(
        "plugin {plugin:?}: module {path}: imports {import}, which does not match what Wisp provides: {detail}"
    )]
    MismatchedImport {
        /// Plugin name.
        plugin: String,
        /// Module path.
        path: PathBuf,
        /// The import.
        import: String,
        /// What differs.
        detail: String,
    },
    /// The plugin could not be attached to one of its informers.
    #[error("plugin {plugin:?}: cannot attach to informer {informer:?}: {detail}")]
    Attach {
        /// Plugin name.
        plugin: String,
        /// The informer.
        informer: String,
        /// Why (the informer stopped, or its executor could not start).
        detail: String,
    },
    /// `init` refused the settings.
    #[error("plugin {plugin:?}: init: settings rejected: {message}")]
    SettingsRejected {
        /// Plugin name.
        plugin: String,
        /// The plugin's message.
        message: String,
    },
    /// Instantiation, `describe` or `init` trapped or overran its limits.
    #[error("plugin {plugin:?}: {phase}: {detail}")]
    Failed {
        /// Plugin name.
        plugin: String,
        /// `instantiate`, `describe` or `init`.
        phase: &'static str,
        /// What happened.
        detail: String,
    },
    /// The plugin names an informer the host does not run.
    #[error(
        "plugin {plugin:?}: informers: {informer:?} is not a configured informer (configured: {known})"
    )]
    UnknownInformer {
        /// Plugin name.
        plugin: String,
        /// The unknown name.
        informer: String,
        /// The configured names.
        known: String,
    },
    /// Its `describe` names informers its config entry does not give it: every delivery from
    /// and cache read of those would fail.
    #[error(
        "plugin {plugin:?}: its describe asks for informer(s) {} that its config entry does not give it (it asks for: {}; the config gives: {}); add them to the plugin's `informers`",
        quoted(missing),
        quoted(wanted),
        if given.is_empty() { "none".to_owned() } else { quoted(given) }
    )]
    InformersNotGiven {
        /// Plugin name.
        plugin: String,
        /// Those it asks for and is not given.
        missing: Vec<String>,
        /// Every informer its `describe` names.
        wanted: Vec<String>,
        /// The informers its config entry gives it.
        given: Vec<String>,
    },
    /// `limits.fuel` needs an engine with fuel metering.
    #[error(
        "plugin {plugin:?}: limits.fuel is set but the engine runs without fuel metering; enable it in the engine settings"
    )]
    FuelDisabled {
        /// Plugin name.
        plugin: String,
    },
    /// The engine itself could not be set up.
    #[error("plugin engine: {0}")]
    Engine(String),
}

/// `"a", "b"`: names as an error lists them.
fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a compile over its time bound is refused with.
fn too_slow(limit: std::time::Duration, setting: &str, wall: bool) -> String {
    if wall {
        format!(
            "compiling did not end within {:?} of wall-clock time ({}x {setting} {limit:?}, the \
             backstop for a compile starved of CPU: the machine or the pod's CPU quota is too \
             busy; raise {setting})",
            limit * super::compile::WALL_BACKSTOP,
            super::compile::WALL_BACKSTOP
        )
    } else {
        format!("compiling took more than {setting} ({limit:?} of CPU time)")
    }
}
