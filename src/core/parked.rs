//! The registry of tasks parked off the deques: tasks waiting on
//! something else than a worker (delayed tasks waiting on promises).
//!
//! It counts them, for [`crate::RuntimeStats::tasks_waiting_on_dependencies`],
//! and keeps their nodes reachable, so that dropping the runtime can
//! cancel the ones that can never run, cycles included (see
//! [`Parked::reclaim`]), and their names readable, so that the stall
//! warning can say which tasks wait (see [`Parked::census`]).

use crate::core::error::Cancellation;
use crate::core::sync::{lock, AtomicPtr, AtomicU64, Mutex, Ordering};
use crate::core::task::TaskRef;
use crate::core::trace::names::{NameCell, TaskName};
use crossbeam_utils::CachePadded;
use std::cell::UnsafeCell;
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// A parked node, as this registry sees it: an address whose layout only
/// the layer that parked it knows.
pub(crate) enum ParkedNode {}

/// Where the registry keeps a node's reference (an atomic pointer at a
/// fixed address, which the node knows), with its task's name for a
/// census ([`Parked::census`]).
pub(crate) struct ParkedSlot {
    node: AtomicPtr<ParkedNode>,
    name: NameCell,
}

impl ParkedSlot {
    fn new() -> Self {
        Self {
            node: AtomicPtr::new(ptr::null_mut()),
            name: NameCell::new(),
        }
    }
}

/// What [`Parked::reclaim`] does with a node whose registry reference it
/// swapped out of the node's slot: claims the node's task if nobody has,
/// and gives up the reference; returns the task to cancel, if any (one it
/// claimed, or one the settling side left to the last party).
///
/// # Safety
/// Called only with a node registered with this function, by the holder
/// of the node's registry reference, which it gives up.
pub(crate) type ReclaimNode = unsafe fn(NonNull<ParkedNode>) -> Option<Reclaimed>;

/// What [`Parked::reclaim`] cancels, once out of the registry's locks (a
/// cancellation drops user closures).
pub(crate) enum Reclaimed {
    /// A task taken from its node, whole.
    Task(TaskRef, Arc<dyn ParkedRuntime>),
    /// A node whose task lives in the same block as the node, which its
    /// protocol side may still read: `cancel` cancels the task while the
    /// block stays, then gives up the reclaim's reference on the node (the
    /// last reference gives the block back).
    InPlace {
        node: NonNull<ParkedNode>,
        runtime: Arc<dyn ParkedRuntime>,
        cancel: unsafe fn(NonNull<ParkedNode>, Cancellation),
    },
}

/// The runtime of a task [`Parked::reclaim`] cancels, as this registry
/// sees it: the runtime's registry (implemented in `parked_here.rs`, which
/// knows it), here only the count it keeps of its parked tasks.
pub(crate) trait ParkedRuntime: Send + Sync {
    /// Counts a parked task of this runtime released on the calling
    /// thread (see `Parked::count`).
    fn count_released(&self);
}

/// A runtime's delayed tasks that wait on promises: the counts behind
/// [`crate::RuntimeStats::tasks_waiting_on_dependencies`], and a registry
/// of their nodes, so that dropping the runtime can cancel the ones that
/// can never run (see [`Parked::reclaim`]), and the stall warning can name
/// them (see [`Parked::census`]).
///
/// The layer that parks tasks (dataflow's delayed tasks) owns the nodes;
/// this registry only keeps their addresses, opaque, with the function
/// that reclaims one ([`ReclaimNode`]).
///
/// The registry holds one of a node's two references (the node's claim,
/// see `dataflow/event.rs`) in a
/// *slot*: an atomic pointer at a fixed address, which the node knows.
/// Whoever empties the slot owns that reference: the side that settles
/// the node, as soon as it has won the node's claim (it then holds both
/// references and is done with the node at once), or the runtime's
/// reclaim, which swaps every slot before it claims the node and releases
/// the reference after. Exactly one of them finds the node there.
/// The settling side touches the slot only after winning the claim, when
/// it holds the runtime (and so the registry) alive, or on a worker of the
/// node's runtime while the claim is open, where no reclaim can run (it
/// then needs no claim: see [`Parked::leave_on_worker`]); reclaim claims
/// only after its swap, so a settling side that lost the claim never needs
/// the slot.
pub(crate) struct Parked {
    /// One shard per worker, whose free slots only that worker's thread
    /// touches while the workers run (see [`Shard`]): parking a task takes
    /// no lock.
    pub(super) own: Box<[CachePadded<Shard>]>,
    /// The shard of every other thread; the lock makes one of them at a
    /// time its user.
    pub(super) others: CachePadded<(Mutex<()>, Shard)>,
    /// Parks minus releases counted on threads that are not workers of the
    /// runtime (wrapping). Workers count in their own counters.
    pub(super) foreign: AtomicU64,
}

