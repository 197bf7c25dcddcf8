//! The CPU's recurrent family ([`RnnOps`]): the time loop of one direction of one recurrent
//! layer. Per step, one product `h W_hh^T` for all gates through `gemm_into` and one pass of
//! the gate equations over the rows (the activations saved for the backward in the same
//! pass); the backward walks the steps in reverse with one product `dgates W_hh` per step and
//! ends with a single product for the recurrent weight's gradient over every step.
//!
//! Rows (examples) past their valid length keep their states and output zeros. The reverse
//! direction maps step `s` of example `r` to time `len_r - 1 - s`, so each sequence starts at
//! its own end. Every buffer the backward reads is indexed by time, so the weight gradient's
//! product pairs each step's gate gradients with the hidden state that step read.

use super::gemm::{gemm_into, GemmScalar};
use super::map::sigmoid;
use super::{CpuStorage, HostElement};
use crate::dtype::Float;
use crate::error::{Error, Result};
use crate::float_dispatch;
use crate::storage::{RnnDims, RnnGrads, RnnMode, RnnOps};

/// `tanh(x)` through the crate's inlinable `exp` (vectorizes, unlike libm's `tanhf`):
/// `(1 - e) / (1 + e)` with `e = exp(-2|x|)`, the sign restored. Within a few 1e-8 of the
/// true value in f32 (absolute), exact to libm's `exp` in f64.
#[inline(always)]
pub(crate) fn tanh_fast<T: Float>(x: T) -> T {
    let a = x.abs();
    let e = (-(a + a)).exp_fast_nonpos();
    let t = (T::one() - e) / (T::one() + e);
    if x < T::zero() {
        -t
    } else {
        t
    }
}

/// The time index step `step` of example `r` (valid length `len`, `step < len`) reads.
#[inline]
fn time_of(d: &RnnDims, step: usize, len: usize) -> usize {
    if d.reverse {
        len - 1 - step
    } else {
        step
    }
}

/// The forward of one direction: `(packed output, workspace)`, see [`RnnOps::rnn_forward`].
fn forward_typed<T: GemmScalar>(
    x: &[T],
    w: &[T],
    b: &[T],
    h0: &[T],
    c0: Option<&[T]>,
    d: &RnnDims,
) -> (Vec<T>, Vec<T>) {
    let (out_len, ws_len) = saved_lens(d);
    let mut out = vec![T::zero(); out_len];
    let mut ws = vec![T::zero(); ws_len];
    forward_into(x, w, b, h0, c0, d, &mut out, &mut ws);
    (out, ws)
}

/// Elements of the packed output and of the workspace of a sequence.
fn saved_lens(d: &RnnDims) -> (usize, usize) {
    let (steps, n, h) = (d.steps, d.batch, d.hidden);
    (
        (steps + d.mode.states()) * n * h,
        steps * n * d.mode.workspace_units() * h,
    )
}

/// The forward into zeroed `out` (the packed output) and `ws` (the workspace).
#[allow(clippy::too_many_arguments)]
fn forward_into<T: GemmScalar>(
    x: &[T],
    w: &[T],
    b: &[T],
    h0: &[T],
    c0: Option<&[T]>,
    d: &RnnDims,
    out: &mut [T],
    ws: &mut [T],
) {
    let (steps, n, h) = (d.steps, d.batch, d.hidden);
    let gh = d.mode.gates() * h;
    let zero = T::zero();
    let mut hs = h0.to_vec();
    let mut cs = c0.map(<[T]>::to_vec).unwrap_or_default();
    let mut hh = vec![zero; n * gh];
    for step in 0..steps {
        // All gates' recurrent parts of every row at once: hh = h W^T, W stored (G*H, H).
        gemm_into(n, gh, h, &hs, h as isize, 1, w, 1, h as isize, &mut hh);
        let rows = Rows {
            d,
            step,
            x,
            hh: &hh,
            b,
        };
        gate_pass(&rows, &mut hs, &mut cs, ws, out);
    }
    let tail = steps * n * h;
    out[tail..tail + n * h].copy_from_slice(&hs);
    if d.mode == RnnMode::Lstm {
        out[tail + n * h..].copy_from_slice(&cs);
    }
}

