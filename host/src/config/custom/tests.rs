//! The confinement and caps of custom resources' configs.

use super::*;
use serde_json::json;

/// A host config in a directory of its own with a module `p.wasm`, custom resources on and
/// allowed modules from that directory, `custom` added to `customResources`.
fn host(custom: &str) -> (tempfile::TempDir, Config) {
    host_with(&format!(", modulePaths: [.]{custom}"))
}

/// As [`host`], with only `custom` in `customResources` besides `enabled`; the directory
/// has an empty directory `modules` besides.
fn host_with(custom: &str) -> (tempfile::TempDir, Config) {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("p.wasm"), b"\0asm").unwrap();
    std::fs::create_dir(d.path().join("modules")).unwrap();
    let text = format!(
        "source: kube\ninformers: [{{name: ns, apiVersion: v1, kind: Namespace}}]\n\
         customResources: {{enabled: true{custom}}}\n"
    );
    let c = Config::parse(&text, "wisp.yaml", d.path()).unwrap();
    (d, c)
}

fn wisp_plugin(ns: Option<&str>) -> CustomRef {
    CustomRef {
        kind: if ns.is_some() {
            "WispPlugin"
        } else {
            "ClusterWispPlugin"
        },
        namespace: ns.map(str::to_owned),
        name: "p".into(),
    }
}

fn spec(extra: serde_json::Value) -> serde_json::Value {
    let mut s = json!({"module": "p.wasm",
        "informers": [{"name": "pods", "apiVersion": "v1", "kind": "Pod"}]});
    for (k, v) in extra.as_object().unwrap() {
        s[k] = v.clone();
    }
    s
}

fn refusal(c: &Config, cr: &CustomRef, extra: serde_json::Value) -> (&'static str, String) {
    let r = c.custom_plugin(cr, &spec(extra)).unwrap_err();
    (r.reason, r.to_string())
}

#[test]
fn a_wisp_plugin_is_confined_to_its_namespace_and_a_cluster_one_is_not() {
    let (_d, c) = host(", allowedGrants: [{verbs: [patch], apiVersion: v1, kind: Pod}]");
    let grants = json!({"grants": [{"verbs": ["patch"], "apiVersion": "v1", "kind": "Pod"}]});
    let team = wisp_plugin(Some("team-a"));
    let got = c
        .custom_plugin(&team, &spec(json!({"actions": grants})))
        .unwrap();
    assert_eq!(got.plugins[0].name, "team-a/p");
    assert_eq!(got.informers[0].namespaces, Some(vec!["team-a".to_owned()]));
    let g = &got.plugins[0].actions.grants[0];
    assert_eq!(g.namespaces, Some(vec!["team-a".to_owned()]));
    let cluster = c
        .custom_plugin(&wisp_plugin(None), &spec(json!({"actions": grants})))
        .unwrap();
    assert_eq!(cluster.plugins[0].name, "p");
    assert_eq!(cluster.informers[0].namespaces, None);

    let other = json!({"informers": [{"name": "pods", "apiVersion": "v1", "kind": "Pod",
        "namespaces": ["team-a", "kube-system"]}]});
    let (reason, e) = refusal(&c, &team, other);
    assert_eq!(reason, "NotAllowed");
    assert_eq!(
        e,
        "WispPlugin team-a/p: spec.informers[0].namespaces: a WispPlugin sees and acts only \
         in its own namespace \"team-a\"; it asks for \"kube-system\""
    );
    let nodes = json!({"informers": [{"name": "n", "apiVersion": "v1", "kind": "Node"}]});
    let (reason, e) = refusal(&c, &team, nodes);
    assert_eq!(reason, "NotAllowed");
    assert!(
        e.contains("spec.informers[0].kind: Node is cluster-scoped"),
        "{e}"
    );
    let elsewhere = json!({"grants": [{"verbs": ["patch"], "apiVersion": "v1", "kind": "Pod",
        "namespaces": ["prod"]}]});
    let (_, e) = refusal(&c, &team, json!({"actions": elsewhere}));
    assert!(e.contains("spec.actions.grants[0].namespaces: "), "{e}");
}

