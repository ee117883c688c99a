//! Single-object requests: GET, POST (create), PUT (replace), PATCH and DELETE; and DELETE of
//! a collection (`deletecollection`).
//!
//! PATCH understands JSON merge patches (`application/merge-patch+json`), JSON patches
//! (`application/json-patch+json`), strategic merge patches of built-in kinds
//! (`application/strategic-merge-patch+json`, see [`super::patch`]) and server-side apply
//! (`application/apply-patch+yaml`, JSON or YAML, see [`super::apply`]), which creates a missing
//! object. The `status` subresource exists for the kinds that have one (404 otherwise): writes
//! to it keep the rest of the stored object as the kind's status strategy does, and writes to
//! the main resource keep its stored `status`.
//!
//! Every write is admitted ([`super::admission`]): the mutating webhooks after decoding and
//! defaulting, before the kind's strategy and validation; the validating ones on the object
//! about to be stored.
//!
//! Writes through HTTP record `metadata.managedFields` ([`super::apply`]). `dryRun=All` runs a
//! write through every check and answers as usual, but stores nothing: no resourceVersion is
//! taken and no watch sees it. Any other `dryRun` value is refused with 422, as
//! `ValidateCreateOptions` and its siblings refuse it. An update, patch or apply through HTTP that
//! changes nothing is not written (no resourceVersion, no watch event), as on a real server.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, to_bytes};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::admission::{self, Operation, UserInfo};
use super::apply::{self, ApplyError, Writer};
use super::http::{Query, Target};
use super::object::{StoreError, generate_name, identify, meta_mut};
use super::patch::{self, is_builtin_group, root_type};
use super::resource::{ResourceKey, new_uid, now_rfc3339, split_api_version};
use super::status::{ApiError, error_response, json_response, status_body, store_error};
use super::store::{self, DeleteOptions, Propagation};
use super::{Shared, discovery, validation};

/// The namespaces a DELETE may not remove (the NamespaceLifecycle admission).
const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-public", "kube-system"];

/// Largest request body accepted.
const MAX_BODY: usize = 64 << 20;

/// Conflicting concurrent writes a PATCH retries through, like the real API server does.
const PATCH_ATTEMPTS: usize = 5;

pub(crate) fn not_found(target: &Target, name: &str) -> Response {
    store_error(&StoreError::NotFound {
        plural: target.resource.plural.clone(),
        name: name.to_string(),
    })
}

/// Subresources served as the object itself (`status`, for the kinds that have it); others
/// are 404.
fn check_subresource(shared: &Shared, target: &Target) -> Result<bool, ApiError> {
    match target.subresource.as_deref() {
        None => Ok(false),
        Some("status") if discovery::known(shared, &target.resource).status() != Some(false) => {
            Ok(true)
        }
        Some("status") => Err(ApiError::not_found(
            "the server could not find the requested resource",
        )),
        Some(other) => Err(ApiError::not_found(format!(
            "the server could not find the requested resource ({other})"
        ))),
    }
}

/// What the update strategy of the main resource keeps from the stored object: `status` for
/// the kinds with a status subresource (written only through it), and a Namespace's
/// `spec.finalizers` (written only through `finalize`).
fn keep_on_update(shared: &Shared, target: &Target, live: &Value, obj: &mut Value) {
    let known = discovery::known(shared, &target.resource);
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    if known.status() == Some(true) {
        match live.get("status") {
            Some(status) => map.insert("status".into(), status.clone()),
            None => map.remove("status"),
        };
    }
    if store::is_namespace(&target.resource) {
        let spec = map
            .entry("spec")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(spec) = spec.as_object_mut() {
            match live.pointer("/spec/finalizers") {
                Some(finalizers) => spec.insert("finalizers".into(), finalizers.clone()),
                None => spec.remove("finalizers"),
            };
        }
    }
}

/// What the status strategy makes of a write `new` to the `status` subresource of `live`.
/// Built-in kinds: everything but `metadata` and `status` stays as stored (`spec` above all),
/// and per kind some metadata too (a Pod's ownerReferences, a Deployment's labels), as their
/// `PrepareForUpdate` does; metadata otherwise follows the write. Custom resources (and kinds
/// the server does not know): only `status` (and managedFields) change.
fn status_update(shared: &Shared, target: &Target, live: &Value, new: Value) -> Value {
    let builtin = match discovery::known(shared, &target.resource) {
        discovery::Known::Builtin(b) => b,
        _ => {
            let mut out = live.clone();
            match new.get("status") {
                Some(status) => out["status"] = status.clone(),
                None => {
                    if let Some(map) = out.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
            for field in ["resourceVersion", "managedFields"] {
                match new.pointer(&format!("/metadata/{field}")) {
                    Some(value) => out["metadata"][field] = value.clone(),
                    None => {
                        if let Some(meta) = out["metadata"].as_object_mut() {
                            meta.remove(field);
                        }
                    }
                }
            }
            return out;
        }
    };
    let mut out = new;
    let (Some(map), Some(stored)) = (out.as_object_mut(), live.as_object()) else {
        return out;
    };
    let own = |k: &str| matches!(k, "metadata" | "status" | "apiVersion" | "kind");
    map.retain(|k, _| own(k) || stored.contains_key(k));
    for (k, v) in stored {
        if !own(k) {
            map.insert(k.clone(), v.clone());
        }
    }
    let kept: &[&str] = match (builtin.group, builtin.plural) {
        ("", "pods") => &["ownerReferences"],
        ("apps", "deployments") => &["labels"],
        _ => &[],
    };
    if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in kept {
            match live.pointer(&format!("/metadata/{field}")) {
                Some(value) => meta.insert(field.to_string(), value.clone()),
                None => meta.remove(*field),
            };
        }
    }
    out
}

/// GET of one object.
pub(crate) fn get(shared: &Shared, target: &Target) -> Response {
    let name = target.name.as_deref().unwrap_or("");
    if let Err(e) = check_subresource(shared, target) {
        return e.into_response();
    }
    match shared
        .store
        .get(&target.resource, target.namespace.as_deref(), name)
    {
        Some(obj) => json_response(StatusCode::OK, obj.json.clone()),
        None => not_found(target, name),
    }
}

pub(crate) async fn read_bytes(body: Body) -> Result<bytes::Bytes, ApiError> {
    to_bytes(body, MAX_BODY)
        .await
        .map_err(|e| ApiError::bad_request(format!("unable to read request body: {e}")))
}

async fn read_object(body: Body) -> Result<Value, ApiError> {
    let bytes = read_bytes(body).await?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the request was in an unknown format: {e}"
        ))
    })?;
    if value.is_object() {
        Ok(value)
    } else {
        Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ))
    }
}

