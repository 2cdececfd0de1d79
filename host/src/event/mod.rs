//! Events and their decoding from JSON Lines. A line that cannot become an event becomes a
//! [`DeadLetter`] with the reason; decoding never fails the run. Also what the router hands a
//! shard: a [`Share`] of a batch, its [`Staged`] events and, for some pipelines, the
//! [`Crossing`]s it took of them.
//!
//! Depends on `value`, `time`, `field_name`, `hashing` and `prefetch` only.

mod object;

use object::Special;

use std::sync::Arc;

use compact_str::{CompactString, ToCompactString};

use crate::field_name::{FieldName, InternedName};
use crate::time::{Millis, Window, check_timestamp, parse_timestamp, parse_timestamp_text};
use crate::value::Value;

/// One input event: its key, its event time and all of its fields (key and timestamp included).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Where the event came from: its 1-based line number in the source.
    pub line: u64,
    /// The value of the spec's key field, as text: inside the event up to 24 bytes, so that
    /// most keys cost no allocation to make, hand over or free.
    pub key: CompactString,
    /// Event time.
    pub timestamp: Millis,
    /// Every field of the event, in input order.
    pub fields: Vec<(FieldName, Value)>,
}

/// An event on its way through a pipeline: with its arrival index in the whole input, which
/// orders everything the event causes.
#[derive(Debug, Clone, PartialEq)]
pub struct Staged {
    /// Arrival index in the whole input.
    pub seq: u64,
    /// The event.
    pub event: Event,
    /// For a stage's event: the upstream window result it stands for (boxed, as it is rare on
    /// the hot path).
    pub origin: Option<Box<Origin>>,
    /// For an enricher's output: the version that made it, when another than the spec names
    /// (a rollout's candidate, or a version promoted since the run started). A thin pointer:
    /// one word more per event.
    pub made_by: Option<Arc<String>>,
}

/// An event's time and its only crossing field (the one field of it an aggregate's calls
/// read), when that field holds a number and its name is interned: taken by the router while
/// the event is still in its core's cache, into a list beside the batch (one entry per event,
/// `None` for an event it took none of). A shard that adds the event to its window later reads
/// these 32 bytes (half a cache line, in a list read in order) instead of the event: its own
/// line and then its fields', two more, read only after the first has arrived, all written on
/// another core. Only pipelines whose router takes them have the list; nothing changes an
/// event's fields after the router (enrichers, the interval join and stages make new events,
/// with no list).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Crossing {
    /// The event's time.
    pub timestamp: Millis,
    /// The field's name.
    pub field: InternedName,
    /// The field's value.
    pub number: CrossingNumber,
}

/// A shard's share of a batch: its events, in arrival order, and, if the router took them,
/// their [`Crossing`]s beside them, one per event (else none at all).
#[derive(Debug, Default)]
pub struct Share {
    /// The events.
    pub events: Vec<Staged>,
    /// Their crossings: as many as there are events, or none.
    pub crossings: Vec<Option<Crossing>>,
}

impl From<Vec<Staged>> for Share {
    /// Events without crossings.
    fn from(events: Vec<Staged>) -> Share {
        Share {
            events,
            crossings: Vec::new(),
        }
    }
}

/// A number a [`Crossing`] holds: an integer or a float field's value. Two are equal if they
/// are the same value bit for bit (a NaN copied is still itself; `-0.0` is not `0.0`).
#[derive(Debug, Clone, Copy)]
pub enum CrossingNumber {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
}

impl CrossingNumber {
    /// `value` as a crossing's number, if it is an integer or a float.
    pub fn of(value: &Value) -> Option<CrossingNumber> {
        match *value {
            Value::Int(i) => Some(CrossingNumber::Int(i)),
            Value::Float(f) => Some(CrossingNumber::Float(f)),
            _ => None,
        }
    }
}

impl From<CrossingNumber> for Value {
    fn from(number: CrossingNumber) -> Value {
        match number {
            CrossingNumber::Int(i) => Value::Int(i),
            CrossingNumber::Float(f) => Value::Float(f),
        }
    }
}

