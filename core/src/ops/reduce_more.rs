//! Reductions beyond sum/mean: max, min, prod, norm (L1/L2), argmax, argmin, and the integer
//! sum used by `sum` on integer arrays.
//!
//! The operators validate and record; the folds run on the array's backend
//! (`Storage::reduce`, `Storage::arg_reduce`), which for the CPU
//! reduces one axis at a time over the `[outer, n, inner]` view (`crate::cpu::reduce`).

use super::axis::{norm_axes, norm_axis, reduced_shape, split3};
use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::storage::{ArgReduceOp, ReduceOp};
use crate::NDArray;

/// A value reduction (`max`, `min`, `prod`, `norm`) and its backward, written with operators.
fn reduce_values(
    a: &NDArray,
    r: ReduceOp,
    axes: Option<&[i64]>,
    keepdims: bool,
) -> Result<NDArray> {
    let op = r.name();
    crate::sparse::densifying(op, &[a])?;
    let d = a.dense_data()?;
    let ax = norm_axes(op, axes, d.shape.len())?;
    if matches!(r, ReduceOp::Max | ReduceOp::Min) && ax.iter().any(|&i| d.shape[i] == 0) {
        return Err(Error::shape(
            op,
            format!("cannot reduce an empty axis of shape {:?}", d.shape),
        ));
    }
    let out_shape = reduced_shape(&d.shape, &ax, keepdims);
    if !d.buf.dtype().is_float() && !matches!(r, ReduceOp::Max | ReduceOp::Min) {
        return Err(Error::dtype(
            op,
            format!("needs a float array, got {}", d.buf.dtype().name()),
        ));
    }
    let out = NDArray::from_buffer(d.buf.reduce(&d.shape, &ax, r)?, &out_shape)?;
    let (x, y) = (a.clone(), out.detach());
    let (in_shape, kshape) = (d.shape.clone(), reduced_shape(&d.shape, &ax, true));
    let ax_i: Vec<i64> = ax.iter().map(|&i| i as i64).collect();
    // Reduced over axes other than the first: a row_sparse head gradient gives a row_sparse
    // gradient over its rows.
    let row_local = in_shape.len() >= 2 && !ax.contains(&0);
    Ok(record_op(op, out, &[a], move |g| {
        if row_local {
            let f = |xr: &NDArray| reduce_values(xr, r, Some(&ax_i), keepdims);
            if let Some(gx) = crate::sparse::row_local_grad(g, &x, f)? {
                return Ok(vec![Some(gx)]);
            }
        }
        let gk = g.reshape(&kshape)?.broadcast_to(&in_shape)?;
        let yk = y.reshape(&kshape)?.broadcast_to(&in_shape)?;
        let local = match r {
            ReduceOp::Max | ReduceOp::Min => {
                // Ties share the gradient evenly.
                let mask = x.equal(&yk)?;
                let cnt = mask.sum(Some(&ax_i), true)?.broadcast_to(&in_shape)?;
                mask.div(&cnt)?
            }
            ReduceOp::L1 => x.sign()?,
            ReduceOp::L2 => {
                // x / ||x||, taken as 0 where the norm is 0.
                let safe = yk.maximum_scalar(f64::MIN_POSITIVE)?;
                x.div(&safe)?.mul(&yk.greater_scalar(0.0)?)?
            }
            ReduceOp::Prod => prod_grad(&x, &ax_i, &in_shape)?,
            // `sum` records its own node; were it routed here, each element's factor is 1.
            ReduceOp::Sum => return Ok(vec![Some(gk)]),
        };
        Ok(vec![Some(gk.mul(&local)?)])
    }))
}

