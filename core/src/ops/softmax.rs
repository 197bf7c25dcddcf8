//! softmax and log_softmax along an axis (numerically stable: the row maximum is subtracted
//! before exponentiating, so large logits do not overflow). The kernel runs on the array's
//! backend (`Storage::softmax`).

use super::axis::{norm_axis, split3};
use crate::autograd::record_op;
use crate::error::Result;
use crate::storage::SoftmaxOp;
use crate::NDArray;

/// softmax or log_softmax along `axis`; the backward is written with operators.
fn softmax_impl(a: &NDArray, axis: i64, log: bool) -> Result<NDArray> {
    let which = if log {
        SoftmaxOp::LogSoftmax
    } else {
        SoftmaxOp::Softmax
    };
    let op = which.name();
    crate::sparse::densifying(if log { "log_softmax" } else { "softmax" }, &[a])?;
    let d = a.dense_data()?;
    let ax = norm_axis(op, axis, d.shape.len())?;
    let dims = split3(&d.shape, ax);
    let out = NDArray::from_buffer(d.buf.softmax(dims, which)?, &d.shape)?;
    let y = out.detach();
    let axes = [ax as i64];
    // Along an axis other than the first: a row_sparse head gradient gives a row_sparse
    // gradient over its rows.
    let row_local = ax != 0;
    let x = a.detach();
    Ok(record_op(op, out, &[a], move |g| {
        if row_local {
            let f = |xr: &NDArray| softmax_impl(xr, axes[0], log);
            if let Some(gx) = crate::sparse::row_local_grad(g, &x, f)? {
                return Ok(vec![Some(gx)]);
            }
        }
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
        crate::graph::traced!(Op::Softmax(axis), [self], self.softmax(axis));
        softmax_impl(self, axis, false)
    }

    /// `log(softmax(x))` along `axis`, computed as `x - max - log(sum(exp(x - max)))`.
    /// Float only; differentiable.
    pub fn log_softmax(&self, axis: i64) -> Result<NDArray> {
        crate::graph::traced!(Op::LogSoftmax(axis), [self], self.log_softmax(axis));
        softmax_impl(self, axis, true)
    }
}
