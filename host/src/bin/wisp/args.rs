//! Arguments more than one subcommand takes: a module's compile bounds, `--settings`, durations.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use wisp_host::config::parse_duration;
use wisp_host::plugin::compiler;
use wisp_host::plugin::{EngineConfig, PluginEngine};

/// The bounds of a module's compile, for the commands that load a module themselves (`wisp run`
/// reads them from `engine:` in its config).
#[derive(clap::Args)]
pub struct CompileArgs {
    /// Most CPU time a module's compile may take (engine.compileTimeout; its wall clock is
    /// bounded at 10 times it); over it the module is refused.
    #[arg(long, value_name = "DURATION", default_value = "120s")]
    compile_timeout: String,
    /// Most address space a module's compile may take (engine.compileMemory, at least 128Mi);
    /// over it the module is refused.
    #[arg(long, value_name = "SIZE", default_value = "1Gi")]
    compile_memory: String,
    /// Largest module file read (engine.maxModuleSize); a larger one is refused unread.
    #[arg(long, value_name = "SIZE", default_value = "64Mi")]
    max_module_size: String,
}

impl CompileArgs {
    /// `--compile-memory`, checked.
    pub fn memory(&self) -> anyhow::Result<u64> {
        let memory = wisp_host::config::parse_bytes(&self.compile_memory)
            .map_err(|e| anyhow::anyhow!("--compile-memory: {e}"))?;
        let min = wisp_host::plugin::compile::MIN_COMPILE_MEMORY;
        if memory < min {
            anyhow::bail!(
                "--compile-memory: {memory} bytes is too little: at least {}Mi",
                min >> 20
            );
        }
        Ok(memory)
    }

    /// An engine that compiles in child processes of this binary, within these bounds.
    pub fn engine(&self) -> anyhow::Result<Arc<PluginEngine>> {
        let timeout = parse_duration(&self.compile_timeout)
            .map_err(|e| anyhow::anyhow!("--compile-timeout: {e}"))?;
        if timeout.is_zero() {
            anyhow::bail!("--compile-timeout: must be more than 0");
        }
        let max_module_size = wisp_host::config::parse_bytes(&self.max_module_size)
            .map_err(|e| anyhow::anyhow!("--max-module-size: {e}"))?;
        Ok(PluginEngine::new(EngineConfig {
            compile_timeout: timeout,
            bound_names: wisp_host::plugin::compile::BoundNames::FLAGS,
            compile_memory: self.memory()?,
            max_module_size,
            compiler: compiler::own_executable(),
            ..EngineConfig::default()
        })?)
    }
}

/// `--for` / `--duration`: a duration like `30s`, when given.
pub fn optional_duration(arg: Option<&str>) -> anyhow::Result<Option<Duration>> {
    arg.map(parse_duration)
        .transpose()
        .map_err(anyhow::Error::msg)
}

/// `--settings`: the JSON passed to a plugin's `init`.
pub fn settings_json(s: &str) -> anyhow::Result<serde_json::Value> {
    serde_json::from_str(s).with_context(|| format!("--settings is not valid JSON: {s}"))
}
