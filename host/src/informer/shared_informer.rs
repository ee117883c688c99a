//! The shared informer (client-go `sharedIndexInformer`): one reflector, one DeltaFIFO, one
//! indexer, and any number of listeners, each with its own queue.

use std::any::Any;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::delta_fifo::{Delta, TransformFn};
use super::executor::{Executor, Placement};
use super::handler::{EventHandler, Notification};
use super::indexer::{Cache, IndexError, IndexFunc, Indexer};
use super::listener::{
    DEFAULT_BATCH_MAX, Listener, ListenerOptions, ListenerStats, OverflowObserver, QueueBound,
};
use super::lister_watcher::ListerWatcher;
use super::object::{DeletedObject, Object};
use super::processor::{SharedProcessor, determine_resync_period};
use super::real_fifo::{Popped, Queue, QueueKind};
use super::reflector::{Reflector, ReflectorConfig, ReflectorStats};
use crate::sync::lock;

/// Smallest resync period a listener may ask for (client-go `minimumResyncPeriod`).
pub const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// Informer settings.
#[derive(Clone, Default)]
pub struct InformerConfig {
    /// Resync period of handlers added without one, and the initial resync check period
    /// (0 = no resync).
    pub default_resync: Duration,
    /// Reflector settings.
    pub reflector: ReflectorConfig,
    /// Runs once on every object entering the FIFO (e.g. strip fields), never on tombstones.
    pub transform: Option<TransformFn>,
    /// Largest batch a listener hands to its handler (default 64).
    pub batch_max: Option<usize>,
    /// Where handlers that ask for the shared executor ([`Placement::Shared`]) run; `None`:
    /// the process's default one ([`Executor::process_default`]), started on first use.
    pub executor: Option<Executor>,
    /// The queue between the reflector and the process loop (default: the RealFIFO, as in
    /// client-go since 1.33).
    pub queue: QueueKind,
    /// What a panic in the informer's own pipeline does (default: stop the informer).
    pub on_panic: OnPanic,
}

/// What a panic in an informer's own pipeline (a transform, an index function, an overflow
/// observer) does. Either way it is logged and counted, and the informer is not ready until it
/// is running again.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum OnPanic {
    /// The informer stops: `run` returns [`InformerError::Panicked`] and it stays not ready (the
    /// caller decides, e.g. the host exits).
    #[default]
    Stop,
    /// The informer restarts after a backoff (doubling from `initial` to `max`): a new
    /// reflector lists again, reconciling the cache and the listeners with the server (what the
    /// panic left half-done is replaced or deleted as after any relist), and the process loop
    /// is started again if the panic ended it. Listeners and their queues are kept.
    Restart {
        /// First wait.
        initial: Duration,
        /// Longest wait.
        max: Duration,
    },
}

impl OnPanic {
    /// Restart after 1 s, doubling to 1 min.
    pub const RESTART: OnPanic = OnPanic::Restart {
        initial: Duration::from_secs(1),
        max: Duration::from_secs(60),
    };
}

/// In the config: `restart` ([`OnPanic::RESTART`]) or `exit` ([`OnPanic::Stop`]: the host
/// shuts down with an error).
impl<'de> serde::Deserialize<'de> for OnPanic {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        enum Name {
            Restart,
            Exit,
        }
        Ok(match Name::deserialize(d)? {
            Name::Restart => OnPanic::RESTART,
            Name::Exit => OnPanic::Stop,
        })
    }
}

/// How a handler is registered (client-go `HandlerOptions`, and where and how its listener
/// queues and runs it).
#[derive(Clone, Default)]
pub struct HandlerOptions {
    /// Resync period (0 = never; below 1 s is raised to 1 s; below the informer's check period
    /// is raised to it; an informer whose own resync is 0 never resyncs, whatever its handlers
    /// ask, as in client-go).
    pub resync: Duration,
    /// Whether the handler receives the updates of a relist that found an object unchanged
    /// (same resourceVersion; [`Notification::is_resync`]) when its own resync is not due.
    pub relist_resyncs: RelistResyncs,
    /// The largest batch the handler wants at once (`None`: the informer's default).
    pub batch_max: Option<usize>,
    /// How many notifications may wait for the handler, and what happens beyond. Unbounded by
    /// default, like client-go: a native handler that must see everything keeps that; a handler
    /// that may fall far behind (a plugin) sets a bound. See [`super::listener::queue`].
    pub queue: QueueBound,
    /// Who is told when a bounded queue drops or coalesces.
    pub overflow: Option<Arc<dyn OverflowObserver>>,
    /// Where the handler runs: a thread of its own (the default: a native handler may block,
    /// and then delays nobody else), or the informer's shared executor, in a group whose
    /// handlers never run at the same time (a plugin's handlers, which share one instance). A
    /// handler on the executor must not block for long: it holds a worker while it runs. See
    /// [`super::executor`].
    pub placement: Placement,
}