/// d prod / d x_i = product of the other elements, exact when some elements are zero.
fn prod_grad(x: &NDArray, ax: &[i64], shape: &[usize]) -> Result<NDArray> {
    let is_zero = x.equal_scalar(0.0)?;
    let x_nz = NDArray::where_(&is_zero, &x.ones_like(), x)?;
    let p_nz = x_nz.prod(Some(ax), true)?.broadcast_to(shape)?;
    let zc = is_zero.sum(Some(ax), true)?.broadcast_to(shape)?;
    let zeros = x.zeros_like();
    // No zero in the group: prod / x. Exactly one zero: the zero gets the product of the rest.
    let nonzero_part = NDArray::where_(&zc.equal_scalar(0.0)?, &p_nz.div(&x_nz)?, &zeros)?;
    let zero_part = NDArray::where_(&zc.equal_scalar(1.0)?, &p_nz, &zeros)?;
    NDArray::where_(&is_zero, &zero_part, &nonzero_part)
}

impl NDArray {
    /// Maximum over `axes` (`None`: all). Any dtype; differentiable for floats (ties share).
    pub fn max(&self, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
        reduce_values(self, ReduceOp::Max, axes, keepdims)
    }
    /// Minimum over `axes` (`None`: all). Any dtype; differentiable for floats (ties share).
    pub fn min(&self, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
        reduce_values(self, ReduceOp::Min, axes, keepdims)
    }
    /// Product over `axes` (`None`: all). Float only; differentiable (exact with zeros).
    pub fn prod(&self, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
        reduce_values(self, ReduceOp::Prod, axes, keepdims)
    }
    /// `ord`-norm (1 or 2) over `axes` (`None`: all elements, i.e. the Frobenius norm for
    /// `ord = 2`). Float only; differentiable (the L2 gradient at a zero norm is 0).
    pub fn norm(&self, ord: u32, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
        let r = match ord {
            1 => ReduceOp::L1,
            2 => ReduceOp::L2,
            o => return Err(Error::arg("norm", format!("ord must be 1 or 2, got {o}"))),
        };
        reduce_values(self, r, axes, keepdims)
    }

    /// Index of the maximum along `axis` (`None`: of the flattened array), as i64; the first
    /// occurrence wins. Any dtype.
    pub fn argmax(&self, axis: Option<i64>, keepdims: bool) -> Result<NDArray> {
        arg_best(self, ArgReduceOp::Max, axis, keepdims)
    }
    /// Index of the minimum along `axis` (`None`: of the flattened array), as i64.
    pub fn argmin(&self, axis: Option<i64>, keepdims: bool) -> Result<NDArray> {
        arg_best(self, ArgReduceOp::Min, axis, keepdims)
    }
}

/// argmax / argmin along `axis` (`None`: of the flattened array), as i64. Not recorded.
fn arg_best(a: &NDArray, which: ArgReduceOp, axis: Option<i64>, keepdims: bool) -> Result<NDArray> {
    let op = match which {
        ArgReduceOp::Max => "argmax",
        ArgReduceOp::Min => "argmin",
    };
    crate::sparse::densifying(op, &[a])?;
    let d = a.dense_data()?;
    let (dims, out_shape) = match axis {
        None => (
            (1, d.buf.len(), 1),
            if keepdims {
                vec![1; d.shape.len()]
            } else {
                vec![]
            },
        ),
        Some(ax) => {
            let ax = norm_axis(op, ax, d.shape.len())?;
            (
                split3(&d.shape, ax),
                reduced_shape(&d.shape, &[ax], keepdims),
            )
        }
    };
    if dims.1 == 0 {
        return Err(Error::shape(
            op,
            format!("empty axis in shape {:?}", d.shape),
        ));
    }
    NDArray::from_buffer(d.buf.arg_reduce(dims, which)?, &out_shape)
}

/// Sum of an integer array over `axes` into i64 (exact; u8/i32/i64 all accumulate in i64, so
/// the sum of a 2^31-element u8 array cannot overflow). Not differentiable.
pub(crate) fn sum_int(a: &NDArray, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
    crate::sparse::densifying("sum", &[a])?;
    let d = a.dense_data()?;
    if d.buf.dtype().is_float() {
        return Err(Error::dtype("sum", "sum_int needs an integer array"));
    }
    let ax = norm_axes("sum", axes, d.shape.len())?;
    let out_shape = reduced_shape(&d.shape, &ax, keepdims);
    NDArray::from_buffer(d.buf.reduce(&d.shape, &ax, ReduceOp::Sum)?, &out_shape)
}
