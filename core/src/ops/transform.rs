//! Shape transforms: transpose/swapaxes, expand_dims/squeeze, concat/stack/split, tile.
//!
//! All work for every dtype; all are differentiable for float arrays. Ops that only change the
//! shape go through `reshape` and share the buffer; the copies (`Storage::permute`,
//! `Storage::concat`) run on the arrays' backend.

use super::axis::{norm_axis, split3};
use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::storage::Storage;
use crate::NDArray;

impl NDArray {
    /// Permute the axes (`None` reverses them, as NumPy's `transpose`). Differentiable.
    pub fn transpose(&self, axes: Option<&[usize]>) -> Result<NDArray> {
        let nd = self.ndim();
        let perm: Vec<usize> = match axes {
            None => (0..nd).rev().collect(),
            Some(p) => {
                let mut seen = vec![false; nd];
                if p.len() != nd
                    || p.iter()
                        .any(|&a| a >= nd || std::mem::replace(&mut seen[a], true))
                {
                    return Err(Error::arg(
                        "transpose",
                        format!(
                            "axes {p:?} are not a permutation of 0..{nd} for shape {:?}",
                            self.shape()
                        ),
                    ));
                }
                p.to_vec()
            }
        };
        crate::graph::traced!(
            Op::Transpose(perm.clone()),
            [self],
            self.transpose(Some(&perm))
        );
        crate::sparse::densifying("transpose", &[self])?;
        let d = self.dense_data()?;
        let oshape: Vec<usize> = perm.iter().map(|&p| d.shape[p]).collect();
        let buf = d.buf.permute(&d.shape, &perm)?;
        let out = NDArray::from_buffer(buf, &oshape)?;
        let mut inv = vec![0; nd];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        Ok(record_op("transpose", out, &[self], move |g| {
            Ok(vec![Some(g.transpose(Some(&inv))?)])
        }))
    }

    /// Swap two axes. Differentiable.
    pub fn swapaxes(&self, a: i64, b: i64) -> Result<NDArray> {
        let nd = self.ndim();
        let (a, b) = (norm_axis("swapaxes", a, nd)?, norm_axis("swapaxes", b, nd)?);
        let mut perm: Vec<usize> = (0..nd).collect();
        perm.swap(a, b);
        self.transpose(Some(&perm))
    }

    /// Insert a size-1 axis at `axis` (in `-(ndim+1)..=ndim`). Shares the buffer.
    pub fn expand_dims(&self, axis: i64) -> Result<NDArray> {
        let mut shape = self.shape();
        let ax = norm_axis("expand_dims", axis, shape.len() + 1)?;
        shape.insert(ax, 1);
        self.reshape(&shape)
    }

    /// Remove size-1 axes (`None`: all of them; naming an axis that is not size 1 is an error).
    pub fn squeeze(&self, axes: Option<&[i64]>) -> Result<NDArray> {
        let shape = self.shape();
        let drop = match axes {
            None => (0..shape.len()).filter(|&i| shape[i] == 1).collect(),
            Some(a) => {
                let ax = super::axis::norm_axes("squeeze", Some(a), shape.len())?;
                if let Some(&bad) = ax.iter().find(|&&i| shape[i] != 1) {
                    return Err(Error::shape(
                        "squeeze",
                        format!(
                            "axis {bad} of shape {shape:?} has size {}, not 1",
                            shape[bad]
                        ),
                    ));
                }
                ax
            }
        };
        let new: Vec<usize> = (0..shape.len())
            .filter(|i| !drop.contains(i))
            .map(|i| shape[i])
            .collect();
        self.reshape(&new)
    }

