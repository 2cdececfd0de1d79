//! The window engine's public types: what a batch gives it ([`Timeline`], [`Context`]), what
//! it produces ([`EngineOutput`]: [`Emission`]s, [`LateEvent`]s, dead letters) and how it fails
//! ([`EngineError`]). No state lives here. Anything may depend on this module; it depends only on
//! `event`, `operator` (the aggregate trait), `state` (its backend and error), `time` and `value`.

use std::sync::Arc;

use crate::event::{DeadLetter, Event};
use crate::operator::AggregateOperator;
use crate::state::{StateBackend, StateError};
use crate::time::{Millis, Window};
use crate::value::Fields;

/// What kind of result record an emission is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EmissionKind {
    /// Withdraws an earlier emission of a window that a session merge superseded.
    Retract,
    /// The first emission of a window.
    Result,
    /// A later emission of a window (a late event within the allowed lateness).
    Update,
    /// A window's current result before it closes (`[emit] mode = "early"`).
    Early,
}

impl EmissionKind {
    /// The name used in output records.
    pub fn as_str(self) -> &'static str {
        match self {
            EmissionKind::Retract => "retract",
            EmissionKind::Result => "result",
            EmissionKind::Update => "update",
            EmissionKind::Early => "early",
        }
    }
}

/// One window result.
#[derive(Debug, Clone, PartialEq)]
pub struct Emission {
    /// Arrival index of the event whose processing caused it (`u64::MAX`: end of input).
    pub trigger: u64,
    /// The key.
    pub key: Arc<str>,
    /// The window.
    pub window: Window,
    /// Result, update or retract.
    pub kind: EmissionKind,
    /// 1 for the first emission of a window, then one more for each update. A retraction
    /// carries the version it withdraws.
    pub version: u64,
    /// The operator's output (for a retraction: the withdrawn output).
    pub value: Fields,
    /// For an update: the output it replaces, if the window had one (what a downstream stage
    /// withdraws before it takes the new one).
    pub replaces: Option<Fields>,
    /// The operator version that produced it, when it is not the spec's (rollouts).
    pub operator_version: Option<Arc<str>>,
}

impl Emission {
    /// The canonical output order: by trigger, retractions first, then window end, window
    /// start and key.
    pub fn order_key(&self) -> (u64, EmissionKind, Millis, Millis, &str) {
        let rank = if self.kind == EmissionKind::Retract {
            EmissionKind::Retract
        } else {
            EmissionKind::Result
        };
        (
            self.trigger,
            rank,
            self.window.end,
            self.window.start,
            &self.key,
        )
    }
}

/// What happens besides a shard's events in one batch, by arrival index: watermark advances
/// (`(index, new watermark)`, ascending), early firings of every changed window (`[emit]
/// early_interval`: indexes, ascending), and whether the input ends after them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Timeline<'a> {
    /// Watermark advances.
    pub advances: &'a [(u64, Millis)],
    /// Early firings.
    pub early: &'a [u64],
    /// Re-drives of quarantined keys (`None`: every key), each after the arrival index it
    /// has (see [`crate::window::WindowEngine`]'s quarantine).
    pub redrives: &'a [(u64, Option<Arc<str>>)],
    /// Whether the input ends after the batch.
    pub end_of_input: bool,
}

/// An event too late for all of its windows.
#[derive(Debug, Clone, PartialEq)]
pub struct LateEvent {
    /// Arrival index.
    pub seq: u64,
    /// The event.
    pub event: Event,
    /// The watermark when it arrived.
    pub watermark: Millis,
    /// Why it is late.
    pub reason: String,
}

/// Events of a key that failed in a call, to be parked with the key (`[quarantine]`): the
/// engine takes them before it returns.
#[derive(Debug, Clone)]
pub struct Park {
    /// The key.
    pub key: Arc<str>,
    /// Its events that failed, and those after them in the same call, in order.
    pub events: Vec<crate::event::Event>,
    /// The failure.
    pub reason: String,
}

/// Everything one batch produced.
#[derive(Debug, Default)]
pub struct EngineOutput {
    /// Keys to park: taken by the engine before it returns, so always empty after.
    pub parks: Vec<Park>,
    /// Parked keys that changed (`None`: no longer parked), for the pipeline's status.
    pub quarantined: Vec<(Arc<str>, Option<super::quarantine::ParkedSummary>)>,
    /// Window results.
    pub emissions: Vec<Emission>,
    /// Late events.
    pub late: Vec<LateEvent>,
    /// Events an operator rejected or trapped on.
    pub dead_letters: Vec<DeadLetter>,
    /// Operator calls that trapped.
    pub traps: u64,
}

/// A failure that stops the shard: the state store failed, or the host around an operator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The state backend failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The host failed around an operator call.
    #[error("{0}")]
    Host(String),
}

pub(super) type Result<T, E = EngineError> = std::result::Result<T, E>;

/// The operator and state a batch works with.
pub struct Context<'a> {
    /// The aggregate.
    pub operator: &'a mut dyn AggregateOperator,
    /// The shard's state.
    pub state: &'a mut dyn StateBackend,
}
