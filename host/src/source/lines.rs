//! [`LineReader`]: JSON Lines from a file or standard input, with a cap on line length so a
//! line without an end cannot exhaust memory (the rest of an over-long line is skipped, and the
//! line becomes a dead letter when decoded). A file resumes by seeking to a byte offset; other
//! streams (standard input) resume by skipping the lines already processed, so piping the same
//! input again continues where the last checkpoint left off.

use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::{Record, Source, SourceError};
use crate::checkpoint::SourcePosition;

/// Reads lines; blank lines are skipped but counted.
pub struct LineReader {
    name: String,
    input: Box<dyn BufRead + Send>,
    /// The file, if the input is one (it can then seek).
    file: Option<PathBuf>,
    line: u64,
    offset: u64,
    cap: usize,
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
        }
    }

    /// Reads one line into `out`, keeping at most `cap + 1` bytes (so an over-long line is
    /// still recognisable as such). Returns false at the end of input.
    fn read_line(&mut self, out: &mut Vec<u8>) -> std::io::Result<bool> {
        out.clear();
        let mut any = false;
        loop {
            let buf = self.input.fill_buf()?;
            if buf.is_empty() {
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
            return Ok(Some(Record::Line(self.line, bytes)));
        }
    }

    fn position(&self) -> SourcePosition {
        SourcePosition {
            line: self.line,
            offset: self.offset,
            rng: None,
        }
    }

    fn resume(&mut self, position: &SourcePosition) -> Result<(), SourceError> {
        let fail = |error| SourceError::new(&self.name, error);
        if let Some(path) = &self.file {
            let mut file = std::fs::File::open(path).map_err(fail)?;
            let len = file.metadata().map_err(fail)?.len();
            if len < position.offset {
                return Err(fail(std::io::Error::other(format!(
                    "the file is {len} bytes, shorter than the checkpoint's position {}: \
                     it was replaced or truncated",
                    position.offset
                ))));
            }
            file.seek(SeekFrom::Start(position.offset)).map_err(fail)?;
            self.input = Box::new(BufReader::with_capacity(1 << 16, file));
            self.offset = position.offset;
            self.line = position.line;
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
    fn truncates_over_long_lines_just_past_the_cap() {
        let got = lines(b"0123456789\nok\n", 4);
        assert_eq!(got, vec![(1, b"01234".to_vec()), (2, b"ok".to_vec())]);
    }
}
