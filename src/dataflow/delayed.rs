//! Delayed tasks: a task that runs once every dependency it names is
//! fulfilled, with no thread blocked meanwhile.
//!
//! The lock-free protocol (events, the dependency walk, reference counts)
//! is in `event.rs`, where loom checks it. This module puts tasks behind it:
//! a delayed task is a pooled task block plus a node holding the protocol's
//! [`Waiter`] and the runtime the task belongs to, in the task's own block
//! when its closure and result leave room, else in a block of its own.
//! A task made ready is scheduled where it was fulfilled: on the
//! fulfilling worker's own deque when that worker belongs to the task's
//! runtime, else through the runtime's injector (waking a parked worker).
//! A cancelled task's closure is dropped unrun and its handle reports why.
//! The runtime's registry of parked tasks (`core/parked.rs`) keeps the
//! nodes reachable, so that dropping the runtime cancels those that can
//! never run.

use crate::core::block_alloc;
use crate::core::closure_task;
use crate::core::closure_task::KeepBlock;
use crate::core::error::Cancellation;
use crate::core::handle::JoinHandle;
use crate::core::parked::{Parked, ParkedNode, ParkedSlot, Reclaimed};
use crate::core::pool::current_registry;
use crate::core::registry::Registry;
use crate::core::runtime_task;
use crate::core::schedule::Arrival;
use crate::core::sync::UnsafeCell;
use crate::core::task::{self, Header, TaskRef};
use crate::core::trace::names::TaskName;
use crate::dataflow::claim::Claim;
use crate::dataflow::event::{Dep, Outcome, Waiter};
use std::cell::{Cell, RefCell};
use std::mem::{align_of, size_of, ManuallyDrop, MaybeUninit};
use std::ptr::{self, NonNull};
use std::sync::Arc;
/// A delayed task's node: the protocol's waiter first, so an [`Outcome`]'s
/// waiter pointer is a pointer to this.
///
/// Two parties hold the node (see [`Claim`]): the protocol, until it
/// settles an outcome for the waiter, and the runtime's [`Parked`]
/// registry. The waiter (its dependencies) belongs to the protocol side,
/// which drops it when it settles; the task and its runtime belong to
/// whoever wins the claim.
///
/// A node lives in a block of its own, or, when the task's closure and
/// result leave room ([`NODE_AT`]), at the end of its task's own block:
/// one block per delayed task instead of two, so that a program that makes
/// many tasks before they run (a wavefront made up front) keeps half the
/// memory and a fulfill touches the lines its task will run from. Then the
/// node's memory is the task's, which must outlive both references: the
/// claim's winner acts on the task only once both are given up (see
/// [`take_node`] and [`reclaim_node`]).
#[repr(C)]
struct Delayed {
    waiter: ManuallyDrop<Waiter>,
    claim: Claim,
    /// The task, and its runtime's `Arc` as a raw pointer (`Arc::into_raw`),
    /// so that the runtime's address can be compared without reading the
    /// runtime (see [`Node::runtime_address`]).
    owned: UnsafeCell<MaybeUninit<(TaskRef, *const Registry)>>,
    /// The node's slot in its runtime's registry, which holds the
    /// registry's reference (see [`Parked`]). Written once, before the
    /// node is handed to the protocol.
    slot: *const ParkedSlot,
    /// For a node inside its task's block: how to cancel the task while
    /// the block stays, and give it back. `None` for a node of its own.
    in_place: Option<&'static KeepBlock>,
}

/// Where a node inside its task's block starts in the block's payload: as
/// far up as it fits, so that closures and results of up to this many
/// bytes (or boxed) leave it alone.
const NODE_AT: usize = (task::INLINE - size_of::<Delayed>()) & !(align_of::<Delayed>() - 1);

static_assertions::const_assert!(align_of::<Delayed>() <= 16);
// Room for a closure and a result of two words at least (the `trace`
// feature takes some of the payload: 48 bytes without it, 16 with it).
static_assertions::const_assert!(NODE_AT >= 16);

/// A node pointer that may sit in a runtime's registry.
struct Node(NonNull<Delayed>);

// SAFETY: a node is handed between threads through the registry's lock or
// an event's release; what each party touches is decided by its `Claim`.
unsafe impl Send for Node {}

