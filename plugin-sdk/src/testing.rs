//! Test kit: runs a plugin natively under `cargo test`, against a fake host.
//!
//! A [`Harness`] holds one instance of a plugin and the host it sees: the informers' caches
//! (fixtures), and what the plugin did through the host: log lines, counters and gauges,
//! current policy verdicts, actions asked for. Notifications reach the plugin the way the host
//! sends them: encoded in the ABI's bytes (`docs/abi.md`) and decoded by the SDK, so the same
//! code runs as in the component.
//!
//! ```ignore
//! use serde_json::json;
//! use wisp_sdk::testing::{Harness, Outcome};
//!
//! #[test]
//! fn latest_is_a_violation() {
//!     let mut h = Harness::<ImagePolicy>::new();
//!     h.init(r#"{"denyLatest": true}"#).unwrap();
//!     let pod = json!({"apiVersion": "v1", "kind": "Pod",
//!         "metadata": {"name": "db-0", "namespace": "shop"},
//!         "spec": {"containers": [{"name": "db", "image": "postgres:latest"}]}});
//!     assert_eq!(h.add("pods", pod), Outcome::Ok);
//!     assert_eq!(h.verdicts()[0].rule, "latest-tag");
//! }
//! ```
//!
//! The fake host keeps the host's rules where a plugin can tell: only granted informers can be
//! read (those the plugin describes, and any a test caches or delivers on), an object's cache
//! entry is written before its notification is delivered, verdicts need the object cached and
//! are cleared when it is deleted. A cache list's label selector takes Kubernetes' equality and
//! set forms (`a=b`, `a==b`, `a!=b`, `e in (f,g)`, `e notin (f,g)`, `h`, `!h`, joined by commas)
//! and matches as the host does, but its parser is laxer than the host's (which parses as the
//! API server): keys and values are not checked (`a=b=c` and `a/b/c=d` are taken here, refused
//! there), and `gt` / `lt` (`a>1`, `a<1`) are refused here, taken there. A selector's syntax is
//! checked by the host: `wisp test` fixtures.
//! Actions are recorded and answered `queued` unless the test answers otherwise
//! ([`Harness::on_action`]); grants, rate limits and the API server are the host's business
//! (check those with `wisp test` fixtures or the host's tests).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use serde_json::Value;

pub use crate::bindings::wisp::plugin::actions::{Accepted, ActionError, EventType};
pub use crate::bindings::wisp::plugin::policy::VerdictError;
use crate::bindings::wisp::plugin::types::Outcome as WitOutcome;
pub use crate::bindings::wisp::plugin::types::{Level, Severity};
use crate::{Plugin, PluginInfo};

// ---- The ABI's encoding (docs/abi.md): the ABI codec's encoder, the host's ----

use wisp_abi::{BatchWriter, Encoded, Entry, Kind, ObjectMeta, OwnerReference};

fn string_at(v: &Value, path: &[&str]) -> Option<String> {
    let mut v = v;
    for p in path {
        v = v.get(p)?;
    }
    v.as_str().map(str::to_owned)
}

fn pairs_at(v: &Value, field: &str) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = v
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort();
    pairs
}

