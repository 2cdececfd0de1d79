//! Checkpoints: the manifest that ties state to input position and output position, its
//! figures, recovery (which checkpoint a run resumes from, and what is refused), the commit's
//! marker, and savepoints (named copies of a checkpoint).
//!
//! The barrier protocol itself runs in `pipeline` (the router sends barriers, the shards hand
//! over their changes and wait, the collector commits); this module holds what is written and
//! read. See `docs/design.md` for the on-disk layout.

mod inspect;
pub mod manifest;
mod recovery;
mod savepoint;

pub use crate::source::SourcePosition;
pub use inspect::{Inspection, inspect};
pub use manifest::{CheckpointStats, Manifest, SinkPositions, fingerprint};
pub use recovery::{CheckpointError, recover, write_marker};
pub use savepoint::{
    SavepointError, SavepointInfo, create_savepoint, list_savepoints, restore_savepoint,
};

/// Name of the file beside `state.redb` that records the last committed checkpoint id. It is
/// written after each commit, so a state file that is replaced, emptied or rolled back is
/// detected instead of being taken for a fresh start.
pub const MARKER_FILE: &str = "CHECKPOINT";
