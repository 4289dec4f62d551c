//! A worker as a thief: choosing a victim, sending it a steal request,
//! and taking the reply. The steal loop (`run_loop.rs`) calls these from
//! another file, maybe another codegen unit, on every idle round: they are
//! `#[inline]` so that the calls cost nothing.

use super::Worker;
use crate::core::steal::{Reply, VictimSet};
use crate::core::task::TaskRef;

/// Which workers a steal request may go to (see `Worker::pick_victim_among`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Candidates {
    /// Only workers whose deque holds tasks.
    Queued,
    /// Those, and any other worker when none seems to hold tasks.
    AnyIfNoneQueued,
}

impl Worker {
    /// A uniform random number below `n` (xorshift64, multiply-shift).
    fn random_below(&self, n: usize) -> usize {
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        ((u128::from(x) * n as u128) >> 64) as usize
    }

    /// A random worker not in `tried` and not idle-parked, one whose deque
    /// holds tasks if any seems to. A request waits in a victim's mailbox
    /// until that victim's next task boundary; sent to a worker with
    /// nothing queued it only waits there to be forwarded, and on many
    /// cores it could wait at several such workers before it reached the
    /// one with work (the chain of producers in a producer-consumer
    /// program, on 16 cores). Queue lengths are hints, read without
    /// ordering; a request that finds the queue empty after all is
    /// forwarded as before.
    #[inline]
    pub(super) fn pick_victim(&self, tried: &VictimSet) -> Option<usize> {
        self.pick_victim_among(tried, Candidates::AnyIfNoneQueued)
    }

    /// `pick_victim`, limited to workers whose deque holds tasks unless
    /// `candidates` lets it fall back on any worker.
    fn pick_victim_among(&self, tried: &VictimSet, candidates: Candidates) -> Option<usize> {
        let shared = &*self.shared;
        let fallback = candidates == Candidates::AnyIfNoneQueued;
        let (mut any, mut any_seen) = (None, 0);
        let (mut busy, mut busy_seen) = (None, 0);
        // One pass, one uniform choice per class (reservoir sampling).
        for i in 0..shared.num_threads() {
            if tried.contains(i) || shared.sleep.is_sleeping(i) {
                continue;
            }
            if fallback {
                any_seen += 1;
                if self.random_below(any_seen) == 0 {
                    any = Some(i);
                }
            }
            if shared.deques[i].peek().queued_estimate() > 0 {
                busy_seen += 1;
                if self.random_below(busy_seen) == 0 {
                    busy = Some(i);
                }
            }
        }
        busy.or(any)
    }

    #[inline]
    pub(super) fn send_request(&self) {
        let tried = VictimSet::only(self.index);
        if let Some(v) = self.pick_victim(&tried) {
            self.post_request(v, tried);
        }
    }

    /// The request of an idle worker that has parked (and woke): only to
    /// a worker whose deque holds tasks. Its earlier requests may all have
    /// been declined before any worker had tasks to give, and a worker
    /// that only runs the tasks it queued (a scope's owner) shares none
    /// unasked. Idle workers do not ask each other, so a runtime with
    /// nothing queued stays asleep.
    #[cold]
    pub(super) fn send_request_where_queued(&self) {
        let tried = VictimSet::only(self.index);
        if let Some(v) = self.pick_victim_among(&tried, Candidates::Queued) {
            self.post_request(v, tried);
        }
    }

    pub(super) fn post_request(&self, v: usize, tried: VictimSet) {
        self.in_flight.set(true);
        let half = self.policy.get().steal_half();
        self.own_counters.requests_sent.bump();
        let req = self.steal_request(v, tried, half);
        self.shared.mailboxes[v].post(req);
        self.shared.sleep.wake(v);
    }

    /// Collects the answer to our request: stolen tasks go on our deque and
    /// the newest is returned to run.
    #[inline]
    pub(super) fn take_reply(&self) -> Option<TaskRef> {
        match self.shared.replies[self.index].take() {
            Reply::Pending => None,
            Reply::Declined => {
                self.in_flight.set(false);
                None
            }
            Reply::Work(mut list) => {
                self.in_flight.set(false);
                let d = self.owner.enter();
                let mut n = 0u64;
                while !list.is_null() {
                    // SAFETY: the list came through our reply slot.
                    let (task, rest) = unsafe { TaskRef::pop_list(list) };
                    d.push(task);
                    list = rest;
                    n += 1;
                }
                let mut policy = self.policy.get();
                policy.record_theft(n, self.tasks_run.get());
                self.policy.set(policy);
                self.own_counters.tasks_stolen.add(n);
                let newest = d.pop_above(0);
                // As after a spawn (`push`): a sleeper sends no request.
                while !d.is_empty() && self.shared.sleep.sleepers_after_queueing() {
                    if !self.share_oldest(&d) {
                        break;
                    }
                }
                newest
            }
        }
    }
}
