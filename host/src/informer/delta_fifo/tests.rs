use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;
use crate::informer::indexer::Indexer;
use crate::informer::object::test_util::obj;

fn kinds(deltas: &[Delta]) -> Vec<DeltaType> {
    deltas.iter().map(Delta::kind).collect()
}

fn pop_all(f: &DeltaFifo) -> Vec<(String, Vec<DeltaType>)> {
    let mut out = Vec::new();
    while !f.is_empty() {
        let (k, d) = f.pop(|d, _| (deltas_key(&d), kinds(&d))).unwrap();
        out.push((k, d));
    }
    out
}

fn deltas_key(d: &[Delta]) -> String {
    d[0].key()
}

fn pod(name: &str, rv: &str) -> Arc<Object> {
    obj(Some("ns"), name, rv)
}

fn tombstone(name: &str, rv: &str) -> DeletedObject {
    DeletedObject::Tombstone(Tombstone {
        key: format!("ns/{name}"),
        obj: pod(name, rv),
    })
}

#[test]
fn a_key_keeps_its_first_position_when_more_deltas_arrive() {
    let f = DeltaFifo::new(None, None);
    f.add(pod("a", "1"));
    f.add(pod("b", "1"));
    f.update(pod("a", "2"));
    f.add(pod("c", "1"));
    f.update(pod("b", "2"));
    assert_eq!(
        pop_all(&f),
        vec![
            ("ns/a".into(), vec![DeltaType::Added, DeltaType::Updated]),
            ("ns/b".into(), vec![DeltaType::Added, DeltaType::Updated]),
            ("ns/c".into(), vec![DeltaType::Added]),
        ]
    );
}

#[test]
fn delete_of_a_key_neither_queued_nor_known_is_dropped_without_lister() {
    let f = DeltaFifo::new(None, None);
    f.delete(DeletedObject::Object(pod("ghost", "1")));
    assert!(f.is_empty());
    f.add(pod("a", "1"));
    f.delete(DeletedObject::Object(pod("a", "2")));
    assert_eq!(
        pop_all(&f),
        vec![("ns/a".into(), vec![DeltaType::Added, DeltaType::Deleted])]
    );
}

#[test]
fn delete_of_a_key_neither_queued_nor_known_is_dropped_with_lister() {
    let ix = Indexer::new();
    ix.add(pod("known", "1"));
    let f = DeltaFifo::new(Some(ix.cache()), None);
    f.delete(DeletedObject::Object(pod("ghost", "1")));
    assert!(f.is_empty(), "unknown key must be dropped");
    f.delete(DeletedObject::Object(pod("known", "2")));
    assert_eq!(
        pop_all(&f),
        vec![("ns/known".into(), vec![DeltaType::Deleted])]
    );
}

#[test]
fn two_deletions_in_a_row_collapse_and_a_real_deletion_wins_over_a_tombstone() {
    let f = DeltaFifo::new(None, None);
    f.add(pod("a", "1"));
    f.delete(DeletedObject::Object(pod("a", "2")));
    f.delete(tombstone("a", "1"));
    let d = f.deltas("ns/a").unwrap();
    assert_eq!(kinds(&d), [DeltaType::Added, DeltaType::Deleted]);
    assert!(
        !d[1].is_tombstone(),
        "the real deletion is kept over the later tombstone"
    );

    let f = DeltaFifo::new(None, None);
    f.add(pod("b", "1"));
    f.delete(tombstone("b", "1"));
    f.delete(DeletedObject::Object(pod("b", "3")));
    let d = f.deltas("ns/b").unwrap();
    assert_eq!(kinds(&d), [DeltaType::Added, DeltaType::Deleted]);
    assert_eq!(
        d[1],
        Delta::Deleted(DeletedObject::Object(pod("b", "3"))),
        "a later real deletion replaces the tombstone"
    );
}

