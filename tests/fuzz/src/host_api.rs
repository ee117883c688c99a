//! The host side of the WIT boundary: the `host`, `policy` and `actions` functions a plugin
//! calls, on a `StoreData` with a small in-memory cache, called directly (no wasm) with a
//! sequence of fuzzed calls, as a misbehaving plugin could make them.
//!
//! Properties:
//! - no call panics, whatever the arguments;
//! - refusals are errors of the right kind: an informer not granted, a selector that does not
//!   parse, an unknown index, a missing object, a bad rule, a malformed action;
//! - what is returned agrees with the cache (gets, lists filtered by namespace and selector);
//! - a counter adds (and saturates), a gauge is set, invalid names change nothing;
//! - a verdict's message is the longest prefix of the plugin's within the limit;
//! - an action is accepted only when its body is well formed and a grant covers it.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use arbitrary::{Result, Unstructured};
use wisp_host::actions::{
    ActionGrant, ActionSpec, ActionVerb, HostServices, PluginActions, Target, apply_target,
    event_body, metadata_patch,
};
use wisp_host::informer::indexer::{Indexer, index_by_label};
use wisp_host::informer::{Cache, Object};
use wisp_host::plugin::LogLevel;
use wisp_host::plugin::bindings::wisp::plugin::{actions, host, policy, types};
use wisp_host::plugin::bindings::{CacheError, Level};
use wisp_host::plugin::state::{Grants, HostApi, StoreData};
use wisp_host::plugin::status::PluginStatus;
use wisp_host::policy::{MAX_MESSAGE_LEN, VerdictFilter};
use wisp_kinds::selector::LabelSelector;

const PLUGIN: &str = "fuzz";

/// Strings the calls are made of: mostly names that exist (so calls get past the grant and
/// lookup checks), sometimes anything. The inputs under `regressions/host_api` are read with
/// this list and this encoding of calls: append to it, never reorder.
const WORDS: &[&str] = &[
    "pods",
    "namespaces",
    "secrets",
    "a",
    "b",
    "p1",
    "p2",
    "a/p1",
    "ns1",
    "app",
    "web",
    "db",
    "tier",
    "namespace",
    "label:app",
    "app=web",
    "app!=web,tier",
    "app in (web,db)",
    "!app",
    "example.com/team",
    "v1",
    "Pod",
    "Namespace",
    "ConfigMap",
    "Event",
    "rule",
    "requests_total",
    "é",
    "",
];

fn word(u: &mut Unstructured<'_>) -> Result<String> {
    if u.ratio(1, 4)? {
        let s: String = u.arbitrary()?;
        // Long strings now and then, past the message and annotation limits.
        let times = if u.ratio(1, 16)? { 400 } else { 1 };
        return Ok(s.repeat(times));
    }
    Ok((*u.choose(WORDS)?).to_owned())
}

fn opt_word(u: &mut Unstructured<'_>) -> Result<Option<String>> {
    Ok(if u.arbitrary()? { Some(word(u)?) } else { None })
}

fn pairs(u: &mut Unstructured<'_>) -> Result<Vec<(String, String)>> {
    let n = u.int_in_range(0..=3)?;
    (0..n).map(|_| Ok((word(u)?, word(u)?))).collect()
}

fn opt_pairs(u: &mut Unstructured<'_>) -> Result<Vec<(String, Option<String>)>> {
    let n = u.int_in_range(0..=3)?;
    (0..n).map(|_| Ok((word(u)?, opt_word(u)?))).collect()
}

fn object_ref(u: &mut Unstructured<'_>) -> Result<types::ObjectRef> {
    Ok(types::ObjectRef {
        api_version: word(u)?,
        kind: word(u)?,
        namespace: opt_word(u)?,
        name: word(u)?,
    })
}

