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
//! - [`ratelimit`]: the token bucket; [`audit`]: the audit log; [`kube`]: the sink that sends
//!   actions with `kube::Client`; [`lifecycle`]: draining the senders at shutdown.

pub mod audit;
pub mod events;
pub mod kube;
pub mod lifecycle;
pub mod ratelimit;
pub mod validate;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;
use serde_json::{Value, json};

use self::audit::{AuditEntry, AuditLog, AuditResult};
use self::events::{Correlated, EventCorrelator};
use self::ratelimit::TokenBucket;
use self::validate::{check_key, check_label_value, check_target};
use crate::plugin::status::{PluginCounters, PluginStatus};
use crate::policy::{VerdictStore, rfc3339};

/// A verb a plugin may be granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionVerb {
    /// Merge patch of labels and annotations.
    Patch,
    /// Server-side apply.
    Apply,
    /// Create (Events).
    Create,
}

impl ActionVerb {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionVerb::Patch => "patch",
            ActionVerb::Apply => "apply",
            ActionVerb::Create => "create",
        }
    }
}

/// One grant: these verbs on this kind, in these namespaces (`None`: any, and cluster-scoped).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ActionGrant {
    /// `patch`, `apply`, `create`.
    pub verbs: Vec<ActionVerb>,
    /// e.g. `v1`, `apps/v1`.
    pub api_version: String,
    /// e.g. `Pod`.
    pub kind: String,
    /// Namespaces; omitted = all namespaces and cluster-scoped objects.
    #[serde(default)]
    pub namespaces: Option<Vec<String>>,
}

impl ActionGrant {
    fn allows(&self, verb: ActionVerb, t: &Target) -> bool {
        self.verbs.contains(&verb)
            && self.api_version == t.api_version
            && self.kind == t.kind
            && match (&self.namespaces, &t.namespace) {
                (None, _) => true,
                (Some(list), Some(ns)) => list.iter().any(|n| n == ns),
                (Some(_), None) => false,
            }
    }
}

/// What a plugin may do to the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct ActionSpec {
    /// Grants; none by default.
    pub grants: Vec<ActionGrant>,
    /// Token bucket refill rate (actions per second).
    pub per_second: f64,
    /// Token bucket size.
    pub burst: u32,
    /// Log and audit, never send.
    pub dry_run: bool,
    /// Further attempts after a retryable failure (conflict, 429, 5xx, unreachable).
    pub retries: u32,
    /// Wait before the first retry, doubled each time (to 30 s at most).
    pub backoff: Duration,
    /// Most actions waiting to be sent.
    pub queue: usize,
}

impl Default for ActionSpec {
    fn default() -> Self {
        Self {
            grants: Vec::new(),
            per_second: 5.0,
            burst: 10,
            dry_run: false,
            retries: 5,
            backoff: Duration::from_millis(200),
            queue: 1000,
        }
    }
}

/// The object an action is about.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// e.g. `v1`.
    pub api_version: String,
    /// e.g. `Pod`.
    pub kind: String,
    /// None for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub enum ActionBody {
    /// Merge patch `{"metadata":{"labels":…,"annotations":…}}` (null removes a key).
    PatchMetadata(Value),
    /// Server-side apply of this object.
    Apply(Value),
    /// Create this Event (the target is its namespace's `events` collection; `name` is the
    /// Event's name).
    CreateEvent(Value),
    /// Count a repeat of an Event already created (the target): merge `patch` (`count`,
    /// `lastTimestamp`) into it, or, if it is gone, create `event` (the whole Event, counted).
    CountEvent {
        /// `{"count": n, "lastTimestamp": t}`.
        patch: Value,
        /// The Event to create if the first one is gone.
        event: Value,
    },
}

impl ActionBody {
    /// The resourceVersion the request is conditional on: a patch's or an apply's
    /// `metadata.resourceVersion` (the API server answers 409 when the object has another).
    pub fn precondition(&self) -> Option<&str> {
        match self {
            ActionBody::PatchMetadata(v) | ActionBody::Apply(v) => v
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str),
            ActionBody::CreateEvent(_) | ActionBody::CountEvent { .. } => None,
        }
    }

    /// The verb a grant must give.
    pub fn verb(&self) -> ActionVerb {
        match self {
            ActionBody::PatchMetadata(_) => ActionVerb::Patch,
            ActionBody::Apply(_) => ActionVerb::Apply,
            ActionBody::CreateEvent(_) | ActionBody::CountEvent { .. } => ActionVerb::Create,
        }
    }
}

/// An action on its way to the API server.
#[derive(Clone, Debug)]
pub struct Action {
    /// Configured plugin name.
    pub plugin: String,
    /// Plugin version.
    pub version: String,
    /// The object (for an Event: the Event itself).
    pub target: Target,
    /// What to do.
    pub body: ActionBody,
}

