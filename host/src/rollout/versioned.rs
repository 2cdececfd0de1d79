//! [`VersionedAggregate`]: a shard's live aggregate and, during a rollout, its candidate,
//! dispatching each call by the key's bucket, counting calls per version, and running the
//! candidate in shadow when asked. Depends on `event`, `operator`, `state`, `time` and `value`.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{CounterBook, Routing, VersionCounters};
use crate::event::Event;
use crate::operator::{
    AggregateOperator, CarriedResult, OperatorError, Result, Scope, WindowEvents,
};
use crate::state::ScopeState;
use crate::time::Window;
use crate::value::{Fields, fields_to_json};

/// Where shadow results go: one JSON line per window result of the candidate, with the live
/// version's result beside it.
pub type ShadowLog = Arc<Mutex<Box<dyn Write + Send>>>;

/// One version of an operator in a shard, with its counters (aggregates here, enrichers in
/// `versioned_enrich`).
pub(super) struct Slot<O: ?Sized> {
    pub(super) version: Arc<str>,
    pub(super) operator: Box<O>,
    pub(super) counters: Arc<VersionCounters>,
    /// Calls made, to time one in [`TIMED_EVERY`].
    pub(super) calls: u64,
}

/// One call in this many is timed for the latency summary: reading the clock around every call
/// cost the native benchmark a few per cent.
const TIMED_EVERY: u64 = 16;

impl<O: ?Sized> Slot<O> {
    /// The clock at the start of a call, if this one is timed.
    pub(super) fn clock(&mut self) -> Option<Instant> {
        self.calls += 1;
        (self.counters.metrics.is_some() && self.calls % TIMED_EVERY == 1).then(Instant::now)
    }

    /// Counts a window finished beside the other version, with the bytes of its state.
    pub(super) fn count_state(&self, state: &ScopeState) {
        use std::sync::atomic::Ordering::Relaxed;
        self.counters.state_windows.fetch_add(1, Relaxed);
        (self.counters.state_bytes).fetch_add(state.operator_bytes() as u64, Relaxed);
    }

    /// Counts a call that began at `started` (if timed), with `events` events, and its outcome.
    pub(super) fn count<T>(
        &self,
        events: usize,
        started: Option<Instant>,
        outcome: Result<T>,
    ) -> Result<T> {
        use std::sync::atomic::Ordering::Relaxed;
        self.counters.calls.fetch_add(1, Relaxed);
        self.counters.events.fetch_add(events as u64, Relaxed);
        match &outcome {
            Err(OperatorError::Rejected(_) | OperatorError::Refused(_)) => {
                self.counters.errors.fetch_add(1, Relaxed);
            }
            Err(OperatorError::Trapped(_)) => {
                self.counters.traps.fetch_add(1, Relaxed);
            }
            _ => {}
        }
        let trapped = matches!(&outcome, Err(OperatorError::Trapped(_)));
        let took = started.map(|s| s.elapsed());
        if let Some(took) = took {
            self.counters.timed_calls.fetch_add(1, Relaxed);
            let ns = took.as_nanos() as u64;
            (self.counters.timed_call_ns).fetch_add(ns, Relaxed);
            (self.counters.call_time_log2[super::call_time_bucket(ns)]).fetch_add(1, Relaxed);
        }
        if let Some(metrics) = &self.counters.metrics {
            metrics.call(took, trapped);
        }
        if let Err(OperatorError::Trapped(error)) = &outcome {
            // Debug, not warn: a guest that traps on every event would flood the log; the trap
            // counters and the dead letters carry the figures.
            let _call =
                tracing::debug_span!("operator_call", version = %self.version, events).entered();
            tracing::debug!(%error, "operator call trapped");
        }
        outcome
    }
}

impl Slot<dyn AggregateOperator> {
    /// Lets this version convert a scope another version wrote, before touching it.
    fn adopt(&mut self, scope: &mut Scope) -> Result<()> {
        if let Some(from) = (scope.state.written_by.as_deref())
            .filter(|from| *from != &*self.version)
            .map(str::to_owned)
        {
            let started = self.clock();
            let outcome = self.operator.migrate(scope, &from);
            self.count(0, started, outcome)?;
            scope.state.written_by = Some(self.version.to_string());
        }
        Ok(())
    }

    /// Counts `windows` windows done in a call carrying many (a window added in k calls and
    /// finished in one counts k + 1), `crossed` of them added with the router's crossings.
    fn count_carried(&self, windows: usize, crossed: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let (windows, crossed) = (windows as u64, crossed as u64);
        self.counters.carried_windows.fetch_add(windows, Relaxed);
        if crossed > 0 {
            self.counters.crossed_windows.fetch_add(crossed, Relaxed);
        }
        if let Some(metrics) = &self.counters.metrics {
            metrics.carried(windows, crossed);
        }
    }

