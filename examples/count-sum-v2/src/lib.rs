//! Version 2 of count-sum: adds `avg` to the output; rolled out over v1 in the README tour.
//!
//! ```text
//! cargo build --release --target wasm32-wasip2 -p weir-example-count-sum-v2
//! ```
//!
//! The component is `target/wasm32-wasip2/release/weir_example_count_sum_v2.wasm`. Its state
//! is that of `examples/tumbling-count-sum` (v1): `count` (int) and `sum` (an int while every
//! `amount` was an int, a float once any was a float), so v2 takes over windows v1 started,
//! and v1 those v2 started. Each window's output has v1's `count` and `sum`, and `avg`
//! (float, `sum / count`; 0.0 for an empty window). The layout is unchanged, so `migrate` has
//! nothing to convert; it only notes which version it took the window over from, and the
//! output says so in `migrated_from`.

use weir_sdk::{Aggregate, Events, Output, State, Value, Window};

/// The count-sum-and-average aggregate.
pub struct CountSumV2;

const NOT_NUMERIC: &str = "event without a numeric `amount` field";

impl Aggregate for CountSumV2 {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        let mut sum = state.get("sum").unwrap_or(Value::Int(0));
        for amount in batch.values("amount") {
            sum = amount
                .and_then(|amount| sum.plus(amount))
                .ok_or(NOT_NUMERIC)?;
        }
        state.add_int("count", batch.len() as i64);
        state.put("sum", sum);
        Ok(())
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        let (Some(count), Some(sum)) = (source.get_int("count"), source.get("sum")) else {
            return Ok(()); // an empty source
        };
        let total = target.get("sum").unwrap_or(Value::Int(0)).plus(&sum);
        target.put("sum", total.ok_or("state `sum` is not a number")?);
        target.add_int("count", count);
        Ok(())
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        let count = state.get_int("count").unwrap_or(0);
        let sum = state.get("sum").unwrap_or(Value::Int(0));
        let avg = match sum.as_float() {
            Some(sum) if count != 0 => sum / count as f64,
            _ => 0.0,
        };
        let output = Output::new()
            .with("count", count)
            .with("sum", sum)
            .with("avg", avg);
        Ok(match state.get_text("migrated_from") {
            Some(from) => output.with("migrated_from", from),
            None => output,
        })
    }

    fn migrate(state: &State, from_version: &str) -> Result<(), String> {
        state.put("migrated_from", from_version);
        Ok(())
    }
}

weir_sdk::export_aggregate!(CountSumV2);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    const WINDOW: Window = Window {
        start: 0,
        end: 60_000,
    };

    fn batch(amounts: &[Value]) -> Events {
        amounts
            .iter()
            .fold(Events::new(["user", "amount"]), |batch, amount| {
                batch.with_row(1_000, [Value::from("u1"), amount.clone()])
            })
    }

    #[test]
    fn output_adds_avg_to_count_and_sum() {
        let memory = MemoryState::new("u1");
        CountSumV2::add(&memory.state(), &batch(&[2.into(), 3.into()])).unwrap();
        let output = CountSumV2::finish(&memory.state(), WINDOW).unwrap();
        let expected = Output::new()
            .with("count", 2)
            .with("sum", 5)
            .with("avg", 2.5);
        assert_eq!(output, expected);

        CountSumV2::add(&memory.state(), &batch(&[0.5.into()])).unwrap();
        let output = CountSumV2::finish(&memory.state(), WINDOW).unwrap();
        let expected = Output::new()
            .with("count", 3)
            .with("sum", 5.5)
            .with("avg", 5.5 / 3.0);
        assert_eq!(output, expected);
    }

    #[test]
    fn an_empty_window_averages_zero() {
        let memory = MemoryState::new("u1");
        let output = CountSumV2::finish(&memory.state(), WINDOW).unwrap();
        let expected = Output::new()
            .with("count", 0)
            .with("sum", 0)
            .with("avg", 0.0);
        assert_eq!(output, expected);
    }

    #[test]
    fn reads_and_continues_state_written_by_v1() {
        // What v1 (examples/tumbling-count-sum) leaves after the amounts 4 and 6.
        let memory = MemoryState::new("u1");
        memory.put("count", 2);
        memory.put("sum", 10);

        let output = CountSumV2::finish(&memory.state(), WINDOW).unwrap();
        let expected = Output::new()
            .with("count", 2)
            .with("sum", 10)
            .with("avg", 5.0);
        assert_eq!(output, expected);

        CountSumV2::add(&memory.state(), &batch(&[2.into()])).unwrap();
        assert_eq!(memory.get("count"), Some(Value::Int(3)));
        assert_eq!(memory.get("sum"), Some(Value::Int(12)));

        // v1's float sum, after a float amount.
        memory.put("sum", 12.5);
        let output = CountSumV2::finish(&memory.state(), WINDOW).unwrap();
        assert_eq!(output.get("sum"), Some(&Value::Float(12.5)));
        assert_eq!(output.get("avg"), Some(&Value::Float(12.5 / 3.0)));
    }

    #[test]
    fn a_batch_with_a_bad_amount_is_rejected_whole() {
        let memory = MemoryState::new("u1");
        for bad in [Value::Null, Value::from("12")] {
            let error = CountSumV2::add(&memory.state(), &batch(&[1.into(), bad])).unwrap_err();
            assert_eq!(error, NOT_NUMERIC);
        }
        assert_eq!(memory.get("count"), None);
        assert_eq!(memory.get("sum"), None);
    }

    #[test]
    fn merge_adds_counts_and_sums() {
        let (target, source, empty) = (
            MemoryState::new("u1"),
            MemoryState::new("u1"),
            MemoryState::new("u1"),
        );
        CountSumV2::add(&target.state(), &batch(&[1.into(), 2.into()])).unwrap();
        CountSumV2::add(&source.state(), &batch(&[1.5.into()])).unwrap();
        CountSumV2::merge(&target.state(), &source.state()).unwrap();
        CountSumV2::merge(&target.state(), &empty.state()).unwrap();
        let output = CountSumV2::finish(&target.state(), WINDOW).unwrap();
        let expected = Output::new()
            .with("count", 3)
            .with("sum", 4.5)
            .with("avg", 1.5);
        assert_eq!(output, expected);
        assert_eq!(source.get("count"), Some(Value::Int(1)));
    }
}
