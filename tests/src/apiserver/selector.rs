//! Label and field selectors, parsed from the `labelSelector` / `fieldSelector` query parameters
//! with the grammar of apimachinery's `labels.Parse` and `fields.ParseSelector`. A label
//! selector is lexed and parsed as `labels.Parse` does it, so one that does not parse gets its
//! error message word for word (answered as 400 BadRequest).
//!
//! Field selectors are checked per kind as a real API server does: `metadata.name` and
//! `metadata.namespace` (for most kinds) plus the kind's own selectable fields (Pod, Event,
//! Secret, Namespace, Node, Service, ReplicaSet, ReplicationController, Job,
//! CertificateSigningRequest; a custom resource's `selectableFields`); any other label is a
//! 400 BadRequest with the message Kubernetes 1.36 gives for that kind.

use serde_json::Value;
use wisp_host::scale::shards::{Ranges, ShardField, parse_selector};

use super::discovery::{FieldRejection, Known, known};

/// A selector the server could not parse; answered with 400 BadRequest with this message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SelectorError(pub String);

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    /// `key=value` or `key==value`.
    Eq(String, String),
    /// `key!=value`: also matches objects without the label.
    NotEq(String, String),
    /// `key in (a,b)`.
    In(String, Vec<String>),
    /// `key notin (a,b)`: also matches objects without the label.
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
    /// `key>n`: the label is an integer greater than n.
    Gt(String, i64),
    /// `key<n`: the label is an integer less than n.
    Lt(String, i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LabelSelector {
    reqs: Vec<LabelReq>,
}

impl LabelSelector {
    /// Parses `app=web,tier in (a,b),!legacy` with the grammar of apimachinery's
    /// `labels.Parse`; an error carries its message.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let reqs = LabelParser::new(input).parse().map_err(SelectorError)?;
        Ok(Self { reqs })
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether `obj`'s `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        let int = |key: &str| get(key).and_then(|v| v.parse::<i64>().ok());
        self.reqs.iter().all(|req| match req {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|have| vs.iter().any(|v| v == have)),
            LabelReq::NotIn(k, vs) => !get(k).is_some_and(|have| vs.iter().any(|v| v == have)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::DoesNotExist(k) => get(k).is_none(),
            LabelReq::Gt(k, n) => int(k).is_some_and(|have| have > *n),
            LabelReq::Lt(k, n) => int(k).is_some_and(|have| have < *n),
        })
    }
}

/// A token of the label selector lexer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Error,
    End,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

/// The operators of a requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Exists,
    DoesNotExist,
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    GreaterThan,
    LessThan,
}

/// The binary operators, as `labels.Parse` lists them in errors.
const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

fn keyword(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosedPar,
        "," => Tok::Comma,
        "!" => Tok::DoesNotExist,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::GreaterThan,
        "in" => Tok::In,
        "<" => Tok::LessThan,
        "!=" => Tok::NotEquals,
        "notin" => Tok::NotIn,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// Splits a selector into tokens as apimachinery's lexer does: runs of operator characters
/// are the longest operator they start with; other runs up to a space or an operator character
/// are identifiers (or the keywords `in`, `notin`).
fn lex(input: &str) -> Vec<(Tok, String)> {
    let b = input.as_bytes();
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        while pos < b.len() && is_space(b[pos]) {
            pos += 1;
        }
        if pos >= b.len() {
            out.push((Tok::End, String::new()));
            return out;
        }
        if is_special(b[pos]) {
            let start = pos;
            let mut last: Option<(Tok, usize)> = None;
            while pos < b.len() && is_special(b[pos]) {
                let candidate = &input[start..=pos];
                if let Some(tok) = keyword(candidate) {
                    last = Some((tok, pos + 1));
                } else if last.is_some() {
                    break;
                }
                pos += 1;
            }
            match last {
                Some((tok, end)) => {
                    out.push((tok, input[start..end].to_string()));
                    pos = end;
                }
                None => out.push((
                    Tok::Error,
                    format!("error expected: keyword found '{}'", &input[start..pos]),
                )),
            }
            continue;
        }
        let start = pos;
        while pos < b.len() && !is_special(b[pos]) && !is_space(b[pos]) {
            pos += 1;
        }
        let word = &input[start..pos];
        let tok = match word {
            "in" => Tok::In,
            "notin" => Tok::NotIn,
            _ => Tok::Identifier,
        };
        out.push((tok, word.to_string()));
    }
}

/// The recursive descent parser of `labels.Parse`, with its error messages.
struct LabelParser {
    items: Vec<(Tok, String)>,
    pos: usize,
}

