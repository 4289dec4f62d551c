//! Nodes that declare the [`Data`](crate::Data) they read and write.
//!
//! Two orders come from the declarations. Inside the graph, the edges the
//! accesses imply, added when the node is, in the order the nodes are
//! added (as tasks submitted in that order would be ordered): a write
//! after the previous write and the reads since it, a read after the
//! previous write. Outside it, one access per handle for each whole run
//! (a write if any node writes the handle), completed when the run ends:
//! the run waits for the tasks submitted before it that use its handles,
//! and the tasks submitted during it wait for the run. The access is
//! recorded in the handle's log by the first run; later runs record again
//! only the handles something outside the graph used since (see
//! `dataflow/run_record.rs`).
//!
//! What a node does with its handles is what a task declaring them does
//! (`declared::with_turn`): it refuses a poisoned handle, poisons what it
//! writes when it panics, clears the poison with a recover access. A node
//! skipped because a node before it failed poisons what it would have
//! written: its value was not updated in that run.

use crate::core::error::CancelledBecause;
use crate::core::sync::lock;
use crate::core::worker::Worker;
use crate::dataflow::access::sealed::Target;
use crate::dataflow::access::{Accesses, Declared};
use crate::dataflow::data::wait_over;
use crate::dataflow::declared::{in_address_order, lock_logs, set_written_poison, with_turn};
use crate::dataflow::event::Dep;
use crate::dataflow::few::Few;
use crate::dataflow::held::{self, RunHandles, RunHeld};
use crate::dataflow::log::{Log, Recorded};
use crate::dataflow::mode::Mode;
use crate::dataflow::run_record::{Noted, RunRecord};
use crate::dataflow::turn::Turn;
use crate::graph::chain::StreamWork;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::panic::resume_unwind;
use std::ptr::NonNull;
use std::sync::Arc;

/// What a node runs: its closure, and what it does when it is skipped.
pub(crate) trait NodeWork: Send {
    /// Runs the node (a panic is the node's failure).
    fn run(&mut self);
    /// The node was skipped in a run: a node before it failed.
    fn skipped(&mut self) {}
    /// The node's work as a stream node's (`chain.rs`), if it is one: it
    /// is then never `run`, but started with its chain.
    fn as_stream(&mut self) -> Option<&mut dyn StreamWork> {
        None
    }
}

/// A node that declares nothing: its closure.
pub(crate) struct Plain<F>(pub(crate) F);

impl<F: FnMut() + Send> NodeWork for Plain<F> {
    fn run(&mut self) {
        (self.0)()
    }
}

/// A node that declares accesses: its closure gets their references.
pub(crate) struct DeclaredNode<A, F> {
    accesses: A,
    f: F,
    /// How poison causes name the node ("graph node 'name'").
    who: String,
}

impl<A, F> NodeWork for DeclaredNode<A, F>
where
    A: Accesses,
    F: for<'a> FnMut(A::Refs<'a>) + Send,
{
    fn run(&mut self) {
        let f = &mut self.f;
        // Held on this thread already, with the run's other handles (see
        // `replay.rs`).
        if let Err(payload) = with_turn(&self.accesses, &self.who, false, |refs| f(refs)) {
            // A refusal (a declared handle is poisoned) fails the node as a
            // panic with its message would: reported with the node, its
            // successors skipped.
            match payload.downcast::<CancelledBecause>() {
                Ok(refusal) => resume_unwind(Box::new(refusal.0)),
                Err(payload) => resume_unwind(payload),
            }
        }
    }

    fn skipped(&mut self) {
        let cause: Arc<str> = format!(
            "{} was skipped (a node before it failed in the same run), so it did not write it",
            self.who
        )
        .into();
        // A skipped node has its turn: its count of unfinished
        // predecessors reached zero, and its successors wait for it.
        set_written_poison(&self.accesses, Some(&cause), Some(&cause));
    }
}

