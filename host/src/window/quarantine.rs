//! [`Parking`]: one engine's quarantine (`[quarantine]`). A key whose events trap (or, if asked,
//! are refused) in the version serving it is parked: the events that failed and every later
//! one of the key are kept here in arrival order, with the watermark each arrived at (its
//! lateness is judged there when it is re-driven), and the key's windows are held (neither
//! fired nor closed, their state untouched). A re-drive (a line in the ingest log, so every
//! replay makes it at the same place) takes a key's events back out for the engine to add
//! through the version then serving it; a key parked longer than the TTL of event time gives
//! its events up as dead letters. Bounded per key and in all: what is beyond becomes a dead
//! letter with the reason.
//!
//! A checkpoint stores each parked key as one row of the `windows` table under the
//! impossible window [`PARKED`], so parking is exactly once with everything else.
//!
//! The engine depends on this module; it depends on `event`, `spec`, `time` and `value`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::event::Event;
use crate::spec::QuarantineSpec;
use crate::time::{MINUS_INFINITY, Millis, Window};
use crate::value::Fields;

/// The window a parked key's row is stored under: empty, so never a real one.
pub(super) const PARKED: Window = Window {
    start: MINUS_INFINITY,
    end: MINUS_INFINITY,
};

/// The watermark a failed call's events are judged at: they were on time when accepted.
pub(super) const ACCEPTED: Millis = MINUS_INFINITY;

/// One parked event.
#[derive(Debug, Clone)]
pub(super) struct ParkedEvent {
    pub(super) event: Event,
    /// The watermark its lateness is judged at ([`ACCEPTED`]: none is late).
    pub(super) at: Millis,
}

/// A parked key.
#[derive(Debug, Clone)]
pub(super) struct Parked {
    /// The watermark when it was parked: its TTL counts from there.
    pub(super) since: Millis,
    /// Why: the first failure.
    pub(super) reason: String,
    pub(super) events: Vec<ParkedEvent>,
}

/// What a checkpoint stores of a parked key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParkedRecord {
    /// See [`Parked::since`].
    pub since: Millis,
    /// See [`Parked::reason`].
    pub reason: String,
    /// The events: line, time, the watermark their lateness is judged at, fields.
    pub events: Vec<(u64, Millis, Millis, Fields)>,
}

/// A parked key as the status shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedSummary {
    /// Events kept.
    pub events: usize,
    /// Why it was parked.
    pub reason: String,
    /// The watermark when it was parked.
    pub since: Millis,
}

/// Why an event could not be kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Full(pub(super) String);

/// One engine's parked keys.
#[derive(Debug)]
pub(super) struct Parking {
    spec: QuarantineSpec,
    /// This engine's share of `spec.max_events`.
    max_events: usize,
    keys: BTreeMap<Arc<str>, Parked>,
    total: usize,
    /// Keys changed since the last checkpoint.
    touched: BTreeSet<Arc<str>>,
    /// Keys changed since the status last heard of them.
    reported: BTreeSet<Arc<str>>,
}

impl Parking {
    /// An engine's quarantine, one of `shards` sharing `spec.max_events`.
    pub(super) fn new(spec: QuarantineSpec, shards: usize) -> Parking {
        Parking {
            spec,
            max_events: spec.max_events.div_ceil(shards.max(1)),
            keys: BTreeMap::new(),
            total: 0,
            touched: BTreeSet::new(),
            reported: BTreeSet::new(),
        }
    }

    /// Whether `key` is parked (cheap when none is).
    #[inline]
    pub(super) fn holds(&self, key: &str) -> bool {
        !self.keys.is_empty() && self.keys.contains_key(key)
    }

    /// Parks `key` at `watermark` for `reason`, unless it is parked already. Returns whether
    /// it was not.
    pub(super) fn park(&mut self, key: &Arc<str>, watermark: Millis, reason: &str) -> bool {
        if self.keys.contains_key(key) {
            return false;
        }
        self.keys.insert(
            key.clone(),
            Parked {
                since: watermark,
                reason: reason.to_owned(),
                events: Vec::new(),
            },
        );
        self.changed(key);
        true
    }

    /// Keeps `event` for parked `key`, or says why it cannot.
    pub(super) fn keep(&mut self, key: &Arc<str>, event: ParkedEvent) -> Result<(), Full> {
        let per_key = self.spec.max_events_per_key;
        let parked = self.keys.get_mut(key).expect("keeping for a parked key");
        if parked.events.len() >= per_key {
            return Err(Full(format!(
                "quarantine full: key {key:?} has {per_key} parked events (quarantine.max_events_per_key); \
                 re-drive it (POST .../quarantine/redrive) to take more"
            )));
        }
        if self.total >= self.max_events {
            return Err(Full(format!(
                "quarantine full: {} parked events in all (quarantine.max_events); re-drive keys to \
                 take more",
                self.spec.max_events
            )));
        }
        parked.events.push(event);
        self.total += 1;
        self.changed(key);
        Ok(())
    }

