//! What a real API server checks on create and update before it stores an object, with its
//! words: each [`FieldError`] as apimachinery's `field.Error` renders it, and [`message`] as the
//! 422 Invalid Status message aggregates them (`<Kind> "<name>" is invalid: <errors>`).
//!
//! Every kind: `metadata.name` (or `generateName`) present and following the kind's
//! [`wisp_kinds::NameRule`], the namespace a DNS-1123 label, label keys and values,
//! annotation keys and their total size. Built-ins: a Pod needs containers with names and
//! images; a Deployment a selector matching its template's labels and containers; a Service
//! ports (unless ExternalName or headless); ConfigMap and Secret keys. On update, the data of an
//! immutable ConfigMap or Secret, a Secret's type and a Deployment's selector may not change,
//! nor what [`update_errors`] lists for Pods, Services, Jobs, StatefulSets and claims.

use serde_json::{Map, Value};

use wisp_kinds::{NameRule, is_dns1123_label, is_dns1123_subdomain, is_name_part, name_rule};

mod update;

pub use update::{POD_UPDATE, PVC_UPDATE, STATEFUL_SET_UPDATE};

/// One field error, as apimachinery's `field.Error` renders it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `FieldValueInvalid`, `FieldValueRequired`, ...
    pub reason: &'static str,
    /// The field path, e.g. `metadata.labels`.
    pub field: String,
    /// Everything after `field: `.
    pub body: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.body)
    }
}

impl FieldError {
    /// `field: Required value[: detail]`.
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let body = if detail.is_empty() {
            "Required value".to_string()
        } else {
            format!("Required value: {detail}")
        };
        Self {
            reason: "FieldValueRequired",
            field: field.into(),
            body,
        }
    }

    /// `field: Invalid value: "value": detail`.
    pub fn invalid(field: impl Into<String>, value: &str, detail: &str) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            body: format!("Invalid value: {value:?}: {detail}"),
        }
    }

    /// `field: Forbidden: detail`.
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.into(),
            body: format!("Forbidden: {detail}"),
        }
    }

    /// `field: Too long: must have at most max bytes`.
    pub fn too_long(field: impl Into<String>, max: usize) -> Self {
        Self {
            reason: "FieldValueTooLong",
            field: field.into(),
            body: format!("Too long: must have at most {max} bytes"),
        }
    }
}

const DNS1123_LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1123_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1035_LABEL: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";
const QUALIFIED_NAME: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const CONFIG_KEY: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

/// Largest total size of an object's annotations.
pub const MAX_ANNOTATIONS: usize = 256 * 1024;

/// Errors of a qualified name (`prefix/name`), as `IsQualifiedName` words them.
fn qualified_name(field: &str, key: &str) -> Vec<FieldError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let mut errs = Vec::new();
    if name.is_empty() {
        errs.push(FieldError::invalid(
            field,
            key,
            "name part must be non-empty",
        ));
    } else if name.len() > 63 {
        errs.push(FieldError::invalid(
            field,
            key,
            "name part must be no more than 63 characters",
        ));
    } else if !is_name_part(name) {
        errs.push(FieldError::invalid(field, key, QUALIFIED_NAME));
    }
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            errs.push(FieldError::invalid(
                field,
                key,
                "prefix part must be non-empty",
            ));
        } else if !is_dns1123_subdomain(prefix) {
            errs.push(FieldError::invalid(
                field,
                key,
                &format!("prefix part {DNS1123_SUBDOMAIN}"),
            ));
        }
    }
    errs
}

fn string_map<'a>(obj: &'a Value, pointer: &str) -> Option<&'a Map<String, Value>> {
    obj.pointer(pointer).and_then(Value::as_object)
}

fn labels(field: &str, map: Option<&Map<String, Value>>, errs: &mut Vec<FieldError>) {
    for (key, value) in map.into_iter().flatten() {
        errs.extend(qualified_name(field, key));
        let value = value.as_str().unwrap_or("");
        if value.len() > 63 {
            errs.push(FieldError::invalid(
                field,
                value,
                "must be no more than 63 characters",
            ));
        } else if !value.is_empty() && !is_name_part(value) {
            errs.push(FieldError::invalid(field, value, LABEL_VALUE));
        }
    }
}

const PATH_SEGMENT: &str =
    "may not contain '/', '%', '?', '#', spaces or control characters, nor be '.' or '..'";

/// The message of `rule` for a name that breaks it.
fn rule_detail(rule: NameRule) -> &'static str {
    match rule {
        NameRule::Subdomain => DNS1123_SUBDOMAIN,
        NameRule::Label => DNS1123_LABEL,
        NameRule::Dns1035 => DNS1035_LABEL,
        NameRule::PathSegment => PATH_SEGMENT,
    }
}

