//! Type-erased tasks stored inline in fixed-size, pooled blocks.
//!
//! A task is one [`TaskBlock`]: a small header (vtable, intrusive link, join
//! state) and [`INLINE`] bytes of payload. The payload first holds the closure
//! and, after the task ran, its result (`std::thread::Result<T>`), so a handle
//! that knows only `T` finds the result at offset 0. A closure or result that
//! does not fit is boxed and only the box pointer is stored: that is the one
//! case where a spawn allocates.
//!
//! Blocks come from a per-thread free list on worker threads and go back to
//! the free list of whichever worker frees them, up to 4096; beyond that
//! they go to the runtime's block exchange, from which a worker whose list
//! is empty takes them all (`spare_blocks.rs`). Other threads take the
//! blocks of the tasks they submit to a runtime from its [`OutsidePool`],
//! which takes from the same exchange; for anything else, and when that
//! pool has none, they use one free block each keeps for the next, then
//! the global allocator.

use crate::core::address_order::AddressOrdered;
use crate::core::error::{Cancellation, Cancelled};
use crate::core::join_slot::{JoinSlot, Release};
use crate::core::latch::CountLatch;
use crate::core::registry::Registry;
use crate::core::spare_blocks::{Linked, SpareBlocks};
use crate::core::sync::{
    AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering, UnsafeCell as UnsafeLink,
};
use crate::core::unwind::{catch_and_report, drop_or_report, AbortIfPanic};
use crate::core::worker::{Worker, WorkerAddress};
use crossbeam_utils::CachePadded;
use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cell::{Cell, UnsafeCell};
use std::mem::{align_of, size_of, MaybeUninit};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::{Arc, TryLockError};
use std::time::Instant;

/// Payload bytes stored inline in a block. (With the `trace` feature the
/// header holds a task's name and flow, and the payload gives up the room.)
#[cfg(not(feature = "trace"))]
pub(crate) const INLINE: usize = 192;
#[cfg(feature = "trace")]
pub(crate) const INLINE: usize = 160;
const PAYLOAD_ALIGN: usize = 16;
/// Free blocks a worker keeps in its own pool. Beyond that it passes them
/// to its runtime's block exchange, from which a worker whose pool is empty
/// takes them all (`spare_blocks.rs`): a program that makes many tasks
/// before running them (a task graph spawned up front, say) frees them as
/// they run, on whichever worker ran them, and makes as many again for its
/// next round from the same blocks, with no trip to the general allocator,
/// which with that many blocks in its bins (and freed by other threads)
/// costs more than the task. A worker idle for [`POOL_TRIM_AFTER`] gives
/// back what the exchange holds (see [`trim_pool`]).
const POOL_IDLE_CAPACITY: usize = 4096;
/// How long a worker stays idle, while spare blocks are held beyond its
/// pool, before it gives them back: longer than the pause
/// between the rounds of an iterative program, which then reuses them.
pub(crate) const POOL_TRIM_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

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
    /// Only handled tasks have one (see [`run_for_value`]).
    pub(crate) run_value: Option<unsafe fn(NonNull<Header>, *mut (), OwnPool)>,
    /// Drops a queued task's closure without running it and publishes the
    /// cancellation as its result (or frees the block when detached).
    pub(crate) cancel: unsafe fn(NonNull<Header>, Cancellation),
    /// The name of the task's closure type: its name in a trace (or a
    /// stall warning) unless it was given one.
    pub(crate) type_name: fn() -> &'static str,
}

/// What every runnable task starts with: pooled blocks and the stack jobs of
/// fork-join alike. Queues and reply slots hold pointers to headers.
#[repr(C)]
pub(crate) struct Header {
    vtable: &'static VTable,
    /// Link for batches of stolen tasks (and the pool's free list); touched
    /// only by whoever owns the task at the time.
    next: UnsafeLink<*mut Header>,
    join_slot: JoinSlot,
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
pub(crate) struct TaskRef(NonNull<Header>);

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

    /// [`name_after`](TaskRef::name_after) for a task made on `worker` (if
    /// on one): unless the worker is inside `named`, the type's name is
    /// taken without looking up the thread's `named` name (a scope's
    /// spawn, a hot path, pays two stores).
    #[inline(always)]
    #[cfg_attr(not(feature = "trace"), allow(clippy::extra_unused_type_parameters))]
    pub(crate) fn name_after_on<F>(&self, worker: Option<&Worker>) {
        #[cfg(feature = "trace")]
        match worker {
            Some(w) if !w.naming_tasks() => self.set_trace_name(std::any::type_name::<F>()),
            _ => self.name_after::<F>(),
        }
        #[cfg(not(feature = "trace"))]
        let _ = worker;
    }