/// The metadata an encoded object carries beside its JSON, as the host extracts it.
fn meta_of(v: &Value) -> Result<ObjectMeta, String> {
    let need = |path: &[&str]| {
        string_at(v, path).ok_or_else(|| format!("the object has no {}", path.join(".")))
    };
    let owners = v
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .map(|r| OwnerReference {
                    api_version: string_at(r, &["apiVersion"]).unwrap_or_default(),
                    kind: string_at(r, &["kind"]).unwrap_or_default(),
                    name: string_at(r, &["name"]).unwrap_or_default(),
                    uid: string_at(r, &["uid"]).unwrap_or_default(),
                    controller: r.get("controller").and_then(Value::as_bool) == Some(true),
                    block_owner_deletion: r.get("blockOwnerDeletion").and_then(Value::as_bool)
                        == Some(true),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ObjectMeta {
        api_version: need(&["apiVersion"])?,
        kind: need(&["kind"])?,
        namespace: string_at(v, &["metadata", "namespace"]).filter(|n| !n.is_empty()),
        name: need(&["metadata", "name"])?,
        uid: string_at(v, &["metadata", "uid"]).unwrap_or_default(),
        resource_version: string_at(v, &["metadata", "resourceVersion"]).unwrap_or_default(),
        generation: v.pointer("/metadata/generation").and_then(Value::as_i64),
        deletion_timestamp: string_at(v, &["metadata", "deletionTimestamp"]),
        labels: pairs_at(v, "labels"),
        annotations: pairs_at(v, "annotations"),
        owner_references: owners,
    })
}

fn key_of(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

/// Encodes an object as the host does when it caches it (`docs/abi.md`, "Object"). It needs
/// `apiVersion`, `kind` and `metadata.name`.
pub fn encode_object(object: &Value) -> Result<Vec<u8>, String> {
    Ok(wisp_abi::encode_object(&meta_of(object)?, &object.to_string()).into_vec())
}

/// Encodes a list of encoded objects (`docs/abi.md`, "Object list"), as cache reads return it.
pub fn encode_list(objects: &[Vec<u8>]) -> Vec<u8> {
    wisp_abi::encode_list(objects.iter().map(Vec::as_slice))
}

// ---- The fake host ----

/// What a notification came to.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Handled.
    Ok,
    /// The plugin's error for this notification.
    Error(String),
}

/// A current policy violation, as the host keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The informer the object was reported from.
    pub informer: String,
    /// `namespace/name` (or `name`).
    pub key: String,
    /// The rule violated.
    pub rule: String,
    /// How bad.
    pub severity: Severity,
    /// What is wrong.
    pub message: String,
}

/// The object an action is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// e.g. `v1`.
    pub api_version: String,
    /// e.g. `Pod`.
    pub kind: String,
    /// `None`: cluster-scoped.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl Target {
    /// `namespace/name` (or `name`).
    pub fn key(&self) -> String {
        key_of(self.namespace.as_deref(), &self.name)
    }
}

/// An action the plugin asked the host for.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Action {
    /// `actions::patch_metadata`: `Some` sets a key, `None` removes it.
    PatchMetadata {
        /// The object patched.
        target: Target,
        /// Labels.
        labels: Vec<(String, Option<String>)>,
        /// Annotations.
        annotations: Vec<(String, Option<String>)>,
    },
    /// `actions::apply`.
    Apply {
        /// The manifest.
        manifest: Value,
    },
    /// `actions::create_event`.
    CreateEvent {
        /// The object the Event is about.
        regarding: Target,
        /// Normal or Warning.
        event_type: EventType,
        /// Reason.
        reason: String,
        /// Message.
        message: String,
    },
}

type IndexFn = Box<dyn Fn(&Value) -> Vec<String>>;
type Answer = Box<dyn FnMut(&Action) -> Result<Accepted, ActionError>>;

/// A cached object and its encoding.
type Cached = (Value, Encoded);

struct Informer {
    objects: BTreeMap<String, Cached>,
    indexes: BTreeMap<String, IndexFn>,
}

struct State {
    informers: BTreeMap<String, Informer>,
    log_level: Level,
    logs: Vec<(Level, String)>,
    counters: BTreeMap<Series, u64>,
    gauges: BTreeMap<Series, f64>,
    verdicts: BTreeMap<(String, String, String), (Severity, String)>,
    actions: Vec<Action>,
    answer: Answer,
}

impl State {
    fn informer(&mut self, name: &str) -> &mut Informer {
        self.informers
            .entry(name.to_owned())
            .or_insert_with(|| Informer {
                objects: BTreeMap::new(),
                indexes: BTreeMap::new(),
            })
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<RefCell<State>>>> = const { RefCell::new(None) };
}

/// Runs `f` with `state` as the host of this thread (the plugin's host calls land there).
fn enter<R>(state: &Rc<RefCell<State>>, f: impl FnOnce() -> R) -> R {
    struct Leave(Option<Rc<RefCell<State>>>);
    impl Drop for Leave {
        fn drop(&mut self) {
            let prev = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = prev);
        }
    }
    let prev = CURRENT.with(|c| c.borrow_mut().replace(state.clone()));
    let _leave = Leave(prev);
    f()
}

/// The host functions of [`crate::sys`], natively.
pub(crate) mod host {
    use super::*;
    use crate::bindings::wisp::plugin::policy::Violation;
    use crate::bindings::wisp::plugin::types::{CacheError, ObjectRef};

    fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
        let state = CURRENT.with(|c| c.borrow().clone()).expect(
            "a wisp_sdk host function was called outside wisp_sdk::testing::Harness (natively, \
             the SDK's host is the test kit's fake one)",
        );
        let mut s = state.borrow_mut();
        f(&mut s)
    }

    pub fn log(level: Level, message: &str) {
        with(|s| {
            if level as u8 >= s.log_level as u8 {
                s.logs.push((level, message.to_owned()));
            }
        })
    }

    pub fn log_enabled(level: Level) -> bool {
        with(|s| level as u8 >= s.log_level as u8)
    }

    fn granted<'a>(s: &'a mut State, informer: &str) -> Result<&'a mut Informer, CacheError> {
        match s.informers.get_mut(informer) {
            Some(i) => Ok(i),
            None => Err(CacheError::NotGranted(format!(
                "informer {informer:?} is not granted to this plugin"
            ))),
        }
    }

    pub fn cache_get(
        informer: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Vec<u8>>, CacheError> {
        with(|s| {
            let i = granted(s, informer)?;
            Ok(i.objects
                .get(&key_of(namespace, name))
                .map(|(_, b)| b.as_bytes().to_vec()))
        })
    }

    pub fn cache_list(
        informer: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<u8>, CacheError> {
        with(|s| {
            let i = granted(s, informer)?;
            let selector = match label_selector {
                Some(sel) => Some(Selector::parse(sel).map_err(CacheError::BadSelector)?),
                None => None,
            };
            let found: Vec<&Encoded> = i
                .objects
                .values()
                .filter(|(v, _)| {
                    namespace.is_none_or(|ns| v.pointer("/metadata/namespace") == Some(&ns.into()))
                })
                .filter(|(v, _)| {
                    selector
                        .as_ref()
                        .is_none_or(|sel| sel.matches(&pairs_at(v, "labels")))
                })
                .map(|(_, b)| b)
                .collect();
            Ok(wisp_abi::encode_list(found.iter().map(|b| b.as_bytes())))
        })
    }

    pub fn cache_by_index(informer: &str, index: &str, value: &str) -> Result<Vec<u8>, CacheError> {
        with(|s| {
            let i = granted(s, informer)?;
            let f = i.indexes.get(index).ok_or_else(|| {
                CacheError::UnknownIndex(format!("informer {informer:?} has no index {index:?}"))
            })?;
            let found: Vec<&Encoded> = i
                .objects
                .values()
                .filter(|(v, _)| f(v).iter().any(|x| x == value))
                .map(|(_, b)| b)
                .collect();
            Ok(wisp_abi::encode_list(found.iter().map(|b| b.as_bytes())))
        })
    }

    pub fn counter_add(name: &str, labels: &[(String, String)], value: u64) {
        with(|s| *s.counters.entry(sorted(name, labels)).or_default() += value)
    }

    pub fn gauge_set(name: &str, labels: &[(String, String)], value: f64) {
        with(|s| {
            s.gauges.insert(sorted(name, labels), value);
        })
    }

    pub fn report(
        informer: &str,
        namespace: Option<&str>,
        name: &str,
        rule: &str,
        violation: Option<&Violation>,
    ) -> Result<(), VerdictError> {
        with(|s| {
            let key = key_of(namespace, name);
            let i = s.informers.get(informer).ok_or_else(|| {
                VerdictError::NotGranted(format!("informer {informer:?} is not granted"))
            })?;
            if !i.objects.contains_key(&key) {
                return Err(VerdictError::NotFound(format!(
                    "{key} is not in {informer}"
                )));
            }
            if rule.is_empty() || rule.len() > 253 {
                return Err(VerdictError::Invalid(format!(
                    "rule {rule:?}: 1 to 253 bytes"
                )));
            }
            let slot = (informer.to_owned(), key, rule.to_owned());
            match violation {
                Some(v) if v.message.len() > 1024 => {
                    return Err(VerdictError::Invalid("message over 1024 bytes".into()));
                }
                Some(v) => {
                    s.verdicts.insert(slot, (v.severity, v.message.clone()));
                }
                None => {
                    s.verdicts.remove(&slot);
                }
            }
            Ok(())
        })
    }

    fn target(r: &ObjectRef) -> Target {
        Target {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        }
    }

    fn act(a: Action) -> Result<Accepted, ActionError> {
        with(|s| {
            let answer = (s.answer)(&a);
            s.actions.push(a);
            answer
        })
    }

    pub fn patch_metadata(
        target: &ObjectRef,
        labels: &[(String, Option<String>)],
        annotations: &[(String, Option<String>)],
    ) -> Result<Accepted, ActionError> {
        act(Action::PatchMetadata {
            target: self::target(target),
            labels: labels.to_vec(),
            annotations: annotations.to_vec(),
        })
    }

    pub fn apply(manifest: &str) -> Result<Accepted, ActionError> {
        let manifest = serde_json::from_str(manifest)
            .map_err(|e| ActionError::Invalid(format!("the manifest is not JSON: {e}")))?;
        act(Action::Apply { manifest })
    }

    pub fn create_event(
        regarding: &ObjectRef,
        event_type: EventType,
        reason: &str,
        message: &str,
    ) -> Result<Accepted, ActionError> {
        act(Action::CreateEvent {
            regarding: target(regarding),
            event_type,
            reason: reason.to_owned(),
            message: message.to_owned(),
        })
    }
}

/// A label selector: requirements that all hold. Laxer than the host's parser (see the module
/// doc): the forms without their name and value checks, and no `gt` / `lt`.
struct Selector(Vec<Requirement>);

enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

impl Selector {
    fn parse(s: &str) -> Result<Selector, String> {
        let mut parts = Vec::new();
        let (mut depth, mut start) = (0, 0);
        for (i, c) in s.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&s[start..]);
        let mut reqs = Vec::new();
        for p in parts.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
            let set = |op: &str| -> Option<Result<(String, Vec<String>), String>> {
                let (k, rest) = p.split_once(op)?;
                let rest = rest.trim();
                let inner = rest.strip_prefix('(').and_then(|r| r.strip_suffix(')'));
                Some(match inner {
                    Some(v) => Ok((
                        k.trim().to_owned(),
                        v.split(',').map(|x| x.trim().to_owned()).collect(),
                    )),
                    None => Err(format!("{p:?}: values in parentheses expected")),
                })
            };
            let r = if let Some(r) = set(" notin ") {
                let (k, v) = r?;
                Requirement::NotIn(k, v)
            } else if let Some(r) = set(" in ") {
                let (k, v) = r?;
                Requirement::In(k, v)
            } else if let Some((k, v)) = p.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once("==").or_else(|| p.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = p.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else if p.contains(|c: char| c.is_whitespace() || "()<>".contains(c)) {
                return Err(format!("{p:?} is not a label requirement"));
            } else {
                Requirement::Exists(p.into())
            };
            reqs.push(r);
        }
        Ok(Selector(reqs))
    }

    fn matches(&self, labels: &[(String, String)]) -> bool {
        let get = |k: &str| labels.iter().find(|(l, _)| l == k).map(|(_, v)| v.as_str());
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v),
            Requirement::NotEquals(k, v) => get(k) != Some(v),
            Requirement::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
        })
    }
}

