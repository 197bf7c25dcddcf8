//! The CPU's layout family ([`LayoutOps`]): copies that move elements without computing on
//! them. Every kernel runs once per dtype (`with_buffer!` picks the monomorphized copy loop);
//! the parallel thresholds are those of the elementwise kernels.

use std::sync::Arc;

use rayon::prelude::*;

use super::broadcast::broadcast_apply;
use super::elementwise::{map_slice, PAR_THRESHOLD};
use super::{with_buffer, CpuStorage, HostElement};
use crate::dtype::{DType, Element, Float};
use crate::error::{Error, Result};
use crate::float_dispatch;
use crate::storage::LayoutOps;

/// Copy `src` (row-major `shape`) into the axis order `perm`.
pub(crate) fn permute<T: Copy + Send + Sync + Default>(
    src: &[T],
    shape: &[usize],
    perm: &[usize],
) -> Vec<T> {
    let nd = shape.len();
    let n = src.len();
    let mut out = vec![T::default(); n];
    if n == 0 || nd == 0 {
        out.copy_from_slice(src);
        return out;
    }
    let mut in_strides = vec![1usize; nd];
    for i in (0..nd.saturating_sub(1)).rev() {
        in_strides[i] = in_strides[i + 1] * shape[i + 1];
    }
    let oshape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let ostr: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let inner = oshape[nd - 1];
    let istep = ostr[nd - 1];
    let fill_row = |(row, dst): (usize, &mut [T])| {
        let (mut off, mut rem) = (0, row);
        for d in (0..nd - 1).rev() {
            off += (rem % oshape[d]) * ostr[d];
            rem /= oshape[d];
        }
        for (j, o) in dst.iter_mut().enumerate() {
            *o = src[off + j * istep];
        }
    };
    if n >= PAR_THRESHOLD {
        out.par_chunks_mut(inner).enumerate().for_each(fill_row);
    } else {
        out.chunks_mut(inner).enumerate().for_each(fill_row);
    }
    out
}

/// `out[o, j, i] = src[o, idx[j], i]` for `idx` already validated to be `< n`.
pub(crate) fn gather_axis<T: Copy + Send + Sync + Default>(
    src: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    idx: &[i64],
) -> Vec<T> {
    gather_axis_by(src, (outer, n, inner), idx.len(), |j| idx[j] as usize)
}

