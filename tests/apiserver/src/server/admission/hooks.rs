//! The stored webhook configurations, read as the API server's webhook source reads them, and
//! which of their webhooks a request must call (predicates/rules, predicates/namespace,
//! predicates/object and `ShouldCallHook` of generic/webhook.go).

use std::time::Duration;

use serde_json::{Map, Value};

use super::super::Shared;
use super::super::discovery::{self, Known};
use super::super::resource::ResourceKey;
use super::super::status::ApiError;
use super::Request;

/// The group of the webhook configurations.
const GROUP: &str = "admissionregistration.k8s.io";

/// One webhook of a stored configuration, its defaults filled in
/// (pkg/apis/admissionregistration/v1/defaults.go) where a seeded object lacks them.
#[derive(Debug, Clone)]
pub(crate) struct Hook {
    /// `{configuration}/{webhook}/{index}`: what reinvocation remembers a webhook by.
    pub uid: String,
    /// `webhooks[].name`: the name every message gives.
    pub name: String,
    /// Where to POST the review.
    pub client: ClientConfig,
    /// `rules`.
    rules: Vec<Value>,
    /// `failurePolicy: Ignore` (the default, Fail, refuses the request on a failed call).
    pub ignore_failures: bool,
    /// `matchPolicy: Equivalent` (the default) rather than Exact.
    equivalent: bool,
    /// `namespaceSelector` (default `{}`: every namespace).
    namespace_selector: Value,
    /// `objectSelector` (default `{}`: every object).
    object_selector: Value,
    /// `sideEffects`; `None` when missing (a seeded object: v1 requires it).
    pub side_effects: Option<String>,
    /// `timeoutSeconds` (default 10).
    pub timeout: Duration,
    /// `admissionReviewVersions`, in preference order.
    pub review_versions: Vec<String>,
    /// `reinvocationPolicy: IfNeeded` (mutating webhooks; default Never).
    pub reinvoke_if_needed: bool,
    /// Whether it has `matchConditions`, which this server does not evaluate.
    pub match_conditions: bool,
}

/// `clientConfig`.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClientConfig {
    /// `url`.
    pub url: Option<String>,
    /// `service`: namespace, name, path, port (default 443).
    pub service: Option<(String, String, String, u16)>,
    /// `caBundle`, decoded from base64 (PEM certificates); empty when missing.
    pub ca_bundle: Vec<u8>,
}

/// What a matching webhook is called with: the resource and kind it matched, which differ from
/// the request's when it matched an equivalent resource (`matchPolicy: Equivalent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invocation {
    /// The resource the rule matched.
    pub resource: ResourceKey,
    /// The kind of the object in that resource's version.
    pub kind: String,
}

