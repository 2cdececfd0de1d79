//! The native twins of the Nexmark query components in `examples/nexmark/`: the same results
//! from the same events, written against the host's types.
//!
//! - Q0 [`PassThrough`]: every event unchanged.
//! - Q1 [`Euros`]: each bid with its price in euro cents (`price * 908 / 1000`).
//! - Q2 [`Selection`]: the auction and price of bids on every 123rd auction.
//! - Q5 [`BidCount`]: per auction and sliding window, the number of bids (the first stage;
//!   `top-keys` is the second).
//! - Q7 [`HighestBid`]: per window, the highest bid (ties: the lower auction, then bidder).
//! - Q8 [`NewUsers`]: per person and window, the name and auctions opened, if both (a join).
//! - Q11 [`SessionBids`]: per bidder session, the number of bids.
//!
//! Depends on `event`, `field_name`, `time` and `value`.

use std::cmp::Reverse;

use crate::event::Event;
use std::sync::OnceLock;

use crate::field_name::FieldName;
use crate::time::Window;
use crate::value::{Fields, Value};

use super::super::{AggregateOperator, EnrichOperator, Enriched, OperatorError, Result, Scope};

/// The field `name` of `event` as an int; rejects the batch otherwise.
fn int(event: &Event, name: &str) -> Result<i64> {
    match event.fields.iter().find(|(field, _)| &**field == name) {
        Some((_, Value::Int(i))) => Ok(*i),
        _ => Err(OperatorError::Rejected(format!(
            "bid without an integer `{name}` field"
        ))),
    }
}

/// The int named `name` in the state, if any.
fn stored(scope: &Scope, name: &str) -> Option<i64> {
    match scope.state.get(name) {
        Some(Value::Int(i)) => Some(*i),
        _ => None,
    }
}

/// Q0: every event unchanged.
#[derive(Debug, Default)]
pub struct PassThrough;

impl EnrichOperator for PassThrough {
    fn process(&mut self, _scope: &mut Scope, events: &[&Event]) -> Result<Vec<Enriched>> {
        Ok(events
            .iter()
            .enumerate()
            .map(|(origin, event)| Enriched {
                origin,
                timestamp: event.timestamp,
                fields: event.fields.clone(),
            })
            .collect())
    }
}

/// Q1: bids with the price in euro cents.
#[derive(Debug, Default)]
pub struct Euros;

impl EnrichOperator for Euros {
    fn process(&mut self, _scope: &mut Scope, events: &[&Event]) -> Result<Vec<Enriched>> {
        static NAMES: OnceLock<[FieldName; 4]> = OnceLock::new();
        let names =
            NAMES.get_or_init(|| ["auction", "bidder", "price", "date_time"].map(FieldName::new));
        let mut output = Vec::with_capacity(events.len());
        for (origin, event) in events.iter().enumerate() {
            let (auction, bidder) = (int(event, "auction")?, int(event, "bidder")?);
            let euros = int(event, "price")?.saturating_mul(908) / 1_000;
            let values = [auction, bidder, euros, event.timestamp];
            output.push(Enriched {
                origin,
                timestamp: event.timestamp,
                fields: names.iter().cloned().zip(values.map(Value::Int)).collect(),
            });
        }
        Ok(output)
    }
}

/// Q2: the auction and price of the bids on auctions whose id is a multiple of 123.
#[derive(Debug, Default)]
pub struct Selection;

impl EnrichOperator for Selection {
    fn process(&mut self, _scope: &mut Scope, events: &[&Event]) -> Result<Vec<Enriched>> {
        static NAMES: OnceLock<[FieldName; 2]> = OnceLock::new();
        let names = NAMES.get_or_init(|| ["auction", "price"].map(FieldName::new));
        let mut output = Vec::new();
        for (origin, event) in events.iter().enumerate() {
            let auction = int(event, "auction")?;
            if auction % 123 == 0 {
                let values = [auction, int(event, "price")?].map(Value::Int);
                output.push(Enriched {
                    origin,
                    timestamp: event.timestamp,
                    fields: names.iter().cloned().zip(values).collect(),
                });
            }
        }
        Ok(output)
    }
}

/// Q7: the highest bid of each window.
#[derive(Debug, Default)]
pub struct HighestBid;

/// A bid as Q7 ranks it: by price, then the lower auction and bidder win a tie.
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

    fn load(scope: &Scope) -> Option<Ranked> {
        Some(Ranked {
            price: stored(scope, "price")?,
            auction: stored(scope, "auction")?,
            bidder: stored(scope, "bidder")?,
        })
    }

    fn store(self, scope: &mut Scope) {
        scope.state.put("price", Value::Int(self.price));
        scope.state.put("auction", Value::Int(self.auction));
        scope.state.put("bidder", Value::Int(self.bidder));
    }
}

