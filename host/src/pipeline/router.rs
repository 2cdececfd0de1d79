//! The router: reads the source, decodes, numbers events in arrival order, tracks the
//! watermark, routes events to shards by key group in batches (with each event's
//! [`Crossing`](crate::event::Crossing) beside it, for some pipelines), and injects checkpoint
//! barriers.
//!
//! Depends on `event`, `hashing`, `operator`, `rollout`, `source`, `spec`, `state`, `time`,
//! `value` and `watermark`, and of `pipeline` on `mod.rs` (its key groups, `shard_of`),
//! `control`, `join` and `messages`.

use crate::hashing::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::{Duration, Instant};

use compact_str::CompactString;

use tracing::info;

use std::sync::atomic::Ordering;

use super::control::NO_BACKLOG;
use super::join::Joiner;
use super::messages::{Part, Position, RouterPart, RoutingChange, ShardMsg};
use super::{PipelineControl, Result, shard_of};
use crate::event::{DeadLetter, Decoder, Event, Share, Staged};
use crate::operator::Projection;
use crate::rollout::Routing;
use crate::source::{Record, Source, SourcePosition};
use crate::spec::PipelineSpec;
use crate::state::key_group;
use crate::time::Millis;
use crate::watermark::{PartitionMark, PartitionedWatermark};

/// Where routing starts: from scratch, or from a checkpoint.
#[derive(Debug, Clone)]
pub(super) struct Start {
    /// The next event's arrival index.
    pub events: u64,
    /// The watermark.
    pub watermark: Millis,
    /// The watermark's partitions.
    pub partitions: Vec<PartitionMark>,
    /// Whether the input was already finished.
    pub finished: bool,
}

pub(super) struct Router<'a> {
    pub spec: &'a PipelineSpec,
    pub shards: &'a [SyncSender<ShardMsg>],
    pub parts: &'a SyncSender<(u64, Part)>,
    /// Checkpoint every this often; `None`: never (not even at the end).
    pub checkpoint_interval: Option<Duration>,
    /// Stop requests, routing requests and live figures.
    pub control: &'a PipelineControl,
    /// The routing in effect (pipelines with an aggregate).
    pub routing: Option<Routing>,
    /// A routing taken with the last position, for the barrier that follows.
    pub pending_change: Option<RoutingChange>,
    /// Route only these key groups' events (the others are numbered, observed and dropped);
    /// the router's own dead letters go only to the run holding key group 0.
    pub key_groups: Option<super::KeyGroups>,
    /// Events the shards are done with, dropped here where they were made.
    pub spent: &'a Receiver<Share>,
    /// The aggregate's projection, if the router takes each event's
    /// [`Crossing`](crate::event::Crossing) for its calls (see
    /// [`super::build::router_crossings`]).
    pub crossing_projection: Option<Projection>,
    /// A partitioned NATS stream's partition count: each event must come on its key's.
    pub partition_count: Option<usize>,
}

struct Batch {
    per_shard: Vec<Share>,
    advances: Vec<(u64, Millis)>,
    early: Vec<u64>,
    redrives: Vec<(u64, Option<Arc<str>>)>,
    dead: Vec<DeadLetter>,
    records: usize,
    /// Bytes of the lines read into the batch (raw input; generated events count none).
    bytes: usize,
}

impl Batch {
    fn new(shards: usize) -> Batch {
        Batch {
            per_shard: (0..shards).map(|_| Share::default()).collect(),
            advances: Vec::new(),
            early: Vec::new(),
            redrives: Vec::new(),
            dead: Vec::new(),
            records: 0,
            bytes: 0,
        }
    }

    /// Whether it holds anything besides events: watermark advances, requests for early
    /// results, dead letters.
    fn holds_marks(&self) -> bool {
        !self.advances.is_empty()
            || !self.early.is_empty()
            || !self.redrives.is_empty()
            || !self.dead.is_empty()
    }

    /// Whether the batch holds `batch_size` records, or [`MAX_BATCH_BYTES`] of input.
    fn is_full(&self, batch_size: usize) -> bool {
        self.records >= batch_size || self.bytes >= MAX_BATCH_BYTES
    }

