//! What a cancelled access does to a `Data` handle: an access whose task
//! was cancelled before it ran (a dependency it declared broke, or its
//! runtime shut down) touched nothing, so it gives up its place in the
//! order: the accesses after it run once those before it are over, and the
//! value stays reachable.

mod support;

use selvedge::{Data, DataError, Graph, Promise, Runtime};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::Watchdog;

fn runtime(n: usize) -> Runtime {
    Runtime::builder().num_threads(n).build().unwrap()
}

/// The program: an unrelated dependency breaks, the write never
/// runs, and everything after it works: reads, writes, `recover`,
/// `read_now`, `try_into_inner`.
#[test]
fn a_cancelled_write_leaves_the_value_and_the_order_intact() {
    let _watchdog = Watchdog::new("a cancelled write", Duration::from_secs(60));
    let rt = runtime(2);
    let d = Data::named("v", vec![1, 2, 3]);
    let p = Promise::new();
    let h = rt.spawn_with((d.write(), p.dep()), |(v, ()): (&mut Vec<i32>, ())| {
        v.push(4)
    });
    drop(p);
    let err = h.try_join().unwrap_err();
    assert!(err.is_cancelled(), "{err}");

    let read = rt.spawn_with(d.read(), |v: &Vec<i32>| v.clone());
    assert_eq!(read.try_join().unwrap(), [1, 2, 3]);
    rt.spawn_with(d.write(), |v: &mut Vec<i32>| v.push(5))
        .try_join()
        .unwrap();
    rt.spawn_with(d.recover(), |v: &mut Vec<i32>| v.push(6))
        .try_join()
        .unwrap();
    assert_eq!(*d.read_now().unwrap(), [1, 2, 3, 5, 6]);
    match d.try_into_inner() {
        Ok(v) => assert_eq!(v, [1, 2, 3, 5, 6]),
        Err(e) => panic!("the value was lost: {e}"),
    }
}

/// A cancelled access still waits for the accesses before it: the read
/// after it must not overlap the slow write before it.
#[test]
fn a_cancelled_access_passes_its_turn_only_after_the_accesses_before_it() {
    let _watchdog = Watchdog::new("turn passed in order", Duration::from_secs(60));
    let rt = runtime(3);
    for _ in 0..20 {
        let d = Data::new(0u32);
        let writing = Arc::new(AtomicBool::new(false));
        let w = writing.clone();
        let gate = Promise::new();
        let started = Promise::new();
        let s = started.clone();
        let slow = rt.spawn_with(d.write(), move |v: &mut u32| {
            w.store(true, Ordering::SeqCst);
            s.fulfill();
            std::thread::sleep(Duration::from_millis(20));
            *v = 1;
            w.store(false, Ordering::SeqCst);
        });
        let cancelled = rt.spawn_with((d.write(), gate.dep()), |(v, ())| *v = 99);
        let w = writing.clone();
        let after = rt.spawn_with(d.read(), move |v: &u32| (*v, w.load(Ordering::SeqCst)));
        // The slow write is running when the middle one is cancelled.
        rt.spawn_delayed([started.dep()], move || drop(gate)).join();
        assert!(cancelled.try_join().unwrap_err().is_cancelled());
        assert_eq!(after.join(), (1, false), "the read overlapped the write");
        slow.join();
        assert_eq!(d.into_inner(), 1);
    }
}

/// A cancelled write after several pending reads passes its turn on only
/// when every one of them is over, however many there are (one, a few, or
/// more than a small list holds). The write is cancelled by its runtime's
/// shutdown while the reads, on another runtime, still wait.
#[test]
fn a_cancelled_write_waits_for_every_read_before_it() {
    let _watchdog = Watchdog::new("a write after many reads", Duration::from_secs(60));
    let rt = runtime(3);
    for readers in [1, 2, 3, 8, 9, 20] {
        let d = Data::new(0u32);
        let open = Promise::new();
        let finished = Arc::new(AtomicUsize::new(0));
        let reads: Vec<_> = (0..readers)
            .map(|_| {
                let finished = finished.clone();
                rt.spawn_with((d.read(), open.dep()), move |(v, ()): (&u32, ())| {
                    std::thread::sleep(Duration::from_millis(2));
                    finished.fetch_add(1, Ordering::SeqCst);
                    *v
                })
            })
            .collect();
        let cancelled = {
            let doomed = runtime(1);
            let h = doomed.spawn_with(d.write(), |v: &mut u32| *v = 99);
            drop(doomed);
            h
        };
        assert!(cancelled.try_join().unwrap_err().is_cancelled());
        let seen = finished.clone();
        let after = rt.spawn_with(d.write(), move |v: &mut u32| {
            *v = 1;
            seen.load(Ordering::SeqCst)
        });
        open.fulfill();
        assert_eq!(
            after.join(),
            readers,
            "the write after overlapped the reads"
        );
        for r in reads {
            assert_eq!(r.join(), 0);
        }
        assert_eq!(d.into_inner(), 1);
    }
}

