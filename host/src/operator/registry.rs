//! [`Registry`]: uploaded operator components, by name and version. Components are stored by
//! digest, `<data dir>/operators/blobs/<sha256 hex>.wasm`, and each version's metadata (with that
//! digest) in `<data dir>/operators/<name>/<version>.json`; a component is checked against its
//! digest every time it is loaded, so a swapped file is refused, never run. Uploads are validated
//! (size, a real component, one of Weir's worlds, imports Weir provides) before anything is
//! written; versions are immutable, for ever: a deleted version leaves a tombstone
//! (`<name>/<version>.deleted`, with its digest), and the version can be uploaded again only
//! with the same bytes. A damaged metadata file is reported and skipped: the rest of the
//! registry stays usable.
//!
//! Depends on `fsutil`, `names`, `spec` and `time`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::{Deserialize, Serialize};
use tracing::warn;

use super::{ComponentKind, LoadError, WasmOperator, WasmRuntime, digest_of};
use crate::names::{self, NameError};

/// Registry failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The upload is not a usable component.
    #[error(transparent)]
    Invalid(#[from] LoadError),
    /// A name or version is not a valid name.
    #[error(transparent)]
    BadName(#[from] NameError),
    /// The name is the registry's own.
    #[error("operator name {0:?} is reserved by the registry; choose another")]
    Reserved(String),
    /// Versions are immutable.
    #[error(
        "operator {name} version {version} exists already: versions are immutable, upload a new version"
    )]
    Exists {
        /// Name.
        name: String,
        /// Version.
        version: String,
    },
    /// The version was deleted, and these bytes are not the ones it had.
    #[error(
        "operator {name} version {version} was deleted, and a version never changes: upload these \
         bytes as a new version (the deleted one's digest is {digest})"
    )]
    Deleted {
        /// Name.
        name: String,
        /// Version.
        version: String,
        /// The deleted version's digest (`unknown` when its tombstone cannot be read).
        digest: String,
    },
    /// No such version.
    #[error("there is no operator {name} version {version}; GET /v1/operators lists them")]
    Unknown {
        /// Name.
        name: String,
        /// Version.
        version: String,
    },
    /// The upload is too large.
    #[error("the component is {size} bytes, more than the limit of {limit} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// The uploading token owns as many versions as its quota allows.
    #[error(
        "token {owner:?} owns {limit} operator versions, its quota (max_operators): delete one of them first"
    )]
    Quota {
        /// The token's name.
        owner: String,
        /// Its quota.
        limit: usize,
    },
    /// A group of operators (a tenant's) has as many versions as its quota allows.
    #[error(
        "tenant {group:?} has {limit} operator versions, its quota (max_operators): delete one of them first, or ask a server admin for more"
    )]
    GroupQuota {
        /// The group (the tenant).
        group: String,
        /// Its quota.
        limit: usize,
    },
    /// Reading or writing the registry's files failed.
    #[error("registry storage {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// `Result` for registry operations.
pub type Result<T, E = RegistryError> = std::result::Result<T, E>;

/// One uploaded version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionInfo {
    /// The operator's name.
    pub name: String,
    /// The version.
    pub version: String,
    /// `sha256:<hex>` of the component's bytes.
    pub digest: String,
    /// Size in bytes.
    pub size: u64,
    /// `aggregator` or `enricher`.
    pub world: String,
    /// Upload time, ms since the epoch.
    pub uploaded_at_ms: u64,
    /// The name of the token that uploaded it (counted against that token's quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// What a deleted version leaves: its digest, so that it is never uploaded again with other
/// bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Tombstone {
    name: String,
    version: String,
    digest: String,
    deleted_at_ms: u64,
}

/// The digest of a tombstone that cannot be read: no bytes are taken for its version.
const UNKNOWN_DIGEST: &str = "unknown";

/// The operator registry of a data directory.
pub struct Registry {
    dir: PathBuf,
    runtime: WasmRuntime,
    versions: RwLock<BTreeMap<(String, String), VersionInfo>>,
    /// The digests of deleted versions, by name and version.
    deleted: RwLock<BTreeMap<(String, String), String>>,
    /// Held by an upload or delete while it writes files.
    writing: std::sync::Mutex<()>,
    damaged: Vec<String>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("dir", &self.dir).finish()
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RegistryError + '_ {
    move |source| RegistryError::Io {
        path: path.to_owned(),
        source,
    }
}

