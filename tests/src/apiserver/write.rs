//! Single-object requests: GET, POST (create), PUT (replace), PATCH and DELETE.
//!
//! PATCH understands merge patches (`application/merge-patch+json`), treats strategic merge
//! patches as merge patches, and treats server-side apply (`application/apply-patch+yaml`, which
//! kube sends as JSON) as a merge patch that creates a missing object. JSON patches are refused
//! with 415. The `status` subresource reads and writes the object's `status` only.

use axum::body::{Body, to_bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use super::http::{Query, Target};
use super::object::StoreError;
use super::resource::{ResourceKey, split_api_version};
use super::status::{ApiError, error_response, json_response, store_error};
use super::store::{DeleteOptions, Propagation};
use super::{Shared, discovery, validation};

/// Largest request body accepted.
const MAX_BODY: usize = 64 << 20;

/// Conflicting concurrent writes a PATCH retries through, like the real API server does.
const PATCH_ATTEMPTS: usize = 5;

fn not_found(target: &Target, name: &str) -> Response {
    store_error(&StoreError::NotFound {
        plural: target.resource.plural.clone(),
        name: name.to_string(),
    })
}

/// Subresources served as the object itself (`status`); others are 404.
fn check_subresource(target: &Target) -> Result<bool, ApiError> {
    match target.subresource.as_deref() {
        None => Ok(false),
        Some("status") => Ok(true),
        Some(other) => Err(ApiError::not_found(format!(
            "the server could not find the requested resource ({other})"
        ))),
    }
}

/// GET of one object.
pub(crate) fn get(shared: &Shared, target: &Target) -> Response {
    let name = target.name.as_deref().unwrap_or("");
    if let Err(e) = check_subresource(target) {
        return e.into_response();
    }
    match shared
        .store
        .get(&target.resource, target.namespace.as_deref(), name)
    {
        Some(obj) => json_response(StatusCode::OK, obj.json.clone()),
        None => not_found(target, name),
    }
}

async fn read_object(body: Body) -> Result<Value, ApiError> {
    let bytes = to_bytes(body, MAX_BODY)
        .await
        .map_err(|e| ApiError::bad_request(format!("unable to read request body: {e}")))?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the request was in an unknown format: {e}"
        ))
    })?;
    if value.is_object() {
        Ok(value)
    } else {
        Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ))
    }
}

