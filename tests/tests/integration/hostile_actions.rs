//! Hostile plugins against the actions sandbox, end to end (test API server logging every
//! request, real `kube::Client`, compiled test-faults plugin):
//! - forged names and namespaces cannot send a request outside the granted namespace and kind,
//!   nor change its query (field manager, dry-run);
//! - the Events the host makes for verdicts need the plugin's grant and tokens, and a repeated
//!   Event is a count patch of the first;
//! - an Event reason that is not machine-readable (a newline forging a row) is refused unsent;
//! - a plugin refused in a loop neither floods the audit log nor evicts another plugin's entries.

use crate::actions_rig;
use crate::common;

use std::time::{Duration, Instant};

use actions_rig::*;
use common::http::get;
use common::rig::{counter, handled_all};
use common::*;
use serde_json::{Value, json};
use std::sync::atomic::AtomicU64;
use wisp_host::actions::ActionVerb;
use wisp_host::plugin::PluginSpec;
use wisp_host::plugin::status::PluginCounters;
use wisp_tests::{RecordedRequest, pod};

/// The segments of `path` as a server routes it: percent-decoded, then dot segments removed
/// (RFC 3986 5.2.4), as Go's `URL.Path` and path cleaning give the API server.
fn routed(path: &str) -> Vec<String> {
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            decoded.push((h * 16 + l) as u8);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    let decoded = String::from_utf8_lossy(&decoded).into_owned();
    let mut out: Vec<String> = Vec::new();
    for seg in decoded.split('/').filter(|s| !s.is_empty()) {
        match seg {
            "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s.to_owned()),
        }
    }
    out
}

fn event_writes(r: &Rig) -> Vec<RecordedRequest> {
    r.writes()
        .into_iter()
        .filter(|w| routed(&w.path).iter().any(|s| s == "events"))
        .collect()
}

/// test-faults patching label `n` on the first `ask-` pod it sees, with `overrides` of the
/// target, granted patch on pods in `shop` only.
fn forger(name: &str, overrides: Value) -> PluginSpec {
    let mut settings =
        json!({"mode": "actions", "namePrefix": "ask-", "actions": 1, "actionVerb": "patch"});
    for (k, v) in overrides.as_object().unwrap() {
        settings[k] = v.clone();
    }
    let mut s = spec(name, "test_faults", &["pods"], settings);
    s.actions.grants = vec![grant(&[ActionVerb::Patch], "v1", "Pod", Some(&["shop"]))];
    s
}

#[tokio::test]
async fn forged_names_cannot_send_a_request_outside_the_granted_namespace_or_change_its_query() {
    // kube-system exists from the start, as on a real cluster.
    let r = Rig::start(vec![namespace("shop", None), pod("kube-system", "coredns")]).await;
    let forged = [
        (
            "dotdot",
            json!({"targetName": "x/../../../../kube-system/pods/coredns"}),
        ),
        (
            "query",
            json!({"targetName": "ask-1?fieldManager=kube-controller-manager&dryRun=All"}),
        ),
        ("fragment", json!({"targetName": "ask-1#"})),
        (
            "percent",
            json!({"targetName": "x%2F..%2F..%2F..%2F..%2Fkube-system%2Fpods%2Fcoredns"}),
        ),
        (
            "namespace",
            json!({"targetNamespace": "shop/../kube-system", "targetName": "coredns"}),
        ),
    ];
    let hostile: Vec<_> = forged
        .iter()
        .map(|(n, o)| r.start_plugin(forger(n, o.clone())))
        .collect();
    let control = r.start_plugin(forger("control", json!({})));
    r.server.create(pod("shop", "ask-1")).unwrap();
    until("every plugin answered", || {
        hostile
            .iter()
            .chain([&control])
            .all(|h| answers(h).values().sum::<u64>() == 1)
    })
    .await;
    until("the control's patch applied", || {
        counter(&control, |c| &c.actions_applied) == 1
    })
    .await;
    // Every plugin has handled the pod and every action it had queued has been answered: a
    // stray request would have been recorded by now.
    until("every queued action sent and answered", || {
        hostile
            .iter()
            .chain([&control])
            .all(|h| settled(h, answers(h).get("queued").copied().unwrap_or(0)))
    })
    .await;

    // Every write the server saw stayed in shop's pods, with the host's query only.
    let writes = r.writes();
    for w in &writes {
        let segs = routed(&w.path);
        assert_eq!(
            segs.iter().take(5).map(String::as_str).collect::<Vec<_>>(),
            ["api", "v1", "namespaces", "shop", "pods"],
            "{} {} {:?} left shop's pods",
            w.method,
            w.path,
            w.query
        );
        assert_eq!(segs.len(), 6, "{w:?}");
        assert_eq!(
            w.query.keys().map(String::as_str).collect::<Vec<_>>(),
            ["fieldManager"],
            "{w:?}"
        );
        assert_eq!(w.query["fieldManager"], "wisp-control", "{w:?}");
    }
    assert_eq!(writes.len(), 1, "only the control's patch: {writes:?}");
    assert_eq!(r.server_label("kube-system", "coredns", "n"), None);
    assert_eq!(r.server_label("shop", "ask-1", "n").as_deref(), Some("0"));

    // Each forgery was refused as invalid, counted and audited, naming the field.
    for (h, (name, o)) in hostile.iter().zip(&forged) {
        assert_eq!(answers(h), [("invalid", 1)].into_iter().collect(), "{name}");
        assert_eq!(counter(h, |c| &c.actions_refused), 1, "{name}");
        let audit = r.services.audit.entries(Some(name));
        assert_eq!(audit.len(), 1, "{name}: {audit:?}");
        assert_eq!(audit[0].attempts, 0);
        let field = if o.get("targetNamespace").is_some() {
            "invalid: namespace \"shop/../kube-system\""
        } else {
            "invalid: name \""
        };
        assert!(audit[0].detail.starts_with(field), "{name}: {audit:?}");
    }
}

