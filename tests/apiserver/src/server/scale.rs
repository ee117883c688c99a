//! The `scale` subresource: an `autoscaling/v1` Scale over the replicas of Deployments,
//! ReplicaSets, StatefulSets and ReplicationControllers, as their registries serve it
//! (kubernetes pkg/registry/apps/deployment/storage/storage.go, `scaleFromDeployment`).
//!
//! GET answers the Scale: the object's name, namespace, uid, resourceVersion and
//! creationTimestamp, `spec.replicas` (1 when the object has none: the default the server does
//! not write), `status.replicas` and `status.selector`, the object's `spec.selector` as a
//! selector string. PUT (JSON, YAML or protobuf) and PATCH (merge, strategic, JSON, apply) edit
//! that Scale and write its `spec.replicas` into the object: one update of the object
//! (generation bumped, watchers see MODIFIED), answered with the new Scale. A Scale naming a resourceVersion that is not the
//! current one is 409 Conflict; negative replicas are 422. Custom resources' `subresources.scale`
//! is not served.

use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::apply::{self, Writer};
use super::http::{Query, Target, json_body};
use super::object::StoreError;
use super::status::{ApiError, error_response, json_response, store_error};
use super::write::{self, PatchKind, WriteOptions};
use super::{Shared, patch};

/// Conflicting concurrent writes a scale write retries through.
const ATTEMPTS: usize = 5;

/// The collections with a `scale` subresource.
pub(crate) fn has_scale(group: &str, plural: &str) -> bool {
    matches!(
        (group, plural),
        ("apps", "deployments" | "replicasets" | "statefulsets") | ("", "replicationcontrollers")
    )
}

/// A label selector (`metav1.LabelSelector`) as `labels.Selector.String()` prints it:
/// requirements sorted by key, `in` / `notin` values sorted; empty when it selects everything.
fn selector_string(selector: &Value) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            requirements.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for e in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let mut values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        values.dedup();
        let text = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            _ => format!("!{key}"),
        };
        requirements.push((key.to_string(), text));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    requirements
        .into_iter()
        .map(|(_, text)| text)
        .collect::<Vec<_>>()
        .join(",")
}

/// The Scale of an object.
fn scale_of(obj: &Value) -> Value {
    let mut meta = Map::new();
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = obj.pointer(&format!("/metadata/{field}")) {
            meta.insert(field.into(), v.clone());
        }
    }
    let replicas = obj.pointer("/spec/replicas").cloned().unwrap_or(json!(1));
    let mut spec = Map::new();
    if replicas != json!(0) {
        spec.insert("replicas".into(), replicas);
    }
    let mut status = json!({
        "replicas": obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
    });
    let selector = obj
        .pointer("/spec/selector")
        .map(selector_string)
        .unwrap_or_default();
    if !selector.is_empty() {
        status["selector"] = Value::String(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": meta,
        "spec": spec,
        "status": status,
    })
}

/// Serves `{collection}/{name}/scale`.
pub(crate) async fn serve(
    shared: &Shared,
    target: &Target,
    method: &Method,
    query: &Query,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let name = target.name.as_deref().unwrap_or("");
    if !has_scale(&target.resource.group, &target.resource.plural) {
        return ApiError::not_found("the server could not find the requested resource (scale)")
            .into_response();
    }
    let edit = match *method {
        Method::GET => {
            return match shared
                .store
                .get(&target.resource, target.namespace.as_deref(), name)
            {
                Some(obj) => json_response(StatusCode::OK, scale_of(&obj.value()).to_string()),
                None => write::not_found(target, name),
            };
        }
        Method::PUT => Edit::Replace,
        Method::PATCH => {
            let media = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            match write::patch_kind(media, true) {
                Some(kind) => Edit::Patch(kind),
                None => return write::unsupported_patch(true),
            }
        }
        _ => {
            return error_response(
                405,
                "MethodNotAllowed",
                &format!(
                    "the server does not allow this method on the requested resource ({method})"
                ),
            );
        }
    };
    let options_kind = if edit == Edit::Replace {
        "UpdateOptions"
    } else {
        "PatchOptions"
    };
    let options = match WriteOptions::parse(query, headers, options_kind) {
        Ok(options) => options,
        Err(e) => return e.into_response(),
    };
    // A replaced Scale may come as JSON, YAML or protobuf (client-go's typed `UpdateScale`).
    let body = match edit {
        Edit::Replace => match json_body(headers, body).await {
            Ok(body) => body,
            Err(refused) => return refused,
        },
        Edit::Patch(_) => body,
    };
    let sent = match write::read_bytes(body).await.and_then(|bytes| match edit {
        Edit::Replace => serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request was in an unknown format: {e}"
            ))
        }),
        Edit::Patch(kind) => write::parse_patch(kind, &bytes),
    }) {
        Ok(sent) => sent,
        Err(e) => return e.into_response(),
    };
    if edit == Edit::Patch(PatchKind::Apply) && !options.explicit_manager {
        return ApiError::invalid(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        )
        .into_response();
    }
    write_scale(shared, target, (&options, headers), edit, &sent).await
}

