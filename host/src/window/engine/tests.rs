//! The engine alone, with the native count-sum and the memory backend: firing, updates
//! within the allowed lateness, late events, and session merges with retractions. The
//! end-to-end suite checks the same rules through the binary against a reference model.

use super::*;
use crate::event::{Event, Origin};
use crate::field_name::FieldName;
use crate::operator::native::NativeCountSum;
use crate::operator::{AggregateOperator, CarriedResult, OperatorError, Scope, WindowEvents};
use crate::state::{MemoryBackend, Namespace, StateBackend, StateKey};
use crate::value::Fields;
use crate::value::Value;
use crate::window::calls::MAX_EVENTS_PER_CALL;
use crate::window::pending::MAX_HELD_BATCHES;

fn timeline(advances: &[(u64, Millis)], end_of_input: bool) -> Timeline<'_> {
    Timeline {
        advances,
        early: &[],
        redrives: &[],
        end_of_input,
    }
}

/// Runs `events` (key, timestamp, amount) through one engine in one batch, the watermark
/// following the highest timestamp (bound 0), and ends the input if `end`: with the native
/// count-sum, whose calls carry many windows, and again one call per window (as 0.1 and 0.2
/// components, rollouts and the other native operators go), which must give the same.
fn run(
    spec: WindowSpec,
    lateness: Millis,
    events: &[(&str, Millis, i64)],
    end: bool,
) -> EngineOutput {
    let carried = run_with(&mut NativeCountSum, spec, lateness, events, end);
    let alone = run_with(&mut CountingAdds::default(), spec, lateness, events, end);
    assert_eq!(
        format!("{carried:?}"),
        format!("{alone:?}"),
        "windows carried many to a call and one to a call gave different outputs"
    );
    carried
}

/// `events` (key, timestamp, amount) in arrival order, numbered from 0.
fn staged(events: &[(&str, Millis, i64)]) -> Vec<Staged> {
    (events.iter().enumerate())
        .map(|(i, (key, ts, amount))| Staged {
            seq: i as u64,
            event: Event {
                line: i as u64 + 1,
                key: (*key).into(),
                timestamp: *ts,
                fields: vec![("amount".into(), Value::Int(*amount))],
            },
            origin: None,
            made_by: None,
        })
        .collect()
}

/// [`run`] with `operator`.
fn run_with(
    operator: &mut dyn AggregateOperator,
    spec: WindowSpec,
    lateness: Millis,
    events: &[(&str, Millis, i64)],
    end: bool,
) -> EngineOutput {
    let staged = staged(events);
    let mut advances = Vec::new();
    let mut watermark = MINUS_INFINITY;
    for s in &staged {
        if s.event.timestamp > watermark {
            watermark = s.event.timestamp;
            advances.push((s.seq, watermark));
        }
    }
    let mut engine = WindowEngine::new(spec, lateness, 0, "count-sum@1".into());
    let mut state = MemoryBackend::default();
    let mut cx = Context {
        operator,
        state: &mut state,
    };
    let mut out = EngineOutput::default();
    engine
        .process(&staged, &timeline(&advances, end), &mut cx, &mut out)
        .expect("the engine runs");
    out
}

/// (key, start, end, kind, version, count) of each emission.
fn emitted(out: &EngineOutput) -> Vec<(String, Millis, Millis, &'static str, u64, i64)> {
    out.emissions
        .iter()
        .map(|e| {
            let count = e
                .value
                .iter()
                .find(|(name, _)| name == "count")
                .and_then(|(_, v)| match v {
                    Value::Int(n) => Some(*n),
                    _ => None,
                })
                .unwrap_or(-1);
            let key = e.key.to_string();
            (
                key,
                e.window.start,
                e.window.end,
                e.kind.as_str(),
                e.version,
                count,
            )
        })
        .collect()
}

const TUMBLING: WindowSpec = WindowSpec::Tumbling { size: 10 };

#[test]
fn a_window_fires_when_the_watermark_passes_its_end() {
    let out = run(
        TUMBLING,
        0,
        &[("a", 0, 1), ("a", 5, 2), ("b", 12, 3)],
        false,
    );
    assert_eq!(emitted(&out), [("a".into(), 0, 10, "result", 1, 2)]);
    let out = run(TUMBLING, 0, &[("a", 0, 1), ("a", 5, 2), ("b", 12, 3)], true);
    assert_eq!(
        emitted(&out),
        [
            ("a".into(), 0, 10, "result", 1, 2),
            ("b".into(), 10, 20, "result", 1, 1)
        ]
    );
}

#[test]
fn a_window_takes_more_events_than_one_call_carries() {
    let n = MAX_EVENTS_PER_CALL * 2 + 7;
    let events: Vec<(&str, Millis, i64)> = (0..n).map(|_| ("a", 1, 1)).collect();
    let out = run(TUMBLING, 0, &events, true);
    assert_eq!(emitted(&out), [("a".into(), 0, 10, "result", 1, n as i64)]);
}

#[test]
fn a_late_event_within_the_lateness_updates_its_window() {
    let out = run(
        TUMBLING,
        100,
        &[("a", 0, 1), ("a", 25, 1), ("a", 3, 1)],
        false,
    );
    assert_eq!(
        emitted(&out),
        [
            ("a".into(), 0, 10, "result", 1, 1),
            ("a".into(), 0, 10, "update", 2, 2)
        ]
    );
    assert!(out.late.is_empty());
}

