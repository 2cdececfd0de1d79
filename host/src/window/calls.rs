//! [`Calls`]: how a window engine calls its aggregate operator. It owns the operator's place in
//! the chain (its state keys) and its label (its dead letters), and every way a window's state
//! goes through the operator: taken from the store and put back, events added (a failed call's
//! events retried one by one, so only the events the operator refuses become dead letters),
//! session states merged, and windows added and finished in calls carrying many windows within
//! one call's limits ([`runs`]).
//!
//! No window state lives here: callers pass a window's key, extent and whether it may be in
//! the store. The engine and its flush depend on this module; it depends on `output`, `arrived`
//! and `slab` of `window`, on `operator` (its traits and call types), and on `state`, `event`,
//! `time` and `value`. Nothing of Wasm.

use std::sync::Arc;

use super::arrived::Arrived;
use super::output::{Context, EngineError, EngineOutput, Result};
use super::slab::WindowId;
use crate::event::{DeadCause, DeadLetter, Event};
use crate::operator::{CarriedResult, OperatorError, Scope, WindowEvents};
use crate::state::{Namespace, ScopeState, StateKey, key_group};
use crate::time::Window;
use crate::value::Fields;

/// The most events one operator call takes: batches may be larger (fewer calls per key), but
/// a call's input and output stay within what a guest's memory and output limit allow.
pub const MAX_EVENTS_PER_CALL: usize = 4_096;

/// The most windows one call carrying many windows takes
/// ([`crate::operator::AggregateOperator::add_windows`],
/// [`crate::operator::AggregateOperator::finish_windows`]); its events stay within
/// [`MAX_EVENTS_PER_CALL`].
pub const MAX_WINDOWS_PER_CALL: usize = 1_024;

/// The most bytes of named values one call carrying many windows takes (they cross with it):
/// what the calls ask of a guest's memory stays near what one window's call asks.
pub const MAX_NAMED_BYTES_PER_CALL: usize = 1 << 20;

/// The outcome of one window's `finish`: its output, or the operator's error.
pub(super) type Finished = std::result::Result<Fields, OperatorError>;

/// A window whose state is out of the store for calls carrying many windows, with the pending
/// events it adds (moved out of the window, so it is not taken twice).
pub(super) struct Taken {
    pub(super) id: WindowId,
    /// Its extent (what `finish` is told).
    pub(super) window: Window,
    pub(super) state_key: StateKey,
    pub(super) scope: Scope,
    pub(super) pending: Vec<usize>,
}

impl Taken {
    /// The events and bytes of named values it adds with, if it goes in a call carrying many
    /// windows: not if it adds nothing, rebuilds its state, or is over one such call's limits
    /// on its own (then it goes alone).
    pub(super) fn carried(&self) -> Option<(usize, usize)> {
        let (events, named) = (self.pending.len(), self.scope.state.named_values_size());
        (events > 0 && events <= MAX_EVENTS_PER_CALL && named <= MAX_NAMED_BYTES_PER_CALL)
            .then_some((events, named))
    }
}

/// Whether the call for `key` under way parked it (its failed events are the last park).
fn parked_now(out: &EngineOutput, key: &str) -> bool {
    out.parks.last().is_some_and(|park| &*park.key == key)
}

/// Parks `events` with those of the last park, after them.
fn park_more(out: &mut EngineOutput, events: &[&Event]) {
    let park = out.parks.last_mut().expect("a park under way");
    park.events
        .extend(events.iter().map(|event| (*event).clone()));
}

/// Splits `sizes` (each item's (events, bytes), or `None` if it goes alone) into runs of
/// consecutive items whose carried ones fit one call: at most [`MAX_WINDOWS_PER_CALL`],
/// [`MAX_EVENTS_PER_CALL`] events and [`MAX_NAMED_BYTES_PER_CALL`] bytes. Returns where each
/// run but the last ends.
pub(super) fn runs(sizes: impl Iterator<Item = Option<(usize, usize)>>) -> Vec<usize> {
    let (mut ends, mut windows, mut events, mut bytes) = (Vec::new(), 0, 0, 0);
    for (i, size) in sizes.enumerate() {
        let Some((n, b)) = size else { continue };
        if windows == MAX_WINDOWS_PER_CALL
            || events + n > MAX_EVENTS_PER_CALL
            || bytes + b > MAX_NAMED_BYTES_PER_CALL
        {
            ends.push(i);
            (windows, events, bytes) = (0, 0, 0);
        }
        (windows, events, bytes) = (windows + 1, events + n, bytes + b);
    }
    ends
}