/// A manifest: JSON built from words (mostly a well-formed object), or any text.
fn manifest(u: &mut Unstructured<'_>) -> Result<String> {
    if u.ratio(1, 4)? {
        return u.arbitrary();
    }
    let mut v = serde_json::json!({
        "apiVersion": word(u)?,
        "kind": word(u)?,
        "metadata": { "name": word(u)? },
        "data": { word(u)?: word(u)? },
    });
    if let Some(ns) = opt_word(u)? {
        v["metadata"]["namespace"] = ns.into();
    }
    Ok(v.to_string())
}

fn pod(ns: &str, name: &str, labels: serde_json::Value) -> Arc<Object> {
    let v = serde_json::json!({ "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name, "namespace": ns, "uid": format!("uid-{name}"),
            "resourceVersion": "1", "labels": labels } });
    Arc::new(Object::from_value(v, false).expect("test pod"))
}

/// The caches: `pods` (namespace and `label:app` indexes) and `namespaces`; `secrets` exists
/// but is never granted.
fn caches() -> &'static BTreeMap<String, Cache> {
    static CACHES: OnceLock<BTreeMap<String, Cache>> = OnceLock::new();
    CACHES.get_or_init(|| {
        let pods = Indexer::new();
        pods.add_indexers([("label:app".to_owned(), index_by_label("app"))])
            .expect("one index");
        pods.add(pod(
            "a",
            "p1",
            serde_json::json!({ "app": "web", "tier": "front" }),
        ));
        pods.add(pod("a", "p2", serde_json::json!({ "app": "db" })));
        pods.add(pod("b", "p1", serde_json::json!({})));
        let namespaces = Indexer::new();
        for ns in ["a", "b"] {
            let v = serde_json::json!({ "apiVersion": "v1", "kind": "Namespace",
                "metadata": { "name": ns, "uid": format!("uid-{ns}"), "resourceVersion": "1" } });
            namespaces.add(Arc::new(
                Object::from_value(v, false).expect("test namespace"),
            ));
        }
        BTreeMap::from([
            ("pods".to_owned(), pods.cache()),
            ("namespaces".to_owned(), namespaces.cache()),
        ])
    })
}

fn grants() -> Vec<ActionGrant> {
    let grant =
        |verbs, api_version: &str, kind: &str, namespaces: Option<Vec<String>>| ActionGrant {
            verbs,
            api_version: api_version.into(),
            kind: kind.into(),
            namespaces,
        };
    vec![
        grant(vec![ActionVerb::Patch], "v1", "Pod", Some(vec!["a".into()])),
        grant(vec![ActionVerb::Apply], "v1", "ConfigMap", None),
        grant(vec![ActionVerb::Create], "v1", "Event", None),
    ]
}

/// A plugin's store data: `pods` and `namespaces` granted, a rate limit and dry-run chosen by
/// the input (without an API server, actions are either dry-run or unavailable).
fn store(u: &mut Unstructured<'_>) -> Result<(StoreData, bool)> {
    let dry_run = u.ratio(7, 8)?;
    let per_second = match u.int_in_range(0..=3)? {
        0 => 5.0,
        1 => f64::MIN_POSITIVE,
        2 => 1e-300,
        // Any value the config accepts: positive and finite.
        _ => Some(u.arbitrary::<f64>()?.abs())
            .filter(|r| *r > 0.0 && r.is_finite())
            .unwrap_or(1.0),
    };
    let spec = ActionSpec {
        grants: grants(),
        per_second,
        burst: u.int_in_range(1..=3)?,
        dry_run,
        ..ActionSpec::default()
    };
    let services = HostServices::default();
    let mut granted = caches().clone();
    granted.remove("secrets");
    let status = Arc::new(PluginStatus::default());
    let api = HostApi {
        plugin: PLUGIN.into(),
        grants: Grants {
            caches: Arc::new(granted),
            services: services.clone(),
        },
        log_level: LogLevel::Info,
        status: status.clone(),
        actions: Arc::new(PluginActions::new(PLUGIN.into(), spec, status, services)),
        verdict_events: u.arbitrary()?,
    };
    Ok((
        StoreData::new(api, 1 << 20, std::time::Duration::from_secs(1)),
        dry_run,
    ))
}

