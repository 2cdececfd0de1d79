//! `weir bench`: throughput of a tumbling count-and-sum over generated events (or the same
//! events read from a JSON Lines file), for the Wasm example component and the equivalent native
//! operator, and their ratio; the same through a NATS JetStream source and sink against a file
//! (`weir bench nats`). A measurement, not a test: run it on a quiet machine, in a release
//! build.
//!
//! Depends on `cluster`, `nats_client`, `pipeline`, `source`, `spec`, `state`, `time` and `value`.

mod cluster;
mod takeover;
pub use cluster::{ClusterReport, ClusterShape, cluster};
pub use takeover::{TakeoverReport, takeover};

use std::path::PathBuf;

use crate::pipeline::{self, PipelineError, Summary};
use crate::spec::{
    GeneratorSpec, OperatorCode, OperatorSpec, PipelineSpec, Sink, SinksSpec, SourceSpec,
    StateSpec, WindowSpec,
};

/// Benchmark parameters.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Events to generate.
    pub events: u64,
    /// Distinct keys.
    pub keys: u64,
    /// Shards.
    pub shards: usize,
    /// The count-sum component (Rust).
    pub module: PathBuf,
    /// The same count-sum in other languages, by language (built with `weir build`); each is
    /// measured like the Rust one.
    pub others: Vec<(String, PathBuf)>,
    /// Events per batch.
    pub batch_size: usize,
    /// Read the generator's events from a JSON Lines file written first (decoding included).
    pub jsonl: bool,
}

/// The runs' summaries.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// With the Rust Wasm component.
    pub wasm: Summary,
    /// With each other language's component, in the order of [`BenchOptions::others`].
    pub others: Vec<(String, Summary)>,
    /// With the native operator.
    pub native: Summary,
}

impl BenchReport {
    /// Events per second of a run.
    pub fn rate(summary: &Summary) -> f64 {
        summary.events_in as f64 / summary.elapsed.as_secs_f64().max(f64::EPSILON)
    }
}

/// The benchmark's events: `events` of `keys` keys, 2 s of disorder.
fn generator(options: &BenchOptions) -> GeneratorSpec {
    GeneratorSpec {
        events: options.events,
        keys: options.keys,
        seed: 1,
        interval_ms: 1,
        max_delay_ms: 2_000,
    }
}

fn spec(options: &BenchOptions, code: OperatorCode) -> PipelineSpec {
    PipelineSpec {
        name: "bench".into(),
        source: SourceSpec::Generator(generator(options)),
        key_field: "key".into(),
        timestamp_field: "ts".into(),
        max_ahead: crate::spec::DEFAULT_MAX_AHEAD,
        watermark_bound: 2_000,
        window: Some(WindowSpec::Tumbling { size: 60_000 }),
        allowed_lateness: 0,
        enrichers: Vec::new(),
        stages: Vec::new(),
        join: None,
        global: false,
        pre_aggregate: false,
        aggregate: Some(OperatorSpec {
            name: "count-sum".into(),
            version: "bench".into(),
            code,
            reference: None,
            fields: None,
            state_ttl: None,
        }),
        state: StateSpec::Memory,
        sinks: SinksSpec {
            results: Sink::Discard,
            late: Sink::Discard,
            dead_letters: Sink::Discard,
        },
        shards: Some(options.shards),
        batch_size: options.batch_size,
        checkpoint_interval: None,
        memory_budget: crate::spec::DEFAULT_MEMORY_BUDGET,
        state_quota: Default::default(),
        max_behind: crate::spec::DEFAULT_MAX_BEHIND,
        segment_size: crate::spec::DEFAULT_SEGMENT_SIZE,
        max_rate: None,
        advance_when_idle: None,
        partition_field: None,
        idle_timeout: None,
        emit: Default::default(),
        sandbox: crate::spec::SandboxSpec::default(),
        placement: crate::spec::Placement::Local,
        quarantine: None,
    }
}