/// What one forward step's gate pass reads.
struct Rows<'a, T> {
    d: &'a RnnDims,
    step: usize,
    x: &'a [T],
    hh: &'a [T],
    b: &'a [T],
}

/// The gate pass of one forward step over every row: the AVX2+FMA copy where the CPU has it
/// (8 lanes for the inlined exps), else the baseline build's.
fn gate_pass<T: Float>(r: &Rows<T>, hs: &mut [T], cs: &mut [T], ws: &mut [T], out: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if super::elementwise::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        unsafe { gate_pass_avx2(r, hs, cs, ws, out) };
        return;
    }
    gate_pass_body(r, hs, cs, ws, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gate_pass_avx2<T: Float>(
    r: &Rows<T>,
    hs: &mut [T],
    cs: &mut [T],
    ws: &mut [T],
    out: &mut [T],
) {
    gate_pass_body(r, hs, cs, ws, out)
}

#[inline(always)]
fn gate_pass_body<T: Float>(rw: &Rows<T>, hs: &mut [T], cs: &mut [T], ws: &mut [T], out: &mut [T]) {
    let (d, step, x, hh, b) = (rw.d, rw.step, rw.x, rw.hh, rw.b);
    let (n, h) = (d.batch, d.hidden);
    let gh = d.mode.gates() * h;
    let wu = d.mode.workspace_units() * h;
    let zero = T::zero();
    for r in 0..n {
        let len = d.len_of(r);
        if step >= len {
            continue; // states carry; the output at this time stays zero
        }
        let t = time_of(d, step, len);
        let row = t * n + r;
        let xr = &x[row * gh..(row + 1) * gh];
        let hr = &hh[r * gh..(r + 1) * gh];
        let wr = &mut ws[row * wu..(row + 1) * wu];
        let hp = &mut hs[r * h..(r + 1) * h];
        let or = &mut out[row * h..(row + 1) * h];
        match d.mode {
            RnnMode::RnnTanh | RnnMode::RnnRelu => {
                // Workspace row `[h | h_prev]`: h_prev last, as in every mode.
                let (wh, wprev) = wr.split_at_mut(h);
                wprev.copy_from_slice(hp);
                let relu = d.mode == RnnMode::RnnRelu;
                let (xr, hr, b, wh) = (&xr[..h], &hr[..h], &b[..h], &mut wh[..h]);
                let (hp, or) = (&mut hp[..h], &mut or[..h]);
                for j in 0..h {
                    let p = xr[j] + hr[j] + b[j];
                    let y = if relu {
                        if p > zero {
                            p
                        } else {
                            zero
                        }
                    } else {
                        tanh_fast(p)
                    };
                    wh[j] = y;
                    hp[j] = y;
                    or[j] = y;
                }
            }
            RnnMode::Lstm => {
                let cp = &mut cs[r * h..(r + 1) * h];
                lstm_row(xr, hr, b, hp, cp, or, wr, h);
            }
            RnnMode::Gru => gru_row(xr, hr, b, hp, or, wr, h),
        }
    }
}

/// One LSTM row: gates from `x + hh + b`, the states `hp`, `cp` updated in place, the output
/// row written, the workspace row `[i | f | g | o | c_prev | tanh(c) | h_prev]` filled.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn lstm_row<T: Float>(
    xr: &[T],
    hr: &[T],
    b: &[T],
    hp: &mut [T],
    cp: &mut [T],
    or: &mut [T],
    wr: &mut [T],
    h: usize,
) {
    let (wi, rest) = wr.split_at_mut(h);
    let (wf, rest) = rest.split_at_mut(h);
    let (wg, rest) = rest.split_at_mut(h);
    let (wo, rest) = rest.split_at_mut(h);
    let (wc, rest) = rest.split_at_mut(h);
    let (wt, wh) = rest.split_at_mut(h);
    wh.copy_from_slice(hp);
    wc.copy_from_slice(cp);
    // Every operand sliced to exactly `h` first: the loop then has no bounds checks and
    // vectorizes (the exps of `sigmoid` and `tanh_fast` inline).
    let (xi, xf, xg, xo) = (
        gate(xr, 0, h),
        gate(xr, 1, h),
        gate(xr, 2, h),
        gate(xr, 3, h),
    );
    let (hi, hf, hg, ho) = (
        gate(hr, 0, h),
        gate(hr, 1, h),
        gate(hr, 2, h),
        gate(hr, 3, h),
    );
    let (bi, bf, bg, bo) = (gate(b, 0, h), gate(b, 1, h), gate(b, 2, h), gate(b, 3, h));
    let (hp, cp, or) = (&mut hp[..h], &mut cp[..h], &mut or[..h]);
    for j in 0..h {
        let i = sigmoid(xi[j] + hi[j] + bi[j]);
        let f = sigmoid(xf[j] + hf[j] + bf[j]);
        let g = tanh_fast(xg[j] + hg[j] + bg[j]);
        let o = sigmoid(xo[j] + ho[j] + bo[j]);
        let c = f * cp[j] + i * g;
        let tc = tanh_fast(c);
        let y = o * tc;
        wi[j] = i;
        wf[j] = f;
        wg[j] = g;
        wo[j] = o;
        wt[j] = tc;
        cp[j] = c;
        hp[j] = y;
        or[j] = y;
    }
}

