//! GET with `watch=true`: one chunked 200 response, one JSON WatchEvent per line.
//!
//! The handler registers the watch with the store (which hands back the initial events) and
//! spawns one task per stream. The task reads the watch's unbounded event channel, applies the
//! namespace and selectors (turning selector transitions into ADDED / DELETED), writes lines into
//! a small bounded body channel, and ends on timeout, close, expiry, shutdown or disconnect.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use serde_json::json;
use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::mpsc::{self, UnboundedReceiver};
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::Shared;
use super::faults::{EndlessList, WatchFaults};
use super::history::{EventKind, LoggedEvent};
use super::http::{Query, Target, flag};
use super::object::Obj;
use super::resource::ResourceKey;
use super::selector::Filter;
use super::status::{
    bad_request, error_response, status_body, too_large_details, too_large_message,
};
use super::store::{Initial, WatchFrom, WatchMsg};
use super::table;

/// Chunks buffered between a watch task and its connection; the task waits when a client reads
/// slowly, while writers keep filling its unbounded event channel.
const BODY_BUFFER: usize = 64;

/// Queued events coalesced into one chunk at most, to keep up with thousands of changes a second.
const MAX_EVENTS_PER_CHUNK: usize = 256;

/// A piece of a watch body; an `Err` makes the server cut the connection mid-body.
type Chunk = Result<Bytes, std::io::Error>;

/// What a cut-connection fault sends before the cut: the start of a line, never finished.
const CUT_LINE: &[u8] = b"{\"type\":\"MODIFIED\",\"object\":{\"kind\":";

/// The line a malformed-line fault sends.
const MALFORMED_LINE: &[u8] = b"this is not json {\n";

