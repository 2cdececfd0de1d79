//! [`NativeCountSum`]: count and sum of `amount`, compiled into the host; the exact twin of the
//! `tumbling-count-sum` example component, so benchmarks compare like with like.

use crate::event::Event;
use crate::time::Window;
use crate::value::{Fields, Value};

use super::super::{AggregateOperator, OperatorError, Result, Scope};

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

impl AggregateOperator for NativeCountSum {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        let mut sum = scope.state.get("sum").cloned().unwrap_or(Value::Int(0));
        for event in events {
            let amount = event.fields.iter().find(|(name, _)| &**name == "amount");
            sum = amount
                .and_then(|(_, amount)| plus(&sum, amount))
                .ok_or_else(|| OperatorError::Rejected(NOT_NUMERIC.into()))?;
        }
        let count = count(scope)
            .unwrap_or(0)
            .saturating_add(events.len() as i64);
        scope.state.put("count", Value::Int(count));
        scope.state.put("sum", sum);
        Ok(())
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        let (Some(count), Some(sum)) = (count(source), source.state.get("sum")) else {
            return Ok(()); // an empty source
        };
        let before = target.state.get("sum").cloned().unwrap_or(Value::Int(0));
        let total = plus(&before, sum)
            .ok_or_else(|| OperatorError::Rejected("state `sum` is not a number".into()))?;
        let count = self::count(target).unwrap_or(0).saturating_add(count);
        target.state.put("sum", total);
        target.state.put("count", Value::Int(count));
        Ok(())
    }

    fn finish(&mut self, scope: &mut Scope, _window: Window) -> Result<Fields> {
        Ok(vec![
            ("count".into(), Value::Int(count(scope).unwrap_or(0))),
            (
                "sum".into(),
                scope.state.get("sum").cloned().unwrap_or(Value::Int(0)),
            ),
        ])
    }
}
