//! Cache hints: asking the CPU to fetch memory a thread will read (or drop) shortly, so that
//! its waits on memory overlap instead of coming one after another. Events are made on the
//! router's core, read on a shard's, and dropped back on the router's, so their first touch on
//! each core waits on memory. A hint reads nothing into the program and never faults, whatever
//! the address: these functions are safe to call with any pointer. On CPUs other than x86-64
//! they do nothing.
//!
//! Depends on nothing in Weir; anything may use it.

/// Asks the CPU to fetch the cache line holding `at` into all levels of its cache.
#[allow(unsafe_code)]
#[inline]
pub fn line<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it reads nothing into the program and never faults,
    // whatever the address; SSE, which it needs, is part of every x86-64 CPU.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Asks the CPU to fetch each cache line of the `bytes` bytes from `start`: from the first
/// byte's, a line at a time, and the last byte's (the start is rarely at a line's start).
#[inline]
pub fn lines(start: *const u8, bytes: usize) {
    for at in (0..bytes).step_by(64).chain(bytes.checked_sub(1)) {
        line(start.wrapping_add(at));
    }
}
