//! Dataflow: `Promise`, `LoopPromise` and delayed tasks.
//!
//! The lock-free protocol (events, the dependency walk, reference counts)
//! is in `event.rs`, where loom checks it. This module puts tasks behind it:
//! a delayed task is a pooled task block plus a node (another pooled block)
//! holding the protocol's [`Waiter`] and the runtime the task belongs to.
//! A task made
//! ready is scheduled where it was fulfilled: on the fulfilling worker's own
//! deque when that worker belongs to the task's runtime, else through the
//! runtime's injector (waking a parked worker). A cancelled task's closure
//! is dropped unrun and its handle reports why.

use crate::core::error::Cancellation;
use crate::core::handle::JoinHandle;
use crate::core::parked::{Parked, ParkedNode, ParkedSlot};
use crate::core::pool::current_registry;
use crate::core::registry::{Arrival, Placement, Registry};
use crate::core::sync::{AtomicU64, AtomicUsize, Ordering, UnsafeCell};
use crate::core::task::{self, TaskRef};
use crate::core::worker::Worker;
use crate::dataflow::event::{Claim, Dep, Group, Outcome, Waiter};
use std::cell::{Cell, RefCell};
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ops::Range;
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// A one-shot dataflow event that tasks can wait for: an ephemeral channel
/// from whoever fulfills it to the tasks delayed on it.
///
/// Cloning gives another handle to the same promise. Any handle may
/// [`fulfill`](Promise::fulfill) it, from any thread. When the last handle
/// is dropped while the promise is unfulfilled, the promise is *broken*:
/// the tasks waiting on it are cancelled and their handles report
/// [`crate::JoinError`] cancellation, rather than waiting forever.
///
/// A handle kept inside the closure of a task that waits on the same
/// promise, directly or through other tasks, forms a *cycle*, which is a
/// user error: see [`spawn_delayed`] for what happens and how to avoid it.
///
/// ```
/// use selvedge::{spawn_delayed, Promise, Runtime};
///
/// let rt = Runtime::builder().num_threads(2).build()?;
/// let ready = Promise::new();
/// let consumer = rt.submit_delayed([ready.dep()], || "ran after fulfill");
/// assert!(!consumer.is_finished());
/// ready.fulfill();
/// assert_eq!(consumer.join(), "ran after fulfill");
/// # Ok::<(), selvedge::BuildError>(())
/// ```
pub struct Promise {
    group: NonNull<Group>,
}

// SAFETY: the group is shared through atomics only; the handle's counts keep
// it alive on whichever thread holds the handle.
unsafe impl Send for Promise {}
// SAFETY: as above; every `&self` method only uses atomics.
unsafe impl Sync for Promise {}

impl Promise {
    /// A new, unfulfilled promise.
    ///
    /// ```
    /// let p = selvedge::Promise::new();
    /// assert!(!p.is_fulfilled());
    /// ```
    pub fn new() -> Self {
        Self {
            group: Group::new(1),
        }
    }

    /// Fulfills the promise and schedules the tasks that were waiting only
    /// for it. Returns `true` for the call that fulfilled it, `false` when
    /// it already was (fulfilling is idempotent). Any thread may call it.
    ///
    /// ```
    /// let p = selvedge::Promise::new();
    /// assert!(p.fulfill());
    /// assert!(!p.fulfill());
    /// assert!(p.is_fulfilled());
    /// ```
    pub fn fulfill(&self) -> bool {
        // SAFETY: our handle keeps the group alive; it has one event.
        unsafe { Group::fulfill(self.group, 0, settle) }
    }

    /// Whether the promise was fulfilled.
    ///
    /// ```
    /// let p = selvedge::Promise::new();
    /// let q = p.clone();
    /// q.fulfill();
    /// assert!(p.is_fulfilled());
    /// ```
    pub fn is_fulfilled(&self) -> bool {
        // SAFETY: our handle keeps the group alive.
        unsafe { self.group.as_ref() }.event(0).is_fulfilled()
    }

    /// This promise as a dependency for [`spawn_delayed`]. A `Dep` keeps the
    /// promise's memory alive but cannot fulfill it, so it does not keep the
    /// promise from breaking.
    ///
    /// ```
    /// let p = selvedge::Promise::new();
    /// let h = selvedge::spawn_delayed([p.dep()], || 42);
    /// p.fulfill();
    /// assert_eq!(h.join(), 42);
    /// ```
    pub fn dep(&self) -> Dep {
        // SAFETY: our handle keeps the group alive; it has one event.
        unsafe { Group::dep(self.group, 0) }
    }
}

