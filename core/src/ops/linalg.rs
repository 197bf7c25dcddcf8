//! Matrix products. Every dense product goes through `gemm_into`, which sends products with a
//! tiny m or k to the memory-bound kernels of `skinny.rs` (f32, x86_64 AVX2) and otherwise picks
//! a GEMM crate by size: `gemm` for tiny products (its small-matrix path has the least call overhead),
//! `matrixmultiply` for everything larger (its AVX2/FMA kernels are faster than gemm 0.19's on
//! this class of machine), split over rayon's threads for large ones.

use crate::autograd::attach_node;
use crate::dtype::Float;
use crate::error::{Error, Result};
use crate::float_dispatch;
use crate::{DenseData, NDArray};

/// Products with `m * n * k` below this go to the `gemm` crate, single-threaded: for
/// 10x128 by 128x8 it takes ~0.6-0.9 us against ~1.3-1.5 us for matrixmultiply (packing and
/// setup dominate); at 64^3 the two tie and above it matrixmultiply is faster (128^3: 60 vs
/// 85 us).
const SMALL_MNK: usize = 64 * 64 * 64;

/// Products with `m * n * k` at or above this (about 8 MFLOP) are split over rayon's threads.
/// Below it, waking the second thread costs more than it saves on this 2-core VM: 64x128x64
/// went from 18 to 53 us and 128^3 from 61 to 91 us when split; 64x784x128 (6.4M): 206 -> 167 us.
pub(crate) const PARALLEL_MNK: usize = 1 << 22;

/// Blocks of a split product are multiples of this many rows (or columns), the register-tile
/// height of matrixmultiply's AVX kernels, so only the last block has a partial tile.
const SPLIT_ALIGN: usize = 8;

/// The per-dtype entry points of the GEMM crates `gemm_into` uses (f32 and f64).
pub(crate) trait GemmScalar: Float {
    /// `c = a * b` through matrixmultiply, single-threaded; strides in elements (row, col).
    ///
    /// # Safety
    /// `a`, `b` must be valid for reads and `c` for writes of every element the dims and strides
    /// address; `c` must not alias `a` or `b` and its strides must not alias its own elements.
    #[allow(clippy::too_many_arguments)]
    unsafe fn mm_gemm(
        m: usize,
        k: usize,
        n: usize,
        a: *const Self,
        a_rs: isize,
        a_cs: isize,
        b: *const Self,
        b_rs: isize,
        b_cs: isize,
        c: *mut Self,
        c_rs: isize,
    );
}

/// `GemmScalar` for a dtype through the matrixmultiply entry point of that dtype.
macro_rules! gemm_scalar {
    ($t:ty, $mm:path) => {
        impl GemmScalar for $t {
            unsafe fn mm_gemm(
                m: usize,
                k: usize,
                n: usize,
                a: *const $t,
                a_rs: isize,
                a_cs: isize,
                b: *const $t,
                b_rs: isize,
                b_cs: isize,
                c: *mut $t,
                c_rs: isize,
            ) {
                // SAFETY: forwarded from the caller's contract; beta = 0 means c is only written.
                unsafe { $mm(m, k, n, 1.0, a, a_rs, a_cs, b, b_rs, b_cs, 0.0, c, c_rs, 1) }
            }
        }
    };
}
gemm_scalar!(f32, matrixmultiply::sgemm);
gemm_scalar!(f64, matrixmultiply::dgemm);

/// A raw output pointer that rayon tasks may carry; each task writes a disjoint set of
/// elements through it (here and in the skinny kernels).
#[derive(Clone, Copy)]
pub(super) struct SendPtr<T>(pub(super) *mut T);
// SAFETY: every user has its tasks write disjoint elements, and its parallel loop or scope ends
// before the borrow of the buffer the pointer came from does.
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above; tasks only copy the pointer out.
unsafe impl<T: Send> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the whole `Send` wrapper, not its field).
    pub(super) fn get(self) -> *mut T {
        self.0
    }
}