    /// Records that this version wrote the scope.
    fn mark(&self, scope: &mut Scope) {
        if scope.state.written_by.as_deref() != Some(&*self.version) {
            scope.state.written_by = Some(self.version.to_string());
        }
    }
}

/// The aggregate of one shard during (or outside) a rollout.
pub struct VersionedAggregate {
    live: Slot<dyn AggregateOperator>,
    candidate: Option<Slot<dyn AggregateOperator>>,
    routing: Routing,
    shadow_log: Option<ShadowLog>,
    /// A stage's operator name: its versions' counters are kept as `name@version`, and its
    /// routings name it (the pipeline's aggregate has none).
    name: Option<String>,
}

impl std::fmt::Debug for VersionedAggregate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VersionedAggregate")
            .field("routing", &self.routing)
            .finish()
    }
}

impl VersionedAggregate {
    /// Only `live` (version `version`) serves.
    pub fn new(version: &str, live: Box<dyn AggregateOperator>, counters: &CounterBook) -> Self {
        VersionedAggregate {
            live: Slot {
                version: version.into(),
                operator: live,
                counters: counters.of(version),
                calls: 0,
            },
            candidate: None,
            routing: Routing::single(version),
            shadow_log: None,
            name: None,
        }
    }

    /// The operator `name` of a stage, only `live` (version `version`) serving.
    pub fn named(
        name: &str,
        version: &str,
        live: Box<dyn AggregateOperator>,
        counters: &CounterBook,
    ) -> Self {
        let mut versioned = Self::new(version, live, counters);
        versioned.live.counters = counters.of(&super::counter_key(name, version));
        versioned.routing.operator = Some(name.to_owned());
        versioned.name = Some(name.to_owned());
        versioned
    }

    /// The key of `version`'s counters.
    fn counter_key(&self, version: &str) -> String {
        match &self.name {
            Some(name) => super::counter_key(name, version),
            None => version.to_owned(),
        }
    }

    /// The routing in effect.
    pub fn routing(&self) -> &Routing {
        &self.routing
    }

    /// Applies a new routing. `candidate` is the candidate's instance when the routing names
    /// a candidate version other than the current one.
    pub fn route(
        &mut self,
        routing: Routing,
        candidate: Option<Box<dyn AggregateOperator>>,
        counters: &CounterBook,
        shadow_log: Option<ShadowLog>,
    ) {
        let mut candidate = candidate;
        if *self.live.version != *routing.live {
            // A promotion: the candidate (or, if it was never loaded here, the code sent with
            // the change) becomes the live version.
            match self.candidate.take() {
                Some(slot) if *slot.version == *routing.live => self.live = slot,
                other => {
                    self.candidate = other;
                    if let Some(operator) = candidate.take() {
                        self.live = Slot {
                            version: routing.live.as_str().into(),
                            operator,
                            counters: counters.of(&self.counter_key(&routing.live)),
                            calls: 0,
                        };
                    }
                }
            }
        }
        match (&routing.candidate, candidate) {
            (Some(version), Some(operator)) => {
                self.candidate = Some(Slot {
                    version: version.as_str().into(),
                    operator,
                    counters: counters.of(&self.counter_key(version)),
                    calls: 0,
                })
            }
            (None, _) => self.candidate = None,
            (Some(_), None) => {}
        }
        self.shadow_log = shadow_log;
        self.routing = routing;
    }

    /// The version serving `key`, and the one run beside it on a copy of the state to be
    /// compared, if any (the second is the candidate when the first is not): in shadow mode the
    /// candidate beside the live version, in compare mode the live version beside the
    /// candidate for the keys it serves.
    fn pair(&mut self, key: &str) -> Pair<'_> {
        let routing = &self.routing;
        let to_candidate = routing.to_candidate(key);
        match self.candidate.as_mut() {
            Some(candidate) if to_candidate => Pair {
                serving: candidate,
                beside: routing.compare.then_some(&mut self.live),
                beside_is_candidate: false,
                routing,
            },
            Some(candidate) if routing.shadow => Pair {
                serving: &mut self.live,
                beside: Some(candidate),
                beside_is_candidate: true,
                routing,
            },
            _ => Pair {
                serving: &mut self.live,
                beside: None,
                beside_is_candidate: false,
                routing,
            },
        }
    }
}

/// The version serving a key and the one run beside it (see [`VersionedAggregate::pair`]).
struct Pair<'a> {
    serving: &'a mut Slot<dyn AggregateOperator>,
    beside: Option<&'a mut Slot<dyn AggregateOperator>>,
    beside_is_candidate: bool,
    /// The routing, for comparing the two (its tolerance).
    routing: &'a Routing,
}

