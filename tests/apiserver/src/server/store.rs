//! The objects, the global resourceVersion, the event history and the registry of open watches.
//!
//! Like etcd, every change takes the next global resourceVersion and is appended to one event
//! log. The log keeps each event's previous object, so the state of a collection at any
//! resourceVersion still in the log is rebuilt by undoing later events. Everything below the
//! compaction floor is gone: reads and watches from there are answered with 410 Expired.
//!
//! Writers fan each event out to the open watches of its collection over unbounded channels,
//! under the same lock that assigns the resourceVersion; so a watch registered under that lock
//! sees every later event exactly once, and a slow watcher never stalls a writer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::history::{EventKind, History, LoggedEvent};
use super::object::{Obj, ObjectKey, StoreError, StoredObject, generate_name, identify, meta_mut};
use super::resource::{ResourceKey, new_uid, now_rfc3339, rfc3339_in};

/// Default number of events kept for replay and exact reads before the oldest are compacted.
pub const DEFAULT_HISTORY_LIMIT: usize = 100_000;

/// The resourceVersion a fresh server reports.
const INITIAL_RV: u64 = 1;

/// How far `restart` moves the resourceVersion, marking a new epoch.
const RESTART_RV_JUMP: u64 = 1_000_000;

/// What a watch task receives, in order.
#[derive(Debug)]
pub(crate) enum WatchMsg {
    /// A change to the watched collection.
    Event(Arc<LoggedEvent>),
    /// End the stream cleanly.
    Close,
    /// Send ERROR 410 Expired, then end the stream.
    Expire,
}

/// Which state a read wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadAt {
    /// The newest state.
    Latest,
    /// The newest state, which must be at least this RV.
    NotOlderThan(u64),
    /// The state exactly at this RV.
    Exact(u64),
}

/// Why a read at a resourceVersion cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// Below the compaction floor (410 Expired).
    Expired { requested: u64, floor: u64 },
    /// Newer than anything the server has (504 Timeout).
    TooLarge { requested: u64, current: u64 },
}

/// A collection's objects at one resourceVersion, sorted by key.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    pub rv: u64,
    pub objects: Vec<Obj>,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WatchFrom {
    /// resourceVersion "" or "0": synthetic ADDED for every object, then live events.
    Now,
    /// sendInitialEvents=true: like `Now`, then the initial-events-end bookmark.
    InitialEvents,
    /// Replay the logged events after this RV, then live events.
    Rv(u64),
}

/// What a watch sends before its live events.
#[derive(Debug)]
pub(crate) enum Initial {
    /// Synthetic ADDED events for these objects.
    Objects(Vec<Obj>),
    /// Replayed history.
    Replay(Vec<Arc<LoggedEvent>>),
}

/// A watch registered with the store.
#[derive(Debug)]
pub(crate) struct WatchRegistration {
    /// Registry id, for unregistering.
    pub id: u64,
    /// Live events and control messages.
    pub rx: UnboundedReceiver<WatchMsg>,
    /// Events to send first.
    pub initial: Initial,
    /// The RV the watch is in sync with once `initial` is sent.
    pub synced_rv: u64,
}

/// A watch could not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WatchExpired {
    pub requested: u64,
    pub floor: u64,
}

#[derive(Debug, Default)]
struct Collection {
    /// Kind of the objects, learned from the last write.
    kind: Option<String>,
    /// The current objects.
    objects: BTreeMap<ObjectKey, Obj>,
}

#[derive(Debug)]
struct State {
    /// The latest resourceVersion.
    rv: u64,
    /// Current objects by collection.
    collections: HashMap<ResourceKey, Collection>,
    /// Every change since the compaction floor.
    history: History,
    /// Open watches by collection, each with the sender of its event channel.
    watchers: HashMap<ResourceKey, HashMap<u64, UnboundedSender<WatchMsg>>>,
    /// Next watch registry id.
    next_watch_id: u64,
    /// Current objects by uid (owners the garbage collector looks up).
    uids: HashMap<String, Location>,
    /// Current objects naming each uid in their ownerReferences (the collector's graph).
    dependents: HashMap<String, BTreeSet<Location>>,
}

/// The state of the test API server.
#[derive(Debug)]
pub(crate) struct Store {
    state: Mutex<State>,
}

/// The namespaces a fresh cluster has.
pub(crate) const INITIAL_NAMESPACES: &[&str] =
    &["default", "kube-node-lease", "kube-public", "kube-system"];

/// The namespaces every cluster starts with, stored at the initial resourceVersion (they are
/// older than any history, so no watch replays them).
fn initial_collections() -> HashMap<ResourceKey, Collection> {
    let objects = INITIAL_NAMESPACES
        .iter()
        .map(|name| {
            let mut ns = namespace_object(name);
            if let Some(meta) = ns.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("uid".into(), Value::String(new_uid()));
                meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
                meta.insert(
                    "resourceVersion".into(),
                    Value::String(INITIAL_RV.to_string()),
                );
            }
            prepare_namespace(&mut ns);
            ((String::new(), name.to_string()), StoredObject::new(&ns))
        })
        .collect();
    let collection = Collection {
        kind: Some("Namespace".into()),
        objects,
    };
    HashMap::from([(namespaces(), collection)])
}

/// A Namespace object as a client would post it.
fn namespace_object(name: &str) -> Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// What the namespace strategy sets on create: the `kubernetes` finalizer (unless given) and
/// phase Active.
fn prepare_namespace(obj: &mut Value) {
    if let Some(map) = obj.as_object_mut() {
        let spec = map
            .entry("spec")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(spec) = spec.as_object_mut() {
            spec.entry("finalizers")
                .or_insert_with(|| serde_json::json!(["kubernetes"]));
        }
        map.insert("status".into(), serde_json::json!({"phase": "Active"}));
    }
}

