//! client-go's `the_real_fifo_test.go`, transcribed: each test is named after the Go test it
//! follows (`TestRealFIFO_addUpdate` -> `real_fifo_add_update`). Objects are pods in "ns" whose
//! resourceVersion plays the Go tests' integer value. Not transcribed: `TestRealFIFO_KeyOf`'s
//! `Deltas` cases (Wisp has no untyped queue items), `TestRealFIFO_PopBrokenItemsInBatch` (a
//! Wisp key cannot fail). The `*Atomic*` tests run over [`RealFifo::atomic`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use super::*;
use crate::informer::indexer::Indexer;
use crate::informer::object::test_util::obj;

fn pod(name: &str, rv: &str) -> Arc<Object> {
    obj(Some("ns"), name, rv)
}

fn tomb(name: &str, rv: &str) -> Delta {
    Delta::Deleted(DeletedObject::Tombstone(Tombstone {
        key: format!("ns/{name}"),
        obj: pod(name, rv),
    }))
}

fn del(name: &str, rv: &str) -> DeletedObject {
    DeletedObject::Object(pod(name, rv))
}

/// A cache holding `objs`, standing in for the Go tests' `literalListerGetter`.
fn known(objs: &[Arc<Object>]) -> Option<Cache> {
    let idx = Indexer::new();
    for o in objs {
        idx.add(o.clone());
    }
    Some(idx.cache())
}

fn empty_known() -> Option<Cache> {
    known(&[])
}

/// Pops one delta (client-go's `Pop(f)` of a single-delta `Deltas`).
fn pop1(f: &RealFifo) -> Delta {
    f.pop(|d, _| {
        let mut d = d.into_deltas();
        assert_eq!(d.len(), 1);
        d.remove(0)
    })
    .unwrap()
}

/// The resourceVersion of the object of the next popped delta (`testRealFIFOPop(f).val`).
fn pop_rv(f: &RealFifo) -> String {
    pop1(f).object().resource_version().to_owned()
}

fn pop_all(f: &RealFifo) -> Vec<Delta> {
    let mut out = Vec::new();
    while !f.is_empty() {
        out.push(pop1(f));
    }
    out
}

#[test]
fn real_fifo_basic() {
    let f = Arc::new(RealFifo::new(empty_known(), None));
    const AMOUNT: usize = 500;
    let producers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|p| {
            let f = f.clone();
            std::thread::spawn(move || {
                for i in 0..AMOUNT {
                    f.add(pod(&format!("{p}{i}"), &(i + 1).to_string()));
                }
            })
        })
        .collect();
    let mut last = HashMap::from([("a".to_owned(), 0usize), ("b".to_owned(), 0usize)]);
    for _ in 0..AMOUNT * 2 {
        let d = pop1(&f);
        let producer = d.object().meta().name()[..1].to_owned();
        let v: usize = d.object().resource_version().parse().unwrap();
        let prev = last.get_mut(&producer).unwrap();
        assert!(
            v > *prev,
            "got {v} ({producer}) out of order, last was {prev}"
        );
        *prev = v;
    }
    for p in producers {
        p.join().unwrap();
    }
}

#[test]
fn real_fifo_replace_with_delete_delta_in() {
    let old = pod("foo", "1");
    let new = pod("foo", "2");
    let f = RealFifo::new(known(std::slice::from_ref(&old)), None);
    f.delete(DeletedObject::Object(old.clone()));
    f.replace(vec![new.clone()], "");
    assert_eq!(
        f.items(),
        vec![
            Delta::Deleted(DeletedObject::Object(old)),
            Delta::Replaced(new)
        ]
    );
}

