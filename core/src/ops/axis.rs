//! Shared kernels for operators that work along one axis: an array of shape
//! `[..before, n, ..after]` is viewed as `[outer, n, inner]` (row-major), so an axis operator is
//! a loop over `outer` blocks of `n * inner` contiguous elements.

use rayon::prelude::*;

use crate::cpu::CpuStorage;
use crate::dtype::{DType, Float};
use crate::error::{Error, Result};
use crate::NDArray;

/// Normalise one axis (negative counts from the end).
pub(crate) fn norm_axis(op: &'static str, axis: i64, ndim: usize) -> Result<usize> {
    let ax = if axis < 0 { axis + ndim as i64 } else { axis };
    if ax < 0 || ax >= ndim as i64 {
        return Err(Error::index(
            op,
            format!("axis {axis} out of range for {ndim}-D array"),
        ));
    }
    Ok(ax as usize)
}

/// `(outer, n, inner)` of `shape` around `axis`.
pub(crate) fn split3(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

/// `out[o, j, i] = src[o, idx[j], i]` for `idx` already validated to be `< n`.
pub(crate) fn gather_axis<T: Copy + Send + Sync + Default>(
    src: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    idx: &[usize],
) -> Vec<T> {
    let m = idx.len();
    let mut out = vec![T::default(); outer * m * inner];
    if out.is_empty() {
        return out;
    }
    let fill = |(o, dst): (usize, &mut [T])| {
        let base = o * n * inner;
        for (j, &k) in idx.iter().enumerate() {
            let s = base + k * inner;
            dst[j * inner..(j + 1) * inner].copy_from_slice(&src[s..s + inner]);
        }
    };
    if out.len() >= super::PAR_THRESHOLD && outer > 1 {
        out.par_chunks_mut(m * inner).enumerate().for_each(fill);
    } else {
        out.chunks_mut(m * inner).enumerate().for_each(fill);
    }
    out
}

/// The adjoint of [`gather_axis`]: `out[o, idx[j], i] += g[o, j, i]` into zeros of
/// `[outer, n, inner]` (repeated indices accumulate).
pub(crate) fn scatter_add_axis<T: Float>(
    g: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    idx: &[usize],
) -> Vec<T> {
    let m = idx.len();
    let mut out = vec![T::zero(); outer * n * inner];
    if out.is_empty() || m == 0 {
        return out;
    }
    let add = |(o, dst): (usize, &mut [T])| {
        let gb = &g[o * m * inner..(o + 1) * m * inner];
        for (j, &k) in idx.iter().enumerate() {
            for (d, &s) in dst[k * inner..(k + 1) * inner]
                .iter_mut()
                .zip(&gb[j * inner..(j + 1) * inner])
            {
                *d = *d + s;
            }
        }
    };
    if out.len() >= super::PAR_THRESHOLD && outer > 1 {
        out.par_chunks_mut(n * inner).enumerate().for_each(add);
    } else {
        out.chunks_mut(n * inner).enumerate().for_each(add);
    }
    out
}

/// [`gather_axis`] on a buffer of any dtype.
pub(crate) fn gather_buf(
    buf: &CpuStorage,
    outer: usize,
    n: usize,
    inner: usize,
    idx: &[usize],
) -> CpuStorage {
    crate::with_buffer!(buf, v => crate::cpu::HostElement::into_buffer(gather_axis(v.as_slice(), outer, n, inner, idx)))
}

/// Scatter-add a float gradient back along an axis, as an array of `in_shape`.
pub(crate) fn scatter_grad(
    op: &'static str,
    g: &NDArray,
    in_shape: &[usize],
    axis: usize,
    idx: &[usize],
) -> Result<NDArray> {
    let (outer, n, inner) = split3(in_shape, axis);
    let gd = g.dense_data()?;
    Ok(crate::float_dispatch!(gd.buf.dtype(), op, T => {
        let v = scatter_add_axis(gd.buf.as_slice::<T>().unwrap(), outer, n, inner, idx);
        NDArray::from_vec(v, in_shape)?
    }))
}

/// The values of an index array as i64 (floats are truncated, as MXNet does).
pub(crate) fn index_values(op: &'static str, a: &NDArray) -> Result<Vec<i64>> {
    match a.dtype() {
        DType::I64 => a.to_vec::<i64>(),
        // Exact in f64 and integral by type.
        DType::I32 | DType::U8 => Ok(a.to_f64_vec().into_iter().map(|x| x as i64).collect()),
        // `x as i64` truncates (2.9 took row 2) and maps NaN to 0 (row 0): a float index must
        // be an integer that i64 holds, or the caller's bug goes unnoticed.
        DType::F32 | DType::F64 => a
            .to_f64_vec()
            .into_iter()
            .enumerate()
            .map(|(k, x)| {
                // 2^63 is exact in f64; every integral float below it in magnitude fits i64.
                if x.is_finite() && x.fract() == 0.0 && x.abs() < 9_223_372_036_854_775_808.0 {
                    Ok(x as i64)
                } else {
                    Err(Error::index(
                        op,
                        format!("index {x} at position {k} is not an integer"),
                    ))
                }
            })
            .collect(),
    }
}

/// Check indices against an axis of length `n`; negative ones count from the end.
pub(crate) fn resolve_indices(op: &'static str, idx: &[i64], n: usize) -> Result<Vec<usize>> {
    idx.iter()
        .map(|&i| {
            let r = if i < 0 { i + n as i64 } else { i };
            if r < 0 || r >= n as i64 {
                Err(Error::index(
                    op,
                    format!("index {i} out of range for axis of length {n}"),
                ))
            } else {
                Ok(r as usize)
            }
        })
        .collect()
}

/// Normalise an axis list (negative axes count from the end); `None` means all axes.
pub(crate) fn norm_axes(op: &'static str, axes: Option<&[i64]>, ndim: usize) -> Result<Vec<usize>> {
    let Some(axes) = axes else {
        return Ok((0..ndim).collect());
    };
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let ax = if a < 0 { a + ndim as i64 } else { a };
        if ax < 0 || ax >= ndim as i64 {
            return Err(Error::index(
                op,
                format!("axis {a} out of range for {ndim}-D array"),
            ));
        }
        if out.contains(&(ax as usize)) {
            return Err(Error::arg(op, format!("axis {a} repeated")));
        }
        out.push(ax as usize);
    }
    out.sort_unstable();
    Ok(out)
}

/// Shape after reducing `axes` (kept as size-1 dims when `keepdims`).
pub(crate) fn reduced_shape(shape: &[usize], axes: &[usize], keepdims: bool) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| {
            if axes.contains(&i) {
                keepdims.then_some(1)
            } else {
                Some(d)
            }
        })
        .collect()
}