/// The handles `accesses` declares, in address order, as a node of a
/// graph of lifetime `'g` keeps them.
///
/// # Panics
/// When `accesses` declares a [`Dep`] (a graph runs many times; a `Dep` is
/// fulfilled once), or one handle twice other than for two reads.
pub(crate) fn declared_by<'g, A: Accesses + 'g>(accesses: &A) -> Vec<Handle<'g>> {
    let mut data: Few<(&dyn Target, Mode)> = Few::default();
    accesses.declare_all(&mut |d| match d {
        Declared::Data(target, mode) => data.push((target, mode)),
        Declared::After(_) => panic!(
            "selvedge: a graph's node cannot declare a Dep: a Dep is fulfilled once and \
             the graph runs many times; order nodes with Graph::precede, and wait for \
             things outside the graph before running it"
        ),
    });
    let data = data.slots();
    in_address_order(data);
    data.iter()
        .flatten()
        .map(|&(target, mode)| {
            let erased: NonNull<dyn Target + '_> = NonNull::from(target);
            // SAFETY: only the trait object's lifetime bound changes. Every
            // declared target is the data of a handle, kept in an `Arc`
            // that the access holds, so it stays at this address while
            // `accesses` lives (wherever `accesses` moves); the node will
            // own `accesses`, and the graph its nodes, for `'g` or until
            // the graph is dropped, whichever ends first. Nothing reads
            // these pointers after the graph is dropped.
            let target = unsafe {
                std::mem::transmute::<NonNull<dyn Target + '_>, NonNull<dyn Target + 'g>>(erased)
            };
            Handle { target, mode }
        })
        .collect()
}

impl<A, F> DeclaredNode<A, F> {
    pub(crate) fn new(accesses: A, f: F, who: String) -> Self {
        Self { accesses, f, who }
    }
}

/// One handle a node declares, and how.
#[derive(Clone, Copy)]
pub(crate) struct Handle<'g> {
    target: NonNull<dyn Target + 'g>,
    mode: Mode,
}

/// Every handle a graph's nodes declare.
#[derive(Default)]
pub(crate) struct DataUses<'g> {
    /// Each handle's uses, found by its address.
    handles: HashMap<usize, Uses<'g>>,
    /// Every handle and how a run declares it, in address order (the order
    /// their logs are locked in): sorted by [`DataUses::sort`] after a
    /// change, before the next run.
    order: Vec<Handle<'g>>,
    /// The handles' addresses and how a run holds each, which the run
    /// notes as held on each thread running one of its nodes (see
    /// `dataflow/held.rs`); set with `order`.
    held: RunHandles,
    /// Whether the graph is a node of another graph, whose runs declare
    /// its handles (see [`DataUses::merge_into`]).
    nested: bool,
    /// Whether the next run clears the poison of the handles its nodes
    /// write, once it has their turn ([`DataUses::recover_next_run`]).
    recover_next: Cell<bool>,
    /// What the runs' entries in the handles' logs name: a run that finds
    /// nothing from outside looked at them since the last registration
    /// registers nothing (see `dataflow/run_record.rs`). A new one after
    /// every change, so the next run registers the handles as they are.
    record: Arc<RunRecord>,
    /// Each handle's address (its key in `handles`) by its log's address,
    /// which is how the record notes a handle; set with `order`.
    by_log: HashMap<usize, usize>,
    /// Room a run uses to find the handles it records again, kept from
    /// run to run.
    scratch: RefCell<Scratch>,
}

/// What a run records again: the handles the run record noted, and their
/// addresses in `DataUses::handles`.
#[derive(Default)]
struct Scratch {
    noted: Noted,
    keys: Vec<usize>,
}

/// The nodes that use one handle, for the edges the next one implies.
struct Uses<'g> {
    target: NonNull<dyn Target + 'g>,
    /// A write if any node writes it: how a run declares it.
    mode: Mode,
    last_write: Option<u32>,
    reads_since: Vec<u32>,
}

