//! Messaging overhead between two ranks: round trips of one message each
//! way, through selvedge's promises (`isend`, then `irecv(..).join()`; the
//! other rank answers with a `send_after` on the receive's dependency)
//! against the same round trips with blocking `MPI_Send`/`MPI_Recv` on the
//! main thread (`--raw`, a process without a cluster). Without `--raw` the
//! round trips run twice: in a task (on a worker of the global runtime,
//! where the waiting worker tests the messages itself), then from the main
//! thread (outside the pool, which tests while it waits, beside the idle
//! workers). Prints the median round trip and half of it (the one-way
//! latency) over `rounds` rounds after 100 warm-up rounds.
//!
//! ```text
//! cargo build --release -p selvedge-tools --no-default-features --features mpi-baseline --bin mpi_pingpong
//! mpirun -n 2 target/release/mpi_pingpong [--raw] [rounds] [elements]
//! ```

use selvedge::mpi::mpi_sys as ffi;
use selvedge::mpi::Cluster;
use std::ffi::c_void;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let raw = args.iter().any(|a| a == "--raw");
    let numbers: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let rounds = numbers.first().copied().unwrap_or(10_000);
    let len = numbers.get(1).copied().unwrap_or(1);
    // Printed before MPI is finalized (the cluster dropped, or
    // MPI_Finalize): mpirun may stop forwarding output after that.
    let report = |rank: usize, how: &str, mut times: Vec<f64>| {
        if rank != 0 {
            return;
        }
        times.sort_unstable_by(f64::total_cmp);
        let median = times[times.len() / 2];
        println!(
            "mpi_pingpong {how}: {rounds} round trips of {len} u64 each way: median {:.2} us a round trip, {:.2} us one way (p10 {:.2}, p90 {:.2})",
            median,
            median / 2.0,
            times[times.len() / 10],
            times[times.len() * 9 / 10]
        );
    };
    if raw {
        raw_mpi(rounds, len, |rank, times| {
            report(rank, "raw MPI_Send/MPI_Recv", times)
        });
    } else {
        let cluster = Cluster::start().expect("MPI starts (run under mpirun -n 2)");
        assert_eq!(cluster.size(), 2, "run with mpirun -n 2");
        let rank = cluster.rank();
        let in_task = selvedge::global_runtime().run(|| round_trips(&cluster, rounds, len));
        report(rank, "selvedge isend/irecv in a task", in_task);
        let outside = round_trips(&cluster, rounds, len);
        report(rank, "selvedge isend/irecv from the main thread", outside);
        drop(cluster);
    }
}

/// Round trips through `cluster` (microseconds each, as this rank saw
/// them), from whichever thread calls it.
fn round_trips(cluster: &Cluster, rounds: usize, len: usize) -> Vec<f64> {
    let rank = cluster.rank();
    let mut times = Vec::with_capacity(rounds);
    for round in 0..100 + rounds {
        let tag = (round % 1000) as i32;
        let start = Instant::now();
        if rank == 0 {
            let sent = cluster.isend(vec![round as u64; len], 1, tag);
            let back = cluster.irecv::<u64>(len, 1, tag).join().unwrap();
            assert_eq!(back[0], round as u64 + 1);
            sent.join().unwrap();
        } else {
            let got = cluster.irecv::<u64>(len, 0, tag);
            let dep = got.dep();
            cluster
                .send_after(
                    [dep],
                    move || got.join().unwrap().iter().map(|v| v + 1).collect(),
                    0,
                    tag,
                )
                .join()
                .unwrap();
        }
        if round >= 100 {
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    times
}

/// The same round trips with blocking MPI calls on the main thread.
fn raw_mpi(rounds: usize, len: usize, report: impl Fn(usize, Vec<f64>)) {
    let mut provided = 0;
    let (mut rank, mut size) = (0, 0);
    // SAFETY: MPI is started once, on this thread, which alone calls it
    // (funneled); no command-line arguments are passed.
    unsafe {
        ffi::MPI_Init_thread(
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            ffi::RSMPI_THREAD_FUNNELED,
            &mut provided,
        )
    };
    // SAFETY: MPI is started, on this thread; `rank` outlives the call.
    unsafe { ffi::MPI_Comm_rank(ffi::RSMPI_COMM_WORLD, &mut rank) };
    // SAFETY: as above, for `size`.
    unsafe { ffi::MPI_Comm_size(ffi::RSMPI_COMM_WORLD, &mut size) };
    assert_eq!(size, 2, "run with mpirun -n 2");
    let mut buf = vec![0u64; len];
    let mut times = Vec::with_capacity(rounds);
    for round in 0..100 + rounds {
        let tag = (round % 1000) as i32;
        let start = Instant::now();
        if rank == 0 {
            buf.fill(round as u64);
            send(&buf, 1, tag);
            recv(&mut buf, 1, tag);
            assert_eq!(buf[0], round as u64 + 1);
        } else {
            recv(&mut buf, 0, tag);
            buf.iter_mut().for_each(|v| *v += 1);
            send(&buf, 0, tag);
        }
        if round >= 100 {
            times.push(start.elapsed().as_secs_f64() * 1e6);
        }
    }
    report(rank as usize, times);
    // SAFETY: MPI was started on this thread, which alone calls it; the
    // last MPI call.
    unsafe { ffi::MPI_Finalize() };
}

/// `buf`'s length as MPI's element count.
fn count(buf: &[u64]) -> i32 {
    i32::try_from(buf.len())
        .unwrap_or_else(|_| panic!("{} elements: too many for one MPI message", buf.len()))
}

/// Sends `buf` to rank `dest` with a blocking `MPI_Send`.
fn send(buf: &[u64], dest: i32, tag: i32) {
    let (ptr, n) = (buf.as_ptr().cast::<c_void>(), count(buf));
    // SAFETY: MPI was started on this thread, which alone calls it; `ptr`
    // points to `n` u64s, borrowed until the blocking call returns.
    unsafe {
        ffi::MPI_Send(
            ptr,
            n,
            ffi::RSMPI_UINT64_T,
            dest,
            tag,
            ffi::RSMPI_COMM_WORLD,
        )
    };
}

/// Receives into `buf` from rank `source` with a blocking `MPI_Recv`.
fn recv(buf: &mut [u64], source: i32, tag: i32) {
    let n = count(buf);
    let ptr = buf.as_mut_ptr().cast::<c_void>();
    // SAFETY: as in `send`; `ptr` points to `n` u64s, borrowed mutably
    // until the blocking call returns, and MPI writes at most `n`.
    unsafe {
        ffi::MPI_Recv(
            ptr,
            n,
            ffi::RSMPI_UINT64_T,
            source,
            tag,
            ffi::RSMPI_COMM_WORLD,
            ffi::RSMPI_STATUS_IGNORE,
        )
    };
}
