//! [`Arrived`]: the events a window engine's pending adds refer to, by number (the engine
//! numbers its events from its first batch on): the batch being processed and the batches the
//! engine carries over from earlier ones because some window still waits to add their events
//! (see [`super::WindowEngine::process_carrying`]).
//!
//! Depends on `event` only.

use std::collections::VecDeque;
use std::ops::Index;

use crate::event::Staged;

/// The batches an engine carries, oldest first, each with the number of its first event.
pub(super) type Carried = VecDeque<(usize, Vec<Staged>)>;

/// The carried batches and the current one, indexed by event number.
pub(super) struct Arrived<'a> {
    carried: &'a Carried,
    current: &'a [Staged],
    first: usize,
}

impl<'a> Arrived<'a> {
    /// `carried`'s batches, then `current`, whose first event is number `first`.
    pub(super) fn new(carried: &'a Carried, current: &'a [Staged], first: usize) -> Self {
        Arrived {
            carried,
            current,
            first,
        }
    }

    /// The batch being processed.
    pub(super) fn current(&self) -> &'a [Staged] {
        self.current
    }

    /// The number of the current batch's first event.
    pub(super) fn first(&self) -> usize {
        self.first
    }
}

impl Index<usize> for Arrived<'_> {
    type Output = Staged;

    /// Event `number`; panics if no batch held holds it (a pending add outlived its batch).
    fn index(&self, number: usize) -> &Staged {
        if let Some(i) = number.checked_sub(self.first) {
            return &self.current[i];
        }
        let after = self.carried.partition_point(|(first, _)| *first <= number);
        let (first, events) = &self.carried[after.checked_sub(1).expect("a held event")];
        &events[number - first]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;

    fn batch(lines: std::ops::Range<u64>) -> Vec<Staged> {
        lines
            .map(|line| Staged {
                seq: line,
                event: Event {
                    line,
                    key: "k".into(),
                    timestamp: 0,
                    fields: Vec::new(),
                },
                origin: None,
            })
            .collect()
    }

    #[test]
    fn events_are_found_by_number_in_carried_batches_and_the_current_one() {
        let carried: Carried = [(10, batch(0..3)), (13, batch(3..4))].into();
        let current = batch(4..6);
        let arrived = Arrived::new(&carried, &current, 14);
        let lines: Vec<u64> = (10..16).map(|n| arrived[n].event.line).collect();
        assert_eq!(lines, [0, 1, 2, 3, 4, 5]);
    }
}