/// Why an action was refused (mirrors the WIT `action-error`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// No grant covers it.
    #[error("not granted: {0}")]
    NotGranted(String),
    /// Over the rate limit.
    #[error("rate limited: {0}")]
    RateLimited(String),
    /// Malformed.
    #[error("invalid: {0}")]
    Invalid(String),
    /// Too many waiting.
    #[error("queue full: {0}")]
    QueueFull(String),
    /// No API server.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// How an accepted action was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// Queued to be sent.
    Queued,
    /// Logged and audited only.
    DryRun,
}

/// How sending an action failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendError {
    /// HTTP status, when there was a response.
    pub code: Option<u16>,
    /// What the server (or the transport) said.
    pub message: String,
    /// A server-side apply conflict with another field manager (a 409 whose causes are
    /// `FieldManagerConflict`): the same apply will conflict again, so it is not retried.
    pub field_manager_conflict: bool,
    /// Not sent: this replica does not lead (see [`crate::scale`]); never retried.
    pub fenced: bool,
}

impl SendError {
    /// A failure without a response, or with `code` and `message`.
    pub fn new(code: Option<u16>, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field_manager_conflict: false,
            fenced: false,
        }
    }

    /// Not sent because this replica does not lead, with why.
    pub fn fenced(why: impl Into<String>) -> Self {
        Self {
            fenced: true,
            ..Self::new(None, format!("not sent: {}", why.into()))
        }
    }

    /// Conflicts (except field manager conflicts of an apply), too many requests, server errors
    /// and transport errors are worth retrying.
    pub fn retryable(&self) -> bool {
        if self.fenced {
            return false;
        }
        match self.code {
            None => true,
            Some(409) => !self.field_manager_conflict,
            Some(c) => c == 429 || c >= 500,
        }
    }
}

/// What the API server answered to an action it took.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    /// The object's resourceVersion after the write, when the answer carried one.
    pub resource_version: Option<String>,
}

impl Sent {
    /// The audit log's detail of an applied action.
    pub fn detail(&self) -> String {
        match &self.resource_version {
            Some(rv) => format!("resourceVersion {rv}"),
            None => "done".into(),
        }
    }
}

/// Sends actions to an API server.
pub trait ActionSink: Send + Sync + 'static {
    /// Sends one action.
    fn send<'a>(
        &'a self,
        action: &'a Action,
    ) -> Pin<Box<dyn Future<Output = Result<Sent, SendError>> + Send + 'a>>;
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
    /// Runtime of the per-plugin sender tasks.
    pub runtime: Option<tokio::runtime::Handle>,
    /// The sender tasks and their phase (drained at shutdown).
    pub senders: Arc<lifecycle::Senders>,
}

