//! [`Inputs`]: a stage window's inputs, one per upstream result ([`Origin`]), in the order
//! their current versions arrived, and how a checkpoint stores each ([`StoredInput`]).
//!
//! The inputs are indexed by origin, so that taking a new upstream result does not scan the
//! ones the window holds: a replacement or withdrawal (rare: an update or retraction upstream)
//! still does. Before the index, a stage window holding every auction's count of one slide
//! (Nexmark Q5's second stage) cost a comparison with each earlier input per input, and those
//! comparisons were 47 % of the run.
//!
//! Depends on `event`, `field_name`, `time`, `value` and `hashing`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::event::{Event, Origin};
use crate::field_name::FieldName;
use crate::hashing::HashSet;
use crate::time::{Millis, Window};
use crate::value::{Fields, Value};

/// One upstream result's contribution to a stage's window.
#[derive(Debug, Clone)]
pub(super) struct Input {
    pub(super) origin: Origin,
    pub(super) event: Event,
}

/// One input of a stage's window, as a checkpoint stores it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredInput {
    /// The upstream result's key.
    pub key: String,
    /// The upstream result's window start.
    pub start: Millis,
    /// The upstream result's window end.
    pub end: Millis,
    /// The event's time.
    pub timestamp: Millis,
    /// The event's fields.
    pub fields: Fields,
}

impl Input {
    pub(super) fn stored(&self) -> StoredInput {
        StoredInput {
            key: self.origin.key.to_string(),
            start: self.origin.window.start,
            end: self.origin.window.end,
            timestamp: self.event.timestamp,
            fields: self
                .event
                .fields
                .iter()
                .map(|(name, value)| (name.to_string(), value.clone()))
                .collect(),
        }
    }

    pub(super) fn restored(stored: StoredInput, key: &Arc<str>) -> Input {
        Input {
            origin: Origin {
                key: stored.key.into(),
                window: Window {
                    start: stored.start,
                    end: stored.end,
                },
                withdrawn: false,
            },
            event: Event {
                line: 0,
                key: (**key).into(),
                timestamp: stored.timestamp,
                fields: stored
                    .fields
                    .into_iter()
                    .map(|(name, value): (String, Value)| (FieldName::from(name), value))
                    .collect(),
            },
        }
    }
}

/// A stage window's inputs, at most one per origin, in arrival order of their current versions.
#[derive(Debug, Clone, Default)]
pub(super) struct Inputs {
    list: Vec<Input>,
    origins: HashSet<(Arc<str>, Window)>,
}

fn id(origin: &Origin) -> (Arc<str>, Window) {
    (origin.key.clone(), origin.window)
}

impl Inputs {
    /// Adds `input`, replacing the one of the same origin (which then goes, and the new one
    /// comes last). Returns whether it replaced one.
    pub(super) fn put(&mut self, input: Input) -> bool {
        let replaced = !self.origins.insert(id(&input.origin));
        if replaced {
            self.list.retain(|kept| !kept.origin.same(&input.origin));
        }
        self.list.push(input);
        replaced
    }

    /// Removes the input of `origin`; returns whether there was one.
    pub(super) fn remove(&mut self, origin: &Origin) -> bool {
        let present = self.origins.remove(&id(origin));
        if present {
            self.list.retain(|kept| !kept.origin.same(origin));
        }
        present
    }

    /// Moves `other`'s inputs after these (sessions merging). Two sessions of a key never hold
    /// the same origin: an origin's events all have the time `window.end - 1`.
    pub(super) fn append(&mut self, other: &mut Inputs) {
        for input in other.list.drain(..) {
            let replaced = self.put(input);
            debug_assert!(!replaced, "two merging sessions held the same origin");
        }
        other.origins.clear();
    }

    /// The inputs, in order.
    pub(super) fn iter(&self) -> std::slice::Iter<'_, Input> {
        self.list.iter()
    }

    /// The `index`-th input.
    pub(super) fn get(&self, index: usize) -> &Input {
        &self.list[index]
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

impl FromIterator<Input> for Inputs {
    fn from_iter<I: IntoIterator<Item = Input>>(inputs: I) -> Self {
        let mut all = Inputs::default();
        for input in inputs {
            all.put(input);
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(key: &str, end: Millis, amount: i64) -> Input {
        Input {
            origin: Origin {
                key: key.into(),
                window: Window { start: 0, end },
                withdrawn: false,
            },
            event: Event {
                line: 0,
                key: "*".into(),
                timestamp: end - 1,
                fields: vec![(FieldName::new("amount"), Value::Int(amount))],
            },
        }
    }

    fn amounts(inputs: &Inputs) -> Vec<(String, i64)> {
        inputs
            .iter()
            .map(|input| {
                let amount = match input.event.fields[0].1 {
                    Value::Int(amount) => amount,
                    _ => unreachable!(),
                };
                (input.origin.key.to_string(), amount)
            })
            .collect()
    }

    #[test]
    fn a_replacement_goes_last_and_a_removal_only_takes_its_origin() {
        let mut inputs = Inputs::default();
        assert!(!inputs.put(input("a", 10, 1)));
        assert!(!inputs.put(input("b", 10, 2)));
        assert!(!inputs.put(input("a", 20, 3)));
        assert!(inputs.put(input("a", 10, 4)));
        assert_eq!(
            amounts(&inputs),
            [("b".into(), 2), ("a".into(), 3), ("a".into(), 4)]
        );
        assert!(inputs.remove(&input("b", 10, 0).origin));
        assert!(!inputs.remove(&input("b", 10, 0).origin));
        assert_eq!(amounts(&inputs), [("a".into(), 3), ("a".into(), 4)]);
        let mut other: Inputs = [input("c", 10, 5), input("d", 20, 6)].into_iter().collect();
        inputs.append(&mut other);
        assert!(other.is_empty());
        assert_eq!(
            amounts(&inputs),
            [
                ("a".into(), 3),
                ("a".into(), 4),
                ("c".into(), 5),
                ("d".into(), 6)
            ]
        );
        assert!(inputs.remove(&input("d", 20, 0).origin));
    }
}
