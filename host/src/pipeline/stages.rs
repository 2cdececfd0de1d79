//! [`Stages`]: the stages after a pipeline's aggregate, run by the collector on each batch's
//! window results once they are in canonical order.
//!
//! A stage's events are the previous stage's results: the result's value fields, with `key`,
//! `window_start` and `window_end` (unless the value has fields of those names), at the time
//! `window_end - 1` (the last instant of the window, as Flink stamps window results, so a
//! downstream window of the same size and alignment holds exactly the upstream window's
//! results). They are keyed by the stage's key field, or all by [`GLOBAL_KEY`].
//!
//! Watermarks flow through unchanged: a result fired by the advance at arrival index `t` enters
//! the next stage as an event with index `t`, so it is processed before that stage sees the same
//! advance, and is never late there. Updates and retractions flow through as well: each event
//! carries its upstream result as its [`Origin`], an update replaces that result's contribution
//! to the stage's windows and a retraction withdraws it (see the window engine). Stages keep
//! their windows for the pipeline's allowed lateness, as long as an upstream result can change.
//! Stages run on one thread (the collector's) and see every key; their state is checkpointed
//! with the shards' in the same transaction, under operator indices after the chain's.
//!
//! Depends on `event`, `field_name`, `operator`, `rollout`, `spec`, `state`, `time`, `value`
//! and `window`, and of `pipeline` on `router` (its unbucketing of keys) and `shard` (its
//! snapshot).

use compact_str::CompactString;

use super::ShardSnapshot;
use crate::event::{DeadCause, DeadLetter, Event, Origin, Staged};
use crate::field_name::{FieldName, NameCache};
use crate::operator::{AggregateOperator, Limits, LoadError, Projection, VersionCode};
use crate::rollout::{CounterBook, Routing, ShadowLog, VersionedAggregate};
use crate::spec::{GLOBAL_KEY, StageSpec};
use crate::state::{StateBackend, TableRow};
use crate::time::Millis;
use crate::value::{Fields, Value};
use crate::window::{
    Context, Emission, EmissionKind, EngineError, EngineOutput, Timeline, WindowEngine,
};

/// One stage: its key field, windows and operator.
struct Stage {
    key_field: Option<String>,
    /// The combine of a pre-aggregated aggregate: keyed by the key each partial's bucket
    /// stands for.
    unbucket: bool,
    label: String,
    engine: WindowEngine,
    operator: StageOperator,
}

/// A stage's operator.
pub enum StageOperator {
    /// The combine of a global or pre-aggregated aggregate (its versions follow the aggregate's
    /// live version, not a rollout of their own).
    Fixed(Box<dyn AggregateOperator>),
    /// A stage's own operator, whose versions a rollout may split keys between; candidates get
    /// these limits and fields.
    Versioned(Box<(VersionedAggregate, Limits, Projection)>),
}

impl StageOperator {
    fn as_mut(&mut self) -> &mut dyn AggregateOperator {
        match self {
            StageOperator::Fixed(operator) => operator.as_mut(),
            StageOperator::Versioned(versioned) => &mut versioned.0,
        }
    }
}

/// The stages of a pipeline, in order, and their state.
pub struct Stages {
    stages: Vec<Stage>,
    state: Box<dyn StateBackend>,
    names: Names,
}

impl std::fmt::Debug for Stages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stages")
            .field("stages", &self.stages.len())
            .finish()
    }
}

/// Field names every stage event carries.
struct Names {
    key: FieldName,
    window_start: FieldName,
    window_end: FieldName,
    /// The results' own field names, made once each.
    cache: NameCache,
}

impl Default for Names {
    fn default() -> Names {
        Names {
            key: "key".into(),
            window_start: "window_start".into(),
            window_end: "window_end".into(),
            cache: NameCache::default(),
        }
    }
}

