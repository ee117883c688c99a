//! A [`ListerWatcher`] over the Kubernetes API through `kube`: any apiVersion/kind, namespaced
//! or cluster-wide, with label and field selectors.
//!
//! Requests go through `kube::Client` with the URLs and query strings `kube::Api<DynamicObject>`
//! builds (one difference: a first list page at resourceVersion "0" keeps its
//! `resourceVersion=0`, as client-go sends it, which `kube` drops when a limit is set). Responses
//! are read as text: each object's metadata is extracted from its JSON span and the span kept as
//! the object's JSON (re-assembled only to drop `managedFields`), so no JSON tree is built.
//!
//! Bodies are read with caps ([`SizeCaps`]): a watch event line longer than
//! `watch_event` or a list response longer than `list_body` is not read further; the request
//! fails with [`SourceError::TooLarge`] (the reflector relists after backoff) and is counted in
//! [`oversized_responses`]. Defaults: 16 MiB per watch event, 2 GiB per list response. etcd
//! refuses objects over 1.5 MiB (`--max-request-bytes`), so an event line is at most a few MiB
//! of JSON even with escaping: 16 MiB leaves a wide margin and still bounds what a broken or
//! hostile server can make the host buffer. Lists are paged (500 objects), but a list at
//! resourceVersion "0" is served whole from the API server's watch cache, ignoring the page
//! size: 2 GiB holds a cluster at Kubernetes' published limits (150,000 pods) with room, some
//! 200,000 objects of 10 KiB; raise `maxListSize` for larger informers.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, WatchParams};
use kube::core::Status;
use serde_json::value::RawValue;

use crate::informer::lister_watcher::{
    ListOptions, ListPage, ListerWatcher, SourceError, WatchEvent, WatchOptions, WatchStream,
};
use crate::informer::object::{Object, ObjectMeta, OwnerRef};
use crate::sync::lock;

/// Annotation on the bookmark that ends a streaming list's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Most bytes of an error response read (a `Status` is small).
const ERROR_BODY_CAP: usize = 1 << 20;

/// How much of a response the host reads before giving up on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeCaps {
    /// Longest watch event line, in bytes (`informers[].maxEventSize`).
    pub watch_event: usize,
    /// Longest list response body (one page), in bytes (`informers[].maxListSize`).
    pub list_body: usize,
}

impl SizeCaps {
    /// Default longest watch event line: 16 MiB.
    pub const DEFAULT_WATCH_EVENT: usize = 16 << 20;
    /// Default longest list response: 2 GiB (a list served whole from the watch cache of a
    /// cluster at Kubernetes' published limits, 150,000 pods, with room to spare; see
    /// [`crate::informer::lister_watcher::ListCaps::DEFAULT_BYTES`]).
    pub const DEFAULT_LIST_BODY: usize = 2 << 30;
}

impl Default for SizeCaps {
    fn default() -> Self {
        Self {
            watch_event: Self::DEFAULT_WATCH_EVENT,
            list_body: Self::DEFAULT_LIST_BODY,
        }
    }
}

/// Responses refused for their size, per informer name.
static OVERSIZED: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());

/// How many list responses and watch events of each informer were refused for their size.
pub fn oversized_responses() -> BTreeMap<String, u64> {
    lock(&OVERSIZED).clone()
}

pub use wisp_kinds::api::api_resource;

/// Lists and watches one resource type through a `kube::Client`.
#[derive(Clone)]
pub struct KubeSource {
    client: kube::Client,
    api: Api<DynamicObject>,
    resource: ApiResource,
    namespace: Option<String>,
    label_selector: Option<String>,
    field_selector: Option<String>,
    strip_managed_fields: bool,
    /// List and watch `PartialObjectMetadata` (client-go's metadata informer).
    metadata_only: bool,
    /// How much of a response is read.
    caps: SizeCaps,
    /// The informer's name, in errors and in [`oversized_responses`].
    name: String,
    /// With `sharding: {mode: shards}`: the hash ranges listed and watched.
    shard: Option<Arc<crate::source::shard::ShardView>>,
    /// The ranges the last list (or watch-list) served. A watch continues that list, so it
    /// must serve the same ranges: when they have changed since, it ends at once with
    /// `Reselected` and the reflector lists again.
    listed: Arc<Mutex<Option<crate::source::shard::Ranges>>>,
}

