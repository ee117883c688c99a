//! The audit log of actions: every action a plugin asked for that was sent, failed, dry-run or
//! refused (except rate-limit refusals, which are only counted). Each entry goes to the log
//! (target `wisp::audit`), to the plugin's own ring read by `/audit`, and, when configured, as one
//! JSON line to a file.
//!
//! No plugin can flood it or erase another's entries:
//! - refusals are aggregated per plugin and reason ([`AuditLog::refused`]): the first of a
//!   [`REFUSAL_WINDOW`] is written in full, the others only counted, and when the window is over
//!   one summary entry (`count`: how many, `detail`: "N similar refusals ...") is written. A
//!   plugin's refusals therefore write at most 2 entries per reason per window, however many it
//!   makes; what is accepted is bounded by its rate limit;
//! - each plugin has its own ring of [`AUDIT_RING`] entries; `/audit` merges them in order;
//! - the file is capped ([`DEFAULT_MAX_FILE_BYTES`] unless set): when the next line would pass
//!   the cap it is renamed to `<file>.1` (replacing the previous one) and a new one is begun, so
//!   the audit files take at most twice the cap.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::policy::rfc3339;
use crate::sync::lock;

/// Entries kept in memory per plugin for `/audit`.
pub const AUDIT_RING: usize = 1000;

/// How long similar refusals are counted before their summary is written.
pub const REFUSAL_WINDOW: Duration = Duration::from_secs(10);

/// Size at which the audit file is rotated, unless configured.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 << 20;

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
    /// For a summary of similar refusals: how many it stands for (the target is the last one's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
}

/// Refusals of one plugin for one reason in the current window.
struct Window {
    start: Instant,
    /// Refusals counted, not written, since `start`.
    suppressed: u64,
    /// The last of them.
    last: Option<AuditEntry>,
}

#[derive(Default)]
struct Rings {
    /// Per plugin: (order of writing, entry), oldest first.
    by_plugin: HashMap<String, VecDeque<(u64, AuditEntry)>>,
    next: u64,
    /// Per (plugin, reason).
    windows: HashMap<(String, String), Window>,
}

struct AuditFile {
    path: PathBuf,
    file: std::fs::File,
    size: u64,
    max: u64,
}

impl AuditFile {
    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.size > 0 && self.size + line.len() as u64 > self.max {
            let mut old = self.path.clone().into_os_string();
            old.push(".1");
            std::fs::rename(&self.path, &old)?;
            self.file = open(&self.path)?;
            self.size = 0;
        }
        self.file.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }
}

fn open(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
}

/// The audit log.
pub struct AuditLog {
    rings: Mutex<Rings>,
    file: Option<Mutex<AuditFile>>,
    window: Duration,
}

impl Default for AuditLog {
    fn default() -> Self {
        Self {
            rings: Mutex::default(),
            file: None,
            window: REFUSAL_WINDOW,
        }
    }
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("file", &self.file.is_some())
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

impl AuditLog {
    /// An audit log kept in memory (and in the log) only.
    pub fn memory() -> Self {
        Self::default()
    }

    /// An audit log that also appends JSON lines to `path` (created if missing), rotated at
    /// [`DEFAULT_MAX_FILE_BYTES`].
    pub fn to_file(path: &Path) -> std::io::Result<Self> {
        Self::to_file_capped(path, DEFAULT_MAX_FILE_BYTES)
    }

    /// An audit log that also appends JSON lines to `path`, renamed to `<path>.1` when the next
    /// line would take it past `max_bytes`.
    pub fn to_file_capped(path: &Path, max_bytes: u64) -> std::io::Result<Self> {
        let file = open(path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            file: Some(Mutex::new(AuditFile {
                path: path.to_owned(),
                file,
                size,
                max: max_bytes.max(1),
            })),
            ..Self::default()
        })
    }

    /// The same log, counting similar refusals for `window` before writing their summary.
    pub fn with_refusal_window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// How long similar refusals are counted before their summary is written.
    pub fn refusal_window(&self) -> Duration {
        self.window
    }

