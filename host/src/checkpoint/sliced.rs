//! Savepoints of a pipeline cut into slices (one placed on `weir worker`s): a directory
//! `<data dir>/savepoints/<name>.slices/` holding each slice's checkpoint as a data directory of
//! its own, `slice-<i>/state.redb`, copied from the cluster's object store (or, for a slice
//! that had read nothing, `slice-<i>/EMPTY`); a stage slice's also holds the records it had not
//! taken into that checkpoint yet ([`STAGE_TAIL_FILE`]). Staged beside its
//! final name (`.slices.partial`) and renamed into place whole; deleted by a rename away
//! (`.slices.deleting`) before its removal, so a listing sees all of it or none.
//!
//! What a slice's checkpoint is and how it is restored from the object store is the cluster's;
//! this module only keeps the copies. Depends on `names`, `state` and the checkpoint manifest.

use std::path::{Path, PathBuf};

use super::Manifest;
use super::savepoint::{SavepointError, SavepointInfo, check_name, fork_file, read_saved};
use crate::state::STATE_FILE;

/// What ends a sliced savepoint's directory name.
const SUFFIX: &str = ".slices";
/// The file standing for a slice that had read nothing (and has no checkpoint).
const EMPTY_FILE: &str = "EMPTY";
/// In a stage slice's directory: the records of the other slices on its stream after those its
/// checkpoint had read, one per line, which a fork publishes to its own stream first.
pub const STAGE_TAIL_FILE: &str = "stage-tail.jsonl";

/// Records slice `slice` of the sliced savepoint (or its staging, or a fork's copy) in `dir` as
/// one that had read nothing.
pub fn mark_empty(dir: &Path, slice: usize) -> std::io::Result<()> {
    let slice_dir = slice_dir(dir, slice);
    std::fs::create_dir_all(&slice_dir)?;
    std::fs::write(slice_dir.join(EMPTY_FILE), b"")
}

/// Whether slice `slice` in `dir` is one that had read nothing.
pub fn is_empty_slice(dir: &Path, slice: usize) -> bool {
    slice_dir(dir, slice).join(EMPTY_FILE).exists()
}

/// The directory of sliced savepoint `name`.
pub(super) fn sliced_path(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join("savepoints").join(format!("{name}{SUFFIX}"))
}

/// The savepoint name a directory entry `file_name` stands for, if it is a sliced savepoint's.
pub(super) fn sliced_name(file_name: &str) -> Option<&str> {
    file_name.strip_suffix(SUFFIX)
}

/// Whether `file_name` is a sliced savepoint's copy being made or removed.
pub(super) fn is_leftover(file_name: &str) -> bool {
    [".partial", ".deleting"]
        .iter()
        .any(|end| file_name.ends_with(&format!("{SUFFIX}{end}")))
}

/// Slice `slice`'s data directory in a sliced savepoint (or its staging) directory `dir`.
pub fn slice_dir(dir: &Path, slice: usize) -> PathBuf {
    dir.join(format!("slice-{slice}"))
}

/// Makes an empty staging directory for sliced savepoint `name`, for the caller to fill with
/// one data directory per slice ([`slice_dir`]) and then pass to [`commit_sliced`]. The name
/// must be free and the directory must have room for one more savepoint. Callers take turns
/// per data directory (a second staging of one name replaces the first).
pub fn stage_sliced(data_dir: &Path, name: &str) -> Result<PathBuf, SavepointError> {
    check_name(name)?;
    super::savepoint::check_room(data_dir, name)?;
    let staged = staging(data_dir, name);
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| SavepointError::Io { path, source }
    };
    if staged.exists() {
        std::fs::remove_dir_all(&staged).map_err(io(&staged))?;
    }
    std::fs::create_dir_all(&staged).map_err(io(&staged))?;
    Ok(staged)
}

fn staging(data_dir: &Path, name: &str) -> PathBuf {
    let mut path = sliced_path(data_dir, name).into_os_string();
    path.push(".partial");
    PathBuf::from(path)
}

/// Puts the staged sliced savepoint `name` in place (every slice's checkpoint must be
/// readable) and returns it; the staging is removed if it is not.
pub fn commit_sliced(data_dir: &Path, name: &str) -> Result<SavepointInfo, SavepointError> {
    let staged = staging(data_dir, name);
    let outcome = read_sliced(&staged, name).and_then(|info| {
        let info = info.ok_or_else(|| SavepointError::Unknown { name: name.into() })?;
        super::savepoint::check_room(data_dir, name)?;
        let path = sliced_path(data_dir, name);
        crate::fsutil::crash_point("sliced-savepoint-staged");
        std::fs::rename(&staged, &path).map_err(|source| SavepointError::Io { path, source })?;
        Ok(info)
    });
    if outcome.is_err() {
        discard_staged(data_dir, name);
    }
    outcome
}