#[test]
fn an_event_past_the_lateness_goes_to_the_late_output() {
    let out = run(
        TUMBLING,
        0,
        &[("a", 0, 1), ("a", 25, 1), ("a", 3, 1)],
        false,
    );
    assert_eq!(emitted(&out), [("a".into(), 0, 10, "result", 1, 1)]);
    assert_eq!(out.late.iter().map(|l| l.seq).collect::<Vec<_>>(), [2]);
}

/// The native count-sum, counting its `add` calls.
#[derive(Default)]
struct CountingAdds {
    adds: usize,
}

impl AggregateOperator for CountingAdds {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> crate::operator::Result<()> {
        self.adds += 1;
        NativeCountSum.add(scope, events)
    }
    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> crate::operator::Result<()> {
        NativeCountSum.merge(target, source)
    }
    fn finish(
        &mut self,
        scope: &mut Scope,
        window: Window,
    ) -> crate::operator::Result<crate::value::Fields> {
        NativeCountSum.finish(scope, window)
    }
}

#[test]
fn events_extending_a_session_are_added_in_one_call() {
    let events = [
        ("a", 0, 1),
        ("b", 3, 1),
        ("a", 5, 1),
        ("a", 12, 1),
        ("a", 20, 1),
    ];
    let mut operator = CountingAdds::default();
    let out = run_with(
        &mut operator,
        WindowSpec::Session { gap: 10 },
        0,
        &events,
        true,
    );
    assert_eq!(
        emitted(&out),
        [
            ("b".into(), 3, 13, "result", 1, 1),
            ("a".into(), 0, 30, "result", 1, 4)
        ]
    );
    assert_eq!(
        operator.adds, 2,
        "one call per session, not one per extending event"
    );
}

/// What [`run_batches`] saw.
struct Batched {
    out: EngineOutput,
    /// The most batches the engine held after a batch.
    most_held: usize,
    /// Events in the batches it gave back.
    released: usize,
    /// Whether it held events at the end.
    holds: bool,
}

/// [`run_with`], in batches of `size` events through `process_carrying`, each carrying if
/// `carry(batch number)`, the input ending with the last if `end`.
fn run_batches(
    operator: &mut dyn AggregateOperator,
    spec: WindowSpec,
    events: &[(&str, Millis, i64)],
    (size, end): (usize, bool),
    carry: impl Fn(usize) -> bool,
) -> Batched {
    let staged = staged(events);
    let mut engine = WindowEngine::new(spec, 0, 0, "count-sum@1".into());
    let mut state = MemoryBackend::default();
    let mut cx = Context {
        operator,
        state: &mut state,
    };
    let mut seen = Batched {
        out: EngineOutput::default(),
        most_held: 0,
        released: 0,
        holds: false,
    };
    let mut watermark = MINUS_INFINITY;
    let batches: Vec<&[Staged]> = staged.chunks(size).collect();
    for (n, batch) in batches.iter().enumerate() {
        let mut advances = Vec::new();
        for s in batch.iter() {
            if s.event.timestamp > watermark {
                watermark = s.event.timestamp;
                advances.push((s.seq, watermark));
            }
        }
        let end = end && n + 1 == batches.len();
        // Every other batch comes with crossings, as the router would take them.
        let share = Share {
            events: batch.to_vec(),
            crossings: match n % 2 {
                0 => batch.iter().map(|s| crossing_of(&s.event)).collect(),
                _ => Vec::new(),
            },
        };
        let released = engine
            .process_carrying(
                share,
                carry(n),
                &timeline(&advances, end),
                &mut cx,
                &mut seen.out,
            )
            .expect("the engine runs");
        seen.released += released
            .iter()
            .map(|share| share.events.len())
            .sum::<usize>();
        seen.most_held = seen.most_held.max(engine.pending.held());
    }
    seen.holds = engine.holds_events();
    seen
}

#[test]
fn full_batches_carry_their_events_into_fewer_calls_with_the_same_results() {
    let keys = ["a", "b", "c"];
    let events: Vec<(&str, Millis, i64)> = (0..120)
        .map(|i| (keys[i % 3], (i / 3) as Millis, i as i64))
        .collect();
    let mut one = CountingAdds::default();
    let expected = emitted(&run_with(&mut one, TUMBLING, 0, &events, true));
    let mut flushing = CountingAdds::default();
    let each = run_batches(&mut flushing, TUMBLING, &events, (6, true), |_| false);
    let mut carrying = CountingAdds::default();
    let carried = run_batches(&mut carrying, TUMBLING, &events, (6, true), |_| true);
    assert_eq!(emitted(&each.out), expected);
    assert_eq!(emitted(&carried.out), expected);
    // Windows of 10 ms get 30 events, 6 per batch: 5 batches each, so 5 calls per window
    // without carrying, one with it.
    assert_eq!((flushing.adds, carrying.adds), (12 * 5, 12));
    assert!(
        carried.most_held <= MAX_HELD_BATCHES,
        "{}",
        carried.most_held
    );
    assert_eq!((carried.released, carried.holds), (events.len(), false));
}

