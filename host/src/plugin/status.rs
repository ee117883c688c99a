//! What can be read about a running plugin without touching its instance: counters, status,
//! last error, recent log lines and the metrics the plugin itself reports.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::spec::LogLevel;
use crate::sync::lock;

/// How many recent log lines a plugin keeps for `/plugins` and the replay tool...
pub const LOG_RING_LINES: usize = 1000;
/// ...and how many bytes of them, at most.
pub const LOG_RING_BYTES: usize = 256 * 1024;
/// Longest log line (bytes) a plugin writes (with `log`, or to stdout/stderr); longer ones are
/// cut and marked `...`.
pub const MAX_LOG_LINE: usize = 8 * 1024;
/// A plugin's log budget, in bytes per second (the host log and the ring): lines over it are
/// dropped and counted (`log_lines_dropped`), and the host says once a second how many.
pub const LOG_BYTES_PER_SEC: f64 = 64.0 * 1024.0;
/// Bytes a plugin may log at once above its rate.
pub const LOG_BURST_BYTES: f64 = 512.0 * 1024.0;
/// What a line costs of the budget at least (so short lines are limited too: 256 a second).
pub const LOG_LINE_MIN_COST: usize = 256;
/// Most metric series one plugin may create; further ones are dropped (and counted).
pub const MAX_GUEST_SERIES: usize = 1000;
/// Most bytes of names, label names and label values of all of a plugin's series together.
pub const MAX_GUEST_SERIES_BYTES: usize = 256 * 1024;

/// `text` safe to print on one line of a text log: control characters (newlines, escapes,
/// carriage returns) and the Unicode marks that reorder text written as escapes (`\n`,
/// `\u{1b}`), so a plugin cannot forge or hide host log lines.
pub fn escape_line(text: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char =
        |c: char| c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
    if !text.chars().any(unsafe_char) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// `text` cut to at most `max` bytes (at a character boundary), marked `...` when cut.
pub fn clip(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut cut = max.saturating_sub(3);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &text[..cut]).into()
}

struct Ring {
    lines: VecDeque<String>,
    /// Bytes of `lines`.
    bytes: usize,
    /// Lines ever pushed.
    total: u64,
    /// What the lines the plugin logged cost of its budget, ever.
    spent: u64,
    /// Log budget left, in bytes.
    budget: f64,
    /// When the budget was last refilled.
    refilled: std::time::Instant,
    /// Lines dropped over the budget since the host last said so.
    dropped: u64,
    /// When the host last said so.
    said: Option<std::time::Instant>,
}

impl Default for Ring {
    fn default() -> Self {
        Self {
            lines: VecDeque::new(),
            bytes: 0,
            total: 0,
            spent: 0,
            budget: LOG_BURST_BYTES,
            refilled: std::time::Instant::now(),
            dropped: 0,
            said: None,
        }
    }
}

impl Ring {
    fn push(&mut self, line: String) {
        self.bytes += line.len();
        self.lines.push_back(line);
        while self.lines.len() > LOG_RING_LINES
            || (self.bytes > LOG_RING_BYTES && self.lines.len() > 1)
        {
            if let Some(old) = self.lines.pop_front() {
                self.bytes -= old.len();
            }
        }
        self.total += 1;
    }

    /// Takes `cost` bytes from the budget; false (and counted) when it has not got them.
    fn admit(&mut self, cost: usize) -> bool {
        let now = std::time::Instant::now();
        let secs = now.duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.budget = (self.budget + secs * LOG_BYTES_PER_SEC).min(LOG_BURST_BYTES);
        let cost = cost.max(LOG_LINE_MIN_COST) as f64;
        if self.budget < cost {
            self.dropped += 1;
            return false;
        }
        self.budget -= cost;
        self.spent += cost as u64;
        true
    }