/// A shard of the registry: slots in chunks that never move (a node keeps
/// its slot's address), and the list of free ones.
///
/// The free list belongs to the shard's *user*: its worker's thread while
/// the workers run (the shard of other threads: whoever holds its lock),
/// and [`Parked::reclaim`] and the registry's drop once every worker thread
/// has exited. Registering takes a slot from it with no lock. The chunks
/// are behind a lock that the user takes only to add chunks (when the free
/// list runs out), and that a reader of every slot takes (the reclaim, the
/// registry's drop, a census while the workers run): a reader never sees
/// the list of chunks move. What other threads do with a node's slot (take
/// it back on settling) goes through the slot's atomics.
pub(super) struct Shard {
    user: UnsafeCell<ShardUser>,
    chunks: Mutex<Vec<Box<[ParkedSlot]>>>,
}

/// What only a shard's user touches (see [`Shard`]).
#[derive(Default)]
struct ShardUser {
    /// Slots known to be empty. Emptied slots (swapped by the settling
    /// side) are found again by a scan when this runs out.
    free: Vec<*const ParkedSlot>,
    /// How to reclaim the nodes stored here (the same function for every
    /// node: one kind of node parks).
    reclaim: Option<ReclaimNode>,
}

// SAFETY: see the type's docs: one thread at a time uses `user` (the
// hand-over, a worker thread's exit then the join in the runtime's shut
// down, or the others' lock, orders its uses), `chunks` is behind its
// lock, and the slots are atomics.
unsafe impl Sync for Shard {}
// SAFETY: as above; the free list's pointers point into the shard's own
// chunks.
unsafe impl Send for Shard {}

/// Slots per chunk.
const CHUNK: usize = 64;

impl Shard {
    fn new() -> Self {
        Self {
            user: UnsafeCell::new(ShardUser::default()),
            chunks: Mutex::new(Vec::new()),
        }
    }

    /// Stores `node`, named `name`, in a free slot and returns the slot.
    ///
    /// # Safety
    /// The caller is the shard's user (see [`Shard`]).
    #[inline]
    pub(super) unsafe fn insert(
        &self,
        node: NonNull<ParkedNode>,
        name: TaskName,
        reclaim: ReclaimNode,
    ) -> *const ParkedSlot {
        // SAFETY: the caller is the user, the only one touching `user`;
        // no other borrow of it is live (nothing below calls out).
        let user = unsafe { &mut *self.user.get() };
        user.reclaim = Some(reclaim);
        let slot = match user.free.pop() {
            Some(slot) => slot,
            None => self.refill(&mut user.free),
        };
        // SAFETY: slots live in chunks that never move, as long as the
        // shard.
        let s = unsafe { &*slot };
        s.name.store(name);
        // Release: whoever swaps the node out reads a fully made node, and
        // a census that finds it reads its name.
        s.node.store(node.as_ptr(), Ordering::Release);
        slot
    }

    /// Finds the slots emptied since the last scan and returns one; doubles
    /// the slots when fewer than half are empty, so scans cost O(1) per
    /// insertion.
    #[cold]
    fn refill(&self, free: &mut Vec<*const ParkedSlot>) -> *const ParkedSlot {
        let mut chunks = lock(&self.chunks);
        let capacity = chunks.len() * CHUNK;
        free.extend(
            chunks
                .iter()
                .flat_map(|c| c.iter())
                .filter(|s| s.node.load(Ordering::Relaxed).is_null())
                .map(|s| s as *const ParkedSlot),
        );
        if free.len() * 2 <= capacity {
            // Double the slots (one chunk at least): the next scan comes
            // after as many insertions as this one read slots.
            let added = capacity.max(CHUNK) / CHUNK;
            for _ in 0..added {
                chunks.push((0..CHUNK).map(|_| ParkedSlot::new()).collect());
            }
            // Last first: the list is popped from its end.
            free.extend(
                chunks[chunks.len() - added..]
                    .iter()
                    .rev()
                    .flat_map(|c| c.iter().rev())
                    .map(|s| s as *const ParkedSlot),
            );
        }
        free.pop().expect("refill leaves a free slot")
    }

