//! The queue between a listener's `add` and its handler: unbounded (client-go's growing ring
//! buffer, for native handlers that must see everything) or bounded by a count of notifications
//! and by their bytes, with an overflow policy (what plugins get; see [`QueueBound`]).
//!
//! # Bytes
//!
//! A notification's bytes are those of the objects it holds (both states of an update, once
//! when they are the same object): an upper bound of what the queue keeps alive, since a queued
//! object may also be the informer's cached one. A bounded queue is *full* when it holds `max`
//! notifications or when the next one would take its bytes past `max_bytes`; one notification
//! is always let in, whatever its size. A coalescing queue full in bytes starts coalescing
//! (below); from then on it drops only past its count, as one holding `max` objects does: its
//! notifications are one per object, mostly the informer's cached objects themselves, so what
//! it holds beyond the cache is bounded by the informer (at most one older state per object),
//! while dropping for bytes would lose final states a level-triggered handler needs. The other
//! policies drop past either bound. Each queued notification also keeps the time it was
//! queued: the oldest one's age and, once handled, each one's time from queue to outcome are
//! what the listener reports.
//!
//! # Sequence numbers
//!
//! Every notification offered to the queue gets the next sequence number (1, 2, 3, ...), whether
//! it is kept, dropped or coalesced. Nothing is ever renumbered: a notification that is dropped,
//! or merged into an earlier one, leaves a gap in what the handler sees, so loss stays visible.
//! A merged notification keeps the position and the number of the earlier one it was merged into.
//! Offered = delivered + dropped + coalesced + still queued.
//!
//! # Overflow policies
//!
//! When a bounded queue is full and another notification comes:
//! - a **resync** (an update with an unchanged resourceVersion) goes first, whatever the
//!   policy: an incoming resync is dropped, else the oldest queued resync is dropped to make room.
//!   A resync carries no change, so the handler loses no state by it;
//! - [`Overflow::DropOldest`]: the oldest queued notification is dropped;
//! - [`Overflow::DropNewest`]: the incoming notification is dropped;
//! - [`Overflow::Quarantine`]: the incoming notification is dropped, as with `DropNewest`, and
//!   the queue says so ([`Discarded::quarantine`]): its handler, which needs every change, is
//!   to be stopped rather than go on with one missing;
//! - [`Overflow::Coalesce`]: see below.
//!
//! Dropped notifications are counted (`dropped`).
//!
//! # Coalescing
//!
//! Below its bound a coalescing queue changes nothing: a handler that keeps up sees every
//! notification. When it reaches its bound it enters *coalescing mode*: the queue is compacted to
//! one notification per object, and from then on a notification about an object that is already
//! queued is merged into the queued one (counted `coalesced`), until the handler has caught up
//! (the queue is empty). Only a notification about an object not queued yet, when the queue holds
//! `max` distinct objects, is dropped (resyncs first, then the oldest). So with `max` at least the
//! number of objects the informer holds, a level-based handler (one that acts on the latest state
//! of each object) never loses a final state.
//!
//! Merging `pending` (queued, not yet handed to the handler) with a `new` notification about the
//! same object. The rules follow from what the handler knew before `pending` (nothing, for an
//! add; `old`, for an update; the deleted state, for a delete) and what is true after `new`:
//!
//! | pending          | new              | merged                                            |
//! |------------------|------------------|---------------------------------------------------|
//! | add(a)           | update(_, b)     | add(b), initial-list kept                         |
//! | add(a)           | delete(d)        | delete(d)                                         |
//! | add(a)           | add(b)           | add(b) (a replay of the cache; initial if either) |
//! | update(o, _)     | update(_, b)     | update(o, b)                                      |
//! | update(o, _)     | delete(d)        | delete(d)                                         |
//! | update(o, _)     | add(b)           | update(o, b) (a replay of the cache)              |
//! | delete(d)        | add(b)           | update(d, b)                                      |
//! | delete(d)        | update(_, b)     | update(d, b)                                      |
//! | delete(d)        | delete(e)        | delete(e), but a real deletion wins over a tombstone |
//!
//! Two rules deserve a word. *add + delete gives a delete, not nothing*: the handler may have seen
//! the object before the add (an initial-list add replayed after a reload, or an earlier delete
//! lost to an overflow), and a delete of an object it does not know costs a level-based handler
//! nothing, while a lost delete would leave a deleted object in its view for good. *delete + add
//! gives an update*: the merge exists to save a slot, and an update from the deleted state to the
//! new one tells a level-based handler the final state; a handler that cares about identity sees
//! the uid change between `old` and `new`.
//!
//! # Initial list
//!
//! Each queued entry remembers whether it carries an initial-list notification (it or anything
//! merged into it); the listener's HasSynced waits for those to be handled. An entry that is
//! dropped no longer counts, so a dropped initial-list notification cannot keep HasSynced false.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use super::super::handler::{Delivery, Notification};
use super::super::key::{deleted_object_key, object_key};

