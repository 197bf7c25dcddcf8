//! Products so small that a GEMM library's per-call setup (blocking parameters, a thread-local
//! pack buffer, microkernel dispatch) costs more than the arithmetic: the 10 x 128 x 8 layers of
//! a small-batch training step.

#[cfg(target_arch = "x86_64")]
use std::mem::MaybeUninit;

use super::cast::{as_f32, as_f32_mut};
use super::gather::gather_sum_row;
use crate::dtype::Float;

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
///   contiguous rows (for f32 with AVX2, skinny.rs's register-tiled block).
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
    if b_cs == 1 && b_rs == n as isize {
        let mut out: Vec<T> = Vec::with_capacity(m * n);
        gather_rows_to(
            m,
            n,
            k,
            a,
            ars,
            acs,
            &b[..k * n],
            &mut out.spare_capacity_mut()[..m * n],
        );
        // SAFETY: `gather_rows_to` wrote all m * n values; the capacity is m * n.
        unsafe { out.set_len(m * n) };
        Some(out)
    } else if a_cs == 1 && b_rs == 1 && b_cs >= 0 {
        let mut out = vec![T::zero(); m * n];
        row_dots_to(m, n, k, a, ars, b, b_cs as usize, &mut out);
        Some(out)
    } else {
        None
    }
}

/// [`product`] written into `out` (`m * n` elements, every one overwritten): the same kernel
/// choice and kernels, so the same bits, without a vector of its own (a planned graph's
/// buffer). False, writing nothing, where `product` gives `None`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn product_to<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    a_rs: isize,
    a_cs: isize,
    b: &[T],
    b_rs: isize,
    b_cs: isize,
    out: &mut [T],
) -> bool {
    if m.saturating_mul(n).saturating_mul(k) > TINY_MNK
        || k == 0
        || a_rs < 0
        || a_cs < 0
        || out.len() != m * n
    {
        return false;
    }
    let (ars, acs) = (a_rs as usize, a_cs as usize);
    if b_cs == 1 && b_rs == n as isize {
        gather_rows_to(
            m,
            n,
            k,
            a,
            ars,
            acs,
            &b[..k * n],
            super::elementwise::as_slots(out),
        );
        true
    } else if a_cs == 1 && b_rs == 1 && b_cs >= 0 {
        out.fill(T::zero());
        row_dots_to(m, n, k, a, ars, b, b_cs as usize, out);
        true
    } else {
        false
    }
}

/// Row `i` of the output is the gather-sum `sum_p a[i, p] * b[p, :]` over the `k` rows of `b`
/// (`k x n`, row-major), written once without a zero fill.
#[allow(clippy::too_many_arguments)]
fn gather_rows_to<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    ars: usize,
    acs: usize,
    b: &[T],
    out: &mut [MaybeUninit<T>],
) {
    debug_assert_eq!(out.len(), m * n);
    #[cfg(target_arch = "x86_64")]
    if let (Some(a32), Some(b32)) = (as_f32(a), as_f32(b)) {
        if n.is_multiple_of(8)
            && super::elementwise::has_avx2_fma()
            && fits(m, k, a.len(), ars, acs)
        {
            let o = out.as_mut_ptr().cast::<f32>();
            // SAFETY: AVX2 and FMA were detected; every index of `a` is below its length
            // (`fits`), `b` holds k * n values (the caller's slice), `o` has room for m * n,
            // and T is f32 (`as_f32` succeeded), so the cast only renames the element type.
            unsafe { gather_rows_f32_avx2(m, n, k, a32, ars, acs, b32, o) };
            return;
        }
    }
    for (i, orow) in out[..m * n].chunks_mut(n.max(1)).enumerate() {
        let arow = i * ars;
        gather_sum_row(orow, b, k, |p| (p, a[arow + p * acs]), |_| None);
    }
}

/// Whether `a[i * ars + p * acs]` is inside `a` for every `i < m`, `p < k`.
fn fits(m: usize, k: usize, len: usize, ars: usize, acs: usize) -> bool {
    m == 0
        || k == 0
        || (m - 1)
            .checked_mul(ars)
            .zip((k - 1).checked_mul(acs))
            .and_then(|(x, y)| x.checked_add(y))
            .is_some_and(|last| last < len)
}

