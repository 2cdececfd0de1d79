//! [`NatsSource`]: events from a NATS JetStream stream (`[source] type = "nats"`). Messages are
//! read in stream order by an ordered pull consumer (ephemeral: the pipeline's checkpoint, not
//! the server, records how far it read), so input is read exactly once into state: the
//! position is the last stream sequence handed to the pipeline, and a restart resumes at the
//! next one. Each message's subject is its watermark partition (as a producer's
//! `Weir-Partition` is for HTTP), the server's publication time its ingest clock (for
//! `idle_timeout` and `max_ahead`, as an HTTP log's clock lines are), each payload one JSON
//! event.
//!
//! The client runs on a small runtime of its own; the pipeline's router reads through
//! [`Source`], waiting at most a tick for the next message. A server that goes away is waited
//! for: the client reconnects, and the source opens a new consumer at the next sequence. A
//! server not reached when the source first opens is a mistake in the spec: the first open
//! fails after `nats_client::FIRST_CONNECT`, saying whether a server refused or none
//! answered.
//!
//! Depends on `nats_client` and `spec`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_stream::StreamExt;

use super::{Record, Source, SourceError, SourcePosition};
use crate::nats_client::{ClientWatch, client_runtime, connect_options, first_connection};
use crate::spec::NatsSourceSpec;

/// How long a read waits for a message before yielding a tick.
const TICK: Duration = Duration::from_millis(100);
/// How far the server's publication clock moves before the source tells the pipeline (ms).
const CLOCK_STEP: i64 = 100;
/// The most messages taken from the client at once.
const MAX_READY: usize = 1_024;
/// How long to wait before opening a consumer again while the server is away.
const REOPEN_WAIT: Duration = Duration::from_millis(500);

type Messages = async_nats::jetstream::consumer::pull::Stream;

/// Messages asked for in one pull: the client asks for more when half are in, so a pull's
/// round trip is hidden behind the other half. (An ordered consumer asks for 500 at a time,
/// and its round trips held a loopback read to about 220 k messages a second.)
const PULL_BATCH: usize = 32_768;
/// The most bytes asked for in one pull: large messages are held to it, not to the count.
const PULL_BYTES: usize = 16 << 20;

/// A JetStream stream read in order from a stream sequence on.
pub struct NatsSource {
    spec: NatsSourceSpec,
    runtime: tokio::runtime::Runtime,
    jetstream: Option<async_nats::jetstream::Context>,
    messages: Option<Messages>,
    /// Messages received and not yet handed out.
    ready: std::collections::VecDeque<async_nats::jetstream::Message>,
    /// Whether a consumer was ever opened (a first failure is the spec's mistake).
    opened: bool,
    /// Hears of the client's connections (one after the server was away means a new
    /// consumer) and why its attempts failed.
    watch: ClientWatch,
    /// Where the pipeline is in the stream.
    framing: Framing,
    /// The consumer's delivery count of the last message taken (a message counted out of
    /// turn means one was lost on the way: another consumer is opened).
    delivered: u64,
    /// The last stream sequence on the subjects read (0: not known yet), kept current by a
    /// task of the client's runtime (see [`StreamEnd`]).
    end: StreamEnd,
}

/// Messages, in stream order, as the pipeline's records: each line of a message (a message
/// may carry several events, one per line, as JSON Lines) a record, the first preceded by a
/// clock record naming its subject (the partition) and the server's publication clock when
/// the subject changed or the clock moved [`CLOCK_STEP`]; and the position they reach, which
/// counts the lines already handed out of a message handed out in part.
#[derive(Debug, Default)]
pub(super) struct Framing {
    /// The last stream sequence whose every line was handed to the pipeline (0: none).
    sequence: u64,
    /// Events handed to the pipeline.
    line: u64,
    /// The partition of the last message (a clock record naming it is sent when it changes).
    subject: Option<Arc<str>>,
    /// The last publication time sent as a clock record (ms since the epoch).
    clock: Option<i64>,
    /// The message being handed out a line at a time.
    current: Option<Current>,
    /// After a resume: the message handed out in part before (its sequence) and how many of
    /// its lines were.
    skip: Option<(u64, u64)>,
    /// A partitioned stream's partitions: a message's watermark partition is its partition's
    /// number, not its whole subject (which names its key too).
    partitions: Option<crate::spec::NatsPartitions>,
    /// The key groups of the run, when a shared feed decodes for it: a decoded event of
    /// another key group is handed out without its fields (the run only takes its time).
    pub(super) owned: Option<std::ops::Range<u32>>,
}

