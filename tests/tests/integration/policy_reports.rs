//! Policy reports end to end: a host started from a config with `policyReports`, the image
//! policy plugin over pods in two namespaces, and the report CRDs installed in the test API
//! server (tests/fixtures/policy-report-crds.yaml); the host writes the reports with its real
//! `kube::Client`, and the tests read them from the server.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use wisp_host::app::{self};
use wisp_host::config::Config;
use wisp_host::informer::shared_informer::wait_for;
use wisp_tests::{TestApiServer, Verb, pod};

const CRDS: &str = include_str!("../../fixtures/policy-report-crds.yaml");

fn pod_image(ns: &str, name: &str, image: &str) -> Value {
    let mut p = pod(ns, name);
    for c in p["spec"]["containers"].as_array_mut().unwrap() {
        c["image"] = json!(image);
    }
    p
}

/// A server with the report CRDs of both groups and `pods`.
async fn server(pods: Vec<Value>) -> TestApiServer {
    let server = TestApiServer::start().await.unwrap();
    for crd in wisp_kinds::yaml::documents(CRDS).unwrap() {
        server.create(crd).unwrap();
    }
    for p in pods {
        server.create(p).unwrap();
    }
    server
}

struct Host {
    host: app::Host,
    path: std::path::PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Host {
    /// A host with the image policy (latest tags only) on every pod; `reports` is the
    /// `policyReports` section (`None`: none).
    async fn start(server: &TestApiServer, reports: Option<&str>) -> Self {
        Self::start_with(server, reports, "").await
    }

    /// [`Host::start`], `extra` appended to the config.
    async fn start_with(server: &TestApiServer, reports: Option<&str>, extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = format!(
            r#"source: kube
informers:
  - {{name: pods, apiVersion: v1, kind: Pod}}
plugins:
  - name: policy
    module: {module}
    informers: [pods]
    settings: {{requireLimits: false}}
admin: {{listen: "127.0.0.1:0"}}
"#,
            module = plugin_path("image_policy").display(),
        );
        if let Some(r) = reports {
            config.push_str(&format!("policyReports: {r}\n"));
        }
        config.push_str(extra);
        let path = dir.path().join("wisp.yaml");
        std::fs::write(&path, config).unwrap();
        let config = Config::load(&path).unwrap();
        let (host, stop) = start_host(&config, server.client(), Some(path.clone())).await;
        Self {
            host,
            path,
            stop: Some(stop),
            _dir: dir,
        }
    }

    async fn metrics(&self) -> common::http::Reply {
        common::http::get(self.host.admin_addr.unwrap(), "/metrics").await
    }

    fn violations(&self) -> usize {
        self.host.admin.services.verdicts.len()
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.host
            .finish(tokio::time::Instant::now() + Duration::from_secs(5))
            .await;
    }
}

fn report(server: &TestApiServer, ns: &str) -> Option<Value> {
    server.get("openreports.io/v1alpha1", "Report", Some(ns), "wisp-policy")
}

/// (severity, result, pod name) of each result, in order.
fn results(r: &Value) -> Vec<(String, String, String)> {
    r["results"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .map(|x| {
                    (
                        x["severity"].as_str().unwrap_or("").to_owned(),
                        x["result"].as_str().unwrap_or("").to_owned(),
                        x["resources"][0]["name"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn high(name: &str) -> (String, String, String) {
    ("high".into(), "fail".into(), name.into())
}

#[tokio::test]
async fn reports_per_namespace_follow_the_verdicts_and_go_when_they_clear() {
    let server = server(vec![
        pod_image("shop", "bad-1", "nginx:latest"),
        pod_image("shop", "bad-2", "nginx"),
        pod_image("shop", "good-1", "nginx:1.27"),
        pod_image("ops", "bad-3", "nginx:latest"),
    ])
    .await;
    let host = Host::start(&server, Some("{interval: 100ms}")).await;
    until("a report in shop and in ops", || {
        report(&server, "shop").is_some_and(|r| results(&r) == vec![high("bad-1"), high("bad-2")])
            && report(&server, "ops").is_some_and(|r| results(&r) == vec![high("bad-3")])
    })
    .await;

    let shop = report(&server, "shop").unwrap();
    assert_eq!(
        shop["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "wisp"
    );
    assert_eq!(
        shop["summary"],
        json!({"pass": 0, "fail": 2, "warn": 0, "error": 0, "skip": 0})
    );
    let r = &shop["results"][0];
    let uid = server.get("v1", "Pod", Some("shop"), "bad-1").unwrap()["metadata"]["uid"].clone();
    assert_eq!(
        r["resources"],
        json!([{"apiVersion": "v1", "kind": "Pod", "namespace": "shop", "name": "bad-1", "uid": uid}])
    );
    assert_eq!(
        (
            r["source"].as_str(),
            r["policy"].as_str(),
            r["rule"].as_str()
        ),
        (Some("policy"), Some("policy"), Some("latest-tag"))
    );
    assert!(
        r["message"].as_str().unwrap().contains("nginx:latest"),
        "{r}"
    );
    assert!(
        r["timestamp"]["seconds"].as_i64().unwrap() > 1_700_000_000,
        "{r}"
    );
    let managers: Vec<&str> = shop["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(
        managers,
        ["wisp"],
        "written by the host's own field manager"
    );
    assert!(
        server
            .objects("openreports.io/v1alpha1", "ClusterReport")
            .is_empty(),
        "no cluster-scoped violations"
    );

    // Fixing a pod updates its namespace's report.
    server
        .update(pod_image("shop", "bad-1", "nginx:1.27"))
        .unwrap();
    until("shop's report updated", || {
        report(&server, "shop")
            .is_some_and(|r| results(&r) == vec![high("bad-2")] && r["summary"]["fail"] == 1)
    })
    .await;

    // Clearing every violation of a namespace deletes its report; the other stays.
    server
        .update(pod_image("ops", "bad-3", "nginx:1.27"))
        .unwrap();
    until("ops's report deleted", || report(&server, "ops").is_none()).await;
    assert!(report(&server, "shop").is_some());
    let status = host.host.admin.services.reports.clone();
    until("one report counted", || {
        status.written.load(std::sync::atomic::Ordering::Relaxed) == 1
    })
    .await;
    assert_eq!(
        status
            .write_errors
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "{:?}",
        status.last_error()
    );
    let m = host.metrics().await;
    assert_eq!(m.sample("wisp_policy_reports"), Some(1.0), "{}", m.body);
    assert_eq!(
        m.sample("wisp_policy_reports_write_errors_total"),
        Some(0.0),
        "{}",
        m.body
    );
    // The writer's settings are read at start: a reload that changes them is refused.
    let text = std::fs::read_to_string(&host.path).unwrap();
    std::fs::write(
        &host.path,
        text.replace("{interval: 100ms}", "{interval: 100ms, maxResults: 5}"),
    )
    .unwrap();
    let refused = host
        .host
        .reloader
        .get()
        .unwrap()
        .reload_config()
        .unwrap_err();
    assert!(
        format!("{refused:?}").contains("policyReports changed"),
        "{refused:?}"
    );
    host.stop().await;
}

#[tokio::test]
async fn the_wgpolicy_group_and_max_results_cut_the_results_but_not_the_summary() {
    let pods = (0..5)
        .map(|i| pod_image("shop", &format!("bad-{i}"), "nginx:latest"))
        .collect();
    let server = server(pods).await;
    let host = Host::start(
        &server,
        Some("{apiGroup: wgpolicyk8s.io, interval: 100ms, maxResults: 2}"),
    )
    .await;
    let get = || {
        server.get(
            "wgpolicyk8s.io/v1alpha2",
            "PolicyReport",
            Some("shop"),
            "wisp-policy",
        )
    };
    until("a PolicyReport with every violation counted", || {
        get().is_some_and(|r| r["summary"]["fail"] == 5)
    })
    .await;
    let r = get().unwrap();
    assert_eq!(results(&r), vec![high("bad-0"), high("bad-1")], "{r}");
    assert_eq!(r["metadata"]["annotations"]["wisp.io/results-omitted"], "3");
    assert!(
        report(&server, "shop").is_none(),
        "nothing in openreports.io"
    );

    // Below the bound again: all results, no annotation.
    for i in 2..5 {
        server
            .update(pod_image("shop", &format!("bad-{i}"), "nginx:1.27"))
            .unwrap();
    }
    until("not cut any more", || {
        get().is_some_and(|r| {
            r["summary"]["fail"] == 2
                && r["metadata"]["annotations"]
                    .get("wisp.io/results-omitted")
                    .is_none()
        })
    })
    .await;
    host.stop().await;
}

#[tokio::test]
async fn a_host_without_policy_reports_writes_none() {
    let server = server(vec![
        pod_image("shop", "bad-1", "nginx:latest"),
        pod_image("ops", "bad-2", "nginx:latest"),
    ])
    .await;
    let host = Host::start(&server, None).await;
    until("two violations", || host.violations() == 2).await;
    // No report writer was made (each one marks reports enabled as it is made): nothing writes
    // these violations, now or later.
    assert!(
        !host
            .host
            .admin
            .services
            .reports
            .enabled
            .load(std::sync::atomic::Ordering::Relaxed),
        "a report writer without policyReports"
    );
    for (v, k) in [
        ("openreports.io/v1alpha1", "Report"),
        ("openreports.io/v1alpha1", "ClusterReport"),
        ("wgpolicyk8s.io/v1alpha2", "PolicyReport"),
        ("wgpolicyk8s.io/v1alpha2", "ClusterPolicyReport"),
    ] {
        assert!(server.objects(v, k).is_empty(), "{k}");
    }
    assert!(
        !server
            .requests()
            .iter()
            .any(|r| r.path.contains("openreports.io") || r.path.contains("wgpolicyk8s.io")),
        "no request for reports"
    );
    let m = host.metrics().await;
    assert!(!m.body.contains("wisp_policy_reports"), "{}", m.body);
    host.stop().await;
}

fn report_requests(server: &TestApiServer) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.path.contains("/apis/openreports.io/"))
        .count()
}

/// `sharding: {mode: leader}`: a standby sends nothing for reports; once it leads it writes its
/// reports and deletes the one the previous leader left in a namespace with no violation now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_writes_no_report_and_a_new_leader_deletes_the_old_leaders_leftovers() {
    let server = server(vec![pod_image("shop", "bad-1", "nginx:latest")]).await;
    server
        .create(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "wisp", "namespace": "default"},
            "spec": {"holderIdentity": "other", "leaseDurationSeconds": 3600}}),
        )
        .unwrap();
    server
        .create(
            json!({"apiVersion": "openreports.io/v1alpha1", "kind": "Report",
            "metadata": {"name": "wisp-policy", "namespace": "old",
                         "labels": {"app.kubernetes.io/managed-by": "wisp"}},
            "summary": {"pass": 0, "fail": 1, "warn": 0, "error": 0, "skip": 0},
            "results": [{"policy": "policy", "rule": "latest-tag", "result": "fail"}]}),
        )
        .unwrap();
    let host = Host::start_with(
        &server,
        Some("{interval: 100ms}"),
        "sharding: {mode: leader, identity: a, leaseNamespace: default, leaseDuration: 2s, \
         renewDeadline: 1500ms, retryPeriod: 300ms}\n",
    )
    .await;
    // The writer runs a round every 100 ms, a standby's writing nothing: two more rounds, and
    // the one between them has ended (its requests, had it sent any, recorded).
    let rounds = || {
        host.host
            .admin
            .services
            .reports
            .rounds
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let seen = rounds();
    until("two rounds of the report writer since", || {
        rounds() >= seen + 2
    })
    .await;
    assert!(!host.host.leadership.as_ref().unwrap().is_leader());
    assert_eq!(report_requests(&server), 0, "a standby sends nothing");
    assert!(report(&server, "shop").is_none());

    // The other holder lets go: this replica leads, runs the plugin and writes.
    let mut lease = server
        .get("coordination.k8s.io/v1", "Lease", Some("default"), "wisp")
        .unwrap();
    lease["spec"]["holderIdentity"] = json!("");
    server.update(lease).unwrap();
    until("shop's report written and the leftover deleted", || {
        report(&server, "shop").is_some_and(|r| results(&r) == vec![high("bad-1")])
            && report(&server, "old").is_none()
    })
    .await;
    host.stop().await;
}

/// `sharding: {mode: shards}`: a member's reports carry its identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_member_names_its_reports_with_its_identity() {
    let server = server(vec![pod_image("shop", "bad-1", "nginx:latest")]).await;
    let host = Host::start_with(
        &server,
        Some("{interval: 100ms}"),
        "sharding: {mode: shards, identity: m1, leaseNamespace: default, leaseDuration: 4s, \
         renewDeadline: 3s, retryPeriod: 300ms}\n",
    )
    .await;
    let written = wait_for(patience(T), || {
        server
            .get(
                "openreports.io/v1alpha1",
                "Report",
                Some("shop"),
                "wisp-policy-m1",
            )
            .is_some_and(|r| results(&r) == vec![high("bad-1")])
    })
    .await;
    // This timed out in loaded runs when the member joined between its informer's list and
    // watch (fixed; see scale_out.rs::a_watch_after_the_shard_ranges_changed_since_the_list_relists):
    // say what the writer saw.
    let status = &host.host.admin.services.reports;
    assert!(
        written,
        "no member report after {T:?}: last write error {:?}, verdicts {}, server requests {:?}",
        status.last_error(),
        host.host.admin.services.verdicts.len(),
        server
            .requests()
            .iter()
            .filter(|r| r.path.contains("reports") || r.path.contains("leases"))
            .map(|r| format!("{} {}", r.method, r.path))
            .collect::<Vec<_>>()
    );
    assert!(report(&server, "shop").is_none(), "not the unsharded name");
    host.stop().await;
}

/// A write the server refuses is counted and sent again at the next interval.
#[tokio::test]
async fn failed_writes_are_counted_and_retried_at_the_next_interval() {
    let server = server(vec![pod_image("shop", "bad-1", "nginx:latest")]).await;
    let host = Host::start(&server, Some("{interval: 100ms}")).await;
    // From now on (discovery done, the informer not listed yet), the host's only requests of
    // this class are the report's applies (the plugin has no actions).
    server.faults().fail_next(Verb::Other, 403, None, 2);
    until("written after two refusals", || {
        report(&server, "shop").is_some_and(|r| results(&r) == vec![high("bad-1")])
    })
    .await;
    let status = host.host.admin.services.reports.clone();
    assert_eq!(
        status
            .write_errors
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    let last = status.last_error().unwrap();
    assert!(
        last.contains("apply Report shop/wisp-policy") && last.contains("403"),
        "{last}"
    );
    let m = host.metrics().await;
    assert_eq!(
        m.sample("wisp_policy_reports_write_errors_total"),
        Some(2.0),
        "{}",
        m.body
    );
    let applies = server
        .requests()
        .iter()
        .filter(|r| r.method == "PATCH" && r.path.contains("/reports/wisp-policy"))
        .count();
    assert_eq!(applies, 3, "two refused, one taken, none since (unchanged)");
    host.stop().await;
}

/// A verdict on a cluster-scoped object (put in the host's store as a plugin's would be: the
/// image policy only judges pods) goes to the ClusterReport, and its pass deletes it.
#[tokio::test]
async fn a_cluster_scoped_violation_goes_to_the_cluster_report() {
    use wisp_host::policy::{Severity, Subject};
    let server = server(vec![]).await;
    let host = Host::start(&server, Some("{interval: 100ms}")).await;
    let ns = server.get("v1", "Namespace", None, "default").unwrap();
    let subject = Subject {
        informer: "namespaces".into(),
        api_version: "v1".into(),
        kind: "Namespace".into(),
        namespace: None,
        name: "default".into(),
        uid: ns["metadata"]["uid"].as_str().unwrap().into(),
        resource_version: ns["metadata"]["resourceVersion"].as_str().unwrap().into(),
    };
    let verdicts = host.host.admin.services.verdicts.clone();
    let note = Some((Severity::Info, "no team label".to_owned()));
    verdicts
        .report("labels", "1", "team-label", subject.clone(), note)
        .unwrap();
    let get = || {
        server.get(
            "openreports.io/v1alpha1",
            "ClusterReport",
            None,
            "wisp-policy",
        )
    };
    until("the cluster report", || get().is_some()).await;
    let r = get().unwrap();
    assert_eq!(
        r["summary"],
        json!({"pass": 0, "fail": 0, "warn": 1, "error": 0, "skip": 0})
    );
    assert_eq!(
        results(&r),
        vec![("info".into(), "warn".into(), "default".into())]
    );
    assert_eq!(
        r["results"][0]["resources"],
        json!([{"apiVersion": "v1", "kind": "Namespace", "name": "default", "uid": ns["metadata"]["uid"]}])
    );
    assert!(
        server
            .objects("openreports.io/v1alpha1", "Report")
            .is_empty()
    );

    verdicts
        .report("labels", "1", "team-label", subject, None)
        .unwrap();
    until("the cluster report deleted", || get().is_none()).await;
    host.stop().await;
}

#[tokio::test]
async fn a_malformed_report_is_refused_by_the_report_crds_schema() {
    let server = server(vec![]).await;
    let reports: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        server.client_no_retry(),
        "default",
        &kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
            "openreports.io",
            "v1alpha1",
            "Report",
        )),
    );
    let malformed = json!({
        "apiVersion": "openreports.io/v1alpha1", "kind": "Report",
        "metadata": {"name": "bad", "namespace": "default"},
        "summary": {"pass": 0, "fail": "one"},
        "results": [{"policy": "p", "result": "fail", "severity": "urgent"}],
    });
    let refused = reports
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(malformed).unwrap(),
        )
        .await;
    match refused {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{}", status.message);
            assert_eq!(
                status.message,
                "Report.openreports.io \"bad\" is invalid: [results[0].severity: Unsupported value: \"urgent\": supported values: \"critical\", \"high\", \"low\", \"medium\", \"info\", summary.fail: Invalid value: \"string\": summary.fail in body must be of type integer: \"string\"]"
            );
        }
        other => panic!("a malformed report was accepted: {other:?}"),
    }
    let stored = server.get("openreports.io/v1alpha1", "Report", Some("default"), "bad");
    assert!(stored.is_none());
}
