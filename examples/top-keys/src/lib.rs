//! Top keys: per window, the three keys with the highest `count` among the window's events
//! (a tie goes to the lower key), as `key_1`, `count_1`, `key_2`, ... . Made for a stage after a
//! per-key count: the previous stage's results carry their key in `key` and their count in
//! `count`, and a global stage sees every key's result of a window. A key seen twice in one
//! window has its counts added. Native twin: `native = "top-keys"`.

use weir_sdk::{Aggregate, Events, Output, State, Value, Window};

/// The top-keys aggregate.
pub struct TopKeys;

/// How many keys a result names.
pub const TOP: usize = 3;

const COUNTS: &str = "counts";

impl Aggregate for TopKeys {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        for (key, count) in batch.values("key").zip(batch.values("count")) {
            let key = key
                .and_then(Value::to_text)
                .ok_or("event without a text or integer `key`")?;
            let count = count
                .and_then(Value::as_int)
                .ok_or("event without an integer `count`")?;
            let before = state.map_get(COUNTS, &key).and_then(|v| v.as_int());
            state.map_put(COUNTS, &key, before.unwrap_or(0).saturating_add(count));
        }
        Ok(())
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        for key in source.map_entries(COUNTS) {
            let count = source.map_get(COUNTS, &key).and_then(|v| v.as_int());
            let before = target.map_get(COUNTS, &key).and_then(|v| v.as_int());
            let total = before.unwrap_or(0).saturating_add(count.unwrap_or(0));
            target.map_put(COUNTS, &key, total);
        }
        Ok(())
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        let mut counts: Vec<(i64, String)> = state
            .map_entries(COUNTS)
            .into_iter()
            .map(|key| {
                let count = state.map_get(COUNTS, &key).and_then(|v| v.as_int());
                (count.unwrap_or(0), key)
            })
            .collect();
        counts.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let mut output = Output::new();
        for (rank, (count, key)) in counts.into_iter().take(TOP).enumerate() {
            output = output
                .with(format!("key_{}", rank + 1), key)
                .with(format!("count_{}", rank + 1), count);
        }
        Ok(output)
    }
}

weir_sdk::export_aggregate!(TopKeys);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    fn results(rows: &[(&str, i64)]) -> Events {
        rows.iter()
            .fold(Events::new(["key", "count"]), |batch, (key, count)| {
                batch.with_row(1, [Value::from(*key), Value::from(*count)])
            })
    }

    #[test]
    fn names_the_three_highest_counts_with_ties_to_the_lower_key() {
        let memory = MemoryState::new("*");
        TopKeys::add(&memory.state(), &results(&[("b", 5), ("a", 5), ("c", 9)])).unwrap();
        let other = MemoryState::new("*");
        TopKeys::add(&other.state(), &results(&[("d", 1), ("b", 1)])).unwrap();
        TopKeys::merge(&memory.state(), &other.state()).unwrap();
        let window = Window { start: 0, end: 10 };
        let expected = Output::new()
            .with("key_1", "c")
            .with("count_1", 9)
            .with("key_2", "b")
            .with("count_2", 6)
            .with("key_3", "a")
            .with("count_3", 5);
        assert_eq!(TopKeys::finish(&memory.state(), window).unwrap(), expected);
        let bad = Events::new(["key"]).with_row(1, ["a"]);
        assert!(TopKeys::add(&memory.state(), &bad).is_err());
    }
}
