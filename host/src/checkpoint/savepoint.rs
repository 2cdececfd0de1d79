//! Savepoints: named, consistent copies of a data directory's last checkpoint (state, windows,
//! source and output positions), kept in `<data dir>/savepoints/<name>.redb`. They are taken
//! offline (`weir savepoint create`), or by a running pipeline right after a checkpoint commits
//! (`POST /v1/pipelines/{name}/savepoints`). Restoring one replaces the state file; the next run
//! resumes from it, with its output truncated back to the savepoint's positions. A savepoint can
//! also seed another pipeline's directory ([`fork_savepoint`]): renamed to it, with empty
//! output. The operator version may differ from the one that wrote it.
//!
//! A savepoint file is written once (beside its final name, then renamed into place) and only
//! read after that: listing, forking and restoring open it read-only, without a lock that would
//! keep another reader out and without ever creating it, so any number of callers may look at
//! once, and a look racing a delete finds the savepoint gone rather than bringing it back.
//!
//! Depends on `fsutil`, `names` and `state`.

use std::path::{Path, PathBuf};

use super::{MARKER_FILE, Manifest, SinkPositions, sliced, write_marker};
use crate::state::{RedbStore, StateError, redb_backend::STATE_FILE};

/// The most savepoints one data directory keeps: each is a full copy of the state (and, for a
/// served pipeline, holds its ingest log from its offset on).
pub const MAX_SAVEPOINTS: usize = 32;

/// Savepoint failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SavepointError {
    /// The store failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The name is not usable.
    #[error(transparent)]
    BadName(crate::names::NameError),
    /// Nothing to save.
    #[error("data directory {0} has no committed checkpoint to save: run the pipeline first")]
    NoCheckpoint(PathBuf),
    /// The name is taken.
    #[error("savepoint {0:?} already exists")]
    Exists(String),
    /// The name is unknown.
    #[error("there is no savepoint {name:?}; listing the savepoints shows them")]
    Unknown {
        /// The name.
        name: String,
    },
    /// A manifest could not be read.
    #[error("savepoint {0}: its manifest is unreadable")]
    Manifest(PathBuf),
    /// The savepoint's file cannot be read.
    #[error("savepoint {name:?} is damaged ({reason}): delete it and take another")]
    Damaged {
        /// The name.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The checkpoint the savepoint was to copy was not taken: the run failed or stopped first.
    #[error("the savepoint was not taken: {reason}")]
    NotTaken {
        /// Why.
        reason: String,
        /// Whether the disk was full.
        disk_full: bool,
    },
    /// The directory holds as many savepoints as allowed.
    #[error("the pipeline holds {MAX_SAVEPOINTS} savepoints already: delete one first")]
    Full,
    /// The savepoint is of a pipeline cut into slices, where one process's state was expected.
    #[error(
        "savepoint {0:?} holds a pipeline on workers, cut into slices: it seeds a pipeline on \
         workers with as many slices"
    )]
    Sliced(String),
}

/// What `list` shows of a savepoint.
#[derive(Debug, Clone, PartialEq)]
pub struct SavepointInfo {
    /// Its name.
    pub name: String,
    /// The checkpoint it copies.
    pub manifest: Manifest,
    /// Its size on disk.
    pub bytes: u64,
    /// A pipeline cut into slices (on workers): each slice's manifest, by slice, `None` for a
    /// slice that had read nothing (`manifest` is then their summary: the first slice's, with
    /// the events summed and the lowest watermark). Empty for one process's savepoint.
    pub slices: Vec<Option<Manifest>>,
}

/// What [`list_savepoints`] finds in a data directory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Listing {
    /// The savepoints that can be read, by name.
    pub saved: Vec<SavepointInfo>,
    /// Those whose files cannot be read, by name, with what is wrong.
    pub damaged: Vec<(String, String)>,
}

