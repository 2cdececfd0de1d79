//! [`PipelineControl`]: what a running pipeline shares with whoever runs it (`weir serve`): a
//! stop switch, the requested and applied rollout routing, savepoints asked for, live figures,
//! per-version counters and a tap on the result records.
//!
//! Depends on `checkpoint`, `operator`, `rollout`, `source`, `spec` and `time`, and of `pipeline`
//! on `telemetry`.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::checkpoint::{CheckpointStats, SavepointError, SavepointInfo};
use crate::operator::VersionCode;
use crate::operator::quota::{CpuQuota, MemoryPool, StateQuota};
use crate::rollout::{CounterBook, Routing, ShadowLog};
use crate::source::IngestGate;
use crate::spec::StateQuotaSpec;

use super::telemetry::PipelineMetrics;
use crate::time::{MINUS_INFINITY, Millis, PLUS_INFINITY};

/// One result record as sent to subscribers: the byte offset where it ends in the results file
/// (its id: the same record has the same offset in every replay), and its JSON line.
pub type ResultLine = (u64, Arc<str>);

/// Resolves a version of the pipeline's aggregate (`None`) or of its enrichment operator of that
/// name to its code.
pub type Resolver =
    Box<dyn Fn(Option<&str>, &str) -> Result<VersionCode, ResolveError> + Send + Sync>;

/// Why an operator version could not be resolved.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// No such version exists (any more).
    #[error("{0}")]
    Unknown(String),
    /// The version exists but cannot be loaded (a changed file, a compile failure, ...).
    #[error("{0}")]
    Failed(String),
}

/// Live figures of a running pipeline.
/// [`LiveStats::input_backlog`] of a source that does not know its backlog.
pub const NO_BACKLOG: u64 = u64::MAX;

#[derive(Debug)]
pub struct LiveStats {
    /// Events routed over the pipeline's life (restored from its checkpoint on restart).
    pub events_in: AtomicU64,
    /// Result records written.
    pub results_out: AtomicU64,
    /// Late events.
    pub late: AtomicU64,
    /// Dead letters.
    pub dead_letters: AtomicU64,
    /// The watermark.
    pub watermark: AtomicI64,
    /// How far into its input (bytes) the router has read.
    pub input_offset: AtomicU64,
    /// The input offset (bytes) of the last committed checkpoint: a replay starts there.
    pub checkpointed_offset: AtomicU64,
    /// The source position of the last committed checkpoint (a Kafka topic's offsets are
    /// per partition, in its `files`).
    pub checkpointed_position: Mutex<Option<crate::source::SourcePosition>>,
    /// How far the source is behind the end of its input (NATS: stream sequences behind the
    /// last one on its subjects; [`NO_BACKLOG`] if it does not know).
    pub input_backlog: AtomicU64,
    /// Scopes held in memory, over all shards, at the last checkpoint.
    pub state_keys: AtomicU64,
    /// The last committed checkpoint.
    pub last_checkpoint: Mutex<Option<CheckpointStats>>,
    /// Keys parked in the quarantine (`[quarantine]`), over all shards, as they stand (before
    /// the next checkpoint commits them).
    pub quarantine: Mutex<std::collections::BTreeMap<String, crate::window::ParkedSummary>>,
}

impl LiveStats {
    /// How far the source is behind the end of its input, if it knows (see `input_backlog`).
    pub fn backlog(&self) -> Option<u64> {
        Some(self.input_backlog.load(Ordering::Relaxed)).filter(|n| *n != NO_BACKLOG)
    }
}

impl Default for LiveStats {
    fn default() -> Self {
        LiveStats {
            events_in: AtomicU64::new(0),
            results_out: AtomicU64::new(0),
            late: AtomicU64::new(0),
            dead_letters: AtomicU64::new(0),
            watermark: AtomicI64::new(MINUS_INFINITY),
            input_offset: AtomicU64::new(0),
            checkpointed_offset: AtomicU64::new(0),
            checkpointed_position: Mutex::new(None),
            input_backlog: AtomicU64::new(NO_BACKLOG),
            state_keys: AtomicU64::new(0),
            last_checkpoint: Mutex::new(None),
            quarantine: Mutex::default(),
        }
    }
}

