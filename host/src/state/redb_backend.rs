//! The redb store and [`RedbBackend`], the hybrid backend: the scopes in use live in memory on
//! their shard; redb holds what the last checkpoint committed. Reads that miss memory fall back
//! to redb; once a checkpoint is durable, clean scopes are evicted to keep memory within budget.
//!
//! Tables (see `docs/design.md` for the byte layout):
//! - `state`: [`StateKey::encode`] → the scope's JSON;
//! - `windows`: the same key layout → the window's metadata (JSON, written by the window engine);
//! - `meta`: `"manifest"` → the last committed checkpoint's manifest (JSON); `"totals"` → the
//!   scopes in `state` and the bytes of their values (two little-endian u64), kept by each
//!   commit from what its inserts and removals replace;
//! - `checkpoints`: checkpoint id → that checkpoint's figures (JSON), the last 100.
//!
//! Depends on `fsutil` and `hashing`.

use crate::hashing::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use super::{
    Change, Result, ScopeState, StateBackend, StateError, StateKey, StoreDamage, encode_scope,
};

const STATE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("state");
const WINDOWS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("windows");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const CHECKPOINTS: TableDefinition<u64, &[u8]> = TableDefinition::new("checkpoints");

/// How many checkpoints' figures are kept.
const CHECKPOINT_HISTORY: u64 = 100;

/// How much state a store holds: scopes and the bytes of their values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateTotals {
    /// Scopes (a key's state, or a key's state in one window).
    pub scopes: u64,
    /// Bytes of their encoded values.
    pub bytes: u64,
}

impl StateTotals {
    /// A scope whose value of `old` bytes (if any) becomes one of `new` bytes (if any).
    fn replace(&mut self, old: Option<usize>, new: Option<usize>) {
        if let Some(old) = old {
            self.scopes = self.scopes.saturating_sub(1);
            self.bytes = self.bytes.saturating_sub(old as u64);
        }
        if let Some(new) = new {
            self.scopes += 1;
            self.bytes += new as u64;
        }
    }

    fn encode(self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&self.scopes.to_le_bytes());
        out[8..].copy_from_slice(&self.bytes.to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<StateTotals> {
        let bytes: &[u8; 16] = bytes.try_into().ok()?;
        Some(StateTotals {
            scopes: u64::from_le_bytes(bytes[..8].try_into().ok()?),
            bytes: u64::from_le_bytes(bytes[8..].try_into().ok()?),
        })
    }
}

/// Creates a new, empty store file at `path` whole or not at all: made beside it and renamed
/// into place, so a crash while redb writes its header cannot leave a file that the next start
/// takes for a damaged store.
fn create_whole(path: &Path) -> Result<()> {
    let creating = path.with_extension("redb.creating");
    let _ = std::fs::remove_file(&creating);
    let made = Database::create(&creating).map_err(|e| store_error(path, e))?;
    made.close().map_err(|e| store_error(path, e))?;
    std::fs::rename(&creating, path).map_err(|e| io_error(path, e))?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_error(path, e))?;
    }
    Ok(())
}

/// Whether an I/O error says nothing about the file's contents (it may read later): out of
/// file descriptors or memory, no permission, interrupted, a failing device. A file that is not
/// a store at all ("magic number mismatch") is reported as invalid data instead.
fn is_transient(e: &std::io::Error) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        e.kind(),
        K::PermissionDenied | K::Interrupted | K::WouldBlock | K::TimedOut | K::OutOfMemory
    ) || matches!(e.raw_os_error(), Some(5 | 23 | 24)) // EIO, ENFILE, EMFILE
}

/// A file operation's failure on the store file at `path`, a full disk told apart.
fn io_error(path: &Path, e: std::io::Error) -> StateError {
    store_error(path, redb::Error::Io(e))
}

/// A redb failure on the store file at `path`: a full disk (or quota) told apart, so that the
/// caller can say so and try again once there is room.
fn store_error(path: &Path, e: impl Into<redb::Error>) -> StateError {
    match e.into() {
        redb::Error::Io(io) if crate::fsutil::is_disk_full(&io) => {
            StateError::DiskFull(path.to_owned())
        }
        source => StateError::Redb {
            path: path.to_owned(),
            source: Box::new(source),
        },
    }
}