#[test]
fn a_grant_outside_the_allowed_grants_is_refused() {
    let (_d, c) = host(
        ", allowedGrants: [{verbs: [patch], apiVersion: v1, kind: Pod, namespaces: [team-a]}]",
    );
    let ask = |verbs: serde_json::Value, kind: &str| json!({"actions": {"grants": [{"verbs": verbs, "apiVersion": "v1", "kind": kind}]}});
    let team = wisp_plugin(Some("team-a"));
    assert!(
        c.custom_plugin(&team, &spec(ask(json!(["patch"]), "Pod")))
            .is_ok()
    );
    for (verbs, kind, cr) in [
        (json!(["patch", "apply"]), "Pod", &team),
        (json!(["patch"]), "ConfigMap", &team),
        (json!(["patch"]), "Pod", &wisp_plugin(None)),
        (json!(["patch"]), "Pod", &wisp_plugin(Some("team-b"))),
    ] {
        let (reason, e) = refusal(&c, cr, ask(verbs, kind));
        assert_eq!(reason, "NotAllowed", "{e}");
        assert!(
            e.contains("spec.actions.grants[0]: ")
                && e.contains("customResources.allowedGrants does not cover it"),
            "{e}"
        );
    }
}

#[test]
fn a_lease_grant_is_confined_to_the_namespace_before_it_is_checked_against_the_hosts_lease() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("p.wasm"), b"\0asm").unwrap();
    let text = "source: kube\ninformers: [{name: ns, apiVersion: v1, kind: Namespace}]\n\
        sharding: {mode: leader, leaseNamespace: wisp}\n\
        customResources: {enabled: true, modulePaths: [.], allowedGrants: \
        [{verbs: [patch], apiVersion: coordination.k8s.io/v1, kind: Lease}]}\n";
    let c = Config::parse(text, "wisp.yaml", d.path()).unwrap();
    let lease = |namespaces: Option<&str>| {
        let mut g = json!({"verbs": ["patch"], "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease"});
        if let Some(ns) = namespaces {
            g["namespaces"] = json!([ns]);
        }
        json!({"actions": {"grants": [g]}})
    };
    let got = c
        .custom_plugin(&wisp_plugin(Some("team-a")), &spec(lease(None)))
        .unwrap();
    let g = &got.plugins[0].actions.grants[0];
    assert_eq!(g.namespaces, Some(vec!["team-a".to_owned()]));

    let (reason, e) = refusal(&c, &wisp_plugin(Some("team-a")), lease(Some("wisp")));
    assert_eq!(reason, "NotAllowed", "{e}");
    assert!(
        e.ends_with("in its own namespace \"team-a\"; it asks for \"wisp\""),
        "{e}"
    );
    for (cr, namespaces) in [
        (wisp_plugin(Some("wisp")), None),
        (wisp_plugin(None), Some("wisp")),
        (wisp_plugin(None), None),
    ] {
        let (_, e) = refusal(&c, &cr, lease(namespaces));
        assert!(
            e.contains("spec.actions.grants[0]: ")
                && e.contains("in namespace \"wisp\" reaches the host's own coordination"),
            "{e}"
        );
    }
}