impl KubeSource {
    /// A source for `api_version` / `kind` (plural derived from the kind, as `kube` does),
    /// in `namespace` or, with `None`, in all namespaces (or cluster-scoped).
    pub fn new(
        client: kube::Client,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Self {
        Self::with_resource(client, api_resource(api_version, kind), namespace)
    }

    /// A source for an already resolved resource (e.g. from discovery).
    pub fn with_resource(
        client: kube::Client,
        resource: ApiResource,
        namespace: Option<&str>,
    ) -> Self {
        let api = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        Self {
            client,
            api,
            resource,
            namespace: namespace.map(str::to_owned),
            label_selector: None,
            field_selector: None,
            strip_managed_fields: true,
            metadata_only: false,
            caps: SizeCaps::default(),
            name: String::new(),
            shard: None,
            listed: Arc::default(),
        }
    }

    /// Lists and watches only the objects in `view`'s ranges: through `shardSelector` where
    /// the server applies it (it echoes `shardInfo`), and always filtered here as well; a
    /// change of the ranges ends the watch so the reflector relists.
    pub fn sharded(mut self, view: Arc<crate::source::shard::ShardView>) -> Self {
        self.shard = Some(view);
        self
    }

    /// `req` with `shardSelector=<selector>` added to its query.
    fn with_shard_selector(
        req: &mut http::Request<Vec<u8>>,
        selector: &str,
    ) -> Result<(), SourceError> {
        // A path segment's escaping is stricter than a query value needs: every character of a
        // selector that is not unreserved (quotes, parentheses, spaces, `|`, `,`) is escaped.
        let enc = wisp_kinds::api::path_segment(selector);
        let uri = format!("{}&shardSelector={enc}", req.uri());
        *req.uri_mut() = uri
            .parse()
            .map_err(|e: http::uri::InvalidUri| SourceError::Request(e.to_string()))?;
        Ok(())
    }

    /// Names the informer this source serves (in size errors and [`oversized_responses`]).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Caps on a watch event line and a list response (default [`SizeCaps::default`]).
    pub fn size_caps(mut self, caps: SizeCaps) -> Self {
        self.caps = caps;
        self
    }

    fn too_large(&self, what: &str, size: u64, cap: usize, setting: &'static str) -> SourceError {
        *lock(&OVERSIZED).entry(self.name.clone()).or_default() += 1;
        SourceError::TooLarge {
            what: format!("informer {:?} ({}): {what}", self.name, self.describe()),
            size,
            cap: cap as u64,
            setting,
        }
    }

    /// Sends `req`; an error status becomes its `SourceError` (its body read up to 1 MiB).
    async fn send(
        &self,
        req: http::Request<Vec<u8>>,
    ) -> Result<http::Response<kube::client::Body>, SourceError> {
        let res = self
            .client
            .send(req.map(kube::client::Body::from))
            .await
            .map_err(map_error)?;
        let code = res.status();
        if !(code.is_client_error() || code.is_server_error()) {
            return Ok(res);
        }
        let body = read_capped(res.into_body(), ERROR_BODY_CAP).await;
        let text = match &body {
            Ok(b) => String::from_utf8_lossy(b).into_owned(),
            Err(ReadError::TooLong(_)) => "error response too large".to_owned(),
            Err(ReadError::Read(e)) => format!("reading the error response: {e}"),
        };
        Err(match serde_json::from_str::<Status>(&text) {
            Ok(st) => map_status(&st),
            Err(_) => SourceError::Api {
                code: code.as_u16(),
                reason: code.canonical_reason().unwrap_or("").to_owned(),
                message: text.trim().to_owned(),
            },
        })
    }

    /// A list response body as text, read up to the list cap.
    async fn list_body(&self, req: http::Request<Vec<u8>>) -> Result<String, SourceError> {
        let res = self.send(req).await?;
        let cap = self.caps.list_body;
        let announced = res
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if let Some(n) = announced.filter(|n| *n > cap as u64) {
            return Err(self.too_large("list response", n, cap, "maxListSize"));
        }
        match read_capped(res.into_body(), cap).await {
            Ok(b) => String::from_utf8(b)
                .map_err(|e| SourceError::Decode(format!("list: not UTF-8: {e}"))),
            Err(ReadError::TooLong(n)) => {
                Err(self.too_large("list response", n, cap, "maxListSize"))
            }
            Err(ReadError::Read(e)) => Err(SourceError::Connect(format!("reading the list: {e}"))),
        }
    }

    /// Restricts to objects matching a label selector (e.g. `app=web,tier!=db`).
    pub fn labels(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into()).filter(|s: &String| !s.is_empty());
        self
    }

