//! GET on a collection: resourceVersion semantics, selectors and consistent pagination.
//!
//! The first page of a paginated list fixes its resourceVersion; the filtered, sorted items are
//! kept in a small cache keyed by the id inside the continue token, and continuation pages are
//! cut from that snapshot. A token whose snapshot was evicted is served by rebuilding the state
//! at its RV from history; a token whose RV is below the compaction floor gets 410 Expired,
//! whose Status carries in `metadata.continue` a token for the rest of the list at the latest
//! resourceVersion (an inconsistent list), as a real server's does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Shared;
use super::faults::EndlessList;
use super::http::{Query, Target};
use super::object::Obj;
use super::selector::Filter;
use super::status::{
    ApiError, bad_request, injected_failure, json_response, read_error, status_body,
};
use super::store::ReadAt;

/// Snapshots of paginated lists kept at once; older ones are rebuilt from history if needed.
const SNAPSHOT_CACHE_SIZE: usize = 16;

/// The state a continue token carries.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct ContinueToken {
    /// Always `meta.k8s.io/v1`, as in Kubernetes' tokens.
    v: String,
    /// The list's resourceVersion; -1 in the token of a 410 for a compacted one: go on from
    /// `after` at the latest resourceVersion (as etcd3's `handleCompactedErrorForPaging`).
    rv: i64,
    /// Index of the next item in the snapshot.
    start: usize,
    /// Snapshot cache id.
    snap: u64,
    /// Index of the page this token asks for (1 = first continuation).
    page: usize,
    /// Namespace and name of the last object already served: where a list whose snapshot is
    /// gone goes on.
    #[serde(default)]
    after: (String, String),
    /// A page of a list without end ([`super::faults::Faults::endless_lists`]) minted it: once
    /// that fault is off, its list is gone (410), as a real server's list whose snapshot was
    /// compacted; it never continues into the store's objects.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    endless: bool,
}

/// The 410 for the continue token of a list without end once that fault is off.
const ENDLESS_LIST_GONE: &str = "The provided continue parameter belongs to a list that is gone (the injected list without end was turned off). Start a new list without the continue parameter.";

/// The continuation of a list whose resourceVersion was compacted, as the 410 message
/// promises (staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go, `inconsistentContinue`).
const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// Namespace and name of an object, its place in a sorted list.
fn key_of(obj: &Obj) -> (String, String) {
    (obj.namespace().to_string(), obj.name().to_string())
}

impl ContinueToken {
    fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    fn decode(token: &str) -> Option<Self> {
        let bytes = URL_SAFE_NO_PAD.decode(token.trim_end_matches('=')).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// Filtered, sorted items of paginated lists in progress.
#[derive(Debug, Default)]
pub(crate) struct SnapshotCache {
    inner: Mutex<Snapshots>,
}

#[derive(Debug, Default)]
struct Snapshots {
    /// Last id handed out.
    last_id: u64,
    /// (id, items), oldest first.
    entries: VecDeque<(u64, Arc<Vec<Obj>>)>,
}

impl SnapshotCache {
    fn lock(&self) -> MutexGuard<'_, Snapshots> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn insert(&self, items: Arc<Vec<Obj>>) -> u64 {
        let mut s = self.lock();
        s.last_id += 1;
        let id = s.last_id;
        s.entries.push_back((id, items));
        while s.entries.len() > SNAPSHOT_CACHE_SIZE {
            s.entries.pop_front();
        }
        id
    }

    fn get(&self, id: u64) -> Option<Arc<Vec<Obj>>> {
        let s = self.lock();
        s.entries
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, items)| Arc::clone(items))
    }

    fn remove(&self, id: u64) {
        self.lock().entries.retain(|(i, _)| *i != id);
    }
}

