//! [`Pending`]: events accepted into windows but not yet added to their state. Adds are
//! buffered per window until the window fires or the batch ends, or, while full batches follow
//! each other, until the engine would hold more than [`MAX_HELD_BATCHES`] batches: the batches
//! those events are in are carried here ([`Carried`], numbered from the engine's first event).
//!
//! Each live window carries a [`Waiting`] (its pending numbers, whether its state must be
//! rebuilt from its inputs, whether it is listed as dirty), which only this module changes. A
//! window with events or a rebuild waiting is listed in `dirty` once while it waits (`dirty`
//! may keep ids of closed windows: every reader skips them); a window's numbers go up, and each
//! refers to a held batch or the current one.
//!
//! The engine depends on this module; it depends on `arrived` (the carried batches), `slab`
//! and `event` only.

use super::arrived::Carried;
use super::slab::WindowId;
use crate::event::Share;

/// The most batches an engine holds, after a batch, for windows that wait to add their events
/// (that batch included; while the next one is processed, it holds one more): the memory
/// carrying costs is at most this many batches' events, about what a shard's queue holds.
pub const MAX_HELD_BATCHES: usize = 4;

/// The most emptied lists of pending events kept for reuse, and the largest kept (larger ones
/// are freed: a list is reused by any window, most get a few events).
const MAX_SPARE: usize = 4_096;
const MAX_SPARE_CAPACITY: usize = 64;

/// What a live window waits to add to its state.
#[derive(Debug, Default)]
pub(super) struct Waiting {
    /// Numbers (see [`super::arrived::Arrived`]) of events waiting to be added, in arrival
    /// order.
    events: Vec<usize>,
    /// Whether an input was replaced or withdrawn, so the state must be rebuilt from the
    /// window's inputs (a stage's window).
    rebuild: bool,
    /// Whether the window is listed in `dirty` (at most once).
    listed: bool,
}

impl Waiting {
    /// Whether nothing waits: no events, no rebuild.
    #[inline]
    pub(super) fn is_idle(&self) -> bool {
        self.events.is_empty() && !self.rebuild
    }

    /// Whether events wait to be added.
    #[inline]
    pub(super) fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Whether the state must be rebuilt from the window's inputs.
    pub(super) fn rebuilds(&self) -> bool {
        self.rebuild
    }

    /// The number of the oldest event waiting.
    pub(super) fn first(&self) -> Option<usize> {
        self.events.first().copied()
    }

    /// The state must be rebuilt if an input was `replaced`.
    #[inline]
    pub(super) fn rebuild_if(&mut self, replaced: bool) {
        self.rebuild |= replaced;
    }

    /// The state must be rebuilt (an input was withdrawn).
    pub(super) fn must_rebuild(&mut self) {
        self.rebuild = true;
    }

    /// Takes what waits: the events' numbers, and whether to rebuild.
    pub(super) fn take(&mut self) -> (Vec<usize>, bool) {
        (
            std::mem::take(&mut self.events),
            std::mem::take(&mut self.rebuild),
        )
    }

    /// Takes the events' numbers, unless the state must be rebuilt (then none: the rebuild
    /// takes them all at once).
    pub(super) fn take_unless_rebuild(&mut self) -> Vec<usize> {
        match self.rebuild {
            true => Vec::new(),
            false => std::mem::take(&mut self.events),
        }
    }

    /// Puts back events taken with [`Waiting::take_unless_rebuild`] and not added.
    pub(super) fn put_back(&mut self, events: Vec<usize>) {
        self.events = events;
    }

    /// No longer listed in `dirty` (which was taken whole).
    pub(super) fn unlist(&mut self) {
        self.listed = false;
    }

    /// Whether the window stays listed in `dirty` (something still waits); lowers `oldest`
    /// to its oldest event's number.
    pub(super) fn settle(&mut self, oldest: &mut Option<usize>) -> bool {
        if let Some(&number) = self.events.first() {
            *oldest = Some(oldest.map_or(number, |oldest| oldest.min(number)));
        }
        self.listed = !self.events.is_empty() || self.rebuild;
        self.listed
    }
}

