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

use std::sync::Arc;
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

type Messages = async_nats::jetstream::consumer::pull::Ordered;

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
}

/// Messages, in stream order, as the pipeline's records: each message a line, preceded by a
/// clock record naming its subject (the partition) and the server's publication clock when
/// the subject changed or the clock moved [`CLOCK_STEP`]; and the position they reach.
#[derive(Debug, Default)]
pub(super) struct Framing {
    /// The last stream sequence handed to the pipeline (0: none).
    sequence: u64,
    /// Events handed to the pipeline.
    line: u64,
    /// The partition of the last message (a clock record naming it is sent when it changes).
    subject: Option<Arc<str>>,
    /// The last publication time sent as a clock record (ms since the epoch).
    clock: Option<i64>,
    /// A message (its sequence and line) whose partition record was sent first; it counts as
    /// read only once handed out.
    pending: Option<(u64, Record)>,
}

impl Framing {
    /// The line held back behind its clock record, if any.
    pub(super) fn take_pending(&mut self) -> Option<Record> {
        let (sequence, line) = self.pending.take()?;
        (self.sequence, self.line) = (sequence, self.line + 1);
        Some(line)
    }

    /// The record a message starts with: a tick for one already read (delivered again).
    pub(super) fn frame(
        &mut self,
        sequence: u64,
        subject: &str,
        published: i64,
        payload: Vec<u8>,
    ) -> Record {
        if sequence <= self.sequence {
            return Record::Tick; // delivered again after a reconnect: already read
        }
        let line = Record::Line(sequence, payload);
        let same_subject = self.subject.as_deref() == Some(subject);
        let clock_moved = published >= self.clock.unwrap_or(i64::MIN).saturating_add(CLOCK_STEP);
        if same_subject && !clock_moved {
            (self.sequence, self.line) = (sequence, self.line + 1);
            return line;
        }
        // The subject (the partition) and the server's clock at publication, as an ingest
        // clock line of an HTTP log: idleness per subject and "too far ahead" judge by it.
        let subject: Arc<str> = match &self.subject {
            Some(current) if same_subject => current.clone(),
            _ => subject.into(),
        };
        self.subject = Some(subject.clone());
        self.clock = Some(self.clock.map_or(published, |c| c.max(published)));
        self.pending = Some((sequence, line));
        Record::Clock(self.clock.expect("set above"), Some(subject))
    }

    pub(super) fn position(&self) -> SourcePosition {
        SourcePosition {
            line: self.line,
            offset: self.sequence,
            clock: self.clock,
            ..SourcePosition::default()
        }
    }

    pub(super) fn resume(&mut self, position: &SourcePosition) {
        *self = Framing {
            sequence: position.offset,
            line: position.line,
            clock: position.clock,
            ..Framing::default()
        };
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

fn fail(spec: &NatsSourceSpec, message: impl std::fmt::Display) -> SourceError {
    SourceError::new(
        &format!("nats stream {} at {}", spec.stream, spec.url),
        std::io::Error::other(message.to_string()),
    )
}

impl NatsSource {
    /// A source over `spec`; it connects on the first read (after a resume, if any).
    pub fn new(spec: NatsSourceSpec) -> Result<NatsSource, SourceError> {
        let runtime = client_runtime().map_err(|e| fail(&spec, e))?;
        Ok(NatsSource {
            spec,
            runtime,
            jetstream: None,
            messages: None,
            ready: Default::default(),
            opened: false,
            watch: ClientWatch::default(),
            framing: Framing::default(),
        })
    }

    /// Connects (once) and opens an ordered consumer at the sequence after the last one read.
    fn open(&mut self) -> Result<(), String> {
        use async_nats::jetstream::consumer::{DeliverPolicy, pull::OrderedConfig};
        if self.jetstream.is_none() {
            let url = self.spec.url.clone();
            let options = connect_options(&self.watch);
            let client = (self
                .runtime
                .block_on(async move { options.connect(&url).await }))
            .map_err(|e| format!("cannot connect: {e}"))?;
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
        let (stream, subjects) = (self.spec.stream.clone(), self.spec.subjects.clone());
        let start = self.framing.sequence + 1;
        let opened: Result<Messages, String> = self.runtime.block_on(async move {
            let stream = jetstream.get_stream(&stream).await.map_err(|e| {
                format!("cannot open the stream (create it first, with the subjects it holds): {e}")
            })?;
            let consumer = stream
                .create_consumer(OrderedConfig {
                    deliver_policy: DeliverPolicy::ByStartSequence {
                        start_sequence: start,
                    },
                    filter_subjects: subjects,
                    ..Default::default()
                })
                .await
                .map_err(|e| format!("cannot create a consumer: {e}"))?;
            consumer
                .messages()
                .await
                .map_err(|e| format!("cannot read messages: {e}"))
        });
        self.messages = Some(opened?);
        Ok(())
    }

    /// The next message, or `None` after a tick without one. The first open failing is a
    /// mistake in the spec (no such server or stream); later failures are the server away:
    /// the source waits for it, opening a new consumer at the next sequence once it is back.
    pub(super) fn next_message(
        &mut self,
    ) -> Result<Option<async_nats::jetstream::Message>, SourceError> {
        if self.messages.is_none() {
            match self.open() {
                Ok(()) => {
                    self.opened = true;
                    // The first connection is no return (a late notice of it costs one reopen).
                    self.watch.connected_since();
                }
                Err(e) if !self.opened => return Err(fail(&self.spec, e)),
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

    /// Drops the consumer (inside the client's runtime: its subscription unsubscribes there).
    fn close(&mut self) {
        let _inside = self.runtime.enter();
        self.messages = None;
        self.ready.clear();
    }
}

impl Drop for NatsSource {
    fn drop(&mut self) {
        self.close();
    }
}

/// A message's stream sequence and publication time (ms since the epoch).
pub(super) fn sequence_and_time(
    message: &async_nats::jetstream::Message,
) -> Result<(u64, i64), String> {
    let info = message
        .info()
        .map_err(|e| format!("a message without its sequence: {e}"))?;
    let published = (info.published.unix_timestamp_nanos() / 1_000_000) as i64;
    Ok((info.stream_sequence, published))
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
        let Some(message) = self.next_message()? else {
            return Ok(Some(Record::Tick));
        };
        let (sequence, published) = sequence_and_time(&message).map_err(|e| fail(&self.spec, e))?;
        if sequence > until {
            self.framing.sequence = until; // past the end asked for: read no further
            return Ok(Some(Record::Tick));
        }
        let subject = message.subject.as_str();
        Ok(Some(self.framing.frame(
            sequence,
            subject,
            published,
            message.payload.to_vec(),
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
}
