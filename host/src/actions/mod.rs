//! Automation actions: changes the host makes to the cluster on a plugin's behalf.
//!
//! A plugin asks through the WIT `actions` interface; [`PluginActions::request`] checks, in this
//! order, that the request is well formed ([`validate`]: names, namespaces, keys as the API
//! server validates them), that the plugin's config grants the verb on that kind in that
//! namespace, that the host has an API server, and the plugin's token bucket; an Event identical
//! to one sent lately becomes a count patch of that one ([`events`]); then, in dry-run mode, it
//! logs and audits what would be done, and otherwise queues the action. The Events the host
//! makes for a plugin (its verdicts') go the same way: they need its grant and its tokens. A
//! plugin's actions are sent in order by one task per plugin ([`worker`]), with retries and
//! backoff on conflict, 429 and 5xx, and each outcome is audited ([`audit`]). Nothing is sent for
//! a refused action. A metadata patch is conditional on the resourceVersion the plugin's cache
//! holds when it asks: if the object changed since, the 409 is final (the plugin hears of the
//! change through its informer), and the plugin's own earlier patches do not count as a change.
//!
//! - [`spec`]: what a plugin may do (grants, rate, retries); [`request`]: the actions and the
//!   bodies made from what a plugin asks; [`gate`]: the checks an action passes before it is
//!   queued; [`sender`]: sending in order with retries, preconditions and audit.
//! - [`ratelimit`]: the token bucket; [`audit`]: the audit log; [`kube`]: the sink that sends
//!   actions with `kube::Client`; [`lifecycle`]: draining the senders at shutdown.

pub mod audit;
pub mod events;
pub mod gate;
pub mod kube;
pub mod lifecycle;
pub mod ratelimit;
pub mod request;
pub mod sender;
pub mod spec;
pub mod target;
pub mod validate;

use std::sync::Arc;

pub use self::gate::PluginActions;
pub use self::request::{
    Accepted, Action, ActionBody, ActionError, apply_target, event_body, metadata_patch,
};
pub use self::sender::{ActionSink, SendError, Sender, Sent, worker};
pub use self::spec::{ActionGrant, ActionSpec, ActionVerb};
pub use self::target::Target;
pub use self::validate::InvalidAction;

use self::audit::AuditLog;
use crate::policy::VerdictStore;

/// What came of an action, as a plugin's counters count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// Refused over the rate limit.
    RateLimited,
    /// Refused: malformed, no API server, queue full.
    Refused,
    /// Refused: not granted (a refusal and a denial).
    NotGranted,
    /// Logged and audited, not sent.
    DryRun,
    /// The API server took it.
    Applied,
    /// The API server refused it, or it was never sent.
    Failed,
}

/// What a plugin's actions tell the rest of the host about the plugin: counts, its version (for
/// the audit log), lines for its own log and its last error. The plugin's status keeps them;
/// the actions know nothing else of the plugin.
pub trait ActionReport: Send + Sync + 'static {
    /// The version the plugin gives in its `describe`.
    fn version(&self) -> String;
    /// Counts one action that came to `what`.
    fn count(&self, what: Counted);
    /// A line for the plugin's own log (what the host refused it).
    fn log(&self, line: String);
    /// Sets the plugin's last error.
    fn last_error(&self, error: String);
}

/// What every plugin's actions and verdicts share: the verdict store, the sink (none without an
/// API server), the audit log, and the runtime the senders run on.
#[derive(Clone)]
pub struct HostServices {
    /// Current policy verdicts.
    pub verdicts: Arc<VerdictStore>,
    /// Where actions are sent; `None`: actions are refused as unavailable.
    pub sink: Option<Arc<dyn ActionSink>>,
    /// The audit log.
    pub audit: Arc<AuditLog>,
    /// Where the per-plugin sender tasks and the refusal summary timers run: the host's
    /// supervisor's [`Tasks`](crate::tasks::Tasks) (named, waited for, a panic reported).
    pub tasks: crate::tasks::Tasks,
    /// The sender tasks and their phase (drained at shutdown).
    pub senders: Arc<lifecycle::Senders>,
    /// What the policy report writer did (with `policyReports`).
    pub reports: Arc<crate::policy::ReportStatus>,
}

impl Default for HostServices {
    /// No API server: a verdict store, an in-memory audit log, actions unavailable.
    fn default() -> Self {
        Self {
            verdicts: Arc::new(VerdictStore::new()),
            sink: None,
            audit: Arc::new(AuditLog::memory()),
            tasks: crate::tasks::Tasks::default(),
            senders: Arc::default(),
            reports: Arc::default(),
        }
    }
}

impl std::fmt::Debug for HostServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostServices")
            .field("verdicts", &self.verdicts.len())
            .field("sink", &self.sink.is_some())
            .finish_non_exhaustive()
    }
}

impl HostServices {
    /// Services that send actions with `sink`, running senders on the current runtime (set
    /// [`HostServices::tasks`] to run them under a supervisor).
    pub fn with_sink(sink: Arc<dyn ActionSink>, audit: Arc<AuditLog>) -> Self {
        Self {
            sink: Some(sink),
            audit,
            ..Self::default()
        }
    }
}

/// A Pod target in namespace `ns` (cluster-wide when `None`), named `p`.
#[cfg(test)]
pub(crate) fn test_pod(ns: Option<&str>) -> Target {
    Target {
        api_version: "v1".into(),
        kind: "Pod".into(),
        namespace: ns.map(Into::into),
        name: "p".into(),
    }
}
