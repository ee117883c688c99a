//! The benchmark plugin: the same work as the native baseline handlers in `wisp-bench`.
//!
//! Settings: `{"work": "noop" | "labels" | "parse"}`:
//! - `labels`: counts label pairs from the pre-extracted metadata (no JSON parsing);
//! - `parse`: parses the whole object JSON and counts its containers.

use serde::Deserialize;
use wisp_sdk::{Context, Object, Plugin, PluginInfo, metrics};

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Work {
    #[default]
    Noop,
    Labels,
    Parse,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct Settings {
    work: Work,
}

struct Bench {
    work: Work,
    total: u64,
}

impl Bench {
    fn visit(&mut self, obj: &Object) -> Result<(), String> {
        match self.work {
            Work::Noop => {}
            Work::Labels => self.total += obj.labels().len() as u64,
            Work::Parse => {
                let v = obj.value()?;
                self.total += v
                    .pointer("/spec/containers")
                    .and_then(|c| c.as_array())
                    .map_or(0, |c| c.len() as u64);
            }
        }
        Ok(())
    }
}

impl Plugin for Bench {
    fn describe() -> PluginInfo {
        wisp_sdk::info("bench", env!("CARGO_PKG_VERSION"), &[])
    }

    fn init(settings: &str) -> Result<Self, String> {
        let s: Settings = wisp_sdk::parse_settings(settings)?;
        Ok(Self {
            work: s.work,
            total: 0,
        })
    }

    fn on_add(&mut self, _cx: &Context, obj: &Object, _initial: bool) -> Result<(), String> {
        self.visit(obj)
    }

    fn on_update(
        &mut self,
        _cx: &Context,
        _old: &Object,
        new: &Object,
        _resync: bool,
    ) -> Result<(), String> {
        self.visit(new)
    }

    fn on_delete(&mut self, _cx: &Context, obj: &Object, _unknown: bool) -> Result<(), String> {
        self.visit(obj)
    }

    fn after_batch(&mut self) {
        metrics::gauge_set("bench_total", &[], self.total as f64);
    }
}

wisp_sdk::export_plugin!(Bench);
