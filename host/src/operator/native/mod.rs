//! Native operators, compiled into the host: the twins of example components that benchmarks
//! compare Wasm against, each with exactly its component's results. A spec names one with
//! `native = "<name>"`; [`AGGREGATES`] and [`ENRICHERS`] list them. Depends on `event`,
//! `field_name`, `time` and `value`.

mod count_sum;
mod nexmark;
mod top_keys;

pub use count_sum::{NativeCountSum, plus};

/// The native count-sum's name, the one native aggregate that reads the router's crossings.
pub const COUNT_SUM: &str = "count-sum";

/// The field whose crossings the native aggregate `name` reads, if it reads any.
pub fn crossing_field(name: &str) -> Option<&'static str> {
    (name == COUNT_SUM).then_some(count_sum::AMOUNT)
}

use super::{AggregateOperator, EnrichOperator};

/// The native aggregates, by the name a spec gives.
pub const AGGREGATES: [&str; 6] = [
    COUNT_SUM,
    "top-keys",
    "nexmark-q5",
    "nexmark-q7",
    "nexmark-q8",
    "nexmark-q11",
];
/// The native enrichment operators, by the name a spec gives.
pub const ENRICHERS: [&str; 3] = ["nexmark-q0", "nexmark-q1", "nexmark-q2"];

/// A new instance of the native aggregate `name`, if there is one.
pub fn aggregate(name: &str) -> Option<Box<dyn AggregateOperator>> {
    Some(match name {
        COUNT_SUM => Box::new(NativeCountSum),
        "top-keys" => Box::new(top_keys::TopKeys),
        "nexmark-q5" => Box::new(nexmark::BidCount),
        "nexmark-q7" => Box::new(nexmark::HighestBid),
        "nexmark-q8" => Box::new(nexmark::NewUsers),
        "nexmark-q11" => Box::new(nexmark::SessionBids),
        _ => return None,
    })
}

/// A new instance of the native enrichment operator `name`, if there is one.
pub fn enrich(name: &str) -> Option<Box<dyn EnrichOperator>> {
    Some(match name {
        "nexmark-q0" => Box::new(nexmark::PassThrough),
        "nexmark-q1" => Box::new(nexmark::Euros),
        "nexmark-q2" => Box::new(nexmark::Selection),
        _ => return None,
    })
}
