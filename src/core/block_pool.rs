//! A worker's block pool: its own free list of task blocks, and what it
//! passes to and takes from its runtime's block exchange (free blocks
//! carried between workers, lowest address first for a large take).

use crate::core::address_order::AddressOrdered;
use crate::core::spare_blocks::{Linked, SpareBlocks};
use crate::core::sync::UnsafeCell as UnsafeLink;
use crate::core::task::{payload_of, Header, TaskBlock, INLINE};
use std::alloc::{dealloc, Layout};
use std::mem::size_of;
use std::ptr::{self, NonNull};
use std::sync::Arc;

/// Free blocks a worker keeps in its own pool. Beyond that it passes them
/// to its runtime's block exchange, from which a worker whose pool is empty
/// takes them all (`spare_blocks.rs`): a program that makes many tasks
/// before running them (a task graph spawned up front, say) frees them as
/// they run, on whichever worker ran them, and makes as many again for its
/// next round from the same blocks, with no trip to the general allocator,
/// which with that many blocks in its bins (and freed by other threads)
/// costs more than the task. A worker idle for [`POOL_TRIM_AFTER`] gives
/// back what the exchange holds (see [`trim_pool`](crate::core::block_alloc::trim_pool)).
pub(super) const POOL_IDLE_CAPACITY: usize = 4096;
/// How long a worker stays idle, while spare blocks are held beyond its
/// pool, before it gives them back: longer than the pause
/// between the rounds of an iterative program, which then reuses them.
pub(crate) const POOL_TRIM_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

// SAFETY: `next` is a free block's only link, projected from the raw
// pointer, used by the pool or the exchange that holds the block and by
// nobody else meanwhile; a free block holds no value.
unsafe impl Linked for Header {
    unsafe fn link(node: *mut Header) -> *const UnsafeLink<*mut Header> {
        // SAFETY: `node` is live (caller); no reference to it is made.
        unsafe { ptr::addr_of!((*node).next) }
    }
}

/// The free blocks of a runtime's workers, passed between them (see
/// `spare_blocks.rs`); what it holds when the runtime goes is freed.
pub(crate) struct BlockExchange(pub(super) SpareBlocks<Header>);

impl BlockExchange {
    pub(crate) fn new() -> Self {
        Self(SpareBlocks::new())
    }
}

impl Drop for BlockExchange {
    fn drop(&mut self) {
        // SAFETY: taken whole, so this thread owns every carrier of the
        // chain and every block they list.
        unsafe { dealloc_carriers(self.0.take_all_to_free()) };
    }
}

/// Blocks whose addresses a carrier lists besides its own (see
/// [`BlockPool`]): its payload holds the count, then the addresses. A full
/// carrier passes `CARRIED + 1` blocks to the exchange with one
/// compare-and-swap.
const CARRIED: usize = INLINE / size_of::<*mut Header>() - 1;

/// Blocks a worker taking from a carrier asks the CPU to fetch ahead of the
/// one it hands out: a task graph made on one worker takes blocks about
/// 100 ns apart, and a block last written by another core takes longer
/// than that to arrive.
const FETCH_AHEAD: usize = 4;

/// Blocks taken from the exchange at once, and tasks parked on promises,
/// from which a pool hands the take out in address order (see
/// `address_order.rs` and `BlockPool::note_take`): 8 MiB of blocks,
/// what a core's TLB maps on the machines measured, and a quarter of their
/// L3 cache. Past that, parked tasks made one after the other but placed
/// apart are each a miss when they are made ready, and the order pays;
/// below it the blocks stay mapped and mostly cached whatever their order,
/// and sorting them (10 to 20 ns a block) would only cost.
const ORDER_AT: usize = 32768;

/// Blocks a pool takes from the exchange in takes smaller than
/// [`ORDER_AT`] between two counts of the parked tasks (see
/// `BlockPool::note_take`): often enough that the count of the last round
/// of a graph made again is recent, rarely enough that reading every
/// worker's counters costs nothing per task.
const COUNT_PARKED_EVERY: usize = 4096;

/// Reads a free block's link.
///
/// # Safety
/// The caller owns the free block.
unsafe fn next_of(block: *mut Header) -> *mut Header {
    // SAFETY: the block is live and owned by the caller.
    unsafe { (*block).next.with(|l| *l) }
}

