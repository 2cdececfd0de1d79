//! One guest instance in its store: instantiation under time and memory limits, WASI with
//! nothing behind it, frozen clocks, and the call that lends scopes to the guest, keeps or
//! drops its writes, and replaces a trapped instance. Depends on `state`.

use super::*;
use crate::operator::quota::{CallMeter, CpuQuota, MemoryPool, StateQuota};
use crate::operator::scope_slot::ScopeSlot;
use crate::state::ScopeState;
use wasmtime::UpdateDeadline;

/// The error a guest returns for its input (WIT `result<_, string>`): the operator's own words,
/// passed on as the dead letters' reason. The guest's data, not an error of the host's, so it
/// stays the string the guest sent.
pub(super) type GuestError = String;

/// Why a call's result is not taken: the guest returned an error, or the host refused what the
/// guest returned (checked inside the call, so that the call's writes are dropped too).
#[derive(Debug)]
pub(super) enum Declined {
    /// The guest's own error.
    Guest(GuestError),
    /// The host's refusal of the guest's output.
    Host(HostRefusal),
}

impl From<GuestError> for Declined {
    fn from(message: GuestError) -> Self {
        Declined::Guest(message)
    }
}

impl From<Declined> for OperatorError {
    fn from(declined: Declined) -> Self {
        match declined {
            Declined::Guest(message) => OperatorError::Rejected(message),
            Declined::Host(refusal) => OperatorError::Refused(refusal),
        }
    }
}

/// A failure of the store's resource table (lending the scopes to the guest and taking them
/// back) as a host error. Its message only: [`OperatorError`] names no Wasm type.
fn table_error(error: wasmtime::component::ResourceTableError) -> OperatorError {
    OperatorError::Host(error.to_string())
}

/// The data of each guest's store.
pub struct HostData {
    pub(super) table: ResourceTable,
    pub(super) wasi: WasiCtx,
    pub(super) limits: GuestLimiter,
    /// The running call's account with the CPU quota, for pipelines that have one.
    meter: Option<CallMeter>,
}

/// The instance's memory limits: its own (`sandbox.memory`, wasmtime's [`StoreLimits`]), and
/// its share of the pipeline's pool (`sandbox.total_memory`), given back when the store goes.
pub(super) struct GuestLimiter {
    own: StoreLimits,
    pool: Option<Arc<MemoryPool>>,
    /// Bytes reserved from the pool, and those of the last growth (given back if it fails).
    reserved: usize,
    last: usize,
}

impl wasmtime::ResourceLimiter for GuestLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if !self.own.memory_growing(current, desired, maximum)? {
            return Ok(false);
        }
        let Some(pool) = &self.pool else {
            return Ok(true);
        };
        let more = desired.saturating_sub(current);
        if !pool.try_reserve(more) {
            wasmtime::bail!(
                "the pipeline's operator instances together reached their memory limit of {} \
                 bytes (sandbox.total_memory)",
                pool.limit()
            );
        }
        self.reserved += more;
        self.last = more;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        if let Some(pool) = &self.pool {
            pool.release(self.last);
            self.reserved -= self.last;
            self.last = 0;
        }
        self.own.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.own.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.own.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.own.instances()
    }

    fn tables(&self) -> usize {
        self.own.tables()
    }

    fn memories(&self) -> usize {
        self.own.memories()
    }
}

impl GuestLimiter {
    /// Gives the instance's memory back to the pool (it is about to be dropped).
    fn release_all(&mut self) {
        if let Some(pool) = &self.pool {
            pool.release(self.reserved);
        }
        self.reserved = 0;
    }
}

