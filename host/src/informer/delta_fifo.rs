//! DeltaFIFO (client-go `tools/cache/delta_fifo.go`): a queue of keys, each with the list of
//! changes (deltas) seen for that key since it was last popped.
//!
//! - A key keeps its first position when more deltas arrive for it.
//! - `replace` (after a list) queues every listed object as `Replaced` and queues a
//!   `DeletedFinalStateUnknown` tombstone for every key that vanished while the watch was down.
//! - `resync` queues `Sync` for every known key with nothing queued.
//! - `pop` blocks until an item or close, and runs the process function under the queue's lock,
//!   so a concurrent `replace` never sees a popped key that has not reached the indexer yet.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::indexer::Cache;
use super::key::{deleted_object_key, object_key};
use super::object::{DeletedObject, Object, Tombstone};
use crate::sync::{lock, wait};

/// The kind of a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaType {
    /// Seen by a watch as ADDED.
    Added,
    /// Seen by a watch as MODIFIED.
    Updated,
    /// Seen by a watch as DELETED, or missed and found at a relist (tombstone).
    Deleted,
    /// Listed by a relist.
    Replaced,
    /// Re-delivered by a periodic resync.
    Sync,
}

/// One change of one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Delta {
    /// See [`DeltaType::Added`].
    Added(Arc<Object>),
    /// See [`DeltaType::Updated`].
    Updated(Arc<Object>),
    /// See [`DeltaType::Deleted`]; the object may be a tombstone.
    Deleted(DeletedObject),
    /// See [`DeltaType::Replaced`].
    Replaced(Arc<Object>),
    /// See [`DeltaType::Sync`].
    Sync(Arc<Object>),
}

impl Delta {
    /// The kind of this delta.
    pub fn kind(&self) -> DeltaType {
        match self {
            Delta::Added(_) => DeltaType::Added,
            Delta::Updated(_) => DeltaType::Updated,
            Delta::Deleted(_) => DeltaType::Deleted,
            Delta::Replaced(_) => DeltaType::Replaced,
            Delta::Sync(_) => DeltaType::Sync,
        }
    }

    /// The object carried (for a tombstone, its last known state).
    pub fn object(&self) -> &Arc<Object> {
        match self {
            Delta::Added(o) | Delta::Updated(o) | Delta::Replaced(o) | Delta::Sync(o) => o,
            Delta::Deleted(d) => d.object(),
        }
    }

    fn key(&self) -> String {
        match self {
            Delta::Deleted(d) => deleted_object_key(d),
            other => object_key(other.object()),
        }
    }

    fn is_tombstone(&self) -> bool {
        matches!(self, Delta::Deleted(DeletedObject::Tombstone(_)))
    }
}

/// A hook run once on every object entering the FIFO (never on tombstones nor on resyncs, whose
/// objects come from the cache), e.g. to strip fields.
pub type TransformFn = Arc<dyn Fn(Arc<Object>) -> Arc<Object> + Send + Sync>;

/// `pop` on a closed, empty queue.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("DeltaFIFO: manipulating with closed queue")]
pub struct FifoClosed;

#[derive(Default)]
struct State {
    /// Deltas per key; a key is present exactly when it is in `queue`.
    items: HashMap<String, Vec<Delta>>,
    /// Keys in first-seen order.
    queue: VecDeque<String>,
    /// Set by the first Replace, Add, Update or Delete.
    populated: bool,
    /// Items of the first Replace not yet popped.
    initial_population_count: usize,
    closed: bool,
}

/// The DeltaFIFO. Shared as `Arc<DeltaFifo>` between the reflector (producer) and the process
/// loop (consumer).
pub struct DeltaFifo {
    state: Mutex<State>,
    cond: Condvar,
    /// The indexer, consulted for deletion detection and resync (client-go's knownObjects).
    known: Option<Cache>,
    transform: Option<TransformFn>,
}

