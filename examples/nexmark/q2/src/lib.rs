//! Nexmark Q2, selection: the auction and price of the bids on auctions whose id is a multiple
//! of 123. Native twin: `native = "nexmark-q2"`.

use weir_sdk::{Enrich, Events, OutputEvent, OutputEvents, State, Value};

/// The selection.
pub struct Selection;

/// The int at `column` of a row, or the batch's error.
fn int(event: &weir_sdk::Event, column: Option<usize>, name: &str) -> Result<i64, String> {
    column
        .and_then(|column| event.get(column))
        .and_then(Value::as_int)
        .ok_or_else(|| format!("bid without an integer `{name}` field"))
}

impl Enrich for Selection {
    fn process(_state: &State, batch: Events) -> Result<OutputEvents, String> {
        let (auction_column, price_column) = (batch.column("auction"), batch.column("price"));
        let mut output = OutputEvents::new(["auction", "price"]);
        for (origin, event) in batch.rows.iter().enumerate() {
            let auction = int(event, auction_column, "auction")?;
            if auction % 123 == 0 {
                let price = int(event, price_column, "price")?;
                output.push(OutputEvent::new(
                    origin as u32,
                    event.timestamp,
                    [auction, price],
                ));
            }
        }
        Ok(output)
    }
}

weir_sdk::export_enrich!(Selection);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    #[test]
    fn keeps_bids_on_every_123rd_auction() {
        let batch = Events::new(["auction", "price"])
            .with_row(1, [1_107, 5])
            .with_row(2, [1_108, 7]);
        let output = Selection::process(&MemoryState::new("1107").state(), batch).unwrap();
        assert_eq!(output.len(), 1);
        assert_eq!(output.rows[0].values, [1_107, 5].map(Value::Int));
    }
}
