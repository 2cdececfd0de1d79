//! Nexmark Q5, hot items, first stage: the number of bids per auction in each sliding window
//! (10 s, every 2 s), as `count`. The second stage (`examples/top-keys`, keyed by nothing,
//! tumbling windows of the slide) names the auctions with the most bids per window. Native
//! twin: `native = "nexmark-q5"`.

use weir_sdk::{Aggregate, Events, Output, State, Window};

/// The bids-per-auction count.
pub struct BidCount;

impl Aggregate for BidCount {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        state.add_int("count", batch.len() as i64);
        Ok(())
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        target.add_int("count", source.get_int("count").unwrap_or(0));
        Ok(())
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        Ok(Output::new().with("count", state.get_int("count").unwrap_or(0)))
    }
}

weir_sdk::export_aggregate!(BidCount);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    #[test]
    fn counts_bids() {
        let memory = MemoryState::new("1000");
        let batch = Events::new(["price"]).with_row(1, [5]).with_row(2, [6]);
        BidCount::add(&memory.state(), &batch).unwrap();
        let window = Window {
            start: 0,
            end: 10_000,
        };
        assert_eq!(
            BidCount::finish(&memory.state(), window).unwrap(),
            Output::new().with("count", 2)
        );
    }
}
