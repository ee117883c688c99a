//! The audit log of actions: every action a plugin asked for that was sent, failed, dry-run or
//! refused (except rate-limit refusals, which are only counted, so a runaway plugin cannot flood
//! it). Each entry goes to the log (target `wisp::audit`), to a ring read by `/audit`, and, when
//! configured, as one JSON line to a file.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use serde::Serialize;

/// Entries kept in memory for `/audit`.
pub const AUDIT_RING: usize = 1000;

/// What became of an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuditResult {
    /// The API server accepted it.
    Applied,
    /// The API server refused it, or retries ran out.
    Failed,
    /// Logged, not sent (dry-run).
    DryRun,
    /// The host refused it (not granted, invalid, queue full, no API server).
    Refused,
    /// Accepted but never sent: the host shut down and its grace period ran out first (or
    /// ran out while it was being sent: the API server may have applied it).
    NotSent,
}

/// One audited action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// RFC 3339.
    pub time: String,
    /// Configured plugin name.
    pub plugin: String,
    /// Plugin version (from its `describe`).
    pub version: String,
    /// `patch`, `apply` or `create`.
    pub verb: String,
    /// Target `apiVersion`.
    pub api_version: String,
    /// Target kind.
    pub kind: String,
    /// Target namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Target name.
    pub name: String,
    /// What became of it.
    pub result: AuditResult,
    /// Why it failed or was refused, or what was done.
    pub detail: String,
    /// Requests sent (0 when refused or dry-run).
    pub attempts: u32,
}

/// The audit log.
#[derive(Debug, Default)]
pub struct AuditLog {
    ring: Mutex<VecDeque<AuditEntry>>,
    file: Option<Mutex<std::fs::File>>,
}

impl AuditLog {
    /// An audit log kept in memory (and in the log) only.
    pub fn memory() -> Self {
        Self::default()
    }

    /// An audit log that also appends JSON lines to `path` (created if missing).
    pub fn to_file(path: &Path) -> std::io::Result<Self> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self {
            ring: Mutex::default(),
            file: Some(Mutex::new(f)),
        })
    }

    /// Records an entry.
    pub fn record(&self, e: AuditEntry) {
        tracing::info!(
            target: "wisp::audit",
            plugin = %e.plugin,
            version = %e.version,
            verb = %e.verb,
            api_version = %e.api_version,
            kind = %e.kind,
            namespace = e.namespace.as_deref().unwrap_or(""),
            name = %e.name,
            result = ?e.result,
            attempts = e.attempts,
            detail = %e.detail,
            "action"
        );
        if let Some(f) = &self.file {
            let mut line = serde_json::to_string(&e).unwrap_or_default();
            line.push('\n');
            let mut f = f.lock().unwrap_or_else(PoisonError::into_inner);
            if let Err(err) = f.write_all(line.as_bytes()) {
                tracing::error!(error = %err, "cannot write the audit log file");
            }
        }
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        if ring.len() == AUDIT_RING {
            ring.pop_front();
        }
        ring.push_back(e);
    }

    /// The last [`AUDIT_RING`] entries, oldest first, optionally of one plugin.
    pub fn entries(&self, plugin: Option<&str>) -> Vec<AuditEntry> {
        self.ring
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|e| plugin.is_none_or(|p| e.plugin == p))
            .cloned()
            .collect()
    }
}
