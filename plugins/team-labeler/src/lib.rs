//! Automation example: copies a namespace's `team` label onto its pods. A pod whose label differs
//! from its namespace's gets a merge patch of that one label (through the host, which checks the
//! plugin's `patch` grant on pods, its rate limit and dry-run); when a namespace's label changes,
//! every cached pod in it is patched. Optionally it records an Event on each pod it labels.
//!
//! The patch's effect comes back as a pod update, which then matches: nothing is sent twice for
//! the same change while it is on its way (a pending set), and a refused or rate-limited patch is
//! tried again at the pod's next update; one that failed at the API server, at the next resync.
//!
//! Settings (all optional): `{"pods": "pods", "namespaces": "namespaces", "label": "team",
//! "events": false}`: the informer names, the label key, and whether to record an Event per
//! labelled pod (needs a `create` grant on Events).
//!
//! Metrics: `labelled_total`, `refused_total{reason}`, `events_total`.

use std::collections::BTreeMap;

use serde::Deserialize;
use wisp_sdk::actions::{self, ActionError, EventType};
use wisp_sdk::{Context, Object, Plugin, PluginInfo, Result, ResultExt, cache, metrics};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct Settings {
    pods: String,
    namespaces: String,
    label: String,
    events: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            pods: "pods".into(),
            namespaces: "namespaces".into(),
            label: "team".into(),
            events: false,
        }
    }
}

struct Labeler {
    settings: Settings,
    /// Pod key -> label value asked for and not seen back yet.
    pending: BTreeMap<String, String>,
}

fn reason(e: &ActionError) -> &'static str {
    match e {
        ActionError::NotGranted(_) => "not-granted",
        ActionError::RateLimited(_) => "rate-limited",
        ActionError::Invalid(_) => "invalid",
        ActionError::QueueFull(_) => "queue-full",
        ActionError::Unavailable(_) => "unavailable",
    }
}

impl Labeler {
    /// The `team` label of namespace `ns`, from the cache.
    fn wanted(&self, ns: &str) -> Result<Option<String>> {
        let nso = cache::get(&self.settings.namespaces, None, ns)
            .context(format_args!("reading namespace {ns}"))?;
        Ok(nso.and_then(|n| n.label(&self.settings.label).map(str::to_owned)))
    }

    /// Patches `pod` when its label is not `want`.
    fn reconcile(&mut self, pod: &Object, want: Option<&str>) {
        let key = pod.key();
        let Some(want) = want else {
            self.pending.remove(&key);
            return;
        };
        if pod.label(&self.settings.label) == Some(want) {
            self.pending.remove(&key);
            return;
        }
        if self.pending.get(&key).map(String::as_str) == Some(want) {
            return;
        }
        let target = actions::object_ref(pod);
        match actions::patch_metadata(&target, &[(&self.settings.label, Some(want))], &[]) {
            Ok(how) => {
                self.pending.insert(key.clone(), want.to_owned());
                metrics::counter_add("labelled_total", &[], 1);
                wisp_sdk::info!("{key}: {}={want} ({how:?})", self.settings.label);
                if self.settings.events {
                    let msg = format!(
                        "label {}={want} copied from its namespace",
                        self.settings.label
                    );
                    match actions::create_event(&target, EventType::Normal, "TeamLabelled", &msg) {
                        Ok(_) => metrics::counter_add("events_total", &[], 1),
                        Err(e) => {
                            metrics::counter_add("refused_total", &[("reason", reason(&e))], 1)
                        }
                    }
                }
            }
            Err(e) => {
                metrics::counter_add("refused_total", &[("reason", reason(&e))], 1);
                wisp_sdk::warn!("{key}: cannot label: {e:?}");
            }
        }
    }

    fn on_pod(&mut self, pod: &Object) -> Result<()> {
        let Some(ns) = pod.namespace() else {
            return Ok(());
        };
        let want = self.wanted(ns)?;
        self.reconcile(pod, want.as_deref());
        Ok(())
    }

    fn on_namespace(&mut self, ns: &Object) -> Result<()> {
        let want = ns.label(&self.settings.label).map(str::to_owned);
        let pods = cache::list(&self.settings.pods, Some(ns.name()), None)
            .with_context(|| format!("listing pods of {}", ns.name()))?;
        for pod in &pods {
            self.reconcile(&pod, want.as_deref());
        }
        Ok(())
    }