/// [`gather_rows`] for f32 rows whose length `n` is a multiple of 8, in one AVX2 loop nest:
/// per 64 (then 8) output columns, `acc += a[i, p] * b[p, :]` over `p` in order, as
/// [`gather_sum_row`] accumulates (bit-identical). The backward of a small layer (`g W`,
/// `g^T h`: 10 x 128 x 8 and 8 x 128 x 10 in the tutorial) spent about as much in
/// `gather_sum_row`'s per-row call, closure and bounds checks as in its multiply-adds.
///
/// # Safety
/// AVX2 and FMA are available; `a[i * ars + p * acs]` is in bounds for `i < m`, `p < k`;
/// `b.len() >= k * n`; `out` has room for `m * n` values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn gather_rows_f32_avx2(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    ars: usize,
    acs: usize,
    b: &[f32],
    out: *mut f32,
) {
    use crate::cpu::gather::sum_rows_f32_avx2;
    debug_assert!(b.len() >= k * n && n.is_multiple_of(8));
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    for i in 0..m {
        // SAFETY: indices as in this function's contract: row i of `a` has k entries at stride
        // acs, each row p of `b` holds n floats, output row i has room for n.
        unsafe {
            let arow = ap.add(i * ars);
            sum_rows_f32_avx2(
                out.add(i * n),
                n,
                k,
                |p| (bp.add(p * n), *arow.add(p * acs)),
                |_| {},
            )
        };
    }
}

/// `out[i, j] = dot(a[i, :], b[j, :])` for row-major `a` (row stride `ars`) and `b` stored as
/// `n` rows of `k` (row stride `bcs`).
/// Row dots into `out` (`m * n` zeros on entry: the AVX2 kernel adds into them).
#[allow(clippy::too_many_arguments)]
fn row_dots_to<T: Float>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    ars: usize,
    b: &[T],
    bcs: usize,
    out: &mut [T],
) {
    #[cfg(target_arch = "x86_64")]
    if let (Some(a), Some(b), Some(o)) = (as_f32(a), as_f32(b), as_f32_mut(out)) {
        // f32 with AVX2: skinny.rs's register-tiled row dots, adding into the zeros.
        if super::skinny::rowdot_serial(m, n, k, a, ars, b, bcs, o) {
            return;
        }
    }
    for (i, orow) in out.chunks_mut(n.max(1)).enumerate() {
        let arow = &a[i * ars..i * ars + k];
        for (j, o) in orow.iter_mut().enumerate() {
            *o = dot(arow, &b[j * bcs..j * bcs + k]);
        }
    }
}

/// `sum_p x[p] * y[p]` over two slices of equal length (the portable path: f64, or no AVX2).
fn dot<T: Float>(x: &[T], y: &[T]) -> T {
    // Four partial sums: shorter dependency chains.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::gemm::strides;
    use rand::rngs::Xoshiro256PlusPlus;
    use rand::{RngExt, SeedableRng};

    /// Every transpose combination of random small shapes, f32 (AVX2 path) and f64 (portable
    /// path), against a plain triple loop.
    fn check<T: Float>(to: impl Fn(f64) -> T, tol: f64) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        // The tutorial's layer shapes (n a multiple of 8: the AVX2 row kernels, 64-wide blocks
        // and 8-wide tails) in every transpose combination, then random shapes.
        let fixed = [
            (10, 128, 8),
            (8, 128, 10),
            (10, 8, 1),
            (1, 8, 10),
            (3, 72, 5),
        ];
        let cases = fixed
            .iter()
            .flat_map(|&s| [(s, false, false), (s, true, false), (s, false, true)])
            .collect::<Vec<_>>();
        for c in 0..cases.len() + 200 {
            let ((m, n, k), ta, tb) = cases.get(c).copied().unwrap_or_else(|| {
                (
                    (
                        rng.random_range(1..20usize),
                        rng.random_range(1..90usize),
                        rng.random_range(1..20usize),
                    ),
                    rng.random::<bool>(),
                    rng.random::<bool>(),
                )
            });
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
