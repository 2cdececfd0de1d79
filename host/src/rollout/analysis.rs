//! Analysis-gated rollouts: the [`Gates`] a step of a rollout must pass before the next, judged
//! on [`Evidence`] (how the candidate's and the live version's counters, and the pipeline's,
//! grew during the step), and the [`Analysis`] a rollout keeps: its hold, whether it promotes
//! itself at the end, the step it is at and the timeline of the steps judged so far.
//!
//! Each gate compares the candidate with the live version over the same time (and, for the
//! shadow gate, the same keys: in compare mode the live version runs beside the candidate on
//! the keys the candidate serves). A gate with fewer samples than it asks for is not judged
//! (it neither passes nor fails the step); a step advances once its hold is over and no gate
//! failed.
//!
//! Depends on nothing outside `rollout`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::CounterSnapshot;

/// The most fields a tolerance may name.
pub const MAX_TOLERANCES: usize = 64;

/// Fewest timed calls of each version before the p99 gate is judged.
const MIN_TIMED: u64 = 10;

/// What a step must show. Every limit is optional; a gate without one is not judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Gates {
    /// Largest share of the compared windows whose results differ (beyond `tolerance`).
    pub max_shadow_diff_rate: Option<f64>,
    /// Fewest windows compared in a step before the shadow gate is judged.
    pub min_comparisons: u64,
    /// Numeric fields that may differ by this much and still count as the same, by name.
    pub tolerance: BTreeMap<String, f64>,
    /// Largest amount by which the candidate's share of calls that trap may exceed the live
    /// version's.
    pub max_trap_rate_increase: Option<f64>,
    /// The same for calls the operator rejects (errors).
    pub max_error_rate_increase: Option<f64>,
    /// Largest share of the events read during the step that became dead letters.
    pub max_dead_letter_rate: Option<f64>,
    /// Largest ratio of the candidate's mean call time to the live version's.
    pub max_call_time_ratio: Option<f64>,
    /// Largest ratio of the candidate's 99th percentile call time to the live version's
    /// (judged on the timed calls, one in 16, by power-of-two buckets).
    pub max_p99_call_time_ratio: Option<f64>,
    /// Largest share of the events read during the step that came too late for their windows.
    pub max_late_ratio: Option<f64>,
    /// Largest ratio of the candidate's mean state per window, in bytes when the window
    /// finished, to the live version's over the same windows (both run every window, as for
    /// the shadow gate).
    pub max_state_growth_ratio: Option<f64>,
    /// Fewest candidate calls in a step before the call gates are judged.
    pub min_calls: u64,
}

impl Default for Gates {
    fn default() -> Self {
        Gates {
            max_shadow_diff_rate: None,
            min_comparisons: 20,
            tolerance: BTreeMap::new(),
            max_trap_rate_increase: None,
            max_error_rate_increase: None,
            max_dead_letter_rate: None,
            max_call_time_ratio: None,
            max_p99_call_time_ratio: None,
            max_late_ratio: None,
            max_state_growth_ratio: None,
            min_calls: 10,
        }
    }
}

/// Why gates were refused.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum GateError {
    /// A rate outside 0 to 1.
    #[error("gates.{0} must be between 0 and 1")]
    Rate(&'static str),
    /// A ratio that is not a number above 0 (at most a million).
    #[error("gates.{0} must be above 0 and at most 1000000")]
    Ratio(&'static str),
    /// A tolerance that is not a number of 0 or more, or too many of them.
    #[error("gates.tolerance: at most {MAX_TOLERANCES} fields, each a number of 0 or more")]
    Tolerance,
    /// A minimum beyond reason.
    #[error("gates.{0} must be at most 1000000000")]
    Minimum(&'static str),
    /// No gate at all.
    #[error(
        "gates: name at least one limit (max_shadow_diff_rate, max_trap_rate_increase, max_error_rate_increase, max_dead_letter_rate, max_late_ratio, max_call_time_ratio, max_p99_call_time_ratio, max_state_growth_ratio)"
    )]
    Empty,
}

