//! Reductions of sparse arrays: sum / mean of csr along axis 0, 1 or all (through the `sum`
//! dispatch hook), `square_sum` of row_sparse (MXNet's `_square_sum`) and `norm`.

use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::storage::{SquareSumAxis, StoredReduce};
use crate::{ArrayData, NDArray, RowSparseData, SType};

/// Which axis a 2-D reduction runs over: `Some(0)`, `Some(1)` or all (`None`).
fn norm_axis(op: &'static str, axes: Option<&[i64]>, ndim: usize) -> Result<Option<Option<usize>>> {
    let Some(axes) = axes else {
        return Ok(Some(None));
    };
    let mut ax: Vec<usize> = Vec::new();
    for &a in axes {
        let n = if a < 0 { a + ndim as i64 } else { a };
        if n < 0 || n as usize >= ndim {
            return Err(Error::index(
                op,
                format!("axis {a} out of range for {ndim} dimensions"),
            ));
        }
        ax.push(n as usize);
    }
    ax.sort_unstable();
    ax.dedup();
    Ok(match ax.as_slice() {
        [] => None,
        [a] => Some(Some(*a)),
        _ if ax.len() == ndim => Some(None),
        _ => None,
    })
}

/// Sum of a csr array along `axes` (dense result); `Ok(None)` for other storage types or axes.
pub(crate) fn dispatch_sum(
    a: &NDArray,
    axes: Option<&[i64]>,
    keepdims: bool,
) -> Result<Option<NDArray>> {
    let c = match &*a.read() {
        ArrayData::Csr(c) => c.clone(),
        _ => return Ok(None),
    };
    let Some(axis) = norm_axis("sum", axes, 2)? else {
        return Ok(None);
    };
    let [m, n] = c.shape;
    let (shape_kd, shape) = match axis {
        Some(0) => (vec![1, n], vec![n]),
        Some(_) => (vec![m, 1], vec![m]),
        None => (vec![1, 1], vec![]),
    };
    let sums = c
        .data
        .reduce_stored(c.sparse_layout(), StoredReduce::Sum(axis))?;
    let out = NDArray::from_buffer(sums, if keepdims { &shape_kd } else { &shape })?;
    Ok(Some(record_op("sum_csr", out, &[a], move |g| {
        Ok(vec![Some(
            g.tostype(SType::Dense)?
                .reshape(&shape_kd)?
                .broadcast_to(&[m, n])?,
        )])
    })))
}

/// Sum of squares (MXNet's `_square_sum`) over `axis` (`None`: all). For a row_sparse input
/// along axis 1 with `keepdims` the result is row_sparse `[rows, 1]` over the stored rows;
/// otherwise dense. Other storage types compute `square().sum()`. Differentiable; the gradient
/// of a row_sparse input is row_sparse.
pub fn square_sum(a: &NDArray, axis: Option<i64>, keepdims: bool) -> Result<NDArray> {
    let r = match &*a.read() {
        ArrayData::RowSparse(r) if r.shape.len() == 2 => r.clone(),
        _ => {
            let axes = axis.map(|x| vec![x]);
            return a.square()?.sum(axes.as_deref(), keepdims);
        }
    };
    let axes = axis.map(|x| vec![x]);
    let ax = norm_axis("square_sum", axes.as_deref(), 2)?.unwrap_or(None);
    let [m, n] = [r.shape[0], r.shape[1]];
    let (which, shape): (SquareSumAxis, &[usize]) = match (ax, keepdims) {
        (Some(1), true) => (SquareSumAxis::StoredRows, &[m, 1]),
        (Some(1), false) => (SquareSumAxis::Rows, &[m]),
        (Some(_), true) => (SquareSumAxis::Cols, &[1, n]),
        (Some(_), false) => (SquareSumAxis::Cols, &[n]),
        (None, true) => (SquareSumAxis::All, &[1, 1]),
        (None, false) => (SquareSumAxis::All, &[]),
    };
    let sums = r
        .data
        .reduce_stored(r.sparse_layout(), StoredReduce::SquareSum(which))?;
    let out = if which == SquareSumAxis::StoredRows {
        NDArray::from_data(ArrayData::RowSparse(RowSparseData {
            shape: shape.to_vec(),
            indices: r.indices.clone(),
            data: sums,
        }))
    } else {
        NDArray::from_buffer(sums, shape)?
    };
    // The backward holds a graph-free handle on the input, not its buffers.
    let x = a.detach();
    Ok(record_op("square_sum", out, &[a], move |g| {
        Ok(vec![Some(square_sum_backward(&x, g, which)?)])
    }))
}

/// The gradient of [`square_sum`] of the row_sparse `x` over `axis` from the head gradient `g`:
/// `2 * x * g` (broadcast), row_sparse over `x`'s stored rows. Not recorded.
fn square_sum_backward(x: &NDArray, g: &NDArray, axis: SquareSumAxis) -> Result<NDArray> {
    let r = match &*x.read() {
        ArrayData::RowSparse(r) => r.clone(),
        other => {
            return Err(Error::stype(
                "square_sum backward",
                format!("needs a row_sparse input, got {:?}", other.stype()),
            ))
        }
    };
    let gd = g.tostype(SType::Dense)?.dense_data()?;
    let vals = r.data.square_sum_grad(r.sparse_layout(), &gd.buf, axis)?;
    Ok(NDArray::from_data(ArrayData::RowSparse(RowSparseData {
        shape: r.shape,
        indices: r.indices,
        data: vals,
    })))
}

/// The L2 norm of all elements (stored values only for sparse arrays), as a 0-D array.
/// Differentiable.
pub fn norm(a: &NDArray) -> Result<NDArray> {
    let ss = match a.stype() {
        SType::Csr => a.square()?.sum(None, false)?,
        _ => square_sum(a, None, false)?,
    };
    ss.sqrt()
}
