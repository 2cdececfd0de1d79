//! [`run_stage_slice`]: the slice of a pipeline shared by workers that runs its stages (a global
//! or pre-aggregated aggregate's combine among them). It reads the other slices' upstream
//! records (`upstream.rs`) from their stream, holds their results until every slice's mark has
//! passed them, and then hands them, in the stream's order, with the watermark that lowest mark
//! sets, to the collector, which runs the stages, writes the pipeline's sinks and commits
//! checkpoints as in a run of its own (this file plays the router's and the shards' part).
//!
//! A slice's results are held apart while more of the same batch of it are to come (they are
//! `open`): what one event made in a slice reaches the stages whole, in one hand-over, even when
//! another slice's mark moves the lowest mark between two of its results.
//!
//! A checkpoint is taken when nothing is held, at the stream's position after the last record
//! read, with the slices' marks as its partitions and what the stages took (`Latest`): a
//! restore reads on from there with the stages' state of that moment. A checkpoint five
//! intervals overdue, or a stop's, first hands what is held to the stages without moving the
//! watermark (as past the held-results cap: a window fires only at a watermark), so held
//! results never keep a checkpoint away for long. (A checkpoint before held records would have
//! the restore read again records handed over after them, which `Latest` no longer remembers
//! once their windows are settled.)
//!
//! Depends on `source`, `spec`, `time`, `watermark` and `window`, and of `pipeline` on `build`,
//! `collector` (through `mod.rs`), `messages` and `upstream`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::{Duration, Instant};

use tracing::{info, instrument};

use super::messages::{Part, Position, RouterPart};
use super::upstream::{Latest, Upstream, parse};
use super::{PipelineControl, PipelineError, Result, ShardOutput, ShardSnapshot, Summary, build};
use crate::event::{DeadCause, DeadLetter};
use crate::source::{Record, Source, SourcePosition};
use crate::spec::PipelineSpec;
use crate::time::{MINUS_INFINITY, Millis};
use crate::watermark::PartitionMark;
use crate::window::{Emission, EngineOutput};

/// How many checkpoint intervals a checkpoint waits for held results to be handed over with
/// their watermark before it hands them over without it.
const OVERDUE: u32 = 5;

/// The most results, and bytes of them, held for a mark: past that they are handed over
/// without the watermark moving (a window that fires for a million keys, or slices that run
/// ahead of one replaying after a takeover), which the stages take as they would with it.
const MAX_HELD: usize = 100_000;
const MAX_HELD_BYTES: usize = 64 << 20;