impl Default for Promise {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for Promise {
    fn clone(&self) -> Self {
        // SAFETY: we hold a handle.
        unsafe { Group::acquire_handle(self.group) };
        Self { group: self.group }
    }
}

impl Drop for Promise {
    fn drop(&mut self) {
        // SAFETY: we give up our handle.
        unsafe { Group::release_handle(self.group, settle) };
    }
}

impl std::fmt::Debug for Promise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Promise")
            .field("fulfilled", &self.is_fulfilled())
            .finish()
    }
}

/// One promise per loop iteration (or per bucket of iterations), so a loop
/// can wait for another iteration by iteration instead of behind a
/// barrier: stage 2's iteration `i` depends on [`at(i)`](LoopPromise::at),
/// which stage 1 fulfills when its iteration `i` is done.
///
/// With a bucket size `b` ([`LoopPromise::with_bucket_size`]), the
/// iterations are grouped into buckets of `b` and `at(i)` is fulfilled once
/// *every* iteration of `i`'s bucket is: fewer events for long loops, at the
/// price of coarser waiting. Cloning gives another handle; dropping the last
/// handle breaks every bucket still unfulfilled (see [`Promise`]).
///
/// # Memory
///
/// A loop promise takes 8 bytes per bucket (its event), plus, with buckets
/// of more than one iteration, 8 more bytes per bucket (its progress). A
/// bucket whose iterations are fulfilled in order (each `fulfill(i)` for
/// the lowest iteration of its bucket not fulfilled yet) needs nothing
/// more. The first time a bucket sees an iteration fulfilled ahead of an
/// earlier one, it allocates one bit per iteration of that bucket (plus 16
/// bytes), kept until the last handle and [`Dep`] are dropped; that is
/// what keeps a repeated `fulfill(i)` idempotent. So 1,000 buckets over
/// 10^9 iterations take 16 kB when fulfilled in order, and at most about
/// 125 MB more if every bucket is fulfilled out of order.
///
/// A loop promise has at most 2^28 buckets ([`LoopPromise::MAX_BUCKETS`])
/// of at most 2^32 iterations each ([`LoopPromise::MAX_BUCKET_SIZE`]);
/// construction panics beyond, and when memory for the buckets cannot be
/// allocated, with a message naming the range and the bucket size.
///
/// ```
/// use selvedge::{LoopPromise, Runtime};
///
/// let rt = Runtime::builder().num_threads(2).build()?;
/// let stage1 = LoopPromise::new(0..4);
/// let stage2: Vec<_> = (0..4)
///     .map(|i| rt.submit_delayed([stage1.at(i)], move || i * 10))
///     .collect();
/// for i in (0..4).rev() {
///     stage1.fulfill(i);
/// }
/// let out: Vec<usize> = stage2.into_iter().map(|h| h.join()).collect();
/// assert_eq!(out, [0, 10, 20, 30]);
/// # Ok::<(), selvedge::BuildError>(())
/// ```
pub struct LoopPromise {
    group: NonNull<Group>,
    range: Range<usize>,
    bucket: usize,
    /// Each bucket's progress; only with buckets of more than one
    /// iteration (a single iteration's event is idempotent by itself).
    buckets: Option<Arc<BucketCounts>>,
}

// SAFETY: as for `Promise`.
unsafe impl Send for LoopPromise {}
// SAFETY: as for `Promise`.
unsafe impl Sync for LoopPromise {}

/// The progress of each bucket of a loop promise, one word per bucket:
///
/// - even, `2 * w`: the bucket's first `w` iterations are fulfilled and no
///   other one is. In-order fulfils move `w` on with a CAS and need no
///   memory per iteration; the one that reaches the bucket's length
///   fulfills the bucket.
/// - odd: a pointer (tag bit set) to the bucket's [`Bits`], installed by
///   the first fulfil ahead of `w`, which freezes `w` in it. From then on
///   every fulfil of the bucket goes through the bits.
struct BucketCounts {
    states: Box<[AtomicUsize]>,
    range: Range<usize>,
    bucket: usize,
}

