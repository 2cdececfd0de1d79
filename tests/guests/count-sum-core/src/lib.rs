//! The count-sum behaviour of `examples/tumbling-count-sum` (state `count`, an int, and `sum`),
//! shared by the hostile test guests, which add their misbehaviour around it.

use weir_sdk::{Events, Output, State, Value};

/// Adds a batch: `count` and `sum` of `amount`.
pub fn add(state: &State, batch: &Events) -> Result<(), String> {
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

/// Folds `source` into `target`.
pub fn merge(target: &State, source: &State) -> Result<(), String> {
    let (Some(count), Some(sum)) = (source.get_int("count"), source.get("sum")) else {
        return Ok(()); // an empty source
    };
    let total = target.get("sum").unwrap_or(Value::Int(0)).plus(&sum);
    target.put("sum", total.ok_or("state `sum` is not a number")?);
    target.add_int("count", count);
    Ok(())
}

/// The output: `count` and `sum`.
pub fn finish(state: &State) -> Output {
    Output::new()
        .with("count", state.get_int("count").unwrap_or(0))
        .with("sum", state.get("sum").unwrap_or(Value::Int(0)))
}
