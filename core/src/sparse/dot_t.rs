//! `dot(csr, W^T)` for a Gluon-layout `(units, in_features)` weight: the product core's sparse
//! dispatch does not cover (it has csr x dense, which the row_sparse-gradient layout uses).
//! Gluon-layout Dense layers call it for a csr input. The forward and the weight gradient are
//! the storage's kernels (`Storage::csr_dense_t`, `Storage::csr_dense_t_grad`).

use super::dot::csr_index;
use crate::autograd::record_op;
use crate::{ArrayData, CsrData, Error, NDArray, Result};

fn csr_of(x: &NDArray) -> Result<CsrData> {
    match &*x.read() {
        ArrayData::Csr(c) => Ok(c.clone()),
        other => Err(Error::stype(
            "dot_csr_dense_t",
            format!("left operand must be csr, got {:?}", other.stype()),
        )),
    }
}

/// `X . W^T` for a csr `X` `(batch, in_features)` and a dense `W` `(units, in_features)`.
/// Recorded: `W` gets the dense gradient `dY^T X` (computed from the non-zeros only); `X`, when
/// it is part of the graph, the dense gradient `dY . W` (dense by design). A sparse `W` is
/// densified (with the fallback warning, an error in strict mode).
pub fn dot_csr_dense_t(x: &NDArray, w: &NDArray) -> Result<NDArray> {
    crate::graph::traced!(Op::DotCsrDenseT, [x, w], dot_csr_dense_t(x, w));
    let c = csr_of(x)?;
    super::densifying("dot_csr_dense_t", &[w])?;
    let wd = w.dense_data()?;
    let [rows, feats] = c.shape;
    if wd.shape.len() != 2 || wd.shape[1] != feats {
        return Err(Error::shape(
            "dot_csr_dense_t",
            format!(
                "csr input {:?} needs a weight (units, {feats}), got {:?}",
                c.shape, wd.shape
            ),
        ));
    }
    if c.data.dtype() != wd.buf.dtype() {
        return Err(Error::dtype_mismatch(
            "dot_csr_dense_t",
            c.data.dtype(),
            wd.buf.dtype(),
        ));
    }
    let units = wd.shape[0];
    let out = NDArray::from_buffer(
        c.data.csr_dense_t(&csr_index(&c), &wd.buf, units)?,
        &[rows, units],
    )?;
    let wshape = [units, feats];
    // The csr input as a graph-free handle: the backward is an operator on it and the head
    // gradient, so it runs wherever they live.
    let xs = x.detach();
    drop(c);
    let need_x = x.requires_grad();
    let wc = w.clone();
    Ok(record_op("dot_csr_dense_t", out, &[x, w], move |g| {
        let gx = if need_x { Some(g.dot(&wc)?) } else { None };
        Ok(vec![gx, Some(csr_dense_t_grad(&xs, g, wshape)?)])
    }))
}

/// `g^T . x` for a csr `x` `(batch, in_features)` and a dense (or densified) head gradient `g`
/// `(batch, units)`: the dense `(units, in_features)` weight gradient of [`dot_csr_dense_t`],
/// from the non-zeros only, in a buffer recycled from the previous step's gradient when there
/// is one. Not recorded.
pub(crate) fn csr_dense_t_grad(x: &NDArray, g: &NDArray, wshape: [usize; 2]) -> Result<NDArray> {
    let c = csr_of(x)?;
    let gd = g.dense_data()?;
    let data = c
        .data
        .csr_dense_t_grad(&csr_index(&c), &gd.buf, wshape[0])?;
    NDArray::from_buffer(data, &wshape)
}