impl PartialEq for CrossingNumber {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (CrossingNumber::Int(a), CrossingNumber::Int(b)) => a == b,
            (CrossingNumber::Float(a), CrossingNumber::Float(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }
}

/// The upstream window result a stage's event stands for. A later event of the same origin
/// replaces the earlier one's contribution downstream (an update upstream), and a withdrawal
/// removes it (a retraction upstream), so no upstream result is ever counted twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The upstream result's key.
    pub key: Arc<str>,
    /// The upstream result's window.
    pub window: Window,
    /// Whether the event withdraws the origin's contribution instead of (re)placing it.
    pub withdrawn: bool,
}

impl Origin {
    /// Whether `self` and `other` are the same upstream result.
    pub fn same(&self, other: &Origin) -> bool {
        self.key == other.key && self.window == other.window
    }
}

impl Event {
    /// Asks the CPU to fetch the event's key (a [hint](crate::prefetch)), for a reader that
    /// will hash it shortly: the event's own line unless the key is longer than 24 bytes.
    pub fn prefetch_key(&self) {
        crate::prefetch::line(self.key.as_ptr());
    }

    /// Asks the CPU to fetch what dropping the event touches first (a
    /// [hint](crate::prefetch)): its key (the event's own line, unless the key is longer
    /// than 24 bytes and so on the heap), and the first line of its fields.
    pub(crate) fn prefetch_for_drop(&self) {
        crate::prefetch::line(self.key.as_ptr());
        crate::prefetch::line(self.fields.as_ptr());
    }

    /// The event as a JSON object, for late and dead-letter output.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Object(
            self.fields
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_json()))
                .collect(),
        )
    }
}

/// A line of input that could not be processed, with the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// 1-based line number in the source.
    pub line: u64,
    /// The raw line (lossily decoded if it was not UTF-8), or the events' JSON for operator
    /// failures.
    pub raw: String,
    /// Why it was rejected.
    pub reason: String,
    /// The class of the reason, for metrics and filtering.
    pub cause: DeadCause,
}

/// What kind of failure made a dead letter: a bounded set, so metrics can be labelled by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadCause {
    /// The line is not a usable event: not JSON, no key, no timestamp, one out of range.
    Input,
    /// Its timestamp is too far ahead of the wall clock when it was accepted.
    Ahead,
    /// On neither side of a join, or without its side's key.
    Join,
    /// An operator returned an error for it.
    Rejected,
    /// An operator trapped on it.
    Trapped,
    /// A window result a stage after the aggregate could not take.
    Stage,
}

impl DeadCause {
    /// The name used in records and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadCause::Input => "input",
            DeadCause::Ahead => "ahead",
            DeadCause::Join => "join",
            DeadCause::Rejected => "rejected",
            DeadCause::Trapped => "trapped",
            DeadCause::Stage => "stage",
        }
    }

    /// The cause of an operator's failure.
    pub fn of_operator(trapped: bool) -> DeadCause {
        if trapped {
            DeadCause::Trapped
        } else {
            DeadCause::Rejected
        }
    }
}

