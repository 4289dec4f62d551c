//! Parking idle workers and waking them without losing a wake-up.
//!
//! Each worker has a state word: `AWAKE`, `SLEEPING` (idle, nothing to do) or
//! `JOIN_WAITING` (inside a join whose child runs elsewhere; it may still hold
//! older tasks for thieves). The protocol is a Dekker pair:
//!
//! - the sleeper stores its state, issues a SeqCst fence, then re-checks every
//!   source of work a waker could have filled (mailbox, reply slot, injector,
//!   shutdown, the awaited completion) and parks only if all are empty;
//! - a waker publishes the work, issues a SeqCst fence, then reads the state
//!   and, if the target is parked or about to park, CASes it to `AWAKE` and
//!   unparks its thread.
//!
//! Either the sleeper sees the work or the waker sees the state, so no wake-up
//! is lost. `std::thread::park` keeps a token, so an unpark that lands before
//! the park is not lost either.
//!
//! Work queued on a worker's own deque has no waker: a worker that pushes a
//! task only *shares* it with sleepers when it sees some
//! ([`Sleep::sleepers_after_queueing`]), and a push is too hot for a CPU
//! fence. That pair is asymmetric, as the rescue protocol's (`rescue.rs`):
//! an idle sleeper *announces* itself (the count `has_sleepers` reads)
//! before its re-check, then issues the heavy barrier, and its re-check
//! looks at the other workers' deques; the pusher stores its deque's top,
//! issues the light barrier (a compiler fence) and reads the count. Either
//! the sleeper sees the task or the pusher sees the sleeper. Where the heavy
//! barrier is missing (not Linux, no `membarrier`), an idle sleeper parks
//! for at most [`UNPAIRED_PARK`] instead.
//!
//! Idle sleepers also *commit* under a mutex: the count of committed sleepers
//! is how a runtime knows it is quiescent (`sync_root`, shutdown), and the
//! mutex makes "all committed and all still asleep" a stable observation.

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::rescue;
use crate::core::sync::{fence, lock, thread, AtomicU8, AtomicUsize, Condvar, Mutex, Ordering};
use crossbeam_utils::CachePadded;
use std::time::Duration;

const AWAKE: u8 = 0;
const SLEEPING: u8 = 1;
const JOIN_WAITING: u8 = 2;

/// The longest an idle worker parks where the heavy barrier is missing:
/// a push may then miss its announcement (see the module docs), and the
/// worker comes back for tasks queued meanwhile this late at worst.
pub(crate) const UNPAIRED_PARK: Duration = Duration::from_millis(10);

/// Parks the calling thread for at most `t` (loom has no timed park: there
/// it parks until unparked, and the models never time out).
fn park_timeout(t: std::time::Duration) {
    #[cfg(not(loom))]
    thread::park_timeout(t);
    #[cfg(loom)]
    {
        let _ = t;
        thread::park();
    }
}

/// The parking registry of one runtime's workers.
#[derive(Debug)]
pub struct Sleep {
    states: Box<[CachePadded<AtomicU8>]>,
    threads: Box<[thread::Thread]>,
    committed: Mutex<usize>,
    /// Idle workers parked or about to park: each counts itself in before
    /// its last re-check, and out once awake (see the module docs).
    announced: AtomicUsize,
    quiescent: Condvar,
    next_wake: AtomicUsize,
}

impl Sleep {
    /// A registry for the workers running on `threads`, all awake.
    pub fn new(threads: Vec<thread::Thread>) -> Self {
        Self {
            states: threads
                .iter()
                .map(|_| CachePadded::new(AtomicU8::new(AWAKE)))
                .collect(),
            threads: threads.into_boxed_slice(),
            committed: Mutex::new(0),
            announced: AtomicUsize::new(0),
            quiescent: Condvar::new(),
            next_wake: AtomicUsize::new(0),
        }
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.threads.len()
    }

