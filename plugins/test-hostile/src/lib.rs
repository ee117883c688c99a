//! A hostile plugin, for the sandbox tests (never shipped with the examples): each setting
//! makes it attack one limit of the host, on every notification it handles.
//!
//! Settings (all optional, camelCase):
//! - `sleepMs`: sleep that long in `handle` (a blocking WASI call: clocks + poll);
//!   `sleepInInitMs`: the same in `init`.
//! - `logLines` x `logBytes`: log that many lines of that many bytes; `logText`: log this text
//!   (newlines and all) instead.
//! - `stdoutBytes`: print a line of that many bytes to stdout.
//! - `series` x `labelBytes`: set that many gauge series `flood{v="<n><padding>"}` with label
//!   values of that many bytes.
//! - `counter` / `gauge`: add 1 to a counter, set a gauge, of that name (no labels).
//! - `errorBytes`: fail each notification with a message of that many bytes.
//! - `aliasLabels` x `aliasBytes`: one `counter-add` whose `aliasLabels` label values all point
//!   at ONE string of `aliasBytes` bytes in the plugin's memory (the guest holds it once; the
//!   host, lifting the list, would copy it `aliasLabels` times).
//!
//! - `admitWarnings` x `admitWarningBytes`: its admission answer carries that many warnings of
//!   that many bytes.
//!
//! Its `describe` gives a version of 1 MiB and a name with a newline in it. Its `admit` attacks as
//! `handle` does, then tries to keep a verdict and to take two actions on the object asked about,
//! and allows it with what each attempt got as warnings (`verdict: ...`, `apply: ...`,
//! `event: ...`).

use serde::Deserialize;
use wisp_sdk::admission::{Request, Response};
use wisp_sdk::policy::{self, Severity};
use wisp_sdk::{Context, Object, Plugin, PluginInfo, Result, actions, metrics};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
struct Settings {
    sleep_ms: u64,
    sleep_in_init_ms: u64,
    log_lines: u32,
    log_bytes: usize,
    log_text: Option<String>,
    stdout_bytes: usize,
    series: u32,
    label_bytes: usize,
    counter: Option<String>,
    gauge: Option<String>,
    error_bytes: usize,
    alias_labels: usize,
    alias_bytes: usize,
    admit_warnings: usize,
    admit_warning_bytes: usize,
}

struct Hostile {
    settings: Settings,
    calls: u64,
}

fn padded(prefix: &str, bytes: usize) -> String {
    let mut s = prefix.to_owned();
    while s.len() < bytes {
        s.push('x');
    }
    s
}

/// `counter-add` with `n` label values that are one `bytes`-byte string, aliased: the list holds
/// `n` pointers to the same bytes, as a guest may lower it by hand.
fn aliased_counter(n: usize, bytes: usize) {
    let mut big = padded("", bytes);
    let (ptr, len, cap) = (big.as_mut_ptr(), big.len(), big.capacity());
    let labels: Vec<(String, String)> = (0..n)
        .map(|i| {
            // SAFETY: every alias points at `big`'s buffer, which outlives `labels`; none is
            // written to or dropped (the vector is forgotten below), so the buffer is neither
            // mutated through an alias nor freed twice.
            let v = unsafe { String::from_raw_parts(ptr, len, cap) };
            (format!("l{i}"), v)
        })
        .collect();
    wisp_sdk::bindings::wisp::plugin::host::counter_add("aliased", &labels, 1);
    for (k, v) in labels {
        drop(k);
        std::mem::forget(v);
    }
    drop(big);
}

impl Hostile {
    fn attack(&mut self) -> Result<()> {
        let s = &self.settings;
        self.calls += 1;
        if s.sleep_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(s.sleep_ms));
        }
        for i in 0..s.log_lines {
            match &s.log_text {
                Some(t) => wisp_sdk::info!("{t}"),
                None => wisp_sdk::info!("{}", padded(&format!("line {i} "), s.log_bytes)),
            }
        }
        if s.stdout_bytes > 0 {
            println!("{}", padded("out ", s.stdout_bytes));
        }
        for i in 0..s.series {
            let v = padded(&format!("{}-{i}-", self.calls), s.label_bytes);
            metrics::gauge_set("flood", &[("v", &v)], 1.0);
        }
        if let Some(c) = &s.counter {
            metrics::counter_add(c, &[], 1);
        }
        if let Some(g) = &s.gauge {
            metrics::gauge_set(g, &[], 1.0);
        }
        if s.alias_labels > 0 {
            aliased_counter(s.alias_labels, s.alias_bytes);
        }
        if s.error_bytes > 0 {
            return Err(padded("refused ", s.error_bytes).into());
        }
        Ok(())
    }
}

impl Plugin for Hostile {
    fn describe() -> PluginInfo {
        wisp_sdk::info(
            "test-hostile\nINFO wisp: forged",
            &padded("0.1.0-", 1 << 20),
            &[],
        )
    }

    fn init(settings: &str) -> Result<Self> {
        let settings: Settings = wisp_sdk::parse_settings(settings)?;
        if settings.sleep_in_init_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(settings.sleep_in_init_ms));
        }
        Ok(Self { settings, calls: 0 })
    }

    fn on_add(&mut self, _cx: &Context, _obj: &Object, _initial: bool) -> Result<()> {
        self.attack()
    }

    fn on_update(
        &mut self,
        _cx: &Context,
        _old: &Object,
        _new: &Object,
        _resync: bool,
    ) -> Result<()> {
        self.attack()
    }

    fn on_delete(&mut self, _cx: &Context, _obj: &Object, _unknown: bool) -> Result<()> {
        self.attack()
    }

    fn admit(&mut self, req: &Request<'_>) -> Result<Response> {
        self.attack()?;
        let mut answer = Response::allow();
        if let (Some(obj), Some(informer)) = (req.object(), req.informer()) {
            let verdict = policy::violation(informer, obj, "sneak", Severity::High, "kept?");
            answer = answer.warn(format!("verdict: {verdict:?}"));
            let manifest = serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "sneak", "namespace": obj.namespace().unwrap_or("default")},
            });
            answer = answer.warn(format!("apply: {:?}", actions::apply(&manifest)));
            let event = actions::create_event(
                &actions::object_ref(obj),
                actions::EventType::Normal,
                "Sneak",
                "during admission",
            );
            answer = answer.warn(format!("event: {event:?}"));
        }
        let s = &self.settings;
        for i in 0..s.admit_warnings {
            answer = answer.warn(padded(&format!("w{i}-"), s.admit_warning_bytes));
        }
        Ok(answer)
    }
}

wisp_sdk::export_plugin!(Hostile);
