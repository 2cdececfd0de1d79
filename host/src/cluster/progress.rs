//! How far each slice of a shared pipeline has got, for `weir cluster status` and `weir serve`:
//! every [`REPORT_EVERY`] a worker writes, for each slice it runs, a [`Progress`] (who runs it,
//! the stream sequence read, events read, events per second and the run's counters by version)
//! to the key-value bucket `weir-progress` (`<pipeline>.<slice>`), whose entries expire
//! [`FORGET`] after their last write, so a slice nobody runs drops out. The status works out each slice's lag itself, as
//! the stream sequences between what it read and the last message on its subjects now: a
//! worker that hangs shows a lag that grows, not the last one it reported.
//!
//! Depends on `pipeline` (a run's live figures, through the runs `watermarks.rs` keeps),
//! `rollout` (its counters), `periodic.rs` and the cluster's connection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tracing::warn;

use super::periodic::Periodic;
use super::watermarks::Runs;
use super::{Connection, Result};
use crate::rollout::CounterSnapshot;

/// The key-value bucket of the slices' progress.
const PROGRESS_BUCKET: &str = "weir-progress";
/// How often a worker reports.
pub const REPORT_EVERY: Duration = Duration::from_secs(1);
/// How long a report stands without being written again.
const FORGET: Duration = Duration::from_secs(30);

/// What a worker says of a slice it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// The worker running it.
    pub worker: String,
    /// The last stream sequence read.
    pub read: u64,
    /// Events read over the slice's life.
    pub events: u64,
    /// Events read per second over the last report's interval.
    pub events_per_second: f64,
    /// The run's counters by version (calls, errors, traps, shadow comparisons...), since it
    /// started on this worker.
    #[serde(default)]
    pub versions: BTreeMap<String, CounterSnapshot>,
}

/// A worker's report of its slices' progress.
pub(super) struct Reporter {
    _thread: Periodic,
}

impl Reporter {
    /// Starts reporting the progress of `runs`, slices of `pipeline`, as worker `worker`.
    pub(super) fn start(
        connection: Arc<Connection>,
        pipeline: &str,
        worker: &str,
        runs: Runs,
    ) -> Result<Reporter> {
        let bucket = connection.bucket(PROGRESS_BUCKET, FORGET)?;
        let (pipeline, worker) = (pipeline.to_owned(), worker.to_owned());
        let mut last: BTreeMap<usize, (u64, Instant)> = BTreeMap::new();
        let round = move || {
            if !connection.connected() {
                return;
            }
            let runs: Vec<_> = (runs.lock().expect("runs lock").iter())
                .map(|(slice, control)| (*slice, control.clone()))
                .collect();
            last.retain(|slice, _| runs.iter().any(|(s, _)| s == slice));
            for (slice, control) in runs {
                let stats = &control.stats;
                let events = stats.events_in.load(Ordering::Relaxed);
                let now = Instant::now();
                let (before, then) = last.insert(slice, (events, now)).unwrap_or((events, now));
                let seconds = now.duration_since(then).as_secs_f64();
                let progress = Progress {
                    worker: worker.clone(),
                    read: stats.input_offset.load(Ordering::Relaxed),
                    events,
                    events_per_second: if seconds > 0.0 {
                        (events.saturating_sub(before) as f64 / seconds).round()
                    } else {
                        0.0
                    },
                    versions: control.counters.snapshot().into_iter().collect(),
                };
                let value = serde_json::to_vec(&progress).expect("serialises");
                let put = bucket.put(format!("{pipeline}.{slice}"), value.into());
                if !matches!(connection.block_on(super::timed(put)), Ok(Ok(_))) {
                    warn!(pipeline = %pipeline, slice, "could not report a slice's progress");
                }
            }
        };
        let thread = Periodic::start("weir-progress", REPORT_EVERY, round).map_err(|source| {
            super::ClusterError::Io {
                path: std::path::PathBuf::from("progress report"),
                source,
            }
        })?;
        Ok(Reporter { _thread: thread })
    }
}

