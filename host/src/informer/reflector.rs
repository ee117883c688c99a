//! The reflector (client-go `Reflector.ListAndWatch`): lists (in pages) into the DeltaFIFO with
//! `replace`, then watches from the list's resourceVersion, feeding add / update / delete.
//!
//! - Relist resourceVersion: "0" the first time, the last synced one afterwards, "" after an
//!   Expired or too-large error (and an Expired list is retried once at "").
//! - Pages: with a page size set ([`ReflectorConfig::page_size`]) every list is paged with it,
//!   at an exact resourceVersion too (client-go `WatchListPageSize`). Without one (the default),
//!   lists at "" or "0" are paged by 500 and a relist at an exact resourceVersion is not (so
//!   the API server serves it from its watch cache), unless the list at "0" came back paged.
//!   An Expired continuation falls back to one unpaginated list.
//! - Watch from the last RV with bookmarks and a random timeout in [5 min, 10 min].
//! - Normal end of a watch, or a stream broken in transport (a [`SourceError::Connect`] item,
//!   from any source): re-watch from the last RV, no relist (a watch that ends in under a
//!   second with no event is a very short watch: relist).
//!   429 / unreachable: back off, re-watch.
//!   An internal error (a 500 as apimachinery's `IsInternalError` reads it, or an undecodable
//!   event, which client-go also reports as a 500): back off and re-watch while the
//!   internal-error retry window lasts (client-go `retryWithDeadline`). A 500 with another known
//!   reason (`StorageReadError`: an object was unsafe-deleted) is not one: relist.
//!   ERROR 410 or anything else: back off, then relist.
//! - Resync only while watching after a successful list, never during an outage.
//! - Streaming list (sendInitialEvents) by default, falling back to a list on error (e.g. 422
//!   from a server whose WatchList feature gate is off).

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use rand::Rng;
use tokio::time::Instant;

use super::backoff::{Backoff, BackoffConfig};
use super::key::object_key;
use super::lister_watcher::{
    ListBudget, ListCaps, ListerWatcher, SourceError, WatchEvent, WatchOptions, WatchStream,
    list_all,
};
use super::object::{DeletedObject, Object};
use super::real_fifo::Queue;
use crate::sync::lock;

/// Reflector settings.
#[derive(Clone, Debug)]
pub struct ReflectorConfig {
    /// Page size of every list, relists at an exact resourceVersion included (client-go
    /// `WatchListPageSize`). `None` (the default): client-go's automatic choice, pages of
    /// [`AUTO_PAGE_SIZE`] at "" and "0", none at an exact resourceVersion unless the first list
    /// came back paged.
    pub page_size: Option<NonZeroU32>,
    /// Watches time out after a random duration in [min, 2 * min] (client-go: 5 min).
    pub min_watch_timeout: Duration,
    /// Backoff between relists and after 429s.
    pub backoff: BackoffConfig,
    /// Use a streaming list (watch with sendInitialEvents) instead of a paginated list, falling
    /// back to a list when the server refuses it (on by default, as in client-go 1.35+).
    pub use_watch_list: bool,
    /// How long internal errors (500, undecodable event) are answered by a re-watch (after a
    /// backoff) before the reflector gives up and relists. Zero relists at once (client-go's
    /// default; Wisp retries for 30 s).
    pub max_internal_error_retry: Duration,
    /// Bounds of one whole list: all its pages, or a streaming list's initial events. Over
    /// them the partial list is dropped, counted ([`lists_over_cap`]), and the reflector
    /// relists after backoff.
    pub list_caps: ListCaps,
}

impl Default for ReflectorConfig {
    fn default() -> Self {
        Self {
            list_caps: ListCaps::default(),
            page_size: None,
            min_watch_timeout: Duration::from_secs(300),
            backoff: BackoffConfig::default(),
            use_watch_list: true,
            max_internal_error_retry: Duration::from_secs(30),
        }
    }
}

/// Lists stopped for being over their [`ListCaps`], per informer name.
static OVER_CAP: Mutex<std::collections::BTreeMap<String, u64>> =
    Mutex::new(std::collections::BTreeMap::new());

/// How many lists of each informer were stopped over `maxListObjects` / `maxListTotalSize`.
pub fn lists_over_cap() -> std::collections::BTreeMap<String, u64> {
    lock(&OVER_CAP).clone()
}

/// Page size of the automatic paging choice (client-go's pager default).
pub const AUTO_PAGE_SIZE: u32 = 500;