/// How the request changes the Scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit {
    Replace,
    Patch(PatchKind),
}

/// The Scale after `edit`, from the current one.
fn edited(current: &Value, edit: Edit, sent: &Value) -> Result<Value, ApiError> {
    Ok(match edit {
        Edit::Replace => sent.clone(),
        // A Scale has no lists or maps with strategies: a strategic merge patch and an apply
        // of its one writable field both merge.
        Edit::Patch(PatchKind::Merge | PatchKind::Strategic | PatchKind::Apply) => {
            let mut scale = current.clone();
            write::merge_patch(&mut scale, sent);
            scale
        }
        Edit::Patch(PatchKind::Json) => {
            let ops = sent.as_array().map(Vec::as_slice).unwrap_or_default();
            patch::json_patch(current, ops).map_err(|_| patch::unprocessable())?
        }
    })
}

/// `spec.replicas` of a Scale, checked as `ValidateScale` does
/// (kubernetes pkg/apis/autoscaling/validation/validation.go).
fn replicas(scale: &Value, name: &str) -> Result<i64, ApiError> {
    let invalid = |detail: String| {
        ApiError::invalid(format!(
            "Scale.autoscaling {name:?} is invalid: spec.replicas: {detail}"
        ))
    };
    match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => match n.as_i64().filter(|r| i32::try_from(*r).is_ok()) {
            Some(r) if r >= 0 => Ok(r),
            Some(r) => Err(invalid(format!(
                "Invalid value: {r}: must be greater than or equal to 0"
            ))),
            None => Err(invalid(format!(
                "Invalid value: {n}: must be a 32-bit integer"
            ))),
        },
        Some(other) => Err(invalid(format!(
            "Invalid value: {other}: must be an integer"
        ))),
    }
}

/// Writes the edited Scale's replicas to the object, admitted as an UPDATE of the `scale`
/// subresource whose objects are `autoscaling/v1` Scales.
async fn write_scale(
    shared: &Shared,
    target: &Target,
    (options, headers): (&WriteOptions, &HeaderMap),
    edit: Edit,
    sent: &Value,
) -> Response {
    let name = target.name.as_deref().unwrap_or("");
    let writer = Writer {
        manager: &options.manager,
        status: false,
        separate_status: write::separate_status(shared, target),
        ty: write::type_of(shared, target),
    };
    for _ in 0..ATTEMPTS {
        let Some(current) = shared
            .store
            .get(&target.resource, target.namespace.as_deref(), name)
        else {
            return write::not_found(target, name);
        };
        let current = current.value();
        let old_scale = scale_of(&current);
        let scale = match edited(&old_scale, edit, sent) {
            Ok(scale) => scale,
            Err(e) => return e.into_response(),
        };
        let mut review =
            write::update_review(shared, target, headers, options, (&old_scale, scale));
        review.kind = "Scale".into();
        review.kind_group_version = Some(("autoscaling", "v1"));
        let scale = match write::mutated(shared, &mut review).await {
            Ok(scale) => scale,
            Err(refused) => return refused,
        };
        let replicas = match replicas(&scale, name) {
            Ok(r) => r,
            Err(e) => return e.into_response(),
        };
        let live_rv = current.pointer("/metadata/resourceVersion");
        let asked_rv = scale
            .pointer("/metadata/resourceVersion")
            .filter(|rv| rv.as_str().is_some_and(|s| !s.is_empty()));
        if asked_rv.is_some() && asked_rv != live_rv {
            return store_error(&StoreError::Conflict {
                plural: target.resource.plural.clone(),
                name: name.to_string(),
            });
        }
        let mut obj = current.clone();
        obj["spec"]["replicas"] = Value::from(replicas);
        apply::record_update(Some(&current), &mut obj, &writer);
        if let Err(refused) = write::validated(shared, &mut review, &scale_of(&obj)).await {
            return refused;
        }
        match write::commit_update(shared, &current, obj, options.dry_run) {
            Ok(updated) => {
                let answer = json_response(StatusCode::OK, scale_of(&updated).to_string());
                return write::with_warnings(answer, &review.warnings);
            }
            Err(StoreError::Conflict { .. }) if asked_rv.is_none() => continue,
            Err(e) => return store_error(&e),
        }
    }
    write::conflict_after_retries(target, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_print_as_apimachinery_prints_them() {
        let selector = json!({
            "matchLabels": {"tier": "web", "app": "shop"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "dev"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "Exists"},
            ],
        });
        assert_eq!(
            selector_string(&selector),
            "app=shop,!canary,env in (dev,prod),tier=web,zone"
        );
        assert_eq!(selector_string(&json!({})), "");
    }
}