/// The partition of a stream cut into `count` partitions that `key` belongs to: what a NATS
/// server's subject mapping `{{partition(count, 1)}}` computes from the key's token (FNV-1a,
/// 32 bits, of its bytes, modulo `count`).
pub fn partition_of_key(key: &str, count: usize) -> usize {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in key.as_bytes() {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    (hash % count.max(1) as u32) as usize
}

/// A message being handed out a line at a time: its sequence, its payload (shared, not
/// copied: a line is copied out as it is handed out), where its next line begins, and how many
/// lines it handed out.
#[derive(Debug)]
struct Current {
    sequence: u64,
    payload: bytes::Bytes,
    next: usize,
    taken: u64,
    /// Its lines decoded already, in order (a shared feed's: `None` for a line that does not
    /// decode, which is handed out as it is, to be refused as a run refuses it).
    decoded: Option<Decoded>,
}

/// A message's lines decoded once by a shared feed, for every run it feeds: each event with
/// its key group (worked out once, not by every run that looks whether it owns the event).
pub(super) type Decoded = std::sync::Arc<[Option<(u16, crate::event::Event)>]>;

/// Decodes each line of `payload` (`sequence`'s) with `decoder`, in the order [`Framing`]
/// hands them out: `None` for a line that does not decode.
pub(super) fn decode_lines(
    decoder: &mut crate::event::Decoder,
    sequence: u64,
    payload: &[u8],
) -> Decoded {
    let mut decoded = Vec::new();
    let mut next = 0;
    while let Some((start, end, after)) = next_line(payload, next) {
        let event = decoder.decode(sequence, &payload[start..end]).ok();
        decoded.push(event.map(|event| (crate::state::key_group(&event.key), event)));
        next = after;
    }
    decoded.into()
}

/// The next line of `payload` from byte `from` that is not blank: where it begins and ends
/// (without its `\r\n`), and where the line after it begins.
fn next_line(payload: &[u8], mut from: usize) -> Option<(usize, usize, usize)> {
    while from < payload.len() {
        let end = (payload[from..].iter().position(|b| *b == b'\n'))
            .map_or(payload.len(), |at| from + at);
        let line = &payload[from..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if !line.iter().all(u8::is_ascii_whitespace) {
            return Some((from, from + line.len(), end + 1));
        }
        from = end + 1;
    }
    None
}

impl Framing {
    /// The next line of the message being handed out, if any.
    pub(super) fn take_pending(&mut self) -> Option<Record> {
        let current = self.current.as_mut()?;
        let (start, end, after) = next_line(&current.payload, current.next)?;
        let index = current.taken as usize;
        let owned = &self.owned;
        let event = (current.decoded.as_ref())
            .and_then(|decoded| decoded.get(index)?.as_ref())
            .map(|(group, event)| match owned {
                Some(owned) if !owned.contains(&u32::from(*group)) => crate::event::Event {
                    line: event.line,
                    key: event.key.clone(),
                    timestamp: event.timestamp,
                    fields: Vec::new(),
                },
                _ => event.clone(),
            });
        let record = match event {
            Some(event) => Record::Decoded(event, end - start),
            None => Record::Line(current.sequence, current.payload[start..end].to_vec()),
        };
        current.next = after;
        current.taken += 1;
        self.line += 1;
        let sequence = current.sequence;
        if next_line(&current.payload, after).is_none() {
            self.sequence = sequence;
            self.current = None;
        }
        Some(record)
    }

    /// The record a message starts with: a tick for one already read (delivered again), or
    /// one without a line left to hand out.
    pub(super) fn frame(
        &mut self,
        sequence: u64,
        subject: &str,
        published: i64,
        payload: bytes::Bytes,
    ) -> Record {
        self.frame_decoded(sequence, subject, published, payload, || None)
    }

    /// [`frame`](Self::frame) for a message whose lines a shared feed decodes (`decoded`, asked
    /// only for a message not read already).
    pub(super) fn frame_decoded(
        &mut self,
        sequence: u64,
        subject: &str,
        published: i64,
        payload: bytes::Bytes,
        decoded: impl FnOnce() -> Option<Decoded>,
    ) -> Record {
        if sequence <= self.sequence {
            return Record::Tick; // delivered again after a reconnect: already read
        }
        let decoded = decoded();
        // Lines handed out before a restart, of a message read in part, are skipped.
        let (mut next, mut taken) = (0, 0);
        if let Some((partial, skip)) = self.skip.take()
            && partial == sequence
        {
            while taken < skip
                && let Some((_, _, after)) = next_line(&payload, next)
            {
                (next, taken) = (after, taken + 1);
            }
        }
        if next_line(&payload, next).is_none() {
            self.sequence = sequence;
            return Record::Tick;
        }
        self.current = Some(Current {
            sequence,
            payload,
            next,
            taken,
            decoded,
        });
        let subject = (self.partitions.as_ref())
            .and_then(|partitions| partitions.of_subject(subject))
            .unwrap_or(subject);
        let same_subject = self.subject.as_deref() == Some(subject);
        let clock_moved = published >= self.clock.unwrap_or(i64::MIN).saturating_add(CLOCK_STEP);
        if same_subject && !clock_moved {
            return self.take_pending().expect("a line to hand out");
        }
        // The subject (the partition) and the server's clock at publication, as an ingest
        // clock line of an HTTP log: idleness per subject and "too far ahead" judge by it.
        let subject: Arc<str> = match &self.subject {
            Some(current) if same_subject => current.clone(),
            _ => subject.into(),
        };
        self.subject = Some(subject.clone());
        self.clock = Some(self.clock.map_or(published, |c| c.max(published)));
        Record::Clock(self.clock.expect("set above"), Some(subject))
    }

    pub(super) fn position(&self) -> SourcePosition {
        SourcePosition {
            line: self.line,
            offset: self.sequence,
            clock: self.clock,
            part: (self.current.as_ref())
                .filter(|current| current.taken > 0)
                .map(|current| (current.sequence, current.taken)),
            ..SourcePosition::default()
        }
    }

    pub(super) fn resume(&mut self, position: &SourcePosition) {
        *self = Framing {
            sequence: position.offset,
            line: position.line,
            clock: position.clock,
            skip: position.part,
            partitions: self.partitions.take(),
            owned: self.owned.take(),
            ..Framing::default()
        };
    }

    /// Framing for a stream cut into `partitions`, if it is.
    pub(super) fn partitioned(partitions: Option<crate::spec::NatsPartitions>) -> Framing {
        Framing {
            partitions,
            ..Framing::default()
        }
    }
}

impl std::fmt::Debug for NatsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSource")
            .field("stream", &self.spec.stream)
            .field("sequence", &self.framing.sequence)
            .finish()
    }
}

