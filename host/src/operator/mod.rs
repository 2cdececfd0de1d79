//! Operators: the host-side traits every operator implements, the WebAssembly components that
//! implement them for users, and native operators used as a benchmark baseline.
//!
//! The trait layer (this file, [`Projection`], [`Limits`], [`LoadError`]) names no Wasm type:
//! aggregate and enrichment code ([`AggregateCode`], [`EnrichCode`]) is a component
//! ([`WasmOperator`], whose implementations live in `wasm/`) or a native operator
//! ([`NativeAggregate`], [`NativeEnrich`]), and rollouts swap either.
//!
//! Three outcomes are kept apart (see [`OperatorError`]): the operator rejects its input, or the
//! host refuses it by a limit ([`HostRefusal`]) (a dead letter); the guest traps (the instance
//! is replaced, state is untouched); or the host fails.
//! Depends on `state`, `value`, `event`, `field_name`, `time` (for the [`Window`] type), `spec`
//! (stored operator code and the sandbox's limits), `names`, `fsutil`, `hashing` and `prefetch`.

pub mod combine;
mod load_error;
pub mod native;
mod projection;
pub mod quota;
mod refusal;
pub mod registry;
mod sandbox;
pub mod scope_slot;
mod wasm;

use std::sync::Arc;

pub use load_error::LoadError;
pub use projection::Projection;
pub use refusal::HostRefusal;
pub use registry::{Registry, RegistryError, VersionInfo};
pub use sandbox::Limits;
pub use wasm::{ComponentKind, WasmAggregate, WasmEnrich, WasmOperator, WasmRuntime, digest_of};

use crate::event::{Crossing, Event};
use crate::field_name::FieldName;
use crate::state::ScopeState;
use crate::time::Millis;
use crate::time::Window;
use crate::value::{Fields, Value};

/// What one operator call sees: the key it is about and that key's (and window's) state.
#[derive(Debug, Default, Clone)]
pub struct Scope {
    /// The key.
    pub key: Arc<str>,
    /// The state the host scoped to this call.
    pub state: ScopeState,
}

/// Why an operator call did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// The operator returned an error for its input; the input becomes dead letters.
    #[error("operator rejected the input: {0}")]
    Rejected(String),
    /// The host refused the call by a limit of the pipeline's (state quota, output size, batch
    /// width); handled as a rejection: the input becomes dead letters with the reason.
    #[error("operator rejected the input: {0}")]
    Refused(#[from] HostRefusal),
    /// The guest trapped (a panic, an invalid memory access, the time or memory limit); its
    /// instance was replaced and the call's state changes were discarded.
    #[error("operator trapped: {0}")]
    Trapped(String),
    /// The host failed around the call. A message, not the error itself: the errors here come
    /// from the Wasm runtime (its resource table) or from decoding a partial state, and this
    /// layer names no Wasm type (see the module doc) and stays `Clone`.
    #[error("host error around an operator call: {0}")]
    Host(String),
}

/// `Result` for operator calls.
pub type Result<T, E = OperatorError> = std::result::Result<T, E>;

/// A mergeable windowed aggregation.
pub trait AggregateOperator: Send {
    /// Adds events (all of `scope`'s key, in arrival order) to the window's state.
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()>;
    /// Folds `source`'s partial state into `target`'s.
    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()>;
    /// Produces the window's output record from its state.
    fn finish(&mut self, scope: &mut Scope, window: Window) -> Result<Fields>;
    /// Converts state another version (`from_version`) wrote, before this one touches it.
    fn migrate(&mut self, _scope: &mut Scope, _from_version: &str) -> Result<()> {
        Ok(())
    }
    /// The version that serves `key`, when several may (rollouts).
    fn version_for(&self, _key: &str) -> Option<Arc<str>> {
        None
    }
    /// Whether [`Self::add_windows`] and [`Self::finish_windows`] may make calls now; if not,
    /// the engine makes one call per window without gathering windows first. The default:
    /// no.
    fn carries_windows(&self) -> bool {
        false
    }
    /// Adds each window's events (as [`Self::add`] would) in one call, if the operator makes
    /// such calls, and says for each window whether it did: `None` if it made no call. A
    /// window not done is left exactly as it was, for `add` to do alone (which reports any
    /// error). An error is the host's, or a trap of the call (nothing done). The default makes
    /// no call: a native call per window costs little.
    fn add_windows(&mut self, _windows: &mut [WindowEvents<'_>]) -> CarriedResult<bool> {
        Ok(None)
    }
    /// Each window's output (as [`Self::finish`] would give it) from one call, if the operator
    /// makes such calls (`None` if it made none); `None` for a window left to `finish` alone.
    /// Errors as for [`Self::add_windows`]. The default makes no call.
    fn finish_windows(&mut self, _windows: &[(&Scope, Window)]) -> CarriedResult<Option<Fields>> {
        Ok(None)
    }
}

/// What a call carrying many windows gave: each window's outcome, if a call was made.
pub type CarriedResult<T> = Result<Option<Vec<T>>>;

/// One window's part of a call carrying many windows ([`AggregateOperator::add_windows`]).
pub struct WindowEvents<'a> {
    /// The window's state.
    pub scope: &'a mut Scope,
    /// Its events, in arrival order.
    pub events: &'a [&'a Event],
    /// Exactly one per event, beside it: the [`Crossing`] the router took of it (`None` if it
    /// took none); or empty, if the caller has none to give. An operator may read an event's
    /// only crossing field from here instead of from the event.
    pub crossings: &'a [&'a Option<Crossing>],
}

