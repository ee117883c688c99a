//! Admission webhooks, called as kube-apiserver's MutatingAdmissionWebhook and
//! ValidatingAdmissionWebhook plugins call them (k8s.io/apiserver
//! pkg/admission/plugin/webhook): every write over HTTP asks the stored
//! `admissionregistration.k8s.io/v1` MutatingWebhookConfigurations, then, once the object is
//! defaulted and validated, the ValidatingWebhookConfigurations.
//!
//! - `hooks`: the configurations' webhooks in order, and which of them a request calls
//!   (rules, namespaceSelector, objectSelector, matchPolicy)
//! - `review`: the AdmissionReview sent, the answer checked, a denial's Status
//! - `call`: the HTTPS POST (caBundle, service resolution, timeout)
//!
//! Mutating webhooks run one after the other, each JSON patch applied and the object defaulted
//! again; a webhook with `reinvocationPolicy: IfNeeded` is called once more when a later one
//! changed the object. Validating webhooks run concurrently; the first refusal in their order
//! is the answer. A call that fails (unreachable, timed out, a malformed answer) refuses the
//! request with 500 InternalError `failed calling webhook "NAME": ...` unless the webhook's
//! `failurePolicy` is `Ignore`. Warnings become `Warning` headers.

mod call;
mod hooks;
mod review;

use std::collections::HashSet;

use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Shared;
use super::resource::{ResourceKey, new_uid};
use super::status::{ApiError, json_response};
use hooks::{Hook, Invocation, internal_error};

/// An admission operation (CONNECT is not served).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    /// As rules and reviews spell it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// Who made a request, as the review's `userInfo` says. The server authenticates nobody: the
/// user is the one kubectl's `--as` asks for (`Impersonate-User`, `Impersonate-Group`,
/// `Impersonate-Uid`, `Impersonate-Extra-*`), else [`UserInfo::ADMIN`] (`system:admin` in
/// `system:masters`), the user a cluster's admin kubeconfig would be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UserInfo {
    pub username: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: Vec<(String, Vec<String>)>,
}

impl UserInfo {
    /// The user of a request without impersonation headers.
    pub(crate) const ADMIN: &'static str = "system:admin";

    /// The request's user (see [`UserInfo`]).
    pub(crate) fn from_headers(headers: &HeaderMap) -> Self {
        let values = |name: &str| -> Vec<String> {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_string)
                .collect()
        };
        let Some(username) = values("impersonate-user").into_iter().next() else {
            return UserInfo {
                username: Self::ADMIN.into(),
                uid: String::new(),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
                extra: Vec::new(),
            };
        };
        let mut groups = values("impersonate-group");
        if !groups.iter().any(|g| g == "system:authenticated") {
            groups.push("system:authenticated".into());
        }
        let mut extra: Vec<(String, Vec<String>)> = Vec::new();
        for name in headers.keys() {
            if let Some(key) = name.as_str().strip_prefix("impersonate-extra-") {
                extra.push((key.to_string(), values(name.as_str())));
            }
        }
        UserInfo {
            username,
            uid: values("impersonate-uid")
                .into_iter()
                .next()
                .unwrap_or_default(),
            groups,
            extra,
        }
    }

    fn to_json(&self) -> Value {
        let mut user = json!({"username": self.username, "groups": self.groups});
        if !self.uid.is_empty() {
            user["uid"] = json!(self.uid);
        }
        if !self.extra.is_empty() {
            user["extra"] = self
                .extra
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
                .into();
        }
        user
    }
}