impl Gates {
    /// Checks the limits a caller gave.
    pub fn check(&self) -> Result<(), GateError> {
        let rates = [
            ("max_shadow_diff_rate", self.max_shadow_diff_rate),
            ("max_trap_rate_increase", self.max_trap_rate_increase),
            ("max_error_rate_increase", self.max_error_rate_increase),
            ("max_dead_letter_rate", self.max_dead_letter_rate),
            ("max_late_ratio", self.max_late_ratio),
        ];
        for (name, rate) in rates {
            if rate.is_some_and(|r| !(0.0..=1.0).contains(&r)) {
                return Err(GateError::Rate(name));
            }
        }
        let ratios = [
            ("max_call_time_ratio", self.max_call_time_ratio),
            ("max_p99_call_time_ratio", self.max_p99_call_time_ratio),
            ("max_state_growth_ratio", self.max_state_growth_ratio),
        ];
        for (name, ratio) in ratios {
            if ratio.is_some_and(|r| !(r > 0.0 && r <= 1e6)) {
                return Err(GateError::Ratio(name));
            }
        }
        let bad_tolerance = |t: &f64| !(t.is_finite() && *t >= 0.0);
        if self.tolerance.len() > MAX_TOLERANCES || self.tolerance.values().any(bad_tolerance) {
            return Err(GateError::Tolerance);
        }
        for (name, minimum) in [
            ("min_comparisons", self.min_comparisons),
            ("min_calls", self.min_calls),
        ] {
            if minimum > 1_000_000_000 {
                return Err(GateError::Minimum(name));
            }
        }
        let limits = rates
            .iter()
            .chain(&ratios)
            .map(|(_, limit)| limit.is_some());
        if !limits.into_iter().any(|x| x) {
            return Err(GateError::Empty);
        }
        Ok(())
    }

    /// Judges a step on `evidence`: one result per gate with a limit.
    pub fn judge(&self, evidence: &Evidence) -> Vec<GateResult> {
        let (candidate, live) = (&evidence.candidate, &evidence.live);
        let rate = |part: u64, whole: u64| (whole > 0).then(|| part as f64 / whole as f64);
        let mut results = Vec::new();
        if let Some(limit) = self.max_shadow_diff_rate {
            let compared = candidate.shadow_compared;
            let value = (compared >= self.min_comparisons.max(1))
                .then(|| rate(candidate.shadow_differed, compared))
                .flatten();
            results.push(GateResult::new("shadow_diff_rate", value, limit, compared));
        }
        let calls = candidate.calls;
        let enough = calls >= self.min_calls.max(1);
        let increase = |of: fn(&CounterSnapshot) -> u64| {
            let candidate_rate = rate(of(candidate), candidate.calls)?;
            Some(candidate_rate - rate(of(live), live.calls).unwrap_or(0.0))
        };
        if let Some(limit) = self.max_trap_rate_increase {
            let value = enough.then(|| increase(|c| c.traps)).flatten();
            results.push(GateResult::new("trap_rate_increase", value, limit, calls));
        }
        if let Some(limit) = self.max_error_rate_increase {
            let value = enough.then(|| increase(|c| c.errors)).flatten();
            results.push(GateResult::new("error_rate_increase", value, limit, calls));
        }
        if let (Some(limit), Some(events), Some(dead)) = (
            self.max_dead_letter_rate,
            evidence.events,
            evidence.dead_letters,
        ) {
            let value = (events >= self.min_calls.max(1))
                .then(|| rate(dead, events))
                .flatten();
            results.push(GateResult::new("dead_letter_rate", value, limit, events));
        }
        if let (Some(limit), Some(events), Some(late)) =
            (self.max_late_ratio, evidence.events, evidence.late)
        {
            let value = (events >= self.min_calls.max(1))
                .then(|| rate(late, events))
                .flatten();
            results.push(GateResult::new("late_ratio", value, limit, events));
        }
        if let Some(limit) = self.max_state_growth_ratio {
            let windows = candidate.state_windows.min(live.state_windows);
            let mean = |c: &CounterSnapshot| c.state_bytes as f64 / c.state_windows as f64;
            let value = (windows >= self.min_comparisons.max(1))
                .then(|| mean(candidate) / mean(live).max(1.0));
            results.push(GateResult::new("state_growth_ratio", value, limit, windows));
        }
        if let Some(limit) = self.max_p99_call_time_ratio {
            let timed = |c: &CounterSnapshot| c.call_time_log2.iter().sum::<u64>();
            let enough = timed(candidate) >= MIN_TIMED && timed(live) >= MIN_TIMED;
            let value = enough
                .then(|| Some(candidate.p99_call_ns()? / live.p99_call_ns()?))
                .flatten();
            results.push(GateResult::new(
                "p99_call_time_ratio",
                value,
                limit,
                timed(candidate),
            ));
        }
        if let Some(limit) = self.max_call_time_ratio {
            let mean = |c: &CounterSnapshot| {
                (c.timed_calls > 0).then(|| c.timed_call_ns as f64 / c.timed_calls as f64)
            };
            let value = (enough && live.timed_calls > 0)
                .then(|| Some(mean(candidate)? / mean(live)?.max(1.0)))
                .flatten();
            results.push(GateResult::new("call_time_ratio", value, limit, calls));
        }
        results
    }
}