impl Drop for GuestLimiter {
    fn drop(&mut self) {
        self.release_all();
    }
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
pub(super) struct FrozenClock;

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

/// An instance's exports, by world and contract version.
pub(super) enum Bindings {
    Aggregate(bindings::Aggregator),
    AggregateV2(bindings_v2::Aggregator),
    AggregateV3(bindings_v3::Aggregator),
    Enrich(enricher_bindings::Enricher),
    EnrichV2(enricher_bindings_v2::Enricher),
}

/// One live instance and what is needed to replace it after a trap.
pub(super) struct Guest {
    pub(super) operator: WasmOperator,
    pub(super) limits: Limits,
    pub(super) store: Store<HostData>,
    pub(super) bindings: Bindings,
}

impl Guest {
    pub(super) fn new(
        operator: WasmOperator,
        limits: Limits,
    ) -> std::result::Result<Guest, LoadError> {
        let (store, bindings) =
            Self::instantiate(&operator, &limits).map_err(|e| LoadError::Link {
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
        limits: &Limits,
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
            limits: GuestLimiter {
                own: StoreLimitsBuilder::new()
                    .memory_size(limits.memory_bytes)
                    .instances(16)
                    .trap_on_grow_failure(true)
                    .build(),
                pool: limits.memory_pool.clone(),
                reserved: 0,
                last: 0,
            },
            meter: None,
        };
        let mut store = Store::new(&operator.engine, data);
        store.limiter(|data| &mut data.limits);
        match &limits.cpu {
            Some(quota) => {
                let quota = Arc::clone(quota);
                let limit = limits.call_timeout;
                store.epoch_deadline_callback(move |mut store| {
                    Ok(metered_tick(store.data_mut(), &quota, limit))
                });
            }
            None => store.epoch_deadline_trap(),
        }
        store.set_epoch_deadline(deadline_ticks(limits));
        let bindings = match &operator.instantiator {
            Instantiator::Aggregate(pre) => Bindings::Aggregate(pre.instantiate(&mut store)?),
            Instantiator::AggregateV2(pre) => Bindings::AggregateV2(pre.instantiate(&mut store)?),
            Instantiator::AggregateV3(pre) => Bindings::AggregateV3(pre.instantiate(&mut store)?),
            Instantiator::Enrich(pre) => Bindings::Enrich(pre.instantiate(&mut store)?),
            Instantiator::EnrichV2(pre) => Bindings::EnrichV2(pre.instantiate(&mut store)?),
        };
        Ok((store, bindings))
    }

    /// Runs `call` with `scopes` lent to the guest as `scope` resources. On success each
    /// scope's state takes the call's writes (unless `writes` says to discard them, for calls
    /// that may only read); on a trap or error it is left as it was. The call's error is the
    /// guest's ([`GuestError`]) or, for calls that check the guest's output, [`Declined`].
    pub(super) fn call<R, E: Into<Declined>>(
        &mut self,
        scopes: &mut [&mut Scope],
        writes: Writes,
        call: impl FnOnce(
            &mut Store<HostData>,
            &Bindings,
            &[Resource<ScopeSlot>],
        ) -> wasmtime::Result<std::result::Result<R, E>>,
    ) -> Result<R> {
        let mut handles = Vec::with_capacity(scopes.len());
        for scope in scopes.iter_mut() {
            let slot = ScopeSlot::new(scope.key.clone(), std::mem::take(&mut scope.state));
            let handle = self
                .store
                .data_mut()
                .table
                .push(slot)
                .map_err(table_error)?;
            handles.push(handle);
        }
        let borrows: Vec<_> = handles
            .iter()
            .map(|h| Resource::new_borrow(h.rep()))
            .collect();
        match &self.limits.cpu {
            // Metered: a tick at every epoch, each charging the quota (see `metered_tick`).
            Some(quota) => {
                self.store.data_mut().meter = Some(CallMeter::start(quota));
                self.store.set_epoch_deadline(1);
            }
            None => self.store.set_epoch_deadline(deadline_ticks(&self.limits)),
        }
        let outcome = call(&mut self.store, &self.bindings, &borrows);
        if let Some(quota) = &self.limits.cpu {
            if let Some(meter) = self.store.data_mut().meter.take() {
                meter.finish(quota);
            }
            // Whatever runs outside a call (nothing today) keeps the plain time limit.
            self.store.set_epoch_deadline(deadline_ticks(&self.limits));
        }
        let mut slots = Vec::with_capacity(handles.len());
        for handle in handles {
            let slot = self
                .store
                .data_mut()
                .table
                .delete(handle)
                .map_err(table_error)?;
            slots.push(slot);
        }
        let committed = matches!(outcome, Ok(Ok(_))) && writes == Writes::Keep;
        settle(&self.limits, scopes, slots, committed)?;
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(declined)) => Err(OperatorError::from(declined.into())),
            Err(trap) => {
                let reason = trap_reason(&trap, &self.limits);
                // The poisoned instance's memory goes back to the pool before its replacement
                // takes its own (the old store is dropped right after).
                self.store.data_mut().limits.release_all();
                // A trapped instance is poisoned: replace it. Its state lived in the host.
                match Self::instantiate(&self.operator, &self.limits) {
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
pub(super) enum Writes {
    /// They are applied.
    Keep,
    /// They are dropped: the call may only read (`finish`, whose contract says it must not
    /// change the state; a guest that writes anyway changes nothing).
    Discard,
}

/// Gives each scope its slot's state: with the call's writes if the call is `committed` (and
/// the pipeline's state quota admits them: otherwise the call is refused), else as it was.
fn settle(
    limits: &Limits,
    scopes: &mut [&mut Scope],
    slots: Vec<ScopeSlot>,
    committed: bool,
) -> Result<()> {
    match &limits.state_quota {
        Some(quota) if committed => admit_writes(quota, scopes, slots),
        _ => {
            for (scope, slot) in scopes.iter_mut().zip(slots) {
                scope.state = if committed { slot.commit() } else { slot.base };
            }
            Ok(())
        }
    }
}

/// Keeps a call's writes if the pipeline's state quota admits them (what they add in scopes and
/// encoded bytes); otherwise every scope stays as it was and the call is refused with the
/// reason, so its events become dead letters.
fn admit_writes(
    quota: &StateQuota,
    scopes: &mut [&mut Scope],
    slots: Vec<ScopeSlot>,
) -> Result<()> {
    let mut bases = Vec::with_capacity(slots.len());
    for (scope, slot) in scopes.iter_mut().zip(slots) {
        bases.push(slot.base.clone());
        scope.state = slot.commit();
    }
    admit_states(quota, scopes, bases)
}

/// Keeps the states `scopes` hold now if the quota admits what they add over `bases`, their
/// states before a call (in scopes and encoded bytes); otherwise puts every scope back to its
/// base and refuses the call with the reason.
pub(super) fn admit_states(
    quota: &StateQuota,
    scopes: &mut [&mut Scope],
    bases: Vec<ScopeState>,
) -> Result<()> {
    let size = |state: &ScopeState| {
        (!state.is_empty()).then(|| crate::state::encode_scope(state).len() as i64)
    };
    let (mut added_scopes, mut added_bytes) = (0i64, 0i64);
    for (scope, base) in scopes.iter().zip(&bases) {
        let (before, after) = (size(base), size(&scope.state));
        added_scopes += i64::from(after.is_some()) - i64::from(before.is_some());
        added_bytes += after.unwrap_or(0) - before.unwrap_or(0);
    }
    let admitted = quota.admit(added_scopes, added_bytes);
    if admitted.is_err() {
        for (scope, base) in scopes.iter_mut().zip(bases) {
            scope.state = base;
        }
    }
    Ok(admitted.map_err(HostRefusal::from)?)
}

/// At an epoch tick inside a call of a pipeline with a CPU quota: charges the quota and waits
/// while it is in debt (so a long call is held to it as it runs), then asks for the next tick;
/// interrupts the call once it has run for `limit` (the waits not counted), or if no call is
/// metered (code run outside a call, stopped at its plain time limit as without a quota).
fn metered_tick(data: &mut HostData, quota: &CpuQuota, limit: Duration) -> UpdateDeadline {
    let running = data
        .meter
        .as_mut()
        .is_some_and(|meter| meter.tick(quota, limit));
    if running {
        UpdateDeadline::Continue(1)
    } else {
        UpdateDeadline::Interrupt
    }
}

pub(super) fn deadline_ticks(limits: &Limits) -> u64 {
    (limits.call_timeout.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64 + 1
}

pub(super) fn trap_reason(error: &wasmtime::Error, limits: &Limits) -> String {
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

pub(super) fn check_output(size: usize, limits: &Limits) -> Result<()> {
    Ok(output_within(size, limits.max_output_bytes)?)
}

/// Whether an output of `size` bytes is within `max_output_bytes`, and if not, why.
pub(super) fn output_within(
    size: usize,
    max_output_bytes: usize,
) -> std::result::Result<(), HostRefusal> {
    if size > max_output_bytes {
        return Err(HostRefusal::OutputTooLarge {
            size,
            limit: max_output_bytes,
        });
    }
    Ok(())
}