/// Why a line is not an event: the reason its dead letter carries.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The line is longer than the decoder's cap.
    #[error("line is {bytes} bytes, more than the limit of {limit} bytes")]
    TooLong {
        /// The line's length.
        bytes: usize,
        /// The cap.
        limit: usize,
    },
    /// The line is not UTF-8.
    #[error("line is not valid UTF-8 ({0})")]
    NotUtf8(#[from] std::str::Utf8Error),
    /// The line is not JSON.
    #[error("line is not valid JSON ({0})")]
    NotJson(#[source] serde_json::Error),
    /// The line is JSON, but not an object.
    #[error("line is not a JSON object")]
    NotAnObject,
    /// The key field is missing.
    #[error("missing key field `{0}`")]
    MissingKey(String),
    /// The key field is empty text.
    #[error("key field `{0}` is empty")]
    EmptyKey(String),
    /// The key field is neither text nor an integer (shown as it was).
    #[error("key field `{field}` must be text or an integer, not {value}")]
    BadKey {
        /// The key field.
        field: String,
        /// Its value.
        value: String,
    },
    /// The timestamp field is missing.
    #[error("missing timestamp field `{0}`")]
    MissingTimestamp(String),
    /// The timestamp is not one.
    #[error(transparent)]
    Timestamp(#[from] crate::time::TimeError),
}

/// Turns JSON Lines into events, given which fields hold the key and the timestamp.
#[derive(Debug)]
pub struct Decoder {
    key_field: String,
    timestamp_field: String,
    max_line_bytes: usize,
    /// Field names seen so far, shared between events to save an allocation per field.
    names: object::Names,
}

/// The default cap on one input line: 1 MiB. Longer lines become dead letters instead of
/// growing the host's memory without bound.
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;

impl Decoder {
    /// A decoder reading the key from `key_field` and event time from `timestamp_field`.
    pub fn new(key_field: &str, timestamp_field: &str) -> Self {
        Decoder {
            key_field: key_field.to_owned(),
            timestamp_field: timestamp_field.to_owned(),
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            names: object::Names::default(),
        }
    }

    /// A decoder that leaves the key empty, for a join, which keys each event by its side's
    /// key field after decoding.
    pub fn unkeyed(timestamp_field: &str) -> Self {
        Self::new("", timestamp_field)
    }

    /// Decodes one line. Errors are dead letters carrying the line and the reason.
    pub fn decode(&mut self, line_no: u64, bytes: &[u8]) -> Result<Event, DeadLetter> {
        self.decode_fields(line_no, bytes)
            .map_err(|reason| DeadLetter {
                line: line_no,
                raw: String::from_utf8_lossy(&bytes[..bytes.len().min(4096)]).into_owned(),
                reason: reason.to_string(),
                cause: DeadCause::Input,
            })
    }

    fn decode_fields(&mut self, line_no: u64, bytes: &[u8]) -> Result<Event, DecodeError> {
        if bytes.len() > self.max_line_bytes {
            return Err(DecodeError::TooLong {
                bytes: bytes.len(),
                limit: self.max_line_bytes,
            });
        }
        let text = std::str::from_utf8(bytes)?;
        let object = object::read(
            text,
            &mut self.names,
            &self.key_field,
            &self.timestamp_field,
        )?;
        let key = self.key(&object)?;
        let timestamp = match &object.timestamp {
            None => return Err(DecodeError::MissingTimestamp(self.timestamp_field.clone())),
            Some(Special::Int(ms)) => check_timestamp(*ms),
            Some(Special::Text(at)) => parse_timestamp_text(object.text(*at).unwrap_or_default()),
            Some(Special::Json(json)) => parse_timestamp(json),
        }?;
        let fields = object.fields;
        Ok(Event {
            line: line_no,
            key,
            timestamp,
            fields,
        })
    }

    /// The event's key: its key field's text, or integer as text (empty if the decoder is
    /// unkeyed: a join keys each side by its own field, after decoding).
    fn key(&self, object: &object::Object) -> Result<CompactString, DecodeError> {
        let field = &self.key_field;
        let text = |text: &str| match text {
            "" => Err(DecodeError::EmptyKey(field.clone())),
            text => Ok(text.into()),
        };
        match &object.key {
            _ if field.is_empty() => Ok(CompactString::default()),
            None => Err(DecodeError::MissingKey(field.clone())),
            Some(Special::Text(at)) => text(object.text(*at).unwrap_or_default()),
            Some(Special::Int(i)) => Ok(i.to_compact_string()),
            // Also text or an integer when a nested raw-value marker object held it (serde_json's
            // `raw_value`: `{"$serde_json::private::RawValue":"-5"}` reads as -5).
            Some(Special::Json(json)) => match &**json {
                serde_json::Value::String(s) => text(s),
                serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => {
                    Ok(n.to_compact_string())
                }
                other => Err(DecodeError::BadKey {
                    field: field.clone(),
                    value: other.to_string(),
                }),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field (name and value) is five words: the generator's three fit 120 bytes, two cache
    /// lines in mimalloc's 128-byte blocks (see `field_name`).
    #[test]
    fn a_field_is_five_words() {
        let word = std::mem::size_of::<usize>();
        assert_eq!(std::mem::size_of::<(FieldName, Value)>(), 5 * word);
    }

    /// An event's key, timestamp and fields.
    type Decoded = (String, Millis, Vec<(String, Value)>);

    /// The decoder as it was, through a `serde_json::Value` of the whole line: the key, the
    /// timestamp and the fields, or the reason for the dead letter.
    fn decoded_the_old_way(line: &str) -> Result<Decoded, String> {
        let json: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        let serde_json::Value::Object(object) = json else {
            return Err("not an object".into());
        };
        let key = match object.get("user") {
            None => return Err("missing key field `user`".into()),
            Some(serde_json::Value::String(s)) if s.is_empty() => {
                return Err("key field `user` is empty".into());
            }
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
            Some(other) => {
                return Err(format!(
                    "key field `user` must be text or an integer, not {other}"
                ));
            }
        };
        let timestamp = match object.get("ts") {
            None => return Err("missing timestamp field `ts`".into()),
            Some(ts) => parse_timestamp(ts).map_err(|e| e.to_string())?,
        };
        let fields = (object.iter())
            .map(|(name, value)| (name.clone(), Value::from_json(value)))
            .collect();
        Ok((key, timestamp, fields))
    }

    fn special_json() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        prop_oneof![
            any::<i64>().prop_map(|i| i.to_string()),
            any::<u64>().prop_map(|u| u.to_string()),
            (-1e20f64..1e20).prop_map(|f| serde_json::Value::from(f).to_string()),
            Just("1e3".to_owned()),
            Just("8640000000000000".to_owned()),
            Just("-8640000000000001".to_owned()),
            "[a-z0-9é\\\"]{0,6}".prop_map(|s| serde_json::Value::from(s).to_string()),
            Just("\"2026-01-01T00:00:00Z\"".to_owned()),
            Just("\"2026-01-01T00:00:00.123+02:00\"".to_owned()),
            Just("\"\"".to_owned()),
            Just("true".to_owned()),
            Just("null".to_owned()),
            Just("[1,\"a\"]".to_owned()),
            Just("{\"user\":1}".to_owned()),
            // serde_json's raw-value marker, nested: read as the JSON its string holds.
            Just("{\"$serde_json::private::RawValue\":\"-5\"}".to_owned()),
            Just("{\"$serde_json::private::RawValue\":\"\\\"abc\\\"\"}".to_owned()),
            Just("{\"$serde_json::private::RawValue\":\"\\\"\\\"\"}".to_owned()),
        ]
    }

    proptest::proptest! {
        /// The key and timestamp read without a `serde_json::Value` give the events and the
        /// dead-letter reasons the old path gave, repeated names included.
        #[test]
        fn the_key_and_timestamp_decode_as_through_a_json_value(
            pairs in proptest::collection::vec(
                (proptest::sample::select(vec!["user", "ts", "amount"]), special_json()),
                0..6,
            ),
        ) {
            let line = format!(
                "{{{}}}",
                (pairs.iter())
                    .map(|(name, value)| format!("\"{name}\":{value}"))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            let new = Decoder::new("user", "ts").decode(1, line.as_bytes());
            let new = new
                .map(|event| {
                    let fields = (event.fields.iter())
                        .map(|(name, value)| (name.to_string(), value.clone()))
                        .collect::<Vec<_>>();
                    (event.key.to_string(), event.timestamp, fields)
                })
                .map_err(|dead| dead.reason);
            proptest::prop_assert_eq!(new, decoded_the_old_way(&line), "{}", line);
        }
    }

    fn decode(line: &str) -> Result<Event, DeadLetter> {
        Decoder::new("user", "ts").decode(7, line.as_bytes())
    }

    /// An event is eight words with its key inside; a key or text longer than 24 bytes goes to
    /// the heap and reads the same as one that fits.
    #[test]
    fn keys_and_texts_read_the_same_inline_or_on_the_heap() {
        let word = std::mem::size_of::<usize>();
        assert_eq!(std::mem::size_of::<Event>(), 8 * word);
        // With its arrival index, origin and maker; the router's crossings are beside it.
        assert_eq!(std::mem::size_of::<Staged>(), 11 * word);
        assert_eq!(std::mem::size_of::<Option<Crossing>>(), 32);
        for key in [1, 24, 25].map(|length| "k".repeat(length)) {
            let key = key.as_str();
            let line = format!(r#"{{"user":"{key}","ts":5,"note":"{key}"}}"#);
            let event = decode(&line).unwrap();
            assert_eq!(&*event.key, key);
            assert_eq!(event.key.is_heap_allocated(), key.len() > 24, "{key}");
            assert_eq!(event.fields[2].1, Value::Text(key.into()));
            assert_eq!(event.to_json()["note"], key);
        }
        let number = decode(r#"{"user":-12345678901234567,"ts":5}"#).unwrap();
        assert_eq!(&*number.key, "-12345678901234567");
    }

    #[test]
    fn decodes_a_well_formed_event() {
        let event = decode(r#"{"user":"ann","ts":1000,"amount":3}"#).unwrap();
        assert_eq!(&*event.key, "ann");
        assert_eq!(event.timestamp, 1000);
        assert_eq!(event.line, 7);
        assert_eq!(event.fields.len(), 3);
    }

    #[test]
    fn one_field_may_be_both_the_key_and_the_timestamp() {
        let mut decoder = Decoder::new("t", "t");
        let event = decoder.decode(1, br#"{"t":5,"t":7}"#).unwrap();
        assert_eq!((&*event.key, event.timestamp), ("7", 7));
        let event = (decoder.decode(2, br#"{"t":"2026-01-01T00:00:00Z"}"#)).unwrap();
        assert_eq!(
            (&*event.key, event.timestamp),
            ("2026-01-01T00:00:00Z", 1_767_225_600_000)
        );
        let dead = decoder.decode(3, br#"{"t":""}"#).unwrap_err();
        assert!(
            dead.reason.contains("key field `t` is empty"),
            "{}",
            dead.reason
        );
    }

    #[test]
    fn integer_keys_become_text() {
        assert_eq!(&*decode(r#"{"user":42,"ts":1}"#).unwrap().key, "42");
    }

    #[test]
    fn bad_lines_become_dead_letters_with_reasons() {
        let cases = [
            ("not json", "not valid JSON"),
            ("[1,2]", "not a JSON object"),
            (r#"{"ts":1}"#, "missing key field `user`"),
            (r#"{"user":"","ts":1}"#, "is empty"),
            (r#"{"user":1.5,"ts":1}"#, "must be text or an integer"),
            (r#"{"user":"a"}"#, "missing timestamp field `ts`"),
            (r#"{"user":"a","ts":"soon"}"#, "not RFC 3339"),
            (r#"{"user":"a","ts":99999999999999999}"#, "out of range"),
        ];
        for (line, reason) in cases {
            let dead = decode(line).unwrap_err();
            assert!(dead.reason.contains(reason), "{line}: {}", dead.reason);
            assert_eq!(dead.raw, line);
            assert_eq!(dead.line, 7);
        }
    }

    #[test]
    fn invalid_utf8_is_a_dead_letter() {
        let dead = Decoder::new("user", "ts")
            .decode(1, b"{\"user\":\"\xff\"}")
            .unwrap_err();
        assert!(dead.reason.contains("UTF-8"));
    }
}