/// How a step's counters grew: the candidate's, the live version's, and (where the pipeline
/// runs here) the events read and dead letters written.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Evidence {
    /// The candidate's counters.
    pub candidate: CounterSnapshot,
    /// The live version's counters.
    pub live: CounterSnapshot,
    /// Events read by the pipeline.
    pub events: Option<u64>,
    /// Dead letters the pipeline wrote.
    pub dead_letters: Option<u64>,
    /// Events too late for all their windows.
    pub late: Option<u64>,
}

impl Evidence {
    /// What grew from `base` to `self`.
    pub fn since(&self, base: &Evidence) -> Evidence {
        let sub = |now: Option<u64>, then: Option<u64>| Some(now?.saturating_sub(then?));
        Evidence {
            candidate: self.candidate.since(&base.candidate),
            live: self.live.since(&base.live),
            events: sub(self.events, base.events),
            dead_letters: sub(self.dead_letters, base.dead_letters),
            late: sub(self.late, base.late),
        }
    }
}

/// One gate's verdict on a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    /// The gate.
    pub gate: String,
    /// What was measured; `None` while there are fewer samples than the gate asks for.
    pub value: Option<f64>,
    /// Its limit.
    pub limit: f64,
    /// How many samples (windows compared, calls, events) it was measured on.
    pub samples: u64,
    /// Whether it passed: over its limit is a failure; not measured yet is not.
    pub passed: bool,
}

impl GateResult {
    fn new(gate: &str, value: Option<f64>, limit: f64, samples: u64) -> GateResult {
        GateResult {
            gate: gate.to_owned(),
            value,
            limit,
            samples,
            passed: value.is_none_or(|v| v <= limit),
        }
    }

    /// The failure as a sentence: `shadow_diff_rate 0.031 > 0.010 over 412 samples`.
    pub fn describe(&self) -> String {
        let value = self.value.map_or("-".into(), |v| format!("{v:.3}"));
        format!(
            "{} {value} > {:.3} over {} samples",
            self.gate, self.limit, self.samples
        )
    }
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepOutcome {
    /// Its hold is not over.
    Running,
    /// Held with no gate failing.
    Passed,
    /// A gate failed: the rollout was rolled back.
    Failed,
}

/// One step of the timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The candidate's share of keys.
    pub percent: u8,
    /// When its routing applied, ms since the epoch.
    pub started_ms: u64,
    /// When it was judged.
    pub ended_ms: Option<u64>,
    /// How it ended.
    pub outcome: StepOutcome,
    /// The gates' verdicts when it was judged.
    pub gates: Vec<GateResult>,
    /// Keys where the versions' results differed (a failed shadow gate's examples).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub example_keys: Vec<String>,
}

