//! `wisp record`: every notification of the config's informers to a file, for `wisp replay`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use wisp_host::app::{self, RunOptions, supervisor::Supervisor};
use wisp_host::config::Config;

use crate::args::optional_duration;
use crate::signals::shutdown_signal;

/// Save the informers' notifications for `wisp replay`
///
/// Every notification of the config's informers, as JSON Lines, until Ctrl-C / SIGTERM,
/// `--duration` or (with `--until-synced`) every informer synced. Plugins in the config are not
/// run.
#[derive(clap::Args)]
pub struct Args {
    /// Config file (YAML).
    #[arg(long, short)]
    config: PathBuf,
    /// Output file.
    #[arg(long)]
    out: PathBuf,
    /// Stop after this long (e.g. 30s, 5m); default: at Ctrl-C.
    #[arg(long)]
    duration: Option<String>,
    /// Stop once every informer has synced and its initial list is written.
    #[arg(long)]
    until_synced: bool,
    /// kubeconfig context (source: kube).
    #[arg(long)]
    context: Option<String>,
}

/// Its informers and the `dir:` watch run under a supervisor, stopped and joined before it
/// returns.
pub async fn run(a: Args) -> anyhow::Result<()> {
    let cfg = Config::load(&a.config)?;
    let limit = optional_duration(a.duration.as_deref())?;
    let file =
        std::fs::File::create(&a.out).with_context(|| format!("--out {}", a.out.display()))?;
    let sink: Arc<Mutex<Box<dyn std::io::Write + Send>>> =
        Arc::new(Mutex::new(Box::new(std::io::BufWriter::new(file))));
    let count = Arc::new(AtomicU64::new(0));
    let opts = RunOptions {
        context: a.context,
        ..RunOptions::default()
    };
    let (informers, dir, _client) = app::build_informers(&cfg, &opts, None).await?;
    let mut regs = Vec::new();
    for inf in &informers {
        let h = wisp_host::record::RecordingHandler::new(inf.name(), sink.clone(), count.clone());
        regs.push(inf.add_event_handler("record", Box::new(h), Duration::ZERO)?);
    }
    let sup = Supervisor::new();
    app::start::run_informers(&sup, &informers, dir);
    let synced = async {
        while !regs.iter().all(|r| r.has_synced()) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let until_synced = a.until_synced;
    tokio::select! {
        _ = shutdown_signal() => {}
        _ = sup.fatal_raised() => {}
        _ = async { tokio::time::sleep(limit.unwrap_or(Duration::MAX / 4)).await } => {}
        _ = async { if until_synced { synced.await } else { std::future::pending::<()>().await } } => {}
    }
    sup.stop_all(tokio::time::Instant::now() + Duration::from_secs(30))
        .await;
    if let Some(e) = sup.fatal_error() {
        anyhow::bail!("{e}");
    }
    eprintln!(
        "recorded {} notifications to {}",
        count.load(Ordering::Relaxed),
        a.out.display()
    );
    Ok(())
}