/// A bucket's fulfilled iterations once they came out of order.
struct Bits {
    /// Iterations of the bucket below this offset were fulfilled in order
    /// before the bits were installed (their bits are not set).
    frozen: usize,
    /// Iterations of the bucket not fulfilled yet; the fulfil that takes
    /// it to 0 fulfills the bucket.
    remaining: AtomicUsize,
    /// One bit per iteration of the bucket, by offset.
    words: Box<[AtomicU64]>,
}

/// The tag bit of a bucket state that points to its [`Bits`].
const BITS_TAG: usize = 1;

impl BucketCounts {
    /// Offset `o` of bucket `b`, `len` iterations long, is fulfilled now;
    /// returns `None` when it already was, else whether the bucket is now
    /// complete.
    #[track_caller]
    fn fulfill(&self, b: usize, o: usize, len: usize) -> Option<bool> {
        let state = &self.states[b];
        // Acquire (and AcqRel below): the call that completes the bucket
        // sees every other iteration's writes, through the chain of
        // read-modify-writes on this word (and on `remaining`), and
        // publishes them with the bucket's event.
        let mut cur = state.load(Ordering::Acquire);
        let mut spare: Option<Box<Bits>> = None;
        loop {
            if cur & BITS_TAG != 0 {
                // SAFETY: a tagged state points to the bucket's `Bits`,
                // installed once and freed only with `self`.
                let bits = unsafe { &*((cur & !BITS_TAG) as *const Bits) };
                if o < bits.frozen {
                    return None;
                }
                let bit = 1u64 << (o % 64);
                if bits.words[o / 64].fetch_or(bit, Ordering::AcqRel) & bit != 0 {
                    return None;
                }
                return Some(bits.remaining.fetch_sub(1, Ordering::AcqRel) == 1);
            }
            let w = cur >> 1;
            if o < w {
                return None;
            }
            let next = if o == w {
                cur + 2
            } else {
                // Ahead of the watermark: switch the bucket to bits.
                let mut bits = match spare.take() {
                    Some(bits) => bits,
                    None => self.alloc_bits(b, len),
                };
                bits.frozen = w;
                *bits.remaining.get_mut() = len - w;
                let p = Box::into_raw(bits) as usize | BITS_TAG;
                match state.compare_exchange(cur, p, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => cur = p,
                    Err(now) => {
                        // SAFETY: not published; we still own it.
                        spare = Some(unsafe { Box::from_raw((p & !BITS_TAG) as *mut Bits) });
                        cur = now;
                    }
                }
                continue;
            };
            match state.compare_exchange(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(w + 1 == len),
                Err(now) => cur = now,
            }
        }
    }

    /// Whether offset `o` of bucket `b` was fulfilled (acquire).
    fn is_fulfilled(&self, b: usize, o: usize) -> bool {
        let cur = self.states[b].load(Ordering::Acquire);
        if cur & BITS_TAG == 0 {
            return o < cur >> 1;
        }
        // SAFETY: as in `fulfill`.
        let bits = unsafe { &*((cur & !BITS_TAG) as *const Bits) };
        o < bits.frozen || bits.words[o / 64].load(Ordering::Acquire) & (1 << (o % 64)) != 0
    }

    /// Fresh bits for bucket `b` of `len` iterations; a failed allocation
    /// panics (a loop promise never aborts the process).
    #[track_caller]
    fn alloc_bits(&self, b: usize, len: usize) -> Box<Bits> {
        let n = len.div_ceil(64);
        let mut words = Vec::new();
        if let Err(e) = words.try_reserve_exact(n) {
            let start = self.range.start + b * self.bucket;
            panic!(
                "LoopPromise over {}..{}: cannot allocate {} bytes to track the out-of-order \
                 fulfils of bucket {start}..{}: {e}",
                self.range.start,
                self.range.end,
                n * 8,
                start + len
            );
        }
        words.extend((0..n).map(|_| AtomicU64::new(0)));
        Box::new(Bits {
            frozen: 0,
            remaining: AtomicUsize::new(0),
            words: words.into_boxed_slice(),
        })
    }
}

