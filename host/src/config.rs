//! The configuration file (YAML), validated with errors that name the file, the field path and
//! the problem, e.g. `wisp.yaml: plugins[0].limits.deadline: invalid duration "fast": ...`.
//!
//! ```yaml
//! source: kube                 # kube | dir:./cluster (a directory of manifests acts as the cluster)
//! informers:
//!   - name: pods
//!     apiVersion: v1
//!     kind: Pod
//!     namespaces: [default]    # omitted = all
//!     labelSelector: app=web
//!     fieldSelector: spec.nodeName=n1
//!     resync: 5m
//!     indexes: [label:app, ownerUid, field:spec.nodeName]
//!     fields: [spec.nodeName, status.phase]   # keep only these paths (and the identity)
//!     metadataOnly: false      # true: metadata alone (PartialObjectMetadata from the server)
//!     maxEventSize: 16Mi       # longest watch event read (default); longer: refused, relist
//!     maxListSize: 2Gi         # longest list response read (default)
//!     maxListTotalSize: 2Gi    # a whole list, all pages (default: maxListSize); over: relist
//!     maxListObjects: 1000000  # objects in a whole list, all pages (default)
//! plugins:
//!   - name: image-policy
//!     module: plugins/dist/image_policy.wasm   # relative to this file, or oci://REG/REPO:TAG
//!     informers: [pods]        # what it receives and may read
//!     resync: 1m
//!     settings: { denyLatest: true }
//!     limits: { memory: 32Mi, deadline: 50ms, deadlinePerNotification: 5ms, startupDeadline: 2s, fuel: 100000000 }
//!     onFailure: { policy: retry, retries: 3, backoff: 100ms, quarantineAfter: 20 }
//!     logLevel: info
//!     batch: 64
//!     queue: { max: 100000, maxBytes: 64Mi, overflow: coalesce }   # per informer; see below
//!     reload: { probation: 20, rollbackThreshold: 0.5, replayCache: false }
//!     verdicts: { events: true }   # violations also become Warning Events on the object
//!     actions:                 # nothing is granted by default
//!       grants:
//!         - { verbs: [patch], apiVersion: v1, kind: Pod, namespaces: [default] }
//!         - { verbs: [create], apiVersion: v1, kind: Event }
//!         - { verbs: [apply], apiVersion: v1, kind: ConfigMap, namespaces: [wisp] }
//!       rateLimit: { perSecond: 5, burst: 10 }
//!       dryRun: false
//!       retries: 5
//!       backoff: 200ms
//!       queue: 1000
//! oci: { dockerConfig: /var/run/secrets/wisp/registry/.dockerconfigjson, keys: [cosign.pub], poll: 5m }
//! admin: { listen: 127.0.0.1:9090, tokenFile: /var/run/secrets/wisp/token, metricsAddress: 0.0.0.0:9091 }
//! engine: { cacheDir: /var/cache/wisp, epochTick: 10ms, fuel: false, maxModuleSize: 64Mi }
//! executor: { workers: 4 }     # threads that run the plugins (default: one per core)
//! dir: { maxFileSize: 16Mi }   # source dir: only: larger manifest files are refused (default)
//! audit: { file: /var/log/wisp/audit.jsonl }   # actions also go to the log and to /audit
//! policyReports: { apiGroup: openreports.io, interval: 10s, maxResults: 1000 }   # kube only
//! customResources: { enabled: true, namespaces: [team-a], maxLimits: { memory: 64Mi }, allowedGrants: [],
//!                    maxPerNamespace: 20, maxTotal: 200,   # custom resources taken (defaults)
//!                    modulePaths: [/var/lib/wisp/modules] }   # where a custom resource's path module may be
//! ```
//!
//! `customResources` (off when omitted; `source: kube` only) also runs the plugins of
//! `WispPlugin` / `ClusterWispPlugin` custom resources, confined and capped (see [`custom`] and
//! docs/custom-resources.md).
//!
//! `policyReports` (off when omitted; `source: kube` only) writes the plugins' current
//! violations as policy reports: one per namespace, one for cluster-scoped objects, written by
//! the host (no plugin grant) every `interval` when they changed, at most `maxResults` results
//! each (1 to 10000). `apiGroup` is `openreports.io` (Report, ClusterReport v1alpha1) or
//! `wgpolicyk8s.io` (PolicyReport, ClusterPolicyReport v1alpha2). See docs/policy-reports.md.
//!
//! `executor.workers` is the number of threads that run every plugin's listeners, however many
//! plugins there are (1 to 1024; default the number of cores). Each worker takes a plugin with
//! work, hands it one batch, and moves on to the next, round-robin; a plugin never holds more than
//! one worker, and a plugin waiting to retry a notification holds none. More workers than cores
//! only help when plugins wait (on host calls); fewer leave cores to the informers.
//!
//! `queue` bounds the notifications waiting for a plugin, per informer it receives, so a plugin
//! far slower than the event rate costs bounded memory and never slows the informer or the
//! other plugins. `max` (default 100000, at least 1) is a count of notifications, `maxBytes`
//! (default 64Mi, at least 64Ki) the bytes of the objects they hold; `overflow` says what
//! happens when either is reached:
//! - `coalesce` (default): below the bound nothing changes; once full, the queue keeps one
//!   notification per object, merged to its latest state, until the plugin catches up. A plugin
//!   that acts on the current state of objects loses nothing as long as `max` is at least the
//!   number of objects of the informer; beyond that the oldest is dropped. The default `max`
//!   covers informers of up to 100 000 objects. Once coalescing, only `max` drops (one
//!   notification per object: bytes bounded by the informer's objects).
//! - `dropOldest`: the oldest waiting notification is dropped.
//! - `dropNewest`: the incoming notification is dropped.
//!
//! Whatever the policy, resyncs (which carry no change) go first. Every dropped or merged
//! notification leaves a gap in the plugin's sequence numbers and is counted
//! (`wisp_plugin_queue_dropped_total`, `wisp_plugin_queue_coalesced_total`, and per queue in
//! `/plugins`), with a warning in the log at most every 10 s per queue.
//!
//! Here: the schema and reading it. `units`: durations and byte quantities; `validate`: the
//! checks after reading; `specs`: the plugin specs a config makes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::actions::{ActionGrant, ActionSpec, ActionVerb};
use crate::informer::shared_informer::OnPanic;
use crate::informer::{Overflow, QueueBound, RelistResyncs};
use crate::plugin::spec::{
    DEFAULT_BATCH_MAX, DEFAULT_OVERFLOW, DEFAULT_QUEUE_BYTES, DEFAULT_QUEUE_MAX, DEFAULT_RETRIES,
    MIN_QUEUE_BYTES,
};
use crate::plugin::{FailurePolicy, Limits, LogLevel, OnFailure, PluginSpec};
use wisp_kinds::selector::LabelSelector;