/// Linear memory for the Python and JavaScript runtimes: their garbage-collected heaps settle
/// above the default 64 MiB under sustained load (the examples' specs say the same).
const GC_RUNTIME_MEMORY: usize = 128 << 20;

/// Runs every pipeline: each component, then the native operator. With
/// [`BenchOptions::jsonl`], each reads the generator's events from a JSON Lines file instead
/// (written to a temporary directory first, not timed, removed after).
pub fn run(options: &BenchOptions) -> Result<BenchReport, PipelineError> {
    let file = match options.jsonl {
        true => Some(GeneratedLines::write(options).map_err(|e| {
            PipelineError::Config(format!("writing the benchmark's JSON Lines file: {e}"))
        })?),
        false => None,
    };
    let spec = |code: OperatorCode| {
        let mut spec = spec(options, code);
        if let Some(file) = &file {
            spec.source = SourceSpec::File(file.path.clone());
        }
        spec
    };
    let wasm = pipeline::run(&spec(OperatorCode::Component(options.module.clone())))?;
    let others = options
        .others
        .iter()
        .map(|(language, module)| {
            let mut spec = spec(OperatorCode::Component(module.clone()));
            spec.sandbox.memory = GC_RUNTIME_MEMORY;
            Ok((language.clone(), pipeline::run(&spec)?))
        })
        .collect::<Result<Vec<_>, PipelineError>>()?;
    let native = pipeline::run(&spec(OperatorCode::Native("count-sum".into())))?;
    Ok(BenchReport {
        wasm,
        others,
        native,
    })
}

/// The benchmark generator's events as a JSON Lines file in a temporary directory, removed
/// when this is dropped (however the benchmark ends).
struct GeneratedLines {
    dir: PathBuf,
    path: PathBuf,
}

