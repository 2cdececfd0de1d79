//! Scale-out over NATS JetStream: several `weir worker` processes share a pipeline.
//!
//! A shared pipeline's 32,768 key groups are cut into a fixed number of **slices** (contiguous
//! ranges). Each slice is run by exactly one worker at a time, as a pipeline run of its own
//! that reads the whole input stream and processes only its slice's keys
//! ([`crate::pipeline::KeyGroups`]); so its watermark, and therefore its results, are those of
//! a single process, restricted to its keys. Who runs which slice is decided through a
//! JetStream key-value bucket (`leases.rs`: membership and slice leases that expire when not
//! renewed); each slice's checkpoints are uploaded to a JetStream object store
//! (`snapshots.rs`), from which the next owner restores it and resumes its input from the
//! recorded stream sequence. Results are published with their ids as `Nats-Msg-Id`, so what a
//! new owner publishes again after a takeover is dropped by the stream's de-duplication.
//!
//! The pipeline's spec and operator components are shared through the same server
//! (`deploy.rs`: `weir cluster deploy`, or `weir serve` through [`Cluster`], which also stops,
//! steers and withdraws it); `worker.rs` is the worker's loop, which follows the shared record
//! (a changed spec, a stop, a withdrawal) and routing every beat.
//!
//! May depend on `pipeline`, `spec`, `checkpoint`, `state`, `names`, `nats_client`, `source` (its
//! NATS feed), `operator` (checking a rollout's component), `rollout` (its routing), `time` and
//! `fsutil`; nothing depends on it but the binary, `serve` (pipelines it places on workers,
//! through [`Cluster`]) and `bench` (`weir bench nats --workers`).

mod delta;
mod deploy;
mod leases;
mod liveness;
mod periodic;
mod progress;
mod renewer;
mod rollout;
mod savepoints;
mod snapshots;
mod stage_stream;
pub use stage_stream::staged;
mod watermarks;
mod worker;

use std::time::Duration;

pub use deploy::{PipelineRecord, Shared, deploy, status};
pub use rollout::{rollback, rollout};
pub use worker::{Worker, WorkerOptions};

use crate::spec::{OperatorCode, PipelineSpec, Sink, SourceSpec};

/// The key-value bucket holding shared pipelines (`pipelines.<name>`).
const PIPELINES_BUCKET: &str = "weir-pipelines";
/// The key-value bucket of members and slice leases: entries expire [`LEASE`] after their last
/// write, so a process that stops renewing loses them.
const LEASES_BUCKET: &str = "weir-leases";
/// The object store of operator components, by digest.
const CODE_BUCKET: &str = "weir-operators";
/// The object stores of slice checkpoints: this, `-<pipeline>-<slice>` (`snapshots.rs`).
const CHECKPOINTS_BUCKET: &str = "weir-checkpoints";

/// How long a lease (a membership, a slice) lives without being renewed.
pub const LEASE: Duration = Duration::from_secs(5);
/// How often a worker renews its leases and looks at the membership.
pub const BEAT: Duration = Duration::from_secs(1);
/// The most slices a pipeline may be cut into.
pub const MAX_SLICES: usize = crate::spec::MAX_SLICES;
/// The default number of slices (divides among 1, 2, 3 and 6 workers evenly).
pub const DEFAULT_SLICES: usize = 6;
/// The largest component accepted for sharing.
const MAX_COMPONENT_BYTES: u64 = 256 << 20;