/// Gate `k`'s `h` values of a row of gates.
#[inline(always)]
fn gate<T>(row: &[T], k: usize, h: usize) -> &[T] {
    &row[k * h..(k + 1) * h]
}

/// One GRU row: `r, z` from `x + hh + b`, `n = tanh(x_n + r (hh_n + b_n))`,
/// `h' = (1 - z) n + z h`; workspace row `[r | z | n | hh_n + b_n | h_prev]`.
#[inline(always)]
fn gru_row<T: Float>(
    xr: &[T],
    hr: &[T],
    b: &[T],
    hp: &mut [T],
    or: &mut [T],
    wr: &mut [T],
    h: usize,
) {
    let (wr_, rest) = wr.split_at_mut(h);
    let (wz, rest) = rest.split_at_mut(h);
    let (wn, rest) = rest.split_at_mut(h);
    let (whn, wh) = rest.split_at_mut(h);
    wh.copy_from_slice(hp);
    let (xr_, xz, xn) = (gate(xr, 0, h), gate(xr, 1, h), gate(xr, 2, h));
    let (hr_, hz, hn_) = (gate(hr, 0, h), gate(hr, 1, h), gate(hr, 2, h));
    let (br, bz, bn) = (gate(b, 0, h), gate(b, 1, h), gate(b, 2, h));
    let (hp, or) = (&mut hp[..h], &mut or[..h]);
    for j in 0..h {
        let r = sigmoid(xr_[j] + hr_[j] + br[j]);
        let z = sigmoid(xz[j] + hz[j] + bz[j]);
        let hn = hn_[j] + bn[j];
        let nn = tanh_fast(xn[j] + r * hn);
        let y = (T::one() - z) * nn + z * hp[j];
        wr_[j] = r;
        wz[j] = z;
        wn[j] = nn;
        whn[j] = hn;
        hp[j] = y;
        or[j] = y;
    }
}

