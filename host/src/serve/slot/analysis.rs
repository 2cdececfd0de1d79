//! The steps of an analysis-gated rollout, judged at every tick of the server: once a step's
//! routing has applied, its evidence is counted from there (the candidate's and the live
//! version's counters, the pipeline's events and dead letters); a gate over its limit rolls the
//! rollout back at once, with the gates' figures and, for the shadow gate, example keys from
//! the shadow log; a step held for `hold` with no gate failing moves to the next, and past the
//! last the candidate is promoted if the rollout says so.
//!
//! Depends on `rollout` and the slot.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::{Inner, Slot};
use crate::rollout::{CounterSnapshot, Evidence, GateResult, Routing};
use crate::serve::{ExternalServers, Managed, RequestError, RolloutPlan};

/// The step of a gated rollout being held.
#[derive(Debug)]
pub(super) struct StepWatch {
    /// Its index.
    step: usize,
    /// Since when (its routing applied).
    since: Instant,
    started_ms: u64,
    /// The evidence when it began.
    base: Evidence,
    /// The gates' verdicts at the last tick.
    pub(super) gates: Vec<GateResult>,
}

impl StepWatch {
    /// What the status shows of it.
    pub(super) fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "step": self.step,
            "started_ms": self.started_ms,
            "held_ms": self.since.elapsed().as_millis() as u64,
            "gates": self.gates,
        })
    }
}

impl Slot {
    /// Judges the step in progress of the gated rollout `plan` (see the module documentation);
    /// `polled`: a pipeline on workers' counters, summed.
    pub(super) fn judge_step(
        &self,
        inner: &mut Inner,
        plan: &RolloutPlan,
        polled: Option<&BTreeMap<String, CounterSnapshot>>,
        resolving: (&crate::operator::Registry, &ExternalServers),
    ) -> Result<(), RequestError> {
        let Some(analysis) = &plan.analysis else {
            return Ok(());
        };
        if analysis.step >= plan.steps.len() {
            // Every step passed: waiting to be promoted by hand, or (a promotion that failed)
            // promoted now.
            if analysis.promote {
                let version = with_managed(inner, |m| m.promote(resolving))?;
                info!(pipeline = %self.name, %version, "promoted after every step passed its gates");
            }
            return Ok(());
        }
        let Some(figures) = figures(inner, plan, polled) else {
            return Ok(());
        };
        // A new step, or counters that went down (a slice restarted on another worker): the
        // evidence is counted from now.
        let fresh = !matches!(&inner.analysis, Some(watch)
            if watch.step == analysis.step && !went_down(&figures, &watch.base));
        if fresh {
            inner.analysis = applied(inner).then(|| StepWatch {
                step: analysis.step,
                since: Instant::now(),
                started_ms: crate::time::wall_clock_ms(),
                base: figures,
                gates: Vec::new(),
            });
            return Ok(());
        }
        let watch = inner.analysis.as_mut().expect("checked above");
        let gates = analysis.gates.judge(&figures.since(&watch.base));
        watch.gates = gates.clone();
        let (started_ms, held) = (watch.started_ms, watch.since.elapsed());
        let percent = plan.percent_now();
        if let Some(failed) = gates.iter().find(|gate| !gate.passed) {
            metrics::counter!("weir_rollout_gate_failures_total", "pipeline" => self.name.clone(), "gate" => failed.gate.clone()).increment(1);
            let keys = match failed.gate.as_str() {
                "shadow_diff_rate" => self.differing_keys(&plan.version),
                _ => Vec::new(),
            };
            let reason = format!(
                "automatic: gate {} at the {percent} % step{}",
                failed.describe(),
                if keys.is_empty() {
                    String::new()
                } else {
                    format!("; keys that differed: {}", keys.join(", "))
                }
            );
            warn!(pipeline = %self.name, %reason, "a gate failed: rolled back");
            inner.analysis = None;
            return with_managed(inner, |m| m.fail_step(started_ms, (gates, keys), reason));
        }
        if held < Duration::from_millis(analysis.hold_ms) {
            return Ok(());
        }
        info!(pipeline = %self.name, percent, "rollout step passed its gates");
        inner.analysis = None;
        let promote = with_managed(inner, |m| m.pass_step(started_ms, gates))?;
        if promote {
            let version = with_managed(inner, |m| m.promote(resolving))?;
            info!(pipeline = %self.name, %version, "promoted after every step passed its gates");
        }
        Ok(())
    }

