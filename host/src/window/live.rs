//! [`LiveWindows`]: one engine's open windows. Each is one [`LiveWindow`] in one slab slot (the
//! hot path finds a window once per event and window), holding the window's identity (key,
//! extent, when it opened) and one sub-state per part of the engine, each changed only by its
//! own module: [`Waiting`] (pending.rs), [`Queued`] (due.rs), [`EmitState`] (emission.rs),
//! [`Stored`] (change_log.rs) and a stage window's [`Inputs`] (inputs.rs).
//!
//! Invariants kept here: (a) each live window is in `by_key[key]` exactly once, with its current
//! extent (sessions are merged from those extents); (b) each is in `expiry` exactly once, at
//! `end + lateness`, unless its key is held (parked in the quarantine: then in none); (c) a key is in `by_key` if and only if it has a live window; (d) all
//! windows of a key share one `Arc<str>` ([`LiveWindows::own_key`]); (e) `opened` only grows,
//! which fixes the order of early firings by interval.
//!
//! The engine depends on this module; it depends on the sub-states' modules (`pending`, `due`,
//! `emission`, `change_log` and `inputs`), `slab`, `key_map` and `time`. No part depends on it.

use std::collections::BTreeSet;
use std::ops::Index;
use std::sync::Arc;

use super::change_log::Stored;
use super::due::Queued;
use super::emission::EmitState;
use super::inputs::Inputs;
use super::key_map::KeyMap;
use super::pending::Waiting;
use super::slab::{Slab, WindowId};
use crate::time::{Millis, Window};

/// An open window. Its identity (`opened`, `key`, `window`) is written only in this module;
/// it is made of plain fields (not getters) so that `&live.key` can be borrowed beside
/// `&mut live.queued` and the other sub-states.
#[derive(Debug)]
pub(super) struct LiveWindow {
    /// Windows opened before it (ids are not in that order).
    pub(super) opened: u64,
    pub(super) key: Arc<str>,
    pub(super) window: Window,
    /// What it waits to add to its state.
    pub(super) waiting: Waiting,
    /// Whether the window waits in the due queue.
    pub(super) queued: Queued,
    /// What it emitted so far.
    pub(super) emit: EmitState,
    /// A stage's window: its inputs, by origin, in the order their current versions arrived.
    pub(super) inputs: Inputs,
    /// Whether it is in the change log, and whether it may be in the store.
    pub(super) stored: Stored,
}

/// One engine's open windows, by id, by key and by expiry.
#[derive(Debug)]
pub(super) struct LiveWindows {
    windows: Slab<LiveWindow>,
    /// Each key's open windows, with their extents (found without looking each one up).
    by_key: KeyMap<Vec<(Window, WindowId)>>,
    /// Windows by `end + lateness`: their state is dropped once the watermark reaches it.
    expiry: BTreeSet<(Millis, WindowId)>,
    /// Windows opened so far.
    opened: u64,
    /// How long after its end a window stays open for late events.
    lateness: Millis,
}

impl LiveWindows {
    /// No windows; each will stay open `lateness` after its end.
    pub(super) fn new(lateness: Millis) -> Self {
        LiveWindows {
            windows: Slab::default(),
            by_key: KeyMap::default(),
            expiry: BTreeSet::new(),
            opened: 0,
            lateness,
        }
    }

    /// How long after its end a window stays open for late events.
    pub(super) fn lateness(&self) -> Millis {
        self.lateness
    }

    /// Whether `window` is too late for an event at `watermark` (its lateness has passed).
    #[inline]
    pub(super) fn is_late(&self, window: &Window, watermark: Millis) -> bool {
        watermark >= window.end.saturating_add(self.lateness)
    }

    /// `key`'s open windows with their extents.
    #[inline]
    pub(super) fn of_key(&self, key: &str) -> &[(Window, WindowId)] {
        self.by_key.get(key).map_or(&[][..], Vec::as_slice)
    }

    /// The engine's own copy of `key`: the one its open windows share, or a new one made on
    /// this thread (the shard's; for windows restored from a checkpoint, the thread that
    /// builds the shards). When every key was on the heap, an event's key was made on the
    /// router's thread, in a cache line beside keys the router went on making and freeing;
    /// kept as the windows' key and looked up for every event of that key, it moved between
    /// the cores each time (`memcmp` in `accept` waited on it: 8 % of the count-sum's shard
    /// thread). A key longer than 24 bytes is still made on the router's thread, on the heap.
    pub(super) fn own_key(&self, key: &str) -> Arc<str> {
        match self.by_key.get_key_value(key) {
            Some((own, _)) => own.clone(),
            None => Arc::from(key),
        }
    }

