//! The CPU's convolution kernels ([`ConvOps`] `conv`, `conv_data_grad`, `conv_weight_grad`):
//! im2col + GEMM per batch entry, the batch split over rayon's threads. 2-D 3x3 stride-1
//! problems go to Winograd instead (`winograd.rs`: F(2x2, 3x3) for the forward and the data
//! gradient, F(3x3, 2x2) for the weight gradient).
//!
//! One entry's input `(in_channels, input...)` is unrolled into the column matrix
//! `(in_channels * taps, out_plane)` (row `c * taps + t` holds, for every output position, the
//! input element kernel tap `t` of channel `c` reads, or 0 in the padding), so each group's
//! convolution is one product `w_g (out_g, in_g * taps) . col_g`. The data gradient is the
//! transposed product followed by col2im (the scatter-add inverse of im2col), the weight
//! gradient `dy_g . col_gᵀ` summed over the batch. A 1x1 kernel with stride 1 and no padding
//! needs no unrolling: the input is its own column matrix.
//!
//! Threads: with at least two batch entries and two threads, the batch is cut into one
//! contiguous run per thread and every product runs single-threaded (`gemm_serial`), so no
//! two threads share a product's packing buffers; the weight gradient sums one partial per
//! run in run order, so results do not depend on scheduling. A single entry runs its products
//! through `gemm_into`, which splits large ones over the threads itself.

use rayon::prelude::*;

use super::gemm::{gemm_into, gemm_serial, GemmScalar};
use super::winograd;
use super::{CpuStorage, HostElement};
use crate::error::{Error, Result};
use crate::float_dispatch;
use crate::storage::{ConvGeom, ConvOps, PoolGeom};

/// Column buffers above this many bytes are freed after use instead of kept for the thread's
/// next convolution (a 3-D convolution's can be large).
const SCRATCH_KEEP_BYTES: usize = 64 << 20;

thread_local! {
    /// The column buffer of this thread's last convolution, kept so that the next one (the
    /// next layer, the backward, the next step) reuses pages already faulted in: allocated
    /// fresh each call, zeroing its pages cost ~5% of a ResNet layer's step.
    static SCRATCH: std::cell::RefCell<Option<Box<dyn std::any::Any>>> =
        const { std::cell::RefCell::new(None) };
}

/// Run `f` with this thread's column buffer (empty or of any length: callers resize it).
pub(super) fn with_scratch<T: 'static, R>(f: impl FnOnce(&mut Vec<T>) -> R) -> R {
    let mut col: Vec<T> = SCRATCH
        .with(|s| s.borrow_mut().take())
        .and_then(|b| b.downcast::<Vec<T>>().ok())
        .map(|b| *b)
        .unwrap_or_default();
    let r = f(&mut col);
    if std::mem::size_of_val(&col[..]) <= SCRATCH_KEEP_BYTES {
        SCRATCH.with(|s| *s.borrow_mut() = Some(Box::new(col)));
    }
    r
}

/// The typed slices of `a` and `b`, or a dtype error naming `op`.
fn pair<'a, T: HostElement>(
    op: &'static str,
    a: &'a CpuStorage,
    b: &'a CpuStorage,
) -> Result<(&'a [T], &'a [T])> {
    match (T::slice(a), T::slice(b)) {
        (Some(x), Some(y)) => Ok((x, y)),
        _ => Err(Error::dtype_mismatch(op, a.dtype(), b.dtype())),
    }
}

/// An error unless `got` is `want` elements: the geometry and the buffers disagree (the
/// operator checks this; a backend call that slipped past it stops here, not out of bounds).
fn check_len(op: &'static str, what: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::shape(
            op,
            format!("{what} has {got} elements, the geometry needs {want}"),
        ))
    }
}

/// Whether the input is its own column matrix (1x1 kernel, stride 1, no padding).
fn is_pointwise(g: &ConvGeom) -> bool {
    g.kernel.iter().all(|&k| k == 1) && g.stride.iter().all(|&s| s == 1) && g.pad == [0; 3]
}