impl Stages {
    /// Stages for `specs` with their operators, whose state indices start at `first_index`,
    /// in a pipeline with `lateness`. With `unbucket_first`, the first stage is the combine of
    /// a pre-aggregated aggregate.
    pub fn new(
        specs: &[StageSpec],
        operators: Vec<StageOperator>,
        first_index: u16,
        lateness: Millis,
        unbucket_first: bool,
        state: Box<dyn StateBackend>,
    ) -> Stages {
        let stages = specs
            .iter()
            .zip(operators)
            .enumerate()
            .map(|(i, (spec, operator))| {
                let label = format!("{}@{}", spec.aggregate.name, spec.aggregate.version);
                Stage {
                    key_field: spec.key_field.clone(),
                    unbucket: unbucket_first && i == 0,
                    engine: WindowEngine::new(
                        spec.window,
                        lateness,
                        first_index + i as u16,
                        label.clone(),
                    )
                    .keeping_inputs(),
                    label,
                    operator,
                }
            })
            .collect();
        Stages {
            stages,
            state,
            names: Names::default(),
        }
    }

    /// Runs a batch's results (in canonical order) through every stage with the batch's
    /// watermark `advances`. Returns the last stage's results, and every stage's late events,
    /// dead letters and traps.
    pub fn process(
        &mut self,
        mut emissions: Vec<Emission>,
        advances: &[(u64, Millis)],
        end_of_input: bool,
    ) -> Result<EngineOutput, EngineError> {
        let names = &mut self.names;
        let mut all = EngineOutput::default();
        let timeline = Timeline {
            advances,
            early: &[],
            redrives: &[],
            end_of_input,
        };
        for stage in &mut self.stages {
            let mut events = Vec::with_capacity(emissions.len());
            for emission in &emissions {
                let keying = match (stage.unbucket, stage.key_field.as_deref()) {
                    (true, _) => Keying::Unbucket,
                    (false, Some(field)) => Keying::Field(field),
                    (false, None) => Keying::Global,
                };
                // An update withdraws the result it replaces (which may have had another key)
                // before it enters; a withdrawal of a result that could not enter is dropped.
                let withdrawn = match emission.kind {
                    EmissionKind::Retract => Some(&emission.value),
                    EmissionKind::Update | EmissionKind::Early => emission.replaces.as_ref(),
                    EmissionKind::Result => None,
                };
                if let Some(value) = withdrawn
                    && let Ok(event) = as_event(emission, value, true, &keying, names)
                {
                    events.push(event);
                }
                if emission.kind == EmissionKind::Retract {
                    continue;
                }
                match as_event(emission, &emission.value, false, &keying, names) {
                    Ok(event) => events.push(event),
                    Err(reason) => all.dead_letters.push(DeadLetter {
                        line: 0,
                        raw: emission_json(emission).to_string(),
                        reason: format!("{}: {reason}", stage.label),
                        cause: DeadCause::Stage,
                    }),
                }
            }
            let mut out = EngineOutput::default();
            let mut cx = Context {
                operator: stage.operator.as_mut(),
                state: self.state.as_mut(),
            };
            stage
                .engine
                .process(&events, &timeline, &mut cx, &mut out)?;
            out.emissions
                .sort_by(|a, b| a.order_key().cmp(&b.order_key()));
            emissions = out.emissions;
            all.late.extend(out.late);
            all.dead_letters.extend(out.dead_letters);
            all.traps += out.traps;
        }
        all.emissions = emissions;
        Ok(all)
    }

    /// Routes the keys of the stage whose operator the routing names between its versions from
    /// now on (at a barrier, as the shards do); `candidate` is the code of a version the stage
    /// does not run yet.
    pub fn route(
        &mut self,
        routing: &Routing,
        candidate: Option<&VersionCode>,
        counters: &CounterBook,
        shadow_log: Option<ShadowLog>,
    ) -> Result<(), LoadError> {
        let Some(name) = &routing.operator else {
            return Ok(());
        };
        for stage in &mut self.stages {
            let StageOperator::Versioned(versioned) = &mut stage.operator else {
                continue;
            };
            let (versioned, limits, projection) = &mut **versioned;
            if versioned.routing().operator.as_ref() != Some(name) {
                continue;
            }
            let instance = match candidate {
                Some(VersionCode::Aggregate(code)) => {
                    Some(code.instantiate(limits.clone(), projection.clone())?)
                }
                _ => None,
            };
            versioned.route(routing.clone(), instance, counters, shadow_log.clone());
        }
        Ok(())
    }

