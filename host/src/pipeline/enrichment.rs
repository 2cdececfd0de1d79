//! [`Enrichment`]: one enrichment operator of a shard's chain. It calls the operator (its
//! versions, during a rollout) once per key of a batch, keeps per-key state with an optional
//! time-to-live in event time, and turns failures into dead letters.
//!
//! TTL: a key's enrichment state (all but its reference data) expires once the watermark
//! passes the key's latest event time plus the TTL. Expiry is judged per event, against the
//! watermark at the event's arrival, so where batches begin and end never matters; keys that
//! go quiet are swept at the end of each batch.
//!
//! Depends on `event`, `hashing`, `operator`, `rollout`, `state`, `time` and `window`, and of
//! `pipeline` on `deadlines` and `outcome`.

use crate::hashing::HashMap;
use std::sync::Arc;

use super::deadlines::Deadlines;
use super::outcome::{Rejects, ShardError};
use crate::event::Staged;
use crate::event::{DeadCause, DeadLetter};
use crate::operator::{
    EnrichCode, EnrichOperator, Limits, LoadError, OperatorError, Projection, Scope,
};
use crate::rollout::{CounterBook, Routing, ShadowLog, VersionedEnrich};
use crate::state::{Namespace, ScopeState, StateBackend, StateKey, TableRow, key_group};
use crate::time::Millis;

/// An output of a call: the index of the event it came from, the output, and the version that
/// made it if not the spec's.
type Output = (usize, crate::operator::Enriched, Option<Arc<String>>);

/// The state map an enrichment operator's reference data is loaded into; it never expires.
pub const REFERENCE_MAP: &str = "reference";

/// One enrichment operator of a shard.
pub struct Enrichment {
    /// `name@version`, for dead letters.
    label: String,
    /// The version the spec names (its outputs carry no other).
    spec_version: Arc<str>,
    /// The other versions that made outputs, each with the copy its outputs share.
    made_by: Vec<(Arc<str>, Arc<String>)>,
    /// Its position in the chain (state is kept per position).
    index: u16,
    operator: VersionedEnrich,
    /// How instances of other versions are made (rollouts).
    limits: Limits,
    projection: Projection,
    ttl: Option<Millis>,
    /// When keys with state that can expire expire.
    expiry: Deadlines,
}

impl std::fmt::Debug for Enrichment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Enrichment")
            .field("label", &self.label)
            .field("ttl", &self.ttl)
            .finish()
    }
}

/// Drops everything but the reference data.
fn expire(state: &mut ScopeState) {
    state.values.clear();
    state.maps.retain(|name, _| name == REFERENCE_MAP);
    state.last_event = None;
}

impl Enrichment {
    /// Operator `operator` at position `index` of the chain, labelled `label`; instances of other
    /// versions get `limits` and the fields `projection` selects.
    pub fn new(
        label: String,
        index: u16,
        operator: VersionedEnrich,
        ttl: Option<Millis>,
        (limits, projection): (Limits, Projection),
    ) -> Self {
        Enrichment {
            label,
            spec_version: operator.routing().live.as_str().into(),
            made_by: Vec::new(),
            index,
            operator,
            limits,
            projection,
            ttl,
            expiry: Deadlines::default(),
        }
    }

    /// The operator's name.
    pub fn name(&self) -> &str {
        self.operator.name()
    }

    /// Routes keys between the operator's versions from now on; `code` is the code of a version
    /// this shard does not run yet.
    pub fn route(
        &mut self,
        routing: Routing,
        code: Option<&dyn EnrichCode>,
        counters: &CounterBook,
        shadow_log: Option<ShadowLog>,
    ) -> Result<(), LoadError> {
        let instance = code
            .map(|code| code.instantiate(self.limits.clone(), self.projection.clone()))
            .transpose()?;
        self.operator.route(routing, instance, counters, shadow_log);
        Ok(())
    }