#[test]
fn real_fifo_replace_makes_deletions_for_objects_only_in_queue() {
    let obj = || pod("foo", "2");
    let obj_v2 = || pod("foo", "3");
    type Ops = Box<dyn Fn(&RealFifo)>;
    let table: Vec<(&str, Ops, Vec<Delta>)> = vec![
        (
            "Added object should be deleted on Replace",
            Box::new(move |f| {
                f.add(obj());
                f.replace(vec![], "0");
            }),
            vec![Delta::Added(obj()), tomb("foo", "2")],
        ),
        (
            "Deleted object should have only a single Delete",
            Box::new(move |f| {
                f.add(obj());
                f.delete(DeletedObject::Object(obj()));
                f.replace(vec![], "0");
            }),
            vec![
                Delta::Added(obj()),
                Delta::Deleted(DeletedObject::Object(obj())),
            ],
        ),
        (
            "Synced objects should have a single delete",
            Box::new(move |f| {
                f.add(obj());
                f.replace(vec![obj()], "0");
                f.replace(vec![obj()], "0");
                f.replace(vec![], "0");
            }),
            vec![
                Delta::Added(obj()),
                Delta::Replaced(obj()),
                Delta::Replaced(obj()),
                tomb("foo", "2"),
            ],
        ),
        (
            "Added objects should have a single delete on multiple Replaces",
            Box::new(move |f| {
                f.add(obj());
                f.replace(vec![], "0");
                f.replace(vec![], "1");
            }),
            vec![Delta::Added(obj()), tomb("foo", "2")],
        ),
        (
            "Added and deleted and added object should be deleted",
            Box::new(move |f| {
                f.add(obj());
                f.delete(DeletedObject::Object(obj()));
                f.add(obj_v2());
                f.replace(vec![], "0");
            }),
            vec![
                Delta::Added(obj()),
                Delta::Deleted(DeletedObject::Object(obj())),
                Delta::Added(obj_v2()),
                tomb("foo", "3"),
            ],
        ),
        (
            // Wisp's queues have no Bookmark operation (the reflector keeps bookmarks), as
            // client-go's RealFIFO without atomic events ignores them: nothing is queued.
            "Bookmark object should not be added without atomic",
            Box::new(move |f| {
                f.replace(vec![], "0");
                f.replace(vec![], "1");
            }),
            vec![],
        ),
    ];
    for (name, ops, expected) in table {
        let f = RealFifo::new(empty_known(), None);
        ops(&f);
        assert_eq!(pop_all(&f), expected, "{name}");
        assert!(f.is_empty(), "{name}: extra deltas");
    }
}

#[test]
fn real_fifo_add_update() {
    let f = Arc::new(RealFifo::new(empty_known(), None));
    f.add(pod("foo", "10"));
    f.update(pod("foo", "12"));
    f.delete(del("foo", "15"));
    assert_eq!(
        f.items(),
        vec![
            Delta::Added(pod("foo", "10")),
            Delta::Updated(pod("foo", "12")),
            Delta::Deleted(del("foo", "15")),
        ]
    );

    let (tx, rx) = mpsc::channel();
    let consumer = {
        let f = f.clone();
        std::thread::spawn(move || {
            while let Ok(d) = f.pop(|d, _| d.into_deltas().remove(0)) {
                let _ = tx.send(d.object().resource_version().to_owned());
            }
        })
    };
    for want in ["10", "12", "15"] {
        assert_eq!(
            rx.recv_timeout(crate::test_time::patience(Duration::from_secs(5)))
                .unwrap(),
            want
        );
    }
    assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
    assert!(f.is_empty());
    f.close();
    consumer.join().unwrap();
}

#[test]
fn real_fifo_transformer() {
    // The transform appends "x" to the resourceVersion: an object transformed twice would show
    // "xx"; tombstones and syncs must carry the once-transformed object.
    let calls = Arc::new(AtomicUsize::new(0));
    let xfrm: TransformFn = {
        let calls = calls.clone();
        Arc::new(move |o: Arc<Object>| {
            calls.fetch_add(1, Ordering::Relaxed);
            pod(o.meta().name(), &format!("{}x", o.resource_version()))
        })
    };
    let f = RealFifo::new(empty_known(), Some(xfrm));
    f.add(pod("foo", "10"));
    f.add(pod("bar", "11"));
    f.update(pod("foo", "12"));
    f.delete(del("foo", "15"));
    f.replace(vec![], "");
    f.add(pod("bar", "16"));
    f.replace(vec![], "");

    let expected = vec![
        Delta::Added(pod("foo", "10x")),
        Delta::Added(pod("bar", "11x")),
        Delta::Updated(pod("foo", "12x")),
        Delta::Deleted(del("foo", "15x")),
        tomb("bar", "11x"),
        Delta::Added(pod("bar", "16x")),
        tomb("bar", "16x"),
    ];
    assert_eq!(f.items(), expected);
    assert_eq!(calls.load(Ordering::Relaxed), 5);
    assert_eq!(pop_all(&f), expected);
}