    /// Join arrays along an existing axis; all other dims and the dtype must agree.
    /// Differentiable in every input. csr arrays joined along rows stay csr; other sparse
    /// operands fall back to dense (a warning, an error in strict mode).
    pub fn concat(arrays: &[&NDArray], axis: i64) -> Result<NDArray> {
        let op = "concat";
        if arrays.is_empty() {
            return Err(Error::arg(op, "needs at least one array"));
        }
        if crate::graph::tracing_outer() {
            let ax = norm_axis(op, axis, arrays[0].ndim())?;
            let node = crate::graph::Op::Concat {
                axis: ax,
                n: arrays.len(),
            };
            return crate::graph::record_call(
                || node,
                arrays,
                || NDArray::concat(arrays, ax as i64),
            );
        }
        // csr parts along rows: a csr result (`sparse::concat_rows`), recorded.
        if arrays.iter().all(|a| a.stype() == crate::SType::Csr) && norm_axis(op, axis, 2)? == 0 {
            return crate::sparse::concat_csr_recorded(arrays);
        }
        crate::sparse::densifying(op, arrays)?;
        let data: Vec<_> = arrays
            .iter()
            .map(|a| a.dense_data())
            .collect::<Result<_>>()?;
        let s0 = data[0].shape.clone();
        let ax = norm_axis(op, axis, s0.len())?;
        for d in &data[1..] {
            let same = d.shape.len() == s0.len()
                && d.shape
                    .iter()
                    .zip(&s0)
                    .enumerate()
                    .all(|(i, (a, b))| i == ax || a == b);
            if !same {
                return Err(Error::shape(
                    op,
                    format!("shapes {s0:?} and {:?} differ outside axis {ax}", d.shape),
                ));
            }
            if d.buf.dtype() != data[0].buf.dtype() {
                return Err(Error::dtype_mismatch(
                    op,
                    data[0].buf.dtype(),
                    d.buf.dtype(),
                ));
            }
        }
        let sizes: Vec<usize> = data.iter().map(|d| d.shape[ax]).collect();
        let total: usize = sizes.iter().sum();
        let (outer, _, inner) = split3(&s0, ax);
        let mut out_shape = s0.clone();
        out_shape[ax] = total;
        let parts: Vec<&Storage> = data.iter().map(|d| &d.buf).collect();
        let buf = Storage::concat(&parts, &sizes, outer, inner)?;
        let out = NDArray::from_buffer(buf, &out_shape)?;
        Ok(record_op(op, out, arrays, move |g| {
            let mut off = 0i64;
            let mut grads = Vec::with_capacity(sizes.len());
            for &m in &sizes {
                grads.push(Some(g.slice_axis(
                    ax as i64,
                    Some(off),
                    Some(off + m as i64),
                    1,
                )?));
                off += m as i64;
            }
            Ok(grads)
        }))
    }

    /// Join arrays of one shape along a new axis. Differentiable.
    pub fn stack(arrays: &[&NDArray], axis: i64) -> Result<NDArray> {
        let first = arrays
            .first()
            .ok_or_else(|| Error::arg("stack", "needs at least one array"))?;
        let s0 = first.shape();
        let ax = norm_axis("stack", axis, s0.len() + 1)? as i64;
        let mut ex = Vec::with_capacity(arrays.len());
        for a in arrays {
            if a.shape() != s0 {
                return Err(Error::shape(
                    "stack",
                    format!("shapes {s0:?} and {:?} differ", a.shape()),
                ));
            }
            ex.push(a.expand_dims(ax)?);
        }
        let refs: Vec<&NDArray> = ex.iter().collect();
        NDArray::concat(&refs, ax)
    }

    /// Split into `sections` equal parts along `axis` (the axis length must divide evenly).
    /// Each part is differentiable.
    pub fn split(&self, sections: usize, axis: i64) -> Result<Vec<NDArray>> {
        let shape = self.shape();
        let ax = norm_axis("split", axis, shape.len())?;
        if sections == 0 || !shape[ax].is_multiple_of(sections) {
            return Err(Error::arg(
                "split",
                format!("axis {ax} of shape {shape:?} cannot be split into {sections} equal parts"),
            ));
        }
        let m = (shape[ax] / sections) as i64;
        (0..sections as i64)
            .map(|i| self.slice_axis(ax as i64, Some(i * m), Some((i + 1) * m), 1))
            .collect()
    }

    /// Repeat the whole array `reps[i]` times along each axis (NumPy's `tile`; the shorter of
    /// `reps` and the shape is padded with leading 1s). Differentiable.
    pub fn tile(&self, reps: &[usize]) -> Result<NDArray> {
        let shape = self.shape();
        let nd = shape.len().max(reps.len());
        let pad = |v: &[usize]| -> Vec<usize> {
            let mut p = vec![1; nd - v.len()];
            p.extend_from_slice(v);
            p
        };
        let (s, r) = (pad(&shape), pad(reps));
        // [d0, d1, ..] -> [1, d0, 1, d1, ..] -> broadcast [r0, d0, r1, d1, ..] -> [r0*d0, ..]
        let inter: Vec<usize> = s.iter().flat_map(|&d| [1, d]).collect();
        let bcast: Vec<usize> = s.iter().zip(&r).flat_map(|(&d, &k)| [k, d]).collect();
        let fin: Vec<usize> = s.iter().zip(&r).map(|(&d, &k)| d * k).collect();
        self.reshape(&inter)?.broadcast_to(&bcast)?.reshape(&fin)
    }
}
