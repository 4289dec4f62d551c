//! Running a prepared graph: each node is a task whose header lives in the
//! node itself, queued once per run.
//!
//! A run's owner (the worker that runs the graph) points the plan's run
//! slot at the run's state on its own stack and queues the roots. A worker
//! that finishes a node counts down each successor's count of unfinished
//! predecessors; a successor whose count it brought to zero is ready. It
//! runs the first ready one (in the order the edges were added) itself,
//! next, in the same task, and queues the others on its own deque, where
//! idle workers find them as they find any task. (A successor with one
//! predecessor needs no atomic count: its predecessor is the only one to
//! ready it.)
//!
//! The first, not the last: a graph built in a natural order (a grid row
//! by row, say) adds each node's edges in that order, so running the first
//! ready successor walks the nodes, their closures and their data in the
//! order they lie in memory. Running the last walked a 256 x 256 grid
//! down its columns, a cache miss per node: 70 ns a node on one worker
//! against 16.
//!
//! Nothing is reset before a run: a node's count is set back by whoever
//! readies it, and its cancellation mark cleared by whoever settles it (see
//! `countdown.rs`). Every node's count reaches zero exactly once per run,
//! failed runs included, so every node is ready for the next run when this
//! one ends.
//!
//! The run's count latch counts the queued node tasks, each released when
//! the chain of nodes it ran ends; the owner waits on it, working.
//!
//! A node that panics marks each successor cancelled before counting it
//! down; a node found cancelled when it becomes ready does not run, and
//! passes the mark on. So a panic skips exactly the nodes that follow it,
//! and every node's count still reaches zero: the run ends as usual.

use crate::core::error::Cancellation;
use crate::core::latch::CountLatch;
use crate::core::registry::Registry;
use crate::core::sync::{lock, Mutex};
use crate::core::task::{Header, TaskRef, VTable};
use crate::core::trace::names::SpanName;
use crate::core::unwind::AbortIfPanic;
use crate::core::worker::{Until, Worker};
use crate::dataflow::held::{RunHandles, RunHeld};
use crate::graph::chain::{ChainDone, ChainRest, Enqueued, RunOps, StreamWork};
use crate::graph::countdown::Countdown;
use crate::graph::data::{DataUses, NodeWork};
use crate::graph::ids::{RunSlot, CHAIN_MEMBER, NOT_STREAMED};
use crate::graph::plan::{Plan, PlanNode};
use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Arc;

/// One node of a graph: its task header, its closure, where its successors
/// are, and its counts for the current run.
#[repr(C)]
pub(crate) struct NodeTask<'g> {
    /// First, so the header's address is the node's (`#[repr(C)]`).
    header: Header,
    /// The plan's run slot (see [`RunSlot`]).
    slot: *const RunSlot,
    work: UnsafeCell<Box<dyn NodeWork + 'g>>,
    /// The node's successors: `successors[first..end]` of the plan.
    first: u32,
    end: u32,
    /// Its place in a chain of stream nodes (`chain.rs`): the index of
    /// the chain it heads, [`CHAIN_MEMBER`] for the others of a chain,
    /// [`NOT_STREAMED`] for a node that runs on its own.
    chain: u32,
    /// Its predecessors not yet finished in this run, and whether one of
    /// them failed.
    countdown: Countdown,
    /// Its name in a trace.
    name: SpanName,
}

impl<'g> NodeTask<'g> {
    const VTABLE: VTable = VTable {
        run: Self::run_task,
        run_inline: None,
        run_value: None,
        cancel: Self::cancel_task,
        type_name: || "graph node task",
    };

    pub(crate) fn new(work: Box<dyn NodeWork + 'g>) -> Self {
        Self {
            header: Header::new(&Self::VTABLE),
            slot: std::ptr::null(),
            work: UnsafeCell::new(work),
            first: 0,
            end: 0,
            chain: NOT_STREAMED,
            countdown: Countdown::new(0),
            name: SpanName::new("graph node"),
        }
    }