/// What a bounded queue does when it is full (see the [module docs](self)); in the config
/// `coalesce`, `dropOldest`, `dropNewest`, `quarantine`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Overflow {
    /// Merge notifications per object once full; drop only when `max` distinct objects wait.
    #[default]
    Coalesce,
    /// Drop the oldest queued notification.
    DropOldest,
    /// Drop the incoming notification.
    DropNewest,
    /// Drop the incoming notification and stop the handler ([`Discarded::quarantine`]): for a
    /// handler that needs every change (an audit log), a gap is worse than stopping.
    Quarantine,
}

/// How many notifications, and how many bytes of them, a listener's queue may hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueBound {
    /// No bound: the queue grows as needed (client-go). For native handlers that must see
    /// every notification and are trusted to keep up.
    #[default]
    Unbounded,
    /// At most `max` notifications (at least 1) of at most `max_bytes` wait; beyond that
    /// `overflow` applies.
    Bounded {
        /// Most notifications queued.
        max: usize,
        /// Most bytes of notifications queued (see the [module docs](self)).
        max_bytes: usize,
        /// What happens to the next one.
        overflow: Overflow,
    },
}

impl QueueBound {
    /// A bound of `max` notifications (raised to 1) with `overflow`, bytes not bounded.
    pub fn bounded(max: usize, overflow: Overflow) -> Self {
        Self::Bounded {
            max: max.max(1),
            max_bytes: usize::MAX,
            overflow,
        }
    }

    /// This bound with at most `max_bytes` of notifications too (no change to an unbounded
    /// queue).
    pub fn with_max_bytes(self, max_bytes: usize) -> Self {
        match self {
            Self::Unbounded => Self::Unbounded,
            Self::Bounded { max, overflow, .. } => Self::Bounded {
                max,
                max_bytes,
                overflow,
            },
        }
    }

    /// The largest depth allowed, if any.
    pub fn max(&self) -> Option<usize> {
        match self {
            Self::Unbounded => None,
            Self::Bounded { max, .. } => Some(*max),
        }
    }

    /// The most bytes allowed, if bounded.
    pub fn max_bytes(&self) -> Option<usize> {
        match self {
            Self::Bounded { max_bytes, .. } if *max_bytes != usize::MAX => Some(*max_bytes),
            _ => None,
        }
    }
}

/// The bytes a notification holds (see the [module docs](self)).
pub(crate) fn notification_bytes(n: &Notification) -> usize {
    match n {
        Notification::Add { obj, .. } => obj.heap_size(),
        Notification::Update { old, new } if std::sync::Arc::ptr_eq(old, new) => new.heap_size(),
        Notification::Update { old, new } => old.heap_size() + new.heap_size(),
        Notification::Delete { obj } => obj.object().heap_size(),
    }
}

/// What one operation on the queue discarded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Discarded {
    /// Notifications dropped.
    pub dropped: u64,
    /// Notifications merged into an earlier one.
    pub coalesced: u64,
    /// Under [`Overflow::Quarantine`], a change (not a resync) was dropped: the handler is to
    /// be stopped.
    pub quarantine: bool,
}

impl Discarded {
    /// Nothing was discarded.
    pub fn is_empty(&self) -> bool {
        self.dropped == 0 && self.coalesced == 0
    }
}

/// Entries a drained queue keeps room for (a batch's worth at the default batch size): a
/// handler that keeps up reuses them without reallocating; a deeper burst's room is given back.
pub(crate) const KEPT_SLOTS: usize = 64;

struct Item {
    notification: Notification,
    /// Carries an initial-list notification (its own, or one merged into it).
    initial: bool,
    /// [`notification_bytes`] of `notification`.
    bytes: usize,
}

/// A queue position: a live item, or a hole left by a dropped one (skipped when taking).
struct Slot {
    seq: u64,
    /// When the notification (the first, for a merged one) was queued.
    at: Instant,
    item: Option<Item>,
}

