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
use crate::storage::{RnnDims, Storage};
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
    let dims = check(mode, xproj, w_hh, b_hh, Some((h0, c0)), lengths, reverse)?;
    if let Some(out) = traced_sequence(mode, xproj, w_hh, b_hh, Some((h0, c0)), &dims)? {
        return Ok(out);
    }
    eager(xproj, w_hh, b_hh, h0, c0, dims)
}

/// [`rnn_sequence`] from zero initial states (`h0`, and `c0` for the LSTM, all zero): what a
/// layer called without states runs. The states are no operands, so a traced forward needs no
/// constant for them and a graph's backward computes no gradient for them.
pub fn rnn_sequence_zero_state(
    mode: RnnMode,
    xproj: &NDArray,
    w_hh: &NDArray,
    b_hh: &NDArray,
    lengths: Option<&[usize]>,
    reverse: bool,
) -> Result<NDArray> {
    let dims = check(mode, xproj, w_hh, b_hh, None, lengths, reverse)?;
    if let Some(out) = traced_sequence(mode, xproj, w_hh, b_hh, None, &dims)? {
        return Ok(out);
    }
    let (h0, c0) = zero_states(xproj, &dims)?;
    eager(xproj, w_hh, b_hh, &h0, c0.as_ref(), dims)
}

/// Initial states: `h0` with `c0` (given exactly for the LSTM), or `None`: zeros.
type States<'a> = Option<(&'a NDArray, Option<&'a NDArray>)>;

