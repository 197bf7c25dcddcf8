//! Sigmoid binary cross-entropy on logits as one fused, recorded op.
//!
//! The composite form `relu(x) - x z + softrelu(-|x|)` is seven recorded ops (seven outputs
//! allocated forward, more in backward) for what is one pass over the batch; in a small-batch
//! sparse training step (the tutorial's 10 rows) that bookkeeping dominated the loss. Fused, the
//! forward is one pass and the backward is the textbook `sigmoid(x) - z`, each one kernel of
//! the storage (`Storage::sigmoid_bce`, `sigmoid_bce_grad`; on the CPU `crate::cpu::linalg`).

use crate::autograd::record_op;
use crate::{ArrayData, DenseData, NDArray, Result, Shape};

/// Elementwise `max(x, 0) - x z + log(1 + exp(-|x|))` for logits `x` and labels `z` of the same
/// shape and dtype, recorded as one op: `dx = g (sigmoid(x) - z)`, `dz = -g x`.
/// Returns `Ok(None)` when the operands are not two dense arrays of one shape and float dtype;
/// the caller then uses the composite expression, which handles every other case.
pub fn sigmoid_bce_logits(x: &NDArray, z: &NDArray) -> Result<Option<NDArray>> {
    crate::graph::traced_opt!(Op::SigmoidBce, [x, z], sigmoid_bce_logits(x, z));
    sigmoid_bce_impl(x, z, None)
}

/// [`sigmoid_bce_logits`] for a label `z` holding as many elements as `x` in any shape (a
/// `(batch,)` label of a `(batch, 1)` prediction), with an output of shape `out_shape` (also as
/// many elements): what a loss computes as reshape, elementwise loss and a mean over axes of
/// length 1, as one recorded op. The gradients keep `x`'s and `z`'s own shapes.
/// `Ok(None)` as for [`sigmoid_bce_logits`], or when the element counts differ.
pub fn sigmoid_bce_logits_to(
    x: &NDArray,
    z: &NDArray,
    out_shape: &[usize],
) -> Result<Option<NDArray>> {
    crate::graph::traced_opt!(
        Op::SigmoidBceTo(out_shape.to_vec()),
        [x, z],
        sigmoid_bce_logits_to(x, z, out_shape)
    );
    sigmoid_bce_impl(x, z, Some(out_shape))
}

fn sigmoid_bce_impl(
    x: &NDArray,
    z: &NDArray,
    out_shape: Option<&[usize]>,
) -> Result<Option<NDArray>> {
    // Each operand is read once (storage type, shape, dtype and values from one guard).
    let (xd, zd) = {
        let (xg, zg) = (x.read(), z.read());
        let (ArrayData::Dense(xd), ArrayData::Dense(zd)) = (&*xg, &*zg) else {
            return Ok(None);
        };
        let n = xd.buf.len();
        let shapes_fit = match out_shape {
            None => xd.shape == zd.shape,
            Some(o) => zd.buf.len() == n && o.iter().product::<usize>() == n,
        };
        if !shapes_fit || xd.buf.dtype() != zd.buf.dtype() || !xd.buf.dtype().is_float() {
            return Ok(None);
        }
        (xd.clone(), zd.clone())
    };
    let oshape = Shape::from_slice(out_shape.unwrap_or(&xd.shape));
    let out = NDArray::from_buffer(xd.buf.sigmoid_bce(&zd.buf)?, &oshape)?;
    // Labels are data almost always; their gradient is only built when they are in a graph.
    let need_dz = z.requires_grad();
    // Graph-free handles sharing the operands' values as they are now (an in-place write to
    // an operand afterwards copies, so the backward still sees these): the backward reads them
    // through operators, not captured host memory, so it runs wherever they live.
    let (xs, zs) = (x.detach(), z.detach());
    Ok(Some(record_op(
        "sigmoid_bce_logits",
        out,
        &[x, z],
        move |g| {
            // The head gradient is read once; a dense one of the output's shape and dtype (the
            // loss's usual ones) takes the direct loops.
            let direct = xs.with_dense2(&zs, |xd, zd| {
                let gg = g.read();
                match &*gg {
                    ArrayData::Dense(gd)
                        if gd.shape == oshape && gd.buf.dtype() == xd.buf.dtype() =>
                    {
                        Ok(Some(direct_grads(gd, xd, zd, need_dz)?))
                    }
                    _ => Ok(None),
                }
            })?;
            match direct {
                Some(grads) => Ok(grads),
                None => general_grads(g, &xs, &zs, &oshape, need_dz),
            }
        },
    )))
}

/// `dx = g (sigmoid(x) - z)` and (when wanted) `dz = -g x` in `x`'s and `z`'s shapes, for a
/// dense head gradient `gd` of the same dtype and element count: one pass of the storage's
/// fused kernel.
fn direct_grads(
    gd: &DenseData,
    xd: &DenseData,
    zd: &DenseData,
    need_dz: bool,
) -> Result<Vec<Option<NDArray>>> {
    let (dx, dz) = gd.buf.sigmoid_bce_grad(&xd.buf, &zd.buf, need_dz)?;
    let dz = match dz {
        Some(dz) => Some(NDArray::from_buffer(dz, &zd.shape)?),
        None => None,
    };
    Ok(vec![Some(NDArray::from_buffer(dx, &xd.shape)?), dz])
}

/// The same gradients for a broadcast or sparse head gradient `g`: the formula through general
/// ops in the output's shape `oshape`, then back to each input's.
fn general_grads(
    g: &NDArray,
    x: &NDArray,
    z: &NDArray,
    oshape: &[usize],
    need_dz: bool,
) -> Result<Vec<Option<NDArray>>> {
    let (xs, zs) = (x.reshape(oshape)?, z.reshape(oshape)?);
    let dx = xs.sigmoid()?.sub(&zs)?.mul(g)?.reshape(&x.dims())?;
    let dz = if need_dz {
        Some(xs.neg()?.mul(g)?.reshape(&z.dims())?)
    } else {
        None
    };
    Ok(vec![Some(dx), dz])
}