/// One write as admission sees it (`admission.Attributes`).
#[derive(Debug, Clone)]
pub(crate) struct Request<'a> {
    pub operation: Operation,
    /// The resource of the request's path.
    pub resource: &'a ResourceKey,
    /// The kind of its objects (in the resource's group and version).
    pub kind: String,
    /// The group and version of that kind when they are not the resource's: a Scale's
    /// (`autoscaling`, `v1`) for the `scale` subresource.
    pub kind_group_version: Option<(&'static str, &'static str)>,
    /// `status`, `scale`, ...
    pub subresource: Option<&'a str>,
    /// The request's namespace; a Namespace's own name for requests on one; empty otherwise.
    pub namespace: String,
    /// The object's name (empty for a create with `generateName`).
    pub name: String,
    /// The new object (none for a DELETE); mutating webhooks change it.
    pub object: Option<Value>,
    /// The stored object (updates and deletes).
    pub old_object: Option<Value>,
    /// CreateOptions, UpdateOptions or DeleteOptions, as the review's `options`.
    pub options: Value,
    /// `dryRun=All`.
    pub dry_run: bool,
    /// Who asked.
    pub user: UserInfo,
    /// The webhooks' warnings, in the order they came.
    pub warnings: Vec<String>,
}

impl Request<'_> {
    /// The review's `options` for a create or update (`CreateOptions` / `UpdateOptions`).
    pub(crate) fn write_options(kind: &str, manager: &str, dry_run: bool) -> Value {
        let mut options = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
        if dry_run {
            options["dryRun"] = json!(["All"]);
        }
        if !manager.is_empty() {
            options["fieldManager"] = json!(manager);
        }
        options
    }
}

/// Why a webhook did not let a request through.
enum Failure {
    /// The call failed (`ErrCallingWebhook`): the request goes on under `failurePolicy:
    /// Ignore`, else is refused with 500 InternalError and this message.
    Calling(String),
    /// An answer that refuses the request whatever the failure policy.
    Refused(Response),
}

/// The configurations' own kinds are never sent to webhooks
/// (`IsExemptAdmissionConfigurationResource`).
fn exempt(req: &Request<'_>) -> bool {
    req.resource.group == "admissionregistration.k8s.io"
        && matches!(
            req.kind.as_str(),
            "ValidatingWebhookConfiguration"
                | "MutatingWebhookConfiguration"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
                | "MutatingAdmissionPolicy"
                | "MutatingAdmissionPolicyBinding"
        )
}

/// The refusal of a webhook whose rules match but whose `matchConditions` this server cannot
/// evaluate: 403 Forbidden, as an evaluation error fails closed.
fn match_conditions_refusal(hook: &Hook, req: &Request<'_>) -> ApiError {
    let name = &req.name;
    ApiError::with_details(
        403,
        "Forbidden",
        format!(
            "{} {name:?} is forbidden: webhook {:?}: matchConditions are not evaluated by the test API server",
            qualified(req.resource),
            hook.name
        ),
        json!({"name": name, "group": req.resource.group, "kind": req.resource.plural}),
    )
}

