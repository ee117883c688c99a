//! YAML as Kubernetes reads it: the one YAML reader of the workspace, for manifests (the `dir:`
//! source, the test API server's YAML bodies), `wisp test` fixtures and Wisp's config.
//!
//! kubectl and the API server read YAML with sigs.k8s.io/yaml, over go-yaml v2: YAML 1.1's
//! scalars, not YAML 1.2's core schema. So a plain `0644` is octal (420), `0x1F90` is hex,
//! `yes`/`no`/`on`/`off`/`y`/`n` (any case go-yaml accepts) are booleans, `<<` merge keys
//! merge, and a mapping with a duplicate key is read with the last one winning (kubectl 1.32
//! and 1.33 read such a file; the later value replaces the earlier whole). Quoted scalars stay
//! strings. A leading byte-order mark is ignored. The scalars this reads differently from a
//! YAML 1.2 reader are the table of this module's tests.
//!
//! Limits are raised for large manifest files (the reader's defaults stop at 1,024 documents);
//! what bounds the input is the caller's file-size limit, checked before reading.

use serde::de::DeserializeOwned;
use serde_json::Value;

/// A YAML text that does not parse, or does not read as the type asked for: the message on one
/// line, and where in the text it is when the reader knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}{}", .at.map(|(l, c)| format!(" (line {l}, column {c})")).unwrap_or_default())]
pub struct YamlError {
    message: String,
    /// Line and column, from 1.
    at: Option<(u64, u64)>,
}

impl YamlError {
    fn of(e: &serde_saphyr::Error) -> Self {
        let text = one_line(&e.to_string());
        let at = e.location().map(|l| (l.line(), l.column()));
        // The reader ends its message with the location; it is kept apart here.
        let message = match at {
            Some((l, c)) => text
                .strip_suffix(&format!(" at line {l}, column {c}"))
                .unwrap_or(&text)
                .to_owned(),
            None => text,
        };
        YamlError { message, at }
    }

    /// The message, without its location.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Line and column (from 1) of the problem, when known.
    pub fn location(&self) -> Option<(u64, u64)> {
        self.at
    }
}

/// The reader's options: Kubernetes' scalars, raised limits, no source snippet in messages.
fn options() -> serde_saphyr::Options {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = 1_000_000;
    budget.max_nodes = 50_000_000;
    budget.max_events = 200_000_000;
    budget.max_total_scalar_bytes = 1 << 30;
    let mut o = serde_saphyr::Options::default();
    o.budget = Some(budget);
    o.legacy_octal_numbers = true;
    o.strict_booleans = false;
    o.merge_keys = serde_saphyr::MergeKeyPolicy::Merge;
    o.duplicate_keys = serde_saphyr::DuplicateKeyPolicy::LastWins;
    o.with_snippet = false;
    o
}

fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// Every document of `text` (`---`-separated), each as JSON; an empty document is `null`.
pub fn documents(text: &str) -> Result<Vec<Value>, YamlError> {
    serde_saphyr::from_multiple_with_options(without_bom(text), options())
        .map_err(|e| YamlError::of(&e))
}

/// `text`, one document, read as `T`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    serde_saphyr::from_str_with_options(without_bom(text), options()).map_err(|e| YamlError::of(&e))
}

/// `text`, one document, read as `T`; an error names the field it is at (`plugins[0].queue.max`;
/// `.` or empty for the top level) beside the message and its location.
///
/// Read as sigs.k8s.io/yaml reads into a Go struct (client-go's kubeconfig, a component's
/// config): the type decides a plain scalar, so a string field given `y` or `0644` holds that
/// text, and a boolean field given `yes` holds true; a field of any JSON value reads it as a
/// manifest is read. Where the reader's own message for a wrong value is terse (`invalid u64`),
/// serde's wording is given instead (`invalid type: string "lots", expected u64`), with the
/// reader's location.
pub fn from_str_at_path<T: DeserializeOwned>(text: &str) -> Result<T, (String, YamlError)> {
    let mut path = String::new();
    let read =
        serde_saphyr::with_deserializer_from_str_with_options(without_bom(text), options(), |de| {
            serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
                path = e.path().to_string();
                e.into_inner()
            })
        });
    read.map_err(|e| {
        let mut err = YamlError::of(&e);
        // The same text through JSON: serde's words, when the error is at the same field.
        let as_json = from_str::<Value>(text)
            .ok()
            .and_then(|v| serde_path_to_error::deserialize::<_, T>(v).err());
        if let Some(j) = as_json
            && j.path().to_string() == path
        {
            err.message = one_line(&j.into_inner().to_string());
        }
        (path, err)
    })
}

