//! `[quarantine]` ([`QuarantineSpec`]): a keyed aggregate's keys whose events trap (or, with
//! `errors = true`, are refused) in a version are parked instead of becoming dead letters:
//! their events are kept, their windows held, until `POST .../quarantine/redrive` sends the
//! events through the version then serving the key, or `ttl` of event time makes them dead
//! letters after all. Bounded per key and in all.
//!
//! Depends on `values` and `time` only.

use serde::Deserialize;

use super::Result;
use super::values::{RawDuration, duration, invalid};
use crate::time::Millis;

/// Parked events per key unless the spec says otherwise.
pub const DEFAULT_MAX_EVENTS_PER_KEY: usize = 1_000;
/// Parked events in all unless the spec says otherwise.
pub const DEFAULT_MAX_EVENTS: usize = 100_000;
/// The most a spec may allow per key.
pub const MAX_EVENTS_PER_KEY: usize = 100_000;
/// The most a spec may allow in all.
pub const MAX_EVENTS: usize = 10_000_000;
/// How long of event time a key stays parked unless the spec says otherwise: one hour.
pub const DEFAULT_TTL: Millis = 3_600_000;

/// `[quarantine]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQuarantine {
    max_events_per_key: Option<usize>,
    max_events: Option<usize>,
    ttl: Option<RawDuration>,
    #[serde(default)]
    errors: bool,
}

/// What parks a key and how much it may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuarantineSpec {
    /// Events kept per parked key; the ones beyond become dead letters.
    pub max_events_per_key: usize,
    /// Events kept in all (over every shard); the ones beyond become dead letters.
    pub max_events: usize,
    /// Event time (the watermark's progress) a key stays parked before its events become dead
    /// letters and its windows go on.
    pub ttl: Millis,
    /// Whether events the operator refuses park their key too (not only traps).
    pub errors: bool,
}

/// Checks `[quarantine]`: only for a keyed aggregate fed over HTTP (the re-drive goes through
/// `weir serve`'s ingest log).
pub(super) fn check(
    raw: Option<RawQuarantine>,
    keyed_aggregate: bool,
    http: bool,
) -> Result<Option<QuarantineSpec>> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    if !keyed_aggregate {
        return Err(invalid(
            "[quarantine] parks the keys of a keyed aggregate over tumbling or sliding windows: \
             this pipeline has none, session windows, stages, a join or a global aggregate",
        ));
    }
    if !http {
        return Err(invalid(
            "[quarantine] is for a pipeline fed over HTTP by weir serve, whose re-drive goes into \
             its ingest log",
        ));
    }
    let bounded = |field: &str, value: Option<usize>, default: usize, max: usize| match value {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(invalid(format!(
            "quarantine.{field} = {n}: give 1 to {max}"
        ))),
    };
    let max_events_per_key = bounded(
        "max_events_per_key",
        raw.max_events_per_key,
        DEFAULT_MAX_EVENTS_PER_KEY,
        MAX_EVENTS_PER_KEY,
    )?;
    let max_events = bounded("max_events", raw.max_events, DEFAULT_MAX_EVENTS, MAX_EVENTS)?;
    let ttl = match &raw.ttl {
        Some(raw) => duration("quarantine.ttl", raw)?,
        None => DEFAULT_TTL,
    };
    if ttl == 0 {
        return Err(invalid("quarantine.ttl must be above 0"));
    }
    Ok(Some(QuarantineSpec {
        max_events_per_key,
        max_events,
        ttl,
        errors: raw.errors,
    }))
}
