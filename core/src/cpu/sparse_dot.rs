//! The CPU's sparse-product family ([`SparseDotOps`]): the row loops of the csr products and
//! of the embedding, over host slices. Each method dispatches on the dtype once, outside its
//! loops, so every loop is monomorphized as it was in the operators.

use std::mem::MaybeUninit;
use std::sync::Arc;

use num_traits::Zero;
use rayon::prelude::*;

use super::cast::as_f32;
use super::gather::{csr_rows_f32, gather_sum_row, PREFETCH_AHEAD};
use super::rows::axpy;
use super::segment::{
    fill_rows, for_each_row, segment_sum_grouped, segment_sum_grouped_to, segment_sum_rows,
    PAR_WORK,
};
use super::{with_buffer, CpuStorage, HostElement};
use crate::dtype::{Element, Float};
use crate::error::{Error, Result};
use crate::float_dispatch;
use crate::sparse::ColumnGroups;
use crate::storage::SparseDotOps;

/// A csr matrix on the CPU.
type Csr<'a> = crate::storage::CsrView<'a, Arc<Vec<i64>>>;

/// The csr's number of non-zeros, row pointers and own column ids (from its offset).
fn parts<'a>(x: &Csr<'a>) -> (usize, &'a [i64], &'a [i64]) {
    let nnz = *x.indptr.last().unwrap_or(&0) as usize;
    (nnz, &x.indptr[..], &x.indices[x.offset..x.offset + nnz])
}

/// The csr's own values, typed (from its offset), or a dtype error naming `op`.
fn values<'a, T: Element>(
    op: &'static str,
    v: &'a CpuStorage,
    x: &Csr<'_>,
    nnz: usize,
) -> Result<&'a [T]> {
    T::slice(v)
        .map(|s| &s[x.offset..x.offset + nnz])
        .ok_or_else(|| Error::dtype(op, "csr values of an unexpected dtype"))
}

/// `other` typed like the csr's values, or the dtype mismatch of `values` and `other`.
fn typed<'a, T: HostElement>(
    op: &'static str,
    values: &CpuStorage,
    other: &'a CpuStorage,
) -> Result<&'a [T]> {
    T::slice(other).ok_or_else(|| Error::dtype_mismatch(op, values.dtype(), other.dtype()))
}

/// A product small enough for the calling thread, in f32 on an AVX2 machine: all rows in one
/// loop nest ([`csr_rows_f32`]). `None` for other element types, CPUs or widths.
fn small_f32<T: Float>(
    m: usize,
    n: usize,
    ws: &[T],
    ptr: &[i64],
    idx: &[i64],
    vals: &[T],
) -> Option<Vec<T>> {
    let (ws, vals) = (as_f32(ws)?, as_f32(vals)?);
    // Checked: the kernel writes m rows of n, so the buffer must really hold m * n.
    let len = m.checked_mul(n)?;
    let mut out: Vec<T> = Vec::with_capacity(len);
    // SAFETY: T is f32 (as_f32 succeeded), so the cast only renames the element type; the
    // capacity is `len`, and the slice is of uninitialised elements.
    let o = unsafe {
        std::slice::from_raw_parts_mut(
            out.spare_capacity_mut().as_mut_ptr() as *mut MaybeUninit<f32>,
            len,
        )
    };
    if !csr_rows_f32(o, ws, n, ptr, idx, vals) {
        return None;
    }
    // SAFETY: `csr_rows_f32` returned true, so it wrote all `len` elements (it checks that the
    // output holds exactly its rows, `avx2_rows_fit`, before writing anything).
    unsafe { out.set_len(len) };
    Some(out)
}

