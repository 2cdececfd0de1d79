//! [`WasmAggregate`]: the `aggregate` interface of a component (any version of the contract),
//! and a 0.3 component's `windows`, as an [`AggregateOperator`]. Depends on `event`, `field_name`,
//! `state`, `time` and `value`.

use super::*;
use crate::field_name::FieldName;
use crate::operator::WindowEvents;
use bindings_v3::exports::weir::operator0_3_0::windows as wit_windows;
use std::collections::BTreeMap;

/// A per-shard instance of an aggregate component.
pub struct WasmAggregate {
    pub(super) guest: Guest,
    pub(super) projection: Projection,
    /// Whether calls carrying many windows are made (a 0.3 component), until one traps or a
    /// window needs its scope: then this instance gets one call per window.
    pub(super) carries_windows: bool,
}

impl std::fmt::Debug for WasmAggregate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmAggregate")
            .field("path", &self.guest.operator.path)
            .finish()
    }
}

/// Evaluates `$call` with `$exports` bound to the instance's `aggregate` exports, whichever
/// version of the contract they are: every function but `add` has the same signature in both.
macro_rules! with_aggregate {
    ($bindings:expr, |$exports:ident| $call:expr) => {
        match $bindings {
            Bindings::Aggregate(b) => {
                let $exports = b.weir_operator_aggregate();
                $call
            }
            Bindings::AggregateV2(b) => {
                let $exports = b.weir_operator0_2_0_aggregate();
                $call
            }
            Bindings::AggregateV3(b) => {
                let $exports = b.weir_operator0_2_0_aggregate();
                $call
            }
            Bindings::Enrich(_) | Bindings::EnrichV2(_) => {
                unreachable!("checked at load: the component is an aggregator")
            }
        }
    };
}

impl WasmAggregate {
    /// `add` of a 0.1 component: the batch as rows; state values through the scope's imports.
    fn add_rows(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        let batch = to_wit_events(events, &self.projection)?;
        self.guest
            .call(&mut [scope], Writes::Keep, |store, b, scopes| {
                let Bindings::Aggregate(b) = b else {
                    unreachable!("add_rows is only called for a 0.1 aggregator")
                };
                b.weir_operator_aggregate().call_add(
                    store,
                    Resource::new_borrow(scopes[0].rep()),
                    &batch,
                )
            })
    }

    /// `add` of a 0.2 (or 0.3) component: the batch as columns and the scope's named values
    /// with the call; the changes it returns go through the scope like writes made through its
    /// imports, so they too are kept only if the call succeeds (and the state quota admits
    /// them).
    fn add_columns(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        let batch = to_wit_columns(events, &self.projection)?;
        let values = named_values(&scope.state);
        self.guest
            .call(&mut [scope], Writes::Keep, |store, b, scopes| {
                let borrow = Resource::new_borrow(scopes[0].rep());
                let added = match b {
                    Bindings::AggregateV2(b) => b
                        .weir_operator0_2_0_aggregate()
                        .call_add(&mut *store, borrow, &values, &batch)?
                        .map(|changes| changes.into_iter().map(|c| (c.name, c.value)).collect()),
                    Bindings::AggregateV3(b) => b
                        .weir_operator0_2_0_aggregate()
                        .call_add(&mut *store, borrow, &values, &batch)?
                        .map(|changes| changes.into_iter().map(|c| (c.name, c.value)).collect()),
                    _ => unreachable!("add_columns is only called for a 0.2 or 0.3 aggregator"),
                };
                let changes: Vec<(String, Option<wit::Value>)> = match added {
                    Ok(changes) => changes,
                    Err(message) => return Ok(Err(message)),
                };
                apply(store.data_mut().table.get_mut(&scopes[0])?, changes);
                Ok(Ok(()))
            })
    }