/// Fills apiVersion, kind and namespace from the request path and checks they agree with it.
fn conform(shared: &Shared, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
    let Some(map) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    };
    map.entry("apiVersion")
        .or_insert_with(|| Value::String(target.resource.api_version()));
    map.entry("kind")
        .or_insert_with(|| Value::String(shared.store.kind_of(&target.resource)));
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = split_api_version(api_version);
    if ResourceKey::for_kind(api_version, kind) != target.resource {
        return Err(ApiError::bad_request(format!(
            "{kind} in {group}/{version} does not belong to the collection {}",
            target.resource.plural
        )));
    }
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return Err(ApiError::bad_request("metadata must be an object"));
    };
    if let Some(path_ns) = &target.namespace {
        match meta.get("namespace").and_then(Value::as_str) {
            None | Some("") => {
                meta.insert("namespace".into(), Value::String(path_ns.clone()));
            }
            Some(ns) if ns != path_ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            Some(_) => {}
        }
    }
    if let Some(name) = &target.name {
        match meta.get("name").and_then(Value::as_str) {
            None | Some("") => {
                meta.insert("name".into(), Value::String(name.clone()));
            }
            Some(n) if n != name => {
                return Err(ApiError::bad_request(
                    "the name of the object does not match the name on the URL",
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// POST to a collection.
pub(crate) async fn create(shared: &Shared, target: &Target, body: Body) -> Response {
    let mut obj = match read_object(body).await {
        Ok(obj) => obj,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = conform(shared, target, &mut obj) {
        return e.into_response();
    }
    if let Err(e) = validation::validate(shared, target, &mut obj) {
        return e.into_response();
    }
    match shared.store.create(obj) {
        Ok(created) => json_response(StatusCode::CREATED, created.to_string()),
        Err(e) => store_error(&e),
    }
}

/// PUT of an object (or of its status).
pub(crate) async fn replace(shared: &Shared, target: &Target, body: Body) -> Response {
    let status_only = match check_subresource(target) {
        Ok(status_only) => status_only,
        Err(e) => return e.into_response(),
    };
    let mut obj = match read_object(body).await {
        Ok(obj) => obj,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = conform(shared, target, &mut obj) {
        return e.into_response();
    }
    if !status_only && let Err(e) = validation::validate(shared, target, &mut obj) {
        return e.into_response();
    }
    if status_only {
        let name = target.name.as_deref().unwrap_or("");
        let Some(current) = shared
            .store
            .get(&target.resource, target.namespace.as_deref(), name)
        else {
            return not_found(target, name);
        };
        let mut updated = current.value.clone();
        updated["status"] = obj.get("status").cloned().unwrap_or(Value::Null);
        if let Some(rv) = obj.pointer("/metadata/resourceVersion") {
            updated["metadata"]["resourceVersion"] = rv.clone();
        }
        obj = updated;
    }
    match shared.store.update(obj, true) {
        Ok(updated) => json_response(StatusCode::OK, updated.to_string()),
        Err(e) => store_error(&e),
    }
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(map) = target {
        for (key, value) in patch {
            if value.is_null() {
                map.remove(key);
            } else {
                merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// PATCH of an object (or of its status).
pub(crate) async fn patch(
    shared: &Shared,
    target: &Target,
    _query: &Query,
    content_type: &str,
    body: Body,
) -> Response {
    let status_only = match check_subresource(target) {
        Ok(status_only) => status_only,
        Err(e) => return e.into_response(),
    };
    let media = content_type.split(';').next().unwrap_or("").trim();
    let apply = match media {
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => false,
        "application/apply-patch+yaml" => true,
        other => {
            return error_response(
                415,
                "UnsupportedMediaType",
                &format!(
                    "the body of the request was in an unknown format - accepted media types include: application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml (got {other:?})"
                ),
            );
        }
    };
    let patch = match read_object(body).await {
        Ok(patch) => patch,
        Err(e) => return e.into_response(),
    };
    let name = target.name.as_deref().unwrap_or("");
    let explicit_rv = patch.pointer("/metadata/resourceVersion").is_some();
    for _ in 0..PATCH_ATTEMPTS {
        let Some(current) = shared
            .store
            .get(&target.resource, target.namespace.as_deref(), name)
        else {
            if !apply {
                return not_found(target, name);
            }
            let mut obj = patch.clone();
            if let Err(e) = conform(shared, target, &mut obj) {
                return e.into_response();
            }
            match shared.store.create(obj) {
                Ok(created) => return json_response(StatusCode::CREATED, created.to_string()),
                Err(StoreError::AlreadyExists { .. }) => continue,
                Err(e) => return store_error(&e),
            }
        };
        let mut patched = current.value.clone();
        if status_only {
            merge_patch(
                &mut patched["status"],
                patch.get("status").unwrap_or(&Value::Null),
            );
        } else {
            merge_patch(&mut patched, &patch);
        }
        if let Err(e) = conform(shared, target, &mut patched) {
            return e.into_response();
        }
        match shared.store.update(patched, true) {
            Ok(updated) => return json_response(StatusCode::OK, updated.to_string()),
            Err(StoreError::Conflict { .. }) if !explicit_rv => continue,
            Err(e) => return store_error(&e),
        }
    }
    store_error(&StoreError::Conflict {
        plural: target.resource.plural.clone(),
        name: name.to_string(),
    })
}

/// The DeleteOptions of a DELETE: from the query (`propagationPolicy`, `orphanDependents`),
/// then from the body, which wins, as the API server decodes them.
fn delete_options(query: &Query, body: &[u8]) -> Result<DeleteOptions, ApiError> {
    let mut policy = query.get("propagationPolicy").cloned();
    let mut orphan = query
        .get("orphanDependents")
        .map(|v| v == "true" || v == "1");
    let mut options = DeleteOptions::default();
    if !body.iter().all(u8::is_ascii_whitespace) {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request was in an unknown format: {e}"
            ))
        })?;
        let Some(map) = value.as_object() else {
            return Err(ApiError::bad_request(
                "the body of the request must be a DeleteOptions object",
            ));
        };
        if let Some(kind) = map.get("kind").and_then(Value::as_str)
            && kind != "DeleteOptions"
        {
            return Err(ApiError::bad_request(format!(
                "no kind \"{kind}\" is registered for the body of a DELETE (expected DeleteOptions)"
            )));
        }
        if let Some(p) = map.get("propagationPolicy").and_then(Value::as_str) {
            policy = Some(p.to_string());
        }
        if let Some(o) = map.get("orphanDependents").and_then(Value::as_bool) {
            orphan = Some(o);
        }
        let pre = |field: &str| {
            map.get("preconditions")
                .and_then(|p| p.get(field))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        options.uid = pre("uid");
        options.resource_version = pre("resourceVersion");
    }
    let invalid = |detail: String| {
        ApiError::invalid(format!(
            "DeleteOptions.meta.k8s.io \"\" is invalid: {detail}"
        ))
    };
    options.propagation = match (policy.as_deref(), orphan) {
        (Some(p), Some(_)) => {
            return Err(invalid(format!(
                "propagationPolicy: Invalid value: \"{p}\": orphanDependents and deletionPropagation cannot be both set"
            )));
        }
        (Some("Foreground"), None) | (None, Some(false)) => Propagation::Foreground,
        (Some("Background"), None) | (None, None) => Propagation::Background,
        (Some("Orphan"), None) | (None, Some(true)) => Propagation::Orphan,
        (Some(other), None) => {
            return Err(invalid(format!(
                "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
            )));
        }
    };
    Ok(options)
}

/// DELETE of an object, with DeleteOptions from the query and the body (JSON or YAML):
/// preconditions (409 Conflict on a mismatch) and the propagation policy. An object without
/// finalizers goes at once: 200 with its last state for the kinds whose registry returns it
/// (Pod, Service, ServiceAccount, StorageClass), else (custom resources too) 200 with a Status
/// Success naming it. One with finalizers, and a Namespace, is marked with `deletionTimestamp`
/// and stays until they are gone (200 with its new state).
pub(crate) async fn delete(
    shared: &Shared,
    target: &Target,
    query: &Query,
    body: Body,
) -> Response {
    let name = target.name.as_deref().unwrap_or("");
    if target.subresource.is_some() {
        return error_response(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        );
    }
    let bytes = match to_bytes(body, MAX_BODY).await {
        Ok(bytes) => bytes,
        Err(e) => {
            return ApiError::bad_request(format!("unable to read request body: {e}"))
                .into_response();
        }
    };
    let options = match delete_options(query, &bytes) {
        Ok(options) => options,
        Err(e) => return e.into_response(),
    };
    let state = match shared.store.delete(
        &target.resource,
        target.namespace.as_deref(),
        name,
        &options,
    ) {
        Ok(state) => state,
        Err(e) => return store_error(&e),
    };
    let gone = shared
        .store
        .get(&target.resource, target.namespace.as_deref(), name)
        .is_none();
    if gone && !discovery::returns_deleted_object(shared, &target.resource) {
        // What the registry answers for a kind without ReturnDeletedObject.
        let status = serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": name,
                "group": target.resource.group,
                "kind": target.resource.plural,
                "uid": state.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
            },
        });
        return json_response(StatusCode::OK, status.to_string());
    }
    json_response(StatusCode::OK, state.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}}));
        merge_patch(&mut doc, &json!({"c": ["x"]}));
        assert_eq!(doc, json!({"a": "z", "c": ["x"]}));
    }
}