impl AggregateOperator for HighestBid {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        let mut best = Ranked::load(scope);
        for event in events {
            let bid = Ranked {
                price: int(event, "price")?,
                auction: int(event, "auction")?,
                bidder: int(event, "bidder")?,
            };
            if bid.beats(best) {
                best = Some(bid);
            }
        }
        if let Some(best) = best {
            best.store(scope);
        }
        Ok(())
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        if let Some(bid) = Ranked::load(source)
            && bid.beats(Ranked::load(target))
        {
            bid.store(target);
        }
        Ok(())
    }

    fn finish(&mut self, scope: &mut Scope, _window: Window) -> Result<Fields> {
        let best = Ranked::load(scope).ok_or_else(|| {
            OperatorError::Rejected("a window without a bid has no highest bid".into())
        })?;
        Ok(vec![
            ("auction".into(), Value::Int(best.auction)),
            ("bidder".into(), Value::Int(best.bidder)),
            ("price".into(), Value::Int(best.price)),
        ])
    }
}

/// Q11: the number of bids in each bidder's session.
#[derive(Debug, Default)]
pub struct SessionBids;

impl AggregateOperator for SessionBids {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        let bids = stored(scope, "bids").unwrap_or(0);
        scope
            .state
            .put("bids", Value::Int(bids.saturating_add(events.len() as i64)));
        Ok(())
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        let bids = stored(target, "bids").unwrap_or(0);
        let more = stored(source, "bids").unwrap_or(0);
        target
            .state
            .put("bids", Value::Int(bids.saturating_add(more)));
        Ok(())
    }

    fn finish(&mut self, scope: &mut Scope, _window: Window) -> Result<Fields> {
        Ok(vec![(
            "bids".into(),
            Value::Int(stored(scope, "bids").unwrap_or(0)),
        )])
    }
}

/// Q5, first stage: the number of bids per auction and window.
#[derive(Debug, Default)]
pub struct BidCount;

impl AggregateOperator for BidCount {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        let count = stored(scope, "count").unwrap_or(0);
        scope.state.put(
            "count",
            Value::Int(count.saturating_add(events.len() as i64)),
        );
        Ok(())
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        let count = stored(target, "count").unwrap_or(0);
        let more = stored(source, "count").unwrap_or(0);
        target
            .state
            .put("count", Value::Int(count.saturating_add(more)));
        Ok(())
    }

    fn finish(&mut self, scope: &mut Scope, _window: Window) -> Result<Fields> {
        Ok(vec![(
            "count".into(),
            Value::Int(stored(scope, "count").unwrap_or(0)),
        )])
    }
}

/// Q8: the persons who opened an auction in the window they registered in (a window join).
#[derive(Debug, Default)]
pub struct NewUsers;

impl AggregateOperator for NewUsers {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        for event in events {
            let field = |name: &str| {
                event
                    .fields
                    .iter()
                    .find(|(field, _)| &**field == name)
                    .map(|(_, value)| value)
            };
            match field("side") {
                Some(Value::Text(side)) if side == "left" => {
                    let Some(Value::Text(name)) = field("name") else {
                        return Err(OperatorError::Rejected("a person without a name".into()));
                    };
                    scope.state.put("name", Value::Text(name.clone()));
                }
                Some(Value::Text(side)) if side == "right" => {
                    let auctions = stored(scope, "auctions").unwrap_or(0);
                    scope
                        .state
                        .put("auctions", Value::Int(auctions.saturating_add(1)));
                }
                _ => {
                    return Err(OperatorError::Rejected(
                        "an event on neither side of the join".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        if let Some(name) = source.state.get("name").cloned() {
            target.state.put("name", name);
        }
        let auctions = stored(target, "auctions").unwrap_or(0);
        let more = stored(source, "auctions").unwrap_or(0);
        target
            .state
            .put("auctions", Value::Int(auctions.saturating_add(more)));
        Ok(())
    }

    fn finish(&mut self, scope: &mut Scope, _window: Window) -> Result<Fields> {
        Ok(match (scope.state.get("name"), stored(scope, "auctions")) {
            (Some(Value::Text(name)), Some(auctions)) if auctions > 0 => vec![
                ("name".into(), Value::Text(name.clone())),
                ("auctions".into(), Value::Int(auctions)),
            ],
            _ => Vec::new(),
        })
    }
}