    fn rings(&self) -> std::sync::MutexGuard<'_, Rings> {
        lock(&self.rings)
    }

    /// Records an entry.
    pub fn record(&self, e: AuditEntry) {
        let mut rings = self.rings();
        self.flush_due(&mut rings, Instant::now());
        self.write(&mut rings, e);
    }

    /// Records a refusal for `reason` (e.g. `not-granted`): in full if it is the first of its
    /// plugin and reason in the current window, else only counted, for the window's summary.
    /// Returns whether it was written in full.
    pub fn refused(&self, e: AuditEntry, reason: &str) -> bool {
        self.refused_at(e, reason, Instant::now())
    }

    fn refused_at(&self, e: AuditEntry, reason: &str, now: Instant) -> bool {
        let mut rings = self.rings();
        self.flush_due(&mut rings, now);
        let key = (e.plugin.clone(), reason.to_owned());
        if let Some(w) = rings.windows.get_mut(&key) {
            w.suppressed += 1;
            w.last = Some(e);
            return false;
        }
        rings.windows.insert(
            key,
            Window {
                start: now,
                suppressed: 0,
                last: None,
            },
        );
        self.write(&mut rings, e);
        true
    }

    /// Writes the summaries of refusal windows that are over (also done at every record and
    /// read; a caller schedules this one [`AuditLog::refusal_window`] after a window opens so a
    /// summary is not left waiting for the next entry).
    pub fn flush(&self) {
        let mut rings = self.rings();
        self.flush_due(&mut rings, Instant::now());
    }

    /// Writes the summaries of the windows that are over.
    fn flush_due(&self, rings: &mut Rings, now: Instant) {
        let window = self.window;
        let due: Vec<(String, String)> = rings
            .windows
            .iter()
            .filter(|(_, w)| now.saturating_duration_since(w.start) >= window)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            let Some(w) = rings.windows.remove(&key) else {
                continue;
            };
            if let Some(mut last) = w.last {
                let n = w.suppressed;
                last.detail = format!(
                    "{n} similar refusal{} ({}) in the last {:.0?}; the last: {}",
                    if n == 1 { "" } else { "s" },
                    key.1,
                    window,
                    last.detail
                );
                last.time = rfc3339(SystemTime::now());
                last.count = Some(n);
                self.write(rings, last);
            }
        }
    }

    fn write(&self, rings: &mut Rings, e: AuditEntry) {
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
            count = e.count.unwrap_or(1),
            detail = %e.detail,
            "action"
        );
        if let Some(f) = &self.file {
            let mut line = serde_json::to_string(&e).unwrap_or_default();
            line.push('\n');
            let mut f = lock(f);
            if let Err(err) = f.write(line.as_bytes()) {
                tracing::error!(error = %err, "cannot write the audit log file");
            }
        }
        let seq = rings.next;
        rings.next += 1;
        let ring = rings.by_plugin.entry(e.plugin.clone()).or_default();
        if ring.len() == AUDIT_RING {
            ring.pop_front();
        }
        ring.push_back((seq, e));
    }

    /// The last [`AUDIT_RING`] entries of each plugin (or of one), oldest first. Summaries of
    /// refusal windows that are over are written first.
    pub fn entries(&self, plugin: Option<&str>) -> Vec<AuditEntry> {
        self.entries_at(plugin, Instant::now())
    }

    fn entries_at(&self, plugin: Option<&str>, now: Instant) -> Vec<AuditEntry> {
        let mut rings = self.rings();
        self.flush_due(&mut rings, now);
        let mut all: Vec<&(u64, AuditEntry)> = match plugin {
            Some(p) => rings.by_plugin.get(p).into_iter().flatten().collect(),
            None => rings.by_plugin.values().flatten().collect(),
        };
        all.sort_unstable_by_key(|(seq, _)| *seq);
        all.into_iter().map(|(_, e)| e.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(plugin: &str, result: AuditResult, detail: &str) -> AuditEntry {
        AuditEntry {
            time: rfc3339(SystemTime::now()),
            plugin: plugin.into(),
            version: "1".into(),
            verb: "patch".into(),
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("a".into()),
            name: "p".into(),
            result,
            detail: detail.into(),
            attempts: 0,
            count: None,
        }
    }

    #[test]
    fn a_flood_of_refusals_is_one_entry_and_one_summary_per_window() {
        let log = AuditLog::memory();
        let t0 = Instant::now();
        let during = t0 + REFUSAL_WINDOW / 2;
        let refuse = |detail: &str, reason, at| {
            log.refused_at(entry("bad", AuditResult::Refused, detail), reason, at)
        };
        assert!(refuse("no 0", "not-granted", t0));
        for i in 1..10_000 {
            assert!(!refuse(&format!("no {i}"), "not-granted", during));
        }
        // Another reason has its own window.
        assert!(refuse("bad key", "invalid", during));
        assert_eq!(log.entries_at(Some("bad"), during).len(), 2);
        let after = t0 + REFUSAL_WINDOW;
        let e = log.entries_at(Some("bad"), after);
        assert_eq!(e.len(), 3, "{e:?}");
        assert_eq!(e[2].count, Some(9_999));
        assert!(
            e[2].detail
                .starts_with("9999 similar refusals (not-granted) in the last 10s"),
            "{}",
            e[2].detail
        );
        assert!(
            e[2].detail.ends_with("the last: no 9999"),
            "{}",
            e[2].detail
        );
        // After the window the next refusal is written in full again.
        assert!(refuse("again", "not-granted", after));
        assert_eq!(log.entries_at(None, after).len(), 4);
    }

    #[test]
    fn each_plugin_keeps_its_own_entries_and_all_are_merged_in_order() {
        let log = AuditLog::memory();
        log.record(entry("quiet", AuditResult::Applied, "first"));
        for i in 0..3 * AUDIT_RING {
            log.record(entry("loud", AuditResult::DryRun, &i.to_string()));
        }
        log.record(entry("quiet", AuditResult::Applied, "last"));
        let quiet = log.entries(Some("quiet"));
        assert_eq!(
            quiet.iter().map(|e| e.detail.as_str()).collect::<Vec<_>>(),
            ["first", "last"]
        );
        let all = log.entries(None);
        assert_eq!(all.len(), AUDIT_RING + 2);
        assert_eq!(all[0].detail, "first");
        assert_eq!(all[1].detail, (2 * AUDIT_RING).to_string());
        assert_eq!(all.last().unwrap().detail, "last");
    }

    #[test]
    fn the_file_is_rotated_at_its_cap() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::to_file_capped(&path, 4096).unwrap();
        for i in 0..1000 {
            log.record(entry("p", AuditResult::Applied, &i.to_string()));
        }
        let now = std::fs::metadata(&path).unwrap().len();
        let old = std::fs::metadata(dir.path().join("audit.jsonl.1"))
            .unwrap()
            .len();
        assert!(now <= 4096 && old <= 4096, "{now} {old}");
        let last = std::fs::read_to_string(&path).unwrap();
        assert!(last.lines().last().unwrap().contains(r#""detail":"999""#));
        assert!(
            last.lines()
                .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok())
        );
    }
}
