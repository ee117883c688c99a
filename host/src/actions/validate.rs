//! What a plugin names in an action, checked as the API server would check it, before any grant
//! is looked at or any URL is built: names as RFC 1123 DNS subdomains (or, for the kinds whose
//! names are only path segments, with no `/`, `%`, `?`, `#`, control characters and not `.` or
//! `..`), namespaces as RFC 1123 DNS labels, label and annotation keys as qualified names, label
//! values, `apiVersion` (`v1`, `group/version`) and kind shapes. Each error names the field and
//! its value (cut to [`SHOWN`] characters).

use super::target::Target;
use wisp_kinds::{NameRule, is_dns1123_label, is_dns1123_subdomain, is_name_part};

/// Most characters of a refused value an error shows.
pub const SHOWN: usize = 64;

/// `value` quoted, cut to [`SHOWN`] characters.
pub fn shown(value: &str) -> String {
    if value.chars().count() <= SHOWN {
        format!("{value:?}")
    } else {
        let cut: String = value.chars().take(SHOWN).collect();
        format!("{cut:?}... ({} bytes)", value.len())
    }
}

/// What is malformed in an action a plugin asks for: the field and its value (shown cut to
/// [`SHOWN`] characters). Refused before any grant is looked at; never retryable as it is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidAction {
    /// A label or annotation key whose prefix is not a DNS subdomain.
    #[error("key {}: prefix must be a DNS subdomain (lower case, at most 253 characters)", shown(.0))]
    KeyPrefix(String),
    /// A label or annotation key whose name part is malformed.
    #[error(
        "key {}: name must be 1 to 63 characters [A-Za-z0-9_.-], starting and ending alphanumeric",
        shown(.0)
    )]
    KeyName(String),
    /// A label value that is not one.
    #[error(
        "label {}: value {} must be at most 63 characters [A-Za-z0-9_.-], starting and ending alphanumeric",
        shown(key),
        shown(value)
    )]
    LabelValue {
        /// The label's key.
        key: String,
        /// The value.
        value: String,
    },
    /// An Event reason outside a Condition reason's shape.
    #[error(
        "reason {} must be 1 to {REASON_MAX} characters [A-Za-z0-9_,:], starting with a letter and ending alphanumeric or '_' (as a Condition's reason, e.g. \"PolicyViolation\")",
        shown(.0)
    )]
    EventReason(String),
    /// An apiVersion that is neither `version` nor `group/version`.
    #[error(
        "apiVersion {} must be `version` or `group/version` (a DNS subdomain and a DNS label)",
        shown(.0)
    )]
    ApiVersion(String),
    /// A kind that is not one.
    #[error("kind {} must be 1 to 63 letters and digits, starting upper case", shown(.0))]
    Kind(String),
    /// A namespace that is not a DNS label.
    #[error(
        "namespace {} must be a DNS label (1 to 63 characters [a-z0-9-], alphanumeric at both ends)",
        shown(.0)
    )]
    Namespace(String),
    /// A name outside its kind's rule (`rule` says it in words).
    #[error("name {} must be {rule}", shown(name))]
    Name {
        /// The name.
        name: String,
        /// The kind's rule, in words.
        rule: &'static str,
    },
    /// A metadata patch with no label and no annotation.
    #[error("nothing to patch: no labels and no annotations")]
    NothingToPatch,
    /// Annotations over the API server's total.
    #[error("annotations total more than 256 KiB")]
    AnnotationsTooLarge,
    /// A manifest over the host's cap (bytes).
    #[error("the manifest is over {0} bytes")]
    ManifestTooLarge(usize),
    /// A manifest that is not JSON.
    #[error("the manifest is not JSON: {0}")]
    ManifestJson(#[source] serde_json::Error),
    /// A manifest that is not a JSON object.
    #[error("the manifest must be a JSON object")]
    ManifestNotObject,
    /// A manifest without a field it needs.
    #[error("the manifest needs a non-empty string {0}")]
    ManifestField(&'static str),
}

/// A qualified name (`[prefix/]name`), as label and annotation keys must be.
pub fn check_key(key: &str) -> Result<(), InvalidAction> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !is_dns1123_subdomain(p)
    {
        return Err(InvalidAction::KeyPrefix(key.to_owned()));
    }
    if !is_name_part(name) {
        return Err(InvalidAction::KeyName(key.to_owned()));
    }
    Ok(())
}

/// A label value: empty, or as a qualified name's name part.
pub fn check_label_value(key: &str, v: &str) -> Result<(), InvalidAction> {
    if v.is_empty() || is_name_part(v) {
        Ok(())
    } else {
        Err(InvalidAction::LabelValue {
            key: key.to_owned(),
            value: v.to_owned(),
        })
    }
}

/// Most bytes of an Event's `reason`: the API server's `ReasonLengthLimit`
/// (`pkg/apis/core/validation/events.go`).
pub const REASON_MAX: usize = 128;

/// An Event's `reason`. The API server requires it and caps it at [`REASON_MAX`] bytes (for
/// Events with an `eventTime`; client-go's recorders send every reason they are given). Its
/// characters are those of the API's one rule for a machine-readable reason, a Condition's
/// (`metav1.Condition`: `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`), which is what client-go's
/// callers pass (`FailedScheduling`, `BackOff`): no space, newline or control character, so a
/// reason cannot forge rows in `kubectl get events` or `kubectl describe`.
pub fn check_event_reason(reason: &str) -> Result<(), InvalidAction> {
    let b = reason.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':');
    let ok = (1..=REASON_MAX).contains(&b.len())
        && b[0].is_ascii_alphabetic()
        && b.iter().all(inner)
        && b.last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_');
    if ok {
        return Ok(());
    }
    Err(InvalidAction::EventReason(reason.to_owned()))
}