/// `out += x . w^T` for a csr `x` (its row pointers, column ids and values) and a dense `w`
/// of `(units, feats)`, into the zeroed `rows x units` `out`: parallel over rows when large.
fn csr_dense_t_rows<T: Float + std::ops::AddAssign>(
    out: &mut [T],
    wv: &[T],
    feats: usize,
    units: usize,
    ptr: &[i64],
    idx: &[i64],
    vals: &[T],
) {
    let nnz = vals.len();
    let work = |(r, dst): (usize, &mut [T])| {
        for p in ptr[r] as usize..ptr[r + 1] as usize {
            let (col, v) = (idx[p] as usize, vals[p]);
            for (u, o) in dst.iter_mut().enumerate() {
                *o += v * wv[u * feats + col];
            }
        }
    };
    if units > 0 && nnz * units >= 1 << 15 {
        out.par_chunks_mut(units).enumerate().for_each(work);
    } else if units > 0 {
        out.chunks_mut(units).enumerate().for_each(work);
    }
}

/// csr . dense: parallel over output rows; each row is the sum of the rows of `w` picked by
/// its non-zeros, written once.
fn csr_dense_typed<T: Float>(
    m: usize,
    n: usize,
    ws: &[T],
    ptr: &[i64],
    idx: &[i64],
    vals: &[T],
) -> Vec<T> {
    let work = idx.len() * n;
    if work < PAR_WORK {
        if let Some(out) = small_f32(m, n, ws, ptr, idx, vals) {
            return out;
        }
    }
    fill_rows(m, n, 8, work, |r, orow| {
        let s = ptr[r] as usize;
        gather_sum_row(
            orow,
            ws,
            ptr[r + 1] as usize - s,
            |q| (idx[s + q] as usize, vals[s + q]),
            // Prefetch across row ends too: a task handles consecutive rows.
            |q| idx.get(s + q + PREFETCH_AHEAD).map(|&j| j as usize),
        );
    })
}

/// [`csr_dense_typed`] written into `out` (`m * n` slots): the same kernels (the small f32
/// loop nest, else the rows' gather-sums), so the same bits.
fn csr_dense_typed_to<T: Float>(
    m: usize,
    n: usize,
    ws: &[T],
    ptr: &[i64],
    idx: &[i64],
    vals: &[T],
    out: &mut [MaybeUninit<T>],
) {
    let work = idx.len() * n;
    if work < PAR_WORK {
        if let (Some(w32), Some(v32)) = (as_f32(ws), as_f32(vals)) {
            // SAFETY: T is f32 (`as_f32` succeeded), so the cast only renames the element
            // type of the same `m * n` slots.
            let o = unsafe {
                std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut MaybeUninit<f32>, out.len())
            };
            if csr_rows_f32(o, w32, n, ptr, idx, v32) {
                return;
            }
        }
    }
    debug_assert_eq!(out.len(), m * n);
    for_each_row(out, n, 8, work, |r, orow| {
        let s = ptr[r] as usize;
        gather_sum_row(
            orow,
            ws,
            ptr[r + 1] as usize - s,
            |q| (idx[s + q] as usize, vals[s + q]),
            |q| idx.get(s + q + PREFETCH_AHEAD).map(|&j| j as usize),
        );
    });
}

impl CpuStorage {
    /// The stored rows of `x^T . g` ([`SparseDotOps::csr_t_dense`], `self` the csr's values)
    /// written into `out`, a buffer of `groups * n` elements: what a planned graph runs to
    /// rewrite last step's row_sparse weight gradient (same kernel, same bits).
    pub(crate) fn csr_t_dense_into(
        &self,
        x: Csr<'_>,
        g: &Self,
        n: usize,
        groups: &ColumnGroups,
        out: &mut Self,
    ) -> Result<()> {
        const OP: &str = "dot";
        let (nnz, _, _) = parts(&x);
        let have = out.dtype();
        float_dispatch!(self.dtype(), OP, T => {
            let vals = values::<T>(OP, self, &x, nnz)?;
            let gs = typed::<T>(OP, self, g)?;
            let o = out
                .writable::<T>(OP)?
                .ok_or_else(|| Error::dtype_mismatch(OP, self.dtype(), have))?;
            let rows = groups.starts.len().saturating_sub(1);
            if o.len() != rows * n || gs.len() != x.shape[0] * n {
                return Err(Error::shape(
                    OP,
                    format!(
                        "csr^T {:?} . dense of {} into {} elements ({rows} rows of {n})",
                        x.shape,
                        gs.len(),
                        o.len()
                    ),
                ));
            }
            segment_sum_grouped_to(
                &groups.starts,
                &groups.order,
                &groups.rows,
                Some(vals),
                gs,
                n,
                crate::cpu::elementwise::as_slots(o),
            )
        });
        Ok(())
    }

