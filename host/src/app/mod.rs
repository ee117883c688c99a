//! The host assembled from a config: sources, informers, plugins, admin and metrics servers;
//! `run` until shutdown. Only `main` touches signals.
//!
//! - [`supervisor`]: the one owner of every task and thread, and the order they stop in.
//! - [`build`]: the parts built from a config (informers, services, engine, discovery).
//! - [`custom`]: plugins from `WispPlugin` / `ClusterWispPlugin` custom resources.
//! - [`start`](mod@start): [`start()`] as a sequence of named steps.

pub mod build;
pub mod custom;
pub mod start;
pub mod supervisor;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::admin::{AdminState, ReloadFn};
use crate::config::Config;
use crate::informer::{Executor, SharedInformer};
use crate::plugin::{PluginHandle, PluginSet};
pub use build::{
    build_informers, build_sharded_informers, engine, index_funcs, kube_client, services,
};
pub use start::start;
use supervisor::{Phase, Supervisor};

/// How often a `dir:` source rescans its directory.
pub const DIR_RESCAN: Duration = Duration::from_millis(250);

/// Options from the command line.
#[derive(Clone, Default)]
pub struct RunOptions {
    /// kubeconfig context (`--context`).
    pub context: Option<String>,
    /// The client to use for `source: kube` instead of one from the kubeconfig (embedders,
    /// tests).
    pub client: Option<kube::Client>,
    /// The config file, to watch and re-read for live changes (`None`: no live reload).
    pub config_path: Option<std::path::PathBuf>,
    /// Override the admin listen address (`--admin`).
    pub admin: Option<String>,
    /// The executable that compiles modules in child processes, bounded by
    /// `engine.compileTimeout` and `engine.compileMemory` (`wisp run`: its own binary). `None`
    /// (embedders, in-process tests): compiles run on a thread of this process, and only the
    /// timeout is enforced, by refusing the module (see [`crate::plugin::EngineConfig`]).
    pub compiler: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("context", &self.context)
            .field("client", &self.client.is_some())
            .field("config_path", &self.config_path)
            .field("admin", &self.admin)
            .field("compiler", &self.compiler)
            .finish()
    }
}

/// A running host.
pub struct Host {
    /// Informers by config order.
    pub informers: Vec<Arc<SharedInformer>>,
    /// Running plugins.
    pub plugins: PluginSet,
    /// Admin state (for an admin server).
    pub admin: AdminState,
    /// The admin server's address, when it runs.
    pub admin_addr: Option<std::net::SocketAddr>,
    /// The metrics server's address (`admin.metricsAddress`), when it runs.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Live reloads, once this replica runs its plugins (when the host was started from a
    /// config file; a standby has none until it leads).
    pub reloader: Arc<std::sync::OnceLock<Arc<crate::reloader::Reloader>>>,
    /// The reload action (SIGHUP, `POST /reload`) when started from a config file: on a
    /// standby, or once the shutdown began, it refuses with why.
    pub reload: Option<ReloadFn>,
    /// The workers that run the plugins.
    pub executor: Executor,
    /// Whether this replica leads, with `sharding` (see [`crate::scale`]).
    pub leadership: Option<Arc<crate::scale::lease::Leadership>>,
    /// The owner of the host's tasks and threads.
    pub supervisor: Arc<Supervisor>,
}

/// What a shutdown did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Every informer stopped (its listeners' batches in hand finished) within the grace period.
    pub informers_stopped: bool,
    /// Every accepted action was sent within the grace period.
    pub actions_drained: bool,
    /// Accepted actions audited as not sent (the grace period ran out first).
    pub actions_not_sent: u64,
    /// Every task and thread of the host ended within the grace period.
    pub all_stopped: bool,
}