/// How `resourceVersion` / `resourceVersionMatch` / `limit` select the state to list.
fn read_at(query: &Query, paginated: bool) -> Result<ReadAt, ApiError> {
    let rv = query.get("resourceVersion").map_or("", String::as_str);
    let matching = query.get("resourceVersionMatch").map_or("", String::as_str);
    if rv.is_empty() {
        if !matching.is_empty() {
            return Err(ApiError::invalid(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        return Ok(ReadAt::Latest);
    }
    let n: u64 = rv.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "resourceVersion: Invalid value: \"{rv}\": must be an unsigned integer"
        ))
    })?;
    match (matching, n) {
        ("" | "NotOlderThan", 0) => Ok(ReadAt::Latest),
        ("", _) if paginated => Ok(ReadAt::Exact(n)),
        ("" | "NotOlderThan", _) => Ok(ReadAt::NotOlderThan(n)),
        ("Exact", 0) => Err(ApiError::invalid(
            "resourceVersionMatch: Forbidden: resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
        )),
        ("Exact", _) => Ok(ReadAt::Exact(n)),
        (other, _) => Err(ApiError::invalid(format!(
            "resourceVersionMatch: Unsupported value: \"{other}\""
        ))),
    }
}

/// Serves a list request. A list at a resourceVersion N the server has not reached (NotOlderThan
/// or Exact, paginated or not: 1.36 serves them all from the watch cache, which first waits to
/// be fresh) waits for it (3 s by default), then answers 504 Timeout "Too large resource
/// version".
pub(crate) async fn list(shared: &Shared, target: &Target, query: &Query) -> Response {
    let filter = match Filter::from_request(shared, target, query) {
        Ok(filter) => filter,
        Err(e) => return bad_request(&e),
    };
    let limit = match query.get("limit").map(|l| l.parse::<usize>()) {
        None | Some(Ok(0)) => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => return bad_request("limit: Invalid value: must be a non-negative integer"),
    };
    if let (Some(endless), Some(limit)) = (shared.faults.endless(), limit) {
        return endless_page(shared, target, query, endless, limit);
    }
    if let Some(token) = query.get("continue").filter(|t| !t.is_empty()) {
        return continue_list(shared, target, &filter, token, limit);
    }
    let at = match read_at(query, limit.is_some()) {
        Ok(at) => at,
        Err(e) => return e.into_response(),
    };
    if let ReadAt::NotOlderThan(n) | ReadAt::Exact(n) = at {
        shared.wait_for_resource_version(n).await;
    }
    if limit.is_some()
        && let Some(status) = shared.faults.take_list_page_failure(0)
    {
        return injected_failure(status, None);
    }
    let snapshot = match shared
        .store
        .list(&target.resource, target.namespace.as_deref(), at)
    {
        Ok(snapshot) => snapshot,
        Err(e) => return read_error(e),
    };
    let items: Vec<Obj> = snapshot
        .objects
        .into_iter()
        .filter(|o| filter.matches_stored(o))
        .collect();
    let page = Page {
        rv: snapshot.rv,
        items: Arc::new(items),
        start: 0,
        next_page: 1,
        snapshot_id: None,
    };
    serve_page(shared, target, &filter, page, limit)
}

/// A page of a list without end ([`super::faults::Faults::endless_lists`]): `limit` new
/// objects and a continue token, until the list has sent `give_up_after` bytes (then 500).
fn endless_page(
    shared: &Shared,
    target: &Target,
    query: &Query,
    endless: EndlessList,
    limit: usize,
) -> Response {
    let page = query
        .get("continue")
        .and_then(|t| ContinueToken::decode(t))
        .map_or(0, |t| t.page);
    let sent = page
        .saturating_mul(limit)
        .saturating_mul(endless.object_bytes);
    if sent >= endless.give_up_after {
        return injected_failure(500, None);
    }
    let rv = shared.store.resource_version();
    let (api_version, kind) = (
        target.resource.api_version(),
        shared.store.kind_of(&target.resource),
    );
    let namespace = target.namespace.as_deref().unwrap_or("endless");
    let token = ContinueToken {
        v: "meta.k8s.io/v1".into(),
        rv: i64::try_from(rv).unwrap_or(i64::MAX),
        start: 0,
        snap: 0,
        page: page + 1,
        after: Default::default(),
        endless: true,
    };
    let mut body = format!(
        r#"{{"kind":"{kind}List","apiVersion":"{api_version}","metadata":{{"resourceVersion":"{rv}","continue":"{}"}},"items":["#,
        token.encode()
    )
    .into_bytes();
    for i in 0..limit {
        if i > 0 {
            body.push(b',');
        }
        let n = (page * limit + i) as u64;
        body.extend(endless.object(&api_version, &kind, namespace, n, rv));
    }
    body.extend_from_slice(b"]}");
    json_response(StatusCode::OK, body)
}

