//! [`IntervalJoin`]: a shard's interval join (`[join] type = "interval"`). Each event, already
//! put on its side and keyed by its side's key field by the router's joiner, is paired with
//! every event of the other side and the same key whose time is within the bounds (a left event
//! at `t` with the right events at `t + lower ..= t + upper`), and kept for the events still to
//! come. A pair becomes one event, at the arrival index of the later of the two and the time of
//! the later of the two, with the left event's fields as `left_<name>` and the right's as
//! `right_<name>`; the enrichers and the aggregate see pairs only.
//!
//! Late events (behind the watermark at their arrival, as Flink judges them) pair with nothing
//! and go to the late output. A kept event is dropped once the watermark has passed the last
//! time at which a non-late event could still pair with it, so state stays bounded by the
//! watermark. Kept events live in the shard's state (under [`INTERVAL_JOIN_OPERATOR`]), so they
//! are checkpointed with it.
//!
//! Depends on `event`, `field_name`, `hashing`, `spec`, `state`, `time`, `value` and `window`
//! (for its output types), and of `pipeline` on `deadlines` and `outcome`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::deadlines::Deadlines;
use super::outcome::{Rejects, ShardError};
use crate::event::{DeadCause, DeadLetter, Event, Staged};
use crate::field_name::FieldName;
use crate::hashing::HashMap;
use crate::spec::{IntervalBounds, SIDE_FIELD};
use crate::state::{Namespace, ScopeState, StateBackend, StateKey, TableRow, key_group};
use crate::time::Millis;
use crate::value::Value;
use crate::window::LateEvent;

/// The operator index an interval join's state is kept under (apart from the chain's).
pub const INTERVAL_JOIN_OPERATOR: u16 = u16::MAX - 1;

const LEFT: &str = "left";
const RIGHT: &str = "right";

/// A shard's interval join.
#[derive(Debug)]
pub struct IntervalJoin {
    bounds: IntervalBounds,
    /// Once the watermark passes a key's deadline, some of its kept events expire.
    expiry: Deadlines,
    /// The pairs' field names (`left_<name>`, `right_<name>`), made once each.
    names: PrefixedNames,
}

/// Where a kept event sorts in its side's map: by time, then arrival.
fn entry_key(timestamp: Millis, seq: u64) -> String {
    format!("{:016x}.{seq:016x}", (timestamp as u64) ^ (1 << 63))
}

fn entry_time(entry: &str) -> Option<Millis> {
    let hex = entry.split('.').next()?;
    Some((u64::from_str_radix(hex, 16).ok()? ^ (1 << 63)) as Millis)
}

/// A kept event's fields, in order, as stored.
fn encode_fields(fields: &[(FieldName, Value)]) -> Value {
    let pairs: Vec<serde_json::Value> = fields
        .iter()
        .filter(|(name, _)| &**name != SIDE_FIELD)
        .map(|(name, value)| serde_json::json!([&**name, value.to_json()]))
        .collect();
    Value::Text(serde_json::Value::Array(pairs).to_string().into())
}

fn decode_fields(value: &Value) -> Option<Vec<(String, Value)>> {
    let Value::Text(text) = value else {
        return None;
    };
    let pairs: Vec<(String, serde_json::Value)> = serde_json::from_str(text).ok()?;
    Some(
        pairs
            .into_iter()
            .map(|(name, json)| (name, Value::from_json(&json)))
            .collect(),
    )
}

impl IntervalJoin {
    /// An interval join with `bounds`.
    pub fn new(bounds: IntervalBounds) -> IntervalJoin {
        IntervalJoin {
            bounds,
            expiry: Deadlines::default(),
            names: PrefixedNames::default(),
        }
    }

    fn state_key(key: &Arc<str>) -> StateKey {
        StateKey {
            group: key_group(key),
            operator: INTERVAL_JOIN_OPERATOR,
            namespace: Namespace::Global,
            key: key.clone(),
        }
    }

    /// The last time at which a non-late event can still pair with an event of `side` at
    /// `timestamp`.
    fn useful_until(&self, side: &str, timestamp: Millis) -> Millis {
        match side {
            LEFT => timestamp.saturating_add(self.bounds.upper),
            _ => timestamp.saturating_sub(self.bounds.lower),
        }
    }

    /// Re-arms the expiry of restored kept events (`rows`: this shard's part of the state
    /// table).
    pub fn restore(&mut self, rows: &[TableRow]) -> Result<(), crate::state::RowError> {
        use crate::state::RowError;
        for row in rows {
            let key = StateKey::decode(&row.key).ok_or(RowError::MalformedKey("state"))?;
            if key.operator != INTERVAL_JOIN_OPERATOR {
                continue;
            }
            let state =
                crate::state::decode_scope(&row.value).map_err(|source| RowError::Scope {
                    what: "an interval join's state",
                    source,
                })?;
            if let Some(at) = self.first_expiry(&state) {
                self.expiry.set(key.key, at);
            }
        }
        Ok(())
    }

