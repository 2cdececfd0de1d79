//! [`KafkaSource`]: events from a Kafka topic (`[source] type = "kafka"`). Weir assigns itself
//! every partition of the topic (no consumer-group rebalancing decides who reads what) and keeps
//! each partition's next offset in its checkpoint, so input is read exactly once into state; a
//! restart resumes each partition where the checkpoint left it. Only committed records are read
//! (`read_committed`). Each partition is a watermark partition (`<topic>/<partition>`), its
//! records' timestamps its ingest clock (for `idle_timeout` and `max_ahead`, as a NATS server's
//! publication time is); each record's value is one JSON event, with the record's key,
//! timestamp or headers put in where the spec asks (`kafka_fields`). Partitions added to the
//! topic are found within seconds and read from their start. A shared pipeline's slice reads
//! one partition alone (`partition`), and partitions added later are not its (said once, as an
//! error). A broker that goes away is waited for (the client reconnects); tombstones
//! (records without a value) are skipped.
//!
//! Depends on `spec`; the client is `rdkafka` (librdkafka).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::kafka_fields::{RecordFields, RecordParts};
use super::{Record, Source, SourceError, SourcePosition};
use crate::spec::KafkaSourceSpec;

/// How long a read waits for a record before yielding a tick.
const TICK: Duration = Duration::from_millis(100);
/// How often the topic's partitions (new ones) and end offsets (the backlog) are asked for.
const REFRESH: Duration = Duration::from_secs(2);
/// How long the first look at the topic may take.
const FIRST_METADATA: Duration = Duration::from_secs(30);

/// Reads every partition of one topic.
pub struct KafkaSource {
    consumer: BaseConsumer,
    spec: KafkaSourceSpec,
    /// Each partition's next offset (what the checkpoint keeps) and its lines handed out.
    next: BTreeMap<i32, (i64, u64)>,
    /// Lines handed out in all.
    line: u64,
    /// The partition the last record came from, as the router names it.
    partition: Option<(i32, Arc<str>)>,
    /// The latest record timestamp told to the router.
    clock: Option<i64>,
    /// A record read but not yet handed out (its clock went first): partition, offset, line.
    held: Option<(i32, i64, Vec<u8>)>,
    /// Which of a record's parts besides its value go into its event.
    fields: RecordFields,
    refreshed: Instant,
    backlog: Option<u64>,
    /// When the last error was logged (one a second at most).
    complained: Option<Instant>,
    /// Whether the partitions were assigned: at the first read, after any resume (assigning
    /// twice let records fetched for the first assignment come after the second's).
    assigned: bool,
    /// Whether the partitions are the pipeline's watermark partitions (not with a
    /// `partition_field`), to be declared to the router before any record.
    declaring: bool,
    /// Partitions to declare before the next record.
    undeclared: Vec<String>,
    /// The pipeline's name (a metric's label).
    pipeline: String,
    /// When each partition's oldest kept offset was last asked for, after a gap in its offsets,
    /// with the earliest gap's start not yet checked.
    gap_checked: BTreeMap<i32, (Instant, Option<i64>)>,
    /// A gap seen in the last record read (partition, expected offset, offset), checked before
    /// the next read (the record borrows the consumer while it is read).
    gap: Option<(i32, i64, i64)>,
    /// A slice's topic gained partitions it does not read: said once.
    said_added: bool,
}

impl std::fmt::Debug for KafkaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource")
            .field("topic", &self.spec.topic)
            .field("next", &self.next)
            .finish()
    }
}