    fn state_key(&self, key: &Arc<str>) -> StateKey {
        StateKey {
            group: key_group(key),
            operator: self.index,
            namespace: Namespace::Global,
            key: key.clone(),
        }
    }

    /// Re-arms the expiry of restored keys (`rows`: this shard's part of the state table).
    pub fn restore(&mut self, rows: &[TableRow]) -> Result<(), crate::state::RowError> {
        use crate::state::RowError;
        let Some(ttl) = self.ttl else { return Ok(()) };
        for row in rows {
            let Some(key) = StateKey::decode(&row.key) else {
                return Err(RowError::MalformedKey("state"));
            };
            if key.operator != self.index || key.namespace != Namespace::Global {
                continue;
            }
            let state: ScopeState =
                crate::state::decode_scope(&row.value).map_err(|source| RowError::Scope {
                    what: "a state scope",
                    source,
                })?;
            if let Some(last) = state.last_event {
                self.expiry.set(key.key, last.saturating_add(ttl));
            }
        }
        Ok(())
    }

    /// Runs the operator over a batch (one call per key and TTL period) and returns its output
    /// in arrival order, each output keeping its origin's arrival index. `watermark_at(seq)` is
    /// the watermark when event `seq` arrived.
    pub fn run(
        &mut self,
        events: Vec<Staged>,
        state: &mut dyn StateBackend,
        watermark_at: &dyn Fn(u64) -> Millis,
        out: &mut Rejects,
    ) -> Result<Vec<Staged>, ShardError> {
        let mut groups: HashMap<&str, Vec<usize>> = HashMap::default();
        let mut order = Vec::new();
        for (i, staged) in events.iter().enumerate() {
            let key = staged.event.key.as_str();
            groups
                .entry(key)
                .or_insert_with(|| {
                    order.push(key);
                    Vec::new()
                })
                .push(i);
        }
        let mut outputs = Vec::with_capacity(events.len());
        for text in order {
            let key = self.expiry.own_key(text);
            let state_key = self.state_key(&key);
            let mut scope = Scope {
                key: key.clone(),
                state: state.take(&state_key)?,
            };
            let mut run: Vec<usize> = Vec::new();
            for &member in &groups[text] {
                let staged = &events[member];
                if let (Some(ttl), Some(last)) = (self.ttl, scope.state.last_event)
                    && last.saturating_add(ttl) <= watermark_at(staged.seq)
                {
                    self.call(&mut scope, &run, &events, &mut outputs, out)?;
                    run.clear();
                    expire(&mut scope.state);
                }
                run.push(member);
                let last = scope
                    .state
                    .last_event
                    .map_or(staged.event.timestamp, |l| l.max(staged.event.timestamp));
                if self.ttl.is_some() {
                    scope.state.last_event = Some(last);
                }
            }
            self.call(&mut scope, &run, &events, &mut outputs, out)?;
            if let (Some(ttl), Some(last)) = (self.ttl, scope.state.last_event) {
                self.expiry.set(key.clone(), last.saturating_add(ttl));
            }
            state.put(state_key, scope.state)?;
        }
        let mut produced = Vec::with_capacity(outputs.len());
        for (origin, output, made_by) in outputs {
            let origin: &Staged = &events[origin];
            if crate::time::check_timestamp(output.timestamp).is_err() {
                out.dead_letters.push(DeadLetter {
                    line: origin.event.line,
                    raw: origin.event.to_json().to_string(),
                    reason: format!(
                        "{} produced an event with timestamp {} out of range",
                        self.label, output.timestamp
                    ),
                    cause: DeadCause::Rejected,
                });
                continue;
            }
            let mut event = origin.event.clone();
            event.timestamp = output.timestamp;
            event.fields = output.fields;
            produced.push(Staged {
                seq: origin.seq,
                event,
                origin: None,
                made_by,
            });
        }
        // Back to arrival order; outputs of one origin keep the operator's order.
        produced.sort_by_key(|staged| staged.seq);
        Ok(produced)
    }

