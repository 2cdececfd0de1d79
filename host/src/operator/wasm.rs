//! WebAssembly operators: the wasmtime engine, loading and checking components, the linker with
//! the state imports, and per-shard instances with time and memory limits.
//!
//! Every guest call runs under an epoch deadline (a ticker thread advances the engine's epoch)
//! and a memory cap. A guest that traps is replaced by a fresh instance from its pre-instantiated
//! component; its state lives in the host, so nothing is lost. Guests get WASI with an empty
//! context: no files, no network, no environment, and clocks frozen at the epoch, since event
//! time, not wall time, is what an operator may depend on.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use wasmtime::component::{Component, HasSelf, Linker, Resource, ResourceTable};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

pub use super::scope_slot::ScopeSlot;
use super::{AggregateOperator, EnrichOperator, Enriched, OperatorError, Result, Scope};
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

use bindings::weir::operator::{state as wit_state, types as wit};

/// The interface names a component exports for each world.
const AGGREGATE_EXPORT: &str = "weir:operator/aggregate@0.1.0";
const ENRICH_EXPORT: &str = "weir:operator/enrich@0.1.0";

/// Why a component could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read operator module {path}: {source}")]
    Read {
        /// The module's path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The bytes are not a WebAssembly component (a core module, or not Wasm at all).
    #[error(
        "operator module {path} is not a WebAssembly component: {message}. Build it for the wasm32-wasip2 target (cargo build --release --target wasm32-wasip2)"
    )]
    NotAComponent {
        /// The module's path.
        path: PathBuf,
        /// What wasmtime reported.
        message: String,
    },
    /// The component does not export the interface of the world the spec asks for.
    #[error(
        "operator module {path} does not implement the `{expected}` world of weir:operator@0.1.0 (it exports: {exports}); {hint}"
    )]
    WrongWorld {
        /// The module's path.
        path: PathBuf,
        /// The world the spec needs.
        expected: &'static str,
        /// What the component exports instead.
        exports: String,
        /// How to fix it.
        hint: &'static str,
    },
    /// A stored component's bytes are not the ones that were uploaded.
    #[error(
        "operator module {path} does not match its recorded digest {expected} (it is now \
         {actual}): the file was changed after upload; upload the operator again as a new version"
    )]
    DigestMismatch {
        /// The module's path.
        path: PathBuf,
        /// The digest recorded at upload.
        expected: String,
        /// The digest of the file now.
        actual: String,
    },
    /// The component imports something Weir does not provide.
    #[error(
        "operator module {path} cannot be linked: {message}. Operators may import only weir:operator/state and WASI"
    )]
    Link {
        /// The module's path.
        path: PathBuf,
        /// What wasmtime reported.
        message: String,
    },
    /// The engine could not be set up.
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),
}

/// Which world a component implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComponentKind {
    /// `aggregator`: exports `aggregate`.
    Aggregate,
    /// `enricher`: exports `enrich`.
    Enrich,
}

impl ComponentKind {
    /// The WIT world's name.
    pub fn world(self) -> &'static str {
        match self {
            ComponentKind::Aggregate => "aggregator",
            ComponentKind::Enrich => "enricher",
        }
    }
}

/// Limits on each guest call and instance. What each protects is in its field's doc.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Wall time one call may take before it is interrupted (protects the shard from a runaway
    /// loop that would stall every key behind it). Default 1 s.
    pub call_timeout: Duration,
    /// Linear memory one instance may grow to (protects the host's memory from one guest).
    /// Default 64 MiB.
    pub memory_bytes: usize,
    /// Largest output of one call, in bytes (protects sinks and downstream consumers from one
    /// call's flood). Default 1 MiB.
    pub max_output_bytes: usize,
    /// Real clocks instead of clocks frozen at the epoch.
    pub clock: bool,
    /// Real entropy instead of a fixed pseudo-random sequence.
    pub random: bool,
}

