//! Emission: what a window has emitted so far and the rule for what it emits next.
//!
//! Each live window carries an [`EmitState`] (its version, last output, whether it changed
//! since its last emission, its early results and the events added since it emitted), which
//! only this module changes. [`EmitState::publish`] is the emission rule: early results come
//! first, then the result on time, then updates; an output equal to the last one is not
//! emitted again (except the first on time after early ones, which says the window closed); an
//! empty output withdraws the last one; a closing window keeps no output. [`Early`] counts
//! windows' events towards early results (`[emit] mode = "early"`).
//!
//! The engine depends on this module; it depends on `output` (the emission types),
//! `change_log` (the record a checkpoint stores), `inputs`, `slab`, `time` and `value`.

use std::sync::Arc;

use super::change_log::WindowRecord;
use super::inputs::StoredInput;
use super::output::{Emission, EmissionKind};
use super::slab::WindowId;
use crate::time::Window;
use crate::value::Fields;

/// Which result of a window an emission is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Firing {
    /// Before the watermark reached the window's end (`[emit]`).
    Early,
    /// On time, or an update after it: its output is kept, for a later update to replace
    /// (the window may stay open for late events).
    OnTime,
    /// On time, and the window closes right after (its lateness has passed): its output is
    /// not kept for a later update to replace, as none can come.
    Closing,
}

impl Firing {
    /// On time: [`Firing::Closing`] if the window closes right after.
    pub(super) fn on_time(closing: bool) -> Firing {
        match closing {
            true => Firing::Closing,
            false => Firing::OnTime,
        }
    }
}

/// What a live window has emitted so far.
#[derive(Debug)]
pub(super) struct EmitState {
    /// Emissions so far (0: never fired).
    version: u64,
    /// The last emitted output, for retraction.
    last_output: Option<Fields>,
    /// Whether the state changed since the last emission.
    changed: bool,
    /// Early results emitted (they come first: the window's result is version `early + 1`).
    early: u64,
    /// Events added since the last emission (for early results).
    since_emit: u64,
}

/// An emission decided by [`EmitState::publish`], before it is told its window and cause.
#[derive(Debug)]
pub(super) struct Emitted {
    kind: EmissionKind,
    version: u64,
    value: Fields,
    replaces: Option<Fields>,
}

impl Emitted {
    /// The emission of `key`'s `window`, as caused by `trigger`.
    pub(super) fn into_emission(
        self,
        trigger: u64,
        key: Arc<str>,
        window: Window,
        operator_version: Option<Arc<str>>,
    ) -> Emission {
        Emission {
            operator_version,
            trigger,
            key,
            window,
            kind: self.kind,
            version: self.version,
            value: self.value,
            replaces: self.replaces,
        }
    }
}

impl EmitState {
    /// A window just opened, its versions going on from `version` (a merged session's).
    pub(super) fn opened(version: u64) -> Self {
        EmitState {
            version,
            last_output: None,
            changed: false,
            early: 0,
            since_emit: 0,
        }
    }

    /// Whether the window has a result to emit on time: it changed since its last emission,
    /// or it has early results only.
    #[inline]
    pub(super) fn fires(&self) -> bool {
        self.changed || (self.early > 0 && self.version == self.early)
    }

    /// Whether the state changed since the last emission.
    #[inline]
    pub(super) fn changed(&self) -> bool {
        self.changed
    }

    /// Emissions so far.
    pub(super) fn version(&self) -> u64 {
        self.version
    }

    /// Whether the window has anything to emit or emitted anything.
    pub(super) fn has_results(&self) -> bool {
        self.changed || self.version > 0
    }

    /// The window's result changed without an add (a withdrawal, a merge).
    pub(super) fn set_changed(&mut self) {
        self.changed = true;
    }

    /// The window's state took `added` events (not counted towards early results if it was
    /// rebuilt from its inputs). Returns whether it changed.
    pub(super) fn took(&mut self, added: usize, rebuild: bool) -> bool {
        if !rebuild {
            self.since_emit += added as u64;
        }
        if rebuild || added > 0 {
            self.changed = true;
        }
        rebuild || added > 0
    }

    /// The window's state took all of its `added` events, in a call carrying many windows.
    pub(super) fn took_all(&mut self, added: usize) {
        self.since_emit += added as u64;
        self.changed = true;
    }

    /// The window moved to new bounds (a session widened in place): the output it emitted, if
    /// any, is to be retracted; its count of early results starts again.
    pub(super) fn moved(&mut self) -> Option<Fields> {
        let retracted = self.last_output.take().filter(|_| self.version > 0);
        (self.early, self.since_emit) = (0, 0);
        retracted
    }

