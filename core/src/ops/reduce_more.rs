//! Reductions beyond sum/mean: max, min, prod, norm (L1/L2), argmax, argmin, and the integer
//! sum used by `sum` on integer arrays.
//!
//! Every reduction runs one axis at a time over the `[outer, n, inner]` view (see `axis.rs`),
//! so no input is ever transposed or copied; a full reduction is one parallel fold over the flat
//! buffer (this is what lets `sum`/`argmax` of a 2^31-element u8 array run without a copy).

use rayon::prelude::*;

use super::axis::{norm_axes, norm_axis, reduced_shape, split3};
use crate::autograd::record_op;
use crate::dtype::{Element, Float};
use crate::error::{Error, Result};
use crate::{float_dispatch, NDArray};

/// Fold `src` viewed as `[outer, n, inner]` along the middle axis into `[outer, inner]`.
fn fold_axis<T, A>(
    src: &[T],
    (outer, n, inner): (usize, usize, usize),
    init: A,
    fold: &(impl Fn(A, T) -> A + Sync),
    combine: &(impl Fn(A, A) -> A + Sync),
) -> Vec<A>
where
    T: Copy + Sync,
    A: Copy + Send + Sync,
{
    if outer * inner == 1 {
        // Whole-buffer reduction: parallel chunked fold, then combine the partials.
        if src.len() >= super::PAR_THRESHOLD {
            let parts: Vec<A> = src
                .par_chunks(1 << 16)
                .map(|c| c.iter().fold(init, |a, &x| fold(a, x)))
                .collect();
            return vec![parts.into_iter().fold(init, combine)];
        }
        return vec![src.iter().fold(init, |a, &x| fold(a, x))];
    }
    let mut out = vec![init; outer * inner];
    let block = |(o, dst): (usize, &mut [A])| {
        let base = o * n * inner;
        for k in 0..n {
            let row = &src[base + k * inner..base + (k + 1) * inner];
            for (d, &x) in dst.iter_mut().zip(row) {
                *d = fold(*d, x);
            }
        }
    };
    if src.len() >= super::PAR_THRESHOLD && outer > 1 {
        out.par_chunks_mut(inner).enumerate().for_each(block);
    } else {
        out.chunks_mut(inner).enumerate().for_each(block);
    }
    out
}

/// Reduce over `axes` (sorted, unique): the first axis folds elements, later axes combine
/// partial results. Returns the values in keepdims layout.
fn reduce_axes<T, A>(
    src: &[T],
    shape: &[usize],
    axes: &[usize],
    init: A,
    fold: impl Fn(A, T) -> A + Sync,
    combine: impl Fn(A, A) -> A + Sync,
) -> Vec<A>
where
    T: Copy + Sync,
    A: Copy + Send + Sync,
{
    if axes.len() == shape.len() {
        return fold_axis(src, (1, src.len(), 1), init, &fold, &combine);
    }
    if axes.is_empty() {
        return src.iter().map(|&x| fold(init, x)).collect();
    }
    let mut cur_shape = shape.to_vec();
    let last = axes[axes.len() - 1];
    let mut acc = fold_axis(src, split3(&cur_shape, last), init, &fold, &combine);
    cur_shape[last] = 1;
    for &ax in axes[..axes.len() - 1].iter().rev() {
        acc = fold_axis(&acc, split3(&cur_shape, ax), init, &combine, &combine);
        cur_shape[ax] = 1;
    }
    acc
}

/// Which value-reduction (shared validation and backward).
#[derive(Clone, Copy, PartialEq)]
enum Red {
    Max,
    Min,
    Prod,
    L1,
    L2,
}

impl Red {
    fn name(self) -> &'static str {
        match self {
            Red::Max => "max",
            Red::Min => "min",
            Red::Prod => "prod",
            Red::L1 | Red::L2 => "norm",
        }
    }
}

fn typed_minmax<T: Element>(s: &[T], shape: &[usize], ax: &[usize], max: bool) -> Vec<T> {
    let pick = move |a: T, b: T| if (b > a) == max && b != a { b } else { a };
    // The identity is the first element; empty reductions are rejected before this point.
    reduce_axes(
        s,
        shape,
        ax,
        None,
        move |a: Option<T>, x| Some(a.map_or(x, |a| pick(a, x))),
        move |a, b| match (a, b) {
            (Some(a), Some(b)) => Some(pick(a, b)),
            (a, None) => a,
            (None, b) => b,
        },
    )
    .into_iter()
    .map(|v| v.unwrap_or_default())
    .collect()
}

