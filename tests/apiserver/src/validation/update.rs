//! What an update may not change in the built-in kinds a plugin action may write (Pod,
//! Service, Job, StatefulSet, PersistentVolumeClaim), with the API server's words
//! (pkg/apis/core/validation/validation.go `ValidatePodUpdate`, `ValidateServiceUpdate`,
//! `ValidatePersistentVolumeClaimUpdate`; pkg/apis/batch/validation/validation.go
//! `ValidateJobSpecUpdate`; pkg/apis/apps/validation/validation.go `ValidateStatefulSetUpdate`).
//!
//! The API server compares typed objects with `apiequality.Semantic`, for which an empty list
//! or map is the same as none; here the JSON is compared after dropping nulls, empty lists and
//! empty maps. Its messages end with a `cmp.Diff` of the Go types; here the diff names the
//! changed fields of `spec` in JSON (`- nodeName: "a"` / `+ nodeName: "b"`).

use serde_json::{Map, Value};

use super::FieldError;

/// The message of a Pod update that changes what may not change.
pub const POD_UPDATE: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// The message of a StatefulSet update beyond its mutable fields.
pub const STATEFUL_SET_UPDATE: &str = "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden";

/// The message of a PersistentVolumeClaim update beyond its mutable fields.
pub const PVC_UPDATE: &str = "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";

