//! The AdmissionReview sent to a webhook and what is read back from it
//! (request/admissionreview.go `CreateV1AdmissionReview`, `VerifyAdmissionResponse`), and a
//! denial as the API server words it (errors/statuserror.go `ToStatusErr`).

use serde_json::{Map, Value, json};

use super::Request;
use super::hooks::Invocation;

/// What a webhook answered, checked.
#[derive(Debug, Default)]
pub(crate) struct Answer {
    /// `response.allowed`.
    pub allowed: bool,
    /// `response.patch`, decoded from base64 (mutating webhooks only).
    pub patch: Option<Vec<u8>>,
    /// `response.patchType`.
    pub patch_type: String,
    /// `response.status`.
    pub result: Option<Value>,
    /// `response.warnings`.
    pub warnings: Vec<String>,
}

/// The review version to send: the first of the webhook's `admissionReviewVersions` this
/// server knows (`v1`, `v1beta1`), or the API server's refusal.
pub(crate) fn version(versions: &[String]) -> Result<&'static str, String> {
    versions
        .iter()
        .find_map(|v| match v.as_str() {
            "v1" => Some("v1"),
            "v1beta1" => Some("v1beta1"),
            _ => None,
        })
        .ok_or_else(|| {
            "could not create admission objects: webhook does not accept known AdmissionReview versions (v1, v1beta1)".into()
        })
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

fn gvr(group: &str, version: &str, resource: &str) -> Value {
    json!({"group": group, "version": version, "resource": resource})
}

/// The review of `req` for a webhook invoked as `inv`, its object and old object in the
/// invocation's version (`object`, `old_object`).
pub(crate) fn request(
    uid: &str,
    review_version: &str,
    inv: &Invocation,
    req: &Request<'_>,
    object: Option<&Value>,
    old_object: Option<&Value>,
) -> Value {
    let r = &inv.resource;
    let q = req.resource;
    let (kind, request_kind) = match req.kind_group_version {
        Some((group, version)) => (
            gvk(group, version, &inv.kind),
            gvk(group, version, &req.kind),
        ),
        None => (
            gvk(&r.group, &r.version, &inv.kind),
            gvk(&q.group, &q.version, &req.kind),
        ),
    };
    let mut request = json!({
        "uid": uid,
        "kind": kind,
        "resource": gvr(&r.group, &r.version, &r.plural),
        "requestKind": request_kind,
        "requestResource": gvr(&q.group, &q.version, &q.plural),
        "operation": req.operation.as_str(),
        "userInfo": req.user.to_json(),
        "object": object.cloned().unwrap_or(Value::Null),
        "oldObject": old_object.cloned().unwrap_or(Value::Null),
        "dryRun": req.dry_run,
        "options": req.options.clone(),
    });
    let map = request.as_object_mut().expect("a JSON object");
    for (key, value) in [
        ("subResource", req.subresource.unwrap_or("")),
        ("requestSubResource", req.subresource.unwrap_or("")),
        ("name", req.name.as_str()),
        ("namespace", req.namespace.as_str()),
    ] {
        if !value.is_empty() {
            map.insert(key.into(), Value::String(value.into()));
        }
    }
    json!({
        "kind": "AdmissionReview",
        "apiVersion": format!("admission.k8s.io/{review_version}"),
        "request": request,
    })
}

