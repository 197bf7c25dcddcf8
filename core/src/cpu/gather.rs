//! Gather-sum of rows, `out = sum_q coef_q * src[row_q]`: the one inner loop of the sparse
//! products. A csr row of `dot(X, W)` picks rows of `W`; a column group of `dot(X^T, G)` (and of
//! the embedding backward) picks rows of `G`. The output row is written exactly once, so callers
//! can hand in uninitialised memory instead of zero-filling it first.

use std::mem::MaybeUninit;

use super::rows::{prefetch_bytes, prefetch_row};
use crate::dtype::Float;

/// How many entries ahead the gather prefetches its source rows: enough to cover a DRAM miss
/// for 512-byte rows of a matrix far larger than the caches, few enough not to evict them.
pub(crate) const PREFETCH_AHEAD: usize = 4;

/// Write `out[c] = sum_{q < count} a_q * src[r_q * n + c]` where `entry(q) = (r_q, a_q)`, for
/// every `c < n` (`out.len() == n`); `count == 0` writes zeros. `ahead(q)` names the source row
/// needed [`PREFETCH_AHEAD`] entries after `q` (possibly for the next output row), whose load is
/// started early: the rows sit at random places of a matrix far larger than the caches.
///
/// Panics only if a row lies outside `src`, which the callers' validated indices rule out.
#[inline]
pub(crate) fn gather_sum_row<T: Float>(
    out: &mut [MaybeUninit<T>],
    src: &[T],
    count: usize,
    entry: impl Fn(usize) -> (usize, T),
    ahead: impl Fn(usize) -> Option<usize>,
) {
    let n = out.len();
    #[cfg(target_arch = "x86_64")]
    {
        use std::any::TypeId;
        if TypeId::of::<T>() == TypeId::of::<f32>() && super::elementwise::has_avx2_fma() {
            // SAFETY: T is f32 (checked above), so the casts only rename the element type; the
            // CPU supports AVX2 and FMA (checked above).
            unsafe {
                let out = &mut *(out as *mut [MaybeUninit<T>] as *mut [MaybeUninit<f32>]);
                let src = &*(src as *const [T] as *const [f32]);
                let entry = |q| {
                    let (r, a) = entry(q);
                    (r, *(&a as *const T as *const f32))
                };
                gather_sum_row_f32_avx2(out, src, count, &entry, &ahead);
            }
            return;
        }
    }
    gather_sum_row_generic(out, src, n, count, entry, ahead);
}

/// Portable version: the first entry initialises the row (scaled copy), the others accumulate.
fn gather_sum_row_generic<T: Float>(
    out: &mut [MaybeUninit<T>],
    src: &[T],
    n: usize,
    count: usize,
    entry: impl Fn(usize) -> (usize, T),
    ahead: impl Fn(usize) -> Option<usize>,
) {
    let prefetch = |q| {
        if let Some(r) = ahead(q) {
            prefetch_row(&src[r * n..(r + 1) * n]);
        }
    };
    if count == 0 {
        out.iter_mut().for_each(|o| {
            o.write(T::zero());
        });
        return;
    }
    prefetch(0);
    let (r, a) = entry(0);
    for (o, &v) in out.iter_mut().zip(&src[r * n..(r + 1) * n]) {
        o.write(a * v);
    }
    // SAFETY: every element of `out` was written just above.
    let out = unsafe { &mut *(out as *mut [MaybeUninit<T>] as *mut [T]) };
    for q in 1..count {
        prefetch(q);
        let (r, a) = entry(q);
        super::rows::axpy(out, a, &src[r * n..(r + 1) * n]);
    }
}

