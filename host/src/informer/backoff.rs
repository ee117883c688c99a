//! Exponential backoff with jitter and a reset after a quiet period (client-go's
//! `ExponentialBackoffManager` as used by the reflector: 800 ms doubling to 30 s, jitter 1.0,
//! reset after 2 minutes without a backoff).

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

/// Backoff parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffConfig {
    /// First delay.
    pub initial: Duration,
    /// Largest delay before jitter.
    pub max: Duration,
    /// Multiplier per step.
    pub factor: f64,
    /// Jitter factor: each delay is stretched by up to `jitter` times itself.
    pub jitter: f64,
    /// A backoff requested this long after the previous one starts again from `initial`.
    pub reset_after: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            factor: 2.0,
            jitter: 1.0,
            reset_after: Duration::from_secs(120),
        }
    }
}

/// The backoff state.
#[derive(Debug)]
pub struct Backoff {
    config: BackoffConfig,
    next: Duration,
    last: Option<Instant>,
}

impl Backoff {
    /// A fresh backoff.
    pub fn new(config: BackoffConfig) -> Self {
        Self {
            config,
            next: config.initial,
            last: None,
        }
    }

    /// The delay to wait now (advances the state).
    pub fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) > self.config.reset_after)
        {
            self.next = self.config.initial;
        }
        self.last = Some(now);
        let base = self.next;
        self.next = base.mul_f64(self.config.factor).min(self.config.max);
        if self.config.jitter > 0.0 {
            base + base.mul_f64(rand::rng().random::<f64>() * self.config.jitter)
        } else {
            base
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_jitter() -> BackoffConfig {
        BackoffConfig {
            jitter: 0.0,
            ..BackoffConfig::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_from_800ms_to_a_30s_cap() {
        let mut b = Backoff::new(no_jitter());
        let got: Vec<u64> = (0..8).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(got, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_resets_after_two_quiet_minutes() {
        let mut b = Backoff::new(no_jitter());
        b.next_delay();
        b.next_delay();
        tokio::time::advance(Duration::from_secs(121)).await;
        assert_eq!(b.next_delay(), Duration::from_millis(800));
    }

    #[tokio::test(start_paused = true)]
    async fn jitter_stretches_a_delay_by_at_most_its_factor() {
        let mut b = Backoff::new(BackoffConfig::default());
        for _ in 0..50 {
            let d = b.next_delay();
            assert!(
                d >= Duration::from_millis(800) && d <= Duration::from_secs(60),
                "{d:?}"
            );
        }
    }
}
