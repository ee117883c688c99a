//! RealFIFO (client-go `tools/cache/the_real_fifo.go`): a queue of single deltas in arrival
//! order, the queue shared informers use by default since client-go 1.33 (`InOrderInformers`,
//! locked on in 1.36).
//!
//! Unlike the [`DeltaFifo`]:
//!
//! - every event is its own item, in the order it arrived, across all objects: nothing is merged
//!   per key and a key never keeps an earlier position;
//! - `delete` is always queued, known or not;
//! - `replace` appends, under one lock, a `DeletedFinalStateUnknown` tombstone for every queued
//!   key whose last queued delta is not a deletion and that is missing from the list, then one
//!   for every known key missing from the list and from the queue, then `Replaced` for every
//!   listed object, in list order;
//! - `resync` appends `Sync` for every known key with nothing queued;
//! - `pop_batch` pops a run of deltas of distinct keys (up to the batch size, never crossing the
//!   end of the initial list) for the process loop to handle at once.
//!
//! Two modes, as in client-go 1.36:
//!
//! - **atomic** (the default, client-go's `AtomicFIFO`, beta and on since 1.36; no known
//!   objects): `replace` queues one `ReplacedAll` item carrying the whole list, `resync` one
//!   `SyncAll`, and watch bookmarks a `Bookmark` item; the process loop reconciles a
//!   `ReplacedAll` against the cache when it pops it, replacing the cache in one step (no reader
//!   sees half a relist) before telling listeners, and a `SyncAll` resyncs what the cache holds
//!   then. Nothing reads the cache at queue time, so the queue's lock is released while a
//!   batch is processed (client-go's `UnlockWhileProcessingFIFO`, also on since 1.36), unless
//!   two batches' worth is waiting.
//! - **non-atomic** (1.33–1.35, with `KnownObjects`, the indexer): `replace` reconciles at
//!   queue time, under the queue's lock, against the queued deltas and the indexer; the process
//!   function runs under the lock, so a concurrent `replace` or `resync` never misses a popped
//!   delta that has not reached the indexer yet.
//!
//! [`Queue`] is the seam the reflector and the shared informer use to drive either queue;
//! [`QueueKind`] names the one an informer is configured with.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use serde::Deserialize;

use super::delta_fifo::{Delta, DeltaFifo, DeltaType, FifoClosed, TransformFn};
use super::indexer::Cache;
use super::key::{deleted_object_key, object_key};
use super::object::{DeletedObject, Object, Tombstone};
use crate::sync::{lock, wait};

/// Largest batch `pop_batch` hands out (client-go `defaultBatchSize`).
pub const DEFAULT_BATCH_SIZE: usize = 1000;

/// Which queue sits between an informer's reflector and its process loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum QueueKind {
    /// client-go's legacy DeltaFIFO: deltas merged per key, a key keeps its first position.
    #[serde(rename = "deltaFIFO")]
    DeltaFifo,
    /// client-go 1.36's RealFIFO: every event in arrival order, batched pops, atomic relists and
    /// resyncs, bookmarks, unlocked while processing.
    #[default]
    #[serde(rename = "realFIFO")]
    RealFifo,
    /// client-go 1.33–1.35's RealFIFO (`AtomicFIFO` off): relists reconciled at queue time.
    #[serde(rename = "realFIFONonAtomic")]
    RealFifoNonAtomic,
}

/// What the process loop is handed by [`Queue::pop_batch`].
#[derive(Clone, Debug)]
pub enum Popped {
    /// Deltas: single deltas of distinct keys, in order (a RealFIFO), or one key's deltas (a
    /// DeltaFIFO).
    Deltas(Vec<Delta>),
    /// A whole list, to replace the cache with at once (client-go `ReplacedAll`; atomic
    /// RealFIFO).
    ReplacedAll {
        /// The listed objects, in list order, transformed.
        objects: Vec<Arc<Object>>,
        /// The list's resourceVersion.
        resource_version: String,
    },
    /// Resync every cached object (client-go `SyncAll`; atomic RealFIFO).
    SyncAll,
    /// The watch reached this resourceVersion (client-go `Bookmark`; atomic RealFIFO).
    Bookmark(String),
}