    /// Restricts to objects matching a field selector (e.g. `spec.nodeName=n1`).
    pub fn fields(mut self, selector: impl Into<String>) -> Self {
        self.field_selector = Some(selector.into()).filter(|s: &String| !s.is_empty());
        self
    }

    /// Lists and watches metadata only, as client-go's metadata informer does (`Accept:
    /// ...;as=PartialObjectMetadataList` / `as=PartialObjectMetadata`): the API server sends
    /// each object's `metadata` alone, and the objects keep the informer's apiVersion and kind
    /// (not `meta.k8s.io/v1 PartialObjectMetadata`), so plugins and actions see what they are.
    pub fn metadata_only(mut self, yes: bool) -> Self {
        self.metadata_only = yes;
        self
    }

    /// Whether `metadata.managedFields` is dropped from every object (default: yes).
    pub fn strip_managed_fields(mut self, strip: bool) -> Self {
        self.strip_managed_fields = strip;
        self
    }

    async fn list_page(&self, opts: ListOptions) -> Result<ListPage, SourceError> {
        let lp = ListParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            limit: opts.limit,
            continue_token: opts.continue_token.clone(),
            resource_version: Some(opts.resource_version.clone()).filter(|rv| !rv.is_empty()),
            ..ListParams::default()
        };
        let request = kube::core::Request::new(self.api.resource_url());
        let mut req = if self.metadata_only {
            request.list_metadata(&lp)
        } else {
            request.list(&lp)
        }
        .map_err(|e| SourceError::Request(e.to_string()))?;
        if opts.continue_token.is_none() && opts.resource_version == "0" && opts.limit.is_some() {
            let uri = format!("{}&resourceVersion=0", req.uri());
            *req.uri_mut() = uri
                .parse()
                .map_err(|e: http::uri::InvalidUri| SourceError::Request(e.to_string()))?;
        }
        let ranges = self.shard.as_ref().map(|v| v.ranges());
        if opts.continue_token.is_none() {
            *lock(&self.listed) = ranges.clone();
        }
        let selector = match (&self.shard, &ranges) {
            (Some(v), Some(r)) => v.selector(r),
            _ => None,
        };
        if let Some(sel) = &selector {
            Self::with_shard_selector(&mut req, sel)?;
        }
        req.extensions_mut().insert("list");
        let text = self.list_body(req).await?;
        let list: RawList<'_> =
            serde_json::from_str(&text).map_err(|e| SourceError::Decode(format!("list: {e}")))?;
        let mut items = list
            .items
            .iter()
            .map(|o| self.parse_raw(o.get()))
            .collect::<Result<Vec<_>, _>>()?;
        #[derive(serde::Deserialize, Default)]
        #[serde(rename_all = "camelCase", default)]
        struct ShardInfo {
            selector: Option<String>,
        }
        #[derive(serde::Deserialize, Default)]
        #[serde(rename_all = "camelCase", default)]
        struct ListMeta {
            resource_version: Option<String>,
            #[serde(rename = "continue")]
            continue_: Option<String>,
            shard_info: Option<ShardInfo>,
        }
        let md: ListMeta = match list.metadata {
            Some(m) => serde_json::from_str(m.get())
                .map_err(|e| SourceError::Decode(format!("list metadata: {e}")))?,
            None => ListMeta::default(),
        };
        if let (Some(view), Some(ranges)) = (&self.shard, &ranges) {
            if let Some(sel) = &selector
                && md.shard_info.as_ref().and_then(|i| i.selector.as_ref()) != Some(sel)
            {
                view.not_applied_by_server(sel);
            }
            items.retain(|o| view.keeps(ranges, o));
        }
        Ok(ListPage {
            resource_version: md.resource_version.unwrap_or_default(),
            continue_token: md.continue_.filter(|c| !c.is_empty()),
            items,
        })
    }

    async fn start_watch(&self, opts: WatchOptions) -> Result<WatchStream, SourceError> {
        let wp = WatchParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            timeout: Some(opts.timeout_seconds),
            bookmarks: opts.allow_bookmarks || opts.send_initial_events,
            send_initial_events: opts.send_initial_events,
        };
        let request = kube::core::Request::new(self.api.resource_url());
        let mut req = if self.metadata_only {
            request.watch_metadata(&wp, &opts.resource_version)
        } else {
            request.watch(&wp, &opts.resource_version)
        }
        .map_err(|e| SourceError::Request(e.to_string()))?;
        // Seen now: a change from here on ends the watch (below).
        let mut shard = self.shard.as_ref().map(|v| (v.clone(), v.subscribe()));
        let ranges = shard.as_mut().map(|(_, rx)| rx.borrow_and_update().clone());
        if let Some(now) = &ranges {
            let mut listed = lock(&self.listed);
            if opts.send_initial_events {
                // A watch-list: this watch is the list.
                *listed = Some(now.clone());
            } else if listed.as_ref().is_some_and(|l| l != now) {
                // The list this watch would continue served other ranges: list again. (Its
                // objects newly in range would otherwise never be seen.)
                return Ok(futures::stream::once(async {
                    Err(SourceError::Reselected(
                        "this replica's shard ranges changed since the list".into(),
                    ))
                })
                .boxed());
            }
        }
        if let (Some((v, _)), Some(r)) = (&shard, &ranges)
            && let Some(sel) = v.selector(r)
        {
            Self::with_shard_selector(&mut req, &sel)?;
        }
        req.extensions_mut().insert("watch");
        let res = self.send(req).await?;
        let me = self.clone();
        let cap = self.caps.watch_event;
        let events = capped_lines(res.into_body(), cap)
            .filter_map(move |line| {
                let out = match line {
                    Ok(l) if l.iter().all(u8::is_ascii_whitespace) => None,
                    Ok(l) => Some(
                        std::str::from_utf8(&l)
                            .map_err(|e| {
                                SourceError::Decode(format!("watch event: not UTF-8: {e}"))
                            })
                            .and_then(|l| me.parse_event(l)),
                    ),
                    Err(ReadError::TooLong(n)) => {
                        Some(Err(me.too_large("watch event", n, cap, "maxEventSize")))
                    }
                    // A transport failure mid-body (reset, unexpected EOF, timeout): reported as
                    // a broken stream, which the reflector ends as a normal close and answers
                    // with a re-watch from its last resourceVersion, no relist (the rule of
                    // every source: `WatchStream`). A partly read line is dropped.
                    Err(ReadError::Read(e)) => Some(Err(SourceError::Connect(format!(
                        "watch stream broken: {e}"
                    )))),
                };
                futures::future::ready(out)
            })
            .boxed();
        let Some((view, mut changed)) = shard else {
            return Ok(events);
        };
        let ranges = ranges.unwrap_or_default();
        // Events outside the ranges are dropped; a change of the ranges since they were read
        // (also while the request was under way) ends the watch with Reselected, so the
        // reflector relists at once with the new ranges.
        let end = futures::stream::once(async move {
            let _ = changed.changed().await;
            Err(SourceError::Reselected(
                "this replica's shard ranges changed".into(),
            ))
        });
        let kept = events.filter(move |e| {
            futures::future::ready(match e {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o)) => {
                    view.keeps(&ranges, o)
                }
                _ => true,
            })
        });
        // (The reflector ends a watch at its first error.)
        Ok(futures::stream::select(kept, end).boxed())
    }
}

