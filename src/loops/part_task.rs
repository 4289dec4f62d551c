//! A part queued as a task, and what a cancelled part reports: the loop
//! panics naming every cancelled iteration.

use super::body::Body;
use super::job::{deposit, LoopJob};
use super::part::run_part;
use crate::core::closure_task;
use crate::core::task::TaskRef;
use crate::core::worker::Worker;
use crate::loops::merge::Out;
use std::ops::Range;

/// Why a loop part is cancelled (the part cannot tell which).
pub(super) const CANCELLED_WHY: &str =
    "a dependency was dropped unfulfilled, or the runtime shut down";

/// How many ranges of cancelled iterations a loop's message names before it
/// sums up the rest: a loop of a million iterations whose every other
/// iteration was cancelled still gets a message of one line.
pub(super) const CANCELLED_RANGES_NAMED: usize = 8;

/// The cancelled parts of a loop so far, as iteration numbers: the panic
/// payload of a loop while it runs, turned into [`cancelled_message`] when
/// it ends.
pub(super) struct CancelledParts(pub(super) Vec<Range<usize>>);

/// The message of a loop whose iterations `parts` (iteration numbers `k`,
/// for index `start + k * stride`; disjoint, in any order) were cancelled:
/// the indices as sorted ranges, adjacent parts joined, e.g. "iterations
/// 3..=5, 9, 12..=20"; past [`CANCELLED_RANGES_NAMED`] ranges the rest is
/// counted instead.
pub(super) fn cancelled_message(
    start: usize,
    stride: usize,
    mut parts: Vec<Range<usize>>,
) -> String {
    use std::fmt::Write;
    parts.sort_unstable_by_key(|ks| ks.start);
    let mut runs: Vec<Range<usize>> = Vec::with_capacity(parts.len());
    for ks in parts {
        match runs.last_mut() {
            Some(last) if last.end >= ks.start => last.end = last.end.max(ks.end),
            _ => runs.push(ks),
        }
    }
    let index = |k: usize| start + k * stride;
    let mut list = String::new();
    for (n, ks) in runs.iter().take(CANCELLED_RANGES_NAMED).enumerate() {
        if n > 0 {
            list.push_str(", ");
        }
        let (first, last) = (index(ks.start), index(ks.end - 1));
        // Writing to a String cannot fail.
        let _ = if first == last {
            write!(list, "{first}")
        } else {
            write!(list, "{first}..={last}")
        };
    }
    if let Some(rest) = runs.get(CANCELLED_RANGES_NAMED..).filter(|r| !r.is_empty()) {
        let more: usize = rest.iter().map(ExactSizeIterator::len).sum();
        let ranges = rest.len();
        let _ = write!(
            list,
            " and {more} more iteration{} in {ranges} range{}",
            if more == 1 { "" } else { "s" },
            if ranges == 1 { "" } else { "s" },
        );
    }
    let total: usize = runs.iter().map(ExactSizeIterator::len).sum();
    let step = if stride > 1 {
        format!(" (stride {stride})")
    } else {
        String::new()
    };
    let (noun, verb) = if total == 1 {
        ("iteration", "was")
    } else {
        ("iterations", "were")
    };
    format!("selvedge: parallel loop {noun} {list}{step} {verb} cancelled: {CANCELLED_WHY}")
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
        #[cfg(feature = "trace")]
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
        #[cfg(feature = "trace")]
        task.set_trace_name(name);
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
