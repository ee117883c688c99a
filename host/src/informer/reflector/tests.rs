//! Reflector unit tests with a scripted source (the protocol-level tests run against the test
//! API server in `tests/tests/integration/reflector.rs`). Time is paused: backoffs elapse instantly.

use std::collections::VecDeque;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::*;
use crate::informer::backoff::Jitter;
use crate::informer::delta_fifo::DeltaFifo;
use crate::informer::indexer::Indexer;
use crate::informer::lister_watcher::{ListOptions, ListPage};
use crate::informer::object::test_util::obj;

type WatchScript = Result<Vec<Result<WatchEvent, SourceError>>, SourceError>;

#[derive(Default)]
struct Script {
    lists: VecDeque<Result<ListPage, SourceError>>,
    watches: VecDeque<WatchScript>,
    list_calls: Vec<ListOptions>,
    watch_calls: Vec<WatchOptions>,
    watch_times: Vec<Instant>,
}

#[derive(Clone, Default)]
struct Scripted(Arc<Mutex<Script>>);

impl Scripted {
    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.0.lock().unwrap()
    }
}

impl ListerWatcher for Scripted {
    fn list(&self, opts: ListOptions) -> BoxFuture<'_, Result<ListPage, SourceError>> {
        let mut s = self.lock();
        s.list_calls.push(opts);
        let r = s.lists.pop_front().unwrap_or_else(|| {
            Ok(ListPage {
                resource_version: "99".into(),
                ..Default::default()
            })
        });
        async move { r }.boxed()
    }

    fn watch(&self, opts: WatchOptions) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        let mut s = self.lock();
        s.watch_calls.push(opts);
        s.watch_times.push(Instant::now());
        let r = match s.watches.pop_front() {
            Some(Ok(events)) => Ok(futures::stream::iter(events).boxed()),
            Some(Err(e)) => Err(e),
            // Out of script: a watch that never ends.
            None => Ok(futures::stream::pending().boxed()),
        };
        async move { r }.boxed()
    }

    fn describe(&self) -> String {
        "scripted".into()
    }
}

fn page(rv: &str, names: &[&str]) -> Result<ListPage, SourceError> {
    Ok(ListPage {
        resource_version: rv.into(),
        continue_token: None,
        items: names.iter().map(|n| obj(Some("ns"), n, rv)).collect(),
    })
}

fn added(name: &str, rv: &str) -> Result<WatchEvent, SourceError> {
    Ok(WatchEvent::Added(obj(Some("ns"), name, rv)))
}

/// The default settings with a plain list (the scripted source does not stream lists).
fn list_config() -> ReflectorConfig {
    ReflectorConfig {
        use_watch_list: false,
        ..ReflectorConfig::default()
    }
}

async fn run_for(lw: &Scripted, fifo: Arc<DeltaFifo>, d: Duration) {
    let r = Reflector::new(
        "test",
        Arc::new(lw.clone()),
        fifo,
        list_config(),
        Duration::ZERO,
        None,
    );
    r.run(tokio::time::sleep(d)).await;
}

