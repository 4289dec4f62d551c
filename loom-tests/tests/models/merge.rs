//! The reduction merge protocol (`selvedge::protocols::{split, deposit}`):
//! parts of a parallel reduction deposit their accumulators into a tree of
//! join nodes from different threads. In every interleaving exactly one
//! deposit must carry the result to the root, the result must be the parts
//! merged in index order, a side must be read only after its writer
//! published it (loom checks the node's cells as data races), and a failed
//! part must poison the result rather than lose it.
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::{deposit, split, Out};

/// An `Out` that may cross to a model thread.
#[derive(Clone, Copy)]
struct Side(Out<Vec<u32>>);
// SAFETY: the protocol under test synchronises every access to the node.
unsafe impl Send for Side {}

fn concat(mut left: Vec<u32>, right: Vec<u32>) -> Option<Vec<u32>> {
    left.extend(right);
    Some(left)
}

/// Deposits `value` at `out`; counts and checks a result that reaches the
/// root.
fn part(out: Side, value: Option<Vec<u32>>, roots: &AtomicUsize, expect: Option<&[u32]>) {
    // SAFETY: each side of the model's tree is deposited by one thread.
    if let Some(result) = unsafe { deposit(out.0, value, concat) } {
        assert_eq!(result.as_deref(), expect, "merged out of index order");
        roots.fetch_add(1, Ordering::SeqCst);
    }
}

/// A loop split twice: the first part keeps [0, 1), gives [1, 3) away,
/// whose part then gives [2, 3) away. Three parts finish on three threads.
fn three_parts(values: [Option<Vec<u32>>; 3], expect: Option<Vec<u32>>) {
    model(move || {
        let (first, rest) = split(Out::ROOT);
        let (second, third) = split(rest);
        let roots = Arc::new(AtomicUsize::new(0));
        let [a, b, c] = values.clone();
        let threads: Vec<_> = [(second, b), (third, c)]
            .into_iter()
            .map(|(out, v)| {
                let (roots, expect) = (roots.clone(), expect.clone());
                let out = Side(out);
                thread::spawn(move || part(out, v, &roots, expect.as_deref()))
            })
            .collect();
        part(Side(first), a, &roots, expect.as_deref());
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(
            roots.load(Ordering::SeqCst),
            1,
            "the root must be reached once"
        );
    });
}

#[test]
fn parts_merge_in_index_order_whoever_finishes_last() {
    three_parts(
        [Some(vec![0]), Some(vec![1]), Some(vec![2])],
        Some(vec![0, 1, 2]),
    );
}

#[test]
fn a_failed_part_poisons_the_result_without_losing_the_root() {
    three_parts([Some(vec![0]), None, Some(vec![2])], None);
}
