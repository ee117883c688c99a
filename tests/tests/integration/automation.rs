//! Policy verdicts and automation actions end to end: the test API server, real `kube::Client`s
//! for the informers and for the actions, the compiled plugins, and the admin endpoints that show
//! verdicts and the audit log.

use crate::actions_rig;
use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use actions_rig::*;
use common::http::get;
use common::rig::{counter, engine};
use common::*;
use serde_json::json;
use wisp_host::actions::ActionVerb;
use wisp_host::actions::audit::AuditResult;
use wisp_host::plugin::{PluginManager, PluginSpec};
use wisp_tests::{Verb, pod};
#[tokio::test]
async fn verdicts_appear_update_and_clear_and_show_on_verdicts_metrics_and_events() {
    let r = Rig::start_with(
        vec![
            pod_image("shop", "good-1", "nginx:1.27"),
            pod_image("shop", "bad-1", "nginx:latest"),
            pod_image("ops", "bad-2", "nginx"),
        ],
        Duration::from_secs(1),
    )
    .await;
    let mut s = spec(
        "policy",
        "image_policy",
        &["pods"],
        json!({"requireLimits": false}),
    );
    s.verdict_events = true;
    // Verdict Events are the plugin's actions: they need its grant.
    s.actions.grants = vec![grant(
        &[ActionVerb::Create],
        "v1",
        "Event",
        Some(&["shop", "ops"]),
    )];
    s.resync = Duration::from_secs(1);
    let h = r.start_plugin(s);
    let latest = |k: &str| (k.to_owned(), "latest-tag".to_owned(), "high".to_owned());
    until("two violations", || {
        r.verdicts("policy") == vec![latest("ops/bad-2"), latest("shop/bad-1")]
    })
    .await;

    // On /verdicts, filtered by plugin and namespace, with the object's identity.
    let v = get(r.admin, "/verdicts?plugin=policy&namespace=shop")
        .await
        .json();
    let v = v.as_array().unwrap();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0]["name"], "bad-1");
    assert_eq!(v[0]["kind"], "Pod");
    assert_eq!(v[0]["rule"], "latest-tag");
    assert_eq!(v[0]["severity"], "high");
    assert!(
        v[0]["message"].as_str().unwrap().contains("nginx:latest"),
        "{v:?}"
    );
    let uid = r.server.get("v1", "Pod", Some("shop"), "bad-1").unwrap()["metadata"]["uid"].clone();
    assert_eq!(v[0]["uid"], uid);
    assert_eq!(
        get(r.admin, "/verdicts?plugin=other").await.json(),
        json!([])
    );
    let m = get(r.admin, "/metrics").await;
    assert_eq!(
        m.sample(r#"wisp_policy_violations{plugin="policy",rule="latest-tag",severity="high"}"#),
        Some(2.0),
        "{}",
        m.body
    );

    // Each violation became one Warning Event on its object.
    until("two events", || r.server.objects("v1", "Event").len() == 2).await;
    let events = r.server.objects("v1", "Event");
    let e = events
        .iter()
        .find(|e| e["involvedObject"]["name"] == "bad-1")
        .expect("an event about bad-1");
    assert_eq!(e["metadata"]["namespace"], "shop");
    assert_eq!(e["involvedObject"]["uid"], uid);
    assert_eq!(
        (e["type"].as_str(), e["reason"].as_str()),
        (Some("Warning"), Some("PolicyViolation"))
    );

    // A resync re-evaluates: more verdicts are reported with nothing changed, and no new Event.
    let reported = counter(&h, |c| &c.verdicts);
    until("re-evaluated at a resync", || {
        counter(&h, |c| &c.verdicts) >= reported + 3
    })
    .await;
    assert_eq!(
        r.server.objects("v1", "Event").len(),
        2,
        "an unchanged violation is not re-sent"
    );

    // Fixing a pod clears its verdict; a new violation appears; a deletion clears.
    r.server
        .update(pod_image("shop", "bad-1", "nginx:1.27"))
        .unwrap();
    r.server
        .update(pod_image("shop", "good-1", "busybox"))
        .unwrap();
    until("bad-1 fixed, good-1 broken", || {
        r.verdicts("policy") == vec![latest("ops/bad-2"), latest("shop/good-1")]
    })
    .await;
    r.server.delete("v1", "Pod", Some("ops"), "bad-2").unwrap();
    until("bad-2's verdict gone with it", || {
        r.verdicts("policy") == vec![latest("shop/good-1")]
    })
    .await;
    let m = get(r.admin, "/metrics").await;
    assert_eq!(
        m.sample(r#"wisp_policy_violations{plugin="policy",rule="latest-tag",severity="high"}"#),
        Some(1.0)
    );

    // A removed plugin's verdicts go with it.
    h.stop();
    assert!(r.verdicts("policy").is_empty());
}

#[tokio::test]
async fn an_action_is_applied_and_its_effect_comes_back_through_the_watch() {
    let r = Rig::start(vec![
        namespace("shop", Some("payments")),
        pod("shop", "web-1"),
        pod("shop", "web-2"),
    ])
    .await;
    let mut s = spec(
        "labeler",
        "team_labeler",
        &["pods", "namespaces"],
        json!({"events": true}),
    );
    s.actions.grants = vec![
        grant(&[ActionVerb::Patch], "v1", "Pod", Some(&["shop"])),
        grant(&[ActionVerb::Create], "v1", "Event", Some(&["shop"])),
    ];
    let h = r.start_plugin(s);
    for name in ["web-1", "web-2"] {
        until("label on the server", || {
            r.server_label("shop", name, "team").as_deref() == Some("payments")
        })
        .await;
    }
    // The patch came back through the watch into the cache.
    until("label in the cache", || {
        ["web-1", "web-2"].iter().all(|n| {
            r.pods
                .cache()
                .get_by_key(&format!("shop/{n}"))
                .is_some_and(|p| {
                    p.meta()
                        .labels()
                        .any(|(k, v)| k == "team" && v == "payments")
                })
        })
    })
    .await;
    until("2 patches and 2 events applied", || {
        counter(&h, |c| &c.actions_applied) == 4
    })
    .await;
    let patches: Vec<_> = r
        .writes()
        .into_iter()
        .filter(|w| w.method == "PATCH")
        .collect();
    assert_eq!(
        patches.len(),
        2,
        "one patch per pod, none repeated: {patches:?}"
    );
    assert_eq!(
        patches[0].query.get("fieldManager").map(String::as_str),
        Some("wisp-labeler")
    );
    let events = r.server.objects("v1", "Event");
    assert_eq!(events.len(), 2);
    assert!(
        events
            .iter()
            .all(|e| e["reason"] == "TeamLabelled" && e["type"] == "Normal")
    );

    // The namespace's label changes: the pods follow.
    r.server.update(namespace("shop", Some("billing"))).unwrap();
    for name in ["web-1", "web-2"] {
        until("new label on the server", || {
            r.server_label("shop", name, "team").as_deref() == Some("billing")
        })
        .await;
    }

    // The audit log (file, ring and /audit) lists each action with plugin, version and result.
    until("8 actions audited", || {
        r.services.audit.entries(Some("labeler")).len() == 8
    })
    .await;
    let lines = r.audit_lines();
    assert_eq!(lines.len(), 8);
    for l in &lines {
        assert_eq!(l["plugin"], "labeler");
        assert_eq!(l["version"], "0.1.0");
        assert_eq!(l["result"], "applied", "{l}");
        assert_eq!(l["namespace"], "shop");
        assert_eq!(l["attempts"], 1);
    }
    let verbs: BTreeMap<String, usize> = lines.iter().fold(BTreeMap::new(), |mut m, l| {
        *m.entry(l["verb"].as_str().unwrap().to_owned()).or_default() += 1;
        m
    });
    assert_eq!(
        verbs,
        BTreeMap::from([("create".into(), 4), ("patch".into(), 4)])
    );
    let over_http = get(r.admin, "/audit?plugin=labeler").await.json();
    assert_eq!(over_http.as_array().unwrap().len(), 8);
    assert_eq!(get(r.admin, "/audit?plugin=nobody").await.json(), json!([]));
}

#[tokio::test]
async fn an_ungranted_action_is_refused_and_nothing_reaches_the_server() {
    let r = Rig::start(vec![
        namespace("shop", Some("payments")),
        pod("shop", "web-1"),
    ])
    .await;
    let mut s = spec(
        "labeler",
        "team_labeler",
        &["pods", "namespaces"],
        json!({}),
    );
    // Granted on pods elsewhere, and on ConfigMaps here: neither covers pods in shop.
    s.actions.grants = vec![
        grant(&[ActionVerb::Patch], "v1", "Pod", Some(&["elsewhere"])),
        grant(
            &[ActionVerb::Patch, ActionVerb::Apply],
            "v1",
            "ConfigMap",
            Some(&["shop"]),
        ),
    ];
    let h = r.start_plugin(s);
    // The host counts a refusal inside the call; the plugin counts the answer it got after the
    // call returns: wait until both have.
    until("refused, and the plugin told so", || {
        let host = counter(&h, |c| &c.actions_refused);
        host >= 1
            && h.status()
                .guest_counter("refused_total", &[("reason", "not-granted")])
                == host
    })
    .await;
    assert!(counter(&h, |c| &c.denied) >= 1);
    let audit = r.services.audit.entries(Some("labeler"));
    assert_eq!(audit[0].result, AuditResult::Refused);
    assert!(
        audit[0]
            .detail
            .contains("grants plugin \"labeler\" no \"patch\" on v1 Pod in namespace \"shop\""),
        "{audit:?}"
    );
    assert!(
        h.status()
            .logs
            .lines()
            .iter()
            .any(|l| l.contains("refused: not granted")),
        "{:?}",
        h.status().logs.lines()
    );
    // Once the labeler has handled every notification and each patch it had accepted (none,
    // if the refusals held) has been sent and answered, a stray request would have arrived:
    // nothing was written.
    until("the labeler settled", || {
        h.has_synced() && settled(&h, h.status().guest_counter("labelled_total", &[]))
    })
    .await;
    assert!(r.writes().is_empty(), "{:?}", r.writes());
    assert_eq!(r.server_label("shop", "web-1", "team"), None);
}

#[tokio::test]
async fn the_rate_limit_holds_under_a_plugin_asking_for_a_thousand_actions() {
    let r = Rig::start(vec![]).await;
    let mut s = asker(1000, "patch");
    s.actions.grants = vec![grant(&[ActionVerb::Patch], "v1", "Pod", None)];
    s.actions.per_second = 5.0;
    s.actions.burst = 10;
    // A thousand actions in one call: ~18 µs each in a debug host (a 5 ms deadline cut the
    // call after 282), a third of the default 50 ms on a quiet machine and all of it on a
    // loaded CI one, where the call was cut, the notification skipped and the answers stopped
    // short of 1000. The deadline is not what this tests.
    s.limits.deadline = Duration::from_secs(2);
    let h = r.start_plugin(s);
    let started = Instant::now();
    r.server.create(pod("default", "ask-1")).unwrap();
    let all = wisp_host::informer::shared_informer::wait_for(patience(T), || {
        answers(&h).values().sum::<u64>() == 1000
    })
    .await;
    assert!(
        all,
        "not 1000 answers: {:?}, deadline hits {}",
        answers(&h),
        counter(&h, |c| &c.deadline_hits)
    );
    assert_eq!(counter(&h, |c| &c.deadline_hits), 0);
    let elapsed = started.elapsed().as_secs_f64();
    let a = answers(&h);
    let queued = a.get("queued").copied().unwrap_or(0);
    // The burst, plus what the rate refilled meanwhile.
    let most = 10 + (5.0 * elapsed).ceil() as u64;
    assert!((10..=most).contains(&queued), "{a:?} in {elapsed:.2}s");
    assert_eq!(a.get("rate-limited").copied(), Some(1000 - queued), "{a:?}");
    assert_eq!(counter(&h, |c| &c.actions_rate_limited), 1000 - queued);
    until("queued ones applied", || {
        counter(&h, |c| &c.actions_applied) == queued
    })
    .await;
    let patches = r
        .writes()
        .into_iter()
        .filter(|w| w.method == "PATCH")
        .count() as u64;
    assert_eq!(patches, queued, "only accepted actions reach the server");
    // Rate-limit refusals are counted, not audited one by one.
    assert_eq!(r.services.audit.entries(Some("asker")).len() as u64, queued);
}

#[tokio::test]
async fn dry_run_logs_and_audits_and_changes_nothing() {
    let r = Rig::start(vec![]).await;
    let mut s = asker(20, "patch");
    s.actions.grants = vec![grant(&[ActionVerb::Patch], "v1", "Pod", Some(&["default"]))];
    s.actions.burst = 100;
    s.actions.dry_run = true;
    let h = r.start_plugin(s);
    r.server.create(pod("default", "ask-1")).unwrap();
    until("20 answers", || answers(&h).values().sum::<u64>() == 20).await;
    assert_eq!(answers(&h), BTreeMap::from([("dry-run", 20)]));
    assert_eq!(counter(&h, |c| &c.actions_dry_run), 20);
    let audit = r.services.audit.entries(Some("asker"));
    assert_eq!(audit.len(), 20);
    assert!(
        audit
            .iter()
            .all(|e| e.result == AuditResult::DryRun && e.attempts == 0)
    );
    // On condition of the version the plugin saw.
    let rv =
        r.server.get("v1", "Pod", Some("default"), "ask-1").unwrap()["metadata"]["resourceVersion"]
            .clone();
    let sent =
        format!(r#"would send {{"metadata":{{"labels":{{"n":"0"}},"resourceVersion":{rv}}}}}"#);
    assert!(audit[0].detail.contains(&sent), "{:?}", audit[0]);
    // Every action the plugin was told was queued (none, in dry-run) has been sent and answered:
    // a stray request would have arrived.
    until("the asker settled", || {
        settled(&h, answers(&h).get("queued").copied().unwrap_or(0))
    })
    .await;
    assert!(r.writes().is_empty(), "{:?}", r.writes());
    assert_eq!(r.server_label("default", "ask-1", "n"), None);
}

#[tokio::test]
async fn throttled_and_failing_requests_are_retried_with_backoff() {
    let r = Rig::start(vec![]).await;
    let mut s = asker(1, "patch");
    s.actions.grants = vec![grant(&[ActionVerb::Patch], "v1", "Pod", None)];
    s.actions.backoff = Duration::from_millis(20);
    let h = r.start_plugin(s);
    r.server.faults().fail_next(Verb::Other, 429, Some(0), 1);
    r.server.faults().fail_next(Verb::Other, 500, None, 1);
    r.server.create(pod("default", "ask-1")).unwrap();
    until("applied", || counter(&h, |c| &c.actions_applied) == 1).await;
    assert_eq!(
        r.server_label("default", "ask-1", "n").as_deref(),
        Some("0")
    );
    let audit = r.services.audit.entries(Some("asker"));
    assert_eq!(
        (audit.len(), audit[0].result, audit[0].attempts),
        (1, AuditResult::Applied, 3),
        "{audit:?}"
    );

    // A refusal that retrying cannot fix (403) fails at once, audited with the server's reason.
    r.server.faults().fail_next(Verb::Other, 403, None, 1);
    r.server.create(pod("default", "ask-2")).unwrap();
    until("failed", || counter(&h, |c| &c.actions_failed) == 1).await;
    let last = r.services.audit.entries(Some("asker")).pop().unwrap();
    assert_eq!(
        (last.result, last.attempts, last.name.as_str()),
        (AuditResult::Failed, 1, "ask-2")
    );
    assert!(last.detail.starts_with("HTTP 403"), "{last:?}");
    assert!(
        h.status()
            .last_error()
            .unwrap()
            .contains("failed: HTTP 403")
    );
}

/// A patch is conditional on the version the plugin's cache held when it asked. The plugin's own
/// patches in a row all land; one decided on a version someone else has since replaced gets the
/// API server's 409 and is not retried, and the plugin, told of the change, asks again.
#[tokio::test]
async fn a_patch_decided_on_a_replaced_version_conflicts_and_is_not_retried() {
    let r = Rig::start(vec![]).await;
    let mut s = asker(3, "patch");
    s.actions.grants = vec![grant(&[ActionVerb::Patch], "v1", "Pod", None)];
    s.actions.backoff = Duration::from_millis(500);
    let h = r.start_plugin(s);
    let audit_of = |name: &str| -> Vec<(AuditResult, u32, String)> {
        r.services
            .audit
            .entries(Some("asker"))
            .into_iter()
            .filter(|e| e.name == name)
            .map(|e| (e.result, e.attempts, e.detail))
            .collect()
    };

    // Three patches of one object in one call: each goes on condition of the version the
    // previous one made.
    r.server.create(pod("default", "ask-1")).unwrap();
    until("3 applied", || counter(&h, |c| &c.actions_applied) == 3).await;
    assert_eq!(
        r.server_label("default", "ask-1", "n").as_deref(),
        Some("2")
    );
    let a = audit_of("ask-1");
    assert!(
        a.iter()
            .all(|(r, attempts, _)| *r == AuditResult::Applied && *attempts == 1),
        "{a:?}"
    );

    // Someone else changes ask-2 after the plugin asked and before its patches get through
    // (the first attempt meets a 503; the retry comes half a second later).
    r.server.faults().fail_next(Verb::Other, 503, None, 1);
    r.server.create(pod("default", "ask-2")).unwrap();
    until("asked about ask-2", || {
        answers(&h).get("queued").copied() == Some(6)
    })
    .await;
    let mut p = r.server.get("v1", "Pod", Some("default"), "ask-2").unwrap();
    p["metadata"]["annotations"] = json!({"changed-by": "someone"});
    r.server.update(p).unwrap();
    until("asked again and settled", || {
        counter(&h, |c| &c.actions_applied) == 6 && counter(&h, |c| &c.actions_failed) == 3
    })
    .await;
    let a = audit_of("ask-2");
    let shape: Vec<_> = a.iter().map(|(r, n, _)| (*r, *n)).collect();
    use AuditResult::{Applied, Failed};
    assert_eq!(
        shape,
        [
            (Failed, 2),
            (Failed, 1),
            (Failed, 1),
            (Applied, 1),
            (Applied, 1),
            (Applied, 1)
        ],
        "{a:?}"
    );
    for (_, _, detail) in &a[..3] {
        assert!(
            detail.starts_with("HTTP 409") && detail.contains("not retried"),
            "{detail}"
        );
    }
    let now = r.server.get("v1", "Pod", Some("default"), "ask-2").unwrap();
    assert_eq!(now["metadata"]["labels"]["n"], "2");
    assert_eq!(now["metadata"]["annotations"]["changed-by"], "someone");
}

/// test-faults applying `n` ConfigMaps `<pod>-report` per pod it sees, granted in `default`.
fn applier(n: u32) -> PluginSpec {
    let mut s = asker(n, "apply");
    s.actions.grants = vec![grant(
        &[ActionVerb::Apply],
        "v1",
        "ConfigMap",
        Some(&["default"]),
    )];
    s
}

#[tokio::test]
async fn server_side_apply_creates_and_updates_the_plugins_object_and_events_are_recorded() {
    let r = Rig::start(vec![]).await;
    let h = r.start_plugin(applier(2));
    r.server.create(pod("default", "ask-1")).unwrap();
    until("2 applies", || counter(&h, |c| &c.actions_applied) == 2).await;
    let cm = r
        .server
        .get("v1", "ConfigMap", Some("default"), "ask-1-report")
        .expect("created by apply");
    assert_eq!(cm["data"]["n"], "1", "the second apply updated it");
    let applies: Vec<_> = r
        .writes()
        .into_iter()
        .filter(|w| w.method == "PATCH")
        .collect();
    assert_eq!(applies.len(), 2);
    assert_eq!(
        applies[0].query.get("fieldManager").map(String::as_str),
        Some("wisp-asker")
    );
    assert!(
        applies[0].query.get("force").is_none_or(|f| f == "false"),
        "never forced"
    );

    // Events need their own grant.
    let mut s = asker(1, "event");
    s.name = "eventer".into();
    s.actions.grants = vec![grant(
        &[ActionVerb::Create],
        "v1",
        "Event",
        Some(&["default"]),
    )];
    let e = r.start_plugin(s);
    until("event applied", || counter(&e, |c| &c.actions_applied) == 1).await;
    let events = r.server.objects("v1", "Event");
    assert_eq!(events.len(), 1, "one per pod it saw: {events:?}");
    let about_1 = events
        .iter()
        .find(|ev| ev["involvedObject"]["name"] == "ask-1")
        .unwrap();
    assert_eq!(about_1["type"], "Warning");
    assert_eq!(about_1["reason"], "Tested");
    assert_eq!(
        about_1["involvedObject"]["uid"],
        r.server.get("v1", "Pod", Some("default"), "ask-1").unwrap()["metadata"]["uid"],
        "the uid comes from the cache"
    );
}

/// A server-side apply that conflicts with another field manager comes back the same however
/// often it is sent (Wisp never forces): it fails at once, audited with the server's conflict,
/// instead of being retried like a resourceVersion conflict.
#[tokio::test]
async fn an_apply_conflicting_with_another_field_manager_fails_at_once() {
    let r = Rig::start(vec![]).await;
    r.server
        .create(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "ask-1-report", "namespace": "default"},
            "data": {"n": "taken"}}))
        .unwrap();
    let h = r.start_plugin(applier(1));
    r.server.create(pod("default", "ask-1")).unwrap();
    until("failed", || counter(&h, |c| &c.actions_failed) == 1).await;
    let last = r.services.audit.entries(Some("asker")).pop().unwrap();
    assert_eq!(
        (last.result, last.attempts),
        (AuditResult::Failed, 1),
        "{last:?}"
    );
    assert!(
        last.detail.starts_with("HTTP 409") && last.detail.contains("conflict"),
        "{last:?}"
    );
    let cm = r
        .server
        .get("v1", "ConfigMap", Some("default"), "ask-1-report")
        .unwrap();
    assert_eq!(
        cm["data"]["n"], "taken",
        "the other manager's field is kept"
    );
}

