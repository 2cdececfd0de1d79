//! [`WindowEngine`]: one shard's windows of one aggregate operator.
//!
//! The engine sees its shard's events in arrival order, interleaved with every watermark
//! advance of the whole input (including those caused by other shards' events), so its results
//! do not depend on the number of shards or on batch boundaries. For each event: lateness is
//! judged against the current watermark, the event is added to its windows (sessions merge), and
//! every window whose end the watermark has passed and that has unemitted changes fires. Adds
//! are buffered per window until the window fires or the batch ends, or, while full batches
//! follow each other, until the window fires or the engine would hold more than
//! [`super::MAX_HELD_BATCHES`] batches ([`Arrived`]). The windows that add or fire together go
//! to the operator in calls carrying many windows where it makes them
//! ([`crate::operator::AggregateOperator::add_windows`]: a 0.3 component, or the native
//! count-sum), the rest in one call per window.
//!
//! A stage's engine ([`WindowEngine::keeping_inputs`]) also keeps each window's inputs by the
//! upstream result they stand for ([`crate::event::Origin`]): an upstream update replaces its
//! result's contribution and a withdrawal removes it, and the window's state is rebuilt from
//! the inputs that remain (the operator's own `add` over them, as Flink does for aggregates
//! without a retract function), so a downstream result never counts an upstream one twice. A
//! window left without inputs withdraws its result. A withdrawal does not shrink or split a
//! session.
//!
//! The engine only orchestrates; each part owns its state (a live window carries one sub-state
//! per part, changed only by that part's module):
//!
//! - [`super::live`]: the open windows, by id, by key and by expiry;
//! - [`super::pending`]: the events accepted but not yet added, and the batches they are in;
//! - [`super::due`]: the windows waiting to fire, by end;
//! - [`super::emission`]: what each window emitted, the emission rule, early-result counts;
//! - [`super::change_log`]: what the next checkpoint writes of the windows;
//! - [`super::calls`]: how the operator is called (state in and out, adds, merges, finishes);
//! - [`super::sessions`]: the session merge rule;
//! - [`super::flush`]: adding pending events and finishing windows, over the parts it is lent.
//!
//! The engine depends on those parts, on [`mod@super::assign`], [`super::arrived`],
//! [`super::inputs`], [`super::slab`] and [`super::output`] (whose [`Context`] lends it the
//! operator and the state), and on `event`, `spec`, `state` and `time`; it names nothing of
//! `operator` itself. Nothing in `window` depends on the engine.

use std::sync::Arc;

use super::arrived::Arrived;
use super::assign::assign;
use super::calls::{self, Calls, MAX_WINDOWS_PER_CALL};
use super::change_log::{self, ChangeLog};
use super::due::DueQueue;
use super::emission::{Early, EmitState, Firing, retraction};
use super::flush::Flush;
use super::inputs::{Input, Inputs};
use super::live::{LiveWindow, LiveWindows};
use super::output::{Context, EngineOutput, LateEvent, Result, Timeline};
use super::pending::{self, Pending};
use super::quarantine::{ACCEPTED, Full, PARKED, ParkedEvent, Parking};
use super::sessions::{self, Merge, Plan};
use super::slab::WindowId;
use crate::event::{DeadCause, DeadLetter, Share, Staged};
use crate::spec::WindowSpec;
use crate::state::{Change, RowError, TableRow};
use crate::time::{MINUS_INFINITY, Millis, PLUS_INFINITY, Window};

/// How many events ahead of the one it accepts the engine asks the CPU to fetch a key (see
/// [`crate::event::Event::prefetch_key`]).
const KEY_PREFETCH_AHEAD: usize = 8;

/// One shard's windows for one aggregate operator.
pub struct WindowEngine {
    spec: WindowSpec,
    /// How the operator is called (its place in the chain, its label).
    calls: Calls,
    keeps_inputs: bool,
    /// Early results by count of events.
    early: Early,
    watermark: Millis,
    /// The open windows.
    windows: LiveWindows,
    /// Windows with unemitted changes, by end: they fire once the watermark reaches the end.
    due: DueQueue,
    /// Events not yet added to their windows' state, and the batches they are in.
    pending: Pending,
    /// What changed since the last checkpoint.
    log: ChangeLog,
    scratch: Vec<Window>,
    /// An event's windows and, for those already open, their ids.
    found: Vec<(Window, Option<WindowId>)>,
    /// Keys parked in the quarantine, with their events (`[quarantine]`; none without).
    parking: Option<Parking>,
}

impl std::fmt::Debug for WindowEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowEngine")
            .field("watermark", &self.watermark)
            .field("windows", &self.windows.len())
            .finish()
    }
}