/// The backward of one direction, see [`RnnOps::rnn_backward`].
fn backward_typed<T: GemmScalar>(g: &[T], ws: &[T], w: &[T], d: &RnnDims) -> RnnGrads<Vec<T>> {
    let gh = d.mode.gates() * d.hidden;
    let mut dx = vec![T::zero(); d.steps * d.batch * gh];
    let mut dweight = vec![T::zero(); gh * d.hidden];
    let mut dbias = vec![T::zero(); gh];
    let (dh, dc) = backward_into(g, ws, w, d, &mut dx, &mut dweight, &mut dbias);
    RnnGrads {
        dxproj: dx,
        dweight,
        dbias,
        dh0: dh,
        dc0: (d.mode == RnnMode::Lstm).then_some(dc),
    }
}

/// [`backward_typed`] into one buffer: the gradients of `xproj`, `w`, `b` and, `with_states`,
/// of `h0` (and `c0`), flattened and concatenated in that order (one allocation).
fn backward_flat<T: GemmScalar>(
    g: &[T],
    ws: &[T],
    w: &[T],
    d: &RnnDims,
    with_states: bool,
) -> Vec<T> {
    let (n, h) = (d.batch, d.hidden);
    let gh = d.mode.gates() * h;
    let (lx, lw) = (d.steps * n * gh, gh * h);
    let states = if with_states {
        d.mode.states() * n * h
    } else {
        0
    };
    let mut all = vec![T::zero(); lx + lw + gh + states];
    let (dx, rest) = all.split_at_mut(lx);
    let (dweight, rest) = rest.split_at_mut(lw);
    let (dbias, rest) = rest.split_at_mut(gh);
    let (dh, dc) = backward_into(g, ws, w, d, dx, dweight, dbias);
    if with_states {
        rest[..n * h].copy_from_slice(&dh);
        if d.mode == RnnMode::Lstm {
            rest[n * h..].copy_from_slice(&dc);
        }
    }
    all
}