    /// Names the node in a trace (else it is "graph node").
    pub(crate) fn set_span_name(&mut self, name: SpanName) {
        self.name = name;
    }

    /// The state of the run under way.
    ///
    /// # Safety
    /// The node belongs to a run under way, and the caller owns its task.
    #[inline]
    unsafe fn run<'r>(node: *const Self) -> &'r Run<'g> {
        // SAFETY: the slot was set by `prepare` and lives in the plan, which
        // stays in place during a run; the owner wrote the run's address
        // before queueing anything, and the run's state outlives its tasks
        // (its owner waits for the latch they release).
        unsafe { &*(*(*(*node).slot).0.get()).cast::<Run<'g>>() }
    }

    /// The node as a queueable task.
    ///
    /// # Safety
    /// The node belongs to a run that is under way (its plan's run slot
    /// points to the run's live state) and is not queued or running in it
    /// already.
    unsafe fn as_task(node: *const Self) -> TaskRef {
        // SAFETY: the header is the node's first field (`#[repr(C)]`); the
        // node stays in place while the run borrows its graph, which lasts
        // until every queued node ran (the owner waits for the latch); it
        // is queued once per run (caller).
        unsafe { TaskRef::resident(NonNull::new_unchecked(node.cast_mut()).cast::<Header>()) }
    }

    /// The vtable's `run`: runs the node and every node it readies first,
    /// then releases the task's count of the run's latch.
    ///
    /// # Safety
    /// `header` came from [`NodeTask::as_task`] for a run under way, and
    /// the caller owns that task.
    unsafe fn run_task(header: NonNull<Header>) {
        let node = header.cast::<Self>().as_ptr().cast_const();
        // SAFETY: the caller owns the task, for a run under way.
        let run = unsafe { Self::run(node) };
        let w = Worker::current().expect("a graph's node runs on a worker of its runtime");
        // While its nodes run here, the run's handles are held on this
        // thread: a wait for one of them would wait for the run itself.
        let held = (!run.held.is_null()).then(|| {
            // SAFETY: the set lives in the graph, which the run borrows
            // until its latch is set, after this task's release below; the
            // guard is dropped on this thread, before the release.
            unsafe { RunHeld::enter(run.held) }
        });
        // SAFETY: the caller owns the task, for a run under way.
        unsafe { run.run_chain(w, node) };
        drop(held);
        // SAFETY: this task holds one count of the latch, released once,
        // here; nothing of the run is touched afterwards. It runs on a
        // worker of the latch's runtime: node tasks are only pushed on the
        // deques of the owner's runtime.
        unsafe { Run::release(run, w) };
    }

    /// The vtable's `cancel`: the node and every node after it are
    /// skipped. A runtime cancels the tasks it finds queued when it is
    /// dropped; no path is known that leaves a node task queued then (a
    /// run's owner waits for every node, and a runtime's drop runs what
    /// is queued first), so this is the same defence a stack job has.
    ///
    /// # Safety
    /// As for `run_task`.
    unsafe fn cancel_task(header: NonNull<Header>, _why: Cancellation) {
        let node = header.cast::<Self>().as_ptr().cast_const();
        // SAFETY: as in `run_task`.
        let run = unsafe { Self::run(node) };
        // SAFETY: as in `run_task`.
        unsafe { run.skip_from(node) };
        let current = Worker::current().map(|w| &w.shared);
        // SAFETY: this task holds one count of the latch, released once,
        // here; nothing of the run is touched afterwards.
        unsafe { CountLatch::decrement(&raw const run.latch, current) };
    }
}