/// Sets a free block's link.
///
/// # Safety
/// The caller owns the free block.
unsafe fn set_next(block: *mut Header, next: *mut Header) {
    // SAFETY: the block is live and owned by the caller.
    unsafe { (*block).next.with_mut(|l| *l = next) };
}

/// The words of a carrier's payload: the count of blocks it lists, then
/// their addresses.
fn carrier_words(carrier: *mut Header) -> *mut usize {
    // The payload is aligned for words.
    payload_of(carrier).cast::<usize>()
}

/// How many blocks `carrier` lists.
///
/// # Safety
/// The caller owns the carrier, whose count was written when it was filled.
unsafe fn carried_count(carrier: *mut Header) -> usize {
    // SAFETY: word 0 of an owned carrier's payload, written by `take_outbox`.
    unsafe { carrier_words(carrier).read() }
}

/// The `i`-th block `carrier` lists (`i` below its count).
///
/// # Safety
/// The caller owns the carrier, and `i` is below its count.
unsafe fn carried(carrier: *mut Header, i: usize) -> *mut Header {
    // SAFETY: words 1 ..= count hold addresses written by `pass_on`.
    unsafe { carrier_words(carrier).add(1 + i).read() as *mut Header }
}

/// Asks the CPU to bring `block`'s first cache line closer, ahead of use:
/// the exchange's blocks were last written by other cores, and following
/// their links one after the other would otherwise wait for each line.
#[inline(always)]
fn prefetch(block: *const Header) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: SSE, which `_mm_prefetch` needs, is part of every x86_64
    // CPU; a prefetch never faults, whatever the address (null included).
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(block.cast())
    };
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = block;
}

/// [`prefetch`] for the two lines a task or a node written into `block`
/// starts with (its header and the start of its payload).
#[inline(always)]
fn prefetch_block(block: *const Header) {
    prefetch(block);
    prefetch(block.cast::<u8>().wrapping_add(64).cast());
}

/// Returns one block to the allocator.
///
/// # Safety
/// The caller owns the free block, which came from `alloc_raw` (or the
/// allocator with its layout), and nobody uses it afterwards.
pub(super) unsafe fn dealloc_block(block: *mut Header) {
    // SAFETY: as the caller promises.
    unsafe { dealloc(block.cast(), Layout::new::<TaskBlock>()) };
}

/// Returns to the allocator every block of a null-terminated chain of
/// carriers, with the blocks they list.
///
/// # Safety
/// The caller owns every carrier of the chain and every block they list,
/// and each came from `alloc_raw`.
unsafe fn dealloc_carriers(mut chain: *mut Header) {
    while !chain.is_null() {
        // SAFETY: owned (caller).
        let next = unsafe { next_of(chain) };
        // SAFETY: as above; the count was written when it was filled.
        unsafe { dealloc_carried(chain, carried_count(chain)) };
        chain = next;
    }
}

/// Returns to the allocator the first `count` blocks `carrier` lists, then
/// the carrier.
///
/// # Safety
/// The caller owns the carrier and those blocks, which came from
/// `alloc_raw`; `count` is at most the carrier's count.
unsafe fn dealloc_carried(carrier: *mut Header, count: usize) {
    for i in 0..count {
        // SAFETY: listed by the carrier and owned (caller).
        unsafe { dealloc_block(carried(carrier, i)) };
    }
    // SAFETY: owned (caller), no longer read.
    unsafe { dealloc_block(carrier) };
}

/// A worker's free blocks: its own free list, linked through the blocks'
/// `next` field, and what it passes to and takes from its runtime's
/// exchange.
///
/// Blocks travel between workers in *carriers*: a free block whose payload
/// lists the addresses of up to [`CARRIED`] others. A worker taking blocks
/// that another core freed then reads one carrier per [`CARRIED`] + 1
/// blocks and knows the blocks' addresses before it touches them, so it
/// fetches them ahead ([`FETCH_AHEAD`]); following a chain of links through
/// the blocks themselves instead made it wait on each block in turn.
pub(crate) struct BlockPool {
    head: *mut Header,
    len: usize,
    /// Carriers taken from the exchange (linked through `next`), used
    /// once the free list is empty (not counted in `len`, which only caps
    /// what this worker's own frees keep).
    reserve: *mut Header,
    /// The reserve's carrier being handed out, and how many of the blocks
    /// it lists are left (handed out last first); the carrier goes last.
    open: *mut Header,
    open_left: usize,
    /// A large batch taken from the exchange, handed out in address order
    /// (see `address_order.rs`) before the reserve.
    ordered: AddressOrdered<Header>,
    /// How many tasks of this worker's runtime were parked on promises
    /// when it last counted them (see `note_take`).
    parked_at_last_count: u64,
    /// Blocks taken from the exchange since then.
    taken_since_count: usize,
    /// The carrier collecting surplus blocks on their way to the exchange,
    /// and how many blocks it holds, itself included.
    outbox: *mut Header,
    outbox_len: usize,
    /// The runtime's exchange; none for a pool outside a runtime.
    exchange: Option<Arc<BlockExchange>>,
    /// Counts the tasks of the pool's runtime parked on promises (see
    /// `note_take`), for a take made by `pop`; given by whoever installs
    /// the pool, who knows the runtime.
    parked: fn() -> u64,
}

