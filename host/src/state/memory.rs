//! [`MemoryBackend`]: state in a hash map, gone when the process ends. Depends on `hashing`.

use crate::hashing::HashMap;

use super::{Change, Result, ScopeState, StateBackend, StateKey};

/// Keeps all state in memory. Fast and volatile.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    scopes: HashMap<StateKey, ScopeState>,
}

impl StateBackend for MemoryBackend {
    fn take(&mut self, key: &StateKey) -> Result<ScopeState> {
        Ok(self.scopes.remove(key).unwrap_or_default())
    }

    fn put(&mut self, key: StateKey, state: ScopeState) -> Result<()> {
        self.scopes.insert(key, state);
        Ok(())
    }

    fn remove(&mut self, key: &StateKey) -> Result<()> {
        self.scopes.remove(key);
        Ok(())
    }

    fn changes(&mut self) -> Result<Vec<Change>> {
        Ok(Vec::new())
    }

    fn committed(&mut self) {}

    fn hot_len(&self) -> usize {
        self.scopes.len()
    }
}