impl Listing {
    /// How many savepoints there are, damaged or not.
    pub fn len(&self) -> usize {
        self.saved.len() + self.damaged.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The lowest input offset that a savepoint needs kept: `Some(0)` when a damaged one hides
    /// its own (what cannot be read must keep everything), `None` when there is none.
    pub fn lowest_offset(&self) -> Option<u64> {
        if !self.damaged.is_empty() {
            return Some(0);
        }
        self.saved.iter().map(|s| s.manifest.source.offset).min()
    }

    /// Savepoint `name`: unknown, damaged, or found.
    pub fn find(&self, name: &str) -> Result<&SavepointInfo, SavepointError> {
        if let Some((_, reason)) = self.damaged.iter().find(|(n, _)| n == name) {
            return Err(SavepointError::Damaged {
                name: name.into(),
                reason: reason.clone(),
            });
        }
        (self.saved.iter().find(|s| s.name == name))
            .ok_or_else(|| SavepointError::Unknown { name: name.into() })
    }
}

impl SavepointError {
    /// Whether the disk (or quota) was full.
    pub fn is_disk_full(&self) -> bool {
        match self {
            SavepointError::State(StateError::DiskFull(_)) => true,
            SavepointError::Io { source, .. } => crate::fsutil::is_disk_full(source),
            SavepointError::NotTaken { disk_full, .. } => *disk_full,
            _ => false,
        }
    }
}

pub(super) fn check_name(name: &str) -> Result<(), SavepointError> {
    crate::names::check("savepoint name", name).map_err(SavepointError::BadName)
}

fn savepoint_path(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join("savepoints").join(format!("{name}.redb"))
}

fn read_manifest(store: &RedbStore) -> Result<Option<Manifest>, SavepointError> {
    match store.manifest()? {
        Some(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|_| SavepointError::Manifest(store.path().to_owned())),
        None => Ok(None),
    }
}

/// The manifest of savepoint `name`, whose file is `path`, read without locking or creating the
/// file: `Ok(None)` if it was deleted meanwhile.
pub(super) fn read_saved(path: &Path, name: &str) -> Result<Option<Manifest>, SavepointError> {
    let damaged = |reason: String| SavepointError::Damaged {
        name: name.into(),
        reason,
    };
    let bytes = match RedbStore::read_manifest_of(path) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Err(damaged("it holds no checkpoint".into())),
        Err(StateError::Missing(_)) => return Ok(None),
        // The reason as text: a listing of savepoints shows each damaged one with its reason.
        Err(StateError::Damaged { source, .. }) => return Err(damaged(source.to_string())),
        // Could not be read now (file descriptors, permissions, I/O): not known to be damaged.
        Err(e) => return Err(e.into()),
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| damaged(format!("its manifest is unreadable: {e}")))
}

/// Refuses a name taken (by either kind of savepoint) and a directory holding as many
/// savepoints as allowed.
pub(super) fn check_room(data_dir: &Path, name: &str) -> Result<(), SavepointError> {
    if savepoint_path(data_dir, name).exists() || sliced::sliced_path(data_dir, name).exists() {
        return Err(SavepointError::Exists(name.into()));
    }
    if list_savepoints(data_dir)?.len() >= MAX_SAVEPOINTS {
        return Err(SavepointError::Full);
    }
    Ok(())
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// Saves the data directory's last committed checkpoint as `name`. The pipeline must not be
/// running (the state file is locked while it is).
pub fn create_savepoint(data_dir: &Path, name: &str) -> Result<SavepointInfo, SavepointError> {
    check_name(name)?;
    let store = RedbStore::open(data_dir)?;
    save_from(&store, data_dir, name)
}

/// Saves the last checkpoint committed to `store` (the store of the pipeline whose data
/// directory is `data_dir`, open or running) as `name`: a read of the last commit, so a running
/// pipeline goes on committing meanwhile.
pub fn save_from(
    store: &RedbStore,
    data_dir: &Path,
    name: &str,
) -> Result<SavepointInfo, SavepointError> {
    check_name(name)?;
    let manifest =
        read_manifest(store)?.ok_or_else(|| SavepointError::NoCheckpoint(data_dir.to_owned()))?;
    check_room(data_dir, name)?;
    let path = savepoint_path(data_dir, name);
    let dir = path.parent().expect("savepoints have a directory");
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| SavepointError::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let partial = path.with_extension("redb.partial");
    let _ = std::fs::remove_file(&partial);
    // A copy that fails (a full disk) leaves nothing behind to fill it further.
    let copied = store
        .copy_to(&partial)
        .map_err(SavepointError::from)
        .and_then(|()| {
            crate::fsutil::crash_point("savepoint-copied");
            std::fs::rename(&partial, &path).map_err(io(&path))
        });
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    Ok(SavepointInfo {
        name: name.into(),
        manifest,
        bytes: file_size(&path),
        slices: Vec::new(),
    })
}

/// Deletes savepoint `name` (damaged or not, of one process or sliced).
pub fn delete_savepoint(data_dir: &Path, name: &str) -> Result<(), SavepointError> {
    check_name(name)?;
    let path = savepoint_path(data_dir, name);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match sliced::delete_sliced(data_dir, name)? {
                true => Ok(()),
                false => Err(SavepointError::Unknown { name: name.into() }),
            }
        }
        Err(source) => Err(SavepointError::Io { path, source }),
    }
}

