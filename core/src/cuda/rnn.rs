//! The recurrent layers on CUDA ([`RnnOps`]): `kernels/rnn.cu` plus cuBLAS, the CPU's time
//! loop (`cpu/rnn.rs`) with the same equations, gate order and workspace layout.
//!
//! Forward, per step: one cuBLAS product `hh = h W^T` for every gate and example, then one
//! launch of the gate pass (`rnn_step`, a thread per (example, unit)), which updates the
//! states in place and writes the step's output and workspace row. Backward, per step in
//! reverse: the gate gradients (`rnn_step_grad`), one product `dh_prev = drec W`, and its
//! addition to the running `dh` (`rnn_add_dh`); then one product for the recurrent weight's
//! gradient over every step (the workspace's `h_prev` columns gathered contiguous first) and
//! a column sum for the bias's. The steps queue on the device's one stream, so each launch
//! sees the previous one's results without a host synchronization.

use cudarc::cublas::Gemm;
use cudarc::driver::{CudaSlice, PushKernelArg};

use super::elementwise::{float_only, kname, same_dtype, typed};
use super::launch::{driver_err, grid};
use super::linalg::{gemm_acc, BlasElement};
use super::storage::{CudaElement, CudaStorage};
use crate::error::{Error, Result};
use crate::storage::{MatMul, RnnDims, RnnGrads, RnnMode, RnnOps};

/// The kernels' mode number (`mode` in rnn.cu).
fn mode_code(m: RnnMode) -> i32 {
    match m {
        RnnMode::RnnTanh => 0,
        RnnMode::RnnRelu => 1,
        RnnMode::Lstm => 2,
        RnnMode::Gru => 3,
    }
}

/// An error unless `got` is `want` elements (the operator checks the shapes; a call that
/// slipped past it stops here, not out of bounds).
fn check_len(op: &'static str, what: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::shape(
            op,
            format!("{what} has {got} elements, expected {want}"),
        ))
    }
}

/// Every example's valid length on the device (`steps` each when none are given), checked.
fn lengths(st: &CudaStorage, op: &'static str, d: &RnnDims) -> Result<CudaSlice<i64>> {
    if !d.lengths.is_empty() && d.lengths.len() != d.batch {
        return Err(Error::shape(
            op,
            format!(
                "{} sequence lengths for {} examples",
                d.lengths.len(),
                d.batch
            ),
        ));
    }
    let lens: Vec<i64> = (0..d.batch).map(|r| d.len_of(r) as i64).collect();
    if lens.iter().any(|&l| l as usize > d.steps) {
        return Err(Error::shape(
            op,
            format!("sequence lengths above the {} steps", d.steps),
        ));
    }
    st.dev.stream.clone_htod(&lens).map_err(driver_err(op))
}

/// `dst[dst_off + i] = src[(i / w) * stride + off + i % w]` for `i < rows * w`.
#[allow(clippy::too_many_arguments)]
fn gather_cols<T: CudaElement>(
    st: &CudaStorage,
    op: &'static str,
    src: &CudaSlice<T>,
    dst: &mut CudaSlice<T>,
    rows: usize,
    w: usize,
    stride: usize,
    off: usize,
    dst_off: usize,
) -> Result<()> {
    if rows * w == 0 {
        return Ok(());
    }
    if (rows - 1) * stride + off + w > src.len() || dst_off + rows * w > dst.len() {
        return Err(Error::shape(op, "a state copy runs past its buffer"));
    }
    let f = st.dev.function("rnn.cu", kname("rnn_gather", T::SUFFIX))?;
    let a = [
        rows as u64,
        w as u64,
        stride as u64,
        off as u64,
        dst_off as u64,
    ];
    let mut l = st.dev.stream.launch_builder(&f);
    l.arg(src).arg(dst);
    for v in &a {
        l.arg(v);
    }
    // SAFETY: the last source element read is (rows - 1) * stride + off + w - 1 and the last
    // destination written dst_off + rows * w - 1, both inside their buffers (checked above).
    unsafe { l.launch(grid(rows * w)) }.map_err(driver_err(op))?;
    Ok(())
}