/// Why a body was not read whole.
#[derive(Debug)]
enum ReadError {
    /// Longer than the cap: this many bytes had been read when reading stopped.
    TooLong(u64),
    /// The transport failed.
    Read(kube::Error),
}

/// The whole of `body`, or [`ReadError::TooLong`] as soon as it passes `cap` bytes.
async fn read_capped(body: kube::client::Body, cap: usize) -> Result<Vec<u8>, ReadError> {
    use http_body_util::BodyExt;
    let mut chunks = body.into_data_stream();
    let mut buf = Vec::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(ReadError::Read)?;
        if buf.len() + chunk.len() > cap {
            return Err(ReadError::TooLong((buf.len() + chunk.len()) as u64));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf)
}

/// The lines of `body` (without their `\n`); a line longer than `cap` ends the stream with
/// [`ReadError::TooLong`] once `cap` is passed, so at most `cap` plus one chunk is buffered.
fn capped_lines(
    body: kube::client::Body,
    cap: usize,
) -> impl futures::Stream<Item = Result<Vec<u8>, ReadError>> + Send + 'static {
    use http_body_util::BodyExt;
    struct Lines<S> {
        chunks: S,
        buf: Vec<u8>,
        /// Start of the current line in `buf`.
        start: usize,
        /// Bytes of the current line already searched for `\n`.
        scanned: usize,
        done: bool,
    }
    let state = Lines {
        chunks: body.into_data_stream(),
        buf: Vec::new(),
        start: 0,
        scanned: 0,
        done: false,
    };
    futures::stream::unfold(state, move |mut st| async move {
        loop {
            if st.done {
                return None;
            }
            let from = st.start + st.scanned;
            if let Some(p) = st.buf[from..].iter().position(|b| *b == b'\n') {
                let end = from + p;
                let line = st.buf[st.start..end].to_vec();
                st.start = end + 1;
                st.scanned = 0;
                return Some((Ok(line), st));
            }
            st.scanned = st.buf.len() - st.start;
            if st.scanned > cap {
                st.done = true;
                let n = st.scanned as u64;
                return Some((Err(ReadError::TooLong(n)), st));
            }
            // Drop the lines already returned before reading more.
            st.buf.drain(..st.start);
            st.start = 0;
            match st.chunks.next().await {
                Some(Ok(chunk)) => st.buf.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    st.done = true;
                    return Some((Err(ReadError::Read(e)), st));
                }
                None => {
                    st.done = true;
                    if st.buf.is_empty() {
                        return None;
                    }
                    let rest = std::mem::take(&mut st.buf);
                    return Some((Ok(rest), st));
                }
            }
        }
    })
}

