//! The field table of every Kubernetes API type (`types.txt`, written by `generate.py` from the
//! Go types of kubernetes/api and kubernetes/apimachinery v0.36.3), read once.

use std::collections::HashMap;
use std::sync::OnceLock;

/// A scalar on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scalar {
    String,
    Bool,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Float64,
    /// `[]byte`: base64 in JSON.
    Bytes,
}

/// A type whose JSON form is its own (a custom `MarshalJSON` in Go).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Special {
    /// `metav1.Time`: RFC 3339 seconds, `null` when zero.
    Time,
    /// `metav1.MicroTime`: RFC 3339 with microseconds, `null` when zero.
    MicroTime,
    /// `metav1.Duration`: Go's duration string.
    Duration,
    /// `resource.Quantity`: its canonical string.
    Quantity,
    /// `intstr.IntOrString`: a number or a string.
    IntOrString,
    /// `runtime.RawExtension`: the embedded object.
    RawExtension,
    /// `metav1.FieldsV1`: the embedded JSON.
    FieldsV1,
}

/// A field's Go type, as far as its JSON form depends on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ty {
    /// `*T`: absent is `nil`, present is kept even when zero.
    Pointer(Box<Ty>),
    /// `[]T`.
    Slice(Box<Ty>),
    /// `map[string]T`.
    Map(Box<Ty>),
    /// A named slice type marked `+protobuf.nullable`: a message of repeated `items` (1).
    Wrapped(Box<Ty>),
    Scalar(Scalar),
    Special(Special),
    /// A struct, by `apiVersion.Name`.
    Message(&'static str),
}

/// How `encoding/json` omits a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Omit {
    /// Always written.
    Never,
    /// `omitempty`: omitted when false, 0, "", nil or empty (never for a struct).
    Empty,
    /// `omitzero`: omitted when the zero value.
    Zero,
}

/// One field of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FieldDef {
    pub number: u64,
    /// The JSON name; `None` for an inline struct, whose fields are the parent's.
    pub json: Option<&'static str>,
    pub omit: Omit,
    pub ty: Ty,
}

const TABLE: &str = include_str!("types.txt");

fn ty(text: &'static str) -> Option<Ty> {
    let boxed = |rest: &'static str| ty(rest).map(Box::new);
    Some(if let Some(rest) = text.strip_prefix('*') {
        Ty::Pointer(boxed(rest)?)
    } else if let Some(rest) = text.strip_prefix("[]") {
        Ty::Slice(boxed(rest)?)
    } else if let Some(rest) = text.strip_prefix("{}") {
        Ty::Map(boxed(rest)?)
    } else if let Some(rest) = text.strip_prefix("w:") {
        Ty::Wrapped(boxed(rest)?)
    } else {
        match text {
            "string" => Ty::Scalar(Scalar::String),
            "bool" => Ty::Scalar(Scalar::Bool),
            "int32" => Ty::Scalar(Scalar::Int32),
            "int64" => Ty::Scalar(Scalar::Int64),
            "uint32" => Ty::Scalar(Scalar::Uint32),
            "uint64" => Ty::Scalar(Scalar::Uint64),
            "float64" => Ty::Scalar(Scalar::Float64),
            "bytes" => Ty::Scalar(Scalar::Bytes),
            "Time" => Ty::Special(Special::Time),
            "MicroTime" => Ty::Special(Special::MicroTime),
            "Duration" => Ty::Special(Special::Duration),
            "Quantity" => Ty::Special(Special::Quantity),
            "IntOrString" => Ty::Special(Special::IntOrString),
            "RawExtension" => Ty::Special(Special::RawExtension),
            "FieldsV1" => Ty::Special(Special::FieldsV1),
            message if message.contains('.') => Ty::Message(message),
            _ => return None,
        }
    })
}

fn field(line: &'static str) -> Option<FieldDef> {
    let mut parts = line.split(' ');
    let number = parts.next()?.parse().ok()?;
    let json = parts.next().filter(|n| *n != ".");
    let omit = match parts.next()? {
        "o" => Omit::Empty,
        "z" => Omit::Zero,
        _ => Omit::Never,
    };
    Some(FieldDef {
        number,
        json,
        omit,
        ty: ty(parts.next()?)?,
    })
}

fn parse() -> HashMap<&'static str, Vec<FieldDef>> {
    let mut out: HashMap<&'static str, Vec<FieldDef>> = HashMap::new();
    let mut current = None;
    for line in TABLE.lines() {
        if let Some(name) = line.strip_prefix("M ") {
            out.entry(name).or_default();
            current = Some(name);
        } else if let (Some(rest), Some(name)) = (line.strip_prefix("F "), current) {
            // The table is generated and checked by a test: a line that does not parse is a
            // bug of the generator, caught there.
            if let Some(f) = field(rest) {
                out.entry(name).or_default().push(f);
            }
        }
    }
    out
}

/// The fields of the message `apiVersion.Name`, if it is a Kubernetes type.
pub(super) fn message(name: &str) -> Option<&'static [FieldDef]> {
    static TYPES: OnceLock<HashMap<&'static str, Vec<FieldDef>>> = OnceLock::new();
    TYPES.get_or_init(parse).get(name).map(Vec::as_slice)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_of_the_table_parses_and_every_message_it_names_is_in_it() {
        for line in TABLE.lines().filter_map(|l| l.strip_prefix("F ")) {
            let f = field(line).unwrap_or_else(|| panic!("bad line {line:?}"));
            let mut t = &f.ty;
            while let Ty::Pointer(i) | Ty::Slice(i) | Ty::Map(i) | Ty::Wrapped(i) = t {
                t = i;
            }
            if let Ty::Message(m) = t {
                assert!(message(m).is_some(), "{m} is named but not defined");
            }
        }
        let spec = message("apps/v1.DeploymentSpec").expect("defined");
        assert_eq!(
            spec[0],
            FieldDef {
                number: 1,
                json: Some("replicas"),
                omit: Omit::Empty,
                ty: Ty::Pointer(Box::new(Ty::Scalar(Scalar::Int32)))
            }
        );
    }
}
