//! What a loop computes: the `Body` of a `for_each` or a `reduce`, with
//! its accumulator and merge.

use std::cell::Cell;
use std::marker::PhantomData;
use std::ops::Range;

/// The per-loop behaviour: what a part starts from, what one iteration
/// does, and how two parts combine.
pub(super) trait Body: Sync {
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

pub(super) struct ForEach<F>(pub(super) F);

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

pub(super) struct Reduce<T, I, G, M> {
    pub(super) identity: I,
    pub(super) fold: G,
    pub(super) merge: M,
    pub(super) _acc: PhantomData<fn() -> T>,
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
pub(super) struct ResumeAt<'a> {
    pub(super) resume: &'a Cell<usize>,
    /// The count, offset by `base` (a loop may count in indices).
    pub(super) k: usize,
    pub(super) base: usize,
}

impl Drop for ResumeAt<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.resume.set(self.k - self.base);
    }
}
