//! The registry of tasks parked off the deques: tasks waiting on
//! something else than a worker (delayed tasks waiting on promises).
//!
//! It counts them, for [`crate::RuntimeStats::tasks_waiting_on_dependencies`],
//! and keeps their nodes reachable, so that dropping the runtime can
//! cancel the ones that can never run, cycles included (see
//! [`Parked::reclaim`]).

use crate::core::error::Cancellation;
use crate::core::registry::Registry;
use crate::core::sync::{lock, AtomicPtr, AtomicU64, Mutex, Ordering};
use crate::core::task::TaskRef;
use crate::core::worker::Worker;
use crossbeam_utils::CachePadded;
use std::cell::UnsafeCell;
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// A parked node, as this registry sees it: an address whose layout only
/// the layer that parked it knows.
pub(crate) enum ParkedNode {}

/// Where the registry keeps a node's reference: an atomic pointer at a
/// fixed address, which the node knows.
pub(crate) type ParkedSlot = AtomicPtr<ParkedNode>;

/// What [`Parked::reclaim`] does with a node whose registry reference it
/// swapped out of the node's slot: claims the node's task if nobody has
/// (returning it with its runtime, to be cancelled) and gives up the
/// reference.
///
/// # Safety
/// Called only with a node registered with this function, by the holder
/// of the node's registry reference, which it gives up.
pub(crate) type ReclaimNode = unsafe fn(NonNull<ParkedNode>) -> Option<(TaskRef, Arc<Registry>)>;

/// A runtime's delayed tasks that wait on promises: the counts behind
/// [`crate::RuntimeStats::tasks_waiting_on_dependencies`], and a registry
/// of their nodes, so that dropping the runtime can cancel the ones that
/// can never run (see [`Parked::reclaim`]).
///
/// The layer that parks tasks (dataflow's delayed tasks) owns the nodes;
/// this registry only keeps their addresses, opaque, with the function
/// that reclaims one ([`ReclaimNode`]).
///
/// The registry holds one of a node's two references (the node's claim,
/// see `dataflow/event.rs`) in a
/// *slot*: an atomic pointer at a fixed address, which the node knows.
/// Whoever empties the slot with a swap owns that reference: the side
/// that settles the node, as soon as it has won the node's claim (it then
/// holds both references and frees the node at once), or the runtime's
/// reclaim, which swaps every slot before it claims the node and releases
/// the reference after. Exactly one swap finds the node.
/// The settling side touches the slot only after winning the claim, when
/// it holds the runtime (and so the registry) alive; reclaim claims only
/// after its swap, so a settling side that lost the claim never needs the
/// slot.
pub(crate) struct Parked {
    /// One shard per worker, which only that worker's thread touches while
    /// the workers run (see [`OwnShard`]): parking a task takes no lock.
    own: Box<[CachePadded<OwnShard>]>,
    /// The shard of every other thread, behind a lock.
    others: CachePadded<Mutex<Slab>>,
    /// Parks minus releases counted on threads that are not workers of the
    /// runtime (wrapping). Workers count in their own counters.
    foreign: AtomicU64,
}

/// A worker's shard of the registry. Its slab is touched by that worker's
/// thread alone while the workers run ([`Parked::register`] with the
/// worker's index), and by [`Parked::reclaim`] and the registry's drop
/// once every worker thread has exited: so it needs no lock. What other
/// threads do with a node's slot (take it back on settling) goes through
/// the slot's atomic, in a chunk that never moves, not through the slab.
struct OwnShard(UnsafeCell<Slab>);

// SAFETY: see the type's docs: one thread at a time uses the slab, and the
// hand-over (a worker thread's exit, then the join in the runtime's shut
// down) orders its uses.
unsafe impl Sync for OwnShard {}

/// Slots in chunks that never move: a node keeps its slot's address.
#[derive(Default)]
struct Slab {
    chunks: Vec<Box<[ParkedSlot]>>,
    /// How to reclaim the nodes stored here (the same function for every
    /// node: one kind of node parks).
    reclaim: Option<ReclaimNode>,
    /// Indices of slots known to be empty. Emptied slots (swapped by the
    /// settling side) are found again by a scan when this runs out.
    free: Vec<usize>,
}

/// Slots per chunk.
const CHUNK: usize = 64;

impl Slab {
    fn slot(&self, index: usize) -> &ParkedSlot {
        &self.chunks[index / CHUNK][index % CHUNK]
    }