/// Code that makes aggregate instances, one per shard: a Wasm component or a native operator.
/// Rollouts move keys between versions of it, whatever it is.
pub trait AggregateCode: Send + Sync + std::fmt::Debug {
    /// A new instance, passed the fields `projection` selects.
    fn instantiate(
        &self,
        limits: Limits,
        projection: Projection,
    ) -> std::result::Result<Box<dyn AggregateOperator>, LoadError>;
}

/// A native aggregate (one of [`native::AGGREGATES`]) as code rollouts can instantiate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeAggregate(String);

impl NativeAggregate {
    /// The native aggregate `name`, if there is one.
    pub fn named(name: &str) -> Option<NativeAggregate> {
        native::AGGREGATES
            .contains(&name)
            .then(|| NativeAggregate(name.to_owned()))
    }
}

impl AggregateCode for NativeAggregate {
    fn instantiate(
        &self,
        _limits: Limits,
        _projection: Projection,
    ) -> std::result::Result<Box<dyn AggregateOperator>, LoadError> {
        Ok(native::aggregate(&self.0).expect("a NativeAggregate names a native aggregate"))
    }
}

/// Aggregate code shared by every shard (and the router, which hands it to them).
pub type SharedAggregateCode = Arc<dyn AggregateCode>;

/// Code that makes enrichment instances, one per shard: a Wasm component or a native operator.
/// Rollouts move keys between versions of it, whatever it is.
pub trait EnrichCode: Send + Sync + std::fmt::Debug {
    /// A new instance, passed the fields `projection` selects.
    fn instantiate(
        &self,
        limits: Limits,
        projection: Projection,
    ) -> std::result::Result<Box<dyn EnrichOperator>, LoadError>;
}

/// A native enrichment operator (one of [`native::ENRICHERS`]) as code rollouts can
/// instantiate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeEnrich(String);

impl NativeEnrich {
    /// The native enrichment operator `name`, if there is one.
    pub fn named(name: &str) -> Option<NativeEnrich> {
        native::ENRICHERS
            .contains(&name)
            .then(|| NativeEnrich(name.to_owned()))
    }
}

impl EnrichCode for NativeEnrich {
    fn instantiate(
        &self,
        _limits: Limits,
        _projection: Projection,
    ) -> std::result::Result<Box<dyn EnrichOperator>, LoadError> {
        Ok(native::enrich(&self.0).expect("a NativeEnrich names a native enrichment operator"))
    }
}

/// The code of an operator version a rollout brings in, shared by every shard: an aggregate's,
/// or an enrichment operator's, each a Wasm component or a native operator.
#[derive(Clone)]
pub enum VersionCode {
    /// An aggregate's.
    Aggregate(SharedAggregateCode),
    /// An enrichment operator's.
    Enrich(Arc<dyn EnrichCode>),
}

impl std::fmt::Debug for VersionCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VersionCode::Aggregate(_) => f.write_str("VersionCode::Aggregate"),
            VersionCode::Enrich(_) => f.write_str("VersionCode::Enrich"),
        }
    }
}

/// One event produced by an enrichment operator.
#[derive(Debug, Clone, PartialEq)]
pub struct Enriched {
    /// Index, in the call's input, of the event it came from.
    pub origin: usize,
    /// Its event time.
    pub timestamp: Millis,
    /// Its fields.
    pub fields: Vec<(FieldName, Value)>,
}

/// A per-key event transformer.
pub trait EnrichOperator: Send {
    /// Turns events of `scope`'s key into zero or more events each.
    fn process(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<Vec<Enriched>>;
}
