//! [`Nexmark`]: the event stream of the Nexmark benchmark (persons, auctions and bids in the
//! 1:3:46 mix), generated to the definition of Beam's and Flink's Nexmark generators.
//!
//! Event number `n` is a person, an auction or a bid by `n % 50`; its `date_time` is
//! `base_time + n * 1000 / rate`; ids follow the benchmark's rules (a person or auction id is
//! the count of persons or auctions before it plus 1000; an auction's seller and a bid's bidder
//! are recent persons, a bid's auction one of the auctions in flight, with the benchmark's hot
//! sellers, bidders and auctions). The random choices of event `n` come from a generator seeded
//! by the spec's seed and `n` alone, so any event can be generated without the ones before it:
//! the same spec gives the same events, and a resumed run continues exactly.
//!
//! Depends on `spec`, `event`, `field_name`, `time` and `value`.

use compact_str::{CompactString, format_compact};

use super::{Record, Source, SourceError, SourcePosition};
use crate::event::Event;
use crate::field_name::FieldName;
use crate::spec::{NexmarkKind, NexmarkSpec};
use crate::time::Millis;
use crate::value::Value;

const PERSON_PROPORTION: u64 = 1;
const AUCTION_PROPORTION: u64 = 3;
const TOTAL_PROPORTION: u64 = 50;
const FIRST_PERSON_ID: u64 = 1_000;
const FIRST_AUCTION_ID: u64 = 1_000;
const FIRST_CATEGORY_ID: u64 = 10;
const CATEGORIES: u64 = 5;
const ACTIVE_PEOPLE: u64 = 1_000;
const IN_FLIGHT_AUCTIONS: u64 = 100;
const PERSON_ID_LEAD: u64 = 10;
const AUCTION_ID_LEAD: u64 = 10;
/// Hot ids are the first of each run of this many.
const HOT_RUN: u64 = 100;
/// One in this many choices is not hot (Beam's defaults: half the bids go to hot auctions,
/// three quarters of auctions to hot sellers and of bids to hot bidders).
const HOT_AUCTION_RATIO: u64 = 2;
const HOT_SELLER_RATIO: u64 = 4;
const HOT_BIDDER_RATIO: u64 = 4;
const HOT_CHANNEL_RATIO: u64 = 2;
const CHANNELS: u64 = 10_000;
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const US_CITIES: [&str; 10] = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
];
const FIRST_NAMES: [&str; 11] = [
    "Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter",
];
const LAST_NAMES: [&str; 9] = [
    "Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris",
];

/// The Nexmark source.
#[derive(Debug)]
pub struct Nexmark {
    spec: NexmarkSpec,
    key_field: String,
    /// The next event number.
    next: u64,
    /// Field names, per kind, shared by all events.
    names: [Vec<FieldName>; 3],
    /// Which kinds are kept, by [`kind_index`].
    keep: [bool; 3],
}

fn kind_index(kind: NexmarkKind) -> usize {
    match kind {
        NexmarkKind::Person => 0,
        NexmarkKind::Auction => 1,
        NexmarkKind::Bid => 2,
    }
}

impl Nexmark {
    /// A Nexmark source for `spec`, keying events by `key_field` (a field every kept kind has:
    /// the spec checks it).
    pub fn new(spec: NexmarkSpec, key_field: &str) -> Nexmark {
        let names = [NexmarkKind::Person, NexmarkKind::Auction, NexmarkKind::Bid].map(|kind| {
            kind.fields()
                .iter()
                .map(|&name| FieldName::new(name))
                .collect()
        });
        let mut keep = [false; 3];
        for &kind in &spec.kinds {
            keep[kind_index(kind)] = true;
        }
        Nexmark {
            spec,
            key_field: key_field.to_owned(),
            next: 0,
            names,
            keep,
        }
    }

    /// The kind of event number `n`.
    pub fn kind_of(n: u64) -> NexmarkKind {
        match n % TOTAL_PROPORTION {
            0 => NexmarkKind::Person,
            1..=3 => NexmarkKind::Auction,
            _ => NexmarkKind::Bid,
        }
    }

