//! Token buckets that bound how often a client may make the node do something costly: accept
//! a connection (`max.connection.creation.rate`, KIP-612) or issue an HTTP login or token (a
//! write to the metadata quorum each).

use std::time::{Duration, Instant};

/// `per_second` tokens a second, at most `burst` saved up.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(per_second: f64, burst: f64, now: Instant) -> TokenBucket {
        let per_second = per_second.max(f64::MIN_POSITIVE);
        let burst = burst.max(1.0);
        TokenBucket { per_second, burst, tokens: burst, updated: now }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.updated = self.updated.max(now);
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
    }

    /// Takes a token for something done at `now`, going into debt if there is none; how long
    /// to wait before the next (zero while tokens are left).
    pub fn charge(&mut self, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.per_second)
        }
    }

    /// Takes a token if one is left; else how long until one is.
    pub fn try_take(&mut self, now: Instant) -> Result<(), Duration> {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.per_second))
        }
    }

    /// Whether the bucket is full at `now` (nothing to remember about its client).
    pub fn is_full(&self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens + elapsed * self.per_second >= self.burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_goes_through_then_one_per_interval() {
        let start = Instant::now();
        let mut rate = TokenBucket::new(5.0, 5.0, start);
        for _ in 0..5 {
            assert_eq!(rate.charge(start), Duration::ZERO);
        }
        let wait = rate.charge(start);
        assert!((wait.as_secs_f64() - 0.2).abs() < 1e-9, "{wait:?}");
        // 400 ms later one more is due (the debt of 200 ms paid), not a new burst.
        assert_eq!(rate.charge(start + Duration::from_millis(400)), Duration::ZERO);
        assert!(rate.charge(start + Duration::from_millis(400)) > Duration::ZERO);
        // Rested a minute: the bucket holds at most its burst.
        let rested = start + Duration::from_secs(60);
        assert!(rate.is_full(rested));
        for _ in 0..5 {
            assert_eq!(rate.charge(rested), Duration::ZERO);
        }
        assert!(rate.charge(rested) > Duration::ZERO);
    }

    #[test]
    fn try_take_refuses_without_debt_and_says_how_long_to_wait() {
        let start = Instant::now();
        // 3 a minute.
        let mut rate = TokenBucket::new(3.0 / 60.0, 3.0, start);
        for _ in 0..3 {
            assert_eq!(rate.try_take(start), Ok(()));
        }
        let wait = rate.try_take(start).unwrap_err();
        assert!((wait.as_secs_f64() - 20.0).abs() < 1e-6, "{wait:?}");
        assert!(rate.try_take(start).is_err(), "a refusal takes nothing");
        assert_eq!(rate.try_take(start + Duration::from_secs(20)), Ok(()));
        assert!(!rate.is_full(start + Duration::from_secs(20)));
    }
}
