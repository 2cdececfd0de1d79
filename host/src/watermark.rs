//! Watermarks: bounded out-of-orderness over arrival order, per partition.
//!
//! For each event, in arrival order: lateness is judged against the current watermark `W`, the
//! event is added, then `W = max(W, ts - bound)`. `W` starts at minus infinity and becomes plus
//! infinity at the end of a bounded input. With partitions, `W` is the minimum over the active
//! ones ([`PartitionedWatermark`]). Depends on `time` and `hashing` (and `spec` for the
//! partition cap).

use serde::{Deserialize, Serialize};

use crate::time::{MINUS_INFINITY, Millis, PLUS_INFINITY};

/// The bounded out-of-orderness watermark strategy over one stream: the reference the
/// partitioned watermark with one partition is checked against.
#[derive(Debug, Clone)]
pub struct BoundedOutOfOrderness {
    bound: Millis,
    current: Millis,
}

impl BoundedOutOfOrderness {
    /// A watermark that trails the highest timestamp seen by `bound` milliseconds.
    pub fn new(bound: Millis) -> Self {
        BoundedOutOfOrderness {
            bound,
            current: MINUS_INFINITY,
        }
    }

    /// Continues from a watermark a checkpoint recorded.
    pub fn resume(bound: Millis, current: Millis) -> Self {
        BoundedOutOfOrderness { bound, current }
    }

    /// The current watermark.
    pub fn current(&self) -> Millis {
        self.current
    }

    /// Observes an event's timestamp; returns the new watermark if it advanced.
    pub fn observe(&mut self, timestamp: Millis) -> Option<Millis> {
        let candidate = timestamp.saturating_sub(self.bound);
        (candidate > self.current).then(|| {
            self.current = candidate;
            candidate
        })
    }

    /// Ends the input: the watermark becomes plus infinity.
    pub fn finish(&mut self) -> Millis {
        self.current = PLUS_INFINITY;
        self.current
    }
}

/// One partition's part of the watermark, as a checkpoint records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMark {
    /// The partition (`""`: the pipeline's only one).
    pub name: String,
    /// Its highest event time.
    pub max_timestamp: Millis,
    /// The ingest clock of its last event, if the source has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<i64>,
    /// Whether it ended (a file read to its end): it holds nothing back.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub finished: bool,
}

pub use crate::spec::MAX_PARTITIONS;

/// The longest watermark partition name, in bytes: the names are kept for the pipeline's life
/// and in every checkpoint, and an event's field may hold any text.
pub const MAX_PARTITION_NAME: usize = 256;

/// How many idle timeouts a partition stays quiet before it is forgotten (with an idle
/// timeout only: without one, a quiet partition holds the watermark back, as asked).
pub const FORGET_AFTER_IDLE: i64 = 10;

/// Why an event's partition was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PartitionRefused {
    /// One partition more than [`MAX_PARTITIONS`].
    #[error(
        "the pipeline has {MAX_PARTITIONS} watermark partitions already; this event's partition {0:?} would be one more"
    )]
    TooMany(String),
    /// A name longer than [`MAX_PARTITION_NAME`].
    #[error(
        "this event's watermark partition is named by {0} bytes; at most {MAX_PARTITION_NAME} are taken"
    )]
    TooLong(usize),
}

#[derive(Debug, Clone, Copy)]
struct Mark {
    max_timestamp: Millis,
    last_seen: Option<i64>,
    finished: bool,
}

/// Watermarks per partition (Flink's per-split watermarks): each partition trails its own
/// highest event time by the bound, and the pipeline's watermark is the minimum over the active
/// partitions. With `idle_timeout`, a partition whose last event was accepted more than that
/// long before the latest ingest clock is idle and holds nothing back until it sends again (its
/// events then follow the usual lateness rules). The watermark never moves back. One partition
/// (`""`) is plain bounded out-of-orderness.
#[derive(Debug, Clone)]
pub struct PartitionedWatermark {
    bound: Millis,
    idle_timeout: Option<Millis>,
    partitions: crate::hashing::HashMap<std::sync::Arc<str>, Mark>,
    /// The partition of the last event, and its mark's copy: events come in runs of one
    /// partition (every event, with one), so most find theirs here without hashing.
    last: Option<(std::sync::Arc<str>, Mark)>,
    clock: Option<i64>,
    current: Millis,
    /// The partitions known before any event (the spec lists them): never forgotten.
    known: crate::hashing::HashSet<std::sync::Arc<str>>,
    /// The other processes' watermark, for a pipeline shared by several ([`PLUS_INFINITY`]:
    /// none).
    floor: Millis,
}

