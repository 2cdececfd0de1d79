//! Sources: where events come from. A JSON Lines file, several files read as partitions
//! (`interleave.rs`, `[source] type = "files"`), standard input, a deterministic generator, the
//! Nexmark benchmark's events, the ingest log `weir serve` writes, or a NATS JetStream stream
//! (`nats.rs`; `nats_feed.rs` shares one consumer among a process's runs). Each yields records
//! in arrival order, numbered by line from 1, and says where it is ([`SourcePosition`]) for
//! checkpoints.
//!
//! Depends on `event`, `field_name`, `fsutil`, `nats_client`, `spec`, `time` and `value`.

mod generator;
mod ingest;
mod interleave;
mod kafka;
mod kafka_fields;
mod lines;
mod nats;
mod nats_feed;
mod nexmark;

pub use generator::Generator;
pub use ingest::{IngestError, IngestGate, IngestLog, segment_path, segments};
pub use interleave::Interleaved;
pub use kafka::{KafkaSource, topic_ends, topic_partitions};
pub use lines::LineReader;
pub use nats::{NatsSource, partition_of_key};
pub use nats_feed::{FeedSource, NatsFeed};
pub use nexmark::Nexmark;

use serde::{Deserialize, Serialize};

use crate::event::Event;

/// Where the source was when a checkpoint was taken: everything before it is reflected in the
/// checkpoint's state and output.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourcePosition {
    /// Lines (or generated events) consumed.
    pub line: u64,
    /// Bytes consumed (file sources).
    pub offset: u64,
    /// The generator's random state (generator sources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rng: Option<u64>,
    /// The last ingest clock line read (HTTP ingest logs), so a replay from here judges
    /// "too far ahead of the wall clock" as the first run did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<i64>,
    /// Each file's own position (several files read in turn; `offset` is then whose turn is
    /// next).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<SourcePosition>,
    /// A message of several events handed out in part (NATS): its sequence, and how many of
    /// its lines were handed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<(u64, u64)>,
}

/// What a source yields.
#[derive(Debug)]
pub enum Record {
    /// A raw line, to be decoded (line number, bytes without the newline).
    Line(u64, Vec<u8>),
    /// A line decoded already (a shared feed decodes each line once for every run it feeds):
    /// its event, and how many bytes the line had. Judged as a decoded [`Record::Line`] is.
    Decoded(Event, usize),
    /// A ready event (generated sources).
    Event(Event),
    /// Nothing yet (a tailing source waiting for more input): the router uses the pause to
    /// send what it holds, take due checkpoints and notice a stop.
    Tick,
    /// The wall clock (ms) at which the events that follow were accepted (HTTP ingest): what
    /// "too far in the future" and idle partitions are judged against, the same on every
    /// replay; and the watermark partition the producer named for them, if any.
    Clock(i64, Option<std::sync::Arc<str>>),
    /// The input was quiet for this many ms of wall clock (HTTP ingest with
    /// `advance_when_idle`): the watermark moves on by as much.
    Advance(i64),
    /// Every window that changed since its last emission emits its current result now (HTTP
    /// ingest with `[emit] early_interval`).
    Early,
    /// The parked events of this quarantined key (`None`: of every key) go through the version
    /// now serving it (HTTP ingest, `POST .../quarantine/redrive`).
    Redrive(Option<std::sync::Arc<str>>),
    /// The lines that follow belong to this watermark partition (several files).
    Partition(std::sync::Arc<str>),
    /// This partition has ended: it no longer holds the watermark back.
    PartitionEnd(std::sync::Arc<str>),
    /// These watermark partitions exist, events or not (a Kafka topic's partitions, known once
    /// the brokers are asked): each holds the watermark back until it sends, ends or idles.
    Declare(Vec<String>),
}

/// A source failed to read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read input {source_name}: {error}")]
pub struct SourceError {
    source_name: String,
    error: std::io::Error,
}

impl SourceError {
    /// Whether the input was not found.
    pub fn is_not_found(&self) -> bool {
        self.error.kind() == std::io::ErrorKind::NotFound
    }

    pub(crate) fn new(source_name: &str, error: std::io::Error) -> Self {
        SourceError {
            source_name: source_name.to_owned(),
            error,
        }
    }
}

/// A source of records. Sources are resumable: a checkpoint stores [`position`]
/// (Source::position), and a restarted pipeline calls [`resume`](Source::resume) with it before
/// reading.
pub trait Source: Send {
    /// The next record, or `None` at the end of a bounded input.
    fn next_record(&mut self) -> Result<Option<Record>, SourceError>;
    /// Where the source is: everything before it has been returned.
    fn position(&self) -> SourcePosition;
    /// Continues from a position an earlier run of the same source reported.
    fn resume(&mut self, position: &SourcePosition) -> Result<(), SourceError>;
    /// How far the source knows it is behind the end of its input (a NATS source: stream
    /// sequences behind the last one on its subjects), if it knows.
    fn backlog(&self) -> Option<u64> {
        None
    }
}
