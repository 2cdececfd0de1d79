//! [`Interleaved`]: several JSON Lines files read as one input of several watermark partitions
//! (`[source] type = "files"`), one line from each in turn, as parallel producers would
//! deliver them. Each file is a partition named by its path as the spec gives it: before a
//! file's line comes [`Record::Partition`] naming it, and when a file ends,
//! [`Record::PartitionEnd`], so it no longer holds the watermark back. Lines are numbered over
//! the whole input; the position records each file's own.
//!
//! Depends on nothing outside `source`.

use std::sync::Arc;

use super::{LineReader, Record, Source, SourceError, SourcePosition};

struct Part {
    name: Arc<str>,
    reader: LineReader,
    done: bool,
}

/// Several files, one line from each in turn.
pub struct Interleaved {
    parts: Vec<Part>,
    /// Whose turn it is.
    turn: usize,
    /// Lines returned over the whole input.
    line: u64,
    /// The partition named last.
    current: Option<usize>,
}

impl std::fmt::Debug for Interleaved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Interleaved")
            .field("files", &self.parts.len())
            .field("line", &self.line)
            .finish()
    }
}

impl Interleaved {
    /// The files `paths`, each a partition named by `names` (in the same order).
    pub fn open(
        paths: &[std::path::PathBuf],
        names: &[String],
        cap: usize,
    ) -> Result<Interleaved, SourceError> {
        let parts = paths
            .iter()
            .zip(names)
            .map(|(path, name)| {
                Ok(Part {
                    name: name.as_str().into(),
                    reader: LineReader::open(path, cap)?,
                    done: false,
                })
            })
            .collect::<Result<_, SourceError>>()?;
        Ok(Interleaved {
            parts,
            turn: 0,
            line: 0,
            current: None,
        })
    }
}

impl Source for Interleaved {
    fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        while self.parts.iter().any(|part| !part.done) {
            let index = self.turn;
            let count = self.parts.len();
            let part = &mut self.parts[index];
            if part.done {
                self.turn = (index + 1) % count;
                continue;
            }
            // The partition's record goes before its lines, and nothing is read ahead, so a
            // checkpoint between the two loses nothing.
            if self.current != Some(index) {
                self.current = Some(index);
                return Ok(Some(Record::Partition(part.name.clone())));
            }
            self.turn = (index + 1) % count;
            match part.reader.next_record()? {
                Some(Record::Line(_, bytes)) => {
                    self.line += 1;
                    return Ok(Some(Record::Line(self.line, bytes)));
                }
                Some(other) => return Ok(Some(other)),
                None => {
                    part.done = true;
                    return Ok(Some(Record::PartitionEnd(part.name.clone())));
                }
            }
        }
        Ok(None)
    }

    fn position(&self) -> SourcePosition {
        SourcePosition {
            line: self.line,
            // The next turn, so a resumed run interleaves as this one would have.
            offset: self.turn as u64,
            files: self
                .parts
                .iter()
                .map(|part| part.reader.position())
                .collect(),
            ..SourcePosition::default()
        }
    }

    fn resume(&mut self, position: &SourcePosition) -> Result<(), SourceError> {
        for (part, at) in self.parts.iter_mut().zip(&position.files) {
            part.reader.resume(at)?;
        }
        self.line = position.line;
        self.turn = (position.offset as usize) % self.parts.len().max(1);
        self.current = None;
        Ok(())
    }
}
