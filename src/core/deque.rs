//! The per-worker deque.
//!
//! Its owner pushes and pops at the top (newest) and answers thieves from
//! the bottom (oldest), one task or half. Positions are absolute (`offset +
//! index`), so a frame can remember where its own children start
//! ([`Owner::top`]) and pop only those, and a join can find its task in
//! O(1) from the position a push returned, even after thieves took older
//! tasks. A task removed from the middle leaves a hole (`None`) that pops
//! skip, so positions never shift.
//!
//! The deque lives in a [`Guarded`] (see `rescue.rs`), and three kinds of
//! access meet here:
//!
//! - **The owner's fast path** ([`Owner::push`], [`Owner::pop_above`],
//!   [`Owner::take_newest`], [`Owner::top`]): no guard, no read-modify-write
//!   and no CPU fence. A push writes its slot and stores `top`; a pop
//!   stores `top` one lower, issues the light barrier and loads `bottom`.
//! - **The owner's exclusive section** (the methods on [`OwnerGuard`]):
//!   everything else (growing, compacting, taking from the middle or the
//!   bottom, answering thieves), with no rescuer around.
//! - **A rescuer** ([`RescueGuard::steal`]), while the owner is stuck in
//!   user code and may come back at any moment to its fast path. It takes
//!   from the bottom with the THE protocol of Cilk-5 (Frigo, Leiserson and
//!   Randall), with the two fences made asymmetric: the rescuer raises
//!   `bottom`, issues the heavy barrier and loads `top`; the owner's pop
//!   stores `top`, issues the light barrier and loads `bottom`. Either the
//!   rescuer sees the owner's lower `top` and leaves that slot alone, or
//!   the owner sees the raised `bottom` and backs off: it restores `top`
//!   and redoes the pop in its exclusive section, which waits for the
//!   rescuer to finish. (Location-based memory fences, Ladan-Mozes, Lee
//!   and Vyukov, SPAA 2011, make the same pairing for Cilk's deques.)
//!
//! Slots at or above `top` are empty; the owner writes one before the
//! Release store of `top` that publishes it. Only the exclusive section
//! moves slots (growing, compacting) or changes `offset`; the fast path
//! never does, so a rescuer reads a stable slot array. The loom model
//! `loom-tests/tests/models/rescue.rs` fails when either barrier is taken out.

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::rescue::{self, Owner, OwnerGuard, RescueGuard};
use crate::core::sync::{AtomicUsize, Ordering, UnsafeCell};

/// Capacity of a new deque (it doubles when full).
const INITIAL_CAPACITY: usize = 256;

/// A worker's deque of `T` (tasks; plain ids in the loom models).
pub struct Deque<T> {
    /// Index one past the newest slot. Written by the owner only.
    top: AtomicUsize,
    /// Index of the oldest live slot. Written in the owner's exclusive
    /// section or by a rescuer (never both at once); the fast path reads it.
    bottom: AtomicUsize,
    /// The slots. The array is replaced only in the exclusive section.
    slots: UnsafeCell<Box<[UnsafeCell<Option<T>>]>>,
    /// Absolute position of `slots[0]`. The owner's thread only.
    offset: UnsafeCell<u64>,
    /// How many holes there may be between `bottom` and `top` (taken from
    /// the middle in the exclusive section; a rescuer may take some
    /// without telling, so this may be more than there are). The owner's
    /// thread only. While it is zero the fast path need not look for
    /// holes under the slot it takes.
    holes: UnsafeCell<usize>,
}

// SAFETY: the slots hold `T`s that move between threads (`T: Send`); who
// may touch which field when is the protocol in the module docs, and every
// method below keeps to it.
unsafe impl<T: Send> Sync for Deque<T> {}