/// The input index a tap reads for output index `o`, or `None` in the padding.
#[inline]
fn source(
    o: usize,
    stride: usize,
    pad: usize,
    tap: usize,
    dil: usize,
    len: usize,
) -> Option<usize> {
    let i = (o * stride + tap * dil).checked_sub(pad)?;
    (i < len).then_some(i)
}

/// The output range `[lo, hi)` whose stride-1 reads `o - pad + off` fall inside `0..len`
/// (empty, `lo == hi`, when none does).
#[inline]
fn valid_run(out: usize, pad: usize, off: usize, len: usize) -> (usize, usize) {
    let lo = pad.saturating_sub(off).min(out);
    let hi = (len + pad).saturating_sub(off).min(out).max(lo);
    (lo, hi)
}

/// Walk every (column-matrix row, output position) pair of one batch entry with the input
/// element it reads: `row(r, o_run, i_run)` gets the row index, the output positions of one
/// output line and the matching input positions (`None` for a line in the padding), so
/// im2col copies and col2im adds whole lines.
fn for_each_line(g: &ConvGeom, mut line: impl FnMut(usize, usize, Line)) {
    let [od, oh, ow] = g.output;
    let [id, ih, iw] = g.input;
    let [kd, kh, kw] = g.kernel;
    let taps = g.taps();
    for c in 0..g.in_channels {
        for td in 0..kd {
            for th in 0..kh {
                for tw in 0..kw {
                    let row = c * taps + (td * kh + th) * kw + tw;
                    for z in 0..od {
                        let sz = source(z, g.stride[0], g.pad[0], td, g.dilation[0], id);
                        for y in 0..oh {
                            let out_at = (z * oh + y) * ow;
                            let sy = source(y, g.stride[1], g.pad[1], th, g.dilation[1], ih);
                            match (sz, sy) {
                                (Some(sz), Some(sy)) => {
                                    let in_at = (c * id + sz) * ih * iw + sy * iw;
                                    line(row, out_at, Line::Input { in_at, tap: tw });
                                }
                                _ => line(row, out_at, Line::Padding),
                            }
                        }
                    }
                }
            }
        }
    }
}

/// One output line of [`for_each_line`]: in the padding, or reading the input line that starts
/// at `in_at` with horizontal tap `tap`.
#[derive(Clone, Copy)]
enum Line {
    Padding,
    Input { in_at: usize, tap: usize },
}

/// Unroll one batch entry `x` (`in_channels x input`) into `col` (`in_channels * taps x
/// out_plane`), every element written.
fn im2col<T: GemmScalar>(g: &ConvGeom, x: &[T], col: &mut [T]) {
    let p = g.out_plane();
    let ow = g.output[2];
    let (sw, pw, dw, iw) = (g.stride[2], g.pad[2], g.dilation[2], g.input[2]);
    let zero = <T as num_traits::Zero>::zero();
    for_each_line(g, |row, out_at, l| {
        let dst = &mut col[row * p + out_at..row * p + out_at + ow];
        match l {
            Line::Padding => dst.fill(zero),
            Line::Input { in_at, tap } => {
                let src = &x[in_at..in_at + iw];
                if sw == 1 {
                    let (lo, hi) = valid_run(ow, pw, tap * dw, iw);
                    dst[..lo].fill(zero);
                    dst[hi..].fill(zero);
                    if lo < hi {
                        let start = lo + tap * dw - pw;
                        dst[lo..hi].copy_from_slice(&src[start..start + (hi - lo)]);
                    }
                } else {
                    for (o, d) in dst.iter_mut().enumerate() {
                        *d = source(o, sw, pw, tap, dw, iw).map_or(zero, |i| src[i]);
                    }
                }
            }
        }
    });
}

