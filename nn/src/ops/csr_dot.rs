//! `dot(csr, dense)` with a row_sparse weight gradient, as the sparse Dense layer needs it.
//!
//! This lives in nn until core's sparse dot kernel (sparse branch) is merged; it is written only
//! against core's public storage types and `record_op`.

use std::sync::Arc;

#[allow(unused_imports)]
use num_traits::Zero;
use rayon::prelude::*;
use sparrow_core::autograd::record_op;
use sparrow_core::{float_dispatch, ArrayData, CsrData, Error, NDArray, Result, RowSparseData};

/// Weight layout of the dense operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightLayout {
    /// `(in_features, units)`: `y = X W`; the gradient `X^T g` is row_sparse over the input
    /// features (columns) the batch used.
    InOut,
    /// `(units, in_features)` (Gluon's Dense layout): `y = X W^T`; the gradient is dense.
    OutIn,
}

fn csr_of(x: &NDArray) -> Result<CsrData> {
    match &*x.read() {
        ArrayData::Csr(c) => Ok(c.clone()),
        other => Err(Error::stype(
            "csr_dot",
            format!("left operand must be csr, got {:?}", other.stype()),
        )),
    }
}

/// `X . W` (InOut) or `X . W^T` (OutIn) for a csr `X` of shape `(batch, in_features)`.
/// Recorded: the weight gets a row_sparse gradient (InOut) or a dense one (OutIn); `X` gets none.
pub fn csr_dot(x: &NDArray, w: &NDArray, layout: WeightLayout) -> Result<NDArray> {
    let c = csr_of(x)?;
    let wd = w.dense_data()?;
    if wd.shape.len() != 2 {
        return Err(Error::shape(
            "csr_dot",
            format!("weight must be 2-D, got {:?}", wd.shape),
        ));
    }
    let [rows, feats] = c.shape;
    let (wf, units) = match layout {
        WeightLayout::InOut => (wd.shape[0], wd.shape[1]),
        WeightLayout::OutIn => (wd.shape[1], wd.shape[0]),
    };
    if wf != feats {
        return Err(Error::shape(
            "csr_dot",
            format!(
                "csr input has {feats} columns but the weight {:?} ({layout:?}) expects {wf}",
                wd.shape
            ),
        ));
    }
    if c.data.dtype() != wd.buf.dtype() {
        return Err(Error::dtype_mismatch(
            "csr_dot",
            c.data.dtype(),
            wd.buf.dtype(),
        ));
    }
    let out = float_dispatch!(wd.buf.dtype(), "csr_dot", T => {
        let wv = wd.buf.as_slice::<T>().unwrap();
        let vals = c.values::<T>().unwrap();
        let idx = c.indices();
        let mut out = vec![T::zero(); rows * units];
        let work = |(r, dst): (usize, &mut [T])| {
            for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
                let (col, v) = (idx[p] as usize, vals[p]);
                match layout {
                    WeightLayout::InOut => {
                        let wr = &wv[col * units..(col + 1) * units];
                        for (o, &wx) in dst.iter_mut().zip(wr) {
                            *o += v * wx;
                        }
                    }
                    WeightLayout::OutIn => {
                        for (u, o) in dst.iter_mut().enumerate() {
                            *o += v * wv[u * feats + col];
                        }
                    }
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
    Ok(record_op("csr_dot", out, &[x, w], move |g| {
        let gw = weight_grad(&c, g, layout, &wshape)?;
        Ok(vec![None, Some(gw)])
    }))
}

/// `X^T g` as row_sparse over the used columns (InOut), or `g^T X` dense (OutIn).
fn weight_grad(
    c: &CsrData,
    g: &NDArray,
    layout: WeightLayout,
    wshape: &[usize],
) -> Result<NDArray> {
    let gd = g.dense_data()?;
    let idx = c.indices();
    let rows = c.shape[0];
    Ok(float_dispatch!(gd.buf.dtype(), "csr_dot backward", T => {
        let gv = gd.buf.as_slice::<T>().unwrap();
        let vals = c.values::<T>().ok_or_else(|| Error::dtype("csr_dot backward", "csr and gradient dtypes differ"))?;
        match layout {
            WeightLayout::InOut => {
                let units = wshape[1];
                let mut cols: Vec<i64> = idx.to_vec();
                cols.sort_unstable();
                cols.dedup();
                let mut data = vec![T::zero(); cols.len() * units];
                for r in 0..rows {
                    let grow = &gv[r * units..(r + 1) * units];
                    for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
                        let k = cols.binary_search(&idx[p]).expect("column collected above");
                        let v = vals[p];
                        for (d, &gx) in data[k * units..(k + 1) * units].iter_mut().zip(grow) {
                            *d += v * gx;
                        }
                    }
                }
                NDArray::from_data(ArrayData::RowSparse(RowSparseData {
                    shape: wshape.to_vec(),
                    indices: Arc::new(cols),
                    data: <T as sparrow_core::Element>::into_buffer(data),
                }))
            }
            WeightLayout::OutIn => {
                let (units, feats) = (wshape[0], wshape[1]);
                let mut data = vec![T::zero(); units * feats];
                for r in 0..rows {
                    for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
                        let (col, v) = (idx[p] as usize, vals[p]);
                        for u in 0..units {
                            data[u * feats + col] += v * gv[r * units + u];
                        }
                    }
                }
                NDArray::from_vec(data, wshape)?
            }
        }
    }))
}