    /// The `date_time` of event number `n`.
    pub fn time_of(&self, n: u64) -> Millis {
        let offset = u128::from(n) * 1_000 / u128::from(self.spec.rate);
        self.spec
            .base_time
            .saturating_add(i64::try_from(offset).unwrap_or(i64::MAX))
    }

    /// Event number `n` as an event (whatever the kinds kept).
    pub fn event(&self, n: u64) -> Event {
        let mut random = Random::new(self.spec.seed, n);
        let time = self.time_of(n);
        let kind = Self::kind_of(n);
        let values = match kind {
            NexmarkKind::Person => person(n, time, &mut random),
            NexmarkKind::Auction => self.auction(n, time, &mut random),
            NexmarkKind::Bid => bid(n, time, &mut random),
        };
        let names = &self.names[kind_index(kind)];
        let fields: Vec<(FieldName, Value)> = names.iter().cloned().zip(values).collect();
        let key = fields
            .iter()
            .find(|(name, _)| **name == *self.key_field)
            .and_then(|(_, value)| value.as_key())
            .unwrap_or_default();
        Event {
            line: n + 1,
            key,
            timestamp: time,
            fields,
        }
    }

    fn auction(&self, n: u64, time: Millis, random: &mut Random) -> Vec<Value> {
        let id = last_auction(n) + FIRST_AUCTION_ID;
        let seller = if random.below(HOT_SELLER_RATIO) > 0 {
            (last_person(n) / HOT_RUN) * HOT_RUN
        } else {
            next_person(n, random)
        } + FIRST_PERSON_ID;
        let category = FIRST_CATEGORY_ID + random.below(CATEGORIES);
        let initial_bid = random.price();
        let reserve = initial_bid + random.price();
        // An auction runs until about when the auctions in flight after it are created.
        let horizon = self
            .time_of(n + IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION / AUCTION_PROPORTION)
            .saturating_sub(time);
        let length = random.below((horizon.max(1) as u64).saturating_mul(2));
        let expires = time
            .saturating_add(1)
            .saturating_add(i64::try_from(length).unwrap_or(i64::MAX));
        vec![
            text(NexmarkKind::Auction.name()),
            int(id),
            Value::Text(random.word(20)),
            Value::Text(random.word(100)),
            int(initial_bid),
            int(reserve),
            Value::Int(time),
            Value::Int(expires),
            int(seller),
            int(category),
        ]
    }
}

fn person(n: u64, time: Millis, random: &mut Random) -> Vec<Value> {
    let id = last_person(n) + FIRST_PERSON_ID;
    let name = format_compact!(
        "{} {}",
        FIRST_NAMES[random.below(FIRST_NAMES.len() as u64) as usize],
        LAST_NAMES[random.below(LAST_NAMES.len() as u64) as usize]
    );
    let email = format!("{}@{}.com", random.word(7), random.word(5));
    let card = (0..4)
        .map(|_| format!("{:04}", random.below(10_000)))
        .collect::<Vec<_>>()
        .join(" ");
    let city = US_CITIES[random.below(US_CITIES.len() as u64) as usize];
    let state = US_STATES[random.below(US_STATES.len() as u64) as usize];
    vec![
        text(NexmarkKind::Person.name()),
        int(id),
        Value::Text(name),
        Value::Text(email.into()),
        Value::Text(card.into()),
        text(city),
        text(state),
        Value::Int(time),
    ]
}

