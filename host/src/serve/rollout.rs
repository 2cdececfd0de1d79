//! Rollout requests as the API receives them, and the checked [`RolloutPlan`] a pipeline keeps
//! in its desired state. Depends on `names`, `rollout` and `time`.

use serde::{Deserialize, Serialize};

use crate::rollout::{Analysis, Policy};

/// A rollout request as the API receives it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutRequest {
    /// The enrichment operator to roll out (by name); absent: the aggregate.
    pub operator: Option<String>,
    /// The candidate version.
    pub version: String,
    /// The candidate's share of key buckets, 0-100.
    pub percent: Option<u8>,
    /// A schedule of shares, one step every `every`.
    #[serde(default)]
    pub steps: Vec<u8>,
    /// Time between steps (`"5m"`, or ms).
    pub every: Option<serde_json::Value>,
    /// Run the candidate in shadow instead of serving traffic.
    #[serde(default)]
    pub shadow: bool,
    /// Automatic rollback policy.
    pub policy: Option<PolicyRequest>,
    /// Gates each step must pass before the next (an analysis-gated rollout; with `hold`).
    pub gates: Option<crate::rollout::Gates>,
    /// How long each step of a gated rollout is held (`"5m"`, or ms).
    pub hold: Option<serde_json::Value>,
    /// Promote the candidate once the last step of a gated rollout passes.
    #[serde(default)]
    pub promote: bool,
}

/// The automatic rollback policy as the API receives it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRequest {
    max_trap_rate: Option<f64>,
    max_error_rate: Option<f64>,
    window: Option<serde_json::Value>,
    min_calls: Option<u64>,
}

/// A rollout in progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RolloutPlan {
    /// The enrichment operator rolled out; `None`: the aggregate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator: Option<String>,
    /// The candidate version.
    pub version: String,
    /// The share when there is no schedule.
    pub percent: u8,
    /// Shadow mode.
    pub shadow: bool,
    /// Scheduled shares.
    pub steps: Vec<u8>,
    /// Time between steps.
    pub every_ms: Option<u64>,
    /// When the rollout started (ms since the epoch), for the schedule.
    pub started_ms: u64,
    /// Automatic rollback.
    pub policy: Policy,
    /// An analysis-gated rollout's gates, hold, step and timeline: its steps advance on
    /// evidence, not on the clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<Analysis>,
}

/// The most steps a schedule may have.
const MAX_STEPS: usize = 100;