/// The name of the state file inside a data directory.
pub const STATE_FILE: &str = "state.redb";

/// What one checkpoint writes, in one transaction.
#[derive(Debug, Clone, Default)]
pub struct StoredCheckpoint {
    /// Its id (ascending).
    pub id: u64,
    /// The manifest (JSON).
    pub manifest: Vec<u8>,
    /// State changes.
    pub state: Vec<Change>,
    /// Window metadata changes.
    pub windows: Vec<Change>,
    /// Its figures (JSON).
    pub stats: Vec<u8>,
}

/// A row of a table, for restore and inspection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRow {
    /// The encoded key.
    pub key: Vec<u8>,
    /// The value bytes.
    pub value: Vec<u8>,
}

/// The redb database file of a data directory, shared by a pipeline's shards.
#[derive(Debug, Clone)]
pub struct RedbStore {
    db: Arc<Database>,
    path: PathBuf,
}

impl RedbStore {
    /// Opens (or creates) `dir/state.redb`, creating the directory. A file that redb cannot read
    /// is reported as corrupt, never treated as empty.
    pub fn open(dir: &Path) -> Result<RedbStore> {
        let path = dir.join(STATE_FILE);
        std::fs::create_dir_all(dir).map_err(|e| io_error(&path, e))?;
        Self::open_file(&path)
    }

