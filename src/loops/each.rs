//! Per-iteration dataflow (`depends_on_each`): a part runs the
//! iterations whose promise is fulfilled and parks the others, bucket by
//! bucket, on their promise.

use super::body::Body;
use super::frame::{poll, PartFrame};
use super::job::deposit;
use crate::core::task::TaskRef;
use crate::core::worker::Worker;
use crate::dataflow::delayed;
use crate::dataflow::loop_promise::LoopDeps;
use crate::loops::merge::{self, Out};
use std::ops::Range;

/// The loop of a `depends_on_each` part: before an iteration of a bucket
/// not yet seen fulfilled, check its promise; an unfulfilled bucket's
/// iterations become a part parked on it, queued as the task `new_part`
/// makes of iterations `from..to` and their accumulator's place (`part.rs`
/// passes it: it runs parts, which run this).
#[inline(always)]
pub(super) fn run_iterations_when_ready<B: Body>(
    part: &PartFrame<'_, B>,
    each: &LoopDeps,
    w: &Worker,
    mut acc: B::Acc,
    new_part: impl Fn(usize, usize, Out<B::Acc>) -> TaskRef,
) -> B::Acc {
    let (job, f) = (part.job, &part.frame);
    let mailbox = w.mailbox();
    let (start, stride) = (job.start, job.stride);
    // Iterations below this are in buckets already seen fulfilled.
    let mut ready_until = 0;
    let mut k = f.resume.get();
    while k < f.stop.get() {
        let i = start + k * stride;
        if k >= ready_until {
            let bucket = each.bucket_of(i);
            let bucket_end = (each.bucket_end(bucket) - start).div_ceil(stride);
            if each.is_ready(bucket) {
                ready_until = bucket_end;
            } else {
                let (parked_until, folded) =
                    park_bucket(part, each, w, bucket, k..bucket_end, acc, &new_part);
                acc = folded;
                k = parked_until;
                continue;
            }
        }
        k += 1;
        f.next.set(k);
        f.resume.set(k);
        acc = job.body.fold(acc, i);
        if mailbox.waiting() != 0 {
            poll(w, f);
        }
    }
    acc
}

/// Turns iterations `from..bucket_end` (all in unfulfilled `bucket`, cut
/// at the part's stop) into a part parked on the bucket's promise (the task
/// `new_part` makes of them); the current part goes on after them. Returns
/// where the parked run ends and the accumulator to go on with.
#[cold]
#[inline(never)]
pub(super) fn park_bucket<B: Body>(
    part: &PartFrame<'_, B>,
    each: &LoopDeps,
    w: &Worker,
    bucket: usize,
    Range {
        start: from,
        end: bucket_end,
    }: Range<usize>,
    acc: B::Acc,
    new_part: &impl Fn(usize, usize, Out<B::Acc>) -> TaskRef,
) -> (usize, B::Acc) {
    let job = part.job;
    // The only call here that may panic comes first, before anything
    // changes: a panic leaves the part as it was.
    let fresh = B::MERGES.then(|| part.frame.while_starting(|| job.body.identity()));
    // A loop run by `identity` answers thieves from older parts only: this
    // one gives nothing away while starting, so `from` is still its own.
    let end = bucket_end.min(part.frame.stop.get());
    debug_assert!(
        end > from,
        "iterations {from}..{end} of a bucket were given away while its part was starting"
    );
    part.frame.next.set(end);
    part.frame.resume.set(end);
    job.finish.add_part();
    let (parked_out, acc) = match fresh {
        Some(fresh) => {
            // Close what this part folded so far, then place the parked
            // iterations between it and what this part folds next.
            let (before, after) = merge::split(part.out.get());
            deposit(job, before, Some(acc));
            let (parked, rest) = merge::split(after);
            part.out.set(rest);
            (parked, fresh)
        }
        None => (Out::ROOT, acc),
    };
    let task = new_part(from, end, parked_out);
    delayed::delay::<B>(&w.shared, task, [each.dep(bucket)]);
    (end, acc)
}