impl Popped {
    /// The deltas, for a [`Popped::Deltas`]; empty otherwise.
    pub fn into_deltas(self) -> Vec<Delta> {
        match self {
            Popped::Deltas(d) => d,
            _ => Vec::new(),
        }
    }
}

/// What the reflector and the process loop need of a queue (client-go's `Queue` and
/// `QueueWithBatch`, reduced to what Wisp uses).
pub trait Queue: Send + Sync {
    /// Queues an `Added` delta.
    fn add(&self, obj: Arc<Object>);
    /// Queues an `Updated` delta.
    fn update(&self, obj: Arc<Object>);
    /// Queues a `Deleted` delta.
    fn delete(&self, obj: DeletedObject);
    /// Replaces the queue's view with a fresh list.
    fn replace(&self, list: Vec<Arc<Object>>, resource_version: &str);
    /// Queues `Sync` deltas for known objects (an atomic RealFIFO: one `SyncAll`).
    fn resync(&self);
    /// The watch reached `resource_version` (a bookmark): an atomic RealFIFO queues it, so the
    /// store's resourceVersion moves once what came before is processed; others ignore it.
    fn bookmark(&self, _resource_version: &str) {}
    /// Blocks until something is queued (or the queue is closed), pops it and calls
    /// `process(popped, is_in_initial_list)`, under the queue's lock except for an atomic
    /// RealFIFO. For a DeltaFIFO the deltas are one key's; for a RealFIFO, single deltas of
    /// distinct keys, in order, or one atomic item.
    fn pop_batch(&self, process: &mut dyn FnMut(Popped, bool)) -> Result<(), FifoClosed>;
    /// Closes the queue: pops drain what is left, then fail.
    fn close(&self);
    /// Whether the first list has been popped (or an event came first).
    fn has_synced(&self) -> bool;
    /// Queued items (keys for a DeltaFIFO, deltas for a RealFIFO).
    fn len(&self) -> usize;
    /// Whether nothing is queued.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl QueueKind {
    /// A new queue of this kind over the informer's cache.
    pub fn build(self, known: Cache, transform: Option<TransformFn>) -> Arc<dyn Queue> {
        match self {
            QueueKind::DeltaFifo => Arc::new(DeltaFifo::new(Some(known), transform)),
            QueueKind::RealFifo => Arc::new(RealFifo::atomic(transform)),
            QueueKind::RealFifoNonAtomic => Arc::new(RealFifo::new(Some(known), transform)),
        }
    }
}

impl Queue for DeltaFifo {
    fn add(&self, obj: Arc<Object>) {
        DeltaFifo::add(self, obj);
    }
    fn update(&self, obj: Arc<Object>) {
        DeltaFifo::update(self, obj);
    }
    fn delete(&self, obj: DeletedObject) {
        DeltaFifo::delete(self, obj);
    }
    fn replace(&self, list: Vec<Arc<Object>>, resource_version: &str) {
        DeltaFifo::replace(self, list, resource_version);
    }
    fn resync(&self) {
        DeltaFifo::resync(self);
    }
    fn pop_batch(&self, process: &mut dyn FnMut(Popped, bool)) -> Result<(), FifoClosed> {
        DeltaFifo::pop(self, |d, initial| process(Popped::Deltas(d), initial))
    }
    fn close(&self) {
        DeltaFifo::close(self);
    }
    fn has_synced(&self) -> bool {
        DeltaFifo::has_synced(self)
    }
    fn len(&self) -> usize {
        DeltaFifo::len(self)
    }
}

impl Queue for RealFifo {
    fn add(&self, obj: Arc<Object>) {
        RealFifo::add(self, obj);
    }
    fn update(&self, obj: Arc<Object>) {
        RealFifo::update(self, obj);
    }
    fn delete(&self, obj: DeletedObject) {
        RealFifo::delete(self, obj);
    }
    fn replace(&self, list: Vec<Arc<Object>>, resource_version: &str) {
        RealFifo::replace(self, list, resource_version);
    }
    fn resync(&self) {
        RealFifo::resync(self);
    }
    fn bookmark(&self, resource_version: &str) {
        RealFifo::bookmark(self, resource_version);
    }
    fn pop_batch(&self, process: &mut dyn FnMut(Popped, bool)) -> Result<(), FifoClosed> {
        RealFifo::pop_batch(self, process)
    }
    fn close(&self) {
        RealFifo::close(self);
    }
    fn has_synced(&self) -> bool {
        RealFifo::has_synced(self)
    }
    fn len(&self) -> usize {
        RealFifo::len(self)
    }
}