/// The webhooks of every stored Mutating (`mutating`) or Validating WebhookConfiguration in
/// the API server's order: configurations by name, webhooks in their order.
pub(crate) fn load(shared: &Shared, mutating: bool) -> Vec<Hook> {
    let plural = if mutating {
        "mutatingwebhookconfigurations"
    } else {
        "validatingwebhookconfigurations"
    };
    let resource = ResourceKey {
        group: GROUP.into(),
        version: "v1".into(),
        plural: plural.into(),
    };
    // `objects` sorts by (namespace, name): by name for these cluster-scoped kinds.
    let mut hooks = Vec::new();
    for config in shared.store.objects(&resource) {
        let config_name = text(&config, "/metadata/name");
        let webhooks = config.get("webhooks").and_then(Value::as_array);
        for (i, w) in webhooks.into_iter().flatten().enumerate() {
            hooks.push(Hook::parse(&config_name, i, w, mutating));
        }
    }
    hooks
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

impl Hook {
    fn parse(config: &str, index: usize, w: &Value, mutating: bool) -> Self {
        let name = text(w, "/name");
        let field = |f: &str| w.get(f).and_then(Value::as_str);
        let selector = |f: &str| {
            w.get(f)
                .cloned()
                .unwrap_or_else(|| Value::Object(Map::new()))
        };
        let cc = w.get("clientConfig");
        let service = cc.and_then(|c| c.get("service")).map(|s| {
            let port = s.get("port").and_then(Value::as_u64).unwrap_or(443);
            (
                text(s, "/namespace"),
                text(s, "/name"),
                text(s, "/path"),
                u16::try_from(port).unwrap_or(443),
            )
        });
        use base64::Engine as _;
        let ca_bundle = cc
            .and_then(|c| c.get("caBundle"))
            .and_then(Value::as_str)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .unwrap_or_default();
        let mut review_versions: Vec<String> = w
            .get("admissionReviewVersions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        if review_versions.is_empty() {
            review_versions.push("v1".into());
        }
        Hook {
            uid: format!("{config}/{name}/{index}"),
            client: ClientConfig {
                url: cc
                    .and_then(|c| c.get("url"))
                    .and_then(Value::as_str)
                    .map(str::to_string),
                service,
                ca_bundle,
            },
            rules: w
                .get("rules")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            ignore_failures: field("failurePolicy") == Some("Ignore"),
            equivalent: field("matchPolicy") != Some("Exact"),
            namespace_selector: selector("namespaceSelector"),
            object_selector: selector("objectSelector"),
            side_effects: field("sideEffects").map(str::to_string),
            timeout: Duration::from_secs(
                w.get("timeoutSeconds")
                    .and_then(Value::as_u64)
                    .unwrap_or(10),
            ),
            review_versions,
            reinvoke_if_needed: mutating && field("reinvocationPolicy") == Some("IfNeeded"),
            match_conditions: w
                .get("matchConditions")
                .and_then(Value::as_array)
                .is_some_and(|c| !c.is_empty()),
            name,
        }
    }

    /// Whether the request calls this webhook, and as what (`ShouldCallHook`): its namespace
    /// and object selectors, then its rules on the request's resource and, under
    /// `matchPolicy: Equivalent`, on the other served versions of it. A selector that does not
    /// parse, or a namespace that does not exist, is an error only for a webhook whose rules
    /// match.
    pub(crate) fn invocation(
        &self,
        shared: &Shared,
        req: &Request<'_>,
    ) -> Result<Option<Invocation>, ApiError> {
        let namespace = match self.namespace_matches(shared, req) {
            Ok(false) => return Ok(None),
            other => other,
        };
        let object = match self.object_matches(req) {
            Ok(false) => return Ok(None),
            other => other,
        };
        let mut found = self
            .rules
            .iter()
            .any(|r| rule_matches(r, req, &req.resource.version))
            .then(|| Invocation {
                resource: req.resource.clone(),
                kind: req.kind.clone(),
            });
        if found.is_none() && self.equivalent {
            'rules: for rule in &self.rules {
                for (version, kind) in equivalents(shared, req.resource) {
                    if rule_matches(rule, req, &version) {
                        found = Some(Invocation {
                            resource: ResourceKey {
                                version,
                                ..req.resource.clone()
                            },
                            // A subresource's own kind (a Scale) is the same in every version.
                            kind: if req.kind_group_version.is_some() {
                                req.kind.clone()
                            } else {
                                kind
                            },
                        });
                        break 'rules;
                    }
                }
            }
        }
        if found.is_none() {
            return Ok(None);
        }
        namespace?;
        object?;
        Ok(found)
    }

    /// `MatchNamespaceSelector`: cluster-scoped objects other than Namespaces always match; a
    /// Namespace created or updated matches on its own new labels.
    fn namespace_matches(&self, shared: &Shared, req: &Request<'_>) -> Result<bool, ApiError> {
        let is_namespace = req.resource.group.is_empty() && req.resource.plural == "namespaces";
        if req.namespace.is_empty() && !is_namespace {
            return Ok(true);
        }
        if selector_is_empty(&self.namespace_selector) {
            return Ok(true);
        }
        let labels = if is_namespace
            && req.subresource.is_none()
            && matches!(
                req.operation,
                super::Operation::Create | super::Operation::Update
            ) {
            req.object.as_ref().and_then(labels_of)
        } else {
            let ns = ResourceKey {
                group: String::new(),
                version: "v1".into(),
                plural: "namespaces".into(),
            };
            let Some(found) = shared.store.get(&ns, None, &req.namespace) else {
                return Err(ApiError::with_details(
                    404,
                    "NotFound",
                    format!("namespaces {:?} not found", req.namespace),
                    serde_json::json!({"name": req.namespace, "kind": "namespaces"}),
                ));
            };
            labels_of(&found.value())
        };
        selector_matches(&self.namespace_selector, labels.as_ref()).map_err(|e| internal_error(&e))
    }

    /// `MatchObjectSelector`: the object's labels or the old object's.
    fn object_matches(&self, req: &Request<'_>) -> Result<bool, ApiError> {
        if selector_is_empty(&self.object_selector) {
            return Ok(true);
        }
        let mut matched = false;
        for obj in [&req.object, &req.old_object].into_iter().flatten() {
            let labels = labels_of(obj);
            matched |= selector_matches(&self.object_selector, labels.as_ref())
                .map_err(|e| internal_error(&e))?;
        }
        Ok(matched)
    }
}

