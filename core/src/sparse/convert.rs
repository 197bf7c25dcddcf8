//! Conversions between storage types (MXNet's `cast_storage` / `tostype`).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData, DenseData, NDArray, RowSparseData};
use crate::storage::{IndexStorage, Merge, Storage};
use crate::{Device, SType};

/// An all-zero array of a storage type on `device`: dense zeros, or sparse with no stored
/// entries, its values and index arrays all there (a gradient buffer lives where its array
/// does).
pub fn zeros_stype_on(
    shape: &[usize],
    dtype: DType,
    stype: SType,
    device: Device,
) -> Result<NDArray> {
    let data = match stype {
        SType::Dense => ArrayData::Dense(DenseData {
            shape: crate::Shape::from_slice(shape),
            buf: Storage::zeros_on(dtype, shape.iter().product(), device)?,
        }),
        SType::Csr => ArrayData::Csr(CsrData {
            shape: [
                shape.first().copied().unwrap_or(0),
                shape.get(1).copied().unwrap_or(0),
            ],
            indptr: IndexStorage::from_vec_on(
                vec![0; shape.first().copied().unwrap_or(0) + 1],
                device,
            )?,
            indices: IndexStorage::from_vec_on(Vec::new(), device)?,
            data: Storage::zeros_on(dtype, 0, device)?,
            offset: 0,
        }),
        SType::RowSparse => ArrayData::RowSparse(RowSparseData {
            shape: shape.to_vec(),
            indices: IndexStorage::from_vec_on(Vec::new(), device)?,
            data: Storage::zeros_on(dtype, 0, device)?,
        }),
    };
    Ok(NDArray::from_data(data))
}

/// The dense equivalent of any storage.
pub(crate) fn densify(d: &ArrayData) -> Result<DenseData> {
    match d {
        ArrayData::Dense(dd) => Ok(dd.clone()),
        ArrayData::Csr(c) => Ok(DenseData {
            shape: smallvec::smallvec![c.shape[0], c.shape[1]],
            buf: c.data.densify(c.sparse_layout())?,
        }),
        ArrayData::RowSparse(r) => Ok(DenseData {
            shape: crate::Shape::from_slice(&r.shape),
            buf: r.data.densify(r.sparse_layout())?,
        }),
    }
}

fn dense_to_rsp(d: &DenseData) -> Result<RowSparseData> {
    if d.shape.is_empty() {
        return Err(Error::stype(
            "cast_storage",
            "row_sparse needs at least one dimension",
        ));
    }
    let p = d.buf.sparsify(&d.shape, SType::RowSparse)?;
    Ok(RowSparseData {
        shape: d.shape.to_vec(),
        indices: p.indices,
        data: p.values,
    })
}

fn dense_to_csr(d: &DenseData) -> Result<CsrData> {
    if d.shape.len() != 2 {
        return Err(Error::stype(
            "cast_storage",
            format!("csr needs a 2-D array, got shape {:?}", d.shape),
        ));
    }
    let p = d.buf.sparsify(&d.shape, SType::Csr)?;
    let Some(indptr) = p.indptr else {
        return Err(Error::stype(
            "cast_storage",
            "csr conversion without row pointers",
        ));
    };
    Ok(CsrData {
        shape: [d.shape[0], d.shape[1]],
        indptr,
        indices: p.indices,
        data: p.values,
        offset: 0,
    })
}

/// Convert an array to another storage type (`tostype`). Zeros (dense -> csr) and all-zero rows
/// (dense -> row_sparse) are dropped. Not recorded by autograd.
pub fn cast_storage(a: &NDArray, stype: SType) -> Result<NDArray> {
    let d = a.read();
    if d.stype() == stype {
        return Ok(NDArray::from_data(d.clone()));
    }
    let dense = densify(&d)?;
    let out = match stype {
        SType::Dense => ArrayData::Dense(dense),
        SType::Csr => ArrayData::Csr(dense_to_csr(&dense)?),
        SType::RowSparse => ArrayData::RowSparse(dense_to_rsp(&dense)?),
    };
    Ok(NDArray::from_data(out))
}

/// Gradient accumulation: rs + rs -> rs (union of rows), anything with dense -> dense.
pub fn add_grads(a: &NDArray, b: &NDArray) -> Result<NDArray> {
    if a.shape() != b.shape() {
        return Err(Error::shape(
            "add_grads",
            format!("{:?} + {:?}", a.shape(), b.shape()),
        ));
    }
    let (da, db) = (a.read().clone(), b.read().clone());
    if da.dtype() != db.dtype() {
        return Err(Error::dtype_mismatch("add_grads", da.dtype(), db.dtype()));
    }
    match (&da, &db) {
        (ArrayData::RowSparse(ra), ArrayData::RowSparse(rb)) => {
            Ok(NDArray::from_data(ArrayData::RowSparse(add_rsp(ra, rb)?)))
        }
        _ => {
            if !da.dtype().is_float() {
                return Err(Error::dtype("add_grads", "gradients must be float"));
            }
            // Sparse + dense scatters the stored values into a copy of the dense operand; the
            // binary-op dispatch has that kernel.
            crate::autograd::pause(|| a.add(b))
        }
    }
}

fn add_rsp(a: &RowSparseData, b: &RowSparseData) -> Result<RowSparseData> {
    let p = a.data.merge(
        a.sparse_layout(),
        &b.data,
        b.sparse_layout(),
        Merge::AddGrads,
    )?;
    Ok(RowSparseData {
        shape: a.shape.clone(),
        indices: p.indices,
        data: p.values,
    })
}