impl Default for HostServices {
    /// No API server: a verdict store, an in-memory audit log, actions unavailable.
    fn default() -> Self {
        Self {
            verdicts: Arc::new(VerdictStore::new()),
            sink: None,
            audit: Arc::new(AuditLog::memory()),
            runtime: tokio::runtime::Handle::try_current().ok(),
            senders: Arc::default(),
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
    /// Services that send actions with `sink`, running senders on the current runtime.
    pub fn with_sink(sink: Arc<dyn ActionSink>, audit: Arc<AuditLog>) -> Self {
        Self {
            sink: Some(sink),
            audit,
            ..Self::default()
        }
    }
}

/// The merge patch of labels and annotations (`None` values remove the key), conditional on
/// `resource_version` when given.
pub fn metadata_patch(
    labels: &[(String, Option<String>)],
    annotations: &[(String, Option<String>)],
    resource_version: Option<&str>,
) -> Result<Value, String> {
    if labels.is_empty() && annotations.is_empty() {
        return Err("nothing to patch: no labels and no annotations".into());
    }
    let mut meta = serde_json::Map::new();
    let mut l = serde_json::Map::new();
    for (k, v) in labels {
        check_key(k)?;
        if let Some(v) = v {
            check_label_value(k, v)?;
        }
        l.insert(k.clone(), v.clone().map_or(Value::Null, Value::String));
    }
    let mut a = serde_json::Map::new();
    let mut size = 0;
    for (k, v) in annotations {
        check_key(k)?;
        size += k.len() + v.as_ref().map_or(0, String::len);
        a.insert(k.clone(), v.clone().map_or(Value::Null, Value::String));
    }
    if size > 256 * 1024 {
        return Err("annotations total more than 256 KiB".into());
    }
    if !l.is_empty() {
        meta.insert("labels".into(), Value::Object(l));
    }
    if !a.is_empty() {
        meta.insert("annotations".into(), Value::Object(a));
    }
    if let Some(rv) = resource_version {
        meta.insert("resourceVersion".into(), rv.into());
    }
    Ok(json!({ "metadata": meta }))
}

/// The target of an apply: the manifest's apiVersion, kind, namespace and name.
pub fn apply_target(manifest: &Value) -> Result<Target, String> {
    let obj = manifest
        .as_object()
        .ok_or("the manifest must be a JSON object")?;
    let s = |v: Option<&Value>, what: &str| -> Result<String, String> {
        match v {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            _ => Err(format!("the manifest needs a non-empty string {what}")),
        }
    };
    let meta = obj.get("metadata").and_then(Value::as_object);
    let namespace = match meta.and_then(|m| m.get("namespace")) {
        None | Some(Value::Null) => None,
        Some(v) => Some(s(Some(v), "metadata.namespace")?),
    };
    Ok(Target {
        api_version: s(obj.get("apiVersion"), "apiVersion")?,
        kind: s(obj.get("kind"), "kind")?,
        namespace,
        name: s(meta.and_then(|m| m.get("name")), "metadata.name")?,
    })
}

/// A core/v1 Event about `regarding` (with its uid and resourceVersion when known), reported by
/// `wisp` for `plugin`. Events of cluster-scoped objects go to `default`, as kubectl does.
pub fn event_body(
    plugin: &str,
    regarding: &Target,
    regarding_ids: Option<(String, String)>,
    warning: bool,
    reason: &str,
    message: &str,
) -> Result<(Target, Value), String> {
    check_target(regarding)?;
    if reason.is_empty() || reason.len() > 128 {
        return Err("reason must be 1 to 128 characters".into());
    }
    let mut message = message.to_owned();
    if message.len() > 1024 {
        let mut cut = 1024;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    let now = SystemTime::now();
    let nanos = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let ns = regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    // Kept to 253 characters, as names are: the object's name cut, then the time.
    let mut base = regarding.name.as_str();
    let mut cut = base.len().min(253 - 1 - 32);
    while !base.is_char_boundary(cut) {
        cut -= 1;
    }
    base = &base[..cut];
    let name = format!("{base}.{nanos:x}");
    let mut involved = json!({
        "apiVersion": regarding.api_version,
        "kind": regarding.kind,
        "name": regarding.name,
    });
    if let Some(n) = &regarding.namespace {
        involved["namespace"] = json!(n);
    }
    if let Some((uid, rv)) = regarding_ids {
        involved["uid"] = json!(uid);
        involved["resourceVersion"] = json!(rv);
    }
    let ts = rfc3339(now);
    let body = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": { "name": name, "namespace": ns },
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": if warning { "Warning" } else { "Normal" },
        "source": { "component": format!("wisp/{plugin}") },
        "reportingComponent": "wisp",
        "reportingInstance": format!("wisp/{plugin}"),
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
    });
    Ok((
        Target {
            api_version: "v1".into(),
            kind: "Event".into(),
            namespace: Some(ns),
            name,
        },
        body,
    ))
}

/// One plugin's actions: its grants, rate limit, dry-run switch and sender.
pub struct PluginActions {
    plugin: Arc<str>,
    spec: ActionSpec,
    status: Arc<PluginStatus>,
    services: HostServices,
    bucket: Mutex<TokenBucket>,
    /// Events sent lately, so a repeat counts on the first one instead of making another.
    events: Mutex<EventCorrelator>,
    sender: Mutex<Option<tokio::sync::mpsc::Sender<Action>>>,
}

impl std::fmt::Debug for PluginActions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginActions")
            .field("plugin", &self.plugin)
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl PluginActions {
    /// Actions of `plugin` as `spec` allows, through `services`.
    pub fn new(
        plugin: Arc<str>,
        spec: ActionSpec,
        status: Arc<PluginStatus>,
        services: HostServices,
    ) -> Self {
        let bucket = TokenBucket::new(spec.per_second, spec.burst, Instant::now());
        Self {
            plugin,
            spec,
            status,
            services,
            bucket: Mutex::new(bucket),
            events: Mutex::default(),
            sender: Mutex::new(None),
        }
    }

    /// The shared services (verdict store, audit log).
    pub fn services(&self) -> &HostServices {
        &self.services
    }

    fn version(&self) -> String {
        self.status.plugin_version()
    }

    fn audit(
        &self,
        verb: ActionVerb,
        t: &Target,
        result: AuditResult,
        detail: String,
        attempts: u32,
    ) {
        self.services
            .audit
            .record(self.entry(verb, t, result, detail, attempts));
    }

    /// An audit entry about `t`, written now.
    fn entry(
        &self,
        verb: ActionVerb,
        t: &Target,
        result: AuditResult,
        detail: String,
        attempts: u32,
    ) -> AuditEntry {
        AuditEntry {
            time: rfc3339(SystemTime::now()),
            plugin: self.plugin.to_string(),
            version: self.version(),
            verb: verb.as_str().into(),
            api_version: t.api_version.clone(),
            kind: t.kind.clone(),
            namespace: t.namespace.clone(),
            name: t.name.clone(),
            result,
            detail,
            attempts,
            count: None,
        }
    }

    fn refuse(&self, verb: ActionVerb, t: &Target, e: ActionError) -> ActionError {
        let c = &self.status.counters;
        let reason = match &e {
            ActionError::RateLimited(_) => {
                PluginCounters::add(&c.actions_rate_limited, 1);
                tracing::debug!(target: "wisp::plugin", plugin = %self.plugin, verb = verb.as_str(), kind = %t.kind, name = %t.name, "action refused: rate limited");
                return e;
            }
            ActionError::NotGranted(_) => "not-granted",
            ActionError::Invalid(_) => "invalid",
            ActionError::QueueFull(_) => "queue-full",
            ActionError::Unavailable(_) => "unavailable",
        };
        PluginCounters::add(&c.actions_refused, 1);
        if matches!(e, ActionError::NotGranted(_)) {
            PluginCounters::add(&c.denied, 1);
        }
        let entry = self.entry(verb, t, AuditResult::Refused, e.to_string(), 0);
        // Only the first refusal of a window is logged and audited in full; the others are
        // counted into its summary, so a plugin refused in a loop cannot flood either.
        if self.services.audit.refused(entry, reason) {
            // A window opened: its summary is written when it is over, even if nothing follows.
            if let Some(rt) = &self.services.runtime {
                let audit = self.services.audit.clone();
                rt.spawn(async move {
                    tokio::time::sleep(audit.refusal_window()).await;
                    audit.flush();
                });
            }
            tracing::warn!(target: "wisp::plugin", plugin = %self.plugin, verb = verb.as_str(), kind = %t.kind, namespace = t.namespace.as_deref().unwrap_or(""), name = %t.name, error = %e, "action refused (similar refusals in the next {:?} are counted, then summed up in the audit log)", self.services.audit.refusal_window());
            self.status.logs.push(format!(
                "warn: {} {} {:?} refused: {e}",
                verb.as_str(),
                t.kind,
                t.name
            ));
        } else {
            tracing::debug!(target: "wisp::plugin", plugin = %self.plugin, verb = verb.as_str(), reason, "action refused (counted)");
        }
        e
    }

    /// Checks and takes (queues, or logs in dry-run) an action the plugin asked for.
    pub fn request(
        &self,
        target: Target,
        body: Result<ActionBody, String>,
        verb: ActionVerb,
    ) -> Result<Accepted, ActionError> {
        let body = match body.and_then(|b| check_target(&target).map(|()| b)) {
            Ok(b) => b,
            Err(why) => return Err(self.refuse(verb, &target, ActionError::Invalid(why))),
        };
        if !self.spec.grants.iter().any(|g| g.allows(verb, &target)) {
            let place = match &target.namespace {
                Some(ns) => format!("in namespace {ns:?}"),
                None => "cluster-wide".into(),
            };
            let why = format!(
                "the config grants plugin {:?} no {:?} on {} {} {place}",
                self.plugin,
                verb.as_str(),
                target.api_version,
                target.kind
            );
            return Err(self.refuse(verb, &target, ActionError::NotGranted(why)));
        }
        if self.services.sink.is_none() && !self.spec.dry_run {
            return Err(self.refuse(
                verb,
                &target,
                ActionError::Unavailable(
                    "this host has no API server to act on (its source is not kube)".into(),
                ),
            ));
        }
        let limited = self
            .bucket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(Instant::now());
        if let Err(wait) = limited {
            let why = format!(
                "over {} actions per second (burst {}); next in {wait:?}",
                self.spec.per_second, self.spec.burst
            );
            return Err(self.refuse(verb, &target, ActionError::RateLimited(why)));
        }
        let (target, body) = self.correlate(target, body);
        self.take(target, body)
    }

    /// An Event identical to one sent lately becomes a count patch of that one.
    fn correlate(&self, mut target: Target, body: ActionBody) -> (Target, ActionBody) {
        let ActionBody::CreateEvent(mut event) = body else {
            return (target, body);
        };
        let seen = self
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .observe(&mut event, Instant::now());
        match seen {
            Correlated::New => (target, ActionBody::CreateEvent(event)),
            Correlated::Repeat { name, patch } => {
                target.name = name;
                (target, ActionBody::CountEvent { patch, event })
            }
        }
    }

    /// Starts the task that sends this plugin's actions (on first use); `None` without a sink
    /// or a runtime.
    fn spawn_sender(&self) -> Option<tokio::sync::mpsc::Sender<Action>> {
        let sink = self.services.sink.clone()?;
        let rt = self.services.runtime.clone()?;
        let (tx, rx) = tokio::sync::mpsc::channel(self.spec.queue.max(1));
        let task = rt.spawn(worker(
            rx,
            sink,
            Sender {
                audit: self.services.audit.clone(),
                status: self.status.clone(),
                senders: self.services.senders.clone(),
            },
            self.spec.retries,
            self.spec.backoff,
        ));
        self.services.senders.register(task);
        Some(tx)
    }

    fn take(&self, target: Target, body: ActionBody) -> Result<Accepted, ActionError> {
        let verb = body.verb();
        if self.spec.dry_run {
            PluginCounters::add(&self.status.counters.actions_dry_run, 1);
            let detail = match &body {
                ActionBody::PatchMetadata(v)
                | ActionBody::Apply(v)
                | ActionBody::CreateEvent(v)
                | ActionBody::CountEvent { patch: v, .. } => {
                    format!("would send {v}")
                }
            };
            self.audit(verb, &target, AuditResult::DryRun, detail, 0);
            return Ok(Accepted::DryRun);
        }
        if !self.services.senders.is_running() {
            return Err(self.refuse(
                verb,
                &target,
                ActionError::Unavailable("the host is shutting down".into()),
            ));
        }
        let action = Action {
            plugin: self.plugin.to_string(),
            version: self.version(),
            target,
            body,
        };
        let mut sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        if sender.is_none() {
            *sender = self.spawn_sender();
        }
        let Some(tx) = sender.as_ref() else {
            let t = action.target.clone();
            return Err(self.refuse(
                verb,
                &t,
                ActionError::Unavailable("no runtime to send actions on".into()),
            ));
        };
        match tx.try_send(action) {
            Ok(()) => Ok(Accepted::Queued),
            Err(e) => {
                let full = matches!(e, tokio::sync::mpsc::error::TrySendError::Full(_));
                let a = e.into_inner();
                let err = if full {
                    ActionError::QueueFull(format!("{} actions already waiting", self.spec.queue))
                } else {
                    ActionError::Unavailable("the sender stopped".into())
                };
                Err(self.refuse(verb, &a.target, err))
            }
        }
    }
}

/// Where a sender reports: the audit log, the plugin's counters, the host's senders.
pub struct Sender {
    /// The audit log.
    pub audit: Arc<AuditLog>,
    /// The plugin's status (counters, last error).
    pub status: Arc<PluginStatus>,
    /// The host's senders (phase, not-sent count).
    pub senders: Arc<lifecycle::Senders>,
}

impl Sender {
    fn record(&self, action: &Action, result: AuditResult, detail: String, attempts: u32) {
        self.audit.record(AuditEntry {
            time: rfc3339(SystemTime::now()),
            plugin: action.plugin.clone(),
            version: action.version.clone(),
            verb: action.body.verb().as_str().into(),
            api_version: action.target.api_version.clone(),
            kind: action.target.kind.clone(),
            namespace: action.target.namespace.clone(),
            name: action.target.name.clone(),
            result,
            detail,
            attempts,
            count: None,
        });
    }

