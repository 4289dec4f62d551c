//! A loop promise's bucket progress (`selvedge::protocols::BucketCounts`):
//! iterations of one bucket are fulfilled from different threads, in
//! order (a CAS on the bucket's watermark) or ahead of it (which switches
//! the bucket to a bit per iteration, installed by a CAS). In every
//! interleaving exactly one fulfil completes the bucket, a repeated fulfil
//! reports "already fulfilled", and the thread that completes the bucket
//! sees every other iteration's writes (its event publishes them).
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::BucketCounts;

/// One bucket of `len` iterations, each with a cell its fulfiller writes
/// before fulfilling it.
struct Bucket {
    counts: BucketCounts,
    data: Vec<UnsafeCell<usize>>,
    completed: AtomicUsize,
}

// SAFETY: each data cell is written by the one thread that fulfils its
// iteration, and read only by the thread that completes the bucket, after
// the protocol ordered the write before it (loom checks that ordering).
unsafe impl Sync for Bucket {}
// SAFETY: as above.
unsafe impl Send for Bucket {}

impl Bucket {
    fn new(len: usize) -> Arc<Self> {
        Arc::new(Self {
            counts: BucketCounts::new(Box::new([AtomicUsize::new(0)]), 0..len, len),
            data: (0..len).map(|_| UnsafeCell::new(0)).collect(),
            completed: AtomicUsize::new(0),
        })
    }

    /// Writes iteration `o`'s data, then fulfils it. The fulfil that
    /// completes the bucket reads every iteration's data: loom reports a
    /// data race if some write is not ordered before it.
    fn fulfil(&self, o: usize) -> Option<bool> {
        let len = self.data.len();
        let first_time = !self.counts.is_fulfilled(0, o);
        if first_time {
            // SAFETY: only this thread fulfils `o` in these models.
            self.data[o].with_mut(|d| unsafe { *d = o + 1 });
        }
        let done = self.counts.fulfill(0, o, len);
        if done == Some(true) {
            for (i, cell) in self.data.iter().enumerate() {
                // SAFETY: ordered after every write by the protocol.
                assert_eq!(cell.with(|d| unsafe { *d }), i + 1, "iteration {i} unseen");
            }
            self.completed.fetch_add(1, Ordering::Relaxed);
        }
        done
    }
}

/// Two threads fulfil a bucket of three iterations: one takes iteration 2
/// (ahead of the watermark: the switch to bits), the other 0 then 1 (in
/// order, racing the switch). Exactly one of the three fulfils completes
/// the bucket, and it sees the other two's writes.
#[test]
fn exactly_one_fulfil_completes_a_bucket_in_order_or_not() {
    model(|| {
        let bucket = Bucket::new(3);
        let ahead = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.fulfil(2))
        };
        let first = bucket.fulfil(0);
        let second = bucket.fulfil(1);
        let third = ahead.join().unwrap();
        for r in [first, second, third] {
            assert!(r.is_some(), "a first fulfil reported a repeat");
        }
        assert_eq!(bucket.completed.load(Ordering::Relaxed), 1);
        for o in 0..3 {
            assert!(bucket.counts.is_fulfilled(0, o), "iteration {o} lost");
        }
    });
}

/// Both threads fulfil the same iteration 1 (ahead of the watermark) while
/// one of them also fulfils iteration 0: exactly one of the two fulfils of
/// 1 counts, the other reports a repeat, and the bucket completes once.
#[test]
fn a_repeated_fulfil_counts_once() {
    model(|| {
        let bucket = Bucket::new(2);
        let twin = {
            let bucket = bucket.clone();
            thread::spawn(move || bucket.counts.fulfill(0, 1, 2))
        };
        let one = bucket.counts.fulfill(0, 1, 2);
        let zero = bucket.counts.fulfill(0, 0, 2);
        let twin = twin.join().unwrap();
        assert_eq!(
            [one, twin].iter().filter(|r| r.is_none()).count(),
            1,
            "a repeated fulfil of iteration 1 counted twice, or not at all: {one:?} {twin:?}"
        );
        let completions = [one, twin, zero]
            .iter()
            .filter(|r| **r == Some(true))
            .count();
        assert_eq!(completions, 1);
        assert!(bucket.counts.is_fulfilled(0, 0) && bucket.counts.is_fulfilled(0, 1));
    });
}
