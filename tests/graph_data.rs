//! Graphs whose nodes declare the `Data` they read and write: the edges
//! the declarations imply, the ordering of whole runs with tasks outside
//! the graph, poison, and the misuses that are refused with a message.
//! Runtimes have more workers than the machine has cores.

mod support;

use selvedge::{Data, Dep, Graph, GraphError, Promise, Runtime};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;
use support::{panic_text, Watchdog};

fn runtime(threads: usize) -> Runtime {
    Runtime::builder().num_threads(threads).build().unwrap()
}

/// A wavefront whose tiles are `Data` and whose only edges come from the
/// declarations: tile (i, j) reads its upper and left neighbours and
/// writes itself, each run adding the step number to a running digest.
/// Checked against the same sums computed serially, run after run.
#[test]
fn declarations_alone_order_a_wavefront_run_after_run() {
    let _watchdog = Watchdog::new("declared wavefront", Duration::from_secs(120));
    let rt = runtime(4);
    let side = 24;
    let tiles: Vec<Data<u64>> = (0..side * side).map(|_| Data::new(0)).collect();
    let step = Arc::new(AtomicU64::new(0));
    let mut g = Graph::new();
    for i in 0..side {
        for j in 0..side {
            let me = tiles[i * side + j].write();
            let up = (i > 0).then(|| tiles[(i - 1) * side + j].read());
            let left = (j > 0).then(|| tiles[i * side + j - 1].read());
            let step = step.clone();
            let mix = move |me: &mut u64, up: u64, left: u64| {
                // Slow enough that a neighbour running at the same time
                // would be seen half way.
                let mut x = up.wrapping_mul(31) ^ left.wrapping_mul(17);
                for _ in 0..64 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                *me = me.wrapping_add(x ^ step.load(Ordering::Relaxed));
            };
            match (up, left) {
                (Some(u), Some(l)) => g.node_with((me, u, l), move |(me, u, l)| mix(me, *u, *l)),
                (Some(u), None) => g.node_with((me, u), move |(me, u)| mix(me, *u, 0)),
                (None, Some(l)) => g.node_with((me, l), move |(me, l)| mix(me, 0, *l)),
                (None, None) => g.node_with(me, move |me| mix(me, 0, 0)),
            };
        }
    }
    // Each tile but the first row and column reads two neighbours.
    assert_eq!(g.edge_count(), 2 * side * (side - 1));
    let mut expected = vec![0u64; side * side];
    for run in 1..=20u64 {
        step.store(run, Ordering::Relaxed);
        rt.run_graph(&mut g).unwrap();
        for i in 0..side {
            for j in 0..side {
                let up = if i > 0 {
                    expected[(i - 1) * side + j]
                } else {
                    0
                };
                let left = if j > 0 { expected[i * side + j - 1] } else { 0 };
                let mut x = up.wrapping_mul(31) ^ left.wrapping_mul(17);
                for _ in 0..64 {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                }
                expected[i * side + j] = expected[i * side + j].wrapping_add(x ^ run);
            }
        }
        for (k, tile) in tiles.iter().enumerate() {
            assert_eq!(
                *tile.read_now().unwrap(),
                expected[k],
                "tile {k} after run {run}"
            );
        }
    }
}

/// The edges: a write after the last write and the reads since it, a
/// read after the last write only (so reads of one version run at once).
#[test]
fn the_declared_edges_are_a_writes_predecessors_and_a_reads_last_writer() {
    let d = Data::new(0u32);
    let mut g = Graph::new();
    let w1 = g.node_with_named("w1", d.write(), |_| {});
    let r1 = g.node_with_named("r1", d.read(), |_| {});
    let r2 = g.node_with_named("r2", d.read(), |_| {});
    let w2 = g.node_with_named("w2", d.write(), |_| {});
    let r3 = g.node_with_named("r3", d.read(), |_| {});
    let _ = (w1, r1, r2, w2, r3);
    // w1 -> r1, w1 -> r2, w1 -> w2, r1 -> w2, r2 -> w2, w2 -> r3.
    assert_eq!(g.edge_count(), 6);
    // Both reads run while the other waits: no edge between them.
    let rt = runtime(2);
    let (a, b) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let mut g = Graph::new();
    g.node_with(d.write(), |v| *v = 1);
    for (mine, other) in [(a.clone(), b.clone()), (b, a)] {
        g.node_with(d.read(), move |v| {
            assert_eq!(*v, 1);
            mine.store(true, Ordering::Release);
            let _watchdog = Watchdog::new("two reads at once", Duration::from_secs(60));
            while !other.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
        });
    }
    rt.run_graph(&mut g).unwrap();
}

