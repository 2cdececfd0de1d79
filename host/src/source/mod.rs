//! Sources: where events come from. A JSON Lines file, standard input, or a deterministic
//! generator. Each yields records in arrival order, numbered by line from 1.

mod generator;
mod lines;

pub use generator::Generator;
pub use lines::LineReader;

use crate::event::Event;

/// What a source yields.
#[derive(Debug)]
pub enum Record {
    /// A raw line, to be decoded (line number, bytes without the newline).
    Line(u64, Vec<u8>),
    /// A ready event (generated sources).
    Event(Event),
}

/// A source failed to read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read input {source_name}: {error}")]
pub struct SourceError {
    source_name: String,
    error: std::io::Error,
}

/// A source of records.
pub trait Source: Send {
    /// The next record, or `None` at the end of a bounded input.
    fn next_record(&mut self) -> Result<Option<Record>, SourceError>;
}
