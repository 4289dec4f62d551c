//! Rescue: acting as a worker's owner while the owner is stuck in user code.
//!
//! A worker's deque is private: only its owner touches it, with no atomic
//! read-modify-write and no fence. That is what makes push and pop cheap,
//! and what strands the queued tasks of a worker whose task blocks where
//! the runtime cannot see it (a channel, a lock, a sleep): nobody answers
//! steal requests for them. A [`Guarded`] value is such private state made
//! reachable by other threads through an *asymmetric Dekker* protocol (a
//! biased lock), so that an idle worker can take the owner's place for a
//! moment:
//!
//! - The owner brackets every entry into its scheduler code ([`Owner::enter`]
//!   and the guard's drop). Entering stores its *beacon* "busy", issues a
//!   **light barrier** and loads `rescuing`; if it is set, the owner waits
//!   (still busy) until it is clear. Leaving stores the beacon "not busy",
//!   with a hint of how many tasks are queued (a Release store). So the
//!   owner's path gains two plain stores and one plain load per bracket
//!   (plus reading the deque's length for the hint), and a compiler
//!   fence: no read-modify-write and no CPU fence. (Debug builds also
//!   check that no guard is alive already.)
//! - A rescuer ([`Guarded::try_rescue`]) that saw the beacon not busy (the
//!   caller decides for how long: a worker watches the owner's count of
//!   tasks run too, so it rescues only an owner that made no progress for
//!   a while) takes the try-lock `rescuing` (Acquire), issues a **heavy
//!   barrier** and re-reads the beacon (Acquire). If it still reads as
//!   sampled, not busy, the owner is outside its scheduler code and stays
//!   out until `rescuing` is cleared (Release): the rescuer has the state
//!   to itself.
//!
//! Why it is sound: the heavy barrier is `membarrier(2)` with
//! `MEMBARRIER_CMD_PRIVATE_EXPEDITED`, which runs a full memory barrier on
//! every CPU currently running a thread of this process before it returns
//! (a thread that is not running has passed through the kernel's context
//! switch, itself a full barrier). The light barrier is a compiler fence:
//! it keeps the compiler from moving the owner's load of `rescuing` above
//! its store of the beacon, and the CPU may still reorder them only until
//! the next full barrier on that CPU. So either the barrier on the owner's
//! CPU comes after the owner's beacon store (and the rescuer, reading the
//! beacon after `membarrier` returns, sees it busy or changed, and backs
//! off), or it comes before the owner's load of `rescuing` (which then sees
//! the rescuer's flag, and the owner waits). That is the classic
//! store-buffering pair with one side's fence made remote, as in Linux's
//! `sys_membarrier` users and folly's `asymmetricHeavyBarrier`. Both
//! orders give exclusion; the Release/Acquire pairs (the owner's leaving
//! store and the rescuer's beacon load; the rescuer's clearing store and
//! the owner's load of `rescuing`; the try-lock between rescuers) carry
//! the state's contents between them. Under loom both barriers are
//! `fence(SeqCst)`, which gives the same exclusion in the model.
//! (The heavy barrier is wrapped in `fence(SeqCst)`s, which as acquire
//! fences already order the rescuer after the store its try-lock CAS and
//! its first beacon sample read; the Acquire on those two is kept for the
//! case where the sample and the re-read come from different stores. The
//! loom model `loom-tests/tests/rescue.rs` fails when either barrier, the
//! owner's Acquire on `rescuing`, the rescuer's Release clearing it, or the
//! owner's Release beacon store is weakened.)
//!
//! Where `membarrier` is missing (not Linux, an old kernel, a sandbox that
//! refuses it), [`available`] is false and rescue never happens: the owner's
//! compiler fence alone would not be a barrier, so nothing may rely on it.

use crate::sync::{fence, AtomicBool, AtomicU64, Ordering, UnsafeCell};
use std::cell::Cell;

/// Bit 0 of a beacon: the owner is inside its scheduler code.
const BUSY: u64 = 1;
/// The hint (tasks queued) is the rest of a beacon.
const HINT_SHIFT: u32 = 1;

/// Private state that reports how much work it holds, for the hint idle
/// workers read to decide whether someone's tasks may be stranded.
pub trait Queued {
    /// How many tasks wait here (an estimate is fine).
    fn queued(&self) -> usize;
}

/// One worker's private state, with the beacon and the try-lock through
/// which another thread may act as its owner (see the module docs).
#[derive(Debug)]
pub struct Guarded<T> {
    /// Written by the owner (plain stores); by a rescuer only with a CAS
    /// from the value it validated (to refresh the hint after a rescue).
    beacon: AtomicU64,
    /// The rescuers' try-lock; set while a rescuer holds the state.
    rescuing: AtomicBool,
    /// An owner was handed out ([`Guarded::claim`]): there is only one.
    claimed: AtomicBool,
    data: UnsafeCell<T>,
}