/// Runs the stages of `spec`, a pipeline of `slices` slices upstream of them, from `upstream`
/// (their records' stream), until the control asks for a stop: then a last checkpoint.
#[instrument(skip_all, fields(pipeline = %spec.name))]
pub fn run_stage_slice(
    spec: &PipelineSpec,
    mut upstream: Box<dyn Source>,
    slices: usize,
    control: Arc<PipelineControl>,
) -> Result<Summary> {
    let started = Instant::now();
    let loaded = build::Loaded::load(spec)?;
    let (store, manifest) = super::open_state(spec, false, &control)?;
    super::note_resumed(&control, manifest.as_ref());
    let sinks = super::open_sinks(spec, manifest.as_ref())?;
    let (routing, candidate) = super::resume_routing(spec, &control, manifest.as_ref())?;
    let resume = build::Resume::of(
        store.as_ref(),
        manifest.as_ref(),
        (routing.as_ref(), candidate.as_ref()),
    );
    let stages = build::build_stages(spec, &loaded, &resume, &control)?
        .ok_or_else(|| PipelineError::Config("the pipeline has no stages to run".into()))?;
    let bucketed = spec.global || spec.pre_aggregate;
    let mut feeder = Feeder::new(slices, spec.allowed_lateness, bucketed, routing.clone());
    if let (Some((store, _)), Some(manifest)) = (&store, &manifest) {
        upstream
            .resume(&manifest.source)
            .map_err(PipelineError::Source)?;
        feeder.resume(manifest.events, manifest.watermark, &manifest.partitions);
        let (from, to) = Latest::row_range();
        let rows = store.scan(true, &from, &to)?;
        feeder.latest = Latest::restore(&rows).map_err(|e| PipelineError::Config(e.to_string()))?;
    }
    let (ack_tx, ack) = sync_channel::<()>(1);
    let (part_tx, part_rx) = sync_channel::<(u64, Part)>(8);
    let checkpointer = super::checkpointer(
        spec,
        store.as_ref(),
        manifest.as_ref(),
        vec![ack_tx],
        &control,
    );
    let collector = super::spawn_collector(
        spec,
        part_rx,
        1,
        sinks,
        checkpointer,
        Some(stages),
        &control,
    );
    info!(slices, "stage slice started");
    let interval = spec
        .checkpoint_interval
        .map_or(Duration::from_secs(1), |ms| {
            Duration::from_millis(ms as u64)
        });
    let fed = feeder.feed(upstream.as_mut(), &part_tx, &ack, interval, &control);
    drop(part_tx);
    let (collected, results_out, late, dead_letters) =
        collector.join().expect("the collector thread panicked");
    let collected = collected?;
    fed?;
    Ok(Summary {
        events_in: feeder.read,
        results_out,
        late,
        dead_letters,
        traps: collected.traps,
        shards: 1,
        resumed_from: manifest.map(|m| m.id),
        checkpoints: collected.checkpoints,
        elapsed: started.elapsed(),
        router_cpu: None,
        shards_cpu: None,
    })
}

/// The name of slice `slice`'s watermark partition in the stage slice's checkpoints.
fn partition_name(slice: usize) -> String {
    format!("slice-{slice}")
}

/// What the stage slice holds between the upstream stream and the collector.
struct Feeder {
    /// Each upstream slice's mark.
    marks: Vec<Millis>,
    /// The watermark handed over last: the lowest mark then.
    watermark: Millis,
    /// Results held until the lowest mark passes, with their slices, in the stream's order.
    held: Held,
    /// Each slice's results whose batch is not closed yet (see the module's doc).
    open: Vec<Held>,
    /// The latest version of each result seen: an older one sent again is dropped.
    latest: Latest,
    /// The pipeline's allowed lateness: how long a slice may still change a window that ended.
    lateness: Millis,
    /// The batch id the last checkpoint was taken before.
    checkpointed_at: u64,
    /// Records that are not upstream records, with why.
    dead: Vec<DeadLetter>,
    /// The next arrival index (one for what one event made in one slice).
    events: u64,
    /// The next batch id.
    batch: u64,
    /// Partials are told apart by slice.
    bucketed: bool,
    /// Records read by this run.
    read: u64,
    last_checkpoint: Instant,
    /// Which versions of a stage's operator serve which keys (a rollout), changed at a
    /// checkpoint.
    routing: Option<crate::rollout::Routing>,
}

impl Feeder {
    /// The feeder of stages from `slices` slices, with the pipeline's allowed `lateness`,
    /// partials told apart by slice if `bucketed`, and the `routing` resumed.
    fn new(
        slices: usize,
        lateness: Millis,
        bucketed: bool,
        routing: Option<crate::rollout::Routing>,
    ) -> Feeder {
        Feeder {
            marks: vec![MINUS_INFINITY; slices],
            watermark: MINUS_INFINITY,
            held: Held::default(),
            open: (0..slices).map(|_| Held::default()).collect(),
            latest: Latest::default(),
            lateness,
            checkpointed_at: 0,
            dead: Vec::new(),
            events: 0,
            batch: 0,
            bucketed,
            read: 0,
            last_checkpoint: Instant::now(),
            routing,
        }
    }

    /// Takes up a checkpoint's trigger count, watermark and marks.
    fn resume(&mut self, events: u64, watermark: Millis, partitions: &[PartitionMark]) {
        self.events = events;
        self.watermark = watermark;
        for (slice, mark) in self.marks.iter_mut().enumerate() {
            let name = partition_name(slice);
            if let Some(saved) = partitions.iter().find(|p| p.name == name) {
                *mark = saved.max_timestamp;
            }
        }
    }

