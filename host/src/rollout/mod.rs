//! Rollout: running two versions of a pipeline's aggregate, or of one of its enrichment
//! operators, at once (one rollout per pipeline at a time).
//!
//! Keys are split by bucket (`key_group(key) % 100`): a key is served by the candidate when its
//! bucket is below the rollout percentage, so a key is sticky and only moves forward while the
//! percentage rises. Routing changes are applied by the pipeline at a checkpoint barrier and
//! recorded in that checkpoint. In shadow mode the candidate serves nothing: it runs on a copy
//! of every key's events, with its own copy of the state, and its results are compared with the
//! live version's. Per-version counters feed the status API, the metrics and the automatic
//! rollback [`Policy`].
//!
//! Depends on `event`, `operator`, `state`, `time` and `value`.

mod analysis;
mod policy;
mod versioned;
mod versioned_enrich;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use analysis::{
    Analysis, Evidence, GateError, GateResult, Gates, MAX_TOLERANCES, StepOutcome, StepRecord,
};
pub use policy::{Policy, RateWatch};
pub use versioned::{ShadowLog, VersionedAggregate};
pub use versioned_enrich::{VersionedEnrich, counter_key};

use crate::state::key_group;

/// Which versions serve which keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Routing {
    /// The version serving keys at or above the percentage.
    pub live: String,
    /// The version being rolled out, if any.
    pub candidate: Option<String>,
    /// Share of key buckets (0-100) the candidate serves.
    pub percent: u8,
    /// The candidate runs in shadow: it serves nothing and its results are only compared.
    #[serde(default)]
    pub shadow: bool,
    /// The enrichment operator the routing is for; `None`: the aggregate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// The live version also runs, on a copy of the state, for the keys the candidate serves,
    /// and the two results are compared (an analysis rollout's evidence; aggregates only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compare: bool,
    /// Numeric fields whose values may differ by this much and still count as the same in a
    /// comparison (shadow or compare), by field name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tolerance: BTreeMap<String, f64>,
}

impl Routing {
    /// Only `live` serves.
    pub fn single(live: &str) -> Routing {
        Routing {
            live: live.into(),
            candidate: None,
            percent: 0,
            shadow: false,
            operator: None,
            compare: false,
            tolerance: BTreeMap::new(),
        }
    }

    /// Whether two results count as the same: the same fields, each value equal, or for the
    /// fields with a tolerance, numbers at most that far apart.
    pub fn same(&self, a: &crate::value::Fields, b: &crate::value::Fields) -> bool {
        use crate::value::Value;
        if self.tolerance.is_empty() || a.len() != b.len() {
            return a == b;
        }
        let number = |v: &Value| match v {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        };
        a.iter().zip(b).all(|((name_a, a), (name_b, b))| {
            name_a == name_b
                && (a == b
                    || (self.tolerance.get(name_a.as_str()))
                        .zip(number(a).zip(number(b)))
                        .is_some_and(|(tolerance, (a, b))| (a - b).abs() <= *tolerance))
        })
    }

    /// Whether `key` is served by the candidate.
    pub fn to_candidate(&self, key: &str) -> bool {
        self.candidate.is_some() && !self.shadow && bucket(key) < self.percent
    }
}

/// A key's rollout bucket, 0-99: its key group modulo 100. Fixed forever, like key groups.
pub fn bucket(key: &str) -> u8 {
    (key_group(key) % 100) as u8
}

/// Counters of one operator version in one pipeline, shared by its shards.
#[derive(Debug, Default)]
pub struct VersionCounters {
    /// Operator calls.
    pub calls: AtomicU64,
    /// Events passed to `add`.
    pub events: AtomicU64,
    /// Calls the operator rejected (returned an error).
    pub errors: AtomicU64,
    /// Calls that trapped.
    pub traps: AtomicU64,
    /// Windows added to or finished in calls carrying many windows (contract 0.3, or the native
    /// count-sum); every other window took a call of its own. An operator whose windows stop
    /// being carried (it needed a window's scope, or trapped) has lost its fast path.
    pub carried_windows: AtomicU64,
    /// Of the windows added in calls carrying many, those whose first event came with a
    /// crossing from the router (a 0.3 aggregate of one number, or the native count-sum, fed
    /// straight from the router): the call is built from the crossings without reading the
    /// events, unless a later event has none or another field or kind of number. A pipeline
    /// whose windows, carried as before, stop coming with crossings has lost that path; nothing
    /// else shows it, the results being the same.
    pub crossed_windows: AtomicU64,
    /// Shadow mode: window results compared with the live version's.
    pub shadow_compared: AtomicU64,
    /// Shadow mode: comparisons that differed.
    pub shadow_differed: AtomicU64,
    /// Windows finished beside the other version (shadow or compare mode), and the bytes of
    /// this version's state in them when they finished: the same windows for both versions.
    pub state_windows: AtomicU64,
    /// See `state_windows`.
    pub state_bytes: AtomicU64,
    /// Calls timed (one in 16) and their total duration, for the console's latency chart.
    pub timed_calls: AtomicU64,
    /// Nanoseconds of the timed calls.
    pub timed_call_ns: AtomicU64,
    /// The timed calls by duration (see [`CounterSnapshot::call_time_log2`]).
    pub call_time_log2: [AtomicU64; CALL_TIME_BUCKETS],
    /// The version's Prometheus metrics (none for an unnamed pipeline).
    pub metrics: Option<CallMetrics>,
}