impl Node {
    /// The node's claim. Only this field is borrowed: the protocol side
    /// drops the waiter in place while the registry may be reading it.
    fn claim(&self) -> &Claim {
        // SAFETY: the holder of a `Node` holds one of the node's two
        // references, which keeps it allocated; the claim is only ever
        // shared.
        unsafe { &*ptr::addr_of!((*self.0.as_ptr()).claim) }
    }

    /// The node's registry slot.
    fn slot(&self) -> *const ParkedSlot {
        // SAFETY: as in `claim`; the slot is written before the node is
        // handed to anyone and only read afterwards.
        unsafe { ptr::addr_of!((*self.0.as_ptr()).slot).read() }
    }

    /// How to finish a task whose block holds this node; `None` for a node
    /// of its own.
    fn in_place(&self) -> Option<&'static KeepBlock> {
        // SAFETY: as for `slot`.
        unsafe { ptr::addr_of!((*self.0.as_ptr()).in_place).read() }
    }

    /// The header of the task whose block holds this node.
    fn task_header(&self) -> NonNull<Header> {
        TaskRef::header_of_payload_at(self.0.cast(), NODE_AT)
    }

    /// Takes the task and its runtime out of a node whose claim the caller
    /// just won (or holds uncontested: see [`take_node`]).
    ///
    /// # Safety
    /// The caller won the node's claim, or holds it uncontested, and holds
    /// a reference on the node.
    unsafe fn take(&self) -> (TaskRef, Arc<Registry>) {
        // SAFETY: the caller's reference keeps the node allocated.
        let owned = unsafe { &*ptr::addr_of!((*self.0.as_ptr()).owned) };
        let (task, runtime) = owned.with_mut(|o| {
            // SAFETY: written when the node was made (or put back by
            // `put_back`); only the claim's winner reads it, once per write.
            unsafe { (*o).assume_init_read() }
        });
        // SAFETY: from `Arc::into_raw` (made, or put back), whose count
        // passes to the claim's winner once per write.
        (task, unsafe { Arc::from_raw(runtime) })
    }

    /// The address of the node's runtime, for comparing only: once the
    /// claim is won by the runtime's reclaim, the runtime may be gone, and
    /// another one made at the same address.
    ///
    /// # Safety
    /// The caller holds a reference on the node and has not put anything
    /// back into it.
    unsafe fn runtime_address(&self) -> *const Registry {
        // SAFETY: the caller's reference keeps the node allocated.
        let owned = unsafe { &*ptr::addr_of!((*self.0.as_ptr()).owned) };
        owned.with(|o| {
            // SAFETY: written when the node was made, before it was handed
            // to either party; only `put_back` writes it again, after the
            // caller's read (caller). Taking it copies the bits out.
            unsafe { (*o).assume_init_ref().1 }
        })
    }

    /// Puts back what [`Node::take`] took, for the party that releases
    /// the node last.
    ///
    /// # Safety
    /// The caller won the claim, took the task, and still holds its
    /// reference.
    unsafe fn put_back(&self, owned: (TaskRef, Arc<Registry>)) {
        // SAFETY: the caller's reference keeps the node allocated.
        let cell = unsafe { &*ptr::addr_of!((*self.0.as_ptr()).owned) };
        cell.with_mut(|o| {
            // SAFETY: only the claim's winner writes this, once taken; the
            // last release, which reads it, comes after ours.
            unsafe { (*o).write((owned.0, Arc::into_raw(owned.1))) };
        });
    }

    /// Gives up the caller's reference, and says what the last one must
    /// do: a node of its own is freed here; one inside its task's block is
    /// left to the caller, which then acts on the task. Nothing of the node
    /// is read after the release unless it is the last one in place.
    ///
    /// # Safety
    /// The caller holds a reference and gives it up; by the last release
    /// the waiter was dropped and, for a node of its own, the task taken
    /// (the claim was won).
    unsafe fn release(&self) -> Released {
        // Read first: once our reference is gone, a node of its own may be
        // freed by the other party.
        let in_place = self.in_place();
        if !self.claim().release() {
            return Released::NotLast;
        }
        match in_place {
            Some(keep) => Released::LastInPlace(keep),
            None => {
                // SAFETY: the last reference: nobody touches the node any
                // more, and everything in it that needs dropping was
                // dropped or taken.
                unsafe { block_alloc::free_raw(self.0) };
                Released::Freed
            }
        }
    }
}

