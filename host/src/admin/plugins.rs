//! `/plugins`: one JSON object per plugin with what it is, where it came from, how it is doing
//! and its last log lines.

use std::collections::BTreeMap;

use serde::Serialize;

use super::PLUGIN_COUNTERS;
use crate::informer::{Overflow, QueueBound};
use crate::plugin::status::PluginCounters;
use crate::plugin::{LoadSource, PluginHandle, PluginState};

/// How many of a plugin's most recent log lines `/plugins` shows.
pub const RECENT_LOG_LINES: usize = 20;

/// One plugin as `/plugins` shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginView {
    /// The configured name.
    pub name: String,
    /// Path of the module file.
    pub module: String,
    /// The OCI reference, the manifest digest it resolved to and the signing key, when the
    /// module came from a registry (left out otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oci: Option<crate::plugin::spec::ModuleOrigin>,
    /// The version the plugin reports.
    pub version: String,
    /// The name the plugin reports for itself.
    pub plugin_name: String,
    /// SHA-256 of the module, hex.
    pub hash: String,
    /// 1 for the first version, +1 per reload or rollback.
    pub generation: u64,
    /// The `wisp:plugin` world its component targets: `0.3.0` (byte batches, and admission
    /// when it exports it), `0.2.0` (byte batches) or `0.1.0` (records).
    pub abi: &'static str,
    /// `compiled`, `disk-cache` or `memory`.
    pub loaded_from: &'static str,
    /// Which compiler the running code comes from: `optimized` (Cranelift), or `baseline`
    /// (Winch: the first-load tier, until the background Cranelift compile lands and the
    /// plugin is moved onto it, generation + 1).
    pub tier: &'static str,
    /// `running` or `quarantined`.
    pub state: &'static str,
    /// Why it was quarantined.
    pub quarantine_reason: Option<String>,
    /// The last failure.
    pub last_error: Option<String>,
    /// Every listener of the plugin has handled its initial list.
    pub synced: bool,
    /// The counters of [`PLUGIN_COUNTERS`], by their JSON key.
    pub counters: BTreeMap<&'static str, u64>,
    /// One queue per informer the plugin receives.
    pub queues: Vec<QueueView>,
    /// The last [`RECENT_LOG_LINES`] log lines, oldest first.
    pub recent_logs: Vec<String>,
    /// Manifest files of a `dir:` source not read whole (`FILE: what`): the cluster the
    /// plugin sees lacks their objects. Left out when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unread_manifests: Vec<String>,
}

/// The queue of a plugin's listener on one informer.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueView {
    /// The informer.
    pub informer: String,
    /// Notifications waiting.
    pub depth: usize,
    /// Deepest it has been.
    pub max_depth: usize,
    /// Its bound (`None`: unbounded).
    pub max: Option<usize>,
    /// Bytes of the notifications waiting.
    pub bytes: usize,
    /// Its bound in bytes (`None`: not bounded in bytes).
    pub max_bytes: Option<usize>,
    /// Seconds the oldest notification waiting has waited (`None`: none waits).
    pub oldest_age_seconds: Option<f64>,
    /// `coalesce`, `dropOldest` or `dropNewest` (`None`: unbounded).
    pub overflow: Option<&'static str>,
    /// Notifications handed to the plugin so far.
    pub delivered: u64,
    /// Notifications in a call to the plugin that panicked in the host (counted apart from
    /// `delivered`; a plugin's own traps are its `traps` counter).
    pub failed: u64,
    /// Notifications queued so far (the last sequence number).
    pub queued: u64,
    /// Notifications dropped on overflow.
    pub dropped: u64,
    /// Notifications merged into an earlier one on overflow.
    pub coalesced: u64,
}

/// The view of `h` now.
pub fn view(h: &PluginHandle) -> PluginView {
    let status = h.status();
    let report = h.report();
    let (state, quarantine_reason) = match h.state() {
        PluginState::Running => ("running", None),
        PluginState::Quarantined { reason } => ("quarantined", Some(reason)),
    };
    let running = status.running();
    let logs = &status.logs;
    let mut recent_logs = logs.since(logs.total().saturating_sub(RECENT_LOG_LINES as u64));
    // Lines pushed between the two reads come on top; keep the newest.
    let extra = recent_logs.len().saturating_sub(RECENT_LOG_LINES);
    recent_logs.drain(..extra);
    PluginView {
        name: h.name().to_owned(),
        module: running.module.display().to_string(),
        oci: running.origin,
        version: running.version,
        plugin_name: running.plugin_name,
        hash: running.hash,
        generation: running.generation,
        abi: running.abi,
        loaded_from: source_name(report.source),
        tier: h.tier().as_str(),
        state,
        quarantine_reason,
        last_error: status.last_error(),
        synced: h.has_synced(),
        counters: PLUGIN_COUNTERS
            .iter()
            .map(|c| (c.json, PluginCounters::get((c.get)(&status.counters))))
            .collect(),
        queues: h
            .queues()
            .into_iter()
            .map(|(informer, s)| QueueView {
                informer,
                depth: s.depth,
                max_depth: s.max_depth,
                max: s.bound.max(),
                bytes: s.bytes,
                max_bytes: s.bound.max_bytes(),
                oldest_age_seconds: s.oldest_age.map(|d| d.as_secs_f64()),
                overflow: match s.bound {
                    QueueBound::Unbounded => None,
                    QueueBound::Bounded { overflow, .. } => Some(overflow_name(overflow)),
                },
                delivered: s.delivered,
                failed: s.failed,
                queued: s.queued,
                dropped: s.dropped,
                coalesced: s.coalesced,
            })
            .collect(),
        recent_logs,
        unread_manifests: Vec::new(),
    }
}

/// How `/plugins` (and the config) names an overflow policy.
pub fn overflow_name(o: Overflow) -> &'static str {
    match o {
        Overflow::Coalesce => "coalesce",
        Overflow::DropOldest => "dropOldest",
        Overflow::DropNewest => "dropNewest",
        Overflow::Quarantine => "quarantine",
    }
}

/// How `/plugins` names where a module came from.
pub fn source_name(s: LoadSource) -> &'static str {
    match s {
        LoadSource::Compiled => "compiled",
        LoadSource::Disk => "disk-cache",
        LoadSource::Memory => "memory",
    }
}
