//! Test fixture: count-sum whose `add` never returns for keys starting with `spin`.

use weir_sdk::{Aggregate, Events, Output, State, Value, Window};

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
        add_count_sum(state, batch)
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        merge_count_sum(target, source)
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        Ok(finish_count_sum(state))
    }
}

weir_sdk::export_aggregate!(InfiniteLoop);

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