/// Fills apiVersion, kind and namespace from the request path and checks they agree with it.
fn conform(shared: &Shared, target: &Target, obj: &mut Value) -> Result<(), ApiError> {
    let Some(map) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    };
    map.entry("apiVersion")
        .or_insert_with(|| Value::String(target.resource.api_version()));
    map.entry("kind")
        .or_insert_with(|| Value::String(shared.store.kind_of(&target.resource)));
    let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = split_api_version(api_version);
    if ResourceKey::for_kind(api_version, kind) != target.resource {
        return Err(ApiError::bad_request(format!(
            "{kind} in {group}/{version} does not belong to the collection {}",
            target.resource.plural
        )));
    }
    let meta = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return Err(ApiError::bad_request("metadata must be an object"));
    };
    if let Some(path_ns) = &target.namespace {
        match meta.get("namespace").and_then(Value::as_str) {
            None | Some("") => {
                meta.insert("namespace".into(), Value::String(path_ns.clone()));
            }
            Some(ns) if ns != path_ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            Some(_) => {}
        }
    }
    if let Some(name) = &target.name {
        match meta.get("name").and_then(Value::as_str) {
            None | Some("") => {
                meta.insert("name".into(), Value::String(name.clone()));
            }
            Some(n) if n != name => {
                return Err(ApiError::bad_request(
                    "the name of the object does not match the name on the URL",
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// What the query string and headers of a write ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WriteOptions {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `fieldManager`, else the User-Agent up to its first `/` (empty without one, as on a real
    /// server: kube-rs sends no User-Agent).
    pub manager: String,
    /// Whether `fieldManager` was given.
    pub explicit_manager: bool,
    /// `force` (apply only).
    pub force: Option<bool>,
    /// `fieldValidation`: what to do with the unknown fields of a custom resource.
    pub field_validation: validation::FieldValidation,
}

impl WriteOptions {
    /// Reads `dryRun`, `fieldManager`, `force` and `fieldValidation` (unknown fields are
    /// detected in custom resources only, by their CRD's schema: see [`validation`]);
    /// `options_kind` names the options in errors (`CreateOptions`, `UpdateOptions`,
    /// `PatchOptions`).
    pub(crate) fn parse(
        query: &Query,
        headers: &HeaderMap,
        options_kind: &str,
    ) -> Result<Self, ApiError> {
        let invalid = |detail: String| {
            ApiError::invalid(format!(
                "{options_kind}.meta.k8s.io \"\" is invalid: {detail}"
            ))
        };
        let dry_run = dry_run(
            query.get("dryRun").into_iter().cloned().collect(),
            options_kind,
        )?;
        if let Some(other) = query
            .get("fieldValidation")
            .filter(|v| !matches!(v.as_str(), "" | "Ignore" | "Warn" | "Strict"))
        {
            return Err(invalid(format!(
                "fieldValidation: Unsupported value: {other:?}: supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
            )));
        }
        let field_manager = query.get("fieldManager").cloned().unwrap_or_default();
        if field_manager.chars().count() > 128 {
            return Err(invalid(
                "fieldManager: Too long: may not be more than 128 bytes".into(),
            ));
        }
        let force = match query.get("force").map(String::as_str) {
            None => None,
            Some("true" | "1") => Some(true),
            Some("false" | "0" | "") => Some(false),
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "force: invalid value {other:?}: strconv.ParseBool: parsing {other:?}: invalid syntax"
                )));
            }
        };
        let explicit_manager = !field_manager.is_empty();
        let manager = if explicit_manager {
            field_manager
        } else {
            let agent = headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            agent
                .split('/')
                .next()
                .unwrap_or("")
                .chars()
                .take(128)
                .collect()
        };
        let field_validation = validation::FieldValidation::parse(
            query.get("fieldValidation").map_or("", String::as_str),
        );
        Ok(Self {
            dry_run,
            manager,
            explicit_manager,
            force,
            field_validation,
        })
    }
}

/// Whether `dryRun` values ask for a dry run; anything but `All` is refused with 422.
fn dry_run(values: Vec<String>, options_kind: &str) -> Result<bool, ApiError> {
    let values: Vec<String> = values.into_iter().filter(|v| !v.is_empty()).collect();
    if values.iter().all(|v| v == "All") {
        return Ok(!values.is_empty());
    }
    let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    Err(ApiError::invalid(format!(
        "{options_kind}.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{{{}}}: supported values: \"All\"",
        quoted.join(", ")
    )))
}

/// Whether `status` is written through a subresource of its own (not known: assumed so).
pub(crate) fn separate_status(shared: &Shared, target: &Target) -> bool {
    discovery::known(shared, &target.resource).status() != Some(false)
}