impl<'g> DataUses<'g> {
    /// Notes that node `node` accesses `handles`, and adds to `edges` the
    /// edges that order it after the nodes added before it that use them:
    /// one edge from each such node, however many handles imply it.
    pub(crate) fn declare(
        &mut self,
        node: u32,
        handles: &[Handle<'g>],
        edges: &mut Vec<(u32, u32)>,
    ) {
        let mut before = Vec::new();
        for h in handles {
            let uses = self
                .handles
                .entry(h.target.cast::<()>().as_ptr() as usize)
                .or_insert_with(|| Uses {
                    target: h.target,
                    mode: Mode::Read,
                    last_write: None,
                    reads_since: Vec::new(),
                });
            before.extend(uses.last_write);
            if h.mode.writes() {
                before.append(&mut uses.reads_since);
                uses.last_write = Some(node);
                uses.mode = Mode::Write;
            } else {
                uses.reads_since.push(node);
            }
        }
        before.sort_unstable();
        before.dedup();
        edges.extend(before.into_iter().map(|b| (b, node)));
    }

    /// Lists the handles in address order, for the runs: called when the
    /// graph's plan is made, after every change.
    pub(crate) fn sort(&mut self) {
        self.order.clear();
        self.order.extend(self.handles.values().map(|u| Handle {
            target: u.target,
            mode: u.mode,
        }));
        self.order
            .sort_unstable_by_key(|h| h.target.cast::<()>().as_ptr() as usize);
        self.held = self.handles.iter().map(|(&a, u)| (a, u.mode)).collect();
        self.record = Arc::new(RunRecord::new());
        self.by_log = self
            .handles
            .iter()
            .map(|(&key, u)| {
                // SAFETY: live while the graph is (see `declared_by`).
                let log = lock(unsafe { u.target.as_ref() }.log()).address();
                (log, key)
            })
            .collect();
    }

    /// The handles' addresses, for a run to note as held while its nodes
    /// run; `None` when the graph declares nothing.
    pub(crate) fn held(&self) -> Option<&RunHandles> {
        (!self.held.is_empty()).then_some(&self.held)
    }

    /// The handles this graph declares, as one node of another graph
    /// declares them (a write where any node writes), for that graph's
    /// [`DataUses::declare`]; from now on this graph's runs leave the
    /// ordering with outside tasks to the other graph's runs (which wait
    /// for them before this graph's node can start).
    pub(crate) fn merge_into(&mut self) -> Vec<Handle<'g>> {
        self.nested = true;
        self.handles
            .values()
            .map(|u| Handle {
                target: u.target,
                mode: u.mode,
            })
            .collect()
    }

    /// Has the next run clear the poison of every handle a node of the
    /// graph writes, once it has their turn, as a recover access would.
    pub(crate) fn recover_next_run(&mut self) {
        self.recover_next.set(true);
    }

    /// Poisons every handle a node of this graph writes, with `cause`.
    ///
    /// # Safety
    /// The caller has the turn of a node that declares every handle of
    /// this graph as it is declared (a subgraph's node, skipped).
    pub(crate) unsafe fn poison_written(&self, cause: &Arc<str>) {
        for u in self.handles.values().filter(|u| u.mode.writes()) {
            // SAFETY: the pointer is live while the graph is (see
            // `declared_by`); the caller has the write's turn.
            unsafe { u.target.as_ref().set_poison(Some(cause.clone())) };
        }
    }

    /// Starts a run's access to every handle: records it in their logs
    /// (unless the entries of the last registration still stand for the
    /// graph's runs: see `dataflow/run_record.rs`) and waits (working, on
    /// `w`) for the accesses recorded before it. The
    /// returned access is to be finished when the run ends (it also holds
    /// the handles on this thread until then); `None` when the graph
    /// declares nothing (or its runs are part of another graph's).
    ///
    /// # Panics
    /// When a task running on this thread declared one of the handles: the
    /// run would wait for that task, which waits for the run.
    pub(crate) fn begin_run(&self, w: &Worker) -> Option<RunAccess> {
        if self.order.is_empty() || self.nested {
            return None;
        }
        if let Some(held) = held::find_in(&self.held) {
            // SAFETY: live while the graph is (see `declared_by`).
            let name = unsafe { self.handles[&held].target.as_ref() }.describe();
            panic!(
                "selvedge: a graph whose nodes declare {name} was run inside a task that \
                 declared it too, or inside a node of a graph run that declares it: the \
                 run would wait for that access, which waits for the run; run the graph \
                 outside it, or add it to the other graph as a subgraph"
            );
        }
        let mut turn = Turn::new();
        // From here to the run's end, this thread holds the handles: a task
        // it runs meanwhile, nested under the run, could not wait for them.
        // SAFETY: the set lives in the graph, borrowed for the run; the
        // guard stays on this thread's stack (in the returned access).
        let held = unsafe { RunHeld::enter(&self.held) };
        let done = turn.dep();
        let mut scratch = self.scratch.borrow_mut();
        let Scratch { noted, keys } = &mut *scratch;
        match self.record.begin(&done, noted) {
            // The entries of the last registration stand for this run now.
            Some(previous) => previous.into_iter().for_each(|p| turn.after(p)),
            None => while !self.register(w, &mut turn, &done, noted, keys) {},
        }
        drop(scratch);
        // Until the accesses before the run are over: the run has the turn
        // of its handles from here.
        wait_over(
            turn.before().iter().cloned().collect(),
            Some(w.shared.clone()),
        );
        if self.recover_next.take() {
            for h in self.order.iter().filter(|h| h.mode.writes()) {
                // SAFETY: live while the graph is (see `declared_by`); the
                // run holds a write to the handle, whose turn it has now.
                unsafe { h.target.as_ref().set_poison(None) };
            }
        }
        Some(RunAccess { turn, _held: held })
    }

