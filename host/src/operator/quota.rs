//! The budgets a pipeline's operator code shares over all its instances (shards, stages,
//! versions), so that one pipeline cannot take what the others need:
//!
//! - [`CpuQuota`] (`[sandbox] cpu`): the share of a core. Each guest call's wall time is charged
//!   to a token bucket that refills at the quota (at most one second's worth saved up); a call
//!   that finds the bucket in debt waits until the debt is paid. A [`CallMeter`] charges a call
//!   while it runs (at each epoch tick), so that a long call waits too, mid-call, instead of
//!   running at a full core until it returns. The pipeline is slowed, never killed: it falls
//!   behind, and its ingest pushes back (`429`) as for any slow pipeline.
//! - [`MemoryPool`] (`[sandbox] total_memory`): the linear memory of all instances together.
//!   Each instance reserves what it grows to; a growth past the pool traps the call (its events
//!   become dead letters with the reason), and an instance that cannot get its initial memory is
//!   not made.
//! - [`StateQuota`] (`[state] max_keys`, `max_bytes`): the state the pipeline's operators keep.
//!   It counts what the last checkpoint committed (exact, from the store) plus what calls wrote
//!   after their threads' barriers for it; a call whose writes would pass it is refused like an
//!   operator error, so its events become dead letters with the reason, and its writes are
//!   dropped.
//!
//! Depends on nothing else of the crate; the Wasm guest charges them, the pipeline owns them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The longest single wait: a waiting call looks at the bucket again at least this often (other
/// shards charge it meanwhile).
const MAX_WAIT: Duration = Duration::from_millis(100);

/// Which of the pipeline's state quotas a call's writes would pass: the call is refused (its
/// events become dead letters with this reason) and its writes dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaExceeded {
    /// The writes would add keys past `[state] max_keys`.
    #[error(
        "the pipeline's state holds its quota of {limit} keys ([state] max_keys): this write \
         would add more"
    )]
    Keys {
        /// The quota, in keys (scopes).
        limit: u64,
    },
    /// The writes would add bytes past `[state] max_bytes`.
    #[error(
        "the pipeline's state holds its quota of {limit} bytes ([state] max_bytes): this write \
         would add more"
    )]
    Bytes {
        /// The quota, in encoded bytes.
        limit: u64,
    },
}

/// A pipeline's CPU budget for operator code.
#[derive(Debug)]
pub struct CpuQuota {
    /// Cores' worth per second of wall clock.
    cores: f64,
    bucket: Mutex<Bucket>,
    /// Operator time charged, in ns.
    used_ns: AtomicU64,
    /// Time calls waited for the budget, in ns.
    throttled_ns: AtomicU64,
    /// Set when the pipeline stops: no call waits any more.
    released: AtomicBool,
    used: metrics::Counter,
    throttled: metrics::Counter,
}

#[derive(Debug)]
struct Bucket {
    /// Operator time (ns) that may be used now; negative: a debt.
    balance_ns: f64,
    refilled: Instant,
}

impl CpuQuota {
    /// A budget of `cores` cores (e.g. 0.25), charged to the counters `used` and `throttled`
    /// (seconds of operator time, seconds waited).
    pub fn new(cores: f64, used: metrics::Counter, throttled: metrics::Counter) -> CpuQuota {
        CpuQuota {
            cores,
            bucket: Mutex::new(Bucket {
                balance_ns: cores * 1e9,
                refilled: Instant::now(),
            }),
            used_ns: AtomicU64::new(0),
            throttled_ns: AtomicU64::new(0),
            released: AtomicBool::new(false),
            used,
            throttled,
        }
    }

    /// The budget, in cores.
    pub fn cores(&self) -> f64 {
        self.cores
    }

    /// Operator time used so far.
    pub fn used(&self) -> Duration {
        Duration::from_nanos(self.used_ns.load(Ordering::Relaxed))
    }

    /// Time calls waited for the budget so far.
    pub fn throttled(&self) -> Duration {
        Duration::from_nanos(self.throttled_ns.load(Ordering::Relaxed))
    }

