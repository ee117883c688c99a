//! Just enough of the Kubernetes protobuf encoding to read what kubectl's typed clients send.
//!
//! kubectl (1.32 at least) posts built-in objects from its typed clients (`kubectl create
//! configmap`, `create secret`, `create namespace`) as `application/vnd.kubernetes.protobuf`
//! whatever discovery says, and a real server decodes them. This server decodes the envelope
//! (`k8s\0` + `runtime.Unknown`) and the ConfigMap, Secret and Namespace messages into JSON;
//! every other kind is answered 415 UnsupportedMediaType, as a real server answers protobuf for a
//! custom resource.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

/// The magic prefix of a protobuf-encoded Kubernetes object.
const MAGIC: &[u8] = b"k8s\0";

/// One field of a protobuf message.
#[derive(Debug, Clone, PartialEq)]
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// The fields of a message in wire order, or `None` if it is malformed.
fn fields(buf: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let field = match key & 7 {
            0 => Field::Varint(varint(buf, &mut pos)?),
            1 => {
                pos = pos.checked_add(8).filter(|p| *p <= buf.len())?;
                Field::Fixed
            }
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).ok()?;
                let end = pos.checked_add(len).filter(|e| *e <= buf.len())?;
                let bytes = &buf[pos..end];
                pos = end;
                Field::Bytes(bytes)
            }
            5 => {
                pos = pos.checked_add(4).filter(|p| *p <= buf.len())?;
                Field::Fixed
            }
            _ => return None,
        };
        out.push((key >> 3, field));
    }
    Some(out)
}

fn text(bytes: &[u8]) -> Option<String> {
    String::from_utf8(bytes.to_vec()).ok()
}

/// A `map<string, string>` (or bytes, base64-encoded as in JSON) entry.
fn map_entry(bytes: &[u8], binary: bool) -> Option<(String, Value)> {
    let mut key = String::new();
    let mut value = Value::String(String::new());
    for (n, f) in fields(bytes)? {
        match (n, f) {
            (1, Field::Bytes(b)) => key = text(b)?,
            (2, Field::Bytes(b)) if binary => value = Value::String(STANDARD.encode(b)),
            (2, Field::Bytes(b)) => value = Value::String(text(b)?),
            _ => {}
        }
    }
    Some((key, value))
}

fn insert_str(map: &mut Map<String, Value>, key: &str, bytes: &[u8]) -> Option<()> {
    let s = text(bytes)?;
    if !s.is_empty() {
        map.insert(key.into(), Value::String(s));
    }
    Some(())
}

/// `metav1.ObjectMeta`: the fields a client sets on create.
fn object_meta(bytes: &[u8]) -> Option<Value> {
    let mut meta = Map::new();
    let mut labels = Map::new();
    let mut annotations = Map::new();
    let mut finalizers = Vec::new();
    for (n, f) in fields(bytes)? {
        match (n, f) {
            (1, Field::Bytes(b)) => insert_str(&mut meta, "name", b)?,
            (2, Field::Bytes(b)) => insert_str(&mut meta, "generateName", b)?,
            (3, Field::Bytes(b)) => insert_str(&mut meta, "namespace", b)?,
            (5, Field::Bytes(b)) => insert_str(&mut meta, "uid", b)?,
            (6, Field::Bytes(b)) => insert_str(&mut meta, "resourceVersion", b)?,
            (11, Field::Bytes(b)) => {
                let (k, v) = map_entry(b, false)?;
                labels.insert(k, v);
            }
            (12, Field::Bytes(b)) => {
                let (k, v) = map_entry(b, false)?;
                annotations.insert(k, v);
            }
            (14, Field::Bytes(b)) => finalizers.push(Value::String(text(b)?)),
            _ => {}
        }
    }
    if !labels.is_empty() {
        meta.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        meta.insert("annotations".into(), Value::Object(annotations));
    }
    if !finalizers.is_empty() {
        meta.insert("finalizers".into(), Value::Array(finalizers));
    }
    Some(Value::Object(meta))
}

fn config_map(bytes: &[u8]) -> Option<Map<String, Value>> {
    let mut obj = Map::new();
    let (mut data, mut binary) = (Map::new(), Map::new());
    for (n, f) in fields(bytes)? {
        match (n, f) {
            (1, Field::Bytes(b)) => {
                obj.insert("metadata".into(), object_meta(b)?);
            }
            (2, Field::Bytes(b)) => {
                let (k, v) = map_entry(b, false)?;
                data.insert(k, v);
            }
            (3, Field::Bytes(b)) => {
                let (k, v) = map_entry(b, true)?;
                binary.insert(k, v);
            }
            (4, Field::Varint(v)) => {
                obj.insert("immutable".into(), Value::Bool(v != 0));
            }
            _ => {}
        }
    }
    if !data.is_empty() {
        obj.insert("data".into(), Value::Object(data));
    }
    if !binary.is_empty() {
        obj.insert("binaryData".into(), Value::Object(binary));
    }
    Some(obj)
}

