//! Event time: timestamps in milliseconds since the Unix epoch, durations, event-time windows,
//! and the watermark's infinities. Depends on nothing else in Weir.

/// Event time, in milliseconds since the Unix epoch.
pub type Millis = i64;

/// The watermark before any event: every window is still open.
pub const MINUS_INFINITY: Millis = Millis::MIN;
/// The watermark at the end of a bounded input: every window is complete.
pub const PLUS_INFINITY: Millis = Millis::MAX;

/// The largest accepted timestamp magnitude: 8.64e15 ms (about 273,790 years either side of
/// 1970, the range of a JavaScript `Date`). Keeping timestamps well inside `i64` means window
/// arithmetic (`end + lateness`) cannot overflow.
pub const MAX_TIMESTAMP: Millis = 8_640_000_000_000_000;

/// A half-open event-time window `[start, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window {
    /// First millisecond in the window.
    pub start: Millis,
    /// First millisecond after the window.
    pub end: Millis,
}

impl Window {
    /// Whether two windows overlap or touch (one ends where the other starts).
    pub fn overlaps_or_touches(&self, other: &Window) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    /// The smallest window covering both.
    pub fn cover(&self, other: &Window) -> Window {
        Window {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

/// The wall clock, in ms since the Unix epoch (0 for a clock set before 1970): the one helper
/// for processing time.
pub fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Why a timestamp or a duration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimeError {
    /// A JSON number that is not a whole number of milliseconds.
    #[error("timestamp {0} is not an integer number of milliseconds")]
    NotWholeMillis(serde_json::Number),
    /// JSON that is neither a number nor text (shown as it was).
    #[error("timestamp {0} is neither milliseconds nor RFC 3339 text")]
    NeitherMillisNorText(String),
    /// Text that is not RFC 3339.
    #[error("timestamp {text:?} is not RFC 3339 ({source})")]
    NotRfc3339 {
        /// The text.
        text: String,
        /// What the parser found.
        source: chrono::ParseError,
    },
    /// A timestamp beyond `±MAX_TIMESTAMP`.
    #[error("timestamp {0} is out of range (|ms| <= {MAX_TIMESTAMP})")]
    OutOfRange(Millis),
    /// A duration that does not start with a whole number.
    #[error("duration {0:?} must start with a whole number")]
    DurationNotANumber(String),
    /// A duration with a unit that is not one of ms, s, m, h, d.
    #[error("duration {text:?} has unknown unit {unit:?} (use ms, s, m, h or d)")]
    DurationUnit {
        /// The duration as given.
        text: String,
        /// The unit.
        unit: String,
    },
    /// A duration longer than `MAX_TIMESTAMP` milliseconds.
    #[error("duration {0:?} is too large")]
    DurationTooLarge(String),
}

/// Parses an event timestamp: integer milliseconds since the epoch, or RFC 3339 text.
pub fn parse_timestamp(json: &serde_json::Value) -> Result<Millis, TimeError> {
    let ms = match json {
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(ms) => ms,
            None => return Err(TimeError::NotWholeMillis(n.clone())),
        },
        serde_json::Value::String(s) => return parse_timestamp_text(s),
        other => return Err(TimeError::NeitherMillisNorText(other.to_string())),
    };
    check_timestamp(ms)
}

/// Parses a timestamp given as text: RFC 3339, within `±MAX_TIMESTAMP`.
pub fn parse_timestamp_text(text: &str) -> Result<Millis, TimeError> {
    let ms = chrono::DateTime::parse_from_rfc3339(text)
        .map_err(|source| TimeError::NotRfc3339 {
            text: text.to_owned(),
            source,
        })?
        .timestamp_millis();
    check_timestamp(ms)
}

/// Checks that a timestamp is within `±MAX_TIMESTAMP`, the one range check every event time
/// passes (decoded or produced by an operator).
pub fn check_timestamp(ms: Millis) -> Result<Millis, TimeError> {
    if ms.unsigned_abs() > MAX_TIMESTAMP.unsigned_abs() {
        return Err(TimeError::OutOfRange(ms));
    }
    Ok(ms)
}

/// Parses a duration: an integer number of milliseconds, or a number with a unit
/// (`ms`, `s`, `m`, `h`, `d`), such as `"250ms"`, `"5s"` or `"1h"`.
pub fn parse_duration(text: &str) -> Result<Millis, TimeError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: i64 = (digits.parse()).map_err(|_| TimeError::DurationNotANumber(text.to_owned()))?;
    let scale = match unit.trim() {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" | "min" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => {
            return Err(TimeError::DurationUnit {
                text: text.to_owned(),
                unit: other.to_owned(),
            });
        }
    };
    n.checked_mul(scale)
        .filter(|ms| *ms <= MAX_TIMESTAMP)
        .ok_or_else(|| TimeError::DurationTooLarge(text.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_millis_and_rfc3339() {
        assert_eq!(parse_timestamp(&json!(1500)), Ok(1500));
        assert_eq!(parse_timestamp(&json!("1970-01-01T00:00:01.5Z")), Ok(1500));
        assert_eq!(parse_timestamp(&json!("1970-01-01T01:00:00+01:00")), Ok(0));
        assert!(parse_timestamp(&json!(1.5)).is_err());
        assert!(parse_timestamp(&json!("yesterday")).is_err());
        assert!(parse_timestamp(&json!(i64::MAX)).is_err());
        assert!(parse_timestamp(&json!(i64::MIN)).is_err());
        assert!(parse_timestamp(&json!(-MAX_TIMESTAMP - 1)).is_err());
        assert_eq!(parse_timestamp(&json!(-MAX_TIMESTAMP)), Ok(-MAX_TIMESTAMP));
    }

    #[test]
    fn parses_durations() {
        assert_eq!(parse_duration("250"), Ok(250));
        assert_eq!(parse_duration("250ms"), Ok(250));
        assert_eq!(parse_duration("5s"), Ok(5_000));
        assert_eq!(parse_duration("2m"), Ok(120_000));
        assert_eq!(parse_duration("1d"), Ok(86_400_000));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-5s").is_err());
    }
}