    /// Lines dropped since the host last said so, once a second at most.
    fn dropped_to_say(&mut self) -> Option<u64> {
        let now = std::time::Instant::now();
        if self.dropped == 0
            || self
                .said
                .is_some_and(|t| now.duration_since(t).as_secs() < 1)
        {
            return None;
        }
        self.said = Some(now);
        Some(std::mem::take(&mut self.dropped))
    }
}

/// A plugin's log: its last [`LOG_RING_LINES`] lines (at most [`LOG_RING_BYTES`]), and the
/// budget ([`LOG_BYTES_PER_SEC`]) that bounds what it may write to the host log.
#[derive(Clone, Default)]
pub struct LogRing(Arc<Mutex<Ring>>);

impl LogRing {
    /// Appends a line the host writes about the plugin, dropping the oldest beyond the bounds.
    pub fn push(&self, line: String) {
        lock(&self.0).push(line);
    }

    /// A line the plugin wrote (`source`: `log`, `stdout`, `stderr`), or the host wrote because
    /// of something the plugin did (`host`), within the plugin's log budget: cut to
    /// [`MAX_LOG_LINE`], escaped (see [`escape_line`]), logged at `level` with target
    /// `wisp::plugin` and kept in the ring. Over the budget it is dropped and counted in
    /// `dropped`. Returns whether it was logged.
    pub fn emit(
        &self,
        plugin: &str,
        level: LogLevel,
        source: &'static str,
        text: &str,
        dropped: &AtomicU64,
    ) -> bool {
        let text = clip(text, MAX_LOG_LINE);
        let text = escape_line(&text);
        let (admitted, say) = {
            let mut r = lock(&self.0);
            let admitted = r.admit(text.len());
            if admitted {
                r.push(format!("{}: {text}", source_tag(source, level)));
            }
            (admitted, r.dropped_to_say())
        };
        if !admitted {
            dropped.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(n) = say {
            tracing::warn!(target: "wisp::plugin", plugin, dropped = n, "log lines over the plugin's log rate dropped");
        }
        if admitted {
            match level {
                LogLevel::Trace => {
                    tracing::trace!(target: "wisp::plugin", plugin, source, "{text}")
                }
                LogLevel::Debug => {
                    tracing::debug!(target: "wisp::plugin", plugin, source, "{text}")
                }
                LogLevel::Info => tracing::info!(target: "wisp::plugin", plugin, source, "{text}"),
                LogLevel::Warn => tracing::warn!(target: "wisp::plugin", plugin, source, "{text}"),
                LogLevel::Error => {
                    tracing::error!(target: "wisp::plugin", plugin, source, "{text}")
                }
            }
        }
        admitted
    }

    /// What the lines the plugin logged cost of its log budget, ever (bytes).
    pub fn spent(&self) -> u64 {
        lock(&self.0).spent
    }

    /// Lines ever pushed (a position for [`LogRing::since`]).
    pub fn total(&self) -> u64 {
        lock(&self.0).total
    }

    /// The kept lines pushed after position `total`.
    pub fn since(&self, total: u64) -> Vec<String> {
        let r = lock(&self.0);
        let n = usize::try_from(r.total.saturating_sub(total))
            .unwrap_or(usize::MAX)
            .min(r.lines.len());
        r.lines.iter().skip(r.lines.len() - n).cloned().collect()
    }

    /// The kept lines, oldest first.
    pub fn lines(&self) -> Vec<String> {
        lock(&self.0).lines.iter().cloned().collect()
    }
}

/// How a line is tagged in the ring: `stdout`, `stderr`, or the level of a logged line.
fn source_tag(source: &'static str, level: LogLevel) -> &'static str {
    match source {
        "stdout" | "stderr" => source,
        _ => level.name(),
    }
}

pub use crate::informer::latency::{LATENCY_BUCKETS, LatencyHistogram};

/// Counters of one plugin (all monotonic except `quarantined`).
#[derive(Debug, Default)]
pub struct PluginCounters {
    /// Notifications handed to the plugin and handled with an ok outcome.
    pub delivered: AtomicU64,
    /// Notifications that failed for good (after retries).
    pub failed: AtomicU64,
    /// Calls cut by their deadline, and starts cut by the startup deadline.
    pub deadline_hits: AtomicU64,
    /// Calls that hit the memory cap.
    pub out_of_memory: AtomicU64,
    /// Calls that ran out of fuel.
    pub out_of_fuel: AtomicU64,
    /// Other traps (panics, unreachable, ...).
    pub traps: AtomicU64,
    /// Error outcomes returned by the plugin.
    pub errors: AtomicU64,
    /// Fresh instances made after a failure.
    pub restarts: AtomicU64,
    /// Retries of single notifications.
    pub retries: AtomicU64,
    /// Notifications its queues dropped on overflow (never handed to it).
    pub queue_dropped: AtomicU64,
    /// Notifications its queues merged into an earlier one for the same object on overflow.
    pub queue_coalesced: AtomicU64,
    /// Cache reads of informers not granted to the plugin, refused.
    pub denied: AtomicU64,
    /// Log lines dropped over the plugin's log rate.
    pub log_lines_dropped: AtomicU64,
    /// Metric series refused: a bad name, over the series or bytes bound.
    pub series_refused: AtomicU64,
    /// New versions swapped in (hot reloads).
    pub reloads: AtomicU64,
    /// Reloads refused (module or settings bad): the running version stayed.
    pub reload_failures: AtomicU64,
    /// New versions rolled back to the previous one after failing their first events.
    pub rollbacks: AtomicU64,
    /// Notifications dropped because the plugin is quarantined.
    pub dropped: AtomicU64,
    /// Calls into `handle`.
    pub calls: AtomicU64,
    /// Policy verdicts reported (violations and passes).
    pub verdicts: AtomicU64,
    /// Actions sent and accepted by the API server.
    pub actions_applied: AtomicU64,
    /// Actions that failed for good at the API server (after retries).
    pub actions_failed: AtomicU64,
    /// Actions refused by the host: not granted, invalid, queue full, no API server.
    pub actions_refused: AtomicU64,
    /// Actions refused because the plugin was over its rate limit.
    pub actions_rate_limited: AtomicU64,
    /// Actions logged and not sent (dry-run mode).
    pub actions_dry_run: AtomicU64,
    /// Total nanoseconds spent in `handle` calls.
    pub handle_nanos: AtomicU64,
    /// Latency of `handle` calls.
    pub handle_latency: LatencyHistogram,
    /// Calls into `admit` (admission requests asked of the plugin).
    pub admission_calls: AtomicU64,
    /// `admit` calls that gave no answer: the plugin's error, a trap, a deadline.
    pub admission_errors: AtomicU64,
    /// Latency of `admit` calls.
    pub admission_latency: LatencyHistogram,
}

impl PluginCounters {
    /// Adds `n` to `counter`.
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Reads a counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// Where a plugin is in its life.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PluginState {
    /// Receiving notifications.
    Running,
    /// Stopped receiving after repeated failures; notifications are dropped and counted.
    Quarantined {
        /// Why.
        reason: String,
    },
}

/// The version a plugin runs now (changes with reloads and rollbacks).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Running {
    /// The name its `describe` gives.
    pub plugin_name: String,
    /// The version its `describe` gives.
    pub version: String,
    /// The module file it was loaded from.
    pub module: std::path::PathBuf,
    /// Where that file came from, when pulled from an OCI registry.
    pub origin: Option<super::spec::ModuleOrigin>,
    /// SHA-256 of the module.
    pub hash: String,
    /// 1 for the first load, +1 per reload or rollback.
    pub generation: u64,
    /// The version of the `wisp:plugin` world its component targets (`0.2.0`, `0.1.0`).
    pub abi: &'static str,
    /// Which compiler its code comes from (published with the version, so readers never
    /// take the plugin's runtime lock to learn it).
    pub tier: super::compile::Tier,
}

/// A metric series a plugin reports: name plus sorted labels.
pub type SeriesKey = (String, Vec<(String, String)>);

/// Shared, lock-light view of a plugin.
#[derive(Default)]
pub struct PluginStatus {
    /// Counters.
    pub counters: PluginCounters,
    state: Mutex<Option<PluginState>>,
    running: Mutex<Running>,
    last_error: Mutex<Option<String>>,
    /// Recent log lines (plugin logs and stdout/stderr).
    pub logs: LogRing,
    counters_guest: Mutex<BTreeMap<SeriesKey, u64>>,
    gauges_guest: Mutex<BTreeMap<SeriesKey, f64>>,
    /// Bytes of the names and labels of the plugin's series.
    series_bytes: AtomicU64,
    /// Quarantined by a queue that dropped a change (`queue.overflow: quarantine`): only a
    /// reload ends it, not a rollback (the gap is there whatever version runs).
    queue_gap: std::sync::atomic::AtomicBool,
}

impl crate::actions::ActionReport for PluginStatus {
    fn version(&self) -> String {
        self.plugin_version()
    }