/// Savepoint `name`'s file and manifest, read without locking it (unknown if it is not there).
fn existing(data_dir: &Path, name: &str) -> Result<(PathBuf, Manifest), SavepointError> {
    let path = savepoint_path(data_dir, name);
    match read_saved(&path, name)? {
        Some(manifest) => Ok((path, manifest)),
        None if sliced::sliced_path(data_dir, name).exists() => {
            Err(SavepointError::Sliced(name.into()))
        }
        None => Err(SavepointError::Unknown { name: name.into() }),
    }
}

/// Copies savepoint file `from` (of savepoint `name`) to `to`: a savepoint deleted meanwhile is
/// unknown.
fn copy_saved(from: &Path, to: &Path, name: &str) -> Result<(), SavepointError> {
    match std::fs::copy(from, to) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !from.exists() => {
            Err(SavepointError::Unknown { name: name.into() })
        }
        Err(source) => Err(SavepointError::Io {
            path: to.to_owned(),
            source,
        }),
    }
}

/// Makes savepoint `name` of `data_dir` the state of another pipeline, `pipeline`, whose data
/// directory `target` is new: its manifest is renamed to that pipeline and its output
/// positions set to zero (the new pipeline's output starts empty and continues from the
/// savepoint). Returns the savepoint as saved (its positions in the original pipeline).
pub fn fork_savepoint(
    data_dir: &Path,
    name: &str,
    target: &Path,
    pipeline: &str,
) -> Result<SavepointInfo, SavepointError> {
    check_name(name)?;
    let (path, _) = existing(data_dir, name)?;
    let saved = fork_file(&path, name, target, pipeline)?;
    Ok(SavepointInfo {
        name: name.into(),
        manifest: saved,
        bytes: file_size(&path),
        slices: Vec::new(),
    })
}

/// Copies savepoint file `path` (of savepoint `name`) into the new data directory `target` as
/// pipeline `pipeline`'s state, renamed to it with its output positions set to zero; the
/// manifest as saved.
pub(super) fn fork_file(
    path: &Path,
    name: &str,
    target: &Path,
    pipeline: &str,
) -> Result<Manifest, SavepointError> {
    std::fs::create_dir_all(target).map_err(|source| SavepointError::Io {
        path: target.to_owned(),
        source,
    })?;
    let state = target.join(STATE_FILE);
    copy_saved(path, &state, name)?;
    let store = RedbStore::open(target)?;
    let saved = read_manifest(&store)?.ok_or_else(|| SavepointError::Manifest(path.to_owned()))?;
    let forked = Manifest {
        pipeline: pipeline.to_owned(),
        sinks: SinkPositions::default(),
        ..saved.clone()
    };
    store.set_manifest(&serde_json::to_vec(&forked).expect("manifests serialise"))?;
    drop(store);
    write_marker(target, forked.id).map_err(|e| SavepointError::Io {
        path: target.join(MARKER_FILE),
        source: std::io::Error::other(e),
    })?;
    Ok(saved)
}