impl Drop for BucketCounts {
    fn drop(&mut self) {
        for state in self.states.iter_mut() {
            let cur = *state.get_mut();
            if cur & BITS_TAG != 0 {
                // SAFETY: installed by `fulfill` from `Box::into_raw`, and
                // the last owner frees it once.
                drop(unsafe { Box::from_raw((cur & !BITS_TAG) as *mut Bits) });
            }
        }
    }
}

impl LoopPromise {
    /// One promise per iteration of `range` (8 bytes each).
    ///
    /// # Panics
    /// When `range` is longer than [`LoopPromise::MAX_BUCKETS`] iterations
    /// (use [`LoopPromise::with_bucket_size`]), or when its events cannot
    /// be allocated; the message names the range.
    ///
    /// ```
    /// let lp = selvedge::LoopPromise::new(10..20);
    /// assert_eq!(lp.range(), 10..20);
    /// lp.fulfill(15);
    /// assert!(lp.is_fulfilled(15) && !lp.is_fulfilled(16));
    /// ```
    #[track_caller]
    pub fn new(range: Range<usize>) -> Self {
        Self::with_bucket_size(range, 1)
    }

    /// At most this many buckets (promises) in one loop promise: 2^28.
    ///
    /// ```
    /// assert_eq!(selvedge::LoopPromise::MAX_BUCKETS, 1 << 28);
    /// ```
    pub const MAX_BUCKETS: usize = 1 << 28;

    /// At most this many iterations in one bucket: 2^32 (a bucket fulfilled
    /// out of order takes one bit per iteration, here 512 MiB).
    ///
    /// ```
    /// assert_eq!(selvedge::LoopPromise::MAX_BUCKET_SIZE, 1 << 32);
    /// ```
    pub const MAX_BUCKET_SIZE: usize = 1 << 32;

    /// One promise per `bucket` consecutive iterations of `range`, starting
    /// at `range.start` (the last bucket may be shorter). See the type's
    /// docs for the memory this takes.
    ///
    /// # Panics
    /// When `bucket` is 0, when the range needs more than
    /// [`LoopPromise::MAX_BUCKETS`] buckets or buckets of more than
    /// [`LoopPromise::MAX_BUCKET_SIZE`] iterations, or when the buckets'
    /// memory cannot be allocated; the message names the range and the
    /// bucket size.
    ///
    /// ```
    /// let lp = selvedge::LoopPromise::with_bucket_size(0..10, 4);
    /// let d = lp.at(5); // bucket 4..8
    /// for i in 4..7 {
    ///     lp.fulfill(i);
    /// }
    /// assert!(!d.is_fulfilled());
    /// lp.fulfill(7);
    /// assert!(d.is_fulfilled());
    ///
    /// let too_long = std::panic::catch_unwind(|| {
    ///     selvedge::LoopPromise::with_bucket_size(0..usize::MAX, 1 << 40)
    /// });
    /// assert!(too_long.is_err());
    /// ```
    #[track_caller]
    pub fn with_bucket_size(range: Range<usize>, bucket: usize) -> Self {
        assert!(
            bucket > 0,
            "LoopPromise bucket size must be at least 1, got 0"
        );
        let (start, end) = (range.start, range.end);
        let len = end.saturating_sub(start);
        let range = start..start + len;
        let buckets = len.div_ceil(bucket);
        let too_large = |why: String| -> ! {
            panic!("LoopPromise over {start}..{end} with bucket size {bucket}: {why}")
        };
        if buckets > Self::MAX_BUCKETS {
            too_large(format!(
                "{buckets} buckets, more than the {} a loop promise can track; use larger buckets",
                Self::MAX_BUCKETS
            ));
        }
        if bucket.min(len) > Self::MAX_BUCKET_SIZE {
            too_large(format!(
                "buckets of more than {} iterations cannot be tracked; use smaller buckets",
                Self::MAX_BUCKET_SIZE
            ));
        }
        let counts = (bucket > 1).then(|| {
            let mut states = Vec::new();
            if let Err(e) = states.try_reserve_exact(buckets) {
                too_large(format!(
                    "cannot allocate the progress of {buckets} buckets: {e}"
                ));
            }
            states.extend((0..buckets).map(|_| AtomicUsize::new(0)));
            Arc::new(BucketCounts {
                states: states.into_boxed_slice(),
                range: range.clone(),
                bucket,
            })
        });
        let group = Group::try_new(buckets).unwrap_or_else(|e| {
            too_large(format!(
                "cannot allocate the events of {buckets} buckets: {e}"
            ))
        });
        Self {
            group,
            range,
            bucket,
            buckets: counts,
        }
    }

