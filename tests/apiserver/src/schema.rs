//! The structural schema of a CustomResourceDefinition version (`openAPIV3Schema`), compiled
//! once, and what the API server does with it to every custom resource it admits, in its order
//! (apiextensions-apiserver `pkg/apiserver/customresource_handler.go`): decode, [default], prune
//! unknown fields, drop the nulls a non-nullable field without a default may not hold, then
//! [validate] into [`FieldError`]s worded as the API server words them (its 422 message is
//! [`super::validation::message`]).
//!
//! Checked: `type` (`integer` takes a number with no fraction, `number` any number),
//! `x-kubernetes-int-or-string`, `nullable`, `enum`, `required`, `pattern`, `minimum` /
//! `maximum` (and their `exclusive*`), `minLength` / `maxLength`, `minItems` / `maxItems`, the
//! string `format`s the server checks (`date-time`, `date`, `uuid`, `byte`, `ipv4`, `ipv6`;
//! others are accepted), `properties`, `additionalProperties`, `items`.
//! `x-kubernetes-preserve-unknown-fields` stops pruning (fields below it that have a schema are
//! still pruned by it); the root and `x-kubernetes-embedded-resource` objects keep `apiVersion`,
//! `kind` and `metadata`. Not checked: `allOf` / `anyOf` / `oneOf` / `not`, `uniqueItems`,
//! `multipleOf`, `min/maxProperties`, `x-kubernetes-validations` (CEL), list and map types.
//!
//! [default]: Schema::default_fields
//! [validate]: Schema::validate

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::{Map, Value};

use super::validation::FieldError;

/// Why an `openAPIV3Schema` cannot be compiled: where in it (`openAPIV3Schema.properties.spec`)
/// and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct SchemaError {
    /// The path of the faulty node, from `openAPIV3Schema`.
    pub path: String,
    /// What is wrong with it.
    pub problem: String,
}

/// A JSON type a node may declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
}

impl Type {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "object" => Type::Object,
            "array" => Type::Array,
            "string" => Type::String,
            "integer" => Type::Integer,
            "number" => Type::Number,
            "boolean" => Type::Boolean,
            _ => return None,
        })
    }
}

/// One compiled node of a structural schema.
#[derive(Debug, Default)]
struct Node {
    ty: Option<Type>,
    int_or_string: bool,
    nullable: bool,
    preserve_unknown: bool,
    embedded: bool,
    properties: BTreeMap<String, Node>,
    additional: Option<Box<Node>>,
    items: Option<Box<Node>>,
    required: Vec<String>,
    enumeration: Vec<Value>,
    pattern: Option<(String, Regex)>,
    minimum: Option<(f64, bool)>,
    maximum: Option<(f64, bool)>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    format: Option<String>,
    default: Option<Value>,
}

/// A compiled `openAPIV3Schema`.
#[derive(Debug)]
pub struct Schema {
    root: Node,
}

/// What admission made of an object: the unknown fields it pruned (`spec.x`,
/// `spec.list[0].y`) and the field errors left after defaulting and pruning.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Admission {
    /// The paths of the fields pruned, sorted.
    pub pruned: Vec<String>,
    /// What is invalid in the object as stored.
    pub errors: Vec<FieldError>,
}

fn bad(path: &str, problem: impl Into<String>) -> SchemaError {
    SchemaError {
        path: path.to_owned(),
        problem: problem.into(),
    }
}

