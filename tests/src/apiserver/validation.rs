//! The API server's answers to objects it refuses: 422 Invalid with `details.causes` (one per
//! field error, with its field path) and the message `<Kind> "<name>" is invalid: <errors>`, the
//! checks themselves being the host's ([`wisp_host::kinds::validation`], shared with the `dir:`
//! source). The scope: a namespaced kind is only created under `namespaces/{ns}/`, a
//! cluster-scoped one never is.

use serde_json::{Value, json};
use wisp_host::kinds::validation::{FieldError, field_errors, message, update_errors};

use super::Shared;
use super::discovery::known;
use super::http::Target;
use super::status::ApiError;

/// The 422 Invalid answer for `errs`.
pub(crate) fn invalid(group: &str, kind: &str, name: &str, errs: &[FieldError]) -> ApiError {
    let causes: Vec<Value> = errs
        .iter()
        .map(|e| json!({"reason": e.reason, "message": e.body, "field": e.field}))
        .collect();
    ApiError::with_details(
        422,
        "Invalid",
        message(group, kind, name, errs),
        json!({"name": name, "group": group, "kind": kind, "causes": causes}),
    )
}

/// Checks the scope of a write against the kind: 405 for a namespaced kind written outside a
/// namespace, 404 for a cluster-scoped kind written under one.
pub(crate) fn scope(shared: &Shared, target: &Target) -> Result<(), ApiError> {
    match (
        known(shared, &target.resource).namespaced(),
        &target.namespace,
    ) {
        (Some(true), None) => Err(ApiError {
            code: 405,
            reason: "MethodNotAllowed",
            message: "the server does not allow this method on the requested resource".into(),
            details: None,
        }),
        (Some(false), Some(_)) => Err(ApiError::not_found(
            "the server could not find the requested resource",
        )),
        _ => Ok(()),
    }
}

/// Validates an object about to be created or replaced through `target` (after the path has
/// filled its apiVersion, kind and namespace). A namespace in the body of a cluster-scoped
/// kind is cleared, as the API server does.
pub(crate) fn validate(shared: &Shared, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
    scope(shared, target)?;
    if known(shared, &target.resource).namespaced() == Some(false)
        && let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.remove("namespace");
    }
    let obj = &*obj;
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let group = &target.resource.group;
    let mut errs = field_errors(group, kind, obj);
    // A replace is also checked against the object it replaces.
    if let Some(old) = target.name.as_deref().and_then(|n| {
        shared
            .store
            .get(&target.resource, target.namespace.as_deref(), n)
    }) {
        errs.extend(update_errors(group, kind, &old.value, obj));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid(group, kind, name, &errs))
    }
}
