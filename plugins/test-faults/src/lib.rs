//! A plugin that misbehaves on request, for the host's fault and sandbox tests. It always checks
//! its sequence numbers: `seen_total{informer}`, `gaps_total`, `dups_total` and the gauge
//! `last_seq{informer}` show loss or duplication.
//!
//! Settings: `{"mode": "ok" | "spin" | "alloc" | "trap" | "error" | "busy" | "probe" | "actions",
//!             "namePrefix": "bad-", "busyMs": 5, "actions": 1000, "panicInInit": false,
//!             "busyInInitMs": 0, "spinInInit": false}`; the mode applies to objects
//! whose name starts with `namePrefix` (all objects when absent). `actions` asks the host to set
//! the label `n` on the object `actions` times in a row (`"actionVerb": "apply"`: apply the
//! ConfigMap `<name>-report` next to it; `"event"`: record an Event about it) and counts what the
//! host answered in `action_total{result}` (queued, dry-run, not-granted, rate-limited, invalid,
//! queue-full, unavailable). Objects that already carry the label `n` are left alone, so the
//! patches' own updates do not ask again. `"targetName"` and `"targetNamespace"` replace the
//! patched object's name and namespace (a hostile plugin forging paths); `"eventMessage"` makes
//! every Event say the same thing (instead of `event <n>`), `"eventReason"` gives their reason
//! (instead of `Tested`; a hostile plugin forging rows with a newline).
//!
//! Mode `verdicts` reports the object as violating the rule `churn` `actions` times in a row, each
//! time with another message (`verdict <n>`), and counts the answers in `verdict_total{result}`
//! (ok, not-granted, not-found, invalid).
//!
//! It also keeps a view of the objects (key -> resourceVersion) and hands it, with its sequence
//! numbers and a count of handled notifications, to the next version through snapshot/restore:
//! gauges `view_size`, `view_checksum` (xor of 52-bit FNV-1a hashes of `key@rv`), `handled`.
//!
//! Mode `gate` holds the call that handles an object named with `namePrefix` until that object
//! is gone from the host's cache: a test deletes the gate object to let the plugin go on, so it
//! can make the plugin fall behind by exactly as much as it wants, without timing.

use std::collections::BTreeMap;

use serde::Deserialize;
use wisp_sdk::actions::{self, Accepted, ActionError};
use wisp_sdk::{Context, Object, Plugin, PluginInfo, Result, ResultExt, cache, metrics, policy};

#[derive(Deserialize, Default, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Mode {
    #[default]
    Ok,
    Spin,
    Alloc,
    Trap,
    Error,
    Gate,
    Busy,
    Probe,
    Actions,
    Verdicts,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct Settings {
    mode: Mode,
    name_prefix: Option<String>,
    busy_ms: u64,
    actions: u32,
    action_verb: ActionVerb,
    target_name: Option<String>,
    target_namespace: Option<String>,
    event_message: Option<String>,
    /// The Events' reason (default `Tested`).
    event_reason: Option<String>,
    panic_in_init: bool,
    /// Busy (CPU) that long in `init`: a start-up slower than a call's deadline.
    busy_in_init_ms: u64,
    /// Spin forever in `init`.
    spin_in_init: bool,
}

#[derive(Deserialize, Default, PartialEq)]
#[serde(rename_all = "lowercase")]
enum ActionVerb {
    /// Set label `n` on the object.
    #[default]
    Patch,
    /// Apply the ConfigMap `<name>-report` next to the object.
    Apply,
    /// Record an Event about the object.
    Event,
}

#[derive(Default, serde::Serialize, Deserialize)]
struct State {
    /// Last sequence number per informer.
    last: BTreeMap<String, u64>,
    /// key -> resourceVersion of the objects it was told about.
    view: BTreeMap<String, String>,
    /// Notifications handled, across versions.
    handled: u64,
}

struct Faults {
    settings: Settings,
    state: State,
}

/// FNV-1a over `key@rv`, kept to 52 bits so the xor fits a gauge (f64) exactly.
fn fnv52(key: &str, rv: &str) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in key.bytes().chain(std::iter::once(b'@')).chain(rv.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100000001b3);
    }
    h & ((1 << 52) - 1)
}