/// The watermark of a run that shares its pipeline with runs elsewhere (a slice of a
/// partitioned stream): what its own partitions say, for the others, and the lowest of what
/// theirs say, which holds its own back. Unused by a run alone.
#[derive(Debug)]
pub struct SharedWatermark {
    enabled: AtomicBool,
    /// The others' watermark ([`PLUS_INFINITY`]: none holds this one back).
    floor: AtomicI64,
    /// This run's own partitions' watermark, [`MINUS_INFINITY`] before any.
    local: AtomicI64,
    /// Whether every one of its partitions is idle (it holds nothing back).
    idle: AtomicBool,
    /// The latest ingest clock this run has read (publication time, ms; `i64::MIN`: none).
    clock: AtomicI64,
    /// The latest ingest clock of any run sharing the pipeline: a run whose partition is
    /// quiet judges its idleness by it (its own clock moves only with its messages).
    shared_clock: AtomicI64,
}

impl Default for SharedWatermark {
    fn default() -> Self {
        SharedWatermark {
            enabled: AtomicBool::new(false),
            floor: AtomicI64::new(PLUS_INFINITY),
            local: AtomicI64::new(MINUS_INFINITY),
            idle: AtomicBool::new(false),
            clock: AtomicI64::new(i64::MIN),
            shared_clock: AtomicI64::new(i64::MIN),
        }
    }
}

impl SharedWatermark {
    /// Whether the run shares its watermark (set before it starts).
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Makes the run share its watermark, held at first by `floor`.
    pub fn enable(&self, floor: Millis) {
        self.floor.store(floor, Ordering::Relaxed);
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// The others' watermark.
    pub fn floor(&self) -> Millis {
        self.floor.load(Ordering::Relaxed)
    }

    /// Sets the others' watermark.
    pub fn set_floor(&self, floor: Millis) {
        self.floor.store(floor, Ordering::Relaxed);
    }

    /// What the run's own partitions say: their watermark, or `None` when all are idle.
    pub fn local(&self) -> Option<Millis> {
        (!self.idle.load(Ordering::Relaxed)).then(|| self.local.load(Ordering::Relaxed))
    }

    /// Records the run's own partitions' watermark (`None`: all idle) and its latest ingest
    /// clock.
    pub(crate) fn set_local(&self, local: Option<Millis>, clock: Option<i64>) {
        self.idle.store(local.is_none(), Ordering::Relaxed);
        if let Some(local) = local {
            self.local.store(local, Ordering::Relaxed);
        }
        if let Some(clock) = clock {
            self.clock.store(clock, Ordering::Relaxed);
        }
    }

    /// The run's latest ingest clock, if it has read one.
    pub fn clock(&self) -> Option<i64> {
        Some(self.clock.load(Ordering::Relaxed)).filter(|c| *c != i64::MIN)
    }

    /// The latest ingest clock of any run sharing the pipeline, if known.
    pub fn shared_clock(&self) -> Option<i64> {
        Some(self.shared_clock.load(Ordering::Relaxed)).filter(|c| *c != i64::MIN)
    }

    /// Sets the latest ingest clock of the runs sharing the pipeline.
    pub fn set_shared_clock(&self, clock: i64) {
        self.shared_clock.fetch_max(clock, Ordering::Relaxed);
    }
}

/// Shared between a running pipeline and its controller.
pub struct PipelineControl {
    stop: AtomicBool,
    requested: Mutex<Option<Routing>>,
    applied: Mutex<Option<Routing>>,
    /// Per-version counters.
    pub counters: CounterBook,
    /// The pipeline's Prometheus metrics.
    pub metrics: PipelineMetrics,
    /// Live figures.
    pub stats: LiveStats,
    /// The watermark, when the pipeline is shared with runs elsewhere.
    pub shared_watermark: SharedWatermark,
    /// Every result record, as a JSON line, once it is written and flushed.
    pub results: tokio::sync::broadcast::Sender<ResultLine>,
    /// Whether every batch's results are flushed and sent (resumable streams), or only while
    /// someone listens.
    pub stream_results: bool,
    /// Finds candidate versions' code.
    pub resolve: Resolver,
    /// Where shadow results go.
    pub shadow_log: Option<ShadowLog>,
    /// The gate of the ingest log this process writes (HTTP sources of `weir serve`).
    pub ingest_gate: Option<Arc<IngestGate>>,
    /// When the router last showed it is alive (ms since the epoch): it beats on every batch
    /// and every idle tick.
    heartbeat: AtomicU64,
    /// When a batch was last completed, or work arrived at an idle pipeline (ms).
    progress: AtomicU64,
    /// Batches (and barriers) the router sent, and those the collector completed.
    sent: AtomicU64,
    done: AtomicU64,
    /// Savepoints asked for: the router hands them to its next barrier, whose checkpoint
    /// serves them once it commits.
    savepoints: Mutex<SavepointQueue>,
    /// The CPU budget of the run's operator code (`[sandbox] cpu`), made as the run starts.
    cpu: std::sync::OnceLock<Arc<CpuQuota>>,
    /// The memory pool of the run's operator instances (`[sandbox] total_memory`).
    memory: std::sync::OnceLock<Arc<MemoryPool>>,
    /// The state quota of the run's operators (`[state] max_keys`, `max_bytes`).
    state: std::sync::OnceLock<Arc<StateQuota>>,
    /// Told of every checkpoint right after it commits (a worker uploads it).
    pub on_commit: Option<CommitListener>,
    /// A source handed in instead of opening the spec's (a worker's slices share a reader).
    source: Mutex<Option<Box<dyn crate::source::Source>>>,
}

pub use crate::checkpoint::CommitListener;

/// The savepoints asked for and not yet handed to a barrier; once the run has ended, why none
/// will be taken (a request then is answered at once).
#[derive(Debug, Default)]
struct SavepointQueue {
    waiting: Vec<SavepointRequest>,
    ended: Option<(String, bool)>,
}

/// A savepoint to take from the first checkpoint whose barrier follows the request, and who
/// waits for it.
#[derive(Debug)]
pub struct SavepointRequest {
    /// Its name (checked).
    pub name: String,
    /// Where the outcome goes.
    pub reply: std::sync::mpsc::SyncSender<Result<SavepointInfo, SavepointError>>,
}

impl std::fmt::Debug for PipelineControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipelineControl")
            .field("stop", &self.stop)
            .field("applied", &self.applied)
            .finish()
    }
}

