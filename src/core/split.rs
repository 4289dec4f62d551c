//! The hook through which a worker splits the parallel loop it is running.
//!
//! A worker answering a steal request (or starting a loop while others
//! sleep) may give away the back half of a loop part it runs. The worker
//! does not know what a loop is: each running part registers a
//! [`LoopFrame`] on its worker (`Worker::enter_loop`), a small record of
//! the iterations it has not started and a type-erased function that
//! turns given-up iterations into a task. The loops layer fills the frame
//! in; this layer only reads the counts and calls the function.
//!
//! Frames are touched only by their worker's thread (they are `Cell`s on
//! the stack of the part), so no ordering is involved: a split happens at
//! the part's mailbox check, between iterations, or from code nested in
//! an iteration (then `polling` is false and the split rounds so the part
//! keeps its running iteration).

use crate::core::task::TaskRef;
use std::cell::Cell;

/// A running loop part, as the worker sees it: the iterations it has not
/// started yet, and how to split them off. Lives on the stack of the part.
pub(crate) struct LoopFrame {
    /// The first iteration the running part has not claimed: splits give
    /// away only from here on. The hot loop claims a block of iterations
    /// at a time (see `run_iterations`).
    pub(crate) next: Cell<usize>,
    /// The first iteration not yet started (at most `next`): where the
    /// part resumes after a panicking iteration.
    pub(crate) resume: Cell<usize>,
    /// One past the last iteration of this part (lowered by splits).
    pub(crate) stop: Cell<usize>,
    /// The loop part this one runs inside, on the same worker.
    older: Cell<*const LoopFrame>,
    /// The part is between two iterations (at its mailbox check), not in
    /// the middle of one.
    pub(crate) polling: Cell<bool>,
    /// The part is computing an accumulator (`identity`), before the
    /// iterations it would fold into it: it gives none away meanwhile.
    starting: Cell<bool>,
    /// The worker's deque top when the part started: queued tasks at or
    /// above it are younger than the loop, those below older.
    deque_top: Cell<u64>,
    /// The whole part this frame is a field of (a `PartFrame<B>`), with
    /// the provenance of the whole: `split` reaches the job through it.
    part: Cell<*const ()>,
    /// Makes a part of the job for iterations `[from, to)`, which the frame
    /// has just given up, from the frame's `part`.
    split: unsafe fn(*const (), usize, usize) -> TaskRef,
}

impl LoopFrame {
    /// A frame for a part running iterations `[from, to)`, which `split`
    /// splits. Its `part` is set with [`LoopFrame::set_part`] once the
    /// part it belongs to has its final address.
    pub(crate) fn new(
        from: usize,
        to: usize,
        split: unsafe fn(*const (), usize, usize) -> TaskRef,
    ) -> Self {
        Self {
            next: Cell::new(from),
            resume: Cell::new(from),
            stop: Cell::new(to),
            older: Cell::new(std::ptr::null()),
            polling: Cell::new(false),
            starting: Cell::new(false),
            deque_top: Cell::new(0),
            part: Cell::new(std::ptr::null()),
            split,
        }
    }

    /// Points the frame at the whole part it is a field of, the argument
    /// its `split` function gets.
    pub(crate) fn set_part(&self, part: *const ()) {
        self.part.set(part);
    }

    pub(crate) fn older(&self) -> *const LoopFrame {
        self.older.get()
    }

    /// Links the frame under `older` as it starts, the worker's deque top
    /// being `deque_top`.
    pub(crate) fn start(&self, older: *const LoopFrame, deque_top: u64) {
        self.older.set(older);
        self.deque_top.set(deque_top);
    }

    /// Whether this loop started after a task queued at `position`: then
    /// that task is the older work, and a thief should get it first.
    pub(crate) fn is_younger_than(&self, position: u64) -> bool {
        position < self.deque_top.get()
    }

    /// How many iterations to give one of `thieves` thieves: an equal
    /// share with this worker when it is between iterations; when it is in
    /// the middle of one (a long outer iteration), an equal share of the
    /// unstarted ones among the thieves and it, rounded up, so that even a
    /// last unstarted iteration goes to an idle worker.
    ///
    /// A part computing its accumulator gives nothing: a thief would have
    /// to compute one too, and when `identity` runs a loop of its own (it
    /// answers thieves from there), every part split off meanwhile would
    /// start with the same long `identity` and be split in turn, down to
    /// parts of one iteration each. The thief gets that inner loop's
    /// iterations instead, which is the work holding this part up.
    pub(crate) fn share_for(&self, thieves: usize) -> usize {
        if self.starting.get() {
            return 0;
        }
        let unstarted = self.stop.get().saturating_sub(self.next.get());
        if self.polling.get() {
            unstarted / (thieves + 1)
        } else {
            unstarted.div_ceil(thieves + 1)
        }
    }

    /// Computes the part's accumulator with `identity`, the part marked as
    /// starting meanwhile (see `share_for`), even if `identity` unwinds.
    pub(crate) fn while_starting<R>(&self, identity: impl FnOnce() -> R) -> R {
        struct Started<'a>(&'a Cell<bool>);
        impl Drop for Started<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        self.starting.set(true);
        let _started = Started(&self.starting);
        identity()
    }

    /// Gives up the last `give` iterations as a new part.
    pub(crate) fn split_back(&self, give: usize) -> TaskRef {
        let to = self.stop.get();
        let from = to - give;
        self.stop.set(from);
        // SAFETY: `split` belongs to the type of the frame's `part`, which
        // is live while the frame is, and the iterations `[from, to)` were
        // unstarted and are now given up.
        unsafe { (self.split)(self.part.get(), from, to) }
    }
}

/// For a steal request: the oldest loop part on the worker's stack (from
/// `top` down) that has iterations to give one of `thieves` thieves, and
/// how many.
pub(crate) fn pick_for_thieves<'f>(
    top: *const LoopFrame,
    thieves: usize,
) -> Option<(&'f LoopFrame, usize)> {
    let mut chosen = None;
    let mut frame = top;
    // SAFETY: the worker's loop frames are live: each is unregistered
    // before its part's stack frame ends.
    while let Some(f) = unsafe { frame.as_ref() } {
        let give = f.share_for(thieves);
        if give > 0 {
            chosen = Some((f, give));
        }
        frame = f.older();
    }
    chosen
}

/// Whether a loop part older than `frame`, on the same worker, has
/// iterations it could give a thief (so thieves need nothing of `frame`'s).
pub(crate) fn older_loops_have_spare(frame: &LoopFrame) -> bool {
    pick_for_thieves(frame.older(), 1).is_some()
}

/// For a sleeping worker, as `frame`'s part starts: half of the oldest
/// loop part on this worker that has iterations to give (as a thief's
/// request would get), `frame`'s own if no older one has.
/// Returns the part's task and its number of iterations.
pub(crate) fn split_for_sleeper(frame: &LoopFrame) -> Option<(TaskRef, usize)> {
    // The starting part is between iterations; older ones are in the
    // middle of one (the iteration that started this loop).
    frame.polling.set(true);
    let chosen = pick_for_thieves(frame, 1);
    frame.polling.set(false);
    chosen.map(|(f, give)| (f.split_back(give), give))
}