#[test]
fn real_fifo_enqueueing_no_lister() {
    let f = RealFifo::new(empty_known(), None);
    f.add(pod("foo", "10"));
    f.update(pod("bar", "15"));
    f.add(pod("qux", "17"));
    f.delete(del("qux", "18"));
    // RealFIFO queues everything, known or not.
    f.delete(del("baz", "20"));
    for want in ["10", "15", "17", "18", "20"] {
        assert_eq!(pop_rv(&f), want);
    }
    assert!(f.is_empty());
}

#[test]
fn real_fifo_enqueueing_with_lister() {
    let f = RealFifo::new(
        known(&[pod("foo", "5"), pod("bar", "6"), pod("baz", "7")]),
        None,
    );
    f.add(pod("foo", "10"));
    f.update(pod("bar", "15"));
    // This delete does enqueue the deletion, because "baz" is known.
    f.delete(del("baz", "20"));
    for want in ["10", "15", "20"] {
        assert_eq!(pop_rv(&f), want);
    }
    assert!(f.is_empty());
}

#[test]
fn real_fifo_add_replace() {
    let f = RealFifo::new(empty_known(), None);
    f.add(pod("foo", "10"));
    f.replace(vec![pod("foo", "15")], "0");
    assert_eq!(pop_rv(&f), "10");
    assert_eq!(pop_rv(&f), "15");
    assert!(f.is_empty(), "item did not get removed");
}

#[test]
fn real_fifo_resync_non_existing() {
    let f = RealFifo::new(known(&[pod("foo", "5")]), None);
    f.delete(del("foo", "10"));
    f.resync();
    let items = f.items();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].kind(), DeltaType::Deleted);
}

#[test]
fn real_fifo_resync() {
    let f = RealFifo::new(known(&[pod("foo", "5")]), None);
    f.resync();
    assert_eq!(f.items(), vec![Delta::Sync(pod("foo", "5"))]);
}

#[test]
fn real_fifo_delete_existing_non_propagated() {
    let f = RealFifo::new(empty_known(), None);
    f.add(pod("foo", "5"));
    f.delete(del("foo", "6"));
    let items = f.items();
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[1].kind(), DeltaType::Deleted);
}

#[test]
fn real_fifo_replace_makes_deletions() {
    let three = || known(&[pod("foo", "5"), pod("bar", "6"), pod("baz", "7")]);

    // With a pre-existing Delete.
    let f = RealFifo::new(three(), None);
    f.delete(del("baz", "10"));
    f.replace(vec![pod("foo", "5")], "0");
    assert_eq!(
        pop_all(&f),
        vec![
            Delta::Deleted(del("baz", "10")),
            tomb("bar", "6"),
            Delta::Replaced(pod("foo", "5")),
        ]
    );

    // Starting with an Add instead of a Delete.
    let f = RealFifo::new(three(), None);
    f.add(pod("baz", "10"));
    f.replace(vec![pod("foo", "5")], "0");
    assert_eq!(
        pop_all(&f),
        vec![
            Delta::Added(pod("baz", "10")),
            tomb("baz", "10"),
            tomb("bar", "6"),
            Delta::Replaced(pod("foo", "5")),
        ]
    );

    // Deleting and recreating the object in the queue, then deleting it by a Replace: the
    // tombstone carries the latest queued object.
    let f = RealFifo::new(three(), None);
    f.delete(del("bar", "6"));
    f.add(pod("bar", "100"));
    f.replace(vec![pod("foo", "5")], "0");
    assert_eq!(
        pop_all(&f),
        vec![
            Delta::Deleted(del("bar", "6")),
            Delta::Added(pod("bar", "100")),
            tomb("bar", "100"),
            tomb("baz", "7"),
            Delta::Replaced(pod("foo", "5")),
        ]
    );

    // Syncing it first, so the delete uses the latest version.
    let f = RealFifo::new(three(), None);
    f.replace(vec![pod("bar", "100"), pod("foo", "5")], "0");
    f.replace(vec![pod("foo", "5")], "0");
    assert_eq!(
        pop_all(&f),
        vec![
            tomb("baz", "7"),
            Delta::Replaced(pod("bar", "100")),
            Delta::Replaced(pod("foo", "5")),
            tomb("bar", "100"),
            Delta::Replaced(pod("foo", "5")),
        ]
    );

    // Without known objects.
    let f = RealFifo::new(empty_known(), None);
    f.add(pod("baz", "10"));
    f.replace(vec![pod("foo", "5")], "0");
    assert_eq!(
        pop_all(&f),
        vec![
            Delta::Added(pod("baz", "10")),
            tomb("baz", "10"),
            Delta::Replaced(pod("foo", "5")),
        ]
    );
}