/// The parts of `metadata` the host extracts, read straight from the JSON text.
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct MetaView {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    deletion_timestamp: Option<String>,
    labels: Option<std::collections::BTreeMap<String, String>>,
    annotations: Option<std::collections::BTreeMap<String, String>>,
    owner_references: Option<Vec<OwnerView>>,
}

#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct OwnerView {
    api_version: String,
    kind: String,
    name: String,
    uid: String,
    controller: Option<bool>,
    block_owner_deletion: Option<bool>,
}

/// A list response with its items kept as raw JSON spans.
#[derive(serde::Deserialize)]
struct RawList<'a> {
    #[serde(default, borrow)]
    metadata: Option<&'a RawValue>,
    #[serde(borrow, default)]
    items: Vec<&'a RawValue>,
}

/// A watch event with its object kept as a raw JSON span.
#[derive(serde::Deserialize)]
struct RawEvent<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(borrow)]
    object: &'a RawValue,
}

/// A JSON object with its values kept as raw spans.
type RawMap<'a> = std::collections::BTreeMap<Key<'a>, &'a RawValue>;

/// An object key: borrowed from the text, or owned when the text spells it with escapes
/// (`"a\u003cb"`, valid JSON that a borrowed `&str` cannot hold).
#[derive(PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
struct Key<'a>(Cow<'a, str>);

