//! `act(y + b)` for a dense `(rows, units)` product and a `(units,)` bias, as one recorded op.
//!
//! Dense layers add their bias to every row of the product and usually apply an activation.
//! Through core's general ops that is a broadcast `add` (strided loop forward; backward a
//! pass-through plus a reduction over the broadcast axis, each with its shape bookkeeping) and
//! then an activation op, each recorded, each allocating its output and its gradient. In the
//! tutorial's 10-row steps those small ops are mostly per-op overhead. Here the forward is a row
//! loop plus one in-place activation pass, and the backward scales the incoming gradient by the
//! activation's derivative (a function of the saved output) and sums its rows for the bias.
//! With no activation the incoming gradient is handed through unchanged (no copy). Those loops
//! are the storage's kernels (`Storage::bias_act`, `bias_act_grad`, `column_sums`; on the CPU
//! `crate::cpu::linalg`); this file validates, absorbs the product's node and records.

use crate::autograd::record_op;
use crate::ops::sum_to_shape;
use crate::{ArrayData, DenseData, NDArray, Result, SType, Shape};

/// An activation [`bias_act`] applies in the same op: one whose derivative is a function of
/// its output, so the backward needs nothing but the saved output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusedAct {
    /// `1 / (1 + exp(-x))`; derivative `y (1 - y)`.
    Sigmoid,
    /// `tanh(x)`; derivative `1 - y^2`.
    Tanh,
    /// `max(x, 0)`; derivative `1` where `y > 0`, else `0`.
    Relu,
}

impl FusedAct {
    /// The fused form of a named activation (`sigmoid`, `tanh`, `relu`), or `None` for the
    /// others, which layers apply as a separate op.
    pub fn from_name(name: &str) -> Option<FusedAct> {
        match name {
            "sigmoid" => Some(FusedAct::Sigmoid),
            "tanh" => Some(FusedAct::Tanh),
            "relu" => Some(FusedAct::Relu),
            _ => None,
        }
    }
}

/// `out[r, j] = y[r, j] + b[j]`, recorded: `dy = g`, `db = sum over rows of g`. Returns
/// `Ok(None)` unless `y` is a dense 2-D float array and `b` a dense 1-D array of `y`'s column
/// count and dtype; the caller then uses the general broadcast `add`.
pub fn bias_add(y: &NDArray, b: &NDArray) -> Result<Option<NDArray>> {
    bias_act(y, b, None)
}

/// `out[r, j] = act(y[r, j] + b[j])` as one recorded op (`act = None`: identity). Backward:
/// `gp = g * act'(out)`, `dy = gp`, `db = sum over rows of gp`. Returns `Ok(None)` under the
/// same conditions as [`bias_add`]; the caller then composes the general ops.
pub fn bias_act(y: &NDArray, b: &NDArray, act: Option<FusedAct>) -> Result<Option<NDArray>> {
    crate::graph::traced_opt!(
        Op::BiasAct { act, absorb: false },
        [y, b],
        bias_act(y, b, act)
    );
    bias_act_impl(y, b, act, false)
}

/// [`bias_act`] that also folds the operator which produced `y` (a layer's product) into its
/// own recorded node: one node per Dense layer instead of two, so the backward engine visits,
/// checks and stores one gradient fewer per layer. `y` must be a fresh intermediate that
/// nothing else reads (its own gradient path is taken over); the backward hands `g * act'` to
/// the product's backward and returns its input gradients followed by the bias gradient.
pub fn bias_act_absorbing(
    y: &NDArray,
    b: &NDArray,
    act: Option<FusedAct>,
) -> Result<Option<NDArray>> {
    crate::graph::traced_opt!(
        Op::BiasAct { act, absorb: true },
        [y, b],
        bias_act_absorbing(y, b, act)
    );
    bias_act_impl(y, b, act, true)
}

