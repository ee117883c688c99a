//! Routing: URL paths to collections, query strings to parameters, requests to handlers.
//!
//! Every request is recorded, delayed if `slow` is set, and may be answered by an armed fault
//! before it reaches its handler.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::Response;

use super::resource::ResourceKey;
use super::status::{error_response, injected_failure};
use super::{
    RecordedRequest, Shared, Verb, discovery, list, meta, protobuf, review, scale, table, watch,
    write,
};

/// Decoded query parameters; for a repeated key the last value wins.
pub(crate) type Query = BTreeMap<String, String>;

/// The request target under `/api` or `/apis`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The collection.
    pub resource: ResourceKey,
    /// `namespaces/{ns}/` in the path; `None` for cluster-wide or cluster-scoped requests.
    pub namespace: Option<String>,
    /// The object name, for single-object requests.
    pub name: Option<String>,
    /// `status`, `scale`, ... after the name.
    pub subresource: Option<String>,
}

/// What a path addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    /// `/version`.
    Version,
    /// A collection or an object.
    Resource(Target),
    /// Anything else.
    Unknown,
}

/// The axum router serving every path through [`handle`].
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

/// Parses `/api/v1/[namespaces/{ns}/]{plural}[/{name}[/{sub}]]` and the `/apis/{group}/{version}/`
/// equivalent. `/api/v1/namespaces/{name}` is the Namespace object `name`.
fn parse_path(path: &str) -> Route {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Route::Version,
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Route::Unknown,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() => (Some(ns.to_string()), tail),
        _ => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(name.to_string()), None),
        [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return Route::Unknown,
    };
    Route::Resource(Target {
        resource: ResourceKey {
            group: group.to_string(),
            version: version.to_string(),
            plural: plural.to_string(),
        },
        namespace,
        name,
        subresource,
    })
}

