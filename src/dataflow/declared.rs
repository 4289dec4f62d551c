//! Submitting a task with declared accesses: under the locks of the handles
//! it declares (taken in address order, so concurrent submissions agree on
//! one order), its dependencies are read off each handle's log and its own
//! completions are recorded there: for its writes, its turn (`turn.rs`);
//! for each read, a share of the reads of the version it reads
//! (`readers.rs`). When it runs, it checks for poison, hands the closure
//! its references, then drops its accesses (with them its read shares) and
//! ends its turn, which is what lets the next accesses run. That happens
//! whether the closure returned or panicked (a panic poisons what it
//! wrote). A task dropped unrun drops its read shares at once, and passes
//! its turn on once the accesses before it are over.

use crate::core::error::CancelledBecause;
use crate::core::handle::JoinHandle;
use crate::core::pool::current_registry;
use crate::core::registry::Registry;
use crate::core::sync::{lock, MutexGuard};
use crate::core::unwind::{drop_or_report, panic_message};
use crate::dataflow::access::sealed::Target;
use crate::dataflow::access::{Accesses, Declared};
use crate::dataflow::data::{poison_possible, poisoned_message};
use crate::dataflow::delayed;
use crate::dataflow::event::Dep;
use crate::dataflow::few::Few;
use crate::dataflow::held::{self, Behind, Conflict, Held, Snapshot};
use crate::dataflow::log::{Log, Recorded};
use crate::dataflow::mode::Mode;
use crate::dataflow::readers::ReadShare;
use crate::dataflow::turn::Turn;
use std::any::Any;
use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// A submitted task's accesses and its completions, moved into its closure.
pub(crate) struct Submission<A> {
    /// Its accesses, its reads holding its shares of the reads of the
    /// versions they read.
    accesses: Option<A>,
    /// The completion of its writes (none for a task that only reads).
    turn: Option<Turn>,
    /// For a task that waits for an access held where it was submitted:
    /// alive while the closure is (see `held::Behind`).
    _behind: Option<Arc<()>>,
}

/// Registers `accesses` in their handles' logs (in one step for all of
/// them) for a task of `runtime`, and returns what the task must wait for,
/// and whether it waits for an access held on this thread (then a join of
/// it here could never end: note its block).
///
/// With `refuse`, what the maker of a scope held: a task ordered after one
/// of those accesses is not submitted, and the conflict is returned
/// (nothing is recorded).
///
/// # Panics
/// When one handle is declared twice, other than for two reads.
pub(crate) fn declare<A: Accesses>(
    mut accesses: A,
    runtime: &Arc<Registry>,
    refuse: Option<&Snapshot>,
) -> Result<Submitted<A>, Conflict> {
    let mut reg = Registration {
        turn: None,
        waits: Few::default(),
    };
    let mut behind = None;
    let mut refused = None;
    // Whether this thread holds anything: then each access is checked
    // against what it holds, under the log's lock (a read waits for a held
    // read only through a write submitted since).
    let holding = held::anything_here();
    match (accesses.only_data(), refuse) {
        (Some((target, mode)), None) => {
            // One handle's access, nothing to refuse: no gathering, no
            // sorting, no list of locks.
            let mut log = lock(target.log());
            log.note_runtime(runtime);
            let share = record(&mut log, mode, target, &mut reg, holding, &mut behind);
            drop(log);
            if share.is_some() {
                let mut share = share;
                accesses.hold_shares(&mut |_| share.take());
            }
        }
        _ => {
            // Its reads' shares, by handle address (with a count of the
            // handle's reads, for `give_shares`).
            let mut shares: Few<(usize, usize, Option<ReadShare>), 4> = Few::default();
            let read_twice;
            // A task declares a few accesses: they and their locks stay on
            // the stack (no allocation below nine), until its reads get
            // their shares.
            {
                let mut data: Few<(&dyn Target, Mode)> = Few::default();
                accesses.declare_all(&mut |d| match d {
                    Declared::Data(target, mode) => data.push((target, mode)),
                    // Waited for, but not part of its turn (not an access
                    // before it, and maybe never fulfilled).
                    Declared::After(dep) => reg.waits.push(dep.clone()),
                });
                let data = data.slots();
                read_twice = in_address_order(data);
                let mut logs: Few<MutexGuard<'_, Log>> = Few::default();
                for (target, _) in data.iter().flatten() {
                    let mut log = lock(target.log());
                    log.note_runtime(runtime);
                    logs.push(log);
                }
                let logs = logs.slots();
                let data = data.iter().flatten();
                if let Some(maker) = refuse {
                    refused =
                        logs.iter()
                            .flatten()
                            .zip(data.clone())
                            .find_map(|(log, &(t, mode))| {
                                maker.conflict(t, mode, write_pending(log, mode))
                            });
                }
                if refused.is_none() {
                    for (log, &(target, mode)) in logs.iter_mut().flatten().zip(data) {
                        if let Some(share) =
                            record(log, mode, target, &mut reg, holding, &mut behind)
                        {
                            shares.push((held::address(target), 0, Some(share)));
                        }
                    }
                }
            }
            if !shares.slots().is_empty() {
                give_shares(&mut accesses, &mut shares, read_twice);
            }
        }
    }
    if let Some(conflict) = refused {
        return Err(conflict);
    }
    let (behind, token) = behind.map(|c| Behind::new(&c)).unzip();
    let submission = Submission {
        accesses: Some(accesses),
        turn: reg.turn,
        _behind: token,
    };
    Ok(Submitted {
        deps: reg.waits,
        submission,
        behind,
    })
}