/// The native count-sum, its windows carried across batches, reads the crossings of the
/// batches that have them (every other one; none for a negative amount, so some windows
/// come with crossings for some events only, and are read from their events) and gives
/// what one call per window gives.
#[test]
fn the_native_count_sum_gives_the_same_with_crossings() {
    let keys = ["a", "b", "c"];
    let events: Vec<(&str, Millis, i64)> = (0..120)
        .map(|i| {
            let amount = if i % 7 == 0 { -(i as i64) } else { i as i64 };
            (keys[i % 3], (i / 3) as Millis, amount)
        })
        .collect();
    let alone = run_with(&mut CountingAdds::default(), TUMBLING, 0, &events, true);
    let carried = run_batches(&mut NativeCountSum, TUMBLING, &events, (6, true), |_| true);
    assert_eq!(emitted(&carried.out), emitted(&alone));
    assert!(!emitted(&alone).is_empty());
    // The sums too (`emitted` keeps the counts), against sums worked out from the events.
    let mut expected = std::collections::BTreeMap::new();
    for &(key, ts, amount) in &events {
        *expected.entry((key.to_owned(), ts - ts % 10)).or_insert(0) += amount;
    }
    let sums: std::collections::BTreeMap<_, _> = (carried.out.emissions.iter())
        .map(|e| {
            let sum = e.value.iter().find(|(name, _)| name == "sum");
            let sum = sum.map(|(_, sum)| sum.clone());
            ((e.key.to_string(), e.window.start), sum)
        })
        .collect();
    let expected: std::collections::BTreeMap<_, _> = (expected.into_iter())
        .map(|(window, sum)| (window, Some(Value::Int(sum))))
        .collect();
    assert_eq!(sums, expected);
}

/// The native count-sum refusing negative amounts, which, if `carries`, takes many windows
/// per call: it adds every other window of a call (none with a refused event) and gives
/// every other output, leaving the rest to `add` and `finish`. Counts calls of each kind.
#[derive(Default)]
struct Grouping {
    carries: bool,
    adds: usize,
    finishes: usize,
    add_windows: usize,
    finish_windows: usize,
    /// Events given to `add_windows` with a crossing (each checked against its event).
    crossed: usize,
}

/// The crossing the router would take of a test event: its time and its amount (an
/// event of a negative amount has none, as if its field were of another kind).
fn crossing_of(event: &Event) -> Option<crate::event::Crossing> {
    let Value::Int(amount) = event.fields[0].1 else {
        unreachable!("test events have an integer amount")
    };
    (amount >= 0).then(|| crate::event::Crossing {
        timestamp: event.timestamp,
        field: FieldName::new("amount").interned().unwrap(),
        number: crate::event::CrossingNumber::Int(amount),
    })
}

fn refused(events: &[&Event]) -> bool {
    (events.iter()).any(|e| matches!(e.fields[0].1, Value::Int(amount) if amount < 0))
}

