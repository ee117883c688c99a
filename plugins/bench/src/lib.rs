//! The benchmark plugin: the same work as the native baseline handlers in `wisp-bench`. Built
//! twice: `bench`, and `bench-meta` (feature `metadata-only`: objects come without their JSON).
//!
//! Settings: `{"work": "noop" | "labels" | "meta" | "parse" | "pod" | "partial"}`:
//! - `labels`: counts label pairs from the metadata (no JSON parsing);
//! - `meta`: namespace, name and one label looked up from the metadata;
//! - `parse`: parses the whole object JSON into a `serde_json::Value` and counts its containers;
//! - `pod`: parses the whole object into a k8s-openapi `Pod` (what real plugins do);
//! - `partial`: parses only the containers' images (borrowed), the SDK's partial parse.

use serde::Deserialize;
use wisp_sdk::{Context, Object, Plugin, PluginInfo, Result, metrics};

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Work {
    #[default]
    Noop,
    Labels,
    Meta,
    Parse,
    Pod,
    Partial,
}

#[derive(Deserialize, Default)]
struct Images<'a> {
    #[serde(borrow, default)]
    spec: ImagesSpec<'a>,
}

#[derive(Deserialize, Default)]
struct ImagesSpec<'a> {
    #[serde(borrow, default)]
    containers: Vec<ImagesContainer<'a>>,
}

#[derive(Deserialize, Default)]
struct ImagesContainer<'a> {
    #[serde(default)]
    image: &'a str,
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
    fn visit(&mut self, obj: &Object) -> Result<()> {
        match self.work {
            Work::Noop => {}
            Work::Labels => self.total += obj.labels().len() as u64,
            Work::Meta => {
                self.total += obj.namespace().map_or(0, str::len) as u64
                    + obj.name().len() as u64
                    + obj.label("app").map_or(0, |v| v.len() as u64)
            }
            Work::Pod => {
                let p: k8s_openapi::api::core::v1::Pod = obj.parse()?;
                self.total += p.spec.map_or(0, |s| s.containers.len() as u64);
            }
            Work::Partial => {
                let p: Images<'_> = obj.parse_partial()?;
                self.total += p
                    .spec
                    .containers
                    .iter()
                    .filter(|c| c.image.ends_with(":latest"))
                    .count() as u64
                    + p.spec.containers.len() as u64;
            }
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
        let mut info = wisp_sdk::info("bench", env!("CARGO_PKG_VERSION"), &[]);
        // bench-meta: objects come without their JSON (work `pod` etc. then fails).
        info.metadata_only = cfg!(feature = "metadata-only");
        info
    }

    fn init(settings: &str) -> Result<Self> {
        let s: Settings = wisp_sdk::parse_settings(settings)?;
        Ok(Self {
            work: s.work,
            total: 0,
        })
    }

    fn on_add(&mut self, _cx: &Context, obj: &Object, _initial: bool) -> Result<()> {
        self.visit(obj)
    }

    fn on_update(
        &mut self,
        _cx: &Context,
        _old: &Object,
        new: &Object,
        _resync: bool,
    ) -> Result<()> {
        self.visit(new)
    }

    fn on_delete(&mut self, _cx: &Context, obj: &Object, _unknown: bool) -> Result<()> {
        self.visit(obj)
    }

    fn after_batch(&mut self) {
        metrics::gauge_set("bench_total", &[], self.total as f64);
    }
}

wisp_sdk::export_plugin!(Bench);