    /// The debt now (zero if there is none), after refilling for the time passed.
    fn debt(&self) -> Duration {
        let mut bucket = self.bucket.lock().expect("cpu quota lock");
        let now = Instant::now();
        let passed = now.duration_since(bucket.refilled).as_nanos() as f64;
        bucket.balance_ns = (bucket.balance_ns + passed * self.cores).min(self.cores * 1e9);
        bucket.refilled = now;
        if bucket.balance_ns >= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_nanos((-bucket.balance_ns / self.cores) as u64)
    }

    /// Lifts the budget for good (the pipeline is stopping): a call waiting for it goes on
    /// within [`MAX_WAIT`], and none waits after. Calls are still charged.
    pub fn release(&self) {
        self.released.store(true, Ordering::Relaxed);
    }

    /// Waits until the budget has room for a call, or it is released.
    pub fn wait_turn(&self) {
        loop {
            let debt = self.debt();
            if debt.is_zero() || self.released.load(Ordering::Relaxed) {
                return;
            }
            let asleep = Instant::now();
            std::thread::sleep(debt.min(MAX_WAIT));
            self.count_wait(asleep.elapsed());
        }
    }

    /// Counts a wait as long as it was (a sleep overshoots what it asked for, more so on a busy
    /// machine), and the counter by whole milliseconds of the total, so that many short waits
    /// are not each rounded down to nothing.
    fn count_wait(&self, waited: Duration) {
        let ns = waited.as_nanos() as u64;
        let before = self.throttled_ns.fetch_add(ns, Ordering::Relaxed);
        self.throttled
            .increment(units_passed(before, ns, 1_000_000));
    }

    /// Charges a call (or a part of one) that took `took`; the counter goes by whole
    /// microseconds of the total, as `count_wait`'s.
    pub fn charge(&self, took: Duration) {
        let ns = took.as_nanos() as u64;
        let before = self.used_ns.fetch_add(ns, Ordering::Relaxed);
        self.used.increment(units_passed(before, ns, 1_000));
        let mut bucket = self.bucket.lock().expect("cpu quota lock");
        bucket.balance_ns -= ns as f64;
    }
}

/// How many whole `unit`s a total passes when `added` goes onto `before`: a counter kept in
/// whole units this way adds up to the total's, however small each addition.
fn units_passed(before: u64, added: u64, unit: u64) -> u64 {
    (before + added) / unit - before / unit
}

/// One call's account with a [`CpuQuota`], kept while the call runs: at each tick the time
/// since the last is charged, and a quota in debt pauses the call until it is paid. Without it
/// a call would be charged only when it returned, and a long one (a batch of slow events, or a
/// runaway loop up to its time limit) would run at a full core per shard, however small the
/// quota, taking the cores other pipelines need.
#[derive(Debug)]
pub struct CallMeter {
    /// Where the time not yet charged began.
    mark: Instant,
    /// The call's run time so far, its waits for the quota left out.
    ran: Duration,
}

impl CallMeter {
    /// Waits until `quota` has room for a call, then starts the call's clock.
    pub fn start(quota: &CpuQuota) -> CallMeter {
        quota.wait_turn();
        CallMeter {
            mark: Instant::now(),
            ran: Duration::ZERO,
        }
    }

    /// At a tick inside the call: charges the time since the last tick and, unless the call
    /// has now run for `limit` (false: it should be interrupted), waits while the quota is in
    /// debt. The wait is not run time: it neither counts towards `limit` nor is charged.
    pub fn tick(&mut self, quota: &CpuQuota, limit: Duration) -> bool {
        self.charge(quota);
        if self.ran >= limit {
            return false;
        }
        quota.wait_turn();
        self.mark = Instant::now();
        true
    }

    /// Charges the rest of the call and returns its run time.
    pub fn finish(mut self, quota: &CpuQuota) -> Duration {
        self.charge(quota);
        self.ran
    }

    fn charge(&mut self, quota: &CpuQuota) {
        let now = Instant::now();
        let took = now.duration_since(self.mark);
        quota.charge(took);
        self.ran += took;
        self.mark = now;
    }
}

/// The linear memory all of a pipeline's instances may hold together.
#[derive(Debug)]
pub struct MemoryPool {
    limit: usize,
    used: AtomicU64,
    gauge: metrics::Gauge,
}