fn probe(what: &str, allowed: bool, detail: String) {
    let result = if allowed { "allowed" } else { "refused" };
    metrics::counter_add("probe_total", &[("what", what), ("result", result)], 1);
    wisp_sdk::info!("probe {what}: {result}: {detail}");
}

fn run_probes() {
    match std::fs::read_to_string("/etc/passwd") {
        Ok(s) => probe("file", true, format!("read {} bytes", s.len())),
        Err(e) => probe("file", false, e.to_string()),
    }
    match std::fs::read_dir("/") {
        Ok(_) => probe("dir", true, "listed /".into()),
        Err(e) => probe("dir", false, e.to_string()),
    }
    let env: Vec<(String, String)> = std::env::vars().collect();
    probe("env", !env.is_empty(), format!("{} variables", env.len()));
    match std::net::TcpStream::connect("127.0.0.1:9") {
        Ok(_) => probe("socket", true, "connected".into()),
        Err(e) => probe("socket", false, e.to_string()),
    }
    let target = actions::ObjectRef {
        api_version: "v1".into(),
        kind: "Secret".into(),
        namespace: Some("default".into()),
        name: "anything".into(),
    };
    match actions::patch_metadata(&target, &[("owned", Some("yes"))], &[]) {
        Ok(a) => probe("ungranted-action", true, format!("{a:?}")),
        Err(ActionError::NotGranted(m)) => probe("ungranted-action", false, m),
        // Any other answer means the grant check did not come first: counted as not refused.
        Err(e) => probe(
            "ungranted-action",
            true,
            format!("not refused as ungranted: {e:?}"),
        ),
    }
    match cache::list("secrets", None, None) {
        Ok(v) => probe("ungranted-informer", true, format!("{} objects", v.len())),
        Err(cache::Error::NotGranted(i)) => {
            probe("ungranted-informer", false, format!("not granted: {i}"))
        }
        Err(e) => probe("ungranted-informer", false, format!("{e:?}")),
    }
}

impl Faults {
    fn observe(&mut self, cx: &Context, obj: &Object) -> Result<()> {
        self.state.handled += 1;
        let last = self.state.last.entry(cx.informer.to_owned()).or_insert(0);
        if cx.seq <= *last {
            metrics::counter_add("dups_total", &[], 1);
        } else if cx.seq != *last + 1 {
            metrics::counter_add("gaps_total", &[], cx.seq - *last - 1);
        }
        *last = (*last).max(cx.seq);
        metrics::counter_add("seen_total", &[("informer", cx.informer)], 1);
        metrics::gauge_set("last_seq", &[("informer", cx.informer)], *last as f64);

        let hit = self
            .settings
            .name_prefix
            .as_deref()
            .is_none_or(|p| obj.name().starts_with(p));
        if !hit {
            return Ok(());
        }
        match self.settings.mode {
            Mode::Ok => Ok(()),
            Mode::Spin => loop {
                std::hint::black_box(&obj);
            },
            Mode::Alloc => {
                let mut hog: Vec<Vec<u8>> = Vec::new();
                loop {
                    hog.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hog);
                }
            }
            Mode::Trap => panic!("trap on purpose at {}", obj.key()),
            Mode::Error => Err(format!("refusing {} on purpose", obj.key()).into()),
            Mode::Gate => {
                while let Ok(Some(_)) = cache::get(cx.informer, obj.namespace(), obj.name()) {
                    let start = std::time::Instant::now();
                    while start.elapsed().as_millis() < 1 {
                        std::hint::black_box(&obj);
                    }
                }
                Ok(())
            }
            Mode::Busy => {
                let start = std::time::Instant::now();
                while start.elapsed().as_millis() < u128::from(self.settings.busy_ms) {
                    std::hint::black_box(&obj);
                }
                Ok(())
            }
            Mode::Probe => {
                run_probes();
                Ok(())
            }
            Mode::Actions => {
                if obj.label("n").is_some() {
                    return Ok(());
                }
                let mut target = actions::object_ref(obj);
                if let Some(name) = &self.settings.target_name {
                    target.name = name.clone();
                }
                if let Some(ns) = &self.settings.target_namespace {
                    target.namespace = Some(ns.clone());
                }
                for i in 0..self.settings.actions {
                    let n = i.to_string();
                    let asked = match self.settings.action_verb {
                        ActionVerb::Patch => {
                            actions::patch_metadata(&target, &[("n", Some(&n))], &[])
                        }
                        ActionVerb::Apply => actions::apply(&serde_json::json!({
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "metadata": {
                                "name": format!("{}-report", obj.name()),
                                "namespace": obj.namespace(),
                            },
                            "data": { "n": n, "of": obj.resource_version() },
                        })),
                        ActionVerb::Event => actions::create_event(
                            &target,
                            actions::EventType::Warning,
                            self.settings.event_reason.as_deref().unwrap_or("Tested"),
                            &self
                                .settings
                                .event_message
                                .clone()
                                .unwrap_or_else(|| format!("event {n}")),
                        ),
                    };
                    let result = match asked {
                        Ok(Accepted::Queued) => "queued",
                        Ok(Accepted::DryRun) => "dry-run",
                        Err(ActionError::NotGranted(_)) => "not-granted",
                        Err(ActionError::RateLimited(_)) => "rate-limited",
                        Err(ActionError::Invalid(_)) => "invalid",
                        Err(ActionError::QueueFull(_)) => "queue-full",
                        Err(ActionError::Unavailable(_)) => "unavailable",
                    };
                    metrics::counter_add("action_total", &[("result", result)], 1);
                }
                Ok(())
            }
            Mode::Verdicts => {
                for i in 0..self.settings.actions {
                    let said = policy::violation(
                        cx.informer,
                        obj,
                        "churn",
                        policy::Severity::High,
                        &format!("verdict {i}"),
                    );
                    let result = match said {
                        Ok(()) => "ok",
                        Err(policy::VerdictError::NotGranted(_)) => "not-granted",
                        Err(policy::VerdictError::NotFound(_)) => "not-found",
                        Err(policy::VerdictError::Invalid(_)) => "invalid",
                    };
                    metrics::counter_add("verdict_total", &[("result", result)], 1);
                }
                Ok(())
            }
        }
    }
}

