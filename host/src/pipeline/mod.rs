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
//! canonical order before writing, so the output is the same for any shard count and batch size.
//!
//! Checkpoints (redb backend): every `checkpoint_interval` the router sends a barrier after a
//! batch. Each shard hands over what changed since the last barrier and waits; the collector,
//! once every earlier batch is written, syncs the sinks and commits the changes with the source
//! position, watermark and sink lengths in one redb transaction, then releases the shards. A
//! run on a data directory with a committed checkpoint resumes from it.

mod collector;
mod control;
mod enrichment;
mod router;
mod shard;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::time::{Duration, Instant};

use tracing::{info, instrument};

pub use control::{LiveStats, PipelineControl, Resolver, ResultLine};
pub use enrichment::{Enrichment, REFERENCE_MAP};
pub use shard::{CandidateFactory, Shard, ShardOutput, ShardSnapshot};

use crate::checkpoint::{CheckpointStats, MARKER_FILE, Manifest, SourcePosition, fingerprint};
use crate::emit::{OperatorLabel, SinkError, SinkWriter};
use crate::event::{DEFAULT_MAX_LINE_BYTES, DeadLetter};
use crate::operator::{
    AggregateOperator, ComponentKind, EnrichOperator, Limits, LoadError, NativeCountSum,
    Projection, WasmOperator, WasmRuntime,
};
use crate::rollout::{Routing, VersionedAggregate};
use crate::source::{Generator, LineReader, Source, SourceError};
use crate::spec::{OperatorCode, OperatorSpec, PipelineSpec, SourceSpec, StateSpec};
use crate::state::{
    KEY_GROUPS, MemoryBackend, Namespace, RedbBackend, RedbStore, StateBackend, StateError,
    StateKey, key_group,
};
use crate::time::{MINUS_INFINITY, Millis};
use crate::value::Value;
use crate::window::{EngineError, Staged, WindowEngine};