impl AggregateOperator for Grouping {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> crate::operator::Result<()> {
        self.adds += 1;
        if refused(events) {
            return Err(OperatorError::Rejected("a negative amount".into()));
        }
        NativeCountSum.add(scope, events)
    }
    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> crate::operator::Result<()> {
        NativeCountSum.merge(target, source)
    }
    fn finish(&mut self, scope: &mut Scope, window: Window) -> crate::operator::Result<Fields> {
        self.finishes += 1;
        NativeCountSum.finish(scope, window)
    }
    fn carries_windows(&self) -> bool {
        self.carries
    }
    fn add_windows(&mut self, windows: &mut [WindowEvents<'_>]) -> CarriedResult<bool> {
        if !self.carries {
            return Ok(None);
        }
        self.add_windows += 1;
        let mut done = Vec::new();
        for window in windows.iter() {
            let given = window.crossings;
            assert!(given.is_empty() || given.len() == window.events.len());
            // Every amount is different, so a crossing beside another event differs from
            // this one's (a batch without crossings gives its events none).
            for (crossing, event) in given.iter().zip(window.events) {
                if let Some(crossing) = crossing {
                    assert_eq!(Some(*crossing), crossing_of(event), "beside another event");
                    self.crossed += 1;
                }
            }
        }
        for (i, window) in windows.iter_mut().enumerate() {
            let takes = i % 2 == 0 && !refused(window.events);
            if takes {
                NativeCountSum.add(window.scope, window.events)?;
            }
            done.push(takes);
        }
        Ok(Some(done))
    }
    fn finish_windows(&mut self, windows: &[(&Scope, Window)]) -> CarriedResult<Option<Fields>> {
        if !self.carries {
            return Ok(None);
        }
        self.finish_windows += 1;
        let finish = |(scope, window): &(&Scope, Window)| {
            NativeCountSum.finish(&mut (*scope).clone(), *window)
        };
        (windows.iter().enumerate())
            .map(|(i, window)| match i % 2 == 1 {
                true => finish(window).map(Some),
                false => Ok(None),
            })
            .collect::<crate::operator::Result<_>>()
            .map(Some)
    }
}

#[test]
fn calls_carrying_many_windows_give_the_results_and_dead_letters_of_one_call_per_window() {
    let keys: Vec<String> = (0..40).map(|k| format!("k{k}")).collect();
    let events: Vec<(&str, Millis, i64)> = (0..2_000)
        .map(|i| {
            (
                keys[i * 7 % 40].as_str(),
                (i / 20) as Millis,
                if i % 333 == 5 { -1 } else { i as i64 },
            )
        })
        .collect();
    let letters = |out: &EngineOutput| {
        let mut lines: Vec<(u64, String)> = (out.dead_letters.iter())
            .map(|d| (d.line, d.reason.clone()))
            .collect();
        lines.sort();
        lines
    };
    let mut alone = Grouping::default();
    let expected = run_with(&mut alone, TUMBLING, 0, &events, true);
    assert_eq!(
        letters(&expected).len(),
        6,
        "the refused events are dead letters"
    );
    let mut many = Grouping {
        carries: true,
        ..Grouping::default()
    };
    let together = run_with(&mut many, TUMBLING, 0, &events, true);
    assert_eq!(emitted(&together), emitted(&expected));
    assert_eq!(letters(&together), letters(&expected));
    let mut carrying = Grouping {
        carries: true,
        ..Grouping::default()
    };
    let carried = run_batches(&mut carrying, TUMBLING, &events, (64, true), |_| true);
    assert_eq!(emitted(&carried.out), emitted(&expected));
    assert_eq!(letters(&carried.out), letters(&expected));
    // Each window's crossings came beside its own events, across carried batches.
    assert!(carrying.crossed > 0 && many.crossed == 0);
    // Half the windows of each call are left to one call each, and the refused ones are
    // retried event by event; the rest went in few calls.
    for operator in [&many, &carrying] {
        assert!(operator.add_windows > 0 && operator.finish_windows > 0);
        assert!(
            operator.adds < alone.adds,
            "{} of {}",
            operator.adds,
            alone.adds
        );
        assert!(operator.finishes < alone.finishes);
    }
}

#[test]
fn an_engine_holds_at_most_its_limit_of_batches_and_none_after_a_batch_that_does_not_carry() {
    // One window that never fires before the end: only the limit makes it add.
    let events: Vec<(&str, Millis, i64)> = (0..40).map(|i| ("a", i, 1)).collect();
    let long = WindowSpec::Tumbling { size: 1_000 };
    let mut operator = CountingAdds::default();
    let seen = run_batches(&mut operator, long, &events, (2, true), |n| n != 12);
    assert_eq!(seen.most_held, MAX_HELD_BATCHES);
    assert_eq!(
        emitted(&seen.out),
        [("a".into(), 0, 1_000, "result", 1, 40)]
    );
    // Batches 0-3 held, added when batch 4 came; 5-8 when 9 came; 9-12 (12 does not
    // carry); 13-16 when 17 came; 17-19 at the end.
    assert_eq!(operator.adds, 5);
    // Stopped after batch 12, before a checkpoint: everything is added, nothing held.
    let mut operator = CountingAdds::default();
    let stopped = run_batches(&mut operator, long, &events[..26], (2, false), |n| n < 12);
    assert_eq!(operator.adds, 3);
    assert!(stopped.out.emissions.is_empty());
    assert_eq!((stopped.released, stopped.holds), (26, false));
}

#[test]
fn an_empty_share_of_a_batch_is_given_back_and_does_not_count_toward_the_limit() {
    let mut engine = WindowEngine::new(TUMBLING, 0, 0, "count-sum@1".into());
    let mut operator = CountingAdds::default();
    let mut state = MemoryBackend::default();
    let mut cx = Context {
        operator: &mut operator,
        state: &mut state,
    };
    let mut out = EngineOutput::default();
    let none = timeline(&[], false);
    let one = staged(&[("a", 1, 1)]);
    let released = (engine.process_carrying(one.into(), true, &none, &mut cx, &mut out))
        .expect("the engine runs");
    assert!(released.is_empty(), "the window holds its event");
    for _ in 0..MAX_HELD_BATCHES * 2 {
        let empty = Share::default();
        let released = (engine.process_carrying(empty, true, &none, &mut cx, &mut out))
            .expect("the engine runs");
        assert_eq!(released.len(), 1, "the empty list comes back");
    }
    assert_eq!(engine.pending.held(), 1);
    assert_eq!(operator.adds, 0, "nothing forced the window to add");
}

/// A run through one engine on the redb backend (a budget of nothing: every clean scope is
/// evicted at each commit), in batches, checkpointing after every `every`th batch and
/// committing each checkpoint only after the next batch, as the shard goes on while the
/// collector writes it.
struct Checkpointed {
    store: crate::state::RedbStore,
    /// Where a copy of the store is kept as each checkpoint commits (`<id>.redb`).
    copies: std::path::PathBuf,
    state: crate::state::RedbBackend,
    engine: WindowEngine,
    in_flight: Option<crate::state::StoredCheckpoint>,
    /// Checkpoints committed: (id, the watermark at its barrier, events before it).
    committed: Vec<(u64, Millis, usize)>,
    /// Changes handed over, over all checkpoints.
    changes: usize,
    out: EngineOutput,
}

impl Checkpointed {
    fn new(dir: &std::path::Path, spec: WindowSpec, lateness: Millis) -> Checkpointed {
        Self::on(
            crate::state::RedbStore::open(dir).unwrap(),
            dir,
            spec,
            lateness,
        )
    }