/// The savepoints of a data directory, by name, and those that cannot be read. Opens no file
/// for writing and locks none against other readers; a savepoint deleted while it is listed is
/// left out. Fails only when the directory itself cannot be read.
pub fn list_savepoints(data_dir: &Path) -> Result<Listing, SavepointError> {
    let dir = data_dir.join("savepoints");
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Listing::default()),
        Err(source) => return Err(SavepointError::Io { path: dir, source }),
    };
    let mut listing = Listing::default();
    for entry in entries {
        let path = entry
            .map_err(|source| SavepointError::Io {
                path: dir.clone(),
                source,
            })?
            .path();
        let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let (name, is_sliced) = match (
            file_name.strip_suffix(".redb"),
            sliced::sliced_name(file_name),
        ) {
            (Some(name), _) => (name, false),
            (None, Some(name)) => (name, true),
            // A copy being made (`.partial`), or not a savepoint.
            (None, None) => continue,
        };
        if crate::names::check("savepoint name", name).is_err() {
            continue; // not a savepoint (not a name)
        }
        let read = match is_sliced {
            true => sliced::read_sliced(&path, name),
            false => read_saved(&path, name).map(|manifest| {
                manifest.map(|manifest| SavepointInfo {
                    name: name.into(),
                    manifest,
                    bytes: file_size(&path),
                    slices: Vec::new(),
                })
            }),
        };
        match read {
            Ok(Some(info)) => listing.saved.push(info),
            Ok(None) => {} // deleted while listed
            Err(SavepointError::Damaged { name, reason }) => listing.damaged.push((name, reason)),
            Err(e) => return Err(e),
        }
    }
    listing.saved.sort_by(|a, b| a.name.cmp(&b.name));
    listing.damaged.sort();
    Ok(listing)
}

/// Removes the copies that a savepoint being taken or restored left when the process died
/// (`.partial`, `.restoring`): call only when nothing is being taken in `data_dir`.
pub fn remove_leftover_copies(data_dir: &Path) {
    let leftovers = [
        data_dir.join(format!("{STATE_FILE}.restoring")),
        data_dir.join(format!("{STATE_FILE}.creating")),
    ];
    let entries: Vec<PathBuf> = std::fs::read_dir(data_dir.join("savepoints"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .collect();
    let is_sliced_leftover = |path: &&PathBuf| {
        (path.file_name().and_then(|n| n.to_str())).is_some_and(sliced::is_leftover)
    };
    for path in entries.iter().filter(is_sliced_leftover) {
        match std::fs::remove_dir_all(path) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "removed a sliced copy left by a crash")
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "could not remove a leftover copy")
            }
        }
    }
    let partials = (entries.iter())
        .filter(|path| path.extension().is_some_and(|e| e == "partial") && path.is_file())
        .cloned();
    for path in leftovers.into_iter().chain(partials) {
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::info!(path = %path.display(), "removed a copy left by a crash"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "could not remove a leftover copy")
            }
        }
    }
}