fn bias_act_impl(
    y: &NDArray,
    b: &NDArray,
    act: Option<FusedAct>,
    absorb: bool,
) -> Result<Option<NDArray>> {
    // Both arrays are read once, in place: each lock round trip or buffer-handle clone is an
    // atomic read-modify-write (~3 ns), and this runs once per layer per step.
    if y.same_array(b) {
        return Ok(None); // a 2-D product cannot be its own 1-D bias
    }
    let out = {
        let (yg, bg) = (y.read(), b.read());
        let (ArrayData::Dense(yd), ArrayData::Dense(bd)) = (&*yg, &*bg) else {
            return Ok(None);
        };
        if yd.shape.len() != 2
            || bd.shape.len() != 1
            || bd.shape[0] != yd.shape[1]
            || yd.buf.dtype() != bd.buf.dtype()
            || !yd.buf.dtype().is_float()
        {
            return Ok(None);
        }
        add_bias_act(yd, bd, act)?
    };
    let (units, yshape) = (out.shape[1], out.shape.clone());
    let out = NDArray::from_data(ArrayData::Dense(out));
    // The output, as a handle without graph (no reference cycle through the node): the
    // backward reads it through operators, not through captured host memory, so it runs
    // wherever the output lives.
    let saved = act.map(|_| out.detach());
    // The product's operator, when it is folded into this node (recorded, and absorbing).
    let inner = if absorb { y.take_node() } else { None };
    let name = match (inner.is_some(), act.is_some()) {
        (false, false) => "bias_add",
        (false, true) => "bias_act",
        (true, false) => "dense_bias_add",
        (true, true) => "dense_bias_act",
    };
    let backward = move |g: &NDArray| -> Result<(NDArray, NDArray)> {
        if let (Some(a), Some(s)) = (act, &saved) {
            if let Some(both) = s.with_dense(|yd| fused_grads(g, yd, a))? {
                return Ok(both);
            }
        }
        let gp = match (act, &saved) {
            (Some(a), Some(s)) => s.with_dense(|yd| pre_activation_grad(g, yd, a))?,
            _ => g.clone(),
        };
        if gp.stype() != SType::Dense || !gp.has_shape(&yshape) {
            // A sparse or differently shaped head gradient: general reduction.
            let db = sum_to_shape(&gp, &[units])?;
            return Ok((gp, db));
        }
        let db = gp.with_dense(|gd| NDArray::from_buffer(gd.buf.column_sums(units)?, &[units]))?;
        Ok((gp, db))
    };
    Ok(Some(match inner {
        None => record_op(name, out, &[y, b], move |g| {
            let (gp, db) = backward(g)?;
            Ok(vec![Some(gp), Some(db)])
        }),
        Some(node) => {
            let mut inputs: Vec<&NDArray> = Vec::with_capacity(node.inputs.len() + 1);
            inputs.extend(node.inputs.iter());
            inputs.push(b);
            let inner = node.clone();
            record_op(name, out, &inputs, move |g| {
                let (gp, db) = backward(g)?;
                let mut grads = (inner.backward)(&gp)?;
                grads.push(Some(db));
                Ok(grads)
            })
        }
    }))
}

/// `act(y + b)` of a dense `(rows, units)` product and a `(units,)` bias of the same float
/// dtype, as new dense storage on their device.
fn add_bias_act(yd: &DenseData, bd: &DenseData, act: Option<FusedAct>) -> Result<DenseData> {
    Ok(DenseData {
        shape: Shape::from_slice(&yd.shape),
        buf: yd.buf.bias_act(&bd.buf, yd.shape[1], act)?,
    })
}

/// The common backward: `g` dense, shaped and typed like the saved output `yd`. Returns
/// `g * act'(y)` and its column sums (the bias gradient) from one read of `g`; `None` when `g`
/// is anything else.
fn fused_grads(g: &NDArray, yd: &DenseData, act: FusedAct) -> Result<Option<(NDArray, NDArray)>> {
    let units = yd.shape[1];
    let gg = g.read();
    let ArrayData::Dense(gd) = &*gg else {
        return Ok(None);
    };
    if gd.shape[..] != yd.shape[..] || gd.buf.dtype() != yd.buf.dtype() {
        return Ok(None);
    }
    let (gp, db) = gd.buf.bias_act_grad(&yd.buf, units, act)?;
    Ok(Some((
        NDArray::from_buffer(gp, &yd.shape)?,
        NDArray::from_buffer(db, &[units])?,
    )))
}

/// `g * act'(y)` for the saved output values `yd` when `g` is not a dense gradient shaped like
/// `y`: `act'(y)` (the fused pass over a gradient of ones) through the general (broadcasting,
/// sparse-aware) multiply.
fn pre_activation_grad(g: &NDArray, yd: &DenseData, act: FusedAct) -> Result<NDArray> {
    let deriv = NDArray::from_buffer(yd.buf.act_derivative(act)?, &yd.shape)?;
    g.mul(&deriv)
}
