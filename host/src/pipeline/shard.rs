//! [`Shard`]: the single writer for the keys of its key groups. It owns those keys' state and
//! its own operator instances, pairs events (an interval join), runs the enrichment chain per
//! key, then the window engine.
//!
//! Depends on `event`, `operator`, `rollout`, `state`, `time` and `window`, and of `pipeline` on
//! `control`, `enrichment`, `interval_join`, `messages` and `outcome`.

use std::sync::mpsc::{Receiver, SyncSender};

use super::PipelineControl;
use super::enrichment::Enrichment;
use super::interval_join::IntervalJoin;
use super::messages::{Part, ShardMsg};
use super::outcome::{Rejects, ShardError};
use crate::event::{Share, Staged};
use crate::operator::{Limits, LoadError, Projection, VersionCode};
use crate::rollout::{CounterBook, Routing, ShadowLog, VersionedAggregate};
use crate::state::{Change, RowError, StateBackend, TableRow};
use crate::time::{MINUS_INFINITY, Millis, PLUS_INFINITY};
use crate::window::{Context, EngineOutput, Timeline, WindowEngine};

/// What a shard produced for one batch.
#[derive(Debug, Default)]
pub struct ShardOutput {
    /// The window engine's results, late events and operator dead letters.
    pub engine: EngineOutput,
    /// The interval join's and the enrichment chain's late events, dead letters and traps.
    pub rejected: Rejects,
    /// Enriched events (pipelines without an aggregate).
    pub events: Vec<Staged>,
    /// Batches the window engine is done with (this one, or earlier ones it carried), to be
    /// dropped on the router's thread (see [`run_thread`]).
    pub spent: Vec<Share>,
}

/// What a shard hands to a checkpoint.
#[derive(Debug, Default)]
pub struct ShardSnapshot {
    /// Changed state scopes.
    pub state: Vec<Change>,
    /// Changed window metadata.
    pub windows: Vec<Change>,
    /// Scopes held in memory.
    pub hot: usize,
    /// What the shard's calls wrote since the last barrier, for the state quota.
    pub quota_written: crate::operator::quota::StateDelta,
}

/// How a shard makes instances of candidate versions.
#[derive(Debug, Clone)]
pub struct CandidateFactory {
    /// Limits for the instances.
    pub limits: Limits,
    /// Fields the aggregate receives.
    pub projection: Projection,
}

/// A shard.
pub struct Shard {
    join: Option<IntervalJoin>,
    enrichers: Vec<Enrichment>,
    aggregate: Option<(WindowEngine, VersionedAggregate, CandidateFactory)>,
    state: Box<dyn StateBackend>,
    /// The watermark after the last batch.
    watermark: Millis,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard")
            .field("enrichers", &self.enrichers)
            .field("watermark", &self.watermark)
            .finish()
    }
}

impl Shard {
    /// A shard with its interval join, operator instances and state.
    pub fn new(
        join: Option<IntervalJoin>,
        enrichers: Vec<Enrichment>,
        aggregate: Option<(WindowEngine, VersionedAggregate, CandidateFactory)>,
        state: Box<dyn StateBackend>,
    ) -> Self {
        Shard {
            join,
            enrichers,
            aggregate,
            state,
            watermark: MINUS_INFINITY,
        }
    }

    /// Everything changed since the last checkpoint: state scopes and window metadata.
    /// Refused if the window engine still holds events it has not added (the batch before a
    /// barrier never carries).
    pub fn checkpoint(&mut self) -> Result<ShardSnapshot, ShardError> {
        if let Some((engine, _, _)) = &self.aggregate
            && engine.holds_events()
        {
            return Err(ShardError::Host(
                "a checkpoint came while the window engine held events not yet added to state \
                 (the batch before a barrier must not carry): a bug, please report it"
                    .into(),
            ));
        }
        let state = self.state.changes()?;
        let windows = self
            .aggregate
            .as_mut()
            .map(|(engine, _, _)| engine.changes())
            .unwrap_or_default();
        Ok(ShardSnapshot {
            state,
            windows,
            hot: self.state.hot_len(),
            quota_written: crate::operator::quota::StateQuota::handed_over(),
        })
    }

    /// The last checkpoint is durable.
    pub fn committed(&mut self) {
        self.state.committed();
    }

