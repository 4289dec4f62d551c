//! Steal requests: what a thief sends, where it goes, how the answer comes
//! back, and how a thief chooses between stealing one task and half a deque.
//!
//! A thief has at most one request in flight. The request travels through
//! victims' mailboxes (MPSC queues); a victim with work answers through the
//! thief's single-slot [`ReplySlot`]; a victim without work forwards the
//! request to a victim not yet tried, and the last one to decline writes
//! [`Reply::Declined`] into the slot. So every request ends in the thief's
//! slot exactly once, with tasks or without.
//!
//! A thief that takes other work while its request travels (a task from
//! the injector) *withdraws* the request ([`ReplySlot::withdraw`]): that
//! task may run for long, even wait for the very tasks the request would
//! bring, and tasks in a reply slot are out of every other worker's reach.
//! An answer with work that finds the request withdrawn is refused
//! ([`ReplySlot::send_work`] returns `false`); its sender queues the tasks
//! where any worker finds them and ends the request with
//! [`ReplySlot::send_declined`].

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::sync::{AtomicPtr, AtomicUsize, Ordering};

/// Most workers a runtime may have: the width of [`VictimSet`].
pub(crate) const MAX_WORKERS: usize = 256;

/// A set of worker indices, used for the victims a request already tried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VictimSet([u64; MAX_WORKERS / 64]);

impl VictimSet {
    /// The set holding only `worker`.
    pub fn only(worker: usize) -> Self {
        let mut s = Self::default();
        s.insert(worker);
        s
    }

    /// Adds `worker`.
    pub fn insert(&mut self, worker: usize) {
        self.0[worker / 64] |= 1 << (worker % 64);
    }

    /// Whether `worker` is in the set.
    pub fn contains(&self, worker: usize) -> bool {
        self.0[worker / 64] & (1 << (worker % 64)) != 0
    }
}

/// A request for work, sent by `thief` and forwarded between victims.
#[derive(Clone, Copy, Debug)]
pub struct StealRequest {
    /// The worker that wants work and owns the reply slot.
    pub thief: usize,
    /// Workers that declined (and the thief itself).
    pub tried: VictimSet,
    /// Ask for half the victim's deque rather than one task.
    pub half: bool,
    /// The request's arrow in a trace, from thief to victims.
    #[cfg(feature = "trace")]
    pub flow: u64,
}

/// What a thief finds in its reply slot.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply<T> {
    /// Nothing yet: the request is still travelling.
    Pending,
    /// Every victim declined.
    Declined,
    /// A victim sent work: the head of an intrusive list of tasks.
    Work(*mut T),
}

/// A one-slot channel from whichever victim answers to the thief.
///
/// Only one request per thief is in flight, so there is only ever one
/// answer per request; the slot needs no queue. It holds null (no answer
/// yet), a withdrawal (the thief stopped waiting; no answer yet), the
/// declined mark, or a task list. The thief's withdrawal and a victim's
/// answer with work are compare-exchanges from null, so exactly one of them
/// happens first: either the thief finds the work when it withdraws, or
/// the victim finds the withdrawal and keeps its work.
#[derive(Debug)]
pub struct ReplySlot<T> {
    slot: AtomicPtr<T>,
}

// SAFETY: the slot only moves pointers between threads (with release/acquire
// ordering) and never dereferences them; sending what they point to is the
// business of the code that builds and consumes them (task lists are made of
// `TaskRef`s, which are Send).
unsafe impl<T> Send for ReplySlot<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for ReplySlot<T> {}

impl<T> Default for ReplySlot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> ReplySlot<T> {
    /// Marks "every victim declined". Never a valid task address: task
    /// blocks are aligned far beyond 2.
    fn declined() -> *mut T {
        std::ptr::without_provenance_mut(1)
    }

    /// Marks "the thief withdrew its request" (see the module docs).
    fn withdrawn() -> *mut T {
        std::ptr::without_provenance_mut(2)
    }

