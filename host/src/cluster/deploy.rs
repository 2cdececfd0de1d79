//! Sharing a pipeline through the NATS server (`weir cluster deploy`): its spec goes into the
//! `weir-pipelines` bucket and its components and reference data into the `weir-operators`
//! object store by digest,
//! so every worker runs the same code; and what the buckets say about a shared pipeline
//! (`weir cluster status`).
//!
//! Depends on `fsutil`, `spec` and the cluster's connection.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;

use super::leases::Leases;
use super::{
    CODE_BUCKET, ClusterError, Connection, DEFAULT_SLICES, MAX_COMPONENT_BYTES, MAX_SLICES,
    NatsFailure, PIPELINES_BUCKET, Result, check_name, check_shareable,
};
use crate::spec::{OperatorCode, PipelineSpec, Placement, SourceSpec};

/// A shared pipeline as the bucket holds it (`pipelines.<name>`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PipelineRecord {
    /// The pipeline's name (the spec's).
    pub name: String,
    /// The spec's text, as deployed.
    pub spec: String,
    /// Whether the text is JSON (else TOML).
    pub json: bool,
    /// How many slices the key groups are cut into (fixed once workers ran it).
    pub slices: usize,
    /// Each component's digest (`sha256:<hex>`), by `operator@version`.
    pub code: BTreeMap<String, String>,
    /// Stopped: no worker runs a slice of it (`weir serve`'s stop).
    #[serde(default)]
    pub stopped: bool,
    /// Each enricher's reference data file's digest, by `operator@version`.
    #[serde(default)]
    pub references: BTreeMap<String, String>,
}

/// The bucket key of a shared pipeline.
pub(super) fn record_key(name: &str) -> String {
    format!("pipelines.{name}")
}

/// Shares the pipeline of the spec file at `path`, cut into `slices` slices (default: its
/// `[workers] slices`, else 6, or the count it was deployed with): its components are uploaded
/// by digest and the spec stored. Deploying again replaces the spec (workers follow it);
/// another slice count than the deployed one is refused (the state is kept by slice).
pub fn deploy(url: &str, path: &Path, slices: Option<usize>) -> Result<PipelineRecord> {
    let spec = PipelineSpec::load(path)?;
    let text = std::fs::read_to_string(path).map_err(|source| ClusterError::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut components = BTreeMap::new();
    for operator in spec.operators() {
        if let OperatorCode::Component(file) = &operator.code {
            components.insert(operator.label(), file.clone());
        }
    }
    let references = (spec.enrichers.iter())
        .filter_map(|op| Some((op.label(), op.reference.as_ref()?.path.clone())))
        .collect();
    let shared = Shared {
        spec: &spec,
        text,
        json: path.extension().is_some_and(|e| e == "json"),
        slices,
        components,
        references,
    };
    share(&Connection::open(url)?, shared)
}

/// A pipeline to share: its checked spec, the spec's text as workers will read it (operators
/// without a `module` take the component given for their `operator@version`), and the
/// component file of each `operator@version`.
pub struct Shared<'a> {
    /// The checked spec.
    pub spec: &'a PipelineSpec,
    /// Its text.
    pub text: String,
    /// Whether the text is JSON (else TOML).
    pub json: bool,
    /// The slice count asked for, if any (else the spec's `[workers] slices`, the stream's
    /// partitions, the deployed count or 6).
    pub slices: Option<usize>,
    /// The component file of each operator version, by `operator@version`.
    pub components: BTreeMap<String, PathBuf>,
    /// The reference data file of each enricher that has one, by `operator@version`.
    pub references: BTreeMap<String, PathBuf>,
}

