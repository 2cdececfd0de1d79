//! Wiring a [`PipelineSpec`] into a running graph and running a bounded input to its end:
//!
//! ```text
//! source ─► decode ─► watermark ─► route by key group ─► shard 0..N-1 ─► collector ─► sinks
//!                                   (router)                             (checkpoints)
//! ```
//!
//! The router (the calling thread) numbers events in arrival order and records every watermark
//! advance; each batch goes to every shard with all of the batch's advances, so each shard fires
//! its windows exactly as a single shard would. The collector puts each batch's outputs into the
//! canonical order before writing, so the results are the same for any shard count and batch
//! size (dead letters of operator calls follow when their windows add their events: see
//! [`crate::window::WindowEngine::process_carrying`]).
//!
//! Checkpoints (redb backend): every `checkpoint_interval` the router sends a barrier after a
//! batch. Each shard hands over what changed since the last barrier and goes on with the next
//! batches; the collector, once every earlier batch is written, syncs the sinks and commits the
//! changes with the source position, watermark and sink lengths in one redb transaction, then
//! tells the shards, which only then may evict clean state (and take the next barrier: one
//! checkpoint is in flight at a time). A run on a data directory with a committed checkpoint
//! resumes from it.
//!
//! Depends on `checkpoint`, `cpu_time`, `emit`, `event`, `fsutil`, `operator`, `rollout`,
//! `source`, `spec`, `state`, `time` and `window`, and on its parts; its parts on `field_name`,
//! `hashing`, `value` and `watermark` as well.

mod build;
mod collector;
mod control;
mod deadlines;
mod enrichment;
mod interval_join;
mod join;
mod messages;
mod outcome;
mod router;
mod shard;
mod stage_slice;
mod stages;
mod telemetry;
pub mod upstream;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use tracing::{info, instrument};

pub use control::{
    CommitListener, LiveStats, PipelineControl, ResolveError, Resolver, ResultLine, SharedWatermark,
};
pub use enrichment::{Enrichment, REFERENCE_MAP};
pub use outcome::{Rejects, ShardError};
pub use shard::{CandidateFactory, Shard, ShardOutput, ShardSnapshot};
pub use stage_slice::run_stage_slice;

use crate::checkpoint::{
    CheckpointError, CheckpointStats, Committer, Manifest, fingerprint, recover,
};
use crate::emit::{OperatorLabel, SinkError, SinkWriter};
use crate::event::{DEFAULT_MAX_LINE_BYTES, Share};
use crate::operator::{LoadError, VersionCode};
use crate::rollout::Routing;
use crate::source::{Generator, Interleaved, LineReader, Nexmark, Source, SourceError};
use crate::spec::{PipelineSpec, SourceSpec, StateSpec};
use crate::state::{KEY_GROUPS, RedbStore, StateError};
use crate::time::Millis;
use crate::window::EngineError;
use messages::{Part, ShardMsg};

