//! The output record formats. One JSON object per line; see the README's "Output" section.

use crate::event::{DeadLetter, Event};
use crate::time::Millis;
use crate::value::{Fields, fields_to_json};
use crate::window::{Emission, LateEvent};

/// The pipeline and operator that produced a record, and how updates are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorLabel {
    /// The pipeline's name.
    pub pipeline: String,
    /// The operator's name in the spec.
    pub name: String,
    /// The operator's version in the spec.
    pub version: String,
    /// `[emit] mode = "changelog"`: an update is written after the retraction of the result it
    /// replaces.
    pub changelog: bool,
}

/// The output id of a window record: `pipeline/operator/start/end/version/key`, with `r` after
/// the version for a retraction. The same window result always gets the same id, in every run
/// and every replay, so consumers can de-duplicate on it. The key comes last, so it may contain
/// any character.
pub fn output_id(label: &OperatorLabel, emission: &Emission) -> String {
    let retract = if emission.kind == crate::window::EmissionKind::Retract {
        "r"
    } else {
        ""
    };
    format!(
        "{}/{}/{}/{}/{}{}/{}",
        label.pipeline,
        label.name,
        emission.window.start,
        emission.window.end,
        emission.version,
        retract,
        emission.key
    )
}

/// The records of a window emission: one, or in changelog mode for an update (or an early
/// result) that replaces an earlier result, the retraction of that result and then the
/// emission.
pub fn result_records(emission: &Emission, operator: &OperatorLabel) -> Vec<serde_json::Value> {
    use crate::window::EmissionKind;
    let mut records = Vec::with_capacity(2);
    if operator.changelog
        && matches!(emission.kind, EmissionKind::Update | EmissionKind::Early)
        && let Some(previous) = &emission.replaces
    {
        let retraction = Emission {
            kind: EmissionKind::Retract,
            version: emission.version - 1,
            value: previous.clone(),
            replaces: None,
            ..emission.clone()
        };
        records.push(result_record(&retraction, operator));
    }
    records.push(result_record(emission, operator));
    records
}

/// A window result, update or retraction: `{"id", "key", "window_start", "window_end",
/// "value", "kind", "version", "operator", "operator_version"}`.
pub fn result_record(emission: &Emission, operator: &OperatorLabel) -> serde_json::Value {
    serde_json::json!({
        "id": output_id(operator, emission),
        "key": &*emission.key,
        "window_start": emission.window.start,
        "window_end": emission.window.end,
        "value": fields_to_json(&emission.value),
        "kind": emission.kind.as_str(),
        "version": emission.version,
        "operator": operator.name,
        "operator_version": emission.operator_version.as_deref().unwrap_or(&operator.version),
    })
}

/// An enriched event of a pipeline without an aggregate: `{"id", "key", "timestamp", "value",
/// "kind": "event", "operator", "operator_version"}`. Its id is
/// `pipeline/operator/e<arrival index>.<n>`, `n` counting the outputs of one input event.
pub fn event_record(
    event: &Event,
    seq: u64,
    n: u64,
    operator: &OperatorLabel,
) -> serde_json::Value {
    let fields: Fields = event
        .fields
        .iter()
        .map(|(name, value)| (name.to_string(), value.clone()))
        .collect();
    serde_json::json!({
        "id": format!("{}/{}/e{seq}.{n}", operator.pipeline, operator.name),
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
    serde_json::json!({
        "line": dead.line,
        "raw": dead.raw,
        "reason": dead.reason,
        "cause": dead.cause.as_str(),
    })
}

fn watermark_json(watermark: Millis) -> serde_json::Value {
    match watermark {
        Millis::MIN => serde_json::Value::Null,
        w => w.into(),
    }
}