/// One version's operator calls as Prometheus metrics: calls, traps, call latency and the
/// windows carried many to a call.
pub struct CallMetrics {
    calls: metrics::Counter,
    traps: metrics::Counter,
    latency: metrics::Histogram,
    carried: metrics::Counter,
    crossed: metrics::Counter,
}

impl std::fmt::Debug for CallMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallMetrics")
    }
}

impl CallMetrics {
    fn new(pipeline: &str, version: &str) -> CallMetrics {
        let labels = [
            ("pipeline", pipeline.to_owned()),
            ("version", version.to_owned()),
        ];
        CallMetrics {
            calls: metrics::counter!("weir_operator_calls_total", &labels),
            traps: metrics::counter!("weir_operator_traps_total", &labels),
            latency: metrics::histogram!("weir_operator_call_duration_seconds", &labels),
            carried: metrics::counter!("weir_operator_windows_carried_total", &labels),
            crossed: metrics::counter!("weir_operator_windows_crossed_total", &labels),
        }
    }

    /// Windows done in a call carrying many, and those of them that came with crossings.
    pub fn carried(&self, windows: u64, crossed: u64) {
        self.carried.increment(windows);
        if crossed > 0 {
            self.crossed.increment(crossed);
        }
    }

    /// One call, trapped or not, and how long it took if it was timed.
    pub fn call(&self, took: Option<std::time::Duration>, trapped: bool) {
        self.calls.increment(1);
        self.traps.increment(u64::from(trapped));
        if let Some(took) = took {
            self.latency.record(took.as_secs_f64());
        }
    }
}

/// A point-in-time copy of [`VersionCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CounterSnapshot {
    /// Operator calls.
    pub calls: u64,
    /// Events passed to `add`.
    pub events: u64,
    /// Rejected calls.
    pub errors: u64,
    /// Trapped calls.
    pub traps: u64,
    /// Windows done in calls carrying many windows.
    pub carried_windows: u64,
    /// Windows added in such calls that came with the router's crossings.
    pub crossed_windows: u64,
    /// Shadow comparisons.
    pub shadow_compared: u64,
    /// Shadow comparisons that differed.
    pub shadow_differed: u64,
    /// Windows finished beside the other version.
    pub state_windows: u64,
    /// The bytes of this version's state in them when they finished.
    pub state_bytes: u64,
    /// Calls timed.
    pub timed_calls: u64,
    /// Their total duration (ns).
    pub timed_call_ns: u64,
    /// The timed calls by duration: entry `i` counts the calls of 2^i to 2^(i+1) ns (the last,
    /// every longer one too), for percentiles.
    pub call_time_log2: [u64; CALL_TIME_BUCKETS],
}

/// How many duration buckets [`CounterSnapshot::call_time_log2`] has (up to about 2 s).
pub const CALL_TIME_BUCKETS: usize = 32;

/// The bucket of a call that took `ns` nanoseconds.
pub fn call_time_bucket(ns: u64) -> usize {
    (63 - ns.max(1).leading_zeros() as usize).min(CALL_TIME_BUCKETS - 1)
}

impl CounterSnapshot {
    /// The 99th percentile of the timed calls' durations, in ns (the upper bound of its
    /// bucket), if any call was timed.
    pub fn p99_call_ns(&self) -> Option<f64> {
        let total: u64 = self.call_time_log2.iter().sum();
        let target = (total as f64 * 0.99).ceil() as u64;
        let mut seen = 0;
        for (i, n) in self.call_time_log2.iter().enumerate() {
            seen += n;
            if total > 0 && seen >= target {
                return Some(2f64.powi(i as i32 + 1));
            }
        }
        None
    }
}

impl std::ops::AddAssign for CounterSnapshot {
    /// Adds another run's counts (the slices of a pipeline on workers, summed).
    fn add_assign(&mut self, other: CounterSnapshot) {
        self.calls += other.calls;
        self.events += other.events;
        self.errors += other.errors;
        self.traps += other.traps;
        self.carried_windows += other.carried_windows;
        self.crossed_windows += other.crossed_windows;
        self.shadow_compared += other.shadow_compared;
        self.shadow_differed += other.shadow_differed;
        self.state_windows += other.state_windows;
        self.state_bytes += other.state_bytes;
        self.timed_calls += other.timed_calls;
        self.timed_call_ns += other.timed_call_ns;
        for (mine, theirs) in self.call_time_log2.iter_mut().zip(other.call_time_log2) {
            *mine += theirs;
        }
    }
}