    fn on(
        store: crate::state::RedbStore,
        copies: &std::path::Path,
        spec: WindowSpec,
        lateness: Millis,
    ) -> Checkpointed {
        Checkpointed {
            copies: copies.to_owned(),
            state: crate::state::RedbBackend::new(store.clone(), 0),
            store,
            engine: WindowEngine::new(spec, lateness, 0, "count-sum@1".into()),
            in_flight: None,
            committed: Vec::new(),
            changes: 0,
            out: EngineOutput::default(),
        }
    }

    /// Restores the checkpoint of the store file `copy` into a new engine and backend.
    fn restored(
        copy: &std::path::Path,
        spec: WindowSpec,
        lateness: Millis,
        watermark: Millis,
    ) -> Checkpointed {
        let store = crate::state::RedbStore::open_file(copy).unwrap();
        let parent = copy.parent().unwrap();
        let mut run = Checkpointed::on(store, parent, spec, lateness);
        let rows = run.store.scan(true, &[], &[0xff; 64]).unwrap();
        run.engine.restore(watermark, &rows).unwrap();
        run
    }

    fn batch(&mut self, staged: &[Staged], end: bool) {
        let mut advances = Vec::new();
        let mut watermark = self.engine.watermark();
        for s in staged {
            if s.event.timestamp > watermark {
                watermark = s.event.timestamp;
                advances.push((s.seq, watermark));
            }
        }
        let mut cx = Context {
            operator: &mut NativeCountSum,
            state: &mut self.state,
        };
        (self
            .engine
            .process(staged, &timeline(&advances, end), &mut cx, &mut self.out))
        .expect("the engine runs");
        self.commit();
    }

    fn barrier(&mut self, events_before: usize) {
        self.commit();
        let id = self.committed.len() as u64 + 1;
        let checkpoint = crate::state::StoredCheckpoint {
            id,
            manifest: format!("[{},{events_before}]", self.engine.watermark()).into_bytes(),
            state: self.state.changes().unwrap(),
            windows: self.engine.changes(),
            ..Default::default()
        };
        self.changes += checkpoint.state.len() + checkpoint.windows.len();
        self.in_flight = Some(checkpoint);
    }