/// A configuration error: file, field path, problem.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("{file}: {path}: {problem}")]
pub struct ConfigError {
    /// The config file.
    pub file: String,
    /// Field path, e.g. `plugins[0].limits.deadline` (or a line:column when the YAML is broken).
    pub path: String,
    /// What is wrong and, where it helps, what is expected.
    pub problem: String,
}

pub mod custom;
mod oci;
mod specs;
mod validate;

pub use custom::{CustomRef, CustomRefusal, CustomResourcesConfig};

pub use crate::units::{Bytes, Dur, MAX_DURATION, ParseError, parse_bytes, parse_duration};

/// The whole file.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// `kube` or `dir:PATH`.
    pub source: String,
    /// Informers.
    pub informers: Vec<InformerConfig>,
    /// Plugins.
    #[serde(default)]
    pub plugins: Vec<PluginConfig>,
    /// Admin server.
    #[serde(default)]
    pub admin: AdminConfig,
    /// Wasm engine.
    #[serde(default)]
    pub engine: EngineSettings,
    /// Audit log of plugins' actions.
    #[serde(default)]
    pub audit: AuditConfig,
    /// The worker threads that run the plugins.
    #[serde(default)]
    pub executor: ExecutorSettings,
    /// The `dir:` source: the largest manifest file it reads.
    #[serde(default)]
    pub dir: crate::source::dir::DirSettings,
    /// Several replicas over Leases (see [`crate::scale`]); omitted: this host is alone.
    #[serde(default)]
    pub sharding: Option<ShardingConfig>,
    /// Verdicts also written as PolicyReports (see [`crate::reports`]); omitted: none.
    #[serde(default)]
    pub policy_reports: Option<PolicyReportsConfig>,
    /// Modules from OCI registries: credentials, trust, signature keys, cache, tag polling.
    #[serde(default)]
    pub oci: OciConfig,
    /// Plugins also from `WispPlugin` / `ClusterWispPlugin` custom resources (see
    /// [`custom`]); omitted: none.
    #[serde(default)]
    pub custom_resources: Option<CustomResourcesConfig>,
    /// Directory of the config file (module and dir paths are relative to it).
    #[serde(skip)]
    pub base_dir: PathBuf,
    /// The file's path as given.
    #[serde(skip)]
    pub file: String,
}

