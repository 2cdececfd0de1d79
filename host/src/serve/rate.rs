//! [`RateLimit`]: a token bucket for a pipeline's ingest rate (`source.max_events_per_second`):
//! a second's worth of events may come at once, then they come at the rate. Time is passed in,
//! so it is tested without sleeping. Depends on nothing else in the crate.

use std::time::{Duration, Instant};

/// A token bucket of one second's capacity.
#[derive(Debug, Clone)]
pub struct RateLimit {
    rate: u64,
    tokens: f64,
    last: Instant,
}

impl RateLimit {
    /// A full bucket for `rate` events per second.
    pub fn new(rate: u64, now: Instant) -> RateLimit {
        RateLimit {
            rate: rate.max(1),
            tokens: rate.max(1) as f64,
            last: now,
        }
    }

    /// The rate it limits to.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Takes `events` tokens at `now` if the bucket holds them, or if it is full (a request of
    /// more than a second's worth then passes alone, and the bucket goes into debt); otherwise
    /// says how long until it would.
    pub fn take(&mut self, events: u64, now: Instant) -> Result<(), Duration> {
        let capacity = self.rate as f64;
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * capacity).min(capacity);
        self.last = now;
        let wanted = events as f64;
        if self.tokens >= wanted || self.tokens >= capacity {
            self.tokens -= wanted;
            return Ok(());
        }
        let missing = wanted.min(capacity) - self.tokens;
        Err(Duration::from_secs_f64(missing / capacity))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_s_worth_at_once_then_the_rate() {
        let start = Instant::now();
        let mut limit = RateLimit::new(100, start);
        assert!(limit.take(60, start).is_ok());
        assert!(limit.take(40, start).is_ok());
        let wait = limit.take(10, start).unwrap_err();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
        assert!(limit.take(10, start + Duration::from_millis(100)).is_ok());
        // Full again after a second: a request larger than the capacity passes alone, in debt.
        let later = start + Duration::from_secs(5);
        assert!(limit.take(250, later).is_ok());
        assert!(limit.take(1, later + Duration::from_secs(1)).is_err());
        assert!(limit.take(1, later + Duration::from_millis(2_600)).is_ok());
    }
}
