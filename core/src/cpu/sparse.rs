//! The CPU's sparse family ([`SparseOps`]): the loops of the csr and row_sparse operators,
//! moved here from `crate::sparse` unchanged. Each enum variant is matched once, outside the
//! loops, and float kernels are monomorphized per dtype.

use std::ops::Range;
use std::sync::Arc;

use rayon::prelude::*;

use super::{CpuStorage, HostElement};
use crate::dtype::{DType, Element, Float, SType};
use crate::error::{Error, Result};
use crate::ops::BinaryOp;
use crate::storage::{
    Merge, SparseLayout, SparseOps, SparseParts, SquareSumAxis, StoredReduce, WithDense,
};
use crate::{float_dispatch, with_buffer};

/// A layout over host index vectors.
pub(crate) type HostLayout<'a> = SparseLayout<'a, Arc<Vec<i64>>>;
/// New host buffers of a sparse array.
pub(super) type HostParts = SparseParts<CpuStorage, Arc<Vec<i64>>>;

/// Elements per parallel block when converting between dense and csr.
const PAR_ROWS: usize = 1 << 14;

/// `a op b` for the binary ops the sparse kernels have (add, sub, mul; div otherwise).
fn f<T: Float>(op: BinaryOp, a: T, b: T) -> T {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Pow => a.powf(b),
        // Ties keep `a`, as the dense kernels do.
        BinaryOp::Maximum => {
            if a >= b {
                a
            } else {
                b
            }
        }
        BinaryOp::Minimum => {
            if a <= b {
                a
            } else {
                b
            }
        }
    }
}

/// The typed slice of a buffer whose dtype the caller matched.
fn typed<T: Element>(s: &CpuStorage) -> &[T] {
    T::slice(s).expect("dtype matched by the caller")
}

/// A csr layout's parts: row pointers, this array's column ids and value range.
struct Csr<'a> {
    shape: [usize; 2],
    indptr: &'a [i64],
    /// This array's column ids (from its offset).
    idx: &'a [i64],
    /// This array's positions in the value buffer.
    range: Range<usize>,
}

/// The parts of a csr layout (`None` for row_sparse).
fn csr<'a>(l: &HostLayout<'a>) -> Option<Csr<'a>> {
    match *l {
        SparseLayout::Csr {
            shape,
            indptr,
            indices,
            offset,
        } => {
            let nnz = *indptr.last().unwrap_or(&0) as usize;
            Some(Csr {
                shape,
                indptr,
                idx: &indices[offset..offset + nnz],
                range: offset..offset + nnz,
            })
        }
        SparseLayout::RowSparse { .. } => None,
    }
}

/// A row_sparse layout's row ids and row length (`None` for csr).
fn rsp<'a>(l: &HostLayout<'a>) -> Option<(&'a [i64], usize)> {
    match *l {
        SparseLayout::RowSparse { shape, indices } => {
            Some((indices.as_slice(), shape[1..].iter().product()))
        }
        SparseLayout::Csr { .. } => None,
    }
}

/// The stored values of a sparse array laid out as `l`.
fn stored<'a, T: Element>(s: &'a CpuStorage, l: &HostLayout<'_>) -> &'a [T] {
    let v = typed::<T>(s);
    match csr(l) {
        Some(c) => &v[c.range],
        None => v,
    }
}

/// Visit every stored entry of a sparse array as (flat dense position, value index).
#[allow(clippy::needless_range_loop)] // p indexes both the indices and the caller's values
fn for_each_stored(l: &HostLayout<'_>, mut visit: impl FnMut(usize, usize)) {
    if let Some(c) = csr(l) {
        for r in 0..c.shape[0] {
            for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
                visit(r * c.shape[1] + c.idx[p] as usize, p);
            }
        }
    } else if let Some((ids, rl)) = rsp(l) {
        for (k, &row) in ids.iter().enumerate() {
            for e in 0..rl {
                visit(row as usize * rl + e, k * rl + e);
            }
        }
    }
}

