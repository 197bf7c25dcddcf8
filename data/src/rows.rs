//! Row gathering from in-memory arrays (dense of any dtype, CSR with f32/f64 values) into
//! new batches, without densifying CSR.

use std::sync::Arc;

use sparrow_core::{with_buffer, ArrayData, CsrData, DenseData, Element, NDArray};

use crate::error::{DataError, Result};

/// Number of rows (first axis) of an array.
pub(crate) fn num_rows(a: &NDArray) -> Result<usize> {
    a.shape()
        .first()
        .copied()
        .ok_or_else(|| DataError::arg("data", "a 0-d array has no rows"))
}

/// The rows `idx` of `a` (first axis), in that order, with the same storage type.
pub fn take_rows(a: &NDArray, idx: &[usize]) -> Result<NDArray> {
    let n = num_rows(a)?;
    if let Some(&bad) = idx.iter().find(|&&i| i >= n) {
        return Err(DataError::arg(
            "take_rows",
            format!("row {bad} out of range for {n} rows"),
        ));
    }
    let g = a.read();
    Ok(NDArray::from_data(match &*g {
        ArrayData::Dense(d) => {
            let row: usize = d.shape[1..].iter().product();
            let mut shape = d.shape.clone();
            shape[0] = idx.len();
            let buf = with_buffer!(&d.buf, v => {
                let mut out = Vec::with_capacity(idx.len() * row);
                for &i in idx {
                    out.extend_from_slice(&v[i * row..(i + 1) * row]);
                }
                Element::into_buffer(out)
            });
            ArrayData::Dense(DenseData { shape, buf })
        }
        ArrayData::Csr(c) => {
            let ind = c.indices();
            let mut indptr = Vec::with_capacity(idx.len() + 1);
            indptr.push(0i64);
            let mut indices = Vec::new();
            let mut take = Vec::new();
            for &i in idx {
                let (s, e) = (c.indptr[i] as usize, c.indptr[i + 1] as usize);
                indices.extend_from_slice(&ind[s..e]);
                take.push((s, e));
                indptr.push(indices.len() as i64);
            }
            let data = with_buffer!(&c.data, v => {
                let v = &v[c.offset..];
                let mut out = Vec::with_capacity(indices.len());
                for &(s, e) in &take {
                    out.extend_from_slice(&v[s..e]);
                }
                Element::into_buffer(out)
            });
            ArrayData::Csr(CsrData {
                shape: [idx.len(), c.shape[1]],
                indptr: Arc::new(indptr),
                indices: Arc::new(indices),
                data,
                offset: 0,
            })
        }
        ArrayData::RowSparse(_) => {
            return Err(DataError::arg(
                "take_rows",
                "row_sparse arrays are not a data source; use dense or csr",
            ))
        }
    }))
}
