//! Nodes whose work goes onto an ordered stream (a GPU's) and completes
//! later, and the chains they form.
//!
//! Such a node does not finish when its closure returns: its closure only
//! enqueues work, which the stream runs later. Nodes of one stream kind
//! (one device) linked one to one (the first's only successor is the
//! second, whose only predecessor is the first) form a chain, run as one:
//! the worker that readies the chain's head hands the whole chain to the
//! head's [`StreamWork::start_chain`], which enqueues the work of every
//! node of the chain in order (a GPU node captures it into a CUDA graph
//! once and replays that) and arranges for [`ChainDone`] to be completed
//! once the stream finished it. Until then the run's latch holds a count
//! for the chain, so the run does not end; completing the chain counts
//! down the tail's successors, as a finished node does, and queues those
//! it readied on the worker that completes it.
//!
//! The links are the graph's own edges: a chain's head readies its next
//! node in the plan, so a skipped head skips the chain by the usual walk.
//! Nothing else touches a chain's nodes in a run: each but the head has
//! the node before it as its only predecessor, and that node counts it
//! down only when the chain is completed or failed.

use crate::core::worker::Worker;
use std::any::Any;
use std::marker::PhantomData;

/// What enqueueing a stream node's work gives: an `Err` is the node's
/// failure, with the payload its report shows.
pub(crate) type Enqueued = Result<(), Box<dyn Any + Send>>;

/// What a chain's [`ChainRest`] and [`ChainDone`] do to the run that
/// started it: the functions of `replay.rs`'s `Run`, called on the run's
/// address: pointers to them, not the type, so that this file, which the
/// run's file imports (the run starts chains), imports nothing back.
pub(crate) struct RunOps {
    /// Enqueues the work of node `index`, a stream node whose work the
    /// caller owns, on `on`.
    pub(crate) enqueue: unsafe fn(*const (), index: u32, on: &dyn Any) -> Enqueued,
    /// Whether `w` is a worker of the run's runtime.
    pub(crate) is_runtime_of: unsafe fn(*const (), w: &Worker) -> bool,
    /// `Run::complete_chain`.
    pub(crate) complete_chain: unsafe fn(*const (), &Worker, u32),
    /// `Run::fail_chain`.
    pub(crate) fail_chain: unsafe fn(*const (), u32, usize, Option<Box<dyn Any + Send>>),
}