impl std::fmt::Debug for HandlerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerOptions")
            .field("resync", &self.resync)
            .field("relist_resyncs", &self.relist_resyncs)
            .field("batch_max", &self.batch_max)
            .field("queue", &self.queue)
            .field("overflow", &self.overflow.is_some())
            .field("placement", &self.placement)
            .finish()
    }
}

/// What a handler gets of a relist's unchanged objects (in the config: `deliver`, `skip`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RelistResyncs {
    /// As client-go: every handler is in the syncing set until the informer's first resync
    /// check (never, when the informer does not resync), so a relist's unchanged objects reach
    /// it as resync updates.
    #[default]
    Deliver,
    /// A handler without a resync period gets no resync updates at all, from relists either.
    Skip,
}

/// Errors of informer operations.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InformerError {
    /// The informer has stopped; handlers cannot be added any more.
    #[error("informer {0:?} has stopped")]
    Stopped(String),
    /// `run` was called twice.
    #[error("informer {0:?} is already running")]
    AlreadyStarted(String),
    /// A panic in the informer's own pipeline (a transform, an index function, an overflow
    /// observer): the informer stopped, and stays not ready.
    #[error("informer {informer:?} failed: {detail}")]
    Panicked {
        /// The informer.
        informer: String,
        /// Where it panicked, and the panic's message.
        detail: String,
    },
    /// An index operation failed.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The handler's thread, or the executor it asked for, could not be started.
    #[error("informer {informer:?}: cannot start handler {handler:?}: {detail}")]
    Start {
        /// The informer.
        informer: String,
        /// The handler's name.
        handler: String,
        /// The OS error.
        detail: String,
    },
}

struct State {
    started: bool,
    stopped: bool,
    resync_check_period: Duration,
}

/// A handle on a registered handler (client-go `ResourceEventHandlerRegistration`).
#[derive(Clone)]
pub struct HandlerRegistration {
    informer_id: u64,
    listener: Arc<Listener>,
}

impl HandlerRegistration {
    /// The informer has synced and this handler has handled its initial list.
    pub fn has_synced(&self) -> bool {
        self.listener.has_synced()
    }

    /// Queue and delivery counters of this handler.
    pub fn stats(&self) -> ListenerStats {
        self.listener.stats()
    }

    /// Each notification's time from this handler's queue to its outcome so far (see
    /// [`super::listener::Listener::waited`]).
    pub fn waited(&self) -> (Vec<(f64, u64)>, f64, u64) {
        self.listener.waited()
    }

    /// The resync period in force.
    pub fn resync_period(&self) -> Duration {
        self.listener.resync_period()
    }

    /// Changes the bound of this handler's queue (e.g. a plugin reloaded with a new `queue`);
    /// a smaller bound applies its overflow policy to what is queued at once.
    pub fn set_queue_bound(&self, bound: QueueBound) {
        self.listener.set_queue_bound(bound);
    }

    /// The name given at registration.
    pub fn name(&self) -> &str {
        self.listener.name()
    }
}

/// Counters of an informer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InformerStats {
    /// Objects in the cache.
    pub cache_size: usize,
    /// Items waiting in the queue (keys of a DeltaFIFO, deltas of a RealFIFO).
    pub fifo_depth: usize,
    /// Lists done (first list and relists).
    pub lists: u64,
    /// Watch requests made.
    pub watches: u64,
    /// Watch events received.
    pub events: u64,
    /// The last resourceVersion synced (the reflector's: client-go `LastSyncResourceVersion`).
    pub last_sync_resource_version: String,
    /// The last resourceVersion the cache has processed (client-go's store resourceVersion):
    /// behind the reflector's while events wait in the queue.
    pub store_resource_version: String,
    /// Panics caught in the informer's pipeline (transform, index functions): each fails the
    /// informer.
    pub panics: u64,
    /// Restarts after a panic ([`OnPanic::Restart`]).
    pub restarts: u64,
}

static NEXT_INFORMER_ID: AtomicU64 = AtomicU64::new(1);