#[test]
fn real_fifo_replace_makes_deletions_replaced() {
    let f = RealFifo::new(
        known(&[pod("foo", "5"), pod("bar", "6"), pod("baz", "7")]),
        None,
    );
    f.delete(del("baz", "10"));
    f.replace(vec![pod("foo", "6")], "0");
    assert_eq!(
        pop_all(&f),
        vec![
            Delta::Deleted(del("baz", "10")),
            tomb("bar", "6"),
            Delta::Replaced(pod("foo", "6")),
        ]
    );
}

#[test]
fn real_fifo_update_resync_race() {
    let f = RealFifo::new(known(&[pod("foo", "5")]), None);
    f.update(pod("foo", "6"));
    f.resync();
    assert_eq!(pop_all(&f), vec![Delta::Updated(pod("foo", "6"))]);
}

#[test]
fn real_fifo_has_synced_correct_on_deletion() {
    let f = RealFifo::new(
        known(&[pod("foo", "5"), pod("bar", "6"), pod("baz", "7")]),
        None,
    );
    f.replace(vec![pod("foo", "5")], "0");
    for want in [
        tomb("bar", "6"),
        tomb("baz", "7"),
        Delta::Replaced(pod("foo", "5")),
    ] {
        assert!(!f.has_synced());
        let (got, initial) = f
            .pop(|d, initial| (d.into_deltas().remove(0), initial))
            .unwrap();
        assert_eq!(got, want);
        assert!(initial, "expected an initial list item");
    }
    assert!(f.has_synced());
}

#[test]
fn real_fifo_detect_line_jumpers() {
    let f = RealFifo::new(empty_known(), None);
    f.add(pod("foo", "10"));
    f.add(pod("bar", "1"));
    f.add(pod("foo", "11"));
    f.add(pod("foo", "13"));
    f.add(pod("zab", "30"));
    assert_eq!(pop_rv(&f), "10");
    f.add(pod("foo", "14")); // foo does not jump back in line
    for want in ["1", "11", "13", "30", "14"] {
        assert_eq!(pop_rv(&f), want);
    }
}

#[test]
fn real_fifo_key_of() {
    assert_eq!(delta_key(&Delta::Added(pod("A", "1"))), "ns/A");
    assert_eq!(
        delta_key(&Delta::Deleted(DeletedObject::Tombstone(Tombstone {
            key: "B".into(),
            obj: pod("other", "1"),
        }))),
        "B"
    );
    assert_eq!(delta_key(&Delta::Deleted(del("C", "1"))), "ns/C");
}