impl Drop for GeneratedLines {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl GeneratedLines {
    fn write(options: &BenchOptions) -> std::io::Result<GeneratedLines> {
        let dir = tempfile_dir()?;
        let lines = GeneratedLines {
            path: dir.join("events.jsonl"),
            dir,
        };
        write_generated_lines(options, &lines.path)?;
        Ok(lines)
    }
}

/// Writes the events the benchmark's generator makes, as JSON Lines, to `path`.
fn write_generated_lines(options: &BenchOptions, path: &std::path::Path) -> std::io::Result<()> {
    use crate::source::{Generator, Record, Source};
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut source = Generator::new(generator(options));
    while let Some(record) = source.next_record().map_err(std::io::Error::other)? {
        if let Record::Event(event) = record {
            serde_json::to_writer(&mut out, &event.to_json())?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()
}

/// Throughput of the same pipeline with the redb backend, checkpointing every `interval`
/// versus never, in a temporary data directory.
pub fn checkpoint_throughput(
    options: &BenchOptions,
    interval_ms: i64,
) -> Result<(Summary, Summary), PipelineError> {
    let dir = std::env::temp_dir().join(format!("weir-bench-{}", std::process::id()));
    let mut with = spec(options, OperatorCode::Component(options.module.clone()));
    with.state = StateSpec::Redb(dir.join("with"));
    with.checkpoint_interval = Some(interval_ms);
    let mut without = with.clone();
    without.state = StateSpec::Redb(dir.join("without"));
    without.checkpoint_interval = None;
    let fresh = crate::pipeline::RunOptions {
        fresh: true,
        ..Default::default()
    };
    let result = pipeline::run_with(&with, fresh)
        .and_then(|a| Ok((a, pipeline::run_with(&without, fresh)?)));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// One row of the checkpoint-cost table.
#[derive(Debug, Clone)]
pub struct CheckpointCost {
    /// Scopes in the store before the checkpoint.
    pub state_keys: u64,
    /// Scopes changed by the checkpoint.
    pub changed: u64,
    /// Median time to hand over the changes (serialise).
    pub handover: std::time::Duration,
    /// Median time of the commit transaction.
    pub commit: std::time::Duration,
}

/// Checkpoint duration as state grows while the change per checkpoint stays fixed: for each
/// size, fills a fresh store with that many scopes, then times five checkpoints of `changed`
/// scopes each, through the real backend and commit path.
pub fn checkpoint_cost(
    sizes: &[u64],
    changed: u64,
) -> Result<Vec<CheckpointCost>, crate::state::StateError> {
    use crate::state::{RedbBackend, RedbStore};
    let mut rows = Vec::new();
    for &size in sizes {
        let dir =
            std::env::temp_dir().join(format!("weir-bench-cost-{}-{size}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = RedbStore::open(&dir)?;
        let mut backend = RedbBackend::new(store.clone(), 0);
        let mut id = cost_fill(&store, &mut backend, size)?;
        let (mut handovers, mut commits) = (Vec::new(), Vec::new());
        for round in 0..5u64 {
            id += 1;
            let (handover, commit) = cost_round(&store, &mut backend, (size, changed), round, id)?;
            handovers.push(handover);
            commits.push(commit);
        }
        handovers.sort();
        commits.sort();
        rows.push(CheckpointCost {
            state_keys: size,
            changed,
            handover: handovers[2],
            commit: commits[2],
        });
        drop(backend);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(rows)
}

/// The state key of scope `i` of [`checkpoint_cost`]: key `key-<i>` in a 1-minute window.
fn cost_key(i: u64) -> crate::state::StateKey {
    use crate::state::{Namespace, StateKey, key_group};
    let name: std::sync::Arc<str> = format!("key-{i}").into();
    StateKey {
        group: key_group(&name),
        operator: 0,
        namespace: Namespace::Window {
            start: 0,
            end: 60_000,
        },
        key: name,
    }
}

/// The state of scope `i` of [`checkpoint_cost`]: a count and a sum.
fn cost_scope(i: u64) -> crate::state::ScopeState {
    use crate::value::Value;
    let mut state = crate::state::ScopeState::default();
    state.put("count", Value::Int(i as i64));
    state.put("sum", Value::Int(i as i64 * 7));
    state
}

/// Fills `store` with `size` scopes through `backend`, 200,000 to a checkpoint; the last
/// checkpoint's id (0 for none).
fn cost_fill(
    store: &crate::state::RedbStore,
    backend: &mut crate::state::RedbBackend,
    size: u64,
) -> Result<u64, crate::state::StateError> {
    use crate::state::{StateBackend, StoredCheckpoint};
    let mut id = 0;
    let mut next = 0;
    while next < size {
        let end = (next + 200_000).min(size);
        for i in next..end {
            backend.put(cost_key(i), cost_scope(i))?;
        }
        id += 1;
        store.commit(&StoredCheckpoint {
            id,
            manifest: b"{}".to_vec(),
            state: backend.changes()?,
            ..Default::default()
        })?;
        backend.committed();
        next = end;
    }
    Ok(id)
}

/// Round `round` of [`checkpoint_cost`]: changes `changed` of the `size` scopes and commits
/// them as checkpoint `id`; how long the backend took to hand the changes over, and the
/// commit.
fn cost_round(
    store: &crate::state::RedbStore,
    backend: &mut crate::state::RedbBackend,
    (size, changed): (u64, u64),
    round: u64,
    id: u64,
) -> Result<(std::time::Duration, std::time::Duration), crate::state::StateError> {
    use crate::state::{StateBackend, StoredCheckpoint};
    for j in 0..changed {
        let i = (round * 7_919 + j * 104_729) % size.max(1);
        backend.put(cost_key(i), cost_scope(i + round))?;
    }
    let started = std::time::Instant::now();
    let state = backend.changes()?;
    let handover = started.elapsed();
    let started = std::time::Instant::now();
    store.commit(&StoredCheckpoint {
        id,
        manifest: b"{}".to_vec(),
        state,
        ..Default::default()
    })?;
    let commit = started.elapsed();
    backend.committed();
    Ok((handover, commit))
}

/// The Nexmark queries `weir bench nexmark` knows, in order.
pub const NEXMARK_QUERIES: [&str; 8] = ["q0", "q1", "q2", "q5", "q7", "q7-global", "q8", "q11"];

/// One Nexmark query's runs: with its example component and with its native twin.
#[derive(Debug, Clone)]
pub struct NexmarkRow {
    /// The query (`q7`).
    pub query: String,
    /// With the Wasm component.
    pub wasm: Summary,
    /// With the native twin.
    pub native: Summary,
}

/// The spec of Nexmark `query` over `events` events (10,000 per second of event time, memory
/// state, outputs discarded) on `shards` shards, as the examples' specs have it, with `code` for
/// the query's operator and `stage` for its second stage (Q5's top-keys).
pub fn nexmark_spec(
    query: &str,
    events: u64,
    shards: usize,
    batch_size: usize,
    code: OperatorCode,
    stage_code: OperatorCode,
) -> Result<PipelineSpec, PipelineError> {
    let (kinds, key, kind, window) = nexmark_source(query)?;
    let stages = if query == "q7-global" {
        "global = true\n"
    } else if query == "q5" {
        "[[stages]]\n[stages.window]\ntype = \"tumbling\"\nsize = \"2s\"\n\
         [stages.operator]\nname = \"hot-items\"\nkind = \"aggregate\"\nnative = \"top-keys\"\n"
    } else {
        ""
    };
    // Only the fields each query's operator reads cross into it, as in the example pipelines.
    let projection = match query {
        "q5" | "q11" => "fields = []\n",
        "q7" | "q7-global" => "fields = [\"price\", \"auction\", \"bidder\"]\n",
        "q1" => "fields = [\"auction\", \"bidder\", \"price\"]\n",
        "q2" => "fields = [\"auction\", \"price\"]\n",
        "q8" => "fields = [\"side\", \"name\"]\n",
        _ => "",
    };
    let text = format!(
        "name = \"nexmark-{query}\"\nshards = {shards}\nbatch_size = {batch_size}\n\
         checkpoint_interval = \"off\"\n\
         [source]\ntype = \"nexmark\"\nevents = {events}\nrate = 10000\nseed = 1\n{kinds}\n\
         [event]\nkey = \"{key}\"\ntimestamp = \"date_time\"\n{window}\n\
         [[operators]]\nname = \"nexmark-{query}\"\nkind = \"{kind}\"\nnative = \"nexmark-{query}\"\n{projection}{stages}\
         [state]\nbackend = \"memory\"\n\
         [sinks]\nresults = \"discard\"\nlate = \"discard\"\ndead_letters = \"discard\"\n"
    );
    let mut spec = PipelineSpec::parse(&text, false, std::path::Path::new("."))?;
    for operator in spec.enrichers.iter_mut().chain(spec.aggregate.as_mut()) {
        operator.code = code.clone();
    }
    for stage in &mut spec.stages {
        stage.aggregate.code = stage_code.clone();
    }
    Ok(spec)
}

/// What Nexmark `query` reads and how: the `[source]` line selecting its event kinds, the key
/// field, its operator's kind and its `[window]` (and `[join]`) table, each as spec text.
fn nexmark_source(
    query: &str,
) -> Result<(&'static str, &'static str, &'static str, &'static str), PipelineError> {
    Ok(match query {
        "q0" => ("", "kind", "enrich", ""),
        "q1" | "q2" => ("kinds = [\"bid\"]", "auction", "enrich", ""),
        "q5" => (
            "kinds = [\"bid\"]",
            "auction",
            "aggregate",
            "[window]\ntype = \"sliding\"\nsize = \"10s\"\nslide = \"2s\"",
        ),
        "q7" => (
            "kinds = [\"bid\"]",
            "kind",
            "aggregate",
            "[window]\ntype = \"tumbling\"\nsize = \"10s\"",
        ),
        "q7-global" => (
            "kinds = [\"bid\"]",
            "auction",
            "aggregate",
            "[window]\ntype = \"tumbling\"\nsize = \"10s\"",
        ),
        "q8" => (
            "kinds = [\"person\", \"auction\"]",
            "id",
            "aggregate",
            "[window]\ntype = \"tumbling\"\nsize = \"10s\"\n[join]\nfield = \"kind\"\n\
             left = { value = \"person\", key = \"id\" }\n\
             right = { value = \"auction\", key = \"seller\" }",
        ),
        "q11" => (
            "kinds = [\"bid\"]",
            "bidder",
            "aggregate",
            "[window]\ntype = \"session\"\ngap = \"10s\"",
        ),
        other => {
            return Err(PipelineError::Config(format!(
                "no Nexmark query {other:?} here: use one of {}",
                NEXMARK_QUERIES.join(", ")
            )));
        }
    })
}

/// Runs each Nexmark query in `queries` with its component (`components/weir_example_nexmark_<query>.wasm`)
/// and natively.
pub fn nexmark(
    queries: &[String],
    events: u64,
    shards: usize,
    batch_size: usize,
    components: &std::path::Path,
) -> Result<Vec<NexmarkRow>, PipelineError> {
    queries
        .iter()
        .map(|query| {
            let base = query.trim_end_matches("-global");
            let module = components.join(format!("weir_example_nexmark_{base}.wasm"));
            let top_keys = components.join("weir_example_top_keys.wasm");
            let wasm = nexmark_spec(
                query,
                events,
                shards,
                batch_size,
                OperatorCode::Component(module),
                OperatorCode::Component(top_keys),
            )?;
            let native = nexmark_spec(
                query,
                events,
                shards,
                batch_size,
                OperatorCode::Native(format!("nexmark-{base}")),
                OperatorCode::Native("top-keys".into()),
            )?;
            Ok(NexmarkRow {
                query: query.clone(),
                wasm: pipeline::run(&wasm)?,
                native: pipeline::run(&native)?,
            })
        })
        .collect()
}

/// What [`recovery`] measured.
#[derive(Debug, Clone)]
pub struct RecoveryReport {
    /// Events routed before the stop that left the checkpoint.
    pub events: u64,
    /// Bytes of the data directory at the checkpoint.
    pub data_bytes: u64,
    /// From the start of the resumed run to its end (it stops at once): recovery, restoring
    /// the open windows, and one checkpoint of nothing.
    pub restart: std::time::Duration,
}

/// Recovery time: a tumbling count-sum over `keys` keys with one-day windows (so every key's
/// window is still open) runs on the redb backend, checkpointing every second, until `events`
/// events are in, and is stopped; the time a restart on that data directory takes until it
/// is running again is then measured, with a restart that is stopped at once.
pub fn recovery(options: &BenchOptions, events: u64) -> Result<RecoveryReport, PipelineError> {
    use crate::pipeline::{PipelineControl, ResolveError, RunOptions};
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    let dir = std::env::temp_dir().join(format!("weir-bench-recovery-{}", std::process::id()));
    let mut spec = spec(options, OperatorCode::Native("count-sum".into()));
    spec.source = SourceSpec::Generator(GeneratorSpec {
        events: events.saturating_mul(2),
        keys: options.keys,
        seed: 1,
        interval_ms: 1,
        max_delay_ms: 0,
    });
    spec.window = Some(WindowSpec::Tumbling { size: 86_400_000 });
    spec.state = StateSpec::Redb(dir.clone());
    spec.checkpoint_interval = Some(1_000);
    let control = || {
        Arc::new(PipelineControl::new(
            "bench-recovery",
            Box::new(|_, version| Err(ResolveError::Failed(format!("no version {version} here")))),
            None,
        ))
    };
    let first = control();
    let watcher = {
        let first = first.clone();
        std::thread::spawn(move || {
            while first.stats.events_in.load(Ordering::Relaxed) < events && !first.stopping() {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            first.stop();
        })
    };
    let result = (|| {
        let stopped = pipeline::run_controlled(
            &spec,
            RunOptions {
                fresh: true,
                ..Default::default()
            },
            Some(first.clone()),
        )?;
        first.stop();
        let data_bytes = std::fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0);
        let second = control();
        second.stop();
        let resumed = pipeline::run_controlled(&spec, RunOptions::default(), Some(second))?;
        Ok(RecoveryReport {
            events: stopped.events_in,
            data_bytes,
            restart: resumed.elapsed,
        })
    })();
    let _ = watcher.join();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// What `weir bench nats` measured.
#[derive(Debug, Clone)]
pub struct NatsReport {
    /// The same events from a JSON Lines file, results discarded.
    pub file: Summary,
    /// From a JetStream stream, results published to a JetStream subject.
    pub nats: Summary,
    /// Publishing the events into the stream (not part of the pipeline), events/s.
    pub publish_rate: f64,
}

/// The count-sum over `options.events` events read from a JSON Lines file, then from a
/// JetStream stream of the NATS server at `url` with the results published back to it (one
/// process). The streams it creates are deleted afterwards.
pub fn nats(
    options: &BenchOptions,
    url: &str,
    per_message: usize,
) -> Result<NatsReport, PipelineError> {
    let fail = |e: SetupError| PipelineError::Config(format!("NATS benchmark at {url}: {e}"));
    let dir = tempfile_dir().map_err(|e| fail(e.into()))?;
    let lines = event_lines(options.events, options.keys);
    let file = dir.join("events.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").map_err(|e| fail(e.into()))?;
    let mut file_spec = spec(options, OperatorCode::Component(options.module.clone()));
    file_spec.source = SourceSpec::File(file);
    let file_run = pipeline::run(&file_spec)?;

    let nonce = format!("{}{}", std::process::id(), crate::time::wall_clock_ms());
    let (events, results) = (
        format!("WEIR_BENCH_{nonce}"),
        format!("WEIR_BENCH_OUT_{nonce}"),
    );
    let (runtime, jetstream) = jetstream_client(url).map_err(fail)?;
    let started = std::time::Instant::now();
    runtime
        .block_on(publish_all(
            &jetstream,
            (&events, &results, &nonce),
            &lines,
            per_message,
        ))
        .map_err(fail)?;
    let publish_rate = lines.len() as f64 / started.elapsed().as_secs_f64();
    let mut nats_spec = spec(options, OperatorCode::Component(options.module.clone()));
    nats_spec.source = SourceSpec::Nats(crate::spec::NatsSourceSpec {
        until: None,
        partitions: None,
        partition: None,
        url: url.into(),
        stream: events.clone(),
        subjects: Vec::new(),
    });
    nats_spec.sinks.results = Sink::Nats(crate::spec::NatsSinkSpec {
        nats: url.into(),
        subject: format!("bench-results.{nonce}"),
    });
    let nats_run = run_until(&nats_spec, options.events)?;
    runtime.block_on(async {
        let _ = jetstream.delete_stream(&events).await;
        let _ = jetstream.delete_stream(&results).await;
    });
    let _ = std::fs::remove_dir_all(&dir);
    Ok(NatsReport {
        file: file_run,
        nats: nats_run,
        publish_rate,
    })
}

/// What `weir bench kafka` measured.
#[derive(Debug, Clone)]
pub struct KafkaReport {
    /// The same events from a JSON Lines file, results discarded.
    pub file: Summary,
    /// From the topic, results produced to another in transactions, a checkpoint a second.
    pub kafka: Summary,
    /// Producing the events into the topic (not part of the pipeline), events/s.
    pub produce_rate: f64,
    /// Whose brokers: the address given, or librdkafka's mock cluster in this process.
    pub brokers: String,
}

/// The count-sum over `options.events` events read from a JSON Lines file, then from a Kafka
/// topic of `partitions` partitions with the results produced to another topic in
/// transactions (checkpoints every second): at `brokers`, or in a mock cluster started here.
pub fn kafka(
    options: &BenchOptions,
    brokers: Option<&str>,
    partitions: i32,
) -> Result<KafkaReport, PipelineError> {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let fail = |e: &dyn std::fmt::Display| PipelineError::Config(format!("Kafka benchmark: {e}"));
    let dir = tempfile_dir().map_err(|e| fail(&e))?;
    let lines = event_lines(options.events, options.keys);
    let file = dir.join("events.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").map_err(|e| fail(&e))?;
    let mut file_spec = spec(options, OperatorCode::Component(options.module.clone()));
    file_spec.source = SourceSpec::File(file);
    let file_run = pipeline::run(&file_spec)?;

    let nonce = format!("{}{}", std::process::id(), crate::time::wall_clock_ms());
    let (events, results) = (
        format!("weir-bench-{nonce}"),
        format!("weir-bench-out-{nonce}"),
    );
    let mock = match brokers {
        Some(_) => None,
        None => {
            let cluster: rdkafka::mocking::MockCluster<'static, DefaultProducerContext> =
                rdkafka::mocking::MockCluster::new(1).map_err(|e| fail(&e))?;
            cluster
                .create_topic(&events, partitions, 1)
                .map_err(|e| fail(&e))?;
            cluster.create_topic(&results, 1, 1).map_err(|e| fail(&e))?;
            Some(cluster)
        }
    };
    let servers = match (&mock, brokers) {
        (Some(cluster), _) => cluster.bootstrap_servers(),
        (None, Some(brokers)) => brokers.to_owned(),
        (None, None) => unreachable!("a mock without brokers"),
    };
    let producer: ThreadedProducer<DefaultProducerContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &servers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("batch.num.messages", "10000")
        .create()
        .map_err(|e| fail(&e))?;
    let started = std::time::Instant::now();
    for (i, line) in lines.iter().enumerate() {
        let partition = (i % options.keys as usize) as i32 % partitions;
        loop {
            let record = BaseRecord::<(), str>::to(&events)
                .partition(partition)
                .payload(line);
            match producer.send(record) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(
                        rdkafka::types::RDKafkaErrorCode::QueueFull,
                    ),
                    _,
                )) => std::thread::sleep(std::time::Duration::from_millis(1)),
                Err((e, _)) => return Err(fail(&e)),
            }
        }
    }
    producer
        .flush(std::time::Duration::from_secs(120))
        .map_err(|e| fail(&e))?;
    let produce_rate = lines.len() as f64 / started.elapsed().as_secs_f64();
    let mut kafka_spec = spec(options, OperatorCode::Component(options.module.clone()));
    kafka_spec.name = format!("bench-kafka-{nonce}");
    kafka_spec.source = SourceSpec::Kafka(crate::spec::KafkaSourceSpec {
        brokers: servers.clone(),
        topic: events,
        group: None,
        headers: false,
        until: None,
        partition: None,
    });
    kafka_spec.sinks.results = Sink::Kafka(crate::spec::KafkaSinkSpec {
        kafka: servers.clone(),
        topic: results,
        transactions: true,
        partition: 0,
        read_back_from: None,
    });
    kafka_spec.state = StateSpec::Redb(dir.join("data"));
    kafka_spec.checkpoint_interval = Some(1_000);
    let kafka_run = run_until(&kafka_spec, options.events)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(KafkaReport {
        file: file_run,
        kafka: kafka_run,
        produce_rate,
        brokers: match mock {
            Some(_) => "librdkafka's mock cluster in this process".into(),
            None => servers,
        },
    })
}

/// When the NATS benchmarks' events begin (ms since the epoch: 2026-01-01).
const EVENTS_FROM_MS: i64 = 1_767_225_600_000;

/// The NATS benchmarks' events as JSON Lines: `events` of `keys` keys, one per ms from
/// [`EVENTS_FROM_MS`], amounts 0-99.
fn event_lines(events: u64, keys: u64) -> Vec<String> {
    (0..events)
        .map(|i| {
            format!(
                "{{\"key\":\"k{}\",\"ts\":{},\"amount\":{}}}",
                i % keys,
                EVENTS_FROM_MS + i as i64,
                i % 100
            )
        })
        .collect()
}

/// What a NATS or cluster benchmark's setup failed on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    #[error(transparent)]
    Client(#[from] crate::nats_client::NatsClientError),
    #[error(transparent)]
    Nats(Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{}: {source}", .path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
    #[error("{got} of {want} results after 15 minutes")]
    Incomplete { got: u64, want: usize },
}

impl SetupError {
    /// The NATS client's error `e`.
    pub(crate) fn nats(e: impl std::error::Error + Send + Sync + 'static) -> SetupError {
        SetupError::Nats(Box::new(e))
    }
}

/// A JetStream client of the server at `url`, on a small runtime of its own.
fn jetstream_client(
    url: &str,
) -> Result<(tokio::runtime::Runtime, async_nats::jetstream::Context), SetupError> {
    let runtime = crate::nats_client::client_runtime()?;
    let client = runtime
        .block_on(async_nats::connect(url))
        .map_err(SetupError::nats)?;
    let jetstream = {
        let _inside = runtime.enter();
        async_nats::jetstream::new(client)
    };
    Ok((runtime, jetstream))
}

/// A fresh temporary directory.
fn tempfile_dir() -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "weir-bench-{}-{}",
        std::process::id(),
        crate::time::wall_clock_ms()
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Creates each `(stream, subject)` stream of a NATS bench.
pub(crate) async fn create_streams(
    jetstream: &async_nats::jetstream::Context,
    streams: [(&str, String); 2],
) -> Result<(), SetupError> {
    for (name, subject) in streams {
        let config = async_nats::jetstream::stream::Config {
            name: name.to_owned(),
            subjects: vec![subject],
            ..Default::default()
        };
        jetstream
            .create_stream(config)
            .await
            .map_err(SetupError::nats)?;
    }
    Ok(())
}

/// Creates the events and results streams and publishes `lines` into the first,
/// `per_message` to a message (JSON Lines).
async fn publish_all(
    jetstream: &async_nats::jetstream::Context,
    (events, results, nonce): (&str, &str, &str),
    lines: &[String],
    per_message: usize,
) -> Result<(), SetupError> {
    let subject = format!("bench.{nonce}");
    create_streams(
        jetstream,
        [
            (events, subject.clone()),
            (results, format!("bench-results.{nonce}")),
        ],
    )
    .await?;
    let messages: Vec<String> = lines
        .chunks(per_message.max(1))
        .map(|m| m.join("\n"))
        .collect();
    // The context lets 5,000 publishes wait for their acknowledgements at once.
    for chunk in messages.chunks(2_000) {
        let mut acks = Vec::with_capacity(chunk.len());
        for message in chunk {
            let ack = jetstream
                .publish(
                    subject.clone(),
                    bytes::Bytes::copy_from_slice(message.as_bytes()),
                )
                .await
                .map_err(SetupError::nats)?;
            acks.push(ack);
        }
        for ack in acks {
            ack.await.map_err(SetupError::nats)?;
        }
    }
    Ok(())
}

/// Runs `spec` (an endless source) until it has read `events` events, then stops it.
fn run_until(spec: &PipelineSpec, events: u64) -> Result<Summary, PipelineError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let control = pipeline::standalone_control(&spec.name);
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let watcher = {
        let (control, done) = (control.clone(), done.clone());
        std::thread::spawn(move || {
            while control.stats.events_in.load(Ordering::Relaxed) < events
                && !done.load(Ordering::Relaxed)
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            control.stop();
        })
    };
    let summary = pipeline::run_controlled(spec, pipeline::RunOptions::default(), Some(control));
    done.store(true, Ordering::Relaxed);
    let _ = watcher.join();
    summary
}
