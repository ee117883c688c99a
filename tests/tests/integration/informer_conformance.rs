//! Shared informer behaviour checked against client-go's (`tools/cache`), through Wisp's public
//! API: test names follow client-go's cases where one exists.

use crate::common;
use crate::common::patience;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use wisp_host::informer::handler::Recorder;
use wisp_host::informer::handler::{Delivery, EventHandler};
use wisp_host::informer::indexer::{IndexFunc, index_by_label};
use wisp_host::informer::listener::{Discarded, Overflow, OverflowObserver, QueueBound};
use wisp_host::informer::shared_informer::{InformerConfig, InformerError, OnPanic, wait_for};
use wisp_host::informer::{HandlerOptions, Object, SharedInformer};
use wisp_host::source::memory::MemorySource;

const T: Duration = Duration::from_secs(10);

/// How long a failed informer's `run` may take to return. Generous: with RUST_BACKTRACE set, the
/// panic hook symbolises a backtrace first (seconds in a debug build, on the process loop's
/// thread, with the FIFO's lock held, which stalls the test's single-threaded runtime too).
const FAIL: Duration = Duration::from_secs(120);

/// Default settings over the queue under test: `WISP_TEST_QUEUE=deltaFIFO` runs this suite over
/// the legacy DeltaFIFO (`cargo xtask test` runs it both ways).
fn config() -> InformerConfig {
    InformerConfig {
        queue: common::queue_under_test(),
        ..InformerConfig::default()
    }
}

fn pod(name: &str, labels: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "ns", "labels": labels}})
}

fn names(mut v: Vec<Arc<Object>>) -> Vec<String> {
    v.sort_by(|a, b| a.meta().name().cmp(b.meta().name()));
    v.into_iter().map(|o| o.meta().name().to_owned()).collect()
}

type Run = tokio::task::JoinHandle<Result<(), InformerError>>;

/// Starts the informer; the sender stops it.
fn start(inf: &Arc<SharedInformer>) -> (tokio::sync::oneshot::Sender<()>, Run) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(inf.clone().run(async {
        let _ = rx.await;
    }));
    (tx, run)
}

/// client-go `TestIndexer`: indexes may be added to a running informer and are usable at once
/// over the objects already cached; a stopped informer refuses them.
#[tokio::test]
async fn indexer_added_after_start_indexes_existing_items() {
    let src = MemorySource::new();
    src.apply(pod("pod1", json!({"a": "a-val", "b": "b-val1"})))
        .unwrap();
    src.apply(pod("pod2", json!({"b": "b-val2"}))).unwrap();
    let inf = SharedInformer::new("pods", Arc::new(src.clone()), config());
    let label_keys: IndexFunc =
        Arc::new(|o: &Object| o.meta().labels().map(|(k, _)| k.to_owned()).collect());
    inf.add_indexers([("labels".to_owned(), label_keys.clone())])
        .unwrap();
    let (stop, run) = start(&inf);
    assert!(wait_for(patience(T), || inf.has_synced()).await);
    assert_eq!(
        names(inf.cache().by_index("labels", "a").unwrap()),
        ["pod1"]
    );

    src.apply(pod("pod3", json!({"a": "a-val2"}))).unwrap();
    assert!(
        wait_for(patience(T), || inf
            .cache()
            .by_index("labels", "a")
            .unwrap()
            .len()
            == 2)
        .await,
        "adding an item later is fine as well"
    );

    inf.add_indexers([
        ("labels-again".to_owned(), label_keys),
        ("by-a".to_owned(), index_by_label("a")),
    ])
    .expect("adding an index to a running informer is fine");
    assert_eq!(
        names(inf.cache().by_index("labels-again", "a").unwrap()),
        ["pod1", "pod3"],
        "immediately available"
    );
    assert_eq!(
        names(inf.cache().by_index("by-a", "a-val2").unwrap()),
        ["pod3"]
    );
    let mut values = inf.cache().list_index_values("labels-again").unwrap();
    values.sort();
    assert_eq!(values, ["a", "b"]);
    src.apply(pod("pod4", json!({"a": "x"}))).unwrap();
    assert!(
        wait_for(patience(T), || inf
            .cache()
            .by_index("by-a", "x")
            .unwrap()
            .len()
            == 1)
        .await
    );

    let _ = stop.send(());
    run.await.unwrap().unwrap();
    assert!(matches!(
        inf.add_indexers([("late".to_owned(), index_by_label("z"))]),
        Err(InformerError::Stopped(_))
    ));
}