#[test]
fn real_fifo_has_synced() {
    type Action = fn(&RealFifo);
    let pop: Action = |f| {
        pop1(f);
    };
    let replace_ab: Action = |f| f.replace(vec![pod("a", "1"), pod("b", "2")], "0");
    let cases: Vec<(Vec<Action>, bool)> = vec![
        (vec![], false),
        (vec![|f| f.add(pod("a", "1"))], true),
        (vec![|f| f.replace(vec![], "0")], true),
        (vec![replace_ab], false),
        (vec![replace_ab, pop], false),
        (vec![replace_ab, pop, pop], true),
        // Duplicate keys in a list (a broken API server): every event is delivered, so "a" is
        // popped twice.
        (
            vec![
                |f| f.replace(vec![pod("a", "1"), pod("a", "2")], "0"),
                pop,
                pop,
            ],
            true,
        ),
    ];
    for (i, (actions, want)) in cases.into_iter().enumerate() {
        let f = RealFifo::new(empty_known(), None);
        for a in actions {
            a(&f);
        }
        assert_eq!(f.has_synced(), want, "case {i}");
    }
}

#[test]
fn real_fifo_pop_should_unblock_when_closed() {
    let f = Arc::new(RealFifo::new(known(&[pod("foo", "5")]), None));
    let (tx, rx) = mpsc::channel();
    const JOBS: usize = 10;
    for _ in 0..JOBS {
        let (f, tx) = (f.clone(), tx.clone());
        std::thread::spawn(move || {
            let _ = f.pop(|_, _| ());
            let _ = tx.send(());
        });
    }
    std::thread::sleep(Duration::from_millis(10));
    f.close();
    for _ in 0..JOBS {
        rx.recv_timeout(crate::test_time::patience(Duration::from_millis(500)))
            .expect("Pop returns after Close");
    }
}

