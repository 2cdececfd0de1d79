//! [`Worker`]: one `weir worker` process's share of a pipeline. Its membership and its slices'
//! leases are renewed by a thread of their own (`renewer.rs`). Every [`BEAT`] the worker reaps
//! slices whose lease was lost, works out which slices are its own (slice `i` goes to
//! the `i mod n`-th of the `n` live members, sorted), gives up the slices that are no longer
//! its own (a final checkpoint, uploaded, then the lease released) and takes those that are
//! free (the last uploaded checkpoint restored, then a run started from it).
//!
//! Depends on `pipeline`, `rollout`, `source`, `spec`, `time` and the rest of `cluster`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::deploy::{PipelineRecord, fetch_file, fetch_record};
use super::leases::Leases;
use super::liveness::{self, Responder};
use super::progress::Reporter;
use super::renewer::Renewer;
use super::rollout::{FetchedCode, read_routing, resolver};
use super::snapshots::{Snapshots, Uploader};
use super::watermarks::{Exchange, Runs};
use super::{BEAT, ClusterError, Connection, Result, check_name, check_shareable};
use crate::pipeline::{KeyGroups, PipelineControl, PipelineError, RunOptions, Summary};
use crate::rollout::Routing;
use crate::source::NatsFeed;
use crate::spec::{OperatorCode, PipelineSpec, Sink, SourceSpec, StateSpec};

/// How a worker is started (`weir worker`).
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The NATS server.
    pub url: String,
    /// The shared pipeline to work on.
    pub pipeline: String,
    /// This worker's name (unique among the pipeline's workers; default: host name and pid).
    pub id: Option<String>,
    /// Where this worker keeps its slices' local state and the components.
    pub dir: PathBuf,
}

/// How long a member must stay gone to its probes, without renewing its membership, before its
/// leases are freed (longer than a reconnection, which renews at once).
const GONE_AFTER: Duration = Duration::from_millis(1_500);

/// How long a slice whose run failed is left alone before this worker takes it again.
const COOLDOWN: Duration = Duration::from_secs(5);

/// How often the worker running the stage slice purges what it has read from its stream.
const PURGE_EVERY: Duration = Duration::from_secs(10);

/// What a slice's thread runs.
type SliceThread = Box<dyn FnOnce() -> Result<Summary, PipelineError> + Send>;

/// A slice this worker runs.
struct SliceRun {
    control: Arc<PipelineControl>,
    thread: std::thread::JoinHandle<Result<Summary, PipelineError>>,
    uploader: Uploader,
}

/// One process's share of a shared pipeline.
pub struct Worker {
    id: String,
    dir: PathBuf,
    record: PipelineRecord,
    spec: PipelineSpec,
    renewer: Renewer,
    snapshots: Arc<Snapshots>,
    running: BTreeMap<usize, SliceRun>,
    failed: BTreeMap<usize, Instant>,
    stop: Arc<AtomicBool>,
    /// The one reader of the input stream, shared by this worker's slices (a partitioned
    /// stream has none: each slice reads its own partition).
    feed: Option<NatsFeed>,
    /// The slices' runs here: their progress reported, and a partitioned stream's watermarks
    /// shared by `exchange` with the other workers'.
    runs: Runs,
    _exchange: Option<Exchange>,
    /// Reports each slice's progress for `weir cluster status`.
    _reporter: Reporter,
    /// Answers the other workers' probes while this process lives.
    _responder: Responder,
    connection: Arc<Connection>,
    /// The components fetched, for the spec and for rollouts.
    code: FetchedCode,
    /// The routing stored by `weir cluster rollout`, with its revision.
    routing: Option<(u64, Routing)>,
    /// Members whose probe found them gone once: when, and their membership's revision then.
    suspects: BTreeMap<String, (Instant, u64)>,
    /// When the stage stream was last purged of what the stage slice run here has read.
    purged_at: Instant,
}

