//! Write [Weir] stream operators in Rust and build them as WebAssembly components.
//!
//! A complete aggregate operator — a count and a sum per key and window — is one trait
//! implementation and one macro call:
//!
//! ```
//! use weir_sdk::{Aggregate, Events, Output, State, Window};
//!
//! /// Counts the events of each key and window and sums their `amount` field.
//! struct CountSum;
//!
//! impl Aggregate for CountSum {
//!     fn add(state: &State, batch: &Events) -> Result<(), String> {
//!         let mut sum = state.get_float("sum").unwrap_or(0.0);
//!         for amount in batch.values("amount") {
//!             sum += amount.and_then(|v| v.as_float()).ok_or("event without a numeric `amount`")?;
//!         }
//!         state.add_int("count", batch.len() as i64);
//!         state.put("sum", sum);
//!         Ok(())
//!     }
//!
//!     fn merge(target: &State, source: &State) -> Result<(), String> {
//!         target.add_int("count", source.get_int("count").unwrap_or(0));
//!         let sum = target.get_float("sum").unwrap_or(0.0) + source.get_float("sum").unwrap_or(0.0);
//!         target.put("sum", sum);
//!         Ok(())
//!     }
//!
//!     fn finish(state: &State, _window: Window) -> Result<Output, String> {
//!         Ok(Output::new()
//!             .with("count", state.get_int("count").unwrap_or(0))
//!             .with("sum", state.get_float("sum").unwrap_or(0.0)))
//!     }
//! }
//!
//! weir_sdk::export_aggregate!(CountSum);
//! ```
//!
//! Build it as a component with `cargo build --release --target wasm32-wasip2` (the crate's
//! `crate-type` must be `["cdylib"]`) and name the resulting `.wasm` file in a pipeline spec.
//!
//! # Concepts
//!
//! * An **aggregate** ([`Aggregate`], exported with [`export_aggregate!`]) folds the events of
//!   one key and one window into [`State`] (`add`), combines two partial states (`merge`, used
//!   when session windows merge or for pre-aggregation) and turns the state into an [`Output`]
//!   record when the window closes (`finish`).
//! * An **enricher** ([`Enrich`], exported with [`export_enrich!`]) turns each batch of events
//!   of one key into zero or more events of the same key: joins with reference data (in the
//!   state map `reference`), filtering, de-duplication.
//! * The host owns all state. [`State`] is a window onto the state of exactly one key (and, for
//!   aggregates, one window); it holds named [`Value`]s and named maps of values.
//! * Events arrive in [batches](Events) of one key, with the field names sent once per batch:
//!   look a field up with [`Events::column`] or iterate over its values with [`Events::values`].
//! * The host sends a batch field by field, each all-integer or all-float field as one list
//!   (on 0.2's call, which sends one list of values, the SDK sorts the fields itself). An
//!   aggregate that folds a numeric field may also implement [`Aggregate::add_columns`] and
//!   read it as one slice ([`Columns::ints`], [`Columns::floats`]), which skips building the
//!   rows, as the count-sum example does.
//!
//! Components built with this crate implement `weir:operator@0.3.0` (`wit/v0.3/operator.wit`):
//! a batch's values cross the boundary field after field (integers, floats and other values
//! each in their own list), and an aggregate's named values cross with the call, so that
//! [`State::get`] and [`State::put`] in `add` cost no call to the host; and the host may add
//! to, and finish, many windows in one call. Such a call has no scope: if `add`,
//! `add_columns` or `finish` asks for a map or the key there, the SDK answers that it needs
//! one and the host calls again for that window alone (as it does for a window that failed),
//! so the operator never sees the difference (beyond its code running twice for that window:
//! keep `add`, `add_columns` and `finish` free of side effects outside the [`State`]). The
//! operator sees the same [`Events`], [`Columns`] and [`State`] on either call, and the same
//! [`Events`] as with 0.1.
//!
//! If `add`, `add_columns` or `process` returns an error (or traps), nothing the call wrote to
//! the state is kept, and the host retries the batch's events one at a time, so that only the
//! events the operator cannot take go to the dead-letter output, with the message.
//!
//! # Testing operators
//!
//! [`testing::MemoryState`] is an in-memory [`State`], so operator logic can be unit-tested
//! natively with `cargo test`, without a host:
//!
//! ```
//! use weir_sdk::testing::MemoryState;
//! use weir_sdk::{Aggregate, Events, Output, State, Value, Window};
//!
//! struct Count;
//!
//! impl Aggregate for Count {
//!     fn add(state: &State, batch: &Events) -> Result<(), String> {
//!         state.add_int("count", batch.len() as i64);
//!         Ok(())
//!     }
//!     fn merge(target: &State, source: &State) -> Result<(), String> {
//!         target.add_int("count", source.get_int("count").unwrap_or(0));
//!         Ok(())
//!     }
//!     fn finish(state: &State, _window: Window) -> Result<Output, String> {
//!         Ok(Output::new().with("count", state.get_int("count").unwrap_or(0)))
//!     }
//! }
//!
//! let memory = MemoryState::new("user-1");
//! let batch = Events::new(["amount"]).with_row(1_000, [3]).with_row(2_000, [4]);
//! Count::add(&memory.state(), &batch).unwrap();
//! let output = Count::finish(&memory.state(), Window { start: 0, end: 60_000 }).unwrap();
//! assert_eq!(output.get("count"), Some(&Value::Int(2)));
//! ```
//!
//! [Weir]: https://example.invalid/weir
#![deny(missing_docs)]

