//! Field selectors as an API server checks and reads them: which field labels each kind
//! supports (its field label conversion; any other label is a 400 BadRequest with the
//! kind's message), and the value of a label for an object (the registry's `GetAttrs` /
//! selectable field set).
//!
//! The labels are Kubernetes 1.36's: pkg/apis/core/v1/conversion.go,
//! pkg/apis/apps/v1/conversion.go, pkg/apis/batch/v1/conversion.go,
//! pkg/apis/certificates/v1/conversion.go; every other built-in kind has apimachinery's
//! `DefaultMetaV1FieldSelectorConversion` (metadata.name, metadata.namespace); a custom resource
//! has metadata.name, metadata.namespace when namespaced, and its version's `selectableFields`
//! (apiextensions-apiserver/pkg/registry/customresource/strategy.go).

use serde_json::Value;

use crate::selector::FieldSelector;

/// How a kind answers a field label it does not support; the messages are the real ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rejection {
    /// `field label not supported: X` (core kinds with their own conversion, custom resources).
    NotSupported,
    /// `field label "X" not supported for batchv1.Job`.
    Job,
    /// `"X" is not a known field selector: only "metadata.name", "metadata.namespace"`.
    MetaOnly,
}

/// How the values of a kind's field labels are read, where they are not plain copies of a
/// JSON string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Values {
    /// Dotted JSON paths; a missing field is the empty string.
    Plain,
    /// Pod: `spec.hostNetwork` defaults to `false`, `status.podIP` is the first of `podIPs`,
    /// `status.podIPs` is never set (a real server accepts the label but has no value for it).
    Pod,
    /// Event: `source` is `source.component`.
    Event,
    /// Node: `spec.unschedulable` defaults to `false`.
    Node,
    /// ReplicaSet, ReplicationController: `status.replicas` defaults to `0`.
    Replicas,
    /// Job: `status.successful` is `status.succeeded`, default `0`.
    Job,
}

/// A built-in kind with a field label conversion of its own.
struct Own {
    group: &'static str,
    kind: &'static str,
    labels: &'static [&'static str],
    rejection: Rejection,
    values: Values,
}

const OWN: &[Own] = &[
    Own {
        group: "",
        kind: "Pod",
        labels: &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
            // Converted to spec.nodeName.
            "spec.host",
        ],
        rejection: Rejection::NotSupported,
        values: Values::Pod,
    },
    Own {
        group: "",
        kind: "Node",
        labels: &["metadata.name", "spec.unschedulable"],
        rejection: Rejection::NotSupported,
        values: Values::Node,
    },
    Own {
        group: "",
        kind: "ReplicationController",
        labels: &["metadata.name", "metadata.namespace", "status.replicas"],
        rejection: Rejection::NotSupported,
        values: Values::Replicas,
    },
    Own {
        group: "",
        kind: "Event",
        labels: &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "metadata.namespace",
            "metadata.name",
        ],
        rejection: Rejection::NotSupported,
        values: Values::Event,
    },
    Own {
        group: "",
        kind: "Namespace",
        labels: &["status.phase", "metadata.name"],
        rejection: Rejection::NotSupported,
        values: Values::Plain,
    },
    Own {
        group: "",
        kind: "Secret",
        labels: &["type", "metadata.namespace", "metadata.name"],
        rejection: Rejection::NotSupported,
        values: Values::Plain,
    },
    Own {
        group: "",
        kind: "Service",
        labels: &[
            "metadata.namespace",
            "metadata.name",
            "spec.clusterIP",
            "spec.type",
        ],
        rejection: Rejection::NotSupported,
        values: Values::Plain,
    },
    Own {
        group: "apps",
        kind: "ReplicaSet",
        labels: &["metadata.name", "metadata.namespace", "status.replicas"],
        rejection: Rejection::NotSupported,
        values: Values::Replicas,
    },
    Own {
        group: "batch",
        kind: "Job",
        labels: &["metadata.name", "metadata.namespace", "status.successful"],
        rejection: Rejection::Job,
        values: Values::Job,
    },
    Own {
        group: "certificates.k8s.io",
        kind: "CertificateSigningRequest",
        labels: &["metadata.name", "spec.signerName"],
        rejection: Rejection::NotSupported,
        values: Values::Plain,
    },
];