impl From<&crate::spec::SandboxSpec> for Limits {
    fn from(sandbox: &crate::spec::SandboxSpec) -> Self {
        Limits {
            call_timeout: Duration::from_millis(sandbox.call_timeout as u64),
            memory_bytes: sandbox.memory,
            max_output_bytes: sandbox.max_output_bytes,
            clock: sandbox.clock,
            random: sandbox.random,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::from(&crate::spec::SandboxSpec::default())
    }
}

/// How often the epoch ticks; call deadlines are whole ticks.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The process's wasmtime engine and the linker every operator is instantiated with.
#[derive(Clone)]
pub struct WasmRuntime {
    engine: Engine,
    linker: Arc<Linker<HostData>>,
    /// Compiled components by the SHA-256 of their bytes: each is compiled once per process.
    compiled: Arc<std::sync::Mutex<std::collections::HashMap<[u8; 32], Component>>>,
}

impl std::fmt::Debug for WasmRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WasmRuntime")
    }
}

fn read_component(path: &Path) -> std::result::Result<Vec<u8>, LoadError> {
    std::fs::read(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })
}

/// `sha256:<hex>` of a component's bytes: how the registry names and checks what it stores.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{:x}", <sha2::Sha256 as sha2::Digest>::digest(bytes))
}

impl WasmRuntime {
    /// The shared runtime, created on first use with its epoch ticker.
    pub fn shared() -> std::result::Result<WasmRuntime, LoadError> {
        static RUNTIME: OnceLock<std::result::Result<WasmRuntime, String>> = OnceLock::new();
        RUNTIME
            .get_or_init(|| Self::new().map_err(|e| e.to_string()))
            .clone()
            .map_err(LoadError::Engine)
    }

