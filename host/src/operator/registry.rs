//! [`Registry`]: uploaded operator components, by name and version, in
//! `<data dir>/operators/<name>/<version>.wasm` with a `<version>.json` beside it. Uploads are
//! validated (size, a real component, one of Weir's worlds, imports Weir provides) before
//! anything is written; versions are immutable.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{ComponentKind, LoadError, WasmOperator, WasmRuntime};

/// Registry failures.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The upload is not a usable component.
    #[error(transparent)]
    Invalid(#[from] LoadError),
    /// A name or version has characters that are not allowed.
    #[error("operator {what} {value:?} must be 1-64 letters, digits, '-', '_' or '.'")]
    BadName {
        /// "name" or "version".
        what: &'static str,
        /// The value.
        value: String,
    },
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
}

/// The operator registry of a data directory.
pub struct Registry {
    dir: PathBuf,
    runtime: WasmRuntime,
    versions: RwLock<BTreeMap<(String, String), VersionInfo>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("dir", &self.dir).finish()
    }
}

fn check(what: &'static str, value: &str) -> Result<()> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && !value.starts_with('.')
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(RegistryError::BadName {
            what,
            value: value.into(),
        })
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RegistryError + '_ {
    move |source| RegistryError::Io {
        path: path.to_owned(),
        source,
    }
}

impl Registry {
    /// Opens (or creates) the registry in `<data dir>/operators`.
    pub fn open(data_dir: &Path, runtime: WasmRuntime) -> Result<Registry> {
        let dir = data_dir.join("operators");
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let mut versions = BTreeMap::new();
        for name in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let name = name.map_err(io(&dir))?.path();
            if !name.is_dir() {
                continue;
            }
            for file in std::fs::read_dir(&name).map_err(io(&name))? {
                let file = file.map_err(io(&name))?.path();
                if file.extension().is_some_and(|e| e == "json") {
                    let text = std::fs::read_to_string(&file).map_err(io(&file))?;
                    let info: VersionInfo =
                        serde_json::from_str(&text).map_err(|e| RegistryError::Io {
                            path: file.clone(),
                            source: std::io::Error::other(e),
                        })?;
                    versions.insert((info.name.clone(), info.version.clone()), info);
                }
            }
        }
        Ok(Registry {
            dir,
            runtime,
            versions: RwLock::new(versions),
        })
    }

    fn wasm_path(&self, name: &str, version: &str) -> PathBuf {
        self.dir.join(name).join(format!("{version}.wasm"))
    }

    /// Validates and stores a new version.
    pub fn upload(
        &self,
        name: &str,
        version: &str,
        bytes: &[u8],
        limit: usize,
    ) -> Result<VersionInfo> {
        check("name", name)?;
        check("version", version)?;
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
            digest: format!("sha256:{:x}", Sha256::digest(bytes)),
            size: bytes.len() as u64,
            world: kind.world().into(),
            uploaded_at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        };
        let mut versions = self.versions.write().expect("registry lock");
        if versions.contains_key(&(name.to_owned(), version.to_owned())) {
            return Err(RegistryError::Exists {
                name: name.into(),
                version: version.into(),
            });
        }
        let dir = self.dir.join(name);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let wasm = self.wasm_path(name, version);
        let partial = wasm.with_extension("wasm.partial");
        std::fs::write(&partial, bytes).map_err(io(&partial))?;
        std::fs::rename(&partial, &wasm).map_err(io(&wasm))?;
        let json = dir.join(format!("{version}.json"));
        let text = serde_json::to_vec_pretty(&info).expect("version info serialises");
        std::fs::write(&json, text).map_err(io(&json))?;
        versions.insert((name.into(), version.into()), info.clone());
        Ok(info)
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

    /// Deletes a version (the caller checks that no pipeline uses it).
    pub fn delete(&self, name: &str, version: &str) -> Result<()> {
        let mut versions = self.versions.write().expect("registry lock");
        if versions
            .remove(&(name.to_owned(), version.to_owned()))
            .is_none()
        {
            return Err(RegistryError::Unknown {
                name: name.into(),
                version: version.into(),
            });
        }
        let json = self.dir.join(name).join(format!("{version}.json"));
        std::fs::remove_file(&json).map_err(io(&json))?;
        let wasm = self.wasm_path(name, version);
        std::fs::remove_file(&wasm).map_err(io(&wasm))
    }

    /// The component file of a version.
    pub fn path(&self, name: &str, version: &str) -> Result<PathBuf> {
        match self.get(name, version) {
            Some(_) => Ok(self.wasm_path(name, version)),
            None => Err(RegistryError::Unknown {
                name: name.into(),
                version: version.into(),
            }),
        }
    }

    /// The compiled component of a version (compiled once per process).
    pub fn load(&self, name: &str, version: &str, kind: ComponentKind) -> Result<WasmOperator> {
        let path = self.path(name, version)?;
        Ok(self.runtime.load(&path, kind)?)
    }
}
