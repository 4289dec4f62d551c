//! The timeline trace (feature `trace`): a small known program — a
//! two-stage pipeline over promises whose first stage runs a nested
//! parallel loop — is traced, and its trace parsed and checked: valid
//! JSON that Perfetto reads, every task's slice on a worker's track and
//! properly nested there, every arrow from a fulfill ending at the run of
//! the task it made ready (after the fulfill), and the steal, park and
//! loop-split events as many as the runtime's own counters say.
#![cfg(feature = "trace")]

use selvedge::{named, parallel_for, spawn, spawn_delayed, Promise, Runtime};
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;

const ITEMS: usize = 48;
const WORKERS: usize = 4;
const LOOP: usize = 100_000;

fn trace_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("selvedge-test-{}-{name}.json", std::process::id()))
}

/// The pipeline: stage 2 of item `i` waits on the promise stage 1 of `i`
/// fulfills; stage 1 sums a nested parallel loop. Returns the checksum.
fn pipeline() -> u64 {
    let promises: Vec<Promise> = (0..ITEMS).map(|_| Promise::new()).collect();
    let firsts: Vec<std::sync::Arc<std::sync::atomic::AtomicU64>> =
        (0..ITEMS).map(|_| Default::default()).collect();
    // Stage 2 first, so that every one of its tasks waits and is made
    // ready by a fulfill.
    let seconds: Vec<_> = (0..ITEMS)
        .map(|i| {
            let first = firsts[i].clone();
            named("stage 2", || {
                spawn_delayed([promises[i].dep()], move || {
                    first.load(std::sync::atomic::Ordering::Acquire) * 2
                })
            })
        })
        .collect();
    let stage1: Vec<_> = promises
        .into_iter()
        .zip(firsts)
        .enumerate()
        .map(|(i, (p, out))| {
            named("stage 1", || {
                spawn(move || {
                    let s = named("stage 1 loop", || {
                        parallel_for(0..LOOP).reduce(
                            || 0u64,
                            |acc, k| acc + (k * i) as u64 % 7,
                            |a, b| a + b,
                        )
                    });
                    out.store(s, std::sync::atomic::Ordering::Release);
                    p.fulfill();
                })
            })
        })
        .collect();
    for h in stage1 {
        h.join();
    }
    let total: u64 = seconds.into_iter().map(|h| h.join()).sum();
    // Then one loop alone, with every other worker idle: they ask, and
    // the loop is split for them.
    let sum = std::sync::atomic::AtomicU64::new(0);
    named("final loop", || {
        parallel_for(0..LOOP * 20).for_each(|k| {
            sum.fetch_add(
                std::hint::black_box(k as u64 % 3),
                std::sync::atomic::Ordering::Relaxed,
            );
        })
    });
    total + sum.into_inner()
}

fn expected() -> u64 {
    let stages: u64 = (0..ITEMS)
        .map(|i| (0..LOOP as u64).map(|k| (k * i as u64) % 7).sum::<u64>() * 2)
        .sum();
    stages + (0..(LOOP * 20) as u64).map(|k| k % 3).sum::<u64>()
}

/// A slice (`X`) or flow event, as the checks need it.
#[derive(Debug, Clone)]
struct Ev {
    ph: String,
    cat: String,
    name: String,
    tid: u64,
    ts: f64,
    dur: f64,
    id: u64,
}

fn events(json: &Value) -> Vec<Ev> {
    json["traceEvents"]
        .as_array()
        .expect("traceEvents is an array")
        .iter()
        .filter(|e| e["ph"] != "M")
        .map(|e| Ev {
            ph: e["ph"].as_str().unwrap().to_owned(),
            cat: e["cat"].as_str().unwrap_or("").to_owned(),
            name: e["name"].as_str().unwrap_or("").to_owned(),
            tid: e["tid"].as_u64().expect("every event names its track"),
            ts: e["ts"].as_f64().expect("every event has a time"),
            dur: e["dur"].as_f64().unwrap_or(0.0),
            id: e["id"].as_u64().unwrap_or(0),
        })
        .collect()
}

