//! Label and field selectors of list and watch requests (`labelSelector` / `fieldSelector`),
//! parsed by Wisp's one parser of each ([`wisp_kinds::selector`]: apimachinery's
//! `labels.Parse` and `fields.ParseSelector`, their messages word for word), so a selector that
//! does not parse is answered 400 BadRequest with the real message.
//!
//! Field selectors are checked per kind as a real API server does
//! ([`wisp_kinds::fields`]): `metadata.name` and `metadata.namespace` (for most kinds)
//! plus the kind's own selectable fields (Pod, Event, Secret, Namespace, Node, Service,
//! ReplicaSet, ReplicationController, Job, CertificateSigningRequest; a custom resource's
//! `selectableFields`); any other label is a 400 BadRequest with the message Kubernetes 1.36
//! gives for that kind.

use serde_json::Value;
use wisp_kinds::fields::{Selectable, value};
use wisp_kinds::selector::{FieldSelector, LabelSelector, SelectorError};
use wisp_kinds::shard::{Ranges, ShardField, parse_selector};

use super::discovery::{Known, known};
use super::object::StoredObject;

/// Everything a list or watch request filters on: the namespace of its path and its selectors.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Filter {
    /// Only objects in this namespace; `None` for cluster-wide requests.
    pub namespace: Option<String>,
    /// From `labelSelector`.
    pub labels: LabelSelector,
    /// From `fieldSelector`, its labels converted for the kind.
    pub fields: FieldSelector,
    /// The API group and kind of the collection, whose field values are read as its
    /// registry reads them (empty for a collection the server does not know).
    pub kind: (String, String),
    /// From `shardSelector` (KEP-5866): the field hashed, its ranges, and the selector as sent
    /// (echoed in a list's `metadata.shardInfo`).
    pub shard: Option<(ShardField, Ranges, String)>,
}

impl Filter {
    /// The filter a list or watch request asks for: its namespace and its `labelSelector` and
    /// `fieldSelector` parameters.
    ///
    /// The error is the message of the 400 BadRequest a real server answers: a label selector
    /// that does not parse, or a field label the kind does not support.
    pub(crate) fn from_request(
        shared: &super::Shared,
        target: &super::http::Target,
        query: &super::http::Query,
    ) -> Result<Self, String> {
        let mut filter = Self::new(
            target.namespace.clone(),
            query.get("labelSelector").map(String::as_str),
            query.get("fieldSelector").map(String::as_str),
        )
        .map_err(|e| e.problem)?;
        let known = known(shared, &target.resource);
        let group = target.resource.group.as_str();
        let selectable = match &known {
            Known::Builtin(b) => {
                filter.kind = (b.group.to_owned(), b.kind.to_owned());
                Selectable::Builtin {
                    group: b.group,
                    kind: b.kind,
                }
            }
            Known::Custom(c) => {
                filter.kind = (group.to_owned(), c.kind.clone());
                Selectable::Custom {
                    namespaced: c.namespaced,
                    fields: &c.selectable,
                }
            }
            Known::Unknown => Selectable::Custom {
                namespaced: true,
                fields: &[],
            },
        };
        selectable
            .convert_selector(&mut filter.fields)
            .map_err(|e| e.to_string())?;
        if let Some(s) = query.get("shardSelector").filter(|s| !s.is_empty())
            && !shared.faults.shard_selector_ignored()
        {
            let (field, ranges) = parse_selector(s).map_err(|e| e.to_string())?;
            filter.shard = Some((field, ranges, s.clone()));
        }
        Ok(filter)
    }

