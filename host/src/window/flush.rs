//! [`Flush`]: applying windows' pending adds and finishing windows through the operator. It is
//! the half of the engine's orchestration that moves windows' state through the operator: take
//! a window's state, add its pending events (one call per window, or calls carrying many
//! windows where the operator makes them), finish it and emit its result (publish), put the
//! state back. It owns nothing: the engine lends it, per call, exactly the parts this may
//! touch (the live windows, the pending events, the change log and the operator calls), never
//! the due queue, the early-result count or the watermark.
//!
//! The engine depends on this module; it depends on the parts it is lent (`live`, `pending`,
//! `change_log`, `calls`), on `emission`, `arrived`, `output` and `slab`, and on `operator`
//! (its error and scope), `state`, `event` and `value`. No part depends on it.

use super::arrived::Arrived;
use super::calls::{Calls, Finished, MAX_WINDOWS_PER_CALL, Taken, runs};
use super::change_log::ChangeLog;
use super::emission::Firing;
use super::live::LiveWindows;
use super::output::{Context, EngineOutput, Result};
use super::pending::Pending;
use super::slab::WindowId;
use crate::event::{Event, Origin};
use crate::operator::{OperatorError, Scope};
use crate::state::{ScopeState, StateKey};
use crate::value::Fields;

/// The parts of an engine that adding and finishing windows work with, lent for one call.
pub(super) struct Flush<'e> {
    /// The open windows.
    pub(super) windows: &'e mut LiveWindows,
    /// Events not yet added to their windows' state.
    pub(super) pending: &'e mut Pending,
    /// What changed since the last checkpoint.
    pub(super) log: &'e mut ChangeLog,
    /// How the operator is called.
    pub(super) calls: &'e Calls,
    /// Whether windows keep their inputs (a stage's engine).
    pub(super) keeps_inputs: bool,
}