/// A message on one line: its lines trimmed and joined by spaces.
fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The plain scalars a YAML 1.2 (core schema) reader reads differently from Kubernetes, each
    /// as kubectl reads it (go-yaml v2's resolver: resolve.go). What a `wisp test` fixture, a
    /// config and a `dir:` manifest mean by them is this, the same in all three.
    #[test]
    fn scalars_read_as_kubectl_reads_them_where_yaml_1_2_differs() {
        let table: &[(&str, Value)] = &[
            ("0644", json!(420)),
            ("0777", json!(511)),
            ("0x1F90", json!(8080)),
            ("yes", json!(true)),
            ("Yes", json!(true)),
            ("YES", json!(true)),
            ("no", json!(false)),
            ("on", json!(true)),
            ("off", json!(false)),
            ("y", json!(true)),
            ("n", json!(false)),
            // Quoted, every one is a string.
            ("'0644'", json!("0644")),
            ("\"yes\"", json!("yes")),
            ("'off'", json!("off")),
            // The same in both.
            ("true", json!(true)),
            ("10", json!(10)),
            ("1.5", json!(1.5)),
            ("~", Value::Null),
            ("100m", json!("100m")),
        ];
        for (scalar, want) in table {
            let v: Value = from_str(&format!("v: {scalar}\n")).unwrap();
            assert_eq!(&v["v"], want, "v: {scalar}");
            let docs = documents(&format!("v: {scalar}\n---\nw: 1\n")).unwrap();
            assert_eq!(&docs[0]["v"], want, "as a manifest: v: {scalar}");
        }
    }

    #[test]
    fn merge_keys_merge_and_a_duplicate_key_is_read_with_the_last_one_winning() {
        let v: Value =
            from_str("d: &d {cpu: 1, memory: 2}\nl:\n  <<: *d\n  memory: 3\nk: a\nk: b\n").unwrap();
        assert_eq!(v["l"], json!({"cpu": 1, "memory": 3}));
        assert_eq!(v["k"], "b");
    }

    #[test]
    fn a_byte_order_mark_is_ignored_and_errors_are_one_line() {
        let v: Value = from_str("\u{feff}a: 1\n").unwrap();
        assert_eq!(v, json!({"a": 1}));
        let e = from_str::<Value>("a: [1\n").unwrap_err();
        assert!(
            !e.message().contains('\n') && !e.message().is_empty(),
            "{e}"
        );
        assert!(documents("a: 1\n---\nb: [\n").is_err());
    }

    /// Read into a type, the type decides a plain scalar, as sigs.k8s.io/yaml reads into a Go
    /// struct: a string field keeps `y` and `0644` as written, a boolean field reads `yes`.
    #[test]
    fn a_typed_field_decides_its_plain_scalar() {
        #[derive(serde::Deserialize, Debug)]
        struct T {
            s: String,
            o: String,
            b: bool,
            any: Value,
        }
        let t: T = from_str_at_path(
            "s: y
o: 0644
b: yes
any: yes
",
        )
        .unwrap();
        assert_eq!((t.s.as_str(), t.o.as_str(), t.b), ("y", "0644", true));
        assert_eq!(t.any, json!(true), "a JSON field reads as a manifest does");
        let (path, e) = from_str_at_path::<T>(
            "s: a
o: b
b: lots
any: 1
",
        )
        .unwrap_err();
        assert_eq!(path, "b");
        assert_eq!(
            e.to_string(),
            "invalid type: string \"lots\", expected a boolean (line 3, column 4)"
        );
    }
}