/// Why a pipeline could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// An operator could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A native operator name is unknown.
    #[error("unknown native {kind} operator {name:?}: the built-in {kind} operators are: {known}")]
    UnknownNative {
        /// The name asked for.
        name: String,
        /// The kind asked for.
        kind: String,
        /// The names there are.
        known: String,
    },
    /// The state store failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A sink failed.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// Reference data could not be read.
    #[error("reference data {path}: {source}")]
    ReferenceRead {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Reference data could not be loaded.
    #[error("reference data {path}: {message}")]
    Reference {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A stage after the aggregate failed.
    #[error("a stage after the aggregate failed: {error}")]
    Stage {
        /// The failure.
        error: EngineError,
    },
    /// A shard failed.
    #[error("shard {shard} failed: {error}")]
    Shard {
        /// Which shard.
        shard: usize,
        /// The failure.
        error: ShardError,
    },
    /// A checkpoint could not be recovered or committed.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The spec cannot run here.
    #[error("pipeline cannot run: {0}")]
    Config(String),
    /// A spec the host made itself (a benchmark's) is not valid.
    #[error("pipeline cannot run: {0}")]
    Spec(#[from] crate::spec::SpecError),
}

impl PipelineError {
    /// Whether the run failed because the disk (or quota) was full: worth starting again once
    /// there is room.
    pub fn is_disk_full(&self) -> bool {
        let state = |e: &StateError| matches!(e, StateError::DiskFull(_));
        match self {
            PipelineError::State(e) => state(e),
            PipelineError::Checkpoint(CheckpointError::State(e)) => state(e),
            PipelineError::Checkpoint(CheckpointError::Marker { source, .. }) => {
                crate::fsutil::is_disk_full(source)
            }
            PipelineError::Sink(e) => std::error::Error::source(e)
                .and_then(|e| e.downcast_ref::<std::io::Error>())
                .is_some_and(crate::fsutil::is_disk_full),
            PipelineError::Shard {
                error: ShardError::State(e),
                ..
            } => state(e),
            PipelineError::Stage {
                error: EngineError::State(e),
            } => state(e),
            _ => false,
        }
    }
}

/// `Result` for running pipelines.
pub type Result<T, E = PipelineError> = std::result::Result<T, E>;

/// How to run.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// Discard any checkpoint in the data directory and start from the beginning.
    pub fresh: bool,
    /// Process only the events of these key groups (a worker's slice of a pipeline shared by
    /// several processes); `None`: all. Every event is still read, numbered and observed by
    /// the watermark, so results are those of a run over all key groups, restricted to these.
    pub key_groups: Option<KeyGroups>,
    /// This run is slice `n` of a pipeline shared by workers whose stages (a global or
    /// pre-aggregated aggregate's combine among them) another slice runs: it runs none, and
    /// writes its aggregate's results to its results sink as upstream records for that slice
    /// (see [`upstream`]).
    pub upstream_of_stages: Option<usize>,
}

/// A contiguous range `[first, end)` of key groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyGroups {
    /// The first key group.
    pub first: u16,
    /// One past the last (at most [`KEY_GROUPS`]).
    pub end: u32,
}

impl KeyGroups {
    /// Whether `group` is in the range.
    pub fn contains(&self, group: u16) -> bool {
        group >= self.first && u32::from(group) < self.end
    }

    /// Slice `index` of `slices` equal contiguous ranges of all key groups.
    pub fn slice(index: usize, slices: usize) -> KeyGroups {
        let (first, end) = groups_of(index, slices);
        KeyGroups { first, end }
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Events decoded from the input by this run.
    pub events_in: u64,
    /// Records written to the results sink by this run.
    pub results_out: u64,
    /// Events too late for all their windows.
    pub late: u64,
    /// Dead letters (bad input, operator rejections and traps).
    pub dead_letters: u64,
    /// Operator calls that trapped.
    pub traps: u64,
    /// Shards used.
    pub shards: usize,
    /// The checkpoint this run resumed from.
    pub resumed_from: Option<u64>,
    /// The checkpoints this run committed.
    pub checkpoints: Vec<CheckpointStats>,
    /// Wall time.
    pub elapsed: Duration,
    /// CPU time of the router's thread while it read, decoded and routed the input, where the
    /// platform tells it ([`crate::cpu_time`]).
    pub router_cpu: Option<Duration>,
    /// CPU time of the shards' threads together (windows and operator calls), where the
    /// platform tells it.
    pub shards_cpu: Option<Duration>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        write!(
            f,
            "{} events in, {} results out, {} late, {} dead letters ({} shards, {:.2} s, {:.0} events/s",
            self.events_in,
            self.results_out,
            self.late,
            self.dead_letters,
            self.shards,
            secs,
            if secs > 0.0 {
                self.events_in as f64 / secs
            } else {
                0.0
            }
        )?;
        if let Some(id) = self.resumed_from {
            write!(f, ", resumed from checkpoint {id}")?;
        }
        if let Some(last) = self.checkpoints.last() {
            write!(
                f,
                ", {} checkpoints, last {}",
                self.checkpoints.len(),
                last.id
            )?;
        }
        if self.traps > 0 {
            write!(f, ", {} traps", self.traps)?;
        }
        f.write_str(")")
    }
}

/// The shard that owns a key group: key groups are split into contiguous ranges.
pub fn shard_of(group: u16, shards: usize) -> usize {
    usize::from(group) * shards / usize::from(KEY_GROUPS)
}

/// The key groups `[first, end)` of a shard.
fn groups_of(shard: usize, shards: usize) -> (u16, u32) {
    let first = (0..KEY_GROUPS)
        .find(|g| shard_of(*g, shards) == shard)
        .unwrap_or(KEY_GROUPS);
    let end = (first..KEY_GROUPS)
        .find(|g| shard_of(*g, shards) != shard)
        .map_or(u32::from(KEY_GROUPS), u32::from);
    (first, end)
}