/// Shares `shared` through `connection` (see [`deploy`]); the record as stored. A pipeline
/// shared again keeps the other versions' components a rollout added, and stays stopped if it
/// was (`weir cluster start` or the server's start resume it).
pub fn share(connection: &Connection, shared: Shared<'_>) -> Result<PipelineRecord> {
    let spec = shared.spec;
    check_name("pipeline name", &spec.name)?;
    check_shareable(spec)?;
    let existing = match fetch_record(connection, &spec.name) {
        Ok(existing) => Some(existing),
        Err(ClusterError::Unknown(_)) => None,
        Err(e) => return Err(e),
    };
    let slices = slice_count(spec, shared.slices, existing.as_ref())?;
    check_sink_partitions(spec, slices)?;
    check_stage_slice_kept(spec, existing.as_ref())?;
    let stopped = existing.as_ref().is_some_and(|e| e.stopped);
    let mut code = existing.map(|e| e.code).unwrap_or_default();
    for operator in spec.operators() {
        if matches!(operator.code, OperatorCode::Native(_)) {
            continue;
        }
        let label = operator.label();
        let file = shared.components.get(&label).ok_or_else(|| {
            ClusterError::Unshareable(format!("operator {label}: no component given for it"))
        })?;
        code.insert(label, upload_file(connection, file)?);
    }
    let mut references = BTreeMap::new();
    for operator in spec.enrichers.iter().filter(|op| op.reference.is_some()) {
        let label = operator.label();
        let file = shared.references.get(&label).ok_or_else(|| {
            ClusterError::Unshareable(format!("operator {label}: no reference data given for it"))
        })?;
        references.insert(label, upload_file(connection, file)?);
    }
    let record = PipelineRecord {
        name: spec.name.clone(),
        spec: shared.text,
        json: shared.json,
        slices,
        code,
        stopped,
        references,
    };
    store_record(connection, &record)?;
    Ok(record)
}

/// How many slices a pipeline is shared in: `asked` (`--slices`), else the spec's, else the
/// stream's partition count, else the count it was deployed with, else 6; refused if another
/// than a partition count or the deployed count (the state is kept by slice).
fn slice_count(
    spec: &PipelineSpec,
    asked: Option<usize>,
    existing: Option<&PipelineRecord>,
) -> Result<usize> {
    if let Some(slices) = asked
        && !(1..=MAX_SLICES).contains(&slices)
    {
        return Err(ClusterError::Unshareable(format!(
            "--slices {slices}: from 1 to {MAX_SLICES}"
        )));
    }
    let partitions = match &spec.source {
        SourceSpec::Nats(nats) => nats.partitions.as_ref().map(|p| p.count),
        SourceSpec::Kafka(kafka) => Some(kafka_partitions(kafka)?),
        _ => None,
    };
    let placed = match spec.placement {
        Placement::Workers { slices, .. } => slices,
        Placement::Local => None,
    };
    // A topic's partitions are only known here (a stream's were checked with the spec). Once
    // deployed, the count it was deployed with rules (a partition added since is not read).
    let first = |slices: Option<usize>| slices.filter(|_| existing.is_none());
    for (what, slices) in [
        ("--slices", first(asked)),
        ("workers.slices =", first(placed)),
    ] {
        if let (Some(partitions), Some(slices)) = (partitions, slices)
            && partitions != slices
        {
            return Err(ClusterError::Unshareable(format!(
                "{what} {slices}: a stream or topic cut into {partitions} partitions is shared \
                 in {partitions} slices, one per partition; leave the slice count out"
            )));
        }
    }
    let slices = (asked.or(placed).or(partitions))
        .or(existing.map(|existing| existing.slices))
        .unwrap_or(DEFAULT_SLICES);
    if let Some(existing) = existing
        && existing.slices != slices
    {
        return Err(ClusterError::Unshareable(format!(
            "pipeline {} is deployed in {} slices (its stream's partitions, if it is cut into \
             partitions); its state is kept by slice, so it cannot be cut into {slices}: keep the \
             partition count, or deploy it under another name",
            spec.name, existing.slices
        )));
    }
    Ok(slices)
}

/// Refuses a redeploy that adds the stage slice to a pipeline deployed without one, or takes it
/// away: the slices' results would change their way (to the sinks, or to the stage slice)
/// under the state they hold.
fn check_stage_slice_kept(spec: &PipelineSpec, existing: Option<&PipelineRecord>) -> Result<()> {
    let Some(existing) = existing else {
        return Ok(());
    };
    let before = super::stage_stream::recorded(existing);
    if before != super::stage_stream::staged(spec) {
        let (was, now) = match before {
            true => ("with", "without"),
            false => ("without", "with"),
        };
        return Err(ClusterError::Unshareable(format!(
            "pipeline {} is deployed {was} stages (or a global or pre-aggregated aggregate), and \
             this spec is {now}: its slices' state and results would change their way; withdraw \
             it first, or deploy under another name",
            spec.name
        )));
    }
    Ok(())
}

