//! Stored objects: their shared, pre-serialized form, their identity, and the metadata edits
//! the store makes on writes.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::resource::{ResourceKey, new_uid};

/// An object as stored: its serialized form only (written once, copied into every list and watch
/// response, parsed again when a write or a selector needs the tree), with the metadata that
/// lists and shard selection read on every object. A parsed `Value` of a 2 KB pod takes several
/// times its JSON, and every version in the history is one of these.
#[derive(Debug)]
pub(crate) struct StoredObject {
    /// The object serialized.
    pub json: Bytes,
    /// `metadata.namespace` ("" when cluster-scoped).
    namespace: Box<str>,
    /// `metadata.name`.
    name: Box<str>,
    /// `metadata.uid` ("" when missing).
    uid: Box<str>,
}

/// A shared, immutable stored object.
pub(crate) type Obj = Arc<StoredObject>;

impl StoredObject {
    /// Serializes `value` once and shares it.
    pub fn new(value: &Value) -> Obj {
        let text = |field: &str| -> Box<str> {
            value
                .pointer(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .into()
        };
        let mut json = serde_json::to_vec(value).unwrap_or_default();
        // The buffer grew by doubling: kept for the history's lifetime, it is trimmed first.
        json.shrink_to_fit();
        Arc::new(Self {
            json: Bytes::from(json),
            namespace: text("namespace"),
            name: text("name"),
            uid: text("uid"),
        })
    }

    /// The object, parsed from its serialized form (which this store wrote, so it parses).
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.json).unwrap_or(Value::Null)
    }

    /// `metadata.namespace` ("" when cluster-scoped).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.uid` ("" when missing).
    pub fn uid(&self) -> &str {
        &self.uid
    }
}

/// (namespace or "" for cluster-scoped, name): the sort order of every list.
pub(crate) type ObjectKey = (String, String);

/// Errors of write operations; each maps to one Kubernetes Status reason.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// The object is malformed (422 Invalid).
    #[error("{0}")]
    Invalid(String),
    /// Create of an existing object (409 AlreadyExists).
    #[error("{plural} \"{name}\" already exists")]
    AlreadyExists { plural: String, name: String },
    /// Update or delete of a missing object (404 NotFound).
    #[error("{plural} \"{name}\" not found")]
    NotFound { plural: String, name: String },
    /// Update with a stale resourceVersion (409 Conflict).
    #[error(
        "Operation cannot be fulfilled on {plural} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
    )]
    Conflict { plural: String, name: String },
    /// Any other refusal, answered with exactly this Status (403 Forbidden for a terminating
    /// namespace, 409 Conflict for a failed delete precondition, 422 Invalid with causes).
    #[error("{message}")]
    Api {
        code: u16,
        reason: &'static str,
        message: String,
        details: Option<Value>,
    },
}

fn invalid(msg: &str) -> StoreError {
    StoreError::Invalid(msg.to_string())
}

/// Identity of an object: its collection, its key and its kind.
pub(crate) fn identify(obj: &Value) -> Result<(ResourceKey, ObjectKey, String), StoreError> {
    let field = |name: &str| {
        obj.get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    let api_version = field("apiVersion").ok_or_else(|| invalid("apiVersion is required"))?;
    let kind = field("kind").ok_or_else(|| invalid("kind is required"))?;
    let meta = obj.get("metadata").and_then(Value::as_object);
    let meta_str = |name: &str| meta.and_then(|m| m.get(name)).and_then(Value::as_str);
    let name = meta_str("name")
        .filter(|n| !n.is_empty())
        .ok_or_else(|| invalid("metadata.name: Required value: name is required"))?;
    let namespace = meta_str("namespace").unwrap_or("");
    Ok((
        ResourceKey::for_kind(api_version, kind),
        (namespace.to_string(), name.to_string()),
        kind.to_string(),
    ))
}

/// `metadata` of `obj` as a mutable map, created if missing.
pub(crate) fn meta_mut(obj: &mut Value) -> Result<&mut Map<String, Value>, StoreError> {
    let map = obj
        .as_object_mut()
        .ok_or_else(|| invalid("object must be a JSON object"))?;
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    meta.as_object_mut()
        .ok_or_else(|| invalid("metadata must be an object"))
}

/// Fills `metadata.name` from `metadata.generateName` when the name is empty.
pub(crate) fn generate_name(obj: &mut Value) -> Result<(), StoreError> {
    let meta = meta_mut(obj)?;
    let has_name = meta
        .get("name")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    if let (false, Some(prefix)) = (has_name, meta.get("generateName").and_then(Value::as_str)) {
        let uid = new_uid();
        let name = format!("{prefix}{}", &uid[uid.len() - 5..]);
        meta.insert("name".into(), Value::String(name));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identity_needs_api_version_kind_and_name() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "ns"}});
        let (resource, key, kind) = identify(&pod).expect("a valid pod");
        assert_eq!(
            (resource.plural.as_str(), key, kind.as_str()),
            ("pods", ("ns".into(), "a".into()), "Pod")
        );
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}});
        assert_eq!(
            identify(&ns).map(|(_, key, _)| key).ok(),
            Some((String::new(), "ns".to_string()))
        );
        assert!(identify(&json!({"kind": "Pod", "metadata": {"name": "a"}})).is_err());
        assert!(identify(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}})).is_err());
    }

    #[test]
    fn generate_name_fills_an_empty_name_only() {
        let mut obj = json!({"metadata": {"generateName": "web-"}});
        generate_name(&mut obj).expect("object");
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
        let mut named = json!({"metadata": {"name": "x", "generateName": "web-"}});
        generate_name(&mut named).expect("object");
        assert_eq!(named["metadata"]["name"], "x");
    }
}
