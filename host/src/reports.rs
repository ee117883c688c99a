//! Policy reports: the plugins' current violations ([`crate::policy::VerdictStore`]) also written
//! as the reports policy tools read, with `policyReports:` in the config (`source: kube` only).
//!
//! One namespaced report per namespace with violations, holding those of every plugin on the
//! objects of that namespace, and one cluster report for cluster-scoped objects; both named
//! `wisp-policy` (`wisp-policy-<identity>` in `sharding: {mode: shards}`, so members never
//! write each other's) and labelled `app.kubernetes.io/managed-by: wisp`. The group is
//! `openreports.io/v1alpha1` (kinds `Report`, `ClusterReport`) or `wgpolicyk8s.io/v1alpha2`
//! (`PolicyReport`, `ClusterPolicyReport`); both have the same result and summary fields.
//!
//! Each result: `source` and `policy` the plugin, `rule`, `severity`, `message`, `resources`
//! (the object), `timestamp` (when the violation was first reported, so a re-evaluation with
//! the same outcome changes nothing), `result: fail`, or `warn` for `info` violations (not
//! scored). At most `maxResults` results, by severity (critical first) then object and rule;
//! when some are left out, the annotation [`OMITTED_ANNOTATION`] says how many; the `summary`
//! counts every violation.
//!
//! The host writes (no plugin grant is involved): every `interval`, each report whose content
//! changed since it last wrote it, by server-side apply (field manager `wisp`, forced: the host
//! owns these objects); a report whose violations all cleared is deleted. With `sharding`, a
//! replica writes only while it leads (or, with shards, while its membership is fresh), the
//! check the actions' fence makes, right before each request; a replica that starts writing
//! first lists the reports of its name to delete those left over. Failures are logged, counted
//! (`wisp_policy_reports_write_errors_total`) and retried at the next interval.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde::Deserialize;
use serde_json::{Value, json};

pub use crate::policy::ReportStatus;
use crate::policy::{Severity, Verdict, VerdictFilter, VerdictStore};
use crate::scale::lease::Fenced;
use crate::units::Dur;
use wisp_kinds::api::{collection_at, path_segment};

/// Label on every report the host writes.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "wisp");
/// Annotation on a report whose results were cut: how many were left out.
pub const OMITTED_ANNOTATION: &str = "wisp.io/results-omitted";
/// Field manager of the host's report writes.
pub const FIELD_MANAGER: &str = "wisp";
/// Name of the reports (with shards, `-<identity>` follows).
pub const REPORT_NAME: &str = "wisp-policy";

/// Which report API.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum ReportGroup {
    /// `openreports.io/v1alpha1`: `Report`, `ClusterReport`.
    #[default]
    #[serde(rename = "openreports.io")]
    OpenReports,
    /// `wgpolicyk8s.io/v1alpha2`: `PolicyReport`, `ClusterPolicyReport`.
    #[serde(rename = "wgpolicyk8s.io")]
    WgPolicy,
}

impl ReportGroup {
    /// API group.
    pub fn group(self) -> &'static str {
        match self {
            ReportGroup::OpenReports => "openreports.io",
            ReportGroup::WgPolicy => "wgpolicyk8s.io",
        }
    }

    /// Version written.
    pub fn version(self) -> &'static str {
        match self {
            ReportGroup::OpenReports => "v1alpha1",
            ReportGroup::WgPolicy => "v1alpha2",
        }
    }

    /// `group/version`.
    pub fn api_version(self) -> String {
        format!("{}/{}", self.group(), self.version())
    }

    /// Kind of the namespaced (`true`) or cluster report.
    pub fn kind(self, namespaced: bool) -> &'static str {
        match (self, namespaced) {
            (ReportGroup::OpenReports, true) => "Report",
            (ReportGroup::OpenReports, false) => "ClusterReport",
            (ReportGroup::WgPolicy, true) => "PolicyReport",
            (ReportGroup::WgPolicy, false) => "ClusterPolicyReport",
        }
    }

    /// Plural (resource) of the namespaced (`true`) or cluster report.
    pub fn plural(self, namespaced: bool) -> &'static str {
        match (self, namespaced) {
            (ReportGroup::OpenReports, true) => "reports",
            (ReportGroup::OpenReports, false) => "clusterreports",
            (ReportGroup::WgPolicy, true) => "policyreports",
            (ReportGroup::WgPolicy, false) => "clusterpolicyreports",
        }
    }
}