/// test-faults reporting `n` violations with changing messages on the first pod named with
/// `prefix` it sees, its violations made Events, at 1 action per second (burst 1).
fn churner(name: &str, prefix: &str, n: u32) -> PluginSpec {
    let mut s = spec(
        name,
        "test_faults",
        &["pods"],
        json!({"mode": "verdicts", "namePrefix": prefix, "actions": n}),
    );
    s.verdict_events = true;
    // Thousands of host calls in one handle call of a debug build.
    s.limits.deadline = Duration::from_secs(20);
    s.actions.per_second = 1.0;
    s.actions.burst = 1;
    s
}

/// Whether `w` is routed under `/api/v1/namespaces/{ns}/`.
fn in_namespace(w: &RecordedRequest, ns: &str) -> bool {
    routed(&w.path).starts_with(&[
        "api".to_owned(),
        "v1".to_owned(),
        "namespaces".to_owned(),
        ns.to_owned(),
    ])
}

#[tokio::test]
async fn verdict_events_need_the_plugins_grant_and_tokens() {
    let r = Rig::start(vec![namespace("shop", None), namespace("ops", None)]).await;
    let mut s = churner("churner", "v-", 2500);
    s.actions.grants = vec![grant(&[ActionVerb::Create], "v1", "Event", Some(&["shop"]))];
    let granted = r.start_plugin(s);
    // The same, with no grant, about a pod in ops.
    let ungranted = r.start_plugin(churner("ungranted", "w-", 20));
    let started = Instant::now();
    r.server.create(pod("shop", "v-1")).unwrap();
    r.server.create(pod("ops", "w-1")).unwrap();
    let ok = |h: &wisp_host::plugin::PluginHandle| {
        h.status()
            .guest_counter("verdict_total", &[("result", "ok")])
    };
    until("all verdicts reported", || {
        ok(&granted) == 2500 && ok(&ungranted) == 20
    })
    .await;
    let elapsed = started.elapsed().as_secs_f64();
    eprintln!(
        "2,520 verdicts in {elapsed:.2}s: {} Event requests",
        event_writes(&r).len()
    );
    // Each verdict's Event was refused at the gate (rate limited, or its queue full) or queued;
    // once every queued one has been sent and answered, no Event request is left to arrive.
    until("every verdict's Event refused or sent and answered", || {
        let c = |f: fn(&PluginCounters) -> &AtomicU64| counter(&granted, f);
        handled_all(&granted)
            && c(|c| &c.actions_rate_limited)
                + c(|c| &c.actions_refused)
                + c(|c| &c.actions_applied)
                + c(|c| &c.actions_failed)
                == 2500
    })
    .await;

    // 2,500 changed verdicts, each a new Event: only what the bucket allowed was sent.
    let events = event_writes(&r);
    let most = 1 + elapsed.ceil() as usize;
    assert!(
        (1..=most).contains(&events.len()),
        "{} Event requests for 2,500 changed verdicts in {elapsed:.2}s at 1/s burst 1",
        events.len()
    );
    assert!(
        events.iter().all(|w| in_namespace(w, "shop")),
        "an Event outside the granted namespace: {events:?}"
    );
    let limited = counter(&granted, |c| &c.actions_rate_limited);
    assert!(limited >= 2500 - most as u64, "{limited}");
    // Not granted: refused, counted, audited, not sent.
    assert_eq!(counter(&ungranted, |c| &c.actions_refused), 20);
    assert_eq!(counter(&ungranted, |c| &c.denied), 20);
    assert_eq!(counter(&ungranted, |c| &c.actions_applied), 0);
    let audit = r.services.audit.entries(Some("ungranted"));
    assert!(
        !audit.is_empty()
            && audit
                .iter()
                .all(|e| e.detail.contains("not granted") && e.attempts == 0),
        "{audit:?}"
    );
}

