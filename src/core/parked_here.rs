//! Parking a task on the calling thread, in its runtime's registry of
//! parked tasks (`parked.rs`): the shard of the thread's worker, and the
//! counts of tasks parked and released. Apart from `parked.rs`, which the
//! registry holds, because it asks for the thread's worker.

use crate::core::parked::{Parked, ParkedNode, ParkedRuntime, ParkedSlot, ReclaimNode};
use crate::core::registry::Registry;
use crate::core::sync::{lock, Ordering};
use crate::core::trace::names::TaskName;
use crate::core::worker::Worker;
use std::ptr::{self, NonNull};

impl Parked {
    /// The index of the calling thread's worker if it is one of
    /// `runtime`'s. The runtime is known by its address, which is compared,
    /// never read (a settling node's runtime may be gone).
    pub(crate) fn worker_here(runtime: *const Registry) -> Option<usize> {
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

    /// Puts `node` (whose registry reference the slot takes), named `name`,
    /// in the shard of worker `here`, or the shard of other threads;
    /// returns its slot. `reclaim` is what [`Parked::reclaim`] will do with
    /// the node.
    ///
    /// # Safety
    /// `here` is [`Parked::worker_here`] of the calling thread for this
    /// registry's runtime: a worker's shard is that worker's alone.
    pub(crate) unsafe fn register(
        &self,
        here: Option<usize>,
        node: NonNull<ParkedNode>,
        name: TaskName,
        reclaim: ReclaimNode,
    ) -> *const ParkedSlot {
        let Some(index) = here else {
            let (others, shard) = &*self.others;
            let _user = lock(others);
            // SAFETY: the lock makes us the shard's user.
            return unsafe { shard.insert(node, name, reclaim) };
        };
        debug_assert_eq!(
            Worker::current()
                .filter(|w| ptr::eq(&w.shared.parked, self))
                .map(|w| w.index),
            Some(index),
            "a worker's shard is used by another thread"
        );
        // SAFETY: `here` names the calling thread's worker of this runtime
        // (caller), whose thread alone is the shard's user while the
        // workers run (`Shard`).
        unsafe { self.own[index].insert(node, name, reclaim) }
    }
}

impl ParkedRuntime for Registry {
    fn count_released(&self) {
        Parked::count(self, false);
    }
}
