//! Savepoints: named, consistent copies of a data directory's last checkpoint (state, windows,
//! source and output positions), kept in `<data dir>/savepoints/<name>.redb`. They are taken
//! offline (`weir savepoint create`), or by a running pipeline right after a checkpoint commits
//! (`POST /v1/pipelines/{name}/savepoints`). Restoring one replaces the state file; the next run
//! resumes from it, with its output truncated back to the savepoint's positions. A savepoint can
//! also seed another pipeline's directory ([`fork_savepoint`]): renamed to it, with empty
//! output. The operator version may differ from the one that wrote it.

use std::path::{Path, PathBuf};

use super::{MARKER_FILE, Manifest, SinkPositions, write_marker};
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
    #[error("there is no savepoint {name:?} in {dir}; `weir savepoint list` shows them")]
    Unknown {
        /// The name.
        name: String,
        /// The savepoints directory.
        dir: PathBuf,
    },
    /// A manifest could not be read.
    #[error("savepoint {0}: its manifest is unreadable")]
    Manifest(PathBuf),
    /// The directory holds as many savepoints as allowed.
    #[error("{0} holds {MAX_SAVEPOINTS} savepoints already: delete one first")]
    Full(PathBuf),
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
}

fn check_name(name: &str) -> Result<(), SavepointError> {
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
    let path = savepoint_path(data_dir, name);
    if path.exists() {
        return Err(SavepointError::Exists(name.into()));
    }
    let dir = path.parent().expect("savepoints have a directory");
    if list_savepoints(data_dir)?.len() >= MAX_SAVEPOINTS {
        return Err(SavepointError::Full(dir.to_owned()));
    }
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
        .and_then(|()| std::fs::rename(&partial, &path).map_err(io(&path)));
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    Ok(SavepointInfo {
        name: name.into(),
        manifest,
        bytes,
    })
}

/// Deletes savepoint `name`.
pub fn delete_savepoint(data_dir: &Path, name: &str) -> Result<(), SavepointError> {
    check_name(name)?;
    let path = existing(data_dir, name)?;
    std::fs::remove_file(&path).map_err(|source| SavepointError::Io { path, source })
}

/// The file of savepoint `name`, which must exist.
fn existing(data_dir: &Path, name: &str) -> Result<PathBuf, SavepointError> {
    let path = savepoint_path(data_dir, name);
    if !path.exists() {
        return Err(SavepointError::Unknown {
            name: name.into(),
            dir: data_dir.join("savepoints"),
        });
    }
    Ok(path)
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
    let path = existing(data_dir, name)?;
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| SavepointError::Io { path, source }
    };
    std::fs::create_dir_all(target).map_err(io(target))?;
    let state = target.join(STATE_FILE);
    std::fs::copy(&path, &state).map_err(io(&state))?;
    let store = RedbStore::open(target)?;
    let saved = read_manifest(&store)?.ok_or_else(|| SavepointError::Manifest(path.clone()))?;
    let forked = Manifest {
        pipeline: pipeline.to_owned(),
        sinks: SinkPositions::default(),
        ..saved.clone()
    };
    store.set_manifest(&serde_json::to_vec(&forked).expect("manifests serialise"))?;
    drop(store);
    write_marker(target, forked.id).map_err(|e| SavepointError::Io {
        path: target.join(MARKER_FILE),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(SavepointInfo {
        name: name.into(),
        manifest: saved,
        bytes: std::fs::metadata(&path).map_or(0, |m| m.len()),
    })
}

/// The savepoints of a data directory, by name.
pub fn list_savepoints(data_dir: &Path) -> Result<Vec<SavepointInfo>, SavepointError> {
    let dir = data_dir.join("savepoints");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|source| SavepointError::Io {
                path: dir.clone(),
                source,
            })?
            .path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".redb"))
        else {
            continue;
        };
        let store = RedbStore::open_file(&path)?;
        let manifest =
            read_manifest(&store)?.ok_or_else(|| SavepointError::Manifest(path.clone()))?;
        out.push(SavepointInfo {
            name: name.into(),
            manifest,
            bytes: std::fs::metadata(&path).map_or(0, |m| m.len()),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Makes savepoint `name` the data directory's current state. The next `weir run` resumes from
/// it.
pub fn restore_savepoint(data_dir: &Path, name: &str) -> Result<SavepointInfo, SavepointError> {
    check_name(name)?;
    let path = existing(data_dir, name)?;
    let manifest = {
        let saved = RedbStore::open_file(&path)?;
        read_manifest(&saved)?.ok_or_else(|| SavepointError::Manifest(path.clone()))?
    };
    // Opening the current store takes its lock: refuses while a pipeline runs on it.
    drop(RedbStore::open(data_dir)?);
    let target = data_dir.join(STATE_FILE);
    let partial = data_dir.join(format!("{STATE_FILE}.restoring"));
    std::fs::copy(&path, &partial).map_err(|source| SavepointError::Io {
        path: partial.clone(),
        source,
    })?;
    std::fs::rename(&partial, &target).map_err(|source| SavepointError::Io {
        path: target.clone(),
        source,
    })?;
    let marker = data_dir.join(MARKER_FILE);
    std::fs::write(&marker, manifest.id.to_string()).map_err(|source| SavepointError::Io {
        path: marker,
        source,
    })?;
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    Ok(SavepointInfo {
        name: name.into(),
        manifest,
        bytes,
    })
}
