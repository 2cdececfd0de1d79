//! Reading one JSON object (an input line) straight into an event's fields, without building a
//! `serde_json::Value` map first: that map hashed and allocated every field name of every line
//! (with SipHash), then its values were converted again. The result is the same as before:
//! fields in input order, a repeated name keeping its first place and its last value, integers
//! that fit `i64` as integers, other numbers as floats, nested arrays and objects as their JSON
//! text. The key and timestamp fields' values are also described for the decoder's checks
//! ([`Special`]): integers and text without building a `serde_json::Value` (it was a tenth of
//! the router's time on a JSON Lines input), anything else as that JSON.
//!
//! Field names are interned ([`FieldName`]); [`Names`] remembers the previous line's names by
//! position, so a line shaped like the one before costs one string comparison per field, and
//! keeps other names in a bounded [`NameCache`], so a hostile input inventing names cannot grow
//! it without bound.
//!
//! One deliberate difference from `serde_json::Value`: with serde_json's `raw_value` feature
//! (on in this workspace), a `Value` read an object whose first key is
//! `$serde_json::private::RawValue` as raw JSON held in a string. Here every top-level key is a
//! field name, that one included; nested values are read by `serde_json::Value` as before (so
//! a key field holding such an object holds the JSON of its string).
//!
//! Depends on `field_name`, `hashing` and `value`.

use super::DecodeError;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::field_name::{FieldName, NameCache};
#[cfg(test)]
use crate::field_name::{MAX_CACHED_NAMES, MAX_INTERNED_LEN};
use crate::hashing::HashMap;
use crate::value::Value;

/// Fields past which a repeated name is found by hashing instead of a scan.
const SCAN_LIMIT: usize = 32;

/// A decoder's cache of field names.
#[derive(Debug, Default)]
pub(super) struct Names {
    previous: Vec<FieldName>,
    cached: NameCache,
}

impl Names {
    fn name(&mut self, position: usize, text: &str) -> FieldName {
        if let Some(name) = self.previous.get(position)
            && name.as_str() == text
        {
            return name.clone();
        }
        let name = self.cached.get(text);
        if position < self.previous.len() {
            self.previous[position] = name.clone();
        } else if position == self.previous.len() && position < SCAN_LIMIT {
            self.previous.push(name.clone());
        }
        name
    }
}

/// A line's fields, with the key and timestamp fields' values described for the decoder.
#[derive(Debug, Default)]
pub(super) struct Object {
    pub(super) fields: Vec<(FieldName, Value)>,
    pub(super) key: Option<Special>,
    pub(super) timestamp: Option<Special>,
}

/// The value of the key or timestamp field, as the decoder checks it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Special {
    /// An integer that fits `i64`.
    Int(i64),
    /// Text: the value of the field at this index of `fields` (a repeated name keeps its
    /// first place, and sets this again with its last value).
    Text(usize),
    /// Anything else, as JSON: other numbers, `true`/`false`, `null`, arrays and objects
    /// (boxed: an object is moved through serde's layers for every line, and this is rare).
    Json(Box<serde_json::Value>),
}

impl Object {
    /// The text of field `at`, which [`Special::Text`] names.
    pub(super) fn text(&self, at: usize) -> Option<&str> {
        match self.fields.get(at) {
            Some((_, Value::Text(text))) => Some(text),
            _ => None,
        }
    }
}

/// Reads `text` as one JSON object. The error is the reason the line is a dead letter.
pub(super) fn read(
    text: &str,
    names: &mut Names,
    key_field: &str,
    timestamp_field: &str,
) -> Result<Object, DecodeError> {
    if !text.trim_start().starts_with('{') {
        return Err(match serde_json::from_str::<serde_json::Value>(text) {
            Err(e) => DecodeError::NotJson(e),
            Ok(_) => DecodeError::NotAnObject,
        });
    }
    let mut deserializer = serde_json::Deserializer::from_str(text);
    let reader = ObjectReader {
        names,
        key_field,
        timestamp_field,
    };
    deserializer
        .deserialize_map(reader)
        .and_then(|object| deserializer.end().map(|()| object))
        .map_err(DecodeError::NotJson)
}

struct ObjectReader<'a> {
    names: &'a mut Names,
    key_field: &'a str,
    timestamp_field: &'a str,
}

