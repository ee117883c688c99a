//! [`start`]: a host's start as a sequence of named steps. Every task it starts goes through
//! the [`Supervisor`]; the servers answer `/healthz` from the moment the informers are built,
//! while modules are pulled and compiled.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;

use super::build::{build_sharded_informers, engine, services};
use super::supervisor::{OnError, Phase, Supervisor};
use super::{DIR_RESCAN, Host, RunOptions};
use crate::actions::HostServices;
use crate::admin::{AdminState, ReloadError, ReloadFn, ServerLimits, Startup};
use crate::config::{AdminConfig, Config, ShardingMode};
use crate::informer::{Executor, SharedInformer};
use crate::oci::PulledModules;
use crate::plugin::{CheckedPlugin, PluginHandle, PluginManager, PluginSet, PluginSpec};
use crate::reloader::{Reloader, modules};
use crate::scale::lease::{Elector, Ended, Leadership};
use crate::scale::members::Membership;
use crate::scale::shards::{Ranges, ShardView};
use crate::source::dir::DirCluster;

/// Builds and starts everything; returns once the plugins run (or, on a standby, wait for the
/// Lease) and the informers list (they sync in the background). The informers list while the
/// plugins with local modules are checked, and each of those starts as soon as it is checked
/// (in config order among them in `/plugins`): a small plugin does not wait for a large one's
/// compile. One that fails refuses the start (those started meanwhile stop with the host);
/// on a standby every plugin is checked first, and starts when it leads. Modules from OCI registries are
/// pulled meanwhile (each pull within `oci.pullTimeout`); the plugins with local modules do not
/// wait for them (except on a standby, which starts every plugin when it leads). A module that
/// cannot be pulled or is refused still refuses the start. When `shutdown` completes, the host stops taking
/// reloads and its informers stop; [`Host::finish`] (or dropping the host) stops the rest.
pub async fn start(
    config: &Config,
    opts: &RunOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Host> {
    let listeners = Listeners::bind(config, opts).await?;
    let sup = Supervisor::new();
    stop_when(&sup, shutdown);
    let executor = start_executor(config, &sup)?;
    let shard_view = shard_view(config);
    let (informers, dir, client) =
        build_sharded_informers(config, opts, Some(&executor), shard_view.as_ref()).await?;
    let mut services = services(config, client.clone())?;
    services.tasks = sup.tasks();
    let custom_view = shard_view.clone();
    let mut fencing = Fencing::new(
        config,
        client.as_ref(),
        shard_view,
        &informers,
        &mut services,
    );
    let plugins = PluginSet::default();
    let reloader: Arc<OnceLock<Arc<Reloader>>> = Arc::default();
    let reload = reload_action(opts, &reloader, &sup);
    let admin = AdminState {
        informers: informers.clone(),
        plugins: plugins.clone(),
        reload: reload.clone(),
        services: services.clone(),
        executor: Some(executor.clone()),
        source_errors: dir.clone().map(|d| {
            let f: crate::admin::SourceErrorsFn = Arc::new(move || d.errors());
            f
        }),
        source_notes: dir.clone().map(|d| {
            let f: crate::admin::SourceErrorsFn = Arc::new(move || d.notes());
            f
        }),
        leadership: fencing.leadership.clone(),
        startup: Arc::new(Startup::default()),
        task_failures: Some({
            let s = Arc::downgrade(&sup);
            Arc::new(move || s.upgrade().map(|s| s.failures()).unwrap_or_default())
        }),
        limits: admin_limits(&config.admin),
    };
    for p in &config.plugins {
        admin.startup.begin(&p.name, "waiting to compile");
    }
    let (admin_addr, metrics_addr) = listeners.serve(config, &admin, &sup)?;

    let pulls = Pulls::spawn(config, &admin.startup, &sup);
    let manager = plugin_manager(config, opts, services, &informers, &sup)?;
    // Before any pull: the memory plan reads each plugin's limits, not its module.
    warn_over_budget(config, &config.plugin_specs(&PulledModules::new()));
    let workers = config.executor.workers();
    let local = pulls.local_specs(config);
    let elector = fencing.elector.take();
    let mut dir = dir;
    let order: Vec<String> = config.plugins.iter().map(|p| p.name.clone()).collect();
    let early = elector.is_none().then(|| {
        // The informers list while the plugins compile; each plugin starts once checked.
        run_informers(&sup, &informers, dir.take());
        AttachAsChecked {
            plugins: &plugins,
            order: &order,
        }
    });
    let (manager, checked) = check_plugins(manager, local, workers, &admin.startup, early).await?;
    let starter = PluginStarter {
        manager,
        checked,
        plugins: plugins.clone(),
        reloader: reloader.clone(),
        config: config.clone(),
        pulled: PulledModules::new(),
        config_path: opts.config_path.clone(),
        sup: sup.clone(),
    };
    match elector {
        None => {
            // The plugins with local modules run; a pull holds only its own plugins.
            starter
                .add_pulled(pulls, workers, &admin.startup)
                .await?
                .start()?;
        }
        Some(elector) => {
            let starter = starter.add_pulled(pulls, workers, &admin.startup).await?;
            lead_then_start(&sup, elector, starter);
            run_informers(&sup, &informers, dir.take());
        }
    }
    if let Some(m) = fencing.membership.take() {
        sup.spawn(
            Phase::Handover,
            "shard membership",
            OnError::Log,
            |stop| async move {
                m.run(stop.cancelled_owned()).await;
                Ok(())
            },
        );
    }
    let custom = (client.clone(), custom_view, executor.clone());
    watch_custom_resources(&sup, config, custom, &reloader, &fencing);
    write_reports(&sup, config, client, &admin.services, &fencing);
    Ok(Host {
        informers,
        plugins,
        admin,
        admin_addr,
        metrics_addr,
        reloader,
        reload,
        executor,
        leadership: fencing.leadership,
        supervisor: sup,
    })
}

/// Step: the admin and metrics sockets, bound before anything starts, so a port in use fails
/// the start at once, naming the field.
struct Listeners {
    admin: Option<TcpListener>,
    metrics: Option<TcpListener>,
}

impl Listeners {
    async fn bind(config: &Config, opts: &RunOptions) -> anyhow::Result<Self> {
        let (field, admin) = match &opts.admin {
            Some(a) => ("--admin".to_owned(), a.clone()),
            None => (
                format!("{}: admin.listen", config.file),
                config.admin.listen.clone(),
            ),
        };
        let metrics = config.admin.metrics_address.clone().unwrap_or_default();
        let bind = |field: String, addr: String| async move {
            if addr.is_empty() {
                return Ok(None);
            }
            TcpListener::bind(&addr)
                .await
                .map(Some)
                .with_context(|| format!("{field} {addr}: cannot listen"))
        };
        Ok(Self {
            admin: bind(field, admin).await?,
            metrics: bind(format!("{}: admin.metricsAddress", config.file), metrics).await?,
        })
    }

    /// Step: the servers, from now on answering `/healthz` (and `/readyz`, which names what
    /// is still starting). They run on a runtime of their own ([`servers_runtime`]).
    fn serve(
        self,
        config: &Config,
        admin: &AdminState,
        sup: &Arc<Supervisor>,
    ) -> anyhow::Result<(Option<SocketAddr>, Option<SocketAddr>)> {
        let addr = |l: &Option<TcpListener>| l.as_ref().and_then(|l| l.local_addr().ok());
        let addrs = (addr(&self.admin), addr(&self.metrics));
        if self.admin.is_none() && self.metrics.is_none() {
            return Ok(addrs);
        }
        let rt = servers_runtime(sup)?;
        if let Some(l) = self.admin {
            let auth = crate::admin::AdminAuth {
                token_file: config
                    .admin
                    .token_file
                    .as_deref()
                    .map(|f| config.resolve(std::path::Path::new(f))),
            };
            let (state, l) = (admin.clone(), l.into_std()?);
            sup.spawn_on(
                &rt,
                Phase::Servers,
                "admin server",
                OnError::Fatal,
                |stop| async move {
                    let l = TcpListener::from_std(l)?;
                    crate::admin::serve_with_auth(l, state, auth, stop.cancelled_owned())
                        .await
                        .context("admin.listen")
                },
            );
        }
        if let Some(l) = self.metrics {
            let (state, l) = (admin.clone(), l.into_std()?);
            sup.spawn_on(
                &rt,
                Phase::Servers,
                "metrics server",
                OnError::Fatal,
                |stop| async move {
                    let l = TcpListener::from_std(l)?;
                    crate::admin::serve_metrics(l, state, stop.cancelled_owned())
                        .await
                        .context("admin.metricsAddress")
                },
            );
        }
        Ok(addrs)
    }
}

/// Worker threads of the servers' runtime: a probe, a scrape and an operator's request at once.
const SERVER_THREADS: usize = 2;

/// The admin and metrics servers' own runtime ([`SERVER_THREADS`] workers that run nothing
/// else): no blocking section on the host's runtime (a compile, a `dir:` scan, a lock held
/// across a plugin call) can keep a probe waiting. Shut down with the host's threads, after
/// the servers' phase ended.
fn servers_runtime(sup: &Supervisor) -> anyhow::Result<tokio::runtime::Handle> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(SERVER_THREADS)
        .thread_name("wisp-admin")
        .enable_all()
        .build()
        .context("admin: cannot start the servers' threads")?;
    let handle = rt.handle().clone();
    let mut rt = ServersRuntime(Some(rt));
    sup.join_on_stop("servers' runtime", move || {
        if let Some(rt) = rt.0.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    });
    Ok(handle)
}