#[tokio::test]
async fn bad_actions_are_refused_as_invalid_and_a_host_without_an_api_server_says_so() {
    let r = Rig::start(vec![]).await;
    let mut s = spec("asker", "test_faults", &["pods"], json!({"mode": "probe"}));
    s.actions.grants = vec![grant(&[ActionVerb::Patch], "v1", "Pod", None)];
    let h = r.start_plugin(s);
    r.server.create(pod("default", "p-1")).unwrap();
    until("probed", || {
        h.status().guest_counter(
            "probe_total",
            &[("what", "ungranted-action"), ("result", "refused")],
        ) == 1
    })
    .await;
    assert_eq!(
        h.status().guest_counter(
            "probe_total",
            &[("what", "ungranted-action"), ("result", "allowed")]
        ),
        0
    );

    // A label key that is not a qualified name is refused before anything is sent.
    r.server.create(namespace("shop", Some("x"))).unwrap();
    let mut bad_ns = namespace("lab", None);
    bad_ns["metadata"]["labels"] = json!({"not a key!": "x"});
    r.server.create(bad_ns).unwrap();
    r.server.create(pod("lab", "web-1")).unwrap();
    let mut s = spec(
        "labeler",
        "team_labeler",
        &["pods", "namespaces"],
        json!({"label": "not a key!"}),
    );
    s.actions.grants = vec![grant(&[ActionVerb::Patch], "v1", "Pod", None)];
    let l = r.start_plugin(s);
    until("invalid", || {
        l.status()
            .guest_counter("refused_total", &[("reason", "invalid")])
            >= 1
    })
    .await;
    let audit = r.services.audit.entries(Some("labeler"));
    assert_eq!(audit[0].result, AuditResult::Refused);
    assert!(audit[0].detail.contains("key \"not a key!\""), "{audit:?}");
    assert!(r.writes().into_iter().all(|w| w.method != "PATCH"));

    // No API server (e.g. a dir: source): refused as unavailable, unless dry-run.
    let mut manager = PluginManager::new(engine());
    manager.add_informer(r.pods.clone());
    let mut s = asker(3, "patch");
    s.actions.grants = vec![grant(&[ActionVerb::Patch], "v1", "Pod", None)];
    let offline = manager.start(s).unwrap();
    r.server.create(pod("default", "ask-9")).unwrap();
    until("3 answers", || answers(&offline).values().sum::<u64>() == 3).await;
    assert_eq!(answers(&offline), BTreeMap::from([("unavailable", 3)]));
}