/// One informer.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InformerConfig {
    /// Unique name, referenced by plugins.
    pub name: String,
    /// e.g. `v1`, `apps/v1`.
    pub api_version: String,
    /// e.g. `Pod`.
    pub kind: String,
    /// Namespaces to watch; omitted = all namespaces (or cluster-scoped kinds).
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
    /// Label selector.
    #[serde(default)]
    pub label_selector: Option<String>,
    /// Field selector.
    #[serde(default)]
    pub field_selector: Option<String>,
    /// Resync period of handlers without their own.
    #[serde(default)]
    pub resync: Dur,
    /// Indexes: `label:KEY`, `ownerUid`, `field:a.b.c` (namespace is always indexed).
    #[serde(default)]
    pub indexes: Vec<String>,
    /// Streaming list (`sendInitialEvents`) instead of a paginated list, falling back to a list
    /// when the server refuses it (default true, as client-go 1.35+).
    #[serde(default = "yes")]
    pub watch_list: bool,
    /// Drop `metadata.managedFields` (default true).
    #[serde(default = "yes")]
    pub strip_managed_fields: bool,
    /// Keep only these paths of each object (`spec.nodeName`, `spec.containers.image`, ...)
    /// besides `apiVersion`, `kind` and `metadata`; omitted = the whole object.
    #[serde(default)]
    pub fields: Option<Vec<String>>,
    /// Keep only each object's identity and `metadata` (client-go's metadata informer): from an
    /// API server, lists and watches ask for `PartialObjectMetadata`, so the rest is never sent.
    #[serde(default)]
    pub metadata_only: bool,
    /// Longest watch event the host reads (default 16Mi); a longer one is refused, counted,
    /// and followed by a relist after backoff.
    #[serde(default)]
    pub max_event_size: Option<Bytes>,
    /// Longest list response (one page) the host reads (default 2Gi). A list at
    /// resourceVersion "0" comes whole from the API server's watch cache, whatever the page
    /// size: raise this for informers of more than some 50,000 objects of 10 KiB.
    #[serde(default)]
    pub max_list_size: Option<Bytes>,
    /// Most bytes of objects one whole list holds: all its pages, or a streaming list's
    /// initial events (default: `maxListSize`). Over it the partial list is dropped, the error
    /// names the informer and the cap, it is counted, and the informer relists after backoff.
    #[serde(default)]
    pub max_list_total_size: Option<Bytes>,
    /// Most objects one whole list holds, as `maxListTotalSize` (default 1000000).
    #[serde(default)]
    pub max_list_objects: Option<u64>,
    /// The queue between the reflector and the process loop: `realFIFO` (default, as in
    /// client-go 1.36: every event in arrival order, relists and resyncs atomic),
    /// `realFIFONonAtomic` (client-go 1.33–1.35) or `deltaFIFO` (the legacy queue: deltas merged
    /// per object).
    #[serde(default)]
    pub queue: crate::informer::real_fifo::QueueKind,
    /// What a panic in the informer's own pipeline (an index function, the field mask) does:
    /// `restart` (default: a new list after a backoff of 1 s doubling to 1 min) or `exit` (the
    /// host shuts down with an error, for a supervisor to restart).
    #[serde(default = "restart")]
    pub on_panic: OnPanic,
    /// With `sharding: {mode: shards}`: whether this informer holds only this replica's share
    /// (default true); `false` keeps all of it on every replica (e.g. Namespaces a plugin
    /// looks up).
    #[serde(default = "yes")]
    pub shard: bool,
}