/// What the reports are and how they are written.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportSettings {
    /// Report API.
    pub group: ReportGroup,
    /// Name of every report this host writes.
    pub name: String,
    /// Most results per report.
    pub max_results: usize,
    /// Time between writes.
    pub interval: Duration,
}

impl ReportSettings {
    /// From the config; `identity` is the shard member's (`None` unless `mode: shards`).
    pub fn new(config: &PolicyReportsConfig, identity: Option<&str>) -> Self {
        Self {
            group: config.api_group,
            name: match identity {
                Some(id) => format!("{REPORT_NAME}-{id}"),
                None => REPORT_NAME.to_owned(),
            },
            max_results: config.max_results(),
            interval: config.interval(),
        }
    }
}

/// A report's place: its namespace, `None` for the cluster report.
pub type Scope = Option<String>;

/// The result a violation of `severity` is: `warn` (not scored) for `info`, else `fail`.
pub fn result_of(severity: Severity) -> &'static str {
    if severity == Severity::Info {
        "warn"
    } else {
        "fail"
    }
}

fn seconds(rfc3339: &str) -> i64 {
    rfc3339
        .parse::<k8s_openapi::jiff::Timestamp>()
        .map_or(0, |t| t.as_second())
}

fn result(v: &Verdict) -> Value {
    let s = &v.subject;
    let mut resource = json!({
        "apiVersion": s.api_version,
        "kind": s.kind,
        "name": s.name,
        "uid": s.uid,
    });
    if let Some(ns) = &s.namespace {
        resource["namespace"] = json!(ns);
    }
    json!({
        "source": v.plugin,
        "policy": v.plugin,
        "rule": v.rule,
        "result": result_of(v.severity),
        "scored": v.severity != Severity::Info,
        "severity": v.severity.as_str(),
        "message": v.message,
        "resources": [resource],
        "timestamp": {"seconds": seconds(&v.since), "nanos": 0},
    })
}

/// Where a result goes in its report: severity (critical first), then object and rule.
fn order(v: &Verdict) -> (std::cmp::Reverse<Severity>, &str, &str, &str, &str, &str) {
    (
        std::cmp::Reverse(v.severity),
        &v.subject.name,
        &v.subject.kind,
        &v.subject.api_version,
        &v.plugin,
        &v.rule,
    )
}

/// The reports `verdicts` make, by scope: results ordered by severity (critical first), then
/// object (name, kind, apiVersion), plugin and rule; at most `max_results`, the rest
/// counted in [`OMITTED_ANNOTATION`]; the summary counts all.
pub fn build(verdicts: &[Verdict], settings: &ReportSettings) -> BTreeMap<Scope, Value> {
    let mut by_scope: BTreeMap<Scope, Vec<&Verdict>> = BTreeMap::new();
    for v in verdicts {
        by_scope
            .entry(v.subject.namespace.clone())
            .or_default()
            .push(v);
    }
    let g = settings.group;
    by_scope
        .into_iter()
        .map(|(scope, mut vs)| {
            vs.sort_by(|a, b| order(a).cmp(&order(b)));
            let warn = vs.iter().filter(|v| v.severity == Severity::Info).count();
            let fail = vs.len() - warn;
            let omitted = vs.len().saturating_sub(settings.max_results);
            let results: Vec<Value> = vs
                .iter()
                .take(settings.max_results)
                .map(|v| result(v))
                .collect();
            let mut metadata = json!({
                "name": settings.name,
                "labels": {MANAGED_BY.0: MANAGED_BY.1},
            });
            if let Some(ns) = &scope {
                metadata["namespace"] = json!(ns);
            }
            if omitted > 0 {
                metadata["annotations"] = json!({OMITTED_ANNOTATION: omitted.to_string()});
            }
            let report = json!({
                "apiVersion": g.api_version(),
                "kind": g.kind(scope.is_some()),
                "metadata": metadata,
                "summary": {"pass": 0, "fail": fail, "warn": warn, "error": 0, "skip": 0},
                "results": results,
            });
            (scope, report)
        })
        .collect()
}