impl Host {
    /// Shuts the host down in the supervisor's order (see [`supervisor`]): intake, informers
    /// (each listener finishes the batch in hand, within the plugin's deadline; nothing more is
    /// delivered), then the plugins' queued actions are sent and at `deadline` whatever is left
    /// is audited as not sent; then the final report write and the Lease's release, the
    /// servers, and the threads.
    pub async fn finish(&mut self, deadline: tokio::time::Instant) -> ShutdownReport {
        let sup = self.supervisor.clone();
        let mut all_stopped = sup.stop_phase(Phase::Intake, deadline).await;
        let informers_stopped = sup.stop_phase(Phase::Informers, deadline).await;
        let drain = self.admin.services.senders.drain(deadline).await;
        if drain.not_sent > 0 {
            tracing::warn!(
                not_sent = drain.not_sent,
                "the grace period ran out before every accepted action was sent; those left are audited as not sent"
            );
        }
        // The Lease is released (and the last report written) even when the grace period ran
        // out: a standby waiting for it matters more than the seconds over.
        let handover = deadline.max(tokio::time::Instant::now() + HANDOVER_MIN);
        all_stopped &= sup.stop_phase(Phase::Handover, handover).await;
        all_stopped &= sup.stop_phase(Phase::Servers, deadline).await;
        all_stopped &= sup.join_threads(deadline).await;
        ShutdownReport {
            informers_stopped,
            actions_drained: drain.drained,
            actions_not_sent: drain.not_sent,
            all_stopped: all_stopped && informers_stopped,
        }
    }
}

/// The time the handover phase (Lease release, membership delete, last report) gets at least,
/// past the grace period if need be.
const HANDOVER_MIN: Duration = Duration::from_secs(2);

impl Drop for Host {
    /// A host dropped without [`Host::finish`] still tells every task to stop.
    fn drop(&mut self) {
        self.supervisor.cancel_all();
    }
}

/// Runs the host until `shutdown` completes, then shuts it down within `grace` (counted from
/// the moment `shutdown` completed): informers stop, batches in hand finish, queued actions are
/// sent or audited as not sent. `started` is called once the host runs (e.g. to hook signals to
/// its reload action). A `shutdown` that completes while the host is still starting stops the
/// start (`Ok(None)`).
pub async fn run(
    config: &Config,
    opts: &RunOptions,
    started: impl FnOnce(&Host),
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> anyhow::Result<Option<(Host, ShutdownReport)>> {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut host = tokio::select! {
        host = start(config, opts, std::future::pending()) => host?,
        _ = &mut shutdown => {
            tracing::info!("stopped while starting");
            return Ok(None);
        }
    };
    tracing::info!(
        informers = host.informers.len(),
        plugins = host.plugins.len(),
        admin = %host.admin_addr.map_or_else(|| "off".to_owned(), |a| format!("http://{a}")),
        "wisp running"
    );
    started(&host);
    let sup = host.supervisor.clone();
    tokio::select! {
        _ = &mut shutdown => {}
        _ = sup.fatal_raised() => {}
    }
    let deadline = tokio::time::Instant::now() + grace;
    tracing::info!(grace = ?grace, "shutting down");
    let report = host.finish(deadline).await;
    tracing::info!(
        informers_stopped = report.informers_stopped,
        actions_not_sent = report.actions_not_sent,
        all_stopped = report.all_stopped,
        "shut down"
    );
    if let Some(e) = sup.fatal_error() {
        anyhow::bail!("{e}");
    }
    Ok(Some((host, report)))
}

/// Per-plugin summary lines (`name: delivered N, failed M, state`).
pub fn summary(plugins: &[Arc<PluginHandle>]) -> BTreeMap<String, String> {
    use crate::plugin::status::PluginCounters as C;
    plugins
        .iter()
        .map(|p| {
            let c = &p.status().counters;
            (
                p.name().to_owned(),
                format!(
                    "delivered {}, failed {}, state {:?}",
                    C::get(&c.delivered),
                    C::get(&c.failed),
                    p.state()
                ),
            )
        })
        .collect()
}
