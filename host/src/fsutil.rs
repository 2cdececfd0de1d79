//! Small file-system helpers with one home each: an atomic, durable file write. Depends on
//! nothing else in Weir.

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` so that a reader (or a crash) sees either the old file or the whole
/// new one: the bytes go to `<path>.<pid>.<n>.partial` (a name no other writer uses, so two
/// processes writing the same file each write whole files and the last rename wins), are
/// synced, and the file is renamed over `path`; then the directory is synced so the rename
/// itself survives a crash.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut partial = path.as_os_str().to_owned();
    partial.push(format!(".{}.{n}.partial", std::process::id()));
    let partial = Path::new(&partial);
    let result = (|| {
        let mut file = std::fs::File::create(partial)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(partial, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(partial);
    }
    result?;
    if let Some(dir) = path.parent()
        && let Ok(dir) = std::fs::File::open(dir)
    {
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_a_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        super::write_atomic(&path, b"one").unwrap();
        super::write_atomic(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
