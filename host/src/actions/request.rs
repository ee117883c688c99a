//! The actions a plugin asks for, and the request bodies made from what it passes: each checked
//! as the API server would check it (names, keys, values), an error saying what is wrong.

use std::time::SystemTime;

use serde_json::{Value, json};

use super::spec::ActionVerb;
use super::target::Target;
use super::validate::{
    InvalidAction, check_event_reason, check_key, check_label_value, check_target,
};
use crate::policy::rfc3339;

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub enum ActionBody {
    /// Merge patch `{"metadata":{"labels":…,"annotations":…}}` (null removes a key).
    PatchMetadata(Value),
    /// Server-side apply of this object.
    Apply(Value),
    /// Create this Event (the target is its namespace's `events` collection; `name` is the
    /// Event's name).
    CreateEvent(Value),
    /// Count a repeat of an Event already created (the target): merge `patch` (`count`,
    /// `lastTimestamp`) into it, or, if it is gone, create `event` (the whole Event, counted).
    CountEvent {
        /// `{"count": n, "lastTimestamp": t}`.
        patch: Value,
        /// The Event to create if the first one is gone.
        event: Value,
    },
}

impl ActionBody {
    /// The resourceVersion the request is conditional on: a patch's or an apply's
    /// `metadata.resourceVersion` (the API server answers 409 when the object has another).
    pub fn precondition(&self) -> Option<&str> {
        match self {
            ActionBody::PatchMetadata(v) | ActionBody::Apply(v) => v
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str),
            ActionBody::CreateEvent(_) | ActionBody::CountEvent { .. } => None,
        }
    }

    /// The verb a grant must give.
    pub fn verb(&self) -> ActionVerb {
        match self {
            ActionBody::PatchMetadata(_) => ActionVerb::Patch,
            ActionBody::Apply(_) => ActionVerb::Apply,
            ActionBody::CreateEvent(_) | ActionBody::CountEvent { .. } => ActionVerb::Create,
        }
    }
}

/// An action on its way to the API server.
#[derive(Clone, Debug)]
pub struct Action {
    /// Configured plugin name.
    pub plugin: String,
    /// Plugin version.
    pub version: String,
    /// The object (for an Event: the Event itself).
    pub target: Target,
    /// What to do.
    pub body: ActionBody,
}

/// Why an action was refused (mirrors the WIT `action-error`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// No grant covers it.
    #[error("not granted: {0}")]
    NotGranted(String),
    /// Over the rate limit.
    #[error("rate limited: {0}")]
    RateLimited(String),
    /// Malformed.
    #[error("invalid: {0}")]
    Invalid(String),
    /// Too many waiting.
    #[error("queue full: {0}")]
    QueueFull(String),
    /// No API server.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// How an accepted action was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// Queued to be sent.
    Queued,
    /// Logged and audited only.
    DryRun,
}

/// The merge patch of labels and annotations (`None` values remove the key), conditional on
/// `resource_version` when given.
pub fn metadata_patch(
    labels: &[(String, Option<String>)],
    annotations: &[(String, Option<String>)],
    resource_version: Option<&str>,
) -> Result<Value, InvalidAction> {
    if labels.is_empty() && annotations.is_empty() {
        return Err(InvalidAction::NothingToPatch);
    }
    let mut meta = serde_json::Map::new();
    let mut l = serde_json::Map::new();
    for (k, v) in labels {
        check_key(k)?;
        if let Some(v) = v {
            check_label_value(k, v)?;
        }
        l.insert(k.clone(), v.clone().map_or(Value::Null, Value::String));
    }
    let mut a = serde_json::Map::new();
    let mut size = 0;
    for (k, v) in annotations {
        check_key(k)?;
        size += k.len() + v.as_ref().map_or(0, String::len);
        a.insert(k.clone(), v.clone().map_or(Value::Null, Value::String));
    }
    if size > 256 * 1024 {
        return Err(InvalidAction::AnnotationsTooLarge);
    }
    if !l.is_empty() {
        meta.insert("labels".into(), Value::Object(l));
    }
    if !a.is_empty() {
        meta.insert("annotations".into(), Value::Object(a));
    }
    if let Some(rv) = resource_version {
        meta.insert("resourceVersion".into(), rv.into());
    }
    Ok(json!({ "metadata": meta }))
}

/// The target of an apply: the manifest's apiVersion, kind, namespace and name.
pub fn apply_target(manifest: &Value) -> Result<Target, InvalidAction> {
    let obj = manifest
        .as_object()
        .ok_or(InvalidAction::ManifestNotObject)?;
    let s = |v: Option<&Value>, what: &'static str| -> Result<String, InvalidAction> {
        match v {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            _ => Err(InvalidAction::ManifestField(what)),
        }
    };
    let meta = obj.get("metadata").and_then(Value::as_object);
    let namespace = match meta.and_then(|m| m.get("namespace")) {
        None | Some(Value::Null) => None,
        Some(v) => Some(s(Some(v), "metadata.namespace")?),
    };
    Ok(Target {
        api_version: s(obj.get("apiVersion"), "apiVersion")?,
        kind: s(obj.get("kind"), "kind")?,
        namespace,
        name: s(meta.and_then(|m| m.get("name")), "metadata.name")?,
    })
}

