//! Operator state: what one scope (a key, or a key and window) holds, how it is addressed, and
//! the [`StateBackend`] trait with its in-memory and redb implementations.
//!
//! Knows nothing of Wasm, windows' semantics or HTTP.

mod key;
mod memory;
mod redb_backend;
mod scope;

pub use key::{KEY_GROUPS, Namespace, StateKey, key_group};
pub use memory::MemoryBackend;
pub use redb_backend::{RedbBackend, RedbStore};
pub use scope::ScopeState;

/// Errors of the state backends.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The redb database could not be opened, read or written.
    #[error("state store {path}: {message}")]
    Store {
        /// The database file.
        path: std::path::PathBuf,
        /// What redb reported.
        message: String,
    },
    /// A stored value could not be decoded: the file is corrupt or from an incompatible version.
    #[error(
        "state store {path}: a stored value is unreadable ({message}); the data directory is corrupt or from another Weir version"
    )]
    Corrupt {
        /// The database file.
        path: std::path::PathBuf,
        /// The decoding error.
        message: String,
    },
}

/// `Result` for state operations.
pub type Result<T, E = StateError> = std::result::Result<T, E>;

/// Where a shard keeps its operators' state. Each shard owns one backend (single writer).
///
/// `take` moves a scope's state out (an empty state if there is none), so that an operator call
/// can own it; `put` moves it back. `flush` is called after every batch and makes the batch's
/// changes visible to the durable store, if there is one.
pub trait StateBackend: Send {
    /// Moves a scope's state out of the store; empty if absent.
    fn take(&mut self, key: &StateKey) -> Result<ScopeState>;
    /// Stores a scope's state.
    fn put(&mut self, key: StateKey, state: ScopeState) -> Result<()>;
    /// Deletes a scope's state.
    fn remove(&mut self, key: &StateKey) -> Result<()>;
    /// Writes buffered changes through to durable storage.
    fn flush(&mut self) -> Result<()>;
    /// How many scopes are held in memory.
    fn hot_len(&self) -> usize;
}
