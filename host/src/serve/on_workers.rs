//! Served pipelines placed on the cluster's workers (`"workers"` in the spec): the server does
//! not run them but shares them through the NATS server their stream is on (or, for a Kafka
//! topic, the one `workers.server` names), where `weir
//! worker --pipeline <name>` processes run them in slices. Starting one shares its spec and
//! components and resumes it; stopping it has the workers give its slices up after a final
//! checkpoint; a rollout, rollback or promotion becomes the routing the workers follow (a
//! promotion also shares the rewritten spec); deleting it withdraws it with its checkpoints.
//! Its status, version counters (and so the automatic rollback policy) come from what the
//! workers report; a replay reads the stream to its end now. A savepoint copies every slice's
//! checkpoint from the cluster; a pipeline forked from one keeps the copies in [`SEED_DIR`]
//! until its first start seeds its slices with them.
//!
//! One connection per NATS server, opened on first use and kept for the process (like the
//! Wasm engine): the control plane's calls then cost a request or two each.
//!
//! Depends on `cluster`, `operator` (the registry's stored components), `rollout` and `spec`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::{Managed, RequestError};
use crate::cluster::{Cluster, Shared};
use crate::operator::Registry;
use crate::spec::{OperatorCode, PipelineSpec, Placement, SourceSpec};

/// How long a delete waits for the workers to give a stopped pipeline's slices up before it
/// withdraws the pipeline (a slice still held then is dropped without a final upload).
const GIVE_UP_WAIT: Duration = Duration::from_secs(10);

/// The directory, in a pipeline forked from a savepoint of a pipeline on workers, that holds
/// the savepoint's slices (made its own) until its first start seeds the cluster with them.
pub const SEED_DIR: &str = "seed";

/// Whether `managed` runs on workers.
pub fn placed_on_workers(managed: &Managed) -> bool {
    matches!(managed.spec.placement, Placement::Workers { .. })
}

/// The cluster of the NATS server the pipeline's stream is on, or its `[workers] nats`.
fn cluster_of(spec: &PipelineSpec) -> Result<Arc<Cluster>, RequestError> {
    match (&spec.source, &spec.placement) {
        (SourceSpec::Nats(source), _) => connect(&source.url),
        (
            _,
            Placement::Workers {
                nats: Some(url), ..
            },
        ) => connect(url),
        _ => Err(RequestError::Internal(format!(
            "pipeline {} is placed on workers but names no NATS server for them",
            spec.name
        ))),
    }
}

/// The process's connection to the cluster at `url`, opened on first use.
fn connect(url: &str) -> Result<Arc<Cluster>, RequestError> {
    static CLUSTERS: OnceLock<Mutex<BTreeMap<String, Arc<Cluster>>>> = OnceLock::new();
    let clusters = CLUSTERS.get_or_init(Mutex::default);
    if let Some(cluster) = clusters.lock().expect("clusters lock").get(url) {
        return Ok(cluster.clone());
    }
    // Connected outside the lock: a server that is away would hold every other caller.
    let cluster = Arc::new(Cluster::connect(url)?);
    let mut clusters = clusters.lock().expect("clusters lock");
    Ok(clusters.entry(url.to_owned()).or_insert(cluster).clone())
}

/// The stored component of every operator version the pipeline runs (its chain's and a
/// rollout's candidate), by `operator@version`.
fn components(
    managed: &Managed,
    registry: &Registry,
) -> Result<BTreeMap<String, PathBuf>, RequestError> {
    let mut components = BTreeMap::new();
    for (name, version) in managed.operator_versions() {
        if let OperatorCode::Stored { path, .. } = registry.code(name, version)? {
            components.insert(format!("{name}@{version}"), path);
        }
    }
    Ok(components)
}

/// Shares the pipeline with its current spec, components and routing, and has the workers run
/// it (`running`) or not.
pub fn share(managed: &Managed, registry: &Registry, running: bool) -> Result<(), RequestError> {
    let cluster = cluster_of(&managed.spec)?;
    let components = components(managed, registry)?;
    let shared = Shared {
        spec: &managed.spec,
        text: managed.addressed.to_string(),
        json: true,
        slices: None,
        components: components.clone(),
        // A served spec names no reference data (it would be a file of the caller's).
        references: BTreeMap::new(),
    };
    seed_if_forked(&cluster, managed)?;
    cluster.share(shared)?;
    if let Some(routing) = managed.routing() {
        cluster.route(&managed.name, &routing, &components)?;
    }
    cluster.set_stopped(&managed.name, !running)?;
    Ok(())
}

