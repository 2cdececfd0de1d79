//! [`LineReader`]: JSON Lines from a file or standard input, with a cap on line length so a
//! line without an end cannot exhaust memory (the rest of an over-long line is skipped, and the
//! line becomes a dead letter when decoded). A file resumes by seeking to a byte offset; other
//! streams (standard input) resume by skipping the lines already processed, so piping the same
//! input again continues where the last checkpoint left off.
//!
//! Depends on nothing outside `source`.

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::SourcePosition;
use super::ingest::{
    ADVANCE_PREFIX, CLOCK_PREFIX, EARLY_LINE, END_LINE, GatedFile, IngestGate, REDRIVE_PREFIX,
};
use super::{Record, Source, SourceError};

/// How long a tailing reader without a gate waits at the end of its file before looking again.
const TAIL_POLL: std::time::Duration = std::time::Duration::from_millis(10);
/// How long a tailing reader with a gate waits for a commit before it yields a tick anyway (so
/// the pipeline can take due checkpoints): long enough that an idle pipeline costs no CPU.
const GATE_WAIT: std::time::Duration = std::time::Duration::from_millis(1_000);

/// Reads lines; blank lines are skipped but counted.
pub struct LineReader {
    name: String,
    input: Box<dyn BufRead + Send>,
    /// The file, if the input is one (it can then seek).
    file: Option<PathBuf>,
    line: u64,
    offset: u64,
    cap: usize,
    /// Tail mode: at the end of the input, wait for more instead of ending.
    tail: bool,
    /// Tail mode: the start of a line whose end has not been written yet.
    partial: Vec<u8>,
    /// Tail mode: read only what the writer committed, and wait for its commits.
    gate: Option<Arc<IngestGate>>,
    /// Gate mode: the last clock line read.
    clock: Option<i64>,
    /// Tail mode: the last record was a tick at the end of the input. The first tick after
    /// new input comes at once, so the pipeline sends what it read without waiting for more;
    /// only the next one waits.
    at_end: bool,
}

impl std::fmt::Debug for LineReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineReader")
            .field("name", &self.name)
            .field("line", &self.line)
            .finish()
    }
}

impl LineReader {
    /// Reads the file at `path`.
    pub fn open(path: &Path, cap: usize) -> Result<LineReader, SourceError> {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| SourceError::new(&name, e))?;
        let mut reader = Self::new(name, Box::new(BufReader::with_capacity(1 << 16, file)), cap);
        reader.file = Some(path.to_owned());
        Ok(reader)
    }

    /// Follows the file at `path` like `tail -f`: at its end, yields [`Record::Tick`] and
    /// waits for more lines; a line only counts once its newline is written. The file is
    /// created if missing.
    ///
    /// With a `gate` (an [`IngestLog`](super::IngestLog) of this process writes the file), only
    /// committed bytes are read, clock lines become [`Record::Clock`], and the reader sleeps
    /// until the next commit rather than polling.
    pub fn tail(
        path: &Path,
        cap: usize,
        gate: Option<Arc<IngestGate>>,
    ) -> Result<LineReader, SourceError> {
        let name = path.display().to_string();
        let mut reader = Self::new(name.clone(), Box::new(std::io::empty()), cap);
        reader.file = Some(path.to_owned());
        reader.tail = true;
        if gate.is_none() {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| SourceError::new(&name, e))?;
        }
        reader.gate = gate;
        match reader.reopen_at(0) {
            // An ingest log whose first segments were deleted after a checkpoint: the pipeline
            // resumes from that checkpoint's offset, beyond them.
            Err(e) if reader.gate.is_some() && e.is_not_found() => Ok(reader),
            other => other.map(|()| reader),
        }
    }

    /// Reads the file from `offset` on (through the gate, if there is one).
    fn reopen_at(&mut self, offset: u64) -> Result<(), SourceError> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let fail = |error| SourceError::new(&self.name, error);
        self.input = match &self.gate {
            Some(gate) => Box::new(BufReader::with_capacity(
                1 << 16,
                GatedFile::open_at(path, offset, gate.clone()).map_err(fail)?,
            )),
            None => {
                let mut file = std::fs::File::open(path).map_err(fail)?;
                file.seek(SeekFrom::Start(offset)).map_err(fail)?;
                Box::new(BufReader::with_capacity(1 << 16, file))
            }
        };
        self.partial.clear();
        self.offset = offset;
        Ok(())
    }

    /// Reads standard input.
    pub fn stdin(cap: usize) -> LineReader {
        Self::new(
            "standard input".into(),
            Box::new(BufReader::new(std::io::stdin())),
            cap,
        )
    }

    /// Reads any byte stream.
    pub fn new(name: String, input: Box<dyn BufRead + Send>, cap: usize) -> LineReader {
        LineReader {
            name,
            input,
            file: None,
            line: 0,
            offset: 0,
            cap,
            tail: false,
            at_end: false,
            partial: Vec::new(),
            gate: None,
            clock: None,
        }
    }

    /// Reads one line into `out`, keeping at most `cap + 1` bytes (so an over-long line is
    /// still recognisable as such). Returns false at the end of input. In tail mode a line
    /// without its newline yet is kept in `partial` and reported as the end of input.
    fn read_line(&mut self, out: &mut Vec<u8>) -> std::io::Result<bool> {
        out.clear();
        out.append(&mut self.partial);
        let mut any = !out.is_empty();
        loop {
            let buf = self.input.fill_buf()?;
            if buf.is_empty() {
                if self.tail {
                    self.partial.append(out);
                    return Ok(false);
                }
                return Ok(any);
            }
            any = true;
            let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
                Some(i) => (&buf[..i], i + 1),
                None => (buf, buf.len()),
            };
            let room = (self.cap + 1).saturating_sub(out.len());
            out.extend_from_slice(&chunk[..chunk.len().min(room)]);
            let newline = done > chunk.len();
            self.input.consume(done);
            self.offset += done as u64;
            if newline {
                return Ok(true);
            }
        }
    }
}