/// 500 InternalError, as `apierrors.NewInternalError` words it.
pub(crate) fn internal_error(message: &str) -> ApiError {
    ApiError::with_details(
        500,
        "InternalError",
        format!("Internal error occurred: {message}"),
        serde_json::json!({"causes": [{"message": message}]}),
    )
}

fn labels_of(obj: &Value) -> Option<Map<String, Value>> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
}

/// Whether a rule (`RuleWithOperations`) matches the request, its resource taken in `version`.
fn rule_matches(rule: &Value, req: &Request<'_>, version: &str) -> bool {
    let list = |f: &str| -> Vec<&str> {
        rule.get(f)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect()
    };
    let exact_or_wildcard =
        |f: &str, wanted: &str| list(f).iter().any(|i| *i == "*" || *i == wanted);
    let is_namespace = req.resource.group.is_empty() && req.resource.plural == "namespaces";
    let scope = match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "*" => true,
        "Namespaced" => !is_namespace && !req.namespace.is_empty(),
        "Cluster" => is_namespace || req.namespace.is_empty(),
        _ => false,
    };
    let subresource = req.subresource.unwrap_or("");
    let resource = list("resources").iter().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r, ""));
        (res == "*" || res == req.resource.plural) && (sub == "*" || sub == subresource)
    });
    scope
        && exact_or_wildcard("operations", req.operation.as_str())
        && exact_or_wildcard("apiGroups", &req.resource.group)
        && exact_or_wildcard("apiVersions", version)
        && resource
}

/// The other versions the resource is served in, with the kind in each: a CRD's other served
/// versions; for built-ins, the other versions of the same group and resource this server
/// serves (autoscaling/v1 and v2 HorizontalPodAutoscalers, the one pair it converts).
fn equivalents(shared: &Shared, resource: &ResourceKey) -> Vec<(String, String)> {
    match discovery::known(shared, resource) {
        Known::Builtin(_) => discovery::builtins()
            .iter()
            .filter(|b| {
                b.group == resource.group
                    && b.plural == resource.plural
                    && b.version != resource.version
            })
            .map(|b| (b.version.to_string(), b.kind.to_string()))
            .collect(),
        Known::Custom(custom) => shared
            .store
            .objects(&discovery::crd_resource())
            .iter()
            .filter(|crd| {
                crd.pointer("/spec/group").and_then(Value::as_str) == Some(&resource.group)
                    && crd.pointer("/spec/names/plural").and_then(Value::as_str)
                        == Some(&resource.plural)
            })
            .flat_map(|crd| {
                crd.pointer("/spec/versions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .filter(|v| v.get("served").and_then(Value::as_bool) != Some(false))
            .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_string))
            .filter(|v| *v != resource.version)
            .map(|v| (v, custom.kind.clone()))
            .collect(),
        Known::Unknown => Vec::new(),
    }
}

/// Whether a `metav1.LabelSelector` has no requirement (it selects everything).
fn selector_is_empty(selector: &Value) -> bool {
    let empty = |f: &str| match selector.get(f) {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    };
    empty("matchLabels") && empty("matchExpressions")
}

/// Whether `labels` satisfy a `metav1.LabelSelector` (`LabelSelectorAsSelector`); the error
/// is the conversion's, for an operator it does not know or values an operator forbids.
pub(crate) fn selector_matches(
    selector: &Value,
    labels: Option<&Map<String, Value>>,
) -> Result<bool, String> {
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let mut matched = true;
    if let Some(wanted) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in wanted {
            matched &= get(k) == v.as_str();
        }
    }
    for e in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
        let have = get(key);
        matched &= match op {
            "In" | "NotIn" if values.is_empty() => {
                return Err(
                    "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty"
                        .into(),
                );
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err("values: Invalid value: for 'exists', 'doesnotexist' operators, values set must be empty".into());
            }
            "In" => have.is_some_and(|h| values.contains(&h)),
            "NotIn" => !have.is_some_and(|h| values.contains(&h)),
            "Exists" => have.is_some(),
            "DoesNotExist" => have.is_none(),
            other => return Err(format!("{other:?} is not a valid label selector operator")),
        };
    }
    Ok(matched)
}

