//! [`Generator`]: a deterministic, bounded stream of events for demos and benchmarks.
//!
//! Event `i` has key `k{n}` (n pseudo-random below `keys`), timestamp
//! `i * interval_ms - delay` (delay pseudo-random up to `max_delay_ms`, giving disorder), and an
//! integer `amount` from 0 to 99. The same spec always gives the same events.

use std::sync::Arc;

use super::SourcePosition;
use super::{Record, Source, SourceError};
use crate::event::{Event, Staged};
use crate::field_name::FieldName;
use crate::spec::GeneratorSpec;
use crate::value::Value;

/// The generator source.
pub struct Generator {
    spec: GeneratorSpec,
    next: u64,
    rng: u64,
    keys: Vec<String>,
    names: [FieldName; 3],
    /// Events the pipeline is done with ([`Source::recycle`]), whose lists of fields and key
    /// texts are reused for the next events: an event costs one allocation (its key), not
    /// three. Each is looked at and emptied only when it is reused: emptying, or even sorting
    /// out, a batch of them as it came back read every one from memory once more (the router
    /// took 7-10 ns per event longer, ABBA). The pool holds at most [`MAX_SPARE`] events, and
    /// no more than the pipeline had in flight at once (each event made takes one back; each
    /// comes back only once it is done with).
    spare: Vec<Event>,
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("spec", &self.spec)
            .field("next", &self.next)
            .field("spare", &self.spare.len())
            .finish()
    }
}

/// The most spent events a generator keeps for reuse: four batches of the default size (they
/// come back a batch at a time and are taken one by one; larger batches get less reuse).
const MAX_SPARE: usize = 1 << 16;

/// The largest list of fields and text reused: a generated event's fit; an event grown larger
/// on its way (an enricher's output replaces its fields) is dropped when its turn comes.
const MAX_SPARE_FIELDS: usize = 8;
const MAX_SPARE_TEXT: usize = 64;

impl Generator {
    /// A generator for `spec`.
    pub fn new(spec: GeneratorSpec) -> Generator {
        let keys = (0..spec.keys).map(|k| format!("k{k}")).collect();
        Generator {
            rng: spec.seed,
            spec,
            next: 0,
            keys,
            names: ["key".into(), "ts".into(), "amount".into()],
            spare: Vec::new(),
        }
    }

    /// An emptied list of fields and an emptied string for the next event: a spent event's,
    /// if there is one.
    fn reused(&mut self) -> (Vec<(FieldName, Value)>, String) {
        let Some(Event { mut fields, .. }) = self.spare.pop() else {
            return (Vec::with_capacity(3), String::new());
        };
        if fields.capacity() > MAX_SPARE_FIELDS {
            return (Vec::with_capacity(3), String::new());
        }
        let text = match fields.first_mut() {
            Some((_, Value::Text(text))) if text.capacity() <= MAX_SPARE_TEXT => {
                let mut text = std::mem::take(text);
                text.clear();
                text
            }
            _ => String::new(),
        };
        fields.clear();
        (fields, text)
    }

    /// SplitMix64.
    fn random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Source for Generator {
    fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        if self.next >= self.spec.events {
            return Ok(None);
        }
        let i = self.next;
        self.next += 1;
        let pick = (self.random() % self.spec.keys) as usize;
        // Each event's own key, not a shared one: a reference count the router raises and a
        // shard reads beside it moved its cache line between cores for every event (shard
        // threads took 5-7 % longer, native and Wasm).
        let (mut fields, mut text) = self.reused();
        text.push_str(&self.keys[pick]);
        let key = Arc::from(text.as_str());
        let delay = self.random() % (self.spec.max_delay_ms + 1);
        let timestamp = (i * self.spec.interval_ms) as i64 - delay as i64;
        let amount = (self.random() % 100) as i64;
        let [key_name, ts_name, amount_name] = self.names.clone();
        fields.extend([
            (key_name, Value::Text(text)),
            (ts_name, Value::Int(timestamp)),
            (amount_name, Value::Int(amount)),
        ]);
        Ok(Some(Record::Event(Event {
            line: i + 1,
            key,
            timestamp,
            fields,
        })))
    }

