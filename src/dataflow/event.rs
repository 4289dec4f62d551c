//! The promise protocol: events that delayed tasks park on, the dependency
//! walk that moves a task from one event to the next, and the reference
//! counts that decide when an event is broken and when it is freed.
//!
//! A [`PromiseCell`] is an ephemeral MPSC channel: one atomic word, *open*
//! (null, or the head of an intrusive stack of parked [`Waiter`]s) or
//! *closed* (the `FULFILLED` or `BROKEN` marker). Parking pushes a waiter
//! with a CAS that fails once the event is closed; closing swaps the marker
//! in and takes the whole stack. So every waiter is handed to exactly one
//! party: the fulfiller who drained it, or the parker whose push failed and
//! who moves on by itself. There is no owner thread, no lock and no polling.
//!
//! A waiter depends on a set of events sorted by address. It is parked on
//! the lowest-addressed unfulfilled one only; whoever drains it there (or
//! finds that event already fulfilled) advances it to the next unfulfilled
//! one, and so on until it is ready. Fulfilled is permanent, so the events
//! behind the cursor never need a second look.
//!
//! Events live in a [`Group`] (one for a promise, one per bucket for a loop
//! promise) with two counts: *handles*, the owners that can fulfill, and
//! *refs*, everything that keeps the memory (handles and [`Dep`]s, including
//! the deps parked waiters hold). When the last handle goes, every event
//! still open is closed as broken and its waiters are cancelled; when the
//! last ref goes, the group is freed (one read-modify-write per release;
//! none for a last handle that holds the only ref left).

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::stack_list::oldest_first;
use crate::core::sync::{AtomicPtr, AtomicUsize, Ordering, UnsafeCell};
use crate::dataflow::dep_list::{DepList, EventKey};
use std::collections::TryReserveError;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};

/// The `head` of a fulfilled event.
const FULFILLED: usize = 1;
/// The `head` of an event whose last handle was dropped unfulfilled.
const BROKEN: usize = 2;
/// In the loom models, the `refs` of a freed group (never deallocated
/// there, so a late access is caught instead of being undefined).
#[cfg(loom)]
const FREED: usize = usize::MAX / 2;

fn marker(state: usize) -> *mut Waiter {
    ptr::without_provenance_mut(state)
}

/// What became of a waiter that left an event for good.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every dependency is fulfilled: the caller now owns the waiter and
    /// must schedule its task.
    Ready(NonNull<Waiter>),
    /// A dependency was broken: the caller now owns the waiter and must
    /// cancel its task.
    Cancelled(NonNull<Waiter>),
}

impl Outcome {
    /// The waiter it hands over.
    pub fn waiter(&self) -> NonNull<Waiter> {
        match *self {
            Outcome::Ready(w) | Outcome::Cancelled(w) => w,
        }
    }
}

/// The result of trying to park a waiter on one event.
enum Park {
    /// The waiter is in the event's stack; its owner must not touch it.
    Queued,
    /// The event was already fulfilled: the waiter is still the caller's.
    Fulfilled,
    /// The event was already broken: the waiter is still the caller's.
    Broken,
}

/// One dependency target: a closable stack of parked waiters.
#[derive(Debug)]
pub struct PromiseCell {
    head: AtomicPtr<Waiter>,
}

impl PromiseCell {
    fn new() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Whether the event was fulfilled. Acquire: what the fulfiller wrote
    /// before fulfilling is visible after this returns true.
    pub fn is_fulfilled(&self) -> bool {
        self.head.load(Ordering::Acquire) == marker(FULFILLED)
    }

    /// Whether the event is closed (fulfilled or broken); Acquire.
    pub fn is_closed(&self) -> bool {
        let head = self.head.load(Ordering::Acquire);
        head == marker(FULFILLED) || head == marker(BROKEN)
    }