#[tokio::test]
async fn a_repeated_identical_event_is_a_count_patch_not_a_second_create() {
    let r = Rig::start(vec![]).await;
    let mut s = asker(3, "event");
    s.settings["eventMessage"] = json!("the same thing");
    s.actions.grants = vec![grant(
        &[ActionVerb::Create],
        "v1",
        "Event",
        Some(&["default"]),
    )];
    let h = r.start_plugin(s);
    r.server.create(pod("default", "ask-1")).unwrap();
    until("3 applied", || counter(&h, |c| &c.actions_applied) == 3).await;
    let events = r.server.objects("v1", "Event");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["count"], 3);
    assert_eq!(events[0]["message"], "the same thing");
    assert!(events[0]["lastTimestamp"].is_string());
    let methods: Vec<&str> = event_writes(&r)
        .iter()
        .map(|w| match w.method.as_str() {
            "POST" => "POST",
            "PATCH" => "PATCH",
            _ => "other",
        })
        .collect();
    assert_eq!(methods, ["POST", "PATCH", "PATCH"]);
    let name = events[0]["metadata"]["name"].as_str().unwrap();
    assert!(
        event_writes(&r)[1..]
            .iter()
            .all(|w| routed(&w.path).last().map(String::as_str) == Some(name))
    );
}

/// Event reasons are checked before any grant or request: a newline (a forged row of
/// `kubectl get events`), a carriage return, a space, a control character and 129 characters
/// (over the API server's 128) are each `invalid`, counted and audited naming the reason, and
/// no request carries them; the control's `Tested` is created.
#[tokio::test]
async fn event_reasons_forging_rows_or_over_the_api_servers_limit_are_refused_unsent() {
    let r = Rig::start(vec![]).await;
    let long = "R".repeat(129);
    let bad = [
        (
            "newline",
            "Tested\nWarning   Forged   pod/ask-1   all is well",
        ),
        ("return", "Tested\r"),
        ("space", "Two words"),
        ("escape", "Red\u{1b}[31m"),
        ("long", long.as_str()),
    ];
    let asking = |name: &str, reason: Option<&str>| {
        let mut settings =
            json!({"mode": "actions", "namePrefix": "ask-", "actions": 1, "actionVerb": "event"});
        if let Some(reason) = reason {
            settings["eventReason"] = json!(reason);
        }
        let mut s = spec(name, "test_faults", &["pods"], settings);
        s.actions.grants = vec![grant(
            &[ActionVerb::Create],
            "v1",
            "Event",
            Some(&["default"]),
        )];
        s
    };
    let hostile: Vec<_> = bad
        .iter()
        .map(|(n, reason)| r.start_plugin(asking(n, Some(reason))))
        .collect();
    let control = r.start_plugin(asking("control", None));
    r.server.create(pod("default", "ask-1")).unwrap();
    until("the control's Event created", || {
        counter(&control, |c| &c.actions_applied) == 1
    })
    .await;
    until("every hostile plugin answered", || {
        hostile
            .iter()
            .all(|h| answers(h).values().sum::<u64>() == 1)
    })
    .await;
    let events = r.server.objects("v1", "Event");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["reason"], "Tested");
    assert_eq!(event_writes(&r).len(), 1, "{:?}", event_writes(&r));
    for (h, (name, _)) in hostile.iter().zip(&bad) {
        assert_eq!(answers(h), [("invalid", 1)].into_iter().collect(), "{name}");
        assert_eq!(counter(h, |c| &c.actions_refused), 1, "{name}");
        let audit = r.services.audit.entries(Some(name));
        assert_eq!(audit.len(), 1, "{name}: {audit:?}");
        assert!(
            audit[0].detail.starts_with("invalid: reason \"")
                && audit[0].detail.contains("[A-Za-z0-9_,:]"),
            "{name}: {audit:?}"
        );
        assert!(!audit[0].detail.contains('\n'), "{name}: {audit:?}");
    }
}