/// Before a forked pipeline's first share: seeds its slices with the savepoint's, then forgets
/// them (a crash before that seeds them again, the same objects). A pipeline the cluster
/// already knows runs from its own checkpoints.
fn seed_if_forked(cluster: &Cluster, managed: &Managed) -> Result<(), RequestError> {
    let seed = managed.dir.join(SEED_DIR);
    if !seed.exists() {
        return Ok(());
    }
    // A stage slice, if any, comes after the most slices there may be.
    let slices = (0..=crate::spec::MAX_SLICES)
        .take_while(|&slice| crate::checkpoint::slice_dir(&seed, slice).exists())
        .count();
    cluster.seed_slices(&managed.name, &seed, slices)?;
    std::fs::remove_dir_all(&seed).map_err(RequestError::from_io)
}

/// Refuses a fork whose placement does not fit its savepoint: one process's savepoint seeds a
/// pipeline this server runs; one cut into slices (of a pipeline on workers) seeds a pipeline
/// on workers cut into as many slices (the state is kept by slice), a stage slice among them
/// if the savepoint's pipeline had one.
pub fn check_fork_placement(
    spec: &PipelineSpec,
    savepoint: &str,
    saved: &crate::checkpoint::SavepointInfo,
) -> Result<(), RequestError> {
    let staged = usize::from(crate::cluster::staged(spec));
    let cut = saved.slices.len().saturating_sub(staged);
    let asked = match spec.placement {
        Placement::Local => None,
        Placement::Workers { .. } => Some(slice_count(spec)),
    };
    match (asked, cut) {
        (None, 0) => Ok(()),
        (None, cut) => Err(RequestError::Invalid(format!(
            "savepoint {savepoint:?} is of a pipeline on workers, cut into {cut} slices: a \
             pipeline made from it runs on workers too (\"workers\": {{\"slices\": {cut}}})"
        ))),
        (Some(_), 0) => Err(RequestError::Invalid(format!(
            "savepoint {savepoint:?} is of a pipeline this server runs: a pipeline made from it \
             runs here too; leave \"workers\" out of its spec"
        ))),
        (Some(asked), cut) if asked != cut => Err(RequestError::Invalid(format!(
            "savepoint {savepoint:?} is cut into {cut} slices, and this spec into {asked}: the \
             state is kept by slice, so give \"workers\": {{\"slices\": {cut}}}"
        ))),
        (Some(_), _) => Ok(()),
    }
}

/// Copies every slice's checkpoint of the pipeline into `target/slice-<i>/` for a savepoint:
/// of a running pipeline each slice's first upload from now (waiting at most `wait`, and no
/// longer once `abandon` says so), of a stopped one the last.
pub fn save(
    spec: &PipelineSpec,
    target: &std::path::Path,
    wait: Duration,
    abandon: &dyn Fn() -> bool,
) -> Result<usize, RequestError> {
    Ok(cluster_of(spec)?.save_slices(&spec.name, target, wait, abandon)?)
}

/// Has the workers give the pipeline's slices up, each after a final checkpoint.
pub fn stop(managed: &Managed) -> Result<(), RequestError> {
    match cluster_of(&managed.spec)?.set_stopped(&managed.name, true) {
        Err(crate::cluster::ClusterError::Unknown(_)) => Ok(()), // never started
        other => Ok(other?),
    }
}

/// Stops the pipeline, waits (at most [`GIVE_UP_WAIT`]) for its workers to give its slices up,
/// then withdraws it with its checkpoints.
pub fn withdraw(spec: &PipelineSpec) -> Result<(), RequestError> {
    Ok(cluster_of(spec)?.withdraw(&spec.name, GIVE_UP_WAIT)?)
}

/// The last sequence of the stream `source` reads, on its subjects, now (0: none).
pub fn stream_end(source: &crate::spec::NatsSourceSpec) -> Result<u64, RequestError> {
    let cluster = connect(&source.url)?;
    Ok(cluster
        .last_sequence(&source.stream, &source.subjects)
        .unwrap_or(0))
}

