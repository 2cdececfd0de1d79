//! [`Arrived`]: the events a window engine's pending adds refer to, by number (the engine
//! numbers its events from its first batch on), with the router's crossings beside them if it
//! took them: the batch being processed and the batches the engine carries over from earlier
//! ones because some window still waits to add their events (see
//! [`super::WindowEngine::process_carrying`]).
//!
//! Depends on `event` only.

use std::collections::VecDeque;
use std::ops::Index;

use crate::event::{Crossing, Event, Share, Staged};

/// The batches an engine carries, oldest first, each with the number of its first event.
pub(super) type Carried = VecDeque<(usize, Share)>;

/// What an event without a crossing has beside it.
const NO_CROSSING: &Option<Crossing> = &None;

/// The carried batches and the current one, indexed by event number.
pub(super) struct Arrived<'a> {
    carried: &'a Carried,
    current: &'a [Staged],
    current_crossings: &'a [Option<Crossing>],
    first: usize,
}

impl<'a> Arrived<'a> {
    /// `carried`'s batches, then `current` (with `crossings`, one per event or none), whose
    /// first event is number `first`.
    pub(super) fn new(
        carried: &'a Carried,
        current: &'a [Staged],
        crossings: &'a [Option<Crossing>],
        first: usize,
    ) -> Self {
        Arrived {
            carried,
            current,
            current_crossings: crossings,
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

    /// The events numbered `numbers`, appended to `out` in that order.
    pub(super) fn extend_events(&self, numbers: &[usize], out: &mut Vec<&'a Event>) {
        self.each_staged(numbers, |staged, _| out.push(&staged.event));
    }

    /// Calls `f` with each of the events numbered `numbers`, in that order, and the crossing
    /// beside it (`None` if it has none). Each number is looked up in the batch of the one
    /// before it first, so a window's pending numbers (ascending, mostly in one batch) cost a
    /// comparison each instead of a search of the batches.
    pub(super) fn each_staged(
        &self,
        numbers: &[usize],
        mut f: impl FnMut(&'a Staged, &'a Option<Crossing>),
    ) {
        let (mut first, mut batch, mut crossings) = (0, &[][..], &[][..]);
        for &number in numbers {
            let mut i = number.wrapping_sub(first);
            if i >= batch.len() {
                (first, batch, crossings) = self.batch_of(number);
                i = number - first;
            }
            // The crossing's address, not the crossing: gathering a window's crossings reads
            // none of them (an `Option<&Crossing>` here read each, a wait on memory for every
            // event before the fetch ahead could help: the Wasm shard 86.4 -> 93.9 ns).
            f(&batch[i], crossings.get(i).unwrap_or(NO_CROSSING));
        }
    }

    /// Whether any batch held came with crossings.
    pub(super) fn has_crossings(&self) -> bool {
        let with_crossings = |(_, share): &(usize, Share)| !share.crossings.is_empty();
        !self.current_crossings.is_empty() || self.carried.iter().any(with_crossings)
    }

    /// The batch that would hold event `number` (and its crossings), with the number of its
    /// first event: the current one for any number from its first on, else the carried one
    /// starting at or before it. Panics if `number` is before every held batch (a pending add
    /// outlived its batch); a number past a batch's end panics where the batch is indexed.
    fn batch_of(&self, number: usize) -> (usize, &'a [Staged], &'a [Option<Crossing>]) {
        if number >= self.first {
            return (self.first, self.current, self.current_crossings);
        }
        let after = self.carried.partition_point(|(first, _)| *first <= number);
        let (first, share) = &self.carried[after.checked_sub(1).expect("a held event")];
        (*first, &share.events, &share.crossings)
    }
}

impl Index<usize> for Arrived<'_> {
    type Output = Staged;

    /// Event `number`; panics if no batch held holds it (a pending add outlived its batch).
    fn index(&self, number: usize) -> &Staged {
        let (first, batch, _) = self.batch_of(number);
        &batch[number - first]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                made_by: None,
            })
            .collect()
    }

    #[test]
    fn events_are_found_by_number_in_carried_batches_and_the_current_one() {
        let carried: Carried = [(10, batch(0..3).into()), (13, batch(3..4).into())].into();
        let current = batch(4..6);
        let arrived = Arrived::new(&carried, &current, &[], 14);
        let lines: Vec<u64> = (10..16).map(|n| arrived[n].event.line).collect();
        assert_eq!(lines, [0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn events_listed_by_number_come_from_whichever_batch_holds_each() {
        let carried: Carried = [(10, batch(0..3).into()), (13, batch(3..4).into())].into();
        let current = batch(4..6);
        let arrived = Arrived::new(&carried, &current, &[], 14);
        let mut events = Vec::new();
        // Ascending across batches, then back into an earlier batch and out again.
        arrived.extend_events(&[10, 12, 13, 14, 15, 11, 15, 13], &mut events);
        let lines: Vec<u64> = events.iter().map(|event| event.line).collect();
        assert_eq!(lines, [0, 2, 3, 4, 5, 1, 5, 3]);
    }

    /// Each event comes with the crossing beside it in its own batch, across carried batches
    /// and the current one; a batch without crossings gives none.
    #[test]
    fn each_event_comes_with_the_crossing_beside_it() {
        let crossing = |line: u64| {
            Some(Crossing {
                timestamp: line as i64,
                field: crate::field_name::FieldName::new("n").interned().unwrap(),
                number: crate::event::CrossingNumber::Int(line as i64 * 10),
            })
        };
        let with_crossings = |lines: std::ops::Range<u64>| Share {
            events: batch(lines.clone()),
            crossings: lines
                .map(|line| (line % 2 == 0).then(|| crossing(line)).flatten())
                .collect(),
        };
        let carried: Carried = [(10, with_crossings(0..3)), (13, batch(3..4).into())].into();
        let current = with_crossings(4..6);
        let arrived = Arrived::new(&carried, &current.events, &current.crossings, 14);
        let mut seen = Vec::new();
        arrived.each_staged(&[10, 11, 12, 13, 14, 15, 12], |staged, crossing| {
            seen.push((staged.event.line, crossing.map(|c| c.timestamp)));
        });
        let expected = [
            (0, Some(0)),
            (1, None),
            (2, Some(2)),
            (3, None),
            (4, Some(4)),
            (5, None),
        ];
        assert_eq!(seen[..6], expected);
        assert_eq!(seen[6], (2, Some(2)), "back into a carried batch");
    }

    #[test]
    #[should_panic(expected = "a held event")]
    fn a_number_before_every_held_batch_is_a_bug_not_a_wrong_event() {
        let carried: Carried = [(10, batch(0..3).into())].into();
        let current = batch(3..4);
        Arrived::new(&carried, &current, &[], 13).extend_events(&[12, 9], &mut Vec::new());
    }
}