impl WindowEngine {
    /// An engine for `spec` windows with `lateness`, running the operator at `operator_index`
    /// of the chain (its state is kept apart from the others'), labelled `name@version` in
    /// dead letters.
    pub fn new(
        spec: WindowSpec,
        lateness: Millis,
        operator_index: u16,
        operator_label: String,
    ) -> Self {
        WindowEngine {
            spec,
            calls: Calls::new(operator_index, operator_label),
            keeps_inputs: false,
            early: Early::default(),
            watermark: MINUS_INFINITY,
            windows: LiveWindows::new(lateness),
            due: DueQueue::new(),
            pending: Pending::default(),
            log: ChangeLog::new(),
            scratch: Vec::new(),
            found: Vec::new(),
            parking: None,
        }
    }

    /// Parks the keys whose events trap (or, with `errors`, are refused) instead of making
    /// dead letters of them (see [`super::quarantine`]); one of `shards` engines sharing the
    /// bounds.
    pub fn with_quarantine(
        mut self,
        spec: Option<crate::spec::QuarantineSpec>,
        shards: usize,
    ) -> Self {
        if let Some(spec) = spec {
            self.calls.park_failures(spec.errors);
            self.parking = Some(Parking::new(spec, shards));
        }
        self
    }

    /// An engine whose pipeline never checkpoints (memory state, or redb without an interval):
    /// it keeps no change log.
    pub fn without_checkpoints(&mut self) {
        self.log.disable();
    }

    /// The engine of a stage: it keeps each window's inputs by origin, so that an upstream
    /// update replaces its result's contribution and a withdrawal removes it.
    pub fn keeping_inputs(mut self) -> Self {
        self.keeps_inputs = true;
        self
    }

    /// Emits a window's current result every `every` of its events before it closes.
    pub fn with_early_results(mut self, every: Option<u64>) -> Self {
        self.early = Early::new(every);
        self
    }

    /// The index of the operator whose state this engine keeps (its place in the chain).
    pub fn operator_index(&self) -> u16 {
        self.calls.operator_index()
    }

    /// The watermark this engine has seen.
    pub fn watermark(&self) -> Millis {
        self.watermark
    }

    /// Window metadata changed since the last call, for a checkpoint.
    pub fn changes(&mut self) -> Vec<Change> {
        let Some(log) = self.log.take() else {
            return Vec::new();
        };
        let mut changes = Vec::with_capacity(log.touched.len() + log.closed.len());
        for (key, parked) in self
            .parking
            .as_mut()
            .map(Parking::take_touched)
            .unwrap_or_default()
        {
            let state_key = self.calls.state_key(&key, PARKED);
            changes.push(match parked {
                Some(parked) => change_log::parked_row(state_key, parked),
                None => change_log::closed_row(state_key),
            });
        }
        for (key, window) in log.closed {
            changes.push(change_log::closed_row(self.calls.state_key(&key, window)));
        }
        for id in log.touched {
            let Some(live) = self.windows.get(id) else {
                continue; // closed since
            };
            let record = (live.emit).record(live.inputs.iter().map(Input::stored).collect());
            let state_key = self.calls.state_key(&live.key, live.window);
            changes.push(change_log::row(state_key, &record));
            let live = self.windows.get_mut(id).expect("a live window");
            live.stored.checkpointed();
        }
        changes
    }

    /// Restores the watermark and the open windows of a checkpoint (`rows` from the `windows`
    /// table, already limited to this shard's key groups and this operator).
    pub fn restore(&mut self, watermark: Millis, rows: &[TableRow]) -> Result<(), RowError> {
        self.watermark = watermark;
        self.due.may_be_due();
        for row in rows {
            let (key, window, mut record) = change_log::decode_row(row)?;
            if window == PARKED {
                if let (Some(parking), Some(parked)) = (&mut self.parking, record.parked.take()) {
                    parking.restore(key, parked);
                }
                continue;
            }
            let id = self.open(&key, window, record.version);
            let live = self.windows.get_mut(id).expect("just opened");
            live.stored.restored();
            let (emit, inputs) = EmitState::restore(record);
            live.emit = emit;
            live.inputs = (inputs.into_iter())
                .map(|stored| Input::restored(stored, &key))
                .collect();
            // A window with early results only still waits for its result on time.
            if live.emit.fires() {
                self.queue(id);
            }
        }
        for key in self.parking.as_ref().map(Parking::keys).unwrap_or_default() {
            self.windows.hold_key(&key);
        }
        // Restored windows are as the checkpoint has them.
        self.log.forget_touched();
        for live in self.windows.values_mut() {
            live.stored.untouch();
        }
        Ok(())
    }

    /// Open windows.
    pub fn open_windows(&self) -> usize {
        self.windows.len()
    }

