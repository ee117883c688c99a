//! Policy verdicts: what plugins said about cached objects. The store keeps the current violation
//! per (plugin, informer, object, rule); a pass clears it, and so do the object's deletion (seen
//! by the plugin's listener) and the plugin's removal. `/verdicts` and the
//! `wisp_policy_violations` gauge read it.

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use crate::sync::{read, write};
use serde::Serialize;

/// Most violations kept per plugin (a plugin reporting more gets an error).
pub const MAX_VERDICTS_PER_PLUGIN: usize = 100_000;
/// Longest rule name.
pub const MAX_RULE_LEN: usize = 253;
/// Longest message (Kubernetes Event messages are cut at 1 KiB too).
pub const MAX_MESSAGE_LEN: usize = 1024;

/// How bad a violation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// For information.
    Info,
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
    /// Critical.
    Critical,
}

impl Severity {
    /// Lower-case name, as in JSON and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
            Severity::Critical => "critical",
        }
    }
}

/// The object a verdict is about, as the cache had it when the verdict was reported.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// Informer the object is cached in.
    pub informer: String,
    /// e.g. `v1`.
    pub api_version: String,
    /// e.g. `Pod`.
    pub kind: String,
    /// None for cluster-scoped objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// resourceVersion the verdict was given on.
    pub resource_version: String,
}

impl Subject {
    /// The cache key (`namespace/name` or `name`).
    pub fn key(&self) -> String {
        crate::informer::key::key_for(self.namespace.as_deref(), &self.name)
    }
}

/// A current violation.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// Configured plugin name.
    pub plugin: String,
    /// Version of the plugin that reported it last.
    pub plugin_version: String,
    /// Rule name, chosen by the plugin.
    pub rule: String,
    /// The object.
    #[serde(flatten)]
    pub subject: Subject,
    /// Severity.
    pub severity: Severity,
    /// What is wrong.
    pub message: String,
    /// When this violation was first reported (RFC 3339).
    pub since: String,
    /// When it was last reported (RFC 3339).
    pub last_reported: String,
}

/// What a report changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// A new violation.
    Raised,
    /// An existing violation got another severity or message.
    Changed,
    /// The same violation again (e.g. at a resync).
    Unchanged,
    /// A pass cleared a violation.
    Cleared,
    /// A pass where there was nothing to clear.
    Passed,
}

/// Which verdicts `/verdicts` lists.
#[derive(Clone, Debug, Default)]
pub struct VerdictFilter {
    /// Only this plugin's.
    pub plugin: Option<String>,
    /// Only objects in this namespace.
    pub namespace: Option<String>,
    /// Only this rule's.
    pub rule: Option<String>,
}

/// Where a violation sits in its plugin's map: informer, object key, rule (so an object's
/// violations are one range).
type Slot = (String, String, String);

/// A verdict the store refuses to record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReportRefused {
    /// A rule name empty or over [`MAX_RULE_LEN`] bytes (its length).
    #[error("rule name must be 1 to {MAX_RULE_LEN} bytes, got {0}")]
    RuleName(usize),
    /// The plugin already holds [`MAX_VERDICTS_PER_PLUGIN`] violations.
    #[error("the plugin already holds {MAX_VERDICTS_PER_PLUGIN} violations")]
    TooMany,
}

/// Every plugin's current violations.
#[derive(Debug, Default)]
pub struct VerdictStore {
    /// Per plugin, its violations by slot.
    by_plugin: RwLock<BTreeMap<String, BTreeMap<Slot, Verdict>>>,
    /// Number of violations held (read without the lock on the delivery path).
    len: AtomicUsize,
}

/// RFC 3339 UTC with seconds, as Kubernetes writes times.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    k8s_openapi::jiff::Timestamp::from_second(i64::try_from(secs).unwrap_or(0))
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
        .to_string()
}

