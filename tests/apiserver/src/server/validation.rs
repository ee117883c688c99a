//! The API server's answers to objects it refuses: 422 Invalid with `details.causes` (one per
//! field error, with its field path) and the message `<Kind> "<name>" is invalid: <errors>`, the
//! checks themselves being this crate's ([`crate::validation`], shared with the `dir:`
//! source). The scope: a namespaced kind is only created under `namespaces/{ns}/`, a
//! cluster-scoped one never is.
//!
//! Custom resources are defaulted, pruned and validated by the `openAPIV3Schema` of their
//! CRD's version ([`crate::schema`]), on every write and on status writes too. The
//! fields pruned are unknown fields: with `fieldValidation=Strict` the write is refused (400
//! `strict decoding error: unknown field "spec.x"`), with `Warn` (the default, as
//! apiserver's `handlers/rest.go` `fieldValidation` makes it) each is named in a `Warning`
//! header, with `Ignore` they go silently. Built-in kinds have no schema here: their unknown
//! fields are not detected (every value is `Ignore`). A CRD whose schema does not compile is
//! refused (422, naming where in the schema).

use crate::schema::{Schema, crd_schema_errors, crd_version_schema};
use crate::validation::{FieldError, field_errors, message, update_errors};
use serde_json::{Value, json};

use super::Shared;
use super::discovery::{crd_resource, known};
use super::http::Target;
use super::resource::ResourceKey;
use super::status::ApiError;

/// How a write asks unknown fields to be treated (`fieldValidation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum FieldValidation {
    /// Pruned silently.
    Ignore,
    /// Pruned, each named in a `Warning` header (the server's default).
    #[default]
    Warn,
    /// The write is refused with 400 BadRequest.
    Strict,
}

impl FieldValidation {
    /// The mode a `fieldValidation` value (already checked) asks for; `""` is `Warn`.
    pub(crate) fn parse(value: &str) -> Self {
        match value {
            "Ignore" => FieldValidation::Ignore,
            "Strict" => FieldValidation::Strict,
            _ => FieldValidation::Warn,
        }
    }
}

/// The CustomResourceDefinition that serves `resource`, if one is stored.
fn crd_of(shared: &Shared, resource: &ResourceKey) -> Option<Value> {
    shared
        .store
        .objects(&crd_resource())
        .into_iter()
        .find(|crd| {
            crd.pointer("/spec/group").and_then(Value::as_str) == Some(resource.group.as_str())
                && crd.pointer("/spec/names/plural").and_then(Value::as_str)
                    == Some(resource.plural.as_str())
        })
}

/// Defaults, prunes and validates `obj` by the schema of its CRD version, if it is a custom
/// resource with one. Returns the warnings to send and the schema's field errors; a pruned
/// field under `Strict` is the 400 of a strict decoding error.
fn by_schema(
    shared: &Shared,
    target: &Target,
    obj: &mut Value,
    mode: FieldValidation,
) -> Result<(Vec<String>, Vec<FieldError>), ApiError> {
    let Some(crd) = crd_of(shared, &target.resource) else {
        return Ok(Default::default());
    };
    // A schema that does not compile was refused with its CRD (seeded CRDs are not checked).
    let Some(Ok(schema)) = crd_version_schema(&crd, &target.resource.version).map(Schema::compile)
    else {
        return Ok(Default::default());
    };
    let admission = schema.admit(obj);
    let unknown: Vec<String> = admission
        .pruned
        .iter()
        .map(|p| format!("unknown field {p:?}"))
        .collect();
    match mode {
        FieldValidation::Strict if !unknown.is_empty() => {
            let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
            // apiserver handlers/create.go: a decode error of the body.
            Err(ApiError::bad_request(format!(
                "{kind} in version {:?} cannot be handled as a {kind}: strict decoding error: {}",
                target.resource.version,
                unknown.join(", ")
            )))
        }
        FieldValidation::Warn => Ok((unknown, admission.errors)),
        _ => Ok((Vec::new(), admission.errors)),
    }
}

/// Defaults, prunes and validates the object a `status` write would store (the whole object:
/// only its status is the request's), as the status strategy of custom resources does.
/// Returns the warnings to send.
pub(crate) fn validate_status(
    shared: &Shared,
    target: &Target,
    obj: &mut Value,
    mode: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let (warnings, errs) = by_schema(shared, target, obj, mode)?;
    if errs.is_empty() {
        Ok(warnings)
    } else {
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        Err(invalid(&target.resource.group, kind, name, &errs))
    }
}

/// The 422 Invalid answer for `errs`.
pub(crate) fn invalid(group: &str, kind: &str, name: &str, errs: &[FieldError]) -> ApiError {
    let causes: Vec<Value> = errs
        .iter()
        .map(|e| json!({"reason": e.reason, "message": e.body, "field": e.field}))
        .collect();
    ApiError::with_details(
        422,
        "Invalid",
        message(group, kind, name, errs),
        json!({"name": name, "group": group, "kind": kind, "causes": causes}),
    )
}

/// Checks the scope of a write against the kind: 405 for a namespaced kind written outside a
/// namespace, 404 for a cluster-scoped kind written under one.
pub(crate) fn scope(shared: &Shared, target: &Target) -> Result<(), ApiError> {
    match (
        known(shared, &target.resource).namespaced(),
        &target.namespace,
    ) {
        (Some(true), None) => Err(ApiError {
            code: 405,
            reason: "MethodNotAllowed",
            message: "the server does not allow this method on the requested resource".into(),
            details: None,
        }),
        (Some(false), Some(_)) => Err(ApiError::not_found(
            "the server could not find the requested resource",
        )),
        _ => Ok(()),
    }
}

/// Validates an object about to be created or replaced through `target` (after the path has
/// filled its apiVersion, kind and namespace); a custom resource is first defaulted and
/// pruned by its schema. A namespace in the body of a cluster-scoped kind is cleared, as the
/// API server does. Returns the warnings to send.
pub(crate) fn validate(
    shared: &Shared,
    target: &Target,
    obj: &mut Value,
    mode: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    scope(shared, target)?;
    if known(shared, &target.resource).namespaced() == Some(false)
        && let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.remove("namespace");
    }
    let (warnings, schema_errs) = by_schema(shared, target, obj, mode)?;
    let obj = &*obj;
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let group = &target.resource.group;
    let mut errs = field_errors(group, kind, obj);
    errs.extend(schema_errs);
    if target.resource == crd_resource() {
        errs.extend(crd_schema_errors(obj));
    }
    // A replace is also checked against the object it replaces.
    if let Some(old) = target.name.as_deref().and_then(|n| {
        shared
            .store
            .get(&target.resource, target.namespace.as_deref(), n)
    }) {
        errs.extend(update_errors(group, kind, &old.value(), obj));
    }
    if errs.is_empty() {
        Ok(warnings)
    } else {
        Err(invalid(group, kind, name, &errs))
    }
}
