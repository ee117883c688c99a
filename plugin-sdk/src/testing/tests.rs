//! The test kit's encoder against the shared vectors, and a plugin run against its fake host.

use serde_json::{Value, json};

use super::*;
use crate::abi::tests::{VECTORS, unhex};
use crate::actions::{self, ObjectRef};
use crate::{Context, Object, cache, metrics, policy};

fn parsed(expect: &Value) -> Value {
    serde_json::from_str(expect["json"].as_str().expect("json")).expect("the object's JSON")
}

/// The metadata as the vectors state it.
fn stated(e: &Value) -> ObjectMeta {
    let s = |k: &str| e[k].as_str().map(str::to_owned);
    let pairs =
        |k: &str| -> Vec<(String, String)> { serde_json::from_value(e[k].clone()).expect("pairs") };
    ObjectMeta {
        api_version: s("apiVersion").unwrap(),
        kind: s("kind").unwrap(),
        namespace: s("namespace"),
        name: s("name").unwrap(),
        uid: s("uid").unwrap(),
        resource_version: s("resourceVersion").unwrap(),
        generation: e["generation"].as_i64(),
        deletion_timestamp: s("deletionTimestamp"),
        labels: pairs("labels"),
        annotations: pairs("annotations"),
        owner_references: e["ownerReferences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| OwnerReference {
                api_version: r["apiVersion"].as_str().unwrap().into(),
                kind: r["kind"].as_str().unwrap().into(),
                name: r["name"].as_str().unwrap().into(),
                uid: r["uid"].as_str().unwrap().into(),
                controller: r["controller"].as_bool().unwrap(),
                block_owner_deletion: r["blockOwnerDeletion"].as_bool().unwrap(),
            })
            .collect(),
    }
}

/// The test kit extracts an object's metadata as the host does (the codec, `wisp-abi`, encodes
/// it; its own tests hold the encoder and the batch writer to the vectors byte for byte).
#[test]
fn the_test_kit_encodes_the_vectors_objects_byte_for_byte() {
    let v: Value = serde_json::from_str(VECTORS).unwrap();
    let mut checked = 0;
    for o in v["objects"].as_array().unwrap() {
        let bytes = unhex(o["hex"].as_str().unwrap());
        // Vectors of other writers (more or fewer fields) are for decoders only.
        if bytes[2] as usize != wisp_abi::layout::field::COUNT {
            continue;
        }
        let e = &o["expect"];
        let obj = parsed(e);
        assert_eq!(meta_of(&obj).unwrap(), stated(e), "{}", o["name"]);
        assert_eq!(encode_object(&obj).unwrap(), bytes, "{}", o["name"]);
        checked += 1;
    }
    for l in v["lists"].as_array().unwrap() {
        let objects: Vec<Vec<u8>> = l["expect"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| encode_object(&parsed(o)).unwrap())
            .collect();
        assert_eq!(
            encode_list(&objects),
            unhex(l["hex"].as_str().unwrap()),
            "{}",
            l["name"]
        );
        checked += 1;
    }
    assert_eq!(checked, 2 + 2, "vectors checked");
}

#[test]
fn label_selectors_take_kubernetes_forms_without_the_hosts_checks() {
    let labels = |p: &[(&str, &str)]| -> Vec<(String, String)> {
        p.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
    };
    let web = labels(&[("app", "web"), ("tier", "front")]);
    for (sel, want) in [
        ("app=web", true),
        ("app==web,tier=front", true),
        ("app=db", false),
        ("app!=db", true),
        ("app in (db, web)", true),
        ("app notin (db,web)", false),
        ("tier", true),
        ("!tier", false),
        ("!zone", true),
        ("zone notin (a)", true),
        ("", true),
    ] {
        assert_eq!(Selector::parse(sel).unwrap().matches(&web), want, "{sel}");
    }
    assert!(Selector::parse("app in web").is_err());
    // Where it differs from the host's parser, as the module doc says: no `gt` / `lt`, and keys
    // and values unchecked.
    assert!(Selector::parse("app < 3").is_err());
    assert!(Selector::parse("replicas>1").is_err());
    assert!(Selector::parse("a=b=c").is_ok());
    assert!(Selector::parse("a/b/c=d").is_ok());
}

/// A plugin using every host function.
struct Probe {
    seen: u64,
}

fn pod(name: &str, labels: Value, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "shop", "uid": format!("u-{name}"),
            "resourceVersion": "1", "labels": labels},
        "spec": {"nodeName": node}})
}