    /// Everything the stages changed since the last checkpoint.
    pub fn checkpoint(&mut self) -> Result<ShardSnapshot, EngineError> {
        let state = self.state.changes()?;
        let windows = self
            .stages
            .iter_mut()
            .flat_map(|stage| stage.engine.changes())
            .collect();
        Ok(ShardSnapshot {
            state,
            windows,
            hot: self.state.hot_len(),
            // The stages run on the collector's thread, which commits right after this.
            quota_written: crate::operator::quota::StateQuota::handed_over(),
        })
    }

    /// The last checkpoint is durable.
    pub fn committed(&mut self) {
        self.state.committed();
    }

    /// The pipeline never checkpoints (memory state): the stages' engines keep no change log.
    pub fn without_checkpoints(&mut self) {
        for stage in &mut self.stages {
            stage.engine.without_checkpoints();
        }
    }

    /// Restores the stages' open windows from a checkpoint's window rows (of every operator:
    /// each stage takes its own) at `watermark`.
    pub fn restore(
        &mut self,
        watermark: Millis,
        windows: &[TableRow],
    ) -> Result<(), crate::state::RowError> {
        for stage in &mut self.stages {
            let index = stage.engine.operator_index();
            let own: Vec<TableRow> = windows
                .iter()
                .filter(|row| {
                    crate::state::StateKey::decode(&row.key).is_some_and(|k| k.operator == index)
                })
                .cloned()
                .collect();
            stage.engine.restore(watermark, &own)?;
        }
        Ok(())
    }
}

/// How a stage keys its events.
enum Keying<'a> {
    /// By a field of the previous stage's results.
    Field(&'a str),
    /// All under [`GLOBAL_KEY`].
    Global,
    /// By the key a pre-aggregated partial's bucket stands for.
    Unbucket,
}

/// Why a previous stage's result cannot be this stage's event: it has no key to be keyed by. The
/// result becomes a dead letter with this reason.
#[derive(Debug, thiserror::Error)]
enum Unkeyed {
    /// The key field is empty text.
    #[error("the result's field `{field}` to key by is empty")]
    Empty {
        /// The stage's key field.
        field: String,
    },
    /// The result has no such field, or not of a kind that keys.
    #[error("the result has no text or integer field `{field}` to key by")]
    Missing {
        /// The stage's key field.
        field: String,
    },
}

/// A previous stage's result with output `value` as this stage's event (one that `withdraws`
/// the result's contribution, or places it), or why it cannot be one.
fn as_event(
    emission: &Emission,
    value: &Fields,
    withdraws: bool,
    keying: &Keying<'_>,
    names: &mut Names,
) -> Result<Staged, Unkeyed> {
    let mut fields: Vec<(FieldName, Value)> = value
        .iter()
        .map(|(name, value)| (names.cache.get(name), value.clone()))
        .collect();
    for (name, value) in [
        (&names.key, Value::Text((&*emission.key).into())),
        (&names.window_start, Value::Int(emission.window.start)),
        (&names.window_end, Value::Int(emission.window.end)),
    ] {
        if !fields.iter().any(|(field, _)| field == name) {
            fields.push((name.clone(), value));
        }
    }
    let key: CompactString = match keying {
        Keying::Global => GLOBAL_KEY.into(),
        Keying::Unbucket => super::router::unbucket(&emission.key).into(),
        Keying::Field(field) => match fields.iter().find(|(name, _)| &**name == *field) {
            Some((_, value)) if let Some(key) = value.as_key() => key,
            Some((_, Value::Text(_))) => {
                let field = (*field).to_owned();
                return Err(Unkeyed::Empty { field });
            }
            _ => {
                let field = (*field).to_owned();
                return Err(Unkeyed::Missing { field });
            }
        },
    };
    Ok(Staged {
        seq: emission.trigger,
        event: Event {
            line: 0,
            key,
            timestamp: emission.window.end.saturating_sub(1),
            fields,
        },
        origin: Some(Box::new(Origin {
            key: emission.key.clone(),
            window: emission.window,
            withdrawn: withdraws,
        })),
        made_by: None,
    })
}

fn emission_json(emission: &Emission) -> serde_json::Value {
    serde_json::json!({
        "key": &*emission.key,
        "window_start": emission.window.start,
        "window_end": emission.window.end,
        "value": crate::value::fields_to_json(&emission.value),
    })
}