/// The key of a delta (a tombstone's stored key for a tombstone).
pub fn delta_key(delta: &Delta) -> String {
    match delta {
        Delta::Deleted(d) => deleted_object_key(d),
        other => object_key(other.object()),
    }
}

/// One queued item: a delta, or (atomic mode) a whole list, a resync, a bookmark.
#[derive(Clone, Debug)]
enum Item {
    Delta(Delta),
    Atomic(Popped),
}

impl Item {
    fn delta(&self) -> Option<&Delta> {
        match self {
            Item::Delta(d) => Some(d),
            Item::Atomic(_) => None,
        }
    }

    fn into_delta(self) -> Option<Delta> {
        match self {
            Item::Delta(d) => Some(d),
            Item::Atomic(_) => None,
        }
    }

    /// The item as handed out alone.
    fn popped(self) -> Popped {
        match self {
            Item::Delta(d) => Popped::Deltas(vec![d]),
            Item::Atomic(a) => a,
        }
    }
}

#[derive(Default)]
struct State {
    items: VecDeque<Item>,
    /// Set by the first Replace, Add, Update or Delete.
    populated: bool,
    /// Items queued when the first Replace ran, not yet processed.
    initial_population_count: usize,
    closed: bool,
}

/// The RealFIFO. Shared as `Arc<RealFifo>` between the reflector (producer) and the process loop
/// (consumer).
pub struct RealFifo {
    state: Mutex<State>,
    cond: Condvar,
    /// Latched once the initial population has been processed (client-go's `synced` channel);
    /// read without the lock.
    synced: AtomicBool,
    /// The indexer, consulted for deletion detection and resync (client-go's knownObjects);
    /// `None` behaves as an empty store. Never set in atomic mode.
    known: Option<Cache>,
    transform: Option<TransformFn>,
    batch_size: usize,
    /// client-go's `AtomicEvents` (with `UnlockWhileProcessing` and `EmitDeltaTypeBookmark`).
    atomic: bool,
}

impl RealFifo {
    /// A FIFO whose known objects are `known` (the informer's indexer), with an optional
    /// transform hook, popping batches of up to [`DEFAULT_BATCH_SIZE`].
    pub fn new(known: Option<Cache>, transform: Option<TransformFn>) -> Self {
        Self::with_batch_size(known, transform, DEFAULT_BATCH_SIZE)
    }

    /// As [`RealFifo::new`] with another batch size (at least 1).
    pub fn with_batch_size(
        known: Option<Cache>,
        transform: Option<TransformFn>,
        batch_size: usize,
    ) -> Self {
        Self {
            state: Mutex::new(State::default()),
            cond: Condvar::new(),
            synced: AtomicBool::new(false),
            known,
            transform,
            batch_size: batch_size.max(1),
            atomic: false,
        }
    }

    /// An atomic FIFO (client-go 1.36's default): `replace`, `resync` and `bookmark` queue one
    /// item each, reconciled by the process loop against the cache when popped; the lock is
    /// released while processing.
    pub fn atomic(transform: Option<TransformFn>) -> Self {
        Self::atomic_with_batch_size(transform, DEFAULT_BATCH_SIZE)
    }