    /// The name `named` gives to tasks made on worker `w` now, if any: the
    /// hot path of `spawn`, where only a flag of the worker's is read
    /// unless it is inside `named` (a task unnamed shows its vtable's type
    /// name). Nothing without the `trace` feature.
    #[inline(always)]
    pub(crate) fn name_if_naming(&self, w: &Worker) {
        #[cfg(feature = "trace")]
        if w.naming_tasks() {
            if let Some(name) = crate::core::trace::names::pending() {
                self.set_trace_name(name);
            }
        }
        #[cfg(not(feature = "trace"))]
        let _ = w;
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

/// Whether a value of type `X` is stored inline (else boxed).
const fn fits<X>() -> bool {
    size_of::<X>() <= INLINE && align_of::<X>() <= PAYLOAD_ALIGN
}

/// # Safety
/// `block` must be live and its payload free to overwrite.
unsafe fn store<X>(block: NonNull<Header>, x: X) {
    let p = payload(block);
    if fits::<X>() {
        // SAFETY: the payload is live and free to overwrite (caller), and
        // `X` fits its size and alignment (`fits`).
        unsafe { ptr::write(p.cast::<X>(), x) };
    } else {
        // SAFETY: the payload is live and free (caller), and a box pointer
        // always fits it.
        unsafe { ptr::write(p.cast::<Box<X>>(), Box::new(x)) };
    }
}

/// The payload bytes of a pooled block. (Every header given to `store`,
/// `take` and the typed vtables heads a `TaskBlock`: `alloc_block` makes
/// them whole, and the pointer keeps the whole block's provenance.)
#[inline(always)]
fn payload(block: NonNull<Header>) -> *mut u8 {
    payload_of(block.as_ptr())
}

/// [`payload`] of a raw block pointer (a free block's, in the pool).
#[inline(always)]
fn payload_of(block: *mut Header) -> *mut u8 {
    // Pointer arithmetic only, no reference to the block: this needs
    // neither liveness nor uniqueness (the callers' accesses do).
    block
        .cast::<u8>()
        .wrapping_add(std::mem::offset_of!(TaskBlock, payload))
}

/// # Safety
/// The payload must hold an `X` written by [`store`], which is moved out.
unsafe fn take<X>(block: NonNull<Header>) -> X {
    let p = payload(block);
    if fits::<X>() {
        // SAFETY: the payload holds an `X` stored inline by `store`
        // (caller); reading moves it out, and the caller treats the
        // payload as free afterwards.
        unsafe { ptr::read(p.cast::<X>()) }
    } else {
        // SAFETY: the payload holds the box `store` wrote for an `X` that
        // did not fit (caller); it is moved out, and the box then freed.
        *unsafe { ptr::read(p.cast::<Box<X>>()) }
    }
}

struct Typed<F, T>(std::marker::PhantomData<(F, T)>);

impl<F: FnOnce() -> T, T> Typed<F, T> {
    const HANDLED: VTable = VTable {
        run: Self::run_handled,
        run_inline: Some(Self::run_inline),
        run_value: Some(Self::run_value),
        cancel: Self::cancel_handled,
        type_name: std::any::type_name::<F>,
    };

    /// # Safety
    /// `block` heads a live `TaskBlock` whose payload holds this unrun
    /// closure, and the caller owns the right to run it (a `TaskRef`).
    unsafe fn run_handled(block: NonNull<Header>) {
        // SAFETY: the payload holds the unrun `F` (caller), moved out once.
        let f = unsafe { take::<F>(block) };
        let result = catch_unwind(AssertUnwindSafe(f));
        // SAFETY: the closure was moved out, so the payload is free; the
        // block lives until its completion releases it; run once.
        unsafe { Self::publish(block, result) };
    }

    /// # Safety
    /// As for `run_handled`.
    unsafe fn cancel_handled(block: NonNull<Header>, why: Cancellation) {
        // SAFETY: the payload holds the unrun `F` (caller), moved out once.
        let f = unsafe { take::<F>(block) };
        // A panicking destructor must not unwind into the canceller (a
        // fulfilling worker, or a thread dropping a promise). The handle
        // learns that its task was cancelled, which says more than that
        // panic would, so the panic is reported.
        drop_or_report("the destructor of a cancelled task's closure", f);
        // SAFETY: the closure was moved out, so the payload is free; the
        // block lives until its completion releases it; completed once.
        unsafe { Self::publish(block, Err(Box::new(Cancelled(why)))) };
    }

    /// Stores the result and completes the join slot; frees the block when
    /// the handle is gone.
    ///
    /// # Safety
    /// `block` is a live handled block of result type `T` whose payload is
    /// free, and this is its one completion.
    unsafe fn publish(block: NonNull<Header>, result: std::thread::Result<T>) {
        let ok = result.is_ok();
        // SAFETY: the payload is free (caller).
        unsafe { store::<std::thread::Result<T>>(block, result) };
        // The handle may take the result and free the block from here on:
        // unwinding out of a half-done release would leak it or strand the
        // handle. The user code below (a waker, the result's destructor) is
        // caught; anything else unwinding is a scheduler bug.
        let guard = AbortIfPanic::new();
        // SAFETY: the block is live until this completion releases it.
        let release = unsafe { join_slot(block) }.complete(ok);
        // SAFETY: `release` is this block's runner-side decision, and `T`
        // is its result type.
        unsafe { finish_release::<T>(block, release) };
        guard.disarm();
    }

    /// # Safety
    /// As for `run_handled`, and `out` is valid for writing a
    /// `std::thread::Result<T>`.
    unsafe fn run_inline(block: NonNull<Header>, out: *mut ()) {
        // SAFETY: the payload holds the unrun `F` (caller), moved out once.
        let f = unsafe { take::<F>(block) };
        let result = catch_unwind(AssertUnwindSafe(f));
        // SAFETY: `out` is writable storage for the result (caller).
        unsafe { ptr::write(out.cast::<std::thread::Result<T>>(), result) };
    }

    /// # Safety
    /// As for `run_handled`, the block has no hook and nobody but the
    /// caller knows it any more, `out` is valid for writing a `T`, and
    /// `pool` is the calling thread's own.
    unsafe fn run_value(block: NonNull<Header>, out: *mut (), pool: OwnPool) {
        // SAFETY: the payload holds the unrun `F` (caller), moved out once.
        let f = unsafe { take::<F>(block) };
        // The closure is out and nobody else knows the block (caller):
        // recycle it before running, so the task's own spawns reuse a
        // cache-hot block, and nothing is left to clean up if `f` panics.
        // SAFETY: as just said, the block has no hook, and `pool` is this
        // thread's (caller).
        unsafe { free_unhooked_block_to(block, pool) };
        let value = f();
        // SAFETY: `out` is writable storage for a `T` (caller).
        unsafe { ptr::write(out.cast::<T>(), value) };
    }
}

/// How the layer above finishes a handled task whose block it still uses
/// after the task's end (a parked task's node inside the block, see
/// `dataflow/delayed.rs`): cancel the task at once, keeping the runner's
/// hold on the block, and give that hold up later.
pub(crate) struct KeepBlock {
    /// Drops the closure unrun and publishes the cancellation to the
    /// handle (see [`JoinSlot::complete_held`]), leaving the block.
    pub(crate) cancel: unsafe fn(NonNull<Header>, Cancellation),
    /// Gives up the runner's hold: frees the block if the handle is gone.
    pub(crate) release: unsafe fn(NonNull<Header>),
}

impl<F: FnOnce() -> T, T> Typed<F, T> {
    const KEEP_BLOCK: KeepBlock = KeepBlock {
        cancel: Self::cancel_keeping_block,
        release: Self::release_runner,
    };

    /// # Safety
    /// As for `cancel_handled`; the caller calls `release_runner` later.
    unsafe fn cancel_keeping_block(block: NonNull<Header>, why: Cancellation) {
        // SAFETY: the payload holds the unrun `F` (caller), moved out once.
        let f = unsafe { take::<F>(block) };
        drop_or_report("the destructor of a cancelled task's closure", f);
        // SAFETY: the closure was moved out, so the payload is free; the
        // block lives until `release_runner` (caller).
        unsafe { store::<std::thread::Result<T>>(block, Err(Box::new(Cancelled(why)))) };
        // SAFETY: as above.
        unsafe { join_slot(block) }.complete_held(false);
    }

    /// # Safety
    /// `block` was completed by `cancel_keeping_block`, once, and is not
    /// touched by the caller afterwards.
    unsafe fn release_runner(block: NonNull<Header>) {
        // SAFETY: the runner's hold keeps the block live until this release.
        let release = unsafe { join_slot(block) }.release_runner();
        // SAFETY: this side's decision; `T` is the block's result type.
        unsafe { finish_release::<T>(block, release) };
    }
}

/// The [`KeepBlock`] functions of a handled task of `F` returning `T`.
pub(crate) fn keep_block<F: FnOnce() -> T, T>() -> &'static KeepBlock {
    &Typed::<F, T>::KEEP_BLOCK
}

/// Bytes a value of type `X` takes in a payload: its own, or a box's.
const fn stored_size<X>() -> usize {
    if fits::<X>() {
        size_of::<X>()
    } else {
        size_of::<Box<X>>()
    }
}

/// Whether a handled task of `F` returning `T` leaves the bytes of its
/// payload from `at` on untouched: its closure and its result (each inline
/// or boxed) end before them, so a layer above may keep an object there.
pub(crate) const fn leaves_payload_from<F, T>(at: usize) -> bool {
    stored_size::<F>() <= at && stored_size::<std::thread::Result<T>>() <= at
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

impl<F: FnOnce()> Typed<F, ()> {
    const DETACHED: VTable = VTable {
        run: Self::run_detached,
        run_inline: None,
        run_value: None,
        cancel: Self::cancel_detached,
        type_name: std::any::type_name::<F>,
    };

    /// Detached closures report their own cancellation when dropped unrun
    /// (a scope's task records it for the scope).
    ///
    /// # Safety
    /// `block` heads a live detached `TaskBlock` whose payload holds this
    /// unrun closure, and the caller owns it (a `TaskRef`).
    unsafe fn cancel_detached(block: NonNull<Header>, why: Cancellation) {
        // SAFETY: the payload holds the unrun `F` (caller), moved out once.
        let f = unsafe { take::<F>(block) };
        // SAFETY: no handle refers to a detached block, and its closure is
        // moved out: nobody uses it any more.
        unsafe { free_block(block) };
        // The closure's destructor may report the cancellation itself (a
        // scope's task does): tell it why.
        let outer = CANCELLING.try_with(|c| c.replace(Some(why))).ok().flatten();
        drop_or_report("the destructor of a cancelled detached task's closure", f);
        let _ = CANCELLING.try_with(|c| c.set(outer));
    }

    /// # Safety
    /// As for `cancel_detached`.
    unsafe fn run_detached(block: NonNull<Header>) {
        // SAFETY: the payload holds the unrun `F` (caller), moved out once.
        let f = unsafe { take::<F>(block) };
        // Nobody holds the block: recycle it before running, so the task's
        // own spawns reuse a cache-hot block.
        // SAFETY: no handle refers to a detached block, and its closure is
        // moved out: nobody uses the block any more.
        unsafe { free_block(block) };
        // Detached closures handle their own panics (scopes and loops
        // record them for whoever waits); one that escapes anyway has
        // nobody to go to, and must not unwind into the worker.
        catch_and_report("a detached task", f);
    }
}

/// A new task whose result a [`crate::JoinHandle`] will take.
///
/// The closure may borrow: the caller guarantees it outlives the task (it is
/// `'static`, or a scope or join waits for the task).
pub(crate) fn new_handled<F, T>(f: F) -> TaskRef
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    handled_in_block(alloc_raw(), f)
}

/// [`new_handled`] on a worker, with the block taken from the worker's own
/// pool: the hot path of `spawn`, without the thread-local lookup.
#[inline]
pub(crate) fn new_handled_in<F, T>(pool: OwnPool, f: F) -> TaskRef
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    handled_in_block(pool.pop().unwrap_or_else(alloc_fresh::<Header>), f)
}

/// [`new_handled`] for a task of `runtime`: on a thread that is no
/// runtime's worker, the block comes from the runtime's pool for such
/// threads rather than the allocator (see [`OutsidePool`]).
#[inline]
pub(crate) fn new_handled_for<F, T>(runtime: &Registry, f: F) -> TaskRef
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    handled_in_block(block_for(runtime), f)
}

/// [`alloc_raw`] for a task of `runtime` (its parked node, say): on a
/// thread that is no runtime's worker, from the runtime's [`OutsidePool`].
#[inline]
pub(crate) fn alloc_raw_for<T>(runtime: &Registry) -> NonNull<T> {
    as_raw(block_for(runtime))
}

/// A free block for a task of `runtime`: from the calling worker's pool,
/// else from the runtime's pool for other threads or this thread's spare,
/// else the allocator.
#[inline]
fn block_for(runtime: &Registry) -> NonNull<Header> {
    pooled_block(|| {
        runtime
            .outside_blocks
            .pop(&|| runtime.tasks_parked())
            .or_else(take_foreign_spare)
    })
}