    fn commit(&mut self) {
        if let Some(checkpoint) = self.in_flight.take() {
            self.store.commit(&checkpoint).unwrap();
            self.state.committed();
            let copy = self.copies.join(format!("{}.redb", checkpoint.id));
            if !copy.exists() {
                self.store.copy_to(&copy).unwrap();
            }
            let (watermark, events): (Millis, usize) =
                serde_json::from_slice(&checkpoint.manifest).unwrap();
            self.committed.push((checkpoint.id, watermark, events));
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    /// Windows born and closed between two checkpoints are never looked for in the store
    /// nor written to it; whatever the windows and wherever the barriers fall, a run that
    /// checkpoints (committing late, evicting everything clean) gives the results of one
    /// that does not, leaves nothing in the store once every window closed, and a restart
    /// from any committed checkpoint gives the results that followed it.
    #[test]
    fn checkpoints_change_no_result_and_a_restart_from_any_repeats_what_followed(
        spec in proptest::prop_oneof![
            proptest::strategy::Just(WindowSpec::Tumbling { size: 10 }),
            proptest::strategy::Just(WindowSpec::Sliding { size: 20, slide: 10 }),
            proptest::strategy::Just(WindowSpec::Session { gap: 5 }),
        ],
        lateness in proptest::prop_oneof![
            proptest::strategy::Just(0i64),
            proptest::strategy::Just(15),
        ],
        events in proptest::collection::vec((0..3usize, 0..120i64, 1..5i64), 1..60),
        per_batch in 1..6usize,
        every in 1..4usize,
    ) {
        let keys = ["a", "b", "c"];
        let events: Vec<(&str, Millis, i64)> =
            events.iter().map(|&(k, ts, n)| (keys[k], ts, n)).collect();
        let all = staged(&events);
        let expected = emitted(&run(spec, lateness, &events, true));

        let dir = tempfile::tempdir().unwrap();
        let mut run = Checkpointed::new(dir.path(), spec, lateness);
        let batches: Vec<&[Staged]> = all.chunks(per_batch).collect();
        let mut from = Vec::new(); // emissions before each barrier
        for (i, batch) in batches.iter().enumerate() {
            run.batch(batch, i + 1 == batches.len());
            if (i + 1) % every == 0 && i + 1 < batches.len() {
                from.push(run.out.emissions.len());
                run.barrier((i + 1) * per_batch);
            }
        }
        run.commit();
        proptest::prop_assert_eq!(&emitted(&run.out), &expected);
        run.barrier(all.len());
        run.commit();
        let rows = |windows| run.store.scan(windows, &[], &[0xff; 64]).unwrap();
        proptest::prop_assert!(rows(false).is_empty(), "state rows left");
        proptest::prop_assert!(rows(true).is_empty(), "window rows left");

        // A restart from each committed checkpoint but the last (after the end of input),
        // from the copy of the store taken as it committed.
        let checkpoints = run.committed.clone();
        let restartable = checkpoints.len() - 1;
        for (k, &(id, watermark, before)) in checkpoints.iter().enumerate().take(restartable) {
            let copy = dir.path().join(format!("{id}.redb"));
            let mut restarted = Checkpointed::restored(&copy, spec, lateness, watermark);
            for (i, batch) in batches.iter().enumerate().skip(before / per_batch) {
                restarted.batch(batch, i + 1 == batches.len());
            }
            proptest::prop_assert_eq!(
                emitted(&restarted.out),
                emitted(&run.out)[from[k]..].to_vec(),
                "restarted from checkpoint {}", id
            );
        }
    }
}

#[test]
fn windows_born_and_closed_between_checkpoints_leave_no_change() {
    // Ten tumbling windows of one key open and close between two barriers: the checkpoint
    // after them holds only the one window still open.
    let dir = tempfile::tempdir().unwrap();
    let mut run = Checkpointed::new(dir.path(), WindowSpec::Tumbling { size: 10 }, 0);
    let events: Vec<(&str, Millis, i64)> = (0..101).map(|ts| ("a", ts, 1)).collect();
    run.batch(&staged(&events), false);
    run.barrier(events.len());
    run.commit();
    assert_eq!(emitted(&run.out).len(), 10);
    assert_eq!(run.changes, 2, "the open window's state and metadata only");
}

#[test]
fn a_widened_session_leaves_no_state_under_its_old_extent_on_disk() {
    use crate::state::{RedbBackend, RedbStore, StoredCheckpoint};
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(dir.path()).unwrap();
    let mut state = RedbBackend::new(store.clone(), usize::MAX);
    let mut engine = WindowEngine::new(WindowSpec::Session { gap: 10 }, 0, 0, "cs@1".into());
    // a@0 opens [0, 10) and is checkpointed; a@5 widens it to [0, 15) and is checkpointed.
    for (seq, ts) in [(0, 0), (1, 5)] {
        let staged = [Staged {
            seq,
            event: Event {
                line: seq + 1,
                key: "a".into(),
                timestamp: ts,
                fields: vec![("amount".into(), Value::Int(1))],
            },
            origin: None,
            made_by: None,
        }];
        let mut cx = Context {
            operator: &mut NativeCountSum,
            state: &mut state,
        };
        let mut out = EngineOutput::default();
        (engine.process(&staged, &timeline(&[], false), &mut cx, &mut out)).unwrap();
        let checkpoint = StoredCheckpoint {
            id: seq + 1,
            manifest: b"{}".to_vec(),
            state: state.changes().unwrap(),
            windows: engine.changes(),
            ..Default::default()
        };
        store.commit(&checkpoint).unwrap();
        state.committed();
    }
    let extents = |windows| {
        let rows = store.scan(windows, &[], &[0xff; 64]).unwrap();
        (rows.iter())
            .map(|row| match StateKey::decode(&row.key).unwrap().namespace {
                Namespace::Window { start, end } => (start, end),
                other => panic!("{other:?}"),
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(extents(true), [(0, 15)], "window rows");
    assert_eq!(extents(false), [(0, 15)], "state rows");
}

#[test]
fn an_emitted_session_extended_later_is_retracted_and_emitted_again() {
    // a@0 fires [0, 10) once b@20 passes it; a@5 (late, within the lateness) extends it to
    // [0, 15), which retracts the first result and emits the wider one, as closing the
    // session and opening a wider one did.
    let events = [("a", 0, 1), ("b", 20, 1), ("a", 5, 1), ("c", 40, 1)];
    let mut operator = CountingAdds::default();
    let out = run_with(
        &mut operator,
        WindowSpec::Session { gap: 10 },
        100,
        &events,
        false,
    );
    assert_eq!(
        emitted(&out),
        [
            ("a".into(), 0, 10, "result", 1, 1),
            ("a".into(), 0, 10, "retract", 1, 1),
            ("a".into(), 0, 15, "update", 2, 2),
            ("b".into(), 20, 30, "result", 1, 1),
        ]
    );
}

#[test]
fn a_session_bridging_two_emitted_sessions_retracts_both() {
    let events = [("a", 0, 1), ("a", 20, 1), ("a", 40, 1), ("a", 10, 1)];
    let out = run(WindowSpec::Session { gap: 10 }, 100, &events, false);
    let emitted = emitted(&out);
    assert_eq!(
        &emitted[..2],
        [
            ("a".into(), 0, 10, "result", 1, 1),
            ("a".into(), 20, 30, "result", 1, 1)
        ]
    );
    let retracted: Vec<_> = emitted[2..]
        .iter()
        .filter(|e| e.3 == "retract")
        .map(|e| (e.1, e.2))
        .collect();
    assert_eq!(retracted, [(0, 10), (20, 30)]);
    let merged = emitted.last().expect("the merged session");
    assert_eq!((merged.1, merged.2, merged.5), (0, 30, 3), "{emitted:?}");
}

/// A stage event: upstream result `origin` (its key and window `[0, 10)`) with `amount`,
/// or its withdrawal (`amount` None), at arrival index `seq`, all under the key `*`.
fn stage_event(seq: u64, origin: &str, amount: Option<i64>) -> Staged {
    Staged {
        seq,
        event: Event {
            line: 0,
            key: "*".into(),
            timestamp: 9,
            fields: amount
                .map(|a| vec![("amount".into(), Value::Int(a))])
                .unwrap_or_default(),
        },
        origin: Some(Box::new(Origin {
            key: origin.into(),
            window: Window { start: 0, end: 10 },
            withdrawn: amount.is_none(),
        })),
        made_by: None,
    }
}

#[test]
fn a_stage_replaces_updated_inputs_and_withdraws_a_result_left_without_any() {
    let mut engine = WindowEngine::new(TUMBLING, 100, 0, "count-sum@1".into()).keeping_inputs();
    let (mut operator, mut state) = (NativeCountSum, MemoryBackend::default());
    let mut cx = Context {
        operator: &mut operator,
        state: &mut state,
    };
    let mut batch = |events: Vec<Staged>, watermark: Millis| {
        let mut out = EngineOutput::default();
        let advance = [(events.last().map_or(0, |e| e.seq), watermark)];
        engine
            .process(&events, &timeline(&advance, false), &mut cx, &mut out)
            .expect("the engine runs");
        out.emissions
            .iter()
            .map(|e| {
                let field = |name: &str| e.value.iter().find(|(n, _)| n == name).cloned();
                (e.kind.as_str(), e.version, field("count"), field("sum"))
            })
            .collect::<Vec<_>>()
    };
    let count_sum = |count, sum| {
        (
            Some(("count".to_string(), Value::Int(count))),
            Some(("sum".to_string(), Value::Int(sum))),
        )
    };
    let first = batch(
        vec![stage_event(0, "a", Some(5)), stage_event(1, "b", Some(3))],
        10,
    );
    let (c, s) = count_sum(2, 8);
    assert_eq!(first, [("result", 1, c, s)]);
    // An update of `a` upstream: its withdrawal and its new value.
    let update = batch(
        vec![stage_event(2, "a", None), stage_event(2, "a", Some(7))],
        20,
    );
    let (c, s) = count_sum(2, 10);
    assert_eq!(
        update,
        [("update", 2, c, s)],
        "a is counted once, at its new value"
    );
    // A replacement without a withdrawal is still counted once.
    let replaced = batch(vec![stage_event(3, "b", Some(1))], 30);
    let (c, s) = count_sum(2, 8);
    assert_eq!(replaced, [("update", 3, c, s)]);
    let withdrawn = batch(vec![stage_event(4, "b", None)], 40);
    let (c, s) = count_sum(1, 7);
    assert_eq!(withdrawn, [("update", 4, c, s)]);
    let unknown = batch(vec![stage_event(5, "z", None)], 50);
    assert!(
        unknown.is_empty(),
        "withdrawing what never entered changes nothing"
    );
    let last = batch(vec![stage_event(6, "a", None)], 60);
    let (c, s) = count_sum(1, 7);
    assert_eq!(last, [("retract", 4, c, s)], "the last result is withdrawn");
}

#[test]
fn a_stage_window_keeps_its_inputs_across_a_restart() {
    let mut engine = WindowEngine::new(TUMBLING, 100, 0, "count-sum@1".into()).keeping_inputs();
    let (mut operator, mut state) = (NativeCountSum, MemoryBackend::default());
    let mut cx = Context {
        operator: &mut operator,
        state: &mut state,
    };
    let mut out = EngineOutput::default();
    let events = [stage_event(0, "a", Some(5)), stage_event(1, "b", Some(3))];
    engine
        .process(&events, &timeline(&[(1, 10)], false), &mut cx, &mut out)
        .expect("the engine runs");
    let rows: Vec<TableRow> = engine
        .changes()
        .into_iter()
        .map(|change| TableRow {
            key: change.key,
            value: change.value.expect("an open window"),
        })
        .collect();
    let mut restored = WindowEngine::new(TUMBLING, 100, 0, "count-sum@1".into()).keeping_inputs();
    restored.restore(10, &rows).expect("the rows restore");
    let mut out = EngineOutput::default();
    let events = [stage_event(2, "a", None), stage_event(2, "a", Some(1))];
    restored
        .process(&events, &timeline(&[(2, 20)], false), &mut cx, &mut out)
        .expect("the engine runs");
    let sum = out.emissions[0]
        .value
        .iter()
        .find(|(n, _)| n == "sum")
        .cloned();
    assert_eq!(sum, Some(("sum".to_string(), Value::Int(4))), "{out:?}");
    assert_eq!(out.emissions[0].version, 2);
}

/// The native count-sum, trapping for keys starting with `boom` while `trapping`.
struct TrapsOnBoom {
    trapping: bool,
}

impl AggregateOperator for TrapsOnBoom {
    fn add(&mut self, scope: &mut Scope, events: &[&Event]) -> crate::operator::Result<()> {
        if self.trapping && scope.key.starts_with("boom") {
            return Err(OperatorError::Trapped("boom traps".into()));
        }
        NativeCountSum.add(scope, events)
    }
    fn merge(&mut self, target: &mut Scope, source: &mut Scope) -> crate::operator::Result<()> {
        NativeCountSum.merge(target, source)
    }
    fn finish(
        &mut self,
        scope: &mut Scope,
        window: Window,
    ) -> crate::operator::Result<crate::value::Fields> {
        NativeCountSum.finish(scope, window)
    }
}

fn rows_of(engine: &mut WindowEngine) -> Vec<TableRow> {
    (engine.changes().into_iter())
        .filter_map(|change| {
            Some(TableRow {
                key: change.key,
                value: change.value?,
            })
        })
        .collect()
}

#[test]
fn a_parked_key_waits_across_a_restart_and_its_redrive_gives_what_a_run_without_the_trap_gives() {
    let events = [
        ("boom", 1, 1),
        ("ann", 2, 1),
        ("boom", 5, 2),
        ("boom", 12, 3),
        ("ann", 13, 1),
        ("zed", 40, 1),
        ("boom", 41, 4),
    ];
    let mut clean = emitted(&run(TUMBLING, 0, &events, false));
    let quarantine = crate::spec::QuarantineSpec {
        max_events_per_key: 10,
        max_events: 100,
        ttl: 1_000,
        errors: false,
    };
    let new_engine = || {
        WindowEngine::new(TUMBLING, 0, 0, "count-sum@1".into()).with_quarantine(Some(quarantine), 1)
    };
    let mut engine = new_engine();
    let (mut operator, mut state) = (TrapsOnBoom { trapping: true }, MemoryBackend::default());
    let staged = staged(&events);
    let advances: Vec<(u64, Millis)> =
        vec![(0, 1), (1, 2), (2, 5), (3, 12), (4, 13), (5, 40), (6, 41)];
    let mut out = EngineOutput::default();
    let mut cx = Context {
        operator: &mut operator,
        state: &mut state,
    };
    engine
        .process(&staged, &timeline(&advances, false), &mut cx, &mut out)
        .expect("the engine runs");
    let mut got = emitted(&out);
    assert!(
        got.iter().all(|e| e.0 != "boom"),
        "a parked key's windows fired: {got:?}"
    );
    assert!(out.dead_letters.is_empty(), "{:?}", out.dead_letters);
    assert_eq!(out.quarantined.len(), 1);
    assert_eq!(out.quarantined[0].1.as_ref().unwrap().events, 4);

    // A restart from the checkpoint, the version fixed, and a re-drive after the events.
    let rows = rows_of(&mut engine);
    let mut engine = new_engine();
    engine.restore(41, &rows).expect("the rows restore");
    operator.trapping = false;
    let mut cx = Context {
        operator: &mut operator,
        state: &mut state,
    };
    let redrives = [(6, Some(Arc::<str>::from("boom")))];
    let redriven = Timeline {
        advances: &[],
        early: &[],
        redrives: &redrives,
        end_of_input: false,
    };
    let mut out = EngineOutput::default();
    engine
        .process(&[], &redriven, &mut cx, &mut out)
        .expect("the engine runs");
    got.extend(emitted(&out));
    assert_eq!(out.quarantined, [("boom".into(), None)]);
    // A second re-drive finds nothing parked.
    let mut again = EngineOutput::default();
    engine
        .process(&[], &redriven, &mut cx, &mut again)
        .expect("the engine runs");
    assert!(again.emissions.is_empty(), "{:?}", again.emissions);
    got.sort();
    clean.sort();
    assert_eq!(got, clean);
    let parked_row_deleted = engine.changes().into_iter().any(|change| {
        let key = StateKey::decode(&change.key).expect("a state key");
        change.value.is_none()
            && matches!(key.namespace, Namespace::Window { start, end } if start == end)
    });
    assert!(parked_row_deleted, "the parked key's row is deleted");
}

#[test]
fn a_key_parked_past_its_ttl_gives_its_events_up_as_dead_letters_and_its_windows_go_on() {
    let quarantine = crate::spec::QuarantineSpec {
        max_events_per_key: 2,
        max_events: 100,
        ttl: 20,
        errors: false,
    };
    let mut engine = WindowEngine::new(TUMBLING, 0, 0, "count-sum@1".into())
        .with_quarantine(Some(quarantine), 1);
    let (mut operator, mut state) = (TrapsOnBoom { trapping: true }, MemoryBackend::default());
    let mut cx = Context {
        operator: &mut operator,
        state: &mut state,
    };
    let events = [
        ("boom", 1, 1),
        ("boom", 2, 1),
        ("boom", 3, 1),
        ("ann", 30, 1),
        ("ann", 49, 1),
        ("ann", 50, 1),
    ];
    let advances: Vec<(u64, Millis)> = vec![(0, 1), (1, 2), (2, 3), (3, 30), (4, 49), (5, 50)];
    let mut out = EngineOutput::default();
    engine
        .process(
            &staged(&events),
            &timeline(&advances, false),
            &mut cx,
            &mut out,
        )
        .expect("the engine runs");
    let reasons: Vec<&str> = out.dead_letters.iter().map(|d| d.reason.as_str()).collect();
    // The window's three events trapped when it fired, at 30: the key was parked with two of
    // them, the third found it full; at 50, parked since 30 with a TTL of 20, the two kept ones
    // are given up.
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert!(reasons[0].contains("max_events_per_key"), "{reasons:?}");
    assert!(
        reasons[1].contains("ttl") && reasons[1].contains("boom traps"),
        "{reasons:?}"
    );
    assert_eq!(out.quarantined.last().unwrap().1, None);
}