/// One instance of plugin `P` and the fake host it runs against.
pub struct Harness<P: Plugin> {
    plugin: RefCell<Option<P>>,
    state: Rc<RefCell<State>>,
    seq: BTreeMap<String, u64>,
}

impl<P: Plugin> Default for Harness<P> {
    fn default() -> Self {
        Self::new()
    }
}

impl<P: Plugin> Harness<P> {
    /// A harness whose host grants the informers `P` describes, logs at `info` and up, and
    /// answers every action `queued`. Call [`Harness::init`] before delivering.
    pub fn new() -> Self {
        let state = Rc::new(RefCell::new(State {
            informers: BTreeMap::new(),
            log_level: Level::Info,
            logs: Vec::new(),
            counters: BTreeMap::new(),
            gauges: BTreeMap::new(),
            verdicts: BTreeMap::new(),
            actions: Vec::new(),
            answer: Box::new(|_| Ok(Accepted::Queued)),
        }));
        let h = Self {
            plugin: RefCell::new(None),
            state,
            seq: BTreeMap::new(),
        };
        for i in h.info().informers {
            h.state.borrow_mut().informer(&i);
        }
        h
    }

    /// What the plugin says of itself.
    pub fn info(&self) -> PluginInfo {
        enter(&self.state, P::describe)
    }

    /// Grants an informer the plugin may read (it has no objects yet).
    pub fn grant(&mut self, informer: &str) -> &mut Self {
        self.state.borrow_mut().informer(informer);
        self
    }

