//! Counts events and sums their `amount` per key and tumbling window.
//!
//! Build the component and run the sample pipeline from the workspace root:
//!
//! ```text
//! cargo build --release --target wasm32-wasip2 -p weir-example-tumbling-count-sum
//! target/debug/weir run examples/tumbling-count-sum/pipeline.toml
//! ```
//!
//! The component is `target/wasm32-wasip2/release/weir_example_tumbling_count_sum.wasm`.
//! Each window's output has `count` (int) and `sum`: an int while every `amount` was an int,
//! a float once any was a float. An event lacking a numeric `amount` goes to the
//! dead-letter output (its batch is refused, and the host retries the events one at a time).

use weir_sdk::{Aggregate, Columns, Events, Output, State, Value, Window};

/// The count-and-sum aggregate.
pub struct CountSum;

const NOT_NUMERIC: &str = "event without a numeric `amount` field";

impl Aggregate for CountSum {
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

    /// What `add` does, with an all-int or all-float `amount` read as one slice.
    fn add_columns(state: &State, batch: &Columns) -> Result<(), String> {
        let mut sum = state.get("sum").unwrap_or(Value::Int(0));
        if let Some(amounts) = batch.ints("amount") {
            for &amount in amounts {
                sum = sum.plus(&Value::Int(amount)).ok_or(NOT_NUMERIC)?;
            }
        } else if let Some(amounts) = batch.floats("amount") {
            for &amount in amounts {
                sum = sum.plus(&Value::Float(amount)).ok_or(NOT_NUMERIC)?;
            }
        } else {
            return Self::add(state, batch.events());
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
        Ok(Output::new()
            .with("count", state.get_int("count").unwrap_or(0))
            .with("sum", state.get("sum").unwrap_or(Value::Int(0))))
    }
}

weir_sdk::export_aggregate!(CountSum);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{MemoryState, assert_add_columns_agrees, with_columns};

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
    fn sum_stays_int_until_a_float_arrives() {
        let memory = MemoryState::new("u1");
        CountSum::add(&memory.state(), &batch(&[2.into(), 3.into()])).unwrap();
        let output = CountSum::finish(&memory.state(), WINDOW).unwrap();
        assert_eq!(output, Output::new().with("count", 2).with("sum", 5));

        CountSum::add(&memory.state(), &batch(&[0.5.into()])).unwrap();
        let output = CountSum::finish(&memory.state(), WINDOW).unwrap();
        assert_eq!(output, Output::new().with("count", 3).with("sum", 5.5));
    }

    #[test]
    fn a_batch_with_a_bad_amount_is_rejected_whole() {
        let memory = MemoryState::new("u1");
        for bad in [Value::Null, Value::from("12")] {
            let error = CountSum::add(&memory.state(), &batch(&[1.into(), bad])).unwrap_err();
            assert_eq!(error, NOT_NUMERIC);
        }
        let no_amount = Events::new(["user"]).with_row(1_000, ["u1"]);
        assert!(CountSum::add(&memory.state(), &no_amount).is_err());
        assert_eq!(memory.get("count"), None);
        assert_eq!(memory.get("sum"), None);
    }

    /// `add_columns` leaves the same state and error as `add`, batch after batch: ints
    /// (overflowing into a float), floats, mixed kinds, nulls, text, and no `amount`; from no
    /// sum, a sum at the edge, a float sum, and a sum that is not a number.
    #[test]
    fn add_columns_does_what_add_does() {
        let batches = [
            batch(&[2.into(), 3.into()]),
            batch(&[i64::MAX.into(), 1.into(), (-5).into()]),
            batch(&[0.5.into(), 1.25.into()]),
            batch(&[1.into(), 0.5.into()]),
            batch(&[1.into(), Value::Null]),
            batch(&[Value::from("12")]),
            batch(&[]),
            Events::new(["user"]).with_row(1_000, ["u1"]),
        ];
        // Nine events in batches taken whole, and the `1` of the refused `[1, null]`, which is
        // added alone when the host retries that batch's events one at a time.
        // The sums, worked out by hand: 5, then i64::MAX overflows into the float 2^63, which
        // absorbs every later amount (from i64::MAX, 2^63 plus i64::MAX as a float is 2^64).
        let two_63 = Value::Float(9_223_372_036_854_775_808.0);
        let starts = [
            (None, 10, two_63.clone()),
            (
                Some(Value::Int(i64::MAX)),
                10,
                Value::Float(18_446_744_073_709_551_616.0),
            ),
            (Some(Value::Float(0.5)), 10, two_63),
            // Only the batch of no events is taken.
            (Some(Value::from("x")), 0, Value::from("x")),
        ];
        for (start, count, sum) in starts {
            let memory = MemoryState::new("u1");
            start.iter().for_each(|sum| memory.put("sum", sum.clone()));
            let reached = assert_add_columns_agrees::<CountSum>(&memory, &batches);
            assert_eq!(reached.get("count"), Some(Value::Int(count)));
            assert_eq!(reached.get("sum"), Some(sum));
        }
        // Integer and float batches reach `add_columns` as slices: the checks above compared
        // its slice paths, not only its fallback to `add`.
        with_columns(&batches[0], |columns| {
            assert!(columns.ints("amount").is_some())
        });
        with_columns(&batches[2], |columns| {
            assert!(columns.floats("amount").is_some())
        });
    }

    #[test]
    fn merge_adds_counts_and_sums() {
        let (target, source, empty) = (
            MemoryState::new("u1"),
            MemoryState::new("u1"),
            MemoryState::new("u1"),
        );
        CountSum::add(&target.state(), &batch(&[1.into(), 2.into()])).unwrap();
        CountSum::add(&source.state(), &batch(&[1.5.into()])).unwrap();
        CountSum::merge(&target.state(), &source.state()).unwrap();
        CountSum::merge(&target.state(), &empty.state()).unwrap();
        let output = CountSum::finish(&target.state(), WINDOW).unwrap();
        assert_eq!(output, Output::new().with("count", 3).with("sum", 4.5));

        CountSum::merge(&empty.state(), &source.state()).unwrap();
        assert_eq!(empty.get("sum"), Some(Value::Float(1.5)));
        assert_eq!(empty.get("count"), Some(Value::Int(1)));
    }
}
