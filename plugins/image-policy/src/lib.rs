//! Image policy hook: reports pods whose containers use a `:latest` (or untagged) image or have no
//! resource limits. Every evaluation is reported to the host as a verdict (a violation with its
//! severity and message, or a pass that clears it), so the host's `/verdicts`, its
//! `wisp_policy_violations` gauge and, when configured, Kubernetes Events show the current state.
//! Each violation is also logged when it appears, counted in `policy_violations_total{rule}`, and
//! the current number of violating pods is the gauge `policy_violating_pods{rule}`; a pod that is
//! fixed or deleted stops counting. A resync re-evaluates every pod.
//!
//! Settings: `{"denyLatest": true, "requireLimits": true, "exemptNamespaces": ["kube-system"]}`
//! (unknown fields and wrong types are refused at load).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod};
use serde::Deserialize;
use wisp_sdk::policy::{self, Severity, VerdictError};
use wisp_sdk::{Context, Object, Plugin, PluginInfo, Result, metrics};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct Settings {
    deny_latest: bool,
    require_limits: bool,
    exempt_namespaces: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            deny_latest: true,
            require_limits: true,
            exempt_namespaces: Vec::new(),
        }
    }
}

const LATEST: &str = "latest-tag";
const LIMITS: &str = "missing-limits";

struct ImagePolicy {
    settings: Settings,
    /// rule -> keys of pods violating it now.
    violating: BTreeMap<&'static str, BTreeSet<String>>,
}

/// `nginx`, `nginx:latest`, `registry:5000/nginx` are latest; a digest pins the image.
fn uses_latest(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

fn severity(rule: &str) -> Severity {
    if rule == LATEST {
        Severity::High
    } else {
        Severity::Medium
    }
}

fn lacks_limits(c: &Container) -> bool {
    let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    !limits.is_some_and(|l| l.contains_key("cpu") && l.contains_key("memory"))
}

impl ImagePolicy {
    fn evaluate(&self, pod: &Pod) -> Vec<(&'static str, String)> {
        let mut found = Vec::new();
        let Some(spec) = &pod.spec else { return found };
        let containers = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten());
        for c in containers {
            let image = c.image.as_deref().unwrap_or("");
            if self.settings.deny_latest && uses_latest(image) {
                found.push((
                    LATEST,
                    format!(
                        "container {} uses image {image:?} without a pinned tag",
                        c.name
                    ),
                ));
            }
            if self.settings.require_limits && lacks_limits(c) {
                found.push((
                    LIMITS,
                    format!("container {} has no cpu and memory limits", c.name),
                ));
            }
        }
        found
    }

    fn check(&mut self, cx: &Context, obj: &Object) -> Result<()> {
        if obj.kind() != "Pod" {
            return Ok(());
        }
        let key = obj.key();
        if obj
            .namespace()
            .is_some_and(|ns| self.settings.exempt_namespaces.iter().any(|e| e == ns))
        {
            return Ok(());
        }
        let pod: Pod = obj.parse()?;
        let found = self.evaluate(&pod);
        for rule in [LATEST, LIMITS] {
            let messages: Vec<&String> = found
                .iter()
                .filter(|(r, _)| *r == rule)
                .map(|(_, m)| m)
                .collect();
            let verdict = if messages.is_empty() {
                policy::pass(cx.informer, obj, rule)
            } else {
                let text: Vec<&str> = messages.iter().map(|m| m.as_str()).collect();
                policy::violation(cx.informer, obj, rule, severity(rule), &text.join("; "))
            };
            match verdict {
                // Deleted since: its delete clears everything.
                Ok(()) | Err(VerdictError::NotFound(_)) => {}
                Err(e) => return Err(wisp_sdk::Error::from(e).context(format!("{rule} {key}"))),
            }
            let set = self.violating.entry(rule).or_default();
            if messages.is_empty() {
                if set.remove(&key) {
                    wisp_sdk::info!("pass {rule} {key}: fixed");
                }
            } else if set.insert(key.clone()) {
                metrics::counter_add("policy_violations_total", &[("rule", rule)], 1);
                for m in messages {
                    wisp_sdk::warn!("violation {rule} {key}: {m}");
                }
            }
        }
        Ok(())
    }
}