/// The type of the objects of a collection, for list strategies.
pub(crate) fn type_of(shared: &Shared, target: &Target) -> patch::Ty {
    root_type(
        &target.resource.group,
        &shared.store.kind_of(&target.resource),
    )
}

/// What a create would store, without storing it: the checks of `Store::create` and its
/// metadata, without a resourceVersion (a dry-run create answers without one).
fn dry_run_create(shared: &Shared, mut obj: Value) -> Result<Value, StoreError> {
    generate_name(&mut obj)?;
    let (resource, key, kind) = identify(&obj)?;
    let namespace = (!key.0.is_empty()).then_some(key.0.as_str());
    shared.store.check_namespace(namespace)?;
    if shared.store.get(&resource, namespace, &key.1).is_some() {
        return Err(StoreError::AlreadyExists {
            plural: resource.plural,
            name: key.1,
        });
    }
    let meta = meta_mut(&mut obj)?;
    meta.insert("uid".into(), Value::String(new_uid()));
    meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
    store::stamp_generation(meta, &resource, &kind, 1);
    meta.remove("resourceVersion");
    Ok(obj)
}

/// What an update of `current` to `obj` would store, without storing it: the checks and
/// metadata of `Store::update`, keeping the current resourceVersion.
fn dry_run_update(current: &Value, mut obj: Value) -> Result<Value, StoreError> {
    let (resource, key, kind) = identify(&obj)?;
    let old = |field: &str| current.get("metadata").and_then(|m| m.get(field)).cloned();
    let current_rv = old("resourceVersion");
    let sent_rv = obj
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !sent_rv.is_empty() && Some(sent_rv) != current_rv.as_ref().and_then(Value::as_str) {
        return Err(StoreError::Conflict {
            plural: resource.plural,
            name: key.1,
        });
    }
    let generation = old("generation").and_then(|g| g.as_i64()).unwrap_or(1);
    let spec_changed = current.get("spec") != obj.get("spec");
    let meta = meta_mut(&mut obj)?;
    for field in ["uid", "creationTimestamp", "resourceVersion"] {
        if let Some(value) = old(field) {
            meta.insert(field.into(), value);
        }
    }
    store::stamp_generation(meta, &resource, &kind, generation + i64::from(spec_changed));
    Ok(obj)
}

/// The NamespaceLifecycle admission of a create, which runs before validation: the refusal,
/// 404 NotFound in a namespace that does not exist (the path's scope is checked first, as
/// routing does).
fn refuse_create(shared: &Shared, target: &Target) -> Option<Response> {
    if let Err(e) = validation::scope(shared, target) {
        return Some(e.into_response());
    }
    let namespaced = discovery::known(shared, &target.resource).namespaced() != Some(false);
    let namespace = target.namespace.as_deref().filter(|_| namespaced);
    shared
        .store
        .check_namespace(namespace)
        .err()
        .map(|e| store_error(&e))
}

/// What admission is asked about a write to `target` (its objects and options are set by
/// the caller): the path's resource and subresource, the kind of its objects, the name and
/// namespace of the path (a Namespace's own name for requests on one), the user.
pub(crate) fn review<'a>(
    shared: &Shared,
    target: &'a Target,
    operation: Operation,
    headers: &HeaderMap,
) -> admission::Request<'a> {
    let kind = match discovery::known(shared, &target.resource) {
        discovery::Known::Builtin(b) => b.kind.to_string(),
        discovery::Known::Custom(c) => c.kind,
        discovery::Known::Unknown => shared.store.kind_of(&target.resource),
    };
    let namespace = if store::is_namespace(&target.resource) {
        target.name.as_deref()
    } else {
        target.namespace.as_deref()
    };
    admission::Request {
        operation,
        resource: &target.resource,
        kind,
        kind_group_version: None,
        subresource: target.subresource.as_deref(),
        namespace: namespace.unwrap_or("").to_string(),
        name: target.name.clone().unwrap_or_default(),
        object: None,
        old_object: None,
        options: Value::Null,
        dry_run: false,
        user: UserInfo::from_headers(headers),
        warnings: Vec::new(),
    }
}

/// The review of a create of `obj` (a POST, or an apply that creates).
fn create_review<'a>(
    shared: &Shared,
    target: &'a Target,
    headers: &HeaderMap,
    options: &WriteOptions,
    obj: &Value,
) -> admission::Request<'a> {
    let mut review = review(shared, target, Operation::Create, headers);
    review.name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    review.object = Some(obj.clone());
    review.dry_run = options.dry_run;
    let manager = if options.explicit_manager {
        options.manager.as_str()
    } else {
        ""
    };
    review.options = admission::Request::write_options("CreateOptions", manager, options.dry_run);
    review
}

/// The review of an update of `old` to `obj` (a PUT, a patch, an apply).
pub(crate) fn update_review<'a>(
    shared: &Shared,
    target: &'a Target,
    headers: &HeaderMap,
    options: &WriteOptions,
    (old, obj): (&Value, Value),
) -> admission::Request<'a> {
    let mut review = review(shared, target, Operation::Update, headers);
    review.object = Some(obj);
    review.old_object = Some(old.clone());
    review.dry_run = options.dry_run;
    let manager = if options.explicit_manager {
        options.manager.as_str()
    } else {
        ""
    };
    review.options = admission::Request::write_options("UpdateOptions", manager, options.dry_run);
    review
}

/// Runs the mutating webhooks of `review`; the object they leave.
pub(crate) async fn mutated(
    shared: &Shared,
    review: &mut admission::Request<'_>,
) -> Result<Value, Response> {
    admission::mutate(shared, review).await?;
    // Taken: `validated` gives the review the object as it is about to be stored.
    Ok(review.object.take().unwrap_or(Value::Null))
}

