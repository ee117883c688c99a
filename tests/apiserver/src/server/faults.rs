//! Fault knobs: the misbehaviour of a real API server, on demand.
//!
//! Each knob arms a one-shot (or n-shot) fault that the next matching request consumes, so a test
//! states exactly which request fails and nothing else is disturbed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::Verb;

/// Bookmark interval of a fresh server.
pub const DEFAULT_BOOKMARK_INTERVAL: Duration = Duration::from_secs(1);

/// How long a read at a resourceVersion newer than the server's waits for it before the
/// 504 "Too large resource version" answer: the watch cache's 3 s.
pub const DEFAULT_TOO_LARGE_RV_WAIT: Duration = Duration::from_secs(3);

/// A failure armed by [`Faults::fail_next`].
#[derive(Debug, Clone)]
struct FailRule {
    /// Requests of this verb consume the rule.
    verb: Verb,
    /// HTTP status to answer with.
    status: u16,
    /// Sent as the `Retry-After` header (and `details.retryAfterSeconds`).
    retry_after_secs: Option<u64>,
    /// How many more matching requests fail.
    remaining: usize,
}

/// A list without end, armed by [`Faults::endless_lists`]: what a hostile or broken API server
/// could send an informer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndlessList {
    /// Bytes of JSON of each generated object (padded with an annotation).
    pub object_bytes: usize,
    /// Bytes the server sends in one list (all its pages, or a streaming list's initial
    /// events) before it gives up with a 500, so a client without a bound fails the test
    /// instead of taking the machine's memory.
    pub give_up_after: usize,
}

impl EndlessList {
    /// The JSON of generated object number `n` of a list of `kind` (`api_version`) in
    /// `namespace`, at `rv`: `object_bytes` long, or a little more when its metadata is.
    pub(crate) fn object(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        n: u64,
        rv: u64,
    ) -> Vec<u8> {
        let head = format!(
            r#"{{"apiVersion":"{api_version}","kind":"{kind}","metadata":{{"name":"endless-{n}","namespace":"{namespace}","uid":"00000000-0000-4000-8000-{n:012x}","resourceVersion":"{rv}","annotations":{{"pad":""#
        );
        let tail = r#""}}}"#;
        let pad = self.object_bytes.saturating_sub(head.len() + tail.len());
        let mut out = Vec::with_capacity(head.len() + pad + tail.len());
        out.extend_from_slice(head.as_bytes());
        out.resize(out.len() + pad, b'x');
        out.extend_from_slice(tail.as_bytes());
        out
    }
}

/// A failure the server answers a request with instead of serving it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InjectedFailure {
    /// HTTP status code.
    pub status: u16,
    /// `Retry-After` seconds, if any.
    pub retry_after_secs: Option<u64>,
}

#[derive(Debug)]
struct FaultState {
    /// Armed failures, consumed in order by matching requests.
    fail: VecDeque<FailRule>,
    /// For each of the next watch streams, how many object events it sends before closing.
    close_after: VecDeque<usize>,
    /// Whether the next watch stream starts with a line that is not JSON.
    malformed_next: bool,
    /// For each of the next watch streams, how many object events it sends before the
    /// connection is cut in the middle of the next line.
    cut_after: VecDeque<usize>,
    /// Whether watches with `sendInitialEvents=true` are refused with 422, as by a server whose
    /// `WatchList` feature gate is off.
    refuse_watch_list: bool,
    /// Whether `shardSelector` is ignored, as by a server whose `ShardedListAndWatch` feature
    /// gate is off (no filtering, no `shardInfo` in lists).
    ignore_shard_selector: bool,
    /// Added to every response.
    delay: Duration,
    /// (page index, status) for the next paginated list.
    list_page: Option<(usize, u16)>,
    /// How often watches that allow bookmarks get one; zero disables them.
    bookmark_interval: Duration,
    /// How long reads from the watch cache wait for a resourceVersion the server has not
    /// reached yet.
    too_large_rv_wait: Duration,
    /// How long the kubelet takes to stop a scheduled Pod after a graceful delete; `None`:
    /// its whole grace period.
    pod_stop_time: Option<Duration>,
    /// Paged lists and streaming lists without end.
    endless: Option<EndlessList>,
}

/// Handle to the fault knobs of a [`TestApiServer`](super::TestApiServer); cheap to clone.
#[derive(Debug, Clone)]
pub struct Faults {
    state: Arc<Mutex<FaultState>>,
}

