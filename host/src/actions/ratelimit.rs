//! A token bucket: `burst` actions at once, then `per_second` on average.

use std::time::{Duration, Instant};

/// A token bucket. Time is passed in, so tests need no clock.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(per_second: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            per_second: per_second.max(0.0),
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// Takes one token if there is one; otherwise says how long until there will be.
    pub fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        // A rate the config accepts can be tiny (`perSecond: 1e-300`): a wait too long for a
        // `Duration` is as good as forever.
        if self.per_second <= 0.0 {
            return Err(Duration::MAX);
        }
        Err(
            Duration::try_from_secs_f64((1.0 - self.tokens) / self.per_second)
                .unwrap_or(Duration::MAX),
        )
    }

    /// Returns a token taken for something that turned out not to count (up to the burst).
    pub fn give_back(&mut self) {
        self.tokens = (self.tokens + 1.0).min(self.burst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(2.0, 3, t0);
        assert!((0..3).all(|_| b.take(t0).is_ok()));
        let wait = b.take(t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert!(b.take(t0 + Duration::from_millis(499)).is_err());
        assert!(b.take(t0 + Duration::from_millis(1000)).is_ok());
        // Ten idle seconds refill to the burst only.
        let later = t0 + Duration::from_secs(11);
        assert_eq!((0..10).filter(|_| b.take(later).is_ok()).count(), 3);
    }

    #[test]
    fn a_token_given_back_can_be_taken_again_up_to_the_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1.0, 2, t0);
        assert!(b.take(t0).is_ok() && b.take(t0).is_ok());
        b.give_back();
        assert!(b.take(t0).is_ok());
        assert!(b.take(t0).is_err());
        b.give_back();
        b.give_back();
        b.give_back();
        assert_eq!((0..5).filter(|_| b.take(t0).is_ok()).count(), 2);
    }

    #[test]
    fn a_tiny_rate_waits_forever_instead_of_panicking() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1e-300, 1, t0);
        assert!(b.take(t0).is_ok());
        assert_eq!(b.take(t0), Err(Duration::MAX));
    }

    #[test]
    fn accepted_over_time_is_burst_plus_rate_times_time() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(10.0, 5, t0);
        let mut ok = 0;
        for ms in 0..2000u64 {
            if b.take(t0 + Duration::from_millis(ms)).is_ok() {
                ok += 1;
            }
        }
        assert!((24..=25).contains(&ok), "{ok}");
    }
}
