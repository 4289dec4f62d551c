//! The innermost loop of `blis.rs`: one `mr x nr` tile of `C` from an
//! `mr`-row sliver of packed `A` and an `nr`-column sliver of packed `B`.
//!
//! Written with `std::arch` rather than taken from a crate: the kernel
//! crates at hand (`matrixmultiply`, `gemm`) pack their operands inside
//! each call and keep their microkernels private, and the point of the
//! nest is to pack `B` once for every task. The tile's shape is the one
//! BLIS uses on each instruction set, chosen once at run time:
//!
//! - x86-64 with AVX-512 (and a compiler that has its intrinsics, Rust
//!   1.89 or later: `build.rs` says): 12 x 32, twenty-four 16-lane
//!   accumulators; per step of the inner dimension two loads of `B`,
//!   twelve broadcasts of `A`, twenty-four fused multiply-adds.
//! - x86-64 with AVX2 and FMA: 6 x 16, twelve 8-lane accumulators.
//! - anything else: 6 x 16 in plain loops with `mul_add`, which is one
//!   instruction where the target has fused multiply-add (on x86-64
//!   without FMA it is a call to the C library's `fmaf`: correct, slow).
//!
//! Each element of a tile sums its products in order of the inner index,
//! one rounding per product on every path, so the three give the same
//! bits.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use std::sync::OnceLock;

/// The largest tile any kernel uses, for the buffer of a partial tile.
const MAX_MR: usize = 12;
const MAX_NR: usize = 32;

/// A full tile: `C[tile] (+)= A_sliver B_sliver`, with `kc` steps of `mr`
/// values in `a` and of `nr` in `b`, `c` at row stride `ldc`.
type FullTile = unsafe fn(usize, *const f32, *const f32, *mut f32, usize, bool);

/// One microkernel: its tile's shape and its code. Only the statics below
/// exist, and [`available`] hands out those the CPU runs.
pub struct Kernel {
    /// Rows of a tile (of a sliver of packed `A`).
    pub mr: usize,
    /// Columns of a tile (of a sliver of packed `B`).
    pub nr: usize,
    /// What it runs on, for reports.
    pub name: &'static str,
    full: FullTile,
}

#[cfg(all(target_arch = "x86_64", avx512_intrinsics))]
static AVX512: Kernel = Kernel {
    mr: x86::AVX512_MR,
    nr: x86::AVX512_NR,
    name: "AVX-512, 12 x 32",
    full: x86::tile_avx512,
};

#[cfg(target_arch = "x86_64")]
static AVX2: Kernel = Kernel {
    mr: x86::AVX2_MR,
    nr: x86::AVX2_NR,
    name: "AVX2 + FMA, 6 x 16",
    full: x86::tile_avx2,
};

static PORTABLE: Kernel = Kernel {
    mr: PORTABLE_MR,
    nr: PORTABLE_NR,
    name: "portable, 6 x 16",
    full: tile_portable,
};

const PORTABLE_MR: usize = 6;
const PORTABLE_NR: usize = 16;
static_assertions::const_assert!(PORTABLE_MR <= MAX_MR && PORTABLE_NR <= MAX_NR);

/// The kernels this CPU runs, best first (the tests run each).
pub fn available() -> Vec<&'static Kernel> {
    let mut kernels = Vec::new();
    #[cfg(all(target_arch = "x86_64", avx512_intrinsics))]
    if is_x86_feature_detected!("avx512f") {
        kernels.push(&AVX512);
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        kernels.push(&AVX2);
    }
    kernels.push(&PORTABLE);
    kernels
}

/// The best kernel this CPU runs (chosen once).
pub fn kernel() -> &'static Kernel {
    static CHOSEN: OnceLock<&'static Kernel> = OnceLock::new();
    CHOSEN.get_or_init(|| available()[0])
}

