//! What can be read about a running plugin without touching its instance: counters, status,
//! last error, recent log lines and the metrics the plugin itself reports.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How many recent log lines a plugin keeps for `/plugins` and the replay tool.
pub const LOG_RING_LINES: usize = 1000;
/// Most metric series one plugin may create; further ones are dropped (and logged once).
pub const MAX_GUEST_SERIES: usize = 1000;

#[derive(Default)]
struct Ring {
    lines: VecDeque<String>,
    /// Lines ever pushed.
    total: u64,
}

/// The last [`LOG_RING_LINES`] log lines of a plugin.
#[derive(Clone, Default)]
pub struct LogRing(Arc<Mutex<Ring>>);

impl LogRing {
    /// Appends a line, dropping the oldest beyond the bound.
    pub fn push(&self, line: String) {
        let mut r = lock(&self.0);
        if r.lines.len() == LOG_RING_LINES {
            r.lines.pop_front();
        }
        r.lines.push_back(line);
        r.total += 1;
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

/// Upper bounds (seconds) of the handle-latency histogram buckets.
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.000_01, 0.000_05, 0.000_1, 0.000_5, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
];

/// A fixed-bucket latency histogram with atomic counts (one observation per `handle` call).
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Observations per bucket (`LATENCY_BUCKETS[i]`), not cumulative; the last slot is +Inf.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

impl LatencyHistogram {
    /// Records one observation.
    pub fn observe(&self, d: std::time::Duration) {
        let s = d.as_secs_f64();
        let i = LATENCY_BUCKETS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(LATENCY_BUCKETS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Cumulative counts per bucket bound (Prometheus style, +Inf last), sum in seconds, count.
    pub fn snapshot(&self) -> (Vec<(f64, u64)>, f64, u64) {
        let mut acc = 0;
        let mut out = Vec::with_capacity(LATENCY_BUCKETS.len() + 1);
        for (i, b) in self.buckets.iter().enumerate() {
            acc += b.load(Ordering::Relaxed);
            out.push((
                LATENCY_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY),
                acc,
            ));
        }
        (
            out,
            self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            self.count.load(Ordering::Relaxed),
        )
    }
}

/// Counters of one plugin (all monotonic except `quarantined`).
#[derive(Debug, Default)]
pub struct PluginCounters {
    /// Notifications handed to the plugin and handled with an ok outcome.
    pub delivered: AtomicU64,
    /// Notifications that failed for good (after retries).
    pub failed: AtomicU64,
    /// Calls cut by the deadline.
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
    /// SHA-256 of the module.
    pub hash: String,
    /// 1 for the first load, +1 per reload or rollback.
    pub generation: u64,
    /// The version of the `wisp:plugin` world its component targets (`0.2.0`, `0.1.0`).
    pub abi: &'static str,
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
    series_dropped: AtomicU64,
}

impl PluginStatus {
    /// The current state.
    pub fn state(&self) -> PluginState {
        lock(&self.state).clone().unwrap_or(PluginState::Running)
    }

    pub(crate) fn set_state(&self, s: PluginState) {
        *lock(&self.state) = Some(s);
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

    fn series_allowed(&self, len: usize, exists: bool) -> bool {
        if exists || len < MAX_GUEST_SERIES {
            return true;
        }
        self.series_dropped.fetch_add(1, Ordering::Relaxed);
        false
    }

    pub(crate) fn counter_add(&self, key: SeriesKey, v: u64) -> bool {
        let mut m = lock(&self.counters_guest);
        if !self.series_allowed(m.len(), m.contains_key(&key)) {
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
        if !self.series_allowed(m.len(), m.contains_key(&key)) {
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

/// The plugin's queues report their overflow into its counters.
impl crate::informer::OverflowObserver for PluginStatus {
    fn overflowed(&self, d: crate::informer::listener::Discarded) {
        PluginCounters::add(&self.counters.queue_dropped, d.dropped);
        PluginCounters::add(&self.counters.queue_coalesced, d.coalesced);
    }
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