impl PipelineControl {
    /// A control of pipeline `pipeline` (its metrics' label) with the given version resolver
    /// and shadow log.
    pub fn new(pipeline: &str, resolve: Resolver, shadow_log: Option<ShadowLog>) -> Self {
        PipelineControl {
            stop: AtomicBool::new(false),
            requested: Mutex::new(None),
            applied: Mutex::new(None),
            counters: CounterBook::labelled(pipeline),
            metrics: PipelineMetrics::new(pipeline),
            stats: LiveStats::default(),
            shared_watermark: SharedWatermark::default(),
            results: tokio::sync::broadcast::channel(1024).0,
            resolve,
            shadow_log,
            ingest_gate: None,
            stream_results: false,
            heartbeat: AtomicU64::new(crate::time::wall_clock_ms()),
            progress: AtomicU64::new(crate::time::wall_clock_ms()),
            sent: AtomicU64::new(0),
            done: AtomicU64::new(0),
            savepoints: Mutex::new(SavepointQueue::default()),
            cpu: std::sync::OnceLock::new(),
            memory: std::sync::OnceLock::new(),
            state: std::sync::OnceLock::new(),
            on_commit: None,
            source: Mutex::new(None),
        }
    }

    /// A control for a sandboxed run of pipeline `pipeline` (a replay): its figures go to no
    /// metric series, and it has no other versions to resolve.
    pub fn sandboxed(pipeline: &str) -> Self {
        let resolve: Resolver = Box::new(|_, version| {
            Err(ResolveError::Unknown(format!(
                "a sandboxed run serves one version, not {version}"
            )))
        });
        PipelineControl {
            counters: CounterBook::default(),
            metrics: PipelineMetrics::unrecorded(pipeline),
            ..Self::new(pipeline, resolve, None)
        }
    }

    /// Sends result records to `results` (a channel that outlives this run), and flushes them
    /// to the results file first after every batch, so that a subscriber resuming from the file
    /// (by offset) and the channel together miss nothing, subscribed or not.
    pub fn with_results(mut self, results: tokio::sync::broadcast::Sender<ResultLine>) -> Self {
        self.results = results;
        self.stream_results = true;
        self
    }

    /// Telling `listener` of every checkpoint committed.
    pub fn with_commit_listener(mut self, listener: CommitListener) -> Self {
        self.on_commit = Some(listener);
        self
    }

    /// Reading `source` instead of opening the spec's (it is resumed from the checkpoint like
    /// the spec's would be).
    pub fn with_source(self, source: Box<dyn crate::source::Source>) -> Self {
        *self.source.lock().expect("source lock") = Some(source);
        self
    }

    /// The source handed in, if any (taken once, by the run).
    pub(crate) fn take_source(&self) -> Option<Box<dyn crate::source::Source>> {
        self.source.lock().expect("source lock").take()
    }

    /// With the gate of the ingest log the pipeline reads.
    pub fn with_ingest_gate(mut self, gate: Arc<IngestGate>) -> Self {
        self.ingest_gate = Some(gate);
        self
    }