    /// Parks the idle worker `me` unless `has_work` finds something. Returns
    /// whether it actually slept. `has_work` must check every source whose
    /// producer calls [`Sleep::wake`] or [`Sleep::wake_any`] afterwards, and
    /// every deque whose owner calls [`Sleep::sleepers_after_queueing`]
    /// after a push.
    #[cfg_attr(not(loom), allow(dead_code))] // the loom models use it
    pub fn idle_park(&self, me: usize, has_work: impl Fn() -> bool) -> bool {
        self.idle_park_for(me, has_work, None)
    }

    /// [`Sleep::idle_park`], but wakes up by itself after `timeout` (if
    /// any): for a worker that must come back to rescue stranded tasks.
    pub fn idle_park_for(
        &self,
        me: usize,
        has_work: impl Fn() -> bool,
        timeout: Option<std::time::Duration>,
    ) -> bool {
        let state = &self.states[me];
        state.store(SLEEPING, Ordering::SeqCst);
        // Counted in before the re-check: a pusher that reads the count
        // after its push either sees us or its task is seen below.
        self.announced.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence of `wake` and `wake_any` (work they publish)
        // and with the pusher's light barrier in `sleepers_after_queueing`
        // (tasks pushed on deques). The heavy barrier begins with a SeqCst
        // fence of its own.
        let paired = rescue::available() && rescue::heavy_barrier();
        if !paired {
            fence(Ordering::SeqCst);
        }
        if has_work() {
            let _ = state.compare_exchange(SLEEPING, AWAKE, Ordering::SeqCst, Ordering::SeqCst);
            self.announced.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        let timeout = match (paired, timeout) {
            (true, t) => t,
            (false, t) => Some(t.map_or(UNPAIRED_PARK, |t| t.min(UNPAIRED_PARK))),
        };
        self.commit(1);
        match timeout {
            None => {
                while state.load(Ordering::SeqCst) == SLEEPING {
                    thread::park();
                }
            }
            Some(t) => {
                let deadline = std::time::Instant::now() + t;
                while state.load(Ordering::SeqCst) == SLEEPING {
                    let now = std::time::Instant::now();
                    if now >= deadline {
                        // Wake ourselves; a waker that got here first has
                        // already set AWAKE (and its unpark token is spent
                        // by a later park, which then returns at once).
                        let _ = state.compare_exchange(
                            SLEEPING,
                            AWAKE,
                            Ordering::SeqCst,
                            Ordering::SeqCst,
                        );
                        break;
                    }
                    park_timeout(deadline - now);
                }
            }
        }
        self.commit(-1);
        self.announced.fetch_sub(1, Ordering::SeqCst);
        true
    }

    fn commit(&self, delta: isize) {
        let mut c = lock(&self.committed);
        *c = c.wrapping_add_signed(delta);
        if *c == self.threads.len() {
            self.quiescent.notify_all();
        }
    }

    /// Parks worker `me`, which waits in a join, once, unless `ready` says the
    /// wait is over or work arrived. The caller loops.
    #[cfg_attr(not(loom), allow(dead_code))] // the loom models use it
    pub fn join_park(&self, me: usize, ready: impl Fn() -> bool) {
        self.join_park_for(me, ready, None);
    }

    /// [`Sleep::join_park`], for at most `timeout` (if any).
    pub fn join_park_for(
        &self,
        me: usize,
        ready: impl Fn() -> bool,
        timeout: Option<std::time::Duration>,
    ) {
        let state = &self.states[me];
        state.store(JOIN_WAITING, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !ready() {
            match timeout {
                None => thread::park(),
                Some(t) => park_timeout(t),
            }
        }
        state.store(AWAKE, Ordering::SeqCst);
    }

    /// Wakes `target` if it is parked or about to park. Call after publishing
    /// the work that target should see.
    pub fn wake(&self, target: usize) -> bool {
        fence(Ordering::SeqCst);
        let state = &self.states[target];
        let s = state.load(Ordering::SeqCst);
        if s != AWAKE
            && state
                .compare_exchange(s, AWAKE, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            self.threads[target].unpark();
            return true;
        }
        false
    }

    /// Wakes one parked worker, if any: for work that any worker may take
    /// (the injector). An idle one first; else one parked in a join, which
    /// takes injected work while it waits (with one worker, or every worker
    /// waiting, nobody else would). Call after publishing the work.
    pub fn wake_any(&self) -> bool {
        fence(Ordering::SeqCst);
        let n = self.threads.len();
        let start = self.next_wake.load(Ordering::Relaxed);
        self.next_wake
            .store(start.wrapping_add(1), Ordering::Relaxed);
        for parked in [SLEEPING, JOIN_WAITING] {
            for k in 0..n {
                let i = (start + k) % n;
                let state = &self.states[i];
                if state.load(Ordering::SeqCst) == parked
                    && state
                        .compare_exchange(parked, AWAKE, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
                {
                    self.threads[i].unpark();
                    return true;
                }
            }
        }
        false
    }

    /// Wakes every worker (shutdown).
    pub fn wake_all(&self) {
        for i in 0..self.threads.len() {
            self.wake(i);
            self.threads[i].unpark();
        }
    }

    /// Unparks `target`'s thread without touching its state: for a waiter
    /// that re-checks its own condition in a loop (a scope's owner).
    pub fn unpark(&self, target: usize) {
        self.threads[target].unpark();
    }

    /// Whether `worker` is idle-parked (so it has no work to give).
    #[inline]
    pub fn is_sleeping(&self, worker: usize) -> bool {
        self.states[worker].load(Ordering::Relaxed) == SLEEPING
    }

    /// Whether every worker is parked or about to park, idle or in a join:
    /// none is running code (a hint, for the stall warning).
    #[cfg_attr(loom, allow(dead_code))]
    pub fn all_parked(&self) -> bool {
        self.states
            .iter()
            .all(|s| s.load(Ordering::Relaxed) != AWAKE)
    }

    /// Whether `worker` is parked in a join or latch wait (a hint, for the
    /// stall warning). Acquire: what the worker noted before it parked
    /// (`stall::note_park`) is seen with it.
    #[cfg_attr(loom, allow(dead_code))]
    pub fn is_join_waiting(&self, worker: usize) -> bool {
        self.states[worker].load(Ordering::Acquire) == JOIN_WAITING
    }

    /// Worker `worker`'s thread.
    #[cfg_attr(loom, allow(dead_code))]
    pub fn thread(&self, worker: usize) -> &thread::Thread {
        &self.threads[worker]
    }

    /// A cheap hint that some worker is idle-parked or about to park.
    #[inline]
    pub fn has_sleepers(&self) -> bool {
        self.sleepers() != 0
    }

    /// A hint of how many workers are idle-parked or about to park.
    #[inline]
    pub fn sleepers(&self) -> usize {
        self.announced.load(Ordering::Relaxed)
    }

    /// [`Sleep::has_sleepers`], asked by a worker that has just queued a
    /// task on its own deque: if it says no, any worker about to idle-park
    /// sees the task in its re-check (module docs). Costs a compiler fence:
    /// the light barrier, which keeps the load after the push's store of
    /// the deque's top and pairs with the heavy barrier in
    /// [`Sleep::idle_park_for`].
    #[inline(always)]
    pub fn sleepers_after_queueing(&self) -> bool {
        rescue::light_barrier();
        self.has_sleepers()
    }

    fn all_asleep_except(&self, committed: usize, except: Option<usize>) -> bool {
        let n = self.threads.len();
        let expected = if except.is_some() { n - 1 } else { n };
        committed == expected
            && (0..n)
                .filter(|&i| Some(i) != except)
                .all(|i| self.states[i].load(Ordering::SeqCst) == SLEEPING)
    }

    /// Whether every worker but `me` is committed asleep and `extra` holds,
    /// observed while no sleeper can change its commitment.
    pub fn quiescent_except(&self, me: usize, extra: impl Fn() -> bool) -> bool {
        let c = lock(&self.committed);
        self.all_asleep_except(*c, Some(me)) && extra()
    }

    /// Blocks (without spinning) until every worker is committed asleep and
    /// `extra` holds. For threads that are not workers of this runtime.
    pub fn wait_quiescent(&self, extra: impl Fn() -> bool) {
        let mut c = lock(&self.committed);
        while !(self.all_asleep_except(*c, None) && extra()) {
            c = match self.quiescent.wait(c) {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
        }
    }
}
