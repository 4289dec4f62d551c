//! A graph every rank builds whole, each node annotated with the rank that
//! runs it, split by rank when first run: each rank keeps its own nodes,
//! and each edge from a node of one rank to nodes of another becomes a
//! send after the producer there and a receive before the consumers here.
//! No graph is exchanged at run time: every rank derives the same split
//! from the same graph (checked once, by comparing a hash of its shape
//! over all ranks).
//!
//! A node's value is a `Vec<T>`: its closure gets its predecessors'
//! values (in the order its edges were added) and returns its own. A
//! transfer is two messages: the value's length, then the value (a length
//! of `u64::MAX` says the producer failed or was skipped in this run, so
//! the consumers fail too instead of waiting forever). Transfer `t` uses
//! the tags `tag_ub - 2t` and `tag_ub - 2t - 1`, from the top of the tag
//! space down.

use super::link::Link;
use super::{Cluster, Element, MpiError, Reduce};
use crate::core::pool::current_registry;
use crate::core::sync::{lock, Mutex};
use crate::graph::build::Graph;
use crate::graph::chain::{ChainDone, ChainRest, StreamWork};
use crate::graph::data::NodeWork;
use crate::graph::error::GraphError;
use crate::graph::ids::Node;
use std::any::Any;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// A node's closure: its predecessors' values in, its value out.
type Body<'g, T> = Box<dyn FnMut(&[&[T]]) -> Vec<T> + Send + 'g>;

/// Each node's latest value on this rank: its own nodes', and those
/// received from other ranks. Shared (`Arc`), so that a node takes its
/// inputs under each lock for a moment and runs with none held.
type Values<T> = Arc<Vec<Mutex<Arc<Vec<T>>>>>;

/// Says "the producer failed" in place of a length.
const FAILED: u64 = u64::MAX;

/// A graph of nodes spread over the ranks of a [`Cluster`], built the same
/// on every rank and run by all of them together: each rank runs its own
/// nodes, and the values that cross ranks travel as messages, as the
/// edges order them. Built once, run many times (the split is made on the
/// first run).
///
/// Every rank calls [`run`](RankGraph::run) the same number of times,
/// whatever a run returned: a rank that stops early leaves the others
/// waiting for its messages. Run it on the cluster's runtime. Its
/// messages use the highest tags, two per value that crosses ranks
/// (`tag_ub()` down): keep other messages on the cluster below those, and
/// run one `RankGraph` at a time. A node that panics (or is skipped) sends
/// that in place of its value, so what needs it on other ranks fails too;
/// an MPI error on a send, which the receiving rank cannot learn of, is
/// not covered.
///
/// ```no_run
/// use selvedge::mpi::{Cluster, RankGraph};
///
/// // Under `mpirun -n 2`: every rank runs this same code.
/// let cluster = Cluster::start()?;
/// let mut g = RankGraph::<f64>::new(&cluster);
/// let load = g.node(0, |_| vec![1.0, 2.0, 3.0]); // runs on rank 0
/// let scale = g.node(1, |inputs| inputs[0].iter().map(|x| 10.0 * x).collect()); // rank 1
/// let total = g.node(0, |inputs| vec![inputs[0].iter().sum()]); // back on rank 0
/// g.precede(load, scale); // a message from rank 0 to rank 1
/// g.precede(scale, total); // and back
/// for _ in 0..3 {
///     // Every rank runs every step, whatever the step returned here.
///     if let Err(e) = g.run() {
///         eprintln!("rank {}: {e}", cluster.rank());
///     }
/// }
/// if cluster.rank() == 0 {
///     assert_eq!(g.value(total), Some(vec![60.0]));
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct RankGraph<'g, T: Element> {
    cluster: Cluster,
    nodes: Vec<Spec<'g, T>>,
    /// Every edge, producer first, in the order added.
    edges: Vec<(usize, usize)>,
    /// This rank's part, made by the first run.
    local: Option<Graph<'g>>,
    values: Option<Values<T>>,
}

/// A node as every rank knows it.
struct Spec<'g, T> {
    rank: usize,
    name: Cow<'static, str>,
    /// Taken by the split (on the node's own rank).
    body: Option<Body<'g, T>>,
}

/// A node of a [`RankGraph`]: a copyable name for it, to add edges with.
///
/// ```no_run
/// # let cluster = selvedge::mpi::Cluster::start()?;
/// let mut g = selvedge::mpi::RankGraph::<u32>::new(&cluster);
/// let a = g.node(0, |_| vec![1]);
/// assert_eq!(a.index(), 0);
/// # Ok::<(), selvedge::mpi::MpiError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct RankNode(usize);