/// The adjoint of [`im2col`]: add every element of `col` into the input element it was read
/// from (`dx`, zeroed by the caller).
fn col2im<T: GemmScalar>(g: &ConvGeom, col: &[T], dx: &mut [T]) {
    let p = g.out_plane();
    let ow = g.output[2];
    let (sw, pw, dw, iw) = (g.stride[2], g.pad[2], g.dilation[2], g.input[2]);
    for_each_line(g, |row, out_at, l| {
        let Line::Input { in_at, tap } = l else {
            return;
        };
        let src = &col[row * p + out_at..row * p + out_at + ow];
        let dst = &mut dx[in_at..in_at + iw];
        if sw == 1 {
            let (lo, hi) = valid_run(ow, pw, tap * dw, iw);
            if lo == hi {
                return;
            }
            let start = lo + tap * dw - pw;
            for (d, &s) in dst[start..start + (hi - lo)].iter_mut().zip(&src[lo..hi]) {
                *d = *d + s;
            }
        } else {
            for (o, &s) in src.iter().enumerate() {
                if let Some(i) = source(o, sw, pw, tap, dw, iw) {
                    dst[i] = dst[i] + s;
                }
            }
        }
    });
}

/// How the batch is cut: contiguous runs of entries, one per thread, or `None` to run the
/// entries one after another with threaded products.
fn batch_runs(batch: usize) -> Option<Vec<std::ops::Range<usize>>> {
    let threads = rayon::current_num_threads();
    if batch < 2 || threads < 2 {
        return None;
    }
    let runs = threads.min(batch);
    Some(
        (0..runs)
            .map(|r| (r * batch / runs)..((r + 1) * batch / runs))
            .collect(),
    )
}

/// One product `dst (+)= a . b`, single-threaded or through `gemm_into` (which splits large
/// products over the threads; it cannot accumulate, so that form overwrites only).
#[allow(clippy::too_many_arguments)]
fn product<T: GemmScalar>(
    serial: bool,
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    a_s: (isize, isize),
    b: &[T],
    b_s: (isize, isize),
    dst: &mut [T],
    accumulate: bool,
) {
    if serial || accumulate {
        gemm_serial(m, n, k, a, a_s.0, a_s.1, b, b_s.0, b_s.1, dst, accumulate);
    } else {
        gemm_into(m, n, k, a, a_s.0, a_s.1, b, b_s.0, b_s.1, dst);
    }
}

/// Forward of one batch entry: `y_n` (`out_channels x out_plane`) from `x_n`.
fn conv_entry<T: GemmScalar>(
    g: &ConvGeom,
    x_n: &[T],
    w: &[T],
    bias: Option<&[T]>,
    col: &mut Vec<T>,
    y_n: &mut [T],
    serial: bool,
) {
    let p = g.out_plane();
    let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
    let kg = cin_g * g.taps();
    let cols: &[T] = if is_pointwise(g) {
        x_n
    } else {
        col.resize(
            g.in_channels * g.taps() * p,
            <T as num_traits::Zero>::zero(),
        );
        im2col(g, x_n, col);
        col
    };
    for gi in 0..g.groups {
        let a = &w[gi * cout_g * kg..(gi + 1) * cout_g * kg];
        let b = &cols[gi * kg * p..(gi + 1) * kg * p];
        let dst = &mut y_n[gi * cout_g * p..(gi + 1) * cout_g * p];
        product(
            serial,
            cout_g,
            p,
            kg,
            a,
            (kg as isize, 1),
            b,
            (p as isize, 1),
            dst,
            false,
        );
    }
    if let Some(b) = bias {
        for (row, &bv) in y_n.chunks_exact_mut(p).zip(b) {
            row.iter_mut().for_each(|v| *v = *v + bv);
        }
    }
}

