//! A served pipeline's savepoints: taken while it runs (right after its next checkpoint) or
//! while it is stopped, listed, deleted, and copied with the ingest log that follows them into
//! a new pipeline's directory. A savepoint pins the ingest log from its input offset on, so the
//! events after it stay available to a fork (and a replay) until it is deleted.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Slot;
use crate::checkpoint::{self, SavepointInfo};
use crate::serve::RequestError;
use crate::source::{segment_path, segments};

/// How long a savepoint request waits for the running pipeline's next checkpoint.
const SAVEPOINT_WAIT: Duration = Duration::from_secs(60);

/// Holds the ingest log against truncation while it lives.
pub(super) struct Hold<'a>(&'a Slot);

impl<'a> Hold<'a> {
    pub(super) fn new(slot: &'a Slot) -> Self {
        slot.holds.fetch_add(1, Ordering::AcqRel);
        Hold(slot)
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.0.holds.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Slot {
    /// The pipeline's data directory (state, checkpoints, savepoints).
    pub fn data_dir(&self) -> Result<PathBuf, RequestError> {
        self.with_managed(|managed| match &managed.spec.state {
            crate::spec::StateSpec::Redb(dir) => Ok(dir.clone()),
            crate::spec::StateSpec::Memory => Err(RequestError::Conflict(format!(
                "pipeline {:?} keeps its state in memory: it has no checkpoints to save",
                self.name
            ))),
        })
    }

    /// Re-reads the lowest input offset of the savepoints (after one is added or deleted).
    pub(super) fn refresh_pin(&self) {
        let Ok(dir) = self.data_dir() else {
            return;
        };
        let lowest = checkpoint::list_savepoints(&dir)
            .unwrap_or_default()
            .iter()
            .map(|saved| saved.manifest.source.offset)
            .min()
            .unwrap_or(u64::MAX);
        self.pinned.store(lowest, Ordering::Release);
    }

    /// Takes savepoint `name`: from the checkpoint that follows the request if the pipeline
    /// runs, from its last checkpoint if it is stopped.
    pub fn savepoint(&self, name: &str) -> Result<SavepointInfo, RequestError> {
        crate::names::check("savepoint name", name)?;
        let dir = self.data_dir()?;
        let _hold = Hold::new(self);
        let waiting = {
            let mut inner = self.lock();
            Self::reap(&mut inner);
            self.check_not_deleting(&inner)?;
            if inner.stopping {
                return Err(RequestError::Conflict(format!(
                    "pipeline {:?} is stopping; take the savepoint once it has stopped",
                    self.name
                )));
            }
            match &inner.control {
                Some(control) if Self::is_running(&inner) => {
                    if matches!(&inner.managed, Ok(m) if m.spec.checkpoint_interval.is_none()) {
                        return Err(RequestError::Conflict(format!(
                            "pipeline {:?} takes no checkpoints ([state] checkpoint_interval), so \
                             it has none to save",
                            self.name
                        )));
                    }
                    if checkpoint::list_savepoints(&dir)?
                        .iter()
                        .any(|s| s.name == name)
                    {
                        return Err(checkpoint::SavepointError::Exists(name.into()).into());
                    }
                    Some(control.request_savepoint(name))
                }
                _ => None,
            }
        };
        let saved = match waiting {
            Some(outcome) => match outcome.recv_timeout(SAVEPOINT_WAIT) {
                Ok(Ok(saved)) => saved,
                Ok(Err(message)) => return Err(RequestError::Conflict(message)),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    return Err(RequestError::Busy(format!(
                        "pipeline {:?} took no checkpoint within {} s; the savepoint is taken \
                         at its next one",
                        self.name,
                        SAVEPOINT_WAIT.as_secs()
                    )));
                }
                Err(_) => {
                    return Err(RequestError::Conflict(format!(
                        "pipeline {:?} stopped before its next checkpoint: take the savepoint \
                         again (a stopped pipeline saves its last checkpoint)",
                        self.name
                    )));
                }
            },
            None => checkpoint::create_savepoint(&dir, name)?,
        };
        self.refresh_pin();
        Ok(saved)
    }

    /// The pipeline's savepoints, by name.
    pub fn savepoints(&self) -> Result<Vec<SavepointInfo>, RequestError> {
        Ok(checkpoint::list_savepoints(&self.data_dir()?)?)
    }

    /// Deletes savepoint `name`; the ingest log it pinned may be truncated from then on.
    pub fn delete_savepoint(&self, name: &str) -> Result<(), RequestError> {
        checkpoint::delete_savepoint(&self.data_dir()?, name)?;
        self.refresh_pin();
        Ok(())
    }

    /// Copies savepoint `name` into the data directory `data` of new pipeline `pipeline`
    /// (directory `dir`), with the ingest log from the savepoint's input offset to what is
    /// committed now: the new pipeline resumes where the savepoint was and reads the events
    /// that came after it. Returns the savepoint.
    pub fn fork_into(
        &self,
        name: &str,
        pipeline: &str,
        data: &Path,
        dir: &Path,
    ) -> Result<SavepointInfo, RequestError> {
        let _hold = Hold::new(self);
        let saved = checkpoint::fork_savepoint(&self.data_dir()?, name, data, pipeline)?;
        let log = self.ingest_log()?;
        let committed = log.gate().committed();
        let target = dir.join(super::INGEST_FILE);
        let source = self.dir.join(super::INGEST_FILE);
        let offset = saved.manifest.source.offset;
        let all = segments(&source).map_err(RequestError::from_io)?;
        let first = all
            .iter()
            .rposition(|(base, _)| *base <= offset)
            .ok_or_else(|| {
                RequestError::Conflict(format!(
                    "the ingest log of pipeline {:?} no longer holds offset {offset}",
                    self.name
                ))
            })?;
        for (base, path) in &all[first..] {
            if *base >= committed {
                break;
            }
            copy_prefix(path, &segment_path(&target, *base), committed - base)
                .map_err(RequestError::from_io)?;
        }
        Ok(saved)
    }
}

/// Copies at most `limit` bytes of `from` into a new file `to`, durably.
fn copy_prefix(from: &Path, to: &Path, limit: u64) -> std::io::Result<()> {
    let mut input = std::fs::File::open(from)?.take(limit);
    let mut output = std::fs::File::create(to)?;
    std::io::copy(&mut input, &mut output)?;
    output.flush()?;
    output.sync_all()
}