impl Plugin for ImagePolicy {
    fn describe() -> PluginInfo {
        wisp_sdk::info("image-policy", env!("CARGO_PKG_VERSION"), &["pods"])
    }

    fn init(settings: &str) -> Result<Self> {
        let settings: Settings = wisp_sdk::parse_settings(settings)?;
        if !settings.deny_latest && !settings.require_limits {
            return Err("settings: nothing to check: enable denyLatest or requireLimits".into());
        }
        Ok(Self {
            settings,
            violating: BTreeMap::new(),
        })
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

    fn on_delete(&mut self, _cx: &Context, obj: &Object, _unknown: bool) -> Result<()> {
        let key = obj.key();
        for set in self.violating.values_mut() {
            set.remove(&key);
        }
        Ok(())
    }

    fn after_batch(&mut self) {
        for rule in [LATEST, LIMITS] {
            let n = self.violating.get(rule).map_or(0, BTreeSet::len);
            metrics::gauge_set("policy_violating_pods", &[("rule", rule)], n as f64);
        }
    }
}

wisp_sdk::export_plugin!(ImagePolicy);

/// Run natively with `cargo test -p image-policy` (in `plugins/`), against the SDK's fake host.
#[cfg(all(test, not(target_family = "wasm")))]
mod tests {
    use serde_json::{Value, json};
    use wisp_sdk::testing::{Harness, Outcome, Severity};

    use super::*;

    fn pod(name: &str, image: &str, limits: bool) -> Value {
        let mut c = json!({"name": "app", "image": image});
        if limits {
            c["resources"] = json!({"limits": {"cpu": "1", "memory": "1Gi"}});
        }
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "shop", "resourceVersion": "1"},
            "spec": {"containers": [c]}})
    }

    fn policy(settings: &str) -> Harness<ImagePolicy> {
        let mut h = Harness::<ImagePolicy>::new();
        h.init(settings).unwrap();
        h
    }

    #[test]
    fn latest_is_a_high_violation_until_pinned() {
        let mut h = policy(r#"{"requireLimits": false}"#);
        assert_eq!(h.add("pods", pod("a", "nginx", true)), Outcome::Ok);
        let v = h.verdicts();
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].rule.as_str(), v[0].severity),
            (LATEST, Severity::High)
        );
        assert_eq!(
            v[0].message,
            "container app uses image \"nginx\" without a pinned tag"
        );
        assert_eq!(h.counter("policy_violations_total", &[("rule", LATEST)]), 1);
        assert_eq!(
            h.gauge("policy_violating_pods", &[("rule", LATEST)]),
            Some(1.0)
        );
        h.update("pods", pod("a", "nginx:1.27", true));
        assert!(h.verdicts().is_empty());
        assert_eq!(
            h.gauge("policy_violating_pods", &[("rule", LATEST)]),
            Some(0.0)
        );
        // A violation counts once, however often it is seen.
        h.add("pods", pod("b", "redis:latest", true));
        h.resync("pods", "shop/b");
        assert_eq!(h.counter("policy_violations_total", &[("rule", LATEST)]), 2);
    }

    #[test]
    fn a_deleted_pod_stops_counting() {
        let mut h = policy("{}");
        h.add("pods", pod("a", "nginx", false));
        assert_eq!(h.verdicts().len(), 2);
        h.delete("pods", "shop/a");
        assert!(h.verdicts().is_empty());
        assert_eq!(
            h.gauge("policy_violating_pods", &[("rule", LIMITS)]),
            Some(0.0)
        );
    }

    #[test]
    fn settings_that_check_nothing_are_refused() {
        let mut h = Harness::<ImagePolicy>::new();
        let e = h
            .init(r#"{"denyLatest": false, "requireLimits": false}"#)
            .unwrap_err();
        assert!(e.message().contains("nothing to check"), "{e}");
    }
}