impl Probe {
    fn look(&self, cx: &Context, obj: &Object<'_>) -> Result<(), String> {
        if obj.name() == "bad" {
            return Err(format!("cannot judge {}", obj.key()));
        }
        let node: Value = obj.value()?;
        let node = node["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let found = cache::get("nodes", None, &node).map_err(|e| e.to_string())?;
        let in_zone = cache::list("nodes", None, Some("zone in (a)"))
            .map_err(|e| e.to_string())?
            .len();
        let peers = cache::by_index(cx.informer, "by-node", &node)
            .map_err(|e| e.to_string())?
            .len();
        crate::info!(
            "{} on {node} ({}), {in_zone} nodes in zone a, {peers} pods there",
            obj.key(),
            if found.is_some() { "cached" } else { "unknown" }
        );
        crate::debug!("not kept at info");
        if let Err(e) = cache::get("secrets", Some("shop"), "token") {
            crate::warn!("secrets: {e}");
        }
        let r = match obj.label("team") {
            None => policy::violation(cx.informer, obj, "has-team", Severity::Low, "no team label"),
            Some(team) => {
                let target: ObjectRef = actions::object_ref(obj);
                let how = actions::patch_metadata(&target, &[("owner", Some(team))], &[]);
                crate::info!("patch: {how:?}");
                policy::pass(cx.informer, obj, "has-team")
            }
        };
        r.map_err(|e| format!("{e:?}"))?;
        metrics::counter_add(
            "looked_total",
            &[("informer", cx.informer), ("kind", "pod")],
            1,
        );
        metrics::gauge_set("seen", &[], self.seen as f64);
        Ok(())
    }
}

impl Plugin for Probe {
    fn describe() -> PluginInfo {
        crate::info("probe", "1.0.0", &["pods", "nodes"])
    }

    fn init(settings: &str) -> crate::Result<Self> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct S {
            #[allow(dead_code)]
            strict: bool,
        }
        crate::parse_settings::<S>(settings)?;
        Ok(Probe { seen: 0 })
    }

    fn on_add(&mut self, cx: &Context, obj: &Object<'_>, _initial: bool) -> crate::Result<()> {
        self.seen += 1;
        // A helper that speaks `Result<_, String>` still works with `?`.
        Ok(self.look(cx, obj)?)
    }

    fn on_update(
        &mut self,
        cx: &Context,
        old: &Object<'_>,
        new: &Object<'_>,
        resync: bool,
    ) -> crate::Result<()> {
        self.seen += 1;
        crate::info!(
            "update {} {}->{} resync={resync}",
            new.key(),
            old.resource_version(),
            new.resource_version()
        );
        Ok(self.look(cx, new)?)
    }

    fn on_delete(&mut self, _cx: &Context, obj: &Object<'_>, missed: bool) -> crate::Result<()> {
        self.seen += 1;
        crate::warn!("delete {} missed={missed}", obj.key());
        Ok(())
    }

    fn snapshot(&self) -> Option<Vec<u8>> {
        Some(self.seen.to_le_bytes().to_vec())
    }

    fn restore(&mut self, state: Vec<u8>) -> crate::Result<()> {
        self.seen = u64::from_le_bytes(state.try_into().map_err(|_| "8 bytes")?);
        Ok(())
    }
}

fn harness() -> Harness<Probe> {
    let mut h = Harness::<Probe>::new();
    h.cache(
        "nodes",
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"zone": "a"}}}),
    )
    .cache(
        "nodes",
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n2", "labels": {"zone": "b"}}}),
    )
    .index("pods", "by-node", |o| {
        o["spec"]["nodeName"]
            .as_str()
            .map(str::to_owned)
            .into_iter()
            .collect()
    });
    h.init(r#"{"strict": true}"#).unwrap();
    h
}