impl std::borrow::Borrow<str> for Key<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Key<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(s.to_owned())))
            }
        }
        d.deserialize_str(Visit)
    }
}

impl Key<'static> {
    const fn of(s: &'static str) -> Self {
        Key(Cow::Borrowed(s))
    }
}

/// Reads one watch line (`{"type": ..., "object": ...}`) of `api_version`/`kind` objects, as the
/// watch stream does: the object's metadata is read from its JSON text (see [`decode_object`]),
/// bookmarks keep their resourceVersion, ERROR events map to [`SourceError`]s. Never panics;
/// text that is not JSON is a [`SourceError::Decode`].
pub fn decode_watch_line(
    line: &str,
    api_version: &str,
    kind: &str,
    strip_managed_fields: bool,
) -> Result<WatchEvent, SourceError> {
    let object = |raw: &RawValue| decode_object(raw.get(), api_version, kind, strip_managed_fields);
    let ev: RawEvent<'_> =
        serde_json::from_str(line).map_err(|e| SourceError::Decode(format!("watch event: {e}")))?;
    match ev.kind.as_str() {
        "ADDED" => object(ev.object).map(WatchEvent::Added),
        "MODIFIED" => object(ev.object).map(WatchEvent::Modified),
        "DELETED" => object(ev.object).map(WatchEvent::Deleted),
        "BOOKMARK" => {
            #[derive(serde::Deserialize)]
            struct Bookmark {
                metadata: MetaView,
            }
            let b: Bookmark = serde_json::from_str(ev.object.get())
                .map_err(|e| SourceError::Decode(format!("bookmark: {e}")))?;
            let end = b
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(INITIAL_EVENTS_END));
            Ok(WatchEvent::Bookmark {
                initial_events_end: end.is_some_and(|v| v == "true"),
                resource_version: b.metadata.resource_version.unwrap_or_default(),
            })
        }
        "ERROR" => {
            let st: Status = serde_json::from_str(ev.object.get())
                .map_err(|e| SourceError::Decode(format!("error event: {e}")))?;
            Ok(WatchEvent::Error(map_status(&st)))
        }
        other => Err(SourceError::Decode(format!(
            "unknown watch event type {other:?}"
        ))),
    }
}

