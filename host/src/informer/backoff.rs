//! Exponential backoff: the one the host uses wherever it waits longer after each failure.
//!
//! Its defaults are client-go's `ExponentialBackoffManager` as used by the reflector: 800 ms
//! doubling to 30 s, jitter 1.0, reset after 2 minutes without a backoff. Other callers pick
//! their own start, cap, [`Jitter`] and reset (see [`BackoffConfig`]).

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

/// How a delay is randomised.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Jitter {
    /// Not at all.
    None,
    /// Stretched by up to this many times itself (client-go's `jitter`): `d + d * f * rand`.
    Stretch(f64),
    /// Scaled by a factor drawn from `[1 - f, 1 + f)`: `d * (rand * 2f + (1 - f))`.
    Spread(f64),
}

/// Backoff parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BackoffConfig {
    /// First delay (not capped by `max`).
    pub initial: Duration,
    /// Largest delay after the first, before jitter.
    pub max: Duration,
    /// Multiplier per step (saturating).
    pub factor: u32,
    /// How each delay is randomised.
    pub jitter: Jitter,
    /// A backoff requested this long after the previous one starts again from `initial`;
    /// `None`: never (the clock is not read).
    pub reset_after: Option<Duration>,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            factor: 2,
            jitter: Jitter::Stretch(1.0),
            reset_after: Some(Duration::from_secs(120)),
        }
    }
}

impl BackoffConfig {
    /// `initial` doubling to `max`, no jitter, never reset: the plain doubling backoff of a
    /// sequence of retries.
    pub fn doubling(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            factor: 2,
            jitter: Jitter::None,
            reset_after: None,
        }
    }
}

/// The backoff state.
#[derive(Clone, Debug)]
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
        if let Some(reset_after) = self.config.reset_after {
            let now = Instant::now();
            if self
                .last
                .is_some_and(|t| now.duration_since(t) > reset_after)
            {
                self.next = self.config.initial;
            }
            self.last = Some(now);
        }
        let base = self.next;
        self.next = base.saturating_mul(self.config.factor).min(self.config.max);
        match self.config.jitter {
            Jitter::None => base,
            Jitter::Stretch(f) if f > 0.0 => base + base.mul_f64(rand::rng().random::<f64>() * f),
            Jitter::Stretch(_) => base,
            Jitter::Spread(f) => base.mul_f64(rand::rng().random::<f64>() * (2.0 * f) + (1.0 - f)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_jitter() -> BackoffConfig {
        BackoffConfig {
            jitter: Jitter::None,
            ..BackoffConfig::default()
        }
    }

    fn millis(b: &mut Backoff, n: usize) -> Vec<u64> {
        (0..n).map(|_| b.next_delay().as_millis() as u64).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_from_800ms_to_a_30s_cap() {
        let mut b = Backoff::new(no_jitter());
        assert_eq!(
            millis(&mut b, 8),
            [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]
        );
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

    #[tokio::test(start_paused = true)]
    async fn a_doubling_backoff_never_resets_and_keeps_an_uncapped_first_delay() {
        let mut b = Backoff::new(BackoffConfig::doubling(
            Duration::from_secs(100),
            Duration::from_secs(60),
        ));
        assert_eq!(millis(&mut b, 3), [100_000, 60_000, 60_000]);
        let mut b = Backoff::new(BackoffConfig::doubling(
            Duration::from_millis(200),
            Duration::from_secs(30),
        ));
        tokio::time::advance(Duration::from_secs(1000)).await;
        assert_eq!(millis(&mut b, 2), [200, 400]);
        tokio::time::advance(Duration::from_secs(1000)).await;
        assert_eq!(millis(&mut b, 6), [800, 1600, 3200, 6400, 12800, 25600]);
        assert_eq!(millis(&mut b, 1), [30_000]);
    }

    #[test]
    fn doubling_saturates_instead_of_overflowing() {
        let mut b = Backoff::new(BackoffConfig::doubling(Duration::MAX, Duration::MAX));
        assert_eq!(b.next_delay(), Duration::MAX);
        assert_eq!(b.next_delay(), Duration::MAX);
    }

    #[test]
    fn spread_jitter_scales_by_nine_to_eleven_tenths() {
        // The factor is `rand * 0.2 + 0.9`, bit for bit, for a spread of 0.1.
        assert_eq!(2.0 * 0.1_f64, 0.2);
        assert_eq!(1.0 - 0.1_f64, 0.9);
        let mut b = Backoff::new(BackoffConfig {
            jitter: Jitter::Spread(0.1),
            ..BackoffConfig::doubling(Duration::from_secs(10), Duration::from_secs(10))
        });
        for _ in 0..50 {
            let d = b.next_delay();
            assert!(
                d >= Duration::from_secs(9) && d < Duration::from_secs(11),
                "{d:?}"
            );
        }
    }
}