/// rs (op) rs over the union (add/sub) or intersection (mul) of the stored rows.
fn rsp_rsp<T: Float>(
    op: BinaryOp,
    (ai, av, rl): (&[i64], &[T], usize),
    (bi, bv): (&[i64], &[T]),
) -> (Vec<i64>, Vec<T>) {
    let union = op != BinaryOp::Mul;
    let (na, nb) = (ai.len(), bi.len());
    let (mut i, mut j) = (0, 0);
    let mut idx = Vec::with_capacity(na + nb);
    let mut out: Vec<T> = Vec::with_capacity((na + nb) * rl);
    let zero = vec![T::zero(); rl];
    while i < na || j < nb {
        let ra = ai.get(i).copied().unwrap_or(i64::MAX);
        let rb = bi.get(j).copied().unwrap_or(i64::MAX);
        let (x, y, r) = if ra == rb {
            i += 1;
            j += 1;
            (&av[(i - 1) * rl..i * rl], &bv[(j - 1) * rl..j * rl], ra)
        } else if ra < rb {
            i += 1;
            if !union {
                continue;
            }
            (&av[(i - 1) * rl..i * rl], &zero[..], ra)
        } else {
            j += 1;
            if !union {
                continue;
            }
            (&zero[..], &bv[(j - 1) * rl..j * rl], rb)
        };
        idx.push(r);
        out.extend(x.iter().zip(y).map(|(&p, &q)| f(op, p, q)));
    }
    (idx, out)
}

/// csr op csr -> csr, row by row merge of the sorted column indices: over the union of the
/// stored entries (absent ones as 0), or their intersection for `Mul` (0 times anything).
fn csr_csr<T: Float>(op: BinaryOp, a: &Csr<'_>, av: &[T], b: &Csr<'_>, bv: &[T]) -> HostParts {
    let union = op != BinaryOp::Mul;
    let (ai, bi) = (a.idx, b.idx);
    let (annz, bnnz) = (a.range.len(), b.range.len());
    let mut indptr = Vec::with_capacity(a.shape[0] + 1);
    indptr.push(0i64);
    let mut idx = Vec::with_capacity(annz + bnnz);
    let mut out: Vec<T> = Vec::with_capacity(annz + bnnz);
    for r in 0..a.shape[0] {
        let (mut p, pe) = (a.indptr[r] as usize, a.indptr[r + 1] as usize);
        let (mut q, qe) = (b.indptr[r] as usize, b.indptr[r + 1] as usize);
        while p < pe || q < qe {
            let ca = if p < pe { ai[p] } else { i64::MAX };
            let cb = if q < qe { bi[q] } else { i64::MAX };
            if ca == cb {
                idx.push(ca);
                out.push(f(op, av[p], bv[q]));
                p += 1;
                q += 1;
            } else if ca < cb {
                if union {
                    idx.push(ca);
                    out.push(f(op, av[p], T::zero()));
                }
                p += 1;
            } else {
                if union {
                    idx.push(cb);
                    out.push(f(op, T::zero(), bv[q]));
                }
                q += 1;
            }
        }
        indptr.push(idx.len() as i64);
    }
    SparseParts {
        indptr: Some(Arc::new(indptr)),
        indices: Arc::new(idx),
        values: T::into_buffer(out),
    }
}

/// Gradient accumulation rs + rs: the union of the rows, one-sided rows copied as they are.
fn add_rsp<T: Element + std::ops::Add<Output = T>>(
    (ai, av): (&[i64], &[T]),
    (bi, bv): (&[i64], &[T]),
    rl: usize,
) -> (Vec<i64>, Vec<T>) {
    let (na, nb) = (ai.len(), bi.len());
    let (mut i, mut j) = (0, 0);
    let mut idx = Vec::with_capacity(na + nb);
    let mut out = Vec::with_capacity((na + nb) * rl);
    while i < na || j < nb {
        let ra = ai.get(i).copied().unwrap_or(i64::MAX);
        let rb = bi.get(j).copied().unwrap_or(i64::MAX);
        if ra == rb {
            idx.push(ra);
            out.extend(
                av[i * rl..(i + 1) * rl]
                    .iter()
                    .zip(&bv[j * rl..(j + 1) * rl])
                    .map(|(x, y)| *x + *y),
            );
            i += 1;
            j += 1;
        } else if ra < rb {
            idx.push(ra);
            out.extend_from_slice(&av[i * rl..(i + 1) * rl]);
            i += 1;
        } else {
            idx.push(rb);
            out.extend_from_slice(&bv[j * rl..(j + 1) * rl]);
            j += 1;
        }
    }
    (idx, out)
}

