//! The object the informer caches and hands to listeners.
//!
//! An [`Object`] keeps its metadata already extracted (so listeners that only look at metadata
//! never parse JSON) and the full object as JSON text (what crosses into a plugin). Objects are
//! immutable and shared as `Arc<Object>` between the FIFO, the indexer and every listener queue.

use std::sync::Arc;

use serde_json::Value;

pub use crate::abi::{ObjectMeta, OwnerRef};

impl ObjectMeta {
    /// The value of label `key`, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        lookup(&self.labels, key)
    }

    /// The value of annotation `key`, if set.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        lookup(&self.annotations, key)
    }
}

fn lookup<'a>(pairs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    pairs
        .binary_search_by(|(k, _)| k.as_str().cmp(key))
        .ok()
        .map(|i| pairs[i].1.as_str())
}

/// A Kubernetes object as the informer holds it: extracted metadata, and the object encoded in
/// the plugin ABI's layout ([`crate::abi`]), which holds the full JSON: the encoding is made once
/// when the object enters the informer and copied whole into every batch and cache read.
#[derive(Clone, PartialEq, Eq)]
pub struct Object {
    meta: ObjectMeta,
    wire: Box<[u8]>,
    /// Where the JSON text starts in `wire` (it runs to the end).
    json_at: usize,
}

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Object")
            .field("meta", &self.meta)
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
    pub fn from_parts(meta: ObjectMeta, json: impl AsRef<str>) -> Self {
        let (wire, json_at) = crate::abi::encode_object(&meta, json.as_ref());
        Self {
            meta,
            wire: wire.into_boxed_slice(),
            json_at,
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
        Ok(Self::from_parts(meta, json))
    }

    /// Parses JSON text into an object.
    pub fn from_json(text: &str, strip_managed_fields: bool) -> Result<Self, ObjectError> {
        let value: Value = serde_json::from_str(text)?;
        Self::from_value(value, strip_managed_fields)
    }

    /// The extracted metadata.
    pub fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    /// The full object as JSON text.
    #[allow(unsafe_code)]
    pub fn json(&self) -> &str {
        let bytes = &self.wire[self.json_at..];
        debug_assert!(std::str::from_utf8(bytes).is_ok());
        // SAFETY: `from_parts`, the only constructor, copied these bytes from a `&str` into
        // `wire` (immutable from then on) and recorded where they start; they run to the end
        // of `wire`, so they are that string's bytes: valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    /// The object in the plugin ABI's layout (`docs/abi.md`): what batches and cache reads
    /// copy into a plugin.
    pub fn wire(&self) -> &[u8] {
        &self.wire
    }

    /// Where the JSON starts in [`Object::wire`] (it runs to the end): the bytes before it are
    /// the object's metadata.
    pub fn json_at(&self) -> usize {
        self.json_at
    }

    /// Parses the JSON into a value (for callers that need the whole object).
    pub fn to_value(&self) -> Value {
        // The JSON was produced by serde_json from a value, so it always parses.
        serde_json::from_str(self.json()).unwrap_or(Value::Null)
    }

    /// Shorthand for `meta().resource_version`.
    pub fn resource_version(&self) -> &str {
        &self.meta.resource_version
    }

    /// Approximate heap bytes held by this object (for cache-size metrics).
    pub fn heap_size(&self) -> usize {
        let m = &self.meta;
        let pairs =
            |v: &[(String, String)]| v.iter().map(|(a, b)| a.len() + b.len() + 48).sum::<usize>();
        self.wire.len()
            + m.deletion_timestamp.as_ref().map_or(0, String::len)
            + m.api_version.len()
            + m.kind.len()
            + m.namespace.as_ref().map_or(0, String::len)
            + m.name.len()
            + m.uid.len()
            + m.resource_version.len()
            + pairs(&m.labels)
            + pairs(&m.annotations)
            + m.owner_references.len() * 128
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
        assert_eq!(o.meta().namespace.as_deref(), Some("ns"));
        assert_eq!(
            o.meta().labels,
            vec![("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        assert_eq!(o.meta().label("b"), Some("2"));
        assert_eq!(o.meta().annotation("x"), Some("y"));
        assert_eq!(o.meta().owner_references[0].uid, "o1");
        assert!(o.meta().owner_references[0].controller);
        assert!(!o.json().contains("managedFields"));
        assert_eq!(o.to_value()["spec"], serde_json::json!({}));
    }

    #[test]
    fn object_without_name_is_refused_naming_the_field() {
        let err = Object::from_value(serde_json::json!({ "metadata": {} }), false).unwrap_err();
        assert!(err.to_string().contains("metadata.name"), "{err}");
    }
}