/// Whether the informer's own pipeline has failed. A panic in a transform (on the reflector's
/// task) or while handling deltas (an index function, an overflow observer, on the process
/// loop's thread) is caught here instead of killing its thread silently: it is logged and
/// counted, and the informer is not ready (`has_synced` false for the informer and its
/// handlers, so `/readyz` fails) until it runs again. Then, per [`OnPanic`], it stops (its `run`
/// returns [`InformerError::Panicked`]) or restarts from a new list.
#[derive(Default)]
struct Health {
    panics: AtomicU64,
    restarts: AtomicU64,
    failure: Mutex<Option<String>>,
    failed: tokio::sync::Notify,
}

impl Health {
    fn fail(&self, informer: &str, stage: &str, payload: &(dyn Any + Send)) {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(not a string)".to_owned());
        let detail = format!("panic in {stage}: {msg}");
        self.panics.fetch_add(1, Ordering::Relaxed);
        tracing::error!(informer, %detail, "informer pipeline panicked; the informer is not ready until it restarts (onPanic: restart) or stops");
        lock(&self.failure).get_or_insert(detail);
        self.failed.notify_one();
    }

    fn is_failed(&self) -> bool {
        lock(&self.failure).is_some()
    }

    /// Forgets the failure (a restart, or a stop that makes the restart moot).
    fn clear(&self) {
        lock(&self.failure).take();
    }

    /// Clears the failure before a restart.
    fn restarting(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
        self.clear();
    }
}

/// A shared informer over one source.
pub struct SharedInformer {
    id: u64,
    name: String,
    lw: Arc<dyn ListerWatcher>,
    config: InformerConfig,
    indexer: Indexer,
    fifo: Arc<dyn Queue>,
    processor: SharedProcessor,
    /// Serialises delta handling with late handler registration (client-go `blockDeltas`).
    block_deltas: Mutex<()>,
    state: Mutex<State>,
    reflector_stats: Mutex<Option<Arc<ReflectorStats>>>,
    health: Arc<Health>,
    /// Time to process one popped item (update the cache, notify the listeners): client-go's
    /// processing latency.
    processing: super::latency::LatencyHistogram,
}

impl SharedInformer {
    /// A new informer named `name` over `lw`.
    pub fn new(
        name: impl Into<String>,
        lw: Arc<dyn ListerWatcher>,
        config: InformerConfig,
    ) -> Arc<Self> {
        let name: String = name.into();
        let health = Arc::new(Health::default());
        let transform = config.transform.clone().map(|t| {
            let (health, name) = (health.clone(), name.clone());
            Arc::new(move |o: Arc<Object>| {
                catch_unwind(AssertUnwindSafe(|| t(o.clone()))).unwrap_or_else(|p| {
                    health.fail(&name, "the transform", &*p);
                    o
                })
            }) as TransformFn
        });
        let indexer = Indexer::new();
        let fifo = config.queue.build(indexer.cache(), transform);
        Arc::new(Self {
            id: NEXT_INFORMER_ID.fetch_add(1, Ordering::Relaxed),
            name,
            health,
            processing: Default::default(),
            lw,
            state: Mutex::new(State {
                started: false,
                stopped: false,
                resync_check_period: config.default_resync,
            }),
            config,
            indexer,
            fifo,
            processor: SharedProcessor::default(),
            block_deltas: Mutex::new(()),
            reflector_stats: Mutex::new(None),
        })
    }

    /// The informer's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A read handle on the cache.
    pub fn cache(&self) -> Cache {
        self.indexer.cache()
    }

    /// Adds indexes, before or while the informer runs (client-go `AddIndexers`): the objects
    /// already cached are indexed at once, under the cache's write lock, so a query never sees
    /// a half-built index. A name clash is an error and adds none; a stopped informer refuses.
    pub fn add_indexers(
        &self,
        funcs: impl IntoIterator<Item = (String, IndexFunc)>,
    ) -> Result<(), InformerError> {
        let st = lock(&self.state);
        if st.stopped {
            return Err(InformerError::Stopped(self.name.clone()));
        }
        Ok(self.indexer.add_indexers(funcs)?)
    }

    /// Whether the first list has been fully processed (client-go `HasSynced`); false while the
    /// informer has failed (see [`SharedInformer::failure`]), until it restarts.
    pub fn has_synced(&self) -> bool {
        !self.health.is_failed() && self.fifo.has_synced()
    }

    /// Time to process one popped item: cumulative `(bound, count)` buckets, sum in seconds,
    /// count (client-go's processing latency).
    pub fn processing_latency(&self) -> (Vec<(f64, u64)>, f64, u64) {
        self.processing.snapshot()
    }

