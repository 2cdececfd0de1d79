//! [`NativeCountSum`]: count and sum of `amount`, compiled into the host; the exact twin of the
//! `tumbling-count-sum` example component, so benchmarks compare like with like: like the
//! component (contract 0.3), it takes windows many to a call and reads each window's amounts
//! from the router's crossings where it has them.
//!
//! Depends on `event`, `field_name`, `time` and `value`.

use std::sync::OnceLock;

use crate::event::{Crossing, Event};
use crate::field_name::{FieldName, InternedName};
use crate::time::Window;
use crate::value::{Fields, Value};

use super::super::{AggregateOperator, CarriedResult, OperatorError, Result, Scope, WindowEvents};

/// The field summed, the only one whose crossings the count-sum reads.
pub const AMOUNT: &str = "amount";

/// The error of a batch with an event lacking a numeric `amount` (the component's words).
const NOT_NUMERIC: &str = "event without a numeric `amount` field";

/// Count, and sum of the field `amount`: an int while every amount is an int and the sum fits,
/// a float from the first float amount (or overflow) on. A batch with an event lacking a
/// numeric `amount` is rejected whole.
#[derive(Debug, Default)]
pub struct NativeCountSum;

/// `a + b` as the SDKs' `plus`: an int if both are ints and the sum fits, else a float; `None`
/// if either is not a number.
pub fn plus(a: &Value, b: &Value) -> Option<Value> {
    if let (Value::Int(a), Value::Int(b)) = (a, b)
        && let Some(sum) = a.checked_add(*b)
    {
        return Some(Value::Int(sum));
    }
    Some(Value::Float(as_float(a)? + as_float(b)?))
}

fn as_float(value: &Value) -> Option<f64> {
    match value {
        Value::Int(i) => Some(*i as f64),
        Value::Float(f) => Some(*f),
        _ => None,
    }
}

fn count(scope: &Scope) -> Option<i64> {
    match scope.state.get("count") {
        Some(Value::Int(i)) => Some(*i),
        _ => None,
    }
}

/// The state's sum so far.
fn sum(scope: &Scope) -> Value {
    scope.state.get("sum").cloned().unwrap_or(Value::Int(0))
}

/// Stores the count and sum after `added` more events.
fn put_count_and_sum(scope: &mut Scope, added: usize, sum: Value) {
    let count = count(scope).unwrap_or(0).saturating_add(added as i64);
    scope.state.put("count", Value::Int(count));
    scope.state.put("sum", sum);
}

/// `amount`, interned (`None` if the table had no room for it: then no crossing is of it).
fn amount_name() -> Option<InternedName> {
    static AMOUNT_NAME: OnceLock<Option<InternedName>> = OnceLock::new();
    *AMOUNT_NAME.get_or_init(|| FieldName::new(AMOUNT).interned())
}

/// `sum` plus each event's `amount`, from the router's crossings if every event came with its
/// `amount` (the events unread), else from the events; `None` if an event has no numeric
/// `amount`.
fn sum_window(sum: Value, window: &WindowEvents<'_>) -> Option<Value> {
    if window.crossings.len() == window.events.len()
        && let Some(total) = sum_crossings(&sum, window.crossings)
    {
        #[cfg(debug_assertions)]
        for (crossing, event) in window.crossings.iter().zip(window.events) {
            let crossing = crossing.expect("every crossing was summed");
            // Numbers compare bit for bit: a NaN matches itself, and -0.0 does not match 0.0.
            let number = event_amount(event).and_then(crate::event::CrossingNumber::of);
            assert_eq!(
                (event.timestamp, number),
                (crossing.timestamp, Some(crossing.number)),
                "a crossing that is not its event's"
            );
        }
        return Some(total);
    }
    sum_events(sum, window.events)
}