/// The backward writing the input projection's, weight's and bias's gradients into zeroed
/// `dx`, `dweight`, `dbias`; returns the gradients of `h0` and of `c0` (empty but for the
/// LSTM).
fn backward_into<T: GemmScalar>(
    g: &[T],
    ws: &[T],
    w: &[T],
    d: &RnnDims,
    dx: &mut [T],
    dweight: &mut [T],
    dbias: &mut [T],
) -> (Vec<T>, Vec<T>) {
    let (steps, n, h) = (d.steps, d.batch, d.hidden);
    let gh = d.mode.gates() * h;
    let wu = d.mode.workspace_units() * h;
    let zero = T::zero();
    let one = T::one();
    let gru = d.mode == RnnMode::Gru;
    let lstm = d.mode == RnnMode::Lstm;
    // The GRU's recurrent gate gradients differ from its input ones in the `n` gate (the
    // reset gate scales the recurrent part); the others share `dx`.
    let mut drec_all = if gru {
        vec![zero; steps * n * gh]
    } else {
        Vec::new()
    };
    let tail = steps * n * h;
    let mut dh = g[tail..tail + n * h].to_vec();
    let mut dc = if lstm {
        g[tail + n * h..tail + 2 * n * h].to_vec()
    } else {
        Vec::new()
    };
    let mut drec = vec![zero; n * gh];
    let mut dhp = vec![zero; n * h];
    for step in (0..steps).rev() {
        for r in 0..n {
            let len = d.len_of(r);
            let dr = &mut drec[r * gh..(r + 1) * gh];
            if step >= len {
                dr.fill(zero);
                continue;
            }
            let row = time_of(d, step, len) * n + r;
            let go = &g[row * h..(row + 1) * h];
            let wr = &ws[row * wu..(row + 1) * wu];
            let dxr = &mut dx[row * gh..(row + 1) * gh];
            let dhr = &mut dh[r * h..(r + 1) * h];
            match d.mode {
                RnnMode::RnnTanh | RnnMode::RnnRelu => {
                    let y = &wr[..h];
                    let relu = d.mode == RnnMode::RnnRelu;
                    for j in 0..h {
                        let dt = dhr[j] + go[j];
                        let dp = if relu {
                            if y[j] > zero {
                                dt
                            } else {
                                zero
                            }
                        } else {
                            dt * (one - y[j] * y[j])
                        };
                        dxr[j] = dp;
                        dr[j] = dp;
                        dhr[j] = zero;
                    }
                }
                RnnMode::Lstm => {
                    let dcr = &mut dc[r * h..(r + 1) * h];
                    let (wi, wf, wg, wo) = (
                        gate(wr, 0, h),
                        gate(wr, 1, h),
                        gate(wr, 2, h),
                        gate(wr, 3, h),
                    );
                    let (wc, wt) = (gate(wr, 4, h), gate(wr, 5, h));
                    let (dxi, rest) = dxr.split_at_mut(h);
                    let (dxf, rest) = rest.split_at_mut(h);
                    let (dxg, dxo) = rest.split_at_mut(h);
                    let (dxo, go, dcr, dhr) =
                        (&mut dxo[..h], &go[..h], &mut dcr[..h], &mut dhr[..h]);
                    for j in 0..h {
                        let (i, f, gg, o) = (wi[j], wf[j], wg[j], wo[j]);
                        let (cp, tc) = (wc[j], wt[j]);
                        let dt = dhr[j] + go[j];
                        let dct = dcr[j] + dt * o * (one - tc * tc);
                        dxi[j] = dct * gg * i * (one - i);
                        dxf[j] = dct * cp * f * (one - f);
                        dxg[j] = dct * i * (one - gg * gg);
                        dxo[j] = dt * tc * o * (one - o);
                        dcr[j] = dct * f;
                        dhr[j] = zero;
                    }
                    dr.copy_from_slice(dxr);
                }
                RnnMode::Gru => {
                    let (wg_r, wz, wn) = (gate(wr, 0, h), gate(wr, 1, h), gate(wr, 2, h));
                    let (whn, whp) = (gate(wr, 3, h), gate(wr, 4, h));
                    let (dxr_, rest) = dxr.split_at_mut(h);
                    let (dxz, dxn) = rest.split_at_mut(h);
                    let (drr, rest) = dr.split_at_mut(h);
                    let (drz, drn) = rest.split_at_mut(h);
                    let (dxn, drn, go, dhr) =
                        (&mut dxn[..h], &mut drn[..h], &go[..h], &mut dhr[..h]);
                    for j in 0..h {
                        let (rg, z, nn, hn, hp) = (wg_r[j], wz[j], wn[j], whn[j], whp[j]);
                        let dt = dhr[j] + go[j];
                        let dn = dt * (one - z);
                        let dz = dt * (hp - nn);
                        let da = dn * (one - nn * nn);
                        let dpr = da * hn * rg * (one - rg);
                        let dpz = dz * z * (one - z);
                        dxr_[j] = dpr;
                        dxz[j] = dpz;
                        dxn[j] = da;
                        drr[j] = dpr;
                        drz[j] = dpz;
                        drn[j] = da * rg;
                        dhr[j] = dt * z;
                    }
                    drec_all[row * gh..(row + 1) * gh].copy_from_slice(dr);
                }
            }
        }
        // The recurrent path to the previous hidden state: dh_prev += drec W.
        gemm_into(n, h, gh, &drec, gh as isize, 1, w, h as isize, 1, &mut dhp);
        for r in 0..n {
            if step < d.len_of(r) {
                for (a, &v) in dh[r * h..(r + 1) * h]
                    .iter_mut()
                    .zip(&dhp[r * h..(r + 1) * h])
                {
                    *a = *a + v;
                }
            }
        }
    }
    let drec_rows: &[T] = if gru { &drec_all } else { &*dx };
    // dW = sum over (time, example) rows of drec^T h_prev: one product over all steps, the
    // hidden states read in place from the workspace (last `h` of each row).
    let rows = steps * n;
    if rows > 0 {
        gemm_into(
            gh,
            h,
            rows,
            drec_rows,
            1,
            gh as isize,
            &ws[wu - h..],
            wu as isize,
            1,
            dweight,
        );
    }
    for row in drec_rows.chunks_exact(gh.max(1)) {
        for (a, &v) in dbias.iter_mut().zip(row) {
            *a = *a + v;
        }
    }
    (dh, dc)
}

