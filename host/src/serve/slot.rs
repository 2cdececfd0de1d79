//! [`Slot`]: one pipeline of the server while it lives: its spec and desired state (or, for a
//! pipeline whose files are damaged, the reason), the thread running it, its ingest log, and the
//! result stream its subscribers follow across stops and starts.
//!
//! The slot's lock is held only for short bookkeeping; waiting for the pipeline thread (a stop,
//! a final checkpoint) and writing the ingest log happen outside it, so a busy pipeline cannot
//! block calls about itself for long, nor any call about another pipeline.
//!
//! Its parts: `ingest` (appending to the ingest log, and truncating it), `replay`,
//! `savepoints` and `analysis` (the steps of a gated rollout).
//!
//! Depends on `checkpoint`, `fsutil`, `operator`, `pipeline`, `rollout`, `source`, `spec`,
//! `state` and `time`; its parts (`replay`, `savepoints`) on `names` as well.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::managed::INGEST_FILE;
use super::{Damage, Managed, RequestError, RolloutPlan, on_workers};
use crate::operator::{ComponentKind, Registry, RegistryError, VersionCode};
use crate::pipeline::{
    PipelineControl, PipelineError, ResolveError, Resolver, RunOptions, Summary,
};
use crate::rollout::{CounterSnapshot, RateWatch, Routing, ShadowLog};
use crate::source::IngestLog;

pub use crate::pipeline::ResultLine;

type Thread = JoinHandle<Result<Summary, PipelineError>>;

/// How often the counters of a pipeline on workers are read during a rollout (for its
/// automatic rollback policy).
const WORKERS_POLL: Duration = Duration::from_secs(1);

/// How many result records a slow subscriber may fall behind before its stream ends (it can
/// resume from its last id).
const RESULT_BUFFER: usize = 4_096;

/// What a stop request achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopOutcome {
    /// The pipeline stopped (or was not running).
    Stopped,
    /// The pipeline is still finishing its batch and final checkpoint; it stops in the
    /// background.
    Stopping,
}

struct Inner {
    /// The pipeline, or why its files cannot be used.
    managed: Result<Managed, Damage>,
    /// The control of the current (or stopping, or last) run.
    control: Option<Arc<PipelineControl>>,
    /// The current run's thread; `None` while stopping or stopped.
    thread: Option<Thread>,
    stopping: bool,
    deleting: bool,
    failure: Option<Failure>,
    /// When to start a run that failed on a full disk again (it is tried until it stays up).
    restart: Option<Restart>,
    watch: RateWatch,
    requested: Option<Routing>,
    /// Started on the cluster's workers (a pipeline placed there has no thread here).
    on_workers: bool,
    /// The step of a gated rollout being held.
    analysis: Option<analysis::StepWatch>,
    /// A pipeline on workers whose routing the tick changed: to be sent by `sync_workers`.
    sync_due: bool,
}

/// One pipeline of the server.
pub struct Slot {
    /// Its name.
    pub name: String,
    /// Its directory.
    pub dir: PathBuf,
    inner: Mutex<Inner>,
    results: tokio::sync::broadcast::Sender<ResultLine>,
    ingest: Mutex<Option<Arc<IngestLog>>>,
    /// Ingest requests of this pipeline being handled at once (each waits for a sync).
    ingesting: Arc<tokio::sync::Semaphore>,
    /// Set when the pipeline is deleted: its files are gone and must not be opened again.
    closed: std::sync::atomic::AtomicBool,
    /// Set when its deletion begins (long-running work about it, a replay, stops then).
    deleting: std::sync::atomic::AtomicBool,
    /// The checkpointed input offset the ingest log was last truncated to.
    truncated: std::sync::atomic::AtomicU64,
    /// The ingest rate limit (`source.max_events_per_second`), made on first use.
    rate: Mutex<Option<super::rate::RateLimit>>,
    /// The lowest input offset of the pipeline's savepoints: the ingest log is kept from there
    /// on, so a savepoint can always be replayed or forked.
    pin: Mutex<savepoints::Pin>,
    /// Held while a stopped pipeline's store is copied into a savepoint, and by a start, so a
    /// start never finds its store taken (the order is this, then `inner`).
    store_turn: Mutex<()>,
    /// Savepoints being taken or copied: while any is, the log is not truncated.
    holds: std::sync::atomic::AtomicUsize,
    /// When the counters of a pipeline on workers were last asked for (`poll_workers`).
    polled: Mutex<Option<Instant>>,
    /// A `sync_workers` is running.
    syncing: std::sync::atomic::AtomicBool,
}

mod analysis;
mod ingest;
mod quarantine;
mod replay;
mod repro;
mod savepoints;
mod sliced_replay;
mod verify;

pub use ingest::MAX_CONCURRENT_INGESTS;
pub use quarantine::RedriveRequest;
pub use replay::{ReplayRequest, SANDBOX_PREFIX};
pub use repro::ReproRequest;
pub use verify::examples_dry_run;

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("name", &self.name).finish()
    }
}

/// What `/healthz` needs of one pipeline.
#[derive(Debug, Clone, Copy)]
pub struct SlotHealth {
    /// Its files are damaged (it cannot run until deleted and made again).
    pub damaged: bool,
    /// How long its running pipeline has shown no sign of life.
    pub silent: Option<Duration>,
    /// It should run, but its last run failed (a full disk: it is started again by itself).
    pub failed: bool,
}