    /// Whether its events may stay pending in windows after it: it is full by its count of
    /// records, and neither large ([`MAX_CARRIED_BATCH_BYTES`] of input) nor long
    /// ([`MAX_CARRIED_BATCH_RECORDS`]), so that shards hold at most
    /// [`crate::window::MAX_HELD_BATCHES`] such batches. A batch that is not full (the input
    /// slowed down or paused) has everything added at once, as do large events and batches,
    /// whose calls are few and large anyway.
    fn carries(&self, batch_size: usize) -> bool {
        self.records >= batch_size
            && self.records <= MAX_CARRIED_BATCH_RECORDS
            && self.bytes <= MAX_CARRIED_BATCH_BYTES
    }
}

/// What the router keeps while it reads records into events: the decoder, the watermark, the
/// next event's arrival index, and what an event passes through before it is staged.
struct Reading {
    decoder: Decoder,
    watermark: PartitionedWatermark,
    /// The next event's arrival index.
    seq: u64,
    /// The partition the producer named for the batch being read (HTTP ingest).
    named_partition: Option<Arc<str>>,
    /// The wall clock at which the events being read were accepted (HTTP ingest).
    ingest_clock: Option<Millis>,
    joiner: Option<Joiner>,
    buckets: Option<Buckets>,
}

impl Reading {
    fn new(spec: &PipelineSpec, start: &Start, ingest_clock: Option<Millis>) -> Reading {
        let mut watermark = PartitionedWatermark::resume(
            spec.watermark_bound,
            spec.idle_timeout,
            start.watermark,
            &start.partitions,
        );
        watermark.declare(&known_partitions(spec));
        Reading {
            decoder: match &spec.join {
                Some(_) => Decoder::unkeyed(&spec.timestamp_field),
                None => Decoder::new(&spec.key_field, &spec.timestamp_field),
            },
            watermark,
            seq: start.events,
            named_partition: None,
            ingest_clock,
            joiner: spec.join.clone().map(Joiner::new),
            buckets: (spec.global || spec.pre_aggregate).then(|| Buckets::new(spec.global)),
        }
    }

    /// What a checkpoint taken now covers: events, the watermark and how far the source was
    /// read (input that made no event, a bad line, still moves it: its dead letter must be
    /// committed, and so written, without waiting for more input).
    fn covered(&self, source: &dyn Source) -> Covered {
        (self.seq, self.watermark.current(), source.position())
    }

    /// Takes what a record that is not an event says: an idle advance, a clock or an idle
    /// partition moves the watermark after the last event routed (index `seq - 1`); a
    /// request for early results, or a partition's name, is noted.
    #[inline(always)]
    fn mark(&mut self, record: &Record, batch: &mut Batch) {
        let moved = match record {
            Record::Advance(ms) => self.watermark.advance_by(*ms),
            Record::Clock(ms, partition) => {
                self.named_partition = partition.clone();
                self.watermark.clock(*ms)
            }
            Record::Early if self.seq > 0 => {
                batch.early.push(self.seq - 1);
                None
            }
            Record::Redrive(key) => {
                batch
                    .redrives
                    .push((self.seq.saturating_sub(1), key.clone()));
                None
            }
            Record::Partition(name) => {
                self.named_partition = Some(name.clone());
                None
            }
            Record::PartitionEnd(name) => self.watermark.finish_partition(name),
            Record::Declare(names) => {
                self.watermark.declare(names);
                None
            }
            _ => None,
        };
        if let Some(w) = moved {
            batch.advances.push((self.seq.saturating_sub(1), w));
        }
    }

    /// For a run sharing its pipeline with runs elsewhere: takes the latest ingest clock of
    /// any of them (its own partition, quiet, goes idle by it), publishes its own partitions'
    /// watermark and clock, and takes the others' watermark as a floor, which may move its own.
    fn share(&mut self, shared: &crate::pipeline::control::SharedWatermark, batch: &mut Batch) {
        let mut moved = None;
        if let Some(clock) = shared.shared_clock()
            && self.watermark.clock_now().is_none_or(|own| clock > own)
        {
            moved = self.watermark.clock(clock);
        }
        shared.set_local(self.watermark.local(), self.watermark.clock_now());
        moved = self.watermark.set_floor(shared.floor()).or(moved);
        if let Some(w) = moved {
            batch.advances.push((self.seq.saturating_sub(1), w));
        }
    }
}

/// What a checkpoint covers: events, the watermark, and the source's position.
type Covered = (u64, Millis, SourcePosition);

/// When the router sends a batch and takes a checkpoint.
struct Pacing {
    /// The next batch's (or barrier's) id.
    batch_id: u64,
    last_checkpoint: Instant,
    /// When the batch being filled was opened.
    batch_opened: Instant,
    /// Whether the last batch sent let windows carry its events.
    carrying: bool,
    /// What the last checkpoint covered.
    checkpointed: Covered,
}