/// What a [`Node::release`] leaves its caller to do.
enum Released {
    /// The other party still holds the node.
    NotLast,
    /// The last reference of a node of its own, which is freed.
    Freed,
    /// The last reference of a node inside its task's block (with the
    /// task's [`KeepBlock`]): the caller acts on the task.
    LastInPlace(&'static KeepBlock),
}

/// Makes `task` (of `runtime`) wait for `deps`, or schedules it at once
/// when there are none left to wait for. `N` is the closure the task's
/// maker was given, after which a parked task is named (see
/// [`Parked::census`]). The task's node takes a block of its own.
pub(crate) fn delay<N>(
    runtime: &Arc<Registry>,
    task: TaskRef,
    deps: impl IntoIterator<Item = Dep>,
) {
    park::<N>(runtime, task, deps, None)
}

/// [`delay`] of a handled task of `F` returning `T`, whose node goes in
/// the task's own block when they leave room for it.
fn delay_handled<N, F: FnOnce() -> T, T>(
    runtime: &Arc<Registry>,
    task: TaskRef,
    deps: impl IntoIterator<Item = Dep>,
) {
    let in_place =
        closure_task::leaves_payload_from::<F, T>(NODE_AT).then(closure_task::keep_block::<F, T>);
    park::<N>(runtime, task, deps, in_place)
}

fn park<N>(
    runtime: &Arc<Registry>,
    task: TaskRef,
    deps: impl IntoIterator<Item = Dep>,
    in_place: Option<&'static KeepBlock>,
) {
    let mut waiter = Waiter::new(deps);
    if waiter.skip_fulfilled() {
        drop(waiter);
        // Nothing to wait for: a plain spawn, offered to thieves as one.
        runtime.schedule(task, Arrival::Delayed);
        return;
    }
    let node = match in_place {
        Some(_) => task.payload_at(NODE_AT).cast::<Delayed>(),
        None => runtime_task::alloc_raw_for::<Delayed>(runtime),
    };
    // SAFETY: fresh memory for a `Delayed`: a block of its own, or the
    // part of the task's payload that its closure and result leave alone
    // (`leaves_payload_from`), aligned (`NODE_AT` and the payload are).
    unsafe {
        node.as_ptr().write(Delayed {
            waiter: ManuallyDrop::new(waiter),
            claim: Claim::new(),
            owned: UnsafeCell::new(MaybeUninit::new((task, Arc::into_raw(runtime.clone())))),
            slot: ptr::null(),
            in_place,
        })
    };
    let here = Parked::worker_here(&**runtime);
    // SAFETY: `here` is `worker_here` of this thread for `runtime`.
    let slot = unsafe {
        let name = TaskName::of::<N>();
        runtime
            .parked
            .register(here, node.cast(), name, reclaim_node)
    };
    // SAFETY: the node is ours alone until `Waiter::start` below (the
    // registry only stores its address before then).
    unsafe { ptr::addr_of_mut!((*node.as_ptr()).slot).write(slot) };
    // Counted before it can be released, so the count never goes below the
    // truth for long.
    Parked::count_at(runtime, here, true);
    let w = node.cast::<Waiter>();
    // SAFETY: we own the fresh node, which stays allocated until `settle`
    // takes it back (and until the registry's reference goes: `register`
    // above gave it to the node's slot).
    if let Some(outcome) = unsafe { Waiter::start(w) } {
        settle(outcome);
    }
}

/// Finishes the protocol side of a node for an outcome: drops its
/// dependencies, takes the task unless the runtime's reclaim claimed it
/// first, and releases the protocol's reference. The task returned is the
/// caller's to schedule (or cancel).
///
/// # Safety
/// `w` must come from an [`Outcome`], which hands over the protocol's side
/// of the `Delayed` node.
unsafe fn take_node(w: NonNull<Waiter>) -> Option<(TaskRef, Arc<Registry>)> {
    let node = Node(w.cast::<Delayed>());
    // Release the dependencies now: the promises can be freed before the
    // task even runs.
    // SAFETY: the outcome hands the waiter over; nobody else touches it
    // (the registry only borrows the claim).
    unsafe { ManuallyDrop::drop(&mut *ptr::addr_of_mut!((*node.0.as_ptr()).waiter)) };
    // On a worker of the node's runtime, with the claim still open, the
    // claim is ours uncontested: the other party that may claim it, the
    // runtime's reclaim, runs once every worker thread has exited. (A claim
    // taken means the reclaim ran: the runtime may be gone, and this
    // thread a worker of another made at the same address.) The task, the
    // slot and both references are then ours without the claim's and the
    // slot's read-modify-writes.
    let here = if node.claim().is_claimed() {
        None
    } else {
        // SAFETY: the protocol's reference, which nothing was put back into.
        Parked::worker_here(unsafe { node.runtime_address() })
    };
    if here.is_none() && !node.claim().claim() {
        // The reclaim won: it cancelled the task. A node inside the task's
        // block keeps it until its last reference goes.
        // SAFETY: the protocol's reference, after its last use.
        if let Released::LastInPlace(keep) = unsafe { node.release() } {
            // SAFETY: the reclaim cancelled the task keeping its block
            // (`cancel_in_place`) and released before us; the block is not
            // touched after this.
            unsafe { (keep.release)(node.task_header()) };
        }
        return None;
    }
    // SAFETY: the claim is ours (won, or uncontested above), and we hold
    // the protocol's reference.
    let owned = unsafe { node.take() };
    // The registry's reference too: on a worker of the node's runtime the
    // slot still holds it (only the reclaim could have emptied it);
    // elsewhere, unless the reclaim took it first (the slot may hold
    // another node since: compare, do not swap).
    let both_ours = match here {
        Some(_) => {
            // SAFETY: the node's slot, and this thread is a worker of its
            // runtime with the claim uncontested.
            unsafe { Parked::leave_on_worker(node.slot()) };
            true
        }
        // SAFETY: the node's slot; we hold its runtime.
        None => unsafe { Parked::leave_own(node.slot(), node.0.cast()) },
    };
    if both_ours {
        // Nobody else can reach the node (the reclaim finds its slot
        // empty), so it is done with, without the two releases' atomic
        // operations.
        Parked::count_at(&owned.1, here, false);
        if node.in_place().is_none() {
            // SAFETY: the waiter was dropped and the task taken above.
            unsafe { block_alloc::free_raw(node.0) };
        }
        return Some(owned);
    }
    // The reclaim holds the registry's reference and will release it.
    if node.in_place().is_none() {
        Parked::count(&owned.1, false);
        // SAFETY: the protocol's reference, after its last use.
        unsafe { node.release() };
        return Some(owned);
    }
    // Its release may come after ours: the task (whose block holds the
    // node) is acted on, and counted, by whichever releases last.
    // SAFETY: we won the claim, took the task and hold our reference.
    unsafe { node.put_back(owned) };
    // SAFETY: the protocol's reference, after its last use.
    let Released::LastInPlace(_) = (unsafe { node.release() }) else {
        return None;
    };
    // SAFETY: put back above; ours again as the last party.
    let owned = unsafe { node.take() };
    Parked::count(&owned.1, false);
    Some(owned)
}

/// What the runtime's reclaim does with a parked node whose registry
/// reference it took (see [`Parked::reclaim`]): claims the node if the
/// protocol has not, and gives up the registry's reference (for a node in
/// its task's block, after cancelling the task: see [`cancel_in_place`]).
///
/// # Safety
/// `node` is a `Delayed` node and the caller took its registry reference.
unsafe fn reclaim_node(node: NonNull<ParkedNode>) -> Option<Reclaimed> {
    let node = Node(node.cast::<Delayed>());
    if node.claim().claim() {
        // SAFETY: we won the claim and hold the registry's reference.
        let (task, runtime) = unsafe { node.take() };
        if node.in_place().is_some() {
            // The protocol side may still read the node, in the task's
            // block: cancelled keeping the block, released after.
            let _ = task;
            return Some(Reclaimed::InPlace {
                node: node.0.cast(),
                runtime,
                cancel: cancel_in_place,
            });
        }
        // SAFETY: the registry's reference, after its last use.
        unsafe { node.release() };
        return Some(Reclaimed::Task(task, runtime));
    }
    // SAFETY: the registry's reference, after its last use.
    if let Released::LastInPlace(_) = unsafe { node.release() } {
        // The protocol side won the claim (its waiter was ready, or
        // cancelled) and left the task, uncounted, to us, the last party:
        // its runtime is shutting down, so it cannot run; it is cancelled.
        // SAFETY: put back by the protocol side before its release.
        let (task, runtime) = unsafe { node.take() };
        return Some(Reclaimed::Task(task, runtime));
    }
    None
}

/// Cancels the task of a node inside its task's block that the reclaim
/// claimed: the task is cancelled at once (its handle learns why, its
/// closure is dropped), its block kept until the node's last reference
/// goes, which may be the protocol side's, later.
///
/// # Safety
/// From [`reclaim_node`]'s `Reclaimed::InPlace`, once.
unsafe fn cancel_in_place(node: NonNull<ParkedNode>, why: Cancellation) {
    let node = Node(node.cast::<Delayed>());
    let keep = node.in_place().expect("a node in its task's block");
    let header = node.task_header();
    // SAFETY: the reclaim won the claim and still holds its reference, so
    // the block stays; the task is cancelled once, here.
    unsafe { (keep.cancel)(header, why) };
    // SAFETY: the registry's reference, after its last use.
    if let Released::LastInPlace(_) = unsafe { node.release() } {
        // SAFETY: the protocol side let go first; the block's runner side
        // is given up once, here.
        unsafe { (keep.release)(header) };
    }
}

/// What becomes of a delayed task's waiter the protocol is done with (the
/// protocol's outcomes go through `settle::settle`, which sends a relay's
/// elsewhere).
pub(crate) fn settle(outcome: Outcome) {
    match outcome {
        Outcome::Ready(w) => {
            // SAFETY: the outcome hands the node over.
            if let Some((task, runtime)) = unsafe { take_node(w) } {
                // Run where it was fulfilled, when that is a worker of its
                // runtime.
                runtime.schedule(task, Arrival::Ready);
            }
        }
        Outcome::Cancelled(w) => cancel(w),
    }
}

thread_local! {
    /// Set while this thread cancels tasks.
    static CANCELLING: Cell<bool> = const { Cell::new(false) };
    /// Cancellations raised while cancelling, done by the outer loop.
    static DEFERRED: RefCell<Vec<NonNull<Waiter>>> = const { RefCell::new(Vec::new()) };
}

/// Cancels a waiter's task. Dropping the task's closure may drop the last
/// handle of another promise and cancel more tasks: those are queued and
/// cancelled by the outermost call, so a long chain of broken promises
/// takes a loop, not a recursion as deep as the chain.
fn cancel(w: NonNull<Waiter>) {
    if CANCELLING.with(|c| c.replace(true)) {
        // During thread-local teardown the queue may be gone: recurse then.
        if DEFERRED.try_with(|d| d.borrow_mut().push(w)).is_err() {
            cancel_now(w);
        }
        return;
    }
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            CANCELLING.with(|c| c.set(false));
        }
    }
    let _reset = Reset;
    let mut next = Some(w);
    while let Some(w) = next {
        cancel_now(w);
        next = DEFERRED.try_with(|d| d.borrow_mut().pop()).ok().flatten();
    }
}