    /// `windows.add-windows` of a 0.3 component over `windows`; see
    /// [`AggregateOperator::add_windows`]. A window whose batch cannot cross (too wide) is left
    /// to `add`, which says why; a malformed answer leaves every window to it.
    fn add_carried(&mut self, windows: &mut [WindowEvents<'_>]) -> CarriedResult<bool> {
        let mut done = vec![false; windows.len()];
        let (sent, call) = self.window_batches(windows);
        let added = match self.call_windows(sent.len(), |store, b| {
            b.weir_operator0_3_0_windows()
                .call_add_windows(store, &call)
        })? {
            None => return Ok(None),
            Some(added) => added,
        };
        let wit_windows::AddedWindows {
            outcomes,
            change_counts,
            changes,
            new_names,
        } = added;
        let names = Names::of(&call.names, &new_names);
        let answers = per_window(sent.len(), outcomes, change_counts, changes, |c| {
            Some((names.at(c.name)?, c.value))
        });
        let Some(answers) = self.accept(answers) else {
            return Ok(Some(done));
        };
        for (&i, answer) in sent.iter().zip(answers) {
            if let Answer::Done(changes) = answer {
                done[i] = self.keep(windows[i].scope, changes).is_ok();
            }
        }
        Ok(Some(done))
    }

    /// Applies a window's changes from a call carrying many windows to its state: all of them,
    /// or, if the pipeline's state quota refuses what they add, none.
    fn keep(&self, scope: &mut Scope, changes: Vec<(&str, Option<wit::Value>)>) -> Result<()> {
        let Some(quota) = &self.guest.limits.state_quota else {
            write_changes(&mut scope.state, changes);
            return Ok(());
        };
        let before = scope.state.clone();
        write_changes(&mut scope.state, changes);
        admit_states(quota, &mut [scope], vec![before])
    }

    /// The windows whose batches can cross (their indexes) and the flat `add-windows` input
    /// of them: each name once, in ascending byte order, and every list window after window.
    fn window_batches(
        &self,
        windows: &[WindowEvents<'_>],
    ) -> (Vec<usize>, wit_windows::WindowBatches) {
        let event_count = windows.iter().map(|window| window.events.len()).sum();
        // Each window's events are fetched before the window before them is read: their
        // headers are waited for then, and their fields arrive while that window is read (for
        // a window read from its crossings, only those are fetched, and nothing waits).
        let warm = |window: Option<&WindowEvents<'_>>| {
            if let Some(window) = window {
                window_call::warm(window.events, window.crossings, &self.projection);
            }
        };
        warm(windows.first());
        let mut call = wit_windows::WindowBatches {
            names: Vec::new(),
            counts: Vec::new(),
            values: Vec::new(),
            fields: Vec::new(),
            timestamps: Vec::with_capacity(event_count),
            kinds: Vec::new(),
            // Sized for one integer field, the usual case (grown by doubling, a large call's
            // lists were copied a dozen times); none if no field crosses.
            ints: Vec::with_capacity(match self.projection.crosses_no_field() {
                true => 0,
                false => event_count,
            }),
            floats: Vec::new(),
            columns: Vec::new(),
        };
        // Each window's events go in while they are in the cache; its names are indexed after.
        let mut sent = Vec::with_capacity(windows.len());
        let mut fields = Vec::with_capacity(windows.len());
        let mut shapes = window_call::WindowShapes::default();
        for (i, window) in windows.iter().enumerate() {
            warm(windows.get(i + 1));
            let pushed = window_call::push_window(
                &mut call,
                window.events,
                window.crossings,
                &self.projection,
                &mut shapes,
            );
            if let Ok(window_fields) = pushed {
                fields.push(window_fields);
                sent.push(i);
            }
        }
        let names = index_names(sent.iter().zip(&fields).flat_map(|(&i, fields)| {
            let values = windows[i].scope.state.values.keys().map(String::as_str);
            fields.iter().map(FieldName::as_str).chain(values)
        }));
        call.counts.reserve(sent.len());
        let values = sent
            .iter()
            .map(|&i| windows[i].scope.state.values.len())
            .sum();
        call.values.reserve(values);
        call.fields
            .reserve(fields.iter().map(|names| names.len()).sum());
        for (&i, fields) in sent.iter().zip(&fields) {
            let WindowEvents { scope, events, .. } = &windows[i];
            call.counts.push(wit_windows::WindowCounts {
                values: scope.state.values.len() as u32,
                fields: fields.len() as u32,
                events: events.len() as u32,
            });
            call.values.extend(named(&names, &scope.state));
            call.fields
                .extend(fields.iter().map(|field| names[field.as_str()]));
        }
        call.names = names.into_keys().map(str::to_owned).collect();
        (sent, call)
    }

    /// `windows.finish-windows` of a 0.3 component over `windows`; see
    /// [`AggregateOperator::finish_windows`]. An output over the size limit is left to
    /// `finish`, which refuses it.
    fn finish_carried(&mut self, windows: &[(&Scope, Window)]) -> CarriedResult<Option<Fields>> {
        let mut outputs = vec![None; windows.len()];
        let names = index_names(
            (windows.iter()).flat_map(|(scope, _)| scope.state.values.keys().map(String::as_str)),
        );
        let call = wit_windows::WindowStates {
            value_counts: (windows.iter())
                .map(|(scope, _)| scope.state.values.len() as u32)
                .collect(),
            values: {
                let count = windows.iter().map(|(scope, _)| scope.state.values.len());
                let mut values = Vec::with_capacity(count.sum());
                values.extend((windows.iter()).flat_map(|(scope, _)| named(&names, &scope.state)));
                values
            },
            windows: (windows.iter())
                .map(|(_, window)| wit::Window {
                    start: window.start,
                    end: window.end,
                })
                .collect(),
            names: names.into_keys().map(str::to_owned).collect(),
        };
        let finished = match self.call_windows(windows.len(), |store, b| {
            b.weir_operator0_3_0_windows()
                .call_finish_windows(store, &call)
        })? {
            None => return Ok(None),
            Some(finished) => finished,
        };
        let wit_windows::FinishedWindows {
            outcomes,
            field_counts,
            fields,
            new_names,
        } = finished;
        let names = Names::of(&call.names, &new_names);
        let answers = per_window(windows.len(), outcomes, field_counts, fields, |f| {
            let name = names.at(f.name)?.to_owned();
            Some(wit::Field {
                name,
                value: f.value,
            })
        });
        let Some(answers) = self.accept(answers) else {
            return Ok(Some(outputs));
        };
        for (output, answer) in outputs.iter_mut().zip(answers) {
            if let Answer::Done(fields) = answer {
                *output = output_fields(fields, &self.guest.limits).ok();
            }
        }
        Ok(Some(outputs))
    }

    /// A flat answer's windows, if it was well formed; after a malformed answer, or a window
    /// that needs its scope, this instance makes no more calls carrying many windows.
    fn accept<T>(&mut self, answers: Option<Vec<Answer<T>>>) -> Option<Vec<Answer<T>>> {
        let needs_scope = (answers.as_ref())
            .is_some_and(|answers| answers.iter().any(|a| matches!(a, Answer::NeedsScope)));
        if answers.is_none() || needs_scope {
            self.carries_windows = false;
            let reason = match needs_scope {
                true => "a window needed its scope (a map or the key)",
                false => "its answer did not match the call",
            };
            let module = self.guest.operator.path.display();
            tracing::info!(
                reason,
                %module,
                "an operator instance gets one call per window from now on"
            );
        }
        answers
    }

    /// Makes one `windows` call over `count` windows, if there are any. A trap (the instance is
    /// replaced) is returned as the error, and this instance makes no more such calls (nor
    /// after an answer its caller finds malformed).
    fn call_windows<R>(
        &mut self,
        count: usize,
        call: impl FnOnce(&mut Store<HostData>, &bindings_v3::Aggregator) -> wasmtime::Result<R>,
    ) -> Result<Option<R>> {
        if count == 0 {
            return Ok(None);
        }
        let outcome = self.guest.call(&mut [], Writes::Discard, |store, b, _| {
            let Bindings::AggregateV3(b) = b else {
                unreachable!("windows calls are only made to a 0.3 aggregator")
            };
            call(store, b).map(Ok::<R, GuestError>)
        });
        if let Err(OperatorError::Trapped(reason)) = &outcome {
            self.carries_windows = false;
            let module = self.guest.operator.path.display();
            tracing::info!(%reason, %module, "a call carrying many windows trapped: an operator instance gets one call per window from now on");
        }
        outcome.map(Some)
    }
}

/// Each of `names` once, with its index in ascending byte order (`str` orders by bytes): a
/// call's names.
fn index_names<'a>(names: impl Iterator<Item = &'a str>) -> BTreeMap<&'a str, u32> {
    let mut index: BTreeMap<&str, u32> = BTreeMap::new();
    for name in names {
        index.entry(name).or_insert(0);
    }
    for (at, slot) in index.values_mut().enumerate() {
        *slot = at as u32;
    }
    index
}