impl Kernel {
    /// `C[tile] (+)= A_sliver B_sliver` for the `height x width` corner of
    /// one tile (`height <= mr`, `width <= nr`): `a` holds `kc` steps of
    /// `mr` values, `b` `kc` steps of `nr`, `c` points to the tile's first
    /// element in a matrix of row stride `ldc`. With `accumulate` the
    /// product is added to `C`, else it replaces it. Past the corner the
    /// slivers may hold anything: row `i` of a tile depends only on `A`'s
    /// row `i`, column `j` only on `B`'s column `j`, and only the corner is
    /// written.
    ///
    /// # Safety
    /// `c` is valid for reads and writes of `height` rows of `width`
    /// elements at stride `ldc`, and nothing else accesses them meanwhile.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub unsafe fn tile(
        &self,
        kc: usize,
        a: &[f32],
        b: &[f32],
        c: *mut f32,
        ldc: usize,
        (height, width): (usize, usize),
        accumulate: bool,
    ) {
        let (mr, nr) = (self.mr, self.nr);
        assert!(
            a.len() >= kc * mr && b.len() >= kc * nr,
            "packed slivers of depth {kc}"
        );
        assert!(height <= mr && width <= nr, "a tile is at most {mr} x {nr}");
        if height == mr && width == nr {
            // SAFETY: the slivers hold `kc` steps (asserted); a full tile
            // of `C` is valid (caller); `full` runs on this CPU (only
            // `available` hands out kernels, after checking the CPU).
            unsafe { (self.full)(kc, a.as_ptr(), b.as_ptr(), c, ldc, accumulate) };
            return;
        }
        // A partial tile at the edge of `C`: the full tile into a buffer,
        // then its corner.
        let mut out = [[0.0f32; MAX_NR]; MAX_MR];
        // SAFETY: as above, into the buffer: `MAX_MR x MAX_NR` at stride
        // `MAX_NR` holds any kernel's tile (each kernel's shape is
        // asserted at most that).
        unsafe {
            (self.full)(
                kc,
                a.as_ptr(),
                b.as_ptr(),
                out.as_mut_ptr().cast(),
                MAX_NR,
                false,
            )
        };
        // SAFETY: the corner of `C` is valid and ours (caller).
        unsafe {
            write_rows(
                out.iter().map(|row| &row[..width]).take(height),
                c,
                ldc,
                accumulate,
            )
        };
    }
}

/// Writes (or, with `accumulate`, adds) `rows` to the rows of `C` from
/// `c` on, at stride `ldc`.
///
/// # Safety
/// `c` is valid for reads and writes of as many rows of as many elements
/// as `rows` yields, at stride `ldc`, and nothing else accesses them.
unsafe fn write_rows<'r>(
    rows: impl Iterator<Item = &'r [f32]>,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    for (i, row) in rows.enumerate() {
        // SAFETY: row `i` of the rows `c` points to (caller).
        let start = unsafe { c.add(i * ldc) };
        // SAFETY: as above; `row.len()` elements of it.
        let dst = unsafe { std::slice::from_raw_parts_mut(start, row.len()) };
        for (d, &v) in dst.iter_mut().zip(row) {
            *d = if accumulate { *d + v } else { v };
        }
    }
}

