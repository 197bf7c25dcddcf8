//! Slicing and joining sparse arrays: csr row slices that share the parent's indices and values,
//! csr column slices, vertical concat of csr arrays, and row_sparse `retain`.

use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData, RowSparseData};
use crate::storage::{IndexStorage, Storage};
use crate::{CpuStorage, NDArray};

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
        let base = c.indptr[start];
        let indptr: Vec<i64> = c.indptr[start..=end].iter().map(|&p| p - base).collect();
        Ok(NDArray::from_data(ArrayData::Csr(CsrData {
            shape: [end - start, c.shape[1]],
            indptr: IndexStorage::from(indptr),
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
        let idx = c.indices();
        let mut indptr = Vec::with_capacity(c.shape[0] + 1);
        indptr.push(0i64);
        let mut keep = Vec::new();
        for r in 0..c.shape[0] {
            let row = c.indptr[r] as usize..c.indptr[r + 1] as usize;
            // Columns are sorted within a row: two binary searches bound the kept range.
            let s = row.start + idx[row.clone()].partition_point(|&j| (j as usize) < start);
            let e = row.start + idx[row.clone()].partition_point(|&j| (j as usize) < end);
            keep.extend(s..e);
            indptr.push(keep.len() as i64);
        }
        let indices: Vec<i64> = keep.iter().map(|&p| idx[p] - start as i64).collect();
        let data = c.data.gather(keep.iter().map(|&p| p + c.offset));
        Ok(NDArray::from_data(ArrayData::Csr(CsrData {
            shape: [c.shape[0], end - start],
            indptr: IndexStorage::from(indptr),
            indices: IndexStorage::from(indices),
            data,
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
        let rl = r.row_len();
        let mut keep = Vec::new();
        let mut indices = Vec::new();
        for id in want {
            if let Ok(k) = r.indices.binary_search(&id) {
                keep.push(k);
                indices.push(id);
            }
        }
        let data = r
            .data
            .gather(keep.iter().flat_map(|&k| k * rl..(k + 1) * rl));
        Ok(NDArray::from_data(ArrayData::RowSparse(RowSparseData {
            shape: r.shape.clone(),
            indices: IndexStorage::from(indices),
            data,
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
    let mut indptr = Vec::with_capacity(rows + 1);
    indptr.push(0i64);
    let mut indices = Vec::new();
    for c in &cs {
        let base = *indptr.last().unwrap();
        indptr.extend(c.indptr[1..].iter().map(|&p| p + base));
        indices.extend_from_slice(c.indices());
    }
    let chunks: Vec<CpuStorage> = cs
        .iter()
        .map(|c| c.data.host().gather(c.offset..c.offset + c.nnz()))
        .collect();
    let data = concat_buffers(&chunks, dtype);
    Ok(NDArray::from_data(ArrayData::Csr(CsrData {
        shape: [rows, cols],
        indptr: IndexStorage::from(indptr),
        indices: IndexStorage::from(indices),
        data: Storage::from(data),
        offset: 0,
    })))
}

fn concat_buffers(chunks: &[CpuStorage], dtype: crate::DType) -> CpuStorage {
    fn cat<T: crate::Element>(chunks: &[CpuStorage]) -> CpuStorage {
        let mut v: Vec<T> = Vec::new();
        for c in chunks {
            v.extend_from_slice(c.as_slice::<T>().expect("same dtype checked"));
        }
        T::into_buffer(v)
    }
    match dtype {
        crate::DType::F32 => cat::<f32>(chunks),
        crate::DType::F64 => cat::<f64>(chunks),
        crate::DType::I64 => cat::<i64>(chunks),
        crate::DType::I32 => cat::<i32>(chunks),
        crate::DType::U8 => cat::<u8>(chunks),
    }
}
