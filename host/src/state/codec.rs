//! How a scope's state is stored in redb: a compact binary encoding, versioned by its first
//! byte, instead of the JSON earlier checkpoints used (which is still read, so they restore).
//!
//! Format 1: the byte `0x01`, then the values (a count, then name and value each), the maps (a
//! count, then name, entry count, and entry name and value each), then the host's fields: the
//! latest event time, the writing version and the shadow copy, each a presence byte and the
//! item (the shadow copy without a format byte, and never with a shadow of its own). Counts and
//! lengths are LEB128 varints, ints are zigzag varints, floats 8 bytes little-endian; a value
//! is a tag byte (0 null, 1 false, 2 true, 3 int, 4 float, 5 text, 6 bytes) and its payload.
//! Decoding checks every length against the bytes left, so a damaged row is an error, never a
//! panic or a huge allocation.
//!
//! Depends on `value` and the scope type only.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::ScopeState;
use crate::value::Value;

/// The first byte of format 1.
const FORMAT_1: u8 = 0x01;
/// The first byte of a JSON object: a scope written before format 1.
const JSON: u8 = b'{';

/// Why stored state could not be read.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// Format 1 bytes that break the format (what is wrong with them).
    #[error("stored state is damaged or from an unknown format: {0}")]
    Damaged(&'static str),
    /// A first byte that names no format this weir reads.
    #[error(
        "stored state is damaged or from an unknown format: format byte {0:#04x} is not one \
         this weir reads (a newer weir wrote it?)"
    )]
    UnknownFormat(u8),
    /// A value's tag that names no kind of value.
    #[error("stored state is damaged or from an unknown format: unknown value tag {0}")]
    UnknownTag(u8),
    /// A presence byte that is neither 0 nor 1.
    #[error("stored state is damaged or from an unknown format: presence byte {0}")]
    Presence(u8),
    /// A scope written before format 1 whose JSON does not decode (shared: the error is
    /// `Clone`).
    #[error("stored state is damaged or from an unknown format: {0}")]
    Json(#[source] Arc<serde_json::Error>),
}

fn damaged(what: &'static str) -> CodecError {
    CodecError::Damaged(what)
}

/// Encodes a scope's state in format 1.
pub fn encode(state: &ScopeState) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.push(FORMAT_1);
    write_scope(&mut out, state);
    out
}

/// Decodes a scope's state: format 1, or the JSON of earlier checkpoints.
pub fn decode(bytes: &[u8]) -> Result<ScopeState, CodecError> {
    match bytes.first() {
        Some(&FORMAT_1) => {
            let mut reader = Reader { bytes: &bytes[1..] };
            let state = reader.scope(true)?;
            if !reader.bytes.is_empty() {
                return Err(damaged("bytes after the end of the state"));
            }
            Ok(state)
        }
        Some(&JSON) => serde_json::from_slice(bytes).map_err(|e| CodecError::Json(Arc::new(e))),
        Some(&other) => Err(CodecError::UnknownFormat(other)),
        None => Err(damaged("no bytes")),
    }
}

fn write_scope(out: &mut Vec<u8>, state: &ScopeState) {
    write_len(out, state.values.len());
    for (name, value) in &state.values {
        write_text(out, name);
        write_value(out, value);
    }
    write_len(out, state.maps.len());
    for (name, entries) in &state.maps {
        write_text(out, name);
        write_len(out, entries.len());
        for (entry, value) in entries {
            write_text(out, entry);
            write_value(out, value);
        }
    }
    match state.last_event {
        Some(time) => {
            out.push(1);
            write_varint(out, zigzag(time));
        }
        None => out.push(0),
    }
    match &state.written_by {
        Some(version) => {
            out.push(1);
            write_text(out, version);
        }
        None => out.push(0),
    }
    match &state.shadow {
        Some(shadow) => {
            out.push(1);
            write_scope(out, shadow);
        }
        None => out.push(0),
    }
}

fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.push(0),
        Value::Boolean(false) => out.push(1),
        Value::Boolean(true) => out.push(2),
        Value::Int(i) => {
            out.push(3);
            write_varint(out, zigzag(*i));
        }
        Value::Float(f) => {
            out.push(4);
            out.extend_from_slice(&f.to_le_bytes());
        }
        Value::Text(text) => {
            out.push(5);
            write_text(out, text);
        }
        Value::Bytes(bytes) => {
            out.push(6);
            write_len(out, bytes.len());
            out.extend_from_slice(bytes);
        }
    }
}

fn write_text(out: &mut Vec<u8>, text: &str) {
    write_len(out, text.len());
    out.extend_from_slice(text.as_bytes());
}

fn write_len(out: &mut Vec<u8>, len: usize) {
    write_varint(out, len as u64);
}

fn write_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn zigzag(i: i64) -> u64 {
    ((i << 1) ^ (i >> 63)) as u64
}

fn unzigzag(n: u64) -> i64 {
    ((n >> 1) as i64) ^ -((n & 1) as i64)
}