impl Worker {
    /// Connects, reads the shared pipeline and fetches its components.
    pub fn start(options: WorkerOptions) -> Result<Worker> {
        let id = options
            .id
            .clone()
            .unwrap_or_else(|| format!("{}-{}", host_name(), std::process::id()));
        check_name("worker name", &id)?;
        check_name("pipeline name", &options.pipeline)?;
        let connection = Arc::new(Connection::open(&options.url)?);
        let record = fetch_record(&connection, &options.pipeline)?;
        let dir = options.dir.join(&record.name);
        let code = FetchedCode::default();
        let spec = shared_spec(&connection, &record, &dir, &code)?;
        // Answering before any lease is taken: a peer that probes sees this process at once.
        let responder = Responder::start(&connection, &record.name, &id)?;
        let leases = Leases::open(connection.clone(), &record.name, Some(&id))?;
        let renewer = Renewer::start(leases).map_err(|source| ClusterError::Io {
            path: options.dir.clone(),
            source,
        })?;
        let snapshots = Arc::new(Snapshots::open(connection.clone())?);
        if super::stage_stream::staged(&spec) {
            super::stage_stream::ensure_shared(&connection, &record.name)?;
        }
        let runs = Runs::default();
        // One reader shared by the slices of a stream cut by key group; a partitioned stream
        // or a Kafka topic is read a partition a slice, with the watermarks exchanged.
        let unpartitioned = match &spec.source {
            SourceSpec::Nats(input) if input.partitions.is_none() => Some(input),
            _ => None,
        };
        let (feed, exchange) = match unpartitioned {
            None => {
                let exchange = Exchange::start(
                    connection.clone(),
                    &record.name,
                    record.slices,
                    runs.clone(),
                )?;
                (None, Some(exchange))
            }
            Some(input) => {
                let feed = NatsFeed::start(input.clone()).map_err(ClusterError::Feed)?;
                (Some(feed), None)
            }
        };
        let reporter = Reporter::start(connection.clone(), &record.name, &id, runs.clone())?;
        Ok(Worker {
            feed,
            runs,
            _exchange: exchange,
            _reporter: reporter,
            _responder: responder,
            connection,
            code,
            routing: None,
            suspects: BTreeMap::new(),
            purged_at: Instant::now(),
            id,
            dir,
            record,
            spec,
            renewer,
            snapshots,
            running: BTreeMap::new(),
            failed: BTreeMap::new(),
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Set it to stop the worker: its slices are checkpointed, uploaded and released.
    pub fn stopper(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// This worker's name.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Works until stopped, then gives every slice up.
    pub fn run(mut self) -> Result<()> {
        info!(worker = %self.id, pipeline = %self.record.name, slices = self.record.slices, "worker started");
        while !self.stop.load(Ordering::SeqCst) {
            let started = Instant::now();
            self.step();
            let rest = BEAT.saturating_sub(started.elapsed());
            let until = Instant::now() + rest;
            while Instant::now() < until && !self.stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // One at a time, while the renewer keeps the others' leases.
        while let Some(slice) = self.running.keys().next().copied() {
            self.give_up(slice);
        }
        self.renewer.leases().leave();
        info!(worker = %self.id, "worker stopped");
        Ok(())
    }

    fn step(&mut self) {
        // Lost slices first: a run stopped for its lost lease has finished, and reaping it
        // as a failure would keep the slice from this worker for a cooldown.
        for slice in self.renewer.lost() {
            self.lose(slice);
        }
        self.reap_finished();
        // While the server is away, every request below would wait out its timeout in turn
        // (20 s and more), and slices lost meanwhile would wait as long to be taken again.
        if !self.renewer.reachable() || !self.connection.connected() {
            return;
        }
        if !self.follow_record() {
            return;
        }
        self.follow_rollout();
        self.rebalance();
        self.purge_stage_stream();
    }

    /// Every [`PURGE_EVERY`], while this worker runs the stage slice: purges from the stage
    /// stream what its last uploaded checkpoint has read (a takeover resumes after it).
    fn purge_stage_stream(&mut self) {
        if self.purged_at.elapsed() < PURGE_EVERY {
            return;
        }
        self.purged_at = Instant::now();
        let Some(stage_slice) = self.stage_slice() else {
            return;
        };
        let Some(run) = self.running.get(&stage_slice) else {
            return;
        };
        // What was uploaded, then the lease confirmed: a worker that lost the slice without
        // knowing it yet (its uploads may have gone on) purges nothing its taker needs.
        let Some(read) = run.uploader.uploaded_sequence() else {
            return;
        };
        if !self.renewer.confirm(stage_slice) {
            return;
        }
        if let Err(e) = super::stage_stream::purge(&self.connection, &self.record.name, read) {
            warn!(worker = %self.id, error = %e, "cannot purge the stage stream");
        }
    }

    /// Takes up what was stored of the pipeline since the last look: a new spec (a promotion,
    /// a redeploy) for the slices taken from now on; a stop, on which every slice is given up
    /// after a final checkpoint; a withdrawal, on which every slice is dropped with nothing
    /// more uploaded (its checkpoints are being deleted). Whether the worker may run slices.
    fn follow_record(&mut self) -> bool {
        let record = match fetch_record(&self.connection, &self.record.name) {
            Ok(record) => record,
            Err(ClusterError::Unknown(_)) => {
                if !self.running.is_empty() {
                    warn!(worker = %self.id, pipeline = %self.record.name, "pipeline withdrawn; dropping its slices");
                    eprintln!("weir: worker {}: the pipeline was withdrawn", self.id);
                }
                while let Some(slice) = self.running.keys().next().copied() {
                    self.drop_slice(slice);
                }
                return false;
            }
            Err(e) => {
                warn!(worker = %self.id, error = %e, "pipeline record unknown");
                return true; // carry on with what it was
            }
        };
        if record.stopped && !self.record.stopped {
            eprintln!("weir: worker {}: the pipeline is stopped", self.id);
        }
        if record.stopped {
            while let Some(slice) = self.running.keys().next().copied() {
                self.give_up(slice);
            }
        }
        let changed = record.spec != self.record.spec || record.json != self.record.json;
        let mut taken = true;
        if changed {
            let staged = super::stage_stream::staged(&self.spec);
            match shared_spec(&self.connection, &record, &self.dir, &self.code) {
                Ok(spec) if super::stage_stream::staged(&spec) != staged => {
                    // Refused at deploy; a record written otherwise is not followed.
                    taken = false;
                    warn!(worker = %self.id, "the record adds or takes away the stage slice; restart the worker");
                }
                Ok(spec) if record.slices == self.record.slices => {
                    info!(worker = %self.id, "pipeline spec changed; slices taken from now run it");
                    eprintln!(
                        "weir: worker {} takes up the pipeline's changed spec",
                        self.id
                    );
                    self.spec = spec;
                }
                Ok(_) => {
                    taken = false;
                    warn!(worker = %self.id, "the record's slice count changed; restart the worker");
                }
                Err(e) => {
                    // Looked at again at the next beat.
                    taken = false;
                    warn!(worker = %self.id, error = %e, "cannot take up the changed spec");
                }
            }
        }
        let stopped = record.stopped;
        self.record.stopped = stopped;
        self.record.code = record.code;
        if taken {
            self.record.spec = record.spec;
            self.record.json = record.json;
        }
        !stopped
    }

    /// The stage slice, if the pipeline has one: the last, after the input's slices.
    fn stage_slice(&self) -> Option<usize> {
        super::stage_stream::staged(&self.spec).then_some(self.record.slices)
    }

    /// Gives up the slices no longer this worker's and takes the free ones that are.
    fn rebalance(&mut self) {
        self.evict_gone();
        let members = match self.renewer.leases().members() {
            Ok(members) if members.contains(&self.id) => members,
            Ok(_) => return, // our own membership is not visible yet
            Err(e) => {
                warn!(worker = %self.id, error = %e, "membership unknown");
                return;
            }
        };
        let slices = self.record.slices + usize::from(self.stage_slice().is_some());
        let mine: Vec<usize> = (0..slices)
            .filter(|slice| members[slice % members.len()] == self.id)
            .collect();
        let surplus: Vec<usize> = (self.running.keys())
            .filter(|slice| !mine.contains(slice))
            .copied()
            .collect();
        for slice in surplus {
            self.give_up(slice);
        }
        self.failed.retain(|_, at| at.elapsed() < COOLDOWN);
        for slice in mine {
            if self.running.contains_key(&slice) || self.failed.contains_key(&slice) {
                continue;
            }
            if let Some(revision) = self.renewer.leases().acquire(slice)
                && let Err(e) = self.take(slice, revision)
            {
                warn!(worker = %self.id, slice, error = %e, "cannot run slice");
                self.renewer.leases().release(slice, revision);
                self.failed.insert(slice, Instant::now());
            }
        }
    }

    /// Frees the membership and leases of the other workers whose process is gone, so their
    /// slices are taken within two beats instead of once their leases expire: a member whose
    /// probe is answered "no responders" twice, [`GONE_AFTER`] apart, without a membership
    /// renewal between (a worker whose connection dropped for a moment, and which the server
    /// therefore forgot, renews at once on reconnecting). A worker that is slow, or a server that
    /// does not say, is left to the leases' expiry.
    fn evict_gone(&mut self) {
        let leases = self.renewer.leases();
        let held = match leases.held_by_others() {
            Ok(held) => held,
            Err(e) => {
                warn!(worker = %self.id, error = %e, "leases unknown");
                return;
            }
        };
        self.suspects.retain(|member, _| held.contains_key(member));
        let members: Vec<&str> = held.keys().map(String::as_str).collect();
        let gone = liveness::gone(&self.connection, &self.record.name, &members);
        for ((member, keys), gone) in held.into_iter().zip(gone) {
            // The membership comes first: its revision moves at every renewal.
            let renewed = keys.first().map_or(0, |(_, revision)| *revision);
            if !gone {
                self.suspects.remove(&member);
                continue;
            }
            let since = match self.suspects.get(&member) {
                Some((since, revision)) if *revision == renewed => *since,
                _ => {
                    self.suspects.insert(member, (Instant::now(), renewed));
                    continue;
                }
            };
            if since.elapsed() >= GONE_AFTER {
                self.suspects.remove(&member);
                leases.evict(&keys);
                info!(worker = %self.id, gone = %member, leases = keys.len() - 1, "a worker is gone: its leases freed");
                eprintln!(
                    "weir: worker {}: worker {member} is gone; its slices are free",
                    self.id
                );
            }
        }
    }

    /// Takes up a routing stored since the last look: fetches the pipeline's components again
    /// (a rollout adds the candidate's) and hands the routing to every slice run.
    fn follow_rollout(&mut self) {
        let stored = match read_routing(&self.connection, &self.record.name) {
            Ok(Some(stored)) => stored,
            Ok(None) => return,
            Err(e) => {
                warn!(worker = %self.id, error = %e, "routing unknown");
                return;
            }
        };
        if self.routing.as_ref().map(|(revision, _)| *revision) == Some(stored.0) {
            return;
        }
        let fetched = fetch_record(&self.connection, &self.record.name).and_then(|record| {
            fetch_code(
                &self.connection,
                &record,
                &self.dir.join("operators"),
                &self.code,
            )
        });
        if let Err(e) = fetched {
            warn!(worker = %self.id, error = %e, "cannot fetch the rollout's code");
            return;
        }
        let routing = stored.1.clone();
        info!(worker = %self.id, ?routing, "routing taken up");
        eprintln!(
            "weir: worker {} routes {}% of keys to {:?}{}",
            self.id,
            routing.percent,
            routing.candidate,
            if routing.shadow { " (shadow)" } else { "" }
        );
        for run in self.running.values() {
            run.control.request(routing.clone());
        }
        self.routing = Some(stored);
    }

    /// The spec slice `slice` runs: the pipeline's, its state in `data` (`fresh`: no checkpoint
    /// of it restored), on one shard unless it says otherwise; and whether the slice reads a
    /// partition of its own (of a partitioned stream, every key of it) rather than its key
    /// groups of the whole stream.
    fn slice_spec(&self, slice: usize, data: PathBuf, fresh: bool) -> (PipelineSpec, bool) {
        let mut spec = self.spec.clone();
        spec.state = StateSpec::Redb(data);
        spec.shards = Some(spec.shards.unwrap_or(1));
        let partitioned = match &mut spec.source {
            SourceSpec::Nats(nats) if nats.partitions.is_some() => {
                nats.partition = Some(slice);
                true
            }
            SourceSpec::Kafka(kafka) => {
                kafka.partition = Some(slice as i32);
                true
            }
            _ => false,
        };
        // The results of a slice upstream of a stage slice go to it.
        if super::stage_stream::staged(&spec) {
            let sink = super::stage_stream::sink(&self.connection, &self.record.name, slice);
            spec.sinks.results = Sink::Nats(sink);
        }
        // A slice writes a Kafka topic's partition of its own, under a transactional id of its
        // own: its next owner fences it, and its read-back sees its own records only. An owner
        // before a `fresh` one may have committed results to Kafka and been killed before its
        // first checkpoint was uploaded: the partition is then read back from its start.
        let sinks = &mut spec.sinks;
        for sink in [&mut sinks.results, &mut sinks.late, &mut sinks.dead_letters] {
            if let Sink::Kafka(kafka) = sink {
                kafka.partition = slice as i32;
                if fresh {
                    kafka.read_back_from = Some(0);
                }
            }
        }
        (spec, partitioned)
    }

    /// The control of slice `slice`'s run: its versions resolved from the worker's code, its
    /// checkpoints uploaded by `uploader`, reading the worker's shared feed if it has one, its
    /// watermark held back (when `partitioned`) until the other slices' are known, and the
    /// routing in effect asked for.
    fn slice_control(
        &self,
        spec: &PipelineSpec,
        slice: usize,
        uploader: &Uploader,
        partitioned: bool,
    ) -> Arc<PipelineControl> {
        let label = format!("{}/slice-{slice}", self.record.name);
        let control = PipelineControl::new(&label, resolver(spec, self.code.clone()), None)
            .with_commit_listener(uploader.listener());
        let control = Arc::new(match &self.feed {
            Some(feed) => {
                // Each line decoded once for the worker's slices of this spec's fields (a
                // join's runs decode their own: they key each side apart).
                let shared = spec.join.is_none();
                let decoding =
                    shared.then(|| (spec.key_field.clone(), spec.timestamp_field.clone()));
                let source = feed.source(decoding);
                // The slice of key group 0 writes every run's dead letters, with whole events.
                // A global or pre-aggregated aggregate routes by bucket, not by key: every
                // slice gets whole events.
                let groups = KeyGroups::slice(slice, self.record.slices);
                let bucketed = spec.global || spec.pre_aggregate;
                let light =
                    shared && !groups.contains(0) && spec.partition_field.is_none() && !bucketed;
                let source = match light {
                    true => source.owning(u32::from(groups.first)..groups.end),
                    false => source,
                };
                control.with_source(Box::new(source))
            }
            None => control,
        });
        if partitioned {
            // Held back until the other slices' watermarks are known.
            control.shared_watermark.enable(crate::time::MINUS_INFINITY);
        }
        if let Some((_, routing)) = &self.routing {
            control.request(routing.clone());
        }
        control
    }

    /// Restores slice `slice`'s last uploaded checkpoint and starts running it.
    fn take(&mut self, slice: usize, revision: u64) -> Result<()> {
        let slice_dir = self.dir.join(format!("slice-{slice}"));
        let data = slice_dir.join("data");
        if super::stage_stream::staged(&self.spec) {
            // Made again if the pipeline was withdrawn and deployed again meanwhile.
            super::stage_stream::ensure_shared(&self.connection, &self.record.name)?;
        }
        let restored = self.snapshots.restore(&self.record.name, slice, &data)?;
        let uploader = Uploader::start(
            self.snapshots.clone(),
            &self.record.name,
            slice,
            revision,
            slice_dir.join(format!("upload-{revision}")),
        )
        .map_err(|source| ClusterError::Io {
            path: slice_dir.clone(),
            source,
        })?;
        let stage_slice = self.stage_slice() == Some(slice);
        let (control, run) = match stage_slice {
            true => self.stage_run(data, &uploader)?,
            false => self.keyed_run(slice, data, restored.is_none(), &uploader),
        };
        let thread = std::thread::Builder::new()
            .name(format!("weir-slice-{slice}"))
            .spawn(run)
            .map_err(|source| ClusterError::Io {
                path: slice_dir,
                source,
            })?;
        // Reported (`progress.rs`), and of a partitioned stream, its watermark exchanged (not
        // the stage slice's: its watermark follows the others').
        (self.runs.lock().expect("runs lock")).insert(slice, control.clone());
        info!(worker = %self.id, slice, resumed_from = ?restored, "slice taken");
        eprintln!(
            "weir: worker {} runs slice {slice} (from checkpoint {})",
            self.id,
            restored.map_or("none".into(), |id| id.to_string())
        );
        let on_loss = {
            let (fence, control, runs) = (uploader.fencer(), control.clone(), self.runs.clone());
            Box::new(move || {
                fence();
                // No longer this worker's to publish a watermark for.
                runs.lock().expect("runs lock").remove(&slice);
                control.stop();
            })
        };
        self.renewer.hold(slice, revision, on_loss);
        self.running.insert(
            slice,
            SliceRun {
                control,
                thread,
                uploader,
            },
        );
        Ok(())
    }

    /// The control and the run of slice `slice` of key groups (or of a partition), its state in
    /// `data` (`fresh` if no checkpoint of it was restored).
    fn keyed_run(
        &self,
        slice: usize,
        data: PathBuf,
        fresh: bool,
        uploader: &Uploader,
    ) -> (Arc<PipelineControl>, SliceThread) {
        let (spec, partitioned) = self.slice_spec(slice, data, fresh);
        let control = self.slice_control(&spec, slice, uploader, partitioned);
        let staged = super::stage_stream::staged(&spec);
        let options = RunOptions {
            fresh: false,
            key_groups: (!partitioned).then(|| KeyGroups::slice(slice, self.record.slices)),
            upstream_of_stages: staged.then_some(slice),
        };
        let run = {
            let control = control.clone();
            Box::new(move || crate::pipeline::run_controlled(&spec, options, Some(control)))
        };
        (control, run)
    }

    /// The control and the run of the stage slice, its state in `data`: it reads the other
    /// slices' results from their stream.
    fn stage_run(
        &self,
        data: PathBuf,
        uploader: &Uploader,
    ) -> Result<(Arc<PipelineControl>, SliceThread)> {
        let mut spec = self.spec.clone();
        spec.state = StateSpec::Redb(data);
        let label = format!("{}/stages", self.record.name);
        let control = PipelineControl::new(&label, resolver(&spec, self.code.clone()), None)
            .with_commit_listener(uploader.listener());
        let control = Arc::new(control);
        if let Some((_, routing)) = &self.routing {
            control.request(routing.clone());
        }
        let input = super::stage_stream::source(&self.connection, &self.record.name);
        let upstream = crate::source::NatsSource::new(input).map_err(ClusterError::Feed)?;
        let slices = self.record.slices;
        let run = {
            let control = control.clone();
            Box::new(move || {
                crate::pipeline::run_stage_slice(&spec, Box::new(upstream), slices, control)
            })
        };
        Ok((control, run))
    }

    /// Stops slice `slice` after a final checkpoint, uploads it and releases the lease.
    fn give_up(&mut self, slice: usize) {
        let Some(run) = self.running.remove(&slice) else {
            return;
        };
        self.runs.lock().expect("runs lock").remove(&slice);
        run.control.stop();
        let outcome = run.thread.join();
        let uploaded = run.uploader.finish();
        if let Ok(Err(e)) = &outcome {
            warn!(worker = %self.id, slice, error = %e, "slice run failed");
        }
        self.renewer.release(slice);
        info!(worker = %self.id, slice, checkpoint = uploaded, "slice given up");
        eprintln!(
            "weir: worker {} gave slice {slice} up (checkpoint {uploaded})",
            self.id
        );
    }

    /// Stops slice `slice`'s run at once with nothing more uploaded; whether it ran here.
    fn halt(&mut self, slice: usize) -> bool {
        let Some(run) = self.running.remove(&slice) else {
            return false;
        };
        self.runs.lock().expect("runs lock").remove(&slice);
        run.uploader.fence();
        run.control.stop();
        if let Ok(Err(e)) = run.thread.join() {
            warn!(worker = %self.id, slice, error = %e, "slice run failed");
        }
        true
    }

    /// Drops slice `slice` at once with nothing more uploaded, and releases its lease (the
    /// pipeline was withdrawn).
    fn drop_slice(&mut self, slice: usize) {
        if self.halt(slice) {
            self.renewer.release(slice);
        }
    }

    /// Slice `slice`'s lease was lost (taken by another worker, or expired while the server was
    /// away): stop at once, uploading nothing more.
    fn lose(&mut self, slice: usize) {
        if self.halt(slice) {
            self.renewer.forget(slice);
            warn!(worker = %self.id, slice, "slice lease lost (taken or expired); stopped");
        }
    }

    /// Slices whose run ended by itself (a failure: a NATS input does not end) or whose
    /// uploader died: their last checkpoint is uploaded, the lease released, and the slice
    /// left alone for a while.
    fn reap_finished(&mut self) {
        let finished: Vec<usize> = (self.running.iter())
            .filter(|(slice, run)| {
                let died = run.uploader.died();
                if died {
                    warn!(worker = %self.id, slice, "checkpoint uploader died; restarting the slice");
                }
                died || run.thread.is_finished()
            })
            .map(|(slice, _)| *slice)
            .collect();
        // A run stopped for a lease lost since `step` looked is the next step's to lose. Read
        // after the finished runs: the renewer marks a lease lost before it stops the run.
        let lost = self.renewer.lost();
        let finished = finished.into_iter().filter(|slice| !lost.contains(slice));
        for slice in finished {
            self.give_up(slice);
            self.failed.insert(slice, Instant::now());
        }
    }
}

/// The shared pipeline's spec as this worker runs it: parsed from the record (relative paths
/// under `dir`), checked again (the bucket is input like any other), and every component and
/// reference data file replaced by the one fetched by its digest.
fn shared_spec(
    connection: &Connection,
    record: &PipelineRecord,
    dir: &Path,
    code: &FetchedCode,
) -> Result<PipelineSpec> {
    let mut spec = PipelineSpec::parse(&record.spec, record.json, dir)?;
    if spec.name != record.name {
        return Err(ClusterError::Damaged(format!(
            "pipeline record {}: its spec names {:?}",
            record.name, spec.name
        )));
    }
    check_shareable(&spec)?;
    fetch_code(connection, record, &dir.join("operators"), code)?;
    let fetched = code.lock().expect("code lock");
    for operator in spec.operators_mut() {
        if !matches!(
            operator.code,
            OperatorCode::Component(_) | OperatorCode::Registry
        ) {
            continue;
        }
        let label = operator.label();
        let (path, digest) = fetched.get(&label).cloned().ok_or_else(|| {
            ClusterError::Damaged(format!(
                "pipeline record {}: no code for {label}",
                record.name
            ))
        })?;
        operator.code = OperatorCode::Stored { path, digest };
    }
    drop(fetched);
    fetch_references(connection, record, &dir.join("references"), &mut spec)?;
    Ok(spec)
}

/// Fetches each enricher's reference data into `dir` (checked against its digest) and points
/// the enricher at it.
fn fetch_references(
    connection: &Connection,
    record: &PipelineRecord,
    dir: &Path,
    spec: &mut PipelineSpec,
) -> Result<()> {
    for operator in &mut spec.enrichers {
        let label = operator.label();
        let Some(reference) = &mut operator.reference else {
            continue;
        };
        let digest = record.references.get(&label).ok_or_else(|| {
            ClusterError::Damaged(format!(
                "pipeline record {}: no reference data for {label}",
                record.name
            ))
        })?;
        std::fs::create_dir_all(dir).map_err(|source| ClusterError::Io {
            path: dir.to_owned(),
            source,
        })?;
        reference.path = fetch_file(connection, digest, dir, "jsonl")?;
    }
    Ok(())
}

/// Fetches every component of the record not fetched yet into `dir`.
fn fetch_code(
    connection: &Connection,
    record: &PipelineRecord,
    dir: &Path,
    code: &FetchedCode,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| ClusterError::Io {
        path: dir.to_owned(),
        source,
    })?;
    for (label, digest) in &record.code {
        if code.lock().expect("code lock").contains_key(label) {
            continue;
        }
        let path = fetch_file(connection, digest, dir, "wasm")?;
        (code.lock().expect("code lock")).insert(label.clone(), (path, digest.clone()));
    }
    Ok(())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| {
            name.trim()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty() && name.len() <= 40)
        .unwrap_or_else(|| "worker".into())
}
