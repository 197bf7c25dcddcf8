//! Matrix products through the `gemm` crate (multi-threaded, AVX2/AVX-512 kernels).

use crate::autograd::record_op;
use crate::dtype::Float;
use crate::error::{Error, Result};
use crate::float_dispatch;
use crate::NDArray;

/// `c = a(m x k, strides) * b(k x n, strides)` into a fresh row-major `m x n` buffer.
/// Strides are (row stride, column stride) in elements, so transposes cost nothing.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_into<T: Float>(
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
    #[cfg(target_arch = "x86_64")]
    if let (Some(a32), Some(b32), Some(d32)) = (as_f32(a), as_f32(b), as_f32_mut(dst)) {
        if super::skinny::try_skinny_f32(m, n, k, a32, a_rs, a_cs, b32, b_rs, b_cs, d32) {
            return;
        }
    }
    let threads = if m * n * k >= 64 * 64 * 64 {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the pointers come from slices whose lengths cover every (row, col) addressed by
    // the given dims and strides (checked by the callers' shape validation); dst is m*n
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
            threads,
        );
    }
}

/// `s` as `&[f32]` when `T` is `f32` (the skinny kernels are f32-only).
#[cfg(target_arch = "x86_64")]
fn as_f32<T: Float>(s: &[T]) -> Option<&[f32]> {
    (std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>())
        // SAFETY: T is f32 (checked just above), so the layout is identical.
        .then(|| unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<f32>(), s.len()) })
}

/// Mutable counterpart of [`as_f32`].
#[cfg(target_arch = "x86_64")]
fn as_f32_mut<T: Float>(s: &mut [T]) -> Option<&mut [f32]> {
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
    let (da, db) = (a.dense_data()?, b.dense_data()?);
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
        // gemm overwrites every element (it never reads dst), so a recycled buffer serves:
        // large weight gradients (X^T G) then reuse the previous step's memory.
        let mut out = crate::recycle::overwritable_vec::<T>(m * n);
        gemm_into(m, n, k, da.buf.as_slice::<T>().unwrap(), a_rs, a_cs, db.buf.as_slice::<T>().unwrap(), b_rs, b_cs, &mut out);
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
        let (a, b) = (self.clone(), other.clone());
        // Decided when the graph is built: a data batch (no gradient attached, not computed
        // by a recorded op) gets no gradient, which in a Dense layer on a large input skips a
        // whole product as big as the forward one.
        let (need_a, need_b) = (self.requires_grad(), other.requires_grad());
        Ok(record_op("dot", out, &[self, other], move |g| {
            // C = op(A) op(B).  dA = g op(B)^T (transposed back if A was), dB likewise.
            let ga = if !need_a {
                None
            } else if transpose_a {
                Some(dot_dense(&b, g, transpose_b, true)?)
            } else {
                Some(dot_dense(g, &b, false, !transpose_b)?)
            };
            let gb = if !need_b {
                None
            } else if transpose_b {
                Some(dot_dense(g, &a, true, transpose_a)?)
            } else {
                Some(dot_dense(&a, g, !transpose_a, false)?)
            };
            Ok(vec![ga, gb])
        }))
    }
}
