//! What a shard gives besides its window engine's output, and how a shard fails: the shard's
//! own types, apart from the engine's ([`crate::window::EngineOutput`],
//! [`crate::window::EngineError`]), since a shard also runs the interval join and the
//! enrichment chain. A leaf of `pipeline`: the shard, the join and the enrichment chain depend
//! on it; it depends only on `window`, `event`, `state` and `operator` (its load error).

use crate::event::DeadLetter;
use crate::operator::LoadError;
use crate::state::StateError;
use crate::window::{EngineError, LateEvent};

/// A failure that stops a shard: the state store failed, the host around an operator, or a
/// rollout's new version could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The state backend failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The host failed around an operator call.
    #[error("{0}")]
    Host(String),
    /// A rollout's candidate version could not be made into instances.
    #[error(transparent)]
    Load(#[from] LoadError),
}

impl From<EngineError> for ShardError {
    fn from(error: EngineError) -> Self {
        match error {
            EngineError::State(e) => ShardError::State(e),
            EngineError::Host(message) => ShardError::Host(message),
        }
    }
}

/// What the interval join and the enrichment chain could not pass on: late events, dead
/// letters, and the traps behind them.
#[derive(Debug, Default)]
pub struct Rejects {
    /// Events too late for the join.
    pub late: Vec<LateEvent>,
    /// Events an operator rejected or trapped on (or the join could not pair).
    pub dead_letters: Vec<DeadLetter>,
    /// Operator calls that trapped.
    pub traps: u64,
}