/// `c = a(m x k, strides) * b(k x n, strides)` into a row-major `m x n` buffer, overwriting
/// every element (dst is never read). Strides are (row stride, column stride) in elements, so
/// transposes cost nothing. The caller has checked that the slices cover the dims and strides.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_into<T: GemmScalar>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    a_rs: isize,
    a_cs: isize,
    b: &[T],
    b_rs: isize,
    b_cs: isize,
    dst: &mut [T],
) {
    debug_assert_eq!(dst.len(), m * n);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        dst.iter_mut()
            .for_each(|x| *x = <T as num_traits::Zero>::zero());
        return;
    }
    // Products with a tiny m or k (a Dense layer on a wide batch) are memory-bound; both GEMM
    // crates run them far below bandwidth (see skinny.rs).
    #[cfg(target_arch = "x86_64")]
    if let (Some(a32), Some(b32), Some(d32)) = (as_f32(a), as_f32(b), as_f32_mut(dst)) {
        if super::skinny::try_skinny_f32(m, n, k, a32, a_rs, a_cs, b32, b_rs, b_cs, d32) {
            return;
        }
    }
    let mnk = m.saturating_mul(n).saturating_mul(k);
    if mnk < SMALL_MNK {
        // SAFETY: the pointers come from slices whose lengths cover every (row, col) addressed
        // by the given dims and strides (checked by the callers' shape validation); dst is m*n
        // row-major and does not alias a or b.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                dst.as_mut_ptr(),
                1,
                n as isize,
                false,
                a.as_ptr(),
                a_cs,
                a_rs,
                b.as_ptr(),
                b_cs,
                b_rs,
                <T as num_traits::Zero>::zero(),
                <T as num_traits::One>::one(),
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
        return;
    }
    let threads = rayon::current_num_threads();
    if threads <= 1 || mnk < PARALLEL_MNK {
        // SAFETY: as above (slices cover dims and strides; dst is m*n row-major, no aliasing).
        unsafe {
            T::mm_gemm(
                m,
                k,
                n,
                a.as_ptr(),
                a_rs,
                a_cs,
                b.as_ptr(),
                b_rs,
                b_cs,
                dst.as_mut_ptr(),
                n as isize,
            )
        };
        return;
    }
    // One block of the output per thread, along the longer side: each block packs the whole
    // other operand once, so splitting the longer side repacks the smaller one.
    let split_rows = m >= n;
    let len = if split_rows { m } else { n };
    let block = len.div_ceil(threads).next_multiple_of(SPLIT_ALIGN);
    let c = SendPtr(dst.as_mut_ptr());
    rayon::scope(|s| {
        for start in (0..len).step_by(block) {
            let size = block.min(len - start);
            s.spawn(move |_| {
                let (ap, bp) = (a.as_ptr(), b.as_ptr());
                // SAFETY: block `start..start + size` of rows (or columns) lies inside the
                // m x n output and inside a's rows (or b's columns), so every offset pointer
                // stays in its slice; blocks are disjoint, so no two tasks write the same
                // element, and the scope ends while dst is still mutably borrowed here.
                unsafe {
                    if split_rows {
                        let a_blk = ap.offset(start as isize * a_rs);
                        let c_blk = c.get().add(start * n);
                        T::mm_gemm(
                            size, k, n, a_blk, a_rs, a_cs, bp, b_rs, b_cs, c_blk, n as isize,
                        );
                    } else {
                        let b_blk = bp.offset(start as isize * b_cs);
                        let c_blk = c.get().add(start);
                        T::mm_gemm(
                            m, k, size, ap, a_rs, a_cs, b_blk, b_rs, b_cs, c_blk, n as isize,
                        );
                    }
                }
            });
        }
    });
}

/// `s` as `&[f32]` when `T` is `f32` (the skinny and small sparse kernels are f32-only).
pub(crate) fn as_f32<T: Float>(s: &[T]) -> Option<&[f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        // SAFETY: T is f32 (checked just above), so the layout is identical.
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
}

/// Mutable counterpart of [`as_f32`].
#[cfg(target_arch = "x86_64")]
pub(super) fn as_f32_mut<T: Float>(s: &mut [T]) -> Option<&mut [f32]> {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        // SAFETY: T is f32 (checked just above), so the layout is identical.
        Some(unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<f32>(), s.len()) })
    } else {
        None
    }
}

