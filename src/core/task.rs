//! Type-erased tasks: the header every runnable task starts with, the
//! vtable that knows its closure's type, and [`TaskRef`], the owned right
//! to run a task.
//!
//! A pooled task is one [`TaskBlock`]: a small header (vtable, intrusive
//! link, join state) and [`INLINE`] bytes of payload. The payload first
//! holds the closure and, after the task ran, its result
//! (`std::thread::Result<T>`), so a handle that knows only `T` finds the
//! result at offset 0 (`closure_task.rs` makes such tasks). Blocks come
//! from the allocator of `block_alloc.rs`. Other tasks keep their header
//! in an object of their own (a `join`'s stack job, a graph's node).

use crate::core::error::Cancellation;
use crate::core::join_slot::JoinSlot;
use crate::core::sync::{AtomicU64, AtomicUsize, Ordering, UnsafeCell as UnsafeLink};
use crate::core::worker_address::WorkerAddress;
use std::cell::UnsafeCell;
use std::mem::{size_of, MaybeUninit};
use std::ptr::{self, NonNull};

/// Payload bytes stored inline in a block. (With the `trace` feature the
/// header holds a task's name and flow, and the payload gives up the room.)
#[cfg(not(feature = "trace"))]
pub(crate) const INLINE: usize = 192;
#[cfg(feature = "trace")]
pub(crate) const INLINE: usize = 160;
pub(super) const PAYLOAD_ALIGN: usize = 16;

#[repr(C, align(16))]
struct Payload(MaybeUninit<[u8; INLINE]>);

/// Functions that know the erased closure type of a task. (A handle knows
/// the result type itself, so dropping a result needs no entry here.)
pub(crate) struct VTable {
    /// Runs a queued task; publishes the result or frees the block.
    pub(crate) run: unsafe fn(NonNull<Header>),
    /// Runs the task for its own joining handle, writing the
    /// `std::thread::Result<T>` to `out`; the block is left for the caller.
    /// Only handled tasks have one: nothing else has a handle to join it
    /// (a stack job's joiner runs it through `StackJob::run_here`).
    pub(crate) run_inline: Option<unsafe fn(NonNull<Header>, *mut ())>,
    /// Runs a handled task for its own joining handle, writing the `T` to
    /// `out`; the block is freed first, and a panic unwinds out as it is.
    /// Only handled tasks have one (see [`run_for_value`](crate::core::closure_task::run_for_value)).
    pub(crate) run_value: Option<unsafe fn(NonNull<Header>, *mut (), OwnPool)>,
    /// Drops a queued task's closure without running it and publishes the
    /// cancellation as its result (or frees the block when detached).
    pub(crate) cancel: unsafe fn(NonNull<Header>, Cancellation),
    /// The name of the task's closure type: its name in a trace (or a
    /// stall warning) unless it was given one.
    pub(crate) type_name: fn() -> &'static str,
}

/// A worker's own block pool, which the worker keeps and reaches with one
/// load, where the thread-local costs a call on some targets: `spawn` and
/// the `join` that takes its task back allocate and free through it.
///
/// Only the thread that installed the pool may use it (a `Worker` is only
/// reached from its own thread), and the pool outlives the worker: the
/// worker's thread declares the pool before it runs the worker and drops
/// it after.
///
/// It points to a `BlockPool` (`block_pool.rs`), which `block_alloc.rs`
/// installs and gives this type its methods. The pointer is untyped here
/// because a vtable entry takes the pool, and the pool's type, which holds
/// task headers, sits above this file.
#[derive(Clone, Copy)]
pub(crate) struct OwnPool(pub(super) NonNull<()>);

/// What every runnable task starts with: pooled blocks and the stack jobs of
/// fork-join alike. Queues and reply slots hold pointers to headers.
#[repr(C)]
pub(crate) struct Header {
    pub(super) vtable: &'static VTable,
    /// Link for batches of stolen tasks (and the pool's free list); touched
    /// only by whoever owns the task at the time.
    pub(super) next: UnsafeLink<*mut Header>,
    pub(super) join_slot: JoinSlot,
    /// Where a delayed task was queued when a fulfill made it ready (the
    /// worker's address and deque position; 0 before), so its handle's `join`
    /// on that worker can take it back and run it in place. Written once,
    /// before the push, by the worker that queues it; a handle trusts it
    /// only on that same worker, and `take_back` checks the slot anyway.
    ready_worker: AtomicUsize,
    ready_pos: AtomicU64,
    /// The task's name and incoming flow in a trace (see `trace/`).
    #[cfg(feature = "trace")]
    trace: TaskTrace,
}

/// A task's trace fields. Written by whoever owns the task at the time
/// (its maker, a fulfiller queueing it, a victim giving it away) before it
/// passes the task on; queues and reply slots order those writes before
/// the next owner's reads, so relaxed atomics suffice.
#[cfg(feature = "trace")]
struct TaskTrace {
    /// A given name's address (0: none, the vtable's type name) and length.
    name: (AtomicU64, AtomicU64),
    /// The flow that brings the task to its runner (0: none).
    flow: AtomicU64,
}