/// A free block from the calling thread's installed pool, or on a thread
/// without one from `outside`, else from the allocator.
#[inline(always)]
fn pooled_block(outside: impl FnOnce() -> Option<NonNull<Header>>) -> NonNull<Header> {
    let own = POOL.with(Cell::get);
    let block = if own.is_null() {
        outside()
    } else {
        // SAFETY: a non-null `POOL` points to the pool installed by
        // `install_pool`, which outlives its guard; only this thread uses
        // it, and not reentrantly.
        unsafe { (*own).pop() }
    };
    block.unwrap_or_else(alloc_fresh::<Header>)
}

/// A free block as raw memory for a `T`, which a block must hold.
#[inline(always)]
fn as_raw<T>(block: NonNull<Header>) -> NonNull<T> {
    const {
        assert!(size_of::<T>() <= size_of::<TaskBlock>());
        assert!(align_of::<T>() <= align_of::<TaskBlock>());
    }
    block.cast()
}

/// A handled task of `f` in `block`, an unused block of a task's layout.
#[inline(always)]
fn handled_in_block<F, T>(block: NonNull<Header>, f: F) -> TaskRef
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let block = init_block(block, &Typed::<F, T>::HANDLED);
    // SAFETY: the block is fresh.
    unsafe { store::<F>(block, f) };
    TaskRef(block)
}

/// A new task with no handle: it frees its block itself.
pub(crate) fn new_detached<F>(f: F) -> TaskRef
where
    F: FnOnce() + Send,
{
    let block = alloc_block(&Typed::<F, ()>::DETACHED);
    // SAFETY: the block is fresh.
    unsafe { store::<F>(block, f) };
    TaskRef(block)
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

/// Runs a handled task that never left its owner for its handle, moving the
/// result out and freeing the block. No atomic operation: nobody else has
/// seen the block.
///
/// # Safety
/// `task` must be the handled task of type `T` belonging to the calling
/// handle, and no completion hook may be installed (it would never fire:
/// the handle runs such a task through its completion instead).
#[inline]
pub(crate) unsafe fn run_inline_for_handle<T>(task: TaskRef) -> std::thread::Result<T> {
    let mut out = MaybeUninit::<std::thread::Result<T>>::uninit();
    // SAFETY: the task owns a live block (a `TaskRef`).
    let run_inline = unsafe { task.0.as_ref() }.vtable.run_inline;
    // SAFETY: the task is a handled task (caller), and every handled
    // task's vtable has `run_inline`.
    let run_inline = unsafe { run_inline.unwrap_unchecked() };
    // SAFETY: the task is unrun and ours to run, its result type is `T`
    // (caller), and `out` has room for a `std::thread::Result<T>`.
    unsafe { run_inline(task.0, out.as_mut_ptr().cast()) };
    // SAFETY: `run_inline` moved the closure out and left the block to us;
    // nobody else ever saw it, and it has no hook (caller).
    unsafe { free_unhooked_block(task.0) };
    // SAFETY: `run_inline` wrote the result.
    unsafe { out.assume_init() }
}

/// Runs a plain spawned task that never left its owner for its joining
/// handle, returning its value; its panic unwinds out of here as it is
/// (the `join` that called this resumes the task's panic, which is the
/// same panic). No atomic operation and no `catch_unwind`: nobody else
/// has seen the block, which is freed before the closure runs.
///
/// # Safety
/// `task` must be the handled task of type `T` belonging to the calling
/// handle, which gives the block up (is forgotten); no completion hook may
/// be installed; and its closure must not raise a payload that `join`
/// reports differently from a panic (a declared-access task's
/// cancellation): only tasks of `spawn` come here. `pool` is the calling
/// worker's own (the block goes back there).
#[inline]
pub(crate) unsafe fn run_for_value<T>(task: TaskRef, pool: OwnPool) -> T {
    let mut out = MaybeUninit::<T>::uninit();
    // SAFETY: the task owns a live block (a `TaskRef`).
    let run_value = unsafe { task.0.as_ref() }.vtable.run_value;
    // SAFETY: the task is a handled task (caller), and every handled
    // task's vtable has `run_value`.
    let run_value = unsafe { run_value.unwrap_unchecked() };
    // SAFETY: the task is unrun and ours to run, its result type is `T`,
    // it has no hook and nobody else knows its block (caller), `out` has
    // room for a `T`, and `pool` is this thread's (caller).
    unsafe { run_value(task.0, out.as_mut_ptr().cast(), pool) };
    // SAFETY: `run_value` returned, so it wrote the value.
    unsafe { out.assume_init() }
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

/// Whether a completed block's result is a value (not a panic or a
/// cancellation).
///
/// # Safety
/// As for [`take_result`]: complete (acquired), untaken, of type `T`.
pub(crate) unsafe fn result_is_ok<T>(block: NonNull<Header>) -> bool {
    let p = payload(block);
    if fits::<std::thread::Result<T>>() {
        // SAFETY: the payload holds the published result inline (caller);
        // it is only read.
        unsafe { &*p.cast::<std::thread::Result<T>>() }.is_ok()
    } else {
        // SAFETY: the payload holds the box of the published result
        // (caller); both are only read.
        unsafe { &**p.cast::<Box<std::thread::Result<T>>>() }.is_ok()
    }
}

/// Moves the result out of a completed block.
///
/// # Safety
/// The block's completion must be complete (acquired) and the result not yet
/// taken; `T` must be its result type.
pub(crate) unsafe fn take_result<T>(block: NonNull<Header>) -> std::thread::Result<T> {
    // SAFETY: the payload holds the published, untaken result of type `T`
    // (caller); the acquire that saw completion made it visible.
    unsafe { take::<std::thread::Result<T>>(block) }
}

/// Carries out a [`Release`] decision of either side. Never unwinds.
///
/// A result dropped here is one nobody will read: its handle was dropped
/// (detached). Its destructor is user code (the value's, or a panic
/// payload's); a panic there is reported, not raised, on whichever side
/// happens to free the block: raised, it would kill the worker that ran
/// the task or surprise the thread that dropped the handle, depending on
/// who finished last.
///
/// # Safety
/// `release` must have been returned for `block` to the caller's side, and
/// `T` must be the block's result type.
pub(crate) unsafe fn finish_release<T>(block: NonNull<Header>, release: Release) {
    if let Release::Free { drop_result } = release {
        if drop_result {
            // SAFETY: the other party is gone and `drop_result` says the
            // result was published and not taken; `T` is its type (caller).
            let result = unsafe { take_result::<T>(block) };
            drop_or_report("the destructor of a detached task's result", result);
        }
        // SAFETY: both parties are done with the block and its payload is
        // moved out.
        unsafe { free_block(block) };
    }
}

// SAFETY: `next` is a free block's only link, projected from the raw
// pointer, used by the pool or the exchange that holds the block and by
// nobody else meanwhile; a free block holds no value.
unsafe impl Linked for Header {
    unsafe fn link(node: *mut Header) -> *const UnsafeLink<*mut Header> {
        // SAFETY: `node` is live (caller); no reference to it is made.
        unsafe { ptr::addr_of!((*node).next) }
    }
}

/// The free blocks of a runtime's workers, passed between them (see
/// `spare_blocks.rs`); what it holds when the runtime goes is freed.
pub(crate) struct BlockExchange(SpareBlocks<Header>);

impl BlockExchange {
    pub(crate) fn new() -> Self {
        Self(SpareBlocks::new())
    }
}

impl Drop for BlockExchange {
    fn drop(&mut self) {
        // SAFETY: taken whole, so this thread owns every carrier of the
        // chain and every block they list.
        unsafe { dealloc_carriers(self.0.take_all_to_free()) };
    }
}

/// Blocks whose addresses a carrier lists besides its own (see
/// [`BlockPool`]): its payload holds the count, then the addresses. A full
/// carrier passes `CARRIED + 1` blocks to the exchange with one
/// compare-and-swap.
const CARRIED: usize = INLINE / size_of::<*mut Header>() - 1;

/// Blocks a worker taking from a carrier asks the CPU to fetch ahead of the
/// one it hands out: a task graph made on one worker takes blocks about
/// 100 ns apart, and a block last written by another core takes longer
/// than that to arrive.
const FETCH_AHEAD: usize = 4;

/// Blocks taken from the exchange at once, and tasks parked on promises,
/// from which a pool hands the take out in address order (see
/// `address_order.rs` and `BlockPool::note_take`): 8 MiB of blocks,
/// what a core's TLB maps on the machines measured, and a quarter of their
/// L3 cache. Past that, parked tasks made one after the other but placed
/// apart are each a miss when they are made ready, and the order pays;
/// below it the blocks stay mapped and mostly cached whatever their order,
/// and sorting them (10 to 20 ns a block) would only cost.
const ORDER_AT: usize = 32768;

/// Blocks a pool takes from the exchange in takes smaller than
/// [`ORDER_AT`] between two counts of the parked tasks (see
/// `BlockPool::note_take`): often enough that the count of the last round
/// of a graph made again is recent, rarely enough that reading every
/// worker's counters costs nothing per task.
const COUNT_PARKED_EVERY: usize = 4096;

/// Reads a free block's link.
///
/// # Safety
/// The caller owns the free block.
unsafe fn next_of(block: *mut Header) -> *mut Header {
    // SAFETY: the block is live and owned by the caller.
    unsafe { (*block).next.with(|l| *l) }
}

/// Sets a free block's link.
///
/// # Safety
/// The caller owns the free block.
unsafe fn set_next(block: *mut Header, next: *mut Header) {
    // SAFETY: the block is live and owned by the caller.
    unsafe { (*block).next.with_mut(|l| *l = next) };
}

/// The words of a carrier's payload: the count of blocks it lists, then
/// their addresses.
fn carrier_words(carrier: *mut Header) -> *mut usize {
    // The payload is aligned for words.
    payload_of(carrier).cast::<usize>()
}

/// How many blocks `carrier` lists.
///
/// # Safety
/// The caller owns the carrier, whose count was written when it was filled.
unsafe fn carried_count(carrier: *mut Header) -> usize {
    // SAFETY: word 0 of an owned carrier's payload, written by `take_outbox`.
    unsafe { carrier_words(carrier).read() }
}

/// The `i`-th block `carrier` lists (`i` below its count).
///
/// # Safety
/// The caller owns the carrier, and `i` is below its count.
unsafe fn carried(carrier: *mut Header, i: usize) -> *mut Header {
    // SAFETY: words 1 ..= count hold addresses written by `pass_on`.
    unsafe { carrier_words(carrier).add(1 + i).read() as *mut Header }
}

/// Asks the CPU to bring `block`'s first cache line closer, ahead of use:
/// the exchange's blocks were last written by other cores, and following
/// their links one after the other would otherwise wait for each line.
#[inline(always)]
fn prefetch(block: *const Header) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: SSE, which `_mm_prefetch` needs, is part of every x86_64
    // CPU; a prefetch never faults, whatever the address (null included).
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(block.cast())
    };
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = block;
}