impl<'de> Visitor<'de> for ObjectReader<'_> {
    type Value = Object;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object, A::Error> {
        let mut object = Object {
            fields: Vec::with_capacity(self.names.previous.len()),
            ..Object::default()
        };
        let mut index: Option<HashMap<FieldName, usize>> = None;
        while let Some(name) = map.next_key_seed(NameSeed {
            names: self.names,
            position: object.fields.len(),
        })? {
            let (is_key, is_timestamp) = (*name == *self.key_field, *name == *self.timestamp_field);
            if !is_key && !is_timestamp {
                let value = map.next_value_seed(ValueSeed)?;
                put(&mut object.fields, &mut index, name, value);
                continue;
            }
            let (value, special) = map.next_value_seed(SpecialSeed)?;
            let at = put(&mut object.fields, &mut index, name, value);
            let special = special.unwrap_or(Special::Text(at));
            if is_key {
                object.key = Some(special.clone());
            }
            if is_timestamp {
                object.timestamp = Some(special);
            }
        }
        Ok(object)
    }
}

/// Adds a field, or replaces the value of an earlier one of the same name in its place.
/// Returns the field's index.
fn put(
    fields: &mut Vec<(FieldName, Value)>,
    index: &mut Option<HashMap<FieldName, usize>>,
    name: FieldName,
    value: Value,
) -> usize {
    let earlier = match index {
        Some(index) => index.get(&name).copied(),
        None => fields.iter().position(|(seen, _)| *seen == name),
    };
    if let Some(at) = earlier {
        fields[at].1 = value;
        return at;
    }
    if let Some(index) = index {
        index.insert(name.clone(), fields.len());
    } else if fields.len() == SCAN_LIMIT {
        let mut built: HashMap<FieldName, usize> = HashMap::default();
        built.extend(fields.iter().enumerate().map(|(i, (n, _))| (n.clone(), i)));
        built.insert(name.clone(), fields.len());
        *index = Some(built);
    }
    fields.push((name, value));
    fields.len() - 1
}

struct NameSeed<'a> {
    names: &'a mut Names,
    position: usize,
}

impl<'de> DeserializeSeed<'de> for NameSeed<'_> {
    type Value = FieldName;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<FieldName, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for NameSeed<'_> {
    type Value = FieldName;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<FieldName, E> {
        Ok(self.names.name(self.position, text))
    }
}

