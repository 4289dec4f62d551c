//! `parallel_for` and its builder, `ParallelFor`: the options a loop
//! takes and the three ways to run it (`for_each`, `reduce`, `spawn`).

use super::body::{Body, ForEach, Reduce};
use super::job::{Finish, LoopJob};
use super::part::{run_part, Part};
use crate::core::handle::JoinHandle;
use crate::core::latch::CountLatch;
use crate::core::pool::{current_registry, on_worker};
use crate::core::sync::{AtomicUsize, UnsafeCell};
use crate::core::trace::names::SpanName;
use crate::core::unwind::{self, FirstPanic};
use crate::core::worker::Until;
use crate::dataflow::delayed;
use crate::dataflow::event::Dep;
use crate::dataflow::loop_promise::{LoopDeps, LoopPromise};
use crate::dataflow::promise::Promise;
use crate::loops::merge::Out;
use std::marker::PhantomData;
use std::ops::Range;
use std::panic::resume_unwind;
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
    pub(super) fn check_each(&self) {
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

    pub(super) fn last_index(&self) -> Option<usize> {
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
            name: SpanName::of::<F>(),
        });
        let keep = job.clone();
        let handle = delayed::spawn_delayed_on(runtime, [done.dep()], move || {
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
                delayed::delay::<F>(runtime, part, self.deps);
            }
        }
        handle
    }

    #[track_caller]
    pub(super) fn run_blocking<B: Body>(self, body: &B) -> B::Acc {
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
                name: SpanName::of::<B>(),
            };
            let Finish::Wake(latch) = &job.finish else {
                unreachable!("made just above")
            };
            if deps.iter().all(Dep::is_fulfilled) {
                // The caller's own part: a slice of its own in a trace.
                w.traced_span(job.name, || run_part(&job, w, 0, count, Out::ROOT));
                if !latch.release_own() {
                    w.wait_until(Until::Latch(latch));
                }
            } else {
                let part = Part::new(&job, 0, count, Out::ROOT).into_task();
                delayed::delay::<B>(&w.shared, part, deps);
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
