//! What a declared access costs (`Data` and `spawn_with`), shared by
//! `tools/benches/data.rs` (criterion) and `tools/src/bin/bench_report/main.rs` (`--only
//! data`). [`TASKS`] trivial tasks per run, over [`HANDLES`] handles (task i
//! uses handle i mod [`HANDLES`]), each run inside `rt.run`, every handle
//! joined (the reported time covers creating, scheduling and finishing the
//! tasks):
//!
//! - `selvedge spawn`: the baseline, no access.
//! - `spawn_with, 1 read` / `3 reads`: each task reads one (three) handles
//!   that nothing writes, so no task ever waits: the time over `spawn` is
//!   the declaration itself (the per-handle lock, the task's completion
//!   promise, its record in each handle's log).
//! - `spawn_with, 1 write`: each task updates its handle, so the tasks of
//!   a handle form a chain ([`HANDLES`] chains side by side).
//! - `hand-written promise chains`: the same chains written without `Data`:
//!   a `Mutex` per value, and per task a fresh `Promise` it fulfills when
//!   done and the next task of its handle waits on (`spawn_delayed`): what
//!   a declared write replaces.
//! - `rayon scope.spawn (no order)`: the same number of trivial tasks in a
//!   rayon scope, unordered: the peer's price for a task.
//! - `serial`: the same updates in a loop, for the checksum.
//!
//! Every implementation returns a checksum equal to the serial one.

use std::hint::black_box;
use std::sync::{Arc, Mutex};

use selvedge::{Data, JoinHandle, Promise};

/// Tasks per run.
pub const TASKS: u64 = 10_000;
/// Handles the tasks are spread over.
pub const HANDLES: usize = 64;

pub const SERIAL: &str = "serial";
pub const SPAWN: &str = "selvedge spawn";
pub const READ_1: &str = "selvedge spawn_with, 1 read";
pub const READ_3: &str = "selvedge spawn_with, 3 reads";
pub const WRITE_1: &str = "selvedge spawn_with, 1 write (chains)";
pub const PROMISES: &str = "selvedge hand-written promise chains + Mutex";
pub const RAYON: &str = "rayon scope.spawn (no order)";

#[inline]
fn trivial(i: u64) -> u64 {
    black_box(i)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(23)
}

/// One update of a handle's value by task `i`.
#[inline]
fn update(v: u64, i: u64) -> u64 {
    (v ^ trivial(i))
        .wrapping_mul(0xBF58_476D_1CE4_E5B9)
        .rotate_left(17)
}

fn initial(h: usize) -> u64 {
    h as u64 * 0x1000_0001
}

fn join_all(handles: Vec<JoinHandle<u64>>) -> u64 {
    handles
        .into_iter()
        .map(JoinHandle::join)
        .fold(0, u64::wrapping_add)
}

/// What the read tasks return, summed; then the final values, summed.
pub fn serial_reads<const R: usize>(k: u64) -> u64 {
    (0..k)
        .map(|i| {
            let h = i as usize % HANDLES;
            (0..R).fold(trivial(i), |a, r| a ^ initial((h + r) % HANDLES))
        })
        .fold(0, u64::wrapping_add)
}

pub fn serial_writes(k: u64) -> u64 {
    let mut v: Vec<u64> = (0..HANDLES).map(initial).collect();
    for i in 0..k {
        let h = i as usize % HANDLES;
        v[h] = update(v[h], i);
    }
    v.into_iter().fold(0, u64::wrapping_add)
}

pub fn spawn(k: u64) -> u64 {
    let handles = (0..k)
        .map(|i| selvedge::spawn(move || trivial(i) ^ initial(i as usize % HANDLES)))
        .collect();
    join_all(handles)
}

pub fn reads<const R: usize>(data: &[Data<u64>], k: u64) -> u64 {
    let handles = (0..k)
        .map(|i| {
            let h = i as usize % HANDLES;
            let accesses: [selvedge::Read<u64>; R] =
                std::array::from_fn(|r| data[(h + r) % HANDLES].read());
            selvedge::spawn_with(accesses, move |vals| {
                vals.iter().fold(trivial(i), |a, v| a ^ **v)
            })
        })
        .collect();
    join_all(handles)
}

/// Handles with their initial values, for the read runs (built outside the
/// timed region: nothing writes them).
pub fn read_handles() -> Vec<Data<u64>> {
    (0..HANDLES).map(|h| Data::new(initial(h))).collect()
}

pub fn writes(k: u64) -> u64 {
    let data: Vec<Data<u64>> = (0..HANDLES).map(|h| Data::new(initial(h))).collect();
    for i in 0..k {
        let h = i as usize % HANDLES;
        selvedge::spawn_with(data[h].write(), move |v| *v = update(*v, i)).detach();
    }
    data.into_iter()
        .map(Data::into_inner)
        .fold(0, u64::wrapping_add)
}

pub fn promise_chains(k: u64) -> u64 {
    let cells: Vec<Arc<Mutex<u64>>> = (0..HANDLES)
        .map(|h| Arc::new(Mutex::new(initial(h))))
        .collect();
    let mut last: Vec<Option<Promise>> = (0..HANDLES).map(|_| None).collect();
    let mut handles = Vec::with_capacity(k as usize);
    for i in 0..k {
        let h = i as usize % HANDLES;
        let done = Promise::new();
        let (cell, fulfil) = (cells[h].clone(), done.clone());
        handles.push(selvedge::spawn_delayed(
            last[h].as_ref().map(Promise::dep),
            move || {
                let mut v = cell.lock().unwrap();
                *v = update(*v, i);
                drop(v);
                fulfil.fulfill();
            },
        ));
        last[h] = Some(done);
    }
    for h in handles {
        h.join();
    }
    cells
        .iter()
        .map(|c| *c.lock().unwrap())
        .fold(0, u64::wrapping_add)
}

pub fn rayon_unordered(k: u64) -> u64 {
    let mut out = vec![0u64; k as usize];
    rayon::scope(|s| {
        for (i, slot) in out.iter_mut().enumerate() {
            s.spawn(move |_| *slot = trivial(i as u64) ^ initial(i % HANDLES));
        }
    });
    out.into_iter().fold(0, u64::wrapping_add)
}
