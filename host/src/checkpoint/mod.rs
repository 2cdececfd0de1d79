//! Checkpoints: the manifest that ties state to input position and output position, its
//! figures, the commit (one transaction, then the marker), recovery (which checkpoint a run
//! resumes from, and what is refused), savepoints (named copies of a checkpoint), and reading a
//! data directory offline for `weir state` (`inspect.rs`).
//!
//! The barrier's travel runs in `pipeline` (the router sends barriers, the shards hand over
//! their changes and go on, the collector gathers them and, after the commit, tells the
//! shards); what a checkpoint is, and how it is committed and recovered, is here. See
//! `docs/design.md` for the on-disk layout.
//!
//! Depends on `fsutil`, `names`, `rollout`, `source`, `spec`, `state`, `time` and `watermark`.

mod commit;
mod inspect;
pub mod manifest;
mod recovery;
mod savepoint;
mod sliced;

pub use crate::source::SourcePosition;
pub use commit::{Barrier, Changes, CommitListener, Committer};
pub use inspect::{Inspection, inspect};
pub use manifest::{CheckpointStats, Manifest, SinkPositions, fingerprint};
pub use recovery::{CheckpointError, recover, write_marker};
pub use savepoint::{
    Listing, MAX_SAVEPOINTS, SavepointError, SavepointInfo, create_savepoint, delete_savepoint,
    fork_savepoint, list_savepoints, remove_leftover_copies, restore_savepoint, save_from,
};
pub use sliced::{
    STAGE_TAIL_FILE, commit_sliced, discard_staged, fork_slice, fork_sliced, is_empty_slice,
    mark_empty, slice_dir, stage_sliced,
};

/// Name of the file beside `state.redb` that records the last committed checkpoint id. It is
/// written after each commit, so a state file that is replaced, emptied or rolled back is
/// detected instead of being taken for a fresh start.
pub const MARKER_FILE: &str = "CHECKPOINT";