/// How many partitions the topic a shared pipeline reads has now (a slice each).
fn kafka_partitions(kafka: &crate::spec::KafkaSourceSpec) -> Result<usize> {
    let count = topic_partitions(&kafka.brokers, &kafka.topic)?;
    if count == 0 {
        return Err(ClusterError::Unshareable(format!(
            "kafka topic {} at {} does not exist: create it, with its partitions, first",
            kafka.topic, kafka.brokers
        )));
    }
    if count > MAX_SLICES {
        return Err(ClusterError::Unshareable(format!(
            "the topic has {count} partitions; a shared pipeline has a slice per partition, at \
             most {MAX_SLICES}"
        )));
    }
    Ok(count)
}

/// How many partitions Kafka topic `topic` has, as the brokers at `brokers` say (0: none).
fn topic_partitions(brokers: &str, topic: &str) -> Result<usize> {
    use rdkafka::consumer::BaseConsumer;
    let fail = |e: rdkafka::error::KafkaError| {
        ClusterError::Unshareable(format!(
            "kafka topic {topic} at {brokers}: cannot read its partitions: {e}"
        ))
    };
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(fail)?;
    let timeout = std::time::Duration::from_secs(10);
    let partitions = crate::source::topic_partitions(&consumer, topic, timeout);
    Ok(partitions.map_err(fail)?.len())
}

/// Refuses Kafka sinks whose topics have fewer partitions than the pipeline has slices: each
/// slice writes the partition of its own number, and commits it at every checkpoint.
fn check_sink_partitions(spec: &PipelineSpec, slices: usize) -> Result<()> {
    let sinks = [
        ("results", &spec.sinks.results),
        ("late", &spec.sinks.late),
        ("dead_letters", &spec.sinks.dead_letters),
    ];
    for (name, sink) in sinks {
        if let crate::spec::Sink::Kafka(kafka) = sink {
            let count = topic_partitions(&kafka.kafka, &kafka.topic)?;
            if count < slices {
                return Err(ClusterError::Unshareable(format!(
                    "sinks.{name}: kafka topic {} has {count} partitions, fewer than the \
                     pipeline's {slices} slices (each slice writes the partition of its own \
                     number): add partitions to it, or send {name} to NATS",
                    kafka.topic
                )));
            }
        }
    }
    Ok(())
}

/// Stores `record` in the pipelines bucket (workers follow it within a beat).
pub(super) fn store_record(connection: &Connection, record: &PipelineRecord) -> Result<()> {
    let bucket = connection.bucket(PIPELINES_BUCKET, std::time::Duration::ZERO)?;
    let bytes = serde_json::to_vec(record).expect("a record serialises");
    connection
        .block_on(bucket.put(record_key(&record.name), bytes.into()))
        .map(drop)
        .map_err(|e| connection.error("storing the pipeline", NatsFailure::client(e)))
}

/// Stops (`true`) or resumes the shared pipeline `name`: its workers give up its slices, each
/// after a final checkpoint uploaded, and hold none until it is resumed.
pub fn set_stopped(connection: &Connection, name: &str, stopped: bool) -> Result<()> {
    let mut record = fetch_record(connection, name)?;
    if record.stopped != stopped {
        record.stopped = stopped;
        store_record(connection, &record)?;
    }
    Ok(())
}

/// Withdraws the shared pipeline `name` with everything the cluster keeps of it (its record,
/// routing, the slices' checkpoints and what they published): its workers give its slices up
/// and idle, and a pipeline shared later under the name starts from nothing. What is already
/// gone is not an error.
pub fn withdraw(connection: &Connection, name: &str) -> Result<()> {
    check_name("pipeline name", name)?;
    let slices = match fetch_record(connection, name) {
        Ok(record) => record.slices,
        Err(ClusterError::Unknown(_)) | Err(ClusterError::Damaged(_)) => MAX_SLICES,
        Err(e) => return Err(e),
    };
    // A pipeline with stages has one slice more, which runs them.
    let slices = slices + 1;
    let mut keys = vec![record_key(name), super::rollout::routing_key(name)];
    keys.extend((0..slices).map(|slice| super::snapshots::uploaded_key(name, slice)));
    connection.purge(PIPELINES_BUCKET, std::time::Duration::ZERO, &keys)?;
    super::watermarks::forget(connection, name, slices)?;
    super::progress::forget(connection, name, slices)?;
    for slice in 0..slices {
        super::snapshots::forget(connection, name, slice)?;
    }
    super::stage_stream::forget(connection, name)
}

