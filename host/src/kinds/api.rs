//! Where a kind lives on an API server: its group, its resource as kube derives it, and the
//! URL paths of its collections, every segment percent-encoded. Shared by the sources, the
//! actions and the policy-report writer.

use kube::core::{ApiResource, GroupVersionKind};

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

/// `segment` percent-encoded as one URL path segment: everything but `[A-Za-z0-9-._~:]` is
/// escaped, and so are the dots of `.` and `..` (which would otherwise be dot segments).
pub fn path_segment(segment: &str) -> String {
    let dots = segment == "." || segment == "..";
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        let keep = (b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~' | b':' | b'.'))
            && !(dots && b == b'.');
        if keep {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A collection: `/api/{version}` (core group) or `/apis/{group}/{version}`, then
/// `namespaces/{namespace}` when given, then `plural`; every segment encoded.
pub fn collection_at(
    group: &str,
    version: &str,
    namespace: Option<&str>,
    plural: &str,
) -> kube::core::Request {
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
    kube::core::Request::new(path)
}