/// [`prefetch`] for the two lines a task or a node written into `block`
/// starts with (its header and the start of its payload).
#[inline(always)]
fn prefetch_block(block: *const Header) {
    prefetch(block);
    prefetch(block.cast::<u8>().wrapping_add(64).cast());
}

/// Returns one block to the allocator.
///
/// # Safety
/// The caller owns the free block, which came from `alloc_raw` (or the
/// allocator with its layout), and nobody uses it afterwards.
unsafe fn dealloc_block(block: *mut Header) {
    // SAFETY: as the caller promises.
    unsafe { dealloc(block.cast(), Layout::new::<TaskBlock>()) };
}

/// Returns to the allocator every block of a null-terminated chain of
/// carriers, with the blocks they list.
///
/// # Safety
/// The caller owns every carrier of the chain and every block they list,
/// and each came from `alloc_raw`.
unsafe fn dealloc_carriers(mut chain: *mut Header) {
    while !chain.is_null() {
        // SAFETY: owned (caller).
        let next = unsafe { next_of(chain) };
        // SAFETY: as above; the count was written when it was filled.
        unsafe { dealloc_carried(chain, carried_count(chain)) };
        chain = next;
    }
}

/// Returns to the allocator the first `count` blocks `carrier` lists, then
/// the carrier.
///
/// # Safety
/// The caller owns the carrier and those blocks, which came from
/// `alloc_raw`; `count` is at most the carrier's count.
unsafe fn dealloc_carried(carrier: *mut Header, count: usize) {
    for i in 0..count {
        // SAFETY: listed by the carrier and owned (caller).
        unsafe { dealloc_block(carried(carrier, i)) };
    }
    // SAFETY: owned (caller), no longer read.
    unsafe { dealloc_block(carrier) };
}

/// A worker's free blocks: its own free list, linked through the blocks'
/// `next` field, and what it passes to and takes from its runtime's
/// exchange.
///
/// Blocks travel between workers in *carriers*: a free block whose payload
/// lists the addresses of up to [`CARRIED`] others. A worker taking blocks
/// that another core freed then reads one carrier per [`CARRIED`] + 1
/// blocks and knows the blocks' addresses before it touches them, so it
/// fetches them ahead ([`FETCH_AHEAD`]); following a chain of links through
/// the blocks themselves instead made it wait on each block in turn.
pub(crate) struct BlockPool {
    head: *mut Header,
    len: usize,
    /// Carriers taken from the exchange (linked through `next`), used
    /// once the free list is empty (not counted in `len`, which only caps
    /// what this worker's own frees keep).
    reserve: *mut Header,
    /// The reserve's carrier being handed out, and how many of the blocks
    /// it lists are left (handed out last first); the carrier goes last.
    open: *mut Header,
    open_left: usize,
    /// A large batch taken from the exchange, handed out in address order
    /// (see `address_order.rs`) before the reserve.
    ordered: AddressOrdered<Header>,
    /// How many tasks of this worker's runtime were parked on promises
    /// when it last counted them (see `note_take`).
    parked_at_last_count: u64,
    /// Blocks taken from the exchange since then.
    taken_since_count: usize,
    /// The carrier collecting surplus blocks on their way to the exchange,
    /// and how many blocks it holds, itself included.
    outbox: *mut Header,
    outbox_len: usize,
    /// The runtime's exchange; none for a pool outside a runtime.
    exchange: Option<Arc<BlockExchange>>,
}

impl BlockPool {
    pub(crate) fn new(exchange: Option<Arc<BlockExchange>>) -> Self {
        Self {
            head: ptr::null_mut(),
            len: 0,
            reserve: ptr::null_mut(),
            open: ptr::null_mut(),
            open_left: 0,
            ordered: AddressOrdered::new(),
            parked_at_last_count: 0,
            taken_since_count: 0,
            outbox: ptr::null_mut(),
            outbox_len: 0,
            exchange,
        }
    }

    #[inline]
    fn pop(&mut self) -> Option<NonNull<Header>> {
        let Some(head) = NonNull::new(self.head) else {
            return self.pop_reserve(&parked_here);
        };
        // SAFETY: pooled blocks are unused and their `next` links the list.
        self.head = unsafe { next_of(head.as_ptr()) };
        self.len -= 1;
        // A block freed long ago (a graph's tasks all made before any
        // ran) is cold: fetch the next one while this one is filled.
        prefetch(self.head);
        Some(head)
    }

    /// A block of the reserve, which is refilled from the exchange when
    /// empty; `None` if both are empty. `parked` counts the tasks of the
    /// pool's runtime parked on promises (see `note_take`).
    #[cold]
    fn pop_reserve(&mut self, parked: &dyn Fn() -> u64) -> Option<NonNull<Header>> {
        if self.open.is_null() && self.ordered.is_empty() && !self.open_next_carrier(parked) {
            return None;
        }
        if let Some(block) = self.ordered.pop() {
            if let Some(ahead) = self.ordered.ahead(FETCH_AHEAD - 1) {
                prefetch_block(ahead);
            }
            return NonNull::new(block);
        }
        let carrier = self.open;
        if self.open_left == 0 {
            // Every block it listed is handed out: the carrier goes too.
            self.open = ptr::null_mut();
            return NonNull::new(carrier);
        }
        self.open_left -= 1;
        // SAFETY: the open carrier is ours, and `open_left` is below its
        // count.
        let block = unsafe { carried(carrier, self.open_left) };
        if let Some(ahead) = self.open_left.checked_sub(FETCH_AHEAD) {
            // SAFETY: as above, `ahead` below `open_left`.
            prefetch_block(unsafe { carried(carrier, ahead) });
        } else if self.open_left == 0 {
            prefetch_block(carrier);
        }
        NonNull::new(block)
    }

    /// Opens the reserve's next carrier, refilling the reserve first from
    /// this worker's own outbox, then from the exchange; `false` if all
    /// are empty.
    fn open_next_carrier(&mut self, parked: &dyn Fn() -> u64) -> bool {
        if self.reserve.is_null() {
            // This worker's own surplus, not yet passed on, first.
            self.reserve = self.take_outbox().map_or(ptr::null_mut(), |(c, _)| c);
        }
        if self.reserve.is_null() {
            let Some(exchange) = self.exchange.as_ref() else {
                return false;
            };
            // Taken whole: every carrier of the chain is ours.
            let (chain, held) = exchange.0.take_all();
            if !chain.is_null() && self.note_take(held, parked) {
                // SAFETY: taken whole, so every carrier of the chain and
                // every block they list are ours, and each carrier's count
                // was written when it was passed on (`take_outbox`).
                unsafe { self.order(chain, held) };
                return self.open_ordered();
            }
            self.reserve = chain;
        }
        let Some(carrier) = NonNull::new(self.reserve) else {
            return false;
        };
        let carrier = carrier.as_ptr();
        // SAFETY: the reserve's carriers are ours and linked through `next`.
        self.reserve = unsafe { next_of(carrier) };
        // This carrier's list (its payload's lines, written by the core
        // that filled it), and the next carrier's link, for later.
        for line in (0..INLINE).step_by(64) {
            prefetch(
                carrier_words(carrier)
                    .cast::<u8>()
                    .wrapping_add(line)
                    .cast(),
            );
        }
        prefetch(self.reserve);
        self.open = carrier;
        // SAFETY: ours; its count was written when it was filled.
        self.open_left = unsafe { carried_count(carrier) };
        for i in 1..=FETCH_AHEAD.min(self.open_left) {
            // SAFETY: below the count.
            prefetch_block(unsafe { carried(carrier, self.open_left - i) });
        }
        true
    }