#[test]
fn limits_over_max_limits_are_refused_and_omitted_ones_capped() {
    let (_d, c) = host(
        ", maxLimits: {memory: 32Mi, deadline: 20ms, deadlinePerNotification: 1ms, \
         startupDeadline: 1s, batch: 8, queue: 100, queueBytes: 1Mi, quarantineAfter: 10, \
         actionsPerSecond: 2, actionsBurst: 4, retries: 2, actionsQueue: 50, actionsRetries: 1}",
    );
    let team = wisp_plugin(Some("t"));
    let got = c.custom_plugin(&team, &spec(json!({}))).unwrap();
    let p = &got.plugins[0];
    assert_eq!(
        p.limits.memory,
        Some(Bytes(32 << 20)),
        "the default 64Mi is over the cap"
    );
    let ms = |n| Some(Dur(Duration::from_millis(n)));
    assert_eq!(p.limits.deadline, ms(20));
    assert_eq!(p.limits.deadline_per_notification, ms(1));
    assert_eq!(p.limits.startup_deadline, ms(1000));
    assert_eq!((p.batch, p.queue.max), (Some(8), Some(100)));
    assert_eq!(p.queue.max_bytes, Some(Bytes(1 << 20)));
    assert_eq!(p.on_failure.quarantine_after, Some(10));
    let rate = p.actions.rate_limit.as_ref().unwrap();
    assert_eq!((rate.per_second, rate.burst), (2.0, 4));
    assert_eq!(
        p.on_failure.retries,
        Some(2),
        "the default 3 is over the cap"
    );
    assert_eq!((p.actions.queue, p.actions.retries), (Some(50), Some(1)));
    let at_caps = json!({"limits": {"memory": "16Mi"}, "onFailure": {"quarantineAfter": 10},
        "actions": {"rateLimit": {"perSecond": 0.5, "burst": 4}}});
    let small = c.custom_plugin(&team, &spec(at_caps)).unwrap();
    let p = &small.plugins[0];
    assert_eq!(p.limits.memory, Some(Bytes(16 << 20)));
    assert_eq!(p.on_failure.quarantine_after, Some(10));
    let rate = p.actions.rate_limit.as_ref().unwrap();
    assert_eq!((rate.per_second, rate.burst), (0.5, 4));
    let rate = |per_second: f64, burst: u32| json!({"actions": {"rateLimit": {"perSecond": per_second, "burst": burst}}});
    for (extra, field, cap) in [
        (
            json!({"limits": {"memory": "33Mi"}}),
            "limits.memory",
            "memory (33554432 bytes)",
        ),
        (
            json!({"limits": {"deadline": "1s"}}),
            "limits.deadline",
            "deadline (20ms)",
        ),
        (
            json!({"limits": {"deadlinePerNotification": "2ms"}}),
            "limits.deadlinePerNotification",
            "deadlinePerNotification (1ms)",
        ),
        (
            json!({"limits": {"startupDeadline": "1h"}}),
            "limits.startupDeadline",
            "startupDeadline (1s)",
        ),
        (json!({"batch": 9}), "batch", "batch (8)"),
        (json!({"queue": {"max": 1000}}), "queue.max", "queue (100)"),
        (
            json!({"queue": {"maxBytes": "2Mi"}}),
            "queue.maxBytes",
            "queueBytes (1048576 bytes)",
        ),
        (
            json!({"onFailure": {"quarantineAfter": 11}}),
            "onFailure.quarantineAfter",
            "quarantineAfter (10; 0 is never, over any cap)",
        ),
        (
            json!({"onFailure": {"quarantineAfter": 0}}),
            "onFailure.quarantineAfter",
            "quarantineAfter (10; 0 is never, over any cap)",
        ),
        (
            rate(3.0, 4),
            "actions.rateLimit.perSecond",
            "actionsPerSecond (2)",
        ),
        (rate(1.0, 5), "actions.rateLimit.burst", "actionsBurst (4)"),
        (
            json!({"onFailure": {"policy": "retry", "retries": 3}}),
            "onFailure.retries",
            "retries (2)",
        ),
        (
            json!({"actions": {"queue": 51}}),
            "actions.queue",
            "actionsQueue (50)",
        ),
        (
            json!({"actions": {"retries": 2}}),
            "actions.retries",
            "actionsRetries (1)",
        ),
    ] {
        let (reason, e) = refusal(&c, &team, extra);
        assert_eq!(reason, "OverCap", "{e}");
        assert_eq!(
            e,
            format!("WispPlugin t/p: spec.{field}: over customResources.maxLimits.{cap}")
        );
    }
}

