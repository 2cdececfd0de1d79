//! Sinks: where JSON Lines go (standard output, standard error, a file, a NATS subject, or
//! nowhere).
//!
//! A file sink is exactly-once across crashes by truncate-to-committed: records are appended
//! as they are produced; each checkpoint syncs the file and records its length; a restarted
//! pipeline cuts the file back to the committed length and replays from the committed input
//! position, which reproduces the same bytes. Readers that must never see uncommitted records
//! read up to the committed length, or de-duplicate on the records' `id`. Standard output and
//! standard error cannot be cut back: across restarts they are at-least-once. A NATS sink
//! publishes each record with its `id` as `Nats-Msg-Id` and waits for every acknowledgement
//! before a checkpoint records its position: the records a restart publishes again are the
//! same, with the same ids, and the stream's de-duplication window drops them. A Kafka sink
//! produces in transactions each checkpoint commits, and records the partition's end offset;
//! a restart reads back what was committed past it and does not produce it twice
//! ([`super::kafka`]).
//!
//! Depends on `spec`.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

use crate::spec::Sink;

/// A sink could not be opened or written.
#[derive(Debug, thiserror::Error)]
#[error("output {target}: {source}")]
pub struct SinkError {
    target: String,
    source: std::io::Error,
}

enum Target {
    Stdout(BufWriter<std::io::Stdout>),
    Stderr(std::io::Stderr),
    File(BufWriter<File>),
    Nats(Box<super::nats::NatsPublisher>),
    Kafka(Box<super::kafka::KafkaPublisher>),
    Discard,
}

/// A record a sink writes as one JSON line: anything serialisable, with the id a NATS sink
/// de-duplicates on (if it has one).
pub trait Record: serde::Serialize {
    /// The record's `id`.
    fn id(&self) -> Option<&str> {
        None
    }
}

impl Record for serde_json::Value {
    fn id(&self) -> Option<&str> {
        self.get("id").and_then(|id| id.as_str())
    }
}

/// An open sink, buffered, that knows how many bytes it has written.
pub struct SinkWriter {
    target: String,
    out: Target,
    records: u64,
    position: u64,
    line: Vec<u8>,
}

impl std::fmt::Debug for SinkWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkWriter")
            .field("target", &self.target)
            .field("position", &self.position)
            .finish()
    }
}

impl SinkWriter {
    /// Opens a sink. A file is created (with its directory) and emptied, or, when `committed`
    /// is given (recovery), cut back to that length; a file shorter than its committed length
    /// was damaged and is refused.
    pub fn open(sink: &Sink, committed: Option<u64>) -> Result<SinkWriter, SinkError> {
        Self::open_as(sink, committed, "weir")
    }

    /// [`Self::open`] for a sink `owner` writes (`<pipeline>-<sink>`): a Kafka sink's
    /// transactional id, the same for every run of the pipeline.
    pub fn open_as(
        sink: &Sink,
        committed: Option<u64>,
        owner: &str,
    ) -> Result<SinkWriter, SinkError> {
        let (target, out) = match sink {
            Sink::Stdout => (
                "standard output".to_owned(),
                Target::Stdout(BufWriter::new(std::io::stdout())),
            ),
            Sink::Stderr => (
                "standard error".to_owned(),
                Target::Stderr(std::io::stderr()),
            ),
            Sink::Discard => ("nowhere".to_owned(), Target::Discard),
            Sink::Nats(nats) => {
                let target = format!("nats subject {} at {}", nats.subject, nats.nats);
                let publisher =
                    super::nats::NatsPublisher::connect(nats).map_err(|e| SinkError {
                        target: target.clone(),
                        source: std::io::Error::other(e),
                    })?;
                (target, Target::Nats(Box::new(publisher)))
            }
            Sink::Kafka(kafka) => {
                let target = format!("kafka topic {} at {}", kafka.topic, kafka.kafka);
                let publisher = super::kafka::KafkaPublisher::connect(kafka, owner, committed)
                    .map_err(|e| SinkError {
                        target: target.clone(),
                        source: std::io::Error::other(e),
                    })?;
                (target, Target::Kafka(Box::new(publisher)))
            }
            Sink::File(path) => {
                let target = path.display().to_string();
                let file = open_file(path, committed).map_err(|source| SinkError {
                    target: target.clone(),
                    source,
                })?;
                (
                    target,
                    Target::File(BufWriter::with_capacity(1 << 16, file)),
                )
            }
        };
        Ok(SinkWriter {
            target,
            out,
            records: 0,
            position: committed.unwrap_or(0),
            line: Vec::with_capacity(256),
        })
    }

