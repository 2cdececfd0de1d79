//! Repro bundles: one window of one key as a self-contained case, in no language yet. The
//! server makes a [`Bundle`] from a row a user saw (a result, a shadow result, a replay row or
//! a dead letter; `weir serve`'s `POST /v1/pipelines/{name}/repro`): the key's events of that
//! window from the pipeline's ingest log, the state the window starts from, and what the live
//! version and the candidate each gave for exactly those events, run in a sandbox. `weir repro`
//! turns it into a test in the operator's own language ([`render`]) that passes on the live
//! version's source and fails on the candidate's.
//!
//! Depends on `project` (the languages) and `value`.

pub mod render;

use serde::{Deserialize, Serialize};

use crate::time::Millis;

/// One window of one key: its events and what two versions gave for them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bundle {
    /// The pipeline the events were sent to.
    pub pipeline: String,
    /// The aggregate's name.
    pub operator: String,
    /// The key.
    pub key: String,
    /// The window, `[start, end)` in ms.
    pub window_start: Millis,
    /// See `window_start`.
    pub window_end: Millis,
    /// What the bundle was made from: a `result`, `shadow comparison`, `replay row` or
    /// `dead letter`.
    pub made_from: String,
    /// The window's events in arrival order, as the operator gets them.
    pub events: Vec<ReproEvent>,
    /// The window's state before the first event: always empty, as a window's state starts.
    pub state_before: serde_json::Value,
    /// What the live version gave (the test's expectation).
    pub expected: Said,
    /// What the candidate gave.
    pub candidate: Said,
    /// Said when the live version's result for these events alone is not the result recorded
    /// in the row (events that were late in the live run, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One event: its time and its fields, in input order, each value as JSON (a float keeps its
/// fraction, `5.0`, so it stays a float).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReproEvent {
    /// Event time, ms.
    pub timestamp: Millis,
    /// `[name, value]` pairs.
    pub fields: Vec<(String, serde_json::Value)>,
}

/// What one version gave for the window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Said {
    /// `name@version`'s version.
    pub version: String,
    /// The window's output, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    /// Why it gave none: the first dead letter's reason (a refusal or a trap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Bundle {
    /// The events' field names, in the order they first appear: the columns of the test's
    /// batch (an event without one of them has `null` there, as the host sends it).
    pub fn fields(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for event in &self.events {
            for (name, _) in &event.fields {
                if !names.contains(&name.as_str()) {
                    names.push(name);
                }
            }
        }
        names
    }

    /// Each event's values in the order of [`Self::fields`], `null` where it has none.
    pub fn rows(&self) -> Vec<(Millis, Vec<&serde_json::Value>)> {
        let names = self.fields();
        (self.events.iter())
            .map(|event| {
                let values = (names.iter())
                    .map(|name| {
                        (event.fields.iter())
                            .find(|(n, _)| n == name)
                            .map_or(&serde_json::Value::Null, |(_, v)| v)
                    })
                    .collect();
                (event.timestamp, values)
            })
            .collect()
    }

    /// A name for the test, from the key and the window (letters, digits and `_` only).
    pub fn slug(&self) -> String {
        let key: String = (self.key.chars())
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(32)
            .collect();
        format!("{key}_{}", self.window_start.max(0))
    }
}

/// A host value as a bundle carries it.
pub fn value_json(value: &crate::value::Value) -> serde_json::Value {
    use crate::value::Value;
    match value {
        Value::Null => serde_json::Value::Null,
        Value::Boolean(b) => (*b).into(),
        Value::Int(i) => (*i).into(),
        Value::Float(f) => {
            serde_json::Number::from_f64(*f).map_or(serde_json::Value::Null, Into::into)
        }
        Value::Text(t) => t.as_str().into(),
        Value::Bytes(_) => value.to_json(),
    }
}
