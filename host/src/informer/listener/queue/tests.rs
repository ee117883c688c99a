use std::collections::BTreeMap;
use std::sync::Arc;

use super::*;
use crate::informer::object::test_util::obj;
use crate::informer::object::{DeletedObject, Object, Tombstone};

fn o(name: &str, rv: &str) -> Arc<Object> {
    obj(Some("ns"), name, rv)
}

fn add(name: &str, rv: &str) -> Notification {
    Notification::Add {
        obj: o(name, rv),
        initial_list: false,
    }
}

fn initial(name: &str, rv: &str) -> Notification {
    Notification::Add {
        obj: o(name, rv),
        initial_list: true,
    }
}

fn update(name: &str, old: &str, new: &str) -> Notification {
    Notification::Update {
        old: o(name, old),
        new: o(name, new),
    }
}

fn resync(name: &str, rv: &str) -> Notification {
    update(name, rv, rv)
}

fn delete(name: &str, rv: &str) -> Notification {
    Notification::Delete {
        obj: DeletedObject::Object(o(name, rv)),
    }
}

fn tombstone(name: &str, rv: &str) -> Notification {
    Notification::Delete {
        obj: DeletedObject::Tombstone(Tombstone {
            key: format!("ns/{name}"),
            obj: o(name, rv),
        }),
    }
}

/// `add a@1`, `add* a@1` (initial list), `update a@1->2`, `resync a@2`, `delete a@3`,
/// `tombstone a@3`.
fn show(n: &Notification) -> String {
    let at = |o: &Object| format!("{}@{}", o.meta().name(), o.resource_version());
    match n {
        Notification::Add { obj, initial_list } => {
            format!("add{} {}", if *initial_list { "*" } else { "" }, at(obj))
        }
        Notification::Update { old, new } if n.is_resync() => format!("resync {}", at(new)),
        Notification::Update { old, new } => {
            format!("update {}->{}", at(old), new.resource_version())
        }
        Notification::Delete { obj } if obj.is_tombstone() => {
            format!("tombstone {}", at(obj.object()))
        }
        Notification::Delete { obj } => format!("delete {}", at(obj.object())),
    }
}

/// Takes everything, as `seq: notification`.
fn drain(q: &mut Queue) -> Vec<String> {
    let mut out = Vec::new();
    q.take(usize::MAX, &mut out, &mut Vec::new());
    out.iter()
        .map(|d| format!("{}: {}", d.seq, show(&d.notification)))
        .collect()
}

fn queue(max: usize, overflow: Overflow) -> Queue {
    Queue::new(QueueBound::bounded(max, overflow))
}

fn push_all(q: &mut Queue, ns: impl IntoIterator<Item = Notification>) -> Discarded {
    let mut total = Discarded::default();
    for n in ns {
        let d = q.push(n);
        total.dropped += d.dropped;
        total.coalesced += d.coalesced;
        total.quarantine |= d.quarantine;
    }
    total
}

#[test]
fn an_unbounded_queue_keeps_everything_numbered_without_gaps() {
    let mut q = Queue::new(QueueBound::Unbounded);
    push_all(&mut q, (0..3000).map(|i| add(&format!("p{i}"), "1")));
    assert_eq!(q.len(), 3000);
    let mut out = Vec::new();
    q.take(usize::MAX, &mut out, &mut Vec::new());
    assert!(out.iter().zip(1..).all(|(d, seq)| d.seq == seq));
    assert_eq!((q.dropped, q.coalesced), (0, 0));
}

#[test]
fn drop_oldest_drops_the_oldest_and_leaves_its_number_as_a_gap() {
    let mut q = queue(2, Overflow::DropOldest);
    let d = push_all(&mut q, [add("a", "1"), add("b", "2"), add("c", "3")]);
    assert_eq!(
        d,
        Discarded {
            dropped: 1,
            coalesced: 0,
            quarantine: false,
        }
    );
    assert_eq!(drain(&mut q), ["2: add b@2", "3: add c@3"]);
    assert_eq!(q.dropped, 1);
    assert_eq!(q.last_seq, 3);
}