    /// `csr . dense` ([`SparseDotOps::csr_dense`], `self` the csr's values) written into
    /// `out`, a buffer of `rows * n` elements: what a planned graph's forward `dot` of a csr
    /// batch runs.
    pub(crate) fn csr_dense_into(
        &self,
        x: Csr<'_>,
        w: &Self,
        n: usize,
        out: &mut Self,
    ) -> Result<()> {
        const OP: &str = "dot";
        let (nnz, ptr, idx) = parts(&x);
        let m = x.shape[0];
        let have = out.dtype();
        float_dispatch!(self.dtype(), OP, T => {
            let vals = values::<T>(OP, self, &x, nnz)?;
            let ws = typed::<T>(OP, self, w)?;
            let o = out
                .writable::<T>(OP)?
                .ok_or_else(|| Error::dtype_mismatch(OP, self.dtype(), have))?;
            if o.len() != m * n || ws.len() != x.shape[1] * n {
                return Err(Error::shape(
                    OP,
                    format!("csr {:?} . dense of {} into {} elements", x.shape, ws.len(), o.len()),
                ));
            }
            csr_dense_typed_to(m, n, ws, ptr, idx, vals, crate::cpu::elementwise::as_slots(o))
        });
        Ok(())
    }
}

/// Columns of `x` per panel of [`Panels`]: 8192 f32 (32 KB) of an output or input row stay
/// in L1 while a panel's entries scatter into or gather from them.
const PANEL_BYTES: usize = 32 << 10;

/// Elements of a row gather (`gather_rows`) below which it runs on the calling thread: smaller
/// gathers finish before pool threads would have woken.
const GATHER_PAR_MIN: usize = 1 << 16;

/// The entries of a csr `x` bucketed by panels of its columns, each panel's entries in `x`'s
/// row order (so ascending rows): the dense . csr kernels then visit one panel of a long row
/// at a time (a cache-sized window) instead of jumping over the whole row for every non-zero.
struct Panels<T> {
    /// Columns per panel.
    width: usize,
    /// Panel `q`'s entries are `start[q]..start[q + 1]`.
    start: Vec<usize>,
    rows: Vec<usize>,
    cols: Vec<usize>,
    vals: Vec<T>,
}

impl<T: Copy> Panels<T> {
    /// Buckets `x` (`ptr`, `idx`, `vals`, with `cols` columns) by a counting sort on the panel,
    /// stable, so each panel keeps the row order.
    fn new(ptr: &[i64], idx: &[i64], vals: &[T], cols: usize, width: usize) -> Self {
        let panels = cols.div_ceil(width).max(1);
        let mut start = vec![0usize; panels + 1];
        for &c in idx {
            start[c as usize / width + 1] += 1;
        }
        for q in 0..panels {
            start[q + 1] += start[q];
        }
        let mut next = start.clone();
        let nnz = idx.len();
        let (mut rs, mut cs, mut vs) = (vec![0; nnz], vec![0; nnz], Vec::with_capacity(nnz));
        vs.extend_from_slice(vals);
        for r in 0..ptr.len().saturating_sub(1) {
            for p in ptr[r] as usize..ptr[r + 1] as usize {
                let c = idx[p] as usize;
                let at = &mut next[c / width];
                rs[*at] = r;
                cs[*at] = c;
                vs[*at] = vals[p];
                *at += 1;
            }
        }
        Panels {
            width,
            start,
            rows: rs,
            cols: cs,
            vals: vs,
        }
    }
}