/// Validate the operands of one direction and return its sizes.
fn check(
    mode: RnnMode,
    xproj: &NDArray,
    w_hh: &NDArray,
    b_hh: &NDArray,
    states: States<'_>,
    lengths: Option<&[usize]>,
    reverse: bool,
) -> Result<RnnDims> {
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
    let (h0, c0) = match states {
        Some((h, c)) => (Some(h), c),
        None => (None, None),
    };
    if let Some(h) = h0 {
        expect("the initial hidden state", h, &[batch, hidden])?;
        match (mode == RnnMode::Lstm, c0) {
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
    }
    let dtype = xproj.dtype();
    for a in [w_hh, b_hh].into_iter().chain(h0).chain(c0) {
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
    crate::sparse::densifying(op, &[xproj, w_hh, b_hh])?;
    for s in h0.into_iter().chain(c0) {
        crate::sparse::densifying(op, &[s])?;
    }
    Ok(RnnDims {
        mode,
        steps,
        batch,
        hidden,
        reverse,
        lengths,
    })
}

/// While a trace runs at the forward's level: the sequence as the two graph nodes
/// [`rnn_sequence_saved`] and the slice of its packed rows (`None`: not tracing, run eagerly).
/// Valid lengths are host values a static graph cannot take: the trace is refused.
fn traced_sequence(
    mode: RnnMode,
    xproj: &NDArray,
    w_hh: &NDArray,
    b_hh: &NDArray,
    states: States<'_>,
    dims: &RnnDims,
) -> Result<Option<NDArray>> {
    if !crate::graph::tracing_outer() {
        return Ok(None);
    }
    if !dims.lengths.is_empty() {
        crate::graph::not_traceable(
            "rnn_sequence",
            "per-example valid lengths are host values a static graph cannot take",
        );
        return Ok(None);
    }
    let saved = rnn_sequence_saved(mode, xproj, w_hh, b_hh, states, dims.reverse)?;
    Ok(Some(saved.slice_run(
        0,
        0,
        1,
        dims.steps + mode.states(),
    )?))
}

/// Zero `h0` (and `c0` for the LSTM) of `(N, H)` on `xproj`'s device.
fn zero_states(xproj: &NDArray, dims: &RnnDims) -> Result<(NDArray, Option<NDArray>)> {
    let (dtype, device) = (xproj.dtype(), xproj.device());
    let shape = [dims.batch, dims.hidden];
    let zeros = || {
        NDArray::from_buffer(
            Storage::zeros_on(dtype, dims.batch * dims.hidden, device)?,
            &shape,
        )
    };
    let c0 = if dims.mode == RnnMode::Lstm {
        Some(zeros()?)
    } else {
        None
    };
    Ok((zeros()?, c0))
}

/// `f` over the dense buffers of a sequence's operands (`c0`'s if given).
fn with_buffers<R>(
    xproj: &NDArray,
    w_hh: &NDArray,
    b_hh: &NDArray,
    h0: &NDArray,
    c0: Option<&NDArray>,
    f: impl FnOnce(&Storage, &Storage, &Storage, &Storage, Option<&Storage>) -> Result<R>,
) -> Result<R> {
    let (xd, wd, bd, hd) = (
        xproj.dense_data()?,
        w_hh.dense_data()?,
        b_hh.dense_data()?,
        h0.dense_data()?,
    );
    let cd = c0.map(NDArray::dense_data).transpose()?;
    f(
        &xd.buf,
        &wd.buf,
        &bd.buf,
        &hd.buf,
        cd.as_ref().map(|c| &c.buf),
    )
}

/// The eager operator: the packed output, recorded with a backward holding the workspace.
fn eager(
    xproj: &NDArray,
    w_hh: &NDArray,
    b_hh: &NDArray,
    h0: &NDArray,
    c0: Option<&NDArray>,
    dims: RnnDims,
) -> Result<NDArray> {
    let mode = dims.mode;
    let (steps, batch, hidden) = (dims.steps, dims.batch, dims.hidden);
    let (out, ws) = with_buffers(xproj, w_hh, b_hh, h0, c0, |x, w, b, h, c| {
        x.rnn_forward(w, b, h, c, &dims)
    })?;
    let out = NDArray::from_buffer(out, &[steps + mode.states(), batch, hidden])?;
    let ws = NDArray::from_buffer(ws, &[steps, batch, mode.workspace_units() * hidden])?;
    let mut inputs = vec![xproj, w_hh, b_hh, h0];
    inputs.extend(c0);
    let w = w_hh.detach();
    Ok(record_op("rnn_sequence", out, &inputs, move |g| {
        rnn_sequence_grad(g, &ws, &w, &dims)
    }))
}

/// The sequence with its workspace: one `(T + S + T * U, N, H)` array, the packed output of
/// [`rnn_sequence`] (rows `0..T + S`) followed by the workspace its backward reads
/// (`U` = the mode's workspace units), recorded with that backward. This is the graph node a
/// traced sequence becomes (`Op::RnnSequence`, followed by the slice of the packed rows): a
/// graph value has one array, and the training graph's backward node
/// ([`rnn_saved_grads_flat`]) reads the workspace from it instead of running the forward again.
/// `states: None` starts from zeros and takes no state operands.
pub(crate) fn rnn_sequence_saved(
    mode: RnnMode,
    xproj: &NDArray,
    w_hh: &NDArray,
    b_hh: &NDArray,
    states: States<'_>,
    reverse: bool,
) -> Result<NDArray> {
    let mut inputs = vec![xproj, w_hh, b_hh];
    if let Some((h, c)) = states {
        inputs.push(h);
        inputs.extend(c);
    }
    if crate::graph::tracing_outer() {
        let op = crate::graph::Op::RnnSequence {
            mode,
            reverse,
            zero_state: states.is_none(),
        };
        return crate::graph::record_call(
            || op,
            &inputs,
            || rnn_sequence_saved(mode, xproj, w_hh, b_hh, states, reverse),
        );
    }
    let dims = check(mode, xproj, w_hh, b_hh, states, None, reverse)?;
    let (zh, zc);
    let (h0, c0) = match states {
        Some(s) => s,
        None => {
            (zh, zc) = zero_states(xproj, &dims)?;
            (&zh, zc.as_ref())
        }
    };
    let (t, n, h, s) = (dims.steps, dims.batch, dims.hidden, mode.states());
    let saved = with_buffers(xproj, w_hh, b_hh, h0, c0, |x, w, b, h, c| {
        x.rnn_forward_saved(w, b, h, c, &dims)
    })?;
    let ws_rows = t * mode.workspace_units();
    let keep = saved.clone();
    let out = NDArray::from_buffer(saved, &[t + s + ws_rows, n, h])?;
    let w = w_hh.detach();
    let with_states = states.is_some();
    Ok(record_op("rnn_sequence", out, &inputs, move |g| {
        let r = saved_backward(g, &keep, &w, &dims)?;
        let mut grads = vec![Some(r.dxproj), Some(r.dweight), Some(r.dbias)];
        if with_states {
            grads.push(Some(r.dh0));
            grads.extend(r.dc0.map(Some));
        }
        Ok(grads)
    }))
}

/// The sizes of a sequence from the `(T + S + T * U, N, H)` array of [`rnn_sequence_saved`].
fn saved_dims(mode: RnnMode, saved: &[usize], reverse: bool) -> Result<RnnDims> {
    let (s, u) = (mode.states(), mode.workspace_units());
    let bad = || {
        Error::shape(
            "rnn_sequence backward",
            format!(
                "{}: {saved:?} is no (T + {s} + T * {u}, N, H) sequence with its workspace",
                mode.name()
            ),
        )
    };
    if saved.len() != 3 || saved[0] < s || !(saved[0] - s).is_multiple_of(1 + u) {
        return Err(bad());
    }
    Ok(RnnDims {
        mode,
        steps: (saved[0] - s) / (1 + u),
        batch: saved[1],
        hidden: saved[2],
        reverse,
        lengths: Vec::new(),
    })
}

/// The head gradient of a sequence's packed output out of `g`, a gradient of either its saved
/// array of `saved_len` elements (the workspace rows' part is ignored: nothing differentiable
/// reads them) or of its packed rows alone (what a training graph hands over, see
/// [`packed_rows`]).
fn packed_head(g: &NDArray, saved_len: usize, dims: &RnnDims) -> Result<Storage> {
    let (t, n, h) = (dims.steps, dims.batch, dims.hidden);
    let packed_rows = t + dims.mode.states();
    let rows = packed_rows + t * dims.mode.workspace_units();
    let gd = g.dense_data()?;
    let of_packed = gd.shape[..] == [packed_rows, n, h];
    if !(of_packed || gd.shape[..] == [rows, n, h]) || saved_len != rows * n * h {
        return Err(Error::shape(
            "rnn_sequence backward",
            format!(
                "head gradient must be {:?} or {:?}, got {:?}",
                [packed_rows, n, h],
                [rows, n, h],
                gd.shape.to_vec()
            ),
        ));
    }
    if of_packed {
        Ok(gd.buf.clone())
    } else {
        gd.buf.copy_range(0, packed_rows * n * h)
    }
}

/// The gradients of a sequence's operands from the saved array and a head gradient (see
/// [`packed_head`]).
fn saved_backward(
    g: &NDArray,
    saved: &Storage,
    w: &NDArray,
    dims: &RnnDims,
) -> Result<RnnGradArrays> {
    let (t, n, h) = (dims.steps, dims.batch, dims.hidden);
    let head = packed_head(g, saved.len(), dims)?;
    let wd = w.dense_data()?;
    let r = head.rnn_backward_saved(saved, &wd.buf, dims)?;
    let gh = dims.mode.gates() * h;
    Ok(RnnGradArrays {
        dxproj: NDArray::from_buffer(r.dxproj, &[t, n, gh])?,
        dweight: NDArray::from_buffer(r.dweight, &[gh, h])?,
        dbias: NDArray::from_buffer(r.dbias, &[gh])?,
        dh0: NDArray::from_buffer(r.dh0, &[n, h])?,
        dc0: r
            .dc0
            .map(|c| NDArray::from_buffer(c, &[n, h]))
            .transpose()?,
    })
}

/// [`crate::storage::RnnGrads`] as arrays.
struct RnnGradArrays {
    dxproj: NDArray,
    dweight: NDArray,
    dbias: NDArray,
    dh0: NDArray,
    dc0: Option<NDArray>,
}

/// The backward node of a traced sequence in a training graph: from the head gradient `g` of
/// the [`rnn_sequence_saved`] array `saved` and the recurrent weight `w`, the gradients of
/// its operands (`xproj`, `w_hh`, `b_hh`, then `h0` and `c0` unless `zero_state`), flattened
/// and concatenated in that order into one 1-D array (a graph value has one array; the graph
/// slices each gradient out of it).
pub(crate) fn rnn_saved_grads_flat(
    g: &NDArray,
    saved: &NDArray,
    w: &NDArray,
    mode: RnnMode,
    reverse: bool,
    zero_state: bool,
) -> Result<NDArray> {
    let dims = saved_dims(mode, &saved.shape(), reverse)?;
    let gh = mode.gates() * dims.hidden;
    if !w.has_shape(&[gh, dims.hidden]) {
        return Err(Error::shape(
            "rnn_sequence backward",
            format!(
                "the recurrent weight must be {:?}, got {:?}",
                [gh, dims.hidden],
                w.shape()
            ),
        ));
    }
    let sd = saved.dense_data()?;
    let head = packed_head(g, sd.buf.len(), &dims)?;
    let wd = w.dense_data()?;
    let flat = head.rnn_backward_saved_flat(&sd.buf, &wd.buf, &dims, !zero_state)?;
    let total = flat.len();
    NDArray::from_buffer(flat, &[total])
}

/// The packed rows of a saved array of `rows` rows (`T + S` of `T + S + T * U`), if it is one.
pub(crate) fn packed_rows(mode: RnnMode, rows: usize) -> Option<usize> {
    let (s, u) = (mode.states(), mode.workspace_units());
    (rows >= s && (rows - s).is_multiple_of(1 + u)).then(|| (rows - s) / (1 + u) + s)
}

/// The sizes of the gradients [`rnn_saved_grads_flat`] concatenates, in its order, for a
/// sequence of `t` steps, `n` examples and `h` units.
pub(crate) fn saved_grad_shapes(
    mode: RnnMode,
    t: usize,
    n: usize,
    h: usize,
    zero_state: bool,
) -> Vec<Vec<usize>> {
    let gh = mode.gates() * h;
    let mut shapes = vec![vec![t, n, gh], vec![gh, h], vec![gh]];
    if !zero_state {
        shapes.extend(std::iter::repeat_n(vec![n, h], mode.states()));
    }
    shapes
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