/// Why one ListAndWatch round ended. Every variant is retried by [`Reflector::run`] after a
/// backoff, with a relist.
#[derive(Debug, thiserror::Error)]
pub enum ReflectorError {
    /// The list failed (retryable: relist after backoff).
    #[error("list failed: {0}")]
    ListFailed(#[source] SourceError),
    /// The watch request failed with a non-retriable error (relist after backoff).
    #[error("watch could not start: {0}")]
    WatchStartFailed(#[source] SourceError),
    /// The watch stream ended with an error (relist after backoff).
    #[error("watch ended: {0}")]
    WatchFailed(#[source] SourceError),
    /// The watch closed within a second with no event (relist after backoff).
    #[error("very short watch: the watch closed in under a second with no event")]
    VeryShortWatch,
}

/// Counters of a reflector, readable while it runs.
#[derive(Debug, Default)]
pub struct ReflectorStats {
    /// Completed lists (the first included).
    pub lists: AtomicU64,
    /// Watch requests made.
    pub watches: AtomicU64,
    /// Watch events received (bookmarks included).
    pub events: AtomicU64,
    /// ListAndWatch rounds that ended in an error.
    pub errors: AtomicU64,
    /// Whether the reflector is past a successful list and in its watch phase (the only phase in
    /// which resyncs run, as in client-go).
    pub watching: AtomicBool,
    last_sync_resource_version: Mutex<String>,
}

impl ReflectorStats {
    /// The last resourceVersion the reflector synced to.
    pub fn last_sync_resource_version(&self) -> String {
        lock(&self.last_sync_resource_version).clone()
    }
}

/// How long after the last internal error a new one opens a new retry window (client-go's
/// `minResetPeriod` of the reflector's `retryWithDeadline`: one minute).
const INTERNAL_ERROR_RESET: Duration = Duration::from_secs(60);

/// client-go's `retryWithDeadline` for internal errors: the window opens at the first internal
/// error and lasts `max`; an internal error at least `min_reset` after the previous one opens a
/// new window. Other outcomes (a success, another error) leave the window as it is.
struct InternalErrorRetry {
    max: Duration,
    min_reset: Duration,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl InternalErrorRetry {
    fn new(max: Duration, min_reset: Duration) -> Self {
        Self {
            max,
            min_reset,
            first: None,
            last: None,
        }
    }

    fn after(&mut self, err: Option<&SourceError>) {
        if !err.is_some_and(SourceError::is_internal_error) {
            return;
        }
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) >= self.min_reset)
        {
            self.first = None;
        }
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    fn should_retry(&mut self) -> bool {
        if self.max.is_zero() {
            return false;
        }
        if self.first.is_some_and(|t| t.elapsed() <= self.max) {
            return true;
        }
        self.first = None;
        self.last = None;
        false
    }
}

/// A hook telling whether any listener's resync is due.
pub type ShouldResync = Arc<dyn Fn() -> bool + Send + Sync>;

/// Lists and watches one source into a DeltaFIFO.
pub struct Reflector {
    name: String,
    lw: Arc<dyn ListerWatcher>,
    store: Arc<dyn Queue>,
    config: ReflectorConfig,
    resync_period: Duration,
    should_resync: Option<ShouldResync>,
    stats: Arc<ReflectorStats>,
    last_sync_rv: String,
    /// Set after an Expired / too-large error: the next list asks for the latest state ("").
    last_sync_rv_unavailable: bool,
    /// The list at "0" came back in pages: the server has no watch cache for this resource,
    /// so relists at an exact resourceVersion are paged too (client-go `paginatedResult`).
    paginated_result: bool,
    backoff: Backoff,
}

impl Reflector {
    /// A reflector named `name` (for logs) feeding `store`; `resync_period` drives `store.resync`
    /// when `should_resync` says a listener is due.
    pub fn new(
        name: impl Into<String>,
        lw: Arc<dyn ListerWatcher>,
        store: Arc<dyn Queue>,
        config: ReflectorConfig,
        resync_period: Duration,
        should_resync: Option<ShouldResync>,
    ) -> Self {
        let backoff = Backoff::new(config.backoff);
        Self {
            name: name.into(),
            lw,
            store,
            config,
            resync_period,
            should_resync,
            stats: Arc::default(),
            last_sync_rv: String::new(),
            last_sync_rv_unavailable: false,
            paginated_result: false,
            backoff,
        }
    }

    /// Counts into `stats` (e.g. those of the reflector this one replaces) instead of new ones.
    pub fn with_stats(mut self, stats: Arc<ReflectorStats>) -> Self {
        self.stats = stats;
        self
    }

    /// The counters, shared.
    pub fn stats(&self) -> Arc<ReflectorStats> {
        self.stats.clone()
    }

    /// Runs ListAndWatch rounds, with a backoff between them, until `shutdown` completes.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        let main = async {
            loop {
                match self.list_and_watch().await {
                    Err(ReflectorError::WatchFailed(SourceError::Reselected(why))) => {
                        tracing::info!(informer = %self.name, reason = %why, "relisting: the selection changed");
                        continue;
                    }
                    Err(e) => {
                        self.stats.errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(informer = %self.name, source = %self.lw.describe(), error = %e, "list and watch failed; relisting after backoff");
                    }
                    Ok(()) => {}
                }
                let delay = self.backoff.next_delay();
                tokio::time::sleep(delay).await;
            }
        };
        tokio::select! {
            _ = shutdown => {}
            _ = main => {}
        }
    }

    /// One round: list (or streaming list), then watch until the watch must be abandoned.
    pub async fn list_and_watch(&mut self) -> Result<(), ReflectorError> {
        let mut stream = None;
        if self.config.use_watch_list {
            match self.watch_list().await {
                Ok(s) => stream = Some(s),
                // The same objects listed would be over the same caps: no fall-back.
                Err(e @ SourceError::ListOverCap { .. }) => {
                    return Err(ReflectorError::ListFailed(e));
                }
                Err(e) => {
                    tracing::warn!(informer = %self.name, error = %e, "streaming list failed; falling back to a list");
                    if e.is_expired() || e.is_too_large_resource_version() {
                        self.last_sync_rv_unavailable = true;
                    }
                }
            }
        }
        if stream.is_none() {
            self.list().await.map_err(ReflectorError::ListFailed)?;
        }
        // As client-go's watchWithResync: the resync timer runs only from a successful list
        // until the watch is abandoned, never through an outage (a failing list, the backoff
        // between rounds). A new round starts a new timer.
        let resync = resync_loop(
            self.resync_period,
            self.store.clone(),
            self.should_resync.clone(),
        );
        self.stats.watching.store(true, Ordering::Relaxed);
        let result = tokio::select! {
            r = self.watch(stream) => r,
            () = resync => Ok(()),
        };
        self.stats.watching.store(false, Ordering::Relaxed);
        result
    }

    fn relist_resource_version(&self) -> String {
        if self.last_sync_rv_unavailable {
            String::new()
        } else if self.last_sync_rv.is_empty() {
            "0".to_owned()
        } else {
            self.last_sync_rv.clone()
        }
    }

    fn set_last_sync(&mut self, rv: String) {
        *lock(&self.stats.last_sync_resource_version) = rv.clone();
        self.last_sync_rv = rv;
    }

    /// `e`, when a list over its caps, naming the informer and counted.
    fn over_cap(&self, e: SourceError) -> SourceError {
        match e {
            SourceError::ListOverCap {
                what,
                taken,
                cap,
                unit,
                setting,
            } => {
                *lock(&OVER_CAP).entry(self.name.clone()).or_default() += 1;
                SourceError::ListOverCap {
                    what: format!("informer {:?} ({what})", self.name),
                    taken,
                    cap,
                    unit,
                    setting,
                }
            }
            other => other,
        }
    }

    async fn list(&mut self) -> Result<(), SourceError> {
        let rv = self.relist_resource_version();
        // Chosen once, for the retry at "" too (client-go keeps its pager's page size).
        let limit = self.page_limit(&rv);
        let budget = || ListBudget::new(Some(self.config.list_caps), self.lw.describe());
        let list = match list_all(&*self.lw, &rv, limit, &mut budget()).await {
            Err(e) if e.is_expired() || e.is_too_large_resource_version() => {
                tracing::info!(informer = %self.name, resource_version = %rv, error = %e, "list at resourceVersion failed; listing the latest state");
                self.last_sync_rv_unavailable = true;
                let latest = self.relist_resource_version();
                list_all(&*self.lw, &latest, limit, &mut budget())
                    .await
                    .map_err(|e| self.over_cap(e))?
            }
            other => other.map_err(|e| self.over_cap(e))?,
        };
        // A list at "0" that came back paged: the server has no watch cache for this resource.
        if rv == "0" && list.paged {
            self.paginated_result = true;
        }
        let (items, list_rv) = (list.items, list.resource_version);
        tracing::debug!(informer = %self.name, objects = items.len(), resource_version = %list_rv, "listed");
        self.store.replace(items, &list_rv);
        self.stats.lists.fetch_add(1, Ordering::Relaxed);
        self.last_sync_rv_unavailable = false;
        self.set_last_sync(list_rv);
        Ok(())
    }

    /// The page size of a list at `rv`, as client-go's reflector chooses it
    /// (client-go tools/cache/reflector.go, `list`): a page size set explicitly pages every
    /// list; otherwise a list at "" or "0" is paged, and a list at an exact resourceVersion is
    /// not (so the API server can serve it from its watch cache, which ignores pages) unless
    /// the first list at "0" came back paged.
    fn page_limit(&self, rv: &str) -> Option<u32> {
        match self.config.page_size {
            Some(n) => Some(n.get()),
            None if self.paginated_result || rv.is_empty() || rv == "0" => Some(AUTO_PAGE_SIZE),
            None => None,
        }
    }

    fn watch_timeout_seconds(&self) -> u32 {
        let min = self.config.min_watch_timeout.as_secs_f64();
        (min * (1.0 + rand::rng().random::<f64>())).max(1.0) as u32
    }

    /// Streaming list as client-go's `watchList`: a 429 or an unreachable server backs off and
    /// streams again; an Expired or too-large resourceVersion streams again from ""; a stream
    /// that ends before its initial-events-end bookmark (but not at once) streams again; any
    /// other error is returned (the caller falls back to a list).
    async fn watch_list(&mut self) -> Result<WatchStream, SourceError> {
        loop {
            match self.watch_list_once().await {
                Ok(Some(stream)) => return Ok(stream),
                Ok(None) => {
                    tracing::debug!(informer = %self.name, "streaming list ended before its end bookmark; streaming again");
                }
                Err(e) if e.is_retriable_watch_start() => {
                    tracing::debug!(informer = %self.name, error = %e, "streaming list refused; backing off");
                    tokio::time::sleep(self.backoff.next_delay()).await;
                }
                Err(e) if e.is_expired() || e.is_too_large_resource_version() => {
                    tracing::info!(informer = %self.name, error = %e, "streaming list at resourceVersion failed; streaming the latest state");
                    self.last_sync_rv_unavailable = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One streaming list: buffer the initial events, then replace atomically at the end
    /// bookmark. `None`: the stream ended before that bookmark.
    async fn watch_list_once(&mut self) -> Result<Option<WatchStream>, SourceError> {
        let rv = if self.last_sync_rv_unavailable {
            String::new()
        } else {
            self.last_sync_rv.clone()
        };
        let opts = WatchOptions {
            resource_version: rv,
            timeout_seconds: self.watch_timeout_seconds(),
            allow_bookmarks: true,
            send_initial_events: true,
        };
        self.stats.watches.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        let mut count = 0u64;
        let mut stream = self.lw.watch(opts).await?;
        let mut order: Vec<String> = Vec::new();
        let mut temp: HashMap<String, Arc<Object>> = HashMap::new();
        // Every initial event counts, a replaced object's too: a stream of endless changes to
        // one object is bounded like one of endless objects.
        let mut budget = ListBudget::new(Some(self.config.list_caps), self.lw.describe());
        while let Some(item) = stream.next().await {
            let item = item?;
            if let WatchEvent::Added(o) | WatchEvent::Modified(o) = &item {
                budget
                    .take(std::iter::once(o))
                    .map_err(|e| self.over_cap(e))?;
            }
            if matches!(item, WatchEvent::Progress(_)) {
                // The end bookmark carries the version the list is synced to.
                continue;
            }
            self.stats.events.fetch_add(1, Ordering::Relaxed);
            count += 1;
            match item {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                    let key = object_key(&o);
                    if temp.insert(key.clone(), o).is_none() {
                        order.push(key);
                    }
                }
                WatchEvent::Deleted(o) => {
                    temp.remove(&object_key(&o));
                }
                WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end,
                } => {
                    if initial_events_end {
                        let items = order
                            .iter()
                            .filter_map(|k| temp.remove(k))
                            .collect::<Vec<_>>();
                        tracing::debug!(informer = %self.name, objects = items.len(), "streaming list complete");
                        self.store.replace(items, &resource_version);
                        self.stats.lists.fetch_add(1, Ordering::Relaxed);
                        self.last_sync_rv_unavailable = false;
                        self.set_last_sync(resource_version);
                        return Ok(Some(stream));
                    }
                }
                WatchEvent::Error(e) => return Err(e),
                WatchEvent::Progress(_) => {}
            }
        }
        if count == 0 && start.elapsed() < Duration::from_secs(1) {
            return Err(SourceError::Decode(
                "very short streaming list: it closed in under a second with no event".into(),
            ));
        }
        Ok(None)
    }

    async fn watch(&mut self, mut stream: Option<WatchStream>) -> Result<(), ReflectorError> {
        let mut retry =
            InternalErrorRetry::new(self.config.max_internal_error_retry, INTERNAL_ERROR_RESET);
        loop {
            let s = match stream.take() {
                Some(s) => s,
                None => {
                    let opts = WatchOptions {
                        resource_version: self.last_sync_rv.clone(),
                        timeout_seconds: self.watch_timeout_seconds(),
                        allow_bookmarks: true,
                        send_initial_events: false,
                    };
                    self.stats.watches.fetch_add(1, Ordering::Relaxed);
                    match self.lw.watch(opts).await {
                        Ok(s) => s,
                        Err(e) if e.is_retriable_watch_start() => {
                            tracing::debug!(informer = %self.name, error = %e, "watch refused; backing off");
                            tokio::time::sleep(self.backoff.next_delay()).await;
                            continue;
                        }
                        Err(e) => return Err(ReflectorError::WatchStartFailed(e)),
                    }
                }
            };
            let result = self.handle_watch(s).await;
            retry.after(result.as_ref().err().and_then(|e| match e {
                ReflectorError::WatchFailed(s) => Some(s),
                _ => None,
            }));
            match result {
                Ok(()) => continue,
                Err(ReflectorError::WatchFailed(e)) if e.is_too_many_requests() => {
                    tracing::debug!(informer = %self.name, "watch returned 429; backing off");
                    tokio::time::sleep(self.backoff.next_delay()).await;
                }
                Err(ReflectorError::WatchFailed(e)) if e.is_store_read_error() => {
                    // An object could not be read and was unsafe-deleted: only a relist drops
                    // it from the cache, so relist whatever the internal-error retry window.
                    tracing::info!(informer = %self.name, error = %e, "an object could not be read from storage; relisting");
                    return Err(ReflectorError::WatchFailed(e));
                }
                Err(ReflectorError::WatchFailed(e))
                    if e.is_internal_error() && retry.should_retry() =>
                {
                    // client-go re-watches at once and relies on its REST client's rate limiter
                    // (5 requests/s); Wisp has no client-side limiter, so it backs off instead.
                    tracing::info!(informer = %self.name, error = %e, "retrying the watch after an internal error");
                    tokio::time::sleep(self.backoff.next_delay()).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn handle_watch(&mut self, mut stream: WatchStream) -> Result<(), ReflectorError> {
        let start = Instant::now();
        let mut count = 0u64;
        while let Some(item) = stream.next().await {
            let event = match item {
                Ok(event) => event,
                // A stream broken in transport (reset, unexpected EOF, timeout), from any
                // source, ends the watch as a normal close does: re-watch from the last
                // resourceVersion, no relist (client-go's StreamWatcher treats EOF, unexpected
                // EOF and probable EOFs alike; apimachinery pkg/watch/streamwatcher.go).
                Err(e @ SourceError::Connect(_)) => {
                    tracing::debug!(informer = %self.name, error = %e, "watch stream broken; re-watching from the last resourceVersion");
                    break;
                }
                Err(e) => return Err(ReflectorError::WatchFailed(e)),
            };
            if let WatchEvent::Progress(rv) = event {
                self.set_last_sync(rv);
                continue;
            }
            self.stats.events.fetch_add(1, Ordering::Relaxed);
            let rv = match event {
                WatchEvent::Added(o) => {
                    let rv = o.resource_version().to_owned();
                    self.store.add(o);
                    rv
                }
                WatchEvent::Modified(o) => {
                    let rv = o.resource_version().to_owned();
                    self.store.update(o);
                    rv
                }
                WatchEvent::Deleted(o) => {
                    let rv = o.resource_version().to_owned();
                    self.store.delete(DeletedObject::Object(o));
                    rv
                }
                WatchEvent::Bookmark {
                    resource_version, ..
                } => {
                    self.store.bookmark(&resource_version);
                    resource_version
                }
                WatchEvent::Error(e) => return Err(ReflectorError::WatchFailed(e)),
                WatchEvent::Progress(rv) => rv,
            };
            count += 1;
            if !rv.is_empty() {
                self.set_last_sync(rv);
            }
        }
        if count == 0 && start.elapsed() < Duration::from_secs(1) {
            return Err(ReflectorError::VeryShortWatch);
        }
        Ok(())
    }
}

async fn resync_loop(period: Duration, store: Arc<dyn Queue>, should_resync: Option<ShouldResync>) {
    if period.is_zero() {
        return std::future::pending().await;
    }
    let mut tick = tokio::time::interval_at(Instant::now() + period, period);
    loop {
        tick.tick().await;
        if should_resync.as_ref().is_none_or(|f| f()) {
            store.resync();
        }
    }
}

#[cfg(test)]
mod tests;