    /// The window closed into a merged session: its version and emitted output, to retract,
    /// if it emitted one.
    pub(super) fn into_retraction(self) -> Option<(u64, Fields)> {
        match self.version > 0 {
            true => self.last_output.map(|value| (self.version, value)),
            false => None,
        }
    }

    /// Takes `value`, the window's output from `finish` (see [`Firing`]): what to emit, if
    /// anything (see the module doc).
    pub(super) fn publish(&mut self, value: Fields, firing: Firing) -> Option<Emitted> {
        self.changed = false;
        self.since_emit = 0;
        // Unchanged since it was last emitted: not emitted again, unless it is the window's
        // result on time after early ones (which says the window closed).
        let early = firing == Firing::Early;
        let first_on_time = !early && self.early > 0 && self.version == self.early;
        if self.last_output.as_ref() == Some(&value) && !first_on_time {
            return None;
        }
        if value.is_empty() {
            // An empty output is no result (a join window with one side only, a stage's window
            // whose inputs were all withdrawn): a result emitted before is withdrawn.
            let withdrawn = self.last_output.take()?;
            return Some(Emitted {
                kind: EmissionKind::Retract,
                version: self.version,
                value: withdrawn,
                replaces: None,
            });
        }
        // Versions continue across early results, a session merge and a withdrawal: the
        // first emission on time is the window's result, every later one an update.
        let kind = if early {
            self.early += 1;
            EmissionKind::Early
        } else if self.version == self.early {
            EmissionKind::Result
        } else {
            EmissionKind::Update
        };
        self.version += 1;
        let replaces = match firing {
            // Closed right after: no later result replaces this one.
            Firing::Closing => self.last_output.take(),
            _ => self.last_output.replace(value.clone()),
        };
        Some(Emitted {
            kind,
            version: self.version,
            value,
            replaces,
        })
    }

    /// The window's metadata as a checkpoint stores it, with a stage window's `inputs`.
    pub(super) fn record(&self, inputs: Vec<StoredInput>) -> WindowRecord {
        WindowRecord {
            version: self.version,
            changed: self.changed,
            last_output: self.last_output.clone(),
            early: self.early,
            since_emit: self.since_emit,
            inputs,
            parked: None,
        }
    }

    /// A window's state as a checkpoint's `record` has it, and its stored inputs.
    pub(super) fn restore(record: WindowRecord) -> (EmitState, Vec<StoredInput>) {
        let state = EmitState {
            version: record.version,
            last_output: record.last_output,
            changed: record.changed,
            early: record.early,
            since_emit: record.since_emit,
        };
        (state, record.inputs)
    }
}

/// Early results every so many events of a window: which windows reached their count.
#[derive(Debug, Default)]
pub(super) struct Early {
    /// Early results every this many events of a window.
    every: Option<u64>,
    /// Windows that reached their count for an early result in this event.
    reached: Vec<WindowId>,
}

impl Early {
    /// Early results every `every` events of a window, or none.
    pub(super) fn new(every: Option<u64>) -> Self {
        Early {
            every,
            reached: Vec::new(),
        }
    }

    /// Whether windows emit early results by count.
    pub(super) fn is_on(&self) -> bool {
        self.every.is_some()
    }

    /// Counts window `id`, with `emit` and `waiting` events not yet added, towards its early
    /// result.
    #[inline]
    pub(super) fn count(&mut self, emit: &EmitState, waiting: usize, id: WindowId) {
        if let Some(every) = self.every
            && emit.since_emit + waiting as u64 >= every
        {
            self.reached.push(id);
        }
    }

    /// Whether a window reached its count.
    #[inline]
    pub(super) fn any(&self) -> bool {
        !self.reached.is_empty()
    }

    /// The windows that reached their count, in the order they did.
    pub(super) fn take(&mut self) -> Vec<WindowId> {
        std::mem::take(&mut self.reached)
    }
}

/// The withdrawal of `window`'s emitted result `value` (its `version`), as caused by `trigger`
/// (made by `operator_version`): a session that an event widened or merged into another no
/// longer stands.
pub(super) fn retraction(
    key: &Arc<str>,
    window: Window,
    version: u64,
    value: Fields,
    trigger: u64,
    operator_version: Option<Arc<str>>,
) -> Emission {
    Emission {
        trigger,
        key: key.clone(),
        window,
        kind: EmissionKind::Retract,
        version,
        value,
        replaces: None,
        operator_version,
    }
}