/// For the version `beside` run next to the serving one, when it has no state of its own for
/// `scope` yet (or only another version's): a copy of the serving state as it is now, before
/// this call changes it. It starts where the serving version is, so windows open when it
/// began are compared fairly (it migrates the copy as a rollout would).
fn fresh_copy(scope: &Scope, beside: &str) -> Option<ScopeState> {
    let own = (scope.state.shadow.as_ref())
        .is_some_and(|shadow| shadow.written_by.as_deref() == Some(beside));
    if own {
        return None;
    }
    let mut copy = scope.state.clone();
    copy.shadow = None;
    Some(copy)
}

/// A call carrying many windows to `slot`'s operator, begun at `started`: its windows'
/// outcomes, or `None` if no call was made or it trapped (counted and logged as a trap: its
/// windows then go alone). Host errors pass.
fn carried<T>(
    slot: &mut Slot<dyn AggregateOperator>,
    started: Option<Instant>,
    call: impl FnOnce(&mut dyn AggregateOperator) -> CarriedResult<T>,
) -> Result<Option<Vec<T>>> {
    match call(&mut *slot.operator) {
        Err(OperatorError::Host(message)) => Err(OperatorError::Host(message)),
        Err(trapped) => {
            let _ = slot.count::<()>(0, started, Err(trapped));
            Ok(None)
        }
        Ok(made) => Ok(made),
    }
}

/// Whether `scope`'s state was written by `version`, or by no version yet (so `version` needs
/// no `migrate` before touching it).
fn written_by_or_none(scope: &Scope, version: &str) -> bool {
    scope
        .state
        .written_by
        .as_deref()
        .is_none_or(|by| by == version)
}

/// Runs `f` on the shadow copy of a scope's state (kept inside the scope's state, so it is
/// checkpointed and dropped with it): `fresh` if given, else the shadow's own.
fn in_shadow<T>(
    scope: &mut Scope,
    fresh: Option<ScopeState>,
    f: impl FnOnce(&mut Scope) -> T,
) -> T {
    let own = scope.state.shadow.take().map(|s| *s);
    let mut shadow = Scope {
        key: scope.key.clone(),
        state: fresh.or(own).unwrap_or_default(),
    };
    let result = f(&mut shadow);
    scope.state.shadow = Some(Box::new(shadow.state));
    result
}

