//! `wisp:plugin/policy@0.2.0`: a plugin's verdicts on the objects its informers cache, and
//! their Events when the plugin is configured so.

use super::grants::cache_key;
use crate::actions::{ActionBody, ActionVerb, Target, event_body};
use crate::informer::key::key_for;
use crate::plugin::bindings::wisp::plugin::{policy, types};
use crate::plugin::sandbox::state::StoreData;
use crate::plugin::status::PluginCounters;
use crate::policy::{Change, Severity, Subject};

fn severity(s: types::Severity) -> Severity {
    match s {
        types::Severity::Info => Severity::Info,
        types::Severity::Low => Severity::Low,
        types::Severity::Medium => Severity::Medium,
        types::Severity::High => Severity::High,
        types::Severity::Critical => Severity::Critical,
    }
}

impl StoreData {
    /// Records a verdict's Event on its object (when the plugin is configured so), as if the
    /// plugin had asked for it: it needs the plugin's grant to create Events there and a token
    /// of its rate limit, and a repeat counts on the first one; a refusal is counted and
    /// audited like the plugin's own.
    fn verdict_event(&self, s: &Subject, rule: &str, sev: Severity, message: &str) {
        let target = Target {
            api_version: s.api_version.clone(),
            kind: s.kind.clone(),
            namespace: s.namespace.clone(),
            name: s.name.clone(),
        };
        let text = format!("[{}] {rule} ({}): {message}", self.api.plugin, sev.as_str());
        let made = event_body(
            &self.api.plugin,
            &target,
            Some((s.uid.clone(), s.resource_version.clone())),
            true,
            "PolicyViolation",
            &text,
        );
        let (t, body) = match made {
            Ok((t, body)) => (t, Ok(ActionBody::CreateEvent(body))),
            Err(e) => (target, Err(e)),
        };
        // Refusals are counted and audited by `request`; the verdict stands either way.
        let _ = self.api.actions.request(t, body, ActionVerb::Create);
    }
}

impl policy::Host for StoreData {
    fn report(
        &mut self,
        informer: String,
        namespace: Option<String>,
        name: String,
        rule: String,
        violation: Option<policy::Violation>,
    ) -> Result<(), policy::VerdictError> {
        if self.admitting {
            return Err(policy::VerdictError::Invalid(
                "no verdict is kept during an admission call (the object is not stored yet): \
                 answer with a denial instead"
                    .into(),
            ));
        }
        let cache = self.granted(&informer).map_err(|_| {
            policy::VerdictError::NotGranted(format!(
                "informer {informer:?} is not granted to this plugin"
            ))
        })?;
        let key = key_for(namespace.as_deref(), &name);
        let Some(obj) = cache_key(namespace.as_deref(), &name).and_then(|k| cache.get_by_key(&k))
        else {
            return Err(policy::VerdictError::NotFound(format!(
                "informer {informer:?} has no object {key:?}"
            )));
        };
        let m = obj.meta();
        let subject = Subject {
            informer,
            api_version: m.api_version().to_owned(),
            kind: m.kind().to_owned(),
            namespace: m.namespace().map(str::to_owned),
            name: m.name().to_owned(),
            uid: m.uid().to_owned(),
            resource_version: m.resource_version().to_owned(),
        };
        let violation = violation.map(|v| (severity(v.severity), v.message));
        // What an Event would need, kept only when the plugin's violations become Events.
        let event = self
            .api
            .verdict_events
            .then(|| (subject.clone(), violation.clone()));
        let version = self.api.status.plugin_version();
        let store = &self.api.grants.services.verdicts;
        let change = store
            .report(&self.api.plugin, &version, &rule, subject, violation)
            .map_err(|e| policy::VerdictError::Invalid(e.to_string()))?;
        PluginCounters::add(&self.api.status.counters.verdicts, 1);
        if matches!(change, Change::Raised | Change::Changed)
            && let Some((subject, Some((sev, msg)))) = &event
        {
            self.verdict_event(subject, &rule, *sev, msg);
        }
        Ok(())
    }
}