impl PlanNode for NodeTask<'_> {
    fn stream_work(&mut self) -> Option<&mut dyn StreamWork> {
        self.work.get_mut().as_stream()
    }

    fn set_links(
        &mut self,
        first: u32,
        end: u32,
        predecessors: u32,
        chain: u32,
        slot: NonNull<RunSlot>,
    ) {
        self.first = first;
        self.end = end;
        self.chain = chain;
        self.slot = slot.as_ptr().cast_const();
        self.countdown = Countdown::new(predecessors);
    }
}

/// The state of one run, on its owner's stack.
pub(crate) struct Run<'g> {
    /// One count for the owner, one for each queued node task.
    latch: CountLatch<Registry>,
    nodes: *const NodeTask<'g>,
    successors: *const u32,
    /// Each chain of stream nodes as a range of `chain_nodes`, head first.
    chains: *const (u32, u32),
    chain_nodes: *const u32,
    /// The runtime of the run's owner (its node tasks are queued there).
    runtime: *const Registry,
    /// The addresses of the `Data` handles the graph declares, or null.
    held: *const RunHandles,
    /// What went wrong, if anything (only failures take the lock).
    failures: Mutex<Failures>,
}

/// The nodes of a run that panicked (with their payloads) and that were
/// skipped, by index.
#[derive(Default)]
pub(crate) struct Failures {
    pub(crate) panics: Vec<(u32, Box<dyn Any + Send>)>,
    pub(crate) skipped: Vec<u32>,
}

impl<'g> Run<'g> {
    /// Runs `node`, then, while it readies successors, the first of them,
    /// queueing the others on `w`.
    ///
    /// # Safety
    /// The caller owns `node`'s task in this run (it was queued and taken,
    /// or readied by the caller's own count-down).
    unsafe fn run_chain(&self, w: &Worker, mut node: *const NodeTask<'g>) {
        loop {
            // SAFETY: the node belongs to this run, whose graph stays
            // borrowed until it ends.
            let n = unsafe { &*node };
            let mut failed = n.countdown.settle();
            if !failed && n.chain != NOT_STREAMED {
                debug_assert!(n.chain != CHAIN_MEMBER, "a chain is started at its head");
                // Its work completes later: its successors are counted
                // down then, not here.
                // SAFETY: the caller owns the head's task.
                unsafe { self.start_chain(w, node) };
                return;
            }
            // SAFETY: a node runs (or is skipped) once per run, by the
            // owner of its task (caller): no other reference to its work
            // exists.
            let work = unsafe { &mut *n.work.get() };
            if !failed {
                // Each node a slice of its own in a trace, also those run
                // here one after another as a chain of one task.
                let ran = w.traced_span(n.name, || catch_unwind(AssertUnwindSafe(|| work.run())));
                if let Err(payload) = ran {
                    self.record_panic(node, payload);
                    failed = true;
                }
            } else {
                self.record_skip(node);
                work.skipped();
            }
            // SAFETY: `n` finished (or was skipped) in this run, counted
            // down once, here.
            match unsafe { self.count_down_successors(w, n, failed) } {
                Some(ready) => node = ready,
                None => return,
            }
            // A long chain runs as one task: thieves that asked meanwhile
            // get what was queued, and messages in flight are tested and
            // signals fired meanwhile run (a stream node's completion),
            // between nodes as between tasks.
            w.between_parts();
            if !w.mailbox().is_empty() {
                w.answer_requests();
            }
        }
    }