#[tokio::test]
async fn a_plugin_refused_in_a_loop_cannot_flood_the_audit_log_or_evict_anothers_entries() {
    let r = Rig::start(vec![namespace("shop", Some("payments"))]).await;
    // The victim: one applied patch, audited.
    let mut s = spec(
        "labeler",
        "team_labeler",
        &["pods", "namespaces"],
        json!({}),
    );
    s.actions.grants = vec![grant(&[ActionVerb::Patch], "v1", "Pod", Some(&["shop"]))];
    let victim = r.start_plugin(s);
    r.server.create(pod("shop", "web-1")).unwrap();
    until("the victim's patch audited", || {
        r.services.audit.entries(Some("labeler")).len() == 1
    })
    .await;

    // The flooder: 20,000 patches it is not granted.
    let flood = 20_000;
    let mut s = asker(flood, "patch");
    s.name = "flooder".into();
    s.limits.deadline = Duration::from_secs(20);
    let flooder = r.start_plugin(s);
    let started = Instant::now();
    r.server.create(pod("default", "ask-1")).unwrap();
    until("all refused", || {
        counter(&flooder, |c| &c.actions_refused) == u64::from(flood)
    })
    .await;
    let elapsed = started.elapsed();
    eprintln!("{flood} refusals in {elapsed:?}");
    // Windows of similar refusals the flood spanned (its first opened at or after `started`).
    let windows = (elapsed.as_secs_f64() / REFUSAL_WINDOW.as_secs_f64()).floor() as u64 + 1;

    // Every refusal is accounted for, in at most two lines per window: the file gets the last
    // summary when its window is over, without anything else being written or read.
    let flooder_lines = || -> Vec<Value> {
        r.audit_lines()
            .into_iter()
            .filter(|l| l["plugin"] == "flooder")
            .collect()
    };
    let total =
        |lines: &[Value]| -> u64 { lines.iter().map(|l| l["count"].as_u64().unwrap_or(1)).sum() };
    until("every refusal summed up in the file", || {
        total(&flooder_lines()) == u64::from(flood)
    })
    .await;
    let lines = flooder_lines();
    eprintln!(
        "{} audit lines for {flood} refusals over {windows} windows: {:?}",
        lines.len(),
        lines.iter().map(|l| &l["count"]).collect::<Vec<_>>()
    );
    assert!(
        (2..=2 * windows).contains(&(lines.len() as u64)),
        "{} lines for {flood} refusals in {elapsed:?}",
        lines.len()
    );
    assert!(
        lines
            .iter()
            .all(|l| l["result"] == "refused"
                && l["detail"].as_str().unwrap().contains("not granted"))
    );
    let bytes = std::fs::metadata(&r.audit_file).unwrap().len();
    assert!(
        bytes <= 600 * (1 + 2 * windows),
        "{bytes} bytes of audit file"
    );

    // The victim's entry is still there, first on /audit, and its own.
    let all = get(r.admin, "/audit").await.json();
    let all = all.as_array().unwrap();
    assert_eq!(
        all[0]["plugin"],
        "labeler",
        "{:?}",
        &all[..all.len().min(3)]
    );
    assert_eq!(all[0]["result"], "applied");
    assert_eq!(all.len(), 1 + lines.len());
    assert_eq!(
        get(r.admin, "/audit?plugin=labeler")
            .await
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(counter(&victim, |c| &c.actions_applied), 1);
    // The plugin's own log of refusals is as bounded as the audit.
    let logged = flooder
        .status()
        .logs
        .lines()
        .iter()
        .filter(|l| l.contains("refused"))
        .count() as u64;
    assert!((1..=windows).contains(&logged), "{logged}");
}