impl DeltaFifo {
    /// A FIFO whose known objects are `known` (the informer's indexer), with an optional
    /// transform hook.
    pub fn new(known: Option<Cache>, transform: Option<TransformFn>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            cond: Condvar::new(),
            known,
            transform,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Queues an `Added` delta.
    pub fn add(&self, obj: Arc<Object>) {
        let mut st = self.lock();
        st.populated = true;
        self.queue_action(&mut st, Delta::Added(obj));
    }

    /// Queues an `Updated` delta.
    pub fn update(&self, obj: Arc<Object>) {
        let mut st = self.lock();
        st.populated = true;
        self.queue_action(&mut st, Delta::Updated(obj));
    }

    /// Queues a `Deleted` delta, unless the key is neither queued nor known (then it is dropped).
    pub fn delete(&self, obj: DeletedObject) {
        let key = deleted_object_key(&obj);
        let mut st = self.lock();
        st.populated = true;
        let queued = st.items.contains_key(&key);
        let known = match &self.known {
            Some(cache) => cache.get_by_key(&key).is_some(),
            None => false,
        };
        if !queued && !known {
            return;
        }
        self.queue_action(&mut st, Delta::Deleted(obj));
    }

    /// Replaces the FIFO's view with a fresh list (after a relist). `_resource_version` is the
    /// list's version, kept for parity with client-go's signature.
    pub fn replace(&self, list: Vec<Arc<Object>>, _resource_version: &str) {
        let mut st = self.lock();
        let mut keys = HashSet::with_capacity(list.len());
        for obj in list {
            keys.insert(object_key(&obj));
            self.queue_action(&mut st, Delta::Replaced(obj));
        }

        // Deletion detection against the queue: a queued key missing from the list.
        let mut queued_deletions = 0;
        let queued_missing: Vec<(String, Arc<Object>)> = st
            .queue
            .iter()
            .filter(|k| !keys.contains(*k))
            .filter_map(|k| {
                st.items
                    .get(k)
                    .and_then(|d| d.last())
                    .map(|d| (k.clone(), d.object().clone()))
            })
            .collect();
        for (key, obj) in queued_missing {
            queued_deletions += 1;
            self.queue_action(
                &mut st,
                Delta::Deleted(DeletedObject::Tombstone(Tombstone { key, obj })),
            );
        }

        // Deletion detection against the known objects with nothing queued.
        if let Some(cache) = &self.known {
            for (key, obj) in cache.snapshot() {
                if keys.contains(&key) || st.items.get(&key).is_some_and(|d| !d.is_empty()) {
                    continue;
                }
                queued_deletions += 1;
                self.queue_action(
                    &mut st,
                    Delta::Deleted(DeletedObject::Tombstone(Tombstone { key, obj })),
                );
            }
        }

        if !st.populated {
            st.populated = true;
            st.initial_population_count = keys.len() + queued_deletions;
        }
    }

    /// Queues `Sync` for every known object whose key has nothing queued.
    pub fn resync(&self) {
        let Some(cache) = &self.known else { return };
        let mut st = self.lock();
        for (key, obj) in cache.snapshot() {
            if st.items.get(&key).is_some_and(|d| !d.is_empty()) {
                continue;
            }
            self.queue_action(&mut st, Delta::Sync(obj));
        }
    }

    fn queue_action(&self, st: &mut State, delta: Delta) {
        // client-go runs the transform here, once per object entering the queue, but neither
        // on a tombstone (its object came through already) nor on a Sync (its object comes from
        // the cache, transformed when it entered).
        let delta = match (delta, &self.transform) {
            (d, None) => d,
            (d, Some(t)) => match d {
                Delta::Added(o) => Delta::Added(t(o)),
                Delta::Updated(o) => Delta::Updated(t(o)),
                Delta::Replaced(o) => Delta::Replaced(t(o)),
                Delta::Deleted(DeletedObject::Object(o)) => {
                    Delta::Deleted(DeletedObject::Object(t(o)))
                }
                d @ (Delta::Sync(_) | Delta::Deleted(DeletedObject::Tombstone(_))) => d,
            },
        };
        let key = delta.key();
        let existing = st.items.get(&key);
        // A Sync for a key about to be deleted would resurrect it.
        if delta.kind() == DeltaType::Sync
            && existing
                .and_then(|d| d.last())
                .is_some_and(|d| d.kind() == DeltaType::Deleted)
        {
            return;
        }
        let is_new = existing.is_none();
        let deltas = st.items.entry(key.clone()).or_default();
        deltas.push(delta);
        dedup_deltas(deltas);
        if is_new {
            st.queue.push_back(key);
        }
        self.cond.notify_one();
    }

    /// Blocks until an item is queued (or the queue is closed), removes the first key and calls
    /// `process(deltas, is_in_initial_list)` while still holding the queue's lock. The item is
    /// removed whatever `process` does with it.
    pub fn pop<R>(&self, process: impl FnOnce(Vec<Delta>, bool) -> R) -> Result<R, FifoClosed> {
        let mut st = self.lock();
        loop {
            while st.queue.is_empty() {
                if st.closed {
                    return Err(FifoClosed);
                }
                st = wait(&self.cond, st);
            }
            let in_initial_list = !(st.populated && st.initial_population_count == 0);
            let Some(key) = st.queue.pop_front() else {
                continue;
            };
            if st.initial_population_count > 0 {
                st.initial_population_count -= 1;
            }
            let Some(deltas) = st.items.remove(&key) else {
                continue;
            };
            return Ok(process(deltas, in_initial_list));
        }
    }

    /// Closes the queue: `pop` drains what is left, then returns [`FifoClosed`].
    pub fn close(&self) {
        self.lock().closed = true;
        self.cond.notify_all();
    }

    /// Whether `close` was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// True once the first `replace`'s items have all been popped, or after the first
    /// add/update/delete that came before any `replace`.
    pub fn has_synced(&self) -> bool {
        let st = self.lock();
        st.populated && st.initial_population_count == 0
    }

    /// Queued keys, in queue order.
    pub fn list_keys(&self) -> Vec<String> {
        self.lock().queue.iter().cloned().collect()
    }

    /// The deltas queued for `key`.
    pub fn deltas(&self, key: &str) -> Option<Vec<Delta>> {
        self.lock().items.get(key).cloned()
    }

    /// Number of queued keys.
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Collapses the last two deltas when both are deletions (client-go `dedupDeltas` /
/// `isDeletionDup`): the older is kept, unless it is a tombstone, then the newer is kept. So a
/// real deletion wins over a tombstone whichever came first; of two real deletions the first
/// stays, of two tombstones the last.
fn dedup_deltas(deltas: &mut Vec<Delta>) {
    let n = deltas.len();
    if n < 2 {
        return;
    }
    let (older, newer) = (&deltas[n - 2], &deltas[n - 1]);
    if older.kind() != DeltaType::Deleted || newer.kind() != DeltaType::Deleted {
        return;
    }
    if older.is_tombstone() {
        deltas.remove(n - 2);
    } else {
        deltas.pop();
    }
}

#[cfg(test)]
mod tests;