/// Every task arrow (`cat` "flow"): one start, steps, one end, in time
/// order.
fn check_task_arrows(evs: &[Ev]) {
    let mut by_id: HashMap<u64, Vec<&Ev>> = HashMap::new();
    for e in evs.iter().filter(|e| e.cat == "flow") {
        by_id.entry(e.id).or_default().push(e);
    }
    for (id, points) in &by_id {
        let n = |ph: &str| points.iter().filter(|e| e.ph == ph).count();
        assert_eq!((n("s"), n("f")), (1, 1), "arrow {id}: {points:?}");
        let s = points.iter().find(|e| e.ph == "s").unwrap();
        assert!(
            points.iter().all(|e| e.ts >= s.ts),
            "arrow {id} goes back in time: {points:?}"
        );
    }
}

/// Builds a runtime of `threads` workers traced to a file named after
/// `name`, runs `body` on it, drops it (which writes the trace), and
/// returns the parsed file (removed).
fn traced(name: &str, threads: usize, body: impl FnOnce(&Runtime)) -> Value {
    let path = trace_path(name);
    let _ = std::fs::remove_file(&path);
    let rt = Runtime::builder()
        .num_threads(threads)
        .trace_to(&path)
        .trace_capacity(1 << 20)
        .build()
        .unwrap();
    assert_eq!(rt.trace_path(), Some(path.as_path()));
    body(&rt);
    drop(rt);
    let text = std::fs::read_to_string(&path).expect("the trace was written at the drop");
    let json: Value = serde_json::from_str(&text).expect("the trace is valid JSON");
    std::fs::remove_file(&path).unwrap();
    json
}

/// The names of the task slices in a trace.
fn task_names(json: &Value) -> Vec<String> {
    events(json)
        .into_iter()
        .filter(|e| e.ph == "X" && e.cat == "task")
        .map(|e| e.name)
        .collect()
}

/// Runs the pipeline on a traced runtime and parses its trace.
fn traced_run(name: &str) -> (Value, Vec<Ev>) {
    let json = traced(name, WORKERS, |rt| assert_eq!(rt.run(pipeline), expected()));
    let evs = events(&json);
    (json, evs)
}

