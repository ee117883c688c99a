//! Sending a plugin's actions: in order, one task per plugin, retrying what is worth retrying,
//! conditional patches that met a newer version left as they failed, each outcome audited.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::audit::{AuditEntry, AuditLog, AuditResult};
use super::{Action, ActionBody, ActionReport, Counted, Target, lifecycle};
use crate::informer::backoff::{Backoff, BackoffConfig, Jitter};
use crate::policy::rfc3339;

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

/// Where a sender reports: the audit log, the plugin's counters, the host's senders.
pub struct Sender {
    /// The audit log.
    pub audit: Arc<AuditLog>,
    /// The plugin's counters and last error.
    pub report: Arc<dyn ActionReport>,
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
        self.report.count(Counted::Failed);
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

/// The waits between an action's attempts: `backoff` doubling to 30 s, each scaled by a random
/// factor in [0.9, 1.1).
fn retry_backoff(backoff: Duration) -> BackoffConfig {
    BackoffConfig {
        jitter: Jitter::Spread(0.1),
        ..BackoffConfig::doubling(backoff, Duration::from_secs(30))
    }
}

/// Sends one plugin's actions in order, retrying retryable failures with doubling backoff (to
/// 30 s), and audits each outcome. Ends when the plugin's [`super::PluginActions`] is dropped, or, at
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
        let mut waits = Backoff::new(retry_backoff(backoff));
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
                    tokio::select! {
                        _ = tokio::time::sleep(waits.next_delay()) => {}
                        _ = reached(&mut phase, |p| *p == Phase::Abandoned) => break None,
                    }
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
                out.report.count(Counted::Applied);
                own.wrote(&action, &sent);
                (AuditResult::Applied, sent.detail())
            }
            Some(Err(e)) => {
                out.report.count(Counted::Failed);
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
                out.report.last_error(format!(
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
    use crate::actions::{metadata_patch, test_pod};

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
        let mut target = test_pod(Some("a"));
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