    fn count(&self, what: crate::actions::Counted) {
        use crate::actions::Counted;
        let c = &self.counters;
        match what {
            Counted::RateLimited => PluginCounters::add(&c.actions_rate_limited, 1),
            Counted::Refused => PluginCounters::add(&c.actions_refused, 1),
            Counted::NotGranted => {
                PluginCounters::add(&c.actions_refused, 1);
                PluginCounters::add(&c.denied, 1);
            }
            Counted::DryRun => PluginCounters::add(&c.actions_dry_run, 1),
            Counted::Applied => PluginCounters::add(&c.actions_applied, 1),
            Counted::Failed => PluginCounters::add(&c.actions_failed, 1),
        }
    }

    fn log(&self, line: String) {
        self.logs.push(line);
    }

    fn last_error(&self, error: String) {
        self.set_last_error(error);
    }
}

impl PluginStatus {
    /// The current state.
    pub fn state(&self) -> PluginState {
        lock(&self.state).clone().unwrap_or(PluginState::Running)
    }

    pub(crate) fn set_state(&self, s: PluginState) {
        *lock(&self.state) = Some(s);
    }

    /// Running again after a reload (which ends any quarantine).
    pub(crate) fn reloaded(&self) {
        self.queue_gap.store(false, Ordering::SeqCst);
        self.set_state(PluginState::Running);
    }

