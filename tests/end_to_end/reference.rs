//! Independent reference model (the test oracle) of Weir's event-time window semantics.
//!
//! This module is deliberately written apart from the runtime and shares no code with it. It
//! is a direct, unoptimised transcription of the rules below, so that end-to-end and property
//! tests can compare the real runtime's output against it. Clarity beats speed here: every
//! event scans the list of live windows.
//!
//! # Rules modelled
//!
//! * Input: events in arrival order, each `{ key, ts (ms), amount }`.
//! * Watermark `W` with bounded out-of-orderness `bound`; `W` starts at minus infinity. For each
//!   event, in arrival order:
//!   1. lateness is judged against the current `W`;
//!   2. the event is added to its (non-late) windows;
//!   3. `W = max(W, ts - bound)`, then every window with `end <= W` that has something not yet
//!      emitted fires, then every window with `W >= end + lateness` is dropped.
//!
//!   At the end of the input `W` becomes plus infinity and every remaining window fires.
//! * Windows are half-open `[start, end)`, aligned to the epoch (Euclidean remainder, so
//!   negative timestamps work):
//!   * tumbling(size): `start = ts - ts.rem_euclid(size)`;
//!   * sliding(size, slide): every `[s, s + size)` with `s` a multiple of `slide` and
//!     `s <= ts < s + size`;
//!   * session(gap): the event opens `[ts, ts + gap)` and merges with every live session of the
//!     same key that overlaps or touches it (transitively). Lateness is judged on the merged
//!     window.
//! * A window is late when `W >= end + lateness`. An event late for all its windows goes to the
//!   late output; otherwise it is added to its non-late windows. Updating a window that has
//!   already fired re-emits it at once (same trigger) with the next version.
//! * A session merge retracts each absorbed, already-emitted session whose bounds differ from the
//!   merged window (retract = its bounds, last emitted version and value), before the merged
//!   window is emitted. The merged window's version counter continues from the highest version
//!   among the absorbed sessions.
//! * Each emission increments the window's version (first = 1): kind `"result"` for version 1,
//!   `"update"` after; retractions have kind `"retract"` and keep the retracted version.
//! * Order: by trigger (the arrival index of the event that caused the output; end of input comes
//!   after all events); within a trigger retracts first, then by window end, start, key.
//!
//! # Choices where the rules leave room
//!
//! * Retracts are emitted at the trigger of the merging event even if the merged window is not
//!   yet due; the merged window is then emitted later, when `W` passes its end, with version
//!   `max absorbed version + 1` (so kind `"update"` if any absorbed session had been emitted).
//! * A merged session that has never been emitted under its own bounds (it only inherited a
//!   version counter) is not retracted when it is itself absorbed later: nothing was emitted
//!   for those bounds, and the pieces it came from were already retracted.
//! * An accepted event for a window that does not exist yet but is already due
//!   (`end <= W < end + lateness`) creates it and fires it at once as version 1 (`"result"`).
//! * A window fires again only if it changed since its last emission; end of input does not
//!   re-emit windows that are unchanged.
//! * Late events still take part in step 3 (with `bound >= 0` they can never advance `W`).
//! * The watermark is kept as an `i128` so that `ts - bound` and `end + lateness` cannot overflow.
//!
//! The model panics on invalid specs (non-positive sizes, `slide > size`, negative `bound` or
//! `lateness`).

#![allow(dead_code)]

/// How events are assigned to windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    Tumbling { size: i64 },
    Sliding { size: i64, slide: i64 },
    Session { gap: i64 },
}

/// What the model needs to know about a windowed stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    pub window: WindowKind,
    /// Bounded out-of-orderness of the watermark, in ms.
    pub bound: i64,
    /// Allowed lateness, in ms (0 = none).
    pub lateness: i64,
}

/// One input event (only the fields the window semantics look at).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ev {
    pub key: String,
    pub ts: i64,
    pub amount: i64,
}

/// One output record of a window.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Emission {
    pub key: String,
    pub start: i64,
    pub end: i64,
    /// "result" | "update" | "retract"
    pub kind: String,
    pub version: u64,
    pub count: i64,
    pub sum: i64,
}

