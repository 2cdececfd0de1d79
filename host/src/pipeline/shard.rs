//! [`Shard`]: the single writer for the keys of its key groups. It owns those keys' state and
//! its own operator instances, runs the enrichment chain per key, then the window engine.

use std::collections::HashMap;
use std::sync::Arc;

use crate::event::DeadLetter;
use crate::operator::{AggregateOperator, EnrichOperator, OperatorError, Scope};
use crate::state::{Change, Namespace, StateBackend, StateKey, TableRow, key_group};
use crate::time::{MAX_TIMESTAMP, Millis};
use crate::window::{Context, EngineError, EngineOutput, Staged, WindowEngine};

/// One enrichment operator instance and its label for dead letters.
pub struct ShardEnricher {
    /// `name@version`.
    pub label: String,
    /// The instance.
    pub operator: Box<dyn EnrichOperator>,
}

impl ShardEnricher {
    fn failed(&self, error: OperatorError, staged: &Staged, out: &mut EngineOutput) {
        if matches!(error, OperatorError::Trapped(_)) {
            out.traps += 1;
        }
        out.dead_letters.push(DeadLetter {
            line: staged.event.line,
            raw: staged.event.to_json().to_string(),
            reason: format!("{} {error}", self.label),
        });
    }
}

/// What a shard produced for one batch.
#[derive(Debug, Default)]
pub struct ShardOutput {
    /// Window results, late events and operator dead letters.
    pub engine: EngineOutput,
    /// Enriched events (pipelines without an aggregate).
    pub events: Vec<Staged>,
}

/// What a shard hands to a checkpoint.
#[derive(Debug, Default)]
pub struct ShardSnapshot {
    /// Changed state scopes.
    pub state: Vec<Change>,
    /// Changed window metadata.
    pub windows: Vec<Change>,
}

/// A shard.
pub struct Shard {
    enrichers: Vec<ShardEnricher>,
    aggregate: Option<(WindowEngine, Box<dyn AggregateOperator>)>,
    state: Box<dyn StateBackend>,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("enrichers", &self.enrichers.len())
            .finish()
    }
}

impl Shard {
    /// A shard with its operator instances and state.
    pub fn new(
        enrichers: Vec<ShardEnricher>,
        aggregate: Option<(WindowEngine, Box<dyn AggregateOperator>)>,
        state: Box<dyn StateBackend>,
    ) -> Self {
        Shard {
            enrichers,
            aggregate,
            state,
        }
    }

    /// Everything changed since the last checkpoint: state scopes and window metadata.
    pub fn checkpoint(&mut self) -> Result<ShardSnapshot, EngineError> {
        let state = self.state.changes()?;
        let windows = self
            .aggregate
            .as_mut()
            .map(|(engine, _)| engine.changes())
            .unwrap_or_default();
        Ok(ShardSnapshot { state, windows })
    }

    /// The last checkpoint is durable.
    pub fn committed(&mut self) {
        self.state.committed();
    }

    /// Restores the watermark and open windows of a checkpoint.
    pub fn restore(&mut self, watermark: Millis, windows: &[TableRow]) -> Result<(), String> {
        match &mut self.aggregate {
            Some((engine, _)) => engine.restore(watermark, windows),
            None => Ok(()),
        }
    }

    /// Processes this shard's events of one batch with all of the batch's watermark advances.
    pub fn process(
        &mut self,
        mut events: Vec<Staged>,
        advances: &[(u64, Millis)],
        end_of_input: bool,
    ) -> Result<ShardOutput, EngineError> {
        let mut out = ShardOutput::default();
        for index in 0..self.enrichers.len() {
            events = self.enrich(index, events, &mut out.engine)?;
        }
        match &mut self.aggregate {
            Some((engine, operator)) => {
                let mut cx = Context {
                    operator: operator.as_mut(),
                    state: self.state.as_mut(),
                };
                engine.process(&events, advances, end_of_input, &mut cx, &mut out.engine)?;
            }
            None => out.events = events,
        }
        Ok(out)
    }

    /// Runs enrichment operator `index` over the batch, one call per key, and returns its output
    /// in arrival order (each output keeps its origin's arrival index).
    fn enrich(
        &mut self,
        index: usize,
        events: Vec<Staged>,
        out: &mut EngineOutput,
    ) -> Result<Vec<Staged>, EngineError> {
        let mut groups: HashMap<Arc<str>, Vec<usize>> = HashMap::new();
        let mut order = Vec::new();
        for (i, staged) in events.iter().enumerate() {
            groups
                .entry(staged.event.key.clone())
                .or_insert_with(|| {
                    order.push(staged.event.key.clone());
                    Vec::new()
                })
                .push(i);
        }
        let enricher = &mut self.enrichers[index];
        let mut produced = Vec::with_capacity(events.len());
        for key in order {
            let members = &groups[&key];
            let state_key = StateKey {
                group: key_group(&key),
                operator: index as u16,
                namespace: Namespace::Global,
                key: key.clone(),
            };
            let mut scope = Scope {
                key: key.clone(),
                state: self.state.take(&state_key)?,
            };
            let batch: Vec<_> = members.iter().map(|&i| &events[i].event).collect();
            let mut outputs = Vec::new();
            match enricher.operator.process(&mut scope, &batch) {
                Ok(enriched) => {
                    outputs.extend(enriched.into_iter().map(|e| (members[e.origin], e)))
                }
                Err(OperatorError::Host(message)) => return Err(EngineError::Host(message)),
                // A failed call changed nothing. Retry its events one by one, so that only the
                // events the operator cannot take become dead letters.
                Err(error) if members.len() == 1 => {
                    enricher.failed(error, &events[members[0]], out)
                }
                Err(_) => {
                    for &member in members {
                        match enricher
                            .operator
                            .process(&mut scope, &[&events[member].event])
                        {
                            Ok(enriched) => {
                                outputs.extend(enriched.into_iter().map(|e| (member, e)))
                            }
                            Err(OperatorError::Host(message)) => {
                                return Err(EngineError::Host(message));
                            }
                            Err(error) => enricher.failed(error, &events[member], out),
                        }
                    }
                }
            }
            self.state.put(state_key, scope.state)?;
            for (origin, output) in outputs {
                let origin = &events[origin];
                if output.timestamp.abs() > MAX_TIMESTAMP {
                    out.dead_letters.push(DeadLetter {
                        line: origin.event.line,
                        raw: origin.event.to_json().to_string(),
                        reason: format!(
                            "{} produced an event with timestamp {} out of range",
                            enricher.label, output.timestamp
                        ),
                    });
                    continue;
                }
                let mut event = origin.event.clone();
                event.timestamp = output.timestamp;
                event.fields = output.fields;
                produced.push(Staged {
                    seq: origin.seq,
                    event,
                });
            }
        }
        // Back to arrival order; outputs of one origin keep the operator's order.
        produced.sort_by_key(|staged| staged.seq);
        Ok(produced)
    }
}