/// Why a rollout request was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The operator's name or version is not a name.
    #[error(transparent)]
    Name(#[from] crate::names::NameError),
    /// A percentage over 100.
    #[error("percentages must be between 0 and 100")]
    Percent,
    /// More than [`MAX_STEPS`] steps.
    #[error("`steps` may have at most {MAX_STEPS} entries")]
    TooManySteps,
    /// Steps without the time between them.
    #[error("`steps` needs `every`, the time between steps")]
    StepsWithoutEvery,
    /// Steps that go back.
    #[error("`steps` must not decrease: keys only move forward during a rollout")]
    StepsDecrease,
    /// A duration that is not whole milliseconds.
    #[error("{0} must be a whole number of ms")]
    NotWholeMillis(&'static str),
    /// A duration given as text that is not one.
    #[error("{field}: {source}")]
    Duration {
        /// The field.
        field: &'static str,
        /// Why.
        source: crate::time::TimeError,
    },
    /// A duration that is neither a number nor text.
    #[error("{0} must be milliseconds or text like \"5m\"")]
    NotADuration(&'static str),
    /// A duration of 0, or longer than a timestamp can reach.
    #[error("{0} must be between 1 ms and 100 years")]
    DurationRange(&'static str),
    /// Gates that cannot be judged.
    #[error(transparent)]
    Gates(#[from] crate::rollout::GateError),
    /// Gates without steps or a hold, or with what they replace.
    #[error(
        "gates judge a rollout in steps: give `steps` and `hold` (the time each step is held), \
         and neither `every` (the gates advance the steps) nor `shadow` (a gated rollout serves \
         the candidate's share of keys and compares it with the live version)"
    )]
    GatesNeedSteps,
    /// A hold or promotion without gates.
    #[error("`hold` and `promote` belong to a gated rollout: give `gates` too")]
    HoldWithoutGates,
    /// A rate outside [0, 1].
    #[error("policy.{field} = {rate} must be between 0 and 1")]
    Rate {
        /// The field.
        field: &'static str,
        /// The rate given.
        rate: f64,
    },
}

fn duration_ms(value: &serde_json::Value, field: &'static str) -> Result<u64, PlanError> {
    let ms = match value {
        serde_json::Value::Number(n) => n.as_u64().ok_or(PlanError::NotWholeMillis(field))?,
        serde_json::Value::String(s) => crate::time::parse_duration(s)
            .map(|ms| ms as u64)
            .map_err(|source| PlanError::Duration { field, source })?,
        _ => return Err(PlanError::NotADuration(field)),
    };
    if ms == 0 || ms > crate::time::MAX_TIMESTAMP as u64 {
        return Err(PlanError::DurationRange(field));
    }
    Ok(ms)
}

/// The analysis a request asks for, if it names gates.
fn analysis(request: &RolloutRequest) -> Result<Option<Analysis>, PlanError> {
    let Some(gates) = &request.gates else {
        if request.hold.is_some() || request.promote {
            return Err(PlanError::HoldWithoutGates);
        }
        return Ok(None);
    };
    gates.check()?;
    let gated = !request.steps.is_empty() && request.every.is_none() && !request.shadow;
    let Some(hold) = request.hold.as_ref().filter(|_| gated) else {
        return Err(PlanError::GatesNeedSteps);
    };
    Ok(Some(Analysis {
        gates: gates.clone(),
        hold_ms: duration_ms(hold, "hold")?,
        promote: request.promote,
        step: 0,
        timeline: Vec::new(),
    }))
}

fn rate(value: Option<f64>, default: f64, field: &'static str) -> Result<f64, PlanError> {
    match value {
        None => Ok(default),
        Some(rate) if (0.0..=1.0).contains(&rate) => Ok(rate),
        Some(rate) => Err(PlanError::Rate { field, rate }),
    }
}

impl RolloutPlan {
    /// Checks a request.
    pub fn from_request(request: RolloutRequest) -> Result<RolloutPlan, PlanError> {
        crate::names::check("operator version", &request.version)?;
        if let Some(operator) = &request.operator {
            crate::names::check("operator name", operator)?;
        }
        if request
            .steps
            .iter()
            .chain(request.percent.iter())
            .any(|p| *p > 100)
        {
            return Err(PlanError::Percent);
        }
        if request.steps.len() > MAX_STEPS {
            return Err(PlanError::TooManySteps);
        }
        if !request.steps.is_empty() && request.every.is_none() && request.gates.is_none() {
            return Err(PlanError::StepsWithoutEvery);
        }
        if request.steps.windows(2).any(|w| w[0] > w[1]) {
            return Err(PlanError::StepsDecrease);
        }
        let every_ms = request
            .every
            .as_ref()
            .map(|v| duration_ms(v, "every"))
            .transpose()?;
        let analysis = analysis(&request)?;
        let mut policy = Policy::default();
        if let Some(p) = request.policy {
            policy.max_trap_rate = rate(p.max_trap_rate, policy.max_trap_rate, "max_trap_rate")?;
            policy.max_error_rate =
                rate(p.max_error_rate, policy.max_error_rate, "max_error_rate")?;
            policy.min_calls = p.min_calls.unwrap_or(policy.min_calls);
            if let Some(window) = &p.window {
                policy.window_ms = duration_ms(window, "policy.window")?;
            }
        }
        Ok(RolloutPlan {
            operator: request.operator,
            version: request.version,
            percent: request
                .percent
                .or(request.steps.first().copied())
                .unwrap_or(0),
            shadow: request.shadow,
            steps: request.steps,
            every_ms,
            started_ms: crate::time::wall_clock_ms(),
            policy,
            analysis,
        })
    }

    /// The key of the candidate's counters (an enricher's are kept as `name@version`).
    pub fn counter_key(&self) -> String {
        match &self.operator {
            Some(operator) => crate::rollout::counter_key(operator, &self.version),
            None => self.version.clone(),
        }
    }

    /// The share now: the step a gated rollout is at, or following the schedule if there is
    /// one.
    pub fn percent_now(&self) -> u8 {
        if let Some(analysis) = &self.analysis
            && let Some(last) = self.steps.len().checked_sub(1)
        {
            return self.steps[analysis.step.min(last)];
        }
        match (self.steps.is_empty(), self.every_ms) {
            (false, Some(every)) => {
                let elapsed = crate::time::wall_clock_ms().saturating_sub(self.started_ms);
                let step = (elapsed / every.max(1)) as usize;
                self.steps[step.min(self.steps.len() - 1)]
            }
            _ => self.percent,
        }
    }
}
