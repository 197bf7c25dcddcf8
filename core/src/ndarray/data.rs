//! Storage of the three storage types.

use crate::dtype::{DType, Element, SType};
use crate::storage::{IndexStorage, Storage};

/// A dense array's dimensions, stored inline up to 4 (no allocation for the common ranks).
pub type Shape = smallvec::SmallVec<[usize; 4]>;

/// Dense storage: a contiguous row-major buffer and its shape.
#[derive(Debug)]
pub(crate) struct DenseData {
    /// Logical shape (inline up to 4 dimensions: cloning a dense array's metadata, which every
    /// operator does, then allocates nothing).
    pub(crate) shape: Shape,
    /// `shape.iter().product()` elements, row-major.
    pub(crate) buf: Storage,
}

/// Written out because `SmallVec`'s derived `Clone` collects element by element; a shape is
/// `Copy` data, and `from_slice` copies it in one go (`dense_data()` clones one per operator).
impl Clone for DenseData {
    fn clone(&self) -> Self {
        DenseData {
            shape: Shape::from_slice(&self.shape),
            buf: self.buf.clone(),
        }
    }
}

/// CSR storage (2-D). `indptr` has `rows + 1` entries starting at 0; the non-zeros of row `r`
/// are positions `indptr[r]..indptr[r+1]` of `indices()` / `data`, counted from `offset` in the
/// shared buffers. The offset lets a row slice share the parent's indices and values.
#[derive(Debug, Clone)]
pub(crate) struct CsrData {
    /// `[rows, cols]`.
    pub(crate) shape: [usize; 2],
    /// Row pointers, `rows + 1` entries, `indptr[0] == 0`.
    pub(crate) indptr: IndexStorage,
    /// Column indices (shared; this array's start at `offset`).
    pub(crate) indices: IndexStorage,
    /// Values (shared; this array's start at `offset`).
    pub(crate) data: Storage,
    /// Position of this array's first non-zero in `indices` and `data`.
    pub(crate) offset: usize,
}

/// Row-sparse storage (N-D): the rows `indices` (sorted, unique) of a `shape[0] x ...` array;
/// `data` holds `indices.len() * row_len` elements, row-major.
#[derive(Debug, Clone)]
pub(crate) struct RowSparseData {
    /// Logical shape.
    pub(crate) shape: Vec<usize>,
    /// Sorted unique row ids.
    pub(crate) indices: IndexStorage,
    /// The stored rows.
    pub(crate) data: Storage,
}

/// The storage of an [`crate::NDArray`].
#[derive(Debug, Clone)]
pub(crate) enum ArrayData {
    /// Dense.
    Dense(DenseData),
    /// Compressed sparse rows.
    Csr(CsrData),
    /// Row sparse.
    RowSparse(RowSparseData),
}

impl CsrData {
    /// Number of stored non-zeros.
    pub(crate) fn nnz(&self) -> usize {
        *self.indptr.last().unwrap_or(&0) as usize
    }
    /// This array's column indices.
    pub(crate) fn indices(&self) -> &[i64] {
        &self.indices[self.offset..self.offset + self.nnz()]
    }
    /// This array's values, typed.
    pub(crate) fn values<T: Element>(&self) -> Option<&[T]> {
        let n = self.nnz();
        self.data
            .as_slice::<T>()
            .map(|s| &s[self.offset..self.offset + n])
    }
}

impl RowSparseData {
    /// Elements per row (product of `shape[1..]`).
    pub(crate) fn row_len(&self) -> usize {
        self.shape[1..].iter().product()
    }
    /// Number of stored rows.
    pub(crate) fn nnr(&self) -> usize {
        self.indices.len()
    }
}

impl ArrayData {
    /// Logical shape.
    pub(crate) fn shape(&self) -> &[usize] {
        match self {
            ArrayData::Dense(d) => &d.shape,
            ArrayData::Csr(c) => &c.shape,
            ArrayData::RowSparse(r) => &r.shape,
        }
    }
    /// Element type.
    pub(crate) fn dtype(&self) -> DType {
        match self {
            ArrayData::Dense(d) => d.buf.dtype(),
            ArrayData::Csr(c) => c.data.dtype(),
            ArrayData::RowSparse(r) => r.data.dtype(),
        }
    }
    /// The device holding this array's buffers (values and indices live together).
    pub(crate) fn device(&self) -> crate::Device {
        match self {
            ArrayData::Dense(d) => d.buf.device(),
            ArrayData::Csr(c) => c.data.device(),
            ArrayData::RowSparse(r) => r.data.device(),
        }
    }
    /// Storage type.
    pub(crate) fn stype(&self) -> SType {
        match self {
            ArrayData::Dense(_) => SType::Dense,
            ArrayData::Csr(_) => SType::Csr,
            ArrayData::RowSparse(_) => SType::RowSparse,
        }
    }
    /// Bytes held: values + indices (+ indptr).
    pub(crate) fn nbytes(&self) -> usize {
        match self {
            ArrayData::Dense(d) => d.buf.nbytes(),
            ArrayData::Csr(c) => c.nnz() * (c.data.dtype().size_of() + 8) + c.indptr.len() * 8,
            ArrayData::RowSparse(r) => r.data.nbytes() + r.indices.len() * 8,
        }
    }
    /// Mutable dense storage, if dense.
    pub(crate) fn as_dense_mut(&mut self) -> Option<&mut DenseData> {
        match self {
            ArrayData::Dense(d) => Some(d),
            _ => None,
        }
    }
}
