//! Operator state: what one scope (a key, or a key and window) holds, how it is addressed, and
//! the [`StateBackend`] trait with its in-memory and redb implementations.
//!
//! Knows nothing of Wasm, windows' semantics or HTTP. Depends on `time`, `value`, `hashing` and
//! `fsutil` only.

mod codec;
mod key;
mod memory;
pub mod redb_backend;
mod scope;

pub use codec::{CodecError, decode as decode_scope};
pub use key::{KEY_GROUPS, Namespace, StateKey, key_group};
pub use memory::MemoryBackend;
pub use redb_backend::{
    RedbBackend, RedbStore, STATE_FILE, StateTotals, StoredCheckpoint, TableRow,
};
pub use scope::ScopeState;

/// Why a checkpoint's stored row (of the state or the windows table) cannot be restored: the
/// checkpoint is damaged or from an incompatible version.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RowError {
    /// The row's key does not decode.
    #[error("a {0} key is malformed")]
    MalformedKey(&'static str),
    /// A window row whose key names no window.
    #[error("a window row has no window")]
    NoWindow,
    /// A window's record does not decode.
    #[error("a window record is unreadable: {0}")]
    WindowRecord(#[source] serde_json::Error),
    /// A scope's state does not decode.
    #[error("{what} is unreadable: {source}")]
    Scope {
        /// Whose state.
        what: &'static str,
        /// Why.
        source: CodecError,
    },
}

/// Errors of the state backends.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The redb database could not be opened, read or written.
    #[error("state store {path}: {source}")]
    Redb {
        /// The database file.
        path: std::path::PathBuf,
        /// redb's error (boxed, as in [`StoreDamage::File`]).
        source: Box<redb::Error>,
    },
    /// The store cannot be used (in use by another process, not a data directory).
    #[error("state store {path}: {message}")]
    Store {
        /// The database file.
        path: std::path::PathBuf,
        /// What redb reported.
        message: String,
    },
    /// A store file (or a row or the manifest in it) could not be read: the file is corrupt or
    /// from an incompatible version.
    #[error(
        "state store {path}: a stored value is unreadable ({source}); the data directory is \
         corrupt or from another Weir version"
    )]
    Damaged {
        /// The database file.
        path: std::path::PathBuf,
        /// What could not be read.
        source: StoreDamage,
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
    /// The disk (or the quota) is full: nothing more could be written.
    #[error("state store {0}: the disk is full")]
    DiskFull(std::path::PathBuf),
    /// The store file is not there (deleted, or never made).
    #[error("state store {0}: no such file")]
    Missing(std::path::PathBuf),
}

/// What in a store file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreDamage {
    /// redb could not read the file (boxed: redb's error is large, and state errors travel in
    /// every shard's and pipeline's result).
    #[error(transparent)]
    File(Box<redb::Error>),
    /// A row does not decode.
    #[error(transparent)]
    Row(#[from] RowError),
    /// A scope's state does not decode.
    #[error(transparent)]
    Scope(#[from] CodecError),
    /// The checkpoint manifest is not its JSON.
    #[error(transparent)]
    Manifest(serde_json::Error),
}

impl From<redb::Error> for StoreDamage {
    fn from(error: redb::Error) -> Self {
        StoreDamage::File(Box::new(error))
    }
}

/// `Result` for state operations.
pub type Result<T, E = StateError> = std::result::Result<T, E>;

/// One changed scope, serialised for a checkpoint: `value` is `None` for a deletion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// [`StateKey::encode`]d key.
    pub key: Vec<u8>,
    /// The scope's bytes, or `None` if it was removed.
    pub value: Option<Vec<u8>>,
}

/// Where a shard keeps its operators' state. Each shard owns one backend (single writer).
///
/// `take` moves a scope's state out (an empty state if there is none), so that an operator call
/// can own it; `put` moves it back. At a checkpoint barrier the shard hands over
/// [`changes`](StateBackend::changes) (everything changed since the previous checkpoint) and
/// goes on working while the checkpoint is written; once it is durable, the shard calls
/// [`committed`](StateBackend::committed), always before handing over the next changes. In
/// between, the backend reads every scope as the shard last left it, never the store's older
/// copy (a scope handed over as removed reads as empty though its row is not yet deleted).
pub trait StateBackend: Send {
    /// Moves a scope's state out of the store; empty if absent. The caller puts it back or
    /// removes the key: until then a persistent backend may still hold the stored copy (redb
    /// deletes a stored row only on `remove`), so a state moved to another key needs both.
    fn take(&mut self, key: &StateKey) -> Result<ScopeState>;
    /// Stores a scope's state.
    fn put(&mut self, key: StateKey, state: ScopeState) -> Result<()>;
    /// Deletes a scope's state.
    fn remove(&mut self, key: &StateKey) -> Result<()>;
    /// Moves out the state of a scope the caller knows is in no store: created since the last
    /// [`changes`](StateBackend::changes), under a key never handed over. What `take` does,
    /// without looking in the store.
    fn take_unstored(&mut self, key: &StateKey) -> Result<ScopeState> {
        self.take(key)
    }
    /// Deletes a scope the caller knows is in no store (see
    /// [`take_unstored`](StateBackend::take_unstored)): nothing for the next checkpoint to do.
    fn remove_unstored(&mut self, key: &StateKey) -> Result<()> {
        self.remove(key)
    }
    /// Everything changed since the last call, serialised (empty for volatile backends).
    fn changes(&mut self) -> Result<Vec<Change>>;
    /// Every change handed over by `changes` is durable: memory may now be released.
    fn committed(&mut self);
    /// How many scopes are held in memory.
    fn hot_len(&self) -> usize;
}

/// Encodes a scope's state for storage (see [`codec`]).
pub fn encode_scope(state: &ScopeState) -> Vec<u8> {
    codec::encode(state)
}
