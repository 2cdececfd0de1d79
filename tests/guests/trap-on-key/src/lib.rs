//! Test fixture: count-sum that traps for keys starting with `boom`.

use weir_sdk::{Aggregate, Events, Output, State, Value, Window};

/// Count-sum whose `add` panics (a Wasm trap) for keys starting with `boom`.
pub struct TrapOnKey;

impl Aggregate for TrapOnKey {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        let key = state.key();
        assert!(!key.starts_with("boom"), "trap-on-key: key {key:?} traps");
        add_count_sum(state, batch)
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        merge_count_sum(target, source)
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        Ok(finish_count_sum(state))
    }
}

weir_sdk::export_aggregate!(TrapOnKey);

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