    /// As [`RealFifo::atomic`] with another batch size (at least 1).
    pub fn atomic_with_batch_size(transform: Option<TransformFn>, batch_size: usize) -> Self {
        Self {
            atomic: true,
            ..Self::with_batch_size(None, transform, batch_size)
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// client-go `checkSynced_locked`.
    fn check_synced(&self, st: &State) {
        if st.populated && st.initial_population_count == 0 {
            self.synced.store(true, Ordering::Release);
        }
    }

    fn transformed(&self, obj: Arc<Object>) -> Arc<Object> {
        match &self.transform {
            Some(t) => t(obj),
            None => obj,
        }
    }

    fn push(&self, st: &mut State, delta: Delta) {
        self.push_item(st, Item::Delta(delta));
    }

    fn push_item(&self, st: &mut State, item: Item) {
        st.items.push_back(item);
        self.cond.notify_all();
    }

    fn event(&self, delta: Delta) {
        let mut st = self.lock();
        st.populated = true;
        self.check_synced(&st);
        self.push(&mut st, delta);
    }

    /// Queues an `Added` delta.
    pub fn add(&self, obj: Arc<Object>) {
        self.event(Delta::Added(self.transformed(obj)));
    }

    /// Queues an `Updated` delta.
    pub fn update(&self, obj: Arc<Object>) {
        self.event(Delta::Updated(self.transformed(obj)));
    }

    /// Queues a `Deleted` delta, whether or not the key is queued or known (a tombstone is not
    /// transformed again).
    pub fn delete(&self, obj: DeletedObject) {
        let obj = match obj {
            DeletedObject::Object(o) => DeletedObject::Object(self.transformed(o)),
            t @ DeletedObject::Tombstone(_) => t,
        };
        self.event(Delta::Deleted(obj));
    }

    /// Replaces the FIFO's view with a fresh list, atomically (client-go `Replace` with
    /// `reconcileReplacement`): tombstones first for what vanished, queued keys first in their
    /// queue order, then known keys (sorted), then `Replaced` for the list in its order.
    /// `_resource_version` is kept for parity with client-go's signature.
    ///
    /// Atomic: queues one `ReplacedAll` with the transformed list instead; the process loop
    /// reconciles it against the cache when it pops it.
    pub fn replace(&self, list: Vec<Arc<Object>>, resource_version: &str) {
        let list: Vec<Arc<Object>> = list.into_iter().map(|o| self.transformed(o)).collect();
        let mut st = self.lock();
        if self.atomic {
            let item = Popped::ReplacedAll {
                objects: list,
                resource_version: resource_version.to_owned(),
            };
            self.push_item(&mut st, Item::Atomic(item));
            if !st.populated {
                st.populated = true;
                st.initial_population_count = st.items.len();
                self.check_synced(&st);
            }
            return;
        }
        let new_keys: HashSet<String> = list.iter().map(|o| object_key(o)).collect();

        // The last queued delta of every queued key, keys in first-queued order.
        let mut queued_keys = Vec::new();
        let mut last: HashMap<String, &Delta> = HashMap::new();
        for d in st.items.iter().filter_map(Item::delta) {
            let k = delta_key(d);
            if last.insert(k.clone(), d).is_none() {
                queued_keys.push(k);
            }
        }
        let mut deletions = Vec::new();
        for k in &queued_keys {
            if new_keys.contains(k) {
                continue;
            }
            let d = last[k];
            // Already going to be deleted: one deletion is enough.
            if d.kind() == DeltaType::Deleted {
                continue;
            }
            deletions.push(Tombstone {
                key: k.clone(),
                obj: d.object().clone(),
            });
        }
        if let Some(cache) = &self.known {
            let mut known = cache.snapshot();
            known.sort_by(|a, b| a.0.cmp(&b.0));
            for (k, obj) in known {
                if new_keys.contains(&k) || last.contains_key(&k) {
                    continue;
                }
                deletions.push(Tombstone { key: k, obj });
            }
        }
        drop(last);
        for t in deletions {
            self.push(&mut st, Delta::Deleted(DeletedObject::Tombstone(t)));
        }
        for obj in list {
            self.push(&mut st, Delta::Replaced(obj));
        }

        if !st.populated {
            st.populated = true;
            st.initial_population_count = st.items.len();
            self.check_synced(&st);
        }
    }

    /// Queues `Sync` for every known object whose key has nothing queued (a queued event would
    /// otherwise be followed by the stale cached state).
    ///
    /// Atomic: queues one `SyncAll`; the process loop resyncs what the cache holds when it pops
    /// it (everything queued before has been processed by then, so nothing is stale).
    pub fn resync(&self) {
        if self.atomic {
            let mut st = self.lock();
            self.push_item(&mut st, Item::Atomic(Popped::SyncAll));
            return;
        }
        let Some(cache) = &self.known else { return };
        let mut st = self.lock();
        let queued: HashSet<String> = st
            .items
            .iter()
            .filter_map(Item::delta)
            .map(delta_key)
            .collect();
        let mut known = cache.snapshot();
        known.sort_by(|a, b| a.0.cmp(&b.0));
        for (k, obj) in known {
            if queued.contains(&k) {
                continue;
            }
            self.push(&mut st, Delta::Sync(obj));
        }
    }

    /// Atomic: queues a `Bookmark`, so the store's resourceVersion moves to it once everything
    /// before it has been processed. Otherwise nothing (client-go queues bookmarks only with
    /// atomic events).
    pub fn bookmark(&self, resource_version: &str) {
        if self.atomic && !resource_version.is_empty() {
            let mut st = self.lock();
            self.push_item(
                &mut st,
                Item::Atomic(Popped::Bookmark(resource_version.to_owned())),
            );
        }
    }

    fn wait(&self) -> Result<MutexGuard<'_, State>, FifoClosed> {
        let mut st = self.lock();
        while st.items.is_empty() {
            if st.closed {
                return Err(FifoClosed);
            }
            st = wait(&self.cond, st);
        }
        Ok(st)
    }

    /// Counts `n` processed items off the initial population (after processing, as client-go
    /// does in a defer, so `has_synced` never turns true while they are being handled).
    fn processed(&self, st: &mut State, n: usize) {
        if st.initial_population_count > 0 {
            st.initial_population_count = st.initial_population_count.saturating_sub(n);
            self.check_synced(st);
        }
    }

    /// Calls `process` on what was popped: with the queue's lock released in atomic mode while
    /// fewer than two batches wait (client-go `whileProcessing_locked`), then counts it off the
    /// initial population.
    fn processing<'a, R>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        popped: Popped,
        n: usize,
        in_initial_list: bool,
        process: impl FnOnce(Popped, bool) -> R,
    ) -> R {
        let r = if self.atomic && st.items.len() < self.batch_size * 2 {
            drop(st);
            let r = process(popped, in_initial_list);
            st = self.lock();
            r
        } else {
            process(popped, in_initial_list)
        };
        self.processed(&mut st, n);
        r
    }