#[test]
fn dedup_only_touches_the_last_two_deltas_when_both_are_deletions() {
    let f = DeltaFifo::new(None, None);
    f.add(pod("a", "1"));
    f.update(pod("a", "2"));
    f.update(pod("a", "3"));
    assert_eq!(
        kinds(&f.deltas("ns/a").unwrap()),
        [DeltaType::Added, DeltaType::Updated, DeltaType::Updated]
    );
}

#[test]
fn replace_makes_tombstones_for_known_objects_missing_from_the_list() {
    let ix = Indexer::new();
    ix.add(pod("kept", "1"));
    ix.add(pod("gone", "5"));
    let f = DeltaFifo::new(Some(ix.cache()), None);
    f.replace(vec![pod("kept", "2")], "10");
    let gone = f.deltas("ns/gone").unwrap();
    assert_eq!(
        gone,
        vec![Delta::Deleted(tombstone("gone", "5"))],
        "tombstone carries the cached object"
    );
    assert_eq!(kinds(&f.deltas("ns/kept").unwrap()), [DeltaType::Replaced]);
}

#[test]
fn replace_makes_tombstones_for_objects_only_in_the_queue() {
    let f = DeltaFifo::new(Some(Indexer::new().cache()), None);
    f.add(pod("queued", "1"));
    f.update(pod("queued", "2"));
    f.replace(vec![pod("listed", "3")], "10");
    let d = f.deltas("ns/queued").unwrap();
    assert_eq!(
        kinds(&d),
        [DeltaType::Added, DeltaType::Updated, DeltaType::Deleted]
    );
    assert_eq!(
        d[2],
        Delta::Deleted(tombstone("queued", "2")),
        "tombstone carries the newest queued object"
    );
}

#[test]
fn replace_after_a_queued_tombstone_unwraps_it_instead_of_nesting() {
    let ix = Indexer::new();
    ix.add(pod("gone", "5"));
    let f = DeltaFifo::new(Some(ix.cache()), None);
    f.replace(vec![], "10");
    f.replace(vec![], "11");
    let d = f.deltas("ns/gone").unwrap();
    assert_eq!(d, vec![Delta::Deleted(tombstone("gone", "5"))]);
}

#[test]
fn a_delete_followed_by_replace_of_the_same_object_yields_deleted_then_replaced() {
    let ix = Indexer::new();
    ix.add(pod("a", "1"));
    let f = DeltaFifo::new(Some(ix.cache()), None);
    f.delete(DeletedObject::Object(pod("a", "1")));
    f.replace(vec![pod("a", "2")], "10");
    assert_eq!(
        kinds(&f.deltas("ns/a").unwrap()),
        [DeltaType::Deleted, DeltaType::Replaced]
    );
}

#[test]
fn resync_queues_sync_only_for_known_keys_with_nothing_queued() {
    let ix = Indexer::new();
    ix.add(pod("idle", "1"));
    ix.add(pod("busy", "1"));
    let f = DeltaFifo::new(Some(ix.cache()), None);
    f.update(pod("busy", "2"));
    f.resync();
    assert_eq!(kinds(&f.deltas("ns/idle").unwrap()), [DeltaType::Sync]);
    assert_eq!(
        kinds(&f.deltas("ns/busy").unwrap()),
        [DeltaType::Updated],
        "no Sync behind a queued update"
    );
}

#[test]
fn resync_does_not_resurrect_a_key_with_a_queued_deletion() {
    let ix = Indexer::new();
    ix.add(pod("a", "1"));
    let f = DeltaFifo::new(Some(ix.cache()), None);
    f.delete(DeletedObject::Object(pod("a", "1")));
    f.resync();
    assert_eq!(kinds(&f.deltas("ns/a").unwrap()), [DeltaType::Deleted]);
}