/// dense . csr (or . csr^T when `tb`), rows of the output in parallel, each output row from
/// its row of `a`. Where the long side of the product (`x`'s columns: the output row when not
/// `tb`, `a`'s row when `tb`) outgrows L1, `x` is visited one column panel at a time
/// ([`Panels`]): every non-zero then scatters into (or gathers from) a 32 KB window instead of
/// a cache miss anywhere in a row of up to megabytes. Each output element sums its terms in
/// the order of `x`'s rows, as the csr-result kernel does (`dense_csr_to_csr_typed`), and a
/// zero of `a` adds nothing, as there.
#[allow(clippy::too_many_arguments)]
fn dense_csr_typed<T: Float + std::ops::AddAssign>(
    m: usize,
    n: usize,
    k: usize,
    cr: usize,
    xs: &[T],
    ptr: &[i64],
    idx: &[i64],
    vals: &[T],
    tb: bool,
) -> Vec<T> {
    // Every element is written below (a panel's window is cleared first), so a recycled buffer
    // does: it is already faulted in, where fresh pages cost a kernel fault and clear each.
    let mut out: Vec<T> = crate::recycle::overwritable_vec(m * n);
    if n == 0 {
        return out;
    }
    let x_cols = if tb { k } else { n };
    let width = (PANEL_BYTES / std::mem::size_of::<T>()).max(64);
    let work = idx.len() * m;
    if x_cols <= width {
        // One window: the plain loops.
        for_each_row(&mut out, n, 4, work, |i, orow| {
            let arow = &xs[i * k..(i + 1) * k];
            orow.fill(T::zero());
            for r in 0..cr {
                let (s, e) = (ptr[r] as usize, ptr[r + 1] as usize);
                if tb {
                    // out[i, r] = sum_p a[i, col p] * v_p
                    let mut acc = T::zero();
                    for p in s..e {
                        acc += arow[idx[p] as usize] * vals[p];
                    }
                    orow[r] = acc;
                } else {
                    let av = arow[r];
                    if av != T::zero() {
                        for p in s..e {
                            orow[idx[p] as usize] += av * vals[p];
                        }
                    }
                }
            }
        });
        return out;
    }
    let pan = Panels::new(ptr, idx, vals, x_cols, width);
    for_each_row(&mut out, n, 4, work, |i, orow| {
        let arow = &xs[i * k..(i + 1) * k];
        if tb {
            // out[i, r] sums a[i, c] * x[r, c] panel after panel of c: the gathers from
            // a's row stay in the panel's window; the output row is x's row count long.
            orow.fill(T::zero());
            for q in 0..pan.start.len() - 1 {
                for e in pan.start[q]..pan.start[q + 1] {
                    orow[pan.rows[e]] += arow[pan.cols[e]] * pan.vals[e];
                }
            }
        } else {
            // Window by window of the output row: cleared, then every non-zero of x in it
            // scaled by its row's entry of a.
            for (q, win) in orow.chunks_mut(pan.width).enumerate() {
                win.fill(T::zero());
                let base = q * pan.width;
                for e in pan.start[q]..pan.start[q + 1] {
                    let av = arow[pan.rows[e]];
                    if av != T::zero() {
                        win[pan.cols[e] - base] += av * pan.vals[e];
                    }
                }
            }
        }
    });
    out
}

/// The csr result of `op(a) . x` ([`SparseDotOps::dense_csr_to_csr`]): `cols` the sorted
/// columns present in `x`, `pos[e]` the place of non-zero `e`'s column among them, the values
/// a row-major `m x cols.len()` block. Row `i` adds `op(a)[i, p] * x[p, j]` into place
/// `pos(j)` for `p` ascending (the order of the dense-result kernel, `dense_csr_typed`, so the
/// two agree bit for bit), rows in parallel.
#[allow(clippy::too_many_arguments)]
fn dense_csr_to_csr_typed<T: Float + std::ops::AddAssign>(
    m: usize,
    k: usize,
    s: usize,
    xs: &[T],
    ptr: &[i64],
    pos: &[usize],
    vals: &[T],
    ta: bool,
) -> Vec<T> {
    let mut out = vec![T::zero(); m * s];
    let work = vals.len() * m;
    for_each_row(&mut out, s, 4, work, |i, orow| {
        for p in 0..k {
            let av = if ta { xs[p * m + i] } else { xs[i * k + p] };
            // A zero of `a` adds nothing (as in the dense-result kernel).
            if av != T::zero() {
                for e in ptr[p] as usize..ptr[p + 1] as usize {
                    orow[pos[e]] += av * vals[e];
                }
            }
        }
    });
    out
}

