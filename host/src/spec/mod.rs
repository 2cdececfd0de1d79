//! The pipeline spec: what a user writes in `pipeline.toml` (or sends as JSON), parsed and
//! checked into a [`PipelineSpec`] with durations in milliseconds and paths resolved against the
//! spec's directory. Every mistake is reported with the field it concerns and what to write.
//!
//! One private module per section of the spec, each owning the section's types, its raw
//! (serde) form, defaults, limits and checks:
//!
//! - `source`: `[source]` ([`SourceSpec`]: files, stdin, the generator, Nexmark, HTTP ingest
//!   and its limits, NATS);
//! - `watermark`: `[event]` (key and timestamp fields) and `[watermark]`;
//! - `window`: `[window]` ([`WindowSpec`], allowed lateness) and `[emit]` ([`EmitSpec`]);
//! - `operators`: `[[operators]]`, `[[stages]]` and `[join]`;
//! - `state`: `[state]` ([`StateSpec`], memory budget, [`StateQuotaSpec`]);
//! - `sinks`: `[sinks]` ([`SinksSpec`]);
//! - `limits`: `[sandbox]` ([`SandboxSpec`]), shards, batch size, checkpoint interval;
//! - `placement`: `[workers]` ([`Placement`]: in one process, or on the cluster's workers);
//! - `quarantine`: `[quarantine]` ([`QuarantineSpec`]: parking keys whose events trap);
//! - `served`: the rules for a spec sent to `weir serve` ([`Served`]);
//! - `values`: the parsers of durations and sizes every section shares;
//! - `raw`: the spec as written, whose check calls each section's in turn.
//!
//! This file holds [`SpecError`], [`PipelineSpec`] and how a spec is loaded, and re-exports
//! every public item: the rest of Weir names them `crate::spec::X`, never a section. Each
//! section depends on `values` and at most one other (`watermark` and `sinks` on `source`,
//! `operators` on `window`); only `raw` sees every section (`served` judges the raw forms of
//! `source`, `operators`, `state` and `sinks`).
//!
//! Depends on `time` and `names` only (the fuzz target compiles it with just those), so any
//! module may depend on it.

use std::path::{Path, PathBuf};

use crate::time::Millis;

mod limits;
mod operators;
mod placement;
mod quarantine;
mod raw;
mod served;
mod sinks;
mod source;
mod state;
mod values;
mod watermark;
mod window;

pub use limits::{
    DEFAULT_BATCH_SIZE, DEFAULT_CHECKPOINT_INTERVAL, MAX_BATCH_SIZE, MAX_CALL_TIMEOUT,
    MAX_SANDBOX_MEMORY, MAX_SHARDS, SandboxSpec,
};
pub use operators::{
    GLOBAL_KEY, IntervalBounds, JoinSide, JoinSpec, OperatorCode, OperatorSpec, ReferenceSpec,
    SIDE_FIELD, StageSpec,
};
pub use placement::{MAX_SLICES, Placement};
pub use quarantine::QuarantineSpec;
pub use served::{MAX_SERVED_SHARDS, Served};
pub use sinks::{KafkaSinkSpec, NatsSinkSpec, Sink, SinksSpec};
pub use source::{
    DEFAULT_MAX_BEHIND, DEFAULT_SEGMENT_SIZE, GeneratorSpec, KafkaSourceSpec, MAX_NEXMARK_RATE,
    MAX_PARTITIONS, NatsPartitions, NatsSourceSpec, NexmarkKind, NexmarkSpec, PARTITION_TOKEN,
    SourceSpec,
};
pub use state::{DEFAULT_MEMORY_BUDGET, MAX_MEMORY_BUDGET, StateQuotaSpec, StateSpec};
pub use values::{SizeError, parse_size};
pub use watermark::DEFAULT_MAX_AHEAD;
pub use window::{EmitSpec, MAX_WINDOWS_PER_EVENT, WindowSpec};

use raw::RawSpec;
use source::RawSource;

