//! `scope`: tasks that may borrow from the caller's stack, all waited for
//! before `scope` returns (the first panic among them resumed after).

use crate::core::closure_task;
use crate::core::latch::CountLatch;
use crate::core::pool::on_worker;
use crate::core::registry::Registry;
use crate::core::schedule::Arrival;
use crate::core::send_ptr::SendPtr;
use crate::core::unwind::{self, FirstPanic};
use crate::core::worker::{Until, Worker};
use crate::dataflow::access::Accesses;
use crate::dataflow::declared::{self, Submitted};
use crate::dataflow::delayed;
use crate::dataflow::event::Dep;
use crate::dataflow::held;
use std::any::Any;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// A scope in which tasks may borrow from the enclosing stack frame.
/// Created by [`scope`].
///
/// ```
/// let mut counts = [0usize; 4];
/// selvedge::scope(|s| {
///     for (i, c) in counts.iter_mut().enumerate() {
///         s.spawn(move |_| *c = i * i);
///     }
/// });
/// assert_eq!(counts, [0, 1, 4, 9]);
/// ```
pub struct Scope<'scope> {
    /// Unfinished tasks, plus one for the scope's own body; the owner
    /// worker waits on it.
    latch: CountLatch<Registry>,
    /// The owner worker's handle on its runtime (the worker outlives the
    /// scope, which it is running).
    runtime: *const Arc<Registry>,
    panic: FirstPanic,
    /// The `Data` handles held where the scope was made (by the task that
    /// made it, or a graph run one of whose nodes made it): the scope waits
    /// for its tasks, so none may wait for those accesses.
    owner_holds: Option<Box<held::Snapshot>>,
    /// Invariant in `'scope`, as std's scoped threads.
    _borrows: PhantomData<&'scope mut &'scope ()>,
}

// SAFETY: `runtime` points to the owner worker's `Arc<Registry>`, which lives
// for the whole scope and is only read; everything else is Sync.
unsafe impl Sync for Scope<'_> {}
// SAFETY: as above.
unsafe impl Send for Scope<'_> {}

impl std::fmt::Debug for Scope<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scope")
            .field("latch", &self.latch)
            .finish_non_exhaustive()
    }
}

