//! A packed f32 GEMM (x86_64, AVX2+FMA) whose packing buffers belong to the calling thread and
//! are kept between calls.
//!
//! Both GEMM crates `gemm.rs` used for f32 allocate their packing buffers inside every call
//! (`matrixmultiply` its packed panels, `gemm` a `MemBuffer` and a flag vector) and offer no
//! way to hand them a workspace, so a planned training step, which reuses every buffer of its
//! own, still allocated once per product. This kernel packs into two vectors per thread that
//! grow to the largest block seen and are then reused: after the first product of a size a
//! thread makes no allocation.
//!
//! The layout is the usual one of blocked GEMMs: the `k x n` operand is packed `KC x NC` at a
//! time into panels `NR` columns wide, the `m x k` operand `MC x KC` at a time into panels `MR`
//! rows tall, and a `MR x NR` register tile (12 AVX accumulators) sums one panel pair. The
//! panel of B in use (`KC * NR` floats, 16 KB) stays in L1 while the block of A (`MC * KC`, 96
//! KB) stays in L2. Packing reads any strides, so transposed operands cost only the packing.

use std::arch::x86_64::*;
use std::cell::RefCell;

/// Rows of the register tile.
const MR: usize = 6;
/// Columns of the register tile (two 8-lane vectors).
const NR: usize = 16;
/// Depth of one packed block.
const KC: usize = 256;
/// Rows of one packed block of A (a multiple of `MR`).
const MC: usize = 96;
/// Columns of one packed block of B (a multiple of `NR`).
const NC: usize = 2048;

thread_local! {
    /// This thread's packing buffers (A block, B block), grown on demand and kept.
    static PACKS: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// Whether this CPU runs [`sgemm`] (AVX2 and FMA).
#[inline]
pub(crate) fn available() -> bool {
    super::elementwise::has_avx2_fma()
}

/// `c = a(m x k) * b(k x n) (+ c when accumulate)`, strides in elements (row, col); `c` is
/// row-major with row stride `c_rs`. Runs on the calling thread.
///
/// # Safety
/// The CPU must have AVX2 and FMA ([`available`]); `a`, `b` must be valid for reads and `c`
/// for reads and writes of every element the dims and strides address; `c` must not alias `a`
/// or `b`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn sgemm(
    m: usize,
    k: usize,
    n: usize,
    a: *const f32,
    a_rs: isize,
    a_cs: isize,
    b: *const f32,
    b_rs: isize,
    b_cs: isize,
    c: *mut f32,
    c_rs: isize,
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    let a_len = MC.min(m).next_multiple_of(MR) * KC.min(k);
    let b_len = NC.min(n).next_multiple_of(NR) * KC.min(k);
    let run = |ap: &mut Vec<f32>, bp: &mut Vec<f32>| {
        if ap.len() < a_len {
            ap.resize(a_len, 0.0);
        }
        if bp.len() < b_len {
            bp.resize(b_len, 0.0);
        }
        let ops = Operands {
            a,
            a_rs,
            a_cs,
            b,
            b_rs,
            b_cs,
            c,
            c_rs,
        };
        // SAFETY: forwarded from the caller (features, operand extents, no aliasing); the
        // packing buffers hold a_len and b_len floats, the largest blocks `blocked` packs.
        unsafe { blocked(m, k, n, &ops, ap, bp, accumulate) }
    };
    // A product nested inside another on this thread (not done today, but a rayon job stolen
    // while waiting could be one) takes buffers of its own rather than panic on the borrow.
    let nested = PACKS.with(|p| match p.try_borrow_mut() {
        Ok(mut packs) => {
            let (ap, bp) = &mut *packs;
            run(ap, bp);
            false
        }
        Err(_) => true,
    });
    if nested {
        run(&mut Vec::new(), &mut Vec::new());
    }
}

/// The raw operands of one product.
struct Operands {
    a: *const f32,
    a_rs: isize,
    a_cs: isize,
    b: *const f32,
    b_rs: isize,
    b_cs: isize,
    c: *mut f32,
    c_rs: isize,
}