/// Why the last run ended, if it failed.
#[derive(Debug, Clone)]
struct Failure {
    message: String,
    /// The disk (or quota) was full: the run is started again once there is room.
    disk_full: bool,
}

/// The automatic restart of a run that failed on a full disk: tried at `at`, then again after
/// twice the wait (at most [`MAX_RESTART_WAIT`]) while it fails the same way.
#[derive(Debug, Clone, Copy)]
struct Restart {
    at: Instant,
    /// Restarts tried since the run last stayed up (committed a checkpoint).
    attempts: u32,
}

/// The longest wait between two automatic restarts.
const MAX_RESTART_WAIT: Duration = Duration::from_secs(30);

impl Restart {
    /// The restart after `attempts` tries.
    fn after(attempts: u32) -> Restart {
        let wait = Duration::from_millis(500 << attempts.min(10)).min(MAX_RESTART_WAIT);
        Restart {
            at: Instant::now() + wait,
            attempts,
        }
    }
}

fn finished(thread: Thread) -> Option<Failure> {
    match thread.join() {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(Failure {
            message: e.to_string(),
            disk_full: e.is_disk_full(),
        }),
        Err(_) => Some(Failure {
            message: "the pipeline thread panicked".into(),
            disk_full: false,
        }),
    }
}

fn damaged(reason: &Damage) -> RequestError {
    RequestError::Conflict(format!(
        "the pipeline's files are damaged ({reason}); DELETE it and create it again"
    ))
}

impl Slot {
    /// A slot for a new pipeline.
    pub fn new(name: &str, dir: &Path, managed: Managed) -> Slot {
        Self::with(name, dir, Ok(managed))
    }

    /// A slot for a pipeline found in the data directory, damaged or not.
    pub fn load(name: &str, dir: &Path, resolving: (&Registry, &super::ExternalServers)) -> Slot {
        let managed = Managed::load(name, dir, resolving);
        if let Err(reason) = &managed {
            warn!(pipeline = %name, %reason, "pipeline damaged: kept as failed");
        }
        Self::with(name, dir, managed)
    }

    fn with(name: &str, dir: &Path, managed: Result<Managed, Damage>) -> Slot {
        let slot = Self::bare(name, dir, managed);
        replay::remove_leftover_sandboxes(dir);
        if let Ok(data) = slot.savepoint_home() {
            crate::checkpoint::remove_leftover_copies(&data);
        }
        slot.refresh_pin();
        slot
    }