#[test]
fn real_fifo_pop_multiple_delta_in_batch() {
    const UNLIMITED: usize = 999_999;
    let o = |n: u8| pod(&format!("foo{n}"), "5");
    type Action = Box<dyn Fn(&RealFifo)>;
    let update = |n: u8| -> Action { Box::new(move |f: &RealFifo| f.update(o(n))) };
    let r = |n: u8| Delta::Replaced(o(n));
    let u = |n: u8| Delta::Updated(o(n));
    type Case = (&'static str, Vec<u8>, Vec<Action>, usize, Vec<Vec<Delta>>);
    let cases: Vec<Case> = vec![
        (
            "non-split: pop unique items should work",
            vec![1, 2, 3],
            vec![],
            UNLIMITED,
            vec![vec![r(1), r(2), r(3)]],
        ),
        (
            "split due to initial list: initial 2 items with 2 updates should have 2 batches",
            vec![1, 2],
            vec![update(3), update(4)],
            2,
            vec![vec![r(1), r(2)], vec![u(3), u(4)]],
        ),
        (
            "split due to non-unique#1: update single item for multiple items should have separate batch",
            vec![1],
            vec![update(1), update(1)],
            UNLIMITED,
            vec![vec![r(1)], vec![u(1)], vec![u(1)]],
        ),
        (
            "split due to non-unique#2: update 3 item for with non-unique item at the end should have separate batch",
            vec![1, 2],
            vec![update(2), update(3)],
            UNLIMITED,
            vec![vec![r(1), r(2)], vec![u(2), u(3)]],
        ),
        (
            "split due to non-unique#3: update 3 item for with non-unique item in the mid should have separate batch",
            vec![1, 2, 3],
            vec![update(2)],
            UNLIMITED,
            vec![vec![r(1), r(2), r(3)], vec![u(2)]],
        ),
        (
            "split due to batch size#1: batching initial list should work",
            vec![1, 2, 3],
            vec![],
            2,
            vec![vec![r(1), r(2)], vec![r(3)]],
        ),
        (
            "split due to batch size#2: batching incoming non-initial deltas should work",
            vec![],
            vec![update(1), update(2), update(3)],
            2,
            vec![vec![u(1), u(2)], vec![u(3)]],
        ),
        (
            "split due to batch size#3: pop 4 mixed initial & non-initial items with 2 batch size should have 3 batch",
            vec![1, 2, 3],
            vec![update(4)],
            2,
            vec![vec![r(1), r(2)], vec![r(3)], vec![u(4)]],
        ),
    ];
    for (name, initial, actions, batch_size, expected) in cases {
        let initial: Vec<Arc<Object>> = initial.into_iter().map(o).collect();
        let f = RealFifo::with_batch_size(known(&initial), None, batch_size);
        f.replace(initial.clone(), "123");
        for a in actions {
            a(&f);
        }
        let mut batches = Vec::new();
        let mut initial_seen = Vec::new();
        while !f.is_empty() {
            let (batch, in_initial) = f.pop_batch(|b, i| (b.into_deltas(), i)).unwrap();
            if in_initial {
                initial_seen.extend(batch.iter().map(|d| d.object().clone()));
            }
            batches.push(batch);
        }
        f.close();
        assert_eq!(batches, expected, "{name}");
        assert_eq!(initial_seen, initial, "{name}: initial-list items");
    }
}

#[test]
fn real_fifo_queue_kind_parses_client_go_names() {
    #[derive(Deserialize)]
    struct C {
        queue: QueueKind,
    }
    let parse = |s: &str| wisp_kinds::yaml::from_str::<C>(s).map(|c| c.queue);
    assert_eq!(parse("queue: realFIFO").unwrap(), QueueKind::RealFifo);
    assert_eq!(parse("queue: deltaFIFO").unwrap(), QueueKind::DeltaFifo);
    assert!(parse("queue: fifo").is_err());
    assert_eq!(QueueKind::default(), QueueKind::RealFifo);
}

/// What an atomic FIFO hands out, one line per item (a Go test's expected `Deltas`).
fn show(p: &Popped) -> Vec<String> {
    match p {
        Popped::Deltas(d) => d
            .iter()
            .map(|d| {
                format!(
                    "{:?} {}@{}",
                    d.kind(),
                    d.object().meta().name(),
                    d.object().resource_version()
                )
            })
            .collect(),
        Popped::ReplacedAll {
            objects,
            resource_version,
        } => vec![format!(
            "ReplacedAll rv={resource_version} [{}]",
            objects
                .iter()
                .map(|o| format!("{}@{}", o.meta().name(), o.resource_version()))
                .collect::<Vec<_>>()
                .join(",")
        )],
        Popped::SyncAll => vec!["SyncAll".into()],
        Popped::Bookmark(rv) => vec![format!("Bookmark rv={rv}")],
    }
}

/// Pops everything queued (`popN(f, len(f.getItems()))`), rendered with [`show`].
fn pop_shown(f: &RealFifo) -> Vec<String> {
    let mut out = Vec::new();
    while !f.is_empty() {
        out.extend(f.pop(|p, _| show(&p)).unwrap());
    }
    out
}

/// client-go `TestRealFIFO_ReplaceAtomic`.
#[test]
fn real_fifo_replace_atomic() {
    let obj = pod("foo", "2");
    type Case<'a> = (&'a str, Box<dyn Fn(&RealFifo) + 'a>, Vec<&'a str>);
    let table: Vec<Case> = vec![
        (
            "Base replace",
            Box::new(|f| f.replace(vec![], "123")),
            vec!["ReplacedAll rv=123 []"],
        ),
        (
            "Added object exists in deltas on Atomic Replace",
            Box::new(|f| {
                f.add(obj.clone());
                f.replace(vec![], "123");
            }),
            vec!["Added foo@2", "ReplacedAll rv=123 []"],
        ),
        (
            "Multiple replaces run in order",
            Box::new(|f| {
                f.add(obj.clone());
                f.replace(vec![obj.clone()], "10");
                f.replace(vec![obj.clone()], "20");
                f.replace(vec![], "56");
            }),
            vec![
                "Added foo@2",
                "ReplacedAll rv=10 [foo@2]",
                "ReplacedAll rv=20 [foo@2]",
                "ReplacedAll rv=56 []",
            ],
        ),
        (
            "Bookmark object should not be included in Replace",
            Box::new(|f| {
                f.bookmark("123");
                f.replace(vec![], "1234");
            }),
            vec!["Bookmark rv=123", "ReplacedAll rv=1234 []"],
        ),
    ];
    for (name, ops, want) in table {
        let f = RealFifo::atomic(None);
        ops(&f);
        assert_eq!(pop_shown(&f), want, "{name}");
        assert!(f.is_empty(), "{name}: no extra items");
    }
}