    /// Pushes `w` unless the event is closed.
    ///
    /// # Safety
    /// The caller owns `w`; after `Queued` it no longer does.
    unsafe fn park(&self, w: NonNull<Waiter>) -> Park {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            if head == marker(FULFILLED) {
                return Park::Fulfilled;
            }
            if head == marker(BROKEN) {
                return Park::Broken;
            }
            // SAFETY: the caller owns `w` until the CAS below publishes it.
            unsafe { w.as_ref().next.with_mut(|n| *n = head) };
            // Release publishes the waiter (its cursor, deps and link) to
            // the party that drains it; Acquire on failure, as on the load,
            // makes a fulfiller's writes visible before we move on.
            match self
                .head
                .compare_exchange(head, w.as_ptr(), Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Park::Queued,
                Err(current) => head = current,
            }
        }
    }

    /// Closes the event in state `closed` (`FULFILLED` or `BROKEN`) unless
    /// it is closed already: whichever closes it first decides, and a
    /// closed event never changes (a loop promise's iteration can be broken
    /// while another handle may still fulfill it). Returns the parked stack
    /// (newest first), or `None` when it was closed already. Repeated
    /// closes cost a load.
    fn close(&self, closed: usize) -> Option<*mut Waiter> {
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            if head == marker(FULFILLED) || head == marker(BROKEN) {
                return None;
            }
            // Release: the fulfiller's writes happen-before every task that
            // sees the event fulfilled. Acquire: the drained waiters'
            // contents.
            match self.head.compare_exchange(
                head,
                marker(closed),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(old) => return Some(old),
                Err(current) => head = current,
            }
        }
    }
}

/// Hands every waiter of a drained stack, oldest first, to `each`.
///
/// # Safety
/// `stack` must come from closing an event, so the caller owns its waiters.
unsafe fn drain(stack: *mut Waiter, mut each: impl FnMut(NonNull<Waiter>)) {
    // Reverse the stack so waiters are served in the order they parked.
    // SAFETY: we own the drained waiters (the caller).
    let mut fifo = unsafe { oldest_first(stack, |w: &Waiter| &w.next) };
    while let Some(w) = NonNull::new(fifo) {
        // Read the link before handing the waiter on: its new owner may
        // park it elsewhere (rewriting it) or free it.
        // SAFETY: as above.
        fifo = unsafe { w.as_ref().next.with(|n| *n) };
        each(w);
    }
}

/// The shared allocation behind a promise (one event) or a loop promise (one
/// event per bucket). `refs`, written by every `Dep` made and dropped, is a
/// cache line away from the events' addresses that fulfills read.
#[derive(Debug)]
#[repr(C)]
pub struct Group {
    /// Owners that can fulfill (`Promise`/`LoopPromise` handles).
    handles: AtomicUsize,
    len: usize,
    first: PromiseCell,
    rest: Box<[PromiseCell]>,
    /// Left unwritten: a group is made for every promise.
    _apart: [MaybeUninit<u8>; 64],
    /// Everything that keeps the group alive: handles and deps.
    refs: AtomicUsize,
    /// In the loom models, the group's memory: every holder of a ref reads
    /// it before giving the ref up, and the free writes it, so a free not
    /// ordered after some holder's last use is a data race loom reports.
    #[cfg(loom)]
    memory: UnsafeCell<()>,
}

impl Group {
    /// A group of `len` open events (at least one is allocated), owned by
    /// one handle.
    #[inline]
    pub fn new(len: usize) -> NonNull<Group> {
        Self::try_new(len).unwrap_or_else(|e| panic!("cannot allocate {len} events: {e}"))
    }

    /// As [`Group::new`], but a failed allocation of the events is an
    /// error instead of an abort (a loop promise may ask for many).
    #[inline]
    pub fn try_new(len: usize) -> Result<NonNull<Group>, TryReserveError> {
        let mut rest = Vec::new();
        // A promise's group (one event) skips the reservation.
        if len > 1 {
            rest.try_reserve_exact(len - 1)?;
            rest.extend((1..len).map(|_| PromiseCell::new()));
        }
        Ok(Self::alloc(Group {
            handles: AtomicUsize::new(1),
            len,
            first: PromiseCell::new(),
            rest: rest.into_boxed_slice(),
            _apart: [MaybeUninit::uninit(); 64],
            refs: AtomicUsize::new(1),
            #[cfg(loom)]
            memory: UnsafeCell::new(()),
        }))
    }