    fn new() -> wasmtime::Result<WasmRuntime> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        // Traps are reported by their cause; a symbolised backtrace per trap would cost far
        // more than the trap itself when a guest traps on every event of some keys.
        config.wasm_backtrace_max_frames(None);
        config.wasm_backtrace_details(wasmtime::WasmBacktraceDetails::Disable);
        let engine = Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        wit_state::add_to_linker::<HostData, HasSelf<HostData>>(&mut linker, |data| data)?;
        let ticker = engine.weak();
        std::thread::Builder::new()
            .name("weir-epoch".into())
            .spawn(move || {
                while let Some(engine) = ticker.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })
            .map_err(wasmtime::Error::from)?;
        Ok(WasmRuntime {
            engine,
            linker: Arc::new(linker),
            compiled: Arc::default(),
        })
    }

    /// Loads a component file and checks that it implements `kind`'s world and imports only
    /// what Weir provides.
    pub fn load(
        &self,
        path: &Path,
        kind: ComponentKind,
    ) -> std::result::Result<WasmOperator, LoadError> {
        self.load_bytes(path, &read_component(path)?, kind)
    }

    /// Like [`load`](Self::load), for a stored component whose bytes must have the digest
    /// `sha256:<hex>` recorded when it was uploaded.
    pub fn load_checked(
        &self,
        path: &Path,
        digest: &str,
        kind: ComponentKind,
    ) -> std::result::Result<WasmOperator, LoadError> {
        let bytes = read_component(path)?;
        let actual = digest_of(&bytes);
        if actual != digest {
            return Err(LoadError::DigestMismatch {
                path: path.to_owned(),
                expected: digest.to_owned(),
                actual,
            });
        }
        self.load_bytes(path, &bytes, kind)
    }

    /// Compiles a component, or takes it from the cache of this process.
    fn compile(&self, path: &Path, bytes: &[u8]) -> std::result::Result<Component, LoadError> {
        let digest: [u8; 32] = <sha2::Sha256 as sha2::Digest>::digest(bytes).into();
        if let Some(component) = self
            .compiled
            .lock()
            .expect("compile cache lock")
            .get(&digest)
        {
            return Ok(component.clone());
        }
        let component =
            Component::new(&self.engine, bytes).map_err(|e| LoadError::NotAComponent {
                path: path.to_owned(),
                message: root_cause(&e),
            })?;
        self.compiled
            .lock()
            .expect("compile cache lock")
            .insert(digest, component.clone());
        Ok(component)
    }

    /// Which of Weir's worlds a component implements, checking it fully (it is then cached).
    pub fn kind_of(
        &self,
        path: &Path,
        bytes: &[u8],
    ) -> std::result::Result<ComponentKind, LoadError> {
        match self.load_bytes(path, bytes, ComponentKind::Aggregate) {
            Ok(_) => Ok(ComponentKind::Aggregate),
            Err(LoadError::WrongWorld { .. }) => self
                .load_bytes(path, bytes, ComponentKind::Enrich)
                .map(|_| ComponentKind::Enrich),
            Err(e) => Err(e),
        }
    }

    pub fn load_bytes(
        &self,
        path: &Path,
        bytes: &[u8],
        kind: ComponentKind,
    ) -> std::result::Result<WasmOperator, LoadError> {
        let component = self.compile(path, bytes)?;
        let exports: Vec<String> = component
            .component_type()
            .exports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let (needed, other, hint) = match kind {
            ComponentKind::Aggregate => (
                AGGREGATE_EXPORT,
                ENRICH_EXPORT,
                "it looks like an enrichment operator: use kind = \"enrich\"",
            ),
            ComponentKind::Enrich => (
                ENRICH_EXPORT,
                AGGREGATE_EXPORT,
                "it looks like an aggregate operator: use kind = \"aggregate\"",
            ),
        };
        if !exports.iter().any(|e| e == needed) {
            let hint = if exports.iter().any(|e| e == other) {
                hint
            } else {
                "build it with the weir-sdk crate (or another binding generator) against wit/operator.wit"
            };
            return Err(LoadError::WrongWorld {
                path: path.to_owned(),
                expected: kind.world(),
                exports: if exports.is_empty() {
                    "nothing".into()
                } else {
                    exports.join(", ")
                },
                hint,
            });
        }
        let link = |e: wasmtime::Error| LoadError::Link {
            path: path.to_owned(),
            message: root_cause(&e),
        };
        let pre = self.linker.instantiate_pre(&component).map_err(link)?;
        let instantiator = match kind {
            ComponentKind::Aggregate => {
                Instantiator::Aggregate(bindings::AggregatorPre::new(pre).map_err(link)?)
            }
            ComponentKind::Enrich => {
                Instantiator::Enrich(enricher_bindings::EnricherPre::new(pre).map_err(link)?)
            }
        };
        Ok(WasmOperator {
            engine: self.engine.clone(),
            instantiator,
            path: path.to_owned(),
        })
    }
}

fn root_cause(e: &wasmtime::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    message
}

#[derive(Clone)]
enum Instantiator {
    Aggregate(bindings::AggregatorPre<HostData>),
    Enrich(enricher_bindings::EnricherPre<HostData>),
}

/// A loaded, checked, compiled component, ready to be instantiated once per shard.
#[derive(Clone)]
pub struct WasmOperator {
    engine: Engine,
    instantiator: Instantiator,
    path: PathBuf,
}

impl std::fmt::Debug for WasmOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmOperator")
            .field("path", &self.path)
            .finish()
    }
}

impl WasmOperator {
    /// A new aggregate instance, passed the fields `projection` selects.
    pub fn aggregate(
        &self,
        limits: Limits,
        projection: Projection,
    ) -> std::result::Result<WasmAggregate, LoadError> {
        Ok(WasmAggregate {
            guest: Guest::new(self.clone(), limits)?,
            projection,
        })
    }