impl PartitionedWatermark {
    /// A watermark of partitions that each trail their highest timestamp by `bound`.
    pub fn new(bound: Millis, idle_timeout: Option<Millis>) -> Self {
        Self::resume(bound, idle_timeout, MINUS_INFINITY, &[])
    }

    /// Continues from a checkpoint's watermark and partitions.
    pub fn resume(
        bound: Millis,
        idle_timeout: Option<Millis>,
        current: Millis,
        marks: &[PartitionMark],
    ) -> Self {
        let partitions = marks
            .iter()
            .map(|m| {
                let mark = Mark {
                    max_timestamp: m.max_timestamp,
                    last_seen: m.last_seen,
                    finished: m.finished,
                };
                (std::sync::Arc::from(m.name.as_str()), mark)
            })
            .collect();
        let clock = marks.iter().filter_map(|m| m.last_seen).max();
        PartitionedWatermark {
            bound,
            idle_timeout,
            partitions,
            last: None,
            clock,
            current,
            known: Default::default(),
            floor: PLUS_INFINITY,
        }
    }

    /// Partitions known before any of their events (the files a spec lists, the NATS subjects
    /// it names): each holds the watermark back from the start, not only from its first event,
    /// until it sends, ends, or (with an idle timeout) goes quiet for that long after the
    /// first clock. Those the checkpoint resumed from holds already are left as they are;
    /// declared ones are never forgotten, so a restart declares none again. Beyond
    /// [`MAX_PARTITIONS`], none is declared.
    pub fn declare(&mut self, names: &[String]) {
        self.settle();
        if names.len() > MAX_PARTITIONS {
            return;
        }
        for name in names {
            let name: std::sync::Arc<str> = name.as_str().into();
            if self.partitions.len() >= MAX_PARTITIONS {
                break;
            }
            self.partitions.entry(name.clone()).or_insert(Mark {
                max_timestamp: MINUS_INFINITY,
                last_seen: self.clock,
                finished: false,
            });
            self.known.insert(name);
        }
    }

    /// The current watermark.
    pub fn current(&self) -> Millis {
        self.current
    }

    /// Writes the cached mark of the last event's partition back.
    fn settle(&mut self) {
        if let Some((name, mark)) = self.last.take() {
            self.partitions.insert(name, mark);
        }
    }

    /// The partitions, for a checkpoint (sorted by name).
    pub fn marks(&self) -> Vec<PartitionMark> {
        let mut all = self.clone();
        all.settle();
        all.marks_settled()
    }

    fn marks_settled(&self) -> Vec<PartitionMark> {
        let mut marks: Vec<PartitionMark> = (self.partitions.iter())
            .map(|(name, mark)| PartitionMark {
                name: name.to_string(),
                max_timestamp: mark.max_timestamp,
                last_seen: mark.last_seen,
                finished: mark.finished,
            })
            .collect();
        marks.sort_by(|a, b| a.name.cmp(&b.name));
        marks
    }

    fn active(&self, mark: &Mark) -> bool {
        if mark.finished {
            return false;
        }
        match (self.idle_timeout, self.clock, mark.last_seen) {
            (Some(timeout), Some(clock), Some(seen)) => clock.saturating_sub(seen) <= timeout,
            _ => true,
        }
    }

    /// Moves to the minimum over active partitions if that is ahead; returns the new watermark.
    fn recompute(&mut self) -> Option<Millis> {
        let candidate = match (self.local(), self.floor) {
            (Some(local), floor) => local.min(floor),
            // Nothing here holds it back: the other processes' partitions decide.
            (None, floor) if floor < PLUS_INFINITY => floor,
            (None, _) => return None,
        };
        (candidate > self.current).then(|| {
            self.current = candidate;
            candidate
        })
    }

    /// The latest ingest clock seen, if any.
    pub fn clock_now(&self) -> Option<i64> {
        self.clock
    }

    /// The watermark of this process's own partitions: the minimum over the active ones, or
    /// `None` when every one is idle or ended (or there is none yet). What a process sharing a
    /// pipeline publishes for the others.
    pub fn local(&mut self) -> Option<Millis> {
        self.settle();
        (self.partitions.values())
            .filter(|mark| self.active(mark))
            .map(|mark| mark.max_timestamp.saturating_sub(self.bound))
            .min()
    }

    /// The other processes sharing the pipeline hold the watermark at most at `floor` (the
    /// minimum of their partitions' published watermarks; [`PLUS_INFINITY`]: alone): the
    /// watermark is the lower of that and this process's own, as a downstream task's is the
    /// minimum over its inputs. Returns the new watermark if it advanced.
    pub fn set_floor(&mut self, floor: Millis) -> Option<Millis> {
        if floor == self.floor {
            return None;
        }
        self.floor = floor;
        self.recompute()
    }

