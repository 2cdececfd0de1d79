//! Nexmark Q1, currency conversion: each bid with its price in euro cents (`price * 908 /
//! 1000`, rounded down). Native twin: `native = "nexmark-q1"`.

use weir_sdk::{Enrich, Events, OutputEvent, OutputEvents, State, Value};

/// The currency conversion.
pub struct Euros;

/// The int at `column` of a row, or the batch's error.
fn int(event: &weir_sdk::Event, column: Option<usize>, name: &str) -> Result<i64, String> {
    column
        .and_then(|column| event.get(column))
        .and_then(Value::as_int)
        .ok_or_else(|| format!("bid without an integer `{name}` field"))
}

impl Enrich for Euros {
    fn process(_state: &State, batch: Events) -> Result<OutputEvents, String> {
        let columns = ["auction", "bidder", "price"].map(|name| batch.column(name));
        let mut output = OutputEvents::new(["auction", "bidder", "price", "date_time"]);
        for (origin, event) in batch.rows.iter().enumerate() {
            let [auction, bidder, price] = [
                int(event, columns[0], "auction")?,
                int(event, columns[1], "bidder")?,
                int(event, columns[2], "price")?,
            ];
            let euros = price.saturating_mul(908) / 1_000;
            output.push(OutputEvent::new(
                origin as u32,
                event.timestamp,
                [auction, bidder, euros, event.timestamp],
            ));
        }
        Ok(output)
    }
}

weir_sdk::export_enrich!(Euros);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    #[test]
    fn converts_prices_and_rejects_a_bid_without_one() {
        let batch = Events::new(["auction", "bidder", "price"]).with_row(7, [1_000, 2_000, 1_000]);
        let output = Euros::process(&MemoryState::new("bid").state(), batch).unwrap();
        assert_eq!(
            output.rows[0].values,
            [1_000, 2_000, 908, 7].map(Value::Int)
        );
        let bad = Events::new(["auction", "bidder"]).with_row(7, [1_000, 2_000]);
        let error = Euros::process(&MemoryState::new("bid").state(), bad).unwrap_err();
        assert_eq!(error, "bid without an integer `price` field");
    }
}
