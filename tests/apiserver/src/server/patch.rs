//! Patch formats other than JSON merge patch: strategic merge patch and RFC 6902 JSON patch, and
//! the table of list strategies of built-in types that both SMP and server-side apply use.
//!
//! Strategic merge patch (`application/strategic-merge-patch+json`) follows the `patchStrategy`
//! and `patchMergeKey` tags of the built-in Go types: lists with a merge key are merged item by
//! item, `patchStrategy: merge` lists of scalars (finalizers) are merged as sets, and all other
//! lists are replaced. Directives: `$patch: replace | delete | merge` on maps and list items,
//! `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>` and `$retainKeys`. Custom
//! resources have no strategic merge patch: the server answers 415, as a real one does.
//!
//! Deliberate simplifications:
//! - the strategy table covers the common built-in types (pods and pod templates in every
//!   workload, Services, object metadata, status conditions), not every field of every API;
//!   unknown fields merge maps and replace lists, as SMP does for untagged fields;
//! - `$setElementOrder` puts the listed items first, in its order, then the server-only items in
//!   their previous order (the real server interleaves the latter);
//! - an item without its merge key answers 500 with reason `Unknown`, as the real server's
//!   untyped error does.

use serde_json::{Map, Value};

use super::status::ApiError;

/// The shape of a list field, as SMP's tags and SSA's `x-kubernetes-list-type` describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// Replaced as a whole (SMP default, `x-kubernetes-list-type: atomic`).
    Atomic,
    /// Scalars merged as a set (`patchStrategy: merge` on scalars, `listType: set`).
    Set,
    /// Objects merged by these keys; SMP uses the first (`patchMergeKey`), SSA all of them.
    Map(&'static [&'static str]),
}

/// A node of the type table: what the fields of the value at some path are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    /// No strategies known: maps merge, lists are atomic.
    Opaque,
    /// A map owned and applied as a whole (`+structType=atomic`, `+mapType=atomic`: label
    /// selectors, node selectors); strategic merge patch still merges it.
    AtomicMap,
    /// The top of a custom resource: only its `metadata` has known strategies.
    CustomRoot,
    /// The top of a built-in object of this kind.
    Root(BuiltinKind),
    /// `metadata` (ObjectMeta).
    Meta,
    /// A workload spec with `template` (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, RC).
    WorkloadSpec,
    /// CronJob spec with `jobTemplate`.
    CronJobSpec,
    /// A pod template (`metadata` + `spec`).
    PodTemplate,
    /// PodSpec.
    PodSpec,
    /// Container, init container or ephemeral container.
    Container,
    /// ServiceSpec.
    ServiceSpec,
    /// Any built-in `status`.
    Status,
}

/// Which spec a built-in kind has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BuiltinKind {
    Pod,
    Workload,
    CronJob,
    PodTemplate,
    Service,
    Other,
}