    /// Moves `group` into memory of its own: a pooled task block (on a
    /// worker, its free list; elsewhere the allocator), since a promise
    /// may be made and dropped as often as the tasks it orders, and a trip
    /// to the general allocator and back cost more than the rest of the
    /// promise (about 230 of the 1,100 instructions of a task with one
    /// promise). Freed by [`Group::free`]. Inlined, so that the group is
    /// written in place rather than built and copied.
    #[cfg(not(loom))]
    #[inline]
    fn alloc(group: Group) -> NonNull<Group> {
        let p = crate::core::block_alloc::alloc_raw::<Group>();
        // SAFETY: fresh memory for a `Group` (`alloc_raw` checks size and
        // alignment).
        unsafe { p.as_ptr().write(group) };
        p
    }

    /// The loom models' groups are boxed (and never freed).
    #[cfg(loom)]
    fn alloc(group: Group) -> NonNull<Group> {
        NonNull::from(Box::leak(Box::new(group)))
    }

    /// Drops a group made by [`Group::alloc`] and returns its memory.
    ///
    /// # Safety
    /// The last ref is gone: nobody uses the group any more.
    #[cfg(not(loom))]
    unsafe fn free(this: NonNull<Group>) {
        // SAFETY: a live group nobody uses (caller); its events' stacks are
        // closed and drained, so dropping it drops only the boxed events.
        unsafe { ptr::drop_in_place(this.as_ptr()) };
        // SAFETY: from `alloc_raw` (`Group::alloc`), dropped above.
        unsafe { crate::core::block_alloc::free_raw(this) };
    }

    /// PromiseCell `i`; `i` must be below [`Group::len`].
    pub fn event(&self, i: usize) -> &PromiseCell {
        match i {
            0 => &self.first,
            _ => &self.rest[i - 1],
        }
    }

    /// A dependency on event `i`, which keeps the group alive.
    ///
    /// # Safety
    /// The caller holds a handle or ref on `this`, and `i < len`.
    pub unsafe fn dep(this: NonNull<Group>, i: usize) -> Dep {
        // SAFETY: the caller's reference keeps the group alive.
        let g = unsafe { this.as_ref() };
        g.acquire_ref();
        Dep {
            group: this,
            event: NonNull::from(g.event(i)),
        }
    }

    fn acquire_ref(&self) {
        // Relaxed, as `Arc::clone`: the caller already holds a reference.
        let _old = self.refs.fetch_add(1, Ordering::Relaxed);
        #[cfg(loom)]
        assert!(
            _old > 0 && _old < FREED,
            "group ref taken after it was freed"
        );
    }

    /// Another handle: counts as a handle and as a ref.
    ///
    /// # Safety
    /// The caller holds a handle on `this`.
    pub unsafe fn acquire_handle(this: NonNull<Group>) {
        // SAFETY: the caller's handle keeps the group alive.
        let g = unsafe { this.as_ref() };
        g.handles.fetch_add(1, Ordering::Relaxed);
        g.acquire_ref();
    }

    /// Makes `n` more shares of a group whose handles are all shares
    /// (`readers.rs`): handles that hold no ref of their own (the shares
    /// hold one between them), counted ahead, so that handing one out
    /// later touches nothing shared.
    ///
    /// # Safety
    /// The caller holds a share on `this`.
    pub unsafe fn add_shares(this: NonNull<Group>, n: usize) {
        // SAFETY: the caller's share keeps the group alive. Relaxed, as
        // `Arc::clone`: the caller holds a share already.
        unsafe { this.as_ref() }
            .handles
            .fetch_add(n, Ordering::Relaxed);
    }

    /// Drops `n` shares; whoever drops the last one fulfills the group's
    /// event (handing the waiters it readies to `settle`), then drops the
    /// shares' ref.
    ///
    /// # Safety
    /// The caller gives up `n` shares it holds on `this`, a group of one
    /// event whose handles are all shares.
    pub unsafe fn release_shares(this: NonNull<Group>, n: usize, settle: impl FnMut(Outcome)) {
        // AcqRel: what every share's holder did before dropping it (a
        // task's read of a value) happens before the fulfill, and so
        // before the tasks that wait for it (a write of that value).
        // SAFETY: our shares keep the group alive.
        if unsafe { this.as_ref() }
            .handles
            .fetch_sub(n, Ordering::AcqRel)
            == n
        {
            // SAFETY: the shares' ref keeps the group alive until released
            // below; it has one event.
            unsafe {
                Group::fulfill(this, 0, settle);
                Group::release_ref(this);
            }
        }
    }