impl Header {
    /// A header for a task run by `vtable`, with a fresh completion.
    pub(crate) fn new(vtable: &'static VTable) -> Self {
        Self {
            vtable,
            next: UnsafeLink::new(ptr::null_mut()),
            join_slot: JoinSlot::new(),
            ready_worker: AtomicUsize::new(0),
            ready_pos: AtomicU64::new(0),
            #[cfg(feature = "trace")]
            trace: TaskTrace {
                name: (AtomicU64::new(0), AtomicU64::new(0)),
                flow: AtomicU64::new(0),
            },
        }
    }
}

/// One pooled task: header plus inline payload. Aligned only as the payload
/// needs: a stricter alignment sends every allocation through the
/// allocator's slow aligned path.
#[repr(C, align(16))]
pub(crate) struct TaskBlock {
    header: Header,
    payload: UnsafeCell<Payload>,
}

static_assertions::const_assert!(size_of::<TaskBlock>() <= 256);

/// An owned, type-erased, runnable task.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TaskRef(pub(super) NonNull<Header>);

// SAFETY: a TaskRef is created only for closures that are Send (or whose
// non-'static borrows are kept alive by a scope/join that waits for them), and
// it is the unique owner of the right to run the task.
unsafe impl Send for TaskRef {}

impl TaskRef {
    /// The header address, for identity checks.
    #[inline]
    pub(crate) fn ptr(&self) -> NonNull<Header> {
        self.0
    }

    /// A task whose header lives in a longer-lived object of a layer above
    /// (a graph's node), queued once per run of that object: its vtable's
    /// `run` and `cancel` find the object from the header, and neither
    /// frees anything.
    ///
    /// # Safety
    /// `header` must be the first field of a `#[repr(C)]` object that the
    /// header's vtable functions expect, that stays in place until the
    /// task was run or cancelled, and that is queued at most once at a
    /// time (the returned task is the unique right to run it).
    #[inline]
    pub(crate) unsafe fn resident(header: NonNull<Header>) -> TaskRef {
        TaskRef(header)
    }

    /// Runs the task, consuming it.
    #[inline]
    pub(crate) fn run(self) {
        // SAFETY: a TaskRef points to a live header.
        let run = unsafe { self.0.as_ref() }.vtable.run;
        // SAFETY: a TaskRef owns the right to run its task: the block (or
        // stack job) holds an unrun closure matching its vtable, and the
        // TaskRef is consumed here.
        unsafe { run(self.0) }
    }

    /// Cancels the task, consuming it: its closure is dropped unrun and its
    /// handle (if any) reports `why`.
    pub(crate) fn cancel(self, why: Cancellation) {
        // SAFETY: a TaskRef points to a live header.
        let cancel = unsafe { self.0.as_ref() }.vtable.cancel;
        // SAFETY: a TaskRef owns its unrun task, so it may drop it unrun;
        // the TaskRef is consumed here.
        unsafe { cancel(self.0, why) }
    }

    /// Records that worker `worker` is about to queue this task at `pos`
    /// (see `Header::ready_worker`).
    pub(crate) fn note_queued_at(&self, worker: WorkerAddress, pos: u64) {
        // SAFETY: we own the task.
        let h = unsafe { self.0.as_ref() };
        h.ready_pos.store(pos, Ordering::Relaxed);
        h.ready_worker.store(worker.to_word(), Ordering::Relaxed);
    }

    /// Names the task in a trace after `F`, the closure its maker was
    /// given, unless `named` gives it a name. Nothing without the `trace`
    /// feature.
    #[inline(always)]
    pub(crate) fn name_after<F>(&self) {
        #[cfg(feature = "trace")]
        self.set_trace_name(crate::core::trace::names::name_for::<F>());
    }

    #[cfg(feature = "trace")]
    fn header(&self) -> &Header {
        // SAFETY: a TaskRef points to a live header.
        unsafe { self.0.as_ref() }
    }

    /// Names the task in a trace.
    #[cfg(feature = "trace")]
    pub(crate) fn set_trace_name(&self, name: &'static str) {
        let (ptr, len) = crate::core::trace::record::name_words(name);
        let t = &self.header().trace;
        t.name.0.store(ptr, Ordering::Relaxed);
        t.name.1.store(len, Ordering::Relaxed);
    }

    /// The task's name in a trace, as an event's two words.
    #[cfg(feature = "trace")]
    #[inline]
    pub(crate) fn trace_name(&self) -> (u64, u64) {
        // SAFETY: a TaskRef points to a live header.
        crate::core::trace::record::name_words(unsafe { name(self.0) })
    }

    /// The flow that brings the task to its runner (0: none).
    #[cfg(feature = "trace")]
    #[inline]
    pub(crate) fn trace_flow(&self) -> u64 {
        self.header().trace.flow.load(Ordering::Relaxed)
    }

    /// Sets the flow that brings the task to its runner.
    #[cfg(feature = "trace")]
    pub(crate) fn set_trace_flow(&self, flow: u64) {
        self.header().trace.flow.store(flow, Ordering::Relaxed);
    }