/// client-go `TestRealFIFOW_ReplaceMakesDeletionsForObjectsOnlyInQueue`, its case "Bookmark
/// object should not be added without atomic".
#[test]
fn real_fifo_bookmark_is_not_queued_without_atomic() {
    let f = RealFifo::new(empty_known(), None);
    f.bookmark("123");
    f.replace(vec![], "0");
    f.replace(vec![], "1");
    assert!(f.is_empty(), "{:?}", f.items());
}

/// client-go `TestRealFIFO_ReplaceAtomicPop`: an add, then a replace: two pops, the add then
/// the whole list, nothing more.
#[test]
fn real_fifo_replace_atomic_pop() {
    let f = Arc::new(RealFifo::atomic(None));
    f.add(pod("foo", "10"));
    f.replace(vec![pod("foo", "15")], "20");
    let (tx, rx) = mpsc::channel();
    let consumer = {
        let f = f.clone();
        std::thread::spawn(move || {
            while let Ok(shown) = f.pop(|p, _| show(&p)) {
                tx.send(shown).unwrap();
            }
        })
    };
    let t = Duration::from_secs(10);
    assert_eq!(rx.recv_timeout(t).unwrap(), ["Added foo@10"]);
    assert_eq!(rx.recv_timeout(t).unwrap(), ["ReplacedAll rv=20 [foo@15]"]);
    assert!(
        rx.recv_timeout(Duration::from_millis(50)).is_err(),
        "no second value"
    );
    assert!(f.is_empty(), "item did not get removed");
    f.close();
    consumer.join().unwrap();
}

/// client-go `TestRealFIFO_ResyncAtomic`.
#[test]
fn real_fifo_resync_atomic() {
    let f = RealFifo::atomic(None);
    f.resync();
    assert_eq!(pop_shown(&f), ["SyncAll"], "Base resync");
    f.add(pod("foo", "2"));
    f.resync();
    assert_eq!(
        pop_shown(&f),
        ["Added foo@2", "SyncAll"],
        "Added object exists in deltas on Atomic Resync"
    );
}

/// client-go 1.36's `UnlockWhileProcessingFIFO`: an atomic FIFO lets the reflector queue while
/// the process loop handles a batch (the non-atomic one holds its lock, as client-go does).
#[test]
fn an_atomic_fifo_takes_new_items_while_a_batch_is_processed() {
    for (atomic, f) in [
        (true, Arc::new(RealFifo::atomic(None))),
        (false, Arc::new(RealFifo::new(empty_known(), None))),
    ] {
        f.add(pod("a", "1"));
        let producer_done = Arc::new(AtomicUsize::new(0));
        let added_while_processing = f
            .pop(|_, _| {
                let (f2, done) = (f.clone(), producer_done.clone());
                let producer = std::thread::spawn(move || {
                    f2.add(pod("b", "2"));
                    done.store(1, Ordering::SeqCst);
                });
                std::thread::sleep(Duration::from_millis(100));
                let added = producer_done.load(Ordering::SeqCst) == 1;
                (added, producer)
            })
            .unwrap();
        let (added, producer) = added_while_processing;
        producer.join().unwrap();
        assert_eq!(added, atomic, "atomic {atomic}");
        assert_eq!(pop_shown(&f), ["Added b@2"]);
    }
}

/// An atomic FIFO's initial population is the `ReplacedAll` (and what came before it): synced
/// once that is processed.
#[test]
fn an_atomic_fifo_is_synced_once_its_first_list_is_processed() {
    let f = RealFifo::atomic(None);
    f.replace(vec![pod("a", "1"), pod("b", "2")], "5");
    assert!(!f.has_synced());
    let initial = f
        .pop(|p, initial| {
            assert!(matches!(p, Popped::ReplacedAll { .. }));
            initial
        })
        .unwrap();
    assert!(initial, "the first list is the initial list");
    assert!(f.has_synced());
}
