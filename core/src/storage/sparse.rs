//! The sparse family of the backend interface: the kernels of the csr and row_sparse operators
//! (`crate::sparse`: elementwise binary ops, reductions, conversions, slicing, format checks)
//! and the form in which a backend holds index arrays.
//!
//! A kernel receives a sparse array as its value buffer (`self`) plus a [`SparseLayout`], the index
//! arrays and shape that say where each stored value sits, and returns new buffers
//! ([`SparseParts`] when the structure changes). Operators name what to compute with a small
//! enum ([`Merge`], [`WithDense`], [`StoredReduce`]); the CPU matches it once outside its loops
//! (`crate::cpu::sparse`). Every method validates nothing about shapes: the operator did that.

use std::ops::Range;

use super::{IndexStorage, Storage};
use crate::dtype::{Device, SType};
use crate::error::{Error, Result};
use crate::ndarray::{CsrData, RowSparseData};
use crate::ops::BinaryOp;

/// Where the stored values of a sparse array sit, without the values (`I`: the index arrays'
/// type, [`IndexStorage`] for operators, the backend's [`BackendIndex::Index`](super::BackendIndex::Index) for kernels).
#[derive(Debug)]
pub(crate) enum SparseLayout<'a, I> {
    /// csr: the values of row `r` are positions `indptr[r]..indptr[r + 1]`, counted from
    /// `offset`, of the value buffer, their columns the same positions of `indices` (a row
    /// slice shares its parent's buffers from `offset`).
    Csr {
        /// `[rows, cols]`.
        shape: [usize; 2],
        /// `rows + 1` row pointers from 0.
        indptr: &'a I,
        /// Column ids (this array's from `offset`).
        indices: &'a I,
        /// Position of the first non-zero in `indices` and the value buffer.
        offset: usize,
    },
    /// row_sparse: `indices.len()` rows of `shape[1..].product()` values.
    RowSparse {
        /// The logical shape.
        shape: &'a [usize],
        /// Sorted unique row ids.
        indices: &'a I,
    },
}

impl<I> Clone for SparseLayout<'_, I> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<I> Copy for SparseLayout<'_, I> {}

/// New buffers of a sparse array: csr (`indptr` set) or row_sparse (row ids in `indices`).
#[derive(Debug)]
pub(crate) struct SparseParts<S, I> {
    /// Row pointers (csr only).
    pub(crate) indptr: Option<I>,
    /// Column ids (csr) or row ids (row_sparse).
    pub(crate) indices: I,
    /// The stored values.
    pub(crate) values: S,
}

/// How two sparse arrays of one storage type and shape merge into one of the same type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Merge {
    /// `a op b` for `Add` / `Sub` / `Maximum` / `Minimum` over the union of the stored entries
    /// (absent ones as 0) and `Mul` over their intersection (float dtypes).
    Binary(BinaryOp),
    /// Gradient accumulation of row_sparse arrays (any dtype): the union of the rows, a row
    /// stored by one side only copied as it is.
    AddGrads,
}

/// A sparse array's stored values combined with a dense operand: values of the same
/// structure (float dtypes).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum WithDense {
    /// `s * d` with `d` of the sparse array's shape.
    Mul,
    /// csr `s op v[col]`: a dense vector broadcast along the rows (one value per column).
    AlongRows(BinaryOp),
    /// csr `s op v[row]`: a dense vector broadcast along the columns (one value per row).
    AlongCols(BinaryOp),
}

/// Which part of a 2-D row_sparse array `square_sum` reduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SquareSumAxis {
    /// Along axis 1, one sum per stored row (the values of a `[rows, 1]` row_sparse array).
    StoredRows,
    /// Along axis 1, one sum per row of the shape, dense (absent rows 0).
    Rows,
    /// Along axis 0, one sum per column, dense.
    Cols,
    /// Every element: one value.
    All,
}

/// A reduction of a sparse array's stored values to a dense buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoredReduce {
    /// Sum of a csr array along axis 0 (`Some(0)`, one value per column), axis 1 (`Some(1)`,
    /// one per row) or all (`None`).
    Sum(Option<usize>),
    /// Sum of squares of a 2-D row_sparse array (MXNet's `_square_sum`).
    SquareSum(SquareSumAxis),
}

