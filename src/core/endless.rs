//! Joins that could never end, known before they wait: a higher layer notes
//! here, per thread, the tasks a join on this thread could never see
//! finish (a task ordered after an access that the code running on this
//! thread holds until it returns), with why; `JoinHandle`'s join panics
//! with that message instead of hanging.
//!
//! The list is a stack: the layer that notes entries takes a mark first and
//! cuts the list back to it when what made them endless is over (the
//! holding task returned). An entry names a task by its block's address,
//! which a block freed and reused for another task would share: so each
//! entry also holds a weak reference to a token that the noted task's
//! closure owns. Once the closure is gone (the task ran or was cancelled,
//! and only then can its block be reused), the entry no longer matches.

use crate::core::sync::{AtomicUsize, Ordering};
use crate::core::task::Header;
use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::{Arc, Weak};

/// One task a join on this thread could never see finish.
struct Endless {
    block: usize,
    /// Alive while the task's closure is.
    alive: Weak<()>,
    why: Box<str>,
}

thread_local! {
    static ENDLESS: RefCell<Vec<Endless>> = const { RefCell::new(Vec::new()) };
}

/// How many threads' lists are not empty: while none is (the usual case),
/// joins and the holders of accesses skip the thread-local. A hint: read
/// Relaxed, since a thread only ever looks for its own entries, which it
/// counted itself.
static LISTS_IN_USE: AtomicUsize = AtomicUsize::new(0);

/// Whether this thread's list may hold entries.
#[inline]
fn maybe_in_use() -> bool {
    LISTS_IN_USE.load(Ordering::Relaxed) != 0
}

/// A token for [`note`], and what the entry keeps of it: the noted task's
/// closure owns the token.
pub(crate) fn token() -> (Arc<()>, Weak<()>) {
    let token = Arc::new(());
    let alive = Arc::downgrade(&token);
    (token, alive)
}

/// Notes that a join on this thread of the task at `block`, whose closure
/// owns the token of `alive`, could never end, because of `why` (the
/// join's panic message).
pub(crate) fn note(block: NonNull<Header>, alive: Weak<()>, why: String) {
    let _ = ENDLESS.try_with(|e| {
        let mut e = e.borrow_mut();
        if e.is_empty() {
            LISTS_IN_USE.fetch_add(1, Ordering::Relaxed);
        }
        e.push(Endless {
            block: block.as_ptr() as usize,
            alive,
            why: why.into_boxed_str(),
        })
    });
}

/// The list's length now, for [`forget_since`].
#[inline]
pub(crate) fn mark() -> usize {
    if !maybe_in_use() {
        return 0;
    }
    ENDLESS.try_with(|e| e.borrow().len()).unwrap_or(0)
}

/// Drops the entries noted since `mark` was taken.
#[inline]
pub(crate) fn forget_since(mark: usize) {
    if !maybe_in_use() {
        return;
    }
    let _ = ENDLESS.try_with(|e| {
        let mut e = e.borrow_mut();
        if e.len() > mark {
            e.truncate(mark);
            if e.is_empty() {
                LISTS_IN_USE.fetch_sub(1, Ordering::Relaxed);
            }
        }
    });
}

/// Why a join of the task at `block` on this thread could never end, if
/// it was noted so (and its closure is still alive).
pub(crate) fn endless_join(block: NonNull<Header>) -> Option<String> {
    if !maybe_in_use() {
        return None;
    }
    let address = block.as_ptr() as usize;
    ENDLESS
        .try_with(|e| {
            let e = e.borrow();
            // Newest first: a block reused while an old entry lingers.
            e.iter()
                .rev()
                .find(|n| n.block == address && n.alive.strong_count() > 0)
                .map(|n| n.why.to_string())
        })
        .ok()
        .flatten()
}
