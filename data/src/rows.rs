//! Row gathering from in-memory arrays (dense of any dtype, CSR with f32/f64 values) into
//! new batches, without densifying CSR.

use sparrow_core::NDArray;

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
    if a.stype() == sparrow_core::SType::RowSparse {
        return Err(DataError::arg(
            "take_rows",
            "row_sparse arrays are not a data source; use dense or csr",
        ));
    }
    let ids: Vec<i64> = idx.iter().map(|&i| i as i64).collect();
    Ok(a.take_rows(&ids)?)
}