/// Gives each read of `accesses` its share of its version's reads, from
/// `shares` (by handle address, with a count of 0). A handle read twice
/// (`read_twice`: some handle is) is recorded once: its share goes to its
/// last read, which a tuple, a vector or an array drops last, so that no
/// handle of the task is alive when its reads are over (a waiting
/// `into_inner` finds the value unshared).
fn give_shares<A: Accesses>(
    accesses: &mut A,
    shares: &mut Few<(usize, usize, Option<ReadShare>), 4>,
    read_twice: bool,
) {
    fn find<'s>(
        shares: &'s mut Few<(usize, usize, Option<ReadShare>), 4>,
        t: &dyn Target,
    ) -> Option<&'s mut (usize, usize, Option<ReadShare>)> {
        let at = held::address(t);
        shares.slots().iter_mut().flatten().find(|(a, ..)| *a == at)
    }
    if !read_twice {
        accesses.hold_shares(&mut |t| find(shares, t)?.2.take());
        return;
    }
    // First the reads of each handle are counted.
    accesses.hold_shares(&mut |t| {
        if let Some((_, reads, _)) = find(shares, t) {
            *reads += 1;
        }
        None
    });
    accesses.hold_shares(&mut |t| {
        let (_, reads, share) = find(shares, t)?;
        *reads -= 1;
        if *reads == 0 {
            share.take()
        } else {
            None
        }
    });
}

/// What a task's accesses registered so far, while they are recorded.
struct Registration {
    /// Its writes' completion, made with the first write.
    turn: Option<Turn>,
    /// What it waits for: a few kept on the stack (it goes to the task's
    /// waiting record, not into its closure).
    waits: Few<Dep, 4>,
}

/// What [`declare`] registered: what the task waits for, what its closure
/// runs, and whether a join of it on this thread could never end.
pub(crate) struct Submitted<A> {
    pub(crate) deps: Few<Dep, 4>,
    pub(crate) submission: Submission<A>,
    pub(crate) behind: Option<Behind>,
}

/// Whether a new access in `mode` to a handle whose log is `log` would
/// wait for a write not over yet.
pub(crate) fn write_pending(log: &Log, mode: Mode) -> bool {
    !mode.writes() && log.before_read().is_some()
}

/// Records one access of a task being submitted: its dependencies on the
/// accesses before it, its completion (its turn for a write; for a read, a
/// share of the version's reads, returned), and (when this thread holds
/// anything) whether it waits for a held access.
fn record(
    log: &mut Log,
    mode: Mode,
    target: &dyn Target,
    reg: &mut Registration,
    holding: bool,
    behind: &mut Option<Conflict>,
) -> Option<ReadShare> {
    if holding && behind.is_none() {
        *behind = held::conflict_here(target, mode, write_pending(log, mode));
    }
    if !mode.writes() {
        if let Some(before) = log.before_read() {
            reg.waits.push(before.done);
        }
        return Some(log.record_read());
    }
    // The reads so far closed first: if they all ended, the write need not
    // wait for their group.
    log.close_reads();
    let turn = reg.turn.get_or_insert_with(Turn::new);
    for before in log.before(mode) {
        // A turn passed on unrun waits for the accesses before its writes
        // (what the task's reads come after does not order its writes).
        turn.after(before.done.clone());
        reg.waits.push(before.done);
    }
    log.record(mode, Recorded::host(turn.dep()));
    None
}

