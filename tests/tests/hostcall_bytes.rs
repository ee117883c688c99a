//! The bytes one host call makes the host copy out of a plugin (plugins/test-hostile's
//! `aliasLabels`): bounded by the plugin's host-call budget, aliases counted as copied.
//!
//! A test binary of its own (not a module of `hostile` or `integration`): its bound is on the
//! process's peak resident memory, which other tests' allocations would move.

mod common;

use std::time::Duration;

use common::rig::{counter, rig, spec};
use common::*;
use serde_json::json;
use wisp_host::plugin::instance::{MAX_HOST_CALL_BYTES, host_call_budget};
use wisp_host::plugin::{OnFailure, PluginState};
use wisp_tests::pod;

/// A line of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    kb * 1024
}

/// Resets the process's peak resident memory (`VmHWM`) to what it holds now.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5")
        .expect("reset VmHWM through /proc/self/clear_refs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aliased_label_values_are_refused_at_the_host_call_byte_budget() {
    const ATTACKS: u64 = 3;
    let r = rig(vec![]).await;
    // 8 MiB of memory, one 1 MiB string, 63 label values pointing at it: 63 MiB to copy per
    // `counter-add` (wasmtime's default allows 128 MiB).
    let mut s = spec(
        "aliaser",
        "test_hostile",
        json!({"aliasLabels": 63, "aliasBytes": 1 << 20}),
    );
    s.limits.memory = 8 << 20;
    s.limits.deadline = Duration::from_secs(10);
    s.on_failure = OnFailure {
        quarantine_after: ATTACKS as u32,
        ..OnFailure::default()
    };
    let h = r.manager.start(s).unwrap();
    reset_peak();
    let before = status_bytes("VmRSS:");
    for i in 0..ATTACKS {
        r.server.create(pod("default", &format!("a-{i}"))).unwrap();
    }
    until("every attack handled", || {
        counter(&h, |c| &c.delivered) + counter(&h, |c| &c.failed) >= ATTACKS
    })
    .await;
    let grew = status_bytes("VmHWM:").saturating_sub(before);
    // Nothing near the aliased 63 MiB was ever held by the host (the budget is 4 MiB).
    assert!(
        grew < 24 << 20,
        "the host's peak grew by {} MiB",
        grew >> 20
    );

    // Each call failed as a plugin error: counted as a trap, the instance replaced, and the
    // plugin quarantined after `quarantineAfter` of them in a row.
    // (A batch that fails is tried again one notification at a time: a trap more.)
    assert!(counter(&h, |c| &c.traps) >= ATTACKS);
    assert_eq!(counter(&h, |c| &c.failed), ATTACKS);
    let budget = host_call_budget(8 << 20);
    assert_eq!(budget, MAX_HOST_CALL_BYTES);
    let e = h.status().last_error().expect("an error kept");
    assert!(
        e.contains(&format!("a host call passed more than {budget} bytes")),
        "{e}"
    );
    until("quarantined", || {
        matches!(h.state(), PluginState::Quarantined { .. })
    })
    .await;
}