/// `v1` or `group/version`: the group a DNS subdomain, the version a DNS label.
fn is_api_version(s: &str) -> bool {
    match s.split_once('/') {
        Some((g, v)) => is_dns1123_subdomain(g) && is_dns1123_label(v),
        None => is_dns1123_label(s),
    }
}

/// A kind: 1 to 63 ASCII letters and digits, starting with an upper-case letter.
fn is_kind(s: &str) -> bool {
    s.len() <= 63
        && s.bytes().next().is_some_and(|b| b.is_ascii_uppercase())
        && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Checks every field of a target; the error names the first bad field and its value.
pub fn check_target(t: &Target) -> Result<(), InvalidAction> {
    if !is_api_version(&t.api_version) {
        return Err(InvalidAction::ApiVersion(t.api_version.clone()));
    }
    if !is_kind(&t.kind) {
        return Err(InvalidAction::Kind(t.kind.clone()));
    }
    if let Some(ns) = &t.namespace
        && !is_dns1123_label(ns)
    {
        return Err(InvalidAction::Namespace(ns.clone()));
    }
    let rule = wisp_kinds::name_rule(wisp_kinds::api::group_of(&t.api_version), &t.kind);
    if !rule.accepts(&t.name) {
        let rule = match rule {
            NameRule::Label => "a DNS label (1 to 63 characters [a-z0-9-])",
            NameRule::Dns1035 => {
                "a DNS-1035 label (1 to 63 characters [a-z0-9-], starting with a letter)"
            }
            NameRule::Subdomain => {
                "a DNS subdomain (at most 253 characters [a-z0-9-.], alphanumeric at both ends)"
            }
            NameRule::PathSegment => {
                "a path segment (no '/', '%', '?', '#', control characters, not '.' or '..')"
            }
        };
        return Err(InvalidAction::Name {
            name: t.name.clone(),
            rule,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(api_version: &str, kind: &str, ns: Option<&str>, name: &str) -> Target {
        Target {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: ns.map(Into::into),
            name: name.into(),
        }
    }

    #[test]
    fn forged_paths_and_queries_in_names_are_refused_naming_the_field() {
        for name in [
            "x/../../../../kube-system/pods/coredns",
            "x?fieldManager=kube-controller-manager&dryRun=All",
            "x#",
            "..",
            ".",
            "x%2F..",
            "a\nb",
            "UPPER",
            "",
            &"a".repeat(254),
        ] {
            let e = check_target(&t("v1", "Pod", Some("shop"), name))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("name "), "{name:?}: {e}");
            let e = check_target(&t(
                "rbac.authorization.k8s.io/v1",
                "Role",
                Some("shop"),
                name,
            ));
            assert!(e.is_err() || name == "UPPER", "{name:?}");
        }
        assert!(
            check_target(&t(
                "rbac.authorization.k8s.io/v1",
                "ClusterRole",
                None,
                "system:controller:x"
            ))
            .is_ok()
        );
        assert!(check_target(&t("v1", "Pod", Some("shop"), "web-1.a")).is_ok());
        assert!(check_target(&t("v1", "Namespace", None, "a.b")).is_err());
    }

    #[test]
    fn namespaces_api_versions_and_kinds_have_their_shapes() {
        for ns in ["shop/../kube-system", "Shop", "a.b", "-a", &"n".repeat(64)] {
            let e = check_target(&t("v1", "Pod", Some(ns), "p"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("namespace "), "{e}");
        }
        for av in ["", "v1/", "/v1", "apps/v1/x", "a?b/v1", "apps/V1"] {
            let e = check_target(&t(av, "Pod", None, "p"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("apiVersion "), "{e}");
        }
        for kind in ["", "pod", "Pod/x", "Po d", "Pod?"] {
            let e = check_target(&t("v1", kind, None, "p"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("kind "), "{e}");
        }
        assert!(check_target(&t("apps/v1", "Deployment", Some("a"), "d")).is_ok());
    }

    #[test]
    fn event_reasons_are_machine_readable_and_at_most_128_bytes() {
        for ok in [
            "R",
            "PolicyViolation",
            "Failed_Create",
            "a:b,c",
            &"R".repeat(128),
        ] {
            assert!(check_event_reason(ok).is_ok(), "{ok:?}");
        }
        for bad in [
            "",
            "Bad\nReason",
            "Bad\r",
            "Tab\there",
            "has space",
            "latest-tag",
            "9Lives",
            "Ends,",
            "Ünicode",
            "Nul\0",
            &"R".repeat(129),
        ] {
            let e = check_event_reason(bad).unwrap_err().to_string();
            assert!(e.starts_with("reason \""), "{bad:?}: {e}");
            assert!(!e.contains('\n'), "the error quotes the value: {e}");
        }
    }

    #[test]
    fn errors_show_at_most_a_cut_of_the_value() {
        let long = "x/".repeat(5000);
        let e = check_target(&t("v1", "Pod", Some("a"), &long))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 300, "{}", e.len());
        assert!(e.contains("(10000 bytes)"), "{e}");
    }

    #[test]
    fn keys_and_label_values_are_qualified_names() {
        for ok in ["a", "example.com/a_b.c-d", "A9"] {
            assert!(check_key(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a/",
            "/a",
            "UPPER.com/x",
            "x/y/z",
            &"k".repeat(64),
        ] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
        assert!(check_label_value("k", "").is_ok());
        assert!(check_label_value("k", "a.b_c-D").is_ok());
        assert!(check_label_value("k", "a b").is_err());
        assert!(check_label_value("k", &"v".repeat(64)).is_err());
    }
}