    /// Drops one ref; the last one frees the group.
    ///
    /// # Safety
    /// The caller gives up a ref it holds on `this`.
    pub unsafe fn release_ref(this: NonNull<Group>) {
        // SAFETY: our ref keeps the group alive until the decrement.
        let g = unsafe { this.as_ref() };
        #[cfg(loom)]
        g.memory.with(|_| ());
        let old = g.refs.fetch_sub(1, Ordering::Release);
        #[cfg(loom)]
        assert!(old > 0 && old < FREED, "group released after it was freed");
        if old != 1 {
            return;
        }
        // Every other party's last use happened before its release, and
        // this acquire orders them before the free (as `Arc`'s drop).
        crate::core::sync::fence(Ordering::Acquire);
        // SAFETY: the last ref is gone.
        unsafe { Self::free_last(this) };
    }

    /// Frees a group whose last ref is gone, every holder's last use
    /// ordered before this call.
    ///
    /// # Safety
    /// No ref is left, and nobody uses the group any more.
    unsafe fn free_last(this: NonNull<Group>) {
        #[cfg(not(loom))]
        // SAFETY: the caller's contract.
        unsafe {
            Self::free(this)
        };
        #[cfg(loom)]
        {
            // SAFETY: still allocated (loom builds never free groups).
            let g = unsafe { this.as_ref() };
            // The free's write: loom reports a holder's use not ordered
            // before it.
            g.memory.with_mut(|_| ());
            g.refs.store(FREED, Ordering::Relaxed);
        }
    }

    /// Whether the last ref was released (loom models only: groups are
    /// never deallocated there).
    #[cfg(loom)]
    pub fn is_freed(this: NonNull<Group>) -> bool {
        // SAFETY: loom builds never deallocate groups.
        unsafe { this.as_ref() }.refs.load(Ordering::SeqCst) == FREED
    }

    /// Drops one handle (and its ref). The last handle breaks every event
    /// still open and hands their waiters to `settle` as cancelled.
    ///
    /// # Safety
    /// The caller gives up a handle it holds on `this`.
    pub unsafe fn release_handle(this: NonNull<Group>, mut settle: impl FnMut(Outcome)) {
        // SAFETY: our handle keeps the group alive until released below.
        let g = unsafe { this.as_ref() };
        // Our ref is the only one left: no other handle, no dependency, so
        // no waiter parked on any event and nobody who could make one.
        // Nobody else can reach the group: it is freed without the two
        // counts' read-modify-writes (the common end of a promise, dropped
        // after its tasks let go of their dependencies). Acquire, as the
        // last release's fence: every other holder's last use of the group
        // happened before its release, so before the free.
        if g.refs.load(Ordering::Acquire) == 1 {
            #[cfg(loom)]
            g.memory.with(|_| ());
            // SAFETY: no other ref: nobody else uses the group.
            unsafe { Group::free_last(this) };
            return;
        }
        // A fulfilled event is never broken: `close(BROKEN)` decides with a
        // CAS, which reads the latest `head` whatever this count's
        // ordering (the loom models pass with it relaxed). AcqRel also
        // orders the fulfills made through other handles before the
        // cancellations, so their effects are visible to dropped closures.
        if g.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            for i in 0..g.len {
                if let Some(stack) = g.event(i).close(BROKEN) {
                    // SAFETY: closing handed us the stack.
                    unsafe { drain(stack, |w| settle(Outcome::Cancelled(w))) };
                }
            }
        }
        // SAFETY: our ref, released only after the drain above.
        unsafe { Group::release_ref(this) };
    }

    /// Breaks event `i` unless it was fulfilled: its waiters go to
    /// `settle` as cancelled. Returns whether this call broke it.
    ///
    /// # Safety
    /// The caller holds a handle on `this`, and `i < len`.
    pub unsafe fn break_event(
        this: NonNull<Group>,
        i: usize,
        mut settle: impl FnMut(Outcome),
    ) -> bool {
        // SAFETY: the caller's handle keeps the group alive.
        let g = unsafe { this.as_ref() };
        let Some(stack) = g.event(i).close(BROKEN) else {
            return false;
        };
        // SAFETY: closing handed us the stack.
        unsafe { drain(stack, |w| settle(Outcome::Cancelled(w))) };
        true
    }

    /// Fulfills event `i` and advances each waiter drained from it: the
    /// ones that become ready or cancelled go to `settle`, the rest are
    /// parked on their next unfulfilled dependency. Returns whether this
    /// call was the one that fulfilled the event.
    ///
    /// # Safety
    /// The caller holds a handle on `this`, and `i < len`.
    pub unsafe fn fulfill(this: NonNull<Group>, i: usize, mut settle: impl FnMut(Outcome)) -> bool {
        // SAFETY: the caller's handle keeps the group alive.
        let g = unsafe { this.as_ref() };
        let Some(stack) = g.event(i).close(FULFILLED) else {
            return false;
        };
        let each = |w: NonNull<Waiter>| {
            // SAFETY: draining handed us `w`, which was parked on this
            // event, so its cursor points at it and is ours to move on.
            unsafe { w.as_ref().cursor.with_mut(|c| *c += 1) };
            // SAFETY: we own `w`; after `None` we do not touch it.
            if let Some(outcome) = unsafe { Waiter::advance(w) } {
                settle(outcome);
            }
        };
        // SAFETY: closing handed us the stack.
        unsafe { drain(stack, each) };
        true
    }
}