/// A core/v1 Event about `regarding` (with its uid and resourceVersion when known), reported by
/// `wisp` for `plugin`. Events of cluster-scoped objects go to `default`, as kubectl does.
pub fn event_body(
    plugin: &str,
    regarding: &Target,
    regarding_ids: Option<(String, String)>,
    warning: bool,
    reason: &str,
    message: &str,
) -> Result<(Target, Value), InvalidAction> {
    check_target(regarding)?;
    check_event_reason(reason)?;
    let mut message = message.to_owned();
    if message.len() > 1024 {
        let mut cut = 1024;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    let now = SystemTime::now();
    let nanos = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let ns = regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    // Kept to 253 characters, as names are: the object's name cut, then the time.
    let mut base = regarding.name.as_str();
    let mut cut = base.len().min(253 - 1 - 32);
    while !base.is_char_boundary(cut) {
        cut -= 1;
    }
    base = &base[..cut];
    let name = format!("{base}.{nanos:x}");
    let mut involved = json!({
        "apiVersion": regarding.api_version,
        "kind": regarding.kind,
        "name": regarding.name,
    });
    if let Some(n) = &regarding.namespace {
        involved["namespace"] = json!(n);
    }
    if let Some((uid, rv)) = regarding_ids {
        involved["uid"] = json!(uid);
        involved["resourceVersion"] = json!(rv);
    }
    let ts = rfc3339(now);
    let body = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": { "name": name, "namespace": ns },
        "involvedObject": involved,
        "reason": reason,
        "message": message,
        "type": if warning { "Warning" } else { "Normal" },
        "source": { "component": format!("wisp/{plugin}") },
        "reportingComponent": "wisp",
        "reportingInstance": format!("wisp/{plugin}"),
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
    });
    Ok((
        Target {
            api_version: "v1".into(),
            kind: "Event".into(),
            namespace: Some(ns),
            name,
        },
        body,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::test_pod;

    #[test]
    fn metadata_patches_check_keys_and_values() {
        let p = metadata_patch(
            &[("team".into(), Some("a".into())), ("old".into(), None)],
            &[("example.com/note".into(), Some("any text: ok".into()))],
            None,
        )
        .unwrap();
        assert_eq!(
            p,
            json!({"metadata": {"labels": {"team": "a", "old": null}, "annotations": {"example.com/note": "any text: ok"}}})
        );
        let p = metadata_patch(&[("team".into(), Some("a".into()))], &[], Some("42")).unwrap();
        assert_eq!(
            p,
            json!({"metadata": {"labels": {"team": "a"}, "resourceVersion": "42"}})
        );
        assert_eq!(ActionBody::PatchMetadata(p).precondition(), Some("42"));
        assert!(metadata_patch(&[], &[], None).is_err());
        for bad in ["", "-a", "a/", "UPPER.com/x", "x/y/z!", &"k".repeat(64)] {
            assert!(
                metadata_patch(&[(bad.into(), Some("v".into()))], &[], None).is_err(),
                "{bad:?}"
            );
        }
        assert!(metadata_patch(&[("k".into(), Some("has space".into()))], &[], None).is_err());
        assert!(metadata_patch(&[("k".into(), Some(String::new()))], &[], None).is_ok());
    }

    #[test]
    fn apply_needs_kind_and_name() {
        let t = apply_target(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}})).unwrap();
        assert_eq!(t.namespace.as_deref(), Some("n"));
        assert!(apply_target(&json!([])).is_err());
        assert!(
            apply_target(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}))
                .is_err()
        );
        assert!(apply_target(&json!({"kind": "ConfigMap", "metadata": {"name": "c"}})).is_err());
    }

    #[test]
    fn events_name_their_object() {
        let (t, body) = event_body(
            "p",
            &test_pod(Some("a")),
            Some(("u1".into(), "7".into())),
            true,
            "Bad",
            "why",
        )
        .unwrap();
        assert_eq!(
            (t.kind.as_str(), t.namespace.as_deref()),
            ("Event", Some("a"))
        );
        assert!(t.name.starts_with("p."));
        assert_eq!(body["involvedObject"]["uid"], "u1");
        assert_eq!(body["type"], "Warning");
        let (t, _) = event_body("p", &test_pod(None), None, false, "Ok", "").unwrap();
        assert_eq!(t.namespace.as_deref(), Some("default"));
        assert!(event_body("p", &test_pod(None), None, false, "", "").is_err());
    }
}