/// The loop nest shared by the f32 gather-sum kernels: `out[c] = sum_q a_q * x_q[c]` for
/// `c < n` over the `count` entries `(x_q, a_q) = entry(q)`, in 64-column blocks (8 ymm
/// accumulators) then 8-column blocks, adding the entries in order (so every caller is
/// bit-identical to the others and to the portable path's order). `first(q)` runs once per
/// entry during the first block (callers prefetch there).
///
/// # Safety
/// AVX2 and FMA are available, `n` is a multiple of 8, `out` holds `n` floats and each
/// `entry(q).0` points at `n` readable floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) unsafe fn sum_rows_f32_avx2(
    out: *mut f32,
    n: usize,
    count: usize,
    entry: impl Fn(usize) -> (*const f32, f32),
    first: impl Fn(usize),
) {
    use std::arch::x86_64::*;
    debug_assert!(n.is_multiple_of(8));
    let mut c0 = 0;
    // SAFETY (all raw accesses): c0 + 64 (or + 8) <= n, inside `out` and every entry's row.
    while c0 + 64 <= n {
        let mut acc = [_mm256_setzero_ps(); 8];
        for q in 0..count {
            if c0 == 0 {
                first(q);
            }
            let (x, a) = entry(q);
            let (x, va) = (unsafe { x.add(c0) }, _mm256_set1_ps(a));
            for (j, acc) in acc.iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps(va, unsafe { _mm256_loadu_ps(x.add(8 * j)) }, *acc);
            }
        }
        for (j, acc) in acc.iter().enumerate() {
            unsafe { _mm256_storeu_ps(out.add(c0 + 8 * j), *acc) };
        }
        c0 += 64;
    }
    while c0 < n {
        let mut acc = _mm256_setzero_ps();
        for q in 0..count {
            if c0 == 0 {
                first(q);
            }
            let (x, a) = entry(q);
            acc = _mm256_fmadd_ps(
                _mm256_set1_ps(a),
                unsafe { _mm256_loadu_ps(x.add(c0)) },
                acc,
            );
        }
        unsafe { _mm256_storeu_ps(out.add(c0), acc) };
        c0 += 8;
    }
}

/// AVX2 + FMA for f32: 64 output columns stay in 8 ymm registers while all the entries are
/// added, then are stored once. Compared with an SSE axpy per entry (32 loads, adds and stores
/// of the output row for a 128-wide row) this is ~3x fewer instructions per entry, which keeps
/// more of the random source-row loads inside the out-of-order window. The loops are
/// [`sum_rows_f32_avx2`]'s; this adds the per-entry row check and the scalar tail of a width
/// that is not a multiple of 8. [`segment_rows_f32`] calls it for its multi-entry groups.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn gather_sum_row_f32_avx2(
    out: &mut [MaybeUninit<f32>],
    src: &[f32],
    count: usize,
    entry: &impl Fn(usize) -> (usize, f32),
    ahead: &impl Fn(usize) -> Option<usize>,
) {
    let n = out.len();
    if n == 0 {
        return;
    }
    let dst = out.as_mut_ptr() as *mut f32;
    let rows = src.len() / n;
    let base = src.as_ptr();
    // One range check per entry, then raw pointers: slicing each 64-column block of each entry
    // (two bounds checks and overflow checks per slice) was about half of this kernel's
    // instructions on the tutorial's 10-entry rows.
    let row_at = |r: usize| -> *const f32 {
        assert!(r < rows, "gather row {r} outside {rows} rows");
        // SAFETY: r < rows, so the row's n floats lie inside `src`.
        unsafe { base.add(r * n) }
    };
    // Source rows are prefetched whole during the first column block only; later blocks of the
    // same entries find them in L1/L2.
    let prefetch = |q| {
        if let Some(r) = ahead(q) {
            prefetch_bytes(row_at(r) as *const u8, n * 4);
        }
    };
    let n8 = n - n % 8;
    // SAFETY: `row_at` checked each entry's row (an assert, in release builds too), whose
    // n >= n8 floats lie inside `src`; the output holds n >= n8 floats.
    unsafe {
        sum_rows_f32_avx2(
            dst,
            n8,
            count,
            |q| {
                let (r, a) = entry(q);
                (row_at(r), a)
            },
            prefetch,
        )
    };
    let c0 = n8;
    for (c, o) in out.iter_mut().enumerate().skip(c0) {
        let mut acc = 0f32;
        for q in 0..count {
            let (r, a) = entry(q);
            acc = a.mul_add(src[r * n + c], acc);
        }
        o.write(acc);
    }
}

