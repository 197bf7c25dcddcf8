//! Reductions of sparse arrays: sum / mean of csr along axis 0, 1 or all (through the `sum`
//! dispatch hook), `square_sum` of row_sparse (MXNet's `_square_sum`) and `norm`.

use num_traits::Zero;

use crate::autograd::record_op;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, RowSparseData};
use crate::storage::Storage;
use crate::{float_dispatch, NDArray, SType};

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
    let (len, shape_kd, shape) = match axis {
        Some(0) => (n, vec![1, n], vec![n]),
        Some(_) => (m, vec![m, 1], vec![m]),
        None => (1, vec![1, 1], vec![]),
    };
    let out = float_dispatch!(c.data.dtype(), "sum", T => {
        let (vals, idx) = (c.values::<T>().unwrap(), c.indices());
        let mut out = vec![T::zero(); len];
        for r in 0..m {
            for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
                let o = match axis { Some(0) => idx[p] as usize, Some(_) => r, None => 0 };
                out[o] += vals[p];
            }
        }
        NDArray::from_vec(out, if keepdims { &shape_kd } else { &shape })?
    });
    Ok(Some(record_op("sum", out, &[a], move |g| {
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
    let out = float_dispatch!(r.data.dtype(), "square_sum", T => {
        let v = r.data.as_slice::<T>().unwrap();
        match ax {
            Some(1) => {
                let sums: Vec<T> = (0..r.nnr()).map(|k| v[k * n..(k + 1) * n].iter().map(|&x| x * x).sum()).collect();
                if keepdims {
                    NDArray::from_data(ArrayData::RowSparse(RowSparseData { shape: vec![m, 1], indices: r.indices.clone(), data: Storage::from_vec(sums) }))
                } else {
                    let mut out = vec![T::zero(); m];
                    for (k, &row) in r.indices.iter().enumerate() { out[row as usize] = sums[k]; }
                    NDArray::from_vec(out, &[m])?
                }
            }
            Some(_) => {
                let mut out = vec![T::zero(); n];
                for row in v.chunks_exact(n.max(1)) {
                    for (o, &x) in out.iter_mut().zip(row) { *o += x * x; }
                }
                let sh = if keepdims { vec![1, n] } else { vec![n] };
                NDArray::from_vec(out, &sh)?
            }
            None => {
                let s: T = v.iter().map(|&x| x * x).sum();
                NDArray::from_vec(vec![s], if keepdims { &[1, 1][..] } else { &[][..] })?
            }
        }
    });
    let x = r.clone();
    Ok(record_op("square_sum", out, &[a], move |g| {
        let gd = g.tostype(SType::Dense)?.dense_data()?;
        let gx = float_dispatch!(x.data.dtype(), "square_sum backward", T => {
            let (v, gv) = (x.data.as_slice::<T>().unwrap(), gd.buf.as_slice::<T>().unwrap());
            let two = <T as Element>::from_f64(2.0);
            let mut out = vec![T::zero(); v.len()];
            for (k, &row) in x.indices.iter().enumerate() {
                for e in 0..n {
                    let gk = match ax { Some(1) => gv[row as usize], Some(_) => gv[e], None => gv[0] };
                    out[k * n + e] = two * v[k * n + e] * gk;
                }
            }
            NDArray::from_data(ArrayData::RowSparse(RowSparseData { shape: x.shape.clone(), indices: x.indices.clone(), data: Storage::from_vec(out) }))
        });
        Ok(vec![Some(gx)])
    }))
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
