//! What the server serves and how it describes it: the built-in kinds (scope, short names),
//! the custom resources its CustomResourceDefinitions define, and the discovery documents
//! (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/{group}[/{version}]`).
//!
//! `/api` and `/apis` answer in the aggregated form
//! (`application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`) to clients that ask
//! for it first, as kubectl does, and in the legacy form otherwise (kube-rs). Protobuf is never
//! advertised. Subresources listed: `status` (the kinds that have one) and `scale`
//! (autoscaling/v1 Scale, [`super::scale`]); the access reviews have only `create`. `/openapi/v3` lists one document per group/version holding,
//! for each collection, the PATCH operation with its group/version/kind and the
//! `fieldValidation` parameter: kubectl then leaves validation to the server (without it,
//! `kubectl apply` fails with "failed to download openapi" unless `--validate=false`). There are
//! no schemas; `/openapi/v2` answers 404 NotFound.

use std::collections::{BTreeMap, BTreeSet};

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Value, json};

use super::Shared;
use super::resource::ResourceKey;
use super::status::json_response;

/// A built-in kind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Builtin {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    /// Whether the kind has a `status` subresource (filled by [`has_status`]).
    pub status: bool,
}

/// The built-in kinds served with a `status` subresource in Kubernetes 1.36 (the
/// `{resource}/status` storage of `pkg/registry/*/rest`); the others have none.
const fn has_status(group: &str, plural: &str) -> bool {
    const WITH_STATUS: &[(&str, &str)] = &[
        ("", "pods"),
        ("", "nodes"),
        ("", "replicationcontrollers"),
        ("", "namespaces"),
        ("", "services"),
        ("", "persistentvolumeclaims"),
        ("", "persistentvolumes"),
        ("", "resourcequotas"),
        ("apps", "deployments"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("apps", "daemonsets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("networking.k8s.io", "ingresses"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("certificates.k8s.io", "certificatesigningrequests"),
        ("policy", "poddisruptionbudgets"),
        ("autoscaling", "horizontalpodautoscalers"),
    ];
    let mut i = 0;
    while i < WITH_STATUS.len() {
        let (g, p) = WITH_STATUS[i];
        if const_eq(g, group) && const_eq(p, plural) {
            return true;
        }
        i += 1;
    }
    false
}

const fn const_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

macro_rules! builtin {
    ($group:expr, $version:expr, $plural:expr, $kind:expr, $ns:expr, $short:expr) => {
        Builtin {
            group: $group,
            version: $version,
            plural: $plural,
            kind: $kind,
            namespaced: $ns,
            short_names: $short,
            status: has_status($group, $plural),
        }
    };
}

/// The built-in kinds the server describes with short names (see [`builtins`] for every one;
/// the field selectors each kind supports are [`wisp_kinds::fields`]'s).
pub(crate) const BUILTINS: &[Builtin] = &[
    builtin!("", "v1", "pods", "Pod", true, &["po"]),
    builtin!("", "v1", "nodes", "Node", false, &["no"]),
    builtin!(
        "",
        "v1",
        "replicationcontrollers",
        "ReplicationController",
        true,
        &["rc"]
    ),
    builtin!("", "v1", "events", "Event", true, &["ev"]),
    builtin!("", "v1", "namespaces", "Namespace", false, &["ns"]),
    builtin!("", "v1", "secrets", "Secret", true, &[]),
    builtin!("", "v1", "services", "Service", true, &["svc"]),
    builtin!("", "v1", "configmaps", "ConfigMap", true, &["cm"]),
    builtin!("", "v1", "endpoints", "Endpoints", true, &["ep"]),
    builtin!("", "v1", "serviceaccounts", "ServiceAccount", true, &["sa"]),
    builtin!(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
        &["pvc"]
    ),
    builtin!(
        "",
        "v1",
        "persistentvolumes",
        "PersistentVolume",
        false,
        &["pv"]
    ),
    builtin!("", "v1", "limitranges", "LimitRange", true, &["limits"]),
    builtin!(
        "",
        "v1",
        "resourcequotas",
        "ResourceQuota",
        true,
        &["quota"]
    ),
    builtin!("", "v1", "podtemplates", "PodTemplate", true, &[]),
    builtin!("apps", "v1", "deployments", "Deployment", true, &["deploy"]),
    builtin!("apps", "v1", "replicasets", "ReplicaSet", true, &["rs"]),
    builtin!("apps", "v1", "statefulsets", "StatefulSet", true, &["sts"]),
    builtin!("apps", "v1", "daemonsets", "DaemonSet", true, &["ds"]),
    builtin!(
        "apps",
        "v1",
        "controllerrevisions",
        "ControllerRevision",
        true,
        &[]
    ),
    builtin!("batch", "v1", "jobs", "Job", true, &[]),
    builtin!("batch", "v1", "cronjobs", "CronJob", true, &["cj"]),
    builtin!(
        "networking.k8s.io",
        "v1",
        "ingresses",
        "Ingress",
        true,
        &["ing"]
    ),
    builtin!(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        true,
        &["netpol"]
    ),
    builtin!(
        "networking.k8s.io",
        "v1",
        "ingressclasses",
        "IngressClass",
        false,
        &[]
    ),
    builtin!(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        "EndpointSlice",
        true,
        &[]
    ),
    builtin!(
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "Role",
        true,
        &[]
    ),
    builtin!(
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
        &[]
    ),
    builtin!(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
        &[]
    ),
    builtin!(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        &[]
    ),
    builtin!(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"]
    ),
    builtin!("coordination.k8s.io", "v1", "leases", "Lease", true, &[]),
    builtin!("events.k8s.io", "v1", "events", "Event", true, &["ev"]),
    builtin!(
        "certificates.k8s.io",
        "v1",
        "certificatesigningrequests",
        "CertificateSigningRequest",
        false,
        &["csr"]
    ),
    builtin!(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        "StorageClass",
        false,
        &["sc"]
    ),
    builtin!(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
        &["pdb"]
    ),
    builtin!(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        true,
        &["hpa"]
    ),
    builtin!(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "PriorityClass",
        false,
        &["pc"]
    ),
];

/// Every built-in kind the server serves: those of [`BUILTINS`], with their short names, then
/// the rest of Kubernetes 1.36's ([`wisp_kinds::BUILTINS`]), without short names.
pub(crate) fn builtins() -> &'static [Builtin] {
    static ALL: std::sync::OnceLock<Vec<Builtin>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        let mut all = BUILTINS.to_vec();
        for k in wisp_kinds::BUILTINS {
            if !BUILTINS
                .iter()
                .any(|b| b.group == k.group && b.version == k.version && b.kind == k.kind)
            {
                all.push(builtin!(
                    k.group,
                    k.version,
                    k.plural,
                    k.kind,
                    k.namespaced,
                    &[]
                ));
            }
        }
        all
    })
}