    /// Reads and hands over until a stop, then takes a last checkpoint.
    fn feed(
        &mut self,
        upstream: &mut dyn Source,
        parts: &SyncSender<(u64, Part)>,
        ack: &Receiver<()>,
        interval: Duration,
        control: &PipelineControl,
    ) -> Result<()> {
        // The stream's sequences follow each other, and a read takes one message at most: a
        // read that moves further skipped records gone from the stream (purged past what this
        // slice has read).
        let mut before = upstream.position().offset;
        control.stats.input_offset.store(before, Ordering::Relaxed);
        while !control.stopping() {
            control.beat();
            let record = upstream.next_record().map_err(PipelineError::Source)?;
            let read = upstream.position().offset;
            if read > before + 1 {
                return Err(PipelineError::Config(format!(
                    "the slices' records from sequence {} to {} are gone from the stream \
                     (purged past what this slice read): the stages would miss them",
                    before + 1,
                    read - 1
                )));
            }
            before = read;
            // How far it read, for its lag (its records are not events: none counted).
            control.stats.input_offset.store(read, Ordering::Relaxed);
            match record {
                Some(Record::Line(line, bytes)) => self.take(line, &bytes),
                Some(_) => {}
                None => break,
            }
            if let Some(watermark) = self.hand_over_due() {
                self.hand_over(watermark, parts)?;
            }
            // When something was handed over since the last one, or a rollout asks for a new
            // routing (which applies from a checkpoint on); with results held, once overdue.
            let since = self.last_checkpoint.elapsed();
            let changed = self.batch > self.checkpointed_at || control.has_request();
            let due = since >= interval && (self.holds_nothing() || since >= interval * OVERDUE);
            if changed && due {
                // A batch still open waits for its slice's next record or mark.
                self.release(parts, false)?;
                if self.holds_nothing() {
                    self.checkpoint(upstream.position(), parts, ack, control)?;
                }
            }
        }
        self.release(parts, true)?;
        if self.batch > self.checkpointed_at {
            self.checkpoint(upstream.position(), parts, ack, control)?;
        }
        Ok(())
    }