/// Tasks cancelled because their runtime shut down while they waited: the
/// handle works on another runtime afterwards, and gives its value back.
#[test]
fn accesses_cancelled_by_a_shutdown_leave_the_handle_usable() {
    let _watchdog = Watchdog::new("shutdown", Duration::from_secs(60));
    let d = Data::new(10u64);
    let never = Promise::new();
    let (first, second) = {
        let rt = runtime(2);
        let first = rt.spawn_with((d.write(), never.dep()), |(v, ())| *v += 1);
        let second = rt.spawn_with(d.write(), |v| *v += 100);
        drop(rt);
        (first, second)
    };
    let err = first.try_join().unwrap_err();
    assert!(err.to_string().contains("runtime shut down"), "{err}");
    assert!(second.try_join().unwrap_err().is_cancelled());
    let rt = runtime(2);
    rt.spawn_with(d.write(), |v| *v *= 2).try_join().unwrap();
    drop(never);
    assert_eq!(d.into_inner(), 20);
}

/// A long chain of cancelled writes passes the turn down without a
/// recursion as deep as the chain.
#[test]
fn a_long_chain_of_cancelled_accesses_passes_the_turn_down() {
    let _watchdog = Watchdog::new("long chain", Duration::from_secs(120));
    let rt = runtime(2);
    let d = Data::new(0u64);
    let gate = Promise::new();
    // Held back by the gate, so every cancelled one waits on the one before.
    let first = rt.spawn_with((d.write(), gate.dep()), |(v, ())| *v += 1);
    let p = Promise::new();
    let cancelled: Vec<_> = (0..100_000)
        .map(|_| rt.spawn_with((d.write(), p.dep()), |(v, ())| *v += 1000))
        .collect();
    drop(p); // all cancelled, their turns relayed behind `first`
    let last = rt.spawn_with(d.read(), |v| *v);
    assert!(!last.is_finished());
    gate.fulfill();
    first.join();
    assert_eq!(last.join(), 1);
    for h in cancelled {
        assert!(h.try_join().unwrap_err().is_cancelled());
    }
    assert_eq!(d.into_inner(), 1);
}

/// A graph run after a cancelled access to its data runs normally.
#[test]
fn a_graph_runs_after_a_cancelled_access_to_its_data() {
    let _watchdog = Watchdog::new("graph after cancel", Duration::from_secs(60));
    let rt = runtime(2);
    let d = Data::named("g", 0u32);
    let mut g = Graph::new();
    g.node_with(d.write(), |v| *v += 1);
    let never = Promise::new();
    let cancelled = rt.spawn_with((d.write(), never.dep()), |(v, ())| *v = 99);
    drop(never);
    assert!(cancelled.try_join().unwrap_err().is_cancelled());
    rt.run_graph(&mut g).unwrap();
    rt.run_graph(&mut g).unwrap();
    drop(g);
    assert_eq!(d.into_inner(), 2);
}

/// Another handle alive: `try_into_inner` hands it back, and the message
/// names the handle and says what commonly holds one.
#[test]
fn a_shared_handle_is_named_in_the_error() {
    let d = Data::named("tile", 1u8);
    let other = d.clone();
    let err = d.try_into_inner().unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("Data \"tile\" has 1 other handle"),
        "{message}"
    );
    assert!(message.contains("Graph"), "{message}");
    let DataError::Shared(d) = err else {
        panic!("expected Shared")
    };
    drop(other);
    assert_eq!(d.into_inner(), 1);
}
