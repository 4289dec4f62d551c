//! What the `trace` feature costs when a runtime is traced: fib(32)
//! (spawn and join flavours) and the batched GEMM demonstration (64 pairs
//! of 256 x 256 f32 matrices, two stages), each on an untraced runtime and
//! on a traced one built the same way, with rayon's version as the peer,
//! all in the same run, taking turns sample by sample. It prints each
//! median and the traced / untraced ratio.
//!
//! Built only with the feature (`required-features`): without it no
//! runtime can be traced, and no tracing code is compiled at all.
//!
//! ```text
//! SELVEDGE_BENCH_THREADS=2 cargo bench -p selvedge-tools --features trace --bench trace [-- --samples N]
//! ```

use selvedge_tools::turns::interleaved_medians;
use selvedge_tools::{gemm, workloads};

use std::hint::black_box;

fn samples() -> usize {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--samples" {
            return args
                .next()
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .unwrap_or_else(|| {
                    eprintln!("trace bench: --samples needs a positive integer");
                    std::process::exit(2)
                });
        }
    }
    21
}

fn main() {
    let threads = workloads::threads_from_env();
    let samples = samples();
    let dir = std::env::temp_dir().join(format!("selvedge-trace-bench-{}", std::process::id()));
    let plain = selvedge::Runtime::builder()
        .num_threads(threads)
        .build()
        .unwrap();
    let traced = selvedge::Runtime::builder()
        .num_threads(threads)
        .trace_to(dir.join("trace.json"))
        .build()
        .unwrap();
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    println!("trace overhead: {threads} threads, median of {samples} samples, taking turns");
    println!("| workload | untraced | traced | traced / untraced | rayon | untraced / rayon |");
    println!("|---|---:|---:|---:|---:|---:|");
    let row = |name: &str, [u, t, r]: [f64; 3]| {
        println!(
            "| {name} | {:.2} ms | {:.2} ms | {:.3} | {:.2} ms | {:.3} |",
            u * 1e3,
            t * 1e3,
            t / u,
            r * 1e3,
            u / r
        );
    };

    let fib = 32;
    let expected = workloads::fib_serial(fib);
    for rt in [&plain, &traced] {
        assert_eq!(rt.run(|| workloads::fib_selvedge_spawn(fib)), expected);
        assert_eq!(rt.run(|| workloads::fib_selvedge_join(fib)), expected);
    }
    row(
        "fib(32), spawn",
        interleaved_medians(
            samples,
            [
                &mut || {
                    assert_eq!(
                        plain.run(|| workloads::fib_selvedge_spawn(black_box(fib))),
                        expected
                    )
                },
                &mut || {
                    assert_eq!(
                        traced.run(|| workloads::fib_selvedge_spawn(black_box(fib))),
                        expected
                    )
                },
                &mut || {
                    assert_eq!(
                        rayon.install(|| workloads::fib_rayon(black_box(fib))),
                        expected
                    )
                },
            ],
        ),
    );
    row(
        "fib(32), join",
        interleaved_medians(
            samples,
            [
                &mut || {
                    assert_eq!(
                        plain.run(|| workloads::fib_selvedge_join(black_box(fib))),
                        expected
                    )
                },
                &mut || {
                    assert_eq!(
                        traced.run(|| workloads::fib_selvedge_join(black_box(fib))),
                        expected
                    )
                },
                &mut || {
                    assert_eq!(
                        rayon.install(|| workloads::fib_rayon(black_box(fib))),
                        expected
                    )
                },
            ],
        ),
    );

    let input = gemm::Batch::new(64, 256, 0x5e1_7ed6e);
    let mut expected = input.output();
    gemm::serial(&input, &mut expected);
    let (mut a, mut b, mut c) = (input.output(), input.output(), input.output());
    let gemm_row = interleaved_medians(
        samples,
        [
            &mut || plain.run(|| gemm::selvedge(&input, &mut a)),
            &mut || traced.run(|| gemm::selvedge(&input, &mut b)),
            &mut || rayon.install(|| gemm::rayon_nest(&input, &mut c)),
        ],
    );
    for out in [&a, &b, &c] {
        let err = gemm::max_relative_error(&expected, out);
        assert!(
            err < 1e-4,
            "a GEMM result differs from the serial one by {err}"
        );
    }
    row("batched GEMM 64 x 256³", gemm_row);
    drop(traced);
    let _ = std::fs::remove_dir_all(&dir);
}