    fn bare(name: &str, dir: &Path, managed: Result<Managed, Damage>) -> Slot {
        Slot {
            name: name.to_owned(),
            dir: dir.to_owned(),
            inner: Mutex::new(Inner {
                managed,
                control: None,
                thread: None,
                stopping: false,
                deleting: false,
                failure: None,
                restart: None,
                watch: RateWatch::default(),
                requested: None,
                on_workers: false,
                analysis: None,
                sync_due: false,
            }),
            results: tokio::sync::broadcast::channel(RESULT_BUFFER).0,
            ingest: Mutex::new(None),
            ingesting: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_INGESTS)),
            closed: std::sync::atomic::AtomicBool::new(false),
            deleting: std::sync::atomic::AtomicBool::new(false),
            truncated: std::sync::atomic::AtomicU64::new(0),
            rate: Mutex::new(None),
            pin: Mutex::new(savepoints::Pin::known(u64::MAX)),
            store_turn: Mutex::new(()),
            holds: std::sync::atomic::AtomicUsize::new(0),
            polled: Mutex::new(None),
            syncing: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("slot lock")
    }

    /// Runs `f` on the pipeline's spec and desired state (refused for a damaged pipeline).
    pub fn with_managed<T>(
        &self,
        f: impl FnOnce(&mut Managed) -> Result<T, RequestError>,
    ) -> Result<T, RequestError> {
        let mut inner = self.lock();
        match &mut inner.managed {
            Ok(managed) => f(managed),
            Err(reason) => Err(damaged(reason)),
        }
    }

    /// For `/healthz`, without waiting on a slot busy with a file write (`None` then).
    pub fn health(&self) -> Option<SlotHealth> {
        let mut inner = self.inner.try_lock().ok()?;
        Self::reap(&mut inner);
        let silent = (Self::is_running(&inner) && !inner.stopping)
            .then(|| inner.control.as_ref())
            .flatten()
            .map(|control| Duration::from_millis(control.silent_for_ms()));
        let wanted = matches!(&inner.managed, Ok(m) if m.desired.running);
        Some(SlotHealth {
            damaged: inner.managed.is_err(),
            silent,
            // Failed, or started again after a full disk and not yet through a checkpoint.
            failed: wanted
                && ((!Self::is_running(&inner) && inner.failure.is_some())
                    || inner.restart.is_some()),
        })
    }

    /// Collects the result of a thread that ended (by itself, or asked to stop); a run that
    /// failed on a full disk, and should be running, is started again later.
    fn reap(inner: &mut Inner) {
        if inner.thread.as_ref().is_some_and(|t| t.is_finished())
            && let Some(thread) = inner.thread.take()
        {
            inner.failure = finished(thread);
            inner.stopping = false;
            let wanted = matches!(&inner.managed, Ok(m) if m.desired.running);
            inner.restart = match &inner.failure {
                Some(failure) if failure.disk_full && wanted && !inner.deleting => {
                    let attempts = inner.restart.map_or(0, |r| r.attempts);
                    Some(Restart::after(attempts))
                }
                _ => None,
            };
        }
    }

    /// Refuses changes to a pipeline that is being deleted.
    fn check_not_deleting(&self, inner: &Inner) -> Result<(), RequestError> {
        if inner.deleting {
            return Err(RequestError::Conflict(format!(
                "pipeline {:?} is being deleted",
                self.name
            )));
        }
        Ok(())
    }

    fn is_running(inner: &Inner) -> bool {
        inner.on_workers || inner.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Whether the pipeline is placed on the cluster's workers.
    pub(super) fn on_workers(&self) -> Result<bool, RequestError> {
        self.with_managed(|managed| Ok(on_workers::placed_on_workers(managed)))
    }

    /// Refuses `what` for a pipeline placed on the cluster's workers, which this server does
    /// not run: what it needs (the ingest log, the local store) is not here.
    pub(super) fn refuse_on_workers(&self, what: &str) -> Result<(), RequestError> {
        if self.on_workers()? {
            return Err(RequestError::Conflict(format!(
                "pipeline {:?} runs on the cluster's workers: {what} is not available for it yet \
                 (`weir cluster status` and the status here show its slices)",
                self.name
            )));
        }
        Ok(())
    }

    /// At server start: starts the pipeline if it was running when the server stopped.
    pub fn restart_if_desired(&self, registry: &Arc<Registry>) -> Result<(), RequestError> {
        let wanted = matches!(&self.lock().managed, Ok(m) if m.desired.running);
        if wanted {
            self.start(registry)?;
            info!(pipeline = %self.name, "pipeline restored");
        }
        Ok(())
    }

    /// The stream a pipeline that reads NATS reads (`None`: it reads its ingest log).
    pub fn nats_source(&self) -> Option<crate::spec::NatsSourceSpec> {
        match &self.lock().managed {
            Ok(managed) => match &managed.spec.source {
                crate::spec::SourceSpec::Nats(nats) => Some(nats.clone()),
                _ => None,
            },
            Err(_) => None,
        }
    }

    /// Whether the pipeline reads its own ingest log (events sent over HTTP), not a NATS stream
    /// or a Kafka topic.
    pub fn reads_ingest_log(&self) -> bool {
        match &self.lock().managed {
            Ok(managed) => matches!(managed.spec.source, crate::spec::SourceSpec::Http(_)),
            Err(_) => true,
        }
    }

    /// The topic a pipeline that reads Kafka reads.
    pub fn kafka_source(&self) -> Option<crate::spec::KafkaSourceSpec> {
        match &self.lock().managed {
            Ok(managed) => match &managed.spec.source {
                crate::spec::SourceSpec::Kafka(kafka) => Some(kafka.clone()),
                _ => None,
            },
            Err(_) => None,
        }
    }

    /// How far the pipeline has read its input (a NATS stream's sequence, an ingest log's
    /// offset): the current or last run's, else its last checkpoint's; 0 before any.
    pub fn input_read(&self) -> u64 {
        let run = (self.lock().control.as_ref()).map_or(0, |control| {
            control.stats.input_offset.load(Ordering::Relaxed)
        });
        let checkpoint = (self.data_dir().ok())
            .map(|dir| dir.join(crate::state::STATE_FILE))
            .and_then(|file| {
                crate::state::RedbStore::read_manifest_of(&file)
                    .ok()
                    .flatten()
            })
            .and_then(|bytes| serde_json::from_slice::<crate::checkpoint::Manifest>(&bytes).ok())
            .map_or(0, |manifest| manifest.source.offset);
        run.max(checkpoint)
    }

    /// Starts the pipeline (resuming from its last checkpoint) and records that it should run.
    pub fn start(&self, registry: &Arc<Registry>) -> Result<(), RequestError> {
        let _store_turn = self.store_turn.lock().expect("store turn lock");
        self.start_held(registry, false)
    }

    /// [`start`](Self::start), the store's turn held by the caller. `again`: an automatic
    /// restart, which starts nothing unless it is still due (a stop or delete may have come
    /// since it was decided on).
    fn start_held(&self, registry: &Arc<Registry>, again: bool) -> Result<(), RequestError> {
        {
            let inner = self.lock();
            self.check_not_deleting(&inner)?;
            if let Err(reason) = &inner.managed {
                return Err(damaged(reason));
            }
        }
        let log = match self.reads_ingest_log() {
            true => Some(self.ingest_log()?),
            false => None,
        };
        let mut inner = self.lock();
        Self::reap(&mut inner);
        self.check_not_deleting(&inner)?;
        if inner.stopping {
            return Err(RequestError::Conflict(format!(
                "pipeline {:?} is still stopping; start it once it has stopped",
                self.name
            )));
        }
        let restart_due = inner.restart.is_some();
        let managed = match &mut inner.managed {
            Ok(managed) => managed,
            Err(reason) => return Err(damaged(reason)),
        };
        if again && !(restart_due && managed.desired.running) {
            return Ok(());
        }
        if on_workers::placed_on_workers(managed) {
            on_workers::share(managed, registry, true)?;
            if !managed.desired.running {
                managed.desired.running = true;
                managed.save()?;
            }
            let requested = managed.routing();
            inner.on_workers = true;
            inner.analysis = None;
            inner.requested = requested;
            return Ok(());
        }
        if !managed.desired.running {
            managed.desired.running = true;
            managed.save()?;
        }
        if Self::is_running(&inner) {
            return Ok(());
        }
        let managed = inner.managed.as_ref().expect("checked above");
        let control = Arc::new(self.control(managed, registry, log.as_deref())?);
        let requested = managed.routing();
        if let Some(routing) = &requested {
            control.request(routing.clone());
        }
        let spec = managed.spec.clone();
        let thread_control = control.clone();
        let name = self.name.clone();
        let thread = std::thread::Builder::new()
            .name(format!("weir-pipeline-{name}"))
            .spawn(move || {
                let result = crate::pipeline::run_controlled(
                    &spec,
                    RunOptions::default(),
                    Some(thread_control),
                );
                match &result {
                    Ok(summary) => info!(pipeline = %name, %summary, "pipeline ended"),
                    Err(e) => warn!(pipeline = %name, error = %e, "pipeline failed"),
                }
                result
            })
            .map_err(RequestError::from_io)?;
        inner.control = Some(control);
        inner.thread = Some(thread);
        inner.watch = RateWatch::default();
        inner.requested = requested;
        inner.failure = None;
        inner.analysis = None;
        Ok(())
    }

    /// Starts the run again if it failed on a full disk and its time has come (see
    /// [`Restart`]); a run that has stayed up since is no longer counted as restarting.
    pub fn restart_if_due(&self, registry: &Arc<Registry>) {
        let attempts = {
            let Ok(mut inner) = self.inner.try_lock() else {
                return; // busy: the next tick comes soon
            };
            Self::reap(&mut inner);
            let stayed_up = (inner.control.as_ref()).is_some_and(|c| {
                c.stats
                    .last_checkpoint
                    .lock()
                    .expect("stats lock")
                    .is_some()
            });
            // Up through a checkpoint, or long enough without failing: no longer restarting.
            let long_enough =
                (inner.restart).is_some_and(|r| r.at + MAX_RESTART_WAIT <= Instant::now());
            if Self::is_running(&inner) && (stayed_up || long_enough) {
                inner.restart = None;
            }
            let wanted = matches!(&inner.managed, Ok(m) if m.desired.running);
            let idle = !Self::is_running(&inner) && !inner.stopping && !inner.deleting;
            match inner.restart {
                Some(restart) if restart.at <= Instant::now() && wanted && idle => {
                    restart.attempts + 1
                }
                _ => return,
            }
        };
        let Ok(_store_turn) = self.store_turn.try_lock() else {
            return; // a savepoint of the stopped pipeline is being copied: the next tick
        };
        info!(pipeline = %self.name, attempts, "starting again after the disk was full");
        metrics::counter!("weir_pipeline_restarts_total", "pipeline" => self.name.clone())
            .increment(1);
        let started = self.start_held(registry, true);
        let mut inner = self.lock();
        if inner.restart.is_none() {
            return; // stopped or deleted meanwhile
        }
        match started {
            // Kept until the run commits a checkpoint: it may fail the same way at once.
            Ok(()) => inner.restart = Some(Restart::after(attempts)),
            Err(e) => {
                warn!(pipeline = %self.name, error = %e, "could not start the pipeline again");
                inner.restart = Some(Restart::after(attempts));
            }
        }
    }

    /// The control of a new run: the version resolver, the shadow log, the ingest gate and the
    /// result stream that outlives the run.
    fn control(
        &self,
        managed: &Managed,
        registry: &Arc<Registry>,
        log: Option<&IngestLog>,
    ) -> Result<PipelineControl, RequestError> {
        let aggregate = managed.spec.aggregate.as_ref().map(|op| op.name.clone());
        let enrichers: Vec<String> = (managed.spec.enrichers.iter())
            .map(|op| op.name.clone())
            .collect();
        let lookup = registry.clone();
        let resolve: Resolver = Box::new(move |named: Option<&str>, version: &str| {
            let (name, kind) = match (named, &aggregate) {
                (Some(name), _) if enrichers.iter().any(|e| e == name) => {
                    (name, ComponentKind::Enrich)
                }
                (Some(stage), _) => (stage, ComponentKind::Aggregate),
                (None, Some(name)) => (name.as_str(), ComponentKind::Aggregate),
                (None, None) => {
                    return Err(ResolveError::Failed(
                        "the pipeline has no aggregate to roll out".into(),
                    ));
                }
            };
            let code = lookup.load(name, version, kind).map_err(|e| match e {
                RegistryError::Unknown { .. } => ResolveError::Unknown(e.to_string()),
                other => ResolveError::Failed(other.to_string()),
            })?;
            Ok(match kind {
                ComponentKind::Aggregate => VersionCode::Aggregate(Arc::new(code)),
                ComponentKind::Enrich => VersionCode::Enrich(Arc::new(code)),
            })
        });
        let out = self.dir.join("out");
        std::fs::create_dir_all(&out).map_err(RequestError::from_io)?;
        let shadow_file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(out.join("shadow.jsonl"))
            .map_err(RequestError::from_io)?;
        let shadow_log: ShadowLog =
            Arc::new(Mutex::new(Box::new(std::io::BufWriter::new(shadow_file))));
        let control = PipelineControl::new(&self.name, resolve, Some(shadow_log))
            .with_results(self.results.clone());
        Ok(match log {
            Some(log) => control.with_ingest_gate(log.gate()),
            None => control,
        })
    }

    /// Asks the run to stop, without waiting. `user` records that the pipeline should stay
    /// stopped (a server shutdown does not). Returns whether a run is there to wait for. The
    /// thread stays in the slot until it has ended, so whoever waits next can collect it.
    fn begin_stop(&self, user: bool) -> Result<bool, RequestError> {
        let mut inner = self.lock();
        inner.restart = None;
        if user {
            match &mut inner.managed {
                // The workers are told first: a stop they did not hear of is no stop.
                Ok(managed) if on_workers::placed_on_workers(managed) => {
                    on_workers::stop(managed)?;
                    managed.desired.running = false;
                    managed.save()?;
                }
                Ok(managed) if managed.desired.running => {
                    managed.desired.running = false;
                    managed.save()?;
                }
                _ => {}
            }
        }
        // The workers go on without this server (a shutdown is not a stop).
        inner.on_workers = false;
        // A gated step is held again from the next start: its evidence is that run's.
        inner.analysis = None;
        if inner.thread.is_none() {
            return Ok(false);
        }
        if !inner.stopping {
            if let Some(control) = &inner.control {
                control.stop();
            }
            inner.stopping = true;
        }
        Ok(true)
    }

    /// Waits up to `timeout` for the run's thread to end, collecting it; whether it has.
    pub fn wait_ended(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let mut inner = self.lock();
                Self::reap(&mut inner);
                if inner.thread.is_none() {
                    return true;
                }
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops the pipeline after a final checkpoint (its windows stay open), waiting at most
    /// `wait`; a pipeline still busy then goes on stopping, and is collected by the next call
    /// that looks at it.
    pub fn stop(&self, wait: Duration, user: bool) -> Result<StopOutcome, RequestError> {
        if !self.begin_stop(user)? || self.wait_ended(wait) {
            return Ok(StopOutcome::Stopped);
        }
        Ok(StopOutcome::Stopping)
    }

    /// Server shutdown: asks the run to stop, keeping the desired state (it restarts with the
    /// server).
    pub fn begin_halt(&self) {
        if let Err(e) = self.begin_stop(false) {
            warn!(pipeline = %self.name, error = %e, "could not stop the pipeline");
        }
    }

    /// Marks the pipeline as being deleted: from now on it cannot be started, steered or sent
    /// events, so a call racing the delete cannot bring it back to life; a replay of it stops.
    pub fn mark_deleting(&self) {
        let mut inner = self.lock();
        inner.deleting = true;
        inner.restart = None;
        drop(inner);
        self.deleting.store(true, Ordering::Release);
    }

    /// Withdraws a pipeline placed on workers from the cluster (it is being deleted).
    pub fn withdraw_from_workers(&self) -> Result<(), RequestError> {
        // A savepoint being copied from the cluster gives up (it sees the delete) first.
        let _store_turn = self.store_turn.lock().expect("store turn lock");
        let spec = match &self.lock().managed {
            Ok(managed) if on_workers::placed_on_workers(managed) => managed.spec.clone(),
            _ => return Ok(()),
        };
        on_workers::withdraw(&spec)
    }

    /// Whether the pipeline is being (or was) deleted, without waiting for its lock.
    pub fn is_deleted(&self) -> bool {
        self.deleting.load(Ordering::Acquire)
    }

    /// Closes the result stream (the pipeline is being deleted): subscribers' streams end.
    pub fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.lock().control = None;
        *self.ingest.lock().expect("ingest lock") = None;
    }

    /// Subscribes to the result records written from now on (across stops and starts).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<ResultLine> {
        self.results.subscribe()
    }

    /// The spec as created (its live version rewritten by promotion).
    pub fn spec_json(&self) -> Result<serde_json::Value, RequestError> {
        self.with_managed(|managed| Ok(managed.spec_json.clone()))
    }

    /// The most recent `limit` dead letters, oldest first, if they go to a file: read from
    /// the file's last 256 KiB (a longer record is skipped).
    pub fn recent_dead_letters(
        &self,
        limit: usize,
    ) -> Result<Option<Vec<serde_json::Value>>, RequestError> {
        let file = self.with_managed(|managed| {
            Ok(match &managed.spec.sinks.dead_letters {
                crate::spec::Sink::File(path) => Some(path.clone()),
                _ => None,
            })
        })?;
        let Some(file) = file else {
            return Ok(None);
        };
        Ok(Some(crate::fsutil::last_json_lines(
            &file,
            limit,
            256 << 10,
        )))
    }

    /// The results file, if the results go to one.
    pub fn results_file(&self) -> Result<Option<PathBuf>, RequestError> {
        self.with_managed(|managed| {
            Ok(match &managed.spec.sinks.results {
                crate::spec::Sink::File(path) => Some(path.clone()),
                _ => None,
            })
        })
    }

    /// Changes the desired state with `f`, then sends the routing it asks for to the run.
    fn steer(
        &self,
        registry: &Registry,
        f: impl FnOnce(&mut Managed) -> Result<(), RequestError>,
    ) -> Result<(), RequestError> {
        let mut inner = self.lock();
        self.check_not_deleting(&inner)?;
        let managed = match &mut inner.managed {
            Ok(managed) => managed,
            Err(reason) => return Err(damaged(reason)),
        };
        f(managed)?;
        let routing = managed.routing();
        inner.watch = RateWatch::default();
        inner.analysis = None;
        Self::push_routing(&mut inner, routing, Some(registry))
    }

    /// Sends `routing` to the run if it is not what was asked for last: to this server's run,
    /// or to the workers (with the spec shared again, which a promotion rewrote).
    fn push_routing(
        inner: &mut Inner,
        routing: Option<Routing>,
        registry: Option<&Registry>,
    ) -> Result<(), RequestError> {
        let Some(routing) = routing else {
            return Ok(());
        };
        if !Self::is_running(inner) || inner.requested.as_ref() == Some(&routing) {
            return Ok(());
        }
        if inner.on_workers {
            // Without a registry (the tick): left to `sync_workers`, off the slot's lock and
            // off the tick, which a NATS server that does not answer would hold up.
            let (Some(registry), Ok(managed)) = (registry, &inner.managed) else {
                inner.sync_due = true;
                return Ok(());
            };
            on_workers::share(managed, registry, managed.desired.running)?;
        } else if let Some(control) = &inner.control {
            control.request(routing.clone());
        } else {
            return Ok(());
        }
        inner.requested = Some(routing);
        Ok(())
    }

    /// Starts, changes or replaces the rollout. A rollout of another operator than the last
    /// waits until the last one's final routing has applied (at a checkpoint), so no shard is
    /// left splitting the other operator's keys.
    pub fn rollout(&self, plan: RolloutPlan, registry: &Registry) -> Result<(), RequestError> {
        {
            let inner = self.lock();
            let last = inner
                .managed
                .as_ref()
                .ok()
                .map(|m| m.desired.routed.clone());
            // The workers' routing is the one sent to them.
            let applied = match inner.on_workers {
                true => inner.requested.clone(),
                false => inner.control.as_ref().and_then(|c| c.applied()),
            };
            let pending =
                Self::is_running(&inner) && inner.requested.is_some() && inner.requested != applied;
            if last.is_some_and(|last| last != plan.operator) && pending {
                return Err(RequestError::Conflict(
                    "the last rollout's final routing has not applied yet (it does at the next \
                     checkpoint): retry shortly"
                        .into(),
                ));
            }
        }
        let unjudged = (plan.analysis.as_ref()).is_some_and(|a| {
            a.gates.max_dead_letter_rate.is_some() || a.gates.max_late_ratio.is_some()
        });
        if unjudged && self.on_workers()? {
            return Err(RequestError::Invalid(
                "gates.max_dead_letter_rate and max_late_ratio are not judged for a pipeline on \
                 workers (this server does not see their dead letters and late events): use the \
                 other gates"
                    .into(),
            ));
        }
        self.steer(registry, |managed| managed.rollout(plan, registry))
    }

    /// Sends every key back to the live version.
    pub fn rollback(&self, reason: String, registry: &Registry) -> Result<(), RequestError> {
        warn!(pipeline = %self.name, reason = %reason, "rollback");
        self.steer(registry, |managed| managed.rollback(reason))
    }

    /// Makes the candidate the live version.
    pub fn promote(
        &self,
        resolving: (&Registry, &super::ExternalServers),
    ) -> Result<(), RequestError> {
        self.steer(resolving.0, |managed| {
            let version = managed.promote(resolving)?;
            info!(pipeline = %managed.name, %version, "promoted");
            Ok(())
        })
    }

    /// Follows the rollout schedule and the automatic rollback policy (a pipeline on workers:
    /// the schedule only, as the workers do not report their traps here yet).
    pub fn tick(&self, resolving: (&Registry, &super::ExternalServers)) {
        let polled = self.poll_workers();
        let Ok(mut inner) = self.inner.try_lock() else {
            return; // busy: the next tick comes soon
        };
        Self::reap(&mut inner);
        if !Self::is_running(&inner) {
            return;
        }
        let plan = match &inner.managed {
            Ok(m) if m.desired.rolled_back.is_none() => m.desired.rollout.clone(),
            _ => None,
        };
        let Some(plan) = plan else {
            return;
        };
        let routing = inner.managed.as_ref().ok().and_then(Managed::routing);
        if let Err(e) = Self::push_routing(&mut inner, routing, None) {
            warn!(pipeline = %self.name, error = %e, "could not send the rollout's next step");
        }
        if let Err(e) = self.judge_step(&mut inner, &plan, polled.as_ref(), resolving) {
            warn!(pipeline = %self.name, error = %e, "could not judge the rollout's step");
        }
        let routing = inner.managed.as_ref().ok().and_then(Managed::routing);
        if let Err(e) = Self::push_routing(&mut inner, routing, None) {
            warn!(pipeline = %self.name, error = %e, "could not send the rollout's next step");
        }
        let key = plan.counter_key();
        let counters = match (&inner.control, inner.on_workers, polled) {
            (_, true, Some(polled)) => polled.get(&key).copied().unwrap_or_default(),
            (Some(control), false, _) => control.counters.of(&key).snapshot(),
            _ => return,
        };
        if let Some(reason) = inner.watch.check(&plan.policy, Instant::now(), counters) {
            warn!(pipeline = %self.name, reason = %reason, "automatic rollback");
            let recorded = match &mut inner.managed {
                Ok(managed) => managed.rollback(reason),
                Err(_) => Ok(()),
            };
            if let Err(e) = recorded {
                warn!(pipeline = %self.name, error = %e, "could not record the rollback");
            }
            let routing = inner.managed.as_ref().ok().and_then(Managed::routing);
            if let Err(e) = Self::push_routing(&mut inner, routing, None) {
                warn!(pipeline = %self.name, error = %e, "could not send the rollback");
            }
        }
    }

    /// Whether a pipeline on workers has a routing to send (see [`Slot::sync_workers`]), and
    /// no sync is running: the caller then runs one (off the tick).
    pub fn take_sync_due(&self) -> bool {
        let Ok(mut inner) = self.inner.try_lock() else {
            return false;
        };
        let due = std::mem::take(&mut inner.sync_due);
        due && !self.syncing.swap(true, Ordering::AcqRel)
    }

    /// Sends a pipeline on workers its desired state (spec, components, routing, running or
    /// not) with none of the slot's locks held, after [`Slot::take_sync_due`] said so; due
    /// again at the next tick if the cluster did not take it.
    pub fn sync_workers(&self, registry: &Registry) {
        let copy = match &self.lock().managed {
            Ok(managed) if on_workers::placed_on_workers(managed) => Some(managed.clone()),
            _ => None,
        };
        if let Some(managed) = copy {
            match on_workers::share(&managed, registry, managed.desired.running) {
                Ok(()) => self.lock().requested = managed.routing(),
                Err(e) => {
                    warn!(pipeline = %self.name, error = %e, "could not send the workers' routing");
                    self.lock().sync_due = true;
                }
            }
        }
        self.syncing.store(false, Ordering::Release);
    }

    /// For a pipeline on workers with a rollout in progress, at most once per
    /// [`WORKERS_POLL`]: the counters its workers reported, summed by version (asked without the
    /// slot's lock).
    fn poll_workers(&self) -> Option<BTreeMap<String, CounterSnapshot>> {
        let mut polled = self.polled.try_lock().ok()?;
        if polled.is_some_and(|at| at.elapsed() < WORKERS_POLL) {
            return None;
        }
        let spec = {
            let inner = self.inner.try_lock().ok()?;
            let managed = inner.managed.as_ref().ok()?;
            let rolling =
                managed.desired.rollout.is_some() && managed.desired.rolled_back.is_none();
            (inner.on_workers && rolling).then(|| managed.spec.clone())?
        };
        *polled = Some(Instant::now());
        on_workers::counters(&spec)
            .inspect_err(|e| warn!(pipeline = %self.name, error = %e, "workers' counters unknown"))
            .ok()
    }

    /// Whether the pipeline uses operator `name@version`: live or candidate as asked, or in
    /// the routing its run applies now.
    pub fn uses(&self, name: &str, version: &str) -> bool {
        let inner = self.lock();
        let Ok(managed) = &inner.managed else {
            return false;
        };
        let applied = inner.control.as_ref().and_then(|c| c.applied());
        let aggregate = managed.spec.aggregate.as_ref().map(|op| op.name.as_str());
        managed.uses(name, version)
            || applied.is_some_and(|r| {
                let routed = r.operator.as_deref().or(aggregate);
                routed == Some(name)
                    && (r.live == version || r.candidate.as_deref() == Some(version))
            })
    }

    /// `text` with the server's data directory (two levels above the pipeline's) left out of
    /// its paths, for a caller.
    fn redact(&self, text: &str) -> String {
        match self.dir.parent().and_then(Path::parent) {
            Some(data) => super::Redactor::new(data).apply(text),
            None => text.to_owned(),
        }
    }

    /// The status document of the API.
    pub fn status(&self) -> serde_json::Value {
        let mut inner = self.lock();
        Self::reap(&mut inner);
        let managed = match &inner.managed {
            Ok(managed) => managed,
            Err(reason) => {
                return serde_json::json!({
                    "name": self.name,
                    "state": "failed",
                    "error": self.redact(&format!("the pipeline's files are damaged: {reason}")),
                    "damaged": true,
                });
            }
        };
        let state = if inner.stopping {
            "stopping"
        } else if Self::is_running(&inner) {
            "running"
        } else if inner.failure.is_some() {
            "failed"
        } else {
            "stopped"
        };
        let control = inner.control.as_deref();
        let mut status = serde_json::json!({
            "name": self.name,
            "state": state,
            "error": inner.failure.as_ref().map(|f| self.redact(&f.message)),
            // A run that failed on a full disk is started again by itself once there is room.
            "disk_full": inner.failure.as_ref().is_some_and(|f| f.disk_full),
            "restart": inner.restart.filter(|_| !Self::is_running(&inner)).map(|r| serde_json::json!({
                "attempts": r.attempts,
                "in_ms": r.at.saturating_duration_since(Instant::now()).as_millis() as u64,
            })),
            "versions": control.map(versions).unwrap_or_default(),
            // The token that created it (counted against that token's max_pipelines).
            "owner": managed.desired.owner,
            // The routing in effect since the last checkpoint (a rollout step or a promotion
            // applies at a barrier).
            "applied_routing": control.and_then(|c| c.applied()),
            // The limits ingest holds the pipeline to (429 beyond them).
            "limits": {
                "max_behind_bytes": managed.spec.max_behind,
                "max_events_per_second": managed.spec.max_rate,
                "segment_size_bytes": managed.spec.segment_size,
                "cpu_cores": managed.spec.sandbox.cpu_millicores.map(|m| f64::from(m) / 1000.0),
                "memory_per_instance_bytes": managed.spec.sandbox.memory,
                "total_memory_bytes": managed.spec.sandbox.total_memory,
                "max_state_keys": managed.spec.state_quota.max_keys,
                "max_state_bytes": managed.spec.state_quota.max_bytes,
            },
        });
        // A pipeline on workers: what the cluster says, asked once the slot's lock is let go.
        let placed = on_workers::placed_on_workers(managed).then(|| managed.spec.clone());
        let described = managed.describe(control.and_then(|c| c.applied()).as_ref());
        let figures = control
            .map(figures)
            .unwrap_or_else(|| serde_json::json!({}));
        let quarantine = (managed.spec.quarantine.is_some())
            .then(|| control.map(quarantine::status))
            .map(|parked| {
                parked.unwrap_or_else(|| serde_json::json!({"keys": 0, "events": 0, "parked": []}))
            });
        if let serde_json::Value::Object(status) = &mut status {
            for part in [described, figures] {
                if let serde_json::Value::Object(part) = part {
                    status.extend(part);
                }
            }
            if let Some(quarantine) = quarantine {
                status.insert("quarantine".into(), quarantine);
            }
        }
        // A gated rollout's step in progress, with its gates as they stand.
        if let (Some(watch), Some(rollout)) = (&inner.analysis, status.get_mut("rollout"))
            && rollout["analysis"].is_object()
        {
            rollout["analysis"]["current"] = watch.describe();
        }
        drop(inner);
        if let Some(spec) = placed {
            let workers = on_workers::status(&spec);
            // What the workers' slices apply and count, as a run here would say it.
            status["applied_routing"] = workers["routing"].clone();
            let routing = &workers["routing"];
            if let Some(rollout) = status.get_mut("rollout").filter(|r| !r.is_null())
                && routing["candidate"] == rollout["candidate"]
            {
                rollout["applied_percent"] = routing["percent"].clone();
            }
            if let Some(versions) = workers["versions"].as_object() {
                status["versions"] = (versions.iter())
                    .map(|(version, counters)| {
                        let mut entry = counters.clone();
                        entry["version"] = version.clone().into();
                        entry
                    })
                    .collect();
            }
            status["workers"] = workers;
        }
        status
    }
}