    /// Blocks until an item is queued (or the queue is closed), removes the first and calls
    /// `process(popped, is_in_initial_list)`, holding the queue's lock unless atomic.
    pub fn pop<R>(&self, process: impl FnOnce(Popped, bool) -> R) -> Result<R, FifoClosed> {
        let mut st = self.wait()?;
        let in_initial_list = !self.has_synced();
        let popped = st.items.pop_front().ok_or(FifoClosed)?.popped();
        Ok(self.processing(st, popped, 1, in_initial_list, process))
    }

    /// client-go `PopBatch`: blocks like [`RealFifo::pop`], then pops the longest run of deltas
    /// of distinct keys from the head, at most the batch size and never past the end of the
    /// initial population, or one atomic item alone, and calls `process(popped,
    /// is_in_initial_list)`.
    pub fn pop_batch<R>(&self, process: impl FnOnce(Popped, bool) -> R) -> Result<R, FifoClosed> {
        let mut st = self.wait()?;
        let in_initial_list = !self.has_synced();
        let mut limit = self.batch_size.min(st.items.len());
        if st.initial_population_count > 0 {
            limit = limit.min(st.initial_population_count);
        }
        let mut unique = HashSet::new();
        let mut n = 0;
        while n < limit
            && let Some(Item::Delta(d)) = st.items.get(n)
            && unique.insert(delta_key(d))
        {
            n += 1;
        }
        if n == 0 {
            // An atomic item at the head (a delta there always starts a run): alone.
            let popped = st.items.pop_front().ok_or(FifoClosed)?.popped();
            return Ok(self.processing(st, popped, 1, in_initial_list, process));
        }
        let batch: Vec<Delta> = st.items.drain(..n).filter_map(Item::into_delta).collect();
        Ok(self.processing(st, Popped::Deltas(batch), n, in_initial_list, process))
    }

    /// Closes the queue: pops drain what is left, then return [`FifoClosed`].
    pub fn close(&self) {
        self.lock().closed = true;
        self.cond.notify_all();
    }

    /// Whether `close` was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// True once the items queued by the first `replace` have all been processed, or after an
    /// add/update/delete that came before any `replace`. Stays true.
    pub fn has_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// The queued deltas, in order (atomic items left out).
    pub fn items(&self) -> Vec<Delta> {
        self.lock()
            .items
            .iter()
            .filter_map(Item::delta)
            .cloned()
            .collect()
    }

    /// Number of queued deltas.
    pub fn len(&self) -> usize {
        self.lock().items.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