impl BlockPool {
    pub(crate) fn new(exchange: Option<Arc<BlockExchange>>, parked: fn() -> u64) -> Self {
        Self {
            head: ptr::null_mut(),
            len: 0,
            reserve: ptr::null_mut(),
            open: ptr::null_mut(),
            open_left: 0,
            ordered: AddressOrdered::new(),
            parked_at_last_count: 0,
            taken_since_count: 0,
            outbox: ptr::null_mut(),
            outbox_len: 0,
            exchange,
            parked,
        }
    }

    #[inline]
    pub(super) fn pop(&mut self) -> Option<NonNull<Header>> {
        let Some(head) = NonNull::new(self.head) else {
            return self.pop_reserve(self.parked);
        };
        // SAFETY: pooled blocks are unused and their `next` links the list.
        self.head = unsafe { next_of(head.as_ptr()) };
        self.len -= 1;
        // A block freed long ago (a graph's tasks all made before any
        // ran) is cold: fetch the next one while this one is filled.
        prefetch(self.head);
        Some(head)
    }

    /// A block of the reserve, which is refilled from the exchange when
    /// empty; `None` if both are empty. `parked` counts the tasks of the
    /// pool's runtime parked on promises (see `note_take`).
    #[cold]
    pub(super) fn pop_reserve(
        &mut self,
        parked: impl Fn() -> u64 + Copy,
    ) -> Option<NonNull<Header>> {
        if self.open.is_null() && self.ordered.is_empty() && !self.open_next_carrier(parked) {
            return None;
        }
        if let Some(block) = self.ordered.pop() {
            if let Some(ahead) = self.ordered.ahead(FETCH_AHEAD - 1) {
                prefetch_block(ahead);
            }
            return NonNull::new(block);
        }
        let carrier = self.open;
        if self.open_left == 0 {
            // Every block it listed is handed out: the carrier goes too.
            self.open = ptr::null_mut();
            return NonNull::new(carrier);
        }
        self.open_left -= 1;
        // SAFETY: the open carrier is ours, and `open_left` is below its
        // count.
        let block = unsafe { carried(carrier, self.open_left) };
        if let Some(ahead) = self.open_left.checked_sub(FETCH_AHEAD) {
            // SAFETY: as above, `ahead` below `open_left`.
            prefetch_block(unsafe { carried(carrier, ahead) });
        } else if self.open_left == 0 {
            prefetch_block(carrier);
        }
        NonNull::new(block)
    }

    /// Opens the reserve's next carrier, refilling the reserve first from
    /// this worker's own outbox, then from the exchange; `false` if all
    /// are empty.
    fn open_next_carrier(&mut self, parked: impl Fn() -> u64 + Copy) -> bool {
        if self.reserve.is_null() {
            // This worker's own surplus, not yet passed on, first.
            self.reserve = self.take_outbox().map_or(ptr::null_mut(), |(c, _)| c);
        }
        if self.reserve.is_null() {
            let Some(exchange) = self.exchange.as_ref() else {
                return false;
            };
            // Taken whole: every carrier of the chain is ours.
            let (chain, held) = exchange.0.take_all();
            if !chain.is_null() && self.note_take(held, parked) {
                // SAFETY: taken whole, so every carrier of the chain and
                // every block they list are ours, and each carrier's count
                // was written when it was passed on (`take_outbox`).
                unsafe { self.order(chain, held) };
                return self.open_ordered();
            }
            self.reserve = chain;
        }
        let Some(carrier) = NonNull::new(self.reserve) else {
            return false;
        };
        let carrier = carrier.as_ptr();
        // SAFETY: the reserve's carriers are ours and linked through `next`.
        self.reserve = unsafe { next_of(carrier) };
        // This carrier's list (its payload's lines, written by the core
        // that filled it), and the next carrier's link, for later.
        for line in (0..INLINE).step_by(64) {
            prefetch(
                carrier_words(carrier)
                    .cast::<u8>()
                    .wrapping_add(line)
                    .cast(),
            );
        }
        prefetch(self.reserve);
        self.open = carrier;
        // SAFETY: ours; its count was written when it was filled.
        self.open_left = unsafe { carried_count(carrier) };
        for i in 1..=FETCH_AHEAD.min(self.open_left) {
            // SAFETY: below the count.
            prefetch_block(unsafe { carried(carrier, self.open_left - i) });
        }
        true
    }

