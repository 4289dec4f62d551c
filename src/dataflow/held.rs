//! The `Data` handles held on this thread: those declared by the tasks
//! running on it (a task that waits, working meanwhile, may run another one
//! nested on the same thread), and those of each graph run one of whose
//! nodes runs on it (a run holds its handles until it ends).
//!
//! Code running under such an access can never wait for an access ordered
//! after it: that access starts only once the holder returns. So the waits
//! that would hang are refused with a message instead: `Data::into_inner`
//! and `Data::read_now` on a held handle, a graph run declaring one, a
//! `Scope::spawn_with` that the holding task's scope would wait for, and a
//! join of a task ordered after a held access (noted with `core::endless`
//! when the task is submitted here, and refused when it is joined here).

use crate::core::endless;
use crate::core::task::Header;
use crate::dataflow::access::sealed::Target;
use crate::dataflow::access::{Accesses, Declared};
use crate::dataflow::mode::Mode;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

/// A graph run's handles and how the run holds each one.
pub(crate) type RunHandles = HashMap<usize, Mode>;

/// What this thread holds.
struct HeldHere {
    /// The handles of the tasks running on this thread (nested ones
    /// last), and how each task declared them.
    tasks: Stack<(usize, Mode), 8>,
    /// The handles of each graph run one of whose nodes runs here.
    runs: Stack<*const RunHandles, 2>,
}

thread_local! {
    /// How many tasks and runs hold handles on this thread: what a
    /// submission reads to see that nothing is held (no destructor, so
    /// reading it costs next to nothing).
    static HOLDERS: Cell<usize> = const { Cell::new(0) };
    // Const-initialized: every declared task's run reaches it twice.
    static HELD: RefCell<HeldHere> = const {
        RefCell::new(HeldHere {
            tasks: Stack::new((0, Mode::Read)),
            runs: Stack::new(std::ptr::null()),
        })
    };
}

/// A stack of a few values kept inline, more on the heap: so a worker's
/// first tasks that declare data, and its first graph runs, allocate
/// nothing (a graph run again allocates nothing, on any worker).
#[derive(Clone)]
struct Stack<T: Copy, const N: usize> {
    len: usize,
    inline: [T; N],
    more: Vec<T>,
}

impl<T: Copy, const N: usize> Stack<T, N> {
    const fn new(fill: T) -> Self {
        Self {
            len: 0,
            inline: [fill; N],
            more: Vec::new(),
        }
    }