    /// Calls `f` with every slot and the shard's reclaim function.
    ///
    /// # Safety
    /// The caller is the shard's user (see [`Shard`]).
    unsafe fn each_slot(&self, mut f: impl FnMut(&ParkedSlot, Option<ReclaimNode>)) {
        // SAFETY: the caller is the user: nobody else touches `user`.
        let reclaim = unsafe { (*self.user.get()).reclaim };
        for slot in lock(&self.chunks).iter().flat_map(|c| c.iter()) {
            f(slot, reclaim);
        }
    }
}

impl Parked {
    pub(crate) fn new(workers: usize) -> Self {
        Self {
            own: (0..workers)
                .map(|_| CachePadded::new(Shard::new()))
                .collect(),
            others: CachePadded::new((Mutex::new(()), Shard::new())),
            foreign: AtomicU64::new(0),
        }
    }

    /// Every shard.
    fn shards(&self) -> impl Iterator<Item = &Shard> {
        self.own.iter().map(|s| &**s).chain([&self.others.1])
    }

    /// Calls `f` with every slot and its shard's reclaim function.
    ///
    /// # Safety
    /// Every worker thread of the runtime has exited (see [`Shard`]).
    unsafe fn each_slot(&self, mut f: impl FnMut(&ParkedSlot, Option<ReclaimNode>)) {
        for shard in self.own.iter() {
            // SAFETY: the workers have exited (caller).
            unsafe { shard.each_slot(&mut f) };
        }
        // Other threads may still register (a holder of the registry, such
        // as a GPU device): their lock makes us the shard's user.
        let (others, shard) = &*self.others;
        let _user = lock(others);
        // SAFETY: we are its user, under the lock.
        unsafe { shard.each_slot(f) };
    }

    /// Parks minus releases counted outside the workers (wrapping: read it
    /// as a signed number).
    pub(crate) fn foreign_balance(&self) -> u64 {
        self.foreign.load(Ordering::Relaxed)
    }

