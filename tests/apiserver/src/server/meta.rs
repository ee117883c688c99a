//! Metadata-only reads, as client-go's metadata client asks for them: `Accept:
//! application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1` on a GET of one object or a
//! watch, `as=PartialObjectMetadataList` on a list. The answer carries each object's `metadata`
//! alone, typed `meta.k8s.io/v1` `PartialObjectMetadata` (the list `PartialObjectMetadataList`);
//! watch events keep their type, `ERROR` events their Status. A media type the server cannot
//! give (`as=` something else, or a list asked as a single object and the reverse) is refused
//! with 406 NotAcceptable unless the `Accept` list also offers plain JSON, as a real server does.

use axum::body::{Body, Bytes};
use axum::response::Response;
use futures::StreamExt;
use serde_json::{Value, json};

use super::status::error_response;

/// What the client asked to receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum As {
    /// Whole objects (plain JSON).
    Objects,
    /// `as=PartialObjectMetadata`.
    Partial,
    /// `as=PartialObjectMetadataList`.
    PartialList,
    /// Only media types the server does not serve.
    Unsupported,
}

/// Reads an `Accept` header: the first media range the server can serve wins.
pub(crate) fn wanted(accept: &str) -> As {
    if accept.trim().is_empty() {
        return As::Objects;
    }
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        if !matches!(media, "application/json" | "application/*" | "*/*") {
            continue;
        }
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let param = |k: &str| params.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        match param("as") {
            None => return As::Objects,
            Some(kind @ ("PartialObjectMetadata" | "PartialObjectMetadataList"))
                if param("g") == Some("meta.k8s.io") && matches!(param("v"), Some("v1")) =>
            {
                return if kind == "PartialObjectMetadata" {
                    As::Partial
                } else {
                    As::PartialList
                };
            }
            Some(_) => continue,
        }
    }
    As::Unsupported
}

fn not_acceptable(what: &str) -> Response {
    error_response(
        406,
        "NotAcceptable",
        &format!(
            "only the following media types are accepted: application/json, application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1, application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1 ({what})"
        ),
    )
}

/// `obj` as a `PartialObjectMetadata`.
fn partial(obj: &Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// Whether `response` is a success whose body must be rewritten.
fn rewrite(response: &Response) -> bool {
    response.status().is_success()
}

async fn body_json(response: Response) -> Option<(axum::http::response::Parts, Value)> {
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.ok()?;
    Some((parts, serde_json::from_slice(&bytes).ok()?))
}

fn with_body(parts: axum::http::response::Parts, body: &Value) -> Response {
    Response::from_parts(parts, Body::from(body.to_string()))
}

/// A GET of one object, answered as asked.
pub(crate) async fn object(response: Response, want: As) -> Response {
    match want {
        As::Objects => response,
        As::PartialList => not_acceptable("a single object cannot be a list"),
        As::Unsupported => not_acceptable("no acceptable media type"),
        As::Partial if !rewrite(&response) => response,
        As::Partial => match body_json(response).await {
            Some((parts, obj)) => with_body(parts, &partial(&obj)),
            None => error_response(500, "InternalError", "unreadable object"),
        },
    }
}

/// A list, answered as asked.
pub(crate) async fn list(response: Response, want: As) -> Response {
    match want {
        As::Objects => response,
        As::Partial => not_acceptable("a list must be asked as PartialObjectMetadataList"),
        As::Unsupported => not_acceptable("no acceptable media type"),
        As::PartialList if !rewrite(&response) => response,
        As::PartialList => match body_json(response).await {
            Some((parts, list)) => {
                let items: Vec<Value> = list
                    .get("items")
                    .and_then(Value::as_array)
                    .map(|items| items.iter().map(partial).collect())
                    .unwrap_or_default();
                let body = json!({
                    "apiVersion": "meta.k8s.io/v1",
                    "kind": "PartialObjectMetadataList",
                    "metadata": list.get("metadata").cloned().unwrap_or_else(|| json!({})),
                    "items": items,
                });
                with_body(parts, &body)
            }
            None => error_response(500, "InternalError", "unreadable list"),
        },
    }
}

/// One watch event line, its object made partial (an `ERROR` event's Status is kept; a
/// bookmark keeps only what it had: metadata).
fn event_line(line: &[u8]) -> Vec<u8> {
    let Ok(mut event) = serde_json::from_slice::<Value>(line) else {
        return line.to_vec();
    };
    if event.get("type").and_then(Value::as_str) != Some("ERROR")
        && let Some(obj) = event.get("object")
    {
        event["object"] = partial(obj);
    }
    let mut out = event.to_string().into_bytes();
    out.push(b'\n');
    out
}

/// A watch, answered as asked: the stream is rewritten line by line as it flows.
pub(crate) fn watch(response: Response, want: As) -> Response {
    match want {
        As::Objects => response,
        As::PartialList => not_acceptable("a watch must be asked as PartialObjectMetadata"),
        As::Unsupported => not_acceptable("no acceptable media type"),
        As::Partial if !rewrite(&response) => response,
        As::Partial => {
            let (parts, body) = response.into_parts();
            let mut pending: Vec<u8> = Vec::new();
            let lines = body.into_data_stream().map(move |chunk| {
                let chunk = chunk?;
                pending.extend_from_slice(&chunk);
                let mut out = Vec::new();
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let line = &line[..line.len() - 1];
                    if !line.iter().all(u8::is_ascii_whitespace) {
                        out.extend(event_line(line));
                    }
                }
                Ok::<Bytes, axum::Error>(Bytes::from(out))
            });
            Response::from_parts(parts, Body::from_stream(lines))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_headers_are_read_as_a_real_server_reads_them() {
        assert_eq!(wanted(""), As::Objects);
        assert_eq!(wanted("application/json"), As::Objects);
        assert_eq!(
            wanted("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"),
            As::PartialList
        );
        assert_eq!(
            wanted(
                "application/json; as=PartialObjectMetadata; g=meta.k8s.io; v=v1, application/json"
            ),
            As::Partial
        );
        assert_eq!(
            wanted("application/json;as=Table;g=meta.k8s.io;v=v1, application/json"),
            As::Objects,
            "an unsupported rendering falls back to the next range"
        );
        assert_eq!(
            wanted("application/json;as=Table;g=meta.k8s.io;v=v1"),
            As::Unsupported
        );
        assert_eq!(
            wanted("application/vnd.kubernetes.protobuf"),
            As::Unsupported
        );
    }

    #[test]
    fn watch_lines_keep_their_type_and_error_status() {
        let added = br#"{"type":"ADDED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{"x":1}}}"#;
        let out: Value = serde_json::from_slice(&event_line(added)).unwrap();
        assert_eq!(
            out,
            json!({"type": "ADDED", "object": {"apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadata", "metadata": {"name": "a"}}})
        );
        let error = br#"{"type":"ERROR","object":{"kind":"Status","code":410}}"#;
        let out: Value = serde_json::from_slice(&event_line(error)).unwrap();
        assert_eq!(out["object"]["code"], 410);
    }
}
