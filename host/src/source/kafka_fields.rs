//! What of a Kafka record, beyond its value, goes into its event, so that `[event] key`,
//! `timestamp` and the operators can read it: the record's key (`@kafka.key`), its timestamp
//! (`@kafka.timestamp`), one header (`@kafka.header.<name>`) where the spec's key or timestamp
//! names it, and every header as an object (`@kafka.headers`, with `[source] headers = true`).
//! The fields go first in the event's object; a value that is not an object is left as it is
//! (its dead letter says so).
//!
//! Depends on nothing else in Weir.

use serde_json::{Map, Value};

/// The record's key, as text.
pub const KEY_FIELD: &str = "@kafka.key";
/// The record's timestamp, ms.
pub const TIMESTAMP_FIELD: &str = "@kafka.timestamp";
/// Every header, `{"name": "value", ...}` (text; `null` for a header without a value; the last
/// of two with one name).
pub const HEADERS_FIELD: &str = "@kafka.headers";
/// One header, `@kafka.header.<name>`, for `[event] key` or `timestamp`.
pub const HEADER_PREFIX: &str = "@kafka.header.";

/// The parts of a record other than its value.
#[derive(Debug, Default)]
pub struct RecordParts<'a> {
    pub key: Option<&'a [u8]>,
    pub timestamp: Option<i64>,
    /// Only collected when [`RecordFields::wants_headers`].
    pub headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

/// Which parts go into the event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordFields {
    key: bool,
    timestamp: bool,
    all_headers: bool,
    /// The header the key is read from, and the one the timestamp is.
    key_header: Option<String>,
    timestamp_header: Option<String>,
}

impl RecordFields {
    /// For a spec whose events take their key from `key_field` and their time from
    /// `timestamp_field`; with `all_headers`, every header too.
    pub fn new(key_field: &str, timestamp_field: &str, all_headers: bool) -> RecordFields {
        let header = |field: &str| field.strip_prefix(HEADER_PREFIX).map(str::to_owned);
        RecordFields {
            key: key_field == KEY_FIELD,
            timestamp: timestamp_field == TIMESTAMP_FIELD,
            all_headers,
            key_header: header(key_field),
            timestamp_header: header(timestamp_field),
        }
    }

    /// Whether the record's headers are read at all.
    pub fn wants_headers(&self) -> bool {
        self.all_headers || self.key_header.is_some() || self.timestamp_header.is_some()
    }

    /// The event's line: `value` with the asked-for parts put in first.
    pub fn event_line(&self, value: &[u8], parts: &RecordParts) -> Vec<u8> {
        let fields = self.fields(parts);
        if fields.is_empty() {
            return value.to_vec();
        }
        let Some(rest) = value.trim_ascii_start().strip_prefix(b"{") else {
            return value.to_vec(); // not an object: its dead letter says so
        };
        let mut line = Vec::with_capacity(value.len() + 64);
        line.push(b'{');
        for (name, value) in fields {
            let field = format!("{}:{value},", Value::from(name));
            line.extend_from_slice(field.as_bytes());
        }
        if rest.trim_ascii_start().starts_with(b"}") {
            line.pop(); // no fields after ours
        }
        line.extend_from_slice(rest);
        line
    }

    /// The fields to put in, by name.
    fn fields(&self, parts: &RecordParts) -> Vec<(String, Value)> {
        let text = |bytes: &[u8]| Value::from(String::from_utf8_lossy(bytes).into_owned());
        let header = |name: &str| {
            (parts.headers.iter().rev())
                .find(|(key, _)| *key == name)
                .and_then(|(_, value)| *value)
        };
        let mut fields = Vec::new();
        if self.key
            && let Some(key) = parts.key
        {
            fields.push((KEY_FIELD.to_owned(), text(key)));
        }
        if self.timestamp
            && let Some(timestamp) = parts.timestamp
        {
            fields.push((TIMESTAMP_FIELD.to_owned(), timestamp.into()));
        }
        if let Some(name) = &self.key_header
            && let Some(value) = header(name)
        {
            fields.push((format!("{HEADER_PREFIX}{name}"), text(value)));
        }
        if let Some(name) = &self.timestamp_header
            && let Some(value) = header(name)
        {
            // A timestamp is a number: a header's text that is one becomes one.
            let time = std::str::from_utf8(value)
                .ok()
                .and_then(|t| t.trim().parse::<i64>().ok());
            let value = time.map_or_else(|| text(value), Value::from);
            fields.push((format!("{HEADER_PREFIX}{name}"), value));
        }
        if self.all_headers {
            let all: Map<String, Value> = (parts.headers.iter())
                .map(|(name, value)| ((*name).to_owned(), value.map_or(Value::Null, text)))
                .collect();
            fields.push((HEADERS_FIELD.to_owned(), Value::Object(all)));
        }
        fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts<'a>(headers: Vec<(&'a str, Option<&'a [u8]>)>) -> RecordParts<'a> {
        RecordParts {
            key: Some(b"u1"),
            timestamp: Some(42),
            headers,
        }
    }

    #[test]
    fn a_records_key_and_timestamp_go_into_its_event_when_asked() {
        let line = |key: &str, timestamp: &str, value: &[u8]| {
            RecordFields::new(key, timestamp, false).event_line(value, &parts(Vec::new()))
        };
        assert_eq!(line("user", "ts", br#"{"a":1}"#), br#"{"a":1}"#);
        assert_eq!(
            line(KEY_FIELD, TIMESTAMP_FIELD, br#" {"a":1}"#),
            br#"{"@kafka.key":"u1","@kafka.timestamp":42,"a":1}"#
        );
        assert_eq!(line(KEY_FIELD, "ts", b"{}"), br#"{"@kafka.key":"u1"}"#);
        assert_eq!(line(KEY_FIELD, TIMESTAMP_FIELD, b"[1]"), b"[1]");
    }

    #[test]
    fn headers_go_in_one_by_name_or_all_as_an_object() {
        let headers = vec![
            ("tenant", Some(&b"acme"[..])),
            ("at", Some(&b"1700"[..])),
            ("empty", None),
            ("tenant", Some(&b"later"[..])),
        ];
        let fields = RecordFields::new("@kafka.header.tenant", "@kafka.header.at", false);
        assert!(fields.wants_headers());
        assert_eq!(
            fields.event_line(br#"{"a":1}"#, &parts(headers.clone())),
            br#"{"@kafka.header.tenant":"later","@kafka.header.at":1700,"a":1}"#
        );
        let all = RecordFields::new("user", "ts", true);
        let line = all.event_line(b"{}", &parts(headers));
        let event: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            event,
            serde_json::json!({"@kafka.headers": {"tenant": "later", "at": "1700", "empty": null}})
        );
        let none = RecordFields::new("user", "ts", false);
        assert!(!none.wants_headers());
        // A header the record lacks: nothing put in, so the event misses its key.
        assert_eq!(
            RecordFields::new("@kafka.header.x", "ts", false).event_line(b"{}", &parts(vec![])),
            b"{}"
        );
    }
}
