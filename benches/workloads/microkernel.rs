//! The innermost loop of `blis.rs`: one `mr x nr` tile of `C` from an
//! `mr`-row sliver of packed `A` and an `nr`-column sliver of packed `B`.
//!
//! Written with `std::arch` rather than taken from a crate: the kernel
//! crates at hand (`matrixmultiply`, `gemm`) pack their operands inside
//! each call and keep their microkernels private, and the point of the
//! nest is to pack `B` once for every task. The tile's shape is the one
//! BLIS uses on each instruction set, chosen once at run time:
//!
//! - x86-64 with AVX-512: 12 x 32, twenty-four 16-lane accumulators; per
//!   step of the inner dimension two loads of `B`, twelve broadcasts of
//!   `A`, twenty-four fused multiply-adds.
//! - x86-64 with AVX2 and FMA: 6 x 16, twelve 8-lane accumulators.
//! - anything else: 6 x 16 in plain loops, which the compiler vectorizes
//!   as it can.
//!
//! Each element of a tile sums its products in order of the inner index,
//! one rounding per product on every path (fused multiply-adds; the plain
//! loops use `mul_add`), so the three give the same bits.

use std::sync::OnceLock;

/// The largest tile any kernel uses, for the buffer of a partial tile.
const MAX_MR: usize = 12;
const MAX_NR: usize = 32;

/// A full tile: `C[tile] (+)= A_sliver B_sliver`, with `kc` steps of `mr`
/// values in `a` and of `nr` in `b`, `c` at row stride `ldc`.
type FullTile = unsafe fn(usize, *const f32, *const f32, *mut f32, usize, bool);

/// One microkernel: its tile's shape and its code.
pub struct Kernel {
    /// Rows of a tile (of a sliver of packed `A`).
    pub mr: usize,
    /// Columns of a tile (of a sliver of packed `B`).
    pub nr: usize,
    /// What it runs on (for reports).
    pub name: &'static str,
    full: FullTile,
}

#[cfg(target_arch = "x86_64")]
static AVX512: Kernel = Kernel {
    mr: 12,
    nr: 32,
    name: "AVX-512, 12 x 32",
    full: x86::tile_avx512,
};

#[cfg(target_arch = "x86_64")]
static AVX2: Kernel = Kernel {
    mr: 6,
    nr: 16,
    name: "AVX2 + FMA, 6 x 16",
    full: x86::tile_avx2,
};

static PORTABLE: Kernel = Kernel {
    mr: 6,
    nr: 16,
    name: "portable, 6 x 16",
    full: tile_portable,
};

