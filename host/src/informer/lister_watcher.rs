//! The source the reflector lists and watches through (client-go's `ListerWatcher`).
//! Implementations live in `crate::source` (kube API, directory of manifests).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;

use super::object::Object;

/// Options of one list request (one page).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// `resourceVersion`: "" = most recent, "0" = any, otherwise not older than / exactly.
    pub resource_version: String,
    /// Page size; `None` = everything at once.
    pub limit: Option<u32>,
    /// Continue token of the previous page.
    pub continue_token: Option<String>,
    /// The bounds of the whole list this page belongs to (a source that lists several times
    /// to answer one page, as one over several namespaces, keeps to them). `None`: unbounded.
    pub caps: Option<ListCaps>,
}

/// Bounds of one whole list: every page of it, or a streaming list's initial events
/// (`informers[].maxListTotalSize`, `informers[].maxListObjects`). Bytes are what the host
/// holds of the objects ([`Object::heap_size`]: their JSON and metadata).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListCaps {
    /// Most bytes of objects in one list.
    pub bytes: u64,
    /// Most objects in one list.
    pub objects: u64,
}

impl ListCaps {
    /// Default most bytes: 2 GiB (as `maxListSize`, the longest one response may be: a list
    /// served whole from the watch cache is that size paged or not). Kubernetes' published
    /// limit is 150,000 pods per cluster; a pod takes ~2.8 KB as lists count it here (JSON and
    /// metadata; more with long specs), so 2 GiB lists twice that many (BENCHMARKS.md,
    /// *Scale-out*: one informer of 300,000 pods lists ~0.8 GB), where 512 MiB refused them.
    pub const DEFAULT_BYTES: u64 = 2 << 30;
    /// Default most objects: 1,000,000 (some 20 times the objects of a 5,000-node cluster's
    /// largest kind).
    pub const DEFAULT_OBJECTS: u64 = 1_000_000;
}

impl Default for ListCaps {
    fn default() -> Self {
        Self {
            bytes: Self::DEFAULT_BYTES,
            objects: Self::DEFAULT_OBJECTS,
        }
    }
}

/// What one list has taken so far against its [`ListCaps`].
#[derive(Debug)]
pub struct ListBudget {
    caps: Option<ListCaps>,
    what: String,
    bytes: u64,
    objects: u64,
}

impl ListBudget {
    /// A budget of `caps` (`None`: unbounded) for a list of `what` (named in its error).
    pub fn new(caps: Option<ListCaps>, what: impl Into<String>) -> Self {
        Self {
            caps,
            what: what.into(),
            bytes: 0,
            objects: 0,
        }
    }

