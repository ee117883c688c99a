//! `wisp:plugin/actions@0.2.0`: changes a plugin asks the host for (metadata patches, applies,
//! Events), sent within its grants and rate limit by [`crate::actions`].

use super::grants::cache_key;
use crate::actions::{
    Accepted, ActionBody, ActionError, ActionVerb, InvalidAction, Target, apply_target, event_body,
    metadata_patch,
};
use crate::plugin::bindings::wisp::plugin::{actions, types};
use crate::plugin::sandbox::state::StoreData;

fn target_of(r: types::ObjectRef) -> Target {
    Target {
        api_version: r.api_version,
        kind: r.kind,
        namespace: r.namespace,
        name: r.name,
    }
}

fn accepted(r: Result<Accepted, ActionError>) -> Result<actions::Accepted, actions::ActionError> {
    match r {
        Ok(Accepted::Queued) => Ok(actions::Accepted::Queued),
        Ok(Accepted::DryRun) => Ok(actions::Accepted::DryRun),
        Err(ActionError::NotGranted(m)) => Err(actions::ActionError::NotGranted(m)),
        Err(ActionError::RateLimited(m)) => Err(actions::ActionError::RateLimited(m)),
        Err(ActionError::Invalid(m)) => Err(actions::ActionError::Invalid(m)),
        Err(ActionError::QueueFull(m)) => Err(actions::ActionError::QueueFull(m)),
        Err(ActionError::Unavailable(m)) => Err(actions::ActionError::Unavailable(m)),
    }
}

/// Largest manifest a plugin may apply.
pub const MAX_MANIFEST: usize = 1 << 20;

impl StoreData {
    /// The uid and resourceVersion of `t` when one of the plugin's informers caches it.
    fn ids_of(&self, t: &Target) -> Option<(String, String)> {
        let key = cache_key(t.namespace.as_deref(), &t.name)?;
        self.api.grants.caches.values().find_map(|c| {
            c.get_by_key(&key).and_then(|o| {
                let m = o.meta();
                (m.api_version() == t.api_version && m.kind() == t.kind)
                    .then(|| (m.uid().to_owned(), m.resource_version().to_owned()))
            })
        })
    }
}

impl StoreData {
    /// Refuses every action during an admission call, which has no side effects.
    fn no_action_while_admitting(&self) -> Result<(), actions::ActionError> {
        if self.admitting {
            return Err(actions::ActionError::Unavailable(
                "no action during an admission call (it has no side effects)".into(),
            ));
        }
        Ok(())
    }
}

impl actions::Host for StoreData {
    fn patch_metadata(
        &mut self,
        target: types::ObjectRef,
        labels: Vec<(String, Option<String>)>,
        annotations: Vec<(String, Option<String>)>,
    ) -> Result<actions::Accepted, actions::ActionError> {
        self.no_action_while_admitting()?;
        let target = target_of(target);
        // Conditional on the version the plugin's cache holds, when one of its informers has
        // the object: a patch decided on a view the object has since left is refused (409).
        let ids = self.ids_of(&target);
        let rv = ids
            .as_ref()
            .map(|(_, rv)| rv.as_str())
            .filter(|rv| !rv.is_empty());
        let body = metadata_patch(&labels, &annotations, rv).map(ActionBody::PatchMetadata);
        accepted(self.api.actions.request(target, body, ActionVerb::Patch))
    }

    fn apply(&mut self, manifest: String) -> Result<actions::Accepted, actions::ActionError> {
        self.no_action_while_admitting()?;
        let parsed = if manifest.len() > MAX_MANIFEST {
            Err(InvalidAction::ManifestTooLarge(MAX_MANIFEST))
        } else {
            serde_json::from_str::<serde_json::Value>(&manifest)
                .map_err(InvalidAction::ManifestJson)
        };
        let (target, body) = match parsed.and_then(|v| apply_target(&v).map(|t| (t, v))) {
            Ok((t, v)) => (t, Ok(ActionBody::Apply(v))),
            Err(e) => (
                Target {
                    api_version: "?".into(),
                    kind: "?".into(),
                    namespace: None,
                    name: "?".into(),
                },
                Err(e),
            ),
        };
        accepted(self.api.actions.request(target, body, ActionVerb::Apply))
    }

    fn create_event(
        &mut self,
        regarding: types::ObjectRef,
        event_type: actions::EventType,
        reason: String,
        message: String,
    ) -> Result<actions::Accepted, actions::ActionError> {
        self.no_action_while_admitting()?;
        let regarding = target_of(regarding);
        let ids = self.ids_of(&regarding);
        let warning = matches!(event_type, actions::EventType::Warning);
        let r = match event_body(
            &self.api.plugin,
            &regarding,
            ids,
            warning,
            &reason,
            &message,
        ) {
            Ok((t, body)) => {
                self.api
                    .actions
                    .request(t, Ok(ActionBody::CreateEvent(body)), ActionVerb::Create)
            }
            Err(e) => self
                .api
                .actions
                .request(regarding, Err(e), ActionVerb::Create),
        };
        accepted(r)
    }
}