fn forward_t<T: BlasElement>(
    x: &CudaStorage,
    w: &CudaStorage,
    b: &CudaStorage,
    h0: &CudaStorage,
    c0: Option<&CudaStorage>,
    d: &RnnDims,
) -> Result<(CudaStorage, CudaStorage)>
where
    cudarc::cublas::CudaBlas: Gemm<T>,
{
    const OP: &str = "rnn";
    let (steps, n, h) = (d.steps, d.batch, d.hidden);
    let lstm = d.mode == RnnMode::Lstm;
    let gh = d.mode.gates() * h;
    let wu = d.mode.workspace_units() * h;
    let (xs, ws_, bs, h0s) = (
        typed::<T>(OP, x)?,
        typed::<T>(OP, w)?,
        typed::<T>(OP, b)?,
        typed::<T>(OP, h0)?,
    );
    check_len(OP, "the input projection", xs.len(), steps * n * gh)?;
    check_len(OP, "the recurrent weight", ws_.len(), gh * h)?;
    check_len(OP, "the recurrent bias", bs.len(), gh)?;
    check_len(OP, "the initial hidden state", h0s.len(), n * h)?;
    let c0s = match (lstm, c0) {
        (true, Some(c)) => {
            let cs = typed::<T>(OP, c)?;
            check_len(OP, "the initial cell state", cs.len(), n * h)?;
            Some(cs)
        }
        (true, None) => return Err(Error::arg(OP, "the LSTM needs an initial cell state")),
        (false, _) => None,
    };
    let mut out = CudaStorage::alloc::<T>(&x.dev, OP, (steps + d.mode.states()) * n * h)?;
    let mut ws = CudaStorage::alloc::<T>(&x.dev, OP, steps * n * wu)?;
    if n * h == 0 {
        return Ok((x.with(out), x.with(ws)));
    }
    let lens = lengths(x, OP, d)?;
    let mut hs = CudaStorage::alloc::<T>(&x.dev, OP, n * h)?;
    gather_cols(x, OP, h0s, &mut hs, 1, n * h, 0, 0, 0)?;
    let mut cs = CudaStorage::alloc::<T>(&x.dev, OP, if lstm { n * h } else { 0 })?;
    if let Some(c0s) = c0s {
        gather_cols(x, OP, c0s, &mut cs, 1, n * h, 0, 0, 0)?;
    }
    let mut hh = CudaStorage::alloc::<T>(&x.dev, OP, n * gh)?;
    // hh (n x gh) = hs (n x h) . W^T, W stored (gh, h).
    let mm = MatMul {
        m: n,
        n: gh,
        k: h,
        ta: false,
        tb: true,
    };
    let f = x.dev.function("rnn.cu", kname("rnn_step", T::SUFFIX))?;
    let (b64, h64, wu64) = (n as u64, h as u64, wu as u64);
    let (mode, rev) = (mode_code(d.mode), i32::from(d.reverse));
    for step in 0..steps {
        gemm_acc(x, &hs, 0, ws_, 0, &mut hh, 0, &mm, false)?;
        let s64 = step as u64;
        let mut l = x.dev.stream.launch_builder(&f);
        l.arg(xs).arg(&hh).arg(bs).arg(&mut hs).arg(&mut cs);
        l.arg(&mut ws).arg(&mut out).arg(&lens);
        l.arg(&s64)
            .arg(&b64)
            .arg(&h64)
            .arg(&wu64)
            .arg(&mode)
            .arg(&rev);
        // SAFETY: every row a step reads or writes is time * n + r with time below the
        // example's length, itself at most `steps` (checked by `lengths`): x holds steps x n
        // x gh, the workspace steps x n x wu, the output (steps + states) x n x h; hh, hs
        // (and cs for the LSTM, the only mode that reads it) hold n rows.
        unsafe { l.launch(grid(n * h)) }.map_err(driver_err(OP))?;
    }
    let tail = steps * n * h;
    gather_cols(x, OP, &hs, &mut out, 1, n * h, 0, 0, tail)?;
    if lstm {
        gather_cols(x, OP, &cs, &mut out, 1, n * h, 0, 0, tail + n * h)?;
    }
    Ok((x.with(out), x.with(ws)))
}