impl SparseDotOps for CpuStorage {
    fn csr_dense(&self, x: Csr<'_>, w: &Self, n: usize) -> Result<Self> {
        crate::cpu::half::via_f32!(v = self, ww = w => v.csr_dense(x, ww, n));
        let (nnz, ptr, idx) = parts(&x);
        let m = x.shape[0];
        Ok(float_dispatch!(self.dtype(), "dot", T => {
            let vals = values::<T>("dot", self, &x, nnz)?;
            let ws = typed::<T>("dot", self, w)?;
            T::into_buffer(csr_dense_typed(m, n, ws, ptr, idx, vals))
        }))
    }

    fn csr_t_dense(&self, x: Csr<'_>, g: &Self, n: usize, groups: &ColumnGroups) -> Result<Self> {
        crate::cpu::half::via_f32!(v = self, gg = g => v.csr_t_dense(x, gg, n, groups));
        let (nnz, _, _) = parts(&x);
        Ok(float_dispatch!(self.dtype(), "dot", T => {
            let gs = typed::<T>("dot", self, g)?;
            let vals = Some(values::<T>("dot", self, &x, nnz)?);
            T::into_buffer(segment_sum_grouped(&groups.starts, &groups.order, &groups.rows, vals, gs, n))
        }))
    }

    fn csr_rsp(&self, x: Csr<'_>, w_data: &Self, w_rows: &Arc<Vec<i64>>, n: usize) -> Result<Self> {
        crate::cpu::half::via_f32!(v = self, ww = w_data => v.csr_rsp(x, ww, w_rows, n));
        let (nnz, ptr, idx) = parts(&x);
        let m = x.shape[0];
        Ok(float_dispatch!(self.dtype(), "dot", T => {
            let vals = values::<T>("dot", self, &x, nnz)?;
            let ws = typed::<T>("dot", self, w_data)?;
            let mut out = vec![T::zero(); m * n];
            if n > 0 {
                // A non-zero at column j meets stored row j of the weight, if any (binary
                // search in the sorted row ids).
                for_each_row(&mut out, n, 8, nnz * n, |r, orow| {
                    for p in ptr[r] as usize..ptr[r + 1] as usize {
                        if let Ok(q) = w_rows.binary_search(&idx[p]) {
                            axpy(orow, vals[p], &ws[q * n..(q + 1) * n]);
                        }
                    }
                });
            }
            T::into_buffer(out)
        }))
    }

    fn dense_csr(&self, x: Csr<'_>, a: &Self, m: usize, tb: bool) -> Result<Self> {
        crate::cpu::half::via_f32!(v = self, aa = a => v.dense_csr(x, aa, m, tb));
        let (nnz, ptr, idx) = parts(&x);
        let [cr, cc] = x.shape;
        let (k, n) = if tb { (cc, cr) } else { (cr, cc) };
        Ok(float_dispatch!(self.dtype(), "dot", T => {
            let vals = values::<T>("dot", self, &x, nnz)?;
            let xs = T::slice(a).ok_or_else(|| Error::dtype_mismatch("dot", a.dtype(), self.dtype()))?;
            T::into_buffer(dense_csr_typed(m, n, k, cr, xs, ptr, idx, vals, tb))
        }))
    }