/// Data gradient of one batch entry: `dx_n` (`in_channels x input`) from `dy_n`.
fn data_grad_entry<T: GemmScalar>(
    g: &ConvGeom,
    dy_n: &[T],
    w: &[T],
    col: &mut Vec<T>,
    dx_n: &mut [T],
    serial: bool,
) {
    let p = g.out_plane();
    let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
    let kg = cin_g * g.taps();
    let pointwise = is_pointwise(g);
    if !pointwise {
        col.resize(
            g.in_channels * g.taps() * p,
            <T as num_traits::Zero>::zero(),
        );
    }
    for gi in 0..g.groups {
        // w_g is (cout_g, kg) row-major; read as its transpose (kg, cout_g).
        let a = &w[gi * cout_g * kg..(gi + 1) * cout_g * kg];
        let b = &dy_n[gi * cout_g * p..(gi + 1) * cout_g * p];
        let dst = if pointwise {
            &mut dx_n[gi * kg * p..(gi + 1) * kg * p]
        } else {
            &mut col[gi * kg * p..(gi + 1) * kg * p]
        };
        product(
            serial,
            kg,
            p,
            cout_g,
            a,
            (1, kg as isize),
            b,
            (p as isize, 1),
            dst,
            false,
        );
    }
    if !pointwise {
        dx_n.fill(<T as num_traits::Zero>::zero());
        col2im(g, col, dx_n);
    }
}

/// Adds the weight gradient of one batch entry into `dw` (`accumulate`) or writes it.
fn weight_grad_entry<T: GemmScalar>(
    g: &ConvGeom,
    x_n: &[T],
    dy_n: &[T],
    col: &mut Vec<T>,
    dw: &mut [T],
    accumulate: bool,
    serial: bool,
) {
    let p = g.out_plane();
    let (cin_g, cout_g) = (g.in_channels / g.groups, g.out_channels / g.groups);
    let kg = cin_g * g.taps();
    let cols: &[T] = if is_pointwise(g) {
        x_n
    } else {
        col.resize(
            g.in_channels * g.taps() * p,
            <T as num_traits::Zero>::zero(),
        );
        im2col(g, x_n, col);
        col
    };
    for gi in 0..g.groups {
        let a = &dy_n[gi * cout_g * p..(gi + 1) * cout_g * p];
        // col_g is (kg, p) row-major; read as its transpose (p, kg).
        let b = &cols[gi * kg * p..(gi + 1) * kg * p];
        let dst = &mut dw[gi * cout_g * kg..(gi + 1) * cout_g * kg];
        product(
            serial,
            cout_g,
            kg,
            p,
            a,
            (p as isize, 1),
            b,
            (1, p as isize),
            dst,
            accumulate,
        );
    }
}

/// [`ConvOps::conv`] on typed slices: Winograd for 3x3 stride-1 problems, else im2col.
fn conv_typed<T: GemmScalar>(g: &ConvGeom, x: &[T], w: &[T], bias: Option<&[T]>) -> Vec<T> {
    if winograd::applies(g) {
        winograd::conv(g, x, w, bias)
    } else {
        conv_im2col(g, x, w, bias)
    }
}

/// [`ConvOps::conv`] through im2col + GEMM (any geometry).
pub(super) fn conv_im2col<T: GemmScalar>(
    g: &ConvGeom,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
) -> Vec<T> {
    let (xs, ys) = (g.in_channels * g.in_plane(), g.out_channels * g.out_plane());
    // Every element is written (each group's product overwrites its rows).
    let mut y = crate::recycle::overwritable_vec::<T>(g.y_len());
    if ys == 0 {
        return y;
    }
    match batch_runs(g.batch) {
        Some(runs) => {
            let mut parts = split_runs(&mut y, &runs, ys);
            parts.par_iter_mut().for_each(|(range, out)| {
                with_scratch(|col| {
                    for (i, n) in range.clone().enumerate() {
                        let y_n = &mut out[i * ys..(i + 1) * ys];
                        conv_entry(g, &x[n * xs..(n + 1) * xs], w, bias, col, y_n, true);
                    }
                })
            });
        }
        None => with_scratch(|col| {
            for (n, y_n) in y.chunks_exact_mut(ys).enumerate() {
                conv_entry(g, &x[n * xs..(n + 1) * xs], w, bias, col, y_n, false);
            }
        }),
    }
    y
}

