//! Products with one tiny dimension, which GEMM libraries run far below memory bandwidth.
//!
//! A Dense layer on a wide input (the tutorial's variant (a): a 10 x 1,000,000 batch times a
//! 128 x 1,000,000 weight) does two such products per step:
//! - forward `X W^T`: `m` (the batch) is tiny and `k` huge; the time is one read of W.
//! - weight gradient `dY^T X`: `k` (the batch) is tiny and the output (W-sized) huge; the time
//!   is one write of the gradient.
//!
//! `gemm` handles both as general products: it packs the large operand into panels first and
//! writes the output with ordinary stores (each output line is read for ownership before it is
//! overwritten), so it moves 2-3x the bytes these products need. The kernels here stream the
//! large operand once, and [`outer`] writes a large output with non-temporal stores. They are
//! memory-bound by construction (arithmetic intensity ~k or ~m FLOP per 4 bytes), so plain
//! broadcast-FMA loops reach the bandwidth. The module exists on x86_64 only and runs on f32 with
//! AVX2+FMA; every other case falls back to `gemm` (see [`try_skinny_f32`]).

use rayon::prelude::*;

use super::cast::SendPtr;
use super::elementwise::has_avx2_fma;

/// Largest tiny dimension handled here. Above it the product has enough arithmetic per byte
/// for a GEMM kernel to be the right tool.
pub(crate) const MAX_TINY: usize = 16;

/// Outputs at least this many elements are written with non-temporal stores: they do not fit
/// in the caches anyway, and bypassing them saves the read-for-ownership of every line.
const STREAM_MIN_ELEMS: usize = 1 << 21;

/// Columns per task in [`outer`]: the `k x COL_BLOCK` slice of B (at most 16 x 2 KB) stays in
/// L1 while every output row of the block is produced.
const COL_BLOCK: usize = 512;

/// Largest output [`rowdot`] takes: each of its k-parts sums into a private `m x n` partial,
/// which should stay small (256 KB) next to the operand it streams.
const ROWDOT_MAX_OUT: usize = 1 << 16;

/// Inner-dimension block in [`rowdot`]: the `m x K_BLOCK` slice of A (at most 16 x 8 KB)
/// stays in L2 while every row of B passes over it.
const K_BLOCK: usize = 2048;

/// `dst(m x n, row-major) = a(m x k) * b(k x n)` (element strides as in `gemm_into`) when one
/// of the skinny kernels fits the shapes and layouts; returns false, touching nothing,
/// otherwise. Small products are left to `gemm` (thread start-up would dominate here).
#[allow(clippy::too_many_arguments)]
pub(crate) fn try_skinny_f32(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    a_rs: isize,
    a_cs: isize,
    b: &[f32],
    b_rs: isize,
    b_cs: isize,
    dst: &mut [f32],
) -> bool {
    if !has_avx2_fma() || m == 0 || n == 0 || k == 0 {
        return false;
    }
    if k <= MAX_TINY && b_cs == 1 && b_rs >= 0 && m * n >= 1 << 18 {
        // Pack the tiny A (m x k) so the kernel reads it with unit stride.
        let mut ap = Vec::with_capacity(m * k);
        for i in 0..m {
            for p in 0..k {
                ap.push(a[(i as isize * a_rs + p as isize * a_cs) as usize]);
            }
        }
        outer(m, n, k, &ap, b, b_rs as usize, dst);
        return true;
    }
    if m <= MAX_TINY
        && m * n <= ROWDOT_MAX_OUT
        && a_cs == 1
        && b_rs == 1
        && a_rs >= 0
        && b_cs >= 0
        && k >= 1 << 14
    {
        rowdot(m, n, k, a, a_rs as usize, b, b_cs as usize, dst);
        return true;
    }
    false
}

/// `dst[i, c] = sum_p a[i, p] * b[p * b_rs + c]` for `k <= MAX_TINY`; `a` is packed `m x k`.
fn outer(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], b_rs: usize, dst: &mut [f32]) {
    // The kernel's bounds, checked in release builds too (O(1)): `gemm_into`, the only caller,
    // asserted that `b` covers k rows at stride b_rs, so this cannot overflow.
    assert!(k <= MAX_TINY && a.len() == m * k && dst.len() == m * n);
    assert!(b.len() > (k - 1) * b_rs + n - 1);
    let stream = m * n >= STREAM_MIN_ELEMS;
    let out = SendPtr(dst.as_mut_ptr());
    let blocks = n.div_ceil(COL_BLOCK);
    (0..blocks).into_par_iter().with_min_len(4).for_each(|blk| {
        let c0 = blk * COL_BLOCK;
        let c1 = (c0 + COL_BLOCK).min(n);
        // SAFETY: AVX2 and FMA were detected by the caller (`try_skinny_f32`); rows `p < k` of
        // b cover columns `c0..c1 <= n` (asserted above); this task writes only columns
        // `c0..c1` of each of
        // the `m` output rows, which no other task writes.
        unsafe { x86::outer_block(m, n, k, a, b, b_rs, c0, c1, out.get(), stream) };
    });
}