    fn not_sent(&self, action: &Action, detail: &str, attempts: u32) {
        PluginCounters::add(&self.status.counters.actions_failed, 1);
        self.senders.count_not_sent();
        tracing::warn!(plugin = %action.plugin, verb = action.body.verb().as_str(), kind = %action.target.kind, name = %action.target.name, "{detail}");
        self.record(action, AuditResult::NotSent, detail.to_owned(), attempts);
    }
}

/// A 409 to a request conditional on a resourceVersion: the object changed since the plugin's
/// view of it, and the same request would conflict again.
fn stale(action: &Action, e: &SendError) -> bool {
    e.code == Some(409) && action.body.precondition().is_some()
}

/// Most objects whose own-write chains a sender remembers, and most versions per chain.
const OWN_WRITE_OBJECTS: usize = 4096;
const OWN_WRITE_VERSIONS: usize = 16;

/// The versions of objects that differ from their latest only by this plugin's own patches.
///
/// A plugin's patches are conditional on the version its cache holds when it asks, and are sent
/// after its call returns: the second of two patches to one object in one call names the version
/// the first one replaced. The sender knows which versions its own writes made, so it sends such
/// a patch on condition of the latest one instead. A write by anyone else in between still makes
/// it conflict.
#[derive(Default)]
struct OwnWrites {
    chains: std::collections::HashMap<Target, std::collections::VecDeque<String>>,
}

impl OwnWrites {
    /// `action`, conditional on the latest version of its own-write chain when it names an
    /// earlier one.
    fn rebase(&self, mut action: Action) -> Action {
        let ActionBody::PatchMetadata(patch) = &mut action.body else {
            return action;
        };
        let Some(chain) = self.chains.get(&action.target) else {
            return action;
        };
        let Some(Value::String(rv)) = patch.pointer_mut("/metadata/resourceVersion") else {
            return action;
        };
        if let Some(latest) = chain.back()
            && chain.contains(rv)
        {
            rv.clone_from(latest);
        }
        action
    }

