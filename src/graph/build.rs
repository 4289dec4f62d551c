//! Building a graph: its nodes, their names, and the edges between them.

use crate::core::pool::on_worker;
use crate::core::sync::{AtomicU64, Ordering};
use crate::core::trace::names::SpanName;
use crate::dataflow::access::Accesses;
use crate::graph::data::{declared_by, DataUses, DeclaredNode, NodeWork, Plain};
use crate::graph::error::{GraphError, NodePanic};
use crate::graph::ids::Node;
use crate::graph::plan::{self, Plan};
use crate::graph::replay::{self, Failures, NodeTask, Prepared};
use std::borrow::Cow;
use std::fmt;

/// Tells graphs apart, so that a node used with a graph other than its own
/// is caught. 64 bits: at a graph a nanosecond it would take centuries to
/// wrap and hand out an id twice.
static NEXT_GRAPH_ID: AtomicU64 = AtomicU64::new(1);

/// A graph of tasks, built once and run many times.
///
/// Each node is a closure (`FnMut`, so it may keep state from one run to
/// the next) and each edge says that one node runs before another. A run
/// starts every node whose predecessors all finished, on whichever worker
/// finished the last of them, until every node ran. The dependencies are
/// resolved once, when the graph is first run after a change; a run after
/// that costs a few atomic operations per edge, and one that succeeds
/// allocates nothing when started from a task (from a thread outside the
/// pool, entering it takes a task block, as [`Runtime::run`](crate::Runtime::run)
/// does, which the thread keeps for its next run unless the worker that
/// ran it lets go of it last).
///
/// Nodes may borrow anything that outlives the graph (`'g`), and run
/// anything a task may: [`spawn`](crate::spawn), [`join`](crate::join),
/// parallel loops ([`Graph::node`] shows one), another graph
/// ([`Graph::subgraph`]). With the `cuda` feature, `Graph::gpu_node` adds
/// nodes that enqueue device work, captured into a CUDA graph once and
/// replayed with one launch a run.
///
/// Run a graph with [`Runtime::run_graph`](crate::Runtime::run_graph),
/// [`Runtime::spawn_graph`](crate::Runtime::spawn_graph) (from any
/// thread, returning a handle), or [`Graph::run`] (on the current
/// runtime, in place when called from a task).
///
/// ```
/// use selvedge::{Graph, Runtime};
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// let rt = Runtime::builder().num_threads(2).build()?;
/// let (a, b, sum) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
/// let mut g = Graph::new();
/// let load_a = g.node(|| { a.fetch_add(1, Ordering::Relaxed); });
/// let load_b = g.node(|| { b.fetch_add(2, Ordering::Relaxed); });
/// let add = g.node(|| {
///     let total = a.load(Ordering::Relaxed) + b.load(Ordering::Relaxed);
///     sum.store(total, Ordering::Relaxed);
/// });
/// g.precede(load_a, add);
/// g.precede(load_b, add);
/// for _ in 0..10 {
///     rt.run_graph(&mut g)?; // the same graph, run again
/// }
/// assert_eq!(sum.load(Ordering::Relaxed), 30);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Graph<'g> {
    id: u64,
    /// The nodes, each with its task header, closure and counters, in the
    /// order they were added.
    nodes: Vec<NodeTask<'g>>,
    names: Vec<Option<Cow<'static, str>>>,
    /// Every edge, predecessor first, in the order added.
    edges: Vec<(u32, u32)>,
    /// The resolved dependencies: `None` until the first run and after
    /// every change.
    plan: Option<Plan>,
    /// The `Data` handles the nodes declare, for the edges a new node's
    /// accesses imply and for each run's access to them.
    data: DataUses<'g>,
}

// SAFETY: a graph owns its nodes' closures, which are `Send`; the raw
// pointers in its nodes point into the graph itself or to the state of a
// run, which exists only while a run borrows the graph mutably, and the
// task headers are only queued during such a run. Those of its data uses
// point to the shared part of `Data` handles its nodes own, which is
// `Sync`.
unsafe impl Send for Graph<'_> {}

impl<'g> Graph<'g> {
    /// An empty graph.
    ///
    /// ```
    /// let g = selvedge::Graph::new();
    /// assert!(g.is_empty());
    /// ```
    pub fn new() -> Self {
        let id = NEXT_GRAPH_ID.fetch_add(1, Ordering::Relaxed);
        Self {
            id,
            nodes: Vec::new(),
            names: Vec::new(),
            edges: Vec::new(),
            plan: None,
            data: DataUses::default(),
        }
    }

