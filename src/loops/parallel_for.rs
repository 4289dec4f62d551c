//! Parallel loops: [`parallel_for`] with strides, reductions and dataflow
//! dependencies, and [`par_chunks_mut`] / [`par_iter_mut`] over slices.
//!
//! A loop is split lazily. It starts as one *part* holding every iteration,
//! run in place by the caller (or as one task, for `spawn` and delayed
//! loops). Between iterations the part checks its worker's mailbox, one
//! relaxed load. Only when a thief's request is there, and the deque has no
//! task to give it, does the worker split a loop: the oldest loop on its
//! stack that has iterations to spare keeps its front and sends the back
//! `remaining / (thieves + 1)` iterations to the thief as a new part. So a
//! loop nested in a loop costs no task at all until some worker is idle,
//! and a thief gets the coarsest work there is (outer iterations, not the
//! tail of an inner loop).
//!
//! A reduction gives each part its own accumulator. A split puts a join
//! node ([`crate::loops::merge`]) between the part that keeps the front and the
//! part that takes the back; whichever of the two finishes second merges
//! them (left before right, so the merge order is the index order) and
//! passes the result up, so the whole reduction merges on the workers that
//! finish last, without a lock.
//!
//! A `depends_on_each` loop checks, before each iteration, whether that
//! iteration's promise is fulfilled (once per bucket). When it is not, the
//! iterations of that bucket become a part parked on the bucket's promise,
//! and the loop goes on with the next bucket: each iteration starts the
//! moment its promise is fulfilled, and no worker waits for it.
//!
//! Every part of a loop counts in the loop's `pending` count: a blocking
//! loop's caller waits (working) until it reaches zero; a spawned loop's
//! last part fulfills the promise its handle waits on.

use crate::core::handle::JoinHandle;
use crate::core::latch::CountLatch;
use crate::core::pool::{current_registry, on_worker};
use crate::core::registry::Registry;
use crate::core::send_ptr::SendPtr;
use crate::core::split::LoopFrame;
use crate::core::sync::{AtomicUsize, Ordering, UnsafeCell};
use crate::core::task::{self, TaskRef};
use crate::core::unwind::{self, FirstPanic};
use crate::core::worker::{Until, Worker};
use crate::dataflow::delayed;
use crate::dataflow::event::Dep;
use crate::dataflow::loop_promise::{LoopDeps, LoopPromise};
use crate::dataflow::promise::Promise;
use crate::loops::merge::{self, Out};
use std::any::Any;
use std::cell::Cell;
use std::marker::PhantomData;
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// A parallel loop over a range of indices, configured by its methods and
/// run by [`for_each`](ParallelFor::for_each),
/// [`reduce`](ParallelFor::reduce) or [`spawn`](ParallelFor::spawn).
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// let sum = AtomicUsize::new(0);
/// selvedge::parallel_for(0..100).stride(10).for_each(|i| {
///     sum.fetch_add(i, Ordering::Relaxed);
/// });
/// assert_eq!(sum.into_inner(), (0..100).step_by(10).sum());
/// ```
#[must_use = "a parallel loop does nothing until `for_each`, `reduce` or `spawn` runs it"]
pub struct ParallelFor<'p> {
    range: Range<usize>,
    stride: usize,
    deps: Vec<Dep>,
    each: Option<&'p LoopPromise>,
}

/// A parallel loop over `range`, one iteration per index (see
/// [`ParallelFor`] for the options). An empty or reversed range runs no
/// iteration, as a Rust `for` loop would.
///
/// On a worker the loop runs on that worker's runtime; from any other
/// thread, on the global runtime.
///
/// ```
/// let v: Vec<u64> = (0..1000).collect();
/// let total = selvedge::parallel_for(0..v.len()).reduce(|| 0, |acc, i| acc + v[i], |a, b| a + b);
/// assert_eq!(total, 499_500);
/// ```
pub fn parallel_for(range: Range<usize>) -> ParallelFor<'static> {
    ParallelFor {
        range,
        stride: 1,
        deps: Vec::new(),
        each: None,
    }
}

impl<'p> ParallelFor<'p> {
    /// Runs every `step`-th index of the range, starting at its start.
    ///
    /// # Panics
    /// When `step` is 0.
    ///
    /// ```
    /// let n = selvedge::parallel_for(1..10).stride(3).reduce(Vec::new, |mut v, i| { v.push(i); v }, |mut a, b| { a.extend(b); a });
    /// assert_eq!(n, [1, 4, 7]);
    /// ```
    #[track_caller]
    pub fn stride(mut self, step: usize) -> Self {
        assert!(
            step > 0,
            "parallel_for stride must be at least 1, got {step}"
        );
        self.stride = step;
        self
    }

    /// The whole loop waits for `dep` (a promise, or an iteration of a
    /// loop promise) before its first iteration. May be given several
    /// times; the loop waits for all of them. An empty loop with
    /// dependencies still completes only once they are fulfilled.
    ///
    /// ```
    /// use selvedge::{parallel_for, Promise};
    ///
    /// let ready = Promise::new();
    /// let h = parallel_for(0..4).depends_on(ready.dep()).spawn(|i| assert!(i < 4));
    /// assert!(!h.is_finished());
    /// ready.fulfill();
    /// h.join();
    /// ```
    pub fn depends_on(mut self, dep: Dep) -> Self {
        self.deps.push(dep);
        self
    }