/// Runs a pipeline over its bounded input to the end, resuming from the data directory's last
/// checkpoint if there is one.
#[instrument(skip_all, fields(pipeline = %spec.name))]
pub fn run(spec: &PipelineSpec) -> Result<Summary> {
    run_with(spec, RunOptions::default())
}

/// [`run`] with options.
pub fn run_with(spec: &PipelineSpec, options: RunOptions) -> Result<Summary> {
    run_controlled(spec, options, None)
}

/// [`run_with`], controlled from outside (`weir serve`): stopped on request, with rollouts,
/// live figures and a tap on results.
/// Savepoints asked for that no checkpoint served are answered when the run ends, never left
/// waiting.
#[instrument(skip_all, fields(pipeline = %spec.name))]
pub fn run_controlled(
    spec: &PipelineSpec,
    options: RunOptions,
    control: Option<Arc<PipelineControl>>,
) -> Result<Summary> {
    let control = control.unwrap_or_else(|| standalone_control(&spec.name));
    let outcome = run_with_control(spec, options, control.clone());
    let (reason, disk_full) = match &outcome {
        Ok(_) => (
            "the pipeline stopped before its next checkpoint".to_owned(),
            false,
        ),
        Err(e) => (format!("the pipeline failed: {e}"), e.is_disk_full()),
    };
    control.end_savepoints(reason, disk_full);
    outcome
}

fn run_with_control(
    spec: &PipelineSpec,
    options: RunOptions,
    control: Arc<PipelineControl>,
) -> Result<Summary> {
    let started = Instant::now();
    let shards = spec
        .shards
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);

    // Everything that can be refused is checked before any input is read.
    let loaded = build::Loaded::load(spec)?;
    let (store, manifest) = open_state(spec, options.fresh, &control)?;
    note_resumed(&control, manifest.as_ref());
    let mut sinks = open_sinks(spec, manifest.as_ref())?;
    sinks.upstream = options.upstream_of_stages.map(upstream::MarkPacer::new);
    let mut source = open_source(spec, &control, manifest.as_ref())?;
    let (routing, candidate) = resume_routing(spec, &control, manifest.as_ref())?;
    let resume = build::Resume::of(
        store.as_ref(),
        manifest.as_ref(),
        (routing.as_ref(), candidate.as_ref()),
    );
    let watermark = resume.watermark;
    let workers = (0..shards)
        .map(|index| build::build_shard(spec, &loaded, &resume, &control, index, shards))
        .collect::<Result<Vec<_>>>()?;
    let stages = match options.upstream_of_stages {
        Some(_) => None,
        None => build::build_stages(spec, &loaded, &resume, &control)?,
    };
    info!(shards, "pipeline started");

    let (part_tx, part_rx) = sync_channel::<(u64, Part)>(shards * 4 + 4);
    let ShardThreads {
        senders: shard_txs,
        acks,
        handles,
        spent,
    } = spawn_shards(workers, &part_tx, &control);
    let checkpointer = checkpointer(spec, store.as_ref(), manifest.as_ref(), acks, &control);
    let collector = spawn_collector(spec, part_rx, shards, sinks, checkpointer, stages, &control);

    let mut router = router::Router {
        spec,
        shards: &shard_txs,
        parts: &part_tx,
        checkpoint_interval: store.as_ref().and(
            spec.checkpoint_interval
                .map(|ms| Duration::from_millis(ms as u64)),
        ),
        control: &control,
        routing,
        pending_change: None,
        key_groups: options.key_groups,
        spent: &spent,
        crossing_projection: build::router_crossings(spec, &loaded),
        partition_count: match &spec.source {
            SourceSpec::Nats(nats) => nats.partitions.as_ref().map(|p| p.count),
            _ => None,
        },
    };
    let start = router_start(manifest.as_ref(), watermark);
    let (routed, router_cpu) = crate::cpu_time::of(|| router.route(source.as_mut(), start));
    drop(source); // a shared reader stops feeding this run now, not after its last checkpoint
    drop((shard_txs, part_tx)); // hang up: the shards and then the collector finish
    let summary = join(
        (routed, router_cpu),
        handles,
        collector,
        shards,
        manifest.as_ref(),
        started,
    )?;
    log_finished(&summary);
    Ok(summary)
}

/// A run's state store, and the directory it is in.
type Store = (RedbStore, PathBuf);