    /// The iterations this promise covers.
    pub fn range(&self) -> Range<usize> {
        self.range.clone()
    }

    /// Iterations per bucket (1 from [`LoopPromise::new`]).
    ///
    /// ```
    /// assert_eq!(selvedge::LoopPromise::with_bucket_size(0..100, 8).bucket_size(), 8);
    /// ```
    pub fn bucket_size(&self) -> usize {
        self.bucket
    }

    /// The bucket of iteration `i`; panics with a message naming `i` and
    /// the range when `i` is outside it.
    #[track_caller]
    fn bucket_of(&self, i: usize) -> usize {
        if !self.range.contains(&i) {
            panic!(
                "LoopPromise index {i} is out of range {}..{}",
                self.range.start, self.range.end
            );
        }
        (i - self.range.start) / self.bucket
    }

    /// Fulfills iteration `i` from any thread; with buckets, the bucket's
    /// promise is fulfilled by the call that fulfills its last iteration.
    /// Returns `true` for the call that fulfilled iteration `i`, `false`
    /// when it already was.
    ///
    /// # Panics
    /// When `i` is outside [`LoopPromise::range`].
    ///
    /// ```
    /// let lp = selvedge::LoopPromise::new(0..3);
    /// assert!(lp.fulfill(1));
    /// assert!(!lp.fulfill(1));
    /// ```
    #[track_caller]
    pub fn fulfill(&self, i: usize) -> bool {
        let b = self.bucket_of(i);
        if let Some(counts) = &self.buckets {
            let offset = i - self.range.start;
            let o = offset - b * self.bucket;
            let len = self.bucket.min(self.range.len() - b * self.bucket);
            match counts.fulfill(b, o, len) {
                None => return false,
                Some(false) => return true,
                Some(true) => {}
            }
        }
        // SAFETY: our handle keeps the group alive; `b` is a bucket index.
        let fulfilled_bucket = unsafe { Group::fulfill(self.group, b, settle) };
        // With buckets, this call fulfilled iteration `i` whatever the
        // bucket's event says; without, the event is the iteration.
        fulfilled_bucket || self.buckets.is_some()
    }

    /// Whether iteration `i` was fulfilled.
    ///
    /// # Panics
    /// When `i` is outside [`LoopPromise::range`].
    #[track_caller]
    pub fn is_fulfilled(&self, i: usize) -> bool {
        let b = self.bucket_of(i);
        match &self.buckets {
            Some(counts) => counts.is_fulfilled(b, i - self.range.start - b * self.bucket),
            // SAFETY: our handle keeps the group alive.
            None => unsafe { self.group.as_ref() }.event(b).is_fulfilled(),
        }
    }

    /// Iteration `i` (its bucket) as a dependency for [`spawn_delayed`].
    ///
    /// # Panics
    /// When `i` is outside [`LoopPromise::range`]; the message names both.
    ///
    /// ```
    /// let lp = selvedge::LoopPromise::new(0..8);
    /// let r = std::panic::catch_unwind(|| lp.at(8));
    /// let msg = r.unwrap_err().downcast::<String>().unwrap();
    /// assert_eq!(*msg, "LoopPromise index 8 is out of range 0..8");
    /// ```
    #[track_caller]
    pub fn at(&self, i: usize) -> Dep {
        let b = self.bucket_of(i);
        // SAFETY: our handle keeps the group alive; `b` is a bucket index.
        unsafe { Group::dep(self.group, b) }
    }
}

/// What a `depends_on_each` loop keeps of its loop promise: a reference
/// that keeps the events alive, not a handle, so that dropping the
/// producer's last handle still breaks the promise and cancels the parked
/// parts of the loop instead of leaving them waiting forever.
pub(crate) struct LoopDeps {
    keep: Dep,
    range: Range<usize>,
    bucket: usize,
}

impl LoopDeps {
    /// Dependencies on `lp`; `None` when its range is empty (no iteration
    /// can name it).
    pub(crate) fn new(lp: &LoopPromise) -> Option<Self> {
        (!lp.range.is_empty()).then(|| Self {
            keep: lp.at(lp.range.start),
            range: lp.range.clone(),
            bucket: lp.bucket,
        })
    }

