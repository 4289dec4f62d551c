//! The BLIS-style loop nest of the GEMM demonstration
//! (`tools/src/blis.rs`): on one thread, on selvedge's loops and on
//! rayon's it computes the product `matrixmultiply` computes, for sizes
//! whose edges cut through tiles, blocks and slices of the inner
//! dimension, on packing buffers that earlier products left holding their
//! values (the buffers are shared by the tests running at the same time,
//! so which buffer a product gets varies); and the three versions, and
//! every microkernel the CPU runs, agree bit for bit (each element is
//! summed in the same order). `C` starts as NaN, so a tile left unwritten
//! fails the comparisons.

use selvedge_tools::{blis, gemm, microkernel};

use selvedge::Runtime;

/// A deterministic matrix of `len` values in [-1, 1).
fn matrix(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// `a b` by `matrixmultiply`, for `m x n` `a` and `n x n` `b`.
fn reference(a: &[f32], b: &[f32], n: usize) -> Vec<f32> {
    let mut c = vec![0.0; a.len()];
    gemm::gemm_rows(a, b, &mut c, n);
    c
}

#[test]
fn every_version_computes_the_product_at_sizes_that_cut_through_tiles() {
    let rt = Runtime::builder().num_threads(3).build().unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    // (rows of A and C, n): a large product first, so that the smaller
    // ones after it run on packing buffers holding its values; then sizes
    // below one tile, across a row block (96) and a depth slice (256),
    // and rows that are not a multiple of any tile height.
    for (m, n) in [
        (300, 300),
        (1, 1),
        (5, 7),
        (13, 33),
        (97, 65),
        (200, 257),
        (37, 300),
        (256, 256),
    ] {
        let (a, b) = (matrix(m * n, m as u64), matrix(n * n, n as u64 + 1));
        let expected = reference(&a, &b, n);
        let mut serial = vec![f32::NAN; m * n];
        blis::product_serial(&a, &b, &mut serial, n);
        let err = gemm::max_relative_difference(&expected, &serial);
        assert!(
            err < 1e-5,
            "{m} x {n}: the nest on one thread ({}) differs from matrixmultiply by {err}",
            microkernel::kernel().name
        );
        let mut ours = vec![f32::NAN; m * n];
        rt.run(|| blis::product_selvedge(&a, &b, &mut ours, n));
        assert!(
            ours == serial,
            "{m} x {n}: the nest on selvedge's loops differs from the nest on one thread"
        );
        let mut theirs = vec![f32::NAN; m * n];
        pool.install(|| blis::product_rayon(&a, &b, &mut theirs, n));
        assert!(
            theirs == serial,
            "{m} x {n}: the nest on rayon's loops differs from the nest on one thread"
        );
    }
}

#[test]
fn every_microkernel_this_cpu_runs_computes_the_same_bits() {
    // Largest first, so the smaller ones reuse dirty buffers.
    for (m, n) in [(130, 270), (7, 19), (40, 40)] {
        let (a, b) = (matrix(m * n, 3), matrix(n * n, 4));
        let expected = reference(&a, &b, n);
        let mut first: Option<Vec<f32>> = None;
        for kr in microkernel::available() {
            let mut c = vec![f32::NAN; m * n];
            blis::product_serial_with(kr, &a, &b, &mut c, n);
            let err = gemm::max_relative_difference(&expected, &c);
            assert!(
                err < 1e-5,
                "{m} x {n}: kernel {} differs from matrixmultiply by {err}",
                kr.name
            );
            // Each element summed in the same order, one rounding per
            // product, whatever the tile's shape.
            match &first {
                None => first = Some(c),
                Some(f) => assert!(
                    *f == c,
                    "{m} x {n}: kernel {} differs from the first",
                    kr.name
                ),
            }
        }
    }
}

#[test]
#[should_panic(expected = "B is n x n")]
fn a_b_of_the_wrong_size_is_refused_with_its_shape() {
    let mut c = vec![0.0; 4];
    blis::product_serial(&[1.0; 4], &[1.0; 5], &mut c, 2);
}