/// Row_sparse parts from host vectors.
fn rsp_parts<T: HostElement>((idx, vals): (Vec<i64>, Vec<T>)) -> HostParts {
    SparseParts {
        indptr: None,
        indices: Arc::new(idx),
        values: T::into_buffer(vals),
    }
}

/// The error of two layouts no kernel combines.
fn layout_error(op: &'static str) -> Error {
    Error::stype(op, "no kernel for these storage types")
}

/// sparse * dense (same shape): the stored values times the dense values at their positions.
fn sparse_mul_dense<T: Float>(l: &HostLayout<'_>, sv: &[T], dv: &[T]) -> Vec<T> {
    let mut out = vec![T::zero(); sv.len()];
    for_each_stored(l, |pos, k| out[k] = sv[k] * dv[pos]);
    out
}

/// csr (op) a dense vector broadcast along rows (indexed by column) or columns (by row).
fn csr_bcast<T: Float>(op: BinaryOp, c: &Csr<'_>, sv: &[T], vv: &[T], along_rows: bool) -> Vec<T> {
    let mut out = vec![T::zero(); sv.len()];
    for r in 0..c.shape[0] {
        for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
            let b = if along_rows {
                vv[c.idx[p] as usize]
            } else {
                vv[r]
            };
            out[p] = f(op, sv[p], b);
        }
    }
    out
}

/// sparse +- dense (either order) -> dense.
fn sparse_dense_add<T: Float>(
    op: BinaryOp,
    l: &HostLayout<'_>,
    sv: &[T],
    dv: &[T],
    sparse_left: bool,
) -> Vec<T> {
    let mut out: Vec<T> = if sparse_left {
        crate::ops::map_slice(dv, |x| f(op, T::zero(), x))
    } else {
        dv.to_vec()
    };
    for_each_stored(l, |pos, k| {
        out[pos] = if sparse_left {
            f(op, sv[k], dv[pos])
        } else {
            f(op, dv[pos], sv[k])
        };
    });
    out
}

/// Sum of a csr array along `axis` (`Some(0)`: per column, `Some(_)`: per row, `None`: all).
fn csr_sum<T: Float>(c: &Csr<'_>, vals: &[T], axis: Option<usize>) -> Vec<T> {
    let [m, n] = c.shape;
    let len = match axis {
        Some(0) => n,
        Some(_) => m,
        None => 1,
    };
    let idx = c.idx;
    let mut out = vec![T::zero(); len];
    for r in 0..m {
        for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
            let o = match axis {
                Some(0) => idx[p] as usize,
                Some(_) => r,
                None => 0,
            };
            out[o] = out[o] + vals[p];
        }
    }
    out
}

/// Sum of squares of a 2-D row_sparse array (`rows` rows of `n`) over `axis`.
fn rsp_square_sum<T: Float>(
    ids: &[i64],
    v: &[T],
    [m, n]: [usize; 2],
    axis: SquareSumAxis,
) -> Vec<T> {
    let stored_rows = || -> Vec<T> {
        (0..ids.len())
            .map(|k| v[k * n..(k + 1) * n].iter().map(|&x| x * x).sum())
            .collect()
    };
    match axis {
        SquareSumAxis::StoredRows => stored_rows(),
        SquareSumAxis::Rows => {
            let sums = stored_rows();
            let mut out = vec![T::zero(); m];
            for (k, &row) in ids.iter().enumerate() {
                out[row as usize] = sums[k];
            }
            out
        }
        SquareSumAxis::Cols => {
            let mut out = vec![T::zero(); n];
            for row in v.chunks_exact(n.max(1)) {
                for (o, &x) in out.iter_mut().zip(row) {
                    *o = *o + x * x;
                }
            }
            out
        }
        SquareSumAxis::All => {
            let s: T = v.iter().map(|&x| x * x).sum();
            vec![s]
        }
    }
}

