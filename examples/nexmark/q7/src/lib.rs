//! Nexmark Q7, highest bid: per tumbling window, the bid with the highest price (a tie goes to
//! the lower auction id, then the lower bidder id, so the result does not depend on arrival
//! order). Native twin: `native = "nexmark-q7"`.
//!
//! The pipeline keys bids by a field every bid has the same value of (`kind`), so each window
//! has one key: the single-stage form of a global aggregate.

use std::cmp::Reverse;

use weir_sdk::{Aggregate, Columns, Events, Output, State, Value, Window};

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

/// Keeps the highest of `bids` and the state's, or the first bid's error (the state is then
/// left as it was).
fn keep_highest(
    state: &State,
    bids: impl Iterator<Item = Result<Ranked, String>>,
) -> Result<(), String> {
    let mut best = Ranked::load(state);
    for bid in bids {
        let bid = bid?;
        if bid.beats(best) {
            best = Some(bid);
        }
    }
    if let Some(best) = best {
        best.store(state);
    }
    Ok(())
}

impl Aggregate for HighestBid {
    fn add(state: &State, batch: &Events) -> Result<(), String> {
        let columns = ints(batch, "price")
            .zip(ints(batch, "auction"))
            .zip(ints(batch, "bidder"));
        let bids = columns.map(|((price, auction), bidder)| {
            Ok(Ranked {
                price: price?,
                auction: auction?,
                bidder: bidder?,
            })
        });
        keep_highest(state, bids)
    }

    /// What `add` does, with the three fields read as slices when each is all integers.
    fn add_columns(state: &State, batch: &Columns) -> Result<(), String> {
        let (Some(prices), Some(auctions), Some(bidders)) = (
            batch.ints("price"),
            batch.ints("auction"),
            batch.ints("bidder"),
        ) else {
            return Self::add(state, batch.events());
        };
        let bids =
            (prices.iter().zip(auctions).zip(bidders)).map(|((&price, &auction), &bidder)| {
                Ok(Ranked {
                    price,
                    auction,
                    bidder,
                })
            });
        keep_highest(state, bids)
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
    use weir_sdk::testing::{MemoryState, assert_add_columns_agrees, with_columns};

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

    /// `add_columns` leaves the same state and error as `add`: integer bids (read as slices),
    /// a float price, a missing bidder, a batch mixing a good bid with a float-priced one
    /// (refused whole, then taken a bid at a time as the host does: the good one counts), and
    /// no bids.
    #[test]
    fn add_columns_does_what_add_does() {
        let float_price = Events::new(["price", "auction", "bidder"])
            .with_row(1, [Value::Float(9.5), Value::Int(1), Value::Int(2)]);
        let no_bidder = Events::new(["price", "auction"]).with_row(1, [9, 1]);
        let mixed = Events::new(["price", "auction", "bidder"])
            .with_row(1, [Value::Int(50), Value::Int(1_004), Value::Int(8)])
            .with_row(2, [Value::Float(60.5), Value::Int(1_005), Value::Int(8)]);
        let batches = [
            bids(&[[5, 1_002, 9], [7, 1_003, 9]]),
            float_price,
            bids(&[[7, 1_001, 9], [7, 1_001, 3]]),
            no_bidder,
            mixed,
            bids(&[]),
        ];
        let reached = assert_add_columns_agrees::<HighestBid>(&MemoryState::new("bid"), &batches);
        let highest =
            |memory: &MemoryState| ["price", "auction", "bidder"].map(|field| memory.get(field));
        assert_eq!(
            highest(&reached),
            [Value::Int(50), Value::Int(1_004), Value::Int(8)].map(Some),
            "the good bid of the mixed batch is the highest, its float-priced neighbour refused"
        );
        let before_mixed =
            assert_add_columns_agrees::<HighestBid>(&MemoryState::new("bid"), &batches[..4]);
        assert_eq!(before_mixed.get("bidder"), Some(Value::Int(3)));
        // Integer bids reach `add_columns` as slices: the check above compared its slice path,
        // not only its fallback to `add`.
        with_columns(&batches[0], |columns| {
            assert!(columns.ints("price").is_some())
        });
    }
}