    /// The names of the tasks parked here now, most frequent first, with
    /// how many carry each (for the stall warning). Safe while the workers
    /// run: each shard's chunks are read under their lock and the slots are
    /// atomics; tasks that park or leave meanwhile may or may not be seen.
    pub(crate) fn census(&self) -> Vec<(&'static str, usize)> {
        let mut names: Vec<(&'static str, usize)> = Vec::new();
        for shard in self.shards() {
            for slot in lock(&shard.chunks).iter().flat_map(|c| c.iter()) {
                // Acquire: pairs with the Release store in `Shard::insert`,
                // so the name stored before the node is seen.
                if slot.node.load(Ordering::Acquire).is_null() {
                    continue;
                }
                let Some(name) = slot.name.load() else {
                    continue;
                };
                let name = name.get();
                match names.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, count)) => *count += 1,
                    None => names.push((name, 1)),
                }
            }
        }
        names.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        names
    }

    /// Takes the registry's reference out of `slot` if it is still there.
    ///
    /// # Safety
    /// `slot` is a node's slot in this runtime's registry, and the caller
    /// keeps the runtime alive.
    pub(crate) unsafe fn leave(slot: *const ParkedSlot) -> Option<NonNull<ParkedNode>> {
        // SAFETY: slots live as long as the runtime (the caller's promise).
        let slot = unsafe { &*slot };
        // Acquire: pairs with the Release store in `Shard::insert`.
        NonNull::new(slot.node.swap(ptr::null_mut(), Ordering::Acquire))
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
        // Acquire: pairs with the Release store in `Shard::insert`.
        slot.node
            .compare_exchange(
                node.as_ptr(),
                ptr::null_mut(),
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Empties `slot`, which holds the caller's node, on a worker of the
    /// slot's runtime: there, nobody else can take the node's registry
    /// reference (only [`Parked::reclaim`] swaps a slot it did not fill, and
    /// it runs once every worker thread has exited), so a store does what
    /// [`Parked::leave_own`]'s compare-and-swap does elsewhere.
    ///
    /// # Safety
    /// `slot` holds the caller's node, and the calling thread is a worker
    /// of the slot's runtime.
    pub(crate) unsafe fn leave_on_worker(slot: *const ParkedSlot) {
        // SAFETY: slots live as long as the runtime, which our worker
        // keeps alive (caller).
        let slot = unsafe { &*slot };
        // Relaxed: the slot publishes nothing of ours; its shard's user,
        // which may fill it again once it reads it empty, writes a whole
        // new node and name.
        slot.node.store(ptr::null_mut(), Ordering::Relaxed);
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
        let take_back = |slot: &ParkedSlot, reclaim: Option<ReclaimNode>| {
            // SAFETY: a slot of ours; we are part of the runtime.
            let Some(node) = (unsafe { Self::leave(slot) }) else {
                return;
            };
            let reclaim = reclaim.expect("a shard with nodes has their reclaim");
            // SAFETY: the node was registered with this function, and we
            // just took its registry reference.
            if let Some(owned) = unsafe { reclaim(node) } {
                claimed.push(owned);
            }
        };
        // SAFETY: the workers have exited (caller).
        unsafe { self.each_slot(take_back) };
        // Outside the locks: cancelling drops user closures.
        for reclaimed in claimed {
            match reclaimed {
                Reclaimed::Task(task, runtime) => {
                    runtime.count_released();
                    task.cancel(Cancellation::RuntimeShutDown);
                }
                Reclaimed::InPlace {
                    node,
                    runtime,
                    cancel,
                } => {
                    runtime.count_released();
                    // SAFETY: `reclaim` handed the node over with the
                    // reclaim's reference, to be cancelled once.
                    unsafe { cancel(node, Cancellation::RuntimeShutDown) };
                }
            }
        }
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        let give_up = |slot: &ParkedSlot, reclaim: Option<ReclaimNode>| {
            // SAFETY: a slot of ours.
            if let Some(node) = unsafe { Self::leave(slot) } {
                // None is left: an unclaimed node holds its runtime alive,
                // and the side that won the claim empties the slot while it
                // holds the runtime (or the reclaim did). Should one be left
                // anyway, give up the registry's reference; its task was
                // claimed by its settling side.
                let reclaim = reclaim.expect("a shard with nodes has their reclaim");
                // SAFETY: as in `reclaim`.
                let owned = unsafe { reclaim(node) };
                debug_assert!(owned.is_none(), "an unclaimed node outlived its runtime");
                std::mem::forget(owned);
            }
        };
        // SAFETY: the registry's last reference is going: every worker
        // has left its loop and dropped its reference (its thread may
        // still be exiting, but uses no shard any more), and the
        // reference counts' release and acquire order their uses of the
        // shards before this.
        unsafe { self.each_slot(give_up) };
    }
}

#[cfg(test)]
mod tests {
    use crate::{Promise, Runtime};
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A census reads every shard while the workers park and release tasks
    /// (and grow their shards): it sees only names of tasks parked here,
    /// and, once they are all parked, each of them. Run under
    /// AddressSanitizer in CI, it also checks that reading a shard whose
    /// chunks grow meanwhile touches no freed memory.
    #[test]
    fn a_census_reads_the_shards_while_the_workers_park_tasks() {
        let rt = Runtime::builder().num_threads(3).build().unwrap();
        let parked = move || ();
        let expected = std::any::type_name_of_val(&parked);
        let stop = AtomicBool::new(false);
        /// Stops the reader however the test ends.
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    for (name, _) in rt.registry().parked.census() {
                        assert_eq!(name, expected);
                    }
                }
            });
            let _stop = Stop(&stop);
            for _ in 0..20 {
                let p = Promise::new();
                rt.run(|| {
                    let handles: Vec<_> = (0..2000)
                        .map(|_| {
                            let dep = p.dep();
                            crate::spawn(move || crate::spawn_delayed([dep], parked))
                        })
                        .collect();
                    let delayed: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
                    let census = rt.registry().parked.census();
                    assert_eq!(census, [(expected, 2000)]);
                    p.fulfill();
                    delayed.into_iter().for_each(|h| h.join());
                });
            }
        });
    }
}