fn metadata(group: &str, kind: &str, obj: &Value, errs: &mut Vec<FieldError>) {
    let meta = obj.get("metadata");
    let text = |f: &str| meta.and_then(|m| m.get(f)).and_then(Value::as_str);
    let rule = name_rule(group, kind);
    if let Some(prefix) = text("generateName").filter(|g| !g.is_empty()) {
        // A prefix may end with '-': checked as if it ended with 'a', as apimachinery does.
        let masked = match prefix.strip_suffix('-') {
            Some(stem) => format!("{stem}a"),
            None => prefix.to_string(),
        };
        if !rule.accepts(&masked) {
            errs.push(FieldError::invalid(
                "metadata.generateName",
                prefix,
                rule_detail(rule),
            ));
        }
    }
    match text("name").filter(|n| !n.is_empty()) {
        None => {
            if text("generateName").is_none_or(str::is_empty) {
                errs.push(FieldError::required(
                    "metadata.name",
                    "name or generateName is required",
                ));
            }
        }
        Some(name) => {
            let max = rule.max_len();
            if name.len() > max {
                errs.push(FieldError::invalid(
                    "metadata.name",
                    name,
                    &format!("must be no more than {max} characters"),
                ));
            } else if !rule.accepts(name) {
                errs.push(FieldError::invalid(
                    "metadata.name",
                    name,
                    rule_detail(rule),
                ));
            }
        }
    }
    if let Some(ns) = text("namespace").filter(|n| !n.is_empty())
        && !is_dns1123_label(ns)
    {
        errs.push(FieldError::invalid("metadata.namespace", ns, DNS1123_LABEL));
    }
    labels("metadata.labels", string_map(obj, "/metadata/labels"), errs);
    let annotations = string_map(obj, "/metadata/annotations");
    let mut total = 0;
    for (key, value) in annotations.into_iter().flatten() {
        errs.extend(qualified_name(
            "metadata.annotations",
            &key.to_ascii_lowercase(),
        ));
        total += key.len() + value.as_str().map_or(0, str::len);
    }
    if total > MAX_ANNOTATIONS {
        errs.push(FieldError::too_long(
            "metadata.annotations",
            MAX_ANNOTATIONS,
        ));
    }
}

fn containers(path: &str, spec: Option<&Value>, errs: &mut Vec<FieldError>) {
    let list = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array);
    match list {
        None => errs.push(FieldError::required(format!("{path}.containers"), "")),
        Some(list) if list.is_empty() => {
            errs.push(FieldError::required(format!("{path}.containers"), ""))
        }
        Some(list) => {
            for (i, c) in list.iter().enumerate() {
                let at = format!("{path}.containers[{i}]");
                match c.get("name").and_then(Value::as_str).unwrap_or("") {
                    "" => errs.push(FieldError::required(format!("{at}.name"), "")),
                    name if !is_dns1123_label(name) => errs.push(FieldError::invalid(
                        format!("{at}.name"),
                        name,
                        DNS1123_LABEL,
                    )),
                    _ => {}
                }
                if c.get("image")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
                {
                    errs.push(FieldError::required(format!("{at}.image"), ""));
                }
            }
        }
    }
}

fn data_keys(field: &str, obj: &Value, errs: &mut Vec<FieldError>) {
    for key in string_map(obj, &format!("/{field}"))
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
    {
        let ok = !key.is_empty()
            && key.len() <= 253
            && key
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'));
        if !ok {
            errs.push(FieldError::invalid(
                format!("{field}[{key}]"),
                key,
                CONFIG_KEY,
            ));
        }
    }
}

/// The checks of one built-in kind beyond metadata.
fn kind_rules(group: &str, kind: &str, obj: &Value, errs: &mut Vec<FieldError>) {
    match (group, kind) {
        ("", "Pod") => containers("spec", obj.get("spec"), errs),
        ("", "ConfigMap") => {
            data_keys("data", obj, errs);
            data_keys("binaryData", obj, errs);
        }
        ("", "Secret") => {
            data_keys("data", obj, errs);
            data_keys("stringData", obj, errs);
        }
        ("", "Service") => {
            let spec = obj.get("spec");
            let field = |f: &str| spec.and_then(|s| s.get(f)).and_then(Value::as_str);
            let ports = spec
                .and_then(|s| s.get("ports"))
                .and_then(Value::as_array)
                .is_some_and(|p| !p.is_empty());
            if !ports && field("type") != Some("ExternalName") && field("clusterIP") != Some("None")
            {
                errs.push(FieldError::required("spec.ports", ""));
            }
        }
        (
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration",
        ) => webhooks(obj, errs),
        ("apps", "Deployment") => {
            let spec = obj.get("spec");
            let selector = spec.and_then(|s| s.get("selector"));
            let template = spec.and_then(|s| s.get("template"));
            match selector
                .and_then(|s| s.get("matchLabels"))
                .and_then(Value::as_object)
            {
                None if selector.and_then(|s| s.get("matchExpressions")).is_none() => {
                    errs.push(FieldError::required("spec.selector", ""))
                }
                Some(wanted) => {
                    let have = template.and_then(|t| t.pointer("/metadata/labels"));
                    let matches = wanted
                        .iter()
                        .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v));
                    if !matches {
                        let shown = have.map_or_else(|| "null".to_string(), Value::to_string);
                        errs.push(FieldError {
                            reason: "FieldValueInvalid",
                            field: "spec.template.metadata.labels".into(),
                            body: format!(
                                "Invalid value: {shown}: `selector` does not match template `labels`"
                            ),
                        });
                    }
                }
                None => {}
            }
            containers(
                "spec.template.spec",
                template.and_then(|t| t.get("spec")),
                errs,
            );
        }
        _ => {}
    }
}

