//! [`ChangeLog`]: what of the windows changed since the last checkpoint, for the next one, and
//! how a checkpoint stores a window's metadata ([`WindowRecord`], one row per window in the
//! `windows` table; the window's state is stored apart, by the backend).
//!
//! Each live window carries a [`Stored`]: whether it is listed in the log, and whether its
//! metadata or state may be in the store. Only this module changes them. With a log, a touched
//! window is listed once (a closed one's id may stay listed: readers skip it); a window that
//! is not stored has nothing in the store, so its closing writes no change. The engine depends
//! on this module; it depends on `slab`, `inputs` (a stage window's stored inputs), `state`
//! (keys and rows), `time` and `value`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::inputs::StoredInput;
use super::slab::WindowId;
use crate::state::{Change, Namespace, RowError, StateKey, TableRow};
use crate::time::Window;
use crate::value::Fields;

/// Whether a live window is in the change log, and whether it may be in the store.
#[derive(Debug, Default)]
pub(super) struct Stored {
    /// Whether its metadata changed since the last checkpoint (it is in the change log).
    touched: bool,
    /// Whether its metadata or state may be in the store: true for a window restored from a
    /// checkpoint or handed over to one; false for one opened (or moved to new bounds) since
    /// the last checkpoint, whose state is then neither looked for in the store nor deleted
    /// from it, and whose closing writes no change. In a run of short windows (a replay, or
    /// windows shorter than the checkpoint interval) that is most of them; in a run without
    /// checkpoints, all but the restored ones.
    stored: bool,
}

impl Stored {
    /// Whether the window's metadata or state may be in the store.
    #[inline]
    pub(super) fn in_store(&self) -> bool {
        self.stored
    }

    /// The window was restored from a checkpoint: it is in the store.
    pub(super) fn restored(&mut self) {
        self.stored = true;
    }

    /// The window is as the checkpoint has it (after a restore).
    pub(super) fn untouch(&mut self) {
        self.touched = false;
    }

    /// The window's row went into a checkpoint.
    pub(super) fn checkpointed(&mut self) {
        (self.touched, self.stored) = (false, true);
    }
}

/// What changed since the last checkpoint.
#[derive(Debug, Default)]
pub(super) struct Log {
    /// Windows whose metadata changed (each once; closed ones are skipped).
    pub(super) touched: Vec<WindowId>,
    /// Windows closed.
    pub(super) closed: Vec<(Arc<str>, Window)>,
}

/// What changed since the last checkpoint; none in a pipeline that never checkpoints (it
/// would grow with every window ever closed).
#[derive(Debug)]
pub(super) struct ChangeLog(Option<Log>);

impl ChangeLog {
    /// An empty log (not `Default`: a log is kept unless [`ChangeLog::disable`]d).
    pub(super) fn new() -> Self {
        ChangeLog(Some(Log::default()))
    }

    /// The pipeline never checkpoints: keep nothing.
    pub(super) fn disable(&mut self) {
        self.0 = None;
    }

    /// Records that window `id`'s metadata changed since the last checkpoint.
    #[inline]
    pub(super) fn touch(&mut self, stored: &mut Stored, id: WindowId) {
        if let Some(log) = &mut self.0
            && !stored.touched
        {
            stored.touched = true;
            log.touched.push(id);
        }
    }

    /// Records that `key`'s `window` closed: its row is deleted, if it was stored.
    pub(super) fn closed(&mut self, stored: &Stored, key: &Arc<str>, window: Window) {
        if let Some(log) = &mut self.0
            && stored.stored
        {
            log.closed.push((key.clone(), window));
        }
    }

    /// Records that window `id` of `key` moved from extent `old` to new bounds, under which
    /// nothing is stored yet: it is touched, and the old extent's row is deleted. Returns
    /// whether it was stored (under `old`).
    pub(super) fn moved(
        &mut self,
        stored: &mut Stored,
        id: WindowId,
        key: &Arc<str>,
        old: Window,
    ) -> bool {
        let was = std::mem::take(&mut stored.stored);
        self.touch(stored, id);
        if let Some(log) = &mut self.0
            && was
        {
            log.closed.push((key.clone(), old));
        }
        was
    }

    /// What changed since the last call, leaving the log empty but kept (`Some`, not
    /// `None`); `None` if the log is disabled.
    pub(super) fn take(&mut self) -> Option<Log> {
        self.0.as_mut().map(std::mem::take)
    }

    /// Forgets the touched windows (after a restore: they are as the checkpoint has them).
    pub(super) fn forget_touched(&mut self) {
        if let Some(log) = &mut self.0 {
            log.touched.clear();
        }
    }
}

/// The row of a window under `key` with metadata `record`.
pub(super) fn row(key: StateKey, record: &WindowRecord) -> Change {
    let value = serde_json::to_vec(record).expect("window records are serialisable");
    Change {
        key: key.encode(),
        value: Some(value),
    }
}

/// The row of a parked key (under the window [`super::quarantine::PARKED`]).
pub(super) fn parked_row(key: StateKey, parked: super::quarantine::ParkedRecord) -> Change {
    let record = WindowRecord {
        version: 0,
        changed: false,
        last_output: None,
        early: 0,
        since_emit: 0,
        inputs: Vec::new(),
        parked: Some(parked),
    };
    row(key, &record)
}

/// The deletion of the row of a window under `key`.
pub(super) fn closed_row(key: StateKey) -> Change {
    Change {
        key: key.encode(),
        value: None,
    }
}

/// A window's key, extent and metadata, read from its row.
pub(super) fn decode_row(row: &TableRow) -> Result<(Arc<str>, Window, WindowRecord), RowError> {
    let key = StateKey::decode(&row.key).ok_or(RowError::MalformedKey("window"))?;
    let Namespace::Window { start, end } = key.namespace else {
        return Err(RowError::NoWindow);
    };
    let record: WindowRecord =
        serde_json::from_slice(&row.value).map_err(RowError::WindowRecord)?;
    Ok((key.key, Window { start, end }, record))
}

/// A window's metadata as a checkpoint stores it (its state is stored apart, by the backend).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WindowRecord {
    /// Emissions so far.
    pub version: u64,
    /// Whether the state changed since the last emission.
    pub changed: bool,
    /// The last emitted output, for retraction.
    pub last_output: Option<Fields>,
    /// Early results emitted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub early: u64,
    /// Events added since the last emission.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub since_emit: u64,
    /// A stage's window: its inputs, so that updates and withdrawals upstream can still be
    /// applied after a restart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<StoredInput>,
    /// A parked key's row (under the window [`super::quarantine::PARKED`]): its events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<super::quarantine::ParkedRecord>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