/// Everything the model produces for one input.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelOutput {
    /// In firing order.
    pub emissions: Vec<Emission>,
    /// Arrival indexes of the events that went to the late output, ascending.
    pub late: Vec<usize>,
}

/// A live window of one key.
#[derive(Debug, Clone)]
struct LiveWindow {
    key: String,
    start: i64,
    end: i64,
    /// Current state: number and sum of the amounts of its events.
    count: i64,
    sum: i64,
    /// Version of the last emission (0 = none). For a merged session not yet emitted under its
    /// own bounds: the highest version among the sessions it absorbed.
    version: u64,
    /// What was last emitted under exactly these bounds: (version, count, sum). `Some` = "fired".
    last_emitted: Option<(u64, i64, i64)>,
    /// The state changed since the last emission (or was never emitted).
    dirty: bool,
}

const MINUS_INFINITY: i128 = i128::MIN;
const PLUS_INFINITY: i128 = i128::MAX;

fn is_late(end: i64, lateness: i64, watermark: i128) -> bool {
    watermark >= end as i128 + lateness as i128
}

fn is_due(end: i64, watermark: i128) -> bool {
    end as i128 <= watermark
}

/// Half-open windows `[s1, e1)` and `[s2, e2)` overlap or touch (one's end is the other's start).
fn overlap_or_touch(s1: i64, e1: i64, s2: i64, e2: i64) -> bool {
    s1 <= e2 && s2 <= e1
}

fn validate(spec: &ModelSpec) {
    match spec.window {
        WindowKind::Tumbling { size } => assert!(size > 0, "tumbling size must be > 0"),
        WindowKind::Sliding { size, slide } => {
            assert!(size > 0 && slide > 0, "sliding size and slide must be > 0");
            assert!(slide <= size, "sliding slide must be <= size");
        }
        WindowKind::Session { gap } => assert!(gap > 0, "session gap must be > 0"),
    }
    assert!(spec.bound >= 0, "bound must be >= 0");
    assert!(spec.lateness >= 0, "lateness must be >= 0");
}

/// The `[start, end)` windows of a tumbling or sliding assigner that contain `ts`, by start.
fn fixed_windows(window: WindowKind, ts: i64) -> Vec<(i64, i64)> {
    match window {
        WindowKind::Tumbling { size } => {
            let start = ts - ts.rem_euclid(size);
            vec![(start, start + size)]
        }
        WindowKind::Sliding { size, slide } => {
            let mut windows = Vec::new();
            let mut start = ts - ts.rem_euclid(slide); // the last multiple of slide <= ts
            while start + size > ts {
                windows.push((start, start + size));
                start -= slide;
            }
            windows.reverse();
            windows
        }
        WindowKind::Session { .. } => unreachable!("sessions are not fixed windows"),
    }
}

/// Adds one event to the window `(key, start, end)`, creating it if needed.
fn add_to_window(windows: &mut Vec<LiveWindow>, key: &str, start: i64, end: i64, amount: i64) {
    match windows
        .iter_mut()
        .find(|w| w.key == key && w.start == start && w.end == end)
    {
        Some(w) => {
            w.count += 1;
            w.sum += amount;
            w.dirty = true;
        }
        None => windows.push(LiveWindow {
            key: key.to_string(),
            start,
            end,
            count: 1,
            sum: amount,
            version: 0,
            last_emitted: None,
            dirty: true,
        }),
    }
}

/// Handles a tumbling/sliding event (steps 1 and 2). Returns false if it is late.
fn add_fixed(spec: &ModelSpec, windows: &mut Vec<LiveWindow>, watermark: i128, ev: &Ev) -> bool {
    let mut accepted = false;
    for (start, end) in fixed_windows(spec.window, ev.ts) {
        if !is_late(end, spec.lateness, watermark) {
            add_to_window(windows, &ev.key, start, end, ev.amount);
            accepted = true;
        }
    }
    accepted
}