impl InformerConfig {
    /// The size caps of this informer's responses.
    pub fn size_caps(&self) -> crate::source::kube::SizeCaps {
        use crate::source::kube::SizeCaps;
        let to = |b: &Option<Bytes>, d: usize| {
            b.as_ref()
                .map_or(d, |b| usize::try_from(b.0).unwrap_or(usize::MAX))
        };
        SizeCaps {
            watch_event: to(&self.max_event_size, SizeCaps::DEFAULT_WATCH_EVENT),
            list_body: to(&self.max_list_size, SizeCaps::DEFAULT_LIST_BODY),
        }
    }

    /// The bounds of one whole list of this informer: `maxListTotalSize` (default
    /// `maxListSize`, itself 2Gi by default) and `maxListObjects`.
    pub fn list_caps(&self) -> crate::informer::lister_watcher::ListCaps {
        use crate::informer::lister_watcher::ListCaps;
        ListCaps {
            bytes: self
                .max_list_total_size
                .as_ref()
                .or(self.max_list_size.as_ref())
                .map_or(ListCaps::DEFAULT_BYTES, |b| b.0),
            objects: self.max_list_objects.unwrap_or(ListCaps::DEFAULT_OBJECTS),
        }
    }
}

fn yes() -> bool {
    true
}

fn restart() -> OnPanic {
    OnPanic::RESTART
}

/// Limits of a plugin.
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LimitsConfig {
    /// Memory cap.
    pub memory: Option<Bytes>,
    /// Deadline per call (of one notification).
    pub deadline: Option<Dur>,
    /// Added to the deadline per notification of a batch after the first.
    pub deadline_per_notification: Option<Dur>,
    /// Limit of start-up (instantiate, describe, init, restore together).
    pub startup_deadline: Option<Dur>,
    /// Fuel per call.
    pub fuel: Option<u64>,
}

/// Failure policy name.
#[derive(Debug, Deserialize, Clone, Copy, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum PolicyName {
    /// Skip the failed notification.
    #[default]
    Skip,
    /// Retry it.
    Retry,
}

/// Failure handling of a plugin.
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OnFailureConfig {
    /// `skip` or `retry`.
    #[serde(default)]
    pub policy: PolicyName,
    /// Retries (for `retry`; default 3).
    pub retries: Option<u32>,
    /// First retry wait (default 100ms).
    pub backoff: Option<Dur>,
    /// Quarantine after this many failures in a row (default 20; 0 = never).
    pub quarantine_after: Option<u32>,
}

pub use crate::oci::OciConfig;

/// One plugin.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginConfig {
    /// Unique name.
    pub name: String,
    /// Component file, relative to the config file, or `oci://REGISTRY/REPO:TAG` /
    /// `oci://REGISTRY/REPO@sha256:DIGEST` (see [`crate::oci`]).
    pub module: PathBuf,
    /// Informers it receives and may read.
    pub informers: Vec<String>,
    /// Resync period of its listeners.
    #[serde(default)]
    pub resync: Dur,
    /// Whether a relist's unchanged objects reach it as resync updates while its own resync is
    /// not due: `deliver` (default, as client-go) or `skip`.
    #[serde(default)]
    pub relist_resyncs: RelistResyncs,
    /// Settings for its `init` (any YAML, passed as JSON).
    #[serde(default)]
    pub settings: Option<serde_json::Value>,
    /// Limits.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Failure handling.
    #[serde(default)]
    pub on_failure: OnFailureConfig,
    /// Lowest level of its logs kept.
    #[serde(default)]
    pub log_level: LogLevel,
    /// Largest batch per call (default 64).
    #[serde(default)]
    pub batch: Option<usize>,
    /// Bound of each of its queues and what happens beyond it.
    #[serde(default)]
    pub queue: QueueConfig,
    /// Hot reload: probation and rollback.
    #[serde(default)]
    pub reload: ReloadConfig,
    /// Policy verdicts.
    #[serde(default)]
    pub verdicts: VerdictsConfig,
    /// Changes to the cluster the plugin may ask for.
    #[serde(default)]
    pub actions: ActionsConfig,
}

