//! The protobuf bodies kubectl's typed clients send, read into the JSON a real server stores.
//!
//! kubectl posts built-in objects from its typed clients (`kubectl create deployment`,
//! `create service`, `auth can-i`, ...) as `application/vnd.kubernetes.protobuf` whatever
//! discovery says, and a real server decodes them. This server reads the envelope (`k8s\0` +
//! `runtime.Unknown`: TypeMeta, raw bytes) and then the object with a generic decoder driven by
//! a field table of every type of kubernetes/api and apimachinery's `meta/v1` (`types.txt`,
//! written by `generate.py` from the Go types).
//!
//! Why a table from the Go types rather than the `k8s-pb` crate (prost types of the `.proto`
//! files): the JSON a real server stores is what Go's `encoding/json` writes for the decoded
//! struct, and only the Go types say what that is: the JSON name, `omitempty`, a pointer (kept
//! when zero: `replicas: 0`) against a plain field (omitted when zero), a struct always written
//! (`resources: {}`), an inline struct. Prost types lose all four and have no JSON form; a
//! table of ~4,900 lines and one decoder give every kind at once.
//!
//! Answers stay JSON: kubectl's typed clients accept `application/vnd.kubernetes.protobuf,
//! application/json`. A client accepting protobuf only gets 406 NotAcceptable on reads (and
//! JSON from writes), where a real server would answer protobuf.
//!
//! Kinds outside kubernetes/api (custom resources, CRDs, APIServices) are answered 415
//! UnsupportedMediaType, as a real server answers protobuf for a custom resource.

mod json;
mod schema;
mod wire;

use serde_json::Value;

use wire::{Wire, fields};

/// The magic prefix of a protobuf-encoded Kubernetes object.
pub(crate) const MAGIC: &[u8] = b"k8s\0";

/// Why a protobuf body could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Not a Kubernetes protobuf envelope, or malformed: where and what.
    Malformed(String),
    /// A kind this server has no protobuf type for (`apiVersion`, `kind`).
    Unsupported(String, String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Malformed(what) => write!(f, "malformed protobuf: {what}"),
            Refusal::Unsupported(api_version, kind) => {
                write!(f, "no protobuf type for {kind} of {api_version}")
            }
        }
    }
}

fn text(bytes: &[u8], what: &str) -> Result<String, Refusal> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Refusal::Malformed(format!("{what}: not UTF-8")))
}