fn typed_float<T: Float>(s: &[T], shape: &[usize], ax: &[usize], r: Red) -> Vec<T> {
    let z = T::zero();
    match r {
        Red::Prod => reduce_axes(s, shape, ax, T::one(), |a, x| a * x, |a, b| a * b),
        Red::L1 => reduce_axes(s, shape, ax, z, |a, x: T| a + x.abs(), |a, b| a + b),
        Red::L2 => reduce_axes(s, shape, ax, z, |a, x: T| a + x * x, |a, b| a + b)
            .into_iter()
            .map(|v| v.sqrt())
            .collect(),
        Red::Max | Red::Min => typed_minmax(s, shape, ax, r == Red::Max),
    }
}

fn reduce_values(a: &NDArray, r: Red, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
    let op = r.name();
    let d = a.dense_data()?;
    let ax = norm_axes(op, axes, d.shape.len())?;
    if matches!(r, Red::Max | Red::Min) && ax.iter().any(|&i| d.shape[i] == 0) {
        return Err(Error::shape(
            op,
            format!("cannot reduce an empty axis of shape {:?}", d.shape),
        ));
    }
    let out_shape = reduced_shape(&d.shape, &ax, keepdims);
    let out = if d.buf.dtype().is_float() {
        float_dispatch!(d.buf.dtype(), op, T => {
            NDArray::from_vec(typed_float(d.buf.as_slice::<T>().unwrap(), &d.shape, &ax, r), &out_shape)?
        })
    } else if matches!(r, Red::Max | Red::Min) {
        crate::with_buffer!(&d.buf, v => NDArray::from_vec(typed_minmax(v.as_slice(), &d.shape, &ax, r == Red::Max), &out_shape)?)
    } else {
        return Err(Error::dtype(
            op,
            format!("needs a float array, got {}", d.buf.dtype().name()),
        ));
    };
    let (x, y) = (a.clone(), out.detach());
    let (in_shape, kshape) = (d.shape.clone(), reduced_shape(&d.shape, &ax, true));
    let ax_i: Vec<i64> = ax.iter().map(|&i| i as i64).collect();
    Ok(record_op(op, out, &[a], move |g| {
        let gk = g.reshape(&kshape)?.broadcast_to(&in_shape)?;
        let yk = y.reshape(&kshape)?.broadcast_to(&in_shape)?;
        let local = match r {
            Red::Max | Red::Min => {
                // Ties share the gradient evenly.
                let mask = x.equal(&yk)?;
                let cnt = mask.sum(Some(&ax_i), true)?.broadcast_to(&in_shape)?;
                mask.div(&cnt)?
            }
            Red::L1 => x.sign()?,
            Red::L2 => {
                // x / ||x||, taken as 0 where the norm is 0.
                let safe = yk.maximum_scalar(f64::MIN_POSITIVE)?;
                x.div(&safe)?.mul(&yk.greater_scalar(0.0)?)?
            }
            Red::Prod => prod_grad(&x, &ax_i, &in_shape)?,
        };
        Ok(vec![Some(gk.mul(&local)?)])
    }))
}

/// d prod / d x_i = product of the other elements, exact when some elements are zero.
fn prod_grad(x: &NDArray, ax: &[i64], shape: &[usize]) -> Result<NDArray> {
    let is_zero = x.equal_scalar(0.0)?;
    let x_nz = NDArray::where_(&is_zero, &x.ones_like(), x)?;
    let p_nz = x_nz.prod(Some(ax), true)?.broadcast_to(shape)?;
    let zc = is_zero.sum(Some(ax), true)?.broadcast_to(shape)?;
    let zeros = x.zeros_like();
    // No zero in the group: prod / x. Exactly one zero: the zero gets the product of the rest.
    let nonzero_part = NDArray::where_(&zc.equal_scalar(0.0)?, &p_nz.div(&x_nz)?, &zeros)?;
    let zero_part = NDArray::where_(&zc.equal_scalar(1.0)?, &p_nz, &zeros)?;
    NDArray::where_(&is_zero, &zero_part, &nonzero_part)
}

impl NDArray {
    /// Maximum over `axes` (`None`: all). Any dtype; differentiable for floats (ties share).
    pub fn max(&self, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
        reduce_values(self, Red::Max, axes, keepdims)
    }
    /// Minimum over `axes` (`None`: all). Any dtype; differentiable for floats (ties share).
    pub fn min(&self, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
        reduce_values(self, Red::Min, axes, keepdims)
    }
    /// Product over `axes` (`None`: all). Float only; differentiable (exact with zeros).
    pub fn prod(&self, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
        reduce_values(self, Red::Prod, axes, keepdims)
    }
    /// `ord`-norm (1 or 2) over `axes` (`None`: all elements, i.e. the Frobenius norm for
    /// `ord = 2`). Float only; differentiable (the L2 gradient at a zero norm is 0).
    pub fn norm(&self, ord: u32, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
        let r = match ord {
            1 => Red::L1,
            2 => Red::L2,
            o => return Err(Error::arg("norm", format!("ord must be 1 or 2, got {o}"))),
        };
        reduce_values(self, r, axes, keepdims)
    }