/// A field's value, as [`Value::from_json`] would make it from the parsed JSON.
struct ValueSeed;

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Boolean(b))
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<Value, E> {
        Ok(Value::Int(i))
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<Value, E> {
        Ok(i64::try_from(u).map_or(Value::Float(u as f64), Value::Int))
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<Value, E> {
        Ok(Value::Float(f))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Value, E> {
        Ok(Value::Text(text.into()))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Value, E> {
        Ok(Value::Text(text.into()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Value, A::Error> {
        let json: serde_json::Value =
            serde::Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Value::from_json(&json))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Value, A::Error> {
        let json: serde_json::Value =
            serde::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Value::from_json(&json))
    }
}

/// The key or timestamp field's value: as [`ValueSeed`] makes it, and described for the
/// decoder (`None`: text, which the field's value holds).
struct SpecialSeed;

impl<'de> DeserializeSeed<'de> for SpecialSeed {
    type Value = (Value, Option<Special>);

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for SpecialSeed {
    type Value = (Value, Option<Special>);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok((
            Value::Null,
            Some(Special::Json(Box::new(serde_json::Value::Null))),
        ))
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Self::Value, E> {
        Ok((Value::Boolean(b), Some(Special::Json(Box::new(b.into())))))
    }

    fn visit_i64<E: de::Error>(self, i: i64) -> Result<Self::Value, E> {
        Ok((Value::Int(i), Some(Special::Int(i))))
    }

    fn visit_u64<E: de::Error>(self, u: u64) -> Result<Self::Value, E> {
        Ok(match i64::try_from(u) {
            Ok(i) => (Value::Int(i), Some(Special::Int(i))),
            Err(_) => (
                Value::Float(u as f64),
                Some(Special::Json(Box::new(u.into()))),
            ),
        })
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<Self::Value, E> {
        let json = serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, Into::into);
        Ok((Value::Float(f), Some(Special::Json(Box::new(json)))))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
        Ok((Value::Text(text.into()), None))
    }

    fn visit_string<E: de::Error>(self, text: String) -> Result<Self::Value, E> {
        Ok((Value::Text(text.into()), None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        let json: serde_json::Value =
            serde::Deserialize::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok((Value::from_json(&json), Some(Special::Json(Box::new(json)))))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let json: serde_json::Value =
            serde::Deserialize::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok((Value::from_json(&json), Some(Special::Json(Box::new(json)))))
    }
}

#[cfg(test)]
mod tests {
    //! The reader against the `serde_json::Value` path it replaced, on awkward lines.

    use super::*;

    fn old_way(text: &str) -> Vec<(String, Value)> {
        let json: serde_json::Value = serde_json::from_str(text).unwrap();
        let serde_json::Value::Object(object) = json else {
            panic!("not an object")
        };
        object
            .iter()
            .map(|(name, value)| (name.clone(), Value::from_json(value)))
            .collect()
    }

    fn new_way(text: &str, names: &mut Names) -> Vec<(String, Value)> {
        let object = read(text, names, "k", "t").unwrap();
        object
            .fields
            .into_iter()
            .map(|(name, value)| (name.to_string(), value))
            .collect()
    }

    #[test]
    fn fields_equal_those_of_the_parsed_json_value() {
        let wide: String = format!(
            "{{{}}}",
            (0..100)
                .map(|i| format!("\"f{}\":{i}", i % 70))
                .collect::<Vec<_>>()
                .join(",")
        );
        let lines = [
            r#"{"k":"a","t":1,"x":1.5,"y":null,"z":true}"#,
            r#"{"t":1,"k":"a","x":"é\n\"q\"","n":{"b":1,"a":[1,{"c":null}]},"s":[]}"#,
            r#"{"k":"a","x":1,"x":2,"y":3,"x":4}"#,
            r#"{"big":18446744073709551615,"neg":-9223372036854775808,"e":1e3,"f":-0.0}"#,
            r#"  {"a\u0041":1, "k" : 7 }  "#,
            r#"{}"#,
            &wide,
        ];
        let mut names = Names::default();
        for _ in 0..2 {
            for line in lines {
                assert_eq!(new_way(line, &mut names), old_way(line), "{line}");
            }
        }
    }

    #[test]
    fn the_key_and_timestamp_keep_their_json() {
        let object = read(
            r#"{"k":18446744073709551615,"t":"2026-01-01T00:00:00Z","k":"b"}"#,
            &mut Names::default(),
            "k",
            "t",
        )
        .unwrap();
        // The key's first place holds its last value.
        assert_eq!(object.key, Some(Special::Text(0)));
        assert_eq!(object.text(0), Some("b"));
        assert_eq!(object.timestamp, Some(Special::Text(1)));
        assert_eq!(object.text(1), Some("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn bad_lines_say_why() {
        let mut names = Names::default();
        for (line, reason) in [
            ("[1,2]", "line is not a JSON object"),
            ("5", "line is not a JSON object"),
            ("{\"a\":1}x", "line is not valid JSON (trailing characters"),
            ("{\"a\":}", "line is not valid JSON (expected value"),
            ("{\"a\":1", "line is not valid JSON (EOF while parsing"),
            ("nope", "line is not valid JSON (expected ident"),
        ] {
            let error = read(line, &mut names, "k", "t").unwrap_err().to_string();
            assert!(error.starts_with(reason), "{line}: {error}");
        }
    }

    #[test]
    fn the_raw_value_marker_is_an_ordinary_field_name() {
        let line = r#"{"$serde_json::private::RawValue":"{\"k\":\"a\",\"t\":1}"}"#;
        let object = read(line, &mut Names::default(), "k", "t").unwrap();
        assert_eq!(object.key, None);
        assert_eq!(&*object.fields[0].0, "$serde_json::private::RawValue");
    }

    #[test]
    fn the_name_cache_is_bounded() {
        let mut names = Names::default();
        for i in 0..MAX_CACHED_NAMES + 100 {
            read(&format!("{{\"n{i}\":1}}"), &mut names, "k", "t").unwrap();
        }
        assert_eq!(names.cached.len(), MAX_CACHED_NAMES);
        assert!(names.previous.len() <= SCAN_LIMIT);
        let mut names = Names::default();
        let long = "x".repeat(MAX_INTERNED_LEN + 1);
        read(&format!("{{\"{long}\":1,\"a\":2}}"), &mut names, "k", "t").unwrap();
        assert_eq!(names.cached.len(), 1, "only the short name is cached");
    }

    fn json() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<u64>().prop_map(serde_json::Value::from),
            (-1e300f64..1e300).prop_map(serde_json::Value::from),
            "[a-z\\\"é\n]{0,6}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                proptest::collection::vec(("[a-c]{1,2}", inner), 0..4)
                    .prop_map(|pairs| { serde_json::Value::Object(pairs.into_iter().collect()) }),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn any_object_reads_as_the_parsed_json_value_would(
            fields in proptest::collection::vec(("[a-e]{1,2}", json()), 0..12),
            repeat in proptest::bool::ANY,
        ) {
            // Written by hand so that repeated names stay repeated in the text.
            let mut pairs: Vec<String> = fields
                .iter()
                .map(|(name, value)| format!("{}:{value}", serde_json::Value::from(name.as_str())))
                .collect();
            if repeat && !pairs.is_empty() {
                pairs.push(pairs[0].clone());
            }
            let line = format!("{{{}}}", pairs.join(","));
            let mut names = Names::default();
            proptest::prop_assert_eq!(new_way(&line, &mut names), old_way(&line));
        }
    }
}