impl VerdictStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `plugin`'s verdict on `rule` for `subject`: `Some((severity, message))` is a
    /// violation, `None` a pass. Errors name what is wrong with the report.
    pub fn report(
        &self,
        plugin: &str,
        plugin_version: &str,
        rule: &str,
        subject: Subject,
        violation: Option<(Severity, String)>,
    ) -> Result<Change, ReportRefused> {
        if rule.is_empty() || rule.len() > MAX_RULE_LEN {
            return Err(ReportRefused::RuleName(rule.len()));
        }
        let slot: Slot = (subject.informer.clone(), subject.key(), rule.to_owned());
        let mut by_plugin = write(&self.by_plugin);
        let Some((severity, mut message)) = violation else {
            let Some(slots) = by_plugin.get_mut(plugin) else {
                return Ok(Change::Passed);
            };
            if slots.remove(&slot).is_none() {
                return Ok(Change::Passed);
            }
            self.len.fetch_sub(1, Ordering::Relaxed);
            if slots.is_empty() {
                by_plugin.remove(plugin);
            }
            return Ok(Change::Cleared);
        };
        if message.len() > MAX_MESSAGE_LEN {
            let mut cut = MAX_MESSAGE_LEN;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        let now = rfc3339(SystemTime::now());
        let slots = by_plugin.entry(plugin.to_owned()).or_default();
        if let Some(v) = slots.get_mut(&slot) {
            let changed = v.severity != severity || v.message != message;
            v.severity = severity;
            v.message = message;
            v.subject = subject;
            v.plugin_version = plugin_version.to_owned();
            v.last_reported = now;
            return Ok(if changed {
                Change::Changed
            } else {
                Change::Unchanged
            });
        }
        if slots.len() >= MAX_VERDICTS_PER_PLUGIN {
            return Err(ReportRefused::TooMany);
        }
        slots.insert(
            slot,
            Verdict {
                plugin: plugin.to_owned(),
                plugin_version: plugin_version.to_owned(),
                rule: rule.to_owned(),
                subject,
                severity,
                message,
                since: now.clone(),
                last_reported: now,
            },
        );
        self.len.fetch_add(1, Ordering::Relaxed);
        Ok(Change::Raised)
    }

    /// Clears `plugin`'s verdicts on the object `key` of `informer` (it was deleted).
    pub fn clear_object(&self, plugin: &str, informer: &str, key: &str) -> usize {
        if self.is_empty() {
            return 0;
        }
        let mut by_plugin = write(&self.by_plugin);
        let Some(slots) = by_plugin.get_mut(plugin) else {
            return 0;
        };
        let from: Slot = (informer.to_owned(), key.to_owned(), String::new());
        let gone: Vec<Slot> = slots
            .range(from..)
            .take_while(|((i, o, _), _)| i == informer && o == key)
            .map(|(slot, _)| slot.clone())
            .collect();
        for slot in &gone {
            slots.remove(slot);
        }
        if slots.is_empty() {
            by_plugin.remove(plugin);
        }
        self.len.fetch_sub(gone.len(), Ordering::Relaxed);
        gone.len()
    }

    /// Clears every verdict of `plugin` (it was removed).
    pub fn clear_plugin(&self, plugin: &str) -> usize {
        let mut by_plugin = write(&self.by_plugin);
        let n = by_plugin.remove(plugin).map_or(0, |slots| slots.len());
        self.len.fetch_sub(n, Ordering::Relaxed);
        n
    }

    /// Current violations matching `filter`, by plugin, informer, object and rule.
    pub fn list(&self, filter: &VerdictFilter) -> Vec<Verdict> {
        let by_plugin = read(&self.by_plugin);
        by_plugin
            .iter()
            .filter(|(p, _)| filter.plugin.as_ref().is_none_or(|f| f == *p))
            .flat_map(|(_, slots)| slots.values())
            .filter(|v| filter.rule.as_ref().is_none_or(|r| *r == v.rule))
            .filter(|v| {
                filter
                    .namespace
                    .as_ref()
                    .is_none_or(|n| v.subject.namespace.as_ref() == Some(n))
            })
            .cloned()
            .collect()
    }

    /// Number of violations per (plugin, rule, severity).
    pub fn counts(&self) -> BTreeMap<(String, String, Severity), u64> {
        let by_plugin = read(&self.by_plugin);
        let mut out = BTreeMap::new();
        for v in by_plugin.values().flat_map(BTreeMap::values) {
            *out.entry((v.plugin.clone(), v.rule.clone(), v.severity))
                .or_insert(0) += 1;
        }
        out
    }

    /// Number of violations held.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether no violation is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the policy-report writer (`crate::reports`) did, for `/metrics`.
#[derive(Debug, Default)]
pub struct ReportStatus {
    /// Whether reports are configured (the metrics show only then).
    pub enabled: std::sync::atomic::AtomicBool,
    /// Reports this host wrote and has not deleted.
    pub written: std::sync::atomic::AtomicU64,
    /// Writes (apply, delete, list) that failed.
    pub write_errors: std::sync::atomic::AtomicU64,
    /// Rounds the writer has run, those of a standby (which write nothing) included.
    pub rounds: std::sync::atomic::AtomicU64,
    /// The last failure.
    pub last_error: std::sync::Mutex<Option<String>>,
}

impl ReportStatus {
    pub(crate) fn failed(&self, what: String) {
        tracing::warn!(error = %what, "policy report not written; retried at the next interval");
        self.write_errors.fetch_add(1, Ordering::Relaxed);
        *crate::sync::lock(&self.last_error) = Some(what);
    }

    /// The last failure, if any.
    pub fn last_error(&self) -> Option<String> {
        crate::sync::lock(&self.last_error).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str) -> Subject {
        Subject {
            informer: "pods".into(),
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some(ns.into()),
            name: name.into(),
            uid: format!("uid-{name}"),
            resource_version: "1".into(),
        }
    }

    fn bad(msg: &str) -> Option<(Severity, String)> {
        Some((Severity::High, msg.into()))
    }

    #[test]
    fn a_violation_is_raised_updated_and_cleared_by_a_pass() {
        let s = VerdictStore::new();
        assert_eq!(
            s.report("p", "1", "r", pod("a", "x"), bad("m")),
            Ok(Change::Raised)
        );
        assert_eq!(
            s.report("p", "1", "r", pod("a", "x"), bad("m")),
            Ok(Change::Unchanged)
        );
        assert_eq!(
            s.report("p", "2", "r", pod("a", "x"), bad("n")),
            Ok(Change::Changed)
        );
        let v = s.list(&VerdictFilter::default());
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].message.as_str(), v[0].plugin_version.as_str()),
            ("n", "2")
        );
        assert_eq!(
            s.report("p", "2", "r", pod("a", "x"), None),
            Ok(Change::Cleared)
        );
        assert_eq!(
            s.report("p", "2", "r", pod("a", "x"), None),
            Ok(Change::Passed)
        );
        assert!(s.is_empty());
    }

    #[test]
    fn rules_plugins_and_objects_are_kept_apart_and_filtered() {
        let s = VerdictStore::new();
        s.report("p", "1", "r1", pod("a", "x"), bad("m")).unwrap();
        s.report("p", "1", "r2", pod("a", "x"), bad("m")).unwrap();
        s.report("q", "1", "r1", pod("a", "x"), bad("m")).unwrap();
        s.report("p", "1", "r1", pod("b", "y"), bad("m")).unwrap();
        assert_eq!(s.len(), 4);
        let only = |plugin: Option<&str>, ns: Option<&str>, rule: Option<&str>| {
            s.list(&VerdictFilter {
                plugin: plugin.map(Into::into),
                namespace: ns.map(Into::into),
                rule: rule.map(Into::into),
            })
            .len()
        };
        assert_eq!(only(Some("p"), None, None), 3);
        assert_eq!(only(None, Some("a"), None), 3);
        assert_eq!(only(Some("p"), Some("a"), Some("r1")), 1);
        assert_eq!(s.clear_object("p", "pods", "a/x"), 2);
        assert_eq!(only(None, Some("a"), None), 1, "q's verdict stays");
        assert_eq!(s.clear_plugin("q"), 1);
        assert_eq!(
            s.counts().into_iter().collect::<Vec<_>>(),
            vec![(("p".into(), "r1".into(), Severity::High), 1)]
        );
    }

    #[test]
    fn bad_reports_are_refused_and_long_messages_cut() {
        let s = VerdictStore::new();
        assert!(s.report("p", "1", "", pod("a", "x"), bad("m")).is_err());
        let long = "é".repeat(MAX_MESSAGE_LEN);
        s.report("p", "1", "r", pod("a", "x"), bad(&long)).unwrap();
        let v = &s.list(&VerdictFilter::default())[0];
        assert!(v.message.len() <= MAX_MESSAGE_LEN && v.message.starts_with('é'));
    }

    #[test]
    fn timestamps_are_rfc3339() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_764_683_700);
        assert_eq!(rfc3339(t), "2025-12-02T13:55:00Z");
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }
}