fn secret(bytes: &[u8]) -> Option<Map<String, Value>> {
    let mut obj = Map::new();
    let (mut data, mut string_data) = (Map::new(), Map::new());
    for (n, f) in fields(bytes)? {
        match (n, f) {
            (1, Field::Bytes(b)) => {
                obj.insert("metadata".into(), object_meta(b)?);
            }
            (2, Field::Bytes(b)) => {
                let (k, v) = map_entry(b, true)?;
                data.insert(k, v);
            }
            (3, Field::Bytes(b)) => insert_str(&mut obj, "type", b)?,
            (4, Field::Bytes(b)) => {
                let (k, v) = map_entry(b, false)?;
                string_data.insert(k, v);
            }
            (5, Field::Varint(v)) => {
                obj.insert("immutable".into(), Value::Bool(v != 0));
            }
            _ => {}
        }
    }
    if !data.is_empty() {
        obj.insert("data".into(), Value::Object(data));
    }
    if !string_data.is_empty() {
        obj.insert("stringData".into(), Value::Object(string_data));
    }
    Some(obj)
}

fn namespace(bytes: &[u8]) -> Option<Map<String, Value>> {
    let mut obj = Map::new();
    for (n, f) in fields(bytes)? {
        match (n, f) {
            (1, Field::Bytes(b)) => {
                obj.insert("metadata".into(), object_meta(b)?);
            }
            (2, Field::Bytes(b)) => {
                let finalizers: Vec<Value> = fields(b)?
                    .into_iter()
                    .filter_map(|(n, f)| match (n, f) {
                        (1, Field::Bytes(s)) => text(s).map(Value::String),
                        _ => None,
                    })
                    .collect();
                if !finalizers.is_empty() {
                    obj.insert("spec".into(), json!({"finalizers": finalizers}));
                }
            }
            _ => {}
        }
    }
    Some(obj)
}

/// Why a protobuf body could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not a Kubernetes protobuf envelope, or malformed.
    Malformed,
    /// A kind this server does not decode.
    Unsupported,
}

/// Decodes a protobuf-encoded ConfigMap, Secret or Namespace into its JSON form.
pub(crate) fn decode(body: &[u8]) -> Result<Value, Refusal> {
    let unknown = body.strip_prefix(MAGIC).ok_or(Refusal::Malformed)?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (n, f) in fields(unknown).ok_or(Refusal::Malformed)? {
        match (n, f) {
            (1, Field::Bytes(type_meta)) => {
                for (n, f) in fields(type_meta).ok_or(Refusal::Malformed)? {
                    match (n, f) {
                        (1, Field::Bytes(b)) => api_version = text(b).ok_or(Refusal::Malformed)?,
                        (2, Field::Bytes(b)) => kind = text(b).ok_or(Refusal::Malformed)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let mut obj = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => config_map(raw),
        ("v1", "Secret") => secret(raw),
        ("v1", "Namespace") => namespace(raw),
        _ => return Err(Refusal::Unsupported),
    }
    .ok_or(Refusal::Malformed)?;
    obj.insert("apiVersion".into(), Value::String(api_version));
    obj.insert("kind".into(), Value::String(kind));
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectls_create_configmap_body_decodes() {
        // What `kubectl create configmap cm2 --from-literal=a=b --from-literal=key2=value2`
        // (1.32) sends.
        let body: &[u8] = b"k8s\x00\x0a\x0f\x0a\x02v1\x12\x09ConfigMap\x12\x2d\x0a\x13\x0a\x03cm2\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\x42\x00\x12\x06\x0a\x01a\x12\x01b\x12\x0e\x0a\x04key2\x12\x06value2\x1a\x00\x22\x00";
        assert_eq!(
            decode(body),
            Ok(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm2"},
                "data": {"a": "b", "key2": "value2"}})
            )
        );
        assert_eq!(decode(b"{}"), Err(Refusal::Malformed));
        let other: &[u8] = b"k8s\x00\x0a\x0b\x0a\x02v1\x12\x05Other\x12\x00";
        assert_eq!(decode(other), Err(Refusal::Unsupported));
    }
}
