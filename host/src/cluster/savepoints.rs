//! Savepoints of a shared pipeline: each slice's checkpoint, uploaded after the request (or the
//! last one of a stopped pipeline), copied out of the object store into a directory the caller
//! keeps; and a new pipeline's slices seeded from such copies before it is first shared.
//!
//! The slices are saved one by one, each at a checkpoint of its own: a slice is a pipeline run
//! of its own (its own input position, its own keys), so a savepoint needs no barrier across
//! them. A stage slice's checkpoint is taken first and the records on its stream after those
//! it had read are copied last: everything the other slices published up to their saved checkpoints
//! (and perhaps beyond) is then either in its state or in that copy, which a fork publishes to
//! its own stream at the same sequences before it starts; what a forked slice publishes again
//! the stage slice drops as a version it took already (`pipeline::upstream::Latest`), or takes
//! as late.
//!
//! Depends on the cluster's record (`deploy.rs`), leases, progress reports, checkpoints
//! (`snapshots.rs`) and the stage stream (`stage_stream.rs`).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::leases::Leases;
use super::snapshots::Snapshots;
use super::stage_stream::{self, CopyError};
use super::{ClusterError, Connection, Result, deploy, progress};
use crate::checkpoint::{STAGE_TAIL_FILE, is_empty_slice, mark_empty, slice_dir};

/// How often a savepoint looks whether every slice has uploaded what it had read when asked.
const POLL: Duration = Duration::from_millis(200);
/// How many times a slice's checkpoint is restored before one covers what it had read (a new
/// base written meanwhile can cut the chain a restore reads).
const RESTORE_TRIES: usize = 3;

/// Copies every slice's checkpoint of `pipeline` into `target/slice-<i>/` (a data directory
/// each, or an empty slice's mark): of a running pipeline, one that covers what the slice had
/// read at this call; of a stopped one, the last, once every worker has given its slices up.
/// A stage slice follows (see the module's doc). Waits at most `wait`, and no longer once
/// `abandon` says so. Returns the slice count, the stage slice's included.
pub(super) fn save(
    connection: &Arc<Connection>,
    pipeline: &str,
    target: &Path,
    wait: Duration,
    abandon: &dyn Fn() -> bool,
) -> Result<usize> {
    let record = match deploy::fetch_record(connection, pipeline) {
        Err(ClusterError::Unknown(_)) => {
            return Err(ClusterError::NotSaved(format!(
                "pipeline {pipeline:?} has not run on the workers yet: start it, and take the \
                 savepoint once they run it"
            )));
        }
        other => other?,
    };
    let snapshots = Snapshots::open(connection.clone())?;
    let wait = Wait {
        pipeline,
        deadline: Instant::now() + wait,
        seconds: wait.as_secs(),
        abandon,
    };
    // The stage slice's checkpoint first: its copy of the stream then spans whatever the other
    // slices publish while they are saved.
    let stage = stage_stream::recorded(&record).then_some(record.slices);
    let stage_read = match stage {
        Some(slice) => Some(restore_stage_slice(&snapshots, pipeline, slice, target)?),
        None => None,
    };
    let targets = match record.stopped {
        true => {
            await_given_up(connection, &wait)?;
            vec![None; record.slices]
        }
        false => await_uploads(connection, &snapshots, record.slices, &wait)?
            .into_iter()
            .map(Some)
            .collect(),
    };
    for (slice, target_sequence) in targets.into_iter().enumerate() {
        // A delete meanwhile: no more downloads into a directory about to go.
        if (wait.abandon)() {
            return Err(abandoned(pipeline));
        }
        restore_covering(&snapshots, pipeline, (slice, target_sequence), target)?;
    }
    if (0..record.slices).all(|slice| is_empty_slice(target, slice)) {
        return Err(ClusterError::NotSaved(format!(
            "no slice of pipeline {pipeline:?} has a checkpoint yet: send it input, and take \
             the savepoint once its workers have checkpointed it"
        )));
    }
    let (Some(slice), Some(read)) = (stage, stage_read) else {
        return Ok(record.slices);
    };
    copy_stage_records(connection, &snapshots, pipeline, (slice, read), target)?;
    Ok(record.slices + 1)
}