#[test]
fn without_a_cap_a_custom_resource_keeps_what_it_asks_and_what_it_omits() {
    let (_d, c) = host("");
    let asks = json!({"onFailure": {"quarantineAfter": 0}, "queue": {"maxBytes": "1Gi"}});
    let got = c.custom_plugin(&wisp_plugin(None), &spec(asks)).unwrap();
    let p = &got.plugins[0];
    assert_eq!(p.on_failure.quarantine_after, Some(0));
    assert_eq!(p.queue.max_bytes, Some(Bytes(1 << 30)));
    assert_eq!(
        (p.limits.memory, p.actions.rate_limit.as_ref()),
        (None, None)
    );
}

#[test]
fn what_only_the_file_may_ask_for_and_bad_fields_are_named_in_spec_terms() {
    let (_d, c) = host("");
    let team = wisp_plugin(Some("t"));
    let inf = |extra: serde_json::Value| {
        let mut i = json!({"name": "pods", "apiVersion": "v1", "kind": "Pod"});
        for (k, v) in extra.as_object().unwrap() {
            i[k] = v.clone();
        }
        json!({ "informers": [i] })
    };
    let (reason, e) = refusal(&c, &team, inf(json!({"onPanic": "exit"})));
    assert_eq!(reason, "NotAllowed");
    assert!(
        e.contains("spec.informers[0].onPanic: exit would stop the host"),
        "{e}"
    );
    let (reason, e) = refusal(&c, &team, inf(json!({"maxEventSize": "1Gi"})));
    assert_eq!(reason, "OverCap");
    assert!(
        e.contains("spec.informers[0].maxEventSize: over the host's default"),
        "{e}"
    );
    let (reason, e) = refusal(&c, &team, json!({"limits": {"deadline": "0s"}}));
    assert_eq!(reason, "Invalid");
    assert_eq!(
        e,
        "WispPlugin t/p: spec.limits.deadline: must be more than 0"
    );
    let (_, e) = refusal(&c, &team, json!({"limts": {}}));
    assert!(
        e.starts_with("WispPlugin t/p: spec.limts: unknown field `limts`"),
        "{e}"
    );
    let (_, e) = refusal(&c, &team, inf(json!({"labelSelector": "a in (b"})));
    assert!(e.contains("spec.informers[0].labelSelector: "), "{e}");
    let (_, e) = refusal(&c, &team, json!({"module": "missing.wasm"}));
    assert!(
        e.contains("spec.module: ") && e.contains("does not exist"),
        "{e}"
    );
}

#[test]
fn a_module_path_outside_the_module_paths_is_refused_naming_the_setting() {
    let team = wisp_plugin(Some("t"));
    let (_d, none) = host_with("");
    for module in ["p.wasm", "/proc/self/pagemap"] {
        let (reason, e) = refusal(&none, &team, json!({ "module": module }));
        assert_eq!(reason, "NotAllowed", "{e}");
        assert!(
            e.contains("spec.module: ")
                && e.ends_with(
                    "is not under a directory of customResources.modulePaths (none: a custom \
                     resource may name only oci:// modules)"
                ),
            "{e}"
        );
    }
    let oci = json!({"module": "oci://registry.example.com/wisp/p:1"});
    assert!(none.custom_plugin(&team, &spec(oci)).is_ok());

    let (d, c) = host_with(", modulePaths: [modules]");
    let modules = d.path().join("modules");
    std::fs::write(modules.join("p.wasm"), b"\0asm").unwrap();
    let got = c
        .custom_plugin(&team, &spec(json!({"module": "modules/./p.wasm"})))
        .unwrap();
    assert_eq!(
        got.plugins[0].module,
        modules.canonicalize().unwrap().join("p.wasm")
    );
    let (_, e) = refusal(&c, &team, json!({"module": "/proc/self/pagemap"}));
    assert!(
        e.ends_with(
            "/proc/self/pagemap is not under a directory of customResources.modulePaths (modules)"
        ),
        "{e}"
    );
    let (_, e) = refusal(&c, &team, json!({"module": "modules/../p.wasm"}));
    assert!(e.contains("has a `..`"), "{e}");
}