/// Asserts that a panic in the informer's own pipeline fails the informer visibly: `run` returns
/// an error without being asked to stop, readiness (informer and handler) turns false, the
/// panic is counted.
async fn fails_visibly(inf: &Arc<SharedInformer>, src: &MemorySource) {
    let rec = Recorder::new();
    let reg = inf
        .add_event_handler("h", Box::new(rec.clone()), Duration::ZERO)
        .unwrap();
    let (_stop, run) = start(inf);
    assert!(wait_for(patience(T), || reg.has_synced()).await);
    src.apply(pod("boom", json!({}))).unwrap();
    let out = tokio::time::timeout(patience(FAIL), run)
        .await
        .expect("run returns after the panic, without a shutdown")
        .expect("run does not panic");
    match out {
        Err(InformerError::Panicked { informer, detail }) => {
            assert_eq!(informer, "pods");
            assert!(detail.contains("boom!"), "{detail}");
        }
        other => panic!("expected a panic error, got {other:?}"),
    }
    assert!(!inf.has_synced(), "readiness fails");
    assert!(!reg.has_synced());
    assert_eq!(inf.stats().panics, 1);
    assert!(inf.failure().is_some_and(|f| f.contains("boom!")));
}

/// A panicking index function used to kill the process loop silently (the queue grew, the
/// cache froze, `run` never returned).
#[tokio::test]
async fn a_panicking_index_function_fails_the_informer_visibly() {
    let src = MemorySource::new();
    src.apply(pod("fine", json!({}))).unwrap();
    let inf = SharedInformer::new("pods", Arc::new(src.clone()), config());
    let f: IndexFunc = Arc::new(|o: &Object| {
        if o.meta().name() == "boom" {
            panic!("boom!");
        }
        Vec::new()
    });
    inf.add_indexers([("bad".to_owned(), f)]).unwrap();
    fails_visibly(&inf, &src).await;
}

/// A panicking transform used to unwind through the reflector: `run` panicked and left the
/// process loop and the listeners behind.
#[tokio::test]
async fn a_panicking_transform_fails_the_informer_visibly() {
    let src = MemorySource::new();
    src.apply(pod("fine", json!({}))).unwrap();
    let config = InformerConfig {
        transform: Some(Arc::new(|o: Arc<Object>| {
            if o.meta().name() == "boom" {
                panic!("boom!");
            }
            o
        })),
        ..config()
    };
    let inf = SharedInformer::new("pods", Arc::new(src.clone()), config);
    fails_visibly(&inf, &src).await;
}

/// A handler's overflow observer runs on the process loop (under the listener's queue lock); a
/// panic in it fails the informer the same way, instead of killing the process loop.
#[tokio::test]
async fn a_panicking_overflow_observer_fails_the_informer_visibly() {
    struct Panics;
    impl OverflowObserver for Panics {
        fn overflowed(&self, _: Discarded) {
            panic!("boom!");
        }
    }
    struct Slow;
    impl EventHandler for Slow {
        fn handle(&mut self, _: &[Delivery]) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let src = MemorySource::new();
    for i in 0..5 {
        src.apply(pod(&format!("p{i}"), json!({}))).unwrap();
    }
    let inf = SharedInformer::new("pods", Arc::new(src.clone()), config());
    let options = HandlerOptions {
        queue: QueueBound::bounded(1, Overflow::DropNewest),
        overflow: Some(Arc::new(Panics)),
        ..HandlerOptions::default()
    };
    let reg = inf
        .add_event_handler_with_options("slow", Box::new(Slow), options)
        .unwrap();
    let (_stop, run) = start(&inf);
    let out = tokio::time::timeout(patience(FAIL), run)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(&out, Err(InformerError::Panicked { detail, .. }) if detail.contains("boom!")),
        "{out:?}"
    );
    assert!(!inf.has_synced() && !reg.has_synced());
    assert_eq!(inf.stats().panics, 1);
}

