//! Test fixture: count-sum that traps for keys starting with `boom`.

use weir_guest_count_sum_core as count_sum;
use weir_sdk::{Aggregate, Events, Output, State, Window};

/// Count-sum whose `add` panics (a Wasm trap) for keys starting with `boom`.
pub struct TrapOnKey;

impl Aggregate for TrapOnKey {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        let key = state.key();
        assert!(!key.starts_with("boom"), "trap-on-key: key {key:?} traps");
        count_sum::add(state, batch)
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        count_sum::merge(target, source)
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        Ok(count_sum::finish(state))
    }
}

weir_sdk::export_aggregate!(TrapOnKey);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    const WINDOW: Window = Window {
        start: 0,
        end: 60_000,
    };

    fn batch() -> Events {
        Events::new(["amount"])
            .with_row(1_000, [2])
            .with_row(2_000, [3])
    }

    #[test]
    fn other_keys_count_and_sum() {
        let memory = MemoryState::new("u1");
        TrapOnKey::add(&memory.state(), &batch()).unwrap();
        let output = TrapOnKey::finish(&memory.state(), WINDOW).unwrap();
        assert_eq!(output, Output::new().with("count", 2).with("sum", 5));
    }

    #[test]
    #[should_panic(expected = "traps")]
    fn boom_keys_panic() {
        let memory = MemoryState::new("boom-1");
        let _ = TrapOnKey::add(&memory.state(), &batch());
    }
}
