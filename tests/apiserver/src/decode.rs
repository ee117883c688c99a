//! Decoding a built-in object as the API server's JSON decoder does: a value of the wrong type
//! (a label value written as the number `2`, a string in an integer field) refuses the object,
//! worded as the API server's decode error; a field the kind does not have is dropped and
//! reported as a warning, as the API server does with `fieldValidation=Warn`
//! (staging/src/k8s.io/apimachinery/pkg/runtime/serializer/json/json.go, strict decoding).
//!
//! The types are k8s-openapi's (the feature the workspace builds: a field Kubernetes added
//! after it reads as unknown). Kinds without a type there are read as written.
//!
//! k8s-openapi ignores fields it does not know, so unknown fields are found by a round trip:
//! the typed value is serialized back and every key of the object missing from it (and not
//! `null`) is one. The object kept is the one written, unknown fields removed: values stay as
//! written (`1000m` is not made `1`), not as the typed model would print them.

use serde_json::{Map, Value};

/// A built-in object decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// The object as written, fields the kind does not have removed.
    pub value: Value,
    /// One line per field dropped: `unknown field "spec.x"`.
    pub warnings: Vec<String>,
}

/// Decodes `v`, of the built-in kind `kind` of `group`/`version`: `Ok` with the object and
/// its warnings, `Err` with the API server's words for a value of the wrong type. A kind
/// without a typed model is returned as written.
pub fn decode(group: &str, version: &str, kind: &str, v: &Value) -> Result<Decoded, String> {
    let typed = match round_trip(group, version, kind, v) {
        None => {
            return Ok(Decoded {
                value: v.clone(),
                warnings: Vec::new(),
            });
        }
        Some(r) => r.map_err(|e| {
            format!(
                "{kind} in version {version:?} cannot be handled as a {kind}: {}",
                describe(&e)
            )
        })?,
    };
    let mut value = v.clone();
    let mut warnings = Vec::new();
    drop_unknown(&mut value, &typed, &mut String::new(), &mut warnings);
    Ok(Decoded { value, warnings })
}

/// A type error: where, and serde's words for it.
struct TypeError {
    path: String,
    message: String,
}

/// `json: cannot unmarshal number into field metadata.labels.app of type string`, from
/// serde's `invalid type: integer `2`, expected a string`; serde's words where they are not
/// of that shape.
fn describe(e: &TypeError) -> String {
    let Some(rest) = e.message.strip_prefix("invalid type: ") else {
        return format!("json: {} at {}", e.message, e.path);
    };
    let (got, expected) = rest.split_once(", expected ").unwrap_or((rest, "?"));
    let got = match got.split([' ', '`']).next().unwrap_or(got) {
        "integer" | "floating" => "number",
        "boolean" => "bool",
        "sequence" => "array",
        "map" => "object",
        "null" => "null",
        _ => "string",
    };
    let expected = match expected {
        "a string" | "a borrowed string" => "string",
        "i32" => "int32",
        "i64" => "int64",
        "f64" => "float64",
        "a boolean" => "bool",
        "a sequence" => "array",
        "a map" => "object",
        other => other.trim_start_matches("struct "),
    };
    format!(
        "json: cannot unmarshal {got} into field {} of type {expected}",
        e.path
    )
}