    /// Opens (or creates) a store file.
    pub fn open_file(path: &Path) -> Result<RedbStore> {
        let path = path.to_owned();
        let existed = path.exists();
        if existed && std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) == 0 {
            return Err(StateError::Corrupt {
                path,
                message: "the file is empty".into(),
            });
        }
        if !existed {
            create_whole(&path)?;
        }
        let db = Database::create(&path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => StateError::Store {
                path: path.clone(),
                message: "the data directory is in use by another weir process".into(),
            },
            redb::DatabaseError::Storage(redb::StorageError::Io(io))
                if crate::fsutil::is_disk_full(&io) =>
            {
                StateError::DiskFull(path.clone())
            }
            e if existed => StateError::Damaged {
                path: path.clone(),
                source: redb::Error::from(e).into(),
            },
            e => store_error(&path, e),
        })?;
        let store = RedbStore {
            db: Arc::new(db),
            path,
        };
        if existed {
            store.check()?;
        }
        Ok(store)
    }

    /// Reads every table once, so that a damaged file is found at open, not halfway through.
    fn check(&self) -> Result<()> {
        let txn = self.db.begin_read().map_err(|e| self.corrupt(e))?;
        for table in [STATE, WINDOWS] {
            match txn.open_table(table) {
                Ok(t) => {
                    for row in t.iter().map_err(|e| self.corrupt(e))? {
                        row.map_err(|e| self.corrupt(e))?;
                    }
                }
                Err(redb::TableError::TableDoesNotExist(_)) => {}
                Err(e) => return Err(self.corrupt(e)),
            }
        }
        Ok(())
    }

    /// Reads the last committed checkpoint's manifest of the store file at `path` without
    /// creating, changing or locking it against other readers: for files that are only ever
    /// read once written (savepoints), so that any number of readers may look at once.
    /// `Ok(None)` when the file has no manifest; a missing file is `StateError::Missing`.
    pub fn read_manifest_of(path: &Path) -> Result<Option<Vec<u8>>> {
        let corrupt = |e: redb::Error| StateError::Damaged {
            path: path.to_owned(),
            source: e.into(),
        };
        let db = match redb::ReadOnlyDatabase::open(path) {
            Ok(db) => db,
            Err(redb::DatabaseError::Storage(redb::StorageError::Io(e)))
                if e.kind() == std::io::ErrorKind::NotFound =>
            {
                return Err(StateError::Missing(path.to_owned()));
            }
            // Out of file descriptors, no permission, a lock held, a failing device: the file
            // may be fine; the caller is told it could not read it, not that it is damaged.
            Err(redb::DatabaseError::Storage(redb::StorageError::Io(e))) if is_transient(&e) => {
                return Err(io_error(path, e));
            }
            Err(e @ redb::DatabaseError::DatabaseAlreadyOpen) => return Err(store_error(path, e)),
            Err(e) => return Err(corrupt(e.into())),
        };
        let txn = db.begin_read().map_err(|e| corrupt(e.into()))?;
        let table = match txn.open_table(META) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(corrupt(e.into())),
        };
        let manifest = table
            .get("manifest")
            .map_err(|e| corrupt(e.into()))?
            .map(|v| v.value().to_vec());
        Ok(manifest)
    }

    /// Deletes all state and checkpoints: a run from scratch.
    pub fn clear(&self) -> Result<()> {
        let txn = self.db.begin_write().map_err(|e| self.error(e))?;
        txn.delete_table(STATE).map_err(|e| self.error(e))?;
        txn.delete_table(WINDOWS).map_err(|e| self.error(e))?;
        txn.delete_table(META).map_err(|e| self.error(e))?;
        txn.delete_table(CHECKPOINTS).map_err(|e| self.error(e))?;
        txn.commit().map_err(|e| self.error(e))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, e: impl Into<redb::Error>) -> StateError {
        store_error(&self.path, e)
    }

    fn corrupt(&self, e: impl Into<redb::Error>) -> StateError {
        self.damaged(e.into().into())
    }

    fn damaged(&self, source: StoreDamage) -> StateError {
        StateError::Damaged {
            path: self.path.clone(),
            source,
        }
    }

    fn damaged_record(&self, what: &str) -> StateError {
        StateError::Corrupt {
            path: self.path.clone(),
            message: what.to_owned(),
        }
    }

    fn read(&self, key: &StateKey) -> Result<Option<(ScopeState, usize)>> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = match txn.open_table(STATE) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(self.error(e)),
        };
        let Some(bytes) = table
            .get(key.encode().as_slice())
            .map_err(|e| self.corrupt(e))?
        else {
            return Ok(None);
        };
        let bytes = bytes.value();
        super::decode_scope(bytes)
            .map(|state| Some((state, bytes.len())))
            .map_err(|e| self.damaged(e.into()))
    }

    /// The last committed checkpoint's manifest, if any.
    pub fn manifest(&self) -> Result<Option<Vec<u8>>> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = match txn.open_table(META) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(self.corrupt(e)),
        };
        Ok(table
            .get("manifest")
            .map_err(|e| self.corrupt(e))?
            .map(|v| v.value().to_vec()))
    }

    /// The figures of the last checkpoints, oldest first.
    pub fn checkpoint_history(&self) -> Result<Vec<(u64, Vec<u8>)>> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = match txn.open_table(CHECKPOINTS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(self.corrupt(e)),
        };
        let mut out = Vec::new();
        for row in table.iter().map_err(|e| self.corrupt(e))? {
            let (id, stats) = row.map_err(|e| self.corrupt(e))?;
            out.push((id.value(), stats.value().to_vec()));
        }
        Ok(out)
    }

    /// Visits the rows of `windows` (or of `state`) whose keys lie in `[start, end)`, in key
    /// order, one at a time (none is kept), until `visit` returns false.
    pub fn visit(
        &self,
        windows: bool,
        (start, end): (&[u8], &[u8]),
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<()> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = match txn.open_table(if windows { WINDOWS } else { STATE }) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
            Err(e) => return Err(self.corrupt(e)),
        };
        for row in table.range(start..end).map_err(|e| self.corrupt(e))? {
            let (key, value) = row.map_err(|e| self.corrupt(e))?;
            if !visit(key.value(), value.value()) {
                break;
            }
        }
        Ok(())
    }

    /// Rows of `windows` (or of `state`) whose keys lie in `[start, end)`.
    pub fn scan(&self, windows: bool, start: &[u8], end: &[u8]) -> Result<Vec<TableRow>> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = match txn.open_table(if windows { WINDOWS } else { STATE }) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(self.corrupt(e)),
        };
        let mut out = Vec::new();
        for row in table.range(start..end).map_err(|e| self.corrupt(e))? {
            let (key, value) = row.map_err(|e| self.corrupt(e))?;
            out.push(TableRow {
                key: key.value().to_vec(),
                value: value.value().to_vec(),
            });
        }
        Ok(out)
    }

    /// Commits a checkpoint in one durable write transaction. Returns the state's totals after
    /// it.
    pub fn commit(&self, checkpoint: &StoredCheckpoint) -> Result<StateTotals> {
        let mut txn = self.db.begin_write().map_err(|e| self.error(e))?;
        txn.set_durability(Durability::Immediate)
            .map_err(|e| self.error(e))?;
        let mut totals = self.totals_in(&txn)?;
        {
            for (definition, changes, counted) in [
                (STATE, &checkpoint.state, true),
                (WINDOWS, &checkpoint.windows, false),
            ] {
                let mut table = txn.open_table(definition).map_err(|e| self.error(e))?;
                for change in changes {
                    let replaced = match &change.value {
                        Some(value) => table
                            .insert(change.key.as_slice(), value.as_slice())
                            .map_err(|e| self.error(e))?
                            .map(|old| old.value().len()),
                        None => table
                            .remove(change.key.as_slice())
                            .map_err(|e| self.error(e))?
                            .map(|old| old.value().len()),
                    };
                    if counted {
                        totals.replace(replaced, change.value.as_ref().map(Vec::len));
                    }
                }
            }
            let mut meta = txn.open_table(META).map_err(|e| self.error(e))?;
            meta.insert("totals", totals.encode().as_slice())
                .map_err(|e| self.error(e))?;
            meta.insert("manifest", checkpoint.manifest.as_slice())
                .map_err(|e| self.error(e))?;
            let mut history = txn.open_table(CHECKPOINTS).map_err(|e| self.error(e))?;
            history
                .insert(checkpoint.id, checkpoint.stats.as_slice())
                .map_err(|e| self.error(e))?;
            if checkpoint.id >= CHECKPOINT_HISTORY {
                history
                    .retain_in(..=checkpoint.id - CHECKPOINT_HISTORY, |_, _| false)
                    .map_err(|e| self.error(e))?;
            }
        }
        txn.commit().map_err(|e| self.error(e))?;
        Ok(totals)
    }

    /// The totals as the transaction sees them: recorded by the last commit, or counted once
    /// (a store written before totals were kept).
    fn totals_in(&self, txn: &redb::WriteTransaction) -> Result<StateTotals> {
        let meta = txn.open_table(META).map_err(|e| self.error(e))?;
        if let Some(recorded) = meta.get("totals").map_err(|e| self.corrupt(e))? {
            return StateTotals::decode(recorded.value())
                .ok_or_else(|| self.damaged_record("the state totals record is damaged"));
        }
        let mut totals = StateTotals::default();
        let state = txn.open_table(STATE).map_err(|e| self.error(e))?;
        for row in state.iter().map_err(|e| self.corrupt(e))? {
            let (_, value) = row.map_err(|e| self.corrupt(e))?;
            totals.replace(None, Some(value.value().len()));
        }
        Ok(totals)
    }

    /// The state's totals as of the last commit.
    pub fn totals(&self) -> Result<StateTotals> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let Ok(meta) = txn.open_table(META) else {
            return Ok(StateTotals::default());
        };
        match meta.get("totals").map_err(|e| self.corrupt(e))? {
            Some(recorded) => StateTotals::decode(recorded.value())
                .ok_or_else(|| self.damaged_record("the state totals record is damaged")),
            None => Ok(StateTotals::default()),
        }
    }

    /// Replaces the manifest of the last checkpoint (a savepoint copied into another
    /// pipeline's directory is renamed to it), durably.
    pub fn set_manifest(&self, manifest: &[u8]) -> Result<()> {
        let mut txn = self.db.begin_write().map_err(|e| self.error(e))?;
        txn.set_durability(Durability::Immediate)
            .map_err(|e| self.error(e))?;
        {
            let mut meta = txn.open_table(META).map_err(|e| self.error(e))?;
            meta.insert("manifest", manifest)
                .map_err(|e| self.error(e))?;
        }
        txn.commit().map_err(|e| self.error(e))
    }

    /// Writes a consistent copy of the whole database (as of its last commit) to `path`.
    pub fn copy_to(&self, path: &Path) -> Result<()> {
        let target = Database::create(path).map_err(|e| store_error(path, e))?;
        let target_error = |e: redb::Error| store_error(path, e);
        let read = self.db.begin_read().map_err(|e| self.error(e))?;
        let write = target.begin_write().map_err(|e| target_error(e.into()))?;
        for definition in [STATE, WINDOWS] {
            let Ok(source) = read.open_table(definition) else {
                continue;
            };
            let mut table = write
                .open_table(definition)
                .map_err(|e| target_error(e.into()))?;
            for row in source.iter().map_err(|e| self.corrupt(e))? {
                let (key, value) = row.map_err(|e| self.corrupt(e))?;
                table
                    .insert(key.value(), value.value())
                    .map_err(|e| target_error(e.into()))?;
            }
        }
        if let Ok(source) = read.open_table(META) {
            let mut table = write.open_table(META).map_err(|e| target_error(e.into()))?;
            for row in source.iter().map_err(|e| self.corrupt(e))? {
                let (key, value) = row.map_err(|e| self.corrupt(e))?;
                table
                    .insert(key.value(), value.value())
                    .map_err(|e| target_error(e.into()))?;
            }
        }
        if let Ok(source) = read.open_table(CHECKPOINTS) {
            let mut table = write
                .open_table(CHECKPOINTS)
                .map_err(|e| target_error(e.into()))?;
            for row in source.iter().map_err(|e| self.corrupt(e))? {
                let (key, value) = row.map_err(|e| self.corrupt(e))?;
                table
                    .insert(key.value(), value.value())
                    .map_err(|e| target_error(e.into()))?;
            }
        }
        write.commit().map_err(|e| target_error(e.into()))?;
        // Closed here, not dropped: a close that cannot write (a full disk) must fail the copy,
        // or a file that only a repair can open would be kept as a savepoint.
        target.close().map_err(|e| target_error(e.into()))
    }
}

