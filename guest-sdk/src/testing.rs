//! Running operators natively, without a host, for unit tests.
//!
//! ```
//! use weir_sdk::testing::MemoryState;
//!
//! let memory = MemoryState::new("user-1");
//! let state = memory.state();
//! state.put("count", 2);
//! state.map_put("seen", "apple", 1);
//! assert_eq!(state.get_int("count"), Some(2));
//! assert_eq!(memory.map_entries("seen"), ["apple"]);
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::call_lists;
use crate::{Columns, Events, State, Value};

/// Calls `f` with `events` field by field, as
/// [`Aggregate::add_columns`](crate::Aggregate::add_columns) sees them from the host: a field
/// whose values are all integers, or all floats, as one slice (a batch of no events has only
/// integer fields). Use it to test that `add_columns` does what `add` does.
///
/// ```
/// use weir_sdk::testing::with_columns;
/// use weir_sdk::{Events, Value};
///
/// let batch = Events::new(["n", "x"])
///     .with_row(1, [Value::Int(1), Value::Float(0.5)])
///     .with_row(2, [Value::Int(2), Value::Int(3)]);
/// with_columns(&batch, |columns| {
///     assert_eq!(columns.ints("n"), Some(&[1, 2][..]));
///     assert_eq!(columns.floats("x"), None); // not all floats
/// });
/// ```
pub fn with_columns<R>(events: &Events, f: impl FnOnce(&Columns<'_>) -> R) -> R {
    let field_after_field = (0..events.fields.len()).flat_map(|column| {
        (events.rows.iter()).map(move |row| row.values.get(column).cloned().unwrap_or(Value::Null))
    });
    let timestamps: Vec<i64> = events.rows.iter().map(|row| row.timestamp).collect();
    call_lists::with_one_batch(&events.fields, &timestamps, field_after_field.collect(), f)
}

/// An in-memory stand-in for the state the host keeps for one key (and window).
///
/// [`state`](MemoryState::state) hands out the [`State`] to pass to an operator; the other
/// methods inspect or prepare the contents directly.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MemoryState {
    key: String,
    values: RefCell<BTreeMap<String, Value>>,
    maps: RefCell<BTreeMap<String, BTreeMap<String, Value>>>,
}

impl MemoryState {
    /// An empty state for the key `key`.
    pub fn new(key: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            ..Self::default()
        }
    }

    /// The [`State`] to hand to an operator.
    pub fn state(&self) -> State<'_> {
        State::memory(self)
    }

    /// The key this state belongs to.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The value named `name`.
    pub fn get(&self, name: &str) -> Option<Value> {
        self.values.borrow().get(name).cloned()
    }

    /// Sets the value named `name`.
    pub fn put(&self, name: &str, value: impl Into<Value>) {
        self.values
            .borrow_mut()
            .insert(name.to_owned(), value.into());
    }

    /// Removes the value named `name`.
    pub fn remove(&self, name: &str) {
        self.values.borrow_mut().remove(name);
    }

    /// The value of entry `entry` of the map named `map`.
    pub fn map_get(&self, map: &str, entry: &str) -> Option<Value> {
        self.maps.borrow().get(map)?.get(entry).cloned()
    }

    /// Sets entry `entry` of the map named `map`.
    pub fn map_put(&self, map: &str, entry: &str, value: impl Into<Value>) {
        self.maps
            .borrow_mut()
            .entry(map.to_owned())
            .or_default()
            .insert(entry.to_owned(), value.into());
    }

    /// Removes entry `entry` of the map named `map`.
    pub fn map_remove(&self, map: &str, entry: &str) {
        let mut maps = self.maps.borrow_mut();
        if let Some(entries) = maps.get_mut(map) {
            entries.remove(entry);
            if entries.is_empty() {
                maps.remove(map);
            }
        }
    }

    /// How many entries the map named `map` holds.
    pub fn map_len(&self, map: &str) -> u64 {
        self.maps
            .borrow()
            .get(map)
            .map_or(0, |entries| entries.len() as u64)
    }

    /// The entry names of the map named `map`, in ascending order.
    pub fn map_entries(&self, map: &str) -> Vec<String> {
        self.maps
            .borrow()
            .get(map)
            .map(|entries| entries.keys().cloned().collect())
            .unwrap_or_default()
    }
}