    /// Partition `partition` ended: it no longer holds the watermark back. Returns the new
    /// watermark if it advanced.
    pub fn finish_partition(&mut self, partition: &str) -> Option<Millis> {
        self.settle();
        let mark = self.partitions.get_mut(partition)?;
        mark.finished = true;
        self.recompute()
    }

    /// The ingest clock moved on (a batch accepted at `clock`): partitions may have gone idle,
    /// and those quiet for [`FORGET_AFTER_IDLE`] idle timeouts are forgotten. Returns the new
    /// watermark if it advanced.
    pub fn clock(&mut self, clock: i64) -> Option<Millis> {
        self.clock = Some(self.clock.map_or(clock, |c| c.max(clock)));
        let timeout = self.idle_timeout?;
        self.forget_quiet(timeout);
        self.recompute()
    }

    /// Forgets the partitions quiet (idle, or finished) for [`FORGET_AFTER_IDLE`] times
    /// `timeout` of ingest clock, so that a stream of partition names that come and go cannot
    /// fill the table for good. Idle or finished, they hold nothing back, so the watermark is
    /// the same without them; one that sends again joins as new, and holds the watermark back
    /// only once it is ahead of it (as an idle one does). Decided on the ingest clock alone,
    /// so a replay or a restart forgets the same partitions at the same point.
    fn forget_quiet(&mut self, timeout: Millis) {
        self.settle();
        let Some(clock) = self.clock else {
            return;
        };
        let quiet_for = timeout.saturating_mul(FORGET_AFTER_IDLE).max(timeout);
        let known = &self.known;
        self.partitions.retain(|name, mark| {
            // A partition never seen is seen from the first clock on: it can go idle.
            let seen = *mark.last_seen.get_or_insert(clock);
            known.contains(name) || clock.saturating_sub(seen) <= quiet_for
        });
    }

    /// Observes an event of `partition` at `timestamp`; returns the new watermark if it
    /// advanced, or refuses a partition beyond [`MAX_PARTITIONS`].
    pub fn observe(
        &mut self,
        partition: &str,
        timestamp: Millis,
    ) -> Result<Option<Millis>, PartitionRefused> {
        let clock = self.clock;
        // The common case: the last event's partition, with one partition and no idleness.
        if let Some((name, mark)) = &mut self.last
            && same_name(name, partition)
        {
            if timestamp <= mark.max_timestamp {
                mark.last_seen = clock.or(mark.last_seen);
                return Ok(None);
            }
            if self.partitions.is_empty()
                && self.idle_timeout.is_none()
                && self.floor == PLUS_INFINITY
            {
                mark.max_timestamp = timestamp;
                mark.last_seen = clock.or(mark.last_seen);
                let candidate = timestamp.saturating_sub(self.bound);
                return Ok((candidate > self.current).then(|| {
                    self.current = candidate;
                    candidate
                }));
            }
        }
        self.settle();
        if !self.partitions.contains_key(partition) {
            if partition.len() > MAX_PARTITION_NAME {
                return Err(PartitionRefused::TooLong(partition.len()));
            }
            if self.partitions.len() >= MAX_PARTITIONS {
                return Err(PartitionRefused::TooMany(partition.to_owned()));
            }
            let mark = Mark {
                max_timestamp: MINUS_INFINITY,
                last_seen: None,
                finished: false,
            };
            self.partitions.insert(partition.into(), mark);
        }
        let mark = self.partitions.get_mut(partition).expect("just ensured");
        let was_idle_or_behind = mark.max_timestamp.saturating_sub(self.bound) <= self.current;
        mark.max_timestamp = mark.max_timestamp.max(timestamp);
        mark.last_seen = clock.or(mark.last_seen);
        // Only a partition that was holding the watermark back (or just joined) can move it.
        let moved =
            if !was_idle_or_behind && self.partitions.len() > 1 && self.idle_timeout.is_none() {
                None
            } else {
                self.recompute()
            };
        // Keep this partition's mark at hand for its next event (alone, it is the whole
        // watermark: `partitions` is left empty while it is cached).
        let (name, mark) = (self.partitions)
            .remove_entry(partition)
            .expect("just ensured");
        self.last = Some((name, mark));
        Ok(moved)
    }