    /// Takes `key` out of the quarantine, with its events.
    pub(super) fn release(&mut self, key: &str) -> Option<(Arc<str>, Parked)> {
        let (key, parked) = self.keys.remove_entry(key)?;
        self.total -= parked.events.len();
        self.changed(&key);
        Some((key, parked))
    }

    /// The parked keys.
    pub(super) fn keys(&self) -> Vec<Arc<str>> {
        self.keys.keys().cloned().collect()
    }

    /// The keys parked for longer than the TTL at `watermark`.
    pub(super) fn expired(&self, watermark: Millis) -> Vec<Arc<str>> {
        if self.keys.is_empty() {
            return Vec::new();
        }
        (self.keys.iter())
            .filter(|(_, p)| p.since.saturating_add(self.spec.ttl) <= watermark)
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The TTL, for the dead letters of an expired key.
    pub(super) fn ttl(&self) -> Millis {
        self.spec.ttl
    }

    fn changed(&mut self, key: &Arc<str>) {
        self.touched.insert(key.clone());
        self.reported.insert(key.clone());
    }

    /// The keys changed since the last checkpoint, each with its record (`None`: released).
    pub(super) fn take_touched(&mut self) -> Vec<(Arc<str>, Option<ParkedRecord>)> {
        let touched = std::mem::take(&mut self.touched);
        (touched.into_iter())
            .map(|key| {
                let record = self.keys.get(&key).map(record);
                (key, record)
            })
            .collect()
    }

    /// The keys changed since the status last asked, each with its summary (`None`: released).
    pub(super) fn take_reported(&mut self) -> Vec<(Arc<str>, Option<ParkedSummary>)> {
        let reported = std::mem::take(&mut self.reported);
        (reported.into_iter())
            .map(|key| {
                let summary = self.keys.get(&key).map(|p| ParkedSummary {
                    events: p.events.len(),
                    reason: p.reason.clone(),
                    since: p.since,
                });
                (key, summary)
            })
            .collect()
    }

    /// Restores a parked key from its checkpoint record.
    pub(super) fn restore(&mut self, key: Arc<str>, record: ParkedRecord) {
        let events: Vec<ParkedEvent> = (record.events.into_iter())
            .map(|(line, timestamp, at, fields)| ParkedEvent {
                event: Event {
                    line,
                    key: (*key).into(),
                    timestamp,
                    fields: (fields.into_iter())
                        .map(|(name, value)| (name.as_str().into(), value))
                        .collect(),
                },
                at,
            })
            .collect();
        self.total += events.len();
        self.reported.insert(key.clone());
        self.keys.insert(
            key,
            Parked {
                since: record.since,
                reason: record.reason,
                events,
            },
        );
    }
}

fn record(parked: &Parked) -> ParkedRecord {
    ParkedRecord {
        since: parked.since,
        reason: parked.reason.clone(),
        events: (parked.events.iter())
            .map(|p| {
                let fields = (p.event.fields.iter())
                    .map(|(name, value)| (name.to_string(), value.clone()))
                    .collect();
                (p.event.line, p.event.timestamp, p.at, fields)
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Value;

    fn spec(per_key: usize, all: usize) -> QuarantineSpec {
        QuarantineSpec {
            max_events_per_key: per_key,
            max_events: all,
            ttl: 1_000,
            errors: false,
        }
    }

    fn event(key: &str, timestamp: Millis) -> ParkedEvent {
        ParkedEvent {
            event: Event {
                line: 1,
                key: key.into(),
                timestamp,
                fields: vec![("amount".into(), Value::Int(1))],
            },
            at: 5,
        }
    }

    #[test]
    fn keys_are_bounded_each_and_in_all_and_survive_a_checkpoint() {
        let mut parking = Parking::new(spec(2, 6), 2);
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        assert!(parking.park(&a, 100, "trapped"));
        assert!(!parking.park(&a, 200, "again"));
        assert!(parking.keep(&a, event("a", 1)).is_ok());
        assert!(parking.keep(&a, event("a", 2)).is_ok());
        let full = parking.keep(&a, event("a", 3)).unwrap_err();
        assert!(full.0.contains("max_events_per_key"), "{full:?}");
        parking.park(&b, 100, "trapped");
        parking.keep(&b, event("b", 1)).unwrap();
        // This engine's share of 6 over 2 shards is 3.
        assert!(
            parking
                .keep(&b, event("b", 2))
                .unwrap_err()
                .0
                .contains("in all")
        );
        assert_eq!(parking.expired(1_099), Vec::<Arc<str>>::new());
        assert_eq!(parking.expired(1_100), vec![a.clone(), b.clone()]);

        let rows = parking.take_touched();
        assert_eq!(rows.len(), 2);
        let mut restored = Parking::new(spec(2, 6), 2);
        for (key, record) in rows {
            restored.restore(key, record.unwrap());
        }
        let (_, parked) = restored.release("a").unwrap();
        assert_eq!(parked.reason, "trapped");
        assert_eq!(parked.events.len(), 2);
        assert_eq!(parked.events[1].event.timestamp, 2);
        assert_eq!(parked.events[1].at, 5);
        assert!(!restored.holds("a"));
        assert!(restored.holds("b"));
        assert_eq!(restored.take_touched(), vec![(a, None)]);
    }
}