fn fifo() -> Arc<DeltaFifo> {
    Arc::new(DeltaFifo::new(Some(Indexer::new().cache()), None))
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_server_at_watch_start_backs_off_and_rewatches_without_relist() {
    let lw = Scripted::default();
    lw.lock().lists.push_back(page("10", &["a"]));
    for _ in 0..3 {
        lw.lock()
            .watches
            .push_back(Err(SourceError::Connect("connection refused".into())));
    }
    run_for(&lw, fifo(), Duration::from_secs(60)).await;
    let s = lw.lock();
    assert_eq!(s.list_calls.len(), 1);
    assert_eq!(s.watch_calls.len(), 4);
    assert!(s.watch_calls.iter().all(|w| w.resource_version == "10"));
}

#[tokio::test(start_paused = true)]
async fn an_internal_error_event_in_the_stream_rewatches_from_the_last_version() {
    let lw = Scripted::default();
    lw.lock().lists.push_back(page("10", &["a"]));
    let internal = SourceError::Api {
        code: 500,
        reason: "InternalError".into(),
        message: "etcd hiccup".into(),
    };
    lw.lock()
        .watches
        .push_back(Ok(vec![added("b", "11"), Ok(WatchEvent::Error(internal))]));
    run_for(&lw, fifo(), Duration::from_secs(60)).await;
    let s = lw.lock();
    assert_eq!(s.list_calls.len(), 1, "no relist within the retry window");
    assert_eq!(s.watch_calls[1].resource_version, "11");
}

#[tokio::test(start_paused = true)]
async fn with_internal_error_retry_off_an_internal_error_relists() {
    let lw = Scripted::default();
    lw.lock().lists.push_back(page("10", &["a"]));
    let internal = SourceError::Api {
        code: 500,
        reason: "InternalError".into(),
        message: "x".into(),
    };
    lw.lock()
        .watches
        .push_back(Ok(vec![added("b", "11"), Ok(WatchEvent::Error(internal))]));
    let config = ReflectorConfig {
        max_internal_error_retry: Duration::ZERO,
        ..list_config()
    };
    let r = Reflector::new(
        "test",
        Arc::new(lw.clone()),
        fifo(),
        config,
        Duration::ZERO,
        None,
    );
    r.run(tokio::time::sleep(Duration::from_secs(60))).await;
    let s = lw.lock();
    assert_eq!(s.list_calls.len(), 2);
    assert_eq!(
        s.list_calls[1].resource_version, "11",
        "relist from the last synced version"
    );
}

#[tokio::test(start_paused = true)]
async fn relists_are_spaced_by_a_growing_backoff() {
    let lw = Scripted::default();
    for _ in 0..5 {
        lw.lock().lists.push_back(Err(SourceError::Api {
            code: 403,
            reason: "Forbidden".into(),
            message: "no".into(),
        }));
    }
    let start = Instant::now();
    let times = Arc::new(Mutex::new(Vec::new()));
    struct Timed(Scripted, Arc<Mutex<Vec<Duration>>>, Instant);
    impl ListerWatcher for Timed {
        fn list(&self, o: ListOptions) -> BoxFuture<'_, Result<ListPage, SourceError>> {
            self.1.lock().unwrap().push(self.2.elapsed());
            self.0.list(o)
        }
        fn watch(&self, o: WatchOptions) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
            self.0.watch(o)
        }
        fn describe(&self) -> String {
            "timed".into()
        }
    }
    let config = ReflectorConfig {
        backoff: BackoffConfig {
            jitter: Jitter::None,
            ..Default::default()
        },
        ..list_config()
    };
    let r = Reflector::new(
        "t",
        Arc::new(Timed(lw.clone(), times.clone(), start)),
        fifo(),
        config,
        Duration::ZERO,
        None,
    );
    r.run(tokio::time::sleep(Duration::from_secs(30))).await;
    let t = times.lock().unwrap().clone();
    let gaps: Vec<u64> = t
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis() as u64)
        .collect();
    assert_eq!(&gaps[..4], [800, 1600, 3200, 6400]);
}

#[tokio::test(start_paused = true)]
async fn an_expired_first_page_is_retried_once_at_the_latest_version() {
    let lw = Scripted::default();
    lw.lock()
        .lists
        .push_back(Err(SourceError::Expired("too old".into())));
    lw.lock().lists.push_back(page("20", &["a", "b"]));
    let f = fifo();
    run_for(&lw, f.clone(), Duration::from_secs(1)).await;
    let rvs: Vec<String> = lw
        .lock()
        .list_calls
        .iter()
        .map(|l| l.resource_version.clone())
        .collect();
    assert_eq!(rvs, ["0", ""]);
    assert_eq!(f.len(), 2);
    assert_eq!(lw.lock().watch_calls[0].resource_version, "20");
}

fn internal_error() -> SourceError {
    SourceError::Api {
        code: 500,
        reason: "InternalError".into(),
        message: "etcdserver: no leader".into(),
    }
}

/// client-go TestRetryWithDeadline: (clock step, error, want retry) per step.
#[tokio::test(start_paused = true)]
async fn retry_with_deadline() {
    let internal = Some(internal_error());
    let other = Some(SourceError::Api {
        code: 403,
        reason: "Forbidden".into(),
        message: "some other error".into(),
    });
    let s = Duration::from_secs;
    type Step = (Duration, Option<SourceError>, bool);
    let cases: Vec<(&str, Duration, Vec<Step>)> = vec![
        (
            "never retry when duration is zero",
            Duration::ZERO,
            vec![
                (s(1), None, false),
                (s(0), internal.clone(), false),
                (s(1), other.clone(), false),
            ],
        ),
        (
            "retry when internal error happens only within duration",
            s(1),
            vec![
                (s(1), internal.clone(), true),
                (s(1), internal.clone(), true),
                (s(1), internal.clone(), false),
            ],
        ),
        (
            "don't retry when other error happens",
            s(1),
            vec![(s(1), other.clone(), false)],
        ),
        (
            "ignore other errors for retries",
            s(1),
            vec![
                (s(1), internal.clone(), true),
                (s(0), other.clone(), true),
                (s(1), internal.clone(), true),
            ],
        ),
    ];
    for (name, max, steps) in cases {
        let mut retry = InternalErrorRetry::new(max, s(30));
        for (i, (step, err, want)) in steps.into_iter().enumerate() {
            tokio::time::advance(step).await;
            retry.after(err.as_ref());
            assert_eq!(retry.should_retry(), want, "{name}: step {i}");
        }
    }
}

