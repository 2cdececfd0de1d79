//! Typed values: what events carry, what state holds and what operators output.
//!
//! The same variants cross the Wasm boundary (`weir:operator/types.value`), so state written by
//! one language or one operator version is readable by another. Depends on nothing else in Weir.

use compact_str::CompactString;
use serde::{Deserialize, Serialize};

/// A typed value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub enum Value {
    /// No value: JSON `null`, or a field an event does not have.
    #[default]
    Null,
    /// A boolean.
    Boolean(bool),
    /// A signed 64-bit integer.
    Int(i64),
    /// A 64-bit float.
    Float(f64),
    /// UTF-8 text: inline up to 24 bytes, else on the heap.
    Text(CompactString),
    /// Raw bytes (written to JSON as base64 text).
    Bytes(Vec<u8>),
}

/// An operator's output record: named values, in the order the operator produced them.
pub type Fields = Vec<(String, Value)>;

impl Value {
    /// Converts a JSON value. Numbers become `Int` when they are integers that fit, else `Float`;
    /// arrays and objects, which have no typed counterpart, become their JSON text.
    pub fn from_json(json: &serde_json::Value) -> Value {
        match json {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Boolean(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::Text(s.as_str().into()),
            other => Value::Text(other.to_string().into()),
        }
    }

    /// The value as a key, as an event's key field is read: non-empty text, or an integer as
    /// its decimal text; `None` for anything else (a join's side, a stage's re-keying and the
    /// Nexmark source key events by a field this way).
    pub fn as_key(&self) -> Option<CompactString> {
        use compact_str::ToCompactString;
        match self {
            Value::Text(text) if !text.is_empty() => Some(text.clone()),
            Value::Int(i) => Some(i.to_compact_string()),
            _ => None,
        }
    }

    /// About how many bytes the value takes as it crosses into an operator: its text or bytes,
    /// else 8.
    pub fn size(&self) -> usize {
        match self {
            Value::Text(s) => s.len(),
            Value::Bytes(b) => b.len(),
            _ => 8,
        }
    }

    /// Converts to JSON. Non-finite floats, which JSON cannot hold, become `null`.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Boolean(b) => (*b).into(),
            Value::Int(i) => (*i).into(),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::Text(s) => s.as_str().into(),
            Value::Bytes(b) => base64(b).into(),
        }
    }
}

/// Converts an output record to a JSON object.
pub fn fields_to_json(fields: &Fields) -> serde_json::Value {
    serde_json::Value::Object(
        fields
            .iter()
            .map(|(name, value)| (name.clone(), value.to_json()))
            .collect(),
    )
}

/// Standard base64 with padding (RFC 4648), for bytes in JSON output.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_non_empty_text_and_integers_are_keys() {
        assert_eq!(Value::Text("ann".into()).as_key().as_deref(), Some("ann"));
        assert_eq!(Value::Int(-42).as_key().as_deref(), Some("-42"));
        assert_eq!(
            Value::Int(i64::MIN).as_key().as_deref(),
            Some("-9223372036854775808")
        );
        for not_a_key in [
            Value::Text("".into()),
            Value::Null,
            Value::Boolean(true),
            Value::Float(1.0),
            Value::Bytes(b"k".to_vec()),
        ] {
            assert_eq!(not_a_key.as_key(), None, "{not_a_key:?}");
        }
    }

    #[test]
    fn json_numbers_keep_their_type() {
        assert_eq!(Value::from_json(&serde_json::json!(3)), Value::Int(3));
        assert_eq!(Value::from_json(&serde_json::json!(2.5)), Value::Float(2.5));
        assert_eq!(
            Value::from_json(&serde_json::json!({"a": 1})),
            Value::Text("{\"a\":1}".into())
        );
    }

    #[test]
    fn non_finite_floats_become_null() {
        assert_eq!(Value::Float(f64::NAN).to_json(), serde_json::Value::Null);
    }

    #[test]
    fn bytes_are_base64() {
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE=");
        assert_eq!(base64(b"M"), "TQ==");
        assert_eq!(base64(b""), "");
    }
}