    /// Records that the pipeline is alive now.
    pub(crate) fn beat(&self) {
        self.heartbeat
            .store(crate::time::wall_clock_ms(), Ordering::Relaxed);
    }

    /// The router sent a batch or barrier.
    pub(crate) fn batch_sent(&self) {
        let before = self.sent.fetch_add(1, Ordering::AcqRel);
        if before == self.done.load(Ordering::Acquire) {
            // Work arrives at an idle pipeline: the clock for its progress starts now.
            self.progress
                .store(crate::time::wall_clock_ms(), Ordering::Relaxed);
        }
    }

    /// The collector completed a batch or checkpoint.
    pub(crate) fn batch_done(&self) {
        self.progress
            .store(crate::time::wall_clock_ms(), Ordering::Relaxed);
        self.done.fetch_add(1, Ordering::AcqRel);
    }

    /// How long the pipeline has shown no sign of life, in ms: the router silent (blocked), or
    /// work waiting with no batch completed (a shard stuck in a call).
    pub fn silent_for_ms(&self) -> u64 {
        let now = crate::time::wall_clock_ms();
        let router = now.saturating_sub(self.heartbeat.load(Ordering::Relaxed));
        let waiting = self.sent.load(Ordering::Acquire) > self.done.load(Ordering::Acquire);
        let work = if waiting {
            now.saturating_sub(self.progress.load(Ordering::Relaxed))
        } else {
            0
        };
        router.max(work)
    }

