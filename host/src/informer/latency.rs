//! Latency histograms with fixed buckets and atomic counts, read at scrape time.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (seconds) of the latency histograms' buckets (a plugin's `handle`, an
/// informer's processing of one item).
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.000_01, 0.000_05, 0.000_1, 0.000_5, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
];

/// Upper bounds (seconds) of the waiting-time histograms' buckets (a notification's time from
/// its queue to its outcome): a handler that keeps up is in the first ones, one that lags by
/// minutes in the last.
pub const WAIT_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// A histogram read out: cumulative `(bound, count)` per bucket (+Inf last), sum in seconds,
/// count.
pub type Snapshot = (Vec<(f64, u64)>, f64, u64);

/// A fixed-bucket latency histogram with atomic counts.
#[derive(Debug)]
pub struct LatencyHistogram {
    /// The buckets' upper bounds.
    bounds: &'static [f64; 12],
    /// Observations per bucket (`bounds[i]`), not cumulative; the last slot is +Inf.
    buckets: [AtomicU64; 13],
    sum_nanos: AtomicU64,
    count: AtomicU64,
}

impl Default for LatencyHistogram {
    /// On [`LATENCY_BUCKETS`].
    fn default() -> Self {
        Self::with_buckets(&LATENCY_BUCKETS)
    }
}

impl LatencyHistogram {
    /// An empty histogram on `bounds` (e.g. [`WAIT_BUCKETS`]).
    pub fn with_buckets(bounds: &'static [f64; 12]) -> Self {
        Self {
            bounds,
            buckets: Default::default(),
            sum_nanos: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Records one observation.
    pub fn observe(&self, d: std::time::Duration) {
        let s = d.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(self.bounds.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Cumulative counts per bucket bound (Prometheus style, +Inf last), sum in seconds, count.
    pub fn snapshot(&self) -> Snapshot {
        let mut acc = 0;
        let mut out = Vec::with_capacity(LATENCY_BUCKETS.len() + 1);
        for (i, b) in self.buckets.iter().enumerate() {
            acc += b.load(Ordering::Relaxed);
            out.push((self.bounds.get(i).copied().unwrap_or(f64::INFINITY), acc));
        }
        (
            out,
            self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
            self.count.load(Ordering::Relaxed),
        )
    }
}
