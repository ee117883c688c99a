//! The `wisp` command.

use clap::{Parser, Subcommand};

/// Wisp: a Kubernetes informer host whose event listeners are sandboxed WebAssembly components.
#[derive(Parser)]
#[command(name = "wisp", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the informer pipeline on a small embedded in-memory cluster (no cluster needed):
    /// list the pods, apply a few changes, print what a listener sees and the cache's indexes.
    Demo,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    match Cli::parse().command {
        Command::Demo => {
            wisp_host::demo::run().await?;
        }
    }
    Ok(())
}