    /// Moves the watermark on by `ms` of wall clock the input was quiet for (never to plus
    /// infinity, which ends the input; not at all before the first event). Returns the new
    /// watermark if it advanced.
    pub fn advance_by(&mut self, ms: Millis) -> Option<Millis> {
        if self.current == MINUS_INFINITY || ms <= 0 {
            return None;
        }
        let advanced = self.current.saturating_add(ms).min(PLUS_INFINITY - 1);
        (advanced > self.current).then(|| {
            self.current = advanced;
            advanced
        })
    }

    /// Ends the input: the watermark becomes plus infinity.
    pub fn finish(&mut self) -> Millis {
        self.current = PLUS_INFINITY;
        self.current
    }
}

/// Whether two partition names are the same; the only partition's name, `""`, is compared
/// without a call to `memcmp` (once per event, it was 3 % of the router's time).
fn same_name(a: &str, b: &str) -> bool {
    a.len() == b.len() && (a.is_empty() || a == b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn trails_the_maximum_by_the_bound() {
        let mut wm = BoundedOutOfOrderness::new(5);
        assert_eq!(wm.current(), MINUS_INFINITY);
        assert_eq!(wm.observe(10), Some(5));
        assert_eq!(wm.observe(8), None);
        assert_eq!(wm.observe(20), Some(15));
        assert_eq!(wm.finish(), PLUS_INFINITY);
    }

    #[test]
    fn partitions_quiet_for_ten_idle_timeouts_are_forgotten_and_leave_room() {
        let mut wm = PartitionedWatermark::new(0, Some(100));
        wm.clock(0);
        for n in 0..MAX_PARTITIONS {
            wm.observe(&format!("p{n}"), 10).unwrap();
        }
        assert!(matches!(
            wm.observe("one-more", 10),
            Err(PartitionRefused::TooMany(_))
        ));
        wm.clock(1_000);
        assert_eq!(
            wm.marks().len(),
            MAX_PARTITIONS,
            "quiet for 10 timeouts: kept"
        );
        let before = wm.current();
        wm.clock(1_001);
        assert_eq!(
            wm.current(),
            before,
            "forgetting quiet partitions moves nothing"
        );
        assert!(wm.marks().is_empty());
        assert_eq!(wm.observe("steady", 50), Ok(Some(50)));
        assert_eq!(
            wm.observe("p1", 5),
            Ok(None),
            "a forgotten partition joins as new"
        );
        let names: Vec<String> = wm.marks().into_iter().map(|m| m.name).collect();
        assert_eq!(names, ["p1", "steady"]);
    }

    #[test]
    fn a_declared_partition_holds_the_watermark_back_from_the_start() {
        let names = ["a".to_owned(), "b".to_owned()];
        let mut undeclared = PartitionedWatermark::new(0, None);
        assert_eq!(
            undeclared.observe("a", 100),
            Ok(Some(100)),
            "b unknown: a alone"
        );
        let mut declared = PartitionedWatermark::new(0, None);
        declared.declare(&names);
        assert_eq!(declared.observe("a", 100), Ok(None), "b holds it back");
        assert_eq!(declared.observe("b", 50), Ok(Some(50)));
        // A restart resumes the marks; declaring again changes nothing.
        let mut resumed = PartitionedWatermark::resume(0, None, 50, &declared.marks());
        resumed.declare(&names);
        assert_eq!(resumed.marks(), declared.marks());
        assert_eq!(resumed.observe("b", 200), Ok(Some(100)));
    }

    #[test]
    fn a_declared_partition_goes_idle_from_the_first_clock_and_is_never_forgotten() {
        let mut wm = PartitionedWatermark::new(0, Some(100));
        wm.declare(&["quiet".to_owned()]);
        wm.clock(1_000);
        assert_eq!(wm.observe("busy", 500), Ok(None), "quiet holds it back");
        wm.clock(1_101);
        assert_eq!(
            wm.observe("busy", 600),
            Ok(Some(600)),
            "quiet idle 100 ms after the first clock"
        );
        wm.clock(1_000_000);
        let names: Vec<String> = wm.marks().into_iter().map(|m| m.name).collect();
        assert_eq!(names, ["quiet"], "busy forgotten, the declared one kept");
    }

    #[test]
    fn the_other_processes_floor_holds_the_watermark_back_and_lets_an_idle_one_follow() {
        let mut wm = PartitionedWatermark::new(0, Some(100));
        wm.declare(&["3".to_owned()]);
        assert_eq!(wm.set_floor(MINUS_INFINITY), None, "the others unheard of");
        wm.clock(0);
        assert_eq!(
            wm.observe("3", 500),
            Ok(None),
            "held at the others' minus infinity"
        );
        assert_eq!(wm.local(), Some(500));
        assert_eq!(wm.set_floor(200), Some(200));
        assert_eq!(
            wm.set_floor(900),
            Some(500),
            "its own partition holds it at 500"
        );
        // Its partition idle: it follows the others.
        wm.clock(200);
        assert_eq!(wm.local(), None);
        assert_eq!(wm.set_floor(1_500), Some(1_500));
        assert_eq!(wm.set_floor(1_000), None, "never back");
        assert_eq!(wm.current(), 1_500);
    }

    #[test]
    fn without_an_idle_timeout_a_quiet_partition_is_kept() {
        let mut wm = PartitionedWatermark::new(0, None);
        wm.clock(0);
        wm.observe("a", 10).unwrap();
        wm.observe("b", 20).unwrap();
        wm.clock(i64::MAX / 2);
        assert_eq!(wm.marks().len(), 2);
        assert_eq!(wm.current(), 10, "a holds the watermark back");
    }

    #[test]
    fn an_idle_advance_moves_the_watermark_on_never_back_nor_to_the_end() {
        let mut wm = PartitionedWatermark::new(5, None);
        assert_eq!(wm.advance_by(5), None, "nothing seen yet");
        assert_eq!(wm.observe("", 20), Ok(Some(15)));
        assert_eq!(wm.advance_by(100), Some(115), "an idle input moves it on");
        assert_eq!(
            wm.observe("", 110),
            Ok(None),
            "an event behind it does not move it back"
        );
        assert_eq!(
            wm.advance_by(i64::MAX),
            Some(PLUS_INFINITY - 1),
            "never to the end"
        );
        assert_eq!(wm.finish(), PLUS_INFINITY);
    }

    #[test]
    fn the_watermark_is_the_minimum_over_active_partitions() {
        let mut wm = PartitionedWatermark::new(0, Some(1_000));
        wm.clock(0);
        assert_eq!(wm.observe("a", 100), Ok(Some(100)));
        assert_eq!(
            wm.observe("b", 50),
            Ok(None),
            "b joins behind: held, not moved back"
        );
        assert_eq!(wm.observe("a", 300), Ok(None), "b holds it at 100");
        assert_eq!(wm.observe("b", 200), Ok(Some(200)));
        // b goes quiet: a second of ingest clock later it is idle, and a alone leads.
        wm.clock(500);
        assert_eq!(wm.observe("a", 400), Ok(None));
        assert_eq!(wm.clock(1_200), Some(400), "b idle for 1.2 s");
        assert_eq!(wm.observe("a", 500), Ok(Some(500)));
        // b rejoins behind the watermark: it holds nothing back that has passed.
        wm.clock(1_300);
        assert_eq!(wm.observe("b", 250), Ok(None));
        assert_eq!(wm.current(), 500);
        assert_eq!(wm.observe("a", 900), Ok(None), "b (at 250) holds it again");
        let marks = wm.marks();
        let resumed = PartitionedWatermark::resume(0, Some(1_000), wm.current(), &marks);
        assert_eq!(resumed.marks(), marks);
        assert_eq!(resumed.current(), 500);
    }

    #[test]
    fn partitions_are_capped() {
        let mut wm = PartitionedWatermark::new(0, None);
        for i in 0..MAX_PARTITIONS {
            assert!(wm.observe(&i.to_string(), 1).is_ok());
        }
        assert!(wm.observe("one more", 1).is_err());
        let long = "p".repeat(MAX_PARTITION_NAME + 1);
        let mut fresh = PartitionedWatermark::new(0, None);
        assert_eq!(
            fresh.observe(&long, 1),
            Err(PartitionRefused::TooLong(MAX_PARTITION_NAME + 1))
        );
        assert!(wm.observe("7", 2).is_ok(), "a known one is still taken");
    }

    proptest! {
        #[test]
        fn one_partition_is_plain_bounded_out_of_orderness(timestamps in proptest::collection::vec(-1_000_000i64..1_000_000, 0..200), bound in 0i64..10_000) {
            let mut plain = BoundedOutOfOrderness::new(bound);
            let mut partitioned = PartitionedWatermark::new(bound, None);
            for ts in timestamps {
                prop_assert_eq!(partitioned.observe("", ts).unwrap(), plain.observe(ts));
            }
        }

        #[test]
        fn never_moves_backwards(timestamps in proptest::collection::vec(-1_000_000i64..1_000_000, 0..200), bound in 0i64..10_000) {
            let mut wm = BoundedOutOfOrderness::new(bound);
            let mut last = wm.current();
            for ts in timestamps {
                wm.observe(ts);
                prop_assert!(wm.current() >= last);
                prop_assert!(wm.current() <= ts.max(last));
                last = wm.current();
            }
        }
    }
}