// SAFETY: the data is reached only through an `OwnerGuard` or a
// `RescueGuard`, and the protocol (module docs) lets at most one of them
// exist at a time; `T: Send` because the data moves between the owner's
// thread and rescuers' threads.
unsafe impl<T: Send> Sync for Guarded<T> {}
// SAFETY: as above; the atomics are Send.
unsafe impl<T: Send> Send for Guarded<T> {}

/// A snapshot of a beacon, taken by a would-be rescuer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Beacon(u64);

impl Beacon {
    /// The owner is inside its scheduler code.
    pub fn busy(self) -> bool {
        self.0 & BUSY != 0
    }

    /// Tasks queued when the owner (or the last rescuer) left.
    pub fn hint(self) -> usize {
        (self.0 >> HINT_SHIFT) as usize
    }
}

impl<T: Queued> Guarded<T> {
    /// Wraps `data`, owned by nobody yet.
    pub fn new(data: T) -> Self {
        Self {
            beacon: AtomicU64::new(0),
            rescuing: AtomicBool::new(false),
            claimed: AtomicBool::new(false),
            data: UnsafeCell::new(data),
        }
    }

    /// Hands out the owner's side. Once: the protocol has one owner.
    ///
    /// # Panics
    ///
    /// If called a second time on the same value.
    pub fn claim(&self) -> Owner<'_, T> {
        assert!(
            !self.claimed.swap(true, Ordering::Relaxed),
            "selvedge: a worker's state claimed by two owners"
        );
        Owner {
            guarded: self,
            held: Cell::new(false),
        }
    }

    /// The beacon now (for idle workers deciding whether to rescue).
    #[inline]
    pub fn sample(&self) -> Beacon {
        Beacon(self.beacon.load(Ordering::Relaxed))
    }

    /// Takes the state from its owner, if the beacon still reads `seen` (the
    /// owner has not entered its scheduler code since) and is not busy, and
    /// no other rescuer holds it. Returns `None` otherwise, and always where
    /// [`available`] is false.
    pub fn try_rescue(&self, seen: Beacon) -> Option<RescueGuard<'_, T>> {
        if seen.busy() || self.sample() != seen || !available() {
            return None;
        }
        if self
            .rescuing
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        // Pairs with the owner's light barrier: from here on, either we see
        // its busy beacon, or it sees `rescuing` and waits.
        if !heavy_barrier() {
            self.rescuing.store(false, Ordering::Release);
            return None;
        }
        // Acquire: the owner's (or last rescuer's) writes to the state
        // before its beacon store are visible to us.
        if self.beacon.load(Ordering::Acquire) != seen.0 {
            self.rescuing.store(false, Ordering::Release);
            return None;
        }
        Some(RescueGuard {
            guarded: self,
            seen,
        })
    }
}

/// The owner's side of a [`Guarded`]: not `Sync`, so it stays on the owner's
/// thread.
#[derive(Debug)]
pub struct Owner<'a, T> {
    guarded: &'a Guarded<T>,
    /// A guard is alive (also makes the owner's side `!Sync`: it stays on
    /// the owner's thread).
    held: Cell<bool>,
}

impl<'a, T: Queued> Owner<'a, T> {
    /// Enters the scheduler code: the state is the owner's until the guard
    /// drops. Costs a plain store of the beacon, a compiler fence and a
    /// plain load of `rescuing` (Acquire is a plain load on x86 and a
    /// load-acquire on Arm).
    ///
    /// # Panics
    ///
    /// In debug builds, if a guard from this owner is still alive: the
    /// state would be reachable twice.
    #[inline(always)]
    pub fn enter(&self) -> OwnerGuard<'_, T> {
        let g = self.guarded;
        // Only the worker's own scheduler code enters, and none of it
        // enters again while it holds a guard (no user code runs under
        // one): checked in debug builds. (A release check that loaded the
        // beacon stored just before made fib with joins twice as slow.)
        if cfg!(debug_assertions) {
            assert!(
                !self.held.replace(true),
                "selvedge: a worker's scheduler state entered while already held"
            );
        }
        g.beacon.store(BUSY, Ordering::Relaxed);
        light_barrier();
        if g.rescuing.load(Ordering::Acquire) {
            wait_for_rescuer(&g.rescuing);
        }
        OwnerGuard { owner: self }
    }
}

/// The owner waits (busy, so no new rescue starts) for a rescuer to finish.
#[cold]
#[inline(never)]
fn wait_for_rescuer(rescuing: &AtomicBool) {
    let mut spins = 0u32;
    // Acquire: the rescuer's writes to the state happen before ours.
    while rescuing.load(Ordering::Acquire) {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            crate::sync::thread::yield_now();
        }
    }
}

/// The owner's hold on its state, from [`Owner::enter`] to the drop.
#[derive(Debug)]
pub struct OwnerGuard<'o, T: Queued> {
    owner: &'o Owner<'o, T>,
}