/// (row stride, column stride) in elements of a row-major matrix with `cols` columns, read
/// as its transpose when `transposed`: transposes cost nothing in `gemm_into`.
pub(crate) fn strides(cols: usize, transposed: bool) -> (isize, isize) {
    if transposed {
        (1, cols as isize)
    } else {
        (cols as isize, 1)
    }
}

/// Dense 2-D product with optional transposes, no autograd.
pub(crate) fn dot_dense(a: &NDArray, b: &NDArray, ta: bool, tb: bool) -> Result<NDArray> {
    a.with_dense2(b, |da, db| dot_dense_data(da, db, ta, tb))
}

fn dot_dense_data(da: &DenseData, db: &DenseData, ta: bool, tb: bool) -> Result<NDArray> {
    if da.shape.len() != 2 || db.shape.len() != 2 {
        return Err(Error::shape(
            "dot",
            format!("needs 2-D operands, got {:?} and {:?}", da.shape, db.shape),
        ));
    }
    if da.buf.dtype() != db.buf.dtype() {
        return Err(Error::dtype_mismatch("dot", da.buf.dtype(), db.buf.dtype()));
    }
    let (ar, ac) = (da.shape[0], da.shape[1]);
    let (br, bc) = (db.shape[0], db.shape[1]);
    let (m, k) = if ta { (ac, ar) } else { (ar, ac) };
    let (k2, n) = if tb { (bc, br) } else { (br, bc) };
    if k != k2 {
        return Err(Error::shape(
            "dot",
            format!(
                "inner dimensions differ: {:?}{} x {:?}{}",
                da.shape,
                if ta { "^T" } else { "" },
                db.shape,
                if tb { "^T" } else { "" }
            ),
        ));
    }
    let (a_rs, a_cs) = strides(ac, ta);
    let (b_rs, b_cs) = strides(bc, tb);
    Ok(float_dispatch!(da.buf.dtype(), "dot", T => {
        let (av, bv) = (da.buf.as_slice::<T>().unwrap(), db.buf.as_slice::<T>().unwrap());
        let out = match super::tiny::product(m, n, k, av, a_rs, a_cs, bv, b_rs, b_cs) {
            Some(out) => out,
            None => {
                // gemm overwrites every element (it never reads dst), so a recycled buffer
                // serves: large weight gradients (X^T G) then reuse the previous step's memory.
                let mut out = crate::recycle::overwritable_vec::<T>(m * n);
                gemm_into(m, n, k, av, a_rs, a_cs, bv, b_rs, b_cs, &mut out);
                out
            }
        };
        NDArray::from_vec(out, &[m, n])?
    }))
}

impl NDArray {
    /// Matrix product of 2-D arrays (`dot(a, b)`), dispatching on storage types: a csr left
    /// operand uses the sparse kernel.
    pub fn dot(&self, other: &NDArray) -> Result<NDArray> {
        self.dot_t(other, false, false)
    }

