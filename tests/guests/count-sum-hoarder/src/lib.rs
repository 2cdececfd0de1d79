//! Test fixture: count-sum that gives the same results but keeps every event's amount in a map
//! it never reads, so its state per window grows with the window's events: the state-growth
//! gate of a gated rollout must stop it, its results being right.

use weir_guest_count_sum_core as count_sum;
use weir_sdk::{Aggregate, Events, Output, State, Window};

/// Count-sum with a history it does not need.
pub struct Hoarder;

impl Aggregate for Hoarder {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        count_sum::add(state, batch)?;
        let seen = state.get_int("count").unwrap_or(0);
        for (i, row) in batch.rows.iter().enumerate() {
            let entry = format!("event-{:08}", seen as usize + i);
            state.map_put(
                "history",
                &entry,
                format!("at {} ms, kept for nothing", row.timestamp),
            );
        }
        Ok(())
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        count_sum::merge(target, source)
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        Ok(count_sum::finish(state))
    }
}

weir_sdk::export_aggregate!(Hoarder);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    #[test]
    fn it_keeps_an_entry_per_event_and_gives_count_sum_s_results() {
        let memory = MemoryState::new("u1");
        let batch = Events::new(["amount"]).with_row(1, [2]).with_row(2, [3]);
        Hoarder::add(&memory.state(), &batch).unwrap();
        assert_eq!(memory.map_entries("history").len(), 2);
        let output = Hoarder::finish(&memory.state(), Window { start: 0, end: 10 }).unwrap();
        assert_eq!(output, count_sum::finish(&memory.state()));
    }
}
