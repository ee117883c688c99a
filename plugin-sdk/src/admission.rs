//! Admission: the plugin decides on a write before the API server stores it (a validating or,
//! when the host's config allows it, mutating webhook). [`Plugin::admit`](crate::Plugin::admit)
//! takes a [`Request`] and answers a [`Response`].
//!
//! A plugin written for notifications is enforced as it is: the default `admit` runs the
//! plugin's own `on_add` (a create) or `on_update` (an update) on the object asked about, with
//! the verdicts it reports ([`policy::violation`](crate::policy::violation)) collected instead of
//! kept, and answers with them: a violation denies the write, naming the rule and its message; an
//! `info` one is a warning. No verdict is kept and no action is taken during an admission call
//! (the object is not stored yet, and the call has no side effects: the host refuses actions).
//! Deletes and connects are allowed. A plugin that wants more (mutate with a JSON Patch, look at
//! who asks, decide a delete) writes its own `admit`.

use std::cell::RefCell;

pub use crate::bindings::exports::wisp::plugin::admission::{
    GroupVersionKind, GroupVersionResource, Operation, UserInfo,
};
use crate::bindings::exports::wisp::plugin::admission::{
    Request as WitRequest, Response as WitResponse,
};
use crate::policy::Severity;
use crate::{Context, Error, Object, Plugin, Result};

/// What the API server asks about (`admission.k8s.io/v1` `AdmissionRequest`), its objects read
/// as a notification's are.
#[derive(Debug)]
pub struct Request<'a> {
    wit: &'a WitRequest,
    object: Option<Object<'a>>,
    old_object: Option<Object<'a>>,
}

impl<'a> Request<'a> {
    /// The request as the host sent it, its objects taken (checked) from their encoding.
    pub(crate) fn new(wit: &'a WitRequest) -> Result<Self> {
        let take = |b: &'a Option<Vec<u8>>, what: &str| {
            b.as_deref()
                .map(Object::decode)
                .transpose()
                .map_err(|e| Error::new(format!("the request's {what}: {e}")))
        };
        Ok(Request {
            object: take(&wit.object, "object")?,
            old_object: take(&wit.old_object, "oldObject")?,
            wit,
        })
    }

    /// The request's uid.
    pub fn uid(&self) -> &str {
        &self.wit.uid
    }

    /// The informer of the plugin's config that watches this kind, when one does (rule code
    /// written for notifications routes on it, as on [`Context::informer`]).
    pub fn informer(&self) -> Option<&str> {
        self.wit.informer.as_deref()
    }

    /// Create, update, delete or connect.
    pub fn operation(&self) -> Operation {
        self.wit.operation
    }

    /// The object's group, version and kind.
    pub fn kind(&self) -> &GroupVersionKind {
        &self.wit.kind
    }

    /// The resource written (`pods`), its group and version.
    pub fn resource(&self) -> &GroupVersionResource {
        &self.wit.resource
    }

    /// The subresource written (`status`, `scale`), if any.
    pub fn sub_resource(&self) -> Option<&str> {
        self.wit.sub_resource.as_deref()
    }

    /// The kind the client asked for, when the API server converted the request.
    pub fn request_kind(&self) -> Option<&GroupVersionKind> {
        self.wit.request_kind.as_ref()
    }

    /// The resource the client asked for, when the API server converted the request.
    pub fn request_resource(&self) -> Option<&GroupVersionResource> {
        self.wit.request_resource.as_ref()
    }

    /// The object's name (none when the server is to generate it).
    pub fn name(&self) -> Option<&str> {
        self.wit.name.as_deref()
    }

    /// The object's namespace (none when cluster-scoped).
    pub fn namespace(&self) -> Option<&str> {
        self.wit.namespace.as_deref()
    }

    /// Who asks.
    pub fn user_info(&self) -> &UserInfo {
        &self.wit.user_info
    }

    /// The object as it would be stored (create, update); none for a delete.
    pub fn object(&self) -> Option<&Object<'a>> {
        self.object.as_ref()
    }

    /// The object before (update, delete); none for a create.
    pub fn old_object(&self) -> Option<&Object<'a>> {
        self.old_object.as_ref()
    }

    /// Nothing will be stored (`--dry-run=server`).
    pub fn dry_run(&self) -> bool {
        self.wit.dry_run
    }

    /// The operation's options (`CreateOptions`, ...) as JSON, when sent.
    pub fn options(&self) -> Option<&str> {
        self.wit.options.as_deref()
    }
}

