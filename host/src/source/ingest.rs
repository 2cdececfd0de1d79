//! [`IngestLog`]: the durable log that `weir serve` appends events sent over HTTP to, and that
//! the pipeline tails. A batch is appended whole or not at all, and is on disk (fsync) before
//! the caller is told it was accepted; the [`IngestGate`] lets the reader see only batches that
//! were committed, so no event of a refused batch is ever processed.
//!
//! Each batch starts with a clock line, `#weir ingest_ms=<ms>`: the wall clock when the server
//! accepted it. Tailing readers turn it into [`Record::Clock`](super::Record::Clock), so a check
//! against the wall clock ("too far in the future") gives the same answer on every replay.
//! Event lines never start with `#` (the writer indents such a line, which stays a dead letter).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The prefix of a clock line.
pub const CLOCK_PREFIX: &[u8] = b"#weir ingest_ms=";

/// Why a batch was not appended. Nothing of it is visible to the reader either way.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    /// The file system has no room left.
    #[error("the disk holding the ingest log is full; nothing of this batch was kept")]
    DiskFull,
    /// Writing or syncing failed otherwise.
    #[error("ingest log {path}: {source}; nothing of this batch was kept")]
    Io {
        /// The log.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// How far the log is committed, and a way to wait for more. Shared by the writer and the
/// tailing reader of one pipeline.
#[derive(Debug, Default)]
pub struct IngestGate {
    committed: AtomicU64,
    lock: Mutex<()>,
    more: Condvar,
}

impl IngestGate {
    /// The length of the committed part of the log.
    pub fn committed(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    fn commit(&self, length: u64) {
        let _guard = self.lock.lock().expect("gate lock");
        self.committed.store(length, Ordering::Release);
        self.more.notify_all();
    }

    /// Wakes the reader (a stop request).
    pub fn wake(&self) {
        let _guard = self.lock.lock().expect("gate lock");
        self.more.notify_all();
    }

    /// Waits until the committed length passes `seen`, a wake, or `timeout`.
    pub fn wait_beyond(&self, seen: u64, timeout: Duration) {
        let guard = self.lock.lock().expect("gate lock");
        if self.committed() > seen {
            return;
        }
        let _ = self.more.wait_timeout(guard, timeout).expect("gate lock");
    }
}

/// The writer's side of a pipeline's ingest log.
#[derive(Debug)]
pub struct IngestLog {
    path: PathBuf,
    file: Mutex<File>,
    gate: Arc<IngestGate>,
    #[cfg(debug_assertions)]
    fault: Option<u64>,
}

impl IngestLog {
    /// Opens (or creates) the log. A torn last line (a crash during an append that was never
    /// acknowledged) is cut off, so the next batch starts on a line of its own.
    pub fn open(path: &Path) -> Result<IngestLog, IngestError> {
        let io = |source| IngestError::Io {
            path: path.to_owned(),
            source,
        };
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(io)?;
        let length = complete_length(&mut file).map_err(io)?;
        if file.metadata().map_err(io)?.len() != length {
            file.set_len(length).map_err(io)?;
            file.sync_data().map_err(io)?;
        }
        let gate = Arc::new(IngestGate::default());
        gate.commit(length);
        Ok(IngestLog {
            path: path.to_owned(),
            file: Mutex::new(file),
            gate,
            #[cfg(debug_assertions)]
            fault: std::env::var("WEIR_TEST_INGEST_FAIL_AFTER")
                .ok()
                .and_then(|v| v.parse().ok()),
        })
    }

    /// The gate the pipeline's reader follows.
    pub fn gate(&self) -> Arc<IngestGate> {
        self.gate.clone()
    }

    /// Appends one batch of event lines, stamped with the wall clock `now_ms`, whole and
    /// durably, or not at all.
    pub fn append(&self, now_ms: i64, lines: &[String]) -> Result<(), IngestError> {
        let mut text = Vec::with_capacity(32 + lines.iter().map(|l| l.len() + 2).sum::<usize>());
        text.extend_from_slice(CLOCK_PREFIX);
        text.extend_from_slice(format!("{now_ms}\n").as_bytes());
        for line in lines {
            if line.starts_with('#') {
                text.push(b' ');
            }
            text.extend_from_slice(line.as_bytes());
            text.push(b'\n');
        }
        let mut file = self.file.lock().expect("ingest log lock");
        let start = self.gate.committed();
        match self.write_at(&mut file, start, &text) {
            Ok(()) => {
                self.gate.commit(start + text.len() as u64);
                Ok(())
            }
            Err(source) => {
                // Cut back whatever part of the batch reached the file: the next batch must
                // start where this one did.
                let _ = file.set_len(start);
                let _ = file.sync_data();
                Err(match source.kind() {
                    std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                        IngestError::DiskFull
                    }
                    _ => IngestError::Io {
                        path: self.path.clone(),
                        source,
                    },
                })
            }
        }
    }

    fn write_at(&self, file: &mut File, start: u64, text: &[u8]) -> std::io::Result<()> {
        file.seek(SeekFrom::Start(start))?;
        #[cfg(debug_assertions)]
        if let Some(limit) = self.fault
            && start + text.len() as u64 > limit
        {
            // A test hook standing in for a full disk where no small file system can be made:
            // write part of the batch, then fail as a full disk does.
            let room = limit.saturating_sub(start) as usize;
            file.write_all(&text[..room.min(text.len())])?;
            return Err(std::io::Error::from(std::io::ErrorKind::StorageFull));
        }
        file.write_all(text)?;
        file.sync_data()
    }
}

/// The length of the file up to and including its last newline.
fn complete_length(file: &mut File) -> std::io::Result<u64> {
    let length = file.metadata()?.len();
    let mut end = length;
    let mut buffer = vec![0u8; 64 << 10];
    while end > 0 {
        let start = end.saturating_sub(buffer.len() as u64);
        let chunk = &mut buffer[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(chunk)?;
        if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// A file read only up to the gate's committed length.
pub(super) struct GatedFile {
    pub file: File,
    pub position: u64,
    pub gate: Arc<IngestGate>,
}

impl Read for GatedFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let room = self.gate.committed().saturating_sub(self.position);
        if room == 0 {
            return Ok(0);
        }
        let want = buf.len().min(room as usize);
        let n = self.file.read(&mut buf[..want])?;
        self.position += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_tail_is_cut_when_the_log_is_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ingest.jsonl");
        std::fs::write(&path, "#weir ingest_ms=1\n{\"a\":1}\n{\"a\":").unwrap();
        let log = IngestLog::open(&path).unwrap();
        assert_eq!(log.gate().committed(), 26);
        log.append(5, &["{\"b\":2}".into(), "#x".into()]).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "#weir ingest_ms=1\n{\"a\":1}\n#weir ingest_ms=5\n{\"b\":2}\n #x\n"
        );
    }
}
