//! Small file-system helpers with one home each: an atomic, durable file write, a durable
//! rename of a tree made beside its place, reading a file's last lines, and the crash points
//! that tests use to stop a multi-step file operation halfway. Depends on nothing else in Weir.

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
        #[cfg(debug_assertions)]
        if let Some(extension) = path.extension().and_then(|e| e.to_str()) {
            crash_point(&format!("atomic-write-synced.{extension}"));
        }
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

/// A point between two steps of a multi-step file operation where a test may make the process
/// die: in a debug build, with `WEIR_TEST_CRASH_AT=<point>`, it aborts there (no destructor
/// runs, nothing is flushed: as under SIGKILL), so the test can check that a restart finds the
/// operation done or absent, never half. Release builds have none.
pub fn crash_point(point: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("WEIR_TEST_CRASH_AT").is_ok_and(|at| at == point) {
        eprintln!("weir: dying at crash point {point} (WEIR_TEST_CRASH_AT)");
        std::process::abort();
    }
    #[cfg(not(debug_assertions))]
    let _ = point;
}

/// A point between two steps of an operation where a test may make the process wait, to let
/// other processes reach the same point: in a debug build, with `WEIR_TEST_PAUSE_AT=<point>`,
/// it sleeps there until the wall clock's next whole second but one, so that processes paused
/// there go on at the same moment. Release builds have none.
pub fn pause_point(point: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("WEIR_TEST_PAUSE_AT").is_ok_and(|at| at == point) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        eprintln!("weir: pausing at {point} (WEIR_TEST_PAUSE_AT)");
        let into_second = std::time::Duration::from_nanos(u64::from(now.subsec_nanos()));
        std::thread::sleep(std::time::Duration::from_secs(2) - into_second);
    }
    #[cfg(not(debug_assertions))]
    let _ = point;
}

/// Whether an I/O error says the disk (or the quota) is full.
pub fn is_disk_full(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// Syncs every file and directory under `dir` (and `dir` itself), so that a tree made with
/// unsynced writes and copies survives a crash once it is renamed into place.
pub fn sync_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        } else {
            std::fs::File::open(entry.path())?.sync_all()?;
        }
    }
    std::fs::File::open(dir)?.sync_all()
}

/// Renames `from` to `to` and syncs the directory that holds `to`, so the rename survives a
/// crash.
pub fn rename_durably(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::rename(from, to)?;
    match to.parent() {
        Some(parent) => std::fs::File::open(parent)?.sync_all(),
        None => Ok(()),
    }
}

/// The last `limit` lines of a JSON Lines file that parse as JSON, oldest first, read from
/// its last `window` bytes (a line the window cuts is skipped; lines longer than the window are
/// not found). A missing or unreadable file has none.
pub fn last_json_lines(path: &Path, limit: usize, window: u64) -> Vec<serde_json::Value> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let length = file.metadata().map_or(0, |m| m.len());
    // One byte before the window, to know whether it starts on a line's first byte.
    let start = length.saturating_sub(window.saturating_add(1));
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(start)).is_err()
        || file.take(length - start).read_to_end(&mut bytes).is_err()
    {
        return Vec::new();
    }
    if length > window {
        let first_line_end = bytes.iter().position(|&b| b == b'\n');
        bytes.drain(..first_line_end.map_or(bytes.len(), |at| at + 1));
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let mut found: Vec<serde_json::Value> = (lines.iter().rev())
        .filter_map(|line| serde_json::from_str(line).ok())
        .take(limit)
        .collect();
    found.reverse();
    found
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

    #[test]
    fn the_last_json_lines_of_a_file_skip_a_cut_first_line_and_bad_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("letters.jsonl");
        let lines: Vec<String> = (0..100).map(|i| format!("{{\"n\":{i}}}")).collect();
        std::fs::write(&path, lines.join("\n") + "\nnot json\n").unwrap();
        let last = super::last_json_lines(&path, 3, 1 << 20);
        assert_eq!(last, [97, 98, 99].map(|n| serde_json::json!({"n": n})));
        // A window that starts inside a line skips that line rather than misreading it.
        // The last 30 bytes are `7}\n{"n":98}\n{"n":99}\nnot json\n`.
        let cut = super::last_json_lines(&path, 100, 30);
        assert_eq!(cut, [98, 99].map(|n| serde_json::json!({"n": n})));
        // A window that starts exactly on a line keeps it.
        let whole = super::last_json_lines(&path, 100, 27);
        assert_eq!(whole, [98, 99].map(|n| serde_json::json!({"n": n})));
        let shorter = super::last_json_lines(&path, 100, 26);
        assert_eq!(shorter, [serde_json::json!({"n": 99})]);
        assert!(super::last_json_lines(&dir.path().join("missing"), 3, 100).is_empty());
    }
}