/// A source whose every watch sends a 500 ERROR event after a second (after a minute and a
/// second for watch number `rewind`), as client-go TestRetryInternalError's fake clock does.
struct FailingWatches {
    watches: Arc<std::sync::atomic::AtomicUsize>,
    rewind: usize,
}

impl ListerWatcher for FailingWatches {
    fn list(&self, _: ListOptions) -> BoxFuture<'_, Result<ListPage, SourceError>> {
        async { page("1", &[]) }.boxed()
    }

    fn watch(&self, _: WatchOptions) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        let n = self.watches.fetch_add(1, Ordering::SeqCst) + 1;
        let wait = if n == self.rewind {
            Duration::from_secs(61)
        } else {
            Duration::from_secs(1)
        };
        let stream = futures::stream::once(async move {
            tokio::time::sleep(wait).await;
            Ok(WatchEvent::Error(internal_error()))
        });
        async move { Ok(stream.boxed()) }.boxed()
    }

    fn describe(&self) -> String {
        "failing watches".into()
    }
}

/// client-go TestRetryInternalError: (max retry duration, rewind watch, retries wanted). The
/// backoff is zero here, as client-go re-watches at once after an internal error.
#[tokio::test(start_paused = true)]
async fn retry_internal_error() {
    let cases = [
        ("retries off", Duration::ZERO, 0, 0),
        ("retries on, all calls fail", Duration::from_secs(30), 0, 31),
        (
            "retries on, one call successful",
            Duration::from_secs(30),
            10,
            40,
        ),
    ];
    for (name, max, rewind, want) in cases {
        let watches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let config = ReflectorConfig {
            max_internal_error_retry: max,
            backoff: BackoffConfig {
                initial: Duration::ZERO,
                max: Duration::ZERO,
                jitter: Jitter::None,
                ..BackoffConfig::default()
            },
            ..list_config()
        };
        let lw = FailingWatches {
            watches: watches.clone(),
            rewind,
        };
        let mut r = Reflector::new("t", Arc::new(lw), fifo(), config, Duration::ZERO, None);
        assert!(r.list_and_watch().await.is_err(), "{name}");
        assert_eq!(watches.load(Ordering::SeqCst) - 1, want, "{name}: retries");
    }
}

#[tokio::test(start_paused = true)]
async fn internal_error_rewatches_back_off() {
    let lw = Scripted::default();
    lw.lock().lists.push_back(page("10", &["a"]));
    for _ in 0..4 {
        lw.lock()
            .watches
            .push_back(Ok(vec![Ok(WatchEvent::Error(internal_error()))]));
    }
    let config = ReflectorConfig {
        backoff: BackoffConfig {
            jitter: Jitter::None,
            ..BackoffConfig::default()
        },
        ..list_config()
    };
    let r = Reflector::new(
        "t",
        Arc::new(lw.clone()),
        fifo(),
        config,
        Duration::ZERO,
        None,
    );
    r.run(tokio::time::sleep(Duration::from_secs(29))).await;
    let s = lw.lock();
    assert_eq!(
        s.list_calls.len(),
        1,
        "re-watches within the window, no relist"
    );
    let gaps: Vec<u64> = s
        .watch_times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_millis() as u64)
        .collect();
    assert_eq!(gaps, [800, 1600, 3200, 6400]);
}

fn counting_resync() -> (Arc<std::sync::atomic::AtomicUsize>, ShouldResync) {
    let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let hook = n.clone();
    let f: ShouldResync = Arc::new(move || {
        hook.fetch_add(1, Ordering::SeqCst);
        false
    });
    (n, f)
}