/// Runs the validating webhooks of `review` on `obj`, the object about to be stored.
pub(crate) async fn validated(
    shared: &Shared,
    review: &mut admission::Request<'_>,
    obj: &Value,
) -> Result<(), Response> {
    review.object = Some(obj.clone());
    admission::validate(shared, review).await
}

/// `response` with one `Warning` header per warning (`299 - "text"`), as the API server sends
/// them.
pub(crate) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(value) = axum::http::HeaderValue::from_str(&format!("299 - \"{text}\"")) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

/// Stores a new object, or with `dryRun` only says what would be stored.
fn commit_create(shared: &Shared, obj: Value, dry_run: bool) -> Result<Value, StoreError> {
    if dry_run {
        dry_run_create(shared, obj)
    } else {
        shared.store.create(obj)
    }
}

/// Stores an update of `current`, or with `dryRun` only says what would be stored. An update
/// that changes nothing is not written, as etcd is not: no resourceVersion, no watch event.
pub(crate) fn commit_update(
    shared: &Shared,
    current: &Value,
    obj: Value,
    dry_run: bool,
) -> Result<Value, StoreError> {
    if obj == *current {
        return Ok(obj);
    }
    if dry_run {
        dry_run_update(current, obj)
    } else {
        shared.store.update(obj, true)
    }
}