    /// Up to five keys whose versions' results differed, from the end of the shadow log.
    fn differing_keys(&self, version: &str) -> Vec<String> {
        let log = self.dir.join("out").join("shadow.jsonl");
        let mut keys: Vec<String> = Vec::new();
        let records = crate::fsutil::last_json_lines(&log, 500, 256 << 10);
        for record in records.iter().rev() {
            let differs = record["same"] == false && record["candidate_version"] == version;
            if let Some(key) = record["key"].as_str().filter(|_| differs)
                && !keys.iter().any(|k| k == key)
            {
                keys.push(key.to_owned());
            }
            if keys.len() == 5 {
                break;
            }
        }
        keys
    }
}

/// Whether any counter of `now` is below `base`'s.
fn went_down(now: &Evidence, base: &Evidence) -> bool {
    let below = |now: &CounterSnapshot, base: &CounterSnapshot| {
        now.calls < base.calls
            || now.shadow_compared < base.shadow_compared
            || now.shadow_differed < base.shadow_differed
            || now.timed_calls < base.timed_calls
    };
    below(&now.candidate, &base.candidate) || below(&now.live, &base.live)
}

fn with_managed<T>(
    inner: &mut Inner,
    f: impl FnOnce(&mut Managed) -> Result<T, RequestError>,
) -> Result<T, RequestError> {
    match &mut inner.managed {
        Ok(managed) => f(managed),
        Err(damage) => Err(RequestError::Conflict(damage.to_string())),
    }
}

/// Whether the routing asked for is the one in effect: applied at a barrier by this server's
/// run, or sent to the workers (which apply it within a beat and a checkpoint).
fn applied(inner: &Inner) -> bool {
    let asked = inner.managed.as_ref().ok().and_then(Managed::routing);
    let in_effect: Option<Routing> = match (&inner.control, inner.on_workers) {
        (_, true) => inner.requested.clone(),
        (Some(control), false) => control.applied(),
        _ => None,
    };
    asked.is_some() && asked == in_effect
}

/// The evidence now: the candidate's and the live version's counters (here, or summed from the
/// workers' reports), and this server's run's events and dead letters.
fn figures(
    inner: &Inner,
    plan: &RolloutPlan,
    polled: Option<&BTreeMap<String, CounterSnapshot>>,
) -> Option<Evidence> {
    use std::sync::atomic::Ordering::Relaxed;
    let live = inner.managed.as_ref().ok()?.routing()?.live;
    let live_key = match &plan.operator {
        Some(operator) => crate::rollout::counter_key(operator, &live),
        None => live,
    };
    let candidate_key = plan.counter_key();
    match (&inner.control, inner.on_workers, polled) {
        (_, true, Some(polled)) => Some(Evidence {
            candidate: polled.get(&candidate_key).copied().unwrap_or_default(),
            live: polled.get(&live_key).copied().unwrap_or_default(),
            events: None,
            dead_letters: None,
            late: None,
        }),
        (Some(control), false, _) => Some(Evidence {
            candidate: control.counters.of(&candidate_key).snapshot(),
            live: control.counters.of(&live_key).snapshot(),
            events: Some(control.stats.events_in.load(Relaxed)),
            dead_letters: Some(control.stats.dead_letters.load(Relaxed)),
            late: Some(control.stats.late.load(Relaxed)),
        }),
        _ => None,
    }
}