impl RankNode {
    /// The node's position: the nodes are numbered from 0 in the order
    /// they were added.
    ///
    /// ```no_run
    /// // Under `mpirun -n 2`: every rank builds the same graph.
    /// let cluster = selvedge::mpi::Cluster::start()?;
    /// let mut g = selvedge::mpi::RankGraph::<u32>::new(&cluster);
    /// let first = g.node(0, |_| vec![1]);
    /// let second = g.node(1, |inputs| inputs[0].to_vec());
    /// assert_eq!((first.index(), second.index()), (0, 1));
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn index(self) -> usize {
        self.0
    }
}

impl<'g, T: Element> RankGraph<'g, T> {
    /// An empty graph over `cluster`'s ranks.
    ///
    /// ```no_run
    /// # let cluster = selvedge::mpi::Cluster::start()?;
    /// let g = selvedge::mpi::RankGraph::<f32>::new(&cluster);
    /// # drop(g);
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn new(cluster: &Cluster) -> Self {
        Self {
            cluster: cluster.clone(),
            nodes: Vec::new(),
            edges: Vec::new(),
            local: None,
            values: None,
        }
    }

    /// Adds a node that rank `rank` runs, once per run, after every node
    /// that precedes it: `f` gets the values of its predecessors (in the
    /// order their edges were added) and returns its own value. The other
    /// ranks never call `f` (they may pass a closure that does nothing of
    /// note, but must add the node: every rank builds the same graph).
    ///
    /// # Panics
    /// If `rank` is not a rank of the cluster, or the graph already ran
    /// (its split is made).
    ///
    /// ```no_run
    /// # let cluster = selvedge::mpi::Cluster::start()?;
    /// let mut g = selvedge::mpi::RankGraph::<i64>::new(&cluster);
    /// let n = g.node(0, |_| vec![42]);
    /// # let _ = n;
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn node<F>(&mut self, rank: usize, f: F) -> RankNode
    where
        F: FnMut(&[&[T]]) -> Vec<T> + Send + 'g,
    {
        let index = self.nodes.len();
        self.node_named(format!("node {index}"), rank, f)
    }

    /// [`RankGraph::node`] with a name, which reports use.
    ///
    /// ```no_run
    /// # let cluster = selvedge::mpi::Cluster::start()?;
    /// let mut g = selvedge::mpi::RankGraph::<i64>::new(&cluster);
    /// g.node_named("load", 0, |_| vec![1]);
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn node_named<F>(
        &mut self,
        name: impl Into<Cow<'static, str>>,
        rank: usize,
        f: F,
    ) -> RankNode
    where
        F: FnMut(&[&[T]]) -> Vec<T> + Send + 'g,
    {
        self.check_unsplit("node");
        assert!(
            rank < self.cluster.size(),
            "selvedge::mpi: RankGraph::node on rank {rank}, but the cluster has {} ranks (0..{})",
            self.cluster.size(),
            self.cluster.size()
        );
        self.nodes.push(Spec {
            rank,
            name: name.into(),
            body: Some(Box::new(f)),
        });
        RankNode(self.nodes.len() - 1)
    }

    /// Says that `before` runs before `after`, which gets `before`'s value:
    /// the same verb as [`Graph::precede`](crate::Graph::precede).
    ///
    /// # Panics
    /// If either node is not this graph's, or the graph already ran.
    ///
    /// ```no_run
    /// # let cluster = selvedge::mpi::Cluster::start()?;
    /// let mut g = selvedge::mpi::RankGraph::<u8>::new(&cluster);
    /// let a = g.node(0, |_| vec![1]);
    /// let b = g.node(0, |inputs| inputs[0].to_vec());
    /// g.precede(a, b);
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn precede(&mut self, before: RankNode, after: RankNode) {
        self.check_unsplit("precede");
        for node in [before, after] {
            assert!(
                node.0 < self.nodes.len(),
                "selvedge::mpi: RankGraph::precede with node {}, but the graph has {} nodes",
                node.0,
                self.nodes.len()
            );
        }
        self.edges.push((before.0, after.0));
    }