/// Removes the staging of sliced savepoint `name`, if any (a take that failed).
pub fn discard_staged(data_dir: &Path, name: &str) {
    let _ = std::fs::remove_dir_all(staging(data_dir, name));
}

/// The slices' manifests of the sliced savepoint in directory `dir` (named `name`): `Ok(None)`
/// if it is gone, damaged if a slice is missing or unreadable.
pub(super) fn read_sliced(dir: &Path, name: &str) -> Result<Option<SavepointInfo>, SavepointError> {
    let damaged = |reason: String| SavepointError::Damaged {
        name: name.into(),
        reason,
    };
    let count = match slice_count(dir) {
        Ok(count) => count,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(SavepointError::Io {
                path: dir.to_owned(),
                source,
            });
        }
    };
    if count == 0 {
        return Err(damaged("it holds no slice".into()));
    }
    let (mut slices, mut bytes) = (Vec::with_capacity(count), 0);
    for slice in 0..count {
        if is_empty_slice(dir, slice) {
            slices.push(None);
            continue;
        }
        let file = slice_dir(dir, slice).join(STATE_FILE);
        match read_saved(&file, name)? {
            Some(manifest) => slices.push(Some(manifest)),
            None if dir.exists() => return Err(damaged(format!("slice {slice} is missing"))),
            None => return Ok(None), // deleted while read
        }
        bytes += std::fs::metadata(&file).map_or(0, |m| m.len());
    }
    let read: Vec<&Manifest> = slices.iter().flatten().collect();
    let Some(first) = read.first() else {
        return Err(damaged("no slice of it holds a checkpoint".into()));
    };
    if read.iter().any(|m| m.fingerprint != first.fingerprint) {
        return Err(damaged("its slices were taken with different specs".into()));
    }
    let mut manifest = summary(&read);
    // A stage slice's count is of the other slices' hand-overs, not of events.
    manifest.events = (slices.iter().enumerate())
        .filter(|(slice, _)| !slice_dir(dir, *slice).join(STAGE_TAIL_FILE).exists())
        .filter_map(|(_, m)| m.as_ref().map(|m| m.events))
        .sum();
    Ok(Some(SavepointInfo {
        name: name.into(),
        manifest,
        bytes,
        slices,
    }))
}

/// How many `slice-<i>` directories `dir` holds (named 0 up, gaps counting as present, so a
/// gap is found missing).
fn slice_count(dir: &Path) -> std::io::Result<usize> {
    let mut highest = None;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let index = (entry.file_name().to_str())
            .and_then(|n| n.strip_prefix("slice-"))
            .and_then(|n| n.parse::<usize>().ok())
            // A pipeline of the most slices has its stage slice one past them.
            .filter(|&i| i <= crate::spec::MAX_SLICES);
        if let Some(index) = index {
            highest = highest.max(Some(index));
        }
    }
    Ok(highest.map_or(0, |h| h + 1))
}

/// The savepoint as a whole: the first slice's manifest with the lowest watermark and the
/// earliest commit time (its events are the caller's to count).
fn summary(slices: &[&Manifest]) -> Manifest {
    let mut whole = Manifest::clone(slices[0]);
    whole.watermark = slices.iter().map(|m| m.watermark).min().unwrap_or(i64::MIN);
    whole.committed_at_ms = (slices.iter().map(|m| m.committed_at_ms).min()).unwrap_or(0);
    whole
}

/// Deletes sliced savepoint `name`: `Ok(false)` if there is none.
pub(super) fn delete_sliced(data_dir: &Path, name: &str) -> Result<bool, SavepointError> {
    let path = sliced_path(data_dir, name);
    let mut away = path.clone().into_os_string();
    away.push(".deleting");
    let away = PathBuf::from(away);
    match std::fs::rename(&path, &away) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(source) => return Err(SavepointError::Io { path, source }),
    }
    std::fs::remove_dir_all(&away).map_err(|source| SavepointError::Io { path: away, source })?;
    Ok(true)
}