impl Default for Faults {
    fn default() -> Self {
        Self {
            state: Arc::new(Mutex::new(FaultState {
                fail: VecDeque::new(),
                close_after: VecDeque::new(),
                malformed_next: false,
                cut_after: VecDeque::new(),
                refuse_watch_list: false,
                ignore_shard_selector: false,
                delay: Duration::ZERO,
                list_page: None,
                bookmark_interval: DEFAULT_BOOKMARK_INTERVAL,
                too_large_rv_wait: DEFAULT_TOO_LARGE_RV_WAIT,
                pod_stop_time: None,
                endless: None,
            })),
        }
    }
}

impl Faults {
    fn lock(&self) -> MutexGuard<'_, FaultState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The next `count` requests of `verb` get HTTP `status` with a Kubernetes Status body whose
    /// reason matches the code (429 TooManyRequests, 500 InternalError, 410 Expired, 504 Timeout,
    /// ...). `retry_after_secs` adds a `Retry-After` header. Rules queue up in arming order.
    pub fn fail_next(&self, verb: Verb, status: u16, retry_after_secs: Option<u64>, count: usize) {
        if count == 0 {
            return;
        }
        self.lock().fail.push_back(FailRule {
            verb,
            status,
            retry_after_secs,
            remaining: count,
        });
    }

    /// The next `times` watch streams close (cleanly, end of body) right after sending `events`
    /// object events (ADDED, MODIFIED, DELETED; bookmarks are not counted). `events == 0` closes
    /// a stream right after its response headers.
    pub fn close_watch_after(&self, events: usize, times: usize) {
        self.lock()
            .close_after
            .extend(std::iter::repeat_n(events, times));
    }

    /// The next watch stream starts with one line that is not JSON, then carries on normally.
    pub fn malformed_line_next_watch(&self) {
        self.lock().malformed_next = true;
    }

    /// The next watch stream sends `events` object events, then half of a line, then the
    /// connection is cut (the chunked body ends without its last chunk, as when a proxy or the
    /// network resets the connection). The client sees a transport error mid-body.
    pub fn cut_watch_after(&self, events: usize) {
        self.lock().cut_after.push_back(events);
    }

    /// Refuse (`true`) watches with `sendInitialEvents=true` with 422 Invalid, as a server with
    /// the `WatchList` feature gate off does; `false` serves them again.
    pub fn refuse_watch_list(&self, refuse: bool) {
        self.lock().refuse_watch_list = refuse;
    }

    /// Ignore (`true`) the `shardSelector` of lists and watches, as a server with the
    /// `ShardedListAndWatch` feature gate off does (KEP-5866 is alpha in 1.36); `false` applies
    /// it again (the default).
    pub fn ignore_shard_selector(&self, ignore: bool) {
        self.lock().ignore_shard_selector = ignore;
    }

    /// Whether `shardSelector` is ignored.
    pub(crate) fn shard_selector_ignored(&self) -> bool {
        self.lock().ignore_shard_selector
    }

    /// Whether streaming lists are refused.
    pub(crate) fn watch_list_refused(&self) -> bool {
        self.lock().refuse_watch_list
    }

    /// Delays every response (watch: its headers) by `delay`; `Duration::ZERO` resets.
    pub fn slow(&self, delay: Duration) {
        self.lock().delay = delay;
    }

    /// In the next paginated list (a list with `limit`), page `page_index` fails with `status`.
    /// Page 0 is the request without `continue`; page N >= 1 is the N-th continuation.
    pub fn fail_list_page(&self, page_index: usize, status: u16) {
        self.lock().list_page = Some((page_index, status));
    }

    /// How often watches with `allowWatchBookmarks=true` get a BOOKMARK (default 1 s,
    /// `Duration::ZERO` = never). Read when a watch starts.
    pub fn bookmark_interval(&self, interval: Duration) {
        self.lock().bookmark_interval = interval;
    }

    /// How long a list at `resourceVersion=N` (NotOlderThan or Exact) or a watch with
    /// `sendInitialEvents=true` from N waits for the server to reach N before answering
    /// 504 Timeout "Too large resource version" (default [`DEFAULT_TOO_LARGE_RV_WAIT`], the
    /// watch cache's 3 s). Read when the request arrives.
    pub fn too_large_resource_version_wait(&self, wait: Duration) {
        self.lock().too_large_rv_wait = wait;
    }

    /// The wait for a resourceVersion the server has not reached.
    pub(crate) fn too_large_rv_wait(&self) -> Duration {
        self.lock().too_large_rv_wait
    }

    /// How long the kubelet takes to stop a scheduled Pod deleted with a grace period: the Pod
    /// (marked with `deletionTimestamp` at once) goes after this or its grace period,
    /// whichever is shorter. By default it takes the whole grace period (30 s unless the Pod or
    /// the DELETE sets another), as on a node that lets every container use all of it. Read
    /// when the DELETE arrives.
    pub fn pod_stop_time(&self, wait: Duration) {
        self.lock().pod_stop_time = Some(wait);
    }