    /// Counts `items` in; [`SourceError::ListOverCap`] once the list is over a cap.
    pub fn take<'a>(
        &mut self,
        items: impl IntoIterator<Item = &'a Arc<Object>>,
    ) -> Result<(), SourceError> {
        let Some(caps) = self.caps else {
            return Ok(());
        };
        for o in items {
            self.objects += 1;
            self.bytes += o.heap_size() as u64;
        }
        let over = |taken: u64, cap: u64, unit: &'static str, setting: &'static str| {
            (taken > cap).then(|| SourceError::ListOverCap {
                what: self.what.clone(),
                taken,
                cap,
                unit,
                setting,
            })
        };
        match over(self.objects, caps.objects, "objects", "maxListObjects")
            .or_else(|| over(self.bytes, caps.bytes, "bytes", "maxListTotalSize"))
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Options of one watch request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchOptions {
    /// Start after this resourceVersion ("" = from the current state).
    pub resource_version: String,
    /// Server-side timeout of the watch.
    pub timeout_seconds: u32,
    /// Ask for BOOKMARK events.
    pub allow_bookmarks: bool,
    /// Streaming list: the watch first sends the current state, then a bookmark annotated
    /// `k8s.io/initial-events-end: "true"`.
    pub send_initial_events: bool,
}

/// One page of a list.
#[derive(Clone, Debug, Default)]
pub struct ListPage {
    /// The list's resourceVersion.
    pub resource_version: String,
    /// Token for the next page, if any.
    pub continue_token: Option<String>,
    /// The objects of this page.
    pub items: Vec<Arc<Object>>,
}

/// One event of a watch stream.
#[derive(Clone, Debug)]
pub enum WatchEvent {
    /// ADDED.
    Added(Arc<Object>),
    /// MODIFIED.
    Modified(Arc<Object>),
    /// DELETED (the object's final state).
    Deleted(Arc<Object>),
    /// BOOKMARK: progress to `resource_version` with no object change.
    Bookmark {
        /// The bookmark's resourceVersion.
        resource_version: String,
        /// Marks the end of a streaming list's initial events.
        initial_events_end: bool,
    },
    /// ERROR event in the stream (e.g. 410 Expired).
    Error(SourceError),
    /// The source's own resourceVersion moved with no event from the server: a
    /// multi-namespace watch's composite version after one namespace's event. The reflector
    /// records it as its last synced version; it is not counted as a watch event.
    Progress(String),
}

/// A watch stream. An `Err` item ends the watch; what the reflector does next depends on it:
/// - [`SourceError::Connect`]: the transport broke mid-stream (reset, unexpected EOF, timeout).
///   The reflector treats it as a normal close and re-watches from its last resourceVersion,
///   without a relist (as client-go's StreamWatcher treats EOF and probable EOFs). Report a
///   broken stream this way, or just end the stream: both re-watch.
/// - [`SourceError::Decode`]: undecodable data, an internal error (re-watch within the
///   internal-error retry window, then relist).
/// - Anything else: as the same error from the server (see each variant).
pub type WatchStream = BoxStream<'static, Result<WatchEvent, SourceError>>;

/// What a source reports when a request fails. Which ones the reflector retries is said on each.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SourceError {
    /// 410 Gone / Expired: the resourceVersion is older than the server keeps. Relist from "".
    #[error("resource version expired: {0}")]
    Expired(String),
    /// The source now selects other objects (a replica's shard ranges changed): the watch ends
    /// and the reflector relists at once, without backoff, so objects that left the selection
    /// are delivered as deletions and new ones as additions.
    #[error("selection changed: {0}")]
    Reselected(String),
    /// The resourceVersion is newer than the server knows (504 ResourceVersionTooLarge). Relist from "".
    #[error("resource version too large: {0}")]
    TooLargeResourceVersion(String),
    /// 429: back off and retry the same request (watch: no relist).
    #[error("too many requests: {message}")]
    TooManyRequests {
        /// Server message.
        message: String,
        /// Server's Retry-After, if it said.
        retry_after: Option<Duration>,
    },
    /// Any other status from the server. An internal error ([`SourceError::is_internal_error`])
    /// is retried by a re-watch within the retry window; any other ends the watch with a relist.
    #[error("API error {code} {reason}: {message}")]
    Api {
        /// HTTP status code.
        code: u16,
        /// Status reason.
        reason: String,
        /// Status message.
        message: String,
    },
    /// The server could not be reached (connection refused, reset...), or a watch stream broke
    /// in transport: back off and retry the same request (a broken watch: re-watch at once).
    #[error("cannot reach the API server: {0}")]
    Connect(String),
    /// The server sent something that is not a valid object or event: treated as an internal error.
    #[error("cannot decode the API server's response: {0}")]
    Decode(String),
    /// A list response or a watch event larger than the host accepts: the host stopped reading
    /// it (nothing that size was held in memory). The reflector relists after backoff.
    #[error(
        "{what}: over the cap of {cap} bytes ({size} bytes or more; raise {setting} if it is legitimate)"
    )]
    TooLarge {
        /// What was too large, naming the informer.
        what: String,
        /// The size seen: the announced length, or what was read when reading stopped.
        size: u64,
        /// The cap.
        cap: u64,
        /// The setting that sets the cap.
        setting: &'static str,
    },
    /// One list, all its pages (or a streaming list's initial events) together, holds more
    /// objects or bytes than the host accepts: the partial list is dropped and the reflector
    /// relists after backoff (no fall-back from a streaming list to a list).
    #[error(
        "{what}: the list is over {setting}: {taken} {unit} or more across its pages (or initial events), the cap is {cap}; the partial list was dropped (if it is legitimate, raise the informer's {setting} to at least {}, or narrow the informer: namespaces, selectors, sharding)",
        raised(*cap, unit)
    )]
    ListOverCap {
        /// What was listed, naming the informer once the reflector has it.
        what: String,
        /// What was taken when the list was stopped.
        taken: u64,
        /// The cap.
        cap: u64,
        /// `objects` or `bytes`.
        unit: &'static str,
        /// The setting that sets the cap.
        setting: &'static str,
    },
    /// A local problem building the request; not retryable.
    #[error("invalid request: {0}")]
    Request(String),
}

/// The Status reasons apimachinery knows (k8s.io/apimachinery pkg/api/errors/errors.go,
/// `knownReasons`): a 500 with one of these is not an internal error unless the reason says so.
const KNOWN_REASONS: [&str; 19] = [
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "ServerTimeout",
    "StorageReadError",
    "Timeout",
    "TooManyRequests",
    "BadRequest",
    "MethodNotAllowed",
    "NotAcceptable",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "InternalError",
    "Expired",
    "ServiceUnavailable",
];

impl SourceError {
    /// 410 Expired.
    pub fn is_expired(&self) -> bool {
        matches!(self, SourceError::Expired(_))
    }

    /// Too large resourceVersion.
    pub fn is_too_large_resource_version(&self) -> bool {
        matches!(self, SourceError::TooLargeResourceVersion(_))
    }

    /// 429.
    pub fn is_too_many_requests(&self) -> bool {
        matches!(self, SourceError::TooManyRequests { .. })
    }

