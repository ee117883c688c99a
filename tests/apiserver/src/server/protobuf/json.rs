//! A protobuf message to the JSON `encoding/json` writes for the Go struct it decodes into:
//! what a real API server stores after reading a protobuf body.
//!
//! Go's rules, field by field: a pointer, slice, map or `[]byte` absent from the wire is `nil`
//! (omitted with `omitempty`, else `null`); a pointer present is kept even when zero (`replicas:
//! 0`); a plain scalar absent is its zero value, omitted with `omitempty`; a struct is always
//! written (`omitempty` does not apply to structs: `resources: {}`, `creationTimestamp: null`);
//! an inline struct's fields are its parent's. Repeated occurrences of a message field merge, as
//! protobuf merges them (the decoder reads their concatenation).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use super::schema::{FieldDef, Omit, Scalar, Special, Ty, message};
use super::wire::{Wire, fields, packed};
use crate::server::resource::rfc3339;

/// Why a message could not be read: where (a JSON path) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed {
    pub path: String,
    pub what: String,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.what)
    }
}

fn malformed(path: &str, what: impl Into<String>) -> Malformed {
    Malformed {
        path: if path.is_empty() {
            "(root)".into()
        } else {
            path.into()
        },
        what: what.into(),
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// The message `name` (`apiVersion.Name`) as the JSON object Go would write.
pub(crate) fn object(
    name: &str,
    bytes: &[u8],
    path: &str,
) -> Result<Map<String, Value>, Malformed> {
    let defs = message(name).ok_or_else(|| malformed(path, format!("no type {name}")))?;
    let wire = fields(bytes).map_err(|at| malformed(path, format!("bad field at byte {at}")))?;
    let mut out = Map::new();
    for def in defs {
        let values: Vec<Wire<'_>> = wire
            .iter()
            .filter(|(n, _)| *n == def.number)
            .map(|(_, v)| *v)
            .collect();
        let here = join(path, def.json.unwrap_or(""));
        match (def.json, field(def, &values, &here)?) {
            (None, Some(Value::Object(inline))) => out.extend(inline),
            (Some(json), Some(value)) => {
                out.insert(json.to_string(), value);
            }
            _ => {}
        }
    }
    Ok(out)
}

/// A field's JSON value, `None` when Go omits it.
fn field(def: &FieldDef, values: &[Wire<'_>], path: &str) -> Result<Option<Value>, Malformed> {
    let omit_empty = def.omit != Omit::Never;
    let nil = || if omit_empty { None } else { Some(Value::Null) };
    Ok(match &def.ty {
        Ty::Pointer(inner) => match values.is_empty() {
            true => nil(),
            false => Some(single(inner, values, path)?),
        },
        Ty::Slice(inner) => {
            let items = repeated(inner, values, path)?;
            if items.is_empty() {
                nil()
            } else {
                Some(Value::Array(items))
            }
        }
        Ty::Map(inner) => {
            let map = entries(inner, values, path)?;
            if map.is_empty() {
                nil()
            } else {
                Some(Value::Object(map))
            }
        }
        Ty::Scalar(Scalar::Bytes) if values.is_empty() => nil(),
        Ty::Scalar(s) => {
            let value = single(&def.ty, values, path)?;
            let zero = match s {
                Scalar::String | Scalar::Bytes => value.as_str() == Some(""),
                Scalar::Bool => value == Value::Bool(false),
                _ => value.as_f64() == Some(0.0),
            };
            if zero && omit_empty {
                None
            } else {
                Some(value)
            }
        }
        Ty::Message(_) | Ty::Wrapped(_) if def.omit == Omit::Zero && values.is_empty() => None,
        Ty::Wrapped(_) if values.is_empty() => nil(),
        Ty::Special(_) | Ty::Message(_) | Ty::Wrapped(_) => Some(single(&def.ty, values, path)?),
    })
}

/// The elements of a repeated field; scalars may be packed.
fn repeated(ty: &Ty, values: &[Wire<'_>], path: &str) -> Result<Vec<Value>, Malformed> {
    let mut out = Vec::new();
    for value in values {
        let at = format!("{path}[{}]", out.len());
        match (ty, value) {
            (Ty::Scalar(s), Wire::Bytes(b)) if !matches!(s, Scalar::String | Scalar::Bytes) => {
                let ints = packed(b).ok_or_else(|| malformed(&at, "bad packed varints"))?;
                for v in ints {
                    out.push(single(ty, &[Wire::Varint(v)], &at)?);
                }
            }
            _ => out.push(single(ty, std::slice::from_ref(value), &at)?),
        }
    }
    Ok(out)
}

/// The entries of a `map<string, T>` field: messages of key (1) and value (2).
fn entries(ty: &Ty, values: &[Wire<'_>], path: &str) -> Result<Map<String, Value>, Malformed> {
    let mut out = Map::new();
    for value in values {
        let Wire::Bytes(entry) = value else {
            return Err(malformed(path, "a map entry that is not a message"));
        };
        let wire =
            fields(entry).map_err(|at| malformed(path, format!("bad map entry at byte {at}")))?;
        let mut key = String::new();
        let mut vals = Vec::new();
        for (n, v) in wire {
            match (n, v) {
                (1, Wire::Bytes(k)) => key = utf8(k, path)?,
                (2, v) => vals.push(v),
                _ => {}
            }
        }
        let at = format!("{path}[{key:?}]");
        let value = single(ty, &vals, &at)?;
        out.insert(key, value);
    }
    Ok(out)
}

fn utf8(bytes: &[u8], path: &str) -> Result<String, Malformed> {
    String::from_utf8(bytes.to_vec()).map_err(|_| malformed(path, "a string that is not UTF-8"))
}

/// The last scalar of `values`, or the concatenation of their bytes for messages.
fn last_varint(values: &[Wire<'_>], path: &str) -> Result<u64, Malformed> {
    match values.last() {
        None => Ok(0),
        Some(Wire::Varint(v)) => Ok(*v),
        Some(other) => Err(malformed(
            path,
            format!("expected a varint, found {other:?}"),
        )),
    }
}

fn concat(values: &[Wire<'_>], path: &str) -> Result<Vec<u8>, Malformed> {
    let mut out = Vec::new();
    for value in values {
        match value {
            Wire::Bytes(b) => out.extend_from_slice(b),
            other => return Err(malformed(path, format!("expected bytes, found {other:?}"))),
        }
    }
    Ok(out)
}

/// One value of type `ty` from the occurrences of its field (none: the zero value).
fn single(ty: &Ty, values: &[Wire<'_>], path: &str) -> Result<Value, Malformed> {
    Ok(match ty {
        Ty::Pointer(inner) => single(inner, values, path)?,
        Ty::Slice(inner) => Value::Array(repeated(inner, values, path)?),
        Ty::Map(inner) => Value::Object(entries(inner, values, path)?),
        Ty::Wrapped(inner) => {
            let bytes = concat(values, path)?;
            let wire =
                fields(&bytes).map_err(|at| malformed(path, format!("bad field at byte {at}")))?;
            let items: Vec<Wire<'_>> = wire
                .into_iter()
                .filter(|(n, _)| *n == 1)
                .map(|(_, v)| v)
                .collect();
            Value::Array(repeated(inner, &items, path)?)
        }
        Ty::Message(name) => Value::Object(object(name, &concat(values, path)?, path)?),
        Ty::Special(s) => special(*s, &concat(values, path)?, path)?,
        Ty::Scalar(s) => scalar(*s, values, path)?,
    })
}

fn scalar(s: Scalar, values: &[Wire<'_>], path: &str) -> Result<Value, Malformed> {
    Ok(match s {
        Scalar::String => Value::String(utf8(
            &concat(&values[values.len().saturating_sub(1)..], path)?,
            path,
        )?),
        Scalar::Bytes => {
            Value::String(STANDARD.encode(concat(&values[values.len().saturating_sub(1)..], path)?))
        }
        Scalar::Bool => Value::Bool(last_varint(values, path)? != 0),
        // Negative int32s are sign-extended to 64 bits on the wire: truncating restores them.
        Scalar::Int32 => Value::from(last_varint(values, path)? as i32),
        Scalar::Int64 => Value::from(last_varint(values, path)? as i64),
        Scalar::Uint32 => Value::from(last_varint(values, path)? as u32),
        Scalar::Uint64 => Value::from(last_varint(values, path)?),
        Scalar::Float64 => match values.last() {
            None => Value::from(0),
            Some(Wire::Fixed64(bits)) => Value::from(f64::from_bits(*bits)),
            Some(other) => {
                return Err(malformed(
                    path,
                    format!("expected a double, found {other:?}"),
                ));
            }
        },
    })
}

/// The integer fields of a message by number (last occurrence wins).
fn ints(bytes: &[u8], path: &str) -> Result<Vec<(u64, u64)>, Malformed> {
    let wire = fields(bytes).map_err(|at| malformed(path, format!("bad field at byte {at}")))?;
    Ok(wire
        .into_iter()
        .filter_map(|(n, v)| match v {
            Wire::Varint(v) => Some((n, v)),
            _ => None,
        })
        .collect())
}

fn int(fields: &[(u64, u64)], number: u64) -> u64 {
    fields
        .iter()
        .rev()
        .find(|(n, _)| *n == number)
        .map_or(0, |(_, v)| *v)
}

/// The first bytes field `number` of a message.
fn bytes_field<'a>(
    bytes: &'a [u8],
    number: u64,
    path: &str,
) -> Result<Option<&'a [u8]>, Malformed> {
    let wire = fields(bytes).map_err(|at| malformed(path, format!("bad field at byte {at}")))?;
    Ok(wire.into_iter().rev().find_map(|(n, v)| match (n, v) {
        (n, Wire::Bytes(b)) if n == number => Some(b),
        _ => None,
    }))
}

/// The JSON of the types with their own marshalling (apimachinery `time_proto.go`,
/// `micro_time_proto.go`, `duration.go`, `intstr.go`, `quantity_proto.go`, `runtime/types.go`).
fn special(s: Special, bytes: &[u8], path: &str) -> Result<Value, Malformed> {
    Ok(match s {
        // An empty Timestamp is the zero time, which marshals as null; Time drops the nanos.
        Special::Time | Special::MicroTime if bytes.is_empty() => Value::Null,
        Special::Time => Value::String(rfc3339(int(&ints(bytes, path)?, 1) as i64, None)),
        Special::MicroTime => {
            let f = ints(bytes, path)?;
            let micros = (int(&f, 2) as i32).max(0) as u32 / 1000;
            Value::String(rfc3339(int(&f, 1) as i64, Some(micros)))
        }
        Special::Duration => Value::String(go_duration(int(&ints(bytes, path)?, 1) as i64)),
        Special::Quantity => match bytes_field(bytes, 1, path)? {
            // What the client wrote is Quantity.String(), already canonical.
            Some(b) => Value::String(utf8(b, path)?),
            None => Value::String("0".into()),
        },
        Special::IntOrString => {
            let kind = int(&ints(bytes, path)?, 1);
            if kind == 1 {
                let s = bytes_field(bytes, 3, path)?.unwrap_or_default();
                Value::String(utf8(s, path)?)
            } else {
                Value::from(int(&ints(bytes, path)?, 2) as i32)
            }
        }
        Special::RawExtension | Special::FieldsV1 => match bytes_field(bytes, 1, path)? {
            None => Value::Null,
            Some(raw) if raw.starts_with(super::MAGIC) => {
                super::decode(raw).map_err(|e| malformed(path, format!("embedded object: {e}")))?
            }
            Some(raw) => serde_json::from_slice(raw)
                .map_err(|e| malformed(path, format!("embedded JSON: {e}")))?,
        },
    })
}

/// Go's `time.Duration.String()`: `1h2m3.5s`, `1.5ms`, `0s`.
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let fraction = |value: u64, unit: u64, suffix: &str| {
        let whole = value / unit;
        let rest = value % unit;
        if rest == 0 {
            format!("{whole}{suffix}")
        } else {
            let digits = unit.ilog10() as usize;
            let text = format!("{rest:0digits$}");
            format!("{whole}.{}{suffix}", text.trim_end_matches('0'))
        }
    };
    let body = match n {
        0..1_000 => format!("{n}ns"),
        1_000..1_000_000 => fraction(n, 1_000, "µs"),
        1_000_000..1_000_000_000 => fraction(n, 1_000_000, "ms"),
        _ => {
            let secs = n / 1_000_000_000;
            let (h, m) = (secs / 3600, (secs % 3600) / 60);
            let s = fraction(n % 60_000_000_000, 1_000_000_000, "s");
            match (h, m) {
                (0, 0) => s,
                (0, m) => format!("{m}m{s}"),
                (h, m) => format!("{h}h{m}m{s}"),
            }
        }
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_go_prints_them() {
        for (nanos, text) in [
            (0, "0s"),
            (1_500_000, "1.5ms"),
            (90_000_000_000, "1m30s"),
            (3_600_000_000_000, "1h0m0s"),
            (-2_500_000_000, "-2.5s"),
        ] {
            assert_eq!(go_duration(nanos), text);
        }
    }
}