impl Pacing {
    fn new(events: u64, watermark: Millis, position: SourcePosition) -> Pacing {
        Pacing {
            batch_id: 0,
            last_checkpoint: Instant::now(),
            batch_opened: Instant::now(),
            carrying: false,
            checkpointed: (events, watermark, position),
        }
    }
}

impl Router<'_> {
    /// Reads the source to its end. Returns the number of events routed by this run, or
    /// early (without error) if a shard or the collector stopped: `run` reports their error.
    pub fn route(&mut self, source: &mut dyn Source, start: Start) -> Result<u64> {
        let spec = self.spec;
        let (mut reading, mut batch, mut pacing, share_size) = self.begin(&*source, &start);
        let sharing = self.control.shared_watermark.enabled();
        self.publish(reading.seq, start.watermark, &*source);
        if start.finished {
            info!("input already finished at the last checkpoint");
            return Ok(0);
        }
        loop {
            // Checked before reading: a record read and then left behind would be counted in
            // the position the final checkpoint records, and so lost.
            if self.control.stopping() {
                self.close(
                    &mut batch,
                    &pacing,
                    &mut reading,
                    &*source,
                    (start.events, false),
                );
                return Ok(reading.seq - start.events);
            }
            let Some(record) = source.next_record()? else {
                break;
            };
            let tick = self.note(&record, &mut reading, &mut batch, &*source, sharing);
            // The record's event, if any, taken through each step in place: decoded, placed
            // by the join, observed by the watermark, its key bucketed, staged. A chain of
            // `Option<Event>`s copied the event at each step (a fifth of the routing loop's
            // time went to reading back copies just written); so did these steps as methods
            // returning or passing it on (3.5-4.5 ns more per event in the router).
            'event: {
                let Some(mut event) = event_of(
                    record,
                    &mut reading.decoder,
                    &mut reading.ingest_clock,
                    spec.max_ahead,
                    &mut batch.dead,
                ) else {
                    break 'event;
                };
                if let Some(joiner) = &reading.joiner {
                    match joiner.place(event) {
                        Ok(placed) => event = placed,
                        Err(dead) => {
                            batch.dead.push(dead);
                            break 'event;
                        }
                    }
                }
                if let Some(count) = self.partition_count
                    && let Some(dead) = outside_partition(&event, count, &reading.named_partition)
                {
                    batch.dead.push(dead);
                    break 'event;
                }
                if !self.observe(&mut reading, &mut batch, &event) {
                    break 'event;
                }
                if let Some(buckets) = &mut reading.buckets {
                    event.key = buckets.of(&event.key, reading.seq);
                }
                self.stage(&mut batch, event, reading.seq, share_size);
                reading.seq += 1;
            }
            batch.records += usize::from(!tick);
            if !self.pace(&mut batch, &mut pacing, tick, &reading, &*source) {
                return Ok(reading.seq - start.events);
            }
        }
        self.close(
            &mut batch,
            &pacing,
            &mut reading,
            &*source,
            (start.events, true),
        );
        Ok(reading.seq - start.events)
    }

    /// Notes a record before its event is taken: its bytes, what it says of the watermark,
    /// and on a tick the lags; shares the watermark now and then. Whether it is a tick.
    #[inline(always)]
    fn note(
        &self,
        record: &Record,
        reading: &mut Reading,
        batch: &mut Batch,
        source: &dyn Source,
        sharing: bool,
    ) -> bool {
        let tick = matches!(record, Record::Tick);
        match record {
            Record::Line(_, line) => batch.bytes += line.len(),
            Record::Decoded(_, bytes) => batch.bytes += bytes,
            _ => {}
        }
        if tick {
            // Keeps the lags current while the input pauses.
            self.publish(reading.seq, reading.watermark.current(), source);
        }
        reading.mark(record, batch);
        if sharing && (tick || batch.records.is_multiple_of(64)) {
            reading.share(&self.control.shared_watermark, batch);
        }
        tick
    }

    /// What a run starts from: reading from `start` (held by the other runs' watermarks from
    /// the first record on, if it shares one: a first clock would otherwise move the
    /// watermark to this run's own partition's alone), an empty batch, the pacing, and the
    /// size of a shard's share of a batch.
    fn begin(&self, source: &dyn Source, start: &Start) -> (Reading, Batch, Pacing, usize) {
        let mut reading = Reading::new(self.spec, start, source.position().clock);
        if self.control.shared_watermark.enabled() {
            let floor = self.control.shared_watermark.floor();
            reading.watermark.set_floor(floor);
        }
        let batch = Batch::new(self.shards.len());
        let pacing = Pacing::new(start.events, start.watermark, source.position());
        // A share's lists are sized once: grown by doubling, a large batch was copied a dozen
        // times, into freshly zeroed pages (10 % of the router's time).
        let share_size =
            (self.spec.batch_size.div_ceil(self.shards.len())).min(MAX_CARRIED_BATCH_RECORDS);
        (reading, batch, pacing, share_size)
    }

    /// Observes `event`'s time on its partition's watermark, the advance it makes going into
    /// the batch; false (and a dead letter) if the watermark refuses it.
    #[inline(always)]
    fn observe(&self, reading: &mut Reading, batch: &mut Batch, event: &Event) -> bool {
        let field = self.spec.partition_field.as_deref();
        let partition = partition_of(event, field, &reading.named_partition);
        let observed = reading.watermark.observe(&partition, event.timestamp);
        drop(partition);
        match observed {
            Ok(moved) => {
                batch.advances.extend(moved.map(|w| (reading.seq, w)));
                true
            }
            Err(refused) => {
                batch.dead.push(DeadLetter {
                    line: event.line,
                    raw: event.to_json().to_string(),
                    reason: refused.to_string(),
                    cause: crate::event::DeadCause::Input,
                });
                false
            }
        }
    }

    /// Puts `event` (arrival `seq`) in its shard's share of the batch, with its crossing, if a
    /// shard of this run takes its key. The only place events are added to a share.
    #[inline(always)]
    fn stage(&self, batch: &mut Batch, event: Event, seq: u64, share_size: usize) {
        let Some(shard) = self.shard_for(&event.key) else {
            return;
        };
        let share = &mut batch.per_shard[shard];
        if share.events.capacity() == 0 {
            share.events.reserve(share_size);
            if self.crossing_projection.is_some() {
                share.crossings.reserve(share_size);
            }
        }
        // One crossing per event, beside it.
        if let Some(projection) = &self.crossing_projection {
            share.crossings.push(projection.sole_crossing(&event));
        }
        share.events.push(Staged {
            seq,
            event,
            origin: None,
            made_by: None,
        });
    }

    /// After each record: sends the batch when it is full, a checkpoint is due, the input
    /// pauses or the batch has waited long enough, and takes the checkpoint that is due.
    /// False if a shard or the collector stopped.
    #[inline(always)]
    fn pace(
        &mut self,
        batch: &mut Batch,
        pacing: &mut Pacing,
        tick: bool,
        reading: &Reading,
        source: &dyn Source,
    ) -> bool {
        let batch_size = self.spec.batch_size;
        // The clock is read every 64 records and at each batch's end (a batch smaller than 64
        // once never checkpointed).
        let clock = tick || batch.records.is_multiple_of(64) || batch.is_full(batch_size);
        let due = clock && self.checkpoint_due(batch, pacing, reading, source);
        // While the input pauses, send what we hold: results should not wait for a full
        // batch, nor events the last batch let windows carry (an empty batch that does not
        // carry adds them, so their dead letters do not wait for the input to resume; a
        // source that blocks instead of ticking, as stdin, leaves them to the next batch, the
        // next checkpoint or the end).
        let idle = tick && (batch.records > 0 || pacing.carrying || batch.holds_marks());
        // Nor behind a batch that fills slowly under a steady trickle.
        let lingered =
            clock && batch.records > 0 && pacing.batch_opened.elapsed() >= MAX_BATCH_DELAY;
        if batch.is_full(batch_size) || due || idle || lingered {
            // Windows carry a full batch's events into the next batches (fewer, larger
            // operator calls) while the input keeps them full, never before a barrier.
            let carry = !due && batch.carries(batch_size);
            if !self.send(batch, pacing.batch_id, false, carry) {
                return false;
            }
            pacing.carrying = carry;
            pacing.batch_id += 1;
            pacing.batch_opened = Instant::now();
            self.publish(reading.seq, reading.watermark.current(), source);
        }
        if due {
            let position = self.position(source, reading.seq, &reading.watermark, false);
            if !self.barrier(pacing.batch_id, position) {
                return false;
            }
            pacing.batch_id += 1;
            pacing.last_checkpoint = Instant::now();
            pacing.checkpointed = reading.covered(source);
        }
        true
    }

    /// Whether a checkpoint is due: its interval has passed since the last, and something
    /// changed since (an idle pipeline takes no checkpoints: nothing would change) or a
    /// routing request or savepoint waits for one.
    #[inline(always)]
    fn checkpoint_due(
        &self,
        batch: &Batch,
        pacing: &Pacing,
        reading: &Reading,
        source: &dyn Source,
    ) -> bool {
        self.checkpoint_interval.is_some_and(|interval| {
            pacing.last_checkpoint.elapsed() >= interval
                && (reading.covered(source) != pacing.checkpointed
                    || batch.records > 0
                    || self.control.has_request()
                    || self.control.wants_savepoint())
        })
    }

    /// At the end of the input (`finished`: every window closes) or on a stop request (none
    /// does): sends what the batch holds, and a final checkpoint lets a restart continue
    /// exactly here; then logs how many events the run routed from `first_event` on.
    fn close(
        &mut self,
        batch: &mut Batch,
        pacing: &Pacing,
        reading: &mut Reading,
        source: &dyn Source,
        (first_event, finished): (u64, bool),
    ) {
        if finished {
            reading.watermark.finish();
        }
        if self.send(batch, pacing.batch_id, finished, false) && self.checkpoint_interval.is_some()
        {
            let position = self.position(source, reading.seq, &reading.watermark, finished);
            self.barrier(pacing.batch_id + 1, position);
        }
        let events = reading.seq - first_event;
        match finished {
            true => info!(events, "input finished"),
            false => info!(events, "stopped"),
        }
    }

    /// The shard that takes events of `key`, if this run routes them (see `key_groups`). One
    /// shard owning every key group needs no key's group.
    fn shard_for(&self, key: &str) -> Option<usize> {
        let n = self.shards.len();
        if n == 1 && self.key_groups.is_none() {
            return Some(0);
        }
        let group = key_group(key);
        (self.key_groups.is_none_or(|owned| owned.contains(group))).then(|| shard_of(group, n))
    }

    /// Publishes how far the router has read (events, the watermark, the source's byte
    /// offset, which ingest's backpressure compares with the log's length, and the messages
    /// it knows are still to read) and a sign of life: per batch and idle tick, not per event.
    fn publish(&self, events: u64, watermark: Millis, source: &dyn Source) {
        self.control.beat();
        let stats = &self.control.stats;
        let offset = source.position().offset;
        let backlog = source.backlog();
        stats.events_in.store(events, Ordering::Relaxed);
        stats.input_offset.store(offset, Ordering::Relaxed);
        (stats.input_backlog).store(backlog.unwrap_or(NO_BACKLOG), Ordering::Relaxed);
        let input_lag =
            (self.control.ingest_gate.as_ref()).map(|gate| gate.committed().saturating_sub(offset));
        self.control
            .metrics
            .read(events, watermark, input_lag, backlog);
        stats.watermark.store(watermark, Ordering::Relaxed);
    }

    /// The router's part of a checkpoint, taking any pending routing request with it: the
    /// request applies from this checkpoint on, so the manifest records it.
    fn position(
        &mut self,
        source: &dyn Source,
        events: u64,
        watermark: &PartitionedWatermark,
        finished: bool,
    ) -> Position {
        if let Some(change) = requested_change(self.control, &mut self.routing) {
            self.pending_change = Some(change);
        }
        Position {
            source: source.position(),
            events,
            watermark: watermark.current(),
            partitions: watermark.marks(),
            finished,
            started: Instant::now(),
            routing: self.routing.clone(),
        }
    }

    fn send(&self, batch: &mut Batch, id: u64, end_of_input: bool, carry: bool) -> bool {
        let advances = Arc::new(std::mem::take(&mut batch.advances));
        let early = Arc::new(std::mem::take(&mut batch.early));
        let redrives = Arc::new(std::mem::take(&mut batch.redrives));
        // A send waits only while the shard's queue is full: that wait is backpressure.
        let started = Instant::now();
        for (shard, tx) in self.shards.iter().enumerate() {
            let share = std::mem::take(&mut batch.per_shard[shard]);
            if tx
                .send(ShardMsg::Batch {
                    id,
                    share,
                    advances: advances.clone(),
                    early: early.clone(),
                    redrives: redrives.clone(),
                    end_of_input,
                    carry,
                })
                .is_err()
            {
                return false;
            }
        }
        self.control.metrics.backpressured(started.elapsed());
        self.recycle(batch);
        batch.records = 0;
        batch.bytes = 0;
        self.control.batch_sent();
        let mut dead = std::mem::take(&mut batch.dead);
        if self.key_groups.is_some_and(|owned| !owned.contains(0)) {
            dead.clear(); // every run of a shared pipeline reads them; one writes them
        }
        let part = RouterPart {
            dead,
            advances,
            end_of_input,
        };
        self.parts.send((id, Part::Router(part))).is_ok()
    }

    /// Drops the events shards are done with; their emptied lists hold the next batch's.
    fn recycle(&self, batch: &mut Batch) {
        while let Ok(mut spent) = self.spent.try_recv() {
            drop_spent(&mut spent.events);
            spent.crossings.clear();
            let mut slots = batch.per_shard.iter_mut();
            if let Some(empty) = slots.find(|share| share.events.capacity() == 0) {
                // Emptied by `send`, as every slot is before this runs.
                debug_assert!(empty.crossings.is_empty());
                *empty = spent;
            }
        }
    }

    fn barrier(&mut self, id: u64, position: Position) -> bool {
        let change = self.pending_change.take();
        for tx in self.shards {
            if tx
                .send(ShardMsg::Barrier {
                    id,
                    change: change.clone(),
                })
                .is_err()
            {
                return false;
            }
        }
        self.control.batch_sent();
        // A savepoint covers every event read before it was asked for: those asked for by now
        // go with this barrier; later ones wait for the next.
        let savepoints = self.control.take_savepoints();
        match self
            .parts
            .send((id, Part::Position(Box::new((position, change, savepoints)))))
        {
            Ok(()) => true,
            Err(std::sync::mpsc::SendError((_, part))) => {
                // The collector is gone: the run's end answers the savepoints.
                if let Part::Position(position) = part {
                    self.control.give_back_savepoints(position.2);
                }
                false
            }
        }
    }
}

