//! `wisp test`: fixture files run against a plugin, offline.

use std::path::PathBuf;

use crate::args::CompileArgs;

/// Run fixture files against a plugin, offline
///
/// Each case gives objects in and expects outcomes, verdicts, actions, logs and counters out.
/// The module is compiled once per run, a fresh instance per case; the informers the plugin's
/// describe names are granted unless the fixture's `informers` says otherwise; actions are
/// audited, never sent. Fails when any case does. Object files (`{file: path}`) are read only
/// inside the fixture's directory, regular files of at most 16 MiB. The format is in
/// docs/plugins/testing.md.
#[derive(clap::Args)]
pub struct Args {
    /// The component (.wasm).
    #[arg(long)]
    plugin: PathBuf,
    /// Fixture files (YAML).
    #[arg(required = true)]
    fixtures: Vec<PathBuf>,
    #[command(flatten)]
    compile: CompileArgs,
}

pub fn run(a: Args) -> anyhow::Result<()> {
    let engine = a.compile.engine()?;
    let mut out = std::io::stdout().lock();
    let (mut cases, mut passed) = (0, 0);
    // One compile (or module-cache load) for the run; a fresh instance per case.
    let plugin = wisp_host::fixture::load(&engine, &a.plugin, &mut out)?;
    for f in &a.fixtures {
        let s = wisp_host::fixture::run_loaded(&engine, &plugin, f, &mut out)?;
        cases += s.cases;
        passed += s.passed;
    }
    if passed < cases {
        anyhow::bail!("{} of {cases} cases failed", cases - passed);
    }
    Ok(())
}
