//! Inventory: pods per node and per owner, read from the host's cache indexes. After each batch
//! it refreshes the gauges `pods_per_node{node}` and `pods_per_owner{owner}` for the nodes and
//! owners the batch touched, asking the host's index instead of keeping its own copy.
//!
//! Settings: `{"informer": "pods", "nodeIndex": "node", "ownerIndex": "owner"}` (these are the
//! defaults; the informer must be granted and carry both indexes).

use std::collections::BTreeSet;

use serde::Deserialize;
use wisp_sdk::{Context, Object, Plugin, PluginInfo, Result, cache, metrics};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct Settings {
    informer: String,
    node_index: String,
    owner_index: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            informer: "pods".into(),
            node_index: "node".into(),
            owner_index: "owner".into(),
        }
    }
}

/// The one field of a pod the inventory reads.
#[derive(Deserialize)]
struct NodeOf<'a> {
    #[serde(borrow, default)]
    spec: Option<SpecNode<'a>>,
}

#[derive(Deserialize)]
struct SpecNode<'a> {
    #[serde(borrow, default, rename = "nodeName")]
    node_name: Option<std::borrow::Cow<'a, str>>,
}

struct Inventory {
    settings: Settings,
    dirty_nodes: BTreeSet<String>,
    /// (owner uid, "Kind/name").
    dirty_owners: BTreeSet<(String, String)>,
}

impl Inventory {
    fn touch(&mut self, obj: &Object) -> Result<()> {
        // Only spec.nodeName is parsed (the rest of the object is skipped).
        let pod: NodeOf<'_> = obj.parse_partial()?;
        if let Some(node) = pod.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty()) {
            self.dirty_nodes.insert(node.into_owned());
        }
        for o in obj.owner_refs() {
            self.dirty_owners
                .insert((o.uid.to_owned(), format!("{}/{}", o.kind, o.name)));
        }
        Ok(())
    }
}

impl Plugin for Inventory {
    fn describe() -> PluginInfo {
        wisp_sdk::info("inventory", env!("CARGO_PKG_VERSION"), &["pods"])
    }

    fn init(settings: &str) -> Result<Self> {
        let settings: Settings = wisp_sdk::parse_settings(settings)?;
        Ok(Self {
            settings,
            dirty_nodes: BTreeSet::new(),
            dirty_owners: BTreeSet::new(),
        })
    }

    fn on_add(&mut self, _cx: &Context, obj: &Object, _initial: bool) -> Result<()> {
        self.touch(obj)
    }

    fn on_update(&mut self, _cx: &Context, old: &Object, new: &Object, resync: bool) -> Result<()> {
        if !resync {
            self.touch(old)?;
        }
        self.touch(new)
    }

    fn on_delete(&mut self, _cx: &Context, obj: &Object, _unknown: bool) -> Result<()> {
        self.touch(obj)
    }

    fn after_batch(&mut self) {
        let s = &self.settings;
        for node in std::mem::take(&mut self.dirty_nodes) {
            match cache::by_index(&s.informer, &s.node_index, &node) {
                Ok(pods) => {
                    metrics::gauge_set("pods_per_node", &[("node", &node)], pods.len() as f64)
                }
                Err(e) => wisp_sdk::error!("cannot read index {}: {e:?}", s.node_index),
            }
        }
        for (uid, owner) in std::mem::take(&mut self.dirty_owners) {
            match cache::by_index(&s.informer, &s.owner_index, &uid) {
                Ok(pods) => {
                    metrics::gauge_set("pods_per_owner", &[("owner", &owner)], pods.len() as f64)
                }
                Err(e) => wisp_sdk::error!("cannot read index {}: {e:?}", s.owner_index),
            }
        }
    }
}

wisp_sdk::export_plugin!(Inventory);