/// The watermark partitions a spec names before any event: the files it lists, the NATS
/// subjects it lists without wildcards (a subject a wildcard matches is known from its first
/// message on), and a partitioned stream's partitions it reads (all, or a slice's one). An
/// event field naming partitions names none ahead.
fn known_partitions(spec: &PipelineSpec) -> Vec<String> {
    if spec.partition_field.is_some() {
        return Vec::new();
    }
    match &spec.source {
        crate::spec::SourceSpec::Files(files) => {
            files.iter().map(|(_, name)| name.clone()).collect()
        }
        crate::spec::SourceSpec::Nats(nats) => match (&nats.partitions, nats.partition) {
            (Some(_), Some(p)) => vec![p.to_string()],
            (Some(partitions), None) => (0..partitions.count).map(|p| p.to_string()).collect(),
            (None, _) => (nats.subjects.iter())
                .filter(|subject| !subject.contains(['*', '>']))
                .cloned()
                .collect(),
        },
        _ => Vec::new(),
    }
}

/// The dead letter of an event of a partitioned stream that came on another partition than its
/// key's (a producer publishing outside the partition scheme, or a message whose subject names
/// no partition): read here, its key's state would be split between two owners.
fn outside_partition(
    event: &Event,
    count: usize,
    named: &Option<std::sync::Arc<str>>,
) -> Option<DeadLetter> {
    let expected = crate::source::partition_of_key(&event.key, count);
    if named
        .as_deref()
        .is_some_and(|named| named == expected.to_string())
    {
        return None;
    }
    Some(DeadLetter {
        line: event.line,
        raw: event.to_json().to_string(),
        reason: format!(
            "key {:?} belongs to partition {expected} of {count}, but came on {}: publish each \
             event to its key's partition (the subject mapping's {{{{partition({count}, ...)}}}} \
             of the key's token)",
            &*event.key,
            named.as_deref().unwrap_or("no partition")
        ),
        cause: crate::event::DeadCause::Input,
    })
}