/// Locks the logs of the handles `accesses` declares, all at once, and
/// hands them to `record` with each one's mode and handle, and the plain
/// `Dep`s it declares. Notes `runtime` as the handles' latest.
///
/// # Panics
/// When one handle is declared twice, other than for two reads (before
/// anything is recorded).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) fn with_logs<'s, A: Accesses>(
    accesses: &'s A,
    runtime: &Arc<Registry>,
    record: impl FnOnce(
        &mut dyn Iterator<Item = &'s Dep>,
        &mut dyn Iterator<Item = (&mut Log, Mode, &dyn Target)>,
    ),
) {
    // A task declares a few accesses: they and their locks stay on the
    // stack (no allocation below nine).
    let mut data: Few<(&dyn Target, Mode)> = Few::default();
    let mut after: Few<&Dep> = Few::default();
    accesses.declare_all(&mut |d| match d {
        Declared::Data(target, mode) => data.push((target, mode)),
        Declared::After(dep) => after.push(dep),
    });
    let data = data.slots();
    in_address_order(data);
    lock_logs(data.iter().flatten().copied(), runtime, |logs| {
        record(&mut after.slots().iter().flatten().copied(), logs)
    });
}

/// Sorts declared handles by address, merges a handle declared twice for
/// reading (both references are to the same value), and panics when a
/// handle is declared twice otherwise (a `&mut` beside another reference
/// to the same value). Address order: two submissions lock their common
/// handles in the same order, so they cannot deadlock, and each one's
/// accesses are recorded at once: no task can end up ordered both before
/// and after another.
///
/// Returns whether it merged any: whether a handle is read twice.
pub(crate) fn in_address_order(data: &mut [Option<(&dyn Target, Mode)>]) -> bool {
    data.sort_unstable_by_key(|slot| slot.map(|(t, _)| held::address(t)));
    let mut kept: Option<(&dyn Target, Mode)> = None;
    let mut merged = false;
    for slot in data.iter_mut() {
        let Some((t, mode)) = *slot else { continue };
        if let Some((before, before_mode)) = kept {
            if held::address(before) == held::address(t) {
                if before_mode == Mode::Read && mode == Mode::Read {
                    // One access to the handle, however many reads.
                    *slot = None;
                    merged = true;
                    continue;
                }
                panic!(
                    "selvedge: {} is declared twice by one task ({before_mode:?} and \
                     {mode:?}): a write cannot share its handle with another access of the \
                     same task; declare it once, as a write if the task writes it (two reads \
                     are fine)",
                    t.describe(),
                );
            }
        }
        kept = Some((t, mode));
    }
    merged
}

/// Locks the logs of the handles in `data` (distinct, in address order),
/// all at once, and hands them to `record` with each one's mode and
/// handle. Notes `runtime` as the handles' latest.
pub(crate) fn lock_logs<'t>(
    data: impl Iterator<Item = (&'t dyn Target, Mode)> + Clone,
    runtime: &Arc<Registry>,
    record: impl FnOnce(&mut dyn Iterator<Item = (&mut Log, Mode, &dyn Target)>),
) {
    let mut logs: Few<MutexGuard<'_, Log>> = Few::default();
    for (t, _) in data.clone() {
        let mut log = lock(t.log());
        log.note_runtime(runtime);
        logs.push(log);
    }
    let mut each = logs
        .slots()
        .iter_mut()
        .flatten()
        .map(|g| &mut **g)
        .zip(data)
        .map(|(log, (t, mode))| (log, mode, t));
    record(&mut each);
}

