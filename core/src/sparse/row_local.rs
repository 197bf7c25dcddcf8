//! Row_sparse gradients through row-local operators: an operator whose output row `i` depends
//! only on input row `i` (a reduction or softmax over axes other than 0, an elementwise map)
//! gives a dense input a row_sparse gradient when its head gradient is row_sparse, over the
//! same rows, as MXNet does for a weight that reaches `dot(csr, f(w))`. Without this the
//! backward of `f` would densify the head gradient and the weight's whole gradient.

use crate::autograd;
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, RowSparseData};
use crate::ops::axis::positions_array;
use crate::{NDArray, SType};

/// The gradient of `x` through the row-local operator `f` (`y = f(x)`) for a row_sparse head
/// gradient `g`: `f`'s own backward run on just the rows of `x` that `g` stores, as a
/// row_sparse array over those rows. `Ok(None)` when `g` is not row_sparse or `x` is not
/// dense (the caller's usual backward applies). The work is proportional to the stored rows.
pub(crate) fn row_local_grad(
    g: &NDArray,
    x: &NDArray,
    f: impl Fn(&NDArray) -> Result<NDArray>,
) -> Result<Option<NDArray>> {
    if x.stype() != SType::Dense {
        return Ok(None);
    }
    let (ids, values, gshape) = match &*g.read() {
        ArrayData::RowSparse(r) => (r.indices.clone(), r.data.clone(), r.shape.clone()),
        _ => return Ok(None),
    };
    let xshape = x.shape();
    if gshape.is_empty() || xshape.first() != gshape.first() {
        return Err(Error::shape(
            "row_sparse backward",
            format!("head gradient {gshape:?} and input {xshape:?} differ in rows"),
        ));
    }
    let rows: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
    let mut gr_shape = gshape.clone();
    gr_shape[0] = rows.len();
    let gr = NDArray::from_buffer(values, &gr_shape)?;
    // The operator's own backward on the stored rows: the rows as a fresh leaf, the forward
    // recomputed on them, the backward run with the stored head-gradient rows.
    let xr = x
        .detach()
        .take(&positions_array(&rows, x.device())?, 0)?
        .detach();
    xr.attach_grad();
    let yr = autograd::record(|| f(&xr))?;
    let gx = if yr.node().is_some() {
        yr.backward_with_grad(&gr)?;
        xr.grad().unwrap_or_else(|| xr.zeros_like())
    } else {
        xr.zeros_like()
    };
    let gx = gx.tostype(SType::Dense)?;
    let data = gx.dense_data()?.buf;
    Ok(Some(NDArray::from_data(ArrayData::RowSparse(
        RowSparseData {
            shape: xshape,
            indices: ids,
            data,
        },
    ))))
}

/// The gradient of a 2-D `x` whose rows `positions` were gathered (along axis 0) into the
/// output, for a row_sparse head gradient: row `j` of the head goes to row `positions[j]`,
/// repeated positions summed, as a row_sparse array. `Ok(None)` when `g` is not row_sparse
/// or `x` is not 2-D.
pub(crate) fn gathered_rows_grad(
    g: &NDArray,
    positions: &NDArray,
    xshape: &[usize],
) -> Result<Option<NDArray>> {
    let [rows, cols] = xshape else {
        return Ok(None);
    };
    let (ids, values, gshape) = match &*g.read() {
        ArrayData::RowSparse(r) => (r.indices.clone(), r.data.clone(), r.shape.clone()),
        _ => return Ok(None),
    };
    if gshape.len() != 2 || gshape[1] != *cols {
        return Ok(None);
    }
    let stored: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
    // The input rows the stored head rows came from.
    let src = positions.take(&positions_array(&stored, positions.device())?, 0)?;
    let gr = NDArray::from_buffer(values, &[stored.len(), *cols])?;
    super::embedding::embedding_grad(&src, &gr, [*rows, *cols]).map(Some)
}