    /// A new enrichment instance, passed the fields `projection` selects.
    pub fn enrich(
        &self,
        limits: Limits,
        projection: Projection,
    ) -> std::result::Result<WasmEnrich, LoadError> {
        Ok(WasmEnrich {
            guest: Guest::new(self.clone(), limits)?,
            projection,
        })
    }
}

/// The data of each guest's store.
pub struct HostData {
    table: ResourceTable,
    wasi: WasiCtx,
    limits: StoreLimits,
}

impl WasiView for HostData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Clocks that always read the Unix epoch.
struct FrozenClock;

impl wasmtime_wasi::clocks::HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl wasmtime_wasi::clocks::HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

enum Bindings {
    Aggregate(bindings::Aggregator),
    Enrich(enricher_bindings::Enricher),
}

/// One live instance and what is needed to replace it after a trap.
struct Guest {
    operator: WasmOperator,
    limits: Limits,
    store: Store<HostData>,
    bindings: Bindings,
}

impl Guest {
    fn new(operator: WasmOperator, limits: Limits) -> std::result::Result<Guest, LoadError> {
        let (store, bindings) =
            Self::instantiate(&operator, limits).map_err(|e| LoadError::Link {
                path: operator.path.clone(),
                message: root_cause(&e),
            })?;
        Ok(Guest {
            operator,
            limits,
            store,
            bindings,
        })
    }

    fn instantiate(
        operator: &WasmOperator,
        limits: Limits,
    ) -> wasmtime::Result<(Store<HostData>, Bindings)> {
        // No preopened directories, no environment, no arguments, no sockets: WASI is there
        // only because the guests' standard libraries import it.
        let mut wasi = WasiCtx::builder();
        wasi.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if !limits.clock {
            wasi.wall_clock(FrozenClock).monotonic_clock(FrozenClock);
        }
        if !limits.random {
            // A fixed sequence: replays of the same input give the same results.
            use rand::SeedableRng;
            wasi.secure_random(rand::rngs::StdRng::seed_from_u64(0))
                .insecure_random(rand::rngs::StdRng::seed_from_u64(1))
                .insecure_random_seed(2);
        }
        let data = HostData {
            table: ResourceTable::new(),
            wasi: wasi.build(),
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .instances(16)
                .trap_on_grow_failure(true)
                .build(),
        };
        let mut store = Store::new(&operator.engine, data);
        store.limiter(|data| &mut data.limits);
        store.epoch_deadline_trap();
        store.set_epoch_deadline(deadline_ticks(limits));
        let bindings = match &operator.instantiator {
            Instantiator::Aggregate(pre) => Bindings::Aggregate(pre.instantiate(&mut store)?),
            Instantiator::Enrich(pre) => Bindings::Enrich(pre.instantiate(&mut store)?),
        };
        Ok((store, bindings))
    }

    /// Runs `call` with `scopes` lent to the guest as `scope` resources. On success each
    /// scope's state takes the call's writes (unless `writes` says to discard them, for calls
    /// that may only read); on a trap or error it is left as it was.
    fn call<R>(
        &mut self,
        scopes: &mut [&mut Scope],
        writes: Writes,
        call: impl FnOnce(
            &mut Store<HostData>,
            &Bindings,
            &[Resource<ScopeSlot>],
        ) -> wasmtime::Result<std::result::Result<R, String>>,
    ) -> Result<R> {
        let mut handles = Vec::with_capacity(scopes.len());
        for scope in scopes.iter_mut() {
            let slot = ScopeSlot::new(scope.key.clone(), std::mem::take(&mut scope.state));
            let handle = self
                .store
                .data_mut()
                .table
                .push(slot)
                .map_err(|e| OperatorError::Host(e.to_string()))?;
            handles.push(handle);
        }
        let borrows: Vec<_> = handles
            .iter()
            .map(|h| Resource::new_borrow(h.rep()))
            .collect();
        self.store.set_epoch_deadline(deadline_ticks(self.limits));
        let outcome = call(&mut self.store, &self.bindings, &borrows);
        let mut slots = Vec::with_capacity(handles.len());
        for handle in handles {
            let slot = self
                .store
                .data_mut()
                .table
                .delete(handle)
                .map_err(|e| OperatorError::Host(e.to_string()))?;
            slots.push(slot);
        }
        let committed = matches!(outcome, Ok(Ok(_))) && writes == Writes::Keep;
        for (scope, slot) in scopes.iter_mut().zip(slots) {
            scope.state = if committed { slot.commit() } else { slot.base };
        }
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(message)) => Err(OperatorError::Rejected(message)),
            Err(trap) => {
                let reason = trap_reason(&trap, self.limits);
                // A trapped instance is poisoned: replace it. Its state lived in the host.
                match Self::instantiate(&self.operator, self.limits) {
                    Ok((store, bindings)) => {
                        self.store = store;
                        self.bindings = bindings;
                        Err(OperatorError::Trapped(reason))
                    }
                    Err(e) => Err(OperatorError::Host(format!(
                        "{reason}; and re-instantiating the operator failed: {}",
                        root_cause(&e)
                    ))),
                }
            }
        }
    }
}