/// The webhooks of a webhook configuration (admissionregistration/validation.go, v1): a
/// `sideEffects` of `None` or `NoneOnDryRun`, `admissionReviewVersions`, exactly one of
/// `clientConfig.url` and `clientConfig.service`, an `https` URL. And, this server's own
/// refusal, no `matchConditions`: it does not evaluate CEL, and calling a webhook its conditions
/// exclude (or skipping one they select) would pass a test a real server fails.
fn webhooks(obj: &Value, errs: &mut Vec<FieldError>) {
    let list = obj.get("webhooks").and_then(Value::as_array);
    for (i, w) in list.into_iter().flatten().enumerate() {
        let path = format!("webhooks[{i}]");
        match w.get("sideEffects").and_then(Value::as_str) {
            None => errs.push(FieldError::required(format!("{path}.sideEffects"), "")),
            Some("None" | "NoneOnDryRun") => {}
            Some(other) => errs.push(FieldError {
                reason: "FieldValueNotSupported",
                field: format!("{path}.sideEffects"),
                body: format!(
                    "Unsupported value: {other:?}: supported values: \"None\", \"NoneOnDryRun\""
                ),
            }),
        }
        let versions = w.get("admissionReviewVersions").and_then(Value::as_array);
        if versions.is_none_or(|v| v.is_empty()) {
            errs.push(FieldError::required(
                format!("{path}.admissionReviewVersions"),
                "must specify one of v1, v1beta1",
            ));
        }
        let client = w.get("clientConfig");
        let url = client.and_then(|c| c.get("url")).and_then(Value::as_str);
        let service = client
            .and_then(|c| c.get("service"))
            .filter(|s| !s.is_null());
        match (url, service) {
            (Some(_), Some(_)) | (None, None) => errs.push(FieldError::required(
                format!("{path}.clientConfig"),
                "exactly one of url or service is required",
            )),
            (Some(url), None) if !url.starts_with("https://") => errs.push(FieldError::invalid(
                format!("{path}.clientConfig.url"),
                url,
                "'https' is the only allowed URL scheme",
            )),
            _ => {}
        }
        if w.get("matchConditions")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty())
        {
            errs.push(FieldError::forbidden(
                format!("{path}.matchConditions"),
                "not supported by the test API server (it does not evaluate CEL)",
            ));
        }
    }
}

const IMMUTABLE_WHEN_SET: &str = "field is immutable when `immutable` is set";

/// What an update may not change, for the built-ins with immutable fields: the data of an
/// immutable ConfigMap or Secret (and the flag itself), a Secret's type, the selector of a
/// Deployment, ReplicaSet or DaemonSet, a Job's selector and template, a Pod's spec but for
/// images and a few fields, a Service's cluster IP, a StatefulSet's spec but for replicas,
/// template and a few fields, a PersistentVolumeClaim's spec but for a bound claim's storage
/// request.
pub fn update_errors(group: &str, kind: &str, old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let forbidden = FieldError::forbidden;
    let immutable = |o: &Value| o.get("immutable").and_then(Value::as_bool) == Some(true);
    match (group, kind) {
        ("", "ConfigMap" | "Secret") => {
            if immutable(old) {
                if !immutable(new) {
                    errs.push(forbidden("immutable", IMMUTABLE_WHEN_SET));
                }
                let fields: &[&str] = if kind == "ConfigMap" {
                    &["data", "binaryData"]
                } else {
                    &["data"]
                };
                for field in fields {
                    if old.get(*field) != new.get(*field) {
                        errs.push(forbidden(field, IMMUTABLE_WHEN_SET));
                    }
                }
            }
            if kind == "Secret" {
                let kind_of = |o: &Value| {
                    o.get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("Opaque")
                        .to_string()
                };
                if kind_of(old) != kind_of(new) {
                    errs.push(FieldError::invalid(
                        "type",
                        &kind_of(new),
                        "field is immutable",
                    ));
                }
            }
        }
        ("", "Pod") => update::pod(old, new, &mut errs),
        ("", "Service") => update::service(old, new, &mut errs),
        ("", "PersistentVolumeClaim") => update::persistent_volume_claim(old, new, &mut errs),
        ("apps", "StatefulSet") => update::stateful_set(old, new, &mut errs),
        ("apps", "ReplicaSet" | "DaemonSet") => update::immutable("selector", old, new, &mut errs),
        ("batch", "Job") => {
            update::immutable("selector", old, new, &mut errs);
            update::immutable("template", old, new, &mut errs);
        }
        ("apps", "Deployment") => {
            let selector = |o: &Value| o.pointer("/spec/selector").cloned();
            if selector(old) != selector(new) {
                errs.push(FieldError {
                    reason: "FieldValueInvalid",
                    field: "spec.selector".into(),
                    body: format!(
                        "Invalid value: {}: field is immutable",
                        selector(new).unwrap_or(Value::Null)
                    ),
                });
            }
        }
        _ => {}
    }
    errs
}