/// `s` typed as `T`, or a dtype error naming the operand.
fn typed<'a, T: HostElement>(s: &'a CpuStorage, what: &str) -> Result<&'a [T]> {
    T::slice(s).ok_or_else(|| {
        Error::dtype(
            "rnn",
            format!("{what} has dtype {}, unlike the input", s.dtype().name()),
        )
    })
}

impl RnnOps for CpuStorage {
    fn rnn_forward(
        &self,
        w: &Self,
        b: &Self,
        h0: &Self,
        c0: Option<&Self>,
        dims: &RnnDims,
    ) -> Result<(Self, Self)> {
        if let Some(h) =
            crate::cpu::half::half_of(&[self.dtype(), w.dtype(), b.dtype(), h0.dtype()])
        {
            use crate::cpu::half::{widen, Narrow};
            let c0 = c0.map(widen);
            let r =
                widen(self).rnn_forward(&widen(w), &widen(b), &widen(h0), c0.as_deref(), dims)?;
            return Ok(r.narrow(h));
        }
        Ok(float_dispatch!(self.dtype(), "rnn", T => {
            let x = typed::<T>(self, "the input projection")?;
            let c0 = match c0 {
                Some(c) => Some(typed::<T>(c, "the initial cell state")?),
                None => None,
            };
            let (out, ws) = forward_typed(
                x,
                typed::<T>(w, "the recurrent weight")?,
                typed::<T>(b, "the recurrent bias")?,
                typed::<T>(h0, "the initial hidden state")?,
                c0,
                dims,
            );
            (T::into_buffer(out), T::into_buffer(ws))
        }))
    }

    fn rnn_backward(&self, ws: &Self, w: &Self, dims: &RnnDims) -> Result<RnnGrads<Self>> {
        crate::cpu::half::via_f32!(dy = self, wss = ws, ww = w => dy.rnn_backward(wss, ww, dims));
        self.backward_from(ws, 0, w, dims)
    }
}

impl CpuStorage {
    /// [`RnnOps::rnn_forward`] with the packed output and the workspace in one buffer, the
    /// output first (`ops::rnn::rnn_sequence_saved`'s array, written without a copy); `None`
    /// for half-precision operands (computed in f32 by the two-buffer form).
    pub(crate) fn rnn_forward_saved(
        &self,
        w: &Self,
        b: &Self,
        h0: &Self,
        c0: Option<&Self>,
        dims: &RnnDims,
    ) -> Result<Option<Self>> {
        if crate::cpu::half::half_of(&[self.dtype(), w.dtype(), b.dtype(), h0.dtype()]).is_some() {
            return Ok(None);
        }
        Ok(Some(float_dispatch!(self.dtype(), "rnn", T => {
            let x = typed::<T>(self, "the input projection")?;
            let c0 = match c0 {
                Some(c) => Some(typed::<T>(c, "the initial cell state")?),
                None => None,
            };
            let (out_len, ws_len) = saved_lens(dims);
            let mut all = vec![T::default(); out_len + ws_len];
            let (out, ws) = all.split_at_mut(out_len);
            forward_into(
                x,
                typed::<T>(w, "the recurrent weight")?,
                typed::<T>(b, "the recurrent bias")?,
                typed::<T>(h0, "the initial hidden state")?,
                c0,
                dims,
                out,
                ws,
            );
            T::into_buffer(all)
        })))
    }

