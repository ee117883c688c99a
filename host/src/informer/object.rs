//! The object the informer caches and hands to listeners.
//!
//! An [`Object`] is its encoding in the plugin ABI's layout (`docs/abi.md`): the metadata
//! extracted once, when it enters the informer, and the full object as JSON text (what crosses
//! into a plugin). Host code reads the metadata in place through [`Meta`], so listeners that
//! only look at metadata never parse JSON and the metadata is held once. Objects are immutable
//! and shared as `Arc<Object>` between the FIFO, the indexer and every listener queue.

mod meta;

use std::sync::Arc;

use serde_json::Value;
use wisp_abi::Encoded;

pub use meta::{Meta, Owner, Pairs};
pub use wisp_abi::ObjectMeta;
/// An owner reference as owned values (the codec's `OwnerReference`).
pub use wisp_abi::OwnerReference as OwnerRef;

/// A Kubernetes object as the informer holds it: the object encoded in the plugin ABI's layout
/// ([`wisp_abi`]), its metadata then its full JSON. The encoding is made once when the object
/// enters the informer and copied whole into every batch and cache read.
#[derive(Clone, PartialEq, Eq)]
pub struct Object {
    wire: Encoded,
}

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Object")
            .field("meta", &self.meta())
            .field("json", &self.json())
            .finish()
    }
}

/// Why a JSON document could not be taken as a Kubernetes object.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The text is not JSON.
    #[error("object is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A required field is missing or has the wrong type.
    #[error("object field {field}: {problem}")]
    Field {
        /// JSON path of the field, e.g. `metadata.name`.
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
}

impl Object {
    /// Builds an object from extracted metadata and its JSON text. The caller promises they agree.
    pub fn from_parts(meta: &ObjectMeta, json: impl AsRef<str>) -> Self {
        Self {
            wire: wisp_abi::encode_object(meta, json.as_ref()),
        }
    }

    /// Builds an object from a JSON value, extracting its metadata. When `strip_managed_fields`
    /// is set, `metadata.managedFields` is dropped before the JSON is kept.
    pub fn from_value(mut value: Value, strip_managed_fields: bool) -> Result<Self, ObjectError> {
        if strip_managed_fields
            && let Some(md) = value.get_mut("metadata").and_then(Value::as_object_mut)
        {
            md.remove("managedFields");
        }
        let meta = meta_from_value(&value)?;
        let json = serde_json::to_string(&value)?;
        Ok(Self::from_parts(&meta, json))
    }

    /// Parses JSON text into an object.
    pub fn from_json(text: &str, strip_managed_fields: bool) -> Result<Self, ObjectError> {
        let value: Value = serde_json::from_str(text)?;
        Self::from_value(value, strip_managed_fields)
    }

    /// The metadata, read in place from the encoding.
    pub fn meta(&self) -> Meta<'_> {
        Meta::new(self.wire.view())
    }

    /// The same object with other JSON text (e.g. a masked one); the metadata is kept.
    pub fn with_json(&self, json: impl AsRef<str>) -> Self {
        Self::from_parts(&self.meta().to_owned(), json)
    }

    /// The full object as JSON text.
    pub fn json(&self) -> &str {
        self.wire.json()
    }

    /// The object in the plugin ABI's layout (`docs/abi.md`): what batches and cache reads
    /// copy into a plugin.
    pub fn wire(&self) -> &[u8] {
        self.wire.as_bytes()
    }

    /// The encoding as the codec wrote it (what a batch is written from).
    pub fn encoded(&self) -> &Encoded {
        &self.wire
    }

    /// Where the JSON starts in [`Object::wire`] (it runs to the end): the bytes before it are
    /// the object's metadata.
    pub fn json_at(&self) -> usize {
        self.wire.json_at()
    }

    /// Parses the JSON into a value (for callers that need the whole object).
    pub fn to_value(&self) -> Value {
        // The JSON was produced by serde_json from a value, so it always parses.
        serde_json::from_str(self.json()).unwrap_or(Value::Null)
    }

    /// Shorthand for `meta().resource_version()`.
    pub fn resource_version(&self) -> &str {
        self.meta().resource_version()
    }

    /// Heap bytes held by this object (for cache-size metrics): its encoding.
    pub fn heap_size(&self) -> usize {
        self.wire.as_bytes().len()
    }
}

/// Extracts [`ObjectMeta`] from a JSON object.
pub fn meta_from_value(value: &Value) -> Result<ObjectMeta, ObjectError> {
    let str_field = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    let md = value.get("metadata").ok_or(ObjectError::Field {
        field: "metadata",
        problem: "missing",
    })?;
    if !md.is_object() {
        return Err(ObjectError::Field {
            field: "metadata",
            problem: "not an object",
        });
    }
    let name = str_field(md, "name").ok_or(ObjectError::Field {
        field: "metadata.name",
        problem: "missing or not a string",
    })?;
    let pairs = |key: &str| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = md
            .get(key)
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        v.sort_unstable();
        v
    };
    let owner_references = md
        .get("ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .map(|r| OwnerRef {
                    api_version: str_field(r, "apiVersion").unwrap_or_default(),
                    kind: str_field(r, "kind").unwrap_or_default(),
                    name: str_field(r, "name").unwrap_or_default(),
                    uid: str_field(r, "uid").unwrap_or_default(),
                    controller: r
                        .get("controller")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                    block_owner_deletion: r
                        .get("blockOwnerDeletion")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ObjectMeta {
        api_version: str_field(value, "apiVersion").unwrap_or_default(),
        kind: str_field(value, "kind").unwrap_or_default(),
        namespace: str_field(md, "namespace").filter(|ns| !ns.is_empty()),
        name,
        uid: str_field(md, "uid").unwrap_or_default(),
        resource_version: str_field(md, "resourceVersion").unwrap_or_default(),
        generation: md.get("generation").and_then(Value::as_i64),
        deletion_timestamp: str_field(md, "deletionTimestamp"),
        labels: pairs("labels"),
        annotations: pairs("annotations"),
        owner_references,
    })
}