/// The node's work, when it goes onto a stream (see the module docs).
/// (Only GPU nodes are stream nodes: without the `cuda` feature, nothing
/// starts a chain.)
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) trait StreamWork: Send {
    /// Nodes of equal keys (a device), linked one to one, run as one
    /// chain.
    fn chain_key(&self) -> usize;

    /// The graph changed: the chain this node headed may not be the same,
    /// so whatever was recorded of it goes.
    fn forget_chain(&mut self);

    /// Starts this node's chain (this node is its head) for one run: the
    /// work of the head and then of each node of `rest`, in order. Either
    /// completes `done` once the stream finished that work, or fails it,
    /// now or later; `done` dropped unused fails the chain too. Must not
    /// touch `rest` once `done` is handed over: the completion may come at
    /// once, on another worker.
    fn start_chain(&mut self, rest: ChainRest<'_>, done: ChainDone);

    /// Enqueues this node's work on the stream its head passes (`on`),
    /// while the head starts the chain. An `Err` is the node's failure,
    /// with the payload its report shows.
    fn enqueue(&mut self, on: &dyn Any) -> Result<(), Box<dyn Any + Send>>;
}

/// The nodes of a chain after its head, for [`StreamWork::start_chain`].
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct ChainRest<'a> {
    run: *const (),
    ops: &'static RunOps,
    members: &'a [u32],
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
impl<'a> ChainRest<'a> {
    /// # Safety
    /// `run` is the live run, with functions `ops`, whose task started the
    /// chain `members` (its nodes after the head), and the caller owns
    /// those nodes' work for the length of the borrow.
    pub(crate) unsafe fn new(run: *const (), ops: &'static RunOps, members: &'a [u32]) -> Self {
        Self { run, ops, members }
    }

    /// How many nodes follow the head.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// Enqueues the work of the `i`th node after the head on `on`.
    pub(crate) fn enqueue(&mut self, i: usize, on: &dyn Any) -> Result<(), Box<dyn Any + Send>> {
        // SAFETY: the run is live, and the chain's nodes are the caller's
        // for the borrow (`ChainRest::new`): nothing else touches the work.
        unsafe { (self.ops.enqueue)(self.run, self.members[i], on) }
    }
}

/// The end of a chain's run: completed once the stream finished the
/// chain's work, or failed. Holds one count of the run's latch until then;
/// dropped unused, it fails the chain ("its completion never came"), which
/// is what a device that lost its context does to it.
pub(crate) struct ChainDone {
    run: *const (),
    ops: &'static RunOps,
    /// The chain's index in the plan.
    chain: u32,
    /// Not `Sync`: it is used once, by value.
    _once: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: the run it points to is shared between the run's threads (its
// fields are atomics, a mutex and pointers to the graph, which a run
// borrows for its length), and its count keeps the run alive; the chain's
// nodes it settles are the chain's alone until it is used.
unsafe impl Send for ChainDone {}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
impl ChainDone {
    /// # Safety
    /// `run` is live, with functions `ops`, and the caller added one count
    /// to its latch for this value; `chain` is the index of a chain of its
    /// plan whose head's task the caller owns and whose other nodes are not
    /// readied otherwise.
    pub(crate) unsafe fn new(run: *const (), ops: &'static RunOps, chain: u32) -> Self {
        Self {
            run,
            ops,
            chain,
            _once: PhantomData,
        }
    }

    /// The stream finished the chain's work: its successors are counted
    /// down and those readied are queued on this worker. Call
    /// it on a worker of the run's runtime (a GPU completion runs on one);
    /// elsewhere the chain fails instead, saying so.
    pub(crate) fn complete(self) {
        let this = std::mem::ManuallyDrop::new(self);
        let run = this.run;
        // SAFETY: this value's count keeps the run alive until it is used,
        // here, once.
        let on_runtime = Worker::current().filter(|w| unsafe { (this.ops.is_runtime_of)(run, w) });
        match on_runtime {
            Some(w) => {
                // SAFETY: as above; the chain's nodes are this value's.
                unsafe { (this.ops.complete_chain)(run, w, this.chain) }
            }
            None => {
                let payload: Box<dyn Any + Send> = Box::new(
                    "selvedge: a chain of stream nodes was completed off the workers of its graph's runtime",
                );
                // SAFETY: as above.
                unsafe { (this.ops.fail_chain)(run, this.chain, 0, Some(payload)) }
            }
        }
    }

    /// The chain failed: the node `at` (0 is the head) is reported with
    /// `payload`, the chain's other nodes and every node after it are
    /// skipped. Any thread may call it.
    pub(crate) fn fail(self, at: usize, payload: Box<dyn Any + Send>) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: this value's count keeps the run alive until it is used,
        // here, once.
        unsafe { (this.ops.fail_chain)(this.run, this.chain, at, Some(payload)) }
    }
}

impl Drop for ChainDone {
    fn drop(&mut self) {
        // Dropped while a panic unwinds out of the head's `start_chain`:
        // the head's task reports that panic as the head's.
        let payload: Option<Box<dyn Any + Send>> = (!std::thread::panicking()).then(|| {
            Box::new(
                "selvedge: the work of a chain of stream nodes never completed (its device failed while it was in flight)",
            ) as Box<dyn Any + Send>
        });
        // SAFETY: as in `fail`; dropped means unused.
        unsafe { (self.ops.fail_chain)(self.run, self.chain, 0, payload) }
    }
}

/// Where the chains are, from the graph's edges: which stream nodes run as
/// one, head first. `keys[i]` is node i's [`StreamWork::chain_key`], if it
/// is a stream node; `successors[first[i]..first[i + 1]]` its successors;
/// `predecessors[i]` how many it has.
pub(crate) fn find_chains(
    keys: &[Option<usize>],
    first: &[u32],
    successors: &[u32],
    predecessors: &[u32],
) -> Vec<Vec<u32>> {
    // The node each stream node hands its chain on to, if any.
    let next = |i: usize| -> Option<u32> {
        let key = keys[i]?;
        let out = &successors[first[i] as usize..first[i + 1] as usize];
        match *out {
            [s] if keys[s as usize] == Some(key) && predecessors[s as usize] == 1 => Some(s),
            _ => None,
        }
    };
    let mut linked_to = vec![false; keys.len()];
    for i in 0..keys.len() {
        if let Some(s) = next(i) {
            linked_to[s as usize] = true;
        }
    }
    let mut chains = Vec::new();
    for head in 0..keys.len() {
        if keys[head].is_none() || linked_to[head] {
            continue;
        }
        let mut chain = vec![head as u32];
        let mut at = head;
        while let Some(s) = next(at) {
            chain.push(s);
            at = s as usize;
        }
        chains.push(chain);
    }
    chains
}

/// Chains on a fake stream: a head records its chain's work once, and a
/// thread of its own plays the "device", completing (or dropping) the
/// chain's `ChainDone` later, through a signal as a GPU callback does.
#[cfg(test)]
mod tests {
    use super::{find_chains, ChainDone, ChainRest, StreamWork};
    use crate::core::registry::{fire_signal, Registry};
    use crate::core::worker::Worker;
    use crate::graph::data::NodeWork;
    use crate::{Graph, GraphError, Runtime};
    use std::any::Any;
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// What the fake device ran, in order, and how many times each node's
    /// work was recorded.
    #[derive(Default)]
    struct Device {
        ran: Mutex<Vec<&'static str>>,
        recorded: AtomicUsize,
        /// The device drops the chains' completions instead of completing
        /// them (a lost context).
        lost: AtomicBool,
    }

    /// A stream node of the fake device.
    struct FakeNode {
        name: &'static str,
        device: Arc<Device>,
        /// Its recording fails while this is set.
        fail: Arc<AtomicBool>,
        /// The chain's work, as recorded when this node headed it.
        recorded: Option<Vec<&'static str>>,
        /// Its `start_chain` panics (a bug in a stream node's code).
        panics: bool,
    }

    impl NodeWork for FakeNode {
        fn run(&mut self) {
            unreachable!("a stream node is started with its chain")
        }
        fn as_stream(&mut self) -> Option<&mut dyn StreamWork> {
            Some(self)
        }
    }

    impl StreamWork for FakeNode {
        fn chain_key(&self) -> usize {
            Arc::as_ptr(&self.device) as usize
        }
        fn forget_chain(&mut self) {
            self.recorded = None;
        }
        fn start_chain(&mut self, mut rest: ChainRest<'_>, done: ChainDone) {
            if self.panics {
                let _done = done;
                panic!("{} broke while starting its chain", self.name);
            }
            if self.recorded.is_none() {
                let on = RefCell::new(Vec::new());
                if let Err(payload) = self.enqueue(&on) {
                    return done.fail(0, payload);
                }
                for i in 0..rest.len() {
                    if let Err(payload) = rest.enqueue(i, &on) {
                        return done.fail(i + 1, payload);
                    }
                }
                self.recorded = Some(on.into_inner());
            }
            let work = self.recorded.clone().unwrap();
            let device = Arc::clone(&self.device);
            let registry: Arc<Registry> = Arc::clone(&Worker::current().unwrap().shared);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(300));
                device.ran.lock().unwrap().extend(work);
                if device.lost.load(Relaxed) {
                    drop(done);
                } else {
                    let signal = registry.signal(Box::new(move || done.complete()));
                    // SAFETY: fired once; the test's runtime outlives the
                    // run, which waits for this completion.
                    unsafe { fire_signal(signal) };
                }
            });
        }
        fn enqueue(&mut self, on: &dyn Any) -> Result<(), Box<dyn Any + Send>> {
            if self.fail.load(Relaxed) {
                return Err(Box::new(format!("{} could not be recorded", self.name)));
            }
            self.device.recorded.fetch_add(1, Relaxed);
            on.downcast_ref::<RefCell<Vec<&'static str>>>()
                .unwrap()
                .borrow_mut()
                .push(self.name);
            Ok(())
        }
    }

    fn fake<'g>(
        g: &mut Graph<'g>,
        name: &'static str,
        device: &Arc<Device>,
        fail: &Arc<AtomicBool>,
    ) -> crate::Node {
        g.add(
            Some(name.into()),
            Box::new(FakeNode {
                name,
                device: Arc::clone(device),
                fail: Arc::clone(fail),
                recorded: None,
                panics: false,
            }),
        )
    }

    /// cpu -> s1 -> s2 -> s3 -> after, and a CPU node `after` logs what
    /// the device ran by then.
    fn line_graph<'g>(
        device: &Arc<Device>,
        fail: &Arc<AtomicBool>,
        seen: &'g Mutex<Vec<Vec<&'static str>>>,
    ) -> Graph<'g> {
        let mut g = Graph::new();
        let cpu = g.node_named("cpu", || {});
        let s1 = fake(&mut g, "s1", device, fail);
        let s2 = fake(&mut g, "s2", device, fail);
        let s3 = fake(&mut g, "s3", device, fail);
        let log = Arc::clone(device);
        let after = g.node_named("after", move || {
            seen.lock().unwrap().push(log.ran.lock().unwrap().clone());
        });
        g.precede(cpu, s1);
        g.precede(s1, s2);
        g.precede(s2, s3);
        g.precede(s3, after);
        g
    }

    #[test]
    fn a_chain_is_recorded_once_and_its_successor_waits_for_its_completion() {
        let rt = Runtime::builder().num_threads(4).build().unwrap();
        let device = Arc::new(Device::default());
        let fail = Arc::new(AtomicBool::new(false));
        let seen = Mutex::new(Vec::new());
        let mut g = line_graph(&device, &fail, &seen);
        for _ in 0..20 {
            rt.run_graph(&mut g).unwrap();
        }
        drop(g);
        // Recorded once (three nodes), run 20 times, and `after` ran only
        // once each run's chain was done.
        assert_eq!(device.recorded.load(Relaxed), 3);
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 20);
        for (run, ran) in seen.iter().enumerate() {
            assert_eq!(ran.len(), 3 * (run + 1), "run {run} saw {ran:?}");
            assert_eq!(&ran[3 * run..], ["s1", "s2", "s3"]);
        }
    }

    #[test]
    fn a_node_that_fails_to_record_fails_its_chain_and_skips_what_follows() {
        let rt = Runtime::builder().num_threads(2).build().unwrap();
        let device = Arc::new(Device::default());
        let fail = Arc::new(AtomicBool::new(true));
        let seen = Mutex::new(Vec::new());
        let mut g = line_graph(&device, &fail, &seen);
        match rt.run_graph(&mut g) {
            Err(GraphError::Failed {
                panicked,
                skipped_names,
                ..
            }) => {
                assert_eq!(panicked.len(), 1);
                assert_eq!(panicked[0].name, "s1");
                assert_eq!(panicked[0].message(), Some("s1 could not be recorded"));
                assert_eq!(skipped_names, ["s2", "s3", "after"]);
            }
            other => panic!("expected the chain to fail, got {other:?}"),
        }
        // The graph stays usable: with the fault gone, the next run records
        // the chain and runs it.
        fail.store(false, Relaxed);
        rt.run_graph(&mut g).unwrap();
        drop(g);
        assert_eq!(seen.into_inner().unwrap(), [vec!["s1", "s2", "s3"]]);
    }

    #[test]
    fn a_panic_starting_a_chain_is_reported_once_at_its_head() {
        let rt = Runtime::builder().num_threads(2).build().unwrap();
        let device = Arc::new(Device::default());
        let fail = Arc::new(AtomicBool::new(false));
        let mut g = Graph::new();
        let head = g.add(
            Some("head".into()),
            Box::new(FakeNode {
                name: "head",
                device: Arc::clone(&device),
                fail: Arc::clone(&fail),
                recorded: None,
                panics: true,
            }),
        );
        let next = fake(&mut g, "next", &device, &fail);
        let after = g.node_named("after", || {});
        g.precede(head, next);
        g.precede(next, after);
        match rt.run_graph(&mut g) {
            Err(GraphError::Failed {
                panicked,
                skipped_names,
                ..
            }) => {
                let reports: Vec<_> = panicked
                    .iter()
                    .map(|p| (p.name.as_str(), p.message()))
                    .collect();
                assert_eq!(
                    reports,
                    [("head", Some("head broke while starting its chain"))]
                );
                assert_eq!(skipped_names, ["next", "after"]);
            }
            other => panic!("expected the chain to fail, got {other:?}"),
        }
    }

    #[test]
    fn a_completion_that_never_comes_fails_the_run_instead_of_hanging_it() {
        let rt = Runtime::builder().num_threads(2).build().unwrap();
        let device = Arc::new(Device::default());
        device.lost.store(true, Relaxed);
        let fail = Arc::new(AtomicBool::new(false));
        let seen = Mutex::new(Vec::new());
        let mut g = line_graph(&device, &fail, &seen);
        match rt.run_graph(&mut g) {
            Err(GraphError::Failed {
                panicked,
                skipped_names,
                ..
            }) => {
                assert_eq!(panicked[0].name, "s1");
                assert!(panicked[0].message().unwrap().contains("never completed"));
                assert_eq!(skipped_names, ["s2", "s3", "after"]);
            }
            other => panic!("expected the chain to fail, got {other:?}"),
        }
        drop(g);
        assert!(seen.into_inner().unwrap().is_empty());
    }

    #[test]
    fn chains_on_forked_branches_run_side_by_side_and_join_many_times() {
        // More threads than cores; each run forks into four chains of two
        // stream nodes (one key each: one device each) and a CPU node,
        // which all join.
        let rt = Runtime::builder().num_threads(6).build().unwrap();
        let fail = Arc::new(AtomicBool::new(false));
        let devices: Vec<Arc<Device>> = (0..4).map(|_| Arc::default()).collect();
        let joined = AtomicUsize::new(0);
        let cpu_ran = AtomicUsize::new(0);
        let mut g = Graph::new();
        let fork = g.node(|| {});
        let join = g.node(|| {
            joined.fetch_add(1, Relaxed);
        });
        let names = [("a1", "a2"), ("b1", "b2"), ("c1", "c2"), ("d1", "d2")];
        for (device, (first, second)) in devices.iter().zip(names) {
            let x = fake(&mut g, first, device, &fail);
            let y = fake(&mut g, second, device, &fail);
            g.precede(fork, x);
            g.precede(x, y);
            g.precede(y, join);
        }
        let cpu = g.node(|| {
            cpu_ran.fetch_add(1, Relaxed);
        });
        g.precede(fork, cpu);
        g.precede(cpu, join);
        let runs = if cfg!(debug_assertions) { 50 } else { 200 };
        for _ in 0..runs {
            rt.run_graph(&mut g).unwrap();
        }
        drop(g);
        assert_eq!(joined.load(Relaxed), runs);
        assert_eq!(cpu_ran.load(Relaxed), runs);
        for (device, (first, second)) in devices.iter().zip(names) {
            assert_eq!(device.recorded.load(Relaxed), 2);
            let ran = device.ran.lock().unwrap();
            assert_eq!(ran.len(), 2 * runs);
            assert!(ran.chunks(2).all(|pair| pair == [first, second]));
        }
    }

    /// A stream node that logs when it is started and when its completion
    /// runs (on a worker, from the signal a thread of its own fires).
    struct Logged {
        log: Arc<Mutex<Vec<String>>>,
    }

    impl NodeWork for Logged {
        fn run(&mut self) {
            unreachable!("a stream node is started with its chain")
        }
        fn as_stream(&mut self) -> Option<&mut dyn StreamWork> {
            Some(self)
        }
    }

    impl StreamWork for Logged {
        fn chain_key(&self) -> usize {
            std::ptr::from_ref(self) as usize
        }
        fn forget_chain(&mut self) {}
        fn start_chain(&mut self, _rest: ChainRest<'_>, done: ChainDone) {
            self.log.lock().unwrap().push("stream started".into());
            let log = Arc::clone(&self.log);
            let registry: Arc<Registry> = Arc::clone(&Worker::current().unwrap().shared);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_micros(300));
                let signal = registry.signal(Box::new(move || {
                    log.lock().unwrap().push("stream completed".into());
                    done.complete();
                }));
                // SAFETY: fired once; the test's runtime outlives the run,
                // which waits for this completion.
                unsafe { fire_signal(signal) };
            });
        }
        fn enqueue(&mut self, _on: &dyn Any) -> Result<(), Box<dyn Any + Send>> {
            unreachable!("a chain of one")
        }
    }

    #[test]
    fn a_stream_node_starts_before_a_line_of_cpu_nodes_and_completes_between_them() {
        // One worker: root -> c0 -> c1 -> ... -> c49 (2 ms each), and
        // root -> stream (its successor edge second). The stream node is
        // started first, and its completion runs between two CPU nodes,
        // not once the line is done (a send after a tile, or a device
        // copy, would otherwise wait for a whole column of tiles).
        let rt = Runtime::builder().num_threads(1).build().unwrap();
        let log = Arc::new(Mutex::new(Vec::<String>::new()));
        let mut g = Graph::new();
        let root = g.node(|| {});
        let mut before = root;
        for i in 0..50 {
            let log = Arc::clone(&log);
            let c = g.node(move || {
                std::thread::sleep(Duration::from_millis(2));
                log.lock().unwrap().push(format!("c{i}"));
            });
            g.precede(before, c);
            before = c;
        }
        let stream = g.add(
            Some("stream".into()),
            Box::new(Logged {
                log: Arc::clone(&log),
            }),
        );
        g.precede(root, stream);
        rt.run_graph(&mut g).unwrap();
        drop(g);
        let log = log.lock().unwrap().clone();
        let at = |what: &str| log.iter().position(|l| l == what).unwrap();
        assert_eq!(
            at("stream started"),
            0,
            "the stream node was started after CPU nodes readied with it: {log:?}"
        );
        assert!(
            at("stream completed") < at("c49"),
            "the stream node's completion ran only once the line of CPU nodes was done: {log:?}"
        );
    }

    /// `edges` as the plan lays them out, for `n` nodes.
    fn layout(n: usize, edges: &[(u32, u32)]) -> (Vec<u32>, Box<[u32]>, Vec<u32>) {
        crate::graph::plan::lay_out(n, edges)
    }

    #[test]
    fn stream_nodes_linked_one_to_one_on_one_key_form_a_chain() {
        // 0 (cpu) -> 1 -> 2 -> 3 (key 7) -> 4 (cpu); 5 (key 7) alone.
        let keys = [None, Some(7), Some(7), Some(7), None, Some(7)];
        let (first, successors, preds) = layout(6, &[(0, 1), (1, 2), (2, 3), (3, 4)]);
        assert_eq!(
            find_chains(&keys, &first, &successors, &preds),
            [vec![1, 2, 3], vec![5]]
        );
    }

    #[test]
    fn a_fork_a_join_or_another_key_ends_a_chain() {
        // 0 -> 1 and 0 -> 2 (a fork); 1 -> 3 and 2 -> 3 (a join); 3 -> 4
        // on another key.
        let keys = [Some(1), Some(1), Some(1), Some(1), Some(2)];
        let (first, successors, preds) = layout(5, &[(0, 1), (0, 2), (1, 3), (2, 3), (3, 4)]);
        assert_eq!(
            find_chains(&keys, &first, &successors, &preds),
            [vec![0], vec![1], vec![2], vec![3], vec![4]]
        );
    }
}
