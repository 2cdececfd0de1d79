//! The output record formats. One JSON object per line; see the README's "Output" section. Depends
//! on `event`, `field_name`, `hashing`, `time`, `value` and `window`.

use serde::Serialize;

use super::Record;
use crate::event::{DeadLetter, Staged};
use crate::field_name::FieldName;
use crate::time::Millis;
use crate::value::{Fields, Value, fields_to_json};
use crate::window::{Emission, EmissionKind, LateEvent};

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
    window_id(
        label,
        emission,
        emission.version,
        emission.kind == EmissionKind::Retract,
    )
}

fn window_id(label: &OperatorLabel, emission: &Emission, version: u64, retract: bool) -> String {
    let retract = if retract { "r" } else { "" };
    format!(
        "{}/{}/{}/{}/{}{}/{}",
        label.pipeline,
        label.name,
        emission.window.start,
        emission.window.end,
        version,
        retract,
        emission.key
    )
}

/// A record of the results sink: a window result, update or retraction (`{"id", "key",
/// "window_start", "window_end", "value", "kind", "version", "operator", "operator_version"}`),
/// or an enriched event. It borrows what it shows and is serialised straight to its line (it
/// was built as a `serde_json` map first, which cost the collector most of its time when every
/// event is a record).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum ResultRecord<'a> {
    /// A window result, update or retraction.
    Window(WindowResult<'a>),
    /// An enriched event.
    Event(EventResult<'a>),
}

impl ResultRecord<'_> {
    /// The record's `kind`: result, update, early, retract or event.
    pub fn kind(&self) -> &'static str {
        match self {
            ResultRecord::Window(record) => record.kind,
            ResultRecord::Event(_) => "event",
        }
    }
}

impl Record for ResultRecord<'_> {
    fn id(&self) -> Option<&str> {
        Some(match self {
            ResultRecord::Window(record) => &record.id,
            ResultRecord::Event(record) => &record.id,
        })
    }
}

/// A window result as written; see [`ResultRecord`].
#[derive(Debug, Serialize)]
pub struct WindowResult<'a> {
    id: String,
    key: &'a str,
    window_start: Millis,
    window_end: Millis,
    value: JsonFields<'a, String>,
    kind: &'static str,
    version: u64,
    operator: &'a str,
    operator_version: &'a str,
}

/// An enriched event as written; see [`event_record`].
#[derive(Debug, Serialize)]
pub struct EventResult<'a> {
    id: String,
    key: &'a str,
    timestamp: Millis,
    value: JsonFields<'a, FieldName>,
    kind: &'static str,
    operator: &'a str,
    operator_version: &'a str,
}

/// The records of a window emission: one, or in changelog mode for an update (or an early
/// result) that replaces an earlier result, the retraction of that result and then the
/// emission.
pub fn result_records<'a>(
    emission: &'a Emission,
    operator: &'a OperatorLabel,
) -> impl Iterator<Item = ResultRecord<'a>> {
    let retraction = match (&emission.replaces, emission.kind) {
        (Some(previous), EmissionKind::Update | EmissionKind::Early) if operator.changelog => {
            Some(window_result(
                emission,
                operator,
                emission.version - 1,
                EmissionKind::Retract,
                previous,
            ))
        }
        _ => None,
    };
    let record = window_result(
        emission,
        operator,
        emission.version,
        emission.kind,
        &emission.value,
    );
    retraction.into_iter().chain(std::iter::once(record))
}

/// A window result, update or retraction (see [`ResultRecord`]).
pub fn result_record<'a>(emission: &'a Emission, operator: &'a OperatorLabel) -> ResultRecord<'a> {
    window_result(
        emission,
        operator,
        emission.version,
        emission.kind,
        &emission.value,
    )
}