impl<T: Queued> OwnerGuard<'_, T> {
    /// Runs `f` on the state.
    #[cfg_attr(not(loom), allow(dead_code))] // the loom models use it
    #[inline(always)]
    pub fn with<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: this guard is the only one (`enter` refuses a second while
        // it lives, and rescuers are excluded until it drops, module docs),
        // and `&mut self` keeps `f` from reaching the guard again.
        self.owner.guarded.data.with_mut(|p| f(unsafe { &mut *p }))
    }

    /// The state, for as long as the guard is borrowed.
    #[cfg(not(loom))]
    #[inline(always)]
    pub fn get(&mut self) -> &mut T {
        // SAFETY: as in `with`: the borrow of the guard bounds the state's.
        self.owner.guarded.data.with_mut(|p| unsafe { &mut *p })
    }
}

impl<T: Queued> Drop for OwnerGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        let g = self.owner.guarded;
        if cfg!(debug_assertions) {
            self.owner.held.set(false);
        }
        // SAFETY: as in `with`; the read ends before the beacon store below.
        let hint = g.data.with(|p| unsafe { &*p }.queued()) as u64;
        // Release: a rescuer that reads this beacon sees the state as we
        // leave it.
        g.beacon.store(hint << HINT_SHIFT, Ordering::Release);
    }
}

/// A rescuer's hold on another worker's state, from [`Guarded::try_rescue`]
/// to the drop.
#[derive(Debug)]
pub struct RescueGuard<'a, T: Queued> {
    guarded: &'a Guarded<T>,
    seen: Beacon,
}

impl<T: Queued> RescueGuard<'_, T> {
    /// Runs `f` on the state.
    #[cfg_attr(not(loom), allow(dead_code))] // the loom models use it
    pub fn with<R>(&mut self, f: impl FnOnce(&mut T) -> R) -> R {
        // SAFETY: `try_rescue` excluded the owner (module docs) and holds
        // the try-lock against other rescuers until this guard drops.
        self.guarded.data.with_mut(|p| f(unsafe { &mut *p }))
    }

    /// The state, for as long as the guard is borrowed.
    #[cfg(not(loom))]
    pub fn get(&mut self) -> &mut T {
        // SAFETY: as in `with`.
        self.guarded.data.with_mut(|p| unsafe { &mut *p })
    }
}

impl<T: Queued> Drop for RescueGuard<'_, T> {
    fn drop(&mut self) {
        let g = self.guarded;
        // SAFETY: as in `with`.
        let hint = g.data.with(|p| unsafe { &*p }.queued()) as u64;
        // A fresh hint, so idle workers stop timing their parks for tasks
        // that are gone. A CAS, never a store: the owner may have stored
        // its busy beacon meanwhile (it then waits for us), and a store
        // would clear that busy bit under the next rescuer.
        let fresh = hint << HINT_SHIFT;
        let _ = g
            .beacon
            .compare_exchange(self.seen.0, fresh, Ordering::Release, Ordering::Relaxed);
        // Release: the owner (waiting in `enter` or entering later) and the
        // next rescuer see our writes to the state.
        g.rescuing.store(false, Ordering::Release);
    }
}

/// The owner's side of the pair: keeps the compiler from moving the load of
/// `rescuing` above the beacon store. Sound only with the heavy barrier
/// (module docs).
#[inline(always)]
fn light_barrier() {
    #[cfg(not(loom))]
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
    #[cfg(loom)]
    fence(Ordering::SeqCst);
}

/// The rescuer's side: a full barrier on every CPU running one of our
/// threads. Returns false if it could not be issued.
fn heavy_barrier() -> bool {
    #[cfg(loom)]
    {
        fence(Ordering::SeqCst);
        true
    }
    #[cfg(all(not(loom), target_os = "linux"))]
    {
        fence(Ordering::SeqCst);
        // SAFETY: membarrier takes two integer arguments (and a cpu id that
        // this command ignores) and touches no memory of ours.
        let r = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_PRIVATE_EXPEDITED,
                0 as libc::c_uint,
                0 as libc::c_int,
            )
        };
        fence(Ordering::SeqCst);
        r == 0
    }
    #[cfg(all(not(loom), not(target_os = "linux")))]
    {
        false
    }
}

#[cfg(all(not(loom), target_os = "linux"))]
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
#[cfg(all(not(loom), target_os = "linux"))]
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

/// Whether rescue can happen here: the heavy barrier exists and this
/// process is registered for it (done on the first call).
pub fn available() -> bool {
    #[cfg(loom)]
    {
        true
    }
    #[cfg(all(not(loom), target_os = "linux"))]
    {
        static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *REGISTERED.get_or_init(|| {
            // SAFETY: as in `heavy_barrier`.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                    0 as libc::c_uint,
                    0 as libc::c_int,
                )
            };
            r == 0
        })
    }
    #[cfg(all(not(loom), not(target_os = "linux")))]
    {
        false
    }
}
