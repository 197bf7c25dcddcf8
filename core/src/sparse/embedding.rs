//! Embedding lookup (rows of a table by id) with a row_sparse table gradient, and `take` of csr
//! rows. The lookup's id conversion, gather and gradient segment sum are the storage's kernels
//! (`Storage::to_ids`, `gather_rows`, `segment_sum`).

use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData, RowSparseData};
use crate::storage::IndexStorage;
use crate::NDArray;

/// Ids of an index array as an index storage on the array's device, checked against `bound`.
/// Float ids must be whole numbers (MXNet passes ids as float32 arrays).
pub(crate) fn ids_of(op: &'static str, ids: &NDArray, bound: usize) -> Result<IndexStorage> {
    ids.with_dense(|d| d.buf.to_ids(op, bound))
}

fn check_ids(op: &'static str, ids: &[i64], bound: usize) -> Result<()> {
    if let Some(&bad) = ids.iter().find(|&&i| i < 0 || i as usize >= bound) {
        return Err(Error::index(
            op,
            format!("id {bad} out of range for {bound} rows"),
        ));
    }
    Ok(())
}

/// Embedding lookup: `out[..., :] = table[ids[...], :]` for a dense 2-D `table` (`vocab x dim`)
/// and ids of any shape (i64, i32 or whole-valued float). The output has shape
/// `ids.shape + [dim]`. Recorded: the gradient of the table is row_sparse over the unique ids,
/// with the rows of repeated ids summed; ids get no gradient.
///
/// ```
/// use sparrow_core::{sparse, NDArray};
/// let table = NDArray::from_vec(vec![0f32, 1., 10., 11., 20., 21.], &[3, 2]).unwrap();
/// let ids = NDArray::from_vec(vec![2i64, 0], &[2]).unwrap();
/// let out = sparse::embedding(&table, &ids).unwrap();
/// assert_eq!(out.to_vec::<f32>().unwrap(), vec![20., 21., 0., 1.]);
/// ```
pub fn embedding(table: &NDArray, ids: &NDArray) -> Result<NDArray> {
    crate::graph::traced!(Op::Embedding, [table, ids], embedding(table, ids));
    super::densifying("embedding", &[table])?;
    let t = table.dense_data()?;
    if t.shape.len() != 2 {
        return Err(Error::shape(
            "embedding",
            format!("table must be 2-D (vocab x dim), got {:?}", t.shape),
        ));
    }
    let (vocab, dim) = (t.shape[0], t.shape[1]);
    let idv = ids_of("embedding", ids, vocab)?;
    let mut out_shape = ids.shape();
    out_shape.push(dim);
    let out = NDArray::from_buffer(t.buf.gather_rows(&idv, dim)?, &out_shape)?;
    // The ids as a graph-free handle: the backward is an operator on them and the head
    // gradient, so it runs wherever they live.
    let ids_h = ids.detach();
    Ok(record_op("embedding", out, &[table, ids], move |g| {
        Ok(vec![Some(embedding_grad(&ids_h, g, [vocab, dim])?), None])
    }))
}

/// The row_sparse gradient of an embedding table of `shape` (`vocab x dim`) for the `ids` of
/// the lookup and its head gradient `g` (`ids.shape + [dim]`): the rows of `g` summed per
/// unique id, over the sorted unique ids. Not recorded.
pub(crate) fn embedding_grad(ids: &NDArray, g: &NDArray, shape: [usize; 2]) -> Result<NDArray> {
    let idv = ids_of("embedding backward", ids, shape[0])?;
    let gd = g.dense_data()?;
    let (indices, data) = gd.buf.segment_sum(&idv, shape[1])?;
    Ok(NDArray::from_data(ArrayData::RowSparse(RowSparseData {
        shape: shape.to_vec(),
        indices,
        data,
    })))
}

/// Rows `ids` (first axis) of a csr or dense array, in the given order (repeats allowed), as a
/// new array of the same storage type: how data loaders cut a batch out of an in-memory
/// dataset. Not differentiable (it reads data, not parameters).
// Reads the csr structure through `IndexStorage`'s host view (the ids arrive as a host slice
// from a data loader, and the batch it cuts is host data until moved with `to_device`); the
// values go through the storage's own `gather`. A device-resident dataset would make this an
// index-gather kernel of the seam.
pub fn take_rows(a: &NDArray, ids: &[i64]) -> Result<NDArray> {
    let c = match &*a.read() {
        ArrayData::Csr(c) => c.clone(),
        ArrayData::Dense(d) if !d.shape.is_empty() => {
            check_ids("take", ids, d.shape[0])?;
            let row: usize = d.shape[1..].iter().product();
            let mut shape = d.shape.clone();
            shape[0] = ids.len();
            // Whole rows, copied as slices (an element-position iterator cost a dynamic call
            // per element: ~60 ms for 100k rows of 128).
            let idx = IndexStorage::from_vec_on(ids.to_vec(), d.buf.device())?;
            let buf = d.buf.gather_rows(&idx, row)?;
            return Ok(NDArray::from_data(ArrayData::Dense(crate::DenseData {
                shape,
                buf,
            })));
        }
        other => {
            return Err(Error::stype(
                "take",
                format!(
                "take_rows needs a csr or an (at least 1-d) dense array, got {:?} of shape {:?}",
                other.stype(),
                other.shape()
            ),
            ))
        }
    };
    check_ids("take", ids, c.shape[0])?;
    let mut indptr = Vec::with_capacity(ids.len() + 1);
    indptr.push(0i64);
    for &r in ids {
        let r = r as usize;
        let len = c.indptr[r + 1] - c.indptr[r];
        indptr.push(indptr.last().unwrap() + len);
    }
    let positions = || {
        ids.iter().flat_map(|&r| {
            c.offset + c.indptr[r as usize] as usize..c.offset + c.indptr[r as usize + 1] as usize
        })
    };
    let indices: Vec<i64> = positions().map(|p| c.indices[p]).collect();
    let data = c.data.gather(positions())?;
    let device = data.device();
    Ok(NDArray::from_data(ArrayData::Csr(CsrData {
        shape: [ids.len(), c.shape[1]],
        indptr: IndexStorage::from_vec_on(indptr, device)?,
        indices: IndexStorage::from_vec_on(indices, device)?,
        data,
        offset: 0,
    })))
}

impl NDArray {
    /// Rows `ids` of a csr or dense array as a new array (see [`take_rows`]).
    pub fn take_rows(&self, ids: &[i64]) -> Result<NDArray> {
        take_rows(self, ids)
    }
}
