//! Kubernetes `Status` bodies: every error response, and the ERROR watch event.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::object::StoreError;
use super::store::ReadError;

/// The Status `reason` Kubernetes uses with an HTTP code.
pub(crate) fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

/// An error answer before it becomes a response: small enough to return in a `Result`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Status reason.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details` of the Status (name, kind, causes), if any.
    pub details: Option<Value>,
}

impl ApiError {
    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            code: 400,
            reason: "BadRequest",
            message: message.into(),
            details: None,
        }
    }

    /// 422 Invalid.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self {
            code: 422,
            reason: "Invalid",
            message: message.into(),
            details: None,
        }
    }

    /// 404 NotFound.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            code: 404,
            reason: "NotFound",
            message: message.into(),
            details: None,
        }
    }
}

impl ApiError {
    /// Any code and reason, with Status `details`.
    pub fn with_details(
        code: u16,
        reason: &'static str,
        message: impl Into<String>,
        details: Value,
    ) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: Some(details),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error_with_details(self.code, self.reason, &self.message, self.details)
    }
}

/// A failure `Status` object.
pub(crate) fn status_body(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    });
    if let (Some(details), Some(map)) = (details, status.as_object_mut()) {
        map.insert("details".into(), details);
    }
    status
}

/// An error response with a Status body.
pub(crate) fn error_response(code: u16, reason: &str, message: &str) -> Response {
    error_with_details(code, reason, message, None)
}

fn error_with_details(code: u16, reason: &str, message: &str, details: Option<Value>) -> Response {
    let body = status_body(code, reason, message, details);
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(status, body.to_string())
}

/// An injected failure: the reason that goes with the code, and `Retry-After` if asked for.
pub(crate) fn injected_failure(code: u16, retry_after_secs: Option<u64>) -> Response {
    let reason = reason_for(code);
    let message = match code {
        410 => "too old resource version (injected fault)".to_string(),
        429 => "Too many requests, please try again later. (injected fault)".to_string(),
        _ => format!("{reason} (injected fault)"),
    };
    let details = retry_after_secs.map(|secs| json!({"retryAfterSeconds": secs}));
    let mut response = error_with_details(code, reason, &message, details);
    if let Some(secs) = retry_after_secs
        && let Ok(value) = HeaderValue::from_str(&secs.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// 400 BadRequest.
pub(crate) fn bad_request(message: &str) -> Response {
    error_response(400, "BadRequest", message)
}

/// The response for a read that cannot be served at the requested resourceVersion.
pub(crate) fn read_error(err: ReadError) -> Response {
    match err {
        ReadError::Expired { requested, floor } => error_response(
            410,
            "Expired",
            &format!("The resourceVersion for the provided list is too old: {requested} ({floor})"),
        ),
        ReadError::TooLarge { requested, current } => {
            let mut response = error_with_details(
                504,
                "Timeout",
                &too_large_message(requested, current),
                Some(too_large_details()),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
    }
}

/// The message of a read at a resourceVersion the server has not reached, as the watch cache
/// words it (`errors.NewTimeoutError` prefixes `Timeout: `).
pub(crate) fn too_large_message(requested: u64, current: u64) -> String {
    format!("Timeout: Too large resource version: {requested}, current: {current}")
}

/// The details of that answer: retry after 1 s, cause `ResourceVersionTooLarge`.
pub(crate) fn too_large_details() -> Value {
    json!({
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    })
}

/// The response for a failed write.
pub(crate) fn store_error(err: &StoreError) -> Response {
    let message = err.to_string();
    match err {
        StoreError::Invalid(_) => error_response(422, "Invalid", &message),
        StoreError::AlreadyExists { plural, name } => error_with_details(
            409,
            "AlreadyExists",
            &message,
            Some(json!({"name": name, "kind": plural})),
        ),
        StoreError::NotFound { plural, name } => error_with_details(
            404,
            "NotFound",
            &message,
            Some(json!({"name": name, "kind": plural})),
        ),
        StoreError::Api {
            code,
            reason,
            details,
            ..
        } => error_with_details(*code, reason, &message, details.clone()),
        StoreError::Conflict { plural, name } => error_with_details(
            409,
            "Conflict",
            &message,
            Some(json!({"name": name, "kind": plural})),
        ),
    }
}

/// A 200-or-other JSON response from a serialized body.
pub(crate) fn json_response(status: StatusCode, body: impl Into<axum::body::Body>) -> Response {
    let mut response = (status, body.into()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}
