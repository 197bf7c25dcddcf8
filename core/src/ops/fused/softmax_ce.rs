//! Softmax cross-entropy of logits as one fused, recorded op.
//!
//! The composite `-sum(t * log_softmax(x), -1)` records four ops forward and about six more
//! backward, each a pass over the `(rows, classes)` block and an allocation, and a sparse-label
//! loss first builds the one-hot block `t` itself; fused, the forward is one pass per row and
//! the backward the textbook `g (softmax(x) sum(t) - t)`, one more, reading class ids where
//! there are ids (host kernels in `crate::cpu::softmax_ce`). Arrays elsewhere than on the host
//! decline and take the composite, which every backend runs.

use crate::autograd::record_op;
use crate::{ArrayData, DType, Device, NDArray, Result, Shape};

/// `-sum(t * log_softmax(x))` over the last axis of logits `x` against targets `t` (class
/// distributions, or one-hot rows) of the same shape and dtype, keeping that axis as length
/// 1 (what `log_softmax`, a product, `sum(-1, keepdims)` and a negation compute), recorded as
/// one op: `dx = g (softmax(x) sum(t) - t)`, `dt = -g log_softmax(x)`.
/// Returns `Ok(None)` unless both are dense float32 / float64 arrays on the host of one shape
/// with a non-empty last axis; the caller then composes the general operators.
pub fn softmax_ce_logits(x: &NDArray, t: &NDArray) -> Result<Option<NDArray>> {
    crate::graph::traced_opt!(Op::SoftmaxCe, [x, t], softmax_ce_logits(x, t));
    softmax_ce_impl(x, t, false)
}

/// [`softmax_ce_logits`] against class ids: `ids` holds one whole number in `[0, classes)` per
/// row of `x` (any shape of that many elements, `x`'s dtype), standing for the one-hot row
/// with its 1 there, which is never made: `-log_softmax(x)[id]` per row, `dx = g (softmax(x)
/// - onehot(id))`; ids have no gradient. An id that is not such a number is an error naming
/// it. `Ok(None)` as for [`softmax_ce_logits`], or when the ids' count is not the rows'.
pub fn softmax_ce_ids(x: &NDArray, ids: &NDArray) -> Result<Option<NDArray>> {
    crate::graph::traced_opt!(Op::SoftmaxCeIds, [x, ids], softmax_ce_ids(x, ids));
    softmax_ce_impl(x, ids, true)
}

fn softmax_ce_impl(x: &NDArray, t: &NDArray, ids: bool) -> Result<Option<NDArray>> {
    // Each operand is read once (storage type, shape, dtype and device from one guard).
    let (xd, td) = {
        let (xg, tg) = (x.read(), t.read());
        let (ArrayData::Dense(xd), ArrayData::Dense(td)) = (&*xg, &*tg) else {
            return Ok(None);
        };
        let classes = xd.shape.last().copied().unwrap_or(0);
        let targets_fit = if ids {
            td.buf.len() * classes == xd.buf.len()
        } else {
            xd.shape == td.shape
        };
        let fits = targets_fit
            && classes > 0
            && xd.buf.dtype() == td.buf.dtype()
            && matches!(xd.buf.dtype(), DType::F32 | DType::F64)
            && xd.buf.device() == Device::Cpu
            && td.buf.device() == Device::Cpu;
        if !fits {
            return Ok(None);
        }
        (xd.clone(), td.clone())
    };
    let classes = xd.shape[xd.shape.len() - 1];
    let mut oshape = Shape::from_slice(&xd.shape);
    let last = oshape.len() - 1;
    oshape[last] = 1;
    let out = NDArray::from_buffer(xd.buf.softmax_ce(&td.buf, classes, ids)?, &oshape)?;
    // Targets are data almost always; their gradient is only built when they are in a graph
    // (class ids have none).
    let need_dt = !ids && t.requires_grad();
    // Graph-free handles sharing the operands' values as they are now (see `sigmoid_bce`).
    let (xs, ts) = (x.detach(), t.detach());
    let name = if ids {
        "softmax_ce_ids"
    } else {
        "softmax_ce_logits"
    };
    Ok(Some(record_op(name, out, &[x, t], move |g| {
        // A dense head gradient of the output's shape and dtype (the loss's usual one) takes
        // the fused kernel; any other, the formula through general ops.
        let direct = xs.with_dense2(&ts, |xd, td| {
            let gg = g.read();
            match &*gg {
                ArrayData::Dense(gd) if gd.shape == oshape && gd.buf.dtype() == xd.buf.dtype() => {
                    let dx = gd.buf.softmax_ce_grad(&xd.buf, &td.buf, classes, ids)?;
                    Ok(Some(NDArray::from_buffer(dx, &xd.shape)?))
                }
                _ => Ok(None),
            }
        })?;
        let dx = match direct {
            Some(dx) => dx,
            None => softmax_ce_grad_composite(&xs, &ts, ids, g)?,
        };
        let dt = if need_dt {
            Some(xs.log_softmax(-1)?.mul(g)?.neg()?)
        } else {
            None
        };
        Ok(vec![Some(dx), dt])
    })))
}

/// The targets `t` of logits `x` as dense rows: `t` itself, or (`ids`) the one-hot rows of its
/// class ids in the logits' dtype, what [`softmax_ce_ids`] stands for, made where the general operators need them.
fn dense_targets(x: &NDArray, t: &NDArray, ids: bool) -> Result<NDArray> {
    if !ids {
        return Ok(t.clone());
    }
    let dims = x.dims();
    let (lead, classes) = dims.split_at(dims.len().saturating_sub(1));
    let classes = classes.first().copied().unwrap_or(0);
    t.reshape(lead)?.one_hot(classes, 1.0, 0.0, x.dtype())
}

/// The fused ops' loss through the general operators, which every backend runs: `-sum(t *
/// log_softmax(x), -1, keepdims)`, `t` dense rows or (`ids`) class ids.
pub(crate) fn softmax_ce_composite(x: &NDArray, t: &NDArray, ids: bool) -> Result<NDArray> {
    let t = dense_targets(x, t, ids)?;
    x.log_softmax(-1)?.mul(&t)?.sum(Some(&[-1]), true)?.neg()
}

/// The fused ops' logits gradient through the general operators: `g (softmax(x) sum(t) - t)`
/// for a head gradient `g` of one value per row (the loss's `[..., 1]` shape, or any shape of
/// that many elements).
pub(crate) fn softmax_ce_grad_composite(
    x: &NDArray,
    t: &NDArray,
    ids: bool,
    g: &NDArray,
) -> Result<NDArray> {
    let dims = x.dims();
    let want = [&dims[..dims.len().saturating_sub(1)], &[1]].concat();
    let g = if g.dims()[..] == want[..] {
        g.clone()
    } else {
        g.reshape(&want)?
    };
    let t = dense_targets(x, t, ids)?;
    x.softmax(-1)?
        .mul(&t.sum(Some(&[-1]), true)?)?
        .sub(&t)?
        .mul(&g)
}
