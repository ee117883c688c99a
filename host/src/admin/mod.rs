//! The admin HTTP server: `/healthz`, `/readyz`, `/metrics` (Prometheus text), `/plugins` (JSON).
//! The first three are open; everything else needs authentication ([`auth`]: a bearer token
//! from `admin.tokenFile`, or no token when listening on loopback only).
//!
//! - [`auth`]: the guard of the protected endpoints.
//! - [`routes`]: the router, health and readiness.
//! - [`metrics`]: the Prometheus collector, read at scrape time; [`guest`]: the plugins' own
//!   series in it.
//! - [`plugins`]: the `/plugins` JSON view.
//! - [`server`]: the accept loop: connection cap with a reserve for probes, idle and
//!   header-read timeouts.
//! - `/verdicts` (filter `plugin`, `namespace`, `rule`): current policy violations; `/audit`
//!   (filter `plugin`): the last actions plugins asked for and what became of them.
//! - `POST /reload`, `POST /plugins/{name}/reload`: the host's reload action, when it gives one.

pub mod auth;
pub mod guest;
pub mod metrics;
pub mod plugins;
pub mod routes;
pub mod server;

pub use auth::AdminAuth;
pub use server::ServerLimits;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use crate::informer::SharedInformer;
use crate::plugin::status::PluginCounters;
use crate::plugin::{PluginHandle, PluginSet};

/// The host's reload action: `None` reloads the config and every plugin, `Some(name)` one
/// plugin. Blocking (it compiles); returns what was done, or why nothing was.
pub type ReloadFn = Arc<dyn Fn(Option<String>) -> Result<String, ReloadError> + Send + Sync>;

pub use crate::reloader::ReloadError;

/// What the admin server reports on. Plugins can come and go while the host runs.
#[derive(Clone, Default)]
pub struct AdminState {
    /// Every informer of the host.
    pub informers: Vec<Arc<SharedInformer>>,
    /// Every running plugin.
    pub plugins: PluginSet,
    /// `POST /reload` and `POST /plugins/{name}/reload` (absent: those answer 404).
    pub reload: Option<ReloadFn>,
    /// Verdicts (`/verdicts`) and the audit log of actions (`/audit`).
    pub services: crate::actions::HostServices,
    /// The workers that run the plugins (`wisp_executor_*` in `/metrics`).
    pub executor: Option<crate::informer::Executor>,
    /// What a `dir:` source could not read: per file, why (in `/readyz` and `/metrics`).
    pub source_errors: Option<SourceErrorsFn>,
    /// What a `dir:` source read but notes: per file, the objects it only redefines (in
    /// `/readyz`, after the errors, as notes).
    pub source_notes: Option<SourceErrorsFn>,
    /// With `sharding`: whether this replica leads (`wisp_lease_leading`, `/readyz`).
    pub leadership: Option<Arc<crate::scale::lease::Leadership>>,
    /// What is still starting (modules pulled, plugins compiling): in `/readyz`.
    pub startup: Arc<Startup>,
    /// Failures of the host's own tasks, by task (`wisp_host_task_failures_total`).
    pub task_failures: Option<TaskFailuresFn>,
    /// The bounds on the connections of the admin and metrics servers (`admin.maxConnections`,
    /// `admin.headerReadTimeout`, `admin.idleTimeout`).
    pub limits: ServerLimits,
}

/// Failures so far of the host's tasks that are logged and counted, by task name.
pub type TaskFailuresFn = Arc<dyn Fn() -> BTreeMap<String, u64> + Send + Sync>;

/// What a starting host is still doing, by plugin: `/readyz` answers 503 naming each.
#[derive(Debug, Default)]
pub struct Startup {
    pending: Mutex<BTreeMap<String, String>>,
}

impl Startup {
    /// `what` (a plugin) is now `doing` something (e.g. "compiling").
    pub fn begin(&self, what: &str, doing: &str) {
        crate::sync::lock(&self.pending).insert(what.to_owned(), doing.to_owned());
    }

    /// `what` is done with it.
    pub fn end(&self, what: &str) {
        crate::sync::lock(&self.pending).remove(what);
    }

    /// What is pending, with what it does, by name.
    pub fn pending(&self) -> BTreeMap<String, String> {
        crate::sync::lock(&self.pending).clone()
    }
}

/// The files a `dir:` source could not read (whole or in part), with why; or (notes) the
/// files that only redefine objects, with which.
pub type SourceErrorsFn =
    Arc<dyn Fn() -> std::collections::BTreeMap<std::path::PathBuf, String> + Send + Sync>;

impl AdminState {
    /// The plugins as they are now (the lock is held only to clone the list).
    pub fn plugins(&self) -> Vec<Arc<PluginHandle>> {
        self.plugins.list()
    }
}

/// Serves the admin endpoints on `listener` until `shutdown` completes, without a token:
/// protected endpoints answer only when `listener` is on a loopback address. Connections in
/// flight are let finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AdminState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with_auth(listener, state, AdminAuth::default(), shutdown).await
}

/// [`serve`] with the protected endpoints guarded by `auth` (see [`auth`]).
pub async fn serve_with_auth(
    listener: tokio::net::TcpListener,
    state: AdminState,
    auth: AdminAuth,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let guard = auth::Guard::new(&auth, addr.ip().is_loopback());
    if guard.closed() {
        tracing::warn!(%addr, "admin server on a non-loopback address without admin.tokenFile: /plugins, /verdicts, /audit and reloads are refused (403); set admin.tokenFile to use them");
    }
    tracing::info!(%addr, token = auth.token_file.is_some(), "admin server listening");
    let limits = state.limits;
    server::run(listener, routes::router(state, guard), limits, shutdown).await
}

