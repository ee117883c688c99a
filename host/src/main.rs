//! The `wisp` command. Only this file touches signals and the process's output format.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use wisp_host::app::{self, RunOptions};
use wisp_host::config::{Config, parse_duration};
use wisp_host::plugin::compiler::{self, ArtifactSettings};
use wisp_host::plugin::{EngineConfig, PluginEngine, check_module};

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

/// The bounds of a module's compile, for the commands that load a module themselves (`wisp run`
/// reads them from `engine:` in its config).
#[derive(clap::Args)]
struct CompileArgs {
    /// Most CPU time a module's compile may take (engine.compileTimeout; its wall clock is
    /// bounded at 10 times it); over it the module is refused.
    #[arg(long, value_name = "DURATION", default_value = "120s")]
    compile_timeout: String,
    /// Most address space a module's compile may take (engine.compileMemory, at least 128Mi);
    /// over it the module is refused.
    #[arg(long, value_name = "SIZE", default_value = "1Gi")]
    compile_memory: String,
    /// Largest module file read (engine.maxModuleSize); a larger one is refused unread.
    #[arg(long, value_name = "SIZE", default_value = "64Mi")]
    max_module_size: String,
}

impl CompileArgs {
    /// `--compile-memory`, checked.
    fn memory(&self) -> anyhow::Result<u64> {
        let memory = wisp_host::config::parse_bytes(&self.compile_memory)
            .map_err(|e| anyhow::anyhow!("--compile-memory: {e}"))?;
        let min = wisp_host::plugin::compile::MIN_COMPILE_MEMORY;
        if memory < min {
            anyhow::bail!(
                "--compile-memory: {memory} bytes is too little: at least {}Mi",
                min >> 20
            );
        }
        Ok(memory)
    }