/// A shard's view of a [`RedbStore`]: the scopes in use live in memory; changed ones are handed
/// to the checkpoint; clean ones are evicted once durable when memory exceeds the budget.
#[derive(Debug)]
pub struct RedbBackend {
    store: RedbStore,
    hot: HashMap<StateKey, ScopeState>,
    dirty: HashSet<StateKey>,
    /// Scopes removed whose rows the store still holds, which read as empty here instead.
    /// With checkpoints: those handed over as removed to a checkpoint not yet durable (the
    /// shard goes on meanwhile), cleared once it is. Without: every stored scope removed, for
    /// good, since nothing deletes its row.
    removing: HashSet<StateKey>,
    /// Whether changes are kept for a checkpoint (a pipeline without checkpoints never takes
    /// them, and would keep every key it ever wrote or removed).
    tracked: bool,
    /// Last known serialised size of each hot scope, to estimate memory use.
    sizes: HashMap<StateKey, usize>,
    hot_bytes: usize,
    budget_bytes: usize,
    evicted: u64,
}

impl RedbBackend {
    /// A backend over `store` keeping at most about `budget_bytes` of clean state in memory.
    pub fn new(store: RedbStore, budget_bytes: usize) -> Self {
        RedbBackend {
            store,
            hot: HashMap::default(),
            dirty: HashSet::default(),
            removing: HashSet::default(),
            tracked: true,
            sizes: HashMap::default(),
            hot_bytes: 0,
            budget_bytes,
            evicted: 0,
        }
    }

