//! A cheap clock, for deciding how much work to run between two looks at
//! the mailbox (loop blocks, spans), for how long a worker remembers that
//! thieves were asking, and for how often a busy worker tests the messages
//! in flight.

/// A cheap clock: the time-stamp counter (not under Miri, which cannot
/// run `rdtsc`).
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    // SAFETY: `rdtsc` has no preconditions on x86_64 (it only reads a
    // counter; it is an `unsafe fn` in older Rust only).
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
}

/// Elsewhere, nanoseconds from the monotonic clock (a few nanoseconds to
/// read where the platform maps it to user space, and read once per
/// block, so only loops of slow iterations read it often). A clock that
/// always read the same would let every block grow to `MAX_BLOCK`, which
/// would leave a thief waiting for thousands of slow iterations.
#[cfg(any(not(target_arch = "x86_64"), miri))]
#[inline(always)]
pub(crate) fn ticks() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // Truncation is harmless: only differences are used, with wrapping.
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}
