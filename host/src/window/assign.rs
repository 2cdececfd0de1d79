//! Window assignment for tumbling and sliding windows. Sessions are assigned by the engine,
//! since they depend on a key's live sessions.
//!
//! Depends on `time` and `spec` only.

use crate::spec::WindowSpec;
use crate::time::{Millis, Window};

/// An event time whose windows cannot be represented (their bounds would leave `i64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("timestamp {0} is too close to the end of the time range for its windows")]
pub struct OutOfRange(pub Millis);

/// The windows an event at `ts` belongs to, in ascending order of start. For sessions this is
/// the event's own proto-session `[ts, ts + gap)`, before merging. All arithmetic is checked:
/// a timestamp whose windows would leave the `i64` range is refused, never wrapped.
pub fn assign(spec: &WindowSpec, ts: Millis, out: &mut Vec<Window>) -> Result<(), OutOfRange> {
    out.clear();
    let window = |start: Millis, size: Millis| {
        start
            .checked_add(size)
            .map(|end| Window { start, end })
            .ok_or(OutOfRange(ts))
    };
    let floor = |step: Millis| ts.checked_sub(ts.rem_euclid(step)).ok_or(OutOfRange(ts));
    match *spec {
        WindowSpec::Tumbling { size } => out.push(window(floor(size)?, size)?),
        WindowSpec::Sliding { size, slide } => {
            // Starts are multiples of `slide` in (ts - size, ts], walked down from the last.
            let mut start = floor(slide)?;
            loop {
                out.push(window(start, size)?);
                let Some(earlier) = start.checked_sub(slide) else {
                    break;
                };
                match earlier.checked_add(size) {
                    None => return Err(OutOfRange(ts)),
                    Some(end) if end > ts => start = earlier,
                    Some(_) => break,
                }
            }
            out.reverse();
        }
        WindowSpec::Session { gap } => out.push(window(ts, gap)?),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn windows(spec: WindowSpec, ts: Millis) -> Vec<(Millis, Millis)> {
        let mut out = Vec::new();
        assign(&spec, ts, &mut out).expect("in range");
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

    /// Any timestamp, with a bias towards both ends of the range.
    fn any_timestamp() -> impl Strategy<Value = Millis> {
        prop_oneof![
            any::<i64>(),
            (0i64..1_000).prop_map(|d| i64::MIN + d),
            (0i64..1_000).prop_map(|d| i64::MAX - d),
        ]
    }

    fn any_spec() -> impl Strategy<Value = WindowSpec> {
        let size = prop_oneof![1i64..100, 1i64..=i64::MAX];
        prop_oneof![
            size.clone().prop_map(|size| WindowSpec::Tumbling { size }),
            (size.clone(), 1i64..=1_000).prop_map(|(size, n)| WindowSpec::Sliding {
                size,
                slide: (size / n).max(1),
            }),
            size.prop_map(|gap| WindowSpec::Session { gap }),
        ]
    }

    proptest! {
        #[test]
        fn assignment_over_the_whole_range_never_wraps(spec in any_spec(), ts in any_timestamp()) {
            let mut out = Vec::new();
            match assign(&spec, ts, &mut out) {
                Ok(()) => {
                    let most = match spec {
                        WindowSpec::Sliding { size, slide } => (size - 1) / slide + 1,
                        _ => 1,
                    };
                    prop_assert!(!out.is_empty() && out.len() as i64 <= most);
                    for w in &out {
                        prop_assert!(w.start <= ts && ts < w.end, "{:?} does not contain {}", w, ts);
                    }
                    prop_assert!(out.windows(2).all(|p| p[0].start < p[1].start));
                }
                Err(OutOfRange(at)) => prop_assert_eq!(at, ts),
            }
        }

        #[test]
        fn timestamps_in_the_accepted_range_always_have_windows(
            spec in any_spec(),
            ts in -crate::time::MAX_TIMESTAMP..=crate::time::MAX_TIMESTAMP,
        ) {
            // Sizes up to the largest accepted duration keep every window representable.
            let bounded = match spec {
                WindowSpec::Tumbling { size } => WindowSpec::Tumbling { size: size.min(crate::time::MAX_TIMESTAMP) },
                WindowSpec::Sliding { size, slide } => {
                    let size = size.min(crate::time::MAX_TIMESTAMP);
                    WindowSpec::Sliding { size, slide: slide.min(size).max(size / 1_000).max(1) }
                }
                WindowSpec::Session { gap } => WindowSpec::Session { gap: gap.min(crate::time::MAX_TIMESTAMP) },
            };
            let mut out = Vec::new();
            prop_assert!(assign(&bounded, ts, &mut out).is_ok());
        }

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
