//! The private per-worker deque.
//!
//! Only its owner touches it, so it is a plain ring buffer: push and pop at
//! the head (newest) with no atomics and no fences. Thieves never touch it;
//! when the owner answers a steal request it takes from the tail (oldest),
//! one task or half.
//!
//! Positions are absolute (`taken_from_tail + index`), so a frame can
//! remember where its own children start ([`Deque::top`]) and pop only those,
//! and a join can find its task in O(1) from the position [`Deque::push`]
//! returned, even after thieves took older tasks. A task removed from the
//! middle leaves a hole (`None`) that pops skip, so positions never shift.

use crate::task::{TaskBlock, TaskRef};
use std::collections::VecDeque;
use std::ptr::NonNull;

pub(crate) struct Deque {
    slots: VecDeque<Option<TaskRef>>,
    /// Slots ever removed from the tail.
    taken_from_tail: u64,
}

impl Deque {
    pub(crate) fn new() -> Self {
        Self {
            slots: VecDeque::with_capacity(256),
            taken_from_tail: 0,
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Absolute position one past the newest slot.
    #[inline]
    pub(crate) fn top(&self) -> u64 {
        self.taken_from_tail + self.slots.len() as u64
    }

    /// Pushes `task` and returns its absolute position.
    #[inline]
    pub(crate) fn push(&mut self, task: TaskRef) -> u64 {
        let pos = self.top();
        self.slots.push_back(Some(task));
        pos
    }

    /// Pops the newest task whose position is at or above `base`.
    #[inline]
    pub(crate) fn pop_above(&mut self, base: u64) -> Option<TaskRef> {
        while self.top() > base {
            if let Some(task) = self.slots.pop_back()? {
                return Some(task);
            }
        }
        None
    }

    /// Takes `block` back if it is still at `pos`.
    #[inline]
    pub(crate) fn take_at(&mut self, pos: u64, block: NonNull<TaskBlock>) -> Option<TaskRef> {
        let index = usize::try_from(pos.checked_sub(self.taken_from_tail)?).ok()?;
        let slot = self.slots.get_mut(index)?;
        if slot.as_ref().map(TaskRef::ptr) != Some(block) {
            return None;
        }
        let task = slot.take();
        if index + 1 == self.slots.len() {
            self.slots.pop_back();
        }
        task
    }

    /// Takes the oldest task, for a thief.
    pub(crate) fn steal_one(&mut self) -> Option<TaskRef> {
        while let Some(slot) = self.slots.pop_front() {
            self.taken_from_tail += 1;
            if slot.is_some() {
                return slot;
            }
        }
        None
    }

    /// Takes the older half of the slots (at least one task), linked as a
    /// list for a thief, oldest first. Returns the list head and the count.
    pub(crate) fn steal_half(&mut self) -> Option<(*mut TaskBlock, usize)> {
        let mut list = std::ptr::null_mut();
        let mut count = 0;
        while count == 0 && !self.slots.is_empty() {
            let n = self.slots.len().div_ceil(2);
            self.taken_from_tail += n as u64;
            // Prepend newest to oldest, so the list runs oldest first and the
            // thief, pushing in list order, keeps the victim's order.
            for task in self.slots.drain(..n).rev().flatten() {
                list = task.into_list(list);
                count += 1;
            }
        }
        (count > 0).then_some((list, count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::new_detached;

    fn task() -> TaskRef {
        new_detached(|| {})
    }

    fn run_all(d: &mut Deque) {
        while let Some(t) = d.steal_one() {
            t.run();
        }
    }

    #[test]
    fn frames_pop_only_their_children_after_thefts() {
        let mut d = Deque::new();
        d.push(task());
        d.push(task());
        let base = d.top();
        let child = d.push(task());
        assert_eq!(child, base);
        // A thief takes the two oldest; the frame's child keeps its position.
        d.steal_one().unwrap().run();
        d.steal_one().unwrap().run();
        assert_eq!(d.top(), base + 1);
        d.pop_above(base).unwrap().run();
        assert!(d.pop_above(base).is_none());
        assert!(d.is_empty());
    }

    #[test]
    fn take_at_finds_buried_tasks_and_leaves_holes() {
        let mut d = Deque::new();
        let a = task();
        let a_ptr = a.ptr();
        let a_pos = d.push(a);
        let b = task();
        let b_ptr = b.ptr();
        let b_pos = d.push(b);
        d.push(task());
        // Wrong block at a position: refused.
        assert!(d.take_at(a_pos, b_ptr).is_none());
        d.take_at(a_pos, a_ptr).unwrap().run();
        // The hole is skipped by thieves.
        let (list, n) = d.steal_half().unwrap();
        assert_eq!(n, 1);
        // SAFETY: the list came from steal_half.
        let (t, rest) = unsafe { TaskRef::pop_list(list) };
        assert!(rest.is_null());
        assert_eq!(t.ptr(), b_ptr);
        t.run();
        assert!(d.take_at(b_pos, b_ptr).is_none());
        run_all(&mut d);
    }
}
