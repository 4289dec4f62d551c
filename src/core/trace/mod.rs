//! The timeline trace (feature `trace`): each worker appends timestamped
//! events (tasks run, steal requests, parking, promises making tasks
//! ready, loop splits, device completions) to a ring of its own, and the
//! runtime writes them as a Chrome trace-event JSON file that Perfetto and
//! `chrome://tracing` open.
//!
//! Without the feature only [`names`] and [`naming`] are compiled, and
//! `named` just calls its closure: no event, clock read or field exists anywhere else.
//!
//! - `ring.rs`: the single-writer event ring a reader may copy while its
//!   writer goes on (the one concurrent protocol here; a loom model).
//! - `record.rs`: the events, the per-runtime `Tracer`, flows (the arrows
//!   from a fulfill or a steal to the task it sends on).
//! - `chrome.rs`: writing the JSON.
//! - `names.rs`: the names a user gives to the tasks it makes, and a
//!   task's name as another thread may read it.
//! - `naming.rs`: `named`, which gives them, telling the thread's worker.

#[cfg(all(feature = "trace", not(loom)))]
mod chrome;
#[cfg(not(loom))]
pub(crate) mod names;
#[cfg(not(loom))]
pub(crate) mod naming;
#[cfg(all(feature = "trace", not(loom)))]
pub(crate) mod record;
#[cfg(any(feature = "trace", loom))]
pub(crate) mod ring;

#[cfg(all(feature = "trace", not(loom)))]
pub(crate) use chrome::write;