impl Default for Store {
    fn default() -> Self {
        let store = Self {
            state: Mutex::new(State {
                rv: INITIAL_RV,
                collections: initial_collections(),
                history: History::new(INITIAL_RV, DEFAULT_HISTORY_LIMIT),
                watchers: HashMap::new(),
                next_watch_id: 1,
                uids: HashMap::new(),
                dependents: HashMap::new(),
            }),
        };
        {
            let mut s = store.lock();
            let initial: Vec<(Location, Obj)> = s
                .collections
                .iter()
                .flat_map(|(r, c)| {
                    c.objects
                        .iter()
                        .map(|(k, o)| ((r.clone(), k.clone()), Arc::clone(o)))
                })
                .collect();
            for ((resource, key), obj) in initial {
                s.index(&resource, &key, &obj.value());
            }
        }
        store
    }
}

/// Sets `metadata.resourceVersion`.
fn stamp_rv(obj: &mut Value, rv: u64) -> Result<(), StoreError> {
    meta_mut(obj)?.insert("resourceVersion".into(), Value::String(rv.to_string()));
    Ok(())
}

impl State {
    /// Stores `object` (or removes the key for a delete) under the next RV, logs the change and
    /// fans it out to the collection's watches. `value` is `object` before it was serialized.
    fn commit(
        &mut self,
        (resource, key): Location,
        kind: EventKind,
        (object, value): (Obj, &Value),
        prev: Option<Obj>,
    ) {
        self.rv += 1;
        let collection = self.collections.entry(resource.clone()).or_default();
        if kind == EventKind::Deleted {
            collection.objects.remove(&key);
        } else {
            collection.objects.insert(key.clone(), Arc::clone(&object));
        }
        let event = Arc::new(LoggedEvent {
            rv: self.rv,
            resource,
            key,
            kind,
            object,
            prev,
        });
        if let Some(watchers) = self.watchers.get(&event.resource) {
            for tx in watchers.values() {
                // A closed receiver means the watch task is ending and will unregister itself.
                let _ = tx.send(WatchMsg::Event(Arc::clone(&event)));
            }
        }
        let (resource, key) = (event.resource.clone(), event.key.clone());
        let released: Vec<String> = match &event.prev {
            Some(prev) => {
                let prev = prev.value();
                self.unindex(&resource, &key, &prev);
                let now = if kind == EventKind::Deleted {
                    Vec::new()
                } else {
                    owner_refs(value)
                };
                owner_refs(&prev)
                    .into_iter()
                    .map(|(uid, _)| uid)
                    .filter(|uid| !now.iter().any(|(u, _)| u == uid))
                    .collect()
            }
            None => Vec::new(),
        };
        if kind != EventKind::Deleted {
            self.index(&resource, &key, value);
        }
        self.history.push(event);
        // The garbage collector: the dependents of a deleted object, and the owners waiting in
        // the foreground for a dependent that just let go of them.
        if kind == EventKind::Deleted {
            self.collect_dependents(value);
        }
        for owner in released {
            self.release_foreground(&owner);
        }
    }

    /// Adds an object to the uid and ownerReferences indexes.
    fn index(&mut self, resource: &ResourceKey, key: &ObjectKey, obj: &Value) {
        let location = (resource.clone(), key.clone());
        if let Some(uid) = uid_of(obj) {
            self.uids.insert(uid, location.clone());
        }
        for (owner, _) in owner_refs(obj) {
            self.dependents
                .entry(owner)
                .or_default()
                .insert(location.clone());
        }
    }

    /// Removes an object from the uid and ownerReferences indexes.
    fn unindex(&mut self, resource: &ResourceKey, key: &ObjectKey, obj: &Value) {
        let location = (resource.clone(), key.clone());
        if let Some(uid) = uid_of(obj)
            && self.uids.get(&uid) == Some(&location)
        {
            self.uids.remove(&uid);
        }
        for (owner, _) in owner_refs(obj) {
            if let Some(set) = self.dependents.get_mut(&owner) {
                set.remove(&location);
                if set.is_empty() {
                    self.dependents.remove(&owner);
                }
            }
        }
    }

