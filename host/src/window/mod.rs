//! Event-time windows: which windows an event belongs to, and the per-shard engine that fires,
//! updates, merges and drops them as the watermark advances.
//!
//! Depends on `time` (its [`Window`] is this module's); its parts on `event`, `field_name`,
//! `hashing`, `operator` (its traits), `spec`, `state` and `value` as well.

mod arrived;
mod assign;
mod calls;
mod change_log;
mod due;
mod emission;
mod engine;
mod flush;
mod inputs;
mod key_map;
mod live;
mod output;
mod pending;
mod quarantine;
mod sessions;
mod slab;

pub use crate::time::Window;
pub use assign::assign;
pub use calls::MAX_EVENTS_PER_CALL;
pub use change_log::WindowRecord;
pub use engine::WindowEngine;
pub use output::{
    Context, Emission, EmissionKind, EngineError, EngineOutput, LateEvent, Park, Timeline,
};
pub use pending::MAX_HELD_BATCHES;
pub use quarantine::{ParkedRecord, ParkedSummary};