/// The engine's pending events: the windows that wait, and the batches they wait in.
#[derive(Debug, Default)]
pub(super) struct Pending {
    /// Windows with pending events (and some whose events were added since: see `listed`).
    dirty: Vec<WindowId>,
    /// Emptied lists of pending events, for windows that get events next.
    spare: Vec<Vec<usize>>,
    /// Batches carried over because windows still wait to add their events.
    carried: Carried,
    /// Events numbered so far (the next batch's first number).
    received: usize,
}

impl Pending {
    /// Starts a batch of `events` events: the batches held so far (to be given back with
    /// [`Pending::hold`], or dropped if everything is flushed), and the batch's first number.
    pub(super) fn begin(&mut self, events: usize) -> (Carried, usize) {
        let carried = std::mem::take(&mut self.carried);
        let first = self.received;
        self.received += events;
        (carried, first)
    }

    /// Holds `carried` again, with `share` (numbered from `first`) after it unless it is empty
    /// (all of it another shard's keys: nothing to hold). Returns the batches not held.
    pub(super) fn hold(&mut self, mut carried: Carried, share: Share, first: usize) -> Vec<Share> {
        let mut released = Vec::new();
        match share.events.is_empty() {
            true => released.push(share),
            false => carried.push_back((first, share)),
        }
        self.carried = carried;
        released
    }

    /// Releases into `released` the oldest held batches with no event pending, that is, all
    /// of them before the one of event `oldest` (all of them if none is pending).
    pub(super) fn release(&mut self, oldest: Option<usize>, released: &mut Vec<Share>) {
        while let Some((number, batch)) = self.carried.front()
            && oldest.is_none_or(|oldest| number + batch.events.len() <= oldest)
        {
            released.extend(self.carried.pop_front().map(|(_, batch)| batch));
        }
    }

    /// Whether batches are held (events not yet added to their windows' state).
    pub(super) fn holds_batches(&self) -> bool {
        !self.carried.is_empty()
    }

    /// How many batches are held.
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        self.carried.len()
    }

    /// Adds event `number` to window `id`'s waiting events (listing it in `dirty`). Returns
    /// how many events it now waits with.
    #[inline]
    pub(super) fn add(&mut self, waiting: &mut Waiting, id: WindowId, number: usize) -> usize {
        self.list(waiting, id);
        if waiting.events.capacity() == 0 {
            waiting.events = self.spare.pop().unwrap_or_default();
        }
        waiting.events.push(number);
        waiting.events.len()
    }

    /// Lists window `id` in `dirty`, unless it is already.
    #[inline]
    pub(super) fn list(&mut self, waiting: &mut Waiting, id: WindowId) {
        if !waiting.listed {
            waiting.listed = true;
            self.dirty.push(id);
        }
    }

    /// Keeps an emptied list of pending events: its allocation serves the next window that
    /// gets events.
    pub(super) fn recycle(&mut self, mut events: Vec<usize>) {
        events.clear();
        if self.spare.len() < MAX_SPARE && events.capacity() <= MAX_SPARE_CAPACITY {
            self.spare.push(events);
        }
    }

    /// Every listed window, taken (each to be [`Waiting::unlist`]ed).
    pub(super) fn take_dirty(&mut self) -> Vec<WindowId> {
        std::mem::take(&mut self.dirty)
    }

    /// The listed windows, in the order they were listed.
    pub(super) fn dirty(&self) -> &[WindowId] {
        &self.dirty
    }

    /// Keeps listed the windows for which `keep` (given the oldest pending number so far, to
    /// lower: see [`Waiting::settle`]) says so. Returns the number of the oldest event still
    /// pending.
    pub(super) fn retain_dirty(
        &mut self,
        mut keep: impl FnMut(WindowId, &mut Option<usize>) -> bool,
    ) -> Option<usize> {
        let mut oldest = None;
        self.dirty.retain(|&id| keep(id, &mut oldest));
        oldest
    }
}

/// The number from which a batch's windows keep their events pending: with `carried` and the
/// batch (whose first event is `first`) held, the batches past [`MAX_HELD_BATCHES`] (the
/// oldest) must be added. `None` if none is past it.
pub(super) fn keep_from(carried: &Carried, first: usize) -> Option<usize> {
    // The batches past the limit, oldest first (with this one, `carried.len() + 1`).
    let over = (carried.len() + 1).saturating_sub(MAX_HELD_BATCHES);
    if over == 0 {
        return None;
    }
    Some(carried.get(over).map_or(first, |(number, _)| *number))
}