    /// Iteration `i` waits for `promise.at(i)`, and runs as soon as that is
    /// fulfilled, whatever happened to the other iterations: two loops
    /// chained this way pipeline, with no barrier between them.
    ///
    /// A spawned loop keeps a reference to the promise, not a handle: when
    /// the producer drops its last handle with iterations unfulfilled,
    /// their consumers are cancelled, and the loop reports that as a
    /// panic. A blocking loop (`for_each`, `reduce`) borrows the promise,
    /// so the promise outlives the loop: an iteration nobody fulfills
    /// keeps it waiting.
    ///
    /// # Panics
    /// When an index of this loop lies outside the promise's range; the
    /// message names the index and the range.
    ///
    /// ```
    /// use selvedge::{parallel_for, LoopPromise};
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// let stage1 = LoopPromise::new(0..8);
    /// let squares: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(0)).collect();
    /// let total = AtomicU64::new(0);
    /// selvedge::scope(|s| {
    ///     s.spawn(|_| {
    ///         parallel_for(0..8).depends_on_each(&stage1).for_each(|i| {
    ///             total.fetch_add(squares[i].load(Ordering::Relaxed), Ordering::Relaxed);
    ///         })
    ///     });
    ///     parallel_for(0..8).for_each(|i| {
    ///         squares[i].store((i * i) as u64, Ordering::Relaxed);
    ///         stage1.fulfill(i);
    ///     });
    /// });
    /// assert_eq!(total.into_inner(), 140);
    /// ```
    #[track_caller]
    pub fn depends_on_each<'q>(self, promise: &'q LoopPromise) -> ParallelFor<'q>
    where
        'p: 'q,
    {
        let this = ParallelFor {
            range: self.range,
            stride: self.stride,
            deps: self.deps,
            each: Some(promise),
        };
        this.check_each();
        this
    }

    /// Panics unless every index is covered by the `depends_on_each`
    /// promise (checked again when the loop runs: a later `stride` changes
    /// the indices).
    #[track_caller]
    fn check_each(&self) {
        let (Some(promise), Some(last)) = (self.each, self.last_index()) else {
            return;
        };
        let covered = promise.range();
        for i in [self.range.start, last] {
            if !covered.contains(&i) {
                panic!(
                    "depends_on_each: loop index {i} is outside the loop promise's range {}..{}",
                    covered.start, covered.end
                );
            }
        }
    }

    /// How many iterations the loop runs.
    ///
    /// ```
    /// assert_eq!(selvedge::parallel_for(0..10).stride(4).len(), 3);
    /// assert_eq!(selvedge::parallel_for(5..2).len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.range
            .end
            .saturating_sub(self.range.start)
            .div_ceil(self.stride)
    }

    /// Whether the loop runs no iteration.
    ///
    /// ```
    /// assert!(selvedge::parallel_for(3..3).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn last_index(&self) -> Option<usize> {
        let n = self.len();
        (n > 0).then(|| self.range.start + (n - 1) * self.stride)
    }

    /// Runs `f(i)` for every index and returns when all have run. `f` may
    /// borrow from the caller. On a worker, the caller runs iterations
    /// itself and, once its part is done, keeps working while the parts
    /// thieves took finish.
    ///
    /// A panic in `f` does not stop the loop: every other iteration still
    /// runs exactly once, and the first panic is resumed here afterwards.
    ///
    /// ```
    /// let mut out = vec![0usize; 64];
    /// let slots: Vec<std::sync::atomic::AtomicUsize> = (0..64).map(Into::into).collect();
    /// selvedge::parallel_for(0..64).for_each(|i| {
    ///     slots[i].store(i * 2, std::sync::atomic::Ordering::Relaxed);
    /// });
    /// for (o, s) in out.iter_mut().zip(&slots) {
    ///     *o = s.load(std::sync::atomic::Ordering::Relaxed);
    /// }
    /// assert_eq!(out[63], 126);
    /// ```
    #[track_caller]
    pub fn for_each<F>(self, f: F)
    where
        F: Fn(usize) + Sync,
    {
        self.run_blocking(&ForEach(f));
    }

    /// Folds the indices into one value: each part of the loop starts from
    /// `identity()` and folds its iterations in order with `fold`; parts
    /// are combined with `merge(left, right)`, always a lower range on the
    /// left, so an associative `merge` gives the same result as a serial
    /// fold even when it is not commutative (concatenation, say).
    ///
    /// A panic in any of the three closures is resumed here after the loop
    /// ends. A panicking `fold` skips only its own iteration; a panicking
    /// `identity` skips the iterations of the part it was starting; a
    /// panicking `merge` drops both values. (There is no result to lose
    /// by then: the loop panics.)
    ///
    /// ```
    /// let words = ["a", "b", "c", "d", "e"];
    /// let joined = selvedge::parallel_for(0..words.len()).reduce(
    ///     String::new,
    ///     |mut s, i| { s.push_str(words[i]); s },
    ///     |a, b| a + &b,
    /// );
    /// assert_eq!(joined, "abcde");
    /// ```
    #[track_caller]
    pub fn reduce<T, I, G, M>(self, identity: I, fold: G, merge: M) -> T
    where
        T: Send,
        I: Fn() -> T + Sync,
        G: Fn(T, usize) -> T + Sync,
        M: Fn(T, T) -> T + Sync,
    {
        self.run_blocking(&Reduce {
            identity,
            fold,
            merge,
            _acc: PhantomData,
        })
    }

    /// Starts the loop without waiting for it and returns a handle that
    /// completes when every iteration has run (a [`JoinHandle`]: `join`,
    /// `try_join`, `is_finished`, `.await`). No task waits for the loop:
    /// the part that finishes last completes the handle. `f` must be
    /// `'static`; to borrow, call `for_each` inside a [`crate::scope`]
    /// task instead.
    ///
    /// The first panic of `f` is resumed by the handle's `join` (after
    /// every other iteration ran); a cancelled part (its promise dropped
    /// unfulfilled) is reported the same way.
    ///
    /// ```
    /// use selvedge::{parallel_for, LoopPromise};
    /// use std::sync::Arc;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    ///
    /// let produced = Arc::new(LoopPromise::new(0..100));
    /// let seen = Arc::new(AtomicUsize::new(0));
    /// let consumer = {
    ///     let seen = seen.clone();
    ///     parallel_for(0..100)
    ///         .depends_on_each(&produced)
    ///         .spawn(move |_| { seen.fetch_add(1, Ordering::Relaxed); })
    /// };
    /// let producer = {
    ///     let produced = produced.clone();
    ///     parallel_for(0..100).spawn(move |i| { produced.fulfill(i); })
    /// };
    /// producer.join();
    /// consumer.join();
    /// assert_eq!(seen.load(Ordering::Relaxed), 100);
    /// ```
    #[track_caller]
    pub fn spawn<F>(self, f: F) -> JoinHandle<()>
    where
        F: Fn(usize) + Send + Sync + 'static,
    {
        self.check_each();
        let runtime = current_registry();
        let done = Promise::new();
        let job = Arc::new(LoopJob {
            body: ForEach(f),
            start: self.range.start,
            stride: self.stride,
            each: self.each.and_then(LoopDeps::new),
            panic: FirstPanic::new(),
            result: UnsafeCell::new(None),
            finish: Finish::Fulfill {
                pending: AtomicUsize::new(1),
                done: UnsafeCell::new(Some(done.clone())),
            },
        });
        let keep = job.clone();
        let handle = delayed::submit_delayed(runtime, [done.dep()], move || {
            if let Some(p) = keep.take_panic() {
                resume_unwind(p);
            }
        });
        drop(done);
        // The parts hold this reference together, and the last one to
        // finish releases it (see `LoopJob::finish_part`): the job lives until
        // every part finished even when the handle task is cancelled first
        // (a runtime's drop cancels every parked task, in any order).
        let job = Arc::into_raw(job);
        match self.len() {
            // SAFETY: the parts' reference keeps the job alive until this,
            // the only part, finishes.
            0 if self.deps.is_empty() => unsafe { LoopJob::finish_part(job) },
            // An empty loop with dependencies still completes only after
            // them (or reports them broken).
            n => {
                let part = Part::new(job, 0, n, Out::ROOT).into_task();
                delayed::delay(runtime, part, self.deps);
            }
        }
        handle
    }

    #[track_caller]
    fn run_blocking<B: Body>(self, body: &B) -> B::Acc {
        self.check_each();
        let count = self.len();
        if count == 0 && self.deps.is_empty() {
            return body.identity();
        }
        let ParallelFor {
            range,
            stride,
            deps,
            each,
        } = self;
        on_worker(|w| {
            let job = LoopJob {
                body,
                start: range.start,
                stride,
                each: each.and_then(LoopDeps::new),
                panic: FirstPanic::new(),
                result: UnsafeCell::new(None),
                // The count held by the first part.
                finish: Finish::Wake(CountLatch::new(w.index, &w.shared)),
            };
            let Finish::Wake(latch) = &job.finish else {
                unreachable!("made just above")
            };
            if deps.iter().all(Dep::is_fulfilled) {
                run_part(&job, w, 0, count, Out::ROOT);
                if !latch.release_own() {
                    w.wait_until(Until::Latch(latch));
                }
            } else {
                let part = Part::new(&job, 0, count, Out::ROOT).into_task();
                delayed::delay(&w.shared, part, deps);
                w.wait_until(Until::Latch(latch));
            }
            // SAFETY: every part finished (the latch is set, read with
            // acquire), so the last merge's write is visible and nobody
            // touches the slot any more.
            let result = job.result.with_mut(|r| unsafe { (*r).take() });
            if let Some(p) = job.take_panic() {
                // The merged value is dropped before the panic is resumed:
                // a destructor that panics while unwinding would abort.
                unwind::drop_or_report("a panicking loop's merged accumulator", result);
                resume_unwind(p);
            }
            match result {
                Some(Some(acc)) => acc,
                // Without merges (`for_each`) nothing is deposited.
                _ => job.body.identity(),
            }
        })
    }
}

