//! The collector: receives each batch's parts from the router and the shards, writes complete
//! batches in canonical order to the sinks, and commits checkpoints when a barrier's parts are
//! all in (every shard's changes and the router's position, after every earlier batch's
//! output): sinks synced, then one redb transaction, then the marker file, then each shard is
//! told that the checkpoint is durable (they went on with later batches meanwhile; told, they
//! may evict clean state and take the next barrier). A pipeline with stages after its
//! aggregate runs them here, on each batch's results in canonical order, and checkpoints their
//! state with the shards'.
//!
//! Depends on `checkpoint`, `emit`, `event`, `operator` and `state`, and of `pipeline` on
//! `mod.rs` (its error), `control`, `messages`, `shard` (its snapshot) and `stages`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender};

use super::control::SavepointRequest;
use super::messages::{Part, Position, RoutingChange};
use super::stages::Stages;
use super::upstream::MarkPacer;
use super::{PipelineControl, PipelineError, Result, ResultLine, ShardSnapshot};
use crate::checkpoint::{Changes, CheckpointStats, Committer, SavepointError, SinkPositions};
use crate::emit::{
    OperatorLabel, ResultRecord, SinkWriter, dead_letter_record, event_record, late_record,
    result_records,
};
use crate::event::{DeadCause, DeadLetter};
use crate::operator::quota::StateDelta;
use crate::window::{Emission, LateEvent};

/// The three sinks.
pub(super) struct Sinks {
    pub results: SinkWriter,
    pub late: SinkWriter,
    pub dead_letters: SinkWriter,
    /// A slice of a pipeline whose stages another slice runs: its results go to that slice,
    /// as upstream records with marks of its watermark (see `upstream.rs`).
    pub upstream: Option<MarkPacer>,
}

/// What the collector needs to commit checkpoints and tell the shards after each.
pub(super) struct Checkpointer {
    pub committer: Committer,
    pub acks: Vec<SyncSender<()>>,
    pub stats: Vec<CheckpointStats>,
}

/// What the collector counted.
#[derive(Debug, Default)]
pub(super) struct Collected {
    pub traps: u64,
    pub checkpoints: Vec<CheckpointStats>,
}

/// Collects the run's parts until the router and the shards hang up. If writing fails, the run
/// stops at once; the savepoints that barriers still on their way carried go back to the
/// control, which answers them with the run's error when it ends (a full disk told apart).
pub(super) fn collect(
    parts: Receiver<(u64, Part)>,
    parts_per_batch: usize,
    label: &OperatorLabel,
    sinks: &mut Sinks,
    checkpointer: Option<Checkpointer>,
    stages: Option<Stages>,
    control: &PipelineControl,
) -> Result<Collected> {
    let mut pending: BTreeMap<u64, Vec<Part>> = BTreeMap::new();
    let collected = collect_parts(
        &parts,
        &mut pending,
        parts_per_batch,
        label,
        sinks,
        checkpointer,
        stages,
        control,
    );
    if collected.is_err() {
        // Nothing can be written any more: the router stops reading now rather than when its
        // next send fails (an idle input might never send one). The checkpointer, and with it
        // the shards' acknowledgements, is gone, so no shard waits for one: they end, and the
        // parts still coming are drained until they have.
        control.stop();
        let waiting = pending.into_values().flatten();
        for part in waiting.chain(parts.iter().map(|(_, part)| part)) {
            if let Part::Position(position) = part {
                control.give_back_savepoints(position.2);
            }
        }
    }
    collected
}

#[allow(clippy::too_many_arguments)]
fn collect_parts(
    parts: &Receiver<(u64, Part)>,
    pending: &mut BTreeMap<u64, Vec<Part>>,
    parts_per_batch: usize,
    label: &OperatorLabel,
    sinks: &mut Sinks,
    mut checkpointer: Option<Checkpointer>,
    mut stages: Option<Stages>,
    control: &PipelineControl,
) -> Result<Collected> {
    let mut next = 0u64;
    let mut collected = Collected::default();
    while let Ok((id, part)) = parts.recv() {
        if matches!(part, Part::Failed) {
            // The shard's error is what the run reports.
            return Err(PipelineError::Config("a shard failed".into()));
        }
        pending.entry(id).or_default().push(part);
        while pending
            .get(&next)
            .is_some_and(|p| p.len() == parts_per_batch)
        {
            let batch = pending.remove(&next).expect("a complete batch");
            next += 1;
            if batch.iter().any(|p| matches!(p, Part::Position(..))) {
                let checkpointer = checkpointer
                    .as_mut()
                    .expect("barriers are only sent when checkpointing");
                commit(checkpointer, batch, sinks, stages.as_mut(), control)?;
            } else {
                collected.traps += write_batch(batch, label, sinks, stages.as_mut(), control)?;
            }
            control.batch_done();
        }
    }
    sinks.results.flush()?;
    sinks.late.flush()?;
    sinks.dead_letters.flush()?;
    if let Some(checkpointer) = checkpointer {
        collected.checkpoints = checkpointer.stats;
    }
    Ok(collected)
}