    /// Index of the maximum along `axis` (`None`: of the flattened array), as i64; the first
    /// occurrence wins. Any dtype.
    pub fn argmax(&self, axis: Option<i64>, keepdims: bool) -> Result<NDArray> {
        arg_best(self, "argmax", axis, keepdims, true)
    }
    /// Index of the minimum along `axis` (`None`: of the flattened array), as i64.
    pub fn argmin(&self, axis: Option<i64>, keepdims: bool) -> Result<NDArray> {
        arg_best(self, "argmin", axis, keepdims, false)
    }
}

fn arg_best(
    a: &NDArray,
    op: &'static str,
    axis: Option<i64>,
    keepdims: bool,
    max: bool,
) -> Result<NDArray> {
    let d = a.dense_data()?;
    let (dims, out_shape) = match axis {
        None => (
            (1, d.buf.len(), 1),
            if keepdims {
                vec![1; d.shape.len()]
            } else {
                vec![]
            },
        ),
        Some(ax) => {
            let ax = norm_axis(op, ax, d.shape.len())?;
            (
                split3(&d.shape, ax),
                reduced_shape(&d.shape, &[ax], keepdims),
            )
        }
    };
    if dims.1 == 0 {
        return Err(Error::shape(
            op,
            format!("empty axis in shape {:?}", d.shape),
        ));
    }
    let v: Vec<i64> = crate::with_buffer!(&d.buf, s => arg_kernel(s.as_slice(), dims, max));
    NDArray::from_vec(v, &out_shape)
}

fn arg_kernel<T: Element>(
    src: &[T],
    (outer, n, inner): (usize, usize, usize),
    max: bool,
) -> Vec<i64> {
    // (value, index) pairs; `better` keeps the earlier index on ties.
    let better = move |a: (T, usize), b: (T, usize)| {
        let wins = if max { b.0 > a.0 } else { b.0 < a.0 };
        if wins || (b.0 == a.0 && b.1 < a.1) {
            b
        } else {
            a
        }
    };
    if outer * inner == 1 {
        let best = if src.len() >= super::PAR_THRESHOLD {
            src.par_chunks(1 << 16)
                .enumerate()
                .map(|(c, ch)| {
                    let base = c << 16;
                    ch.iter()
                        .enumerate()
                        .fold((ch[0], base), |acc, (j, &x)| better(acc, (x, base + j)))
                })
                .reduce_with(better)
                .expect("non-empty")
        } else {
            src.iter()
                .enumerate()
                .fold((src[0], 0), |acc, (j, &x)| better(acc, (x, j)))
        };
        return vec![best.1 as i64];
    }
    let mut out = vec![0i64; outer * inner];
    let block = |(o, dst): (usize, &mut [i64])| {
        let base = o * n * inner;
        let mut best: Vec<T> = src[base..base + inner].to_vec();
        for k in 1..n {
            let row = &src[base + k * inner..base + (k + 1) * inner];
            for ((b, d), &x) in best.iter_mut().zip(dst.iter_mut()).zip(row) {
                if if max { x > *b } else { x < *b } {
                    *b = x;
                    *d = k as i64;
                }
            }
        }
    };
    if src.len() >= super::PAR_THRESHOLD && outer > 1 {
        out.par_chunks_mut(inner).enumerate().for_each(block);
    } else {
        out.chunks_mut(inner).enumerate().for_each(block);
    }
    out
}

/// Sum of an integer array over `axes` into i64 (exact; u8/i32/i64 all accumulate in i64, so
/// the sum of a 2^31-element u8 array cannot overflow). Not differentiable.
pub(crate) fn sum_int(a: &NDArray, axes: Option<&[i64]>, keepdims: bool) -> Result<NDArray> {
    let d = a.dense_data()?;
    if d.buf.dtype().is_float() {
        return Err(Error::dtype("sum", "sum_int needs an integer array"));
    }
    let ax = norm_axes("sum", axes, d.shape.len())?;
    let out_shape = reduced_shape(&d.shape, &ax, keepdims);
    let v: Vec<i64> = crate::with_buffer!(&d.buf, s => reduce_axes(
        s.as_slice(), &d.shape, &ax, 0i64,
        |acc, x| acc.wrapping_add(x.as_i64()), |p, q| p.wrapping_add(q)));
    NDArray::from_vec(v, &out_shape)
}

/// Exact widening to i64 for the integer sum (f64 would lose i64 values past 2^53).
trait AsI64: Copy {
    fn as_i64(self) -> i64;
}
macro_rules! as_i64 {
    ($($t:ty),*) => {$(impl AsI64 for $t { #[inline] fn as_i64(self) -> i64 { self as i64 } })*};
}
as_i64!(f32, f64, i64, i32, u8);