/// The partitions of `topic` that `consumer`'s brokers know, within `timeout` (none: no such
/// topic). `weir cluster deploy` counts a shared pipeline's slices with it.
pub fn topic_partitions(
    consumer: &BaseConsumer,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<i32>, rdkafka::error::KafkaError> {
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    Ok((metadata.topics().iter())
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect())
}

/// Each partition of `topic` at `brokers` with its next offset now (where a replay of a topic
/// that workers read stops).
pub fn topic_ends(
    brokers: &str,
    topic: &str,
    timeout: Duration,
) -> Result<std::collections::BTreeMap<i32, i64>, rdkafka::error::KafkaError> {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    topic_partitions(&consumer, topic, timeout)?
        .into_iter()
        .map(|p| Ok((p, consumer.fetch_watermarks(topic, p, timeout)?.1)))
        .collect()
}

fn fail(spec: &KafkaSourceSpec, error: impl std::fmt::Display) -> SourceError {
    SourceError::new(
        &format!("kafka topic {} at {}", spec.topic, spec.brokers),
        std::io::Error::other(error.to_string()),
    )
}

impl KafkaSource {
    /// Connects to the topic of `spec` for pipeline `pipeline`, whose events take their key from
    /// `key_field` and their time from `timestamp_field`. Every partition is read from its
    /// start until [`Source::resume`] says otherwise.
    pub fn new(
        spec: KafkaSourceSpec,
        pipeline: &str,
        key_field: &str,
        timestamp_field: &str,
    ) -> Result<KafkaSource, SourceError> {
        let group = spec
            .group
            .clone()
            .unwrap_or_else(|| format!("weir-{pipeline}"));
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &spec.brokers)
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "false")
            .set("auto.offset.reset", "earliest")
            // librdkafka waits a second (by default) before fetching again for a partition whose
            // queue was full; the pipeline empties it much faster than that.
            .set("fetch.queue.backoff.ms", "1")
            .create()
            .map_err(|e| fail(&spec, e))?;
        let mut source = KafkaSource {
            consumer,
            next: BTreeMap::new(),
            line: 0,
            partition: None,
            clock: None,
            held: None,
            fields: RecordFields::new(key_field, timestamp_field, spec.headers),
            refreshed: Instant::now(),
            backlog: None,
            complained: None,
            assigned: false,
            declaring: false,
            undeclared: Vec::new(),
            pipeline: pipeline.to_owned(),
            gap_checked: BTreeMap::new(),
            gap: None,
            said_added: false,
            spec,
        };
        let mut partitions = source.partitions(FIRST_METADATA)?;
        if partitions.is_empty() {
            return Err(fail(
                &source.spec,
                "the topic does not exist (create it, with its partitions, before the pipeline reads it)",
            ));
        }
        if let Some(own) = source.spec.partition {
            // A shared pipeline's slice: its partition alone.
            if !partitions.contains(&own) {
                return Err(fail(
                    &source.spec,
                    format!(
                        "the topic has no partition {own} (it has {}): a shared pipeline has a \
                         slice per partition, fixed when it is deployed",
                        partitions.len()
                    ),
                ));
            }
            partitions = vec![own];
        }
        for p in partitions {
            source.next.insert(p, (0, 0));
        }
        Ok(source)
    }

    /// Declares every partition to the router as a watermark partition before any record: each
    /// holds the watermark back from the start, so which partition the brokers happen to send
    /// first cannot make another's events late. Not with a `partition_field`, whose values are
    /// the watermark partitions.
    pub fn declaring(mut self, declaring: bool) -> Self {
        self.declaring = declaring;
        if declaring {
            self.undeclared = self.next.keys().map(|&p| self.partition_name(p)).collect();
        }
        self
    }

    /// Partition `p`'s watermark partition name.
    fn partition_name(&self, p: i32) -> String {
        format!("{}/{p}", self.spec.topic)
    }

    /// The topic's partitions, as the brokers say.
    fn partitions(&self, timeout: Duration) -> Result<Vec<i32>, SourceError> {
        topic_partitions(&self.consumer, &self.spec.topic, timeout)
            .map_err(|e| fail(&self.spec, format!("cannot read the topic's metadata: {e}")))
    }

    /// Reads every known partition from its next offset.
    fn assign(&mut self) -> Result<(), SourceError> {
        let mut assignment = TopicPartitionList::new();
        for (&p, &(offset, _)) in &self.next {
            let at = match offset {
                0 => Offset::Beginning,
                n => Offset::Offset(n),
            };
            (assignment.add_partition_offset(&self.spec.topic, p, at))
                .map_err(|e| fail(&self.spec, e))?;
        }
        self.consumer
            .assign(&assignment)
            .map_err(|e| fail(&self.spec, e))
    }

    /// Now and then: takes new partitions (from their start) and measures the backlog.
    fn refresh(&mut self) {
        if self.refreshed.elapsed() < REFRESH {
            return;
        }
        self.refreshed = Instant::now();
        let Ok(partitions) = self.partitions(Duration::from_secs(1)) else {
            return; // the brokers are away: next time
        };
        let mut new: Vec<i32> = partitions
            .into_iter()
            .filter(|p| !self.next.contains_key(p))
            .collect();
        if self.spec.partition.is_some() && !new.is_empty() {
            // A slice reads its own partition alone: a partition added to the topic after the
            // pipeline was shared is nobody's, and keys the producers move there are lost to it.
            if !std::mem::replace(&mut self.said_added, true) {
                tracing::error!(topic = %self.spec.topic, partitions = ?new, "partitions added to a shared pipeline's topic are not read: deploy it under a new name with as many slices");
            }
            new.clear();
        }
        if !new.is_empty() && self.assigned {
            tracing::info!(topic = %self.spec.topic, partitions = ?new, "new partitions: read from their start");
            let mut added = TopicPartitionList::new();
            for &p in &new {
                let _ = added.add_partition_offset(&self.spec.topic, p, Offset::Beginning);
            }
            // Only the new ones: the others' fetches go on untouched.
            match self.consumer.incremental_assign(&added) {
                Ok(()) => new.into_iter().for_each(|p| {
                    self.next.insert(p, (0, 0));
                    if self.declaring {
                        self.undeclared.push(self.partition_name(p));
                    }
                }),
                Err(error) => tracing::warn!(%error, "cannot read the new partitions yet"),
            }
        }
        // Gaps seen within a second of a check, not yet checked: now.
        let pending: Vec<(i32, i64)> = (self.gap_checked.iter())
            .filter_map(|(&p, &(_, pending))| Some((p, pending?)))
            .collect();
        for (p, expected) in pending {
            self.gap_checked.remove(&p);
            self.count_lost(p, expected, i64::MAX);
        }
        let mut behind = 0u64;
        for (&p, &(offset, _)) in &self.next {
            let watermarks =
                (self.consumer).fetch_watermarks(&self.spec.topic, p, Duration::from_millis(500));
            match watermarks {
                Ok((_, high)) => behind += high.saturating_sub(offset).max(0) as u64,
                Err(_) => return,
            }
        }
        self.backlog = Some(behind);
    }

    /// The record's value as the event's line, with its parts put in that the spec asks for.
    fn line(&self, message: &BorrowedMessage<'_>, value: &[u8]) -> Vec<u8> {
        let mut parts = RecordParts {
            key: message.key(),
            timestamp: message.timestamp().to_millis(),
            headers: Vec::new(),
        };
        if self.fields.wants_headers()
            && let Some(headers) = message.headers()
        {
            parts.headers = headers.iter().map(|h| (h.key, h.value)).collect();
        }
        self.fields.event_line(value, &parts)
    }

    /// Hands out the held record, counting it as read.
    fn hand_out(&mut self) -> Option<Record> {
        let (p, offset, line) = self.held.take()?;
        self.line += 1;
        let entry = self.next.entry(p).or_insert((0, 0));
        *entry = (offset + 1, entry.1 + 1);
        Some(Record::Line(self.line, line))
    }

    /// After a gap in partition `p`'s offsets (from `expected` to `offset`): the records the
    /// brokers deleted (retention) before the pipeline read them, logged and counted in
    /// `weir_kafka_records_lost_total`, never passed over in silence. Gaps are also transaction
    /// markers and compaction, so the partition's oldest kept offset decides, asked for at most
    /// once a second per partition.
    fn count_lost(&mut self, p: i32, expected: i64, offset: i64) {
        let checked = &mut self.gap_checked;
        let (last, pending) = checked.get(&p).copied().unzip();
        let expected = pending
            .flatten()
            .map_or(expected, |earliest| earliest.min(expected));
        if let Some(last) = last.filter(|at| at.elapsed() < Duration::from_secs(1)) {
            checked.insert(p, (last, Some(expected))); // asked within the second: later
            return;
        }
        checked.insert(p, (Instant::now(), None));
        let topic = &self.spec.topic;
        let Ok((oldest, _)) =
            (self.consumer).fetch_watermarks(topic, p, Duration::from_millis(500))
        else {
            return;
        };
        let lost = oldest.min(offset) - expected;
        if lost > 0 {
            tracing::warn!(pipeline = %self.pipeline, %topic, partition = p, from = expected, to = oldest, lost, "kafka: records were deleted by the brokers (retention) before the pipeline read them; reading on from the oldest kept");
            metrics::counter!("weir_kafka_records_lost_total", "pipeline" => self.pipeline.clone(), "topic" => topic.clone())
                .increment(lost as u64);
        }
    }

    fn complain(&mut self, error: impl std::fmt::Display) {
        if self
            .complained
            .is_none_or(|at| at.elapsed() > Duration::from_secs(1))
        {
            tracing::warn!(topic = %self.spec.topic, %error, "kafka: waiting for the brokers");
            self.complained = Some(Instant::now());
        }
    }
}