/// `2 * x * g` for the stored values `v` of a row_sparse array, `g` the dense head gradient of
/// its square sum over `axis` (`[rows]`, `[cols]` or one value).
fn rsp_square_sum_grad<T: Float>(
    ids: &[i64],
    v: &[T],
    n: usize,
    gv: &[T],
    axis: SquareSumAxis,
) -> Vec<T> {
    let two = <T as Element>::from_f64(2.0);
    let mut out = vec![T::zero(); v.len()];
    for (k, &row) in ids.iter().enumerate() {
        for e in 0..n {
            let gk = match axis {
                SquareSumAxis::StoredRows | SquareSumAxis::Rows => gv[row as usize],
                SquareSumAxis::Cols => gv[e],
                SquareSumAxis::All => gv[0],
            };
            out[k * n + e] = two * v[k * n + e] * gk;
        }
    }
    out
}

/// The dense equivalent of a csr array's values `vals` (this array's, from its offset).
fn csr_to_dense<T: Element>(c: &Csr<'_>, vals: &[T]) -> Vec<T> {
    let [rows, cols] = c.shape;
    let idx = c.idx;
    let mut out = crate::recycle::zeroed_vec(rows * cols);
    if cols > 0 {
        out.par_chunks_mut(cols)
            .with_min_len((PAR_ROWS / cols).max(1))
            .enumerate()
            .for_each(|(r, o)| {
                for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
                    o[idx[p] as usize] = vals[p];
                }
            });
    }
    out
}

/// The dense equivalent of a row_sparse array of `n` elements.
fn rsp_to_dense<T: Element>(ids: &[i64], v: &[T], n: usize, row_len: usize) -> Vec<T> {
    // A dense gradient densified every step reuses the previous step's buffer.
    let mut out = crate::recycle::zeroed_vec(n);
    for (k, &row) in ids.iter().enumerate() {
        let dst = row as usize * row_len;
        out[dst..dst + row_len].copy_from_slice(&v[k * row_len..(k + 1) * row_len]);
    }
    out
}

/// The rows of a dense `rows x row_len` array holding a non-zero, as row_sparse.
fn dense_to_rsp<T: Element>(v: &[T], rows: usize, row_len: usize) -> (Vec<i64>, Vec<T>) {
    // Find the non-zero rows in parallel, then gather them.
    let keep: Vec<i64> = (0..rows)
        .into_par_iter()
        .with_min_len(256)
        .filter(|&r| {
            v[r * row_len..(r + 1) * row_len]
                .iter()
                .any(|x| *x != Default::default())
        })
        .map(|r| r as i64)
        .collect();
    let data = keep
        .iter()
        .flat_map(|&r| {
            v[r as usize * row_len..(r as usize + 1) * row_len]
                .iter()
                .copied()
        })
        .collect();
    (keep, data)
}

/// The non-zeros of a dense `rows x cols` array, as csr.
fn dense_to_csr<T: Element>(v: &[T], rows: usize, cols: usize) -> (Vec<i64>, Vec<i64>, Vec<T>) {
    // Blocks of rows are scanned in parallel, each into its own (indices, values, counts);
    // the blocks are then joined in order.
    let block = (PAR_ROWS / cols.max(1)).max(1);
    let parts: Vec<(Vec<i64>, Vec<T>, Vec<i64>)> = (0..rows.div_ceil(block))
        .into_par_iter()
        .map(|b| {
            let (mut idx, mut vals, mut counts) = (Vec::new(), Vec::new(), Vec::new());
            for r in b * block..((b + 1) * block).min(rows) {
                for c in 0..cols {
                    let x = v[r * cols + c];
                    if x != Default::default() {
                        idx.push(c as i64);
                        vals.push(x);
                    }
                }
                counts.push(idx.len() as i64);
            }
            (idx, vals, counts)
        })
        .collect();
    let mut indptr = Vec::with_capacity(rows + 1);
    indptr.push(0i64);
    let (mut indices, mut vals) = (Vec::new(), Vec::new());
    for (i, v, c) in parts {
        let base = indices.len() as i64;
        indptr.extend(c.iter().map(|&k| k + base));
        indices.extend(i);
        vals.extend(v);
    }
    (indptr, indices, vals)
}

/// Positions (in the value buffer) of the stored entries of columns `cols` of a csr array,
/// and the new row pointers.
fn csr_col_positions(c: &Csr<'_>, cols: &Range<usize>) -> (Vec<i64>, Vec<usize>) {
    let (start, end) = (cols.start, cols.end);
    let idx = c.idx;
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
    (indptr, keep)
}

/// New csr index arrays (row pointers, column ids) and where their values come from.
pub(crate) type CsrPlan<P> = (Vec<i64>, Vec<i64>, Vec<P>);

