//! One watermark for a partitioned pipeline shared by workers ([`Exchange`]). Each slice reads
//! one partition of the stream, so its own watermark is that partition's; the pipeline's is the
//! minimum over every partition's, as a downstream task's is the minimum over its input
//! channels. Every [`EXCHANGE_EVERY`], a worker publishes the watermark of each slice it runs to
//! the key-value bucket `weir-watermarks` (`<pipeline>.<slice>`: `{"watermark": ms, "clock":
//! ms}`, the watermark `null` when its partition is idle) and reads every slice's, and each of
//! its runs takes the lowest of the *other* slices' as a floor under its own: a slice never
//! heard of holds everything back, an idle one nothing. The latest of their ingest clocks is
//! every run's too: a slice whose partition is quiet reads no clock of its own, and goes idle
//! by the others'. The values outlive their writers, so a slice
//! between owners still holds the others at its last published watermark, and a new owner
//! resumes from its checkpoint, at or below it.
//!
//! Depends on `pipeline` (a run's shared watermark), `time`, `periodic.rs` and the cluster's
//! connection.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::kv::Store;
use serde::{Deserialize, Serialize};
use tracing::warn;

use super::periodic::Periodic;
use super::{Connection, Result};
use crate::pipeline::PipelineControl;
use crate::time::{MINUS_INFINITY, Millis, PLUS_INFINITY};

/// The key-value bucket of the slices' watermarks.
const WATERMARKS_BUCKET: &str = "weir-watermarks";
/// How often a worker publishes its slices' watermarks and reads the others'.
pub const EXCHANGE_EVERY: Duration = Duration::from_millis(100);

/// What a slice says of its partition: its watermark (`None`: idle, it holds nothing back)
/// and the latest ingest clock it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
struct Published {
    /// Event time, ms; `null` when its partition is idle.
    watermark: Option<Millis>,
    /// Publication time of the last message it read, ms.
    #[serde(default)]
    clock: Option<i64>,
}

impl Published {
    fn of(local: Option<Millis>, clock: Option<i64>) -> Published {
        Published {
            watermark: local,
            clock,
        }
    }
}

/// The slice runs of one worker, by slice: those whose watermarks it exchanges (every slice
/// of a partitioned stream) and whose progress it reports.
pub(super) type Runs = Arc<Mutex<BTreeMap<usize, Arc<PipelineControl>>>>;

/// A worker's exchange of its slices' watermarks with the other workers'.
pub(super) struct Exchange {
    _thread: Periodic,
}

impl Exchange {
    /// Starts exchanging the watermarks of `runs`, slices of `pipeline` cut into `slices`.
    pub(super) fn start(
        connection: Arc<Connection>,
        pipeline: &str,
        slices: usize,
        runs: Runs,
    ) -> Result<Exchange> {
        let bucket = connection.bucket(WATERMARKS_BUCKET, Duration::ZERO)?;
        let mut exchanging = Exchanging {
            connection,
            bucket,
            pipeline: pipeline.to_owned(),
            slices,
            runs,
            written: BTreeMap::new(),
            rounds: 0,
        };
        let thread = Periodic::start("weir-watermarks", EXCHANGE_EVERY, move || {
            exchanging.round()
        })
        .map_err(|source| super::ClusterError::Io {
            path: std::path::PathBuf::from("watermark exchange"),
            source,
        })?;
        Ok(Exchange { _thread: thread })
    }
}

struct Exchanging {
    connection: Arc<Connection>,
    bucket: Store,
    pipeline: String,
    slices: usize,
    runs: Runs,
    /// What was last published for each slice run here.
    written: BTreeMap<usize, Published>,
    /// Exchanges so far.
    rounds: u64,
}

/// Every this many exchanges (a second), a slice's watermark is written whether it changed or
/// not.
const REWRITE_EVERY: u64 = 10;

impl Exchanging {
    fn key(&self, slice: usize) -> String {
        format!("{}.{slice}", self.pipeline)
    }

