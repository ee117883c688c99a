//! Label and field selectors, parsed from the `labelSelector` / `fieldSelector` query parameters
//! with the grammar of apimachinery's `labels.Parse` and `fields.ParseSelector`.
//!
//! Field selectors are checked per kind as a real API server does: `metadata.name` and
//! `metadata.namespace` (for most kinds) plus the kind's own selectable fields (Pod, Event,
//! Secret, Namespace, Node, Service, ReplicaSet, ReplicationController, Job,
//! CertificateSigningRequest; a custom resource's `selectableFields`); any other label is a
//! 400 BadRequest with the message Kubernetes 1.36 gives for that kind.

use serde_json::Value;
use wisp_host::scale::shards::{Ranges, ShardField, parse_selector};

use super::discovery::{FieldRejection, Known, known};

/// A selector the server could not parse; answered with 400 BadRequest.
#[derive(Debug, thiserror::Error)]
#[error("unable to parse requirement: {0}")]
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
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LabelSelector {
    reqs: Vec<LabelReq>,
}

impl LabelSelector {
    /// Parses `app=web,tier in (a,b),!legacy`.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for term in split_top_level(input) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            reqs.push(parse_label_req(term)?);
        }
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
        self.reqs.iter().all(|req| match req {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|have| vs.iter().any(|v| v == have)),
            LabelReq::NotIn(k, vs) => !get(k).is_some_and(|have| vs.iter().any(|v| v == have)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::DoesNotExist(k) => get(k).is_none(),
        })
    }
}

/// Splits on commas that are not inside `( .. )`.
fn split_top_level(input: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&input[start..]);
    parts
}

fn parse_label_req(term: &str) -> Result<LabelReq, SelectorError> {
    let bad = || SelectorError(term.to_string());
    if let Some(key) = term.strip_prefix('!') {
        let key = valid_key(key.trim()).ok_or_else(bad)?;
        return Ok(LabelReq::DoesNotExist(key));
    }
    if let Some((k, v)) = term.split_once("!=") {
        return Ok(LabelReq::NotEq(
            valid_key(k).ok_or_else(bad)?,
            v.trim().to_string(),
        ));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return Ok(LabelReq::Eq(
            valid_key(k).ok_or_else(bad)?,
            v.trim().to_string(),
        ));
    }
    if let Some(open) = term.find('(') {
        let close = term.rfind(')').filter(|c| *c > open).ok_or_else(bad)?;
        if !term[close + 1..].trim().is_empty() {
            return Err(bad());
        }
        let mut head = term[..open].split_whitespace();
        let (key, op) = match (head.next(), head.next(), head.next()) {
            (Some(key), Some(op), None) => (valid_key(key).ok_or_else(bad)?, op),
            _ => return Err(bad()),
        };
        let values: Vec<String> = term[open + 1..close]
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect();
        return match op {
            "in" => Ok(LabelReq::In(key, values)),
            "notin" => Ok(LabelReq::NotIn(key, values)),
            _ => Err(bad()),
        };
    }
    Ok(LabelReq::Exists(valid_key(term).ok_or_else(bad)?))
}

/// A label key: non-empty, no whitespace or operator characters.
fn valid_key(key: &str) -> Option<String> {
    let key = key.trim();
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    ok.then(|| key.to_string())
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
        for term in input.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (path, value, eq) = if let Some((k, v)) = term.split_once("!=") {
                (k, v, false)
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (k, v, true)
            } else {
                return Err(SelectorError(term.to_string()));
            };
            let path = path.trim();
            if path.is_empty() {
                return Err(SelectorError(term.to_string()));
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
    fn malformed_label_selectors_are_rejected() {
        for sel in ["a in b", "a in (b", "=x", "a b c", "a foo (b)"] {
            assert!(LabelSelector::parse(sel).is_err(), "{sel}");
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