/// Restarts after 20 ms, doubling to 1 s.
const QUICK_RESTART: OnPanic = OnPanic::Restart {
    initial: Duration::from_millis(20),
    max: Duration::from_secs(1),
};

/// Panics the first time it sees an object named `boom`, then never again.
fn panics_once() -> impl Fn(&Object) -> bool + Send + Sync + 'static {
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(true));
    move |o: &Object| {
        o.meta().name() == "boom" && armed.swap(false, std::sync::atomic::Ordering::SeqCst)
    }
}

/// With [`OnPanic::Restart`] a failed informer comes back by itself: not ready meanwhile, then a
/// new list reconciles its cache and listeners (the object whose handling panicked reaches
/// them as an add), and it goes on following changes; `run` keeps running.
async fn restarts_and_recovers(inf: &Arc<SharedInformer>, src: &MemorySource) {
    let rec = Recorder::new();
    let reg = inf
        .add_event_handler("h", Box::new(rec.clone()), Duration::ZERO)
        .unwrap();
    let (_stop, run) = start(inf);
    assert!(wait_for(patience(T), || reg.has_synced()).await);
    src.apply(pod("boom", json!({}))).unwrap();
    assert!(
        wait_for(patience(FAIL), || inf.stats().restarts == 1).await,
        "restarted"
    );
    assert_eq!(inf.stats().panics, 1);
    src.apply(pod("after", json!({}))).unwrap();
    assert!(
        wait_for(patience(T), || {
            inf.has_synced() && names(inf.cache().list()) == ["after", "boom", "fine"]
        })
        .await,
        "ready again, with every object: {:?}",
        names(inf.cache().list())
    );
    assert!(wait_for(patience(T), || reg.has_synced()).await);
    assert!(inf.failure().is_none());
    assert!(!run.is_finished(), "run goes on");
    // Every object reached the handler exactly once as an add; the restart's list brought
    // `fine` again only as a resync.
    let added: Vec<String> = rec
        .deliveries()
        .iter()
        .filter_map(|d| match &d.notification {
            wisp_host::informer::Notification::Add { obj, .. } => {
                Some(obj.meta().name().to_owned())
            }
            _ => None,
        })
        .collect();
    let mut sorted = added.clone();
    sorted.sort();
    assert_eq!(sorted, ["after", "boom", "fine"], "{added:?}");
}

#[tokio::test]
async fn a_panicking_index_function_restarts_the_informer_when_asked_to() {
    let src = MemorySource::new();
    src.apply(pod("fine", json!({}))).unwrap();
    let config = InformerConfig {
        on_panic: QUICK_RESTART,
        ..config()
    };
    let inf = SharedInformer::new("pods", Arc::new(src.clone()), config);
    let boom = panics_once();
    let f: IndexFunc = Arc::new(move |o: &Object| {
        if boom(o) {
            panic!("boom!");
        }
        vec![o.meta().name().to_owned()]
    });
    inf.add_indexers([("by-name".to_owned(), f)]).unwrap();
    restarts_and_recovers(&inf, &src).await;
    assert_eq!(
        names(inf.cache().by_index("by-name", "boom").unwrap()),
        ["boom"],
        "indexed after the restart"
    );
}

#[tokio::test]
async fn a_panicking_transform_restarts_the_informer_when_asked_to() {
    let src = MemorySource::new();
    src.apply(pod("fine", json!({}))).unwrap();
    let boom = panics_once();
    let config = InformerConfig {
        transform: Some(Arc::new(move |o: Arc<Object>| {
            if boom(&o) {
                panic!("boom!");
            }
            o
        })),
        on_panic: QUICK_RESTART,
        ..config()
    };
    let inf = SharedInformer::new("pods", Arc::new(src.clone()), config);
    restarts_and_recovers(&inf, &src).await;
}
