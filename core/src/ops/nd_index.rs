//! N-d indexing: `gather_nd`, `scatter_nd` and `scatter_set_nd` (MXNet's `gather_nd`,
//! `scatter_nd` and `_scatter_set_nd`).
//!
//! `indices` has shape `(M, Y0, ..)`: column `y` names the position
//! `(indices[0, y], .., indices[M-1, y])` of the first `M` axes of the indexed array, and with
//! it the whole block of the remaining axes. The positions are read and checked on the host
//! (an out-of-range index is an error naming the operator), turned into block numbers of the
//! array viewed as `(blocks, block size)`, and the data moves through the row gather, row
//! scatter-add and row copy the other indexing operators use, on the array's backend.
//! Gradients come with them: `gather_nd` is `take` of blocks (backward: scatter-add),
//! `scatter_nd` sums into blocks (backward: `gather_nd` of the gradient), `scatter_set_nd` is
//! `index_copy` of blocks.
//!
//! Repeated positions: `scatter_nd` sums them (MXNet leaves the result undefined; the sum is
//! what makes it the exact backward of `gather_nd`), `scatter_set_nd` keeps the last one (as
//! `index_copy` does).

use super::axis::{float_only, index_values, positions_array, scatter_grad};
use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::storage::Storage;
use crate::{NDArray, SType};

/// Checked positions of an `indices` array into an array of shape `target`.
pub(crate) struct NdIndex {
    /// `M`, the number of leading axes indexed.
    pub(crate) m: usize,
    /// `indices.shape[1..]`, the shape of the positions.
    pub(crate) y_shape: Vec<usize>,
    /// Per position, its block: the row-major number of `(i0, .., iM-1)` over `target[..M]`.
    pub(crate) blocks: Vec<usize>,
    /// Elements per block: the product of `target[M..]`.
    pub(crate) block_len: usize,
    /// The number of blocks, the product of `target[..M]`.
    pub(crate) n_blocks: usize,
}

impl NdIndex {
    /// The shape of the values one position per block reads or writes: `Y + target[M..]`.
    pub(crate) fn values_shape(&self, target: &[usize]) -> Vec<usize> {
        let mut s = self.y_shape.clone();
        s.extend_from_slice(&target[self.m..]);
        s
    }
}

/// Read `indices` (i64, or integer-valued floats / i32 / u8) and check it against `target`:
/// at least one dimension, `1 <= M <= target.len()`, and each `indices[k, y]` inside axis `k`
/// (negative values count from the end, as `take` does). Errors name `op` and the position.
pub(crate) fn resolve_nd(op: &'static str, indices: &NDArray, target: &[usize]) -> Result<NdIndex> {
    let ishape = indices.shape();
    let Some(&m) = ishape.first() else {
        return Err(Error::shape(
            op,
            "indices must have shape (M, ...) with at least one dimension, got a 0-d array",
        ));
    };
    if m == 0 || m > target.len() {
        return Err(Error::shape(
            op,
            format!(
                "indices of shape {:?} index {m} axes of an array of shape {target:?} \
                 (needs 1 to {})",
                &ishape[..],
                target.len()
            ),
        ));
    }
    let y_shape = ishape[1..].to_vec();
    let count: usize = y_shape.iter().product();
    let vals = index_values(op, indices)?;
    let mut blocks = vec![0usize; count];
    for (k, &n) in target[..m].iter().enumerate() {
        for (y, b) in blocks.iter_mut().enumerate() {
            let v = vals[k * count + y];
            let r = if v < 0 { v + n as i64 } else { v };
            if r < 0 || r >= n as i64 {
                return Err(Error::index(
                    op,
                    format!(
                        "index {v} at indices[{k}, {y}] is out of range for axis {k} of length {n}"
                    ),
                ));
            }
            // `b * n + r` stays below the product of target[..m], which is an array's size.
            *b = *b * n + r as usize;
        }
    }
    Ok(NdIndex {
        m,
        y_shape,
        blocks,
        block_len: target[m..].iter().product(),
        n_blocks: target[..m].iter().product(),
    })
}