    /// The time a graceful Pod deletion of `grace` takes.
    pub(crate) fn pod_termination(&self, grace: Duration) -> Duration {
        self.lock()
            .pod_stop_time
            .map_or(grace, |stop| stop.min(grace))
    }

    /// While armed (`Some`), lists never end: a paged list (one with `limit`) is answered with
    /// `limit` new objects of `object_bytes` each and a continue token on every page, and a
    /// streaming list (`sendInitialEvents=true`) sends new objects as its initial events and
    /// never its end bookmark. Once a list has sent `give_up_after` bytes the server gives up:
    /// a 500 page, or an ERROR event (500) that ends the stream. Lists without `limit` and
    /// plain watches are served as usual. `None` disarms it.
    pub fn endless_lists(&self, endless: Option<EndlessList>) {
        self.lock().endless = endless;
    }

    /// The endless-list fault, when armed.
    pub(crate) fn endless(&self) -> Option<EndlessList> {
        self.lock().endless
    }

    /// Disarms every fault and restores the defaults.
    pub fn reset(&self) {
        let mut s = self.lock();
        s.fail.clear();
        s.close_after.clear();
        s.malformed_next = false;
        s.cut_after.clear();
        s.refuse_watch_list = false;
        s.ignore_shard_selector = false;
        s.delay = Duration::ZERO;
        s.list_page = None;
        s.bookmark_interval = DEFAULT_BOOKMARK_INTERVAL;
        s.too_large_rv_wait = DEFAULT_TOO_LARGE_RV_WAIT;
        s.pod_stop_time = None;
        s.endless = None;
    }

    /// Consumes one armed failure for a request of `verb`, if any.
    pub(crate) fn take_failure(&self, verb: Verb) -> Option<InjectedFailure> {
        let mut s = self.lock();
        let idx = s.fail.iter().position(|r| r.verb == verb)?;
        let rule = s.fail.get_mut(idx)?;
        rule.remaining = rule.remaining.saturating_sub(1);
        let failure = InjectedFailure {
            status: rule.status,
            retry_after_secs: rule.retry_after_secs,
        };
        if rule.remaining == 0 {
            s.fail.remove(idx);
        }
        Some(failure)
    }

    /// Consumes the page failure if this paginated list request is the armed page.
    pub(crate) fn take_list_page_failure(&self, page_index: usize) -> Option<u16> {
        let mut s = self.lock();
        match s.list_page {
            Some((page, status)) if page == page_index => {
                s.list_page = None;
                Some(status)
            }
            _ => None,
        }
    }

    /// The per-response delay.
    pub(crate) fn delay(&self) -> Duration {
        self.lock().delay
    }

    /// The per-watch settings, consumed as a new watch starts.
    pub(crate) fn take_watch_faults(&self) -> WatchFaults {
        let mut s = self.lock();
        WatchFaults {
            close_after: s.close_after.pop_front(),
            malformed_line: std::mem::take(&mut s.malformed_next),
            cut_after: s.cut_after.pop_front(),
            bookmark_interval: s.bookmark_interval,
            endless: s.endless,
        }
    }
}

/// Faults and settings one watch stream runs with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WatchFaults {
    /// Close after this many object events.
    pub close_after: Option<usize>,
    /// Start with a line that is not JSON.
    pub malformed_line: bool,
    /// Cut the connection mid-line after this many object events.
    pub cut_after: Option<usize>,
    /// Bookmark period; zero = never.
    pub bookmark_interval: Duration,
    /// A streaming list's initial events without end.
    pub endless: Option<EndlessList>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fail_next_is_consumed_by_matching_verbs_only() {
        let f = Faults::default();
        f.fail_next(Verb::Watch, 500, None, 2);
        assert_eq!(f.take_failure(Verb::List), None);
        assert_eq!(f.take_failure(Verb::Watch).map(|x| x.status), Some(500));
        assert_eq!(f.take_failure(Verb::Watch).map(|x| x.status), Some(500));
        assert_eq!(f.take_failure(Verb::Watch), None);
    }

    #[test]
    fn close_after_applies_to_the_next_n_watches() {
        let f = Faults::default();
        f.close_watch_after(3, 2);
        assert_eq!(f.take_watch_faults().close_after, Some(3));
        assert_eq!(f.take_watch_faults().close_after, Some(3));
        assert_eq!(f.take_watch_faults().close_after, None);
    }
}
