//! Declared data access: the per-handle order (a write after the previous
//! write and every read since; a read after the previous write; reads of one
//! version together), poisoning and its recovery, duplicate declarations,
//! waits from outside a task, and concurrent submitters.

mod support;

use rand::{RngExt, SeedableRng};
use selvedge::{scope, spawn_with, Data, DataError, Graph, Promise, Runtime};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::Watchdog;

fn runtime(n: usize) -> Runtime {
    Runtime::builder().num_threads(n).build().unwrap()
}

#[test]
fn writes_run_one_at_a_time_in_submission_order() {
    let rt = runtime(4);
    let d = Data::new(Vec::new());
    for i in 0..200 {
        rt.spawn_with(d.write(), move |v: &mut Vec<i32>| {
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
            v.push(i)
        })
        .detach();
    }
    assert_eq!(d.into_inner(), (0..200).collect::<Vec<_>>());
}

#[test]
fn reads_of_one_version_run_together() {
    let rt = runtime(4);
    let d = Data::new(7);
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (running, most) = (running.clone(), most.clone());
            rt.spawn_with(d.read(), move |v| {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(100));
                running.fetch_sub(1, Ordering::SeqCst);
                *v
            })
        })
        .collect();
    for r in readers {
        assert_eq!(r.join(), 7);
    }
    assert!(most.load(Ordering::SeqCst) >= 2, "reads never overlapped");
}

#[test]
fn a_write_waits_for_the_reads_before_it_and_reads_after_it_see_it() {
    let rt = runtime(4);
    let d = Data::new(1);
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut hs = Vec::new();
    for i in 0..3 {
        let log = log.clone();
        hs.push(rt.spawn_with(d.read(), move |v| {
            std::thread::sleep(Duration::from_millis(20 * (3 - i)));
            log.lock().unwrap().push("read");
            *v
        }));
    }
    let l = log.clone();
    rt.spawn_with(d.write(), move |v| {
        l.lock().unwrap().push("write");
        *v = 2
    })
    .detach();
    let after = rt.spawn_with(d.read(), |v| *v);
    assert_eq!(after.join(), 2);
    for h in hs {
        assert_eq!(h.join(), 1, "a read submitted before the write saw it");
    }
    assert_eq!(*log.lock().unwrap(), ["read", "read", "read", "write"]);
}

/// Random tasks over random handles: every access checks it sees exactly
/// the version its submission order gives it. More workers than cores.
#[test]
fn random_tasks_see_the_versions_of_their_submission_order() {
    let rt = runtime(5);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let handles: Vec<Data<u64>> = (0..6).map(|i| Data::named(format!("h{i}"), 0)).collect();
    let mut writes = [0u64; 6];
    let mut tasks = Vec::new();
    for _ in 0..3000 {
        let n = rng.random_range(1..=3);
        let mut picked: Vec<usize> = (0..6).collect();
        for i in 0..n {
            let j = rng.random_range(i..6);
            picked.swap(i, j);
        }
        picked.truncate(n);
        let mut reads = Vec::new();
        let mut ws = Vec::new();
        let mut expect_r = Vec::new();
        let mut expect_w = Vec::new();
        for &h in &picked {
            if rng.random_bool(0.4) {
                ws.push(handles[h].write());
                expect_w.push(writes[h]);
                writes[h] += 1;
            } else {
                reads.push(handles[h].read());
                expect_r.push(writes[h]);
            }
        }
        let spin = rng.random_range(0..200u32);
        tasks.push(rt.spawn_with((reads, ws), move |(reads, ws)| {
            for (v, e) in reads.iter().zip(&expect_r) {
                assert_eq!(**v, *e, "a read saw the wrong version");
            }
            for _ in 0..spin {
                std::hint::spin_loop();
            }
            for (v, e) in ws.into_iter().zip(&expect_w) {
                assert_eq!(*v, *e, "a write saw the wrong version");
                *v += 1;
            }
        }));
    }
    for t in tasks {
        t.join();
    }
    for (h, w) in handles.into_iter().zip(writes) {
        assert_eq!(h.into_inner(), w);
    }
}

