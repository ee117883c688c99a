//! The host assembled from a config: sources, informers, plugins, admin server; `run` until
//! shutdown. Only `main` touches signals.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::actions::HostServices;
use crate::actions::audit::AuditLog;
use crate::actions::kube::KubeActionSink;
use crate::admin::AdminState;
use crate::config::{Config, IndexSpec, InformerConfig, SourceKind};
use crate::informer::indexer::IndexFunc;
use crate::informer::lister_watcher::ListerWatcher;
use crate::informer::reflector::ReflectorConfig;
use crate::informer::selector::LabelSelector;
use crate::informer::shared_informer::InformerConfig as InformerSettings;
use crate::informer::{Executor, SharedInformer};
use crate::plugin::{EngineConfig, PluginEngine, PluginHandle, PluginManager, PluginSet};
use crate::source::dir::DirCluster;
use crate::source::filter::ObjectFilter;
use crate::source::kube::KubeSource;
use crate::source::multi::MultiNamespace;
use crate::sync::lock;

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
}

/// Index functions for an informer's `indexes`.
pub fn index_funcs(inf: &InformerConfig) -> Vec<(String, IndexFunc)> {
    inf.indexes
        .iter()
        .filter_map(|s| {
            IndexSpec::parse(s)
                .ok()
                .map(|spec| (s.clone(), spec.func()))
        })
        .collect()
}

fn filter_of(inf: &InformerConfig) -> anyhow::Result<ObjectFilter> {
    Ok(ObjectFilter {
        api_version: inf.api_version.clone(),
        kind: inf.kind.clone(),
        namespaces: inf.namespaces.clone(),
        labels: LabelSelector::parse(inf.label_selector.as_deref().unwrap_or(""))?,
        fields: ObjectFilter::parse_fields(inf.field_selector.as_deref().unwrap_or(""))
            .map_err(anyhow::Error::msg)?,
    })
}

