//! Test fixture: an enricher that numbers each key's events in its state (`n`: 1, 2, 3, ...)
//! and, for an event with a `bad` field, names an origin outside its batch, an output the host
//! must refuse. A refused call must leave the state as it was: were its writes kept, the events
//! retried one by one would be numbered twice over and `n` would skip.

use weir_sdk::{Enrich, Events, OutputEvents, State};

/// The numbering enricher.
pub struct EnrichBadOrigin;

impl Enrich for EnrichBadOrigin {
    fn process(state: &State, batch: Events) -> Result<OutputEvents, String> {
        let bad = batch.column("bad");
        let outside = u32::try_from(batch.len()).unwrap_or(u32::MAX - 100) + 100;
        let mut output = batch.into_output();
        let n = output.add_column("n");
        for event in &mut output.rows {
            event.set(n, state.add_int("seen", 1));
            if bad.is_some_and(|column| event.get(column).is_some()) {
                event.origin = outside;
            }
        }
        Ok(output)
    }
}

weir_sdk::export_enrich!(EnrichBadOrigin);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::Value;
    use weir_sdk::testing::MemoryState;

    #[test]
    fn numbers_events_and_sends_bad_ones_outside_the_batch() {
        let memory = MemoryState::new("a");
        let batch = Events::new(["id", "bad"])
            .with_row(1, [Value::from(1), Value::Null])
            .with_row(2, [Value::from(2), Value::from(true)]);
        let output = EnrichBadOrigin::process(&memory.state(), batch).unwrap();
        let n = output.column("n").unwrap();
        let numbers: Vec<_> = output.rows.iter().map(|e| e.get(n).cloned()).collect();
        assert_eq!(numbers, [Some(Value::Int(1)), Some(Value::Int(2))]);
        assert_eq!(output.rows[0].origin, 0);
        assert_eq!(output.rows[1].origin, 102);
    }
}