    fn on_object(&mut self, cx: &Context, obj: &Object) -> Result<()> {
        if cx.informer == self.settings.namespaces {
            self.on_namespace(obj)
        } else {
            self.on_pod(obj)
        }
    }
}

impl Plugin for Labeler {
    fn describe() -> PluginInfo {
        wisp_sdk::info(
            "team-labeler",
            env!("CARGO_PKG_VERSION"),
            &["pods", "namespaces"],
        )
    }

    fn init(settings: &str) -> Result<Self> {
        let settings: Settings = wisp_sdk::parse_settings(settings)?;
        if settings.label.is_empty() {
            return Err("settings: label: must not be empty".into());
        }
        Ok(Self {
            settings,
            pending: BTreeMap::new(),
        })
    }

    fn on_add(&mut self, cx: &Context, obj: &Object, _initial: bool) -> Result<()> {
        self.on_object(cx, obj)
    }

    fn on_update(&mut self, cx: &Context, _old: &Object, new: &Object, resync: bool) -> Result<()> {
        if resync {
            // A patch that failed at the API server never comes back: ask again at each resync.
            self.pending.remove(&new.key());
        }
        self.on_object(cx, new)
    }

    fn on_delete(&mut self, cx: &Context, obj: &Object, _unknown: bool) -> Result<()> {
        if cx.informer == self.settings.pods {
            self.pending.remove(&obj.key());
        }
        Ok(())
    }
}

wisp_sdk::export_plugin!(Labeler);

/// Run natively with `cargo test -p team-labeler` (in `plugins/`), against the SDK's fake host.
#[cfg(all(test, not(target_family = "wasm")))]
mod tests {
    use serde_json::{Value, json};
    use wisp_sdk::testing::{Accepted, Action, ActionError, Harness, Outcome};

    use super::*;

    fn ns(name: &str, team: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": {"team": team}}})
    }

    fn pod(name: &str, labels: Value, rv: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "labels": labels, "resourceVersion": rv}})
    }

    /// Each patch: the pod's key and the labels set or removed.
    type Patched = (String, Vec<(String, Option<String>)>);

    fn patched(h: &Harness<Labeler>) -> Vec<Patched> {
        h.actions()
            .into_iter()
            .map(|a| match a {
                Action::PatchMetadata { target, labels, .. } => (target.key(), labels),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_pod_is_labelled_once_while_its_patch_is_on_its_way() {
        let mut h = Harness::<Labeler>::new();
        h.cache("namespaces", ns("shop", "pay"));
        h.init("{}").unwrap();
        assert_eq!(h.add("pods", pod("a", json!({}), "1")), Outcome::Ok);
        // An unrelated update before the patch's effect arrives: not asked twice.
        h.update("pods", pod("a", json!({"x": "y"}), "2"));
        let want = vec![("team".to_owned(), Some("pay".to_owned()))];
        assert_eq!(patched(&h), [("shop/a".to_owned(), want)]);
        assert_eq!(h.counter("labelled_total", &[]), 1);
        // The effect arrives: nothing more to do.
        h.update("pods", pod("a", json!({"team": "pay"}), "3"));
        assert_eq!(h.actions().len(), 1);
    }

    #[test]
    fn a_refused_patch_is_counted_and_tried_again_at_the_next_update() {
        let mut h = Harness::<Labeler>::new();
        h.cache("namespaces", ns("shop", "pay"));
        h.init("{}").unwrap();
        h.on_action(|_| Err(ActionError::RateLimited("wait".into())));
        h.add("pods", pod("a", json!({}), "1"));
        assert_eq!(h.counter("refused_total", &[("reason", "rate-limited")]), 1);
        h.on_action(|_| Ok(Accepted::Queued));
        h.update("pods", pod("a", json!({}), "2"));
        assert_eq!(h.actions().len(), 2);
        assert_eq!(h.counter("labelled_total", &[]), 1);
    }

    #[test]
    fn a_namespace_label_change_reaches_its_cached_pods() {
        let mut h = Harness::<Labeler>::new();
        h.cache("pods", pod("a", json!({"team": "old"}), "1"));
        h.cache("pods", pod("b", json!({"team": "new"}), "1"));
        h.init("{}").unwrap();
        h.add("namespaces", ns("shop", "new"));
        let want = vec![("team".to_owned(), Some("new".to_owned()))];
        assert_eq!(patched(&h), [("shop/a".to_owned(), want)]);
    }
}