/// Writes the reports of a verdict store to an API server.
pub struct ReportWriter {
    client: kube::Client,
    verdicts: Arc<VerdictStore>,
    settings: ReportSettings,
    fence: Option<Arc<crate::scale::lease::Leadership>>,
    status: Arc<ReportStatus>,
    /// Per scope, what was last written (`Null`: a report found on the server, content unknown).
    written: BTreeMap<Scope, Value>,
    /// Whether the reports left on the server were listed since this replica may write.
    adopted: bool,
}

impl ReportWriter {
    /// A writer; with `fence`, it writes only while that check passes.
    pub fn new(
        client: kube::Client,
        verdicts: Arc<VerdictStore>,
        settings: ReportSettings,
        fence: Option<Arc<crate::scale::lease::Leadership>>,
        status: Arc<ReportStatus>,
    ) -> Self {
        status.enabled.store(true, Ordering::Relaxed);
        Self {
            client,
            verdicts,
            settings,
            fence,
            status,
            written: BTreeMap::new(),
            adopted: false,
        }
    }

    /// Writes every `interval` until `stopped` completes.
    pub async fn run(mut self, stopped: impl Future<Output = ()>) {
        let mut stopped = std::pin::pin!(stopped);
        let mut tick = tokio::time::interval(self.settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stopped => return,
                _ = tick.tick() => self.write().await,
            }
        }
    }

    fn allowed(&self) -> Result<(), Fenced> {
        self.fence.as_ref().map_or(Ok(()), |l| l.check())
    }

    fn collection(&self, scope: &Scope, all_namespaces: bool) -> kube::core::Request {
        let g = self.settings.group;
        let ns = scope.as_deref().filter(|_| !all_namespaces);
        collection_at(g.group(), g.version(), ns, g.plural(scope.is_some()))
    }

    /// One round: the reports that changed are applied, those no longer needed deleted.
    pub async fn write(&mut self) {
        self.status.rounds.fetch_add(1, Ordering::Relaxed);
        if self.allowed().is_err() {
            // A standby (or a member whose membership lapsed) writes nothing; once it may
            // again, it first lists what is on the server.
            self.adopted = false;
            return;
        }
        if !self.adopted {
            match self.adopt().await {
                Ok(()) => self.adopted = true,
                Err(e) => return self.status.failed(e.to_string()),
            }
        }
        // Off the async workers: with many violations, building takes a while.
        let (verdicts, settings) = (self.verdicts.clone(), self.settings.clone());
        let desired = match tokio::task::spawn_blocking(move || {
            build(&verdicts.list(&VerdictFilter::default()), &settings)
        })
        .await
        {
            Ok(d) => d,
            Err(e) => return self.status.failed(format!("building the reports: {e}")),
        };
        for (scope, report) in &desired {
            if self.written.get(scope) == Some(report) {
                continue;
            }
            if let Err(e) = self.apply(scope, report).await {
                self.status.failed(e.to_string());
                // Written again at the next round.
                self.written.remove(scope);
                continue;
            }
            self.written.insert(scope.clone(), report.clone());
        }
        let gone: Vec<Scope> = self
            .written
            .keys()
            .filter(|s| !desired.contains_key(*s))
            .cloned()
            .collect();
        for scope in gone {
            match self.delete(&scope).await {
                Ok(()) => {
                    self.written.remove(&scope);
                }
                Err(e) => self.status.failed(e.to_string()),
            }
        }
        self.status
            .written
            .store(self.written.len() as u64, Ordering::Relaxed);
    }

    fn where_(&self, scope: &Scope) -> String {
        let kind = self.settings.group.kind(scope.is_some());
        match scope {
            Some(ns) => format!("{kind} {ns}/{}", self.settings.name),
            None => format!("{kind} {}", self.settings.name),
        }
    }

    async fn send(&self, req: http::Request<Vec<u8>>) -> Result<String, Unsent> {
        self.allowed()?;
        self.client.request_text(req).await.map_err(|e| match e {
            kube::Error::Api(s) => Unsent::Api {
                code: s.code,
                message: s.message,
            },
            e => Unsent::Kube(e),
        })
    }

    async fn apply(&self, scope: &Scope, report: &Value) -> Result<(), ReportError> {
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let req = self
            .collection(scope, false)
            .patch(
                &path_segment(&self.settings.name),
                &pp,
                &Patch::Apply(report),
            )
            .map_err(|source| ReportError::Build {
                place: self.where_(scope),
                source,
            })?;
        self.send(req)
            .await
            .map(drop)
            .map_err(|source| ReportError::Apply {
                place: self.where_(scope),
                source,
            })
    }

    async fn delete(&self, scope: &Scope) -> Result<(), ReportError> {
        let req = self
            .collection(scope, false)
            .delete(&path_segment(&self.settings.name), &DeleteParams::default())
            .map_err(|source| ReportError::Build {
                place: self.where_(scope),
                source,
            })?;
        match self.send(req).await {
            Ok(_) | Err(Unsent::Api { code: 404, .. }) => Ok(()),
            Err(source) => Err(ReportError::Delete {
                place: self.where_(scope),
                source,
            }),
        }
    }

    /// Lists the reports of this host's name on the server (left by an earlier run, or by the
    /// leader before): they are written again or deleted at this round.
    async fn adopt(&mut self) -> Result<(), ReportError> {
        let lp = ListParams::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
        for scope in [Some(String::new()), None] {
            let what = self.settings.group.plural(scope.is_some());
            let list_failed = |problem| ReportError::List { what, problem };
            let req = self
                .collection(&scope, true)
                .list(&lp)
                .map_err(|e| list_failed(Unsent::Build(e)))?;
            let text = self.send(req).await.map_err(list_failed)?;
            let list: Value =
                serde_json::from_str(&text).map_err(|e| list_failed(Unsent::Json(e)))?;
            for item in list["items"].as_array().into_iter().flatten() {
                if item["metadata"]["name"] != self.settings.name.as_str() {
                    continue;
                }
                let found: Scope = item["metadata"]["namespace"].as_str().map(str::to_owned);
                self.written.entry(found).or_insert(Value::Null);
            }
        }
        Ok(())
    }
}