/// The servers' runtime until it is shut down. Dropped without a join (a start that failed
/// after the servers began, in async code), it is let go in the background: dropping a runtime
/// there would panic.
struct ServersRuntime(Option<tokio::runtime::Runtime>);

impl Drop for ServersRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Step: when `shutdown` completes, reloads are refused and the informers stop.
fn stop_when(sup: &Arc<Supervisor>, shutdown: impl Future<Output = ()> + Send + 'static) {
    let informers = sup.token(Phase::Informers);
    sup.spawn(
        Phase::Intake,
        "shutdown trigger",
        OnError::Log,
        |intake| async move {
            tokio::select! {
                _ = shutdown => {
                    intake.cancel();
                    informers.cancel();
                }
                _ = intake.cancelled() => {}
            }
            Ok(())
        },
    );
}

/// Step: the workers that run the plugins, joined last.
fn start_executor(config: &Config, sup: &Supervisor) -> anyhow::Result<Executor> {
    let workers = config.executor.workers();
    let executor = Executor::new(workers).with_context(|| {
        format!("executor: cannot start {workers} worker threads for the plugins")
    })?;
    tracing::info!(workers, "executor started");
    let e = executor.clone();
    sup.join_on_stop("executor workers", move || e.shutdown());
    Ok(executor)
}