/// The plugin's answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Response {
    allowed: bool,
    message: String,
    code: u16,
    warnings: Vec<String>,
    audit_annotations: Vec<(String, String)>,
    patch: Option<serde_json::Value>,
}

impl Response {
    /// The write may proceed.
    pub fn allow() -> Self {
        Response {
            allowed: true,
            ..Response::default()
        }
    }

    /// The write is refused with `message` (HTTP 403; the client sees `admission webhook
    /// "..." denied the request: MESSAGE`).
    pub fn deny(message: impl Into<String>) -> Self {
        Response {
            allowed: false,
            message: message.into(),
            code: 403,
            ..Response::default()
        }
    }

    /// The HTTP status code of a denial (400-599).
    pub fn with_code(mut self, code: u16) -> Self {
        self.code = code;
        self
    }

    /// Adds a warning the client shows (`kubectl` prints `Warning: ...`).
    pub fn warn(mut self, warning: impl Into<String>) -> Self {
        self.warnings.push(warning.into());
        self
    }

    /// Adds an annotation to the API server's audit event.
    pub fn annotate(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.audit_annotations.push((key.into(), value.into()));
        self
    }

    /// Mutates the object with a JSON Patch (RFC 6902: an array of operations). The host
    /// applies it only for a plugin whose config allows it to mutate, and checks it first.
    pub fn patch(mut self, json_patch: serde_json::Value) -> Self {
        self.patch = Some(json_patch);
        self
    }

    /// Whether the write may proceed.
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// The denial's message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The warnings.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    pub(crate) fn into_wit(self) -> WitResponse {
        WitResponse {
            allowed: self.allowed,
            message: self.message,
            code: self.code,
            warnings: self.warnings,
            audit_annotations: self.audit_annotations,
            patch: self.patch.map(|p| p.to_string()),
        }
    }
}

/// A verdict reported while the default `admit` runs the plugin's rules.
struct Collected {
    rule: String,
    severity: Severity,
    message: String,
}

thread_local! {
    /// Some while the default `admit` runs: where `policy::violation` puts its verdicts.
    static COLLECTING: RefCell<Option<Vec<Collected>>> = const { RefCell::new(None) };
}

/// Takes the violation when an admission call is collecting them (then the host is not told).
pub(crate) fn collect(rule: &str, severity: Severity, message: &str) -> bool {
    COLLECTING.with(|c| match c.borrow_mut().as_mut() {
        Some(v) => {
            v.push(Collected {
                rule: rule.to_owned(),
                severity,
                message: message.to_owned(),
            });
            true
        }
        None => false,
    })
}

/// Whether an admission call is collecting verdicts (a pass is then dropped).
pub(crate) fn collecting() -> bool {
    COLLECTING.with(|c| c.borrow().is_some())
}

/// The default `admit`: the plugin's `on_add` / `on_update` on the object, its violations the
/// answer (see the module's documentation).
pub fn by_rules<P: Plugin>(plugin: &mut P, request: &Request<'_>) -> Result<Response> {
    let Some(informer) = request.informer() else {
        // None of the plugin's informers watches this kind: none of its rules applies.
        return Ok(Response::allow());
    };
    let cx = Context { seq: 0, informer };
    COLLECTING.with(|c| *c.borrow_mut() = Some(Vec::new()));
    let ran = match (request.operation(), request.object(), request.old_object()) {
        (Operation::Create, Some(obj), _) => plugin.on_add(&cx, obj, false),
        (Operation::Update, Some(new), Some(old)) => plugin.on_update(&cx, old, new, false),
        (Operation::Update, Some(new), None) => plugin.on_add(&cx, new, false),
        _ => Ok(()),
    };
    let collected = COLLECTING
        .with(|c| c.borrow_mut().take())
        .unwrap_or_default();
    ran?;
    let mut denials = Vec::new();
    let mut response = Response::allow();
    for v in collected {
        let line = format!("{}: {}", v.rule, v.message);
        if matches!(v.severity, Severity::Info) {
            response = response.warn(line);
        } else {
            denials.push(line);
        }
    }
    if denials.is_empty() {
        return Ok(response);
    }
    let mut denied = Response::deny(denials.join("; "));
    denied.warnings = response.warnings;
    Ok(denied)
}