    /// An engine that compiles in child processes of this binary, within these bounds.
    fn engine(&self) -> anyhow::Result<std::sync::Arc<PluginEngine>> {
        let timeout = parse_duration(&self.compile_timeout)
            .map_err(|e| anyhow::anyhow!("--compile-timeout: {e}"))?;
        if timeout.is_zero() {
            anyhow::bail!("--compile-timeout: must be more than 0");
        }
        let max_module_size = wisp_host::config::parse_bytes(&self.max_module_size)
            .map_err(|e| anyhow::anyhow!("--max-module-size: {e}"))?;
        Ok(PluginEngine::new(EngineConfig {
            compile_timeout: timeout,
            bound_names: wisp_host::plugin::compile::BoundNames::FLAGS,
            compile_memory: self.memory()?,
            max_module_size,
            compiler: compiler::own_executable(),
            ..EngineConfig::default()
        })?)
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
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

/// What `wisp new --help` adds.
const NEW_HELP: &str = "\
Then, in DIR: `wisp build`, `wisp test --plugin dist/NAME.wasm fixtures.yaml`,
`wisp check dist/NAME.wasm`. The plugin reports Namespaces without an `owner` label (setting
`label`) as violations; its fixtures cover the handler and the settings accepted and refused.
See docs/plugins/README.md.
";

/// What `wisp build --help` adds (the pins from the code that installs them).
fn build_help() -> String {
    use wisp_host::build::toolchain::{COMPONENTIZE_JS, COMPONENTIZE_PY};
    format!(
        "\
Rust: cargo build --release --target wasm32-wasip2 (CARGO_TARGET_DIR is honoured; without the
  target: `rustup target add wasm32-wasip2`).
Python: componentize-py {COMPONENTIZE_PY} builds app.py (module `app`) with the SDK from vendor/
  (else the one in this binary); needs python3 >= 3.10 with venv.
JavaScript: componentize-js {COMPONENTIZE_JS} builds package.json's `main` (default app.js);
  `import ... from '@wisp/plugin'` resolves to vendor/wisp-plugin, node_modules/@wisp/plugin or
  the SDK in this binary; other bare imports need a bundler first. Needs node >= 18 with npm.
Toolchains: componentize-py and componentize-js are installed on first use (from PyPI and npm)
  into $WISP_TOOLCHAINS, default $XDG_CACHE_HOME/wisp/toolchains or ~/.cache/wisp/toolchains,
  one directory per pinned version.
The WIT is the plugin's wit/ (else the one in this binary).
"
    )
}

#[derive(Clone, Copy, ValueEnum)]
enum NewLang {
    /// A cdylib crate using the wisp-sdk crate.
    Rust,
    /// app.py using the wisp_plugin package (componentize-py).
    Python,
    /// app.js importing @wisp/plugin (componentize-js).
    Js,
}

#[derive(Subcommand)]
enum Command {
    /// Run the host: informers from the config, plugins attached, admin server on `admin.listen`.
    /// Stops on Ctrl-C / SIGTERM: informers stop, batches in hand finish, queued actions are sent
    /// until the grace period ends and audited as not sent after it.
    #[command(after_long_help = RUN_HELP)]
    Run {
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
    },
    /// Validate a plugin: is it a wisp:plugin component, does `describe` work, does `init`
    /// accept the settings. Prints what it says about itself.
    Check {
        /// The component (.wasm).
        module: PathBuf,
        /// Settings to pass to `init` (JSON).
        #[arg(long, default_value = "{}")]
        settings: String,
        #[command(flatten)]
        compile: CompileArgs,
    },
    /// Feed recorded notifications (from `wisp record`) to a plugin offline; prints each
    /// outcome and the plugin's logs, then its metrics.
    Replay {
        /// The component (.wasm).
        #[arg(long)]
        plugin: PathBuf,
        /// Recorded notifications (JSON Lines).
        #[arg(long)]
        events: PathBuf,
        /// Settings to pass to `init` (JSON).
        #[arg(long, default_value = "{}")]
        settings: String,
        #[command(flatten)]
        compile: CompileArgs,
    },
    /// Run fixture files (objects in; expected outcomes, verdicts, actions, logs, counters) against
    /// a plugin, offline: the module is compiled once per run, a fresh instance per case; the
    /// informers the plugin's describe names are granted unless the fixture's `informers` says
    /// otherwise; actions are audited, never sent. Fails when any case does. Object files (`{file: path}`) are read only inside the fixture's directory,
    /// regular files of at most 16 MiB. The format is in docs/plugins/testing.md.
    Test {
        /// The component (.wasm).
        #[arg(long)]
        plugin: PathBuf,
        /// Fixture files (YAML).
        #[arg(required = true)]
        fixtures: Vec<PathBuf>,
        #[command(flatten)]
        compile: CompileArgs,
    },
    /// Save the informers' notifications (JSON Lines) for `wisp replay`. Plugins in the config
    /// are not run.
    Record {
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
    },
    /// Print the ServiceAccount and least-privilege roles the config needs (list, watch, and the
    /// verbs of the plugins' action grants): a Role and RoleBinding in each namespace an
    /// informer or grant names, however many; a ClusterRole only for what covers all namespaces
    /// or cluster-scoped kinds.
    Rbac {
        /// Config file (YAML).
        #[arg(long, short)]
        config: PathBuf,
        /// Name of the ServiceAccount and roles.
        #[arg(long, default_value = "wisp")]
        name: String,
        /// Namespace the host runs in.
        #[arg(long, default_value = "wisp")]
        namespace: String,
    },
    /// Publish a plugin module to an OCI registry (config application/vnd.wasm.config.v0+json,
    /// one application/wasm layer, an OCI image manifest) and print its digest; with --sign,
    /// also a Sigstore bundle (v0.3, keyed, as cosign 3 writes) attached as an OCI 1.1 referrer
    /// (referrers tag sha256-HEX where the registry has no referrers API).
    Push {
        /// The component (.wasm).
        module: PathBuf,
        /// Where: oci://REGISTRY/REPOSITORY:TAG.
        reference: String,
        /// Sign with this PEM PKCS#8 ECDSA P-256 private key
        /// (`openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out key.pem`).
        #[arg(long, value_name = "KEY.pem")]
        sign: Option<PathBuf>,
        /// With --sign: also write the legacy cosign signature at tag sha256-HEX.sig (what
        /// cosign 2 and older Wisp read).
        #[arg(long, requires = "sign")]
        legacy_signature: bool,
        /// Docker config JSON with the registry's credentials (`auths`).
        #[arg(long, value_name = "FILE")]
        docker_config: Option<PathBuf>,
        /// PEM CA certificates to trust besides the system's.
        #[arg(long, value_name = "FILE")]
        ca_file: Option<PathBuf>,
        /// Reach the registry over plain http.
        #[arg(long)]
        insecure: bool,
    },
    /// Write a new plugin into DIR (default ./NAME; it must not exist or be empty): the manifest
    /// (Cargo.toml with the examples' release profile, pyproject.toml or package.json), a source
    /// with one handler and a settings check, fixtures.yaml for `wisp test`, a README, the SDK
    /// (wisp-sdk/, vendor/) and the WIT (wit/), all from this binary: no checkout needed.
    #[command(after_long_help = NEW_HELP)]
    New {
        /// The plugin's language.
        #[arg(long, value_enum)]
        lang: NewLang,
        /// The plugin's name (lowercase letters, digits and '-').
        name: String,
        /// Where to write it.
        dir: Option<PathBuf>,
    },
    /// Build the plugin in DIR (default .) into a component, its language told by its manifest
    /// (Cargo.toml, pyproject.toml or app.py, package.json), and print where it is written.
    #[command(after_long_help = build_help())]
    Build {
        /// The plugin's directory.
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Where to write the component (default DIR/dist/NAME.wasm).
        #[arg(long, short, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Run the informer pipeline on a small embedded in-memory cluster (no cluster, no
    /// plugins): list pods, apply changes, print what a listener sees.
    Demo,
    /// One module's compile, run by the host in a child process of its own (module on stdin,
    /// artifact on stdout; see wisp_host::plugin::compiler). Not for direct use.
    #[command(name = "__compile", hide = true)]
    Compile {
        /// Compile fuel checks in.
        #[arg(long)]
        fuel: bool,
        /// Leave the epoch checks out.
        #[arg(long)]
        no_epoch_interruption: bool,
        /// Compile with Winch (the first-load tier).
        #[arg(long)]
        baseline: bool,
    },
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// SIGHUP, caught from the moment it is installed: its default action would end the process
/// (a standby, a host still compiling its plugins).
#[cfg(unix)]
type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangups = ();

fn catch_sighup() -> Hangups {
    #[cfg(unix)]
    {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| tracing::warn!(error = %e, "SIGHUP not handled"))
            .ok()
    }
}

/// Each SIGHUP re-reads the config and reloads every plugin; a replica that cannot (a standby,
/// a host shutting down) logs why and goes on.
async fn reload_on_sighup(hups: Hangups, reload: wisp_host::admin::ReloadFn) {
    #[cfg(unix)]
    {
        let Some(mut hup) = hups else {
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reloading the config and every plugin");
            let r = reload.clone();
            match tokio::task::spawn_blocking(move || r(None)).await {
                Ok(Ok(done)) => tracing::info!("{done}"),
                Ok(Err(wisp_host::admin::ReloadError::Refused(why))) => {
                    tracing::warn!("SIGHUP: reload refused: {why}")
                }
                Ok(Err(e)) => tracing::warn!("SIGHUP: reload refused: {e:?}"),
                Err(e) => tracing::error!(error = %e, "reload failed"),
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (hups, reload);
}

/// `--for` / `--duration`: a duration like `30s`, when given.
fn optional_duration(arg: Option<&str>) -> anyhow::Result<Option<Duration>> {
    arg.map(parse_duration)
        .transpose()
        .map_err(anyhow::Error::msg)
}

fn settings_json(s: &str) -> anyhow::Result<serde_json::Value> {
    serde_json::from_str(s).with_context(|| format!("--settings is not valid JSON: {s}"))
}

fn main() {
    let cli = Cli::parse();
    // A compile child: no runtime, no log, nothing but the compile (its limits are already set).
    if let Command::Compile {
        fuel,
        no_epoch_interruption,
        baseline,
    } = cli.command
    {
        std::process::exit(compiler::child_main(ArtifactSettings {
            epoch_interruption: !no_epoch_interruption,
            fuel,
            baseline,
        }));
    }
    // `wisp test` prints what the plugin logged under each failed case; the host's own log of
    // those lines would only repeat them (RUST_LOG still says otherwise).
    let default = match cli.command {
        Command::Test { .. } => "info,wisp::plugin=off",
        _ => "info",
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    use std::io::IsTerminal;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match cli.log_format {
        LogFormat::Text => b.init(),
        LogFormat::Json => b.json().init(),
    }
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
    if let Err(e) = runtime.block_on(run(cli.command)) {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

async fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Run {
            config,
            context,
            admin,
            run_for,
            grace,
        } => run_host(config, context, admin, run_for, grace).await,
        Command::Push {
            module,
            reference,
            sign,
            legacy_signature,
            docker_config,
            ca_file,
            insecure,
        } => {
            let sign = sign.map(|key| (key, legacy_signature));
            push(module, reference, sign, docker_config, ca_file, insecure).await
        }
        Command::Check {
            module,
            settings,
            compile,
        } => check(&module, &settings, &compile),
        Command::Replay {
            plugin,
            events,
            settings,
            compile,
        } => {
            let engine = compile.engine()?;
            let mut out = std::io::stdout().lock();
            let s = wisp_host::record::replay(
                &engine,
                &plugin,
                settings_json(&settings)?,
                &events,
                &mut out,
            )?;
            if s.failed > 0 {
                anyhow::bail!("{} of {} notifications failed", s.failed, s.notifications);
            }
            Ok(())
        }
        Command::Test {
            plugin,
            fixtures,
            compile,
        } => {
            let engine = compile.engine()?;
            let mut out = std::io::stdout().lock();
            let (mut cases, mut passed) = (0, 0);
            // One compile (or module-cache load) for the run; a fresh instance per case.
            let plugin = wisp_host::fixture::load(&engine, &plugin, &mut out)?;
            for f in &fixtures {
                let s = wisp_host::fixture::run_loaded(&engine, &plugin, f, &mut out)?;
                cases += s.cases;
                passed += s.passed;
            }
            if passed < cases {
                anyhow::bail!("{} of {cases} cases failed", cases - passed);
            }
            Ok(())
        }
        Command::Record {
            config,
            out,
            duration,
            until_synced,
            context,
        } => record(config, out, duration, until_synced, context).await,
        Command::Rbac {
            config,
            name,
            namespace,
        } => {
            let cfg = Config::load(&config)?;
            print!("{}", wisp_host::rbac::generate(&cfg, &name, &namespace));
            Ok(())
        }
        Command::New { lang, name, dir } => new_plugin(lang, &name, dir),
        Command::Build { dir, out } => {
            let started = std::time::Instant::now();
            let say = |m: String| eprintln!("wisp build: {m}");
            let built = tokio::task::spawn_blocking(move || {
                wisp_host::build::build(&dir, out.as_deref(), &say)
            })
            .await??;
            let size = std::fs::metadata(&built).map_or(0, |m| m.len());
            println!(
                "built {} ({:.1} MB in {})",
                built.display(),
                size as f64 / 1e6,
                wisp_host::units::human_duration(started.elapsed())
            );
            Ok(())
        }
        Command::Demo => {
            wisp_host::demo::run().await?;
            Ok(())
        }
        Command::Compile { .. } => anyhow::bail!("__compile is run before the runtime starts"),
    }
}

/// `wisp run`: the host until SIGTERM, Ctrl-C or `--for`; SIGHUP reloads.
async fn run_host(
    config: PathBuf,
    context: Option<String>,
    admin: Option<String>,
    run_for: Option<String>,
    grace: String,
) -> anyhow::Result<()> {
    let cfg = Config::load(&config)?;
    let limit = optional_duration(run_for.as_deref())?;
    let grace = parse_duration(&grace).map_err(|e| anyhow::anyhow!("--grace: {e}"))?;
    let opts = RunOptions {
        context,
        admin,
        config_path: Some(config.clone()),
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

/// `wisp push`: a module to an OCI registry, signed with `sign` when given (the key, and
/// whether to write the legacy signature too).
async fn push(
    module: PathBuf,
    reference: String,
    sign: Option<(PathBuf, bool)>,
    docker_config: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    insecure: bool,
) -> anyhow::Result<()> {
    let r = wisp_host::oci::Reference::parse(&reference)
        .map_err(|e| anyhow::anyhow!("reference: {e}"))?;
    let bytes = std::fs::read(&module).with_context(|| format!("module {}", module.display()))?;
    let cfg = wisp_host::config::OciConfig {
        docker_config,
        ca_file,
        insecure: if insecure {
            vec![r.registry.clone()]
        } else {
            Vec::new()
        },
        ..Default::default()
    };
    let cwd = std::env::current_dir()?;
    let settings = wisp_host::oci::Settings::from_config(&cfg, &cwd, None)
        .map_err(|(field, e)| anyhow::anyhow!("{}: {e}", field.replace("oci.", "--")))?;
    if let Some((k, _)) = &sign
        && !k.is_file()
    {
        anyhow::bail!("--sign: key file {} does not exist", k.display());
    }
    let signing = sign
        .as_ref()
        .map(|(key, legacy)| wisp_host::oci::push::Signing {
            key,
            legacy: *legacy,
        });
    let pushed = wisp_host::oci::push::push(&settings, &bytes, &r, signing).await?;
    println!("pushed {r}@{}", pushed.digest);
    if let Some(b) = pushed.bundle {
        println!("signed: Sigstore bundle {}@{b}", r.repo_path());
    }
    if let Some(t) = pushed.signature_tag {
        println!("signed (legacy): {}:{t}", r.repo_path());
    }
    Ok(())
}

/// `wisp new`: the scaffold, and what to run next.
fn new_plugin(lang: NewLang, name: &str, dir: Option<PathBuf>) -> anyhow::Result<()> {
    use wisp_host::build::{Lang, scaffold};
    let lang = match lang {
        NewLang::Rust => Lang::Rust,
        NewLang::Python => Lang::Python,
        NewLang::Js => Lang::Js,
    };
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    let written = scaffold::new(lang, name, &dir)?;
    println!(
        "wrote the {} plugin {name} in {}:",
        lang.arg(),
        dir.display()
    );
    for f in &written {
        println!("  {}", f.display());
    }
    println!(
        "next:\n  cd {}\n  wisp build\n  wisp test --plugin dist/{name}.wasm fixtures.yaml\n  \
         wisp check dist/{name}.wasm",
        dir.display()
    );
    Ok(())
}

/// `wisp check`: is it a plugin, does its init accept these settings.
fn check(module: &std::path::Path, settings: &str, compile: &CompileArgs) -> anyhow::Result<()> {
    let engine = compile.engine()?;
    let c = check_module(&engine, module, settings_json(settings)?)?;
    println!(
        "ok: {} {} is a wisp:plugin/plugin@{} component ({})",
        c.info.name,
        c.info.version,
        c.abi(),
        module.display()
    );
    if !c.info.informers.is_empty() {
        println!("wants informers: {}", c.info.informers.join(", "));
    }
    use wisp_host::units::human_duration;
    let how = c.report.source.how();
    println!(
        "{how} in {}; instantiate + describe + init in {}; sha256 {}",
        human_duration(c.report.load),
        human_duration(c.report.instantiate),
        c.report.hash
    );
    use wisp_host::plugin::budget;
    let memory = wisp_host::plugin::spec::DEFAULT_MEMORY;
    if let Some(w) = budget::over_limit(
        &[(&c.info.name, memory)],
        budget::Host {
            base: budget::HOST_BASE,
            queues: 0,
        },
        budget::Compiles {
            at_once: 1,
            each: compile.memory()?,
        },
        budget::cgroup_memory_limit(),
    ) {
        eprintln!("warning: {w}");
    }
    Ok(())
}

/// `wisp record`: every notification of the config's informers to `out`, until a signal,
/// `--duration` or (with `--until-synced`) every informer synced. Its informers and the
/// `dir:` watch run under a supervisor, stopped and joined before it returns.
async fn record(
    config: PathBuf,
    out: PathBuf,
    duration: Option<String>,
    until_synced: bool,
    context: Option<String>,
) -> anyhow::Result<()> {
    use app::supervisor::Supervisor;
    let cfg = Config::load(&config)?;
    let limit = optional_duration(duration.as_deref())?;
    let file = std::fs::File::create(&out).with_context(|| format!("--out {}", out.display()))?;
    let sink: Arc<Mutex<Box<dyn std::io::Write + Send>>> =
        Arc::new(Mutex::new(Box::new(std::io::BufWriter::new(file))));
    let count = Arc::new(AtomicU64::new(0));
    let opts = RunOptions {
        context,
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
        out.display()
    );
    Ok(())
}