/// Uploads a file (a component, reference data) by its digest unless the store has it, and
/// returns the digest.
pub(super) fn upload_file(connection: &Connection, file: &Path) -> Result<String> {
    let io = |source| ClusterError::Io {
        path: file.to_owned(),
        source,
    };
    let size = std::fs::metadata(file).map_err(io)?.len();
    if size > MAX_COMPONENT_BYTES {
        return Err(ClusterError::Unshareable(format!(
            "{}: {size} bytes, more than a shared file may have ({MAX_COMPONENT_BYTES})",
            file.display()
        )));
    }
    let bytes = std::fs::read(file).map_err(io)?;
    let hex = hex_digest(&bytes);
    let store = connection.objects(CODE_BUCKET)?;
    connection
        .block_on(async {
            if store.info(&hex).await.is_ok() {
                return Ok(());
            }
            store
                .put(hex.as_str(), &mut bytes.as_slice())
                .await
                .map(drop)
        })
        .map_err(|e| connection.error("uploading a file", NatsFailure::client(e)))?;
    Ok(format!("sha256:{hex}"))
}

fn hex_digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Reads the shared pipeline `name`.
pub(super) fn fetch_record(connection: &Connection, name: &str) -> Result<PipelineRecord> {
    check_name("pipeline name", name)?;
    let bucket = connection.bucket(PIPELINES_BUCKET, std::time::Duration::ZERO)?;
    let bytes = connection
        .block_on(bucket.get(record_key(name)))
        .map_err(|e| connection.error("reading the pipeline", NatsFailure::client(e)))?
        .ok_or_else(|| ClusterError::Unknown(name.to_owned()))?;
    let record: PipelineRecord = serde_json::from_slice(&bytes)
        .map_err(|e| ClusterError::Damaged(format!("pipeline record {name}: {e}")))?;
    if record.name != name || !(1..=MAX_SLICES).contains(&record.slices) {
        return Err(ClusterError::Damaged(format!(
            "pipeline record {name}: name {:?}, {} slices",
            record.name, record.slices
        )));
    }
    Ok(record)
}

/// Downloads the file (a component, reference data) of `digest` (`sha256:<hex>`) into `dir`
/// as `<hex>.<extension>` unless it is there, and checks it against the digest: its path.
pub(super) fn fetch_file(
    connection: &Connection,
    digest: &str,
    dir: &Path,
    extension: &str,
) -> Result<std::path::PathBuf> {
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| ClusterError::Damaged(format!("component digest {digest:?}")))?;
    let path = dir.join(format!("{hex}.{extension}"));
    if std::fs::read(&path).is_ok_and(|bytes| hex_digest(&bytes) == hex) {
        return Ok(path);
    }
    let store = connection.objects(CODE_BUCKET)?;
    let bytes = connection
        .block_on(async {
            let object = store.get(hex).await.map_err(NatsFailure::client)?;
            let mut bytes = Vec::new();
            object
                .take(MAX_COMPONENT_BYTES + 1)
                .read_to_end(&mut bytes)
                .await?;
            Ok::<_, NatsFailure>(bytes)
        })
        .map_err(|e| connection.error(&format!("component {digest}"), e))?;
    if hex_digest(&bytes) != hex {
        return Err(ClusterError::Damaged(format!(
            "component {digest}: the stored bytes do not match"
        )));
    }
    crate::fsutil::write_atomic(&path, &bytes).map_err(|source| ClusterError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// What the server says about a shared pipeline: its slices, live members, and who holds
/// each slice.
pub fn status(url: &str, name: &str) -> Result<serde_json::Value> {
    status_of(&std::sync::Arc::new(Connection::open(url)?), name)
}

/// [`status`] through `connection`.
pub(super) fn status_of(
    connection: &std::sync::Arc<Connection>,
    name: &str,
) -> Result<serde_json::Value> {
    let record = fetch_record(connection, name)?;
    // The stage slice, if the pipeline has one, comes after the others.
    let staged = super::stage_stream::recorded(&record);
    let leases = Leases::open(connection.clone(), name, None)?;
    let owners: BTreeMap<String, String> = leases
        .owners()?
        .into_iter()
        .map(|(slice, owner)| (slice.to_string(), owner))
        .collect();
    let routing = super::rollout::read_routing(connection, name)?.map(|(_, routing)| routing);
    let bucket = connection.bucket(PIPELINES_BUCKET, std::time::Duration::ZERO)?;
    let mut uploaded = serde_json::Map::new();
    for slice in 0..record.slices + usize::from(staged) {
        let entry = connection.block_on(bucket.get(super::snapshots::uploaded_key(name, slice)));
        if let Ok(Some(bytes)) = entry
            && let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes)
        {
            uploaded.insert(slice.to_string(), value);
        }
    }
    // A partitioned stream's slices' watermarks (the pipeline's is the lowest of them).
    let watermarks = super::watermarks::published(connection, name, record.slices)?;
    let progress =
        super::progress::reported(connection, name, record.slices + usize::from(staged))?;
    let workers = per_worker(&progress);
    let versions = super::progress::summed(&progress);
    let progress = with_lags(
        connection,
        &record,
        &progress,
        staged.then_some(record.slices),
    )?;
    Ok(serde_json::json!({
        "pipeline": name,
        "routing": routing,
        "uploaded": uploaded,
        "watermarks": watermarks,
        "progress": progress,
        "versions": versions,
        "workers": workers,
        "slices": record.slices,
        "stage_slice": staged.then_some(record.slices),
        "stopped": record.stopped,
        "members": leases.members()?,
        "owners": owners,
    }))
}