fn backward_t<T: BlasElement>(
    g: &CudaStorage,
    ws: &CudaStorage,
    w: &CudaStorage,
    d: &RnnDims,
) -> Result<RnnGrads<CudaStorage>>
where
    cudarc::cublas::CudaBlas: Gemm<T>,
{
    const OP: &str = "rnn backward";
    let (steps, n, h) = (d.steps, d.batch, d.hidden);
    let (lstm, gru) = (d.mode == RnnMode::Lstm, d.mode == RnnMode::Gru);
    let gh = d.mode.gates() * h;
    let wu = d.mode.workspace_units() * h;
    let (gs, wss, wts) = (typed::<T>(OP, g)?, typed::<T>(OP, ws)?, typed::<T>(OP, w)?);
    check_len(
        OP,
        "the output gradient",
        gs.len(),
        (steps + d.mode.states()) * n * h,
    )?;
    check_len(OP, "the workspace", wss.len(), steps * n * wu)?;
    check_len(OP, "the recurrent weight", wts.len(), gh * h)?;
    let dev = &g.dev;
    let mut dx = CudaStorage::alloc::<T>(dev, OP, steps * n * gh)?;
    let mut drec_all = CudaStorage::alloc::<T>(dev, OP, if gru { steps * n * gh } else { 0 })?;
    let mut dh = CudaStorage::alloc::<T>(dev, OP, n * h)?;
    let mut dc = CudaStorage::alloc::<T>(dev, OP, if lstm { n * h } else { 0 })?;
    let mut dweight = CudaStorage::alloc::<T>(dev, OP, gh * h)?;
    let mut dbias = CudaStorage::alloc::<T>(dev, OP, gh)?;
    if n * h > 0 {
        let tail = steps * n * h;
        gather_cols(g, OP, gs, &mut dh, 1, n * h, 0, tail, 0)?;
        if lstm {
            gather_cols(g, OP, gs, &mut dc, 1, n * h, 0, tail + n * h, 0)?;
        }
        let lens = lengths(g, OP, d)?;
        let mut drec = CudaStorage::alloc::<T>(dev, OP, n * gh)?;
        let mut dhp = CudaStorage::alloc::<T>(dev, OP, n * h)?;
        // dhp (n x h) = drec (n x gh) . W (gh x h).
        let mm = MatMul {
            m: n,
            n: h,
            k: gh,
            ta: false,
            tb: false,
        };
        let fg = dev.function("rnn.cu", kname("rnn_step_grad", T::SUFFIX))?;
        let fa = dev.function("rnn.cu", kname("rnn_add_dh", T::SUFFIX))?;
        let (b64, h64, wu64) = (n as u64, h as u64, wu as u64);
        let (mode, rev) = (mode_code(d.mode), i32::from(d.reverse));
        for step in (0..steps).rev() {
            let s64 = step as u64;
            let mut l = dev.stream.launch_builder(&fg);
            l.arg(gs).arg(wss).arg(&mut dh).arg(&mut dc).arg(&mut dx);
            l.arg(&mut drec).arg(&mut drec_all).arg(&lens);
            l.arg(&s64)
                .arg(&b64)
                .arg(&h64)
                .arg(&wu64)
                .arg(&mode)
                .arg(&rev);
            // SAFETY: as the forward step: rows are time * n + r with time below the
            // example's length (at most `steps`); g holds (steps + states) x n x h, the
            // workspace steps x n x wu, dx (and drec_all for the GRU, the only mode that
            // writes it) steps x n x gh, drec n x gh, dh (and dc for the LSTM) n x h.
            unsafe { l.launch(grid(n * h)) }.map_err(driver_err(OP))?;
            gemm_acc(g, &drec, 0, wts, 0, &mut dhp, 0, &mm, false)?;
            let mut l = dev.stream.launch_builder(&fa);
            l.arg(&mut dh)
                .arg(&dhp)
                .arg(&lens)
                .arg(&s64)
                .arg(&b64)
                .arg(&h64);
            // SAFETY: dh, dhp hold n x h, the lengths n.
            unsafe { l.launch(grid(n * h)) }.map_err(driver_err(OP))?;
        }
    }
    let rows = steps * n;
    if rows * gh > 0 {
        let drec_rows = if gru { &drec_all } else { &dx };
        // dW (gh x h) = drec_rows^T (gh x rows) . h_prev (rows x h), h_prev the last h of
        // every workspace row, made contiguous for cuBLAS.
        let mut hprev = CudaStorage::alloc::<T>(dev, OP, rows * h)?;
        gather_cols(g, OP, wss, &mut hprev, rows, h, wu, wu - h, 0)?;
        let mm = MatMul {
            m: gh,
            n: h,
            k: rows,
            ta: true,
            tb: false,
        };
        gemm_acc(g, drec_rows, 0, &hprev, 0, &mut dweight, 0, &mm, false)?;
        let f = dev.function("rnn.cu", kname("rnn_col_sum", T::SUFFIX))?;
        let (r64, c64) = (rows as u64, gh as u64);
        let mut l = dev.stream.launch_builder(&f);
        l.arg(drec_rows).arg(&mut dbias).arg(&r64).arg(&c64);
        // SAFETY: drec_rows holds rows x gh values, dbias gh.
        unsafe { l.launch(grid(gh)) }.map_err(driver_err(OP))?;
    }
    Ok(RnnGrads {
        dxproj: g.with(dx),
        dweight: g.with(dweight),
        dbias: g.with(dbias),
        dh0: g.with(dh),
        dc0: lstm.then(|| g.with(dc)),
    })
}

impl RnnOps for CudaStorage {
    fn rnn_forward(
        &self,
        w: &Self,
        b: &Self,
        h0: &Self,
        c0: Option<&Self>,
        dims: &RnnDims,
    ) -> Result<(Self, Self)> {
        for o in [w, b, h0].into_iter().chain(c0) {
            same_dtype("rnn", self, o)?;
        }
        float_only!(self, "rnn", T => forward_t::<T>(self, w, b, h0, c0, dims))
    }
    fn rnn_backward(&self, ws: &Self, w: &Self, dims: &RnnDims) -> Result<RnnGrads<Self>> {
        same_dtype("rnn backward", self, ws)?;
        same_dtype("rnn backward", self, w)?;
        float_only!(self, "rnn backward", T => backward_t::<T>(self, ws, w, dims))
    }
}
