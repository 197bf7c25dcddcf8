//! `act(y + b)` for a dense `(rows, units)` product and a `(units,)` bias, as one recorded op.
//!
//! Dense layers add their bias to every row of the product and usually apply an activation.
//! Through core's general ops that is a broadcast `add` (strided loop forward; backward a
//! pass-through plus a reduction over the broadcast axis, each with its shape bookkeeping) and
//! then an activation op, each recorded, each allocating its output and its gradient. In the
//! tutorial's 10-row steps those small ops are mostly per-op overhead. Here the forward is a row
//! loop plus one in-place activation pass, and the backward scales the incoming gradient by the
//! activation's derivative (a function of the saved output) and sums its rows for the bias.
//! With no activation the incoming gradient is handed through unchanged (no copy).

use crate::autograd::record_op;
use crate::cpu::HostElement;
use crate::ops::{map_assign, sum_to_shape, zip_assign, zip_slices, PAR_THRESHOLD};
use crate::storage::Storage;
use crate::{float_dispatch, ArrayData, DenseData, Float, NDArray, Result, SType, Shape};

/// Row length from which [`bias_act`] adds the bias and applies the activation in one pass per
/// row: 32 floats are one iteration of the 4x-unrolled 8-lane loop `zip_assign` compiles to.
const FUSE_MIN_UNITS: usize = 32;

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

    /// `v[i] = act(v[i])`, in parallel chunks above core's [`PAR_THRESHOLD`] (as the
    /// standalone activation ops are), on this thread below it.
    fn apply_in_place<T: Float + Send>(self, v: &mut [T]) {
        use rayon::prelude::*;
        if v.len() >= PAR_THRESHOLD {
            v.par_chunks_mut(PAR_THRESHOLD / 2)
                .for_each(|c| self.apply_chunk(c));
        } else {
            self.apply_chunk(v);
        }
    }

    /// The loop of [`FusedAct::apply_in_place`]. The match is outside the loop: with it
    /// inside, the loop stayed scalar (callgrind: 7x the instructions of the vectorized map).
    fn apply_chunk<T: Float>(self, v: &mut [T]) {
        match self {
            FusedAct::Sigmoid => map_assign(v, |x: T| crate::ops::sigmoid(x)),
            FusedAct::Tanh => map_assign(v, |x: T| x.tanh()),
            FusedAct::Relu => map_assign(v, |x: T| if x > T::zero() { x } else { T::zero() }),
        }
    }

    /// `row[j] = act(row[j] + b[j])` for every `units`-long row of `v`, in one pass per row on
    /// the calling thread (AVX2 through [`zip_assign`]); bit-identical to adding the bias and
    /// then applying [`FusedAct::apply_in_place`]. The match is outside the loops, as there.
    fn add_bias_apply<T: Float>(self, v: &mut [T], b: &[T]) {
        fn rows<T: Float>(v: &mut [T], b: &[T], f: impl Fn(T, T) -> T + Copy) {
            for row in v.chunks_exact_mut(b.len()) {
                zip_assign(row, b, f);
            }
        }
        match self {
            FusedAct::Sigmoid => rows(v, b, |x: T, c: T| crate::ops::sigmoid(x + c)),
            FusedAct::Tanh => rows(v, b, |x: T, c: T| (x + c).tanh()),
            FusedAct::Relu => rows(v, b, |x: T, c: T| {
                let y = x + c;
                if y > T::zero() {
                    y
                } else {
                    T::zero()
                }
            }),
        }
    }

    /// `g[i] * act'(x_i)` from the outputs `y[i] = act(x_i)`.
    fn grad_from_output<T: Float + Send + Sync>(self, g: &[T], y: &[T]) -> Vec<T> {
        match self {
            FusedAct::Sigmoid => zip_slices(g, y, |gv: T, yv: T| gv * (yv * (T::one() - yv))),
            FusedAct::Tanh => zip_slices(g, y, |gv: T, yv: T| gv * (T::one() - yv * yv)),
            FusedAct::Relu => zip_slices(
                g,
                y,
                |gv: T, yv: T| if yv > T::zero() { gv } else { T::zero() },
            ),
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
        let db = gp.with_dense(|gd| {
            float_dispatch!(gd.buf.dtype(), "bias_act backward", T => {
                NDArray::from_vec(column_sums(gd.buf.as_slice::<T>().unwrap(), units), &[units])
            })
        })?;
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
/// dtype, as new dense storage.
fn add_bias_act(yd: &DenseData, bd: &DenseData, act: Option<FusedAct>) -> Result<DenseData> {
    let units = yd.shape[1];
    let buf = float_dispatch!(yd.buf.dtype(), "bias_act", T => {
        let (ys, bs) = (yd.buf.as_slice::<T>().unwrap(), bd.buf.as_slice::<T>().unwrap());
        let mut out = ys.to_vec();
        if units > 0 {
            match act {
                // Small outputs (a training step's few rows) with rows of at least one
                // unrolled AVX2 iteration: bias and activation in one pass per row. Narrower
                // rows would run the activation in the loop's scalar tail, so they (and large
                // outputs) add the bias per row and map the activation over the whole buffer.
                Some(a) if out.len() < PAR_THRESHOLD && units >= FUSE_MIN_UNITS => {
                    a.add_bias_apply(&mut out, bs)
                }
                _ => {
                    for row in out.chunks_exact_mut(units) {
                        zip_assign(row, bs, |v: T, c: T| v + c);
                    }
                    if let Some(a) = act {
                        a.apply_in_place(&mut out);
                    }
                }
            }
        }
        T::into_buffer(out)
    });
    Ok(DenseData {
        shape: Shape::from_slice(&yd.shape),
        buf: Storage::from(buf),
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
    float_dispatch!(yd.buf.dtype(), "bias_act backward", T => {
        let (gs, ys) = (gd.buf.as_slice::<T>().unwrap(), yd.buf.as_slice::<T>().unwrap());
        let gp = act.grad_from_output(gs, ys);
        let db = NDArray::from_vec(column_sums(&gp, units), &[units])?;
        Ok(Some((NDArray::from_vec(gp, &yd.shape)?, db)))
    })
}

/// `g * act'(y)` for the saved output values `yd` when `g` is not a dense gradient shaped like
/// `y`: `act'(y)` (the fused pass over a gradient of ones) through the general (broadcasting,
/// sparse-aware) multiply.
fn pre_activation_grad(g: &NDArray, yd: &DenseData, act: FusedAct) -> Result<NDArray> {
    float_dispatch!(yd.buf.dtype(), "bias_act backward", T => {
        let ys = yd.buf.as_slice::<T>().unwrap();
        let deriv = NDArray::from_vec(act.grad_from_output(&vec![1.0 as T; ys.len()], ys), &yd.shape)?;
        g.mul(&deriv)
    })
}

/// Sums of the rows of a row-major `(len / units, units)` matrix.
fn column_sums<T: Float>(g: &[T], units: usize) -> Vec<T> {
    let mut acc = vec![T::zero(); units];
    if units > 0 {
        for row in g.chunks_exact(units) {
            for (a, &v) in acc.iter_mut().zip(row) {
                *a = *a + v;
            }
        }
    }
    acc
}