#[cfg(test)]
mod tests {
    use super::super::{Operation, UserInfo};
    use super::*;
    use serde_json::json;

    fn request<'a>(
        resource: &'a ResourceKey,
        subresource: Option<&'a str>,
        namespace: &str,
        operation: Operation,
    ) -> Request<'a> {
        Request {
            operation,
            resource,
            kind: "Pod".into(),
            kind_group_version: None,
            subresource,
            namespace: namespace.into(),
            name: "p".into(),
            object: None,
            old_object: None,
            options: Value::Null,
            dry_run: false,
            user: UserInfo::from_headers(&Default::default()),
            warnings: Vec::new(),
        }
    }

    #[test]
    fn rules_match_operations_resources_subresources_and_scope_as_the_api_server_does() {
        let pods = ResourceKey {
            group: String::new(),
            version: "v1".into(),
            plural: "pods".into(),
        };
        let namespaces = ResourceKey {
            plural: "namespaces".into(),
            ..pods.clone()
        };
        let rule = |ops: &[&str], resources: &[&str], scope: &str| {
            json!({"operations": ops, "apiGroups": [""], "apiVersions": ["*"],
                "resources": resources, "scope": scope})
        };
        let create = request(&pods, None, "default", Operation::Create);
        let status = request(&pods, Some("status"), "default", Operation::Update);
        let matches = |r: &Value, q: &Request<'_>| rule_matches(r, q, &q.resource.version);
        assert!(matches(&rule(&["*"], &["pods"], "*"), &create));
        assert!(!matches(&rule(&["UPDATE"], &["pods"], "*"), &create));
        assert!(!matches(&rule(&["*"], &["pods"], "*"), &status));
        assert!(matches(&rule(&["*"], &["pods/status"], "*"), &status));
        assert!(matches(&rule(&["*"], &["pods/*"], "*"), &status));
        assert!(matches(&rule(&["*"], &["*/*"], "*"), &status));
        // `*` after the slash also matches no subresource: `*/*` is every resource and all
        // their subresources.
        assert!(matches(&rule(&["*"], &["*/*"], "*"), &create));
        assert!(matches(&rule(&["*"], &["pods/*"], "*"), &create));
        assert!(matches(&rule(&["*"], &["*"], "*"), &create));
        assert!(!matches(&rule(&["*"], &["*"], "*"), &status));
        assert!(matches(&rule(&["*"], &["pods"], "Namespaced"), &create));
        assert!(!matches(&rule(&["*"], &["pods"], "Cluster"), &create));
        // A Namespace is cluster-scoped, though its requests carry its name as namespace.
        let ns = request(&namespaces, None, "shop", Operation::Delete);
        assert!(matches(&rule(&["DELETE"], &["namespaces"], "Cluster"), &ns));
        assert!(!matches(
            &rule(&["DELETE"], &["namespaces"], "Namespaced"),
            &ns
        ));
    }

    #[test]
    fn label_selectors_match_labels_and_expressions() {
        let labels = json!({"team": "a", "tier": "web"});
        let labels = labels.as_object();
        let yes = |s: Value| selector_matches(&s, labels).unwrap();
        assert!(yes(json!({})));
        assert!(yes(json!({"matchLabels": {"team": "a"}})));
        assert!(!yes(json!({"matchLabels": {"team": "b"}})));
        assert!(yes(
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "db"]}]})
        ));
        assert!(yes(
            json!({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["y"]}]})
        ));
        assert!(!yes(
            json!({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]})
        ));
        assert!(
            selector_matches(
                &json!({"matchExpressions": [{"key": "a", "operator": "Near"}]}),
                labels
            )
            .is_err()
        );
    }
}
