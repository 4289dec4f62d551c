//! MPI (feature `mpi`) between processes that `mpirun` starts. Each test
//! is two things: run by cargo, it starts `mpirun -n N` on this binary,
//! asking each rank (with `SELVEDGE_MPI_RANK_OF` naming the test) to run
//! the same test as a rank, and checks that every rank passed; run as a
//! rank, it does the test's work. Without `mpirun` every test says it
//! skipped and passes; with `SELVEDGE_REQUIRE_MPI=1` a missing `mpirun`
//! fails them.
#![cfg(feature = "mpi")]

mod support;

use selvedge::mpi::{Cluster, MpiError, RankGraph, RankNode, Reduce};
use selvedge::{global_runtime, spawn_delayed, GraphError, Promise, Runtime};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{panic_text, Watchdog};

/// Set for the ranks: the test they run.
const RANK_OF: &str = "SELVEDGE_MPI_RANK_OF";
/// Set for the ranks: a folder of the test's own, through which ranks on
/// this machine can tell each other what they reached without MPI.
const SHARED_DIR: &str = "SELVEDGE_MPI_TEST_DIR";

/// Runs `body` on each of `n` ranks: as the parent, starts them under
/// `mpirun`, checks they all passed and returns their output (see
/// [`on_ranks_starting`]); as a rank, starts the cluster and runs `body`.
fn on_ranks(test: &str, n: usize, body: impl FnOnce(Cluster)) -> Option<String> {
    on_ranks_starting(test, n, || {
        let cluster = Cluster::start().expect("MPI starts under mpirun");
        assert_eq!(cluster.size(), n, "{test}: started with {n} ranks");
        body(cluster);
    })
}

/// [`on_ranks`] whose body starts MPI itself (on a runtime of its own,
/// say). The parent returns the ranks' output, stdout then stderr (`None`
/// in a rank, or when skipped without `mpirun`).
fn on_ranks_starting(test: &str, n: usize, body: impl FnOnce()) -> Option<String> {
    on_ranks_with(test, n, &[], body)
}

