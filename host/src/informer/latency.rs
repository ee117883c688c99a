//! Latency histograms with fixed buckets and atomic counts, read at scrape time.

use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds (seconds) of the latency histograms' buckets (a plugin's `handle`, an
/// informer's processing of one item).
pub const LATENCY_BUCKETS: [f64; 12] = [
    0.000_01, 0.000_05, 0.000_1, 0.000_5, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
];

/// A fixed-bucket latency histogram with atomic counts.
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