/// Decodes a protobuf-encoded built-in object into its JSON form.
pub(crate) fn decode(body: &[u8]) -> Result<Value, Refusal> {
    let unknown = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| Refusal::Malformed("no k8s\\0 prefix".into()))?;
    let envelope = |at| Refusal::Malformed(format!("envelope: bad field at byte {at}"));
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (n, f) in fields(unknown).map_err(envelope)? {
        match (n, f) {
            (1, Wire::Bytes(type_meta)) => {
                for (n, f) in fields(type_meta).map_err(envelope)? {
                    match (n, f) {
                        (1, Wire::Bytes(b)) => api_version = text(b, "apiVersion")?,
                        (2, Wire::Bytes(b)) => kind = text(b, "kind")?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let name = format!("{api_version}.{kind}");
    if kind.is_empty() || schema::message(&name).is_none() {
        return Err(Refusal::Unsupported(api_version, kind));
    }
    let mut obj =
        json::object(&name, raw, "").map_err(|e| Refusal::Malformed(format!("{kind} {e}")))?;
    obj.insert("apiVersion".into(), Value::String(api_version));
    obj.insert("kind".into(), Value::String(kind));
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A length-delimited field.
    fn ld(n: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![n << 3 | 2, u8::try_from(bytes.len()).expect("short")];
        out.extend_from_slice(bytes);
        out
    }

    /// A varint field (values below 128).
    fn vi(n: u8, v: u8) -> Vec<u8> {
        vec![n << 3, v]
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let type_meta = [ld(1, api_version.as_bytes()), ld(2, kind.as_bytes())].concat();
        [MAGIC.to_vec(), ld(1, &type_meta), ld(2, raw)].concat()
    }

    #[test]
    fn kubectls_create_configmap_body_decodes() {
        // What `kubectl create configmap cm2 --from-literal=a=b --from-literal=key2=value2`
        // (1.32) sends.
        let body: &[u8] = b"k8s\x00\x0a\x0f\x0a\x02v1\x12\x09ConfigMap\x12\x2d\x0a\x13\x0a\x03cm2\x12\x00\x1a\x00\x22\x00\x2a\x00\x32\x00\x38\x00\x42\x00\x12\x06\x0a\x01a\x12\x01b\x12\x0e\x0a\x04key2\x12\x06value2\x1a\x00\x22\x00";
        assert_eq!(
            decode(body),
            Ok(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm2", "creationTimestamp": null},
                "data": {"a": "b", "key2": "value2"}}))
        );
    }

    #[test]
    fn fields_decode_to_the_json_go_writes_for_them() {
        // A Deployment: replicas 0 (a pointer: kept), an empty strategy (a struct: written),
        // minReadySeconds 0 (omitempty: omitted); a container port's int-or-string and a
        // quantity in a probe and resources.
        let container = [
            ld(1, b"web"),
            ld(2, b"nginx"),
            ld(6, &[vi(3, 80), ld(4, b"TCP")].concat()),
            ld(8, &ld(1, &[ld(1, b"cpu"), ld(2, &ld(1, b"250m"))].concat())),
            ld(
                10,
                &ld(1, &ld(2, &ld(2, &[vi(1, 1), ld(3, b"http")].concat()))),
            ),
        ]
        .concat();
        let template = [
            ld(1, &ld(11, &[ld(1, b"app"), ld(2, b"web")].concat())),
            ld(2, &ld(2, &container)),
        ]
        .concat();
        let spec = [vi(1, 0), ld(3, &template), ld(4, &[]), vi(5, 0)].concat();
        let meta = [ld(1, b"web"), ld(8, &[8, 0x80, 0xf2, 0xd6, 0xca, 0x06])].concat();
        let body = envelope(
            "apps/v1",
            "Deployment",
            &[ld(1, &meta), ld(2, &spec)].concat(),
        );
        let decoded = decode(&body).expect("decodes");
        assert_eq!(
            decoded["metadata"],
            json!({"name": "web", "creationTimestamp": "2026-01-01T00:00:00Z"})
        );
        assert_eq!(decoded["spec"]["replicas"], json!(0));
        assert_eq!(decoded["spec"]["strategy"], json!({}));
        assert_eq!(decoded["spec"].get("minReadySeconds"), None);
        assert_eq!(decoded["spec"]["selector"], json!(null));
        let c = &decoded["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            c["ports"],
            json!([{"containerPort": 80, "protocol": "TCP"}])
        );
        assert_eq!(c["resources"], json!({"limits": {"cpu": "250m"}}));
        assert_eq!(c["livenessProbe"]["httpGet"]["port"], json!("http"));
        assert_eq!(
            decoded["spec"]["template"]["metadata"],
            json!({"labels": {"app": "web"}, "creationTimestamp": null})
        );
        assert_eq!(decoded["status"], json!({}));
    }

    #[test]
    fn bad_bodies_are_refused_naming_what_and_where() {
        assert_eq!(
            decode(b"{}"),
            Err(Refusal::Malformed("no k8s\\0 prefix".into()))
        );
        let other = envelope("example.com/v1", "Widget", &[]);
        assert_eq!(
            decode(&other),
            Err(Refusal::Unsupported(
                "example.com/v1".into(),
                "Widget".into()
            ))
        );
        // A string where replicas (a varint) belongs.
        let bad = envelope("apps/v1", "Deployment", &ld(2, &ld(1, b"three")));
        assert_eq!(
            decode(&bad),
            Err(Refusal::Malformed(
                "Deployment spec.replicas: expected a varint, found Bytes([116, 104, 114, 101, 101])".into()
            ))
        );
    }
}
