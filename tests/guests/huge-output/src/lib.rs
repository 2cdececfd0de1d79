//! Test fixture: count-sum whose `finish` adds a 64 MiB text field for keys starting with `huge`.

use weir_sdk::{Aggregate, Events, Output, State, Value, Window};

/// The size of the text field `padding` in the output of `huge…` keys: 64 MiB.
pub const HUGE_LEN: usize = 64 << 20;

/// Count-sum whose output, for `huge…` keys, also has `padding`: [`HUGE_LEN`] bytes of `x`.
pub struct HugeOutput;

impl Aggregate for HugeOutput {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        add_count_sum(state, batch)
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        merge_count_sum(target, source)
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        let output = finish_count_sum(state);
        if state.key().starts_with("huge") {
            return Ok(output.with("padding", "x".repeat(HUGE_LEN)));
        }
        Ok(output)
    }
}

weir_sdk::export_aggregate!(HugeOutput);

// The count-sum behaviour of `examples/tumbling-count-sum`: state `count` (int) and `sum`.

fn add_count_sum(state: &State, batch: &Events) -> Result<(), String> {
    let mut sum = state.get("sum").unwrap_or(Value::Int(0));
    for amount in batch.values("amount") {
        sum = amount
            .and_then(|amount| sum.plus(amount))
            .ok_or("event without a numeric `amount` field")?;
    }
    state.add_int("count", batch.len() as i64);
    state.put("sum", sum);
    Ok(())
}

fn merge_count_sum(target: &State, source: &State) -> Result<(), String> {
    let (Some(count), Some(sum)) = (source.get_int("count"), source.get("sum")) else {
        return Ok(()); // an empty source
    };
    let total = target.get("sum").unwrap_or(Value::Int(0)).plus(&sum);
    target.put("sum", total.ok_or("state `sum` is not a number")?);
    target.add_int("count", count);
    Ok(())
}

fn finish_count_sum(state: &State) -> Output {
    Output::new()
        .with("count", state.get_int("count").unwrap_or(0))
        .with("sum", state.get("sum").unwrap_or(Value::Int(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
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