/// The queue. Not thread-safe: the listener keeps it under its lock.
pub(crate) struct Queue {
    /// In sequence order.
    slots: VecDeque<Slot>,
    /// Live items in `slots`.
    live: usize,
    /// Bytes of the live items.
    bytes: usize,
    /// Holes in `slots` (a resync dropped from the middle).
    holes: usize,
    bound: QueueBound,
    /// In coalescing mode: the seq of the one queued entry of each object key.
    coalescing: Option<HashMap<String, u64>>,
    /// Seqs of queued resyncs, oldest first (some may be stale: taken, dropped or merged).
    resyncs: VecDeque<u64>,
    /// The last sequence number given out.
    pub(crate) last_seq: u64,
    /// Queued entries carrying an initial-list notification.
    pub(crate) pending_initial: usize,
    /// Deepest the queue has been.
    pub(crate) max_depth: usize,
    /// Notifications dropped by the overflow policy so far.
    pub(crate) dropped: u64,
    /// Notifications merged into an earlier one so far.
    pub(crate) coalesced: u64,
}

fn key_of(n: &Notification) -> String {
    match n {
        Notification::Add { obj, .. } => object_key(obj),
        Notification::Update { new, .. } => object_key(new),
        Notification::Delete { obj } => deleted_object_key(obj),
    }
}

/// Merges `new` into `pending`, both about the same object (the table in the module docs).
pub(crate) fn coalesce(pending: Notification, new: Notification) -> Notification {
    use Notification::{Add, Delete, Update};
    match (pending, new) {
        (
            Add {
                initial_list: i, ..
            },
            Add {
                obj,
                initial_list: j,
            },
        ) => Add {
            obj,
            initial_list: i || j,
        },
        (Add { initial_list, .. }, Update { new, .. }) => Add {
            obj: new,
            initial_list,
        },
        (Add { .. } | Update { .. }, Delete { obj }) => Delete { obj },
        (Update { old, .. }, Update { new, .. }) => Update { old, new },
        (Update { old, .. }, Add { obj, .. }) => Update { old, new: obj },
        (Delete { obj: gone }, Add { obj: new, .. } | Update { new, .. }) => Update {
            old: gone.object().clone(),
            new,
        },
        (Delete { obj: first }, Delete { obj: second }) => {
            if second.is_tombstone() && !first.is_tombstone() {
                Delete { obj: first }
            } else {
                Delete { obj: second }
            }
        }
    }
}

impl Queue {
    /// An empty queue. It allocates nothing until the first notification comes, grows with
    /// its depth, and gives back all but [`KEPT_SLOTS`] of its room once drained (an idle
    /// listener holds no buffer sized for a burst it had long ago).
    pub(crate) fn new(bound: QueueBound) -> Self {
        Self {
            slots: VecDeque::new(),
            live: 0,
            bytes: 0,
            holes: 0,
            bound,
            coalescing: None,
            resyncs: VecDeque::new(),
            last_seq: 0,
            pending_initial: 0,
            max_depth: 0,
            dropped: 0,
            coalesced: 0,
        }
    }