    /// Notes what an applied action made of its target.
    fn wrote(&mut self, action: &Action, sent: &Sent) {
        let (Some(base), Some(now)) = (action.body.precondition(), &sent.resource_version) else {
            // A write on no condition leaves no version known to be the plugin's own.
            self.forget(&action.target);
            return;
        };
        if self.chains.len() >= OWN_WRITE_OBJECTS && !self.chains.contains_key(&action.target) {
            self.chains.clear();
        }
        let chain = self.chains.entry(action.target.clone()).or_default();
        if chain.back().map(String::as_str) != Some(base) {
            chain.clear();
            chain.push_back(base.to_owned());
        }
        chain.push_back(now.clone());
        if chain.len() > OWN_WRITE_VERSIONS {
            chain.pop_front();
        }
    }

    fn forget(&mut self, target: &Target) {
        self.chains.remove(target);
    }
}

/// Sends one plugin's actions in order, retrying retryable failures with doubling backoff (to
/// 30 s), and audits each outcome. Ends when the plugin's [`PluginActions`] is dropped, or, at
/// shutdown, once the queue is empty; when the grace period runs out it sends nothing more and
/// audits every action left (the one in flight included) as not sent.
pub async fn worker(
    mut rx: tokio::sync::mpsc::Receiver<Action>,
    sink: Arc<dyn ActionSink>,
    out: Sender,
    retries: u32,
    backoff: Duration,
) {
    use lifecycle::{Phase, reached};
    let mut phase = out.senders.subscribe();
    let mut closed = false;
    let mut own = OwnWrites::default();
    loop {
        let action = tokio::select! {
            biased;
            a = rx.recv() => match a {
                Some(a) => a,
                None => break,
            },
            _ = reached(&mut phase, |p| *p != Phase::Running), if !closed => {
                // Shutting down: take nothing new, send what is queued.
                rx.close();
                closed = true;
                continue;
            }
        };
        if *phase.borrow() == Phase::Abandoned {
            out.not_sent(
                &action,
                "not sent: the host shut down and its grace period ran out first",
                0,
            );
            continue;
        }
        let action = own.rebase(action);
        let mut wait = backoff;
        let mut attempts = 0;
        let outcome = loop {
            attempts += 1;
            let sent = tokio::select! {
                r = sink.send(&action) => r,
                _ = reached(&mut phase, |p| *p == Phase::Abandoned) => break None,
            };
            match sent {
                Ok(sent) => break Some(Ok(sent)),
                Err(e) if stale(&action, &e) => break Some(Err(e)),
                Err(e) if e.retryable() && attempts <= retries => {
                    tracing::debug!(plugin = %action.plugin, error = %e.message, code = ?e.code, attempt = attempts, "action failed; retrying");
                    let jitter = rand::random::<f64>() * 0.2 + 0.9;
                    tokio::select! {
                        _ = tokio::time::sleep(wait.mul_f64(jitter)) => {}
                        _ = reached(&mut phase, |p| *p == Phase::Abandoned) => break None,
                    }
                    wait = (wait * 2).min(Duration::from_secs(30));
                }
                Err(e) => break Some(Err(e)),
            }
        };
        let (result, detail) = match outcome {
            None => {
                out.not_sent(
                    &action,
                    "not sent: the host's grace period ran out while it was being sent (the API \
                     server may have applied it)",
                    attempts,
                );
                continue;
            }
            Some(Ok(sent)) => {
                PluginCounters::add(&out.status.counters.actions_applied, 1);
                own.wrote(&action, &sent);
                (AuditResult::Applied, sent.detail())
            }
            Some(Err(e)) => {
                PluginCounters::add(&out.status.counters.actions_failed, 1);
                let mut msg = format!(
                    "{}{}",
                    e.code.map(|c| format!("HTTP {c}: ")).unwrap_or_default(),
                    e.message
                );
                if stale(&action, &e) {
                    own.forget(&action.target);
                    msg.push_str(&format!(
                        " (sent on condition of resourceVersion {}, the version the plugin's \
                         cache held: the object changed since, so it is not retried; the plugin \
                         hears of the change through its informer)",
                        action.body.precondition().unwrap_or_default()
                    ));
                }
                out.status.set_last_error(format!(
                    "action {} {} {:?} failed: {msg}",
                    action.body.verb().as_str(),
                    action.target.kind,
                    action.target.name
                ));
                (AuditResult::Failed, msg)
            }
        };
        out.record(&action, result, detail, attempts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: Option<&str>) -> Target {
        Target {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: ns.map(Into::into),
            name: "p".into(),
        }
    }

    #[test]
    fn grants_match_verb_kind_and_namespace() {
        let g = ActionGrant {
            verbs: vec![ActionVerb::Patch],
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespaces: Some(vec!["a".into()]),
        };
        assert!(g.allows(ActionVerb::Patch, &pod(Some("a"))));
        assert!(!g.allows(ActionVerb::Patch, &pod(Some("b"))));
        assert!(!g.allows(ActionVerb::Patch, &pod(None)));
        assert!(!g.allows(ActionVerb::Apply, &pod(Some("a"))));
        let mut cm = pod(Some("a"));
        cm.kind = "ConfigMap".into();
        assert!(!g.allows(ActionVerb::Patch, &cm));
        let any = ActionGrant {
            namespaces: None,
            ..g
        };
        assert!(any.allows(ActionVerb::Patch, &pod(None)));
    }

    #[test]
    fn metadata_patches_check_keys_and_values() {
        let p = metadata_patch(
            &[("team".into(), Some("a".into())), ("old".into(), None)],
            &[("example.com/note".into(), Some("any text: ok".into()))],
            None,
        )
        .unwrap();
        assert_eq!(
            p,
            json!({"metadata": {"labels": {"team": "a", "old": null}, "annotations": {"example.com/note": "any text: ok"}}})
        );
        let p = metadata_patch(&[("team".into(), Some("a".into()))], &[], Some("42")).unwrap();
        assert_eq!(
            p,
            json!({"metadata": {"labels": {"team": "a"}, "resourceVersion": "42"}})
        );
        assert_eq!(ActionBody::PatchMetadata(p).precondition(), Some("42"));
        assert!(metadata_patch(&[], &[], None).is_err());
        for bad in ["", "-a", "a/", "UPPER.com/x", "x/y/z!", &"k".repeat(64)] {
            assert!(
                metadata_patch(&[(bad.into(), Some("v".into()))], &[], None).is_err(),
                "{bad:?}"
            );
        }
        assert!(metadata_patch(&[("k".into(), Some("has space".into()))], &[], None).is_err());
        assert!(metadata_patch(&[("k".into(), Some(String::new()))], &[], None).is_ok());
    }

    #[test]
    fn apply_needs_kind_and_name() {
        let t = apply_target(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}})).unwrap();
        assert_eq!(t.namespace.as_deref(), Some("n"));
        assert!(apply_target(&json!([])).is_err());
        assert!(
            apply_target(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}))
                .is_err()
        );
        assert!(apply_target(&json!({"kind": "ConfigMap", "metadata": {"name": "c"}})).is_err());
    }

    #[test]
    fn events_name_their_object() {
        let (t, body) = event_body(
            "p",
            &pod(Some("a")),
            Some(("u1".into(), "7".into())),
            true,
            "Bad",
            "why",
        )
        .unwrap();
        assert_eq!(
            (t.kind.as_str(), t.namespace.as_deref()),
            ("Event", Some("a"))
        );
        assert!(t.name.starts_with("p."));
        assert_eq!(body["involvedObject"]["uid"], "u1");
        assert_eq!(body["type"], "Warning");
        let (t, _) = event_body("p", &pod(None), None, false, "Ok", "").unwrap();
        assert_eq!(t.namespace.as_deref(), Some("default"));
        assert!(event_body("p", &pod(None), None, false, "", "").is_err());
    }

    /// Actions of plugin `t` in dry-run, granted `verbs` on v1 `kind` in namespace `a`.
    fn dry_run(kind: &str, verbs: &[ActionVerb]) -> (PluginActions, HostServices) {
        let services = HostServices::default();
        let spec = ActionSpec {
            grants: vec![ActionGrant {
                verbs: verbs.to_vec(),
                api_version: "v1".into(),
                kind: kind.into(),
                namespaces: Some(vec!["a".into()]),
            }],
            dry_run: true,
            ..ActionSpec::default()
        };
        let status = Arc::new(PluginStatus::default());
        (
            PluginActions::new("t".into(), spec, status, services.clone()),
            services,
        )
    }

    #[test]
    fn a_forged_target_is_invalid_before_its_grant_is_looked_at() {
        let (a, services) = dry_run("Pod", &[ActionVerb::Patch]);
        let mut t = pod(Some("a"));
        t.name = "x/../../../../kube-system/pods/coredns".into();
        let body = metadata_patch(&[("k".into(), Some("v".into()))], &[], None)
            .map(ActionBody::PatchMetadata);
        let r = a.request(t, body, ActionVerb::Patch);
        assert!(
            matches!(&r, Err(ActionError::Invalid(m)) if m.starts_with("name \"x/../")),
            "{r:?}"
        );
        let audit = services.audit.entries(Some("t"));
        assert_eq!((audit.len(), audit[0].result), (1, AuditResult::Refused));
    }

    #[test]
    fn a_repeated_event_is_taken_as_a_count_of_the_first() {
        let (a, services) = dry_run("Event", &[ActionVerb::Create]);
        for _ in 0..3 {
            let (t, body) = event_body("t", &pod(Some("a")), None, true, "R", "same").unwrap();
            let r = a.request(t, Ok(ActionBody::CreateEvent(body)), ActionVerb::Create);
            assert_eq!(r, Ok(Accepted::DryRun));
        }
        let audit = services.audit.entries(Some("t"));
        assert_eq!(audit.len(), 3);
        assert!(audit.iter().all(|e| e.name == audit[0].name), "{audit:?}");
        assert!(audit[0].detail.contains(r#""kind":"Event""#), "{audit:?}");
        assert!(audit[2].detail.contains(r#""count":3"#), "{audit:?}");
    }

    #[test]
    fn retryable_failures_are_conflict_throttle_server_and_transport() {
        let e = |code| SendError::new(code, "");
        assert!(
            e(Some(409)).retryable()
                && e(Some(429)).retryable()
                && e(Some(503)).retryable()
                && e(None).retryable()
        );
        assert!(
            !e(Some(403)).retryable() && !e(Some(404)).retryable() && !e(Some(422)).retryable()
        );
        let apply_conflict = SendError {
            field_manager_conflict: true,
            ..e(Some(409))
        };
        assert!(!apply_conflict.retryable(), "an apply conflict comes back");
    }

    fn patch_at(name: &str, rv: Option<&str>) -> Action {
        let mut target = pod(Some("a"));
        target.name = name.into();
        Action {
            plugin: "t".into(),
            version: "1".into(),
            target,
            body: ActionBody::PatchMetadata(
                metadata_patch(&[("k".into(), Some("v".into()))], &[], rv).unwrap(),
            ),
        }
    }

    fn sent(rv: &str) -> Sent {
        Sent {
            resource_version: Some(rv.into()),
        }
    }

    #[test]
    fn a_conflict_of_a_conditional_patch_is_final_and_others_are_retried() {
        let conflict = SendError::new(Some(409), "the object has been modified");
        assert!(stale(&patch_at("p", Some("7")), &conflict));
        assert!(!stale(&patch_at("p", None), &conflict));
        assert!(!stale(
            &patch_at("p", Some("7")),
            &SendError::new(Some(503), "")
        ));
    }

    #[test]
    fn only_the_plugins_own_writes_move_a_patch_to_a_later_version() {
        let mut own = OwnWrites::default();
        let rv = |a: &Action| a.body.precondition().map(str::to_owned);
        // Three patches asked at version 5: each goes at the version the previous one made.
        let a = own.rebase(patch_at("p", Some("5")));
        assert_eq!(rv(&a).as_deref(), Some("5"));
        own.wrote(&a, &sent("6"));
        let b = own.rebase(patch_at("p", Some("5")));
        assert_eq!(rv(&b).as_deref(), Some("6"));
        own.wrote(&b, &sent("7"));
        // Asked at a version the plugin's own write made (its cache caught up halfway).
        let c = own.rebase(patch_at("p", Some("6")));
        assert_eq!(rv(&c).as_deref(), Some("7"));
        // Another object, and a version no own write made, are left as asked.
        assert_eq!(
            rv(&own.rebase(patch_at("q", Some("5")))).as_deref(),
            Some("5")
        );
        assert_eq!(
            rv(&own.rebase(patch_at("p", Some("4")))).as_deref(),
            Some("4")
        );
        assert_eq!(rv(&own.rebase(patch_at("p", None))), None);
        // A write on no condition, or a conflict, ends what the sender knows.
        own.wrote(&patch_at("p", None), &sent("9"));
        assert_eq!(
            rv(&own.rebase(patch_at("p", Some("5")))).as_deref(),
            Some("5")
        );
        own.wrote(&patch_at("p", Some("9")), &sent("10"));
        assert_eq!(
            rv(&own.rebase(patch_at("p", Some("9")))).as_deref(),
            Some("10")
        );
        own.forget(&patch_at("p", None).target);
        assert_eq!(
            rv(&own.rebase(patch_at("p", Some("9")))).as_deref(),
            Some("9")
        );
    }
}
