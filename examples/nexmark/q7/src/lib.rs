//! Nexmark Q7, highest bid: per tumbling window, the bid with the highest price (a tie goes to
//! the lower auction id, then the lower bidder id, so the result does not depend on arrival
//! order). Native twin: `native = "nexmark-q7"`.
//!
//! The pipeline keys bids by a field every bid has the same value of (`kind`), so each window
//! has one key: the single-stage form of a global aggregate.

use std::cmp::Reverse;

use weir_sdk::{Aggregate, Events, Output, State, Value, Window};

/// The highest-bid aggregate.
pub struct HighestBid;

/// A bid as Q7 ranks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ranked {
    price: i64,
    auction: i64,
    bidder: i64,
}

impl Ranked {
    fn beats(self, other: Option<Ranked>) -> bool {
        other.is_none_or(|other| {
            (self.price, Reverse(self.auction), Reverse(self.bidder))
                > (other.price, Reverse(other.auction), Reverse(other.bidder))
        })
    }

    fn load(state: &State) -> Option<Ranked> {
        Some(Ranked {
            price: state.get_int("price")?,
            auction: state.get_int("auction")?,
            bidder: state.get_int("bidder")?,
        })
    }

    fn store(self, state: &State) {
        state.put("price", self.price);
        state.put("auction", self.auction);
        state.put("bidder", self.bidder);
    }
}

/// The ints of the column `name`, or the batch's error.
fn ints<'a>(batch: &'a Events, name: &'a str) -> impl Iterator<Item = Result<i64, String>> + 'a {
    batch.values(name).map(move |value| {
        value
            .and_then(Value::as_int)
            .ok_or_else(|| format!("bid without an integer `{name}` field"))
    })
}

impl Aggregate for HighestBid {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        let mut best = Ranked::load(state);
        let columns = ints(batch, "price")
            .zip(ints(batch, "auction"))
            .zip(ints(batch, "bidder"));
        for ((price, auction), bidder) in columns {
            let bid = Ranked {
                price: price?,
                auction: auction?,
                bidder: bidder?,
            };
            if bid.beats(best) {
                best = Some(bid);
            }
        }
        if let Some(best) = best {
            best.store(state);
        }
        Ok(())
    }

    fn merge(target: &State, source: &State) -> Result<(), String> {
        if let Some(bid) = Ranked::load(source)
            && bid.beats(Ranked::load(target))
        {
            bid.store(target);
        }
        Ok(())
    }

    fn finish(state: &State, _window: Window) -> Result<Output, String> {
        let best = Ranked::load(state).ok_or("a window without a bid has no highest bid")?;
        Ok(Output::new()
            .with("auction", best.auction)
            .with("bidder", best.bidder)
            .with("price", best.price))
    }
}

weir_sdk::export_aggregate!(HighestBid);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::MemoryState;

    fn bids(rows: &[[i64; 3]]) -> Events {
        rows.iter()
            .fold(Events::new(["price", "auction", "bidder"]), |batch, row| {
                batch.with_row(1, *row)
            })
    }

    #[test]
    fn the_highest_price_wins_and_ties_go_to_the_lower_ids() {
        let memory = MemoryState::new("bid");
        HighestBid::add(&memory.state(), &bids(&[[5, 1_002, 9], [7, 1_003, 9]])).unwrap();
        HighestBid::add(&memory.state(), &bids(&[[7, 1_001, 9], [7, 1_001, 3]])).unwrap();
        let window = Window {
            start: 0,
            end: 10_000,
        };
        let output = HighestBid::finish(&memory.state(), window).unwrap();
        let expected = Output::new()
            .with("auction", 1_001)
            .with("bidder", 3)
            .with("price", 7);
        assert_eq!(output, expected);
        let other = MemoryState::new("bid");
        HighestBid::add(&other.state(), &bids(&[[8, 1_005, 1]])).unwrap();
        HighestBid::merge(&memory.state(), &other.state()).unwrap();
        assert_eq!(memory.get("price"), Some(Value::Int(8)));
    }
}
