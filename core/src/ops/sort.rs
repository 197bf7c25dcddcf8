//! sort, argsort and topk along an axis, with i64 indices. Sorting is stable; NaNs compare
//! as equal to everything (their order is unspecified).

use rayon::prelude::*;

use super::axis::{norm_axis, split3};
use crate::autograd::record_op;
use crate::dtype::Element;
use crate::error::{Error, Result};
use crate::{float_dispatch, NDArray};

/// For every line along the middle axis of `[outer, n, inner]`, the positions of its `k` first
/// elements in sorted order, laid out as `[outer, k, inner]`.
fn argsort_kernel<T: Element>(
    src: &[T],
    (outer, n, inner): (usize, usize, usize),
    k: usize,
    ascending: bool,
) -> Vec<i64> {
    let mut out = vec![0i64; outer * k * inner];
    if out.is_empty() {
        return out;
    }
    let block = |(o, dst): (usize, &mut [i64])| {
        let s = &src[o * n * inner..(o + 1) * n * inner];
        let mut idx: Vec<usize> = Vec::with_capacity(n);
        for i in 0..inner {
            idx.clear();
            idx.extend(0..n);
            let key = |p: &usize| s[p * inner + i];
            let cmp = |a: &usize, b: &usize| {
                let o = key(a)
                    .partial_cmp(&key(b))
                    .unwrap_or(std::cmp::Ordering::Equal);
                if ascending {
                    o
                } else {
                    o.reverse()
                }
            };
            if k < n {
                // Partial selection first, then order the k winners (stable by position).
                idx.select_nth_unstable_by(k, |a, b| cmp(a, b).then(a.cmp(b)));
                idx.truncate(k);
            }
            idx.sort_by(|a, b| cmp(a, b).then(a.cmp(b)));
            for (j, &p) in idx.iter().enumerate() {
                dst[j * inner + i] = p as i64;
            }
        }
    };
    if src.len() >= super::PAR_THRESHOLD && outer > 1 {
        out.par_chunks_mut(k * inner).enumerate().for_each(block);
    } else {
        out.chunks_mut(k * inner).enumerate().for_each(block);
    }
    out
}

/// `out[o, j, i] = src[o, idx[o, j, i], i]`.
fn take_along<T: Copy + Default>(
    src: &[T],
    (outer, n, inner): (usize, usize, usize),
    idx: &[i64],
    k: usize,
) -> Vec<T> {
    let mut out = vec![T::default(); idx.len()];
    for o in 0..outer {
        for j in 0..k {
            for i in 0..inner {
                let q = (o * k + j) * inner + i;
                out[q] = src[(o * n + idx[q] as usize) * inner + i];
            }
        }
    }
    out
}

/// Values and indices of the `k` first elements along `axis` in sorted order.
fn sorted(
    a: &NDArray,
    op: &'static str,
    axis: i64,
    k: Option<usize>,
    ascending: bool,
) -> Result<(NDArray, NDArray)> {
    let d = a.dense_data()?;
    if d.shape.is_empty() {
        return Err(Error::shape(op, "needs an array of at least 1 dimension"));
    }
    let ax = norm_axis(op, axis, d.shape.len())?;
    let dims = split3(&d.shape, ax);
    let k = k.unwrap_or(dims.1);
    if k > dims.1 {
        return Err(Error::arg(
            op,
            format!("k = {k} exceeds axis {ax} of shape {:?}", d.shape),
        ));
    }
    let mut oshape = d.shape.clone();
    oshape[ax] = k;
    let idx = crate::with_buffer!(&d.buf, s => argsort_kernel(s.as_slice(), dims, k, ascending));
    let vals = crate::with_buffer!(&d.buf, s => crate::cpu::HostElement::into_buffer(take_along(s.as_slice(), dims, &idx, k)));
    let values = NDArray::from_buffer(vals, &oshape)?;
    let in_shape = d.shape.clone();
    let idx_arr = NDArray::from_vec(idx.clone(), &oshape)?;
    let values = record_op(op, values, &[a], move |g| {
        // Scatter each output gradient back to the position it was taken from.
        let gd = g.dense_data()?;
        let (outer, n, inner) = split3(&in_shape, ax);
        let gx = float_dispatch!(gd.buf.dtype(), op, T => {
            let gs = gd.buf.as_slice::<T>().unwrap();
            let mut out = vec![<T as num_traits::Zero>::zero(); outer * n * inner];
            for o in 0..outer {
                for j in 0..k {
                    for i in 0..inner {
                        let q = (o * k + j) * inner + i;
                        let p = (o * n + idx[q] as usize) * inner + i;
                        out[p] += gs[q];
                    }
                }
            }
            NDArray::from_vec(out, &in_shape)?
        });
        Ok(vec![Some(gx)])
    });
    Ok((values, idx_arr))
}

impl NDArray {
    /// Sorted values along `axis` (stable). Differentiable (the gradient follows each value
    /// back to where it came from). Any dtype.
    pub fn sort(&self, axis: i64, ascending: bool) -> Result<NDArray> {
        Ok(sorted(self, "sort", axis, None, ascending)?.0)
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