/// The kernels this CPU runs, best first (the tests run each).
pub fn available() -> Vec<&'static Kernel> {
    let mut kernels = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            kernels.push(&AVX512);
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            kernels.push(&AVX2);
        }
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
    /// `mr` values, `b` `kc` steps of `nr` (both zero past the tile's
    /// edge), `c` points to the tile's first element in a matrix of row
    /// stride `ldc`. With `accumulate` the product is added to `C`, else
    /// it replaces it.
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
            // of `C` is valid (caller); `full` runs on this CPU (`kernel`
            // checked its features).
            unsafe { (self.full)(kc, a.as_ptr(), b.as_ptr(), c, ldc, accumulate) };
            return;
        }
        // A partial tile at the edge of `C`: the full tile into a buffer,
        // then its corner.
        let mut out = [[0.0f32; MAX_NR]; MAX_MR];
        // SAFETY: as above, into the buffer (row stride `MAX_NR`, at least
        // `mr` rows of `nr`).
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
        for (i, row) in out.iter().enumerate().take(height) {
            // SAFETY: row `i < height` of the tile, `width` elements
            // (caller).
            let dst = unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), width) };
            for (d, &v) in dst.iter_mut().zip(row) {
                *d = if accumulate { *d + v } else { v };
            }
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
    const MR: usize = 6;
    const NR: usize = 16;
    // SAFETY: the slivers' lengths (caller).
    let (a, b) = unsafe {
        (
            std::slice::from_raw_parts(a, kc * MR),
            std::slice::from_raw_parts(b, kc * NR),
        )
    };
    let mut acc = [[0.0f32; NR]; MR];
    for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
        for (row, &x) in acc.iter_mut().zip(ap) {
            for (o, &y) in row.iter_mut().zip(bp) {
                *o = x.mul_add(y, *o);
            }
        }
    }
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: row `i` of the tile (caller).
        let dst = unsafe { std::slice::from_raw_parts_mut(c.add(i * ldc), NR) };
        for (d, &v) in dst.iter_mut().zip(row) {
            *d = if accumulate { *d + v } else { v };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// A full 6 x 16 tile with AVX2 and FMA.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `a` and `b` hold `kc * 6` and `kc * 16`
    /// values; `c` is valid for a full tile at stride `ldc`, and nothing
    /// else accesses it meanwhile.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn tile_avx2(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        accumulate: bool,
    ) {
        const MR: usize = 6;
        const NR: usize = 16;
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        for p in 0..kc {
            // SAFETY: step `p < kc` of the `B` sliver (caller).
            let (b0, b1) = unsafe {
                (
                    _mm256_loadu_ps(b.add(p * NR)),
                    _mm256_loadu_ps(b.add(p * NR + 8)),
                )
            };
            for (i, row) in acc.iter_mut().enumerate() {
                // SAFETY: step `p < kc` of the `A` sliver (caller).
                let x = unsafe { _mm256_broadcast_ss(&*a.add(p * MR + i)) };
                row[0] = _mm256_fmadd_ps(x, b0, row[0]);
                row[1] = _mm256_fmadd_ps(x, b1, row[1]);
            }
        }
        for (i, row) in acc.iter().enumerate() {
            // SAFETY: row `i < MR` of the tile, `NR` elements (caller).
            unsafe {
                let dst = c.add(i * ldc);
                let (mut lo, mut hi) = (row[0], row[1]);
                if accumulate {
                    lo = _mm256_add_ps(_mm256_loadu_ps(dst), lo);
                    hi = _mm256_add_ps(_mm256_loadu_ps(dst.add(8)), hi);
                }
                _mm256_storeu_ps(dst, lo);
                _mm256_storeu_ps(dst.add(8), hi);
            }
        }
    }

    /// A full 12 x 32 tile with AVX-512.
    ///
    /// # Safety
    /// The CPU has AVX-512F; `a` and `b` hold `kc * 12` and `kc * 32`
    /// values; `c` is valid for a full tile at stride `ldc`, and nothing
    /// else accesses it meanwhile.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn tile_avx512(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        accumulate: bool,
    ) {
        const MR: usize = 12;
        const NR: usize = 32;
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        for p in 0..kc {
            // SAFETY: step `p < kc` of the `B` sliver (caller).
            let (b0, b1) = unsafe {
                (
                    _mm512_loadu_ps(b.add(p * NR)),
                    _mm512_loadu_ps(b.add(p * NR + 16)),
                )
            };
            for (i, row) in acc.iter_mut().enumerate() {
                // SAFETY: step `p < kc` of the `A` sliver (caller).
                let x = _mm512_set1_ps(unsafe { *a.add(p * MR + i) });
                row[0] = _mm512_fmadd_ps(x, b0, row[0]);
                row[1] = _mm512_fmadd_ps(x, b1, row[1]);
            }
        }
        for (i, row) in acc.iter().enumerate() {
            // SAFETY: row `i < MR` of the tile, `NR` elements (caller).
            unsafe {
                let dst = c.add(i * ldc);
                let (mut lo, mut hi) = (row[0], row[1]);
                if accumulate {
                    lo = _mm512_add_ps(_mm512_loadu_ps(dst), lo);
                    hi = _mm512_add_ps(_mm512_loadu_ps(dst.add(16)), hi);
                }
                _mm512_storeu_ps(dst, lo);
                _mm512_storeu_ps(dst.add(16), hi);
            }
        }
    }
}
