//! Native operators, compiled into the host: the baseline that benchmarks compare Wasm against.

use crate::event::Event;
use crate::time::Window;
use crate::value::{Fields, Value};

use super::{AggregateOperator, OperatorError, Result, Scope};

/// Count and integer sum of the field `amount`: the native twin of the
/// `tumbling-count-sum` example component (integer amounts only).
#[derive(Debug, Default)]
pub struct NativeCountSum;

fn int(scope: &Scope, name: &str) -> i64 {
    match scope.state.get(name) {
        Some(Value::Int(i)) => *i,
        _ => 0,
    }
}

impl AggregateOperator for NativeCountSum {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        let mut sum = int(scope, "sum");
        for event in events {
            match event.fields.iter().find(|(name, _)| &**name == "amount") {
                Some((_, Value::Int(amount))) => sum = sum.wrapping_add(*amount),
                _ => {
                    return Err(OperatorError::Rejected(
                        "event without an integer `amount` field".into(),
                    ));
                }
            }
        }
        let count = int(scope, "count") + events.len() as i64;
        scope.state.put("count", Value::Int(count));
        scope.state.put("sum", Value::Int(sum));
        Ok(())
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        let (count, sum) = (
            int(target, "count") + int(source, "count"),
            int(target, "sum") + int(source, "sum"),
        );
        target.state.put("count", Value::Int(count));
        target.state.put("sum", Value::Int(sum));
        Ok(())
    }

    fn finish(&mut self, scope: &mut Scope, _window: Window) -> Result<Fields> {
        Ok(vec![
            ("count".into(), Value::Int(int(scope, "count"))),
            ("sum".into(), Value::Int(int(scope, "sum"))),
        ])
    }
}
