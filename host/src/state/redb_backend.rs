//! [`RedbBackend`]: state in a redb file, with the scopes in use kept in memory.
//!
//! Layout: one table `state`, key = [`StateKey::encode`], value = the scope's JSON
//! (see `docs/design.md`). Each shard owns a backend; all of a process's backends share one
//! [`RedbStore`] (one database file). Changes are buffered per batch and written in one write
//! transaction by `flush`.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, Durability, ReadableDatabase, TableDefinition};

use super::{Result, ScopeState, StateBackend, StateError, StateKey};

const STATE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("state");

/// The redb database file shared by a pipeline's shards.
#[derive(Debug, Clone)]
pub struct RedbStore {
    db: Arc<Database>,
    path: PathBuf,
}

impl RedbStore {
    /// Opens (or creates) `dir/state.redb`, creating the directory.
    pub fn open(dir: &Path) -> Result<RedbStore> {
        let path = dir.join("state.redb");
        let store_err = |message: String| StateError::Store {
            path: path.clone(),
            message,
        };
        std::fs::create_dir_all(dir)
            .map_err(|e| store_err(format!("cannot create the data directory: {e}")))?;
        let db = Database::create(&path).map_err(|e| store_err(e.to_string()))?;
        Ok(RedbStore {
            db: Arc::new(db),
            path,
        })
    }

    /// Deletes all state: a run without recovery starts from nothing.
    pub fn clear(&self) -> Result<()> {
        let txn = self.db.begin_write().map_err(|e| self.error(e))?;
        txn.delete_table(STATE).map_err(|e| self.error(e))?;
        txn.commit().map_err(|e| self.error(e))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, e: impl std::fmt::Display) -> StateError {
        StateError::Store {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    fn read(&self, key: &StateKey) -> Result<Option<ScopeState>> {
        let txn = self.db.begin_read().map_err(|e| self.error(e))?;
        let table = match txn.open_table(STATE) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(self.error(e)),
        };
        let Some(bytes) = table
            .get(key.encode().as_slice())
            .map_err(|e| self.error(e))?
        else {
            return Ok(None);
        };
        serde_json::from_slice(bytes.value())
            .map(Some)
            .map_err(|e| StateError::Corrupt {
                path: self.path.clone(),
                message: e.to_string(),
            })
    }
}

/// A shard's view of a [`RedbStore`]: scopes in use live in memory; changed ones are written
/// at `flush`.
#[derive(Debug)]
pub struct RedbBackend {
    store: RedbStore,
    hot: HashMap<StateKey, ScopeState>,
    dirty: HashSet<StateKey>,
}

impl RedbBackend {
    /// A backend over `store`.
    pub fn new(store: RedbStore) -> Self {
        RedbBackend {
            store,
            hot: HashMap::new(),
            dirty: HashSet::new(),
        }
    }
}

impl StateBackend for RedbBackend {
    fn take(&mut self, key: &StateKey) -> Result<ScopeState> {
        if let Some(state) = self.hot.remove(key) {
            return Ok(state);
        }
        Ok(self.store.read(key)?.unwrap_or_default())
    }

    fn put(&mut self, key: StateKey, state: ScopeState) -> Result<()> {
        self.dirty.insert(key.clone());
        self.hot.insert(key, state);
        Ok(())
    }

    fn remove(&mut self, key: &StateKey) -> Result<()> {
        self.hot.remove(key);
        self.dirty.insert(key.clone());
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.dirty.is_empty() {
            return Ok(());
        }
        let store = &self.store;
        let mut txn = store.db.begin_write().map_err(|e| store.error(e))?;
        // Batches between checkpoints need not reach the disk one by one.
        txn.set_durability(Durability::None)
            .map_err(|e| store.error(e))?;
        {
            let mut table = txn.open_table(STATE).map_err(|e| store.error(e))?;
            for key in self.dirty.drain() {
                let encoded = key.encode();
                match self.hot.get(&key) {
                    Some(state) => {
                        let bytes = serde_json::to_vec(state).map_err(|e| store.error(e))?;
                        table
                            .insert(encoded.as_slice(), bytes.as_slice())
                            .map_err(|e| store.error(e))?;
                    }
                    None => {
                        table
                            .remove(encoded.as_slice())
                            .map_err(|e| store.error(e))?;
                    }
                }
            }
        }
        txn.commit().map_err(|e| store.error(e))
    }

    fn hot_len(&self) -> usize {
        self.hot.len()
    }
}

impl RedbStore {
    /// Makes everything written so far durable (one empty transaction with immediate
    /// durability persists the non-durable ones before it).
    pub fn sync(&self) -> Result<()> {
        let txn = self.db.begin_write().map_err(|e| self.error(e))?;
        txn.commit().map_err(|e| self.error(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Namespace;
    use crate::value::Value;

    #[test]
    fn flushed_state_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let key = StateKey {
            group: 3,
            operator: 0,
            namespace: Namespace::Global,
            key: "ann".into(),
        };
        {
            let mut backend = RedbBackend::new(RedbStore::open(dir.path()).unwrap());
            let mut state = backend.take(&key).unwrap();
            assert!(state.is_empty());
            state.put("count", Value::Int(2));
            backend.put(key.clone(), state).unwrap();
            backend.flush().unwrap();
            backend.store.sync().unwrap();
        }
        let mut backend = RedbBackend::new(RedbStore::open(dir.path()).unwrap());
        assert_eq!(
            backend.take(&key).unwrap().get("count"),
            Some(&Value::Int(2))
        );
        backend.remove(&key).unwrap();
        backend.flush().unwrap();
        assert!(backend.take(&key).unwrap().is_empty());
    }
}