    /// Running again after a rollback, unless a queue quarantined it (see `queue_gap`).
    pub(crate) fn rolled_back(&self) {
        if !self.queue_gap.load(Ordering::SeqCst) {
            self.set_state(PluginState::Running);
        }
    }

    /// Quarantines plugin `plugin` for `reason` (logged, kept as its last error and in its
    /// logs) unless it is already: it receives nothing more until reloaded.
    pub(crate) fn quarantine(&self, plugin: &str, reason: String) {
        {
            let mut state = lock(&self.state);
            if matches!(*state, Some(PluginState::Quarantined { .. })) {
                return;
            }
            *state = Some(PluginState::Quarantined {
                reason: reason.clone(),
            });
        }
        tracing::error!(%plugin, %reason, "plugin quarantined: it receives nothing more until reloaded");
        self.set_last_error(reason.clone());
        self.logs.push(format!("host: quarantined: {reason}"));
    }

    /// Module hash and generation of the running version (generation 1 is the first load).
    pub fn version(&self) -> (String, u64) {
        let r = lock(&self.running);
        (r.hash.clone(), r.generation)
    }

    /// The version the running plugin gives in its `describe`.
    pub fn plugin_version(&self) -> String {
        lock(&self.running).version.clone()
    }

    /// The running version: what it says about itself, its module, hash and generation.
    pub fn running(&self) -> Running {
        lock(&self.running).clone()
    }

    pub(crate) fn set_running(&self, running: Running) {
        *lock(&self.running) = running;
    }

    /// The last failure, if any.
    pub fn last_error(&self) -> Option<String> {
        lock(&self.last_error).clone()
    }