/// The API server's defaults of a built-in kind, as every write decodes the object: a create,
/// an update (a field left out of a PUT comes back defaulted, not as a change), a patch's
/// result, an apply ([`crate::defaults`], shared with the `dir:` source).
pub(crate) fn default_built_in(obj: &mut Value) {
    let text = |p: &str| {
        obj.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let (api_version, kind) = (text("/apiVersion"), text("/kind"));
    let (group, version) = split_api_version(&api_version);
    crate::defaults::apply_defaults(group, version, &kind, obj);
}

/// POST to a collection.
pub(crate) async fn create(
    shared: &Shared,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let options = match WriteOptions::parse(query, headers, "CreateOptions") {
        Ok(options) => options,
        Err(e) => return e.into_response(),
    };
    let mut obj = match read_object(body).await {
        Ok(obj) => obj,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = conform(shared, target, &mut obj) {
        return e.into_response();
    }
    if let Some(e) = refuse_create(shared, target) {
        return e;
    }
    default_built_in(&mut obj);
    let mut review = create_review(shared, target, headers, &options, &obj);
    obj = match mutated(shared, &mut review).await {
        Ok(obj) => obj,
        Err(refused) => return refused,
    };
    let mut warnings =
        match validation::validate(shared, target, &mut obj, options.field_validation) {
            Ok(warnings) => warnings,
            Err(e) => return with_warnings(e.into_response(), &review.warnings),
        };
    let writer = Writer {
        manager: &options.manager,
        status: false,
        separate_status: separate_status(shared, target),
        ty: type_of(shared, target),
    };
    apply::record_update(None, &mut obj, &writer);
    if let Err(refused) = validated(shared, &mut review, &obj).await {
        return refused;
    }
    warnings.extend(review.warnings);
    match commit_create(shared, obj, options.dry_run) {
        Ok(created) => with_warnings(
            json_response(StatusCode::CREATED, created.to_string()),
            &warnings,
        ),
        Err(e) => store_error(&e),
    }
}

/// PUT of an object (or of its status).
pub(crate) async fn replace(
    shared: &Shared,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let status_only = match check_subresource(shared, target) {
        Ok(status_only) => status_only,
        Err(e) => return e.into_response(),
    };
    let options = match WriteOptions::parse(query, headers, "UpdateOptions") {
        Ok(options) => options,
        Err(e) => return e.into_response(),
    };
    let mut sent = match read_object(body).await {
        Ok(obj) => obj,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = conform(shared, target, &mut sent) {
        return e.into_response();
    }
    let mut warnings = Vec::new();
    if !status_only {
        default_built_in(&mut sent);
        match validation::validate(shared, target, &mut sent, options.field_validation) {
            Ok(w) => warnings = w,
            Err(e) => return e.into_response(),
        }
    }
    let name = target.name.as_deref().unwrap_or("");
    let explicit_rv = sent
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .is_some_and(|rv| !rv.is_empty());
    let writer = Writer {
        manager: &options.manager,
        status: status_only,
        separate_status: separate_status(shared, target),
        ty: type_of(shared, target),
    };
    for _ in 0..PATCH_ATTEMPTS {
        let Some(current) = shared
            .store
            .get(&target.resource, target.namespace.as_deref(), name)
        else {
            return not_found(target, name);
        };
        let current = current.value();
        let mut review = update_review(shared, target, headers, &options, (&current, sent.clone()));
        let mut obj = match mutated(shared, &mut review).await {
            Ok(obj) => obj,
            Err(refused) => return refused,
        };
        if obj != sent && !status_only {
            match validation::validate(shared, target, &mut obj, options.field_validation) {
                Ok(w) => warnings = w,
                Err(e) => return with_warnings(e.into_response(), &review.warnings),
            }
        }
        if status_only {
            obj = status_update(shared, target, &current, obj);
            match validation::validate_status(shared, target, &mut obj, options.field_validation) {
                Ok(w) => warnings = w,
                Err(e) => return e.into_response(),
            }
        } else {
            keep_on_update(shared, target, &current, &mut obj);
        }
        if !explicit_rv {
            // Pin the version the managedFields were computed from; retried on a race.
            if let (Ok(meta), Some(rv)) = (
                meta_mut(&mut obj),
                current.pointer("/metadata/resourceVersion"),
            ) {
                meta.insert("resourceVersion".into(), rv.clone());
            }
        }
        apply::record_update(Some(&current), &mut obj, &writer);
        if let Err(refused) = validated(shared, &mut review, &obj).await {
            return refused;
        }
        if let Some(answer) = answer_update(
            commit_update(shared, &current, obj, options.dry_run),
            explicit_rv,
        ) {
            let all: Vec<String> = warnings.iter().chain(&review.warnings).cloned().collect();
            return with_warnings(answer, &all);
        }
    }
    conflict_after_retries(target, name)
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(map) = target {
        for (key, value) in patch {
            if value.is_null() {
                map.remove(key);
            } else {
                merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

/// The patch formats PATCH understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

/// The patch format a Content-Type names (no strategic merge patch for custom resources).
pub(crate) fn patch_kind(content_type: &str, builtin: bool) -> Option<PatchKind> {
    match content_type.split(';').next().unwrap_or("").trim() {
        "application/merge-patch+json" => Some(PatchKind::Merge),
        "application/json-patch+json" => Some(PatchKind::Json),
        "application/strategic-merge-patch+json" if builtin => Some(PatchKind::Strategic),
        "application/apply-patch+yaml" => Some(PatchKind::Apply),
        _ => None,
    }
}

/// 415 naming the patch types this collection accepts: no strategic merge patch for custom
/// resources.
pub(crate) fn unsupported_patch(builtin: bool) -> Response {
    let accepted = if builtin {
        "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json, application/apply-patch+yaml"
    } else {
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    };
    error_response(
        415,
        "UnsupportedMediaType",
        &format!(
            "the body of the request was in an unknown format - accepted media types include: {accepted}"
        ),
    )
}

/// 409 for an apply that would take fields from other managers.
fn apply_error(e: ApplyError) -> Response {
    match e {
        ApplyError::Api(e) => e.into_response(),
        ApplyError::Conflict { message, causes } => {
            let body = status_body(409, "Conflict", &message, Some(json!({"causes": causes})));
            json_response(StatusCode::CONFLICT, body.to_string())
        }
    }
}

/// Parses a PATCH body: an object, or for JSON patch a list of operations; apply configurations
/// may be YAML.
pub(crate) fn parse_patch(kind: PatchKind, bytes: &[u8]) -> Result<Value, ApiError> {
    let parsed: Result<Value, String> = match serde_json::from_slice(bytes) {
        Ok(v) => Ok(v),
        Err(e) if kind == PatchKind::Apply => std::str::from_utf8(bytes)
            .map_err(|u| u.to_string())
            .and_then(|t| wisp_kinds::yaml::from_str::<Value>(t).map_err(|y| y.to_string()))
            .map_err(|y| format!("{e}; as YAML: {y}")),
        Err(e) => Err(e.to_string()),
    };
    let value = parsed.map_err(|e| match kind {
        PatchKind::Apply => ApiError::bad_request(format!("error decoding YAML: {e}")),
        _ => ApiError::bad_request(format!(
            "the body of the request was in an unknown format: {e}"
        )),
    })?;
    match (kind, &value) {
        (PatchKind::Json, _) => {
            patch::decode_json_patch(&value)?;
            Ok(value)
        }
        (_, Value::Object(_)) => Ok(value),
        _ => Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        )),
    }
}

/// Whether a patch itself names a resourceVersion (a precondition that must not be retried).
fn names_resource_version(kind: PatchKind, patch: &Value) -> bool {
    match kind {
        PatchKind::Json => patch.as_array().is_some_and(|ops| {
            ops.iter().any(|op| {
                op.get("path")
                    .and_then(Value::as_str)
                    .is_some_and(|p| p.starts_with("/metadata/resourceVersion"))
            })
        }),
        _ => patch.pointer("/metadata/resourceVersion").is_some(),
    }
}

/// An apply that creates its object: the configuration applied to nothing, admitted, validated
/// and stored. `None` when the object was created meanwhile (the apply then patches it).
async fn apply_create(
    shared: &Shared,
    target: &Target,
    headers: &HeaderMap,
    (options, writer): (&WriteOptions, &Writer<'_>),
    patch: &Value,
) -> Option<Response> {
    let mut config = patch.clone();
    if let Err(e) = conform(shared, target, &mut config) {
        return Some(e.into_response());
    }
    let mut obj = match apply::apply(None, &config, writer, options.force == Some(true)) {
        Ok(obj) => obj,
        Err(e) => return Some(apply_error(e)),
    };
    if let Err(e) = conform(shared, target, &mut obj) {
        return Some(e.into_response());
    }
    if let Some(e) = refuse_create(shared, target) {
        return Some(e);
    }
    default_built_in(&mut obj);
    let mut review = create_review(shared, target, headers, options, &obj);
    obj = match mutated(shared, &mut review).await {
        Ok(obj) => obj,
        Err(refused) => return Some(refused),
    };
    let mut warnings =
        match validation::validate(shared, target, &mut obj, options.field_validation) {
            Ok(warnings) => warnings,
            Err(e) => return Some(with_warnings(e.into_response(), &review.warnings)),
        };
    if let Err(refused) = validated(shared, &mut review, &obj).await {
        return Some(refused);
    }
    warnings.extend(review.warnings);
    match commit_create(shared, obj, options.dry_run) {
        Ok(created) => {
            let created = json_response(StatusCode::CREATED, created.to_string());
            Some(with_warnings(created, &warnings))
        }
        Err(StoreError::AlreadyExists { .. }) => None,
        Err(e) => Some(store_error(&e)),
    }
}

/// PATCH of an object (or of its status).
pub(crate) async fn patch(
    shared: &Shared,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let status_only = match check_subresource(shared, target) {
        Ok(status_only) => status_only,
        Err(e) => return e.into_response(),
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let builtin = is_builtin_group(&target.resource.group);
    let Some(kind) = patch_kind(content_type, builtin) else {
        return unsupported_patch(builtin);
    };
    let options = match WriteOptions::parse(query, headers, "PatchOptions") {
        Ok(options) => options,
        Err(e) => return e.into_response(),
    };
    if kind == PatchKind::Apply && !options.explicit_manager {
        return ApiError::invalid(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        )
        .into_response();
    }
    if kind != PatchKind::Apply && options.force.is_some() {
        return ApiError::invalid(
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
        )
        .into_response();
    }
    let patch = match read_bytes(body)
        .await
        .and_then(|bytes| parse_patch(kind, &bytes))
    {
        Ok(patch) => patch,
        Err(e) => return e.into_response(),
    };
    let name = target.name.as_deref().unwrap_or("");
    let explicit_rv = names_resource_version(kind, &patch);
    let writer = Writer {
        manager: &options.manager,
        status: status_only,
        separate_status: separate_status(shared, target),
        ty: type_of(shared, target),
    };
    for _ in 0..PATCH_ATTEMPTS {
        let Some(current) = shared
            .store
            .get(&target.resource, target.namespace.as_deref(), name)
        else {
            if kind != PatchKind::Apply {
                return not_found(target, name);
            }
            let write = (&options, &writer);
            match apply_create(shared, target, headers, write, &patch).await {
                Some(answer) => return answer,
                None => continue, // created meanwhile: patch it
            }
        };
        let live = &current.value();
        let result = match kind {
            PatchKind::Merge => {
                let mut patched = live.clone();
                merge_patch(&mut patched, &patch);
                Ok(patched)
            }
            PatchKind::Strategic => {
                patch::strategic_merge(live, &patch, writer.ty).map_err(ApplyError::Api)
            }
            PatchKind::Json => {
                let ops = patch.as_array().map(Vec::as_slice).unwrap_or_default();
                patch::json_patch(live, ops).map_err(|e| {
                    tracing::debug!(error = %e.0, "JSON patch does not apply");
                    ApplyError::Api(patch::unprocessable())
                })
            }
            PatchKind::Apply => {
                let mut config = patch.clone();
                if let Err(e) = conform(shared, target, &mut config) {
                    return e.into_response();
                }
                apply::apply(Some(live), &config, &writer, options.force == Some(true))
            }
        };
        let patched = match result {
            Ok(patched) => patched,
            Err(e) => return apply_error(e),
        };
        let mut review = update_review(shared, target, headers, &options, (live, patched));
        let mut patched = match mutated(shared, &mut review).await {
            Ok(patched) => patched,
            Err(refused) => return refused,
        };
        if status_only && kind != PatchKind::Apply {
            patched = status_update(shared, target, live, patched);
        } else if !status_only {
            keep_on_update(shared, target, live, &mut patched);
        }
        if let Err(e) = conform(shared, target, &mut patched) {
            return e.into_response();
        }
        if !status_only {
            default_built_in(&mut patched);
        }
        let checked = if status_only {
            validation::validate_status(shared, target, &mut patched, options.field_validation)
        } else {
            validation::validate(shared, target, &mut patched, options.field_validation)
        };
        let mut warnings = match checked {
            Ok(warnings) => warnings,
            Err(e) => return with_warnings(e.into_response(), &review.warnings),
        };
        if kind != PatchKind::Apply {
            apply::record_update(Some(live), &mut patched, &writer);
        }
        if let Err(refused) = validated(shared, &mut review, &patched).await {
            return refused;
        }
        warnings.extend(review.warnings);
        if let Some(answer) = answer_update(
            commit_update(shared, live, patched, options.dry_run),
            explicit_rv,
        ) {
            return with_warnings(answer, &warnings);
        }
    }
    conflict_after_retries(target, name)
}

/// The answer to a committed update, or `None` to read the object again and retry: a
/// conflict with a concurrent write, when the client named no resourceVersion.
fn answer_update(committed: Result<Value, StoreError>, explicit_rv: bool) -> Option<Response> {
    match committed {
        Ok(updated) => Some(json_response(StatusCode::OK, updated.to_string())),
        Err(StoreError::Conflict { .. }) if !explicit_rv => None,
        Err(e) => Some(store_error(&e)),
    }
}

/// The 409 Conflict of an update that kept meeting concurrent writes.
pub(crate) fn conflict_after_retries(target: &Target, name: &str) -> Response {
    store_error(&StoreError::Conflict {
        plural: target.resource.plural.clone(),
        name: name.to_string(),
    })
}

/// The DeleteOptions of a DELETE: from the query (`propagationPolicy`, `orphanDependents`,
/// `dryRun`), then from the body, which wins, as the API server decodes them. Returns them and
/// whether the delete is a dry run.
fn delete_options(query: &Query, body: &[u8]) -> Result<(DeleteOptions, bool), ApiError> {
    let mut policy = query.get("propagationPolicy").cloned();
    let mut orphan = query
        .get("orphanDependents")
        .map(|v| v == "true" || v == "1");
    let mut dry_runs: Vec<String> = query.get("dryRun").into_iter().cloned().collect();
    let mut options = DeleteOptions::default();
    if let Some(grace) = query.get("gracePeriodSeconds") {
        options.grace_period = Some(grace.parse().map_err(|_| {
            ApiError::bad_request(format!(
                "gracePeriodSeconds: Invalid value: {grace:?}: must be an integer"
            ))
        })?);
    }
    if !body.iter().all(u8::is_ascii_whitespace) {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body of the request was in an unknown format: {e}"
            ))
        })?;
        let Some(map) = value.as_object() else {
            return Err(ApiError::bad_request(
                "the body of the request must be a DeleteOptions object",
            ));
        };
        if let Some(kind) = map.get("kind").and_then(Value::as_str)
            && kind != "DeleteOptions"
        {
            return Err(ApiError::bad_request(format!(
                "no kind \"{kind}\" is registered for the body of a DELETE (expected DeleteOptions)"
            )));
        }
        if let Some(p) = map.get("propagationPolicy").and_then(Value::as_str) {
            policy = Some(p.to_string());
        }
        if let Some(o) = map.get("orphanDependents").and_then(Value::as_bool) {
            orphan = Some(o);
        }
        if let Some(grace) = map.get("gracePeriodSeconds").and_then(Value::as_i64) {
            options.grace_period = Some(grace);
        }
        // kube sends dryRun in the body.
        if let Some(list) = map.get("dryRun").and_then(Value::as_array) {
            dry_runs.extend(list.iter().filter_map(Value::as_str).map(str::to_string));
        }
        let pre = |field: &str| {
            map.get("preconditions")
                .and_then(|p| p.get(field))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        options.uid = pre("uid");
        options.resource_version = pre("resourceVersion");
    }
    let dry_run = dry_run(dry_runs, "DeleteOptions")?;
    let invalid = |detail: String| {
        ApiError::invalid(format!(
            "DeleteOptions.meta.k8s.io \"\" is invalid: {detail}"
        ))
    };
    options.propagation = match (policy.as_deref(), orphan) {
        (Some(p), Some(_)) => {
            return Err(invalid(format!(
                "propagationPolicy: Invalid value: \"{p}\": orphanDependents and deletionPropagation cannot be both set"
            )));
        }
        (None, None) => None,
        (Some("Foreground"), None) | (None, Some(false)) => Some(Propagation::Foreground),
        (Some("Background"), None) => Some(Propagation::Background),
        (Some("Orphan"), None) | (None, Some(true)) => Some(Propagation::Orphan),
        (Some(other), None) => {
            return Err(invalid(format!(
                "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
            )));
        }
    };
    Ok((options, dry_run))
}

/// DELETE of an object, with DeleteOptions from the query and the body (JSON or YAML):
/// preconditions (409 Conflict on a mismatch), the propagation policy and `dryRun` (answered
/// with the object as it is, nothing changed). An object without finalizers goes at once: 200
/// with its last state for the kinds whose registry returns it (Pod, Service, ServiceAccount,
/// StorageClass), else (custom resources too) 200 with a Status Success naming it. One with
/// finalizers, one deleted with propagationPolicy Foreground or Orphan, and a Namespace, is
/// marked with `deletionTimestamp` (and the `foregroundDeletion` or `orphan` finalizer) and
/// stays until they are gone: 200 with the state the DELETE left it in.
pub(crate) async fn delete(
    shared: &Arc<Shared>,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    let name = target.name.as_deref().unwrap_or("");
    if target.subresource.is_some() {
        return error_response(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        );
    }
    if store::is_namespace(&target.resource) && IMMORTAL_NAMESPACES.contains(&name) {
        // The NamespaceLifecycle admission.
        return ApiError::with_details(
            403,
            "Forbidden",
            format!("namespaces {name:?} is forbidden: this namespace may not be deleted"),
            json!({"name": name, "kind": "namespaces"}),
        )
        .into_response();
    }
    let bytes = match read_bytes(body).await {
        Ok(bytes) => bytes,
        Err(e) => return e.into_response(),
    };
    let (options, dry_run) = match delete_options(query, &bytes) {
        Ok(options) => options,
        Err(e) => return e.into_response(),
    };
    let Some(current) = shared
        .store
        .get(&target.resource, target.namespace.as_deref(), name)
    else {
        return not_found(target, name);
    };
    let mut review = delete_review(
        shared,
        target,
        headers,
        (&options, dry_run),
        &current.value(),
    );
    if let Err(refused) = admit_delete(shared, &mut review).await {
        return refused;
    }
    if dry_run {
        return with_warnings(
            json_response(StatusCode::OK, current.json.clone()),
            &review.warnings,
        );
    }
    let state = match shared.store.delete(
        &target.resource,
        target.namespace.as_deref(),
        name,
        &options,
    ) {
        Ok(state) => state,
        Err(e) => return store_error(&e),
    };
    end_grace_later(shared, &target.resource, &state);
    let answer = answer_delete(shared, target, name, state);
    with_warnings(answer, &review.warnings)
}

/// The review of a DELETE of `old` (kube-apiserver's `AdmissionToValidateObjectDeleteFunc`:
/// mutating and validating webhooks alike see the stored object as `oldObject` and no
/// `object`), with its DeleteOptions.
fn delete_review<'a>(
    shared: &Shared,
    target: &'a Target,
    headers: &HeaderMap,
    (options, dry_run): (&DeleteOptions, bool),
    old: &Value,
) -> admission::Request<'a> {
    // An item of a deletecollection keeps the collection's empty name and the path's
    // namespace, as the registry's DeleteCollection admits it with the request's attributes.
    let mut review = review(shared, target, Operation::Delete, headers);
    review.old_object = Some(old.clone());
    review.dry_run = dry_run;
    let mut json_options = json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"});
    if let Some(grace) = options.grace_period {
        json_options["gracePeriodSeconds"] = json!(grace);
    }
    if let Some(policy) = options.propagation {
        json_options["propagationPolicy"] = json!(match policy {
            Propagation::Foreground => "Foreground",
            Propagation::Background => "Background",
            Propagation::Orphan => "Orphan",
        });
    }
    let mut preconditions = serde_json::Map::new();
    if let Some(uid) = &options.uid {
        preconditions.insert("uid".into(), json!(uid));
    }
    if let Some(rv) = &options.resource_version {
        preconditions.insert("resourceVersion".into(), json!(rv));
    }
    if !preconditions.is_empty() {
        json_options["preconditions"] = Value::Object(preconditions);
    }
    if dry_run {
        json_options["dryRun"] = json!(["All"]);
    }
    review.options = json_options;
    review
}

/// Admission of a delete: the mutating webhooks (a patch is refused: there is no object),
/// then the validating ones.
async fn admit_delete(
    shared: &Shared,
    review: &mut admission::Request<'_>,
) -> Result<(), Response> {
    admission::mutate(shared, review).await?;
    admission::validate(shared, review).await
}

/// The answer to a DELETE that did what it asked: the object as the delete left it, or a
/// Status Success.
fn answer_delete(shared: &Shared, target: &Target, name: &str, state: Value) -> Response {
    // Deleted at once, or marked (finalizers, a propagation policy's GC finalizer, a grace
    // period): a marked object is answered as it is, whatever the kind.
    let immediate = state.pointer("/metadata/deletionTimestamp").is_none();
    if immediate && !discovery::returns_deleted_object(shared, &target.resource) {
        // What the registry answers for a kind without ReturnDeletedObject.
        let status = serde_json::json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": name,
                "group": target.resource.group,
                "kind": target.resource.plural,
                "uid": state.pointer("/metadata/uid").cloned().unwrap_or(Value::Null),
            },
        });
        return json_response(StatusCode::OK, status.to_string());
    }
    json_response(StatusCode::OK, state.to_string())
}

