//! The `wisp` command: a module per subcommand, each with its arguments and what it runs. Only
//! this binary touches signals ([`signals`]) and the process's output format (here).

mod args;
mod build;
mod check;
mod compile;
mod new;
mod push;
mod rbac;
mod record;
mod replay;
mod run;
mod signals;
mod test;

use clap::{Parser, Subcommand, ValueEnum};

/// Wisp: a Kubernetes informer host whose event listeners are sandboxed WebAssembly components.
#[derive(Parser)]
#[command(name = "wisp", version, about, long_about = None)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands. Each one's help is its module's `Args` doc comment: its first line is what
/// `wisp --help` lists, the whole is `wisp COMMAND --help`.
#[derive(Subcommand)]
enum Command {
    Run(run::Args),
    Check(check::Args),
    Replay(replay::Args),
    Test(test::Args),
    Record(record::Args),
    Rbac(rbac::Args),
    Push(push::Args),
    New(new::Args),
    Build(build::Args),
    /// Run the informer pipeline on an embedded in-memory cluster
    ///
    /// No cluster, no plugins: lists pods, applies changes, prints what a listener sees.
    Demo,
    #[command(name = "__compile", hide = true)]
    Compile(compile::Args),
}

fn main() {
    let cli = Cli::parse();
    // A compile child: no runtime, no log, nothing but the compile (its limits are already set).
    if let Command::Compile(args) = cli.command {
        std::process::exit(compile::child(args));
    }
    // `wisp test` prints what the plugin logged under each failed case; the host's own log of
    // those lines would only repeat them (RUST_LOG still says otherwise).
    let default = match cli.command {
        Command::Test(_) => "info,wisp::plugin=off",
        _ => "info",
    };
    init_log(cli.log_format, default);
    match wisp_host::admin::server::raise_open_files_limit() {
        Ok((old, new)) if new > old => {
            tracing::debug!(
                old,
                new,
                "raised the soft open-files limit to the hard limit"
            );
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot raise the soft open-files limit"),
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| {
            eprintln!("error: cannot start the async runtime: {e}");
            std::process::exit(1);
        });
    if let Err(e) = runtime.block_on(dispatch(cli.command)) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

/// The log on stderr, in `format`, filtered by `RUST_LOG` or else `default`.
fn init_log(format: LogFormat, default: &str) {
    use std::io::IsTerminal;
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => b.init(),
        LogFormat::Json => b.json().init(),
    }
}

async fn dispatch(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Run(a) => run::run(a).await,
        Command::Check(a) => check::run(a),
        Command::Replay(a) => replay::run(a),
        Command::Test(a) => test::run(a),
        Command::Record(a) => record::run(a).await,
        Command::Rbac(a) => rbac::run(a),
        Command::Push(a) => push::run(a).await,
        Command::New(a) => new::run(a),
        Command::Build(a) => build::run(a).await,
        Command::Demo => {
            wisp_host::demo::run().await?;
            Ok(())
        }
        Command::Compile(_) => anyhow::bail!("__compile is run before the runtime starts"),
    }
}
