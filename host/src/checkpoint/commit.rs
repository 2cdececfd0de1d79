//! Committing a checkpoint: the router's position at the barrier and every shard's changes,
//! written in one redb transaction with the manifest and the checkpoint's figures, then the
//! marker. The pipeline's collector gathers what this needs (after writing every earlier batch
//! and syncing the sinks) and tells the shards once it returns (they went on meanwhile).
//!
//! Depends on `rollout`, `source`, `state`, `time` and `watermark`.

use std::path::PathBuf;
use std::time::Instant;

use tracing::info;

use super::manifest::MANIFEST_FORMAT;
use super::{CheckpointError, CheckpointStats, Manifest, SinkPositions, write_marker};
use crate::rollout::Routing;
use crate::source::SourcePosition;
use crate::state::{Change, RedbStore, StoredCheckpoint};
use crate::time::Millis;

/// Where the router was at a barrier: everything before it is in the checkpoint.
#[derive(Debug)]
pub struct Barrier {
    /// The source's position.
    pub source: SourcePosition,
    /// Events routed over the pipeline's life.
    pub events: u64,
    /// The watermark.
    pub watermark: Millis,
    /// The watermark's partitions.
    pub partitions: Vec<crate::watermark::PartitionMark>,
    /// Whether the input ended.
    pub finished: bool,
    /// When the barrier was sent, for the checkpoint's duration.
    pub started: Instant,
    /// The routing from this checkpoint on.
    pub routing: Option<Routing>,
}

/// What every shard handed over at a barrier, together.
#[derive(Debug, Default)]
pub struct Changes {
    /// State scopes written or removed since the last checkpoint.
    pub state: Vec<Change>,
    /// Window metadata changed or dropped since the last checkpoint.
    pub windows: Vec<Change>,
    /// Scopes held in memory over all shards.
    pub hot: usize,
}

/// Commits the checkpoints of one run, numbering them on from the last committed one.
pub struct Committer {
    /// The pipeline's store.
    pub store: RedbStore,
    /// Its data directory (for the marker).
    pub data_dir: PathBuf,
    /// The pipeline's name, recorded in the manifest.
    pub pipeline: String,
    /// The spec's fingerprint, recorded in the manifest.
    pub fingerprint: String,
    /// The next checkpoint's id.
    pub next_id: u64,
    /// The state's totals after the last commit.
    pub totals: crate::state::StateTotals,
    /// Told of every checkpoint right after it commits (a worker uploads it).
    pub on_commit: Option<CommitListener>,
}

/// Called with the store and each checkpoint as committed to it (its changes, manifest and
/// figures); it must return quickly (hand the work to another thread).
pub type CommitListener = std::sync::Arc<dyn Fn(&RedbStore, &StoredCheckpoint) + Send + Sync>;

/// A fault-injection hook for crash tests: `WEIR_TEST_CRASH=before-commit:N` or
/// `after-commit:N` aborts the process at that point of checkpoint N.
fn crash_point(point: &str, id: u64) {
    if let Ok(spec) = std::env::var("WEIR_TEST_CRASH")
        && spec == format!("{point}:{id}")
    {
        eprintln!("weir: WEIR_TEST_CRASH: aborting {point} of checkpoint {id}");
        std::process::abort();
    }
}

impl std::fmt::Debug for Committer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer")
            .field("pipeline", &self.pipeline)
            .field("next_id", &self.next_id)
            .finish_non_exhaustive()
    }
}

impl Committer {
    /// Commits one checkpoint (the sinks are already synced to `sinks`): one transaction, then
    /// the marker. Returns its figures.
    #[tracing::instrument(name = "checkpoint", skip_all, fields(pipeline = %self.pipeline, checkpoint = self.next_id))]
    pub fn commit(
        &mut self,
        barrier: &Barrier,
        changes: Changes,
        sinks: SinkPositions,
    ) -> Result<CheckpointStats, CheckpointError> {
        let id = self.next_id;
        let (stored, mut stats) = self.prepare(barrier, changes, sinks);
        crash_point("before-commit", id);
        self.totals = self.store.commit(&stored)?;
        stats.duration_ms = barrier.started.elapsed().as_secs_f64() * 1e3;
        crash_point("after-commit", id);
        write_marker(&self.data_dir, id)?;
        if let Some(listener) = &self.on_commit {
            listener(&self.store, &stored);
        }
        info!(
            checkpoint = id,
            duration_ms = stats.duration_ms,
            bytes = stats.bytes,
            keys = stats.keys,
            windows = stats.windows,
            events = stats.events,
            "checkpoint committed"
        );
        self.next_id += 1;
        Ok(stats)
    }

    /// The checkpoint as it is stored (manifest, changes, figures) and its figures.
    fn prepare(
        &self,
        barrier: &Barrier,
        changes: Changes,
        sinks: SinkPositions,
    ) -> (StoredCheckpoint, CheckpointStats) {
        let id = self.next_id;
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            id,
            pipeline: self.pipeline.clone(),
            fingerprint: self.fingerprint.clone(),
            source: barrier.source.clone(),
            events: barrier.events,
            watermark: barrier.watermark,
            partitions: barrier.partitions.clone(),
            finished: barrier.finished,
            sinks,
            committed_at_ms: crate::time::wall_clock_ms(),
            routing: barrier.routing.clone(),
        };
        let (keys, window_count) = (changes.state.len() as u64, changes.windows.len() as u64);
        let mut stored = StoredCheckpoint {
            id,
            manifest: serde_json::to_vec(&manifest).expect("manifests serialise"),
            state: changes.state,
            windows: changes.windows,
            stats: Vec::new(),
        };
        let bytes = stored.manifest.len() as u64
            + stored
                .state
                .iter()
                .chain(&stored.windows)
                .map(|c| (c.key.len() + c.value.as_ref().map_or(0, Vec::len)) as u64)
                .sum::<u64>();
        let stats = CheckpointStats {
            id,
            // The stored copy's duration stops where the commit starts; the logged one
            // includes it.
            duration_ms: barrier.started.elapsed().as_secs_f64() * 1e3,
            bytes,
            keys,
            windows: window_count,
            events: barrier.events,
            watermark: barrier.watermark,
        };
        stored.stats = serde_json::to_vec(&stats).expect("stats serialise");
        (stored, stats)
    }
}