impl std::fmt::Debug for ParallelFor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParallelFor")
            .field("range", &self.range)
            .field("stride", &self.stride)
            .field("deps", &self.deps.len())
            .field("depends_on_each", &self.each.is_some())
            .finish()
    }
}

/// Parallel iteration over `slice` in chunks of `chunk_len` elements (the
/// last may be shorter), each chunk given mutably with its index: a way to
/// write outputs in parallel without `unsafe` or locks.
///
/// # Panics
/// When `chunk_len` is 0.
///
/// ```
/// let mut out = vec![0u32; 10];
/// selvedge::par_chunks_mut(&mut out, 4).for_each(|c, chunk| chunk.fill(c as u32));
/// assert_eq!(out, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
/// ```
#[track_caller]
pub fn par_chunks_mut<T: Send>(slice: &mut [T], chunk_len: usize) -> ParChunksMut<'_, T> {
    assert!(
        chunk_len > 0,
        "par_chunks_mut chunk length must be at least 1, got {chunk_len}"
    );
    ParChunksMut { slice, chunk_len }
}

/// Chunks of a slice for a parallel loop; made by [`par_chunks_mut`].
///
/// ```
/// let mut v = vec![1u64; 100];
/// selvedge::par_chunks_mut(&mut v, 7).for_each(|_, c| c.iter_mut().for_each(|x| *x *= 3));
/// assert_eq!(v.iter().sum::<u64>(), 300);
/// ```
#[derive(Debug)]
#[must_use = "nothing runs until `for_each`"]
pub struct ParChunksMut<'a, T> {
    slice: &'a mut [T],
    chunk_len: usize,
}

impl<T: Send> ParChunksMut<'_, T> {
    /// How many chunks there are.
    ///
    /// ```
    /// let mut v = [0u8; 10];
    /// assert_eq!(selvedge::par_chunks_mut(&mut v, 4).len(), 3);
    /// ```
    pub fn len(&self) -> usize {
        self.slice.len().div_ceil(self.chunk_len)
    }

    /// Whether there is no chunk (the slice is empty).
    ///
    /// ```
    /// let mut v: [u8; 0] = [];
    /// assert!(selvedge::par_chunks_mut(&mut v, 4).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.slice.is_empty()
    }

    /// Runs `f(chunk_index, chunk)` for every chunk, in parallel, and
    /// returns when all have run. Panics as [`ParallelFor::for_each`].
    ///
    /// ```
    /// let mut image = vec![0u8; 6 * 4];
    /// selvedge::par_chunks_mut(&mut image, 6).for_each(|row, pixels| {
    ///     for (x, p) in pixels.iter_mut().enumerate() {
    ///         *p = (row * 10 + x) as u8;
    ///     }
    /// });
    /// assert_eq!(image[6 * 3 + 5], 35);
    /// ```
    pub fn for_each<F>(self, f: F)
    where
        F: Fn(usize, &mut [T]) + Sync,
    {
        let (len, chunk_len) = (self.slice.len(), self.chunk_len);
        let base = SendPtr::new(self.slice.as_mut_ptr());
        parallel_for(0..self.len()).for_each(|c| {
            let start = c * chunk_len;
            let end = start.saturating_add(chunk_len).min(len);
            // SAFETY: chunk `c` is `[start, end)`, inside the slice, and
            // each chunk index runs exactly once, so no two calls see
            // overlapping elements; the slice stays mutably borrowed until
            // the loop returns.
            let chunk =
                unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
            f(c, chunk)
        });
    }
}

