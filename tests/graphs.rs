//! Graphs built once and run many times: order, exactly-once runs,
//! cycles, panics that skip what follows them, nesting, and runs from
//! several threads at once. Runtimes have more workers than the machine
//! has cores.

mod support;

use selvedge::{parallel_for, Graph, GraphError, Node, Runtime};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::Watchdog;

fn runtime(threads: usize) -> Runtime {
    Runtime::builder().num_threads(threads).build().unwrap()
}

/// A `side` x `side` wavefront whose node (i, j) follows (i - 1, j) and
/// (i, j - 1), recording in `done` the run in which it ran, and checking
/// that its predecessors ran in the same run before it.
fn wavefront<'g>(side: usize, done: &'g [AtomicU64], run: &'g AtomicU64) -> (Graph<'g>, Vec<Node>) {
    let mut g = Graph::new();
    let mut nodes = Vec::with_capacity(side * side);
    for i in 0..side {
        for j in 0..side {
            let node = g.node(move || {
                let now = run.load(Ordering::Relaxed);
                if i > 0 {
                    assert_eq!(
                        done[(i - 1) * side + j].load(Ordering::Acquire),
                        now,
                        "({i},{j}) before its upper neighbour"
                    );
                }
                if j > 0 {
                    assert_eq!(
                        done[i * side + j - 1].load(Ordering::Acquire),
                        now,
                        "({i},{j}) before its left neighbour"
                    );
                }
                let previous = done[i * side + j].swap(now, Ordering::Release);
                assert_eq!(previous, now - 1, "({i},{j}) ran twice, or skipped a run");
            });
            if i > 0 {
                g.precede(nodes[(i - 1) * side + j], node);
            }
            if j > 0 {
                g.precede(nodes[i * side + j - 1], node);
            }
            nodes.push(node);
        }
    }
    (g, nodes)
}

#[test]
fn every_node_runs_once_per_run_after_its_predecessors() {
    let _watchdog = Watchdog::new("wavefront graph", Duration::from_secs(120));
    let rt = runtime(4);
    const SIDE: usize = 48;
    let done: Vec<AtomicU64> = (0..SIDE * SIDE).map(|_| AtomicU64::new(0)).collect();
    let run = AtomicU64::new(0);
    let (mut g, _) = wavefront(SIDE, &done, &run);
    for r in 1..=50 {
        run.store(r, Ordering::Relaxed);
        rt.run_graph(&mut g).unwrap();
        assert!(
            done.iter().all(|d| d.load(Ordering::Relaxed) == r),
            "run {r} left a node unrun"
        );
    }
}

#[test]
fn every_node_runs_when_none_has_an_edge() {
    let rt = runtime(4);
    let count = AtomicUsize::new(0);
    let mut g = Graph::new();
    for _ in 0..10_000 {
        g.node(|| {
            count.fetch_add(1, Ordering::Relaxed);
        });
    }
    for _ in 0..5 {
        rt.run_graph(&mut g).unwrap();
    }
    assert_eq!(count.load(Ordering::Relaxed), 50_000);
}

#[test]
fn an_empty_graph_runs() {
    let _watchdog = Watchdog::new("empty graph", Duration::from_secs(60));
    let rt = runtime(2);
    let mut g = Graph::new();
    rt.run_graph(&mut g).unwrap();
    g.run().unwrap();
}

#[test]
fn a_cycle_is_reported_with_its_nodes_and_nothing_runs() {
    let _watchdog = Watchdog::new("cyclic graph", Duration::from_secs(60));
    let ran = AtomicBool::new(false);
    let mut g = Graph::new();
    let start = g.node_named("start", || ran.store(true, Ordering::Relaxed));
    let a = g.node_named("a", || ran.store(true, Ordering::Relaxed));
    let b = g.node_named("b", || ran.store(true, Ordering::Relaxed));
    let c = g.node_named("c", || ran.store(true, Ordering::Relaxed));
    g.precede(start, a);
    g.precede(a, b);
    g.precede(b, c);
    g.precede(c, a);
    let err = runtime(2).run_graph(&mut g).unwrap_err();
    match &err {
        GraphError::Cycle { nodes, names } => {
            assert_eq!(nodes, &[a, b, c]);
            assert_eq!(names, &["a", "b", "c"]);
        }
        other => panic!("expected a cycle, got {other:?}"),
    }
    assert_eq!(err.to_string(), "the graph has a cycle: a -> b -> c -> a");
    assert!(!ran.load(Ordering::Relaxed), "a node of a cyclic graph ran");
}

#[test]
#[should_panic(expected = "a node belongs to the graph that made it")]
fn a_node_of_another_graph_is_refused() {
    let mut first = Graph::new();
    let mut second = Graph::new();
    let a = first.node(|| {});
    let b = second.node(|| {});
    second.precede(a, b);
}