/// Threads submit tasks declaring the same handles in opposite orders at
/// the same time: the locks are taken in one order, so nothing deadlocks
/// and no pair of tasks waits for each other.
#[test]
fn concurrent_submitters_in_opposite_orders_finish() {
    let rt = runtime(3);
    let (a, b) = (Data::new(0u64), Data::new(0u64));
    std::thread::scope(|s| {
        for t in 0..4 {
            let (a, b, rt) = (a.clone(), b.clone(), &rt);
            s.spawn(move || {
                let hs: Vec<_> = (0..500)
                    .map(|_| {
                        if t % 2 == 0 {
                            rt.spawn_with((a.write(), b.write()), |(a, b)| {
                                *a += 1;
                                *b += 1
                            })
                        } else {
                            rt.spawn_with((b.write(), a.write()), |(b, a)| {
                                *a += 1;
                                *b += 1
                            })
                        }
                    })
                    .collect();
                for h in hs {
                    h.join();
                }
            });
        }
    });
    assert_eq!((a.into_inner(), b.into_inner()), (2000, 2000));
}

#[test]
fn declaring_a_handle_twice_panics_naming_it() {
    let d = Data::named("tile", 0);
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        spawn_with((d.read(), d.write()), |_| ()).detach();
    }))
    .unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(msg.contains("\"tile\" is declared twice"), "{msg}");
    // Nothing was registered: the handle is still free.
    assert_eq!(d.into_inner(), 0);
}

/// One tile read in two roles (a tiled A·Aᵀ's diagonal block): two reads
/// of one handle are one access, the closure gets two references to the
/// same value, and the order around it holds; a write beside a read of
/// the same handle is still refused.
#[test]
fn a_handle_declared_twice_for_reading_is_one_read() {
    let rt = runtime(2);
    let a = Data::named("A[0][0]", vec![1.0f64, 2.0, 3.0]);
    let c = Data::new(0.0f64);
    rt.spawn_with(a.write(), |a| a[0] = 2.0).detach();
    // Both roles of the same tile, and in a Vec too.
    let dot = rt.spawn_with((a.read(), a.read(), c.write()), |(x, y, c)| {
        assert!(std::ptr::eq(x, y), "two references to the same value");
        *c = x.iter().zip(y).map(|(p, q)| p * q).sum();
        *c
    });
    let both = rt.spawn_with(vec![a.read(), a.read()], |v| v[0][0] + v[1][0]);
    rt.spawn_with(a.write(), |a| a[0] = 10.0).detach();
    assert_eq!(dot.join(), 4.0 + 4.0 + 9.0);
    assert_eq!(both.join(), 4.0, "ordered before the later write");
    let mut g = Graph::new();
    g.node_with((a.read(), a.read(), c.write()), |(x, y, c)| {
        *c = x[0] * y[0]
    });
    rt.run_graph(&mut g).unwrap();
    drop(g);
    assert_eq!(c.into_inner(), 100.0);
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        spawn_with((a.read(), a.recover()), |_| ()).detach();
    }))
    .unwrap_err();
    let msg = err.downcast_ref::<String>().unwrap();
    assert!(msg.contains("\"A[0][0]\" is declared twice"), "{msg}");
    assert_eq!(a.into_inner(), [10.0, 2.0, 3.0]);
}