    /// Publishes what changed, reads every slice's, and sets each run's floor.
    fn round(&mut self) {
        if !self.connection.connected() {
            return; // the runs keep their floors: they can only have been too low
        }
        // Not the stage slice's (the last, past the input's): its watermark follows the others'.
        let runs: Vec<(usize, Arc<PipelineControl>)> = (self.runs.lock().expect("runs lock"))
            .iter()
            .filter(|(slice, _)| **slice < self.slices)
            .map(|(slice, control)| (*slice, control.clone()))
            .collect();
        self.written
            .retain(|slice, _| runs.iter().any(|(s, _)| s == slice));
        for (slice, control) in &runs {
            let shared = &control.shared_watermark;
            let published = Published::of(shared.local(), shared.clock());
            // Written again now and then, whatever the cache says: a former owner's late write
            // cannot stand for long.
            let fresh = !self.rounds.is_multiple_of(REWRITE_EVERY);
            if fresh && self.written.get(slice) == Some(&published) {
                continue;
            }
            let value = serde_json::to_vec(&published).expect("serialises");
            let put = self.bucket.put(self.key(*slice), value.into());
            match self.connection.block_on(super::timed(put)) {
                Ok(Ok(_)) => {
                    self.written.insert(*slice, published);
                }
                _ => {
                    warn!(pipeline = %self.pipeline, slice, "could not publish a slice's watermark")
                }
            }
        }
        self.rounds += 1;
        let Some(all) = self.read_all() else {
            return;
        };
        let clock = all
            .iter()
            .flatten()
            .filter_map(|published| published.clock)
            .max();
        for (slice, control) in &runs {
            control.shared_watermark.set_floor(floor(&all, *slice));
            if let Some(clock) = clock {
                control.shared_watermark.set_shared_clock(clock);
            }
        }
    }

    /// Every slice's published watermark (`None` for a slice never heard of), or `None` if
    /// the bucket could not be read.
    fn read_all(&self) -> Option<Vec<Option<Published>>> {
        let mut all = Vec::with_capacity(self.slices);
        for slice in 0..self.slices {
            let got = self.bucket.get(self.key(slice));
            match self.connection.block_on(super::timed(got)) {
                Ok(Ok(value)) => {
                    all.push(value.and_then(|bytes| serde_json::from_slice(&bytes).ok()));
                }
                _ => return None,
            }
        }
        Some(all)
    }
}

/// The floor under slice `own`: the lowest watermark the other slices published (one never
/// heard of: minus infinity; an idle one: none).
fn floor(all: &[Option<Published>], own: usize) -> Millis {
    (all.iter().enumerate())
        .filter(|(slice, _)| *slice != own)
        .filter_map(|(_, published)| match published {
            None => Some(MINUS_INFINITY),
            Some(published) => published.watermark,
        })
        .min()
        .unwrap_or(PLUS_INFINITY)
}

/// Forgets what the slices of `pipeline` published (it is withdrawn).
pub(super) fn forget(connection: &Connection, pipeline: &str, slices: usize) -> Result<()> {
    let keys: Vec<String> = (0..slices)
        .map(|slice| format!("{pipeline}.{slice}"))
        .collect();
    connection.purge(WATERMARKS_BUCKET, Duration::ZERO, &keys)
}

/// What each slice of `pipeline` last published, for `weir cluster status`: by slice, its
/// partition's watermark (ms) or `"idle"`; a slice never heard of is left out.
pub(super) fn published(
    connection: &Connection,
    pipeline: &str,
    slices: usize,
) -> Result<serde_json::Map<String, serde_json::Value>> {
    let bucket = connection.bucket(WATERMARKS_BUCKET, Duration::ZERO)?;
    let mut out = serde_json::Map::new();
    for slice in 0..slices {
        let got = connection.block_on(super::timed(bucket.get(format!("{pipeline}.{slice}"))));
        let Ok(Ok(Some(bytes))) = got else {
            continue;
        };
        let value = match serde_json::from_slice::<Published>(&bytes) {
            Ok(Published {
                watermark: Some(watermark),
                ..
            }) => watermark.into(),
            Ok(_) => "idle".into(),
            Err(_) => continue,
        };
        out.insert(slice.to_string(), value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_is_the_lowest_other_slice_an_unheard_one_holds_all_an_idle_one_none() {
        let mark = |watermark| Some(Published::of(Some(watermark), None));
        let idle = Some(Published::of(None, Some(5)));
        assert_eq!(floor(&[mark(5), mark(9), mark(7)], 0), 7);
        assert_eq!(floor(&[mark(5), mark(9), mark(7)], 2), 5);
        assert_eq!(floor(&[mark(5), None, mark(7)], 0), MINUS_INFINITY);
        assert_eq!(floor(&[mark(5), idle, mark(7)], 0), 7);
        assert_eq!(floor(&[mark(5), idle, idle], 0), PLUS_INFINITY);
        assert_eq!(
            floor(&[mark(5)], 0),
            PLUS_INFINITY,
            "alone: nothing under it"
        );
        for published in [Published::of(None, Some(7)), Published::of(Some(42), None)] {
            let text = serde_json::to_string(&published).unwrap();
            assert_eq!(serde_json::from_str::<Published>(&text).unwrap(), published);
        }
    }
}