/// Makes slice `slice` of sliced savepoint `name` of `data_dir` the state of pipeline
/// `pipeline` in the new data directory `target` (a replay's sandbox), renamed to it with its
/// output positions set to zero. Refused for a slice that had read nothing.
pub fn fork_slice(
    data_dir: &Path,
    name: &str,
    slice: usize,
    target: &Path,
    pipeline: &str,
) -> Result<Manifest, SavepointError> {
    check_name(name)?;
    let dir = sliced_path(data_dir, name);
    let file = slice_dir(&dir, slice).join(STATE_FILE);
    fork_file(&file, name, target, pipeline)
}

/// Makes sliced savepoint `name` of `data_dir` the slices of another pipeline, `pipeline`:
/// each slice's checkpoint copied to `target/slice-<i>/`, renamed to that pipeline with its
/// output positions set to zero. Returns the savepoint as saved.
pub fn fork_sliced(
    data_dir: &Path,
    name: &str,
    target: &Path,
    pipeline: &str,
) -> Result<SavepointInfo, SavepointError> {
    check_name(name)?;
    let dir = sliced_path(data_dir, name);
    let saved =
        read_sliced(&dir, name)?.ok_or_else(|| SavepointError::Unknown { name: name.into() })?;
    for (slice, manifest) in saved.slices.iter().enumerate() {
        let io = |source| SavepointError::Io {
            path: slice_dir(target, slice),
            source,
        };
        match manifest {
            None => mark_empty(target, slice).map_err(io)?,
            Some(_) => {
                let file = slice_dir(&dir, slice).join(STATE_FILE);
                fork_file(&file, name, &slice_dir(target, slice), pipeline)?;
            }
        }
        let tail = slice_dir(&dir, slice).join(STAGE_TAIL_FILE);
        if tail.exists() {
            std::fs::copy(&tail, slice_dir(target, slice).join(STAGE_TAIL_FILE)).map_err(io)?;
        }
    }
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::savepoint::{
        create_savepoint, delete_savepoint, fork_savepoint, list_savepoints, remove_leftover_copies,
    };
    use crate::checkpoint::{SinkPositions, manifest::MANIFEST_FORMAT};
    use crate::state::{RedbStore, StoredCheckpoint};

    /// Commits a checkpoint that read the input to `offset`, with `events` events, in `dir`.
    fn commit(dir: &Path, offset: u64, events: u64) {
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            id: offset,
            pipeline: "p".into(),
            fingerprint: "f".into(),
            source: crate::source::SourcePosition {
                offset,
                ..Default::default()
            },
            events,
            watermark: offset as i64 * 10,
            partitions: Vec::new(),
            finished: false,
            sinks: SinkPositions {
                results: 7,
                ..Default::default()
            },
            committed_at_ms: offset,
            routing: None,
        };
        let store = RedbStore::open(dir).unwrap();
        store
            .commit(&StoredCheckpoint {
                id: offset,
                manifest: serde_json::to_vec(&manifest).unwrap(),
                ..Default::default()
            })
            .unwrap();
    }

    /// Takes sliced savepoint `name` of `slices` slices, slice `i` at offset `10 + i`.
    fn take(data: &Path, name: &str, slices: usize) -> SavepointInfo {
        let staged = stage_sliced(data, name).unwrap();
        for slice in 0..slices {
            commit(&slice_dir(&staged, slice), 10 + slice as u64, 100);
        }
        commit_sliced(data, name).unwrap()
    }

    #[test]
    fn a_sliced_savepoint_is_listed_with_each_slice_and_deleted_whole() {
        let dir = tempfile::tempdir().unwrap();
        commit(dir.path(), 5, 1);
        let saved = take(dir.path(), "mid", 3);
        assert_eq!(saved.slices.len(), 3);
        assert_eq!(saved.manifest.events, 300, "summed");
        assert_eq!(saved.manifest.watermark, 100, "the lowest slice's");
        let listing = list_savepoints(dir.path()).unwrap();
        assert_eq!(listing.saved, [saved]);
        // The name is taken for either kind; a one-process savepoint lists beside it.
        assert!(matches!(
            create_savepoint(dir.path(), "mid"),
            Err(SavepointError::Exists(_))
        ));
        assert!(matches!(
            stage_sliced(dir.path(), "mid"),
            Err(SavepointError::Exists(_))
        ));
        create_savepoint(dir.path(), "whole").unwrap();
        let names: Vec<String> = (list_savepoints(dir.path()).unwrap().saved.iter())
            .map(|s| s.name.clone())
            .collect();
        assert_eq!(names, ["mid", "whole"]);
        // A savepoint of slices does not stand for one process's state.
        let target = tempfile::tempdir().unwrap();
        assert!(matches!(
            fork_savepoint(dir.path(), "mid", &target.path().join("x"), "q"),
            Err(SavepointError::Sliced(_))
        ));
        delete_savepoint(dir.path(), "mid").unwrap();
        assert!(!sliced_path(dir.path(), "mid").exists());
        assert!(matches!(
            delete_savepoint(dir.path(), "mid"),
            Err(SavepointError::Unknown { .. })
        ));
        assert_eq!(list_savepoints(dir.path()).unwrap().saved.len(), 1);
    }

    #[test]
    fn a_fork_of_a_sliced_savepoint_renames_every_slice_and_empties_its_output() {
        let dir = tempfile::tempdir().unwrap();
        take(dir.path(), "mid", 2);
        let target = tempfile::tempdir().unwrap();
        let saved = fork_sliced(dir.path(), "mid", target.path(), "forked").unwrap();
        assert_eq!(saved.slices[1].as_ref().unwrap().pipeline, "p", "as saved");
        for slice in 0..2 {
            let store = RedbStore::open(&slice_dir(target.path(), slice)).unwrap();
            let manifest: Manifest =
                serde_json::from_slice(&store.manifest().unwrap().unwrap()).unwrap();
            assert_eq!(manifest.pipeline, "forked");
            assert_eq!(manifest.sinks, SinkPositions::default());
            assert_eq!(manifest.source.offset, 10 + slice as u64);
        }
        assert!(matches!(
            fork_sliced(dir.path(), "gone", target.path(), "forked"),
            Err(SavepointError::Unknown { .. })
        ));
    }

    #[test]
    fn a_slice_that_had_read_nothing_is_saved_and_forked_empty() {
        let dir = tempfile::tempdir().unwrap();
        let staged = stage_sliced(dir.path(), "sparse").unwrap();
        commit(&slice_dir(&staged, 0), 10, 100);
        mark_empty(&staged, 1).unwrap();
        commit(&slice_dir(&staged, 2), 12, 50);
        let saved = commit_sliced(dir.path(), "sparse").unwrap();
        assert!(saved.slices[1].is_none(), "{saved:?}");
        assert_eq!(saved.manifest.events, 150);
        let target = tempfile::tempdir().unwrap();
        fork_sliced(dir.path(), "sparse", target.path(), "forked").unwrap();
        assert!(is_empty_slice(target.path(), 1));
        assert!(slice_dir(target.path(), 2).join(STATE_FILE).exists());
        // Every slice empty: nothing saved, so not a savepoint.
        let staged = stage_sliced(dir.path(), "none").unwrap();
        mark_empty(&staged, 0).unwrap();
        assert!(matches!(
            commit_sliced(dir.path(), "none"),
            Err(SavepointError::Damaged { .. })
        ));
        assert!(
            !staging(dir.path(), "none").exists(),
            "the staging is removed"
        );
    }

    #[test]
    fn a_missing_slice_is_damaged_and_leftovers_of_a_crash_are_never_listed_and_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        take(dir.path(), "gap", 3);
        std::fs::remove_dir_all(slice_dir(&sliced_path(dir.path(), "gap"), 1)).unwrap();
        let listing = list_savepoints(dir.path()).unwrap();
        assert_eq!(listing.damaged.len(), 1, "{listing:?}");
        assert!(listing.damaged[0].1.contains("slice 1"), "{listing:?}");
        assert_eq!(
            listing.lowest_offset(),
            Some(0),
            "what cannot be read keeps all"
        );
        // A take that died before it was put in place, and a delete that died mid-removal.
        let staged = stage_sliced(dir.path(), "half").unwrap();
        commit(&slice_dir(&staged, 0), 3, 1);
        take(dir.path(), "away", 1);
        let path = sliced_path(dir.path(), "away");
        let deleting = dir.path().join("savepoints/away.slices.deleting");
        std::fs::rename(&path, &deleting).unwrap();
        let names: Vec<String> = (list_savepoints(dir.path()).unwrap().saved.iter())
            .map(|s| s.name.clone())
            .collect();
        assert!(names.is_empty(), "{names:?}");
        remove_leftover_copies(dir.path());
        assert!(!staged.exists() && !deleting.exists());
        assert_eq!(list_savepoints(dir.path()).unwrap().damaged.len(), 1);
    }
}
