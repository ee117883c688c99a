//! Field masks: an informer that keeps only the paths its plugins read (`fields:` in the config),
//! so the cache's memory follows what is read, not what the API server sends. `apiVersion`,
//! `kind` and `metadata` are always kept (keys, indexes, selectors and plugins need them). A path
//! is dot-separated field names; through a list it applies to every element
//! (`spec.containers.image` keeps each container's image).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::Object;
use super::delta_fifo::TransformFn;

/// The paths an informer keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldMask {
    paths: Vec<Vec<String>>,
}

/// A path a field mask cannot keep.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MaskError {
    /// Empty, or with an empty segment.
    #[error("{0:?} is not a path: dot-separated field names, e.g. spec.nodeName")]
    NotPath(String),
    /// Under `apiVersion`, `kind` or `metadata`, which are kept anyway.
    #[error("{0:?}: apiVersion, kind and metadata are always kept; list other fields")]
    AlwaysKept(String),
}

impl FieldMask {
    /// A mask of `paths` (`spec.nodeName`, `status.phase`, ...); an error names the bad path.
    pub fn parse(paths: &[String]) -> Result<Self, MaskError> {
        let mut out = Vec::with_capacity(paths.len());
        for p in paths {
            let segments: Vec<String> = p.split('.').map(str::to_owned).collect();
            if p.is_empty() || segments.iter().any(String::is_empty) {
                return Err(MaskError::NotPath(p.clone()));
            }
            if matches!(segments[0].as_str(), "apiVersion" | "kind" | "metadata") {
                return Err(MaskError::AlwaysKept(p.clone()));
            }
            out.push(segments);
        }
        Ok(Self { paths: out })
    }

    /// `v` with only the kept paths (and `apiVersion`, `kind`, `metadata`).
    pub fn apply(&self, v: &Value) -> Value {
        let Value::Object(src) = v else {
            return v.clone();
        };
        let mut dst = Map::new();
        for k in ["apiVersion", "kind", "metadata"] {
            if let Some(x) = src.get(k) {
                dst.insert(k.to_owned(), x.clone());
            }
        }
        let mut dst = Value::Object(dst);
        for p in &self.paths {
            keep(v, p, &mut dst);
        }
        dst
    }

    /// The mask as an informer transform: each object entering the queue keeps only the paths.
    pub fn transform(self) -> TransformFn {
        Arc::new(move |obj: Arc<Object>| {
            let Ok(v) = serde_json::from_str::<Value>(obj.json()) else {
                return obj;
            };
            let kept = self.apply(&v);
            match serde_json::to_string(&kept) {
                Ok(json) => Arc::new(obj.with_json(json)),
                Err(_) => obj,
            }
        })
    }
}

/// Copies what `src` has at `path` into `dst`, creating the objects (and lists) on the way.
fn keep(src: &Value, path: &[String], dst: &mut Value) {
    let Some((first, rest)) = path.split_first() else {
        *dst = src.clone();
        return;
    };
    match src {
        Value::Object(map) => {
            let Some(child) = map.get(first) else { return };
            if !dst.is_object() {
                *dst = Value::Object(Map::new());
            }
            if let Value::Object(d) = dst {
                let slot = d.entry(first.clone()).or_insert(Value::Null);
                keep(child, rest, slot);
            }
        }
        Value::Array(items) => {
            if !matches!(dst, Value::Array(d) if d.len() == items.len()) {
                *dst = Value::Array(vec![Value::Null; items.len()]);
            }
            if let Value::Array(d) = dst {
                for (item, slot) in items.iter().zip(d.iter_mut()) {
                    keep(item, path, slot);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn mask(paths: &[&str]) -> FieldMask {
        FieldMask::parse(&paths.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn only_the_listed_paths_and_the_identity_are_kept() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "a", "labels": {"app": "x"}},
            "spec": {
                "nodeName": "n1",
                "containers": [
                    {"name": "c", "image": "i:1", "env": [{"name": "A", "value": "1"}]},
                    {"name": "d", "image": "i:2"}
                ],
                "volumes": [{"name": "v"}]
            },
            "status": {"phase": "Running", "conditions": [{"type": "Ready"}]}
        });
        let kept = mask(&[
            "spec.nodeName",
            "spec.containers.image",
            "status.phase",
            "spec.missing",
        ])
        .apply(&pod);
        assert_eq!(
            kept,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "a", "labels": {"app": "x"}},
                "spec": {"nodeName": "n1", "containers": [{"image": "i:1"}, {"image": "i:2"}]},
                "status": {"phase": "Running"}
            })
        );
        // Two paths into the same list merge element by element.
        let kept = mask(&["spec.containers.image", "spec.containers.name"]).apply(&pod);
        assert_eq!(
            kept["spec"]["containers"],
            json!([{"image": "i:1", "name": "c"}, {"image": "i:2", "name": "d"}])
        );
    }

    #[test]
    fn a_bad_path_is_refused_naming_it() {
        let e = FieldMask::parse(&["spec..x".to_owned()])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("\"spec..x\" is not a path"), "{e}");
        let e = (FieldMask::parse(&["metadata.labels".to_owned()]).unwrap_err()).to_string();
        assert!(e.contains("always kept"), "{e}");
    }

    #[test]
    fn the_transform_keeps_the_objects_identity_and_shrinks_it() {
        let big = "x".repeat(10_000);
        let text = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "a", "resourceVersion": "7", "uid": "u"},
            "data": {"big": big, "small": "s"}
        })
        .to_string();
        let obj = Arc::new(Object::from_json(&text, true).unwrap());
        let t = mask(&["data.small"]).transform();
        let out = t(obj.clone());
        assert_eq!(out.meta(), obj.meta());
        assert_eq!(out.to_value()["data"], json!({"small": "s"}));
        assert!(
            out.heap_size() < obj.heap_size() / 10,
            "{} vs {}",
            out.heap_size(),
            obj.heap_size()
        );
    }
}