    /// This backend for a pipeline that never checkpoints (`checkpoint_interval = "off"`, a
    /// replay): it reads the store's scopes but keeps no changes for a checkpoint, so a long
    /// run does not accumulate every key it ever wrote or removed. Its scopes stay in memory.
    pub fn without_checkpoints(mut self) -> Self {
        self.tracked = false;
        self
    }

    /// Scopes evicted from memory so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    fn set_size(&mut self, key: &StateKey, size: Option<usize>) {
        let old = match size {
            Some(size) => self.sizes.insert(key.clone(), size),
            None => self.sizes.remove(key),
        };
        self.hot_bytes = self.hot_bytes - old.unwrap_or(0) + size.unwrap_or(0);
    }

    /// In debug builds, that a scope the engine calls never stored is not in the store (unless
    /// it is in memory or on its way out): every debug run then checks the engine's claim.
    fn debug_assert_unstored(&self, key: &StateKey) {
        debug_assert!(
            self.hot.contains_key(key)
                || self.removing.contains(key)
                || matches!(self.store.read(key), Ok(None)),
            "a scope the engine calls never stored is in the store: {key:?}"
        );
    }
}

impl StateBackend for RedbBackend {
    fn take(&mut self, key: &StateKey) -> Result<ScopeState> {
        if let Some(state) = self.hot.remove(key) {
            return Ok(state);
        }
        // Removed since the last checkpoint (dirty and not in memory), or handed over as
        // removed to one not yet durable: the store's row is older than that.
        if self.dirty.contains(key) || self.removing.contains(key) {
            return Ok(ScopeState::default());
        }
        match self.store.read(key)? {
            Some((state, size)) => {
                self.set_size(key, Some(size));
                Ok(state)
            }
            None => Ok(ScopeState::default()),
        }
    }

