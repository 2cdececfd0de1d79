//! WebAssembly operators: the wasmtime engine, loading and checking components, the linker with
//! the state imports, and per-shard instances with time and memory limits. Split the way
//! wasmtime splits `runtime/component/`: `runtime` (engine, linker, loading, the cache),
//! `compile_cache` (compiled components on disk), `guest` (instantiation, limits, the call),
//! `scope_host` (the state imports), `convert` (values across the boundary), `aggregate` and
//! `enrich` (the two bindings, each for both versions of the contract: `weir:operator@0.1.0`,
//! rows and a call per state value, and `@0.2.0`, columns and the named values passed with the
//! call; `aggregate` also for `@0.3.0`'s `windows`, many windows to a call), and `window_call`
//! (one window's part of such a call).
//!
//! Every guest call runs under an epoch deadline (a ticker thread advances the engine's epoch)
//! and a memory cap. A guest that traps is replaced by a fresh instance from its pre-instantiated
//! component; its state lives in the host, so nothing is lost. Guests get WASI with an empty
//! context: no files, no network, no environment, and clocks frozen at the epoch, since event
//! time, not wall time, is what an operator may depend on.
//!
//! Depends on `event`, `field_name`, `fsutil`, `hashing`, `prefetch`, `spec`, `state`, `time`
//! and `value`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker, Resource, ResourceTable};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

pub use super::scope_slot::ScopeSlot;
use super::{
    AggregateOperator, CarriedResult, EnrichOperator, Enriched, HostRefusal, Limits, LoadError,
    OperatorError, Projection, Result, Scope,
};
use crate::event::Event;
use crate::time::Window;
use crate::value::{Fields, Value};

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "aggregator",
        with: { "weir:operator/state.scope": super::ScopeSlot },
        imports: { default: trappable },
    });
}

mod enricher_bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "enricher",
        with: {
            "weir:operator/types": super::bindings::weir::operator::types,
            "weir:operator/state": super::bindings::weir::operator::state,
        },
        imports: { default: trappable },
    });
}

/// The worlds of `weir:operator@0.2.0`, whose values, output events and `scope` are 0.1's (so
/// both versions share those types and the one set of state imports).
mod bindings_v2 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2",
        world: "aggregator",
        with: {
            "weir:operator/types@0.1.0": super::bindings::weir::operator::types,
            "weir:operator/state@0.1.0": super::bindings::weir::operator::state,
        },
        imports: { default: trappable },
    });
}

mod enricher_bindings_v2 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2",
        world: "enricher",
        with: {
            "weir:operator/types@0.1.0": super::bindings::weir::operator::types,
            "weir:operator/state@0.1.0": super::bindings::weir::operator::state,
            "weir:operator/columns@0.2.0": super::bindings_v2::weir::operator0_2_0::columns,
        },
        imports: { default: trappable },
    });
}

/// The aggregator world of `weir:operator@0.3.0`: 0.2's `aggregate` (the same functions and
/// types) and `windows`, whose calls carry many windows.
mod bindings_v3 {
    wasmtime::component::bindgen!({
        path: "../wit/v0.3",
        world: "aggregator",
        with: {
            "weir:operator/types@0.1.0": super::bindings::weir::operator::types,
            "weir:operator/state@0.1.0": super::bindings::weir::operator::state,
            "weir:operator/columns@0.2.0": super::bindings_v2::weir::operator0_2_0::columns,
        },
        imports: { default: trappable },
    });
}

use bindings::weir::operator::{state as wit_state, types as wit};
use bindings_v2::weir::operator0_2_0::columns as wit_columns;

/// The interface names a component may export for each world, newest first (a 0.3 aggregator
/// exports 0.2's `aggregate` as well as `windows`).
const AGGREGATE_EXPORTS: &[&str] = &[
    "weir:operator/windows@0.3.0",
    "weir:operator/aggregate@0.2.0",
    "weir:operator/aggregate@0.1.0",
];
const ENRICH_EXPORTS: &[&str] = &["weir:operator/enrich@0.2.0", "weir:operator/enrich@0.1.0"];

mod aggregate;
mod compile_cache;
mod convert;
mod enrich;
mod guest;
mod runtime;
mod scope_host;
mod window_call;

pub use aggregate::WasmAggregate;
use convert::{from_wit, to_wit, to_wit_columns, to_wit_events};
pub use enrich::WasmEnrich;
pub use guest::HostData;
use guest::{
    Bindings, Declined, Guest, GuestError, Writes, admit_states, check_output, output_within,
};
pub use runtime::{ComponentKind, WasmOperator, WasmRuntime, digest_of};
use runtime::{EPOCH_TICK, Instantiator, root_cause};

impl super::AggregateCode for WasmOperator {
    fn instantiate(
        &self,
        limits: Limits,
        projection: Projection,
    ) -> std::result::Result<Box<dyn AggregateOperator>, LoadError> {
        Ok(Box::new(self.aggregate(limits, projection)?))
    }
}

impl super::EnrichCode for WasmOperator {
    fn instantiate(
        &self,
        limits: Limits,
        projection: Projection,
    ) -> std::result::Result<Box<dyn EnrichOperator>, LoadError> {
        Ok(Box::new(self.enrich(limits, projection)?))
    }
}