/// Each worker's slices and its events per second, summed over them.
fn per_worker(
    progress: &BTreeMap<usize, super::progress::Progress>,
) -> BTreeMap<&str, serde_json::Value> {
    let mut workers: BTreeMap<&str, (Vec<usize>, f64)> = BTreeMap::new();
    for (slice, p) in progress {
        let entry = workers.entry(&p.worker).or_default();
        entry.0.push(*slice);
        entry.1 += p.events_per_second;
    }
    (workers.into_iter())
        .map(|(worker, (slices, rate))| {
            (
                worker,
                serde_json::json!({"slices": slices, "events_per_second": rate}),
            )
        })
        .collect()
}

/// Each slice's progress, by slice, with its `lag`: what is in its input now past what it
/// read (the stream sequences on its subjects, its partition's or the stream's; its Kafka
/// partition's offsets; the stage slice's stream).
fn with_lags(
    connection: &Connection,
    record: &PipelineRecord,
    progress: &BTreeMap<usize, super::progress::Progress>,
    stage_slice: Option<usize>,
) -> Result<serde_json::Map<String, serde_json::Value>> {
    let spec = PipelineSpec::parse(&record.spec, record.json, Path::new("."))?;
    let mut end_of = input_ends(connection, &spec, &record.name)?;
    let mut out = serde_json::Map::new();
    for (slice, p) in progress {
        let end = match Some(*slice) == stage_slice {
            true => super::stage_stream::last_sequence(connection, &record.name),
            false => end_of(*slice),
        };
        let mut value = serde_json::to_value(p).expect("serialises");
        value["lag"] = end.map(|end| end.saturating_sub(p.read)).into();
        out.insert(slice.to_string(), value);
    }
    Ok(out)
}

/// Where each slice's input ends now, by slice (`None`: not known): the last stream sequence
/// on its subjects, or its Kafka partition's next offset. The brokers are asked once at most
/// while they do not answer (a status of 64 slices would wait 2 s for each).
fn input_ends<'a>(
    connection: &'a Connection,
    spec: &'a PipelineSpec,
    pipeline: &str,
) -> Result<Box<dyn FnMut(usize) -> Option<u64> + 'a>> {
    match &spec.source {
        SourceSpec::Nats(source) => Ok(Box::new(move |slice| {
            let subjects = match &source.partitions {
                Some(partitions) => vec![partitions.subject_of(slice)],
                None => source.subjects.clone(),
            };
            super::progress::last_sequence(connection, &source.stream, &subjects)
        })),
        SourceSpec::Kafka(kafka) => {
            use rdkafka::consumer::{BaseConsumer, Consumer};
            let mut consumer: Option<BaseConsumer> = rdkafka::ClientConfig::new()
                .set("bootstrap.servers", &kafka.brokers)
                .create()
                .ok();
            Ok(Box::new(move |slice| {
                let timeout = std::time::Duration::from_secs(2);
                let asked = consumer.as_ref()?;
                let ends = asked.fetch_watermarks(&kafka.topic, slice as i32, timeout);
                if ends.is_err() {
                    consumer = None;
                }
                ends.ok().map(|(_, high)| high.max(0) as u64)
            }))
        }
        _ => Err(ClusterError::Damaged(format!(
            "pipeline record {pipeline}: its source is neither a NATS stream nor a Kafka topic"
        ))),
    }
}
