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
use crate::{Aggregate, Columns, Events, State, Value};

/// Calls `f` with `events` field by field, as [`Aggregate::add_columns`] sees them from the
/// host: a field whose values are all integers, or all floats, as one slice (a batch of no
/// events has only integer fields). [`assert_add_columns_agrees`] uses it to test that
/// `add_columns` does what `add` does.
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

/// Checks that `A`'s [`add_columns`](Aggregate::add_columns) does exactly what its
/// [`add`](Aggregate::add) does: from two copies of `start`, adds each of `batches` in turn to
/// one with `add` and to the other with `add_columns` (which sees the batch as
/// [`with_columns`] gives it, as the host sends it). A batch of several events that both
/// refuse alike goes as in the host: what the calls wrote is dropped, and the batch's events
/// are added one at a time, each through both. Panics at the first call whose results or
/// states differ, naming the batch (and the event) and the state before it. A result is `Ok`
/// or an error; an error's message must match only for a single event, as the host keeps only
/// those (it discards a refused batch's message and retries its events one at a time).
/// Returns the state both reached.
///
/// Each event added alone keeps its batch's field list (the host would send only the fields
/// that event has, unless the projection names them), and each batch goes in one call (the
/// host calls with at most 4,096 events, and never with none). Give it batches that reach
/// each path of `add_columns`: all-integer and all-float fields (slices), and the rest (mixed
/// kinds, nulls, text, a missing field, no events); call it once for each start state that
/// matters (the count-sum example uses four). States compare bit for bit: a NaN matches a
/// NaN, and `-0.0` does not match `0.0`.
///
/// ```
/// use weir_sdk::testing::{MemoryState, assert_add_columns_agrees};
/// use weir_sdk::{Aggregate, Columns, Events, Output, State, Value, Window};
///
/// struct Count;
/// impl Aggregate for Count {
///     fn add(state: &State, batch: &Events) -> Result<(), String> {
///         state.add_int("count", batch.len() as i64);
///         Ok(())
///     }
///     fn add_columns(state: &State, batch: &Columns) -> Result<(), String> {
///         state.add_int("count", batch.len() as i64);
///         Ok(())
///     }
///     fn merge(target: &State, source: &State) -> Result<(), String> {
///         target.add_int("count", source.get_int("count").unwrap_or(0));
///         Ok(())
///     }
///     fn finish(state: &State, _window: Window) -> Result<Output, String> {
///         Ok(Output::new().with("count", state.get_int("count").unwrap_or(0)))
///     }
/// }
///
/// let batches = [
///     Events::new(["n"]).with_row(1, [1]).with_row(2, [2]),
///     Events::new(["n"]).with_row(3, [Value::Null]),
///     Events::new(["n"]),
/// ];
/// let state = assert_add_columns_agrees::<Count>(&MemoryState::new("k"), &batches);
/// assert_eq!(state.get("count"), Some(Value::Int(3)));
/// ```
#[track_caller]
pub fn assert_add_columns_agrees<A: Aggregate>(
    start: &MemoryState,
    batches: &[Events],
) -> MemoryState {
    let (mut by_rows, mut by_columns) = (start.clone(), start.clone());
    for (i, batch) in batches.iter().enumerate() {
        let which = format!("batch {i}");
        let refused = add_both::<A>(&mut by_rows, &mut by_columns, batch, &which);
        if refused && batch.len() > 1 {
            for (e, row) in batch.rows.iter().enumerate() {
                let one = Events {
                    fields: batch.fields.clone(),
                    rows: vec![row.clone()],
                };
                let which = format!("event {e} of batch {i}");
                add_both::<A>(&mut by_rows, &mut by_columns, &one, &which);
            }
        }
    }
    by_columns
}

