//! Label and field selectors, parsed from the `labelSelector` / `fieldSelector` query parameters
//! with the grammar of apimachinery's `labels.Parse` and `fields.ParseSelector`.

use serde_json::Value;

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

/// A parsed field selector; the empty selector matches everything.
///
/// Any dotted path is accepted (`metadata.name`, `metadata.namespace`, `spec.nodeName`,
/// `status.phase`, ...); a missing field compares as the empty string, as Kubernetes does for
/// `metadata.namespace` of cluster-scoped objects.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FieldSelector {
    /// (path, value, wanted equal)
    reqs: Vec<(String, String, bool)>,
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
        Ok(Self { reqs })
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether every requirement holds for `obj`.
    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|(path, want, eq)| {
            let mut cur = Some(obj);
            for part in path.split('.') {
                cur = cur.and_then(|v| v.get(part));
            }
            let have = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (have == *want) == *eq
        })
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
}

impl Filter {
    /// The filter a list or watch request asks for: its namespace and its `labelSelector` and
    /// `fieldSelector` parameters.
    pub(crate) fn from_request(
        target: &super::http::Target,
        query: &super::http::Query,
    ) -> Result<Self, SelectorError> {
        Self::new(
            target.namespace.clone(),
            query.get("labelSelector").map(String::as_str),
            query.get("fieldSelector").map(String::as_str),
        )
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
        ns_ok && self.labels.matches(obj) && self.fields.matches(obj)
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