/// A scope's named values as a call carrying many windows sends them: names by index.
fn named<'a>(
    names: &'a BTreeMap<&str, u32>,
    state: &'a crate::state::ScopeState,
) -> impl Iterator<Item = wit_windows::Named> + 'a {
    (state.values.iter()).map(|(name, value)| wit_windows::Named {
        name: names[name.as_str()],
        value: to_wit(value.clone()),
    })
}

/// What a call carrying many windows answered for one window.
#[derive(Debug, PartialEq)]
enum Answer<T> {
    /// Done: its changes or output fields.
    Done(Vec<T>),
    Failed,
    NeedsScope,
}

/// A call's names and the names its answer added, read by index.
struct Names<'a> {
    names: &'a [String],
    new_names: &'a [String],
}

impl<'a> Names<'a> {
    fn of(names: &'a [String], new_names: &'a [String]) -> Self {
        Names { names, new_names }
    }

    /// Name `i`: of the call's names, or past their end, of the answer's new ones.
    fn at(&self, i: u32) -> Option<&'a str> {
        let i = i as usize;
        match i.checked_sub(self.names.len()) {
            None => Some(&self.names[i]),
            Some(new) => self.new_names.get(new).map(String::as_str),
        }
    }
}

/// Each window's answer from a flat one (`outcomes` and `counts` per window, `items` window
/// after window, each read with `read`), or `None` if it is malformed: not one outcome and one
/// count per window, counts not adding up to the items, items for a window not done, or an
/// item `read` refuses (a name past both name lists). Nothing of a malformed answer is used,
/// so no window can get another's items.
fn per_window<I, T>(
    windows: usize,
    outcomes: Vec<wit_windows::Outcome>,
    counts: Vec<u32>,
    items: Vec<I>,
    read: impl Fn(I) -> Option<T>,
) -> Option<Vec<Answer<T>>> {
    let counted: u64 = counts.iter().map(|&c| u64::from(c)).sum();
    if outcomes.len() != windows || counts.len() != windows || counted != items.len() as u64 {
        return None;
    }
    let mut items = items.into_iter();
    // Sized once (a collect into an `Option` of a list cannot know the length ahead).
    let mut answers = Vec::with_capacity(windows);
    for (outcome, count) in outcomes.into_iter().zip(counts) {
        let mine = items.by_ref().take(count as usize);
        answers.push(match outcome {
            wit_windows::Outcome::Done => Answer::Done(mine.map(&read).collect::<Option<_>>()?),
            _ if count > 0 => return None,
            wit_windows::Outcome::Failed => Answer::Failed,
            wit_windows::Outcome::NeedsScope => Answer::NeedsScope,
        });
    }
    Some(answers)
}