    /// Puts `object` in `informer`'s cache (granting it), without a notification.
    ///
    /// # Panics
    /// When the object has no `apiVersion`, `kind` or `metadata.name`.
    pub fn cache(&mut self, informer: &str, object: Value) -> &mut Self {
        self.store(informer, &object);
        self
    }

    /// Adds an index to `informer` (as the host's config would): the values `f` gives an object.
    pub fn index(
        &mut self,
        informer: &str,
        name: &str,
        f: impl Fn(&Value) -> Vec<String> + 'static,
    ) -> &mut Self {
        self.state
            .borrow_mut()
            .informer(informer)
            .indexes
            .insert(name.to_owned(), Box::new(f));
        self
    }

    /// Keeps log lines at `level` and up (the host's `logLevel`; default `info`).
    pub fn log_level(&mut self, level: Level) -> &mut Self {
        self.state.borrow_mut().log_level = level;
        self
    }

    /// How the host answers each action (after recording it); default: `Ok(Accepted::Queued)`.
    pub fn on_action(
        &mut self,
        f: impl FnMut(&Action) -> Result<Accepted, ActionError> + 'static,
    ) -> &mut Self {
        self.state.borrow_mut().answer = Box::new(f);
        self
    }

    /// Calls the plugin's `init` with `settings` (JSON).
    pub fn init(&mut self, settings: &str) -> crate::Result<()> {
        enter(&self.state, || {
            crate::__private::init::<P>(&self.plugin, settings.to_owned())
        })
        .map_err(crate::Error::from)
    }

    fn deliver(
        &mut self,
        informer: &str,
        kind: Kind,
        object: &Encoded,
        old: Option<&Encoded>,
    ) -> Outcome {
        let seq = self.seq.entry(informer.to_owned()).or_default();
        *seq += 1;
        let entry = Entry {
            seq: *seq,
            kind,
            object,
            old,
        };
        let batch = BatchWriter::new(informer, [entry].into_iter(), false).to_vec();
        let mut out = enter(&self.state, || {
            crate::__private::handle::<P>(&self.plugin, batch)
        });
        match out.pop() {
            Some(WitOutcome::Ok) => Outcome::Ok,
            Some(WitOutcome::Error(e)) => Outcome::Error(e),
            None => {
                Outcome::Error("the plugin gave no outcome (it could not read the batch)".into())
            }
        }
    }

    fn cached(&self, informer: &str, key: &str) -> Cached {
        self.state
            .borrow()
            .informers
            .get(informer)
            .and_then(|i| i.objects.get(key))
            .cloned()
            .unwrap_or_else(|| panic!("{key} is not in the cache of {informer:?}"))
    }

    /// Caches `object`: its encoding, and the cached entry of its key it replaced.
    fn store(&mut self, informer: &str, object: &Value) -> (Encoded, Option<Cached>) {
        let (key, bytes) = encoded(object);
        let replaced = self
            .state
            .borrow_mut()
            .informer(informer)
            .objects
            .insert(key, (object.clone(), bytes.clone()));
        (bytes, replaced)
    }

    /// Delivers `object` as added (not part of the initial list), caching it first.
    pub fn add(&mut self, informer: &str, object: Value) -> Outcome {
        let (bytes, _) = self.store(informer, &object);
        self.deliver(
            informer,
            Kind::Added {
                initial_list: false,
            },
            &bytes,
            None,
        )
    }

    /// Delivers `object` as added by the initial list (or a late-join replay).
    pub fn list(&mut self, informer: &str, object: Value) -> Outcome {
        let (bytes, _) = self.store(informer, &object);
        self.deliver(informer, Kind::Added { initial_list: true }, &bytes, None)
    }

    /// Delivers `object` as updated, the cached one being the old state.
    ///
    /// # Panics
    /// When no object of its key is cached.
    pub fn update(&mut self, informer: &str, object: Value) -> Outcome {
        let (new, replaced) = self.store(informer, &object);
        let (old_value, old) = replaced.unwrap_or_else(|| {
            let key = encoded(&object).0;
            panic!("{key} is not in the cache of {informer:?}")
        });
        let rv = |v: &Value| v.pointer("/metadata/resourceVersion").cloned();
        let resync = rv(&object) == rv(&old_value);
        self.deliver(informer, Kind::Updated { resync }, &new, Some(&old))
    }

