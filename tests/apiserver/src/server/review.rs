//! The reviews a client asks the server about itself or others: `authorization.k8s.io/v1`
//! SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectAccessReview (`kubectl auth
//! can-i`) and SelfSubjectRulesReview (`kubectl auth can-i --list`), and
//! `authentication.k8s.io/v1` SelfSubjectReview (`kubectl auth whoami`).
//!
//! As on a real server they are create-only and never stored (kubernetes
//! pkg/registry/authorization/*/rest.go: `Create` asks the authorizer and returns the review
//! with its status); every other verb is 405. This server authenticates nobody and authorizes
//! everything (a real one with anonymous requests and `--authorization-mode=AlwaysAllow`):
//! access reviews answer `allowed: true`, rules reviews every verb on every resource, and the
//! caller is `system:anonymous`. TokenReview is not answered (no tokens to check).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::http::Target;
use super::resource::ResourceKey;
use super::status::{ApiError, json_response};

/// The kinds reviewed here: group, plural, kind.
const REVIEWS: &[(&str, &str, &str)] = &[
    (
        "authorization.k8s.io",
        "subjectaccessreviews",
        "SubjectAccessReview",
    ),
    (
        "authorization.k8s.io",
        "localsubjectaccessreviews",
        "LocalSubjectAccessReview",
    ),
    (
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
    ),
    (
        "authorization.k8s.io",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
    ),
    (
        "authentication.k8s.io",
        "selfsubjectreviews",
        "SelfSubjectReview",
    ),
];

/// The kind of a review collection, `None` for every other collection.
pub(crate) fn review_kind(resource: &ResourceKey) -> Option<&'static str> {
    if resource.version != "v1" {
        return None;
    }
    kind_of(&resource.group, &resource.plural)
}

/// The kind of the review collection `plural` of `group` (served in `v1`).
pub(crate) fn kind_of(group: &str, plural: &str) -> Option<&'static str> {
    REVIEWS
        .iter()
        .find(|(g, p, _)| *g == group && *p == plural)
        .map(|(_, _, kind)| *kind)
}

/// The review's checks of `ValidateSubjectAccessReviewSpec` and its siblings
/// (kubernetes pkg/apis/authorization/validation/validation.go).
fn validate(kind: &str, review: &Value, namespace: Option<&str>) -> Result<(), String> {
    if matches!(kind, "SelfSubjectRulesReview" | "SelfSubjectReview") {
        return Ok(());
    }
    let spec = review.get("spec").cloned().unwrap_or(Value::Null);
    let resource = spec.get("resourceAttributes").is_some_and(|v| !v.is_null());
    let non_resource = spec
        .get("nonResourceAttributes")
        .is_some_and(|v| !v.is_null());
    if resource == non_resource {
        return Err(format!(
            "spec.resourceAttributes: Invalid value: {}: exactly one of nonResourceAttributes or resourceAttributes must be specified",
            spec.get("resourceAttributes")
                .map_or("null".into(), Value::to_string)
        ));
    }
    let has = |field: &str| match spec.get(field) {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        _ => false,
    };
    if matches!(kind, "SubjectAccessReview" | "LocalSubjectAccessReview")
        && !has("user")
        && !has("groups")
        && !has("uid")
    {
        return Err(
            "spec.user: Invalid value: \"\": at least one of user, group or uid must be specified"
                .into(),
        );
    }
    let asked = spec
        .pointer("/resourceAttributes/namespace")
        .and_then(Value::as_str);
    if kind == "LocalSubjectAccessReview" && non_resource {
        return Err(format!(
            "spec.nonResourceAttributes: Invalid value: {}: disallowed on this kind of request",
            spec["nonResourceAttributes"]
        ));
    }
    if kind == "LocalSubjectAccessReview" && asked.unwrap_or("") != namespace.unwrap_or("") {
        return Err(format!(
            "spec.resourceAttributes.namespace: Invalid value: {:?}: must match metadata.namespace",
            asked.unwrap_or("")
        ));
    }
    Ok(())
}

/// POST of a review: the review with its status, 201 Created; nothing is stored.
pub(crate) fn create(target: &Target, mut review: Value) -> Response {
    let Some(kind) = review_kind(&target.resource) else {
        return ApiError::not_found("the server could not find the requested resource")
            .into_response();
    };
    if review
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k != kind)
    {
        return ApiError::bad_request(format!(
            "the body of the request is a {}, not a {kind}",
            review["kind"].as_str().unwrap_or("")
        ))
        .into_response();
    }
    if let Err(detail) = validate(kind, &review, target.namespace.as_deref()) {
        let group = &target.resource.group;
        return ApiError::invalid(format!("{kind}.{group} \"\" is invalid: {detail}"))
            .into_response();
    }
    let status = match kind {
        "SelfSubjectRulesReview" => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }),
        "SelfSubjectReview" => json!({"userInfo": {
            "username": "system:anonymous",
            "groups": ["system:unauthenticated"],
        }}),
        _ => json!({"allowed": true}),
    };
    let group = &target.resource.group;
    review["status"] = status;
    review["apiVersion"] = json!(format!("{group}/v1"));
    review["kind"] = json!(kind);
    if review.get("metadata").is_none_or(|m| !m.is_object()) {
        review["metadata"] = json!({"creationTimestamp": null});
    }
    json_response(StatusCode::CREATED, review.to_string())
}
