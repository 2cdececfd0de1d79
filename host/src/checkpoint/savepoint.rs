//! Savepoints: named, consistent copies of a data directory's last checkpoint (state, windows,
//! source and output positions), kept in `<data dir>/savepoints/<name>.redb`. Restoring one
//! replaces the state file; the next `weir run` resumes from it, with its output truncated back
//! to the savepoint's positions. The operator version may differ from the one that wrote it.

use std::path::{Path, PathBuf};

use super::{MARKER_FILE, Manifest};
use crate::state::{RedbStore, StateError, redb_backend::STATE_FILE};

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
}

/// What `list` shows of a savepoint.
#[derive(Debug, Clone, PartialEq)]
pub struct SavepointInfo {
    /// Its name.
    pub name: String,
    /// The checkpoint it copies.
    pub manifest: Manifest,
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
    let manifest =
        read_manifest(&store)?.ok_or_else(|| SavepointError::NoCheckpoint(data_dir.to_owned()))?;
    let path = savepoint_path(data_dir, name);
    if path.exists() {
        return Err(SavepointError::Exists(name.into()));
    }
    let dir = path.parent().expect("savepoints have a directory");
    std::fs::create_dir_all(dir).map_err(|source| SavepointError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let partial = path.with_extension("redb.partial");
    store.copy_to(&partial)?;
    std::fs::rename(&partial, &path).map_err(|source| SavepointError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(SavepointInfo {
        name: name.into(),
        manifest,
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
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Makes savepoint `name` the data directory's current state. The next `weir run` resumes from
/// it.
pub fn restore_savepoint(data_dir: &Path, name: &str) -> Result<SavepointInfo, SavepointError> {
    check_name(name)?;
    let path = savepoint_path(data_dir, name);
    if !path.exists() {
        return Err(SavepointError::Unknown {
            name: name.into(),
            dir: data_dir.join("savepoints"),
        });
    }
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
    Ok(SavepointInfo {
        name: name.into(),
        manifest,
    })
}
