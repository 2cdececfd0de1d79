//! [`Shard`]: the single writer for the keys of its key groups. It owns those keys' state and
//! its own operator instances, runs the enrichment chain per key, then the window engine.

use super::enrichment::Enrichment;
use crate::operator::AggregateOperator;
use crate::state::{Change, StateBackend, TableRow};
use crate::time::{MINUS_INFINITY, Millis, PLUS_INFINITY};
use crate::window::{Context, EngineError, EngineOutput, Staged, WindowEngine};

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
    enrichers: Vec<Enrichment>,
    aggregate: Option<(WindowEngine, Box<dyn AggregateOperator>)>,
    state: Box<dyn StateBackend>,
    /// The watermark after the last batch.
    watermark: Millis,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("enrichers", &self.enrichers)
            .field("watermark", &self.watermark)
            .finish()
    }
}

impl Shard {
    /// A shard with its operator instances and state.
    pub fn new(
        enrichers: Vec<Enrichment>,
        aggregate: Option<(WindowEngine, Box<dyn AggregateOperator>)>,
        state: Box<dyn StateBackend>,
    ) -> Self {
        Shard {
            enrichers,
            aggregate,
            state,
            watermark: MINUS_INFINITY,
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

    /// Restores a checkpoint: the watermark, the open windows (`windows`) and the enrichment
    /// TTLs (`state`: this shard's rows of the state table; only read when a TTL is set).
    pub fn restore(
        &mut self,
        watermark: Millis,
        windows: &[TableRow],
        state: &[TableRow],
    ) -> Result<(), String> {
        self.watermark = watermark;
        for enrichment in &mut self.enrichers {
            enrichment.restore(state)?;
        }
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
        let start = self.watermark;
        let watermark_at = |seq: u64| -> Millis {
            let before = advances.partition_point(|(at, _)| *at < seq);
            if before == 0 {
                start
            } else {
                advances[before - 1].1
            }
        };
        for enrichment in &mut self.enrichers {
            events = enrichment.run(events, self.state.as_mut(), &watermark_at, &mut out.engine)?;
        }
        if let Some(&(_, last)) = advances.last() {
            self.watermark = self.watermark.max(last);
        }
        if end_of_input {
            self.watermark = PLUS_INFINITY;
        }
        for enrichment in &mut self.enrichers {
            enrichment.sweep(self.state.as_mut(), self.watermark)?;
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
}