/// client-go TestReflectorResync: while the watch is up, the resync hook is consulted every
/// period.
#[tokio::test(start_paused = true)]
async fn reflector_resync() {
    let lw = Scripted::default();
    lw.lock().lists.push_back(page("10", &["a"]));
    let (calls, hook) = counting_resync();
    let r = Reflector::new(
        "t",
        Arc::new(lw.clone()),
        fifo(),
        list_config(),
        Duration::from_secs(1),
        Some(hook),
    );
    r.run(tokio::time::sleep(Duration::from_millis(5500))).await;
    assert_eq!(calls.load(Ordering::SeqCst), 5);
}

/// client-go runs the resync timer only from a successful list to the end of the watch: not
/// while lists fail.
#[tokio::test(start_paused = true)]
async fn resync_does_not_run_during_an_outage() {
    let lw = Scripted::default();
    lw.lock().lists.push_back(page("10", &["a"]));
    let forbidden = SourceError::Api {
        code: 403,
        reason: "Forbidden".into(),
        message: "no".into(),
    };
    lw.lock().watches.push_back(Err(forbidden.clone()));
    for _ in 0..100 {
        lw.lock().lists.push_back(Err(forbidden.clone()));
    }
    let (calls, hook) = counting_resync();
    let r = Reflector::new(
        "t",
        Arc::new(lw.clone()),
        fifo(),
        list_config(),
        Duration::from_secs(1),
        Some(hook),
    );
    r.run(tokio::time::sleep(Duration::from_secs(60))).await;
    assert!(lw.lock().list_calls.len() > 3, "the outage lasted");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "no resync during the outage"
    );
}

#[test]
fn streaming_list_is_on_by_default() {
    assert!(ReflectorConfig::default().use_watch_list);
}

/// client-go's watchList: a 429 backs off and streams again, with no list.
#[tokio::test(start_paused = true)]
async fn watch_list_backs_off_and_retries_on_too_many_requests() {
    let lw = Scripted::default();
    lw.lock()
        .watches
        .push_back(Err(SourceError::TooManyRequests {
            message: "slow down".into(),
            retry_after: None,
        }));
    lw.lock().watches.push_back(Ok(vec![
        added("a", "5"),
        Ok(WatchEvent::Bookmark {
            resource_version: "5".into(),
            initial_events_end: true,
        }),
    ]));
    let f = fifo();
    let r = Reflector::new(
        "t",
        Arc::new(lw.clone()),
        f.clone(),
        ReflectorConfig::default(),
        Duration::ZERO,
        None,
    );
    r.run(tokio::time::sleep(Duration::from_secs(10))).await;
    let s = lw.lock();
    assert!(s.list_calls.is_empty(), "no list: {:?}", s.list_calls);
    assert!(s.watch_calls[..2].iter().all(|w| w.send_initial_events));
    assert_eq!(f.len(), 1);
}

fn paged(rv: &str, names: &[&str], next: Option<&str>) -> Result<ListPage, SourceError> {
    Ok(ListPage {
        continue_token: next.map(Into::into),
        ..page(rv, names)?
    })
}

fn pages_of_4() -> ReflectorConfig {
    ReflectorConfig {
        page_size: NonZeroU32::new(4),
        ..list_config()
    }
}

/// (resourceVersion, limit, continue) of each list request.
fn list_requests(lw: &Scripted) -> Vec<(String, Option<u32>, Option<String>)> {
    lw.lock()
        .list_calls
        .iter()
        .map(|l| {
            (
                l.resource_version.clone(),
                l.limit,
                l.continue_token.clone(),
            )
        })
        .collect()
}

fn req(rv: &str, limit: Option<u32>, cont: Option<&str>) -> (String, Option<u32>, Option<String>) {
    (rv.into(), limit, cont.map(Into::into))
}

/// client-go TestReflectorWatchListPageSize: with a page size set, a relist at an exact
/// resourceVersion is paged too (client-go skips paging there only when it chooses by itself).
#[tokio::test(start_paused = true)]
async fn an_explicit_page_size_pages_a_relist_at_an_exact_resource_version() {
    let lw = Scripted::default();
    lw.lock().lists.extend([
        paged("10", &["p0", "p1", "p2", "p3"], Some("C1")),
        paged("10", &["p4", "p5", "p6", "p7"], Some("C2")),
        paged("10", &["p8", "p9"], None),
    ]);
    let f = fifo();
    let mut r = Reflector::new(
        "t",
        Arc::new(lw.clone()),
        f.clone(),
        pages_of_4(),
        Duration::ZERO,
        None,
    );
    r.set_last_sync("10".into());
    r.list().await.unwrap();
    assert_eq!(
        list_requests(&lw),
        [
            req("10", Some(4), None),
            req("", Some(4), Some("C1")),
            req("", Some(4), Some("C2"))
        ]
    );
    assert_eq!(f.len(), 10);
}