/// Publishes what the checkpoint this run resumes from had read, before the next one commits
/// (a replay of a topic reads up to it while the run holds the store open).
fn note_resumed(control: &PipelineControl, manifest: Option<&Manifest>) {
    if let Some(m) = manifest {
        let stats = &control.stats;
        (stats.checkpointed_offset).store(m.source.offset, std::sync::atomic::Ordering::Relaxed);
        *stats.checkpointed_position.lock().expect("stats lock") = Some(m.source.clone());
    }
}

/// The run's state store and directory, and the checkpoint it resumes from (neither for
/// memory state; no checkpoint for a `fresh` start or a first run), the store's totals counted
/// against the state quota.
fn open_state(
    spec: &PipelineSpec,
    fresh: bool,
    control: &PipelineControl,
) -> Result<(Option<Store>, Option<Manifest>)> {
    let (store, manifest) = match &spec.state {
        StateSpec::Memory => (None, None),
        StateSpec::Redb(dir) => {
            let (store, manifest) = recover(dir, spec, fresh)?;
            (Some((store, dir.clone())), manifest)
        }
    };
    if let (Some((store, _)), Some(quota)) = (&store, control.state_quota(spec.state_quota)) {
        let totals = store.totals()?;
        quota.checkpointed(totals.scopes, totals.bytes, Default::default());
    }
    Ok((store, manifest))
}

/// The collector's checkpointer when the state is in a store: it commits checkpoints numbered
/// on from `manifest`'s, and tells the shards through `acks` when one is durable.
fn checkpointer(
    spec: &PipelineSpec,
    store: Option<&Store>,
    manifest: Option<&Manifest>,
    acks: Vec<SyncSender<()>>,
    control: &PipelineControl,
) -> Option<collector::Checkpointer> {
    store.map(|(store, dir)| collector::Checkpointer {
        committer: Committer {
            store: store.clone(),
            data_dir: dir.clone(),
            pipeline: spec.name.clone(),
            fingerprint: fingerprint(spec),
            next_id: manifest.map_or(1, |m| m.id + 1),
            totals: Default::default(),
            on_commit: control.on_commit.clone(),
        },
        acks,
        stats: Vec::new(),
    })
}

/// Where the router resumes: at `manifest`'s event count, watermark partitions and end of
/// input, or at the beginning; at `watermark` either way.
fn router_start(manifest: Option<&Manifest>, watermark: Millis) -> router::Start {
    router::Start {
        events: manifest.map_or(0, |m| m.events),
        watermark,
        partitions: manifest.map_or(Vec::new(), |m| m.partitions.clone()),
        finished: manifest.is_some_and(|m| m.finished),
    }
}

/// The control of a run nobody controls (`weir run`): it has no registry of versions.
/// The control of a pipeline run by itself (`weir run`): no registry to find other versions
/// in, no shadow log; its live figures can still be watched.
pub fn standalone_control(pipeline: &str) -> Arc<PipelineControl> {
    Arc::new(PipelineControl::new(
        pipeline,
        Box::new(|_, version| {
            Err(ResolveError::Failed(format!(
                "no registry to find version {version} in"
            )))
        }),
        None,
    ))
}

fn log_finished(summary: &Summary) {
    info!(
        events_in = summary.events_in,
        results_out = summary.results_out,
        late = summary.late,
        dead_letters = summary.dead_letters,
        traps = summary.traps,
        checkpoints = summary.checkpoints.len(),
        elapsed_ms = summary.elapsed.as_millis() as u64,
        "pipeline finished"
    );
}

/// Opens the sinks, cut back to the lengths the checkpoint committed.
fn open_sinks(spec: &PipelineSpec, manifest: Option<&Manifest>) -> Result<collector::Sinks> {
    let committed = manifest.map(|m| m.sinks);
    let owner = |sink: &str| format!("weir-{}-{sink}", spec.name);
    Ok(collector::Sinks {
        results: SinkWriter::open_as(
            &spec.sinks.results,
            committed.map(|s| s.results),
            &owner("results"),
        )?,
        late: SinkWriter::open_as(&spec.sinks.late, committed.map(|s| s.late), &owner("late"))?,
        dead_letters: SinkWriter::open_as(
            &spec.sinks.dead_letters,
            committed.map(|s| s.dead_letters),
            &owner("dead-letters"),
        )?,
        upstream: None,
    })
}

