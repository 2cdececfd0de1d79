//! The checkpoint manifest and figures. Depends on `rollout`, `source`, `spec`, `time` and
//! `watermark`.

use serde::{Deserialize, Serialize};

use crate::source::SourcePosition;
use crate::spec::PipelineSpec;
use crate::time::Millis;

/// Committed byte lengths of the sink files.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkPositions {
    /// Results.
    pub results: u64,
    /// Late events.
    pub late: u64,
    /// Dead letters.
    pub dead_letters: u64,
}

/// The record of a committed checkpoint, stored in the `meta` table under `"manifest"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Format version of this record.
    pub format: u32,
    /// Checkpoint id, ascending from 1.
    pub id: u64,
    /// The pipeline's name.
    pub pipeline: String,
    /// What must not change between the checkpoint and a restore (see [`fingerprint`]).
    pub fingerprint: String,
    /// The source position.
    pub source: SourcePosition,
    /// Events routed so far (the next event's arrival index).
    pub events: u64,
    /// The watermark (`i64::MIN`: none yet; `i64::MAX`: input finished).
    pub watermark: Millis,
    /// The watermark's partitions (none recorded before partitions existed: one, resumed
    /// empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<crate::watermark::PartitionMark>,
    /// Whether the whole (bounded) input has been processed.
    pub finished: bool,
    /// Committed sink lengths.
    pub sinks: SinkPositions,
    /// Wall-clock time of the commit, ms since the epoch.
    pub committed_at_ms: u64,
    /// Which operator versions serve which keys from this checkpoint on (rollouts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing: Option<crate::rollout::Routing>,
}

/// The current manifest format.
pub const MANIFEST_FORMAT: u32 = 1;

/// One checkpoint's figures, kept in the `checkpoints` table and logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointStats {
    /// Checkpoint id.
    pub id: u64,
    /// From the barrier leaving the router to the commit, in ms.
    pub duration_ms: f64,
    /// Bytes written to redb.
    pub bytes: u64,
    /// State scopes written or deleted.
    pub keys: u64,
    /// Window records written or deleted.
    pub windows: u64,
    /// Events routed when the barrier left the router.
    pub events: u64,
    /// The watermark at the barrier.
    pub watermark: Millis,
}

/// What a checkpoint's state depends on and a restore must match: the key and timestamp
/// fields, the watermark bound, the windows and lateness, and the chain's shape (with each
/// stage's key and windows). Operator versions and modules may change (state is typed values).
pub fn fingerprint(spec: &PipelineSpec) -> String {
    let mut fingerprint = format!(
        "key={} timestamp={} bound={} window={:?} lateness={} enrichers={} aggregate={}",
        spec.key_field,
        spec.timestamp_field,
        spec.watermark_bound,
        spec.window,
        spec.allowed_lateness,
        spec.enrichers.len(),
        spec.aggregate.is_some()
    );
    // A pipeline without stages (or a global aggregate) keeps the fingerprint its checkpoints
    // were written with.
    if spec.global {
        fingerprint.push_str(" global");
    }
    if spec.pre_aggregate {
        fingerprint.push_str(" pre_aggregate");
    }
    if let Some(join) = &spec.join {
        fingerprint.push_str(&format!(" join={join:?}"));
    }
    for stage in &spec.stages {
        fingerprint.push_str(&format!(
            " stage(key={:?} window={:?})",
            stage.key_field, stage.window
        ));
    }
    fingerprint
}