/// `buf` cut into the consecutive blocks of `runs` (entries of `entry` elements each).
fn split_runs<'a, T>(
    mut buf: &'a mut [T],
    runs: &[std::ops::Range<usize>],
    entry: usize,
) -> Vec<(std::ops::Range<usize>, &'a mut [T])> {
    let mut parts = Vec::with_capacity(runs.len());
    for r in runs {
        let (head, tail) = buf.split_at_mut(r.len() * entry);
        parts.push((r.clone(), head));
        buf = tail;
    }
    parts
}

/// [`ConvOps::conv_data_grad`] on typed slices: Winograd for 3x3 stride-1 problems, else
/// im2col.
fn data_grad_typed<T: GemmScalar>(g: &ConvGeom, dy: &[T], w: &[T]) -> Vec<T> {
    if winograd::applies(g) {
        winograd::data_grad(g, dy, w)
    } else {
        data_grad_im2col(g, dy, w)
    }
}

/// [`ConvOps::conv_data_grad`] through GEMM + col2im (any geometry).
pub(super) fn data_grad_im2col<T: GemmScalar>(g: &ConvGeom, dy: &[T], w: &[T]) -> Vec<T> {
    let (xs, ys) = (g.in_channels * g.in_plane(), g.out_channels * g.out_plane());
    // Every element is written (a product, or zeros then col2im, per entry).
    let mut dx = crate::recycle::overwritable_vec::<T>(g.x_len());
    if xs == 0 {
        return dx;
    }
    match batch_runs(g.batch) {
        Some(runs) => {
            let mut parts = split_runs(&mut dx, &runs, xs);
            parts.par_iter_mut().for_each(|(range, out)| {
                with_scratch(|col| {
                    for (i, n) in range.clone().enumerate() {
                        let dx_n = &mut out[i * xs..(i + 1) * xs];
                        data_grad_entry(g, &dy[n * ys..(n + 1) * ys], w, col, dx_n, true);
                    }
                })
            });
        }
        None => with_scratch(|col| {
            for (n, dx_n) in dx.chunks_exact_mut(xs).enumerate() {
                data_grad_entry(g, &dy[n * ys..(n + 1) * ys], w, col, dx_n, false);
            }
        }),
    }
    dx
}

/// [`ConvOps::conv_weight_grad`] on typed slices: Winograd for 3x3 stride-1 problems, else
/// im2col.
fn weight_grad_typed<T: GemmScalar>(g: &ConvGeom, x: &[T], dy: &[T]) -> Vec<T> {
    if winograd::applies(g) {
        winograd::weight_grad(g, x, dy)
    } else {
        weight_grad_im2col(g, x, dy)
    }
}

/// [`ConvOps::conv_weight_grad`] through im2col + GEMM (any geometry).
pub(super) fn weight_grad_im2col<T: GemmScalar>(g: &ConvGeom, x: &[T], dy: &[T]) -> Vec<T> {
    let (xs, ys) = (g.in_channels * g.in_plane(), g.out_channels * g.out_plane());
    let zero = <T as num_traits::Zero>::zero();
    let mut dw = vec![zero; g.w_len()];
    if dw.is_empty() || g.batch == 0 {
        return dw;
    }
    match batch_runs(g.batch) {
        Some(runs) => {
            let partials: Vec<Vec<T>> = runs
                .par_iter()
                .map(|range| {
                    let mut part = vec![zero; g.w_len()];
                    with_scratch(|col| {
                        for n in range.clone() {
                            let (x_n, dy_n) = (&x[n * xs..(n + 1) * xs], &dy[n * ys..(n + 1) * ys]);
                            let acc = n > range.start;
                            weight_grad_entry(g, x_n, dy_n, col, &mut part, acc, true);
                        }
                    });
                    part
                })
                .collect();
            for part in &partials {
                dw.iter_mut().zip(part).for_each(|(d, &p)| *d = *d + p);
            }
        }
        None => with_scratch(|col| {
            for n in 0..g.batch {
                let (x_n, dy_n) = (&x[n * xs..(n + 1) * xs], &dy[n * ys..(n + 1) * ys]);
                weight_grad_entry(g, x_n, dy_n, col, &mut dw, n > 0, false);
            }
        }),
    }
    dw
}