/// What a backend implements for sparse operators. `self` is the value buffer of the (first)
/// sparse operand, laid out as its [`SparseLayout`] says.
pub(crate) trait SparseOps: super::BackendIndex + Sized {
    /// Merge `self` (laid out as `la`) with `b` (as `lb`, same storage type and shape).
    fn merge(
        &self,
        la: SparseLayout<'_, Self::Index>,
        b: &Self,
        lb: SparseLayout<'_, Self::Index>,
        op: Merge,
    ) -> Result<SparseParts<Self, Self::Index>>;
    /// The csr product `self (m x k) . b (k x n)` of two csr operands (laid out as `la`,
    /// `lb`) as csr parts: each output row holds the columns its products reach, ascending
    /// (float dtypes).
    fn csr_product(
        &self,
        la: SparseLayout<'_, Self::Index>,
        b: &Self,
        lb: SparseLayout<'_, Self::Index>,
    ) -> Result<SparseParts<Self, Self::Index>>;
    /// `s op d` (`sparse_left`) or `d op s` for `Add` / `Sub`, with `d` dense of the sparse
    /// array's shape: a dense result, `d`'s values with the stored entries' results written
    /// over them (float dtypes).
    fn scatter_dense(
        &self,
        l: SparseLayout<'_, Self::Index>,
        dense: &Self,
        op: BinaryOp,
        sparse_left: bool,
    ) -> Result<Self>;
    /// The stored values combined with `dense` as `op` says (aligned with the stored values).
    fn with_dense(
        &self,
        l: SparseLayout<'_, Self::Index>,
        dense: &Self,
        op: WithDense,
    ) -> Result<Self>;
    /// A reduction of the stored values (float dtypes).
    fn reduce_stored(&self, l: SparseLayout<'_, Self::Index>, op: StoredReduce) -> Result<Self>;
    /// The gradient of [`StoredReduce::SquareSum`] over `axis` with respect to the stored
    /// values: `2 * x * g`, `g` the dense head gradient (aligned with the stored values).
    fn square_sum_grad(
        &self,
        l: SparseLayout<'_, Self::Index>,
        g: &Self,
        axis: SquareSumAxis,
    ) -> Result<Self>;
    /// The dense equivalent (absent entries 0).
    fn densify(&self, l: SparseLayout<'_, Self::Index>) -> Result<Self>;
    /// The dense array `self` of `shape` as `to` (csr: 2-D, zeros dropped; row_sparse: the
    /// rows with a non-zero).
    fn sparsify(&self, shape: &[usize], to: SType) -> Result<SparseParts<Self, Self::Index>>;
    /// Columns `cols` of a csr array, renumbered from 0.
    fn slice_cols(
        &self,
        l: SparseLayout<'_, Self::Index>,
        cols: Range<usize>,
    ) -> Result<SparseParts<Self, Self::Index>>;
    /// The rows `ids` (sorted, unique, in range) of a row_sparse array that it stores.
    /// `search` finds each id by binary search (few ids), otherwise one merge pass of both
    /// sorted lists (`sparse::retain_rows`).
    fn retain_stored(
        &self,
        l: SparseLayout<'_, Self::Index>,
        ids: &[i64],
        search: bool,
    ) -> Result<SparseParts<Self, Self::Index>>;
    /// csr arrays with equal column counts stacked vertically.
    fn concat_csr(
        parts: &[(&Self, SparseLayout<'_, Self::Index>)],
    ) -> Result<SparseParts<Self, Self::Index>>;
    /// Row pointers `start..=end` of `indptr`, rebased to start at 0 (a csr row slice's), and
    /// the base subtracted (`indptr[start]`, the slice's first non-zero).
    fn rebase_indptr(indptr: &Self::Index, start: usize, end: usize) -> Result<(Self::Index, i64)>;
    /// Entries `range` of an index array, as a new one.
    fn index_range(idx: &Self::Index, range: Range<usize>) -> Result<Self::Index>;
    /// The csr invariants (`check_format`) of the index arrays, given `values_len` stored
    /// values: lengths and end points always, plus monotone row pointers and sorted, unique,
    /// in-range column ids when `full`. A broken one is an [`Error::Format`] naming it.
    fn check_csr(l: SparseLayout<'_, Self::Index>, values_len: usize, full: bool) -> Result<()>;
    /// The row_sparse invariant on its row ids when `full` (sorted, unique, inside
    /// `0..rows`), an [`Error::Format`] naming a broken one.
    fn check_row_ids(idx: &Self::Index, rows: usize) -> Result<()>;
}

/// The device of an index array.
pub(super) fn index_device(i: &IndexStorage) -> Device {
    i.device()
}

impl CsrData {
    /// This array's layout, for the sparse kernels.
    pub(crate) fn sparse_layout(&self) -> SparseLayout<'_, IndexStorage> {
        SparseLayout::Csr {
            shape: self.shape,
            indptr: &self.indptr,
            indices: &self.indices,
            offset: self.offset,
        }
    }
}

impl RowSparseData {
    /// This array's layout, for the sparse kernels.
    pub(crate) fn sparse_layout(&self) -> SparseLayout<'_, IndexStorage> {
        SparseLayout::RowSparse {
            shape: &self.shape,
            indices: &self.indices,
        }
    }
}

/// The per-backend halves of the forwarders below: a layout whose index arrays are not on the
/// backend of the values is an [`Error::Device`] naming `op`.
mod on {
    use super::*;
    use crate::storage::IndexOf;

    /// The layout over backend `B`'s index arrays.
    pub(super) fn layout<'a, B: IndexOf>(
        op: &'static str,
        l: SparseLayout<'a, IndexStorage>,
    ) -> Result<SparseLayout<'a, B::Index>> {
        Ok(match l {
            SparseLayout::Csr {
                shape,
                indptr,
                indices,
                offset,
            } => SparseLayout::Csr {
                shape,
                indptr: B::index_of(op, indptr)?,
                indices: B::index_of(op, indices)?,
                offset,
            },
            SparseLayout::RowSparse { shape, indices } => SparseLayout::RowSparse {
                shape,
                indices: B::index_of(op, indices)?,
            },
        })
    }

    /// Backend `B`'s parts as storage.
    pub(super) fn parts<B: IndexOf>(
        p: SparseParts<B, B::Index>,
    ) -> SparseParts<Storage, IndexStorage>
    where
        Storage: From<B>,
    {
        SparseParts {
            indptr: p.indptr.map(B::wrap_index),
            indices: B::wrap_index(p.indices),
            values: Storage::from(p.values),
        }
    }

    /// The layout's backend as `l`'s storage type, for the type checker: `B` is inferred from
    /// the values the forwarder matched.
    pub(super) fn layout_like<'a, B: IndexOf>(
        _values: &B,
        op: &'static str,
        l: SparseLayout<'a, IndexStorage>,
    ) -> Result<SparseLayout<'a, B::Index>> {
        layout::<B>(op, l)
    }
}