    /// Asks the pipeline to stop after a final checkpoint (windows are not closed).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(gate) = &self.ingest_gate {
            gate.wake();
        }
        // Calls waiting for the CPU quota go on at once: the stop waits for a call at most its
        // time limit, as without a quota (held to a small quota, a runaway call could take
        // `call_timeout / cpu`, hours at the bounds).
        if let Some(cpu) = self.cpu.get() {
            cpu.release();
        }
    }

    /// Whether a stop was asked for.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Asks for a routing; it takes effect at the next checkpoint barrier.
    pub fn request(&self, routing: Routing) {
        *self.requested.lock().expect("routing lock") = Some(routing);
    }

    /// Whether a routing request waits for the next barrier.
    pub(crate) fn has_request(&self) -> bool {
        self.requested.lock().expect("routing lock").is_some()
    }

    /// Asks for savepoint `name` (already checked) from the first checkpoint whose barrier
    /// comes after this request (so it covers every event read by now, not one already in
    /// flight); the receiver gets its outcome, or is dropped if the run ends first.
    pub fn request_savepoint(
        &self,
        name: &str,
    ) -> std::sync::mpsc::Receiver<Result<SavepointInfo, SavepointError>> {
        let (reply, outcome) = std::sync::mpsc::sync_channel(1);
        let mut queue = self.savepoints.lock().expect("savepoint lock");
        if let Some((reason, disk_full)) = &queue.ended {
            let _ = reply.send(Err(SavepointError::NotTaken {
                reason: reason.clone(),
                disk_full: *disk_full,
            }));
            return outcome;
        }
        queue.waiting.push(SavepointRequest {
            name: name.to_owned(),
            reply,
        });
        drop(queue);
        if let Some(gate) = &self.ingest_gate {
            gate.wake(); // an idle reader ticks now, so the barrier comes soon
        }
        outcome
    }

    /// Whether a savepoint waits for the next checkpoint.
    pub(crate) fn wants_savepoint(&self) -> bool {
        !(self.savepoints.lock().expect("savepoint lock").waiting).is_empty()
    }

    /// Takes the savepoints asked for.
    pub(crate) fn take_savepoints(&self) -> Vec<SavepointRequest> {
        std::mem::take(&mut self.savepoints.lock().expect("savepoint lock").waiting)
    }

    /// Puts back savepoints taken for a barrier that could not be sent.
    pub(crate) fn give_back_savepoints(&self, requests: Vec<SavepointRequest>) {
        (self.savepoints.lock().expect("savepoint lock").waiting).extend(requests);
    }

    /// The run ended (`disk_full`: on a full disk): every savepoint still asked for, and every
    /// one asked for from now on, is answered that it was not taken, with `reason`.
    pub(crate) fn end_savepoints(&self, reason: String, disk_full: bool) {
        let waiting = {
            let mut queue = self.savepoints.lock().expect("savepoint lock");
            queue.ended = Some((reason.clone(), disk_full));
            std::mem::take(&mut queue.waiting)
        };
        for request in waiting {
            let reason = reason.clone();
            let _ = (request.reply).send(Err(SavepointError::NotTaken { reason, disk_full }));
        }
    }

    /// The run's CPU budget of `millicores` (the spec's `[sandbox] cpu`), shared by all its
    /// operator instances; `None` without a budget. Made after a stop (while the run was still
    /// being built), it is released at once, as [`Self::stop`] releases one made before: the
    /// stop stores its flag before it looks for the quota, so one of the two sees the other.
    pub(crate) fn cpu_quota(&self, millicores: Option<u32>) -> Option<Arc<CpuQuota>> {
        let cores = f64::from(millicores?) / 1000.0;
        let make = || {
            let metrics = &self.metrics;
            Arc::new(CpuQuota::new(
                cores,
                metrics.cpu_used.clone(),
                metrics.cpu_throttled.clone(),
            ))
        };
        let quota = self.cpu.get_or_init(make).clone();
        if self.stopping() {
            quota.release();
        }
        Some(quota)
    }

    /// The run's memory pool of `bytes` (the spec's `[sandbox] total_memory`), shared by all its
    /// operator instances; `None` without one.
    pub(crate) fn memory_pool(&self, bytes: Option<usize>) -> Option<Arc<MemoryPool>> {
        let bytes = bytes?;
        let make = || Arc::new(MemoryPool::new(bytes, self.metrics.operator_memory.clone()));
        Some(self.memory.get_or_init(make).clone())
    }

    /// The run's state quota (the spec's `[state] max_keys` and `max_bytes`), shared by all its
    /// operator instances; `None` without one.
    pub(crate) fn state_quota(&self, spec: StateQuotaSpec) -> Option<Arc<StateQuota>> {
        if spec.max_keys.is_none() && spec.max_bytes.is_none() {
            return None;
        }
        let make = || Arc::new(StateQuota::new(spec.max_keys, spec.max_bytes));
        Some(self.state.get_or_init(make).clone())
    }

    /// The run's state quota, if it has one and has started.
    pub fn state(&self) -> Option<&StateQuota> {
        self.state.get().map(|quota| &**quota)
    }

    /// The run's memory pool, if it has one and has started.
    pub fn memory(&self) -> Option<&MemoryPool> {
        self.memory.get().map(|pool| &**pool)
    }

    /// The run's CPU budget, if it has one and has started.
    pub fn cpu(&self) -> Option<&CpuQuota> {
        self.cpu.get().map(|quota| &**quota)
    }

    /// Takes the pending routing request, if any.
    pub(crate) fn take_request(&self) -> Option<Routing> {
        self.requested.lock().expect("routing lock").take()
    }

    /// The routing of the last committed checkpoint.
    pub fn applied(&self) -> Option<Routing> {
        self.applied.lock().expect("routing lock").clone()
    }

    /// A checkpoint committed with `routing`: a rollout step (a new percentage, candidate or
    /// live version) takes effect from here on.
    pub(crate) fn set_applied(&self, routing: Routing) {
        let mut applied = self.applied.lock().expect("routing lock");
        if applied.as_ref() != Some(&routing) {
            let _step = tracing::info_span!("rollout_step", live = %routing.live).entered();
            tracing::info!(routing = ?routing, "rollout step applied at a checkpoint");
        }
        *applied = Some(routing);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn control() -> PipelineControl {
        let resolve: Resolver = Box::new(|_, v| Err(ResolveError::Unknown(v.to_owned())));
        PipelineControl::new("p", resolve, None)
    }

    /// Whether a call waiting for `quota`, put 1,000 s in debt, goes on within 2 s.
    fn goes_on_at_once(quota: Arc<CpuQuota>) -> bool {
        quota.charge(Duration::from_secs(10)); // at a hundredth of a core
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            quota.wait_turn();
            let _ = done.send(());
        });
        finished.recv_timeout(Duration::from_secs(2)).is_ok()
    }

    /// A stop releases the CPU quota whether the quota was made before it or after (a stop
    /// while the run was still being built); without a stop, the quota holds the call.
    #[test]
    fn a_stop_releases_the_cpu_quota_made_before_it_or_after() {
        let before = control();
        before.stop();
        assert!(
            goes_on_at_once(before.cpu_quota(Some(10)).unwrap()),
            "made after the stop"
        );
        let after = control();
        let quota = after.cpu_quota(Some(10)).unwrap();
        after.stop();
        assert!(goes_on_at_once(quota), "made before the stop");
        assert!(
            !goes_on_at_once(control().cpu_quota(Some(10)).unwrap()),
            "no stop"
        );
        assert!(control().cpu_quota(None).is_none());
    }
}