    /// Operator calls over `members` (events of one key), at most
    /// [`MAX_EVENTS_PER_CALL`](crate::window::MAX_EVENTS_PER_CALL) events each.
    fn call(
        &mut self,
        scope: &mut Scope,
        members: &[usize],
        events: &[Staged],
        outputs: &mut Vec<Output>,
        out: &mut Rejects,
    ) -> Result<(), ShardError> {
        for chunk in members.chunks(crate::window::MAX_EVENTS_PER_CALL) {
            self.call_once(scope, chunk, events, outputs, out)?;
        }
        Ok(())
    }

    /// One operator call over `members`. A failed call changed nothing; its events are retried
    /// one by one, so that only those the operator cannot take become dead letters.
    fn call_once(
        &mut self,
        scope: &mut Scope,
        members: &[usize],
        events: &[Staged],
        outputs: &mut Vec<Output>,
        out: &mut Rejects,
    ) -> Result<(), ShardError> {
        if members.is_empty() {
            return Ok(());
        }
        let batch: Vec<_> = members.iter().map(|&i| &events[i].event).collect();
        let made_by = self.made_by(&scope.key);
        match self.operator.process(scope, &batch) {
            Ok(enriched) => outputs
                .extend((enriched.into_iter()).map(|e| (members[e.origin], e, made_by.clone()))),
            Err(OperatorError::Host(message)) => return Err(ShardError::Host(message)),
            Err(error) if members.len() == 1 => self.failed(error, &events[members[0]], out),
            Err(_) => {
                for &member in members {
                    match self.operator.process(scope, &[&events[member].event]) {
                        Ok(enriched) => outputs
                            .extend(enriched.into_iter().map(|e| (member, e, made_by.clone()))),
                        Err(OperatorError::Host(message)) => {
                            return Err(ShardError::Host(message));
                        }
                        Err(error) => self.failed(error, &events[member], out),
                    }
                }
            }
        }
        Ok(())
    }

    /// The version that serves `key`, if not the spec's: what its outputs carry (one shared
    /// copy per version, behind a thin pointer: every event carries the field).
    fn made_by(&mut self, key: &str) -> Option<Arc<String>> {
        let serving = self.operator.serving(key);
        if **serving == *self.spec_version {
            return None;
        }
        if let Some((_, shared)) = self.made_by.iter().find(|(v, _)| **v == **serving) {
            return Some(shared.clone());
        }
        let shared = Arc::new(serving.to_string());
        self.made_by.push((serving.clone(), shared.clone()));
        Some(shared)
    }

    /// Reports an event the operator refused or trapped on, naming the version that served it.
    fn failed(&self, error: OperatorError, staged: &Staged, out: &mut Rejects) {
        let trapped = matches!(error, OperatorError::Trapped(_));
        out.traps += u64::from(trapped);
        let serving = self.operator.serving(&staged.event.key);
        let label = match **serving != *self.spec_version {
            true => format!("{}@{serving}", self.name()).into(),
            false => std::borrow::Cow::Borrowed(self.label.as_str()),
        };
        out.dead_letters.push(DeadLetter {
            line: staged.event.line,
            raw: staged.event.to_json().to_string(),
            reason: format!("{label} {error}"),
            cause: DeadCause::of_operator(trapped),
        });
    }

    /// Drops the state of keys whose TTL the watermark has passed.
    pub fn sweep(
        &mut self,
        state: &mut dyn StateBackend,
        watermark: Millis,
    ) -> Result<(), ShardError> {
        while let Some(key) = self.expiry.pop_through(watermark) {
            let state_key = self.state_key(&key);
            let mut scope = state.take(&state_key)?;
            expire(&mut scope);
            if scope.is_empty() {
                state.remove(&state_key)?;
            } else {
                state.put(state_key, scope)?;
            }
        }
        Ok(())
    }
}