/// What happens to a successful call's state writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writes {
    /// They are applied.
    Keep,
    /// They are dropped: the call may only read (`finish`, whose contract says it must not
    /// change the state; a guest that writes anyway changes nothing).
    Discard,
}

fn deadline_ticks(limits: Limits) -> u64 {
    (limits.call_timeout.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1
}

fn trap_reason(error: &wasmtime::Error, limits: Limits) -> String {
    let cause = root_cause(error);
    if cause.contains("forcing trap when growing memory") {
        return format!(
            "the instance exceeded its memory limit of {} bytes",
            limits.memory_bytes
        );
    }
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => format!(
            "the call exceeded its time limit of {} ms and was interrupted",
            limits.call_timeout.as_millis()
        ),
        Some(trap) => trap.to_string(),
        None => cause,
    }
}

/// Approximate bytes of a value in output.
fn value_size(value: &Value) -> usize {
    match value {
        Value::Text(s) => s.len(),
        Value::Bytes(b) => b.len(),
        _ => 8,
    }
}

fn check_output(size: usize, limits: Limits) -> Result<()> {
    if size > limits.max_output_bytes {
        return Err(OperatorError::Rejected(format!(
            "the output is {size} bytes, more than the limit of {} bytes (sandbox.max_output_bytes)",
            limits.max_output_bytes
        )));
    }
    Ok(())
}

/// A per-shard instance of an aggregate component.
pub struct WasmAggregate {
    guest: Guest,
    projection: Projection,
}

impl std::fmt::Debug for WasmAggregate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmAggregate")
            .field("path", &self.guest.operator.path)
            .finish()
    }
}

/// Which event fields cross the boundary. Every field costs a conversion per event (and a guest
/// allocation for text), so aggregates by default skip the key and timestamp fields, which the
/// guest has as `scope.key()` and `event.timestamp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Projection {
    /// Every field of the events.
    All,
    /// Every field but these.
    Except(Vec<String>),
    /// Only these fields, in this order (`null` where an event lacks one).
    Only(Vec<String>),
}

/// Converts a batch to the WIT shape: field names once, then one row of values per event.
fn to_wit_events(events: &[&Event], projection: &Projection) -> wit::Events {
    let mut fields: Vec<&str> = Vec::new();
    match projection {
        Projection::Only(names) => fields.extend(names.iter().map(String::as_str)),
        Projection::All | Projection::Except(_) => {
            let skip: &[String] = match projection {
                Projection::Except(skip) => skip,
                _ => &[],
            };
            for event in events {
                for (name, _) in &event.fields {
                    if !fields.contains(&&**name) && !skip.iter().any(|s| s == &**name) {
                        fields.push(name);
                    }
                }
            }
        }
    }
    let rows = events
        .iter()
        .map(|event| wit::Event {
            timestamp: event.timestamp,
            values: fields
                .iter()
                .map(|field| {
                    event
                        .fields
                        .iter()
                        .find(|(name, _)| &**name == *field)
                        .map_or(wit::Value::Null, |(_, value)| to_wit(value.clone()))
                })
                .collect(),
        })
        .collect();
    wit::Events {
        fields: fields.into_iter().map(str::to_owned).collect(),
        rows,
    }
}

