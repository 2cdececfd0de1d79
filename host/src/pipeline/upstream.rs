//! The records between the two halves of a pipeline with stages (or a global or pre-aggregated
//! aggregate) shared by workers: each slice of key groups (or partition) writes its aggregate's
//! window results, and marks of how far its watermark has come, as [`UpstreamRecord`]s to a
//! stream; the one slice that runs the stages (`stage_slice.rs`) reads them back.
//!
//! A slice writes a mark only after every result before it is acknowledged (see
//! [`MarkPacer`]), so every result its watermark fired on the way to a mark is on the stream
//! before that mark.
//! A record is one emission whole (an update with the result it replaces, as the stages take
//! it in one process). Values keep their types (the serde form of
//! [`crate::value::Value`]), a partial's bytes among them.
//!
//! Depends on `emit` (its record trait), `time`, `value` and `window`.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::time::{Millis, Window};
use crate::value::Fields;
use crate::window::{Emission, EmissionKind};

/// What a slice writes for the stage slice.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct UpstreamRecord {
    /// Unique on the stream (the NATS sink de-duplicates on it): the slice, then the window
    /// result's id or the mark's watermark.
    pub id: String,
    /// The slice that wrote it.
    pub slice: usize,
    /// A result, or a mark.
    pub body: Body,
}

/// An [`UpstreamRecord`]'s content.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub enum Body {
    /// A window result, update, early result or retraction of the aggregate, with the arrival
    /// index (in its slice) that made it: what one event's processing emitted goes in together.
    Result {
        #[serde(default)]
        trigger: u64,
        key: String,
        start: Millis,
        end: Millis,
        kind: String,
        version: u64,
        value: Fields,
        /// For an update or early result: the result it replaces.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replaces: Option<Fields>,
    },
    /// The slice's watermark reached this, and every result it fired up to it came before.
    Mark(Millis),
}

impl crate::emit::Record for UpstreamRecord {
    fn id(&self) -> Option<&str> {
        Some(&self.id)
    }
}

/// The record of `emission` of slice `slice` of `pipeline`: the emission whole, an update
/// with the result it replaces (so the stages withdraw that and take the update in one
/// arrival, as in one process).
pub fn record(pipeline: &str, slice: usize, emission: &Emission) -> UpstreamRecord {
    let retract = match emission.kind {
        EmissionKind::Retract => "r",
        _ => "",
    };
    let (window, version) = (emission.window, emission.version);
    UpstreamRecord {
        id: format!(
            "{slice}/{pipeline}/{}/{}/{version}{retract}/{}",
            window.start, window.end, emission.key
        ),
        slice,
        body: Body::Result {
            trigger: emission.trigger,
            key: emission.key.to_string(),
            start: window.start,
            end: window.end,
            kind: emission.kind.as_str().to_owned(),
            version,
            value: emission.value.clone(),
            replaces: emission.replaces.clone(),
        },
    }
}

/// The mark of slice `slice` at `watermark`.
pub fn mark(slice: usize, watermark: Millis) -> UpstreamRecord {
    UpstreamRecord {
        id: format!("{slice}/mark/{watermark}"),
        slice,
        body: Body::Mark(watermark),
    }
}

/// Why a line on the stage stream is not an upstream record.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Not the JSON of one.
    #[error("not a slice's record for the stages: {0}")]
    Malformed(#[from] serde_json::Error),
    /// Of a slice the pipeline does not have.
    #[error("from slice {slice}, but the pipeline has {slices} slices")]
    Slice { slice: usize, slices: usize },
    /// Of no kind a window result has.
    #[error("a result of kind {0:?}, which no window result has")]
    Kind(String),
    /// A window that ends before it starts.
    #[error("a window from {start} to {end}, which ends before it starts")]
    Window { start: Millis, end: Millis },
}

/// What the stage slice reads: a result (as an emission, its trigger the one in its slice) of
/// a slice, or a slice's mark.
#[derive(Debug)]
pub enum Upstream {
    Result(usize, Emission),
    Mark(usize, Millis),
}

/// Reads an upstream record of a pipeline of `slices` slices. A global or pre-aggregated
/// aggregate's partials (`bucketed`) are told apart by slice (`<bucket>.<slice>`): two slices of
/// a partitioned stream may each have a partial of one bucket, and the stages keep their inputs
/// by key.
pub fn parse(line: &[u8], slices: usize, bucketed: bool) -> Result<Upstream, UpstreamError> {
    let record: UpstreamRecord = serde_json::from_slice(line)?;
    let slice = record.slice;
    if slice >= slices {
        return Err(UpstreamError::Slice { slice, slices });
    }
    let (trigger, key, start, end, kind, version, value, replaces) = match record.body {
        Body::Mark(watermark) => return Ok(Upstream::Mark(slice, watermark)),
        Body::Result {
            trigger,
            key,
            start,
            end,
            kind,
            version,
            value,
            replaces,
        } => (trigger, key, start, end, kind, version, value, replaces),
    };
    let kind = match kind.as_str() {
        "result" => EmissionKind::Result,
        "update" => EmissionKind::Update,
        "early" => EmissionKind::Early,
        "retract" => EmissionKind::Retract,
        _ => return Err(UpstreamError::Kind(kind)),
    };
    if end < start {
        return Err(UpstreamError::Window { start, end });
    }
    let key = match bucketed {
        true => format!("{key}.{slice}"),
        false => key,
    };
    Ok(Upstream::Result(
        slice,
        Emission {
            trigger,
            key: key.into(),
            window: Window { start, end },
            kind,
            version,
            value,
            replaces,
            operator_version: None,
        },
    ))
}