/// The event a record carries, if any: a line is decoded (a bad one, or one too far ahead of
/// its ingest clock, becomes a dead letter); a clock line sets the ingest clock.
fn event_of(
    record: Record,
    decoder: &mut Decoder,
    ingest_clock: &mut Option<Millis>,
    max_ahead: Millis,
    dead: &mut Vec<DeadLetter>,
) -> Option<Event> {
    match record {
        Record::Tick
        | Record::Advance(_)
        | Record::Early
        | Record::Redrive(_)
        | Record::Partition(_)
        | Record::PartitionEnd(_)
        | Record::Declare(_) => None,
        Record::Clock(ms, _) => {
            *ingest_clock = Some(ms);
            None
        }
        Record::Event(event) => Some(event),
        Record::Decoded(event, _) => too_far_ahead(event, *ingest_clock, max_ahead)
            .map_err(|dead_letter| dead.push(dead_letter))
            .ok(),
        Record::Line(line, bytes) => match decoder.decode(line, &bytes) {
            Ok(event) => too_far_ahead(event, *ingest_clock, max_ahead)
                .map_err(|dead_letter| dead.push(dead_letter))
                .ok(),
            Err(dead_letter) => {
                dead.push(dead_letter);
                None
            }
        },
    }
}

/// How many events ahead [`drop_spent`] fetches the one it will drop.
const DROP_AHEAD: usize = 8;