/// Serves a watch request.
///
/// A streaming list (`sendInitialEvents=true`) from a resourceVersion the server has not
/// reached waits for it (3 s by default), then answers, as the watch cache does, with a
/// 200 stream holding one ERROR event: 504 Timeout "Too large resource version". A plain watch
/// from such a resourceVersion does not wait: it starts at once and sends only the events
/// newer than the one asked, as the watch cache's `cacheWatcher` does
/// (staging/src/k8s.io/apiserver/pkg/storage/cacher/cache_watcher.go, `process`).
pub(crate) async fn watch(
    shared: &Arc<Shared>,
    target: Target,
    query: &Query,
    table_wanted: bool,
) -> Response {
    let filter = match Filter::from_request(shared, &target, query) {
        Ok(filter) => filter,
        Err(e) => return bad_request(&e),
    };
    let bookmarks = flag(query, "allowWatchBookmarks");
    let matching = query.get("resourceVersionMatch").map_or("", String::as_str);
    let rv = query.get("resourceVersion").map_or("", String::as_str);
    let timeout = match query.get("timeoutSeconds").map(|t| t.parse::<u64>()) {
        None | Some(Ok(0)) => None,
        Some(Ok(secs)) => Some(Duration::from_secs(secs)),
        Some(Err(_)) => {
            return bad_request("timeoutSeconds: Invalid value: must be a non-negative integer");
        }
    };
    let from = if flag(query, "sendInitialEvents") {
        if shared.faults.watch_list_refused() {
            return error_response(
                422,
                "Invalid",
                "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
            );
        }
        if matching != "NotOlderThan" {
            return error_response(
                422,
                "Invalid",
                "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            );
        }
        if !bookmarks {
            return error_response(
                422,
                "Invalid",
                "allowWatchBookmarks: Required value: allowWatchBookmarks must be true when sendInitialEvents is true",
            );
        }
        if let Ok(n) = rv.parse::<u64>()
            && n > 0
            && !shared.wait_for_resource_version(n).await
        {
            let current = shared.store.resource_version();
            let status = status_body(
                504,
                "Timeout",
                &too_large_message(n, current),
                Some(too_large_details()),
            );
            let line = format!("{}\n", json!({"type": "ERROR", "object": status}));
            let mut response = Response::new(Body::from(line));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return response;
        }
        WatchFrom::InitialEvents
    } else if !matching.is_empty() {
        return error_response(
            422,
            "Invalid",
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        );
    } else {
        match rv {
            "" | "0" => WatchFrom::Now,
            n => match n.parse::<u64>() {
                Ok(n) => WatchFrom::Rv(n),
                Err(_) => return bad_request(&format!("resourceVersion: Invalid value: \"{n}\"")),
            },
        }
    };

    let faults = shared.faults.take_watch_faults();
    let (body_tx, body_rx) = mpsc::channel::<Chunk>(BODY_BUFFER);
    let stream = futures::stream::unfold(body_rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    match shared.store.watch(&target.resource, from) {
        Err(expired) => {
            let status = status_body(
                410,
                "Expired",
                &format!(
                    "too old resource version: {} ({})",
                    expired.requested, expired.floor
                ),
                None,
            );
            let line = format!("{}\n", json!({"type": "ERROR", "object": status}));
            // The receiver is still held by the body stream, so this cannot fail.
            let _ = body_tx.try_send(Ok(Bytes::from(line)));
        }
        Ok(registration) => {
            let columns = table_wanted
                .then(|| table::custom_columns(shared, &target.resource))
                .flatten();
            let task = WatchTask {
                shared: Arc::clone(shared),
                kind: shared.store.kind_of(&target.resource),
                resource: target.resource,
                id: registration.id,
                filter,
                bookmarks,
                faults,
                deadline: timeout.map(|t| Instant::now() + t),
                synced_rv: registration.synced_rv,
                after: match from {
                    WatchFrom::Rv(n) => n,
                    WatchFrom::Now | WatchFrom::InitialEvents => 0,
                },
                sent: 0,
                buf: BytesMut::new(),
                body: body_tx,
                table: table_wanted.then(|| {
                    query
                        .get("includeObject")
                        .cloned()
                        .unwrap_or_else(|| "Metadata".into())
                }),
                columns,
            };
            let end_bookmark = from == WatchFrom::InitialEvents;
            tokio::spawn(task.run(registration.initial, end_bookmark, registration.rx));
        }
    }
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = StatusCode::OK;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Whether a watch goes on after handling a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

/// One open watch stream.
struct WatchTask {
    /// For the store (bookmark RVs, unregistering) and the shutdown signal.
    shared: Arc<Shared>,
    /// The watched collection.
    resource: ResourceKey,
    /// Kind written into bookmarks.
    kind: String,
    /// Registry id in the store.
    id: u64,
    /// Namespace and selectors.
    filter: Filter,
    /// Whether the client allowed bookmarks.
    bookmarks: bool,
    /// Fault settings taken when the watch started.
    faults: WatchFaults,
    /// End of `timeoutSeconds`.
    deadline: Option<Instant>,
    /// The RV every event up to which has been handled; what a bookmark reports.
    synced_rv: u64,
    /// The resourceVersion the client asked to watch from: no event at or below it is sent,
    /// even when it is newer than the server's.
    after: u64,
    /// Object events sent, for `close_watch_after`.
    sent: usize,
    /// Lines not yet handed to the connection.
    buf: BytesMut,
    /// Chunks to the connection.
    body: mpsc::Sender<Chunk>,
    /// `includeObject` when the client asked for Tables: every object event is then a Table
    /// of one row.
    table: Option<String>,
    /// With Tables of a custom resource: its CRD's printer columns.
    columns: Option<Vec<super::discovery::PrinterColumn>>,
}

impl Drop for WatchTask {
    fn drop(&mut self) {
        self.shared.store.unregister(&self.resource, self.id);
    }
}

impl WatchTask {
    async fn run(
        mut self,
        initial: Initial,
        end_bookmark: bool,
        mut rx: UnboundedReceiver<WatchMsg>,
    ) {
        if self.faults.malformed_line {
            self.buf.extend_from_slice(MALFORMED_LINE);
        }
        if self.faults.close_after == Some(0) {
            self.flush().await;
            return;
        }
        if self.faults.cut_after == Some(0) {
            self.cut().await;
            return;
        }
        let flow = match initial {
            Initial::Objects(objects) => self.initial_objects(&objects),
            Initial::Replay(events) => self.replay(&events),
        };
        if flow == Flow::Stop {
            self.end().await;
            return;
        }
        if let (true, Some(endless)) = (end_bookmark, self.faults.endless) {
            self.endless_initial_events(endless).await;
            return;
        }
        if end_bookmark {
            self.bookmark(true);
        }
        if !self.flush().await {
            return;
        }
        let mut ticker = self.ticker();
        let mut shutdown = self.shared.shutdown.clone();
        loop {
            let deadline = self.deadline;
            tokio::select! {
                biased;
                _ = shutdown.changed() => return,
                () = async { match deadline { Some(d) => tokio::time::sleep_until(d).await, None => std::future::pending().await } } => break,
                msg = rx.recv() => {
                    if self.handle(msg) == Flow::Stop || self.drain(&mut rx, MAX_EVENTS_PER_CHUNK) == Flow::Stop {
                        break;
                    }
                }
                _ = async { match ticker.as_mut() { Some(t) => t.tick().await, None => std::future::pending().await } } => {
                    // Events up to `current` were queued before it was read: handle them first so
                    // the bookmark never claims an RV whose events this client has not seen.
                    let current = self.shared.store.resource_version();
                    if self.drain(&mut rx, usize::MAX) == Flow::Stop {
                        break;
                    }
                    self.synced_rv = self.synced_rv.max(current);
                    self.bookmark(false);
                }
                () = self.body.closed() => return,
            }
            if !self.flush().await {
                return;
            }
        }
        self.end().await;
    }

    /// Initial events without end ([`super::faults::Faults::endless_lists`]): new objects and
    /// never the end bookmark, until `give_up_after` bytes (then an ERROR event, 500) or until
    /// the client hangs up.
    async fn endless_initial_events(&mut self, endless: EndlessList) {
        let rv = self.shared.store.resource_version();
        let api_version = self.resource.api_version();
        let namespace = self.filter.namespace.clone();
        let namespace = namespace.as_deref().unwrap_or("endless");
        let mut sent = 0usize;
        for n in 0u64.. {
            if sent >= endless.give_up_after {
                let status = status_body(500, "InternalError", "gave up (injected fault)", None);
                self.line(&json!({"type": "ERROR", "object": status}).to_string());
                self.flush().await;
                return;
            }
            let obj = endless.object(&api_version, &self.kind, namespace, n, rv);
            sent += obj.len();
            self.buf
                .extend_from_slice(b"{\"type\":\"ADDED\",\"object\":");
            self.buf.extend_from_slice(&obj);
            self.buf.extend_from_slice(b"}\n");
            if !self.flush().await {
                return;
            }
        }
    }

    /// Ends the stream: cleanly, or with a cut connection when that fault was armed and due.
    async fn end(&mut self) {
        match self.faults.cut_after {
            Some(n) if self.sent >= n => self.cut().await,
            _ => {
                self.flush().await;
            }
        }
    }

    /// Sends what is buffered and the start of a line, then cuts the connection.
    async fn cut(&mut self) {
        self.buf.extend_from_slice(CUT_LINE);
        if self.flush().await {
            // Let the connection write what was sent before the cut (as the network would have).
            tokio::time::sleep(Duration::from_millis(50)).await;
            let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "watch cut");
            let _ = self.body.send(Err(reset)).await;
        }
    }

    fn ticker(&self) -> Option<Interval> {
        let period = self.faults.bookmark_interval;
        if !self.bookmarks || period.is_zero() {
            return None;
        }
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Some(ticker)
    }

    fn initial_objects(&mut self, objects: &[Obj]) -> Flow {
        for obj in objects {
            if self.filter.matches_stored(obj) && self.object_event("ADDED", obj) == Flow::Stop {
                return Flow::Stop;
            }
        }
        Flow::Continue
    }

    fn replay(&mut self, events: &[Arc<LoggedEvent>]) -> Flow {
        for event in events {
            if self.event(event) == Flow::Stop {
                return Flow::Stop;
            }
        }
        Flow::Continue
    }

    /// Handles up to `max` already queued messages without waiting.
    fn drain(&mut self, rx: &mut UnboundedReceiver<WatchMsg>, max: usize) -> Flow {
        for _ in 0..max {
            match rx.try_recv() {
                Ok(msg) => {
                    if self.handle(Some(msg)) == Flow::Stop {
                        return Flow::Stop;
                    }
                }
                Err(TryRecvError::Empty) => return Flow::Continue,
                Err(TryRecvError::Disconnected) => return Flow::Stop,
            }
        }
        Flow::Continue
    }

    fn handle(&mut self, msg: Option<WatchMsg>) -> Flow {
        match msg {
            Some(WatchMsg::Event(event)) => self.event(&event),
            Some(WatchMsg::Expire) => {
                let current = self.shared.store.resource_version();
                let message = format!("too old resource version: {} ({current})", self.synced_rv);
                let status = status_body(410, "Expired", &message, None);
                self.line(&json!({"type": "ERROR", "object": status}).to_string());
                Flow::Stop
            }
            Some(WatchMsg::Close) | None => Flow::Stop,
        }
    }

    /// Sends a logged change as this watch sees it through its filter.
    fn event(&mut self, event: &LoggedEvent) -> Flow {
        self.synced_rv = self.synced_rv.max(event.rv);
        if event.rv <= self.after {
            return Flow::Continue;
        }
        let now = self.filter.matches_stored(&event.object);
        let before = event
            .prev
            .as_ref()
            .is_some_and(|p| self.filter.matches_stored(p));
        let kind = match (event.kind, before, now) {
            (EventKind::Added, _, true) => "ADDED",
            (EventKind::Modified, true, true) => "MODIFIED",
            (EventKind::Modified, false, true) => "ADDED",
            (EventKind::Modified, true, false) => "DELETED",
            (EventKind::Deleted, true, _) => "DELETED",
            _ => return Flow::Continue,
        };
        self.object_event(kind, &event.object)
    }

    fn object_event(&mut self, kind: &str, obj: &Obj) -> Flow {
        self.buf.extend_from_slice(b"{\"type\":\"");
        self.buf.extend_from_slice(kind.as_bytes());
        self.buf.extend_from_slice(b"\",\"object\":");
        match &self.table {
            None => self.buf.extend_from_slice(&obj.json),
            Some(include) => {
                let value = obj.value();
                let rv = value.pointer("/metadata/resourceVersion").cloned();
                let table = table::table(
                    &self.kind,
                    self.columns.as_deref(),
                    std::slice::from_ref(&value),
                    json!({"resourceVersion": rv}),
                    include,
                    self.sent == 0,
                );
                self.buf.extend_from_slice(table.to_string().as_bytes());
            }
        }
        self.buf.extend_from_slice(b"}\n");
        self.sent += 1;
        match (self.faults.close_after, self.faults.cut_after) {
            (Some(n), _) | (_, Some(n)) if self.sent >= n => Flow::Stop,
            _ => Flow::Continue,
        }
    }

    fn bookmark(&mut self, initial_events_end: bool) {
        let mut metadata = json!({"resourceVersion": self.synced_rv.to_string()});
        if initial_events_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let object = json!({
            "kind": self.kind,
            "apiVersion": self.resource.api_version(),
            "metadata": metadata,
        });
        self.line(&json!({"type": "BOOKMARK", "object": object}).to_string());
    }

    fn line(&mut self, line: &str) {
        self.buf.extend_from_slice(line.as_bytes());
        self.buf.extend_from_slice(b"\n");
    }

    /// Hands buffered lines to the connection; false once the client is gone or the server stops.
    async fn flush(&mut self) -> bool {
        if self.buf.is_empty() {
            return true;
        }
        let chunk = self.buf.split().freeze();
        let mut shutdown = self.shared.shutdown.clone();
        tokio::select! {
            sent = self.body.send(Ok(chunk)) => sent.is_ok(),
            _ = shutdown.changed() => false,
        }
    }
}