    /// Takes one upstream record.
    fn take(&mut self, line: u64, bytes: &[u8]) {
        self.read += 1;
        match parse(bytes, self.marks.len(), self.bucketed) {
            Ok(Upstream::Mark(slice, mark)) => {
                self.close(slice);
                self.marks[slice] = self.marks[slice].max(mark);
            }
            Ok(Upstream::Result {
                slice,
                emission,
                open,
            }) => {
                self.open[slice].push(slice, emission, bytes.len());
                if !open {
                    self.close(slice);
                }
            }
            Err(reason) => self.dead.push(DeadLetter {
                line,
                raw: String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]).into_owned(),
                reason: reason.to_string(),
                cause: DeadCause::Stage,
            }),
        }
    }

    /// Slice `slice`'s batch is closed: its results are held like the rest.
    fn close(&mut self, slice: usize) {
        let closed = std::mem::take(&mut self.open[slice]);
        self.held.bytes += closed.bytes;
        self.held.results.extend(closed.results);
    }

    /// Whether no result is held, open or not.
    fn holds_nothing(&self) -> bool {
        self.held.results.is_empty() && self.open.iter().all(|o| o.results.is_empty())
    }

    /// Hands over what is held without moving the watermark (before a checkpoint that cannot
    /// wait), and with `open`, the open batches too (before a stop's: what they lack comes
    /// after the restart as an arrival of its own).
    fn release(&mut self, parts: &SyncSender<(u64, Part)>, open: bool) -> Result<()> {
        if open {
            (0..self.open.len()).for_each(|slice| self.close(slice));
        }
        if self.held.results.is_empty() {
            return Ok(());
        }
        self.hand_over(self.watermark, parts)
    }

    /// The watermark to hand the held results over with, if it is time: the lowest mark moved,
    /// there are dead letters to write, or too much is held (then open batches go too).
    fn hand_over_due(&mut self) -> Option<Millis> {
        let count =
            self.held.results.len() + self.open.iter().map(|o| o.results.len()).sum::<usize>();
        let bytes = self.held.bytes + self.open.iter().map(|o| o.bytes).sum::<usize>();
        let full = count > MAX_HELD || bytes > MAX_HELD_BYTES;
        if full {
            (0..self.open.len()).for_each(|slice| self.close(slice));
        }
        let lowest = self.marks.iter().copied().min().unwrap_or(MINUS_INFINITY);
        let due = lowest > self.watermark || !self.dead.is_empty() || full;
        due.then(|| lowest.max(self.watermark))
    }

    /// Hands the held results, and the dead letters, to the collector with the watermark
    /// advanced to `watermark` after them. What one event made in its slice is one arrival
    /// (a retraction first, as one process has it: the stage's window fires once for both);
    /// arrivals go in the stream's order, so a retraction follows the result it withdraws (one
    /// arrival for all would put every retraction first).
    fn hand_over(&mut self, watermark: Millis, parts: &SyncSender<(u64, Part)>) -> Result<()> {
        let held = std::mem::take(&mut self.held).results;
        let mut arrivals: crate::hashing::HashMap<(usize, u64), u64> = Default::default();
        let mut emissions = Vec::with_capacity(held.len());
        for (slice, mut emission) in held {
            // In the stream's order for each slice, as read.
            if !self.latest.admits(slice, &mut emission) {
                continue;
            }
            let next = self.events + arrivals.len() as u64;
            emission.trigger = *arrivals.entry((slice, emission.trigger)).or_insert(next);
            emissions.push(emission);
        }
        emissions.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
        let arrivals = arrivals.len().max(1) as u64;
        let last = self.events + arrivals - 1;
        let advances = match watermark > self.watermark {
            true => vec![(last, watermark)],
            false => Vec::new(),
        };
        // No slice changes a window that ended more than a lateness before the lowest mark.
        let settled = watermark.saturating_sub(self.lateness).saturating_sub(1);
        self.latest.forget_ended(settled);
        let router = RouterPart {
            dead: std::mem::take(&mut self.dead),
            advances: Arc::new(advances),
            end_of_input: false,
        };
        let shard = ShardOutput {
            engine: EngineOutput {
                emissions,
                ..EngineOutput::default()
            },
            ..ShardOutput::default()
        };
        let id = self.batch;
        self.batch += 1;
        self.events += arrivals;
        self.watermark = watermark;
        let gone = || PipelineError::Config("the collector stopped".into());
        parts.send((id, Part::Router(router))).map_err(|_| gone())?;
        parts.send((id, Part::Shard(shard))).map_err(|_| gone())?;
        Ok(())
    }

    /// Commits a checkpoint at `read`, the position after the last record read (nothing is
    /// held), with the routing a rollout asked for since the last one, and waits until it is
    /// durable.
    fn checkpoint(
        &mut self,
        read: SourcePosition,
        parts: &SyncSender<(u64, Part)>,
        ack: &Receiver<()>,
        control: &PipelineControl,
    ) -> Result<()> {
        let change = super::router::requested_change(control, &mut self.routing);
        let partitions = (self.marks.iter().enumerate())
            .map(|(slice, mark)| PartitionMark {
                name: partition_name(slice),
                max_timestamp: *mark,
                last_seen: None,
                finished: false,
            })
            .collect();
        let position = Position {
            source: read,
            events: self.events,
            watermark: self.watermark,
            partitions,
            finished: false,
            started: Instant::now(),
            routing: self.routing.clone(),
        };
        let id = self.batch;
        self.batch += 1;
        let gone = || PipelineError::Config("the collector stopped".into());
        let barrier = Box::new((position, change, Vec::new()));
        parts
            .send((id, Part::Position(barrier)))
            .map_err(|_| gone())?;
        let snapshot = ShardSnapshot {
            windows: self.latest.changes(),
            ..ShardSnapshot::default()
        };
        (parts.send((id, Part::Snapshot(snapshot)))).map_err(|_| gone())?;
        ack.recv().map_err(|_| gone())?;
        self.last_checkpoint = Instant::now();
        self.checkpointed_at = self.batch;
        Ok(())
    }
}