    /// Adds a node that runs `f` once per run of the graph, after every
    /// node that [precedes](Graph::precede) it. `f` may borrow anything
    /// that outlives the graph, and may itself run parallel work: a
    /// parallel loop as a node is a node whose closure runs the loop.
    ///
    /// ```
    /// use selvedge::{parallel_for, Graph};
    /// use std::sync::atomic::{AtomicU64, Ordering};
    ///
    /// let rt = selvedge::Runtime::builder().num_threads(2).build()?;
    /// let total = AtomicU64::new(0);
    /// let mut g = Graph::new();
    /// let sum = g.node(|| {
    ///     parallel_for(0..1000usize).for_each(|i| {
    ///         total.fetch_add(i as u64, Ordering::Relaxed);
    ///     });
    /// });
    /// let mut runs = 0;
    /// let count = g.node(move || runs += 1); // state kept between runs
    /// g.precede(sum, count);
    /// rt.run_graph(&mut g)?;
    /// rt.run_graph(&mut g)?;
    /// assert_eq!(total.load(Ordering::Relaxed), 2 * 499_500);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn node<F>(&mut self, f: F) -> Node
    where
        F: FnMut() + Send + 'g,
    {
        self.add(None, Box::new(Plain(f)))
    }

    /// [`Graph::node`] with a name, which errors and reports use.
    ///
    /// ```
    /// let mut g = selvedge::Graph::new();
    /// let a = g.node_named("load", || {});
    /// assert_eq!(g.name(a), "load");
    /// ```
    pub fn node_named<F>(&mut self, name: impl Into<Cow<'static, str>>, f: F) -> Node
    where
        F: FnMut() + Send + 'g,
    {
        self.add(Some(name.into()), Box::new(Plain(f)))
    }

    /// Adds a node that declares the [`Data`](crate::Data) it reads and
    /// writes, as [`spawn_with`](crate::spawn_with) does: `f` gets `&T` for
    /// each [`Data::read`](crate::Data::read) and `&mut T` for each
    /// [`Data::write`](crate::Data::write) or
    /// [`Data::recover`](crate::Data::recover), in the shape of `accesses`
    /// (one access, a tuple, a `Vec` or an array).
    ///
    /// The declarations add the edges they imply, in the order the nodes
    /// are added: a node that writes a handle runs after the node added
    /// before it that wrote the handle and every node since that read it;
    /// a node that reads it runs after that last writer. Each run of the
    /// graph is one access to each handle (a write if any node writes it),
    /// ordered with the tasks outside the graph that use the handle: the
    /// run starts its nodes once the accesses submitted before it finished,
    /// and accesses submitted while it runs wait for it to end.
    ///
    /// Poison works as for tasks: a node refuses a poisoned handle (it
    /// fails, and the nodes after it are skipped), a node that panics
    /// poisons what it writes, a recover access clears the poison, and a
    /// node skipped in a run poisons what it would have written.
    ///
    /// # Panics
    /// When `accesses` declares a [`Dep`](crate::Dep) (a graph runs many
    /// times, a `Dep` is fulfilled once: use [`Graph::precede`]), or one
    /// handle twice other than for two reads.
    ///
    /// ```
    /// use selvedge::{Data, Graph, Runtime};
    ///
    /// let rt = Runtime::builder().num_threads(2).build()?;
    /// let state = Data::new(vec![1.0f64; 1000]);
    /// let flux = Data::new(vec![0.0f64; 1000]);
    /// let mut step = Graph::new();
    /// // flux from state, then state from flux: the edge comes from the
    /// // declarations (a read of what the node before wrote).
    /// step.node_with((state.read(), flux.write()), |(s, f)| {
    ///     for (f, s) in f.iter_mut().zip(s) {
    ///         *f = 0.5 * s;
    ///     }
    /// });
    /// step.node_with((flux.read(), state.write()), |(f, s)| {
    ///     for (s, f) in s.iter_mut().zip(f) {
    ///         *s += f;
    ///     }
    /// });
    /// assert_eq!(step.edge_count(), 1);
    /// for _ in 0..3 {
    ///     rt.run_graph(&mut step)?;
    /// }
    /// drop(step); // its nodes hold handles to the data
    /// assert_eq!(state.into_inner()[0], 1.5f64.powi(3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn node_with<A, F>(&mut self, accesses: A, f: F) -> Node
    where
        A: Accesses + 'g,
        F: for<'a> FnMut(A::Refs<'a>) + Send + 'g,
    {
        self.add_declared(None, accesses, f)
    }