/// What the host does with a plugin's verdicts.
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VerdictsConfig {
    /// Record each new or changed violation as a Warning Event on the object (default false).
    /// The Events are the plugin's actions: they need its `create` grant on v1 Event and
    /// take tokens of its rate limit.
    #[serde(default)]
    pub events: bool,
}

/// A token bucket.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RateLimitConfig {
    /// Refill rate, actions per second.
    pub per_second: f64,
    /// Bucket size: actions at once.
    pub burst: u32,
}

/// A plugin's actions: grants (none by default), rate limit, dry-run, retries.
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ActionsConfig {
    /// What it may do: verbs on a kind, optionally only in some namespaces.
    #[serde(default)]
    pub grants: Vec<ActionGrant>,
    /// Default 5 per second, burst 10.
    pub rate_limit: Option<RateLimitConfig>,
    /// Log and audit actions without sending them (default false).
    #[serde(default)]
    pub dry_run: bool,
    /// Further attempts on conflict, 429, 5xx (default 5).
    pub retries: Option<u32>,
    /// First retry wait, doubled each time (default 200ms).
    pub backoff: Option<Dur>,
    /// Most actions waiting to be sent (default 1000).
    pub queue: Option<usize>,
}

/// How replicas share the work.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ShardingMode {
    /// One replica, the Lease holder, runs the plugins; the others keep warm caches.
    Leader,
    /// Every replica a membership Lease; the hash space split among members; each replica lists,
    /// watches and delivers its part.
    Shards,
}

/// `sharding:`: replicas coordinated through a `coordination.k8s.io/v1` Lease.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ShardingConfig {
    pub mode: ShardingMode,
    /// The Lease's name (default `wisp`).
    #[serde(default)]
    pub lease_name: Option<String>,
    /// The Lease's namespace (default: `$POD_NAMESPACE`, else `default`).
    #[serde(default)]
    pub lease_namespace: Option<String>,
    /// This replica's name in the Lease (default: `$POD_NAME`, else the host name and a
    /// random suffix).
    #[serde(default)]
    pub identity: Option<String>,
    /// How long a Lease holds without renewal (default 15s, as client-go).
    #[serde(default)]
    pub lease_duration: Option<Dur>,
    /// How long the holder keeps trying to renew before it stops acting (default 10s).
    #[serde(default)]
    pub renew_deadline: Option<Dur>,
    /// Time between tries (default 2s, jittered by up to 1.2x when acquiring).
    #[serde(default)]
    pub retry_period: Option<Dur>,
    /// `mode: shards`: hash `uid` (default) or `namespace`.
    #[serde(default)]
    pub shard_by: crate::scale::shards::ShardField,
}

impl ShardingConfig {
    /// The Lease settings in force (defaults filled from the environment; without an identity
    /// or `$POD_NAME`, each call picks a new random suffix).
    pub fn lease(&self) -> crate::scale::lease::LeaseSettings {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let identity = self
            .identity
            .clone()
            .or_else(|| env("POD_NAME"))
            .unwrap_or_else(|| {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
                    .or_else(|| env("HOSTNAME"))
                    .unwrap_or_else(|| "wisp".into());
                use rand::Rng;
                format!(
                    "{}-{:08x}",
                    host.to_ascii_lowercase(),
                    rand::rng().random::<u32>()
                )
            });
        crate::scale::lease::LeaseSettings {
            namespace: self
                .lease_namespace
                .clone()
                .or_else(|| env("POD_NAMESPACE"))
                .unwrap_or_else(|| "default".into()),
            name: self.lease_name.clone().unwrap_or_else(|| "wisp".into()),
            identity,
            lease_duration: self.lease_duration.map_or(Duration::from_secs(15), |d| d.0),
            renew_deadline: self.renew_deadline.map_or(Duration::from_secs(10), |d| d.0),
            retry_period: self.retry_period.map_or(Duration::from_secs(2), |d| d.0),
        }
    }
}