/// A whole small segment sum in one AVX2 loop, for f32 rows whose length is a multiple of 8:
/// group `g` writes `out[g] = sum_q a_q * src[r_q]` over the entries
/// `order[starts[g]..starts[g + 1]]` (row `srow[e]`, coefficient `w[e]`, 1 without weights).
/// The row_sparse weight gradient of a small batch (csr^T G, ~100 groups of mostly one entry
/// each over a head gradient in L1) spent more in the per-group call of [`gather_sum_row`]
/// (closures, bounds, register saves, zeroed accumulators) than in its 16 multiply-adds; here
/// a single-entry group is a scaled copy and the others run [`gather_sum_row_f32_avx2`], with
/// no prefetching. All indices are checked in one pass first, so the loop itself runs on raw
/// pointers. (Calling [`sum_rows_f32_avx2`] for those groups directly, without the row check,
/// measured 0.4K instructions more per tutorial step: the bigger loop body cost the common
/// single-entry path registers.)
///
/// Returns false, writing nothing, when the CPU lacks AVX2/FMA, `row_len` is not a multiple
/// of 8, `out` does not hold one row per group, or an index is out of range (`starts` not
/// ascending inside `order`, an entry past `srow` or `w`, a row past `src`); the caller then
/// takes the portable path, which reports nothing either: callers pass validated indices.
pub(crate) fn segment_rows_f32(
    out: &mut [MaybeUninit<f32>],
    src: &[f32],
    row_len: usize,
    starts: &[usize],
    order: &[usize],
    srow: &[usize],
    w: Option<&[f32]>,
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let groups = starts.len().saturating_sub(1);
        if avx2_rows_fit(out.len(), groups, row_len)
            && segment_indices_valid(src.len() / row_len, starts, order, srow, w.map(|w| w.len()))
        {
            // SAFETY: AVX2 and FMA were detected; the output has `groups` rows of row_len and
            // every index the loop reads was checked just above (this function is the
            // guarantor: it trusts no caller's validation).
            unsafe { segment_rows_f32_avx2(out, src, row_len, starts, order, srow, w) };
            return true;
        }
    }
    let _ = (out, src, row_len, starts, order, srow, w);
    false
}

/// The shape conditions of the f32 AVX2 row kernels: the CPU has AVX2 and FMA, rows are a
/// non-zero multiple of 8 floats long, and the output holds exactly `rows` of them. The
/// product is checked: a wrapped `rows * row_len` could equal a short output's length, and
/// the kernels write `rows` whole rows.
#[cfg(target_arch = "x86_64")]
fn avx2_rows_fit(out_len: usize, rows: usize, row_len: usize) -> bool {
    row_len > 0
        && row_len.is_multiple_of(8)
        && rows.checked_mul(row_len) == Some(out_len)
        && super::elementwise::has_avx2_fma()
}

/// Whether [`segment_rows_f32_avx2`] may index without checks: `starts` ascends within
/// `order`, and every entry `e` of the groups has `e < srow.len()`, `e < w_len` (when
/// weighted) and `srow[e] < rows`.
#[cfg(target_arch = "x86_64")]
fn segment_indices_valid(
    rows: usize,
    starts: &[usize],
    order: &[usize],
    srow: &[usize],
    w_len: Option<usize>,
) -> bool {
    let (Some(&first), Some(&last)) = (starts.first(), starts.last()) else {
        return true;
    };
    let limit = w_len.map_or(srow.len(), |l| l.min(srow.len()));
    last <= order.len()
        && starts.windows(2).all(|p| p[0] <= p[1])
        && order[first..last]
            .iter()
            .all(|&e| e < limit && srow[e] < rows)
}

/// `d[c] = a * x[c]` for `c < n` (a multiple of 8), four vectors per loop step (at one vector
/// per step the loop counter was a third of the copy's instructions).
///
/// # Safety
/// AVX2 is available and `d`, `x` hold `n` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn scaled_copy(d: *mut f32, x: *const f32, a: std::arch::x86_64::__m256, n: usize) {
    let mut c = 0;
    // SAFETY: each call covers c..c + 32 (or + 8) <= n.
    while c + 32 <= n {
        unsafe { scaled_copy_n::<32>(d.add(c), x.add(c), a) };
        c += 32;
    }
    while c < n {
        unsafe { scaled_copy_n::<8>(d.add(c), x.add(c), a) };
        c += 8;
    }
}

/// [`scaled_copy`] for a length known at compile time (a multiple of 8): straight-line code.
///
/// # Safety
/// AVX2 is available and `d`, `x` hold `N` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn scaled_copy_n<const N: usize>(d: *mut f32, x: *const f32, a: std::arch::x86_64::__m256) {
    use std::arch::x86_64::*;
    for c in (0..N).step_by(8) {
        // SAFETY: c + 8 <= N.
        unsafe { _mm256_storeu_ps(d.add(c), _mm256_mul_ps(a, _mm256_loadu_ps(x.add(c)))) };
    }
}