/// Runs the calls `data` describes on a fresh plugin store and checks each result.
pub fn check(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok((mut s, dry_run)) = store(&mut u) else {
        return;
    };
    for _ in 0..64 {
        if u.is_empty() || call(&mut u, &mut s, dry_run).is_err() {
            break;
        }
    }
}

/// The namespace as a key reads it: `Some("")` is none (cluster-scoped), as in client-go.
fn ns_of(namespace: &Option<String>) -> Option<&str> {
    namespace.as_deref().filter(|n| !n.is_empty())
}

/// The object `namespace`/`name` names, looked up by hand (not through its key).
fn find(c: &Cache, namespace: &Option<String>, name: &str) -> Option<Arc<Object>> {
    c.list()
        .into_iter()
        .find(|o| o.meta().name() == name && o.meta().namespace() == ns_of(namespace))
}

fn granted(informer: &str) -> Option<&'static Cache> {
    caches()
        .get(informer)
        .filter(|_| informer == "pods" || informer == "namespaces")
}

/// A valid Prometheus metric name (label names are checked the same way by the host).
fn valid_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn series(name: &str, labels: &[(String, String)]) -> (String, Vec<(String, String)>) {
    let mut l = labels.to_vec();
    l.sort();
    (name.to_owned(), l)
}

