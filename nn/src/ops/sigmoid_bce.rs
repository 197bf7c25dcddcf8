//! Sigmoid binary cross-entropy on logits as one fused, recorded op.
//!
//! The composite form `relu(x) - x z + softrelu(-|x|)` is seven recorded ops (seven outputs
//! allocated forward, more in backward) for what is one pass over the batch; in a small-batch
//! sparse training step (the tutorial's 10 rows) that bookkeeping dominated the loss. Fused, the
//! forward is one pass and the backward is the textbook `sigmoid(x) - z`.

use sparrow_core::autograd::record_op;
use sparrow_core::ops::{sigmoid, zip_slices};
use sparrow_core::{float_dispatch, ArrayData, Float, NDArray, Result, SType};

#[inline]
fn loss<T: Float>(x: T, z: T) -> T {
    // max(x, 0) - x z + log(1 + exp(-|x|)): finite for any |x|.
    let zero = T::zero();
    let relu = if x > zero { x } else { zero };
    relu - x * z + (-x.abs()).exp_fast_nonpos().ln_1p()
}

/// Elementwise `max(x, 0) - x z + log(1 + exp(-|x|))` for logits `x` and labels `z` of the same
/// shape and dtype, recorded as one op: `dx = g (sigmoid(x) - z)`, `dz = -g x`.
/// Returns `Ok(None)` when the operands are not two dense arrays of one shape and float dtype;
/// the caller then uses the composite expression, which handles every other case.
pub fn sigmoid_bce_logits(x: &NDArray, z: &NDArray) -> Result<Option<NDArray>> {
    if x.stype() != SType::Dense || z.stype() != SType::Dense {
        return Ok(None);
    }
    let (xd, zd) = (x.dense_data()?, z.dense_data()?);
    if xd.shape != zd.shape || xd.buf.dtype() != zd.buf.dtype() || !xd.buf.dtype().is_float() {
        return Ok(None);
    }
    let out = float_dispatch!(xd.buf.dtype(), "SigmoidBinaryCrossEntropyLoss", T => {
        let (xs, zs) = (xd.buf.as_slice::<T>().unwrap(), zd.buf.as_slice::<T>().unwrap());
        NDArray::from_vec(zip_slices(xs, zs, loss::<T>), &xd.shape)?
    });
    // Labels are data almost always; their gradient is only built when they are in a graph.
    let need_dz = z.requires_grad();
    Ok(Some(record_op(
        "sigmoid_bce_logits",
        out,
        &[x, z],
        move |g| {
            let gd = g.dense_data()?;
            if gd.shape != xd.shape || gd.buf.dtype() != xd.buf.dtype() {
                // A broadcast or sparse head gradient: the same formula through general ops.
                let (xs, zs) = (
                    NDArray::from_data(ArrayData::Dense(xd.clone())),
                    NDArray::from_data(ArrayData::Dense(zd.clone())),
                );
                let dx = xs.sigmoid()?.sub(&zs)?.mul(g)?;
                let dz = if need_dz {
                    Some(xs.neg()?.mul(g)?)
                } else {
                    None
                };
                return Ok(vec![Some(dx), dz]);
            }
            float_dispatch!(gd.buf.dtype(), "SigmoidBinaryCrossEntropyLoss backward", T => {
                let gs = gd.buf.as_slice::<T>().unwrap();
                let (xs, zs) = (xd.buf.as_slice::<T>().unwrap(), zd.buf.as_slice::<T>().unwrap());
                let dx: Vec<T> = gs.iter().zip(xs).zip(zs).map(|((&g, &x), &z)| g * (sigmoid(x) - z)).collect();
                let dx = NDArray::from_vec(dx, &xd.shape)?;
                let dz = if need_dz {
                    Some(NDArray::from_vec(zip_slices(gs, xs, |g: T, x: T| -g * x), &xd.shape)?)
                } else {
                    None
                };
                Ok(vec![Some(dx), dz])
            })
        },
    )))
}