    fn dense_csr_to_csr(
        &self,
        x: Csr<'_>,
        a: &Self,
        m: usize,
        ta: bool,
    ) -> Result<(Arc<Vec<i64>>, Arc<Vec<i64>>, Self)> {
        crate::cpu::half::via_f32!(v = self, aa = a => v.dense_csr_to_csr(x, aa, m, ta));
        const OP: &str = "dot";
        let (nnz, ptr, idx) = parts(&x);
        let k = x.shape[0];
        // The result's columns: those present in x, sorted (every row stores all of them, as
        // MXNet's dot(dense, csr) = csr does).
        let mut cols = idx.to_vec();
        cols.sort_unstable();
        cols.dedup();
        let s = cols.len();
        // Each non-zero's place among them: found by binary search, so always `< s`, and the
        // writes below stay inside a row whatever the column ids hold.
        let pos: Vec<usize> = idx
            .iter()
            .map(|j| cols.binary_search(j).unwrap_or(0))
            .collect();
        let size = m
            .checked_mul(s)
            .ok_or_else(|| Error::shape(OP, format!("{m} x {s} values overflow usize")))?;
        let values = float_dispatch!(self.dtype(), OP, T => {
            let vals = values::<T>(OP, self, &x, nnz)?;
            let xs = T::slice(a).ok_or_else(|| Error::dtype_mismatch(OP, a.dtype(), self.dtype()))?;
            if xs.len() != m * k {
                return Err(Error::shape(
                    OP,
                    format!("dense operand of {} values, {m} x {k} expected", xs.len()),
                ));
            }
            T::into_buffer(dense_csr_to_csr_typed(m, k, s, xs, ptr, &pos, vals, ta))
        });
        let indptr: Vec<i64> = (0..=m).map(|i| (i * s) as i64).collect();
        let mut indices = Vec::with_capacity(size);
        for _ in 0..m {
            indices.extend_from_slice(&cols);
        }
        Ok((Arc::new(indptr), Arc::new(indices), values))
    }

    fn csr_dense_t(&self, x: Csr<'_>, w: &Self, units: usize) -> Result<Self> {
        crate::cpu::half::via_f32!(v = self, ww = w => v.csr_dense_t(x, ww, units));
        const OP: &str = "dot_csr_dense_t";
        let (nnz, ptr, idx) = parts(&x);
        let [rows, feats] = x.shape;
        Ok(float_dispatch!(w.dtype(), OP, T => {
            let wv = T::slice(w).unwrap();
            let vals = typed::<T>(OP, w, self)?;
            let vals = &vals[x.offset..x.offset + nnz];
            let mut out = vec![0.0 as T; rows * units];
            csr_dense_t_rows(&mut out, wv, feats, units, ptr, idx, vals);
            T::into_buffer(out)
        }))
    }

    fn csr_dense_t_into(&self, x: Csr<'_>, w: &Self, units: usize, out: &mut Self) -> Result<()> {
        const OP: &str = "dot_csr_dense_t";
        let (nnz, ptr, idx) = parts(&x);
        let [rows, feats] = x.shape;
        let have = out.dtype();
        float_dispatch!(w.dtype(), OP, T => {
            let wv = T::slice(w).unwrap();
            let vals = typed::<T>(OP, w, self)?;
            let vals = &vals[x.offset..x.offset + nnz];
            let o = out
                .writable::<T>(OP)?
                .ok_or_else(|| Error::dtype_mismatch(OP, w.dtype(), have))?;
            if o.len() != rows * units {
                return Err(Error::shape(
                    OP,
                    format!("output buffer holds {} elements, the result {}", o.len(), rows * units),
                ));
            }
            o.fill(0.0 as T);
            csr_dense_t_rows(o, wv, feats, units, ptr, idx, vals)
        });
        Ok(())
    }