#[test]
fn a_plugin_runs_natively_against_the_fake_host() {
    let mut h = harness();
    assert_eq!(h.info().name, "probe");
    assert_eq!(h.add("pods", pod("a", json!({}), "n1")), Outcome::Ok);
    assert_eq!(
        h.list("pods", pod("b", json!({"team": "pay"}), "n1")),
        Outcome::Ok
    );
    assert_eq!(
        h.logs(),
        [
            (
                Level::Info,
                "shop/a on n1 (cached), 1 nodes in zone a, 1 pods there".into()
            ),
            (
                Level::Warn,
                "secrets: informer not granted: informer \"secrets\" is not granted to this plugin"
                    .into()
            ),
            (
                Level::Info,
                "shop/b on n1 (cached), 1 nodes in zone a, 2 pods there".into()
            ),
            (
                Level::Warn,
                "secrets: informer not granted: informer \"secrets\" is not granted to this plugin"
                    .into()
            ),
            (Level::Info, "patch: Ok(Accepted::Queued)".into()),
        ]
    );
    assert_eq!(
        h.verdicts(),
        [Verdict {
            informer: "pods".into(),
            key: "shop/a".into(),
            rule: "has-team".into(),
            severity: Severity::Low,
            message: "no team label".into(),
        }]
    );
    assert_eq!(
        h.actions(),
        [Action::PatchMetadata {
            target: Target {
                api_version: "v1".into(),
                kind: "Pod".into(),
                namespace: Some("shop".into()),
                name: "b".into(),
            },
            labels: vec![("owner".into(), Some("pay".into()))],
            annotations: vec![],
        }]
    );
    // Labels in any order name the same series.
    assert_eq!(
        h.counter("looked_total", &[("kind", "pod"), ("informer", "pods")]),
        2
    );
    assert_eq!(h.gauge("seen", &[]), Some(2.0));
    assert_eq!(h.gauge("unset", &[]), None);

    // The pod gets its label: the update has the cached state as old, and the pass clears it.
    h.take_logs();
    assert_eq!(
        h.update("pods", pod("a", json!({"team": "ops"}), "n2")),
        Outcome::Ok
    );
    assert!(h.verdicts().is_empty());
    assert!(
        h.logs()[0].1.starts_with("update shop/a 1->1 resync=true"),
        "{:?}",
        h.logs()
    );
    assert_eq!(h.resync("pods", "shop/b"), Outcome::Ok);

    // A deletion takes the object out of the cache before the plugin hears of it, and clears
    // its verdicts.
    h.add("pods", pod("c", json!({}), "n9"));
    assert_eq!(h.verdicts().len(), 1);
    h.take_logs();
    assert_eq!(h.delete_missed("pods", "shop/c"), Outcome::Ok);
    assert_eq!(
        h.logs(),
        [(Level::Warn, "delete shop/c missed=true".into())]
    );
    assert!(h.verdicts().is_empty());
    h.log_level(Level::Debug);
    h.add("pods", pod("d", json!({"team": "x"}), "n1"));
    assert!(
        h.logs()
            .iter()
            .any(|(l, m)| *l == Level::Debug && m == "not kept at info")
    );
}

#[test]
fn errors_are_outcomes_of_one_notification_and_the_plugin_keeps_its_state() {
    let mut h = harness();
    assert_eq!(
        h.add("pods", pod("bad", json!({}), "n1")),
        Outcome::Error("cannot judge shop/bad".into())
    );
    assert_eq!(h.add("pods", pod("ok", json!({}), "n1")), Outcome::Ok);
    assert_eq!(h.with_plugin(|p| p.seen), 2);
    // A refused action is the plugin's to handle.
    h.on_action(|_| Err(ActionError::RateLimited("slow down".into())));
    h.add("pods", pod("t", json!({"team": "a"}), "n1"));
    assert!(
        h.logs()
            .iter()
            .any(|(_, m)| m == "patch: Err(ActionError::RateLimited(\"slow down\"))"),
        "{:?}",
        h.logs()
    );
    // Settings are checked at init, naming the field.
    let mut bad = Harness::<Probe>::new();
    let e = bad.init(r#"{"strict": 1}"#).unwrap_err();
    assert!(
        e.message().starts_with("settings.strict: invalid type"),
        "{e}"
    );
}

#[test]
fn a_reload_hands_the_snapshot_to_the_next_instance_and_keeps_the_host() {
    let mut h = harness();
    h.add("pods", pod("a", json!({}), "n1"));
    h.add("pods", pod("b", json!({}), "n2"));
    let mut next = h.reload::<Probe>(r#"{"strict": false}"#).unwrap();
    assert_eq!(next.with_plugin(|p| p.seen), 2);
    assert_eq!(next.verdicts().len(), 2);
    assert_eq!(next.delete("pods", "shop/a"), Outcome::Ok);
    assert_eq!(next.verdicts().len(), 1);
    assert_eq!(next.with_plugin(|p| p.seen), 3);
    assert!(
        next.reload::<Probe>("{}").is_err(),
        "settings refused at reload"
    );
}

#[test]
#[should_panic(expected = "outside wisp_sdk::testing::Harness")]
fn host_calls_outside_a_harness_say_so() {
    crate::log(Level::Info, "hello");
}