fn bid(n: u64, time: Millis, random: &mut Random) -> Vec<Value> {
    let auction = if random.below(HOT_AUCTION_RATIO) > 0 {
        (last_auction(n) / HOT_RUN) * HOT_RUN
    } else {
        next_auction(n, random)
    } + FIRST_AUCTION_ID;
    let bidder = if random.below(HOT_BIDDER_RATIO) > 0 {
        (last_person(n) / HOT_RUN) * HOT_RUN + 1
    } else {
        next_person(n, random)
    } + FIRST_PERSON_ID;
    let price = random.price();
    let (channel, url) = if random.below(HOT_CHANNEL_RATIO) > 0 {
        let hot = HOT_CHANNELS[random.below(HOT_CHANNELS.len() as u64) as usize];
        (
            CompactString::from(hot),
            format!("https://www.nexmark.com/{hot}/item.htm?query=1"),
        )
    } else {
        let channel = random.below(CHANNELS);
        (
            format_compact!("channel-{channel}"),
            format!(
                "https://www.nexmark.com/{}/{}/item.htm?query=1&channel_id={channel}",
                random.word(5),
                random.word(5)
            ),
        )
    };
    vec![
        text(NexmarkKind::Bid.name()),
        int(auction),
        int(bidder),
        int(price),
        Value::Text(channel),
        Value::Text(url.into()),
        Value::Int(time),
    ]
}

fn text(text: &str) -> Value {
    Value::Text(text.into())
}

fn int(n: u64) -> Value {
    Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
}

/// The base-0 id of the last person created at or before event number `n`: each run of 50
/// events starts with its one person (the benchmark's general formula,
/// `epoch * PERSON_PROPORTION + min(n % 50, PERSON_PROPORTION - 1)`, with a proportion of 1).
fn last_person(n: u64) -> u64 {
    const _: () = assert!(PERSON_PROPORTION == 1);
    n / TOTAL_PROPORTION
}

/// The base-0 id of the last auction created at or before event number `n` (0 before the
/// first one).
fn last_auction(n: u64) -> u64 {
    let epoch = n / TOTAL_PROPORTION;
    let offset = n % TOTAL_PROPORTION;
    if offset < PERSON_PROPORTION {
        (epoch * AUCTION_PROPORTION).saturating_sub(1)
    } else {
        let offset = (offset - PERSON_PROPORTION).min(AUCTION_PROPORTION - 1);
        epoch * AUCTION_PROPORTION + offset
    }
}

/// A recent person's base-0 id (possibly one a little ahead, as in the benchmark).
fn next_person(n: u64, random: &mut Random) -> u64 {
    let people = last_person(n) + 1;
    let active = people.min(ACTIVE_PEOPLE);
    people - active + random.below(active + PERSON_ID_LEAD)
}

/// An auction in flight's base-0 id (possibly one a little ahead, as in the benchmark).
fn next_auction(n: u64, random: &mut Random) -> u64 {
    let last = last_auction(n);
    let first = last.saturating_sub(IN_FLIGHT_AUCTIONS);
    first + random.below(last - first + 1 + AUCTION_ID_LEAD)
}

/// SplitMix64, seeded per event.
struct Random(u64);

impl Random {
    fn new(seed: u64, n: u64) -> Random {
        let mut random = Random(seed ^ n.wrapping_mul(0xd1b5_4a32_d192_ed03));
        random.next();
        random
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform below `bound` (≥ 1).
    fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(bound.max(1))) >> 64) as u64
    }

    /// A price in cents, log-uniform from $1 to $1,000,000, as the benchmark's.
    fn price(&mut self) -> u64 {
        let unit = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        (10f64.powf(unit * 6.0) * 100.0).round() as u64
    }

    /// `len` random lowercase letters (inside the value up to 24).
    fn word(&mut self, len: usize) -> CompactString {
        (0..len)
            .map(|_| char::from(b'a' + self.below(26) as u8))
            .collect()
    }
}