impl MemoryPool {
    /// A pool of `limit` bytes, whose use is shown on `gauge`.
    pub fn new(limit: usize, gauge: metrics::Gauge) -> MemoryPool {
        MemoryPool {
            limit,
            used: AtomicU64::new(0),
            gauge,
        }
    }

    /// The pool's size.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Reserves `bytes` if the pool has room for them.
    pub fn try_reserve(&self, bytes: usize) -> bool {
        let bytes = bytes as u64;
        let reserved = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used + bytes <= self.limit as u64).then_some(used + bytes)
            });
        if let Ok(before) = reserved {
            self.gauge.set((before + bytes) as f64);
        }
        reserved.is_ok()
    }

    /// Gives `bytes` back (an instance dropped, or a growth that failed).
    pub fn release(&self, bytes: usize) {
        let after = self.used.fetch_sub(bytes as u64, Ordering::AcqRel) - bytes as u64;
        self.gauge.set(after as f64);
    }
}

/// The state a pipeline's operators may keep: scopes and bytes.
#[derive(Debug)]
pub struct StateQuota {
    max_scopes: Option<u64>,
    max_bytes: Option<u64>,
    counts: Mutex<StateCounts>,
}

/// What a [`StateQuota`] counts, in scopes and bytes (either may go negative while calls
/// shrink state).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StateDelta {
    /// Scopes added.
    pub scopes: i64,
    /// Encoded bytes added.
    pub bytes: i64,
}

impl std::ops::AddAssign for StateDelta {
    fn add_assign(&mut self, other: StateDelta) {
        self.scopes += other.scopes;
        self.bytes += other.bytes;
    }
}

impl std::ops::SubAssign for StateDelta {
    fn sub_assign(&mut self, other: StateDelta) {
        self.scopes -= other.scopes;
        self.bytes -= other.bytes;
    }
}

#[derive(Debug, Default)]
struct StateCounts {
    /// What the last checkpoint committed (exact, from the store).
    committed: StateDelta,
    /// What calls wrote that no committed checkpoint holds yet, over all threads: written after
    /// each thread's last barrier whose checkpoint committed.
    uncommitted: StateDelta,
}

impl StateCounts {
    /// The state counted now: the committed totals and what calls wrote since.
    fn used(&self) -> StateDelta {
        let mut used = self.committed;
        used += self.uncommitted;
        used
    }
}

thread_local! {
    /// What calls on this thread wrote since it last handed its changes over (a shard at each
    /// barrier; the collector, whose stages' state is checkpointed there, at each commit).
    static WRITTEN: std::cell::Cell<StateDelta> = const {
        std::cell::Cell::new(StateDelta { scopes: 0, bytes: 0 })
    };
}

impl StateQuota {
    /// A quota of `max_scopes` scopes and `max_bytes` bytes (either may be absent).
    pub fn new(max_scopes: Option<u64>, max_bytes: Option<u64>) -> StateQuota {
        StateQuota {
            max_scopes,
            max_bytes,
            counts: Mutex::default(),
        }
    }

    /// Scopes and bytes counted now.
    pub fn used(&self) -> (u64, u64) {
        let used = self.counts().used();
        (used.scopes.max(0) as u64, used.bytes.max(0) as u64)
    }

    /// What calls on the current thread wrote since it last asked: a thread asks as it hands
    /// its changes over for a checkpoint, which then holds those writes.
    pub fn handed_over() -> StateDelta {
        WRITTEN.take()
    }

    /// A checkpoint committed: the state is now exactly `scopes` and `bytes`, which hold the
    /// writes `held` (what every thread handed over for it, from [`StateQuota::handed_over`]).
    /// Writes made since their threads' barriers (the shards go on while a checkpoint is
    /// written) are counted on top.
    pub fn checkpointed(&self, scopes: u64, bytes: u64, held: StateDelta) {
        let mut counts = self.counts();
        counts.uncommitted -= held;
        counts.committed = StateDelta {
            scopes: scopes as i64,
            bytes: bytes as i64,
        };
    }

