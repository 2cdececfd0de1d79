//! Replays: "what would version 2 have said for these keys?" A pipeline's recorded input (its
//! ingest log from a savepoint's offset, or from the start, to what is committed when the call
//! comes) runs through two versions of its aggregate, one after the other, each in a sandbox of
//! its own (a copy of the savepoint, or empty state, in a directory that is removed afterwards;
//! no metric series, one shard). The live pipeline is not touched: its log is only read (and not
//! truncated meanwhile), its state and output not at all.
//!
//! Every key's events run, so each sandbox's watermark is the live one's and a window closes
//! where it closed live; the answer shows only the keys asked for (or a deterministic sample),
//! and the windows within the time range. Like the live pipeline, a replay ends where its input
//! ends without closing the windows still open there.
//!
//! Depends on `checkpoint`, `names`, `operator`, `pipeline`, `source`, `spec`, `state` and `time`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::Slot;
use super::savepoints::Hold;
use crate::operator::{ComponentKind, Registry};
use crate::pipeline::{PipelineControl, RunOptions};
use crate::serve::RequestError;
use crate::source::IngestGate;
use crate::spec::{PipelineSpec, Sink, SourceSpec, StateSpec};
use crate::time::Millis;

/// The most keys a replay names or samples.
pub const MAX_REPLAY_KEYS: usize = 1_000;
/// The most rows a replay answers with (the rest are counted, not shown).
pub const MAX_REPLAY_ROWS: usize = 10_000;
/// The most bytes of ingest log one replay reads.
pub const MAX_REPLAY_BYTES: u64 = 1 << 30;
/// The most messages of a NATS stream one replay reads.
pub const MAX_REPLAY_MESSAGES: u64 = 10_000_000;
/// How long one version's run may take.
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// What a replay compares (`POST /v1/pipelines/{name}/replay`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// The two versions, as `[a, b]`.
    pub versions: [String; 2],
    /// The keys to show.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Or: how many keys to show, chosen deterministically among those with results.
    pub sample: Option<usize>,
    /// Only windows starting at or after this time (ms).
    pub from: Option<Millis>,
    /// Only windows ending at or before this time (ms).
    pub to: Option<Millis>,
    /// Start from this savepoint's state and input offset (default: empty, from the start of
    /// the log, which must still be whole).
    pub savepoint: Option<String>,
}

impl ReplayRequest {
    /// Checks the request on its own (names, counts, the range).
    fn check(&self) -> Result<(), RequestError> {
        let invalid = |message: String| Err(RequestError::Invalid(message));
        for version in &self.versions {
            crate::names::check("operator version", version)?;
        }
        if let Some(savepoint) = &self.savepoint {
            crate::names::check("savepoint name", savepoint)?;
        }
        match (self.keys.len(), self.sample) {
            (0, None) => {
                return invalid("name the \"keys\" to replay, or a \"sample\" size".into());
            }
            (n, Some(_)) if n > 0 => {
                return invalid("give \"keys\" or \"sample\", not both".into());
            }
            (_, Some(n)) if n == 0 || n > MAX_REPLAY_KEYS => {
                return invalid(format!("\"sample\" is 1 to {MAX_REPLAY_KEYS}"));
            }
            (n, _) if n > MAX_REPLAY_KEYS => {
                return invalid(format!("at most {MAX_REPLAY_KEYS} keys per replay"));
            }
            _ => {}
        }
        if let Some(key) = (self.keys.iter()).find(|k| k.is_empty() || k.len() > 256) {
            return invalid(format!(
                "a key is 1 to 256 bytes; {} bytes given",
                key.len()
            ));
        }
        if let (Some(from), Some(to)) = (self.from, self.to)
            && from >= to
        {
            return invalid(format!("\"from\" ({from}) must be before \"to\" ({to})"));
        }
        Ok(())
    }
}

/// One window result as a replay compares it.
type WindowId = (String, Millis, Millis);

