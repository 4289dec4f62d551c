//! Structured parallelism: `scope` and `join`, which wait for what they
//! start and so may borrow from the caller's stack.

pub(crate) mod join;
pub(crate) mod scope;
pub(crate) mod stack_job;
