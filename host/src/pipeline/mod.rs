//! Wiring a [`PipelineSpec`] into a running graph and running a bounded input to its end:
//!
//! ```text
//! source ─► decode ─► watermark ─► route by key group ─► shard 0..N-1 ─► collector ─► sinks
//! ```
//!
//! The router (the calling thread) numbers events in arrival order and records every watermark
//! advance; each batch goes to every shard with all of the batch's advances, so each shard fires
//! its windows exactly as a single shard would. The collector puts each batch's outputs into
//! the canonical order before writing, so the output is the same for any shard count and batch
//! size.

mod shard;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use tracing::{info, instrument};

pub use shard::{Shard, ShardEnricher, ShardOutput};

use crate::emit::{
    OperatorLabel, SinkError, SinkWriter, dead_letter_record, event_record, late_record,
    result_record,
};
use crate::event::{DEFAULT_MAX_LINE_BYTES, DeadLetter, Decoder};
use crate::operator::{
    AggregateOperator, ComponentKind, EnrichOperator, Limits, LoadError, NativeCountSum,
    Projection, WasmOperator, WasmRuntime,
};
use crate::source::{Generator, LineReader, Record, Source, SourceError};
use crate::spec::{OperatorCode, OperatorSpec, PipelineSpec, SourceSpec, StateSpec};
use crate::state::{
    KEY_GROUPS, MemoryBackend, Namespace, RedbBackend, RedbStore, StateBackend, StateError,
    StateKey, key_group,
};
use crate::time::Millis;
use crate::value::Value;
use crate::watermark::BoundedOutOfOrderness;
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
}

/// `Result` for running pipelines.
pub type Result<T, E = PipelineError> = std::result::Result<T, E>;

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    /// Events decoded from the input.
    pub events_in: u64,
    /// Records written to the results sink.
    pub results_out: u64,
    /// Events too late for all their windows.
    pub late: u64,
    /// Dead letters (bad input, operator rejections and traps).
    pub dead_letters: u64,
    /// Operator calls that trapped.
    pub traps: u64,
    /// Shards used.
    pub shards: usize,
    /// Wall time.
    pub elapsed: Duration,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        write!(
            f,
            "{} events in, {} results out, {} late, {} dead letters ({} shards, {:.2} s, {:.0} events/s)",
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
        )
    }
}

/// Loaded operator code, shared by every shard.
enum Code {
    Wasm(WasmOperator),
    NativeCountSum,
}

