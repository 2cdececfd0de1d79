//! [`this_thread`]: the CPU time the calling thread has used, where the platform tells it
//! (Linux, from `/proc/thread-self/schedstat`, in nanoseconds). The kernel charges a running
//! thread's time at each scheduler tick (4 ms here) or switch, so a reading may lag by one
//! tick: fine for a benchmark's seconds, not for timing short work. For measurements (`weir
//! bench` compares operators by their shard threads' time, which a slower router does not
//! hide), not for limits. Depends on nothing in Weir.

use std::time::Duration;

/// The CPU time the calling thread has used so far; `None` where the platform does not say
/// (or says 0: older kernels without scheduler statistics print zeros).
pub fn this_thread() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos = text.split_ascii_whitespace().next()?.parse::<u64>().ok()?;
    (nanos > 0).then(|| Duration::from_nanos(nanos))
}

/// The CPU time the calling thread uses while running `work`, with what it returns.
pub fn of<T>(work: impl FnOnce() -> T) -> (T, Option<Duration>) {
    let before = this_thread();
    let outcome = work();
    let used = this_thread()
        .zip(before)
        .map(|(after, before)| after.saturating_sub(before));
    (outcome, used)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that spins for 50 ms of wall time used about that much CPU (give or take a
    /// tick); one that sleeps, almost none. Where the platform does not say, nothing is said.
    #[test]
    fn a_busy_thread_uses_cpu_and_a_sleeping_one_does_not() {
        if this_thread().is_none() {
            assert_eq!(of(|| ()).1, None);
            return;
        }
        let ((), busy) = of(|| {
            let started = std::time::Instant::now();
            while started.elapsed() < Duration::from_millis(50) {
                std::hint::black_box(0);
            }
        });
        let busy = busy.expect("the platform says");
        assert!(busy >= Duration::from_millis(5), "{busy:?}");
        assert!(busy <= Duration::from_millis(500), "{busy:?}");
        let ((), asleep) = of(|| std::thread::sleep(Duration::from_millis(50)));
        assert!(
            asleep.expect("the platform says") < busy,
            "{asleep:?} vs {busy:?}"
        );
    }
}
