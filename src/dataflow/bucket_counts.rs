//! The progress of a loop promise's buckets: which iterations of each
//! bucket were fulfilled, so that the one fulfil that completes a bucket
//! (and only it) fulfills the bucket's event, and a repeated fulfil of an
//! iteration is ignored. Lock-free; loom checks it
//! (`loom-tests/tests/models/bucket_counts.rs`).

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::sync::{AtomicU64, AtomicUsize, Ordering};
use std::ops::Range;

/// The progress of each bucket of a loop promise, one word per bucket:
///
/// - even, `2 * w`: the bucket's first `w` iterations are fulfilled and no
///   other one is. In-order fulfils move `w` on with a CAS and need no
///   memory per iteration; the one that reaches the bucket's length
///   fulfills the bucket.
/// - odd: a pointer (tag bit set) to the bucket's [`Bits`], installed by
///   the first fulfil ahead of `w`, which freezes `w` in it. From then on
///   every fulfil of the bucket goes through the bits.
pub struct BucketCounts {
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
    /// Progress for the buckets of `bucket` iterations of a loop promise
    /// over `range` (for messages), one zeroed state per bucket.
    pub fn new(states: Box<[AtomicUsize]>, range: Range<usize>, bucket: usize) -> Self {
        Self {
            states,
            range,
            bucket,
        }
    }

    /// Offset `o` of bucket `b`, `len` iterations long, is fulfilled now;
    /// returns `None` when it already was, else whether the bucket is now
    /// complete.
    #[track_caller]
    pub fn fulfill(&self, b: usize, o: usize, len: usize) -> Option<bool> {
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
                // Relaxed: the bits are unpublished; the CAS below
                // publishes them.
                bits.remaining.store(len - w, Ordering::Relaxed);
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
    pub fn is_fulfilled(&self, b: usize, o: usize) -> bool {
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
            // The last owner: nobody stores any more (a load, not
            // `get_mut`, so that loom's atomics do here too).
            let cur = state.load(Ordering::Acquire);
            if cur & BITS_TAG != 0 {
                // SAFETY: installed by `fulfill` from `Box::into_raw`, and
                // the last owner frees it once.
                drop(unsafe { Box::from_raw((cur & !BITS_TAG) as *mut Bits) });
            }
        }
    }
}