/// Writes one batch's output in canonical order. Returns the batch's trap count.
fn write_batch(
    batch: Vec<Part>,
    label: &OperatorLabel,
    sinks: &mut Sinks,
    stages: Option<&mut Stages>,
    control: &PipelineControl,
) -> Result<u64> {
    let mut output = BatchOutput::of(batch);
    if let Some(stages) = stages {
        output.staged(stages)?;
    }
    let BatchOutput {
        emissions,
        mut events,
        mut late,
        mut dead,
        traps,
        advances,
        ..
    } = output;
    events.sort_by_key(|staged| staged.seq);
    late.sort_by_key(|l| l.seq);
    // Several events of one line (a NATS message of many) are ordered by what they say:
    // the shards' parts come in any order.
    dead.sort_by(|a, b| (a.line, &a.raw, &a.reason).cmp(&(b.line, &b.raw, &b.reason)));
    let kinds = match sinks.upstream.is_some() {
        true => write_upstream(&emissions, &advances, label, sinks)?,
        false => write_results(&emissions, &events, label, sinks, control)?,
    };
    for l in &late {
        sinks.late.write(&late_record(l))?;
    }
    for d in &dead {
        sinks.dead_letters.write(&dead_letter_record(d))?;
    }
    count_written(&kinds, &late, &dead, control);
    Ok(traps)
}

/// What a batch's parts carry, output: the emissions (in their order), the enriched events,
/// late events, dead letters, traps, and the router's idle advances and end of input.
struct BatchOutput {
    emissions: Vec<Emission>,
    events: Vec<crate::event::Staged>,
    late: Vec<LateEvent>,
    dead: Vec<DeadLetter>,
    traps: u64,
    advances: std::sync::Arc<Vec<(u64, crate::time::Millis)>>,
    end_of_input: bool,
}

impl BatchOutput {
    fn of(batch: Vec<Part>) -> BatchOutput {
        let mut output = BatchOutput {
            emissions: Vec::new(),
            events: Vec::new(),
            late: Vec::new(),
            dead: Vec::new(),
            traps: 0,
            advances: std::sync::Arc::default(),
            end_of_input: false,
        };
        for part in batch {
            output.add(part);
        }
        (output.emissions).sort_by(|a, b| a.order_key().cmp(&b.order_key()));
        output
    }

    fn add(&mut self, part: Part) {
        match part {
            Part::Router(router) => {
                self.dead.extend(router.dead);
                (self.advances, self.end_of_input) = (router.advances, router.end_of_input);
            }
            Part::Shard(output) => {
                self.late.extend(output.rejected.late);
                self.dead.extend(output.rejected.dead_letters);
                self.traps += output.rejected.traps;
                self.emissions.extend(output.engine.emissions);
                self.events.extend(output.events);
                self.late.extend(output.engine.late);
                self.dead.extend(output.engine.dead_letters);
                self.traps += output.engine.traps;
            }
            Part::Position(..) | Part::Snapshot(..) | Part::Failed => {
                unreachable!("checkpoint parts travel alone; a failure is never batched")
            }
        }
    }

    /// Runs the emissions through the stages: theirs replace them.
    fn staged(&mut self, stages: &mut Stages) -> Result<()> {
        let emissions = std::mem::take(&mut self.emissions);
        let staged = stages
            .process(emissions, &self.advances, self.end_of_input)
            .map_err(|error| PipelineError::Stage { error })?;
        self.emissions = staged.emissions;
        self.late.extend(staged.late);
        self.dead.extend(staged.dead_letters);
        self.traps += staged.traps;
        Ok(())
    }
}

