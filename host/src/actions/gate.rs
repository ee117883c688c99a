//! The checks an action passes before it is queued, in order: well formed, granted, an API server
//! to send it to, a token of the plugin's rate limit; then a repeated Event becomes a count, and
//! the action is queued (or, in dry-run, logged and audited).

use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use super::audit::{AuditEntry, AuditResult};
use super::events::{Correlated, EventCorrelator};
use super::ratelimit::TokenBucket;
use super::validate::{InvalidAction, check_target};
use super::{
    Accepted, Action, ActionBody, ActionError, ActionReport, ActionSpec, ActionVerb, Counted,
    HostServices, Sender, Target, worker,
};
use crate::policy::rfc3339;
use crate::sync::lock;

/// One plugin's actions: its grants, rate limit, dry-run switch and sender.
pub struct PluginActions {
    plugin: Arc<str>,
    spec: ActionSpec,
    report: Arc<dyn ActionReport>,
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
        report: Arc<dyn ActionReport>,
        services: HostServices,
    ) -> Self {
        let bucket = TokenBucket::new(spec.per_second, spec.burst, Instant::now());
        Self {
            plugin,
            spec,
            report,
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
        self.report.version()
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
        let reason = match &e {
            ActionError::RateLimited(_) => {
                self.report.count(Counted::RateLimited);
                tracing::debug!(target: "wisp::plugin", plugin = %self.plugin, verb = verb.as_str(), kind = %t.kind, name = %t.name, "action refused: rate limited");
                return e;
            }
            ActionError::NotGranted(_) => "not-granted",
            ActionError::Invalid(_) => "invalid",
            ActionError::QueueFull(_) => "queue-full",
            ActionError::Unavailable(_) => "unavailable",
        };
        self.report
            .count(if matches!(e, ActionError::NotGranted(_)) {
                Counted::NotGranted
            } else {
                Counted::Refused
            });
        let entry = self.entry(verb, t, AuditResult::Refused, e.to_string(), 0);
        // Only the first refusal of a window is logged and audited in full; the others are
        // counted into its summary, so a plugin refused in a loop cannot flood either.
        if self.services.audit.refused(entry, reason) {
            // A window opened: its summary is written when it is over, even if nothing follows.
            let audit = self.services.audit.clone();
            // Outside a runtime no timer runs: the next record or read writes the summary.
            let _ = self
                .services
                .tasks
                .spawn("refusal summary", |stop| async move {
                    tokio::select! {
                        () = tokio::time::sleep(audit.refusal_window()) => audit.flush(),
                        // Shutdown: what is over is flushed at the next read.
                        () = stop.cancelled() => {}
                    }
                });
            tracing::warn!(target: "wisp::plugin", plugin = %self.plugin, verb = verb.as_str(), kind = %t.kind, namespace = t.namespace.as_deref().unwrap_or(""), name = %t.name, error = %e, "action refused (similar refusals in the next {:?} are counted, then summed up in the audit log)", self.services.audit.refusal_window());
            self.report.log(format!(
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
        body: Result<ActionBody, InvalidAction>,
        verb: ActionVerb,
    ) -> Result<Accepted, ActionError> {
        let body = match body.and_then(|b| check_target(&target).map(|()| b)) {
            Ok(b) => b,
            Err(why) => {
                let why = ActionError::Invalid(why.to_string());
                return Err(self.refuse(verb, &target, why));
            }
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
        let limited = lock(&self.bucket).take(Instant::now());
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
        let seen = lock(&self.events).observe(&mut event, Instant::now());
        match seen {
            Correlated::New => (target, ActionBody::CreateEvent(event)),
            Correlated::Repeat { name, patch } => {
                target.name = name;
                (target, ActionBody::CountEvent { patch, event })
            }
        }
    }

    /// Starts the task that sends this plugin's actions (on first use), under the host's
    /// [`Tasks`](crate::tasks::Tasks); `None` without a sink or a runtime.
    fn spawn_sender(&self) -> Option<tokio::sync::mpsc::Sender<Action>> {
        let sink = self.services.sink.clone()?;
        let (tx, rx) = tokio::sync::mpsc::channel(self.spec.queue.max(1));
        let name = format!("action sender of plugin {}", self.plugin);
        let task = self.services.tasks.spawn(&name, |_| {
            worker(
                rx,
                sink,
                Sender {
                    audit: self.services.audit.clone(),
                    report: self.report.clone(),
                    senders: self.services.senders.clone(),
                },
                self.spec.retries,
                self.spec.backoff,
            )
        })?;
        self.services.senders.register(task);
        Some(tx)
    }

    fn take(&self, target: Target, body: ActionBody) -> Result<Accepted, ActionError> {
        let verb = body.verb();
        if self.spec.dry_run {
            self.report.count(Counted::DryRun);
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
        let mut sender = lock(&self.sender);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::audit::AuditResult;
    use crate::actions::{ActionGrant, event_body, metadata_patch, test_pod};

    /// A plugin's report that keeps nothing (the plugin's status is the plugin layer's).
    struct Unreported;

    impl ActionReport for Unreported {
        fn version(&self) -> String {
            String::new()
        }
        fn count(&self, _: Counted) {}
        fn log(&self, _: String) {}
        fn last_error(&self, _: String) {}
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
        (
            PluginActions::new("t".into(), spec, Arc::new(Unreported), services.clone()),
            services,
        )
    }

    #[test]
    fn a_forged_target_is_invalid_before_its_grant_is_looked_at() {
        let (a, services) = dry_run("Pod", &[ActionVerb::Patch]);
        let mut t = test_pod(Some("a"));
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
            let (t, body) = event_body("t", &test_pod(Some("a")), None, true, "R", "same").unwrap();
            let r = a.request(t, Ok(ActionBody::CreateEvent(body)), ActionVerb::Create);
            assert_eq!(r, Ok(Accepted::DryRun));
        }
        let audit = services.audit.entries(Some("t"));
        assert_eq!(audit.len(), 3);
        assert!(audit.iter().all(|e| e.name == audit[0].name), "{audit:?}");
        assert!(audit[0].detail.contains(r#""kind":"Event""#), "{audit:?}");
        assert!(audit[2].detail.contains(r#""count":3"#), "{audit:?}");
    }
}