    /// Counts down `n`'s successors (`failed`: they are to be skipped);
    /// returns the first one this readied, for the caller to run, and
    /// queues the others on `w`.
    ///
    /// # Safety
    /// `n` is a node of this run that finished (or was skipped) in it, and
    /// its successors are counted down once per run, by this call.
    #[inline]
    unsafe fn count_down_successors(
        &self,
        w: &Worker,
        n: &NodeTask<'g>,
        failed: bool,
    ) -> Option<*const NodeTask<'g>> {
        let mut next: Option<*const NodeTask<'g>> = None;
        // An ordinary node a stream node displaced from running next: queued
        // last, so that it is still the first of the others to run.
        let mut displaced: Option<*const NodeTask<'g>> = None;
        for s in n.first..n.end {
            // SAFETY: successor indices come from the plan of this graph,
            // and its nodes are in place for the run.
            let succ = unsafe { self.successor(s) };
            // SAFETY: as above.
            if unsafe { &*succ }.countdown.count_down(failed) {
                match next {
                    None => next = Some(succ),
                    // A stream node goes first: starting it only hands
                    // work to a device or to MPI, which then runs beside
                    // this worker, while an ordinary node queued behind a
                    // chain of ordinary nodes run in place would wait for
                    // all of them (a send after each tile of a column
                    // would leave only when the column is done).
                    // SAFETY: both are nodes of this run (above).
                    Some(first) if unsafe { Self::streams_first(succ, first) } => {
                        displaced = Some(first);
                        next = Some(succ);
                    }
                    // SAFETY: its count reached zero by our count-down: we
                    // own its task, and queue it once.
                    Some(_) => unsafe { self.queue(w, succ) },
                }
            }
        }
        if let Some(first) = displaced {
            // SAFETY: readied by our count-down above, queued once.
            unsafe { self.queue(w, first) };
        }
        next
    }

    /// Whether `candidate`, a stream node, should run before `first`, an
    /// ordinary one.
    ///
    /// # Safety
    /// Both are nodes of this run, in place.
    #[inline]
    unsafe fn streams_first(candidate: *const NodeTask<'g>, first: *const NodeTask<'g>) -> bool {
        // SAFETY: in place for the run (caller); `chain` is written when
        // the plan is laid out, before the run.
        unsafe { (*candidate).chain != NOT_STREAMED && (*first).chain == NOT_STREAMED }
    }

    /// The chain `chain`'s nodes, head first.
    ///
    /// # Safety
    /// `chain` is the index of a chain of this run's plan.
    unsafe fn chain_nodes(&self, chain: u32) -> &[u32] {
        // SAFETY: the plan's chain arrays are in place for the run, and the
        // range is one of them (caller).
        unsafe {
            let (start, end) = *self.chains.add(chain as usize);
            std::slice::from_raw_parts(self.chain_nodes.add(start as usize), (end - start) as usize)
        }
    }

    /// Starts the chain `head` heads: its stream work gets the chain and a
    /// [`ChainDone`] holding a count of the latch, which completes or
    /// fails the chain when the stream is done with it.
    ///
    /// # Safety
    /// The caller owns the head's task in this run, which it settled.
    #[cold]
    unsafe fn start_chain(&self, w: &Worker, head: *const NodeTask<'g>) {
        // SAFETY: the node is in place for the run.
        let n = unsafe { &*head };
        // SAFETY: a head's `chain` is the index of its chain in the plan.
        let members = unsafe { self.chain_nodes(n.chain) };
        // A count for the chain's completion, released by the `ChainDone`.
        if self.latch.is_owner(w.index) {
            // SAFETY: the owner's thread; the caller's task holds a count.
            unsafe { self.latch.increment_local() };
        } else {
            self.latch.increment();
        }
        let run = std::ptr::from_ref(self).cast::<()>();
        // SAFETY: the run is live, its functions are `RUN_OPS`, the count
        // above is the done's, and the chain's nodes are the caller's: each
        // after the head has its predecessor in the chain as its only one,
        // which counts it down only through the done.
        let (rest, done) = unsafe {
            (
                ChainRest::new(run, &RUN_OPS, &members[1..]),
                ChainDone::new(run, &RUN_OPS, n.chain),
            )
        };
        // SAFETY: the caller owns the head's task, so its work.
        let work = unsafe { &mut *n.work.get() }
            .as_stream()
            .expect("a chain's head is a stream node");
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| work.start_chain(rest, done))) {
            // The done, dropped in the unwinding, failed the chain without
            // reporting its head; the panic says why. (The head's task
            // still holds its count: the run is live here.)
            self.record_panic(head, payload);
        }
    }

    /// The work of node `index`, a stream node.
    ///
    /// # Safety
    /// The caller owns the node's work (its chain's head's task does).
    unsafe fn stream_work(&self, index: u32) -> *mut (dyn StreamWork + '_) {
        // SAFETY: the node is in place for the run; its work is the
        // caller's.
        let work = unsafe { &mut *(*self.nodes.add(index as usize)).work.get() };
        work.as_stream().expect("a chain's node is a stream node")
    }

    /// Whether `w` is a worker of the runtime this run's nodes are queued
    /// on.
    fn is_runtime_of(&self, w: &Worker) -> bool {
        std::ptr::eq(Arc::as_ptr(&w.shared), self.runtime)
    }

    /// A chain's work is complete: counts down its tail's successors and
    /// queues those it readied on `w`, then releases the chain's count.
    /// Queued, not run here: a completion runs inside the worker's drain of
    /// its signal inbox, with other completions of the same batch waiting
    /// behind it, which a node run in place could wait for. The chain's
    /// nodes after the head need no settling: each has one predecessor, so
    /// no count, and nothing marked them.
    ///
    /// # Safety
    /// `run` is live and the caller holds the chain's count (a
    /// [`ChainDone`]), released here; `w` is a worker of the run's
    /// runtime. Nothing of the run is touched after.
    unsafe fn complete_chain(run: *const Self, w: &Worker, chain: u32) {
        // SAFETY: the caller's count keeps the run alive until the release.
        let this = unsafe { &*run };
        // SAFETY: a chain of the plan (caller).
        let tail = *unsafe { this.chain_nodes(chain) }
            .last()
            .expect("a chain has a head");
        // SAFETY: the tail finished (with its chain), counted down once,
        // here; a node readied is ours, and queued once.
        unsafe {
            let tail = &*this.nodes.add(tail as usize);
            if let Some(first) = this.count_down_successors(w, tail, false) {
                this.queue(w, first);
            }
        }
        // SAFETY: the caller's count, released once; `w` is of the run's
        // runtime.
        unsafe { Run::release(run, w) };
    }

    /// A chain failed: node `at` of it (0 is the head) is reported with
    /// `payload` (with none, the caller reports it), the chain's other
    /// nodes as skipped (its captured work ran as one, or not at all), and
    /// every node after the chain is skipped. Then releases the chain's
    /// count. Any thread may call it.
    ///
    /// # Safety
    /// As for [`Run::complete_chain`], but on any thread.
    unsafe fn fail_chain(
        run: *const Self,
        chain: u32,
        at: usize,
        payload: Option<Box<dyn Any + Send>>,
    ) {
        // SAFETY: the caller's count keeps the run alive until the release.
        let this = unsafe { &*run };
        // SAFETY: a chain of the plan (caller).
        let nodes = unsafe { this.chain_nodes(chain) };
        let at = at.min(nodes.len() - 1);
        if let Some(payload) = payload {
            // SAFETY: a node of the run.
            this.record_panic(unsafe { this.nodes.add(nodes[at] as usize) }, payload);
        }
        for (i, &index) in nodes.iter().enumerate() {
            // SAFETY: a node of the run.
            let node = unsafe { this.nodes.add(index as usize) };
            if i != at {
                this.record_skip(node);
                // SAFETY: the chain's nodes are the caller's.
                unsafe { (*(*node).work.get()).skipped() };
            }
        }
        // SAFETY: a node of the run.
        let tail = unsafe { &*this.nodes.add(nodes[nodes.len() - 1] as usize) };
        for s in tail.first..tail.end {
            // SAFETY: as in `count_down_successors`.
            let succ = unsafe { this.successor(s) };
            // SAFETY: as above; a successor readied is ours to settle.
            if unsafe { &*succ }.countdown.count_down(true) {
                // SAFETY: as above.
                unsafe { this.skip_from(succ) };
            }
        }
        match Worker::current() {
            Some(w) if this.is_runtime_of(w) => {
                // SAFETY: the caller's count, released once, on a worker of
                // the run's runtime.
                unsafe { Run::release(run, w) }
            }
            _ => {
                let current = Worker::current().map(|w| &w.shared);
                // SAFETY: the caller's count, released once; nothing of
                // the run is touched after.
                unsafe { CountLatch::decrement(&raw const (*run).latch, current) }
            }
        }
    }

    /// # Safety
    /// `s` is an index into the plan's successor array of this run's graph.
    #[inline]
    unsafe fn successor(&self, s: u32) -> *const NodeTask<'g> {
        // SAFETY: the plan's arrays and the nodes are in place for the run,
        // and successor entries are node indices (caller).
        unsafe { self.nodes.add(*self.successors.add(s as usize) as usize) }
    }

    /// Queues a ready node's task on `w`, counted in the latch.
    ///
    /// # Safety
    /// The caller owns the node's task in this run.
    unsafe fn queue(&self, w: &Worker, node: *const NodeTask<'g>) {
        if self.latch.is_owner(w.index) {
            // SAFETY: this is the owner's thread, and the caller's own task
            // (or the owner's count) holds a count meanwhile.
            unsafe { self.latch.increment_local() };
        } else {
            self.latch.increment();
        }
        // SAFETY: the run is under way and the node is not queued (caller).
        w.push(unsafe { NodeTask::as_task(node) });
    }

    /// Releases one node task's count of the latch. A raw pointer, not
    /// `&self`: the release may let the owner return and free the run
    /// while this call is still under way, and a reference argument would
    /// be asserted live for the whole call.
    ///
    /// # Safety
    /// `run` is live; the calling task holds a count, released once, here;
    /// `w` is a worker of the latch's runtime. Nothing of the run is
    /// touched after.
    unsafe fn release(run: *const Self, w: &Worker) {
        // SAFETY: the caller's count keeps the run alive until the release.
        let latch = unsafe { &raw const (*run).latch };
        // SAFETY: as above.
        if unsafe { (*latch).is_owner(w.index) } {
            // SAFETY: the owner's thread, releasing the caller's count.
            unsafe { (*latch).decrement_local() };
        } else {
            // SAFETY: per the caller.
            unsafe { CountLatch::decrement_on_worker(latch) };
        }
    }

    /// Settles a cancelled node without running anything: every node after
    /// it is marked and counted down, those it readies settled in turn.
    ///
    /// # Safety
    /// As for [`Run::run_chain`].
    unsafe fn skip_from(&self, node: *const NodeTask<'g>) {
        let mut ready = vec![node];
        while let Some(node) = ready.pop() {
            // SAFETY: the node is in place for the run.
            let n = unsafe { &*node };
            n.countdown.settle();
            self.record_skip(node);
            // SAFETY: as in `run_chain`: the caller owns the node's task.
            unsafe { (*n.work.get()).skipped() };
            for s in n.first..n.end {
                // SAFETY: as in `run_chain`.
                let succ = unsafe { self.successor(s) };
                // SAFETY: as in `run_chain`.
                if unsafe { &*succ }.countdown.count_down(true) {
                    ready.push(succ);
                }
            }
        }
    }

    /// The index of `node` in the graph.
    fn index_of(&self, node: *const NodeTask<'g>) -> u32 {
        // SAFETY: both point into the graph's node array.
        unsafe { node.offset_from(self.nodes) as u32 }
    }

    #[cold]
    fn record_skip(&self, node: *const NodeTask<'g>) {
        lock(&self.failures).skipped.push(self.index_of(node));
    }

    #[cold]
    fn record_panic(&self, node: *const NodeTask<'g>, payload: Box<dyn Any + Send>) {
        lock(&self.failures)
            .panics
            .push((self.index_of(node), payload));
    }
}