    fn push(&mut self, value: T) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = value,
            None => self.more.push(value),
        }
        self.len += 1;
    }

    fn pop(&mut self) {
        self.truncate(self.len.saturating_sub(1));
    }

    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
        self.more.truncate(self.len.saturating_sub(N));
    }

    fn iter(&self) -> impl Iterator<Item = &T> {
        self.inline[..self.len.min(N)].iter().chain(&self.more)
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Counts holders on this thread in or out.
fn add_holders(n: isize) {
    let _ = HOLDERS.try_with(|c| c.set(c.get().wrapping_add_signed(n)));
}

/// A handle's identity: the address of its data.
pub(crate) fn address(t: &dyn Target) -> usize {
    std::ptr::from_ref(t).cast::<()>() as usize
}

/// Whether a new access in `wanted` mode waits for one held in `held`
/// mode: a write waits for every access before it, and anything waits for
/// a write. A read after a held read waits for it only through a write
/// submitted since (`write_pending`: the handle's last write is not over,
/// so it came after the held read, which has its turn, and waits for it).
fn conflicts(held: Mode, wanted: Mode, write_pending: bool) -> bool {
    held.writes() || wanted.writes() || write_pending
}

impl HeldHere {
    /// How this thread holds the handle at `address`, if it does (a
    /// write when any holder writes it).
    fn mode_of(&self, address: usize) -> Option<Mode> {
        let by_tasks = self
            .tasks
            .iter()
            .filter(|(a, _)| *a == address)
            .map(|&(_, m)| m);
        let by_runs = self.runs.iter().filter_map(|&run| {
            // SAFETY: a run's handles stay in place until its `RunHeld`
            // guard is dropped: on this thread's list until then, and in a
            // scope's snapshot (read from any thread) for the scope's life,
            // which ends before the node that made it, and so the run.
            unsafe { &*run }.get(&address).copied()
        });
        by_tasks
            .chain(by_runs)
            .reduce(|a, b| if a.writes() { a } else { b })
    }

    fn is_empty(&self) -> bool {
        self.tasks.is_empty() && self.runs.is_empty()
    }
}

/// Whether a task running on this thread declared the handle at
/// `address`, or a graph run one of whose nodes runs on it.
pub(crate) fn contains(address: usize) -> bool {
    HELD.try_with(|h| h.borrow().mode_of(address).is_some())
        .unwrap_or(false)
}

/// A handle of `run` that a task running on this thread declared, or
/// another graph run one of whose nodes runs on it.
pub(crate) fn find_in(run: &RunHandles) -> Option<usize> {
    if !anything_here() {
        // Nothing held: no need to look up each of the run's handles.
        return None;
    }
    HELD.try_with(|h| {
        let h = h.borrow();
        run.keys().copied().find(|&a| h.mode_of(a).is_some())
    })
    .ok()
    .flatten()
}

/// An access that would wait for one held here.
pub(crate) struct Conflict {
    /// How messages name the handle.
    pub(crate) handle: String,
    /// How it is held.
    pub(crate) held: Mode,
    /// How the new access wants it.
    pub(crate) wanted: Mode,
}

impl Conflict {
    /// What a join of the task that wants the access says.
    pub(crate) fn join_message(&self) -> String {
        format!(
            "selvedge: join of a task that declares {h} ({wanted:?}) inside code that holds \
             {h} ({held:?}: a task that declared it, or a node of a graph run that declares \
             it; or a task suspended beneath this one on this worker, while it waits): the \
             awaited task is ordered after the access held here, which ends only when the \
             holding code returns, so the join could never end. Use the reference the \
             holding task was given, or join the task outside the holding code",
            h = self.handle,
            wanted = self.wanted,
            held = self.held,
        )
    }

    /// What a scope's submission of a task that wants the access says.
    pub(crate) fn scope_message(&self) -> String {
        format!(
            "selvedge: Scope::spawn_with of a task that declares {h} ({wanted:?}) in a scope \
             made by code that holds {h} ({held:?}: a task that declared it, or a node of a \
             graph run that declares it): the task is ordered after the access held there, \
             which ends only when that code returns, after the scope, which waits for the \
             task: the scope could never end. Use the reference the holding task was given, \
             or spawn the task outside the holding code",
            h = self.handle,
            wanted = self.wanted,
            held = self.held,
        )
    }
}

/// Whether a new access to `target` in `wanted` mode waits for an access
/// that `mode_of` says is held (see [`conflicts`]); `write_pending` says
/// whether the handle's last write is not over yet.
fn conflict_with(
    target: &dyn Target,
    wanted: Mode,
    write_pending: bool,
    mode_of: impl Fn(usize) -> Option<Mode>,
) -> Option<Conflict> {
    let held = mode_of(address(target)).filter(|&h| conflicts(h, wanted, write_pending))?;
    Some(Conflict {
        handle: target.describe(),
        held,
        wanted,
    })
}

/// Whether anything is held on this thread (a cheap look first).
#[inline]
pub(crate) fn anything_here() -> bool {
    HOLDERS.try_with(Cell::get).unwrap_or(0) != 0
}

/// Whether a new access to `target` in `wanted` mode, submitted on this
/// thread, waits for an access held here (see [`conflicts`]).
pub(crate) fn conflict_here(
    target: &dyn Target,
    wanted: Mode,
    write_pending: bool,
) -> Option<Conflict> {
    HELD.try_with(|h| {
        let h = h.borrow();
        conflict_with(target, wanted, write_pending, |a| h.mode_of(a))
    })
    .ok()
    .flatten()
}

/// What this thread holds, copied when a scope starts, for the scope's
/// submissions from any thread.
pub(crate) struct Snapshot(HeldHere);

// SAFETY: the run pointers are only read while the runs live: a scope
// (which owns the snapshot) ends before the node that started it returns,
// and so before its run ends.
unsafe impl Send for Snapshot {}
// SAFETY: as above; the snapshot is never changed.
unsafe impl Sync for Snapshot {}

/// What this thread holds now, if anything.
pub(crate) fn snapshot() -> Option<Box<Snapshot>> {
    HELD.try_with(|h| {
        let h = h.borrow();
        (!h.is_empty()).then(|| {
            Box::new(Snapshot(HeldHere {
                tasks: h.tasks.clone(),
                runs: h.runs.clone(),
            }))
        })
    })
    .ok()
    .flatten()
}

impl Snapshot {
    /// Whether a new access to `target` in `wanted` mode waits for one held
    /// when the snapshot was taken (see [`conflicts`]).
    pub(crate) fn conflict(
        &self,
        target: &dyn Target,
        wanted: Mode,
        write_pending: bool,
    ) -> Option<Conflict> {
        conflict_with(target, wanted, write_pending, |a| self.0.mode_of(a))
    }
}

/// A task submitted on this thread that waits for an access held here: a
/// join of it here could never end.
pub(crate) struct Behind {
    /// The token its closure owns (see `core::endless`).
    alive: Weak<()>,
    /// What the join says.
    why: String,
}

impl Behind {
    /// The note for a task with `conflict`, and the token its closure must
    /// own.
    pub(crate) fn new(conflict: &Conflict) -> (Self, Arc<()>) {
        let (token, alive) = endless::token();
        let why = conflict.join_message();
        (Behind { alive, why }, token)
    }

    /// Notes the task at `block` as one a join on this thread could never
    /// see finish.
    pub(crate) fn note(self, block: NonNull<Header>) {
        endless::note(block, self.alive, self.why);
    }
}

/// A graph run's handles, on this thread's list while one of its nodes
/// runs here.
pub(crate) struct RunHeld {
    /// Where the list of endless joins stood.
    mark: usize,
}

impl RunHeld {
    /// Notes the handles at `run` until the guard is dropped.
    ///
    /// # Safety
    /// `run` stays valid, in place, until the guard is dropped, and the
    /// guard is dropped on this thread.
    pub(crate) unsafe fn enter(run: *const RunHandles) -> Option<Self> {
        let mark = endless::mark();
        HELD.try_with(|h| h.borrow_mut().runs.push(run))
            .ok()
            .map(|()| {
                add_holders(1);
                RunHeld { mark }
            })
    }
}

impl Drop for RunHeld {
    fn drop(&mut self) {
        let _ = HELD.try_with(|h| h.borrow_mut().runs.pop());
        add_holders(-1);
        endless::forget_since(self.mark);
    }
}

/// The running task's handles, on this thread's list until dropped.
pub(crate) struct Held {
    count: usize,
    /// Whether it is counted in `HOLDERS`.
    noted: bool,
    /// Where the list of endless joins stood.
    mark: usize,
}

impl Held {
    /// Notes the handles `accesses` declares, handing each to `each`
    /// with its mode.
    pub(crate) fn enter<A: Accesses>(
        accesses: &A,
        mut each: impl FnMut(&dyn Target, Mode),
    ) -> Self {
        let mut count = 0;
        let mark = endless::mark();
        let noted = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            if let Some((t, mode)) = accesses.only_data() {
                // One handle (the common case): no walk.
                h.tasks.push((address(t), mode));
                count = 1;
                each(t, mode);
                return;
            }
            accesses.declare_all(&mut |d| {
                if let Declared::Data(t, mode) = d {
                    h.tasks.push((address(t), mode));
                    count += 1;
                    each(t, mode);
                }
            });
        });
        if noted.is_ok() {
            add_holders(1);
        } else {
            // During thread-local teardown: nothing noted.
            accesses.declare_all(&mut |d| {
                if let Declared::Data(t, mode) = d {
                    each(t, mode);
                }
            });
        }
        Self {
            count,
            noted: noted.is_ok(),
            mark,
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let _ = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            let keep = h.tasks.len.saturating_sub(self.count);
            h.tasks.truncate(keep);
        });
        if self.noted {
            add_holders(-1);
        }
        endless::forget_since(self.mark);
    }
}