    /// Stores `node` in a free slot and returns the slot.
    fn insert(&mut self, node: NonNull<ParkedNode>) -> *const ParkedSlot {
        if self.free.is_empty() {
            self.refill();
        }
        let index = self.free.pop().expect("refill leaves a free slot");
        let slot = self.slot(index);
        // Release: whoever swaps the node out reads a fully made node.
        slot.store(node.as_ptr(), Ordering::Release);
        slot
    }

    /// Finds the slots emptied since the last scan; doubles the slots when
    /// fewer than half are empty, so scans cost O(1) per insertion.
    #[cold]
    fn refill(&mut self) {
        let capacity = self.chunks.len() * CHUNK;
        let chunks = &self.chunks;
        self.free.extend((0..capacity).filter(|&i| {
            chunks[i / CHUNK][i % CHUNK]
                .load(Ordering::Relaxed)
                .is_null()
        }));
        if self.free.len() * 2 <= capacity {
            // Double the slots (one chunk at least): the next scan comes
            // after as many insertions as this one read slots.
            let added = capacity.max(CHUNK);
            for _ in 0..added / CHUNK {
                self.chunks.push(
                    (0..CHUNK)
                        .map(|_| AtomicPtr::new(ptr::null_mut()))
                        .collect(),
                );
            }
            self.free.extend((capacity..capacity + added).rev());
        }
    }
}

impl Parked {
    pub(crate) fn new(workers: usize) -> Self {
        Self {
            own: (0..workers)
                .map(|_| CachePadded::new(OwnShard(UnsafeCell::new(Slab::default()))))
                .collect(),
            others: CachePadded::new(Mutex::new(Slab::default())),
            foreign: AtomicU64::new(0),
        }
    }

    /// Parks minus releases counted outside the workers (wrapping: read it
    /// as a signed number).
    pub(crate) fn foreign_balance(&self) -> u64 {
        self.foreign.load(Ordering::Relaxed)
    }

    /// The index of the calling thread's worker if it is one of
    /// `runtime`'s.
    pub(crate) fn worker_here(runtime: &Registry) -> Option<usize> {
        Worker::current()
            .filter(|w| ptr::eq(&*w.shared, runtime))
            .map(|w| w.index)
    }

    /// Counts a task parking (`+1`) or released (`-1`) on the calling
    /// thread: in the worker's own counters on a worker of `runtime`, else
    /// in the shared count.
    pub(crate) fn count(runtime: &Registry, parked: bool) {
        Self::count_at(runtime, Self::worker_here(runtime), parked);
    }

    /// `count`, with `worker_here` already known.
    pub(crate) fn count_at(runtime: &Registry, here: Option<usize>, parked: bool) {
        match here {
            Some(index) => {
                let c = &runtime.counters[index];
                if parked {
                    c.dependency_parks.bump();
                } else {
                    c.dependency_releases.bump();
                }
            }
            None => {
                let delta = if parked { 1 } else { u64::MAX };
                runtime.parked.foreign.fetch_add(delta, Ordering::Relaxed);
            }
        }
    }

    /// Puts `node` (whose registry reference the slot takes) in the shard
    /// of worker `here`, or the shard of other threads; returns its slot.
    /// `reclaim` is what [`Parked::reclaim`] will do with the node.
    ///
    /// # Safety
    /// `here` is [`Parked::worker_here`] of the calling thread for this
    /// registry's runtime: a worker's shard is that worker's alone.
    pub(crate) unsafe fn register(
        &self,
        here: Option<usize>,
        node: NonNull<ParkedNode>,
        reclaim: ReclaimNode,
    ) -> *const ParkedSlot {
        let Some(index) = here else {
            let mut slab = lock(&self.others);
            slab.reclaim = Some(reclaim);
            return slab.insert(node);
        };
        debug_assert_eq!(
            Worker::current()
                .filter(|w| ptr::eq(&w.shared.parked, self))
                .map(|w| w.index),
            Some(index),
            "a worker's shard is used by another thread"
        );
        // SAFETY: `here` names the calling thread's worker of this runtime
        // (caller), whose thread alone uses this shard while the workers
        // run (`OwnShard`); no other borrow of it is live (nothing below
        // calls out).
        let slab = unsafe { &mut *self.own[index].0.get() };
        slab.reclaim = Some(reclaim);
        slab.insert(node)
    }

