//! A served pipeline's savepoints: taken while it runs (right after its next checkpoint) or
//! while it is stopped, listed, deleted, and copied with the ingest log that follows them into
//! a new pipeline's directory. A savepoint pins the ingest log from its input offset on, so the
//! events after it stay available to a fork (and a replay) until it is deleted.
//!
//! Depends on `checkpoint`, `names` and `source`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::warn;

use super::Slot;
use crate::checkpoint::{self, SavepointInfo};
use crate::serve::RequestError;
use crate::source::{segment_path, segments};

/// How long a savepoint request waits for the running pipeline's next checkpoint.
const SAVEPOINT_WAIT: Duration = Duration::from_secs(60);

/// The lowest input offset the savepoints need kept, as last read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pin {
    /// `u64::MAX`: none; 0 also when they could not be read.
    pub(super) lowest: u64,
    /// Whether the last reading failed (so the next truncation reads again first).
    pub(super) stale: bool,
}

impl Pin {
    pub(super) fn known(lowest: u64) -> Pin {
        Pin {
            lowest,
            stale: false,
        }
    }
}

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
        self.with_managed(|managed| {
            managed.data_dir().ok_or_else(|| {
                RequestError::Conflict(format!(
                    "pipeline {:?} keeps its state in memory: it has no checkpoints to save",
                    self.name
                ))
            })
        })
    }

    /// Re-reads the lowest input offset of the savepoints (after one is added or deleted). What
    /// cannot be read keeps everything: a listing that fails, or a damaged savepoint, pins the
    /// whole log (and a failed listing is tried again before the next truncation). Refreshes
    /// take turns, so a slower one cannot store an older listing over a newer.
    pub(super) fn refresh_pin(&self) {
        let mut pin = self.pin.lock().expect("pin lock");
        // Memory state has no savepoints (and a damaged pipeline runs nothing to truncate).
        let Ok(dir) = self.data_dir() else {
            *pin = Pin::known(u64::MAX);
            return;
        };
        *pin = match checkpoint::list_savepoints(&dir) {
            Ok(listing) => {
                for (name, reason) in &listing.damaged {
                    warn!(pipeline = %self.name, savepoint = %name, %reason, "savepoint damaged: the ingest log is kept whole until it is deleted");
                }
                Pin::known(listing.lowest_offset().unwrap_or(u64::MAX))
            }
            Err(e) => {
                warn!(pipeline = %self.name, error = %e, "could not list the savepoints: the ingest log is kept whole");
                Pin {
                    lowest: 0,
                    stale: true,
                }
            }
        };
    }

    /// The lowest input offset a savepoint needs kept (`u64::MAX`: none), read again first if
    /// the last reading failed.
    pub(super) fn pinned(&self) -> u64 {
        let stale = self.pin.lock().expect("pin lock").stale;
        if stale {
            self.refresh_pin();
        }
        self.pin.lock().expect("pin lock").lowest
    }

    /// Takes savepoint `name`: from the checkpoint that follows the request if the pipeline
    /// runs, from its last checkpoint if it is stopped (a start waits meanwhile: the copy holds
    /// the stopped pipeline's store).
    pub fn savepoint(&self, name: &str) -> Result<SavepointInfo, RequestError> {
        crate::names::check("savepoint name", name)?;
        if self.on_workers()? {
            return self.savepoint_on_workers(name);
        }
        let dir = self.data_dir()?;
        let _hold = Hold::new(self);
        let store_turn = self.store_turn.lock().expect("store turn lock");
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
                    Some(control.request_savepoint(name))
                }
                _ => None,
            }
        };
        let saved = match waiting {
            Some(outcome) => {
                drop(store_turn);
                self.saved_at_checkpoint(outcome)?
            }
            None => checkpoint::create_savepoint(&dir, name)?,
        };
        self.refresh_pin();
        Ok(saved)
    }

    /// Takes savepoint `name` of a pipeline on workers: every slice's checkpoint, copied from
    /// the cluster (of a running pipeline, each slice's first upload after the request). A
    /// delete waits for it (it takes the store's turn) and makes it give up.
    fn savepoint_on_workers(&self, name: &str) -> Result<SavepointInfo, RequestError> {
        let dir = self.sliced_home()?;
        // A second savepoint meanwhile is told at once, not held for as long as this one.
        let Ok(_store_turn) = self.store_turn.try_lock() else {
            return Err(RequestError::Busy(format!(
                "a savepoint of pipeline {:?} is being taken, or the pipeline is starting: take \
                 this one once it is done",
                self.name
            )));
        };
        self.check_not_deleting(&self.lock())?;
        let spec = self.with_managed(|managed| Ok(managed.spec.clone()))?;
        let staged = checkpoint::stage_sliced(&dir, name)?;
        let saved = super::on_workers::save(&spec, &staged, SAVEPOINT_WAIT, &|| self.is_deleted());
        if let Err(e) = saved {
            checkpoint::discard_staged(&dir, name);
            return Err(e);
        }
        Ok(checkpoint::commit_sliced(&dir, name)?)
    }

    /// Where a pipeline on workers keeps its savepoints: its data directory (it has no state
    /// here otherwise).
    pub(super) fn sliced_home(&self) -> Result<PathBuf, RequestError> {
        self.with_managed(|managed| {
            Ok(managed
                .data_dir()
                .unwrap_or_else(|| managed.dir.join("data")))
        })
    }

    /// Waits for the savepoint the running pipeline takes at its next checkpoint.
    fn saved_at_checkpoint(
        &self,
        outcome: std::sync::mpsc::Receiver<Result<SavepointInfo, checkpoint::SavepointError>>,
    ) -> Result<SavepointInfo, RequestError> {
        match outcome.recv_timeout(SAVEPOINT_WAIT) {
            Ok(saved) => Ok(saved?),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(RequestError::Busy(format!(
                "pipeline {:?} took no checkpoint within {} s; the savepoint is taken at its \
                 next one",
                self.name,
                SAVEPOINT_WAIT.as_secs()
            ))),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                Err(RequestError::Conflict(format!(
                    "pipeline {:?} stopped before its next checkpoint: take the savepoint again \
                     (a stopped pipeline saves its last checkpoint)",
                    self.name
                )))
            }
        }
    }

    /// The pipeline's savepoints, by name, and those that cannot be read.
    pub fn savepoints(&self) -> Result<checkpoint::Listing, RequestError> {
        Ok(checkpoint::list_savepoints(&self.savepoint_home()?)?)
    }

    /// The directory holding the pipeline's savepoints.
    pub(super) fn savepoint_home(&self) -> Result<PathBuf, RequestError> {
        match self.on_workers()? {
            true => self.sliced_home(),
            false => self.data_dir(),
        }
    }

    /// Savepoint `name`: unknown (404) or damaged (409) if it cannot be used.
    pub fn find_savepoint(&self, name: &str) -> Result<SavepointInfo, RequestError> {
        Ok(self.savepoints()?.find(name)?.clone())
    }

    /// Deletes savepoint `name`; the ingest log it pinned may be truncated from then on.
    pub fn delete_savepoint(&self, name: &str) -> Result<(), RequestError> {
        checkpoint::delete_savepoint(&self.savepoint_home()?, name)?;
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
        if !self.reads_ingest_log() {
            // The new pipeline reads the stream or topic from the savepoint's position.
            return Ok(saved);
        }
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

impl Slot {
    /// Copies sliced savepoint `name` (of this pipeline on workers) into `target`, made new
    /// pipeline `pipeline`'s slices, for its first start to seed the cluster with. Returns the
    /// savepoint.
    pub fn fork_slices_into(
        &self,
        name: &str,
        pipeline: &str,
        target: &Path,
    ) -> Result<SavepointInfo, RequestError> {
        let _hold = Hold::new(self);
        Ok(checkpoint::fork_sliced(
            &self.sliced_home()?,
            name,
            target,
            pipeline,
        )?)
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
