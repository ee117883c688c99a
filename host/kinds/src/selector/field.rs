//! Field selectors, parsed as apimachinery's `fields.ParseSelector` does
//! (k8s.io/apimachinery/pkg/fields/selector.go): comma-separated terms `label=value`,
//! `label==value` or `label!=value`, split at the first operator, nothing trimmed; in a value,
//! `\,`, `\=` and `\\` stand for `,`, `=` and `\`, and an unescaped `,` or `=` is an error.
//!
//! Which labels a kind supports, and how their values are read, is the kind's business
//! (`crate::kinds::fields`): a parsed selector is only its terms.

use super::SelectorError;

/// One term: `field` equal (or not) to `value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field label (`status.phase`), as written.
    pub field: String,
    /// The value, unescaped.
    pub value: String,
    /// `=` / `==` (true) or `!=` (false).
    pub equal: bool,
}

/// A parsed field selector; the empty selector selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    reqs: Vec<FieldRequirement>,
}

/// The operators, longest first at each position (`==` before `=`, so no value starts
/// with `=`).
const OPERATORS: [(&str, bool); 3] = [("!=", false), ("==", true), ("=", true)];

impl FieldSelector {
    /// Parses a selector; the error's [`SelectorError::problem`] is apimachinery's message.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let err = |problem: String| SelectorError::new("field", input, problem);
        let mut terms = split_terms(input);
        // apimachinery sorts the terms before reading them: the first bad one in that order
        // is the one reported.
        terms.sort_unstable();
        let mut reqs = Vec::new();
        for term in terms.into_iter().filter(|t| !t.is_empty()) {
            let Some((field, equal, raw)) = split_term(term) else {
                return Err(err(format!(
                    "invalid selector: '{input}'; can't understand '{term}'"
                )));
            };
            reqs.push(FieldRequirement {
                field: field.to_owned(),
                value: unescape(raw).map_err(|e| err(e.to_string()))?,
                equal,
            });
        }
        Ok(Self { reqs })
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The terms, in apimachinery's (sorted) order.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.reqs
    }

    /// The terms, to rename a label to the one a kind's conversion maps it to.
    pub fn requirements_mut(&mut self) -> &mut [FieldRequirement] {
        &mut self.reqs
    }

    /// Whether every term holds, `value` reading a field label of the object (the empty
    /// string when it has none).
    pub fn matches_by(&self, value: impl Fn(&str) -> String) -> bool {
        self.reqs
            .iter()
            .all(|r| (value(&r.field) == r.value) == r.equal)
    }
}

/// The terms between commas not escaped by a backslash (escapes kept for [`unescape`]).
fn split_terms(input: &str) -> Vec<&str> {
    if input.is_empty() {
        return Vec::new();
    }
    let (mut terms, mut start, mut escaped) = (Vec::new(), 0, false);
    for (i, c) in input.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            ',' => {
                terms.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&input[start..]);
    terms
}

/// `label`, whether the operator is an equality, and the raw value: split at the first
/// operator (labels have no escapes).
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    term.char_indices().find_map(|(i, _)| {
        let rest = &term[i..];
        OPERATORS
            .iter()
            .find(|(op, _)| rest.starts_with(op))
            .map(|(op, equal)| (&term[..i], *equal, &rest[op.len()..]))
    })
}

/// What `UnescapeValue` finds wrong in a value, in its words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Problem {
    /// A backslash before anything but `\`, `,` or `=` (`None`: at the end).
    #[error("invalid field selector: invalid escape sequence: \\{}", .0.map(String::from).unwrap_or_default())]
    Escape(Option<char>),
    /// An unescaped `,` or `=`; Go prints the rune with %v: its code point.
    #[error("invalid field selector: unescaped character in value: {}", u32::from(*.0))]
    Unescaped(char),
}

/// The value a raw value stands for (`UnescapeValue`).
fn unescape(raw: &str) -> Result<String, Problem> {
    let mut out = String::with_capacity(raw.len());
    let mut escaped = false;
    for c in raw.chars() {
        if escaped {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(Problem::Escape(Some(c)));
            }
            out.push(c);
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            ',' | '=' => return Err(Problem::Unescaped(c)),
            _ => out.push(c),
        }
    }
    if escaped {
        return Err(Problem::Escape(None));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(input: &str) -> Vec<(String, String, bool)> {
        FieldSelector::parse(input)
            .unwrap_or_else(|e| panic!("{input}: {e}"))
            .requirements()
            .iter()
            .map(|r| (r.field.clone(), r.value.clone(), r.equal))
            .collect()
    }

    #[test]
    fn terms_split_at_the_first_operator_and_values_unescape() {
        let t = |f: &str, v: &str, eq: bool| (f.to_owned(), v.to_owned(), eq);
        assert_eq!(terms(""), []);
        assert_eq!(terms("a=b"), [t("a", "b", true)]);
        assert_eq!(terms("a==b"), [t("a", "b", true)]);
        assert_eq!(terms("a!=b"), [t("a", "b", false)]);
        assert_eq!(terms("a="), [t("a", "", true)]);
        assert_eq!(terms("b=2,a=1,,"), [t("a", "1", true), t("b", "2", true)]);
        assert_eq!(terms(r"a=x\,y\=z\\"), [t("a", r"x,y=z\", true)]);
        // Nothing is trimmed: the label keeps its space (and no kind supports it).
        assert_eq!(terms("a =b"), [t("a ", "b", true)]);
    }

    #[test]
    fn a_bad_field_selector_gets_the_apimachinery_message() {
        for (input, want) in [
            ("a", "invalid selector: 'a'; can't understand 'a'"),
            ("x=1,b", "invalid selector: 'x=1,b'; can't understand 'b'"),
            (
                "a=b=c",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                r"a=b\x",
                r"invalid field selector: invalid escape sequence: \x",
            ),
            (
                r"a=b\",
                r"invalid field selector: invalid escape sequence: \",
            ),
        ] {
            let e = FieldSelector::parse(input).expect_err(input);
            assert_eq!(e.problem, want, "{input}");
        }
    }
}