/// The blocks `blocks` of `g` (shape `shape`, viewed as `n_blocks` blocks of `block_len`), as
/// a dense `(blocks.len(), block_len)` array: a gather of rows for a dense `g`; for a
/// row_sparse `g` a gather from its stored rows, a zero block for a row it does not store (no
/// dense copy of `g`); a csr `g` is made dense first.
pub(crate) fn blocks_of(
    g: &NDArray,
    shape: &[usize],
    (n_blocks, block_len): (usize, usize),
    blocks: &[usize],
) -> Result<NDArray> {
    let dev = g.device();
    match g.stype() {
        SType::RowSparse => {
            let (ids, vals) = g.row_sparse_parts()?;
            // Blocks per row (at least 1: rows of no elements still have one empty block).
            let per_row = (n_blocks / shape.first().copied().unwrap_or(1).max(1)).max(1);
            let stored = ids.len() * per_row;
            let flat = NDArray::from_buffer(vals.dense_data()?.buf, &[stored, block_len])?;
            let zero = NDArray::from_buffer(
                Storage::zeros_on(g.dtype(), block_len, dev)?,
                &[1, block_len],
            )?;
            let table = NDArray::concat(&[&flat, &zero], 0)?;
            let pos: Vec<usize> = blocks
                .iter()
                .map(|&b| match ids.binary_search(&((b / per_row) as i64)) {
                    Ok(k) => k * per_row + b % per_row,
                    Err(_) => stored,
                })
                .collect();
            table.take(&positions_array(&pos, dev)?, 0)
        }
        _ => {
            let gd = g.dense_data()?;
            let flat = NDArray::from_buffer(gd.buf, &[n_blocks, block_len])?;
            flat.take(&positions_array(blocks, dev)?, 0)
        }
    }
}

impl NDArray {
    /// MXNet's `gather_nd`: for `indices` of shape `(M, Y0, ..)`, the result has shape
    /// `(Y0, .., shape[M], ..)` and holds `self[indices[0, y], .., indices[M-1, y], ..]` at
    /// `y`. Negative indices count from the end; out-of-range ones are an error.
    /// Differentiable in `self` (the backward scatter-adds, i.e. [`NDArray::scatter_nd`]).
    ///
    /// ```
    /// use sparrow_core::NDArray;
    /// let a = NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    /// // Elements (1, 0) and (0, 1).
    /// let i = NDArray::from_vec(vec![1i64, 0, 0, 1], &[2, 2]).unwrap();
    /// assert_eq!(a.gather_nd(&i).unwrap().to_vec::<f32>().unwrap(), vec![3.0, 2.0]);
    /// ```
    pub fn gather_nd(&self, indices: &NDArray) -> Result<NDArray> {
        const OP: &str = "gather_nd";
        crate::sparse::densifying(OP, &[self])?;
        let shape = self.shape();
        let ix = resolve_nd(OP, indices, &shape)?;
        let flat = self.reshape(&[ix.n_blocks, ix.block_len])?;
        let out = flat.take(&positions_array(&ix.blocks, self.device())?, 0)?;
        out.reshape(&ix.values_shape(&shape))
    }

    /// MXNet's `scatter_nd`: a dense array of `shape`, zero except at the positions
    /// `indices` names, which receive `data` (shape `(Y0, .., shape[M], ..)` for `indices` of
    /// shape `(M, Y0, ..)`). Repeated positions are summed (MXNet leaves them undefined; the
    /// sum makes this the exact backward of [`NDArray::gather_nd`]). Float data.
    /// Differentiable in `data` (its gradient is `gather_nd` of the head gradient).
    /// [`NDArray::scatter_nd_stype`] makes a row_sparse result.
    ///
    /// ```
    /// use sparrow_core::NDArray;
    /// let d = NDArray::from_vec(vec![5.0f32, 7.0], &[2]).unwrap();
    /// let i = NDArray::from_vec(vec![1i64, 0, 0, 2], &[2, 2]).unwrap();
    /// let s = NDArray::scatter_nd(&d, &i, &[2, 3]).unwrap();
    /// assert_eq!(s.to_vec::<f32>().unwrap(), vec![0.0, 0.0, 7.0, 5.0, 0.0, 0.0]);
    /// ```
    pub fn scatter_nd(data: &NDArray, indices: &NDArray, shape: &[usize]) -> Result<NDArray> {
        NDArray::scatter_nd_stype(data, indices, shape, SType::Dense)
    }