/// What can go wrong sharing a pipeline.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The NATS server could not be reached or refused a request.
    #[error("NATS at {url}: {what}: {source}")]
    Nats {
        /// The server.
        url: String,
        /// What was being done.
        what: String,
        /// Why it failed.
        source: NatsFailure,
    },
    /// The spec cannot be shared by several workers.
    #[error("this pipeline cannot be shared by workers: {0}")]
    Unshareable(String),
    /// A name (pipeline, worker) is not acceptable.
    #[error("{0}")]
    BadName(String),
    /// A name (pipeline, worker, version) breaks the name rule.
    #[error(transparent)]
    Name(#[from] crate::names::NameError),
    /// The worker's NATS feed of the pipeline's source could not start.
    #[error("this pipeline cannot be shared by workers: {0}")]
    Feed(#[source] crate::source::SourceError),
    /// The spec (from a file or from the bucket) is not valid.
    #[error(transparent)]
    Spec(#[from] crate::spec::SpecError),
    /// The shared pipeline is not there.
    #[error("no pipeline {0:?} is deployed on this NATS server: `weir cluster deploy` it first")]
    Unknown(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// A stored record or component is damaged or does not match its digest.
    #[error("damaged shared data: {0}")]
    Damaged(String),
    /// A savepoint could not be taken or seeded (no checkpoint yet, a pipeline shared already).
    #[error("{0}")]
    NotSaved(String),
    /// Slices uploaded no checkpoint within the time a savepoint waits.
    #[error(
        "pipeline {pipeline:?}: slices {slices:?} did not reach a checkpoint to save within \
         {seconds} s (is a worker running them, or still giving them up?); take the savepoint \
         again"
    )]
    NoCheckpointInTime {
        /// The pipeline.
        pipeline: String,
        /// The slices that did not.
        slices: Vec<usize>,
        /// How long it waited.
        seconds: u64,
    },
    /// Workers still hold slices of a pipeline being withdrawn.
    #[error(
        "pipeline {pipeline:?}: its workers still hold slices after {seconds} s; withdraw it \
         again once they have given them up"
    )]
    StillHeld {
        /// The pipeline.
        pipeline: String,
        /// How long the withdrawal waited.
        seconds: u64,
    },
}

/// Why a request to the NATS server failed (the source of [`ClusterError::Nats`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NatsFailure {
    /// The client's own error (connecting, a stream, bucket or object request).
    #[error(transparent)]
    Client(Box<dyn std::error::Error + Send + Sync>),
    /// The address is not one the cluster connects to.
    #[error("the server is a nats://host:port (or tls://host:port) address")]
    NotNatsUrl,
    /// The client is not connected now (it reconnects by itself).
    #[error("not connected")]
    NotConnected,
    /// No answer within the time allowed.
    #[error("no answer within {} s", .0.as_secs())]
    TimedOut(Duration),
    /// A listing stopped sending before its end, or did not end in time.
    #[error("the listing stalled or did not end")]
    ListingStalled,
    /// An object larger than it can be.
    #[error("{0} bytes, more than a delta can be")]
    TooLarge(u64),
    /// A local file (a checkpoint copy, a download) could not be read or written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A background transfer failed or panicked.
    #[error("the transfer failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl NatsFailure {
    /// The client's error `e`.
    pub(crate) fn client(e: impl std::error::Error + Send + Sync + 'static) -> NatsFailure {
        NatsFailure::Client(Box::new(e))
    }
}

impl From<tokio::time::error::Elapsed> for NatsFailure {
    fn from(_: tokio::time::error::Elapsed) -> NatsFailure {
        NatsFailure::TimedOut(REQUEST_TIMEOUT)
    }
}

/// How long one request to the server may wait for its answer ([`timed`]).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// `Result` for the cluster.
pub type Result<T, E = ClusterError> = std::result::Result<T, E>;

/// Checks a name used in bucket keys and subjects: the name rule; a worker's has no dots (a
/// dot separates a key's parts, and a worker's name is the last); a pipeline's may have them
/// (a tenant's pipeline is `<tenant>.<name>`: every key family has a fixed number of parts
/// after the pipeline's, so names never meet, and listings of members and leases skip what
/// has a dot after the prefix), but none last, where a key would have an empty part.
fn check_name(what: &'static str, name: &str) -> Result<()> {
    crate::names::check(what, name)?;
    let pipeline = what == "pipeline name";
    if (!pipeline && name.contains('.')) || name.ends_with('.') {
        return Err(ClusterError::BadName(format!(
            "{what} {name:?}: no dots in a worker's name, and none at the end of a shared \
             pipeline's"
        )));
    }
    Ok(())
}