/// Without a page size, a relist at an exact resourceVersion goes out unpaged (the watch cache
/// serves it), and the retry at "" after an Expired one too (client-go keeps its pager's size).
#[tokio::test(start_paused = true)]
async fn without_a_page_size_a_relist_at_an_exact_resource_version_is_not_paged() {
    let lw = Scripted::default();
    lw.lock().lists.extend([
        page("10", &["a"]),
        Err(SourceError::Expired("too old".into())),
        page("12", &["a"]),
    ]);
    let mut r = Reflector::new(
        "t",
        Arc::new(lw.clone()),
        fifo(),
        list_config(),
        Duration::ZERO,
        None,
    );
    r.list().await.unwrap();
    r.list().await.unwrap();
    assert_eq!(
        list_requests(&lw),
        [
            req("0", Some(AUTO_PAGE_SIZE), None),
            req("10", None, None),
            req("", None, None)
        ]
    );
}

/// client-go TestReflectorFullListIfExpired: with a page size of 4, the relist at "10" is
/// paged; its expired continuation falls back to one unpaged list at "10".
#[tokio::test(start_paused = true)]
async fn reflector_full_list_if_expired() {
    let lw = Scripted::default();
    let eight = ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"];
    lw.lock().lists.extend([
        page("10", &eight[..4]),
        paged("11", &eight[..4], Some("C1")),
        Err(SourceError::Expired(
            "The resourceVersion for the provided watch is too old.".into(),
        )),
        page("11", &eight),
    ]);
    let f = fifo();
    let mut r = Reflector::new(
        "t",
        Arc::new(lw.clone()),
        f.clone(),
        pages_of_4(),
        Duration::ZERO,
        None,
    );
    r.list().await.unwrap();
    assert_eq!(f.len(), 4);
    r.list().await.unwrap();
    assert_eq!(
        list_requests(&lw),
        [
            req("0", Some(4), None),
            req("10", Some(4), None),
            req("", Some(4), Some("C1")),
            req("10", None, None)
        ]
    );
    assert_eq!(f.len(), 8);
    assert_eq!(r.stats().last_sync_resource_version(), "11");
}

/// Applies every queued delta to `cache`, as the informer's controller does.
fn drain(f: &DeltaFifo, cache: &Indexer) {
    while !f.is_empty() {
        f.pop(|deltas, _| {
            for d in deltas {
                match d {
                    crate::informer::Delta::Deleted(o) => cache.delete(&o),
                    other => {
                        let o = other.object().clone();
                        if cache.get(&o).is_some() {
                            cache.update(o);
                        } else {
                            cache.add(o);
                        }
                    }
                }
            }
        })
        .unwrap();
    }
}

/// client-go TestReflectorReplacesStoreOnUnsafeDelete: a 500 StorageReadError (an object was
/// unsafe-deleted) is not an internal error: the reflector relists, inside the internal-error
/// retry window too, and the deleted object leaves the store.
#[tokio::test(start_paused = true)]
async fn a_storage_read_error_relists_and_the_unsafe_deleted_object_leaves_the_store() {
    let lw = Scripted::default();
    let pods = ["foo-1", "foo-2", "foo-3"];
    lw.lock().lists.extend([page("3", &pods), page("5", &pods)]);
    let unsafe_deleted = SourceError::Api {
        code: 500,
        reason: "StorageReadError".into(),
        message: "failed to prepare current and previous objects: corrupt object has been deleted"
            .into(),
    };
    assert!(!unsafe_deleted.is_internal_error());
    lw.lock().watches.push_back(Ok(vec![
        added("foo", "4"),
        Ok(WatchEvent::Error(unsafe_deleted)),
    ]));
    let cache = Indexer::new();
    let f = Arc::new(DeltaFifo::new(Some(cache.cache()), None));
    assert!(!list_config().max_internal_error_retry.is_zero());
    run_for(&lw, f.clone(), Duration::from_secs(10)).await;
    assert_eq!(
        lw.lock()
            .list_calls
            .iter()
            .map(|l| l.resource_version.as_str())
            .collect::<Vec<_>>(),
        ["0", "4"],
        "relisted from the last synced version"
    );
    drain(&f, &cache);
    assert!(
        cache.get_by_key("ns/foo").is_none(),
        "the unsafe-deleted object left the store"
    );
    assert!(cache.get_by_key("ns/foo-1").is_some(), "the others stay");
}