    /// Links `self` in front of `next` (a batch for a thief).
    pub(crate) fn into_list(self, next: *mut Header) -> *mut Header {
        // SAFETY: we own the block.
        unsafe { self.0.as_ref() }
            .next
            // SAFETY: only the block's owner touches its link.
            .with_mut(|l| unsafe { *l = next });
        self.0.as_ptr()
    }

    /// Splits the head off a list made by [`TaskRef::into_list`].
    ///
    /// # Safety
    /// `list` must be a non-null list owned by the caller.
    pub(crate) unsafe fn pop_list(list: *mut Header) -> (TaskRef, *mut Header) {
        // SAFETY: the caller passes a non-null list.
        let head = unsafe { NonNull::new_unchecked(list) };
        // SAFETY: the caller owns the list, and each of its headers is a
        // live task.
        let next = unsafe { head.as_ref() }
            .next
            // SAFETY: only the block's owner touches its link.
            .with_mut(|l| unsafe { std::mem::replace(&mut *l, ptr::null_mut()) });
        (TaskRef(head), next)
    }
}

/// The payload bytes of a pooled block. (Every header given to `store`,
/// `take` and the typed vtables heads a `TaskBlock`: `alloc_block` makes
/// them whole, and the pointer keeps the whole block's provenance.)
#[inline(always)]
pub(super) fn payload(block: NonNull<Header>) -> *mut u8 {
    payload_of(block.as_ptr())
}

/// [`payload`] of a raw block pointer (a free block's, in the pool).
#[inline(always)]
pub(super) fn payload_of(block: *mut Header) -> *mut u8 {
    // Pointer arithmetic only, no reference to the block: this needs
    // neither liveness nor uniqueness (the callers' accesses do).
    block
        .cast::<u8>()
        .wrapping_add(std::mem::offset_of!(TaskBlock, payload))
}

impl TaskRef {
    /// The address of payload byte `at` of the task's block (`at` below
    /// [`INLINE`]).
    pub(crate) fn payload_at(&self, at: usize) -> NonNull<u8> {
        debug_assert!(at < INLINE);
        // SAFETY: in bounds of the block (`at < INLINE`), so non-null.
        unsafe { NonNull::new_unchecked(payload(self.0).wrapping_add(at)) }
    }

    /// Inverse of [`TaskRef::payload_at`]: the header of the block whose
    /// payload byte `at` is at `p`.
    pub(crate) fn header_of_payload_at(p: NonNull<u8>, at: usize) -> NonNull<Header> {
        let header = p
            .as_ptr()
            .wrapping_sub(at + std::mem::offset_of!(TaskBlock, payload));
        // SAFETY: `p` is in a block's payload (caller), so this is its start.
        unsafe { NonNull::new_unchecked(header.cast()) }
    }
}

/// Calls `f` with each task of a list made by [`TaskRef::into_list`],
/// leaving the list as it is.
///
/// # Safety
/// The caller owns the list (it may still link or send it).
#[cfg(feature = "trace")]
pub(crate) unsafe fn for_each_listed(mut list: *mut Header, mut f: impl FnMut(&TaskRef)) {
    while let Some(head) = NonNull::new(list) {
        f(&TaskRef(head));
        // SAFETY: the caller owns the list, so each header is live.
        let header = unsafe { head.as_ref() };
        // SAFETY: only the list's owner, the caller, touches its links.
        list = header.next.with(|l| unsafe { *l });
    }
}

/// The join state of a handled block.
///
/// # Safety
/// `block` must be live (the handle side keeps it so until it releases).
#[inline]
pub(crate) unsafe fn join_slot<'a>(block: NonNull<Header>) -> &'a JoinSlot {
    // SAFETY: the header is live (caller) and its completion is only ever
    // shared, never borrowed mutably, until the block is freed.
    unsafe { &(*block.as_ptr()).join_slot }
}

/// The name of `block`'s task: its name in a trace (feature `trace`),
/// else its closure's type. # Safety: `block` is live.
pub(crate) unsafe fn name(block: NonNull<Header>) -> &'static str {
    // SAFETY: live (caller); only the vtable and the name's words are read.
    let h = unsafe { block.as_ref() };
    #[cfg(feature = "trace")]
    if let (ptr @ 1.., len) = (
        h.trace.name.0.load(Ordering::Relaxed),
        h.trace.name.1.load(Ordering::Relaxed),
    ) {
        // SAFETY: the words were made by `name_words` from a `&'static str`.
        return unsafe { crate::core::trace::record::words_name((ptr, len)) };
    }
    (h.vtable.type_name)()
}

/// Where the task was queued when it became ready: the worker and the
/// position on its deque; no worker when it was not queued that way.
///
/// # Safety
/// `block` must be live (its handle keeps it so).
#[inline]
pub(crate) unsafe fn queued_at(block: NonNull<Header>) -> (Option<WorkerAddress>, u64) {
    // SAFETY: live (caller); only atomics are read through it.
    let h = unsafe { block.as_ref() };
    (
        WorkerAddress::from_word(h.ready_worker.load(Ordering::Relaxed)),
        h.ready_pos.load(Ordering::Relaxed),
    )
}