/// The name of `pipeline`'s JetStream store or stream called `prefix`: such a name cannot have
/// dots, so the name of a pipeline that has them (a tenant's) is written in hexadecimal, after
/// `_x`: `_` never follows the prefix otherwise (`-` does), so no two pipelines share one.
fn dotless_name(prefix: &str, pipeline: &str) -> String {
    if pipeline.contains('.') {
        let hex: String = pipeline.bytes().map(|b| format!("{b:02x}")).collect();
        return format!("{prefix}_x-{hex}");
    }
    format!("{prefix}-{pipeline}")
}

/// Refuses what several workers cannot share: input other than a NATS stream or a Kafka topic,
/// results other than NATS subjects or Kafka topics, and files (a slice moves between
/// machines). Stages, global and pre-aggregated aggregates run on a slice of their own, fed by
/// the others through a stream (`stage_stream.rs`), and write NATS subjects only.
pub fn check_shareable(spec: &PipelineSpec) -> Result<()> {
    check_name("pipeline name", &spec.name)?;
    let refuse = |why: &str| Err(ClusterError::Unshareable(why.to_owned()));
    if !matches!(spec.source, SourceSpec::Nats(_) | SourceSpec::Kafka(_)) {
        return refuse(
            "its source must be a NATS stream or a Kafka topic ([source] type = \"nats\" or \"kafka\")",
        );
    }
    if !matches!(spec.sinks.results, Sink::Nats(_) | Sink::Kafka(_)) {
        return refuse(
            "its results must go to NATS or Kafka (results = { nats = ..., subject = ... } or { kafka = ..., topic = ... })",
        );
    }
    for (name, sink) in [
        ("late", &spec.sinks.late),
        ("dead_letters", &spec.sinks.dead_letters),
    ] {
        if matches!(sink, Sink::File(_)) {
            return Err(ClusterError::Unshareable(format!(
                "sinks.{name} is a file, which a slice moving to another machine cannot take along: use a NATS subject or a Kafka topic"
            )));
        }
    }
    stage_stream::check(spec)?;
    if spec.checkpoint_interval.is_none() {
        return refuse("it needs a checkpoint_interval: slices move by their checkpoints");
    }
    for operator in spec.operators() {
        if !matches!(
            operator.code,
            OperatorCode::Component(_)
                | OperatorCode::Native(_)
                | OperatorCode::Stored { .. }
                | OperatorCode::Registry
        ) {
            return Err(ClusterError::Unshareable(format!(
                "operator {}: a component file or a built-in",
                operator.name
            )));
        }
    }
    Ok(())
}

/// A control plane's hold on the cluster (`weir serve`, for its pipelines placed on workers):
/// shares, steers, stops and withdraws pipelines and reads their status. Its methods block
/// (each request waits at most a few seconds for the server).
pub struct Cluster {
    connection: std::sync::Arc<Connection>,
}

impl Cluster {
    /// Connects to the cluster's NATS server at `url` (see [`Connection::open`]).
    pub fn connect(url: &str) -> Result<Cluster> {
        Ok(Cluster {
            connection: std::sync::Arc::new(Connection::open(url)?),
        })
    }

    /// Shares a pipeline (see [`deploy::share`]); it keeps running or stopped as it was.
    pub fn share(&self, shared: Shared<'_>) -> Result<PipelineRecord> {
        deploy::share(&self.connection, shared)
    }

    /// Stops or resumes a shared pipeline (see [`deploy::set_stopped`]).
    pub fn set_stopped(&self, name: &str, stopped: bool) -> Result<()> {
        deploy::set_stopped(&self.connection, name, stopped)
    }

