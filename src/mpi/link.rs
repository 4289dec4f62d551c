//! Posting an operation: its handle's promise and slot, the closures that
//! set the outcome and fulfill the promise, and the checks on ranks, tags
//! and counts. What posts on the cluster's behalf after the caller let go
//! holds a [`Link`], not the cluster.

use super::engine::Engine;
use super::message::{Message, Outcome, Slot};
use super::op::{Kind, Op, Outcome as Ended};
use super::{Element, MpiError};
use crate::core::registry::Registry;
use crate::core::sync::lock;
use crate::dataflow::promise::Promise;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// What posting an operation needs: the engine, and the bounds ranks and
/// tags are checked against. Held by what posts on the cluster's behalf
/// after the caller let go (a `send_after`'s task, a graph's completions):
/// it does not keep the cluster, so MPI is finalized when the last
/// [`Cluster`](super::Cluster) handle goes, not when a pending
/// completion does.
#[derive(Clone)]
pub(super) struct Link {
    pub(super) engine: Arc<Engine>,
    pub(super) size: usize,
    pub(super) tag_ub: i32,
}

impl Link {
    /// Posts an operation whose buffers are `owned`; `done` makes the
    /// handle's value from them once the operation completed.
    pub(super) fn post<T, B>(
        &self,
        kind: Kind,
        owned: B,
        done: impl FnOnce(Ended, B) -> Result<Vec<T>, MpiError> + Send + 'static,
    ) -> Message<T>
    where
        T: Element,
        B: Send + 'static,
    {
        let promise = Promise::new();
        let dep = promise.dep();
        let slot: Slot<T> = Arc::new(Outcome::new());
        self.post_with(kind, owned, done, promise, Arc::clone(&slot));
        Message {
            dep,
            slot,
            registry: Arc::clone(&self.engine.registry),
        }
    }

    /// [`Link::post`] with the handle's promise (or what to call when
    /// the operation ends) and slot made already.
    pub(super) fn post_with<T, B>(
        &self,
        kind: Kind,
        owned: B,
        done: impl FnOnce(Ended, B) -> Result<Vec<T>, MpiError> + Send + 'static,
        then: impl Into<Then<T>>,
        slot: Slot<T>,
    ) where
        T: Element,
        B: Send + 'static,
    {
        let in_finish = Arc::clone(&slot);
        let finish: Box<dyn FnOnce(Ended) + Send> = Box::new(move |outcome: Ended| {
            let result = match outcome {
                Ended::Failed(e) => Err(e),
                Ended::Leaked => {
                    // MPI may still use the buffers: never freed.
                    std::mem::forget(owned);
                    Err(MpiError::Abandoned)
                }
                done_outcome => done(done_outcome, owned),
            };
            in_finish.set(result);
        });
        let then = then.into();
        let action = Box::new(move || {
            // `finish` ran before the signal fired.
            match then {
                Then::Fulfill(promise) => {
                    if slot.is_ok() {
                        promise.fulfill();
                    }
                    // Otherwise the promise is dropped here: broken.
                }
                Then::Call(f) => f(lock(&slot.value).take().unwrap_or(Err(MpiError::Abandoned))),
            }
        });
        // The signal is made through the runtime's shutdown gate: once the
        // runtime's drop began (and the caller is not one of its workers),
        // no worker may be left to run the action, and the runtime would
        // not wait for it: the operation is refused before MPI sees it.
        match self.engine.registry.signal_unless_shut_down(action) {
            Ok(signal) => self.engine.post(Op {
                kind,
                finish,
                signal,
            }),
            Err(action) => {
                // Never started: the buffers go with `finish`.
                finish(Ended::Failed(MpiError::RuntimeShutDown));
                // Dropped unrun, after the outcome was set: the promise
                // breaks (its dependents are cancelled), a `then` is
                // dropped uncalled.
                drop(action);
            }
        }
    }

