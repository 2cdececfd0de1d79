//! The `[event]` and `[watermark]` sections: the fields each event is keyed and timed by, and
//! how the watermark follows event time (`bound`, `max_ahead`, `advance_when_idle`,
//! `idle_timeout`, `partition_field`), with their raw forms, defaults and checks. What the
//! watermark may do depends on the source, so the checks take the checked [`SourceSpec`].
//!
//! Depends on `values`, `source` and `time`.

use serde::Deserialize;

use super::Result;
use super::source::SourceSpec;
use super::values::{RawDuration, duration, invalid, positive};
use crate::time::Millis;

/// The default bound on how far ahead of the wall clock an ingested event may be: one day.
pub const DEFAULT_MAX_AHEAD: Millis = 86_400_000;

/// The `[event]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEvent {
    /// Required unless a `[join]` keys each side by its own field.
    pub(super) key: Option<String>,
    pub(super) timestamp: String,
}

/// The `[watermark]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWatermark {
    bound: Option<RawDuration>,
    max_ahead: Option<RawDuration>,
    advance_when_idle: Option<RawDuration>,
    partition_field: Option<String>,
    idle_timeout: Option<RawDuration>,
}

/// The checked `[event]` and `[watermark]` (see the fields of the same names in
/// [`PipelineSpec`](super::PipelineSpec)).
#[derive(Debug)]
pub(super) struct Watermark {
    pub(super) key_field: String,
    pub(super) timestamp_field: String,
    pub(super) bound: Millis,
    pub(super) max_ahead: Millis,
    pub(super) advance_when_idle: Option<Millis>,
    pub(super) idle_timeout: Option<Millis>,
    pub(super) partition_field: Option<String>,
}

/// Checks the `[event]` (`joined`: the pipeline has a `[join]`, which keys each side by its own
/// field) and the `[watermark]` of a pipeline reading `source`.
pub(super) fn check(
    event: RawEvent,
    raw: RawWatermark,
    joined: bool,
    source: &SourceSpec,
) -> Result<Watermark> {
    let key_field = match (event.key, joined) {
        (Some(key), _) => key,
        (None, true) => String::new(),
        (None, false) => {
            return Err(invalid(
                "event.key is required: the field events are keyed by (only a [join], which \
                 keys each side by its own field, goes without it)",
            ));
        }
    };
    let bound = match &raw.bound {
        Some(raw) => duration("watermark.bound", raw)?,
        None => 0,
    };
    let max_ahead = match &raw.max_ahead {
        Some(raw) => positive("watermark.max_ahead", Some(raw))?,
        None => DEFAULT_MAX_AHEAD,
    };
    let advance_when_idle = match &raw.advance_when_idle {
        None => None,
        Some(_) if !matches!(source, SourceSpec::Http(_)) => {
            return Err(invalid(
                "watermark.advance_when_idle is for a live HTTP source (weir serve): a bounded \
                 input closes every window at its end",
            ));
        }
        Some(raw) => Some(positive("watermark.advance_when_idle", Some(raw))?),
    };
    let idle_timeout = match &raw.idle_timeout {
        None => None,
        Some(_)
            if !matches!(
                source,
                SourceSpec::Http(_) | SourceSpec::Nats(_) | SourceSpec::Kafka(_)
            ) =>
        {
            return Err(invalid(
                "watermark.idle_timeout judges partitions by the clock at which their events \
                 were accepted (by weir serve, a NATS server or a Kafka broker): it is for an \
                 HTTP, NATS or Kafka source",
            ));
        }
        Some(raw) => Some(positive("watermark.idle_timeout", Some(raw))?),
    };
    let partition_field = match raw.partition_field {
        Some(field) if field.is_empty() => {
            return Err(invalid("watermark.partition_field must name a field"));
        }
        field => field,
    };
    Ok(Watermark {
        key_field,
        timestamp_field: event.timestamp,
        bound,
        max_ahead,
        advance_when_idle,
        idle_timeout,
        partition_field,
    })
}