/// The blocked loops: B blocks, A blocks, then register tiles.
///
/// # Safety
/// As [`sgemm`]; `apack` holds at least `MC.min(m)` rounded up to `MR`, times `KC.min(k)`
/// floats, `bpack` `NC.min(n)` rounded up to `NR`, times `KC.min(k)`.
#[target_feature(enable = "avx2,fma")]
unsafe fn blocked(
    m: usize,
    k: usize,
    n: usize,
    o: &Operands,
    apack: &mut [f32],
    bpack: &mut [f32],
    accumulate: bool,
) {
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                // SAFETY: row i of the m x n output (caller's contract).
                unsafe { std::ptr::write_bytes(o.c.offset(i as isize * o.c_rs), 0, n) };
            }
        }
        return;
    }
    let mut jc = 0;
    while jc < n {
        let nc = NC.min(n - jc);
        let mut pc = 0;
        while pc < k {
            let kc = KC.min(k - pc);
            // SAFETY: the block lies inside b (caller's contract); bpack is large enough.
            unsafe { pack_b(o, pc, jc, kc, nc, bpack) };
            let acc = accumulate || pc > 0;
            let mut ic = 0;
            while ic < m {
                let mc = MC.min(m - ic);
                // SAFETY: the block lies inside a; apack is large enough.
                unsafe { pack_a(o, ic, pc, mc, kc, apack) };
                let mut jr = 0;
                while jr < nc {
                    let nr = NR.min(nc - jr);
                    let bp = bpack.as_ptr().wrapping_add(jr * kc);
                    let mut ir = 0;
                    while ir < mc {
                        let mr = MR.min(mc - ir);
                        let ap = apack.as_ptr().wrapping_add(ir * kc);
                        let cp =
                            o.c.wrapping_offset((ic + ir) as isize * o.c_rs + (jc + jr) as isize);
                        // SAFETY: the panels hold kc * MR and kc * NR packed floats (zero past
                        // mr, nr); the tile's mr x nr elements lie inside c.
                        unsafe { tile(kc, ap, bp, cp, o.c_rs, mr, nr, acc) };
                        ir += MR;
                    }
                    jr += NR;
                }
                ic += MC;
            }
            pc += KC;
        }
        jc += NC;
    }
}

/// Packs `b[pc..pc + kc, jc..jc + nc]` into panels of `NR` columns, each `kc x NR` row-major,
/// the last one zero-padded.
///
/// # Safety
/// The block lies inside `b`; `dst` holds `nc` rounded up to `NR`, times `kc` floats.
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_b(o: &Operands, pc: usize, jc: usize, kc: usize, nc: usize, dst: &mut [f32]) {
    let panels = nc.div_ceil(NR);
    for q in 0..panels {
        let j0 = jc + q * NR;
        let w = NR.min(jc + nc - j0);
        let out = &mut dst[q * kc * NR..(q + 1) * kc * NR];
        if o.b_rs == 1 && o.b_cs != 1 {
            // A transposed B: each column is contiguous along k, so read it in one pass.
            if w < NR {
                out.fill(0.0);
            }
            for j in 0..w {
                let col =
                    o.b.wrapping_offset(pc as isize + (j0 + j) as isize * o.b_cs);
                for p in 0..kc {
                    // SAFETY: row pc + p of column j0 + j lies inside b.
                    out[p * NR + j] = unsafe { *col.add(p) };
                }
            }
            continue;
        }
        for p in 0..kc {
            let row =
                o.b.wrapping_offset((pc + p) as isize * o.b_rs + j0 as isize * o.b_cs);
            let line = &mut out[p * NR..(p + 1) * NR];
            if w == NR && o.b_cs == 1 {
                // SAFETY: NR contiguous floats of row pc + p from column j0 lie inside b.
                unsafe {
                    let lo = _mm256_loadu_ps(row);
                    let hi = _mm256_loadu_ps(row.add(8));
                    _mm256_storeu_ps(line.as_mut_ptr(), lo);
                    _mm256_storeu_ps(line.as_mut_ptr().add(8), hi);
                }
            } else {
                for (j, x) in line.iter_mut().enumerate() {
                    // SAFETY: column j0 + j of row pc + p lies inside b for j < w.
                    *x = if j < w {
                        unsafe { *row.wrapping_offset(j as isize * o.b_cs) }
                    } else {
                        0.0
                    };
                }
            }
        }
    }
}

/// Packs `a[ic..ic + mc, pc..pc + kc]` into panels of `MR` rows, each stored column by column
/// (`kc x MR`), the last one zero-padded.
///
/// # Safety
/// The block lies inside `a`; `dst` holds `mc` rounded up to `MR`, times `kc` floats.
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_a(o: &Operands, ic: usize, pc: usize, mc: usize, kc: usize, dst: &mut [f32]) {
    let panels = mc.div_ceil(MR);
    for q in 0..panels {
        let i0 = ic + q * MR;
        let h = MR.min(ic + mc - i0);
        let out = &mut dst[q * kc * MR..(q + 1) * kc * MR];
        if h < MR {
            out.fill(0.0);
        }
        if o.a_rs == 1 && o.a_cs != 1 {
            // A transposed A: the panel's rows are contiguous within each column.
            for p in 0..kc {
                let col =
                    o.a.wrapping_offset(i0 as isize + (pc + p) as isize * o.a_cs);
                for i in 0..h {
                    // SAFETY: row i0 + i of column pc + p lies inside a.
                    out[p * MR + i] = unsafe { *col.add(i) };
                }
            }
            continue;
        }
        for i in 0..h {
            let row =
                o.a.wrapping_offset((i0 + i) as isize * o.a_rs + pc as isize * o.a_cs);
            if o.a_cs == 1 {
                for p in 0..kc {
                    // SAFETY: column pc + p of row i0 + i lies inside a.
                    out[p * MR + i] = unsafe { *row.add(p) };
                }
            } else {
                for p in 0..kc {
                    // SAFETY: as above, at stride a_cs.
                    out[p * MR + i] = unsafe { *row.wrapping_offset(p as isize * o.a_cs) };
                }
            }
        }
    }
}