/// Restores stage slice `slice`'s last uploaded checkpoint into `target/slice-<slice>/` (or
/// marks it empty): the last sequence of its stream that checkpoint had read.
fn restore_stage_slice(
    snapshots: &Snapshots,
    pipeline: &str,
    slice: usize,
    target: &Path,
) -> Result<u64> {
    let dir = slice_dir(target, slice);
    match snapshots.restore(pipeline, slice, &dir)? {
        None => {
            mark_empty(target, slice).map_err(|source| ClusterError::Io { path: dir, source })?;
            Ok(0)
        }
        Some(_) => Snapshots::restored_sequence(&dir),
    }
}

/// Copies the records on stage slice `slice`'s stream after `read` (what its restored
/// checkpoint had read) into its directory in `target`. If it checkpointed further and purged
/// some of them meanwhile, its newer checkpoint is restored and copied after instead.
fn copy_stage_records(
    connection: &Connection,
    snapshots: &Snapshots,
    pipeline: &str,
    (slice, mut read): (usize, u64),
    target: &Path,
) -> Result<()> {
    let file = slice_dir(target, slice).join(STAGE_TAIL_FILE);
    for _ in 0..RESTORE_TRIES {
        match stage_stream::copy_after(connection, pipeline, read, &file) {
            Ok(_) => return Ok(()),
            Err(CopyError::Gone) => read = restore_stage_slice(snapshots, pipeline, slice, target)?,
            Err(CopyError::Failed(e)) => return Err(e),
        }
    }
    Err(ClusterError::NotSaved(format!(
        "the stage slice of pipeline {pipeline:?} checkpointed again while its stream was \
         copied, {RESTORE_TRIES} times: take the savepoint again"
    )))
}

/// How long a savepoint may wait, and for what.
struct Wait<'a> {
    pipeline: &'a str,
    deadline: Instant,
    seconds: u64,
    abandon: &'a dyn Fn() -> bool,
}

impl Wait<'_> {
    /// After a poll that left `slices` waiting: an error if the wait is over, else a pause.
    fn again(&self, slices: Vec<usize>) -> Result<()> {
        if (self.abandon)() {
            return Err(abandoned(self.pipeline));
        }
        if Instant::now() >= self.deadline {
            return Err(ClusterError::NoCheckpointInTime {
                pipeline: self.pipeline.to_owned(),
                slices,
                seconds: self.seconds,
            });
        }
        std::thread::sleep(POLL);
        Ok(())
    }
}

fn abandoned(pipeline: &str) -> ClusterError {
    ClusterError::NotSaved(format!(
        "the savepoint of pipeline {pipeline:?} was abandoned (the pipeline is being deleted)"
    ))
}

/// Waits until no worker holds a slice of a stopped pipeline (each gives its slice up after
/// uploading its final checkpoint).
fn await_given_up(connection: &Arc<Connection>, wait: &Wait<'_>) -> Result<()> {
    let leases = Leases::open(connection.clone(), wait.pipeline, None)?;
    loop {
        let held: Vec<usize> = leases.owners()?.into_keys().collect();
        if held.is_empty() {
            return Ok(());
        }
        wait.again(held)?;
    }
}