impl VersionCounters {
    /// Reads all counters.
    pub fn snapshot(&self) -> CounterSnapshot {
        CounterSnapshot {
            calls: self.calls.load(Ordering::Relaxed),
            events: self.events.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            traps: self.traps.load(Ordering::Relaxed),
            carried_windows: self.carried_windows.load(Ordering::Relaxed),
            crossed_windows: self.crossed_windows.load(Ordering::Relaxed),
            shadow_compared: self.shadow_compared.load(Ordering::Relaxed),
            shadow_differed: self.shadow_differed.load(Ordering::Relaxed),
            state_windows: self.state_windows.load(Ordering::Relaxed),
            state_bytes: self.state_bytes.load(Ordering::Relaxed),
            timed_calls: self.timed_calls.load(Ordering::Relaxed),
            timed_call_ns: self.timed_call_ns.load(Ordering::Relaxed),
            call_time_log2: std::array::from_fn(|i| self.call_time_log2[i].load(Ordering::Relaxed)),
        }
    }
}

/// Counters by version, created on first use, with Prometheus metrics labelled with the
/// pipeline (when it has a name) and the version.
#[derive(Debug, Default)]
pub struct CounterBook {
    pipeline: Option<Arc<str>>,
    versions: std::sync::Mutex<std::collections::BTreeMap<String, Arc<VersionCounters>>>,
}

impl CounterBook {
    /// A book whose versions' metrics are labelled with `pipeline`.
    pub fn labelled(pipeline: &str) -> CounterBook {
        CounterBook {
            pipeline: Some(pipeline.into()),
            versions: Default::default(),
        }
    }

    /// The counters of `version`.
    pub fn of(&self, version: &str) -> Arc<VersionCounters> {
        let mut versions = self.versions.lock().expect("counter book lock");
        let make = || VersionCounters {
            metrics: self
                .pipeline
                .as_deref()
                .map(|pipeline| CallMetrics::new(pipeline, version)),
            ..VersionCounters::default()
        };
        versions
            .entry(version.to_owned())
            .or_insert_with(|| Arc::new(make()))
            .clone()
    }

    /// Every version's counters.
    pub fn snapshot(&self) -> Vec<(String, CounterSnapshot)> {
        let versions = self.versions.lock().expect("counter book lock");
        versions
            .iter()
            .map(|(v, c)| (v.clone(), c.snapshot()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn keys_only_move_forward_as_the_percentage_rises(key in "[a-z0-9-]{1,12}", low in 0u8..=100, high in 0u8..=100) {
            let (low, high) = (low.min(high), low.max(high));
            let routing = |percent| Routing { live: "1".into(), candidate: Some("2".into()), percent, ..Routing::single("1") };
            if routing(low).to_candidate(&key) {
                prop_assert!(routing(high).to_candidate(&key));
            }
        }
    }

    #[test]
    fn results_within_a_tolerance_are_the_same() {
        use crate::value::Value;
        let fields = |sum: i64, label: &str| {
            vec![
                ("sum".to_owned(), Value::Int(sum)),
                ("label".to_owned(), Value::Text(label.into())),
            ]
        };
        let mut routing = Routing::single("1");
        assert!(!routing.same(&fields(100, "a"), &fields(101, "a")));
        routing.tolerance = [("sum".to_owned(), 1.0)].into();
        assert!(routing.same(&fields(100, "a"), &fields(101, "a")));
        assert!(!routing.same(&fields(100, "a"), &fields(102, "a")));
        assert!(
            !routing.same(&fields(100, "a"), &fields(100, "b")),
            "only the fields named"
        );
        assert!(!routing.same(&fields(100, "a"), &fields(100, "a")[..1].to_vec()));
    }

    #[test]
    fn the_percentage_is_the_share_of_buckets() {
        let keys: Vec<String> = (0..10_000).map(|i| format!("user-{i}")).collect();
        let routing = Routing {
            live: "1".into(),
            candidate: Some("2".into()),
            percent: 10,
            ..Routing::single("1")
        };
        let share = keys.iter().filter(|k| routing.to_candidate(k)).count();
        assert!(
            (800..1200).contains(&share),
            "{share} of 10000 keys at 10 percent"
        );
        assert!(
            !Routing {
                percent: 100,
                shadow: true,
                ..routing.clone()
            }
            .to_candidate("user-1")
        );
        assert!(
            Routing {
                percent: 100,
                ..routing
            }
            .to_candidate("user-1")
        );
    }
}
