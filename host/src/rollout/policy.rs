//! Automatic rollback: a [`Policy`] of maximum trap and error rates over a sliding window, and
//! [`RateWatch`], which keeps the candidate's counter history to evaluate it. Depends on nothing
//! outside `rollout`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::CounterSnapshot;

/// When to roll a candidate back on its own.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Policy {
    /// Largest tolerated share of calls that trap.
    pub max_trap_rate: f64,
    /// Largest tolerated share of calls the operator rejects.
    pub max_error_rate: f64,
    /// The sliding window, in ms.
    pub window_ms: u64,
    /// Fewest calls in the window before the rates count.
    pub min_calls: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_trap_rate: 0.05,
            max_error_rate: 0.5,
            window_ms: 30_000,
            min_calls: 10,
        }
    }
}

/// The candidate's counter history over the policy's window.
#[derive(Debug, Default)]
pub struct RateWatch {
    samples: VecDeque<(Instant, CounterSnapshot)>,
}

impl RateWatch {
    /// Records a sample and returns why the candidate must be rolled back, if it must.
    pub fn check(
        &mut self,
        policy: &Policy,
        now: Instant,
        counters: CounterSnapshot,
    ) -> Option<String> {
        self.samples.push_back((now, counters));
        let window = Duration::from_millis(policy.window_ms);
        while self.samples.len() > 1 && now.duration_since(self.samples[1].0) >= window {
            self.samples.pop_front();
        }
        let (_, oldest) = self.samples.front()?;
        // The first sample of a fresh watch counts from zero: a candidate that trapped before
        // the first look is caught too.
        let base = if self.samples.len() == 1 {
            CounterSnapshot::default()
        } else {
            *oldest
        };
        let calls = counters.calls.saturating_sub(base.calls);
        if calls == 0 || calls < policy.min_calls {
            return None;
        }
        let traps = counters.traps.saturating_sub(base.traps) as f64 / calls as f64;
        let errors = counters.errors.saturating_sub(base.errors) as f64 / calls as f64;
        if traps > policy.max_trap_rate {
            return Some(format!(
                "automatic: trap rate {traps:.3} over the last {} calls exceeds {}",
                calls, policy.max_trap_rate
            ));
        }
        if errors > policy.max_error_rate {
            return Some(format!(
                "automatic: error rate {errors:.3} over the last {} calls exceeds {}",
                calls, policy.max_error_rate
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(calls: u64, traps: u64) -> CounterSnapshot {
        CounterSnapshot {
            calls,
            traps,
            ..Default::default()
        }
    }

    #[test]
    fn rolls_back_when_the_trap_rate_over_the_window_is_too_high() {
        let policy = Policy {
            max_trap_rate: 0.1,
            window_ms: 1_000,
            min_calls: 10,
            ..Default::default()
        };
        let mut watch = RateWatch::default();
        let t0 = Instant::now();
        assert_eq!(watch.check(&policy, t0, snap(5, 5)), None, "too few calls");
        assert_eq!(
            watch.check(&policy, t0 + Duration::from_millis(100), snap(100, 5)),
            None,
            "5 %"
        );
        let verdict = watch.check(&policy, t0 + Duration::from_millis(200), snap(120, 20));
        assert!(verdict.unwrap().contains("trap rate"));
        // Long after, only the recent window counts.
        let mut watch = RateWatch::default();
        watch.check(&policy, t0, snap(100, 50));
        watch.check(&policy, t0 + Duration::from_secs(5), snap(100, 50));
        assert_eq!(
            watch.check(&policy, t0 + Duration::from_secs(6), snap(200, 50)),
            None
        );
    }
}
