//! `rnn_sequence`: one direction of one recurrent layer (RNN tanh/relu, LSTM, GRU) over a
//! whole sequence as one recorded operator, as MXNet's fused `RNN` operator and cuDNN run it.
//!
//! The caller computes the input projection of every step with one product before (`xproj =
//! x W_ih^T + b_ih`, `(T, N, G*H)`); the storage's kernel runs the time loop (per step one
//! product `h W_hh^T` for all gates and one fused gate pass) and its backward. Recording one
//! node per sequence instead of a dozen per step keeps the autograd bookkeeping out of the
//! time loop. The backward is the crate-private operator [`rnn_sequence_grad`], one storage
//! call, so a device backend takes it over with its kernels.

use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::storage::RnnDims;
use crate::NDArray;

pub use crate::storage::RnnMode;

/// Runs one direction of a recurrent layer over a sequence and returns the packed `(T + S, N,
/// H)` array: rows `0..T` the hidden state at every time step (zero past an example's valid
/// length), then the `S` final states (`h`, and `c` for the LSTM; an example's final state is
/// its state at its last valid step). Differentiable in every array argument.
///
/// - `xproj`: `(T, N, G*H)`, the input projection `x W_ih^T + b_ih` of every step, gates in
///   MXNet's order (LSTM `i, f, g, o`; GRU `r, z, n`), `G` = [`RnnMode::gates`].
/// - `w_hh`: `(G*H, H)`, `b_hh`: `(G*H,)`, the recurrent weight and bias.
/// - `h0`: `(N, H)`; `c0`: `(N, H)`, given exactly for the LSTM.
/// - `lengths`: per-example valid lengths (each at most `T`); `None`: all `T`.
/// - `reverse`: walk each example from its last valid step back to step 0 (the backward
///   direction of a bidirectional layer); outputs stay at their time positions.
///
/// ```
/// use sparrow_core::{ops::rnn::{rnn_sequence, RnnMode}, NDArray, DType};
/// let (t, n, h) = (3, 2, 4);
/// let xproj = NDArray::ones(&[t, n, 4 * h], DType::F32).unwrap();
/// let w = NDArray::zeros(&[4 * h, h], DType::F32).unwrap();
/// let b = NDArray::zeros(&[4 * h], DType::F32).unwrap();
/// let h0 = NDArray::zeros(&[n, h], DType::F32).unwrap();
/// let out = rnn_sequence(RnnMode::Lstm, &xproj, &w, &b, &h0, Some(&h0), Some(&[3, 1]), false)
///     .unwrap();
/// assert_eq!(out.shape(), vec![t + 2, n, h]);
/// ```
#[allow(clippy::too_many_arguments)]
pub fn rnn_sequence(
    mode: RnnMode,
    xproj: &NDArray,
    w_hh: &NDArray,
    b_hh: &NDArray,
    h0: &NDArray,
    c0: Option<&NDArray>,
    lengths: Option<&[usize]>,
    reverse: bool,
) -> Result<NDArray> {
    let op = "rnn_sequence";
    let xs = xproj.shape();
    let g = mode.gates();
    if xs.len() != 3 || xs[2] == 0 || !xs[2].is_multiple_of(g) {
        return Err(Error::shape(
            op,
            format!(
                "{}: the input projection must be (T, N, {g} * hidden), got {xs:?}",
                mode.name()
            ),
        ));
    }
    let (steps, batch, hidden) = (xs[0], xs[1], xs[2] / g);
    let expect = |what: &str, a: &NDArray, shape: &[usize]| -> Result<()> {
        if a.has_shape(shape) {
            Ok(())
        } else {
            Err(Error::shape(
                op,
                format!(
                    "{}: {what} must be {shape:?} (input projection {xs:?}), got {:?}",
                    mode.name(),
                    a.shape()
                ),
            ))
        }
    };
    expect("the recurrent weight", w_hh, &[g * hidden, hidden])?;
    expect("the recurrent bias", b_hh, &[g * hidden])?;
    expect("the initial hidden state", h0, &[batch, hidden])?;
    match (mode == crate::storage::RnnMode::Lstm, c0) {
        (true, Some(c)) => expect("the initial cell state", c, &[batch, hidden])?,
        (true, None) => {
            return Err(Error::arg(op, "lstm needs an initial cell state c0"));
        }
        (false, Some(_)) => {
            return Err(Error::arg(
                op,
                format!("{} takes no cell state, got c0", mode.name()),
            ));
        }
        (false, None) => {}
    }
    let dtype = xproj.dtype();
    for a in [w_hh, b_hh, h0].into_iter().chain(c0) {
        if a.dtype() != dtype {
            return Err(Error::dtype_mismatch(op, dtype, a.dtype()));
        }
    }
    if !dtype.is_float() {
        return Err(Error::dtype(
            op,
            format!("needs float32 or float64 arrays, got {}", dtype.name()),
        ));
    }
    let lengths = match lengths {
        None => Vec::new(),
        Some(l) => {
            if l.len() != batch {
                return Err(Error::shape(
                    op,
                    format!("{} valid lengths for a batch of {batch}", l.len()),
                ));
            }
            if let Some((i, &v)) = l.iter().enumerate().find(|(_, &v)| v > steps) {
                return Err(Error::arg(
                    op,
                    format!("valid length {v} of example {i} exceeds the {steps} time steps"),
                ));
            }
            l.to_vec()
        }
    };
    let dims = RnnDims {
        mode,
        steps,
        batch,
        hidden,
        reverse,
        lengths,
    };
    crate::sparse::densifying("rnn_sequence", &[xproj, w_hh, b_hh, h0])?;
    if let Some(c) = c0 {
        crate::sparse::densifying("rnn_sequence", &[c])?;
    }
    let (xd, wd, bd, hd) = (
        xproj.dense_data()?,
        w_hh.dense_data()?,
        b_hh.dense_data()?,
        h0.dense_data()?,
    );
    let cd = c0.map(NDArray::dense_data).transpose()?;
    let (out, ws) = xd.buf.rnn_forward(
        &wd.buf,
        &bd.buf,
        &hd.buf,
        cd.as_ref().map(|c| &c.buf),
        &dims,
    )?;
    let out = NDArray::from_buffer(out, &[steps + mode.states(), batch, hidden])?;
    let ws = NDArray::from_buffer(ws, &[steps, batch, mode.workspace_units() * hidden])?;
    let mut inputs = vec![xproj, w_hh, b_hh, h0];
    inputs.extend(c0);
    let w = w_hh.detach();
    Ok(record_op("rnn_sequence", out, &inputs, move |g| {
        rnn_sequence_grad(g, &ws, &w, &dims)
    }))
}

