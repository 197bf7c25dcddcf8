//! Softmax cross-entropy of logits as one fused, recorded op.
//!
//! The composite `-sum(t * log_softmax(x), -1)` records four ops forward and about six more
//! backward, each a pass over the `(rows, classes)` block and an allocation; fused, the
//! forward is one pass per row and the backward the textbook `g (softmax(x) sum(t) - t)`, one
//! more (host kernels in `crate::cpu::softmax_ce`). Arrays elsewhere than on the host decline
//! and take the composite, which every backend runs.

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
    // Each operand is read once (storage type, shape, dtype and device from one guard).
    let (xd, td) = {
        let (xg, tg) = (x.read(), t.read());
        let (ArrayData::Dense(xd), ArrayData::Dense(td)) = (&*xg, &*tg) else {
            return Ok(None);
        };
        let fits = xd.shape == td.shape
            && xd.shape.last().is_some_and(|&c| c > 0)
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
    let out = NDArray::from_buffer(xd.buf.softmax_ce(&td.buf, classes)?, &oshape)?;
    // Targets are data almost always; their gradient is only built when they are in a graph.
    let need_dt = t.requires_grad();
    // Graph-free handles sharing the operands' values as they are now (see `sigmoid_bce`).
    let (xs, ts) = (x.detach(), t.detach());
    Ok(Some(record_op(
        "softmax_ce_logits",
        out,
        &[x, t],
        move |g| {
            // A dense head gradient of the output's shape and dtype (the loss's usual one)
            // takes the fused kernel; any other, the formula through general ops.
            let direct = xs.with_dense2(&ts, |xd, td| {
                let gg = g.read();
                match &*gg {
                    ArrayData::Dense(gd)
                        if gd.shape == oshape && gd.buf.dtype() == xd.buf.dtype() =>
                    {
                        let dx = gd.buf.softmax_ce_grad(&xd.buf, &td.buf, classes)?;
                        Ok(Some(NDArray::from_buffer(dx, &xd.shape)?))
                    }
                    _ => Ok(None),
                }
            })?;
            let dx = match direct {
                Some(dx) => dx,
                None => xs
                    .softmax(-1)?
                    .mul(&ts.sum(Some(&[-1]), true)?)?
                    .sub(&ts)?
                    .mul(g)?,
            };
            let dt = if need_dt {
                Some(xs.log_softmax(-1)?.mul(g)?.neg()?)
            } else {
                None
            };
            Ok(vec![Some(dx), dt])
        },
    )))
}
