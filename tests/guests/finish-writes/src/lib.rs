//! Test fixture: count-sum whose `finish` writes to the state it must only read (it adds 1,000
//! to `count`), which the host must discard.

use weir_guest_count_sum_core as count_sum;
use weir_sdk::{Aggregate, Events, Output, State, Window};

/// Count-sum that breaks the contract of `finish`.
pub struct FinishWrites;

impl Aggregate for FinishWrites {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        count_sum::add(state, batch)
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        count_sum::merge(target, source)
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        let output = count_sum::finish(state);
        state.add_int("count", 1_000);
        state.put("finished", true);
        Ok(output)
    }
}

weir_sdk::export_aggregate!(FinishWrites);
