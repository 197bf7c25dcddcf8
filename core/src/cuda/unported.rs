//! The kernel family with no CUDA kernels yet, the sparse operators (merges, conversions,
//! stored reductions, slicing): each method returns the [`Error::Device`](crate::Error::Device)
//! of [`not_ported`], naming the operation and the device, so a model that reaches one fails
//! with a message instead of copying to the host behind the user's back. Porting a family
//! replaces its block here with a file of kernels.

use std::ops::Range;
use std::sync::Arc;

use super::index::CudaIndex;
use super::launch::not_ported;
use super::storage::CudaStorage;
use crate::dtype::SType;
use crate::error::Result;
use crate::ops::BinaryOp;
use crate::storage::{
    BackendIndex, Merge, SparseLayout, SparseOps, SparseParts, SquareSumAxis, StoredReduce,
    WithDense,
};

impl BackendIndex for CudaStorage {
    type Index = CudaIndex;
}

impl SparseOps for CudaStorage {
    fn merge(
        &self,
        _la: SparseLayout<'_, CudaIndex>,
        _b: &Self,
        _lb: SparseLayout<'_, CudaIndex>,
        _op: Merge,
    ) -> Result<SparseParts<Self, CudaIndex>> {
        Err(not_ported("sparse merge", self.ordinal()))
    }
    fn scatter_dense(
        &self,
        _l: SparseLayout<'_, CudaIndex>,
        _dense: &Self,
        op: BinaryOp,
        _sparse_left: bool,
    ) -> Result<Self> {
        Err(not_ported(op.name(), self.ordinal()))
    }
    fn with_dense(
        &self,
        _l: SparseLayout<'_, CudaIndex>,
        _dense: &Self,
        _op: WithDense,
    ) -> Result<Self> {
        Err(not_ported("sparse binary", self.ordinal()))
    }
    fn reduce_stored(&self, _l: SparseLayout<'_, CudaIndex>, _op: StoredReduce) -> Result<Self> {
        Err(not_ported("sparse reduce", self.ordinal()))
    }
    fn square_sum_grad(
        &self,
        _l: SparseLayout<'_, CudaIndex>,
        _g: &Self,
        _axis: SquareSumAxis,
    ) -> Result<Self> {
        Err(not_ported("square_sum backward", self.ordinal()))
    }
    fn densify(&self, _l: SparseLayout<'_, CudaIndex>) -> Result<Self> {
        Err(not_ported("cast_storage", self.ordinal()))
    }
    fn sparsify(&self, _shape: &[usize], _to: SType) -> Result<SparseParts<Self, CudaIndex>> {
        Err(not_ported("cast_storage", self.ordinal()))
    }
    fn slice_cols(
        &self,
        _l: SparseLayout<'_, CudaIndex>,
        _cols: Range<usize>,
    ) -> Result<SparseParts<Self, CudaIndex>> {
        Err(not_ported("slice_cols", self.ordinal()))
    }
    fn retain_stored(
        &self,
        _l: SparseLayout<'_, CudaIndex>,
        _ids: &[i64],
        _search: bool,
    ) -> Result<SparseParts<Self, CudaIndex>> {
        Err(not_ported("retain", self.ordinal()))
    }
    fn concat_csr(
        parts: &[(&Self, SparseLayout<'_, CudaIndex>)],
    ) -> Result<SparseParts<Self, CudaIndex>> {
        Err(not_ported(
            "concat_rows",
            parts.first().map_or(0, |p| p.0.ordinal()),
        ))
    }
    fn rebase_indptr(indptr: &CudaIndex, start: usize, end: usize) -> Result<(CudaIndex, i64)> {
        // Row pointers are read on the host copy; the slice's are uploaded.
        let base = indptr.host[start];
        let host: Vec<i64> = indptr.host[start..=end].iter().map(|p| p - base).collect();
        Ok((CudaIndex::upload(indptr.ordinal(), Arc::new(host))?, base))
    }
    fn index_range(idx: &CudaIndex, range: Range<usize>) -> Result<CudaIndex> {
        CudaIndex::upload(idx.ordinal(), Arc::new(idx.host[range].to_vec()))
    }
    fn check_csr(l: SparseLayout<'_, CudaIndex>, values_len: usize, full: bool) -> Result<()> {
        // The invariants are checked on the host copies, by the CPU's check.
        let host = match l {
            SparseLayout::Csr {
                shape,
                indptr,
                indices,
                offset,
            } => SparseLayout::Csr {
                shape,
                indptr: &indptr.host,
                indices: &indices.host,
                offset,
            },
            SparseLayout::RowSparse { shape, indices } => SparseLayout::RowSparse {
                shape,
                indices: &indices.host,
            },
        };
        crate::cpu::CpuStorage::check_csr(host, values_len, full)
    }
    fn check_row_ids(idx: &CudaIndex, rows: usize) -> Result<()> {
        crate::cpu::CpuStorage::check_row_ids(&idx.host, rows)
    }
}
