//! `scatter_nd` into a row_sparse result and `scatter_set_nd` on a row_sparse array
//! (`NDArray::scatter_nd_stype`, `NDArray::scatter_set_nd`; positions checked by
//! `crate::ops::nd_index`). Both work on the stored rows only: memory and time follow the rows
//! written and stored, not the array's row count. Each is one recorded node whose backward
//! reads the head gradient's blocks (`blocks_of`: a row_sparse head gradient is read from its
//! stored rows, never made dense).

use crate::autograd::{pause, record_op};
use crate::error::Result;
use crate::ops::axis::{positions_array, scatter_grad};
use crate::ops::nd_index::{blocks_of, NdIndex};
use crate::storage::Storage;
use crate::NDArray;

/// The sorted distinct rows of `blocks` (block `b` lies in row `b / per_row`).
fn rows_of(blocks: &[usize], per_row: usize) -> Vec<i64> {
    let mut rows: Vec<i64> = blocks.iter().map(|&b| (b / per_row) as i64).collect();
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// Where block `b` of the full array sits in a table holding only the rows `rows` (sorted),
/// `per_row` blocks each; `None` for a row not there.
fn compact(b: usize, per_row: usize, rows: &[i64]) -> Option<usize> {
    rows.binary_search(&((b / per_row) as i64))
        .ok()
        .map(|k| k * per_row + b % per_row)
}

/// `[rows.len()] + shape[1..]`.
fn stored_shape(n: usize, shape: &[usize]) -> Vec<usize> {
    let mut s = vec![n];
    s.extend_from_slice(&shape[1..]);
    s
}

/// Blocks per row of an array of `shape` cut into `n_blocks` blocks (at least 1, so empty
/// arrays divide safely).
fn per_row(ix: &NdIndex, shape: &[usize]) -> usize {
    (ix.n_blocks / shape[0].max(1)).max(1)
}

/// `scatter_nd` of float `data` (shape checked) to a row_sparse array of `shape`: the rows
/// are the distinct `indices[0, ..]`, repeated positions summed.
pub(crate) fn scatter_nd_rsp(data: &NDArray, ix: NdIndex, shape: &[usize]) -> Result<NDArray> {
    const OP: &str = "scatter_nd";
    let pr = per_row(&ix, shape);
    let rows = rows_of(&ix.blocks, pr);
    let dev = data.device();
    let pos: Vec<usize> = ix
        .blocks
        .iter()
        .map(|&b| compact(b, pr, &rows).unwrap_or(0))
        .collect();
    let flat = NDArray::from_buffer(data.dense_data()?.buf, &[ix.blocks.len(), ix.block_len])?;
    let table = scatter_grad(
        OP,
        &flat,
        &[rows.len() * pr, ix.block_len],
        0,
        &positions_array(&pos, dev)?,
    )?;
    let values = NDArray::from_buffer(table.dense_data()?.buf, &stored_shape(rows.len(), shape))?;
    let out = NDArray::row_sparse_from_arrays(&values, rows, shape)?;
    let (shape, dshape) = (shape.to_vec(), data.shape());
    Ok(record_op(OP, out, &[data], move |g| {
        let got = blocks_of(g, &shape, (ix.n_blocks, ix.block_len), &ix.blocks)?;
        Ok(vec![Some(got.reshape(&dshape)?)])
    }))
}

/// The head gradient `g` of `scatter_set_nd` (an array of `shape`) with the written blocks
/// `blocks` set to zero: `lhs`'s exact gradient, in `g`'s storage type (a row_sparse `g` keeps
/// its rows; a dense `g` gives the dense gradient, exact by design for a dense head).
fn unwritten(
    g: &NDArray,
    shape: &[usize],
    (n_blocks, bl): (usize, usize),
    pr: usize,
    blocks: &[usize],
) -> Result<NDArray> {
    let dev = g.device();
    let zeros = |n: usize| -> Result<NDArray> {
        NDArray::from_buffer(Storage::zeros_on(g.dtype(), n * bl, dev)?, &[n, bl])
    };
    if g.stype() == crate::SType::RowSparse {
        let (ids, vals) = g.row_sparse_parts()?;
        let flat = NDArray::from_buffer(vals.dense_data()?.buf, &[ids.len() * pr, bl])?;
        let hit: Vec<usize> = blocks
            .iter()
            .filter_map(|&b| compact(b, pr, &ids))
            .collect();
        let kept = flat.index_copy(&positions_array(&hit, dev)?, &zeros(hit.len())?)?;
        let kept = NDArray::from_buffer(kept.dense_data()?.buf, &stored_shape(ids.len(), shape))?;
        return NDArray::row_sparse_from_arrays(&kept, ids, shape);
    }
    let gd = crate::sparse::cast_storage(g, crate::SType::Dense)?;
    let flat = NDArray::from_buffer(gd.dense_data()?.buf, &[n_blocks, bl])?;
    let kept = flat.index_copy(&positions_array(blocks, dev)?, &zeros(blocks.len())?)?;
    NDArray::from_buffer(kept.dense_data()?.buf, shape)
}

/// `scatter_set_nd` on a row_sparse `lhs` with a dense `rhs` (shapes and dtypes checked): a
/// row_sparse result over the rows of `lhs` and the rows written, the last write of a
/// repeated position winning. Gradients: `rhs` gets the head gradient at the positions it
/// was written to (zero for a write a later one overwrote); `lhs` gets the head gradient, zero
/// where `rhs` overwrote it ([`unwritten`]).
pub(crate) fn scatter_set_nd_rsp(lhs: &NDArray, rhs: &NDArray, ix: NdIndex) -> Result<NDArray> {
    let shape = lhs.shape();
    let pr = per_row(&ix, &shape);
    let dev = lhs.device();
    let (dtype, bl) = (lhs.dtype(), ix.block_len);
    let (lhs_rows, lhs_vals) = lhs.row_sparse_parts()?;
    let mut rows = rows_of(&ix.blocks, pr);
    rows.extend_from_slice(&lhs_rows);
    rows.sort_unstable();
    rows.dedup();
    let zeros = |n: usize| -> Result<NDArray> {
        NDArray::from_buffer(Storage::zeros_on(dtype, n * bl, dev)?, &[n, bl])
    };
    let out = pause(|| -> Result<NDArray> {
        // lhs's rows, in place among all the rows of the result.
        let at: Vec<usize> = lhs_rows
            .iter()
            .flat_map(|r| {
                let k = rows.binary_search(r).unwrap_or(0);
                (0..pr).map(move |t| k * pr + t)
            })
            .collect();
        let old = NDArray::from_buffer(lhs_vals.dense_data()?.buf, &[at.len(), bl])?;
        let table = zeros(rows.len() * pr)?.index_copy(&positions_array(&at, dev)?, &old)?;
        // Then the written blocks (index_copy: the last of a repeated position wins).
        let pos: Vec<usize> = ix
            .blocks
            .iter()
            .map(|&b| compact(b, pr, &rows).unwrap_or(0))
            .collect();
        let new = rhs.reshape(&[pos.len(), bl])?;
        let table = table.index_copy(&positions_array(&pos, dev)?, &new)?;
        let values =
            NDArray::from_buffer(table.dense_data()?.buf, &stored_shape(rows.len(), &shape))?;
        NDArray::row_sparse_from_arrays(&values, rows.clone(), &shape)
    })?;
    // Which writes reach the output: the last of each position.
    let mut seen = std::collections::HashSet::new();
    let mut keep = vec![0.0f64; ix.blocks.len()];
    for (y, b) in ix.blocks.iter().enumerate().rev() {
        if seen.insert(*b) {
            keep[y] = 1.0;
        }
    }
    let need_lhs = lhs.requires_grad();
    let rshape = rhs.shape();
    Ok(record_op("scatter_set_nd", out, &[lhs, rhs], move |g| {
        let dev = g.device();
        let keep = NDArray::host_vec(keep.clone(), &[keep.len(), 1])?
            .astype(g.dtype())?
            .to_device(dev)?;
        let g_rhs = blocks_of(g, &shape, (ix.n_blocks, bl), &ix.blocks)?
            .mul(&keep)?
            .reshape(&rshape)?;
        let g_lhs = if need_lhs {
            Some(unwritten(g, &shape, (ix.n_blocks, bl), pr, &ix.blocks)?)
        } else {
            None
        };
        Ok(vec![g_lhs, Some(g_rhs)])
    }))
}