    /// Records the run whose completion is `turn` (`done`) again in the
    /// logs of the handles `noted` (`keys` is room for their addresses),
    /// each entry naming the graph's run record, and notes in `turn` the
    /// accesses before it. `false` when more handles were noted meanwhile
    /// (nothing recorded; `noted` says which now).
    fn register(
        &self,
        w: &Worker,
        turn: &mut Turn,
        done: &Dep,
        noted: &mut Noted,
        keys: &mut Vec<usize>,
    ) -> bool {
        let access = |target: NonNull<dyn Target + 'g>, mode: Mode| {
            // SAFETY: live while the graph is (see `declared_by`).
            (unsafe { target.as_ref() }, mode)
        };
        if noted.all {
            let data = self.order.iter().map(|h| access(h.target, h.mode));
            return self.record_run(w, turn, done, noted, data);
        }
        // In address order, as every submission locks them.
        keys.clear();
        // Every noted log is one of this graph's: only its runs record
        // entries naming this record, and a change makes a new one.
        debug_assert!(noted
            .handles
            .iter()
            .all(|log| self.by_log.contains_key(log)));
        keys.extend(noted.handles.iter().filter_map(|log| self.by_log.get(log)));
        keys.sort_unstable();
        keys.dedup();
        let data = keys
            .iter()
            .filter_map(|k| self.handles.get(k))
            .map(|u| access(u.target, u.mode));
        self.record_run(w, turn, done, noted, data)
    }

    /// [`DataUses::register`] on the handles `data`, whose logs it locks.
    fn record_run<'t>(
        &self,
        w: &Worker,
        turn: &mut Turn,
        done: &Dep,
        noted: &mut Noted,
        data: impl Iterator<Item = (&'t dyn Target, Mode)> + Clone,
    ) -> bool {
        let mut recorded = false;
        lock_logs(data, &w.shared, |locked| {
            let mut logs: Few<(&mut Log, Mode)> = Few::default();
            // What the run comes after, looked at before the record names
            // the run: so it waits only for completions that were there
            // before its own (a run that named itself first could find,
            // through another graph's entry, a run that started later and
            // waits for it through a task ordered after both).
            let mut before: Few<Dep> = Few::default();
            for (log, mode, _) in locked {
                for b in log.before_run(mode, &self.record) {
                    before.push(b.done);
                }
                logs.push((log, mode));
            }
            // With the logs locked, nothing can look at their entries
            // between the record naming this run and the new entries.
            if let Ok(previous) = self.record.registering(done, noted) {
                previous
                    .into_iter()
                    .chain(before.take_all())
                    .for_each(|d| turn.after(d));
                for (log, mode) in logs.slots().iter_mut().flatten() {
                    log.record(*mode, Recorded::runs(self.record.clone()));
                }
                recorded = true;
            }
        });
        recorded
    }
}

/// A run's access to the handles its graph declares, from its start to
/// its end (see [`DataUses::begin_run`]).
pub(crate) struct RunAccess {
    turn: Turn,
    /// The handles held on the run's owner thread.
    _held: Option<RunHeld>,
}

impl RunAccess {
    /// Ends the access: the accesses after the run may start.
    pub(crate) fn finish(self) {
        self.turn.end();
    }
}