/// A graph, ready for a run (see `Graph::prepared`).
pub(crate) struct Prepared<'a, 'g> {
    pub(crate) nodes: &'a mut [NodeTask<'g>],
    pub(crate) plan: &'a Plan,
    pub(crate) data: &'a DataUses<'g>,
}

/// Runs a prepared graph once on worker `w`, which works while it waits;
/// returns the nodes that panicked or were skipped, if any.
pub(crate) fn run_on(w: &Worker, graph: Prepared<'_, '_>) -> Result<(), Failures> {
    let Prepared { nodes, plan, data } = graph;
    // Ordered with the tasks outside the graph that use its data: started
    // once those before it finished.
    let access = data.begin_run(w);
    let run = Run {
        latch: CountLatch::new(w.index, &w.shared),
        nodes: nodes.as_ptr(),
        successors: plan.successors.as_ptr(),
        chains: plan.chains.as_ptr(),
        chain_nodes: plan.chain_nodes.as_ptr(),
        runtime: Arc::as_ptr(&w.shared),
        held: data.held().map_or(std::ptr::null(), std::ptr::from_ref),
        failures: Mutex::new(Failures::default()),
    };
    // SAFETY: no run of this graph is under way (this one borrows it
    // mutably), so nobody reads the slot; the queueing below publishes it.
    unsafe { *(*plan.slot().as_ptr()).0.get() = (&raw const run).cast::<()>() };
    // From the first queued node on, other threads hold pointers into
    // `run` and the nodes: nothing may unwind out of here until the wait
    // below has seen them all finish.
    let guard = AbortIfPanic::new();
    for &root in plan.roots.iter() {
        // SAFETY: a root of this run, queued once, here; the run is set up.
        unsafe { run.queue(w, run.nodes.add(root as usize)) };
    }
    if !run.latch.release_own() {
        w.wait_until(Until::Latch(&run.latch));
    }
    guard.disarm();
    if let Some(access) = access {
        access.finish();
    }
    // The latch's acquire ordered every record before this.
    let Failures {
        panics,
        mut skipped,
    } = std::mem::take(&mut *lock(&run.failures));
    drop(run);
    if panics.is_empty() && skipped.is_empty() {
        return Ok(());
    }
    skipped.sort_unstable();
    Err(Failures { panics, skipped })
}