    /// Notes a take of `held` blocks from the exchange, and says whether
    /// it is handed out in address order: a large one while many tasks of
    /// the pool's runtime are parked on promises, now or at the last count
    /// (a program that makes its graph again takes the last round's blocks
    /// first). Those tasks' blocks are touched again when they are made
    /// ready, in another order than they were made; other blocks (tasks
    /// queued and run soon) go back out the most recently freed first,
    /// while still cached.
    ///
    /// `parked` counts those tasks by reading every worker's counters
    /// (lines their owners keep writing), so it is called only for a take
    /// large enough to be ordered, or once every [`COUNT_PARKED_EVERY`]
    /// blocks taken in smaller takes: a worker taking one carrier at a time
    /// does not read them all for each.
    fn note_take(&mut self, held: usize, parked: &dyn Fn() -> u64) -> bool {
        self.taken_since_count = self.taken_since_count.saturating_add(held);
        if held < ORDER_AT && self.taken_since_count < COUNT_PARKED_EVERY {
            return false;
        }
        self.taken_since_count = 0;
        let parked = parked();
        let many_parked = parked.max(self.parked_at_last_count) >= ORDER_AT as u64;
        self.parked_at_last_count = parked;
        held >= ORDER_AT && many_parked
    }

    /// Takes every block of `chain` (a null-terminated chain of carriers,
    /// about `held` blocks) into the address-ordered batch, which must be
    /// empty.
    ///
    /// # Safety
    /// The caller owns every carrier of the chain and every block they
    /// list, and each carrier's count is written.
    #[cold]
    unsafe fn order(&mut self, chain: *mut Header, held: usize) {
        let mut carrier = chain;
        let carriers = std::iter::from_fn(|| {
            let c = NonNull::new(carrier)?.as_ptr();
            // SAFETY: owned (caller), linked through `next`.
            carrier = unsafe { next_of(c) };
            prefetch(carrier);
            Some(c)
        });
        self.ordered.refill(
            held,
            carriers.flat_map(|c| {
                // SAFETY: owned (caller); the count was written when it was
                // filled, and each `i` is below it.
                let count = unsafe { carried_count(c) };
                // SAFETY: as above.
                (0..count).map(move |i| unsafe { carried(c, i) }).chain([c])
            }),
        );
    }

    /// Fetches the first blocks of the ordered batch just refilled, which
    /// `pop_reserve` hands out before any carrier; `false` if it is empty.
    fn open_ordered(&mut self) -> bool {
        for i in 0..FETCH_AHEAD {
            if let Some(block) = self.ordered.ahead(i) {
                prefetch_block(block);
            }
        }
        !self.ordered.is_empty()
    }

    /// Keeps `block` in this worker's pool, or passes it on to the
    /// exchange beyond [`POOL_IDLE_CAPACITY`]; returns it back if both
    /// refuse.
    #[inline]
    fn push(&mut self, block: NonNull<Header>) -> Result<(), NonNull<Header>> {
        if self.len >= POOL_IDLE_CAPACITY {
            return self.pass_on(block);
        }
        // SAFETY: the block is unused; only its link is written.
        unsafe { ptr::addr_of_mut!((*block.as_ptr()).next).write(UnsafeLink::new(self.head)) };
        self.head = block.as_ptr();
        self.len += 1;
        Ok(())
    }

    /// Adds a surplus block to the outbox, which goes to the exchange once
    /// its carrier is full; returns it back if there is no exchange.
    #[cold]
    fn pass_on(&mut self, block: NonNull<Header>) -> Result<(), NonNull<Header>> {
        if self.exchange.is_none() {
            return Err(block);
        }
        let b = block.as_ptr();
        if self.outbox.is_null() {
            // The first surplus block carries the next ones.
            self.outbox = b;
            self.outbox_len = 1;
            return Ok(());
        }
        // SAFETY: the outbox's carrier is ours and unused, and fewer than
        // `CARRIED` blocks are listed yet (it is passed on when full): the
        // word written is inside its payload.
        unsafe {
            carrier_words(self.outbox)
                .add(self.outbox_len)
                .write(b as usize)
        };
        self.outbox_len += 1;
        if self.outbox_len > CARRIED {
            self.flush_outbox();
        }
        Ok(())
    }

    /// Empties the outbox: its carrier, with its count written and its
    /// link cleared, and how many blocks it holds (itself included), or
    /// `None` if it was empty.
    fn take_outbox(&mut self) -> Option<(*mut Header, usize)> {
        if self.outbox.is_null() {
            return None;
        }
        let carrier = std::mem::replace(&mut self.outbox, ptr::null_mut());
        let len = std::mem::take(&mut self.outbox_len);
        // SAFETY: the carrier is ours and unused; word 0 of its payload is
        // its count.
        unsafe {
            carrier_words(carrier).write(len - 1);
        }
        // SAFETY: as above.
        unsafe { set_next(carrier, ptr::null_mut()) };
        Some((carrier, len))
    }

    /// Passes the outbox to the exchange, or to the allocator if the
    /// exchange is full.
    fn flush_outbox(&mut self) {
        let Some((carrier, len)) = self.take_outbox() else {
            return;
        };
        let passed = self.exchange.as_ref().is_some_and(|exchange| {
            // SAFETY: the carrier and what it lists are ours: a chain of one.
            unsafe { exchange.0.push_chain(carrier, carrier, len) }
        });
        if !passed {
            // SAFETY: refused, so still ours, and its link is null.
            unsafe { dealloc_carriers(carrier) };
        }
    }
}

impl BlockPool {
    /// Returns blocks to the allocator until at most `keep` are left, and
    /// with them the reserve and the outbox (the worker is idle), and what
    /// the exchange holds if `everyone_idle` (else a worker that makes
    /// tasks may be about to take them).
    fn trim_to(&mut self, keep: usize, everyone_idle: bool) {
        while self.len > keep {
            let Some(b) = NonNull::new(self.head) else {
                break;
            };
            // SAFETY: pooled blocks are unused and linked through `next`.
            self.head = unsafe { next_of(b.as_ptr()) };
            self.len -= 1;
            // SAFETY: pooled blocks are allocated with this layout and unused.
            unsafe { dealloc_block(b.as_ptr()) };
        }
        let open = std::mem::replace(&mut self.open, ptr::null_mut());
        if !open.is_null() {
            // SAFETY: the open carrier is ours, with the `open_left` blocks
            // it still lists (those beyond were handed out).
            unsafe { dealloc_carried(open, std::mem::take(&mut self.open_left)) };
        }
        let reserve = std::mem::replace(&mut self.reserve, ptr::null_mut());
        // SAFETY: the reserve's carriers are ours.
        unsafe { dealloc_carriers(reserve) };
        for block in self.ordered.take_all() {
            // SAFETY: the ordered batch's blocks are ours and unused.
            unsafe { dealloc_block(block) };
        }
        if let Some((carrier, _)) = self.take_outbox() {
            // SAFETY: the outbox's carrier is ours, its link null.
            unsafe { dealloc_carriers(carrier) };
        }
        if let Some(exchange) = self.exchange.as_ref().filter(|_| everyone_idle) {
            // SAFETY: taken whole: every carrier of the chain is ours.
            unsafe { dealloc_carriers(exchange.0.take_all_to_free()) };
        }
    }

    /// Whether it holds blocks taken from the exchange.
    fn holds_taken_blocks(&self) -> bool {
        !self.reserve.is_null() || !self.open.is_null() || !self.ordered.is_empty()
    }

    /// Whether an idle trim would give anything back.
    fn has_surplus(&self) -> bool {
        self.holds_taken_blocks()
            || !self.outbox.is_null()
            || self.exchange.as_ref().is_some_and(|e| e.0.held() > 0)
    }
}

/// The tasks of the calling worker's runtime parked on promises (none
/// off the workers): what a worker's pool orders its takes by.
fn parked_here() -> u64 {
    Worker::current().map_or(0, |w| w.shared.tasks_parked())
}

/// A runtime's block pool for the threads that make its tasks without
/// being one of its workers (a main thread submitting a graph): they take
/// from the runtime's exchange the blocks its workers freed, as a worker
/// does, instead of allocating each block while the workers free as many
/// into the allocator. Behind a lock, since any thread may submit; a
/// thread that finds it taken uses its spare block or allocates instead of waiting. The blocks it
/// holds go with the runtime.
pub(crate) struct OutsidePool {
    pool: Mutex<SharedPool>,
    /// Whether the pool held blocks after its last use, for idle workers
    /// deciding whether to trim (see [`OutsidePool::has_surplus`]), and
    /// for a thread about to take one. A line of its own: the lock's is
    /// written by each taker.
    holds_blocks: CachePadded<AtomicBool>,
    /// The exchange the pool takes from, looked at before the lock.
    exchange: Arc<BlockExchange>,
}