    /// Counters.
    pub fn stats(&self) -> InformerStats {
        let r = lock(&self.reflector_stats).clone();
        InformerStats {
            cache_size: self.indexer.len(),
            fifo_depth: self.fifo.len(),
            lists: r.as_ref().map_or(0, |r| r.lists.load(Ordering::Relaxed)),
            watches: r.as_ref().map_or(0, |r| r.watches.load(Ordering::Relaxed)),
            events: r.as_ref().map_or(0, |r| r.events.load(Ordering::Relaxed)),
            last_sync_resource_version: r
                .map(|r| r.last_sync_resource_version())
                .unwrap_or_default(),
            store_resource_version: self.indexer.resource_version(),
            panics: self.health.panics.load(Ordering::Relaxed),
            restarts: self.health.restarts.load(Ordering::Relaxed),
        }
    }

    /// Why the informer failed, if it did (see [`InformerError::Panicked`]).
    pub fn failure(&self) -> Option<String> {
        lock(&self.health.failure).clone()
    }

    /// The resync check period in force.
    pub fn resync_check_period(&self) -> Duration {
        lock(&self.state).resync_check_period
    }

    /// Registers a handler with its own queue and resync period, relist updates delivered as
    /// client-go does (see [`SharedInformer::add_event_handler_with_options`]).
    pub fn add_event_handler(
        &self,
        name: impl Into<String>,
        handler: Box<dyn EventHandler>,
        resync: Duration,
    ) -> Result<HandlerRegistration, InformerError> {
        let options = HandlerOptions {
            resync,
            ..HandlerOptions::default()
        };
        self.add_event_handler_with_options(name, handler, options)
    }

    /// Registers a handler with its own queue (client-go `AddEventHandlerWithOptions`); see
    /// [`HandlerOptions`] for the resync period. A handler added while the informer runs first
    /// receives every cached object as an initial-list add, and its `has_synced` stays false
    /// until it has handled them.
    pub fn add_event_handler_with_options(
        &self,
        name: impl Into<String>,
        handler: Box<dyn EventHandler>,
        options: HandlerOptions,
    ) -> Result<HandlerRegistration, InformerError> {
        let name: String = name.into();
        let resync = options.resync;
        let syncing = options.relist_resyncs == RelistResyncs::Deliver;
        let mut st = lock(&self.state);
        if st.stopped {
            return Err(InformerError::Stopped(self.name.clone()));
        }
        let mut resync = resync;
        if !resync.is_zero() {
            resync = resync.max(MINIMUM_RESYNC_PERIOD);
            if st.resync_check_period.is_zero() {
                // client-go: an informer created without resync never resyncs; a handler's
                // period does not turn it on.
                tracing::warn!(informer = %self.name, handler = %name, requested = ?resync,
                    "the handler asks for a resync period but its informer does not resync (its resync is 0): the handler gets no resyncs");
            } else if resync < st.resync_check_period {
                if st.started {
                    tracing::warn!(informer = %self.name, requested = ?resync, check = ?st.resync_check_period,
                        "resync period below the running informer's check period; raised to it");
                    resync = st.resync_check_period;
                } else {
                    st.resync_check_period = resync;
                    self.processor.resync_check_period_changed(resync);
                }
            }
        }
        let period = determine_resync_period(resync, st.resync_check_period);
        let fifo = self.fifo.clone();
        let failed = |detail: String| InformerError::Start {
            informer: self.name.clone(),
            handler: name.clone(),
            detail,
        };
        let executor = match options.placement {
            Placement::OwnThread => None,
            Placement::Shared { .. } => Some(match &self.config.executor {
                Some(e) => e.clone(),
                None => Executor::process_default().map_err(|e| failed(e.to_string()))?,
            }),
        };
        let listener = Listener::new(
            name.clone(),
            handler,
            ListenerOptions {
                requested_resync: resync,
                resync_period: period,
                batch_max: options
                    .batch_max
                    .unwrap_or(self.config.batch_max.unwrap_or(DEFAULT_BATCH_MAX)),
                queue: options.queue,
                overflow: options.overflow.clone(),
                placement: options.placement,
            },
            {
                let health = self.health.clone();
                Arc::new(move || !health.is_failed() && fifo.has_synced())
            },
            executor,
        )
        .map_err(|e| failed(format!("cannot start its thread: {e}")))?;
        let reg = HandlerRegistration {
            informer_id: self.id,
            listener: listener.clone(),
        };
        if !st.started {
            self.processor.add_listener(listener, syncing);
            return Ok(reg);
        }
        let _blocked = lock(&self.block_deltas);
        self.processor.add_listener(listener.clone(), syncing);
        for obj in self.indexer.list() {
            listener.add(Notification::Add {
                obj,
                initial_list: true,
            });
        }
        Ok(reg)
    }