/// With `mode: shards`, the informers serve the ranges of this replica's membership.
fn shard_view(config: &Config) -> Option<Arc<ShardView>> {
    config
        .sharding
        .as_ref()
        .filter(|sh| sh.mode == ShardingMode::Shards)
        .map(|sh| ShardView::new(sh.shard_by, Ranges::none()))
}

/// With `sharding` and a `kube` source: the elector (leader mode) or the membership (shards),
/// and the fence on the action sink: actions are sent only while this replica leads (or, with
/// shards, while its membership is fresh, and only about objects of its share).
struct Fencing {
    elector: Option<Elector>,
    membership: Option<Membership>,
    leadership: Option<Arc<Leadership>>,
    /// A shard member's policy reports carry its identity.
    report_identity: Option<String>,
}

impl Fencing {
    fn new(
        config: &Config,
        client: Option<&kube::Client>,
        shard_view: Option<Arc<ShardView>>,
        informers: &[Arc<SharedInformer>],
        services: &mut HostServices,
    ) -> Self {
        let mut me = Self {
            elector: None,
            membership: None,
            leadership: None,
            report_identity: None,
        };
        let (Some(sh), Some(client)) = (&config.sharding, client) else {
            return me;
        };
        // Once: without an identity in the config or $POD_NAME, each call picks a new one.
        let lease = sh.lease();
        let owns = match shard_view {
            None => {
                let e = Elector::new(client.clone(), lease);
                me.leadership = Some(e.leadership());
                me.elector = Some(e);
                None
            }
            Some(view) => {
                me.report_identity = Some(lease.identity.clone());
                let m = Membership::new(client.clone(), lease, view.clone());
                me.leadership = Some(m.freshness());
                me.membership = Some(m);
                let sharded = config
                    .informers
                    .iter()
                    .zip(informers)
                    .filter(|(c, _)| c.shard)
                    .map(|(c, i)| (c.api_version.clone(), c.kind.clone(), i.clone()))
                    .collect();
                Some(crate::scale::owner_check(sharded, view))
            }
        };
        let leadership = me.leadership.clone().unwrap_or_default();
        services.sink = services.sink.take().map(|inner| {
            Arc::new(crate::scale::FencedSink {
                inner,
                leadership,
                owns,
            }) as Arc<dyn crate::actions::ActionSink>
        });
        me
    }
}