/// An internal error as apimachinery reads it: by reason first, the code only for an unknown
/// reason.
#[test]
fn internal_errors_are_read_as_apimachinery_reads_them() {
    let api = |code: u16, reason: &str| SourceError::Api {
        code,
        reason: reason.into(),
        message: String::new(),
    };
    assert!(api(500, "InternalError").is_internal_error());
    assert!(api(500, "").is_internal_error(), "unknown reason, 500");
    assert!(api(500, "SomethingNew").is_internal_error());
    assert!(!api(500, "StorageReadError").is_internal_error());
    assert!(api(500, "StorageReadError").is_store_read_error());
    assert!(!api(500, "ServiceUnavailable").is_internal_error());
    assert!(!api(503, "").is_internal_error());
    assert!(SourceError::Decode("x".into()).is_internal_error());
}

/// A custom source reporting a broken stream as a transport error: re-watch from the last
/// resourceVersion, no relist (the kube source's own rule, for every source).
#[tokio::test(start_paused = true)]
async fn a_custom_source_s_broken_watch_stream_rewatches_from_the_last_version_without_relist() {
    let lw = Scripted::default();
    lw.lock().lists.push_back(page("10", &["a"]));
    lw.lock().watches.push_back(Ok(vec![
        added("b", "11"),
        Err(SourceError::Connect("connection reset by peer".into())),
        added("never", "12"),
    ]));
    let f = fifo();
    run_for(&lw, f.clone(), Duration::from_secs(60)).await;
    let s = lw.lock();
    assert_eq!(s.list_calls.len(), 1, "no relist");
    let rvs: Vec<&str> = s
        .watch_calls
        .iter()
        .map(|w| w.resource_version.as_str())
        .collect();
    assert_eq!(rvs, ["10", "11"], "re-watched from the last version");
    assert!(
        f.deltas("ns/never").is_none(),
        "the watch ended at the break"
    );
}

/// A stream that breaks at once with no event is a very short watch: relist, as client-go.
#[tokio::test(start_paused = true)]
async fn a_watch_stream_broken_at_once_with_no_event_is_a_very_short_watch() {
    let lw = Scripted::default();
    lw.lock().lists.push_back(page("10", &["a"]));
    lw.lock()
        .watches
        .push_back(Ok(vec![Err(SourceError::Connect("reset".into()))]));
    let mut r = Reflector::new(
        "t",
        Arc::new(lw.clone()),
        fifo(),
        list_config(),
        Duration::ZERO,
        None,
    );
    assert!(matches!(
        r.list_and_watch().await,
        Err(ReflectorError::VeryShortWatch)
    ));
}

/// A hostile API server: every list page holds 4 new objects and a continue token, and the
/// first streaming list sends new objects without end (never its end bookmark). After
/// `valve` pages or events it gives up with a 500 (so code without a cap fails instead of
/// growing until the test runs out of memory); later watches are refused (403).
struct Endless {
    valve: u64,
    pages: AtomicU64,
    watches: AtomicU64,
    events: Arc<AtomicU64>,
}

impl Endless {
    fn new(valve: u64) -> Arc<Self> {
        Arc::new(Self {
            valve,
            pages: AtomicU64::new(0),
            watches: AtomicU64::new(0),
            events: Arc::default(),
        })
    }

    fn gave_up() -> SourceError {
        SourceError::Api {
            code: 500,
            reason: "InternalError".into(),
            message: "the hostile server gave up".into(),
        }
    }
}

