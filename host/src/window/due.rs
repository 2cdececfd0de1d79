//! [`DueQueue`]: the windows that wait to fire, by end. A window with unemitted changes is
//! queued here; once the watermark reaches its end it fires, in the order end, start, key bytes
//! (the order in which dead letters of failed `finish` calls are written, which a restored run
//! must repeat), then id.
//!
//! Each live window carries a [`Queued`], whose flag only this module sets or clears: it is set
//! exactly while the window's entry is in the queue. The engine depends on this module; it
//! depends on `slab` (window ids) and `time` only.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::slab::WindowId;
use crate::time::{Millis, Window};

/// Whether a live window waits in the [`DueQueue`] (set and cleared there only).
#[derive(Debug, Default)]
pub(super) struct Queued(bool);

impl Queued {
    /// Whether the window waits in the queue.
    #[inline]
    pub(super) fn is_set(&self) -> bool {
        self.0
    }

    /// The window was taken out of the queue by [`DueQueue::pop`].
    #[inline]
    pub(super) fn popped(&mut self) {
        self.0 = false;
    }
}

/// The windows with unemitted changes, by end.
#[derive(Debug)]
pub(super) struct DueQueue {
    due: BTreeSet<Due>,
    /// Whether `due` may hold a window at or before the watermark: set when one is queued
    /// there (or the watermark is restored), and by `settle` to whether it left one. Only then
    /// can an event's `fire` find one due (a window whose end the watermark has not reached
    /// fires in the advance that reaches it); most events queue none, and their look at the
    /// first due window is skipped. True at first.
    due_now: bool,
}

impl DueQueue {
    /// An empty queue that may hold a due window (so the first look is not skipped).
    pub(super) fn new() -> Self {
        DueQueue {
            due: BTreeSet::new(),
            due_now: true,
        }
    }

    /// Whether a window at or before the watermark may be queued.
    #[inline]
    pub(super) fn due_now(&self) -> bool {
        self.due_now
    }

    /// The watermark moved in a way the queue does not see (a restore): the next look is
    /// not skipped.
    pub(super) fn may_be_due(&mut self) {
        self.due_now = true;
    }

    /// Queues window `id` of `key` over `window`, unless `queued` says it waits already.
    #[inline]
    pub(super) fn queue(
        &mut self,
        queued: &mut Queued,
        key: &Arc<str>,
        window: Window,
        id: WindowId,
        watermark: Millis,
    ) {
        if !queued.0 {
            queued.0 = true;
            self.due_now |= window.end <= watermark;
            self.due.insert(Due::new(key, window, id));
        }
    }

    /// Takes window `id` of `key` over `window` out of the queue, if it waits there.
    pub(super) fn unqueue(
        &mut self,
        queued: &mut Queued,
        key: &Arc<str>,
        window: Window,
        id: WindowId,
    ) {
        if std::mem::take(&mut queued.0) {
            self.due.remove(&Due::new(key, window, id));
        }
    }

    /// The first queued window whose end `watermark` has reached, taken out of the queue (its
    /// [`Queued`] is then to be cleared with [`Queued::popped`]).
    #[inline]
    pub(super) fn pop(&mut self, watermark: Millis) -> Option<WindowId> {
        let first = self.due.first()?;
        if first.end > watermark {
            return None;
        }
        self.due.pop_first().map(|due| due.id)
    }

    /// After the due windows fired: whether any is left at or before `watermark`.
    pub(super) fn settle(&mut self, watermark: Millis) {
        self.due_now = (self.due.first()).is_some_and(|due| due.end <= watermark);
    }
}

/// A window waiting in the due set: windows fire by end, start and key (the order in which
/// dead letters of failed `finish` calls are written, which a restored run must repeat).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    end: Millis,
    start: Millis,
    key: KeyOrder,
    id: WindowId,
}

impl Due {
    /// The entry of window `id` of `key` over `window`.
    fn new(key: &Arc<str>, window: Window, id: WindowId) -> Due {
        Due {
            end: window.end,
            start: window.start,
            key: KeyOrder::of(key),
            id,
        }
    }
}

/// A key in its byte order, compared by its first eight bytes before the rest: most keys
/// differ there, so most comparisons of a large due set touch no string.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct KeyOrder {
    /// The first eight bytes, big-endian, zero-padded: ordered as the bytes are, and equal
    /// only if the bytes are equal or one is a prefix of the other padded with zeros.
    prefix: u64,
    key: Arc<str>,
}

impl KeyOrder {
    fn of(key: &Arc<str>) -> KeyOrder {
        let mut head = [0u8; 8];
        let bytes = key.as_bytes();
        let n = bytes.len().min(8);
        head[..n].copy_from_slice(&bytes[..n]);
        KeyOrder {
            prefix: u64::from_be_bytes(head),
            key: key.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Due windows of one extent fire in the keys' byte order, as when the set held the
        /// keys themselves: prefixes of each other, NUL bytes and multi-byte characters too.
        #[test]
        fn keys_in_the_due_set_keep_their_byte_order(
            a in "[a\\x00\u{e9}\u{1f600}]{0,10}",
            b in "[a\\x00\u{e9}\u{1f600}]{0,10}",
        ) {
            let (a, b): (Arc<str>, Arc<str>) = (a.into(), b.into());
            proptest::prop_assert_eq!(KeyOrder::of(&a).cmp(&KeyOrder::of(&b)), a.cmp(&b));
        }
    }
}