impl<T: Send> ParChunksMut<'_, T> {
    /// Like [`for_each`](ParChunksMut::for_each), but consecutive chunks
    /// that one worker runs together come as one slice: `f(first, span)`,
    /// where `span` is chunks `first, first + 1, ...` side by side (its
    /// length a multiple of the chunk length, but for a span ending with
    /// the slice's last chunk).
    ///
    /// The loop is split as any other, but only between spans: a span is
    /// every chunk its part has not started, taken at once unless a thief
    /// is already asking. So while other workers have work (an outer
    /// loop's iterations, say), each call covers everything that is left,
    /// and the chunk length is only the smallest piece a thief can take.
    /// Use it where one call on many chunks is cheaper than many calls on
    /// one each (a matrix kernel that packs its operands per call, a
    /// system call per write). A thief arriving while a span runs waits
    /// for older work or for the span's end: keep spans to work that is
    /// fine to run uninterrupted.
    ///
    /// # Panics
    /// As [`ParallelFor::for_each`]: a panicking call loses the chunks of
    /// its span only.
    ///
    /// ```
    /// // Row sums of a 6 x 4 matrix, rows in spans of one or more.
    /// let m: Vec<u32> = (0..24).collect();
    /// let mut sums = vec![0u32; 6];
    /// selvedge::par_chunks_mut(&mut sums, 1).for_each_span(|first, span| {
    ///     for (r, s) in span.iter_mut().enumerate() {
    ///         *s = m[(first + r) * 4..][..4].iter().sum();
    ///     }
    /// });
    /// assert_eq!(sums, [6, 22, 38, 54, 70, 86]);
    /// ```
    pub fn for_each_span<F>(self, f: F)
    where
        F: Fn(usize, &mut [T]) + Sync,
    {
        let body = SpansBody {
            base: SendPtr::new(self.slice.as_mut_ptr()),
            len: self.slice.len(),
            chunk_len: self.chunk_len,
            f,
        };
        parallel_for(0..self.len()).run_blocking(&body);
    }
}

/// The body of `for_each_span`: each block of iterations (chunk indices) is
/// every chunk the part has left, handed over as one sub-slice.
struct SpansBody<T, F> {
    base: SendPtr<T>,
    len: usize,
    chunk_len: usize,
    f: F,
}

impl<T, F> SpansBody<T, F> {
    /// The elements of chunks `ks`.
    ///
    /// # Safety
    /// `ks` are chunk indices of the slice, claimed by the calling part
    /// (each runs once), while the slice stays mutably borrowed.
    #[allow(clippy::mut_from_ref)]
    unsafe fn span(&self, ks: Range<usize>) -> &mut [T] {
        let start = ks.start * self.chunk_len;
        // Saturating: with zero-sized elements a slice may be as long as
        // `usize::MAX`, and the last chunk's end past it.
        let end = ks.end.saturating_mul(self.chunk_len).min(self.len);
        // SAFETY: `[start, end)` lies in the slice (chunk indices are
        // below its chunk count), and the caller's chunks belong to it
        // alone.
        unsafe { std::slice::from_raw_parts_mut(self.base.get().add(start), end - start) }
    }
}

impl<T: Send, F: Fn(usize, &mut [T]) + Sync> Body for SpansBody<T, F> {
    type Acc = ();
    type Target = Self;
    const MERGES: bool = false;
    const SPANS: bool = true;

    fn identity(&self) {}

    fn fold(&self, _: (), i: usize) {
        // SAFETY: chunk `i` runs exactly once, in this call.
        (self.f)(i, unsafe { self.span(i..i + 1) })
    }

    fn merge(&self, _: (), _: ()) {}

    fn target(&self) -> &Self {
        self
    }

    #[inline(always)]
    fn fold_block(
        &self,
        resume: &Cell<usize>,
        start: usize,
        stride: usize,
        ks: Range<usize>,
        _: (),
    ) {
        debug_assert!(start == 0 && stride == 1, "span loops cover 0..chunks");
        // A panicking call gives up its whole span: none of its chunks
        // runs again.
        let _at = ResumeAt {
            resume,
            k: ks.end,
            base: 0,
        };
        // SAFETY: the part claimed chunks `ks`; they run here only.
        (self.f)(ks.start, unsafe { self.span(ks) })
    }
}

/// Parallel iteration over the elements of `slice`, each given mutably with
/// its index.
///
/// ```
/// let mut v = vec![0usize; 1000];
/// selvedge::par_iter_mut(&mut v).for_each(|i, x| *x = i * i);
/// assert_eq!(v[999], 998_001);
/// ```
pub fn par_iter_mut<T: Send>(slice: &mut [T]) -> ParIterMut<'_, T> {
    ParIterMut { slice }
}

/// The elements of a slice for a parallel loop; made by [`par_iter_mut`].
///
/// ```
/// let mut v = [1, 2, 3];
/// selvedge::par_iter_mut(&mut v).for_each(|_, x| *x += 1);
/// assert_eq!(v, [2, 3, 4]);
/// ```
#[derive(Debug)]
#[must_use = "nothing runs until `for_each`"]
pub struct ParIterMut<'a, T> {
    slice: &'a mut [T],
}

impl<T: Send> ParIterMut<'_, T> {
    /// Runs `f(index, element)` for every element, in parallel, and returns
    /// when all have run. Panics as [`ParallelFor::for_each`].
    ///
    /// ```
    /// let mut v = vec![1.0f64; 8];
    /// selvedge::par_iter_mut(&mut v).for_each(|i, x| *x *= i as f64);
    /// assert_eq!(v[7], 7.0);
    /// ```
    pub fn for_each<F>(self, f: F)
    where
        F: Fn(usize, &mut T) + Sync,
    {
        let body = ElementsBody {
            base: SendPtr::new(self.slice.as_mut_ptr()),
            f,
        };
        parallel_for(0..self.slice.len()).run_blocking(&body);
    }
}

/// The body of `par_iter_mut`: each block of iterations becomes a `&mut`
/// sub-slice, so the compiler knows the element stores touch nothing the
/// closure reads (through a raw pointer per element it would reload every
/// captured value after every store).
struct ElementsBody<T, F> {
    base: SendPtr<T>,
    f: F,
}

impl<T: Send, F: Fn(usize, &mut T) + Sync> Body for ElementsBody<T, F> {
    type Acc = ();
    type Target = Self;
    const MERGES: bool = false;

    fn identity(&self) {}

    fn fold(&self, _: (), i: usize) {
        // SAFETY: `i` is in bounds and runs exactly once, so each element
        // is borrowed by one call only, while the slice stays mutably
        // borrowed until the loop returns.
        (self.f)(i, unsafe { &mut *self.base.get().add(i) })
    }

    fn merge(&self, _: (), _: ()) {}

    fn target(&self) -> &Self {
        self
    }

    #[inline(always)]
    fn fold_block(
        &self,
        resume: &Cell<usize>,
        start: usize,
        stride: usize,
        ks: Range<usize>,
        _: (),
    ) {
        debug_assert!(start == 0 && stride == 1, "par_iter_mut loops cover 0..len");
        // SAFETY: the part claimed iterations `ks`, which are in bounds
        // and run by this part only, so their elements are borrowed here
        // alone while the slice stays mutably borrowed by the loop.
        let block =
            unsafe { std::slice::from_raw_parts_mut(self.base.get().add(ks.start), ks.len()) };
        visit_elements(block, ks.start, &self.f, resume);
    }
}