/// The pool behind an [`OutsidePool`]'s lock, whether a block was taken
/// from it since the last idle trim looked, and when the delay before the
/// next trim may give its blocks back started (see [`OutsidePool::trim`]).
struct SharedPool {
    pool: BlockPool,
    used: bool,
    unused_since: Option<Instant>,
}

// SAFETY: a pool's blocks are unused memory it owns alone, reached only
// through the pool, so moving it to another thread moves that ownership.
// Only this wrapper is sent: a worker's installed pool never moves (its
// thread's `POOL` points at it).
unsafe impl Send for SharedPool {}

impl OutsidePool {
    pub(crate) fn new(exchange: Arc<BlockExchange>) -> Self {
        Self {
            pool: Mutex::new(SharedPool {
                pool: BlockPool::new(Some(Arc::clone(&exchange))),
                used: false,
                unused_since: None,
            }),
            holds_blocks: CachePadded::new(AtomicBool::new(false)),
            exchange,
        }
    }

    /// A block for a task of the pool's runtime (`parked` counts its tasks
    /// parked on promises); `None` if the pool is empty or another thread
    /// is taking from it. Out of line, so that `new_handled_for`, inlined
    /// where tasks are made, costs a worker no more than `new_handled`.
    #[inline(never)]
    fn pop(&self, parked: &dyn Fn() -> u64) -> Option<NonNull<Header>> {
        if !self.holds_blocks.load(Ordering::Relaxed) && self.exchange.0.held() == 0 {
            // Nothing to take, as far as the hints say, so no lock. They
            // may lag: blocks freed meanwhile, or a chain pushed while a
            // worker was taking (which the exchange's count misses until
            // its next push), are found by a later task.
            return None;
        }
        let mut shared = match self.pool.try_lock() {
            Ok(shared) => shared,
            // No user code runs under the lock, and the pool is whole
            // whatever panicked: poison changes nothing (as `sync::lock`).
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        shared.used = true;
        // Nothing is ever freed into this pool, so its own list is empty:
        // straight to what it took from the exchange.
        let block = shared.pool.pop_reserve(parked);
        let holds = shared.pool.holds_taken_blocks();
        if holds != self.holds_blocks.load(Ordering::Relaxed) {
            self.holds_blocks.store(holds, Ordering::Relaxed);
        }
        block
    }

    /// Whether the pool holds blocks an idle trim would give back. Read by
    /// a worker about to park, without the lock: Relaxed, since it only
    /// decides whether to trim later (a stale answer trims once more, or
    /// once fewer).
    pub(crate) fn has_surplus(&self) -> bool {
        self.holds_blocks.load(Ordering::Relaxed)
    }

    /// Gives every block the pool holds back to the allocator, once no
    /// thread took one for [`POOL_TRIM_AFTER`]: every worker of its runtime
    /// has been idle a while (see `trim_pool`), but a thread outside them
    /// may be making a graph whose tasks all wait, and will want more. The
    /// delay starts at the first call after the pool's last take (or after
    /// it last gave its blocks back): the workers, going idle one after the
    /// other, do not give the blocks back at the second call.
    #[cold]
    pub(crate) fn trim(&self) {
        let mut shared = match self.pool.try_lock() {
            Ok(shared) => shared,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return, // in use
        };
        let now = Instant::now();
        let used = std::mem::take(&mut shared.used);
        match shared.unused_since {
            Some(since) if !used && now.duration_since(since) >= POOL_TRIM_AFTER => {}
            Some(_) if !used => return,
            _ => {
                shared.unused_since = Some(now);
                return;
            }
        }
        shared.unused_since = None;
        shared.pool.trim_to(0, false);
        self.holds_blocks.store(false, Ordering::Relaxed);
    }
}

impl Drop for BlockPool {
    fn drop(&mut self) {
        // The exchange's blocks go with the exchange, when the last pool
        // and the runtime let it go.
        self.trim_to(0, false);
    }
}

/// Whether this thread's block pool, or its runtime's exchange, holds
/// spare blocks that an idle trim would give back.
pub(crate) fn pool_over_idle_capacity() -> bool {
    POOL.with(|p| {
        let pool = p.get();
        // SAFETY: as in `trim_pool`; only reads.
        !pool.is_null() && unsafe { (*pool).has_surplus() }
    })
}

/// Returns the spare blocks of this thread's pool (beyond its
/// [`POOL_IDLE_CAPACITY`]) to the allocator, and those of its runtime's
/// exchange if `everyone_idle` (every other worker idle-parked too): its
/// worker has been idle a while, so the blocks kept for a busy spell go
/// back to the rest of the program.
#[cold]
pub(crate) fn trim_pool(everyone_idle: bool) {
    POOL.with(|p| {
        let pool = p.get();
        if !pool.is_null() {
            // SAFETY: a non-null `POOL` points to the pool installed by
            // `install_pool`, used by this thread alone, and not reentrantly
            // (trimming calls nothing that allocates a block).
            unsafe { (*pool).trim_to(POOL_IDLE_CAPACITY, everyone_idle) };
        }
    });
}

thread_local! {
    /// Why the detached task whose closure this thread is dropping unrun
    /// was cancelled (see [`cancellation_in_progress`]).
    static CANCELLING: Cell<Option<Cancellation>> = const { Cell::new(None) };
}

/// While a cancelled detached task's closure is dropped (by
/// `TaskRef::cancel`), why it was cancelled; `None` elsewhere.
pub(crate) fn cancellation_in_progress() -> Option<Cancellation> {
    CANCELLING.try_with(Cell::get).ok().flatten()
}

thread_local! {
    /// The pool of the worker running on this thread; null elsewhere.
    static POOL: Cell<*mut BlockPool> = const { Cell::new(ptr::null_mut()) };
}

/// Installs `pool` as this thread's block pool until the guard drops;
/// the guard also hands out the [`OwnPool`] through which the thread's
/// worker reaches it directly.
pub(crate) fn install_pool(pool: &mut BlockPool) -> PoolGuard {
    let own = OwnPool(NonNull::from(&mut *pool));
    POOL.with(|p| p.set(pool));
    PoolGuard(own)
}

/// Keeps a pool installed (see [`install_pool`]).
pub(crate) struct PoolGuard(OwnPool);

impl PoolGuard {
    /// The installed pool, for the worker of this thread.
    pub(crate) fn own_pool(&self) -> OwnPool {
        self.0
    }
}

/// A worker's own block pool, which the worker keeps and reaches with one
/// load, where the thread-local costs a call on some targets: `spawn` and
/// the `join` that takes its task back allocate and free through it.
///
/// Only the thread that installed the pool may use it (a `Worker` is only
/// reached from its own thread), and the pool outlives the worker: the
/// worker's thread declares the pool before it runs the worker and drops
/// it after.
#[derive(Clone, Copy)]
pub(crate) struct OwnPool(NonNull<BlockPool>);

impl OwnPool {
    #[inline(always)]
    fn pop(self) -> Option<NonNull<Header>> {
        // SAFETY: this thread's installed pool, alive while its worker is,
        // used by this thread alone and not reentrantly (type docs).
        unsafe { (*self.0.as_ptr()).pop() }
    }