/// `value` without nulls, empty lists and empty maps, at any depth.
fn normalized(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(list) => Value::Array(list.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(list) => list.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

/// The `spec` of `obj` as a map, normalized.
fn spec_of(obj: &Value) -> Map<String, Value> {
    match obj.get("spec").map(normalized) {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// The fields of `spec` that differ, one `- old` and one `+ new` line each.
fn spec_diff(old: &Map<String, Value>, new: &Map<String, Value>) -> String {
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut lines = Vec::new();
    for key in keys {
        let (a, b) = (old.get(key), new.get(key));
        if a == b {
            continue;
        }
        if let Some(a) = a {
            lines.push(format!("- \t{key}: {a},"));
        }
        if let Some(b) = b {
            lines.push(format!("+ \t{key}: {b},"));
        }
    }
    format!("  spec{{\n{}\n  }}", lines.join("\n"))
}

/// A forbidden change of `spec` with `message` and the diff.
fn forbidden_spec(message: &str, old: &Map<String, Value>, new: &Map<String, Value>) -> FieldError {
    FieldError::forbidden("spec", &format!("{message}\n{}", spec_diff(old, new)))
}

fn list<'a>(spec: &'a Map<String, Value>, field: &str) -> &'a [Value] {
    spec.get(field)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `ValidateContainerUpdates`: the same number of containers, each with an image.
fn container_updates(field: &str, old: &[Value], new: &[Value]) -> Result<(), FieldError> {
    if old.len() != new.len() {
        return Err(FieldError::forbidden(
            format!("spec.{field}"),
            "pod updates may not add or remove containers",
        ));
    }
    Ok(())
}

/// `validateOnlyAddedTolerations`: every old toleration is still there (its
/// `tolerationSeconds` may change).
fn only_added_tolerations(old: &[Value], new: &[Value]) -> Option<FieldError> {
    let without_seconds = |t: &Value| {
        let mut t = t.clone();
        if let Some(map) = t.as_object_mut() {
            map.remove("tolerationSeconds");
        }
        t
    };
    let kept = old
        .iter()
        .all(|o| new.iter().any(|n| without_seconds(n) == without_seconds(o)));
    (!kept).then(|| {
        FieldError::forbidden(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        )
    })
}

/// `activeDeadlineSeconds` may be set or lowered, not removed or raised.
fn active_deadline(old: &Map<String, Value>, new: &Map<String, Value>) -> Option<FieldError> {
    let old = old.get("activeDeadlineSeconds").and_then(Value::as_i64)?;
    let field = "spec.activeDeadlineSeconds".to_string();
    match new.get("activeDeadlineSeconds").and_then(Value::as_i64) {
        None => Some(FieldError {
            reason: "FieldValueInvalid",
            field,
            body: "Invalid value: \"null\": must not update from a positive integer to nil value"
                .into(),
        }),
        Some(n) if n > old => Some(FieldError {
            reason: "FieldValueInvalid",
            field,
            body: format!("Invalid value: {n}: must be less than or equal to previous value"),
        }),
        Some(_) => None,
    }
}

/// Scheduling gates may only be removed.
fn scheduling_gates(old: &Map<String, Value>, new: &Map<String, Value>) -> Vec<FieldError> {
    let name = |g: &Value| {
        g.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let before: Vec<String> = list(old, "schedulingGates").iter().map(name).collect();
    list(new, "schedulingGates")
        .iter()
        .map(name)
        .filter(|g| !before.contains(g))
        .map(|g| {
            FieldError::forbidden(
                "spec.schedulingGates",
                &format!("only deletion is allowed, but found new scheduling gate '{g}'"),
            )
        })
        .collect()
}

/// `ValidatePodUpdate`: only the images, `activeDeadlineSeconds`, added tolerations,
/// `terminationGracePeriodSeconds` from negative to 1, removed scheduling gates (and, while
/// gated, added `nodeSelector` entries) may change; adding or removing a container is refused
/// first, on its own.
pub(super) fn pod(old: &Value, new: &Value, errs: &mut Vec<FieldError>) {
    let (old_spec, new_spec) = (spec_of(old), spec_of(new));
    for field in ["containers", "initContainers"] {
        if let Err(e) = container_updates(field, list(&old_spec, field), list(&new_spec, field)) {
            errs.push(e);
            return;
        }
    }
    errs.extend(active_deadline(&old_spec, &new_spec));
    errs.extend(only_added_tolerations(
        list(&old_spec, "tolerations"),
        list(&new_spec, "tolerations"),
    ));
    errs.extend(scheduling_gates(&old_spec, &new_spec));
    let mut munged = new_spec.clone();
    for field in ["containers", "initContainers"] {
        let images = list(&old_spec, field)
            .iter()
            .map(|c| c.get("image").cloned());
        if let Some(Value::Array(containers)) = munged.get_mut(field) {
            for (c, image) in containers.iter_mut().zip(images) {
                if let (Some(map), Some(image)) = (c.as_object_mut(), image) {
                    map.insert("image".into(), image);
                }
            }
        }
    }
    let mut take_old = |field: &str| match old_spec.get(field) {
        Some(v) => munged.insert(field.into(), v.clone()),
        None => munged.remove(field),
    };
    take_old("activeDeadlineSeconds");
    take_old("tolerations");
    take_old("schedulingGates");
    let grace = |s: &Map<String, Value>| {
        s.get("terminationGracePeriodSeconds")
            .and_then(Value::as_i64)
    };
    if grace(&old_spec).is_some_and(|g| g < 0) && grace(&new_spec) == Some(1) {
        take_old("terminationGracePeriodSeconds");
    }
    let gated = !list(&old_spec, "schedulingGates").is_empty();
    let selector = |s: &Map<String, Value>| {
        s.get("nodeSelector")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let (old_selector, new_selector) = (selector(&old_spec), selector(&new_spec));
    if gated
        && old_selector
            .iter()
            .all(|(k, v)| new_selector.get(k) == Some(v))
    {
        take_old("nodeSelector");
    }
    if munged != old_spec {
        errs.push(forbidden_spec(POD_UPDATE, &old_spec, &new_spec));
    }
}

/// Go's rendering of a `[]string`, as field errors show it.
fn go_strings(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|s| format!("{s:?}")).collect();
    format!("[]string{{{}}}", quoted.join(", "))
}

/// `validateUpgradeDowngradeClusterIPs`: an allocated cluster IP may not change, unless the
/// Service is or becomes ExternalName, or stays headless. An update that omits it keeps it (the
/// registry copies it over), so only a different one is refused.
pub(super) fn service(old: &Value, new: &Value, errs: &mut Vec<FieldError>) {
    let text = |o: &Value, f: &str| {
        o.pointer(&format!("/spec/{f}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    if text(old, "type") == "ExternalName" || text(new, "type") == "ExternalName" {
        return;
    }
    let ips = |o: &Value| -> Vec<String> {
        match o.pointer("/spec/clusterIPs").and_then(Value::as_array) {
            Some(list) if !list.is_empty() => list
                .iter()
                .map(|v| v.as_str().unwrap_or("").to_string())
                .collect(),
            _ => Some(text(o, "clusterIP"))
                .filter(|ip| !ip.is_empty())
                .into_iter()
                .collect(),
        }
    };
    let (before, after) = (ips(old), ips(new));
    if after.is_empty()
        || (before.first().map(String::as_str) == Some("None") && after[0] == "None")
    {
        return;
    }
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        if b != a {
            errs.push(FieldError {
                reason: "FieldValueInvalid",
                field: format!("spec.clusterIPs[{i}]"),
                body: format!(
                    "Invalid value: {}: may not change once set",
                    go_strings(&after)
                ),
            });
        }
    }
}

/// The error of an immutable field of `spec` that changed: `field: Invalid value: <new>:
/// field is immutable` (`ValidateImmutableField`).
pub(super) fn immutable(field: &str, old: &Value, new: &Value, errs: &mut Vec<FieldError>) {
    let pointer = format!("/spec/{field}");
    let (before, after) = (
        old.pointer(&pointer).map(normalized),
        new.pointer(&pointer).map(normalized),
    );
    if before != after {
        errs.push(FieldError {
            reason: "FieldValueInvalid",
            field: format!("spec.{field}"),
            body: format!(
                "Invalid value: {}: field is immutable",
                after.unwrap_or(Value::Null)
            ),
        });
    }
}

/// `ValidateStatefulSetUpdate`: only replicas, ordinals, template, updateStrategy,
/// revisionHistoryLimit, persistentVolumeClaimRetentionPolicy and minReadySeconds may change.
pub(super) fn stateful_set(old: &Value, new: &Value, errs: &mut Vec<FieldError>) {
    const MUTABLE: &[&str] = &[
        "replicas",
        "ordinals",
        "template",
        "updateStrategy",
        "revisionHistoryLimit",
        "persistentVolumeClaimRetentionPolicy",
        "minReadySeconds",
    ];
    let fixed = |o: &Value| {
        let mut spec = spec_of(o);
        spec.retain(|k, _| !MUTABLE.contains(&k.as_str()));
        spec
    };
    if fixed(old) != fixed(new) {
        errs.push(FieldError::forbidden("spec", STATEFUL_SET_UPDATE));
    }
}

/// `ValidatePersistentVolumeClaimUpdate`: `volumeName` may be set once; a bound claim may
/// change its storage request and `volumeAttributesClassName`; nothing else in `spec` changes.
pub(super) fn persistent_volume_claim(old: &Value, new: &Value, errs: &mut Vec<FieldError>) {
    let (old_spec, new_spec) = (spec_of(old), spec_of(new));
    let mut munged = new_spec.clone();
    let mut take_old = |field: &str| match old_spec.get(field) {
        Some(v) => munged.insert(field.into(), v.clone()),
        None => munged.remove(field),
    };
    if old_spec.get("volumeName").is_none() {
        take_old("volumeName");
    }
    let bound = old.pointer("/status/phase").and_then(Value::as_str) == Some("Bound");
    if bound {
        take_old("volumeAttributesClassName");
        let storage = old_spec
            .get("resources")
            .and_then(|r| r.pointer("/requests/storage"))
            .cloned();
        if let (Some(storage), Some(requests)) = (
            storage,
            munged
                .get_mut("resources")
                .and_then(|r| r.get_mut("requests"))
                .and_then(Value::as_object_mut),
        ) {
            requests.insert("storage".into(), storage);
        }
    }
    if munged != old_spec {
        errs.push(forbidden_spec(PVC_UPDATE, &old_spec, &new_spec));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod_errors(old: Value, new: Value) -> Vec<String> {
        let mut errs = Vec::new();
        pod(&old, &new, &mut errs);
        errs.iter().map(FieldError::to_string).collect()
    }

    fn running(spec: Value) -> Value {
        json!({"spec": spec, "status": {"phase": "Running"}})
    }

    #[test]
    fn a_pod_may_change_images_deadlines_and_added_tolerations() {
        let old = running(json!({
            "nodeName": "n1",
            "containers": [{"name": "a", "image": "a:1"}],
            "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 5}],
            "activeDeadlineSeconds": 60,
            "schedulingGates": [{"name": "g"}],
        }));
        let new = running(json!({
            "nodeName": "n1",
            "containers": [{"name": "a", "image": "a:2"}],
            "tolerations": [
                {"key": "k", "operator": "Exists", "tolerationSeconds": 9},
                {"key": "other", "operator": "Exists"},
            ],
            "activeDeadlineSeconds": 30,
            "volumes": [],
        }));
        assert_eq!(pod_errors(old, new), Vec::<String>::new());
    }

    #[test]
    fn a_pod_may_not_add_a_container_or_move_to_another_node() {
        let old = running(json!({"nodeName": "n1", "containers": [{"name": "a", "image": "a"}]}));
        let added = running(json!({"nodeName": "n1", "containers": [
            {"name": "a", "image": "a"}, {"name": "b", "image": "b"}
        ]}));
        assert_eq!(
            pod_errors(old.clone(), added),
            ["spec.containers: Forbidden: pod updates may not add or remove containers"]
        );
        let moved = running(json!({"nodeName": "n2", "containers": [{"name": "a", "image": "a"}]}));
        let errs = pod_errors(old, moved);
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].starts_with(&format!("spec: Forbidden: {POD_UPDATE}\n")),
            "{errs:?}"
        );
        assert!(
            errs[0].contains("- \tnodeName: \"n1\"") && errs[0].contains("+ \tnodeName: \"n2\""),
            "{errs:?}"
        );
    }

    #[test]
    fn a_pod_may_not_drop_a_toleration_raise_its_deadline_or_add_a_gate() {
        let old = running(json!({
            "containers": [{"name": "a", "image": "a"}],
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "activeDeadlineSeconds": 60,
        }));
        let new = running(json!({
            "containers": [{"name": "a", "image": "a"}],
            "activeDeadlineSeconds": 90,
            "schedulingGates": [{"name": "late"}],
        }));
        assert_eq!(
            pod_errors(old, new),
            [
                "spec.activeDeadlineSeconds: Invalid value: 90: must be less than or equal to previous value",
                "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds",
                "spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling gate 'late'",
            ]
        );
    }

    #[test]
    fn a_negative_grace_period_may_become_one() {
        let spec = |g: i64| {
            running(
                json!({"containers": [{"name": "a", "image": "a"}], "terminationGracePeriodSeconds": g}),
            )
        };
        assert!(pod_errors(spec(-1), spec(1)).is_empty());
        assert_eq!(pod_errors(spec(30), spec(1)).len(), 1);
    }

    #[test]
    fn a_service_keeps_its_cluster_ip() {
        let svc = |ip: &str| json!({"spec": {"clusterIP": ip, "ports": [{"port": 80}]}});
        let mut errs = Vec::new();
        service(&svc("10.0.0.1"), &svc("10.0.0.2"), &mut errs);
        assert_eq!(
            errs.iter().map(FieldError::to_string).collect::<Vec<_>>(),
            ["spec.clusterIPs[0]: Invalid value: []string{\"10.0.0.2\"}: may not change once set"]
        );
        let mut errs = Vec::new();
        service(&svc("10.0.0.1"), &svc(""), &mut errs);
        assert!(errs.is_empty());
    }

    #[test]
    fn a_stateful_set_changes_only_its_mutable_fields() {
        let sts = |replicas: i64, service: &str| json!({"spec": {"replicas": replicas, "serviceName": service}});
        let mut errs = Vec::new();
        stateful_set(&sts(1, "a"), &sts(3, "a"), &mut errs);
        assert!(errs.is_empty());
        stateful_set(&sts(1, "a"), &sts(1, "b"), &mut errs);
        assert_eq!(
            errs[0].to_string(),
            format!("spec: Forbidden: {STATEFUL_SET_UPDATE}")
        );
    }

    #[test]
    fn a_bound_claim_may_grow_and_nothing_else() {
        let pvc = |size: &str, class: &str, phase: &str| {
            json!({"spec": {"storageClassName": class, "resources": {"requests": {"storage": size}}},
                   "status": {"phase": phase}})
        };
        let mut errs = Vec::new();
        persistent_volume_claim(
            &pvc("1Gi", "a", "Bound"),
            &pvc("2Gi", "a", "Bound"),
            &mut errs,
        );
        assert!(errs.is_empty(), "{errs:?}");
        persistent_volume_claim(
            &pvc("1Gi", "a", "Pending"),
            &pvc("2Gi", "a", "Pending"),
            &mut errs,
        );
        persistent_volume_claim(
            &pvc("1Gi", "a", "Bound"),
            &pvc("1Gi", "b", "Bound"),
            &mut errs,
        );
        assert_eq!(errs.len(), 2);
        assert!(
            errs[1]
                .to_string()
                .starts_with(&format!("spec: Forbidden: {PVC_UPDATE}\n"))
        );
    }
}
