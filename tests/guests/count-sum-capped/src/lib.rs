//! Test fixture: count-sum whose `sum` output is capped at 100: a "version 2" that differs
//! from count-sum only in the windows whose sum passes 100, for replay and shadow tests.

use weir_guest_count_sum_core as count_sum;
use weir_sdk::{Aggregate, Events, Output, State, Value, Window};

/// The cap on the `sum` output.
const CAP: i64 = 100;

/// Count-sum with its `sum` output capped at [`CAP`].
pub struct CountSumCapped;

impl Aggregate for CountSumCapped {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        count_sum::add(state, batch)
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        count_sum::merge(target, source)
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        let sum = match state.get("sum") {
            Some(Value::Int(sum)) => sum.min(CAP),
            _ => 0,
        };
        Ok(Output::new()
            .with("count", state.get_int("count").unwrap_or(0))
            .with("sum", sum))
    }
}

weir_sdk::export_aggregate!(CountSumCapped);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    const WINDOW: Window = Window {
        start: 0,
        end: 60_000,
    };

    #[test]
    fn sums_above_the_cap_are_capped_and_the_rest_kept() {
        let memory = MemoryState::new("u1");
        let small = Events::new(["amount"]).with_row(1_000, [40]);
        CountSumCapped::add(&memory.state(), &small).unwrap();
        let output = CountSumCapped::finish(&memory.state(), WINDOW).unwrap();
        assert_eq!(output, Output::new().with("count", 1).with("sum", 40));
        let big = Events::new(["amount"]).with_row(2_000, [90]);
        CountSumCapped::add(&memory.state(), &big).unwrap();
        let output = CountSumCapped::finish(&memory.state(), WINDOW).unwrap();
        assert_eq!(output, Output::new().with("count", 2).with("sum", 100));
    }
}
