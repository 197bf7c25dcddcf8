//! `matmul`: NumPy-style matrix product, 2-D and batched with broadcast batch dimensions: the
//! operator validates and lays out the batch, the storage's
//! [`Storage::batched_matmul`](crate::storage::Storage::batched_matmul) computes (on the CPU
//! every matrix through `cpu::gemm::gemm_into`, the `gemm` and `matrixmultiply` crates).

use super::broadcast::{broadcast_shapes, broadcast_strides};
use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::storage::MatMul;
use crate::NDArray;

/// Batched `op(a) @ op(b)` over the last two dims, batch dims broadcast; no autograd.
fn bmm_raw(a: &NDArray, b: &NDArray, ta: bool, tb: bool) -> Result<NDArray> {
    let op = "matmul";
    crate::sparse::densifying("matmul", &[a, b])?;
    let (da, db) = (a.dense_data()?, b.dense_data()?);
    if da.shape.len() < 2 || db.shape.len() < 2 {
        return Err(Error::shape(
            op,
            format!(
                "needs operands of at least 2 dims, got {:?} and {:?}",
                da.shape, db.shape
            ),
        ));
    }
    if da.buf.dtype() != db.buf.dtype() {
        return Err(Error::dtype_mismatch(op, da.buf.dtype(), db.buf.dtype()));
    }
    let (ra, rb) = (da.shape.len() - 2, db.shape.len() - 2);
    let (ar, ac) = (da.shape[ra], da.shape[ra + 1]);
    let (br, bc) = (db.shape[rb], db.shape[rb + 1]);
    let (m, k) = if ta { (ac, ar) } else { (ar, ac) };
    let (k2, n) = if tb { (bc, br) } else { (br, bc) };
    if k != k2 {
        return Err(Error::shape(
            op,
            format!("inner dimensions differ: {:?} @ {:?}", da.shape, db.shape),
        ));
    }
    let batch = broadcast_shapes(op, &da.shape[..ra], &db.shape[..rb])?;
    let nb: usize = batch.iter().product();
    let (sa, sb) = (
        broadcast_strides(&da.shape[..ra], &batch),
        broadcast_strides(&db.shape[..rb], &batch),
    );
    // Element offsets of each batch entry's operands.
    let offsets: Vec<(usize, usize)> = (0..nb)
        .map(|mut r| {
            let (mut oa, mut ob) = (0, 0);
            for d in (0..batch.len()).rev() {
                let i = r % batch[d];
                r /= batch[d];
                oa += i * sa[d];
                ob += i * sb[d];
            }
            (oa * ar * ac, ob * br * bc)
        })
        .collect();
    let mut shape = batch.clone();
    shape.extend([m, n]);
    let mm = MatMul { m, n, k, ta, tb };
    NDArray::from_buffer(da.buf.batched_matmul(&db.buf, &mm, &offsets)?, &shape)
}

impl NDArray {
    /// NumPy `matmul`: for 2-D operands the matrix product; for N-D operands a batch of
    /// products over the last two dims with the leading (batch) dims broadcast; a 1-D operand
    /// is treated as a row (left) or column (right) vector and that dim is dropped from the
    /// result. Float only; differentiable in both operands.
    ///
    /// Two 2-D operands with a sparse one take [`NDArray::dot`]'s storage-type dispatch: a
    /// csr left operand and a dense right one give a dense product (by design) whose dense
    /// weight gets a row_sparse gradient, as `dot` does; a combination without a sparse kernel
    /// falls back to dense with the warning (an error in strict mode).
    ///
    /// ```
    /// use sparrow_core::NDArray;
    /// let a = NDArray::ones(&[4, 2, 3], sparrow_core::DType::F32).unwrap();
    /// let b = NDArray::ones(&[3, 5], sparrow_core::DType::F32).unwrap();
    /// assert_eq!(a.matmul(&b).unwrap().shape(), vec![4, 2, 5]);
    /// ```
    pub fn matmul(&self, other: &NDArray) -> Result<NDArray> {
        let (sa, sb) = (self.shape(), other.shape());
        let sparse = self.stype() != crate::SType::Dense || other.stype() != crate::SType::Dense;
        if sparse && sa.len() == 2 && sb.len() == 2 {
            return self.dot(other);
        }
        if sa.is_empty() || sb.is_empty() {
            return Err(Error::shape(
                "matmul",
                format!("operands must have at least 1 dim, got {sa:?} and {sb:?}"),
            ));
        }
        if sa.len() == 1 || sb.len() == 1 {
            let a = if sa.len() == 1 {
                self.expand_dims(0)?
            } else {
                self.clone()
            };
            let b = if sb.len() == 1 {
                other.expand_dims(-1)?
            } else {
                other.clone()
            };
            let mut r = a.matmul(&b)?;
            if sb.len() == 1 {
                r = r.squeeze(Some(&[-1]))?;
            }
            if sa.len() == 1 {
                r = r.squeeze(Some(&[-2 + (sb.len() == 1) as i64]))?;
            }
            return Ok(r);
        }
        let out = bmm_raw(self, other, false, false)?;
        let (a, b) = (self.clone(), other.clone());
        Ok(record_op("matmul", out, &[self, other], move |g| {
            let ga = super::sum_to_shape(&bmm_raw(g, &b, false, true)?, &sa)?;
            let gb = super::sum_to_shape(&bmm_raw(&a, g, true, false)?, &sb)?;
            Ok(vec![Some(ga), Some(gb)])
        }))
    }
}