/// A dependency of a delayed task: one promise, or one iteration (bucket)
/// of a loop promise. Obtained from `Promise::dep` or `LoopPromise::at` and
/// passed to `spawn_delayed`; it keeps the promise's memory alive but cannot
/// fulfill it.
///
/// ```
/// let p = selvedge::Promise::new();
/// let d = p.dep();
/// assert!(!d.is_fulfilled());
/// p.fulfill();
/// assert!(d.is_fulfilled());
/// ```
pub struct Dep {
    group: NonNull<Group>,
    event: NonNull<PromiseCell>,
}

// SAFETY: a Dep only touches the group through atomics, and its ref keeps
// the group alive on whichever thread holds it.
unsafe impl Send for Dep {}
// SAFETY: as above; `&Dep` only reads atomics.
unsafe impl Sync for Dep {}

impl Dep {
    /// Whether the promise (or iteration bucket) this names was fulfilled.
    ///
    /// ```
    /// let lp = selvedge::LoopPromise::new(0..4);
    /// let d = lp.at(2);
    /// lp.fulfill(2);
    /// assert!(d.is_fulfilled());
    /// ```
    pub fn is_fulfilled(&self) -> bool {
        self.event().is_fulfilled()
    }

    /// Whether the promise (or bucket) is fulfilled or broken.
    #[cfg(not(loom))]
    pub(crate) fn is_closed(&self) -> bool {
        self.event().is_closed()
    }

    /// The group this dependency keeps alive.
    #[cfg(not(loom))]
    pub(crate) fn group(&self) -> NonNull<Group> {
        self.group
    }

    fn event(&self) -> &PromiseCell {
        // SAFETY: our ref keeps the group, and so the event, alive.
        unsafe { self.event.as_ref() }
    }

    /// Whether `self` and `other` name the same promise (or bucket).
    ///
    /// ```
    /// let p = selvedge::Promise::new();
    /// assert!(p.dep().same_as(&p.dep()));
    /// assert!(!p.dep().same_as(&selvedge::Promise::new().dep()));
    /// ```
    pub fn same_as(&self, other: &Dep) -> bool {
        self.event == other.event
    }
}

impl EventKey for Dep {
    fn key(&self) -> usize {
        self.event.as_ptr() as usize
    }
}

impl Clone for Dep {
    fn clone(&self) -> Self {
        // SAFETY: our ref keeps the group alive.
        unsafe { self.group.as_ref() }.acquire_ref();
        Dep {
            group: self.group,
            event: self.event,
        }
    }
}

impl Drop for Dep {
    fn drop(&mut self) {
        // SAFETY: we give up our ref.
        unsafe { Group::release_ref(self.group) };
    }
}

/// A delayed task as the protocol sees it: its link in an event's stack,
/// its sorted dependencies and the index of the one it waits on. Containers
/// put it first in a `#[repr(C)]` struct, so an [`Outcome`] pointer casts
/// back to the container.
#[repr(C)]
pub struct Waiter {
    next: UnsafeCell<*mut Waiter>,
    cursor: UnsafeCell<usize>,
    deps: DepList<Dep>,
    /// A relay's waiter ([`Waiter::relay`]).
    pub(crate) relay: bool,
}

