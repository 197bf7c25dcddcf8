//! The sparse-product family of the backend interface: the csr products (csr . dense,
//! csr^T . dense as row_sparse, csr . row_sparse, dense . csr as dense or csr, csr . W^T and
//! its weight gradient) and the embedding's gather and segment sum.
//!
//! A csr operand reaches a backend as its values storage (the method's receiver) and a
//! [`CsrView`] of its structure, whose index arrays are the backend's own ([`BackendIndex::Index`](super::BackendIndex::Index):
//! what [`IndexStorage`]'s variant for that backend holds). The forwarders here match the values, the index arrays and every
//! other operand together, so operands on different devices are an
//! [`Error::Device`](crate::Error::Device), never a kernel reading foreign memory. Every method
//! validates nothing about shapes: the operator did that.

use super::{IndexStorage, Storage};
use crate::error::{Error, Result};
use crate::sparse::ColumnGroups;
use crate::Device;

/// A csr matrix's structure as operators hold it: what a [`CsrView`] is made of before the
/// forwarder has matched its index arrays to a backend.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CsrIndex<'a> {
    /// `[rows, cols]`.
    pub(crate) shape: [usize; 2],
    /// Row pointers, `rows + 1` entries starting at 0.
    pub(crate) indptr: &'a IndexStorage,
    /// Column ids (shared; this matrix's start at `offset`).
    pub(crate) indices: &'a IndexStorage,
    /// Position of this matrix's first non-zero in `indices` and in the values.
    pub(crate) offset: usize,
}

/// A csr matrix's structure on one backend: `I` is that backend's index array (the shared
/// host vector on the CPU). Non-zero `p` of row `r` (`indptr[r] <= p < indptr[r + 1]`) is at position
/// `offset + p` of `indices` and of the values.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CsrView<'a, I> {
    /// `[rows, cols]`.
    pub(crate) shape: [usize; 2],
    /// Row pointers.
    pub(crate) indptr: &'a I,
    /// Column ids.
    pub(crate) indices: &'a I,
    /// Position of the first non-zero in `indices` and in the values.
    pub(crate) offset: usize,
}

