//! Counts the distinct values of the field `item` per key and window.
//!
//! Build the component and run the sample pipeline from the workspace root:
//!
//! ```text
//! cargo build --release --target wasm32-wasip2 -p weir-example-distinct-count
//! target/debug/weir run examples/distinct-count/pipeline.toml
//! ```
//!
//! The component is `target/wasm32-wasip2/release/weir_example_distinct_count.wasm`. The state
//! keeps a map `seen` from each item (text; integers in decimal) to how often it occurred, and
//! the number of `events`. Each window's output has `distinct` and `events` (ints). An event
//! lacking a text or integer `item` goes to the dead-letter output (its batch is refused, and
//! the host retries the events one at a time).

use weir_sdk::{Aggregate, Events, Output, State, Value, Window};

/// The distinct-count aggregate.
pub struct DistinctCount;

impl Aggregate for DistinctCount {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        let items = batch
            .values("item")
            .map(|item| item.and_then(Value::to_text))
            .collect::<Option<Vec<_>>>()
            .ok_or("event without a text or integer `item` field")?;
        for item in items {
            increment(state, &item, 1);
        }
        state.add_int("events", batch.len() as i64);
        Ok(())
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        for item in source.map_entries("seen") {
            let count = source.map_get("seen", &item).and_then(|c| c.as_int());
            increment(target, &item, count.unwrap_or(0));
        }
        target.add_int("events", source.get_int("events").unwrap_or(0));
        Ok(())
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        let distinct = i64::try_from(state.map_len("seen")).unwrap_or(i64::MAX);
        Ok(Output::new()
            .with("distinct", distinct)
            .with("events", state.get_int("events").unwrap_or(0)))
    }
}

/// Adds `count` occurrences of `item` to the map `seen`.
fn increment(state: &State, item: &str, count: i64) {
    let seen = state
        .map_get("seen", item)
        .and_then(|c| c.as_int())
        .unwrap_or(0);
    state.map_put("seen", item, seen + count);
}

weir_sdk::export_aggregate!(DistinctCount);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    const WINDOW: Window = Window {
        start: 0,
        end: 60_000,
    };

    fn batch(items: &[Value]) -> Events {
        items.iter().fold(Events::new(["item"]), |batch, item| {
            batch.with_row(1, [item.clone()])
        })
    }

    #[test]
    fn counts_distinct_items_with_ints_as_text() {
        let memory = MemoryState::new("k");
        let items = [
            Value::from("apple"),
            Value::from("42"),
            Value::Int(42),
            Value::from("apple"),
            Value::from("pear"),
        ];
        DistinctCount::add(&memory.state(), &batch(&items)).unwrap();
        let output = DistinctCount::finish(&memory.state(), WINDOW).unwrap();
        assert_eq!(output, Output::new().with("distinct", 3).with("events", 5));
        assert_eq!(memory.map_get("seen", "42"), Some(Value::Int(2)));
    }

    #[test]
    fn merge_unions_the_maps() {
        let (target, source) = (MemoryState::new("k"), MemoryState::new("k"));
        DistinctCount::add(&target.state(), &batch(&["a".into(), "b".into()])).unwrap();
        DistinctCount::add(
            &source.state(),
            &batch(&["b".into(), "c".into(), "c".into()]),
        )
        .unwrap();
        DistinctCount::merge(&target.state(), &source.state()).unwrap();
        let output = DistinctCount::finish(&target.state(), WINDOW).unwrap();
        assert_eq!(output, Output::new().with("distinct", 3).with("events", 5));
        assert_eq!(target.map_entries("seen"), ["a", "b", "c"]);
        assert_eq!(target.map_get("seen", "c"), Some(Value::Int(2)));
    }

    #[test]
    fn rejects_items_that_are_not_text_or_int() {
        let memory = MemoryState::new("k");
        for bad in [Value::Null, Value::Float(1.5), Value::Boolean(true)] {
            assert!(DistinctCount::add(&memory.state(), &batch(&["a".into(), bad])).is_err());
        }
        assert_eq!(memory.map_len("seen"), 0);
        assert_eq!(memory.get("events"), None);
    }
}