    /// Writes one record as a line.
    pub fn write<R: Record + ?Sized>(&mut self, record: &R) -> Result<(), SinkError> {
        self.records += 1;
        self.line.clear();
        serde_json::to_writer(&mut self.line, record).expect("records always serialise");
        self.line.push(b'\n');
        if !matches!(self.out, Target::Kafka(_)) {
            self.position += self.line.len() as u64;
        }
        let result = match &mut self.out {
            Target::Stdout(out) => out.write_all(&self.line),
            Target::Stderr(out) => out.write_all(&self.line),
            Target::File(out) => out.write_all(&self.line),
            Target::Nats(out) => {
                let id = record.id();
                let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
                out.publish(id, line).map_err(std::io::Error::other)
            }
            Target::Kafka(out) => {
                let id = record.id();
                let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
                out.publish(id, line).map_err(std::io::Error::other)
            }
            Target::Discard => Ok(()),
        };
        result.map_err(|source| SinkError {
            target: self.target.clone(),
            source,
        })
    }

    /// The record [`write`](Self::write) wrote last, as its JSON line (without the newline).
    pub fn last_line(&self) -> &str {
        let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
        std::str::from_utf8(line).expect("JSON text is UTF-8")
    }

    /// Records written by this process.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Bytes in the sink, including those committed by earlier runs.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// Flushes buffered output.
    pub fn flush(&mut self) -> Result<(), SinkError> {
        let result = match &mut self.out {
            Target::Stdout(out) => out.flush(),
            Target::Stderr(out) => out.flush(),
            Target::File(out) => out.flush(),
            Target::Nats(out) => out.flush().map_err(std::io::Error::other),
            Target::Kafka(out) => out.flush().map_err(std::io::Error::other),
            Target::Discard => Ok(()),
        };
        result.map_err(|source| SinkError {
            target: self.target.clone(),
            source,
        })
    }

    /// Flushes and, for a file, makes its content durable: called before a checkpoint records
    /// the sink's position.
    pub fn sync(&mut self) -> Result<u64, SinkError> {
        self.flush()?;
        match &mut self.out {
            Target::File(out) => out.get_ref().sync_data().map_err(|source| SinkError {
                target: self.target.clone(),
                source,
            })?,
            Target::Kafka(out) => {
                self.position = out.commit().map_err(|e| SinkError {
                    target: self.target.clone(),
                    source: std::io::Error::other(e),
                })?;
            }
            _ => {}
        }
        Ok(self.position)
    }
}

fn open_file(path: &Path, committed: Option<u64>) -> std::io::Result<File> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let Some(committed) = committed else {
        return File::create(path);
    };
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    let len = file.metadata()?.len();
    if len < committed {
        return Err(std::io::Error::other(format!(
            "the file is {len} bytes but the last checkpoint committed {committed}: it was truncated \
             or replaced since; restore it, or start over with `weir run --fresh`"
        )));
    }
    file.set_len(committed)?;
    file.seek(SeekFrom::End(0))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recovery_cuts_a_file_back_to_its_committed_length() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out/results.jsonl");
        let sink = Sink::File(path.clone());
        let mut writer = SinkWriter::open(&sink, None).unwrap();
        writer.write(&serde_json::json!({"a": 1})).unwrap();
        let committed = writer.sync().unwrap();
        writer.write(&serde_json::json!({"a": 2})).unwrap();
        writer.flush().unwrap();
        drop(writer);
        let mut writer = SinkWriter::open(&sink, Some(committed)).unwrap();
        writer.write(&serde_json::json!({"a": 3})).unwrap();
        writer.flush().unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"a\":1}\n{\"a\":3}\n"
        );
        std::fs::write(&path, "").unwrap();
        let error = SinkWriter::open(&sink, Some(committed)).unwrap_err();
        assert!(
            error.to_string().contains("truncated or replaced"),
            "{error}"
        );
    }
}