/// Calls `f(first + j, &mut block[j])` for each element; a function of its
/// own so `block` arrives as a `&mut` argument, which no other pointer
/// aliases.
#[inline(never)]
fn visit_elements<T, F: Fn(usize, &mut T)>(
    block: &mut [T],
    first: usize,
    f: &F,
    resume: &Cell<usize>,
) {
    let mut at = ResumeAt {
        resume,
        k: first,
        base: 0,
    };
    for x in block {
        let i = at.k;
        at.k += 1;
        f(i, x);
    }
}

// ---------------------------------------------------------------------------
// What a loop computes.

/// The per-loop behaviour: what a part starts from, what one iteration
/// does, and how two parts combine.
trait Body: Sync {
    /// A part's accumulator (`()` for `for_each`).
    type Acc: Send;
    /// The body itself, behind any references: what the hot loop takes
    /// as an argument, so the compiler knows the closures' captures do not
    /// change while it runs (see `run_block`).
    type Target: Body<Acc = Self::Acc>;
    /// Whether parts' accumulators must be merged (false: no join nodes).
    const MERGES: bool;
    /// Whether a block is every iteration the part has left (see
    /// `ParChunksMut::for_each_span`) rather than sized by time.
    const SPANS: bool = false;
    fn identity(&self) -> Self::Acc;
    fn fold(&self, acc: Self::Acc, i: usize) -> Self::Acc;
    fn merge(&self, left: Self::Acc, right: Self::Acc) -> Self::Acc;
    fn target(&self) -> &Self::Target;

    /// Folds iterations `ks` (claimed by the calling part) into `acc`,
    /// leaving `resume` past the last one started, even when one unwinds.
    #[inline(always)]
    fn fold_block(
        &self,
        resume: &Cell<usize>,
        start: usize,
        stride: usize,
        ks: Range<usize>,
        acc: Self::Acc,
    ) -> Self::Acc {
        fold_indices(self, resume, start, stride, ks, acc)
    }
}

struct ForEach<F>(F);

impl<F: Fn(usize) + Sync> Body for ForEach<F> {
    type Acc = ();
    type Target = Self;
    const MERGES: bool = false;

    #[inline(always)]
    fn identity(&self) {}

    #[inline(always)]
    fn fold(&self, _: (), i: usize) {
        (self.0)(i)
    }

    #[inline(always)]
    fn merge(&self, _: (), _: ()) {}

    #[inline(always)]
    fn target(&self) -> &Self {
        self
    }
}

struct Reduce<T, I, G, M> {
    identity: I,
    fold: G,
    merge: M,
    _acc: PhantomData<fn() -> T>,
}

impl<T, I, G, M> Body for Reduce<T, I, G, M>
where
    T: Send,
    I: Fn() -> T + Sync,
    G: Fn(T, usize) -> T + Sync,
    M: Fn(T, T) -> T + Sync,
{
    type Acc = T;
    type Target = Self;
    const MERGES: bool = true;

    #[inline(always)]
    fn identity(&self) -> T {
        (self.identity)()
    }

    #[inline(always)]
    fn fold(&self, acc: T, i: usize) -> T {
        (self.fold)(acc, i)
    }

    #[inline(always)]
    fn merge(&self, left: T, right: T) -> T {
        (self.merge)(left, right)
    }

    #[inline(always)]
    fn target(&self) -> &Self {
        self
    }
}

impl<B: Body> Body for &B {
    type Acc = B::Acc;
    type Target = B::Target;
    const MERGES: bool = B::MERGES;
    const SPANS: bool = B::SPANS;

    #[inline(always)]
    fn identity(&self) -> B::Acc {
        (**self).identity()
    }

    #[inline(always)]
    fn fold(&self, acc: B::Acc, i: usize) -> B::Acc {
        (**self).fold(acc, i)
    }

    #[inline(always)]
    fn merge(&self, left: B::Acc, right: B::Acc) -> B::Acc {
        (**self).merge(left, right)
    }

    #[inline(always)]
    fn target(&self) -> &B::Target {
        (**self).target()
    }
}

// ---------------------------------------------------------------------------
// One running loop.

/// What every part of one loop shares.
struct LoopJob<B: Body> {
    body: B,
    /// Iteration `k` runs index `start + k * stride`.
    start: usize,
    stride: usize,
    each: Option<LoopDeps>,
    /// The first panic of any iteration, merge or cancelled part.
    panic: FirstPanic,
    /// The merged accumulator, written once by the last merge (`None`
    /// inside when a merge panicked).
    result: UnsafeCell<Option<Option<B::Acc>>>,
    finish: Finish,
}

/// The parts not yet finished (the first part counts from the start), and
/// who learns that the last one finished.
enum Finish {
    /// A caller blocked in `for_each`/`reduce`, waiting on the latch.
    Wake(CountLatch<Registry>),
    /// A spawned loop's handle, parked on the promise `done` (taken by the
    /// last part). The handle task keeps the job alive until then, so the
    /// count needs no latch.
    Fulfill {
        pending: AtomicUsize,
        done: UnsafeCell<Option<Promise>>,
    },
}