/// Makes savepoint `name` the data directory's current state. The next `weir run` resumes from
/// it.
pub fn restore_savepoint(data_dir: &Path, name: &str) -> Result<SavepointInfo, SavepointError> {
    check_name(name)?;
    let (path, manifest) = existing(data_dir, name)?;
    // Opening the current store takes its lock: refuses while a pipeline runs on it.
    drop(RedbStore::open(data_dir)?);
    let target = data_dir.join(STATE_FILE);
    let partial = data_dir.join(format!("{STATE_FILE}.restoring"));
    copy_saved(&path, &partial, name)?;
    std::fs::File::open(&partial)
        .and_then(|file| file.sync_all())
        .map_err(|source| SavepointError::Io {
            path: partial.clone(),
            source,
        })?;
    std::fs::rename(&partial, &target).map_err(|source| SavepointError::Io {
        path: target.clone(),
        source,
    })?;
    write_marker(data_dir, manifest.id).map_err(|e| SavepointError::Io {
        path: data_dir.join(MARKER_FILE),
        source: std::io::Error::other(e),
    })?;
    Ok(SavepointInfo {
        name: name.into(),
        manifest,
        bytes: file_size(&path),
        slices: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StoredCheckpoint;

    /// A data directory whose last checkpoint read the input to `offset`.
    fn checkpointed(offset: u64) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let manifest = Manifest {
            format: super::super::manifest::MANIFEST_FORMAT,
            id: 1,
            pipeline: "p".into(),
            fingerprint: "f".into(),
            source: crate::source::SourcePosition {
                offset,
                ..Default::default()
            },
            events: 10,
            watermark: i64::MIN,
            partitions: Vec::new(),
            finished: false,
            sinks: SinkPositions::default(),
            committed_at_ms: 0,
            routing: None,
        };
        let store = RedbStore::open(dir.path()).unwrap();
        store
            .commit(&StoredCheckpoint {
                id: 1,
                manifest: serde_json::to_vec(&manifest).unwrap(),
                ..Default::default()
            })
            .unwrap();
        dir
    }

    #[test]
    fn listings_racing_each_other_and_deletes_never_fail_nor_bring_a_savepoint_back() {
        let dir = checkpointed(100);
        let data = dir.path().to_owned();
        for round in 0..20 {
            let name = format!("sp{round}");
            create_savepoint(&data, &name).unwrap();
            let listers: Vec<_> = (0..3)
                .map(|_| {
                    let data = data.clone();
                    std::thread::spawn(move || {
                        for _ in 0..10 {
                            let listing = list_savepoints(&data).expect("a listing never fails");
                            assert!(listing.damaged.is_empty(), "{listing:?}");
                        }
                    })
                })
                .collect();
            delete_savepoint(&data, &name).unwrap();
            for lister in listers {
                lister.join().unwrap();
            }
            assert!(!savepoint_path(&data, &name).exists(), "{name} came back");
        }
        assert!(list_savepoints(&data).unwrap().is_empty());
    }

    #[test]
    fn a_damaged_savepoint_is_listed_apart_and_keeps_everything() {
        let dir = checkpointed(100);
        create_savepoint(dir.path(), "good").unwrap();
        let listing = list_savepoints(dir.path()).unwrap();
        assert_eq!(listing.lowest_offset(), Some(100));
        std::fs::write(savepoint_path(dir.path(), "empty"), b"").unwrap();
        std::fs::write(savepoint_path(dir.path(), "junk"), b"not a store").unwrap();
        std::fs::write(savepoint_path(dir.path(), "_not-a-name"), b"x").unwrap();
        let listing = list_savepoints(dir.path()).unwrap();
        let damaged: Vec<&str> = listing.damaged.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(damaged, ["empty", "junk"], "{listing:?}");
        assert_eq!(listing.saved.len(), 1);
        assert_eq!(
            listing.lowest_offset(),
            Some(0),
            "what cannot be read keeps all"
        );
        assert!(matches!(
            listing.find("junk"),
            Err(SavepointError::Damaged { .. })
        ));
        assert!(matches!(
            listing.find("gone"),
            Err(SavepointError::Unknown { .. })
        ));
        assert!(listing.find("good").is_ok());
        delete_savepoint(dir.path(), "junk").unwrap();
        delete_savepoint(dir.path(), "empty").unwrap();
        assert_eq!(
            list_savepoints(dir.path()).unwrap().lowest_offset(),
            Some(100)
        );
        assert!(matches!(
            delete_savepoint(dir.path(), "junk"),
            Err(SavepointError::Unknown { .. })
        ));
    }

    #[test]
    fn a_copy_left_by_a_crash_is_never_listed_and_is_removed() {
        let dir = checkpointed(7);
        std::fs::create_dir_all(dir.path().join("savepoints")).unwrap();
        let partial = dir.path().join("savepoints/half.redb.partial");
        std::fs::write(&partial, b"half a copy").unwrap();
        assert!(list_savepoints(dir.path()).unwrap().is_empty());
        remove_leftover_copies(dir.path());
        assert!(!partial.exists());
        create_savepoint(dir.path(), "half").unwrap();
        assert_eq!(list_savepoints(dir.path()).unwrap().saved[0].name, "half");
    }
}