fn continue_list(
    shared: &Shared,
    target: &Target,
    filter: &Filter,
    token: &str,
    limit: Option<usize>,
) -> Response {
    let Some(token) = ContinueToken::decode(token) else {
        return bad_request("continue key is not valid: illegal base64 data or JSON");
    };
    if let Some(status) = shared.faults.take_list_page_failure(token.page) {
        return injected_failure(status, None);
    }
    if token.endless {
        let status = status_body(410, "Expired", ENDLESS_LIST_GONE, None);
        return json_response(StatusCode::GONE, status.to_string());
    }
    let Ok(rv) = u64::try_from(token.rv) else {
        return continue_latest(shared, target, filter, &token, limit);
    };
    if rv < shared.store.floor() {
        // The 410 carries a token that goes on at the latest resourceVersion, after the last
        // object served.
        let latest = ContinueToken {
            rv: -1,
            start: 0,
            snap: 0,
            ..token
        };
        let mut status = status_body(410, "Expired", INCONSISTENT_CONTINUE, None);
        status["metadata"] = serde_json::json!({"continue": latest.encode()});
        return json_response(StatusCode::GONE, status.to_string());
    }
    let (items, snapshot_id) = match shared.snapshots.get(token.snap) {
        Some(items) => (items, Some(token.snap)),
        None => match shared.store.list(
            &target.resource,
            target.namespace.as_deref(),
            ReadAt::Exact(rv),
        ) {
            Ok(snapshot) => {
                let items: Vec<Obj> = snapshot
                    .objects
                    .into_iter()
                    .filter(|o| filter.matches_stored(o))
                    .collect();
                (Arc::new(items), None)
            }
            Err(e) => return read_error(e),
        },
    };
    let page = Page {
        rv,
        items,
        start: token.start,
        next_page: token.page + 1,
        snapshot_id,
    };
    serve_page(shared, target, filter, page, limit)
}

/// The rest of a list from the token of a 410: the objects after the last one served, at the
/// latest resourceVersion (an inconsistent list, as the message warned).
fn continue_latest(
    shared: &Shared,
    target: &Target,
    filter: &Filter,
    token: &ContinueToken,
    limit: Option<usize>,
) -> Response {
    let snapshot = match shared.store.list(
        &target.resource,
        target.namespace.as_deref(),
        ReadAt::Latest,
    ) {
        Ok(snapshot) => snapshot,
        Err(e) => return read_error(e),
    };
    let items: Vec<Obj> = snapshot
        .objects
        .into_iter()
        .filter(|o| key_of(o) > token.after && filter.matches_stored(o))
        .collect();
    let page = Page {
        rv: snapshot.rv,
        items: Arc::new(items),
        start: 0,
        next_page: token.page + 1,
        snapshot_id: None,
    };
    serve_page(shared, target, filter, page, limit)
}

/// One page to cut from a list snapshot.
struct Page {
    rv: u64,
    items: Arc<Vec<Obj>>,
    start: usize,
    next_page: usize,
    snapshot_id: Option<u64>,
}