fn window_result<'a>(
    emission: &'a Emission,
    operator: &'a OperatorLabel,
    version: u64,
    kind: EmissionKind,
    value: &'a Fields,
) -> ResultRecord<'a> {
    ResultRecord::Window(WindowResult {
        id: window_id(operator, emission, version, kind == EmissionKind::Retract),
        key: &emission.key,
        window_start: emission.window.start,
        window_end: emission.window.end,
        value: JsonFields(value),
        kind: kind.as_str(),
        version,
        operator: &operator.name,
        operator_version: emission
            .operator_version
            .as_deref()
            .unwrap_or(&operator.version),
    })
}

/// An enriched event of a pipeline without an aggregate: `{"id", "key", "timestamp", "value",
/// "kind": "event", "operator", "operator_version"}`, the version the one that made it. Its
/// id is
/// `pipeline/operator/e<arrival index>.<n>`, `n` counting the outputs of one input event.
pub fn event_record<'a>(
    staged: &'a Staged,
    n: u64,
    operator: &'a OperatorLabel,
) -> ResultRecord<'a> {
    let (event, seq) = (&staged.event, staged.seq);
    ResultRecord::Event(EventResult {
        id: format!("{}/{}/e{seq}.{n}", operator.pipeline, operator.name),
        key: &event.key,
        timestamp: event.timestamp,
        value: JsonFields(&event.fields),
        kind: "event",
        operator: &operator.name,
        operator_version: staged
            .made_by
            .as_deref()
            .map_or(&operator.version, |v| v.as_str()),
    })
}

/// Named values as a JSON object, as [`fields_to_json`] makes it: in order, and a repeated
/// name (which an operator may produce) in its first place with its last value.
#[derive(Debug)]
struct JsonFields<'a, N>(&'a [(N, Value)]);

impl<N: AsRef<str>> JsonFields<'_, N> {
    fn has_repeated_names(&self) -> bool {
        let fields = self.0;
        if fields.len() <= 16 {
            return (1..fields.len()).any(|i| {
                fields[..i]
                    .iter()
                    .any(|(n, _)| n.as_ref() == fields[i].0.as_ref())
            });
        }
        let mut seen = crate::hashing::HashSet::default();
        !fields.iter().all(|(name, _)| seen.insert(name.as_ref()))
    }
}

impl<N: AsRef<str>> Serialize for JsonFields<'_, N> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        if self.has_repeated_names() {
            let fields: Fields = (self.0.iter())
                .map(|(name, value)| (name.as_ref().to_owned(), value.clone()))
                .collect();
            return fields_to_json(&fields).serialize(serializer);
        }
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in self.0 {
            map.serialize_entry(name.as_ref(), &JsonValue(value))?;
        }
        map.end()
    }
}

/// A value as [`Value::to_json`] makes it, without building it.
struct JsonValue<'a>(&'a Value);

impl Serialize for JsonValue<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Null => serializer.serialize_unit(),
            Value::Boolean(b) => serializer.serialize_bool(*b),
            Value::Int(i) => serializer.serialize_i64(*i),
            Value::Float(f) if f.is_finite() => serializer.serialize_f64(*f),
            Value::Float(_) => serializer.serialize_unit(),
            Value::Text(text) => serializer.serialize_str(text),
            Value::Bytes(_) => self.0.to_json().serialize(serializer),
        }
    }
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

#[cfg(test)]
mod tests {
    //! The records serialised straight against the `serde_json` maps they replaced, on awkward
    //! values: repeated names, non-finite floats, bytes, escapes, a changelog retraction.

    use super::*;
    use crate::time::Window;

    fn label(changelog: bool) -> OperatorLabel {
        OperatorLabel {
            pipeline: "p".into(),
            name: "op".into(),
            version: "1.0".into(),
            changelog,
        }
    }

