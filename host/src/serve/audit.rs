//! [`AuditLog`]: who changed what on the server. Every state-changing call of the API (not
//! ingest, which is data, not a change of the server's configuration) is appended, once it is
//! answered and before the answer leaves, as one JSON line to `audit.jsonl` in the data
//! directory and synced, so a call the caller saw acknowledged is on record after any crash.
//! The log is bounded: past [`MAX_BYTES`] it is rotated to `audit.1.jsonl` (the one before
//! that is dropped), so it holds between one and two files' worth of the latest records.
//!
//! A refusal (a known token beyond its scope) is written without the sync, so a flood of them
//! costs no disk flushes; paths are kept to [`MAX_PATH`] bytes, so no caller's record is large.
//!
//! Depends on `fsutil`.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// The size at which the log is rotated.
pub const MAX_BYTES: u64 = 16 << 20;
/// The most records one read returns.
pub const MAX_READ: usize = 10_000;
/// The longest path kept in a record, in bytes (longer ones are cut, and end in `...`).
pub const MAX_PATH: usize = 256;

/// One call on record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// When it was answered, ms since the epoch.
    pub at_ms: u64,
    /// The token's name (never the token).
    pub who: String,
    /// `POST`, `DELETE`, ...
    pub method: String,
    /// The route's template (`/v1/pipelines/{name}/rollout`).
    pub route: String,
    /// The path called (`/v1/pipelines/clicks/rollout`): its target.
    pub path: String,
    /// The answer's status.
    pub status: u16,
    /// The caller's tenant, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// The server's audit log.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    rotated: PathBuf,
    file: Mutex<(File, u64)>,
}

impl AuditLog {
    /// Opens (or creates) the log in `dir`.
    pub fn open(dir: &Path) -> std::io::Result<AuditLog> {
        let path = dir.join("audit.jsonl");
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&path)?;
        let mut size = file.metadata()?.len();
        if size > 0 && !ends_with_newline(&mut file, size)? {
            // A line a crash cut short ends here, so the next record starts a line of its own.
            file.write_all(b"\n")?;
            size += 1;
        }
        Ok(AuditLog {
            rotated: dir.join("audit.1.jsonl"),
            path,
            file: Mutex::new((file, size)),
        })
    }

    /// Appends `record`, synced when `durable`; rotates first when the log is full. A write
    /// that fails halfway is cut back off, so the next record starts whole.
    pub fn append(&self, record: &AuditRecord, durable: bool) -> std::io::Result<()> {
        let mut record = record.clone();
        if record.path.len() > MAX_PATH {
            let mut end = MAX_PATH;
            while !record.path.is_char_boundary(end) {
                end -= 1;
            }
            record.path = format!("{}...", &record.path[..end]);
        }
        let mut line = serde_json::to_vec(&record).expect("a record serialises");
        line.push(b'\n');
        let mut file = self.file.lock().expect("audit lock");
        if file.1 + line.len() as u64 > MAX_BYTES {
            self.rotate(&mut file)?;
        }
        let written = file.0.write_all(&line).and_then(|()| match durable {
            true => file.0.sync_data(),
            false => Ok(()),
        });
        if let Err(error) = written {
            let _ = file.0.set_len(file.1);
            return Err(error);
        }
        file.1 += line.len() as u64;
        metrics::counter!("weir_audit_records_total").increment(1);
        Ok(())
    }

    /// Moves the full log aside (dropping the one before) and starts a new one, durably; a
    /// rotation cut short is finished by the next.
    fn rotate(&self, file: &mut (File, u64)) -> std::io::Result<()> {
        match crate::fsutil::rename_durably(&self.path, &self.rotated) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let fresh = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(&self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        *file = (fresh, 0);
        Ok(())
    }

    /// The latest `limit` records (at most [`MAX_READ`]), oldest first. A line that cannot be
    /// read (cut by a crash mid-write) is skipped.
    pub fn latest(&self, limit: usize) -> std::io::Result<Vec<AuditRecord>> {
        let limit = limit.min(MAX_READ);
        // Read without the writers' lock: a record appended meanwhile may be left out.
        let mut records = std::collections::VecDeque::with_capacity(limit);
        for path in [&self.rotated, &self.path] {
            let file = match File::open(path) {
                Ok(file) => file,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            for line in BufReader::new(file).split(b'\n') {
                let Ok(record) = serde_json::from_slice::<AuditRecord>(&line?) else {
                    continue;
                };
                if records.len() == limit {
                    records.pop_front();
                }
                records.push_back(record);
            }
        }
        Ok(records.into())
    }
}

/// Whether the file of `size` bytes ends with a newline.
fn ends_with_newline(file: &mut File, size: u64) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    let mut last = [0u8];
    file.seek(SeekFrom::Start(size - 1))?;
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: u64) -> AuditRecord {
        AuditRecord {
            at_ms: i,
            who: "admin".into(),
            method: "POST".into(),
            route: "/v1/pipelines".into(),
            path: "/v1/pipelines".into(),
            status: 201,
            tenant: None,
        }
    }

    #[test]
    fn records_are_kept_across_reopening_and_read_latest_last() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::open(dir.path()).unwrap();
        for i in 0..5 {
            log.append(&record(i), true).unwrap();
        }
        drop(log);
        // A line cut by a crash is skipped, and what follows is read.
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.path().join("audit.jsonl"))
            .unwrap();
        file.write_all(b"{\"at_ms\": 9, \"who\"").unwrap();
        let log = AuditLog::open(dir.path()).unwrap();
        log.append(&record(5), true).unwrap();
        let latest = log.latest(3).unwrap();
        assert_eq!(
            latest.iter().map(|r| r.at_ms).collect::<Vec<_>>(),
            [3, 4, 5]
        );
        assert_eq!(log.latest(100).unwrap().len(), 6);
    }
}
