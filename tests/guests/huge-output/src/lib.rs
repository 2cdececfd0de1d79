//! Test fixture: count-sum whose `finish` adds a 64 MiB text field for keys starting with `huge`.

use weir_guest_count_sum_core as count_sum;
use weir_sdk::{Aggregate, Events, Output, State, Window};

/// The size of the text field `padding` in the output of `huge…` keys: 64 MiB.
pub const HUGE_LEN: usize = 64 << 20;

/// Count-sum whose output, for `huge…` keys, also has `padding`: [`HUGE_LEN`] bytes of `x`.
pub struct HugeOutput;

impl Aggregate for HugeOutput {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        count_sum::add(state, batch)
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        count_sum::merge(target, source)
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        let output = count_sum::finish(state);
        if state.key().starts_with("huge") {
            return Ok(output.with("padding", "x".repeat(HUGE_LEN)));
        }
        Ok(output)
    }
}

weir_sdk::export_aggregate!(HugeOutput);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Value;
    use weir_sdk::testing::MemoryState;

    const WINDOW: Window = Window {
        start: 0,
        end: 60_000,
    };

    #[test]
    fn only_huge_keys_get_the_padding() {
        let batch = Events::new(["amount"]).with_row(1_000, [2]);
        for (key, padding) in [("u1", None), ("huge-1", Some(HUGE_LEN))] {
            let memory = MemoryState::new(key);
            HugeOutput::add(&memory.state(), &batch).unwrap();
            let output = HugeOutput::finish(&memory.state(), WINDOW).unwrap();
            assert_eq!(output.get("count"), Some(&Value::Int(1)));
            let text = output.get("padding").and_then(Value::as_text);
            assert_eq!(text.map(str::len), padding);
        }
    }
}
