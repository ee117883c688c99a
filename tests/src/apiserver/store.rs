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

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::history::{EventKind, History, LoggedEvent};
use super::object::{Obj, ObjectKey, StoreError, StoredObject, generate_name, identify, meta_mut};
use super::resource::{ResourceKey, new_uid, now_rfc3339};

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
}

/// The state of the test API server.
#[derive(Debug)]
pub(crate) struct Store {
    state: Mutex<State>,
}

impl Default for Store {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                rv: INITIAL_RV,
                collections: HashMap::new(),
                history: History::new(INITIAL_RV, DEFAULT_HISTORY_LIMIT),
                watchers: HashMap::new(),
                next_watch_id: 1,
            }),
        }
    }
}

/// Sets `metadata.resourceVersion`.
fn stamp_rv(obj: &mut Value, rv: u64) -> Result<(), StoreError> {
    meta_mut(obj)?.insert("resourceVersion".into(), Value::String(rv.to_string()));
    Ok(())
}

impl State {
    /// Stores `object` (or removes the key for a delete) under the next RV, logs the change and
    /// fans it out to the collection's watches.
    fn commit(
        &mut self,
        resource: ResourceKey,
        key: ObjectKey,
        kind: EventKind,
        object: Obj,
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
        self.history.push(event);
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
    /// `propagationPolicy`.
    pub propagation: Propagation,
}

/// How dependents are handled. There is no garbage collector: the finalizer a policy adds
/// (`foregroundDeletion`, `orphan`) is removed right after it is set, as a collector that
/// finds no dependents would.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

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

fn is_namespace(resource: &ResourceKey) -> bool {
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
    /// Whether `namespace` is being deleted.
    fn terminating(&self, namespace: &str) -> bool {
        self.current(&namespaces(), &(String::new(), namespace.to_string()))
            .is_some_and(|ns| ns.value.pointer("/metadata/deletionTimestamp").is_some())
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
        let stored = StoredObject::new(value);
        self.commit(
            resource.clone(),
            key.clone(),
            kind,
            Arc::clone(&stored),
            Some(prev),
        );
        Ok(stored.value.clone())
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
        let meta = |field: &str| {
            old.value
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
        if old.value.pointer("/metadata/deletionTimestamp").is_some() {
            // Already being deleted: nothing changes until its finalizers are gone.
            return Ok(old.value.clone());
        }
        let gc_finalizer = match options.propagation {
            Propagation::Background => None,
            Propagation::Foreground => Some("foregroundDeletion"),
            Propagation::Orphan => Some("orphan"),
        };
        let namespace = is_namespace(resource);
        let mut held = finalizers(&old.value);
        if held.is_empty() && gc_finalizer.is_none() && !namespace {
            let last = old.value.clone();
            let deleted = self.commit_value(resource, key, EventKind::Deleted, last, old)?;
            self.finish_namespace(&key.0);
            return Ok(deleted);
        }
        let mut marked = old.value.clone();
        if let Some(gc) = gc_finalizer
            && !held.iter().any(|f| f == gc)
        {
            held.push(gc.to_string());
        }
        {
            let m = meta_mut(&mut marked)?;
            m.insert("deletionTimestamp".into(), Value::String(now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), Value::from(0));
            if !held.is_empty() {
                m.insert("finalizers".into(), serde_json::json!(held));
            }
        }
        if namespace {
            marked["status"] = serde_json::json!({"phase": "Terminating"});
        }
        let mut result = self.commit_value(resource, key, EventKind::Modified, marked, old)?;
        if let Some(gc) = gc_finalizer {
            // The garbage collector finds no dependents and lets go of the object.
            let current = self
                .current(resource, key)
                .ok_or_else(|| StoreError::NotFound {
                    plural: resource.plural.clone(),
                    name: key.1.clone(),
                })?;
            let mut next = current.value.clone();
            held.retain(|f| f != gc);
            let m = meta_mut(&mut next)?;
            if held.is_empty() {
                m.remove("finalizers");
            } else {
                m.insert("finalizers".into(), serde_json::json!(held));
            }
            let kind = if held.is_empty() && !namespace {
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
                result = ns.value.clone();
            }
        }
        Ok(result)
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
        for (resource, key) in keys {
            let _ = self.delete(&resource, &key, &DeleteOptions::default());
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
        let spec_finalizers = ns
            .value
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if !empty {
            return;
        }
        let mut next = ns.value.clone();
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

    /// Creates `obj`, stamping uid, creationTimestamp, generation 1 and the next RV.
    pub fn create(&self, mut obj: Value) -> Result<Value, StoreError> {
        generate_name(&mut obj)?;
        let (resource, key, kind) = identify(&obj)?;
        let mut s = self.lock();
        if s.current(&resource, &key).is_some() {
            return Err(StoreError::AlreadyExists {
                plural: resource.plural,
                name: key.1,
            });
        }
        if !key.0.is_empty() && s.terminating(&key.0) {
            return Err(namespace_terminating(&resource, &key));
        }
        if is_namespace(&resource) {
            // As the API server's namespace strategy does on create.
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
        let meta = meta_mut(&mut obj)?;
        meta.insert("uid".into(), Value::String(new_uid()));
        meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
        meta.insert("generation".into(), Value::from(1));
        stamp_rv(&mut obj, s.rv + 1)?;
        let stored = StoredObject::new(obj);
        s.collections.entry(resource.clone()).or_default().kind = Some(kind);
        s.commit(resource, key, EventKind::Added, Arc::clone(&stored), None);
        Ok(stored.value.clone())
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
        let old_meta = |field: &str| {
            old.value
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
        let generation = old_meta("generation").and_then(|g| g.as_i64()).unwrap_or(1);
        let spec_changed = old.value.get("spec") != obj.get("spec");
        let deleting = old_meta("deletionTimestamp").is_some();
        if deleting {
            let before = finalizers(&old.value);
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
        meta.insert(
            "generation".into(),
            Value::from(generation + i64::from(spec_changed)),
        );
        stamp_rv(&mut obj, s.rv + 1)?;
        let stored = StoredObject::new(obj);
        s.collections.entry(resource.clone()).or_default().kind = Some(kind);
        // Removing the last finalizer of an object being deleted deletes it.
        let namespace = is_namespace(&resource);
        let event = if deleting && finalizers(&stored.value).is_empty() && !namespace {
            EventKind::Deleted
        } else {
            EventKind::Modified
        };
        s.commit(resource, key.clone(), event, Arc::clone(&stored), Some(old));
        if event == EventKind::Deleted {
            s.finish_namespace(&key.0);
        } else if namespace && deleting {
            s.finish_namespace(&key.1);
        }
        Ok(stored.value.clone())
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
            .map(|c| c.objects.values().map(|o| o.value.clone()).collect())
            .unwrap_or_default()
    }
}