// SAFETY: a waiter is owned by one party at a time (its creator, the event
// stack it is parked in, or whoever drained it); hand-offs go through the
// event's acquire/release operations.
unsafe impl Send for Waiter {}

impl Waiter {
    /// A waiter on `deps` (any order, duplicates allowed).
    pub fn new(deps: impl IntoIterator<Item = Dep>) -> Self {
        Self {
            next: UnsafeCell::new(ptr::null_mut()),
            cursor: UnsafeCell::new(0),
            deps: DepList::collect(deps),
            relay: false,
        }
    }

    /// A relay's waiter: it waits for every dependency to close ([`Waiter::relay_ready`]).
    pub fn relay(deps: impl IntoIterator<Item = Dep>) -> Self {
        Self {
            relay: true,
            ..Self::new(deps)
        }
    }

    /// Follows a relay's outcome past the broken dependencies it stops at:
    /// the waiter once all are closed, or `None` when it parked again.
    /// # Safety
    /// The caller owns the outcome's waiter, a relay's (not after `None`).
    pub unsafe fn relay_ready(mut outcome: Outcome) -> Option<NonNull<Waiter>> {
        while let Outcome::Cancelled(w) = outcome {
            debug_assert!(
                // SAFETY: the caller owns the waiter.
                unsafe { w.as_ref() }.relay,
                "only relays pass broken events"
            );
            // SAFETY: stopped at its broken event: nobody else moves its cursor.
            unsafe { w.as_ref().cursor.with_mut(|c| *c += 1) };
            // SAFETY: the caller's contract.
            outcome = unsafe { Self::advance(w) }?;
        }
        Some(outcome.waiter())
    }

    /// Moves the cursor past the leading dependencies fulfilled already
    /// (it stops at the first open or broken one), and says whether that
    /// was all of them (a task in this state is scheduled at once, without
    /// parking). Fulfilled is permanent: [`Waiter::start`] begins there.
    pub fn skip_fulfilled(&mut self) -> bool {
        // SAFETY: `&mut`: nobody else touches the cursor.
        let mut i = self.cursor.with(|c| unsafe { *c });
        while self.deps.as_slice().get(i).is_some_and(Dep::is_fulfilled) {
            i += 1;
        }
        // SAFETY: as above.
        self.cursor.with_mut(|c| unsafe { *c = i });
        i == self.deps.as_slice().len()
    }

    /// Starts waiting: parks the waiter on its lowest-addressed unfulfilled
    /// dependency. Returns `None` when it parked (it now belongs to that
    /// event), or the outcome when it is ready or cancelled already.
    ///
    /// # Safety
    /// The caller owns `w`, which stays allocated until an outcome for it
    /// is settled, and never touches it after `None`.
    pub unsafe fn start(w: NonNull<Waiter>) -> Option<Outcome> {
        // SAFETY: the caller's contract.
        unsafe { Self::advance(w) }
    }

    /// Parks `w` on its first unfulfilled dependency at or after its cursor.
    ///
    /// # Safety
    /// The caller owns `w`; after `None` it no longer does.
    unsafe fn advance(w: NonNull<Waiter>) -> Option<Outcome> {
        // SAFETY: we own the waiter until `park` queues it.
        let waiter = unsafe { w.as_ref() };
        // SAFETY: we own the waiter, so nobody else touches its cursor.
        let mut i = waiter.cursor.with(|c| unsafe { *c });
        while let Some(dep) = waiter.deps.as_slice().get(i) {
            // SAFETY: as above.
            waiter.cursor.with_mut(|c| unsafe { *c = i });
            // SAFETY: we own `w`; on `Queued` we return without touching it.
            match unsafe { dep.event().park(w) } {
                Park::Queued => return None,
                Park::Fulfilled => i += 1,
                Park::Broken => return Some(Outcome::Cancelled(w)),
            }
        }
        Some(Outcome::Ready(w))
    }
}

// The `Debug` impls, in a child module so that they may read the fields.
#[path = "event_debug.rs"]
mod debug;

#[cfg(all(test, not(loom)))]
#[path = "event_tests.rs"]
mod tests;