    /// The current dependents of `uid`, with their current state.
    fn dependents_of(&self, uid: &str) -> Vec<(Location, Obj)> {
        self.dependents
            .get(uid)
            .map(|set| {
                set.iter()
                    .filter_map(|(r, k)| Some(((r.clone(), k.clone()), self.current(r, k)?)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether the object at a location has dependents.
    fn dependents_of_location(&self, resource: &ResourceKey, key: &ObjectKey) -> bool {
        self.current(resource, key)
            .map(|o| o.uid().to_string())
            .filter(|uid| !uid.is_empty())
            .is_some_and(|uid| !self.dependents_of(&uid).is_empty())
    }

    /// Rewrites `metadata.ownerReferences` of a dependent without the references to `uid`.
    fn drop_owner_ref(&mut self, location: &Location, obj: Obj, uid: &str) {
        let mut next = obj.value();
        let Some(meta) = next.get_mut("metadata").and_then(Value::as_object_mut) else {
            return;
        };
        if let Some(refs) = meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
            if refs.is_empty() {
                meta.remove("ownerReferences");
            }
        }
        let (resource, key) = location;
        let _ = self.commit_value(resource, key, EventKind::Modified, next, obj);
    }

    /// Background collection of the dependents of a deleted owner: each is deleted, unless it
    /// has another owner that still exists, in which case only its reference to the deleted
    /// owner goes.
    fn collect_dependents(&mut self, owner: &Value) {
        let Some(uid) = uid_of(owner) else {
            return;
        };
        for (location, obj) in self.dependents_of(&uid) {
            let other_owner = owner_refs(&obj.value())
                .iter()
                .any(|(u, _)| *u != uid && self.uids.contains_key(u));
            if other_owner {
                self.drop_owner_ref(&location, obj, &uid);
            } else {
                let options = DeleteOptions {
                    propagation: Some(Propagation::Background),
                    // The collector's deletes end a Pod's grace at once (a deviation: its
                    // kubelet would take the grace period).
                    grace_period: Some(0),
                    ..DeleteOptions::default()
                };
                let _ = self.delete(&location.0, &location.1, &options);
            }
        }
    }

    /// Removes the `foregroundDeletion` finalizer of the object with `uid` when it is being
    /// deleted in the foreground and no dependent blocks it any more; it goes if nothing else
    /// holds it.
    fn release_foreground(&mut self, uid: &str) {
        let Some((resource, key)) = self.uids.get(uid).cloned() else {
            return;
        };
        let Some(owner) = self.current(&resource, &key) else {
            return;
        };
        let owner_value = owner.value();
        let mut held = finalizers(&owner_value);
        if owner_value.pointer("/metadata/deletionTimestamp").is_none()
            || !held.iter().any(|f| f == FOREGROUND)
        {
            return;
        }
        let blocked = self.dependents_of(uid).iter().any(|(_, dep)| {
            owner_refs(&dep.value())
                .iter()
                .any(|(u, block)| u == uid && *block)
        });
        if blocked {
            return;
        }
        held.retain(|f| f != FOREGROUND);
        let mut next = owner_value;
        let Ok(meta) = meta_mut(&mut next) else {
            return;
        };
        if held.is_empty() {
            meta.remove("finalizers");
        } else {
            meta.insert("finalizers".into(), serde_json::json!(held));
        }
        let kind = if goes_now(&resource, &next, &held) {
            EventKind::Deleted
        } else {
            EventKind::Modified
        };
        let _ = self.commit_value(&resource, &key, kind, next, owner);
        if kind == EventKind::Deleted {
            self.finish_namespace(&key.0);
        }
    }

    fn current(&self, resource: &ResourceKey, key: &ObjectKey) -> Option<Obj> {
        self.collections.get(resource)?.objects.get(key).cloned()
    }

    /// Objects of `resource` in `namespace` (all if `None`) at `rv`, which must be >= floor.
    fn objects_at(&self, resource: &ResourceKey, namespace: Option<&str>, rv: u64) -> Vec<Obj> {
        let in_ns = |key: &ObjectKey| namespace.is_none_or(|ns| key.0 == ns);
        let Some(collection) = self.collections.get(resource) else {
            return Vec::new();
        };
        let current = collection.objects.iter().filter(|(k, _)| in_ns(k));
        if rv >= self.rv {
            return current.map(|(_, o)| Arc::clone(o)).collect();
        }
        let mut objects: BTreeMap<ObjectKey, Obj> =
            current.map(|(k, o)| (k.clone(), Arc::clone(o))).collect();
        self.history.rewind(&mut objects, resource, in_ns, rv);
        objects.into_values().collect()
    }

    /// Sends `msg()` to every open watch and forgets them all.
    fn end_watches(&mut self, msg: impl Fn() -> WatchMsg) {
        for (_, watchers) in self.watchers.drain() {
            for tx in watchers.into_values() {
                let _ = tx.send(msg());
            }
        }
    }
}

/// A DELETE's options: preconditions and propagation policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeleteOptions {
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
    /// `propagationPolicy` (or `orphanDependents`); `None`: the kind's default.
    pub propagation: Option<Propagation>,
    /// `gracePeriodSeconds`; `None`: the object's own (a Pod's
    /// `terminationGracePeriodSeconds`).
    pub grace_period: Option<i64>,
}

/// The grace period of a DELETE of `obj` with `requested` (`gracePeriodSeconds`): 0 (deleted at
/// once) for every kind but Pods. A Pod's is the request's, else its
/// `terminationGracePeriodSeconds` (30 when unset, its default); 0 when it is not scheduled
/// (no `nodeName`) or has terminated; 1 when negative
/// (pkg/registry/core/pod/strategy.go `CheckGracefulDelete`).
pub(crate) fn grace_period(resource: &ResourceKey, obj: &Value, requested: Option<i64>) -> i64 {
    if !is_pods(resource) {
        return 0;
    }
    let period = requested.unwrap_or_else(|| {
        obj.pointer("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(DEFAULT_TERMINATION_GRACE_SECONDS)
    });
    let scheduled = obj
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = obj.pointer("/status/phase").and_then(Value::as_str);
    if !scheduled || matches!(phase, Some("Succeeded" | "Failed")) {
        0
    } else if period < 0 {
        1
    } else {
        period
    }
}

/// A Pod's `terminationGracePeriodSeconds` when it sets none (its API default).
const DEFAULT_TERMINATION_GRACE_SECONDS: i64 = 30;

/// Whether `resource` is the core Pods collection.
pub(crate) fn is_pods(resource: &ResourceKey) -> bool {
    resource.group.is_empty() && resource.version == "v1" && resource.plural == "pods"
}

/// A pending graceful deletion: `deletionGracePeriodSeconds` above 0.
fn grace_pending(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|g| g > 0)
}

/// Whether an object being deleted goes now: no finalizer holds it, its grace period (if any)
/// is over, and it is not a Namespace (whose controller removes it).
fn goes_now(resource: &ResourceKey, obj: &Value, held: &[String]) -> bool {
    held.is_empty() && !grace_pending(obj) && !is_namespace(resource)
}

/// How dependents (objects whose `metadata.ownerReferences` name the deleted object's uid) are
/// handled by the garbage collector, which runs synchronously within the write that deletes
/// an owner:
/// - `Background`: the owner goes at once, then its dependents are deleted (in the background
///   themselves); a dependent that has another owner that still exists only loses its
///   reference to the deleted one.
/// - `Foreground`: the owner gets `deletionTimestamp` and the `foregroundDeletion` finalizer, its
///   dependents are deleted (in the foreground themselves when they have dependents), and the
///   finalizer is removed once no dependent with `blockOwnerDeletion: true` is left.
/// - `Orphan`: the owner gets the `orphan` finalizer, its dependents lose their references to
///   it, then the finalizer is removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// Whether objects of `kind` carry `metadata.generation`: the kinds whose registry strategy
/// sets it to 1 on create and bumps it when `spec` changes (e.g. pkg/registry/apps/deployment/strategy.go
/// PrepareForCreate), and every custom resource (apiextensions-apiserver's customResourceStrategy).
/// A ConfigMap, a Secret, a Service, a Namespace have none.
pub(crate) fn tracks_generation(resource: &ResourceKey, kind: &str) -> bool {
    if !super::patch::is_builtin_group(&resource.group) {
        return true;
    }
    matches!(
        (resource.group.as_str(), kind),
        ("", "Pod" | "ReplicationController")
            | (
                "apps" | "extensions",
                "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet"
            )
            | ("batch", "Job" | "CronJob")
            | ("policy", "PodDisruptionBudget")
            | (
                "networking.k8s.io" | "extensions",
                "Ingress" | "NetworkPolicy"
            )
            | ("discovery.k8s.io", "EndpointSlice")
            | (
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration"
                    | "MutatingWebhookConfiguration"
                    | "ValidatingAdmissionPolicy"
                    | "ValidatingAdmissionPolicyBinding"
                    | "MutatingAdmissionPolicy"
                    | "MutatingAdmissionPolicyBinding"
            )
            | (
                "flowcontrol.apiserver.k8s.io",
                "FlowSchema" | "PriorityLevelConfiguration"
            )
            | ("apiextensions.k8s.io", "CustomResourceDefinition")
    )
}

/// Sets `metadata.generation` of an object of `kind` about to be stored: `next` for the kinds
/// that track it, none for the others.
pub(crate) fn stamp_generation(
    meta: &mut serde_json::Map<String, Value>,
    resource: &ResourceKey,
    kind: &str,
    next: i64,
) {
    if tracks_generation(resource, kind) {
        meta.insert("generation".into(), Value::from(next));
    } else {
        meta.remove("generation");
    }
}

/// The GC policy of a DELETE without one: `Orphan` for batch/v1 Jobs and v1
/// ReplicationControllers (their strategies' `DefaultGarbageCollectionPolicy`, kept for
/// backwards compatibility), `Background` for every other kind.
fn default_propagation(resource: &ResourceKey) -> Propagation {
    match (
        resource.group.as_str(),
        resource.version.as_str(),
        resource.plural.as_str(),
    ) {
        ("batch", "v1", "jobs") | ("", "v1", "replicationcontrollers") => Propagation::Orphan,
        _ => Propagation::Background,
    }
}

/// The uids in `metadata.ownerReferences`, with whether each has `blockOwnerDeletion: true`.
fn owner_refs(obj: &Value) -> Vec<(String, bool)> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| {
                    let uid = r.get("uid").and_then(Value::as_str)?;
                    let block = r.get("blockOwnerDeletion").and_then(Value::as_bool);
                    Some((uid.to_string(), block == Some(true)))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `metadata.uid` of an object.
fn uid_of(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Where an object is stored.
type Location = (ResourceKey, ObjectKey);

/// The finalizer of an owner being deleted in the foreground.
const FOREGROUND: &str = "foregroundDeletion";

/// The finalizer of an owner whose dependents are being orphaned.
const ORPHAN: &str = "orphan";

/// `metadata.finalizers` of an object.
fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn is_namespace(resource: &ResourceKey) -> bool {
    resource.group.is_empty() && resource.version == "v1" && resource.plural == "namespaces"
}

fn namespaces() -> ResourceKey {
    ResourceKey {
        group: String::new(),
        version: "v1".into(),
        plural: "namespaces".into(),
    }
}

/// `pods` for the core group, `deployments.apps` otherwise, as Status messages name them.
pub(crate) fn qualified(resource: &ResourceKey) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// 403 Forbidden for a create in a namespace being deleted (the NamespaceLifecycle admission).
fn namespace_terminating(resource: &ResourceKey, key: &ObjectKey) -> StoreError {
    let (ns, name) = key;
    let reason =
        format!("unable to create new content in namespace {ns} because it is being terminated");
    let message = if name.is_empty() {
        format!("forbidden: {reason}")
    } else {
        format!("{} {name:?} is forbidden: {reason}", qualified(resource))
    };
    StoreError::Api {
        code: 403,
        reason: "Forbidden",
        message,
        details: Some(serde_json::json!({
            "name": name,
            "group": resource.group,
            "kind": resource.plural,
            "causes": [{
                "reason": "NamespaceTerminating",
                "message": format!("namespace {ns} is being terminated"),
                "field": "metadata.namespace",
            }],
        })),
    }
}

/// 422 Invalid for finalizers added to an object being deleted.
fn no_new_finalizers(
    resource: &ResourceKey,
    kind: &str,
    name: &str,
    added: &[String],
) -> StoreError {
    let mut added = added.to_vec();
    added.sort();
    added.dedup();
    let list = added
        .iter()
        .map(|f| format!("{f:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    let detail = format!(
        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{list}}}"
    );
    let qualified_kind = if resource.group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{}", resource.group)
    };
    StoreError::Api {
        code: 422,
        reason: "Invalid",
        message: format!("{qualified_kind} {name:?} is invalid: metadata.finalizers: {detail}"),
        details: Some(serde_json::json!({
            "name": name,
            "group": resource.group,
            "kind": kind,
            "causes": [{"reason": "FieldValueForbidden", "message": detail, "field": "metadata.finalizers"}],
        })),
    }
}

/// 409 Conflict for a failed delete precondition.
fn precondition_failed(
    resource: &ResourceKey,
    key: &ObjectKey,
    what: &str,
    want: &str,
    have: &str,
) -> StoreError {
    StoreError::Api {
        code: 409,
        reason: "Conflict",
        message: format!(
            "Operation cannot be fulfilled on {} {:?}: Precondition failed: {what} in precondition: {want}, {what} in object meta: {have}",
            qualified(resource),
            key.1
        ),
        details: Some(
            serde_json::json!({"name": key.1, "group": resource.group, "kind": resource.plural}),
        ),
    }
}

impl State {
    /// 404 NotFound (`namespaces "X" not found`) when `namespace` is not empty and missing.
    fn check_namespace(&self, namespace: &str) -> Result<(), StoreError> {
        let key = (String::new(), namespace.to_string());
        if namespace.is_empty() || self.current(&namespaces(), &key).is_some() {
            return Ok(());
        }
        Err(StoreError::NotFound {
            plural: "namespaces".into(),
            name: namespace.to_string(),
        })
    }

    /// Creates `obj`, stamping uid, creationTimestamp, generation 1 and the next RV. A missing
    /// namespace is created first with `implicit_namespace`, else refused with 404.
    fn create(&mut self, mut obj: Value, implicit_namespace: bool) -> Result<Value, StoreError> {
        generate_name(&mut obj)?;
        let (resource, key, kind) = identify(&obj)?;
        if self.current(&resource, &key).is_some() {
            return Err(StoreError::AlreadyExists {
                plural: resource.plural,
                name: key.1,
            });
        }
        if implicit_namespace && self.check_namespace(&key.0).is_err() {
            self.create(namespace_object(&key.0), false)?;
        }
        self.check_namespace(&key.0)?;
        if !key.0.is_empty() && self.terminating(&key.0) {
            return Err(namespace_terminating(&resource, &key));
        }
        if is_namespace(&resource) {
            // As the API server's namespace strategy does on create.
            prepare_namespace(&mut obj);
        }
        if resource == super::discovery::crd_resource() {
            super::discovery::settle_crd(&mut obj);
        }
        let meta = meta_mut(&mut obj)?;
        meta.insert("uid".into(), Value::String(new_uid()));
        meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
        stamp_generation(meta, &resource, &kind, 1);
        stamp_rv(&mut obj, self.rv + 1)?;
        let stored = StoredObject::new(&obj);
        self.collections.entry(resource.clone()).or_default().kind = Some(kind);
        self.commit((resource, key), EventKind::Added, (stored, &obj), None);
        Ok(obj)
    }

    /// Whether `namespace` is being deleted.
    fn terminating(&self, namespace: &str) -> bool {
        self.current(&namespaces(), &(String::new(), namespace.to_string()))
            .is_some_and(|ns| ns.value().pointer("/metadata/deletionTimestamp").is_some())
    }

    /// Stores a new state of an existing object (or deletes it) under the next RV.
    fn commit_value(
        &mut self,
        resource: &ResourceKey,
        key: &ObjectKey,
        kind: EventKind,
        mut value: Value,
        prev: Obj,
    ) -> Result<Value, StoreError> {
        stamp_rv(&mut value, self.rv + 1)?;
        let stored = StoredObject::new(&value);
        self.commit(
            (resource.clone(), key.clone()),
            kind,
            (stored, &value),
            Some(prev),
        );
        Ok(value)
    }

    fn delete(
        &mut self,
        resource: &ResourceKey,
        key: &ObjectKey,
        options: &DeleteOptions,
    ) -> Result<Value, StoreError> {
        let Some(old) = self.current(resource, key) else {
            return Err(StoreError::NotFound {
                plural: resource.plural.clone(),
                name: key.1.clone(),
            });
        };
        let old_value = old.value();
        let meta = |field: &str| {
            old_value
                .pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        if let Some(uid) = &options.uid
            && *uid != meta("uid")
        {
            return Err(precondition_failed(resource, key, "UID", uid, &meta("uid")));
        }
        if let Some(rv) = &options.resource_version
            && *rv != meta("resourceVersion")
        {
            let have = meta("resourceVersion");
            return Err(precondition_failed(
                resource,
                key,
                "ResourceVersion",
                rv,
                &have,
            ));
        }
        if old_value.pointer("/metadata/deletionTimestamp").is_some() {
            // Already being deleted: only a shorter grace period changes anything.
            return self.shorten_grace(resource, key, old, options.grace_period);
        }
        let propagation = options
            .propagation
            .unwrap_or_else(|| default_propagation(resource));
        let gc_finalizer = match propagation {
            Propagation::Background => None,
            Propagation::Foreground => Some(FOREGROUND),
            Propagation::Orphan => Some(ORPHAN),
        };
        let namespace = is_namespace(resource);
        let grace = grace_period(resource, &old_value, options.grace_period);
        let mut held = finalizers(&old_value);
        if held.is_empty() && gc_finalizer.is_none() && !namespace && grace == 0 {
            let deleted = self.commit_value(resource, key, EventKind::Deleted, old_value, old)?;
            self.finish_namespace(&key.0);
            return Ok(deleted);
        }
        let mut marked = old_value;
        if let Some(gc) = gc_finalizer
            && !held.iter().any(|f| f == gc)
        {
            held.push(gc.to_string());
        }
        {
            // staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go BeforeDelete: the
            // deletion time is now plus the grace period; a graceful delete bumps generation.
            let m = meta_mut(&mut marked)?;
            m.insert("deletionTimestamp".into(), Value::String(rfc3339_in(grace)));
            m.insert("deletionGracePeriodSeconds".into(), Value::from(grace));
            if grace > 0
                && let Some(generation) = m.get("generation").and_then(Value::as_i64)
            {
                m.insert("generation".into(), Value::from(generation + 1));
            }
            if !held.is_empty() {
                m.insert("finalizers".into(), serde_json::json!(held));
            }
        }
        if namespace {
            marked["status"] = serde_json::json!({"phase": "Terminating"});
        }
        // The answer is the object as this write marked it, deletionTimestamp and finalizers
        // (foregroundDeletion, orphan) included: the garbage collector acts after the answer.
        let mut result = self.commit_value(resource, key, EventKind::Modified, marked, old)?;
        let answer = result.clone();
        let uid = uid_of(&result).unwrap_or_default();
        if gc_finalizer == Some(FOREGROUND) && !namespace {
            // The garbage collector deletes the dependents, then lets go of the owner once none
            // blocks it.
            for ((dep_resource, dep_key), _) in self.dependents_of(&uid) {
                let policy = if self.dependents_of_location(&dep_resource, &dep_key) {
                    Propagation::Foreground
                } else {
                    Propagation::Background
                };
                let options = DeleteOptions {
                    propagation: Some(policy),
                    grace_period: Some(0),
                    ..DeleteOptions::default()
                };
                let _ = self.delete(&dep_resource, &dep_key, &options);
            }
            self.release_foreground(&uid);
            return Ok(answer);
        }
        if gc_finalizer == Some(ORPHAN) {
            // The garbage collector orphans the dependents.
            for (location, obj) in self.dependents_of(&uid) {
                self.drop_owner_ref(&location, obj, &uid);
            }
        }
        if let Some(gc) = gc_finalizer {
            // The garbage collector is done and lets go of the object.
            let current = self
                .current(resource, key)
                .ok_or_else(|| StoreError::NotFound {
                    plural: resource.plural.clone(),
                    name: key.1.clone(),
                })?;
            let mut next = current.value();
            held.retain(|f| f != gc);
            let m = meta_mut(&mut next)?;
            if held.is_empty() {
                m.remove("finalizers");
            } else {
                m.insert("finalizers".into(), serde_json::json!(held));
            }
            let kind = if goes_now(resource, &next, &held) {
                EventKind::Deleted
            } else {
                EventKind::Modified
            };
            result = self.commit_value(resource, key, kind, next, current)?;
            if kind == EventKind::Deleted {
                self.finish_namespace(&key.0);
            }
        }
        if namespace {
            self.purge_namespace(&key.1);
            if let Some(ns) = self.current(resource, key) {
                result = ns.value();
            }
            return Ok(result);
        }
        Ok(answer)
    }

    /// A DELETE of an object already being deleted: a Pod whose grace period is pending may
    /// have it shortened (to 0: it goes at once unless finalizers hold it); anything else is
    /// answered as it is (rest/delete.go BeforeDelete).
    fn shorten_grace(
        &mut self,
        resource: &ResourceKey,
        key: &ObjectKey,
        old: Obj,
        requested: Option<i64>,
    ) -> Result<Value, StoreError> {
        let mut next = old.value();
        let current = next
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let Some(period) = requested.map(|p| p.max(0)).filter(|p| *p < current) else {
            return Ok(next);
        };
        let m = meta_mut(&mut next)?;
        m.insert(
            "deletionTimestamp".into(),
            Value::String(rfc3339_in(period)),
        );
        m.insert("deletionGracePeriodSeconds".into(), Value::from(period));
        let kind = if goes_now(resource, &next, &finalizers(&next)) {
            EventKind::Deleted
        } else {
            EventKind::Modified
        };
        let result = self.commit_value(resource, key, kind, next, old)?;
        if kind == EventKind::Deleted {
            self.finish_namespace(&key.0);
        }
        Ok(result)
    }

    /// The end of a Pod's grace period (the kubelet has stopped it and deletes it with grace 0):
    /// it goes, or, while finalizers hold it, keeps `deletionGracePeriodSeconds: 0`. Only the
    /// deletion that `deletion_timestamp` names ends: one shortened since has its own end.
    fn end_grace(&mut self, resource: &ResourceKey, key: &ObjectKey, deletion_timestamp: &str) {
        let Some(old) = self.current(resource, key) else {
            return;
        };
        let old_value = old.value();
        let marked = old_value.pointer("/metadata/deletionTimestamp");
        if marked.and_then(Value::as_str) != Some(deletion_timestamp) || !grace_pending(&old_value)
        {
            return;
        }
        let _ = self.shorten_grace(resource, key, old, Some(0));
    }

    /// The namespace controller: deletes everything in `namespace`, then the namespace if
    /// nothing is left.
    fn purge_namespace(&mut self, namespace: &str) {
        let mut keys: Vec<(ResourceKey, ObjectKey)> = Vec::new();
        for (resource, collection) in &self.collections {
            for key in collection.objects.keys() {
                if key.0 == namespace {
                    keys.push((resource.clone(), key.clone()));
                }
            }
        }
        keys.sort();
        let options = DeleteOptions {
            propagation: Some(Propagation::Background),
            grace_period: Some(0),
            ..DeleteOptions::default()
        };
        for (resource, key) in keys {
            let _ = self.delete(&resource, &key, &options);
        }
        self.finish_namespace(namespace);
    }

    /// Deletes a terminating namespace once it is empty: its `kubernetes` finalizer is
    /// removed, then it goes if no `metadata.finalizers` hold it.
    fn finish_namespace(&mut self, namespace: &str) {
        if namespace.is_empty() || !self.terminating(namespace) {
            return;
        }
        let empty = self
            .collections
            .values()
            .all(|c| !c.objects.keys().any(|k| k.0 == namespace));
        let key = (String::new(), namespace.to_string());
        let Some(ns) = self.current(&namespaces(), &key) else {
            return;
        };
        if !empty {
            return;
        }
        let mut next = ns.value();
        let spec_finalizers = next
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if spec_finalizers {
            next["spec"]["finalizers"] = serde_json::json!([]);
        }
        let kind = if finalizers(&next).is_empty() {
            EventKind::Deleted
        } else if spec_finalizers {
            EventKind::Modified
        } else {
            return;
        };
        let _ = self.commit_value(&namespaces(), &key, kind, next, ns);
    }
}

impl Store {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Creates `obj`, stamping uid, creationTimestamp, generation 1 and the next RV, as a create
    /// through the API does: in a namespace that does not exist it is 404 NotFound (the
    /// NamespaceLifecycle admission).
    pub fn create(&self, obj: Value) -> Result<Value, StoreError> {
        self.lock().create(obj, false)
    }

    /// Creates `obj` as [`create`](Self::create) does, first creating its namespace when it
    /// does not exist (the seeding path of the `TestApiServer` handle).
    pub fn seed(&self, obj: Value) -> Result<Value, StoreError> {
        self.lock().create(obj, true)
    }

    /// 404 NotFound when `namespace` is set and no such Namespace exists.
    pub fn check_namespace(&self, namespace: Option<&str>) -> Result<(), StoreError> {
        self.lock().check_namespace(namespace.unwrap_or(""))
    }

    /// Replaces an existing object, keeping uid and creationTimestamp and bumping generation when
    /// `spec` changed. With `check_rv`, a non-empty `metadata.resourceVersion` in `obj` must be
    /// the current one.
    pub fn update(&self, mut obj: Value, check_rv: bool) -> Result<Value, StoreError> {
        let (resource, key, kind) = identify(&obj)?;
        let mut s = self.lock();
        let Some(old) = s.current(&resource, &key) else {
            return Err(StoreError::NotFound {
                plural: resource.plural,
                name: key.1,
            });
        };
        let old_value = old.value();
        let old_meta = |field: &str| {
            old_value
                .get("metadata")
                .and_then(|m| m.get(field))
                .cloned()
        };
        let sent_rv = obj
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if check_rv
            && !sent_rv.is_empty()
            && Some(sent_rv) != old_meta("resourceVersion").as_ref().and_then(Value::as_str)
        {
            return Err(StoreError::Conflict {
                plural: resource.plural,
                name: key.1,
            });
        }
        if resource == super::discovery::crd_resource() {
            super::discovery::settle_crd(&mut obj);
        }
        let generation = old_meta("generation").and_then(|g| g.as_i64()).unwrap_or(1);
        let spec_changed = old_value.get("spec") != obj.get("spec");
        let deleting = old_meta("deletionTimestamp").is_some();
        if deleting {
            let before = finalizers(&old_value);
            let added: Vec<String> = finalizers(&obj)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                return Err(no_new_finalizers(&resource, &kind, &key.1, &added));
            }
        }
        let meta = meta_mut(&mut obj)?;
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            match old_meta(field) {
                Some(value) => meta.insert(field.into(), value),
                None => meta.remove(field),
            };
        }
        stamp_generation(meta, &resource, &kind, generation + i64::from(spec_changed));
        stamp_rv(&mut obj, s.rv + 1)?;
        let stored = StoredObject::new(&obj);
        s.collections.entry(resource.clone()).or_default().kind = Some(kind);
        // Removing the last finalizer of an object being deleted deletes it.
        let namespace = is_namespace(&resource);
        let event = if deleting && goes_now(&resource, &obj, &finalizers(&obj)) {
            EventKind::Deleted
        } else {
            EventKind::Modified
        };
        s.commit((resource, key.clone()), event, (stored, &obj), Some(old));
        if event == EventKind::Deleted {
            s.finish_namespace(&key.0);
        } else if namespace && deleting {
            s.finish_namespace(&key.1);
        }
        Ok(obj)
    }

    /// Deletes an object as the API server does: at once when nothing holds it, else marked
    /// with `deletionTimestamp` until its finalizers are gone (a Namespace: Terminating, its
    /// content deleted first). Returns its state after the request.
    pub fn delete(
        &self,
        resource: &ResourceKey,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value, StoreError> {
        let key = (namespace.unwrap_or("").to_string(), name.to_string());
        self.lock().delete(resource, &key, options)
    }

    /// Ends the graceful deletion of a Pod marked at `deletion_timestamp`, if it is still
    /// pending: see `State::end_grace`.
    pub fn end_grace(
        &self,
        resource: &ResourceKey,
        namespace: Option<&str>,
        name: &str,
        deletion_timestamp: &str,
    ) {
        let key = (namespace.unwrap_or("").to_string(), name.to_string());
        self.lock().end_grace(resource, &key, deletion_timestamp);
    }

    /// The current object, if it exists.
    pub fn get(&self, resource: &ResourceKey, namespace: Option<&str>, name: &str) -> Option<Obj> {
        let key = (namespace.unwrap_or("").to_string(), name.to_string());
        self.lock().current(resource, &key)
    }

    /// The objects of a collection (one namespace, or all) as of `at`.
    pub fn list(
        &self,
        resource: &ResourceKey,
        namespace: Option<&str>,
        at: ReadAt,
    ) -> Result<Snapshot, ReadError> {
        let s = self.lock();
        let (current, floor) = (s.rv, s.history.floor());
        let rv = match at {
            ReadAt::Latest => current,
            ReadAt::NotOlderThan(n) | ReadAt::Exact(n) if n > current => {
                return Err(ReadError::TooLarge {
                    requested: n,
                    current,
                });
            }
            ReadAt::NotOlderThan(_) => current,
            ReadAt::Exact(n) if n < floor => {
                return Err(ReadError::Expired {
                    requested: n,
                    floor,
                });
            }
            ReadAt::Exact(n) => n,
        };
        Ok(Snapshot {
            rv,
            objects: s.objects_at(resource, namespace, rv),
        })
    }

    /// Registers a watch on `resource` and returns what it must send first.
    pub fn watch(
        &self,
        resource: &ResourceKey,
        from: WatchFrom,
    ) -> Result<WatchRegistration, WatchExpired> {
        let mut s = self.lock();
        let floor = s.history.floor();
        let (initial, synced_rv) = match from {
            WatchFrom::Rv(n) if n < floor => {
                return Err(WatchExpired {
                    requested: n,
                    floor,
                });
            }
            WatchFrom::Rv(n) => (Initial::Replay(s.history.after(resource, n)), n.max(s.rv)),
            WatchFrom::Now | WatchFrom::InitialEvents => {
                (Initial::Objects(s.objects_at(resource, None, s.rv)), s.rv)
            }
        };
        let id = s.next_watch_id;
        s.next_watch_id += 1;
        let (tx, rx) = unbounded_channel();
        s.watchers
            .entry(resource.clone())
            .or_default()
            .insert(id, tx);
        Ok(WatchRegistration {
            id,
            rx,
            initial,
            synced_rv,
        })
    }

    /// Forgets a watch (its task ended).
    pub fn unregister(&self, resource: &ResourceKey, id: u64) {
        let mut s = self.lock();
        if let Some(watchers) = s.watchers.get_mut(resource) {
            watchers.remove(&id);
            if watchers.is_empty() {
                s.watchers.remove(resource);
            }
        }
    }

    /// Number of registered watches.
    pub fn open_watches(&self) -> usize {
        self.lock().watchers.values().map(HashMap::len).sum()
    }

    /// The latest resourceVersion. Every event up to it has already been sent to the watches.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// The compaction floor.
    pub fn floor(&self) -> u64 {
        self.lock().history.floor()
    }

    /// The kind of a collection's objects: learned from writes, else guessed from the plural.
    pub fn kind_of(&self, resource: &ResourceKey) -> String {
        let s = self.lock();
        let learned = s.collections.get(resource).and_then(|c| c.kind.clone());
        learned.unwrap_or_else(|| resource.guess_kind())
    }

    /// Drops the whole history: RVs below the current one are expired.
    pub fn compact(&self) {
        let mut s = self.lock();
        let rv = s.rv;
        s.history.compact_to(rv);
    }

    /// Caps the history at `limit` events (at least 1), compacting the oldest beyond it.
    pub fn set_history_limit(&self, limit: usize) {
        self.lock().history.set_limit(limit);
    }

    /// A restart of the API server and etcd: every watch closes, history is gone and the RV
    /// jumps to a new epoch.
    pub fn restart(&self) {
        let mut s = self.lock();
        s.end_watches(|| WatchMsg::Close);
        s.rv += RESTART_RV_JUMP;
        let rv = s.rv;
        s.history.compact_to(rv);
    }

    /// Ends every open watch cleanly.
    pub fn close_watches(&self) {
        self.lock().end_watches(|| WatchMsg::Close);
    }

    /// Ends every open watch with an ERROR 410 Expired event.
    pub fn expire_watches(&self) {
        self.lock().end_watches(|| WatchMsg::Expire);
    }

    /// Every collection holding objects: its key, its kind and whether its objects carry a
    /// namespace.
    pub fn collections(&self) -> Vec<(ResourceKey, String, bool)> {
        let s = self.lock();
        s.collections
            .iter()
            .filter(|(_, c)| !c.objects.is_empty())
            .map(|(key, c)| {
                let kind = c.kind.clone().unwrap_or_else(|| key.guess_kind());
                let namespaced = c.objects.keys().any(|(ns, _)| !ns.is_empty());
                (key.clone(), kind, namespaced)
            })
            .collect()
    }

    /// Current objects of a collection, sorted by (namespace, name).
    pub fn objects(&self, resource: &ResourceKey) -> Vec<Value> {
        let s = self.lock();
        s.collections
            .get(resource)
            .map(|c| c.objects.values().map(|o| o.value()).collect())
            .unwrap_or_default()
    }
}