#[test]
fn has_synced_follows_client_go_rules() {
    // Nothing happened yet.
    let f = DeltaFifo::new(None, None);
    assert!(!f.has_synced());

    // An empty first Replace syncs at once.
    let f = DeltaFifo::new(None, None);
    f.replace(vec![], "1");
    assert!(f.has_synced());

    // Add before any Replace syncs.
    let f = DeltaFifo::new(None, None);
    f.add(pod("a", "1"));
    assert!(f.has_synced());

    // Replace of two items: synced only after both are popped; later adds do not unsync.
    let f = DeltaFifo::new(None, None);
    f.replace(vec![pod("a", "1"), pod("b", "1")], "1");
    assert!(!f.has_synced());
    f.add(pod("c", "1"));
    f.pop(|_, initial| assert!(initial)).unwrap();
    assert!(!f.has_synced());
    f.pop(|_, initial| assert!(initial)).unwrap();
    assert!(f.has_synced());
    f.pop(|_, initial| assert!(!initial, "c came after the initial list"))
        .unwrap();
    assert!(f.has_synced());

    // A second Replace does not reset the count.
    f.replace(vec![pod("d", "1")], "2");
    assert!(f.has_synced());
}

#[test]
fn has_synced_counts_tombstones_of_the_first_replace() {
    let ix = Indexer::new();
    ix.add(pod("gone", "1"));
    let f = DeltaFifo::new(Some(ix.cache()), None);
    f.replace(vec![pod("a", "1")], "1");
    f.pop(|_, _| ()).unwrap();
    assert!(
        !f.has_synced(),
        "the tombstone is part of the initial population"
    );
    f.pop(|d, _| assert_eq!(kinds(&d), [DeltaType::Deleted]))
        .unwrap();
    assert!(f.has_synced());
}

#[test]
fn has_synced_is_correct_when_an_initial_item_is_deleted_before_pop() {
    let ix = Indexer::new();
    let f = DeltaFifo::new(Some(ix.cache()), None);
    f.replace(vec![pod("a", "1"), pod("b", "1")], "1");
    f.delete(DeletedObject::Object(pod("a", "1")));
    f.pop(|d, _| assert_eq!(kinds(&d), [DeltaType::Replaced, DeltaType::Deleted]))
        .unwrap();
    assert!(!f.has_synced());
    f.pop(|_, _| ()).unwrap();
    assert!(f.has_synced());
}

#[test]
fn pop_unblocks_with_an_error_when_closed() {
    let f = Arc::new(DeltaFifo::new(None, None));
    let f2 = f.clone();
    let h = std::thread::spawn(move || f2.pop(|_, _| ()));
    std::thread::sleep(Duration::from_millis(50));
    f.close();
    assert_eq!(h.join().unwrap(), Err(FifoClosed));
}

#[test]
fn close_lets_pop_drain_what_is_queued_first() {
    let f = DeltaFifo::new(None, None);
    f.add(pod("a", "1"));
    f.close();
    assert!(f.pop(|_, _| ()).is_ok());
    assert_eq!(f.pop(|_, _| ()), Err(FifoClosed));
}

#[test]
fn a_popped_item_is_removed_even_if_processing_fails() {
    let f = DeltaFifo::new(None, None);
    f.add(pod("a", "1"));
    let r: Result<(), &str> = f.pop(|_, _| Err("handler failed")).unwrap();
    assert!(r.is_err());
    assert!(f.is_empty());
    assert!(f.deltas("ns/a").is_none());
}

#[test]
fn transform_runs_once_per_object_and_never_on_tombstones() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let t: TransformFn = Arc::new(move |o: Arc<Object>| {
        c.fetch_add(1, Ordering::SeqCst);
        let mut meta = o.meta().to_owned();
        meta.annotations.push(("transformed".into(), "yes".into()));
        Arc::new(Object::from_parts(&meta, o.json()))
    });
    let ix = Indexer::new();
    ix.add(pod("gone", "1"));
    let f = DeltaFifo::new(Some(ix.cache()), Some(t));
    f.add(pod("a", "1"));
    f.replace(vec![pod("a", "2")], "2");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "one call per object, none for the tombstone of gone"
    );
    let d = f.deltas("ns/a").unwrap();
    assert!(
        d.iter()
            .all(|d| d.object().meta().annotation("transformed") == Some("yes"))
    );
    let gone = f.deltas("ns/gone").unwrap();
    assert_eq!(gone[0].object().meta().annotation("transformed"), None);
}