/// An analysis-gated rollout's own state, kept with its plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Analysis {
    /// The gates.
    pub gates: Gates,
    /// How long each step is held (from when its routing applied) before it may advance.
    pub hold_ms: u64,
    /// Promote the candidate once the last step passes.
    pub promote: bool,
    /// The index of the step in progress.
    pub step: usize,
    /// The steps judged so far, oldest first.
    pub timeline: Vec<StepRecord>,
}

impl CounterSnapshot {
    /// What grew from `base` to `self` (a counter that went down, as when a slice moved to
    /// another worker, counts from 0).
    pub fn since(&self, base: &CounterSnapshot) -> CounterSnapshot {
        let d = |now: u64, then: u64| now.checked_sub(then).unwrap_or(now);
        CounterSnapshot {
            calls: d(self.calls, base.calls),
            events: d(self.events, base.events),
            errors: d(self.errors, base.errors),
            traps: d(self.traps, base.traps),
            carried_windows: d(self.carried_windows, base.carried_windows),
            crossed_windows: d(self.crossed_windows, base.crossed_windows),
            shadow_compared: d(self.shadow_compared, base.shadow_compared),
            shadow_differed: d(self.shadow_differed, base.shadow_differed),
            state_windows: d(self.state_windows, base.state_windows),
            state_bytes: d(self.state_bytes, base.state_bytes),
            timed_calls: d(self.timed_calls, base.timed_calls),
            timed_call_ns: d(self.timed_call_ns, base.timed_call_ns),
            call_time_log2: std::array::from_fn(|i| {
                d(self.call_time_log2[i], base.call_time_log2[i])
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(calls: u64, traps: u64, compared: u64, differed: u64) -> CounterSnapshot {
        CounterSnapshot {
            calls,
            traps,
            shadow_compared: compared,
            shadow_differed: differed,
            ..CounterSnapshot::default()
        }
    }

    #[test]
    fn a_gate_fails_over_its_limit_and_is_not_judged_without_enough_samples() {
        let gates = Gates {
            max_shadow_diff_rate: Some(0.01),
            max_trap_rate_increase: Some(0.05),
            ..Gates::default()
        };
        let evidence = |candidate, live| Evidence {
            candidate,
            live,
            ..Evidence::default()
        };
        // 3 of 100 windows differ: failed; the traps match the live version's: passed.
        let judged = gates.judge(&evidence(counters(100, 5, 100, 3), counters(100, 5, 0, 0)));
        assert_eq!(
            judged
                .iter()
                .map(|g| (g.gate.as_str(), g.passed))
                .collect::<Vec<_>>(),
            [("shadow_diff_rate", false), ("trap_rate_increase", true)]
        );
        assert!(
            judged[0]
                .describe()
                .starts_with("shadow_diff_rate 0.030 > 0.010 over 100")
        );
        // Too few windows compared and calls made: nothing judged, nothing failed.
        let judged = gates.judge(&evidence(counters(3, 3, 5, 5), counters(0, 0, 0, 0)));
        assert!(
            judged.iter().all(|g| g.passed && g.value.is_none()),
            "{judged:?}"
        );
    }

    #[test]
    fn the_state_gate_compares_the_mean_state_of_the_same_windows() {
        let gates = Gates {
            max_state_growth_ratio: Some(2.0),
            min_comparisons: 10,
            ..Gates::default()
        };
        let state = |windows, bytes| CounterSnapshot {
            state_windows: windows,
            state_bytes: bytes,
            ..CounterSnapshot::default()
        };
        let judge = |candidate, live| {
            gates.judge(&Evidence {
                candidate,
                live,
                ..Evidence::default()
            })[0]
                .clone()
        };
        // 40 bytes a window against 16: 2.5 times as much, failed.
        let grown = judge(state(20, 800), state(20, 320));
        assert_eq!(
            (grown.gate.as_str(), grown.value, grown.passed),
            ("state_growth_ratio", Some(2.5), false)
        );
        // 1.5 times: passed; too few windows: not judged; an empty live state counts as a byte.
        assert!(judge(state(20, 480), state(20, 320)).passed);
        assert_eq!(judge(state(9, 9_000), state(9, 90)).value, None);
        assert_eq!(judge(state(10, 30), state(10, 0)).value, Some(3.0));
        let absurd = Gates {
            max_state_growth_ratio: Some(0.0),
            ..Gates::default()
        };
        assert_eq!(
            absurd.check(),
            Err(GateError::Ratio("max_state_growth_ratio"))
        );
    }

    #[test]
    fn absurd_limits_are_refused() {
        let refused = |gates: Gates| gates.check().unwrap_err();
        let rate = |r| Gates {
            max_shadow_diff_rate: Some(r),
            ..Gates::default()
        };
        assert_eq!(refused(rate(1.5)), GateError::Rate("max_shadow_diff_rate"));
        assert_eq!(
            refused(rate(f64::NAN)),
            GateError::Rate("max_shadow_diff_rate")
        );
        assert_eq!(refused(Gates::default()), GateError::Empty);
        let ratio = Gates {
            max_call_time_ratio: Some(0.0),
            ..Gates::default()
        };
        assert_eq!(refused(ratio), GateError::Ratio("max_call_time_ratio"));
        let p99 = Gates {
            max_p99_call_time_ratio: Some(f64::INFINITY),
            ..Gates::default()
        };
        assert_eq!(refused(p99), GateError::Ratio("max_p99_call_time_ratio"));
        let tolerance = Gates {
            tolerance: [("sum".to_owned(), -1.0)].into(),
            ..rate(0.1)
        };
        assert_eq!(refused(tolerance), GateError::Tolerance);
        assert!(rate(0.0).check().is_ok());
    }

    #[test]
    fn the_p99_gate_compares_the_slowest_calls_and_the_late_gate_the_late_events() {
        let timed = |fast: u64, slow: u64| {
            let mut c = CounterSnapshot::default();
            c.call_time_log2[10] = fast; // about 1-2 µs
            c.call_time_log2[20] = slow; // about 1-2 ms
            c
        };
        assert_eq!(timed(100, 0).p99_call_ns(), Some(2048.0));
        assert_eq!(timed(95, 5).p99_call_ns(), Some(2f64.powi(21)));
        let gates = Gates {
            max_p99_call_time_ratio: Some(2.0),
            max_late_ratio: Some(0.1),
            ..Gates::default()
        };
        // The candidate's slowest 5 % are a thousand times slower: its p99 fails; 20 of 100
        // events late fails too.
        let evidence = Evidence {
            candidate: timed(95, 5),
            live: timed(100, 0),
            events: Some(100),
            late: Some(20),
            ..Evidence::default()
        };
        let judged = gates.judge(&evidence);
        assert_eq!(
            judged
                .iter()
                .map(|g| (g.gate.as_str(), g.passed))
                .collect::<Vec<_>>(),
            [("late_ratio", false), ("p99_call_time_ratio", false)]
        );
        assert_eq!(judged[1].value, Some(1024.0));
    }

    #[test]
    fn counters_that_went_down_count_from_zero() {
        let now = counters(5, 0, 0, 0);
        assert_eq!(now.since(&counters(9, 0, 0, 0)).calls, 5);
        assert_eq!(now.since(&counters(2, 0, 0, 0)).calls, 3);
    }
}