    /// Queues every cached object for one handler again, as initial-list adds, after what is
    /// already queued for it (used after a plugin reload that asks for a replay). Returns how
    /// many were queued; a registration from another informer gets nothing.
    pub fn resend_cache(&self, reg: &HandlerRegistration) -> usize {
        if reg.informer_id != self.id {
            return 0;
        }
        let _blocked = lock(&self.block_deltas);
        let objs = self.indexer.list();
        let n = objs.len();
        for obj in objs {
            reg.listener.add(Notification::Add {
                obj,
                initial_list: true,
            });
        }
        n
    }

    /// Removes a handler: idempotent; what was buffered for it is dropped; a registration from
    /// another informer is ignored.
    pub fn remove_event_handler(&self, reg: &HandlerRegistration) {
        if reg.informer_id != self.id {
            return;
        }
        let _blocked = lock(&self.block_deltas);
        if let Some(l) = self.processor.remove_listener(reg.listener.id()) {
            l.stop();
        }
    }

    /// client-go `processDeltas`: applies what was popped to the indexer and notifies.
    fn handle_popped(&self, popped: Popped, in_initial_list: bool) {
        match popped {
            Popped::Deltas(d) => self.handle_deltas(d, in_initial_list),
            Popped::ReplacedAll {
                objects,
                resource_version,
            } => {
                // client-go `processReplacedAllInfo`: the cache is replaced first, at once, so
                // it reflects the notifications listeners are given; deletions go first.
                let _blocked = lock(&self.block_deltas);
                let (deletions, replacements) = self
                    .indexer
                    .replace_all_reconciled(objects, &resource_version);
                for t in deletions {
                    self.processor.distribute(
                        Notification::Delete {
                            obj: DeletedObject::Tombstone(t),
                        },
                        false,
                    );
                }
                for (old, new) in replacements {
                    self.notify_stored(old, new, in_initial_list);
                }
            }
            Popped::SyncAll => {
                let _blocked = lock(&self.block_deltas);
                let mut all = self.indexer.snapshot();
                all.sort_by(|a, b| a.0.cmp(&b.0));
                for (_, o) in all {
                    self.processor.distribute(
                        Notification::Update {
                            old: o.clone(),
                            new: o,
                        },
                        true,
                    );
                }
            }
            Popped::Bookmark(rv) => self.indexer.bookmark(&rv),
        }
    }

    /// Tells listeners `new` was stored over `old` (an update, a sync when the resourceVersion
    /// is the same) or with nothing before (an add).
    fn notify_stored(&self, old: Option<Arc<Object>>, new: Arc<Object>, in_initial_list: bool) {
        match old {
            Some(old) => {
                let sync = old.resource_version() == new.resource_version();
                self.processor
                    .distribute(Notification::Update { old, new }, sync);
            }
            None => self.processor.distribute(
                Notification::Add {
                    obj: new,
                    initial_list: in_initial_list,
                },
                false,
            ),
        }
    }

    /// client-go `HandleDeltas`: applies a popped key's deltas to the indexer and notifies.
    fn handle_deltas(&self, deltas: Vec<Delta>, in_initial_list: bool) {
        let _blocked = lock(&self.block_deltas);
        for d in deltas {
            match d {
                Delta::Sync(o) | Delta::Replaced(o) | Delta::Added(o) | Delta::Updated(o) => {
                    let old = self.indexer.get(&o);
                    self.indexer.add(o.clone());
                    self.notify_stored(old, o, in_initial_list);
                }
                Delta::Deleted(obj) => {
                    self.indexer.delete(&obj);
                    self.processor
                        .distribute(Notification::Delete { obj }, false);
                }
            }
        }
    }