    fn put(&mut self, key: StateKey, state: ScopeState) -> Result<()> {
        if self.tracked {
            self.dirty.insert(key.clone());
        }
        self.hot.insert(key, state);
        Ok(())
    }

    fn remove(&mut self, key: &StateKey) -> Result<()> {
        self.hot.remove(key);
        // Without checkpoints, a scope read from the store (it has a size) keeps its row there.
        if self.tracked {
            self.dirty.insert(key.clone());
        } else if self.sizes.contains_key(key) {
            self.removing.insert(key.clone());
        }
        self.set_size(key, None);
        Ok(())
    }

    fn take_unstored(&mut self, key: &StateKey) -> Result<ScopeState> {
        self.debug_assert_unstored(key);
        Ok(self.hot.remove(key).unwrap_or_default())
    }

    fn remove_unstored(&mut self, key: &StateKey) -> Result<()> {
        // Dropping `key` from `dirty` below would also drop a pending removal of a stored row.
        self.debug_assert_unstored(key);
        self.hot.remove(key);
        self.set_size(key, None);
        self.dirty.remove(key);
        Ok(())
    }

    fn changes(&mut self) -> Result<Vec<Change>> {
        let mut changes = Vec::with_capacity(self.dirty.len());
        for key in std::mem::take(&mut self.dirty) {
            // A scope that holds nothing is not stored: one a refused or failed call left
            // empty is no scope at all (nor counted in the state's totals).
            let value = (self.hot.get(&key))
                .filter(|state| !state.is_empty())
                .map(encode_scope);
            self.set_size(&key, value.as_ref().map(Vec::len));
            if value.is_none() {
                self.removing.insert(key.clone());
            }
            changes.push(Change {
                key: key.encode(),
                value,
            });
        }
        Ok(changes)
    }

    fn committed(&mut self) {
        // Untracked, no scope is known to be stored: none may be dropped from memory, and the
        // removals stay in `removing` for good (nothing deletes their rows).
        if !self.tracked {
            return;
        }
        self.removing.clear();
        if self.hot_bytes <= self.budget_bytes {
            return;
        }
        // Every hot scope not changed since the barrier is stored as it is now; drop such
        // scopes until memory is back under 90% of the budget. They are read back from redb
        // when next needed.
        let target = self.budget_bytes / 10 * 9;
        let victims: Vec<StateKey> = self
            .hot
            .keys()
            .filter(|k| !self.dirty.contains(*k))
            .cloned()
            .collect();
        for key in victims {
            if self.hot_bytes <= target {
                break;
            }
            self.hot.remove(&key);
            self.set_size(&key, None);
            self.evicted += 1;
        }
    }

