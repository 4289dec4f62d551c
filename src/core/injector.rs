//! The runtime's queue of tasks from outside the deques: submitted from
//! other threads, or shared with parked workers (which send no steal
//! requests).
//!
//! It is a bounded queue whose slots are allocated once, with an unbounded
//! one behind it for overflow. Most of the time it holds a task or two (a
//! worker shares one task with sleepers at a time), and an unbounded
//! segment queue would allocate a segment every few dozen pushes even then:
//! a program that runs the same work again and again (a graph replayed, a
//! spawn loop with parked workers) would allocate in its steady state.
//!
//! Order: while the overflow queue holds tasks, new ones go there too, so a
//! task that overflowed is not overtaken forever by tasks that find room in
//! the bounded queue later. Between the two queues the order is roughly
//! first in, first out; nothing depends on it (the injector never promised
//! an order among concurrent pushers).
//!
//! Both queues are crossbeam's lock-free queues; the injector adds no
//! synchronization of its own: each task is pushed into exactly one of the
//! two, and every pop, emptiness check and drain looks at both.

use crate::core::task::TaskRef;
use crossbeam_queue::{ArrayQueue, SegQueue};

/// Tasks the bounded queue holds before new ones overflow.
const BOUNDED: usize = 256;

/// See the module docs.
pub(crate) struct Injector {
    bounded: ArrayQueue<TaskRef>,
    overflow: SegQueue<TaskRef>,
}

impl Injector {
    pub(crate) fn new() -> Self {
        Self {
            bounded: ArrayQueue::new(BOUNDED),
            overflow: SegQueue::new(),
        }
    }

    /// Queues `task`: in the bounded queue while it has room and nothing
    /// overflowed, else in the overflow queue.
    #[inline]
    pub(crate) fn push(&self, task: TaskRef) {
        let task = if self.overflow.is_empty() {
            match self.bounded.push(task) {
                Ok(()) => return,
                Err(task) => task,
            }
        } else {
            task
        };
        self.overflow.push(task);
    }

    /// Takes a task, from the bounded queue first.
    #[inline]
    pub(crate) fn pop(&self) -> Option<TaskRef> {
        self.bounded.pop().or_else(|| self.overflow.pop())
    }

    /// Whether both queues are empty (a snapshot, as any queue's).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.bounded.is_empty() && self.overflow.is_empty()
    }

    /// How many tasks are queued (a snapshot).
    pub(crate) fn len(&self) -> usize {
        self.bounded.len() + self.overflow.len()
    }
}

impl std::fmt::Debug for Injector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Injector")
            .field("len", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::{Injector, BOUNDED};
    use crate::core::closure_task;
    use std::sync::{Arc, Mutex};

    /// A task that notes `i` in `order` when it runs.
    fn noting(order: &Arc<Mutex<Vec<usize>>>, i: usize) -> super::TaskRef {
        let order = Arc::clone(order);
        closure_task::new_detached(move || order.lock().unwrap().push(i))
    }

    #[test]
    fn tasks_that_overflowed_are_not_overtaken_by_later_ones() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let injector = Injector::new();
        // The bounded queue full, and 10 more in the overflow.
        let first = BOUNDED + 10;
        for i in 0..first {
            injector.push(noting(&order, i));
        }
        assert_eq!(injector.len(), first);
        // Room again in the bounded queue; later tasks must still queue
        // behind the ones that overflowed.
        for _ in 0..5 {
            injector.pop().unwrap().run();
        }
        for i in first..first + 5 {
            injector.push(noting(&order, i));
        }
        while let Some(t) = injector.pop() {
            t.run();
        }
        assert!(injector.is_empty());
        assert_eq!(*order.lock().unwrap(), (0..first + 5).collect::<Vec<_>>());
    }
}
