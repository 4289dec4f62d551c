//! Tasks of closures in pooled blocks: their vtables (a handled task,
//! whose result a `JoinHandle` takes, and a detached one), making them,
//! running one for its own handle, taking or dropping its result, and
//! freeing its block.
//!
//! A closure or result that does not fit a block's payload is boxed and
//! only the box pointer is stored: that is the one case where a spawn
//! allocates.

use crate::core::block_alloc::{alloc_fresh, alloc_raw, free_raw};
use crate::core::block_pool::dealloc_block;
use crate::core::error::{Cancellation, Cancelled};
use crate::core::join_slot::Release;
use crate::core::task::{
    join_slot, payload, Header, OwnPool, TaskRef, VTable, INLINE, PAYLOAD_ALIGN,
};
use crate::core::unwind::{catch_and_report, drop_or_report, AbortIfPanic};
use std::cell::Cell;
use std::mem::{align_of, size_of, MaybeUninit};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};

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
    /// handle (see [`JoinSlot::complete_held`](crate::core::join_slot::JoinSlot::complete_held)), leaving the block.
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

/// A handled task of `f` in `block`, an unused block of a task's layout.
#[inline(always)]
pub(super) fn handled_in_block<F, T>(block: NonNull<Header>, f: F) -> TaskRef
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
