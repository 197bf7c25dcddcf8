//! The CPU's pooling kernels ([`ConvOps`](crate::storage::ConvOps) `pool`, `pool_grad`): a
//! window loop per output element, planes (batch x channels) in parallel.
//!
//! Window `o` of a dim covers input indices `o * stride - pad ..` for `kernel` steps. Average
//! pooling divides by that window clipped to the padded input (`count_include_pad`) or by the
//! input elements it covers, as MXNet's and PyTorch's kernels do. Max pooling takes the first
//! largest element (a NaN wins, so NaNs propagate); its backward recomputes that position from
//! the input instead of storing indices, so the forward's output is all a backend keeps.

use rayon::prelude::*;

use crate::dtype::Float;
use crate::storage::{PoolGeom, PoolKind};

/// Output elements below which planes are pooled on the calling thread.
const PAR_MIN_OUT: usize = 1 << 14;

/// One dim of a window: the clipped input range `[lo, hi)` and the padded extent used as the
/// divisor with `count_include_pad`.
#[derive(Clone, Copy)]
struct Span {
    lo: usize,
    hi: usize,
    padded: usize,
}

/// The window of output index `o` along one dim.
#[inline]
fn span(o: usize, stride: usize, pad: usize, kernel: usize, len: usize) -> Span {
    let start = (o * stride) as isize - pad as isize;
    let end = (start + kernel as isize).min((len + pad) as isize);
    let padded = (end - start).max(0) as usize;
    let lo = start.max(0) as usize;
    let hi = (end.min(len as isize).max(0) as usize).max(lo);
    Span { lo, hi, padded }
}

/// The three spans of output position `(z, y, x)`.
#[inline]
fn window(g: &PoolGeom, z: usize, y: usize, x: usize) -> [Span; 3] {
    let at = |d: usize, o: usize| span(o, g.stride[d], g.pad[d], g.kernel[d], g.input[d]);
    [at(0, z), at(1, y), at(2, x)]
}

/// The divisor of an average window.
#[inline]
fn divisor(w: &[Span; 3], count_include_pad: bool) -> usize {
    if count_include_pad {
        w.iter().map(|s| s.padded).product()
    } else {
        w.iter().map(|s| s.hi - s.lo).product()
    }
}

/// The plane offset of the first largest element of a window (`None` for an empty one, which
/// the operator's geometry rules out).
#[inline]
fn argmax<T: Float>(g: &PoolGeom, plane: &[T], w: &[Span; 3]) -> Option<usize> {
    let [_, ih, iw] = g.input;
    let mut best: Option<(usize, T)> = None;
    for z in w[0].lo..w[0].hi {
        for y in w[1].lo..w[1].hi {
            let row = (z * ih + y) * iw;
            for (i, &v) in plane[row + w[2].lo..row + w[2].hi].iter().enumerate() {
                match best {
                    Some((_, b)) if !(v > b || (v.is_nan() && !b.is_nan())) => {}
                    _ => best = Some((row + w[2].lo + i, v)),
                }
            }
        }
    }
    best.map(|(i, _)| i)
}

/// Pool one plane.
fn pool_plane<T: Float>(g: &PoolGeom, plane: &[T], out: &mut [T]) {
    let [od, oh, ow] = g.output;
    let [_, ih, iw] = g.input;
    let mut k = 0;
    for z in 0..od {
        for y in 0..oh {
            for x in 0..ow {
                let w = window(g, z, y, x);
                out[k] = match g.kind {
                    PoolKind::Max => argmax(g, plane, &w).map_or(T::neg_infinity(), |i| plane[i]),
                    PoolKind::Avg { count_include_pad } => {
                        let mut sum = T::zero();
                        for zz in w[0].lo..w[0].hi {
                            for yy in w[1].lo..w[1].hi {
                                let row = (zz * ih + yy) * iw;
                                for &v in &plane[row + w[2].lo..row + w[2].hi] {
                                    sum = sum + v;
                                }
                            }
                        }
                        let d = divisor(&w, count_include_pad).max(1);
                        sum / T::from_f64(d as f64)
                    }
                };
                k += 1;
            }
        }
    }
}

/// The input gradient of one plane (`dx` zeroed by the caller).
fn pool_grad_plane<T: Float>(g: &PoolGeom, plane: &[T], dy: &[T], dx: &mut [T]) {
    let [od, oh, ow] = g.output;
    let [_, ih, iw] = g.input;
    let mut k = 0;
    for z in 0..od {
        for y in 0..oh {
            for x in 0..ow {
                let w = window(g, z, y, x);
                let gv = dy[k];
                k += 1;
                match g.kind {
                    PoolKind::Max => {
                        if let Some(i) = argmax(g, plane, &w) {
                            dx[i] = dx[i] + gv;
                        }
                    }
                    PoolKind::Avg { count_include_pad } => {
                        let d = divisor(&w, count_include_pad).max(1);
                        let share = gv / T::from_f64(d as f64);
                        for zz in w[0].lo..w[0].hi {
                            for yy in w[1].lo..w[1].hi {
                                let row = (zz * ih + yy) * iw;
                                for v in &mut dx[row + w[2].lo..row + w[2].hi] {
                                    *v = *v + share;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Pool every plane of `x`.
pub(crate) fn pool_typed<T: Float>(g: &PoolGeom, x: &[T]) -> Vec<T> {
    let (ip, op) = (g.in_plane(), g.out_plane());
    let mut out = vec![T::zero(); g.planes * op];
    if op == 0 {
        return out;
    }
    let one = |(p, o): (usize, &mut [T])| pool_plane(g, &x[p * ip..(p + 1) * ip], o);
    if out.len() >= PAR_MIN_OUT {
        out.par_chunks_mut(op).enumerate().for_each(one);
    } else {
        out.chunks_mut(op).enumerate().for_each(one);
    }
    out
}

/// The input gradient of [`pool_typed`] for head gradient `dy`.
pub(crate) fn pool_grad_typed<T: Float>(g: &PoolGeom, x: &[T], dy: &[T]) -> Vec<T> {
    let (ip, op) = (g.in_plane(), g.out_plane());
    let mut dx = vec![T::zero(); g.planes * ip];
    if ip == 0 || op == 0 {
        return dx;
    }
    let one = |(p, d): (usize, &mut [T])| {
        pool_grad_plane(g, &x[p * ip..(p + 1) * ip], &dy[p * op..(p + 1) * op], d)
    };
    if dy.len() >= PAR_MIN_OUT {
        dx.par_chunks_mut(ip).enumerate().for_each(one);
    } else {
        dx.chunks_mut(ip).enumerate().for_each(one);
    }
    dx
}