fn load(
    runtime: &mut Option<WasmRuntime>,
    spec: &OperatorSpec,
    kind: ComponentKind,
) -> Result<Code> {
    match &spec.code {
        OperatorCode::Component(path) => {
            let runtime = match runtime {
                Some(runtime) => runtime,
                None => runtime.insert(WasmRuntime::shared()?),
            };
            Ok(Code::Wasm(runtime.load(path, kind)?))
        }
        OperatorCode::Native(name) if name == "count-sum" && kind == ComponentKind::Aggregate => {
            Ok(Code::NativeCountSum)
        }
        OperatorCode::Native(name) => Err(PipelineError::UnknownNative(name.clone())),
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

struct ShardBatch {
    id: u64,
    events: Vec<Staged>,
    advances: Arc<Vec<(u64, Millis)>>,
    end_of_input: bool,
}

enum Part {
    Shard(ShardOutput),
    Router(Vec<DeadLetter>),
}

/// Runs a pipeline over its bounded input to the end.
#[instrument(skip_all, fields(pipeline = %spec.name))]
pub fn run(spec: &PipelineSpec) -> Result<Summary> {
    let started = Instant::now();
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
    let mut results = SinkWriter::open(&spec.sinks.results)?;
    let mut late_sink = SinkWriter::open(&spec.sinks.late)?;
    let mut dead_sink = SinkWriter::open(&spec.sinks.dead_letters)?;
    let store = match &spec.state {
        StateSpec::Memory => None,
        StateSpec::Redb(dir) => {
            let store = RedbStore::open(dir)?;
            store.clear()?;
            Some(store)
        }
    };
    let mut source: Box<dyn Source> = match &spec.source {
        SourceSpec::File(path) => Box::new(LineReader::open(path, DEFAULT_MAX_LINE_BYTES)?),
        SourceSpec::Stdin => Box::new(LineReader::stdin(DEFAULT_MAX_LINE_BYTES)),
        SourceSpec::Generator(g) => Box::new(Generator::new(g.clone())),
    };

    let limits = Limits::default();
    let mut workers = Vec::with_capacity(shards);
    for index in 0..shards {
        let mut state: Box<dyn StateBackend> = match &store {
            Some(store) => Box::new(RedbBackend::new(store.clone())),
            None => Box::new(MemoryBackend::default()),
        };
        let mut enrichers = Vec::new();
        for (position, (op, code)) in spec.enrichers.iter().zip(&enricher_code).enumerate() {
            let operator: Box<dyn EnrichOperator> = match code {
                Code::Wasm(wasm) => Box::new(wasm.enrich(
                    limits,
                    op.fields.clone().map_or(Projection::All, Projection::Only),
                )?),
                Code::NativeCountSum => {
                    return Err(PipelineError::UnknownNative(
                        "count-sum (as an enrichment)".into(),
                    ));
                }
            };
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
                    scope.map_put("reference", name, value.clone());
                }
                state.put(state_key, scope)?;
            }
            enrichers.push(ShardEnricher {
                label: label(op),
                operator,
            });
        }
        let aggregate = match (&spec.aggregate, &aggregate_code, &spec.window) {
            (Some(op), Some(code), Some(window)) => {
                let operator: Box<dyn AggregateOperator> = match code {
                    Code::Wasm(wasm) => Box::new(wasm.aggregate(
                        limits,
                        op.fields.clone().map_or_else(
                            || {
                                Projection::Except(vec![
                                    spec.key_field.clone(),
                                    spec.timestamp_field.clone(),
                                ])
                            },
                            Projection::Only,
                        ),
                    )?),
                    Code::NativeCountSum => Box::new(NativeCountSum),
                };
                let engine = WindowEngine::new(
                    *window,
                    spec.allowed_lateness,
                    spec.enrichers.len() as u16,
                    label(op),
                );
                Some((engine, operator))
            }
            _ => None,
        };
        state.flush()?;
        workers.push(Shard::new(enrichers, aggregate, state));
    }
    info!(shards, "pipeline started");

    let (part_tx, part_rx) = sync_channel::<(u64, Part)>(shards * 4 + 4);
    let mut shard_txs: Vec<SyncSender<ShardBatch>> = Vec::with_capacity(shards);
    let mut handles = Vec::with_capacity(shards);
    for (index, mut shard) in workers.into_iter().enumerate() {
        let (tx, rx) = sync_channel::<ShardBatch>(4);
        shard_txs.push(tx);
        let parts = part_tx.clone();
        let handle = std::thread::Builder::new()
            .name(format!("weir-shard-{index}"))
            .spawn(move || -> std::result::Result<(), EngineError> {
                while let Ok(batch) = rx.recv() {
                    let output =
                        shard.process(batch.events, &batch.advances, batch.end_of_input)?;
                    if parts.send((batch.id, Part::Shard(output))).is_err() {
                        break;
                    }
                }
                Ok(())
            })
            .expect("spawning a shard thread");
        handles.push(handle);
    }

    let result_label = spec
        .aggregate
        .as_ref()
        .or(spec.enrichers.last())
        .map(|op| OperatorLabel {
            name: op.name.clone(),
            version: op.version.clone(),
        });
    let collector = std::thread::Builder::new()
        .name("weir-collector".into())
        .spawn(move || -> Result<(u64, u64, u64, u64)> {
            let parts_per_batch = shards + 1;
            let outcome = collect(
                part_rx,
                parts_per_batch,
                result_label,
                &mut results,
                &mut late_sink,
                &mut dead_sink,
            );
            results.flush()?;
            late_sink.flush()?;
            dead_sink.flush()?;
            let traps = outcome?;
            Ok((
                results.records(),
                late_sink.records(),
                dead_sink.records(),
                traps,
            ))
        })
        .expect("spawning the collector thread");

    let routed = route(spec, source.as_mut(), shards, &shard_txs, &part_tx);
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
    let collected = collector.join().expect("the collector thread panicked");
    if let Some(failure) = failure {
        return Err(failure);
    }
    let (results_out, late, dead_letters, traps) = collected?;
    if let Some(store) = &store {
        store.sync()?;
    }
    let summary = Summary {
        events_in,
        results_out,
        late,
        dead_letters,
        traps,
        shards,
        elapsed: started.elapsed(),
    };
    info!(
        events_in = summary.events_in,
        results_out = summary.results_out,
        late = summary.late,
        dead_letters = summary.dead_letters,
        traps = summary.traps,
        elapsed_ms = summary.elapsed.as_millis() as u64,
        "pipeline finished"
    );
    Ok(summary)
}