/// Adds `batch` to `by_rows` with `add` and to `by_columns` with `add_columns`, and panics,
/// naming the batch as `which`, if the calls' results or the states they leave differ. A batch
/// both refuse leaves both states as they were (the host drops a failing call's writes).
/// Returns whether they refused it.
#[track_caller]
fn add_both<A: Aggregate>(
    by_rows: &mut MemoryState,
    by_columns: &mut MemoryState,
    batch: &Events,
    which: &str,
) -> bool {
    let before = by_rows.clone();
    let rows = A::add(&by_rows.state(), batch);
    let columns = with_columns(batch, |columns| {
        A::add_columns(&by_columns.state(), columns)
    });
    let agree = match (&rows, &columns) {
        (Err(_), Err(_)) if batch.len() > 1 => true,
        _ => rows == columns,
    };
    assert!(
        agree,
        "add and add_columns returned differently for {which}, {batch:?}, from {before:?}: \
         {rows:?} against {columns:?}"
    );
    if rows.is_err() {
        (*by_rows, *by_columns) = (before.clone(), before);
        return true;
    }
    // Compared as written out: `Value`'s `==` holds a NaN unequal to itself and `-0.0` equal
    // to `0.0`, and the host keeps (and outputs) them bit for bit.
    assert_eq!(
        format!("{by_rows:?}"),
        format!("{by_columns:?}"),
        "add and add_columns left different states after {which}, {batch:?}, from {before:?}"
    );
    false
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Output, Window};

    /// Counts its calls in `tried` and its events in `count`, and refuses a batch with a null
    /// (after counting the call, a write the host drops); its `add_columns` goes wrong in the
    /// way `WRONG` names.
    struct Count<const WRONG: u8>;

    const RIGHT: u8 = 0;
    const COUNTS_SLICES_TWICE: u8 = 1;
    const REFUSES_WITH_ANOTHER_MESSAGE: u8 = 2;
    const REFUSES_ONE_NULL_WITH_ANOTHER_MESSAGE: u8 = 3;
    const WRITES_OTHERWISE_BEFORE_REFUSING: u8 = 4;
    const TAKES_NULLS: u8 = 5;
    const REFUSES_BATCHES_WITH_ANOTHER_MESSAGE: u8 = 6;

    const NULL: &str = "a null";

    impl<const WRONG: u8> Aggregate for Count<WRONG> {
        fn add(state: &State, batch: &Events) -> Result<(), String> {
            state.add_int("tried", 1);
            let values = || batch.rows.iter().flat_map(|row| &row.values);
            if values().any(|value| *value == Value::Null) {
                return Err(NULL.into());
            }
            state.add_int("count", batch.len() as i64);
            Ok(())
        }
        fn add_columns(state: &State, batch: &Columns) -> Result<(), String> {
            match (WRONG, batch.ints("n")) {
                (_, Some(ints)) => {
                    let times = if WRONG == COUNTS_SLICES_TWICE { 2 } else { 1 };
                    state.add_int("tried", 1);
                    state.add_int("count", times * ints.len() as i64);
                    Ok(())
                }
                (REFUSES_WITH_ANOTHER_MESSAGE, None) => Err("another message".into()),
                (REFUSES_ONE_NULL_WITH_ANOTHER_MESSAGE, None) if batch.len() == 1 => {
                    Err("another message".into())
                }
                (WRITES_OTHERWISE_BEFORE_REFUSING, None) => {
                    state.put("columns tried", 1);
                    Err(NULL.into())
                }
                (TAKES_NULLS, None) => Ok(()),
                (REFUSES_BATCHES_WITH_ANOTHER_MESSAGE, None) if batch.len() > 1 => {
                    Err(format!("a null among {} events", batch.len()))
                }
                (_, None) => Self::add(state, batch.events()),
            }
        }
        fn merge(_target: &State, _source: &State) -> Result<(), String> {
            Ok(())
        }
        fn finish(_state: &State, _window: Window) -> Result<Output, String> {
            Ok(Output::new())
        }
    }

    /// An operator that writes `x`, a float: in `add` `$value`, in `add_columns` the same or,
    /// if `FLIP`, its negation (`Aggregate` has no `self`, so one type per value).
    macro_rules! float_op {
        ($name:ident, $value:expr) => {
            struct $name<const FLIP: bool>;
            impl<const FLIP: bool> Aggregate for $name<FLIP> {
                fn add(state: &State, _batch: &Events) -> Result<(), String> {
                    state.put("x", $value);
                    Ok(())
                }
                fn add_columns(state: &State, _batch: &Columns) -> Result<(), String> {
                    let value: f64 = $value;
                    state.put("x", if FLIP { -value } else { value });
                    Ok(())
                }
                fn merge(_target: &State, _source: &State) -> Result<(), String> {
                    Ok(())
                }
                fn finish(_state: &State, _window: Window) -> Result<Output, String> {
                    Ok(Output::new())
                }
            }
        };
    }
    float_op!(Zero, 0.0);
    float_op!(NotANumber, f64::NAN);

    /// States compare bit for bit: the same NaN agrees, `0.0` against `-0.0` does not.
    #[test]
    fn floats_compare_bit_for_bit() {
        let start = MemoryState::new("k");
        let batch = [Events::new(["n"]).with_row(1, [1])];
        let reached = assert_add_columns_agrees::<NotANumber<false>>(&start, &batch);
        assert!(matches!(reached.get("x"), Some(Value::Float(x)) if x.is_nan()));
        assert_add_columns_agrees::<Zero<false>>(&start, &batch);
        let flipped = std::panic::catch_unwind(|| {
            assert_add_columns_agrees::<Zero<true>>(&MemoryState::new("k"), &batch)
        });
        assert!(flipped.is_err(), "-0.0 against 0.0 passed");
    }

    /// Two integers (a slice), a null and an integer (refused, then added one at a time: the
    /// null refused, the integer taken), and no events (an empty slice).
    fn batches() -> [Events; 3] {
        [
            Events::new(["n"]).with_row(1, [1]).with_row(2, [2]),
            Events::new(["n"])
                .with_row(3, [Value::Null])
                .with_row(4, [Value::Int(3)]),
            Events::new(["n"]),
        ]
    }

    /// Counts reached: only the calls that took their batch, and those events, from the start.
    #[test]
    fn agreeing_calls_pass_and_give_the_state_the_host_would_keep() {
        let start = MemoryState::new("k");
        start.put("count", 10);
        let reached = assert_add_columns_agrees::<Count<RIGHT>>(&start, &batches());
        assert_eq!(reached.get("count"), Some(Value::Int(13)));
        assert_eq!(reached.get("tried"), Some(Value::Int(3)));
        assert_eq!(start.get("tried"), None, "the start is not changed");
        let refused = assert_add_columns_agrees::<Count<RIGHT>>(&start, &batches()[1..2]);
        assert_eq!(refused.get("count"), Some(Value::Int(11)));
        assert_eq!(refused.get("tried"), Some(Value::Int(1)));
    }

    #[test]
    #[should_panic(expected = "add and add_columns left different states after batch 0,")]
    fn a_different_state_is_caught() {
        let start = MemoryState::new("k");
        assert_add_columns_agrees::<Count<COUNTS_SLICES_TWICE>>(&start, &batches());
    }

    /// `add` refuses the batch with a null, `add_columns` takes it.
    #[test]
    #[should_panic(expected = "add and add_columns returned differently for batch 1,")]
    fn a_different_result_is_caught() {
        let start = MemoryState::new("k");
        assert_add_columns_agrees::<Count<TAKES_NULLS>>(&start, &batches());
    }

    /// Both refuse the batch, with other messages, which the host discards; the null alone
    /// is refused with other messages too, which the host keeps: caught there.
    #[test]
    #[should_panic(expected = "add and add_columns returned differently for event 0 of batch 1,")]
    fn a_different_message_is_caught_where_the_host_keeps_it() {
        let start = MemoryState::new("k");
        assert_add_columns_agrees::<Count<REFUSES_WITH_ANOTHER_MESSAGE>>(&start, &batches());
    }

    /// A batch of several events refused with another message, each event alike: as in the
    /// host, where only the events' own messages reach the dead letters, they agree.
    #[test]
    fn a_batch_refused_with_another_message_agrees() {
        let start = MemoryState::new("k");
        let reached = assert_add_columns_agrees::<Count<REFUSES_BATCHES_WITH_ANOTHER_MESSAGE>>(
            &start,
            &batches(),
        );
        assert_eq!(reached.get("count"), Some(Value::Int(3)));
    }

    /// The batch is refused alike, and its null alone is not: caught in the retry.
    #[test]
    #[should_panic(expected = "add and add_columns returned differently for event 0 of batch 1,")]
    fn a_different_result_for_one_event_of_a_refused_batch_is_caught() {
        let start = MemoryState::new("k");
        assert_add_columns_agrees::<Count<REFUSES_ONE_NULL_WITH_ANOTHER_MESSAGE>>(
            &start,
            &batches(),
        );
    }

    /// Both calls refuse alike, but `add_columns` wrote other things first: the host drops
    /// both calls' writes, so they agree, and the state reached holds neither.
    #[test]
    fn different_writes_before_the_same_refusal_agree() {
        let start = MemoryState::new("k");
        let reached = assert_add_columns_agrees::<Count<WRITES_OTHERWISE_BEFORE_REFUSING>>(
            &start,
            &batches(),
        );
        assert_eq!(reached.get("columns tried"), None);
        assert_eq!(reached.get("count"), Some(Value::Int(3)));
    }

    /// A row shorter than the batch's fields reads as nulls for the fields it lacks, and the
    /// fields after the gap keep their own values: `x` holds a null, so it is no float slice.
    #[test]
    fn a_short_row_reads_as_nulls_where_it_ends() {
        let batch = Events::new(["n", "x"])
            .with_row(1, [Value::Int(1)])
            .with_row(2, [Value::Int(2), Value::Float(0.5)]);
        with_columns(&batch, |columns| {
            assert_eq!(columns.ints("n"), Some(&[1, 2][..]));
            assert_eq!(columns.floats("x"), None);
            let rows: Vec<Vec<Value>> = (columns.events().rows.iter())
                .map(|row| row.values.clone())
                .collect();
            let expected = [
                vec![Value::Int(1), Value::Null],
                vec![Value::Int(2), Value::Float(0.5)],
            ];
            assert_eq!(rows, expected);
        });
    }
}