/// A run waits for the tasks submitted before it that use its data, and
/// tasks submitted while it runs wait for the run.
#[test]
fn a_run_is_ordered_with_the_tasks_outside_the_graph() {
    let _watchdog = Watchdog::new("runs and outside tasks", Duration::from_secs(120));
    let rt = runtime(4);
    let d = Data::named("shared", 0u64);
    let seen = Arc::new(AtomicU64::new(0));
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let started_tx = std::sync::Mutex::new(started_tx);
    let mut g = Graph::new();
    {
        let seen = seen.clone();
        g.node_with(d.write(), move |v| {
            seen.store(*v, Ordering::Relaxed);
            *v = 1;
            started_tx.lock().unwrap().send(()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            *v = 2;
        });
    }
    // Submitted before the run, slow: the run's node must see its write.
    let gate = Promise::new();
    rt.spawn_with((d.write(), gate.dep()), |v: (&mut u64, ())| *v.0 = 7)
        .detach();
    let handle = rt.spawn_graph(g);
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !handle.is_finished(),
        "the run started before the write it follows"
    );
    gate.fulfill();
    started_rx.recv().unwrap();
    // Submitted while the node runs: it must see the run's last value.
    let read = rt.spawn_with(d.read(), |v| *v);
    assert_eq!(
        read.join(),
        2,
        "a read submitted during the run saw it half way"
    );
    let (g, result) = handle.join();
    result.unwrap();
    assert_eq!(seen.load(Ordering::Relaxed), 7);
    drop(g);
    assert_eq!(d.into_inner(), 2);
}

/// Runs after the first register nothing unless something from outside
/// the graph used its handles since: they still wait for the tasks
/// submitted before them (on a handle the graph writes, and on one it only
/// reads), and tasks submitted while they run wait for them.
#[test]
fn later_runs_stay_ordered_with_the_tasks_outside_the_graph() {
    let _watchdog = Watchdog::new("later runs and outside tasks", Duration::from_secs(120));
    let rt = runtime(4);
    let d = Data::named("written", 0u64);
    let input = Data::named("read", 1u64);
    // What each run's node saw: (d, input).
    let (seen_tx, seen_rx) = mpsc::channel::<(u64, u64)>();
    let seen_tx = std::sync::Mutex::new(seen_tx);
    const HALF_WAY: u64 = u64::MAX;
    let mut g = Graph::new();
    g.node_with((d.write(), input.read()), move |(v, i)| {
        let before = *v;
        seen_tx.lock().unwrap().send((before, *i)).unwrap();
        *v = HALF_WAY;
        std::thread::sleep(Duration::from_millis(30));
        *v = before + *i;
    });
    let run = |g: Graph<'static>| {
        let (g, result) = rt.spawn_graph(g).join();
        result.unwrap();
        (g, seen_rx.recv().unwrap())
    };
    // The first run registers; the second has nothing new to wait for.
    let (g, seen) = run(g);
    assert_eq!(seen, (0, 1));
    let (g, seen) = run(g);
    assert_eq!(seen, (1, 1));
    // A slow write from outside, submitted between two runs, and the next
    // run, which must wait for it (longer than a run: the write is held
    // back until then).
    let after_slow_write = |g: Graph<'static>, h: &Data<u64>, value: u64, what: &str| {
        let gate = Promise::new();
        rt.spawn_with((h.write(), gate.dep()), move |(v, ())| *v = value)
            .detach();
        let handle = rt.spawn_graph(g);
        std::thread::sleep(Duration::from_millis(80));
        assert!(!handle.is_finished(), "a run started before {what}");
        gate.fulfill();
        let (g, result) = handle.join();
        result.unwrap();
        g
    };
    // To the handle the graph writes.
    let g = after_slow_write(g, &d, 100, "the write from outside it follows");
    assert_eq!(seen_rx.recv().unwrap(), (100, 1));
    // To the handle the graph only reads.
    let g = after_slow_write(g, &input, 5, "a write from outside to a handle it reads");
    assert_eq!(seen_rx.recv().unwrap(), (101, 5));
    // A run that registered nothing: a read submitted while it runs sees
    // its last value, never the value half way.
    let (g, seen) = run(g);
    assert_eq!(seen, (106, 5));
    let handle = rt.spawn_graph(g);
    assert_eq!(seen_rx.recv().unwrap(), (111, 5));
    let read = rt.spawn_with(d.read(), |v| *v);
    assert_eq!(
        read.join(),
        116,
        "a read submitted during a later run saw it half way"
    );
    let (g, result) = handle.join();
    result.unwrap();
    drop(g);
    assert_eq!(d.into_inner(), 116);
    assert_eq!(input.into_inner(), 5);
}

