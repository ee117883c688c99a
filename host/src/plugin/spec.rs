//! What the host needs to run one plugin: module, grants, settings, limits, failure policy.
//! (The YAML config maps onto this.)

use std::path::PathBuf;
use std::time::Duration;

use crate::informer::{Overflow, QueueBound};

/// Default deadline of one call into a plugin (CPU time of its thread).
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(50);
/// Default time added to a call's deadline for each notification of its batch after the first.
pub const DEFAULT_DEADLINE_PER_NOTIFICATION: Duration = Duration::from_millis(5);
/// Default limit of a plugin's start-up: instantiation, `describe`, `init` (and `restore` after
/// a reload) together. Interpreted plugins (Python, JavaScript) spend ~15 ms of CPU just to
/// instantiate, more than a tight call deadline.
pub const DEFAULT_STARTUP_DEADLINE: Duration = Duration::from_secs(2);
/// Default memory budget of a plugin instance (all its linear memories and tables).
pub const DEFAULT_MEMORY: u64 = 64 * 1024 * 1024;
/// Default bound of each of a plugin's queues: room for one notification per object of an
/// informer of 100 000 objects (a large cluster's pods), so that with [`DEFAULT_OVERFLOW`] a
/// plugin that falls behind still ends with every object's final state. At worst the queue
/// keeps alive one superseded version per entry, besides the objects the cache holds anyway.
pub const DEFAULT_QUEUE_MAX: usize = 100_000;
/// Default bound in bytes of each of a plugin's queues: a plugin that falls behind by this
/// much (some 10,000 notifications of typical pods) gets its notifications coalesced per
/// object from then on (or, with another policy, loses the oldest), so a slow plugin's queue
/// does not grow the host's memory with every superseded version of every object.
pub const DEFAULT_QUEUE_BYTES: usize = 64 << 20;
/// The least `queue.maxBytes` accepted.
pub const MIN_QUEUE_BYTES: u64 = 64 << 10;
/// Default overflow policy: coalesce (a plugin that keeps up sees every notification; one that
/// falls behind gets the latest state of each object, not a random subset of events).
pub const DEFAULT_OVERFLOW: Overflow = Overflow::Coalesce;

/// The largest batch a plugin gets per call unless its config says otherwise.
pub const DEFAULT_BATCH_MAX: usize = 64;
/// The default of `onFailure.retries` (policy `retry`).
pub const DEFAULT_RETRIES: u32 = 3;

/// Resource limits of one plugin instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Memory budget of one instance, in bytes: all its linear memories and table elements
    /// together, from instantiation on (see `state::MemoryLimiter`).
    pub memory: u64,
    /// Deadline of one call of one notification: CPU time of the thread running it plus time
    /// blocked in WASI calls, checked at epoch ticks (so to one tick), with a wall-clock cap of
    /// 20 times this (at least 1 s); see `instance::deadline_check` and `clock`. A call of a
    /// batch of n notifications has [`Limits::call_deadline`]`(n)`.
    pub deadline: Duration,
    /// Added to `deadline` for each notification of a batch after the first.
    pub deadline_per_notification: Duration,
    /// Limit of start-up: instantiation, `describe`, `init` and, after a reload, `restore`,
    /// together; measured and enforced as `deadline` is.
    pub startup_deadline: Duration,
    /// Fuel per call (instructions, roughly); `None` = unlimited. Needs an engine with fuel on.
    pub fuel: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory: DEFAULT_MEMORY,
            deadline: DEFAULT_DEADLINE,
            deadline_per_notification: DEFAULT_DEADLINE_PER_NOTIFICATION,
            startup_deadline: DEFAULT_STARTUP_DEADLINE,
            fuel: None,
        }
    }
}

impl Limits {
    /// The deadline of a call of `n` notifications: `deadline + (n - 1) ×
    /// deadline_per_notification` (`deadline` for calls of one, and for `describe`, `snapshot`
    /// ...). A plugin that spins is still cut within that, and its batch's notifications then
    /// go one by one, each within `deadline`.
    pub fn call_deadline(&self, n: usize) -> Duration {
        let more = u32::try_from(n.saturating_sub(1)).unwrap_or(u32::MAX);
        self.deadline_per_notification
            .checked_mul(more)
            .and_then(|extra| self.deadline.checked_add(extra))
            .unwrap_or(Duration::MAX)
    }
}

/// What happens to a notification the plugin failed (error outcome, trap, deadline, OOM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Count it and move on.
    Skip,
    /// Deliver it again, alone, up to `retries` more times, waiting `backoff`, doubled each time.
    Retry {
        /// Further attempts after the first.
        retries: u32,
        /// Wait before the first retry.
        backoff: Duration,
    },
}

