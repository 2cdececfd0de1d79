//! Nexmark Q0, pass-through: every event unchanged. It measures what the pipeline costs around
//! an operator that does nothing. Native twin: `native = "nexmark-q0"`.

use weir_sdk::{Enrich, Events, OutputEvents, State};

/// The pass-through operator.
pub struct PassThrough;

impl Enrich for PassThrough {
    fn process(_state: &State, batch: Events) -> Result<OutputEvents, String> {
        Ok(batch.into_output())
    }
}

weir_sdk::export_enrich!(PassThrough);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    #[test]
    fn every_event_passes_unchanged() {
        let batch = Events::new(["auction", "price"])
            .with_row(1, [1_000, 5])
            .with_row(2, [1_001, 7]);
        let output = PassThrough::process(&MemoryState::new("bid").state(), batch).unwrap();
        assert_eq!(output.len(), 2);
        assert_eq!(output.fields, ["auction", "price"]);
    }
}