impl Flush<'_> {
    /// Window `id`'s state, taken from the store, under the key to put it back with.
    fn take_scope(&self, id: WindowId, cx: &mut Context<'_>) -> Result<(StateKey, Scope)> {
        let live = &self.windows[id];
        (self.calls).take(cx, &live.key, live.window, live.stored.in_store())
    }

    /// Adds window `id`'s pending events to its state in one operator call, or, for a stage's
    /// window with a replaced or withdrawn input, rebuilds its state from all of its inputs.
    pub(super) fn flush_pending(
        &mut self,
        id: WindowId,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let Some(live) = self.windows.get(id) else {
            return Ok(());
        };
        if live.waiting.is_idle() {
            return Ok(());
        }
        let (state_key, mut scope) = self.take_scope(id, cx)?;
        self.add_pending_to(id, &mut scope, events, cx, out)?;
        cx.state.put(state_key, scope.state)?;
        Ok(())
    }

    /// [`Self::flush_pending`] on `scope`, window `id`'s state, already taken from the store.
    fn add_pending_to(
        &mut self,
        id: WindowId,
        scope: &mut Scope,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let live = self.windows.get_mut(id).expect("a live window");
        if live.waiting.is_idle() {
            return Ok(());
        }
        let (pending, rebuild) = live.waiting.take();
        let inputs: Vec<Event> = match rebuild {
            true => live
                .inputs
                .iter()
                .map(|input| input.event.clone())
                .collect(),
            false => Vec::new(),
        };
        let batch: Vec<&Event> = match rebuild {
            true => inputs.iter().collect(),
            false => {
                let mut batch = Vec::with_capacity(pending.len());
                events.extend_events(&pending, &mut batch);
                batch
            }
        };
        if rebuild {
            scope.state = ScopeState::default();
        }
        let failed = self.calls.add(scope, &batch, cx, out)?;
        let live = self.windows.get_mut(id).expect("a live window");
        if self.keeps_inputs && !failed.is_empty() {
            // An input the operator could not take is a dead letter, not an input.
            let origins: Vec<&Origin> = match rebuild {
                true => failed.iter().map(|&i| &live.inputs.get(i).origin).collect(),
                false => (failed.iter())
                    .filter_map(|&i| events[pending[i]].origin.as_deref())
                    .collect(),
            };
            let origins: Vec<Origin> = origins.into_iter().cloned().collect();
            for origin in &origins {
                live.inputs.remove(origin);
            }
        }
        if live.emit.took(batch.len() - failed.len(), rebuild) {
            self.log.touch(&mut live.stored, id);
        }
        drop(batch);
        self.pending.recycle(pending);
        Ok(())
    }

    /// Whether window `id` has a result to emit on time: it changed since its last emission,
    /// or it has early results only.
    fn fires(&self, id: WindowId) -> bool {
        self.windows[id].emit.fires()
    }

    /// Adds due window `id`'s pending events and emits its result on time, with one `take` of
    /// its state and one `put` (none if it is `closing`: its state is removed next).
    pub(super) fn flush_and_emit(
        &mut self,
        id: WindowId,
        trigger: u64,
        closing: bool,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let live = &self.windows[id];
        if live.waiting.is_idle() && !live.emit.fires() {
            return Ok(());
        }
        let window = live.window;
        let (state_key, mut scope) = self.take_scope(id, cx)?;
        let parks = out.parks.len();
        self.add_pending_to(id, &mut scope, events, cx, out)?;
        if out.parks[parks..].iter().any(|park| park.key == scope.key) {
            // Its key was just parked: the window is held with its state, closing or not.
            cx.state.put(state_key, scope.state)?;
            return Ok(());
        }
        let outcome = self
            .fires(id)
            .then(|| cx.operator.finish(&mut scope, window));
        if !closing {
            cx.state.put(state_key, scope.state)?;
        }
        let firing = Firing::on_time(closing);
        match outcome {
            Some(outcome) => self.publish(id, outcome, trigger, firing, cx, out),
            None => Ok(()),
        }
    }

    /// [`Self::flush_and_emit`] for due windows, in order, for an operator that makes calls
    /// carrying many windows: each window's state taken once and put back once (not if it is
    /// `closing`), the adds and then the outputs in as few calls as the operator makes.
    pub(super) fn flush_and_emit_all(
        &mut self,
        group: Vec<(WindowId, bool)>,
        trigger: u64,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let mut taken = Vec::with_capacity(group.len());
        let mut closing = Vec::with_capacity(group.len());
        for (id, closes) in group {
            let live = &self.windows[id];
            if live.waiting.is_idle() && !live.emit.fires() {
                continue;
            }
            taken.push(self.take_window(id, cx)?);
            closing.push(closes);
        }
        let parks = out.parks.len();
        self.add_taken(&mut taken, events, cx, out)?;
        // Windows whose key was just parked are held with their state, closing or not.
        let parked: Vec<std::sync::Arc<str>> = out.parks[parks..]
            .iter()
            .map(|park| park.key.clone())
            .collect();
        let outcomes = self.finish_taken(&mut taken, &parked, cx)?;
        for ((window, closes), outcome) in taken.into_iter().zip(closing).zip(outcomes) {
            if !closes || parked.contains(&window.scope.key) {
                cx.state.put(window.state_key, window.scope.state)?;
            }
            if let Some(outcome) = outcome {
                self.publish(
                    window.id,
                    outcome,
                    trigger,
                    Firing::on_time(closes),
                    cx,
                    out,
                )?;
            }
        }
        Ok(())
    }

    /// Adds the pending events of windows `ids`, in order, with calls carrying many windows
    /// where the operator can make them.
    pub(super) fn flush_pending_all(
        &mut self,
        ids: Vec<WindowId>,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        if !cx.operator.carries_windows() {
            for id in ids {
                self.flush_pending(id, events, cx, out)?;
            }
            return Ok(());
        }
        // Sized once: a window taken is large, and growing the list copied it over and over.
        let mut taken = Vec::with_capacity(ids.len().min(MAX_WINDOWS_PER_CALL));
        for id in ids {
            let Some(live) = self.windows.get(id) else {
                continue;
            };
            if live.waiting.rebuilds() {
                self.flush_pending(id, events, cx, out)?;
            } else if live.waiting.has_events() {
                taken.push(self.take_window(id, cx)?);
            }
            if taken.len() == MAX_WINDOWS_PER_CALL {
                self.add_and_put(&mut taken, events, cx, out)?;
            }
        }
        self.add_and_put(&mut taken, events, cx, out)
    }

    /// Adds the taken windows' events and puts their states back.
    fn add_and_put(
        &mut self,
        taken: &mut Vec<Taken>,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        self.add_taken(taken, events, cx, out)?;
        for window in taken.drain(..) {
            cx.state.put(window.state_key, window.scope.state)?;
        }
        Ok(())
    }

    /// Window `id`'s state taken from the store, with its pending events (none if it rebuilds:
    /// [`Self::add_pending_to`] does that alone).
    fn take_window(&mut self, id: WindowId, cx: &mut Context<'_>) -> Result<Taken> {
        let (state_key, scope) = self.take_scope(id, cx)?;
        let live = self.windows.get_mut(id).expect("a live window");
        let pending = live.waiting.take_unless_rebuild();
        Ok(Taken {
            id,
            window: live.window,
            state_key,
            scope,
            pending,
        })
    }

    /// Adds each taken window's pending events: in runs of windows within one call's limits,
    /// each run in one [`crate::operator::AggregateOperator::add_windows`]; the windows it
    /// leaves (and those that go alone) with [`Self::add_pending_to`], which retries and
    /// reports as ever.
    fn add_taken(
        &mut self,
        taken: &mut [Taken],
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        if taken.is_empty() {
            return Ok(());
        }
        let mut start = 0;
        let ends = runs(taken.iter().map(Taken::carried));
        for end in ends.into_iter().chain([taken.len()]) {
            self.add_run(&mut taken[start..end], events, cx, out)?;
            start = end;
        }
        Ok(())
    }

    /// [`Self::add_taken`] for one run: its carried windows in one call.
    fn add_run(
        &mut self,
        run: &mut [Taken],
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let done = self.calls.add_windows(run, events, cx)?;
        for (window, done) in run.iter_mut().zip(done) {
            if done {
                self.added(window.id, std::mem::take(&mut window.pending));
                continue;
            }
            if !window.pending.is_empty() {
                let live = self.windows.get_mut(window.id).expect("a live window");
                live.waiting.put_back(std::mem::take(&mut window.pending));
            }
            self.add_pending_to(window.id, &mut window.scope, events, cx, out)?;
        }
        Ok(())
    }

    /// Records that window `id` took its `pending` events (all of them, in a call carrying
    /// many windows), as [`Self::add_pending_to`] does.
    fn added(&mut self, id: WindowId, pending: Vec<usize>) {
        let live = self.windows.get_mut(id).expect("a live window");
        live.emit.took_all(pending.len());
        self.log.touch(&mut live.stored, id);
        self.pending.recycle(pending);
    }

    /// The outputs of the taken windows that fire now (`None` for the others): those the
    /// operator gives in calls carrying many windows, the rest from `finish` alone.
    fn finish_taken(
        &mut self,
        taken: &mut [Taken],
        parked: &[std::sync::Arc<str>],
        cx: &mut Context<'_>,
    ) -> Result<Vec<Option<Finished>>> {
        let firing: Vec<usize> = (0..taken.len())
            .filter(|&i| self.fires(taken[i].id) && !parked.contains(&taken[i].scope.key))
            .collect();
        self.calls.finish(taken, firing, cx)
    }

    /// Emits window `id`'s current result (see [`Firing`]), as caused by `trigger`. A result
    /// equal to the last one emitted is not emitted again; an empty one withdraws it.
    pub(super) fn emit(
        &mut self,
        id: WindowId,
        trigger: u64,
        firing: Firing,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let live = &self.windows[id];
        let window = live.window;
        let outcome = if self.keeps_inputs && live.inputs.is_empty() {
            // Every input of a stage's window was withdrawn: so is its result.
            Ok(Fields::new())
        } else {
            let (state_key, mut scope) = self.take_scope(id, cx)?;
            let outcome = cx.operator.finish(&mut scope, window);
            cx.state.put(state_key, scope.state)?;
            outcome
        };
        self.publish(id, outcome, trigger, firing, cx, out)
    }

    /// Emits `outcome`, window `id`'s output from `finish` (see [`Firing`]), as caused by
    /// `trigger`; a failed `finish` is a dead letter.
    fn publish(
        &mut self,
        id: WindowId,
        outcome: std::result::Result<Fields, OperatorError>,
        trigger: u64,
        firing: Firing,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let live = &self.windows[id];
        let (key, window) = (live.key.clone(), live.window);
        let value = match outcome {
            Ok(value) => value,
            Err(error) => return self.calls.finish_failed(&key, window, error, cx, out),
        };
        let operator_version = cx.operator.version_for(&key);
        let live = self.windows.get_mut(id).expect("a live window");
        self.log.touch(&mut live.stored, id);
        if let Some(emitted) = live.emit.publish(value, firing) {
            out.emissions
                .push(emitted.into_emission(trigger, key, window, operator_version));
        }
        Ok(())
    }
}