impl Finish {
    /// Counts a part split off a running one (which holds a count).
    #[inline]
    fn add_part(&self) {
        match self {
            Finish::Wake(latch) => latch.increment(),
            Finish::Fulfill { pending, .. } => {
                pending.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

// SAFETY: a job is shared by its parts on several workers. The body is
// Sync; `result` is written once by the last merge and read by the owner
// after the count of parts reaches zero (acquire/release on the count);
// the promise in `Finish::Fulfill` is taken only by the part that brings
// the count to zero.
unsafe impl<B: Body> Sync for LoopJob<B> {}
// SAFETY: as above; a spawned loop's body is also Send.
unsafe impl<B: Body + Send> Send for LoopJob<B> {}

impl<B: Body> LoopJob<B> {
    fn record_panic(&self, payload: Box<dyn Any + Send>) {
        self.panic
            .keep(payload, "the payload of a later panic in a loop");
    }

    /// Records that the unstarted iterations `ks` of a cancelled part will
    /// never run. The first cancelled part holds the panic slot for them
    /// all (unless a panic came first): the loop's message names every
    /// cancelled iteration, not just the first part's.
    fn record_cancelled(&self, ks: Range<usize>) {
        self.panic.record_with(|slot| match slot.as_mut() {
            None => *slot = Some(Box::new(CancelledParts(vec![ks]))),
            Some(p) => {
                if let Some(parts) = p.downcast_mut::<CancelledParts>() {
                    parts.0.push(ks);
                }
            }
        });
    }

    /// The first panic; call after every part finished (the parts' ends
    /// order their records before this).
    fn take_panic(&self) -> Option<Box<dyn Any + Send>> {
        let payload = self.panic.take()?;
        match payload.downcast::<CancelledParts>() {
            Ok(parts) => Some(Box::new(cancelled_message(
                self.start,
                self.stride,
                parts.0,
            ))),
            Err(p) => Some(p),
        }
    }

    /// Counts one part finished (after its deposit); the last one tells
    /// the owner or fulfills the handle's promise.
    ///
    /// # Safety
    /// `job` is live and the calling part has not finished before. The job
    /// may be freed as soon as the count reaches zero, so nothing of it is
    /// touched after that but what was copied out first.
    unsafe fn finish_part(job: *const Self) {
        // SAFETY: the caller's unfinished part keeps the job alive until
        // the decrement below.
        let finish = unsafe { &(*job).finish };
        match finish {
            Finish::Wake(latch) => {
                let current = Worker::current().map(|w| &w.shared);
                // SAFETY: our part holds a count; the latch touches nothing
                // of the job after its decrement (the owner may return and
                // free the job at once, see `crate::core::latch`).
                unsafe { CountLatch::decrement(latch, current) };
            }
            Finish::Fulfill { pending, done } => {
                if pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                    // SAFETY: only the part that brought the count to zero
                    // gets here, and the parts' reference keeps the job
                    // alive until it is released below.
                    let promise = done.with_mut(|p| unsafe { (*p).take() });
                    if let Some(p) = promise {
                        p.fulfill();
                    }
                    // SAFETY: a spawned loop's job is in an `Arc` whose
                    // reference the parts hold together (`spawn`); the last
                    // part releases it, and touches nothing of the job after.
                    unsafe { Arc::decrement_strong_count(job) };
                }
            }
        }
    }
}

/// Hands a finished part's accumulator to `out` (see [`crate::loops::merge`]); a
/// merge that panics is recorded and passes `None` up; the value that
/// reaches the root is the loop's result.
fn deposit<B: Body>(job: &LoopJob<B>, out: Out<B::Acc>, value: Option<B::Acc>) {
    if !B::MERGES {
        return;
    }
    let merge = |l, r| match catch_unwind(AssertUnwindSafe(|| job.body.merge(l, r))) {
        Ok(v) => Some(v),
        Err(p) => {
            job.record_panic(p);
            None
        }
    };
    // SAFETY: every `Out` of a loop is deposited once: by the part it was
    // given to when it finishes, or by `park_bucket` when it closes a
    // segment.
    if let Some(result) = unsafe { merge::deposit(out, value, merge) } {
        // SAFETY: the root is reached once, by the last merge; the owner
        // reads it after every part finished.
        job.result.with_mut(|r| unsafe { *r = Some(result) });
    }
}

// ---------------------------------------------------------------------------
// Parts and their frames.

/// A loop frame with what its part needs to split: the job and where its
/// accumulator goes.
struct PartFrame<'j, B: Body> {
    frame: LoopFrame,
    job: &'j LoopJob<B>,
    out: Cell<Out<B::Acc>>,
}

/// The `LoopFrame::split` of a `PartFrame<B>`.
///
/// # Safety
/// `part` is a live `PartFrame<B>` (the frame's `part` pointer).
unsafe fn split_part<B: Body>(part: *const (), from: usize, to: usize) -> TaskRef {
    // SAFETY: per the caller; only `Cell`s and shared references are
    // reached through it, as by the part itself.
    let part = unsafe { &*part.cast::<PartFrame<'_, B>>() };
    // Relaxed: this part is unfinished, so the count cannot reach zero
    // before the new part's own decrement, which follows in the count's
    // modification order.
    part.job.finish.add_part();
    let out = if B::MERGES {
        let (left, right) = merge::split(part.out.get());
        part.out.set(left);
        right
    } else {
        Out::ROOT
    };
    Part::new(part.job, from, to, out).into_task()
}

/// Runs iterations `[from, to)` of `job` on `w` as one part, splittable by
/// thieves, and deposits its accumulator into `out`. The caller counts the
/// part finished.
fn run_part<B: Body>(job: &LoopJob<B>, w: &Worker, from: usize, to: usize, out: Out<B::Acc>) {
    let part = PartFrame {
        frame: LoopFrame::new(from, to, split_part::<B>),
        job,
        out: Cell::new(out),
    };
    part.frame.set_part(std::ptr::from_ref(&part).cast::<()>());
    w.enter_loop(&part.frame);
    if w.shared.sleep.has_sleepers() {
        w.share_loop(&part.frame);
    }
    let acc = w.nested(|| iterate(&part, w));
    w.leave_loop(&part.frame);
    deposit(job, part.out.get(), acc);
}

/// Runs the part's iterations, surviving panics: a panicking iteration is
/// recorded and skipped, and the rest go on from a fresh accumulator (the
/// loop's result is not used once a panic is recorded).
fn iterate<B: Body>(part: &PartFrame<'_, B>, w: &Worker) -> Option<B::Acc> {
    let job = part.job;
    loop {
        let identity = || part.frame.while_starting(|| job.body.identity());
        let acc = match catch_unwind(AssertUnwindSafe(identity)) {
            Ok(acc) => acc,
            Err(p) => {
                // Nothing to fold into: the rest of this part cannot run.
                job.record_panic(p);
                part.frame.resume.set(part.frame.stop.get());
                return None;
            }
        };
        let run = AssertUnwindSafe(|| match &job.each {
            None => run_iterations(part, w, acc),
            Some(each) => run_iterations_when_ready(part, each, w, acc),
        });
        let resumed_at = part.frame.resume.get();
        match catch_unwind(run) {
            Ok(acc) => return Some(acc),
            Err(p) => {
                job.record_panic(p);
                // `resume` is past the iteration that panicked. A panic
                // outside any iteration (none started) would only repeat:
                // give the part up rather than spin.
                if part.frame.resume.get() == resumed_at {
                    part.frame.resume.set(part.frame.stop.get());
                    return None;
                }
            }
        }
    }
}

/// Iterations the hot loop may claim at once, at most.
const MAX_BLOCK: usize = 4096;
/// About how long (in time-stamp-counter ticks on x86_64, roughly CPU
/// cycles; nanoseconds elsewhere) a block of iterations should take. A
/// block grows only while it takes under half of this, so a block of
/// uniform iterations takes at most about sixteen times that (the growth
/// factor): a thief waits about ten microseconds at 3 GHz for a running
/// loop to answer, longer when iterations suddenly slow down (the next
/// block is sized from the last).
const BLOCK_TICKS: u64 = 4096;

/// The hot loop. Iterations run in blocks: a block is claimed (`next`
/// moves past it, so no split can give it away), run with nothing but the
/// loop test and the body per iteration, and followed by one relaxed load
/// of the mailbox's count. The block starts at one iteration and grows
/// sixteenfold while blocks take under half of `BLOCK_TICKS` (halving
/// when they take more than twice that), so a loop of long iterations
/// answers a thief after each one, a loop of tiny ones pays for the check
/// (and the clock read) once per thousands of them, and a short inner
/// loop reads the clock only a few times.
/// `stop` is re-read per block because a split, made by a nested loop's
/// check too, lowers it; `resume` is written when a block ends or an
/// iteration unwinds (see `ResumeAt`), so a panic loses no iteration.
#[inline(always)]
fn run_iterations<B: Body>(part: &PartFrame<'_, B>, w: &Worker, mut acc: B::Acc) -> B::Acc {
    let (job, f) = (part.job, &part.frame);
    let mailbox = w.mailbox();
    let (start, stride) = (job.start, job.stride);
    let mut k = f.resume.get();
    let mut block = 1;
    // One clock read per block: each block's end is the next one's start.
    let mut began = ticks();
    loop {
        if B::SPANS && mailbox.waiting() != 0 {
            // A span runs uninterrupted: a thief already asking gets its
            // share first.
            poll(w, f);
        }
        let stop = f.stop.get();
        if k >= stop {
            return acc;
        }
        let end = if B::SPANS {
            stop
        } else {
            stop.min(k.saturating_add(block))
        };
        f.next.set(end);
        acc = run_block(job.body.target(), &f.resume, start, stride, k..end, acc);
        k = end;
        let now = ticks();
        block = next_block(block, now.wrapping_sub(began));
        began = now;
        if mailbox.waiting() != 0 {
            poll(w, f);
        }
    }
}

/// Runs iterations `ks` (claimed) of a loop of `body`, and leaves `resume`
/// at their end (or just past one that unwinds).
///
/// A function of its own, never inlined, so `body` arrives as an argument:
/// a shared reference argument tells the compiler that the closures'
/// captured values cannot change during the call, so it loads them once
/// per block. The loop itself is the body's [`Body::fold_block`].
#[inline(never)]
fn run_block<T: Body>(
    body: &T,
    resume: &Cell<usize>,
    start: usize,
    stride: usize,
    ks: Range<usize>,
    acc: T::Acc,
) -> T::Acc {
    body.fold_block(resume, start, stride, ks, acc)
}

/// Folds iterations `ks` one index at a time (the default
/// [`Body::fold_block`]). A stride of 1 gets its own loop, which the
/// compiler can vectorize, and which counts in indices rather than
/// iteration numbers: `start + k` for every iteration cost a vectorized sum
/// loop 5% (an add per vector, on top of the counter's).
#[inline(always)]
fn fold_indices<T: Body + ?Sized>(
    body: &T,
    resume: &Cell<usize>,
    start: usize,
    stride: usize,
    ks: Range<usize>,
    mut acc: T::Acc,
) -> T::Acc {
    if stride == 1 {
        // `start + ks.end` is at most the range's end: no overflow.
        let end = start + ks.end;
        let mut at = ResumeAt {
            resume,
            k: start + ks.start,
            base: start,
        };
        while at.k < end {
            let i = at.k;
            at.k += 1;
            acc = body.fold(acc, i);
        }
    } else {
        let mut at = ResumeAt {
            resume,
            k: ks.start,
            base: 0,
        };
        while at.k < ks.end {
            let i = start + at.k * stride;
            at.k += 1;
            acc = body.fold(acc, i);
        }
    }
    acc
}

/// Records where a block stopped in `resume`: at the block's end, or,
/// when an iteration unwinds, just past it. A local the loop counts in, so
/// the count stays in a register (the frame is reachable from the worker,
/// so a count kept there would be stored every iteration) and reaches
/// memory only at the end of the block or in the unwinding path.
struct ResumeAt<'a> {
    resume: &'a Cell<usize>,
    /// The count, offset by `base` (a loop may count in indices).
    k: usize,
    base: usize,
}

impl Drop for ResumeAt<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.resume.set(self.k - self.base);
    }
}

