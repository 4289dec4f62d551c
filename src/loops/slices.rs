//! Loops over slices: `par_chunks_mut` and `par_iter_mut`, with the
//! bodies that hand each part its chunks or elements.

use super::body::{Body, ResumeAt};
use super::run::parallel_for;
use crate::core::send_ptr::SendPtr;
use std::cell::Cell;
use std::ops::Range;

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
    /// returns when all have run. Panics as [`ParallelFor::for_each`](crate::ParallelFor::for_each).
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
    /// The loop is split as any other, but only between spans. While an
    /// outer loop on the same worker still has iterations to give thieves
    /// and no worker asked this one for work lately, a span is every chunk
    /// its part has not started: one call covers everything that is left.
    /// Otherwise (this loop is all the work there is to give, or some
    /// worker asked a moment ago or was woken to take some) spans start at
    /// one chunk and double, so a part of `n` chunks takes about `log2 n`
    /// calls, a worker that asks once a call began waits for a short span
    /// rather than for the whole part, and one large loop alone still
    /// keeps every worker busy: before each span, workers that sleep (and
    /// so cannot ask) are each handed a share and woken, and each does the
    /// same with its share, so a loop reaches every worker within a few
    /// wake-ups rather than a few spans. On a runtime of one worker a span is
    /// always everything left. The chunk length is the smallest piece a
    /// thief can take. Use it where one call on many chunks is cheaper than
    /// many calls on one each (a matrix kernel that packs its operands per
    /// call, a system call per write); keep chunks to work that is fine to
    /// run uninterrupted.
    ///
    /// # Panics
    /// As [`ParallelFor::for_each`](crate::ParallelFor::for_each): a panicking call loses the chunks of
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
pub(super) struct SpansBody<T, F> {
    pub(super) base: SendPtr<T>,
    pub(super) len: usize,
    pub(super) chunk_len: usize,
    pub(super) f: F,
}

impl<T, F> SpansBody<T, F> {
    /// The elements of chunks `ks`.
    ///
    /// # Safety
    /// `ks` are chunk indices of the slice, claimed by the calling part
    /// (each runs once), while the slice stays mutably borrowed.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn span(&self, ks: Range<usize>) -> &mut [T] {
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
    /// when all have run. Panics as [`ParallelFor::for_each`](crate::ParallelFor::for_each).
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
pub(super) struct ElementsBody<T, F> {
    pub(super) base: SendPtr<T>,
    pub(super) f: F,
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
        let element = unsafe { &mut *self.base.get().add(i) };
        // Through `visit_elements` too, so that the body has one call site:
        // LLVM then inlines it there, where the hot loop runs (with a
        // second call site it may not, and the loop calls it per element).
        visit_elements(std::slice::from_mut(element), i, &self.f, &Cell::new(i));
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
pub(super) fn visit_elements<T, F: Fn(usize, &mut T)>(
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
