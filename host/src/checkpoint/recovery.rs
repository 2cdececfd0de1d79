//! Recovery: opening a data directory and choosing the checkpoint a run resumes from. A state
//! file that is replaced, emptied or rolled back (its manifest older than the marker), or that
//! holds another pipeline or another key, window or operator chain, is refused with what to do,
//! never taken for a fresh start. Also the commit's last step, the marker.
//!
//! Depends on `fsutil`, `spec` and `state`.

use std::path::{Path, PathBuf};

use super::{MARKER_FILE, Manifest, fingerprint};
use crate::spec::PipelineSpec;
use crate::state::{RedbStore, StateError};

/// Why a checkpoint could not be recovered or committed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// The state store failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The data directory does not match the pipeline or is damaged.
    #[error("data directory {dir}: {message}")]
    Damaged {
        /// The data directory.
        dir: PathBuf,
        /// What is wrong and what to do.
        message: String,
    },
    /// A row of the checkpoint cannot be restored.
    #[error("data directory {dir}: {what}{source}")]
    Row {
        /// The data directory.
        dir: PathBuf,
        /// Where the row is (empty, or the part of the pipeline followed by ": ").
        what: &'static str,
        /// What is wrong with it.
        source: crate::state::RowError,
    },
    /// The checkpoint marker could not be written.
    #[error("cannot write {path}: {source}")]
    Marker {
        /// The marker file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// `Result` for recovery and commits.
pub type Result<T, E = CheckpointError> = std::result::Result<T, E>;

/// Opens the data directory and reads the checkpoint to resume from, if any.
#[tracing::instrument(name = "recovery", skip_all, fields(pipeline = %spec.name, dir = %dir.display(), fresh))]
pub fn recover(
    dir: &Path,
    spec: &PipelineSpec,
    fresh: bool,
) -> Result<(RedbStore, Option<Manifest>)> {
    let fail = |message: String| CheckpointError::Damaged {
        dir: dir.to_owned(),
        message,
    };
    let store = RedbStore::open(dir)?;
    let marker_path = dir.join(MARKER_FILE);
    if fresh {
        store.clear()?;
        let _ = std::fs::remove_file(&marker_path);
        return Ok((store, None));
    }
    let marker = match std::fs::read_to_string(&marker_path) {
        Ok(text) => Some(
            text.trim()
                .parse::<u64>()
                .map_err(|_| fail(format!("{MARKER_FILE} is unreadable")))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(fail(format!("cannot read {MARKER_FILE}: {e}"))),
    };
    let manifest: Option<Manifest> = match store.manifest()? {
        Some(bytes) => Some(
            serde_json::from_slice(&bytes)
                .map_err(|e| fail(format!("the checkpoint manifest is unreadable ({e})")))?,
        ),
        None => None,
    };
    match (marker, &manifest) {
        (Some(committed), None) => {
            return Err(fail(format!(
                "checkpoint {committed} was committed here, but {} holds no checkpoint: it was replaced or \
                 damaged. Restore it (or a savepoint), or start over with `weir run --fresh`",
                store.path().display()
            )));
        }
        (Some(committed), Some(m)) if m.id < committed => {
            return Err(fail(format!(
                "checkpoint {committed} was committed here, but {} holds only checkpoint {}: it was rolled \
                 back or replaced. Restore it, or start over with `weir run --fresh`",
                store.path().display(),
                m.id
            )));
        }
        _ => {}
    }
    match &manifest {
        None => store.clear()?, // leftovers of a run that never committed
        Some(m) if m.pipeline != spec.name => {
            return Err(fail(format!(
                "it holds pipeline {:?}, not {:?}: use another `[state] dir`, or `--fresh` to start over",
                m.pipeline, spec.name
            )));
        }
        Some(m) if m.fingerprint != fingerprint(spec) => {
            return Err(fail(format!(
                "its checkpoint was taken with a different key, timestamp, watermark, window or operator \
                 chain ({}); now: {}. Changing them needs a fresh start (`--fresh`); operator versions may change",
                m.fingerprint,
                fingerprint(spec)
            )));
        }
        Some(_) => {}
    }
    Ok((store, manifest))
}

/// Records that checkpoint `id` is committed in `dir` (after its redb transaction): durably,
/// like the commit it marks, since a marker lost to a power cut would make the next start take
/// the state for a rolled-back one.
pub fn write_marker(dir: &Path, id: u64) -> Result<()> {
    let marker = dir.join(MARKER_FILE);
    crate::fsutil::write_atomic(&marker, id.to_string().as_bytes()).map_err(|source| {
        CheckpointError::Marker {
            path: marker,
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, size: &str) -> PipelineSpec {
        let text = format!(
            "name = \"{name}\"\n[source]\ntype = \"stdin\"\n[event]\nkey = \"k\"\ntimestamp = \"t\"\n\
             [window]\ntype = \"tumbling\"\nsize = \"{size}\"\n[[operators]]\nname = \"c\"\n\
             kind = \"aggregate\"\nnative = \"count-sum\"\n"
        );
        PipelineSpec::parse(&text, false, Path::new(".")).unwrap()
    }

    /// Commits an (empty) checkpoint `id` of `spec` in `dir`, with its marker.
    fn commit(dir: &Path, spec: &PipelineSpec, id: u64) {
        let store = RedbStore::open(dir).unwrap();
        let manifest = serde_json::json!({
            "format": 1, "id": id, "pipeline": spec.name, "fingerprint": fingerprint(spec),
            "source": {"line": 0, "offset": 0}, "events": 0, "watermark": 0, "finished": false,
            "sinks": {"results": 0, "late": 0, "dead_letters": 0}, "committed_at_ms": 0
        });
        let stored = crate::state::StoredCheckpoint {
            id,
            manifest: manifest.to_string().into_bytes(),
            ..Default::default()
        };
        store.commit(&stored).unwrap();
        write_marker(dir, id).unwrap();
    }

    #[test]
    fn an_empty_directory_starts_fresh_and_a_committed_one_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let spec = spec("p", "1m");
        assert!(recover(dir.path(), &spec, false).unwrap().1.is_none());
        commit(dir.path(), &spec, 3);
        let (_, manifest) = recover(dir.path(), &spec, false).unwrap();
        assert_eq!(manifest.map(|m| m.id), Some(3));
        assert!(
            recover(dir.path(), &spec, true).unwrap().1.is_none(),
            "--fresh"
        );
        assert!(
            !dir.path().join(MARKER_FILE).exists(),
            "--fresh removes the marker"
        );
    }

    #[test]
    fn refuses_another_pipeline_another_window_and_a_rolled_back_state() {
        let dir = tempfile::tempdir().unwrap();
        let spec_p = spec("p", "1m");
        commit(dir.path(), &spec_p, 1);
        let err = recover(dir.path(), &spec("q", "1m"), false).unwrap_err();
        assert!(err.to_string().contains("holds pipeline \"p\""), "{err}");
        let err = recover(dir.path(), &spec("p", "2m"), false).unwrap_err();
        assert!(
            err.to_string().contains("different key, timestamp"),
            "{err}"
        );
        write_marker(dir.path(), 5).unwrap();
        let err = recover(dir.path(), &spec_p, false).unwrap_err();
        assert!(err.to_string().contains("rolled back"), "{err}");
    }

    #[test]
    fn a_marker_without_a_checkpoint_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_marker(dir.path(), 2).unwrap();
        let err = recover(dir.path(), &spec("p", "1m"), false).unwrap_err();
        assert!(err.to_string().contains("holds no checkpoint"), "{err}");
    }
}