/// After a DELETE that left a Pod in its grace period (`deletionGracePeriodSeconds` above 0):
/// ends it once the kubelet has stopped the Pod, after the grace period or the
/// [`pod_stop_time`](super::Faults::pod_stop_time), whichever is shorter. Needs a tokio runtime
/// (without one the Pod stays marked).
fn end_grace_later(shared: &Arc<Shared>, resource: &ResourceKey, state: &Value) {
    let Some(grace) = state
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_u64)
        .filter(|g| *g > 0)
    else {
        return;
    };
    let text = |f: &str| {
        state
            .pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let (Some(stamp), Some(name), Ok(runtime)) = (
        text("deletionTimestamp"),
        text("name"),
        tokio::runtime::Handle::try_current(),
    ) else {
        return;
    };
    let namespace = text("namespace");
    let wait = shared.faults.pod_termination(Duration::from_secs(grace));
    let (shared, resource) = (Arc::clone(shared), resource.clone());
    let mut shutdown = shared.shutdown.clone();
    // Not joined: the kubelet's work outlives the request; it ends with the server.
    drop(runtime.spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(wait) => {
                shared.store.end_grace(&resource, namespace.as_deref(), &name, &stamp);
            }
            _ = shutdown.changed() => {}
        }
    }));
}

/// DELETE of a collection (`deletecollection`): lists what the request selects
/// (`labelSelector`, `fieldSelector`, its namespace) and deletes each object as a DELETE of it
/// with the same DeleteOptions would (finalizers, propagation policy; nothing with `dryRun`).
/// Answers, as the registry does, with the list of the selected objects as they were listed.
/// Each item is admitted as a DELETE before it goes; a refusal answers the request, the items
/// before it gone. Namespaces have no `deletecollection` (405).
pub(crate) async fn delete_collection(
    shared: &Arc<Shared>,
    target: &Target,
    query: &Query,
    headers: &HeaderMap,
    body: Body,
) -> Response {
    if let Err(e) = validation::scope(shared, target) {
        return e.into_response();
    }
    if store::is_namespace(&target.resource) {
        return error_response(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        );
    }
    let bytes = match read_bytes(body).await {
        Ok(bytes) => bytes,
        Err(e) => return e.into_response(),
    };
    let (options, dry_run) = match delete_options(query, &bytes) {
        Ok(options) => options,
        Err(e) => return e.into_response(),
    };
    let filter = match super::selector::Filter::from_request(shared, target, query) {
        Ok(filter) => filter,
        Err(e) => return ApiError::bad_request(e).into_response(),
    };
    let snapshot = match shared.store.list(
        &target.resource,
        target.namespace.as_deref(),
        super::store::ReadAt::Latest,
    ) {
        Ok(snapshot) => snapshot,
        Err(_) => {
            return ApiError::bad_request("the collection could not be listed").into_response();
        }
    };
    let items: Vec<Value> = snapshot
        .objects
        .iter()
        .filter(|o| filter.matches_stored(o))
        .map(|o| o.value())
        .collect();
    let mut warnings = Vec::new();
    for item in &items {
        // Each item is admitted as a DELETE of it, as the registry's DeleteCollection does.
        let mut review = delete_review(shared, target, headers, (&options, dry_run), item);
        if let Err(refused) = admit_delete(shared, &mut review).await {
            return refused;
        }
        warnings.extend(review.warnings);
        if dry_run {
            continue;
        }
        let namespace = item.pointer("/metadata/namespace").and_then(Value::as_str);
        let name = item
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        match shared
            .store
            .delete(&target.resource, namespace, name, &options)
        {
            Ok(state) => end_grace_later(shared, &target.resource, &state),
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => return store_error(&e),
        }
    }
    let list = json!({
        "kind": format!("{}List", shared.store.kind_of(&target.resource)),
        "apiVersion": target.resource.api_version(),
        "metadata": {"resourceVersion": snapshot.rv.to_string()},
        "items": items,
    });
    with_warnings(json_response(StatusCode::OK, list.to_string()), &warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}}));
        merge_patch(&mut doc, &json!({"c": ["x"]}));
        assert_eq!(doc, json!({"a": "z", "c": ["x"]}));
    }
}