/// Builds an object from its JSON text without building a JSON tree: metadata is read from the
/// text; the text is kept as is unless `managedFields` must go or apiVersion/kind must be filled
/// in with `api_version`/`kind` (then the top level is reassembled from the raw spans).
pub fn decode_object(
    raw: &str,
    api_version: &str,
    kind_name: &str,
    strip_managed_fields: bool,
) -> Result<Arc<Object>, SourceError> {
    let bad = |e: serde_json::Error| SourceError::Decode(format!("{kind_name} object: {e}"));
    let mut top: RawMap<'_> = serde_json::from_str(raw).map_err(bad)?;
    let md_raw = top
        .get("metadata")
        .copied()
        .ok_or_else(|| SourceError::Decode(format!("{kind_name} object without metadata")))?;
    let view: MetaView = serde_json::from_str(md_raw.get()).map_err(bad)?;
    let text_of = |k: &str| {
        top.get(k)
            .and_then(|v| serde_json::from_str::<String>(v.get()).ok())
            .filter(|s| !s.is_empty())
    };
    // A metadata-only read types every object `meta.k8s.io/v1 PartialObjectMetadata`: it is
    // given the informer's apiVersion and kind instead, as if they were missing.
    let (mut given_api_version, mut kind) = (text_of("apiVersion"), text_of("kind"));
    if kind.as_deref() == Some("PartialObjectMetadata")
        && given_api_version.as_deref() == Some("meta.k8s.io/v1")
    {
        (given_api_version, kind) = (None, None);
    }
    // The key may be spelled with escapes (`"managedField\u0073"`): then parse to be sure.
    let strip = strip_managed_fields
        && (md_raw.get().contains("\"managedFields\"") || md_raw.get().contains("\\u"));
    let rebuilt_md = if strip {
        let mut md: RawMap<'_> = serde_json::from_str(md_raw.get()).map_err(bad)?;
        md.remove("managedFields");
        Some(RawValue::from_string(serde_json::to_string(&md).map_err(bad)?).map_err(bad)?)
    } else {
        None
    };
    let json = if rebuilt_md.is_some() || given_api_version.is_none() || kind.is_none() {
        let filled_api =
            RawValue::from_string(serde_json::to_string(api_version).map_err(bad)?).map_err(bad)?;
        let filled_kind =
            RawValue::from_string(serde_json::to_string(kind_name).map_err(bad)?).map_err(bad)?;
        if let Some(md) = &rebuilt_md {
            top.insert(Key::of("metadata"), md);
        }
        if given_api_version.is_none() {
            top.insert(Key::of("apiVersion"), &filled_api);
        }
        if kind.is_none() {
            top.insert(Key::of("kind"), &filled_kind);
        }
        Some(serde_json::to_string(&top).map_err(bad)?)
    } else {
        // Kept as it came: encoded straight from the response's text, no copy in between.
        None
    };
    let name = view
        .name
        .ok_or_else(|| SourceError::Decode(format!("{kind_name} object without metadata.name")))?;
    let meta = ObjectMeta {
        api_version: given_api_version.unwrap_or_else(|| api_version.to_owned()),
        kind: kind.unwrap_or_else(|| kind_name.to_owned()),
        namespace: view.namespace.filter(|n| !n.is_empty()),
        name,
        uid: view.uid.unwrap_or_default(),
        resource_version: view.resource_version.unwrap_or_default(),
        generation: view.generation,
        deletion_timestamp: view.deletion_timestamp,
        labels: view
            .labels
            .map(|m| m.into_iter().collect())
            .unwrap_or_default(),
        annotations: view
            .annotations
            .map(|m| m.into_iter().collect())
            .unwrap_or_default(),
        owner_references: view
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .map(|r| OwnerRef {
                api_version: r.api_version,
                kind: r.kind,
                name: r.name,
                uid: r.uid,
                controller: r.controller.unwrap_or(false),
                block_owner_deletion: r.block_owner_deletion.unwrap_or(false),
            })
            .collect(),
    };
    Ok(Arc::new(Object::from_parts(
        &meta,
        json.as_deref().unwrap_or(raw),
    )))
}

impl KubeSource {
    fn parse_raw(&self, raw: &str) -> Result<Arc<Object>, SourceError> {
        decode_object(
            raw,
            &self.resource.api_version,
            &self.resource.kind,
            self.strip_managed_fields,
        )
    }

    fn parse_event(&self, line: &str) -> Result<WatchEvent, SourceError> {
        decode_watch_line(
            line,
            &self.resource.api_version,
            &self.resource.kind,
            self.strip_managed_fields,
        )
    }
}