    /// Notes a take of `held` blocks from the exchange, and says whether
    /// it is handed out in address order: a large one while many tasks of
    /// the pool's runtime are parked on promises, now or at the last count
    /// (a program that makes its graph again takes the last round's blocks
    /// first). Those tasks' blocks are touched again when they are made
    /// ready, in another order than they were made; other blocks (tasks
    /// queued and run soon) go back out the most recently freed first,
    /// while still cached.
    ///
    /// `parked` counts those tasks by reading every worker's counters
    /// (lines their owners keep writing), so it is called only for a take
    /// large enough to be ordered, or once every [`COUNT_PARKED_EVERY`]
    /// blocks taken in smaller takes: a worker taking one carrier at a time
    /// does not read them all for each.
    fn note_take(&mut self, held: usize, parked: impl Fn() -> u64) -> bool {
        self.taken_since_count = self.taken_since_count.saturating_add(held);
        if held < ORDER_AT && self.taken_since_count < COUNT_PARKED_EVERY {
            return false;
        }
        self.taken_since_count = 0;
        let parked = parked();
        let many_parked = parked.max(self.parked_at_last_count) >= ORDER_AT as u64;
        self.parked_at_last_count = parked;
        held >= ORDER_AT && many_parked
    }

    /// Takes every block of `chain` (a null-terminated chain of carriers,
    /// about `held` blocks) into the address-ordered batch, which must be
    /// empty.
    ///
    /// # Safety
    /// The caller owns every carrier of the chain and every block they
    /// list, and each carrier's count is written.
    #[cold]
    unsafe fn order(&mut self, chain: *mut Header, held: usize) {
        let mut carrier = chain;
        let carriers = std::iter::from_fn(|| {
            let c = NonNull::new(carrier)?.as_ptr();
            // SAFETY: owned (caller), linked through `next`.
            carrier = unsafe { next_of(c) };
            prefetch(carrier);
            Some(c)
        });
        self.ordered.refill(
            held,
            carriers.flat_map(|c| {
                // SAFETY: owned (caller); the count was written when it was
                // filled, and each `i` is below it.
                let count = unsafe { carried_count(c) };
                // SAFETY: as above.
                (0..count).map(move |i| unsafe { carried(c, i) }).chain([c])
            }),
        );
    }

    /// Fetches the first blocks of the ordered batch just refilled, which
    /// `pop_reserve` hands out before any carrier; `false` if it is empty.
    fn open_ordered(&mut self) -> bool {
        for i in 0..FETCH_AHEAD {
            if let Some(block) = self.ordered.ahead(i) {
                prefetch_block(block);
            }
        }
        !self.ordered.is_empty()
    }

    /// Keeps `block` in this worker's pool, or passes it on to the
    /// exchange beyond [`POOL_IDLE_CAPACITY`]; returns it back if both
    /// refuse.
    #[inline]
    pub(super) fn push(&mut self, block: NonNull<Header>) -> Result<(), NonNull<Header>> {
        if self.len >= POOL_IDLE_CAPACITY {
            return self.pass_on(block);
        }
        // SAFETY: the block is unused; only its link is written.
        unsafe { ptr::addr_of_mut!((*block.as_ptr()).next).write(UnsafeLink::new(self.head)) };
        self.head = block.as_ptr();
        self.len += 1;
        Ok(())
    }

