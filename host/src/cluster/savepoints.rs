//! Savepoints of a shared pipeline: each slice's checkpoint, uploaded after the request (or the
//! last one of a stopped pipeline), copied out of the object store into a directory the caller
//! keeps; and a new pipeline's slices seeded from such copies before it is first shared.
//!
//! The slices are saved one by one, each at a checkpoint of its own: a slice is a pipeline run
//! of its own (its own input position, its own keys), so a savepoint needs no barrier across
//! them. Depends on the cluster's record (`deploy.rs`) and its checkpoints (`snapshots.rs`).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::snapshots::Snapshots;
use super::{ClusterError, Connection, Result, deploy, progress};
use crate::checkpoint::slice_dir;

/// How often a savepoint looks whether every slice has uploaded what it had read when asked.
const POLL: Duration = Duration::from_millis(200);

/// Copies every slice's checkpoint of `pipeline` into `target/slice-<i>/` (a data directory
/// each): of a running pipeline, one that covers what the slice had read at this call (waiting
/// at most `wait`, and no longer once `abandon` says so); of a stopped one, the last. Returns
/// the slice count.
pub(super) fn save(
    connection: &Arc<Connection>,
    pipeline: &str,
    target: &Path,
    wait: Duration,
    abandon: &dyn Fn() -> bool,
) -> Result<usize> {
    let record = deploy::fetch_record(connection, pipeline)?;
    let snapshots = Snapshots::open(connection.clone())?;
    if !record.stopped {
        await_uploads(
            connection,
            &snapshots,
            pipeline,
            record.slices,
            wait,
            abandon,
        )?;
    }
    for slice in 0..record.slices {
        if snapshots
            .restore(pipeline, slice, &slice_dir(target, slice))?
            .is_none()
        {
            return Err(ClusterError::NotSaved(format!(
                "slice {slice} of pipeline {pipeline:?} has no checkpoint yet: start the \
                 pipeline and take the savepoint once its workers have run every slice"
            )));
        }
    }
    Ok(record.slices)
}

/// Waits until every slice has uploaded a checkpoint that covers what it had read when asked:
/// what its first progress report after this call says it read (so an idle slice, which takes
/// no checkpoints, is saved as it is, and a busy one at its next checkpoint).
fn await_uploads(
    connection: &Connection,
    snapshots: &Snapshots,
    pipeline: &str,
    slices: usize,
    wait: Duration,
    abandon: &dyn Fn() -> bool,
) -> Result<()> {
    let report = |slice| progress::latest(connection, pipeline, slice);
    let asked: Vec<u64> = (0..slices)
        .map(|slice| report(slice).map_or(0, |(revision, _)| revision))
        .collect();
    // Per slice: the sequence its upload must reach, once a report after the request says.
    let mut targets: Vec<Option<u64>> = vec![None; slices];
    let deadline = Instant::now() + wait;
    let mut waiting: Vec<usize> = (0..slices).collect();
    loop {
        waiting.retain(|&slice| {
            if targets[slice].is_none() {
                targets[slice] = report(slice)
                    .filter(|(revision, _)| *revision > asked[slice])
                    .map(|(_, progress)| progress.read);
            }
            let uploaded = snapshots.uploaded_sequence(pipeline, slice);
            !matches!((targets[slice], uploaded), (Some(target), Some(reached)) if reached >= target)
        });
        if waiting.is_empty() {
            return Ok(());
        }
        if abandon() {
            return Err(ClusterError::NotSaved(format!(
                "the savepoint of pipeline {pipeline:?} was abandoned (the pipeline is being \
                 deleted)"
            )));
        }
        if Instant::now() >= deadline {
            return Err(ClusterError::NoCheckpointInTime {
                pipeline: pipeline.to_owned(),
                slices: waiting,
                seconds: wait.as_secs(),
            });
        }
        std::thread::sleep(POLL);
    }
}

/// Seeds the slices of `pipeline`, not shared yet, from `source/slice-<i>/` (a savepoint made
/// this pipeline's, `slices` of them).
pub(super) fn seed(
    connection: &Arc<Connection>,
    pipeline: &str,
    source: &Path,
    slices: usize,
) -> Result<()> {
    super::check_name("pipeline name", pipeline)?;
    match deploy::fetch_record(connection, pipeline) {
        Err(ClusterError::Unknown(_)) => {}
        Ok(_) => {
            return Err(ClusterError::NotSaved(format!(
                "pipeline {pipeline:?} is shared already: its slices run from their own \
                 checkpoints, not a savepoint's"
            )));
        }
        Err(e) => return Err(e),
    }
    let snapshots = Snapshots::open(connection.clone())?;
    for slice in 0..slices {
        snapshots.seed(pipeline, slice, &slice_dir(source, slice))?;
    }
    Ok(())
}