    fn first_expiry(&self, state: &ScopeState) -> Option<Millis> {
        [LEFT, RIGHT]
            .iter()
            .filter_map(|side| {
                let first = state.maps.get(*side)?.keys().next()?;
                Some(self.useful_until(side, entry_time(first)?))
            })
            .min()
    }

    /// Pairs a batch's events (in arrival order) and returns the pairs in arrival order.
    /// `watermark_at(seq)` is the watermark when event `seq` arrived.
    pub fn run(
        &mut self,
        events: Vec<Staged>,
        state: &mut dyn StateBackend,
        watermark_at: &dyn Fn(u64) -> Millis,
        out: &mut Rejects,
    ) -> Result<Vec<Staged>, ShardError> {
        let mut pairs = Vec::new();
        for staged in events {
            let watermark = watermark_at(staged.seq);
            let event = &staged.event;
            let side = match event.fields.iter().find(|(name, _)| &**name == SIDE_FIELD) {
                Some((_, Value::Text(side))) if side == LEFT => LEFT,
                Some((_, Value::Text(side))) if side == RIGHT => RIGHT,
                _ => {
                    out.dead_letters.push(DeadLetter {
                        line: event.line,
                        raw: event.to_json().to_string(),
                        reason: "the interval join found no side on the event".into(),
                        cause: DeadCause::Join,
                    });
                    continue;
                }
            };
            if event.timestamp < watermark {
                out.late.push(LateEvent {
                    seq: staged.seq,
                    event: staged.event.clone(),
                    watermark,
                    reason: format!(
                        "late: the event's time is behind the watermark ({watermark}), so the \
                         interval join has dropped the events it could pair with"
                    ),
                });
                continue;
            }
            let key = self.expiry.own_key(&event.key);
            let state_key = Self::state_key(&key);
            let mut scope = state.take(&state_key)?;
            self.pair(&staged, side, &scope, &mut pairs)?;
            let until = self.useful_until(side, event.timestamp);
            if until >= watermark {
                scope.maps.entry(side.to_owned()).or_default().insert(
                    entry_key(event.timestamp, staged.seq),
                    encode_fields(&event.fields),
                );
                self.expiry.set_earliest(&key, until);
            }
            state.put(state_key, scope)?;
        }
        Ok(pairs)
    }

    /// The pairs of `staged` (on `side`) with the other side's kept events of its key.
    fn pair(
        &mut self,
        staged: &Staged,
        side: &str,
        scope: &ScopeState,
        pairs: &mut Vec<Staged>,
    ) -> Result<(), ShardError> {
        let event = &staged.event;
        let t = event.timestamp;
        let (other, from, to) = match side {
            LEFT => (
                RIGHT,
                t.saturating_add(self.bounds.lower),
                t.saturating_add(self.bounds.upper),
            ),
            _ => (
                LEFT,
                t.saturating_sub(self.bounds.upper),
                t.saturating_sub(self.bounds.lower),
            ),
        };
        let Some(kept) = scope.maps.get(other) else {
            return Ok(());
        };
        let range = entry_key(from, 0)..=entry_key(to, u64::MAX);
        for (entry, value) in kept.range::<String, _>(range) {
            let (Some(time), Some(fields)) = (entry_time(entry), decode_fields(value)) else {
                return Err(ShardError::Host(format!(
                    "an interval join's kept event of key {:?} is unreadable",
                    &*event.key
                )));
            };
            let own = event
                .fields
                .iter()
                .filter(|(name, _)| &**name != SIDE_FIELD);
            let own = own.map(|(name, value)| (name.to_string(), value.clone()));
            let (left, right): (Vec<_>, Vec<_>) = match side {
                LEFT => (own.collect(), fields),
                _ => (fields, own.collect()),
            };
            let sides = [(LEFT, left), (RIGHT, right)];
            let mut fields = Vec::new();
            for (prefix, side) in sides {
                let named = side
                    .into_iter()
                    .map(|(n, v)| (self.names.get(prefix, &n), v));
                fields.extend(named);
            }
            pairs.push(Staged {
                seq: staged.seq,
                event: Event {
                    line: event.line,
                    key: event.key.clone(),
                    timestamp: t.max(time),
                    fields,
                },
                origin: None,
                made_by: None,
            });
        }
        Ok(())
    }