    /// Runs the graph once on every rank: call it on every rank, in the
    /// same order as the cluster's collectives. Returns when this rank's
    /// nodes, and the messages they send, are done.
    ///
    /// # Errors
    /// [`GraphError::Cycle`] when the whole graph has a cycle (on every
    /// rank; nothing runs), else what [`Graph::run`] reports for this
    /// rank's part: nodes that panicked and the nodes skipped after them. A node whose value
    /// comes from a node of another rank that failed or was skipped fails
    /// too (its receive panics, naming the producer and its rank), so a
    /// failure on one rank skips what depends on it on every rank.
    ///
    /// # Panics
    /// On the first run, if the ranks did not all build the same graph
    /// (the same nodes on the same ranks, the same edges); if called
    /// on a runtime other than the cluster's, or once the cluster's
    /// runtime was dropped.
    ///
    /// ```no_run
    /// use selvedge::mpi::{Cluster, RankGraph};
    ///
    /// // Under `mpirun -n 2`: every rank builds and runs the same graph.
    /// let cluster = Cluster::start()?;
    /// let mut g = RankGraph::<u64>::new(&cluster);
    /// let count = g.node(0, |_| vec![1, 2, 3]);
    /// let sum = g.node(1, |inputs| vec![inputs[0].iter().sum()]);
    /// g.precede(count, sum);
    /// for _ in 0..10 {
    ///     g.run()?; // one step on every rank; the plan is made by the first
    /// }
    /// if cluster.rank() == 1 {
    ///     assert_eq!(g.value(sum), Some(vec![6]));
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run(&mut self) -> Result<(), GraphError> {
        assert!(
            !self.cluster.link().registry().is_shut_down_for_caller(),
            "selvedge::mpi: RankGraph::run after the cluster's runtime was dropped: its messages' completions need that runtime's workers; drop the graph and the cluster before the runtime"
        );
        assert!(
            Arc::ptr_eq(current_registry(), self.cluster.link().registry()),
            "selvedge::mpi: RankGraph::run on a runtime other than its cluster's: the messages' completions run on the cluster's runtime; run the graph there (inside its Runtime::run, or from outside every runtime for the global one)"
        );
        if self.local.is_none() {
            // The same on every rank, in this order: the shapes compared
            // first (a collective every rank reaches), then the cycle.
            self.check_same_everywhere();
            self.check_acyclic()?;
            self.split();
        }
        self.local.as_mut().expect("split above").run()
    }

    /// Node `node`'s value from the latest run, on the rank that runs it
    /// or a rank it sent it to; `None` elsewhere or before the first run.
    ///
    /// ```no_run
    /// # let cluster = selvedge::mpi::Cluster::start()?;
    /// let mut g = selvedge::mpi::RankGraph::<u8>::new(&cluster);
    /// let a = g.node(0, |_| vec![7]);
    /// g.run()?;
    /// if cluster.rank() == 0 {
    ///     assert_eq!(g.value(a), Some(vec![7]));
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn value(&self, node: RankNode) -> Option<Vec<T>> {
        let values = self.values.as_ref()?;
        let here = self.cluster.rank();
        let reaches_here = self.nodes.get(node.0)?.rank == here
            || self
                .edges
                .iter()
                .any(|&(from, to)| from == node.0 && self.nodes[to].rank == here);
        reaches_here.then(|| lock(&values[node.0]).to_vec())
    }

    fn check_unsplit(&self, what: &str) {
        assert!(
            self.local.is_none(),
            "selvedge::mpi: RankGraph::{what} after the graph's first run: its split by rank is made then, on every rank; build the whole graph first"
        );
    }

    /// A cycle through several ranks is no rank's part's cycle: the whole
    /// graph is checked (the same on every rank), with a stand-in of empty
    /// nodes of the same names and edges.
    fn check_acyclic(&self) -> Result<(), GraphError> {
        let mut shape = Graph::new();
        let nodes: Vec<Node> = self
            .nodes
            .iter()
            .map(|spec| shape.node_named(spec.name.clone(), || {}))
            .collect();
        for &(from, to) in &self.edges {
            shape.precede(nodes[from], nodes[to]);
        }
        shape.check()
    }