impl Registry {
    /// Opens (or creates) the registry in `<data dir>/operators`. Metadata that cannot be read
    /// is reported by [`damaged`](Self::damaged) and left out; only a registry directory that
    /// cannot be listed at all is an error.
    pub fn open(data_dir: &Path, runtime: WasmRuntime) -> Result<Registry> {
        let dir = data_dir.join("operators");
        let blobs = dir.join(BLOBS);
        std::fs::create_dir_all(&blobs).map_err(io(&blobs))?;
        let mut versions = BTreeMap::new();
        let mut deleted = BTreeMap::new();
        let mut damaged = Vec::new();
        for name in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let name = name.map_err(io(&dir))?.path();
            if !name.is_dir() || name == blobs {
                continue;
            }
            for file in std::fs::read_dir(&name).map_err(io(&name))? {
                let file = file.map_err(io(&name))?.path();
                if file.extension().is_some_and(|e| e == TOMBSTONE) {
                    let (key, digest) = read_tombstone(&name, &file);
                    deleted.insert(key, digest);
                } else if file.extension().is_some_and(|e| e == "json") {
                    match read_info(&dir, &file) {
                        Ok(info) => {
                            versions.insert((info.name.clone(), info.version.clone()), info);
                        }
                        Err(reason) => {
                            warn!(file = %file.display(), %reason, "registry entry skipped");
                            damaged.push(format!("{}: {reason}", file.display()));
                        }
                    }
                }
            }
        }
        let registry = Registry {
            dir,
            runtime,
            versions: RwLock::new(versions),
            deleted: RwLock::new(deleted),
            writing: std::sync::Mutex::new(()),
            damaged,
        };
        registry.remove_leftovers();
        Ok(registry)
    }

    /// Removes what an upload or delete cut short by a crash left: half-written files
    /// (`.partial`) and components no version names. Components are kept whole when any
    /// metadata could not be read (it might name them): what cannot be read keeps everything.
    fn remove_leftovers(&self) {
        let named: std::collections::HashSet<PathBuf> = (self.versions.read())
            .expect("registry lock")
            .values()
            .map(|info| self.blob_path(&info.digest))
            .collect();
        let keep_blobs = !self.damaged.is_empty();
        let dirs = std::fs::read_dir(&self.dir).into_iter().flatten().flatten();
        for dir in dirs.map(|entry| entry.path()).filter(|path| path.is_dir()) {
            let is_blobs = dir == self.dir.join(BLOBS);
            for file in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let file = file.path();
                let partial = file.extension().is_some_and(|e| e == "partial");
                let orphan = is_blobs && !keep_blobs && !partial && !named.contains(&file);
                if partial || orphan {
                    match std::fs::remove_file(&file) {
                        Ok(()) => {
                            tracing::info!(file = %file.display(), "registry: removed what an interrupted upload or delete left")
                        }
                        Err(e) => {
                            warn!(file = %file.display(), error = %e, "registry: could not remove a leftover file")
                        }
                    }
                }
            }
        }
    }

    /// The metadata files that could not be read when the registry was opened, with the reason.
    pub fn damaged(&self) -> &[String] {
        &self.damaged
    }

    fn blob_path(&self, digest: &str) -> PathBuf {
        blob_path(&self.dir, digest)
    }

    fn info_path(&self, name: &str, version: &str) -> Result<PathBuf> {
        if name == BLOBS {
            return Err(RegistryError::Reserved(name.to_owned()));
        }
        let dir = names::child("operator name", &self.dir, name)?;
        names::check("operator version", version)?;
        Ok(dir.join(format!("{version}.json")))
    }

    /// How many versions token `owner` uploaded (that still exist).
    pub fn owned_by(&self, owner: &str) -> usize {
        (self.versions.read().expect("registry lock").values())
            .filter(|info| info.owner.as_deref() == Some(owner))
            .count()
    }

    /// Validates and stores a new version, owned by `owner` (a token's name) if given, which may
    /// own at most `quota` versions; with `group` (`(prefix, limit)`), at most `limit` versions
    /// of operators whose names start with `prefix` may exist (a tenant's).
    pub fn upload(
        &self,
        name: &str,
        version: &str,
        bytes: &[u8],
        limit: usize,
        owner: Option<(&str, Option<usize>)>,
        group: Option<(&str, usize)>,
    ) -> Result<VersionInfo> {
        let info_path = self.info_path(name, version)?;
        if bytes.len() > limit {
            return Err(RegistryError::TooLarge {
                size: bytes.len(),
                limit,
            });
        }
        if self.get(name, version).is_some() {
            return Err(RegistryError::Exists {
                name: name.into(),
                version: version.into(),
            });
        }
        let shown = PathBuf::from(format!("{name}@{version}"));
        let kind = self.runtime.kind_of(&shown, bytes)?;
        let info = VersionInfo {
            name: name.into(),
            version: version.into(),
            digest: digest_of(bytes),
            size: bytes.len() as u64,
            world: kind.world().into(),
            uploaded_at_ms: crate::time::wall_clock_ms(),
            owner: owner.map(|(owner, _)| owner.to_owned()),
        };
        // Writers take turns; readers (every pipeline's look-ups) wait only for the insert.
        let _writing = self.writing.lock().expect("registry writer lock");
        if self.get(name, version).is_some() {
            return Err(RegistryError::Exists {
                name: name.into(),
                version: version.into(),
            });
        }
        self.check_not_deleted(name, version, &info.digest)?;
        if let Some((owner, Some(limit))) = owner
            && self.owned_by(owner) >= limit
        {
            return Err(RegistryError::Quota {
                owner: owner.to_owned(),
                limit,
            });
        }
        if let Some((prefix, limit)) = group {
            let held = (self.versions.read().expect("registry lock").values())
                .filter(|info| info.name.starts_with(prefix))
                .count();
            if held >= limit {
                return Err(RegistryError::GroupQuota {
                    group: prefix.trim_end_matches('.').to_owned(),
                    limit,
                });
            }
        }
        let blob = self.blob_path(&info.digest);
        if !blob.exists() {
            crate::fsutil::write_atomic(&blob, bytes).map_err(io(&blob))?;
        }
        crate::fsutil::crash_point("upload-component-written");
        let dir = info_path.parent().expect("a version file has a directory");
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let text = serde_json::to_vec_pretty(&info).expect("version info serialises");
        crate::fsutil::write_atomic(&info_path, &text).map_err(io(&info_path))?;
        self.versions
            .write()
            .expect("registry lock")
            .insert((name.into(), version.into()), info.clone());
        Ok(info)
    }

    /// The component of an upload of `name@version`, checked as an upload is but not stored:
    /// for checks that run it before it is accepted.
    pub fn compile_upload(
        &self,
        name: &str,
        version: &str,
        bytes: &[u8],
    ) -> Result<(WasmOperator, ComponentKind)> {
        let shown = PathBuf::from(format!("{name}@{version}"));
        let kind = self.runtime.kind_of(&shown, bytes)?;
        Ok((self.runtime.load_bytes(&shown, bytes, kind)?, kind))
    }

    /// One version.
    pub fn get(&self, name: &str, version: &str) -> Option<VersionInfo> {
        self.versions
            .read()
            .expect("registry lock")
            .get(&(name.to_owned(), version.to_owned()))
            .cloned()
    }

    /// All versions, by name then version.
    pub fn list(&self) -> Vec<VersionInfo> {
        self.versions
            .read()
            .expect("registry lock")
            .values()
            .cloned()
            .collect()
    }

    /// Refuses bytes of digest `digest` for `name@version` if that version was deleted with
    /// other bytes.
    fn check_not_deleted(&self, name: &str, version: &str, digest: &str) -> Result<()> {
        let deleted = self.deleted.read().expect("registry lock");
        match deleted.get(&(name.to_owned(), version.to_owned())) {
            Some(was) if was != digest => Err(RegistryError::Deleted {
                name: name.into(),
                version: version.into(),
                digest: was.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Deletes a version (the caller checks that no pipeline uses it), leaving its tombstone.
    /// Its component goes too unless another version has the same bytes.
    pub fn delete(&self, name: &str, version: &str) -> Result<()> {
        let info_path = self.info_path(name, version)?;
        let _writing = self.writing.lock().expect("registry writer lock");
        let key = (name.to_owned(), version.to_owned());
        let Some(info) = self.get(name, version) else {
            return Err(RegistryError::Unknown {
                name: name.into(),
                version: version.into(),
            });
        };
        // The tombstone first: a crash before the metadata goes leaves the version there (its
        // tombstone names its own bytes). Then the metadata: once it is gone the version is,
        // even if a crash follows (the component left behind is removed at the next start).
        let tombstone = Tombstone {
            name: name.into(),
            version: version.into(),
            digest: info.digest.clone(),
            deleted_at_ms: crate::time::wall_clock_ms(),
        };
        let tomb_path = info_path.with_extension(TOMBSTONE);
        let text = serde_json::to_vec_pretty(&tombstone).expect("a tombstone serialises");
        crate::fsutil::write_atomic(&tomb_path, &text).map_err(io(&tomb_path))?;
        (self.deleted.write().expect("registry lock")).insert(key.clone(), info.digest.clone());
        crate::fsutil::crash_point("delete-tombstone-written");
        std::fs::remove_file(&info_path).map_err(io(&info_path))?;
        let shared = {
            let mut versions = self.versions.write().expect("registry lock");
            versions.remove(&key);
            versions.values().any(|other| other.digest == info.digest)
        };
        // A damaged metadata file might name the same component: keep it then.
        if !shared && self.damaged.is_empty() {
            let blob = self.blob_path(&info.digest);
            if let Err(error) = std::fs::remove_file(&blob) {
                // The version is gone already; the next start removes the component.
                warn!(file = %blob.display(), %error, "could not remove a deleted version's component");
            }
        }
        Ok(())
    }

    /// Where a version's code is, for a pipeline spec: the stored component and its digest,
    /// which the pipeline checks when it loads it.
    pub fn code(&self, name: &str, version: &str) -> Result<crate::spec::OperatorCode> {
        match self.get(name, version) {
            Some(info) => Ok(crate::spec::OperatorCode::Stored {
                path: self.blob_path(&info.digest),
                digest: info.digest,
            }),
            None => Err(RegistryError::Unknown {
                name: name.into(),
                version: version.into(),
            }),
        }
    }

    /// The compiled component of a version (compiled once per process), checked against its
    /// digest.
    pub fn load(&self, name: &str, version: &str, kind: ComponentKind) -> Result<WasmOperator> {
        let info = self
            .get(name, version)
            .ok_or_else(|| RegistryError::Unknown {
                name: name.into(),
                version: version.into(),
            })?;
        let path = self.blob_path(&info.digest);
        Ok(self.runtime.load_checked(&path, &info.digest, kind)?)
    }
}

const BLOBS: &str = "blobs";
/// The extension of a deleted version's tombstone.
const TOMBSTONE: &str = "deleted";

/// A tombstone's name, version and digest; one that cannot be read (or is not in its place)
/// keeps its file's version from every upload (`UNKNOWN_DIGEST`).
fn read_tombstone(dir: &Path, file: &Path) -> ((String, String), String) {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let version = file
        .file_stem()
        .map(|v| v.to_string_lossy().into_owned())
        .unwrap_or_default();
    let read = std::fs::read(file)
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Tombstone>(&bytes).ok());
    match read {
        Some(t) if t.name == name && t.version == version => ((name, version), t.digest),
        _ => {
            warn!(file = %file.display(), "registry: a tombstone cannot be read; its version takes no upload");
            ((name, version), UNKNOWN_DIGEST.to_owned())
        }
    }
}

fn blob_path(dir: &Path, digest: &str) -> PathBuf {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    dir.join(BLOBS).join(format!("{hex}.wasm"))
}

/// Why a version's metadata was skipped when the registry was opened.
#[derive(Debug, thiserror::Error)]
enum EntryError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Name(#[from] names::NameError),
    #[error("digest {0:?} is not sha256:<64 hex digits>")]
    Digest(String),
    #[error("it describes {name}@{version}, which belongs in {}", .place.display())]
    Misplaced {
        name: String,
        version: String,
        place: PathBuf,
    },
    #[error("{} does not match the recorded digest", .0.display())]
    Mismatch(PathBuf),
    #[error("its component {} is missing", .0.display())]
    Missing(PathBuf),
}

/// Reads one version's metadata and checks that it is what its place says it is and that its
/// component is there. A version stored by an earlier Weir beside its metadata
/// (`<version>.wasm`) is moved into the digest store once its bytes are checked.
fn read_info(dir: &Path, file: &Path) -> std::result::Result<VersionInfo, EntryError> {
    let info: VersionInfo = serde_json::from_str(&std::fs::read_to_string(file)?)?;
    names::check("operator name", &info.name)?;
    names::check("operator version", &info.version)?;
    let hex = info.digest.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(EntryError::Digest(info.digest));
    }
    let expected = dir.join(&info.name).join(format!("{}.json", info.version));
    if expected != file {
        return Err(EntryError::Misplaced {
            name: info.name,
            version: info.version,
            place: expected,
        });
    }
    let blob = blob_path(dir, &info.digest);
    let legacy = file.with_extension("wasm");
    if !blob.exists() && legacy.exists() {
        let bytes = std::fs::read(&legacy)?;
        if digest_of(&bytes) != info.digest {
            return Err(EntryError::Mismatch(legacy));
        }
        crate::fsutil::write_atomic(&blob, &bytes)?;
        let _ = std::fs::remove_file(&legacy);
    }
    if !blob.exists() {
        return Err(EntryError::Missing(blob));
    }
    Ok(info)
}
