//! Window assignment for tumbling and sliding windows, and the [`Window`] type. Sessions are
//! assigned by the engine, since they depend on a key's live sessions.
//!
//! Depends on `time` and `spec` only.

use crate::spec::WindowSpec;
use crate::time::Millis;

/// A half-open event-time window `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window {
    /// First millisecond in the window.
    pub start: Millis,
    /// First millisecond after the window.
    pub end: Millis,
}

impl Window {
    /// Whether two windows overlap or touch (one ends where the other starts).
    pub fn overlaps_or_touches(&self, other: &Window) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    /// The smallest window covering both.
    pub fn cover(&self, other: &Window) -> Window {
        Window {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

/// The windows an event at `ts` belongs to, in ascending order of start. For sessions this is
/// the event's own proto-session `[ts, ts + gap)`, before merging.
pub fn assign(spec: &WindowSpec, ts: Millis, out: &mut Vec<Window>) {
    out.clear();
    match *spec {
        WindowSpec::Tumbling { size } => {
            let start = ts - ts.rem_euclid(size);
            out.push(Window {
                start,
                end: start + size,
            });
        }
        WindowSpec::Sliding { size, slide } => {
            let last = ts - ts.rem_euclid(slide);
            let mut start = last;
            while start > ts - size {
                start -= slide;
            }
            start += slide;
            while start <= last {
                out.push(Window {
                    start,
                    end: start + size,
                });
                start += slide;
            }
        }
        WindowSpec::Session { gap } => out.push(Window {
            start: ts,
            end: ts + gap,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn windows(spec: WindowSpec, ts: Millis) -> Vec<(Millis, Millis)> {
        let mut out = Vec::new();
        assign(&spec, ts, &mut out);
        out.into_iter().map(|w| (w.start, w.end)).collect()
    }

    #[test]
    fn tumbling_windows_align_to_the_epoch() {
        let spec = WindowSpec::Tumbling { size: 10 };
        assert_eq!(windows(spec, 0), [(0, 10)]);
        assert_eq!(windows(spec, 19), [(10, 20)]);
        assert_eq!(windows(spec, -1), [(-10, 0)]);
    }

    #[test]
    fn sliding_windows_cover_every_start_within_size() {
        let spec = WindowSpec::Sliding { size: 10, slide: 5 };
        assert_eq!(windows(spec, 7), [(0, 10), (5, 15)]);
        assert_eq!(windows(spec, 10), [(5, 15), (10, 20)]);
        assert_eq!(windows(spec, -3), [(-10, 0), (-5, 5)]);
        assert_eq!(
            windows(
                WindowSpec::Sliding {
                    size: 10,
                    slide: 10
                },
                3
            ),
            [(0, 10)]
        );
        assert_eq!(
            windows(WindowSpec::Sliding { size: 10, slide: 3 }, 10),
            [(3, 13), (6, 16), (9, 19)]
        );
    }

    proptest! {
        #[test]
        fn sliding_assignment_matches_the_definition(ts in -10_000i64..10_000, size in 1i64..50, slide_seed in 1i64..50) {
            let slide = 1 + (slide_seed - 1) % size;
            let got = windows(WindowSpec::Sliding { size, slide }, ts);
            // Every window [s, s + size) with s a multiple of slide and s <= ts < s + size.
            let expected: Vec<_> = (ts - size - slide..=ts + slide)
                .filter(|s| s.rem_euclid(slide) == 0 && *s <= ts && ts < s + size)
                .map(|s| (s, s + size))
                .collect();
            prop_assert_eq!(got, expected);
        }

        #[test]
        fn tumbling_assignment_contains_the_event(ts in -1_000_000i64..1_000_000, size in 1i64..10_000) {
            let got = windows(WindowSpec::Tumbling { size }, ts);
            prop_assert_eq!(got.len(), 1);
            let (start, end) = got[0];
            prop_assert!(start <= ts && ts < end && end - start == size && start.rem_euclid(size) == 0);
        }
    }
}
