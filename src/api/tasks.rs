//! The free functions: spawning and waiting on the current runtime (the
//! calling worker's, else the global one).

use crate::core::closure_task;
use crate::core::handle::JoinHandle;
use crate::core::pool::{current_registry, global_runtime};
use crate::core::trace::naming;
use crate::core::worker::Worker;

/// Spawns `f` as a task and returns its handle. On a worker the task goes on
/// that worker's own deque; elsewhere it is submitted to the global runtime.
///
/// ```
/// fn fib(n: u64) -> u64 {
///     if n < 2 {
///         return n;
///     }
///     let a = selvedge::spawn(move || fib(n - 1));
///     let b = fib(n - 2);
///     a.join() + b
/// }
/// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
/// assert_eq!(rt.run(|| fib(20)), 6765);
/// ```
#[inline]
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match Worker::current() {
        Some(w) => {
            let task = closure_task::new_handled_in(w.own_pool(), f);
            task.name_if_naming(w);
            // SAFETY: `F` and `T` are 'static.
            let handle = unsafe { JoinHandle::new(&task) };
            let pos = w.push(task);
            handle.spawned_at(pos)
        }
        None => global_runtime().spawn(f),
    }
}

/// Runs `f`; every task that `f` makes on this thread (spawned, delayed,
/// declared, a scope's, a parallel loop's parts, a GPU task, a graph run's
/// nodes excepted) is named `name` in the runtime's trace. The name of an
/// inner `named` wins. Tasks that this thread runs while `f` waits (work a
/// waiting worker picks up meanwhile) are not made by `f`, and keep their
/// own names. Without the `trace` feature this only calls `f`.
///
/// ```
/// use selvedge::{named, parallel_for, spawn_delayed, Promise};
///
/// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
/// rt.run(|| {
///     let p = Promise::new();
///     let after = named("stage 2", || spawn_delayed([p.dep()], || 2));
///     named("stage 1", || parallel_for(0..64).for_each(|_| {}));
///     p.fulfill();
///     assert_eq!(after.join(), 2);
/// });
/// ```
#[inline]
pub fn named<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
    naming::named(name, f)
}

/// The number of worker threads of the current runtime (the global one from
/// outside any runtime).
///
/// ```
/// let rt = selvedge::Runtime::builder().num_threads(3).build().unwrap();
/// assert_eq!(rt.run(selvedge::current_num_threads), 3);
/// ```
pub fn current_num_threads() -> usize {
    current_registry().num_threads()
}