    /// An internal error as apimachinery's `IsInternalError` reads a Status (reason
    /// `InternalError`, or a 500 whose reason is none of the known ones: k8s.io/apimachinery
    /// pkg/api/errors/errors.go), or an undecodable response (client-go reports it as a 500
    /// `InternalError`). A 500 `StorageReadError` is not one.
    pub fn is_internal_error(&self) -> bool {
        match self {
            SourceError::Api { code, reason, .. } => {
                reason == "InternalError" || (*code == 500 && !KNOWN_REASONS.contains(&&**reason))
            }
            SourceError::Decode(_) => true,
            _ => false,
        }
    }

    /// A 500 with reason `StorageReadError`: the server could not read an object from storage
    /// (a corrupt object, then unsafe-deleted). The reflector relists at once, whatever the
    /// internal-error retry window, so the deleted object leaves the cache
    /// (client-go `TestReflectorReplacesStoreOnUnsafeDelete`).
    pub fn is_store_read_error(&self) -> bool {
        matches!(self, SourceError::Api { reason, .. } if reason == "StorageReadError")
    }

    /// Errors on watch start after which the reflector backs off and re-watches without a
    /// relist (client-go `isWatchErrorRetriable`): 429 and unreachable server.
    pub fn is_retriable_watch_start(&self) -> bool {
        matches!(
            self,
            SourceError::TooManyRequests { .. } | SourceError::Connect(_)
        )
    }
}

/// Lists and watches one kind of object.
pub trait ListerWatcher: Send + Sync + 'static {
    /// Lists one page.
    fn list(&self, opts: ListOptions) -> BoxFuture<'_, Result<ListPage, SourceError>>;
    /// Starts a watch. A stream that breaks in transport reports [`SourceError::Connect`] (or
    /// just ends): the reflector re-watches from its last resourceVersion, without a relist
    /// (see [`WatchStream`]).
    fn watch(&self, opts: WatchOptions) -> BoxFuture<'_, Result<WatchStream, SourceError>>;
    /// What is listed, for logs (e.g. `v1/Pod in namespace default`).
    fn describe(&self) -> String;
}

/// A whole list: its items, its resourceVersion, and whether it came back in pages.
pub struct WholeList {
    /// Every page's items, in order.
    pub items: Vec<Arc<Object>>,
    /// The list's resourceVersion (the first page's).
    pub resource_version: String,
    /// The server split it into pages.
    pub paged: bool,
}

/// Every page of a list at `rv` with pages of `limit`; an Expired continuation lists again
/// without pages (as client-go's pager does). The pages are counted into `budget` (which may
/// hold earlier parts of the same list, e.g. other namespaces): over its caps,
/// [`SourceError::ListOverCap`] and what was read is dropped.
pub async fn list_all<L: ListerWatcher + ?Sized>(
    lw: &L,
    rv: &str,
    limit: Option<u32>,
    budget: &mut ListBudget,
) -> Result<WholeList, SourceError> {
    let caps = budget.caps;
    let before = (budget.bytes, budget.objects);
    let first = lw
        .list(ListOptions {
            resource_version: rv.to_owned(),
            limit,
            continue_token: None,
            caps,
        })
        .await?;
    budget.take(&first.items)?;
    let resource_version = first.resource_version;
    let mut items = first.items;
    let mut token = first.continue_token.filter(|t| !t.is_empty());
    let paged = token.is_some();
    while let Some(t) = token {
        let page = lw
            .list(ListOptions {
                resource_version: String::new(),
                limit,
                continue_token: Some(t),
                caps,
            })
            .await;
        match page {
            Ok(p) => {
                budget.take(&p.items)?;
                items.extend(p.items);
                token = p.continue_token.filter(|t| !t.is_empty());
            }
            Err(e) if e.is_expired() => {
                tracing::info!(source = %lw.describe(), "list continuation expired; listing again without pages");
                // What was read goes before the list is read again, and out of the budget.
                drop(std::mem::take(&mut items));
                (budget.bytes, budget.objects) = before;
                let full = lw
                    .list(ListOptions {
                        resource_version: rv.to_owned(),
                        limit: None,
                        continue_token: None,
                        caps,
                    })
                    .await?;
                budget.take(&full.items)?;
                return Ok(WholeList {
                    items: full.items,
                    resource_version: full.resource_version,
                    paged,
                });
            }
            Err(e) => return Err(e),
        }
    }
    Ok(WholeList {
        items,
        resource_version,
        paged,
    })
}

/// What to raise a list cap of `cap` `unit`s to: twice it, as the config writes it (`4Gi`).
/// (The list was cut at the cap: its whole size is not known.)
fn raised(cap: u64, unit: &str) -> String {
    let twice = cap.saturating_mul(2);
    if unit != "bytes" {
        return twice.to_string();
    }
    match twice {
        b if b >= 1 << 30 && b % (1 << 30) == 0 => format!("{}Gi", b >> 30),
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}Mi", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}Ki", b >> 10),
        b => b.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cap_is_raised_to_twice_it_as_the_config_writes_it() {
        assert_eq!(super::raised(2 << 30, "bytes"), "4Gi");
        assert_eq!(super::raised(384 << 20, "bytes"), "768Mi");
        assert_eq!(super::raised(1000, "bytes"), "2000");
        assert_eq!(super::raised(1_000_000, "objects"), "2000000");
    }
}