/// Records written, by kind, for the metrics.
type Kinds = [(&'static str, u64); 5];

/// Writes the emissions' records and the enriched events to the results sink, and hands the
/// lines to subscribers once flushed (each with the byte offset where it ends in the results
/// file, its id for resuming: a subscriber that then reads the file finds every record it was
/// not sent). The records written, by kind.
fn write_results(
    emissions: &[Emission],
    events: &[crate::event::Staged],
    label: &OperatorLabel,
    sinks: &mut Sinks,
    control: &PipelineControl,
) -> Result<Kinds> {
    let tap = control.stream_results || control.results.receiver_count() > 0;
    let mut tapped: Vec<ResultLine> = Vec::new();
    let mut write_result = |record: ResultRecord<'_>| -> Result<()> {
        sinks.results.write(&record)?;
        if tap {
            // The line as written: serialised once.
            tapped.push((sinks.results.position(), sinks.results.last_line().into()));
        }
        Ok(())
    };
    let mut kinds: Kinds = [
        ("result", 0u64),
        ("update", 0),
        ("early", 0),
        ("retract", 0),
        ("event", 0),
    ];
    for emission in emissions {
        for record in result_records(emission, label) {
            if let Some(count) = kinds.iter_mut().find(|(kind, _)| record.kind() == *kind) {
                count.1 += 1;
            }
            write_result(record)?;
        }
    }
    kinds[4].1 = events.len() as u64;
    let mut previous = None;
    let mut n = 0;
    for staged in events {
        n = if previous == Some(staged.seq) {
            n + 1
        } else {
            0
        };
        previous = Some(staged.seq);
        write_result(event_record(staged, n, label))?;
    }
    if !tapped.is_empty() {
        sinks.results.flush()?;
        for line in tapped {
            let _ = control.results.send(line);
        }
    }
    Ok(kinds)
}

/// Writes the emissions of a slice whose stages another slice runs as upstream records, then
/// its watermark's mark if one is due (once every record before it is acknowledged).
fn write_upstream(
    emissions: &[Emission],
    advances: &[(u64, crate::time::Millis)],
    label: &OperatorLabel,
    sinks: &mut Sinks,
) -> Result<Kinds> {
    let pacer = sinks.upstream.as_mut().expect("a slice upstream of stages");
    let slice = pacer.slice;
    let mut written = 0;
    for (at, emission) in emissions.iter().enumerate() {
        let open = at + 1 < emissions.len();
        let record = super::upstream::record(&label.pipeline, slice, emission, open);
        sinks.results.write(&record)?;
        written += 1;
    }
    if let Some((_, watermark)) = advances.last() {
        pacer.advanced(*watermark);
    }
    write_mark(sinks, false)?;
    Ok([
        ("result", written),
        ("update", 0),
        ("early", 0),
        ("retract", 0),
        ("event", 0),
    ])
}

/// Writes a slice's mark if one is due (or, `now`, any pending one) after every record before
/// it is acknowledged.
fn write_mark(sinks: &mut Sinks, now: bool) -> Result<()> {
    let Some(mark) = sinks.upstream.as_mut().and_then(|pacer| pacer.due(now)) else {
        return Ok(());
    };
    sinks.results.flush()?;
    sinks.results.write(&mark)?;
    Ok(())
}

/// Counts what a batch wrote in the pipeline's figures and metrics.
fn count_written(
    kinds: &Kinds,
    late: &[LateEvent],
    dead: &[DeadLetter],
    control: &PipelineControl,
) {
    let results = kinds.iter().map(|(_, n)| n).sum::<u64>();
    let stats = &control.stats;
    stats.results_out.fetch_add(results, Ordering::Relaxed);
    let late_total = stats.late.fetch_add(late.len() as u64, Ordering::Relaxed) + late.len() as u64;
    stats
        .dead_letters
        .fetch_add(dead.len() as u64, Ordering::Relaxed);
    let mut causes: Vec<(DeadCause, u64)> = Vec::new();
    for d in dead {
        match causes.iter_mut().find(|(cause, _)| *cause == d.cause) {
            Some(count) => count.1 += 1,
            None => causes.push((d.cause, 1)),
        }
    }
    let events_in = stats.events_in.load(Ordering::Relaxed);
    (control.metrics).wrote(kinds, late.len() as u64, late_total, events_in, &causes);
}

fn commit(
    checkpointer: &mut Checkpointer,
    batch: Vec<Part>,
    sinks: &mut Sinks,
    stages: Option<&mut Stages>,
    control: &PipelineControl,
) -> Result<()> {
    let mut gathered = gather(batch);
    let savepoints = std::mem::take(&mut gathered.savepoints);
    let committed = commit_gathered(checkpointer, gathered, sinks, stages, control);
    match &committed {
        Ok(()) => take_savepoints(&checkpointer.committer, savepoints),
        Err(e) => {
            // Answered now: the run ends with this error, and they wait for nothing else.
            for request in savepoints {
                let _ = request.reply.send(Err(SavepointError::NotTaken {
                    reason: format!("its checkpoint failed: {e}"),
                    disk_full: e.is_disk_full(),
                }));
            }
        }
    }
    committed
}

/// Commits one checkpoint from what its barrier gathered (its savepoints are the caller's).
fn commit_gathered(
    checkpointer: &mut Checkpointer,
    gathered: Gathered,
    sinks: &mut Sinks,
    mut stages: Option<&mut Stages>,
    control: &PipelineControl,
) -> Result<()> {
    let Gathered {
        position,
        change,
        savepoints: _,
        mut changes,
        mut quota_written,
    } = gathered;
    if let Some(stages) = stages.as_deref_mut() {
        let snapshot = stages
            .checkpoint()
            .map_err(|error| PipelineError::Stage { error })?;
        add_snapshot(&mut changes, &mut quota_written, snapshot);
    }
    write_mark(sinks, true)?;
    let sink_positions = SinkPositions {
        results: sinks.results.sync()?,
        late: sinks.late.sync()?,
        dead_letters: sinks.dead_letters.sync()?,
    };
    let stats = checkpointer
        .committer
        .commit(&position, changes, sink_positions)?;
    let totals = checkpointer.committer.totals;
    if let Some(quota) = control.state() {
        quota.checkpointed(totals.scopes, totals.bytes, quota_written);
    }
    let state_file = checkpointer
        .committer
        .data_dir
        .join(crate::state::STATE_FILE);
    let state_bytes = std::fs::metadata(state_file).ok().map(|m| m.len());
    control
        .metrics
        .checkpointed(&stats, totals.scopes, state_bytes);
    (control.stats.checkpointed_offset).store(position.source.offset, Ordering::Relaxed);
    *(control.stats.checkpointed_position.lock()).expect("stats lock") =
        Some(position.source.clone());
    control
        .stats
        .state_keys
        .store(totals.scopes, Ordering::Relaxed);
    *control.stats.last_checkpoint.lock().expect("stats lock") = Some(stats.clone());
    if let Some(routing) = position.routing {
        control.set_applied(routing);
    }
    checkpointer.stats.push(stats);
    if let Some(stages) = stages {
        stages.committed();
        if let Some(change) = change {
            let shadow_log = control.shadow_log.clone();
            stages.route(
                &change.routing,
                change.candidate.as_ref(),
                &control.counters,
                shadow_log,
            )?;
        }
    }
    for ack in &checkpointer.acks {
        let _ = ack.send(());
    }
    Ok(())
}

/// Takes `requests`, the savepoints asked for before the barrier of the checkpoint just
/// committed, from it (after the shards were told: the copy is written on this thread).
fn take_savepoints(committer: &crate::checkpoint::Committer, requests: Vec<SavepointRequest>) {
    for request in requests {
        let outcome =
            crate::checkpoint::save_from(&committer.store, &committer.data_dir, &request.name);
        match &outcome {
            Ok(saved) => {
                tracing::info!(savepoint = %request.name, checkpoint = saved.manifest.id, bytes = saved.bytes, "savepoint taken")
            }
            Err(e) => tracing::warn!(savepoint = %request.name, error = %e, "savepoint failed"),
        }
        let _ = request.reply.send(outcome);
    }
}

/// A barrier's parts, gathered.
struct Gathered {
    /// The router's position.
    position: Position,
    /// The routing change that applies from it.
    change: Option<RoutingChange>,
    /// The savepoints it serves.
    savepoints: Vec<SavepointRequest>,
    /// The shards' changes.
    changes: Changes,
    /// What the shards' calls wrote before the barrier, for the state quota.
    quota_written: StateDelta,
}

/// Adds a shard's (or the stages') part of a checkpoint to what the checkpoint holds.
fn add_snapshot(changes: &mut Changes, quota_written: &mut StateDelta, snapshot: ShardSnapshot) {
    let ShardSnapshot {
        state,
        windows,
        hot,
        quota_written: written,
    } = snapshot;
    changes.state.extend(state);
    changes.windows.extend(windows);
    changes.hot += hot;
    *quota_written += written;
}

/// Gathers a barrier's parts: the router's position and the shards' changes.
fn gather(batch: Vec<Part>) -> Gathered {
    let mut position = None;
    let mut change = None;
    let mut savepoints = Vec::new();
    let mut changes = Changes::default();
    let mut quota_written = StateDelta::default();
    for part in batch {
        match part {
            Part::Position(barrier) => {
                let (p, c, s) = *barrier;
                (position, change, savepoints) = (Some(p), c, s);
            }
            Part::Snapshot(snapshot) => add_snapshot(&mut changes, &mut quota_written, snapshot),
            Part::Router(_) | Part::Shard(_) | Part::Failed => {
                unreachable!("checkpoint parts travel alone; a failure is never batched")
            }
        }
    }
    Gathered {
        position: position.expect("a barrier carries the router's position"),
        change,
        savepoints,
        changes,
        quota_written,
    }
}

#[cfg(test)]
mod tests {
    //! The collector's side of the barrier protocol: a barrier is committed only after every
    //! earlier batch is written, and the shards are told only after the commit and its marker.

    use std::sync::mpsc::{RecvTimeoutError, sync_channel};
    use std::time::{Duration, Instant};

    use super::super::messages::Position;

    use super::*;
    use crate::checkpoint::MARKER_FILE;
    use crate::pipeline::{ResolveError, ShardOutput};
    use crate::source::SourcePosition;
    use crate::spec::Sink;

    #[test]
    fn a_barrier_waits_for_earlier_batches_and_tells_the_shards_after_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let sink = |name: &str| SinkWriter::open(&Sink::File(dir.path().join(name)), None).unwrap();
        let mut sinks = Sinks {
            results: sink("results.jsonl"),
            late: sink("late.jsonl"),
            dead_letters: sink("dead.jsonl"),
            upstream: None,
        };
        let (ack_tx, ack) = sync_channel::<()>(1);
        let checkpointer = Checkpointer {
            committer: Committer {
                store: crate::state::RedbStore::open(dir.path()).unwrap(),
                data_dir: dir.path().to_owned(),
                pipeline: "p".into(),
                fingerprint: "f".into(),
                next_id: 1,
                totals: Default::default(),
                on_commit: None,
            },
            acks: vec![ack_tx],
            stats: Vec::new(),
        };
        let store = checkpointer.committer.store.clone();
        let (parts_tx, parts) = sync_channel::<(u64, Part)>(8);
        let collector = std::thread::spawn(move || {
            let control = PipelineControl::new(
                "p",
                Box::new(|_, v| Err(ResolveError::Unknown(v.to_owned()))),
                None,
            );
            let label = OperatorLabel {
                pipeline: "p".into(),
                name: "c".into(),
                version: "1".into(),
                changelog: false,
            };
            collect(
                parts,
                2,
                &label,
                &mut sinks,
                Some(checkpointer),
                None,
                &control,
            )
        });
        // The barrier (id 1) arrives before batch 0 is complete: it must wait.
        let position = Position {
            source: SourcePosition::default(),
            events: 0,
            watermark: 0,
            partitions: Vec::new(),
            finished: false,
            started: Instant::now(),
            routing: None,
        };
        parts_tx
            .send((1, Part::Position(Box::new((position, None, Vec::new())))))
            .unwrap();
        parts_tx
            .send((1, Part::Snapshot(ShardSnapshot::default())))
            .unwrap();
        let router = super::super::messages::RouterPart {
            dead: Vec::new(),
            advances: std::sync::Arc::default(),
            end_of_input: false,
        };
        parts_tx.send((0, Part::Router(router))).unwrap();
        assert!(matches!(
            ack.recv_timeout(Duration::from_millis(200)),
            Err(RecvTimeoutError::Timeout)
        ));
        assert!(
            store.manifest().unwrap().is_none(),
            "committed before batch 0"
        );
        parts_tx
            .send((0, Part::Shard(ShardOutput::default())))
            .unwrap();
        ack.recv_timeout(Duration::from_secs(5))
            .expect("the shards are told after the commit");
        assert!(
            store.manifest().unwrap().is_some(),
            "told before the commit"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(MARKER_FILE)).unwrap(),
            "1",
            "told before the marker"
        );
        drop(parts_tx);
        let collected = collector.join().unwrap().unwrap();
        assert_eq!(collected.checkpoints.len(), 1);
    }
}