impl Source for KafkaSource {
    fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        if let Some(record) = self.hand_out() {
            return Ok(Some(record));
        }
        if !self.assigned {
            self.assign()?;
            self.assigned = true;
        }
        self.refresh();
        if let Some((p, expected, offset)) = self.gap.take() {
            self.count_lost(p, expected, offset);
        }
        if !self.undeclared.is_empty() {
            return Ok(Some(Record::Declare(std::mem::take(&mut self.undeclared))));
        }
        let message = match self.consumer.poll(TICK) {
            None => return Ok(Some(Record::Tick)),
            Some(Err(error)) => {
                self.complain(error);
                return Ok(Some(Record::Tick));
            }
            Some(Ok(message)) => message,
        };
        let (p, offset) = (message.partition(), message.offset());
        let expected = self.next.get(&p).map_or(0, |&(next, _)| next);
        if offset < expected {
            return Ok(Some(Record::Tick)); // read already: never twice
        }
        if expected > 0 && offset > expected {
            self.gap = Some((p, expected, offset));
        }
        let until = (self.spec.until.as_ref()).map(|until| until.get(&p).copied().unwrap_or(0));
        if let Some(until) = until.filter(|&until| offset >= until) {
            // Past where a replay stops: the partition is read to its end (records below it the
            // brokers no longer hold do not keep the replay waiting).
            let entry = self.next.entry(p).or_insert((0, 0));
            entry.0 = entry.0.max(until);
            return Ok(Some(Record::Tick));
        }
        let Some(value) = message.payload() else {
            // A tombstone: nothing to read, but the offset is passed.
            let entry = self.next.entry(p).or_insert((0, 0));
            entry.0 = offset + 1;
            return Ok(Some(Record::Tick));
        };
        let timestamp = message.timestamp().to_millis();
        let line = self.line(&message, value);
        self.held = Some((p, offset, line));
        let same_partition = self.partition.as_ref().is_some_and(|(q, _)| *q == p);
        let published = timestamp.unwrap_or_else(|| crate::time::wall_clock_ms() as i64);
        let clock_moved = published > self.clock.unwrap_or(i64::MIN);
        if same_partition && !clock_moved {
            return Ok(self.hand_out());
        }
        let name: Arc<str> = match &self.partition {
            Some((q, name)) if *q == p => name.clone(),
            _ => self.partition_name(p).into(),
        };
        self.partition = Some((p, name.clone()));
        self.clock = Some(self.clock.map_or(published, |c| c.max(published)));
        Ok(Some(Record::Clock(self.clock.expect("set"), Some(name))))
    }

    fn position(&self) -> SourcePosition {
        SourcePosition {
            line: self.line,
            // Every partition's next offset summed: how far the source has read in all, for
            // progress and a replay's end (each partition's is in `files`).
            offset: self
                .next
                .values()
                .map(|&(next, _)| next.max(0) as u64)
                .sum(),
            clock: self.clock,
            files: (self.next.iter())
                .map(|(&p, &(offset, lines))| SourcePosition {
                    line: lines,
                    offset: offset.max(0) as u64,
                    rng: Some(p as u64),
                    ..SourcePosition::default()
                })
                .collect(),
            ..SourcePosition::default()
        }
    }

    fn resume(&mut self, position: &SourcePosition) -> Result<(), SourceError> {
        self.line = position.line;
        self.clock = position.clock;
        for part in &position.files {
            let p = part.rng.unwrap_or(0) as i32;
            self.next.insert(p, (part.offset as i64, part.line));
        }
        self.held = None;
        self.partition = None;
        if self.assigned {
            self.assign()?;
        }
        Ok(())
    }

    fn backlog(&self) -> Option<u64> {
        self.backlog
    }
}