/// A kube client from kubeconfig (with an optional context) or the in-cluster environment.
pub async fn kube_client(context: Option<&str>) -> anyhow::Result<kube::Client> {
    let cfg = match context {
        Some(c) => {
            let opts = kube::config::KubeConfigOptions {
                context: Some(c.to_owned()),
                ..Default::default()
            };
            kube::Config::from_kubeconfig(&opts)
                .await
                .with_context(|| format!("kubeconfig context {c:?}"))?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not running in a cluster")?,
    };
    kube::Client::try_from(cfg).context("building the Kubernetes client")
}

/// The informers of a config, not started yet, plus the dir cluster of a `dir:` source or the
/// client of a `kube` one.
///
/// Each informer's apiVersion and kind are checked first, through discovery with an API server,
/// against Kubernetes' built-in kinds and the directory's CRDs with `dir:`: a version or kind
/// that is not served refuses the start, naming the informer and what is served (a typo used to
/// sync nothing, silently).
pub async fn build_informers(
    config: &Config,
    opts: &RunOptions,
    executor: Option<&Executor>,
) -> anyhow::Result<(
    Vec<Arc<SharedInformer>>,
    Option<Arc<DirCluster>>,
    Option<kube::Client>,
)> {
    build_sharded_informers(config, opts, executor, None).await
}

/// [`build_informers`], the informers with `shard` (the default) listing and watching only
/// `view`'s hash ranges.
pub async fn build_sharded_informers(
    config: &Config,
    opts: &RunOptions,
    executor: Option<&Executor>,
    view: Option<&Arc<crate::scale::shards::ShardView>>,
) -> anyhow::Result<(
    Vec<Arc<SharedInformer>>,
    Option<Arc<DirCluster>>,
    Option<kube::Client>,
)> {
    let kind = config.source_kind()?;
    let (client, dir) = match &kind {
        SourceKind::Kube => match &opts.client {
            Some(c) => (Some(c.clone()), None),
            None => (Some(kube_client(opts.context.as_deref()).await?), None),
        },
        SourceKind::Dir(p) => (
            None,
            Some(DirCluster::open(p).with_context(|| format!("source dir:{}", p.display()))?),
        ),
    };
    let mut out = Vec::new();
    for (i, inf) in config.informers.iter().enumerate() {
        let lw: Arc<dyn ListerWatcher> = match (&client, &dir) {
            (Some(client), _) => {
                let resource = discover(client, config, i).await?;
                let source = |ns: Option<&str>| {
                    let mut src = KubeSource::with_resource(client.clone(), resource.clone(), ns)
                        .strip_managed_fields(inf.strip_managed_fields)
                        .metadata_only(inf.metadata_only)
                        .named(inf.name.clone())
                        .size_caps(inf.size_caps());
                    if let Some(l) = &inf.label_selector {
                        src = src.labels(l.clone());
                    }
                    if let Some(f) = &inf.field_selector {
                        src = src.fields(f.clone());
                    }
                    if let Some(v) = view.filter(|_| inf.shard) {
                        src = src.sharded(v.clone());
                    }
                    src
                };
                // Several namespaces: one list and watch in each (never cluster-wide), so a
                // Role per namespace is all the informer needs.
                match inf.namespaces.as_deref() {
                    Some([one]) => Arc::new(source(Some(one))),
                    Some(several) => Arc::new(MultiNamespace::new(
                        several
                            .iter()
                            .map(|n| (n.clone(), source(Some(n))))
                            .collect(),
                    )),
                    None => Arc::new(source(None)),
                }
            }
            (None, Some(d)) => {
                let at = |field: &str| format!("{}: informers[{i}].{field}", config.file);
                match d.check_kind(&inf.api_version, &inf.kind) {
                    Ok(None) => {}
                    Ok(Some(warning)) => {
                        tracing::warn!(informer = %inf.name, "{}: {warning}", at("kind"))
                    }
                    Err(e) => anyhow::bail!("{}: {e} (informer {:?})", at("kind"), inf.name),
                }
                Arc::new(d.source(filter_of(inf)?))
            }
            (None, None) => anyhow::bail!("no source"),
        };
        let settings = InformerSettings {
            default_resync: inf.resync.0,
            reflector: ReflectorConfig {
                use_watch_list: inf.watch_list,
                ..ReflectorConfig::default()
            },
            executor: executor.cloned(),
            // Metadata only: an API server sends nothing else; a directory's objects are cut.
            transform: match inf
                .fields
                .as_ref()
                .or((inf.metadata_only && client.is_none()).then_some(&Vec::new()))
            {
                Some(paths) => Some(
                    crate::informer::mask::FieldMask::parse(paths)
                        .map_err(|e| anyhow::anyhow!("informer {:?}: fields: {e}", inf.name))?
                        .transform(),
                ),
                None => None,
            },
            queue: inf.queue,
            on_panic: inf.on_panic,
            ..InformerSettings::default()
        };
        let informer = SharedInformer::new(inf.name.clone(), lw, settings);
        informer
            .add_indexers(index_funcs(inf))
            .with_context(|| format!("informer {:?}: indexes", inf.name))?;
        out.push(informer);
    }
    Ok((out, dir, client))
}

/// The services plugins share: the verdict store, and for a `kube` source the sink that sends
/// actions; the audit log (and its file when configured).
pub fn services(config: &Config, client: Option<kube::Client>) -> anyhow::Result<HostServices> {
    let audit = match &config.audit.file {
        Some(f) => {
            let path = config.resolve(f);
            AuditLog::to_file(&path)
                .with_context(|| format!("audit.file {}: cannot open", path.display()))?
        }
        None => AuditLog::memory(),
    };
    let audit = Arc::new(audit);
    Ok(match client {
        Some(c) => HostServices::with_sink(Arc::new(KubeActionSink::new(c)), audit),
        None => HostServices {
            audit,
            ..HostServices::default()
        },
    })
}

/// The plugin engine for a config.
pub fn engine(config: &Config) -> anyhow::Result<Arc<PluginEngine>> {
    let mut ec = EngineConfig::default();
    if let Some(d) = &config.engine.cache_dir {
        ec.cache_dir = Some(config.resolve(d));
    }
    if let Some(t) = config.engine.epoch_tick {
        ec.epoch_tick = t.0;
    }
    ec.fuel = config.engine.fuel;
    Ok(PluginEngine::new(ec)?)
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
    /// Live reloads (when the host was started from a config file).
    pub reloader: Option<Arc<crate::reloader::Reloader>>,
    /// The workers that run the plugins.
    pub executor: Executor,
    /// Whether this replica leads, with `sharding` (see [`crate::scale`]).
    pub leadership: Option<Arc<crate::scale::lease::Leadership>>,
    /// The informers' tasks (they end once the shutdown future completed).
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Set when an informer with `onPanic: exit` failed: the host must shut down.
    fatal: Arc<Fatal>,
}

/// Why the host must shut down on its own.
#[derive(Default)]
struct Fatal {
    error: std::sync::Mutex<Option<String>>,
    raised: tokio::sync::Notify,
}

impl Fatal {
    fn raise(&self, error: String) {
        lock(&self.error).get_or_insert(error);
        self.raised.notify_one();
    }

    fn error(&self) -> Option<String> {
        lock(&self.error).clone()
    }
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("context", &self.context)
            .field("client", &self.client.is_some())
            .field("config_path", &self.config_path)
            .field("admin", &self.admin)
            .finish()
    }
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
}