impl ConvOps for CpuStorage {
    fn conv(&self, w: &Self, bias: Option<&Self>, g: &ConvGeom) -> Result<Self> {
        const OP: &str = "convolution";
        if let Some(h) = crate::cpu::half::half_of(&[self.dtype(), w.dtype()]) {
            use crate::cpu::half::{widen, Narrow};
            let b = bias.map(widen);
            let y = widen(self).conv(&widen(w), b.as_deref(), g)?;
            return Ok(y.narrow(h));
        }
        Ok(float_dispatch!(self.dtype(), OP, T => {
            let (x, ws) = pair::<T>(OP, self, w)?;
            check_len(OP, "the input", x.len(), g.x_len())?;
            check_len(OP, "the weight", ws.len(), g.w_len())?;
            let b = match bias {
                Some(b) => {
                    let (_, bs) = pair::<T>(OP, self, b)?;
                    check_len(OP, "the bias", bs.len(), g.out_channels)?;
                    Some(bs)
                }
                None => None,
            };
            T::into_buffer(conv_typed(g, x, ws, b))
        }))
    }

    fn conv_data_grad(&self, w: &Self, g: &ConvGeom) -> Result<Self> {
        crate::cpu::half::via_f32!(dy = self, ww = w => dy.conv_data_grad(ww, g));
        const OP: &str = "convolution data gradient";
        Ok(float_dispatch!(self.dtype(), OP, T => {
            let (dy, ws) = pair::<T>(OP, self, w)?;
            check_len(OP, "the head gradient", dy.len(), g.y_len())?;
            check_len(OP, "the weight", ws.len(), g.w_len())?;
            T::into_buffer(data_grad_typed(g, dy, ws))
        }))
    }

    fn conv_weight_grad(&self, dy: &Self, g: &ConvGeom) -> Result<Self> {
        crate::cpu::half::via_f32!(x = self, d = dy => x.conv_weight_grad(d, g));
        const OP: &str = "convolution weight gradient";
        Ok(float_dispatch!(self.dtype(), OP, T => {
            let (x, dys) = pair::<T>(OP, self, dy)?;
            check_len(OP, "the input", x.len(), g.x_len())?;
            check_len(OP, "the head gradient", dys.len(), g.y_len())?;
            T::into_buffer(weight_grad_typed(g, x, dys))
        }))
    }

    fn pool(&self, g: &PoolGeom) -> Result<Self> {
        crate::cpu::half::via_f32!(x = self => x.pool(g));
        const OP: &str = "pooling";
        Ok(float_dispatch!(self.dtype(), OP, T => {
            let x = T::slice(self).ok_or_else(|| Error::dtype(OP, "mixed dtypes"))?;
            check_len(OP, "the input", x.len(), g.planes * g.in_plane())?;
            T::into_buffer(super::pool::pool_typed(g, x))
        }))
    }

    fn pool_grad(&self, dy: &Self, g: &PoolGeom) -> Result<Self> {
        crate::cpu::half::via_f32!(x = self, d = dy => x.pool_grad(d, g));
        const OP: &str = "pooling backward";
        Ok(float_dispatch!(self.dtype(), OP, T => {
            let (x, dys) = pair::<T>(OP, self, dy)?;
            check_len(OP, "the input", x.len(), g.planes * g.in_plane())?;
            check_len(OP, "the head gradient", dys.len(), g.planes * g.out_plane())?;
            T::into_buffer(super::pool::pool_grad_typed(g, x, dys))
        }))
    }
}
