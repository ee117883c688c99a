//! Kubernetes label selectors: `a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x,y)`,
//! comma-separated (all must match).

/// A parsed label selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A selector that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid label selector {selector:?}: {problem}")]
pub struct SelectorError {
    /// The selector as given.
    pub selector: String,
    /// What is wrong.
    pub problem: String,
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn valid_value(v: &str) -> bool {
    v.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0usize, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

impl LabelSelector {
    /// Parses a selector; the empty string selects everything.
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let err = |problem: String| SelectorError {
            selector: selector.to_owned(),
            problem,
        };
        let mut requirements = Vec::new();
        if selector.trim().is_empty() {
            return Ok(Self { requirements });
        }
        for part in split_top_level(selector) {
            let part = part.trim();
            let req = if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                Requirement::Equals(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some(k) = part.strip_prefix('!') {
                Requirement::NotExists(k.trim().to_owned())
            } else if let Some((k, rest)) = part
                .split_once(" notin ")
                .or_else(|| part.split_once(" in "))
            {
                let negate = part.contains(" notin ");
                let rest = rest.trim();
                let inner = rest
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| err(format!("{part:?}: expected a parenthesised list")))?;
                let values: Vec<String> = inner.split(',').map(|v| v.trim().to_owned()).collect();
                if values.iter().any(|v| !valid_value(v)) {
                    return Err(err(format!("{part:?}: invalid value")));
                }
                let k = k.trim().to_owned();
                if negate {
                    Requirement::NotIn(k, values)
                } else {
                    Requirement::In(k, values)
                }
            } else {
                Requirement::Exists(part.to_owned())
            };
            let (key, value) = match &req {
                Requirement::Equals(k, v) | Requirement::NotEquals(k, v) => (k, Some(v)),
                Requirement::Exists(k)
                | Requirement::NotExists(k)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _) => (k, None),
            };
            if !valid_key(key) {
                return Err(err(format!("{part:?}: invalid key {key:?}")));
            }
            if value.is_some_and(|v| !valid_value(v)) {
                return Err(err(format!("{part:?}: invalid value")));
            }
            requirements.push(req);
        }
        Ok(Self { requirements })
    }

    /// Whether labels (sorted by key) satisfy every requirement.
    pub fn matches(&self, labels: &[(String, String)]) -> bool {
        let get = |k: &str| {
            labels
                .iter()
                .find(|(lk, _)| lk == k)
                .map(|(_, v)| v.as_str())
        };
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::NotExists(k) => get(k).is_none(),
            Requirement::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            Requirement::NotIn(k, vs) => get(k).is_none_or(|v| vs.iter().all(|x| x != v)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn every_operator_matches_like_kubernetes() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app!=db", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app in (web,db)", true),
            ("app notin (web,db)", false),
            ("missing notin (x)", true),
            ("app=web,tier=back", false),
            ("app in (db, web),tier", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&l),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn a_malformed_selector_is_refused_with_the_part_at_fault() {
        let e = LabelSelector::parse("app in web").unwrap_err();
        assert!(e.to_string().contains("parenthesised"), "{e}");
        let e = LabelSelector::parse("a b=c").unwrap_err();
        assert!(e.to_string().contains("invalid key"), "{e}");
    }
}
