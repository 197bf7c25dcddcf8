//! Shared helpers for operators that work along one axis: an array of shape
//! `[..before, n, ..after]` is viewed as `[outer, n, inner]` (row-major), so an axis kernel is
//! a loop over `outer` blocks of `n * inner` contiguous elements. Axis and index validation
//! lives here; the kernels are the backends' (`crate::storage::layout`, `reduce`).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::storage::Storage;
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

/// An error naming `op` unless `dtype` is a float type (gradients and float-only kernels).
pub(crate) fn float_only(op: &'static str, dtype: DType) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(Error::dtype(
            op,
            format!("needs a float32 or float64 array, got {}", dtype.name()),
        ))
    }
}

/// Scatter-add a float gradient `g` of `[outer, len(positions), inner]` back along `axis`, as
/// an array of `in_shape` (the backward of a gather at the i64 `positions`). A crate-private
/// operator, so the backward runs on whichever backend holds `g`.
pub(crate) fn scatter_grad(
    op: &'static str,
    g: &NDArray,
    in_shape: &[usize],
    axis: usize,
    positions: &NDArray,
) -> Result<NDArray> {
    let dims = split3(in_shape, axis);
    let gd = g.dense_data()?;
    float_only(op, gd.buf.dtype())?;
    let pd = positions.dense_data()?;
    NDArray::from_buffer(gd.buf.index_add(dims, &pd.buf)?, in_shape)
}

/// Host positions (validated, `< n`) as an i64 array on `device`, where the gathers that read
/// them run.
pub(crate) fn positions_array(idx: &[usize], device: crate::Device) -> Result<NDArray> {
    let v: Vec<i64> = idx.iter().map(|&i| i as i64).collect();
    NDArray::from_buffer(Storage::positions_on(v, device)?, &[idx.len()])
}

/// The values of an index array as i64. Read on the host on purpose: operators validate
/// indices there (an out-of-range index is an error naming the op, not a fault inside a
/// kernel), and the checked positions then move to the array's backend once
/// ([`positions_array`]). A float index must be an integer: `x as i64` would truncate (2.9
/// took row 2) and map NaN to 0 (row 0), hiding the caller's bug.
pub(crate) fn index_values(op: &'static str, a: &NDArray) -> Result<Vec<i64>> {
    match a.dtype() {
        DType::I64 => a.to_vec::<i64>(),
        // Exact in f64 and integral by type.
        DType::I32 | DType::U8 => Ok(a.to_f64_vec().into_iter().map(|x| x as i64).collect()),
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => a
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
