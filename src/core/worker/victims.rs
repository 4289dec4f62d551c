//! A worker as a victim: answering steal requests (with the back of a
//! running loop or tasks from the old end of its deque, else forwarding
//! them), sharing with sleeping workers, and handing everything off before
//! it blocks.

use super::hooks::NO_WORKER;
use super::Worker;
use crate::core::clock::ticks;
use crate::core::deque::Deque;
use crate::core::rescue::OwnerGuard;
use crate::core::split::{self, LoopFrame};
use crate::core::steal::StealRequest;
use crate::core::task::{Header, TaskRef};

impl Worker {
    /// Shares the oldest task with a parked worker (see `share_oldest`).
    #[cold]
    #[inline(never)]
    pub(super) fn share_with_sleepers(&self) {
        self.share_oldest(&self.owner.enter());
    }

    /// A loop part starting while workers sleep: sleeping workers send no
    /// requests, so hand one of them half of the oldest loop here that has
    /// iterations to give, through the injector (as `push` does with
    /// tasks).
    #[cold]
    pub(crate) fn share_loop(&self, frame: &LoopFrame) {
        if !self.shared.injector.is_empty() {
            return; // the previous share is not taken yet
        }
        self.give_sleeper_a_share(frame);
    }

    /// A span loop about to run a span (which nothing interrupts) while
    /// workers sleep: hands each sleeper not yet served a share now, half
    /// of what is left each time (of the oldest loop here with iterations
    /// to give), and wakes them. Each woken worker does the same with its
    /// share as it starts, so one large loop reaches every worker within a
    /// few wake-ups instead of a few spans; one share at a time, as
    /// [`Worker::share_loop`] gives, would reach a new worker only when a
    /// span ends. A share still in the injector counts as served.
    #[cold]
    pub(crate) fn share_loop_with_sleepers(&self, frame: &LoopFrame) {
        let sleepers = self.shared.sleep.sleepers();
        let mut pending = self.shared.injector.len();
        while pending < sleepers && self.give_sleeper_a_share(frame) {
            pending += 1;
        }
    }

    /// Splits a share off the oldest loop here with iterations to give,
    /// puts it in the injector and wakes a sleeper for it; `false` if no
    /// loop had any to give.
    fn give_sleeper_a_share(&self, frame: &LoopFrame) -> bool {
        let Some((task, iterations)) = split::split_for_sleeper(frame) else {
            return false;
        };
        self.last_demand.set(ticks());
        self.own_counters.loop_splits.bump();
        self.trace_loop_split(&task, NO_WORKER, iterations as u64);
        self.shared.injector.push(task);
        self.shared.sleep.wake_any();
        true
    }

    /// Moves the oldest task to the injector and wakes a parked worker for
    /// it, unless as many shares as there are sleepers (one at least) are
    /// still there: each sleeper gets a task of its own, as this worker may
    /// next block where nobody sees it. Returns whether it shared one.
    #[cold]
    pub(super) fn share_oldest(&self, d: &OwnerGuard<'_, Deque<TaskRef>>) -> bool {
        let pending = self.shared.injector.len();
        if pending != 0 && pending >= self.shared.sleep.sleepers() {
            return false;
        }
        let Some(task) = d.steal_one() else {
            return false;
        };
        self.last_demand.set(ticks());
        self.trace_given(&task, NO_WORKER);
        self.shared.injector.push(task);
        // Unconditional: `wake_any`'s fence is the Dekker pair of the
        // sleeper's re-check of the injector.
        self.shared.sleep.wake_any();
        true
    }

    /// Answers every waiting steal request (see `answer_with`).
    #[cold]
    pub(crate) fn answer_requests(&self) {
        self.answer_with(&self.owner.enter());
    }