/// What the stages took last of each upstream window result, by slice, key and window: its
/// version, and its value unless it was withdrawn. A slice's publisher sends a record that went
/// unacknowledged again after later ones, so the stream may hold a result after its update, or
/// a retraction after the update that replaced what it withdraws: such an older record is
/// dropped rather than undo a newer one. And what a newer one withdraws is made what the stages
/// took (a version in between may not have come yet): a stage keyed by a field withdraws it
/// from the key it went to.
#[derive(Debug, Default)]
pub struct Latest {
    seen: crate::hashing::HashMap<ResultOf, Taken>,
}

/// A slice's window result: its slice, key and window.
type ResultOf = (usize, std::sync::Arc<str>, Window);

/// What the stages took of one: its version, and its value unless it was withdrawn.
type Taken = (u64, Option<Fields>);

impl Latest {
    /// Whether `emission` of slice `slice` is newer than what was taken of its window (a
    /// retraction of the version taken is; the version it withdraws, arriving after it, is
    /// not), noting it if so, with what it withdraws made what was taken.
    pub fn admits(&mut self, slice: usize, emission: &mut Emission) -> bool {
        let retracts = emission.kind == EmissionKind::Retract;
        let key = (slice, emission.key.clone(), emission.window);
        let taken = match self.seen.remove(&key) {
            None => None,
            Some((version, taken)) => {
                let newer = match retracts {
                    true => {
                        emission.version > version
                            || (emission.version == version && taken.is_some())
                    }
                    false => emission.version > version,
                };
                if !newer {
                    self.seen.insert(key, (version, taken));
                    return false;
                }
                Some(taken)
            }
        };
        let now = match retracts {
            true => None,
            false => Some(emission.value.clone()),
        };
        match (retracts, taken) {
            // A retraction withdraws what was taken; of nothing taken, there is nothing to do
            // (it is passed on, and the stages drop it).
            (true, Some(Some(value))) => emission.value = value,
            (false, Some(taken)) => emission.replaces = taken,
            _ => {}
        }
        self.seen.insert(key, (emission.version, now));
        true
    }

    /// Forgets the windows that ended at or before `end`: no slice changes them any more.
    pub fn forget_ended(&mut self, end: Millis) {
        self.seen.retain(|(_, _, window), _| window.end > end);
    }

    /// How many windows it remembers.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether it remembers none.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

/// When a slice writes its next mark: at most every [`MARK_EVERY`] (each one waits for the
/// acknowledgement of every result before it), and at every checkpoint.
#[derive(Debug)]
pub struct MarkPacer {
    /// The slice.
    pub slice: usize,
    /// The watermark not marked yet.
    pending: Option<Millis>,
    last: Instant,
}

/// How often a slice marks its watermark at most.
pub const MARK_EVERY: Duration = Duration::from_millis(50);

impl MarkPacer {
    /// A pacer for slice `slice`.
    pub fn new(slice: usize) -> MarkPacer {
        MarkPacer {
            slice,
            pending: None,
            last: Instant::now(),
        }
    }

    /// The watermark came to `watermark`.
    pub fn advanced(&mut self, watermark: Millis) {
        self.pending = Some(watermark);
    }