#[test]
fn the_trace_of_a_pipeline_holds_its_tasks_flows_and_steals() {
    let (json, evs) = traced_run("pipeline");
    assert_eq!(json["otherData"]["lost_events"], 0, "nothing overwritten");
    let stats = &json["otherData"]["stats"];

    // Worker tracks are named.
    let names: HashMap<u64, String> = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| {
            (
                e["tid"].as_u64().unwrap(),
                e["args"]["name"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for w in 0..WORKERS as u64 {
        assert!(names[&w].starts_with(&format!("worker {w}")), "{names:?}");
    }

    // Every task ran on a worker's track, its slices properly nested.
    let tasks: Vec<&Ev> = evs
        .iter()
        .filter(|e| e.ph == "X" && e.cat == "task")
        .collect();
    assert!(
        tasks.iter().all(|t| t.tid < WORKERS as u64),
        "a task off the workers"
    );
    for w in 0..WORKERS as u64 {
        let mut mine: Vec<&&Ev> = tasks.iter().filter(|t| t.tid == w).collect();
        mine.sort_by(|a, b| a.ts.total_cmp(&b.ts).then(b.dur.total_cmp(&a.dur)));
        let mut open: Vec<f64> = Vec::new(); // ends of the enclosing slices
        for t in mine {
            while open.last().is_some_and(|&end| end <= t.ts) {
                open.pop();
            }
            let end = t.ts + t.dur;
            if let Some(&outer) = open.last() {
                // 1 ns of slack: times are printed to the nanosecond.
                assert!(
                    end <= outer + 0.001,
                    "overlapping slices on worker {w}: {t:?}"
                );
            }
            open.push(end);
        }
    }
    let count = |name: &str| tasks.iter().filter(|t| t.name == name).count();
    let mut histogram: HashMap<&str, usize> = HashMap::new();
    for t in &tasks {
        *histogram.entry(t.name.as_str()).or_default() += 1;
    }
    assert_eq!(count("stage 2"), ITEMS, "{histogram:?}");
    assert!(
        count("stage 1") >= 1,
        "stage-1 tasks that left their spawner: {histogram:?}"
    );
    // Every task here was given a name, loops' parts included: none is
    // named by one of selvedge's own types.
    assert!(
        tasks.iter().all(|t| !t.name.starts_with("selvedge::")),
        "{histogram:?}"
    );

    // Every fulfill made a stage-2 task ready: an arrow that ends at the
    // start of that task's run, after the fulfill.
    let ready: Vec<&Ev> = evs
        .iter()
        .filter(|e| e.ph == "X" && e.name == "made ready")
        .collect();
    assert_eq!(ready.len(), ITEMS, "one `made ready` per stage-2 task");
    let ends: HashMap<u64, &Ev> = evs
        .iter()
        .filter(|e| e.ph == "f")
        .map(|e| (e.id, e))
        .collect();
    for r in &ready {
        let s = evs
            .iter()
            .find(|e| e.ph == "s" && e.tid == r.tid && e.ts == r.ts)
            .expect("a `made ready` starts an arrow");
        let f = ends
            .get(&s.id)
            .expect("every arrow from a fulfill ends at a run");
        assert!(f.ts >= s.ts, "an arrow ends before it starts: {s:?} {f:?}");
        let run = tasks
            .iter()
            .find(|t| t.tid == f.tid && t.ts == f.ts)
            .expect("an arrow ends at the start of a task's slice");
        assert_eq!(run.name, "stage 2");
    }
    // Every task's arrow that starts ends (all ran), once, and every end
    // has its start. (A steal request's arrow may still be travelling
    // when the runtime stops.)
    check_task_arrows(&evs);
    // The events agree with the runtime's counters.
    let n = |cat: &str, name: &str| {
        evs.iter()
            .filter(|e| e.ph == "X" && e.cat == cat && e.name == name)
            .count() as u64
    };
    assert_eq!(
        n("steal", "steal answered"),
        stats["steal_requests_answered"].as_u64().unwrap()
    );
    assert_eq!(
        n("steal", "steal request"),
        stats["steal_requests_sent"].as_u64().unwrap()
    );
    assert_eq!(n("park", "parked"), stats["parks"].as_u64().unwrap());
    assert_eq!(
        n("loop", "loop split"),
        stats["loop_splits"].as_u64().unwrap()
    );
    assert!(
        n("steal", "steal answered") > 0,
        "four workers on this program steal"
    );
    assert!(n("loop", "loop split") > 0, "the final loop was split");

    // A split's arrow ends at the run of the part it gave away.
    for split in evs.iter().filter(|e| e.ph == "X" && e.name == "loop split") {
        let s = evs
            .iter()
            .find(|e| e.ph == "s" && e.tid == split.tid && e.ts == split.ts)
            .expect("a split starts an arrow");
        let f = ends.get(&s.id).expect("every split's arrow ends at a run");
        let run = tasks
            .iter()
            .find(|t| t.tid == f.tid && t.ts == f.ts)
            .expect("a split's arrow ends at the start of a task's slice");
        assert!(
            run.name == "final loop" || run.name == "stage 1 loop",
            "a split part named {:?}",
            run.name
        );
    }
}

#[test]
fn flush_writes_the_trace_so_far_and_the_drop_writes_it_again() {
    let path = trace_path("flush");
    let rt = Runtime::builder()
        .num_threads(2)
        .trace_to(&path)
        .build()
        .unwrap();
    rt.run(|| named("first", || spawn(|| 1)).join());
    rt.flush_trace().unwrap();
    let first: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert!(first["traceEvents"].as_array().unwrap().len() > 2);
    rt.run(|| named("second", || selvedge::spawn(|| 2)).join());
    drop(rt);
    let text = std::fs::read_to_string(&path).unwrap();
    let _: Value = serde_json::from_str(&text).unwrap();
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn a_trace_that_cannot_be_written_is_an_error_naming_why() {
    let dir = trace_path("not-a-dir");
    std::fs::write(&dir, b"a file, not a directory").unwrap();
    let rt = Runtime::builder()
        .num_threads(1)
        .trace_to(dir.join("trace.json"))
        .build()
        .unwrap();
    rt.run(|| 1);
    let err = rt.flush_trace().unwrap_err();
    assert!(!err.to_string().is_empty());
    drop(rt); // says so on standard error, and does not panic
    std::fs::remove_file(&dir).unwrap();
}

#[test]
fn an_untraced_runtime_has_no_trace_path_and_flush_does_nothing() {
    let rt = Runtime::builder().num_threads(1).build().unwrap();
    assert_eq!(rt.trace_path(), None);
    rt.flush_trace().unwrap();
}

#[test]
fn tasks_take_the_innermost_name_given_else_their_closures_type() {
    let json = traced("names", 1, |rt| {
        rt.run(|| {
            // Handles dropped: the tasks run from the deque, each a slice.
            named("outer", || {
                drop(selvedge::spawn(|| ()));
                named("inner", || drop(selvedge::spawn(|| ())));
                drop(selvedge::spawn(|| ()));
            });
            drop(selvedge::spawn(|| ()));
        });
        // From outside the workers too.
        named("submitted", || rt.spawn(|| ()).join());
    });
    let mut names = task_names(&json);
    names.sort();
    let unnamed: Vec<&String> = names
        .iter()
        .filter(|n| !["outer", "inner", "submitted"].contains(&n.as_str()))
        .collect();
    assert_eq!(
        names.iter().filter(|n| *n == "outer").count(),
        2,
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| *n == "inner").count(),
        1,
        "{names:?}"
    );
    assert_eq!(
        names.iter().filter(|n| *n == "submitted").count(),
        1,
        "{names:?}"
    );
    // The root task and the last spawn: their closures' type names.
    assert_eq!(unnamed.len(), 2, "{names:?}");
    assert!(
        unnamed.iter().all(|n| n.starts_with("trace::")),
        "{names:?}"
    );
}

#[test]
fn a_replayed_graphs_nodes_are_slices_with_new_arrows_each_run() {
    // Runs enough that some node moves between the workers in more than
    // one of them (its arrow then must not continue an earlier run's).
    const RUNS: usize = 8;
    let mut g = selvedge::Graph::new();
    let work = || {
        let mut x = 0u64;
        for k in 0..100_000u64 {
            x = std::hint::black_box(x.wrapping_add(k));
        }
        std::hint::black_box(x);
    };
    let first = g.node_named("first", work);
    let wide: Vec<_> = (0..16).map(|_| g.node_named("wide", work)).collect();
    let last = g.node_named(String::from("last (an owned name)"), work);
    let unnamed = g.node(work);
    for &w in &wide {
        g.precede(first, w);
        g.precede(w, last);
    }
    g.precede(last, unnamed);
    let json = traced("graph", 2, |rt| {
        for _ in 0..RUNS {
            rt.run_graph(&mut g).unwrap();
        }
    });
    let evs = events(&json);
    let named = |name: &str| {
        evs.iter()
            .filter(|e| e.ph == "X" && e.cat == "task" && e.name == name)
            .count()
    };
    assert_eq!(named("first"), RUNS);
    assert_eq!(named("wide"), 16 * RUNS);
    assert_eq!(named("last (an owned name)"), RUNS);
    // A node given no name shows as a graph node.
    assert_eq!(named("graph node"), RUNS);
    // Arrows of nodes that moved between workers: each run's are its own.
    check_task_arrows(&evs);
}

#[test]
fn tasks_run_while_a_named_closure_waits_keep_their_own_names() {
    let json = traced("named-wait", 1, |rt| {
        rt.run(|| {
            named("outer", || {
                // The scope's task is made by the named closure; the task
                // it makes, while the scope waits on this thread, is not.
                selvedge::scope(|s| {
                    s.spawn(|_| drop(selvedge::spawn(|| ())));
                })
            })
        })
    });
    let names = task_names(&json);
    assert_eq!(
        names.iter().filter(|n| *n == "outer").count(),
        1,
        "{names:?}"
    );
    assert_eq!(
        names.len(),
        3,
        "the root, the scope's task and its spawn: {names:?}"
    );
}