    /// Drops the kept events that no event still to come can pair with.
    pub fn sweep(
        &mut self,
        state: &mut dyn StateBackend,
        watermark: Millis,
    ) -> Result<(), ShardError> {
        while let Some(key) = self.expiry.pop_through(watermark.saturating_sub(1)) {
            let state_key = Self::state_key(&key);
            let mut scope = state.take(&state_key)?;
            for side in [LEFT, RIGHT] {
                if let Some(kept) = scope.maps.get_mut(side) {
                    kept.retain(|entry, _| {
                        entry_time(entry).is_none_or(|t| self.useful_until(side, t) >= watermark)
                    });
                }
            }
            scope
                .maps
                .retain(|_, kept: &mut BTreeMap<String, Value>| !kept.is_empty());
            match self.first_expiry(&scope) {
                Some(at) => {
                    self.expiry.set(key, at);
                    state.put(state_key, scope)?;
                }
                None => state.remove(&state_key)?,
            }
        }
        Ok(())
    }
}

/// The pairs' field names by side and input name, so that a pair's fields cost no allocation
/// or shared lock each. At most [`MAX_PREFIXED_NAMES`] per side are kept (input may invent
/// names); the others are made each time.
#[derive(Debug, Default)]
struct PrefixedNames {
    left: HashMap<String, FieldName>,
    right: HashMap<String, FieldName>,
}

const MAX_PREFIXED_NAMES: usize = 4_096;

impl PrefixedNames {
    fn get(&mut self, side: &str, name: &str) -> FieldName {
        let names = match side {
            LEFT => &mut self.left,
            _ => &mut self.right,
        };
        if let Some(prefixed) = names.get(name) {
            return prefixed.clone();
        }
        let prefixed = FieldName::from(format!("{side}_{name}"));
        if names.len() < MAX_PREFIXED_NAMES {
            names.insert(name.to_owned(), prefixed.clone());
        }
        prefixed
    }
}

#[cfg(test)]
mod tests {
    //! The join alone, with the memory backend: bounds, late events and expiry.

    use super::*;
    use crate::state::MemoryBackend;

    fn event(seq: u64, side: &str, key: &str, ts: Millis, id: i64) -> Staged {
        Staged {
            seq,
            event: Event {
                line: seq + 1,
                key: key.into(),
                timestamp: ts,
                fields: vec![
                    ("id".into(), Value::Int(id)),
                    (SIDE_FIELD.into(), Value::Text(side.into())),
                ],
            },
            origin: None,
            made_by: None,
        }
    }

    /// `(seq, time, left_id, right_id)` of each pair.
    fn pairs(staged: &[Staged]) -> Vec<(u64, Millis, i64, i64)> {
        staged
            .iter()
            .map(|s| {
                let id = |name: &str| match s.event.fields.iter().find(|(n, _)| &**n == name) {
                    Some((_, Value::Int(i))) => *i,
                    _ => panic!("no {name} in {:?}", s.event.fields),
                };
                (s.seq, s.event.timestamp, id("left_id"), id("right_id"))
            })
            .collect()
    }

    #[test]
    fn events_pair_within_the_bounds_whichever_side_comes_first() {
        let mut join = IntervalJoin::new(IntervalBounds {
            lower: -2,
            upper: 5,
        });
        let mut state = MemoryBackend::default();
        let mut out = Rejects::default();
        let events = vec![
            event(0, "right", "a", 8, 100),  // before its left: kept
            event(1, "left", "a", 10, 1),    // pairs with 8 (10 - 2 <= 8)
            event(2, "right", "a", 15, 101), // pairs with 10 (15 <= 10 + 5)
            event(3, "right", "a", 16, 102), // too far after 10
            event(4, "right", "b", 12, 103), // another key
            event(5, "left", "a", 14, 2),    // pairs with 15 and 16 (12 ..= 19), not 8
        ];
        let joined = join
            .run(events, &mut state, &|_| Millis::MIN, &mut out)
            .unwrap();
        assert_eq!(
            pairs(&joined),
            [
                (1, 10, 1, 100),
                (2, 15, 1, 101),
                (5, 15, 2, 101),
                (5, 16, 2, 102)
            ]
        );
        assert!(out.late.is_empty() && out.dead_letters.is_empty());
    }

    #[test]
    fn late_events_pair_with_nothing_and_kept_events_expire_with_the_watermark() {
        let bounds = IntervalBounds { lower: 0, upper: 5 };
        let mut join = IntervalJoin::new(bounds);
        let mut state = MemoryBackend::default();
        let mut out = Rejects::default();
        let first = vec![event(0, "left", "a", 10, 1)];
        join.run(first, &mut state, &|_| 0, &mut out).unwrap();
        join.sweep(&mut state, 15).unwrap();
        assert!(!join.expiry.is_empty(), "kept while a right at 15 may come");
        join.sweep(&mut state, 16).unwrap();
        assert!(join.expiry.is_empty(), "dropped once none can");
        let key = IntervalJoin::state_key(&"a".into());
        assert!(state.take(&key).unwrap().is_empty());
        let late = vec![event(1, "right", "a", 12, 100)];
        let joined = join.run(late, &mut state, &|_| 16, &mut out).unwrap();
        assert!(joined.is_empty());
        assert_eq!(out.late.len(), 1);
    }
}