    /// An empty slot.
    pub fn new() -> Self {
        Self {
            slot: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Victim side: hand `work` (never null) to the thief. Returns `false`,
    /// keeping `work` with the caller, if the thief withdrew its request:
    /// the caller then queues the work elsewhere and ends the request with
    /// [`ReplySlot::send_declined`].
    pub fn send_work(&self, work: *mut T) -> bool {
        debug_assert!(!work.is_null() && work != Self::declined() && work != Self::withdrawn());
        // Release: publishes the list (its links, its tasks) to the thief's
        // Acquire in `take` or in a failed `withdraw`.
        match self.slot.compare_exchange(
            std::ptr::null_mut(),
            work,
            Ordering::Release,
            Ordering::Relaxed,
        ) {
            Ok(_) => true,
            Err(prev) => {
                debug_assert!(
                    prev == Self::withdrawn(),
                    "two answers to one steal request"
                );
                false
            }
        }
    }

    /// Last victim side: tell the thief everyone declined (or that the work
    /// it withdrew from went elsewhere).
    pub fn send_declined(&self) {
        let prev = self.slot.swap(Self::declined(), Ordering::AcqRel);
        debug_assert!(
            prev.is_null() || prev == Self::withdrawn(),
            "two answers to one steal request"
        );
    }

    /// Thief side, with its request in flight, before it runs work found
    /// elsewhere: from now on an answer with work is refused. Returns
    /// `None` if the request is withdrawn (its answer, declined, comes
    /// later, and the thief stays in flight until then), or the answer
    /// that arrived first, taken out of the slot (the request has ended).
    pub fn withdraw(&self) -> Option<Reply<T>> {
        // Relaxed: a withdrawal carries no data, and an answer found here is
        // taken by `take`, whose Acquire pairs with `send_work`'s Release.
        match self.slot.compare_exchange(
            std::ptr::null_mut(),
            Self::withdrawn(),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => None,
            Err(p) if p == Self::withdrawn() => None,
            Err(_) => Some(self.take()),
        }
    }

    /// Whether an answer is waiting (for the parking check). A withdrawal
    /// is not an answer.
    pub fn has_reply(&self) -> bool {
        let p = self.slot.load(Ordering::Acquire);
        !p.is_null() && p != Self::withdrawn()
    }

    /// Thief side: take the answer, if any. A thief that takes is waiting
    /// for work again: a withdrawal of its request is undone, so that the
    /// answer, still to come, may bring work again.
    pub fn take(&self) -> Reply<T> {
        let p = self.slot.load(Ordering::Relaxed);
        if p == Self::withdrawn() {
            // Fails only if the answer came meanwhile: taken next time.
            let _ = self.slot.compare_exchange(
                Self::withdrawn(),
                std::ptr::null_mut(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            return Reply::Pending;
        }
        if p.is_null() {
            return Reply::Pending;
        }
        // Only the thief moves the slot off an answer, so the swap returns
        // the answer just seen. Acquire: pairs with `send_work`'s Release.
        let p = self.slot.swap(std::ptr::null_mut(), Ordering::Acquire);
        if p == Self::declined() {
            Reply::Declined
        } else {
            Reply::Work(p)
        }
    }
}

/// A worker's inbox of steal requests.
///
/// Bounded: every other worker has at most one request in flight, so
/// `capacity = workers` can never overflow.
///
/// Beside the queue, a count of the requests waiting: a running loop checks
/// it between iterations, and one relaxed load of a word nobody else writes
/// in the common case is the cheapest check there is (the queue's own
/// emptiness test reads two contended words). The count may lag the queue
/// by a moment; a loop then sees the request at its next iteration.
#[derive(Debug)]
pub struct Mailbox {
    #[cfg(not(loom))]
    queue: crossbeam_queue::ArrayQueue<StealRequest>,
    #[cfg(loom)]
    queue: crate::core::sync::Mutex<std::collections::VecDeque<StealRequest>>,
    waiting: AtomicUsize,
}

impl Mailbox {
    /// A mailbox for a runtime of `workers` workers.
    pub fn new(workers: usize) -> Self {
        Self {
            #[cfg(not(loom))]
            queue: crossbeam_queue::ArrayQueue::new(workers.max(1)),
            #[cfg(loom)]
            queue: crate::core::sync::Mutex::new(std::collections::VecDeque::with_capacity(
                workers,
            )),
            waiting: AtomicUsize::new(0),
        }
    }

    /// Posts a request. The caller then wakes the owner if it sleeps.
    pub fn post(&self, req: StealRequest) {
        // Counted first, so the count never drops below the queue's length
        // (a take between push and count would wrap it).
        self.waiting.fetch_add(1, Ordering::Relaxed);
        #[cfg(not(loom))]
        if self.queue.push(req).is_err() {
            unreachable!("mailbox overflow: more requests in flight than workers");
        }
        #[cfg(loom)]
        crate::core::sync::lock(&self.queue).push_back(req);
    }

    /// Takes the oldest request.
    #[inline]
    pub fn take(&self) -> Option<StealRequest> {
        #[cfg(not(loom))]
        let req = self.queue.pop();
        #[cfg(loom)]
        let req = crate::core::sync::lock(&self.queue).pop_front();
        if req.is_some() {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        req
    }

    /// How many requests wait, as last counted: one relaxed load, for the
    /// check between loop iterations and for sharing a loop among thieves.
    #[inline]
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Whether no request waits.
    #[inline]
    pub fn is_empty(&self) -> bool {
        #[cfg(not(loom))]
        return self.queue.is_empty();
        #[cfg(loom)]
        return crate::core::sync::lock(&self.queue).is_empty();
    }
}

/// The adaptive steal-one / steal-half policy of one thief.
#[cfg(not(loom))]
///
/// Stealing one task suits recursive work: the oldest task is the root of a
/// large subtree, and the thief will spawn plenty from it. Stealing half suits
/// flat work (a producer's queue of leaves): one task per request would make
/// the thief ask again after every leaf. The thief measures which case it is
/// in from how many tasks it runs per theft, over windows of
/// [`StealPolicy::WINDOW`] thefts.
#[derive(Debug, Clone, Copy)]
#[cfg(not(loom))]
pub struct StealPolicy {
    half: bool,
    thefts: u32,
    received: u64,
    run_at_window_start: u64,
}

#[cfg(not(loom))]
impl Default for StealPolicy {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(not(loom))]
impl StealPolicy {
    /// Thefts per decision.
    pub const WINDOW: u32 = 16;

    /// Starts with steal-one, the right choice for recursive work.
    pub fn new() -> Self {
        Self {
            half: false,
            thefts: 0,
            received: 0,
            run_at_window_start: 0,
        }
    }

    /// Whether the next request asks for half.
    pub fn steal_half(&self) -> bool {
        self.half
    }

    /// Records a theft of `received` tasks; `tasks_run` is the thief's running
    /// total of tasks executed, which tells how much work each theft yielded.
    pub fn record_theft(&mut self, received: u64, tasks_run: u64) {
        if self.thefts == 0 {
            self.run_at_window_start = tasks_run;
        }
        self.thefts += 1;
        self.received += received;
        if self.thefts < Self::WINDOW {
            return;
        }
        let run = tasks_run.saturating_sub(self.run_at_window_start);
        let thefts = u64::from(self.thefts);
        if self.half {
            // Each theft yields far more tasks than it brought: the stolen
            // tasks are recursive, one at a time is enough.
            if run > 4 * self.received {
                self.half = false;
            }
        } else if run < 4 * thefts {
            // Under four tasks run per theft: leaves, ask for more at once.
            self.half = true;
        }
        self.thefts = 0;
        self.received = 0;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn victim_set_covers_all_workers() {
        let mut s = VictimSet::only(0);
        s.insert(MAX_WORKERS - 1);
        s.insert(64);
        assert!(s.contains(0) && s.contains(64) && s.contains(MAX_WORKERS - 1));
        assert!(!s.contains(1) && !s.contains(63) && !s.contains(65));
    }

    #[test]
    fn policy_switches_to_half_for_leaves_and_back_for_recursion() {
        let mut p = StealPolicy::new();
        let mut run = 0;
        for _ in 0..StealPolicy::WINDOW {
            run += 1; // each stolen leaf runs alone
            p.record_theft(1, run);
        }
        assert!(p.steal_half(), "one task per theft should switch to half");
        for _ in 0..StealPolicy::WINDOW {
            run += 1000; // each stolen batch of 2 spawns a large subtree
            p.record_theft(2, run);
        }
        assert!(!p.steal_half(), "recursive work should switch back to one");
    }

    #[test]
    fn reply_slot_round_trip() {
        let slot = ReplySlot::<u64>::new();
        assert_eq!(slot.take(), Reply::Pending);
        slot.send_declined();
        assert!(slot.has_reply());
        assert_eq!(slot.take(), Reply::Declined);
        let mut x = 7u64;
        assert!(slot.send_work(&mut x));
        assert_eq!(slot.take(), Reply::Work(&mut x as *mut u64));
        assert_eq!(slot.take(), Reply::Pending);
    }

    #[test]
    fn a_withdrawn_request_refuses_work_and_ends_declined() {
        let slot = ReplySlot::<u64>::new();
        assert_eq!(slot.withdraw(), None);
        assert_eq!(slot.withdraw(), None, "withdrawing twice is harmless");
        assert!(!slot.has_reply(), "a withdrawal is not an answer");
        let mut x = 7u64;
        assert!(!slot.send_work(&mut x), "work sent after a withdrawal");
        slot.send_declined();
        assert!(slot.has_reply());
        assert_eq!(slot.take(), Reply::Declined);
        // The next request starts from an empty slot.
        assert!(slot.send_work(&mut x));
        assert_eq!(slot.take(), Reply::Work(&mut x as *mut u64));
    }

    #[test]
    fn a_thief_that_takes_again_undoes_its_withdrawal() {
        let slot = ReplySlot::<u64>::new();
        assert_eq!(slot.withdraw(), None);
        assert_eq!(slot.take(), Reply::Pending, "no answer yet");
        let mut x = 7u64;
        assert!(slot.send_work(&mut x), "the thief waits for work again");
        assert_eq!(slot.take(), Reply::Work(&mut x as *mut u64));
    }

    #[test]
    fn withdrawing_after_the_answer_takes_the_answer() {
        let slot = ReplySlot::<u64>::new();
        let mut x = 7u64;
        assert!(slot.send_work(&mut x));
        assert_eq!(slot.withdraw(), Some(Reply::Work(&mut x as *mut u64)));
        assert_eq!(slot.take(), Reply::Pending, "the answer was taken once");
        slot.send_declined();
        assert_eq!(slot.withdraw(), Some(Reply::Declined));
    }
}