/// Serves only `/metrics`, `/healthz` and `/readyz` on `listener` (`admin.metricsAddress`), so
/// they can be reached from the cluster while the admin API stays on loopback.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    state: AdminState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "metrics server listening");
    }
    let limits = state.limits;
    server::run(listener, routes::metrics_router(state), limits, shutdown).await
}

/// One per-plugin counter: how it is named in `/metrics` and `/plugins`, and where it is read.
pub struct CounterField {
    /// Metric name after `wisp_plugin_` (the exposition adds `_total`).
    pub metric: &'static str,
    /// Key in the `counters` object of `/plugins`.
    pub json: &'static str,
    /// Help text of the metric.
    pub help: &'static str,
    /// The counter.
    pub get: fn(&PluginCounters) -> &AtomicU64,
}

/// The counters of a plugin that `/metrics` and `/plugins` show, in one place so both agree.
pub const PLUGIN_COUNTERS: &[CounterField] = &[
    CounterField {
        metric: "reloads",
        json: "reloads",
        help: "New versions swapped in by hot reload.",
        get: |c| &c.reloads,
    },
    CounterField {
        metric: "reload_failures",
        json: "reloadFailures",
        help: "Reloads refused (bad module or settings); the running version stayed.",
        get: |c| &c.reload_failures,
    },
    CounterField {
        metric: "rollbacks",
        json: "rollbacks",
        help: "New versions rolled back after failing their first notifications.",
        get: |c| &c.rollbacks,
    },
    CounterField {
        metric: "delivered",
        json: "delivered",
        help: "Notifications the plugin handled with an ok outcome.",
        get: |c| &c.delivered,
    },
    CounterField {
        metric: "failed",
        json: "failed",
        help: "Notifications that failed for good (after retries).",
        get: |c| &c.failed,
    },
    CounterField {
        metric: "errors",
        json: "errors",
        help: "Error outcomes returned by the plugin.",
        get: |c| &c.errors,
    },
    CounterField {
        metric: "deadline_hits",
        json: "deadlineHits",
        help: "Calls cut by their deadline, and starts cut by the startup deadline.",
        get: |c| &c.deadline_hits,
    },
    CounterField {
        metric: "out_of_memory",
        json: "outOfMemory",
        help: "Calls that hit the memory cap.",
        get: |c| &c.out_of_memory,
    },
    CounterField {
        metric: "out_of_fuel",
        json: "outOfFuel",
        help: "Calls that ran out of fuel.",
        get: |c| &c.out_of_fuel,
    },
    CounterField {
        metric: "traps",
        json: "traps",
        help: "Calls that trapped (panics, unreachable, ...).",
        get: |c| &c.traps,
    },
    CounterField {
        metric: "restarts",
        json: "restarts",
        help: "Fresh instances made after a failure.",
        get: |c| &c.restarts,
    },
    CounterField {
        metric: "retries",
        json: "retries",
        help: "Retries of single notifications.",
        get: |c| &c.retries,
    },
    CounterField {
        metric: "dropped",
        json: "dropped",
        help: "Notifications dropped because the plugin is quarantined.",
        get: |c| &c.dropped,
    },
    CounterField {
        metric: "queue_dropped",
        json: "queueDropped",
        help: "Notifications its queues dropped on overflow (a gap in its sequence numbers).",
        get: |c| &c.queue_dropped,
    },
    CounterField {
        metric: "queue_coalesced",
        json: "queueCoalesced",
        help: "Notifications its queues merged into an earlier one for the same object on overflow.",
        get: |c| &c.queue_coalesced,
    },
    CounterField {
        metric: "denied",
        json: "denied",
        help: "Cache reads of informers not granted to the plugin, refused.",
        get: |c| &c.denied,
    },
    CounterField {
        metric: "log_lines_dropped",
        json: "logLinesDropped",
        help: "Log lines dropped over the plugin's log rate.",
        get: |c| &c.log_lines_dropped,
    },
    CounterField {
        metric: "series_refused",
        json: "seriesRefused",
        help: "Metric series refused: a bad name or label, over the series or bytes bound.",
        get: |c| &c.series_refused,
    },
    CounterField {
        metric: "calls",
        json: "calls",
        help: "Calls into the plugin's handle.",
        get: |c| &c.calls,
    },
    CounterField {
        metric: "verdicts",
        json: "verdicts",
        help: "Policy verdicts reported (violations and passes).",
        get: |c| &c.verdicts,
    },
    CounterField {
        metric: "actions_applied",
        json: "actionsApplied",
        help: "Actions sent to and accepted by the API server.",
        get: |c| &c.actions_applied,
    },
    CounterField {
        metric: "actions_failed",
        json: "actionsFailed",
        help: "Actions that failed at the API server after retries.",
        get: |c| &c.actions_failed,
    },
    CounterField {
        metric: "actions_refused",
        json: "actionsRefused",
        help: "Actions refused by the host: not granted, invalid, queue full, no API server.",
        get: |c| &c.actions_refused,
    },
    CounterField {
        metric: "actions_rate_limited",
        json: "actionsRateLimited",
        help: "Actions refused because the plugin was over its rate limit.",
        get: |c| &c.actions_rate_limited,
    },
    CounterField {
        metric: "actions_dry_run",
        json: "actionsDryRun",
        help: "Actions logged and not sent (dry-run mode).",
        get: |c| &c.actions_dry_run,
    },
    CounterField {
        metric: "admission_calls",
        json: "admissionCalls",
        help: "Admission requests asked of the plugin (calls into its admit).",
        get: |c| &c.admission_calls,
    },
    CounterField {
        metric: "admission_errors",
        json: "admissionErrors",
        help: "Admission calls that gave no answer: the plugin's error, a trap, its deadline.",
        get: |c| &c.admission_errors,
    },
];
