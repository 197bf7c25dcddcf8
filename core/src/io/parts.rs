//! An array as the components a file stores (dense values, csr or row_sparse index arrays),
//! and back, every invariant checked: the one place both file formats turn arrays into
//! bytes and bytes into arrays.

use crate::cpu::HostElement;
use crate::storage::{IndexStorage, Storage};
use crate::{ArrayData, NDArray};
use crate::{DType, Device, Result, SType};

/// One stored tensor: its dtype, shape and little-endian row-major bytes.
#[derive(Debug, Clone)]
pub(crate) struct Component {
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<usize>,
    pub(crate) bytes: Vec<u8>,
}

impl Component {
    /// A 1-D int64 component from index values.
    pub(crate) fn from_ids(ids: &[i64]) -> Component {
        Component {
            dtype: DType::I64,
            shape: vec![ids.len()],
            bytes: ids.iter().flat_map(|i| i.to_le_bytes()).collect(),
        }
    }

    /// The values of a 1-D integer component (int64, or int32 as SciPy writes small index
    /// arrays). `what` names the component in the error.
    pub(crate) fn to_ids(&self, what: &str) -> std::result::Result<Vec<i64>, String> {
        if self.shape.len() != 1 {
            return Err(format!("{what} must be 1-D, has shape {:?}", self.shape));
        }
        let ids = match self.dtype {
            DType::I64 => self.bytes.chunks_exact(8).map(i64::from_le_slice).collect(),
            DType::I32 => self
                .bytes
                .chunks_exact(4)
                .map(|b| i32::from_le_slice(b) as i64)
                .collect(),
            other => {
                return Err(format!(
                    "{what} must hold int64 or int32, holds {}",
                    other.name()
                ))
            }
        };
        Ok(ids)
    }
}

/// An array split into what a file stores.
#[derive(Debug, Clone)]
pub(crate) enum Parts {
    /// A dense array: one component.
    Dense(Component),
    /// A csr array: `data` (nnz values), column `indices` (nnz) and `indptr` (rows + 1).
    Csr {
        shape: [usize; 2],
        data: Component,
        indices: Vec<i64>,
        indptr: Vec<i64>,
    },
    /// A row_sparse array: `data` (`[k, shape[1..]...]`, the stored rows) and their sorted
    /// unique row `indices` (k).
    RowSparse {
        shape: Vec<usize>,
        data: Component,
        indices: Vec<i64>,
    },
}

/// Little-endian bytes of `buf`'s elements in `range` (host memory).
fn le_bytes(buf: &Storage, range: std::ops::Range<usize>) -> Result<Vec<u8>> {
    let host = buf.to_host()?;
    let mut out = Vec::with_capacity(range.len() * buf.dtype().size_of());
    crate::with_buffer!(host.as_ref(), v => v[range].iter().for_each(|x| x.write_le(&mut out)));
    Ok(out)
}

impl Parts {
    /// The parts of `a`. An array on a device is copied to host memory first (an explicit
    /// `to_device(Cpu)`, as MXNet's `nd.save` copies a GPU array), so the file holds its value.
    /// A sparse array that breaks its format (built with `csr_unchecked`, say) is an error:
    /// a file is only written when it will load.
    pub(crate) fn of(a: &NDArray) -> Result<Parts> {
        let host;
        let a = if a.device() == Device::Cpu {
            a
        } else {
            host = a.to_device(Device::Cpu)?;
            &host
        };
        a.check_format(true)?;
        let d = a.read();
        Ok(match &*d {
            ArrayData::Dense(dd) => Parts::Dense(Component {
                dtype: dd.buf.dtype(),
                shape: dd.shape.to_vec(),
                bytes: le_bytes(&dd.buf, 0..dd.buf.len())?,
            }),
            ArrayData::Csr(c) => {
                let nnz = c.nnz();
                Parts::Csr {
                    shape: c.shape,
                    data: Component {
                        dtype: c.data.dtype(),
                        shape: vec![nnz],
                        bytes: le_bytes(&c.data, c.offset..c.offset + nnz)?,
                    },
                    indices: c.indices().to_vec(),
                    indptr: c.indptr.to_vec(),
                }
            }
            ArrayData::RowSparse(r) => {
                let mut shape = r.shape.clone();
                shape[0] = r.nnr();
                Parts::RowSparse {
                    shape: r.shape.clone(),
                    data: Component {
                        dtype: r.data.dtype(),
                        shape,
                        bytes: le_bytes(&r.data, 0..r.data.len())?,
                    },
                    indices: r.indices.to_vec(),
                }
            }
        })
    }

    /// The storage type these parts make.
    pub(crate) fn stype(&self) -> SType {
        match self {
            Parts::Dense(_) => SType::Dense,
            Parts::Csr { .. } => SType::Csr,
            Parts::RowSparse { .. } => SType::RowSparse,
        }
    }

    /// The logical shape.
    pub(crate) fn shape(&self) -> Vec<usize> {
        match self {
            Parts::Dense(c) => c.shape.clone(),
            Parts::Csr { shape, .. } => shape.to_vec(),
            Parts::RowSparse { shape, .. } => shape.clone(),
        }
    }

    /// The array these parts describe, in host memory, after checking every invariant
    /// (component lengths, a non-decreasing `indptr` from 0 to nnz, column ids in range and
    /// sorted unique within each row, row ids sorted unique and below the row count). The
    /// message says what is wrong; the caller adds the file and the array's name.
    pub(crate) fn into_array(self) -> std::result::Result<NDArray, String> {
        let text = |e: crate::Error| e.to_string();
        match self {
            Parts::Dense(c) => NDArray::from_le_bytes(&c.bytes, c.dtype, &c.shape).map_err(text),
            Parts::Csr {
                shape,
                data,
                indices,
                indptr,
            } => {
                if data.shape.len() != 1 || data.shape[0] != indices.len() {
                    return Err(format!(
                        "data has shape {:?}, expected ({},) (one value per column index)",
                        data.shape,
                        indices.len()
                    ));
                }
                if indptr.len() != shape[0].saturating_add(1) {
                    return Err(format!(
                        "indptr has {} entries, expected {} (rows + 1) for shape {shape:?}",
                        indptr.len(),
                        shape[0].saturating_add(1)
                    ));
                }
                let values = NDArray::from_le_bytes(&data.bytes, data.dtype, &data.shape)
                    .map_err(text)?
                    .dense_data()
                    .map_err(text)?;
                crate::sparse::checked_csr(
                    values.buf,
                    IndexStorage::from(indices),
                    IndexStorage::from(indptr),
                    shape,
                    true,
                )
                .map_err(text)
            }
            Parts::RowSparse {
                shape,
                data,
                indices,
            } => {
                let values =
                    NDArray::from_le_bytes(&data.bytes, data.dtype, &data.shape).map_err(text)?;
                NDArray::row_sparse_from_arrays(&values, indices, &shape).map_err(text)
            }
        }
    }
}
