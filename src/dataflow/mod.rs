//! Dataflow: promises any thread can fulfill, and tasks that wait for them
//! without blocking a thread (see `docs/ARCHITECTURE.md`).

#[cfg(not(loom))]
pub(crate) mod access;
pub(crate) mod bucket_counts;
pub(crate) mod claim;
#[cfg(not(loom))]
pub(crate) mod data;
#[cfg(not(loom))]
pub(crate) mod declared;
#[cfg(not(loom))]
pub(crate) mod delayed;
pub(crate) mod dep_list;
pub(crate) mod event;
#[cfg(not(loom))]
pub(crate) mod few;
#[cfg(not(loom))]
pub(crate) mod held;
pub(crate) mod inline_vec;
#[cfg(not(loom))]
pub(crate) mod log;
#[cfg(not(loom))]
pub(crate) mod loop_promise;
#[cfg(not(loom))]
pub(crate) mod mode;
#[cfg(not(loom))]
pub(crate) mod promise;
#[cfg(not(loom))]
pub(crate) mod readers;
pub(crate) mod run_record;
#[cfg(not(loom))]
pub(crate) mod settle;
#[cfg(not(loom))]
pub(crate) mod task_dep;
#[cfg(not(loom))]
pub(crate) mod turn;
#[cfg(not(loom))]
pub(crate) mod turn_deps;
