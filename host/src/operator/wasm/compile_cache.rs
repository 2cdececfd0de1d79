//! The compiled-component cache on disk: wasmtime's compiled form of each component, so that a
//! restart of `weir run` or `weir serve` loads a 15 MB Python or JavaScript operator in
//! milliseconds instead of compiling it again for seconds. Depends on wasmtime, `sha2`,
//! `tracing` and `fsutil` only.
//!
//! An entry is named by what determines its bytes: the SHA-256 of the component and a
//! fingerprint of the engine (wasmtime's version and every setting that changes compiled code,
//! from [`Engine::precompile_compatibility_hash`]). The file holds the SHA-256 of the compiled
//! bytes followed by the bytes, so a torn or altered entry is detected before wasmtime sees it.
//! Anything wrong with an entry (missing, damaged, refused by wasmtime) only means compiling
//! again and rewriting it: the cache can make a start faster, never make it fail.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The environment variable naming the cache directory, or `off` to disable the cache.
pub(super) const CACHE_ENV: &str = "WEIR_COMPILE_CACHE";

/// Compiled components on disk, under a directory Weir owns.
#[derive(Debug, Clone)]
pub(super) struct CompileCache {
    dir: PathBuf,
    engine_fingerprint: String,
}

impl CompileCache {
    /// The cache of this process: the directory in `WEIR_COMPILE_CACHE`, or
    /// `$XDG_CACHE_HOME/weir/compiled`, or `~/.cache/weir/compiled`; none when the variable is
    /// `off` or no directory can be found or made private to this user.
    pub(super) fn from_env(engine: &Engine) -> Option<CompileCache> {
        let dir = match std::env::var_os(CACHE_ENV) {
            Some(value) if value == "off" => return None,
            Some(value) if !value.is_empty() => PathBuf::from(value),
            _ => default_dir()?,
        };
        match CompileCache::open(dir.clone(), engine) {
            Ok(cache) => Some(cache),
            Err(error) => {
                tracing::warn!(dir = %dir.display(), %error, "compile cache disabled: its directory cannot be used");
                None
            }
        }
    }

    /// Opens (creating it, private to this user) the cache directory `dir`.
    pub(super) fn open(dir: PathBuf, engine: &Engine) -> std::io::Result<CompileCache> {
        create_private_dir(&dir)?;
        check_private(&dir)?;
        Ok(CompileCache {
            dir,
            engine_fingerprint: engine_fingerprint(engine),
        })
    }

    /// The entry of the component whose bytes have the SHA-256 `digest`, if one is stored and
    /// intact.
    pub(super) fn load(&self, engine: &Engine, digest: &[u8; 32]) -> Option<Component> {
        let path = self.entry_path(digest);
        let stored = std::fs::read(&path).ok()?;
        let Some(compiled) = intact(&stored) else {
            tracing::warn!(path = %path.display(), "compile cache entry is damaged; compiling again");
            return None;
        };
        match deserialize(engine, compiled) {
            Ok(component) => Some(component),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "compile cache entry refused; compiling again");
                None
            }
        }
    }

    /// Stores a compiled component; a failure is logged, not returned (the cache is optional).
    pub(super) fn store(&self, digest: &[u8; 32], component: &Component) {
        let path = self.entry_path(digest);
        let result = component
            .serialize()
            .map_err(|e| std::io::Error::other(e.into_boxed_dyn_error()))
            .and_then(|compiled| {
                let mut file = Sha256::digest(&compiled).to_vec();
                file.extend_from_slice(&compiled);
                crate::fsutil::write_atomic(&path, &file)
            });
        match result {
            Ok(()) => tracing::debug!(path = %path.display(), "compiled component cached"),
            Err(error) => {
                tracing::warn!(path = %path.display(), %error, "cannot write compile cache entry")
            }
        }
    }

    fn entry_path(&self, digest: &[u8; 32]) -> PathBuf {
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        self.dir
            .join(format!("{hex}-{}.cwasm", self.engine_fingerprint))
    }
}