    fn csr_dense_t_grad(&self, x: Csr<'_>, g: &Self, units: usize) -> Result<Self> {
        crate::cpu::half::via_f32!(v = self, gg = g => v.csr_dense_t_grad(x, gg, units));
        const OP: &str = "dot_csr_dense_t backward";
        let (nnz, ptr, idx) = parts(&x);
        let [rows, feats] = x.shape;
        Ok(float_dispatch!(g.dtype(), OP, T => {
            let gv = T::slice(g).unwrap();
            let vals = T::slice(self)
                .map(|s| &s[x.offset..x.offset + nnz])
                .ok_or_else(|| Error::dtype(OP, "csr and gradient dtypes differ"))?;
            // Recycled from the previous step's gradient when there is one (see core's
            // `recycle`): fresh 512 MB every step cost a page fault per 2 MB page.
            let mut data: Vec<T> = crate::recycle::zeroed_vec(units * feats);
            for r in 0..rows {
                for p in ptr[r] as usize..ptr[r + 1] as usize {
                    let (col, v) = (idx[p] as usize, vals[p]);
                    for u in 0..units {
                        data[u * feats + col] += v * gv[r * units + u];
                    }
                }
            }
            T::into_buffer(data)
        }))
    }

    fn gather_rows(&self, ids: &Arc<Vec<i64>>, dim: usize) -> Result<Self> {
        let ids: &[i64] = ids;
        Ok(with_buffer!(self, tv => {
            let total = ids.len() * dim;
            let out = if dim > 0 && total >= GATHER_PAR_MIN && rayon::current_num_threads() > 1 {
                let mut out = vec![Default::default(); total];
                out.par_chunks_mut(dim).with_min_len((4096 / dim).max(1)).zip(ids.par_iter()).for_each(|(o, &i)| {
                    let s = i as usize * dim;
                    o.copy_from_slice(&tv[s..s + dim]);
                });
                out
            } else {
                // One thread: the rows appended to an unzeroed vector (zeroing it first was a
                // second pass over the output), each row asked for a few rows ahead: the rows
                // lie at random places of a large table, so each is a cache (and often a TLB)
                // miss the copy would otherwise wait for.
                let mut out = Vec::with_capacity(total);
                for (k, &i) in ids.iter().enumerate() {
                    if let Some(&a) = ids.get(k + PREFETCH_AHEAD) {
                        let a = a as usize * dim;
                        if let Some(row) = tv.get(a..a + dim) {
                            crate::cpu::rows::prefetch_row(row);
                        }
                    }
                    let s = i as usize * dim;
                    out.extend_from_slice(&tv[s..s + dim]);
                }
                out
            };
            HostElement::into_buffer(out)
        }))
    }

    fn segment_sum(&self, ids: &Arc<Vec<i64>>, dim: usize) -> Result<(Arc<Vec<i64>>, Self)> {
        crate::cpu::half::via_f32!(v = self => v.segment_sum(ids, dim));
        let rows: Vec<usize> = (0..ids.len()).collect();
        Ok(float_dispatch!(self.dtype(), "embedding backward", T => {
            let (uniq, data) = segment_sum_rows::<T>(&ids[..], &rows, None, T::slice(self).unwrap(), dim);
            (Arc::new(uniq), T::into_buffer(data))
        }))
    }

    fn to_ids(&self, op: &'static str, bound: usize) -> Result<Arc<Vec<i64>>> {
        let ids: Arc<Vec<i64>> = match self {
            // Ids are one per looked-up row: copying them is cheap beside the rows they fetch.
            CpuStorage::I64(v) => Arc::new(v.to_vec()),
            CpuStorage::I32(v) => Arc::new(v.iter().map(|&x| x as i64).collect()),
            CpuStorage::U8(v) => Arc::new(v.iter().map(|&x| x as i64).collect()),
            other => with_buffer!(other, v => {
                let mut out = Vec::with_capacity(v.len());
                for &x in v.iter() {
                    let f = x.to_f64();
                    if f.fract() != 0.0 || !f.is_finite() {
                        return Err(Error::index(op, format!("id {f} is not a whole number")));
                    }
                    out.push(f as i64);
                }
                Arc::new(out)
            }),
        };
        if let Some(&bad) = ids.iter().find(|&&i| i < 0 || i as usize >= bound) {
            return Err(Error::index(
                op,
                format!("id {bad} out of range for {bound} rows"),
            ));
        }
        Ok(ids)
    }
}
