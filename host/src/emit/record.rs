//! The output record formats. One JSON object per line; see the README's "Output" section.

use crate::event::{DeadLetter, Event};
use crate::time::Millis;
use crate::value::{Fields, fields_to_json};
use crate::window::{Emission, LateEvent};

/// The operator that produced a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorLabel {
    /// Its name in the spec.
    pub name: String,
    /// Its version in the spec.
    pub version: String,
}

/// A window result, update or retraction:
/// `{"key", "window_start", "window_end", "value", "kind", "version", "operator", "operator_version"}`.
pub fn result_record(emission: &Emission, operator: &OperatorLabel) -> serde_json::Value {
    serde_json::json!({
        "key": &*emission.key,
        "window_start": emission.window.start,
        "window_end": emission.window.end,
        "value": fields_to_json(&emission.value),
        "kind": emission.kind.as_str(),
        "version": emission.version,
        "operator": operator.name,
        "operator_version": operator.version,
    })
}

/// An enriched event of a pipeline without an aggregate:
/// `{"key", "timestamp", "value", "kind": "event", "operator", "operator_version"}`.
pub fn event_record(event: &Event, operator: &OperatorLabel) -> serde_json::Value {
    let fields: Fields = event
        .fields
        .iter()
        .map(|(name, value)| (name.to_string(), value.clone()))
        .collect();
    serde_json::json!({
        "key": &*event.key,
        "timestamp": event.timestamp,
        "value": fields_to_json(&fields),
        "kind": "event",
        "operator": operator.name,
        "operator_version": operator.version,
    })
}

/// A late event: `{"line", "key", "timestamp", "watermark", "event", "reason"}`.
pub fn late_record(late: &LateEvent) -> serde_json::Value {
    serde_json::json!({
        "line": late.event.line,
        "key": &*late.event.key,
        "timestamp": late.event.timestamp,
        "watermark": watermark_json(late.watermark),
        "event": late.event.to_json(),
        "reason": late.reason,
    })
}

/// A dead letter: `{"line", "raw", "reason"}` (`line` is 0 for failures not tied to an input
/// line, such as a window the operator could not finish).
pub fn dead_letter_record(dead: &DeadLetter) -> serde_json::Value {
    serde_json::json!({ "line": dead.line, "raw": dead.raw, "reason": dead.reason })
}

fn watermark_json(watermark: Millis) -> serde_json::Value {
    match watermark {
        Millis::MIN => serde_json::Value::Null,
        w => w.into(),
    }
}
