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
        let meta = meta_mut(&mut obj)?;
        for field in ["uid", "creationTimestamp"] {
            if let Some(value) = old_meta(field) {
                meta.insert(field.into(), value);
            }
        }
        meta.insert(
            "generation".into(),
            Value::from(generation + i64::from(spec_changed)),
        );
        stamp_rv(&mut obj, s.rv + 1)?;
        let stored = StoredObject::new(obj);
        s.collections.entry(resource.clone()).or_default().kind = Some(kind);
        s.commit(
            resource,
            key,
            EventKind::Modified,
            Arc::clone(&stored),
            Some(old),
        );
        Ok(stored.value.clone())
    }

    /// Deletes an object; returns its last state stamped with the delete's RV.
    pub fn delete(
        &self,
        resource: &ResourceKey,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, StoreError> {
        let key = (namespace.unwrap_or("").to_string(), name.to_string());
        let mut s = self.lock();
        let Some(old) = s.current(resource, &key) else {
            return Err(StoreError::NotFound {
                plural: resource.plural.clone(),
                name: name.to_string(),
            });
        };
        let mut last = old.value.clone();
        stamp_rv(&mut last, s.rv + 1)?;
        let stored = StoredObject::new(last);
        s.commit(
            resource.clone(),
            key,
            EventKind::Deleted,
            Arc::clone(&stored),
            Some(old),
        );
        Ok(stored.value.clone())
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

    /// Current objects of a collection, sorted by (namespace, name).
    pub fn objects(&self, resource: &ResourceKey) -> Vec<Value> {
        let s = self.lock();
        s.collections
            .get(resource)
            .map(|c| c.objects.values().map(|o| o.value.clone()).collect())
            .unwrap_or_default()
    }
}
