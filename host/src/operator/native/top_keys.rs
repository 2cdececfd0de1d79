//! [`TopKeys`]: the native twin of the `top-keys` example component: per window, the three keys
//! with the highest `count` (ties to the lower key), as `key_1`, `count_1`, ... . Depends on
//! `event`, `time` and `value`.

use crate::event::Event;
use crate::time::Window;
use crate::value::{Fields, Value};

use super::super::{AggregateOperator, OperatorError, Result, Scope};

const COUNTS: &str = "counts";
const TOP: usize = 3;

/// The top-keys aggregate.
#[derive(Debug, Default)]
pub struct TopKeys;

fn field<'a>(event: &'a Event, name: &str) -> Option<&'a Value> {
    event
        .fields
        .iter()
        .find(|(field, _)| &**field == name)
        .map(|(_, value)| value)
}

fn count(scope: &Scope, key: &str) -> i64 {
    match scope.state.map_get(COUNTS, key) {
        Some(Value::Int(i)) => *i,
        _ => 0,
    }
}

impl AggregateOperator for TopKeys {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> Result<()> {
        for event in events {
            let key = match field(event, "key") {
                Some(Value::Text(text)) => text.to_string(),
                Some(Value::Int(i)) => i.to_string(),
                _ => {
                    return Err(OperatorError::Rejected(
                        "event without a text or integer `key`".into(),
                    ));
                }
            };
            let Some(Value::Int(more)) = field(event, "count") else {
                return Err(OperatorError::Rejected(
                    "event without an integer `count`".into(),
                ));
            };
            let total = count(scope, &key).saturating_add(*more);
            scope.state.map_put(COUNTS, &key, Value::Int(total));
        }
        Ok(())
    }

    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> Result<()> {
        for key in source.state.map_entries(COUNTS) {
            let total = count(target, &key).saturating_add(count(source, &key));
            target.state.map_put(COUNTS, &key, Value::Int(total));
        }
        Ok(())
    }

    fn finish(&mut self, scope: &mut Scope, _window: Window) -> Result<Fields> {
        let mut counts: Vec<(i64, String)> = scope
            .state
            .map_entries(COUNTS)
            .into_iter()
            .map(|key| (count(scope, &key), key))
            .collect();
        counts.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let mut output = Vec::new();
        for (rank, (count, key)) in counts.into_iter().take(TOP).enumerate() {
            output.push((format!("key_{}", rank + 1), Value::Text(key.into())));
            output.push((format!("count_{}", rank + 1), Value::Int(count)));
        }
        Ok(output)
    }
}