pub use crate::reports::PolicyReportsConfig;

/// The audit log of actions.
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuditConfig {
    /// Also append each entry as a JSON line to this file (relative to the config file).
    pub file: Option<PathBuf>,
}

/// The bound of a plugin's queues (see the module docs).
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct QueueConfig {
    /// Most notifications waiting per informer (default 100000).
    pub max: Option<usize>,
    /// Most bytes of notifications waiting per informer (default 64Mi, at least 64Ki): past
    /// it a `coalesce` queue keeps one notification per object, the others drop.
    pub max_bytes: Option<Bytes>,
    /// `coalesce` (default), `dropOldest` or `dropNewest`.
    pub overflow: Option<Overflow>,
}

/// How a reloaded version is judged.
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReloadConfig {
    /// Notifications a new version is on probation for (default 20; 0 = no rollback).
    pub probation: Option<u32>,
    /// Fraction of failures during probation above which it is rolled back (default 0.5).
    pub rollback_threshold: Option<f64>,
    /// Send every cached object to the new version after a reload (default false).
    #[serde(default)]
    pub replay_cache: bool,
}

/// Admin server.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AdminConfig {
    /// Listen address (`host:port`); empty string = no admin server.
    pub listen: String,
    /// File holding the bearer token that `/plugins`, `/verdicts`, `/audit` and the reloads
    /// require (relative to the config file). Without it those endpoints are served only on a
    /// loopback `listen` address.
    #[serde(default)]
    pub token_file: Option<String>,
    /// A second address serving only `/metrics`, `/healthz` and `/readyz` (no token needed),
    /// e.g. `0.0.0.0:9091` while `listen` stays on 127.0.0.1.
    #[serde(default)]
    pub metrics_address: Option<String>,
    /// Connections each server (admin, metrics) holds open at once (default 128): past it the
    /// oldest without a request in flight is closed, and when every one has a request in flight
    /// a reserve of 16 answers one request each (`/healthz`) within 2 s.
    #[serde(default)]
    pub max_connections: Option<u32>,
    /// From a request's first byte to the end of its headers (default 10s): a slower peer is
    /// disconnected.
    #[serde(default)]
    pub header_read_timeout: Option<Dur>,
    /// A connection with no request in flight and no byte for this long is closed (default 30s).
    #[serde(default)]
    pub idle_timeout: Option<Dur>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:9090".into(),
            token_file: None,
            metrics_address: None,
            max_connections: None,
            header_read_timeout: None,
            idle_timeout: None,
        }
    }
}

/// Wasm engine settings.
#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EngineSettings {
    /// Precompiled module cache (default `~/.cache/wisp/modules`).
    pub cache_dir: Option<PathBuf>,
    /// Epoch tick (default 10ms).
    pub epoch_tick: Option<Dur>,
    /// Fuel metering.
    #[serde(default)]
    pub fuel: bool,
    /// How much CPU time one module's compile may take (default 120s; its wall clock is
    /// bounded at 10 times it): a module over it is refused (the start fails; a reload keeps
    /// the running version).
    pub compile_timeout: Option<Dur>,
    /// How much address space one module's compile may take (default 1Gi, at least 128Mi): a
    /// module over it is refused as one over `compileTimeout` is. Each compile runs in a child
    /// process of `wisp`, killed at the first bound it passes.
    pub compile_memory: Option<Bytes>,
    /// The first-load tier (default true): a module of 4 MiB or more (the Python and
    /// JavaScript plugins) not in the module cache is compiled with Winch, starts at once, and
    /// is moved onto the Cranelift code by a reload when its compile in the background lands.
    pub first_load_tier: Option<bool>,
    /// The largest module file read (default 64Mi, or `oci.maxModuleSize` when that is
    /// larger): a larger one is refused before it is read ([`Config::max_module_size`]).
    pub max_module_size: Option<Bytes>,
}