    /// [`Cluster::isend`](super::Cluster::isend) that calls `then` with the outcome on a worker
    /// when the send ended, instead of handing out a handle (`then` is
    /// dropped uncalled if the send never reached MPI).
    pub(super) fn isend_then<T: Element>(
        &self,
        buf: Vec<T>,
        dest: usize,
        tag: i32,
        then: impl FnOnce(Result<Vec<T>, MpiError>) + Send + 'static,
    ) {
        self.check_rank("isend to", dest);
        self.check_tag("isend", tag);
        let kind = send("isend", &buf, dest, tag);
        let then = Then::Call(Box::new(then));
        self.post_with(kind, buf, |_, buf| Ok(buf), then, Arc::new(Outcome::new()));
    }

    /// [`Cluster::irecv`](super::Cluster::irecv) that calls `then` with the outcome on a worker
    /// when the receive ended (cancelled by the cluster's drop, it ends
    /// with [`MpiError::Abandoned`]; `then` is dropped uncalled if the
    /// receive never reached MPI).
    pub(super) fn irecv_then<T: Element>(
        &self,
        len: usize,
        source: usize,
        tag: i32,
        then: impl FnOnce(Result<Vec<T>, MpiError>) + Send + 'static,
    ) {
        self.check_rank("irecv from", source);
        self.check_tag("irecv", tag);
        let (kind, buf) = receive(len, source, tag);
        let then = Then::Call(Box::new(then));
        self.post_with(
            kind,
            buf,
            move |outcome, buf| received(outcome, buf, len),
            then,
            Arc::new(Outcome::new()),
        );
    }

    /// The runtime its completions run on.
    pub(super) fn registry(&self) -> &Arc<Registry> {
        &self.engine.registry
    }

    pub(super) fn check_rank(&self, what: &str, rank: usize) {
        assert!(
            rank < self.size,
            "selvedge::mpi: {what} rank {rank}, but the cluster has {} ranks (0..{})",
            self.size,
            self.size
        );
    }

    pub(super) fn check_tag(&self, what: &str, tag: i32) {
        assert!(
            (0..=self.tag_ub).contains(&tag),
            "selvedge::mpi: {what} with tag {tag}, outside 0..={} (this MPI library's MPI_TAG_UB)",
            self.tag_ub
        );
    }
}

/// A send of `buf` (`what` names the call for a count too large).
pub(super) fn send<T: Element>(what: &str, buf: &[T], dest: usize, tag: i32) -> Kind {
    Kind::Send {
        buf: buf.as_ptr().cast::<c_void>(),
        count: count_of(what, buf.len()),
        datatype: T::datatype(),
        dest: dest as c_int,
        tag,
    }
}

/// A receive of `len` elements: its operation and its buffer.
pub(super) fn receive<T: Element>(len: usize, source: usize, tag: i32) -> (Kind, Vec<T>) {
    let count = count_of("irecv", len);
    let mut buf: Vec<T> = Vec::with_capacity(len);
    let kind = Kind::Recv {
        buf: buf.as_mut_ptr().cast::<c_void>(),
        count,
        datatype: T::datatype(),
        source: source as c_int,
        tag,
    };
    (kind, buf)
}

/// A completed receive's value: the buffer, if the message had `len`
/// elements.
pub(super) fn received<T: Element>(
    outcome: Ended,
    mut buf: Vec<T>,
    len: usize,
) -> Result<Vec<T>, MpiError> {
    let Ended::Done { count, source, tag } = outcome else {
        unreachable!("finish handles failures")
    };
    if count != len {
        return Err(MpiError::Length {
            expected: len,
            got: count,
            source,
            tag,
        });
    }
    // SAFETY: MPI wrote `len` elements of a type for which every bit
    // pattern is a value (a predefined numeric type).
    unsafe { buf.set_len(len) };
    Ok(buf)
}

/// What an operation's completion does: fulfill its handle's promise
/// (broken if it failed), or call a function with its outcome.
pub(super) enum Then<T> {
    Fulfill(Promise),
    Call(Box<dyn FnOnce(Result<Vec<T>, MpiError>) + Send>),
}

impl<T> From<Promise> for Then<T> {
    fn from(promise: Promise) -> Self {
        Then::Fulfill(promise)
    }
}

/// The element count of an operation, which MPI takes as an `int`.
pub(super) fn count_of(what: &str, len: usize) -> c_int {
    c_int::try_from(len).unwrap_or_else(|_| {
        panic!(
            "selvedge::mpi: {what} of {len} elements, more than MPI's int count allows ({})",
            c_int::MAX
        )
    })
}