impl<T> std::fmt::Debug for Deque<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deque")
            .field("bottom", &self.bottom.load(Ordering::Relaxed))
            .field("top", &self.top.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<T> Default for Deque<T> {
    fn default() -> Self {
        Self::with_capacity(INITIAL_CAPACITY)
    }
}

/// What the owner's fast pop found.
#[derive(Debug)]
pub enum Popped<T> {
    /// The newest task (at or above the asked position).
    Task(T),
    /// Nothing at or above the asked position (exact).
    Nothing,
    /// The deque looked empty there, or a rescuer may be taking from it:
    /// ask again in the exclusive section, which knows.
    Unsure,
}

impl<T> Deque<T> {
    /// An empty deque with room for `capacity` tasks before it grows.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            top: AtomicUsize::new(0),
            bottom: AtomicUsize::new(0),
            slots: UnsafeCell::new(empty_slots(capacity.max(1))),
            offset: UnsafeCell::new(0),
            holes: UnsafeCell::new(0),
        }
    }

    /// Slots between the oldest and the newest, holes included: an
    /// estimate, which any thread may take at any time.
    #[inline]
    pub fn queued_estimate(&self) -> usize {
        let top = self.top.load(Ordering::Relaxed);
        top.saturating_sub(self.bottom.load(Ordering::Relaxed))
    }

    /// Runs `f` on slot `i`.
    ///
    /// # Safety
    ///
    /// The caller may touch slot `i` now (module docs) and the slot array
    /// is not being replaced: the caller is the owner, or a rescuer (the
    /// owner replaces the array only in its exclusive section).
    #[inline(always)]
    unsafe fn slot<R>(&self, i: usize, f: impl FnOnce(&mut Option<T>) -> R) -> R {
        self.slots.with(|s| {
            // SAFETY: the array is not being replaced (the caller's promise).
            let s = unsafe { &*s };
            // SAFETY: nobody else touches slot `i` now (the caller's promise).
            s[i].with_mut(|p| f(unsafe { &mut *p }))
        })
    }

    /// How many slots the array has (owner or rescuer, as for `slot`).
    #[inline(always)]
    fn capacity(&self) -> usize {
        // SAFETY: only the owner's exclusive section replaces the array,
        // and neither a rescuer nor the owner's fast path runs during it.
        self.slots.with(|s| unsafe { &*s }.len())
    }

    /// Absolute position of `slots[0]` (the owner's thread only).
    #[inline(always)]
    fn offset(&self) -> u64 {
        // SAFETY: only the owner's thread reads or writes `offset`.
        self.offset.with(|p| unsafe { *p })
    }

    /// How many holes there may be (the owner's thread only).
    #[inline(always)]
    fn holes(&self) -> usize {
        // SAFETY: only the owner's thread reads or writes `holes`.
        self.holes.with(|p| unsafe { *p })
    }

    /// Records `added` holes made and `removed` holes gone (the owner's
    /// thread only).
    #[inline(always)]
    fn count_holes(&self, added: usize, removed: usize) {
        // SAFETY: only the owner's thread reads or writes `holes`.
        self.holes
            .with_mut(|p| unsafe { *p = (*p + added).saturating_sub(removed) });
    }

    /// Pops the holes right under the top, as the owner, so that taking
    /// tasks back in any order leaves no holes behind to grow the deque.
    /// Claims as many slots as there may be holes at once (one barrier),
    /// then gives back those above the first task it finds.
    #[cold]
    fn trim_holes(&self) {
        let top = self.top.load(Ordering::Relaxed);
        let bottom = self.bottom.load(Ordering::Relaxed);
        let claim = self.holes().min(top.saturating_sub(bottom));
        if claim == 0 {
            return;
        }
        let low = top - claim;
        if !self.claim_down_to(top, low) {
            return;
        }
        let mut new_top = top;
        // SAFETY: we are the owner, and the claim made slots `low..top`
        // ours.
        while new_top > low && unsafe { self.slot(new_top - 1, |s| s.is_none()) } {
            new_top -= 1;
        }
        self.count_holes(0, top - new_top);
        if new_top != low {
            self.top.store(new_top, Ordering::Release);
        }
    }

    /// The fast pop of the newest slot (at index `top - 1`), on the
    /// owner's thread: `Some(slot)` once the slot is the owner's alone,
    /// `None` if a rescuer may be taking from that far up (or the deque
    /// is empty), with `top` restored.
    #[inline(always)]
    fn claim_newest(&self, top: usize) -> Option<usize> {
        let t = top.checked_sub(1)?;
        self.claim_down_to(top, t).then_some(t)
    }

    /// Makes slots `low..top` the owner's (on its thread, `top` being the
    /// current top): lowers `top` to `low`, issues the light barrier and
    /// loads `bottom`. Returns false, with `top` restored, if a rescuer
    /// may be taking from that far up.
    #[inline(always)]
    fn claim_down_to(&self, top: usize, low: usize) -> bool {
        // Release: a rescuer that reads this value of `top` sees the
        // owner's earlier slot writes (every store of `top` releases).
        self.top.store(low, Ordering::Release);
        rescue::light_barrier();
        if self.bottom.load(Ordering::Relaxed) > low {
            self.top.store(top, Ordering::Release);
            return false;
        }
        true
    }
}