fn figures(control: &PipelineControl) -> serde_json::Value {
    let stats = &control.stats;
    let watermark = stats.watermark.load(Ordering::Relaxed);
    let last = stats.last_checkpoint.lock().expect("stats lock").clone();
    serde_json::json!({
        "events_in": stats.events_in.load(Ordering::Relaxed),
        "results_out": stats.results_out.load(Ordering::Relaxed),
        "late": stats.late.load(Ordering::Relaxed),
        "dead_letters": stats.dead_letters.load(Ordering::Relaxed),
        "watermark": (watermark != i64::MIN).then_some(watermark),
        "lag_ms": (watermark != i64::MIN).then(|| (crate::time::wall_clock_ms() as i64).saturating_sub(watermark)),
        // How many stream sequences a NATS source is behind the last on its subjects (null
        // for other sources).
        "input_lag_sequences": stats.backlog(),
        "state_keys": stats.state_keys.load(Ordering::Relaxed),
        "last_checkpoint": last,
        // Operator time charged to the CPU quota, and time calls waited for it.
        "cpu": control.cpu().map(|quota| serde_json::json!({
            "used_ms": quota.used().as_millis() as u64,
            "throttled_ms": quota.throttled().as_millis() as u64,
        })),
        // Linear memory the operator instances hold from the pipeline's pool.
        "operator_memory_bytes": control.memory().map(|pool| pool.used()),
        // The state the quota counts: the last checkpoint's, plus what calls wrote since.
        "state_quota_used": control.state().map(|quota| {
            let (keys, bytes) = quota.used();
            serde_json::json!({"keys": keys, "bytes": bytes})
        }),
    })
}

fn versions(control: &PipelineControl) -> Vec<serde_json::Value> {
    control
        .counters
        .snapshot()
        .into_iter()
        .map(|(version, c)| {
            let mut v = serde_json::to_value(c).expect("counters serialise");
            v["version"] = version.into();
            v
        })
        .collect()
}