/// Handles a session event (steps 1 and 2). Returns false if it is late; pushes the
/// retractions of superseded emitted sessions into `retracts`.
fn add_session(
    spec: &ModelSpec,
    gap: i64,
    windows: &mut Vec<LiveWindow>,
    watermark: i128,
    ev: &Ev,
    retracts: &mut Vec<Emission>,
) -> bool {
    // Grow the event's own window by every live session of the key it overlaps or touches,
    // until nothing more can be absorbed.
    let (mut start, mut end) = (ev.ts, ev.ts + gap);
    let mut absorbed: Vec<usize> = Vec::new();
    loop {
        let next = windows.iter().enumerate().find(|(i, w)| {
            w.key == ev.key && !absorbed.contains(i) && overlap_or_touch(w.start, w.end, start, end)
        });
        match next {
            Some((i, w)) => {
                start = start.min(w.start);
                end = end.max(w.end);
                absorbed.push(i);
            }
            None => break,
        }
    }

    if is_late(end, spec.lateness, watermark) {
        return false;
    }

    // Take the absorbed sessions out of the live list (highest index first keeps the rest valid).
    absorbed.sort_unstable();
    let mut old_sessions = Vec::new();
    for &i in absorbed.iter().rev() {
        old_sessions.push(windows.remove(i));
    }

    let mut merged = LiveWindow {
        key: ev.key.clone(),
        start,
        end,
        count: 1,
        sum: ev.amount,
        version: 0,
        last_emitted: None,
        dirty: true,
    };
    for old in old_sessions {
        merged.count += old.count;
        merged.sum += old.sum;
        merged.version = merged.version.max(old.version);
        if (old.start, old.end) == (start, end) {
            // Same window, continued: it keeps what it emitted.
            merged.last_emitted = old.last_emitted;
        } else if let Some((version, count, sum)) = old.last_emitted {
            retracts.push(Emission {
                key: old.key,
                start: old.start,
                end: old.end,
                kind: "retract".to_string(),
                version,
                count,
                sum,
            });
        }
    }
    windows.push(merged);
    true
}

/// Fires every window that is due and has something not yet emitted.
fn fire_due(windows: &mut [LiveWindow], watermark: i128) -> Vec<Emission> {
    let mut fired = Vec::new();
    for w in windows.iter_mut() {
        if w.dirty && is_due(w.end, watermark) {
            w.version += 1;
            w.last_emitted = Some((w.version, w.count, w.sum));
            w.dirty = false;
            fired.push(Emission {
                key: w.key.clone(),
                start: w.start,
                end: w.end,
                kind: if w.version == 1 { "result" } else { "update" }.to_string(),
                version: w.version,
                count: w.count,
                sum: w.sum,
            });
        }
    }
    fired
}

/// Appends the outputs of one trigger: retracts first, then the rest, each by (end, start, key).
fn push_trigger_outputs(
    out: &mut Vec<Emission>,
    mut retracts: Vec<Emission>,
    mut fired: Vec<Emission>,
) {
    let order =
        |a: &Emission, b: &Emission| (a.end, a.start, &a.key).cmp(&(b.end, b.start, &b.key));
    retracts.sort_by(order);
    fired.sort_by(order);
    out.extend(retracts);
    out.extend(fired);
}

