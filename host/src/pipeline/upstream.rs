//! The records between the two halves of a pipeline with stages (or a global or pre-aggregated
//! aggregate) shared by workers: each slice of key groups (or partition) writes its aggregate's
//! window results, and marks of how far its watermark has come, as [`UpstreamRecord`]s to a
//! stream; the one slice that runs the stages (`stage_slice.rs`) reads them back.
//!
//! A slice writes a mark only after every result before it is acknowledged (see
//! [`MarkPacer`]), so every result its watermark fired on the way to a mark is on the stream
//! before that mark. Every result but the last of what one batch of the slice emitted is
//! marked `open`: the stage slice holds a slice's open results until the one that closes
//! them, so what one event made (a retraction and the result that follows it) is never
//! handed to the stages in two parts.
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
        /// More results of the same batch of the slice follow (the last one closes it).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        open: bool,
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
/// arrival, as in one process), `open` unless it is the last of its batch.
pub fn record(pipeline: &str, slice: usize, emission: &Emission, open: bool) -> UpstreamRecord {
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
            open,
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
/// a slice, and whether more of its batch follow; or a slice's mark.
#[derive(Debug)]
pub enum Upstream {
    Result {
        slice: usize,
        emission: Emission,
        open: bool,
    },
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
    let (trigger, key, start, end, kind, version, value, replaces, open) = match record.body {
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
            open,
        } => (
            trigger, key, start, end, kind, version, value, replaces, open,
        ),
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
    Ok(Upstream::Result {
        slice,
        emission: Emission {
            trigger,
            key: key.into(),
            window: Window { start, end },
            kind,
            version,
            value,
            replaces,
            operator_version: None,
        },
        open,
    })
}

/// What the stages took last of each upstream window result, by slice, key and window: its
/// version, and its value unless it was withdrawn. A slice's publisher sends a record that went
/// unacknowledged again after later ones, so the stream may hold a result after its update, or
/// a retraction after the update that replaced what it withdraws: such an older record is
/// dropped rather than undo a newer one. And what a newer one withdraws is made what the stages
/// took (a version in between may not have come yet): a stage keyed by a field withdraws it
/// from the key it went to.
///
/// It is part of the stage slice's checkpoints ([`Latest::changes`], [`Latest::restore`]): a
/// record sent again that is read after a restore is still caught.
#[derive(Debug, Default)]
pub struct Latest {
    seen: crate::hashing::HashMap<ResultOf, Taken>,
    /// What changed, or was forgotten, since the last checkpoint.
    dirty: crate::hashing::HashSet<ResultOf>,
}

/// The operator index of `Latest`'s rows in the stage slice's checkpoints (among the window
/// rows, beside the stages' own, which are numbered from the pipeline's chain).
const LATEST_ROWS: u16 = u16::MAX;

/// A row of `Latest` in a checkpoint.
#[derive(Serialize, Deserialize)]
struct TakenRow {
    version: u64,
    value: Option<Fields>,
}

/// Why a checkpoint's row of what the stages took cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("a checkpoint's row of what the stages took is damaged: {0}")]
pub struct LatestRowError(String);

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
        self.dirty.insert(key.clone());
        self.seen.insert(key, (emission.version, now));
        true
    }

    /// Forgets the windows that ended at or before `end`: no slice changes them any more.
    pub fn forget_ended(&mut self, end: Millis) {
        let dirty = &mut self.dirty;
        self.seen.retain(|result, _| {
            let open = result.2.end > end;
            if !open {
                dirty.insert(result.clone());
            }
            open
        });
    }

    /// Its rows changed or removed since the last call, for a checkpoint's window rows.
    pub fn changes(&mut self) -> Vec<crate::state::Change> {
        let dirty = std::mem::take(&mut self.dirty);
        (dirty.into_iter())
            .map(|result| {
                let value = self.seen.get(&result).map(|(version, value)| {
                    let row = TakenRow {
                        version: *version,
                        value: value.clone(),
                    };
                    serde_json::to_vec(&row).expect("values serialise")
                });
                crate::state::Change {
                    key: row_key(&result),
                    value,
                }
            })
            .collect()
    }

    /// The keys of its rows among a checkpoint's window rows, `[from, to)`.
    pub fn row_range() -> (Vec<u8>, Vec<u8>) {
        let mut from = 0u16.to_be_bytes().to_vec();
        from.extend_from_slice(&LATEST_ROWS.to_be_bytes());
        (from, 1u16.to_be_bytes().to_vec())
    }

    /// What a checkpoint's window `rows` (of every operator: it takes its own) say was taken.
    pub fn restore(rows: &[crate::state::TableRow]) -> Result<Latest, LatestRowError> {
        let mut latest = Latest::default();
        for row in rows {
            let Some(key) = crate::state::StateKey::decode(&row.key) else {
                continue;
            };
            let crate::state::Namespace::Window { start, end } = key.namespace else {
                continue;
            };
            if key.operator != LATEST_ROWS {
                continue;
            }
            let damaged = || LatestRowError(format!("key {:?}", key.key));
            let (slice, result) = key.key.split_once('/').ok_or_else(damaged)?;
            let slice: usize = slice.parse().map_err(|_| damaged())?;
            let taken: TakenRow = serde_json::from_slice(&row.value)
                .map_err(|e| LatestRowError(format!("key {:?}: {e}", key.key)))?;
            let window = Window { start, end };
            (latest.seen).insert((slice, result.into(), window), (taken.version, taken.value));
        }
        Ok(latest)
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

/// The checkpoint row key of `result`.
fn row_key((slice, key, window): &ResultOf) -> Vec<u8> {
    crate::state::StateKey {
        group: 0,
        operator: LATEST_ROWS,
        namespace: crate::state::Namespace::Window {
            start: window.start,
            end: window.end,
        },
        key: format!("{slice}/{key}").into(),
    }
    .encode()
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
        let line = serde_json::to_vec(&record("p", 1, &update, true)).unwrap();
        let Upstream::Result {
            slice: 1,
            emission: read,
            open: true,
        } = parse(&line, 2, true).unwrap()
        else {
            panic!("an open result of slice 1")
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
        let retraction = record("p", 1, &emission(EmissionKind::Retract, None), false);
        assert_ne!(retraction.id, record("p", 1, &update, false).id);
        assert_ne!(
            record("p", 0, &update, false).id,
            record("p", 1, &update, false).id
        );
        let closing = serde_json::to_string(&record("p", 1, &update, false)).unwrap();
        assert!(!closing.contains("open"), "the last of a batch, as before");
        assert!(matches!(
            parse(closing.as_bytes(), 2, true),
            Ok(Upstream::Result { open: false, .. })
        ));
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
        let mut written = record("p", 0, &emission(EmissionKind::Result, None), false);
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
    fn what_was_taken_survives_a_checkpoint_and_a_restore() {
        let mut latest = Latest::default();
        let at = |window: Window, kind, version| Emission {
            window,
            kind,
            version,
            ..emission(kind, None)
        };
        let (early, late) = (Window { start: 0, end: 10 }, Window { start: 10, end: 20 });
        assert!(latest.admits(1, &mut at(early, EmissionKind::Result, 1)));
        assert!(latest.admits(1, &mut at(late, EmissionKind::Update, 3)));
        let rows = |changes: Vec<crate::state::Change>| -> Vec<crate::state::TableRow> {
            (changes.into_iter())
                .filter_map(|c| {
                    c.value
                        .map(|value| crate::state::TableRow { key: c.key, value })
                })
                .collect()
        };
        let first = latest.changes();
        assert_eq!(first.len(), 2);
        assert!(latest.changes().is_empty(), "nothing changed since");
        latest.forget_ended(10);
        let forgotten = latest.changes();
        assert_eq!(forgotten.len(), 1);
        assert!(
            forgotten[0].value.is_none(),
            "a forgotten window's row removed"
        );
        let (from, to) = Latest::row_range();
        assert!(
            first.iter().all(|c| from <= c.key && c.key < to),
            "its rows in its range"
        );
        let mut rows = rows(first);
        // A stage's own window row beside them (operator 2, key group 0) is not its.
        let stage_row = crate::state::StateKey {
            group: 0,
            operator: 2,
            namespace: crate::state::Namespace::Window { start: 10, end: 20 },
            key: "1/k".into(),
        };
        assert!(stage_row.encode() < from, "outside its range");
        rows.push(crate::state::TableRow {
            key: stage_row.encode(),
            value: b"{\"not\": \"a taken row\"}".to_vec(),
        });
        let mut restored = Latest::restore(&rows).unwrap();
        assert_eq!(restored.len(), 2);
        assert!(
            !restored.admits(1, &mut at(late, EmissionKind::Update, 2)),
            "an older copy read after the restore is still dropped"
        );
        let mut newer = at(late, EmissionKind::Update, 4);
        assert!(restored.admits(1, &mut newer));
        assert_eq!(
            newer.replaces,
            Some(emission(EmissionKind::Update, None).value)
        );
        let damaged = crate::state::TableRow {
            key: row_key(&(1, "k".into(), late)),
            value: b"{".to_vec(),
        };
        assert!(Latest::restore(&[damaged]).is_err());
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