    /// Notifications queued now.
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Bytes of the notifications queued now.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// When the oldest notification queued now was queued.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.slots.iter().find(|s| s.item.is_some()).map(|s| s.at)
    }

    /// Whether a notification of `incoming` bytes finds the queue full (one always gets in).
    fn full(&self, max: usize, max_bytes: usize, incoming: usize) -> bool {
        self.live > 0 && (self.live >= max || self.bytes.saturating_add(incoming) > max_bytes)
    }
    pub(crate) fn bound(&self) -> QueueBound {
        self.bound
    }

    /// Queues `n` under the next sequence number, applying the bound.
    pub(crate) fn push(&mut self, n: Notification) -> Discarded {
        self.last_seq += 1;
        let seq = self.last_seq;
        let QueueBound::Bounded {
            max,
            max_bytes,
            overflow,
        } = self.bound
        else {
            let size = notification_bytes(&n);
            self.append(seq, n, size, None);
            return Discarded::default();
        };
        let before = self.discarded();
        let size = notification_bytes(&n);
        let mut key = None;
        // Bytes make a coalescing queue coalesce; once it does, only its count drops (the
        // module docs say why).
        let mut max_bytes = max_bytes;
        if overflow == Overflow::Coalesce {
            if self.coalescing.is_none() && self.full(max, max_bytes, size) {
                self.enter_coalescing();
            }
            if let Some(map) = &self.coalescing {
                max_bytes = usize::MAX;
                let k = key_of(&n);
                if let Some(&at) = map.get(&k) {
                    self.merge_into(at, n);
                    self.coalesced += 1;
                    return self.discarded_since(before);
                }
                key = Some(k);
            }
        }
        let drops_newest = matches!(overflow, Overflow::DropNewest | Overflow::Quarantine);
        while self.full(max, max_bytes, size) {
            if n.is_resync() || (drops_newest && self.oldest_resync().is_none()) {
                self.dropped += 1;
                let mut d = self.discarded_since(before);
                d.quarantine = overflow == Overflow::Quarantine && !n.is_resync();
                return d;
            }
            if let Some(i) = self.oldest_resync() {
                self.drop_at(i);
            } else {
                self.drop_oldest();
            }
        }
        self.append(seq, n, size, key);
        self.discarded_since(before)
    }

    /// Moves up to `max` notifications, oldest first, into `out`; returns how many of them
    /// carry an initial-list notification (no longer counted in `pending_initial`: the listener
    /// counts them until its handler is done with them).
    pub(crate) fn take(
        &mut self,
        max: usize,
        out: &mut Vec<Delivery>,
        queued_at: &mut Vec<Instant>,
    ) -> usize {
        let mut initial = 0;
        let mut last = 0;
        while out.len() < max {
            let Some(slot) = self.slots.pop_front() else {
                break;
            };
            last = slot.seq;
            let Some(item) = slot.item else {
                self.holes -= 1;
                continue;
            };
            self.live -= 1;
            self.bytes -= item.bytes;
            if let Some(map) = &mut self.coalescing {
                let k = key_of(&item.notification);
                if map.get(&k) == Some(&slot.seq) {
                    map.remove(&k);
                }
            }
            queued_at.push(slot.at);
            initial += usize::from(item.initial);
            self.pending_initial -= usize::from(item.initial);
            out.push(Delivery {
                seq: slot.seq,
                notification: item.notification,
            });
        }
        while self.resyncs.front().is_some_and(|s| *s <= last) {
            self.resyncs.pop_front();
        }
        if self.live == 0 {
            // Caught up: leave coalescing mode; only holes can be left.
            self.coalescing = None;
            self.slots.clear();
            self.holes = 0;
            self.resyncs.clear();
            self.shrink();
        }
        initial
    }

    /// Gives back the room of an empty queue beyond [`KEPT_SLOTS`] (a no-op, not a
    /// reallocation, for a queue that never held more: one that keeps up).
    fn shrink(&mut self) {
        if self.slots.capacity() > KEPT_SLOTS {
            self.slots.shrink_to(KEPT_SLOTS);
        }
        if self.resyncs.capacity() > KEPT_SLOTS {
            self.resyncs.shrink_to(KEPT_SLOTS);
        }
    }

    /// Room for entries now, allocated (for tests of the queue's memory).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.slots.capacity() + self.resyncs.capacity()
    }

    /// Drops everything queued (the listener stopped); not counted as overflow.
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.live = 0;
        self.bytes = 0;
        self.holes = 0;
        self.coalescing = None;
        self.resyncs.clear();
        self.pending_initial = 0;
        self.shrink();
    }

    /// Changes the bound; a smaller one applies its overflow policy to what is queued.
    pub(crate) fn set_bound(&mut self, bound: QueueBound) -> Discarded {
        if self.bound == QueueBound::Unbounded {
            // An unbounded queue does not track its resyncs.
            self.resyncs = self
                .slots
                .iter()
                .filter(|s| s.item.as_ref().is_some_and(|i| i.notification.is_resync()))
                .map(|s| s.seq)
                .collect();
        }
        self.bound = bound;
        let before = self.discarded();
        let QueueBound::Bounded {
            max,
            max_bytes,
            overflow,
        } = bound
        else {
            self.coalescing = None;
            return Discarded::default();
        };
        let over_bytes = |q: &Self| q.live > 1 && q.bytes > max_bytes;
        if overflow != Overflow::Coalesce {
            self.coalescing = None;
        } else if self.live > max || over_bytes(self) {
            self.enter_coalescing();
        }
        let coalescing = self.coalescing.is_some();
        let mut quarantine = false;
        while self.live > max || (!coalescing && over_bytes(self)) {
            if let Some(i) = self.oldest_resync() {
                self.drop_at(i);
            } else if overflow == Overflow::DropNewest {
                self.drop_newest();
            } else if overflow == Overflow::Quarantine {
                self.drop_newest();
                quarantine = true;
            } else {
                self.drop_oldest();
            }
        }
        let mut d = self.discarded_since(before);
        d.quarantine = quarantine;
        d
    }

    fn discarded(&self) -> Discarded {
        Discarded {
            dropped: self.dropped,
            coalesced: self.coalesced,
            quarantine: false,
        }
    }

    fn discarded_since(&self, before: Discarded) -> Discarded {
        Discarded {
            dropped: self.dropped - before.dropped,
            coalesced: self.coalesced - before.coalesced,
            quarantine: false,
        }
    }

    /// Queues `n` (of `bytes`, [`notification_bytes`]) under `seq`.
    fn append(&mut self, seq: u64, n: Notification, bytes: usize, key: Option<String>) {
        // Only a bounded queue ever looks for a resync to drop.
        if self.bound != QueueBound::Unbounded && n.is_resync() {
            self.resyncs.push_back(seq);
        }
        if let (Some(map), Some(k)) = (&mut self.coalescing, key) {
            map.insert(k, seq);
        }
        let initial = n.is_initial_list();
        self.pending_initial += usize::from(initial);
        self.slots.push_back(Slot {
            seq,
            at: Instant::now(),
            item: Some(Item {
                notification: n,
                initial,
                bytes,
            }),
        });
        self.live += 1;
        self.bytes += bytes;
        self.max_depth = self.max_depth.max(self.live);
    }

    fn find(&self, seq: u64) -> Option<usize> {
        self.slots.binary_search_by_key(&seq, |s| s.seq).ok()
    }

    /// Merges `n` into the live entry numbered `seq`.
    fn merge_into(&mut self, seq: u64, n: Notification) {
        let Some(i) = self.find(seq) else {
            return;
        };
        let Some(mut item) = self.slots[i].item.take() else {
            return;
        };
        if n.is_initial_list() && !item.initial {
            item.initial = true;
            self.pending_initial += 1;
        }
        item.notification = coalesce(item.notification, n);
        self.bytes -= item.bytes;
        item.bytes = notification_bytes(&item.notification);
        self.bytes += item.bytes;
        self.slots[i].item = Some(item);
    }

    /// Compacts the queue to one entry per object (each keeps the place and number of its
    /// first) and starts coalescing.
    fn enter_coalescing(&mut self) {
        let mut first: HashMap<String, usize> = HashMap::with_capacity(self.live);
        for i in 0..self.slots.len() {
            let Some(item) = &self.slots[i].item else {
                continue;
            };
            let k = key_of(&item.notification);
            let Some(&at) = first.get(&k) else {
                first.insert(k, i);
                continue;
            };
            let Some(later) = self.slots[i].item.take() else {
                continue;
            };
            self.live -= 1;
            self.coalesced += 1;
            self.bytes -= later.bytes;
            if let Some(mut earlier) = self.slots[at].item.take() {
                if later.initial {
                    if earlier.initial {
                        self.pending_initial -= 1;
                    }
                    earlier.initial = true;
                }
                earlier.notification = coalesce(earlier.notification, later.notification);
                self.bytes -= earlier.bytes;
                earlier.bytes = notification_bytes(&earlier.notification);
                self.bytes += earlier.bytes;
                self.slots[at].item = Some(earlier);
            }
        }
        let map = first
            .into_iter()
            .map(|(k, i)| (k, self.slots[i].seq))
            .collect();
        self.slots.retain(|s| s.item.is_some());
        self.holes = 0;
        self.coalescing = Some(map);
    }

    /// Index of the oldest queued resync, forgetting stale entries on the way.
    fn oldest_resync(&mut self) -> Option<usize> {
        while let Some(&seq) = self.resyncs.front() {
            if let Some(i) = self.find(seq)
                && self.slots[i]
                    .item
                    .as_ref()
                    .is_some_and(|it| it.notification.is_resync())
            {
                return Some(i);
            }
            self.resyncs.pop_front();
        }
        None
    }

    fn drop_oldest(&mut self) {
        if let Some(i) = self.slots.iter().position(|s| s.item.is_some()) {
            self.drop_at(i);
        }
    }

    fn drop_newest(&mut self) {
        if let Some(i) = self.slots.iter().rposition(|s| s.item.is_some()) {
            self.drop_at(i);
        }
    }

    /// Drops the live entry at `i`, counted.
    fn drop_at(&mut self, i: usize) {
        let Some(item) = self.slots[i].item.take() else {
            return;
        };
        let seq = self.slots[i].seq;
        self.live -= 1;
        self.bytes -= item.bytes;
        self.dropped += 1;
        self.pending_initial -= usize::from(item.initial);
        if let Some(map) = &mut self.coalescing {
            let k = key_of(&item.notification);
            if map.get(&k) == Some(&seq) {
                map.remove(&k);
            }
        }
        self.holes += 1;
        while self.slots.front().is_some_and(|s| s.item.is_none()) {
            self.slots.pop_front();
            self.holes -= 1;
        }
        while self.slots.back().is_some_and(|s| s.item.is_none()) {
            self.slots.pop_back();
            self.holes -= 1;
        }
        if self.holes > self.live {
            self.slots.retain(|s| s.item.is_some());
            self.holes = 0;
        }
    }
}

#[cfg(test)]
mod tests;