fn compile(v: &Value, path: &str) -> Result<Node, SchemaError> {
    let Some(m) = v.as_object() else {
        return Err(bad(path, "must be an object"));
    };
    let flag = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
    let count = |k: &str| -> Result<Option<u64>, SchemaError> {
        match m.get(k) {
            None => Ok(None),
            Some(n) => n
                .as_u64()
                .map(Some)
                .ok_or_else(|| bad(&format!("{path}.{k}"), "must be a non-negative integer")),
        }
    };
    let bound = |k: &str, exclusive: &str| -> Result<Option<(f64, bool)>, SchemaError> {
        match m.get(k) {
            None => Ok(None),
            Some(n) => n
                .as_f64()
                .map(|n| Some((n, flag(exclusive))))
                .ok_or_else(|| bad(&format!("{path}.{k}"), "must be a number")),
        }
    };
    let mut node = Node {
        int_or_string: flag("x-kubernetes-int-or-string"),
        nullable: flag("nullable"),
        preserve_unknown: flag("x-kubernetes-preserve-unknown-fields"),
        embedded: flag("x-kubernetes-embedded-resource"),
        min_length: count("minLength")?,
        max_length: count("maxLength")?,
        min_items: count("minItems")?,
        max_items: count("maxItems")?,
        minimum: bound("minimum", "exclusiveMinimum")?,
        maximum: bound("maximum", "exclusiveMaximum")?,
        format: m.get("format").and_then(Value::as_str).map(str::to_owned),
        default: m.get("default").cloned(),
        ..Node::default()
    };
    if let Some(t) = m.get("type") {
        let name = t.as_str().unwrap_or("");
        node.ty = Some(Type::parse(name).ok_or_else(|| {
            bad(
                &format!("{path}.type"),
                format!("Unsupported value: {t}: supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""),
            )
        })?);
    }
    if let Some(p) = m.get("pattern") {
        let text = p.as_str().unwrap_or("");
        let re = Regex::new(text)
            .map_err(|e| bad(&format!("{path}.pattern"), format!("invalid regex: {e}")))?;
        node.pattern = Some((text.to_owned(), re));
    }
    for (k, sub) in m
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let child = compile(sub, &format!("{path}.properties[{k}]"))?;
        node.properties.insert(k.clone(), child);
    }
    if let Some(sub) = m.get("additionalProperties").filter(|a| a.is_object()) {
        node.additional = Some(Box::new(compile(
            sub,
            &format!("{path}.additionalProperties"),
        )?));
    }
    if let Some(sub) = m.get("items") {
        node.items = Some(Box::new(compile(sub, &format!("{path}.items"))?));
    }
    node.required = m
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.as_str().map(str::to_owned))
        .collect();
    node.enumeration = m
        .get("enum")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Ok(node)
}

/// `parent.key`, or `key` at the root.
fn child(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_owned()
    } else {
        format!("{parent}.{key}")
    }
}

/// Whether `v` is a null a non-nullable field may not hold.
fn non_nullable_null(v: &Value, node: Option<&Node>) -> bool {
    v.is_null() && node.is_some_and(|n| !n.nullable)
}

/// Applies the defaults of `node` below `v` (structural defaulting's `Default`).
fn default_in(v: &mut Value, node: &Node) {
    match v {
        Value::Object(map) => {
            for (k, prop) in &node.properties {
                let Some(default) = &prop.default else {
                    continue;
                };
                if map.get(k).is_none_or(|x| non_nullable_null(x, Some(prop))) {
                    map.insert(k.clone(), default.clone());
                }
            }
            for (k, x) in map.iter_mut() {
                if let Some(prop) = node.properties.get(k) {
                    default_in(x, prop);
                } else if let Some(add) = node.additional.as_deref() {
                    if let Some(default) = &add.default
                        && non_nullable_null(x, Some(add))
                    {
                        *x = default.clone();
                    }
                    default_in(x, add);
                }
            }
        }
        Value::Array(list) => {
            let Some(items) = node.items.as_deref() else {
                return;
            };
            for x in list {
                if let Some(default) = &items.default
                    && non_nullable_null(x, Some(items))
                {
                    *x = default.clone();
                }
                default_in(x, items);
            }
        }
        _ => {}
    }
}