/// The backward of [`rnn_sequence`]: the gradients of `xproj`, `w_hh`, `b_hh`, `h0` (and `c0`)
/// from the head gradient `g` of the packed output and the forward's workspace `ws`.
fn rnn_sequence_grad(
    g: &NDArray,
    ws: &NDArray,
    w: &NDArray,
    dims: &RnnDims,
) -> Result<Vec<Option<NDArray>>> {
    let (t, n, h) = (dims.steps, dims.batch, dims.hidden);
    let gh = dims.mode.gates() * h;
    let (gd, wsd, wd) = (g.dense_data()?, ws.dense_data()?, w.dense_data()?);
    let expect = [t + dims.mode.states(), n, h];
    if gd.shape[..] != expect {
        return Err(Error::shape(
            "rnn_sequence backward",
            format!(
                "head gradient must be {expect:?}, got {:?}",
                gd.shape.to_vec()
            ),
        ));
    }
    let r = gd.buf.rnn_backward(&wsd.buf, &wd.buf, dims)?;
    let mut grads = vec![
        Some(NDArray::from_buffer(r.dxproj, &[t, n, gh])?),
        Some(NDArray::from_buffer(r.dweight, &[gh, h])?),
        Some(NDArray::from_buffer(r.dbias, &[gh])?),
        Some(NDArray::from_buffer(r.dh0, &[n, h])?),
    ];
    if let Some(dc0) = r.dc0 {
        grads.push(Some(NDArray::from_buffer(dc0, &[n, h])?));
    }
    Ok(grads)
}