impl Source for Nexmark {
    fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        while self.next < self.spec.events {
            let n = self.next;
            self.next += 1;
            if self.keep[kind_index(Self::kind_of(n))] {
                return Ok(Some(Record::Event(self.event(n))));
            }
        }
        Ok(None)
    }

    fn position(&self) -> SourcePosition {
        SourcePosition {
            line: self.next,
            ..SourcePosition::default()
        }
    }

    fn resume(&mut self, position: &SourcePosition) -> Result<(), SourceError> {
        self.next = position.line;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(events: u64) -> NexmarkSpec {
        NexmarkSpec {
            events,
            rate: 1_000,
            seed: 7,
            kinds: NexmarkKind::all(),
            base_time: 0,
        }
    }

    fn field<'a>(event: &'a Event, name: &str) -> &'a Value {
        &event.fields.iter().find(|(n, _)| &**n == name).unwrap().1
    }

    fn drain(source: &mut Nexmark) -> Vec<Event> {
        std::iter::from_fn(|| match source.next_record().unwrap() {
            Some(Record::Event(event)) => Some(event),
            _ => None,
        })
        .collect()
    }

    #[test]
    fn the_mix_ids_and_times_follow_the_benchmark() {
        let events = drain(&mut Nexmark::new(spec(5_000), "kind"));
        let count = |kind: &str| {
            events
                .iter()
                .filter(|e| field(e, "kind") == &Value::Text(kind.into()))
                .count()
        };
        assert_eq!(
            (count("person"), count("auction"), count("bid")),
            (100, 300, 4_600)
        );
        assert_eq!(events[0].timestamp, 0);
        assert_eq!(events[1_000].timestamp, 1_000);
        assert_eq!(field(&events[0], "id"), &Value::Int(1_000));
        assert_eq!(field(&events[50], "id"), &Value::Int(1_001));
        assert_eq!(field(&events[1], "id"), &Value::Int(1_000));
        assert_eq!(field(&events[53], "id"), &Value::Int(1_005));
        // Every bid is on an auction and by a person that exists or is about to (the lead).
        for (n, event) in events.iter().enumerate() {
            if Nexmark::kind_of(n as u64) == NexmarkKind::Bid {
                let Value::Int(auction) = *field(event, "auction") else {
                    panic!()
                };
                let created = last_auction(n as u64) + FIRST_AUCTION_ID;
                assert!(auction <= (created + AUCTION_ID_LEAD) as i64, "{auction}");
                assert!(auction >= FIRST_AUCTION_ID as i64);
            }
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_events_and_a_resumed_run_continues_exactly() {
        let all = drain(&mut Nexmark::new(spec(500), "kind"));
        assert_eq!(all, drain(&mut Nexmark::new(spec(500), "kind")));
        let mut first = Nexmark::new(spec(500), "kind");
        let head: Vec<_> = (0..123).map(|_| first.next_record().unwrap()).collect();
        assert_eq!(head.len(), 123);
        let mut resumed = Nexmark::new(spec(500), "kind");
        resumed.resume(&first.position()).unwrap();
        assert_eq!(drain(&mut resumed), all[123..]);
        let mut other = spec(500);
        other.seed = 8;
        assert_ne!(all, drain(&mut Nexmark::new(other, "kind")));
    }

    #[test]
    fn kinds_filter_without_moving_ids_or_times_and_keys_come_from_the_key_field() {
        let all = drain(&mut Nexmark::new(spec(1_000), "kind"));
        let mut bids_only = spec(1_000);
        bids_only.kinds = vec![NexmarkKind::Bid];
        let bids = drain(&mut Nexmark::new(bids_only, "auction"));
        let expected: Vec<_> = all
            .iter()
            .filter(|e| field(e, "kind") == &Value::Text("bid".into()))
            .collect();
        assert_eq!(bids.len(), expected.len());
        for (bid, same) in bids.iter().zip(expected) {
            assert_eq!(bid.fields, same.fields);
            assert_eq!(
                Value::Text((&*bid.key).into()),
                Value::Text(field(bid, "auction").to_json().to_string().into())
            );
        }
    }

    #[test]
    fn prices_are_log_uniform_between_one_and_a_million_dollars() {
        let mut random = Random::new(1, 1);
        let prices: Vec<u64> = (0..10_000).map(|_| random.price()).collect();
        assert!(prices.iter().all(|&p| (100..=100_000_000).contains(&p)));
        let below_100_dollars = prices.iter().filter(|&&p| p < 10_000).count();
        assert!(
            (3_000..3_700).contains(&below_100_dollars),
            "{below_100_dollars}"
        );
    }
}
