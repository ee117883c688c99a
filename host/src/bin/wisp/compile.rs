//! `wisp __compile`: one module's compile, in a child process of the host.

use wisp_host::plugin::compiler::{self, ArtifactSettings};

/// One module's compile, run by the host in a child process of its own (module on stdin,
/// artifact on stdout; see wisp_host::plugin::compiler). Not for direct use.
#[derive(clap::Args)]
pub struct Args {
    /// Compile fuel checks in.
    #[arg(long)]
    fuel: bool,
    /// Leave the epoch checks out.
    #[arg(long)]
    no_epoch_interruption: bool,
    /// Compile with Winch (the first-load tier).
    #[arg(long)]
    baseline: bool,
}

/// The child's whole life, before any runtime or log starts (its limits are already set); the
/// process's exit code.
pub fn child(a: Args) -> i32 {
    compiler::child_main(ArtifactSettings {
        epoch_interruption: !a.no_epoch_interruption,
        fuel: a.fuel,
        baseline: a.baseline,
    })
}