    /// Admits a call's writes, which change the state by `scopes` scopes and `bytes` bytes, or
    /// says which quota they would pass. Writes that shrink the state are always admitted.
    pub fn admit(&self, scopes: i64, bytes: i64) -> Result<(), QuotaExceeded> {
        let mut counts = self.counts();
        let used = counts.used();
        let over = |limit: Option<u64>, used: i64, delta: i64| {
            limit.filter(|limit| delta > 0 && used + delta > *limit as i64)
        };
        if let Some(limit) = over(self.max_scopes, used.scopes, scopes) {
            return Err(QuotaExceeded::Keys { limit });
        }
        if let Some(limit) = over(self.max_bytes, used.bytes, bytes) {
            return Err(QuotaExceeded::Bytes { limit });
        }
        let delta = StateDelta { scopes, bytes };
        counts.uncommitted += delta;
        let mut written = WRITTEN.get();
        written += delta;
        WRITTEN.set(written);
        Ok(())
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, StateCounts> {
        // The counts are plain numbers, consistent after any panic.
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_beyond_the_budget_wait_until_it_refills() {
        let quota = CpuQuota::new(0.5, metrics::Counter::noop(), metrics::Counter::noop());
        // One second's worth (0.5 s) is saved up: the first call does not wait.
        let started = Instant::now();
        quota.wait_turn();
        assert!(started.elapsed() < Duration::from_millis(50));
        // 0.7 s used: 0.2 s of debt, paid at 0.5 s per second: about 0.4 s of waiting.
        quota.charge(Duration::from_millis(700));
        let started = Instant::now();
        quota.wait_turn();
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(350) && waited < Duration::from_millis(900),
            "{waited:?}"
        );
        assert!(quota.throttled() >= Duration::from_millis(350));
        assert_eq!(quota.used(), Duration::from_millis(700));
    }

    /// Busy for `time` without yielding (a call's run between ticks).
    fn spin_for(time: Duration) {
        let started = Instant::now();
        while started.elapsed() < time {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_long_call_is_held_to_the_quota_while_it_runs() {
        let quota = CpuQuota::new(0.2, metrics::Counter::noop(), metrics::Counter::noop());
        let started = Instant::now();
        let mut meter = CallMeter::start(&quota);
        // 0.4 s of running in 20 ms steps, at 0.2 cores with 0.2 s saved up: running for the
        // whole wall time T may take 0.2 + 0.2 T, so T is at least 1 s, the call waiting about
        // 0.6 s at its ticks, mid-call (before, it ran to the end at a full core).
        for _ in 0..20 {
            spin_for(Duration::from_millis(20));
            assert!(meter.tick(&quota, Duration::from_secs(10)));
        }
        let ran = meter.finish(&quota);
        let took = started.elapsed();
        assert!(
            ran >= Duration::from_millis(400) && ran < Duration::from_millis(600),
            "{ran:?}"
        );
        assert!(
            took >= Duration::from_millis(850) && quota.throttled() >= Duration::from_millis(400),
            "took {took:?}, waited {:?}",
            quota.throttled()
        );
        // What was charged is the run time, the waits left out (with them, about 1 s).
        assert!(
            quota.used() < Duration::from_millis(600),
            "{:?}",
            quota.used()
        );
    }

    /// A thousand charges of 999 ns make 999 whole microseconds, not 0; one of 2.5 units
    /// passes 2 or 3 boundaries depending on where it starts.
    #[test]
    fn counters_go_by_whole_units_of_the_total() {
        let mut total = 0;
        let mut counted = 0;
        for _ in 0..1_000 {
            counted += units_passed(total, 999, 1_000);
            total += 999;
        }
        assert_eq!(counted, 999);
        assert_eq!(units_passed(0, 2_500, 1_000), 2);
        assert_eq!(units_passed(600, 2_500, 1_000), 3);
    }

    /// Released (the pipeline stops), a quota deep in debt lets a waiting call go on within
    /// one wait's step, and no later call waits.
    #[test]
    fn a_released_quota_holds_no_call() {
        let quota = std::sync::Arc::new(CpuQuota::new(
            0.01,
            metrics::Counter::noop(),
            metrics::Counter::noop(),
        ));
        quota.charge(Duration::from_secs(10)); // 1,000 s of debt at 0.01 cores
        let (done, waited) = std::sync::mpsc::channel();
        {
            let quota = std::sync::Arc::clone(&quota);
            std::thread::spawn(move || {
                let started = Instant::now();
                quota.wait_turn();
                let _ = done.send(started.elapsed());
            });
        }
        std::thread::sleep(Duration::from_millis(150));
        quota.release();
        // Held (not released), the call would wait 1,000 s: this fails rather than hangs.
        let waited = waited
            .recv_timeout(Duration::from_secs(5))
            .expect("released in time");
        assert!(
            waited >= Duration::from_millis(150) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        let started = Instant::now();
        let mut meter = CallMeter::start(&quota);
        assert!(meter.tick(&quota, Duration::from_secs(10)));
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_call_is_stopped_at_its_limit_of_run_time_not_of_waiting() {
        let quota = CpuQuota::new(0.1, metrics::Counter::noop(), metrics::Counter::noop());
        let started = Instant::now();
        let mut meter = CallMeter::start(&quota);
        let mut ticks = 0;
        while meter.tick(&quota, Duration::from_millis(150)) {
            spin_for(Duration::from_millis(10));
            ticks += 1;
            assert!(ticks < 100, "never stopped");
        }
        // Stopped after 150 ms of running (15 steps of 10 ms, fewer if the thread was
        // descheduled in one), though the wall clock says more: the last wait began at 140 ms
        // run, which 0.1 s saved up and 0.1 cores cover only after 0.4 s.
        assert!(
            ticks <= 15,
            "{ticks} steps of 10 ms before the limit of 150 ms"
        );
        assert!(meter.finish(&quota) >= Duration::from_millis(150));
        assert!(
            started.elapsed() >= Duration::from_millis(380),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_pool_gives_out_no_more_than_its_limit_and_takes_back_what_is_released() {
        let pool = MemoryPool::new(100, metrics::Gauge::noop());
        assert!(pool.try_reserve(60));
        assert!(!pool.try_reserve(50));
        assert!(pool.try_reserve(40));
        assert_eq!(pool.used(), 100);
        pool.release(60);
        assert!(pool.try_reserve(50));
        assert_eq!(pool.used(), 90);
    }

    #[test]
    fn state_past_its_quota_is_refused_and_shrinking_always_admitted() {
        let quota = StateQuota::new(Some(3), Some(100));
        quota.checkpointed(2, 60, StateDelta::default());
        assert!(quota.admit(1, 30).is_ok());
        let refused = quota.admit(1, 1).unwrap_err();
        assert_eq!(refused, QuotaExceeded::Keys { limit: 3 });
        assert!(refused.to_string().contains("3 keys"), "{refused}");
        let refused = quota.admit(0, 11).unwrap_err();
        assert_eq!(refused, QuotaExceeded::Bytes { limit: 100 });
        assert!(refused.to_string().contains("100 bytes"), "{refused}");
        assert!(quota.admit(-1, -50).is_ok());
        assert!(quota.admit(1, 10).is_ok());
        assert_eq!(quota.used(), (3, 50));
    }

    #[test]
    fn writes_after_a_barrier_count_on_top_of_the_checkpoint_committed_later() {
        let quota = StateQuota::new(Some(10), None);
        let _ = StateQuota::handed_over();
        quota.admit(2, 20).unwrap();
        // The shard hands its changes over (they hold those two scopes), then goes on.
        let held = StateQuota::handed_over();
        assert_eq!(
            held,
            StateDelta {
                scopes: 2,
                bytes: 20
            }
        );
        quota.admit(3, 30).unwrap();
        // Another thread (another shard) wrote one scope before its own barrier.
        std::thread::scope(|s| {
            s.spawn(|| {
                quota.admit(1, 5).unwrap();
                let theirs = StateQuota::handed_over();
                // The checkpoint commits: the store holds all three scopes (and no fourth:
                // one of the first call's writes replaced a stored scope, say).
                let mut both = held;
                both += theirs;
                quota.checkpointed(3, 25, both);
            });
        });
        assert_eq!(
            quota.used(),
            (6, 55),
            "the three written since the barrier are kept"
        );
        assert_eq!(
            StateQuota::handed_over(),
            StateDelta {
                scopes: 3,
                bytes: 30
            }
        );
    }
}