/// Reads a webhook's answer: the decoding error (worded after `failed to call webhook: `) or
/// the checks' (after `received invalid webhook response: `), as `Err(Ok)` and `Err(Err)`.
pub(crate) fn verify(
    uid: &str,
    review_version: &str,
    mutating: bool,
    body: &[u8],
) -> Result<Answer, Result<String, String>> {
    let review: Value = serde_json::from_slice(body)
        .map_err(|e| Ok(format!("couldn't get version/kind; json parse error: {e}")))?;
    let Some(response) = review.get("response").filter(|r| !r.is_null()) else {
        return Err(Err("webhook response was absent".into()));
    };
    let text = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    let v1 = review_version == "v1";
    if v1 {
        let got = text(response, "uid");
        if got != uid {
            return Err(Err(format!("expected response.uid={uid:?}, got {got:?}")));
        }
        let (api_version, kind) = (text(&review, "apiVersion"), text(&review, "kind"));
        if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
            return Err(Err(format!(
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {group}/{version}, Kind={kind}"
            )));
        }
    }
    use base64::Engine as _;
    let patch = match response.get("patch").and_then(Value::as_str) {
        None | Some("") => None,
        Some(b64) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map_err(|e| Ok(format!("illegal base64 data: {e}")))?,
        ),
    };
    let patch_type = response.get("patchType").filter(|t| !t.is_null());
    let mut answer = Answer {
        allowed: response.get("allowed").and_then(Value::as_bool) == Some(true),
        result: response.get("status").filter(|s| !s.is_null()).cloned(),
        warnings: response
            .get("warnings")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        ..Answer::default()
    };
    if !mutating {
        if patch.is_some() {
            return Err(Err(
                "validating webhook may not return response.patch".into()
            ));
        }
        if patch_type.is_some() && v1 {
            return Err(Err(
                "validating webhook may not return response.patchType".into()
            ));
        }
        return Ok(answer);
    }
    match (&patch, patch_type) {
        (Some(_), None) if v1 => {
            return Err(Err(
                "webhook returned response.patch but not response.patchType".into(),
            ));
        }
        (None, Some(_)) if v1 => {
            return Err(Err(
                "webhook returned response.patchType but not response.patch".into(),
            ));
        }
        _ => {}
    }
    answer.patch_type = match patch_type {
        Some(t) if v1 => {
            let t = t.as_str().unwrap_or("");
            if t.is_empty() {
                return Err(Err(format!(
                    "webhook returned invalid response.patchType of {t:?}"
                )));
            }
            t.to_string()
        }
        _ if patch.is_some() => "JSONPatch".into(),
        _ => String::new(),
    };
    answer.patch = patch;
    Ok(answer)
}

/// A webhook's denial as the API server answers it (`ToStatusErr`): the webhook's Status with
/// its message prefixed `admission webhook "NAME" denied the request: `, a code below 400
/// made 400, a missing or `Success` status made `Failure`. Returns the HTTP code and the
/// Status body.
pub(crate) fn denial(webhook: &str, result: Option<&Value>) -> (u16, Value) {
    let mut status: Map<String, Value> = result
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let code = status
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(400);
    status.insert("code".into(), json!(code));
    if !matches!(status.get("status").and_then(Value::as_str), Some(s) if !s.is_empty() && s != "Success")
    {
        status.insert("status".into(), json!("Failure"));
    }
    let field = |f: &str| {
        status
            .get(f)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let denied = format!("admission webhook {webhook:?} denied the request");
    let message = match (field("message"), field("reason")) {
        (m, _) if !m.is_empty() => format!("{denied}: {m}"),
        (_, r) if !r.is_empty() => format!("{denied}: {r}"),
        _ => format!("{denied} without explanation"),
    };
    status.insert("message".into(), json!(message));
    status.insert("kind".into(), json!("Status"));
    status.insert("apiVersion".into(), json!("v1"));
    status.entry("metadata").or_insert_with(|| json!({}));
    (code, Value::Object(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_are_worded_as_the_api_server_words_them() {
        let (code, status) = denial(
            "deny.example.com",
            Some(&json!({"code": 403, "message": "no"})),
        );
        assert_eq!(code, 403);
        assert_eq!(
            status["message"],
            "admission webhook \"deny.example.com\" denied the request: no"
        );
        assert_eq!(status["status"], "Failure");
        let (code, status) = denial(
            "w",
            Some(&json!({"code": 200, "status": "Success", "reason": "Nope"})),
        );
        assert_eq!((code, &status["status"]), (400, &json!("Failure")));
        assert_eq!(
            status["message"],
            "admission webhook \"w\" denied the request: Nope"
        );
        let (_, status) = denial("w", None);
        assert_eq!(
            status["message"],
            "admission webhook \"w\" denied the request without explanation"
        );
    }
}