fn cancel_now(w: NonNull<Waiter>) {
    // SAFETY: the outcome (possibly deferred) hands the node over.
    if let Some((task, _runtime)) = unsafe { take_node(w) } {
        task.cancel(Cancellation::DependencyDropped);
    }
}

/// Spawns `f` to run once every dependency in `deps` is fulfilled, and
/// returns its handle. On a worker the task belongs to that worker's
/// runtime; elsewhere to the global runtime (see
/// [`crate::Runtime::spawn_delayed`] to choose).
///
/// `deps` may mix [`Promise::dep`](crate::Promise::dep)s and [`LoopPromise::at`](crate::LoopPromise::at)s, in any order,
/// with duplicates; an empty list spawns the task at once, like
/// [`crate::spawn`]. The task runs exactly once, never before all its
/// dependencies are fulfilled, on the worker that fulfilled the last one
/// when there is one. If a dependency's promise is dropped unfulfilled, the
/// task is cancelled: [`JoinHandle::join`] panics saying so and
/// [`JoinHandle::try_join`] returns the error.
///
/// # Cycles
///
/// A task must not wait, directly or through other delayed tasks, on a
/// promise whose handles only it holds: task A waiting on `p2` with a
/// handle of `p1` in its closure, and task B waiting on `p1` with a
/// handle of `p2`, wait for each other forever. The promises cannot break
/// either, because the handles that would break them live in the parked
/// closures. Such a cycle is a user error; the runtime cannot prove it (a
/// thread outside it might still fulfil one of the promises), but it warns
/// once nothing has run for a while (see below).
///
/// - **What happens**: the tasks never run, and joining them waits
///   forever. When their runtime is dropped, the tasks of that runtime
///   still parked are cancelled: their closures (and the handles in them)
///   are dropped, so the memory is freed and every handle reports
///   cancellation because the runtime shut down. The global runtime is
///   never dropped, so there the cycle lives until the process exits.
/// - **How to see it**: when a join or a scope waits while no task of the
///   runtime has run for a while (10 s by default, see
///   [`crate::Builder::stall_warning`]) and tasks sit parked on promises,
///   the runtime says so on standard error, once, with the number of
///   parked tasks, a few of their names and what each waiting thread waits
///   for. [`crate::RuntimeStats::tasks_waiting_on_dependencies`] counts the
///   tasks parked on promises at any time.
/// - **How to avoid it**: fulfill (or drop) each promise from a task that
///   does not depend on it, or keep its handle outside the tasks that
///   wait on it, in code that fulfills or drops it when done.
///
/// ```
/// use selvedge::{Promise, Runtime};
///
/// let rt = Runtime::builder().num_threads(2).build()?;
/// // Each task holds the promise the other one waits on.
/// let (p1, p2) = (Promise::new(), Promise::new());
/// let q1 = p1.clone();
/// let a = rt.spawn_delayed([p2.dep()], move || { q1.fulfill(); });
/// let b = rt.spawn_delayed([p1.dep()], move || { p2.fulfill(); });
/// drop(p1);
/// rt.sync_root();
/// assert_eq!(rt.stats().tasks_waiting_on_dependencies, 2); // stuck
/// drop(rt); // cancels both and frees the cycle
/// assert!(a.try_join().unwrap_err().to_string().contains("runtime shut down"));
/// assert!(b.try_join().unwrap_err().is_cancelled());
/// # Ok::<(), selvedge::BuildError>(())
/// ```
///
/// ```
/// use selvedge::{spawn_delayed, Promise};
///
/// let (a, b) = (Promise::new(), Promise::new());
/// let both = spawn_delayed([a.dep(), b.dep()], || "a and b are done");
/// a.fulfill();
/// assert!(!both.is_finished());
/// b.fulfill();
/// assert_eq!(both.join(), "a and b are done");
/// ```
pub fn spawn_delayed<D, F, T>(deps: D, f: F) -> JoinHandle<T>
where
    D: IntoIterator<Item = Dep>,
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    spawn_delayed_on(current_registry(), deps, f)
}