impl Host {
    /// Finishes a shutdown, once the shutdown future given to [`start`] has completed: waits
    /// for the informers to stop (each listener finishes the batch in hand, within the plugin's
    /// deadline; nothing more is delivered), then lets the plugins' queued actions be sent;
    /// at `deadline` whatever is left is audited as not sent, and this returns.
    pub async fn finish(&mut self, deadline: tokio::time::Instant) -> ShutdownReport {
        let informers_stopped = tokio::time::timeout_at(
            deadline,
            futures::future::join_all(std::mem::take(&mut self.tasks)),
        )
        .await
        .is_ok();
        if !informers_stopped {
            tracing::warn!("informers still stopping when the grace period ran out");
        }
        let drain = self.admin.services.senders.drain(deadline).await;
        if drain.not_sent > 0 {
            tracing::warn!(
                not_sent = drain.not_sent,
                "the grace period ran out before every accepted action was sent; those left are audited as not sent"
            );
        }
        ShutdownReport {
            informers_stopped,
            actions_drained: drain.drained,
            actions_not_sent: drain.not_sent,
        }
    }
}

/// Runs the host until `shutdown` completes, then shuts it down within `grace` (counted from
/// the moment `shutdown` completed): informers stop, batches in hand finish, queued actions are
/// sent or audited as not sent. `started` is called once the host runs (e.g. to hook signals to
/// its reloader).
pub async fn run(
    config: &Config,
    opts: &RunOptions,
    started: impl FnOnce(&Host),
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> anyhow::Result<(Host, ShutdownReport)> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let mut host = start(config, opts, async {
        let _ = rx.await;
    })
    .await?;
    tracing::info!(
        informers = host.informers.len(),
        plugins = host.plugins.len(),
        admin = %host.admin_addr.map_or_else(|| "off".to_owned(), |a| format!("http://{a}")),
        "wisp running"
    );
    started(&host);
    let fatal = host.fatal.clone();
    tokio::select! {
        _ = shutdown => {}
        _ = fatal.raised.notified() => {}
    }
    let deadline = tokio::time::Instant::now() + grace;
    let _ = tx.send(());
    tracing::info!(grace = ?grace, "shutting down");
    let report = host.finish(deadline).await;
    tracing::info!(
        informers_stopped = report.informers_stopped,
        actions_not_sent = report.actions_not_sent,
        "shut down"
    );
    if let Some(e) = host.fatal.error() {
        anyhow::bail!("{e}");
    }
    Ok((host, report))
}