fn fail(
    spec: &NatsSourceSpec,
    error: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> SourceError {
    SourceError::new(
        &format!("nats stream {} at {}", spec.stream, spec.url),
        std::io::Error::other(error),
    )
}

/// Why a consumer could not be opened.
#[derive(Debug, thiserror::Error)]
enum OpenError {
    #[error("cannot connect: {0}")]
    Connect(#[source] async_nats::ConnectError),
    #[error(transparent)]
    FirstConnection(#[from] crate::nats_client::NatsClientError),
    #[error("cannot open the stream (create it first, with the subjects it holds): {0}")]
    Stream(#[source] async_nats::jetstream::context::GetStreamError),
    #[error("cannot create a consumer: {0}")]
    Consumer(#[source] async_nats::jetstream::stream::ConsumerError),
    #[error("cannot read messages: {0}")]
    Messages(#[source] async_nats::jetstream::consumer::StreamError),
    /// The stream ends before what was read: it was deleted and made again since.
    #[error(
        "the stream ends at sequence {last}, but this pipeline had read up to {read}: it was \
         deleted and made again, and reading on from {read} would skip its first records; start \
         the pipeline afresh (a new data directory, or withdraw and deploy it again)"
    )]
    Remade { read: u64, last: u64 },
}

impl NatsSource {
    /// A source over `spec`; it connects on the first read (after a resume, if any).
    pub fn new(spec: NatsSourceSpec) -> Result<NatsSource, SourceError> {
        let runtime = client_runtime().map_err(|e| fail(&spec, e))?;
        let framing = Framing::partitioned(spec.partitions.clone());
        Ok(NatsSource {
            spec,
            runtime,
            jetstream: None,
            messages: None,
            ready: Default::default(),
            opened: false,
            watch: ClientWatch::default(),
            framing,
            delivered: 0,
            end: StreamEnd::default(),
        })
    }

    /// Connects (once) and opens a consumer at the sequence after the last one read: ephemeral,
    /// in memory, unacknowledged, as an ordered consumer is, but pulling [`PULL_BATCH`]
    /// messages at a time; a gap in its delivery opens another (see `next_message`).
    fn open(&mut self) -> Result<(), OpenError> {
        use async_nats::jetstream::consumer::{DeliverPolicy, pull};
        if self.jetstream.is_none() {
            let url = self.spec.url.clone();
            let options = connect_options(&self.watch);
            let client = (self
                .runtime
                .block_on(async move { options.connect(&url).await }))
            .map_err(OpenError::Connect)?;
            let _inside = self.runtime.enter();
            // Kept from here on, connected or not: a client goes on trying after it is
            // dropped, so one per failed open would pile up where opens are retried.
            self.jetstream = Some(async_nats::jetstream::new(client));
        }
        let jetstream = self.jetstream.clone().expect("made above");
        if !self.opened {
            let (client, watch) = (jetstream.client(), self.watch.clone());
            (self.runtime).block_on(async move { first_connection(&client, &watch).await })?;
        }
        let stream = self.spec.stream.clone();
        // A partitioned stream is read by its partitions' subjects: one (a slice's), or all.
        let subjects = match (&self.spec.partitions, self.spec.partition) {
            (Some(partitions), Some(p)) => vec![partitions.subject_of(p)],
            (Some(partitions), None) => vec![partitions.all_subjects()],
            (None, _) => self.spec.subjects.clone(),
        };
        self.end
            .watch(&self.runtime, &jetstream, &self.spec.stream, &subjects);
        let start = self.framing.sequence + 1;
        let opened: Result<Messages, OpenError> = self.runtime.block_on(async move {
            let stream = (jetstream.get_stream(&stream).await).map_err(OpenError::Stream)?;
            let last = stream.cached_info().state.last_sequence;
            if last + 1 < start {
                let read = start - 1;
                return Err(OpenError::Remade { read, last });
            }
            // One subject as `filter_subject` (the only form a 2.9 server knows), several as
            // `filter_subjects` (2.10 and later).
            let (filter_subject, filter_subjects) = match subjects.as_slice() {
                [one] => (one.clone(), Vec::new()),
                _ => (String::new(), subjects),
            };
            let config: pull::Config = pull::OrderedConfig {
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: start,
                },
                filter_subject,
                filter_subjects,
                ..Default::default()
            }
            .into();
            let consumer = stream
                .create_consumer(config)
                .await
                .map_err(OpenError::Consumer)?;
            consumer
                .stream()
                .max_messages_per_batch(PULL_BATCH)
                .max_bytes_per_batch(PULL_BYTES)
                .heartbeat(Duration::from_secs(5))
                .expires(Duration::from_secs(30))
                .messages()
                .await
                .map_err(OpenError::Messages)
        });
        self.messages = Some(opened?);
        self.delivered = 0;
        Ok(())
    }

    /// The next message, or `None` after a tick without one. The first open failing is a
    /// mistake in the spec (no such server or stream); later failures are the server away:
    /// the source waits for it, opening a new consumer at the next sequence once it is back.
    pub(super) fn next_message(&mut self) -> Result<Option<Taken>, SourceError> {
        let Some(message) = self.next_delivered()? else {
            return Ok(None);
        };
        let info = message.info().map_err(|e| fail(&self.spec, e))?;
        let (sequence, delivered) = (info.stream_sequence, info.consumer_sequence);
        let published = (info.published.unix_timestamp_nanos() / 1_000_000) as i64;
        if delivered != self.delivered + 1 {
            // A message lost on the way (the client dropped it, or the consumer was
            // recreated by the server): another consumer from the next sequence.
            tracing::warn!(stream = %self.spec.stream, sequence = self.framing.sequence, "NATS delivery out of turn: opening another consumer");
            self.close();
            return Ok(None);
        }
        self.delivered = delivered;
        Ok(Some(Taken {
            message,
            sequence,
            published,
        }))
    }

    /// The next message the consumer delivered, or `None` after a tick without one (see
    /// [`next_message`](Self::next_message)).
    fn next_delivered(&mut self) -> Result<Option<async_nats::jetstream::Message>, SourceError> {
        if self.messages.is_none() {
            match self.open() {
                Ok(()) => {
                    self.opened = true;
                    // The first connection is no return (a late notice of it costs one reopen).
                    self.watch.connected_since();
                }
                Err(e) if !self.opened => return Err(fail(&self.spec, e)),
                Err(e @ OpenError::Remade { .. }) => return Err(fail(&self.spec, e)),
                Err(e) => {
                    tracing::warn!(stream = %self.spec.stream, error = %e, "NATS away: waiting");
                    std::thread::sleep(REOPEN_WAIT);
                    return Ok(None);
                }
            }
        }
        if let Some(message) = self.ready.pop_front() {
            return Ok(Some(message));
        }
        if self.watch.connected_since() && self.opened {
            // Back after the server was away: a new consumer at the next sequence now, rather
            // than when the old one's pending pull expires.
            self.close();
            return Ok(None);
        }
        let messages = self.messages.as_mut().expect("opened above");
        let ready = &mut self.ready;
        // One wait for the next message, then whatever else has arrived, without waiting: a
        // hand-over between the client's thread and this one per message cost more than the
        // message.
        let next = self.runtime.block_on(async {
            let next = tokio::time::timeout(TICK, messages.next()).await;
            if matches!(next, Ok(Some(Ok(_)))) {
                while ready.len() < MAX_READY {
                    match tokio::time::timeout(Duration::ZERO, messages.next()).await {
                        Ok(Some(Ok(message))) => ready.push_back(message),
                        _ => break,
                    }
                }
            }
            next
        });
        match next {
            Err(_) => Ok(None),
            Ok(Some(Ok(message))) => Ok(Some(message)),
            Ok(None) | Ok(Some(Err(_))) => {
                // The consumer is gone (the server went away, or missed heartbeats): open a new
                // one at the next sequence.
                tracing::warn!(stream = %self.spec.stream, sequence = self.framing.sequence, "NATS consumer lost: opening another");
                self.close();
                Ok(None)
            }
        }
    }
}

impl NatsSource {
    /// The last sequence read.
    pub(super) fn framing_sequence(&self) -> u64 {
        self.framing.sequence
    }

    /// Counts every message up to `sequence` as read (a shared feed reads messages, not
    /// records).
    pub(super) fn skip_to(&mut self, sequence: u64) {
        self.framing.sequence = sequence;
    }

    /// The last stream sequence on the subjects read, for the runs of a shared feed.
    pub(super) fn end(&self) -> StreamEnd {
        self.end.clone()
    }

    /// Drops the consumer (inside the client's runtime: its subscription unsubscribes there).
    fn close(&mut self) {
        let _inside = self.runtime.enter();
        self.messages = None;
        self.ready.clear();
        self.delivered = 0;
    }
}

impl Drop for NatsSource {
    fn drop(&mut self) {
        self.close();
    }
}

/// How often the last sequence on a source's subjects is asked for.
const END_EVERY: Duration = Duration::from_secs(1);

/// The last stream sequence on the subjects a source reads, asked of the server every
/// [`END_EVERY`] (the last message by subject, wildcards and all, one request per subject) by
/// a task of the client's runtime, so that reading never waits for it. A source's backlog is
/// how many stream sequences it is behind it.
#[derive(Debug, Clone, Default)]
pub(super) struct StreamEnd {
    last: Arc<AtomicU64>,
    task: Arc<std::sync::Mutex<Option<tokio::task::AbortHandle>>>,
}

impl StreamEnd {
    /// Starts asking, once (later calls do nothing while the task runs).
    fn watch(
        &self,
        runtime: &tokio::runtime::Runtime,
        jetstream: &async_nats::jetstream::Context,
        stream: &str,
        subjects: &[String],
    ) {
        let mut task = self.task.lock().expect("end lock");
        if task.is_some() {
            return;
        }
        let (jetstream, stream, last) = (jetstream.clone(), stream.to_owned(), self.last.clone());
        let subjects = if subjects.is_empty() {
            vec![">".to_owned()]
        } else {
            subjects.to_vec()
        };
        let asking = runtime.spawn(async move {
            loop {
                if let Ok(Ok(stream)) =
                    tokio::time::timeout(END_EVERY, jetstream.get_stream(&stream)).await
                {
                    for subject in &subjects {
                        let asked = stream.get_last_raw_message_by_subject(subject);
                        if let Ok(Ok(message)) = tokio::time::timeout(END_EVERY, asked).await {
                            last.fetch_max(message.sequence, Ordering::Relaxed);
                        }
                    }
                }
                tokio::time::sleep(END_EVERY).await;
            }
        });
        *task = Some(asking.abort_handle());
    }

    /// How many stream sequences `read` is behind the last one on the subjects, once known.
    pub(super) fn behind(&self, read: u64) -> Option<u64> {
        let last = self.last.load(Ordering::Relaxed);
        (last > 0).then(|| last.saturating_sub(read))
    }
}

impl Drop for StreamEnd {
    fn drop(&mut self) {
        // The last clone stops the task.
        if Arc::strong_count(&self.task) == 1
            && let Some(task) = self.task.lock().expect("end lock").take()
        {
            task.abort();
        }
    }
}

/// A message taken from the consumer, with its stream sequence and publication time (ms since
/// the epoch).
pub(super) struct Taken {
    pub(super) message: async_nats::jetstream::Message,
    pub(super) sequence: u64,
    pub(super) published: i64,
}

impl Source for NatsSource {
    fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        if let Some(line) = self.framing.take_pending() {
            return Ok(Some(line));
        }
        let until = self.spec.until.unwrap_or(u64::MAX);
        if self.framing.sequence >= until {
            return Ok(Some(Record::Tick)); // read to where it was asked to stop
        }
        let Some(Taken {
            message,
            sequence,
            published,
        }) = self.next_message()?
        else {
            return Ok(Some(Record::Tick));
        };
        if sequence > until {
            self.framing.sequence = until; // past the end asked for: read no further
            return Ok(Some(Record::Tick));
        }
        let subject = message.subject.clone();
        Ok(Some(self.framing.frame(
            sequence,
            subject.as_str(),
            published,
            message.payload.clone(),
        )))
    }

    fn position(&self) -> SourcePosition {
        self.framing.position()
    }

    fn resume(&mut self, position: &SourcePosition) -> Result<(), SourceError> {
        self.framing.resume(position);
        self.close();
        Ok(())
    }

    fn backlog(&self) -> Option<u64> {
        self.end.behind(self.framing.sequence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record a framing gives for `messages` (sequence, subject, payload), each message's
    /// lines taken out in turn.
    fn records(framing: &mut Framing, messages: &[(u64, &str, &str)]) -> Vec<String> {
        let mut out = Vec::new();
        for (sequence, subject, payload) in messages {
            let payload = bytes::Bytes::copy_from_slice(payload.as_bytes());
            let mut record = Some(framing.frame(*sequence, subject, 1_000, payload));
            while let Some(next) = record {
                out.push(match next {
                    Record::Line(sequence, line) => {
                        format!("{sequence}:{}", String::from_utf8(line).unwrap())
                    }
                    Record::Clock(_, subject) => format!("clock {}", subject.unwrap()),
                    Record::Tick => "tick".into(),
                    other => format!("{other:?}"),
                });
                record = framing.take_pending();
            }
        }
        out
    }

    #[test]
    fn a_message_of_several_lines_is_several_events_and_its_position_counts_them() {
        let mut framing = Framing::default();
        let out = records(&mut framing, &[(1, "a", "x\ny\r\n\nz\n"), (2, "a", "w")]);
        assert_eq!(out, ["clock a", "1:x", "1:y", "1:z", "2:w"]);
        assert_eq!((framing.position().offset, framing.position().line), (2, 4));
        assert_eq!(framing.position().part, None);
        // An empty message moves the position on, and gives no event.
        assert_eq!(records(&mut framing, &[(3, "a", "\n")]), ["tick"]);
        assert_eq!(framing.position().offset, 3);
    }

    #[test]
    fn a_resume_in_the_middle_of_a_message_goes_on_after_what_was_handed_out() {
        let mut framing = Framing::default();
        let first = framing.frame(5, "a", 1_000, bytes::Bytes::from_static(b"x\ny\nz"));
        assert!(matches!(first, Record::Clock(..)));
        assert!(matches!(framing.take_pending(), Some(Record::Line(5, _))));
        let position = framing.position();
        assert_eq!(
            (position.offset, position.line, position.part),
            (0, 1, Some((5, 1)))
        );
        let mut resumed = Framing::default();
        resumed.resume(&position);
        // The consumer starts after offset 0: message 5 comes again, its first line skipped.
        let out = records(&mut resumed, &[(5, "a", "x\ny\nz"), (6, "a", "w")]);
        assert_eq!(out, ["clock a", "5:y", "5:z", "6:w"]);
        assert_eq!(resumed.position().line, 4);
        // Delivered again after a reconnect: already read.
        assert_eq!(records(&mut resumed, &[(6, "a", "w")]), ["tick"]);
    }

    #[test]
    fn lines_decoded_by_a_shared_feed_are_handed_out_in_order_and_whole_only_to_their_owner() {
        let payload: &[u8] =
            b"{\"k\":\"a\",\"t\":1,\"v\":1}\nnot json\n\n{\"k\":\"b\",\"t\":2,\"v\":2}";
        let mut decoder = crate::event::Decoder::new("k", "t");
        let decoded = decode_lines(&mut decoder, 7, payload);
        assert_eq!(decoded.len(), 3, "blank lines are not lines");
        let group_of_a = u32::from(crate::state::key_group("a"));
        let mut framing = Framing {
            owned: Some(group_of_a..group_of_a + 1),
            ..Framing::default()
        };
        let bytes = bytes::Bytes::copy_from_slice(payload);
        let first = framing.frame_decoded(7, "s", 1_000, bytes.clone(), || Some(decoded.clone()));
        assert!(matches!(first, Record::Clock(..)));
        match framing.take_pending() {
            Some(Record::Decoded(event, _)) => {
                assert_eq!(
                    (event.key.as_str(), event.fields.len()),
                    ("a", 3),
                    "{event:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        // What does not decode is handed out as it is: the run makes its dead letter.
        assert!(
            matches!(framing.take_pending(), Some(Record::Line(7, line)) if line == b"not json")
        );
        match framing.take_pending() {
            Some(Record::Decoded(event, _)) => {
                // Another key group's: its time and key only.
                assert_eq!(
                    (event.key.as_str(), event.timestamp, event.fields.len()),
                    ("b", 2, 0)
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(framing.take_pending().is_none());
        // A resume in the middle of the message goes on at the right decoded line.
        let mut framing = Framing::default();
        framing.frame_decoded(7, "s", 1_000, bytes.clone(), || Some(decoded.clone()));
        framing.take_pending();
        let mut resumed = Framing::default();
        resumed.resume(&framing.position());
        resumed.frame_decoded(7, "s", 1_000, bytes, || Some(decoded));
        assert!(matches!(resumed.take_pending(), Some(Record::Line(7, _))));
        assert!(
            matches!(resumed.take_pending(), Some(Record::Decoded(e, _)) if e.key.as_str() == "b")
        );
    }
}
