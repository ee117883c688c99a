//! Store keys: `namespace/name`, or `name` for cluster-scoped objects.

use super::object::{DeletedObject, Object};

/// A key that cannot be split into namespace and name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unexpected key format: {0:?} (expected \"namespace/name\" or \"name\")")]
pub struct KeyError(pub String);

/// client-go's `MetaNamespaceKeyFunc`: `namespace/name`, or `name` when cluster-scoped.
pub fn object_key(obj: &Object) -> String {
    let m = obj.meta();
    key_for(m.namespace(), m.name())
}

/// The key for a namespace (if any) and a name.
pub fn key_for(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

/// client-go's `DeletionHandlingMetaNamespaceKeyFunc`: a tombstone's key is its stored key.
pub fn deleted_object_key(obj: &DeletedObject) -> String {
    match obj {
        DeletedObject::Object(o) => object_key(o),
        DeletedObject::Tombstone(t) => t.key.clone(),
    }
}

/// client-go's `SplitMetaNamespaceKey`: `(namespace, name)`; the namespace is empty for a
/// cluster-scoped key. More than one `/` is an error.
pub fn split_key(key: &str) -> Result<(&str, &str), KeyError> {
    let mut parts = key.split('/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(name), None, None) => Ok(("", name)),
        (Some(ns), Some(name), None) => Ok((ns, name)),
        _ => Err(KeyError(key.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::object::{Tombstone, test_util::obj};

    #[test]
    fn namespaced_key_is_namespace_slash_name_and_cluster_scoped_key_is_name() {
        assert_eq!(object_key(&obj(Some("ns"), "a", "1")), "ns/a");
        assert_eq!(object_key(&obj(None, "node-1", "1")), "node-1");
    }

    #[test]
    fn splitting_a_key_with_more_than_one_slash_is_an_error() {
        assert_eq!(split_key("ns/a"), Ok(("ns", "a")));
        assert_eq!(split_key("a"), Ok(("", "a")));
        assert_eq!(split_key("a/b/c"), Err(KeyError("a/b/c".into())));
    }

    #[test]
    fn tombstone_key_is_its_stored_key_not_the_objects() {
        let t = DeletedObject::Tombstone(Tombstone {
            key: "stored/key".into(),
            obj: obj(Some("ns"), "a", "1"),
        });
        assert_eq!(deleted_object_key(&t), "stored/key");
        assert_eq!(
            deleted_object_key(&DeletedObject::Object(obj(Some("ns"), "a", "1"))),
            "ns/a"
        );
    }
}
