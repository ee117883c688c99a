//! Label selectors, parsed as apimachinery's `labels.Parse` does
//! (k8s.io/apimachinery/pkg/labels/selector.go): its lexer, its recursive descent parser, its
//! key and value validation and its error messages word for word.
//!
//! `a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x,y)`, `a>1`, `a<1`,
//! comma-separated (all must hold). Keys are qualified names (`example.com/name`; `a/b/c` is
//! refused), values label values (`-web` is refused).

use super::SelectorError;

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// A parsed label selector; the empty selector selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    reqs: Vec<LabelReq>,
}

impl LabelSelector {
    /// Parses a selector with the grammar of apimachinery's `labels.Parse`; the error's
    /// [`SelectorError::problem`] is its message.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let reqs = LabelParser::new(input)
            .parse()
            .map_err(|problem| SelectorError::new("label", input, problem.to_string()))?;
        Ok(Self { reqs })
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Whether labels (`(key, value)` pairs) satisfy every requirement.
    pub fn matches(&self, labels: &[(String, String)]) -> bool {
        self.matches_by(|k| {
            labels
                .iter()
                .find(|(lk, _)| lk == k)
                .map(|(_, v)| v.as_str())
        })
    }

    /// Whether the labels `get` reads (a key's value, `None` when absent) satisfy every
    /// requirement.
    pub fn matches_by<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
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

/// What `labels.Parse` finds wrong, displayed in its words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Problem {
    /// A requirement that does not parse.
    #[error("unable to parse requirement: {0}")]
    Requirement(Box<Problem>),
    /// A token other than the ones the grammar allows here.
    #[error("found '{found}', expected: {expected}")]
    Unexpected {
        found: String,
        expected: &'static str,
    },
    /// `in` / `notin` not followed by `(` (apimachinery's message has no comma).
    #[error("found '{0}' expected: '('")]
    NoOpenPar(String),
    /// A key that is not a qualified name; the parser validates with no field path, and Go
    /// prints a nil path as "<nil>".
    #[error("<nil>: Invalid value: {key:?}: {}", problems.join("; "))]
    Key { key: String, problems: Vec<String> },
    /// Values that are not label values (or not integers for `gt` / `lt`): one as it is,
    /// several in `[a, b]`.
    #[error("{}", values_message(.0))]
    Values(Vec<String>),
}

fn values_message(errs: &[String]) -> String {
    match errs {
        [one] => one.clone(),
        _ => format!("[{}]", errs.join(", ")),
    }
}

fn unexpected(found: String, expected: &'static str) -> Problem {
    Problem::Unexpected { found, expected }
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

    fn parse(&mut self) -> Result<Vec<LabelReq>, Problem> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.lookahead(true);
            match tok {
                Tok::Identifier | Tok::DoesNotExist => {
                    let req = self
                        .requirement()
                        .map_err(|e| Problem::Requirement(Box::new(e)))?;
                    reqs.push(req);
                    let (t, l) = self.consume(true);
                    match t {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, l2) = self.lookahead(true);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(unexpected(l2, "identifier after ','"));
                            }
                        }
                        _ => return Err(unexpected(l, "',' or 'end of string'")),
                    }
                }
                Tok::End => return Ok(reqs),
                _ => {
                    return Err(unexpected(lit, "!, identifier, or 'end of string'"));
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<LabelReq, Problem> {
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

    fn key_and_inferred_operator(&mut self) -> Result<(String, Option<Op>), Problem> {
        let (mut tok, mut lit) = self.consume(true);
        let mut op = None;
        if tok == Tok::DoesNotExist {
            op = Some(Op::DoesNotExist);
            (tok, lit) = self.consume(true);
        }
        if tok != Tok::Identifier {
            return Err(unexpected(lit, "identifier"));
        }
        let errs = label_key_errors(&lit);
        if !errs.is_empty() {
            return Err(Problem::Key {
                key: lit,
                problems: errs,
            });
        }
        let (next, _) = self.lookahead(true);
        if matches!(next, Tok::End | Tok::Comma) && op.is_none() {
            op = Some(Op::Exists);
        }
        Ok((lit, op))
    }

    fn operator(&mut self) -> Result<Op, Problem> {
        let (tok, lit) = self.consume(false);
        Ok(match tok {
            Tok::In => Op::In,
            Tok::Equals => Op::Equals,
            Tok::DoubleEquals => Op::DoubleEquals,
            Tok::GreaterThan => Op::GreaterThan,
            Tok::LessThan => Op::LessThan,
            Tok::NotIn => Op::NotIn,
            Tok::NotEquals => Op::NotEquals,
            _ => return Err(unexpected(lit, BINARY_OPERATORS)),
        })
    }

    /// `( a, b )`: a sorted set; `()` is the set of the empty string.
    fn values(&mut self) -> Result<Vec<String>, Problem> {
        let (tok, lit) = self.consume(true);
        if tok != Tok::OpenPar {
            return Err(Problem::NoOpenPar(lit));
        }
        let (tok, lit) = self.lookahead(true);
        match tok {
            Tok::Identifier | Tok::Comma => {
                let set = self.identifiers()?;
                if self.consume(true).0 != Tok::ClosedPar {
                    return Err(unexpected(lit, "')'"));
                }
                Ok(set)
            }
            Tok::ClosedPar => {
                self.consume(true);
                Ok(vec![String::new()])
            }
            _ => Err(unexpected(lit, "',', ')' or identifier")),
        }
    }

    fn identifiers(&mut self) -> Result<Vec<String>, Problem> {
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
                        _ => return Err(unexpected(lit2, "',' or ')'")),
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
                _ => return Err(unexpected(lit, "',', or identifier")),
            }
        }
    }

    fn exact_value(&mut self) -> Result<Vec<String>, Problem> {
        if matches!(self.lookahead(true).0, Tok::End | Tok::Comma) {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.consume(true);
        if tok == Tok::Identifier {
            Ok(vec![lit])
        } else {
            Err(unexpected(lit, "identifier"))
        }
    }
}

/// `NewRequirement`: checks the values (label values; integers for `gt` / `lt`) and
/// aggregates the errors as apimachinery does (one as it is, several in `[a, b]`).
fn new_requirement(key: String, op: Op, values: Vec<String>) -> Result<LabelReq, Problem> {
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
    if !errs.is_empty() {
        return Err(Problem::Values(errs));
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
    fn label_selector_supports_every_operator() {
        let obj = labels(&[("app", "web"), ("tier", "front")]);
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
                Err(e) => assert_eq!(e.problem, want, "{sel}"),
                Ok(parsed) => panic!("{sel} parsed as {parsed:?}"),
            }
        }
        let key = LabelSelector::parse("-a=b")
            .expect_err("invalid key")
            .problem;
        assert_eq!(
            key,
            format!(
                "unable to parse requirement: <nil>: Invalid value: \"-a\": name part {LABEL_KEY_MSG}"
            )
        );
    }

    #[test]
    fn label_selectors_parse_sets_and_integers_as_apimachinery_does() {
        let obj = labels(&[("app", "web"), ("n", "5"), ("empty", "")]);
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
}