/// Empties `spent` (keeping its memory for the next batch), dropping its events in turn while
/// fetching the one [`DROP_AHEAD`] places on
/// ([`Event::prefetch_for_drop`](crate::event::Event::prefetch_for_drop)). A shard read the
/// events last, so each drop waited on memory: on the key's reference count (keys were on the
/// heap then) and the fields' first line. In a host built as one codegen unit (the workspace's
/// release profile) the fetch took the router's CPU per event from 118.1 to 111.8 ns (Wasm
/// runs) and from 112.9 to 105.0 ns (native); built as 16 units, the same fetch changed
/// nothing. Not measured again since keys are kept inside the event.
fn drop_spent(spent: &mut Vec<Staged>) {
    let mut events = spent.drain(..);
    while !events.as_slice().is_empty() {
        if let Some(ahead) = events.as_slice().get(DROP_AHEAD) {
            ahead.event.prefetch_for_drop();
        }
        drop(events.next());
    }
}

/// Passes an event unless it is more than `max_ahead` past the wall clock at which it was
/// accepted: one such event would otherwise move the watermark years ahead and make every later
/// event late, for good.
fn too_far_ahead(
    event: Event,
    clock: Option<Millis>,
    max_ahead: Millis,
) -> std::result::Result<Event, DeadLetter> {
    match clock {
        Some(clock) if event.timestamp > clock.saturating_add(max_ahead) => Err(DeadLetter {
            line: event.line,
            raw: event.to_json().to_string(),
            reason: format!(
                "timestamp {} is more than {max_ahead} ms ahead of the wall clock when it was \
                 accepted ({clock}); set [watermark] max_ahead to allow more",
                event.timestamp
            ),
            cause: crate::event::DeadCause::Ahead,
        }),
        _ => Ok(event),
    }
}

