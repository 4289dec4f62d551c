//! The scheduler: tasks, workers, their deques and the protocols between
//! them. Nothing here knows about promises, scopes or loops; the layers
//! above build on it (see `docs/ARCHITECTURE.md`).

#[cfg(not(loom))]
pub(crate) mod address_order;
#[cfg(not(loom))]
pub(crate) mod affinity;
#[cfg(not(loom))]
pub(crate) mod block_alloc;
#[cfg(not(loom))]
pub(crate) mod block_pool;
#[cfg(not(loom))]
pub(crate) mod blocking;
#[cfg(not(loom))]
pub(crate) mod clock;
#[cfg(not(loom))]
pub(crate) mod closure_task;
#[cfg(not(loom))]
pub(crate) mod completions;
#[cfg(not(loom))]
pub(crate) mod config;
pub(crate) mod deque;
#[cfg(not(loom))]
pub(crate) mod endless;
#[cfg(not(loom))]
pub(crate) mod error;
pub(crate) mod fallback_watch;
pub(crate) mod fire_once;
pub(crate) mod gate;
#[cfg(not(loom))]
pub(crate) mod handle;
#[cfg(not(loom))]
pub(crate) mod injector;
pub(crate) mod join_slot;
pub(crate) mod latch;
#[cfg(not(loom))]
pub(crate) mod outside_pool;
pub(crate) mod park;
#[cfg(not(loom))]
pub(crate) mod parked;
#[cfg(not(loom))]
pub(crate) mod parked_here;
#[cfg(not(loom))]
pub(crate) mod polled;
#[cfg(not(loom))]
pub(crate) mod polled_signal;
#[cfg(not(loom))]
pub(crate) mod polling;
#[cfg(not(loom))]
pub(crate) mod pool;
#[cfg(not(loom))]
pub(crate) mod registry;
pub(crate) mod rescue;
#[cfg(not(loom))]
pub(crate) mod runtime_task;
#[cfg(not(loom))]
pub(crate) mod schedule;
#[cfg(not(loom))]
pub(crate) mod send_ptr;
pub(crate) mod signal;
pub(crate) mod spare_blocks;
#[cfg(not(loom))]
pub(crate) mod split;
pub(crate) mod stack_list;
#[cfg(not(loom))]
pub(crate) mod stall;
#[cfg(not(loom))]
pub(crate) mod stats;
pub(crate) mod steal;
pub(crate) mod sync;
#[cfg(not(loom))]
pub(crate) mod task;
#[cfg(not(loom))]
pub(crate) mod thread_waker;
pub(crate) mod trace;
pub(crate) mod unwind;
#[cfg(not(loom))]
pub(crate) mod wait_notes;
#[cfg(not(loom))]
pub(crate) mod worker;
#[cfg(not(loom))]
pub(crate) mod worker_address;