/// Tasks from outside on some of a graph's handles, or on more than a run
/// notes one by one, between two runs: the next run waits for each.
#[test]
fn a_run_waits_for_outside_tasks_on_few_or_many_of_its_handles() {
    let _watchdog = Watchdog::new("outside tasks on many handles", Duration::from_secs(120));
    let rt = runtime(4);
    let tiles: Vec<Data<u64>> = (0..200).map(|_| Data::new(0)).collect();
    let mut g = Graph::new();
    for t in &tiles {
        g.node_with(t.write(), |v| *v += 1);
    }
    rt.run_graph(&mut g).unwrap();
    rt.run_graph(&mut g).unwrap();
    for touched in [3, 200] {
        // Slow writes from outside, held back until the run was submitted.
        let gate = Promise::new();
        for t in tiles.iter().take(touched) {
            rt.spawn_with((t.write(), gate.dep()), |(v, ())| *v *= 10)
                .detach();
        }
        let handle = rt.spawn_graph(g);
        std::thread::sleep(Duration::from_millis(20));
        gate.fulfill();
        let result;
        (g, result) = handle.join();
        result.unwrap();
    }
    drop(g);
    let values: Vec<u64> = tiles.into_iter().map(Data::into_inner).collect();
    // Two runs (2), the first round of writes on 3 tiles (20 there), a
    // run (21 or 3), the second round on every tile (210 or 30), a run.
    assert_eq!(values[..3], [211; 3]);
    assert!(values[3..].iter().all(|&v| v == 31), "{values:?}");
}

