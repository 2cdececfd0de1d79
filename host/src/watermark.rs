//! Watermarks: bounded out-of-orderness over arrival order.
//!
//! For each event, in arrival order: lateness is judged against the current watermark `W`, the
//! event is added, then `W = max(W, ts - bound)`. `W` starts at minus infinity and becomes plus
//! infinity at the end of a bounded input. Depends on `time` only.

use crate::time::{MINUS_INFINITY, Millis, PLUS_INFINITY};

/// The bounded out-of-orderness watermark strategy.
#[derive(Debug, Clone)]
pub struct BoundedOutOfOrderness {
    bound: Millis,
    current: Millis,
}

impl BoundedOutOfOrderness {
    /// A watermark that trails the highest timestamp seen by `bound` milliseconds.
    pub fn new(bound: Millis) -> Self {
        BoundedOutOfOrderness {
            bound,
            current: MINUS_INFINITY,
        }
    }

    /// Continues from a watermark a checkpoint recorded.
    pub fn resume(bound: Millis, current: Millis) -> Self {
        BoundedOutOfOrderness { bound, current }
    }

    /// The current watermark.
    pub fn current(&self) -> Millis {
        self.current
    }

    /// Observes an event's timestamp; returns the new watermark if it advanced.
    pub fn observe(&mut self, timestamp: Millis) -> Option<Millis> {
        let candidate = timestamp.saturating_sub(self.bound);
        (candidate > self.current).then(|| {
            self.current = candidate;
            candidate
        })
    }

    /// Moves the watermark on by `ms` of wall clock the input was quiet for (never to plus
    /// infinity, which ends the input; not at all before the first event). Returns the new
    /// watermark if it advanced.
    pub fn advance_by(&mut self, ms: Millis) -> Option<Millis> {
        if self.current == MINUS_INFINITY || ms <= 0 {
            return None;
        }
        let advanced = self.current.saturating_add(ms).min(PLUS_INFINITY - 1);
        (advanced > self.current).then(|| {
            self.current = advanced;
            advanced
        })
    }

    /// Ends the input: the watermark becomes plus infinity.
    pub fn finish(&mut self) -> Millis {
        self.current = PLUS_INFINITY;
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn trails_the_maximum_by_the_bound() {
        let mut wm = BoundedOutOfOrderness::new(5);
        assert_eq!(wm.current(), MINUS_INFINITY);
        assert_eq!(wm.observe(10), Some(5));
        assert_eq!(wm.observe(8), None);
        assert_eq!(wm.observe(20), Some(15));
        assert_eq!(wm.advance_by(100), Some(115), "an idle input moves it on");
        assert_eq!(
            wm.observe(110),
            None,
            "an event behind it does not move it back"
        );
        assert_eq!(
            wm.advance_by(i64::MAX),
            Some(PLUS_INFINITY - 1),
            "never to the end"
        );
        assert_eq!(wm.finish(), PLUS_INFINITY);
        assert_eq!(
            BoundedOutOfOrderness::new(0).advance_by(5),
            None,
            "nothing seen yet"
        );
    }

    proptest! {
        #[test]
        fn never_moves_backwards(timestamps in proptest::collection::vec(-1_000_000i64..1_000_000, 0..200), bound in 0i64..10_000) {
            let mut wm = BoundedOutOfOrderness::new(bound);
            let mut last = wm.current();
            for ts in timestamps {
                wm.observe(ts);
                prop_assert!(wm.current() >= last);
                prop_assert!(wm.current() <= ts.max(last));
                last = wm.current();
            }
        }
    }
}