impl Storage {
    /// See [`SparseOps::merge`].
    pub(crate) fn merge(
        &self,
        la: SparseLayout<'_, IndexStorage>,
        b: &Storage,
        lb: SparseLayout<'_, IndexStorage>,
        op: Merge,
    ) -> Result<SparseParts<Storage, IndexStorage>> {
        const OP: &str = "sparse merge";
        super::on_backends!(OP, (self, b), (a, b) => {
            let (la, lb) = (on::layout_like(a, OP, la)?, on::layout_like(a, OP, lb)?);
            Ok(on::parts(a.merge(la, b, lb, op)?))
        })
    }
    /// See [`SparseOps::csr_product`].
    pub(crate) fn csr_product(
        &self,
        la: SparseLayout<'_, IndexStorage>,
        b: &Storage,
        lb: SparseLayout<'_, IndexStorage>,
    ) -> Result<SparseParts<Storage, IndexStorage>> {
        const OP: &str = "dot";
        super::on_backends!(OP, (self, b), (a, b) => {
            let (la, lb) = (on::layout_like(a, OP, la)?, on::layout_like(a, OP, lb)?);
            Ok(on::parts(a.csr_product(la, b, lb)?))
        })
    }
    /// See [`SparseOps::scatter_dense`].
    pub(crate) fn scatter_dense(
        &self,
        l: SparseLayout<'_, IndexStorage>,
        dense: &Storage,
        op: BinaryOp,
        sparse_left: bool,
    ) -> Result<Storage> {
        super::on_backends!(op.name(), (self, dense), (s, d) => {
            let l = on::layout_like(s, op.name(), l)?;
            Ok(Storage::from(s.scatter_dense(l, d, op, sparse_left)?))
        })
    }
    /// See [`SparseOps::with_dense`].
    pub(crate) fn with_dense(
        &self,
        l: SparseLayout<'_, IndexStorage>,
        dense: &Storage,
        op: WithDense,
    ) -> Result<Storage> {
        const OP: &str = "sparse binary";
        super::on_backends!(OP, (self, dense), (s, d) => {
            let l = on::layout_like(s, OP, l)?;
            Ok(Storage::from(s.with_dense(l, d, op)?))
        })
    }
    /// See [`SparseOps::reduce_stored`].
    pub(crate) fn reduce_stored(
        &self,
        l: SparseLayout<'_, IndexStorage>,
        op: StoredReduce,
    ) -> Result<Storage> {
        const OP: &str = "sparse reduce";
        super::on_backend!(self, s => {
            let l = on::layout_like(s, OP, l)?;
            Ok(Storage::from(s.reduce_stored(l, op)?))
        })
    }
    /// See [`SparseOps::square_sum_grad`].
    pub(crate) fn square_sum_grad(
        &self,
        l: SparseLayout<'_, IndexStorage>,
        g: &Storage,
        axis: SquareSumAxis,
    ) -> Result<Storage> {
        const OP: &str = "square_sum backward";
        super::on_backends!(OP, (self, g), (x, g) => {
            let l = on::layout_like(x, OP, l)?;
            Ok(Storage::from(x.square_sum_grad(l, g, axis)?))
        })
    }
    /// See [`SparseOps::densify`].
    pub(crate) fn densify(&self, l: SparseLayout<'_, IndexStorage>) -> Result<Storage> {
        const OP: &str = "cast_storage";
        super::on_backend!(self, s => {
            let l = on::layout_like(s, OP, l)?;
            Ok(Storage::from(s.densify(l)?))
        })
    }
    /// See [`SparseOps::sparsify`].
    pub(crate) fn sparsify(
        &self,
        shape: &[usize],
        to: SType,
    ) -> Result<SparseParts<Storage, IndexStorage>> {
        super::on_backend!(self, s => Ok(on::parts(s.sparsify(shape, to)?)))
    }
    /// See [`SparseOps::slice_cols`].
    pub(crate) fn slice_cols(
        &self,
        l: SparseLayout<'_, IndexStorage>,
        cols: Range<usize>,
    ) -> Result<SparseParts<Storage, IndexStorage>> {
        const OP: &str = "slice_cols";
        super::on_backend!(self, s => {
            let l = on::layout_like(s, OP, l)?;
            Ok(on::parts(s.slice_cols(l, cols)?))
        })
    }
    /// See [`SparseOps::retain_stored`].
    pub(crate) fn retain_stored(
        &self,
        l: SparseLayout<'_, IndexStorage>,
        ids: &[i64],
        search: bool,
    ) -> Result<SparseParts<Storage, IndexStorage>> {
        const OP: &str = "retain";
        super::on_backend!(self, s => {
            let l = on::layout_like(s, OP, l)?;
            Ok(on::parts(s.retain_stored(l, ids, search)?))
        })
    }
    /// See [`SparseOps::concat_csr`]; every part must be on the first part's backend.
    pub(crate) fn concat_csr(
        parts: &[(&Storage, SparseLayout<'_, IndexStorage>)],
    ) -> Result<SparseParts<Storage, IndexStorage>> {
        const OP: &str = "concat_rows";
        let (first, _) = parts
            .first()
            .ok_or_else(|| Error::arg(OP, "needs at least one array"))?;
        super::on_backend!(first, f => concat_on(f, OP, parts))
    }
}

/// [`Storage::concat_csr`] on the backend of `_first` (every part must be there).
fn concat_on<B>(
    _first: &B,
    op: &'static str,
    parts: &[(&Storage, SparseLayout<'_, IndexStorage>)],
) -> Result<SparseParts<Storage, IndexStorage>>
where
    B: SparseOps + crate::storage::IndexOf + ValuesOf,
    Storage: From<B>,
{
    let typed: Vec<(&B, SparseLayout<'_, B::Index>)> = parts
        .iter()
        .map(|&(s, l)| Ok((B::values_of(op, s)?, on::layout::<B>(op, l)?)))
        .collect::<Result<_>>()?;
    Ok(on::parts(B::concat_csr(&typed)?))
}

/// A storage as one backend's storage type, or the device error naming `op`.
pub(crate) trait ValuesOf: Sized {
    /// `s` as this backend's storage.
    fn values_of<'a>(op: &'static str, s: &'a Storage) -> Result<&'a Self>;
}

impl ValuesOf for crate::cpu::CpuStorage {
    #[allow(unused_variables)] // `op` names the error of the other backends' variants
    fn values_of<'a>(op: &'static str, s: &'a Storage) -> Result<&'a Self> {
        match s {
            Storage::Cpu(c) => Ok(c),
            #[cfg(feature = "cuda")]
            other => Err(Error::device_mismatch(op, Device::Cpu, other.device())),
        }
    }
}

/// A storage as one backend's storage type, mutably (`None` on another backend).
pub(crate) trait ValuesOfMut: Sized {
    /// `s` as this backend's storage.
    fn values_of_mut(s: &mut Storage) -> Option<&mut Self>;
}

impl ValuesOfMut for crate::cpu::CpuStorage {
    fn values_of_mut(s: &mut Storage) -> Option<&mut Self> {
        match s {
            Storage::Cpu(c) => Some(c),
            #[cfg(feature = "cuda")]
            _ => None,
        }
    }
}

#[cfg(feature = "cuda")]
impl ValuesOfMut for crate::cuda::CudaStorage {
    fn values_of_mut(s: &mut Storage) -> Option<&mut Self> {
        match s {
            Storage::Cuda(c) => Some(c),
            _ => None,
        }
    }
}

#[cfg(feature = "cuda")]
impl ValuesOf for crate::cuda::CudaStorage {
    fn values_of<'a>(op: &'static str, s: &'a Storage) -> Result<&'a Self> {
        match s {
            Storage::Cuda(c) => Ok(c),
            other => Err(Error::device_mismatch(op, Device::Cuda(0), other.device())),
        }
    }
}

impl IndexStorage {
    /// Host ids (given by a caller) as an index array on `device`, beside the values they
    /// index.
    pub(crate) fn from_vec_on(v: Vec<i64>, device: Device) -> Result<IndexStorage> {
        IndexStorage::from_arc_on(std::sync::Arc::new(v), device)
    }
    /// See [`SparseOps::rebase_indptr`].
    pub(crate) fn rebase_indptr(&self, start: usize, end: usize) -> Result<(IndexStorage, i64)> {
        match self {
            IndexStorage::Cpu(v) => {
                let (p, base) = crate::cpu::CpuStorage::rebase_indptr(v, start, end)?;
                Ok((IndexStorage::Cpu(p), base))
            }
            #[cfg(feature = "cuda")]
            IndexStorage::Cuda(v) => {
                let (p, base) = crate::cuda::CudaStorage::rebase_indptr(v, start, end)?;
                Ok((IndexStorage::Cuda(p), base))
            }
        }
    }
    /// See [`SparseOps::index_range`].
    pub(crate) fn index_range(&self, range: Range<usize>) -> Result<IndexStorage> {
        match self {
            IndexStorage::Cpu(v) => Ok(IndexStorage::Cpu(crate::cpu::CpuStorage::index_range(
                v, range,
            )?)),
            #[cfg(feature = "cuda")]
            IndexStorage::Cuda(v) => Ok(IndexStorage::Cuda(crate::cuda::CudaStorage::index_range(
                v, range,
            )?)),
        }
    }
    /// See [`SparseOps::check_row_ids`].
    pub(crate) fn check_row_ids(&self, rows: usize) -> Result<()> {
        match self {
            IndexStorage::Cpu(v) => crate::cpu::CpuStorage::check_row_ids(v, rows),
            #[cfg(feature = "cuda")]
            IndexStorage::Cuda(v) => crate::cuda::CudaStorage::check_row_ids(v, rows),
        }
    }
}

/// See [`SparseOps::check_csr`], on the backend holding the layout's row pointers.
pub(crate) fn check_csr_layout(
    l: SparseLayout<'_, IndexStorage>,
    values_len: usize,
    full: bool,
) -> Result<()> {
    const OP: &str = "check_format";
    match l {
        SparseLayout::Csr {
            indptr: IndexStorage::Cpu(_),
            ..
        } => crate::cpu::CpuStorage::check_csr(
            on::layout::<crate::cpu::CpuStorage>(OP, l)?,
            values_len,
            full,
        ),
        #[cfg(feature = "cuda")]
        SparseLayout::Csr {
            indptr: IndexStorage::Cuda(_),
            ..
        } => crate::cuda::CudaStorage::check_csr(
            on::layout::<crate::cuda::CudaStorage>(OP, l)?,
            values_len,
            full,
        ),
        SparseLayout::RowSparse { .. } => Err(Error::stype(OP, "needs a csr layout")),
    }
}