/// The built-in kind served at `resource`, if any.
pub(crate) fn builtin(resource: &ResourceKey) -> Option<&'static Builtin> {
    builtins().iter().find(|b| {
        b.group == resource.group && b.version == resource.version && b.plural == resource.plural
    })
}

/// Whether a DELETE that removes an object at once answers with the object (the registries
/// with `ReturnDeletedObject`: pods, services, serviceaccounts, storageclasses; and the kinds
/// this server knows neither as built-ins nor from a CRD) rather than with a Status Success
/// (every other built-in, and custom resources).
pub(crate) fn returns_deleted_object(shared: &Shared, resource: &ResourceKey) -> bool {
    match known(shared, resource) {
        Known::Builtin(b) => matches!(
            (b.group, b.plural),
            ("", "pods" | "services" | "serviceaccounts") | ("storage.k8s.io", "storageclasses")
        ),
        Known::Custom(_) => false,
        Known::Unknown => true,
    }
}

/// A kind served from a CustomResourceDefinition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CustomKind {
    pub kind: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    /// `selectableFields` of the served version, as field labels (`spec.color`).
    pub selectable: Vec<String>,
    /// Whether the served version has `subresources.status`.
    pub status: bool,
    /// `additionalPrinterColumns` of the served version (Tables, `kubectl get`).
    pub columns: Vec<PrinterColumn>,
}

/// One of a CRD version's `additionalPrinterColumns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PrinterColumn {
    pub name: String,
    /// `string`, `integer`, `number`, `boolean`, `date`.
    pub kind: String,
    pub format: String,
    pub description: String,
    pub priority: u32,
    pub json_path: String,
}

