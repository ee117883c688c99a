//! Audit logger: one log line per object lifecycle event, and a counter per informer and event.
//!
//! Settings (all optional): `{"includeResyncs": false, "includeInitialList": true}`.

use serde::Deserialize;
use wisp_sdk::{Context, Object, Plugin, PluginInfo, Result, metrics};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct Settings {
    /// Also log updates that changed nothing (resyncs).
    include_resyncs: bool,
    /// Log the objects of the initial list.
    include_initial_list: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            include_resyncs: false,
            include_initial_list: true,
        }
    }
}

struct AuditLog {
    settings: Settings,
}

fn what(o: &Object) -> String {
    format!(
        "{} {} {} rv={}",
        o.api_version(),
        o.kind(),
        o.key(),
        o.resource_version()
    )
}

fn count(cx: &Context, event: &str) {
    metrics::counter_add(
        "audit_events_total",
        &[("informer", cx.informer), ("event", event)],
        1,
    );
}

impl Plugin for AuditLog {
    fn describe() -> PluginInfo {
        wisp_sdk::info("audit-log", env!("CARGO_PKG_VERSION"), &[])
    }

    fn init(settings: &str) -> Result<Self> {
        Ok(Self {
            settings: wisp_sdk::parse_settings(settings)?,
        })
    }

    fn on_add(&mut self, cx: &Context, obj: &Object, initial_list: bool) -> Result<()> {
        count(cx, "added");
        if initial_list && !self.settings.include_initial_list {
            return Ok(());
        }
        let tag = if initial_list { " (initial list)" } else { "" };
        wisp_sdk::info!("ADDED {}{tag}", what(obj));
        Ok(())
    }

    fn on_update(&mut self, cx: &Context, old: &Object, new: &Object, resync: bool) -> Result<()> {
        if resync {
            count(cx, "resynced");
            if self.settings.include_resyncs {
                wisp_sdk::info!("RESYNCED {}", what(new));
            }
            return Ok(());
        }
        count(cx, "updated");
        wisp_sdk::info!("UPDATED {} (was rv={})", what(new), old.resource_version());
        Ok(())
    }

    fn on_delete(&mut self, cx: &Context, obj: &Object, final_state_unknown: bool) -> Result<()> {
        count(cx, "deleted");
        let tag = if final_state_unknown {
            " (deletion missed; last known state)"
        } else {
            ""
        };
        wisp_sdk::info!("DELETED {}{tag}", what(obj));
        Ok(())
    }
}

wisp_sdk::export_plugin!(AuditLog);
