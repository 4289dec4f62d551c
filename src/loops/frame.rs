//! A running part's frame: what a worker may split off it (the core's
//! loop frame, with the part's job and where its accumulator goes), and
//! the mailbox check between its iterations.

use super::body::Body;
use super::job::LoopJob;
use crate::core::split::LoopFrame;
use crate::core::worker::Worker;
use crate::loops::merge::Out;
use std::cell::Cell;

/// A loop frame with what its part needs to split: the job and where its
/// accumulator goes.
pub(super) struct PartFrame<'j, B: Body> {
    pub(super) frame: LoopFrame,
    pub(super) job: &'j LoopJob<B>,
    pub(super) out: Cell<Out<B::Acc>>,
}

/// Between two iterations: a thief is asking.
#[cold]
#[inline(never)]
pub(super) fn poll(w: &Worker, frame: &LoopFrame) {
    frame.polling.set(true);
    w.answer_requests();
    frame.polling.set(false);
}