/// Opens the source, positioned where the checkpoint left it.
fn open_source(
    spec: &PipelineSpec,
    control: &PipelineControl,
    manifest: Option<&Manifest>,
) -> Result<Box<dyn Source>> {
    let handed_in = control.take_source();
    let mut source: Box<dyn Source> = match &spec.source {
        _ if handed_in.is_some() => handed_in.expect("checked"),
        SourceSpec::File(path) => Box::new(LineReader::open(path, DEFAULT_MAX_LINE_BYTES)?),
        SourceSpec::Files(files) => {
            let (paths, names): (Vec<_>, Vec<_>) = files.iter().cloned().unzip();
            Box::new(Interleaved::open(&paths, &names, DEFAULT_MAX_LINE_BYTES)?)
        }
        SourceSpec::Stdin => Box::new(LineReader::stdin(DEFAULT_MAX_LINE_BYTES)),
        SourceSpec::Generator(g) => Box::new(Generator::new(g.clone())),
        SourceSpec::Nexmark(nexmark) => Box::new(Nexmark::new(nexmark.clone(), &spec.key_field)),
        SourceSpec::Nats(nats) => Box::new(crate::source::NatsSource::new(nats.clone())?),
        SourceSpec::Kafka(kafka) => Box::new(
            crate::source::KafkaSource::new(
                kafka.clone(),
                &spec.name,
                &spec.key_field,
                &spec.timestamp_field,
            )?
            .declaring(spec.partition_field.is_none()),
        ),
        SourceSpec::Http(Some(log)) => Box::new(LineReader::tail(
            log,
            DEFAULT_MAX_LINE_BYTES,
            control.ingest_gate.clone(),
        )?),
        SourceSpec::Http(None) => {
            return Err(PipelineError::Config(
                "an http source receives events through `weir serve`; `weir run` reads files, stdin or a generator".into(),
            ));
        }
    };
    if let Some(m) = manifest {
        source.resume(&m.source)?;
        info!(
            checkpoint = m.id,
            line = m.source.line,
            events = m.events,
            "resuming from checkpoint"
        );
    }
    Ok(source)
}

/// The routing between operator versions the checkpoint was taken with, and the code of its
/// candidate. The routing is the aggregate's, or an enrichment operator's or a stage's (one
/// rollout at a time).
/// A spec whose live version differs from the checkpoint's was promoted since: the promoted
/// version serves every key from here on. A candidate that was replaced and deleted since no
/// longer exists: its keys go back to the live version from this restart on, as a rollback at a
/// barrier would send them. A candidate that exists but cannot be loaded stops the run, as
/// before.
fn resume_routing(
    spec: &PipelineSpec,
    control: &PipelineControl,
    manifest: Option<&Manifest>,
) -> Result<(Option<Routing>, Option<VersionCode>)> {
    let live_of = |routing: &Routing| match &routing.operator {
        None => spec.aggregate.as_ref().map(|op| &op.version),
        Some(name) => (spec.enrichers.iter())
            .chain(spec.stages.iter().map(|stage| &stage.aggregate))
            .find(|op| op.name == *name)
            .map(|op| &op.version),
    };
    let recorded = manifest
        .and_then(|m| m.routing.clone())
        .filter(|routing| live_of(routing) == Some(&routing.live));
    let Some(mut routing) = recorded.or_else(|| {
        spec.aggregate
            .as_ref()
            .map(|op| Routing::single(&op.version))
    }) else {
        return Ok((None, None));
    };
    let candidate = match &routing.candidate {
        Some(version) => match (control.resolve)(routing.operator.as_deref(), version) {
            Ok(code) => Some(code),
            Err(ResolveError::Unknown(message)) => {
                tracing::warn!(%version, error = %message, "the checkpoint's candidate no longer exists: every key goes to the live version");
                routing = Routing {
                    candidate: None,
                    percent: 0,
                    shadow: false,
                    ..routing
                };
                None
            }
            Err(error) => {
                return Err(PipelineError::Config(format!(
                    "the checkpoint's candidate version {version} cannot be loaded: {error}"
                )));
            }
        },
        None => None,
    };
    control.set_applied(routing.clone());
    Ok((Some(routing), candidate))
}

/// A shard thread: its outcome and the CPU time it used.
type ShardHandle = std::thread::JoinHandle<(std::result::Result<(), ShardError>, Option<Duration>)>;

/// The shards' threads as the router and the end of a run see them.
struct ShardThreads {
    /// Where each shard's batches and barriers go.
    senders: Vec<SyncSender<ShardMsg>>,
    /// The acknowledgements that tell each shard a checkpoint is durable.
    acks: Vec<SyncSender<()>>,
    handles: Vec<ShardHandle>,
    /// The events the shards are done with, for the router to drop.
    spent: Receiver<Share>,
}