    /// The mark to write now, if one is due (or `now` asks for any pending one).
    pub fn due(&mut self, now: bool) -> Option<UpstreamRecord> {
        if !now && self.last.elapsed() < MARK_EVERY {
            return None;
        }
        let watermark = self.pending.take()?;
        self.last = Instant::now();
        Some(mark(self.slice, watermark))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn emission(kind: EmissionKind, replaces: Option<Fields>) -> Emission {
        Emission {
            trigger: 9,
            key: "k/3".into(),
            window: Window { start: 0, end: 10 },
            kind,
            version: 2,
            value: vec![
                ("n".into(), crate::value::Value::Int(2)),
                ("p".into(), crate::value::Value::Bytes(vec![0, 255])),
            ],
            replaces,
            operator_version: None,
        }
    }

    #[test]
    fn an_update_travels_whole_with_what_it_replaces_and_its_types() {
        let previous = vec![("n".into(), crate::value::Value::Float(1.0))];
        let update = emission(EmissionKind::Update, Some(previous.clone()));
        let line = serde_json::to_vec(&record("p", 1, &update)).unwrap();
        let Upstream::Result(1, read) = parse(&line, 2, true).unwrap() else {
            panic!("a result")
        };
        assert_eq!(
            (read.kind, read.version, read.trigger),
            (EmissionKind::Update, 2, 9)
        );
        assert_eq!(read.replaces, Some(previous), "a float stays a float");
        assert_eq!(read.value, update.value, "bytes stay bytes");
        assert_eq!(
            &*read.key, "k/3.1",
            "a partial's bucket told apart by slice"
        );
        let retraction = record("p", 1, &emission(EmissionKind::Retract, None));
        assert_ne!(retraction.id, record("p", 1, &update).id);
        assert_ne!(record("p", 0, &update).id, record("p", 1, &update).id);
    }

    #[test]
    fn hostile_lines_are_refused_with_their_reason() {
        assert!(matches!(
            parse(b"{\"garbage\": 1}", 2, false),
            Err(UpstreamError::Malformed(_))
        ));
        let foreign = serde_json::to_vec(&mark(7, 5)).unwrap();
        assert!(matches!(
            parse(&foreign, 2, false),
            Err(UpstreamError::Slice { slice: 7, .. })
        ));
        let mut written = record("p", 0, &emission(EmissionKind::Result, None));
        if let Body::Result { kind, .. } = &mut written.body {
            *kind = "explode".into();
        }
        let line = serde_json::to_vec(&written).unwrap();
        assert!(matches!(
            parse(&line, 2, false),
            Err(UpstreamError::Kind(_))
        ));
    }

    #[test]
    fn a_record_sent_again_after_newer_ones_is_dropped() {
        let mut latest = Latest::default();
        let at = |kind, version| Emission {
            kind,
            version,
            ..emission(kind, None)
        };
        // The update (v2) came before the retraction of v1 and before v1 itself.
        assert!(latest.admits(0, &mut at(EmissionKind::Update, 2)));
        assert!(!latest.admits(0, &mut at(EmissionKind::Retract, 1)));
        assert!(!latest.admits(0, &mut at(EmissionKind::Result, 1)));
        assert!(
            !latest.admits(0, &mut at(EmissionKind::Update, 2)),
            "a repeat"
        );
        // Another slice's result of the same key and window is its own.
        assert!(latest.admits(1, &mut at(EmissionKind::Result, 1)));
        // A retraction of what was seen counts once; the version it withdrew, arriving late,
        // does not come back.
        assert!(latest.admits(0, &mut at(EmissionKind::Retract, 2)));
        assert!(!latest.admits(0, &mut at(EmissionKind::Retract, 2)));
        assert!(!latest.admits(0, &mut at(EmissionKind::Update, 2)));
        assert!(latest.admits(0, &mut at(EmissionKind::Update, 3)));
        // A retraction before the result it withdraws: the result is then dropped.
        let other = |kind, version| Emission {
            window: Window { start: 10, end: 20 },
            ..at(kind, version)
        };
        assert!(latest.admits(0, &mut other(EmissionKind::Retract, 1)));
        assert!(!latest.admits(0, &mut other(EmissionKind::Result, 1)));
        // v2 not come yet: v3 withdraws what was taken, v1, not v2.
        let third = |kind, version, value: i64| Emission {
            window: Window { start: 20, end: 30 },
            value: vec![("n".into(), crate::value::Value::Int(value))],
            replaces: Some(vec![("n".into(), crate::value::Value::Int(value - 1))]),
            ..at(kind, version)
        };
        let mut first = third(EmissionKind::Result, 1, 10);
        first.replaces = None;
        assert!(latest.admits(0, &mut first));
        let mut skipping = third(EmissionKind::Update, 3, 30);
        assert!(latest.admits(0, &mut skipping));
        assert_eq!(skipping.replaces, Some(first.value.clone()), "v1 withdrawn");
        assert!(!latest.admits(0, &mut third(EmissionKind::Update, 2, 20)));
        let mut retraction = third(EmissionKind::Retract, 3, 99);
        assert!(latest.admits(0, &mut retraction));
        assert_eq!(retraction.value, skipping.value, "what was taken withdrawn");
        latest.forget_ended(10);
        assert_eq!(
            latest.len(),
            2,
            "the windows ending at 10 forgotten, of both slices"
        );
    }

    #[test]
    fn marks_are_paced_but_a_checkpoint_takes_any_pending_one() {
        let mut pacer = MarkPacer::new(0);
        pacer.advanced(5);
        assert!(pacer.due(false).is_none(), "too soon after the start");
        assert_eq!(pacer.due(true).map(|m| m.body), Some(Body::Mark(5)));
        assert!(pacer.due(true).is_none(), "nothing pending");
        pacer.advanced(7);
        std::thread::sleep(MARK_EVERY);
        assert_eq!(pacer.due(false).map(|m| m.body), Some(Body::Mark(7)));
    }
}
