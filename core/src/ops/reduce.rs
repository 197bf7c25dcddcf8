//! Reductions along axes: sum, mean (more are added beside these), and broadcasting with its
//! backward. The kernels run on the array's backend (`crate::storage::reduce`,
//! `crate::storage::layout`).

use super::axis::{norm_axes, reduced_shape};
use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::storage::ReduceOp;
use crate::{DType, NDArray};

impl NDArray {
    /// Sum over `axes` (`None`: all axes), keeping reduced dims as size 1 when `keepdims`.
    ///
    /// Float arrays sum in their own dtype and are differentiable. Integer arrays (u8, i32,
    /// i64) sum exactly into an **i64** result (not differentiable), so a sum over billions of
    /// u8 values cannot overflow.
    pub fn sum(&self, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
        crate::graph::traced!(
            Op::Sum {
                axes: axes.map(<[i64]>::to_vec),
                keepdims
            },
            [self],
            self.sum(axes, keepdims)
        );
        if let Some(out) = crate::sparse::dispatch_sum(self, axes, keepdims)? {
            return Ok(out);
        }
        if !self.dtype().is_float() && self.stype() == crate::SType::Dense {
            return super::reduce_more::sum_int(self, axes, keepdims);
        }
        crate::sparse::densifying("sum", &[self])?;
        let d = self.dense_data()?;
        let ax = norm_axes("sum", axes, d.shape.len())?;
        let out_shape = reduced_shape(&d.shape, &ax, keepdims);
        if ax.iter().all(|&a| d.shape[a] == 1) {
            // Nothing is summed (the reduced axes have size 1, e.g. a per-sample loss mean over
            // a (batch, 1) output): a reshape gives the same values with one cheap node.
            return self.reshape(&out_shape);
        }
        if !d.buf.dtype().is_float() {
            // A sparse integer array: the exact i64 sum above is for dense ones.
            return Err(Error::dtype(
                "sum",
                format!(
                    "needs a float32 or float64 array, got {}",
                    d.buf.dtype().name()
                ),
            ));
        }
        let out = NDArray::from_buffer(d.buf.reduce(&d.shape, &ax, ReduceOp::Sum)?, &out_shape)?;
        let in_shape = d.shape.clone();
        // Summed over axes other than the first: a row_sparse head gradient gives a
        // row_sparse gradient over its rows.
        let row_local = in_shape.len() >= 2 && !ax.contains(&0);
        let axes_i: Vec<i64> = ax.iter().map(|&a| a as i64).collect();
        let x = self.detach();
        Ok(record_op("sum", out, &[self], move |g| {
            if row_local {
                let f = |xr: &NDArray| xr.sum(Some(&axes_i), keepdims);
                if let Some(gx) = crate::sparse::row_local_grad(g, &x, f)? {
                    return Ok(vec![Some(gx)]);
                }
            }
            let kshape = reduced_shape(&in_shape, &ax, true);
            Ok(vec![Some(g.reshape(&kshape)?.broadcast_to(&in_shape)?)])
        }))
    }

    /// Sum of all elements as a 0-D array.
    pub fn sum_all(&self) -> Result<NDArray> {
        self.sum(None, false)
    }

    /// Mean over `axes` (`None`: all axes). An integer array's mean is float64 (NumPy's rule):
    /// its sum is exact in int64 and a mean is rarely a whole number.
    pub fn mean(&self, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
        crate::graph::traced!(
            Op::Mean {
                axes: axes.map(<[i64]>::to_vec),
                keepdims
            },
            [self],
            self.mean(axes, keepdims)
        );
        let shape = self.shape();
        let ax = norm_axes("mean", axes, shape.len())?;
        let count: usize = ax.iter().map(|&a| shape[a]).product();
        let mut total = self.sum(axes, keepdims)?;
        if !total.dtype().is_float() {
            total = total.astype(DType::F64)?;
        }
        if count == 1 {
            return Ok(total); // dividing by one changes nothing: no scaling node
        }
        total.mul_scalar(1.0 / count.max(1) as f64)
    }

    /// Broadcast to a larger shape (NumPy rules); differentiable.
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<NDArray> {
        crate::graph::traced!(
            Op::BroadcastTo(shape.to_vec()),
            [self],
            self.broadcast_to(shape)
        );
        let own = self.shape();
        let target = super::broadcast_shapes("broadcast_to", &own, shape)?;
        if target != shape {
            return Err(Error::shape(
                "broadcast_to",
                format!("cannot broadcast {own:?} to {shape:?}"),
            ));
        }
        if own == shape {
            return Ok(self.clone());
        }
        crate::sparse::densifying("broadcast_to", &[self])?;
        let d = self.dense_data()?;
        let out = NDArray::from_buffer(d.buf.broadcast(&own, shape)?, shape)?;
        let own2 = own.clone();
        Ok(record_op("broadcast_to", out, &[self], move |g| {
            Ok(vec![Some(sum_to_shape(g, &own2)?)])
        }))
    }
}

/// Sum a broadcast gradient back down to `shape` (the backward of broadcasting).
pub fn sum_to_shape(g: &NDArray, shape: &[usize]) -> Result<NDArray> {
    let gs = g.shape();
    if gs == shape {
        return Ok(g.clone());
    }
    let axes: Vec<i64> = super::broadcast::reduced_axes(shape, &gs)
        .into_iter()
        .map(|a| a as i64)
        .collect();
    g.sum(Some(&axes), true)?.reshape(shape)
}