    /// [`Graph::node_with`] with a name, which errors, reports and poison
    /// causes use.
    ///
    /// ```
    /// use selvedge::{Data, Graph};
    ///
    /// let total = Data::new(0u64);
    /// let mut g = Graph::new();
    /// let add = g.node_with_named("add", total.write(), |t| *t += 1);
    /// assert_eq!(g.name(add), "add");
    /// g.run()?;
    /// drop(g);
    /// assert_eq!(total.into_inner(), 1);
    /// # Ok::<(), selvedge::GraphError>(())
    /// ```
    pub fn node_with_named<A, F>(
        &mut self,
        name: impl Into<Cow<'static, str>>,
        accesses: A,
        f: F,
    ) -> Node
    where
        A: Accesses + 'g,
        F: for<'a> FnMut(A::Refs<'a>) + Send + 'g,
    {
        self.add_declared(Some(name.into()), accesses, f)
    }

    /// Adds a node that runs the graph `sub` to completion, once per run
    /// of this graph. The node finishes when every node of `sub` did. When
    /// a node of `sub` panics, or `sub` has a cycle, this node panics with
    /// a message saying so, and the nodes after it are skipped for that
    /// run.
    ///
    /// ```
    /// use selvedge::Graph;
    /// use std::sync::Mutex;
    ///
    /// let log = Mutex::new(Vec::new());
    /// let mut inner = Graph::new();
    /// let x = inner.node(|| log.lock().unwrap().push("inner x"));
    /// let y = inner.node(|| log.lock().unwrap().push("inner y"));
    /// inner.precede(x, y);
    /// let mut outer = Graph::new();
    /// let before = outer.node(|| log.lock().unwrap().push("before"));
    /// let middle = outer.subgraph(inner);
    /// let after = outer.node(|| log.lock().unwrap().push("after"));
    /// outer.precede(before, middle);
    /// outer.precede(middle, after);
    /// outer.run()?;
    /// assert_eq!(*log.lock().unwrap(), ["before", "inner x", "inner y", "after"]);
    /// # Ok::<(), selvedge::GraphError>(())
    /// ```
    pub fn subgraph(&mut self, mut sub: Graph<'g>) -> Node {
        let handles = sub.data.merge_into();
        let node = self.add(Some(Cow::Borrowed("subgraph")), Box::new(Subgraph(sub)));
        self.data.declare(node.index, &handles, &mut self.edges);
        self.check_edge_count();
        node
    }

    /// Says that `before` runs, and finishes, before `after` starts, in
    /// every run. Adding an edge again has no further effect; an edge that
    /// closes a cycle is reported when the graph is next checked or run.
    ///
    /// # Panics
    /// If either node belongs to another graph, or the graph already holds
    /// 4,294,967,295 edges.
    ///
    /// ```
    /// use std::sync::Mutex;
    ///
    /// let order = Mutex::new(Vec::new());
    /// let mut g = selvedge::Graph::new();
    /// let b = g.node(|| order.lock().unwrap().push('b'));
    /// let a = g.node(|| order.lock().unwrap().push('a'));
    /// g.precede(a, b);
    /// g.run()?;
    /// assert_eq!(*order.lock().unwrap(), ['a', 'b']);
    /// # Ok::<(), selvedge::GraphError>(())
    /// ```
    pub fn precede(&mut self, before: Node, after: Node) {
        let from = self.own(before, "precede");
        let to = self.own(after, "precede");
        self.edges.push((from, to));
        self.check_edge_count();
        self.plan = None;
    }

    /// The number of nodes.
    ///
    /// ```
    /// let mut g = selvedge::Graph::new();
    /// g.node(|| {});
    /// assert_eq!(g.len(), 1);
    /// ```
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no node.
    ///
    /// ```
    /// assert!(selvedge::Graph::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The number of edges added (a repeated edge counts each time).
    ///
    /// ```
    /// let mut g = selvedge::Graph::new();
    /// let (a, b) = (g.node(|| {}), g.node(|| {}));
    /// g.precede(a, b);
    /// assert_eq!(g.edge_count(), 1);
    /// ```
    pub fn edge_count(&self) -> usize {
        self.edges.len()
    }

    /// The node's name: the one given to [`Graph::node_named`], else
    /// `node <index>`.
    ///
    /// # Panics
    /// If the node belongs to another graph.
    ///
    /// ```
    /// let mut g = selvedge::Graph::new();
    /// let a = g.node(|| {});
    /// assert_eq!(g.name(a), "node 0");
    /// ```
    pub fn name(&self, node: Node) -> Cow<'static, str> {
        let index = self.own(node, "name");
        self.name_at(index)
    }

    /// Resolves the graph's dependencies, if it changed since they were
    /// last resolved, and checks that it has no cycle. Running a graph
    /// does this itself; call it to learn of a cycle before the first run.
    ///
    /// # Errors
    /// [`GraphError::Cycle`] when the edges form a cycle, with the nodes on
    /// one of them.
    ///
    /// ```
    /// let mut g = selvedge::Graph::new();
    /// let a = g.node_named("a", || {});
    /// let b = g.node_named("b", || {});
    /// g.precede(a, b);
    /// g.precede(b, a);
    /// let err = g.check().unwrap_err();
    /// assert_eq!(err.to_string(), "the graph has a cycle: a -> b -> a");
    /// ```
    pub fn check(&mut self) -> Result<(), GraphError> {
        if self.plan.is_some() {
            return Ok(());
        }
        match plan::prepare(&mut self.nodes, &self.edges) {
            Ok(plan) => {
                self.data.sort();
                self.plan = Some(plan);
                Ok(())
            }
            Err(cycle) => Err(GraphError::Cycle {
                names: cycle
                    .iter()
                    .map(|&i| self.name_at(i).into_owned())
                    .collect(),
                nodes: cycle.into_iter().map(|i| Node::new(self.id, i)).collect(),
            }),
        }
    }

    /// Runs the graph once on the current runtime and waits for it: in
    /// place from a task (the worker keeps working while it waits),
    /// otherwise on the global runtime, blocking the caller.
    ///
    /// # Errors
    /// [`GraphError::Cycle`] when the edges form a cycle (nothing runs);
    /// [`GraphError::Failed`] when a node panicked: its successors, and
    /// theirs, were skipped for this run, every other node ran, and the
    /// graph may be run again.
    ///
    /// ```
    /// let mut g = selvedge::Graph::new();
    /// let a = g.node_named("a", || panic!("no input"));
    /// let b = g.node_named("b", || unreachable!());
    /// g.precede(a, b);
    /// let err = g.run().unwrap_err();
    /// assert_eq!(
    ///     err.to_string(),
    ///     "node 'a' panicked: no input; 1 node after it was skipped: b"
    /// );
    /// ```
    pub fn run(&mut self) -> Result<(), GraphError> {
        on_worker(|w| {
            let prepared = self.prepared()?;
            replay::run_on(w, prepared).map_err(|failed| self.failure(failed))
        })
    }

    /// Lets the next run start over after a failed one. A node that
    /// panicked poisoned the [`Data`](crate::Data) handles it writes, and
    /// the nodes skipped after it poisoned theirs, so without this every
    /// later run would fail the same way, refusing them. The next run, once
    /// it has its turn on the handles the graph's nodes write, clears their
    /// poison, as a [`Data::recover`](crate::Data::recover) access would:
    /// its nodes then run on the values as the failed run left them (a
    /// node that rewrites its output whole repairs it). Handles the graph
    /// only reads keep their poison. It applies to one run; call it again
    /// after another failure.
    ///
    /// ```
    /// use selvedge::{Data, Graph, GraphError, Runtime};
    /// use std::sync::atomic::{AtomicBool, Ordering};
    ///
    /// let rt = Runtime::builder().num_threads(2).build()?;
    /// let (x, y) = (Data::new(0u32), Data::new(0u32));
    /// let flaky = AtomicBool::new(true);
    /// let mut g = Graph::new();
    /// g.node_with(x.write(), |x| {
    ///     if flaky.swap(false, Ordering::Relaxed) {
    ///         panic!("the sensor did not answer");
    ///     }
    ///     *x = 10;
    /// });
    /// g.node_with((x.read(), y.write()), |(x, y)| *y = *x + 1);
    /// assert!(matches!(rt.run_graph(&mut g), Err(GraphError::Failed { .. })));
    /// // `x` is poisoned: run again as it is, and every run fails.
    /// assert!(rt.run_graph(&mut g).is_err());
    /// g.recover();
    /// rt.run_graph(&mut g)?;
    /// rt.run_graph(&mut g)?; // and it stays clean
    /// drop(g);
    /// assert_eq!(y.into_inner(), 11);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recover(&mut self) {
        self.data.recover_next_run();
    }

    /// The graph's nodes, plan and data uses, for a run: the plan resolved first
    /// if the graph changed (see [`Graph::check`]).
    pub(crate) fn prepared(&mut self) -> Result<Prepared<'_, 'g>, GraphError> {
        self.check()?;
        Ok(Prepared {
            nodes: &mut self.nodes,
            plan: self.plan.as_ref().expect("a checked graph has a plan"),
            data: &self.data,
        })
    }

    /// The report of a run in which nodes panicked or were skipped.
    fn failure(&self, Failures { panics, skipped }: Failures) -> GraphError {
        let panicked = panics
            .into_iter()
            .map(|(index, payload)| {
                NodePanic::new(
                    Node::new(self.id, index),
                    self.name_at(index).into_owned(),
                    payload,
                )
            })
            .collect();
        GraphError::Failed {
            panicked,
            skipped_names: skipped
                .iter()
                .map(|&i| self.name_at(i).into_owned())
                .collect(),
            skipped: skipped.into_iter().map(|i| Node::new(self.id, i)).collect(),
        }
    }

    pub(crate) fn name_at(&self, index: u32) -> Cow<'static, str> {
        match &self.names[index as usize] {
            Some(name) => name.clone(),
            None => Cow::Owned(format!("node {index}")),
        }
    }

    /// A node that declares `accesses` (see [`Graph::node_with`]).
    fn add_declared<A, F>(&mut self, name: Option<Cow<'static, str>>, accesses: A, f: F) -> Node
    where
        A: Accesses + 'g,
        F: for<'a> FnMut(A::Refs<'a>) + Send + 'g,
    {
        let handles = declared_by(&accesses);
        let index = self.next_index();
        let who = match &name {
            Some(name) => format!("graph node '{name}'"),
            None => format!("graph node {index}"),
        };
        let node = self.add(name, Box::new(DeclaredNode::new(accesses, f, who)));
        self.data.declare(node.index, &handles, &mut self.edges);
        self.check_edge_count();
        node
    }

    /// The plan counts edges and predecessors in 32 bits.
    fn check_edge_count(&self) {
        assert!(
            self.edges.len() <= u32::MAX as usize,
            "selvedge: a graph holds at most 4,294,967,295 edges"
        );
    }

    /// The index the next node gets.
    fn next_index(&self) -> u32 {
        u32::try_from(self.nodes.len())
            .ok()
            .filter(|&i| i != u32::MAX)
            .unwrap_or_else(|| panic!("selvedge: a graph holds at most 4,294,967,294 nodes"))
    }

    /// Adds a node that runs `work` (the other layers' kinds of node, a
    /// GPU node, come in here).
    pub(crate) fn add(
        &mut self,
        name: Option<Cow<'static, str>>,
        work: Box<dyn NodeWork + 'g>,
    ) -> Node {
        let index = self.next_index();
        let mut task = NodeTask::new(work);
        match &name {
            Some(Cow::Borrowed(s)) => task.set_span_name(SpanName::new(s)),
            // An owned name outlives the graph in a trace: interned, once
            // per distinct name.
            Some(Cow::Owned(s)) => task.set_span_name(SpanName::interned(s)),
            None => {}
        }
        self.nodes.push(task);
        self.names.push(name);
        self.plan = None;
        Node::new(self.id, index)
    }

    /// The index of `node`, which must be one of this graph's.
    fn own(&self, node: Node, what: &str) -> u32 {
        assert!(
            node.graph == self.id,
            "selvedge: Graph::{what} was given node {} of graph #{}, but this is graph #{}: \
             a node belongs to the graph that made it",
            node.index,
            node.graph,
            self.id
        );
        node.index
    }
}

/// A graph run as a node of another ([`Graph::subgraph`]).
struct Subgraph<'g>(Graph<'g>);

impl NodeWork for Subgraph<'_> {
    fn run(&mut self) {
        if let Err(e) = self.0.run() {
            panic!("selvedge: a nested graph failed: {e}");
        }
    }

    fn skipped(&mut self) {
        let cause: std::sync::Arc<str> =
            "a nested graph was skipped (a node before it failed in the same run), so its \
             nodes did not write it"
                .into();
        // SAFETY: the subgraph's node declares every handle of the nested
        // graph as the nested graph declares it (`Graph::subgraph`), and a
        // skipped node has its turn.
        unsafe { self.0.data.poison_written(&cause) };
    }
}

impl Default for Graph<'_> {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Graph<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("id", &self.id)
            .field("nodes", &self.nodes.len())
            .field("edges", &self.edges.len())
            .field("resolved", &self.plan.is_some())
            .finish()
    }
}