impl<A: Accesses> Submission<A> {
    /// Runs `body` with the declared references, once every access has its
    /// turn (the task's dependencies are fulfilled). `task` names the task
    /// in poison messages.
    pub(crate) fn run<R>(
        mut self,
        task: &'static str,
        body: impl for<'a> FnOnce(A::Refs<'a>) -> R,
    ) -> R {
        let accesses = self.accesses.take().expect("a submission runs once");
        let result = with_turn(&accesses, &format_args!("task `{task}`"), true, body);
        // Lets the next accesses run: the task's handles first (each read
        // drops its handle before its share of the reads, so a waiting
        // `into_inner` finds the value unshared), then its turn.
        drop_or_report("a dropped Data value", accesses);
        if let Some(turn) = self.turn.take() {
            turn.end();
        }
        let behind = self._behind.take();
        // Everything is taken: its drop would find nothing to do (a
        // declared task's hot path).
        std::mem::forget(self);
        drop(behind);
        result.unwrap_or_else(|payload| resume_unwind(payload))
    }
}

/// Runs `body` with the references `accesses` declares, which must all
/// have their turn (every access ordered before them finished, none
/// ordered after them started), and keeps the handles' poison: an access
/// set that declares a poisoned handle refuses to run (unless its access
/// to it is a recover) and poisons what it would have written; a panic in
/// `body` poisons what it writes; a recover access that returns clears the
/// poison. `who` names the code in a poison's cause (``task `...` ``,
/// `graph node '...'`). With `note_held`, the handles are noted as held on
/// this thread while `body` runs (a graph's node passes `false`: its run's
/// handles are held there already).
///
/// Returns the panic's payload (or, for a refusal, a [`CancelledBecause`]
/// saying which handle is poisoned) as `Err`, for the caller to resume once
/// it finished its own bookkeeping.
pub(crate) fn with_turn<A: Accesses, R>(
    accesses: &A,
    who: &dyn fmt::Display,
    note_held: bool,
    body: impl for<'a> FnOnce(A::Refs<'a>) -> R,
) -> Result<R, Box<dyn Any + Send>> {
    // One walk over the accesses: note them as held on this thread (unless
    // the caller does), look for poison (if any handle ever was), and see
    // whether any clears it.
    let mut poisoned = None;
    let mut recovers = false;
    let poison_possible = poison_possible();
    let mut look = |t: &dyn Target, mode: Mode| {
        recovers |= mode == Mode::Recover;
        if poison_possible && poisoned.is_none() && mode != Mode::Recover {
            // SAFETY: every access has its turn (caller).
            if let Some(cause) = unsafe { t.poison() } {
                poisoned = Some((t.describe(), cause));
            }
        }
    };
    let held = if note_held {
        Some(Held::enter(accesses, look))
    } else if !poison_possible && !accesses.recovers() {
        // Nothing to note, to look for or to clear: no walk.
        None
    } else {
        accesses.declare_all(&mut |d| {
            if let Declared::Data(t, mode) = d {
                look(t, mode);
            }
        });
        None
    };
    if let Some((handle, cause)) = poisoned {
        drop(held);
        // What this code would have written is not written either.
        set_written_poison(accesses, Some(&cause), Some(&cause));
        return Err(Box::new(CancelledBecause(poisoned_message(
            &handle, &cause,
        ))));
    }
    // SAFETY: every access has its turn (as above), and the references do
    // not outlive the call: `body` returns owned `R`.
    let result = catch_unwind(AssertUnwindSafe(|| body(unsafe { accesses.refs() })));
    drop(held);
    match result {
        Ok(value) => {
            // A recover access that returned repaired its handle.
            if recovers {
                set_written_poison(accesses, None, None);
            }
            Ok(value)
        }
        Err(payload) => {
            let message = panic_message(&*payload).unwrap_or("(a non-string payload)");
            let cause: Arc<str> =
                format!("{who} panicked while it held a write to it: {message}").into();
            set_written_poison(accesses, Some(&cause), Some(&cause));
            Err(payload)
        }
    }
}

/// Sets the poison of every handle `accesses` writes: `write` for plain
/// writes, `recover` for recover accesses. Every access of `accesses` must
/// have its turn.
pub(crate) fn set_written_poison<A: Accesses>(
    accesses: &A,
    write: Option<&Arc<str>>,
    recover: Option<&Arc<str>>,
) {
    accesses.declare_all(&mut |d| {
        if let Declared::Data(t, mode) = d {
            let cause = match mode {
                Mode::Read => return,
                Mode::Write if write.is_none() => return,
                Mode::Write => write,
                Mode::Recover => recover,
            };
            // SAFETY: the write has its turn (caller).
            unsafe { t.set_poison(cause.cloned()) };
        }
    });
}