    /// Adds a surplus block to the outbox, which goes to the exchange once
    /// its carrier is full; returns it back if there is no exchange.
    #[cold]
    fn pass_on(&mut self, block: NonNull<Header>) -> Result<(), NonNull<Header>> {
        if self.exchange.is_none() {
            return Err(block);
        }
        let b = block.as_ptr();
        if self.outbox.is_null() {
            // The first surplus block carries the next ones.
            self.outbox = b;
            self.outbox_len = 1;
            return Ok(());
        }
        // SAFETY: the outbox's carrier is ours and unused, and fewer than
        // `CARRIED` blocks are listed yet (it is passed on when full): the
        // word written is inside its payload.
        unsafe {
            carrier_words(self.outbox)
                .add(self.outbox_len)
                .write(b as usize)
        };
        self.outbox_len += 1;
        if self.outbox_len > CARRIED {
            self.flush_outbox();
        }
        Ok(())
    }

    /// Empties the outbox: its carrier, with its count written and its
    /// link cleared, and how many blocks it holds (itself included), or
    /// `None` if it was empty.
    fn take_outbox(&mut self) -> Option<(*mut Header, usize)> {
        if self.outbox.is_null() {
            return None;
        }
        let carrier = std::mem::replace(&mut self.outbox, ptr::null_mut());
        let len = std::mem::take(&mut self.outbox_len);
        // SAFETY: the carrier is ours and unused; word 0 of its payload is
        // its count.
        unsafe {
            carrier_words(carrier).write(len - 1);
        }
        // SAFETY: as above.
        unsafe { set_next(carrier, ptr::null_mut()) };
        Some((carrier, len))
    }

    /// Passes the outbox to the exchange, or to the allocator if the
    /// exchange is full.
    fn flush_outbox(&mut self) {
        let Some((carrier, len)) = self.take_outbox() else {
            return;
        };
        let passed = self.exchange.as_ref().is_some_and(|exchange| {
            // SAFETY: the carrier and what it lists are ours: a chain of one.
            unsafe { exchange.0.push_chain(carrier, carrier, len) }
        });
        if !passed {
            // SAFETY: refused, so still ours, and its link is null.
            unsafe { dealloc_carriers(carrier) };
        }
    }
}

impl BlockPool {
    /// Returns blocks to the allocator until at most `keep` are left, and
    /// with them the reserve and the outbox (the worker is idle), and what
    /// the exchange holds if `everyone_idle` (else a worker that makes
    /// tasks may be about to take them).
    pub(super) fn trim_to(&mut self, keep: usize, everyone_idle: bool) {
        while self.len > keep {
            let Some(b) = NonNull::new(self.head) else {
                break;
            };
            // SAFETY: pooled blocks are unused and linked through `next`.
            self.head = unsafe { next_of(b.as_ptr()) };
            self.len -= 1;
            // SAFETY: pooled blocks are allocated with this layout and unused.
            unsafe { dealloc_block(b.as_ptr()) };
        }
        let open = std::mem::replace(&mut self.open, ptr::null_mut());
        if !open.is_null() {
            // SAFETY: the open carrier is ours, with the `open_left` blocks
            // it still lists (those beyond were handed out).
            unsafe { dealloc_carried(open, std::mem::take(&mut self.open_left)) };
        }
        let reserve = std::mem::replace(&mut self.reserve, ptr::null_mut());
        // SAFETY: the reserve's carriers are ours.
        unsafe { dealloc_carriers(reserve) };
        for block in self.ordered.take_all() {
            // SAFETY: the ordered batch's blocks are ours and unused.
            unsafe { dealloc_block(block) };
        }
        if let Some((carrier, _)) = self.take_outbox() {
            // SAFETY: the outbox's carrier is ours, its link null.
            unsafe { dealloc_carriers(carrier) };
        }
        if let Some(exchange) = self.exchange.as_ref().filter(|_| everyone_idle) {
            // SAFETY: taken whole: every carrier of the chain is ours.
            unsafe { dealloc_carriers(exchange.0.take_all_to_free()) };
        }
    }

    /// Whether it holds blocks taken from the exchange.
    pub(super) fn holds_taken_blocks(&self) -> bool {
        !self.reserve.is_null() || !self.open.is_null() || !self.ordered.is_empty()
    }

    /// Whether an idle trim would give anything back.
    pub(super) fn has_surplus(&self) -> bool {
        self.holds_taken_blocks()
            || !self.outbox.is_null()
            || self.exchange.as_ref().is_some_and(|e| e.0.held() > 0)
    }
}

impl Drop for BlockPool {
    fn drop(&mut self) {
        // The exchange's blocks go with the exchange, when the last pool
        // and the runtime let it go.
        self.trim_to(0, false);
    }
}

#[cfg(all(test, not(loom)))]
#[path = "block_pool_tests.rs"]
mod tests;