/// The reload action (SIGHUP, `POST /reload`), when the host has a config file: refused on a
/// standby and once the shutdown began.
fn reload_action(
    opts: &RunOptions,
    reloader: &Arc<OnceLock<Arc<Reloader>>>,
    sup: &Arc<Supervisor>,
) -> Option<ReloadFn> {
    opts.config_path.as_ref()?;
    let (cell, sup) = (reloader.clone(), Arc::downgrade(sup));
    Some(Arc::new(move |name: Option<String>| {
        if sup.upgrade().is_none_or(|s| s.stopping()) {
            return Err(ReloadError::Refused("the host is shutting down".into()));
        }
        match cell.get() {
            Some(r) => match name {
                Some(n) => r.reload_plugin(&n),
                None => r.reload_all(),
            },
            None => Err(ReloadError::Refused(
                "this replica stands by: its plugins start when it takes the Lease, with the config \
                 file and modules as they are then"
                    .into(),
            )),
        }
    }))
}

/// Step: the OCI modules, pulled (and their signatures checked) by a task of their own from the
/// start on, all at once and each within `oci.pullTimeout`, while the plugins with local modules
/// are checked and started: a pull holds only the plugins that need it.
struct Pulls {
    /// The plugins whose module is pulled.
    names: Vec<String>,
    /// The modules pulled, or why not.
    done: Option<tokio::sync::oneshot::Receiver<Result<PulledModules, modules::PullError>>>,
}

impl Pulls {
    fn spawn(config: &Config, startup: &Startup, sup: &Arc<Supervisor>) -> Self {
        let names: Vec<String> = config
            .plugins
            .iter()
            .filter(|p| p.module.to_str().is_some_and(crate::oci::is_oci))
            .map(|p| p.name.clone())
            .collect();
        if names.is_empty() {
            return Self { names, done: None };
        }
        for name in &names {
            startup.begin(name, "pulling its module");
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let c = config.clone();
        sup.spawn(
            Phase::Intake,
            "OCI pulls",
            OnError::Log,
            |stop| async move {
                let pulled = async move { modules::pull(&c, None).await };
                tokio::select! {
                    r = pulled => { let _ = tx.send(r); }
                    _ = stop.cancelled() => {}
                }
                Ok(())
            },
        );
        Self {
            names,
            done: Some(rx),
        }
    }

    /// The specs of the plugins whose module is a local file.
    fn local_specs(&self, config: &Config) -> Vec<PluginSpec> {
        let mut specs = config.plugin_specs(&PulledModules::new());
        specs.retain(|s| !self.names.contains(&s.name));
        specs
    }

    /// Waits for the pulls: the modules pulled (`None`: nothing to pull).
    async fn wait(self, startup: &Startup) -> anyhow::Result<Option<PulledModules>> {
        let Some(rx) = self.done else {
            return Ok(None);
        };
        let pulled = rx
            .await
            .map_err(|_| anyhow::anyhow!("the OCI pulls stopped: the host is shutting down"))?
            // Its message already names its causes: `{:#}` would repeat them.
            .map_err(|e| anyhow::Error::msg(e.to_string()))?;
        for name in &self.names {
            startup.begin(name, "waiting to compile");
        }
        Ok(Some(pulled))
    }
}

/// Step: the plugin engine (its epoch ticker joined last) and a manager with the services and
/// informers plugins may use.
fn plugin_manager(
    config: &Config,
    opts: &RunOptions,
    services: HostServices,
    informers: &[Arc<SharedInformer>],
    sup: &Supervisor,
) -> anyhow::Result<PluginManager> {
    let engine = engine(config, opts.compiler.clone(), Some(sup.tasks()))?;
    let e = engine.clone();
    sup.join_on_stop("epoch ticker", move || e.stop_ticker());
    let mut manager = PluginManager::new(engine);
    manager.set_services(services);
    for i in informers {
        manager.add_informer(i.clone());
    }
    Ok(manager)
}

/// Warns when the plugins' memory limits and the compiles that run at once at start (one per
/// executor worker, each up to `engine.compileMemory`) add up to more than the host's cgroup
/// allows.
fn warn_over_budget(config: &Config, specs: &[PluginSpec]) {
    use crate::plugin::budget;
    let budgets: Vec<(&str, u64)> = specs
        .iter()
        .map(|s| (s.name.as_str(), s.limits.memory))
        .collect();
    let compiles = budget::Compiles {
        at_once: config.executor.workers().min(specs.len()),
        each: config
            .engine
            .compile_memory
            .map_or(crate::plugin::compile::DEFAULT_COMPILE_MEMORY, |m| m.0),
    };
    let queues = specs
        .iter()
        .map(budget::queue_bytes)
        .fold(0u64, u64::saturating_add);
    if let Some(w) = budget::over_limit(
        &budgets,
        budget::Host {
            base: budget::HOST_BASE,
            queues,
        },
        compiles,
        budget::cgroup_memory_limit(),
    ) {
        tracing::warn!("{w}");
    }
}

/// Where plugins go as soon as they are checked, in `order` (the config's) among themselves.
struct AttachAsChecked<'a> {
    plugins: &'a PluginSet,
    order: &'a [String],
}