impl<A> Drop for Submission<A> {
    /// Dropped unrun (the task was cancelled): the handles, which it did
    /// not touch, go on in order: the turn passes to the next accesses
    /// once the ones before it are over.
    fn drop(&mut self) {
        if let Some(accesses) = self.accesses.take() {
            drop_or_report("a dropped Data value", accesses);
        }
        drop(self.turn.take());
    }
}

/// Spawns `f` as a task that declares the accesses `accesses`, and
/// returns its handle. The task runs once each access has its turn (see
/// [`Data`](crate::Data) for the order), and `f` receives the references:
/// `&T` for a [`Data::read`](crate::Data::read), `&mut T` for a
/// [`Data::write`](crate::Data::write), `()` for a [`Dep`], in the shape of
/// `accesses` (one access, a tuple, a `Vec` or an array).
///
/// On a worker the task belongs to that worker's runtime; elsewhere to the
/// global runtime ([`Runtime::spawn_with`](crate::Runtime::spawn_with)
/// chooses). Submission takes a short lock on each declared handle's
/// ordering state; reaching the value takes none.
///
/// # Panics
/// When `accesses` declares one handle twice, other than for two reads
/// (the closure is dropped and
/// nothing is registered).
///
/// ```
/// use selvedge::{spawn_with, Data};
///
/// let a = Data::new(vec![1.0f64; 4]);
/// let b = Data::new(vec![0.0f64; 4]);
/// spawn_with((a.read(), b.write()), |(a, b)| b.copy_from_slice(a)).detach();
/// let h = spawn_with((a.write(), b.read()), |(a, b)| {
///     // Ordered after the copy (it writes what the copy read).
///     a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
///     a.iter().sum::<f64>()
/// });
/// assert_eq!(h.join(), 8.0);
/// ```
pub fn spawn_with<A, F, R>(accesses: A, f: F) -> JoinHandle<R>
where
    A: Accesses + 'static,
    F: for<'a> FnOnce(A::Refs<'a>) -> R + Send + 'static,
    R: Send + 'static,
{
    spawn_with_on(current_registry(), accesses, f)
}

/// [`spawn_with`] on `runtime`: what it, `Runtime::spawn_with` and the
/// GPU tasks share.
pub(crate) fn spawn_with_on<A, F, R>(runtime: &Arc<Registry>, accesses: A, f: F) -> JoinHandle<R>
where
    A: Accesses + 'static,
    F: for<'a> FnOnce(A::Refs<'a>) -> R + Send + 'static,
    R: Send + 'static,
{
    let Ok(Submitted {
        mut deps,
        submission,
        behind,
    }) = declare(accesses, runtime, None)
    else {
        unreachable!("only a scope's submission is refused")
    };
    let handle = delayed::spawn_delayed_on_as::<F, _, _, _>(runtime, deps.take_all(), move || {
        // `f` first: a task cancelled unrun drops the user's closure (and
        // the handles it captured) before its submission passes the turn.
        let f = f;
        submission.run(std::any::type_name::<F>(), f)
    });
    if let Some(behind) = behind {
        behind.note(handle.block());
    }
    handle
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Data;

    /// A handle read twice by one task is one record with one share of the
    /// version's reads: the share must go to the read a tuple or a vector
    /// drops last, so that when the reads are over (a waiting `into_inner`
    /// may wake) no handle of the task is left.
    #[test]
    fn a_handle_read_twice_gives_its_share_to_the_read_dropped_last() {
        let (a, b) = (Data::new(1), Data::new(2));
        let runtime = current_registry();
        let Ok(t) = declare((a.read(), b.write(), a.read()), runtime, None) else {
            unreachable!()
        };
        let (first, _, last) = t.submission.accesses.as_ref().unwrap();
        assert!(!first.holds_share() && last.holds_share());
        let Ok(v) = declare(vec![a.read(), a.read(), a.read()], runtime, None) else {
            unreachable!()
        };
        let held: Vec<bool> = v
            .submission
            .accesses
            .as_ref()
            .unwrap()
            .iter()
            .map(|r| r.holds_share())
            .collect();
        assert_eq!(held, [false, false, true]);
    }
}