    fn awkward() -> Fields {
        vec![
            ("n".into(), Value::Int(-3)),
            ("f".into(), Value::Float(0.1)),
            ("nan".into(), Value::Float(f64::NAN)),
            ("inf".into(), Value::Float(f64::INFINITY)),
            ("t".into(), Value::Text("é \"q\"\n\u{1}".into())),
            ("b".into(), Value::Bytes(vec![0, 255, 7])),
            ("none".into(), Value::Null),
            ("yes".into(), Value::Boolean(true)),
        ]
    }

    /// The record as it was made before: a `serde_json` map.
    fn old_result(
        emission: &Emission,
        label: &OperatorLabel,
        retract_of: Option<&Fields>,
    ) -> String {
        let (kind, version, value) = match retract_of {
            Some(previous) => ("retract", emission.version - 1, previous),
            None => (emission.kind.as_str(), emission.version, &emission.value),
        };
        let r = if retract_of.is_some() || emission.kind == EmissionKind::Retract {
            "r"
        } else {
            ""
        };
        serde_json::json!({
            "id": format!("p/op/{}/{}/{version}{r}/{}", emission.window.start, emission.window.end, emission.key),
            "key": &*emission.key,
            "window_start": emission.window.start,
            "window_end": emission.window.end,
            "value": fields_to_json(value),
            "kind": kind,
            "version": version,
            "operator": label.name,
            "operator_version": emission.operator_version.as_deref().unwrap_or(&label.version),
        })
        .to_string()
    }

    #[test]
    fn window_results_are_the_bytes_the_json_maps_made() {
        let mut repeated = awkward();
        repeated.push(("n".into(), Value::Int(9)));
        for value in [awkward(), repeated, Vec::new()] {
            let emission = Emission {
                trigger: 1,
                key: "k/ü".into(),
                window: Window { start: -5, end: 10 },
                kind: EmissionKind::Update,
                version: 2,
                value: value.clone(),
                replaces: Some(awkward()),
                operator_version: Some("2.0".into()),
            };
            let plain = label(false);
            let record = serde_json::to_string(&result_record(&emission, &plain)).unwrap();
            assert_eq!(record, old_result(&emission, &plain, None));
            let changelog = label(true);
            let records: Vec<String> = result_records(&emission, &changelog)
                .map(|r| serde_json::to_string(&r).unwrap())
                .collect();
            assert_eq!(
                records,
                [
                    old_result(&emission, &changelog, emission.replaces.as_ref()),
                    old_result(&emission, &changelog, None)
                ]
            );
        }
    }

    #[test]
    fn event_records_are_the_bytes_the_json_maps_made() {
        let fields: Vec<(FieldName, Value)> = (awkward().into_iter())
            .chain([("t".into(), Value::Int(1))])
            .map(|(name, value)| (FieldName::from(name), value))
            .collect();
        let event = crate::event::Event {
            line: 3,
            key: "k".into(),
            timestamp: 42,
            fields,
        };
        let label = label(false);
        let staged = Staged {
            seq: 7,
            event,
            origin: None,
            made_by: None,
        };
        let record = serde_json::to_string(&event_record(&staged, 1, &label)).unwrap();
        let value: Fields = (staged.event.fields.iter())
            .map(|(name, value)| (name.to_string(), value.clone()))
            .collect();
        let old = serde_json::json!({
            "id": "p/op/e7.1",
            "key": "k",
            "timestamp": 42,
            "value": fields_to_json(&value),
            "kind": "event",
            "operator": "op",
            "operator_version": "1.0",
        });
        assert_eq!(record, old.to_string());
        assert_eq!(event_record(&staged, 1, &label).id(), Some("p/op/e7.1"));
        // Made by another version than the spec's (a rollout's candidate): it says so.
        let staged = Staged {
            made_by: Some(std::sync::Arc::new("2.0".to_owned())),
            ..staged
        };
        let record: serde_json::Value = serde_json::from_str(
            &serde_json::to_string(&event_record(&staged, 1, &label)).unwrap(),
        )
        .unwrap();
        assert_eq!(record["operator_version"], "2.0");
    }
}