    /// Delivers the cached object `key` as a resync (an update that changed nothing).
    pub fn resync(&mut self, informer: &str, key: &str) -> Outcome {
        let (_, bytes) = self.cached(informer, key);
        self.deliver(informer, Kind::Updated { resync: true }, &bytes, None)
    }

    /// Removes the cached object `key` and delivers its deletion; its verdicts are cleared.
    pub fn delete(&mut self, informer: &str, key: &str) -> Outcome {
        self.remove(informer, key, false)
    }

    /// Like [`Harness::delete`], for a deletion the informer missed (final state unknown).
    pub fn delete_missed(&mut self, informer: &str, key: &str) -> Outcome {
        self.remove(informer, key, true)
    }

    fn remove(&mut self, informer: &str, key: &str, final_state_unknown: bool) -> Outcome {
        let (_, bytes) = self.cached(informer, key);
        if let Some(i) = self.state.borrow_mut().informers.get_mut(informer) {
            i.objects.remove(key);
        }
        let kind = Kind::Deleted {
            final_state_unknown,
        };
        let out = self.deliver(informer, kind, &bytes, None);
        self.state
            .borrow_mut()
            .verdicts
            .retain(|(i, k, _), _| !(i == informer && k == key));
        out
    }

    /// The lines logged so far (at the kept levels), oldest first.
    pub fn logs(&self) -> Vec<(Level, String)> {
        self.state.borrow().logs.clone()
    }

    /// The lines logged so far, forgotten.
    pub fn take_logs(&mut self) -> Vec<(Level, String)> {
        std::mem::take(&mut self.state.borrow_mut().logs)
    }

    /// The current violations, by informer, object and rule.
    pub fn verdicts(&self) -> Vec<Verdict> {
        self.state
            .borrow()
            .verdicts
            .iter()
            .map(|((informer, key, rule), (severity, message))| Verdict {
                informer: informer.clone(),
                key: key.clone(),
                rule: rule.clone(),
                severity: *severity,
                message: message.clone(),
            })
            .collect()
    }

    /// The actions asked for so far, in order.
    pub fn actions(&self) -> Vec<Action> {
        self.state.borrow().actions.clone()
    }

    /// The actions asked for so far, forgotten.
    pub fn take_actions(&mut self) -> Vec<Action> {
        std::mem::take(&mut self.state.borrow_mut().actions)
    }

    /// A counter's value (0 when never added to).
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let key = series(name, labels);
        self.state.borrow().counters.get(&key).copied().unwrap_or(0)
    }

    /// A gauge's value (`None` when never set).
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let key = series(name, labels);
        self.state.borrow().gauges.get(&key).copied()
    }

    /// Looks at the plugin's state (after `init`).
    ///
    /// # Panics
    /// Before `init`.
    pub fn with_plugin<R>(&self, f: impl FnOnce(&P) -> R) -> R {
        f(self.plugin.borrow().as_ref().expect("init first"))
    }

    /// A hot reload: `Q` (a new version, or `P` again) is initialised with `settings` and
    /// restores what this instance's `snapshot` hands over. The host's state (caches, verdicts,
    /// metrics, logs, actions) carries over, as in the host.
    pub fn reload<Q: Plugin>(self, settings: &str) -> crate::Result<Harness<Q>> {
        let snapshot = enter(&self.state, || {
            crate::__private::snapshot::<P>(&self.plugin)
        });
        let mut next = Harness::<Q> {
            plugin: RefCell::new(None),
            state: self.state,
            seq: self.seq,
        };
        next.init(settings)?;
        if let Some(bytes) = snapshot {
            enter(&next.state, || {
                crate::__private::restore::<Q>(&next.plugin, bytes)
            })?;
        }
        Ok(next)
    }
}

type Series = (String, Vec<(String, String)>);

/// A series with its labels in order, however the plugin or the test wrote them.
fn sorted(name: &str, labels: &[(String, String)]) -> Series {
    let mut labels = labels.to_vec();
    labels.sort();
    (name.to_owned(), labels)
}

fn series(name: &str, labels: &[(&str, &str)]) -> Series {
    let labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    sorted(name, &labels)
}

fn encoded(object: &Value) -> (String, Encoded) {
    let meta = meta_of(object).unwrap_or_else(|e| panic!("{e}: {object}"));
    let key = key_of(meta.namespace.as_deref(), &meta.name);
    (key, wisp_abi::encode_object(&meta, &object.to_string()))
}

#[cfg(test)]
mod tests;