/// Each partition of the topic the pipeline reads on workers with its next offset at its
/// slice's last uploaded checkpoint (a slice reads one partition, and counts its next offset):
/// where a replay or repro of the topic stops, as one of a pipeline run here stops at its last
/// checkpoint. A partition no checkpoint has read yet stops at 0.
pub fn kafka_checkpointed(spec: &PipelineSpec) -> Result<BTreeMap<i32, i64>, RequestError> {
    let SourceSpec::Kafka(source) = &spec.source else {
        return Err(RequestError::Internal(format!(
            "pipeline {} does not read a Kafka topic",
            spec.name
        )));
    };
    let status = cluster_of(spec)?.status(&spec.name)?;
    let uploaded = |p: i32| status["uploaded"][p.to_string()]["sequence"].as_i64();
    let read = |p: i32| {
        status["progress"][p.to_string()]["read"]
            .as_i64()
            .unwrap_or(0)
    };
    // The slices are the partitions the topic had at deploy: one added since is not read.
    let slices = status["slices"].as_i64().unwrap_or(0);
    let partitions = topic_ends(source)?.into_keys();
    (partitions.filter(|&p| i64::from(p) < slices))
        .map(|p| match uploaded(p) {
            Some(offset) => Ok((p, offset)),
            // Nothing read, nothing to read back to: the partition's start.
            None if read(p) == 0 => Ok((p, 0)),
            None => Err(RequestError::Unavailable(format!(
                "slice {p} of pipeline {} has read its partition, but no uploaded checkpoint \
                 of it could be read (none yet, or the cluster did not answer): try again in \
                 a few seconds",
                spec.name
            ))),
        })
        .collect()
}

/// Each partition of the topic `source` reads with its next offset now; an error if the
/// brokers do not say.
pub fn topic_ends(
    source: &crate::spec::KafkaSourceSpec,
) -> Result<BTreeMap<i32, i64>, RequestError> {
    let timeout = Duration::from_secs(5);
    crate::source::topic_ends(&source.brokers, &source.topic, timeout).map_err(|e| {
        RequestError::Unavailable(format!(
            "the Kafka brokers of topic {} did not say where its partitions end: {e}",
            source.topic
        ))
    })
}

/// The last sequence of each partition of the stream the pipeline reads, now (0: none yet); an
/// error if the server does not say.
pub fn partition_ends(spec: &PipelineSpec) -> Result<Vec<u64>, RequestError> {
    let SourceSpec::Nats(source) = &spec.source else {
        return Ok(Vec::new());
    };
    let Some(partitions) = &source.partitions else {
        return Ok(Vec::new());
    };
    let cluster = connect(&source.url)?;
    (0..partitions.count)
        .map(|p| {
            let last = cluster.last_sequence_on(&source.stream, &partitions.subject_of(p))?;
            Ok(last.unwrap_or(0))
        })
        .collect()
}

/// How many slices a pipeline on workers is cut into: its spec's `workers.slices`, else its
/// stream's partition count (a Kafka topic's, as its brokers say now), else the default.
pub fn slice_count(spec: &PipelineSpec) -> usize {
    let partitions = match &spec.source {
        SourceSpec::Nats(nats) => nats.partitions.as_ref().map(|p| p.count),
        SourceSpec::Kafka(kafka) => topic_ends(kafka).ok().map(|ends| ends.len()),
        _ => None,
    };
    let asked = match spec.placement {
        Placement::Workers { slices, .. } => slices,
        Placement::Local => None,
    };
    asked
        .or(partitions)
        .unwrap_or(crate::cluster::DEFAULT_SLICES)
}

/// The counters by version of the pipeline's slices, summed (see [`Cluster::counters`]).
pub fn counters(
    spec: &PipelineSpec,
) -> Result<BTreeMap<String, crate::rollout::CounterSnapshot>, RequestError> {
    Ok(cluster_of(spec)?.counters(&spec.name)?)
}

/// What the cluster says of the pipeline (members, slice owners, progress, watermarks), or why
/// it cannot say.
pub fn status(spec: &PipelineSpec) -> serde_json::Value {
    let said = cluster_of(spec).and_then(|cluster| Ok(cluster.status(&spec.name)?));
    match said {
        Ok(status) => status,
        Err(RequestError::NotFound(_)) => serde_json::json!({"shared": false}),
        Err(e) => serde_json::json!({"error": e.to_string()}),
    }
}