    /// `op(a) . op(b)` with `op` = transpose when the flag is set (MXNet's transpose_a/b).
    pub fn dot_t(&self, other: &NDArray, transpose_a: bool, transpose_b: bool) -> Result<NDArray> {
        if let Some(out) = crate::sparse::dispatch_dot(self, other, transpose_a, transpose_b)? {
            return Ok(out);
        }
        let out = dot_dense(self, other, transpose_a, transpose_b)?;
        if !crate::autograd::is_recording() {
            return Ok(out);
        }
        // Decided when the graph is built: a data batch (no gradient attached, not computed
        // by a recorded op) gets no gradient, which in a Dense layer on a large input skips a
        // whole product as big as the forward one.
        let (need_a, need_b) = (self.requires_grad(), other.requires_grad());
        if !need_a && !need_b {
            return Ok(out);
        }
        // Each operand is kept only for the gradient that reads it: dA needs B, dB needs A.
        let a = need_b.then(|| self.clone());
        let b = need_a.then(|| other.clone());
        Ok(attach_node("dot", out, &[self, other], move |g| {
            // C = op(A) op(B).  dA = g op(B)^T (transposed back if A was), dB likewise.
            let ga = match &b {
                None => None,
                Some(b) if transpose_a => Some(dot_dense(b, g, transpose_b, true)?),
                Some(b) => Some(dot_dense(g, b, false, !transpose_b)?),
            };
            let gb = match &a {
                None => None,
                Some(a) if transpose_b => Some(dot_dense(g, a, true, transpose_a)?),
                Some(a) => Some(dot_dense(a, g, !transpose_a, false)?),
            };
            Ok(vec![ga, gb])
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::Xoshiro256PlusPlus;
    use rand::{RngExt, SeedableRng};

    /// Stored operand of `rows x cols` (as used in the product), laid out row-major or, when
    /// `transposed`, as its transpose; returns (data, row stride, column stride).
    fn operand<T: GemmScalar>(
        rng: &mut Xoshiro256PlusPlus,
        rows: usize,
        cols: usize,
        transposed: bool,
    ) -> (Vec<T>, isize, isize) {
        let data = (0..rows * cols)
            .map(|_| <T as num_traits::NumCast>::from(rng.random_range(-1.0f64..1.0)).unwrap())
            .collect();
        let stored_cols = if transposed { rows } else { cols };
        let (rs, cs) = strides(stored_cols, transposed);
        (data, rs, cs)
    }

    /// Checks `gemm_into` against a plain triple loop accumulated in f64.
    fn check<T: GemmScalar>(m: usize, n: usize, k: usize, ta: bool, tb: bool, seed: u64, tol: f64) {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let (a, a_rs, a_cs) = operand::<T>(&mut rng, m, k, ta);
        let (b, b_rs, b_cs) = operand::<T>(&mut rng, k, n, tb);
        // Garbage in dst: gemm_into must overwrite every element.
        let mut dst = vec![<T as num_traits::NumCast>::from(7.5).unwrap(); m * n];
        gemm_into(m, n, k, &a, a_rs, a_cs, &b, b_rs, b_cs, &mut dst);
        for i in 0..m {
            for j in 0..n {
                let mut want = 0.0f64;
                for p in 0..k {
                    let x = a[(i as isize * a_rs + p as isize * a_cs) as usize];
                    let y = b[(p as isize * b_rs + j as isize * b_cs) as usize];
                    want += num_traits::ToPrimitive::to_f64(&x).unwrap()
                        * num_traits::ToPrimitive::to_f64(&y).unwrap();
                }
                let got = num_traits::ToPrimitive::to_f64(&dst[i * n + j]).unwrap();
                // Each term is below 1 in magnitude, so the error grows at most like k.
                assert!(
                    (got - want).abs() <= tol * (k.max(1) as f64),
                    "{m}x{k}x{n} ta={ta} tb={tb}: c[{i},{j}] = {got}, want {want}"
                );
            }
        }
    }

    /// Shapes for every path of `gemm_into`: k = 0, the small gemm path, the boundary, the
    /// single-threaded matrixmultiply path, and split products along rows (m >= n) and columns
    /// (m < n) with blocks that are not multiples of the split alignment (tails).
    const SHAPES: &[(usize, usize, usize)] = &[
        (3, 4, 0),
        (1, 1, 1),
        (3, 5, 7),
        (10, 8, 128),
        (63, 64, 65),
        (64, 64, 64),
        (65, 63, 67),
        (129, 127, 300),
        (301, 17, 1000),
        (9, 1001, 600),
        (1, 4099, 1024),
        (4099, 1, 1024),
    ];

    fn check_all(tol32: f64, tol64: f64) {
        for (s, &(m, n, k)) in SHAPES.iter().enumerate() {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                check::<f32>(m, n, k, ta, tb, s as u64, tol32);
                check::<f64>(m, n, k, ta, tb, 100 + s as u64, tol64);
            }
        }
    }

    #[test]
    fn gemm_into_matches_reference_on_default_pool() {
        check_all(1e-6, 1e-14);
    }

    #[test]
    fn gemm_into_matches_reference_with_one_and_three_threads() {
        for threads in [1, 3] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| check_all(1e-6, 1e-14));
        }
    }
}