/// API groups served by kube-apiserver itself; every other group is a custom resource.
const BUILTIN_GROUPS: &[&str] = &[
    "",
    "apps",
    "batch",
    "autoscaling",
    "policy",
    "extensions",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// Whether `group` is served by kube-apiserver (not a CRD).
pub(crate) fn is_builtin_group(group: &str) -> bool {
    BUILTIN_GROUPS.contains(&group)
}

/// The type at the top of an object of `kind` in `group`.
pub(crate) fn root_type(group: &str, kind: &str) -> Ty {
    if !is_builtin_group(group) {
        return Ty::CustomRoot;
    }
    Ty::Root(match kind {
        "Pod" => BuiltinKind::Pod,
        "Deployment"
        | "ReplicaSet"
        | "StatefulSet"
        | "DaemonSet"
        | "Job"
        | "ReplicationController" => BuiltinKind::Workload,
        "CronJob" => BuiltinKind::CronJob,
        "PodTemplate" => BuiltinKind::PodTemplate,
        "Service" => BuiltinKind::Service,
        _ => BuiltinKind::Other,
    })
}

const BY_NAME: ListKind = ListKind::Map(&["name"]);

/// The type of field `name` of a value of type `ty`, and how it merges when it is a list.
pub(crate) fn field(ty: Ty, name: &str) -> (Ty, ListKind) {
    use ListKind::{Atomic, Map, Set};
    let opaque = |list| (Ty::Opaque, list);
    match (ty, name) {
        (Ty::Root(_) | Ty::CustomRoot, "metadata") => (Ty::Meta, Atomic),
        (Ty::Root(_), "status") => (Ty::Status, Atomic),
        (Ty::Root(BuiltinKind::Pod), "spec") => (Ty::PodSpec, Atomic),
        (Ty::Root(BuiltinKind::Workload), "spec") => (Ty::WorkloadSpec, Atomic),
        (Ty::Root(BuiltinKind::CronJob), "spec") => (Ty::CronJobSpec, Atomic),
        (Ty::Root(BuiltinKind::PodTemplate), "template") => (Ty::PodTemplate, Atomic),
        (Ty::Root(BuiltinKind::Service), "spec") => (Ty::ServiceSpec, Atomic),
        (Ty::Meta, "finalizers") => opaque(Set),
        (Ty::Meta, "ownerReferences") => opaque(Map(&["uid"])),
        (Ty::WorkloadSpec, "template") => (Ty::PodTemplate, Atomic),
        (Ty::WorkloadSpec | Ty::ServiceSpec, "selector") | (Ty::PodSpec, "nodeSelector") => {
            (Ty::AtomicMap, Atomic)
        }
        (Ty::CronJobSpec, "jobTemplate") => (Ty::Root(BuiltinKind::Workload), Atomic),
        (Ty::PodTemplate, "metadata") => (Ty::Meta, Atomic),
        (Ty::PodTemplate, "spec") => (Ty::PodSpec, Atomic),
        (Ty::PodSpec, "containers" | "initContainers" | "ephemeralContainers") => {
            (Ty::Container, BY_NAME)
        }
        (Ty::PodSpec, "volumes" | "imagePullSecrets" | "resourceClaims" | "schedulingGates") => {
            opaque(BY_NAME)
        }
        (Ty::PodSpec, "hostAliases") => opaque(Map(&["ip"])),
        (Ty::PodSpec, "topologySpreadConstraints") => {
            opaque(Map(&["topologyKey", "whenUnsatisfiable"]))
        }
        (Ty::Container, "ports") => opaque(Map(&["containerPort", "protocol"])),
        (Ty::Container, "env") => opaque(BY_NAME),
        (Ty::Container, "volumeMounts") => opaque(Map(&["mountPath"])),
        (Ty::Container, "volumeDevices") => opaque(Map(&["devicePath"])),
        (Ty::ServiceSpec, "ports") => opaque(Map(&["port", "protocol"])),
        (Ty::Status, "conditions" | "addresses") => opaque(Map(&["type"])),
        (Ty::Status, "podIPs" | "hostIPs") => opaque(Map(&["ip"])),
        _ => opaque(Atomic),
    }
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch
// ---------------------------------------------------------------------------------------------

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_PRIMITIVE: &str = "$deleteFromPrimitiveList/";

/// An untyped error of strategic merge patching: 500 with reason `Unknown`, as kube-apiserver
/// answers errors that are not API statuses.
fn smp_error(message: impl Into<String>) -> ApiError {
    ApiError {
        code: 500,
        reason: "Unknown",
        message: message.into(),
        details: None,
    }
}

/// Applies a strategic merge patch to `original`, an object of type `ty`.
pub(crate) fn strategic_merge(original: &Value, patch: &Value, ty: Ty) -> Result<Value, ApiError> {
    let Value::Object(patch) = patch else {
        return Err(ApiError::bad_request("invalid JSON document"));
    };
    let original = original.as_object().cloned().unwrap_or_default();
    Ok(merge_map(original, patch, ty)?.map_or(Value::Object(Map::new()), Value::Object))
}

/// Merges `patch` into `original`; `None` when the patch deletes the map.
fn merge_map(
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    ty: Ty,
) -> Result<Option<Map<String, Value>>, ApiError> {
    match patch.get(PATCH).and_then(Value::as_str) {
        Some("replace") => return Ok(Some(strip_directives(patch))),
        Some("delete") => return Ok(None),
        Some("merge") | None => {}
        Some(other) => {
            return Err(smp_error(format!("Unknown patch type: {other}")));
        }
    }
    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let Some(keys) = retain.as_array() else {
            return Err(ApiError::bad_request("invalid patch format of retainKeys"));
        };
        let keys: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
        for key in patch.keys().filter(|k| !k.starts_with('$')) {
            if !keys.contains(&key.as_str()) {
                return Err(unprocessable());
            }
        }
        original.retain(|k, _| keys.contains(&k.as_str()));
    }
    for (key, value) in patch {
        if let Some(list) = key.strip_prefix(DELETE_PRIMITIVE) {
            let Some(remove) = value.as_array() else {
                return Err(ApiError::bad_request(
                    "invalid patch format of primitive list",
                ));
            };
            if let Some(Value::Array(items)) = original.get_mut(list) {
                items.retain(|item| !remove.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        let (child_ty, list_kind) = field(ty, key);
        if value.is_null() {
            original.remove(key);
            continue;
        }
        let merged = match (original.remove(key), value) {
            (Some(Value::Object(orig)), Value::Object(p)) => {
                merge_map(orig, p, child_ty)?.map(Value::Object)
            }
            (None, Value::Object(p)) => merge_map(Map::new(), p, child_ty)?.map(Value::Object),
            (orig, Value::Array(p)) => {
                let orig = match orig {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                };
                Some(Value::Array(merge_list(orig, p, child_ty, list_kind)?))
            }
            (_, scalar) => Some(scalar.clone()),
        };
        if let Some(merged) = merged {
            original.insert(key.clone(), merged);
        }
    }
    for (key, order) in patch {
        let Some(list) = key.strip_prefix(SET_ORDER) else {
            continue;
        };
        let Some(order) = order.as_array() else {
            return Err(ApiError::bad_request(
                "invalid patch format of setElementOrder list",
            ));
        };
        let (_, list_kind) = field(ty, list);
        if let Some(Value::Array(items)) = original.get_mut(list) {
            reorder(items, order, list_kind);
        }
    }
    Ok(Some(original))
}

/// The list field merged per its strategy.
fn merge_list(
    original: Vec<Value>,
    patch: &[Value],
    ty: Ty,
    kind: ListKind,
) -> Result<Vec<Value>, ApiError> {
    match kind {
        ListKind::Atomic => Ok(patch.iter().map(strip_value).collect()),
        ListKind::Set => {
            let mut out = original;
            for item in patch {
                if item.is_object() || item.is_array() {
                    return Err(ApiError::bad_request(
                        "invalid patch format of primitive list",
                    ));
                }
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            Ok(out)
        }
        ListKind::Map(keys) => merge_keyed_list(original, patch, ty, keys[0]),
    }
}

fn merge_keyed_list(
    mut out: Vec<Value>,
    patch: &[Value],
    ty: Ty,
    key: &str,
) -> Result<Vec<Value>, ApiError> {
    let replace = patch
        .iter()
        .any(|p| p.get(PATCH).and_then(Value::as_str) == Some("replace"));
    if replace {
        return Ok(patch
            .iter()
            .filter(|p| p.get(PATCH).is_none())
            .map(strip_value)
            .collect());
    }
    for item in patch {
        let Value::Object(p) = item else {
            return Err(smp_error(format!(
                "{item} is not a map; the list is merged by its key: {key}"
            )));
        };
        let directive = p.get(PATCH).and_then(Value::as_str);
        let Some(id) = p.get(key) else {
            if directive == Some("merge") && p.len() == 1 {
                continue;
            }
            return Err(smp_error(format!(
                "map: {} does not contain declared merge key: {key}",
                Value::Object(p.clone())
            )));
        };
        let at = out.iter().position(|o| o.get(key) == Some(id));
        if directive == Some("delete") {
            out.retain(|o| o.get(key) != Some(id));
            continue;
        }
        match at {
            Some(i) => {
                let orig = match out[i].take() {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                match merge_map(orig, p, ty)? {
                    Some(merged) => out[i] = Value::Object(merged),
                    None => {
                        out.remove(i);
                    }
                }
            }
            None => {
                if let Some(new) = merge_map(Map::new(), p, ty)? {
                    out.push(Value::Object(new));
                }
            }
        }
    }
    Ok(out)
}

/// Orders `items` as `order` lists them; items not in `order` follow in their previous order.
fn reorder(items: &mut Vec<Value>, order: &[Value], kind: ListKind) {
    let rank = |item: &Value| -> Option<usize> {
        order.iter().position(|o| match kind {
            ListKind::Map(keys) => o.get(keys[0]).is_some() && o.get(keys[0]) == item.get(keys[0]),
            _ => o == item,
        })
    };
    let mut ranked: Vec<(usize, Value)> = Vec::new();
    let mut rest = Vec::new();
    for item in items.drain(..) {
        match rank(&item) {
            Some(r) => ranked.push((r, item)),
            None => rest.push(item),
        }
    }
    ranked.sort_by_key(|(r, _)| *r);
    items.extend(ranked.into_iter().map(|(_, v)| v));
    items.extend(rest);
}

/// A patch value stored as is: its directives removed.
fn strip_value(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(strip_directives(map)),
        Value::Array(items) => Value::Array(items.iter().map(strip_value).collect()),
        other => other.clone(),
    }
}

fn strip_directives(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| (k.clone(), strip_value(v)))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// JSON patch
// ---------------------------------------------------------------------------------------------

/// Why a JSON patch failed to apply: the real server answers 422 with a generic message and
/// drops this text, so it is kept for the server's log only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsonPatchError(pub String);

/// kube-apiserver's 422 for a JSON patch that does not apply, or a strategic merge patch whose
/// content does not match its `$retainKeys`: a generic message, the cause is not told.
pub(crate) fn unprocessable() -> ApiError {
    ApiError::invalid("the server rejected our request due to an error in our request")
}

/// Most operations kube-apiserver accepts in one JSON patch.
const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Checks the shape of a JSON patch document: 400 when it is not a list of operations, 413 when
/// it has more than 10,000.
pub(crate) fn decode_json_patch(patch: &Value) -> Result<&Vec<Value>, ApiError> {
    let Value::Array(ops) = patch else {
        return Err(ApiError::bad_request(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
        ));
    };
    if ops.iter().any(|op| !op.is_object()) {
        return Err(ApiError::bad_request(
            "json: cannot unmarshal into Go value of type jsonpatch.Operation",
        ));
    }
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(ApiError {
            code: 413,
            reason: "RequestEntityTooLarge",
            message: format!(
                "Request entity too large: The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
                ops.len()
            ),
            details: None,
        });
    }
    Ok(ops)
}

/// Applies RFC 6902 operations in order to a copy of `doc`, with the `json-patch` crate (the
/// one kube's `jsonpatch` feature builds): an operation it cannot read, or one that does not
/// apply, fails the whole patch and leaves `doc` as it was.
pub(crate) fn json_patch(doc: &Value, ops: &[Value]) -> Result<Value, JsonPatchError> {
    let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops.to_vec()))
        .map_err(|e| JsonPatchError(e.to_string()))?;
    let mut doc = doc.clone();
    json_patch::patch(&mut doc, &patch).map_err(|e| JsonPatchError(e.to_string()))?;
    Ok(doc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(containers: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
               "spec": {"template": {"spec": {"containers": containers}}}})
    }

    fn smp(original: &Value, patch: Value) -> Value {
        strategic_merge(
            original,
            &patch,
            root_type("apps", original["kind"].as_str().unwrap_or("")),
        )
        .expect("patch applies")
    }

    #[test]
    fn containers_merge_by_name_and_set_element_order_is_not_stored() {
        let d = deployment(json!([{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]));
        let patched = smp(
            &d,
            json!({"spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
                "containers": [{"name": "b", "image": "b:2"}]}}}}),
        );
        assert_eq!(
            patched["spec"]["template"]["spec"],
            json!({"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:2"}]})
        );
    }

    #[test]
    fn directives_delete_replace_and_primitive_list_deletion() {
        let d = deployment(
            json!([{"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}, {"name": "b"}]),
        );
        let patched = smp(
            &d,
            json!({"metadata": {"finalizers": ["f1"]},
                   "spec": {"template": {"spec": {"containers": [
                       {"name": "b", "$patch": "delete"},
                       {"name": "a", "env": [{"name": "X", "$patch": "delete"}, {"name": "Z", "value": "3"}]}]}}}}),
        );
        assert_eq!(
            patched["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a", "image": "a:1", "env": [{"name": "Y", "value": "2"}, {"name": "Z", "value": "3"}]}])
        );
        let patched = smp(
            &patched,
            json!({"metadata": {"finalizers": ["f2"], "$deleteFromPrimitiveList/finalizers": ["f1"]},
                   "spec": {"template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "c"}]}}}}),
        );
        assert_eq!(patched["metadata"]["finalizers"], json!(["f2"]));
        assert_eq!(
            patched["spec"]["template"]["spec"]["containers"],
            json!([{"name": "c"}])
        );
        let replaced = smp(
            &patched,
            json!({"spec": {"template": {"$patch": "replace", "spec": {}}}}),
        );
        assert_eq!(replaced["spec"]["template"], json!({"spec": {}}));
    }

    #[test]
    fn untagged_lists_are_replaced_and_retain_keys_clears_other_keys() {
        let pod = json!({"kind": "Pod", "spec": {"tolerations": [{"key": "a"}], "volumes": [
            {"name": "v", "emptyDir": {}}]}});
        let ty = root_type("", "Pod");
        let patched = strategic_merge(
            &pod,
            &json!({"spec": {"tolerations": [{"key": "b"}], "volumes": [
                {"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}}),
            ty,
        )
        .expect("applies");
        assert_eq!(
            patched["spec"],
            json!({"tolerations": [{"key": "b"}], "volumes": [{"name": "v", "hostPath": {"path": "/x"}}]})
        );
        let missing_key =
            strategic_merge(&pod, &json!({"spec": {"volumes": [{"emptyDir": {}}]}}), ty);
        assert_eq!(missing_key.map_err(|e| e.code), Err(500));
        let outside_retain_keys = strategic_merge(
            &pod,
            &json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name"], "hostPath": {}}]}}),
            ty,
        );
        assert_eq!(outside_retain_keys.map_err(|e| e.code), Err(422));
    }

    #[test]
    fn owner_references_service_ports_and_pull_secrets_merge_by_their_keys() {
        let svc = json!({"kind": "Service", "metadata": {
                "ownerReferences": [{"uid": "u1", "name": "a"}],
                "finalizers": ["x", "y"]},
            "spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
        let patched = strategic_merge(
            &svc,
            &json!({"metadata": {"ownerReferences": [{"uid": "u2", "name": "b"}],
                                 "$setElementOrder/finalizers": ["y", "x"]},
                    "spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
            root_type("", "Service"),
        )
        .expect("applies");
        assert_eq!(
            patched["metadata"],
            json!({"ownerReferences": [{"uid": "u1", "name": "a"}, {"uid": "u2", "name": "b"}],
                   "finalizers": ["y", "x"]})
        );
        assert_eq!(
            patched["spec"]["ports"],
            json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
        );
        let pod = json!({"kind": "Pod", "spec": {
            "imagePullSecrets": [{"name": "a"}],
            "initContainers": [{"name": "init", "image": "i:1"}]}});
        let patched = strategic_merge(
            &pod,
            &json!({"spec": {"imagePullSecrets": [{"name": "b"}],
                             "initContainers": [{"name": "init", "image": "i:2"}]}}),
            root_type("", "Pod"),
        )
        .expect("applies");
        assert_eq!(
            patched["spec"],
            json!({"imagePullSecrets": [{"name": "a"}, {"name": "b"}],
                   "initContainers": [{"name": "init", "image": "i:2"}]})
        );
    }

    #[test]
    fn json_patch_follows_rfc_6902() {
        let doc = json!({"a/b": {"~c": [1, 2]}, "x": "y"});
        let ops = json!([
            {"op": "add", "path": "/a~1b/~0c/-", "value": 3},
            {"op": "add", "path": "/a~1b/~0c/0", "value": 0},
            {"op": "test", "path": "/a~1b/~0c", "value": [0, 1, 2, 3]},
            {"op": "copy", "from": "/x", "path": "/z"},
            {"op": "move", "from": "/x", "path": "/w"},
            {"op": "replace", "path": "/z", "value": "r"},
            {"op": "remove", "path": "/a~1b/~0c/1"}
        ]);
        let patched = json_patch(&doc, decode_json_patch(&ops).expect("ops")).expect("applies");
        assert_eq!(
            patched,
            json!({"a/b": {"~c": [0, 2, 3]}, "w": "y", "z": "r"})
        );
        for bad in [
            json!([{"op": "test", "path": "/x", "value": "no"}]),
            json!([{"op": "remove", "path": "/nope"}]),
            json!([{"op": "replace", "path": "/nope", "value": 1}]),
            json!([{"op": "add", "path": "/a~1b/~0c/9", "value": 1}]),
            json!([{"op": "add", "path": "/q/r", "value": 1}]),
            json!([{"op": "move", "from": "/a~1b", "path": "/a~1b/k"}]),
        ] {
            assert!(
                json_patch(&doc, bad.as_array().expect("ops")).is_err(),
                "{bad}"
            );
        }
        assert!(decode_json_patch(&json!({"op": "add"})).is_err());
        let many = Value::Array(vec![json!({"op": "test", "path": "", "value": 1}); 10_001]);
        assert_eq!(
            decode_json_patch(&many).map(|_| ()).map_err(|e| e.code),
            Err(413)
        );
    }
}