#[test]
fn drop_newest_drops_the_incoming_and_leaves_its_number_as_a_gap() {
    let mut q = queue(2, Overflow::DropNewest);
    push_all(&mut q, [add("a", "1"), add("b", "2"), add("c", "3")]);
    assert_eq!(drain(&mut q), ["1: add a@1", "2: add b@2"]);
    q.push(add("d", "4"));
    assert_eq!(drain(&mut q), ["4: add d@4"], "3 is the gap");
    assert_eq!(q.dropped, 1);
}

#[test]
fn quarantine_drops_the_incoming_change_and_says_so_but_not_for_a_resync() {
    let mut q = queue(2, Overflow::Quarantine);
    let d = push_all(&mut q, [add("a", "1"), resync("b", "2")]);
    assert!(!d.quarantine && d.is_empty());
    // Full: the resync goes first, which loses no change.
    let d = q.push(add("c", "3"));
    assert_eq!((d.dropped, d.quarantine), (1, false));
    // Full of changes: the incoming one is dropped, and the handler is to be stopped.
    let d = q.push(update("c", "3", "4"));
    assert_eq!((d.dropped, d.quarantine), (1, true));
    assert_eq!(drain(&mut q), ["1: add a@1", "3: add c@3"]);
    // A smaller bound dropping a change says so too.
    push_all(&mut q, [add("d", "5"), add("e", "6")]);
    let d = q.set_bound(QueueBound::bounded(1, Overflow::Quarantine));
    assert_eq!((d.dropped, d.quarantine), (1, true));
}

#[test]
fn a_full_queue_drops_resyncs_first_whatever_the_policy() {
    for overflow in [
        Overflow::DropOldest,
        Overflow::DropNewest,
        Overflow::Quarantine,
        Overflow::Coalesce,
    ] {
        let mut q = queue(3, overflow);
        push_all(
            &mut q,
            [
                add("a", "1"),
                resync("b", "2"),
                add("c", "3"),
                add("d", "4"),
            ],
        );
        // Full: an incoming resync is dropped rather than anything else.
        q.push(resync("e", "5"));
        assert_eq!(
            drain(&mut q),
            ["1: add a@1", "3: add c@3", "4: add d@4"],
            "{overflow:?}"
        );
        assert_eq!(q.dropped, 2, "{overflow:?}");
    }
}