/// A csr column slice as index work on the host (shared with the CUDA backend, which gathers
/// the values on its device): the new row pointers, the new column ids and the positions in
/// the value buffer of the kept entries.
pub(crate) fn slice_cols_plan(l: &HostLayout<'_>, cols: &Range<usize>) -> Result<CsrPlan<usize>> {
    let Some(c) = csr(l) else {
        return Err(layout_error("slice_cols"));
    };
    let (indptr, keep) = csr_col_positions(&c, cols);
    let indices: Vec<i64> = keep.iter().map(|&p| c.idx[p] - cols.start as i64).collect();
    let offset = c.range.start;
    Ok((
        indptr,
        indices,
        keep.into_iter().map(|p| p + offset).collect(),
    ))
}

/// The stored rows of a row_sparse array that `retain` keeps (shared with the CUDA backend):
/// their ids, their positions among the stored rows, and the row length.
pub(crate) fn retain_plan(
    l: &HostLayout<'_>,
    ids: &[i64],
    search: bool,
) -> Result<(Vec<i64>, Vec<usize>, usize)> {
    let Some((stored_ids, rl)) = rsp(l) else {
        return Err(layout_error("retain"));
    };
    let (mut kept, mut at) = (Vec::new(), Vec::new());
    if search {
        for &id in ids {
            if let Ok(k) = stored_ids.binary_search(&id) {
                at.push(k);
                kept.push(id);
            }
        }
    } else {
        // Both id lists are sorted: one merge pass finds the stored rows that are kept.
        let mut k = 0;
        for &want in ids {
            k += stored_ids[k..].partition_point(|&x| x < want);
            if stored_ids.get(k) == Some(&want) {
                kept.push(want);
                at.push(k);
            }
        }
    }
    Ok((kept, at, rl))
}

