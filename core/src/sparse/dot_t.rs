//! `dot(csr, W^T)` for a Gluon-layout `(units, in_features)` weight: the product core's sparse
//! dispatch does not cover (it has csr x dense, which the row_sparse-gradient layout uses).
//! Gluon-layout Dense layers call it for a csr input.

use crate::autograd::record_op;
use crate::{float_dispatch, ArrayData, CsrData, Error, NDArray, Result};
use rayon::prelude::*;

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
/// Recorded: `W` gets the dense gradient `dY^T X` (computed from the non-zeros only); `X` none.
pub fn dot_csr_dense_t(x: &NDArray, w: &NDArray) -> Result<NDArray> {
    let c = csr_of(x)?;
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
    let out = float_dispatch!(wd.buf.dtype(), "dot_csr_dense_t", T => {
        let wv = wd.buf.as_slice::<T>().unwrap();
        let (vals, idx) = (c.values::<T>().unwrap(), c.indices());
        let mut out = vec![0.0 as T; rows * units];
        let work = |(r, dst): (usize, &mut [T])| {
            for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
                let (col, v) = (idx[p] as usize, vals[p]);
                for (u, o) in dst.iter_mut().enumerate() {
                    *o += v * wv[u * feats + col];
                }
            }
        };
        if units > 0 && c.nnz() * units >= 1 << 15 {
            out.par_chunks_mut(units).enumerate().for_each(work);
        } else if units > 0 {
            out.chunks_mut(units).enumerate().for_each(work);
        }
        NDArray::from_vec(out, &[rows, units])?
    });
    let wshape = wd.shape.clone();
    // The csr input as a graph-free handle: the backward reads it when it runs, through this
    // crate's storage access, not through host memory captured here.
    let xs = x.detach();
    drop(c);
    Ok(record_op("dot_csr_dense_t", out, &[x, w], move |g| {
        let c = csr_of(&xs)?;
        let gd = g.dense_data()?;
        let idx = c.indices();
        let gw = float_dispatch!(gd.buf.dtype(), "dot_csr_dense_t backward", T => {
            let gv = gd.buf.as_slice::<T>().unwrap();
            let vals = c.values::<T>().ok_or_else(|| Error::dtype("dot_csr_dense_t backward", "csr and gradient dtypes differ"))?;
            // Recycled from the previous step's gradient when there is one (see core's
            // `recycle`): fresh 512 MB every step cost a page fault per 2 MB page.
            let mut data: Vec<T> = crate::recycle::zeroed_vec(units * feats);
            for r in 0..rows {
                for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
                    let (col, v) = (idx[p] as usize, vals[p]);
                    for u in 0..units {
                        data[u * feats + col] += v * gv[r * units + u];
                    }
                }
            }
            NDArray::from_vec(data, &wshape)?
        });
        Ok(vec![None, Some(gw)])
    }))
}
