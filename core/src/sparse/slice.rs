//! Slicing and joining sparse arrays: csr row slices that share the parent's indices and values,
//! csr column slices, vertical concat of csr arrays, and row_sparse `retain`.

use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData, RowSparseData};
use crate::storage::Storage;
use crate::NDArray;

fn csr_of(a: &NDArray, op: &'static str) -> Result<CsrData> {
    match &*a.read() {
        ArrayData::Csr(c) => Ok(c.clone()),
        other => Err(Error::stype(
            op,
            format!("needs a csr array, got {:?}", other.stype()),
        )),
    }
}

impl NDArray {
    /// Rows `start..end` of a csr array (`a[start:end]`). The result shares the parent's
    /// indices and values (only `end - start + 1` row pointers are copied).
    pub fn slice_rows(&self, start: usize, end: usize) -> Result<NDArray> {
        let c = csr_of(self, "slice_rows")?;
        if start > end || end > c.shape[0] {
            return Err(Error::index(
                "slice_rows",
                format!("rows {start}..{end} of an array with {} rows", c.shape[0]),
            ));
        }
        let (indptr, base) = c.indptr.rebase_indptr(start, end)?;
        Ok(NDArray::from_data(ArrayData::Csr(CsrData {
            shape: [end - start, c.shape[1]],
            indptr,
            indices: c.indices.clone(),
            data: c.data.clone(),
            offset: c.offset + base as usize,
        })))
    }

    /// Row `i` of a csr array as a `1 x cols` csr array sharing the parent's buffers (`a[i]`).
    pub fn row(&self, i: usize) -> Result<NDArray> {
        self.slice_rows(i, i + 1)
    }

    /// Columns `start..end` (step 1) of a csr array, as a new csr array.
    pub fn slice_cols(&self, start: usize, end: usize) -> Result<NDArray> {
        let c = csr_of(self, "slice_cols")?;
        if start > end || end > c.shape[1] {
            return Err(Error::index(
                "slice_cols",
                format!(
                    "columns {start}..{end} of an array with {} columns",
                    c.shape[1]
                ),
            ));
        }
        let p = c.data.slice_cols(c.sparse_layout(), start..end)?;
        let Some(indptr) = p.indptr else {
            return Err(Error::stype("slice_cols", "csr slice without row pointers"));
        };
        Ok(NDArray::from_data(ArrayData::Csr(CsrData {
            shape: [c.shape[0], end - start],
            indptr,
            indices: p.indices,
            data: p.values,
            offset: 0,
        })))
    }

    /// The rows `row_ids` (sorted or not; repeats ignored) of a row_sparse array: stored rows
    /// among them are kept, the rest are zero (not stored). MXNet's `retain`.
    pub fn retain(&self, row_ids: &[i64]) -> Result<NDArray> {
        let r = match &*self.read() {
            ArrayData::RowSparse(r) => r.clone(),
            other => {
                return Err(Error::stype(
                    "retain",
                    format!("needs a row_sparse array, got {:?}", other.stype()),
                ))
            }
        };
        if let Some(&bad) = row_ids.iter().find(|&&i| i < 0 || i as usize >= r.shape[0]) {
            return Err(Error::index(
                "retain",
                format!("row id {bad} out of range for {} rows", r.shape[0]),
            ));
        }
        let mut want = row_ids.to_vec();
        want.sort_unstable();
        want.dedup();
        let p = r.data.retain_stored(r.sparse_layout(), &want, true)?;
        Ok(NDArray::from_data(ArrayData::RowSparse(RowSparseData {
            shape: r.shape.clone(),
            indices: p.indices,
            data: p.values,
        })))
    }
}

/// Stack csr arrays with equal column counts vertically into one csr array.
pub fn concat_rows(parts: &[NDArray]) -> Result<NDArray> {
    let Some(first) = parts.first() else {
        return Err(Error::arg("concat_rows", "needs at least one array"));
    };
    let cs: Vec<CsrData> = parts
        .iter()
        .map(|p| csr_of(p, "concat_rows"))
        .collect::<Result<_>>()?;
    let (cols, dtype) = (cs[0].shape[1], first.dtype());
    for (k, c) in cs.iter().enumerate() {
        if c.shape[1] != cols || c.data.dtype() != dtype {
            return Err(Error::shape(
                "concat_rows",
                format!(
                    "part {k} is {:?} {}, part 0 is {:?} {}",
                    c.shape,
                    c.data.dtype().name(),
                    cs[0].shape,
                    dtype.name()
                ),
            ));
        }
    }
    let rows: usize = cs.iter().map(|c| c.shape[0]).sum();
    let layouts: Vec<_> = cs.iter().map(|c| (&c.data, c.sparse_layout())).collect();
    let p = Storage::concat_csr(&layouts)?;
    let Some(indptr) = p.indptr else {
        return Err(Error::stype(
            "concat_rows",
            "csr concat without row pointers",
        ));
    };
    Ok(NDArray::from_data(ArrayData::Csr(CsrData {
        shape: [rows, cols],
        indptr,
        indices: p.indices,
        data: p.values,
        offset: 0,
    })))
}