/// csr arrays stacked by rows as index work on the host (shared with the CUDA backend): the
/// joined row pointers and column ids, and each part's range in its value buffer.
pub(crate) fn concat_csr_plan(layouts: &[HostLayout<'_>]) -> Result<CsrPlan<Range<usize>>> {
    let cs: Vec<Csr<'_>> = layouts
        .iter()
        .map(|l| csr(l).ok_or_else(|| layout_error("concat_rows")))
        .collect::<Result<_>>()?;
    let rows: usize = cs.iter().map(|c| c.shape[0]).sum();
    let mut indptr = Vec::with_capacity(rows + 1);
    indptr.push(0i64);
    let mut indices = Vec::new();
    for c in &cs {
        let base = *indptr.last().unwrap_or(&0);
        indptr.extend(c.indptr[1..].iter().map(|&p| p + base));
        indices.extend_from_slice(c.idx);
    }
    Ok((indptr, indices, cs.into_iter().map(|c| c.range).collect()))
}

/// The csr format errors.
fn csr_format(m: String) -> Result<()> {
    Err(Error::format(SType::Csr, m))
}

impl SparseOps for CpuStorage {
    fn merge(
        &self,
        la: HostLayout<'_>,
        b: &Self,
        lb: HostLayout<'_>,
        op: Merge,
    ) -> Result<HostParts> {
        crate::cpu::half::via_f32!(a = self, bb = b => a.merge(la, bb, lb, op));
        if self.dtype() != b.dtype() {
            return Err(Error::dtype_mismatch(
                "sparse merge",
                self.dtype(),
                b.dtype(),
            ));
        }
        match (op, rsp(&la), rsp(&lb)) {
            (Merge::AddGrads, Some((ai, rl)), Some((bi, _))) => Ok(with_buffer!(self, a => {
                let b = b.as_slice().expect("dtypes checked equal");
                rsp_parts(add_rsp((ai, a.as_slice()), (bi, b), rl))
            })),
            (Merge::Binary(op), Some((ai, rl)), Some((bi, _))) => {
                Ok(float_dispatch!(self.dtype(), "binary", T => {
                    rsp_parts(rsp_rsp::<T>(op, (ai, typed(self), rl), (bi, typed(b))))
                }))
            }
            (Merge::Binary(op), None, None) => {
                let (ca, cb) = (csr(&la).expect("csr"), csr(&lb).expect("csr"));
                Ok(float_dispatch!(self.dtype(), "binary", T => {
                    let (av, bv) = (&typed::<T>(self)[ca.range.clone()], &typed::<T>(b)[cb.range.clone()]);
                    csr_csr::<T>(op, &ca, av, &cb, bv)
                }))
            }
            _ => Err(layout_error("sparse merge")),
        }
    }

    fn csr_product(&self, la: HostLayout<'_>, b: &Self, lb: HostLayout<'_>) -> Result<HostParts> {
        crate::cpu::half::via_f32!(a = self, bb = b => a.csr_product(la, bb, lb));
        if self.dtype() != b.dtype() {
            return Err(Error::dtype_mismatch("dot", self.dtype(), b.dtype()));
        }
        let (Some(ca), Some(cb)) = (csr(&la), csr(&lb)) else {
            return Err(layout_error("dot"));
        };
        if cb.shape[1] > u32::MAX as usize {
            return Err(Error::shape(
                "dot",
                format!(
                    "csr x csr supports up to 2^32 - 1 result columns, got {}",
                    cb.shape[1]
                ),
            ));
        }
        Ok(float_dispatch!(self.dtype(), "dot", T => {
            let (av, bv) = (&typed::<T>(self)[ca.range.clone()], &typed::<T>(b)[cb.range.clone()]);
            super::spgemm::csr_csr_product::<T>((ca.indptr, ca.idx, av), (cb.shape, cb.indptr, cb.idx, bv))?
        }))
    }

    fn scatter_dense(
        &self,
        l: HostLayout<'_>,
        dense: &Self,
        op: BinaryOp,
        sparse_left: bool,
    ) -> Result<Self> {
        crate::cpu::half::via_f32!(s = self, d = dense => s.scatter_dense(l, d, op, sparse_left));
        if self.dtype() != dense.dtype() {
            return Err(Error::dtype_mismatch("binary", self.dtype(), dense.dtype()));
        }
        Ok(float_dispatch!(self.dtype(), "binary", T => {
            T::into_buffer(sparse_dense_add::<T>(op, &l, stored::<T>(self, &l), typed(dense), sparse_left))
        }))
    }

    fn with_dense(&self, l: HostLayout<'_>, dense: &Self, op: WithDense) -> Result<Self> {
        crate::cpu::half::via_f32!(s = self, d = dense => s.with_dense(l, d, op));
        if self.dtype() != dense.dtype() {
            return Err(Error::dtype_mismatch("binary", self.dtype(), dense.dtype()));
        }
        Ok(float_dispatch!(self.dtype(), "binary", T => {
            let (sv, dv) = (stored::<T>(self, &l), typed::<T>(dense));
            T::into_buffer(match (op, csr(&l)) {
                (WithDense::Mul, _) => sparse_mul_dense(&l, sv, dv),
                (WithDense::AlongRows(op), Some(c)) => csr_bcast(op, &c, sv, dv, true),
                (WithDense::AlongCols(op), Some(c)) => csr_bcast(op, &c, sv, dv, false),
                _ => return Err(layout_error("binary")),
            })
        }))
    }

    fn reduce_stored(&self, l: HostLayout<'_>, op: StoredReduce) -> Result<Self> {
        crate::cpu::half::via_f32!(s = self => s.reduce_stored(l, op));
        match (op, csr(&l), rsp(&l)) {
            (StoredReduce::Sum(axis), Some(c), _) => {
                Ok(float_dispatch!(self.dtype(), "sum", T => {
                    T::into_buffer(csr_sum(&c, &typed::<T>(self)[c.range.clone()], axis))
                }))
            }
            (StoredReduce::SquareSum(axis), _, Some((ids, n))) => {
                let SparseLayout::RowSparse { shape, .. } = l else {
                    return Err(layout_error("square_sum"));
                };
                Ok(float_dispatch!(self.dtype(), "square_sum", T => {
                    T::into_buffer(rsp_square_sum(ids, typed::<T>(self), [shape[0], n], axis))
                }))
            }
            _ => Err(layout_error("sparse reduce")),
        }
    }

    fn square_sum_grad(&self, l: HostLayout<'_>, g: &Self, axis: SquareSumAxis) -> Result<Self> {
        crate::cpu::half::via_f32!(s = self, gg = g => s.square_sum_grad(l, gg, axis));
        let Some((ids, n)) = rsp(&l) else {
            return Err(layout_error("square_sum backward"));
        };
        if self.dtype() != g.dtype() {
            return Err(Error::dtype_mismatch(
                "square_sum backward",
                self.dtype(),
                g.dtype(),
            ));
        }
        Ok(float_dispatch!(self.dtype(), "square_sum backward", T => {
            T::into_buffer(rsp_square_sum_grad(ids, typed::<T>(self), n, typed::<T>(g), axis))
        }))
    }

    fn densify(&self, l: HostLayout<'_>) -> Result<Self> {
        Ok(match l {
            SparseLayout::Csr { .. } => {
                let c = csr(&l).expect("csr");
                with_buffer!(self, v => HostElement::into_buffer(csr_to_dense(&c, &v[c.range.clone()])))
            }
            SparseLayout::RowSparse { shape, indices } => {
                let row_len = shape[1..].iter().product();
                let n = shape.iter().product();
                with_buffer!(self, v => HostElement::into_buffer(rsp_to_dense(indices, v, n, row_len)))
            }
        })
    }

    fn sparsify(&self, shape: &[usize], to: SType) -> Result<HostParts> {
        match to {
            SType::Csr => {
                let (rows, cols) = (shape[0], shape[1]);
                Ok(with_buffer!(self, v => {
                    let (indptr, indices, vals) = dense_to_csr(v, rows, cols);
                    SparseParts {
                        indptr: Some(Arc::new(indptr)),
                        indices: Arc::new(indices),
                        values: HostElement::into_buffer(vals),
                    }
                }))
            }
            SType::RowSparse => {
                let row_len: usize = shape[1..].iter().product();
                Ok(with_buffer!(self, v => rsp_parts(dense_to_rsp(v, shape[0], row_len))))
            }
            SType::Dense => Err(layout_error("cast_storage")),
        }
    }

    fn slice_cols(&self, l: HostLayout<'_>, cols: Range<usize>) -> Result<HostParts> {
        let (indptr, indices, keep) = slice_cols_plan(&l, &cols)?;
        Ok(SparseParts {
            indptr: Some(Arc::new(indptr)),
            indices: Arc::new(indices),
            values: self.gather(keep.into_iter()),
        })
    }

    fn retain_stored(&self, l: HostLayout<'_>, ids: &[i64], search: bool) -> Result<HostParts> {
        let (kept, at, rl) = retain_plan(&l, ids, search)?;
        Ok(SparseParts {
            indptr: None,
            indices: Arc::new(kept),
            values: self.gather(at.iter().flat_map(|&k| k * rl..(k + 1) * rl)),
        })
    }

    fn concat_csr(parts: &[(&Self, HostLayout<'_>)]) -> Result<HostParts> {
        let Some(&(first, _)) = parts.first() else {
            return Err(Error::arg("concat_rows", "needs at least one array"));
        };
        let layouts: Vec<HostLayout<'_>> = parts.iter().map(|&(_, l)| l).collect();
        let (indptr, indices, ranges) = concat_csr_plan(&layouts)?;
        fn cat<T: Element>(
            parts: &[(&CpuStorage, HostLayout<'_>)],
            ranges: &[Range<usize>],
        ) -> CpuStorage {
            let mut v: Vec<T> = Vec::new();
            for ((s, _), r) in parts.iter().zip(ranges) {
                // A part's values are copied out of its (possibly shared) buffer first, as
                // each part's own range; then appended.
                let chunk = s.gather(r.clone());
                v.extend_from_slice(chunk.as_slice::<T>().expect("same dtype checked"));
            }
            T::into_buffer(v)
        }
        let values = match first.dtype() {
            DType::F32 => cat::<f32>(parts, &ranges),
            DType::F64 => cat::<f64>(parts, &ranges),
            DType::I64 => cat::<i64>(parts, &ranges),
            DType::I32 => cat::<i32>(parts, &ranges),
            DType::U8 => cat::<u8>(parts, &ranges),
            DType::F16 => cat::<half::f16>(parts, &ranges),
            DType::BF16 => cat::<half::bf16>(parts, &ranges),
        };
        Ok(SparseParts {
            indptr: Some(Arc::new(indptr)),
            indices: Arc::new(indices),
            values,
        })
    }

    fn rebase_indptr(indptr: &Self::Index, start: usize, end: usize) -> Result<(Self::Index, i64)> {
        let base = indptr[start];
        let rebased = indptr[start..=end].iter().map(|&p| p - base).collect();
        Ok((Arc::new(rebased), base))
    }

    fn index_range(idx: &Self::Index, range: Range<usize>) -> Result<Self::Index> {
        Ok(Arc::new(idx[range].to_vec()))
    }

    /// Always: the lengths, the end points, a non-decreasing `indptr` and every column id in
    /// `0..cols` (O(rows + nnz)), everything an index computed from the parts relies on, so
    /// parts that pass cannot make a kernel read or write out of bounds. `full` adds MXNet's
    /// remaining invariant: column ids sorted and unique within each row.
    fn check_csr(l: HostLayout<'_>, values_len: usize, full: bool) -> Result<()> {
        let SparseLayout::Csr {
            shape: [rows, cols],
            indptr,
            indices,
            offset,
        } = l
        else {
            return Err(layout_error("check_format"));
        };
        let f = csr_format;
        // Compared without adding (`rows + 1` wraps for a caller's `usize::MAX`); an empty
        // indptr must fail here, as kernels take `indptr.len() - 1` for the row count.
        if indptr.is_empty() || indptr.len() - 1 != rows {
            return f(format!(
                "indptr has {} entries, expected rows + 1 = {}",
                indptr.len(),
                rows as u128 + 1
            ));
        }
        if indptr[0] != 0 {
            return f(format!("indptr[0] is {}, expected 0", indptr[0]));
        }
        let last = indptr[rows];
        if last < 0 {
            return f(format!("indptr[{rows}] is negative ({last})"));
        }
        let nnz = last as usize;
        if offset.checked_add(nnz).is_none() {
            return f(format!("indptr[{rows}] = {nnz} (nnz) overflows the offset"));
        }
        if offset + nnz > indices.len() {
            return f(format!(
                "indptr[{rows}] = {nnz} (nnz) but only {} indices are stored after offset {}",
                indices.len().saturating_sub(offset),
                offset
            ));
        }
        if offset + nnz > values_len {
            return f(format!(
                "indptr[{rows}] = {nnz} (nnz) but only {} values are stored after offset {}",
                values_len.saturating_sub(offset),
                offset
            ));
        }
        for r in 0..rows {
            let (s, e) = (indptr[r], indptr[r + 1]);
            if e < s {
                return f(format!(
                    "indptr is not non-decreasing: indptr[{r}] = {s} > indptr[{}] = {e}",
                    r + 1
                ));
            }
        }
        let idx = &indices[offset..offset + nnz];
        // One branch-free pass (a negative id is a huge u64); the row of a bad id is looked
        // for only when there is one.
        let max_col = idx.iter().map(|&j| j as u64).fold(0, u64::max);
        if !idx.is_empty() && max_col >= cols as u64 {
            let p = idx
                .iter()
                .position(|&j| j as u64 >= cols as u64)
                .unwrap_or(0);
            let r = indptr
                .partition_point(|&q| q as usize <= p)
                .saturating_sub(1);
            return f(format!(
                "row {r}: column index {} out of range for {cols} columns",
                idx[p]
            ));
        }
        if !full {
            return Ok(());
        }
        for r in 0..rows {
            let row = &idx[indptr[r] as usize..indptr[r + 1] as usize];
            for (k, &j) in row.iter().enumerate() {
                if k > 0 && row[k - 1] >= j {
                    return f(format!(
                        "row {r}: column indices not sorted and unique ({} then {j})",
                        row[k - 1]
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_row_ids(idx: &Self::Index, rows: usize) -> Result<()> {
        // The valid case in one pass; the loop below only looks for the first offending id.
        if crate::cpu::update::ids_sorted_below(idx, rows) {
            return Ok(());
        }
        let f = |m: String| Err(Error::format(SType::RowSparse, m));
        for (k, &i) in idx.iter().enumerate() {
            if i < 0 || i as usize >= rows {
                return f(format!("row index {i} out of range for {rows} rows"));
            }
            if k > 0 && idx[k - 1] >= i {
                return f(format!(
                    "row indices not sorted and unique ({} then {i})",
                    idx[k - 1]
                ));
            }
        }
        Ok(())
    }
}