/// The 422 Invalid Status message for `errs`: one error alone, several in brackets; the kind
/// qualified by its group (`Deployment.apps "web" is invalid: ...`).
pub fn message(group: &str, kind: &str, name: &str, errs: &[FieldError]) -> String {
    let rendered: Vec<String> = errs.iter().map(FieldError::to_string).collect();
    let aggregate = if rendered.len() == 1 {
        rendered[0].clone()
    } else {
        format!("[{}]", rendered.join(", "))
    };
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    format!("{qualified} {name:?} is invalid: {aggregate}")
}

/// The field errors of `obj` (metadata for every kind, the rules of common built-ins).
pub fn field_errors(group: &str, kind: &str, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    metadata(group, kind, obj, &mut errs);
    kind_rules(group, kind, obj, &mut errs);
    errs
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn errs(group: &str, kind: &str, obj: Value) -> Vec<String> {
        field_errors(group, kind, &obj)
            .iter()
            .map(FieldError::to_string)
            .collect()
    }

    #[test]
    fn names_follow_the_kind_rule() {
        let e = errs("", "ConfigMap", json!({"metadata": {"name": "Bad_Name"}}));
        assert_eq!(e.len(), 1);
        assert!(e[0].starts_with(
            "metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"
        ));
        assert_eq!(
            errs("", "ConfigMap", json!({"metadata": {}})),
            ["metadata.name: Required value: name or generateName is required"]
        );
        assert!(errs("", "ConfigMap", json!({"metadata": {"generateName": "x-"}})).is_empty());
        let e = errs(
            "",
            "ConfigMap",
            json!({"metadata": {"generateName": "X_-"}}),
        );
        assert!(
            e[0].starts_with("metadata.generateName: Invalid value: \"X_-\""),
            "{e:?}"
        );
        let e = errs(
            "",
            "Service",
            json!({"metadata": {"name": "1web"}, "spec": {"clusterIP": "None"}}),
        );
        assert!(e[0].contains("DNS-1035"), "{e:?}");
        assert!(
            errs(
                "rbac.authorization.k8s.io",
                "ClusterRole",
                json!({"metadata": {"name": "system:controller:x"}})
            )
            .is_empty()
        );
    }

    #[test]
    fn labels_and_annotations_are_qualified_names() {
        let e = errs(
            "",
            "ConfigMap",
            json!({"metadata": {"name": "a", "labels": {"ok/key": "v", "bad key": "v", "k": "bad value"}}}),
        );
        assert_eq!(e.len(), 2, "{e:?}");
        let big = "x".repeat(MAX_ANNOTATIONS + 1);
        let e = errs(
            "",
            "ConfigMap",
            json!({"metadata": {"name": "a", "annotations": {"k": big}}}),
        );
        assert_eq!(
            e,
            ["metadata.annotations: Too long: must have at most 262144 bytes"]
        );
    }

    #[test]
    fn pods_need_containers_with_images() {
        let e = errs("", "Pod", json!({"metadata": {"name": "p"}, "spec": {}}));
        assert_eq!(e, ["spec.containers: Required value"]);
        let e = errs(
            "",
            "Pod",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}),
        );
        assert_eq!(e, ["spec.containers[0].image: Required value"]);
    }

    #[test]
    fn the_message_aggregates_like_apimachinery() {
        let one = vec![FieldError::required("spec.containers", "")];
        assert_eq!(
            message("", "Pod", "p", &one),
            "Pod \"p\" is invalid: spec.containers: Required value"
        );
        let two = vec![one[0].clone(), FieldError::required("metadata.name", "")];
        assert_eq!(
            message("apps", "Deployment", "d", &two),
            "Deployment.apps \"d\" is invalid: [spec.containers: Required value, metadata.name: Required value]"
        );
    }
}
