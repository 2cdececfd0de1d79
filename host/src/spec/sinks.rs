//! The `[sinks]` section: where window results, late events and dead letters go (standard
//! streams, files, nowhere, or a NATS subject), with the raw form, defaults and checks.
//!
//! Depends on `values` and on `source` for its check of NATS addresses and subjects.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::Result;
use super::source::check_nats;
use super::values::invalid;

/// Where output goes. `None` for a sink means standard output.
#[derive(Debug, Clone, PartialEq)]
pub struct SinksSpec {
    /// Window results (and enriched events when there is no aggregate).
    pub results: Sink,
    /// Events too late for all their windows.
    pub late: Sink,
    /// Input and operator failures.
    pub dead_letters: Sink,
}

impl SinksSpec {
    /// Refuses two sinks writing the same file: their records would interleave and each would
    /// cut the other back on recovery.
    pub(super) fn check_distinct(&self) -> Result<()> {
        let files = [
            ("results", &self.results),
            ("late", &self.late),
            ("dead_letters", &self.dead_letters),
        ];
        for (i, (a, first)) in files.iter().enumerate() {
            for (b, second) in &files[i + 1..] {
                if let (Sink::File(x), Sink::File(y)) = (first, second)
                    && x == y
                {
                    return Err(invalid(format!(
                        "sinks.{a} and sinks.{b} name the same file {}: give each its own",
                        x.display()
                    )));
                }
            }
        }
        Ok(())
    }
}

/// One output destination.
#[derive(Debug, Clone, PartialEq)]
pub enum Sink {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
    /// A JSON Lines file, created (with its directory) or truncated at start.
    File(PathBuf),
    /// Discarded (benchmarks).
    Discard,
    /// Published to a NATS JetStream subject, each record with its id as `Nats-Msg-Id`.
    Nats(NatsSinkSpec),
    /// Produced to a Kafka topic in transactions committed at each checkpoint.
    Kafka(KafkaSinkSpec),
}

/// A Kafka topic to produce records to (`results = { kafka = "host:port", topic = "..." }`):
/// each record's id is its key; partition 0 of the topic, in transactions committed with each
/// checkpoint (or, `transactions = false`, for brokers without them, by an idempotent
/// producer).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkSpec {
    /// The brokers, `host:port[,host:port...]`.
    pub kafka: String,
    /// The topic.
    pub topic: String,
    /// In transactions (the default), or not: for brokers that have none, whose consumers see
    /// a record produced again after a crash twice (under the same key, its id).
    #[serde(default = "in_transactions")]
    pub transactions: bool,
    /// The partition written: 0, or a shared pipeline's slice's own (each slice writes its own,
    /// under a transactional id of its own). Never from a spec.
    #[serde(skip)]
    pub partition: i32,
    /// Where a run without a checkpoint reads back what runs before it committed (a shared
    /// pipeline's slice taken before any of its checkpoints was uploaded: 0, its partition's
    /// start, as a killed first owner may have committed records and no checkpoint). Never
    /// from a spec.
    #[serde(skip)]
    pub read_back_from: Option<u64>,
}

fn in_transactions() -> bool {
    true
}

/// A NATS subject to publish results to (`results = { nats = "nats://...", subject = "..." }`),
/// whose stream de-duplicates on the results' ids.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsSinkSpec {
    /// The server, `nats://host:port`.
    pub nats: String,
    /// The subject.
    pub subject: String,
}

/// The `[sinks]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSinks {
    pub(super) results: Option<RawSink>,
    pub(super) late: Option<RawSink>,
    pub(super) dead_letters: Option<RawSink>,
}

/// A sink: a file path, `stdout`, `stderr` or `discard`, or a NATS subject.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum RawSink {
    Named(String),
    Nats(NatsSinkSpec),
    Kafka(KafkaSinkSpec),
}

/// Checks the `[sinks]`: results go to standard output and late events and dead letters to
/// standard error unless the spec says otherwise; files are relative to `base`, and no two
/// sinks write the same one.
pub(super) fn check(raw: RawSinks, base: &Path) -> Result<SinksSpec> {
    let sinks = SinksSpec {
        results: sink("results", raw.results, Sink::Stdout, base)?,
        late: sink("late", raw.late, Sink::Stderr, base)?,
        dead_letters: sink("dead_letters", raw.dead_letters, Sink::Stderr, base)?,
    };
    sinks.check_distinct()?;
    Ok(sinks)
}

/// Checks one sink, `sinks.{field}`; `default` when the spec leaves it out.
fn sink(field: &str, raw: Option<RawSink>, default: Sink, base: &Path) -> Result<Sink> {
    let raw = match raw {
        Some(RawSink::Nats(nats)) => {
            check_nats(&format!("sinks.{field}"), &nats.nats, &[&nats.subject])?;
            if nats.subject.contains(['*', '>']) {
                return Err(invalid(format!(
                    "sinks.{field}: results are published to one subject, without wildcards"
                )));
            }
            return Ok(Sink::Nats(nats));
        }
        Some(RawSink::Kafka(kafka)) => {
            super::source::check_kafka(&format!("sinks.{field}"), &kafka.kafka, &kafka.topic)?;
            return Ok(Sink::Kafka(kafka));
        }
        Some(RawSink::Named(name)) => Some(name),
        None => None,
    };
    Ok(match raw.as_deref() {
        None => default,
        Some("stdout") | Some("-") => Sink::Stdout,
        Some("stderr") => Sink::Stderr,
        Some("discard") => Sink::Discard,
        Some("") => {
            return Err(invalid(format!(
                "sinks.{field} must name a file, stdout, stderr or discard"
            )));
        }
        Some(path) => Sink::File(base.join(path)),
    })
}