/// A scope's named values, as they cross with a call.
fn named_values(state: &crate::state::ScopeState) -> Vec<wit::Field> {
    (state.values.iter())
        .map(|(name, value)| wit::Field {
            name: name.clone(),
            value: to_wit(value.clone()),
        })
        .collect()
}

/// Applies the changes a call returned to its scope's named values (`None` removes).
fn apply(slot: &mut ScopeSlot, changes: impl IntoIterator<Item = (String, Option<wit::Value>)>) {
    for (name, value) in changes {
        match value {
            Some(value) => slot.put(name, from_wit(value)),
            None => slot.remove(name),
        }
    }
}

/// Writes the changes a call returned into `state`, in their order (`None` removes): the last
/// change of a name wins.
fn write_changes(state: &mut crate::state::ScopeState, changes: Vec<(&str, Option<wit::Value>)>) {
    for (name, value) in changes {
        match value {
            Some(value) => state.put(name, from_wit(value)),
            None => state.remove(name),
        }
    }
}

/// A `finish` call's output as fields, if within the output size limit.
fn output_fields(fields: Vec<wit::Field>, limits: &Limits) -> Result<Fields> {
    let fields: Fields = (fields.into_iter())
        .map(|f| (f.name, from_wit(f.value)))
        .collect();
    check_output(
        fields
            .iter()
            .map(|(name, value)| name.len() + value.size())
            .sum(),
        limits,
    )?;
    Ok(fields)
}