fn to_wit(value: Value) -> wit::Value {
    match value {
        Value::Null => wit::Value::Null,
        Value::Boolean(b) => wit::Value::Boolean(b),
        Value::Int(i) => wit::Value::Int(i),
        Value::Float(f) => wit::Value::Float(f),
        Value::Text(s) => wit::Value::Text(s),
        Value::Bytes(b) => wit::Value::Bytes(b),
    }
}

fn from_wit(value: wit::Value) -> Value {
    match value {
        wit::Value::Null => Value::Null,
        wit::Value::Boolean(b) => Value::Boolean(b),
        wit::Value::Int(i) => Value::Int(i),
        wit::Value::Float(f) => Value::Float(f),
        wit::Value::Text(s) => Value::Text(s),
        wit::Value::Bytes(b) => Value::Bytes(b),
    }
}

fn aggregate_of(bindings: &Bindings) -> &bindings::exports::weir::operator::aggregate::Guest {
    match bindings {
        Bindings::Aggregate(b) => b.weir_operator_aggregate(),
        Bindings::Enrich(_) => unreachable!("checked at load: the component is an aggregator"),
    }
}

impl AggregateOperator for WasmAggregate {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        let batch = to_wit_events(events, &self.projection);
        self.guest
            .call(&mut [scope], Writes::Keep, |store, b, scopes| {
                aggregate_of(b).call_add(store, Resource::new_borrow(scopes[0].rep()), &batch)
            })
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        self.guest
            .call(&mut [target, source], Writes::Keep, |store, b, scopes| {
                aggregate_of(b).call_merge(
                    store,
                    Resource::new_borrow(scopes[0].rep()),
                    Resource::new_borrow(scopes[1].rep()),
                )
            })
    }

    fn migrate(&mut self, scope: &mut Scope, from_version: &str) -> Result<()> {
        self.guest
            .call(&mut [scope], Writes::Keep, |store, b, scopes| {
                aggregate_of(b).call_migrate(
                    store,
                    Resource::new_borrow(scopes[0].rep()),
                    from_version,
                )
            })
    }

    fn finish(&mut self, scope: &mut Scope, window: Window) -> Result<Fields> {
        let window = wit::Window {
            start: window.start,
            end: window.end,
        };
        let fields = self
            .guest
            .call(&mut [scope], Writes::Discard, |store, b, scopes| {
                aggregate_of(b).call_finish(store, Resource::new_borrow(scopes[0].rep()), window)
            })?;
        let fields: Fields = fields
            .into_iter()
            .map(|f| (f.name, from_wit(f.value)))
            .collect();
        check_output(
            fields
                .iter()
                .map(|(name, value)| name.len() + value_size(value))
                .sum(),
            self.guest.limits,
        )?;
        Ok(fields)
    }
}

/// A per-shard instance of an enrichment component.
pub struct WasmEnrich {
    guest: Guest,
    projection: Projection,
}

impl std::fmt::Debug for WasmEnrich {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmEnrich")
            .field("path", &self.guest.operator.path)
            .finish()
    }
}

