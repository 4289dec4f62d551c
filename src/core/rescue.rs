//! Rescue: another thread acting for a worker stuck in user code.
//!
//! A worker's deque is its own: its owner pushes and pops with no atomic
//! read-modify-write and no fence. That is what makes push and pop cheap,
//! and what would strand the queued tasks of a worker whose task blocks
//! where the runtime cannot see it (a channel, a lock, a sleep): nobody
//! answers steal requests for them. A [`Guarded`] value is such state made
//! reachable by other threads through an *asymmetric Dekker* protocol (a
//! biased lock), so that an idle worker can act for the owner for a moment:
//!
//! - The owner's **exclusive section** ([`Owner::enter`] to the guard's
//!   drop) excludes rescuers. Entering stores `busy`, issues a **light
//!   barrier** and loads `rescuing`; if it is set, the owner waits (still
//!   busy) until it is clear. Leaving clears `busy` (a Release store). So
//!   the section costs two plain stores, one plain load and a compiler
//!   fence: no read-modify-write and no CPU fence. (Debug builds also
//!   check that no section is open already.)
//! - A rescuer ([`Guarded::try_rescue`]) that saw the owner not busy (the
//!   caller decides for how long: a worker watches the owner's count of
//!   tasks run too, so it rescues only an owner that made no progress for
//!   a while) takes the try-lock `rescuing` (Acquire), issues a **heavy
//!   barrier** and re-reads `busy` (Acquire). If the owner is still not
//!   busy, it stays out of its exclusive section until `rescuing` is
//!   cleared (Release).
//! - Outside its exclusive section the owner may keep using the state in
//!   the ways the state allows while a rescuer holds it: the deque's fast
//!   push and pop, which meet a rescuer's steals with the same pair of
//!   barriers (see `deque.rs`). Holders therefore get shared references,
//!   and the state's own interior mutability says who may do what.
//!
//! Why it is sound: the heavy barrier is `membarrier(2)` with
//! `MEMBARRIER_CMD_PRIVATE_EXPEDITED`, which runs a full memory barrier on
//! every CPU currently running a thread of this process before it returns
//! (a thread that is not running has passed through the kernel's context
//! switch, itself a full barrier). The light barrier is a compiler fence:
//! it keeps the compiler from moving the owner's load of `rescuing` above
//! its store of `busy`, and the CPU may still reorder them only until
//! the next full barrier on that CPU. So either the barrier on the owner's
//! CPU comes after the owner's store of `busy` (and the rescuer, reading
//! it after `membarrier` returns, sees it busy and backs off), or it comes
//! before the owner's load of `rescuing` (which then sees the rescuer's
//! flag, and the owner waits). That is the classic
//! store-buffering pair with one side's fence made remote, as in Linux's
//! `sys_membarrier` users and folly's `asymmetricHeavyBarrier`. Both
//! orders give exclusion; the Release/Acquire pairs (the owner's leaving
//! store and the rescuer's load of `busy`; the rescuer's clearing store
//! and the owner's load of `rescuing`; the try-lock between rescuers)
//! carry the state's contents between them. Under loom both barriers are
//! `fence(SeqCst)`, which gives the same exclusion in the model. The loom
//! model `loom-tests/tests/models/rescue.rs` fails when either barrier is taken
//! out or the owner stops checking `rescuing`.
//!
//! Where `membarrier` is missing (not Linux, an old kernel, a sandbox that
//! refuses it), [`available`] is false and rescue never happens: the owner's
//! compiler fence alone would not be a barrier, so nothing may rely on it.

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

#[cfg(not(loom))]
use crate::core::sync::compiler_fence;
use crate::core::sync::{fence, AtomicBool, Ordering};
use std::cell::Cell;

/// One worker's state, with the flag and the try-lock through which
/// another thread may act as its owner (see the module docs).
///
/// Holders get a shared reference to the state: the state decides, with
/// interior mutability, what its owner may do outside a guard, what needs
/// an [`OwnerGuard`] and what a [`RescueGuard`] may do while the owner runs
/// (the deque's module says so for the deque).
#[derive(Debug)]
pub struct Guarded<T> {
    /// The owner is inside its exclusive section. Written by the owner
    /// only (plain stores).
    busy: AtomicBool,
    /// The rescuers' try-lock; set while a rescuer holds the state.
    rescuing: AtomicBool,
    /// An owner was handed out ([`Guarded::claim`]): there is only one.
    claimed: AtomicBool,
    data: T,
}