    #[inline(always)]
    fn push(self, block: NonNull<Header>) -> Result<(), NonNull<Header>> {
        // SAFETY: as in `pop`.
        unsafe { (*self.0.as_ptr()).push(block) }
    }
}

impl Drop for PoolGuard {
    fn drop(&mut self) {
        POOL.with(|p| p.set(ptr::null_mut()));
    }
}

#[inline]
fn alloc_block(vtable: &'static VTable) -> NonNull<Header> {
    init_block(alloc_raw::<Header>(), vtable)
}

/// Writes a fresh header into `block`, an unused block of a task's layout.
#[inline(always)]
fn init_block(block: NonNull<Header>, vtable: &'static VTable) -> NonNull<Header> {
    // SAFETY: the block is unused memory of the right layout (caller); the
    // header fields are written without reading (or dropping) what was
    // there.
    unsafe { block.as_ptr().write(Header::new(vtable)) };
    block
}

/// A pooled block used as raw memory for a `T` (a task's header, a parked
/// task's node), so neither costs a trip to the allocator on a worker.
#[inline]
pub(crate) fn alloc_raw<T>() -> NonNull<T> {
    as_raw(pooled_block(take_foreign_spare))
}

/// A block from the allocator, for when the pool has none.
#[cold]
fn alloc_fresh<T>() -> NonNull<T> {
    let layout = Layout::new::<TaskBlock>();
    // SAFETY: the layout has non-zero size.
    let p = unsafe { alloc(layout) }.cast::<T>();
    NonNull::new(p).unwrap_or_else(|| handle_alloc_error(layout))
}

/// Returns a block from [`alloc_raw`] whose `T` was moved out or dropped.
///
/// # Safety
/// `p` must come from `alloc_raw`, and no one may use it afterwards.
#[inline]
pub(crate) unsafe fn free_raw<T>(p: NonNull<T>) {
    let block = p.cast::<Header>();
    let refused = POOL.with(|pool| {
        let pool = pool.get();
        if pool.is_null() {
            keep_foreign_spare(block)
        } else {
            // SAFETY: a non-null `POOL` points to the installed pool, used
            // by this thread alone; the block is unused (caller).
            unsafe { (*pool).push(block) }
        }
    });
    if let Err(block) = refused {
        // SAFETY: every block comes from `alloc_raw`, which allocates with
        // this layout (or pools such blocks); nobody uses it (caller).
        unsafe { dealloc_block(block.as_ptr()) };
    }
}

thread_local! {
    /// A thread outside every pool keeps one free block: the root task of
    /// `Runtime::run` (and of `run_graph`) called from it again and again,
    /// or a task it submits and joins once finished, is freed by it (the
    /// joiner frees the block it waited on) and comes back from here, with
    /// no trip to the allocator.
    static FOREIGN_SPARE: ForeignSpare = const { ForeignSpare(Cell::new(ptr::null_mut())) };
}

/// See [`FOREIGN_SPARE`]: its block, or null; freed with the thread.
struct ForeignSpare(Cell<*mut Header>);

impl Drop for ForeignSpare {
    fn drop(&mut self) {
        let block = self.0.replace(ptr::null_mut());
        if !block.is_null() {
            // SAFETY: a free block of `alloc_raw`'s layout, which only this
            // thread's spare held.
            unsafe { dealloc_block(block) };
        }
    }
}

/// This foreign thread's spare block, if it keeps one (never during its
/// thread-locals' teardown).
#[cold]
fn take_foreign_spare() -> Option<NonNull<Header>> {
    FOREIGN_SPARE
        .try_with(|s| NonNull::new(s.0.replace(ptr::null_mut())))
        .ok()
        .flatten()
}

/// Keeps `block` as this foreign thread's spare if it has none; gives it
/// back otherwise.
#[cold]
fn keep_foreign_spare(block: NonNull<Header>) -> Result<(), NonNull<Header>> {
    FOREIGN_SPARE
        .try_with(|s| {
            if s.0.get().is_null() {
                s.0.set(block.as_ptr());
                Ok(())
            } else {
                Err(block)
            }
        })
        .unwrap_or(Err(block))
}

/// Returns a block whose payload is already moved out or dropped.
///
/// # Safety
/// No one may use `block` afterwards.
#[inline]
unsafe fn free_block(block: NonNull<Header>) {
    // SAFETY: the header is live until freed below (caller).
    let completion = unsafe { ptr::addr_of_mut!((*block.as_ptr()).join_slot) };
    // A handle's dependency (`JoinHandle::dep`) lives as long as the slot.
    // SAFETY: nobody else uses the slot any more (caller).
    if unsafe { (*completion).has_hook() } {
        // SAFETY: as above.
        unsafe { (*completion).release_hook() };
    }
    // SAFETY: the hook is released; the caller's contract otherwise.
    unsafe { free_unhooked_block(block) };
}

/// [`free_block`] for a block whose slot has no hook.
///
/// # Safety
/// As for `free_block`, and no hook is installed in the block's slot.
#[inline]
unsafe fn free_unhooked_block(block: NonNull<Header>) {
    // SAFETY: as for `drop_join_slot` (caller).
    unsafe { drop_join_slot(block) };
    // SAFETY: the block came from `alloc_raw`, and its contents are moved
    // out or dropped; nobody uses it (caller).
    unsafe { free_raw(block) };
}

/// [`free_unhooked_block`] on a worker, into its own pool.
///
/// # Safety
/// As for `free_unhooked_block`, and `pool` is the calling thread's.
#[inline]
unsafe fn free_unhooked_block_to(block: NonNull<Header>, pool: OwnPool) {
    // SAFETY: as for `drop_join_slot` (caller).
    unsafe { drop_join_slot(block) };
    if let Err(block) = pool.push(block) {
        // SAFETY: a block of `alloc_raw`'s layout nobody uses (caller).
        unsafe { dealloc_block(block.as_ptr()) };
    }
}

/// Drops the join slot of a block about to be freed.
///
/// # Safety
/// The block is live, no hook is installed in its slot, and nobody uses
/// the slot any more.
#[inline(always)]
unsafe fn drop_join_slot(block: NonNull<Header>) {
    // SAFETY: the header is live (caller).
    let completion = unsafe { ptr::addr_of_mut!((*block.as_ptr()).join_slot) };
    // The completion may hold a handle's waker, whose destructor is user
    // code: a panic there is reported, and the block is freed all the same.
    catch_and_report("the destructor of a join handle's waker", || {
        // SAFETY: the completion was made by `Header::new` and is dropped
        // once, here; nobody uses it any more (caller).
        unsafe { ptr::drop_in_place(completion) }
    });
}

/// A fork-join task that lives in its joiner's stack frame: no allocation,
/// and when no thief took it the joiner calls the closure directly.
#[repr(C)]
pub(crate) struct StackJob<F, R> {
    header: Header,
    /// One count, released by whoever runs or cancels the job (not used
    /// when the joiner takes the job back): the joiner waits on it.
    latch: CountLatch<Registry>,
    f: UnsafeCell<MaybeUninit<F>>,
    result: UnsafeCell<MaybeUninit<std::thread::Result<R>>>,
}

impl<F: FnOnce() -> R, R> StackJob<F, R> {
    const VTABLE: VTable = VTable {
        run: Self::run,
        run_inline: None,
        run_value: None,
        cancel: Self::cancel,
        type_name: std::any::type_name::<F>,
    };

