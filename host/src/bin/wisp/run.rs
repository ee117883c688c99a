//! `wisp run`: the host until SIGTERM, Ctrl-C or `--for`; SIGHUP reloads.

use std::path::PathBuf;

use wisp_host::app::{self, RunOptions};
use wisp_host::config::{Config, parse_duration};
use wisp_host::plugin::compiler;

use crate::args::optional_duration;
use crate::signals::{catch_sighup, reload_on_sighup, shutdown_signal};

/// Run the host on a config: informers, plugins, admin server
///
/// Informers from the config, plugins attached, admin server on `admin.listen`. Stops on
/// Ctrl-C / SIGTERM: informers stop, batches in hand finish, queued actions are sent until the
/// grace period ends and audited as not sent after it. SIGHUP reloads the config and every
/// plugin.
#[derive(clap::Args)]
#[command(after_long_help = RUN_HELP)]
pub struct Args {
    /// Config file (YAML).
    #[arg(long, short)]
    config: PathBuf,
    /// kubeconfig context (source: kube); default: the current context, or in-cluster.
    #[arg(long)]
    context: Option<String>,
    /// Admin listen address, overriding the config (`""` for none).
    #[arg(long)]
    admin: Option<String>,
    /// Stop after this long (e.g. 10s) instead of waiting for a signal.
    #[arg(long = "for", value_name = "DURATION")]
    run_for: Option<String>,
    /// Longest a shutdown takes (keep it under the pod's terminationGracePeriodSeconds).
    #[arg(long, value_name = "DURATION", default_value = "25s")]
    grace: String,
}

/// What `wisp run --help` adds about the admin server, the module cache and the size caps.
const RUN_HELP: &str = "\
Admin server (admin.listen, default 127.0.0.1:9090):
  /healthz, /readyz and /metrics are open. /plugins (with plugin logs), /verdicts, /audit,
  POST /reload and POST /plugins/NAME/reload need `Authorization: Bearer TOKEN`, TOKEN being
  the contents of admin.tokenFile (read again when the file changes). Without admin.tokenFile
  they are served only when admin.listen is a loopback address; on any other address they
  answer 403 and the host warns at start. admin.metricsAddress (e.g. 0.0.0.0:9091) serves only
  the three open endpoints, so the admin API can stay on loopback. The open endpoints show no
  plugin text (a quarantined plugin's reason is in /plugins only). Failed token checks: 20 at
  once, then 5 a second per server; past that protected endpoints answer 429. Each server holds
  at most admin.maxConnections (128; past it the oldest idle one is closed, and a reserve of 16
  answers /healthz when all are busy), closes a connection idle for admin.idleTimeout (30s) or
  whose headers take longer than admin.headerReadTimeout (10s). The soft open-files limit is
  raised to the hard limit at start.

Module cache (engine.cacheDir, default $XDG_CACHE_HOME/wisp/modules or ~/.cache/wisp/modules):
  precompiled plugins, each authenticated by HMAC-SHA256 under the key in the sibling file
  <cacheDir>.key (created 0600). An artifact that fails its check is compiled again and
  overwritten. A directory that is a symlink, owned by another user or writable by group or
  others is not used at all: the host warns and compiles in memory only.

Compiles (engine.compileTimeout 120s, engine.compileMemory 1Gi): each module compiles in a child
  process of wisp, killed past the timeout in CPU time (its wall clock is bounded at 10 times it,
  for a compile starved of CPU) and limited to that much address space, at nice 10 and first in
  line for the kernel's OOM killer; a module over a bound is refused naming it (the start fails;
  a reload keeps the running version). At most executor.workers compile at once; starts and
  reloads go first, and reloads of different plugins do not wait for one another. With engine.firstLoadTier
  (default true) a module of 4 MiB or more (Python, JavaScript) in neither cache starts on code
  from Winch, wasmtime's baseline compiler, and is reloaded onto the Cranelift code when that
  compile, run in the background within the same bounds at nice 19, never on the last free
  compile slot, lands in the module cache.