    /// Calls `f` with every shard's slab.
    ///
    /// # Safety
    /// Every worker thread of the runtime has exited (see [`OwnShard`]).
    unsafe fn each_slab(&self, mut f: impl FnMut(&Slab)) {
        for shard in self.own.iter() {
            // SAFETY: the workers have exited (caller), so nobody else
            // uses the shard; only shared borrows are made here.
            f(unsafe { &*shard.0.get() });
        }
        f(&lock(&self.others));
    }

    /// Takes the registry's reference out of `slot` if it is still there.
    ///
    /// # Safety
    /// `slot` is a node's slot in this runtime's registry, and the caller
    /// keeps the runtime alive.
    pub(crate) unsafe fn leave(slot: *const ParkedSlot) -> Option<NonNull<ParkedNode>> {
        // SAFETY: slots live as long as the runtime (the caller's promise).
        let slot = unsafe { &*slot };
        // Acquire: pairs with the Release store in `Slab::insert`.
        NonNull::new(slot.swap(ptr::null_mut(), Ordering::Acquire))
    }

    /// Takes the registry's reference to `node` out of `slot` if the slot
    /// still holds `node`: once the reclaim emptied it, a later
    /// registration may have reused the slot for another node, whose
    /// reference is not the caller's to take.
    ///
    /// # Safety
    /// As for [`Parked::leave`].
    pub(crate) unsafe fn leave_own(slot: *const ParkedSlot, node: NonNull<ParkedNode>) -> bool {
        // SAFETY: slots live as long as the runtime (the caller's promise).
        let slot = unsafe { &*slot };
        // Acquire: pairs with the Release store in `Slab::insert`.
        slot.compare_exchange(
            node.as_ptr(),
            ptr::null_mut(),
            Ordering::Acquire,
            Ordering::Relaxed,
        )
        .is_ok()
    }

    /// Cancels every registered task still parked, once the runtime's
    /// workers have left: none of them can run on this runtime any more.
    ///
    /// Their closures are dropped, which drops the promise handles they
    /// hold: those promises break and their other waiters are cancelled in
    /// turn, so a cycle of tasks waiting on each other is freed instead of
    /// being kept forever by its own members. Every task claimed here first
    /// (before any closure is dropped), so each task parked at shutdown
    /// reports [`Cancellation::RuntimeShutDown`]. A node whose events never
    /// close (a promise whose handle someone keeps) stays linked there,
    /// without its task, until they do.
    ///
    /// # Safety
    /// Every worker thread of the runtime has exited.
    pub(crate) unsafe fn reclaim(&self) {
        let mut claimed = Vec::new();
        let take_back = |slab: &Slab| {
            for i in 0..slab.chunks.len() * CHUNK {
                // SAFETY: a slot of ours; we are part of the runtime.
                let Some(node) = (unsafe { Self::leave(slab.slot(i)) }) else {
                    continue;
                };
                let reclaim = slab.reclaim.expect("a slab with nodes has their reclaim");
                // SAFETY: the node was registered with this function, and
                // we just took its registry reference.
                if let Some(owned) = unsafe { reclaim(node) } {
                    claimed.push(owned);
                }
            }
        };
        // SAFETY: the workers have exited (caller).
        unsafe { self.each_slab(take_back) };
        // Outside the locks: cancelling drops user closures.
        for (task, runtime) in claimed {
            Self::count(&runtime, false);
            task.cancel(Cancellation::RuntimeShutDown);
        }
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        let give_up = |slab: &Slab| {
            for i in 0..slab.chunks.len() * CHUNK {
                // SAFETY: a slot of ours.
                if let Some(node) = unsafe { Self::leave(slab.slot(i)) } {
                    // None is left: an unclaimed node holds its runtime
                    // alive, and the side that won the claim empties the
                    // slot while it holds the runtime (or the reclaim did).
                    // Should one be left anyway, give up the registry's
                    // reference; its task was claimed by its settling side.
                    let reclaim = slab.reclaim.expect("a slab with nodes has their reclaim");
                    // SAFETY: as in `reclaim`.
                    let owned = unsafe { reclaim(node) };
                    debug_assert!(owned.is_none(), "an unclaimed node outlived its runtime");
                    std::mem::forget(owned);
                }
            }
        };
        // SAFETY: the registry's last reference is going: every worker
        // has left its loop and dropped its reference (its thread may
        // still be exiting, but uses no shard any more), and the
        // reference counts' release and acquire order their uses of the
        // shards before this.
        unsafe { self.each_slab(give_up) };
    }
}