/// client-go `TestDeltaFIFO_transformer` plus its rule that Sync deltas carry objects that have
/// already been transformed (they come from the cache): a resync never runs the transform.
#[test]
fn transformer_is_not_run_again_on_sync_deltas() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let t: TransformFn = Arc::new(move |o: Arc<Object>| {
        c.fetch_add(1, Ordering::SeqCst);
        o
    });
    let ix = Indexer::new();
    let cached = pod("a", "1");
    ix.add(cached.clone());
    let f = DeltaFifo::new(Some(ix.cache()), Some(t));
    f.resync();
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no transform on a resync");
    let d = f.deltas("ns/a").unwrap();
    assert_eq!(kinds(&d), [DeltaType::Sync]);
    assert!(
        Arc::ptr_eq(d[0].object(), &cached),
        "the Sync carries the cached object as it is"
    );
}

/// client-go `TestDeltaFIFO_transformer`: each object is transformed once, tombstones carry the
/// (once) transformed object.
#[test]
fn transformer() {
    let t: TransformFn = Arc::new(|o: Arc<Object>| {
        let mut meta = o.meta().to_owned();
        let n: usize = o
            .meta()
            .annotation("xfrm")
            .map_or(0, |v| v.parse().unwrap_or(0));
        meta.annotations.retain(|(k, _)| k != "xfrm");
        meta.annotations.push(("xfrm".into(), (n + 1).to_string()));
        Arc::new(Object::from_parts(&meta, o.json()))
    });
    let f = DeltaFifo::new(None, Some(t));
    f.add(pod("foo", "10"));
    f.add(pod("bar", "11"));
    f.update(pod("foo", "12"));
    f.delete(DeletedObject::Object(pod("foo", "15")));
    f.replace(vec![], "");
    f.add(pod("bar", "16"));
    f.replace(vec![], "");
    assert_eq!(f.list_keys(), ["ns/foo", "ns/bar"]);
    for _ in 0..2 {
        let newest = f.pop(|d, _| d.last().unwrap().clone()).unwrap();
        match newest {
            Delta::Deleted(DeletedObject::Object(o)) => {
                assert_eq!(o.meta().name(), "foo", "regular deletion of foo");
                assert_eq!(o.resource_version(), "15");
                assert_eq!(o.meta().annotation("xfrm"), Some("1"));
            }
            Delta::Deleted(DeletedObject::Tombstone(t)) => {
                assert_eq!(t.obj.meta().name(), "bar", "tombstone deletion of bar");
                assert_eq!(t.obj.resource_version(), "16");
                assert_eq!(t.obj.meta().annotation("xfrm"), Some("1"));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// client-go `dedupDeltas` / `isDeletionDup`: of two deletions in a row the older is kept,
/// unless the older is a DeletedFinalStateUnknown, then the newer is kept.
#[test]
fn dedup_deltas_keeps_the_older_deletion_unless_it_is_a_tombstone() {
    // Two real deletions: the older stays.
    let f = DeltaFifo::new(None, None);
    f.add(pod("a", "1"));
    f.delete(DeletedObject::Object(pod("a", "2")));
    f.delete(DeletedObject::Object(pod("a", "3")));
    assert_eq!(
        f.deltas("ns/a").unwrap(),
        [
            Delta::Added(pod("a", "1")),
            Delta::Deleted(DeletedObject::Object(pod("a", "2")))
        ]
    );
    // Two tombstones: the newer stays.
    let f = DeltaFifo::new(None, None);
    f.add(pod("b", "1"));
    f.delete(tombstone("b", "1"));
    f.delete(tombstone("b", "2"));
    assert_eq!(
        f.deltas("ns/b").unwrap(),
        [
            Delta::Added(pod("b", "1")),
            Delta::Deleted(tombstone("b", "2"))
        ]
    );
}