/// Builds and starts everything; returns once started (informers sync in the background).
/// Every plugin is checked before anything starts: a bad one refuses the start.
pub async fn start(
    config: &Config,
    opts: &RunOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Host> {
    // OCI modules are pulled (and their signatures checked) before anything starts.
    let pulled;
    let config = if config
        .plugins
        .iter()
        .any(|p| p.module.to_str().is_some_and(crate::oci::is_oci))
    {
        let mut c = config.clone();
        pulled =
            tokio::task::spawn_blocking(move || crate::oci::pull_config(&mut c, None).map(|()| c))
                .await
                .context("pulling OCI modules")?
                .map_err(anyhow::Error::msg)?;
        &pulled
    } else {
        config
    };
    let workers = config.executor.workers();
    let executor = Executor::new(workers).with_context(|| {
        format!("executor: cannot start {workers} worker threads for the plugins")
    })?;
    tracing::info!(workers, "executor started");
    // With `mode: shards`, the informers serve the ranges of this replica's membership.
    let shard_view = config
        .sharding
        .as_ref()
        .filter(|sh| sh.mode == crate::config::ShardingMode::Shards)
        .map(|sh| {
            crate::scale::shards::ShardView::new(sh.shard_by, crate::scale::shards::Ranges::none())
        });
    let (informers, dir, client) =
        build_sharded_informers(config, opts, Some(&executor), shard_view.as_ref()).await?;
    let engine = engine(config)?;
    let mut manager = PluginManager::new(engine);
    let mut services = services(config, client.clone())?;
    // With a Lease, actions are sent only while this replica leads (or, with shards, while its
    // membership is fresh, and only about objects of its share).
    let mut elector = None;
    let mut membership = None;
    let mut leadership = None;
    // A shard member's policy reports carry its identity.
    let mut report_identity = None;
    if let (Some(sh), Some(client)) = (&config.sharding, &client) {
        // Once: without an identity in the config or $POD_NAME, each call picks a new one.
        let lease = sh.lease();
        let owns = match &shard_view {
            None => {
                let e = crate::scale::lease::Elector::new(client.clone(), lease);
                leadership = Some(e.leadership());
                elector = Some(e);
                None
            }
            Some(view) => {
                report_identity = Some(lease.identity.clone());
                let m = crate::scale::members::Membership::new(client.clone(), lease, view.clone());
                leadership = Some(m.freshness());
                membership = Some(m);
                Some(crate::scale::owner_check(config, &informers, view.clone()))
            }
        };
        services.sink = services.sink.map(|inner| {
            Arc::new(crate::scale::FencedSink {
                inner,
                leadership: leadership.clone().unwrap_or_default(),
                owns,
            }) as Arc<dyn crate::actions::ActionSink>
        });
    }
    manager.set_services(services.clone());
    for i in &informers {
        manager.add_informer(i.clone());
    }
    let specs = config.plugin_specs();
    let budgets: Vec<(&str, u64)> = specs
        .iter()
        .map(|s| (s.name.as_str(), s.limits.memory))
        .collect();
    if let Some(w) = crate::plugin::budget::over_limit(
        &budgets,
        crate::plugin::budget::HOST_BASE,
        crate::plugin::budget::cgroup_memory_limit(),
    ) {
        tracing::warn!("{w}");
    }
    let mut checked = Vec::new();
    for spec in specs {
        checked.push(manager.check(&spec)?);
    }
    let plugins = PluginSet::default();
    // Alone, the plugins are attached before the informers start; a replica attaches them
    // once it leads (its informers run meanwhile: warm caches, initial list as adds).
    let mut standby = None;
    match elector {
        None => {
            for c in checked {
                plugins.push(Arc::new(manager.attach(c)?));
            }
        }
        Some(e) => standby = Some((e, checked)),
    }

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    if let Some(d) = dir.clone() {
        tokio::spawn(d.watch(DIR_RESCAN, stopped()));
    }
    let mut tasks = Vec::new();
    let fatal = Arc::new(Fatal::default());
    for inf in &informers {
        tracing::info!(informer = %inf.name(), "listing objects");
        let run = inf.clone().run(stopped());
        let name = inf.name().to_owned();
        let fatal = fatal.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) = run.await {
                tracing::error!(informer = %name, error = %e, "informer failed; the host shuts down");
                fatal.raise(format!("{e} (its onPanic is exit)"));
            }
        }));
        let i = inf.clone();
        tokio::spawn(async move {
            if crate::informer::shared_informer::wait_for(Duration::from_secs(3600), || {
                i.has_synced()
            })
            .await
            {
                tracing::info!(informer = %i.name(), objects = i.cache().len(), "informer synced");
            }
        });
    }
    if let Some(m) = membership {
        tokio::spawn(m.run(stopped()));
    }
    // Policy reports: written by the host, fenced as the actions are.
    if let (Some(pr), Some(client)) = (&config.policy_reports, &client) {
        let settings = crate::reports::ReportSettings::new(pr, report_identity.as_deref());
        tracing::info!(
            group = %settings.group.api_version(),
            name = %settings.name,
            interval = ?settings.interval,
            "writing policy reports"
        );
        let writer = crate::reports::ReportWriter::new(
            client.clone(),
            services.verdicts.clone(),
            settings,
            leadership.clone(),
            services.reports.clone(),
        );
        tokio::spawn(writer.run(stopped()));
    }
    let reloader_cell: Arc<std::sync::OnceLock<Arc<crate::reloader::Reloader>>> = Arc::default();
    let new_reloader = {
        let (path, config, plugins, cell) = (
            opts.config_path.clone(),
            config.clone(),
            plugins.clone(),
            reloader_cell.clone(),
        );
        let stopped = stopped.clone();
        move |manager: PluginManager| {
            let r = crate::reloader::Reloader::new(path?, config, manager, plugins);
            tokio::spawn(r.clone().watch(stopped()));
            tokio::spawn(crate::oci::poll::run(r.clone(), stopped()));
            let _ = cell.set(r.clone());
            Some(r)
        }
    };
    match standby {
        None => {
            new_reloader(manager);
        }
        Some((mut elector, checked)) => {
            let (plugins, fatal, stopped) = (plugins.clone(), fatal.clone(), stopped.clone());
            tokio::spawn(async move {
                let mut stop = Box::pin(stopped());
                tracing::info!("standing by for the Lease");
                if !elector.acquire(&mut stop).await {
                    return;
                }
                for c in checked {
                    match manager.attach(c) {
                        Ok(h) => plugins.push(Arc::new(h)),
                        Err(e) => {
                            fatal.raise(format!("leading, but a plugin did not start: {e:#}"));
                            return;
                        }
                    }
                }
                // What changed in the files while it stood by applies now.
                if let Some(r) = new_reloader(manager) {
                    tokio::task::spawn_blocking(move || r.catch_up());
                }
                if let crate::scale::lease::Ended::Lost(why) = elector.renew(&mut stop).await {
                    fatal.raise(format!("lost the Lease: {why}; a standby takes over"));
                }
            });
        }
    }
    let reload: Option<crate::admin::ReloadFn> = opts.config_path.is_some().then(|| {
        let cell = reloader_cell.clone();
        let f: crate::admin::ReloadFn = Arc::new(move |name: Option<String>| match cell.get() {
            Some(r) => match name {
                Some(n) => r.reload_plugin(&n),
                None => r.reload_all(),
            },
            None => Err(crate::admin::ReloadError::Refused(
                "this replica stands by: its plugins start when it takes the Lease, with the config \
                 file and modules as they are then"
                    .into(),
            )),
        });
        f
    });
    let source_errors: Option<crate::admin::SourceErrorsFn> = dir.clone().map(|d| {
        let f: crate::admin::SourceErrorsFn = Arc::new(move || d.errors());
        f
    });
    let admin = AdminState {
        informers: informers.clone(),
        plugins: plugins.clone(),
        reload,
        services,
        executor: Some(executor.clone()),
        source_errors,
        leadership: leadership.clone(),
    };
    let listen = opts
        .admin
        .clone()
        .unwrap_or_else(|| config.admin.listen.clone());
    let mut admin_addr = None;
    if !listen.is_empty() {
        let l = tokio::net::TcpListener::bind(&listen)
            .await
            .with_context(|| format!("admin.listen {listen}"))?;
        admin_addr = l.local_addr().ok();
        let auth = crate::admin::AdminAuth {
            token_file: config
                .admin
                .token_file
                .as_deref()
                .map(|f| config.resolve(std::path::Path::new(f))),
        };
        tokio::spawn(crate::admin::serve_with_auth(
            l,
            admin.clone(),
            auth,
            stopped(),
        ));
    }
    if let Some(m) = config
        .admin
        .metrics_address
        .as_ref()
        .filter(|m| !m.is_empty())
    {
        let l = tokio::net::TcpListener::bind(m)
            .await
            .with_context(|| format!("admin.metricsAddress {m}"))?;
        tokio::spawn(crate::admin::serve_metrics(l, admin.clone(), stopped()));
    }
    Ok(Host {
        informers,
        plugins,
        admin,
        admin_addr,
        reloader: reloader_cell.get().cloned(),
        executor,
        leadership,
        tasks,
        fatal,
    })
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