impl<T> Guarded<T> {
    /// Wraps `data`, owned by nobody yet.
    pub fn new(data: T) -> Self {
        Self {
            busy: AtomicBool::new(false),
            rescuing: AtomicBool::new(false),
            claimed: AtomicBool::new(false),
            data,
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

    /// Whether the owner is in its exclusive section now (for idle
    /// workers deciding whether to rescue).
    #[inline]
    pub fn is_busy(&self) -> bool {
        self.busy.load(Ordering::Relaxed)
    }

    /// The state, for what any thread may do with it (the deque's
    /// estimate of its length, say).
    #[inline]
    pub fn peek(&self) -> &T {
        &self.data
    }

    /// Takes the rescuer's side, if the owner is not in its exclusive
    /// section and no other rescuer holds it. Returns `None` otherwise,
    /// and always where [`available`] is false.
    pub fn try_rescue(&self) -> Option<RescueGuard<'_, T>> {
        if self.is_busy() || !available() {
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
        // it busy, or it sees `rescuing` and waits.
        // Acquire: the owner's writes before it left its last exclusive
        // section are visible to us.
        if !heavy_barrier() || self.busy.load(Ordering::Acquire) {
            self.rescuing.store(false, Ordering::Release);
            return None;
        }
        Some(RescueGuard { guarded: self })
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

impl<'a, T> Owner<'a, T> {
    /// The state, for what its owner may do outside a guard.
    #[inline(always)]
    pub fn data(&self) -> &'a T {
        &self.guarded.data
    }

    /// Enters the exclusive section: no rescuer holds the state until the
    /// guard drops. Costs a plain store, a compiler fence and a plain load
    /// (Acquire is a plain load on x86 and a load-acquire on Arm).
    ///
    /// # Panics
    ///
    /// In debug builds, if a guard from this owner is still alive.
    #[inline(always)]
    pub fn enter(&self) -> OwnerGuard<'_, T> {
        let g = self.guarded;
        // Only the worker's own scheduler code enters, and none of it
        // enters again while it holds a guard (no user code runs under
        // one): checked in debug builds.
        if cfg!(debug_assertions) {
            assert!(
                !self.held.replace(true),
                "selvedge: a worker's scheduler state entered while already held"
            );
        }
        g.busy.store(true, Ordering::Relaxed);
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
            crate::core::sync::thread::yield_now();
        }
    }
}

/// The owner's exclusive section, from [`Owner::enter`] to the drop.
#[derive(Debug)]
pub struct OwnerGuard<'o, T> {
    owner: &'o Owner<'o, T>,
}

impl<'o, T> OwnerGuard<'o, T> {
    /// The state, for what its owner may do with no rescuer around.
    #[inline(always)]
    pub fn get(&self) -> &'o T {
        self.owner.data()
    }

    /// The owner's side (its methods are valid in the section too).
    #[inline(always)]
    pub fn owner(&self) -> &'o Owner<'o, T> {
        self.owner
    }
}

impl<T> Drop for OwnerGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        if cfg!(debug_assertions) {
            self.owner.held.set(false);
        }
        // Release: a rescuer that reads this sees the state as we leave it.
        self.owner.guarded.busy.store(false, Ordering::Release);
    }
}

/// A rescuer's hold on another worker's state, from [`Guarded::try_rescue`]
/// to the drop: the owner is outside its exclusive section and stays out.
#[derive(Debug)]
pub struct RescueGuard<'a, T> {
    guarded: &'a Guarded<T>,
}

impl<'a, T> RescueGuard<'a, T> {
    /// The state, for what a rescuer may do while its owner runs.
    #[inline]
    pub fn get(&self) -> &'a T {
        &self.guarded.data
    }
}

impl<T> Drop for RescueGuard<'_, T> {
    fn drop(&mut self) {
        // Release: the owner (waiting in `enter` or entering later) and the
        // next rescuer see our writes to the state.
        self.guarded.rescuing.store(false, Ordering::Release);
    }
}

/// The owner's side of the pair: keeps the compiler from moving the load of
/// `rescuing` above the store of `busy`. Sound only with the heavy barrier
/// (module docs).
#[inline(always)]
pub(crate) fn light_barrier() {
    #[cfg(not(loom))]
    compiler_fence(Ordering::SeqCst);
    #[cfg(loom)]
    fence(Ordering::SeqCst);
}

/// The rescuer's side: a full barrier on every CPU running one of our
/// threads. Returns false if it could not be issued.
pub(crate) fn heavy_barrier() -> bool {
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
pub(crate) fn available() -> bool {
    #[cfg(loom)]
    {
        true
    }
    // Miri does not emulate `membarrier`: no rescue there.
    #[cfg(all(not(loom), not(miri), target_os = "linux"))]
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
    #[cfg(all(not(loom), any(miri, not(target_os = "linux"))))]
    {
        false
    }
}
