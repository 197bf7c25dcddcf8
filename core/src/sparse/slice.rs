//! Slicing and joining sparse arrays: csr row slices that share the parent's indices and values,
//! csr column slices, vertical concat of csr arrays, and row_sparse `retain`.

use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData, RowSparseData};
use crate::storage::Storage;
use crate::{NDArray, SType};

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

/// `concat` of csr arrays along rows (`NDArray::concat(parts, 0)` with every part csr): the
/// csr result of [`concat_rows`], recorded. Each part's gradient is its rows of the head
/// gradient, csr for a csr head gradient and dense for a dense one (by design).
pub(crate) fn concat_csr_recorded(parts: &[&NDArray]) -> Result<NDArray> {
    let owned: Vec<NDArray> = parts.iter().map(|&p| p.clone()).collect();
    let out = concat_rows(&owned)?;
    let mut bounds = Vec::with_capacity(parts.len());
    let mut start = 0usize;
    for p in parts {
        let rows = p.shape()[0];
        bounds.push((start, start + rows));
        start += rows;
    }
    Ok(crate::autograd::record_op(
        "concat_csr",
        out,
        parts,
        move |g| {
            bounds
                .iter()
                .map(|&(s, e)| rows_of_grad(g, s, e).map(Some))
                .collect()
        },
    ))
}

/// Rows `s..e` of a head gradient: a csr slice of a csr one, a dense slice otherwise.
fn rows_of_grad(g: &NDArray, s: usize, e: usize) -> Result<NDArray> {
    match g.stype() {
        SType::Csr => g.slice_rows(s, e),
        _ => g.slice_axis(0, Some(s as i64), Some(e as i64), 1),
    }
}

/// `slice_axis(0, begin..end, step 1)` of a csr array: the csr row slice of
/// [`NDArray::slice_rows`] (sharing the parent's buffers), recorded. The gradient is the head
/// gradient placed at those rows: csr for a csr head gradient (zero rows around it), dense for
/// a dense one (by design).
pub(crate) fn slice_rows_recorded(a: &NDArray, start: usize, end: usize) -> Result<NDArray> {
    let out = a.slice_rows(start, end)?;
    let [rows, cols] = [a.shape()[0], a.shape()[1]];
    let dtype = a.dtype();
    Ok(crate::autograd::record_op(
        "slice_csr_rows",
        out,
        &[a],
        move |g| {
            let gx = match g.stype() {
                SType::Csr => {
                    let before =
                        super::zeros_stype_on(&[start, cols], dtype, SType::Csr, g.device())?;
                    let after =
                        super::zeros_stype_on(&[rows - end, cols], dtype, SType::Csr, g.device())?;
                    concat_rows(&[before, g.clone(), after])?
                }
                _ => {
                    let gd = g.tostype(SType::Dense)?;
                    let pad = |n: usize| -> Result<NDArray> {
                        crate::sparse::zeros_stype_on(&[n, cols], dtype, SType::Dense, gd.device())
                    };
                    NDArray::concat(&[&pad(start)?, &gd, &pad(rows - end)?], 0)?
                }
            };
            Ok(vec![Some(gx)])
        },
    ))
}

impl NDArray {
    /// The number of stored values in each row, as an i64 vector of length `rows` (MXNet's
    /// `getnnz(axis=1)`): the row's non-zeros for csr, the row length for a stored
    /// row_sparse row (0 for the others), the row's non-zero count for a dense array.
    pub fn row_nnz(&self) -> Result<NDArray> {
        let shape = self.shape();
        let Some(&rows) = shape.first() else {
            return Err(Error::shape(
                "row_nnz",
                "needs an array of at least 1 dimension",
            ));
        };
        let row_len: usize = shape[1..].iter().product();
        let counts: Vec<i64> = match &*self.read() {
            ArrayData::Csr(c) => c.indptr.windows(2).map(|w| w[1] - w[0]).collect(),
            ArrayData::RowSparse(r) => {
                let mut v = vec![0i64; rows];
                for &i in r.indices.iter() {
                    v[i as usize] = row_len as i64;
                }
                v
            }
            ArrayData::Dense(_) => {
                drop(shape);
                let host = self.to_f64_vec();
                host.chunks(row_len.max(1))
                    .take(rows)
                    .map(|r| r.iter().filter(|&&x| x != 0.0).count() as i64)
                    .collect()
            }
        };
        NDArray::host_vec(counts, &[rows])?.to_device(self.device())
    }
}