    /// Opens `window` of `key` (the engine's own copy, see [`Self::own_key`]), its versions
    /// going on from `version`.
    pub(super) fn open(&mut self, key: Arc<str>, window: Window, version: u64) -> WindowId {
        let opened = self.opened;
        self.opened += 1;
        let id = self.windows.insert_with(|_| LiveWindow {
            opened,
            key: key.clone(),
            window,
            emit: EmitState::opened(version),
            waiting: Waiting::default(),
            queued: Queued::default(),
            inputs: Inputs::default(),
            stored: Stored::default(),
        });
        self.by_key.get_or_default(key).push((window, id));
        self.expiry
            .insert((window.end.saturating_add(self.lateness), id));
        id
    }

    /// Closes window `id`: it is no longer found by id, key or expiry. Returns it, for the
    /// parts that hold it elsewhere (the due queue, the change log) to forget it.
    pub(super) fn close(&mut self, id: WindowId) -> LiveWindow {
        let live = self.windows.remove(id).expect("closing a live window");
        if let Some(open) = self.by_key.get_mut(&live.key) {
            open.retain(|&(_, other)| other != id);
            if open.is_empty() {
                self.by_key.remove(&live.key);
            }
        }
        self.expiry
            .remove(&(live.window.end.saturating_add(self.lateness), id));
        live
    }

    /// Moves window `id` to the wider extent `merged` (a session widened in place), by key
    /// and by expiry too. Returns its old extent.
    pub(super) fn move_to(&mut self, id: WindowId, merged: Window) -> Window {
        let live = self.windows.get_mut(id).expect("a live window");
        let old = std::mem::replace(&mut live.window, merged);
        let open = self.by_key.get_mut(&live.key).expect("a live window's key");
        let entry = open.iter_mut().find(|(_, other)| *other == id);
        entry.expect("a live window of its key").0 = merged;
        self.expiry
            .remove(&(old.end.saturating_add(self.lateness), id));
        self.expiry
            .insert((merged.end.saturating_add(self.lateness), id));
        old
    }

    /// Calls `f` with each open window of `key`, in the order they opened.
    pub(super) fn for_key_mut(&mut self, key: &str, mut f: impl FnMut(WindowId, &mut LiveWindow)) {
        let Some(open) = self.by_key.get(key) else {
            return;
        };
        for &(_, id) in open {
            f(id, self.windows.get_mut(id).expect("a live window"));
        }
    }

    /// Holds `key`'s windows open whatever the watermark (its key is parked): they leave
    /// `expiry` until [`Self::release_key`].
    pub(super) fn hold_key(&mut self, key: &str) {
        for &(window, id) in self.by_key.get(key).map_or(&[][..], Vec::as_slice) {
            self.expiry
                .remove(&(window.end.saturating_add(self.lateness), id));
        }
    }

    /// Lets `key`'s held windows expire again. Returns them.
    pub(super) fn release_key(&mut self, key: &str) -> Vec<WindowId> {
        let open = self.by_key.get(key).map_or(&[][..], Vec::as_slice);
        for &(window, id) in open {
            self.expiry
                .insert((window.end.saturating_add(self.lateness), id));
        }
        open.iter().map(|&(_, id)| id).collect()
    }

    /// The first window whose lateness the watermark has passed (closed next), if any.
    pub(super) fn first_expired(&self, watermark: Millis) -> Option<WindowId> {
        let &(expires, id) = self.expiry.first()?;
        (expires <= watermark).then_some(id)
    }

    /// Window `id`, if it is open.
    #[inline]
    pub(super) fn get(&self, id: WindowId) -> Option<&LiveWindow> {
        self.windows.get(id)
    }

    /// Window `id`, if it is open.
    #[inline]
    pub(super) fn get_mut(&mut self, id: WindowId) -> Option<&mut LiveWindow> {
        self.windows.get_mut(id)
    }

    /// How many windows are open.
    pub(super) fn len(&self) -> usize {
        self.windows.len()
    }

    /// The open windows, by id.
    pub(super) fn iter(&self) -> impl Iterator<Item = (WindowId, &LiveWindow)> {
        self.windows.iter()
    }

    /// The open windows.
    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut LiveWindow> {
        self.windows.values_mut()
    }
}

impl Index<WindowId> for LiveWindows {
    type Output = LiveWindow;

    fn index(&self, id: WindowId) -> &LiveWindow {
        &self.windows[id]
    }
}
