//! `wisp check`: is it a plugin, does its init accept these settings.

use std::path::PathBuf;

use wisp_host::plugin::budget;
use wisp_host::plugin::check_module;
use wisp_host::units::human_duration;

use crate::args::{CompileArgs, settings_json};

/// Validate a plugin module and its settings
///
/// Is it a wisp:plugin component, does `describe` work, does `init` accept the settings.
/// Prints what it says about itself.
#[derive(clap::Args)]
pub struct Args {
    /// The component (.wasm).
    module: PathBuf,
    /// Settings to pass to `init` (JSON).
    #[arg(long, default_value = "{}")]
    settings: String,
    #[command(flatten)]
    compile: CompileArgs,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let engine = a.compile.engine()?;
    let c = check_module(&engine, &a.module, settings_json(&a.settings)?)?;
    println!(
        "ok: {} {} is a wisp:plugin/plugin@{} component ({})",
        c.info.name,
        c.info.version,
        c.abi(),
        a.module.display()
    );
    if !c.info.informers.is_empty() {
        println!("wants informers: {}", c.info.informers.join(", "));
    }
    if c.admits() {
        println!(
            "takes admission requests (exports wisp:plugin/admission@{})",
            c.abi()
        );
    }
    let how = c.report.source.how();
    println!(
        "{how} in {}; instantiate + describe + init in {}; sha256 {}",
        human_duration(c.report.load),
        human_duration(c.report.instantiate),
        c.report.hash
    );
    let memory = wisp_host::plugin::spec::DEFAULT_MEMORY;
    if let Some(w) = budget::over_limit(
        &[(&c.info.name, memory)],
        budget::Host {
            base: budget::HOST_BASE,
            queues: 0,
        },
        budget::Compiles {
            at_once: 1,
            each: a.compile.memory()?,
        },
        budget::cgroup_memory_limit(),
    ) {
        eprintln!("warning: {w}");
    }
    Ok(())
}
