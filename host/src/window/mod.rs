//! Event-time windows: which windows an event belongs to, and the per-shard engine that fires,
//! updates, merges and drops them as the watermark advances.

mod arrived;
mod assign;
mod engine;
mod inputs;
mod key_map;
mod slab;

pub use crate::time::Window;
pub use assign::assign;
pub use engine::{
    Context, Emission, EmissionKind, EngineError, EngineOutput, LateEvent, MAX_EVENTS_PER_CALL,
    MAX_HELD_BATCHES, Timeline, WindowEngine, WindowRecord,
};