/// Starts a thread per shard.
fn spawn_shards(
    workers: Vec<Shard>,
    parts: &SyncSender<(u64, Part)>,
    control: &Arc<PipelineControl>,
) -> ShardThreads {
    let (spent_tx, spent_rx) = sync_channel::<Share>(workers.len() * 4 + 4);
    let mut senders = Vec::with_capacity(workers.len());
    let mut acks = Vec::with_capacity(workers.len());
    let mut handles = Vec::with_capacity(workers.len());
    for (index, shard) in workers.into_iter().enumerate() {
        let (tx, rx) = sync_channel::<ShardMsg>(4);
        let (ack_tx, ack_rx) = sync_channel::<()>(1);
        senders.push(tx);
        acks.push(ack_tx);
        let parts = parts.clone();
        let spent = spent_tx.clone();
        let control = control.clone();
        let handle = std::thread::Builder::new()
            .name(format!("weir-shard-{index}"))
            .spawn(move || {
                let outcome = shard::run_thread(shard, &rx, &parts, &spent, &ack_rx, &control);
                if outcome.is_err() {
                    let _ = parts.send((u64::MAX, Part::Failed));
                }
                (outcome, crate::cpu_time::this_thread())
            })
            .expect("spawning a shard thread");
        handles.push(handle);
    }
    ShardThreads {
        senders,
        acks,
        handles,
        spent: spent_rx,
    }
}

/// What the collector thread returns: its outcome and each sink's record count.
type Collected = (Result<collector::Collected>, u64, u64, u64);

/// Starts the collector thread.
fn spawn_collector(
    spec: &PipelineSpec,
    parts: Receiver<(u64, Part)>,
    shards: usize,
    mut sinks: collector::Sinks,
    checkpointer: Option<collector::Checkpointer>,
    stages: Option<stages::Stages>,
    control: &Arc<PipelineControl>,
) -> std::thread::JoinHandle<Collected> {
    let control = control.clone();
    let label = {
        // Results are the last stage's, or the aggregate's, or the last enricher's.
        let op = spec
            .stages
            .last()
            .map(|stage| &stage.aggregate)
            .or(spec.aggregate.as_ref())
            .or(spec.enrichers.last());
        OperatorLabel {
            pipeline: spec.name.clone(),
            name: op.map(|o| o.name.clone()).unwrap_or_default(),
            version: op.map(|o| o.version.clone()).unwrap_or_default(),
            changelog: spec.emit.changelog,
        }
    };
    std::thread::Builder::new()
        .name("weir-collector".into())
        .spawn(move || {
            let collected = collector::collect(
                parts,
                shards + 1,
                &label,
                &mut sinks,
                checkpointer,
                stages,
                &control,
            );

            (
                collected,
                sinks.results.records(),
                sinks.late.records(),
                sinks.dead_letters.records(),
            )
        })
        .expect("spawning the collector thread")
}

/// Waits for the shards and the collector; the first failure wins, the router's first.
/// `routed` is the router's outcome and the CPU time it used.
fn join(
    (routed, router_cpu): (Result<u64>, Option<Duration>),
    handles: Vec<ShardHandle>,
    collector: std::thread::JoinHandle<Collected>,
    shards: usize,
    manifest: Option<&Manifest>,
    started: Instant,
) -> Result<Summary> {
    let (events_in, mut failure) = match routed {
        Ok(events) => (events, None),
        Err(e) => (0, Some(e)),
    };
    let mut shards_cpu = Some(Duration::ZERO);
    for (shard, handle) in handles.into_iter().enumerate() {
        let (outcome, cpu) = handle.join().expect("a shard thread panicked");
        shards_cpu = shards_cpu.zip(cpu).map(|(total, cpu)| total + cpu);
        if let Err(error) = outcome
            && failure.is_none()
        {
            failure = Some(PipelineError::Shard { shard, error });
        }
    }
    let (collected, results_out, late, dead_letters) =
        collector.join().expect("the collector thread panicked");
    if let Some(failure) = failure {
        return Err(failure);
    }
    let collected = collected?;
    Ok(Summary {
        events_in,
        results_out,
        late,
        dead_letters,
        traps: collected.traps,
        shards,
        resumed_from: manifest.map(|m| m.id),
        checkpoints: collected.checkpoints,
        elapsed: started.elapsed(),
        router_cpu,
        shards_cpu,
    })
}