/// Reads the source to its end: decodes, numbers, watermarks and routes events in batches.
/// Returns the number of events routed.
fn route(
    spec: &PipelineSpec,
    source: &mut dyn Source,
    shards: usize,
    shard_txs: &[SyncSender<ShardBatch>],
    parts: &SyncSender<(u64, Part)>,
) -> Result<u64> {
    let mut decoder = Decoder::new(&spec.key_field, &spec.timestamp_field);
    let mut watermark = BoundedOutOfOrderness::new(spec.watermark_bound);
    let mut seq = 0u64;
    let mut batch_id = 0u64;
    let mut in_batch = 0usize;
    let mut per_shard: Vec<Vec<Staged>> = (0..shards).map(|_| Vec::new()).collect();
    let mut advances = Vec::new();
    let mut dead = Vec::new();
    let send = |per_shard: &mut Vec<Vec<Staged>>,
                advances: &mut Vec<(u64, Millis)>,
                dead: &mut Vec<DeadLetter>,
                end_of_input: bool,
                batch_id: u64|
     -> bool {
        let shared = Arc::new(std::mem::take(advances));
        for (shard, tx) in shard_txs.iter().enumerate() {
            let batch = ShardBatch {
                id: batch_id,
                events: std::mem::take(&mut per_shard[shard]),
                advances: shared.clone(),
                end_of_input,
            };
            if tx.send(batch).is_err() {
                return false;
            }
        }
        parts
            .send((batch_id, Part::Router(std::mem::take(dead))))
            .is_ok()
    };
    while let Some(record) = source.next_record()? {
        let event = match record {
            Record::Event(event) => Some(event),
            Record::Line(line, bytes) => match decoder.decode(line, &bytes) {
                Ok(event) => Some(event),
                Err(dead_letter) => {
                    dead.push(dead_letter);
                    None
                }
            },
        };
        if let Some(event) = event {
            if let Some(w) = watermark.observe(event.timestamp) {
                advances.push((seq, w));
            }
            let shard = shard_of(key_group(&event.key), shards);
            per_shard[shard].push(Staged { seq, event });
            seq += 1;
        }
        in_batch += 1;
        if in_batch >= spec.batch_size {
            if !send(&mut per_shard, &mut advances, &mut dead, false, batch_id) {
                return Ok(seq); // a shard failed; `run` reports its error
            }
            batch_id += 1;
            in_batch = 0;
        }
    }
    watermark.finish();
    send(&mut per_shard, &mut advances, &mut dead, true, batch_id);
    info!(events = seq, batches = batch_id + 1, "input finished");
    Ok(seq)
}

/// Receives the parts of each batch, puts each complete batch's output in canonical order and
/// writes it, batch by batch in order. Returns the number of traps.
fn collect(
    parts: Receiver<(u64, Part)>,
    parts_per_batch: usize,
    label: Option<OperatorLabel>,
    results: &mut SinkWriter,
    late_sink: &mut SinkWriter,
    dead_sink: &mut SinkWriter,
) -> Result<u64> {
    let mut pending: BTreeMap<u64, Vec<Part>> = BTreeMap::new();
    let mut next = 0u64;
    let mut traps = 0;
    let label = label.unwrap_or(OperatorLabel {
        name: String::new(),
        version: String::new(),
    });
    while let Ok((id, part)) = parts.recv() {
        pending.entry(id).or_default().push(part);
        while pending
            .get(&next)
            .is_some_and(|p| p.len() == parts_per_batch)
        {
            let batch = pending.remove(&next).expect("a complete batch");
            next += 1;
            let mut emissions = Vec::new();
            let mut events = Vec::new();
            let mut late = Vec::new();
            let mut dead = Vec::new();
            for part in batch {
                match part {
                    Part::Router(d) => dead.extend(d),
                    Part::Shard(output) => {
                        emissions.extend(output.engine.emissions);
                        events.extend(output.events);
                        late.extend(output.engine.late);
                        dead.extend(output.engine.dead_letters);
                        traps += output.engine.traps;
                    }
                }
            }
            emissions.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
            events.sort_by_key(|staged| staged.seq);
            late.sort_by_key(|l| l.seq);
            dead.sort_by_key(|d| d.line);
            for emission in &emissions {
                results.write(&result_record(emission, &label))?;
            }
            for staged in &events {
                results.write(&event_record(&staged.event, &label))?;
            }
            for l in &late {
                late_sink.write(&late_record(l))?;
            }
            for d in &dead {
                dead_sink.write(&dead_letter_record(d))?;
            }
        }
    }
    Ok(traps)
}