/// The longest a batch waits to fill before it is sent anyway, so a large batch size costs no
/// latency under a slow, steady input (as Flink's buffer timeout).
const MAX_BATCH_DELAY: Duration = Duration::from_millis(100);

/// The most input bytes one batch holds before it is sent, whatever `batch_size` says: a batch
/// of 16,384 lines of 1 MiB each (the longest line) would otherwise be 16 GiB in memory before
/// any operator saw it. Batch boundaries never change results.
const MAX_BATCH_BYTES: usize = 64 << 20;

/// The largest batch, in input bytes and in records, whose events windows may carry into the
/// next batches (generated events count no bytes, but are small).
const MAX_CARRIED_BATCH_BYTES: usize = 8 << 20;
const MAX_CARRIED_BATCH_RECORDS: usize = 65_536;

/// The keys of an aggregate's partials. A global aggregate replaces each event's key by one of
/// [`BUCKETS`] bucket keys (`*/0` ... ), chosen by the key's group, so that the partials spread
/// over the shards as keys do, and a bucket, like any key, belongs to one shard at a time. A
/// pre-aggregated one spreads each key over its own buckets (`<key>/0` ...) by arrival index,
/// so one hot key's events are folded on every shard; the combine strips the bucket again.
struct Buckets {
    global: Vec<CompactString>,
    /// Pre-aggregation: each key's bucket keys (a cache, cleared when it grows large: a
    /// few-valued key is what pre-aggregation is for, but the input decides).
    per_key: HashMap<CompactString, Vec<CompactString>>,
}

/// How many partials a global aggregate keeps per window at most, and so how many shards it
/// can use. Fewer buckets put more events into each operator call: on Nexmark Q7 (one shard),
/// 256 buckets gave 1.13 M events/s and 32 gave 1.26 M.
const BUCKETS: u16 = 32;

/// The most keys whose bucket keys [`Buckets`] keeps.
const BUCKET_CACHE: usize = 4_096;