/// How one engine calls its operator: the operator's place in the chain and its label.
#[derive(Debug)]
pub(super) struct Calls {
    operator_index: u16,
    operator_label: String,
    /// With a quarantine: whether refused events park their key too (traps always do).
    parks: Option<bool>,
}

impl Calls {
    /// Calls of the operator at `operator_index` of the chain (its state is kept apart from
    /// the others'), labelled `operator_label` (`name@version`) in dead letters.
    pub(super) fn new(operator_index: u16, operator_label: String) -> Self {
        Calls {
            operator_index,
            operator_label,
            parks: None,
        }
    }

    /// Failed events park their key (`[quarantine]`) rather than becoming dead letters: those
    /// that trapped, and those refused too if `errors`.
    pub(super) fn park_failures(&mut self, errors: bool) {
        self.parks = Some(errors);
    }

    /// The operator's place in the chain.
    pub(super) fn operator_index(&self) -> u16 {
        self.operator_index
    }

    /// `name@version` of the version serving `key`, for its dead letters: during a rollout the
    /// candidate's for the keys it serves, after a promotion the new version's.
    fn label_for(&self, cx: &Context<'_>, key: &str) -> std::borrow::Cow<'_, str> {
        let label = self.operator_label.as_str();
        match (cx.operator.version_for(key), label.rsplit_once('@')) {
            (Some(version), Some((name, spec))) if *version != *spec => {
                format!("{name}@{version}").into()
            }
            _ => label.into(),
        }
    }

    /// Where the state of `key`'s `window` is stored.
    pub(super) fn state_key(&self, key: &Arc<str>, window: Window) -> StateKey {
        StateKey {
            group: key_group(key),
            operator: self.operator_index,
            namespace: Namespace::Window {
                start: window.start,
                end: window.end,
            },
            key: key.clone(),
        }
    }

    /// The state of `key`'s `window`, taken from the store (looked for there only if
    /// `stored`), under the key to put it back with.
    pub(super) fn take(
        &self,
        cx: &mut Context<'_>,
        key: &Arc<str>,
        window: Window,
        stored: bool,
    ) -> Result<(StateKey, Scope)> {
        let state_key = self.state_key(key, window);
        let state = take_state(cx, &state_key, stored)?;
        let key = key.clone();
        Ok((state_key, Scope { key, state }))
    }

    /// Adds `batch` to `scope`'s state, in calls of at most [`MAX_EVENTS_PER_CALL`] events.
    /// A failed call changed nothing: its events are retried one by one, so that only the
    /// events the operator cannot take become dead letters, whatever the batch boundaries were.
    /// Returns the indexes of those events.
    pub(super) fn add(
        &self,
        scope: &mut Scope,
        batch: &[&Event],
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<Vec<usize>> {
        let mut failed = Vec::new();
        for (c, chunk) in batch.chunks(MAX_EVENTS_PER_CALL).enumerate() {
            let first = c * MAX_EVENTS_PER_CALL;
            if parked_now(out, &scope.key) {
                // The key was parked by an earlier event: the rest wait with it, in order.
                park_more(out, chunk);
                failed.extend(first..first + chunk.len());
                continue;
            }
            match cx.operator.add(scope, chunk) {
                Ok(()) => {}
                Err(OperatorError::Host(message)) => return Err(EngineError::Host(message)),
                Err(error) if chunk.len() == 1 => {
                    self.failed(error, &scope.key, chunk, cx, out)?;
                    failed.push(first);
                }
                Err(_) => {
                    for (i, event) in chunk.iter().enumerate() {
                        if parked_now(out, &scope.key) {
                            park_more(out, &[event]);
                            failed.push(first + i);
                        } else if let Err(error) = cx.operator.add(scope, &[event]) {
                            self.failed(error, &scope.key, &[event], cx, out)?;
                            failed.push(first + i);
                        }
                    }
                }
            }
        }
        Ok(failed)
    }

    /// Reports `events` of `key`, which the operator refused or trapped on, as dead letters
    /// naming the version that served them; a host failure stops the batch instead (see
    /// [`counted`]).
    pub(super) fn failed(
        &self,
        error: OperatorError,
        key: &Arc<str>,
        events: &[&Event],
        cx: &Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let (error, trapped) = counted(error, out)?;
        let reason = format!("{} {error}", self.label_for(cx, key));
        if self.parks.is_some_and(|errors| trapped || errors) {
            out.parks.push(super::output::Park {
                key: key.clone(),
                events: events.iter().map(|event| (*event).clone()).collect(),
                reason,
            });
            return Ok(());
        }
        out.dead_letters
            .extend(events.iter().map(|event| DeadLetter {
                line: event.line,
                raw: event.to_json().to_string(),
                reason: reason.clone(),
                cause: DeadCause::of_operator(trapped),
            }));
        Ok(())
    }

    /// Reports that `finish` failed for `key`'s `window`: a dead letter naming the window; a
    /// host failure stops the batch instead.
    pub(super) fn finish_failed(
        &self,
        key: &Arc<str>,
        window: Window,
        error: OperatorError,
        cx: &Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let (error, trapped) = counted(error, out)?;
        let label = self.label_for(cx, key);
        out.dead_letters.push(DeadLetter {
            line: 0,
            raw: serde_json::json!({"key": &**key, "window_start": window.start, "window_end": window.end}).to_string(),
            reason: format!("{label} could not finish the window: {error}"),
            cause: DeadCause::of_operator(trapped),
        });
        Ok(())
    }

    /// Merges the states of `key`'s sessions `touching` (sorted by start; `extent` gives each
    /// one's window and whether it may be in the store) into the first one's with the
    /// operator's `merge`. If the operator fails, every state is put back as it was and its
    /// error returned.
    pub(super) fn merge(
        &self,
        key: &Arc<str>,
        touching: &[WindowId],
        extent: impl Fn(WindowId) -> (Window, bool),
        cx: &mut Context<'_>,
    ) -> Result<std::result::Result<Scope, OperatorError>> {
        let (window, stored) = extent(touching[0]);
        let first = self.state_key(key, window);
        let mut target = Scope {
            key: key.clone(),
            state: take_state(cx, &first, stored)?,
        };
        let mut sources = Vec::new();
        let mut failure = None;
        for &id in &touching[1..] {
            let (window, stored) = extent(id);
            let mut source = Scope {
                key: key.clone(),
                state: take_state(cx, &self.state_key(key, window), stored)?,
            };
            if failure.is_none()
                && let Err(e) = cx.operator.merge(&mut target, &mut source)
            {
                failure = Some(e);
            }
            sources.push((id, source));
        }
        let Some(error) = failure else {
            return Ok(Ok(target));
        };
        cx.state.put(first, target.state)?;
        for (id, source) in sources {
            cx.state
                .put(self.state_key(key, extent(id).0), source.state)?;
        }
        Ok(Err(error))
    }

    /// Adds the carried windows of `run` (see [`Taken::carried`]) in one
    /// [`crate::operator::AggregateOperator::add_windows`] call. Returns, per window of
    /// `run`, whether that call took all of its events (false for a window that goes alone,
    /// and for every window if the call trapped or was not made).
    pub(super) fn add_windows(
        &self,
        run: &mut [Taken],
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
    ) -> Result<Vec<bool>> {
        let mut carried: Vec<bool> = run.iter().map(|w| w.carried().is_some()).collect();
        // Every carried window's events in one list, and their crossings (if any batch held
        // has them) in another (a list per window cost an allocation each), each window's a
        // slice of them.
        let carried_windows = || run.iter().zip(&carried).filter(|(_, c)| **c);
        let events_in_all = carried_windows().map(|(w, _)| w.pending.len()).sum();
        let mut all = Vec::with_capacity(events_in_all);
        let crossed = events.has_crossings();
        let mut crossings = Vec::with_capacity(if crossed { events_in_all } else { 0 });
        for (window, _) in carried_windows() {
            match crossed {
                true => events.each_staged(&window.pending, |staged, crossing| {
                    all.push(&staged.event);
                    crossings.push(crossing);
                }),
                false => events.extend_events(&window.pending, &mut all),
            }
        }
        let (mut rest, mut rest_crossings) = (&all[..], &crossings[..]);
        let mut calls: Vec<WindowEvents<'_>> = Vec::with_capacity(run.len());
        calls.extend(
            (run.iter_mut().zip(&carried))
                .filter(|(_, c)| **c)
                .map(|(w, _)| {
                    let (batch, after) = rest.split_at(w.pending.len());
                    let (batch_crossings, after_crossings) =
                        rest_crossings.split_at(rest_crossings.len().min(w.pending.len()));
                    (rest, rest_crossings) = (after, after_crossings);
                    WindowEvents {
                        scope: &mut w.scope,
                        events: batch,
                        crossings: batch_crossings,
                    }
                }),
        );
        let done = match calls.is_empty() {
            true => Vec::new(),
            false => outcomes(cx.operator.add_windows(&mut calls))?,
        };
        drop(calls);
        // In place: `done` has one outcome per carried window, and is only read for those.
        let mut done = done.into_iter();
        for c in &mut carried {
            *c = *c && done.next() == Some(true);
        }
        Ok(carried)
    }

    /// The outputs of the taken windows `firing` (indexes into `taken`; `None` for the
    /// others): those the operator gives in calls carrying many windows, the rest from
    /// `finish` alone.
    pub(super) fn finish(
        &self,
        taken: &mut [Taken],
        firing: Vec<usize>,
        cx: &mut Context<'_>,
    ) -> Result<Vec<Option<Finished>>> {
        // Each firing window's named values cross; one over a call's limit goes alone.
        let sizes: Vec<Option<(usize, usize)>> = (firing.iter())
            .map(|&i| taken[i].scope.state.named_values_size())
            .map(|bytes| (bytes <= MAX_NAMED_BYTES_PER_CALL).then_some((0, bytes)))
            .collect();
        let mut outputs: Vec<Option<Fields>> = vec![None; taken.len()];
        let mut start = 0;
        for end in runs(sizes.iter().copied())
            .into_iter()
            .chain([firing.len()])
        {
            let chunk: Vec<usize> = (start..end)
                .filter(|&f| sizes[f].is_some())
                .map(|f| firing[f])
                .collect();
            start = end;
            if chunk.is_empty() {
                continue;
            }
            let calls: Vec<(&Scope, Window)> = (chunk.iter())
                .map(|&i| (&taken[i].scope, taken[i].window))
                .collect();
            let finished = outcomes(cx.operator.finish_windows(&calls))?;
            for (&i, output) in chunk.iter().zip(finished) {
                outputs[i] = output;
            }
        }
        let mut outcomes: Vec<_> = (0..taken.len()).map(|_| None).collect();
        for i in firing {
            let window = taken[i].window;
            outcomes[i] = Some(match outputs[i].take() {
                Some(fields) => Ok(fields),
                None => cx.operator.finish(&mut taken[i].scope, window),
            });
        }
        Ok(outcomes)
    }
}

/// The windows' outcomes of a call carrying many windows: none if no call was made or it
/// trapped (each window then goes alone); a host failure stops the batch as any does.
fn outcomes<T>(carried: CarriedResult<T>) -> Result<Vec<T>> {
    match carried {
        Ok(made) => Ok(made.unwrap_or_default()),
        Err(OperatorError::Host(message)) => Err(EngineError::Host(message)),
        Err(_) => Ok(Vec::new()),
    }
}

/// Takes a window's state under `key`; `stored` false (the window's state was never
/// checkpointed, see the change log's `Stored`): the store is not looked in.
pub(super) fn take_state(cx: &mut Context<'_>, key: &StateKey, stored: bool) -> Result<ScopeState> {
    Ok(match stored {
        true => cx.state.take(key)?,
        false => cx.state.take_unstored(key)?,
    })
}

/// Deletes a window's state under `key`; `stored` false: no change for the next checkpoint.
pub(super) fn remove_state(cx: &mut Context<'_>, key: &StateKey, stored: bool) -> Result<()> {
    match stored {
        true => cx.state.remove(key)?,
        false => cx.state.remove_unstored(key)?,
    }
    Ok(())
}

/// An operator's failure as the engine takes it: a host failure stops the batch (`Err`);
/// anything else is counted (a trap in `out.traps`) and handed back with whether it trapped.
fn counted(error: OperatorError, out: &mut EngineOutput) -> Result<(OperatorError, bool)> {
    if let OperatorError::Host(message) = error {
        return Err(EngineError::Host(message));
    }
    let trapped = matches!(error, OperatorError::Trapped(_));
    out.traps += u64::from(trapped);
    Ok((error, trapped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_of_windows_keep_each_call_within_its_limits() {
        let half = Some((MAX_EVENTS_PER_CALL / 2, 0));
        // Two halves fill a call; a third starts the next. Windows going alone do not count.
        assert_eq!(runs([half, None, half, half].into_iter()), [3]);
        let bytes = Some((1, MAX_NAMED_BYTES_PER_CALL / 2 + 1));
        assert_eq!(runs([bytes, bytes, bytes].into_iter()), [1, 2]);
        let small = std::iter::repeat_n(Some((1, 1)), MAX_WINDOWS_PER_CALL * 2 + 1);
        assert_eq!(
            runs(small),
            [MAX_WINDOWS_PER_CALL, MAX_WINDOWS_PER_CALL * 2]
        );
        assert!(runs(std::iter::empty()).is_empty());
    }
}