    /// [`RnnOps::rnn_backward`] reading the workspace out of `saved`, the array of
    /// [`CpuStorage::rnn_forward_saved`] (no copy); `None` for half-precision operands.
    pub(crate) fn rnn_backward_saved(
        &self,
        saved: &Self,
        w: &Self,
        dims: &RnnDims,
    ) -> Result<Option<RnnGrads<Self>>> {
        let Some(out_len) = self.saved_offset(saved, w, dims)? else {
            return Ok(None);
        };
        self.backward_from(saved, out_len, w, dims).map(Some)
    }

    /// [`CpuStorage::rnn_backward_saved`] with the gradients in one buffer, as
    /// `ops::rnn::rnn_saved_grads_flat` returns them (`with_states`: `h0`'s and `c0`'s too);
    /// `None` for half-precision operands.
    pub(crate) fn rnn_backward_saved_flat(
        &self,
        saved: &Self,
        w: &Self,
        dims: &RnnDims,
        with_states: bool,
    ) -> Result<Option<Self>> {
        let Some(out_len) = self.saved_offset(saved, w, dims)? else {
            return Ok(None);
        };
        Ok(Some(float_dispatch!(self.dtype(), "rnn backward", T => {
            T::into_buffer(backward_flat(
                typed::<T>(self, "the output gradient")?,
                &typed::<T>(saved, "the saved sequence")?[out_len..],
                typed::<T>(w, "the recurrent weight")?,
                dims,
                with_states,
            ))
        })))
    }

    /// Where the workspace starts in `saved` for the head gradient `self` (checked to be the
    /// packed output's size, `saved` the packed output's and workspace's); `None` for
    /// half-precision operands.
    fn saved_offset(&self, saved: &Self, w: &Self, dims: &RnnDims) -> Result<Option<usize>> {
        if crate::cpu::half::half_of(&[self.dtype(), saved.dtype(), w.dtype()]).is_some() {
            return Ok(None);
        }
        let (out_len, ws_len) = saved_lens(dims);
        if self.len() != out_len || saved.len() != out_len + ws_len {
            return Err(Error::shape(
                "rnn backward",
                format!(
                    "a gradient of {} and a saved array of {} elements for {out_len} + {ws_len}",
                    self.len(),
                    saved.len()
                ),
            ));
        }
        Ok(Some(out_len))
    }

    /// The backward (f32 / f64) for the head gradient `self`, the workspace being `ws` from
    /// element `from` on.
    fn backward_from(
        &self,
        ws: &Self,
        from: usize,
        w: &Self,
        dims: &RnnDims,
    ) -> Result<RnnGrads<Self>> {
        Ok(float_dispatch!(self.dtype(), "rnn backward", T => {
            let r = backward_typed(
                typed::<T>(self, "the output gradient")?,
                &typed::<T>(ws, "the workspace")?[from..],
                typed::<T>(w, "the recurrent weight")?,
                dims,
            );
            RnnGrads {
                dxproj: T::into_buffer(r.dxproj),
                dweight: T::into_buffer(r.dweight),
                dbias: T::into_buffer(r.dbias),
                dh0: T::into_buffer(r.dh0),
                dc0: r.dc0.map(T::into_buffer),
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::tanh_fast;

    #[test]
    fn tanh_fast_matches_libm() {
        let mut worst = 0.0f32;
        for k in -4000..=4000 {
            let x = k as f32 * 0.005;
            worst = worst.max((tanh_fast(x) - x.tanh()).abs());
        }
        assert!(worst < 2e-7, "f32 tanh_fast off by {worst}");
        for k in -400..=400 {
            let x = k as f64 * 0.05;
            assert!((tanh_fast(x) - x.tanh()).abs() < 1e-15, "f64 at {x}");
        }
        assert_eq!(tanh_fast(0.0f32), 0.0);
        assert_eq!(tanh_fast(100.0f32), 1.0);
        assert_eq!(tanh_fast(-100.0f32), -1.0);
    }
}
