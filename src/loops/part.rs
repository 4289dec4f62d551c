//! A part of a loop: running it (its iterations in blocks sized to a time
//! budget, with the mailbox checked between blocks), splitting it for a
//! thief, and queueing it as a task.

use super::body::Body;
use super::cancelled::CANCELLED_WHY;
use super::each::run_iterations_when_ready;
use super::frame::{poll, PartFrame};
use super::job::{deposit, LoopJob};
use crate::core::clock::ticks;
use crate::core::closure_task;
use crate::core::split::{older_loops_have_spare, LoopFrame};
use crate::core::task::TaskRef;
use crate::core::worker::Worker;
use crate::loops::merge::{self, Out};
use std::cell::Cell;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The `LoopFrame::split` of a `PartFrame<B>`.
///
/// # Safety
/// `part` is a live `PartFrame<B>` (the frame's `part` pointer).
pub(super) unsafe fn split_part<B: Body>(part: *const (), from: usize, to: usize) -> TaskRef {
    // SAFETY: per the caller; only `Cell`s and shared references are
    // reached through it, as by the part itself.
    let part = unsafe { &*part.cast::<PartFrame<'_, B>>() };
    // Relaxed: this part is unfinished, so the count cannot reach zero
    // before the new part's own decrement, which follows in the count's
    // modification order.
    part.job.finish.add_part();
    let out = if B::MERGES {
        let (left, right) = merge::split(part.out.get());
        part.out.set(left);
        right
    } else {
        Out::ROOT
    };
    Part::new(part.job, from, to, out).into_task()
}

/// Runs iterations `[from, to)` of `job` on `w` as one part, splittable by
/// thieves, and deposits its accumulator into `out`. The caller counts the
/// part finished.
pub(super) fn run_part<B: Body>(
    job: &LoopJob<B>,
    w: &Worker,
    from: usize,
    to: usize,
    out: Out<B::Acc>,
) {
    let part = PartFrame {
        frame: LoopFrame::new(from, to, split_part::<B>),
        job,
        out: Cell::new(out),
    };
    part.frame.set_part(std::ptr::from_ref(&part).cast::<()>());
    w.enter_loop(&part.frame);
    if w.shared.sleep.has_sleepers() {
        w.share_loop(&part.frame);
    }
    let acc = w.nested(|| iterate(&part, w));
    w.leave_loop(&part.frame);
    deposit(job, part.out.get(), acc);
}

/// Runs the part's iterations, surviving panics: a panicking iteration is
/// recorded and skipped, and the rest go on from a fresh accumulator (the
/// loop's result is not used once a panic is recorded).
pub(super) fn iterate<B: Body>(part: &PartFrame<'_, B>, w: &Worker) -> Option<B::Acc> {
    let job = part.job;
    loop {
        let identity = || part.frame.while_starting(|| job.body.identity());
        let acc = match catch_unwind(AssertUnwindSafe(identity)) {
            Ok(acc) => acc,
            Err(p) => {
                // Nothing to fold into: the rest of this part cannot run.
                job.record_panic(p);
                part.frame.resume.set(part.frame.stop.get());
                return None;
            }
        };
        let run = AssertUnwindSafe(|| match &job.each {
            None => run_iterations(part, w, acc),
            Some(each) => run_iterations_when_ready(part, each, w, acc, |from, to, out| {
                Part::new(job, from, to, out).into_task()
            }),
        });
        let resumed_at = part.frame.resume.get();
        match catch_unwind(run) {
            Ok(acc) => return Some(acc),
            Err(p) => {
                job.record_panic(p);
                // `resume` is past the iteration that panicked. A panic
                // outside any iteration (none started) would only repeat:
                // give the part up rather than spin.
                if part.frame.resume.get() == resumed_at {
                    part.frame.resume.set(part.frame.stop.get());
                    return None;
                }
            }
        }
    }
}

/// Iterations the hot loop may claim at once, at most.
pub(super) const MAX_BLOCK: usize = 4096;
/// About how long (in time-stamp-counter ticks on x86_64, roughly CPU
/// cycles; nanoseconds elsewhere) a block of iterations should take. A
/// block grows only while it takes under half of this, so a block of
/// uniform iterations takes at most about sixteen times that (the growth
/// factor): a thief waits about ten microseconds at 3 GHz for a running
/// loop to answer, longer when iterations suddenly slow down (the next
/// block is sized from the last).
pub(super) const BLOCK_TICKS: u64 = 4096;

/// The hot loop. Iterations run in blocks: a block is claimed (`next`
/// moves past it, so no split can give it away), run with nothing but the
/// loop test and the body per iteration, and followed by one relaxed load
/// of the mailbox's count. The block starts at one iteration and grows
/// sixteenfold while blocks take under half of `BLOCK_TICKS` (halving
/// when they take more than twice that), so a loop of long iterations
/// answers a thief after each one, a loop of tiny ones pays for the check
/// (and the clock read) once per thousands of them, and a short inner
/// loop reads the clock only a few times.
/// `stop` is re-read per block because a split, made by a nested loop's
/// check too, lowers it; `resume` is written when a block ends or an
/// iteration unwinds (see `ResumeAt`), so a panic loses no iteration.
#[inline(always)]
pub(super) fn run_iterations<B: Body>(
    part: &PartFrame<'_, B>,
    w: &Worker,
    mut acc: B::Acc,
) -> B::Acc {
    let (job, f) = (part.job, &part.frame);
    let mailbox = w.mailbox();
    let (start, stride) = (job.start, job.stride);
    let mut k = f.resume.get();
    let mut block = 1;
    // Spans: everything left in one call while an older loop on this
    // worker can feed thieves (an outer loop's iterations) and none asked
    // lately. Otherwise, this part being what a thief would get (and a
    // worker may go idle at any moment), they start at one chunk and
    // double: a thief that asks after a call began waits at most about as
    // long as the part has run, not for the whole part, and the part costs
    // a few calls, not one per chunk. One worker has no thieves.
    let mut hungry = B::SPANS
        && w.shared.num_threads() > 1
        && (w.thieves_asked_lately() || !older_loops_have_spare(f));
    let mut span = 1usize;
    // One clock read per block: each block's end is the next one's start.
    let mut began = ticks();
    loop {
        if B::SPANS {
            // A span runs uninterrupted: a thief already asking gets its
            // share first, and so do sleeping workers, which send no
            // requests (after the span would be too late for a large loop
            // to reach them all).
            if mailbox.waiting() != 0 {
                poll(w, f);
                hungry = true;
            }
            if w.shared.sleep.has_sleepers() {
                // Shares come from the oldest loop here that has some, so
                // this loop's spans stay whole while an outer one feeds
                // the sleepers; when this loop is the one (`hungry` from
                // the start), its spans start short anyway.
                w.share_loop_with_sleepers(f);
            }
        }
        let stop = f.stop.get();
        if k >= stop {
            return acc;
        }
        let end = if B::SPANS {
            if hungry {
                let end = stop.min(k.saturating_add(span));
                span = span.saturating_mul(2);
                end
            } else {
                stop
            }
        } else {
            stop.min(k.saturating_add(block))
        };
        f.next.set(end);
        acc = run_block(job.body.target(), &f.resume, start, stride, k..end, acc);
        k = end;
        let now = ticks();
        block = next_block(block, now.wrapping_sub(began));
        began = now;
        if mailbox.waiting() != 0 {
            poll(w, f);
            hungry = B::SPANS;
        }
    }
}

/// Runs iterations `ks` (claimed) of a loop of `body`, and leaves `resume`
/// at their end (or just past one that unwinds).
///
/// A function of its own, never inlined, so `body` arrives as an argument:
/// a shared reference argument tells the compiler that the closures'
/// captured values cannot change during the call, so it loads them once
/// per block. The loop itself is the body's [`Body::fold_block`].
#[inline(never)]
pub(super) fn run_block<T: Body>(
    body: &T,
    resume: &Cell<usize>,
    start: usize,
    stride: usize,
    ks: Range<usize>,
    acc: T::Acc,
) -> T::Acc {
    body.fold_block(resume, start, stride, ks, acc)
}

/// The next block size after a block of `block` iterations took `took`
/// ticks.
#[inline(always)]
pub(super) fn next_block(block: usize, took: u64) -> usize {
    if took < BLOCK_TICKS / 2 {
        (block * 16).min(MAX_BLOCK)
    } else if took > BLOCK_TICKS * 2 {
        (block / 2).max(1)
    } else {
        block
    }
}

/// A part queued as a task (split off, parked, or a spawned loop's first).
/// Dropped unrun (its promise broken, or its runtime shut down), it still
/// counts itself finished and reports the cancellation as the loop's panic.
pub(super) struct Part<B: Body> {
    pub(super) job: *const LoopJob<B>,
    pub(super) from: usize,
    pub(super) to: usize,
    pub(super) out: Out<B::Acc>,
    pub(super) ran: bool,
}

// SAFETY: a part only reaches its job through `&LoopJob<B>`, which is Sync.
unsafe impl<B: Body> Send for Part<B> {}

impl<B: Body> Part<B> {
    pub(super) fn new(job: *const LoopJob<B>, from: usize, to: usize, out: Out<B::Acc>) -> Self {
        Self {
            job,
            from,
            to,
            out,
            ran: false,
        }
    }

    pub(super) fn into_task(self) -> TaskRef {
        // SAFETY: an unfinished part keeps its job alive.
        let name = unsafe { &*self.job }.name;
        let task = closure_task::new_detached(move || {
            let mut part = self;
            part.ran = true;
            let w = Worker::current().expect("selvedge: loop parts run on workers");
            // SAFETY: the job lives until every part has finished, and this
            // one finishes only below.
            let job = unsafe { &*part.job };
            run_part(job, w, part.from, part.to, part.out);
            // SAFETY: this part is finished, once.
            unsafe { LoopJob::finish_part(part.job) };
        });
        task.set_span_name(name);
        task
    }
}

impl<B: Body> Drop for Part<B> {
    fn drop(&mut self) {
        if self.ran {
            return;
        }
        // SAFETY: an unfinished part keeps its job alive.
        let job = unsafe { &*self.job };
        if self.from == self.to {
            job.record_panic(Box::new(format!(
                "selvedge: an empty parallel loop was cancelled: {CANCELLED_WHY}"
            )));
        } else {
            job.record_cancelled(self.from..self.to);
        }
        deposit(job, self.out, None);
        // SAFETY: this part is finished, once.
        unsafe { LoopJob::finish_part(self.job) };
    }
}