    pub(crate) fn set_last_error(&self, e: String) {
        *lock(&self.last_error) = Some(e);
    }

    /// Whether a series may be written: an existing one always; a new one within
    /// [`MAX_GUEST_SERIES`] and [`MAX_GUEST_SERIES_BYTES`] (then counted in).
    fn series_allowed(&self, key: &SeriesKey, len: usize, exists: bool) -> bool {
        if exists {
            return true;
        }
        let bytes = series_bytes(key) as u64;
        let total = self.series_bytes.load(Ordering::Relaxed);
        if len >= MAX_GUEST_SERIES || total + bytes > MAX_GUEST_SERIES_BYTES as u64 {
            PluginCounters::add(&self.counters.series_refused, 1);
            return false;
        }
        self.series_bytes.fetch_add(bytes, Ordering::Relaxed);
        true
    }

    pub(crate) fn counter_add(&self, key: SeriesKey, v: u64) -> bool {
        let mut m = lock(&self.counters_guest);
        if !self.series_allowed(&key, m.len(), m.contains_key(&key)) {
            return false;
        }
        // A plugin can add u64::MAX twice: the counter stays at the top instead of wrapping
        // (or panicking in a debug build).
        let c = m.entry(key).or_default();
        *c = c.saturating_add(v);
        true
    }

    pub(crate) fn gauge_set(&self, key: SeriesKey, v: f64) -> bool {
        let mut m = lock(&self.gauges_guest);
        if !self.series_allowed(&key, m.len(), m.contains_key(&key)) {
            return false;
        }
        m.insert(key, v);
        true
    }

    /// Counters the plugin reported.
    pub fn guest_counters(&self) -> BTreeMap<SeriesKey, u64> {
        lock(&self.counters_guest).clone()
    }

    /// Gauges the plugin reported.
    pub fn guest_gauges(&self) -> BTreeMap<SeriesKey, f64> {
        lock(&self.gauges_guest).clone()
    }

    /// A counter the plugin reported, by name and labels (0 when never reported).
    pub fn guest_counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        lock(&self.counters_guest)
            .get(&series_key(name, labels))
            .copied()
            .unwrap_or(0)
    }

    /// A gauge the plugin reported, by name and labels.
    pub fn guest_gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        lock(&self.gauges_guest)
            .get(&series_key(name, labels))
            .copied()
    }
}

/// A plugin's queues report their overflow into its status: counted, and under
/// `queue.overflow: quarantine` a dropped change quarantines the plugin.
pub struct QueueOverflow {
    /// The plugin's name.
    pub plugin: String,
    /// Its status.
    pub status: Arc<PluginStatus>,
}

impl crate::informer::OverflowObserver for QueueOverflow {
    fn overflowed(&self, d: crate::informer::listener::Discarded) {
        let c = &self.status.counters;
        PluginCounters::add(&c.queue_dropped, d.dropped);
        PluginCounters::add(&c.queue_coalesced, d.coalesced);
        if d.quarantine {
            self.status.queue_gap.store(true, Ordering::SeqCst);
            self.status.quarantine(
                &self.plugin,
                "its queue overflowed and a change was dropped (queue.overflow: quarantine): \
                 raise queue.max or queue.maxBytes, or make it keep up"
                    .into(),
            );
        }
    }
}

/// Bytes of a series' name and labels.
fn series_bytes((name, labels): &SeriesKey) -> usize {
    name.len() + labels.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
}