/// Deserializes `v` through the type of its kind and serializes it back (`None`: no type).
fn round_trip(
    group: &str,
    version: &str,
    kind: &str,
    v: &Value,
) -> Option<Result<Value, TypeError>> {
    fn via<T>(v: &Value) -> Result<Value, TypeError>
    where
        T: serde::de::DeserializeOwned + serde::Serialize,
    {
        let typed: T = serde_path_to_error::deserialize(v).map_err(|e| TypeError {
            path: e.path().to_string(),
            message: e.inner().to_string(),
        })?;
        serde_json::to_value(&typed).map_err(|e| TypeError {
            path: String::new(),
            message: e.to_string(),
        })
    }
    macro_rules! kinds {
        ($($ty:ty),* $(,)?) => {
            $(
                if <$ty as k8s_openapi::Resource>::GROUP == group
                    && <$ty as k8s_openapi::Resource>::VERSION == version
                    && <$ty as k8s_openapi::Resource>::KIND == kind
                {
                    return Some(via::<$ty>(v));
                }
            )*
        };
    }
    use k8s_openapi::api::{
        admissionregistration, apps, autoscaling, batch, certificates, coordination, core,
        discovery, events, flowcontrol, networking, node, policy, rbac, scheduling, storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
    use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;
    kinds!(
        core::v1::ConfigMap,
        core::v1::Endpoints,
        core::v1::Event,
        core::v1::LimitRange,
        core::v1::Namespace,
        core::v1::Node,
        core::v1::PersistentVolume,
        core::v1::PersistentVolumeClaim,
        core::v1::Pod,
        core::v1::PodTemplate,
        core::v1::ReplicationController,
        core::v1::ResourceQuota,
        core::v1::Secret,
        core::v1::Service,
        core::v1::ServiceAccount,
        admissionregistration::v1::MutatingWebhookConfiguration,
        admissionregistration::v1::ValidatingAdmissionPolicy,
        admissionregistration::v1::ValidatingAdmissionPolicyBinding,
        admissionregistration::v1::ValidatingWebhookConfiguration,
        apiextensions::v1::CustomResourceDefinition,
        apiregistration::v1::APIService,
        apps::v1::ControllerRevision,
        apps::v1::DaemonSet,
        apps::v1::Deployment,
        apps::v1::ReplicaSet,
        apps::v1::StatefulSet,
        autoscaling::v1::HorizontalPodAutoscaler,
        autoscaling::v2::HorizontalPodAutoscaler,
        batch::v1::CronJob,
        batch::v1::Job,
        certificates::v1::CertificateSigningRequest,
        coordination::v1::Lease,
        discovery::v1::EndpointSlice,
        events::v1::Event,
        flowcontrol::v1::FlowSchema,
        flowcontrol::v1::PriorityLevelConfiguration,
        networking::v1::Ingress,
        networking::v1::IngressClass,
        networking::v1::IPAddress,
        networking::v1::NetworkPolicy,
        networking::v1::ServiceCIDR,
        node::v1::RuntimeClass,
        policy::v1::PodDisruptionBudget,
        rbac::v1::ClusterRole,
        rbac::v1::ClusterRoleBinding,
        rbac::v1::Role,
        rbac::v1::RoleBinding,
        scheduling::v1::PriorityClass,
        storage::v1::CSIDriver,
        storage::v1::CSINode,
        storage::v1::CSIStorageCapacity,
        storage::v1::StorageClass,
        storage::v1::VolumeAttachment,
    );
    None
}

/// Removes from `v` every key `typed` (its round trip) lacks, each named in `warnings` by its
/// path from the object's root.
fn drop_unknown(v: &mut Value, typed: &Value, path: &mut String, warnings: &mut Vec<String>) {
    match (v, typed) {
        (Value::Object(m), Value::Object(t)) => drop_unknown_keys(m, t, path, warnings),
        (Value::Array(items), Value::Array(t)) if items.len() == t.len() => {
            for (i, (item, t)) in items.iter_mut().zip(t).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                drop_unknown(item, t, path, warnings);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

fn drop_unknown_keys(
    m: &mut Map<String, Value>,
    t: &Map<String, Value>,
    path: &mut String,
    warnings: &mut Vec<String>,
) {
    m.retain(|k, value| {
        if t.contains_key(k) || value.is_null() {
            return true;
        }
        let shown = if path.is_empty() {
            k.clone()
        } else {
            format!("{path}.{k}")
        };
        warnings.push(format!("unknown field {shown:?}"));
        false
    });
    for (k, value) in m.iter_mut() {
        if let Some(t) = t.get(k) {
            let len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(k);
            drop_unknown(value, t, path, warnings);
            path.truncate(len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: Value, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels}, "spec": spec})
    }

    #[test]
    fn a_label_value_written_as_a_number_refuses_the_object_as_the_api_server_words_it() {
        let v = pod(
            json!({"containers": [{"name": "c", "image": "i"}]}),
            json!({"v": 2}),
        );
        let e = decode("", "v1", "Pod", &v).unwrap_err();
        assert_eq!(
            e,
            "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal number into field metadata.labels.v of type string"
        );
    }

    #[test]
    fn a_string_in_an_integer_field_refuses_the_object_naming_the_field() {
        let v = pod(
            json!({"containers": [{"name": "c", "image": "i"}], "volumes": [{"name": "d", "iscsi": {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.x", "lun": "<ADD LUN ID Here>"}}]}),
            json!({}),
        );
        let e = decode("", "v1", "Pod", &v).unwrap_err();
        assert_eq!(
            e,
            "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal string into field spec.volumes[0].iscsi.lun of type int32"
        );
    }

    /// The types are Kubernetes 1.36's, the version the kinds table stands for: fields added
    /// in 1.34 (`spec.hostnameOverride`, a container's `restartPolicyRules`) are known, not
    /// dropped as unknown.
    #[test]
    fn fields_of_kubernetes_1_36_are_known() {
        let v = pod(
            json!({"hostnameOverride": "h", "containers": [{"name": "c", "image": "i", "restartPolicy": "Never",
                   "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]}]}),
            json!({}),
        );
        let d = decode("", "v1", "Pod", &v).unwrap();
        assert_eq!(d.warnings, Vec::<String>::new());
        assert_eq!(d.value, v);
    }

    #[test]
    fn unknown_fields_are_dropped_and_reported_and_the_rest_is_kept_as_written() {
        let v: Value = serde_json::from_str(
            r#"{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s", "creationTimestamp": null},
                "spec": {"selector": {"app": "web"}, "protectionDoamin": "x",
                         "ports": [{"port": 80, "targetPort": "http", "x": 1}]},
                "status": {}}"#,
        )
        .unwrap();
        let d = decode("", "v1", "Service", &v).unwrap();
        assert_eq!(
            d.warnings,
            [
                "unknown field \"spec.protectionDoamin\"",
                "unknown field \"spec.ports[0].x\""
            ]
        );
        let mut want = v.clone();
        want["spec"]
            .as_object_mut()
            .unwrap()
            .remove("protectionDoamin");
        want["spec"]["ports"][0]
            .as_object_mut()
            .unwrap()
            .remove("x");
        assert_eq!(d.value, want, "the rest as written, nulls included");
    }

    #[test]
    fn free_form_fields_and_kinds_without_a_type_are_read_as_written() {
        let v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "annotations": {"a": "b"}}, "data": {"any": "thing"}});
        assert_eq!(
            decode("", "v1", "ConfigMap", &v).unwrap().warnings,
            Vec::<String>::new()
        );
        let w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "whatever": 1});
        assert_eq!(decode("example.com", "v1", "Widget", &w).unwrap().value, w);
    }
}