/// `dst[i, j] += sum_p a[i * a_rs + p] * b[j * b_cs + p]` on the calling thread, for products
/// too small to split (the x W^T of a small layer): [`rowdot`]'s register-tiled block over the
/// whole of `k`. False, touching nothing, without AVX2/FMA.
#[allow(clippy::too_many_arguments)]
pub(crate) fn rowdot_serial(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    a_rs: usize,
    b: &[f32],
    b_cs: usize,
    dst: &mut [f32],
) -> bool {
    if !has_avx2_fma() || m == 0 || n == 0 {
        return false;
    }
    assert!(dst.len() == m * n && a.len() >= (m - 1) * a_rs + k && b.len() >= (n - 1) * b_cs + k);
    // SAFETY: AVX2 and FMA were detected above; the bounds were asserted just above.
    unsafe { x86::rowdot_block(m, n, a, a_rs, b, b_cs, 0, k, dst) };
    true
}

/// `dst[i, j] = sum_p a[i * a_rs + p] * b[j * b_cs + p]` for `m <= MAX_TINY`: both operands
/// are read along `k` with unit stride (`X W^T` with W row-major).
#[allow(clippy::too_many_arguments)]
fn rowdot(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    a_rs: usize,
    b: &[f32],
    b_cs: usize,
    dst: &mut [f32],
) {
    // The kernel's bounds, checked in release builds too (O(1)); `gemm_into` asserted the
    // slices cover the dims, so this cannot overflow.
    assert!(m <= MAX_TINY && dst.len() == m * n);
    assert!(a.len() >= (m - 1) * a_rs + k && b.len() >= (n - 1) * b_cs + k);
    // Split k across the threads; each part sums into its own m x n partial.
    let parts = rayon::current_num_threads().max(1) * 2;
    let chunk = k.div_ceil(parts).next_multiple_of(64);
    let partial = (0..k.div_ceil(chunk))
        .into_par_iter()
        .map(|part| {
            let p0 = part * chunk;
            let p1 = (p0 + chunk).min(k);
            let mut acc = vec![0f32; m * n];
            let mut b0 = p0;
            while b0 < p1 {
                let b1 = (b0 + K_BLOCK).min(p1);
                // SAFETY: AVX2 and FMA were detected by the caller; every row i < m of a and
                // column j < n of b covers `b0..b1 <= k` (asserted above); acc is m x n.
                unsafe { x86::rowdot_block(m, n, a, a_rs, b, b_cs, b0, b1, &mut acc) };
                b0 = b1;
            }
            acc
        })
        .reduce_with(|mut x, y| {
            x.iter_mut().zip(&y).for_each(|(x, y)| *x += y);
            x
        });
    if let Some(sum) = partial {
        dst.copy_from_slice(&sum);
    }
}

mod x86 {
    use std::arch::x86_64::*;

    use super::MAX_TINY;

