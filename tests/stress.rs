//! Stress: millions of tasks on more workers than cores, and an accounting of
//! every closure (each runs exactly once, or is dropped exactly once).

use selvedge::{join, scope, spawn, Runtime};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Counts how its closure ended: run, or dropped without running.
struct Tracked {
    ran: Arc<AtomicUsize>,
    dropped: Arc<AtomicUsize>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

impl Tracked {
    fn run(self) -> usize {
        self.ran.fetch_add(1, Ordering::Relaxed);
        1
    }
}

#[test]
fn every_task_runs_exactly_once_and_every_closure_is_dropped_once() {
    for threads in [2, 4, 8] {
        let ran = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let make = || Tracked {
            ran: ran.clone(),
            dropped: dropped.clone(),
        };
        {
            let rt = Runtime::builder().num_threads(threads).build().unwrap();
            rt.run(|| {
                fn tree(depth: u32, make: &(dyn Fn() -> Tracked + Sync)) -> usize {
                    let t = make();
                    if depth == 0 {
                        return t.run();
                    }
                    let hs: Vec<_> = (0..4)
                        .map(|_| {
                            let t = make();
                            spawn(move || t.run())
                        })
                        .collect();
                    let (a, b) = join(|| tree(depth - 1, make), || tree(depth - 1, make));
                    t.run() + a + b + hs.into_iter().map(|h| h.join()).sum::<usize>()
                }
                tree(10, &make)
            });
            // Detached tasks and handles dropped without joining.
            rt.run(|| {
                for i in 0..20_000 {
                    let t = make();
                    let h = spawn(move || t.run());
                    if i % 2 == 0 {
                        drop(h);
                    } else {
                        h.join();
                    }
                }
            });
            // Closures dropped inside scopes, in tasks that panic.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                rt.run(|| {
                    scope(|s| {
                        for i in 0..1000 {
                            let t = make();
                            s.spawn(move |_| {
                                if i == 500 {
                                    panic!("one task fails");
                                }
                                t.run();
                            });
                        }
                    })
                })
            }));
        } // runtime dropped: everything finished
        let made = dropped.load(Ordering::Relaxed);
        // N(0) = 1, N(d) = 1 + 4 + 2 N(d - 1): 2^10 leaves and 5 per inner node.
        let expected_tree = (1 << 10) + 5 * ((1 << 10) - 1);
        assert_eq!(
            ran.load(Ordering::Relaxed),
            expected_tree + 20_000 + 999,
            "threads={threads}"
        );
        // Every closure made was dropped exactly once: run ones after running,
        // the panicking one during unwinding.
        assert_eq!(made, expected_tree + 20_000 + 1000, "threads={threads}");
    }
}

#[test]
fn millions_of_tasks_on_eight_workers() {
    let rt = Runtime::builder().num_threads(8).build().unwrap();
    fn count(n: u64) -> u64 {
        if n <= 1 {
            return 1;
        }
        let a = spawn(move || count(n / 2));
        let (b, c) = join(|| count((n - 1) / 2), || 0);
        a.join() + b + c
    }
    // About 2 million spawns and 2 million joins.
    let n = 2_000_000;
    let leaves = rt.run(|| count(n));
    assert!(leaves > 0);
    let total = Arc::new(AtomicUsize::new(0));
    rt.run(|| {
        scope(|s| {
            for _ in 0..1000 {
                s.spawn(|s| {
                    for _ in 0..1000 {
                        let t = &total;
                        s.spawn(move |_| {
                            t.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                });
            }
        })
    });
    assert_eq!(total.load(Ordering::Relaxed), 1_000_000);
}

#[test]
fn concurrent_submitters_and_workers_under_oversubscription() {
    let rt = Arc::new(Runtime::builder().num_threads(8).build().unwrap());
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let rt = rt.clone();
            std::thread::spawn(move || {
                let mut sum = 0;
                for _ in 0..200 {
                    sum += rt.run(|| {
                        let (a, b) = join(
                            || spawn(|| 1).join(),
                            || {
                                scope(|s| {
                                    s.spawn(|_| ());
                                    1
                                })
                            },
                        );
                        a + b
                    });
                }
                sum
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 400);
    }
}