    /// Processes one batch: this shard's `events` and everything else of the batch's
    /// `timeline` (watermark advances, early firings, then, if the input ends, the final advance
    /// to plus infinity), in arrival order. All pending adds are flushed before returning.
    pub fn process(
        &mut self,
        events: &[Staged],
        timeline: &Timeline<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        // Everything is flushed: the batches held so far are dropped after.
        let (carried, first) = self.pending.begin(events.len());
        let arrived = Arrived::new(&carried, events, &[], first);
        self.run(&arrived, timeline, cx, out)?;
        self.flush_all(&arrived, cx, out)?;
        self.report_parking(out);
        Ok(())
    }

    /// [`Self::process`], except that with `carry` the windows that do not fire in this batch
    /// keep their events pending into the next ones, so that each window's events cross into
    /// the operator in fewer, larger calls (results are the same: adds split anywhere give the
    /// same state). The engine then holds the batches those events are in, at most
    /// [`super::MAX_HELD_BATCHES`] (the oldest one's windows add their events when one more
    /// would be held). Without `carry` (before a checkpoint, whose state must hold every event before
    /// it, or when the input slows down) everything pending is added, as `process` does; a
    /// stage's engine never carries. Returns the batches the engine no longer holds.
    pub fn process_carrying(
        &mut self,
        share: Share,
        carry: bool,
        timeline: &Timeline<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<Vec<Share>> {
        // Crossings are one per event or none (the router adds both together): a list of
        // another length would pair them with the wrong events.
        debug_assert!(
            share.crossings.is_empty() || share.crossings.len() == share.events.len(),
            "crossings beside a share not one per event"
        );
        let (carried, first) = self.pending.begin(share.events.len());
        let arrived = Arrived::new(&carried, &share.events, &share.crossings, first);
        let ran = self.run(&arrived, timeline, cx, out).and_then(|()| {
            if !carry || self.keeps_inputs {
                return self.flush_all(&arrived, cx, out);
            }
            match pending::keep_from(&carried, first) {
                Some(keep_from) => self.flush_older(keep_from, &arrived, cx, out),
                None => Ok(()),
            }
        });
        // On an error too: pending numbers still point into these batches (the shard stops).
        let mut released = self.pending.hold(carried, share, first);
        ran?;
        let oldest = self.settle_dirty();
        self.pending.release(oldest, &mut released);
        self.report_parking(out);
        Ok(released)
    }

    /// Whether the engine holds events that are not yet added to their windows' state.
    pub fn holds_events(&self) -> bool {
        self.pending.holds_batches()
    }

    /// The current batch's events and timeline, without the final flush.
    fn run(
        &mut self,
        events: &Arrived<'_>,
        timeline: &Timeline<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let mut next = (0, 0, 0);
        let (current, first) = (events.current(), events.first());
        for (index, staged) in current.iter().enumerate() {
            if let Some(ahead) = current.get(index + KEY_PREFETCH_AHEAD) {
                ahead.event.prefetch_key();
            }
            self.catch_up(Some(staged.seq), timeline, &mut next, events, cx, out)?;
            self.accept(first + index, staged, events, cx, out)?;
            if self.early.any() {
                self.fire_early(staged.seq, events, cx, out)?;
            }
            // A stage's events of one arrival index (an upstream update's withdrawal and
            // insertion, or every result of one upstream advance) change its windows at once.
            let next = current.get(index + 1);
            if self.due.due_now()
                && (staged.origin.is_none()
                    || next.is_none_or(|next| next.seq != staged.seq || next.origin.is_none()))
            {
                self.fire(staged.seq, false, events, cx, out)?;
            }
        }
        self.catch_up(None, timeline, &mut next, events, cx, out)?;
        if timeline.end_of_input {
            self.advance(u64::MAX, PLUS_INFINITY, events, cx, out)?;
        }
        Ok(())
    }

    /// Adds every window's pending events.
    fn flush_all(
        &mut self,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let dirty = self.pending.take_dirty();
        for &id in &dirty {
            if let Some(live) = self.windows.get_mut(id) {
                live.waiting.unlist();
            }
        }
        self.flush().flush_pending_all(dirty, events, cx, out)?;
        self.settle_parks(out);
        Ok(())
    }

    /// Adds the pending events of every window that waits with an event numbered before
    /// `keep_from`, in the order the windows first got events.
    fn flush_older(
        &mut self,
        keep_from: usize,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let waiting: Vec<WindowId> = (self.pending.dirty().iter().copied())
            .filter(|&id| {
                (self.windows.get(id))
                    .is_some_and(|live| live.waiting.first().is_some_and(|n| n < keep_from))
            })
            .collect();
        self.flush().flush_pending_all(waiting, events, cx, out)?;
        self.settle_parks(out);
        Ok(())
    }

    /// Drops from `dirty` the windows with nothing left to add (and closed ones). Returns the
    /// number of the oldest event still pending.
    fn settle_dirty(&mut self) -> Option<usize> {
        let windows = &mut self.windows;
        self.pending.retain_dirty(|id, oldest| {
            (windows.get_mut(id)).is_some_and(|live| live.waiting.settle(oldest))
        })
    }

    /// Applies the timeline's advances, early firings and re-drives before arrival index
    /// `before` (all that are left, if `None`), in order; `next` is how far each list has been
    /// applied. At the same index, the advance comes first, then the early firing.
    fn catch_up(
        &mut self,
        before: Option<u64>,
        timeline: &Timeline<'_>,
        next: &mut (usize, usize, usize),
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let due = |at: u64| before.is_none_or(|b| at < b);
        loop {
            let advance = timeline.advances.get(next.0).map(|&(at, _)| (at, 0));
            let early = timeline.early.get(next.1).map(|&at| (at, 1));
            let redrive = timeline.redrives.get(next.2).map(|(at, _)| (*at, 2));
            let first = [advance, early, redrive].into_iter().flatten().min();
            match first.filter(|(at, _)| due(*at)) {
                None => return Ok(()),
                Some((at, 0)) => {
                    self.advance(at, timeline.advances[next.0].1, events, cx, out)?;
                    next.0 += 1;
                }
                Some((at, 1)) => {
                    self.fire_all_early(at, events, cx, out)?;
                    next.1 += 1;
                }
                Some((at, _)) => {
                    let key = timeline.redrives[next.2].1.clone();
                    self.redrive(key.as_ref(), at, events, cx, out)?;
                    next.2 += 1;
                }
            }
        }
    }

    /// Emits the current result of every window that changed since its last emission and is
    /// not due yet (`[emit] early_interval`), as caused by `trigger`.
    fn fire_all_early(
        &mut self,
        trigger: u64,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let mut ids: Vec<(u64, WindowId)> = (self.windows.iter())
            .filter(|(_, w)| {
                w.window.end > self.watermark && (w.emit.changed() || w.waiting.has_events())
            })
            .map(|(id, w)| (w.opened, id))
            .collect();
        ids.sort_unstable();
        for (_, id) in ids {
            self.flush().flush_pending(id, events, cx, out)?;
            self.settle_parks(out);
            if self.is_parked(&self.windows[id].key) {
                continue;
            }
            if self.windows[id].emit.changed() {
                self.flush().emit(id, trigger, Firing::Early, cx, out)?;
            }
        }
        Ok(())
    }

    fn is_late(&self, window: &Window) -> bool {
        self.windows.is_late(window, self.watermark)
    }

    fn late(&self, staged: &Staged, out: &mut EngineOutput) {
        out.late.push(LateEvent {
            seq: staged.seq,
            event: staged.event.clone(),
            watermark: self.watermark,
            reason: format!(
                "late: the watermark ({}) had passed the end of every window of the event plus the allowed lateness of {} ms",
                self.watermark,
                self.windows.lateness()
            ),
        });
    }

    fn accept(
        &mut self,
        number: usize,
        staged: &Staged,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        if staged
            .origin
            .as_ref()
            .is_some_and(|origin| origin.withdrawn)
        {
            self.withdraw(staged);
            return Ok(());
        }
        if self.is_parked(&staged.event.key) && self.park_arrival(staged, out) {
            return Ok(());
        }
        let event = &staged.event;
        let mut windows = std::mem::take(&mut self.scratch);
        if let Err(error) = assign(&self.spec, event.timestamp, &mut windows) {
            self.scratch = windows;
            out.dead_letters.push(DeadLetter {
                line: event.line,
                raw: event.to_json().to_string(),
                reason: error.to_string(),
                cause: DeadCause::Input,
            });
            return Ok(());
        }
        if let WindowSpec::Session { .. } = self.spec {
            let own = windows[0];
            self.scratch = windows;
            return self.accept_session(number, staged, own, events, cx, out);
        }
        // The key's windows are looked up once for all of the event's windows.
        let mut found = std::mem::take(&mut self.found);
        let open = self.windows.of_key(&event.key);
        for window in windows.iter().filter(|window| !self.is_late(window)) {
            let id = open.iter().find(|(w, _)| w == window).map(|&(_, id)| id);
            found.push((*window, id));
        }
        self.scratch = windows;
        if found.is_empty() {
            self.late(staged, out);
        }
        for (window, id) in found.drain(..) {
            let id = id.unwrap_or_else(|| self.open(&event.key, window, 0));
            self.contribute(id, number, staged);
        }
        self.found = found;
        Ok(())
    }

    fn accept_session(
        &mut self,
        number: usize,
        staged: &Staged,
        own: Window,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let key = &staged.event.key;
        let extend_in_place = !self.early.is_on() && !self.keeps_inputs;
        match sessions::plan(self.windows.of_key(key), own, extend_in_place) {
            Plan::Alone if self.is_late(&own) => self.late(staged, out),
            Plan::Alone => {
                let id = self.open(key, own, 0);
                self.contribute(id, number, staged);
            }
            Plan::Join(id) => self.contribute(id, number, staged),
            Plan::Extend(id, merged) => {
                self.extend_session(id, merged, staged, cx, out)?;
                self.contribute(id, number, staged);
            }
            // The event bridges sessions (or extends one with early results, or a stage's):
            // combine their states into the merged window.
            Plan::Merge(merge) => {
                return self.merge_sessions(number, staged, merge, events, cx, out);
            }
        }
        Ok(())
    }

    /// Merges the sessions `merge.touching` into one over `merge.merged`, as the event
    /// `staged` (numbered `number`) bridges them: their pending events are added, their states
    /// merged with the operator's `merge`, those emitted retracted, and the event added to the
    /// merged session. If the operator cannot merge them, they stay as they were and the event
    /// is a dead letter.
    fn merge_sessions(
        &mut self,
        number: usize,
        staged: &Staged,
        merge: Merge,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let Merge { touching, merged } = merge;
        for &id in &touching {
            self.flush().flush_pending(id, events, cx, out)?;
        }
        // The engine's own copy of the key (the sessions', see `own_key`), kept across `absorb`,
        // which closes them and so forgets it.
        let key = self.windows[touching[0]].key.clone();
        let windows = &self.windows;
        let extent = |id: WindowId| (windows[id].window, windows[id].stored.in_store());
        let target = match self.calls.merge(&key, &touching, extent, cx)? {
            Ok(target) => target,
            // The sessions stay as they were; the event that would have merged them is rejected.
            Err(error) => return self.calls.failed(error, &key, &[&staged.event], cx, out),
        };
        let (version, changed, inputs) = self.absorb(&key, &touching, staged.seq, cx, out)?;
        let id = self.open_owned(key.clone(), merged, version);
        self.windows.get_mut(id).expect("just opened").inputs = inputs;
        cx.state
            .put(self.calls.state_key(&key, merged), target.state)?;
        if changed || version > 0 {
            self.mark_changed(id);
        }
        self.contribute(id, number, staged);
        Ok(())
    }

    /// Widens session `id` to `merged` in place, as the event `staged` extends it: what closing
    /// it and opening the wider one would do (an emitted session is retracted, its version goes
    /// on, its state moves to the wider window's key, the checkpoint drops the old window's
    /// row), without flushing its pending events first. They stay pending and are added with
    /// the event's in one call (adds split anywhere give the same state), not one call per
    /// extending event. Not for early results (the count since the last emission decides when
    /// to fire) nor a stage's windows (they may rebuild from their inputs before the pending
    /// events were tried, and a refused one would leave no dead letter): those flush first.
    fn extend_session(
        &mut self,
        id: WindowId,
        merged: Window,
        staged: &Staged,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let old = self.windows.move_to(id, merged);
        let live = self.windows.get_mut(id).expect("a live window");
        let key = live.key.clone();
        let (version, had_results) = (live.emit.version(), live.emit.has_results());
        let retracted = live.emit.moved();
        // Queued again under its new end by the `contribute` that follows.
        self.due.unqueue(&mut live.queued, &key, old, id);
        // Nothing is stored under the new bounds yet.
        let stored = self.log.moved(&mut live.stored, id, &key, old);
        if let Some(value) = retracted {
            let operator_version = cx.operator.version_for(&key);
            let retraction = retraction(&key, old, version, value, staged.seq, operator_version);
            out.emissions.push(retraction);
        }
        // `take` alone does not delete a stored row (redb): the old extent's state is removed,
        // as closing the window did, or its row would stay on disk and in the state's totals.
        let old_key = self.calls.state_key(&key, old);
        let state = calls::take_state(cx, &old_key, stored)?;
        calls::remove_state(cx, &old_key, stored)?;
        cx.state.put(self.calls.state_key(&key, merged), state)?;
        if had_results {
            self.mark_changed(id);
        }
        Ok(())
    }

    /// Closes the sessions `touching`, which a merged one absorbs, retracting those already
    /// emitted (as caused by the event `trigger`). Returns the highest version among them,
    /// whether any had changed since its last emission, and their inputs (a stage's).
    fn absorb(
        &mut self,
        key: &Arc<str>,
        touching: &[WindowId],
        trigger: u64,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<(u64, bool, Inputs)> {
        let changed = touching.iter().any(|&id| self.windows[id].emit.changed());
        let mut version = 0;
        let mut inputs = Inputs::default();
        for &id in touching {
            let mut old = self.close(id);
            inputs.append(&mut old.inputs);
            calls::remove_state(
                cx,
                &self.calls.state_key(key, old.window),
                old.stored.in_store(),
            )?;
            version = version.max(old.emit.version());
            if let Some((old_version, value)) = old.emit.into_retraction() {
                let operator_version = cx.operator.version_for(key);
                let retraction = retraction(
                    key,
                    old.window,
                    old_version,
                    value,
                    trigger,
                    operator_version,
                );
                out.emissions.push(retraction);
            }
        }
        Ok((version, changed, inputs))
    }

    fn open(&mut self, key: &str, window: Window, version: u64) -> WindowId {
        let key = self.windows.own_key(key);
        self.open_owned(key, window, version)
    }

    /// [`Self::open`] with the engine's own copy of the key (see [`LiveWindows::own_key`]).
    fn open_owned(&mut self, key: Arc<str>, window: Window, version: u64) -> WindowId {
        let id = self.windows.open(key, window, version);
        let live = self.windows.get_mut(id).expect("just opened");
        self.log.touch(&mut live.stored, id);
        id
    }

    fn close(&mut self, id: WindowId) -> LiveWindow {
        let mut live = self.windows.close(id);
        self.due
            .unqueue(&mut live.queued, &live.key, live.window, id);
        // A closed window's id may stay in `dirty` and in the change log's `touched`: both
        // skip ids that are gone (an id names its slot's generation, see `Slab`).
        self.log.closed(&live.stored, &live.key, live.window);
        live
    }

    /// Adds the event numbered `number` to window `id`. A stage's event also becomes one of
    /// the window's inputs, replacing an earlier one of the same origin (the window's state is
    /// then rebuilt).
    fn contribute(&mut self, id: WindowId, number: usize, staged: &Staged) {
        // The window is found once: this runs for every event.
        let live = self.windows.get_mut(id).expect("a live window");
        if let Some(origin) = &staged.origin {
            let replaced = live.inputs.put(Input {
                origin: (**origin).clone(),
                event: staged.event.clone(),
            });
            live.waiting.rebuild_if(replaced);
            self.log.touch(&mut live.stored, id);
        }
        let waiting = self.pending.add(&mut live.waiting, id, number);
        self.early.count(&live.emit, waiting, id);
        if !live.queued.is_set() {
            (self.due).queue(&mut live.queued, &live.key, live.window, id, self.watermark);
        }
    }

    /// Removes a withdrawn upstream result from every window of its key that holds it; each
    /// such window is rebuilt from the inputs that remain and fires again.
    fn withdraw(&mut self, staged: &Staged) {
        let origin = staged
            .origin
            .as_deref()
            .expect("a withdrawal has an origin");
        let mut hit = Vec::new();
        let pending = &mut self.pending;
        self.windows.for_key_mut(&staged.event.key, |id, live| {
            if live.inputs.remove(origin) {
                live.waiting.must_rebuild();
                pending.list(&mut live.waiting, id);
                hit.push(id);
            }
        });
        for id in hit {
            self.mark_changed(id);
        }
    }

    fn mark_changed(&mut self, id: WindowId) {
        let live = self.windows.get_mut(id).expect("a live window");
        live.emit.set_changed();
        self.log.touch(&mut live.stored, id);
        self.queue(id);
    }

    fn queue(&mut self, id: WindowId) {
        let live = self.windows.get_mut(id).expect("a live window");
        (self.due).queue(&mut live.queued, &live.key, live.window, id, self.watermark);
    }

    fn advance(
        &mut self,
        seq: u64,
        watermark: Millis,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        self.watermark = self.watermark.max(watermark);
        self.expire_parked(out);
        self.fire(seq, true, events, cx, out)?;
        while let Some(id) = self.windows.first_expired(self.watermark) {
            let live = self.close(id);
            calls::remove_state(
                cx,
                &self.calls.state_key(&live.key, live.window),
                live.stored.in_store(),
            )?;
        }
        Ok(())
    }

    /// Emits every queued window whose end the watermark has reached. In an `advance`, those
    /// that expire with it are closed right after (their state is removed then).
    fn fire(
        &mut self,
        trigger: u64,
        advance: bool,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let mut group = Vec::new();
        while let Some(id) = self.due.pop(self.watermark) {
            let live = self.windows.get_mut(id).expect("a due window is live");
            live.queued.popped();
            if self.parking.as_ref().is_some_and(|p| p.holds(&live.key)) {
                continue; // held: queued again when its key is re-driven
            }
            let window = live.window;
            if self.keeps_inputs {
                // A stage's window may have no inputs left, and then no state to finish.
                self.flush().flush_pending(id, events, cx, out)?;
                if self.windows[id].emit.fires() {
                    self.flush().emit(id, trigger, Firing::OnTime, cx, out)?;
                }
            } else if !cx.operator.carries_windows() {
                let closing = advance && self.is_late(&window);
                self.flush()
                    .flush_and_emit(id, trigger, closing, events, cx, out)?;
                self.settle_parks(out);
            } else {
                group.push((id, advance && self.is_late(&window)));
                if group.len() == MAX_WINDOWS_PER_CALL {
                    self.flush().flush_and_emit_all(
                        std::mem::take(&mut group),
                        trigger,
                        events,
                        cx,
                        out,
                    )?;
                    self.settle_parks(out);
                }
            }
        }
        if !group.is_empty() {
            self.flush()
                .flush_and_emit_all(group, trigger, events, cx, out)?;
            self.settle_parks(out);
        }
        self.due.settle(self.watermark);
        Ok(())
    }

    /// Emits the current result of every window that reached its count of events for an
    /// early result (`[emit] mode = "early"`) and is not due yet.
    fn fire_early(
        &mut self,
        trigger: u64,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        for id in self.early.take() {
            let Some(live) = self.windows.get(id) else {
                continue;
            };
            if live.window.end <= self.watermark {
                continue; // due: it fires on time instead
            }
            self.flush().flush_pending(id, events, cx, out)?;
            self.settle_parks(out);
            if self.is_parked(&self.windows[id].key) {
                continue;
            }
            if self.windows[id].emit.changed() {
                self.flush().emit(id, trigger, Firing::Early, cx, out)?;
            }
        }
        Ok(())
    }

    /// Whether `key` is parked in the quarantine.
    #[inline]
    fn is_parked(&self, key: &str) -> bool {
        self.parking.as_ref().is_some_and(|p| p.holds(key))
    }

    /// Keeps an event of a parked key, judged late at the current watermark as on arrival
    /// (a late one is late as ever; one the quarantine cannot take is a dead letter). Returns
    /// false for an event with no window at all, which goes the usual way.
    fn park_arrival(&mut self, staged: &Staged, out: &mut EngineOutput) -> bool {
        let event = &staged.event;
        let mut windows = std::mem::take(&mut self.scratch);
        let assigned = assign(&self.spec, event.timestamp, &mut windows).is_ok();
        let on_time = windows.iter().any(|window| !self.is_late(window));
        self.scratch = windows;
        if !assigned {
            return false;
        }
        if !on_time {
            self.late(staged, out);
            return true;
        }
        let parking = self.parking.as_mut().expect("a parked key");
        let key = self.windows.own_key(&event.key);
        let parked = ParkedEvent {
            event: event.clone(),
            at: self.watermark,
        };
        if let Err(Full(reason)) = parking.keep(&key, parked) {
            out.dead_letters.push(full_letter(event, reason));
        }
        true
    }

    /// Parks the keys whose events failed in the calls just made (`out.parks`): each keeps
    /// those events (judged on time, as they were accepted) and its windows are held.
    fn settle_parks(&mut self, out: &mut EngineOutput) {
        if out.parks.is_empty() {
            return;
        }
        let Some(parking) = self.parking.as_mut() else {
            out.parks.clear();
            return;
        };
        let mut newly = Vec::new();
        for park in std::mem::take(&mut out.parks) {
            if parking.park(&park.key, self.watermark, &park.reason) {
                newly.push(park.key.clone());
            }
            for event in park.events {
                let parked = ParkedEvent {
                    event,
                    at: ACCEPTED,
                };
                if let Err(Full(reason)) = parking.keep(&park.key, parked.clone()) {
                    out.dead_letters.push(full_letter(&parked.event, reason));
                }
            }
        }
        for key in newly {
            tracing::info!(key = %key, "a key's events failed: parked in the quarantine");
            self.windows.hold_key(&key);
        }
    }

    /// The parked keys that changed since last asked (all of them after a restore).
    pub fn parked_keys(&mut self) -> Vec<(Arc<str>, Option<super::quarantine::ParkedSummary>)> {
        self.parking
            .as_mut()
            .map(Parking::take_reported)
            .unwrap_or_default()
    }

    /// What the status should know of the parked keys that changed.
    fn report_parking(&mut self, out: &mut EngineOutput) {
        if let Some(parking) = self.parking.as_mut() {
            out.quarantined.extend(parking.take_reported());
        }
    }

    /// Lets parked `key`'s windows go on: they expire again, and those with a result to emit
    /// are queued (they fire at once if the watermark passed them).
    fn release_windows(&mut self, key: &str) {
        for id in self.windows.release_key(key) {
            if self.windows[id].emit.fires() {
                self.queue(id);
            }
        }
    }

    /// Re-drives `key` (`None`: every parked key): its parked events go, in order, through the
    /// version now serving it, each judged late at the watermark it arrived at; then its windows
    /// fire and close as the watermark says. A key the version fails again is parked again
    /// with the events left; one not parked is left alone (a second re-drive does nothing).
    fn redrive(
        &mut self,
        key: Option<&Arc<str>>,
        trigger: u64,
        events: &Arrived<'_>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        let Some(parking) = self.parking.as_ref() else {
            return Ok(());
        };
        let keys = match key {
            Some(key) if parking.holds(key) => vec![key.clone()],
            Some(_) => return Ok(()),
            None => parking.keys(),
        };
        for key in keys {
            let parking = self.parking.as_mut().expect("checked");
            let Some((key, parked)) = parking.release(&key) else {
                continue;
            };
            tracing::info!(key = %key, events = parked.events.len(), "re-driving a parked key");
            self.release_windows(&key);
            self.add_parked(&key, parked.events, cx, out)?;
        }
        self.advance(trigger, self.watermark, events, cx, out)
    }

    /// Adds re-driven `events` of `key` to their windows, one call per event and window.
    fn add_parked(
        &mut self,
        key: &Arc<str>,
        parked: Vec<ParkedEvent>,
        cx: &mut Context<'_>,
        out: &mut EngineOutput,
    ) -> Result<()> {
        for parked in parked {
            if self.is_parked(key) {
                // Parked again by an earlier one: the rest wait again, in order.
                let parking = self.parking.as_mut().expect("parked");
                if let Err(Full(reason)) = parking.keep(key, parked.clone()) {
                    out.dead_letters.push(full_letter(&parked.event, reason));
                }
                continue;
            }
            let mut windows = Vec::new();
            if assign(&self.spec, parked.event.timestamp, &mut windows).is_err() {
                continue; // cannot be: it was assigned when it arrived
            }
            windows.retain(|window| !self.windows.is_late(window, parked.at));
            for window in windows {
                let open = self.windows.of_key(key).iter().find(|(w, _)| *w == window);
                let id = match open {
                    Some(&(_, id)) => id,
                    None => self.open(key, window, 0),
                };
                let stored = self.windows[id].stored.in_store();
                let (state_key, mut scope) = self.calls.take(cx, key, window, stored)?;
                let failed = self.calls.add(&mut scope, &[&parked.event], cx, out)?;
                cx.state.put(state_key, scope.state)?;
                let live = self.windows.get_mut(id).expect("a live window");
                if live.emit.took(1 - failed.len(), false) {
                    self.log.touch(&mut live.stored, id);
                }
                self.queue(id);
                self.settle_parks(out);
                if self.is_parked(key) {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Gives up the keys parked for longer than the quarantine's TTL: their events become
    /// dead letters, and their windows go on with what they hold.
    fn expire_parked(&mut self, out: &mut EngineOutput) {
        let Some(parking) = self.parking.as_mut() else {
            return;
        };
        let ttl = parking.ttl();
        for key in parking.expired(self.watermark) {
            let Some((key, parked)) = parking.release(&key) else {
                continue;
            };
            let reason = format!(
                "parked in the quarantine for longer than its ttl ({ttl} ms of event time) and \
                 never re-driven; parked for: {}",
                parked.reason
            );
            for event in &parked.events {
                out.dead_letters
                    .push(full_letter(&event.event, reason.clone()));
            }
            tracing::warn!(key = %key, events = parked.events.len(), "a parked key expired");
            for id in self.windows.release_key(&key) {
                let live = self.windows.get_mut(id).expect("a live window");
                if live.emit.fires() {
                    (self.due).queue(&mut live.queued, &live.key, live.window, id, self.watermark);
                }
            }
        }
    }

    /// The parts that adding and finishing windows work with, lent to them.
    #[inline]
    fn flush(&mut self) -> Flush<'_> {
        Flush {
            windows: &mut self.windows,
            pending: &mut self.pending,
            log: &mut self.log,
            calls: &self.calls,
            keeps_inputs: self.keeps_inputs,
        }
    }
}

/// A dead letter for a parked (or unparkable) event, with the reason.
fn full_letter(event: &crate::event::Event, reason: String) -> DeadLetter {
    DeadLetter {
        line: event.line,
        raw: event.to_json().to_string(),
        reason,
        cause: DeadCause::Trapped,
    }
}

#[cfg(test)]
mod tests;