Size caps (per informer): a watch event line over maxEventSize (default 16Mi) or a list response
  over maxListSize (default 2Gi) is not read further; the error names the informer, the size
  and the cap, wisp_informer_oversized_responses_total counts it, and the informer relists after
  backoff. etcd refuses objects over 1.5 MiB; a list at resourceVersion 0 comes unpaged from the
  API server's watch cache, so raise maxListSize for informers of over ~200,000 objects of 10 KiB.
  A whole list (all its pages, or a streaming list's initial events) over maxListTotalSize
  (default maxListSize) or maxListObjects (default 1000000) is dropped as it is read; the error
  names the informer, the setting and the cap, wisp_informer_lists_over_cap_total counts it, and
  the informer relists after backoff.
  Source dir: reads regular files inside the directory of at most dir.maxFileSize (default
  16Mi); a FIFO, device, socket, link leading out of it or larger file is refused unread and
  listed in /readyz with why, blocking nothing.

Sharding (sharding.mode leader or shards): no plugin grant may reach the Lease kind in
  sharding.leaseNamespace (or in all namespaces); the config is refused, naming the grant. In
  shards mode a Lease of the group that no Wisp replica wrote (field manager wisp) is not a
  member: logged once, counted in wisp_shard_foreign_members_total.

Plugin limits (per plugin, `limits:`): memory 64Mi, one budget for all of an instance's linear
  memories and tables; deadline 50ms per call of one notification, CPU time plus time blocked in
  WASI (a sleep is cut at the deadline), in handle and snapshot; deadlinePerNotification 5ms,
  added for each notification of a batch after the first; startupDeadline 2s, shared by
  instantiation, describe, init and restore (after a reload). Fixed
  bounds: log lines 8 KiB, escaped to one line, 64 KiB/s per plugin (burst 512 KiB; over it
  dropped and counted); 1,000 metric series and 256 KiB of names and labels per plugin; error
  messages 4 KiB. The host warns at start when twice the sum of the memory budgets (a reload
  holds two instances) is over the container's memory limit. See SECURITY.md.

Policy reports (policyReports, source: kube only; off when omitted): the plugins' current
  violations also written as one report per namespace and one cluster report, named
  wisp-policy (wisp-policy-IDENTITY with sharding mode shards), labelled
  app.kubernetes.io/managed-by=wisp. apiGroup openreports.io (default; Report, ClusterReport
  v1alpha1) or wgpolicyk8s.io (PolicyReport, ClusterPolicyReport v1alpha2); interval 10s
  (changed reports written then, by server-side apply as field manager wisp); maxResults 1000
  per report (1 to 10000; the rest counted in the wisp.io/results-omitted annotation, the
  summary counts all). `wisp rbac` grants the verbs. See docs/policy-reports.md.

Custom resources (customResources, source: kube only; off when omitted): plugins also from
  WispPlugin (namespaced) and ClusterWispPlugin (wisp.io/v1alpha1; CRDs in deploy/crds.yaml),
  applied through the reload path (checks, signature policy, probation, rollback). A WispPlugin
  sees and acts only in its own namespace; grants must be covered by allowedGrants (default
  none), every limit at most maxLimits; at most maxPerNamespace (20) of a namespace and
  maxTotal (200) taken; concurrentApplies (4) applied at once, concurrentAppliesPerNamespace
  (1) of a namespace, namespaces in turn; in a container with a memory limit, one that does not
  fit the memory plan is refused (OverBudget). Status by server-side apply (field
  manager wisp, only while leading): conditions ModuleReady, Running, Degraded (with the
  reason), module digest, ABI, last error, counters; conditions written on change (looked at
  every second), counters at most every statusInterval (30s). `wisp rbac` grants the verbs. See
  docs/custom-resources.md.
";

pub async fn run(a: Args) -> anyhow::Result<()> {
    let cfg = Config::load(&a.config)?;
    let limit = optional_duration(a.run_for.as_deref())?;
    let grace = parse_duration(&a.grace).map_err(|e| anyhow::anyhow!("--grace: {e}"))?;
    let opts = RunOptions {
        context: a.context,
        admin: a.admin,
        config_path: Some(a.config.clone()),
        compiler: compiler::own_executable(),
        ..RunOptions::default()
    };
    let hups = catch_sighup();
    let started = move |host: &app::Host| {
        if let Some(reload) = host.reload.clone() {
            host.supervisor.spawn(
                app::supervisor::Phase::Intake,
                "SIGHUP",
                app::supervisor::OnError::Log,
                |stop| async move {
                    tokio::select! {
                        _ = reload_on_sighup(hups, reload) => {}
                        _ = stop.cancelled() => {}
                    }
                    Ok(())
                },
            );
        }
    };
    let shutdown = async move {
        match limit {
            Some(d) => tokio::select! {
                _ = shutdown_signal() => {}
                _ = tokio::time::sleep(d) => {}
            },
            None => shutdown_signal().await,
        }
    };
    let Some((host, _report)) = app::run(&cfg, &opts, started, shutdown, grace).await? else {
        return Ok(());
    };
    let plugins = host.plugins.list();
    for (name, line) in app::summary(&plugins) {
        tracing::info!(plugin = %name, "{line}");
    }
    Ok(())
}