    fn position(&self) -> SourcePosition {
        SourcePosition {
            line: self.next,
            offset: 0,
            rng: Some(self.rng),
            clock: None,
            files: Vec::new(),
        }
    }

    fn resume(&mut self, position: &SourcePosition) -> Result<(), SourceError> {
        self.next = position.line;
        self.rng = position.rng.unwrap_or(self.spec.seed);
        Ok(())
    }

    fn recycle(&mut self, spent: &mut Vec<Staged>) {
        // Moved, not read (see `spare`).
        let room = MAX_SPARE.saturating_sub(self.spare.len());
        (self.spare).extend(spent.drain(..).take(room).map(|staged| staged.event));
        spent.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generator() -> Generator {
        Generator::new(GeneratorSpec {
            events: 1_000,
            keys: 50,
            seed: 7,
            interval_ms: 10,
            max_delay_ms: 100,
        })
    }

    fn next(generator: &mut Generator) -> Event {
        match generator.next_record().unwrap() {
            Some(Record::Event(event)) => event,
            other => panic!("not an event: {other:?}"),
        }
    }

    /// Events made in reused memory are the events a generator makes without: spent events
    /// of any content, given back in any number, change nothing but where the next ones live;
    /// lists larger than a generated event needs are not kept.
    #[test]
    fn recycled_events_change_nothing_but_where_the_next_ones_live() {
        let mut fresh = generator();
        let expected: Vec<Event> = (0..1_000).map(|_| next(&mut fresh)).collect();
        let mut recycling = generator();
        let mut made = Vec::new();
        let mut reused = 0;
        // Of every four: a list too large to keep; room for three fields, with a text first
        // or a number first; an empty list, kept but too small for the next event.
        let spent_fields = |seq: usize| {
            let (capacity, first) = match seq % 4 {
                0 => (20, Value::Text("a longer text".into())),
                1 => (
                    3,
                    Value::Text("a text longer than a generated key's".into()),
                ),
                2 => (3, Value::Int(5)),
                _ => return Vec::new(),
            };
            let mut fields = Vec::with_capacity(capacity);
            fields.push(("other".into(), first));
            fields
        };
        while made.len() < 1_000 {
            let mut spent: Vec<Staged> = (made.len()..made.len() + 60)
                .map(|seq| Staged {
                    seq: seq as u64,
                    event: Event {
                        line: 0,
                        key: "spent".into(),
                        timestamp: -1,
                        fields: spent_fields(seq),
                    },
                    origin: None,
                })
                .collect();
            let addresses: Vec<_> = (spent.iter())
                .filter(|s| s.event.fields.capacity() == 3)
                .map(|s| s.event.fields.as_ptr())
                .collect();
            recycling.recycle(&mut spent);
            assert!(spent.is_empty());
            for _ in 0..50.min(1_000 - made.len()) {
                let event = next(&mut recycling);
                reused += usize::from(addresses.contains(&event.fields.as_ptr()));
                made.push(event);
            }
        }
        assert_eq!(made, expected);
        // Each round's 50 events take the last 50 of its 60 spent events: 25 lists with room
        // for three fields (the others too large, or too small) and the rest new.
        assert_eq!(reused, 500, "events that reused a spent one's fields");
        let mut full = generator();
        let mut many: Vec<Staged> = (0..MAX_SPARE + 10)
            .map(|seq| Staged {
                seq: seq as u64,
                event: next_or_empty(&mut full),
                origin: None,
            })
            .collect();
        full.recycle(&mut many);
        assert_eq!(
            (full.spare.len(), many.len()),
            (MAX_SPARE, 0),
            "kept up to its limit"
        );
    }

    fn next_or_empty(generator: &mut Generator) -> Event {
        match generator.next_record().unwrap() {
            Some(Record::Event(event)) => event,
            _ => Event {
                line: 0,
                key: "k".into(),
                timestamp: 0,
                fields: Vec::new(),
            },
        }
    }
}