    /// Columns `c0..c1` of every output row of [`super::outer`].
    ///
    /// # Safety
    /// AVX2+FMA present; `b` holds rows `p < k` at `p * b_rs` covering columns `c0..c1`;
    /// `out` points to an `m x n` row-major buffer whose columns `c0..c1` nobody else touches.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn outer_block(
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        b: &[f32],
        b_rs: usize,
        c0: usize,
        c1: usize,
        out: *mut f32,
        stream: bool,
    ) {
        let bp = b.as_ptr();
        for i in 0..m {
            let mut coef = [_mm256_setzero_ps(); MAX_TINY];
            for p in 0..k {
                coef[p] = _mm256_set1_ps(a[i * k + p]);
            }
            let row = out.add(i * n);
            let mut c = c0;
            // Scalar head up to a 32-byte boundary so the vector stores can stream.
            while c < c1 && !(row.add(c) as usize).is_multiple_of(32) {
                *row.add(c) = scalar(a, i, k, b, b_rs, c);
                c += 1;
            }
            while c + 16 <= c1 {
                let mut s0 = _mm256_setzero_ps();
                let mut s1 = _mm256_setzero_ps();
                for (p, cf) in coef.iter().enumerate().take(k) {
                    let src = bp.add(p * b_rs + c);
                    s0 = _mm256_fmadd_ps(*cf, _mm256_loadu_ps(src), s0);
                    s1 = _mm256_fmadd_ps(*cf, _mm256_loadu_ps(src.add(8)), s1);
                }
                store(row.add(c), s0, stream);
                store(row.add(c + 8), s1, stream);
                c += 16;
            }
            while c + 8 <= c1 {
                let mut s0 = _mm256_setzero_ps();
                for (p, cf) in coef.iter().enumerate().take(k) {
                    s0 = _mm256_fmadd_ps(*cf, _mm256_loadu_ps(bp.add(p * b_rs + c)), s0);
                }
                store(row.add(c), s0, stream);
                c += 8;
            }
            while c < c1 {
                *row.add(c) = scalar(a, i, k, b, b_rs, c);
                c += 1;
            }
        }
        if stream {
            // Non-temporal stores are weakly ordered: fence them before the task reports done.
            _mm_sfence();
        }
    }

    /// One output element of `outer`, for the unaligned head and the tail; the same
    /// summation order as the vector lanes (p ascending, fused multiply-add).
    #[inline(always)]
    unsafe fn scalar(a: &[f32], i: usize, k: usize, b: &[f32], b_rs: usize, c: usize) -> f32 {
        let mut s = 0f32;
        for p in 0..k {
            s = a[i * k + p].mul_add(*b.get_unchecked(p * b_rs + c), s);
        }
        s
    }

    /// Aligned (when streaming) store of 8 lanes.
    #[inline(always)]
    unsafe fn store(dst: *mut f32, v: __m256, stream: bool) {
        if stream {
            _mm256_stream_ps(dst, v);
        } else {
            _mm256_storeu_ps(dst, v);
        }
    }

    /// `acc[i, j] += sum_{p in p0..p1} a[i * a_rs + p] * b[j * b_cs + p]` for [`super::rowdot`].
    ///
    /// # Safety
    /// AVX2+FMA present; rows `i < m` of a and columns `j < n` of b cover `p0..p1`;
    /// `acc.len() == m * n`.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn rowdot_block(
        m: usize,
        n: usize,
        a: &[f32],
        a_rs: usize,
        b: &[f32],
        b_cs: usize,
        p0: usize,
        p1: usize,
        acc: &mut [f32],
    ) {
        let t = Tile {
            a: a.as_ptr(),
            a_rs,
            b: b.as_ptr(),
            b_cs,
            p0,
            p1,
            n,
        };
        // Two columns of b by up to five rows of a: ten accumulators, and 7 loads per 10
        // FMAs, all in registers (the sizes are constants, so the loops unroll).
        let mut j = 0;
        while j < n {
            let jb = (n - j).min(2);
            let mut i = 0;
            while i < m {
                let g = (m - i).min(5);
                match (jb, g) {
                    (2, 5) => t.run::<2, 5>(i, j, acc),
                    (2, 4) => t.run::<2, 4>(i, j, acc),
                    (2, 3) => t.run::<2, 3>(i, j, acc),
                    (2, 2) => t.run::<2, 2>(i, j, acc),
                    (2, _) => t.run::<2, 1>(i, j, acc),
                    (_, 5) => t.run::<1, 5>(i, j, acc),
                    (_, 4) => t.run::<1, 4>(i, j, acc),
                    (_, 3) => t.run::<1, 3>(i, j, acc),
                    (_, 2) => t.run::<1, 2>(i, j, acc),
                    _ => t.run::<1, 1>(i, j, acc),
                }
                i += g;
            }
            j += jb;
        }
    }

    /// Operands of one [`rowdot_block`] call.
    struct Tile {
        a: *const f32,
        a_rs: usize,
        b: *const f32,
        b_cs: usize,
        p0: usize,
        p1: usize,
        n: usize,
    }

    impl Tile {
        /// Rows `i..i+G` of a against columns `j..j+J` of b, added into `acc`.
        #[target_feature(enable = "avx2,fma")]
        #[allow(clippy::needless_range_loop)] // r and c index two arrays each
        unsafe fn run<const J: usize, const G: usize>(&self, i: usize, j: usize, acc: &mut [f32]) {
            let mut s = [[_mm256_setzero_ps(); G]; J];
            let vend = self.p0 + (self.p1 - self.p0) / 8 * 8;
            let mut p = self.p0;
            while p < vend {
                let mut bv = [_mm256_setzero_ps(); J];
                for (c, v) in bv.iter_mut().enumerate() {
                    *v = _mm256_loadu_ps(self.b.add((j + c) * self.b_cs + p));
                }
                for r in 0..G {
                    let av = _mm256_loadu_ps(self.a.add((i + r) * self.a_rs + p));
                    for c in 0..J {
                        s[c][r] = _mm256_fmadd_ps(av, bv[c], s[c][r]);
                    }
                }
                p += 8;
            }
            for c in 0..J {
                let bj = self.b.add((j + c) * self.b_cs);
                for r in 0..G {
                    let ai = self.a.add((i + r) * self.a_rs);
                    let mut t = hsum(s[c][r]);
                    for q in vend..self.p1 {
                        t += *ai.add(q) * *bj.add(q);
                    }
                    *acc.get_unchecked_mut((i + r) * self.n + j + c) += t;
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    /// f64 reference product with the same stride convention.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        m: usize,
        n: usize,
        k: usize,
        a: &[f32],
        a_rs: usize,
        a_cs: usize,
        b: &[f32],
        b_rs: usize,
        b_cs: usize,
    ) -> Vec<f64> {
        let mut out = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k)
                    .map(|p| a[i * a_rs + p * a_cs] as f64 * b[p * b_rs + j * b_cs] as f64)
                    .sum();
            }
        }
        out
    }

    fn check(got: &[f32], want: &[f64], k: usize, what: &str) {
        for (idx, (&g, &w)) in got.iter().zip(want).enumerate() {
            // Inputs are in [-1, 1]: the f32 sum of k terms is within k ulps of |terms| <= k.
            let tol = 4.0 * k as f64 * f32::EPSILON as f64;
            assert!(
                (g as f64 - w).abs() <= tol,
                "{what}: element {idx}: {g} vs {w}"
            );
        }
    }

    fn rand_vec(rng: &mut rand::rngs::StdRng, len: usize) -> Vec<f32> {
        (0..len).map(|_| rng.random_range(-1.0f32..1.0)).collect()
    }

    #[test]
    fn outer_matches_reference_over_tails_offsets_and_layouts() {
        if !has_avx2_fma() {
            eprintln!("skipped: no AVX2+FMA on this CPU");
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        // n covers: below one vector, odd tails, several column blocks, non-multiple of 8
        // rows (unaligned row starts), and sizes past the streaming threshold.
        for &(m, n, k) in &[
            (1, 1 << 18, 1),
            (3, 100_003, 16),
            (128, 4099, 10),
            (5, 1 << 19, 7),
            (8, 1 << 18, 2),
        ] {
            for transpose_a in [false, true] {
                let a = rand_vec(&mut rng, m * k);
                let (a_rs, a_cs) = if transpose_a { (1, m) } else { (k, 1) };
                // b rows padded so b_rs > n exercises the row stride.
                let b_rs = n + 5;
                let b = rand_vec(&mut rng, (k - 1) * b_rs + n);
                let mut dst = vec![f32::NAN; m * n];
                assert!(try_skinny_f32(
                    m,
                    n,
                    k,
                    &a,
                    a_rs as isize,
                    a_cs as isize,
                    &b,
                    b_rs as isize,
                    1,
                    &mut dst
                ));
                let want = reference(m, n, k, &a, a_rs, a_cs, &b, b_rs, 1);
                check(
                    &dst,
                    &want,
                    k,
                    &format!("outer {m}x{n}x{k} ta={transpose_a}"),
                );
            }
        }
    }

    #[test]
    fn rowdot_matches_reference_over_tails_and_strides() {
        if !has_avx2_fma() {
            eprintln!("skipped: no AVX2+FMA on this CPU");
            return;
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(8);
        for &(m, n, k) in &[
            (1, 1, 1 << 14),
            (10, 17, 50_001),
            (16, 3, 1 << 16),
            (9, 8, 40_000 + 7),
        ] {
            let a_rs = k + 3;
            let b_cs = k + 9;
            let a = rand_vec(&mut rng, (m - 1) * a_rs + k);
            let b = rand_vec(&mut rng, (n - 1) * b_cs + k);
            let mut dst = vec![f32::NAN; m * n];
            assert!(try_skinny_f32(
                m,
                n,
                k,
                &a,
                a_rs as isize,
                1,
                &b,
                1,
                b_cs as isize,
                &mut dst
            ));
            let want = reference(m, n, k, &a, a_rs, 1, &b, 1, b_cs);
            // Summation order differs from the reference: allow sqrt-k-ish growth generously.
            for (idx, (&g, &w)) in dst.iter().zip(&want).enumerate() {
                let tol = 1e-6 * k as f64;
                assert!(
                    (g as f64 - w).abs() <= tol,
                    "rowdot {m}x{n}x{k}: {idx}: {g} vs {w}"
                );
            }
        }
    }

    #[test]
    fn shapes_outside_the_kernels_are_declined() {
        let a = vec![1f32; 64 * 64];
        let b = vec![1f32; 64 * 64];
        let mut dst = vec![0f32; 64 * 64];
        // Square and small: gemm's job.
        assert!(!try_skinny_f32(64, 64, 64, &a, 64, 1, &b, 64, 1, &mut dst));
        assert!(dst.iter().all(|&x| x == 0.0));
    }
}