/// Reads format 1 from a slice, checking every length against what is left.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl Reader<'_> {
    fn scope(&mut self, outer: bool) -> Result<ScopeState, CodecError> {
        let mut state = ScopeState::default();
        for _ in 0..self.count()? {
            let name = self.text()?;
            state.values.insert(name, self.value()?);
        }
        for _ in 0..self.count()? {
            let name = self.text()?;
            let mut entries = BTreeMap::new();
            for _ in 0..self.count()? {
                let entry = self.text()?;
                entries.insert(entry, self.value()?);
            }
            state.maps.insert(name, entries);
        }
        if self.present()? {
            state.last_event = Some(unzigzag(self.varint()?));
        }
        if self.present()? {
            state.written_by = Some(self.text()?);
        }
        if self.present()? {
            if !outer {
                return Err(damaged("a shadow copy has a shadow of its own"));
            }
            state.shadow = Some(Box::new(self.scope(false)?));
        }
        Ok(state)
    }

    fn value(&mut self) -> Result<Value, CodecError> {
        Ok(match self.byte()? {
            0 => Value::Null,
            1 => Value::Boolean(false),
            2 => Value::Boolean(true),
            3 => Value::Int(unzigzag(self.varint()?)),
            4 => {
                let bytes = self.take(8)?;
                Value::Float(f64::from_le_bytes(bytes.try_into().expect("8 bytes")))
            }
            5 => Value::Text(self.str()?.into()),
            6 => {
                let len = self.count()?;
                Value::Bytes(self.take(len)?.to_vec())
            }
            tag => return Err(CodecError::UnknownTag(tag)),
        })
    }

    fn present(&mut self) -> Result<bool, CodecError> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(CodecError::Presence(other)),
        }
    }

    fn text(&mut self) -> Result<String, CodecError> {
        self.str().map(str::to_owned)
    }

    /// A length and that much UTF-8, borrowed from the input (a value's text is made from it
    /// in place: inline when short).
    fn str(&mut self) -> Result<&str, CodecError> {
        let len = self.count()?;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|_| damaged("text that is not UTF-8"))
    }

    /// A count or length: at most the bytes left, since every item takes at least one.
    fn count(&mut self) -> Result<usize, CodecError> {
        let n = self.varint()?;
        if n > self.bytes.len() as u64 {
            return Err(damaged("a length longer than the bytes left"));
        }
        Ok(n as usize)
    }

    fn varint(&mut self) -> Result<u64, CodecError> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            n |= u64::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return Ok(n);
            }
        }
        Err(damaged("a varint longer than 64 bits"))
    }

    fn byte(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    fn take(&mut self, len: usize) -> Result<&[u8], CodecError> {
        if len > self.bytes.len() {
            return Err(damaged("the state ends early"));
        }
        let (head, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(head)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Boolean),
            any::<i64>().prop_map(Value::Int),
            any::<f64>()
                .prop_filter("NaN is not equal to itself", |f| !f.is_nan())
                .prop_map(Value::Float),
            // Inline (up to 24 bytes) and on the heap.
            ".{0,40}".prop_map(|text: String| Value::Text(text.into())),
            proptest::collection::vec(any::<u8>(), 0..12).prop_map(Value::Bytes),
        ]
    }

    fn scope() -> impl Strategy<Value = ScopeState> {
        (
            proptest::collection::btree_map(".{0,8}", value(), 0..5),
            proptest::collection::btree_map(
                ".{0,8}",
                proptest::collection::btree_map(".{0,8}", value(), 0..4),
                0..3,
            ),
            proptest::option::of(any::<i64>()),
            proptest::option::of(".{0,8}"),
        )
            .prop_map(|(values, maps, last_event, written_by)| ScopeState {
                values,
                maps,
                last_event,
                written_by,
                shadow: None,
            })
    }

    proptest! {
        #[test]
        fn every_scope_reads_back_as_written(outer in scope(), shadow in proptest::option::of(scope())) {
            let state = ScopeState { shadow: shadow.map(Box::new), ..outer };
            prop_assert_eq!(decode(&encode(&state)).unwrap(), state);
        }

        #[test]
        fn damaged_bytes_are_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut framed = vec![FORMAT_1];
            framed.extend(bytes);
            let _ = decode(&framed);
        }

        #[test]
        fn every_cut_of_a_scope_is_refused(state in scope()) {
            let bytes = encode(&state);
            for len in 0..bytes.len() {
                prop_assert!(decode(&bytes[..len]).is_err());
            }
        }
    }

    /// Text is written as it was before values kept short text inline, so the bytes and the
    /// JSON of earlier checkpoints read back the same, short or long.
    #[test]
    fn text_is_written_and_read_as_before_short_text_was_inline() {
        let long = "a text longer than twenty-four bytes";
        for text in ["ann", long] {
            let mut state = ScopeState::default();
            state.put("t", Value::Text(text.into()));
            let mut bytes = vec![FORMAT_1, 1, 1, b't', 5, text.len() as u8];
            bytes.extend(text.as_bytes());
            bytes.extend([0, 0, 0, 0]);
            assert_eq!(encode(&state), bytes);
            assert_eq!(decode(&bytes).unwrap(), state);
        }
        for text in ["ann", long] {
            let json = format!(r#"{{"Text":"{text}"}}"#);
            let value = Value::Text(text.into());
            assert_eq!(serde_json::to_string(&value).unwrap(), json);
            assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), value);
        }
    }

    #[test]
    fn json_from_earlier_checkpoints_is_read_and_the_binary_is_smaller() {
        let mut state = ScopeState::default();
        state.put("count", Value::Int(42));
        state.put("sum", Value::Float(2.5));
        state.map_put("seen", "o-1", Value::Boolean(true));
        let json = serde_json::to_vec(&state).unwrap();
        assert_eq!(decode(&json).unwrap(), state);
        let binary = encode(&state);
        assert!(
            binary.len() * 2 < json.len(),
            "{} vs {}",
            binary.len(),
            json.len()
        );
        let err = decode(&[0x02, 0]).unwrap_err();
        assert!(err.to_string().contains("format byte 0x02"), "{err}");
        assert!(decode(&[FORMAT_1, 0x80, 0x80]).is_err());
        assert!(
            decode(&[FORMAT_1, 5]).is_err(),
            "a count larger than the bytes left"
        );
    }
}
