//! The spec as written ([`RawSpec`], one field per section, each in its section's raw form) and
//! its check, which hands each section to its module's check in turn and gathers the results
//! into a [`PipelineSpec`].
//!
//! Depends on every section, and on `names` (the pipeline's name).

use std::path::Path;

use serde::Deserialize;

use super::limits::{self, RawSandbox};
use super::operators::{self, RawJoin, RawOperator, RawStage};
use super::placement::{self, RawWorkers};
use super::quarantine::{self, RawQuarantine};
use super::sinks::{self, RawSinks};
use super::source::{self, RawSource, SourceSpec};
use super::state::{self, RawState};
use super::values::RawDuration;
use super::watermark::{self, RawEvent, RawWatermark};
use super::window::{self, RawEmit, RawWindow};
use super::{PipelineSpec, Result};

/// A pipeline spec as written, in TOML or JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpec {
    pub(super) name: String,
    pub(super) source: RawSource,
    pub(super) event: RawEvent,
    #[serde(default)]
    pub(super) watermark: RawWatermark,
    pub(super) window: Option<RawWindow>,
    #[serde(default)]
    pub(super) operators: Vec<RawOperator>,
    #[serde(default)]
    pub(super) stages: Vec<RawStage>,
    pub(super) join: Option<RawJoin>,
    #[serde(default)]
    pub(super) state: RawState,
    #[serde(default)]
    pub(super) sinks: RawSinks,
    pub(super) shards: Option<usize>,
    pub(super) batch_size: Option<usize>,
    pub(super) checkpoint_interval: Option<RawDuration>,
    #[serde(default)]
    pub(super) sandbox: RawSandbox,
    #[serde(default)]
    pub(super) emit: RawEmit,
    pub(super) workers: Option<RawWorkers>,
    pub(super) quarantine: Option<RawQuarantine>,
}

impl RawSpec {
    /// Checks everything, one section after the other (the order decides which error a spec
    /// with several gets); relative paths are resolved against `base`, sink files against
    /// `sink_base`.
    pub(super) fn check(self, base: &Path, sink_base: &Path) -> Result<PipelineSpec> {
        crate::names::check("pipeline name", &self.name)?;
        // A join keys each side by its own field: the event key is not used.
        let key = match self.join {
            Some(_) => None,
            None => self.event.key.as_deref(),
        };
        let input = source::check(self.source, base, key, &self.event.timestamp)?;
        let watermark =
            watermark::check(self.event, self.watermark, self.join.is_some(), &input.spec)?;
        // Early results are the aggregate's: with stages (or a global aggregate, whose combine
        // is a stage) the output is a later stage's.
        let staged = !self.stages.is_empty() || operators::combines_partials(&self.operators);
        let http = matches!(input.spec, SourceSpec::Http(_));
        let window::Windows {
            window,
            allowed_lateness,
            emit,
        } = window::check(self.window, &self.emit, staged, http)?;
        let dataflow = operators::check(
            self.operators,
            self.stages,
            self.join,
            window.as_ref(),
            base,
        )?;
        let state = state::check(&self.state, &self.name, base)?;
        let sinks = sinks::check(self.sinks, sink_base)?;
        let shards = limits::check_shards(self.shards)?;
        let checkpoint_interval =
            limits::check_checkpoint_interval(self.checkpoint_interval.as_ref())?;
        let (memory_budget, state_quota) = state::check_memory(&self.state)?;
        let sandbox = limits::check_sandbox(&self.sandbox)?;
        let batch_size = limits::check_batch_size(self.batch_size)?;
        let placement = placement::check(self.workers, &input.spec)?;
        let keyed_aggregate = dataflow.aggregate.is_some()
            && dataflow.stages.is_empty()
            && dataflow.join.is_none()
            && !dataflow.global
            && !dataflow.pre_aggregate;
        let sessions = matches!(window, Some(super::WindowSpec::Session { .. }));
        let quarantine = quarantine::check(self.quarantine, keyed_aggregate && !sessions, http)?;
        Ok(PipelineSpec {
            name: self.name,
            source: input.spec,
            key_field: watermark.key_field,
            timestamp_field: watermark.timestamp_field,
            watermark_bound: watermark.bound,
            max_ahead: watermark.max_ahead,
            advance_when_idle: watermark.advance_when_idle,
            partition_field: watermark.partition_field,
            idle_timeout: watermark.idle_timeout,
            window,
            allowed_lateness,
            enrichers: dataflow.enrichers,
            aggregate: dataflow.aggregate,
            stages: dataflow.stages,
            join: dataflow.join,
            global: dataflow.global,
            pre_aggregate: dataflow.pre_aggregate,
            state,
            sinks,
            shards,
            batch_size,
            checkpoint_interval,
            memory_budget,
            state_quota,
            max_behind: input.limits.max_behind,
            segment_size: input.limits.segment_size,
            max_rate: input.limits.max_rate,
            emit,
            sandbox,
            placement,
            quarantine,
        })
    }
}