/// [`on_ranks_starting`] with the environment variables `env` set for the
/// ranks.
fn on_ranks_with(
    test: &str,
    n: usize,
    env: &[(&str, &str)],
    body: impl FnOnce(),
) -> Option<String> {
    if std::env::var(RANK_OF).is_ok_and(|t| t == test) {
        body();
        return None;
    }
    let Some(mpirun) = mpirun() else {
        assert!(
            std::env::var_os("SELVEDGE_REQUIRE_MPI").is_none_or(|v| v != "1"),
            "{test}: SELVEDGE_REQUIRE_MPI=1 but there is no mpirun on the PATH"
        );
        eprintln!("{test}: skipped: no mpirun on the PATH (install MPICH or Open MPI)");
        return None;
    };
    let exe = std::env::current_exe().unwrap();
    let dir = std::env::temp_dir().join(format!("selvedge-mpi-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = Command::new(mpirun)
        .arg("-n")
        .arg(n.to_string())
        .arg(&exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(RANK_OF, test)
        .env(SHARED_DIR, &dir)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting mpirun");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{test}: the ranks still ran after 120 s (a hang); killed.\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Every rank ran the test and passed: mpirun's status is the ranks'
    // (a failed test exits non-zero). Their output is not counted: what a
    // rank prints after MPI is finalized may not be forwarded.
    assert!(
        out.status.success() && !stdout.contains("running 0 tests"),
        "{test}: mpirun -n {n} exited with {}:\n{stdout}{stderr}",
        out.status
    );
    Some(format!("{stdout}{stderr}"))
}

/// In a rank: says `what` to the other ranks (a file in the test's
/// folder).
fn tell_the_ranks(what: &str) {
    let dir = std::env::var_os(SHARED_DIR).expect("set for the ranks");
    std::fs::write(std::path::Path::new(&dir).join(what), b"").unwrap();
}

/// In a rank: waits until another rank said `what`; panics, naming `why`,
/// after 30 s.
fn wait_for_a_rank(what: &str, why: &str) {
    let dir = std::env::var_os(SHARED_DIR).expect("set for the ranks");
    let path = std::path::Path::new(&dir).join(what);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "no rank said {what:?} within 30 s: {why}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether MPI was finalized in this process (callable from any thread,
/// before and after MPI).
fn mpi_finalized() -> bool {
    // The MPI library selvedge links (its raw bindings are not API).
    extern "C" {
        fn MPI_Finalized(flag: *mut std::ffi::c_int) -> std::ffi::c_int;
    }
    let mut flag = 0;
    // SAFETY: MPI_Finalized may be called at any time, from any thread;
    // `flag` is a valid out-pointer.
    unsafe { MPI_Finalized(&mut flag) };
    flag != 0
}

fn mpirun() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("mpirun"))
        .find(|p| p.is_file())
}

/// 200 round trips of 1,000 numbers between two ranks: rank 1 sends each
/// message back plus one, with a send that waits on the receive's
/// dependency (no thread blocks on it); rank 0 checks every element.
#[test]
fn ping_pong_through_promises() {
    on_ranks("ping_pong_through_promises", 2, ping_pong);
}

/// The same with every MPI call on the cluster's own thread, as with a
/// library that gives only `MPI_THREAD_FUNNELED`.
#[test]
fn ping_pong_with_every_call_on_the_progress_thread() {
    let test = "ping_pong_with_every_call_on_the_progress_thread";
    on_ranks_with(test, 2, &[("SELVEDGE_MPI_FUNNELED", "1")], || {
        ping_pong(Cluster::start().expect("MPI starts under mpirun"));
    });
}

/// 200 round trips of 1000 values, rank 1 answering from a task that
/// waits for the receive.
fn ping_pong(cluster: Cluster) {
    const ROUNDS: u64 = 200;
    const LEN: usize = 1000;
    for round in 0..ROUNDS {
        let tag = (round % 1000) as i32;
        if cluster.rank() == 0 {
            let data: Vec<u64> = (0..LEN as u64).map(|i| i * 7 + round).collect();
            let sent = cluster.isend(data, 1, tag);
            let back = cluster.irecv::<u64>(LEN, 1, tag).join().unwrap();
            assert!(
                back.iter()
                    .enumerate()
                    .all(|(i, &v)| v == i as u64 * 7 + round + 1),
                "round {round}: {:?}...",
                &back[..4]
            );
            assert_eq!(sent.join().unwrap().len(), LEN);
        } else {
            let got = cluster.irecv::<u64>(LEN, 0, tag);
            let dep = got.dep();
            let reply = cluster.send_after(
                [dep],
                move || got.join().unwrap().into_iter().map(|v| v + 1).collect(),
                0,
                tag,
            );
            reply.join().unwrap();
        }
    }
}

/// Three ranks on two cores: a ring of sends, a sum over every rank, a
/// broadcast, and the checks on bad ranks and tags.
#[test]
fn a_ring_a_reduction_and_a_broadcast_on_three_ranks() {
    on_ranks(
        "a_ring_a_reduction_and_a_broadcast_on_three_ranks",
        3,
        |cluster| {
            let (me, n) = (cluster.rank(), cluster.size());
            let next = (me + 1) % n;
            let prev = (me + n - 1) % n;
            let sent = cluster.isend(vec![me as i32; 3], next, 5);
            let got = cluster.irecv::<i32>(3, prev, 5).join().unwrap();
            assert_eq!(got, vec![prev as i32; 3]);
            sent.join().unwrap();
            let sum = cluster
                .iallreduce(vec![me as f64, 1.0], Reduce::Sum)
                .join()
                .unwrap();
            assert_eq!(sum, vec![3.0, 3.0]); // ranks 0 + 1 + 2, and 1 three times
            let max = cluster
                .iallreduce(vec![me as u32], Reduce::Max)
                .join()
                .unwrap();
            assert_eq!(max, vec![2]);
            let data = if me == 1 { vec![9u8, 8, 7] } else { vec![0; 3] };
            assert_eq!(cluster.ibcast(data, 1).join().unwrap(), vec![9, 8, 7]);
            // Programmer errors panic, naming the value.
            let bad_rank = catch_unwind(AssertUnwindSafe(|| cluster.isend(vec![1u8], 7, 0)));
            let text = panic_text(&*bad_rank.err().expect("rank 7 of 3 panics"));
            assert!(
                text.contains("rank 7") && text.contains("3 ranks"),
                "{text}"
            );
            let bad_tag = catch_unwind(AssertUnwindSafe(|| cluster.irecv::<u8>(1, 0, -1)));
            let text = panic_text(&*bad_tag.err().expect("tag -1 panics"));
            assert!(text.contains("tag -1"), "{text}");
        },
    );
}

/// `sync_root` waits for a receive in flight and the task behind it: rank
/// 0 sends only after 300 ms.
#[test]
fn sync_root_waits_for_messages_in_flight() {
    on_ranks("sync_root_waits_for_messages_in_flight", 2, |cluster| {
        if cluster.rank() == 0 {
            std::thread::sleep(Duration::from_millis(300));
            cluster.isend(vec![42u16], 1, 9).join().unwrap();
        } else {
            let got = cluster.irecv::<u16>(1, 0, 9);
            let ran = Arc::new(AtomicBool::new(false));
            let flag = Arc::clone(&ran);
            drop(spawn_delayed([got.dep()], move || {
                flag.store(true, Ordering::SeqCst)
            }));
            let start = Instant::now();
            global_runtime().sync_root();
            assert!(
                ran.load(Ordering::SeqCst),
                "sync_root returned after {:?} with the task behind the receive not run",
                start.elapsed()
            );
            assert_eq!(got.join().unwrap(), [42]);
        }
    });
}

/// A message of another length than the receive asked for is an error,
/// and the task behind it is cancelled: fewer elements (`Length`), more
/// (`Truncated`).
#[test]
fn a_message_of_the_wrong_length_is_an_error_not_a_hang() {
    on_ranks(
        "a_message_of_the_wrong_length_is_an_error_not_a_hang",
        2,
        |cluster| {
            if cluster.rank() == 0 {
                cluster.isend(vec![1.0f32; 5], 1, 1).join().unwrap();
                cluster.isend(vec![1.0f32; 5], 1, 2).join().unwrap();
            } else {
                let short = cluster.irecv::<f32>(6, 0, 1);
                let behind = spawn_delayed([short.dep()], || ());
                assert_eq!(
                    short.join(),
                    Err(MpiError::Length {
                        expected: 6,
                        got: 5,
                        source: 0,
                        tag: 1
                    })
                );
                assert!(
                    behind.try_join().is_err(),
                    "the task behind a failed receive is cancelled"
                );
                let long = cluster.irecv::<f32>(4, 0, 2);
                assert!(matches!(
                    long.join(),
                    Err(MpiError::Truncated { expected: 4, .. })
                ));
            }
        },
    );
}

/// A `send_after` whose dependency breaks sends nothing and says so.
/// Dropping the cluster abandons a receive that never completes: its
/// handle says so and the task behind it is cancelled (nothing hangs,
/// `sync_root` returns); MPI then cannot start again in the process.
#[test]
fn dropping_the_cluster_abandons_what_is_in_flight() {
    on_ranks(
        "dropping_the_cluster_abandons_what_is_in_flight",
        2,
        |cluster| {
            let peer = 1 - cluster.rank();
            // A send waiting on a promise that breaks: nothing is sent.
            let input = Promise::new();
            let unsent = cluster.send_after([input.dep()], || vec![1u8], peer, 76);
            drop(input);
            assert_eq!(unsent.join(), Err(MpiError::Cancelled));
            let never = cluster.irecv::<u8>(1, peer, 77);
            let behind = spawn_delayed([never.dep()], || ());
            drop(cluster);
            assert_eq!(never.join(), Err(MpiError::Abandoned));
            assert!(
                behind.try_join().is_err(),
                "the task behind it is cancelled"
            );
            global_runtime().sync_root();
            let again = Cluster::start().err().expect("MPI starts once per process");
            assert!(again.to_string().contains("once per process"), "{again}");
        },
    );
}

/// A cluster whose runtime was dropped: what is posted from outside the
/// runtime then is refused at once (`RuntimeShutDown`, the dependency
/// broken), so a task of another runtime waiting on it is cancelled
/// instead of waiting for a completion no worker would run; a `RankGraph`
/// on it panics saying why. Both ranks post to each other, so that the
/// messages would flow if they were posted.
#[test]
fn posting_after_the_runtime_was_dropped_is_refused_at_once() {
    let test = "posting_after_the_runtime_was_dropped_is_refused_at_once";
    on_ranks_starting(test, 2, || {
        let rt = Runtime::builder().num_threads(2).build().unwrap();
        let cluster = Cluster::start_in(&rt).expect("MPI starts under mpirun");
        let peer = 1 - cluster.rank();
        drop(rt);
        let _watchdog = Watchdog::new(
            format!("{test} (rank {})", cluster.rank()),
            Duration::from_secs(30),
        );
        let sent = cluster.isend(vec![7u32; 4], peer, 3);
        let got = cluster.irecv::<u32>(4, peer, 3);
        let sum = cluster.iallreduce(vec![1u64], Reduce::Sum);
        let later = cluster.send_after(Vec::new(), || vec![1u8], peer, 4);
        // A task of the global runtime behind the receive.
        let behind = spawn_delayed([got.dep()], || ());
        let cancelled = behind
            .try_join()
            .expect_err("the task behind it is cancelled");
        assert!(cancelled.is_cancelled(), "{cancelled}");
        assert!(got.is_finished() && sent.is_finished() && sum.is_finished());
        assert_eq!(got.join(), Err(MpiError::RuntimeShutDown));
        assert_eq!(sent.join(), Err(MpiError::RuntimeShutDown));
        assert_eq!(sum.join(), Err(MpiError::RuntimeShutDown));
        assert_eq!(later.join(), Err(MpiError::RuntimeShutDown));
        let mut g = RankGraph::<u8>::new(&cluster);
        g.node(0, |_| vec![1]);
        let ran = catch_unwind(AssertUnwindSafe(|| g.run()));
        let text = panic_text(&*ran.expect_err("a RankGraph on it panics"));
        assert!(text.contains("runtime was dropped"), "{text}");
    });
}

/// Dropping the cluster finalizes MPI only once its send and its
/// collective completed (rank 1 takes part in them two seconds after rank
/// 0 dropped it: the drop waits, and says on stderr what for), and cancels
/// its receive; each handle says how its operation ended.
#[test]
fn dropping_the_cluster_lets_its_sends_and_collectives_complete() {
    let test = "dropping_the_cluster_lets_its_sends_and_collectives_complete";
    const LEN: usize = 1 << 20; // beyond an eager send: the receiver must take part
    let output = on_ranks(test, 2, |cluster| {
        let _watchdog = Watchdog::new(
            format!("{test} (rank {})", cluster.rank()),
            Duration::from_secs(30),
        );
        if cluster.rank() == 0 {
            let sent = cluster.isend((0..LEN as u32).collect(), 1, 21);
            let sum = cluster.iallreduce(vec![5u64], Reduce::Sum);
            let never = cluster.irecv::<u8>(1, 1, 22);
            tell_the_ranks("dropping");
            drop(cluster);
            assert_eq!(sent.join().map(|buf| buf.len()), Ok(LEN));
            assert_eq!(sum.join(), Ok(vec![12]));
            assert_eq!(never.join(), Err(MpiError::Abandoned));
        } else {
            wait_for_a_rank("dropping", "rank 0 never reached its drop");
            std::thread::sleep(Duration::from_secs(2));
            let got = cluster.irecv::<u32>(LEN, 0, 21).join().unwrap();
            assert!(got.iter().enumerate().all(|(i, &v)| v == i as u32));
            assert_eq!(
                cluster.iallreduce(vec![7u64], Reduce::Sum).join(),
                Ok(vec![12])
            );
        }
    });
    let Some(output) = output else { return };
    for said in [
        "rank 0 dropped its MPI cluster",
        "MPI_Isend of 1048576 elements to rank 1 (tag 21)",
        "MPI_Iallreduce of 1 element:",
    ] {
        assert!(
            output.contains(said),
            "the drop's wait did not say {said:?}:\n{output}"
        );
    }
}

/// A cluster dropped inside a task does not block the worker: rank 0's
/// only worker drops it while a collective is in flight that rank 1 joins
/// only once rank 0 says the task returned. The runtime's drop then waits
/// until MPI is finalized.
#[test]
fn a_cluster_dropped_in_a_task_leaves_its_worker_free() {
    let test = "a_cluster_dropped_in_a_task_leaves_its_worker_free";
    on_ranks_starting(test, 2, || {
        let rt = Runtime::builder().num_threads(1).build().unwrap();
        let cluster = Cluster::start_in(&rt).expect("MPI starts under mpirun");
        let rank = cluster.rank();
        let _watchdog = Watchdog::new(format!("{test} (rank {rank})"), Duration::from_secs(30));
        if rank == 0 {
            let sum = cluster.iallreduce(vec![1u64], Reduce::Sum);
            rt.run(move || drop(cluster));
            tell_the_ranks("dropped");
            assert_eq!(sum.join(), Ok(vec![3]));
            drop(rt);
            assert!(
                mpi_finalized(),
                "the runtime's drop returned before the cluster dropped on its worker finalized MPI"
            );
        } else {
            wait_for_a_rank(
                "dropped",
                "rank 0's drop of its cluster in a task blocked its only worker",
            );
            assert_eq!(
                cluster.iallreduce(vec![2u64], Reduce::Sum).join(),
                Ok(vec![3])
            );
        }
    });
}

/// Node `index`'s value in run `run`, from its inputs: the same function
/// on every rank and in the serial evaluation.
fn node_value(index: usize, run: u64, inputs: &[&[u64]]) -> Vec<u64> {
    let mut out: Vec<u64> = (0..8).map(|k| index as u64 * 100 + k + run).collect();
    for input in inputs {
        for (o, i) in out.iter_mut().zip(input.iter()) {
            *o = o.wrapping_mul(31).wrapping_add(*i);
        }
    }
    out
}

/// The layered graph of the split tests: 12 nodes, node `i` on rank
/// `i % 3`, each after the nodes `i - 1` and `i - 3` (when they exist), so
/// most edges cross ranks; node 11 gathers everything on rank 2.
fn layered(n: usize) -> Vec<(usize, usize)> {
    let mut edges = Vec::new();
    for i in 0..n {
        if i >= 1 {
            edges.push((i - 1, i));
        }
        if i >= 3 {
            edges.push((i - 3, i));
        }
    }
    edges
}

/// A graph built the same on three ranks, split by rank, replayed five
/// times with new inputs: every node's value, on the ranks that hold it,
/// matches a serial evaluation of the same graph.
#[test]
fn a_graph_split_by_rank_matches_a_serial_run() {
    on_ranks("a_graph_split_by_rank_matches_a_serial_run", 3, |cluster| {
        const N: usize = 12;
        let run = Arc::new(AtomicU64::new(0));
        let edges = layered(N);
        let mut g = RankGraph::<u64>::new(&cluster);
        let nodes: Vec<RankNode> = (0..N)
            .map(|i| {
                let run = Arc::clone(&run);
                g.node_named(format!("n{i}"), i % 3, move |inputs| {
                    node_value(i, run.load(Ordering::SeqCst), inputs)
                })
            })
            .collect();
        for &(from, to) in &edges {
            g.precede(nodes[from], nodes[to]);
        }
        for r in 0..5u64 {
            run.store(r, Ordering::SeqCst);
            g.run().unwrap();
            // The serial evaluation: edges go from lower to higher nodes.
            let mut serial: Vec<Vec<u64>> = Vec::new();
            for i in 0..N {
                let inputs: Vec<&[u64]> = edges
                    .iter()
                    .filter(|&&(_, to)| to == i)
                    .map(|&(from, _)| serial[from].as_slice())
                    .collect();
                let value = node_value(i, r, &inputs);
                serial.push(value);
            }
            for i in 0..N {
                if i % 3 == cluster.rank() {
                    assert_eq!(
                        g.value(nodes[i]),
                        Some(serial[i].clone()),
                        "run {r}: node {i}"
                    );
                }
            }
        }
    });
}

/// A node that panics on one rank fails, on the other ranks, the nodes
/// that need its value (their receive says why), and the next run works.
#[test]
fn a_failure_on_one_rank_skips_what_depends_on_it_everywhere() {
    on_ranks(
        "a_failure_on_one_rank_skips_what_depends_on_it_everywhere",
        2,
        |cluster| {
            let fail = Arc::new(AtomicBool::new(true));
            let mut g = RankGraph::<u32>::new(&cluster);
            let flag = Arc::clone(&fail);
            let source = g.node_named("source", 1, move |_| {
                assert!(!flag.load(Ordering::SeqCst), "source broke");
                vec![5]
            });
            let double = g.node_named("double", 0, |inputs| vec![2 * inputs[0][0]]);
            let after = g.node_named("after", 0, |inputs| vec![inputs[0][0] + 1]);
            g.precede(source, double);
            g.precede(double, after);
            match g.run() {
                Err(GraphError::Failed {
                    panicked,
                    skipped_names,
                    ..
                }) => {
                    let text = panicked[0].message().unwrap_or("").to_string();
                    if cluster.rank() == 1 {
                        assert_eq!(panicked[0].name, "source");
                        assert!(text.contains("source broke"), "{text}");
                    } else {
                        assert!(text.contains("source") && text.contains("rank 1"), "{text}");
                        assert_eq!(skipped_names, ["double", "after"]);
                    }
                }
                other => panic!(
                    "rank {}: expected the run to fail, got {other:?}",
                    cluster.rank()
                ),
            }
            fail.store(false, Ordering::SeqCst);
            g.run().unwrap();
            if cluster.rank() == 0 {
                assert_eq!(g.value(after), Some(vec![11]));
            }
        },
    );
}

/// A message joined from outside the pool still fulfills its dependency:
/// the task behind it runs, 50 times over. (Whether the join or the
/// completion comes first is up to the scheduler; the unit test
/// `success_is_known_after_the_value_was_taken` pins the order down.) And
/// a `send_after` whose `produce` panics says cancelled instead of hanging
/// its join.
#[test]
fn a_joined_message_still_fulfills_its_dependency() {
    on_ranks(
        "a_joined_message_still_fulfills_its_dependency",
        2,
        |cluster| {
            let peer = 1 - cluster.rank();
            for round in 0..50 {
                if cluster.rank() == 0 {
                    cluster.isend(vec![round as u32], peer, 11).join().unwrap();
                } else {
                    let m = cluster.irecv::<u32>(1, peer, 11);
                    let behind = spawn_delayed([m.dep()], move || round);
                    assert_eq!(m.join().unwrap(), [round as u32]);
                    assert_eq!(
                        behind.try_join().ok(),
                        Some(round),
                        "round {round}: the task behind a joined message was cancelled"
                    );
                }
            }
            let broken = cluster.send_after(
                Vec::new(),
                || -> Vec<u8> { panic!("no data to send") },
                peer,
                12,
            );
            assert_eq!(broken.join(), Err(MpiError::Cancelled));
        },
    );
}

/// A node that takes one value twice (the edge added twice) and two nodes
/// that take two values in opposite orders, on two workers at once: no
/// node holds a lock on its inputs while it runs, so none waits for
/// another.
#[test]
fn inputs_taken_twice_or_in_opposite_orders_do_not_deadlock() {
    on_ranks(
        "inputs_taken_twice_or_in_opposite_orders_do_not_deadlock",
        2,
        |cluster| {
            let mut g = RankGraph::<u64>::new(&cluster);
            let a = g.node(0, |_| vec![1]);
            let b = g.node(1, |_| vec![2]);
            let twice = g.node(0, |inputs| vec![inputs[0][0] + inputs[1][0]]);
            let ab = g.node(0, |inputs| {
                std::thread::sleep(Duration::from_millis(1));
                vec![10 * inputs[0][0] + inputs[1][0]]
            });
            let ba = g.node(0, |inputs| {
                std::thread::sleep(Duration::from_millis(1));
                vec![10 * inputs[0][0] + inputs[1][0]]
            });
            g.precede(a, twice);
            g.precede(a, twice);
            g.precede(a, ab);
            g.precede(b, ab);
            g.precede(b, ba);
            g.precede(a, ba);
            for _ in 0..20 {
                g.run().unwrap();
            }
            if cluster.rank() == 0 {
                assert_eq!(g.value(twice), Some(vec![2]));
                assert_eq!(g.value(ab), Some(vec![12]));
                assert_eq!(g.value(ba), Some(vec![21]));
            }
        },
    );
}