#[test]
fn a_resync_dropped_from_the_middle_leaves_a_hole_that_taking_skips() {
    let mut q = queue(4, Overflow::DropOldest);
    push_all(
        &mut q,
        [
            add("a", "1"),
            add("b", "2"),
            resync("c", "3"),
            resync("d", "4"),
            add("e", "5"),
            add("f", "6"),
        ],
    );
    assert_eq!(q.len(), 4);
    let mut out = Vec::new();
    q.take(2, &mut out, &mut Vec::new());
    assert_eq!(out.iter().map(|d| d.seq).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(drain(&mut q), ["5: add e@5", "6: add f@6"]);
    assert!(q.is_empty());
}

#[test]
fn coalesce_below_the_bound_changes_nothing() {
    let mut q = queue(10, Overflow::Coalesce);
    push_all(
        &mut q,
        [add("a", "1"), update("a", "1", "2"), delete("a", "2")],
    );
    assert_eq!(
        drain(&mut q),
        ["1: add a@1", "2: update a@1->2", "3: delete a@2"]
    );
    assert_eq!(q.coalesced, 0);
}

#[test]
fn coalesce_at_the_bound_compacts_to_one_entry_per_object_in_the_first_place_and_number() {
    let mut q = queue(4, Overflow::Coalesce);
    push_all(
        &mut q,
        [
            add("a", "1"),
            add("b", "2"),
            update("a", "1", "3"),
            update("b", "2", "4"),
        ],
    );
    // Full: compacted to a and b, then c fits.
    let d = q.push(add("c", "5"));
    assert_eq!(
        d,
        Discarded {
            dropped: 0,
            coalesced: 2,
            quarantine: false,
        }
    );
    assert_eq!(q.len(), 3);
    // In coalescing mode a notification about a queued object merges into it, below the bound.
    q.push(update("c", "5", "6"));
    assert_eq!(drain(&mut q), ["1: add a@3", "2: add b@4", "5: add c@6"]);
    assert_eq!(q.coalesced, 3);
    assert_eq!(q.last_seq, 6);
}

#[test]
fn coalescing_ends_once_the_handler_has_caught_up() {
    let mut q = queue(2, Overflow::Coalesce);
    push_all(
        &mut q,
        [add("a", "1"), update("a", "1", "2"), update("a", "2", "3")],
    );
    assert_eq!(drain(&mut q), ["1: add a@3"]);
    push_all(&mut q, [update("a", "3", "4")]);
    let mut out = Vec::new();
    q.take(usize::MAX, &mut out, &mut Vec::new());
    push_all(&mut q, [update("a", "4", "5")]);
    assert_eq!(
        drain(&mut q),
        ["5: update a@4->5"],
        "not merged into the one the handler took"
    );
    push_all(&mut q, [update("a", "5", "6")]);
    assert_eq!(drain(&mut q), ["6: update a@5->6"]);
}

#[test]
fn coalesce_drops_only_when_max_distinct_objects_wait_and_then_the_oldest() {
    let mut q = queue(2, Overflow::Coalesce);
    push_all(&mut q, [add("a", "1"), add("b", "2")]);
    let d = q.push(add("c", "3"));
    assert_eq!(
        d,
        Discarded {
            dropped: 1,
            coalesced: 0,
            quarantine: false,
        }
    );
    q.push(update("c", "3", "4"));
    assert_eq!(drain(&mut q), ["2: add b@2", "3: add c@4"]);
    assert_eq!((q.dropped, q.coalesced), (1, 1));
}

#[test]
fn notifications_merged_in_the_queue_follow_the_coalesce_rules() {
    // The queue applies the same rules as `coalesce` (tested rule by rule below).
    let mut q = queue(1, Overflow::Coalesce);
    push_all(
        &mut q,
        [
            add("a", "1"),
            delete("a", "1"),
            add("a", "2"),
            update("a", "2", "3"),
        ],
    );
    assert_eq!(drain(&mut q), ["1: update a@1->3"]);
}

fn merged(pending: Notification, new: Notification) -> String {
    show(&coalesce(pending, new))
}

#[test]
fn add_then_update_is_an_add_of_the_latest_state_keeping_initial_list() {
    assert_eq!(merged(add("a", "1"), update("a", "1", "2")), "add a@2");
    assert_eq!(merged(initial("a", "1"), update("a", "1", "2")), "add* a@2");
}

#[test]
fn add_then_delete_is_a_delete_of_the_final_state() {
    assert_eq!(merged(add("a", "1"), delete("a", "2")), "delete a@2");
}

#[test]
fn add_then_add_is_an_add_of_the_latest_state_initial_if_either_was() {
    assert_eq!(merged(add("a", "1"), initial("a", "2")), "add* a@2");
    assert_eq!(merged(add("a", "1"), add("a", "2")), "add a@2");
}

#[test]
fn update_then_update_keeps_the_first_old_and_the_latest_new() {
    assert_eq!(
        merged(update("a", "1", "2"), update("a", "2", "3")),
        "update a@1->3"
    );
    assert_eq!(
        merged(resync("a", "1"), update("a", "1", "2")),
        "update a@1->2"
    );
    assert_eq!(
        merged(update("a", "1", "2"), resync("a", "2")),
        "update a@1->2"
    );
}

#[test]
fn update_then_delete_is_a_delete_of_the_final_state() {
    assert_eq!(
        merged(update("a", "1", "2"), delete("a", "3")),
        "delete a@3"
    );
    assert_eq!(
        merged(update("a", "1", "2"), tombstone("a", "2")),
        "tombstone a@2"
    );
}

#[test]
fn update_then_replayed_add_is_an_update_to_the_added_state() {
    assert_eq!(
        merged(update("a", "1", "2"), initial("a", "2")),
        "update a@1->2"
    );
}

#[test]
fn delete_then_add_is_an_update_from_the_deleted_state() {
    assert_eq!(merged(delete("a", "1"), add("a", "5")), "update a@1->5");
    assert_eq!(merged(tombstone("a", "1"), add("a", "5")), "update a@1->5");
    assert_eq!(
        merged(delete("a", "1"), update("a", "4", "5")),
        "update a@1->5"
    );
}

#[test]
fn delete_then_delete_keeps_a_real_deletion_over_a_tombstone() {
    assert_eq!(merged(delete("a", "1"), tombstone("a", "1")), "delete a@1");
    assert_eq!(merged(tombstone("a", "1"), delete("a", "2")), "delete a@2");
    assert_eq!(merged(delete("a", "1"), delete("a", "2")), "delete a@2");
}

#[test]
fn dropped_initial_list_notifications_stop_counting_as_pending() {
    for overflow in [
        Overflow::DropOldest,
        Overflow::DropNewest,
        Overflow::Coalesce,
    ] {
        let mut q = queue(3, overflow);
        push_all(&mut q, (0..10).map(|i| initial(&format!("p{i}"), "1")));
        assert_eq!(q.dropped, 7, "{overflow:?}");
        assert_eq!(q.pending_initial, 3, "{overflow:?}");
        let mut out = Vec::new();
        assert_eq!(q.take(2, &mut out, &mut Vec::new()), 2);
        assert_eq!(q.pending_initial, 1, "{overflow:?}");
        q.take(usize::MAX, &mut out, &mut Vec::new());
        assert_eq!(q.pending_initial, 0, "{overflow:?}");
    }
}

#[test]
fn merged_initial_list_notifications_count_once_and_until_taken() {
    let mut q = queue(2, Overflow::Coalesce);
    push_all(
        &mut q,
        [initial("a", "1"), update("a", "1", "2"), initial("b", "1")],
    );
    // Compacted: a's add (initial) absorbed the update; b fits.
    assert_eq!(q.pending_initial, 2);
    q.push(initial("a", "2"));
    assert_eq!(q.pending_initial, 2);
    // A replayed initial-list add merged into a plain update makes that entry count.
    let mut q = queue(1, Overflow::Coalesce);
    push_all(&mut q, [update("a", "1", "2"), update("a", "2", "3")]);
    assert_eq!(q.pending_initial, 0);
    q.push(initial("a", "3"));
    assert_eq!(q.pending_initial, 1);
    let mut out = Vec::new();
    assert_eq!(q.take(usize::MAX, &mut out, &mut Vec::new()), 1);
    assert_eq!(q.pending_initial, 0);
}

#[test]
fn a_smaller_bound_applies_the_policy_to_what_is_queued() {
    let mut q = Queue::new(QueueBound::Unbounded);
    push_all(&mut q, (0..6).map(|i| add(&format!("p{i}"), "1")));
    let d = q.set_bound(QueueBound::bounded(4, Overflow::DropNewest));
    assert_eq!(d.dropped, 2);
    assert_eq!(q.len(), 4);
    let d = q.set_bound(QueueBound::bounded(2, Overflow::DropOldest));
    assert_eq!(d.dropped, 2);
    assert_eq!(drain(&mut q), ["3: add p2@1", "4: add p3@1"]);

    let mut q = Queue::new(QueueBound::Unbounded);
    push_all(&mut q, [add("a", "1"), resync("r", "1"), add("b", "1")]);
    q.set_bound(QueueBound::bounded(2, Overflow::DropOldest));
    assert_eq!(
        drain(&mut q),
        ["1: add a@1", "3: add b@1"],
        "the resync went first"
    );

    let mut q = Queue::new(QueueBound::Unbounded);
    push_all(
        &mut q,
        [add("a", "1"), add("b", "1"), update("a", "1", "2")],
    );
    let d = q.set_bound(QueueBound::bounded(2, Overflow::Coalesce));
    assert_eq!(
        d,
        Discarded {
            dropped: 0,
            coalesced: 1,
            quarantine: false,
        }
    );
    assert_eq!(drain(&mut q), ["1: add a@2", "2: add b@1"]);
}

/// A small deterministic pseudo-random sequence (no dependency, no flakes).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Random changes to `objects` objects (creates, updates, deletes, resyncs) offered to `q`, with
/// the handler taking small batches now and then. Checks the bound and the accounting at every
/// step; returns the truth (key -> rv) and the view of a level-based handler.
fn churn(
    q: &mut Queue,
    objects: u64,
    steps: u64,
    seed: u64,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut rng = Lcg(seed);
    let mut truth: BTreeMap<String, String> = BTreeMap::new();
    let mut view: BTreeMap<String, String> = BTreeMap::new();
    let mut taken = 0u64;
    let mut last_seq = 0;
    let mut apply = |q: &mut Queue, batch: usize, view: &mut BTreeMap<String, String>| {
        let mut out = Vec::new();
        q.take(batch, &mut out, &mut Vec::new());
        for d in &out {
            assert!(d.seq > last_seq, "sequence numbers only go up");
            last_seq = d.seq;
            match &d.notification {
                Notification::Add { obj, .. } | Notification::Update { new: obj, .. } => {
                    view.insert(
                        obj.meta().name().to_owned(),
                        obj.resource_version().to_owned(),
                    );
                }
                Notification::Delete { obj } => {
                    view.remove(obj.object().meta().name());
                }
            }
        }
        out.len() as u64
    };
    for step in 1..=steps {
        let name = format!("p{}", rng.below(objects));
        let rv = step.to_string();
        let n = match truth.get(&name).cloned() {
            None => add(&name, &rv),
            Some(old) => match rng.below(10) {
                0 => resync(&name, &old),
                1 | 2 => delete(&name, &rv),
                _ => update(&name, &old, &rv),
            },
        };
        match &n {
            Notification::Delete { .. } => {
                truth.remove(&name);
            }
            n if !n.is_resync() => {
                truth.insert(name, rv);
            }
            _ => {}
        }
        q.push(n);
        if let Some(max) = q.bound().max() {
            assert!(q.len() <= max, "{} queued over a bound of {max}", q.len());
        }
        if rng.below(8) == 0 {
            let batch = 1 + rng.below(4) as usize;
            taken += apply(q, batch, &mut view);
        }
        assert_eq!(
            q.last_seq,
            taken + q.dropped + q.coalesced + q.len() as u64,
            "every number is delivered, dropped, coalesced or queued"
        );
    }
    apply(q, usize::MAX, &mut view);
    (truth, view)
}

#[test]
fn a_bounded_queue_never_holds_more_than_its_bound_and_accounts_for_every_number() {
    for overflow in [
        Overflow::DropOldest,
        Overflow::DropNewest,
        Overflow::Coalesce,
    ] {
        for seed in 1..6 {
            let mut q = queue(16, overflow);
            churn(&mut q, 64, 5000, seed);
            assert!(q.dropped > 0, "{overflow:?}: the bound was exercised");
            assert_eq!(q.max_depth, 16);
        }
    }
}

#[test]
fn coalescing_with_room_for_every_object_leaves_a_level_based_handler_with_the_final_state() {
    for seed in 1..11 {
        let mut q = queue(32, Overflow::Coalesce);
        let (truth, view) = churn(&mut q, 32, 5000, seed);
        assert_eq!(view, truth, "seed {seed}");
        assert!(q.coalesced > 1000, "seed {seed}: coalesced {}", q.coalesced);
        assert_eq!(q.dropped, 0, "seed {seed}: never full of distinct objects");
    }
}

#[test]
fn a_queue_holds_no_room_until_used_and_gives_back_a_burst_s_room_once_drained() {
    for bound in [
        QueueBound::Unbounded,
        QueueBound::bounded(100_000, Overflow::Coalesce),
        QueueBound::bounded(100_000, Overflow::DropOldest),
    ] {
        let mut q = Queue::new(bound);
        assert_eq!(q.capacity(), 0, "{bound:?}: nothing allocated before use");
        push_all(&mut q, (0..1000).map(|i| add(&format!("p{i}"), "1")));
        assert!(q.capacity() >= 1000, "{bound:?}");
        let mut out = Vec::new();
        q.take(400, &mut out, &mut Vec::new());
        assert!(
            q.capacity() >= 600,
            "{bound:?}: not shrunk while not drained"
        );
        q.take(1000, &mut out, &mut Vec::new());
        assert_eq!(out.len(), 1000, "{bound:?}");
        assert!(
            q.capacity() <= 2 * KEPT_SLOTS,
            "{bound:?}: drained, {}",
            q.capacity()
        );
        // Room for a batch stays: a queue that keeps up does not reallocate.
        push_all(&mut q, (0..10).map(|i| add(&format!("p{i}"), "2")));
        assert!(q.capacity() >= 10);
        q.clear();
        assert!(q.capacity() <= 2 * KEPT_SLOTS, "{bound:?}: cleared");
    }
}

/// A queue of `max` notifications and `objects` objects' worth of bytes (every test object of a
/// one-letter name at a one-digit version has the same size).
fn bytes_queue(objects: usize, overflow: Overflow) -> Queue {
    let one = o("a", "1").heap_size();
    Queue::new(QueueBound::bounded(1000, overflow).with_max_bytes(objects * one))
}

#[test]
fn a_coalescing_queue_full_in_bytes_coalesces_per_object_and_drops_only_past_its_count() {
    let one = o("a", "1").heap_size();
    let mut q = bytes_queue(3, Overflow::Coalesce);
    for name in ["a", "b", "c"] {
        q.push(add(name, "1"));
    }
    assert_eq!(q.bytes(), 3 * one);
    // Full in bytes (far from its count): updates merge into the queued adds.
    for rv in ["2", "3", "4"] {
        let d = q.push(update("a", "1", rv));
        assert_eq!(d.coalesced, 1);
        assert_eq!(q.bytes(), 3 * one, "an add merged with an update is an add");
    }
    // A fourth object is kept (one per object: a level-triggered handler loses no final
    // state), merged into from then on.
    assert!(q.push(add("d", "5")).is_empty());
    assert_eq!(q.push(update("d", "5", "6")).coalesced, 1);
    assert_eq!(q.bytes(), 4 * one);
    assert_eq!(
        drain(&mut q),
        ["1: add a@4", "2: add b@1", "3: add c@1", "7: add d@6"]
    );
    assert_eq!(q.bytes(), 0, "a drained queue holds no bytes");
    assert_eq!(q.oldest(), None);
    // Caught up, it queues every notification again until full.
    q.push(add("a", "7"));
    q.push(update("a", "7", "8"));
    assert_eq!(q.len(), 2);
}

#[test]
fn a_queue_full_in_bytes_drops_the_oldest_and_lets_one_large_notification_in() {
    let mut q = bytes_queue(2, Overflow::DropOldest);
    for (i, name) in ["a", "b", "c", "d", "e"].iter().enumerate() {
        q.push(add(name, &(i + 1).to_string()));
    }
    assert_eq!(q.dropped, 3);
    assert_eq!(drain(&mut q), ["4: add d@4", "5: add e@5"]);
    // An update holds two objects: over a one-object bound, it still gets in alone.
    let mut q = bytes_queue(1, Overflow::DropNewest);
    assert!(q.push(update("a", "1", "2")).is_empty());
    assert_eq!(q.push(add("b", "3")).dropped, 1, "the newest is dropped");
    assert_eq!(drain(&mut q), ["1: update a@1->2"]);
}

#[test]
fn a_queue_reports_when_its_oldest_notification_was_queued_and_hands_out_each_ones_time() {
    let mut q = queue(10, Overflow::Coalesce);
    q.push(add("a", "1"));
    let first = q.oldest().expect("one queued");
    q.push(add("b", "2"));
    assert_eq!(q.oldest(), Some(first), "the oldest stays the first queued");
    let (mut out, mut at) = (Vec::new(), Vec::new());
    q.take(1, &mut out, &mut at);
    assert_eq!(at, [first]);
    assert!(q.oldest().is_some_and(|b| b >= first));
    q.take(1, &mut Vec::new(), &mut at);
    assert_eq!((at.len(), q.oldest()), (2, None));
}