impl Source for LineReader {
    fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        let mut bytes = Vec::new();
        loop {
            let more = self
                .read_line(&mut bytes)
                .map_err(|e| SourceError::new(&self.name, e))?;
            if !more && self.tail {
                if self.at_end {
                    match &self.gate {
                        Some(gate) => gate.wait_beyond(self.offset, GATE_WAIT),
                        None => std::thread::sleep(TAIL_POLL),
                    }
                }
                self.at_end = true;
                return Ok(Some(Record::Tick));
            }
            self.at_end = false;
            if !more {
                return Ok(None);
            }
            self.line += 1;
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
            if bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if self.gate.is_some() && bytes == END_LINE {
                continue;
            }
            if self.gate.is_some() && bytes == EARLY_LINE {
                return Ok(Some(Record::Early));
            }
            if self.gate.is_some()
                && let Some(rest) = bytes.strip_prefix(REDRIVE_PREFIX)
            {
                return Ok(Some(Record::Redrive(redriven_key(rest))));
            }
            if self.gate.is_some()
                && let Some(ms) = bytes.strip_prefix(ADVANCE_PREFIX)
            {
                let ms = std::str::from_utf8(ms).ok().and_then(|ms| ms.parse().ok());
                return Ok(Some(Record::Advance(ms.unwrap_or(0))));
            }
            if self.gate.is_some()
                && let Some(ms) = bytes.strip_prefix(CLOCK_PREFIX)
            {
                // `<ms>` or `<ms> partition=<name>`.
                let text = std::str::from_utf8(ms).unwrap_or("");
                let (ms, partition) = match text.split_once(' ') {
                    Some((ms, rest)) => (ms, rest.strip_prefix("partition=")),
                    None => (text, None),
                };
                let ms = ms.parse().unwrap_or(i64::MAX);
                self.clock = Some(ms);
                return Ok(Some(Record::Clock(ms, partition.map(Into::into))));
            }
            return Ok(Some(Record::Line(self.line, bytes)));
        }
    }

    fn position(&self) -> SourcePosition {
        // A partial line is read again after a restart.
        SourcePosition {
            line: self.line,
            offset: self.offset - self.partial.len() as u64,
            rng: None,
            clock: self.clock,
            ..SourcePosition::default()
        }
    }

    fn resume(&mut self, position: &SourcePosition) -> Result<(), SourceError> {
        let fail = |error| SourceError::new(&self.name, error);
        if let Some(path) = &self.file {
            // An ingest log is as long as its gate says (over all its segments).
            let len = match &self.gate {
                Some(gate) => gate.committed(),
                None => {
                    let file = std::fs::File::open(path).map_err(fail)?;
                    file.metadata().map_err(fail)?.len()
                }
            };
            if len < position.offset {
                return Err(fail(std::io::Error::other(format!(
                    "the file is {len} bytes, shorter than the checkpoint's position {}: \
                     it was replaced or truncated",
                    position.offset
                ))));
            }
            self.reopen_at(position.offset)?;
            self.line = position.line;
            self.clock = position.clock;
            return Ok(());
        }
        let mut skipped = Vec::new();
        while self.line < position.line {
            if !self
                .read_line(&mut skipped)
                .map_err(|e| SourceError::new(&self.name, e))?
            {
                break;
            }
            self.line += 1;
        }
        Ok(())
    }
}

/// The key of a redrive line's rest: ` key=<JSON text>`, or nothing for every key (a key that
/// cannot be read names none, and re-drives nothing).
fn redriven_key(rest: &[u8]) -> Option<std::sync::Arc<str>> {
    let text = std::str::from_utf8(rest).ok()?.trim_start();
    if text.is_empty() {
        return None;
    }
    let key: String = text
        .strip_prefix("key=")
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_default();
    Some(key.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &'static [u8], cap: usize) -> Vec<(u64, Vec<u8>)> {
        let mut reader = LineReader::new("test".into(), Box::new(text), cap);
        let mut out = Vec::new();
        while let Some(Record::Line(n, bytes)) = reader.next_record().unwrap() {
            out.push((n, bytes));
        }
        out
    }

    #[test]
    fn numbers_lines_and_skips_blank_ones() {
        let got = lines(b"a\n\nb\r\nc", 100);
        assert_eq!(
            got,
            vec![(1, b"a".to_vec()), (3, b"b".to_vec()), (4, b"c".to_vec())]
        );
    }

    #[test]
    fn a_tailing_reader_waits_for_the_end_of_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        let mut reader = LineReader::tail(&path, 100, None).unwrap();
        assert!(matches!(reader.next_record().unwrap(), Some(Record::Tick)));
        std::fs::write(&path, "first\nsec").unwrap();
        assert!(matches!(reader.next_record().unwrap(), Some(Record::Line(1, l)) if l == b"first"));
        assert!(matches!(reader.next_record().unwrap(), Some(Record::Tick)));
        assert_eq!(
            reader.position().offset,
            6,
            "the partial line is not consumed yet"
        );
        std::fs::write(&path, "first\nsecond\n").unwrap();
        assert!(
            matches!(reader.next_record().unwrap(), Some(Record::Line(2, l)) if l == b"second")
        );
        assert_eq!(reader.position().offset, 13);
    }

    #[test]
    fn truncates_over_long_lines_just_past_the_cap() {
        let got = lines(b"0123456789\nok\n", 4);
        assert_eq!(got, vec![(1, b"01234".to_vec()), (2, b"ok".to_vec())]);
    }
}