/// What a backend implements for the sparse products and the embedding. In each csr method
/// `self` is the csr operand's values; the other operands share its dtype (float) and device.
pub(crate) trait SparseDotOps: super::BackendIndex + Sized {
    /// `x (m x k) . w (k x n)` for a csr `x` and a dense row-major `w`, as a dense `m x n`.
    fn csr_dense(&self, x: CsrView<'_, Self::Index>, w: &Self, n: usize) -> Result<Self>;
    /// The values of `x^T (k x m) . g (m x n)` as row_sparse: one row of `n` per group of
    /// `groups` (the columns present in `x`, ascending), each the sum of the rows of `g`
    /// picked by that column's non-zeros, scaled by their values.
    fn csr_t_dense(
        &self,
        x: CsrView<'_, Self::Index>,
        g: &Self,
        n: usize,
        groups: &ColumnGroups,
    ) -> Result<Self>;
    /// `x (m x k) . w` for a csr `x` and a row_sparse `w` (`k x n`) given as its stored rows
    /// `w_data` and their sorted ids `w_rows`, as a dense `m x n`.
    fn csr_rsp(
        &self,
        x: CsrView<'_, Self::Index>,
        w_data: &Self,
        w_rows: &Self::Index,
        n: usize,
    ) -> Result<Self>;
    /// `a (m x k) . x` (or `. x^T` when `tb`) for a dense row-major `a` and a csr `x`, as a
    /// dense `m x n` (`n` is the csr's column count, or its row count when `tb`).
    fn dense_csr(&self, x: CsrView<'_, Self::Index>, a: &Self, m: usize, tb: bool) -> Result<Self>;
    /// `op(a) . x` for a csr `x` (`k x n`) and a dense row-major `a` (`m x k`, or `k x m`
    /// read transposed when `ta`), as csr (MXNet's `dot(dense, csr) = csr`): every row of the
    /// result stores the same columns, the sorted columns that hold an entry of `x`. Returns
    /// the row pointers, the column ids and the values (row-major `m x columns`).
    fn dense_csr_to_csr(
        &self,
        x: CsrView<'_, Self::Index>,
        a: &Self,
        m: usize,
        ta: bool,
    ) -> Result<(Self::Index, Self::Index, Self)>;
    /// `x (rows x feats) . w^T` for a csr `x` and a dense `w` of `(units, feats)`, as a dense
    /// `rows x units`.
    fn csr_dense_t(&self, x: CsrView<'_, Self::Index>, w: &Self, units: usize) -> Result<Self>;
    /// [`SparseDotOps::csr_dense_t`] written into `out`, a dense buffer of `rows * units`
    /// elements of `w`'s dtype.
    fn csr_dense_t_into(
        &self,
        x: CsrView<'_, Self::Index>,
        w: &Self,
        units: usize,
        out: &mut Self,
    ) -> Result<()>;
    /// `g^T . x` for a dense `g` of `(rows, units)` and a csr `x` of `(rows, feats)`: the
    /// dense `(units, feats)` weight gradient of [`SparseDotOps::csr_dense_t`].
    fn csr_dense_t_grad(&self, x: CsrView<'_, Self::Index>, g: &Self, units: usize)
        -> Result<Self>;
    /// The rows `ids` of `self`, a row-major table with rows of `dim` (any dtype), one after
    /// another. The ids were checked against the table's rows.
    fn gather_rows(&self, ids: &Self::Index, dim: usize) -> Result<Self>;
    /// The sum of the rows of `self` (row `e` has `dim` elements) that share an id in `ids`
    /// (one per row): the sorted unique ids and their summed rows (row_sparse parts).
    fn segment_sum(&self, ids: &Self::Index, dim: usize) -> Result<(Self::Index, Self)>;
    /// The elements of `self` as ids (i64, i32, u8, or whole-valued floats, as MXNet passes
    /// ids in float arrays), each checked to lie in `0..bound`; errors name `op`.
    fn to_ids(&self, op: &'static str, bound: usize) -> Result<Self::Index>;
}

/// The device of an index array.
fn index_device(i: &IndexStorage) -> Device {
    i.device()
}

/// The error for operands of one operation on different devices: the first storage whose
/// device differs from the first one's, else the index array that does.
fn mismatch(op: &'static str, values: &[&Storage], index: &[&IndexStorage]) -> Error {
    let first = values[0].device();
    let other = values
        .iter()
        .map(|s| s.device())
        .chain(index.iter().map(|i| index_device(i)))
        .find(|&d| d != first)
        .unwrap_or(first);
    Error::device_mismatch(op, first, other)
}

/// Dispatch a csr operation: `$body` runs with `$x` bound to the [`CsrView`] of `$ix` on the
/// backend that holds the csr values `$v` (bound to `$vb`) and each other storage `$s` (bound
/// to `$b`); operands on different devices are an error naming `$op`.
macro_rules! on_csr {
    ($op:expr, $ix:expr, ($v:expr => $vb:ident $(, $s:expr => $b:ident)*), $x:ident => $body:expr) => {{
        let ix: &CsrIndex<'_> = $ix;
        match (ix.indptr, ix.indices, $v $(, $s)*) {
            (IndexStorage::Cpu(p), IndexStorage::Cpu(i), Storage::Cpu($vb) $(, Storage::Cpu($b))*) => {
                let $x = CsrView {
                    shape: ix.shape,
                    indptr: p,
                    indices: i,
                    offset: ix.offset,
                };
                $body
            }
            #[cfg(feature = "cuda")]
            (IndexStorage::Cuda(p), IndexStorage::Cuda(i), Storage::Cuda($vb) $(, Storage::Cuda($b))*)
                if p.ordinal() == $vb.ordinal() && i.ordinal() == $vb.ordinal()
                    $(&& $b.ordinal() == $vb.ordinal())* =>
            {
                let $x = CsrView {
                    shape: ix.shape,
                    indptr: p,
                    indices: i,
                    offset: ix.offset,
                };
                $body
            }
            #[allow(unreachable_patterns)]
            _ => Err(mismatch($op, &[$v $(, $s)*], &[ix.indptr, ix.indices])),
        }
    }};
}

impl Storage {
    /// See [`SparseDotOps::csr_dense`]; `self` is the csr's values.
    #[inline]
    pub(crate) fn csr_dense(&self, x: &CsrIndex<'_>, w: &Storage, n: usize) -> Result<Storage> {
        on_csr!("dot", x, (self => v, w => w), x => Ok(Storage::from(v.csr_dense(x, w, n)?)))
    }
    /// See [`SparseDotOps::csr_t_dense`]; `self` is the csr's values.
    #[inline]
    pub(crate) fn csr_t_dense(
        &self,
        x: &CsrIndex<'_>,
        g: &Storage,
        n: usize,
        groups: &ColumnGroups,
    ) -> Result<Storage> {
        on_csr!("dot", x, (self => v, g => g), x =>
            Ok(Storage::from(v.csr_t_dense(x, g, n, groups)?)))
    }
    /// See [`SparseDotOps::csr_rsp`]; `self` is the csr's values.
    #[inline]
    pub(crate) fn csr_rsp(
        &self,
        x: &CsrIndex<'_>,
        w_data: &Storage,
        w_rows: &IndexStorage,
        n: usize,
    ) -> Result<Storage> {
        on_csr!("dot", x, (self => v, w_data => w), x => {
            let r = super::IndexOf::index_of_on(v, "dot", w_rows)
                .map_err(|_| mismatch("dot", &[self, w_data], &[w_rows]))?;
            Ok(Storage::from(v.csr_rsp(x, w, r, n)?))
        })
    }
    /// See [`SparseDotOps::dense_csr`]; `self` is the csr's values.
    #[inline]
    pub(crate) fn dense_csr(
        &self,
        x: &CsrIndex<'_>,
        a: &Storage,
        m: usize,
        tb: bool,
    ) -> Result<Storage> {
        on_csr!("dot", x, (self => v, a => a), x => Ok(Storage::from(v.dense_csr(x, a, m, tb)?)))
    }
    /// See [`SparseDotOps::dense_csr_to_csr`]; `self` is the csr's values.
    #[inline]
    pub(crate) fn dense_csr_to_csr(
        &self,
        x: &CsrIndex<'_>,
        a: &Storage,
        m: usize,
        ta: bool,
    ) -> Result<(IndexStorage, IndexStorage, Storage)> {
        on_csr!("dot", x, (self => v, a => a), x => {
            let (indptr, indices, values) = v.dense_csr_to_csr(x, a, m, ta)?;
            Ok((
                super::IndexOf::wrap_index_of(v, indptr),
                super::IndexOf::wrap_index_of(v, indices),
                Storage::from(values),
            ))
        })
    }
    /// See [`SparseDotOps::csr_dense_t`]; `self` is the csr's values.
    #[inline]
    pub(crate) fn csr_dense_t(
        &self,
        x: &CsrIndex<'_>,
        w: &Storage,
        units: usize,
    ) -> Result<Storage> {
        on_csr!("dot_csr_dense_t", x, (self => v, w => w), x =>
            Ok(Storage::from(v.csr_dense_t(x, w, units)?)))
    }
    /// See [`SparseDotOps::csr_dense_t_into`]; `self` is the csr's values.
    pub(crate) fn csr_dense_t_into(
        &self,
        x: &CsrIndex<'_>,
        w: &Storage,
        units: usize,
        out: &mut Storage,
    ) -> Result<()> {
        const OP: &str = "dot_csr_dense_t";
        match (x.indptr, x.indices, self, w, out) {
            (
                IndexStorage::Cpu(p),
                IndexStorage::Cpu(i),
                Storage::Cpu(v),
                Storage::Cpu(w),
                Storage::Cpu(o),
            ) => {
                let view = CsrView {
                    shape: x.shape,
                    indptr: p,
                    indices: i,
                    offset: x.offset,
                };
                v.csr_dense_t_into(view, w, units, o)
            }
            #[cfg(feature = "cuda")]
            (
                IndexStorage::Cuda(p),
                IndexStorage::Cuda(i),
                Storage::Cuda(v),
                Storage::Cuda(w),
                Storage::Cuda(o),
            ) if p.ordinal() == v.ordinal()
                && i.ordinal() == v.ordinal()
                && w.ordinal() == v.ordinal()
                && o.ordinal() == v.ordinal() =>
            {
                let view = CsrView {
                    shape: x.shape,
                    indptr: p,
                    indices: i,
                    offset: x.offset,
                };
                v.csr_dense_t_into(view, w, units, o)
            }
            #[allow(unreachable_patterns)]
            (p, i, v, w, o) => Err(mismatch(OP, &[v, w, &*o], &[p, i])),
        }
    }
    /// See [`SparseDotOps::csr_dense_t_grad`]; `self` is the csr's values.
    #[inline]
    pub(crate) fn csr_dense_t_grad(
        &self,
        x: &CsrIndex<'_>,
        g: &Storage,
        units: usize,
    ) -> Result<Storage> {
        on_csr!("dot_csr_dense_t backward", x, (self => v, g => g), x =>
            Ok(Storage::from(v.csr_dense_t_grad(x, g, units)?)))
    }
    /// See [`SparseDotOps::gather_rows`].
    #[inline]
    pub(crate) fn gather_rows(&self, ids: &IndexStorage, dim: usize) -> Result<Storage> {
        super::on_backend!(self, t => {
            let i = super::IndexOf::index_of_on(t, "embedding", ids)
                .map_err(|_| mismatch("embedding", &[self], &[ids]))?;
            Ok(Storage::from(t.gather_rows(i, dim)?))
        })
    }
    /// See [`SparseDotOps::segment_sum`].
    #[inline]
    pub(crate) fn segment_sum(
        &self,
        ids: &IndexStorage,
        dim: usize,
    ) -> Result<(IndexStorage, Storage)> {
        super::on_backend!(self, g => {
            let i = super::IndexOf::index_of_on(g, "embedding backward", ids)
                .map_err(|_| mismatch("embedding backward", &[self], &[ids]))?;
            let (uniq, data) = g.segment_sum(i, dim)?;
            Ok((super::IndexOf::wrap_index_of(g, uniq), Storage::from(data)))
        })
    }
    /// See [`SparseDotOps::to_ids`].
    #[inline]
    pub(crate) fn to_ids(&self, op: &'static str, bound: usize) -> Result<IndexStorage> {
        super::on_backend!(self, b =>
            Ok(super::IndexOf::wrap_index_of(b, b.to_ids(op, bound)?)))
    }
}