#[test]
fn links_out_of_the_module_paths_and_a_link_as_the_module_are_refused() {
    let (d, c) = host_with(", modulePaths: [modules]");
    let modules = d.path().join("modules");
    std::os::unix::fs::symlink("/proc/self", modules.join("out")).unwrap();
    std::os::unix::fs::symlink(d.path().join("p.wasm"), modules.join("link.wasm")).unwrap();
    let team = wisp_plugin(Some("t"));
    let (reason, e) = refusal(&c, &team, json!({"module": "modules/out/pagemap"}));
    assert_eq!(reason, "NotAllowed", "{e}");
    assert!(
        e.contains("resolves to /proc/") && e.contains("not under a directory of"),
        "{e}"
    );
    let (reason, e) = refusal(&c, &team, json!({"module": "modules/link.wasm"}));
    assert_eq!(reason, "NotAllowed", "{e}");
    assert!(e.contains("link.wasm is a symbolic link"), "{e}");
}

#[test]
fn custom_resources_need_a_kube_source_named_namespaces_and_caps_their_settings_may_take() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("c")).unwrap();
    let parse = |text: &str| Config::parse(text, "wisp.yaml", d.path());
    let inf = "informers: [{name: ns, apiVersion: v1, kind: Namespace}]\n";
    for (source, custom, path) in [
        ("dir:c", "", "customResources.enabled"),
        ("kube", ", namespaces: []", "customResources.namespaces"),
        (
            "kube",
            ", allowedGrants: [{verbs: [], apiVersion: v1, kind: Pod}]",
            "customResources.allowedGrants[0].verbs",
        ),
        (
            "kube",
            ", modulePaths: [c, missing]",
            "customResources.modulePaths[1]",
        ),
        (
            "kube",
            ", maxLimits: {fuel: 1000}",
            "customResources.maxLimits.fuel",
        ),
        (
            "kube",
            ", maxLimits: {startupDeadline: 0s}",
            "customResources.maxLimits.startupDeadline",
        ),
        (
            "kube",
            ", maxLimits: {quarantineAfter: 0}",
            "customResources.maxLimits.quarantineAfter",
        ),
        (
            "kube",
            ", maxLimits: {queueBytes: 1Ki}",
            "customResources.maxLimits.queueBytes",
        ),
        (
            "kube",
            ", maxLimits: {actionsPerSecond: 0}",
            "customResources.maxLimits.actionsPerSecond",
        ),
        (
            "kube",
            ", maxLimits: {actionsBurst: 0}",
            "customResources.maxLimits.actionsBurst",
        ),
        (
            "kube",
            ", maxPerNamespace: 0",
            "customResources.maxPerNamespace",
        ),
        ("kube", ", maxTotal: 0", "customResources.maxTotal"),
        (
            "kube",
            ", maxLimits: {actionsQueue: 0}",
            "customResources.maxLimits.actionsQueue",
        ),
        (
            "kube",
            ", concurrentApplies: 0",
            "customResources.concurrentApplies",
        ),
        (
            "kube",
            ", concurrentAppliesPerNamespace: 0",
            "customResources.concurrentAppliesPerNamespace",
        ),
    ] {
        let text = format!("source: {source}\n{inf}customResources: {{enabled: true{custom}}}\n");
        let e = parse(&text).unwrap_err();
        assert_eq!(e.path, path, "{e}");
    }
    let text = format!("source: kube\n{inf}customResources: {{enabled: true, modulePaths: [x]}}\n");
    let e = parse(&text).unwrap_err();
    assert!(e.problem.ends_with("/x is not a directory"), "{e}");
}