    /// A job joined by worker `owner` of `runtime`.
    pub(crate) fn new(f: F, owner: usize, runtime: &Arc<Registry>) -> Self {
        Self {
            header: Header::new(&Self::VTABLE),
            latch: CountLatch::new(owner, runtime),
            f: UnsafeCell::new(MaybeUninit::new(f)),
            result: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// The job's header, as a pointer to the whole job (`run` and
    /// `cancel` cast it back to `StackJob`): `#[repr(C)]` puts the header
    /// first, and deriving the pointer from `self`, not from the header
    /// field, keeps the provenance of the whole job.
    pub(crate) fn header(&self) -> NonNull<Header> {
        NonNull::from(self).cast::<Header>()
    }

    /// The job as a queueable task.
    ///
    /// # Safety
    /// The job must neither move nor be dropped before the task was taken
    /// back, or its latch is set (the runner touches nothing of the job
    /// after releasing it).
    pub(crate) unsafe fn as_task(&self) -> TaskRef {
        TaskRef(self.header())
    }

    /// Runs the closure in place, after the task was taken back.
    ///
    /// # Safety
    /// The task must have been taken back (so nobody else runs it).
    #[inline]
    pub(crate) unsafe fn run_here(&self) -> std::thread::Result<R> {
        // SAFETY: the closure was initialized by `new` and is read once:
        // the task was taken back, so no runner reads it (caller).
        let f = unsafe { (*self.f.get()).assume_init_read() };
        catch_unwind(AssertUnwindSafe(f))
    }

    /// The result published by the runner.
    ///
    /// # Safety
    /// The latch must be set (see [`StackJob::latch`]).
    pub(crate) unsafe fn take_result(&self) -> std::thread::Result<R> {
        // SAFETY: the runner wrote the result before releasing the latch,
        // which the caller saw set (acquire); the joiner reads it once.
        unsafe { (*self.result.get()).assume_init_read() }
    }

    /// # Safety
    /// `header` came from [`StackJob::header`] of a job of this type that
    /// is still in place (`as_task`'s contract), and the caller owns the
    /// task (it was not taken back).
    unsafe fn run(header: NonNull<Header>) {
        // A raw pointer, not a reference: the joiner may free the job as
        // soon as the latch is released below, while this frame still runs.
        let job = header.cast::<Self>().as_ptr().cast_const();
        // SAFETY: the closure was initialized by `new` and is read once:
        // the owner of the task runs it, and `run_here` is not called for a
        // task that was not taken back; the job is live (caller).
        let f = unsafe { (*(*job).f.get()).assume_init_read() };
        let result = catch_unwind(AssertUnwindSafe(f));
        // The job lives in the joiner's frame, and the joiner waits for
        // the latch: unwinding from here would leave it waiting forever.
        let guard = AbortIfPanic::new();
        // SAFETY: the runner alone writes the result, once, before it
        // releases the latch; the joiner reads it only after.
        unsafe { (*(*job).result.get()).write(result) };
        // SAFETY: the runner holds the latch's one count, and runs on a
        // worker of the joiner's runtime (stack jobs are only ever pushed
        // on a worker's deque and taken by its runtime's workers); nothing
        // of the job is touched after the release.
        unsafe { CountLatch::decrement_on_worker(&raw const (*job).latch) };
        guard.disarm();
    }

    /// # Safety
    /// As for `run`.
    unsafe fn cancel(header: NonNull<Header>, why: Cancellation) {
        // A raw pointer, as in `run`: the job may be freed at the release.
        let job = header.cast::<Self>().as_ptr().cast_const();
        // SAFETY: the closure was initialized by `new` and is read once,
        // by the task's owner (a task taken back is not cancelled); the
        // job is live (caller).
        let f = unsafe { (*(*job).f.get()).assume_init_read() };
        drop_or_report("the destructor of a cancelled task's closure", f);
        let guard = AbortIfPanic::new();
        // SAFETY: the task's owner alone writes the result, once, before
        // it releases the latch; the joiner reads it only after.
        unsafe { (*(*job).result.get()).write(Err(Box::new(Cancelled(why)))) };
        let current = Worker::current().map(|w| &w.shared);
        // SAFETY: the canceller holds the latch's one count, as the runner
        // would; nothing of the job is touched afterwards. (It may run on
        // any thread, hence the general decrement.)
        unsafe { CountLatch::decrement(&raw const (*job).latch, current) };
        guard.disarm();
    }
}

impl<F, R> StackJob<F, R> {
    /// Set once the job ran (or was cancelled) on another thread.
    pub(crate) fn latch(&self) -> &CountLatch<Registry> {
        &self.latch
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{
        alloc_fresh, alloc_raw, dealloc_block, free_raw, BlockExchange, BlockPool, Header,
        OutsidePool, COUNT_PARKED_EVERY, ORDER_AT, POOL_IDLE_CAPACITY, POOL_TRIM_AFTER,
    };
    use std::cell::Cell;
    use std::ptr::NonNull;
    use std::sync::Arc;
    use std::time::Instant;

    /// `count` fresh blocks, lowest address first.
    fn fresh_blocks(count: usize) -> Vec<NonNull<Header>> {
        let mut blocks: Vec<NonNull<Header>> = (0..count).map(|_| alloc_fresh()).collect();
        blocks.sort_unstable();
        blocks
    }

    /// Frees `blocks` through a pool of `exchange` that then goes away, as
    /// a worker's frees past its own pool's capacity reach the exchange.
    fn pass_through_a_pool(exchange: &Arc<BlockExchange>, blocks: Vec<NonNull<Header>>) {
        let mut giver = BlockPool::new(Some(Arc::clone(exchange)));
        for block in blocks {
            if let Err(refused) = giver.push(block) {
                // SAFETY: fresh from `alloc_fresh`, and unused.
                unsafe { dealloc_block(refused.as_ptr()) };
            }
        }
        giver.flush_outbox();
    }

    /// Everything a pool whose own list is empty hands out from what it
    /// takes from its exchange, in order, until it has nothing left, with
    /// `parked` tasks of its runtime parked on promises all along.
    fn drain(pool: &mut BlockPool, parked: u64) -> Vec<NonNull<Header>> {
        std::iter::from_fn(|| pool.pop_reserve(&|| parked)).collect()
    }

    /// Takes `count` blocks freed lowest address first through the
    /// exchange, twice (the first round's take grows the exchange's limit,
    /// which refuses what is over it at first, so that the second round's
    /// fits), and returns what `taker` hands out in the second round, with
    /// `parked[round]` tasks of its runtime parked on promises.
    fn second_round(taker: &mut BlockPool, parked: [u64; 2]) -> Vec<NonNull<Header>> {
        let exchange = Arc::clone(taker.exchange.as_ref().expect("an exchange"));
        let count = POOL_IDLE_CAPACITY + ORDER_AT + 1000;
        let mut out = Vec::new();
        for parked_now in parked {
            free_all(std::mem::take(&mut out));
            pass_through_a_pool(&exchange, fresh_blocks(count));
            out = drain(taker, parked_now);
        }
        assert!(out.len() >= ORDER_AT, "the exchange kept {}", out.len());
        out
    }

    fn free_all(blocks: Vec<NonNull<Header>>) {
        for block in blocks {
            // SAFETY: handed out by a pool, and unused.
            unsafe { dealloc_block(block.as_ptr()) };
        }
    }

    fn descents(blocks: &[NonNull<Header>]) -> usize {
        blocks.windows(2).filter(|w| w[1] < w[0]).count()
    }

    /// While many tasks are parked, a batch taken from the exchange of at
    /// least `ORDER_AT` blocks is handed out lowest address first, however
    /// it was freed.
    #[test]
    fn a_large_batch_is_handed_out_in_address_order_while_many_tasks_are_parked() {
        let mut taker = BlockPool::new(Some(Arc::new(BlockExchange::new())));
        let out = second_round(&mut taker, [0, ORDER_AT as u64]);
        assert_eq!(descents(&out), 0, "handed out in address order");
        free_all(out);
    }

    /// Many tasks parked at the pool's last count of them count too: a
    /// program making its graph again takes the last round's blocks before
    /// it has parked many tasks of the new round. (The first round's take
    /// is counted because it is at least `COUNT_PARKED_EVERY` blocks: the
    /// exchange accepts chains until it holds 4,096.)
    #[test]
    fn a_large_batch_is_handed_out_in_address_order_after_a_take_while_many_were_parked() {
        let mut taker = BlockPool::new(Some(Arc::new(BlockExchange::new())));
        let out = second_round(&mut taker, [ORDER_AT as u64, 0]);
        assert_eq!(descents(&out), 0, "handed out in address order");
        free_all(out);
    }

    /// With few tasks parked, the same batch comes back as it came: the
    /// most recently freed first (the exchange's carriers are taken
    /// newest first, and each is emptied from its end).
    #[test]
    fn a_large_batch_is_handed_out_most_recently_freed_first_while_few_tasks_are_parked() {
        let mut taker = BlockPool::new(Some(Arc::new(BlockExchange::new())));
        let out = second_round(&mut taker, [0, 0]);
        assert_eq!(descents(&out), out.len() - 1, "most recently freed first");
        free_all(out);
    }

    /// Small takes from the exchange count the parked tasks (which reads
    /// every worker's counters) once every `COUNT_PARKED_EVERY` blocks,
    /// not once each.
    #[test]
    fn small_takes_count_the_parked_tasks_once_every_few_thousand_blocks() {
        let exchange = Arc::new(BlockExchange::new());
        let mut taker = BlockPool::new(Some(Arc::clone(&exchange)));
        let counts = Cell::new(0);
        let parked = || {
            counts.set(counts.get() + 1);
            0
        };
        let mut taken = 0;
        while taken < 3 * COUNT_PARKED_EVERY {
            // The giver keeps `POOL_IDLE_CAPACITY` blocks: 100 reach the
            // exchange each time.
            pass_through_a_pool(&exchange, fresh_blocks(POOL_IDLE_CAPACITY + 100));
            let out: Vec<_> = std::iter::from_fn(|| taker.pop_reserve(&parked)).collect();
            assert!(!out.is_empty() && out.len() < ORDER_AT, "a small take");
            taken += out.len();
            free_all(out);
        }
        let counted = counts.get();
        assert!(
            (1..=taken / COUNT_PARKED_EVERY).contains(&counted),
            "{counted} counts for {taken} blocks taken"
        );
    }

    /// The pool for threads outside the workers keeps what it took while
    /// it was used within `POOL_TRIM_AFTER`, however many idle workers try
    /// to trim it one after the other, and gives it back after.
    #[test]
    fn the_outside_pool_keeps_its_blocks_through_the_trim_delay() {
        let exchange = Arc::new(BlockExchange::new());
        pass_through_a_pool(&exchange, fresh_blocks(POOL_IDLE_CAPACITY + 100));
        let pool = OutsidePool::new(Arc::clone(&exchange));
        let block = pool.pop(&|| 0).expect("a block from the exchange");
        assert!(pool.has_surplus(), "the rest of the take is held");
        // Two workers going idle one after the other (asserted only when
        // the test itself was not held up for the whole delay between).
        let first = Instant::now();
        pool.trim();
        pool.trim();
        if first.elapsed() < POOL_TRIM_AFTER {
            assert!(pool.has_surplus(), "given back before the delay");
        }
        std::thread::sleep(POOL_TRIM_AFTER + POOL_TRIM_AFTER / 10);
        pool.trim();
        assert!(!pool.has_surplus(), "kept past the delay");
        free_all(vec![block]);
    }

    /// On a thread outside every pool, a freed block is kept as the
    /// thread's spare and handed out again; a second one, with the spare
    /// taken, goes back to the allocator.
    #[test]
    fn a_foreign_thread_keeps_one_spare_block() {
        std::thread::spawn(|| {
            let first = alloc_raw::<Header>();
            let second = alloc_raw::<Header>();
            // SAFETY: both came from `alloc_raw` and are unused.
            unsafe {
                free_raw(first);
                free_raw(second);
            }
            let again = alloc_raw::<Header>();
            assert_eq!(again, first, "the spare block comes back");
            let fresh = alloc_raw::<Header>();
            // SAFETY: as above.
            unsafe {
                free_raw(again);
                free_raw(fresh);
            }
        })
        .join()
        .unwrap();
    }
}