/// One `MR x NR` register tile: sums `kc` rank-1 updates of a packed A panel and a packed B
/// panel, then writes (or adds, when `acc`) its `mr x nr` corner into `c`.
///
/// # Safety
/// `a` holds `kc * MR` and `b` `kc * NR` floats; rows `0..mr`, columns `0..nr` of `c` (row
/// stride `c_rs`) are valid for reads and writes.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    c_rs: isize,
    mr: usize,
    nr: usize,
    acc: bool,
) {
    let mut s = [[_mm256_setzero_ps(); 2]; MR];
    for p in 0..kc {
        // SAFETY: p < kc, inside both panels.
        unsafe {
            let b0 = _mm256_loadu_ps(b.add(p * NR));
            let b1 = _mm256_loadu_ps(b.add(p * NR + 8));
            let ap = a.add(p * MR);
            for (i, row) in s.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*ap.add(i));
                row[0] = _mm256_fmadd_ps(x, b0, row[0]);
                row[1] = _mm256_fmadd_ps(x, b1, row[1]);
            }
        }
    }
    if mr == MR && nr == NR {
        for (i, row) in s.iter().enumerate() {
            let cp = c.wrapping_offset(i as isize * c_rs);
            // SAFETY: the whole tile lies inside c.
            unsafe {
                let (mut lo, mut hi) = (row[0], row[1]);
                if acc {
                    lo = _mm256_add_ps(lo, _mm256_loadu_ps(cp));
                    hi = _mm256_add_ps(hi, _mm256_loadu_ps(cp.add(8)));
                }
                _mm256_storeu_ps(cp, lo);
                _mm256_storeu_ps(cp.add(8), hi);
            }
        }
        return;
    }
    let mut t = [0f32; MR * NR];
    for (i, row) in s.iter().enumerate() {
        // SAFETY: t holds MR rows of NR floats.
        unsafe {
            _mm256_storeu_ps(t.as_mut_ptr().add(i * NR), row[0]);
            _mm256_storeu_ps(t.as_mut_ptr().add(i * NR + 8), row[1]);
        }
    }
    for i in 0..mr {
        let cp = c.wrapping_offset(i as isize * c_rs);
        for j in 0..nr {
            // SAFETY: i < mr, j < nr: inside c.
            unsafe {
                let v = t[i * NR + j];
                *cp.add(j) = if acc { *cp.add(j) + v } else { v };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference product in f64.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        m: usize,
        k: usize,
        n: usize,
        a: &[f32],
        (a_rs, a_cs): (usize, usize),
        b: &[f32],
        (b_rs, b_cs): (usize, usize),
    ) -> Vec<f64> {
        let mut c = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k)
                    .map(|p| a[i * a_rs + p * a_cs] as f64 * b[p * b_rs + j * b_cs] as f64)
                    .sum();
            }
        }
        c
    }

    /// Every shape class (partial tiles, several K, M and N blocks, transposed operands,
    /// accumulate, a row stride wider than n) against the f64 reference.
    #[test]
    fn matches_reference() {
        if !available() {
            println!("SKIPPED packed::matches_reference: no AVX2+FMA");
            return;
        }
        let mut seed = 7u64;
        let mut rnd = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        let shapes = [
            (1, 1, 1),
            (5, 3, 7),
            (6, 16, 16),
            (13, 300, 35),
            (97, 257, 33),
            (200, 600, 2100),
        ];
        for &(m, k, n) in &shapes {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let a: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
                let b: Vec<f32> = (0..k * n).map(|_| rnd()).collect();
                let sa = if ta { (1, m) } else { (k, 1) };
                let sb = if tb { (1, k) } else { (n, 1) };
                let want = naive(m, k, n, &a, sa, &b, sb);
                for acc in [false, true] {
                    let ldc = n + 3;
                    let init: Vec<f32> = (0..m * ldc).map(|_| rnd()).collect();
                    let mut c = init.clone();
                    // SAFETY: available() checked; the slices cover the dims and strides.
                    unsafe {
                        sgemm(
                            m,
                            k,
                            n,
                            a.as_ptr(),
                            sa.0 as isize,
                            sa.1 as isize,
                            b.as_ptr(),
                            sb.0 as isize,
                            sb.1 as isize,
                            c.as_mut_ptr(),
                            ldc as isize,
                            acc,
                        )
                    };
                    for i in 0..m {
                        for j in 0..ldc {
                            let got = c[i * ldc + j] as f64;
                            let base = init[i * ldc + j] as f64;
                            let expect = if j >= n {
                                base
                            } else if acc {
                                base + want[i * n + j]
                            } else {
                                want[i * n + j]
                            };
                            let tol = 1e-5 * (k as f64).sqrt() * (1.0 + expect.abs());
                            assert!(
                                (got - expect).abs() <= tol,
                                "{m}x{k}x{n} ta={ta} tb={tb} acc={acc} at ({i},{j}): {got} vs \
                                 {expect}"
                            );
                        }
                    }
                }
            }
        }
    }
}