    /// Makes this rank's part of the graph.
    fn split(&mut self) {
        let here = self.cluster.rank();
        let values: Values<T> = Arc::new(
            self.nodes
                .iter()
                .map(|_| Mutex::new(Arc::new(Vec::new())))
                .collect(),
        );
        // The transfers: one per producer and consumer rank, in the order
        // of their first edge (the same on every rank).
        let mut transfers: Vec<(usize, usize)> = Vec::new();
        for &(from, to) in &self.edges {
            let (a, b) = (self.nodes[from].rank, self.nodes[to].rank);
            if a != b && !transfers.contains(&(from, b)) {
                transfers.push((from, b));
            }
        }
        let tag_ub = self.cluster.tag_ub() as usize;
        assert!(
            2 * transfers.len() <= tag_ub,
            "selvedge::mpi: a RankGraph with {} transfers between ranks needs {} tags; this MPI library allows {tag_ub}",
            transfers.len(),
            2 * transfers.len()
        );
        let mut local = Graph::new();
        // This rank's nodes.
        let mut ran_here: HashMap<usize, Node> = HashMap::new();
        for (index, spec) in self.nodes.iter_mut().enumerate() {
            if spec.rank != here {
                continue;
            }
            let inputs: Vec<usize> = self
                .edges
                .iter()
                .filter(|&&(_, to)| to == index)
                .map(|&(from, _)| from)
                .collect();
            let mut body = spec.body.take().expect("split once");
            let values = Arc::clone(&values);
            let node = local.node_named(spec.name.clone(), move || {
                let taken: Vec<Arc<Vec<T>>> = inputs
                    .iter()
                    .map(|&i| Arc::clone(&lock(&values[i])))
                    .collect();
                let slices: Vec<&[T]> = taken.iter().map(|v| v.as_slice()).collect();
                let out = body(&slices);
                *lock(&values[index]) = Arc::new(out);
            });
            ran_here.insert(index, node);
        }
        let mut received: HashMap<(usize, usize), Node> = HashMap::new();
        for (t, &(from, dest)) in transfers.iter().enumerate() {
            let tag = (tag_ub - 2 * t) as i32;
            let source = self.nodes[from].rank;
            let producer = self.nodes[from].name.clone();
            if source == here {
                let send = local.add(
                    Some(format!("send {producer} to rank {dest}").into()),
                    Box::new(SendValue {
                        link: self.cluster.link().clone(),
                        values: Arc::clone(&values),
                        node: from,
                        dest,
                        tag,
                    }),
                );
                local.precede(ran_here[&from], send);
            } else if dest == here {
                let receive = local.add(
                    Some(format!("receive {producer} from rank {source}").into()),
                    Box::new(ReceiveValue {
                        link: self.cluster.link().clone(),
                        values: Arc::clone(&values),
                        node: from,
                        producer,
                        source,
                        tag,
                    }),
                );
                received.insert((from, dest), receive);
            }
        }
        // The edges into this rank's nodes: from a node here, or from the
        // receive of a node elsewhere.
        for &(from, to) in &self.edges {
            if self.nodes[to].rank != here {
                continue;
            }
            let before = if self.nodes[from].rank == here {
                ran_here[&from]
            } else {
                received[&(from, here)]
            };
            local.precede(before, ran_here[&to]);
        }
        self.values = Some(values);
        self.local = Some(local);
    }

    /// Panics unless every rank built a graph of the same shape.
    fn check_same_everywhere(&self) {
        // FNV-1a over the ranks of the nodes and the edges.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let mut mix = |x: u64| {
            for byte in x.to_le_bytes() {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x100_0000_01b3);
            }
        };
        mix(self.nodes.len() as u64);
        for spec in &self.nodes {
            mix(spec.rank as u64);
        }
        for &(from, to) in &self.edges {
            mix(from as u64);
            mix(to as u64);
        }
        let low = self.cluster.iallreduce(vec![hash], Reduce::Min);
        let high = self.cluster.iallreduce(vec![hash], Reduce::Max);
        let (low, high) = (
            low.join()
                .expect("comparing the graph's shape over the ranks"),
            high.join()
                .expect("comparing the graph's shape over the ranks"),
        );
        assert!(
            low == high,
            "selvedge::mpi: the ranks built different graphs (their shapes differ: nodes, their ranks or edges); every rank must build the same RankGraph"
        );
    }
}

/// Sends a node's value to a rank that uses it: a node that completes
/// when MPI is done with the value (a stream node of its own, so no worker
/// waits for it); skipped (the producer failed), it sends the failure
/// instead, and the run does not wait for that.
struct SendValue<T> {
    link: Link,
    values: Values<T>,
    node: usize,
    dest: usize,
    tag: i32,
}

impl<T: Element> NodeWork for SendValue<T> {
    fn run(&mut self) {
        unreachable!("a send node is started as a stream node")
    }

    fn skipped(&mut self) {
        let dest = self.dest;
        self.link.isend_then(vec![FAILED], dest, self.tag, |_| ());
    }

    fn as_stream(&mut self) -> Option<&mut dyn StreamWork> {
        Some(self)
    }
}