    /// The bucket of iteration `i`, which must be in range.
    #[inline]
    pub(crate) fn bucket_of(&self, i: usize) -> usize {
        debug_assert!(self.range.contains(&i));
        (i - self.range.start) / self.bucket
    }

    /// One past the last iteration of bucket `b`.
    #[inline]
    pub(crate) fn bucket_end(&self, b: usize) -> usize {
        // Saturating: the last bucket may reach past `usize::MAX` on paper.
        (b + 1)
            .saturating_mul(self.bucket)
            .saturating_add(self.range.start)
    }

    /// Whether bucket `b` was fulfilled (acquire: its producers' writes are
    /// visible once this says yes).
    #[inline]
    pub(crate) fn is_ready(&self, b: usize) -> bool {
        // SAFETY: `keep` holds a reference to the group; `b` is a bucket
        // index because it came from `bucket_of`.
        unsafe { self.keep.group().as_ref() }
            .event(b)
            .is_fulfilled()
    }

    /// Bucket `b` as a dependency.
    pub(crate) fn dep(&self, b: usize) -> Dep {
        // SAFETY: as in `is_ready`.
        unsafe { Group::dep(self.keep.group(), b) }
    }
}

impl Clone for LoopPromise {
    fn clone(&self) -> Self {
        // SAFETY: we hold a handle.
        unsafe { Group::acquire_handle(self.group) };
        Self {
            group: self.group,
            range: self.range.clone(),
            bucket: self.bucket,
            buckets: self.buckets.clone(),
        }
    }
}

impl Drop for LoopPromise {
    fn drop(&mut self) {
        // SAFETY: we give up our handle.
        unsafe { Group::release_handle(self.group, settle) };
    }
}

impl std::fmt::Debug for LoopPromise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopPromise")
            .field("range", &self.range)
            .field("bucket_size", &self.bucket)
            .finish_non_exhaustive()
    }
}

/// A delayed task's node: the protocol's waiter first, so an [`Outcome`]'s
/// waiter pointer is a pointer to this.
///
/// Two parties hold the node (see [`Claim`]): the protocol, until it
/// settles an outcome for the waiter, and the runtime's [`Parked`]
/// registry. The waiter (its dependencies) belongs to the protocol side,
/// which drops it when it settles; the task and its runtime belong to
/// whoever wins the claim.
#[repr(C)]
struct Delayed {
    waiter: ManuallyDrop<Waiter>,
    claim: Claim,
    owned: UnsafeCell<MaybeUninit<(TaskRef, Arc<Registry>)>>,
    /// The node's slot in its runtime's registry, which holds the
    /// registry's reference (see [`Parked`]). Written once, before the
    /// node is handed to the protocol.
    slot: *const ParkedSlot,
}

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

    /// Takes the task and its runtime out of a node whose claim the caller
    /// just won.
    ///
    /// # Safety
    /// The caller won the node's claim and holds a reference on it.
    unsafe fn take(&self) -> (TaskRef, Arc<Registry>) {
        // SAFETY: the caller's reference keeps the node allocated.
        let owned = unsafe { &*ptr::addr_of!((*self.0.as_ptr()).owned) };
        owned.with_mut(|o| {
            // SAFETY: written when the node was made; only the claim's
            // winner reads it, once.
            unsafe { (*o).assume_init_read() }
        })
    }

    /// Gives up the caller's reference; the last one frees the block.
    ///
    /// # Safety
    /// The caller holds a reference and gives it up; by the last release
    /// the waiter was dropped and the task taken (the claim was won).
    unsafe fn release(self) {
        if self.claim().release() {
            // SAFETY: the last reference: nobody touches the node any more,
            // and everything in it that needs dropping was dropped or taken.
            unsafe { task::free_raw(self.0) };
        }
    }
}