    /// Runs the informer until `shutdown` completes: the reflector on this task, the process
    /// loop on its own thread. On return every listener has stopped. A panic in the informer's
    /// pipeline (transform, index function, overflow observer) fails it (see [`OnPanic`]): it
    /// stops early with [`InformerError::Panicked`] and stays not ready, or restarts.
    pub async fn run(
        self: Arc<Self>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), InformerError> {
        let check = {
            let mut st = lock(&self.state);
            if st.stopped {
                return Err(InformerError::Stopped(self.name.clone()));
            }
            if st.started {
                return Err(InformerError::AlreadyStarted(self.name.clone()));
            }
            st.started = true;
            st.resync_check_period
        };
        tokio::pin!(shutdown);
        let mut process: Option<std::thread::JoinHandle<()>> = None;
        let mut restart_backoff = match self.config.on_panic {
            OnPanic::Restart { initial, max } => Some(super::backoff::Backoff::new(
                super::backoff::BackoffConfig {
                    reset_after: Some(Duration::from_secs(600)),
                    ..super::backoff::BackoffConfig::doubling(initial, max)
                },
            )),
            OnPanic::Stop => None,
        };
        let stats = Arc::new(super::reflector::ReflectorStats::default());
        *lock(&self.reflector_stats) = Some(stats.clone());
        loop {
            // The process loop ends on a panic while handling deltas; a transform's panic
            // leaves it running.
            if process.as_ref().is_none_or(|p| p.is_finished()) {
                if let Some(p) = process.take() {
                    crate::tasks::report_join(&format!("wisp-informer-{}", self.name), p.join());
                }
                let me = self.clone();
                process = std::thread::Builder::new()
                    .name(format!("wisp-informer-{}", self.name))
                    .spawn(move || me.process_loop())
                    .ok();
            }
            let me = self.clone();
            let reflector = Reflector::new(
                self.name.clone(),
                self.lw.clone(),
                self.fifo.clone(),
                self.config.reflector.clone(),
                check,
                Some(Arc::new(move || me.processor.should_resync(Instant::now()))),
            )
            .with_stats(stats.clone());
            tracing::info!(informer = %self.name, source = %self.lw.describe(), "informer started");
            let health = self.health.clone();
            let mut asked_to_stop = false;
            reflector
                .run(async {
                    tokio::select! {
                        _ = &mut shutdown => asked_to_stop = true,
                        _ = health.failed.notified() => {}
                    }
                })
                .await;
            let Some(backoff) = restart_backoff.as_mut().filter(|_| !asked_to_stop) else {
                break;
            };
            let delay = backoff.next_delay();
            tracing::warn!(informer = %self.name, ?delay, "informer restarting after a panic: a new list will reconcile its cache and listeners");
            tokio::select! {
                _ = &mut shutdown => {
                    // Stopping anyway: the restart it was waiting for is moot.
                    self.health.clear();
                    break;
                }
                _ = tokio::time::sleep(delay) => {}
            }
            stats.watching.store(false, Ordering::Relaxed);
            self.health.restarting();
        }

        lock(&self.state).stopped = true;
        self.fifo.close();
        let me = self.clone();
        let stopped = tokio::task::spawn_blocking(move || {
            if let Some(p) = process {
                crate::tasks::report_join(&format!("wisp-informer-{}", me.name), p.join());
            }
            me.processor.stop();
        })
        .await;
        crate::tasks::report_blocking("stopping an informer", stopped);
        if let Some(detail) = self.failure() {
            tracing::error!(informer = %self.name, %detail, "informer stopped after a panic");
            return Err(InformerError::Panicked {
                informer: self.name.clone(),
                detail,
            });
        }
        tracing::info!(informer = %self.name, "informer stopped");
        Ok(())
    }

    /// The process loop (client-go `processLoop`): pops until the FIFO is closed, or until a
    /// panic handling deltas, which is caught and fails the informer (see [`Health`]). A failure
    /// elsewhere (a transform on the reflector's side) does not end it: `run` restarts only what
    /// ended.
    fn process_loop(&self) {
        loop {
            let mut panicked = None;
            let popped = self.fifo.pop_batch(&mut |p, initial| {
                let began = Instant::now();
                panicked = catch_unwind(AssertUnwindSafe(|| self.handle_popped(p, initial))).err();
                self.processing.observe(began.elapsed());
            });
            if let Some(p) = panicked {
                self.health.fail(
                    &self.name,
                    "delta handling (an index function or an overflow observer)",
                    &*p,
                );
                break;
            }
            if popped.is_err() {
                break;
            }
        }
    }
}

/// Waits until `synced()` is true, polling every 10 ms, for at most `timeout`. Returns whether
/// it became true (client-go `WaitForCacheSync`).
pub async fn wait_for(timeout: Duration, mut synced: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if synced() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests;

/// The same unit tests, over a RealFIFO.
#[cfg(test)]
mod tests_over_real_fifo {
    include!("shared_informer/tests.rs");
}