/// # Safety
/// AVX2 and FMA are available, `row_len > 0`, `out.len() == (starts.len() - 1) * row_len`,
/// and [`segment_indices_valid`] holds for `src.len() / row_len` rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn segment_rows_f32_avx2(
    out: &mut [MaybeUninit<f32>],
    src: &[f32],
    row_len: usize,
    starts: &[usize],
    order: &[usize],
    srow: &[usize],
    w: Option<&[f32]>,
) {
    use std::arch::x86_64::*;
    let n = row_len;
    let (sp, op, rp) = (src.as_ptr(), order.as_ptr(), srow.as_ptr());
    // SAFETY (every raw read below): the indices were validated by the caller (contract),
    // `segment_rows_f32`, the one caller, through `segment_indices_valid`.
    let coef = |e: usize| w.map_or(1.0, |w| unsafe { *w.as_ptr().add(e) });
    for (g, dst) in out.chunks_exact_mut(n).enumerate() {
        let (s, e_end) = unsafe { (*starts.get_unchecked(g), *starts.get_unchecked(g + 1)) };
        if e_end - s == 1 {
            // One entry: a scaled copy.
            let e = unsafe { *op.add(s) };
            let r = unsafe { *rp.add(e) };
            let (a, x) = (_mm256_set1_ps(coef(e)), unsafe { sp.add(r * n) });
            let d = dst.as_mut_ptr() as *mut f32;
            // SAFETY: `dst` and the source row hold n floats (contract).
            unsafe {
                if n == 128 {
                    // The common embedding width, fully unrolled: the loop control of the
                    // general copy was a quarter of its instructions.
                    scaled_copy_n::<128>(d, x, a)
                } else {
                    scaled_copy(d, x, a, n)
                }
            }
        } else {
            let entry = |q: usize| {
                let e = unsafe { *op.add(s + q) };
                (unsafe { *rp.add(e) }, coef(e))
            };
            unsafe { gather_sum_row_f32_avx2(dst, src, e_end - s, &entry, &|_| None) };
        }
    }
}

/// The whole csr x dense product of a small batch in one AVX2 loop nest, for f32 rows whose
/// length `n` is a multiple of 8: output row `i` is `sum_e vals[e] * w[idx[e]]` over the
/// entries `indptr[i]..indptr[i + 1]`, accumulated in entry order exactly as
/// [`gather_sum_row`] does (bit-identical), with the source rows of the entries
/// [`PREFETCH_AHEAD`] later prefetched (across row ends). The tutorial's forward product
/// (10 rows of ~10 entries over a 512 MB weight) spent about a third of its instructions in
/// the per-row call of [`gather_sum_row`]: its closures, bounds checks, prologue and the
/// second column block re-reading each entry through them.
///
/// Returns false, writing nothing, when the CPU lacks AVX2/FMA, `n` is 0 or not a multiple
/// of 8, `out` does not hold `indptr.len() - 1` rows of `n`, or an index is out of range
/// (`indptr` negative, descending or past `idx`/`vals`, a column past `w`'s rows); the
/// caller then takes the general path.
pub(crate) fn csr_rows_f32(
    out: &mut [MaybeUninit<f32>],
    w: &[f32],
    n: usize,
    indptr: &[i64],
    idx: &[i64],
    vals: &[f32],
) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let m = indptr.len().saturating_sub(1);
        if avx2_rows_fit(out.len(), m, n) && csr_indices_valid(w.len() / n, indptr, idx, vals.len())
        {
            // SAFETY: AVX2 and FMA were detected; `out` has m rows of n; every index the loop
            // reads was checked just above (this function is the guarantor: it trusts no
            // caller's validation, not even the csr constructors').
            unsafe { csr_rows_f32_avx2(out, w, n, indptr, idx, vals) };
            return true;
        }
    }
    let _ = (out, w, n, indptr, idx, vals);
    false
}