fn qualified(resource: &ResourceKey) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// Which webhooks of `hooks` the request calls, and as what.
fn matching<'h>(
    shared: &Shared,
    hooks: &'h [Hook],
    req: &Request<'_>,
) -> Result<Vec<(&'h Hook, Invocation)>, ApiError> {
    let mut out = Vec::new();
    for hook in hooks {
        match hook.invocation(shared, req) {
            Ok(Some(_)) if hook.match_conditions => {
                return Err(match_conditions_refusal(hook, req));
            }
            Ok(Some(inv)) => out.push((hook, inv)),
            Ok(None) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Runs the mutating webhooks on `req.object`, in order, with one reinvocation round for the
/// `IfNeeded` ones a later webhook's change concerns. `req.object` ends as they left it,
/// defaulted; their warnings are in `req.warnings`.
pub(crate) async fn mutate(shared: &Shared, req: &mut Request<'_>) -> Result<(), Response> {
    let result = mutate_all(shared, req).await;
    result.map_err(|refusal| super::write::with_warnings(refusal, &req.warnings))
}

async fn mutate_all(shared: &Shared, req: &mut Request<'_>) -> Result<(), Response> {
    if exempt(req) {
        return Ok(());
    }
    let hooks = hooks::load(shared, true);
    if hooks.is_empty() {
        return Ok(());
    }
    // Invoked IfNeeded webhooks a later change would reinvoke; those it does.
    let mut invoked: HashSet<String> = HashSet::new();
    let mut reinvoke: HashSet<String> = HashSet::new();
    let mut another_round = false;
    for round in 0..2 {
        if round == 1 && !another_round {
            break;
        }
        for hook in &hooks {
            let found = matching(shared, std::slice::from_ref(hook), req);
            let Some(inv) = found.map_err(IntoResponse::into_response)?.pop() else {
                continue;
            };
            if round == 1 && !reinvoke.contains(&hook.uid) {
                continue;
            }
            let changed = match call_mutating(shared, hook, &inv.1, req).await {
                Ok(changed) => changed,
                Err(Failure::Calling(message)) if hook.ignore_failures => {
                    tracing::warn!(webhook = %hook.name, %message, "failed calling webhook, failing open");
                    false
                }
                Err(Failure::Calling(message)) => {
                    return Err(internal_error(&message).into_response());
                }
                Err(Failure::Refused(response)) => return Err(response),
            };
            if changed {
                reinvoke.extend(invoked.drain());
                another_round = true;
            }
            if hook.reinvoke_if_needed {
                invoked.insert(hook.uid.clone());
            }
        }
    }
    Ok(())
}

/// The refusal of a dry run by a webhook that may have side effects, or `None`.
fn side_effects(hook: &Hook, req: &Request<'_>) -> Option<Failure> {
    if !req.dry_run {
        return None;
    }
    match hook.side_effects.as_deref() {
        None => Some(Failure::Calling(format!(
            "failed calling webhook {:?}: Webhook SideEffects is nil",
            hook.name
        ))),
        Some("None" | "NoneOnDryRun") => None,
        Some(_) => Some(Failure::Refused(
            ApiError::bad_request(format!(
                "admission webhook {:?} does not support dry run",
                hook.name
            ))
            .into_response(),
        )),
    }
}

/// `obj` in the version `resource` names (an equivalent resource's): converted for built-ins,
/// relabelled for custom resources (served alike in every version).
fn in_version(obj: &Value, resource: &ResourceKey) -> Result<Value, String> {
    let api_version = resource.api_version();
    if obj.get("apiVersion").and_then(Value::as_str) == Some(api_version.as_str()) {
        return Ok(obj.clone());
    }
    if super::patch::is_builtin_group(&resource.group) {
        return crate::convert::convert(obj, &api_version);
    }
    let mut out = obj.clone();
    out["apiVersion"] = json!(api_version);
    Ok(out)
}

/// Calls one webhook, the review sent and its answer checked: its raw answer, or why not.
async fn exchange(
    shared: &Shared,
    hook: &Hook,
    inv: &Invocation,
    req: &Request<'_>,
    mutating: bool,
) -> Result<review::Answer, Failure> {
    if let Some(refusal) = side_effects(hook, req) {
        return Err(refusal);
    }
    let calling = |reason: String| {
        Failure::Calling(format!("failed calling webhook {:?}: {reason}", hook.name))
    };
    let version = review::version(&hook.review_versions).map_err(calling)?;
    let convert = |o: &Option<Value>| match o {
        Some(o) if inv.resource != *req.resource => in_version(o, &inv.resource).map(Some),
        other => Ok(other.clone()),
    };
    let (object, old) = match (convert(&req.object), convert(&req.old_object)) {
        (Ok(object), Ok(old)) => (object, old),
        (Err(e), _) | (_, Err(e)) => {
            return Err(Failure::Refused(internal_error(&e).into_response()));
        }
    };
    let uid = new_uid();
    let body = review::request(&uid, version, inv, req, object.as_ref(), old.as_ref());
    let answer = call::post(shared, hook, body.to_string().into_bytes())
        .await
        .map_err(calling)?;
    review::verify(&uid, version, mutating, &answer).map_err(|e| match e {
        Ok(decoding) => calling(format!("failed to call webhook: {decoding}")),
        Err(invalid) => calling(format!("received invalid webhook response: {invalid}")),
    })
}

/// A denial as a response.
fn denied(hook: &Hook, answer: &review::Answer) -> Failure {
    let (code, status) = review::denial(&hook.name, answer.result.as_ref());
    let code =
        axum::http::StatusCode::from_u16(code).unwrap_or(axum::http::StatusCode::BAD_REQUEST);
    Failure::Refused(json_response(code, status.to_string()))
}

/// One mutating webhook: whether its patch changed the object.
async fn call_mutating(
    shared: &Shared,
    hook: &Hook,
    inv: &Invocation,
    req: &mut Request<'_>,
) -> Result<bool, Failure> {
    let answer = exchange(shared, hook, inv, req, true).await?;
    req.warnings.extend(answer.warnings.iter().cloned());
    if !answer.allowed {
        return Err(denied(hook, &answer));
    }
    let Some(patch) = &answer.patch else {
        return Ok(false);
    };
    let calling = |reason: String| {
        Failure::Calling(format!("failed calling webhook {:?}: {reason}", hook.name))
    };
    let ops: Value = serde_json::from_slice(patch).map_err(|e| {
        calling(format!(
            "received undecodable patch in webhook response: {e}"
        ))
    })?;
    let Some(list) = ops.as_array() else {
        return Err(calling(
            "received undecodable patch in webhook response: a JSON patch is a list of operations"
                .into(),
        ));
    };
    if list.is_empty() {
        return Ok(false);
    }
    let Some(object) = &req.object else {
        return Err(Failure::Refused(
            internal_error(&format!(
                "admission webhook {:?} attempted to modify the object, which is not supported for this operation",
                hook.name
            ))
            .into_response(),
        ));
    };
    if answer.patch_type != "JSONPatch" {
        return Err(calling(format!(
            "unsupported patch type {:?}",
            answer.patch_type
        )));
    }
    let refused = |e: String| Failure::Refused(internal_error(&e).into_response());
    let equivalent = inv.resource != *req.resource;
    let before = if equivalent {
        in_version(object, &inv.resource).map_err(refused)?
    } else {
        object.clone()
    };
    let patched = super::patch::json_patch(&before, list).map_err(|e| refused(e.0))?;
    let changed = patched != before;
    let mut back = if equivalent {
        in_version(&patched, req.resource).map_err(refused)?
    } else {
        patched
    };
    super::write::default_built_in(&mut back);
    req.object = Some(back);
    Ok(changed)
}

/// Runs the validating webhooks on the request, concurrently; the first refusal in their
/// order is the answer. Their warnings are in `req.warnings`.
pub(crate) async fn validate(shared: &Shared, req: &mut Request<'_>) -> Result<(), Response> {
    if exempt(req) {
        return Ok(());
    }
    let hooks = hooks::load(shared, false);
    if hooks.is_empty() {
        return Ok(());
    }
    let matched = match matching(shared, &hooks, req) {
        Ok(matched) => matched,
        Err(e) => {
            return Err(super::write::with_warnings(
                e.into_response(),
                &req.warnings,
            ));
        }
    };
    let shared_req: &Request<'_> = req;
    let calls = matched.iter().map(|(hook, inv)| async move {
        let answer = exchange(shared, hook, inv, shared_req, false).await;
        (hook, answer)
    });
    let results = futures::future::join_all(calls).await;
    let mut first: Option<Response> = None;
    let mut warnings = Vec::new();
    for (hook, result) in results {
        let failure = match result {
            Ok(answer) => {
                warnings.extend(answer.warnings.iter().cloned());
                if answer.allowed {
                    continue;
                }
                denied(hook, &answer)
            }
            Err(failure) => failure,
        };
        let response = match failure {
            Failure::Calling(message) if hook.ignore_failures => {
                tracing::warn!(webhook = %hook.name, %message, "failed calling webhook, failing open");
                continue;
            }
            Failure::Calling(message) => internal_error(&message).into_response(),
            Failure::Refused(response) => response,
        };
        first.get_or_insert(response);
    }
    req.warnings.extend(warnings);
    match first {
        Some(response) => Err(super::write::with_warnings(response, &req.warnings)),
        None => Ok(()),
    }
}