/// `sum` plus the amounts in `crossings`; `None` unless every one is a crossing of `amount`.
fn sum_crossings(sum: &Value, crossings: &[&Option<Crossing>]) -> Option<Value> {
    let amount = amount_name()?;
    crossings.iter().try_fold(sum.clone(), |total, crossing| {
        let crossing = crossing.filter(|crossing| crossing.field == amount)?;
        plus(&total, &crossing.number.into())
    })
}

/// `sum` plus each of `events`' `amount`; `None` if one has no numeric `amount`.
fn sum_events(sum: Value, events: &[&Event]) -> Option<Value> {
    (events.iter()).try_fold(sum, |sum, event| plus(&sum, event_amount(event)?))
}

/// The event's `amount`, if it has one.
fn event_amount(event: &Event) -> Option<&Value> {
    let (_, amount) = event.fields.iter().find(|(name, _)| &**name == AMOUNT)?;
    Some(amount)
}

impl AggregateOperator for NativeCountSum {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        let sum = sum_events(sum(scope), events)
            .ok_or_else(|| OperatorError::Rejected(NOT_NUMERIC.into()))?;
        put_count_and_sum(scope, events.len(), sum);
        Ok(())
    }

    fn carries_windows(&self) -> bool {
        true
    }

    /// Each window as `add` would add it; a window with an event lacking a numeric `amount` is
    /// left as it was, for `add` alone to refuse.
    fn add_windows(&mut self, windows: &mut [WindowEvents<'_>]) -> CarriedResult<bool> {
        let added = windows.iter_mut().map(|window| {
            let Some(sum) = sum_window(sum(window.scope), window) else {
                return false;
            };
            put_count_and_sum(window.scope, window.events.len(), sum);
            true
        });
        Ok(Some(added.collect()))
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        let (Some(count), Some(sum)) = (count(source), source.state.get("sum")) else {
            return Ok(()); // an empty source
        };
        let total = plus(&self::sum(target), sum)
            .ok_or_else(|| OperatorError::Rejected("state `sum` is not a number".into()))?;
        let count = self::count(target).unwrap_or(0).saturating_add(count);
        target.state.put("sum", total);
        target.state.put("count", Value::Int(count));
        Ok(())
    }

    /// Each window's output, as `finish` gives it (as the component's calls carry finishes
    /// too).
    fn finish_windows(&mut self, windows: &[(&Scope, Window)]) -> CarriedResult<Option<Fields>> {
        Ok(Some(
            (windows.iter())
                .map(|(scope, _)| Some(output(scope)))
                .collect(),
        ))
    }

    fn finish(&mut self, scope: &mut Scope, _window: Window) -> Result<Fields> {
        Ok(output(scope))
    }
}