/// Runs the reference model over `events` (in arrival order, bounded input).
pub fn run_model(spec: &ModelSpec, events: &[Ev]) -> ModelOutput {
    validate(spec);
    let mut output = ModelOutput::default();
    let mut windows: Vec<LiveWindow> = Vec::new();
    let mut watermark = MINUS_INFINITY;

    for (index, ev) in events.iter().enumerate() {
        // (1) judge lateness against the current watermark and (2) add the event.
        let mut retracts = Vec::new();
        let accepted = match spec.window {
            WindowKind::Session { gap } => {
                add_session(spec, gap, &mut windows, watermark, ev, &mut retracts)
            }
            WindowKind::Tumbling { .. } | WindowKind::Sliding { .. } => {
                add_fixed(spec, &mut windows, watermark, ev)
            }
        };
        if !accepted {
            output.late.push(index);
        }

        // (3) advance the watermark, fire what is due, drop what is past its lateness.
        watermark = watermark.max(ev.ts as i128 - spec.bound as i128);
        let fired = fire_due(&mut windows, watermark);
        windows.retain(|w| !is_late(w.end, spec.lateness, watermark));
        push_trigger_outputs(&mut output.emissions, retracts, fired);
    }

    // End of input: the watermark goes to plus infinity and everything left fires.
    watermark = PLUS_INFINITY;
    let fired = fire_due(&mut windows, watermark);
    windows.clear();
    push_trigger_outputs(&mut output.emissions, Vec::new(), fired);

    output
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(key: &str, ts: i64, amount: i64) -> Ev {
        Ev {
            key: key.to_string(),
            ts,
            amount,
        }
    }

    fn em(
        key: &str,
        start: i64,
        end: i64,
        kind: &str,
        version: u64,
        count: i64,
        sum: i64,
    ) -> Emission {
        Emission {
            key: key.to_string(),
            start,
            end,
            kind: kind.to_string(),
            version,
            count,
            sum,
        }
    }

    fn tumbling(size: i64, bound: i64, lateness: i64) -> ModelSpec {
        ModelSpec {
            window: WindowKind::Tumbling { size },
            bound,
            lateness,
        }
    }

    fn sliding(size: i64, slide: i64, bound: i64, lateness: i64) -> ModelSpec {
        ModelSpec {
            window: WindowKind::Sliding { size, slide },
            bound,
            lateness,
        }
    }

    fn session(gap: i64, bound: i64, lateness: i64) -> ModelSpec {
        ModelSpec {
            window: WindowKind::Session { gap },
            bound,
            lateness,
        }
    }

    #[test]
    fn tumbling_out_of_order_events() {
        // size 10, bound 5: W = max ts - 5.
        let events = [
            ev("a", 1, 1),   // [0,10); W = -4
            ev("a", 12, 2),  // [10,20); W = 7
            ev("a", 8, 4),   // out of order, W 7 < 10: [0,10) = 2/5
            ev("a", 16, 8),  // [10,20) = 2/10; W = 11 -> [0,10) fires
            ev("b", 11, 16), // b [10,20)
        ];
        let out = run_model(&tumbling(10, 5, 0), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", 0, 10, "result", 1, 2, 5),
                em("a", 10, 20, "result", 1, 2, 10),
                em("b", 10, 20, "result", 1, 1, 16),
            ]
        );
        assert!(out.late.is_empty());
    }

    #[test]
    fn tumbling_late_event_goes_to_late_output() {
        let events = [
            ev("a", 5, 1),  // W = 5
            ev("a", 12, 2), // W = 12 -> [0,10) fires and is dropped (L = 0)
            ev("a", 9, 4),  // W 12 >= 10 + 0: late
            ev("a", 10, 8), // [10,20) = 2/10
        ];
        let out = run_model(&tumbling(10, 0, 0), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", 0, 10, "result", 1, 1, 1),
                em("a", 10, 20, "result", 1, 2, 10)
            ]
        );
        assert_eq!(out.late, vec![2]);
    }

    #[test]
    fn tumbling_update_within_lateness() {
        let events = [
            ev("a", 3, 1),  // W = 3
            ev("a", 11, 2), // W = 11 -> [0,10) v1 = 1/1
            ev("a", 7, 4),  // 11 < 10 + 5: update at once, v2 = 2/5
            ev("a", 14, 8), // [10,20) = 2/10, W = 14
            ev("a", 9, 16), // 14 < 15: update at once, v3 = 3/21
        ];
        let out = run_model(&tumbling(10, 0, 5), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", 0, 10, "result", 1, 1, 1),
                em("a", 0, 10, "update", 2, 2, 5),
                em("a", 0, 10, "update", 3, 3, 21),
                em("a", 10, 20, "result", 1, 2, 10),
            ]
        );
        assert!(out.late.is_empty());
    }

    #[test]
    fn tumbling_state_dropped_after_end_plus_lateness_then_late() {
        let events = [
            ev("a", 3, 1),  // W = 3
            ev("a", 12, 2), // W = 12 -> [0,10) v1 = 1/1
            ev("a", 15, 4), // [10,20) = 2/6; W = 15 >= 10 + 5 -> [0,10) dropped
            ev("a", 8, 8),  // late
        ];
        let out = run_model(&tumbling(10, 0, 5), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", 0, 10, "result", 1, 1, 1),
                em("a", 10, 20, "result", 1, 2, 6)
            ]
        );
        assert_eq!(out.late, vec![3]);
    }

    #[test]
    fn tumbling_new_window_within_lateness_fires_at_once() {
        let events = [
            ev("a", 25, 1), // [20,30); W = 25
            ev("a", 15, 2), // [10,20): 25 < 20 + 10, not late; already due -> fires at once
        ];
        let out = run_model(&tumbling(10, 0, 10), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", 10, 20, "result", 1, 1, 2),
                em("a", 20, 30, "result", 1, 1, 1)
            ]
        );
        assert!(out.late.is_empty());
    }

    #[test]
    fn sliding_event_late_for_some_windows_only() {
        // size 10, slide 5: each ts is in two windows.
        let events = [
            ev("a", 2, 1),  // [-5,5), [0,10); W = 2
            ev("a", 11, 2), // [5,15), [10,20); W = 11 -> [-5,5) and [0,10) fire, are dropped
            ev("a", 7, 4),  // [0,10) late, [5,15) not: added to [5,15) only, not late
            ev("a", 3, 8),  // [-5,5) and [0,10) both late -> late output
        ];
        let out = run_model(&sliding(10, 5, 0, 0), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", -5, 5, "result", 1, 1, 1),
                em("a", 0, 10, "result", 1, 1, 1),
                em("a", 5, 15, "result", 1, 2, 6),
                em("a", 10, 20, "result", 1, 1, 2),
            ]
        );
        assert_eq!(out.late, vec![3]);
    }

    #[test]
    fn sliding_late_event_updates_two_fired_windows_in_end_order() {
        let events = [
            ev("a", 7, 1),  // [0,10), [5,15); W = 7
            ev("a", 30, 2), // [25,35), [30,40); W = 30 -> [0,10), [5,15) fire
            ev("a", 8, 4),  // both within lateness (30 < 10 + 25): both updated at once
        ];
        let out = run_model(&sliding(10, 5, 0, 25), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", 0, 10, "result", 1, 1, 1),
                em("a", 5, 15, "result", 1, 1, 1),
                em("a", 0, 10, "update", 2, 2, 5),
                em("a", 5, 15, "update", 2, 2, 5),
                em("a", 25, 35, "result", 1, 1, 2),
                em("a", 30, 40, "result", 1, 1, 2),
            ]
        );
        assert!(out.late.is_empty());
    }

    #[test]
    fn session_merge_of_two_unfired_sessions() {
        // bound 100: nothing fires before the end of the input.
        let events = [
            ev("a", 0, 1),   // a [0,10)
            ev("a", 15, 2),  // a [15,25)
            ev("b", 5, 100), // b [5,15): other key, not merged
            ev("a", 8, 4),   // [8,18) overlaps both -> a [0,25) = 3/7
        ];
        let out = run_model(&session(10, 100, 0), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("b", 5, 15, "result", 1, 1, 100),
                em("a", 0, 25, "result", 1, 3, 7)
            ]
        );
        assert!(out.late.is_empty());
    }

    #[test]
    fn session_merge_of_two_fired_sessions_via_late_bridging_event() {
        // gap 10, bound 0, lateness 30.
        let events = [
            ev("a", 0, 1),   // A [0,10); W = 0
            ev("a", 30, 2),  // D [30,40); W = 30 -> A v1 = 1/1
            ev("a", 0, 4),   // [0,10) merges into A, same bounds: A v2 = 2/5 at once
            ev("a", 12, 8),  // B [12,22), already due: v1 = 1/8 at once
            ev("a", 10, 16), // [10,20) touches A, overlaps B -> [0,22) = 4/29
        ];
        let out = run_model(&session(10, 0, 30), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", 0, 10, "result", 1, 1, 1),
                em("a", 0, 10, "update", 2, 2, 5),
                em("a", 12, 22, "result", 1, 1, 8),
                em("a", 0, 10, "retract", 2, 2, 5),
                em("a", 12, 22, "retract", 1, 1, 8),
                em("a", 0, 22, "update", 3, 4, 29),
                em("a", 30, 40, "result", 1, 1, 2),
            ]
        );
        assert!(out.late.is_empty());
    }

    #[test]
    fn session_retract_before_merged_window_is_due() {
        // gap 10, bound 0, lateness 10.
        let events = [
            ev("a", 0, 1),  // [0,10)
            ev("a", 12, 2), // [12,22); W = 12 -> [0,10) v1 = 1/1
            ev("a", 9, 4),  // [9,19) overlaps both -> [0,22), not due (22 > 12): retract only
        ];
        let out = run_model(&session(10, 0, 10), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", 0, 10, "result", 1, 1, 1),
                em("a", 0, 10, "retract", 1, 1, 1),
                em("a", 0, 22, "update", 2, 3, 7),
            ]
        );
        assert!(out.late.is_empty());
    }

    #[test]
    fn session_event_joining_live_session_is_not_late() {
        // gap 10, bound 0, lateness 0.
        let events = [
            ev("a", 0, 1),   // [0,10)
            ev("a", 9, 2),   // [0,19); W = 9
            ev("a", 18, 4),  // [0,28); W = 18
            ev("a", 5, 8),   // own [5,15) would be late (18 >= 15) but joins [0,28): 4/15
            ev("a", 40, 16), // [40,50); W = 40 -> [0,28) fires, dropped
            ev("a", 20, 32), // [20,30): no live session to join, 40 >= 30 -> late
        ];
        let out = run_model(&session(10, 0, 0), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", 0, 28, "result", 1, 4, 15),
                em("a", 40, 50, "result", 1, 1, 16)
            ]
        );
        assert_eq!(out.late, vec![5]);
    }

    #[test]
    fn touching_sessions_merge() {
        // gap 10, bound 100: everything fires at the end.
        let events = [
            ev("a", 0, 1),   // [0,10)
            ev("a", 10, 2),  // [10,20) touches [0,10) -> [0,20)
            ev("a", -10, 4), // [-10,0) touches [0,20) -> [-10,20) = 3/7
            ev("a", 31, 8),  // [31,41)
            ev("a", 21, 16), // [21,31) touches [31,41) -> [21,41); 1 ms away from [-10,20)
        ];
        let out = run_model(&session(10, 100, 0), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", -10, 20, "result", 1, 3, 7),
                em("a", 21, 41, "result", 1, 2, 24)
            ]
        );
        assert!(out.late.is_empty());
    }

    #[test]
    fn negative_timestamps_tumbling() {
        let events = [
            ev("a", -11, 1), // [-20,-10); W = -11
            ev("a", -1, 2),  // [-10,0); W = -1 -> [-20,-10) fires
            ev("a", -10, 4), // [-10,0) = 2/6
            ev("a", 0, 8),   // [0,10); W = 0 -> [-10,0) fires
        ];
        let out = run_model(&tumbling(10, 0, 0), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", -20, -10, "result", 1, 1, 1),
                em("a", -10, 0, "result", 1, 2, 6),
                em("a", 0, 10, "result", 1, 1, 8),
            ]
        );
        assert!(out.late.is_empty());
    }

    #[test]
    fn negative_timestamps_sliding() {
        // size 10, slide 5; bound 100 so everything fires at the end.
        let events = [
            ev("a", -3, 1), // [-10,0), [-5,5)
            ev("a", -7, 2), // [-15,-5), [-10,0)
        ];
        let out = run_model(&sliding(10, 5, 100, 0), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", -15, -5, "result", 1, 1, 2),
                em("a", -10, 0, "result", 1, 2, 3),
                em("a", -5, 5, "result", 1, 1, 1),
            ]
        );
    }

    #[test]
    fn end_of_input_fires_everything_in_order() {
        // bound 1000: the watermark never passes a window end before the end of the input.
        let events = [
            ev("b", 5, 1),
            ev("a", 25, 2),
            ev("a", 3, 4),
            ev("c", 15, 8),
            ev("a", 7, 16),
        ];
        let out = run_model(&tumbling(10, 1000, 0), &events);
        assert_eq!(
            out.emissions,
            vec![
                em("a", 0, 10, "result", 1, 2, 20),
                em("b", 0, 10, "result", 1, 1, 1),
                em("c", 10, 20, "result", 1, 1, 8),
                em("a", 20, 30, "result", 1, 1, 2),
            ]
        );
        assert!(out.late.is_empty());
    }

    #[test]
    fn empty_input() {
        let out = run_model(&session(10, 0, 0), &[]);
        assert_eq!(out, ModelOutput::default());
    }
}