/// Runs `f` with a [`Scope`] whose tasks may borrow anything that outlives
/// the call, and returns once `f` and every task spawned in the scope (by
/// `f` or by those tasks) finished. If any of them panicked, the first
/// panic is resumed after all finished.
///
/// On a worker it runs in place, and the worker keeps working while it
/// waits; elsewhere it runs on the global runtime and blocks the caller.
///
/// ```
/// let words = vec!["a", "bb", "ccc"];
/// let mut lengths = vec![0; words.len()];
/// selvedge::scope(|s| {
///     for (w, len) in words.iter().zip(lengths.iter_mut()) {
///         s.spawn(move |_| *len = w.len());
///     }
/// });
/// assert_eq!(lengths, [1, 2, 3]);
/// ```
pub fn scope<'scope, F, R>(f: F) -> R
where
    F: FnOnce(&Scope<'scope>) -> R + Send,
    R: Send,
{
    on_worker(|w| {
        let scope = Scope {
            latch: CountLatch::new(w.index, &w.shared),
            runtime: &w.shared,
            panic: FirstPanic::new(),
            owner_holds: held::snapshot(),
            _borrows: PhantomData,
        };
        let body = catch_unwind(AssertUnwindSafe(|| f(&scope)));
        if !scope.latch.release_own() {
            w.wait_until(Until::Latch(&scope.latch));
        }
        let recorded = scope.take_panic();
        match body {
            Ok(value) => match recorded {
                Some(p) => {
                    unwind::drop_or_report("the value of a panicking scope's body", value);
                    resume_unwind(p)
                }
                None => value,
            },
            Err(p) => {
                // The body's panic wins; a task's is dropped first, since
                // its destructor (user code) would abort the process if it
                // panicked while this one unwinds.
                if let Some(task_panic) = recorded {
                    unwind::drop_or_report("the payload of a task's panic in a scope", task_panic);
                }
                resume_unwind(p)
            }
        }
    })
}

impl<'scope> Scope<'scope> {
    /// Spawns `f` in this scope. It may borrow anything that outlives the
    /// scope, and receives the scope to spawn more.
    ///
    /// ```
    /// let total = std::sync::atomic::AtomicU64::new(0);
    /// selvedge::scope(|s| {
    ///     s.spawn(|s| {
    ///         s.spawn(|_| { total.fetch_add(1, std::sync::atomic::Ordering::Relaxed); });
    ///         total.fetch_add(10, std::sync::atomic::Ordering::Relaxed);
    ///     });
    /// });
    /// assert_eq!(total.into_inner(), 11);
    /// ```
    pub fn spawn<F>(&self, f: F)
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        let scope = SendPtr::from_ref(self);
        // Not a `ScopeMember`: a spawned task always runs, and the plain
        // closure keeps the hottest path of nested scopes lean.
        let task = closure_task::new_detached(move || {
            // SAFETY: the scope outlives its tasks: its owner waits for the
            // latch, which this task releases last.
            let scope = unsafe { &*scope.get() };
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(scope))) {
                scope.record_panic(p);
            }
            // It runs on a worker of the scope's runtime: it is queued
            // there, and a plain spawned task is never cancelled while its
            // scope waits.
            let here = Worker::current().map(|w| w.index);
            if here.is_some_and(|i| scope.latch.is_owner(i)) {
                // SAFETY: this is the owner's thread, and this task holds a
                // count, released once, here.
                unsafe { scope.latch.decrement_local() };
            } else {
                // SAFETY: this task holds a count, released once, here, on
                // a worker of the scope's runtime (above).
                unsafe { CountLatch::decrement_on_worker(&raw const scope.latch) };
            }
        });
        let here = Worker::current();
        task.name_after_on::<F>(here);
        match here {
            Some(w)
                if self.latch.is_owner(w.index) && std::ptr::eq(&*w.shared, &**self.runtime()) =>
            {
                // SAFETY: this is the owner's thread (its worker), and the
                // caller holds a count (the body's, or its own task's).
                unsafe { self.latch.increment_local() };
                w.push(task);
            }
            _ => {
                self.latch.increment();
                self.runtime().schedule(task, Arrival::Spawned);
            }
        }
    }

    /// Spawns `f` in this scope to run once every dependency in `deps` is
    /// fulfilled (see [`crate::spawn_delayed`]). The scope waits for it
    /// too. If a dependency is dropped unfulfilled, the task is cancelled
    /// and the scope, once everything else finished, panics saying so.
    ///
    /// ```
    /// use selvedge::{scope, Promise};
    /// use std::sync::Mutex;
    ///
    /// let log = Mutex::new(Vec::new());
    /// scope(|s| {
    ///     let log = &log;
    ///     let produced = Promise::new();
    ///     s.spawn_delayed([produced.dep()], move |_| log.lock().unwrap().push("consume"));
    ///     s.spawn(move |_| {
    ///         log.lock().unwrap().push("produce");
    ///         produced.fulfill();
    ///     });
    /// });
    /// assert_eq!(*log.lock().unwrap(), ["produce", "consume"]);
    /// ```
    pub fn spawn_delayed<D, F>(&self, deps: D, f: F)
    where
        D: IntoIterator<Item = Dep>,
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        let task = self.new_task(f);
        delayed::delay::<F>(self.runtime(), task, deps);
    }

    /// Spawns `f` in this scope as a task that declares the accesses
    /// `accesses` (see [`crate::spawn_with`] for the order): `f` receives
    /// the scope and the references, and may borrow from outside the scope.
    /// The scope waits for it too; a panic in it (or its cancellation,
    /// because a handle it declared is poisoned) is resumed when the scope
    /// ends.
    ///
    /// ```
    /// use selvedge::{scope, Data};
    ///
    /// let weights = vec![0.5f64; 8]; // borrowed by the tasks
    /// let acc = Data::new(vec![0.0f64; 8]);
    /// scope(|s| {
    ///     for _ in 0..4 {
    ///         s.spawn_with(acc.write(), |_, acc| {
    ///             acc.iter_mut().zip(&weights).for_each(|(a, w)| *a += w);
    ///         });
    ///     }
    /// });
    /// assert_eq!(acc.into_inner(), [2.0; 8]);
    /// ```
    ///
    /// # Panics
    /// When `accesses` declares one handle twice, other than for two
    /// reads; and when one of them is
    /// ordered after an access held by the code that made the scope (a
    /// task that declared the handle, or a node of a graph run that
    /// declares it): the scope would wait for this task, which would wait
    /// for the scope's maker to return. Nothing is submitted then.
    pub fn spawn_with<A, F>(&self, accesses: A, f: F)
    where
        A: Accesses + 'scope,
        F: for<'a> FnOnce(&Scope<'scope>, A::Refs<'a>) + Send + 'scope,
    {
        let submitted = declared::declare(accesses, self.runtime(), self.owner_holds.as_deref());
        let Submitted {
            mut deps,
            submission,
            ..
        } = submitted.unwrap_or_else(|conflict| panic!("{}", conflict.scope_message()));
        let task = self.new_task(move |s| {
            // `f` first: a task cancelled unrun drops the user's closure
            // (and the handles it captured) before its submission passes
            // the turn.
            let f = f;
            submission.run(std::any::type_name::<F>(), move |refs| f(s, refs))
        });
        delayed::delay::<F>(self.runtime(), task, deps.take_all());
    }

    fn runtime(&self) -> &Arc<Registry> {
        // SAFETY: the owner worker keeps its `Arc<Registry>` for the scope's
        // whole life, and tasks of the scope only run within it.
        unsafe { &*self.runtime }
    }

    /// A detached task running `f` that the scope counts until it ran or
    /// was dropped unrun (cancelled).
    fn new_task<F>(&self, f: F) -> crate::core::task::TaskRef
    where
        F: FnOnce(&Scope<'scope>) + Send + 'scope,
    {
        self.latch.increment();
        let mut member = ScopeMember {
            scope: SendPtr::from_ref(self),
            ran: false,
            _scope: PhantomData::<&Scope<'scope>>,
        };
        let task = closure_task::new_detached(move || {
            member.ran = true;
            let scope = member.scope();
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| f(scope))) {
                scope.record_panic(p);
            }
            // `member` drops here and counts the task finished.
        });
        task.name_after::<F>();
        task
    }

    fn record_panic(&self, payload: Box<dyn Any + Send>) {
        self.panic
            .keep(payload, "the payload of a later panic in a scope");
    }

    fn take_panic(&self) -> Option<Box<dyn Any + Send>> {
        self.panic.take()
    }

    /// Counts one task of the scope finished. Nothing of the scope is
    /// touched afterwards: the owner may return and free it at once.
    ///
    /// # Safety
    /// The calling task holds a count of the latch and releases it once.
    unsafe fn finish_task(scope: *const Self) {
        let current = Worker::current().map(|w| &w.shared);
        // SAFETY: per the caller, and the count keeps the scope alive
        // until the decrement.
        unsafe { CountLatch::decrement(&raw const (*scope).latch, current) };
    }
}

/// A scope's claim on one of its tasks, moved into the task's closure: it
/// counts the task finished when dropped, after running or unrun.
struct ScopeMember<'a, 'scope> {
    scope: SendPtr<Scope<'scope>>,
    ran: bool,
    _scope: PhantomData<&'a Scope<'scope>>,
}

impl<'a, 'scope> ScopeMember<'a, 'scope> {
    fn scope(&self) -> &'a Scope<'scope> {
        // SAFETY: the scope outlives its tasks: its owner waits for the
        // latch, which a member releases last.
        unsafe { &*self.scope.get() }
    }
}

impl Drop for ScopeMember<'_, '_> {
    fn drop(&mut self) {
        if !self.ran {
            // A member is dropped unrun only when its task is cancelled,
            // which says why.
            let why = closure_task::cancellation_in_progress()
                .unwrap_or(crate::core::error::Cancellation::DependencyDropped);
            self.scope().record_panic(Box::new(format!(
                "selvedge: a task of this scope was cancelled: {why}"
            )));
        }
        // SAFETY: the member holds the task's count, released once, here.
        unsafe { Scope::finish_task(self.scope.get()) };
    }
}