/// A window's result: its count and sum.
fn output(scope: &Scope) -> Fields {
    vec![
        ("count".into(), Value::Int(count(scope).unwrap_or(0))),
        ("sum".into(), sum(scope)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::CrossingNumber;
    use crate::operator::Projection;
    use crate::state::ScopeState;

    fn event(t: i64, fields: &[(&str, Value)]) -> Event {
        Event {
            line: 1,
            key: "k".into(),
            timestamp: t,
            fields: fields
                .iter()
                .map(|(name, value)| (FieldName::new(name), value.clone()))
                .collect(),
        }
    }

    /// A window's state so far: one event, summing to `sum`.
    fn scope(sum: &Value) -> Scope {
        let mut state = ScopeState::default();
        state.put("sum", sum.clone());
        state.put("count", Value::Int(1));
        Scope {
            key: "k".into(),
            state,
        }
    }

    /// The state `add` leaves from `sum`, written out (floats bit for bit), or its error.
    fn by_add(sum: &Value, events: &[&Event]) -> String {
        let mut scope = scope(sum);
        match NativeCountSum.add(&mut scope, events) {
            Ok(()) => format!("{:?}", scope.state),
            Err(error) => error.to_string(),
        }
    }

    /// `windows` carried to one `add_windows` call from `sum`, each event with the crossing
    /// `cross` gives it: which windows were added, and each one's state written out.
    fn carried(
        sum: &Value,
        windows: &[&[Event]],
        cross: impl Fn(&Event) -> Option<Crossing>,
    ) -> (Vec<bool>, Vec<String>) {
        let events: Vec<Vec<&Event>> = windows.iter().map(|w| w.iter().collect()).collect();
        let crossings: Vec<Vec<Option<Crossing>>> = (windows.iter())
            .map(|w| w.iter().map(&cross).collect())
            .collect();
        let crossing_refs: Vec<Vec<&Option<Crossing>>> =
            crossings.iter().map(|c| c.iter().collect()).collect();
        let mut scopes: Vec<Scope> = windows.iter().map(|_| scope(sum)).collect();
        let mut calls: Vec<WindowEvents<'_>> = (scopes.iter_mut())
            .zip(&events)
            .zip(&crossing_refs)
            .map(|((scope, events), crossings)| WindowEvents {
                scope,
                events,
                crossings,
            })
            .collect();
        let done = NativeCountSum.add_windows(&mut calls).unwrap().unwrap();
        let states = scopes.iter().map(|s| format!("{:?}", s.state)).collect();
        (done, states)
    }

    fn amount(t: i64, value: Value) -> Event {
        event(t, &[("amount", value)])
    }

    /// What the router takes for the count-sum by default: the one field besides key and time.
    fn router(event: &Event) -> Option<Crossing> {
        Projection::except(&["user", "ts"]).sole_crossing(event)
    }

    /// Windows carried to one call leave what `add` leaves, whether each event came with its
    /// `amount` crossed (read from there), some did not (read from the events, from the start:
    /// a window crossed for its first event and not its second), or an event has no numeric
    /// amount (the window left as it was, for `add` alone to refuse); from an integer sum and
    /// from -0.0, with a NaN.
    #[test]
    fn windows_carried_to_one_call_leave_what_add_leaves() {
        let ints = [amount(7, Value::Int(i64::MAX)), amount(7, Value::Int(5))];
        let floats = [amount(7, Value::Float(-0.0)), amount(7, Value::Float(2.5))];
        let nan = [
            amount(7, Value::Float(-0.0)),
            amount(7, Value::Float(f64::NAN)),
        ];
        let half = [
            amount(7, Value::Int(1)),
            event(8, &[("amount", Value::Int(2)), ("x", Value::Int(1))]),
        ];
        let wide = [event(8, &[("amount", Value::Int(3)), ("x", Value::Int(1))])];
        let other = [event(9, &[("price", Value::Int(4))])];
        let text = [amount(7, Value::Int(1)), amount(7, Value::Text("2".into()))];
        assert!(router(&half[0]).is_some() && router(&half[1]).is_none());
        assert!(router(&wide[0]).is_none(), "two fields: no crossing");
        assert!(router(&other[0]).is_some(), "a crossing of another field");
        let windows: [&[Event]; 7] = [&ints, &floats, &nan, &half, &wide, &other, &text];
        for sum in [Value::Int(10), Value::Float(-0.0)] {
            let (done, states) = carried(&sum, &windows, router);
            assert_eq!(done, [true, true, true, true, true, false, false]);
            for ((window, state), done) in windows.iter().zip(states).zip(done) {
                let events: Vec<&Event> = window.iter().collect();
                let expected = match done {
                    true => by_add(&sum, &events),
                    false => format!("{:?}", scope(&sum).state),
                };
                assert_eq!(state, expected, "{events:?} from {sum:?}");
            }
        }
        let other: Vec<&Event> = other.iter().collect();
        let refused = by_add(&Value::Int(10), &other);
        assert_eq!(
            refused,
            format!("operator rejected the input: {NOT_NUMERIC}")
        );
    }

    /// The sum comes from the crossings when every event has one: given crossings that are not
    /// the events' own, the debug check stops it (it is on the crossed path alone).
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a crossing that is not its event's")]
    fn the_crossings_are_what_is_read() {
        let events = [amount(7, Value::Int(1)), amount(7, Value::Int(2))];
        carried(&Value::Int(0), &[&events], |event| {
            let mut crossing = router(event)?;
            crossing.number = CrossingNumber::Int(100);
            Some(crossing)
        });
    }

    /// `plus` against sums worked out by hand, as the component's SDK adds: an int while it
    /// fits, a float past it; a float from a float on; -0.0 kept only from -0.0.
    #[test]
    fn plus_adds_as_the_component_does() {
        let bits = |value: Option<Value>| match value {
            Some(Value::Float(f)) => Some(f.to_bits()),
            _ => None,
        };
        assert_eq!(plus(&Value::Int(2), &Value::Int(3)), Some(Value::Int(5)));
        assert_eq!(
            plus(&Value::Int(i64::MAX), &Value::Int(1)),
            Some(Value::Float(9_223_372_036_854_775_808.0))
        );
        assert_eq!(
            plus(&Value::Int(1), &Value::Float(0.5)),
            Some(Value::Float(1.5))
        );
        let negative_zero = Value::Float(-0.0);
        assert_eq!(
            bits(plus(&Value::Int(0), &negative_zero)),
            Some(0.0f64.to_bits())
        );
        assert_eq!(
            bits(plus(&negative_zero, &negative_zero)),
            Some((-0.0f64).to_bits())
        );
        assert!(
            matches!(plus(&Value::Float(f64::NAN), &Value::Int(1)), Some(Value::Float(f)) if f.is_nan())
        );
        assert_eq!(plus(&Value::Int(1), &Value::Text("1".into())), None);
        assert_eq!(plus(&Value::Null, &Value::Int(1)), None);
    }

    /// A window's sum comes from its crossings, not its events: crossings of 100 beside events
    /// of 1 and 2 sum to 200; one not of `amount`, or missing, sends the window to its events.
    #[test]
    fn the_crossings_are_summed() {
        let events = [amount(7, Value::Int(1)), amount(7, Value::Int(2))];
        let hundred = |event: &Event| {
            let mut crossing = router(event)?;
            crossing.number = CrossingNumber::Int(100);
            Some(crossing)
        };
        let crossings: Vec<Option<Crossing>> = events.iter().map(hundred).collect();
        let refs: Vec<&Option<Crossing>> = crossings.iter().collect();
        assert_eq!(sum_crossings(&Value::Int(0), &refs), Some(Value::Int(200)));
        let other = router(&event(7, &[("price", Value::Int(4))]));
        assert_eq!(sum_crossings(&Value::Int(0), &[refs[0], &other]), None);
        assert_eq!(sum_crossings(&Value::Int(0), &[refs[0], &None]), None);
    }

    /// Finishes carried to one call give each window's count and sum, as `finish` does, also
    /// for a window whose state was never written.
    #[test]
    fn finishes_carried_to_one_call_give_what_finish_gives() {
        let empty = Scope {
            key: "k".into(),
            state: ScopeState::default(),
        };
        let mut scopes = [scope(&Value::Int(3)), scope(&Value::Float(-0.0)), empty];
        let window = Window { start: 0, end: 10 };
        let carried = {
            let windows: Vec<(&Scope, Window)> = scopes.iter().map(|s| (s, window)).collect();
            NativeCountSum.finish_windows(&windows).unwrap().unwrap()
        };
        let expected = [
            (1, Value::Int(3)),
            (1, Value::Float(-0.0)),
            (0, Value::Int(0)),
        ];
        assert_eq!(carried.len(), scopes.len());
        for ((scope, carried), (count, sum)) in scopes.iter_mut().zip(carried).zip(expected) {
            let fields: Fields = vec![("count".into(), Value::Int(count)), ("sum".into(), sum)];
            assert_eq!(format!("{carried:?}"), format!("{:?}", Some(&fields)));
            let alone = NativeCountSum.finish(scope, window).unwrap();
            assert_eq!(format!("{alone:?}"), format!("{fields:?}"));
        }
    }
}