/// What a chain's rest and done call on the run that started it (see
/// [`RunOps`]): the run's own functions, on its address. Each has the
/// contract of the `Run` method it calls, on a live run.
static RUN_OPS: RunOps = RunOps {
    enqueue: erased_enqueue,
    is_runtime_of: erased_is_runtime_of,
    complete_chain: erased_complete_chain,
    fail_chain: erased_fail_chain,
};

unsafe fn erased_enqueue(run: *const (), index: u32, on: &dyn Any) -> Enqueued {
    // SAFETY: a live run, and the caller owns node `index`'s work.
    unsafe { (*(*run.cast::<Run<'static>>()).stream_work(index)).enqueue(on) }
}

unsafe fn erased_is_runtime_of(run: *const (), w: &Worker) -> bool {
    // SAFETY: a live run (caller).
    unsafe { (*run.cast::<Run<'static>>()).is_runtime_of(w) }
}

unsafe fn erased_complete_chain(run: *const (), w: &Worker, chain: u32) {
    // SAFETY: as for `Run::complete_chain` (caller).
    unsafe { Run::complete_chain(run.cast::<Run<'static>>(), w, chain) }
}

unsafe fn erased_fail_chain(
    run: *const (),
    chain: u32,
    at: usize,
    payload: Option<Box<dyn Any + Send>>,
) {
    // SAFETY: as for `Run::fail_chain` (caller).
    unsafe { Run::fail_chain(run.cast::<Run<'static>>(), chain, at, payload) }
}