/// A handle the graph only reads, read often enough from outside that its
/// log sweeps the graph's entry away between two runs: the next run
/// records it again, so a write from outside submitted during that run
/// waits for it.
#[test]
fn a_run_whose_entry_was_swept_from_a_log_records_it_again() {
    let _watchdog = Watchdog::new("a swept graph entry", Duration::from_secs(120));
    let rt = runtime(4);
    // Atomic, so that the node's second load is not folded into its first.
    let h = Data::named("read often", AtomicU64::new(1));
    let (started_tx, started_rx) = mpsc::channel::<()>();
    let started_tx = std::sync::Mutex::new(started_tx);
    let steady = Arc::new(AtomicBool::new(true));
    let mut g = Graph::new();
    {
        let steady = steady.clone();
        g.node_with(h.read(), move |v| {
            let first = v.load(Ordering::Relaxed);
            started_tx.lock().unwrap().send(()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            if v.load(Ordering::Relaxed) != first {
                steady.store(false, Ordering::Relaxed);
            }
        });
    }
    rt.run_graph(&mut g).unwrap();
    started_rx.recv().unwrap();
    // Reads from outside: their entries fill the log's list of reads,
    // whose sweep drops the graph's (its run is over).
    for _ in 0..20 {
        assert_eq!(h.read_now().unwrap().load(Ordering::Relaxed), 1);
    }
    let handle = rt.spawn_graph(g);
    started_rx.recv().unwrap();
    let write = rt.spawn_with(h.write(), |v| *v = AtomicU64::new(2));
    write.join();
    let (g, result) = handle.join();
    result.unwrap();
    assert!(
        steady.load(Ordering::Relaxed),
        "a write from outside ran while a run read the handle"
    );
    drop(g);
    assert_eq!(h.into_inner().into_inner(), 2);
}

/// A graph changed after some runs registers again: a node added since
/// declares a handle the earlier runs did not, and the next run waits for
/// a write from outside submitted before it on that handle.
#[test]
fn a_graph_changed_after_runs_registers_its_new_handles() {
    let _watchdog = Watchdog::new("a changed graph", Duration::from_secs(120));
    let rt = runtime(4);
    let (a, b) = (Data::named("first", 0u64), Data::named("added", 0u64));
    let mut g = Graph::new();
    g.node_with(a.write(), |v| *v += 1);
    rt.run_graph(&mut g).unwrap();
    rt.run_graph(&mut g).unwrap();
    let seen = Arc::new(AtomicU64::new(0));
    {
        let seen = seen.clone();
        g.node_with(b.write(), move |v| {
            seen.store(*v, Ordering::Relaxed);
            *v += 1;
        });
    }
    let gate = Promise::new();
    rt.spawn_with((b.write(), gate.dep()), |(v, ())| *v = 10)
        .detach();
    let handle = rt.spawn_graph(g);
    std::thread::sleep(Duration::from_millis(20));
    gate.fulfill();
    let (g, result) = handle.join();
    result.unwrap();
    assert_eq!(
        seen.load(Ordering::Relaxed),
        10,
        "the added node ran before the write it follows"
    );
    drop(g);
    assert_eq!((a.into_inner(), b.into_inner()), (3, 11));
}

/// A panic poisons what the node writes (for tasks after the run too); the
/// nodes after it are skipped and poison what they would have written; a
/// node reading a poisoned handle refuses to run; a recover node clears it.
#[test]
fn poison_is_kept_by_nodes_as_by_tasks() {
    let rt = runtime(4);
    let a = Data::named("a", 0u32);
    let b = Data::named("b", 0u32);
    let fail = Arc::new(AtomicBool::new(true));
    let mut g = Graph::new();
    {
        let fail = fail.clone();
        g.node_with_named("make a", a.write(), move |a| {
            if fail.load(Ordering::Relaxed) {
                panic!("bad input");
            }
            *a = 1;
        });
    }
    g.node_with_named("make b", (a.read(), b.write()), |(a, b)| *b = *a + 1);
    match rt.run_graph(&mut g) {
        Err(GraphError::Failed {
            panicked,
            skipped_names,
            ..
        }) => {
            assert_eq!(panicked.len(), 1);
            assert_eq!(panicked[0].name, "make a");
            assert_eq!(skipped_names, ["make b"]);
        }
        other => panic!("{other:?}"),
    }
    // Outside the graph, both handles are poisoned, with the causes named.
    let err = rt.spawn_with(a.read(), |v| *v).try_join().unwrap_err();
    assert!(
        err.to_string()
            .contains("graph node 'make a' panicked while it held a write to it: bad input"),
        "{err}"
    );
    let err = rt.spawn_with(b.read(), |v| *v).try_join().unwrap_err();
    assert!(
        err.to_string().contains("graph node 'make b' was skipped"),
        "{err}"
    );
    // In the next run "make a" would succeed, but it declares poisoned
    // `a` as a plain write (only a recover access may replace a poisoned
    // value), so it refuses to run.
    fail.store(false, Ordering::Relaxed);
    match rt.run_graph(&mut g) {
        Err(GraphError::Failed { panicked, .. }) => {
            assert_eq!(panicked[0].name, "make a");
            let message = panicked[0].message().unwrap_or_default().to_owned();
            assert!(message.contains("Data \"a\" is poisoned"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // A graph that recovers both clears the poison.
    let mut repair = Graph::new();
    repair.node_with((a.recover(), b.recover()), |(a, b)| {
        *a = 0;
        *b = 0;
    });
    rt.run_graph(&mut repair).unwrap();
    rt.run_graph(&mut g).unwrap();
    assert_eq!(rt.spawn_with(b.read(), |v| *v).join(), 2);
}

/// A node that fails once: without `recover` every later run fails the
/// same way (its written handle, and what the skipped nodes write, stay
/// poisoned); after `recover` the next run clears that poison and runs
/// clean, and so do the runs after it. A subgraph's handles are cleared
/// too; a handle the graph only reads keeps the poison it got outside.
#[test]
fn a_graph_recovers_from_a_failed_run() {
    let _watchdog = Watchdog::new("graph recover", Duration::from_secs(60));
    let rt = runtime(3);
    let (input, x, y, z) = (
        Data::named("input", 1u64),
        Data::named("x", 0u64),
        Data::named("y", 0u64),
        Data::named("z", 0u64),
    );
    let fail_once = Arc::new(AtomicBool::new(true));
    let mut inner = Graph::new();
    inner.node_with((y.read(), z.write()), |(y, z)| *z = *y * 2);
    let mut g = Graph::new();
    {
        let fail_once = fail_once.clone();
        g.node_with_named("flaky", (input.read(), x.write()), move |(i, x)| {
            if fail_once.swap(false, Ordering::Relaxed) {
                panic!("transient");
            }
            *x += *i;
        });
    }
    g.node_with((x.read(), y.write()), |(x, y)| *y = *x + 100);
    g.subgraph(inner);
    let first = rt.run_graph(&mut g).unwrap_err();
    assert!(first.to_string().contains("transient"), "{first}");
    // Run again as it is: refused, for good.
    for _ in 0..2 {
        match rt.run_graph(&mut g) {
            Err(GraphError::Failed { panicked, .. }) => {
                let message = panicked[0].message().unwrap_or_default();
                assert!(message.contains("Data \"x\" is poisoned"), "{message}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    g.recover();
    for run in 1..=3u64 {
        rt.run_graph(&mut g).unwrap();
        assert_eq!(*x.read_now().unwrap(), run);
        assert_eq!(*z.read_now().unwrap(), (run + 100) * 2);
    }
    // Poison from outside on a handle the graph only reads stays.
    rt.spawn_with(input.write(), |_| panic!("bad input"))
        .try_join()
        .unwrap_err();
    g.recover();
    let err = rt.run_graph(&mut g).unwrap_err();
    assert!(
        err.to_string().contains("Data \"input\" is poisoned"),
        "{err}"
    );
    rt.spawn_with(input.recover(), |i| *i = 5).join();
    g.recover();
    rt.run_graph(&mut g).unwrap();
    assert_eq!(*x.read_now().unwrap(), 3 + 5);
}

#[test]
fn a_dep_or_a_handle_declared_twice_is_refused_with_a_message() {
    let d = Data::named("d", 0);
    let mut g = Graph::new();
    let p = Promise::new();
    let dep: Dep = p.dep();
    let err = catch_unwind(AssertUnwindSafe(|| {
        g.node_with((d.read(), dep), |_| {});
    }))
    .unwrap_err();
    let message = panic_text(&*err);
    assert!(message.contains("cannot declare a Dep"), "{message}");
    let err = catch_unwind(AssertUnwindSafe(|| {
        g.node_with((d.read(), d.write()), |_| {});
    }))
    .unwrap_err();
    let message = panic_text(&*err);
    assert!(
        message.contains("Data \"d\" is declared twice"),
        "{message}"
    );
    // Nothing was added.
    assert!(g.is_empty());
    assert_eq!(g.edge_count(), 0);
}

/// Running a graph inside a task that declared one of its handles would
/// wait forever (the run waits for the task); it panics instead.
#[test]
fn a_run_inside_a_task_holding_its_data_is_refused() {
    let _watchdog = Watchdog::new("run inside a holder", Duration::from_secs(60));
    let rt = runtime(2);
    let d = Data::named("held", 0u32);
    let mut g = Graph::new();
    g.node_with(d.write(), |v| *v += 1);
    let g = std::sync::Mutex::new(g);
    let err = rt
        .spawn_with(d.read(), move |_| g.lock().unwrap().run())
        .try_join()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("declare Data \"held\" was run inside a task that declared it too"),
        "{err}"
    );
}

/// A nested graph's data is declared by its node in the outer graph: the
/// outer edges come from it, and its runs do not wait for the outer run
/// (which would never end).
#[test]
fn a_nested_graph_with_data_is_ordered_by_its_node() {
    let _watchdog = Watchdog::new("nested graph with data", Duration::from_secs(60));
    let rt = runtime(4);
    let a = Data::new(0u64);
    let b = Data::new(0u64);
    let mut inner = Graph::new();
    inner.node_with((a.read(), b.write()), |(a, b)| *b = *a * 10);
    let mut outer = Graph::new();
    outer.node_with(a.write(), |a| *a += 1);
    outer.subgraph(inner);
    let seen = Arc::new(AtomicU64::new(0));
    let s = seen.clone();
    outer.node_with(b.read(), move |b| s.store(*b, Ordering::Relaxed));
    // a's write -> the subgraph (reads a) -> the read of b.
    assert_eq!(outer.edge_count(), 2);
    for run in 1..=5 {
        rt.run_graph(&mut outer).unwrap();
        assert_eq!(seen.load(Ordering::Relaxed), run * 10);
    }
}

/// A node that does not declare a handle its graph declares, and waits
/// for it, would wait for its own run: it fails with a message instead,
/// and so does a node that runs another graph declaring the handle.
#[test]
fn a_wait_inside_a_node_for_its_graphs_data_is_refused() {
    let _watchdog = Watchdog::new("wait inside a node", Duration::from_secs(60));
    let rt = runtime(4);
    let d = Data::named("mine", 0u32);
    let mut g = Graph::new();
    g.node_with(d.write(), |v| *v += 1);
    // Several, slow enough that the other workers take some of them.
    let threads = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
    for _ in 0..8 {
        let (d, threads) = (d.clone(), threads.clone());
        g.node_named("reads it unannounced", move || {
            threads.lock().unwrap().insert(std::thread::current().id());
            std::thread::sleep(Duration::from_millis(5));
            let _ = d.read_now();
        });
    }
    {
        let d = d.clone();
        g.node_named("runs another graph", move || {
            let mut other = Graph::new();
            other.node_with(d.read(), |_| {});
            let _ = other.run();
        });
    }
    match rt.run_graph(&mut g) {
        Err(GraphError::Failed { panicked, .. }) => {
            assert_eq!(panicked.len(), 9, "{panicked:?}");
            for p in &panicked {
                let message = p.message().unwrap_or_default();
                assert!(
                    message.contains("inside a node of a graph run that declares it"),
                    "{}: {message}",
                    p.name
                );
            }
        }
        other => panic!("{other:?}"),
    }
    assert!(
        threads.lock().unwrap().len() >= 2,
        "the waiting nodes all ran on one worker: the test did not try the others"
    );
    drop(g);
    // Outside any run, the same wait is fine.
    assert_eq!(*d.read_now().unwrap(), 1);
}

/// The thread that runs a graph holds its data from the run's start to
/// its end: a task it runs meanwhile (here while the run waits for a task
/// before it on the same handle) cannot wait for that data, which only the
/// run's end, below that task on the thread's stack, would release.
#[test]
fn a_task_run_while_a_run_waits_to_start_cannot_wait_for_its_data() {
    let _watchdog = Watchdog::new("a task under a starting run", Duration::from_secs(60));
    let rt = runtime(1);
    let d = Data::named("pending", 0u32);
    let gate = Promise::new();
    rt.spawn_with((d.write(), gate.dep()), |(v, ())| *v = 5)
        .detach();
    let mut g = Graph::new();
    g.node_with(d.write(), |v| *v += 1);
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        gate.fulfill();
    });
    let (waiter, run) = rt.run(|| {
        let d = d.clone();
        // Queued on the one worker, which runs it while the run waits.
        let waiter = selvedge::spawn(move || d.read_now().map(|v| *v).ok());
        let run = g.run();
        (waiter.try_join(), run)
    });
    opener.join().unwrap();
    run.unwrap();
    let err = waiter.unwrap_err();
    assert!(
        err.to_string()
            .contains("inside a node of a graph run that declares it"),
        "{err}"
    );
    drop(g);
    assert_eq!(d.into_inner(), 6);
}