    /// The keys parked in the quarantine that changed since last asked (all, after a restore).
    pub fn parked_keys(&mut self) -> Vec<Quarantined> {
        match &mut self.aggregate {
            Some((engine, _, _)) => engine.parked_keys(),
            None => Vec::new(),
        }
    }

    /// Restores a checkpoint: the watermark, the open windows (`windows`), the interval join's
    /// expiries and the enrichment TTLs (`state`: this shard's rows of the state table; only
    /// read when there is a join or a TTL).
    pub fn restore(
        &mut self,
        watermark: Millis,
        windows: &[TableRow],
        state: &[TableRow],
    ) -> Result<(), RowError> {
        self.watermark = watermark;
        if let Some(join) = &mut self.join {
            join.restore(state)?;
        }
        for enrichment in &mut self.enrichers {
            enrichment.restore(state)?;
        }
        match &mut self.aggregate {
            Some((engine, _, _)) => engine.restore(watermark, windows),
            None => Ok(()),
        }
    }

    /// Routes keys between the versions of the aggregate, or of the enrichment operator the
    /// routing names, from now on. `candidate` is the code of the routing's version if this
    /// shard must instantiate it.
    pub fn route(
        &mut self,
        routing: Routing,
        candidate: Option<&VersionCode>,
        counters: &CounterBook,
        shadow_log: Option<ShadowLog>,
    ) -> Result<(), LoadError> {
        if let Some(name) = &routing.operator {
            let Some(enrichment) = self.enrichers.iter_mut().find(|e| e.name() == name) else {
                return Ok(());
            };
            let code = match candidate {
                Some(VersionCode::Enrich(code)) => Some(&**code),
                _ => None,
            };
            return enrichment.route(routing, code, counters, shadow_log);
        }
        let Some((_, versioned, factory)) = &mut self.aggregate else {
            return Ok(());
        };
        let instance = match candidate {
            Some(VersionCode::Aggregate(code)) => {
                Some(code.instantiate(factory.limits.clone(), factory.projection.clone())?)
            }
            _ => None,
        };
        versioned.route(routing, instance, counters, shadow_log);
        Ok(())
    }

    /// The routing in effect.
    pub fn routing(&self) -> Option<&Routing> {
        self.aggregate
            .as_ref()
            .map(|(_, versioned, _)| versioned.routing())
    }

    /// Processes this shard's events of one batch with all of the batch's watermark advances
    /// and early firings; with `carry`, windows may keep its events pending into the next
    /// batches.
    pub fn process(
        &mut self,
        share: Share,
        timeline: &Timeline<'_>,
        carry: bool,
    ) -> Result<ShardOutput, ShardError> {
        let Share {
            mut events,
            mut crossings,
        } = share;
        let (advances, end_of_input) = (timeline.advances, timeline.end_of_input);
        let mut out = ShardOutput::default();
        let start = self.watermark;
        let watermark_at = |seq: u64| -> Millis {
            let before = advances.partition_point(|(at, _)| *at < seq);
            if before == 0 {
                start
            } else {
                advances[before - 1].1
            }
        };
        if self.join.is_some() || !self.enrichers.is_empty() {
            // The events are made again, with none; the router takes none for such a shard.
            debug_assert!(crossings.is_empty());
            crossings = Vec::new();
        }
        if let Some(join) = &mut self.join {
            events = join.run(
                events,
                self.state.as_mut(),
                &watermark_at,
                &mut out.rejected,
            )?;
        }
        for enrichment in &mut self.enrichers {
            events = enrichment.run(
                events,
                self.state.as_mut(),
                &watermark_at,
                &mut out.rejected,
            )?;
        }
        if let Some(&(_, last)) = advances.last() {
            self.watermark = self.watermark.max(last);
        }
        if end_of_input {
            self.watermark = PLUS_INFINITY;
        }
        if let Some(join) = &mut self.join {
            join.sweep(self.state.as_mut(), self.watermark)?;
        }
        for enrichment in &mut self.enrichers {
            enrichment.sweep(self.state.as_mut(), self.watermark)?;
        }
        match &mut self.aggregate {
            Some((engine, operator, _)) => {
                let mut cx = Context {
                    operator,
                    state: self.state.as_mut(),
                };
                let share = Share { events, crossings };
                out.spent =
                    engine.process_carrying(share, carry, timeline, &mut cx, &mut out.engine)?;
            }
            None => out.events = events,
        }
        Ok(out)
    }
}