impl Plugin for Faults {
    fn describe() -> PluginInfo {
        wisp_sdk::info("test-faults", env!("CARGO_PKG_VERSION"), &[])
    }

    fn init(settings: &str) -> Result<Self> {
        let settings: Settings = wisp_sdk::parse_settings(settings)?;
        if settings.panic_in_init {
            panic!("panic in init on purpose");
        }
        let start = std::time::Instant::now();
        while start.elapsed().as_millis() < u128::from(settings.busy_in_init_ms) {
            std::hint::black_box(&settings);
        }
        if settings.spin_in_init {
            // Spins until the host cuts it.
            loop {
                std::hint::black_box(&settings);
            }
        }
        Ok(Self {
            settings,
            state: State::default(),
        })
    }

    fn on_add(&mut self, cx: &Context, obj: &Object, _initial: bool) -> Result<()> {
        self.observe(cx, obj)?;
        self.state
            .view
            .insert(obj.key(), obj.resource_version().to_owned());
        Ok(())
    }

    fn on_update(
        &mut self,
        cx: &Context,
        _old: &Object,
        new: &Object,
        _resync: bool,
    ) -> Result<()> {
        self.observe(cx, new)?;
        self.state
            .view
            .insert(new.key(), new.resource_version().to_owned());
        Ok(())
    }

    fn on_delete(&mut self, cx: &Context, obj: &Object, _unknown: bool) -> Result<()> {
        self.observe(cx, obj)?;
        self.state.view.remove(&obj.key());
        Ok(())
    }

    fn after_batch(&mut self) {
        let sum = self
            .state
            .view
            .iter()
            .fold(0u64, |acc, (k, rv)| acc ^ fnv52(k, rv));
        metrics::gauge_set("view_size", &[], self.state.view.len() as f64);
        metrics::gauge_set("view_checksum", &[], sum as f64);
        metrics::gauge_set("handled", &[], self.state.handled as f64);
    }

    fn snapshot(&self) -> Option<Vec<u8>> {
        serde_json::to_vec(&self.state).ok()
    }

    fn restore(&mut self, state: Vec<u8>) -> Result<()> {
        self.state = serde_json::from_slice(&state).context("cannot read the previous state")?;
        metrics::counter_add("restored_total", &[], 1);
        Ok(())
    }
}

wisp_sdk::export_plugin!(Faults);
