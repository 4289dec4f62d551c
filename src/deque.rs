//! The private per-worker deque.
//!
//! Only its owner touches it, so it is a plain ring buffer: push and pop at
//! the head (newest) with no atomics and no fences. Thieves never touch it;
//! when the owner answers a steal request it takes from the tail (oldest),
//! one task or half.
//!
//! Positions are absolute (`offset + index`), so a frame can
//! remember where its own children start ([`Deque::top`]) and pop only those,
//! and a join can find its task in O(1) from the position [`Deque::push`]
//! returned, even after thieves took older tasks. A task removed from the
//! middle leaves a hole (`None`) that pops skip, so positions never shift.

use crate::task::{Header, TaskRef};
use std::ptr::NonNull;

pub(crate) struct Deque {
    /// Live tasks are `slots[bottom..]`; holes are `None`.
    slots: Vec<Option<TaskRef>>,
    /// Index of the oldest live slot: thieves are served from here.
    bottom: usize,
    /// Absolute position of `slots[0]`.
    offset: u64,
}

impl Deque {
    pub(crate) fn new() -> Self {
        Self {
            slots: Vec::with_capacity(256),
            bottom: 0,
            offset: 0,
        }
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.bottom == self.slots.len()
    }

    /// Whether the deque holds exactly one task (holes are trimmed from
    /// both ends, so one live slot is one task).
    #[inline]
    pub(crate) fn has_one(&self) -> bool {
        self.slots.len() - self.bottom == 1
    }

    /// Absolute position of the bottom slot, if any task is queued: the
    /// oldest task's, or a hole just under it.
    #[inline]
    pub(crate) fn oldest(&self) -> Option<u64> {
        (!self.is_empty()).then_some(self.offset + self.bottom as u64)
    }

    /// Absolute position one past the newest slot.
    #[inline]
    pub(crate) fn top(&self) -> u64 {
        self.offset + self.slots.len() as u64
    }

    /// Pushes `task` and returns its absolute position.
    #[inline]
    pub(crate) fn push(&mut self, task: TaskRef) -> u64 {
        let pos = self.top();
        self.slots.push(Some(task));
        pos
    }

    /// Pops the newest task whose position is at or above `base`.
    #[inline]
    pub(crate) fn pop_above(&mut self, base: u64) -> Option<TaskRef> {
        while self.top() > base && !self.is_empty() {
            if let Some(task) = self.slots.pop().flatten() {
                return Some(task);
            }
        }
        None
    }

    /// Takes `block` back if it is still at `pos`.
    #[inline]
    pub(crate) fn take_at(&mut self, pos: u64, block: NonNull<Header>) -> Option<TaskRef> {
        let index = pos.wrapping_sub(self.offset) as usize;
        let len = self.slots.len();
        if index >= len || index < self.bottom {
            return None;
        }
        let slot = &mut self.slots[index];
        if slot.as_ref().map(TaskRef::ptr) != Some(block) {
            return None;
        }
        let task = slot.take();
        if index == self.bottom {
            // The oldest slot (joins in spawn order): move the bottom past
            // it and past holes, so thieves' halves count real tasks.
            while self.bottom < self.slots.len() && self.slots[self.bottom].is_none() {
                self.bottom += 1;
            }
            self.compact();
        } else if index + 1 == len {
            // The newest slot: shrink past it and any holes under it, so
            // joins in spawn order do not leave the deque growing.
            self.slots.pop();
            while self.slots.len() > self.bottom && self.slots.last().is_some_and(Option::is_none) {
                self.slots.pop();
            }
        }
        task
    }

    /// Drops the slots thieves emptied once they are most of the vector, so
    /// memory stays proportional to live tasks.
    fn compact(&mut self) {
        if self.bottom == self.slots.len() {
            self.offset += self.slots.len() as u64;
            self.slots.clear();
            self.bottom = 0;
        } else if self.bottom >= 64 && self.bottom * 2 >= self.slots.len() {
            self.slots.drain(..self.bottom);
            self.offset += self.bottom as u64;
            self.bottom = 0;
        }
    }

    /// Takes the oldest task, for a thief.
    pub(crate) fn steal_one(&mut self) -> Option<TaskRef> {
        let mut found = None;
        while found.is_none() && !self.is_empty() {
            found = self.slots[self.bottom].take();
            self.bottom += 1;
        }
        self.compact();
        found
    }

    /// Takes the older half of the slots (at least one task), linked as a
    /// list for a thief, oldest first. Returns the list head and the count.
    pub(crate) fn steal_half(&mut self) -> Option<(*mut Header, usize)> {
        let mut list = std::ptr::null_mut();
        let mut count = 0;
        while count == 0 && !self.is_empty() {
            let n = (self.slots.len() - self.bottom).div_ceil(2);
            // Prepend newest to oldest, so the list runs oldest first and the
            // thief, pushing in list order, keeps the victim's order.
            for slot in self.slots[self.bottom..self.bottom + n].iter_mut().rev() {
                if let Some(task) = slot.take() {
                    list = task.into_list(list);
                    count += 1;
                }
            }
            self.bottom += n;
        }
        self.compact();
        (count > 0).then_some((list, count))
    }
}

impl crate::rescue::Queued for Deque {
    /// Slots from the oldest to the newest, holes inside included: a hint.
    #[inline(always)]
    fn queued(&self) -> usize {
        self.slots.len() - self.bottom
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
