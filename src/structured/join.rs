//! `join`: fork-join for two closures. The second one is offered to
//! thieves as a stack job (no allocation) while the caller runs the first.

use crate::core::pool::on_worker;
use crate::core::unwind;
use crate::core::worker::Until;
use crate::structured::stack_job::StackJob;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

/// Runs `a` and `b`, potentially in parallel, and returns both results. `b`
/// is offered to idle workers while the caller runs `a`; if nobody took it,
/// the caller runs it next, in place. Both closures may borrow.
///
/// When the calling worker already has tasks queued for thieves and none
/// is asking, `b` is not offered at all: the caller runs `a` then `b`
/// directly, which costs little more than two calls. Deep recursion thus
/// pays for offering work only near its top, where thieves take it.
/// ([`crate::WorkerStats::joins_inlined`] counts these joins.)
///
/// If either panics, `join` still waits for the other, then resumes the
/// panic (`a`'s if both panicked).
///
/// ```
/// fn sum(v: &[u64]) -> u64 {
///     if v.len() <= 1024 {
///         return v.iter().sum();
///     }
///     let (l, r) = v.split_at(v.len() / 2);
///     let (a, b) = selvedge::join(|| sum(l), || sum(r));
///     a + b
/// }
/// let v: Vec<u64> = (0..100_000).collect();
/// assert_eq!(sum(&v), v.iter().sum());
/// ```
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    on_worker(|w| {
        if w.may_inline_join() {
            w.count_inlined_join();
            let ra = catch_unwind(AssertUnwindSafe(a));
            let rb = w.nested(|| catch_unwind(AssertUnwindSafe(b)));
            return settle(ra, rb);
        }
        let job_b = StackJob::new(b, w.index, &w.shared);
        // SAFETY: `job_b` stays in this frame until it was taken back, or
        // its latch is set (waited for below on every path: a's panic is
        // caught first).
        let pos = w.push(unsafe { job_b.as_task() });
        // `a` always runs here, as the caller's own code; `b` runs as
        // nested code wherever it runs (see `Worker::nested`), so it
        // behaves alike on this worker and on a thief's.
        let ra = catch_unwind(AssertUnwindSafe(a));
        let rb = if w.take_back(pos, job_b.header()).is_some() {
            w.count_task_run();
            // SAFETY: taken back: nobody else runs it.
            w.nested(|| unsafe { job_b.run_here() })
        } else {
            w.wait_until(Until::Latch(job_b.latch()));
            // SAFETY: the latch is set.
            unsafe { job_b.take_result() }
        };
        settle(ra, rb)
    })
}

/// Both results, or the first panic (`a`'s if both panicked). On a panic
/// the other side's value or payload is dropped before the panic is
/// resumed: a destructor that panicked while this one unwinds would abort
/// the process.
#[inline(always)]
fn settle<RA, RB>(ra: std::thread::Result<RA>, rb: std::thread::Result<RB>) -> (RA, RB) {
    match (ra, rb) {
        (Ok(ra), Ok(rb)) => (ra, rb),
        (Err(p), other) => {
            unwind::drop_or_report("the other side of a panicking join", other);
            resume_unwind(p)
        }
        (Ok(ra), Err(p)) => {
            unwind::drop_or_report("the other side of a panicking join", ra);
            resume_unwind(p)
        }
    }
}
