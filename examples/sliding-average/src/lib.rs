//! The count, sum and average of the field `value` per key and sliding window.
//!
//! Build the component and run the sample pipeline from the workspace root:
//!
//! ```text
//! cargo build --release --target wasm32-wasip2 -p weir-example-sliding-average
//! target/debug/weir run examples/sliding-average/pipeline.toml
//! ```
//!
//! The component is `target/wasm32-wasip2/release/weir_example_sliding_average.wasm`. Each
//! window's output has `count` (int), `sum` (float) and `avg` (float, `sum / count`). The
//! sample events carry RFC 3339 timestamps. An event lacking a numeric `value` goes to the
//! dead-letter output once for each window it falls in (its batch is refused, and the host
//! retries the events one at a time).

use weir_sdk::{Aggregate, Events, Output, State, Window};

/// The averaging aggregate.
pub struct Average;

impl Aggregate for Average {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        let mut sum = state.get_float("sum").unwrap_or(0.0);
        for value in batch.values("value") {
            sum += value
                .and_then(|value| value.as_float())
                .ok_or("event without a numeric `value` field")?;
        }
        state.add_int("count", batch.len() as i64);
        state.put("sum", sum);
        Ok(())
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        let sum = target.get_float("sum").unwrap_or(0.0) + source.get_float("sum").unwrap_or(0.0);
        target.put("sum", sum);
        target.add_int("count", source.get_int("count").unwrap_or(0));
        Ok(())
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        let count = state.get_int("count").unwrap_or(0);
        let sum = state.get_float("sum").unwrap_or(0.0);
        let avg = if count > 0 { sum / count as f64 } else { 0.0 };
        Ok(Output::new()
            .with("count", count)
            .with("sum", sum)
            .with("avg", avg))
    }
}

weir_sdk::export_aggregate!(Average);

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
    fn averages_ints_and_floats_across_merges() {
        let (target, source) = (MemoryState::new("s1"), MemoryState::new("s1"));
        let batch = Events::new(["value"])
            .with_row(1, [Value::Int(1)])
            .with_row(2, [Value::Float(2.5)]);
        Average::add(&target.state(), &batch).unwrap();
        Average::add(&source.state(), &Events::new(["value"]).with_row(3, [5])).unwrap();
        Average::merge(&target.state(), &source.state()).unwrap();
        let output = Average::finish(&target.state(), WINDOW).unwrap();
        assert_eq!(
            output,
            Output::new()
                .with("count", 3)
                .with("sum", 8.5)
                .with("avg", 8.5 / 3.0)
        );
    }

    #[test]
    fn rejects_a_batch_with_a_missing_value() {
        let memory = MemoryState::new("s1");
        let batch = Events::new(["value"])
            .with_row(1, [Value::Int(1)])
            .with_row(2, [Value::Null]);
        assert!(Average::add(&memory.state(), &batch).is_err());
        assert_eq!(memory.get("count"), None);
    }

    #[test]
    fn an_empty_window_averages_to_zero() {
        let output = Average::finish(&MemoryState::new("s1").state(), WINDOW).unwrap();
        assert_eq!(output.get("avg"), Some(&Value::Float(0.0)));
    }
}
