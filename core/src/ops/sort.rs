//! sort, argsort and topk along an axis, with i64 indices. Sorting is stable; NaNs compare
//! as equal to everything (their order is unspecified). The order is found and applied on the
//! array's backend (`Storage::argsort`, `Storage::gather_along`).

use super::axis::{float_only, norm_axis, split3};
use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::ndarray::DenseData;
use crate::NDArray;

/// The gradient of gathering `[outer, k, inner]` elements at `positions` along `axis` of an
/// array of `in_shape` (a sort or topk): each element of `g` added back where it was taken
/// from. A crate-private operator, so the backward runs on whichever backend holds `g`.
fn scatter_along_grad(
    op: &'static str,
    g: &NDArray,
    positions: &NDArray,
    in_shape: &[usize],
    axis: usize,
    k: usize,
) -> Result<NDArray> {
    let gd = g.dense_data()?;
    float_only(op, gd.buf.dtype())?;
    let pd = positions.dense_data()?;
    let dims = split3(in_shape, axis);
    NDArray::from_buffer(gd.buf.scatter_add_along(dims, &pd.buf, k)?, in_shape)
}

/// The dense values of `a` and the lines along `axis` a sort works on: the axis and
/// `(outer, n, inner)` around it.
fn lines(
    a: &NDArray,
    op: &'static str,
    axis: i64,
) -> Result<(DenseData, usize, (usize, usize, usize))> {
    crate::sparse::densifying(op, &[a])?;
    let d = a.dense_data()?;
    if d.shape.is_empty() {
        return Err(Error::shape(op, "needs an array of at least 1 dimension"));
    }
    let ax = norm_axis(op, axis, d.shape.len())?;
    let dims = split3(&d.shape, ax);
    Ok((d, ax, dims))
}

/// Values and indices of the `k` first elements along `axis` in sorted order.
fn sorted(
    a: &NDArray,
    op: &'static str,
    axis: i64,
    k: Option<usize>,
    ascending: bool,
) -> Result<(NDArray, NDArray)> {
    let (d, ax, dims) = lines(a, op, axis)?;
    let k = k.unwrap_or(dims.1);
    if k > dims.1 {
        return Err(Error::arg(
            op,
            format!("k = {k} exceeds axis {ax} of shape {:?}", d.shape),
        ));
    }
    let mut oshape = d.shape.clone();
    oshape[ax] = k;
    let idx = d.buf.argsort(dims, k, ascending)?;
    let values = NDArray::from_buffer(d.buf.gather_along(dims, &idx, k)?, &oshape)?;
    let idx_arr = NDArray::from_buffer(idx, &oshape)?;
    // A detached handle: the caller may write into the returned indices in place, which
    // copies them first instead of changing what the backward scatters by.
    let positions = idx_arr.detach();
    let in_shape = d.shape.clone();
    let values = record_op(op, values, &[a], move |g| {
        Ok(vec![Some(scatter_along_grad(
            op, g, &positions, &in_shape, ax, k,
        )?)])
    });
    Ok((values, idx_arr))
}

impl NDArray {
    /// Sorted values along `axis` (stable). Differentiable (the gradient follows each value
    /// back to where it came from). Any dtype.
    pub fn sort(&self, axis: i64, ascending: bool) -> Result<NDArray> {
        if crate::autograd::is_recording() && self.requires_grad() {
            return Ok(sorted(self, "sort", axis, None, ascending)?.0);
        }
        // No gradient: sort the values themselves (no i64 position per element).
        let (d, _, dims) = lines(self, "sort", axis)?;
        NDArray::from_buffer(d.buf.sort_values(dims, ascending)?, &d.shape)
    }

    /// The i64 positions that sort `self` along `axis` (stable).
    pub fn argsort(&self, axis: i64, ascending: bool) -> Result<NDArray> {
        Ok(sorted(self, "argsort", axis, None, ascending)?.1)
    }

    /// The `k` largest (`ascending = false`, MXNet's default) or smallest values along `axis`,
    /// in order, with their i64 positions: `(values, indices)`. Values are differentiable.
    ///
    /// ```
    /// use sparrow_core::NDArray;
    /// let x = NDArray::from_vec(vec![3.0f32, 1.0, 4.0, 1.5], &[4]).unwrap();
    /// let (v, i) = x.topk(2, -1, false).unwrap();
    /// assert_eq!(v.to_vec::<f32>().unwrap(), vec![4.0, 3.0]);
    /// assert_eq!(i.to_vec::<i64>().unwrap(), vec![2, 0]);
    /// ```
    pub fn topk(&self, k: usize, axis: i64, ascending: bool) -> Result<(NDArray, NDArray)> {
        sorted(self, "topk", axis, Some(k), ascending)
    }
}