/// Makes `task` (of `runtime`) wait for `deps`, or schedules it at once
/// when there are none left to wait for.
pub(crate) fn delay(
    runtime: &Arc<Registry>,
    task: TaskRef,
    deps: impl IntoIterator<Item = Dep>,
) -> Placement {
    let waiter = Waiter::new(deps);
    if waiter.all_fulfilled() {
        drop(waiter);
        // Nothing to wait for: a plain spawn, offered to thieves as one.
        return runtime.schedule(task, Arrival::Spawned);
    }
    let node = task::alloc_raw::<Delayed>();
    // SAFETY: fresh memory for a `Delayed`.
    unsafe {
        node.as_ptr().write(Delayed {
            waiter: ManuallyDrop::new(waiter),
            claim: Claim::new(),
            owned: UnsafeCell::new(MaybeUninit::new((task, runtime.clone()))),
            slot: ptr::null(),
        })
    };
    let here = Parked::worker_here(runtime);
    let slot = runtime.parked.register(here, node.cast(), reclaim_node);
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
    Placement::Elsewhere
}

/// Finishes the protocol side of a node: drops its dependencies, takes the
/// task unless the runtime's reclaim claimed it first, and releases the
/// protocol's reference.
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
    let owned = node.claim().claim().then(|| {
        // SAFETY: we won the claim and hold the protocol's reference.
        unsafe { node.take() }
    });
    if let Some((_, runtime)) = &owned {
        Parked::count(runtime, false);
        // The registry's reference too, unless the reclaim took it first.
        // SAFETY: the node's slot; we hold its runtime.
        if unsafe { Parked::leave(node.slot()) }.is_some() {
            // Both references are ours: nobody else can reach the node
            // (the reclaim finds its slot empty), so it is freed without
            // the two releases' atomic operations.
            // SAFETY: the waiter was dropped and the task taken above.
            unsafe { task::free_raw(node.0) };
            return owned;
        }
    }
    // SAFETY: the protocol's reference, after its last use.
    unsafe { node.release() };
    owned
}

/// What the runtime's reclaim does with a parked node whose registry
/// reference it took (see [`Parked::reclaim`]): claims the node if the
/// protocol has not, and gives up the registry's reference.
///
/// # Safety
/// `node` is a `Delayed` node and the caller took its registry reference.
unsafe fn reclaim_node(node: NonNull<ParkedNode>) -> Option<(TaskRef, Arc<Registry>)> {
    let node = Node(node.cast::<Delayed>());
    let owned = node.claim().claim().then(|| {
        // SAFETY: we won the claim and hold the registry's reference.
        unsafe { node.take() }
    });
    // SAFETY: the registry's reference, after its last use.
    unsafe { node.release() };
    owned
}

/// What the protocol calls for each waiter it is done with.
fn settle(outcome: Outcome) {
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
/// [`crate::Runtime::submit_delayed`] to choose).
///
/// `deps` may mix [`Promise::dep`]s and [`LoopPromise::at`]s, in any order,
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
/// closures. Such a cycle is a user error; the runtime does not detect it.
///
/// - **What happens**: the tasks never run, and joining them waits
///   forever. When their runtime is dropped, the tasks of that runtime
///   still parked are cancelled: their closures (and the handles in them)
///   are dropped, so the memory is freed and every handle reports
///   cancellation because the runtime shut down. The global runtime is
///   never dropped, so there the cycle lives until the process exits.
/// - **How to see it**: [`crate::RuntimeStats::tasks_waiting_on_dependencies`]
///   counts the tasks parked on promises; a program that hangs with this
///   count above zero once nothing else runs is waiting on promises nobody
///   will fulfill. Print [`crate::Runtime::stats`] from a watchdog thread.
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
/// let a = rt.submit_delayed([p2.dep()], move || { q1.fulfill(); });
/// let b = rt.submit_delayed([p1.dep()], move || { p2.fulfill(); });
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
    submit_delayed(current_registry(), deps, f)
}

/// A handled delayed task of `runtime`: what `spawn_delayed` and
/// `Runtime::submit_delayed` share. When the task is ready at once and
/// lands on the calling worker's deque, the handle records where, so
/// `join` can take it back.
pub(crate) fn submit_delayed<D, F, T>(runtime: &Arc<Registry>, deps: D, f: F) -> JoinHandle<T>
where
    D: IntoIterator<Item = Dep>,
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let task = task::new_handled(f);
    // SAFETY: `F` and `T` are 'static.
    let handle = unsafe { JoinHandle::new(&task) };
    match (delay(runtime, task, deps), Worker::current()) {
        (Placement::Local(pos), Some(w)) => handle.at(w, pos),
        _ => handle,
    }
}