#[test]
fn a_panic_skips_exactly_the_nodes_after_it_and_the_graph_runs_again() {
    let rt = runtime(4);
    let fail = AtomicBool::new(true);
    let ran = Mutex::new(Vec::new());
    let log = |name: &'static str| {
        let ran = &ran;
        move || ran.lock().unwrap().push(name)
    };
    let mut g = Graph::new();
    //  top -> left  -> bottom -> last
    //      -> right -^
    //  apart (no edges)
    let top = g.node_named("top", log("top"));
    let left = g.node_named("left", {
        let fail = &fail;
        let ran = &ran;
        move || {
            if fail.load(Ordering::Relaxed) {
                panic!("left failed");
            }
            ran.lock().unwrap().push("left");
        }
    });
    let right = g.node_named("right", log("right"));
    let bottom = g.node_named("bottom", log("bottom"));
    let last = g.node_named("last", log("last"));
    g.node_named("apart", log("apart"));
    g.precede(top, left);
    g.precede(top, right);
    g.precede(left, bottom);
    g.precede(right, bottom);
    g.precede(bottom, last);

    let err = rt.run_graph(&mut g).unwrap_err();
    let GraphError::Failed {
        panicked,
        skipped,
        skipped_names,
    } = &err
    else {
        panic!("expected a failed run, got {err:?}");
    };
    assert_eq!(panicked.len(), 1);
    assert_eq!(
        (panicked[0].node, panicked[0].name.as_str()),
        (left, "left")
    );
    assert_eq!(panicked[0].message(), Some("left failed"));
    assert_eq!(skipped, &[bottom, last]);
    assert_eq!(skipped_names, &["bottom", "last"]);
    assert_eq!(
        err.to_string(),
        "node 'left' panicked: left failed; 2 nodes after it were skipped: bottom, last"
    );
    let mut first: Vec<_> = std::mem::take(&mut *ran.lock().unwrap());
    first.sort_unstable();
    assert_eq!(first, ["apart", "right", "top"]);

    fail.store(false, Ordering::Relaxed);
    rt.run_graph(&mut g).unwrap();
    let mut second = std::mem::take(&mut *ran.lock().unwrap());
    second.sort_unstable();
    assert_eq!(second, ["apart", "bottom", "last", "left", "right", "top"]);
}

#[test]
fn panics_in_many_nodes_are_all_reported() {
    let rt = runtime(4);
    let mut g = Graph::new();
    let sink = g.node_named("sink", || {});
    for i in 0..100 {
        let n = g.node(move || {
            if i % 10 == 0 {
                panic!("node {i}");
            }
        });
        g.precede(n, sink);
    }
    let Err(GraphError::Failed {
        panicked, skipped, ..
    }) = rt.run_graph(&mut g)
    else {
        panic!("expected a failed run");
    };
    assert_eq!(panicked.len(), 10);
    assert_eq!(skipped, [sink]);
}

#[test]
fn a_nested_graph_runs_as_one_node_and_its_failure_fails_the_node() {
    let rt = runtime(3);
    let log = Mutex::new(Vec::new());
    let fail = AtomicBool::new(false);
    let mut inner = Graph::new();
    let x = inner.node(|| log.lock().unwrap().push("x"));
    let y = inner.node_named("y", || {
        if fail.load(Ordering::Relaxed) {
            panic!("y failed");
        }
        log.lock().unwrap().push("y");
    });
    inner.precede(x, y);
    let mut outer = Graph::new();
    let before = outer.node(|| log.lock().unwrap().push("before"));
    let nested = outer.subgraph(inner);
    let after = outer.node_named("after", || log.lock().unwrap().push("after"));
    outer.precede(before, nested);
    outer.precede(nested, after);
    for _ in 0..3 {
        rt.run_graph(&mut outer).unwrap();
        let got = std::mem::take(&mut *log.lock().unwrap());
        assert_eq!(got, ["before", "x", "y", "after"]);
    }
    fail.store(true, Ordering::Relaxed);
    let err = rt.run_graph(&mut outer).unwrap_err();
    let GraphError::Failed {
        panicked, skipped, ..
    } = &err
    else {
        panic!("expected a failed run, got {err:?}");
    };
    assert_eq!(panicked[0].node, nested);
    let message = panicked[0].message().unwrap();
    assert!(message.contains("node 'y' panicked: y failed"), "{message}");
    assert_eq!(skipped, &[after]);
}