impl EnrichOperator for WasmEnrich {
    fn process(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<Vec<Enriched>> {
        let batch = to_wit_events(events, &self.projection);
        let output = self
            .guest
            .call(&mut [scope], Writes::Keep, |store, b, scopes| match b {
                Bindings::Enrich(e) => e.weir_operator_enrich().call_process(
                    store,
                    Resource::new_borrow(scopes[0].rep()),
                    &batch,
                ),
                Bindings::Aggregate(_) => {
                    unreachable!("checked at load: the component is an enricher")
                }
            })?;
        let size = output
            .rows
            .iter()
            .flat_map(|row| row.values.iter())
            .map(|value| match value {
                wit::Value::Text(s) => s.len(),
                wit::Value::Bytes(b) => b.len(),
                _ => 8,
            })
            .sum::<usize>()
            + output.fields.iter().map(String::len).sum::<usize>();
        check_output(size, self.guest.limits)?;
        let names: Vec<Arc<str>> = output.fields.into_iter().map(Arc::from).collect();
        output
            .rows
            .into_iter()
            .map(|row| {
                let origin = row.origin as usize;
                if origin >= events.len() {
                    return Err(OperatorError::Rejected(format!(
                        "output event names origin {origin}, but the batch had {} events",
                        events.len()
                    )));
                }
                if row.values.len() != names.len() {
                    return Err(OperatorError::Rejected(format!(
                        "output event has {} values for {} fields",
                        row.values.len(),
                        names.len()
                    )));
                }
                let fields = names
                    .iter()
                    .cloned()
                    .zip(row.values.into_iter().map(from_wit))
                    .filter(|(_, v)| *v != Value::Null)
                    .collect();
                Ok(Enriched {
                    origin,
                    timestamp: row.timestamp,
                    fields,
                })
            })
            .collect()
    }
}

impl wit_state::Host for HostData {}

impl wit_state::HostScope for HostData {
    fn key(&mut self, scope: Resource<ScopeSlot>) -> wasmtime::Result<String> {
        Ok(self.table.get(&scope)?.key.to_string())
    }

    fn get(
        &mut self,
        scope: Resource<ScopeSlot>,
        name: String,
    ) -> wasmtime::Result<Option<wit::Value>> {
        Ok(self.table.get(&scope)?.get(&name).map(to_wit))
    }

    fn put(
        &mut self,
        scope: Resource<ScopeSlot>,
        name: String,
        value: wit::Value,
    ) -> wasmtime::Result<()> {
        self.table.get_mut(&scope)?.put(name, from_wit(value));
        Ok(())
    }

    fn remove(&mut self, scope: Resource<ScopeSlot>, name: String) -> wasmtime::Result<()> {
        self.table.get_mut(&scope)?.remove(name);
        Ok(())
    }

    fn map_get(
        &mut self,
        scope: Resource<ScopeSlot>,
        map: String,
        entry: String,
    ) -> wasmtime::Result<Option<wit::Value>> {
        Ok(self.table.get(&scope)?.map_get(&map, &entry).map(to_wit))
    }

    fn map_put(
        &mut self,
        scope: Resource<ScopeSlot>,
        map: String,
        entry: String,
        value: wit::Value,
    ) -> wasmtime::Result<()> {
        self.table
            .get_mut(&scope)?
            .map_put(map, entry, from_wit(value));
        Ok(())
    }

    fn map_remove(
        &mut self,
        scope: Resource<ScopeSlot>,
        map: String,
        entry: String,
    ) -> wasmtime::Result<()> {
        self.table.get_mut(&scope)?.map_remove(map, entry);
        Ok(())
    }

    fn map_len(&mut self, scope: Resource<ScopeSlot>, map: String) -> wasmtime::Result<u64> {
        Ok(self.table.get(&scope)?.map_len(&map))
    }

    fn map_entries(
        &mut self,
        scope: Resource<ScopeSlot>,
        map: String,
    ) -> wasmtime::Result<Vec<String>> {
        Ok(self.table.get(&scope)?.map_entries(&map))
    }

    fn drop(&mut self, _scope: Resource<ScopeSlot>) -> wasmtime::Result<()> {
        // Scopes are only ever lent to guests (`borrow<scope>`); the host removes them itself
        // after each call.
        Ok(())
    }
}