/// Failure handling of a plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnFailure {
    /// Per-notification policy.
    pub policy: FailurePolicy,
    /// Stop delivering to the plugin after this many notifications failed in a row (0 = never).
    pub quarantine_after: u32,
}

impl Default for OnFailure {
    fn default() -> Self {
        Self {
            policy: FailurePolicy::Skip,
            quarantine_after: 20,
        }
    }
}

/// Log levels a plugin may log at (in the config: `trace` ... `error`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Very detailed.
    Trace,
    /// Debugging.
    Debug,
    /// Normal.
    #[default]
    Info,
    /// Something looks wrong.
    Warn,
    /// Something failed.
    Error,
}

impl LogLevel {
    /// As in the config: `trace` ... `error`.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// One plugin to run.
#[derive(Clone, Debug)]
pub struct PluginSpec {
    /// Unique name (from the config): in logs, metrics and errors.
    pub name: String,
    /// Path of the component (`.wasm`).
    pub module: PathBuf,
    /// Whether a link at the module path's last component is followed: yes for the config
    /// file's and the command line's paths (a ConfigMap mount is links), no for a custom
    /// resource's (the runtime's module file reader applies it).
    pub module_links: crate::files::Links,
    /// Informers it receives and may read through the cache API (its grants).
    pub informers: Vec<String>,
    /// Settings passed to `init`, as JSON.
    pub settings: serde_json::Value,
    /// Resync period of its listeners (0 = none).
    pub resync: Duration,
    /// Whether a relist's unchanged objects reach it as resync updates while its own resync is
    /// not due (default: yes, as client-go).
    pub relist_resyncs: crate::informer::RelistResyncs,
    /// Instance limits.
    pub limits: Limits,
    /// Failure handling.
    pub on_failure: OnFailure,
    /// Lowest level of its log messages that is kept.
    pub log_level: LogLevel,
    /// Largest batch of notifications per call.
    pub batch_max: usize,
    /// Bound and overflow policy of each of its queues (one per informer).
    pub queue: QueueBound,
    /// After a reload, the new version is on probation for this many notifications...
    pub reload_probation: u32,
    /// ...and is rolled back to the previous one when more than this fraction of them fail.
    pub rollback_threshold: f64,
    /// After a reload, send the new version every cached object again (also when its
    /// `describe` asks for it with `replay-on-reload`).
    pub replay_on_reload: bool,
    /// Changes to the cluster it may ask for (none by default), its rate limit and dry-run.
    pub actions: crate::actions::ActionSpec,
    /// Also record each new or changed violation as a Kubernetes Event on the object.
    pub verdict_events: bool,
    /// Where the module came from when it is not a local file (an OCI registry).
    pub origin: Option<ModuleOrigin>,
    /// `Some`: its informers are its own (a custom resource's inline informers), registered
    /// with the manager under this scope; `None`: the host's informers of the config.
    pub informer_scope: Option<String>,
}

/// A module pulled from an OCI registry: what `/plugins` and the logs show of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModuleOrigin {
    /// The reference as configured (`oci://REGISTRY/REPO:TAG`).
    pub reference: String,
    /// The manifest digest it resolved to.
    pub digest: String,
    /// The key file its signature verified under (`None`: signatures not required).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
}

impl PluginSpec {
    /// A spec with defaults: no settings, 50 ms deadline, 64 MiB, skip failures, quarantine after
    /// 20, info logs, batches of 64, queues of 100 000 that coalesce, reload probation of 20
    /// notifications with rollback above 50% failures.
    pub fn new(name: impl Into<String>, module: impl Into<PathBuf>, informers: &[&str]) -> Self {
        Self {
            name: name.into(),
            module: module.into(),
            module_links: crate::files::Links::Follow,
            informers: informers.iter().map(|s| (*s).to_owned()).collect(),
            settings: serde_json::json!({}),
            resync: Duration::ZERO,
            relist_resyncs: crate::informer::RelistResyncs::Deliver,
            limits: Limits::default(),
            on_failure: OnFailure::default(),
            log_level: LogLevel::default(),
            batch_max: DEFAULT_BATCH_MAX,
            queue: QueueBound::bounded(DEFAULT_QUEUE_MAX, DEFAULT_OVERFLOW)
                .with_max_bytes(DEFAULT_QUEUE_BYTES),
            reload_probation: 20,
            rollback_threshold: 0.5,
            replay_on_reload: false,
            actions: crate::actions::ActionSpec::default(),
            verdict_events: false,
            origin: None,
            informer_scope: None,
        }
    }
}
