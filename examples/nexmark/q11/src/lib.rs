//! Nexmark Q11, user sessions: per bidder session (a session window with a gap of 10 s), the
//! number of bids. Native twin: `native = "nexmark-q11"`.

use weir_sdk::{Aggregate, Events, Output, State, Window};

/// The bids-per-session aggregate.
pub struct SessionBids;

impl Aggregate for SessionBids {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        state.add_int("bids", batch.len() as i64);
        Ok(())
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        target.add_int("bids", source.get_int("bids").unwrap_or(0));
        Ok(())
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        Ok(Output::new().with("bids", state.get_int("bids").unwrap_or(0)))
    }
}

weir_sdk::export_aggregate!(SessionBids);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    #[test]
    fn counts_bids_and_merges_sessions() {
        let (a, b) = (MemoryState::new("1001"), MemoryState::new("1001"));
        let batch = Events::new(["price"]).with_row(1, [5]).with_row(2, [6]);
        SessionBids::add(&a.state(), &batch).unwrap();
        SessionBids::add(&b.state(), &batch).unwrap();
        SessionBids::merge(&a.state(), &b.state()).unwrap();
        let window = Window {
            start: 0,
            end: 10_002,
        };
        assert_eq!(
            SessionBids::finish(&a.state(), window).unwrap(),
            Output::new().with("bids", 4)
        );
    }
}
