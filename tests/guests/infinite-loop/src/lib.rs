//! Test fixture: count-sum whose `add` never returns for keys starting with `spin`.

use weir_guest_count_sum_core as count_sum;
use weir_sdk::{Aggregate, Events, Output, State, Window};

/// Count-sum whose `add` loops forever (until the host interrupts it) for `spin…` keys.
pub struct InfiniteLoop;

impl Aggregate for InfiniteLoop {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        if state.key().starts_with("spin") {
            let mut spins = 0_u64;
            loop {
                // black_box keeps the optimiser from proving the loop useless.
                spins = std::hint::black_box(spins.wrapping_add(1));
            }
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

weir_sdk::export_aggregate!(InfiniteLoop);