impl LabelParser {
    fn new(input: &str) -> Self {
        Self {
            items: lex(input),
            pos: 0,
        }
    }

    /// The current token; where values are expected, `in` and `notin` are identifiers.
    fn lookahead(&self, values: bool) -> (Tok, String) {
        let (tok, lit) = self
            .items
            .get(self.pos)
            .cloned()
            .unwrap_or((Tok::End, String::new()));
        match tok {
            Tok::In | Tok::NotIn if values => (Tok::Identifier, lit),
            _ => (tok, lit),
        }
    }

    fn consume(&mut self, values: bool) -> (Tok, String) {
        let item = self.lookahead(values);
        self.pos = (self.pos + 1).min(self.items.len());
        item
    }

    fn parse(&mut self) -> Result<Vec<LabelReq>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(true);
            match tok {
                Tok::Identifier | Tok::DoesNotExist => {
                    let req = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(req);
                    let (t, l) = self.consume(true);
                    match t {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(true);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Tok::End => return Ok(reqs),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<LabelReq, String> {
        let (key, op) = self.key_and_inferred_operator()?;
        if let Some(op @ (Op::Exists | Op::DoesNotExist)) = op {
            return new_requirement(key, op, Vec::new());
        }
        let op = self.operator()?;
        let values = match op {
            Op::In | Op::NotIn => self.values()?,
            _ => self.exact_value()?,
        };
        new_requirement(key, op, values)
    }

    fn key_and_inferred_operator(&mut self) -> Result<(String, Option<Op>), String> {
        let (mut tok, mut lit) = self.consume(true);
        let mut op = None;
        if tok == Tok::DoesNotExist {
            op = Some(Op::DoesNotExist);
            (tok, lit) = self.consume(true);
        }
        if tok != Tok::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        let errs = label_key_errors(&lit);
        if !errs.is_empty() {
            // The parser validates with no field path: Go prints a nil path as "<nil>".
            return Err(format!(
                "<nil>: Invalid value: {lit:?}: {}",
                errs.join("; ")
            ));
        }
        let (next, _) = self.lookahead(true);
        if matches!(next, Tok::End | Tok::Comma) && op.is_none() {
            op = Some(Op::Exists);
        }
        Ok((lit, op))
    }

    fn operator(&mut self) -> Result<Op, String> {
        let (tok, lit) = self.consume(false);
        Ok(match tok {
            Tok::In => Op::In,
            Tok::Equals => Op::Equals,
            Tok::DoubleEquals => Op::DoubleEquals,
            Tok::GreaterThan => Op::GreaterThan,
            Tok::LessThan => Op::LessThan,
            Tok::NotIn => Op::NotIn,
            Tok::NotEquals => Op::NotEquals,
            _ => return Err(format!("found '{lit}', expected: {BINARY_OPERATORS}")),
        })
    }

    /// `( a, b )`: a sorted set; `()` is the set of the empty string.
    fn values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.consume(true);
        if tok != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.lookahead(true);
        match tok {
            Tok::Identifier | Tok::Comma => {
                let set = self.identifiers()?;
                if self.consume(true).0 != Tok::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set)
            }
            Tok::ClosedPar => {
                self.consume(true);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn identifiers(&mut self) -> Result<Vec<String>, String> {
        let mut set = std::collections::BTreeSet::new();
        loop {
            let (tok, lit) = self.consume(true);
            match tok {
                Tok::Identifier => {
                    set.insert(lit);
                    let (next, lit2) = self.lookahead(true);
                    match next {
                        Tok::Comma => continue,
                        Tok::ClosedPar => return Ok(set.into_iter().collect()),
                        _ => return Err(format!("found '{lit2}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    match self.lookahead(true).0 {
                        Tok::ClosedPar => {
                            set.insert(String::new());
                            return Ok(set.into_iter().collect());
                        }
                        Tok::Comma => {
                            set.insert(String::new());
                        }
                        _ => {}
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn exact_value(&mut self) -> Result<Vec<String>, String> {
        if matches!(self.lookahead(true).0, Tok::End | Tok::Comma) {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(true);
        if tok == Tok::Identifier {
            Ok(vec![lit])
        } else {
            Err(format!("found '{lit}', expected: identifier"))
        }
    }
}

/// `NewRequirement`: checks the values (label values; integers for `gt` / `lt`) and
/// aggregates the errors as apimachinery does (one as it is, several in `[a, b]`).
fn new_requirement(key: String, op: Op, values: Vec<String>) -> Result<LabelReq, String> {
    let mut errs: Vec<String> = Vec::new();
    let mut ints = Vec::new();
    if matches!(op, Op::GreaterThan | Op::LessThan) {
        for (i, v) in values.iter().enumerate() {
            match v.parse::<i64>() {
                Ok(n) => ints.push(n),
                Err(_) => errs.push(format!(
                    "values[{i}]: Invalid value: {v:?}: for 'Gt', 'Lt' operators, the value must be an integer"
                )),
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let mut problems = Vec::new();
        if v.len() > 63 {
            problems.push("must be no more than 63 bytes".to_string());
        }
        if !v.is_empty() && !is_label_name(v) {
            problems.push(LABEL_VALUE.to_string());
        }
        if !problems.is_empty() {
            errs.push(format!(
                "values[{i}][{key}]: Invalid value: {v:?}: {}",
                problems.join("; ")
            ));
        }
    }
    let mut seen = Vec::new();
    errs.retain(|e| {
        let fresh = !seen.contains(e);
        seen.push(e.clone());
        fresh
    });
    match errs.len() {
        0 => {}
        1 => return Err(errs.remove(0)),
        _ => return Err(format!("[{}]", errs.join(", "))),
    }
    let first = values.first().cloned().unwrap_or_default();
    Ok(match op {
        Op::Exists => LabelReq::Exists(key),
        Op::DoesNotExist => LabelReq::DoesNotExist(key),
        Op::Equals | Op::DoubleEquals => LabelReq::Eq(key, first),
        Op::NotEquals => LabelReq::NotEq(key, first),
        Op::In => LabelReq::In(key, values),
        Op::NotIn => LabelReq::NotIn(key, values),
        Op::GreaterThan => LabelReq::Gt(key, ints.first().copied().unwrap_or_default()),
        Op::LessThan => LabelReq::Lt(key, ints.first().copied().unwrap_or_default()),
    })
}

const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const DNS1123_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`.
fn is_dns_subdomain(s: &str) -> bool {
    s.split('.').all(|part| {
        let b = part.as_bytes();
        !b.is_empty()
            && b[0].is_ascii_alphanumeric()
            && !b[0].is_ascii_uppercase()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && !b[b.len() - 1].is_ascii_uppercase()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    })
}

/// The messages of apimachinery's `IsLabelKey` (an optional DNS subdomain prefix and `/`, then
/// a name of at most 63 characters).
fn label_key_errors(key: &str) -> Vec<String> {
    let parts: Vec<&str> = key.split('/').collect();
    let mut errs = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                if prefix.len() > 253 {
                    errs.push("prefix part must be no more than 253 bytes".to_string());
                }
                if !is_dns_subdomain(prefix) {
                    errs.push(format!("prefix part {DNS1123_SUBDOMAIN}"));
                }
            }
            *name
        }
        _ => {
            return vec![format!(
                "a valid label key {LABEL_KEY_MSG} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 bytes".to_string());
    }
    if !is_label_name(name) {
        errs.push(format!("name part {LABEL_KEY_MSG}"));
    }
    errs
}

/// How the field values of one kind are read, for the kinds whose selectable fields are not
/// plain copies of a JSON string.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Values {
    /// Dotted JSON paths; a missing field is the empty string.
    #[default]
    Plain,
    /// Pod: `spec.hostNetwork` defaults to `false`, `status.podIP` is the first of `podIPs`,
    /// `status.podIPs` is never set (a real server accepts the label but has no value for it).
    Pod,
    /// Event: `source` is `source.component`.
    Event,
    /// Node: `spec.unschedulable` defaults to `false`.
    Node,
    /// ReplicaSet, ReplicationController: `status.replicas` defaults to `0`.
    Replicas,
    /// Job: `status.successful` is `status.succeeded`, default `0`.
    Job,
}

/// A parsed field selector; the empty selector matches everything.
///
/// Parsed permissively by [`FieldSelector::parse`]; [`Filter::from_request`] then checks every
/// label against what the kind supports, as a real API server's field label conversion does.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FieldSelector {
    /// (label, value, wanted equal)
    reqs: Vec<(String, String, bool)>,
    /// How this kind's values are read.
    values: Values,
}

impl FieldSelector {
    /// Parses `metadata.name=a,metadata.namespace!=kube-system`.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        let cannot = |term: &str| {
            SelectorError(format!(
                "invalid selector: '{input}'; can't understand '{term}'"
            ))
        };
        for term in input.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (path, value, eq) = if let Some((k, v)) = term.split_once("!=") {
                (k, v, false)
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (k, v, true)
            } else {
                return Err(cannot(term));
            };
            let path = path.trim();
            if path.is_empty() {
                return Err(cannot(term));
            }
            reqs.push((path.to_string(), value.trim().to_string(), eq));
        }
        Ok(Self {
            reqs,
            values: Values::Plain,
        })
    }

    /// Checks every label against the kind, as the API server's field label conversion does:
    /// an unsupported label is refused with the kind's own message.
    fn convert(&mut self, known: &Known) -> Result<(), String> {
        for (label, _, _) in &mut self.reqs {
            match known {
                Known::Builtin(b) => {
                    if !b.fields.contains(&label.as_str()) {
                        return Err(match b.rejection {
                            FieldRejection::NotSupported => {
                                format!("field label not supported: {label}")
                            }
                            FieldRejection::Job => {
                                format!("field label {label:?} not supported for batchv1.Job")
                            }
                            FieldRejection::MetaOnly => format!(
                                "{label:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                            ),
                        });
                    }
                    if b.kind == "Pod" && label == "spec.host" {
                        *label = "spec.nodeName".into();
                    }
                }
                Known::Custom(c) => {
                    let ok = label == "metadata.name"
                        || (c.namespaced && label == "metadata.namespace")
                        || c.selectable.iter().any(|f| f == label);
                    if !ok {
                        return Err(format!("field label not supported: {label}"));
                    }
                }
                Known::Unknown => {
                    if label != "metadata.name" && label != "metadata.namespace" {
                        return Err(format!("field label not supported: {label}"));
                    }
                }
            }
        }
        self.values = match known {
            Known::Builtin(b) => match b.kind {
                "Pod" => Values::Pod,
                "Event" if b.group.is_empty() => Values::Event,
                "Node" => Values::Node,
                "ReplicaSet" | "ReplicationController" => Values::Replicas,
                "Job" => Values::Job,
                _ => Values::Plain,
            },
            _ => Values::Plain,
        };
        Ok(())
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The value of a field label of `obj`, as the API server's selectable field set has it.
    fn value(&self, obj: &Value, label: &str) -> String {
        let at = |path: &str| {
            let mut cur = Some(obj);
            for part in path.split('.') {
                cur = match part.parse::<usize>() {
                    Ok(i) => cur.and_then(|v| v.get(i)),
                    Err(_) => cur.and_then(|v| v.get(part)),
                };
            }
            match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            }
        };
        let or = |value: String, default: &str| {
            if value.is_empty() {
                default.to_string()
            } else {
                value
            }
        };
        match (self.values, label) {
            (Values::Pod, "spec.hostNetwork") => or(at(label), "false"),
            (Values::Pod, "status.podIP") => or(at("status.podIPs.0.ip"), &at(label)),
            (Values::Pod, "status.podIPs") => String::new(),
            (Values::Event, "source") => at("source.component"),
            (Values::Node, "spec.unschedulable") => or(at(label), "false"),
            (Values::Replicas, "status.replicas") => or(at(label), "0"),
            (Values::Job, "status.successful") => or(at("status.succeeded"), "0"),
            _ => at(label),
        }
    }

    /// Whether every requirement holds for `obj`.
    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs
            .iter()
            .all(|(path, want, eq)| (self.value(obj, path) == *want) == *eq)
    }
}

/// Everything a list or watch request filters on: the namespace of its path and its selectors.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Filter {
    /// Only objects in this namespace; `None` for cluster-wide requests.
    pub namespace: Option<String>,
    /// From `labelSelector`.
    pub labels: LabelSelector,
    /// From `fieldSelector`.
    pub fields: FieldSelector,
    /// From `shardSelector` (KEP-5866): the field hashed, its ranges, and the selector as sent
    /// (echoed in a list's `metadata.shardInfo`).
    pub shard: Option<(ShardField, Ranges, String)>,
}

impl Filter {
    /// The filter a list or watch request asks for: its namespace and its `labelSelector` and
    /// `fieldSelector` parameters.
    ///
    /// The error is the message of the 400 BadRequest a real server answers: a label selector
    /// that does not parse, or a field label the kind does not support.
    pub(crate) fn from_request(
        shared: &super::Shared,
        target: &super::http::Target,
        query: &super::http::Query,
    ) -> Result<Self, String> {
        let mut filter = Self::new(
            target.namespace.clone(),
            query.get("labelSelector").map(String::as_str),
            query.get("fieldSelector").map(String::as_str),
        )
        .map_err(|e| e.to_string())?;
        filter.fields.convert(&known(shared, &target.resource))?;
        if let Some(s) = query.get("shardSelector").filter(|s| !s.is_empty())
            && !shared.faults.shard_selector_ignored()
        {
            let (field, ranges) = parse_selector(s)?;
            filter.shard = Some((field, ranges, s.clone()));
        }
        Ok(filter)
    }

    /// Builds the filter of a request.
    pub fn new(
        namespace: Option<String>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Self, SelectorError> {
        Ok(Self {
            namespace,
            labels: LabelSelector::parse(label_selector.unwrap_or(""))?,
            fields: FieldSelector::parse(field_selector.unwrap_or(""))?,
            shard: None,
        })
    }

    /// Whether the request has label or field selectors.
    pub fn has_selectors(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }

    /// Whether `obj` passes the namespace and both selectors.
    pub fn matches(&self, obj: &Value) -> bool {
        let ns_ok = self.namespace.as_deref().is_none_or(|ns| {
            obj.pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or("")
                == ns
        });
        let shard_ok = self.shard.as_ref().is_none_or(|(field, ranges, _)| {
            let text = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
            ranges.contains(field.hash_of(text("/metadata/uid"), text("/metadata/namespace")))
        });
        ns_ok && shard_ok && self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}, "spec": {"nodeName": "n1"}})
    }

    #[test]
    fn label_selector_supports_every_operator() {
        let obj = labelled(json!({"app": "web", "tier": "front"}));
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("tier in (front,back)", true),
            ("tier in (back)", false),
            ("tier notin (back)", true),
            ("missing notin (back)", true),
            ("missing in (back)", false),
            ("app=web,tier in (a, front),!legacy", true),
            ("app=web,tier=back", false),
        ] {
            let parsed = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(parsed.matches(&obj), want, "{sel}");
        }
    }

    #[test]
    fn malformed_label_selectors_are_rejected_with_the_apimachinery_message() {
        let value_msg = format!("values[0][app]: Invalid value: \"-x\": {LABEL_VALUE}");
        for (sel, want) in [
            (
                "a in b",
                "unable to parse requirement: found 'b' expected: '('",
            ),
            (
                "a in (b",
                "unable to parse requirement: found '', expected: ',' or ')'",
            ),
            (
                "=x",
                "found '=', expected: !, identifier, or 'end of string'",
            ),
            (
                "a b c",
                "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt",
            ),
            (
                "a foo (b)",
                "unable to parse requirement: found 'foo', expected: in, notin, =, ==, !=, gt, lt",
            ),
            ("a,", "found '', expected: identifier after ','"),
            (
                "a=(",
                "unable to parse requirement: found '(', expected: identifier",
            ),
            (
                "a>x",
                "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer",
            ),
            ("a=b=c", "found '=', expected: ',' or 'end of string'"),
            (
                "!",
                "unable to parse requirement: found '', expected: identifier",
            ),
            (
                "app=-x",
                &format!("unable to parse requirement: {value_msg}"),
            ),
        ] {
            match LabelSelector::parse(sel) {
                Err(e) => assert_eq!(e.to_string(), want, "{sel}"),
                Ok(parsed) => panic!("{sel} parsed as {parsed:?}"),
            }
        }
        let key = LabelSelector::parse("-a=b")
            .expect_err("invalid key")
            .to_string();
        assert_eq!(
            key,
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"-a\": name part {LABEL_KEY_MSG}"
            )
        );
    }

    #[test]
    fn label_selectors_parse_sets_and_integers_as_apimachinery_does() {
        let obj = labelled(json!({"app": "web", "n": "5", "empty": ""}));
        for (sel, want) in [
            ("app in (,web)", true),
            ("empty in ()", true),
            ("n>4,n<6", true),
            ("n>5", false),
            ("app in (in, notin)", false),
            ("!missing,app", true),
            ("empty=", true),
        ] {
            let parsed = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(parsed.matches(&obj), want, "{sel}");
        }
    }

    #[test]
    fn field_selector_reads_dotted_paths() {
        let obj = labelled(json!({}));
        for (sel, want) in [
            ("metadata.name=a", true),
            ("metadata.name==b", false),
            ("metadata.namespace!=ns", false),
            ("spec.nodeName=n1,metadata.name=a", true),
            ("status.phase=", true),
        ] {
            assert_eq!(
                FieldSelector::parse(sel).map(|s| s.matches(&obj)).ok(),
                Some(want),
                "{sel}"
            );
        }
        assert!(FieldSelector::parse("metadata.name").is_err());
    }
}
