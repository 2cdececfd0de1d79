//! Sinks: where JSON Lines go (standard output, standard error, a file, or nowhere).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use crate::spec::Sink;

/// A sink could not be opened or written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write output {target}: {source}")]
pub struct SinkError {
    target: String,
    source: std::io::Error,
}

/// An open sink, buffered.
pub struct SinkWriter {
    target: String,
    out: Option<Box<dyn Write + Send>>,
    records: u64,
}

impl std::fmt::Debug for SinkWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkWriter")
            .field("target", &self.target)
            .field("records", &self.records)
            .finish()
    }
}

impl SinkWriter {
    /// Opens a sink; a file is created (with its directory) or truncated.
    pub fn open(sink: &Sink) -> Result<SinkWriter, SinkError> {
        let (target, out): (String, Option<Box<dyn Write + Send>>) = match sink {
            Sink::Stdout => (
                "standard output".into(),
                Some(Box::new(BufWriter::new(std::io::stdout()))),
            ),
            Sink::Stderr => ("standard error".into(), Some(Box::new(std::io::stderr()))),
            Sink::Discard => ("nowhere".into(), None),
            Sink::File(path) => {
                let target = path.display().to_string();
                let fail = |source| SinkError {
                    target: target.clone(),
                    source,
                };
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(fail)?;
                }
                let file = File::create(PathBuf::from(path)).map_err(fail)?;
                (
                    target,
                    Some(Box::new(BufWriter::with_capacity(1 << 16, file))),
                )
            }
        };
        Ok(SinkWriter {
            target,
            out,
            records: 0,
        })
    }

    /// Writes one record as a line.
    pub fn write(&mut self, record: &serde_json::Value) -> Result<(), SinkError> {
        self.records += 1;
        let Some(out) = self.out.as_mut() else {
            return Ok(());
        };
        let result = serde_json::to_writer(&mut *out, record)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"));
        result.map_err(|source| SinkError {
            target: self.target.clone(),
            source,
        })
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Flushes buffered output.
    pub fn flush(&mut self) -> Result<(), SinkError> {
        match self.out.as_mut() {
            Some(out) => out.flush().map_err(|source| SinkError {
                target: self.target.clone(),
                source,
            }),
            None => Ok(()),
        }
    }
}