impl AggregateOperator for VersionedAggregate {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        let Pair {
            serving, beside, ..
        } = self.pair(&scope.key);
        let fresh = beside.as_ref().and_then(|b| fresh_copy(scope, &b.version));
        serving.adopt(scope)?;
        let started = serving.clock();
        let outcome = serving.operator.add(scope, events);
        serving.count(events.len(), started, outcome)?;
        serving.mark(scope);
        if let Some(beside) = beside {
            // The failures of the version beside are counted and never reach the results.
            let _ = in_shadow(scope, fresh, |copy| {
                beside.adopt(copy)?;
                let started = beside.clock();
                let outcome = beside.operator.add(copy, events);
                beside.count(events.len(), started, outcome)?;
                beside.mark(copy);
                Ok::<(), OperatorError>(())
            });
        }
        Ok(())
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        let Pair {
            serving, beside, ..
        } = self.pair(&target.key);
        let fresh = |scope: &Scope| beside.as_ref().and_then(|b| fresh_copy(scope, &b.version));
        let (fresh_target, fresh_source) = (fresh(target), fresh(source));
        serving.adopt(target)?;
        serving.adopt(source)?;
        let started = serving.clock();
        let outcome = serving.operator.merge(target, source);
        serving.count(0, started, outcome)?;
        serving.mark(target);
        if let Some(beside) = beside {
            let own_source = source.state.shadow.take().map(|s| *s);
            let mut source_copy = Scope {
                key: source.key.clone(),
                state: fresh_source.or(own_source).unwrap_or_default(),
            };
            let _ = in_shadow(target, fresh_target, |copy| {
                beside.adopt(copy)?;
                beside.adopt(&mut source_copy)?;
                let started = beside.clock();
                let outcome = beside.operator.merge(copy, &mut source_copy);
                beside.count(0, started, outcome)?;
                beside.mark(copy);
                Ok::<(), OperatorError>(())
            });
        }
        Ok(())
    }

    fn finish(&mut self, scope: &mut Scope, window: Window) -> Result<Fields> {
        let log = self.shadow_log.clone();
        let Pair {
            serving,
            beside,
            beside_is_candidate,
            routing,
        } = self.pair(&scope.key);
        let fresh = beside.as_ref().and_then(|b| fresh_copy(scope, &b.version));
        serving.adopt(scope)?;
        let started = serving.clock();
        let outcome = serving.operator.finish(scope, window);
        let output = serving.count(0, started, outcome)?;
        let Some(beside) = beside else {
            return Ok(output);
        };
        serving.count_state(&scope.state);
        let other = in_shadow(scope, fresh, |copy| {
            beside.adopt(copy)?;
            let started = beside.clock();
            let outcome = beside.operator.finish(copy, window);
            let output = beside.count(0, started, outcome)?;
            beside.count_state(&copy.state);
            beside.mark(copy);
            Ok::<Fields, OperatorError>(output)
        });
        // The comparison is the candidate's: counted with it, whichever of the two served.
        let (candidate, live, candidate_output) = match beside_is_candidate {
            true => (&*beside, Ok(&output), other.as_ref()),
            false => (&*serving, other.as_ref(), Ok(&output)),
        };
        use std::sync::atomic::Ordering::Relaxed;
        candidate.counters.shadow_compared.fetch_add(1, Relaxed);
        let same = matches!((&live, &candidate_output), (Ok(l), Ok(c)) if routing.same(l, c));
        if !same {
            candidate.counters.shadow_differed.fetch_add(1, Relaxed);
        }
        if let Some(log) = log {
            let shown = |result: std::result::Result<&Fields, &OperatorError>| match result {
                Ok(fields) => fields_to_json(fields),
                Err(e) => e.to_string().into(),
            };
            let record = serde_json::json!({
                "key": &*scope.key,
                "window_start": window.start,
                "window_end": window.end,
                "live": shown(live),
                "candidate": shown(candidate_output),
                "candidate_version": &*candidate.version,
                "served_by": &*serving.version,
                "same": same,
            });
            let mut log = log.lock().expect("shadow log lock");
            let _ = writeln!(log, "{record}");
            let _ = log.flush();
        }
        Ok(output)
    }

    fn carries_windows(&self) -> bool {
        self.candidate.is_none() && self.live.operator.carries_windows()
    }

    /// Outside a rollout (one version, no shadow), the live version's, for the windows it wrote
    /// (or no version did); the others are left to `add`, which migrates them first. During a
    /// rollout, none: each window goes to its version alone. A call made is counted with the
    /// events of the windows it did; a trapped one as a trap (its windows then go alone).
    fn add_windows(&mut self, windows: &mut [WindowEvents<'_>]) -> CarriedResult<bool> {
        if self.candidate.is_some() {
            return Ok(None);
        }
        let live = &mut self.live;
        let mut done = vec![false; windows.len()];
        let mut ready = Vec::with_capacity(windows.len());
        let mut at = Vec::with_capacity(windows.len());
        for (i, window) in windows.iter_mut().enumerate() {
            if written_by_or_none(window.scope, &live.version) {
                ready.push(WindowEvents {
                    scope: &mut *window.scope,
                    events: window.events,
                    crossings: window.crossings,
                });
                at.push(i);
            }
        }
        let started = live.clock();
        let Some(added) = carried(live, started, |op| op.add_windows(&mut ready))? else {
            return Ok(None);
        };
        let (mut events, mut windows_done, mut crossed) = (0, 0, 0);
        for (window, (i, added)) in ready.iter_mut().zip(at.into_iter().zip(added)) {
            if added {
                live.mark(window.scope);
                let batch = window.events.len();
                (done[i], events, windows_done) = (true, events + batch, windows_done + 1);
                crossed += usize::from(window.crossings.first().is_some_and(|c| c.is_some()));
            }
        }
        live.count_carried(windows_done, crossed);
        live.count(events, started, Ok(()))?;
        Ok(Some(done))
    }

    /// As [`Self::add_windows`]: the live version's outputs outside a rollout.
    fn finish_windows(&mut self, windows: &[(&Scope, Window)]) -> CarriedResult<Option<Fields>> {
        if self.candidate.is_some() {
            return Ok(None);
        }
        let live = &mut self.live;
        let mut ready: Vec<(&Scope, Window)> = Vec::with_capacity(windows.len());
        let mut at = Vec::with_capacity(windows.len());
        for (i, window) in windows.iter().enumerate() {
            if written_by_or_none(window.0, &live.version) {
                ready.push(*window);
                at.push(i);
            }
        }
        let started = live.clock();
        let Some(finished) = carried(live, started, |op| op.finish_windows(&ready))? else {
            return Ok(None);
        };
        let mut outputs = vec![None; windows.len()];
        for (i, output) in at.into_iter().zip(finished) {
            outputs[i] = output;
        }
        live.count_carried(outputs.iter().filter(|output| output.is_some()).count(), 0);
        live.count(0, started, Ok(()))?;
        Ok(Some(outputs))
    }

    fn version_for(&self, key: &str) -> Option<Arc<str>> {
        Some(match &self.candidate {
            Some(candidate) if self.routing.to_candidate(key) => candidate.version.clone(),
            _ => self.live.version.clone(),
        })
    }
}