impl ListerWatcher for KubeSource {
    fn list(&self, opts: ListOptions) -> BoxFuture<'_, Result<ListPage, SourceError>> {
        self.list_page(opts).boxed()
    }

    fn watch(&self, opts: WatchOptions) -> BoxFuture<'_, Result<WatchStream, SourceError>> {
        self.start_watch(opts).boxed()
    }

    fn describe(&self) -> String {
        let mut s = format!("{}/{}", self.resource.api_version, self.resource.kind);
        match &self.namespace {
            Some(ns) => s.push_str(&format!(" in namespace {ns}")),
            None => s.push_str(" in all namespaces"),
        }
        if let Some(l) = &self.label_selector {
            s.push_str(&format!(" with labels {l}"));
        }
        if let Some(f) = &self.field_selector {
            s.push_str(&format!(" with fields {f}"));
        }
        if self.metadata_only {
            s.push_str(" (metadata only)");
        }
        s
    }
}

/// Maps a Kubernetes `Status` to the reflector's error kinds.
pub fn map_status(status: &Status) -> SourceError {
    let too_large = status.details.as_ref().is_some_and(|d| {
        d.causes
            .iter()
            .any(|c| c.reason == "ResourceVersionTooLarge")
    }) || status.message.contains("Too large resource version");
    match status.code {
        410 => SourceError::Expired(status.message.clone()),
        _ if status.reason == "Expired" || status.reason == "Gone" => {
            SourceError::Expired(status.message.clone())
        }
        _ if too_large => SourceError::TooLargeResourceVersion(status.message.clone()),
        429 => SourceError::TooManyRequests {
            message: status.message.clone(),
            retry_after: status
                .details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(u64::from(s))),
        },
        code => SourceError::Api {
            code,
            reason: status.reason.clone(),
            message: status.message.clone(),
        },
    }
}

/// Maps a `kube` client error to the reflector's error kinds.
pub fn map_error(e: kube::Error) -> SourceError {
    match e {
        kube::Error::Api(status) => map_status(&status),
        kube::Error::SerdeError(e) => SourceError::Decode(e.to_string()),
        kube::Error::BuildRequest(e) => SourceError::Request(e.to_string()),
        kube::Error::HttpError(e) => SourceError::Request(e.to_string()),
        other => SourceError::Connect(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(line: &str) -> Arc<Object> {
        match decode_watch_line(line, "v1", "Pod", true) {
            Ok(WatchEvent::Added(o)) => o,
            other => panic!("{other:?}"),
        }
    }

    /// The ERROR event an API server sends after an unsafe delete reaches the reflector as a
    /// store-read error, not an internal one (so it relists).
    #[test]
    fn a_storage_read_error_event_is_not_an_internal_error() {
        let line = r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","code":500,"reason":"StorageReadError","message":"corrupt object has been deleted"}}"#;
        match decode_watch_line(line, "v1", "Pod", true) {
            Ok(WatchEvent::Error(e)) => {
                assert!(e.is_store_read_error(), "{e:?}");
                assert!(!e.is_internal_error(), "{e:?}");
            }
            other => panic!("{other:?}"),
        }
        let line = r#"{"type":"ERROR","object":{"kind":"Status","code":500,"reason":"InternalError","message":"etcd"}}"#;
        assert!(matches!(
            decode_watch_line(line, "v1", "Pod", true),
            Ok(WatchEvent::Error(e)) if e.is_internal_error()
        ));
    }

    #[test]
    fn keys_spelled_with_escapes_are_read_like_any_json_parser_reads_them() {
        // Valid JSON (Go escapes `<` in keys too); a borrowed key could not hold it.
        let o = object(
            r#"{"type":"ADDED","object":{"metadata":{"name":"w"},"a\u003cb":1,"kin\u0064":"Widget"}}"#,
        );
        let v: serde_json::Value = serde_json::from_str(o.json()).unwrap();
        assert_eq!(v["a<b"], 1);
        assert_eq!(o.meta().kind(), "Widget");
        assert_eq!(o.meta().api_version(), "v1", "filled in");
    }

    #[test]
    fn managed_fields_spelled_with_escapes_are_stripped_too() {
        let o = object(
            r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","managedField\u0073":[{}]}}}"#,
        );
        assert!(!o.json().contains("managedField"), "{}", o.json());
        assert_eq!(o.meta().name(), "p");
    }
}