/// The shared executor that runs the plugins' listeners.
#[derive(Debug, Deserialize, Clone, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExecutorSettings {
    /// Worker threads (default: the number of cores).
    pub workers: Option<usize>,
}

impl ExecutorSettings {
    /// The number of workers in force.
    pub fn workers(&self) -> usize {
        self.workers
            .unwrap_or_else(crate::informer::executor::default_workers)
    }
}

/// Where objects come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    /// The Kubernetes API (kubeconfig or in-cluster).
    Kube,
    /// A directory of manifests.
    Dir(PathBuf),
}

/// An index specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexSpec {
    /// `label:KEY`: by the value of a label; index name `label:KEY`.
    Label(String),
    /// `ownerUid`: by owner uid.
    OwnerUid,
    /// `field:a.b.c`: by a string field; index name `field:a.b.c`.
    Field(String),
}

/// An index name that is none of `label:KEY`, `ownerUid`, `field:a.b.c` (the name as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid index {0:?}: expected label:KEY, ownerUid or field:a.b.c")]
pub struct IndexSpecError(pub String);

impl IndexSpec {
    /// Parses `label:KEY`, `ownerUid`, `field:a.b.c`.
    pub fn parse(s: &str) -> Result<Self, IndexSpecError> {
        if s == "ownerUid" {
            return Ok(Self::OwnerUid);
        }
        if let Some(k) = s.strip_prefix("label:").filter(|k| !k.is_empty()) {
            return Ok(Self::Label(k.to_owned()));
        }
        if let Some(f) = s
            .strip_prefix("field:")
            .filter(|f| !f.is_empty() && !f.split('.').any(str::is_empty))
        {
            return Ok(Self::Field(f.to_owned()));
        }
        Err(IndexSpecError(s.to_owned()))
    }

    /// The values an object has in this index.
    pub fn func(self) -> crate::informer::IndexFunc {
        use crate::informer::indexer::{index_by_json_pointer, index_by_label, index_by_owner_uid};
        match self {
            IndexSpec::Label(k) => index_by_label(k),
            IndexSpec::OwnerUid => index_by_owner_uid(),
            IndexSpec::Field(path) => index_by_json_pointer(format!("/{}", path.replace('.', "/"))),
        }
    }
}

impl Config {
    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: file.clone(),
            path: "(file)".into(),
            problem: format!("cannot read: {e}"),
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::parse(&text, &file, &base)
    }

    /// Parses and validates config text; `file` names it in errors, `base_dir` resolves paths.
    pub fn parse(text: &str, file: &str, base_dir: &Path) -> Result<Self, ConfigError> {
        let err = |path: String, problem: String| ConfigError {
            file: file.to_owned(),
            path,
            problem,
        };
        let mut cfg: Config = wisp_kinds::yaml::from_str_at_path(text).map_err(|(path, e)| {
            // `.` is the top level; so is an empty path, and `?`, a top-level key that did not
            // read as a name (the text `?`: a null key).
            let path = if path == "." || path.is_empty() || path == "?" {
                "(top level)".to_owned()
            } else {
                path
            };
            err(path, e.to_string())
        })?;
        cfg.base_dir = base_dir.to_path_buf();
        cfg.file = file.to_owned();
        cfg.validate()?;
        Ok(cfg)
    }

    fn error(&self, path: impl Into<String>, problem: impl Into<String>) -> ConfigError {
        ConfigError {
            file: self.file.clone(),
            path: path.into(),
            problem: problem.into(),
        }
    }

    /// Resolves a path relative to the config file.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.base_dir.join(p)
        }
    }

    /// The source.
    pub fn source_kind(&self) -> Result<SourceKind, ConfigError> {
        match self.source.as_str() {
            "kube" => Ok(SourceKind::Kube),
            s => match s.strip_prefix("dir:") {
                Some(p) if !p.is_empty() => Ok(SourceKind::Dir(self.resolve(Path::new(p)))),
                _ => Err(self.error(
                    "source",
                    format!("invalid source {s:?}: expected `kube` or `dir:PATH`"),
                )),
            },
        }
    }
}

#[cfg(test)]
mod tests;