#[test]
fn a_parallel_loop_in_a_node_finishes_before_its_successor_runs() {
    let rt = runtime(4);
    let sum = AtomicU64::new(0);
    let checked = AtomicU64::new(0);
    let mut g = Graph::new();
    let fill = g.node(|| {
        parallel_for(0..100_000usize).for_each(|i| {
            sum.fetch_add(i as u64, Ordering::Relaxed);
        })
    });
    let check = g.node(|| {
        checked.store(sum.swap(0, Ordering::Relaxed), Ordering::Relaxed);
    });
    g.precede(fill, check);
    for _ in 0..5 {
        rt.run_graph(&mut g).unwrap();
        assert_eq!(checked.load(Ordering::Relaxed), 100_000 * 99_999 / 2);
    }
}

#[test]
fn a_graph_changed_after_a_run_is_resolved_again() {
    let rt = runtime(2);
    let order = Mutex::new(Vec::new());
    let mut g = Graph::new();
    let a = g.node(|| order.lock().unwrap().push('a'));
    let b = g.node(|| order.lock().unwrap().push('b'));
    g.precede(a, b);
    rt.run_graph(&mut g).unwrap();
    let c = g.node(|| order.lock().unwrap().push('c'));
    g.precede(c, a);
    rt.run_graph(&mut g).unwrap();
    assert_eq!(*order.lock().unwrap(), ['a', 'b', 'c', 'a', 'b']);
    g.precede(b, c);
    assert!(matches!(g.check(), Err(GraphError::Cycle { .. })));
}

#[test]
fn graphs_run_from_many_threads_and_tasks_at_once() {
    let _watchdog = Watchdog::new("concurrent graphs", Duration::from_secs(120));
    let rt = Arc::new(runtime(4));
    let total = Arc::new(AtomicU64::new(0));
    let make = |total: Arc<AtomicU64>| {
        let mut g = Graph::new();
        let mut previous: Option<Node> = None;
        for i in 0..64u64 {
            let t = Arc::clone(&total);
            let n = g.node(move || {
                t.fetch_add(i, Ordering::Relaxed);
            });
            if let Some(p) = previous.filter(|_| i % 3 != 0) {
                g.precede(p, n);
            }
            previous = Some(n);
        }
        g
    };
    // Foreign threads, each with its own graph, through run_graph and
    // spawn_graph.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let rt = Arc::clone(&rt);
            let mut g = make(Arc::clone(&total));
            std::thread::spawn(move || {
                for _ in 0..50 {
                    if t % 2 == 0 {
                        rt.run_graph(&mut g).unwrap();
                    } else {
                        let (back, result) = rt.spawn_graph(g).join();
                        result.unwrap();
                        g = back;
                    }
                }
            })
        })
        .collect();
    // And tasks of the runtime itself, each running a graph in place.
    rt.run(|| {
        selvedge::scope(|s| {
            for _ in 0..4 {
                let mut g = make(Arc::clone(&total));
                s.spawn(move |_| {
                    for _ in 0..50 {
                        g.run().unwrap();
                    }
                });
            }
        })
    });
    for t in threads {
        t.join().unwrap();
    }
    let per_run: u64 = (0..64).sum();
    assert_eq!(total.load(Ordering::Relaxed), per_run * 50 * 8);
}

#[test]
fn long_chains_and_wide_fans_run_without_deep_recursion() {
    let _watchdog = Watchdog::new("long chains and wide fans", Duration::from_secs(120));
    let rt = runtime(3);
    let count = AtomicUsize::new(0);
    let bump = || {
        count.fetch_add(1, Ordering::Relaxed);
    };
    let mut g = Graph::new();
    // A chain of 200,000 nodes, then a fan of 20,000 nodes after its end,
    // all joined by one last node.
    const CHAIN: usize = 200_000;
    const FAN: usize = 20_000;
    let mut previous = g.node(bump);
    for _ in 1..CHAIN {
        let n = g.node(bump);
        g.precede(previous, n);
        previous = n;
    }
    let sink = g.node(bump);
    for _ in 0..FAN {
        let n = g.node(bump);
        g.precede(previous, n);
        g.precede(n, sink);
    }
    for run in 1..=3 {
        rt.run_graph(&mut g).unwrap();
        assert_eq!(count.load(Ordering::Relaxed), run * (CHAIN + FAN + 1));
    }
    // The same chain's first node panicking skips all of it.
    let mut failing = Graph::new();
    let mut previous = failing.node(|| panic!("the first link"));
    for _ in 1..CHAIN {
        let n = failing.node(|| {});
        failing.precede(previous, n);
        previous = n;
    }
    let Err(GraphError::Failed { skipped, .. }) = rt.run_graph(&mut failing) else {
        panic!("expected a failed run");
    };
    assert_eq!(skipped.len(), CHAIN - 1);
}