/// Results of slices, in the order they were read, and their bytes on the stream.
#[derive(Default)]
struct Held {
    results: Vec<(usize, Emission)>,
    bytes: usize,
}

impl Held {
    fn push(&mut self, slice: usize, emission: Emission, bytes: usize) {
        self.results.push((slice, emission));
        self.bytes += bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::upstream::{mark, record};
    use crate::time::Window;
    use crate::window::EmissionKind;

    /// A result of key `k` in window [0, 10) of kind `kind` and version `version`, made by
    /// slice event (trigger) `trigger`.
    fn emission(kind: EmissionKind, version: u64, trigger: u64) -> Emission {
        Emission {
            trigger,
            key: "k".into(),
            window: Window { start: 0, end: 10 },
            kind,
            version,
            value: vec![("n".into(), crate::value::Value::Int(version as i64))],
            replaces: None,
            operator_version: None,
        }
    }

    /// Feeds `records` (as a slice wrote them) and returns the emissions of each hand-over.
    fn feed(
        feeder: &mut Feeder,
        records: &[crate::pipeline::upstream::UpstreamRecord],
    ) -> Vec<Vec<Emission>> {
        let (parts, handed) = sync_channel(64);
        for (line, record) in records.iter().enumerate() {
            feeder.take(line as u64, &serde_json::to_vec(record).unwrap());
            if let Some(watermark) = feeder.hand_over_due() {
                feeder.hand_over(watermark, &parts).unwrap();
            }
        }
        drop(parts);
        handed
            .iter()
            .filter_map(|(_, part)| match part {
                Part::Shard(shard) => Some(shard.engine.emissions),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn what_one_event_made_in_a_slice_is_handed_over_whole_though_a_mark_came_between() {
        let mut feeder = Feeder::new(2, 100, false, None);
        let result = emission(EmissionKind::Result, 1, 3);
        let retract = emission(EmissionKind::Retract, 1, 7);
        let update = emission(EmissionKind::Update, 2, 7);
        let handed = feed(
            &mut feeder,
            &[
                record("p", 0, &result, false),
                mark(0, 50),
                mark(1, 20),
                // A late event in slice 0 withdraws the result and makes its update: two
                // records, and slice 1's mark moves the lowest mark between them.
                record("p", 0, &retract, true),
                mark(1, 30),
                record("p", 0, &update, false),
                mark(1, 40),
            ],
        );
        let kinds: Vec<Vec<(EmissionKind, u64)>> = (handed.iter())
            .map(|e| e.iter().map(|e| (e.kind, e.trigger)).collect())
            .collect();
        assert_eq!(
            kinds,
            vec![
                vec![(EmissionKind::Result, 0)],
                vec![],
                vec![(EmissionKind::Retract, 2), (EmissionKind::Update, 2)],
            ],
            "the retraction and its update in one hand-over, as one arrival"
        );
        assert!(feeder.holds_nothing());
    }

    /// Upstream records as a stream gives them, one sequence each.
    struct Stream(std::collections::VecDeque<Vec<u8>>, u64);

    impl Source for Stream {
        fn next_record(
            &mut self,
        ) -> std::result::Result<Option<Record>, crate::source::SourceError> {
            Ok(self.0.pop_front().map(|line| {
                self.1 += 1;
                Record::Line(self.1, line)
            }))
        }
        fn position(&self) -> SourcePosition {
            SourcePosition {
                offset: self.1,
                ..SourcePosition::default()
            }
        }
        fn resume(
            &mut self,
            _: &SourcePosition,
        ) -> std::result::Result<(), crate::source::SourceError> {
            Ok(())
        }
    }

    /// Runs a feeder of two slices (a lateness of 1 s) over `records` to their end, checkpoints
    /// due every `interval`: the feeder, the emissions' kinds of each hand-over, and each
    /// checkpoint's position.
    fn run(
        records: &[crate::pipeline::upstream::UpstreamRecord],
        interval: Duration,
    ) -> (Feeder, Vec<Vec<EmissionKind>>, Vec<u64>) {
        let resolve: crate::pipeline::control::Resolver = Box::new(|_, v| {
            Err(crate::pipeline::control::ResolveError::Unknown(
                v.to_owned(),
            ))
        });
        let control = PipelineControl::new("p", resolve, None);
        let lines = (records.iter())
            .map(|r| serde_json::to_vec(r).unwrap())
            .collect();
        let mut feeder = Feeder::new(2, 1_000, false, None);
        let (parts, handed) = sync_channel(64);
        let (acks, ack) = sync_channel(4);
        (0..4).for_each(|_| acks.send(()).unwrap());
        let fed = feeder.feed(&mut Stream(lines, 0), &parts, &ack, interval, &control);
        fed.unwrap();
        drop(parts);
        let (mut kinds, mut read) = (Vec::new(), Vec::new());
        for (_, part) in handed.iter() {
            match part {
                Part::Shard(shard) => {
                    kinds.push(shard.engine.emissions.iter().map(|e| e.kind).collect())
                }
                Part::Position(barrier) => read.push(barrier.0.source.offset),
                _ => {}
            }
        }
        (feeder, kinds, read)
    }

    #[test]
    fn a_stop_hands_over_what_it_holds_without_the_watermark_then_checkpoints_past_it() {
        let records = [
            record("p", 0, &emission(EmissionKind::Result, 1, 1), false),
            mark(0, 50),
            mark(1, 20),
            // Held: slice 1's mark has not passed it.
            record("p", 1, &emission(EmissionKind::Result, 1, 1), false),
        ];
        // No checkpoint falls due while it runs: the one at the stop is all there could be.
        let (feeder, kinds, read) = run(&records, Duration::from_secs(3600));
        assert!(feeder.holds_nothing());
        assert_eq!(
            read,
            vec![4],
            "one checkpoint, at the stop, past every record read"
        );
        let result = vec![EmissionKind::Result];
        assert_eq!(
            kinds,
            vec![result.clone(), result],
            "slice 0's at its mark, slice 1's at the stop"
        );
    }

    #[test]
    fn an_overdue_checkpoint_hands_over_what_is_held_but_waits_for_an_open_batch() {
        let records = [
            mark(0, 50),
            record("p", 0, &emission(EmissionKind::Retract, 1, 4), true),
            mark(1, 30),
            record("p", 0, &emission(EmissionKind::Update, 2, 4), false),
        ];
        // Every checkpoint overdue at once.
        let (_, kinds, read) = run(&records, Duration::ZERO);
        assert_eq!(
            kinds,
            vec![vec![], vec![EmissionKind::Retract, EmissionKind::Update]],
            "the retraction waited for its update, past a checkpoint due"
        );
        assert_eq!(read, vec![4], "none while the batch was open");
    }

    #[test]
    fn an_open_batch_is_held_past_other_slices_marks_until_it_closes() {
        let mut feeder = Feeder::new(2, 0, false, None);
        let update = emission(EmissionKind::Update, 2, 2);
        let handed = feed(
            &mut feeder,
            &[mark(0, 50), record("p", 0, &update, true), mark(1, 30)],
        );
        assert_eq!(handed.len(), 1, "slice 1's mark moved the lowest");
        assert!(handed[0].is_empty(), "but slice 0's batch is still open");
        assert!(!feeder.holds_nothing(), "so no checkpoint is due yet");
        let handed = feed(&mut feeder, &[mark(0, 60), mark(1, 60)]);
        assert_eq!(handed[0].len(), 1, "its mark closed it");
    }
}