/// Forgets what was reported of the slices of `pipeline` (it is withdrawn).
pub(super) fn forget(connection: &Connection, pipeline: &str, slices: usize) -> Result<()> {
    let keys: Vec<String> = (0..slices)
        .map(|slice| format!("{pipeline}.{slice}"))
        .collect();
    connection.purge(PROGRESS_BUCKET, FORGET, &keys)
}

/// What was last reported of each slice of `pipeline` cut into `slices` (a slice nobody has
/// reported for [`FORGET`] is left out).
pub(super) fn reported(
    connection: &Connection,
    pipeline: &str,
    slices: usize,
) -> Result<BTreeMap<usize, Progress>> {
    let bucket = connection.bucket(PROGRESS_BUCKET, FORGET)?;
    let mut out = BTreeMap::new();
    for slice in 0..slices {
        let got = connection.block_on(super::timed(bucket.get(format!("{pipeline}.{slice}"))));
        if let Ok(Ok(Some(bytes))) = got
            && let Ok(progress) = serde_json::from_slice::<Progress>(&bytes)
        {
            out.insert(slice, progress);
        }
    }
    Ok(out)
}

/// What was last reported of slice `slice` of `pipeline`, with the report's revision in the
/// bucket (a later report has a higher one); `None` if nothing stands or the server does not
/// answer now.
pub(super) fn latest(
    connection: &Connection,
    pipeline: &str,
    slice: usize,
) -> Option<(u64, Progress)> {
    let bucket = connection.bucket(PROGRESS_BUCKET, FORGET).ok()?;
    let key = format!("{pipeline}.{slice}");
    let entry = connection
        .block_on(super::timed(bucket.entry(key)))
        .ok()?
        .ok()??;
    if entry.operation != async_nats::jetstream::kv::Operation::Put {
        return None;
    }
    let progress = serde_json::from_slice::<Progress>(&entry.value).ok()?;
    Some((entry.revision, progress))
}

/// The counters of every slice in `reported`, summed by version.
pub(super) fn summed(reported: &BTreeMap<usize, Progress>) -> BTreeMap<String, CounterSnapshot> {
    let mut sum: BTreeMap<String, CounterSnapshot> = BTreeMap::new();
    for progress in reported.values() {
        for (version, counters) in &progress.versions {
            *sum.entry(version.clone()).or_default() += *counters;
        }
    }
    sum
}

/// The last sequence of `stream` on `subject` (wildcards allowed): `None` if the server says it
/// holds no message there, an error if it does not say.
pub(super) fn last_sequence_on(
    connection: &Connection,
    stream: &str,
    subject: &str,
) -> Result<Option<u64>> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind;
    let what = format!("the last message of stream {stream} on {subject}");
    let fail = |e: super::NatsFailure| connection.error(&what, e);
    connection.block_on(async {
        let stream = super::timed(connection.jetstream.get_stream(stream))
            .await
            .map_err(|e| fail(e.into()))?
            .map_err(|e| fail(super::NatsFailure::client(e)))?;
        match super::timed(stream.get_last_raw_message_by_subject(subject)).await {
            Ok(Ok(message)) => Ok(Some(message.sequence)),
            Ok(Err(e)) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Ok(Err(e)) => Err(fail(super::NatsFailure::client(e))),
            Err(elapsed) => Err(fail(elapsed.into())),
        }
    })
}

/// The last sequence of `stream` on any of `subjects` (wildcards and all; every subject if
/// there are none), or `None` if the server does not say (no such stream, no message).
pub(super) fn last_sequence(
    connection: &Connection,
    stream: &str,
    subjects: &[String],
) -> Option<u64> {
    let everything = [">".to_owned()];
    let subjects = if subjects.is_empty() {
        &everything[..]
    } else {
        subjects
    };
    connection.block_on(async {
        let stream = super::timed(connection.jetstream.get_stream(stream))
            .await
            .ok()?
            .ok()?;
        let mut last = None;
        for subject in subjects {
            let message = super::timed(stream.get_last_raw_message_by_subject(subject)).await;
            if let Ok(Ok(message)) = message {
                last = last.max(Some(message.sequence));
            }
        }
        last
    })
}