impl<T: Element> StreamWork for SendValue<T> {
    fn chain_key(&self) -> usize {
        // Its own: never chained with another node.
        std::ptr::from_ref(self) as usize
    }

    fn forget_chain(&mut self) {}

    fn start_chain(&mut self, _rest: ChainRest<'_>, done: ChainDone) {
        let value = lock(&self.values[self.node]).to_vec();
        let (dest, tag) = (self.dest, self.tag);
        // The length and the value go out together (the receiver takes the
        // value once it knows the length); the node completes when MPI is
        // done with both, or fails with the first that failed.
        let both = Arc::new(BothSent {
            state: Mutex::new((Some(done), 2)),
        });
        // The value first: a value MPI cannot take (its length beyond a
        // count) panics here before any message left, and the done, dropped
        // in the unwinding, leaves the report to the panic.
        let value_len = value.len() as u64;
        let value_sent = Arc::clone(&both);
        self.link.isend_then(value, dest, tag - 1, move |sent| {
            value_sent.one_ended(sent.map(drop), dest)
        });
        self.link
            .isend_then(vec![value_len], dest, tag, move |sent| {
                both.one_ended(sent.map(drop), dest)
            });
    }

    fn enqueue(&mut self, _on: &dyn Any) -> Result<(), Box<dyn Any + Send>> {
        unreachable!("a send node is a chain of one")
    }
}

/// A send node's two messages (the length, then the value): its
/// `ChainDone`, taken by the first failure or by the last to end, and how
/// many have not ended.
struct BothSent {
    state: Mutex<(Option<ChainDone>, u8)>,
}

impl BothSent {
    /// One of the two messages ended (on a worker, from its completion).
    fn one_ended(&self, sent: Result<(), MpiError>, dest: usize) {
        let done = {
            let mut state = lock(&self.state);
            state.1 -= 1;
            if sent.is_err() || state.1 == 0 {
                state.0.take()
            } else {
                None
            }
        };
        // Called with the lock released: completing queues the nodes after.
        match (done, sent) {
            (Some(done), Err(e)) => done.fail(
                0,
                Box::new(format!("selvedge::mpi: sending to rank {dest} failed: {e}")),
            ),
            (Some(done), Ok(())) => done.complete(),
            (None, _) => {}
        }
    }
}

/// Receives a node's value from the rank that runs it: a node that
/// completes when the value arrived (a stream node of its own: no worker
/// waits for the message).
struct ReceiveValue<T> {
    link: Link,
    values: Values<T>,
    node: usize,
    producer: Cow<'static, str>,
    source: usize,
    tag: i32,
}

impl<T: Element> NodeWork for ReceiveValue<T> {
    fn run(&mut self) {
        unreachable!("a receive node is started as a stream node")
    }

    fn as_stream(&mut self) -> Option<&mut dyn StreamWork> {
        Some(self)
    }
}

impl<T: Element> StreamWork for ReceiveValue<T> {
    fn chain_key(&self) -> usize {
        // Its own: never chained with another node.
        std::ptr::from_ref(self) as usize
    }

    fn forget_chain(&mut self) {}

    fn start_chain(&mut self, _rest: ChainRest<'_>, done: ChainDone) {
        let (source, tag, node) = (self.source, self.tag, self.node);
        let producer = self.producer.clone();
        let values = Arc::clone(&self.values);
        let link = self.link.clone();
        let failed = move |why: String| -> Box<dyn Any + Send> {
            Box::new(format!(
                "selvedge::mpi: {producer}'s value from rank {source}: {why}"
            ))
        };
        self.link
            .irecv_then::<u64>(1, source, tag, move |header| match header {
                Err(e) => done.fail(0, failed(format!("receiving it failed: {e}"))),
                Ok(len) if len[0] == FAILED => done.fail(
                    0,
                    failed(
                        "its node failed or was skipped there in this run, so it did not come"
                            .into(),
                    ),
                ),
                Ok(len) => {
                    link.irecv_then::<T>(len[0] as usize, source, tag - 1, move |body| match body {
                        Err(e) => done.fail(0, failed(format!("receiving it failed: {e}"))),
                        Ok(value) => {
                            *lock(&values[node]) = Arc::new(value);
                            done.complete();
                        }
                    })
                }
            });
    }

    fn enqueue(&mut self, _on: &dyn Any) -> Result<(), Box<dyn Any + Send>> {
        unreachable!("a receive node is a chain of one")
    }
}