fn printer_columns(version: &Value) -> Vec<PrinterColumn> {
    let text = |c: &Value, k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .map(|cols| {
            cols.iter()
                .map(|c| PrinterColumn {
                    name: text(c, "name"),
                    kind: text(c, "type"),
                    format: text(c, "format"),
                    description: text(c, "description"),
                    priority: c.get("priority").and_then(Value::as_u64).unwrap_or(0) as u32,
                    json_path: text(c, "jsonPath"),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What a CRD object says about one group/version/plural.
pub(crate) fn custom_kind(crd: &Value, resource: &ResourceKey) -> Option<CustomKind> {
    let spec = crd.get("spec")?;
    let names = spec.get("names")?;
    if spec.get("group")?.as_str()? != resource.group
        || names.get("plural")?.as_str()? != resource.plural
    {
        return None;
    }
    let version = spec
        .get("versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(resource.version.as_str()))?;
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let selectable = version
        .get("selectableFields")
        .and_then(Value::as_array)
        .map(|fields| {
            fields
                .iter()
                .filter_map(|f| f.get("jsonPath").and_then(Value::as_str))
                .map(|p| p.trim_start_matches('.').to_string())
                .collect()
        })
        .unwrap_or_default();
    let kind = names.get("kind")?.as_str()?.to_string();
    Some(CustomKind {
        singular: names
            .get("singular")
            .and_then(Value::as_str)
            .map_or_else(|| kind.to_ascii_lowercase(), str::to_string),
        kind,
        namespaced: spec.get("scope").and_then(Value::as_str) != Some("Cluster"),
        short_names: strings(names.get("shortNames")),
        selectable,
        status: version.pointer("/subresources/status").is_some(),
        columns: printer_columns(version),
    })
}

/// The CRDs' collection.
pub(crate) fn crd_resource() -> ResourceKey {
    ResourceKey {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        plural: "customresourcedefinitions".into(),
    }
}

/// What a CustomResourceDefinition looks like once stored and seen by the API server's
/// controllers (apiextensions-apiserver `pkg/apis/apiextensions/v1/defaults.go`, the naming
/// controller `pkg/controller/status/naming_controller.go` and the establishing controller):
/// `spec.names` defaulted (`singular`, `listKind`), `status.acceptedNames` the names,
/// `status.storedVersions` holding the storage version, and the conditions `NamesAccepted`
/// (reason `NoConflicts`) and `Established` (reason `InitialNamesAccepted`) True. A real server
/// sets the conditions a moment after the create (watchers see a MODIFIED); this one at once.
pub(crate) fn settle_crd(crd: &mut Value) {
    let Some(names) = crd
        .pointer_mut("/spec/names")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !kind.is_empty() {
        names
            .entry("singular")
            .or_insert_with(|| json!(kind.to_ascii_lowercase()));
        names
            .entry("listKind")
            .or_insert_with(|| json!(format!("{kind}List")));
    }
    let accepted = Value::Object(names.clone());
    let storage: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .filter_map(|v| v.get("name").cloned())
        .collect();
    let Some(map) = crd.as_object_mut() else {
        return;
    };
    let status = map.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    status["acceptedNames"] = accepted;
    let stored = status
        .as_object_mut()
        .map(|s| s.entry("storedVersions").or_insert_with(|| json!([])));
    if let Some(Value::Array(stored)) = stored {
        for v in storage {
            if !stored.contains(&v) {
                stored.push(v);
            }
        }
    }
    let now = super::resource::now_rfc3339();
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (ty, reason, message) in [
        ("NamesAccepted", "NoConflicts", "no conflicts found"),
        (
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        ),
    ] {
        let current = conditions
            .iter()
            .position(|c| c.get("type").and_then(Value::as_str) == Some(ty));
        if current.is_some_and(|i| conditions[i].get("status") == Some(&json!("True"))) {
            continue;
        }
        let condition = json!({"type": ty, "status": "True", "lastTransitionTime": now,
            "reason": reason, "message": message});
        match current {
            Some(i) => conditions[i] = condition,
            None => conditions.push(condition),
        }
    }
    status["conditions"] = Value::Array(conditions);
}

/// What the server knows of a collection: built-in, defined by a CRD, or only seen in writes.
#[derive(Debug, Clone)]
pub(crate) enum Known {
    Builtin(&'static Builtin),
    Custom(CustomKind),
    /// Neither: any field selector on metadata is accepted, the scope is not checked.
    Unknown,
}

impl Known {
    /// Whether the kind has a `status` subresource (`None` when unknown).
    pub fn status(&self) -> Option<bool> {
        match self {
            Known::Builtin(b) => Some(b.status),
            Known::Custom(c) => Some(c.status),
            Known::Unknown => None,
        }
    }

    /// Whether the kind is namespaced (`None` when unknown).
    pub fn namespaced(&self) -> Option<bool> {
        match self {
            Known::Builtin(b) => Some(b.namespaced),
            Known::Custom(c) => Some(c.namespaced),
            Known::Unknown => None,
        }
    }
}

/// Looks up a collection among the built-ins and the stored CRDs.
pub(crate) fn known(shared: &Shared, resource: &ResourceKey) -> Known {
    if let Some(b) = builtin(resource) {
        return Known::Builtin(b);
    }
    if resource.group.is_empty() || !resource.group.contains('.') {
        return Known::Unknown;
    }
    shared
        .store
        .objects(&crd_resource())
        .iter()
        .find_map(|crd| custom_kind(crd, resource))
        .map_or(Known::Unknown, Known::Custom)
}

/// Verbs of every collection the server serves but Namespaces.
const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Verbs of Namespaces, which have no `deletecollection`.
const NAMESPACE_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// The verbs of a collection: only `create` for the access reviews.
fn verbs(group: &str, plural: &str) -> &'static [&'static str] {
    if group.is_empty() && plural == "namespaces" {
        NAMESPACE_VERBS
    } else if super::review::kind_of(group, plural).is_some() {
        &["create"]
    } else {
        VERBS
    }
}

/// One entry of an APIResourceList.
#[derive(Debug, Clone)]
struct Entry {
    plural: String,
    singular: String,
    kind: String,
    namespaced: bool,
    short_names: Vec<String>,
    /// Whether `{plural}/status` is served.
    status: bool,
}

/// Every group/version with its collections: the built-ins, the CRDs' served versions and
/// the collections seen in writes.
fn catalogue(shared: &Shared) -> BTreeMap<(String, String), Vec<Entry>> {
    let mut out: BTreeMap<(String, String), Vec<Entry>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for b in builtins() {
        seen.insert((
            b.group.to_string(),
            b.version.to_string(),
            b.plural.to_string(),
        ));
        out.entry((b.group.into(), b.version.into()))
            .or_default()
            .push(Entry {
                plural: b.plural.into(),
                singular: b.kind.to_ascii_lowercase(),
                kind: b.kind.into(),
                namespaced: b.namespaced,
                short_names: b.short_names.iter().map(|s| s.to_string()).collect(),
                status: b.status,
            });
    }
    for crd in shared.store.objects(&crd_resource()) {
        let group = crd.pointer("/spec/group").and_then(Value::as_str);
        let plural = crd.pointer("/spec/names/plural").and_then(Value::as_str);
        let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
        let (Some(group), Some(plural), Some(versions)) = (group, plural, versions) else {
            continue;
        };
        for v in versions {
            let Some(version) = v.get("name").and_then(Value::as_str) else {
                continue;
            };
            if v.get("served").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            let key = ResourceKey {
                group: group.into(),
                version: version.into(),
                plural: plural.into(),
            };
            let Some(c) = custom_kind(&crd, &key) else {
                continue;
            };
            if seen.insert((group.into(), version.into(), plural.into())) {
                out.entry((group.into(), version.into()))
                    .or_default()
                    .push(Entry {
                        plural: plural.into(),
                        singular: c.singular,
                        kind: c.kind,
                        namespaced: c.namespaced,
                        short_names: c.short_names,
                        status: c.status,
                    });
            }
        }
    }
    for (resource, kind, namespaced) in shared.store.collections() {
        if seen.insert((
            resource.group.clone(),
            resource.version.clone(),
            resource.plural.clone(),
        )) {
            out.entry((resource.group.clone(), resource.version.clone()))
                .or_default()
                .push(Entry {
                    plural: resource.plural.clone(),
                    singular: kind.to_ascii_lowercase(),
                    kind,
                    namespaced,
                    short_names: Vec::new(),
                    status: true,
                });
        }
    }
    out
}

/// The group of `group/version` (empty for `v1`).
fn group_of(group_version: &str) -> &str {
    group_version.split_once('/').map_or("", |(group, _)| group)
}

fn resource_list(group_version: &str, entries: &[Entry]) -> Value {
    let mut resources = Vec::new();
    for e in entries {
        let mut r = json!({
            "name": e.plural,
            "singularName": e.singular,
            "namespaced": e.namespaced,
            "kind": e.kind,
            "verbs": verbs(group_of(group_version), &e.plural),
        });
        if !e.short_names.is_empty() {
            r["shortNames"] = json!(e.short_names);
        }
        resources.push(r);
        if e.status {
            resources.push(json!({
                "name": format!("{}/status", e.plural),
                "singularName": "",
                "namespaced": e.namespaced,
                "kind": e.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        if super::scale::has_scale(group_of(group_version), &e.plural) {
            resources.push(json!({
                "name": format!("{}/scale", e.plural),
                "singularName": "",
                "namespaced": e.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}

fn group_doc(group: &str, versions: &[String]) -> Value {
    let gv = |v: &String| json!({"groupVersion": format!("{group}/{v}"), "version": v});
    json!({
        "name": group,
        "versions": versions.iter().map(gv).collect::<Vec<_>>(),
        "preferredVersion": versions.first().map(gv).unwrap_or(Value::Null),
    })
}

/// The `hash` of every OpenAPI v3 document URL (the documents only change with the CRDs).
const OPENAPI_HASH: &str = "0000000000000000";

/// The OpenAPI v3 document of one group/version: for each collection, the PATCH of one object
/// tagged with its group/version/kind and taking `fieldValidation`, which is what kubectl reads
/// to leave validation to the server (no schemas: the server does not check fields by schema).
fn openapi_v3(group: &str, version: &str, entries: &[Entry]) -> Value {
    let root = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut paths = serde_json::Map::new();
    for e in entries {
        let path = if e.namespaced {
            format!("{root}/namespaces/{{namespace}}/{}/{{name}}", e.plural)
        } else {
            format!("{root}/{}/{{name}}", e.plural)
        };
        let query = |name: &str| json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}});
        paths.insert(
            path,
            json!({"patch": {
                "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": e.kind},
                "x-kubernetes-action": "patch",
                "parameters": [query("dryRun"), query("fieldManager"), query("fieldValidation"), query("force")],
                "responses": {"200": {"description": "OK"}},
            }}),
        );
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.36.0"},
        "paths": paths,
        "components": {"schemas": {}},
    })
}

/// `/version`.
fn version() -> Value {
    json!({
        "major": "1",
        "minor": "36",
        "emulationMajor": "1",
        "emulationMinor": "36",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "35",
        "gitVersion": "v1.36.0-wisp-test",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.25",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// The media type of aggregated discovery, which client-go (kubectl) asks for first.
const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether the Accept header asks for aggregated discovery (v2).
fn wants_aggregated(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(',')
        .any(|range| {
            let params: Vec<&str> = range.split(';').map(str::trim).collect();
            params.contains(&"g=apidiscovery.k8s.io")
                && params.contains(&"v=v2")
                && params.contains(&"as=APIGroupDiscoveryList")
        })
}

/// An `APIGroupDiscoveryList` of the core group (`core`) or of every other group.
fn aggregated(shared: &Shared, core: bool) -> Value {
    let mut groups: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for ((group, version), entries) in catalogue(shared) {
        if group.is_empty() != core {
            continue;
        }
        let kind_of = |kind: &str| json!({"group": group, "version": version, "kind": kind});
        let resources: Vec<Value> = entries
            .iter()
            .map(|e| {
                let mut r = json!({
                    "resource": e.plural,
                    "responseKind": kind_of(&e.kind),
                    "scope": if e.namespaced { "Namespaced" } else { "Cluster" },
                    "singularResource": e.singular,
                    "verbs": verbs(&group, &e.plural),
                });
                let mut subresources = Vec::new();
                if e.status {
                    subresources.push(json!({
                        "subresource": "status",
                        "responseKind": kind_of(&e.kind),
                        "verbs": ["get", "patch", "update"],
                    }));
                }
                if super::scale::has_scale(&group, &e.plural) {
                    subresources.push(json!({
                        "subresource": "scale",
                        "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
                        "verbs": ["get", "patch", "update"],
                    }));
                }
                if !subresources.is_empty() {
                    r["subresources"] = Value::Array(subresources);
                }
                if !e.short_names.is_empty() {
                    r["shortNames"] = json!(e.short_names);
                }
                r
            })
            .collect();
        groups.entry(group.clone()).or_default().push(json!({
            "version": version,
            "resources": resources,
            "freshness": "Current",
        }));
    }
    let items: Vec<Value> = groups
        .into_iter()
        .map(|(name, versions)| {
            let metadata = if name.is_empty() {
                json!({})
            } else {
                json!({"name": name})
            };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

/// Serves a discovery path, or `None` when `path` is not one.
pub(crate) fn serve(
    shared: &Shared,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Option<Response> {
    if method != Method::GET {
        return None;
    }
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if matches!(segments.as_slice(), ["api"] | ["apis"]) && wants_aggregated(headers) {
        let body = aggregated(shared, segments == ["api"]);
        let mut response = json_response(StatusCode::OK, body.to_string());
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(AGGREGATED));
        return Some(response);
    }
    let body = match segments.as_slice() {
        ["version"] => version(),
        ["api"] => json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}],
        }),
        ["api", "v1"] => {
            let cat = catalogue(shared);
            let entries = cat.get(&(String::new(), "v1".to_string()))?;
            resource_list("v1", entries)
        }
        ["apis"] => {
            let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (group, version) in catalogue(shared).keys() {
                if !group.is_empty() {
                    groups
                        .entry(group.clone())
                        .or_default()
                        .push(version.clone());
                }
            }
            json!({
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": groups.iter().map(|(g, v)| group_doc(g, v)).collect::<Vec<_>>(),
            })
        }
        ["apis", group] => {
            let versions: Vec<String> = catalogue(shared)
                .keys()
                .filter(|(g, _)| g == group)
                .map(|(_, v)| v.clone())
                .collect();
            if versions.is_empty() {
                return None;
            }
            let mut doc = group_doc(group, &versions);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            doc
        }
        ["apis", group, version] => {
            let cat = catalogue(shared);
            let entries = cat.get(&(group.to_string(), version.to_string()))?;
            resource_list(&format!("{group}/{version}"), entries)
        }
        ["openapi", "v3"] => {
            let paths: serde_json::Map<String, Value> = catalogue(shared)
                .keys()
                .map(|(group, version)| {
                    let prefix = if group.is_empty() {
                        format!("api/{version}")
                    } else {
                        format!("apis/{group}/{version}")
                    };
                    let url = format!("/openapi/v3/{prefix}?hash={OPENAPI_HASH}");
                    (prefix, json!({"serverRelativeURL": url}))
                })
                .collect();
            json!({"paths": paths})
        }
        ["openapi", "v3", "api", version] => {
            let cat = catalogue(shared);
            openapi_v3("", version, cat.get(&(String::new(), version.to_string()))?)
        }
        ["openapi", "v3", "apis", group, version] => {
            let cat = catalogue(shared);
            openapi_v3(
                group,
                version,
                cat.get(&(group.to_string(), version.to_string()))?,
            )
        }
        _ => return None,
    };
    Some(json_response(StatusCode::OK, body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_named_as_kube_names_them() {
        for b in BUILTINS {
            let av = if b.group.is_empty() {
                b.version.to_string()
            } else {
                format!("{}/{}", b.group, b.version)
            };
            assert_eq!(
                ResourceKey::for_kind(&av, b.kind).plural,
                b.plural,
                "{}",
                b.kind
            );
        }
    }

    #[test]
    fn every_kind_of_kubernetes_is_served_with_its_scope() {
        for k in wisp_kinds::BUILTINS {
            let key = ResourceKey::for_kind(&k.api_version(), k.kind);
            assert_eq!(key.plural, k.plural);
            let b = builtin(&key).unwrap_or_else(|| panic!("{} not served", k.kind));
            assert_eq!((b.kind, b.namespaced), (k.kind, k.namespaced));
            assert_eq!(key.guess_kind(), k.kind);
        }
    }

    #[test]
    fn crd_selectable_fields_become_field_labels() {
        let crd = json!({"spec": {"group": "example.com", "scope": "Cluster",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "selectableFields": [{"jsonPath": ".spec.color"}]}]}});
        let key = ResourceKey {
            group: "example.com".into(),
            version: "v1".into(),
            plural: "widgets".into(),
        };
        let c = custom_kind(&crd, &key).expect("defined");
        assert_eq!(
            (c.kind.as_str(), c.namespaced, c.selectable),
            ("Widget", false, vec!["spec.color".to_string()])
        );
    }
}