/// Whether [`csr_rows_f32_avx2`] may index without checks: `indptr` is not empty (the kernel
/// takes `indptr.len() - 1` rows), non-negative and ascending, ends inside `idx` and `vals`
/// (`nvals` long), and every column in its range is below `rows`. This function is the
/// kernel's guarantor: the csr constructors check the same, but the kernel does not rely on
/// them (an empty `indptr` passed both once, and `len - 1` wrapped to `usize::MAX`).
#[cfg(target_arch = "x86_64")]
fn csr_indices_valid(rows: usize, indptr: &[i64], idx: &[i64], nvals: usize) -> bool {
    let (Some(&first), Some(&last)) = (indptr.first(), indptr.last()) else {
        return false;
    };
    first >= 0
        && last as u64 <= idx.len().min(nvals) as u64
        && indptr.windows(2).all(|p| p[0] <= p[1])
        && idx[first as usize..last as usize]
            .iter()
            .all(|&j| (j as u64) < rows as u64)
}

/// # Safety
/// AVX2 and FMA are available; `n > 0`; `out.len() == (indptr.len() - 1) * n`; and
/// [`csr_indices_valid`] holds for `w.len() / n` rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn csr_rows_f32_avx2(
    out: &mut [MaybeUninit<f32>],
    w: &[f32],
    n: usize,
    indptr: &[i64],
    idx: &[i64],
    vals: &[f32],
) {
    let m = indptr.len() - 1;
    let (wp, ip, vp) = (w.as_ptr(), idx.as_ptr(), vals.as_ptr());
    let dst = out.as_mut_ptr() as *mut f32;
    // SAFETY (every raw access below): entries lie in indptr[0]..indptr[m] inside idx and
    // vals, their columns are rows of `w` (n floats each), and output row i holds n floats:
    // the contract, guaranteed by `csr_rows_f32` (the one caller) through `avx2_rows_fit` and
    // `csr_indices_valid`, never by the csr constructors alone.
    let end = unsafe { *indptr.get_unchecked(m) } as usize;
    let row = |e: usize| unsafe { wp.add(*ip.add(e) as usize * n) };
    let prefetch = |e: usize| {
        if e < end {
            prefetch_bytes(row(e) as *const u8, n * 4);
        }
    };
    let start = unsafe { *indptr.get_unchecked(0) } as usize;
    for e in start..(start + PREFETCH_AHEAD).min(end) {
        prefetch(e);
    }
    for i in 0..m {
        let (s, t) = unsafe {
            (
                *indptr.get_unchecked(i) as usize,
                *indptr.get_unchecked(i + 1) as usize,
            )
        };
        // SAFETY: output row i holds n floats; entries s..t are checked (contract).
        unsafe {
            sum_rows_f32_avx2(
                dst.add(i * n),
                n,
                t - s,
                |q| (row(s + q), *vp.add(s + q)),
                |q| prefetch(s + q + PREFETCH_AHEAD),
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's own guard refuses parts that would take it out of bounds, whatever the
    /// constructors let through: an empty `indptr` (the row count `len - 1` wrapped to
    /// `usize::MAX`: a segfault), a descending one, an end past the entries, a column past the
    /// weight's rows. Refused means the caller's bounds-checked path runs instead.
    #[test]
    fn csr_rows_f32_refuses_parts_it_cannot_index() {
        let w = vec![1f32; 4 * 8];
        let mut out = vec![MaybeUninit::<f32>::uninit(); 8];
        assert!(!csr_rows_f32(&mut [], &w, 8, &[], &[], &[]));
        assert!(!csr_rows_f32(&mut out, &w, 8, &[0, 2], &[0], &[1.0]));
        assert!(!csr_rows_f32(&mut out, &w, 8, &[0, 1], &[4], &[1.0]));
        assert!(!csr_rows_f32(&mut out, &w, 8, &[0, 1], &[-1], &[1.0]));
        let mut two = vec![MaybeUninit::<f32>::uninit(); 16];
        assert!(!csr_rows_f32(&mut two, &w, 8, &[0, 1, 0], &[0], &[1.0]));
        // Valid parts are taken (on a CPU with AVX2/FMA) and give the row of `w`.
        if csr_rows_f32(&mut out, &w, 8, &[0, 1], &[3], &[2.0]) {
            // SAFETY: the kernel wrote the whole row (it returned true).
            let row: Vec<f32> = out.iter().map(|x| unsafe { x.assume_init() }).collect();
            assert_eq!(row, vec![2.0; 8]);
        }
    }
}