impl ListerWatcher for Endless {
    fn list(&self, _: ListOptions) -> BoxFuture<'_, Result<ListPage, SourceError>> {
        let n = self.pages.fetch_add(1, Ordering::SeqCst);
        let r = if n >= self.valve {
            Err(Self::gave_up())
        } else {
            Ok(ListPage {
                resource_version: "10".into(),
                continue_token: Some(format!("page-{}", n + 1)),
                items: (0..4)
                    .map(|i| obj(Some("ns"), &format!("o-{n}-{i}"), "10"))
                    .collect(),
            })
        };
        async move { r }.boxed()
    }

    fn watch(&self, opts: WatchOptions) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        let first = self.watches.fetch_add(1, Ordering::SeqCst) == 0;
        let r = if first && opts.send_initial_events {
            let (valve, events) = (self.valve, self.events.clone());
            Ok(futures::stream::iter(0u64..)
                .map(move |i| {
                    events.fetch_add(1, Ordering::SeqCst);
                    if i >= valve {
                        Err(Self::gave_up())
                    } else {
                        Ok(WatchEvent::Added(obj(Some("ns"), &format!("e-{i}"), "10")))
                    }
                })
                .boxed())
        } else {
            Err(SourceError::Api {
                code: 403,
                reason: "Forbidden".into(),
                message: "no".into(),
            })
        };
        async move { r }.boxed()
    }

    fn describe(&self) -> String {
        "v1/Pod in all namespaces".into()
    }
}

#[tokio::test(start_paused = true)]
async fn a_list_of_endless_pages_stops_at_the_object_cap_drops_what_it_read_and_relists() {
    let lw = Endless::new(10_000);
    let config = ReflectorConfig {
        list_caps: ListCaps {
            objects: 10,
            bytes: u64::MAX,
        },
        ..pages_of_4()
    };
    let f = fifo();
    let mut r = Reflector::new(
        "endless-pages",
        lw.clone(),
        f.clone(),
        config.clone(),
        Duration::ZERO,
        None,
    );
    let e = r.list_and_watch().await.unwrap_err();
    assert!(
        matches!(
            &e,
            ReflectorError::ListFailed(SourceError::ListOverCap {
                taken: 12,
                cap: 10,
                unit: "objects",
                setting: "maxListObjects",
                ..
            })
        ),
        "{e}"
    );
    assert!(
        e.to_string().starts_with(
            "list failed: informer \"endless-pages\" (v1/Pod in all namespaces): the list is over maxListObjects: 12 objects or more"
        ),
        "{e}"
    );
    assert_eq!(
        lw.pages.load(Ordering::SeqCst),
        3,
        "pages read past the cap"
    );
    assert!(f.is_empty(), "the partial list reached the store");
    assert_eq!(lists_over_cap().get("endless-pages"), Some(&1));
    // Run: each round stops at the cap again, after a backoff.
    let r = Reflector::new(
        "endless-pages",
        lw.clone(),
        f.clone(),
        config,
        Duration::ZERO,
        None,
    );
    r.run(tokio::time::sleep(Duration::from_secs(30))).await;
    let over = lists_over_cap()["endless-pages"];
    assert!(over >= 3, "{over} lists over the cap in 30 s");
    assert_eq!(lw.pages.load(Ordering::SeqCst), 3 * over, "3 pages a round");
    assert!(f.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_streaming_list_of_endless_initial_events_stops_at_the_byte_cap_without_a_fallback_list()
{
    let lw = Endless::new(100_000);
    let one = obj(Some("ns"), "e-0", "10").heap_size() as u64;
    let config = ReflectorConfig {
        list_caps: ListCaps {
            objects: u64::MAX,
            bytes: 50 * one,
        },
        ..ReflectorConfig::default()
    };
    let f = fifo();
    let mut r = Reflector::new(
        "endless-stream",
        lw.clone(),
        f.clone(),
        config,
        Duration::ZERO,
        None,
    );
    let e = r.list_and_watch().await.unwrap_err();
    assert!(
        matches!(
            &e,
            ReflectorError::ListFailed(SourceError::ListOverCap {
                unit: "bytes",
                setting: "maxListTotalSize",
                ..
            })
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains("informer \"endless-stream\" (v1/Pod in all namespaces): the list is over maxListTotalSize"),
        "{e}"
    );
    assert!(
        e.to_string().contains(&format!(
            "raise the informer's maxListTotalSize to at least {}, or narrow the informer",
            100 * one
        )),
        "the refusal says what to raise and to what: {e}"
    );
    let events = lw.events.load(Ordering::SeqCst);
    assert!(
        (45..=52).contains(&events),
        "{events} initial events read for a cap of 50 objects' bytes"
    );
    assert_eq!(lw.pages.load(Ordering::SeqCst), 0, "fell back to a list");
    assert!(f.is_empty());
    assert_eq!(lists_over_cap().get("endless-stream"), Some(&1));
}
