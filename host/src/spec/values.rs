//! The shared parsers of the spec's values: durations (integer milliseconds or text with a
//! unit, [`crate::time::parse_duration`]) and sizes (integer bytes or text with a unit), and
//! [`invalid`], the error every section's checks build.
//!
//! Depends on `time` and on [`SpecError`](super::SpecError) only; every other section depends
//! on it.

use serde::Deserialize;

use super::{Result, SpecError};
use crate::time::{MAX_TIMESTAMP, Millis, parse_duration};

/// A duration: integer milliseconds or text with a unit.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum RawDuration {
    Millis(i64),
    Text(String),
}

/// A size: integer bytes or text with a unit.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum RawSize {
    Bytes(u64),
    Text(String),
}

/// A spec's value that is not acceptable, with what to write instead.
pub(super) fn invalid(message: impl Into<String>) -> SpecError {
    SpecError::Invalid(message.into())
}

/// A duration of at least zero.
pub(super) fn duration(field: &str, raw: &RawDuration) -> Result<Millis> {
    match raw {
        RawDuration::Millis(ms) if *ms > MAX_TIMESTAMP => Err(invalid(format!(
            "{field} = {ms} ms is too large (at most {MAX_TIMESTAMP} ms)"
        ))),
        RawDuration::Millis(ms) if *ms >= 0 => Ok(*ms),
        RawDuration::Millis(ms) => Err(invalid(format!("{field} = {ms} must not be negative"))),
        RawDuration::Text(text) => {
            parse_duration(text).map_err(|e| invalid(format!("{field}: {e}")))
        }
    }
}

/// A duration that may be negative (`-5s`, `-5000`).
pub(super) fn signed_duration(field: &str, raw: &RawDuration) -> Result<Millis> {
    match raw {
        RawDuration::Millis(ms) if *ms < 0 => {
            duration(field, &RawDuration::Millis(-ms)).map(|ms| -ms)
        }
        RawDuration::Text(text) if text.trim_start().starts_with('-') => {
            let positive = text.trim_start()[1..].to_owned();
            duration(field, &RawDuration::Text(positive)).map(|ms| -ms)
        }
        raw => duration(field, raw),
    }
}

/// A duration above zero, required (`{field} is required` when absent).
pub(super) fn positive(field: &str, raw: Option<&RawDuration>) -> Result<Millis> {
    let raw = raw.ok_or_else(|| invalid(format!("{field} is required")))?;
    match duration(field, raw)? {
        0 => Err(invalid(format!("{field} must be greater than zero"))),
        ms => Ok(ms),
    }
}

/// A size field: integer bytes or text with a unit, `default` when absent.
pub(super) fn size(field: &str, raw: &Option<RawSize>, default: usize) -> Result<usize> {
    match raw {
        None => Ok(default),
        Some(RawSize::Bytes(n)) => Ok(*n as usize),
        Some(RawSize::Text(text)) => parse_size(text).map_err(|e| invalid(format!("{field}: {e}"))),
    }
}

/// Why a size was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    /// It does not start with a whole number.
    #[error("size {0:?} must start with a whole number")]
    NotANumber(String),
    /// Its unit is not one of B, KiB, MiB, GiB.
    #[error("size {text:?} has unknown unit {unit:?} (use B, KiB, MiB or GiB)")]
    Unit {
        /// The size as given.
        text: String,
        /// The unit.
        unit: String,
    },
    /// It does not fit in memory's addresses.
    #[error("size {0:?} is too large")]
    TooLarge(String),
}

/// Parses a size: a whole number of bytes, optionally with a unit (`B`, `KiB`, `MiB`, `GiB`).
pub fn parse_size(text: &str) -> Result<usize, SizeError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: usize = (digits.parse()).map_err(|_| SizeError::NotANumber(text.to_owned()))?;
    let scale: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        other => {
            return Err(SizeError::Unit {
                text: text.to_owned(),
                unit: other.to_owned(),
            });
        }
    };
    n.checked_mul(scale)
        .ok_or_else(|| SizeError::TooLarge(text.to_owned()))
}