/// The key of a series: name plus labels sorted by name.
pub fn series_key(name: &str, labels: &[(&str, &str)]) -> SeriesKey {
    let mut l: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    l.sort();
    (name.to_owned(), l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_quarantine_outlasts_a_rollback_and_ends_with_a_reload() {
        use crate::informer::OverflowObserver;
        use crate::informer::listener::Discarded;
        let status = Arc::new(PluginStatus::default());
        let q = QueueOverflow {
            plugin: "p".into(),
            status: status.clone(),
        };
        q.overflowed(Discarded {
            dropped: 1,
            coalesced: 0,
            quarantine: false,
        });
        assert_eq!(
            status.state(),
            PluginState::Running,
            "dropOldest's drops do not quarantine"
        );
        q.overflowed(Discarded {
            dropped: 1,
            coalesced: 0,
            quarantine: true,
        });
        assert!(matches!(status.state(), PluginState::Quarantined { .. }));
        status.rolled_back();
        assert!(
            matches!(status.state(), PluginState::Quarantined { .. }),
            "a rollback does not undo the gap"
        );
        status.reloaded();
        assert_eq!(status.state(), PluginState::Running);
        // A quarantine for failures ends with a rollback, as before.
        status.quarantine("p", "20 failures in a row".into());
        status.rolled_back();
        assert_eq!(status.state(), PluginState::Running);
        assert_eq!(PluginCounters::get(&status.counters.queue_dropped), 2);
    }

    #[test]
    fn plugin_text_is_one_printable_line() {
        assert_eq!(escape_line("plain text"), "plain text");
        assert_eq!(
            escape_line("ok\n2026-12-03T00:00:00Z  INFO wisp: forged\r\u{1b}[2J\u{202e}"),
            "ok\\n2026-12-03T00:00:00Z  INFO wisp: forged\\r\\u{1b}[2J\\u{202e}"
        );
        assert_eq!(clip("héllo", 3), "...");
        assert_eq!(clip("hello world", 8), "hello...");
        assert_eq!(clip("short", 8), "short");
    }

    #[test]
    fn a_log_flood_is_cut_to_the_budget_and_counted() {
        let ring = LogRing::default();
        let dropped = AtomicU64::new(0);
        let line = "x".repeat(4 * MAX_LOG_LINE);
        let mut logged = 0u64;
        let began = std::time::Instant::now();
        for _ in 0..1000 {
            if ring.emit("p", LogLevel::Info, "log", &line, &dropped) {
                logged += 1;
            }
        }
        // Lines are cut to MAX_LOG_LINE; the budget holds LOG_BURST_BYTES of them plus what
        // refilled while the loop ran.
        let refilled = LOG_BYTES_PER_SEC * began.elapsed().as_secs_f64();
        let most = ((LOG_BURST_BYTES + refilled) / MAX_LOG_LINE as f64) as u64 + 1;
        let burst = (LOG_BURST_BYTES as u64) / MAX_LOG_LINE as u64;
        assert!(
            (burst..=most).contains(&logged),
            "{logged} logged, {burst}..={most}"
        );
        assert_eq!(dropped.load(Ordering::Relaxed), 1000 - logged);
        let kept = ring.lines();
        assert!(kept.iter().all(|l| l.len() <= MAX_LOG_LINE + 8));
        assert!(kept.iter().map(String::len).sum::<usize>() <= LOG_RING_BYTES);
    }

    #[test]
    fn a_plugins_series_are_bounded_in_bytes() {
        let s = PluginStatus::default();
        let value = "v".repeat(1000);
        let made = (0..MAX_GUEST_SERIES)
            .filter(|i| s.gauge_set(series_key("g", &[("k", &format!("{i}{value}"))]), 1.0))
            .count();
        assert!(made < 300, "{made}");
        assert_eq!(
            PluginCounters::get(&s.counters.series_refused),
            (MAX_GUEST_SERIES - made) as u64
        );
        // An existing series is still written.
        assert!(s.gauge_set(series_key("g", &[("k", &format!("0{value}"))]), 2.0));
    }

    #[test]
    fn a_guest_counter_saturates_instead_of_overflowing() {
        let s = PluginStatus::default();
        let key = series_key("requests_total", &[("code", "200")]);
        assert!(s.counter_add(key.clone(), u64::MAX - 1));
        assert!(s.counter_add(key.clone(), 5));
        assert!(s.counter_add(key, u64::MAX));
        assert_eq!(
            s.guest_counter("requests_total", &[("code", "200")]),
            u64::MAX
        );
    }
}
