//! A graph node's count of unfinished predecessors
//! (`selvedge::protocols::Countdown`), used run after run: predecessors on
//! different threads write their results, then count the node down; a
//! failed one marks it cancelled first. In every interleaving exactly one
//! count-down readies the node, the thread that readies it sees every
//! predecessor's writes and any cancellation mark, and the count and the
//! mark are back as they were for the next run.
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::Countdown;

/// A node with `n` predecessors, each with a cell it writes before it
/// counts the node down.
struct Node {
    countdown: Countdown,
    results: Vec<UnsafeCell<usize>>,
}

// SAFETY: each cell is written by its predecessor's thread and read only by
// the thread that readies the node, which the protocol orders after every
// write (loom checks that ordering).
unsafe impl Sync for Node {}
// SAFETY: as above.
unsafe impl Send for Node {}

impl Node {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Self {
            countdown: Countdown::new(n as u32),
            results: (0..n).map(|_| UnsafeCell::new(0)).collect(),
        })
    }

    /// Predecessor `p` of run `run` finishes (`failed` or not): it writes
    /// its result and counts the node down. The count-down that readies
    /// the node reads every result and settles the node; returns what
    /// `settle` said (whether the node is skipped), if this readied it.
    fn finish(&self, run: usize, p: usize, failed: bool) -> Option<bool> {
        // SAFETY: only predecessor `p` writes this cell in a run.
        self.results[p].with_mut(|r| unsafe { *r = run * 10 + p });
        if !self.countdown.count_down(failed) {
            return None;
        }
        for (q, cell) in self.results.iter().enumerate() {
            // SAFETY: ordered after every predecessor's write (protocol).
            let seen = cell.with(|r| unsafe { *r });
            assert_eq!(
                seen,
                run * 10 + q,
                "run {run}: predecessor {q}'s result unseen"
            );
        }
        Some(self.countdown.settle())
    }
}

/// Runs the node's `n` predecessors once, predecessor 0 on this thread and
/// the others on threads of their own, predecessor `failing` (if any)
/// failed; returns how many count-downs readied the node and what the
/// settle said.
fn one_run(node: &Arc<Node>, run: usize, failing: Option<usize>) -> (usize, Option<bool>) {
    let others: Vec<_> = (1..node.results.len())
        .map(|p| {
            let node = Arc::clone(node);
            thread::spawn(move || node.finish(run, p, failing == Some(p)))
        })
        .collect();
    let mut outcomes = vec![node.finish(run, 0, failing == Some(0))];
    outcomes.extend(others.into_iter().map(|h| h.join().unwrap()));
    let readied: Vec<bool> = outcomes.into_iter().flatten().collect();
    (readied.len(), readied.first().copied())
}

/// Two predecessors on two threads, for two runs: each run, exactly one
/// count-down readies the node, and it sees both results.
#[test]
fn exactly_one_count_down_readies_the_node_and_sees_every_result_run_after_run() {
    model(|| {
        let node = Node::new(2);
        for run in 1..=2 {
            let (readied, skipped) = one_run(&node, run, None);
            assert_eq!(
                readied, 1,
                "run {run}: {readied} count-downs readied the node"
            );
            assert_eq!(skipped, Some(false), "run {run}: the node was skipped");
        }
    });
}

/// A failed predecessor marks the node cancelled: the thread that readies
/// it (perhaps the other predecessor's) sees the mark; the next run, with
/// no failure, finds it cleared.
#[test]
fn a_failed_predecessor_skips_the_node_for_that_run_only() {
    model(|| {
        let node = Node::new(2);
        let (readied, skipped) = one_run(&node, 1, Some(1));
        assert_eq!(readied, 1);
        assert_eq!(
            skipped,
            Some(true),
            "the mark of the failed predecessor was lost"
        );
        let (readied, skipped) = one_run(&node, 2, None);
        assert_eq!(readied, 1);
        assert_eq!(skipped, Some(false), "the mark outlived its run");
    });
}

/// Three predecessors on three threads: the release sequence of the
/// count-downs carries the first one's write to the last.
#[test]
fn the_last_of_three_count_downs_sees_the_first_ones_result() {
    model(|| {
        let node = Node::new(3);
        let (readied, skipped) = one_run(&node, 1, None);
        assert_eq!((readied, skipped), (1, Some(false)));
    });
}
