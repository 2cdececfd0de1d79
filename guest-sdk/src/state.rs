//! [`State`]: the state of one key (and window), kept by the host.

use std::cell::{Cell, RefCell};

use crate::bindings::aggregator::exports::weir::operator0_2_0::aggregate::Change;
use crate::bindings::aggregator::weir::operator0_1_0::state::Scope;
use crate::testing::MemoryState;
use crate::{Field, Value};

/// The state of one key (and, for aggregates, one window), kept by the host.
///
/// It holds named [`Value`]s ([`get`](State::get), [`put`](State::put)) and named maps from
/// entry names to values ([`map_get`](State::map_get), [`map_put`](State::map_put)). Reads see
/// earlier writes of the same call at once. The maps are calls to the host; in an aggregate's
/// `add` the named values came with the call and its changes go back with its result, so they
/// cost no call.
///
/// The host may add to, or finish, many windows in one call, which hands over their named
/// values but no scope. There, asking for a map or the key marks the call as needing the scope
/// and answers as if empty (`None`, 0, no entries, an empty key; writes do nothing): the SDK
/// then discards what the call did for that window and the host calls again with the scope.
/// So code that runs on a map's answer must end whatever the answer (a loop until a map
/// reaches a size would run to the call's time limit), and must not panic on an empty one (a
/// panic traps, and the instance then gets one call per window from then on).
///
/// Operators receive it from the host; tests make one with [`MemoryState`].
#[derive(Debug, Clone, Copy)]
pub struct State<'a> {
    backend: Backend<'a>,
}