fn call(u: &mut Unstructured<'_>, s: &mut StoreData, dry_run: bool) -> Result<()> {
    match u.int_in_range(0..=9)? {
        0 => {
            let level = *u.choose(&[
                Level::Trace,
                Level::Debug,
                Level::Info,
                Level::Warn,
                Level::Error,
            ])?;
            let _ = host::Host::log_enabled(s, level);
            host::Host::log(s, level, word(u)?);
        }
        1 => {
            let (informer, namespace, name) = (word(u)?, opt_word(u)?, word(u)?);
            let got = host::Host::cache_get(s, informer.clone(), namespace.clone(), name.clone());
            match granted(&informer) {
                None => assert!(matches!(got, Err(CacheError::NotGranted(_))), "{got:?}"),
                Some(c) => {
                    let want = find(c, &namespace, &name);
                    let got = got.expect("a granted get");
                    // Read back with the SDK's decoder, as a plugin would.
                    let got = got.map(|b| {
                        let o = wisp_sdk::abi::Object::decode(&b).expect("a decodable object");
                        String::from_utf8(o.json().to_vec()).expect("UTF-8 JSON")
                    });
                    assert_eq!(
                        got,
                        want.map(|o| o.json().to_owned()),
                        "cache_get({informer:?}, {namespace:?}, {name:?})"
                    );
                }
            }
        }
        2 => {
            let (informer, namespace, selector) = (word(u)?, opt_word(u)?, opt_word(u)?);
            let got =
                host::Host::cache_list(s, informer.clone(), namespace.clone(), selector.clone());
            let parsed = selector.as_deref().map(LabelSelector::parse);
            match (granted(&informer), &parsed) {
                (None, _) => assert!(matches!(got, Err(CacheError::NotGranted(_))), "{got:?}"),
                (Some(_), Some(Err(_))) => {
                    assert!(matches!(got, Err(CacheError::BadSelector(_))), "{got:?}")
                }
                (Some(c), _) => {
                    let sel = parsed.and_then(|p| p.ok()).unwrap_or_default();
                    let mut want: Vec<String> = c
                        .list()
                        .into_iter()
                        .filter(|o| {
                            namespace.is_none() || o.meta().namespace() == ns_of(&namespace)
                        })
                        .filter(|o| sel.matches(&o.meta().to_owned().labels))
                        .map(|o| o.json().to_owned())
                        .collect();
                    let list = wisp_sdk::abi::ObjectList::decode(got.expect("a granted list"))
                        .expect("a decodable list");
                    let mut got: Vec<String> = list
                        .iter()
                        .map(|o| String::from_utf8(o.json().to_vec()).expect("UTF-8 JSON"))
                        .collect();
                    want.sort();
                    got.sort();
                    assert_eq!(
                        got, want,
                        "cache_list({informer:?}, {namespace:?}, {selector:?})"
                    );
                }
            }
        }
        3 => {
            let (informer, index, value) = (word(u)?, word(u)?, word(u)?);
            let got = host::Host::cache_by_index(s, informer.clone(), index.clone(), value);
            match granted(&informer) {
                None => assert!(matches!(got, Err(CacheError::NotGranted(_))), "{got:?}"),
                Some(c) if c.index_names().contains(&index) => {
                    got.expect("a known index");
                }
                Some(_) => assert!(matches!(got, Err(CacheError::UnknownIndex(_))), "{got:?}"),
            }
        }
        4 => {
            let (name, labels) = (word(u)?, pairs(u)?);
            let value = if u.arbitrary()? {
                u64::MAX
            } else {
                u.arbitrary()?
            };
            let key = series(&name, &labels);
            let before = s.api.status.guest_counters();
            host::Host::counter_add(s, name.clone(), labels.clone(), value);
            let after = s.api.status.guest_counters();
            if valid_name(&name) && labels.iter().all(|(k, _)| valid_name(k)) {
                let was = before.get(&key).copied().unwrap_or(0);
                assert_eq!(after.get(&key).copied(), Some(was.saturating_add(value)));
            } else {
                assert_eq!(before, after, "invalid series {key:?} changed the counters");
            }
        }
        5 => {
            let (name, labels, value) = (word(u)?, pairs(u)?, u.arbitrary::<f64>()?);
            let key = series(&name, &labels);
            let before = s.api.status.guest_gauges().len();
            host::Host::gauge_set(s, name.clone(), labels.clone(), value);
            let after = s.api.status.guest_gauges();
            if valid_name(&name) && labels.iter().all(|(k, _)| valid_name(k)) {
                let got = after.get(&key).copied().expect("the gauge is set");
                assert!(got.to_bits() == value.to_bits() || (got.is_nan() && value.is_nan()));
            } else {
                assert_eq!(before, after.len(), "invalid series {key:?} was added");
            }
        }
        6 => report(u, s)?,
        7 => {
            let (target, labels, annotations) = (object_ref(u)?, opt_pairs(u)?, opt_pairs(u)?);
            let well_formed = metadata_patch(&labels, &annotations, None).is_ok();
            let t = target_of(&target);
            let got = actions::Host::patch_metadata(s, target, labels, annotations);
            check_action(got, dry_run, well_formed && t_ok(&t), ActionVerb::Patch, &t);
        }
        8 => {
            let m = manifest(u)?;
            let parsed = serde_json::from_str::<serde_json::Value>(&m)
                .ok()
                .and_then(|v| apply_target(&v).ok());
            let got = actions::Host::apply(s, m);
            let t = parsed.clone().unwrap_or_else(|| Target {
                api_version: "?".into(),
                kind: "?".into(),
                namespace: None,
                name: "?".into(),
            });
            check_action(got, dry_run, parsed.is_some(), ActionVerb::Apply, &t);
        }
        _ => {
            let (regarding, warning) = (object_ref(u)?, u.arbitrary::<bool>()?);
            let (reason, message) = (word(u)?, word(u)?);
            let t = target_of(&regarding);
            let body = event_body(PLUGIN, &t, None, warning, &reason, &message);
            if let Ok((_, b)) = &body {
                let m = b["message"].as_str().expect("a message");
                assert!(
                    message.starts_with(m) && m.len() <= 1024,
                    "event message {m:?}"
                );
            }
            let event_type = if warning {
                actions::EventType::Warning
            } else {
                actions::EventType::Normal
            };
            let got = actions::Host::create_event(s, regarding, event_type, reason, message);
            let event = body.map(|(t, _)| t).ok();
            let target = event.clone().unwrap_or(t);
            check_action(got, dry_run, event.is_some(), ActionVerb::Create, &target);
        }
    }
    Ok(())
}

