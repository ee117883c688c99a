//! Where a kind lives on an API server: its group, its resource as kube derives it, and the
//! URL paths of its collections, every segment percent-encoded. Shared by the sources, the
//! actions and the policy-report writer.

use kube_core::{ApiResource, GroupVersionKind};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

/// The group of an apiVersion (`""` for the core group's `v1`).
pub fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(g, _)| g)
}

/// The resource of `api_version` / `kind` as kube derives it without discovery (the plural
/// from the kind).
pub fn api_resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// What a path segment keeps as it is: `[A-Za-z0-9-._~:]` (RFC 3986's unreserved characters and
/// the colon); every other byte is escaped.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b':');

/// [`SEGMENT`] for `.` and `..`, whose dots are escaped too.
const DOT_SEGMENT: &AsciiSet = &SEGMENT.add(b'.');

/// `segment` percent-encoded as one URL path segment: everything but `[A-Za-z0-9-._~:]` is
/// escaped, and so are the dots of `.` and `..` (which would otherwise be dot segments).
pub fn path_segment(segment: &str) -> String {
    let set = if segment == "." || segment == ".." {
        DOT_SEGMENT
    } else {
        SEGMENT
    };
    utf8_percent_encode(segment, set).to_string()
}

/// A collection: `/api/{version}` (core group) or `/apis/{group}/{version}`, then
/// `namespaces/{namespace}` when given, then `plural`; every segment encoded.
pub fn collection_at(
    group: &str,
    version: &str,
    namespace: Option<&str>,
    plural: &str,
) -> kube_core::Request {
    let mut path = if group.is_empty() {
        format!("/api/{}", path_segment(version))
    } else {
        format!("/apis/{}/{}", path_segment(group), path_segment(version))
    };
    if let Some(ns) = namespace {
        path.push_str("/namespaces/");
        path.push_str(&path_segment(ns));
    }
    path.push('/');
    path.push_str(&path_segment(plural));
    kube_core::Request::new(path)
}
