//! The CPU tasks' reads of one version of a `Data` handle (those recorded
//! since its last write), as one completion, which the next write waits
//! for.
//!
//! Each read task holds a [`ReadShare`]; the handle's log holds the
//! [`Readers`], which counts the shares it hands out. The count in the
//! promise group (`event.rs`) starts far above any number of reads: each
//! share dropped takes one off, and the log, once it closes the group
//! (when the next write is recorded, when something waits for every
//! pending access, or when the handle goes), takes off the rest of the
//! head start. Whoever brings it to zero fulfills the completion. So
//! handing out a share is a plain increment under the log's lock, nothing
//! the threads running the reads touch, and a read costs its task one
//! atomic decrement: the reads between two writes need one completion
//! between them, not one each.
//!
//! A read task cancelled before it ran drops its share unrun, at once:
//! whatever waits for a version's reads (the next write, a wait for every
//! pending access) also waits for the write that made the version, which
//! every one of those reads came after.

use crate::dataflow::event::{Dep, Group};
use crate::dataflow::settle::settle;
use std::ptr::NonNull;

/// The head start of a version's count: more shares than could ever be
/// handed out.
const HEAD_START: usize = usize::MAX / 2;

/// A version's reads, as its handle's log holds them (see the module docs).
pub(crate) struct Readers {
    group: NonNull<Group>,
    /// Shares handed out.
    shared: usize,
}

/// A read task's share of its version's reads: dropping it ends the read.
pub struct ReadShare {
    group: NonNull<Group>,
}

// SAFETY: the group is shared through atomics only, and the shares' ref
// keeps it alive until the last share is dropped, on whichever thread.
unsafe impl Send for Readers {}
// SAFETY: as above; `&Readers` only reads.
unsafe impl Sync for Readers {}
// SAFETY: as above.
unsafe impl Send for ReadShare {}
// SAFETY: as above; `&ReadShare` gives access to nothing.
unsafe impl Sync for ReadShare {}

impl Readers {
    /// The reads of a new version, none yet.
    pub(crate) fn new() -> Self {
        let group = Group::new(1);
        // SAFETY: the new group's one handle is ours: it becomes the head
        // start.
        unsafe { Group::add_shares(group, HEAD_START - 1) };
        Self { group, shared: 0 }
    }

    /// Whether it has handed out as many shares as its head start allows
    /// (the log then closes it and starts another).
    pub(crate) fn is_full(&self) -> bool {
        self.shared == HEAD_START - 1
    }

    /// A share for one more read.
    ///
    /// # Panics
    /// When it [`is_full`](Readers::is_full): the count would reach zero
    /// while the group is open.
    pub(crate) fn share(&mut self) -> ReadShare {
        assert!(!self.is_full(), "selvedge: a group of reads past its count");
        // Counted ahead (the head start): nothing shared is touched.
        self.shared += 1;
        ReadShare { group: self.group }
    }

    /// The completion: fulfilled once every share is dropped and the
    /// version closed (`self` dropped).
    pub(crate) fn dep(&self) -> Dep {
        // SAFETY: the head start keeps the group alive; it has one event.
        unsafe { Group::dep(self.group, 0) }
    }
}

impl Drop for Readers {
    /// Closes the version to new reads: the completion comes once the
    /// shares handed out are dropped.
    fn drop(&mut self) {
        // SAFETY: the head start, less the shares handed out, is ours.
        unsafe { Group::release_shares(self.group, HEAD_START - self.shared, settle) };
    }
}

impl Drop for ReadShare {
    fn drop(&mut self) {
        // SAFETY: we give up our share.
        unsafe { Group::release_shares(self.group, 1, settle) };
    }
}