/// The plain-loop kernel, 6 x 16.
///
/// # Safety
/// `a` and `b` hold `kc * 6` and `kc * 16` values; `c` is valid for a
/// 6 x 16 tile at stride `ldc`, and nothing else accesses it meanwhile.
unsafe fn tile_portable(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    const MR: usize = PORTABLE_MR;
    const NR: usize = PORTABLE_NR;
    // SAFETY: `a` holds `kc * MR` values (caller).
    let a = unsafe { std::slice::from_raw_parts(a, kc * MR) };
    // SAFETY: `b` holds `kc * NR` values (caller).
    let b = unsafe { std::slice::from_raw_parts(b, kc * NR) };
    let mut acc = [[0.0f32; NR]; MR];
    for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
        for (row, &x) in acc.iter_mut().zip(ap) {
            for (o, &y) in row.iter_mut().zip(bp) {
                *o = x.mul_add(y, *o);
            }
        }
    }
    // SAFETY: a full tile of `C` (caller).
    unsafe { write_rows(acc.iter().map(|row| &row[..]), c, ldc, accumulate) };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{MAX_MR, MAX_NR};
    use std::arch::x86_64::*;

    pub const AVX2_MR: usize = 6;
    pub const AVX2_NR: usize = 16;
    pub const AVX512_MR: usize = 12;
    pub const AVX512_NR: usize = 32;
    static_assertions::const_assert!(AVX2_MR <= MAX_MR && AVX2_NR <= MAX_NR);
    static_assertions::const_assert!(AVX512_MR <= MAX_MR && AVX512_NR <= MAX_NR);

    /// The body of a full-tile kernel, for one vector width: `MR` rows of
    /// two vectors of `LANES` lanes each (`NR = 2 * LANES`), with that
    /// width's zero, load, broadcast, fused multiply-add, add and store.
    ///
    /// Its caller's contract (as a kernel's `# Safety`): the CPU has the
    /// instructions; `a` and `b` hold `kc * MR` and `kc * NR` values; `c`
    /// is valid for a full tile at stride `ldc`, and nothing else accesses
    /// it meanwhile.
    macro_rules! full_tile {
        (
            ($kc:ident, $a:ident, $b:ident, $c:ident, $ldc:ident, $accumulate:ident),
            $mr:expr, $nr:expr, $lanes:expr,
            $zero:ident, $load:ident, $set1:ident, $fma:ident, $add:ident, $store:ident
        ) => {{
            const MR: usize = $mr;
            const NR: usize = $nr;
            const LANES: usize = $lanes;
            static_assertions::const_assert!(NR == 2 * LANES);
            // The arithmetic intrinsics are safe to call in a function with
            // their target features from Rust 1.87 on, unsafe before (the
            // crate's MSRV is 1.86): in blocks, which newer compilers find
            // unused (the kernels allow that).
            // SAFETY: the CPU has the instructions (caller).
            let mut acc = [[unsafe { $zero() }; 2]; MR];
            for p in 0..$kc {
                // SAFETY: step `p < kc` of the `B` sliver (caller).
                let step = unsafe { $b.add(p * NR) };
                // SAFETY: the step's first `LANES` values.
                let b0 = unsafe { $load(step) };
                // SAFETY: within the step (`LANES < NR`).
                let step_hi = unsafe { step.add(LANES) };
                // SAFETY: the step's last `LANES` values.
                let b1 = unsafe { $load(step_hi) };
                // SAFETY: step `p < kc` of the `A` sliver (caller).
                let a_step = unsafe { $a.add(p * MR) };
                for (i, row) in acc.iter_mut().enumerate() {
                    // SAFETY: value `i < MR` of the step.
                    let at = unsafe { a_step.add(i) };
                    // SAFETY: as above: in the sliver, initialized.
                    let value = unsafe { *at };
                    // SAFETY: the CPU has the instructions (caller).
                    let x = unsafe { $set1(value) };
                    // SAFETY: as above.
                    row[0] = unsafe { $fma(x, b0, row[0]) };
                    // SAFETY: as above.
                    row[1] = unsafe { $fma(x, b1, row[1]) };
                }
            }
            for (i, row) in acc.iter().enumerate() {
                // SAFETY: row `i < MR` of the tile (caller).
                let dst = unsafe { $c.add(i * $ldc) };
                // SAFETY: as above; the row's last `LANES` elements.
                let dst_hi = unsafe { dst.add(LANES) };
                let (mut lo, mut hi) = (row[0], row[1]);
                if $accumulate {
                    // SAFETY: the row's first `LANES` elements (caller).
                    let old = unsafe { $load(dst) };
                    // SAFETY: the CPU has the instructions (caller).
                    lo = unsafe { $add(old, lo) };
                    // SAFETY: the row's last `LANES` elements (caller).
                    let old_hi = unsafe { $load(dst_hi) };
                    // SAFETY: the CPU has the instructions (caller).
                    hi = unsafe { $add(old_hi, hi) };
                }
                // SAFETY: the row's first `LANES` elements, ours (caller).
                unsafe { $store(dst, lo) };
                // SAFETY: its last `LANES`.
                unsafe { $store(dst_hi, hi) };
            }
        }};
    }

    /// A full 6 x 16 tile with AVX2 and FMA.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `a` and `b` hold `kc * 6` and `kc * 16`
    /// values; `c` is valid for a full tile at stride `ldc`, and nothing
    /// else accesses it meanwhile.
    #[target_feature(enable = "avx2,fma")]
    #[allow(unused_unsafe)] // see `full_tile`
    pub unsafe fn tile_avx2(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        accumulate: bool,
    ) {
        full_tile!(
            (kc, a, b, c, ldc, accumulate),
            AVX2_MR,
            AVX2_NR,
            8,
            _mm256_setzero_ps,
            _mm256_loadu_ps,
            _mm256_set1_ps,
            _mm256_fmadd_ps,
            _mm256_add_ps,
            _mm256_storeu_ps
        )
    }

    /// A full 12 x 32 tile with AVX-512.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `a` and `b` hold `kc * 12` and `kc * 32`
    /// values; `c` is valid for a full tile at stride `ldc`, and nothing
    /// else accesses it meanwhile.
    // The crate's MSRV predates these intrinsics: `build.rs` compiles this
    // only with a compiler that has them.
    #[cfg(avx512_intrinsics)]
    #[allow(clippy::incompatible_msrv, unused_unsafe)]
    #[target_feature(enable = "avx512f")]
    pub unsafe fn tile_avx512(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        accumulate: bool,
    ) {
        full_tile!(
            (kc, a, b, c, ldc, accumulate),
            AVX512_MR,
            AVX512_NR,
            16,
            _mm512_setzero_ps,
            _mm512_loadu_ps,
            _mm512_set1_ps,
            _mm512_fmadd_ps,
            _mm512_add_ps,
            _mm512_storeu_ps
        )
    }
}