/// Every other built-in kind: `DefaultMetaV1FieldSelectorConversion`.
const META: Own = Own {
    group: "",
    kind: "",
    labels: &["metadata.name", "metadata.namespace"],
    rejection: Rejection::MetaOnly,
    values: Values::Plain,
};

fn own(group: &str, kind: &str) -> &'static Own {
    OWN.iter()
        .find(|o| o.group == group && o.kind == kind)
        .unwrap_or(&META)
}

/// What decides which field labels a kind supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selectable<'a> {
    /// A built-in kind of Kubernetes (any version: the labels do not change between them).
    Builtin {
        /// API group (`""` for core).
        group: &'a str,
        /// Kind.
        kind: &'a str,
    },
    /// A custom resource whose CRD is at hand.
    Custom {
        /// Whether the CRD's scope is `Namespaced`.
        namespaced: bool,
        /// The served version's `selectableFields`, as labels (`spec.color`).
        fields: &'a [String],
    },
    /// A custom resource whose CRD is not at hand (a config checked before any cluster is
    /// asked): `metadata.name`, `metadata.namespace`, and any label outside `metadata` (a
    /// CRD's `selectableFields` may not point into metadata; the others it may declare).
    Undeclared,
}

/// A field label a kind does not support, in the API server's words (the message of its 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldLabelError {
    /// The generic refusal (most kinds, custom resources).
    #[error("field label not supported: {0}")]
    NotSupported(String),
    /// Job's own wording.
    #[error("field label {0:?} not supported for batchv1.Job")]
    NotForJob(String),
    /// Kinds that select on `metadata.name` and `metadata.namespace` only.
    #[error("{0:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"")]
    MetadataOnly(String),
}

impl<'a> Selectable<'a> {
    /// A built-in kind, or [`Selectable::Undeclared`] for any other.
    pub fn of(group: &'a str, kind: &'a str) -> Self {
        if super::builtin_namespaced(group, kind).is_some() {
            Self::Builtin { group, kind }
        } else {
            Self::Undeclared
        }
    }

    /// The label the kind's conversion maps `label` to (Pod's `spec.host` is `spec.nodeName`),
    /// or the API server's message when the kind does not support it.
    pub fn convert(&self, label: &str) -> Result<String, FieldLabelError> {
        let not_supported = || FieldLabelError::NotSupported(label.to_owned());
        match *self {
            Self::Builtin { group, kind } => {
                let o = own(group, kind);
                if !o.labels.contains(&label) {
                    return Err(match o.rejection {
                        Rejection::NotSupported => not_supported(),
                        Rejection::Job => FieldLabelError::NotForJob(label.to_owned()),
                        Rejection::MetaOnly => FieldLabelError::MetadataOnly(label.to_owned()),
                    });
                }
                Ok(match (o.values, label) {
                    (Values::Pod, "spec.host") => "spec.nodeName".to_owned(),
                    _ => label.to_owned(),
                })
            }
            Self::Custom { namespaced, fields } => {
                let ok = label == "metadata.name"
                    || (namespaced && label == "metadata.namespace")
                    || fields.iter().any(|f| f == label);
                ok.then(|| label.to_owned()).ok_or_else(not_supported)
            }
            Self::Undeclared => {
                let ok = matches!(label, "metadata.name" | "metadata.namespace")
                    || !(label.is_empty() || label == "metadata" || label.starts_with("metadata."));
                ok.then(|| label.to_owned()).ok_or_else(not_supported)
            }
        }
    }