#[test]
fn a_panicking_writer_poisons_and_later_accesses_are_cancelled_naming_it() {
    let rt = runtime(2);
    let a = Data::named("a", 1);
    let b = Data::named("b", 1);
    let bad = rt.spawn_with(a.write(), |_: &mut i32| -> () { panic!("bad update") });
    // Reads `a` (poisoned): cancelled, and `b`, which it writes, is
    // poisoned in turn.
    let copy = rt.spawn_with((a.read(), b.write()), |(a, b)| *b = *a);
    let read_b = rt.spawn_with(b.read(), |b| *b);
    assert!(bad.try_join().unwrap_err().is_panic());
    let e = copy.try_join().unwrap_err();
    assert!(e.is_cancelled(), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("Data \"a\" is poisoned"), "{msg}");
    assert!(
        msg.contains("bad update") && msg.contains("panicked"),
        "{msg}"
    );
    let e = read_b.try_join().unwrap_err();
    assert!(
        e.is_cancelled() && e.to_string().contains("Data \"b\" is poisoned"),
        "{e}"
    );
    assert!(e.to_string().contains("bad update"), "{e}");
    // A new access after the fact is cancelled too: no hang.
    assert!(rt
        .spawn_with(a.read(), |a| *a)
        .try_join()
        .unwrap_err()
        .is_cancelled());
    assert!(a.read_now().unwrap_err().is_cancelled());
    // Recovery: a recover access repairs the value and clears the poison.
    rt.spawn_with(a.recover(), |a| *a = 10).detach();
    assert_eq!(rt.spawn_with(a.read(), |a| *a).join(), 10);
    rt.spawn_with((a.read(), b.recover()), |(a, b)| *b = *a + 1)
        .detach();
    assert_eq!(b.into_inner(), 11);
    assert_eq!(a.into_inner(), 10);
}

#[test]
fn a_panicking_reader_poisons_nothing() {
    let rt = runtime(2);
    let a = Data::new(3);
    let r = rt.spawn_with(a.read(), |_| -> () { panic!("reader failed") });
    assert!(r.try_join().unwrap_err().is_panic());
    rt.spawn_with(a.write(), |a| *a += 1).detach();
    assert_eq!(a.into_inner(), 4);
}

#[test]
fn try_into_inner_hands_back_what_it_cannot_give() {
    let rt = runtime(2);
    let d = Data::new(vec![1]);
    let other = d.clone();
    let d = match d.try_into_inner() {
        Err(DataError::Shared(d)) => d,
        other => panic!("expected Shared, got {other:?}"),
    };
    drop(other);
    let _ = rt
        .spawn_with(d.write(), |v: &mut Vec<i32>| {
            v.push(2);
            panic!("half done")
        })
        .try_join();
    match d.try_into_inner() {
        Err(DataError::Poisoned { value, cause }) => {
            assert_eq!(value, [1, 2]);
            assert!(cause.contains("half done"), "{cause}");
        }
        other => panic!("expected Poisoned, got {other:?}"),
    }
}

#[test]
fn into_inner_waits_for_every_access() {
    let rt = runtime(2);
    let d = Data::new(0);
    let gate = Promise::new();
    rt.spawn_with((d.write(), gate.dep()), |(d, ())| *d = 5)
        .detach();
    let g = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        gate.fulfill();
    });
    assert_eq!(d.into_inner(), 5);
    g.join().unwrap();
}

#[test]
fn read_now_waits_for_writes_and_holds_later_ones() {
    let rt = runtime(2);
    let d = Data::new(1);
    rt.spawn_with(d.write(), |d| {
        std::thread::sleep(Duration::from_millis(30));
        *d = 2
    })
    .detach();
    let guard = d.read_now().unwrap();
    assert_eq!(*guard, 2);
    let w = rt.spawn_with(d.write(), |d| *d = 3);
    std::thread::sleep(Duration::from_millis(30));
    assert!(
        !w.is_finished(),
        "a write ran while a read_now guard was held"
    );
    assert_eq!(*guard, 2);
    drop(guard);
    w.join();
    assert_eq!(d.into_inner(), 3);
}

