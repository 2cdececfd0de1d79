//! Test fixture: count-sum that spins in a loop for every event it adds (about a third of a
//! millisecond each): an operator that takes all the CPU it is given, for CPU quota tests.

use weir_guest_count_sum_core as count_sum;
use weir_sdk::{Aggregate, Events, Output, State, Window};

/// Loop iterations per event.
const SPINS_PER_EVENT: u64 = 300_000;

/// Count-sum that burns CPU for every event.
pub struct BusyPerEvent;

impl Aggregate for BusyPerEvent {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        let mut spins = 0_u64;
        for _ in 0..batch.len() as u64 * SPINS_PER_EVENT {
            // black_box keeps the optimiser from proving the loop useless.
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
        count_sum::add(state, batch)
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        count_sum::merge(target, source)
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        Ok(count_sum::finish(state))
    }
}

weir_sdk::export_aggregate!(BusyPerEvent);