/// Turns an intact entry's compiled bytes into a component.
///
/// One of Weir's few `unsafe` blocks (the README lists them). `Component::deserialize` trusts its
/// bytes to be what `Component::serialize` wrote for a compatible engine: given anything else it
/// could run arbitrary machine code. Here that holds because (1) only [`CompileCache::store`]
/// writes entries, under a directory Weir created private to its user and refuses to use when
/// others may write to it; (2) an entry is used only when the SHA-256 stored in front of it matches
/// its bytes, so a torn, truncated or bit-flipped file is never handed over; and (3) wasmtime
/// itself checks the header for its version and the engine's settings and refuses a mismatch.
/// Someone who can write files as Weir's user could equally replace the `weir` binary, so this
/// trusts nothing that is not already trusted.
#[allow(unsafe_code)]
fn deserialize(engine: &Engine, compiled: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: see above: `compiled` was written by `Component::serialize` and verified intact.
    unsafe { Component::deserialize(engine, compiled) }
}

/// The compiled bytes of an entry whose stored SHA-256 matches them.
fn intact(stored: &[u8]) -> Option<&[u8]> {
    let (checksum, compiled) = stored.split_at_checked(32)?;
    (Sha256::digest(compiled).as_slice() == checksum).then_some(compiled)
}

/// A stable hex fingerprint of everything in the engine that changes compiled code.
fn engine_fingerprint(engine: &Engine) -> String {
    let mut hasher = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let digest = hasher.0.finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// A [`Hasher`] that feeds SHA-256, so the fingerprint is the same in every process (the
/// standard library's hashers promise no such thing).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
    }
}

fn default_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")))?;
    Some(base.join("weir").join("compiled"))
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Refuses a directory that other users may write to (or that is a symbolic link to one).
fn check_private(dir: &Path) -> std::io::Result<()> {
    let metadata = std::fs::metadata(dir)?;
    if !metadata.is_dir() {
        return Err(std::io::Error::other("not a directory"));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if metadata.permissions().mode() & 0o022 != 0 {
            return Err(std::io::Error::other(
                "group or others may write to it; make it private (chmod 700) or choose another with WEIR_COMPILE_CACHE",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest component, `(component)` in binary form: compiles in milliseconds.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    fn engine() -> Engine {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true);
        Engine::new(&config).unwrap()
    }

    #[test]
    fn stores_and_loads_an_entry_and_ignores_a_damaged_one() {
        let (engine, dir) = (engine(), tempfile::tempdir().unwrap());
        let cache = CompileCache::open(dir.path().join("c"), &engine).unwrap();
        let component = Component::new(&engine, EMPTY_COMPONENT).unwrap();
        let digest = [7u8; 32];
        assert!(cache.load(&engine, &digest).is_none());
        cache.store(&digest, &component);
        assert!(cache.load(&engine, &digest).is_some());

        let path = cache.entry_path(&digest);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(
            cache.load(&engine, &digest).is_none(),
            "a flipped bit is caught"
        );
        std::fs::write(&path, &bytes[..10]).unwrap();
        assert!(
            cache.load(&engine, &digest).is_none(),
            "a torn file is caught"
        );
    }

    #[test]
    fn another_engine_configuration_uses_other_entries() {
        let mut config = wasmtime::Config::new();
        config.wasm_component_model(true).epoch_interruption(true);
        let other = Engine::new(&config).unwrap();
        assert_ne!(engine_fingerprint(&engine()), engine_fingerprint(&other));
        assert_eq!(engine_fingerprint(&engine()), engine_fingerprint(&engine()));
    }

    #[cfg(unix)]
    #[test]
    fn a_directory_others_may_write_to_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let (engine, dir) = (engine(), tempfile::tempdir().unwrap());
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = CompileCache::open(shared, &engine).unwrap_err();
        assert!(error.to_string().contains("chmod 700"), "{error}");
        assert!(CompileCache::open(dir.path().join("fresh"), &engine).is_ok());
    }
}