    fn hot_len(&self) -> usize {
        self.hot.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Namespace;
    use crate::value::Value;

    fn key(name: &str) -> StateKey {
        StateKey {
            group: 3,
            operator: 0,
            namespace: Namespace::Global,
            key: name.into(),
        }
    }

    fn checkpoint(backend: &mut RedbBackend, store: &RedbStore, id: u64) {
        let state = backend.changes().unwrap();
        store
            .commit(&StoredCheckpoint {
                id,
                manifest: b"{}".to_vec(),
                state,
                ..Default::default()
            })
            .unwrap();
        backend.committed();
    }

    #[test]
    fn committed_state_survives_reopening_and_deletes_are_durable() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = RedbStore::open(dir.path()).unwrap();
            let mut backend = RedbBackend::new(store.clone(), usize::MAX);
            let mut state = backend.take(&key("ann")).unwrap();
            assert!(state.is_empty());
            state.put("count", Value::Int(2));
            backend.put(key("ann"), state.clone()).unwrap();
            backend.put(key("bob"), state).unwrap();
            checkpoint(&mut backend, &store, 1);
            backend.remove(&key("bob")).unwrap();
            checkpoint(&mut backend, &store, 2);
            // Not committed: lost with the process.
            backend.put(key("cyd"), ScopeState::default()).unwrap();
        }
        let store = RedbStore::open(dir.path()).unwrap();
        let mut backend = RedbBackend::new(store.clone(), usize::MAX);
        assert_eq!(
            backend.take(&key("ann")).unwrap().get("count"),
            Some(&Value::Int(2))
        );
        assert!(backend.take(&key("bob")).unwrap().is_empty());
        assert_eq!(store.manifest().unwrap(), Some(b"{}".to_vec()));
        assert_eq!(store.checkpoint_history().unwrap().len(), 2);
    }

    #[test]
    fn while_a_checkpoint_is_written_scopes_read_as_the_shard_left_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path()).unwrap();
        // A budget of nothing: every clean scope is evicted at each commit.
        let mut backend = RedbBackend::new(store.clone(), 0);
        let mut two = ScopeState::default();
        two.put("count", Value::Int(2));
        backend.put(key("ann"), two.clone()).unwrap();
        backend.put(key("bob"), two).unwrap();
        checkpoint(&mut backend, &store, 1);
        assert_eq!(backend.hot_len(), 0, "both evicted");
        // Ann is removed and Bob changed; the changes are handed over, not yet committed.
        backend.take(&key("ann")).unwrap();
        backend.remove(&key("ann")).unwrap();
        assert!(
            backend.take(&key("ann")).unwrap().is_empty(),
            "a removal not yet handed over reads as removed"
        );
        let mut bob = backend.take(&key("bob")).unwrap();
        bob.put("count", Value::Int(3));
        backend.put(key("bob"), bob).unwrap();
        let handed = backend.changes().unwrap();
        // The shard goes on while the checkpoint is written: the store still holds Ann's row.
        assert!(
            backend.take(&key("ann")).unwrap().is_empty(),
            "a removal handed over reads as removed, not as the stored row"
        );
        let bob = backend.take(&key("bob")).unwrap();
        assert_eq!(bob.get("count"), Some(&Value::Int(3)));
        backend.put(key("bob"), bob).unwrap();
        store
            .commit(&StoredCheckpoint {
                id: 2,
                manifest: b"{}".to_vec(),
                state: handed,
                ..Default::default()
            })
            .unwrap();
        backend.committed();
        assert_eq!(backend.hot_len(), 1, "Bob changed after the barrier: kept");
        assert!(backend.take(&key("ann")).unwrap().is_empty());
        assert_eq!(
            backend.take(&key("bob")).unwrap().get("count"),
            Some(&Value::Int(3))
        );
        // Ann comes back, is committed and evicted: read back from the store, not as removed.
        let mut five = ScopeState::default();
        five.put("count", Value::Int(5));
        backend.put(key("ann"), five).unwrap();
        checkpoint(&mut backend, &store, 3);
        assert_eq!(backend.hot_len(), 0);
        assert_eq!(
            backend.take(&key("ann")).unwrap().get("count"),
            Some(&Value::Int(5))
        );
    }

    #[test]
    fn without_checkpoints_the_stored_state_is_read_and_no_change_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path()).unwrap();
        let mut backend = RedbBackend::new(store.clone(), usize::MAX);
        let mut state = ScopeState::default();
        state.put("count", Value::Int(2));
        backend.put(key("ann"), state).unwrap();
        checkpoint(&mut backend, &store, 1);

        let mut backend = RedbBackend::new(store.clone(), usize::MAX).without_checkpoints();
        let ann = backend.take(&key("ann")).unwrap();
        assert_eq!(
            ann.get("count"),
            Some(&Value::Int(2)),
            "stored state is read"
        );
        backend.put(key("ann"), ann).unwrap();
        // A long run writes and removes many scopes (a window's each): none is kept for a
        // checkpoint that never comes.
        for i in 0..10_000 {
            let scope = key(&format!("window-{i}"));
            backend.put(scope.clone(), ScopeState::default()).unwrap();
            backend.remove(&scope).unwrap();
        }
        assert!(backend.dirty.is_empty());
        assert!(backend.changes().unwrap().is_empty());
        assert_eq!(backend.hot_len(), 1, "only the live scope is held");
        assert!(backend.removing.is_empty(), "none of them was stored");
        // A stored scope removed reads as removed, though its row stays in the store.
        let mut other = RedbBackend::new(store.clone(), usize::MAX).without_checkpoints();
        assert_eq!(
            other.take(&key("ann")).unwrap().get("count"),
            Some(&Value::Int(2))
        );
        other.remove(&key("ann")).unwrap();
        other.committed(); // (no caller does without checkpoints; it must not forget it)
        assert!(
            other.take(&key("ann")).unwrap().is_empty(),
            "the stored row came back"
        );

        // Over its budget, it still drops nothing: its changes are stored nowhere else.
        let mut tight = RedbBackend::new(store.clone(), 0).without_checkpoints();
        let mut ann = tight.take(&key("ann")).unwrap();
        ann.put("count", Value::Int(5));
        tight.put(key("ann"), ann).unwrap();
        tight.committed();
        assert_eq!(tight.evicted(), 0);
        let ann = tight.take(&key("ann")).unwrap();
        assert_eq!(ann.get("count"), Some(&Value::Int(5)), "the change is kept");
    }

    #[test]
    fn commits_keep_the_state_totals_exact() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path()).unwrap();
        let mut backend = RedbBackend::new(store.clone(), usize::MAX);
        let sized = |n: i64| {
            let mut state = ScopeState::default();
            state.put("n", Value::Int(n));
            state
        };
        backend.put(key("ann"), sized(1)).unwrap();
        backend.put(key("bob"), sized(2)).unwrap();
        checkpoint(&mut backend, &store, 1);
        let one = encode_scope(&sized(1)).len() as u64;
        assert_eq!(
            store.totals().unwrap(),
            StateTotals {
                scopes: 2,
                bytes: 2 * one
            }
        );
        let mut bigger = sized(3);
        bigger.put("name", Value::Text("a longer value".into()));
        let big = encode_scope(&bigger).len() as u64;
        backend.put(key("ann"), bigger).unwrap();
        backend.remove(&key("bob")).unwrap();
        checkpoint(&mut backend, &store, 2);
        assert_eq!(
            store.totals().unwrap(),
            StateTotals {
                scopes: 1,
                bytes: big
            }
        );
    }

    #[test]
    fn clean_state_is_evicted_over_budget_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(dir.path()).unwrap();
        let mut backend = RedbBackend::new(store.clone(), 1_000);
        for i in 0..100 {
            let mut state = ScopeState::default();
            state.put("n", Value::Int(i));
            backend.put(key(&format!("k{i}")), state).unwrap();
        }
        checkpoint(&mut backend, &store, 1);
        assert!(
            backend.hot_len() < 100 && backend.evicted() > 0,
            "hot {}",
            backend.hot_len()
        );
        assert!(backend.hot_bytes <= 1_000);
        for i in 0..100 {
            assert_eq!(
                backend.take(&key(&format!("k{i}"))).unwrap().get("n"),
                Some(&Value::Int(i))
            );
        }
    }
}