    /// Builds the filter of a request.
    pub fn new(
        namespace: Option<String>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Self, SelectorError> {
        Ok(Self {
            namespace,
            labels: LabelSelector::parse(label_selector.unwrap_or(""))?,
            fields: FieldSelector::parse(field_selector.unwrap_or(""))?,
            kind: Default::default(),
            shard: None,
        })
    }

    /// Whether the request has label or field selectors.
    pub fn has_selectors(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }

    /// Whether a stored object passes: the namespace and the shard from its stored metadata,
    /// the object parsed only when there are label or field selectors to evaluate.
    pub fn matches_stored(&self, obj: &StoredObject) -> bool {
        if self.has_selectors() {
            return self.matches(&obj.value());
        }
        self.namespace
            .as_deref()
            .is_none_or(|ns| obj.namespace() == ns)
            && self.shard.as_ref().is_none_or(|(field, ranges, _)| {
                ranges.contains(field.hash_of(obj.uid(), obj.namespace()))
            })
    }

    /// Whether `obj` passes the namespace and both selectors.
    pub fn matches(&self, obj: &Value) -> bool {
        let ns_ok = self.namespace.as_deref().is_none_or(|ns| {
            obj.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("")
                == ns
        });
        let shard_ok = self.shard.as_ref().is_none_or(|(field, ranges, _)| {
            let text = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
            ranges.contains(field.hash_of(text("/metadata/uid"), text("/metadata/namespace")))
        });
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let labels_ok = self
            .labels
            .matches_by(|k| labels.and_then(|l| l.get(k)).and_then(Value::as_str));
        let (group, kind) = &self.kind;
        ns_ok
            && shard_ok
            && labels_ok
            && self
                .fields
                .matches_by(|label| value(group, kind, obj, label))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_filter_reads_labels_and_field_values_of_its_kind() {
        let pod = json!({"metadata": {"name": "a", "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1"}});
        let mut f = Filter::new(None, Some("app=web"), Some("spec.hostNetwork=false")).unwrap();
        f.kind = (String::new(), "Pod".into());
        assert!(f.matches(&pod), "Pod's hostNetwork defaults to false");
        f.kind = Default::default();
        assert!(!f.matches(&pod), "a plain path has no default");
        let f = Filter::new(Some("other".into()), None, None).unwrap();
        assert!(!f.matches(&pod));
        assert!(Filter::new(None, Some("a/b/c"), None).is_err());
        assert!(Filter::new(None, None, Some("metadata.name")).is_err());
    }

    #[test]
    fn a_stored_object_passes_exactly_when_its_value_does() {
        let pods: Vec<Value> = (0..40)
            .map(|i| {
                json!({"metadata": {"name": format!("p{i}"), "namespace": format!("ns{}", i % 3),
                    "uid": format!("uid-{i}"), "labels": {"app": if i % 2 == 0 { "web" } else { "db" }}},
                    "spec": {"nodeName": format!("n{}", i % 4)}})
            })
            .collect();
        // The hash of the first pod's uid only.
        let h = ShardField::Uid.hash_of("uid-0", "");
        let one = parse_selector(&format!(
            "shardRange(object.metadata.uid, '0x{h:016x}', '0x{:016x}')",
            u128::from(h) + 1
        ))
        .expect("a valid selector");
        let mut filters = vec![
            Filter::new(None, None, None).unwrap(),
            Filter::new(Some("ns1".into()), None, None).unwrap(),
            Filter::new(None, Some("app=web"), None).unwrap(),
            Filter::new(
                Some("ns2".into()),
                Some("app!=web"),
                Some("spec.nodeName=n1"),
            )
            .unwrap(),
        ];
        let mut sharded = Filter::new(Some("ns0".into()), None, None).unwrap();
        sharded.shard = Some((one.0, one.1, String::new()));
        filters.push(sharded);
        for f in &mut filters {
            f.kind = (String::new(), "Pod".into());
        }
        let mut passed = Vec::new();
        for (n, f) in filters.iter().enumerate() {
            for pod in &pods {
                let stored = StoredObject::new(pod);
                assert_eq!(stored.value(), *pod, "the JSON reads back as the object");
                assert_eq!(
                    f.matches_stored(&stored),
                    f.matches(pod),
                    "filter {n}, {pod}"
                );
                passed.push(f.matches(pod));
            }
        }
        // Each filter lets some through and keeps some out (the comparison is not vacuous).
        for (n, chunk) in passed.chunks(pods.len()).enumerate().skip(1) {
            assert!(
                chunk.contains(&true) && chunk.contains(&false),
                "filter {n}: {chunk:?}"
            );
        }
    }
}
