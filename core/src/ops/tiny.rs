//! Products so small that a GEMM library's per-call setup (blocking parameters, a thread-local
//! pack buffer, microkernel dispatch) costs more than the arithmetic: the 10 x 128 x 8 layers of
//! a small-batch training step. Outputs are written once, with no zero fill first.

use crate::dtype::Float;
use crate::sparse::gather::gather_sum_row;

/// Largest `m * n * k` taken here. The gemm crate's fixed cost is ~3.5K instructions per call
/// (callgrind, 10 x 8 x 128); a gather-sum does ~3 instructions per 8 multiply-adds, so below
/// ~32K multiply-adds it is ahead.
pub(crate) const TINY_MNK: usize = 1 << 15;

/// `a (m x k) * b (k x n)` as a new row-major `m x n` vector, operands given by element strides
/// as in `gemm_into`; `None` (nothing done) when the product is too large or its layout is not
/// one of the two handled here:
/// - `b` row-major (`b_cs == 1`, rows of `n` back to back; any `a` strides): each output row is
///   one gather-sum of the `k` rows of `b` (`g W`, `g^T h` of a layer's backward);
/// - `a` row-major and `b` column-major (`a_cs == 1`, `b_rs == 1`, i.e. `x W^T` with `W`
///   row-major, a Dense layer's forward): each output element is one dot product of two
///   contiguous rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn product<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    a_rs: isize,
    a_cs: isize,
    b: &[T],
    b_rs: isize,
    b_cs: isize,
) -> Option<Vec<T>> {
    if m.saturating_mul(n).saturating_mul(k) > TINY_MNK || k == 0 || a_rs < 0 || a_cs < 0 {
        return None;
    }
    let (ars, acs) = (a_rs as usize, a_cs as usize);
    let mut out: Vec<T> = Vec::with_capacity(m * n);
    let rows = out.spare_capacity_mut()[..m * n].chunks_mut(n.max(1));
    if b_cs == 1 && b_rs == n as isize {
        let b = &b[..k * n];
        for (i, orow) in rows.enumerate() {
            let arow = i * ars;
            gather_sum_row(orow, b, k, |p| (p, a[arow + p * acs]), |_| None);
        }
    } else if a_cs == 1 && b_rs == 1 && b_cs >= 0 {
        let bcs = b_cs as usize;
        for (i, orow) in rows.enumerate() {
            let arow = &a[i * ars..i * ars + k];
            for (j, o) in orow.iter_mut().enumerate() {
                o.write(dot(arow, &b[j * bcs..j * bcs + k]));
            }
        }
    } else {
        return None;
    }
    // SAFETY: both branches wrote every element of the m rows of n (`gather_sum_row` writes its
    // whole output row); the capacity is m * n.
    unsafe { out.set_len(m * n) };
    Some(out)
}

/// `sum_p x[p] * y[p]` over two slices of equal length.
fn dot<T: Float>(x: &[T], y: &[T]) -> T {
    #[cfg(target_arch = "x86_64")]
    if let (Some(x), Some(y)) = (as_f32(x), as_f32(y)) {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: AVX2 and FMA were detected just above.
            let d = unsafe { dot_f32_avx2(x, y) };
            return T::from(d).unwrap_or_else(T::zero);
        }
    }
    // Four partial sums, as the vector path keeps several: shorter dependency chains.
    let mut acc = [T::zero(); 4];
    let (xc, yc) = (x.chunks_exact(4), y.chunks_exact(4));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    for (a, b) in xc.zip(yc) {
        for l in 0..4 {
            acc[l] = acc[l] + a[l] * b[l];
        }
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (&a, &b) in xr.iter().zip(yr) {
        s = s + a * b;
    }
    s
}

#[cfg(target_arch = "x86_64")]
fn as_f32<T: Float>(s: &[T]) -> Option<&[f32]> {
    // SAFETY: the slice is reinterpreted only when T is f32.
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
}

/// AVX2 + FMA dot product: two 8-lane accumulators, then a scalar tail.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_f32_avx2(x: &[f32], y: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let k = x.len().min(y.len());
    let (px, py) = (x.as_ptr(), y.as_ptr());
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut p = 0;
    // SAFETY (all loads): p + 16 <= k, resp. p + 8 <= k, stays inside both slices.
    while p + 16 <= k {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(px.add(p)), _mm256_loadu_ps(py.add(p)), a0);
        a1 = _mm256_fmadd_ps(
            _mm256_loadu_ps(px.add(p + 8)),
            _mm256_loadu_ps(py.add(p + 8)),
            a1,
        );
        p += 16;
    }
    if p + 8 <= k {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(px.add(p)), _mm256_loadu_ps(py.add(p)), a0);
        p += 8;
    }
    let v = _mm256_add_ps(a0, a1);
    let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    let h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    let mut s = _mm_cvtss_f32(h);
    while p < k {
        s = x[p].mul_add(y[p], s);
        p += 1;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::linalg::strides;
    use rand::rngs::Xoshiro256PlusPlus;
    use rand::{RngExt, SeedableRng};

    /// Every transpose combination of random small shapes, f32 (AVX2 path) and f64 (portable
    /// path), against a plain triple loop.
    fn check<T: Float>(to: impl Fn(f64) -> T, tol: f64) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        for _ in 0..200 {
            let (m, n, k) = (
                rng.random_range(1..20usize),
                rng.random_range(1..90usize),
                rng.random_range(1..20usize),
            );
            let (ta, tb) = (rng.random::<bool>(), rng.random::<bool>());
            let a: Vec<f64> = (0..m * k).map(|_| rng.random_range(-1.0..1.0)).collect();
            let b: Vec<f64> = (0..k * n).map(|_| rng.random_range(-1.0..1.0)).collect();
            // Stored shapes: a is (k x m) when transposed, b is (n x k) when transposed.
            let (a_rs, a_cs) = strides(if ta { m } else { k }, ta);
            let (b_rs, b_cs) = strides(if tb { k } else { n }, tb);
            let at = |i: usize, p: usize| a[(i as isize * a_rs + p as isize * a_cs) as usize];
            let bt = |p: usize, j: usize| b[(p as isize * b_rs + j as isize * b_cs) as usize];
            let (a32, b32): (Vec<T>, Vec<T>) = (
                a.iter().map(|&x| to(x)).collect(),
                b.iter().map(|&x| to(x)).collect(),
            );
            let Some(got) = product(m, n, k, &a32, a_rs, a_cs, &b32, b_rs, b_cs) else {
                // The one layout left to gemm: a transposed and b column-major.
                assert!(ta && tb, "{m}x{n}x{k} ta={ta} tb={tb} not taken");
                continue;
            };
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k).map(|p| at(i, p) * bt(p, j)).sum();
                    let g = got[i * n + j].to_f64();
                    assert!(
                        (g - want).abs() <= tol,
                        "{m}x{n}x{k} ta={ta} tb={tb} at ({i},{j}): {g} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn tiny_products_match_a_triple_loop() {
        check::<f32>(|x| x as f32, 1e-5);
        check::<f64>(|x| x, 1e-12);
    }

    #[test]
    fn large_products_are_left_to_gemm() {
        let a = vec![0f32; 64 * 64];
        assert!(product(64, 64, 64, &a, 64, 1, &a, 64, 1).is_none());
    }
}