fn empty_slots<T>(capacity: usize) -> Box<[UnsafeCell<Option<T>>]> {
    (0..capacity).map(|_| UnsafeCell::new(None)).collect()
}

/// The owner's fast path: no guard, no read-modify-write, no fence. Any of
/// them may answer "ask in the exclusive section" ([`Popped::Unsure`],
/// `Err`, `None`): only the exclusive section is exact.
impl<T> Owner<'_, Deque<T>> {
    /// Absolute position one past the newest slot.
    #[inline(always)]
    pub fn top(&self) -> u64 {
        let d = self.data();
        d.offset() + d.top.load(Ordering::Relaxed) as u64
    }

    /// Pushes `item` and returns its position; gives it back when the
    /// array is full (push it in the exclusive section, which grows it).
    #[inline(always)]
    pub fn push(&self, item: T) -> Result<u64, T> {
        let d = self.data();
        let t = d.top.load(Ordering::Relaxed);
        if t >= d.capacity() {
            return Err(item);
        }
        // SAFETY: we are the owner; slot `t` is at `top`, which no rescuer
        // reads below (it takes only slots under a `top` it loaded).
        unsafe { d.slot(t, |s| *s = Some(item)) };
        // Release: publishes the slot to a rescuer that loads `top`.
        d.top.store(t + 1, Ordering::Release);
        Ok(d.offset() + t as u64)
    }

    /// Pops the newest task at or above position `base`.
    #[inline(always)]
    pub fn pop_above(&self, base: u64) -> Popped<T> {
        let d = self.data();
        loop {
            let top = d.top.load(Ordering::Relaxed);
            if d.offset() + top as u64 <= base {
                return Popped::Nothing;
            }
            let Some(t) = d.claim_newest(top) else {
                return Popped::Unsure;
            };
            // SAFETY: we are the owner and `claim_newest` made slot `t` ours.
            if let Some(item) = unsafe { d.slot(t, Option::take) } {
                return Popped::Task(item);
            }
            // A hole: it stays popped; look under it.
            d.count_holes(0, 1);
        }
    }

    /// Takes back the task at `pos` if it is the newest slot and `is_it`
    /// says it is the one; `None` otherwise (look in the exclusive
    /// section: it may be further down, or gone).
    #[inline(always)]
    pub fn take_newest(&self, pos: u64, is_it: impl FnOnce(&T) -> bool) -> Option<T> {
        let d = self.data();
        let top = d.top.load(Ordering::Relaxed);
        if d.offset() + top as u64 != pos + 1 {
            return None;
        }
        let t = d.claim_newest(top)?;
        // SAFETY: we are the owner and `claim_newest` made slot `t` ours.
        let found = unsafe { d.slot(t, |s| s.take_if(|item| is_it(item))) };
        if found.is_none() {
            d.top.store(top, Ordering::Release);
        } else if d.holes() > 0 {
            d.trim_holes();
        }
        found
    }
}