/// Prunes the fields of `v` that `node` does not declare, recording their paths
/// (structural pruning's `prune`); `resource`: `v` is an object of its own (the root, an
/// embedded resource), which keeps `apiVersion`, `kind` and `metadata`.
fn prune_in(v: &mut Value, node: Option<&Node>, path: &str, out: &mut Vec<String>) {
    if let Some(n) = node
        && n.preserve_unknown
    {
        return skip_prune(v, n, path, out);
    }
    match v {
        Value::Object(map) => {
            let resource = node.is_some_and(|n| n.embedded);
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let here = child(path, &k);
                if resource && kept_by_resources(&k, &map[&k]) {
                    continue;
                }
                let schema = node.and_then(|n| n.properties.get(&k).or(n.additional.as_deref()));
                let Some(schema) = schema else {
                    map.remove(&k);
                    out.push(here);
                    continue;
                };
                if let Some(x) = map.get_mut(&k) {
                    prune_in(x, Some(schema), &here, out);
                }
            }
        }
        Value::Array(list) => {
            let items = node.and_then(|n| n.items.as_deref());
            for (i, x) in list.iter_mut().enumerate() {
                prune_in(x, items, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// What an object of its own keeps whatever its schema: `apiVersion` and `kind` as strings,
/// `metadata` as an object (coerced as ObjectMeta by the server, never pruned).
fn kept_by_resources(key: &str, v: &Value) -> bool {
    match key {
        "apiVersion" | "kind" => v.is_string(),
        "metadata" => v.is_object(),
        _ => false,
    }
}

/// Below `x-kubernetes-preserve-unknown-fields`: unknown fields stay, known ones are pruned by
/// their own schema.
fn skip_prune(v: &mut Value, node: &Node, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map.iter_mut() {
                if node.embedded && kept_by_resources(k, x) {
                    continue;
                }
                if let Some(s) = node.properties.get(k).or(node.additional.as_deref()) {
                    prune_in(x, Some(s), &child(path, k), out);
                }
            }
        }
        Value::Array(list) => {
            if let Some(items) = node.items.as_deref() {
                for (i, x) in list.iter_mut().enumerate() {
                    skip_prune(x, items, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// Removes the nulls of fields that are neither nullable nor defaulted
/// (`PruneNonNullableNullsWithoutDefaults`).
fn drop_nulls(v: &mut Value, node: &Node) {
    match v {
        Value::Object(map) => {
            map.retain(|k, x| {
                let s = node.properties.get(k).or(node.additional.as_deref());
                !matches!(s, Some(s) if x.is_null() && s.default.is_none() && !s.nullable)
            });
            for (k, x) in map.iter_mut() {
                if let Some(s) = node.properties.get(k).or(node.additional.as_deref()) {
                    drop_nulls(x, s);
                }
            }
        }
        Value::Array(list) => {
            if let Some(items) = node.items.as_deref() {
                for x in list {
                    drop_nulls(x, items);
                }
            }
        }
        _ => {}
    }
}

/// The JSON type name of `v`, as kube-openapi infers it from decoded JSON.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value as apimachinery's field errors print it: strings quoted, numbers and booleans bare,
/// the rest as JSON.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn type_invalid(path: &str, value: &str, expected: &str, got: &str) -> FieldError {
    FieldError {
        reason: "FieldValueTypeInvalid",
        field: path.to_owned(),
        body: format!(
            "Invalid value: {value:?}: {path} in body must be of type {expected}: {got:?}"
        ),
    }
}

fn invalid(path: &str, value: &Value, detail: String) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid",
        field: path.to_owned(),
        body: format!("Invalid value: {}: {detail}", shown(value)),
    }
}

/// The type check (kube-openapi `typeValidator`): a number with no fraction passes for an
/// integer, any number for a number.
fn check_type(v: &Value, node: &Node, path: &str, errs: &mut Vec<FieldError>) {
    let expected = match (node.int_or_string, node.ty) {
        (true, _) => "integer,string",
        (false, Some(t)) => match t {
            Type::Object => "object",
            Type::Array => "array",
            Type::String => "string",
            Type::Integer => "integer",
            Type::Number => "number",
            Type::Boolean => "boolean",
        },
        (false, None) => return,
    };
    let got = type_name(v);
    let whole = |v: &Value| v.as_f64().is_some_and(|f| f.fract() == 0.0);
    let ok = match got {
        "null" => node.nullable,
        "integer" => expected.contains("integer") || expected == "number",
        "number" => expected == "number" || (expected.contains("integer") && whole(v)),
        other => expected.split(',').any(|e| e == other),
    };
    if !ok {
        errs.push(type_invalid(path, got, expected, got));
    }
}

/// Whether `v` is one of `allowed` (numbers compared as numbers, as Go's conversion does).
fn enum_contains(allowed: &[Value], v: &Value) -> bool {
    allowed.iter().any(|a| match (a.as_f64(), v.as_f64()) {
        (Some(a), Some(b)) => a == b,
        _ => a == v,
    })
}

/// Whether `s` is written in the string `format` (only those the API server checks).
fn format_ok(format: &str, s: &str) -> bool {
    use std::net::{Ipv4Addr, Ipv6Addr};
    let digits = |t: &str, n: usize| t.len() == n && t.bytes().all(|b| b.is_ascii_digit());
    let date = |d: &str| {
        let p: Vec<&str> = d.split('-').collect();
        p.len() == 3 && digits(p[0], 4) && digits(p[1], 2) && digits(p[2], 2)
    };
    match format {
        "date" => date(s),
        "date-time" | "datetime" => s.split_once(['T', 't', ' ']).is_some_and(|(d, t)| {
            date(d)
                && t.len() >= 8
                && digits(&t[0..2], 2)
                && t.as_bytes()[2] == b':'
                && digits(&t[3..5], 2)
        }),
        "uuid" => {
            let p: Vec<&str> = s.split('-').collect();
            p.iter().map(|x| x.len()).eq([8, 4, 4, 4, 12])
                && p.iter().all(|x| x.bytes().all(|b| b.is_ascii_hexdigit()))
        }
        "byte" => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.decode(s).is_ok()
        }
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        _ => true,
    }
}

/// The checks of one string value.
fn check_string(s: &str, v: &Value, node: &Node, path: &str, errs: &mut Vec<FieldError>) {
    let chars = s.chars().count() as u64;
    if let Some(max) = node.max_length
        && chars > max
    {
        let unit = if max == 1 { "byte" } else { "bytes" };
        errs.push(FieldError {
            reason: "FieldValueTooLong",
            field: path.to_owned(),
            body: format!("Too long: may not be more than {max} {unit}"),
        });
    }
    if let Some(min) = node.min_length
        && chars < min
    {
        let detail = format!("{path} in body should be at least {min} chars long");
        errs.push(invalid(path, v, detail));
    }
    if let Some((text, re)) = &node.pattern
        && !re.is_match(s)
    {
        let detail = format!("{path} in body should match '{text}'");
        errs.push(invalid(path, v, detail));
    }
    if let Some(format) = node.format.as_deref()
        && !format_ok(format, s)
    {
        errs.push(type_invalid(path, s, format, s));
    }
}

/// The checks of one number.
fn check_number(n: f64, v: &Value, node: &Node, path: &str, errs: &mut Vec<FieldError>) {
    let show = |b: f64| Value::from(b).to_string().trim_end_matches(".0").to_owned();
    if let Some((max, exclusive)) = node.maximum
        && (n > max || (exclusive && n == max))
    {
        let rel = if exclusive {
            "less than"
        } else {
            "less than or equal to"
        };
        let detail = format!("{path} in body should be {rel} {}", show(max));
        errs.push(invalid(path, v, detail));
    }
    if let Some((min, exclusive)) = node.minimum
        && (n < min || (exclusive && n == min))
    {
        let rel = if exclusive {
            "greater than"
        } else {
            "greater than or equal to"
        };
        let detail = format!("{path} in body should be {rel} {}", show(min));
        errs.push(invalid(path, v, detail));
    }
}

fn validate_in(v: &Value, node: &Node, path: &str, errs: &mut Vec<FieldError>) {
    if v.is_null() {
        // Nothing but the type applies to a null.
        if !node.nullable {
            check_type(v, node, path, errs);
        }
        return;
    }
    // As kube-openapi's validators: each applies by the value's own kind, whatever the type
    // check said, in its order (type, string, format, number, array, enum, object).
    check_type(v, node, path, errs);
    match v {
        Value::String(s) => check_string(s, v, node, path, errs),
        Value::Number(n) => check_number(n.as_f64().unwrap_or(0.0), v, node, path, errs),
        Value::Array(list) => check_array(list, node, path, errs),
        _ => {}
    }
    if !node.enumeration.is_empty() && !enum_contains(&node.enumeration, v) {
        let supported: Vec<String> = node
            .enumeration
            .iter()
            .map(|a| match a {
                Value::String(s) => format!("{s:?}"),
                other => format!("{:?}", other.to_string()),
            })
            .collect();
        errs.push(FieldError {
            reason: "FieldValueNotSupported",
            field: path.to_owned(),
            body: format!(
                "Unsupported value: {}: supported values: {}",
                shown(v),
                supported.join(", ")
            ),
        });
    }
    if let Value::Object(map) = v {
        check_object(map, node, path, errs);
    }
}

fn check_array(list: &[Value], node: &Node, path: &str, errs: &mut Vec<FieldError>) {
    if let Some(items) = node.items.as_deref() {
        for (i, x) in list.iter().enumerate() {
            validate_in(x, items, &format!("{path}[{i}]"), errs);
        }
    }
    let len = list.len() as u64;
    if let Some(min) = node.min_items
        && len < min
    {
        let detail = format!("{path} in body should have at least {min} items");
        errs.push(invalid(path, &Value::from(len), detail));
    }
    if let Some(max) = node.max_items
        && len > max
    {
        let unit = if max == 1 { "item" } else { "items" };
        errs.push(FieldError {
            reason: "FieldValueTooMany",
            field: path.to_owned(),
            body: format!("Too many: {len}: must have at most {max} {unit}"),
        });
    }
}

fn check_object(map: &Map<String, Value>, node: &Node, path: &str, errs: &mut Vec<FieldError>) {
    // Declared properties in name order (Go's map order is random; this one is stable).
    for (k, prop) in &node.properties {
        if let Some(x) = map.get(k) {
            validate_in(x, prop, &child(path, k), errs);
        }
    }
    if let Some(add) = node.additional.as_deref() {
        for (k, x) in map {
            if !node.properties.contains_key(k) {
                validate_in(x, add, &child(path, k), errs);
            }
        }
    }
    for k in &node.required {
        if !map.contains_key(k) {
            errs.push(FieldError::required(child(path, k), ""));
        }
    }
}

impl Schema {
    /// Compiles `openAPIV3Schema` (the value under `schema.openAPIV3Schema` of a CRD version).
    pub fn compile(open_api_v3_schema: &Value) -> Result<Self, SchemaError> {
        let mut root = compile(open_api_v3_schema, "openAPIV3Schema")?;
        // The root is an object of its own: it keeps apiVersion, kind and metadata.
        root.embedded = true;
        Ok(Self { root })
    }

    /// Applies the schema's defaults to `obj` in place: a field missing (or null where it may
    /// not be) gets its default, below objects that exist (no parent is created).
    pub fn default_fields(&self, obj: &mut Value) {
        default_in(obj, &self.root);
    }

    /// Removes the fields of `obj` the schema does not declare and returns their paths.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut out = Vec::new();
        prune_in(obj, Some(&self.root), "", &mut out);
        out.sort();
        out
    }

    /// The field errors of `obj`, as the API server's schema validation reports them.
    pub fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        validate_in(obj, &self.root, "", &mut errs);
        errs
    }

    /// What the API server does to a custom resource it is asked to store: defaults, prunes,
    /// drops forbidden nulls, then validates.
    pub fn admit(&self, obj: &mut Value) -> Admission {
        self.default_fields(obj);
        let pruned = self.prune(obj);
        drop_nulls(obj, &self.root);
        Admission {
            pruned,
            errors: self.validate(obj),
        }
    }
}

/// The `openAPIV3Schema` of `version` in a CustomResourceDefinition object, if it has one.
pub fn crd_version_schema<'a>(crd: &'a Value, version: &str) -> Option<&'a Value> {
    crd.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))?
        .pointer("/schema/openAPIV3Schema")
}