/// A handled delayed task of `runtime`: what `spawn_delayed` and
/// `Runtime::spawn_delayed` share. When the task is ready at once and
/// lands on the calling worker's deque, the handle records where, so
/// `join` can take it back.
pub(crate) fn spawn_delayed_on<D, F, T>(runtime: &Arc<Registry>, deps: D, f: F) -> JoinHandle<T>
where
    D: IntoIterator<Item = Dep>,
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    spawn_delayed_on_as::<F, D, F, T>(runtime, deps, f)
}

/// [`spawn_delayed_on`] of `f`, a wrapper of the user's closure `N`: the
/// task is named after `N` in a trace.
pub(crate) fn spawn_delayed_on_as<N, D, F, T>(
    runtime: &Arc<Registry>,
    deps: D,
    f: F,
) -> JoinHandle<T>
where
    D: IntoIterator<Item = Dep>,
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let task = runtime_task::new_handled_for(runtime, f);
    task.name_after::<N>();
    // SAFETY: `F` and `T` are 'static.
    let handle = unsafe { JoinHandle::new(&task) };
    let deps = deps.into_iter();
    if deps.size_hint().1 == Some(0) {
        // Nothing to wait for (known without looking): a plain spawn.
        runtime.schedule(task, Arrival::Delayed);
    } else {
        delay_handled::<N, F, T>(runtime, task, deps);
    }
    // Where the task was queued, if it was, the block says (see
    // `Worker::push_delayed`): its handle looks there.
    handle
}