fn report(u: &mut Unstructured<'_>, s: &mut StoreData) -> Result<()> {
    let (informer, namespace, name, rule) = (word(u)?, opt_word(u)?, word(u)?, word(u)?);
    let violation = if u.arbitrary()? {
        let severity = *u.choose(&[
            types::Severity::Info,
            types::Severity::Low,
            types::Severity::Medium,
            types::Severity::High,
            types::Severity::Critical,
        ])?;
        Some(policy::Violation {
            severity,
            message: word(u)?,
        })
    } else {
        None
    };
    let message = violation.as_ref().map(|v| v.message.clone());
    let got = policy::Host::report(
        s,
        informer.clone(),
        namespace.clone(),
        name.clone(),
        rule.clone(),
        violation,
    );
    let Some(c) = granted(&informer) else {
        assert!(
            matches!(got, Err(policy::VerdictError::NotGranted(_))),
            "{got:?}"
        );
        return Ok(());
    };
    let exists = find(c, &namespace, &name).is_some();
    if !exists {
        assert!(
            matches!(got, Err(policy::VerdictError::NotFound(_))),
            "{got:?}"
        );
        return Ok(());
    }
    if rule.is_empty() || rule.len() > 253 {
        assert!(
            matches!(got, Err(policy::VerdictError::Invalid(_))),
            "{got:?}"
        );
        return Ok(());
    }
    got.expect("a valid report");
    let held = s.api.grants.services.verdicts.list(&VerdictFilter {
        plugin: Some(PLUGIN.into()),
        namespace: None,
        rule: Some(rule.clone()),
    });
    let held = held
        .iter()
        .find(|v| v.subject.name == name && v.subject.namespace.as_deref() == ns_of(&namespace));
    match (message, held) {
        (None, None) => {}
        (Some(m), Some(v)) => {
            let mut cut = m.len().min(MAX_MESSAGE_LEN);
            while !m.is_char_boundary(cut) {
                cut -= 1;
            }
            assert_eq!(
                v.message,
                m[..cut],
                "the verdict's message is not the longest prefix"
            );
        }
        (m, v) => panic!("report of {m:?} left {v:?}"),
    }
    Ok(())
}

fn target_of(r: &types::ObjectRef) -> Target {
    Target {
        api_version: r.api_version.clone(),
        kind: r.kind.clone(),
        namespace: r.namespace.clone(),
        name: r.name.clone(),
    }
}

/// What the host checks of every target (shapes as the API server validates them; the rules
/// have their own tests in `wisp_host::actions::validate`).
fn t_ok(t: &Target) -> bool {
    wisp_host::actions::validate::check_target(t).is_ok()
}

/// The grants of [`grants`], by hand.
fn allowed(verb: ActionVerb, t: &Target) -> bool {
    let ns = t.namespace.as_deref();
    match verb {
        ActionVerb::Patch => t.api_version == "v1" && t.kind == "Pod" && ns == Some("a"),
        ActionVerb::Apply => t.api_version == "v1" && t.kind == "ConfigMap",
        ActionVerb::Create => t.api_version == "v1" && t.kind == "Event",
    }
}

fn check_action(
    got: std::result::Result<actions::Accepted, actions::ActionError>,
    dry_run: bool,
    well_formed: bool,
    verb: ActionVerb,
    t: &Target,
) {
    use actions::ActionError as E;
    if !dry_run {
        assert!(matches!(got, Err(E::Unavailable(_))), "{got:?}");
    } else if !well_formed || !t_ok(t) {
        assert!(matches!(got, Err(E::Invalid(_))), "{verb:?} {t:?}: {got:?}");
    } else if !allowed(verb, t) {
        assert!(
            matches!(got, Err(E::NotGranted(_))),
            "{verb:?} {t:?}: {got:?}"
        );
    } else {
        assert!(
            matches!(got, Ok(actions::Accepted::DryRun) | Err(E::RateLimited(_))),
            "{verb:?} {t:?}: {got:?}"
        );
    }
}
