//! Test fixture: count-sum whose `add` allocates without bound for keys starting with `bomb`.

use weir_guest_count_sum_core as count_sum;
use weir_sdk::{Aggregate, Events, Output, State, Window};

/// Count-sum whose `add`, for `bomb…` keys, keeps allocating and filling 1 MiB blocks until
/// the host's memory limit (or the 4 GiB of wasm32) makes the allocation fail, which traps.
pub struct MemoryBomb;

impl Aggregate for MemoryBomb {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        if state.key().starts_with("bomb") {
            let mut hoard = Vec::new();
            loop {
                // Filled with non-zero bytes, so every page is written; black_box keeps it all.
                hoard.push(std::hint::black_box(vec![0xA5_u8; 1 << 20]));
                std::hint::black_box(&hoard);
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

weir_sdk::export_aggregate!(MemoryBomb);