/// Removes the sandbox when the replay ends, however it ends.
pub(super) struct Sandbox(pub(super) PathBuf);

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The prefix of a replay's sandbox, which lives beside the pipelines' directories (not inside
/// its pipeline's, which a delete removes while the replay may still write): not a valid
/// pipeline name, so the server removes it when it starts.
pub const SANDBOX_PREFIX: &str = ".replay-";

/// Removes the sandboxes a replay left in pipeline directory `dir` when the server died during
/// it (where an earlier Weir made them).
pub(super) fn remove_leftover_sandboxes(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with("replay-") {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// One replay runs at a time in a server: each takes a core while it runs.
static REPLAYING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The turn of the one replay running.
pub(super) struct Turn;

impl Turn {
    pub(super) fn take() -> Result<Turn, RequestError> {
        REPLAYING
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| Turn)
            .map_err(|_| {
                RequestError::Busy(
                    "another replay or verification is running (one at a time); retry after it"
                        .into(),
                )
            })
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        REPLAYING.store(false, Ordering::Release);
    }
}

impl Slot {
    /// Runs a replay (see the module documentation) and returns its answer.
    pub fn replay(
        &self,
        request: &ReplayRequest,
        registry: &Registry,
    ) -> Result<serde_json::Value, RequestError> {
        request.check()?;
        let _turn = Turn::take()?;
        let spec = self.with_managed(|managed| Ok(managed.spec.clone()))?;
        let operator = replayable(&spec)?;
        let mut spec = spec;
        // A topic is read to the offsets of the live pipeline's last checkpoint, read once.
        let until = match &mut spec.source {
            SourceSpec::Kafka(kafka) => {
                let until = self.kafka_checkpointed()?;
                kafka.until = Some(until.clone());
                Some(until)
            }
            _ => None,
        };
        for version in &request.versions {
            let known = registry
                .get(&operator, version)
                .is_some_and(|info| info.world == ComponentKind::Aggregate.world());
            if !known {
                return Err(RequestError::NotFound(format!(
                    "aggregate {operator}@{version} is not in the registry"
                )));
            }
        }
        let _hold = Hold::new(self);
        let (start, end) = self.replayed_input(request, until.as_ref())?;
        let sandbox = Sandbox(self.sandbox_dir()?);
        let mut outputs = Vec::with_capacity(2);
        // A savepoint of a pipeline on workers: each slice replayed to its own end.
        let slice_ends = match &request.savepoint {
            Some(name) if !self.find_savepoint(name)?.slices.is_empty() => {
                Some((name, self.slice_ends(&spec, name, end)?))
            }
            _ => None,
        };
        for (index, version) in request.versions.iter().enumerate() {
            let dir = sandbox.0.join(index.to_string());
            if let Some((savepoint, ends)) = &slice_ends {
                let sandbox = (dir.as_path(), version.as_str(), registry);
                outputs.push(self.replay_slices(&spec, sandbox, (request, savepoint), ends)?);
                continue;
            }
            let spec = sandboxed(&spec, &dir, version, registry, end)?;
            if let Some(savepoint) = &request.savepoint {
                let data = match &spec.state {
                    StateSpec::Redb(data) => data.clone(),
                    StateSpec::Memory => unreachable!("sandboxes keep their state in redb"),
                };
                crate::checkpoint::fork_savepoint(&self.data_dir()?, savepoint, &data, &spec.name)?;
            }
            run_to(&spec, end, RunOptions::default(), || self.is_deleted())?;
            outputs.push(dir.join("results.jsonl"));
        }
        let keys = chosen_keys(request, &outputs)?;
        let outputs = (outputs.iter())
            .map(|path| read_results(path, &keys))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(compare(request, &keys, &outputs, start, end))
    }

    /// Where the replay's input starts and ends: for an ingest log, byte offsets (to what is
    /// committed now); for a NATS stream, stream sequences (to the last one the live pipeline
    /// read); for a Kafka topic, offsets summed over the partitions (to `kafka_until`, the live
    /// pipeline's last checkpoint). From the savepoint's position, or from the start.
    fn replayed_input(
        &self,
        request: &ReplayRequest,
        kafka_until: Option<&BTreeMap<i32, i64>>,
    ) -> Result<(u64, u64), RequestError> {
        let start = match &request.savepoint {
            Some(name) => Some(self.savepoint_offset(name)?),
            None => None,
        };
        if let Some(until) = kafka_until {
            // Offsets summed over the partitions, to the live pipeline's last checkpoint.
            let end: u64 = until.values().map(|&o| o.max(0) as u64).sum();
            let start = start.unwrap_or(0);
            if end.saturating_sub(start) > MAX_REPLAY_MESSAGES {
                return Err(RequestError::TooLarge(format!(
                    "the topic from the savepoint holds {} records to its last checkpoint, more \
                     than a replay reads ({MAX_REPLAY_MESSAGES}); replay from a later savepoint",
                    end - start
                )));
            }
            return Ok((start, end));
        }
        if let Some(source) = self.nats_source() {
            // On workers: what the stream holds now (each slice has read its own part of it).
            let end = match self.on_workers()? {
                true => super::on_workers::stream_end(&source)?,
                false => self.input_read(),
            };
            let start = start.unwrap_or(0);
            if end.saturating_sub(start) > MAX_REPLAY_MESSAGES {
                return Err(RequestError::TooLarge(format!(
                    "the stream from sequence {start} holds {} messages, more than a replay \
                     reads ({MAX_REPLAY_MESSAGES}); replay from a later savepoint",
                    end - start
                )));
            }
            return Ok((start, end));
        }
        let end = self.ingest_log()?.gate().committed();
        let start = match start {
            Some(start) => start,
            None => self.whole_log()?,
        };
        if end.saturating_sub(start) > MAX_REPLAY_BYTES {
            return Err(RequestError::TooLarge(format!(
                "the log from offset {start} holds {} bytes, more than a replay reads \
                 ({MAX_REPLAY_BYTES}); replay from a later savepoint",
                end - start
            )));
        }
        Ok((start, end))
    }

    /// Each partition's next offset at the live pipeline's last checkpoint: where a replay of a
    /// Kafka topic stops.
    /// On workers: at each slice's last uploaded checkpoint.
    pub(super) fn kafka_checkpointed(&self) -> Result<BTreeMap<i32, i64>, RequestError> {
        if self.on_workers()? {
            let spec = self.with_managed(|managed| Ok(managed.spec.clone()))?;
            return super::on_workers::kafka_checkpointed(&spec);
        }
        // The running pipeline's (its store is open), else the store's.
        let running = (self.lock().control.as_ref())
            .and_then(|control| control.stats.checkpointed_position.lock().ok()?.clone());
        let stored = || {
            let state = self.data_dir().ok()?.join(crate::state::STATE_FILE);
            let bytes = crate::state::RedbStore::read_manifest_of(&state).ok()??;
            let manifest: crate::checkpoint::Manifest = serde_json::from_slice(&bytes).ok()?;
            Some(manifest.source)
        };
        let position = running.or_else(stored).ok_or_else(|| {
            RequestError::Conflict(format!(
                "pipeline {:?} has no checkpoint yet: a replay of a Kafka topic reads to the \
                 live pipeline's last checkpoint",
                self.name
            ))
        })?;
        Ok((position.files.iter())
            .map(|part| (part.rng.unwrap_or(0) as i32, part.offset as i64))
            .collect())
    }

    /// A new sandbox directory for a replay of this pipeline, beside the pipelines.
    pub(super) fn sandbox_dir(&self) -> Result<PathBuf, RequestError> {
        let pipelines = self
            .dir
            .parent()
            .ok_or_else(|| RequestError::Internal("a pipeline's directory has no parent".into()))?;
        Ok(pipelines.join(format!("{SANDBOX_PREFIX}{}-{}", self.name, sandbox_nonce())))
    }

    /// The input offset of savepoint `name` (of a pipeline on workers, the lowest of its
    /// slices'; of one reading a Kafka topic, their sum, as the topic's offsets are summed).
    fn savepoint_offset(&self, name: &str) -> Result<u64, RequestError> {
        let saved = self.find_savepoint(name)?;
        if saved.slices.is_empty() {
            return Ok(saved.manifest.source.offset);
        }
        // The slices that had read something (the others start at the stream's start).
        let offsets = saved.slices.iter().flatten().map(|m| m.source.offset);
        let kafka = self.with_managed(|m| Ok(matches!(m.spec.source, SourceSpec::Kafka(_))))?;
        match kafka {
            true => Ok(offsets.sum()),
            false => Ok(offsets.min().unwrap_or(0)),
        }
    }

    /// Offset 0, if the log still starts there.
    pub(super) fn whole_log(&self) -> Result<u64, RequestError> {
        let log = self.dir.join(super::INGEST_FILE);
        let first = crate::source::segments(&log).map_err(RequestError::from_io)?;
        match first.first() {
            Some((0, _)) | None => Ok(0),
            Some((base, _)) => Err(RequestError::Conflict(format!(
                "the ingest log before offset {base} was deleted after a checkpoint, so a replay \
                 from empty state cannot see it: replay from a savepoint (a savepoint keeps the \
                 log after it)"
            ))),
        }
    }
}

/// The name of the aggregate a replay compares versions of; refused for pipelines whose results
/// are not one keyed aggregate's.
pub(super) fn replayable(spec: &PipelineSpec) -> Result<String, RequestError> {
    match &spec.aggregate {
        Some(op)
            if spec.stages.is_empty()
                && spec.join.is_none()
                && !spec.global
                && !spec.pre_aggregate =>
        {
            Ok(op.name.clone())
        }
        _ => Err(RequestError::Conflict(
            "a replay compares the versions of a pipeline's one keyed aggregate; this pipeline \
             has none, or stages, a join or a global aggregate after it"
                .into(),
        )),
    }
}

pub(super) fn sandbox_nonce() -> String {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The pipeline's spec for a sandbox in `dir` running `version`: state in `dir/data`, results
/// in `dir/results.jsonl`, late events and dead letters discarded, one shard, no checkpoints; a
/// NATS stream read to sequence `end` and no further.
pub(super) fn sandboxed(
    spec: &PipelineSpec,
    dir: &Path,
    version: &str,
    registry: &Registry,
    end: u64,
) -> Result<PipelineSpec, RequestError> {
    let mut spec = spec.clone();
    if let SourceSpec::Nats(nats) = &mut spec.source {
        nats.until = Some(end);
    }
    let op = spec.aggregate.as_mut().expect("checked: replayable");
    op.code = registry.code(&op.name, version)?;
    op.version = version.to_owned();
    spec.state = StateSpec::Redb(dir.join("data"));
    spec.sinks.results = Sink::File(dir.join("results.jsonl"));
    spec.sinks.late = Sink::Discard;
    spec.sinks.dead_letters = Sink::Discard;
    spec.shards = Some(1);
    spec.checkpoint_interval = None;
    std::fs::create_dir_all(dir.join("data")).map_err(RequestError::from_io)?;
    crate::fsutil::crash_point("sandbox-made");
    Ok(spec)
}

/// Runs `spec` (an ingest log, a NATS stream or a Kafka topic) until it has read its input to
/// `end`, then
/// stops it as a live pipeline stops: windows still open stay open. Stops early, refused, once
/// `deleted` says the pipeline replayed is being deleted.
pub(super) fn run_to(
    spec: &PipelineSpec,
    end: u64,
    options: RunOptions,
    deleted: impl Fn() -> bool,
) -> Result<(), RequestError> {
    let control = PipelineControl::sandboxed(&spec.name);
    let control = Arc::new(match spec.source {
        SourceSpec::Nats(_) | SourceSpec::Kafka(_) => control,
        _ => control.with_ingest_gate(IngestGate::fixed(end)),
    });
    let run = {
        let (spec, control) = (spec.clone(), control.clone());
        std::thread::Builder::new()
            .name(format!("weir-replay-{}", spec.name))
            .spawn(move || crate::pipeline::run_controlled(&spec, options, Some(control)))
            .map_err(RequestError::from_io)?
    };
    let began = Instant::now();
    let mut cancelled = false;
    while !run.is_finished() {
        let read = control.stats.input_offset.load(Ordering::Relaxed);
        cancelled |= deleted();
        if read >= end || began.elapsed() > RUN_LIMIT || cancelled {
            control.stop();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let outcome = run
        .join()
        .map_err(|_| RequestError::Internal("a replay run panicked".into()))?;
    // A run that ended on its own because the log went with the pipeline was cancelled too.
    cancelled |= deleted();
    if cancelled {
        return Err(RequestError::Conflict(
            "the pipeline was deleted while it was replayed; the replay was stopped".into(),
        ));
    }
    if began.elapsed() > RUN_LIMIT {
        return Err(RequestError::Busy(format!(
            "a replay run took longer than {} s and was stopped; replay fewer events (a later \
             savepoint)",
            RUN_LIMIT.as_secs()
        )));
    }
    outcome
        .map(|_| ())
        .map_err(|e| RequestError::Conflict(format!("the replay failed: {e}")))
}

/// Calls `f` with every record of a sandbox's results file, read a line at a time (a replay of
/// much input writes many results: only what the answer needs is kept).
fn for_each_result(path: &Path, mut f: impl FnMut(serde_json::Value)) -> Result<(), RequestError> {
    use std::io::BufRead;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(RequestError::from_io(e)),
    };
    for line in std::io::BufReader::new(file).lines() {
        let line = line.map_err(RequestError::from_io)?;
        if line.trim().is_empty() {
            continue;
        }
        let record = serde_json::from_str(&line)
            .map_err(|e| RequestError::Internal(format!("a replay result is not JSON: {e}")))?;
        f(record);
    }
    Ok(())
}

/// The results of `keys` in a sandbox's results file: each window's values in the order they
/// were written.
fn read_results(
    path: &Path,
    keys: &BTreeSet<String>,
) -> Result<BTreeMap<WindowId, Vec<serde_json::Value>>, RequestError> {
    let mut windows: BTreeMap<WindowId, Vec<serde_json::Value>> = BTreeMap::new();
    for_each_result(path, |record| {
        let key = record["key"].as_str().unwrap_or_default();
        if !keys.contains(key) {
            return;
        }
        let id = (
            key.to_owned(),
            record["window_start"].as_i64().unwrap_or_default(),
            record["window_end"].as_i64().unwrap_or_default(),
        );
        let value = match record["kind"].as_str() {
            Some("retract") => serde_json::json!({"retract": record["value"]}),
            _ => record["value"].clone(),
        };
        windows.entry(id).or_default().push(value);
    })?;
    Ok(windows)
}

/// The keys the answer shows: those asked for, or a sample of those with results in either
/// file, chosen by key group then key (deterministic, and spread over the key space).
fn chosen_keys(
    request: &ReplayRequest,
    results: &[PathBuf],
) -> Result<BTreeSet<String>, RequestError> {
    let Some(sample) = request.sample else {
        return Ok(request.keys.iter().cloned().collect());
    };
    let mut all: BTreeSet<(u16, String)> = BTreeSet::new();
    for path in results {
        for_each_result(path, |record| {
            if let Some(key) = record["key"].as_str() {
                all.insert((crate::state::key_group(key), key.to_owned()));
            }
        })?;
    }
    Ok(all.into_iter().take(sample).map(|(_, key)| key).collect())
}

/// The answer: every window of the chosen keys within the range, both versions' results side
/// by side, the differing ones marked.
fn compare(
    request: &ReplayRequest,
    keys: &BTreeSet<String>,
    outputs: &[BTreeMap<WindowId, Vec<serde_json::Value>>],
    start: u64,
    end: u64,
) -> serde_json::Value {
    let (a, b) = (&outputs[0], &outputs[1]);
    let in_range = |(key, window_start, window_end): &WindowId| {
        keys.contains(key)
            && request.from.is_none_or(|from| *window_start >= from)
            && request.to.is_none_or(|to| *window_end <= to)
    };
    let windows: BTreeSet<&WindowId> = a.keys().chain(b.keys()).filter(|w| in_range(w)).collect();
    let (mut rows, mut differing) = (Vec::new(), 0usize);
    for window in &windows {
        let (left, right) = (a.get(*window), b.get(*window));
        let same = left == right;
        differing += usize::from(!same);
        if rows.len() < MAX_REPLAY_ROWS {
            rows.push(serde_json::json!({
                "key": window.0,
                "window_start": window.1,
                "window_end": window.2,
                "a": side(left),
                "b": side(right),
                "same": same,
            }));
        }
    }
    serde_json::json!({
        "versions": request.versions,
        "keys": keys,
        "savepoint": request.savepoint,
        "input": {"from_offset": start, "to_offset": end},
        "windows": windows.len(),
        "differing": differing,
        "rows": rows,
        "truncated": windows.len() > rows.len(),
    })
}

/// One version's results for a window: its last value (what is in force), and every value when
/// it was updated.
fn side(values: Option<&Vec<serde_json::Value>>) -> serde_json::Value {
    match values.map(Vec::as_slice) {
        None | Some([]) => serde_json::Value::Null,
        Some([only]) => only.clone(),
        Some(all) => serde_json::json!({"updates": all}),
    }
}