/// The owner's exclusive section: no rescuer holds the deque, so every
/// answer is exact. (The fast path's methods, through `owner()`, are
/// valid here too.)
impl<T> OwnerGuard<'_, Deque<T>> {
    /// Absolute position one past the newest slot.
    #[inline]
    pub fn top(&self) -> u64 {
        self.owner().top()
    }

    fn bounds(&self) -> (usize, usize) {
        let d = self.get();
        (
            d.bottom.load(Ordering::Relaxed),
            d.top.load(Ordering::Relaxed),
        )
    }

    /// Whether no task is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        let (bottom, top) = self.bounds();
        bottom >= top
    }

    /// Whether the deque holds exactly one slot (holes are trimmed from
    /// both ends in here, so one slot is one task).
    #[inline]
    pub fn has_one(&self) -> bool {
        let (bottom, top) = self.bounds();
        top == bottom + 1
    }

    /// Absolute position of the bottom slot, if any task is queued.
    #[inline]
    pub fn oldest(&self) -> Option<u64> {
        let (bottom, top) = self.bounds();
        (bottom < top).then(|| self.get().offset() + bottom as u64)
    }

    /// Pushes `item`, growing the array if it is full; returns its position.
    pub fn push(&self, item: T) -> u64 {
        let d = self.get();
        if d.top.load(Ordering::Relaxed) >= d.capacity() {
            self.make_room();
        }
        match self.owner().push(item) {
            Ok(pos) => pos,
            Err(_) => unreachable!("selvedge: the deque has room after make_room"),
        }
    }

    /// Pops the newest task at or above position `base` (exact).
    pub fn pop_above(&self, base: u64) -> Option<T> {
        match self.owner().pop_above(base) {
            Popped::Task(item) => Some(item),
            // With no rescuer around, `Unsure` is an empty deque.
            Popped::Nothing | Popped::Unsure => None,
        }
    }

    /// Takes the task at `pos` if it is still there and `is_it` says it is
    /// the one.
    #[inline(always)]
    pub fn take_at(&self, pos: u64, is_it: impl FnOnce(&T) -> bool) -> Option<T> {
        let d = self.get();
        let (bottom, top) = self.bounds();
        let index = usize::try_from(pos.wrapping_sub(d.offset())).ok()?;
        if index >= top || index < bottom {
            return None;
        }
        // SAFETY: the exclusive section: no rescuer, and we are the owner.
        let found = unsafe { d.slot(index, |s| s.take_if(|item| is_it(item))) };
        found.as_ref()?;
        if index == bottom {
            // The oldest slot (joins in spawn order): move the bottom past
            // it and past holes, so thieves' halves count real tasks.
            let mut b = bottom + 1;
            // SAFETY: as above.
            while b < top && unsafe { d.slot(b, |s| s.is_none()) } {
                b += 1;
            }
            d.count_holes(0, b - bottom - 1);
            d.bottom.store(b, Ordering::Relaxed);
            if b >= top || (b >= 64 && b * 2 >= top) {
                self.compact();
            }
        } else if index + 1 == top {
            // The newest slot: lower the top past it and any holes under
            // it, so joins in spawn order do not leave the deque growing.
            let mut t = index;
            // SAFETY: as above.
            while t > bottom && unsafe { d.slot(t - 1, |s| s.is_none()) } {
                t -= 1;
            }
            d.count_holes(0, index - t);
            d.top.store(t, Ordering::Release);
        } else {
            d.count_holes(1, 0);
        }
        found
    }

    /// Takes the oldest task, for a thief.
    pub fn steal_one(&self) -> Option<T> {
        let d = self.get();
        let (start, top) = self.bounds();
        let mut bottom = start;
        let mut found = None;
        while found.is_none() && bottom < top {
            // SAFETY: the exclusive section.
            found = unsafe { d.slot(bottom, Option::take) };
            bottom += 1;
        }
        d.count_holes(0, bottom - start - usize::from(found.is_some()));
        d.bottom.store(bottom, Ordering::Relaxed);
        self.compact();
        found
    }

    /// Takes the older half of the slots (at least one task) for a thief,
    /// handing them to `give` newest first; returns how many.
    pub fn steal_half(&self, mut give: impl FnMut(T)) -> usize {
        let d = self.get();
        let (start, top) = self.bounds();
        let mut bottom = start;
        let mut count = 0;
        while count == 0 && bottom < top {
            let n = (top - bottom).div_ceil(2);
            for i in (bottom..bottom + n).rev() {
                // SAFETY: the exclusive section.
                if let Some(item) = unsafe { d.slot(i, Option::take) } {
                    give(item);
                    count += 1;
                }
            }
            bottom += n;
        }
        d.count_holes(0, bottom - start - count);
        d.bottom.store(bottom, Ordering::Relaxed);
        self.compact();
        count
    }

    /// Drops the slots thieves emptied once they are most of the array, so
    /// memory stays proportional to live tasks.
    #[cold]
    fn compact(&self) {
        let (bottom, top) = self.bounds();
        if bottom >= top {
            // Empty: no holes either (a rescuer may have taken some).
            let d = self.get();
            d.count_holes(0, d.holes());
            self.shift_down(top);
        } else if bottom >= 64 && bottom * 2 >= top {
            self.shift_down(bottom);
        }
    }

    /// Makes room for one more push: shifts the live slots down if thieves
    /// emptied the lower half, otherwise doubles the array.
    #[cold]
    fn make_room(&self) {
        let d = self.get();
        let (bottom, top) = self.bounds();
        if bottom > 0 && bottom * 2 >= top {
            self.shift_down(bottom.min(top));
            return;
        }
        let capacity = d.capacity() * 2;
        self.with_array(|slots| {
            let mut grown = Vec::with_capacity(capacity);
            grown.extend(std::mem::take(slots).into_vec());
            grown.resize_with(capacity, || UnsafeCell::new(None));
            *slots = grown.into_boxed_slice();
        });
    }

    /// Moves slots `[by, top)` to `[0, top - by)` (the slots under `by`
    /// are empty); positions stay the same (the offset grows by `by`).
    fn shift_down(&self, by: usize) {
        if by == 0 {
            return;
        }
        let d = self.get();
        let (bottom, top) = self.bounds();
        if bottom < top {
            self.with_array(|slots| slots[..top].rotate_left(by));
        }
        d.bottom.store(bottom.saturating_sub(by), Ordering::Relaxed);
        d.top.store(top - by, Ordering::Release);
        // SAFETY: only the owner's thread touches `offset`.
        d.offset.with_mut(|p| unsafe { *p += by as u64 });
    }

    /// Runs `f` on the slot array, to move or replace slots wholesale.
    fn with_array<R>(&self, f: impl FnOnce(&mut Box<[UnsafeCell<Option<T>>]>) -> R) -> R {
        // SAFETY: the exclusive section: no rescuer reads the array, the
        // owner's fast path is not running (we are on its thread), and `f`
        // cannot reach the deque again (it is given the array only).
        self.get().slots.with_mut(|s| f(unsafe { &mut *s }))
    }
}