#[derive(Debug, Clone, Copy)]
enum Backend<'a> {
    Host(&'a Scope),
    /// The named values passed with the call, and the scope for the rest (none in a call
    /// that carries many windows: then what needs it is refused, see [`Values::needs_scope`]).
    Values(&'a Values, Option<&'a Scope>),
    Memory(&'a MemoryState),
}

/// The scope's named values as an `add` call received them, with the call's changes.
///
/// A call carrying many windows refills one of these for each window in turn
/// ([`refill`](Values::refill)): the names' memory is reused from window to window (most
/// windows have the same few names), since each name would otherwise cost the guest an
/// allocation and a free per window.
#[derive(Debug, Default)]
pub(crate) struct Values {
    /// Each name's value now (`None`: removed), and whether the call changed it, in the order
    /// of the names. A sorted list, not a map: a call gets a few names, and a map's nodes cost
    /// an allocation and a free in the guest per call.
    values: RefCell<Vec<(String, Option<Value>, bool)>>,
    /// Names no longer in `values`, kept for their memory.
    spare: RefCell<Vec<String>>,
    /// Whether the call asked for what only a scope has (a map, the key) without one.
    needs_scope: Cell<bool>,
}

impl Values {
    pub(crate) fn new(values: Vec<Field>) -> Self {
        let mut values: Vec<_> = (values.into_iter())
            .map(|field| (field.name, Some(field.value), false))
            .collect();
        in_name_order(&mut values);
        Self {
            values: RefCell::new(values),
            ..Self::default()
        }
    }

    /// Makes `named` the values, none changed and no scope asked for, as at the start of a
    /// call.
    pub(crate) fn refill<N: AsRef<str>>(&mut self, named: impl IntoIterator<Item = (N, Value)>) {
        let (values, spare) = (self.values.get_mut(), self.spare.get_mut());
        spare.extend(values.drain(..).map(|(name, _, _)| name));
        for (name, value) in named {
            values.push((recycled(spare, name.as_ref()), Some(value), false));
        }
        in_name_order(values);
        self.needs_scope.set(false);
    }

    /// Whether the call, made without a scope, asked for a map or the key: its result is
    /// then void, and the host makes the call again with the scope.
    pub(crate) fn needs_scope(&self) -> bool {
        self.needs_scope.get()
    }

    fn get(&self, name: &str) -> Option<Value> {
        let values = self.values.borrow();
        let at = values
            .binary_search_by(|(n, _, _)| n.as_str().cmp(name))
            .ok()?;
        values[at].1.clone()
    }

    fn set(&self, name: &str, value: Option<Value>) {
        let mut values = self.values.borrow_mut();
        match values.binary_search_by(|(n, _, _)| n.as_str().cmp(name)) {
            Ok(at) => (values[at].1, values[at].2) = (value, true),
            Err(at) => {
                let name = recycled(&mut self.spare.borrow_mut(), name);
                values.insert(at, (name, value, true));
            }
        }
    }

    /// What the call changed, for the host to apply: each changed name and its value (`None`:
    /// removed), in the order of the names. The changes are taken: a second call returns
    /// none, and a changed name reads as removed until the next [`refill`](Values::refill).
    pub(crate) fn take_changes(&mut self) -> impl Iterator<Item = (&str, Option<Value>)> {
        (self.values.get_mut().iter_mut())
            .filter(|(_, _, changed)| *changed)
            .map(|(name, value, changed)| {
                *changed = false;
                (name.as_str(), value.take())
            })
    }

    /// What the call changed, for the host to apply.
    pub(crate) fn into_changes(self) -> Vec<Change> {
        (self.values.into_inner().into_iter())
            .filter(|(_, _, changed)| *changed)
            .map(|(name, value, _)| Change { name, value })
            .collect()
    }
}

/// `name` in a spare name's memory, if there is one.
fn recycled(spare: &mut Vec<String>, name: &str) -> String {
    let mut recycled = spare.pop().unwrap_or_default();
    recycled.clear();
    recycled.push_str(name);
    recycled
}

/// Puts `values` in ascending order of their names, a name given twice keeping its last value
/// (as a map would). The host sends them in order already.
fn in_name_order(values: &mut Vec<(String, Option<Value>, bool)>) {
    if !values.is_sorted_by(|a, b| a.0 < b.0) {
        values.reverse();
        values.sort_by(|a, b| a.0.cmp(&b.0));
        values.dedup_by(|later, kept| later.0 == kept.0);
    }
}

impl<'a> State<'a> {
    /// The state behind a scope handed over by the host.
    pub(crate) fn host(scope: &'a Scope) -> Self {
        Self {
            backend: Backend::Host(scope),
        }
    }

    /// The state behind a scope whose named values came with the call.
    pub(crate) fn with_values(values: &'a Values, scope: Option<&'a Scope>) -> Self {
        Self {
            backend: Backend::Values(values, scope),
        }
    }

    /// The scope behind this state, if there is one; without one (a call carrying many
    /// windows) the call is marked as needing it.
    fn scope(&self) -> Option<&'a Scope> {
        match self.backend {
            Backend::Host(scope) | Backend::Values(_, Some(scope)) => Some(scope),
            Backend::Values(values, None) => {
                values.needs_scope.set(true);
                None
            }
            Backend::Memory(_) => None,
        }
    }

    /// An in-memory state, for tests.
    pub(crate) fn memory(memory: &'a MemoryState) -> Self {
        Self {
            backend: Backend::Memory(memory),
        }
    }

    /// The key this state belongs to, as text.
    pub fn key(&self) -> String {
        match (self.backend, self.scope()) {
            (Backend::Memory(memory), _) => memory.key().to_owned(),
            (_, scope) => scope.map(Scope::key).unwrap_or_default(),
        }
    }

    /// The value named `name`, or `None` if there is none.
    pub fn get(&self, name: &str) -> Option<Value> {
        match self.backend {
            Backend::Host(scope) => scope.get(name),
            Backend::Values(values, _) => values.get(name),
            Backend::Memory(memory) => memory.get(name),
        }
    }

    /// The integer named `name`; `None` if there is none or it is not an integer.
    pub fn get_int(&self, name: &str) -> Option<i64> {
        self.get(name)?.as_int()
    }

    /// The number named `name`, integers converted to floats; `None` if there is none or it is
    /// not a number.
    pub fn get_float(&self, name: &str) -> Option<f64> {
        self.get(name)?.as_float()
    }

    /// The text named `name`; `None` if there is none or it is not text.
    pub fn get_text(&self, name: &str) -> Option<String> {
        match self.get(name)? {
            Value::Text(text) => Some(text),
            _ => None,
        }
    }

    /// Sets the value named `name`.
    pub fn put(&self, name: &str, value: impl Into<Value>) {
        let value = value.into();
        match self.backend {
            Backend::Host(scope) => scope.put(name, &value),
            Backend::Values(values, _) => values.set(name, Some(value)),
            Backend::Memory(memory) => memory.put(name, value),
        }
    }

    /// Adds `delta` to the integer named `name` (0 if there is none, or it is not an integer)
    /// and returns the new value. The addition saturates at the bounds of `i64`.
    pub fn add_int(&self, name: &str, delta: i64) -> i64 {
        let value = self.get_int(name).unwrap_or(0).saturating_add(delta);
        self.put(name, value);
        value
    }

    /// Removes the value named `name`, if any.
    pub fn remove(&self, name: &str) {
        match self.backend {
            Backend::Host(scope) => scope.remove(name),
            Backend::Values(values, _) => values.set(name, None),
            Backend::Memory(memory) => memory.remove(name),
        }
    }

    /// The value of entry `entry` of the map named `map`, or `None` if there is none.
    pub fn map_get(&self, map: &str, entry: &str) -> Option<Value> {
        match (self.backend, self.scope()) {
            (Backend::Memory(memory), _) => memory.map_get(map, entry),
            (_, scope) => scope.and_then(|scope| scope.map_get(map, entry)),
        }
    }

    /// Sets entry `entry` of the map named `map`, creating the map if needed.
    pub fn map_put(&self, map: &str, entry: &str, value: impl Into<Value>) {
        let value = value.into();
        match (self.backend, self.scope()) {
            (Backend::Memory(memory), _) => memory.map_put(map, entry, value),
            (_, scope) => {
                if let Some(scope) = scope {
                    scope.map_put(map, entry, &value);
                }
            }
        }
    }

    /// Removes entry `entry` of the map named `map`, if any.
    pub fn map_remove(&self, map: &str, entry: &str) {
        match (self.backend, self.scope()) {
            (Backend::Memory(memory), _) => memory.map_remove(map, entry),
            (_, scope) => {
                if let Some(scope) = scope {
                    scope.map_remove(map, entry);
                }
            }
        }
    }

    /// How many entries the map named `map` holds (0 if there is no such map).
    pub fn map_len(&self, map: &str) -> u64 {
        match (self.backend, self.scope()) {
            (Backend::Memory(memory), _) => memory.map_len(map),
            (_, scope) => scope.map_or(0, |scope| scope.map_len(map)),
        }
    }

    /// The entry names of the map named `map`, in ascending order.
    pub fn map_entries(&self, map: &str) -> Vec<String> {
        match (self.backend, self.scope()) {
            (Backend::Memory(memory), _) => memory.map_entries(map),
            (_, scope) => scope
                .map(|scope| scope.map_entries(map))
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{State, Values};
    use crate::testing::MemoryState;
    use crate::{Field, Value};

    /// The values an `add` call received: reads see the call's writes; only what it changed
    /// goes back, a removal as `None`, a name written twice once with its last value.
    #[test]
    fn values_return_only_their_changes() {
        let values = Values::new(vec![
            Field {
                name: "count".into(),
                value: Value::Int(2),
            },
            Field {
                name: "kept".into(),
                value: Value::Text("x".into()),
            },
            Field {
                name: "gone".into(),
                value: Value::Int(1),
            },
        ]);
        assert_eq!(values.get("count"), Some(Value::Int(2)));
        values.set("count", Some(Value::Int(3)));
        values.set("count", Some(Value::Int(4)));
        values.set("gone", None);
        values.set("new", Some(Value::Float(0.5)));
        values.set("never", None);
        assert_eq!(values.get("count"), Some(Value::Int(4)));
        assert_eq!(values.get("gone"), None);
        let changes: Vec<(String, Option<Value>)> = (values.into_changes().into_iter())
            .map(|change| (change.name, change.value))
            .collect();
        assert_eq!(
            changes,
            [
                ("count".into(), Some(Value::Int(4))),
                ("gone".into(), None),
                ("never".into(), None),
                ("new".into(), Some(Value::Float(0.5))),
            ]
        );
        assert!(Values::default().into_changes().is_empty());
    }

    /// Values arrive sorted by name from the host; any other order works too, and a name sent
    /// twice reads as its last value.
    #[test]
    fn values_in_any_order_read_by_name() {
        let field = |name: &str, value: i64| Field {
            name: name.into(),
            value: Value::Int(value),
        };
        let values = Values::new(vec![field("b", 1), field("a", 2), field("b", 3)]);
        assert_eq!(values.get("a"), Some(Value::Int(2)));
        assert_eq!(values.get("b"), Some(Value::Int(3)));
        values.set("c", Some(Value::Int(4)));
        values.set("a", None);
        assert_eq!(values.get("c"), Some(Value::Int(4)));
        let changed: Vec<String> = values.into_changes().into_iter().map(|c| c.name).collect();
        assert_eq!(changed, ["a", "c"]);
    }

    /// One `Values` refilled for window after window (as a call carrying many windows does)
    /// reads and returns only the current window's values: the earlier windows' names, kept
    /// for their memory, are never read, changed or returned, and `needs_scope` starts over.
    #[test]
    fn refilled_values_hold_only_the_current_windows() {
        let mut values = Values::default();
        let changes = |values: &mut Values| -> Vec<(String, Option<Value>)> {
            (values.take_changes())
                .map(|(name, value)| (name.to_owned(), value))
                .collect()
        };
        // A new window: nothing yet, two names written, and a map asked for.
        values.refill(Vec::<(&str, Value)>::new());
        let state = State::with_values(&values, None);
        assert_eq!(state.add_int("count", 2), 2);
        state.put("sum", 7);
        state.map_get("m", "x");
        assert!(values.needs_scope());
        let written = vec![
            ("count".to_owned(), Some(Value::Int(2))),
            ("sum".to_owned(), Some(Value::Int(7))),
        ];
        assert_eq!(changes(&mut values), written);
        // A window with only `sum`: `count` (spare now) reads as absent, and is a new name
        // again when written.
        values.refill([("sum", Value::Int(1))]);
        assert!(!values.needs_scope());
        let state = State::with_values(&values, None);
        assert_eq!(state.get("count"), None);
        assert_eq!(state.get_int("sum"), Some(1));
        assert_eq!(changes(&mut values), [], "nothing changed yet");
        values.refill([("sum", Value::Int(1))]);
        let state = State::with_values(&values, None);
        state.put("count", 5);
        state.put("another", true);
        assert_eq!(state.get_int("sum"), Some(1));
        assert_eq!(
            changes(&mut values),
            [
                ("another".to_owned(), Some(Value::Boolean(true))),
                ("count".to_owned(), Some(Value::Int(5))),
            ]
        );
        // Out of order, a name twice: sorted, the last kept, spares still unseen.
        values.refill([
            ("b", Value::Int(1)),
            ("a", Value::Int(2)),
            ("b", Value::Int(3)),
        ]);
        let state = State::with_values(&values, None);
        assert_eq!((state.get_int("a"), state.get_int("b")), (Some(2), Some(3)));
        assert_eq!((state.get("sum"), state.get("count")), (None, None));
        state.put("c", 4);
        assert_eq!(state.get_int("c"), Some(4));
        assert_eq!(
            changes(&mut values),
            [("c".to_owned(), Some(Value::Int(4)))]
        );
        // Taken changes are taken: a second take returns nothing.
        State::with_values(&values, None).put("c", 5);
        assert_eq!(changes(&mut values).len(), 1);
        assert_eq!(changes(&mut values), []);
        // More names than spares, out of order: the spares past them stay unseen.
        let six = ["f", "e", "d", "c", "b", "a"].map(|n| (n, Value::Int(1)));
        values.refill(six);
        values.refill([
            ("y", Value::Int(1)),
            ("x", Value::Int(2)),
            ("y", Value::Int(3)),
        ]);
        let state = State::with_values(&values, None);
        assert_eq!((state.get_int("x"), state.get_int("y")), (Some(2), Some(3)));
        assert!(
            ["a", "b", "c", "d", "e", "f"]
                .iter()
                .all(|n| state.get(n).is_none())
        );
        state.put("z", 0);
        state.put("a", 0);
        let names: Vec<String> = changes(&mut values).into_iter().map(|c| c.0).collect();
        assert_eq!(names, ["a", "z"]);
        let state = State::with_values(&values, None);
        assert_eq!((state.get_int("x"), state.get_int("y")), (Some(2), Some(3)));
        // An empty window after all that: nothing at all.
        values.refill(Vec::<(&str, Value)>::new());
        let state = State::with_values(&values, None);
        assert!(
            ["a", "b", "c", "sum", "count", "another"]
                .iter()
                .all(|n| state.get(n).is_none())
        );
        assert_eq!(changes(&mut values), []);
    }

    /// In a call carrying many windows there is no scope: named values work, and asking for a
    /// map or the key marks the call so that the host makes it again with the scope.
    #[test]
    fn without_a_scope_a_map_or_the_key_marks_the_call_as_needing_one() {
        let values = Values::new(vec![Field {
            name: "count".into(),
            value: Value::Int(2),
        }]);
        let state = State::with_values(&values, None);
        assert_eq!(state.add_int("count", 1), 3);
        assert!(!values.needs_scope(), "named values need no scope");
        assert_eq!(state.map_get("seen", "x"), None);
        assert!(values.needs_scope());
        for ask in [
            |s: &State| drop(s.key()),
            |s: &State| s.map_put("seen", "x", 1),
            |s: &State| s.map_remove("seen", "x"),
            |s: &State| assert_eq!(s.map_len("seen"), 0),
            |s: &State| drop(s.map_entries("seen")),
        ] {
            let values = Values::new(Vec::new());
            ask(&State::with_values(&values, None));
            assert!(values.needs_scope());
        }
    }

    #[test]
    fn typed_reads_only_match_their_kind() {
        let memory = MemoryState::new("k");
        let state = memory.state();
        state.put("n", 3);
        state.put("x", 1.5);
        state.put("t", "hi");
        assert_eq!(state.key(), "k");
        assert_eq!(state.get_int("n"), Some(3));
        assert_eq!(state.get_float("n"), Some(3.0));
        assert_eq!(state.get_int("x"), None);
        assert_eq!(state.get_float("x"), Some(1.5));
        assert_eq!(state.get_text("t").as_deref(), Some("hi"));
        assert_eq!(state.get_text("n"), None);
        assert_eq!(state.get("missing"), None);
        state.remove("n");
        assert_eq!(state.get("n"), None);
    }

    #[test]
    fn add_int_starts_from_zero_and_saturates() {
        let memory = MemoryState::new("k");
        let state = memory.state();
        assert_eq!(state.add_int("count", 2), 2);
        assert_eq!(state.add_int("count", 3), 5);
        state.put("big", i64::MAX);
        assert_eq!(state.add_int("big", 1), i64::MAX);
    }

    #[test]
    fn maps_hold_sorted_entries() {
        let memory = MemoryState::new("k");
        let state = memory.state();
        state.map_put("m", "b", 2);
        state.map_put("m", "a", Value::Null);
        state.map_put("other", "z", true);
        assert_eq!(state.map_len("m"), 2);
        assert_eq!(state.map_entries("m"), ["a", "b"]);
        assert_eq!(state.map_get("m", "b"), Some(Value::Int(2)));
        state.map_remove("m", "a");
        assert_eq!(state.map_entries("m"), ["b"]);
        assert_eq!(state.map_len("none"), 0);
        assert!(state.map_entries("none").is_empty());
    }
}