    /// Converts every label of `selector` ([`Selectable::convert`]); the first the kind does
    /// not support is the error.
    pub fn convert_selector(&self, selector: &mut FieldSelector) -> Result<(), FieldLabelError> {
        for r in selector.requirements_mut() {
            r.field = self.convert(&r.field)?;
        }
        Ok(())
    }
}

/// The value of the field label `label` of `obj`, a `kind` of `group`, as the API server's
/// selectable field set has it: a dotted path into the object (the empty string when absent,
/// JSON text for a number or boolean), with the kind's own defaults and renamings.
pub fn value(group: &str, kind: &str, obj: &Value, label: &str) -> String {
    let at = |path: &str| {
        let mut cur = Some(obj);
        for part in path.split('.') {
            cur = match part.parse::<usize>() {
                Ok(i) => cur.and_then(|v| v.get(i)),
                Err(_) => cur.and_then(|v| v.get(part)),
            };
        }
        match cur {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        }
    };
    let or = |value: String, default: &str| {
        if value.is_empty() {
            default.to_owned()
        } else {
            value
        }
    };
    match (own(group, kind).values, label) {
        (Values::Pod, "spec.hostNetwork") => or(at(label), "false"),
        (Values::Pod, "status.podIP") => or(at("status.podIPs.0.ip"), &at(label)),
        (Values::Pod, "status.podIPs") => String::new(),
        (Values::Event, "source") => at("source.component"),
        (Values::Node, "spec.unschedulable") => or(at(label), "false"),
        (Values::Replicas, "status.replicas") => or(at(label), "0"),
        (Values::Job, "status.successful") => or(at("status.succeeded"), "0"),
        _ => at(label),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_refuses_the_labels_it_does_not_support_with_the_servers_message() {
        let pods = Selectable::of("", "Pod");
        assert_eq!(pods.convert("status.phase").unwrap(), "status.phase");
        assert_eq!(pods.convert("spec.host").unwrap(), "spec.nodeName");
        assert_eq!(
            pods.convert("metadata.labels.app").unwrap_err().to_string(),
            "field label not supported: metadata.labels.app"
        );
        assert_eq!(
            Selectable::of("batch", "Job")
                .convert("status.phase")
                .unwrap_err()
                .to_string(),
            "field label \"status.phase\" not supported for batchv1.Job"
        );
        assert_eq!(
            Selectable::of("", "ConfigMap")
                .convert("metadata.labels.app")
                .unwrap_err()
                .to_string(),
            "\"metadata.labels.app\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        assert!(
            Selectable::of("", "Node")
                .convert("metadata.namespace")
                .is_err()
        );
        let undeclared = Selectable::of("example.com", "Widget");
        assert_eq!(undeclared, Selectable::Undeclared);
        assert!(undeclared.convert("spec.color").is_ok());
        assert!(undeclared.convert("metadata.labels.app").is_err());
        let fields = ["spec.color".to_owned()];
        let custom = Selectable::Custom {
            namespaced: false,
            fields: &fields,
        };
        assert!(custom.convert("spec.color").is_ok());
        assert!(custom.convert("metadata.namespace").is_err());
        assert!(custom.convert("spec.size").is_err());
    }

    #[test]
    fn values_are_read_with_the_kinds_defaults() {
        let pod = serde_json::json!({"metadata": {"name": "p"}, "spec": {},
            "status": {"podIPs": [{"ip": "10.0.0.2"}], "podIP": "10.0.0.1"}});
        assert_eq!(value("", "Pod", &pod, "spec.hostNetwork"), "false");
        assert_eq!(value("", "Pod", &pod, "status.podIP"), "10.0.0.2");
        assert_eq!(value("", "Pod", &pod, "metadata.name"), "p");
        assert_eq!(value("", "Pod", &pod, "status.phase"), "");
        let job = serde_json::json!({"status": {"succeeded": 2}});
        assert_eq!(value("batch", "Job", &job, "status.successful"), "2");
        assert_eq!(
            value("batch", "Job", &serde_json::json!({}), "status.successful"),
            "0"
        );
    }
}
