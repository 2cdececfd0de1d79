//! [`IngestLog`]: the durable log that `weir serve` appends events sent over HTTP to, and that
//! the pipeline tails. A batch is appended whole or not at all, and is on disk (fsync) before
//! the caller is told it was accepted; the [`IngestGate`] lets the reader see only batches that
//! were committed, so no event of a refused batch is ever processed.
//!
//! Each batch starts with a clock line, `#weir ingest_ms=<ms>`: the wall clock when the server
//! accepted it, and ends with `#weir end`. Tailing readers turn the clock line into
//! [`Record::Clock`](super::Record::Clock), so a check against the wall clock ("too far in the
//! future") gives the same answer on every replay, and skip the end line. When the log is
//! opened, a batch without its end line (the process died while appending it, so it was never
//! acknowledged) is cut off whole. Event lines never start with `#` (the writer indents such a
//! line, which stays a dead letter).
//!
//! The log is a chain of segments: `ingest.jsonl` holds its first bytes, and once the current
//! segment reaches the segment size, the next batch starts a new one, `ingest.jsonl.<offset>`,
//! named by the log offset of its first byte, so offsets (which checkpoints record) never
//! change. Segments wholly before the last checkpoint's offset are deleted
//! ([`IngestLog::truncate_before`]): a replay starts there, so the log's size stays bounded under
//! steady load.
//!
//! A pipeline with `[watermark] advance_when_idle` gets advance batches while its input is
//! quiet: a clock line and `#weir advance_ms=<ms>`, the wall-clock time since the previous
//! batch of any kind. The reader moves the watermark on by that much, so the advance is part of
//! the input and a replay makes the same one at the same place.
//!
//! Depends on `fsutil` and `time`.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// The prefix of a clock line.
pub const CLOCK_PREFIX: &[u8] = b"#weir ingest_ms=";
/// The line that ends a batch.
pub const END_LINE: &[u8] = b"#weir end";
/// The prefix of an advance line: the watermark moves on by the milliseconds that follow.
pub const ADVANCE_PREFIX: &[u8] = b"#weir advance_ms=";
/// An early line: every window that changed since its last emission emits its current result
/// (`[emit] early_interval`).
pub const EARLY_LINE: &[u8] = b"#weir early";
/// The prefix of a redrive line: `#weir redrive key=<JSON text>`, or alone for every key.
pub const REDRIVE_PREFIX: &[u8] = b"#weir redrive";

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

    /// A gate that lets a reader see the first `length` bytes of a log and no more (a replay
    /// of what was committed when it began).
    pub fn fixed(length: u64) -> Arc<IngestGate> {
        let gate = IngestGate::default();
        gate.committed.store(length, Ordering::Release);
        Arc::new(gate)
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

/// The file of a log's segment that starts at log offset `base`.
pub fn segment_path(log: &Path, base: u64) -> PathBuf {
    match base {
        0 => log.to_owned(),
        _ => {
            let name = log
                .file_name()
                .map_or_else(Default::default, |n| n.to_string_lossy());
            log.with_file_name(format!("{name}.{base}"))
        }
    }
}

/// A log's segments that exist, as `(base offset, file)`, ascending.
pub fn segments(log: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let name = log
        .file_name()
        .map_or_else(Default::default, |n| n.to_string_lossy());
    let prefix = format!("{name}.");
    let dir = log
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut found = Vec::new();
    if log.exists() {
        found.push((0, log.to_owned()));
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let file_name = entry.file_name();
        let base = (file_name.to_str())
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|b| b.parse::<u64>().ok());
        if let Some(base) = base.filter(|b| *b > 0) {
            found.push((base, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// The segment being written: its file and the log offset of its first byte.
#[derive(Debug)]
struct Segment {
    file: File,
    base: u64,
}

/// The writer's side of a pipeline's ingest log.
#[derive(Debug)]
pub struct IngestLog {
    path: PathBuf,
    segment_size: u64,
    file: Mutex<Segment>,
    gate: Arc<IngestGate>,
    /// The wall clock (ms) of the last batch of events or advance appended (or of opening the
    /// log): what idleness is measured from.
    last_append: AtomicI64,
    /// The wall clock (ms) of the last batch of events appended.
    last_events: AtomicI64,
    /// The wall clock (ms) of the last early line appended.
    last_early: AtomicI64,
    #[cfg(debug_assertions)]
    fault: Option<u64>,
}

impl IngestLog {
    /// Opens (or creates) the log, whose segments start a new file once they hold
    /// `segment_size` bytes. A batch without its end line (a crash during an append that was
    /// never acknowledged) is cut off whole, so none of its events is ever read and the next
    /// batch starts on a line of its own.
    pub fn open(path: &Path, segment_size: u64) -> Result<IngestLog, IngestError> {
        let io = |source| IngestError::Io {
            path: path.to_owned(),
            source,
        };
        let (base, last) = segments(path)
            .map_err(io)?
            .pop()
            .unwrap_or_else(|| (0, path.to_owned()));
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&last)
            .map_err(io)?;
        let length = complete_length(&mut file).map_err(io)?;
        if file.metadata().map_err(io)?.len() != length {
            file.set_len(length).map_err(io)?;
            file.sync_data().map_err(io)?;
        }
        let gate = Arc::new(IngestGate::default());
        gate.commit(base + length);
        Ok(IngestLog {
            path: path.to_owned(),
            segment_size: segment_size.max(1),
            file: Mutex::new(Segment { file, base }),
            gate,
            last_append: AtomicI64::new(crate::time::wall_clock_ms() as i64),
            last_events: AtomicI64::new(i64::MIN),
            last_early: AtomicI64::new(i64::MIN),
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

    /// Appends one batch of event lines, stamped with the wall clock `now_ms` and the watermark
    /// partition the producer named (already checked: a name without spaces), whole and
    /// durably, or not at all.
    pub fn append(
        &self,
        now_ms: i64,
        partition: Option<&str>,
        lines: &[&str],
    ) -> Result<(), IngestError> {
        let mut text = Vec::with_capacity(48 + lines.iter().map(|l| l.len() + 2).sum::<usize>());
        text.extend_from_slice(CLOCK_PREFIX);
        match partition {
            Some(partition) => {
                text.extend_from_slice(format!("{now_ms} partition={partition}\n").as_bytes())
            }
            None => text.extend_from_slice(format!("{now_ms}\n").as_bytes()),
        }
        for line in lines {
            if line.starts_with('#') {
                text.push(b' ');
            }
            text.extend_from_slice(line.as_bytes());
            text.push(b'\n');
        }
        text.extend_from_slice(END_LINE);
        text.push(b'\n');
        let file = self.file.lock().expect("ingest log lock");
        self.write_batch(file, &text)?;
        self.last_append.fetch_max(now_ms, Ordering::AcqRel);
        self.last_events.fetch_max(now_ms, Ordering::AcqRel);
        Ok(())
    }

    /// Appends a redrive batch: a line per key of `keys` (`None`: one line for every key),
    /// read by the pipeline at that place in its input, on every replay alike.
    pub fn append_redrive(&self, now_ms: i64, keys: Option<&[String]>) -> Result<(), IngestError> {
        let mut text = Vec::with_capacity(64);
        text.extend_from_slice(CLOCK_PREFIX);
        text.extend_from_slice(format!("{now_ms}\n").as_bytes());
        match keys {
            None => {
                text.extend_from_slice(REDRIVE_PREFIX);
                text.push(b'\n');
            }
            Some(keys) => {
                for key in keys {
                    text.extend_from_slice(REDRIVE_PREFIX);
                    let json = serde_json::Value::String(key.clone()).to_string();
                    text.extend_from_slice(format!(" key={json}\n").as_bytes());
                }
            }
        }
        text.extend_from_slice(END_LINE);
        text.push(b'\n');
        let file = self.file.lock().expect("ingest log lock");
        self.write_batch(file, &text)?;
        Ok(())
    }

    /// Appends an early line if events came since the last one and `interval` ms have passed
    /// since it by the wall clock `now_ms`. Returns whether it did.
    pub fn append_early(&self, now_ms: i64, interval: i64) -> Result<bool, IngestError> {
        let file = self.file.lock().expect("ingest log lock");
        let last = self.last_early.load(Ordering::Acquire);
        if now_ms.saturating_sub(last) < interval
            || self.last_events.load(Ordering::Acquire) <= last
        {
            return Ok(false);
        }
        let mut text = Vec::with_capacity(64);
        text.extend_from_slice(CLOCK_PREFIX);
        text.extend_from_slice(format!("{now_ms}\n").as_bytes());
        for line in [EARLY_LINE, END_LINE] {
            text.extend_from_slice(line);
            text.push(b'\n');
        }
        self.write_batch(file, &text)?;
        self.last_early.store(now_ms, Ordering::Release);
        Ok(true)
    }

    /// Appends an advance batch if nothing was appended for `idle` ms by the wall clock
    /// `now_ms`: the watermark is to move on by the time since the last batch. Returns that
    /// time, or `None` if the input was not idle that long.
    pub fn append_advance(&self, now_ms: i64, idle: i64) -> Result<Option<i64>, IngestError> {
        let file = self.file.lock().expect("ingest log lock");
        let quiet = now_ms.saturating_sub(self.last_append.load(Ordering::Acquire));
        if quiet < idle {
            return Ok(None);
        }
        let mut text = Vec::with_capacity(64);
        for line in [CLOCK_PREFIX, ADVANCE_PREFIX] {
            text.extend_from_slice(line);
            let value = if line == CLOCK_PREFIX { now_ms } else { quiet };
            text.extend_from_slice(format!("{value}\n").as_bytes());
        }
        text.extend_from_slice(END_LINE);
        text.push(b'\n');
        self.write_batch(file, &text)?;
        self.last_append.fetch_max(now_ms, Ordering::AcqRel);
        Ok(Some(quiet))
    }

    /// Deletes the segments that end at or before log offset `offset` (the last checkpoint's:
    /// a replay starts there), never the one being written. Returns the bytes freed.
    pub fn truncate_before(&self, offset: u64) -> Result<u64, IngestError> {
        let _writing = self.file.lock().expect("ingest log lock");
        let io = |source| IngestError::Io {
            path: self.path.clone(),
            source,
        };
        let all = segments(&self.path).map_err(io)?;
        let mut freed = 0;
        for pair in all.windows(2) {
            let ((_, file), (next_base, _)) = (&pair[0], &pair[1]);
            if *next_base > offset {
                break;
            }
            freed += std::fs::metadata(file).map_or(0, |m| m.len());
            std::fs::remove_file(file).map_err(io)?;
        }
        Ok(freed)
    }

    /// Bytes of the log on disk (every segment).
    pub fn disk_bytes(&self) -> u64 {
        let all = segments(&self.path).unwrap_or_default();
        all.iter()
            .map(|(_, file)| std::fs::metadata(file).map_or(0, |m| m.len()))
            .sum()
    }

    /// Starts a new segment at log offset `start` once the current one is full.
    fn roll_if_full(&self, segment: &mut Segment, start: u64) -> std::io::Result<()> {
        if start - segment.base < self.segment_size {
            return Ok(());
        }
        let path = segment_path(&self.path, start);
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        *segment = Segment { file, base: start };
        Ok(())
    }

    /// Writes one framed batch at the end of the committed log, durably, and commits it; or
    /// cuts back whatever part of it reached the file.
    fn write_batch(
        &self,
        mut segment: std::sync::MutexGuard<'_, Segment>,
        text: &[u8],
    ) -> Result<(), IngestError> {
        let start = self.gate.committed();
        if let Err(source) = self.roll_if_full(&mut segment, start) {
            return Err(self.io_error(source));
        }
        let base = segment.base;
        match self.write_at(&mut segment.file, start - base, text) {
            Ok(()) => {
                self.gate.commit(start + text.len() as u64);
                Ok(())
            }
            Err(source) => {
                // Cut back whatever part of the batch reached the file: the next batch must
                // start where this one did.
                let _ = segment.file.set_len(start - base);
                let _ = segment.file.sync_data();
                Err(self.io_error(source))
            }
        }
    }

    /// A failed write of the log: a full disk told apart.
    fn io_error(&self, source: std::io::Error) -> IngestError {
        if crate::fsutil::is_disk_full(&source) {
            IngestError::DiskFull
        } else {
            IngestError::Io {
                path: self.path.clone(),
                source,
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

/// The length of the file up to the end of its last complete batch: after the last end line,
/// so a batch after it without its own end line is cut off whole. A log without any end line
/// (an earlier Weir's, whose batches had none) is cut only to its last newline: its batches
/// were acknowledged whole, and none of them may be taken for a torn one.
fn complete_length(file: &mut File) -> std::io::Result<u64> {
    let full = file.metadata()?.len();
    let mut length = full;
    while let Some(offset) = last_line_starting_with_hash(file, length)? {
        let mut line = [0u8; 32];
        file.seek(SeekFrom::Start(offset))?;
        let n = read_up_to(file, &mut line[..((length - offset) as usize).min(32)])?;
        let line = &line[..n];
        if line.starts_with(END_LINE) && line.get(END_LINE.len()) == Some(&b'\n') {
            return Ok(offset + END_LINE.len() as u64 + 1);
        }
        length = offset; // a clock line or a torn control line: the batch goes
    }
    last_newline(file, full)
}

fn read_up_to(file: &mut File, buffer: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buffer.len() {
        match file.read(&mut buffer[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// Calls `found` on chunks of `[0, length)` from the end, each with its offset; stops at the
/// first `Some`.
fn scan_back(
    file: &mut File,
    length: u64,
    mut found: impl FnMut(u64, &[u8]) -> Option<u64>,
) -> std::io::Result<Option<u64>> {
    let mut buffer = vec![0u8; 64 << 10];
    let mut end = length;
    while end > 0 {
        // One byte of overlap, so a line start at a chunk's first byte sees the byte before it.
        let start = end.saturating_sub(buffer.len() as u64 - 1);
        let from = start.saturating_sub(1);
        let chunk = &mut buffer[..(end - from) as usize];
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(chunk)?;
        if let Some(at) = found(from, chunk) {
            return Ok(Some(at));
        }
        end = start;
    }
    Ok(None)
}

/// The offset of the last line (before `length`) that starts with `#`: a control line, since
/// event lines never do.
fn last_line_starting_with_hash(file: &mut File, length: u64) -> std::io::Result<Option<u64>> {
    scan_back(file, length, |from, chunk| {
        (0..chunk.len()).rev().find_map(|i| {
            let at = from + i as u64;
            let starts_line = at == 0 || (i > 0 && chunk[i - 1] == b'\n');
            (chunk[i] == b'#' && starts_line).then_some(at)
        })
    })
}

/// The length up to and including the last newline before `length`.
fn last_newline(file: &mut File, length: u64) -> std::io::Result<u64> {
    let found = scan_back(file, length, |from, chunk| {
        chunk
            .iter()
            .rposition(|b| *b == b'\n')
            .map(|i| from + i as u64 + 1)
    })?;
    Ok(found.unwrap_or(0))
}

/// A log read only up to the gate's committed length, segment after segment.
pub(super) struct GatedFile {
    log: PathBuf,
    file: File,
    position: u64,
    gate: Arc<IngestGate>,
}

impl GatedFile {
    /// The log at `log`, read from log offset `offset` on.
    pub(super) fn open_at(log: &Path, offset: u64, gate: Arc<IngestGate>) -> std::io::Result<Self> {
        let Some((base, path)) = segments(log)?
            .into_iter()
            .rfind(|(base, _)| *base <= offset)
        else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("the ingest log before offset {offset} was deleted after a checkpoint"),
            ));
        };
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(offset - base))?;
        Ok(GatedFile {
            log: log.to_owned(),
            file,
            position: offset,
            gate,
        })
    }
}

impl Read for GatedFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let room = self.gate.committed().saturating_sub(self.position);
            if room == 0 {
                return Ok(0);
            }
            let want = buf.len().min(room as usize);
            let n = self.file.read(&mut buf[..want])?;
            if n > 0 {
                self.position += n as u64;
                return Ok(n);
            }
            // The end of a full segment, with committed bytes beyond: they are in the next one,
            // which starts here.
            self.file = File::open(segment_path(&self.log, self.position))?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(content: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ingest.jsonl");
        std::fs::write(&path, content).unwrap();
        let log = IngestLog::open(&path, 1 << 20).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(log.gate().committed(), text.len() as u64);
        text
    }

    #[test]
    fn a_batch_without_its_end_is_cut_whole_when_the_log_is_opened() {
        let whole = "#weir ingest_ms=1\n{\"a\":1}\n#weir end\n";
        assert_eq!(opened(whole), whole);
        for torn in [
            "#weir ingest_ms=2\n",
            "#weir ingest_ms=2\n{\"b\":1}\n",
            "#weir ingest_ms=2\n{\"b\":1}\n{\"b\":",
            "#weir ingest_ms=2\n{\"b\":1}\n#weir e",
            "#weir ingest_ms=2\n{\"b\":1}\n#weir end",
            "#weir ing",
        ] {
            assert_eq!(opened(&format!("{whole}{torn}")), whole, "{torn:?}");
        }
        // Logs of an earlier Weir, without end lines (with or without clock lines): every
        // batch in them was acknowledged, so only a torn last line is cut.
        let clocks = "#weir ingest_ms=2\n{\"b\":1}\n#weir ingest_ms=3\n{\"b\":2}\n";
        assert_eq!(opened(&format!("{clocks}{{\"b\"")), clocks);
        assert_eq!(opened("{\"a\":1}\n{\"a\""), "{\"a\":1}\n");
    }

    #[test]
    fn a_batch_larger_than_the_scan_window_is_found_whole() {
        let big = format!("{{\"a\":\"{}\"}}\n", "x".repeat(100_000));
        let whole = format!("#weir ingest_ms=1\n{big}{big}#weir end\n");
        assert_eq!(opened(&whole), whole);
        let torn = format!("{whole}#weir ingest_ms=2\n{big}{big}");
        assert_eq!(opened(&torn), whole);
    }

    #[test]
    fn appends_are_framed_and_indent_lines_that_look_like_control_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ingest.jsonl");
        let log = IngestLog::open(&path, 1 << 20).unwrap();
        log.append(5, None, &["{\"b\":2}", "#weir end"]).unwrap();
        log.append(6, Some("eu-1"), &["{\"c\":3}"]).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "#weir ingest_ms=5\n{\"b\":2}\n #weir end\n#weir end\n\
             #weir ingest_ms=6 partition=eu-1\n{\"c\":3}\n#weir end\n"
        );
    }
    #[test]
    fn segments_roll_are_read_across_and_are_deleted_behind_a_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ingest.jsonl");
        let log = IngestLog::open(&path, 100).unwrap();
        let lines: Vec<String> = (0..20).map(|i| format!("{{\"n\":{i}}}")).collect();
        for chunk in lines.chunks(3) {
            let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
            log.append(1, None, &chunk).unwrap();
        }
        let all = segments(&path).unwrap();
        assert!(all.len() > 3, "{all:?}");
        let read_from = |offset: u64| {
            let mut text = String::new();
            GatedFile::open_at(&path, offset, log.gate())
                .unwrap()
                .read_to_string(&mut text)
                .unwrap();
            text
        };
        let whole = read_from(0);
        assert_eq!(whole.len() as u64, log.gate().committed());
        for n in 0..20 {
            assert!(whole.contains(&format!("{{\"n\":{n}}}\n")), "{whole}");
        }
        // Behind a checkpoint in the third segment, the first two go; reading from there is
        // unchanged, and the writer goes on.
        let checkpoint = all[2].0 + 5;
        let freed = log.truncate_before(checkpoint).unwrap();
        assert!(freed > 0);
        assert_eq!(segments(&path).unwrap()[0].0, all[2].0);
        assert_eq!(read_from(checkpoint), whole[checkpoint as usize..]);
        assert!(GatedFile::open_at(&path, 0, log.gate()).is_err());
        log.append(2, None, &["{\"n\":20}"]).unwrap();
        drop(log);
        // Reopened, the log continues at the same length.
        let reopened = IngestLog::open(&path, 100).unwrap();
        assert_eq!(reopened.gate().committed() as usize, whole.len() + 37);
    }
}