impl AggregateOperator for WasmAggregate {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        match self.guest.bindings {
            Bindings::AggregateV2(_) | Bindings::AggregateV3(_) => self.add_columns(scope, events),
            _ => self.add_rows(scope, events),
        }
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        self.guest
            .call(&mut [target, source], Writes::Keep, |store, b, scopes| {
                with_aggregate!(b, |exports| exports.call_merge(
                    store,
                    Resource::new_borrow(scopes[0].rep()),
                    Resource::new_borrow(scopes[1].rep()),
                ))
            })
    }

    fn migrate(&mut self, scope: &mut Scope, from_version: &str) -> Result<()> {
        self.guest
            .call(&mut [scope], Writes::Keep, |store, b, scopes| {
                with_aggregate!(b, |exports| exports.call_migrate(
                    store,
                    Resource::new_borrow(scopes[0].rep()),
                    from_version,
                ))
            })
    }

    fn finish(&mut self, scope: &mut Scope, window: Window) -> Result<Fields> {
        let window = wit::Window {
            start: window.start,
            end: window.end,
        };
        let fields = self
            .guest
            .call(&mut [scope], Writes::Discard, |store, b, scopes| {
                with_aggregate!(b, |exports| exports.call_finish(
                    store,
                    Resource::new_borrow(scopes[0].rep()),
                    window
                ))
            })?;
        output_fields(fields, &self.guest.limits)
    }

    fn carries_windows(&self) -> bool {
        self.carries_windows
    }

    fn add_windows(&mut self, windows: &mut [WindowEvents<'_>]) -> CarriedResult<bool> {
        match self.carries_windows {
            true => self.add_carried(windows),
            false => Ok(None),
        }
    }

    fn finish_windows(&mut self, windows: &[(&Scope, Window)]) -> CarriedResult<Option<Fields>> {
        match self.carries_windows {
            true => self.finish_carried(windows),
            false => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::wit_windows::Outcome::{Done, Failed, NeedsScope};
    use super::{Answer, Names, per_window};

    /// A call's changes are written in their order: a name changed twice keeps the last, one
    /// removed then written is written, one written then removed is gone, the rest untouched.
    #[test]
    fn changes_are_written_in_their_order() {
        use super::{wit, write_changes};
        use crate::state::ScopeState;
        use crate::value::Value;
        let state = |values: &[(&str, Value)]| {
            let mut state = ScopeState::default();
            for (name, value) in values {
                state.put(name, value.clone());
            }
            state
        };
        let mut written = state(&[
            ("kept", Value::Int(1)),
            ("twice", Value::Int(2)),
            ("gone", Value::Int(3)),
            ("back", Value::Int(4)),
        ]);
        let changes = vec![
            ("twice", Some(wit::Value::Int(5))),
            ("new", Some(wit::Value::Text("x".into()))),
            ("twice", Some(wit::Value::Int(6))),
            ("back", None),
            ("gone", None),
            ("back", Some(wit::Value::Float(0.5))),
            ("brief", Some(wit::Value::Int(7))),
            ("brief", None),
        ];
        write_changes(&mut written, changes);
        let expected = state(&[
            ("kept", Value::Int(1)),
            ("twice", Value::Int(6)),
            ("new", Value::Text("x".into())),
            ("back", Value::Float(0.5)),
        ]);
        assert_eq!(written, expected);
        assert_eq!(written.get("twice"), Some(&Value::Int(6)));
        assert_eq!(written.get("back"), Some(&Value::Float(0.5)));
        assert_eq!((written.get("gone"), written.get("brief")), (None, None));
    }

    /// Items are numbers here, read as themselves unless over 100 (a name no list has).
    fn answers(
        outcomes: Vec<super::wit_windows::Outcome>,
        counts: Vec<u32>,
        items: Vec<u32>,
    ) -> Option<Vec<Answer<u32>>> {
        per_window(3, outcomes, counts, items, |i| (i <= 100).then_some(i))
    }

    #[test]
    fn a_flat_answer_gives_each_window_its_own_items() {
        assert_eq!(
            answers(vec![Done, Failed, Done], vec![2, 0, 1], vec![1, 2, 3]),
            Some(vec![
                Answer::Done(vec![1, 2]),
                Answer::Failed,
                Answer::Done(vec![3])
            ])
        );
        assert_eq!(
            answers(vec![NeedsScope, Done, Done], vec![0, 0, 0], vec![]),
            Some(vec![
                Answer::NeedsScope,
                Answer::Done(vec![]),
                Answer::Done(vec![])
            ])
        );
    }

    /// A malformed answer is used for no window: otherwise one window's items could land on
    /// another's state.
    #[test]
    fn a_malformed_flat_answer_is_used_for_no_window() {
        // Counts not adding up, or not one per window; outcomes not one per window.
        assert_eq!(
            answers(vec![Done, Done, Done], vec![1, 1, 1], vec![1, 2]),
            None
        );
        assert_eq!(
            answers(vec![Done, Done, Done], vec![1, 1], vec![1, 2]),
            None
        );
        assert_eq!(answers(vec![Done, Done], vec![1, 1, 0], vec![1, 2]), None);
        // Items for a window not done.
        assert_eq!(
            answers(vec![Failed, Done, Done], vec![1, 1, 0], vec![1, 2]),
            None
        );
        assert_eq!(
            answers(vec![NeedsScope, Done, Done], vec![1, 0, 0], vec![1]),
            None
        );
        // An item naming no name, in a middle window.
        assert_eq!(
            answers(vec![Done, Done, Done], vec![1, 2, 1], vec![1, 999, 2, 3]),
            None
        );
        // Counts whose sum overflows 32 bits.
        assert_eq!(
            answers(vec![Done, Done, Done], vec![u32::MAX, u32::MAX, 2], vec![]),
            None
        );
    }

    #[test]
    fn names_past_the_calls_are_the_answers_new_ones() {
        let (names, new) = (["a".to_owned(), "b".to_owned()], ["c".to_owned()]);
        let names = Names::of(&names, &new);
        assert_eq!(
            (names.at(0), names.at(1), names.at(2)),
            (Some("a"), Some("b"), Some("c"))
        );
        assert_eq!((names.at(3), names.at(u32::MAX)), (None, None));
    }
}