/// The schema errors of every version of a CustomResourceDefinition object, as field errors
/// of `spec.versions[i].schema.openAPIV3Schema`.
pub fn crd_schema_errors(crd: &Value) -> Vec<FieldError> {
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    let mut errs = Vec::new();
    for (i, v) in versions.into_iter().flatten().enumerate() {
        if let Some(s) = v.pointer("/schema/openAPIV3Schema")
            && let Err(e) = Schema::compile(s)
        {
            errs.push(FieldError {
                reason: "FieldValueInvalid",
                field: format!("spec.versions[{i}].schema.{}", e.path),
                body: format!("Invalid value: \"\": {}", e.problem),
            });
        }
    }
    errs
}

/// The schemas of the CustomResourceDefinitions among some objects (a `dir:` source's), each
/// compiled once, by group, version and kind.
#[derive(Debug, Default)]
pub struct CrdSchemas(BTreeMap<(String, String, String), Result<Schema, String>>);

impl CrdSchemas {
    /// The schemas of the CustomResourceDefinitions in `objects` (other objects are ignored).
    pub fn of<'a>(objects: impl Iterator<Item = &'a Value>) -> Self {
        let mut out = BTreeMap::new();
        for crd in objects {
            if crd.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition") {
                continue;
            }
            let text = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or("");
            let (group, kind, name) = (
                text("/spec/group"),
                text("/spec/names/kind"),
                text("/metadata/name"),
            );
            for v in crd
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let version = v.get("name").and_then(Value::as_str).unwrap_or("");
                let Some(s) = v.pointer("/schema/openAPIV3Schema") else {
                    continue;
                };
                let compiled = Schema::compile(s).map_err(|e| {
                    format!("the CustomResourceDefinition {name:?} has an invalid schema for {version}: {e}")
                });
                out.insert((group.into(), version.into(), kind.into()), compiled);
            }
        }
        Self(out)
    }

    /// Defaults, prunes and validates `obj` by the schema of its kind and version, if one of
    /// the CRDs gives one (`Ok` without a schema). Returns the pruned fields, or the 422
    /// message of the API server when the object is invalid.
    pub fn admit(&self, obj: &mut Value) -> Result<Vec<String>, String> {
        let text = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
        let (group, version) = wisp_kinds::split_api_version(text("/apiVersion"));
        let key = (
            group.to_owned(),
            version.to_owned(),
            text("/kind").to_owned(),
        );
        let name = text("/metadata/name").to_owned();
        match self.0.get(&key) {
            None => Ok(Vec::new()),
            Some(Err(e)) => Err(e.clone()),
            Some(Ok(schema)) => {
                let admission = schema.admit(obj);
                if admission.errors.is_empty() {
                    Ok(admission.pruned)
                } else {
                    let (group, _, kind) = &key;
                    Err(super::validation::message(
                        group,
                        kind,
                        &name,
                        &admission.errors,
                    ))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