/// Why a pipeline could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// An operator could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A native operator name is unknown.
    #[error("unknown native operator {0:?}: the built-in operators are: count-sum")]
    UnknownNative(String),
    /// The state store failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The source failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A sink failed.
    #[error(transparent)]
    Sink(#[from] SinkError),
    /// Reference data could not be loaded.
    #[error("reference data {path}: {message}")]
    Reference {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A shard failed.
    #[error("shard {shard} failed: {error}")]
    Shard {
        /// Which shard.
        shard: usize,
        /// The failure.
        error: EngineError,
    },
    /// The data directory does not match the pipeline or is damaged.
    #[error("data directory {dir}: {message}")]
    Recovery {
        /// The data directory.
        dir: PathBuf,
        /// What is wrong and what to do.
        message: String,
    },
    /// The spec cannot run here.
    #[error("pipeline cannot run: {0}")]
    Config(String),
    /// The checkpoint marker could not be written.
    #[error("cannot write {path}: {source}")]
    Marker {
        /// The marker file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// `Result` for running pipelines.
pub type Result<T, E = PipelineError> = std::result::Result<T, E>;

/// How to run.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// Discard any checkpoint in the data directory and start from the beginning.
    pub fresh: bool,
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

/// Loaded operator code, shared by every shard.
enum Code {
    Wasm(WasmOperator),
    NativeCountSum,
}

/// The process's runtime, set up on first use.
fn shared(runtime: &mut Option<WasmRuntime>) -> Result<&WasmRuntime> {
    Ok(match runtime {
        Some(runtime) => runtime,
        None => runtime.insert(WasmRuntime::shared()?),
    })
}

fn load(
    runtime: &mut Option<WasmRuntime>,
    spec: &OperatorSpec,
    kind: ComponentKind,
) -> Result<Code> {
    match &spec.code {
        OperatorCode::Component(path) => Ok(Code::Wasm(shared(runtime)?.load(path, kind)?)),
        OperatorCode::Stored { path, digest } => Ok(Code::Wasm(
            shared(runtime)?.load_checked(path, digest, kind)?,
        )),
        OperatorCode::Native(name) if name == "count-sum" && kind == ComponentKind::Aggregate => {
            Ok(Code::NativeCountSum)
        }
        OperatorCode::Native(name) => Err(PipelineError::UnknownNative(name.clone())),
        OperatorCode::Registry => Err(PipelineError::Config(format!(
            "operator {}@{} names no `module`: operators from the registry run under `weir serve`; \
                 `weir run` needs `module = \"path/to/component.wasm\"`",
            spec.name, spec.version
        ))),
    }
}

fn label(spec: &OperatorSpec) -> String {
    format!("{}@{}", spec.name, spec.version)
}

/// Reference rows: (key, fields) for an enrichment operator.
type ReferenceRows = Vec<(String, Vec<(String, Value)>)>;

fn load_reference(path: &Path, key_field: &str) -> Result<ReferenceRows> {
    let fail = |message: String| PipelineError::Reference {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let mut rows = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let json: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| fail(format!("line {}: not JSON ({e})", i + 1)))?;
        let serde_json::Value::Object(object) = json else {
            return Err(fail(format!("line {}: not a JSON object", i + 1)));
        };
        let key = match object.get(key_field) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            _ => {
                return Err(fail(format!(
                    "line {}: no text or integer key field `{key_field}`",
                    i + 1
                )));
            }
        };
        rows.push((
            key,
            object
                .iter()
                .map(|(k, v)| (k.clone(), Value::from_json(v)))
                .collect(),
        ));
    }
    Ok(rows)
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

/// Messages to a shard.
enum ShardMsg {
    Batch {
        id: u64,
        events: Vec<Staged>,
        advances: Arc<Vec<(u64, Millis)>>,
        end_of_input: bool,
    },
    Barrier {
        id: u64,
        change: Option<RoutingChange>,
    },
}

/// A new routing, applied by every shard right after a barrier.
#[derive(Clone)]
struct RoutingChange {
    routing: Routing,
    /// The candidate's code, when it is a version the shards do not run yet.
    candidate: Option<WasmOperator>,
}

/// The router's part of a checkpoint.
struct Position {
    source: SourcePosition,
    events: u64,
    watermark: Millis,
    finished: bool,
    started: Instant,
    /// The routing from this checkpoint on.
    routing: Option<Routing>,
}

/// What the collector receives for a batch (or a barrier) id.
enum Part {
    Shard(ShardOutput),
    Router(Vec<DeadLetter>),
    Snapshot(ShardSnapshot, Option<RoutingChange>),
    Position(Position),
}

/// Opens the data directory and reads the checkpoint to resume from, if any.
fn recover(
    dir: &Path,
    spec: &PipelineSpec,
    options: RunOptions,
) -> Result<(RedbStore, Option<Manifest>)> {
    let fail = |message: String| PipelineError::Recovery {
        dir: dir.to_owned(),
        message,
    };
    let store = RedbStore::open(dir)?;
    let marker_path = dir.join(MARKER_FILE);
    if options.fresh {
        store.clear()?;
        let _ = std::fs::remove_file(&marker_path);
        return Ok((store, None));
    }
    let marker = match std::fs::read_to_string(&marker_path) {
        Ok(text) => Some(
            text.trim()
                .parse::<u64>()
                .map_err(|_| fail(format!("{MARKER_FILE} is unreadable")))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(fail(format!("cannot read {MARKER_FILE}: {e}"))),
    };
    let manifest: Option<Manifest> = match store.manifest()? {
        Some(bytes) => Some(
            serde_json::from_slice(&bytes)
                .map_err(|e| fail(format!("the checkpoint manifest is unreadable ({e})")))?,
        ),
        None => None,
    };
    match (marker, &manifest) {
        (Some(committed), None) => {
            return Err(fail(format!(
                "checkpoint {committed} was committed here, but {} holds no checkpoint: it was replaced or \
                 damaged. Restore it (or a savepoint), or start over with `weir run --fresh`",
                store.path().display()
            )));
        }
        (Some(committed), Some(m)) if m.id < committed => {
            return Err(fail(format!(
                "checkpoint {committed} was committed here, but {} holds only checkpoint {}: it was rolled \
                 back or replaced. Restore it, or start over with `weir run --fresh`",
                store.path().display(),
                m.id
            )));
        }
        _ => {}
    }
    match &manifest {
        None => store.clear()?, // leftovers of a run that never committed
        Some(m) if m.pipeline != spec.name => {
            return Err(fail(format!(
                "it holds pipeline {:?}, not {:?}: use another `[state] dir`, or `--fresh` to start over",
                m.pipeline, spec.name
            )));
        }
        Some(m) if m.fingerprint != fingerprint(spec) => {
            return Err(fail(format!(
                "its checkpoint was taken with a different key, timestamp, watermark, window or operator \
                 chain ({}); now: {}. Changing them needs a fresh start (`--fresh`); operator versions may change",
                m.fingerprint,
                fingerprint(spec)
            )));
        }
        Some(_) => {}
    }
    Ok((store, manifest))
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
#[instrument(skip_all, fields(pipeline = %spec.name))]
pub fn run_controlled(
    spec: &PipelineSpec,
    options: RunOptions,
    control: Option<Arc<PipelineControl>>,
) -> Result<Summary> {
    let started = Instant::now();
    let control = control.unwrap_or_else(|| {
        Arc::new(PipelineControl::new(
            Box::new(|version| Err(format!("no registry to find version {version} in"))),
            None,
        ))
    });
    let counters = &control.counters;
    let shards = spec
        .shards
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);

    // Everything that can be refused is checked before any input is read.
    let mut runtime = None;
    let enricher_code = spec
        .enrichers
        .iter()
        .map(|op| load(&mut runtime, op, ComponentKind::Enrich))
        .collect::<Result<Vec<_>>>()?;
    let aggregate_code = spec
        .aggregate
        .as_ref()
        .map(|op| load(&mut runtime, op, ComponentKind::Aggregate))
        .transpose()?;
    let references = spec
        .enrichers
        .iter()
        .map(|op| {
            op.reference
                .as_ref()
                .map(|r| load_reference(&r.path, &r.key))
                .transpose()
        })
        .collect::<Result<Vec<_>>>()?;
    let (store, manifest) = match &spec.state {
        StateSpec::Memory => (None, None),
        StateSpec::Redb(dir) => {
            let (store, manifest) = recover(dir, spec, options)?;
            (Some((store, dir.clone())), manifest)
        }
    };
    let committed = manifest.as_ref().map(|m| m.sinks);
    let mut sinks = collector::Sinks {
        results: SinkWriter::open(&spec.sinks.results, committed.map(|s| s.results))?,
        late: SinkWriter::open(&spec.sinks.late, committed.map(|s| s.late))?,
        dead_letters: SinkWriter::open(
            &spec.sinks.dead_letters,
            committed.map(|s| s.dead_letters),
        )?,
    };
    let mut source: Box<dyn Source> = match &spec.source {
        SourceSpec::File(path) => Box::new(LineReader::open(path, DEFAULT_MAX_LINE_BYTES)?),
        SourceSpec::Stdin => Box::new(LineReader::stdin(DEFAULT_MAX_LINE_BYTES)),
        SourceSpec::Generator(g) => Box::new(Generator::new(g.clone())),
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
    if let Some(m) = &manifest {
        source.resume(&m.source)?;
        info!(
            checkpoint = m.id,
            line = m.source.line,
            events = m.events,
            "resuming from checkpoint"
        );
    }
    let watermark = manifest.as_ref().map_or(MINUS_INFINITY, |m| m.watermark);
    // The routing between operator versions the checkpoint was taken with.
    // A spec whose live version differs from the checkpoint's was promoted since: the promoted
    // version serves every key from here on.
    let mut routing = spec.aggregate.as_ref().map(|op| {
        manifest
            .as_ref()
            .and_then(|m| m.routing.clone())
            .filter(|routing| routing.live == op.version)
            .unwrap_or_else(|| Routing::single(&op.version))
    });
    // The checkpoint's candidate, if its code can still be had. A candidate that was replaced
    // and deleted since cannot: its keys go back to the live version from this restart on, as
    // a rollback at a barrier would send them.
    let candidate_code = match &routing {
        Some(Routing {
            candidate: Some(version),
            live,
            ..
        }) => match (control.resolve)(version) {
            Ok(code) => Some(code),
            Err(message) => {
                tracing::warn!(%version, error = %message, "the checkpoint's candidate cannot be loaded: every key goes to the live version");
                routing = Some(Routing::single(live));
                None
            }
        },
        _ => None,
    };
    if let Some(routing) = &routing {
        control.set_applied(routing.clone());
    }

    let limits = Limits::from(&spec.sandbox);
    let mut workers = Vec::with_capacity(shards);
    for index in 0..shards {
        let mut state: Box<dyn StateBackend> = match &store {
            Some((store, _)) => Box::new(RedbBackend::new(store.clone(), spec.memory_budget)),
            None => Box::new(MemoryBackend::default()),
        };
        let mut enrichers = Vec::new();
        for (position, (op, code)) in spec.enrichers.iter().zip(&enricher_code).enumerate() {
            let projection = op.fields.clone().map_or(Projection::All, Projection::Only);
            let operator: Box<dyn EnrichOperator> = match code {
                Code::Wasm(wasm) => Box::new(wasm.enrich(limits, projection)?),
                Code::NativeCountSum => {
                    return Err(PipelineError::UnknownNative(
                        "count-sum (as an enrichment)".into(),
                    ));
                }
            };
            // Reference data is part of the state from the first checkpoint on.
            if manifest.is_none() {
                for (key, fields) in references[position].iter().flatten() {
                    let group = key_group(key);
                    if shard_of(group, shards) != index {
                        continue;
                    }
                    let state_key = StateKey {
                        group,
                        operator: position as u16,
                        namespace: Namespace::Global,
                        key: key.as_str().into(),
                    };
                    let mut scope = state.take(&state_key)?;
                    for (name, value) in fields {
                        scope.map_put(REFERENCE_MAP, name, value.clone());
                    }
                    state.put(state_key, scope)?;
                }
            }
            enrichers.push(Enrichment::new(
                label(op),
                position as u16,
                operator,
                op.state_ttl,
            ));
        }
        let aggregate = match (&spec.aggregate, &aggregate_code, &spec.window) {
            (Some(op), Some(code), Some(window)) => {
                let all_but_key_and_time =
                    Projection::Except(vec![spec.key_field.clone(), spec.timestamp_field.clone()]);
                let projection = op
                    .fields
                    .clone()
                    .map_or(all_but_key_and_time, Projection::Only);
                let operator: Box<dyn AggregateOperator> = match code {
                    Code::Wasm(wasm) => Box::new(wasm.aggregate(limits, projection.clone())?),
                    Code::NativeCountSum => Box::new(NativeCountSum),
                };
                let factory = CandidateFactory { limits, projection };
                let engine = WindowEngine::new(
                    *window,
                    spec.allowed_lateness,
                    spec.enrichers.len() as u16,
                    label(op),
                );
                Some((
                    engine,
                    VersionedAggregate::new(&op.version, operator, counters),
                    factory,
                ))
            }
            _ => None,
        };
        let mut shard = Shard::new(enrichers, aggregate, state);
        if let Some(routing) = &routing
            && routing.candidate.is_some()
        {
            shard.route(
                routing.clone(),
                candidate_code.as_ref(),
                counters,
                control.shadow_log.clone(),
            )?;
        }
        if let (Some((store, dir)), Some(_)) = (&store, &manifest) {
            let (first, end) = groups_of(index, shards);
            let start = StateKey::group_start(first);
            let end = if end >= u32::from(KEY_GROUPS) {
                vec![0xff; 3]
            } else {
                StateKey::group_start(end as u16)
            };
            let operator = spec.enrichers.len() as u16;
            let windows: Vec<_> = store
                .scan(true, &start, &end)?
                .into_iter()
                .filter(|row| StateKey::decode(&row.key).is_some_and(|k| k.operator == operator))
                .collect();
            // Only TTLs need the state itself at restore; everything else is read on demand.
            let state = if spec.enrichers.iter().any(|op| op.state_ttl.is_some()) {
                store.scan(false, &start, &end)?
            } else {
                Vec::new()
            };
            shard
                .restore(watermark, &windows, &state)
                .map_err(|message| PipelineError::Recovery {
                    dir: dir.clone(),
                    message,
                })?;
        }
        workers.push(shard);
    }
    info!(shards, "pipeline started");

    let checkpoint_interval = match &store {
        Some(_) => spec
            .checkpoint_interval
            .map(|ms| Duration::from_millis(ms as u64)),
        None => None,
    };
    let (part_tx, part_rx) = sync_channel::<(u64, Part)>(shards * 4 + 4);
    let mut shard_txs: Vec<SyncSender<ShardMsg>> = Vec::with_capacity(shards);
    let mut acks = Vec::with_capacity(shards);
    let mut handles = Vec::with_capacity(shards);
    for (index, mut shard) in workers.into_iter().enumerate() {
        let (tx, rx) = sync_channel::<ShardMsg>(4);
        let (ack_tx, ack_rx) = sync_channel::<()>(1);
        shard_txs.push(tx);
        acks.push(ack_tx);
        let parts = part_tx.clone();
        let control = control.clone();
        let handle = std::thread::Builder::new()
            .name(format!("weir-shard-{index}"))
            .spawn(move || -> std::result::Result<(), EngineError> {
                while let Ok(message) = rx.recv() {
                    let (id, part) = match message {
                        ShardMsg::Batch {
                            id,
                            events,
                            advances,
                            end_of_input,
                        } => (
                            id,
                            Part::Shard(shard.process(events, &advances, end_of_input)?),
                        ),
                        ShardMsg::Barrier { id, change } => {
                            (id, Part::Snapshot(shard.checkpoint()?, change))
                        }
                    };
                    let (part, change) = match part {
                        Part::Snapshot(snapshot, change) => {
                            (Part::Snapshot(snapshot, None), Some(change))
                        }
                        other => (other, None),
                    };
                    if parts.send((id, part)).is_err() {
                        break;
                    }
                    if let Some(change) = change {
                        // Hold still until the checkpoint is durable: only then may clean state
                        // be evicted from memory, and only then does a new routing apply.
                        if ack_rx.recv().is_err() {
                            break;
                        }
                        shard.committed();
                        if let Some(change) = change {
                            shard
                                .route(
                                    change.routing,
                                    change.candidate.as_ref(),
                                    &control.counters,
                                    control.shadow_log.clone(),
                                )
                                .map_err(|e| EngineError::Host(e.to_string()))?;
                        }
                    }
                }
                Ok(())
            })
            .expect("spawning a shard thread");
        handles.push(handle);
    }

    let checkpointer = store.as_ref().map(|(store, dir)| collector::Checkpointer {
        store: store.clone(),
        data_dir: dir.clone(),
        pipeline: spec.name.clone(),
        fingerprint: fingerprint(spec),
        next_id: manifest.as_ref().map_or(1, |m| m.id + 1),
        acks,
        stats: Vec::new(),
    });
    let collector_control = control.clone();
    let result_label = {
        let op = spec.aggregate.as_ref().or(spec.enrichers.last());
        OperatorLabel {
            pipeline: spec.name.clone(),
            name: op.map(|o| o.name.clone()).unwrap_or_default(),
            version: op.map(|o| o.version.clone()).unwrap_or_default(),
        }
    };
    let collector = std::thread::Builder::new()
        .name("weir-collector".into())
        .spawn(move || {
            let collected = collector::collect(
                part_rx,
                shards + 1,
                &result_label,
                &mut sinks,
                checkpointer,
                &collector_control,
            );
            (
                collected,
                sinks.results.records(),
                sinks.late.records(),
                sinks.dead_letters.records(),
            )
        })
        .expect("spawning the collector thread");

    let mut router = router::Router {
        spec,
        shards: &shard_txs,
        parts: &part_tx,
        checkpoint_interval,
        control: &control,
        routing: routing.clone(),
        pending_change: None,
    };
    let start = router::Start {
        events: manifest.as_ref().map_or(0, |m| m.events),
        watermark,
        finished: manifest.as_ref().is_some_and(|m| m.finished),
    };
    let routed = router.route(source.as_mut(), start);
    drop(shard_txs);
    drop(part_tx);
    let (events_in, mut failure) = match routed {
        Ok(events) => (events, None),
        Err(e) => (0, Some(e)),
    };
    for (shard, handle) in handles.into_iter().enumerate() {
        if let Err(error) = handle.join().expect("a shard thread panicked")
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
    let summary = Summary {
        events_in,
        results_out,
        late,
        dead_letters,
        traps: collected.traps,
        shards,
        resumed_from: manifest.as_ref().map(|m| m.id),
        checkpoints: collected.checkpoints,
        elapsed: started.elapsed(),
    };
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
    Ok(summary)
}
