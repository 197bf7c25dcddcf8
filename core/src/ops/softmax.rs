//! softmax and log_softmax along an axis (numerically stable: the row maximum is subtracted
//! before exponentiating, so large logits do not overflow).

use rayon::prelude::*;

use super::axis::{norm_axis, split3};
use crate::autograd::record_op;
use crate::dtype::Float;
use crate::error::Result;
use crate::{float_dispatch, NDArray};

/// Softmax (or log-softmax) of every line along the middle axis of `[outer, n, inner]`.
fn softmax_kernel<T: Float>(
    src: &[T],
    (outer, n, inner): (usize, usize, usize),
    log: bool,
) -> Vec<T> {
    let mut out = vec![T::zero(); src.len()];
    if src.is_empty() {
        return out;
    }
    let block = |(o, dst): (usize, &mut [T])| {
        let s = &src[o * n * inner..(o + 1) * n * inner];
        for i in 0..inner {
            let mut m = T::neg_infinity();
            for k in 0..n {
                m = m.max(s[k * inner + i]);
            }
            let mut sum = T::zero();
            for k in 0..n {
                let e = (s[k * inner + i] - m).exp();
                dst[k * inner + i] = e;
                sum = sum + e;
            }
            if log {
                let lse = sum.ln();
                for k in 0..n {
                    dst[k * inner + i] = s[k * inner + i] - m - lse;
                }
            } else {
                for k in 0..n {
                    dst[k * inner + i] = dst[k * inner + i] / sum;
                }
            }
        }
    };
    if src.len() >= super::PAR_THRESHOLD && outer > 1 {
        out.par_chunks_mut(n * inner).enumerate().for_each(block);
    } else {
        out.chunks_mut(n * inner).enumerate().for_each(block);
    }
    out
}

fn softmax_impl(a: &NDArray, axis: i64, log: bool) -> Result<NDArray> {
    let op = if log { "log_softmax" } else { "softmax" };
    let d = a.dense_data()?;
    let ax = norm_axis(op, axis, d.shape.len())?;
    let dims = split3(&d.shape, ax);
    let out = float_dispatch!(d.buf.dtype(), op, T => {
        NDArray::from_vec(softmax_kernel(d.buf.as_slice::<T>().unwrap(), dims, log), &d.shape)?
    });
    let y = out.detach();
    let axes = [ax as i64];
    Ok(record_op(op, out, &[a], move |g| {
        let gx = if log {
            // d/dx log_softmax: g - softmax * sum(g)
            g.sub(&y.exp()?.mul(&g.sum(Some(&axes), true)?)?)?
        } else {
            // d/dx softmax: y * (g - sum(g * y))
            y.mul(&g.sub(&g.mul(&y)?.sum(Some(&axes), true)?)?)?
        };
        Ok(vec![Some(gx)])
    }))
}

impl NDArray {
    /// Softmax along `axis` (usually -1). Float only; differentiable.
    ///
    /// ```
    /// use sparrow_core::NDArray;
    /// let x = NDArray::from_vec(vec![1000.0f32, 1000.0], &[1, 2]).unwrap();
    /// assert_eq!(x.softmax(-1).unwrap().to_vec::<f32>().unwrap(), vec![0.5, 0.5]);
    /// ```
    pub fn softmax(&self, axis: i64) -> Result<NDArray> {
        softmax_impl(self, axis, false)
    }

    /// `log(softmax(x))` along `axis`, computed as `x - max - log(sum(exp(x - max)))`.
    /// Float only; differentiable.
    pub fn log_softmax(&self, axis: i64) -> Result<NDArray> {
        softmax_impl(self, axis, true)
    }
}