/// A rescuer: the owner is stuck in user code and may come back at any
/// moment to its fast path.
impl<T> RescueGuard<'_, Deque<T>> {
    /// Takes the oldest task, or the older half of the slots (at least one
    /// task) when `half`, handing them to `give` newest first; returns how
    /// many (none if the owner popped them first).
    pub fn steal(&self, half: bool, mut give: impl FnMut(T)) -> usize {
        let d = self.get();
        let mut count = 0;
        while count == 0 {
            // Exact: only we write `bottom` now.
            let bottom = d.bottom.load(Ordering::Relaxed);
            let seen_top = d.top.load(Ordering::Relaxed);
            if seen_top <= bottom {
                return 0;
            }
            let n = if half {
                (seen_top - bottom).div_ceil(2)
            } else {
                1
            };
            let raised = bottom + n;
            d.bottom.store(raised, Ordering::Relaxed);
            // Pairs with the owner's light barrier in `claim_newest`: from
            // here on, either we see its lower `top`, or it sees `raised`
            // and backs off to its exclusive section (waiting for us).
            if !rescue::heavy_barrier() {
                d.bottom.store(bottom, Ordering::Relaxed);
                return 0;
            }
            // Acquire: the slots under this `top` are written.
            let top = d.top.load(Ordering::Acquire);
            let end = raised.min(top);
            if end <= bottom {
                d.bottom.store(bottom, Ordering::Relaxed);
                return 0;
            }
            if end < raised {
                d.bottom.store(end, Ordering::Relaxed);
            }
            for i in (bottom..end).rev() {
                // SAFETY: slots under `end` are below every `top` the owner
                // may pop from without backing off (module docs), and the
                // array is not replaced while we hold the rescue.
                if let Some(item) = unsafe { d.slot(i, Option::take) } {
                    give(item);
                    count += 1;
                }
            }
        }
        count
    }
}

#[cfg(all(test, not(loom)))]
#[path = "deque_tests.rs"]
mod tests;