fn serve_page(
    shared: &Shared,
    target: &Target,
    filter: &Filter,
    page: Page,
    limit: Option<usize>,
) -> Response {
    let total = page.items.len();
    let start = page.start.min(total);
    let end = limit.map_or(total, |l| start.saturating_add(l).min(total));
    let mut metadata = Map::new();
    metadata.insert("resourceVersion".into(), Value::String(page.rv.to_string()));
    if let Some((_, _, selector)) = &filter.shard {
        metadata.insert(
            "shardInfo".into(),
            serde_json::json!({ "selector": selector }),
        );
    }
    if end < total {
        let snap = page
            .snapshot_id
            .unwrap_or_else(|| shared.snapshots.insert(Arc::clone(&page.items)));
        let token = ContinueToken {
            v: "meta.k8s.io/v1".into(),
            rv: i64::try_from(page.rv).unwrap_or(i64::MAX),
            start: end,
            snap,
            page: page.next_page,
            after: end
                .checked_sub(1)
                .map(|i| key_of(&page.items[i]))
                .unwrap_or_default(),
            endless: false,
        };
        metadata.insert("continue".into(), Value::String(token.encode()));
        if !filter.has_selectors() {
            metadata.insert("remainingItemCount".into(), Value::from(total - end));
        }
    } else if let Some(id) = page.snapshot_id {
        shared.snapshots.remove(id);
    }
    let head = serde_json::json!({
        "kind": format!("{}List", shared.store.kind_of(&target.resource)),
        "apiVersion": target.resource.api_version(),
        "metadata": metadata,
    })
    .to_string();
    let items = &page.items[start..end];
    let mut body =
        Vec::with_capacity(head.len() + 16 + items.iter().map(|o| o.json.len() + 1).sum::<usize>());
    // `head` ends with '}': reopen it to append the items array.
    body.extend_from_slice(&head.as_bytes()[..head.len().saturating_sub(1)]);
    body.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&item.json);
    }
    body.extend_from_slice(b"]}");
    json_response(StatusCode::OK, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Query {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn continue_tokens_round_trip() {
        let token = ContinueToken {
            v: "meta.k8s.io/v1".into(),
            rv: 42,
            start: 500,
            snap: 3,
            page: 1,
            after: ("default".into(), "web-499".into()),
            endless: false,
        };
        let endless = ContinueToken {
            endless: true,
            ..ContinueToken::decode(&token.encode()).unwrap()
        };
        assert_eq!(ContinueToken::decode(&endless.encode()), Some(endless));
        assert_eq!(ContinueToken::decode(&token.encode()), Some(token));
        assert_eq!(ContinueToken::decode("not a token"), None);
    }

    #[test]
    fn resource_version_semantics_follow_the_api_conventions() {
        let at = |pairs: &[(&str, &str)], paginated| read_at(&q(pairs), paginated).ok();
        assert_eq!(at(&[], false), Some(ReadAt::Latest));
        assert_eq!(at(&[("resourceVersion", "0")], false), Some(ReadAt::Latest));
        assert_eq!(
            at(&[("resourceVersion", "7")], false),
            Some(ReadAt::NotOlderThan(7))
        );
        assert_eq!(
            at(&[("resourceVersion", "7")], true),
            Some(ReadAt::Exact(7))
        );
        assert_eq!(
            at(
                &[("resourceVersion", "7"), ("resourceVersionMatch", "Exact")],
                false
            ),
            Some(ReadAt::Exact(7))
        );
        assert_eq!(
            at(
                &[
                    ("resourceVersion", "7"),
                    ("resourceVersionMatch", "NotOlderThan")
                ],
                true
            ),
            Some(ReadAt::NotOlderThan(7))
        );
        assert_eq!(at(&[("resourceVersion", "x")], false), None);
        assert_eq!(
            at(
                &[("resourceVersion", "0"), ("resourceVersionMatch", "Exact")],
                false
            ),
            None
        );
    }
}