    /// Answers every waiting steal request: with the back of the oldest
    /// loop running here or a task from the old end of the deque,
    /// whichever is older, else by forwarding the request.
    #[cold]
    pub(super) fn answer_with(&self, d: &OwnerGuard<'_, Deque<TaskRef>>) {
        let shared = &*self.shared;
        let mailbox = &shared.mailboxes[self.index];
        while let Some(req) = mailbox.take() {
            self.last_demand.set(ticks());
            // The oldest work goes first: a running loop's iterations
            // before the tasks queued since it started (ready tasks its
            // iterations fulfilled, say), but after older tasks. This
            // thief and the others still waiting share the loop.
            let thieves = 1 + mailbox.waiting().min(shared.num_threads());
            let from_loop = split::pick_for_thieves(self.loop_top.get(), thieves)
                .filter(|(f, _)| d.oldest().is_none_or(|pos| !f.is_younger_than(pos)));
            let work = if let Some((frame, give)) = from_loop {
                shared.counters[self.index].loop_splits.bump();
                let part = frame.split_back(give);
                self.trace_loop_split(&part, req.thief as u64, give as u64);
                Some((part.into_list(std::ptr::null_mut()), 1))
            } else {
                take_for(d, req.half)
            };
            self.reply(req, work, self.index);
        }
    }

    /// Sends `work` to the thief of `req`, or, without work, forwards the
    /// request on behalf of `victim` (this worker, or the one it rescues).
    pub(super) fn reply(
        &self,
        req: StealRequest,
        work: Option<(*mut Header, usize)>,
        victim: usize,
    ) {
        let shared = &*self.shared;
        let c = &shared.counters[self.index];
        match work {
            Some((list, n)) => {
                // SAFETY: the list is ours until the send below.
                unsafe { self.trace_list_given(list, req.thief as u64) };
                if !shared.replies[req.thief].send_work(list) {
                    // SAFETY: the thief refused the list: it is still ours.
                    unsafe { self.requeue_refused(req.thief, list) };
                    return;
                }
                c.requests_answered.bump();
                c.tasks_given.add(n as u64);
                self.trace_steal_answered(&req, n);
                shared.sleep.wake(req.thief);
            }
            None => {
                c.requests_declined.bump();
                self.forward(req, victim);
            }
        }
    }

    fn forward(&self, mut req: StealRequest, declined_by: usize) {
        req.tried.insert(declined_by);
        let next = self.pick_victim(&req.tried);
        self.trace_steal_declined(&req, next);
        match next {
            Some(v) => {
                self.shared.mailboxes[v].post(req);
                self.shared.sleep.wake(v);
            }
            None => {
                self.shared.replies[req.thief].send_declined();
                self.shared.sleep.wake(req.thief);
            }
        }
    }

    /// Hands every task queued here and every waiting steal request to
    /// other workers, before the caller blocks (`block_in_place`).
    /// Requests are answered (or forwarded) first; the tasks left go to the
    /// injector, and a parked worker is woken for each, up to one per
    /// worker. Loop parts running here are not split.
    pub(crate) fn hand_off(&self) {
        let shared = &*self.shared;
        let mut moved = 0usize;
        {
            let d = self.owner.enter();
            self.answer_with(&d);
            while let Some(task) = d.steal_one() {
                self.trace_given(&task, NO_WORKER);
                shared.injector.push(task);
                moved += 1;
            }
        }
        for _ in 0..moved.min(shared.num_threads()) {
            if !shared.sleep.wake_any() {
                break;
            }
        }
    }
}

/// One task or half the deque, as a thief asked, linked oldest first.
pub(super) fn take_for(
    d: &OwnerGuard<'_, Deque<TaskRef>>,
    half: bool,
) -> Option<(*mut Header, usize)> {
    if half {
        let mut list = std::ptr::null_mut();
        // Newest first, each prepended: the list runs oldest first, and the
        // thief, pushing in list order, keeps the victim's order.
        let n = d.steal_half(|t| list = t.into_list(list));
        (n > 0).then_some((list, n))
    } else {
        d.steal_one()
            .map(|t| (t.into_list(std::ptr::null_mut()), 1))
    }
}