    /// Stops a shared pipeline, waits up to `wait` for its workers to give every slice up
    /// (a slice still held would upload its final checkpoint after its store is gone:
    /// [`ClusterError::StillHeld`] then), and withdraws it with its checkpoints (see
    /// [`deploy::withdraw`]). A pipeline not shared, or a withdrawal cut short, is withdrawn
    /// all the same.
    pub fn withdraw(&self, name: &str, wait: Duration) -> Result<()> {
        match self.set_stopped(name, true) {
            Err(ClusterError::Unknown(_)) => {}
            other => other?,
        }
        let deadline = std::time::Instant::now() + wait;
        while self.holders(name)? > 0 {
            if std::time::Instant::now() >= deadline {
                return Err(ClusterError::StillHeld {
                    pipeline: name.to_owned(),
                    seconds: wait.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        deploy::withdraw(&self.connection, name)
    }

    /// Routes a shared pipeline's keys (see [`rollout::route`]).
    pub fn route(
        &self,
        name: &str,
        routing: &crate::rollout::Routing,
        components: &std::collections::BTreeMap<String, std::path::PathBuf>,
    ) -> Result<()> {
        rollout::route(&self.connection, name, routing, components)
    }

    /// What the server says of a shared pipeline (see [`status`]).
    pub fn status(&self, name: &str) -> Result<serde_json::Value> {
        deploy::status_of(&self.connection, name)
    }

    /// The counters by version of the runs of `name`'s slices, summed (what the workers last
    /// reported: a slice that moved counts from its new start).
    pub fn counters(
        &self,
        name: &str,
    ) -> Result<std::collections::BTreeMap<String, crate::rollout::CounterSnapshot>> {
        let record = deploy::fetch_record(&self.connection, name)?;
        let reported = progress::reported(&self.connection, name, record.slices)?;
        Ok(progress::summed(&reported))
    }

    /// The last sequence of `stream` on `subjects` (all when empty), if the server says.
    pub fn last_sequence(&self, stream: &str, subjects: &[String]) -> Option<u64> {
        progress::last_sequence(&self.connection, stream, subjects)
    }

    /// Copies every slice's checkpoint of `name` into `target/slice-<i>/`, for a savepoint (see
    /// [`savepoints::save`]); the slice count.
    pub fn save_slices(
        &self,
        name: &str,
        target: &std::path::Path,
        wait: Duration,
        abandon: &dyn Fn() -> bool,
    ) -> Result<usize> {
        savepoints::save(&self.connection, name, target, wait, abandon)
    }

    /// Seeds the `slices` slices of `name`, not shared yet, from a savepoint's copies in
    /// `source/slice-<i>/` (see [`savepoints::seed`]).
    pub fn seed_slices(&self, name: &str, source: &std::path::Path, slices: usize) -> Result<()> {
        savepoints::seed(&self.connection, name, source, slices)
    }

    /// The last sequence of `stream` on `subject`: `None` if it holds no message there, an
    /// error if the server does not say.
    pub fn last_sequence_on(&self, stream: &str, subject: &str) -> Result<Option<u64>> {
        progress::last_sequence_on(&self.connection, stream, subject)
    }

    /// The workers holding slices of `name` now.
    pub fn holders(&self, name: &str) -> Result<usize> {
        let leases = leases::Leases::open(self.connection.clone(), name, None)?;
        Ok(leases.owners()?.len())
    }
}

/// A connection to the NATS server with the buckets the cluster uses, on a small runtime of
/// its own; its methods block.
pub(crate) struct Connection {
    url: String,
    pub(super) runtime: tokio::runtime::Runtime,
    pub(super) jetstream: async_nats::jetstream::Context,
}

impl Connection {
    /// Connects, failing if within 10 s (`nats_client::FIRST_CONNECT`) no server answers
    /// or the server refuses the client.
    pub(crate) fn open(url: &str) -> Result<Connection> {
        let fail = |source: NatsFailure| ClusterError::Nats {
            url: url.to_owned(),
            what: "connecting".to_owned(),
            source,
        };
        let scheme = url.starts_with("nats://") || url.starts_with("tls://");
        if !scheme || url.len() > 1024 || url.contains(char::is_whitespace) {
            return Err(fail(NatsFailure::NotNatsUrl));
        }
        let runtime =
            crate::nats_client::client_runtime().map_err(|e| fail(NatsFailure::client(e)))?;
        let watch = crate::nats_client::ClientWatch::default();
        let client = runtime.block_on(async {
            let client = (crate::nats_client::connect_options(&watch)
                .connect(url)
                .await)
                .map_err(|e| fail(NatsFailure::client(e)))?;
            crate::nats_client::first_connection(&client, &watch)
                .await
                .map_err(|e| fail(NatsFailure::client(e)))?;
            Ok::<_, ClusterError>(client)
        })?;
        let jetstream = {
            let _inside = runtime.enter();
            async_nats::jetstream::new(client)
        };
        Ok(Connection {
            url: url.to_owned(),
            runtime,
            jetstream,
        })
    }

    /// `what` failed for `source`.
    fn error(&self, what: &str, source: impl Into<NatsFailure>) -> ClusterError {
        ClusterError::Nats {
            url: self.url.clone(),
            what: what.to_owned(),
            source: source.into(),
        }
    }

    /// Whether the client is connected now (it reconnects by itself when it is not).
    fn connected(&self) -> bool {
        crate::nats_client::is_connected(&self.jetstream.client())
    }

    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// The key-value bucket `name`, created if missing.
    fn bucket(&self, name: &str, max_age: Duration) -> Result<async_nats::jetstream::kv::Store> {
        self.block_on(async {
            if let Ok(store) = self.jetstream.get_key_value(name).await {
                return Ok::<_, NatsFailure>(store);
            }
            crate::fsutil::pause_point("bucket-missing");
            // The stream a key-value bucket is, made directly: the client's own bucket
            // creation first asks for account details that Debian's nats-server 2.9 answers
            // in a form the client cannot read.
            use async_nats::jetstream::stream::{Config, DiscardPolicy};
            let created = self
                .jetstream
                .create_stream(Config {
                    name: format!("KV_{name}"),
                    subjects: vec![format!("$KV.{name}.>")],
                    max_messages_per_subject: 1,
                    max_age,
                    max_message_size: 1 << 20,
                    allow_rollup: true,
                    deny_delete: true,
                    allow_direct: true,
                    discard: DiscardPolicy::New,
                    num_replicas: 1,
                    ..Default::default()
                })
                .await;
            match (created, self.jetstream.get_key_value(name).await) {
                (_, Ok(store)) => Ok(store),
                // Another worker starting at the same time created it first (the server then
                // refuses a second creation: "subjects overlap with an existing stream").
                (Err(error), Err(_)) => Err(NatsFailure::client(error)),
                (Ok(_), Err(error)) => Err(NatsFailure::client(error)),
            }
        })
        .map_err(|e| self.error(&format!("bucket {name}"), e))
    }

    /// Purges `keys` (and their history) from key-value bucket `name` (`max_age` as it was
    /// made with); a key that is not there is no error.
    fn purge(&self, name: &str, max_age: Duration, keys: &[String]) -> Result<()> {
        let bucket = self.bucket(name, max_age)?;
        for key in keys {
            self.block_on(timed(bucket.purge(key)))
                .map_err(|e| self.error(&format!("purging {name} {key}"), e))?
                .map_err(|e| {
                    self.error(&format!("purging {name} {key}"), NatsFailure::client(e))
                })?;
        }
        Ok(())
    }

    /// The object store `name`, created if missing.
    fn objects(&self, name: &str) -> Result<async_nats::jetstream::object_store::ObjectStore> {
        self.block_on(async {
            if let Ok(store) = self.jetstream.get_object_store(name).await {
                return Ok(store);
            }
            let created = self
                .jetstream
                .create_object_store(async_nats::jetstream::object_store::Config {
                    bucket: name.to_owned(),
                    ..Default::default()
                })
                .await;
            match created {
                Ok(store) => Ok(store),
                // Another worker starting at the same time created it first (the server then
                // refuses a second creation: "subjects overlap with an existing stream").
                Err(error) => (self.jetstream.get_object_store(name).await)
                    .map_err(|_| NatsFailure::client(error)),
            }
        })
        .map_err(|e| self.error(&format!("object store {name}"), e))
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let _inside = self.runtime.enter();
    }
}

/// `future`, given at most 3 s (a request to a server that went away).
pub(super) async fn timed<F: std::future::Future>(
    future: F,
) -> std::result::Result<F::Output, tokio::time::error::Elapsed> {
    tokio::time::timeout(REQUEST_TIMEOUT, future).await
}