/// The next block size after a block of `block` iterations took `took`
/// ticks.
#[inline(always)]
fn next_block(block: usize, took: u64) -> usize {
    if took < BLOCK_TICKS / 2 {
        (block * 16).min(MAX_BLOCK)
    } else if took > BLOCK_TICKS * 2 {
        (block / 2).max(1)
    } else {
        block
    }
}

/// A cheap clock for sizing blocks: the time-stamp counter.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn ticks() -> u64 {
    // SAFETY: `rdtsc` has no preconditions on x86_64 (it only reads a
    // counter; it is an `unsafe fn` in older Rust only).
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
}

/// Elsewhere, nanoseconds from the monotonic clock (a few nanoseconds to
/// read where the platform maps it to user space, and read once per
/// block, so only loops of slow iterations read it often). A clock that
/// always read the same would let every block grow to `MAX_BLOCK`, which
/// would leave a thief waiting for thousands of slow iterations.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn ticks() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // Truncation is harmless: only differences are used, with wrapping.
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The loop of a `depends_on_each` part: before an iteration of a bucket
/// not yet seen fulfilled, check its promise; an unfulfilled bucket's
/// iterations become a part parked on it.
#[inline(always)]
fn run_iterations_when_ready<B: Body>(
    part: &PartFrame<'_, B>,
    each: &LoopDeps,
    w: &Worker,
    mut acc: B::Acc,
) -> B::Acc {
    let (job, f) = (part.job, &part.frame);
    let mailbox = w.mailbox();
    let (start, stride) = (job.start, job.stride);
    // Iterations below this are in buckets already seen fulfilled.
    let mut ready_until = 0;
    let mut k = f.resume.get();
    while k < f.stop.get() {
        let i = start + k * stride;
        if k >= ready_until {
            let bucket = each.bucket_of(i);
            let bucket_end = (each.bucket_end(bucket) - start).div_ceil(stride);
            if each.is_ready(bucket) {
                ready_until = bucket_end;
            } else {
                let (parked_until, folded) = park_bucket(part, each, w, bucket, k, bucket_end, acc);
                acc = folded;
                k = parked_until;
                continue;
            }
        }
        k += 1;
        f.next.set(k);
        f.resume.set(k);
        acc = job.body.fold(acc, i);
        if mailbox.waiting() != 0 {
            poll(w, f);
        }
    }
    acc
}