/// Why a request about reports got no answer to use.
#[derive(Debug, thiserror::Error)]
enum Unsent {
    /// This replica may not write now.
    #[error("fenced: {0}")]
    Fenced(#[from] Fenced),
    /// The API server refused it.
    #[error("HTTP {code}: {message}")]
    Api { code: u16, message: String },
    /// The request could not be built.
    #[error("{0}")]
    Build(#[source] kube::core::request::Error),
    /// No answer (connection, timeout).
    #[error("{0}")]
    Kube(#[source] kube::Error),
    /// An answer that is not JSON.
    #[error("{0}")]
    Json(#[source] serde_json::Error),
}

/// A report round's failure (counted and shown in the status; retried at the next round).
#[derive(Debug, thiserror::Error)]
enum ReportError {
    /// The request about a report could not be built (`place`: the report).
    #[error("{place}: {source}")]
    Build {
        place: String,
        #[source]
        source: kube::core::request::Error,
    },
    /// Applying a report failed.
    #[error("apply {place}: {source}")]
    Apply {
        place: String,
        #[source]
        source: Unsent,
    },
    /// Deleting a report failed.
    #[error("delete {place}: {source}")]
    Delete {
        place: String,
        #[source]
        source: Unsent,
    },
    /// Listing the reports of this host's name failed.
    #[error("list {what}: {problem}")]
    List {
        what: &'static str,
        #[source]
        problem: Unsent,
    },
}

/// `policyReports:`: the verdicts also written as policy reports, one per namespace and one for
/// cluster-scoped objects (see [`crate::reports`]).
#[derive(Debug, Deserialize, Clone, Default, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PolicyReportsConfig {
    /// `openreports.io` (default: `Report`, `ClusterReport` in v1alpha1) or `wgpolicyk8s.io`
    /// (`PolicyReport`, `ClusterPolicyReport` in v1alpha2).
    #[serde(default)]
    pub api_group: ReportGroup,
    /// How often changed reports are written (default 10s).
    #[serde(default)]
    pub interval: Option<Dur>,
    /// Most results per report (default 1000, at most 10000); the summary counts them all.
    #[serde(default)]
    pub max_results: Option<usize>,
}

impl PolicyReportsConfig {
    /// Default `interval`.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
    /// Default `maxResults`.
    pub const DEFAULT_MAX_RESULTS: usize = 1000;
    /// Largest `maxResults`.
    pub const MAX_RESULTS: usize = 10_000;

    /// `interval` in force.
    pub fn interval(&self) -> Duration {
        self.interval.map_or(Self::DEFAULT_INTERVAL, |d| d.0)
    }

    /// `maxResults` in force.
    pub fn max_results(&self) -> usize {
        self.max_results.unwrap_or(Self::DEFAULT_MAX_RESULTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Subject;

    fn verdict(ns: Option<&str>, name: &str, plugin: &str, rule: &str, sev: Severity) -> Verdict {
        Verdict {
            plugin: plugin.into(),
            plugin_version: "1.0.0".into(),
            rule: rule.into(),
            subject: Subject {
                informer: "i".into(),
                api_version: if ns.is_some() {
                    "v1"
                } else {
                    "rbac.authorization.k8s.io/v1"
                }
                .into(),
                kind: if ns.is_some() { "Pod" } else { "ClusterRole" }.into(),
                namespace: ns.map(Into::into),
                name: name.into(),
                uid: format!("uid-{name}"),
                resource_version: "7".into(),
            },
            severity: sev,
            message: format!("{rule} on {name}"),
            since: "2025-12-02T13:55:00Z".into(),
            last_reported: "2025-12-02T14:00:00Z".into(),
        }
    }

    fn settings(group: ReportGroup, max: usize) -> ReportSettings {
        ReportSettings {
            group,
            name: REPORT_NAME.into(),
            max_results: max,
            interval: Duration::from_secs(1),
        }
    }

    #[test]
    fn one_report_per_namespace_and_one_cluster_report_with_mapped_results() {
        let vs = vec![
            verdict(Some("shop"), "web", "policy", "latest-tag", Severity::High),
            verdict(Some("shop"), "db", "other", "note", Severity::Info),
            verdict(Some("ops"), "job", "policy", "latest-tag", Severity::Medium),
            verdict(None, "admin", "rbac", "wildcard", Severity::Critical),
        ];
        let r = build(&vs, &settings(ReportGroup::OpenReports, 10));
        assert_eq!(
            r.keys().cloned().collect::<Vec<_>>(),
            vec![None, Some("ops".into()), Some("shop".into())]
        );
        let shop = &r[&Some("shop".into())];
        assert_eq!(shop["apiVersion"], "openreports.io/v1alpha1");
        assert_eq!(shop["kind"], "Report");
        assert_eq!(shop["metadata"]["name"], "wisp-policy");
        assert_eq!(shop["metadata"]["namespace"], "shop");
        assert_eq!(
            shop["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "wisp"
        );
        assert!(shop["metadata"].get("annotations").is_none());
        assert_eq!(
            shop["summary"],
            json!({"pass": 0, "fail": 1, "warn": 1, "error": 0, "skip": 0})
        );
        assert_eq!(
            shop["results"][0],
            json!({
                "source": "policy", "policy": "policy", "rule": "latest-tag",
                "result": "fail", "scored": true, "severity": "high",
                "message": "latest-tag on web",
                "resources": [{"apiVersion": "v1", "kind": "Pod", "namespace": "shop",
                               "name": "web", "uid": "uid-web"}],
                "timestamp": {"seconds": 1_764_683_700, "nanos": 0},
            })
        );
        assert_eq!(
            (
                shop["results"][1]["result"].as_str(),
                shop["results"][1]["severity"].as_str()
            ),
            (Some("warn"), Some("info"))
        );
        let cluster = &r[&None];
        assert_eq!(cluster["kind"], "ClusterReport");
        assert!(cluster["metadata"].get("namespace").is_none());
        assert!(
            cluster["results"][0]["resources"][0]
                .get("namespace")
                .is_none()
        );
        assert_eq!(cluster["results"][0]["severity"], "critical");

        let w = build(&vs, &settings(ReportGroup::WgPolicy, 10));
        assert_eq!(
            w[&Some("ops".into())]["apiVersion"],
            "wgpolicyk8s.io/v1alpha2"
        );
        assert_eq!(w[&Some("ops".into())]["kind"], "PolicyReport");
        assert_eq!(w[&None]["kind"], "ClusterPolicyReport");
    }

    #[test]
    fn results_are_ordered_by_severity_then_object_and_cut_with_an_annotation() {
        let mut vs = Vec::new();
        for (i, sev) in [
            Severity::Low,
            Severity::Critical,
            Severity::Info,
            Severity::High,
            Severity::Medium,
        ]
        .into_iter()
        .enumerate()
        {
            vs.push(verdict(Some("a"), &format!("p{}", 9 - i), "x", "r", sev));
            vs.push(verdict(Some("a"), &format!("p{i}"), "x", "r", sev));
        }
        let all = build(&vs, &settings(ReportGroup::OpenReports, 100));
        let order: Vec<(String, String)> = all[&Some("a".into())]["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["severity"].as_str().unwrap().to_owned(),
                    r["resources"][0]["name"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let want: Vec<(String, String)> = [
            ("critical", "p1"),
            ("critical", "p8"),
            ("high", "p3"),
            ("high", "p6"),
            ("medium", "p4"),
            ("medium", "p5"),
            ("low", "p0"),
            ("low", "p9"),
            ("info", "p2"),
            ("info", "p7"),
        ]
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
        assert_eq!(order, want);

        let cut = &build(&vs, &settings(ReportGroup::OpenReports, 3))[&Some("a".into())];
        assert_eq!(cut["results"].as_array().unwrap().len(), 3);
        assert_eq!(cut["results"][2]["severity"], "high");
        assert_eq!(cut["metadata"]["annotations"][OMITTED_ANNOTATION], "7");
        assert_eq!(
            cut["summary"],
            json!({"pass": 0, "fail": 8, "warn": 2, "error": 0, "skip": 0})
        );
    }

    #[test]
    fn the_same_verdicts_make_the_same_report_and_shard_members_their_own_name() {
        let a = vec![verdict(Some("a"), "x", "p", "r", Severity::High)];
        let mut b = a.clone();
        // A re-evaluation with the same outcome only moves lastReported.
        b[0].last_reported = "2025-12-02T15:00:00Z".into();
        b[0].subject.resource_version = "8".into();
        let s = settings(ReportGroup::OpenReports, 10);
        assert_eq!(build(&a, &s), build(&b, &s));
        assert!(build(&[], &s).is_empty());
        let cfg = PolicyReportsConfig::default();
        assert_eq!(
            ReportSettings::new(&cfg, Some("r-1")).name,
            "wisp-policy-r-1"
        );
        let s = ReportSettings::new(&cfg, None);
        assert_eq!(
            (s.name.as_str(), s.max_results, s.interval, s.group),
            (
                "wisp-policy",
                1000,
                Duration::from_secs(10),
                ReportGroup::OpenReports
            )
        );
    }
}