/// An object as handed to a delete handler: the object itself, or a tombstone when the informer
/// missed the deletion and only learned of it at a relist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeletedObject {
    /// The deletion was observed; this is the object's final state.
    Object(Arc<Object>),
    /// `DeletedFinalStateUnknown`: the object vanished while the watch was down.
    Tombstone(Tombstone),
}

/// client-go's `DeletedFinalStateUnknown`: the key and the last state the informer knew.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tombstone {
    /// The object's store key.
    pub key: String,
    /// The last known state, which may be stale.
    pub obj: Arc<Object>,
}

impl DeletedObject {
    /// The (possibly stale) object, whichever variant this is.
    pub fn object(&self) -> &Arc<Object> {
        match self {
            DeletedObject::Object(o) => o,
            DeletedObject::Tombstone(t) => &t.obj,
        }
    }

    /// Whether this is a tombstone (`DeletedFinalStateUnknown`).
    pub fn is_tombstone(&self) -> bool {
        matches!(self, DeletedObject::Tombstone(_))
    }
}

#[cfg(test)]
pub(crate) mod test_util {
    use super::*;

    /// A minimal object for unit tests.
    pub fn obj(ns: Option<&str>, name: &str, rv: &str) -> Arc<Object> {
        let mut md = serde_json::json!({ "name": name, "resourceVersion": rv, "uid": format!("uid-{name}") });
        if let Some(ns) = ns {
            md["namespace"] = ns.into();
        }
        let v = serde_json::json!({ "apiVersion": "v1", "kind": "Pod", "metadata": md });
        Arc::new(Object::from_value(v, false).expect("valid test object"))
    }

    /// A namespaced test object with labels.
    pub fn labelled(ns: &str, name: &str, rv: &str, labels: &[(&str, &str)]) -> Arc<Object> {
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
            .collect();
        let v = serde_json::json!({ "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": name, "namespace": ns, "resourceVersion": rv, "labels": labels } });
        Arc::new(Object::from_value(v, false).expect("valid test object"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_extracted_and_managed_fields_stripped_on_request() {
        let v = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                "labels": { "b": "2", "a": "1" }, "annotations": { "x": "y" },
                "managedFields": [{ "manager": "kubectl" }],
                "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "o1", "controller": true }] },
            "spec": {}
        });
        let o = Object::from_value(v, true).unwrap();
        let m = o.meta();
        assert_eq!(m.namespace(), Some("ns"));
        assert_eq!(m.labels().collect::<Vec<_>>(), [("a", "1"), ("b", "2")]);
        assert_eq!(m.label("b"), Some("2"));
        assert_eq!(m.label("c"), None);
        assert_eq!(m.annotation("x"), Some("y"));
        let owners: Vec<_> = m.owner_references().map(OwnerRef::from).collect();
        assert_eq!(owners[0].uid, "o1");
        assert!(owners[0].controller && !owners[0].block_owner_deletion);
        assert_eq!((m.name(), m.uid(), m.resource_version()), ("a", "u1", "7"));
        assert_eq!((m.generation(), m.deletion_timestamp()), (None, None));
        assert!(!o.json().contains("managedFields"));
        assert_eq!(o.to_value()["spec"], serde_json::json!({}));
    }

    #[test]
    fn the_view_reads_back_what_was_encoded() {
        let meta = ObjectMeta {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: None,
            name: "web".into(),
            uid: "u".into(),
            resource_version: "42".into(),
            generation: Some(-3),
            deletion_timestamp: Some("2026-12-05T00:00:00Z".into()),
            labels: (0..9).map(|i| (format!("k{i}"), format!("v{i}"))).collect(),
            annotations: vec![],
            owner_references: vec![OwnerRef {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: "n".into(),
                uid: "nu".into(),
                controller: false,
                block_owner_deletion: true,
            }],
        };
        let o = Object::from_parts(&meta, r#"{"kind":"Deployment"}"#);
        assert_eq!(o.meta().to_owned(), meta);
        for (k, v) in &meta.labels {
            assert_eq!(o.meta().label(k), Some(v.as_str()), "{k}");
        }
        assert_eq!(o.meta().label("k"), None);
        assert_eq!(o.meta().annotations().len(), 0);
        assert_eq!(o.json(), r#"{"kind":"Deployment"}"#);
        assert_eq!(&o.wire()[o.json_at()..], o.json().as_bytes());
        assert_eq!(o.heap_size(), o.wire().len());
    }

    #[test]
    fn object_without_name_is_refused_naming_the_field() {
        let err = Object::from_value(serde_json::json!({ "metadata": {} }), false).unwrap_err();
        assert!(err.to_string().contains("metadata.name"), "{err}");
    }
}
