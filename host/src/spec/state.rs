//! The `[state]` section: the backend (redb in a directory, or memory), the memory budget per
//! shard and the state quota (`max_keys`, `max_bytes`), with the raw form, defaults, limits and
//! checks.
//!
//! Depends on `values` only.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::Result;
use super::values::{RawSize, invalid, size};

/// The default memory budget per shard: 256 MiB.
pub const DEFAULT_MEMORY_BUDGET: usize = 256 << 20;

/// The largest state memory budget per shard.
pub const MAX_MEMORY_BUDGET: usize = 64 << 30;

/// Which state backend to use.
#[derive(Debug, Clone, PartialEq)]
pub enum StateSpec {
    /// State in memory only.
    Memory,
    /// State in a redb file inside this directory.
    Redb(PathBuf),
}

/// The state quota (`[state] max_keys`, `max_bytes`); both absent: no quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateQuotaSpec {
    /// Scopes: a key's state, or a key's state in one window.
    pub max_keys: Option<u64>,
    /// Bytes of the scopes' encoded values.
    pub max_bytes: Option<u64>,
}

/// The `[state]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawState {
    pub(super) backend: Option<String>,
    pub(super) dir: Option<PathBuf>,
    memory_budget: Option<RawSize>,
    max_keys: Option<u64>,
    max_bytes: Option<RawSize>,
}

/// Checks the `[state]` backend; its directory is relative to `base`, and defaults to
/// `weir-data/<name>`.
pub(super) fn check(raw: &RawState, name: &str, base: &Path) -> Result<StateSpec> {
    match raw.backend.as_deref() {
        None | Some("redb") => Ok(StateSpec::Redb(match &raw.dir {
            Some(dir) => base.join(dir),
            None => PathBuf::from("weir-data").join(name),
        })),
        Some("memory") => Ok(StateSpec::Memory),
        Some(other) => Err(invalid(format!(
            "state.backend {other:?} is unknown: use redb or memory"
        ))),
    }
}

/// Checks the `[state]`'s memory budget per shard and its quota: `(memory_budget, quota)`.
pub(super) fn check_memory(raw: &RawState) -> Result<(usize, StateQuotaSpec)> {
    let memory_budget = size(
        "state.memory_budget",
        &raw.memory_budget,
        DEFAULT_MEMORY_BUDGET,
    )?;
    if memory_budget > MAX_MEMORY_BUDGET {
        return Err(invalid(format!(
            "state.memory_budget must be at most {} GiB",
            MAX_MEMORY_BUDGET >> 30
        )));
    }
    let quota = StateQuotaSpec {
        max_keys: raw.max_keys,
        max_bytes: match &raw.max_bytes {
            Some(_) => Some(size("state.max_bytes", &raw.max_bytes, 0)? as u64),
            None => None,
        },
    };
    if quota.max_keys == Some(0) || quota.max_bytes == Some(0) {
        return Err(invalid(
            "state.max_keys and state.max_bytes, when given, are positive: leave them out for no quota",
        ));
    }
    Ok((memory_budget, quota))
}