/// Parses a query string permissively: empty pairs are skipped, `+` and `%XX` are decoded.
pub(crate) fn parse_query(query: Option<&str>) -> Query {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Whether a boolean query parameter is set (`true` or `1`).
pub(crate) fn flag(query: &Query, key: &str) -> bool {
    query.get(key).is_some_and(|v| v == "true" || v == "1")
}

fn classify(method: &Method, route: &Route, query: &Query) -> Verb {
    match (method, route) {
        (&Method::GET, Route::Resource(t)) if t.name.is_some() => Verb::Get,
        (&Method::GET, Route::Resource(_)) if flag(query, "watch") => Verb::Watch,
        (&Method::GET, Route::Resource(_)) => Verb::List,
        _ => Verb::Other,
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let query = parse_query(parts.uri.query());
    let route = parse_path(parts.uri.path());
    let verb = classify(&parts.method, &route, &query);
    shared.record(RecordedRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        verb,
        query: query.clone(),
    });
    let delay = shared.faults.delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    if let Some(failure) = shared.faults.take_failure(verb) {
        return injected_failure(failure.status, failure.retry_after_secs);
    }
    let target = match route {
        Route::Resource(target) => target,
        Route::Version | Route::Unknown => {
            if let Some(doc) =
                discovery::serve(&shared, &parts.method, parts.uri.path(), &parts.headers)
            {
                return doc;
            }
            return error_response(
                404,
                "NotFound",
                &format!(
                    "the server could not find the requested resource ({})",
                    parts.uri.path()
                ),
            );
        }
    };
    if target.namespace.is_some()
        && discovery::known(&shared, &target.resource).namespaced() == Some(false)
    {
        // A cluster-scoped kind has no route under `namespaces/{ns}/`, whatever the verb.
        return error_response(
            404,
            "NotFound",
            "the server could not find the requested resource",
        );
    }
    let method = parts.method;
    if target.subresource.as_deref() == Some("scale") && target.name.is_some() {
        return scale::serve(&shared, &target, &method, &query, &parts.headers, body).await;
    }
    if review::review_kind(&target.resource).is_some() {
        if method != Method::POST || target.name.is_some() {
            return not_allowed(&method);
        }
        return match json_body(&parts.headers, body).await {
            Ok(body) => match axum::body::to_bytes(body, 64 << 20).await {
                Ok(bytes) => match serde_json::from_slice(&bytes) {
                    Ok(review) => review::create(&target, review),
                    Err(e) => error_response(
                        400,
                        "BadRequest",
                        &format!("the body of the request was in an unknown format: {e}"),
                    ),
                },
                Err(e) => error_response(
                    400,
                    "BadRequest",
                    &format!("unable to read request body: {e}"),
                ),
            },
            Err(refused) => refused,
        };
    }
    let accept = meta::wanted(
        parts
            .headers
            .get(axum::http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
    );
    match (verb, &method, target.name.is_some()) {
        // `as=Table` (kubectl get) first; then `as=PartialObjectMetadata(List)` or objects.
        (Verb::List, _, _) => {
            let answer = list::list(&shared, &target, &query).await;
            if table::wanted(&parts.headers) {
                let custom = table::custom_columns(&shared, &target.resource);
                table::render(answer, &query, custom).await
            } else {
                meta::list(answer, accept).await
            }
        }
        (Verb::Watch, _, _) => {
            let tables = table::wanted(&parts.headers);
            let answer = watch::watch(&shared, target, &query, tables).await;
            if tables {
                answer
            } else {
                meta::watch(answer, accept)
            }
        }
        (Verb::Get, _, _) => {
            let answer = write::get(&shared, &target);
            if table::wanted(&parts.headers) {
                let custom = table::custom_columns(&shared, &target.resource);
                table::render(answer, &query, custom).await
            } else {
                meta::object(answer, accept).await
            }
        }
        (_, &Method::POST, false) => match json_body(&parts.headers, body).await {
            Ok(body) => write::create(&shared, &target, &query, &parts.headers, body).await,
            Err(refused) => refused,
        },
        (_, &Method::PUT, true) => match json_body(&parts.headers, body).await {
            Ok(body) => write::replace(&shared, &target, &query, &parts.headers, body).await,
            Err(refused) => refused,
        },
        (_, &Method::PATCH, true) => {
            write::patch(&shared, &target, &query, &parts.headers, body).await
        }
        (_, &Method::DELETE, true) => match json_body(&parts.headers, body).await {
            Ok(body) => write::delete(&shared, &target, &query, &parts.headers, body).await,
            Err(refused) => refused,
        },
        (_, &Method::DELETE, false) => match json_body(&parts.headers, body).await {
            Ok(body) => {
                write::delete_collection(&shared, &target, &query, &parts.headers, body).await
            }
            Err(refused) => refused,
        },
        _ => not_allowed(&method),
    }
}

/// 405 MethodNotAllowed.
fn not_allowed(method: &Method) -> Response {
    error_response(
        405,
        "MethodNotAllowed",
        &format!("the server does not allow this method on the requested resource ({method})"),
    )
}

/// Media types accepted for request bodies (other than patches), as a server lists them for a
/// collection it has no protobuf for (custom resources). Built-in kinds also take protobuf.
const BODY_MEDIA_TYPES: &str = "application/json, application/yaml";

/// The body of a POST, PUT or DELETE as JSON: JSON (or no Content-Type) as it is, YAML
/// converted, protobuf decoded for every kind of kubernetes/api (what kubectl's typed clients
/// send); anything else is 415 UnsupportedMediaType.
pub(crate) async fn json_body(
    headers: &axum::http::HeaderMap,
    body: axum::body::Body,
) -> Result<axum::body::Body, Response> {
    let media = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let unsupported = || {
        error_response(
            415,
            "UnsupportedMediaType",
            &format!(
                "the body of the request was in an unknown format - accepted media types include: {BODY_MEDIA_TYPES}"
            ),
        )
    };
    let bad = |detail: String| {
        error_response(
            400,
            "BadRequest",
            &format!("the body of the request was in an unknown format: {detail}"),
        )
    };
    match media.as_str() {
        "" | "application/json" | "*/*" => return Ok(body),
        "application/yaml" | "application/vnd.kubernetes.protobuf" => {}
        _ => return Err(unsupported()),
    }
    let bytes = axum::body::to_bytes(body, 64 << 20).await.map_err(|e| {
        error_response(
            400,
            "BadRequest",
            &format!("unable to read request body: {e}"),
        )
    })?;
    let value: serde_json::Value = if media == "application/yaml" {
        std::str::from_utf8(&bytes)
            .map_err(|e| e.to_string())
            .and_then(|t| wisp_kinds::yaml::from_str(t).map_err(|e| e.to_string()))
            .map_err(bad)?
    } else {
        match protobuf::decode(&bytes) {
            Ok(value) => value,
            Err(protobuf::Refusal::Unsupported(..)) => return Err(unsupported()),
            Err(e @ protobuf::Refusal::Malformed(_)) => return Err(bad(e.to_string())),
        }
    };
    Ok(axum::body::Body::from(value.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(path: &str) -> Option<(String, Option<String>, Option<String>)> {
        match parse_path(path) {
            Route::Resource(t) => Some((
                t.resource.api_version() + "/" + &t.resource.plural,
                t.namespace,
                t.name,
            )),
            _ => None,
        }
    }

    #[test]
    fn paths_map_to_collections_and_objects() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(target("/api/v1/pods"), Some(("v1/pods".into(), None, None)));
        assert_eq!(
            target("/api/v1/namespaces/ns/pods"),
            Some(("v1/pods".into(), s("ns"), None))
        );
        assert_eq!(
            target("/api/v1/namespaces/ns/pods/p"),
            Some(("v1/pods".into(), s("ns"), s("p")))
        );
        assert_eq!(
            target("/api/v1/namespaces"),
            Some(("v1/namespaces".into(), None, None))
        );
        assert_eq!(
            target("/api/v1/namespaces/ns"),
            Some(("v1/namespaces".into(), None, s("ns")))
        );
        assert_eq!(
            target("/apis/apps/v1/namespaces/ns/deployments"),
            Some(("apps/v1/deployments".into(), s("ns"), None))
        );
        assert_eq!(
            target("/apis/example.com/v1/widgets/w"),
            Some(("example.com/v1/widgets".into(), None, s("w")))
        );
        assert_eq!(parse_path("/version"), Route::Version);
        assert_eq!(parse_path("/healthz"), Route::Unknown);
    }

    #[test]
    fn query_strings_starting_with_ampersand_are_decoded() {
        let q = parse_query(Some(
            "&labelSelector=app%3Dweb%2Ctier+in+%28a%2Cb%29&&watch=true&limit=5",
        ));
        assert_eq!(
            q.get("labelSelector").map(String::as_str),
            Some("app=web,tier in (a,b)")
        );
        assert_eq!(q.get("limit").map(String::as_str), Some("5"));
        assert!(flag(&q, "watch"));
        assert_eq!(q.len(), 3);
    }
}