impl AttachAsChecked<'_> {
    /// Adds `plugin` to the set before the first plugin that comes after it in the config.
    fn insert(&self, plugin: PluginHandle) {
        let at = |name: &str| self.order.iter().position(|o| o == name);
        let mut list = self.plugins.lock();
        let pos = list
            .iter()
            .position(|p| at(p.name()) > at(plugin.name()))
            .unwrap_or(list.len());
        list.insert(pos, Arc::new(plugin));
    }
}

/// Step: every plugin checked (compiled, or loaded from the module cache, and initialised),
/// several at once (as many as the executor has `workers`), each named in `/readyz` until done;
/// with `attach`, each started as soon as it is checked (the rest are returned); background
/// tier-ups wait until every check is done. The first to fail, in config order, refuses the
/// start, once every check is done.
async fn check_plugins(
    manager: PluginManager,
    specs: Vec<PluginSpec>,
    workers: usize,
    startup: &Arc<Startup>,
    attach: Option<AttachAsChecked<'_>>,
) -> anyhow::Result<(PluginManager, Vec<CheckedPlugin>)> {
    let parallel = workers.clamp(1, specs.len().max(1));
    let n = specs.len();
    let startup = startup.clone();
    // No background tier-up takes a compile slot before every start is checked: between two
    // checks no start waits for a slot, and with one slot (`executor.workers` follows a CPU
    // quota: one in a 0.5-core pod) a tier-up taken then held the next start for its whole
    // Cranelift compile (~25 s in 0.5 core).
    let _tier_ups = manager.engine().hold_tier_up();
    let manager = Arc::new(manager);
    let checker = manager.clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let checks = tokio::task::spawn_blocking(move || {
        let next = AtomicUsize::new(0);
        let check = |spec: &PluginSpec| {
            startup.begin(&spec.name, "compiling");
            let t = std::time::Instant::now();
            let r = checker.check(spec).map_err(|e| format!("{e:#}"));
            tracing::info!(plugin = %spec.name, ok = r.is_ok(), took = ?t.elapsed(), "checked");
            startup.end(&spec.name);
            r
        };
        std::thread::scope(|s| {
            for _ in 0..parallel {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(spec) = specs.get(i) else { break };
                        if tx.send((i, check(spec))).is_err() {
                            break;
                        }
                    }
                });
            }
        });
    });
    // Per plugin: attached (`None`), checked and not attached, or why it failed.
    let mut results: Vec<Option<Result<Option<CheckedPlugin>, String>>> =
        (0..n).map(|_| None).collect();
    while let Some((i, r)) = rx.recv().await {
        results[i] = Some(match (r, &attach) {
            (Ok(c), Some(a)) => match manager.attach(c) {
                Ok(h) => {
                    a.insert(h);
                    Ok(None)
                }
                Err(e) => Err(format!("{e:#}")),
            },
            (r, _) => r.map(Some),
        });
    }
    checks.await.context("checking the plugins")?;
    let manager = Arc::into_inner(manager)
        .ok_or_else(|| anyhow::anyhow!("the plugin checks still hold the plugin manager"))?;
    let mut checked = Vec::with_capacity(n);
    for r in results {
        match r {
            Some(Ok(Some(c))) => checked.push(c),
            Some(Ok(None)) => {}
            Some(Err(e)) => anyhow::bail!("{e}"),
            None => anyhow::bail!("a plugin check did not run"),
        }
    }
    Ok((manager, checked))
}