/// The API server's resource for informer `i` (its plural, from discovery). A group version
/// the server does not serve, or a kind it does not serve in it, is an error; when discovery
/// itself fails otherwise (no answer, forbidden), the resource is derived from the kind, as
/// kube does, and the informer's own errors will tell.
async fn discover(
    client: &kube::Client,
    config: &Config,
    i: usize,
) -> anyhow::Result<kube::core::ApiResource> {
    let inf = &config.informers[i];
    let guessed = crate::source::kube::api_resource(&inf.api_version, &inf.kind);
    let listed = if guessed.group.is_empty() {
        client.list_core_api_resources(&guessed.version).await
    } else {
        client.list_api_group_resources(&inf.api_version).await
    };
    let at = |field: &str| format!("{}: informers[{i}].{field}", config.file);
    let resources = match listed {
        Ok(list) => list.resources,
        Err(kube::Error::Api(status)) if status.code == 404 => {
            anyhow::bail!(
                "{}: the API server does not serve {:?} (informer {:?})",
                at("apiVersion"),
                inf.api_version,
                inf.name
            );
        }
        Err(e) => {
            tracing::warn!(informer = %inf.name, error = %e, "discovery failed; using the plural derived from the kind");
            return Ok(guessed);
        }
    };
    // Subresources (`pods/status`) share the kind; the collection is the one without a slash.
    match resources
        .iter()
        .find(|r| r.kind == inf.kind && !r.name.contains('/'))
    {
        Some(r) => Ok(kube::core::ApiResource {
            plural: r.name.clone(),
            ..guessed
        }),
        None => {
            let mut served: Vec<&str> = resources
                .iter()
                .filter(|r| !r.name.contains('/'))
                .map(|r| r.kind.as_str())
                .collect();
            served.sort_unstable();
            served.dedup();
            anyhow::bail!(
                "{}: the API server serves no kind {:?} in {} (informer {:?}); it serves: {}",
                at("kind"),
                inf.kind,
                inf.api_version,
                inf.name,
                served.join(", ")
            )
        }
    }
}