/// A shard's thread: processes batches and hands over its changes at each barrier, then goes
/// on with the next batches while the collector writes the checkpoint (as Flink's asynchronous
/// snapshots do: the shard does not wait for the disk). At most one checkpoint is in flight: the
/// next barrier waits for the last one's acknowledgement, and only once it is durable may clean
/// state be evicted from memory ([`StateBackend::committed`]). A barrier that changes the
/// routing waits for its own commit before the new routing applies, as before. Ends when the
/// router hangs up or the collector is gone.
/// Events the engine is done with go back to the router on `spent`, which made them: freeing
/// memory on the thread that allocated it is cheaper, and the shard's thread is the busier
/// (dropping Nexmark bids was a tenth of a Q5 shard's time). If the router has not caught up,
/// they are dropped here.
pub(super) fn run_thread(
    mut shard: Shard,
    messages: &Receiver<ShardMsg>,
    parts: &SyncSender<(u64, Part)>,
    spent: &SyncSender<Share>,
    ack: &Receiver<()>,
    control: &PipelineControl,
) -> Result<(), ShardError> {
    let mut in_flight = false;
    while let Ok(message) = messages.recv() {
        if in_flight && ack.try_recv().is_ok() {
            in_flight = false;
            shard.committed();
        }
        match message {
            ShardMsg::Batch {
                id,
                share,
                advances,
                early,
                redrives,
                end_of_input,
                carry,
            } => {
                let timeline = Timeline {
                    advances: &advances,
                    early: &early,
                    redrives: &redrives,
                    end_of_input,
                };
                let mut output = shard.process(share, &timeline, carry)?;
                note_quarantine(control, &mut output.engine.quarantined);
                for share in std::mem::take(&mut output.spent) {
                    if !share.events.is_empty() {
                        let _ = spent.try_send(share); // or dropped here
                    }
                }
                if parts.send((id, Part::Shard(output))).is_err() {
                    break;
                }
            }
            ShardMsg::Barrier { id, change } => {
                if in_flight && !await_commit(&mut shard, ack) {
                    break;
                }
                let snapshot = shard.checkpoint()?;
                if parts.send((id, Part::Snapshot(snapshot))).is_err() {
                    break;
                }
                in_flight = true;
                if let Some(change) = change {
                    if !await_commit(&mut shard, ack) {
                        break;
                    }
                    in_flight = false;
                    shard.route(
                        change.routing,
                        change.candidate.as_ref(),
                        &control.counters,
                        control.shadow_log.clone(),
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// Waits until the checkpoint in flight is durable, then lets the shard release memory; false
/// if the collector is gone.
fn await_commit(shard: &mut Shard, ack: &Receiver<()>) -> bool {
    let acknowledged = ack.recv().is_ok();
    if acknowledged {
        shard.committed();
    }
    acknowledged
}

/// A parked key that changed, with what the status shows of it (`None`: no longer parked).
type Quarantined = (std::sync::Arc<str>, Option<crate::window::ParkedSummary>);

/// Tells the pipeline's status which keys the shard parked or let go.
pub(super) fn note_quarantine(control: &PipelineControl, changed: &mut Vec<Quarantined>) {
    if changed.is_empty() {
        return;
    }
    let mut parked = control.stats.quarantine.lock().expect("quarantine lock");
    for (key, summary) in changed.drain(..) {
        match summary {
            Some(summary) => parked.insert(key.to_string(), summary),
            None => parked.remove(&*key),
        };
    }
    let events: usize = parked.values().map(|p| p.events).sum();
    control.metrics.quarantined_keys.set(parked.len() as f64);
    control.metrics.quarantined_events.set(events as f64);
}

#[cfg(test)]
mod tests {
    //! The shard's side of the barrier protocol, through its thread and channels: a barrier is
    //! answered with the shard's changes, and the shard goes on while the checkpoint is written,
    //! waiting for its acknowledgement only at the next barrier or before a new routing.

    use std::sync::Arc;
    use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
    use std::time::Duration;

    use super::super::messages::RoutingChange;
    use super::*;
    use crate::event::Event;
    use crate::operator::native::NativeCountSum;
    use crate::rollout::CounterBook;
    use crate::spec::WindowSpec;
    use crate::state::{MemoryBackend, ScopeState, StateKey};
    use crate::value::Value;

    fn shard() -> Shard {
        shard_on(Box::new(MemoryBackend::default()))
    }

    /// A memory backend that counts the calls of `committed` (after which the redb backend
    /// evicts clean state: only once the checkpoint is durable).
    struct CountingCommits {
        inner: MemoryBackend,
        commits: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl StateBackend for CountingCommits {
        fn take(&mut self, key: &StateKey) -> crate::state::Result<ScopeState> {
            self.inner.take(key)
        }
        fn put(&mut self, key: StateKey, state: ScopeState) -> crate::state::Result<()> {
            self.inner.put(key, state)
        }
        fn remove(&mut self, key: &StateKey) -> crate::state::Result<()> {
            self.inner.remove(key)
        }
        fn changes(&mut self) -> crate::state::Result<Vec<Change>> {
            self.inner.changes()
        }
        fn committed(&mut self) {
            (self.commits).fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        fn hot_len(&self) -> usize {
            self.inner.hot_len()
        }
    }

    fn shard_on(state: Box<dyn StateBackend>) -> Shard {
        let engine = WindowEngine::new(WindowSpec::Tumbling { size: 10 }, 0, 0, "c@1".into());
        let versioned =
            VersionedAggregate::new("1", Box::new(NativeCountSum), &CounterBook::default());
        let factory = CandidateFactory {
            limits: Limits::default(),
            projection: Projection::All,
        };
        Shard::new(None, Vec::new(), Some((engine, versioned, factory)), state)
    }

    /// A shard running on its own thread, as a pipeline runs it, and the ends of its channels.
    struct Running {
        messages: SyncSender<ShardMsg>,
        parts: Receiver<(u64, Part)>,
        ack: SyncSender<()>,
        spent: Receiver<Share>,
        thread: std::thread::JoinHandle<Result<(), ShardError>>,
    }

    /// Runs a shard on `state` in a thread, with room for `spent_room` lists of events on
    /// their way back to the router.
    fn spawn(state: Box<dyn StateBackend>, spent_room: usize) -> Running {
        let (messages, inbox) = sync_channel::<ShardMsg>(4);
        let (parts_tx, parts) = sync_channel::<(u64, Part)>(8);
        let (ack, acks) = sync_channel::<()>(1);
        let (spent_tx, spent) = sync_channel::<Share>(spent_room);
        let control = crate::pipeline::standalone_control("p");
        let thread = std::thread::spawn(move || {
            let shard = shard_on(state);
            run_thread(shard, &inbox, &parts_tx, &spent_tx, &acks, &control)
        });
        Running {
            messages,
            parts,
            ack,
            spent,
            thread,
        }
    }

    fn barrier(id: u64, change: Option<RoutingChange>) -> ShardMsg {
        ShardMsg::Barrier { id, change }
    }

    fn batch(id: u64, seq: u64, ts: i64) -> ShardMsg {
        let event = Event {
            line: seq + 1,
            key: "k".into(),
            timestamp: ts,
            fields: vec![("amount".into(), Value::Int(1))],
        };
        ShardMsg::Batch {
            id,
            share: Share::from(vec![Staged {
                seq,
                event,
                origin: None,
                made_by: None,
            }]),
            advances: Arc::new(vec![(seq, ts)]),
            early: Arc::default(),
            redrives: Arc::default(),
            end_of_input: false,
            carry: false,
        }
    }

    #[test]
    fn a_shard_refuses_a_checkpoint_while_its_windows_hold_events_not_yet_added() {
        let mut shard = shard();
        let ShardMsg::Batch { share, .. } = batch(0, 0, 5) else {
            unreachable!()
        };
        let timeline = Timeline {
            advances: &[],
            early: &[],
            redrives: &[],
            end_of_input: false,
        };
        let out = shard
            .process(share, &timeline, true)
            .expect("the shard runs");
        assert!(out.spent.is_empty(), "the window holds the batch's event");
        assert!(shard.checkpoint().is_err());
        // A batch that does not carry (the router sends one before every barrier) adds it.
        let out = shard
            .process(Share::default(), &timeline, false)
            .expect("the shard runs");
        let mut spent: Vec<usize> = out.spent.iter().map(|share| share.events.len()).collect();
        spent.sort_unstable();
        assert_eq!(spent, [0, 1], "both batches handed back");
        shard.checkpoint().expect("a snapshot");
        let end = Timeline {
            end_of_input: true,
            ..timeline
        };
        let out = shard
            .process(Share::default(), &end, false)
            .expect("the shard runs");
        let result = &out.engine.emissions[0].value;
        assert!(
            result.contains(&("count".into(), Value::Int(1))),
            "{result:?}"
        );
    }

    #[test]
    fn a_shard_goes_on_while_its_checkpoint_is_written_with_one_checkpoint_in_flight() {
        let commits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let state = CountingCommits {
            inner: MemoryBackend::default(),
            commits: commits.clone(),
        };
        let Running {
            messages,
            parts,
            ack,
            spent,
            thread,
        } = spawn(Box::new(state), 1);
        let committed = || commits.load(std::sync::atomic::Ordering::SeqCst);
        let next = |what: &str| {
            parts
                .recv_timeout(Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("{what}: {e}"))
        };
        let waits = |what: &str| {
            assert!(
                matches!(
                    parts.recv_timeout(Duration::from_millis(200)),
                    Err(RecvTimeoutError::Timeout)
                ),
                "{what} did not wait for the commit"
            )
        };
        messages.send(batch(0, 0, 5)).unwrap();
        assert!(matches!(next("the first batch"), (0, Part::Shard(_))));
        // Its events go back to be dropped where they were made; with no room, here.
        let share = spent.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(share.events.len(), 1);
        messages.send(barrier(1, None)).unwrap();
        match next("the barrier") {
            (1, Part::Snapshot(snapshot)) => {
                assert!(
                    !snapshot.windows.is_empty(),
                    "no window changes handed over"
                )
            }
            (id, _) => panic!("batch {id} instead of the snapshot"),
        }
        // The next batch does not wait for the commit.
        messages.send(batch(2, 1, 15)).unwrap();
        match next("the batch after the barrier") {
            (2, Part::Shard(output)) => assert_eq!(output.engine.emissions.len(), 1),
            (id, _) => panic!("unexpected part for batch {id}"),
        }
        assert_eq!(committed(), 0, "nothing may be evicted before the commit");
        // The next barrier does: one checkpoint in flight at a time.
        messages.send(barrier(3, None)).unwrap();
        waits("the second barrier");
        assert_eq!(committed(), 0);
        ack.send(()).unwrap();
        assert!(matches!(next("the second barrier"), (3, Part::Snapshot(_))));
        assert_eq!(committed(), 1, "the first checkpoint is durable");
        // An acknowledgement that comes between batches is taken with the next one.
        ack.send(()).unwrap();
        messages.send(batch(4, 2, 25)).unwrap();
        assert!(matches!(next("a batch"), (4, Part::Shard(_))));
        assert_eq!(committed(), 2, "the second checkpoint is durable");
        // A barrier that changes the routing waits for its own commit before going on.
        let change = RoutingChange {
            routing: Routing::single("1"),
            candidate: None,
        };
        messages.send(barrier(5, Some(change))).unwrap();
        assert!(matches!(
            next("the routing barrier"),
            (5, Part::Snapshot(_))
        ));
        messages.send(batch(6, 3, 35)).unwrap();
        waits("the batch after a new routing");
        ack.send(()).unwrap();
        assert!(matches!(
            next("the batch after the commit"),
            (6, Part::Shard(_))
        ));
        drop(messages);
        thread.join().unwrap().unwrap();
    }

    #[test]
    fn a_shard_whose_collector_is_gone_with_a_checkpoint_in_flight_ends() {
        let Running {
            messages,
            parts,
            ack,
            spent: _spent,
            thread,
        } = spawn(Box::new(MemoryBackend::default()), 4);
        messages.send(batch(0, 0, 5)).unwrap();
        messages.send(barrier(1, None)).unwrap();
        let timeout = Duration::from_secs(5);
        assert!(matches!(
            parts.recv_timeout(timeout),
            Ok((0, Part::Shard(_)))
        ));
        assert!(matches!(
            parts.recv_timeout(timeout),
            Ok((1, Part::Snapshot(_)))
        ));
        // The collector stops before acknowledging: the next barrier ends the shard, no snapshot.
        drop(ack);
        messages.send(barrier(2, None)).unwrap();
        // No more messages: a shard that took barrier 2 would end after it, not hang the test.
        drop(messages);
        thread.join().unwrap().unwrap();
        assert!(parts.try_recv().is_err(), "no snapshot without a commit");
    }
}
