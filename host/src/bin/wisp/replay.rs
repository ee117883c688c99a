//! `wisp replay`: recorded notifications fed to a plugin, offline.

use std::path::PathBuf;

use crate::args::{CompileArgs, settings_json};

/// Feed recorded notifications to a plugin, offline
///
/// The notifications come from `wisp record`; prints each outcome and the plugin's logs, then
/// its metrics. Fails when any notification does.
#[derive(clap::Args)]
pub struct Args {
    /// The component (.wasm).
    #[arg(long)]
    plugin: PathBuf,
    /// Recorded notifications (JSON Lines).
    #[arg(long)]
    events: PathBuf,
    /// Settings to pass to `init` (JSON).
    #[arg(long, default_value = "{}")]
    settings: String,
    #[command(flatten)]
    compile: CompileArgs,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let engine = a.compile.engine()?;
    let mut out = std::io::stdout().lock();
    let s = wisp_host::record::replay(
        &engine,
        &a.plugin,
        settings_json(&a.settings)?,
        &a.events,
        &mut out,
    )?;
    if s.failed > 0 {
        anyhow::bail!("{} of {} notifications failed", s.failed, s.notifications);
    }
    Ok(())
}