/// The longest key whose bucket keys [`Buckets`] keeps: their text, with the longest suffix
/// (`/31`, a slash and two digits), fits inside a `CompactString`.
const MAX_CACHED_KEY: usize = std::mem::size_of::<CompactString>() - 3;
const _: () = assert!(
    BUCKETS <= 100,
    "a bucket's suffix is at most a slash and two digits"
);

impl Buckets {
    fn new(global: bool) -> Buckets {
        let global = match global {
            true => (0..BUCKETS)
                .map(|b| compact_str::format_compact!("{}/{b}", crate::spec::GLOBAL_KEY))
                .collect(),
            false => Vec::new(),
        };
        Buckets {
            global,
            per_key: HashMap::default(),
        }
    }

    /// The bucket key of the event `seq` of `key`.
    fn of(&mut self, key: &CompactString, seq: u64) -> CompactString {
        if !self.global.is_empty() {
            return self.global[usize::from(key_group(key) % BUCKETS)].clone();
        }
        let bucket = (seq % u64::from(BUCKETS)) as usize;
        if key.len() > MAX_CACHED_KEY {
            // Not all its bucket keys would fit inline: a cached one of those would be copied
            // to the heap for every event anyway, and the cache would hold 33 long copies of
            // each key.
            return compact_str::format_compact!("{key}/{bucket}");
        }
        if let Some(keys) = self.per_key.get(key) {
            return keys[bucket].clone();
        }
        if self.per_key.len() >= BUCKET_CACHE {
            self.per_key.clear();
        }
        let keys: Vec<CompactString> = (0..BUCKETS)
            .map(|b| compact_str::format_compact!("{key}/{b}"))
            .collect();
        let chosen = keys[bucket].clone();
        self.per_key.insert(key.clone(), keys);
        chosen
    }
}

/// The key a pre-aggregated partial's bucket key (`<key>/<bucket>`) stands for.
pub(super) fn unbucket(bucket_key: &str) -> &str {
    bucket_key
        .rsplit_once('/')
        .map_or(bucket_key, |(key, _)| key)
}

/// The watermark partition of `event`: its `partition_field`'s value (text or integer), else
/// the partition the producer named for its batch, else the pipeline's only one (`""`).
fn partition_of<'a>(
    event: &'a Event,
    partition_field: Option<&str>,
    named: &'a Option<Arc<str>>,
) -> std::borrow::Cow<'a, str> {
    use std::borrow::Cow;
    if let Some(field) = partition_field {
        return match event.fields.iter().find(|(name, _)| &**name == field) {
            Some((_, crate::value::Value::Text(text))) => Cow::Borrowed(text.as_str()),
            Some((_, crate::value::Value::Int(i))) => Cow::Owned(i.to_string()),
            _ => Cow::Borrowed(""),
        };
    }
    Cow::Borrowed(named.as_deref().unwrap_or(""))
}

/// Takes the routing asked for since the last checkpoint, if it differs from `routing`: the
/// change to apply from this checkpoint on (with the candidate's code, loaded here), and
/// `routing` made the new one. A candidate that cannot be loaded leaves the routing as it was.
pub(super) fn requested_change(
    control: &PipelineControl,
    routing: &mut Option<Routing>,
) -> Option<RoutingChange> {
    let requested = control.take_request();
    // A pipeline without an aggregate has no routing until its first enricher rollout: the
    // request's live version is what runs.
    let current = match (&*routing, &requested) {
        (Some(current), _) => Some(current.clone()),
        (None, Some(requested)) => Some(Routing {
            candidate: None,
            percent: 0,
            shadow: false,
            ..requested.clone()
        }),
        (None, None) => None,
    };
    if let (Some(current), Some(requested)) = (current, requested)
        && current != requested
    {
        // The code the shards need: a new candidate's, or a promoted version's that they
        // do not hold as the candidate.
        let needed = match &requested.candidate {
            Some(version) if current.candidate.as_ref() != Some(version) => Some(version),
            None if requested.live != current.live
                && current.candidate.as_ref() != Some(&requested.live) =>
            {
                Some(&requested.live)
            }
            _ => None,
        };
        let candidate = match needed {
            Some(version) => (control.resolve)(requested.operator.as_deref(), version).map(Some),
            None => Ok(None),
        };
        match candidate {
            Ok(candidate) => {
                *routing = Some(requested.clone());
                return Some(RoutingChange {
                    routing: requested,
                    candidate,
                });
            }
            Err(message) => {
                tracing::warn!(error = %message, "routing request ignored: cannot load the candidate")
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
