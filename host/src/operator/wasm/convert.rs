//! Values and events across the boundary: Weir's typed values to the WIT types and back,
//! and which event fields cross ([`Projection`]).

use super::*;

/// Which event fields cross the boundary. Every field costs a conversion per event (and a guest
/// allocation for text), so aggregates by default skip the key and timestamp fields, which the
/// guest has as `scope.key()` and `event.timestamp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Projection {
    /// Every field of the events.
    All,
    /// Every field but these.
    Except(Vec<String>),
    /// Only these fields, in this order (`null` where an event lacks one).
    Only(Vec<String>),
}

/// Converts a batch to the WIT shape: field names once, then one row of values per event.
pub(super) fn to_wit_events(events: &[&Event], projection: &Projection) -> wit::Events {
    let mut fields: Vec<&str> = Vec::new();
    match projection {
        Projection::Only(names) => fields.extend(names.iter().map(String::as_str)),
        Projection::All | Projection::Except(_) => {
            let skip: &[String] = match projection {
                Projection::Except(skip) => skip,
                _ => &[],
            };
            for event in events {
                for (name, _) in &event.fields {
                    if !fields.contains(&&**name) && !skip.iter().any(|s| s == &**name) {
                        fields.push(name);
                    }
                }
            }
        }
    }
    let rows = events
        .iter()
        .map(|event| wit::Event {
            timestamp: event.timestamp,
            values: fields
                .iter()
                .map(|field| {
                    event
                        .fields
                        .iter()
                        .find(|(name, _)| &**name == *field)
                        .map_or(wit::Value::Null, |(_, value)| to_wit(value.clone()))
                })
                .collect(),
        })
        .collect();
    wit::Events {
        fields: fields.into_iter().map(str::to_owned).collect(),
        rows,
    }
}

pub(super) fn to_wit(value: Value) -> wit::Value {
    match value {
        Value::Null => wit::Value::Null,
        Value::Boolean(b) => wit::Value::Boolean(b),
        Value::Int(i) => wit::Value::Int(i),
        Value::Float(f) => wit::Value::Float(f),
        Value::Text(s) => wit::Value::Text(s),
        Value::Bytes(b) => wit::Value::Bytes(b),
    }
}

pub(super) fn from_wit(value: wit::Value) -> Value {
    match value {
        wit::Value::Null => Value::Null,
        wit::Value::Boolean(b) => Value::Boolean(b),
        wit::Value::Int(i) => Value::Int(i),
        wit::Value::Float(f) => Value::Float(f),
        wit::Value::Text(s) => Value::Text(s),
        wit::Value::Bytes(b) => Value::Bytes(b),
    }
}