/// What starts the checked plugins: now, or once this replica leads.
struct PluginStarter {
    manager: PluginManager,
    checked: Vec<CheckedPlugin>,
    plugins: PluginSet,
    reloader: Arc<OnceLock<Arc<Reloader>>>,
    config: Config,
    /// The config's `oci://` modules, once pulled.
    pulled: PulledModules,
    config_path: Option<std::path::PathBuf>,
    sup: Arc<Supervisor>,
}

impl PluginStarter {
    /// Attaches the plugins checked so far (they run from now on).
    fn attach_checked(&mut self) -> anyhow::Result<()> {
        for c in std::mem::take(&mut self.checked) {
            self.plugins.push(Arc::new(self.manager.attach(c)?));
        }
        Ok(())
    }

    /// Waits for `pulls`, then checks the plugins they were for: they start with the rest (or,
    /// once the others run, as soon as they are checked). A module that cannot be pulled, or
    /// is refused, refuses the start.
    async fn add_pulled(
        mut self,
        pulls: Pulls,
        workers: usize,
        startup: &Arc<Startup>,
    ) -> anyhow::Result<Self> {
        let names = pulls.names.clone();
        let Some(pulled) = pulls.wait(startup).await? else {
            return Ok(self);
        };
        let mut specs = self.config.plugin_specs(&pulled);
        specs.retain(|s| names.contains(&s.name));
        let (manager, checked) = check_plugins(self.manager, specs, workers, startup, None).await?;
        self.manager = manager;
        self.checked.extend(checked);
        // In config order, as they would have been checked together.
        let config = &self.config;
        let at = |name: &str| config.plugins.iter().position(|p| p.name == name);
        self.checked.sort_by_key(|c| at(c.name()));
        self.pulled = pulled;
        Ok(self)
    }

    /// Attaches every plugin checked and not yet attached, then starts live reloads (file
    /// watch, OCI poll) when the host has a config file; returns the reloader.
    fn start(mut self) -> anyhow::Result<Option<Arc<Reloader>>> {
        self.attach_checked()?;
        let Some(path) = self.config_path else {
            return Ok(None);
        };
        let r = Reloader::new(path, self.config, self.pulled, self.manager, self.plugins);
        let (w, p) = (r.clone(), r.clone());
        self.sup.spawn(
            Phase::Intake,
            "reloader file watch",
            OnError::Log,
            |stop| async move {
                w.watch(stop.cancelled_owned()).await;
                Ok(())
            },
        );
        self.sup
            .spawn(Phase::Intake, "OCI poll", OnError::Log, |stop| async move {
                crate::reloader::oci_poll::run(p, stop.cancelled_owned()).await;
                Ok(())
            });
        let _ = self.reloader.set(r.clone());
        Ok(Some(r))
    }
}

/// Step (leader mode): stand by for the Lease; once leading, start the plugins with the files
/// as they are then, and renew until the handover phase, which releases the Lease. Losing it
/// is fatal: a standby takes over.
fn lead_then_start(sup: &Arc<Supervisor>, mut elector: Elector, starter: PluginStarter) {
    let intake = sup.token(Phase::Intake);
    sup.spawn(
        Phase::Handover,
        "lease elector",
        OnError::Fatal,
        |handover| async move {
            tracing::info!("standing by for the Lease");
            if !elector
                .acquire(&mut Box::pin(intake.cancelled_owned()))
                .await
            {
                return Ok(());
            }
            let reloader = starter
                .start()
                .map_err(|e| anyhow::anyhow!("leading, but a plugin did not start: {e:#}"))?;
            // What changed in the files while it stood by applies now.
            if let Some(r) = reloader {
                tokio::task::spawn_blocking(move || r.catch_up()).await?;
            }
            match elector
                .renew(&mut Box::pin(handover.cancelled_owned()))
                .await
            {
                Ended::Stopped => Ok(()),
                Ended::Lost(why) => anyhow::bail!("lost the Lease: {why}; a standby takes over"),
            }
        },
    );
}