/// Waits until every slice has uploaded a checkpoint that covers what it had read when asked:
/// what its first progress report after this call says it read (so an idle slice, which takes
/// no checkpoints, is saved as it is, and a busy one at its next checkpoint). Returns those
/// sequences, by slice.
fn await_uploads(
    connection: &Connection,
    snapshots: &Snapshots,
    slices: usize,
    wait: &Wait<'_>,
) -> Result<Vec<u64>> {
    let pipeline = wait.pipeline;
    let report = |slice| progress::latest(connection, pipeline, slice);
    let asked: Vec<u64> = (0..slices)
        .map(|slice| report(slice).map_or(0, |(revision, _)| revision))
        .collect();
    // Per slice: the sequence its upload must reach, once a report after the request says.
    let mut targets: Vec<Option<u64>> = vec![None; slices];
    let mut waiting: Vec<usize> = (0..slices).collect();
    loop {
        waiting.retain(|&slice| {
            if targets[slice].is_none() {
                targets[slice] = report(slice)
                    .filter(|(revision, _)| *revision > asked[slice])
                    .map(|(_, progress)| progress.read);
            }
            let uploaded = snapshots.uploaded_sequence(pipeline, slice);
            let covered = match (targets[slice], uploaded) {
                (Some(target), Some(reached)) => reached >= target,
                // Read nothing, so nothing to upload.
                (Some(0), None) => true,
                _ => false,
            };
            !covered
        });
        if waiting.is_empty() {
            return Ok(targets.into_iter().flatten().collect());
        }
        wait.again(waiting.clone())?;
    }
}

/// Restores slice `slice`'s checkpoint into `target/slice-<i>/`, again if the one restored does
/// not reach `sequence` (when given); marks the slice empty if it has no checkpoint and was to
/// reach nothing.
fn restore_covering(
    snapshots: &Snapshots,
    pipeline: &str,
    (slice, sequence): (usize, Option<u64>),
    target: &Path,
) -> Result<()> {
    let dir = slice_dir(target, slice);
    let mut reached = 0;
    for _ in 0..RESTORE_TRIES {
        match snapshots.restore(pipeline, slice, &dir)? {
            None if sequence.unwrap_or(0) == 0 => {
                return mark_empty(target, slice)
                    .map_err(|source| ClusterError::Io { path: dir, source });
            }
            None => {}
            Some(_) => {
                reached = Snapshots::restored_sequence(&dir)?;
                if reached >= sequence.unwrap_or(0) {
                    return Ok(());
                }
            }
        }
        std::thread::sleep(POLL);
    }
    Err(ClusterError::NotSaved(format!(
        "slice {slice} of pipeline {pipeline:?}: its checkpoints in the object store reach \
         input sequence {reached}, short of the {} it had read; take the savepoint again",
        sequence.unwrap_or(0)
    )))
}

/// Seeds the slices of `pipeline`, not shared yet, from `source/slice-<i>/` (a savepoint made
/// this pipeline's, `slices` of them; an empty slice is left without a checkpoint). A pipeline
/// shared already is refused, unless it was seeded from these very slices (a start that
/// failed after seeding).
pub(super) fn seed(
    connection: &Arc<Connection>,
    pipeline: &str,
    source: &Path,
    slices: usize,
) -> Result<()> {
    super::check_name("pipeline name", pipeline)?;
    let snapshots = Snapshots::open(connection.clone())?;
    let filled = (0..slices).filter(|&slice| !is_empty_slice(source, slice));
    match deploy::fetch_record(connection, pipeline) {
        Err(ClusterError::Unknown(_)) => {}
        Ok(_) => {
            for slice in filled {
                if !snapshots.seeded(pipeline, slice, &slice_dir(source, slice))? {
                    return Err(ClusterError::NotSaved(format!(
                        "pipeline {pipeline:?} is shared already, not from this savepoint (by \
                         `weir cluster deploy`, or another server): withdraw it there, or fork \
                         under another name"
                    )));
                }
            }
            return Ok(());
        }
        Err(e) => return Err(e),
    }
    for slice in filled {
        snapshots.seed(pipeline, slice, &slice_dir(source, slice))?;
    }
    for slice in 0..slices {
        let dir = slice_dir(source, slice);
        let tail = dir.join(STAGE_TAIL_FILE);
        if !tail.exists() {
            continue;
        }
        let read = match is_empty_slice(source, slice) {
            true => 0,
            false => Snapshots::restored_sequence(&dir)?,
        };
        stage_stream::seed(connection, pipeline, read, &tail)?;
    }
    Ok(())
}