/// `out[o, j, i] = src[o, pos(j), i]` for `j < m`, `pos(j) < n`: the gather of a take (a
/// list of positions) and of a slice (positions computed from its start and step, so that a
/// slice of 2^31 rows holds no 16 GiB list). Parallel over `outer`, or over blocks of `j`
/// when there is one outer slab (a 1-D array).
pub(crate) fn gather_axis_by<T: Copy + Send + Sync + Default>(
    src: &[T],
    (outer, n, inner): (usize, usize, usize),
    m: usize,
    pos: impl Fn(usize) -> usize + Sync,
) -> Vec<T> {
    let mut out = vec![T::default(); outer * m * inner];
    if out.is_empty() {
        return out;
    }
    // `dst` holds consecutive output rows of one outer slab, starting at `j0`.
    let fill = |o: usize, j0: usize, dst: &mut [T]| {
        let base = o * n * inner;
        for (jj, d) in dst.chunks_mut(inner).enumerate() {
            let s = base + pos(j0 + jj) * inner;
            d.copy_from_slice(&src[s..s + inner]);
        }
    };
    if out.len() < PAR_THRESHOLD {
        out.chunks_mut(m * inner)
            .enumerate()
            .for_each(|(o, dst)| fill(o, 0, dst));
    } else if outer > 1 {
        out.par_chunks_mut(m * inner)
            .enumerate()
            .for_each(|(o, dst)| fill(o, 0, dst));
    } else {
        let rows = (PAR_THRESHOLD / inner).max(1);
        out.par_chunks_mut(rows * inner)
            .enumerate()
            .for_each(|(b, dst)| fill(0, b * rows, dst));
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
    idx: &[i64],
) -> Vec<T> {
    let m = idx.len();
    let mut out = vec![T::zero(); outer * n * inner];
    if out.is_empty() || m == 0 {
        return out;
    }
    let add = |(o, dst): (usize, &mut [T])| {
        let gb = &g[o * m * inner..(o + 1) * m * inner];
        for (j, &k) in idx.iter().enumerate() {
            let k = k as usize;
            for (d, &s) in dst[k * inner..(k + 1) * inner]
                .iter_mut()
                .zip(&gb[j * inner..(j + 1) * inner])
            {
                *d = *d + s;
            }
        }
    };
    if out.len() >= PAR_THRESHOLD && outer > 1 {
        out.par_chunks_mut(n * inner).enumerate().for_each(add);
    } else {
        out.chunks_mut(n * inner).enumerate().for_each(add);
    }
    out
}

/// `out[o, j, i] = src[o, idx[o, j, i], i]` for `idx` of `[outer, k, inner]`.
fn take_along<T: Copy + Default>(
    src: &[T],
    (outer, n, inner): (usize, usize, usize),
    idx: &[i64],
    k: usize,
) -> Vec<T> {
    let mut out = vec![T::default(); idx.len()];
    for o in 0..outer {
        for j in 0..k {
            for i in 0..inner {
                let q = (o * k + j) * inner + i;
                out[q] = src[(o * n + idx[q] as usize) * inner + i];
            }
        }
    }
    out
}

/// The adjoint of [`take_along`]: each `g[o, j, i]` added back to the position
/// `[o, idx[o, j, i], i]` of zeros of `[outer, n, inner]`.
fn scatter_along<T: Float>(
    g: &[T],
    (outer, n, inner): (usize, usize, usize),
    idx: &[i64],
    k: usize,
) -> Vec<T> {
    let mut out = vec![T::zero(); outer * n * inner];
    for o in 0..outer {
        for j in 0..k {
            for i in 0..inner {
                let q = (o * k + j) * inner + i;
                let p = (o * n + idx[q] as usize) * inner + i;
                out[p] = out[p] + g[q];
            }
        }
    }
    out
}

/// The typed one-hot rows of `idx`: `on` at each row's index in `0..depth`, `off` elsewhere.
fn one_hot_typed<T: Element>(idx: &[i64], depth: usize, on: f64, off: f64) -> Result<Vec<T>> {
    // `as` conversions, as `full` and `astype` make them.
    let (on, off) = (T::from_f64(on), T::from_f64(off));
    let n = idx.len().checked_mul(depth).ok_or_else(|| {
        Error::shape(
            "one_hot",
            format!("{} x {depth} elements overflow usize", idx.len()),
        )
    })?;
    let mut out = super::alloc::try_filled("one_hot", n, off)?;
    for (r, &i) in idx.iter().enumerate() {
        if i >= 0 && (i as usize) < depth {
            out[r * depth + i as usize] = on;
        }
    }
    Ok(out)
}

/// The i64 positions a gather reads (operators make them i64; anything else is a bug that
/// must not read garbage).
fn positions<'a>(op: &'static str, pos: &'a CpuStorage) -> Result<&'a [i64]> {
    i64::slice(pos).ok_or_else(|| {
        Error::dtype(
            op,
            format!("positions must be int64, got {}", pos.dtype().name()),
        )
    })
}

/// The typed slice of `b`, with the same element type as `like` (a dtype mismatch between
/// operands the operator has already compared is an error, not a panic).
fn same_typed<'a, T: Element>(op: &'static str, _like: &[T], b: &'a CpuStorage) -> Result<&'a [T]> {
    T::slice(b).ok_or_else(|| Error::dtype_mismatch(op, T::DTYPE, b.dtype()))
}

impl CpuStorage {
    /// `out[o, j, i] = self[o, begin + j * step, i]` for `j < len` (a slice along the axis of
    /// `dims`; the caller checked every position is in `0..n`).
    pub(crate) fn slice_strided(
        &self,
        dims: (usize, usize, usize),
        begin: usize,
        step: isize,
        len: usize,
    ) -> CpuStorage {
        let at = |j: usize| (begin as isize + j as isize * step) as usize;
        with_buffer!(self, v => HostElement::into_buffer(gather_axis_by(v.as_slice(), dims, len, at)))
    }
}

impl LayoutOps for CpuStorage {
    fn broadcast(&self, shape: &[usize], out: &[usize]) -> Result<Self> {
        let (zeros, ones) = ([0u8; 1], [1usize]);
        Ok(with_buffer!(self, v => {
            HostElement::into_buffer(broadcast_apply(v.as_slice(), shape, &zeros[..], &ones[..], out, |x, _| x))
        }))
    }

    fn permute(&self, shape: &[usize], perm: &[usize]) -> Result<Self> {
        Ok(with_buffer!(self, v => HostElement::into_buffer(permute(v.as_slice(), shape, perm))))
    }

    fn copy_range(&self, start: usize, end: usize) -> Result<Self> {
        Ok(with_buffer!(self, v => HostElement::into_buffer(v[start..end].to_vec())))
    }

    fn index_select(&self, (outer, n, inner): (usize, usize, usize), pos: &Self) -> Result<Self> {
        let idx = positions("index_select", pos)?;
        Ok(with_buffer!(self, v => {
            HostElement::into_buffer(gather_axis(v.as_slice(), outer, n, inner, idx))
        }))
    }

    fn index_add(&self, (outer, n, inner): (usize, usize, usize), pos: &Self) -> Result<Self> {
        crate::cpu::half::via_f32!(v = self => v.index_add((outer, n, inner), pos));
        let idx = positions("index_add", pos)?;
        Ok(float_dispatch!(self.dtype(), "index_add", T => {
            T::into_buffer(scatter_add_axis(T::slice(self).unwrap(), outer, n, inner, idx))
        }))
    }

    fn gather_along(&self, dims: (usize, usize, usize), pos: &Self, k: usize) -> Result<Self> {
        let idx = positions("gather_along", pos)?;
        Ok(
            with_buffer!(self, v => HostElement::into_buffer(take_along(v.as_slice(), dims, idx, k))),
        )
    }

    fn scatter_add_along(&self, dims: (usize, usize, usize), pos: &Self, k: usize) -> Result<Self> {
        crate::cpu::half::via_f32!(v = self => v.scatter_add_along(dims, pos, k));
        let idx = positions("scatter_add_along", pos)?;
        Ok(float_dispatch!(self.dtype(), "scatter_add_along", T => {
            T::into_buffer(scatter_along(T::slice(self).unwrap(), dims, idx, k))
        }))
    }

    fn concat(parts: &[&Self], sizes: &[usize], outer: usize, inner: usize) -> Result<Self> {
        let first = parts
            .first()
            .ok_or_else(|| Error::arg("concat", "needs at least one array"))?;
        let total: usize = sizes.iter().sum();
        let mut buf = CpuStorage::zeros(first.dtype(), outer * total * inner);
        with_buffer!(&mut buf, v => {
            let dst = Arc::make_mut(v);
            let mut off = 0;
            for (d, &m) in parts.iter().zip(sizes) {
                let src = same_typed("concat", dst, d)?;
                let blk = m * inner;
                for o in 0..outer {
                    let at = o * total * inner + off;
                    dst[at..at + blk].copy_from_slice(&src[o * blk..(o + 1) * blk]);
                }
                off += blk;
            }
        });
        Ok(buf)
    }

    fn index_copy(&self, row: usize, pos: &Self, new: &Self) -> Result<Self> {
        let idx = positions("index_copy", pos)?;
        // A copy: the input is shared with its array, so the write below copies it first.
        let mut buf = self.clone();
        with_buffer!(&mut buf, v => {
            let src = same_typed("index_copy", v.as_slice(), new)?;
            let dst = Arc::make_mut(v);
            for (j, &k) in idx.iter().enumerate() {
                let k = k as usize;
                dst[k * row..(k + 1) * row].copy_from_slice(&src[j * row..(j + 1) * row]);
            }
        });
        Ok(buf)
    }

    fn one_hot(&self, depth: usize, on: f64, off: f64, dtype: DType) -> Result<Self> {
        // Index values as i64: exact for i64, truncated through f64 otherwise (MXNet's rule).
        let converted: Vec<i64>;
        let idx: &[i64] = match self {
            CpuStorage::I64(v) => v,
            other => {
                converted = with_buffer!(other, v => v.iter().map(|x| x.to_f64() as i64).collect());
                &converted
            }
        };
        Ok(match dtype {
            DType::F32 => f32::into_buffer(one_hot_typed(idx, depth, on, off)?),
            DType::F64 => f64::into_buffer(one_hot_typed(idx, depth, on, off)?),
            DType::I64 => i64::into_buffer(one_hot_typed(idx, depth, on, off)?),
            DType::I32 => i32::into_buffer(one_hot_typed(idx, depth, on, off)?),
            DType::U8 => u8::into_buffer(one_hot_typed(idx, depth, on, off)?),
            DType::F16 => half::f16::into_buffer(one_hot_typed(idx, depth, on, off)?),
            DType::BF16 => half::bf16::into_buffer(one_hot_typed(idx, depth, on, off)?),
        })
    }

    fn nonzero_mask(&self) -> Result<Self> {
        fn nonzero<T: Element>(s: &[T]) -> Vec<u8> {
            let z = T::from_f64(0.0);
            map_slice(s, |x| (x != z) as u8)
        }
        Ok(u8::into_buffer(
            with_buffer!(self, s => nonzero(s.as_slice())),
        ))
    }

    fn select(&self, x: &Self, y: &Self) -> Result<Self> {
        let cs = u8::slice(self).ok_or_else(|| {
            Error::dtype(
                "where",
                format!("mask must be u8, got {}", self.dtype().name()),
            )
        })?;
        // A copy of `x` (shared with its array, so the write copies it first) where `y`
        // replaces the masked-off elements.
        let mut out = x.clone();
        with_buffer!(&mut out, v => {
            let ys = same_typed("where", v.as_slice(), y)?;
            let dst = Arc::make_mut(v);
            for ((d, &m), &b) in dst.iter_mut().zip(cs).zip(ys) {
                if m == 0 {
                    *d = b;
                }
            }
        });
        Ok(out)
    }

    fn write_at(&mut self, offset: usize, src: &Self) -> Result<()> {
        let len = self.len();
        with_buffer!(&mut *self, v => {
            let src = same_typed("write_rows", v.as_slice(), src)?;
            let end = offset
                .checked_add(src.len())
                .filter(|&e| e <= len)
                .ok_or_else(|| {
                    Error::index(
                        "write_rows",
                        format!("{} elements at {offset} overrun the array's {len}", src.len()),
                    )
                })?;
            super::host_buf::unique_mut("write_rows", v)?[offset..end].copy_from_slice(src);
        });
        Ok(())
    }
}