    /// [`NDArray::scatter_nd`] with the result's storage type: dense, or row_sparse, whose
    /// stored rows are the distinct values of `indices[0, ..]` (sorted). A row_sparse result
    /// costs memory for those rows only, however large `shape[0]` is: the way to build a
    /// sparse update of an embedding table. csr is refused.
    pub fn scatter_nd_stype(
        data: &NDArray,
        indices: &NDArray,
        shape: &[usize],
        stype: SType,
    ) -> Result<NDArray> {
        const OP: &str = "scatter_nd";
        crate::sparse::densifying(OP, &[data])?;
        float_only(OP, data.dtype())?;
        let ix = resolve_nd(OP, indices, shape)?;
        let want = ix.values_shape(shape);
        if data.shape()[..] != want[..] {
            return Err(Error::shape(
                OP,
                format!(
                    "data has shape {:?}, expected {want:?} for indices of shape {:?} into {shape:?}",
                    &data.shape()[..],
                    &indices.shape()[..]
                ),
            ));
        }
        match stype {
            SType::Dense => {}
            SType::RowSparse => return crate::sparse::scatter_nd_rsp(data, ix, shape),
            SType::Csr => {
                return Err(Error::stype(
                    OP,
                    "makes a dense or row_sparse array, not csr",
                ))
            }
        }
        let count = ix.blocks.len();
        let flat = NDArray::from_buffer(data.dense_data()?.buf, &[count, ix.block_len])?;
        let positions = positions_array(&ix.blocks, data.device())?;
        let summed = scatter_grad(OP, &flat, &[ix.n_blocks, ix.block_len], 0, &positions)?;
        let out = NDArray::from_buffer(summed.dense_data()?.buf, shape)?;
        let (shape, dshape) = (shape.to_vec(), data.shape());
        Ok(record_op(OP, out, &[data], move |g| {
            let got = blocks_of(g, &shape, (ix.n_blocks, ix.block_len), &ix.blocks)?;
            Ok(vec![Some(got.reshape(&dshape)?)])
        }))
    }

    /// MXNet's `_scatter_set_nd`: a copy of `self` whose positions `indices` names are set
    /// to `rhs` (shape `(Y0, .., shape[M], ..)` for `indices` of shape `(M, Y0, ..)`); where a
    /// position repeats, the last write wins (as [`NDArray::index_copy`]). A row_sparse `self`
    /// gives a row_sparse result: its rows plus the rows written, rows it did not store
    /// starting from zero. Differentiable in `self` and `rhs`.
    ///
    /// ```
    /// use sparrow_core::NDArray;
    /// let a = NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    /// let i = NDArray::from_vec(vec![1i64, 0], &[2, 1]).unwrap();
    /// let r = NDArray::from_vec(vec![9.0f32], &[1]).unwrap();
    /// assert_eq!(a.scatter_set_nd(&r, &i).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 9.0, 4.0]);
    /// ```
    pub fn scatter_set_nd(&self, rhs: &NDArray, indices: &NDArray) -> Result<NDArray> {
        const OP: &str = "scatter_set_nd";
        if self.dtype() != rhs.dtype() {
            return Err(Error::dtype_mismatch(OP, self.dtype(), rhs.dtype()));
        }
        let shape = self.shape();
        let ix = resolve_nd(OP, indices, &shape)?;
        let want = ix.values_shape(&shape);
        if rhs.shape()[..] != want[..] {
            return Err(Error::shape(
                OP,
                format!(
                    "rhs has shape {:?}, expected {want:?} for indices of shape {:?} into {:?}",
                    &rhs.shape()[..],
                    &indices.shape()[..],
                    &shape[..]
                ),
            ));
        }
        if self.stype() == SType::RowSparse && rhs.stype() == SType::Dense {
            return crate::sparse::scatter_set_nd_rsp(self, rhs, ix);
        }
        crate::sparse::densifying(OP, &[self, rhs])?;
        let count = ix.blocks.len();
        let flat = self.reshape(&[ix.n_blocks, ix.block_len])?;
        let new = rhs.reshape(&[count, ix.block_len])?;
        let set = flat.index_copy(&positions_array(&ix.blocks, self.device())?, &new)?;
        set.reshape(&shape)
    }
}