/// Turns iterations `from..bucket_end` (all in unfulfilled `bucket`, cut
/// at the part's stop) into a part parked on the bucket's promise; the
/// current part goes on after them. Returns where the parked run ends and
/// the accumulator to go on with.
#[cold]
#[inline(never)]
fn park_bucket<B: Body>(
    part: &PartFrame<'_, B>,
    each: &LoopDeps,
    w: &Worker,
    bucket: usize,
    from: usize,
    bucket_end: usize,
    acc: B::Acc,
) -> (usize, B::Acc) {
    let job = part.job;
    // The only call here that may panic comes first, before anything
    // changes: a panic leaves the part as it was.
    let fresh = B::MERGES.then(|| part.frame.while_starting(|| job.body.identity()));
    // A loop run by `identity` answers thieves from older parts only: this
    // one gives nothing away while starting, so `from` is still its own.
    let end = bucket_end.min(part.frame.stop.get());
    debug_assert!(
        end > from,
        "iterations {from}..{end} of a bucket were given away while its part was starting"
    );
    part.frame.next.set(end);
    part.frame.resume.set(end);
    job.finish.add_part();
    let (parked_out, acc) = match fresh {
        Some(fresh) => {
            // Close what this part folded so far, then place the parked
            // iterations between it and what this part folds next.
            let (before, after) = merge::split(part.out.get());
            deposit(job, before, Some(acc));
            let (parked, rest) = merge::split(after);
            part.out.set(rest);
            (parked, fresh)
        }
        None => (Out::ROOT, acc),
    };
    let task = Part::new(job, from, end, parked_out).into_task();
    delayed::delay(&w.shared, task, [each.dep(bucket)]);
    (end, acc)
}

/// Between two iterations: a thief is asking.
#[cold]
#[inline(never)]
fn poll(w: &Worker, frame: &LoopFrame) {
    frame.polling.set(true);
    w.answer_requests();
    frame.polling.set(false);
}

/// Why a loop part is cancelled (the part cannot tell which).
const CANCELLED_WHY: &str = "a dependency was dropped unfulfilled, or the runtime shut down";

/// How many ranges of cancelled iterations a loop's message names before it
/// sums up the rest: a loop of a million iterations whose every other
/// iteration was cancelled still gets a message of one line.
const CANCELLED_RANGES_NAMED: usize = 8;

/// The cancelled parts of a loop so far, as iteration numbers: the panic
/// payload of a loop while it runs, turned into [`cancelled_message`] when
/// it ends.
struct CancelledParts(Vec<Range<usize>>);

/// The message of a loop whose iterations `parts` (iteration numbers `k`,
/// for index `start + k * stride`; disjoint, in any order) were cancelled:
/// the indices as sorted ranges, adjacent parts joined, e.g. "iterations
/// 3..=5, 9, 12..=20"; past [`CANCELLED_RANGES_NAMED`] ranges the rest is
/// counted instead.
fn cancelled_message(start: usize, stride: usize, mut parts: Vec<Range<usize>>) -> String {
    use std::fmt::Write;
    parts.sort_unstable_by_key(|ks| ks.start);
    let mut runs: Vec<Range<usize>> = Vec::with_capacity(parts.len());
    for ks in parts {
        match runs.last_mut() {
            Some(last) if last.end >= ks.start => last.end = last.end.max(ks.end),
            _ => runs.push(ks),
        }
    }
    let index = |k: usize| start + k * stride;
    let mut list = String::new();
    for (n, ks) in runs.iter().take(CANCELLED_RANGES_NAMED).enumerate() {
        if n > 0 {
            list.push_str(", ");
        }
        let (first, last) = (index(ks.start), index(ks.end - 1));
        // Writing to a String cannot fail.
        let _ = if first == last {
            write!(list, "{first}")
        } else {
            write!(list, "{first}..={last}")
        };
    }
    if let Some(rest) = runs.get(CANCELLED_RANGES_NAMED..).filter(|r| !r.is_empty()) {
        let more: usize = rest.iter().map(ExactSizeIterator::len).sum();
        let ranges = rest.len();
        let _ = write!(
            list,
            " and {more} more iteration{} in {ranges} range{}",
            if more == 1 { "" } else { "s" },
            if ranges == 1 { "" } else { "s" },
        );
    }
    let total: usize = runs.iter().map(ExactSizeIterator::len).sum();
    let step = if stride > 1 {
        format!(" (stride {stride})")
    } else {
        String::new()
    };
    let (noun, verb) = if total == 1 {
        ("iteration", "was")
    } else {
        ("iterations", "were")
    };
    format!("selvedge: parallel loop {noun} {list}{step} {verb} cancelled: {CANCELLED_WHY}")
}

/// A part queued as a task (split off, parked, or a spawned loop's first).
/// Dropped unrun (its promise broken, or its runtime shut down), it still
/// counts itself finished and reports the cancellation as the loop's panic.
struct Part<B: Body> {
    job: *const LoopJob<B>,
    from: usize,
    to: usize,
    out: Out<B::Acc>,
    ran: bool,
}

// SAFETY: a part only reaches its job through `&LoopJob<B>`, which is Sync.
unsafe impl<B: Body> Send for Part<B> {}

impl<B: Body> Part<B> {
    fn new(job: *const LoopJob<B>, from: usize, to: usize, out: Out<B::Acc>) -> Self {
        Self {
            job,
            from,
            to,
            out,
            ran: false,
        }
    }

    fn into_task(self) -> TaskRef {
        task::new_detached(move || {
            let mut part = self;
            part.ran = true;
            let w = Worker::current().expect("selvedge: loop parts run on workers");
            // SAFETY: the job lives until every part has finished, and this
            // one finishes only below.
            let job = unsafe { &*part.job };
            run_part(job, w, part.from, part.to, part.out);
            // SAFETY: this part is finished, once.
            unsafe { LoopJob::finish_part(part.job) };
        })
    }
}

impl<B: Body> Drop for Part<B> {
    fn drop(&mut self) {
        if self.ran {
            return;
        }
        // SAFETY: an unfinished part keeps its job alive.
        let job = unsafe { &*self.job };
        if self.from == self.to {
            job.record_panic(Box::new(format!(
                "selvedge: an empty parallel loop was cancelled: {CANCELLED_WHY}"
            )));
        } else {
            job.record_cancelled(self.from..self.to);
        }
        deposit(job, self.out, None);
        // SAFETY: this part is finished, once.
        unsafe { LoopJob::finish_part(self.job) };
    }
}
