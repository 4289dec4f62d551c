//! Parallel loops, split lazily: a loop is one part until an idle worker
//! asks for work (see `README.md` in this folder).

pub(crate) mod merge;
#[cfg(not(loom))]
mod parallel_for;

#[cfg(not(loom))]
pub use parallel_for::*;
