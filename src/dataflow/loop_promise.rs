//! `LoopPromise`: one promise per iteration (or per bucket of
//! iterations), so that a loop's iteration `i` can start as soon as the
//! iteration `i` of the loop before it is done, without a barrier.

use crate::core::sync::AtomicUsize;
use crate::dataflow::bucket_counts::BucketCounts;
use crate::dataflow::event::{Dep, Group};
use crate::dataflow::settle::settle;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;
/// One promise per loop iteration (or per bucket of iterations), so a loop
/// can wait for another iteration by iteration instead of behind a
/// barrier: stage 2's iteration `i` depends on [`at(i)`](LoopPromise::at),
/// which stage 1 fulfills when its iteration `i` is done.
///
/// With a bucket size `b` ([`LoopPromise::with_bucket_size`]), the
/// iterations are grouped into buckets of `b` and `at(i)` is fulfilled once
/// *every* iteration of `i`'s bucket is: fewer events for long loops, at the
/// price of coarser waiting. Cloning gives another handle; dropping the last
/// handle breaks every bucket still unfulfilled (see [`Promise`](crate::Promise)).
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
///     .map(|i| rt.spawn_delayed([stage1.at(i)], move || i * 10))
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
            Arc::new(BucketCounts::new(
                states.into_boxed_slice(),
                range.clone(),
                bucket,
            ))
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
    ///
    /// ```
    /// assert_eq!(selvedge::LoopPromise::new(4..10).range(), 4..10);
    /// ```
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

    /// Breaks iteration `i` (its whole bucket, with buckets) unless it was
    /// fulfilled: what waits on it is cancelled, as when the last handle
    /// is dropped, and a later [`fulfill`](LoopPromise::fulfill) of it
    /// changes nothing. For a producer that knows an iteration will never
    /// be done (it failed), so that its consumers do not wait for it
    /// forever. Returns `true` for the call that broke it.
    ///
    /// # Panics
    /// When `i` is outside [`LoopPromise::range`].
    ///
    /// ```
    /// use selvedge::{LoopPromise, Runtime};
    ///
    /// let rt = Runtime::builder().num_threads(2).build()?;
    /// let produced = LoopPromise::new(0..2);
    /// let consumer = rt.spawn_delayed([produced.at(1)], || "ran");
    /// assert!(produced.break_iteration(1));
    /// assert!(!produced.fulfill(1)); // stays broken
    /// assert!(consumer.try_join().unwrap_err().is_cancelled());
    /// # Ok::<(), selvedge::BuildError>(())
    /// ```
    #[track_caller]
    pub fn break_iteration(&self, i: usize) -> bool {
        let b = self.bucket_of(i);
        // SAFETY: our handle keeps the group alive; `b` is a bucket index.
        unsafe { Group::break_event(self.group, b, settle) }
    }

    /// Whether iteration `i` was fulfilled.
    ///
    /// # Panics
    /// When `i` is outside [`LoopPromise::range`].
    ///
    /// ```
    /// let lp = selvedge::LoopPromise::new(0..4);
    /// lp.fulfill(2);
    /// assert!(lp.is_fulfilled(2));
    /// assert!(!lp.is_fulfilled(3));
    /// ```
    #[track_caller]
    pub fn is_fulfilled(&self, i: usize) -> bool {
        let b = self.bucket_of(i);
        match &self.buckets {
            Some(counts) => counts.is_fulfilled(b, i - self.range.start - b * self.bucket),
            // SAFETY: our handle keeps the group alive.
            None => unsafe { self.group.as_ref() }.event(b).is_fulfilled(),
        }
    }

    /// Iteration `i` (its bucket) as a dependency for [`spawn_delayed`](crate::spawn_delayed).
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
