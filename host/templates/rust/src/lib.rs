//! __NAME__: a Wisp plugin. A Namespace without the label `settings.label` (default `owner`)
//! violates the rule `missing-label`: a verdict for the host (its /verdicts, metrics and policy
//! reports), a log line and the counter `violations_total{rule}`. Labelling it clears the
//! verdict.
//!
//! Settings: `{"label": "owner", "exempt": ["kube-system"]}` (unknown fields and wrong types are
//! refused at load, as is an empty label).

use serde::Deserialize;
use wisp_sdk::policy::{self, Severity, VerdictError};
use wisp_sdk::{Context, Object, Plugin, PluginInfo, Result, metrics};

const RULE: &str = "missing-label";

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct Settings {
    /// The label every namespace must have.
    label: String,
    /// Namespaces not judged.
    exempt: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            label: "owner".into(),
            exempt: Vec::new(),
        }
    }
}

struct RequireLabel {
    settings: Settings,
}

impl RequireLabel {
    fn check(&self, cx: &Context, obj: &Object) -> Result<()> {
        if self.settings.exempt.iter().any(|e| e == obj.name()) {
            return Ok(());
        }
        let key = obj.key();
        let label = &self.settings.label;
        let verdict = if obj.label(label).is_some() {
            policy::pass(cx.informer, obj, RULE)
        } else {
            let message = format!("{} {key} has no label \"{label}\"", obj.kind());
            wisp_sdk::warn!("violation {RULE} {key}: {message}");
            metrics::counter_add("violations_total", &[("rule", RULE)], 1);
            policy::violation(cx.informer, obj, RULE, Severity::Medium, &message)
        };
        match verdict {
            // Deleted since: its delete clears its verdicts.
            Ok(()) | Err(VerdictError::NotFound(_)) => Ok(()),
            Err(e) => Err(wisp_sdk::Error::from(e).context(format!("{RULE} {key}"))),
        }
    }
}

impl Plugin for RequireLabel {
    fn describe() -> PluginInfo {
        wisp_sdk::info("__NAME__", env!("CARGO_PKG_VERSION"), &["namespaces"])
    }

    fn init(settings: &str) -> Result<Self> {
        let settings: Settings = wisp_sdk::parse_settings(settings)?;
        if settings.label.is_empty() {
            return Err("settings.label: must not be empty".into());
        }
        Ok(Self { settings })
    }

    fn on_add(&mut self, cx: &Context, obj: &Object, _initial: bool) -> Result<()> {
        self.check(cx, obj)
    }

    fn on_update(
        &mut self,
        cx: &Context,
        _old: &Object,
        new: &Object,
        _resync: bool,
    ) -> Result<()> {
        self.check(cx, new)
    }
}

wisp_sdk::export_plugin!(RequireLabel);