#[test]
fn scoped_tasks_borrow_and_are_ordered() {
    let rt = runtime(3);
    let scale = 3.0f64;
    let v = Data::new(vec![1.0f64; 64]);
    let sum = Data::new(0.0f64);
    rt.run(|| {
        scope(|s| {
            s.spawn_with(v.write(), |_, v| v.iter_mut().for_each(|x| *x *= scale));
            s.spawn_with((v.read(), sum.write()), |_, (v, sum)| *sum = v.iter().sum());
        })
    });
    assert_eq!(sum.into_inner(), 192.0);
}

#[test]
fn a_scoped_task_on_poisoned_data_fails_its_scope() {
    let rt = runtime(2);
    let v = Data::named("v", 0);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.run(|| {
            scope(|s| {
                s.spawn_with(v.write(), |_, _: &mut i32| panic!("first"));
                s.spawn_with(v.read(), |_, _| ());
            })
        })
    }));
    let payload = r.unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"first"));
}

/// More handles than a task's submission keeps on the stack (it moves
/// them, and their logs' locks, to the heap): every access is recorded,
/// and every lock let go, so later tasks on the same handles run, in
/// order.
#[test]
fn a_task_declaring_more_handles_than_fit_on_the_stack_is_ordered_and_lets_them_go() {
    let _watchdog = Watchdog::new("many handles", Duration::from_secs(60));
    let rt = runtime(2);
    let xs: Vec<Data<u64>> = (1..=12).map(Data::new).collect();
    let out = Data::new(0);
    for round in 1..=3u64 {
        let reads: Vec<_> = xs[..11].iter().map(Data::read).collect();
        rt.spawn_with(
            (reads, xs[11].write(), out.write()),
            move |(r, last, out)| {
                *out = r.iter().copied().sum::<u64>() + *last;
                *last += 1;
            },
        )
        .detach();
        let writes: Vec<_> = xs.iter().map(Data::write).collect();
        rt.spawn_with(writes, |xs| xs.into_iter().for_each(|x| *x *= 2))
            .detach();
        // 1..=12 doubled `round - 1` times, plus what each round's first
        // task added to the last before the doubling.
        let last_added: u64 = (1..round).map(|r| 1 << (round - r)).sum();
        let want = ((1..=12).sum::<u64>() << (round - 1)) + last_added;
        assert_eq!(
            rt.spawn_with(out.read(), |o| *o).join(),
            want,
            "round {round}"
        );
    }
}

#[test]
fn arrays_and_single_accesses() {
    let rt = runtime(2);
    let xs: Vec<Data<i32>> = (0..3).map(Data::new).collect();
    let out = Data::new(0);
    rt.spawn_with(
        ([xs[0].read(), xs[1].read(), xs[2].read()], out.write()),
        |([a, b, c], out)| *out = a + b + c,
    )
    .detach();
    assert_eq!(rt.spawn_with(out.read(), |o| *o).join(), 3);
}

#[test]
fn waiting_on_a_handle_inside_a_task_that_declared_it_panics_instead_of_hanging() {
    // Without the check the task waits for itself forever: fail loudly
    // rather than hang the test run.
    let done = Watchdog::new("a task waiting on its own Data", Duration::from_secs(30));
    let rt = runtime(2);
    let d = Data::named("self", 1);
    let inner = d.clone();
    let h = rt.spawn_with(d.write(), move |v| {
        *v += 1;
        let _ = inner.read_now();
    });
    let e = h.try_join().unwrap_err();
    let msg = e.try_into_panic().ok().unwrap();
    let msg = msg.downcast_ref::<String>().unwrap();
    assert!(
        msg.contains("read_now on Data \"self\" inside a task that declared it"),
        "{msg}"
    );
    let other = Data::new(0);
    // A handle the task did not declare may be waited for.
    let o = other.clone();
    let ok = rt.spawn_with(d.recover(), move |_| *o.read_now().unwrap());
    assert_eq!(ok.join(), 0);
    drop(done);
}