/// Errors in a pipeline spec.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// The spec file could not be read.
    #[error("cannot read pipeline spec {path}: {source}")]
    Read {
        /// The spec's path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The spec is not valid TOML or JSON, or has unknown or missing fields.
    #[error("pipeline spec {path} is not valid: {message}")]
    Syntax {
        /// The spec's path.
        path: PathBuf,
        /// The parser's message, which names the field.
        message: String,
    },
    /// The spec parses but a value is not acceptable.
    #[error("pipeline spec: {0}")]
    Invalid(String),
    /// A name in the spec (the pipeline's, the source stream's) or a sink's path is not
    /// acceptable.
    #[error("pipeline spec: {0}")]
    Name(#[from] crate::names::NameError),
}

/// `Result` for spec loading.
pub type Result<T, E = SpecError> = std::result::Result<T, E>;

/// A checked pipeline spec.
#[derive(Debug, Clone)]
pub struct PipelineSpec {
    /// The pipeline's name (used in output ids and the data directory).
    pub name: String,
    /// Where events come from.
    pub source: SourceSpec,
    /// The field holding each event's key (empty with a join: it keys each side by its own
    /// field).
    pub key_field: String,
    /// The field holding each event's timestamp.
    pub timestamp_field: String,
    /// The watermark's bound on out-of-orderness.
    pub watermark_bound: Millis,
    /// How far an event may be ahead of the wall clock at which it was accepted (sources that
    /// record it: HTTP ingest); beyond it the event is a dead letter, not a watermark jump.
    pub max_ahead: Millis,
    /// HTTP sources: once no event has been accepted for this long, the watermark moves with
    /// the wall clock (`[watermark] advance_when_idle`), so windows close while the input
    /// pauses.
    pub advance_when_idle: Option<Millis>,
    /// The field naming each event's watermark partition (`[watermark] partition_field`); HTTP
    /// ingest also takes a partition from the `Weir-Partition` header. The watermark is the
    /// minimum over active partitions.
    pub partition_field: Option<String>,
    /// HTTP sources: a partition without events for this long (by the ingest clock) stops
    /// holding the watermark back (`[watermark] idle_timeout`).
    pub idle_timeout: Option<Millis>,
    /// The windows, when the pipeline aggregates.
    pub window: Option<WindowSpec>,
    /// How long after a window's end late events still update it.
    pub allowed_lateness: Millis,
    /// Enrichment operators, applied in order.
    pub enrichers: Vec<OperatorSpec>,
    /// The windowed aggregate, if any.
    pub aggregate: Option<OperatorSpec>,
    /// Further stages, each aggregating the window results of the one before.
    pub stages: Vec<StageSpec>,
    /// A join of two kinds of event (window or interval): each side's events keyed by its own
    /// field.
    pub join: Option<JoinSpec>,
    /// The aggregate is global (one result per window over every key), pre-aggregated: each
    /// shard folds its events into partial states per bucket of keys, and the partials are
    /// merged with the operator's `merge` at window end.
    pub global: bool,
    /// The aggregate pre-aggregates each key's events in buckets spread over the shards, and
    /// a combine merges each key's partials (`pre_aggregate = true`: for a few hot keys).
    pub pre_aggregate: bool,
    /// Where state lives.
    pub state: StateSpec,
    /// Where output goes.
    pub sinks: SinksSpec,
    /// Number of shards; `None` means one per core.
    pub shards: Option<usize>,
    /// Events per batch handed from the source to the shards.
    pub batch_size: usize,
    /// Processing time between checkpoints; `None` disables them. Only the redb backend
    /// checkpoints.
    pub checkpoint_interval: Option<Millis>,
    /// Roughly how much clean state a shard keeps in memory before evicting (redb backend).
    pub memory_budget: usize,
    /// The most state the operators may keep (`[state] max_keys`, `max_bytes`): scopes, and
    /// bytes of their encoded values. Writes past it are refused (dead letters).
    pub state_quota: StateQuotaSpec,
    /// An HTTP source's bound: how many bytes of accepted events the pipeline may have still to
    /// read before ingest answers 429 with `Retry-After` (`[source] max_behind`).
    pub max_behind: u64,
    /// An HTTP source's ingest log segment size: segments wholly before the last checkpoint
    /// are deleted (`[source] segment_size`).
    pub segment_size: u64,
    /// An HTTP source's ingest rate limit, in events per second (a second's worth may come at
    /// once); beyond it, ingest answers 429 (`[source] max_events_per_second`).
    pub max_rate: Option<u64>,
    /// What operators may use and how much.
    pub sandbox: SandboxSpec,
    /// How window results are written (`[emit]`).
    pub emit: EmitSpec,
    /// Where the pipeline runs (`[workers]`).
    pub placement: Placement,
    /// Whether keys whose events trap are parked rather than dead-lettered (`[quarantine]`).
    pub quarantine: Option<QuarantineSpec>,
}

impl PipelineSpec {
    /// Every operator: the enrichers, the aggregate, then each stage's.
    pub fn operators(&self) -> impl Iterator<Item = &OperatorSpec> {
        let stages = self.stages.iter().map(|stage| &stage.aggregate);
        self.enrichers.iter().chain(&self.aggregate).chain(stages)
    }

    /// [`Self::operators`], to change.
    pub fn operators_mut(&mut self) -> impl Iterator<Item = &mut OperatorSpec> {
        let stages = self.stages.iter_mut().map(|stage| &mut stage.aggregate);
        (self.enrichers.iter_mut())
            .chain(&mut self.aggregate)
            .chain(stages)
    }

    /// Reads a spec file: TOML, or JSON when the name ends in `.json`.
    pub fn load(path: &Path) -> Result<PipelineSpec> {
        let text = std::fs::read_to_string(path).map_err(|source| SpecError::Read {
            path: path.to_owned(),
            source,
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let json = path.extension().is_some_and(|e| e == "json");
        Self::parse(&text, json, base).map_err(|e| match e {
            SpecError::Syntax { message, .. } => SpecError::Syntax {
                path: path.to_owned(),
                message,
            },
            other => other,
        })
    }

    /// Parses spec text; relative paths are resolved against `base`.
    pub fn parse(text: &str, json: bool, base: &Path) -> Result<PipelineSpec> {
        let raw: RawSpec = if json {
            serde_json::from_str(text).map_err(|e| SpecError::Syntax {
                path: PathBuf::new(),
                message: e.to_string(),
            })?
        } else {
            toml::from_str(text).map_err(|e| SpecError::Syntax {
                path: PathBuf::new(),
                message: e.to_string(),
            })?
        };
        raw.check(base, base)
    }

    /// Parses a JSON spec sent to `weir serve` for a pipeline living in `dir`. Such a spec names
    /// only what the server provides: events over HTTP (the ingest log `dir/ingest.jsonl`),
    /// operators from the registry (by name and version) or built in, state in `dir/data`, and
    /// sinks inside `dir/out`. File paths, standard streams and state
    /// directories are refused with the reason; `weir run`, a local command, keeps them.
    ///
    /// `Served::New` is a spec being created: its sinks are relative to `dir/out`. A server
    /// stores it with its sinks relative to `dir` (`"out/results.jsonl"`), as older Weirs did,
    /// and reads it back as `Served::Stored`: sinks relative to `dir`, and what newer rules
    /// refuse (the memory backend, more shards) still accepted, so an upgrade never turns a
    /// pipeline into a damaged one.
    pub fn parse_served(text: &str, dir: &Path, served: Served) -> Result<PipelineSpec> {
        Self::parse_served_with(text, dir, served, &[])
    }

    /// [`parse_served`](Self::parse_served) for a server that connects to the NATS servers at
    /// `nats` (the `--nats` it was started with): a spec may read a stream of, and publish to,
    /// those and no other.
    pub fn parse_served_with(
        text: &str,
        dir: &Path,
        served: Served,
        nats: &[String],
    ) -> Result<PipelineSpec> {
        let raw: RawSpec = serde_json::from_str(text).map_err(|e| SpecError::Syntax {
            path: PathBuf::new(),
            message: e.to_string(),
        })?;
        let out = dir.join("out");
        let sink_base = match served {
            Served::New => out.clone(),
            Served::Stored => dir.to_owned(),
        };
        served::check(&raw, &sink_base, served, nats)?;
        let http = matches!(raw.source, RawSource::Http { .. });
        let given = [
            raw.sinks.results.is_some(),
            raw.sinks.late.is_some(),
            raw.sinks.dead_letters.is_some(),
        ];
        let mut spec = raw.check(dir, &sink_base)?;
        if http {
            spec.source = SourceSpec::Http(Some(dir.join("ingest.jsonl")));
        }
        if spec.state != StateSpec::Memory {
            spec.state = StateSpec::Redb(dir.join("data"));
        }
        let sinks = &mut spec.sinks;
        for ((given, sink), default) in given
            .into_iter()
            .zip([&mut sinks.results, &mut sinks.late, &mut sinks.dead_letters])
            .zip(["results.jsonl", "late.jsonl", "dead-letters.jsonl"])
        {
            if !given {
                *sink = Sink::File(out.join(default));
            }
        }
        spec.sinks.check_distinct()?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests;