/// How long an informer's "synced" line is waited for (it is logged only once).
const SYNC_LOG_WAIT: Duration = Duration::from_secs(24 * 3600);

/// Step: the informers list and watch, the `dir:` source rescans; each logs once synced. (Also
/// `wisp record`'s, under a supervisor of its own.)
pub fn run_informers(
    sup: &Arc<Supervisor>,
    informers: &[Arc<SharedInformer>],
    dir: Option<Arc<DirCluster>>,
) {
    if let Some(d) = dir {
        sup.spawn(
            Phase::Informers,
            "dir watch",
            OnError::Log,
            |stop| async move {
                d.watch(DIR_RESCAN, stop.cancelled_owned()).await;
                Ok(())
            },
        );
    }
    for inf in informers {
        tracing::info!(informer = %inf.name(), "listing objects");
        let task = format!("informer {}", inf.name());
        let i = inf.clone();
        sup.spawn(Phase::Informers, &task, OnError::Fatal, |stop| async move {
            i.run(stop.cancelled_owned())
                .await
                .map_err(|e| anyhow::anyhow!("{e} (its onPanic is exit)"))
        });
        let i = inf.clone();
        let task = format!("informer {} synced log", inf.name());
        sup.spawn(Phase::Informers, &task, OnError::Log, |stop| async move {
            let synced = crate::informer::shared_informer::wait_for(SYNC_LOG_WAIT, || {
                i.has_synced()
            });
            tokio::select! {
                _ = synced => tracing::info!(informer = %i.name(), objects = i.cache().len(), "informer synced"),
                _ = stop.cancelled() => {}
            }
            Ok(())
        });
    }
}

/// Step (`customResources.enabled`): the reconciler of `WispPlugin` and `ClusterWispPlugin`
/// custom resources, once this replica runs its plugins; status writes fenced by the Lease.
fn watch_custom_resources(
    sup: &Arc<Supervisor>,
    config: &Config,
    (client, view, executor): (Option<kube::Client>, Option<Arc<ShardView>>, Executor),
    reloader: &Arc<OnceLock<Arc<Reloader>>>,
    fencing: &Fencing,
) {
    let (Some(_), Some(client)) = (
        config.custom_resources.as_ref().filter(|c| c.enabled),
        client,
    ) else {
        return;
    };
    let me = super::custom::CustomPlugins {
        config: config.clone(),
        client,
        reloader: reloader.clone(),
        leadership: fencing.leadership.clone(),
        executor,
        shard_view: view,
        sup: sup.clone(),
    };
    sup.spawn(Phase::Intake, "custom resources", OnError::Log, |stop| {
        super::custom::run(me, stop)
    });
}

/// Step: policy reports, written by the host and fenced as the actions are; the last write
/// happens in the handover phase.
fn write_reports(
    sup: &Arc<Supervisor>,
    config: &Config,
    client: Option<kube::Client>,
    services: &HostServices,
    fencing: &Fencing,
) {
    let (Some(pr), Some(client)) = (&config.policy_reports, client) else {
        return;
    };
    let settings = crate::reports::ReportSettings::new(pr, fencing.report_identity.as_deref());
    tracing::info!(
        group = %settings.group.api_version(),
        name = %settings.name,
        interval = ?settings.interval,
        "writing policy reports"
    );
    let writer = crate::reports::ReportWriter::new(
        client,
        services.verdicts.clone(),
        settings,
        fencing.leadership.clone(),
        services.reports.clone(),
    );
    sup.spawn(
        Phase::Handover,
        "policy reports",
        OnError::Log,
        |stop| async move {
            writer.run(stop.cancelled_owned()).await;
            Ok(())
        },
    );
}

/// The admin and metrics servers' connection bounds of `admin`, defaults filled in.
fn admin_limits(admin: &AdminConfig) -> ServerLimits {
    let d = ServerLimits::default();
    ServerLimits {
        max_connections: admin
            .max_connections
            .map_or(d.max_connections, |n| n as usize),
        header_read_timeout: admin
            .header_read_timeout
            .map_or(d.header_read_timeout, |t| t.0),
        idle_timeout: admin.idle_timeout.map_or(d.idle_timeout, |t| t.0),
    }
}