// The generated bindings name this crate by its public name, as operator crates do.
extern crate self as weir_sdk;

#[doc(hidden)]
pub mod bindings;
mod call_lists;
mod column_view;
mod events;
mod output;
mod state;
pub mod testing;
mod value;

/// The `wit-bindgen` runtime, used by the generated bindings (not part of the public API).
#[doc(hidden)]
pub use wit_bindgen::rt;

pub use bindings::aggregator::weir::operator0_1_0::types::{
    Event, Events, Field, OutputEvent, OutputEvents, Value, Window,
};
pub use column_view::Columns;
pub use output::Output;
pub use state::State;

use std::cell::RefCell;

use bindings::aggregator::exports::weir::operator0_2_0::aggregate;
use bindings::aggregator::exports::weir::operator0_3_0::windows;
use bindings::aggregator::weir::operator0_1_0::state::Scope;
use bindings::aggregator::weir::operator0_2_0::columns;
use bindings::enricher::exports::weir::operator0_2_0::enrich;
use column_view::name_str;

/// A mergeable windowed aggregation: the logic of an `aggregator` component.
///
/// Every call sees the [`State`] of one key and one window. Implement it on a unit struct and
/// export that with [`export_aggregate!`]. See the [crate documentation](crate) for an example.
pub trait Aggregate {
    /// Adds a batch of events (of the state's key, in arrival order) to the window's state.
    ///
    /// An error changes no state (the host drops what the call wrote) and is no failure of the
    /// run: the host retries the batch's events one at a time, so the events this refuses
    /// become dead letters with the message, and the others are added.
    fn add(state: &State<'_>, batch: &Events) -> Result<(), String>;

    /// Adds a batch given field by field: what the host calls. The default builds the rows
    /// ([`Columns::events`]) and calls [`add`](Aggregate::add).
    ///
    /// Implement it to fold a numeric field as one slice ([`Columns::ints`],
    /// [`Columns::floats`]), with no rows built: the fastest way through the boundary. It must
    /// do exactly what `add` does with the same batch; let it call `add` with
    /// `batch.events()` for batches it does not take as slices, and test the two together
    /// with [`testing::assert_add_columns_agrees`].
    fn add_columns(state: &State<'_>, batch: &Columns<'_>) -> Result<(), String> {
        Self::add(state, batch.events())
    }

    /// Folds the partial state `source` into `target`, as when two session windows merge.
    ///
    /// Leave `source` unchanged.
    fn merge(target: &State<'_>, source: &State<'_>) -> Result<(), String>;

    /// Produces the output record of `window` from its state. Must not change the state.
    fn finish(state: &State<'_>, window: Window) -> Result<Output, String>;

    /// Converts state written by another version of this operator (`from_version`, as the
    /// pipeline names it) before this version first touches it: after a rollout moves the key
    /// to this version, or when a pipeline restarts with this version. The default does
    /// nothing, which is right whenever the state layout did not change.
    fn migrate(state: &State<'_>, from_version: &str) -> Result<(), String> {
        let _ = (state, from_version);
        Ok(())
    }
}

/// A per-key event transformer: the logic of an `enricher` component.
///
/// Every call sees the [`State`] of one key, which also holds that key's reference data in the
/// map `reference` (one entry per field of the key's reference row). Implement it on a unit
/// struct and export that with [`export_enrich!`].
///
/// ```
/// use weir_sdk::{Enrich, Events, OutputEvents, State};
///
/// /// Adds the customer's `tier` from the reference data to every event.
/// struct AddTier;
///
/// impl Enrich for AddTier {
///     fn process(state: &State, batch: Events) -> Result<OutputEvents, String> {
///         let tier = state.map_get("reference", "tier").unwrap_or_else(|| "none".into());
///         let mut output = batch.into_output();
///         let column = output.add_column("tier");
///         for event in &mut output.rows {
///             event.set(column, tier.clone());
///         }
///         Ok(output)
///     }
/// }
///
/// weir_sdk::export_enrich!(AddTier);
/// ```
pub trait Enrich {
    /// Turns a batch of events of the state's key into zero or more events of the same key.
    ///
    /// Each output event names the input row it came from ([`OutputEvent::origin`], an index
    /// into `batch.rows`); the host judges its lateness by its origin's. Start from
    /// [`Events::into_output`] to keep, drop, change or add fields to the input events one for
    /// one. The output may have different fields from the input. An error changes no state,
    /// and the host retries the batch's events one at a time, so only the events this refuses
    /// go to the dead-letter output, with the message.
    fn process(state: &State<'_>, batch: Events) -> Result<OutputEvents, String>;
}

impl<T: Aggregate> aggregate::Guest for T {
    fn add(
        state: &Scope,
        values: Vec<Field>,
        batch: columns::Events,
    ) -> Result<Vec<aggregate::Change>, String> {
        let values = state::Values::new(values);
        let columns::Events {
            fields: names,
            timestamps,
            values: list,
        } = batch;
        call_lists::with_one_batch(&names, &timestamps, list, |batch| {
            <T as Aggregate>::add_columns(&State::with_values(&values, Some(state)), batch)
        })?;
        Ok(values.into_changes())
    }

    fn merge(target: &Scope, source: &Scope) -> Result<(), String> {
        <T as Aggregate>::merge(&State::host(target), &State::host(source))
    }

    fn finish(state: &Scope, window: Window) -> Result<Vec<Field>, String> {
        <T as Aggregate>::finish(&State::host(state), window).map(Output::into_fields)
    }

    fn migrate(state: &Scope, from_version: String) -> Result<(), String> {
        <T as Aggregate>::migrate(&State::host(state), &from_version)
    }
}

/// Many windows in one call each, without their scopes: a window whose call asks for a map or
/// the key is answered `needs-scope` (the host then calls `aggregate` for it), one whose call
/// fails `failed` (the host calls `aggregate` for it, which reports the error).
impl<T: Aggregate> windows::Guest for T {
    fn add_windows(batches: windows::WindowBatches) -> windows::AddedWindows {
        let windows::WindowBatches {
            names,
            counts,
            values,
            fields,
            timestamps,
            kinds,
            ints,
            floats,
            columns,
        } = batches;
        let mut new = NewNames::default();
        let mut added = windows::AddedWindows {
            outcomes: Vec::with_capacity(counts.len()),
            change_counts: Vec::with_capacity(counts.len()),
            changes: Vec::new(),
            new_names: Vec::new(),
        };
        let mut values = values.into_iter();
        let (mut fields, mut timestamps) = (&fields[..], &timestamps[..]);
        let mut lists = call_lists::Lists::new(&kinds, &ints, &floats, columns.len());
        let rows = RefCell::new(column_view::Rows::new(columns));
        let mut window_columns = Vec::new();
        let mut state = state::Values::default();
        for count in counts {
            let (width, events) = (count.fields as usize, count.events as usize);
            state.refill(
                (values.by_ref().take(count.values as usize))
                    .map(|named| (name_str(&names, named.name), named.value)),
            );
            let (window_fields, window_timestamps) = (
                call_lists::take(&mut fields, width),
                call_lists::take(&mut timestamps, events),
            );
            let events = window_timestamps.len();
            lists.next_batch(window_fields.len(), events, &mut window_columns);
            let batch = Columns::new(
                &names,
                window_fields,
                window_timestamps,
                &window_columns,
                &rows,
            );
            let outcome = <T as Aggregate>::add_columns(&State::with_values(&state, None), &batch);
            let outcome = match outcome {
                _ if state.needs_scope() => windows::Outcome::NeedsScope,
                Ok(()) => windows::Outcome::Done,
                Err(_) => windows::Outcome::Failed,
            };
            let before = added.changes.len();
            if matches!(outcome, windows::Outcome::Done) {
                for (name, value) in state.take_changes() {
                    let name = new.index(&names, &mut added.new_names, name);
                    added.changes.push(windows::NamedChange { name, value });
                }
            }
            added.outcomes.push(outcome);
            added
                .change_counts
                .push((added.changes.len() - before) as u32);
        }
        added
    }

    fn finish_windows(states: windows::WindowStates) -> windows::FinishedWindows {
        let windows::WindowStates {
            names,
            value_counts,
            values,
            windows,
        } = states;
        let mut finished = windows::FinishedWindows {
            outcomes: Vec::with_capacity(windows.len()),
            field_counts: Vec::with_capacity(windows.len()),
            fields: Vec::new(),
            new_names: Vec::new(),
        };
        let mut new = NewNames::default();
        let mut values = values.into_iter();
        let mut state = state::Values::default();
        for (count, window) in value_counts.into_iter().zip(windows) {
            state.refill(
                (values.by_ref().take(count as usize))
                    .map(|named| (name_str(&names, named.name), named.value)),
            );
            let output = <T as Aggregate>::finish(&State::with_values(&state, None), window);
            let before = finished.fields.len();
            let outcome = match output {
                _ if state.needs_scope() => windows::Outcome::NeedsScope,
                Ok(output) => {
                    for field in output.into_fields() {
                        let name = new.index(&names, &mut finished.new_names, &field.name);
                        let value = field.value;
                        finished.fields.push(windows::Named { name, value });
                    }
                    windows::Outcome::Done
                }
                Err(_) => windows::Outcome::Failed,
            };
            finished.outcomes.push(outcome);
            finished
                .field_counts
                .push((finished.fields.len() - before) as u32);
        }
        finished
    }
}

/// The names a call's result uses beyond the call's own, each once.
#[derive(Default)]
struct NewNames {
    index: std::collections::BTreeMap<String, u32>,
}

impl NewNames {
    /// The index of `name` in the call's `names` (ascending), or past their end in `new_names`
    /// (added if absent).
    fn index(&mut self, names: &[String], new_names: &mut Vec<String>, name: &str) -> u32 {
        if let Ok(at) = names.binary_search_by(|known| known.as_str().cmp(name)) {
            return at as u32;
        }
        if let Some(&at) = self.index.get(name) {
            return at;
        }
        let at = (names.len() + new_names.len()) as u32;
        self.index.insert(name.to_owned(), at);
        new_names.push(name.to_owned());
        at
    }
}

impl<T: Enrich> enrich::Guest for T {
    fn process(state: &Scope, batch: columns::Events) -> Result<OutputEvents, String> {
        <T as Enrich>::process(&State::host(state), events::from_columns(batch))
    }
}

/// Exports a type implementing [`Aggregate`] as the component's `aggregate` interface.
///
/// Call it once, at the root of a `cdylib` crate, with the name of the type (a plain
/// identifier, not a path). The component then implements the `aggregator` world.
#[macro_export]
macro_rules! export_aggregate {
    ($ty:ident) => {
        $crate::bindings::aggregator::export!($ty with_types_in $crate::bindings::aggregator);
    };
}

/// Exports a type implementing [`Enrich`] as the component's `enrich` interface.
///
/// Call it once, at the root of a `cdylib` crate, with the name of the type (a plain
/// identifier, not a path). The component then implements the `enricher` world.
#[macro_export]
macro_rules! export_enrich {
    ($ty:ident) => {
        $crate::bindings::enricher::export!($ty with_types_in $crate::bindings::enricher);
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use windows::{ColumnKind, Named, Outcome, WindowBatches, WindowCounts};

    thread_local! {
        /// What `Recorder::add` saw, a line per window.
        static SEEN: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    /// Records each window's batch and named values `a` and `""`, and writes `new`, a name the
    /// call does not send, with the window's event count.
    struct Recorder;

    impl Aggregate for Recorder {
        fn add(state: &State, batch: &Events) -> Result<(), String> {
            let rows: Vec<_> = (batch.rows.iter())
                .map(|row| (row.timestamp, row.values.clone()))
                .collect();
            let seen = format!(
                "{:?} {rows:?} a={:?} empty={:?}",
                batch.fields,
                state.get("a"),
                state.get("")
            );
            SEEN.with(|lines| lines.borrow_mut().push(seen));
            state.put("new", batch.len() as i64);
            Ok(())
        }

        fn merge(_target: &State, _source: &State) -> Result<(), String> {
            Ok(())
        }

        fn finish(_state: &State, _window: Window) -> Result<Output, String> {
            Ok(Output::new())
        }
    }

    thread_local! {
        /// What `SliceRecorder::add_columns` saw, a line per window.
        static SLICES: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
    }

    /// Records each window's times, its `n` and `x` as slices, and its rows if it has a field
    /// `t`; its `add` fails, as the host never calls it here.
    struct SliceRecorder;

    impl Aggregate for SliceRecorder {
        fn add(_state: &State, _batch: &Events) -> Result<(), String> {
            Err("add_columns is what the SDK calls".into())
        }

        fn add_columns(state: &State, batch: &Columns) -> Result<(), String> {
            let rows = (batch.fields().any(|field| field == "t"))
                .then(|| batch.events().rows.iter().map(|row| row.values.clone()));
            let seen = format!(
                "{:?} {:?} {:?} {:?}",
                batch.timestamps(),
                batch.ints("n"),
                batch.floats("x"),
                rows.map(Vec::from_iter)
            );
            SLICES.with(|lines| lines.borrow_mut().push(seen));
            state.put("n", batch.len() as i64);
            Ok(())
        }

        fn merge(_target: &State, _source: &State) -> Result<(), String> {
            Ok(())
        }

        fn finish(_state: &State, _window: Window) -> Result<Output, String> {
            Ok(Output::new())
        }
    }

    /// `add_windows` hands `add_columns` each window's own slices: whole ones, and none for a
    /// field whose list ran short or that has no kind left; the rows only where asked for.
    #[test]
    fn add_windows_gives_add_columns_each_windows_slices() {
        SLICES.with(|lines| lines.borrow_mut().clear());
        let (ints, floats) = (ColumnKind::Ints, ColumnKind::Floats);
        let added = <SliceRecorder as windows::Guest>::add_windows(WindowBatches {
            names: vec!["n".into(), "t".into(), "x".into()],
            counts: vec![
                counts(0, 2, 2),
                counts(0, 2, 1),
                counts(0, 1, 3),
                counts(0, 2, 1),
            ],
            values: vec![],
            fields: vec![0, 2, 0, 1, 0, 0, 2],
            timestamps: vec![10, 20, 30, 40, 50, 60, 70],
            kinds: vec![ints, floats, ints, ColumnKind::Values, ints],
            ints: vec![1, 2, 3, 4, 5],
            floats: vec![0.5, 1.5],
            columns: vec![Value::Text("a".into())],
        });
        let seen = SLICES.with(|lines| lines.borrow().clone());
        assert_eq!(
            seen,
            [
                "[10, 20] Some([1, 2]) Some([0.5, 1.5]) None",
                r#"[30] Some([3]) None Some([[Value::Int(3), Value::Text("a")]])"#,
                "[40, 50, 60] None None None",
                "[70] None None None",
            ]
        );
        assert!(matches!(
            added.outcomes[..],
            [Outcome::Done, Outcome::Done, Outcome::Done, Outcome::Done]
        ));
        assert_eq!(added.change_counts, [1, 1, 1, 1]);
    }

    fn counts(values: u32, fields: u32, events: u32) -> WindowCounts {
        WindowCounts {
            values,
            fields,
            events,
        }
    }

    /// A crafted call, as a host gone wrong might make it: a name index past `names` (read as
    /// the empty name, twice in one window: the last kept), a window with a field but no
    /// events (its kind still used up), and a last window whose counts run past every list.
    /// Each window sees exactly its own part, the rest empty; the name the operator adds is
    /// new, once for the whole call.
    #[test]
    fn a_crafted_call_gives_each_window_its_own_part_and_nothing_past_the_lists() {
        SEEN.with(|lines| lines.borrow_mut().clear());
        let named = |name: u32, value: i64| Named {
            name,
            value: Value::Int(value),
        };
        let added = <Recorder as windows::Guest>::add_windows(WindowBatches {
            names: vec!["a".into(), "b".into()],
            counts: vec![counts(3, 2, 1), counts(0, 1, 0), counts(5, 3, 4)],
            values: vec![named(0, 1), named(99, 2), named(7, 3)],
            fields: vec![0, 7, 1],
            timestamps: vec![10],
            kinds: vec![ColumnKind::Ints, ColumnKind::Values, ColumnKind::Floats],
            ints: vec![5],
            floats: vec![],
            columns: vec![Value::Text("t".into())],
        });
        let seen = SEEN.with(|lines| lines.borrow().clone());
        assert_eq!(
            seen,
            [
                r#"["a", ""] [(10, [Value::Int(5), Value::Text("t")])] a=Some(Value::Int(1)) empty=Some(Value::Int(3))"#,
                r#"["b"] [] a=None empty=None"#,
                r#"[] [] a=None empty=None"#,
            ]
        );
        assert!(matches!(
            added.outcomes[..],
            [Outcome::Done, Outcome::Done, Outcome::Done]
        ));
        assert_eq!(added.change_counts, [1, 1, 1]);
        let changes: Vec<_> = (added.changes.iter())
            .map(|change| (change.name, change.value.clone()))
            .collect();
        let new = Some(Value::Int(0));
        assert_eq!(
            changes,
            [(2, Some(Value::Int(1))), (2, new.clone()), (2, new)]
        );
        assert_eq!(added.new_names, ["new"]);
    }
}
