//! `Debug` for the protocol's public types: what a test or a log needs to
//! tell them apart, without following the pointers they hold.

use super::{Dep, Waiter};

impl std::fmt::Debug for Dep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dep")
            .field("event", &self.event)
            .field("fulfilled", &self.is_fulfilled())
            .finish()
    }
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter")
            .field("deps", &self.deps.as_slice().len())
            .finish_non_exhaustive()
    }
}
