//! Sparse matrix products: csr x dense, csr^T x dense -> row_sparse, csr x row_sparse,
//! dense x csr (and x csr^T), with their backwards. Multi-threaded with rayon: the work and the
//! memory traffic are proportional to the non-zeros and the rows they touch, never to the
//! logical size of a huge weight matrix.

use std::mem::MaybeUninit;
use std::sync::Arc;

use num_traits::Zero;

use super::groups::ColumnGroups;
use crate::autograd::record_op;
use crate::cpu::gather::{csr_rows_f32, gather_sum_row, PREFETCH_AHEAD};
use crate::cpu::rows::axpy;
use crate::cpu::segment::{fill_rows, for_each_row, segment_sum_grouped, PAR_WORK};
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData, DenseData, RowSparseData};
use crate::ops::as_f32;
use crate::storage::{IndexStorage, Storage};
use crate::{float_dispatch, Float, NDArray, SType};

fn csr_of(a: &NDArray, op: &'static str) -> Result<CsrData> {
    match &*a.read() {
        ArrayData::Csr(c) => Ok(c.clone()),
        other => Err(Error::stype(
            op,
            format!("needs a csr operand, got {:?}", other.stype()),
        )),
    }
}

fn dense2(a: &NDArray, op: &'static str) -> Result<DenseData> {
    let d = a.dense_data()?;
    check_2d(&d, op)?;
    Ok(d)
}

/// `x^T . g` as row_sparse for a csr `x` and a dense (or densified) `g`, each read once under
/// its lock, borrowed, not cloned: the forward of `dot(x^T, g)` and the row_sparse weight
/// gradient of a csr product (once per layer per training step). Not recorded. `g` may be `x`
/// itself (`x^T . x`), read through the one guard.
fn csr_t_dense_of(x: &NDArray, g: &NDArray) -> Result<NDArray> {
    let xg = x.read();
    let gg = if x.same_array(g) {
        None
    } else {
        Some(g.read())
    };
    let gdata = gg.as_deref().unwrap_or(&xg);
    if xg.dtype() != gdata.dtype() {
        return Err(Error::dtype_mismatch("dot", xg.dtype(), gdata.dtype()));
    }
    let ArrayData::Csr(c) = &*xg else {
        return Err(Error::stype(
            "dot",
            format!("needs a csr operand, got {:?}", xg.stype()),
        ));
    };
    let gd = crate::ndarray::dense_cow(gdata)?;
    check_2d(&gd, "dot")?;
    csr_t_dense_rsp(c, &gd, x.cached_groups_for(c))
}

/// `a` as a dense array: itself when dense, else densified (no graph).
fn dense_of(a: &NDArray) -> Result<NDArray> {
    if a.stype() == SType::Dense {
        Ok(a.clone())
    } else {
        crate::sparse::cast_storage(a, SType::Dense)
    }
}

fn check_2d(d: &DenseData, op: &'static str) -> Result<()> {
    if d.shape.len() != 2 {
        return Err(Error::shape(
            op,
            format!("needs a 2-D operand, got shape {:?}", d.shape),
        ));
    }
    Ok(())
}

fn same_dtype(op: &'static str, a: &NDArray, b: &NDArray) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::dtype_mismatch(op, a.dtype(), b.dtype()));
    }
    Ok(())
}

/// `csr (m x k) . dense (k x n)` -> dense, no autograd. Parallel over output rows; each row is
/// the sum of the rows of `w` picked by its non-zeros, written once.
pub(crate) fn csr_dense_raw(c: &CsrData, w: &DenseData) -> Result<NDArray> {
    let [m, k] = c.shape;
    if w.shape[0] != k {
        return Err(Error::shape(
            "dot",
            format!(
                "csr {:?} x dense {:?}: inner dimensions differ",
                c.shape, w.shape
            ),
        ));
    }
    let n = w.shape[1];
    Ok(float_dispatch!(c.data.dtype(), "dot", T => {
        let (vals, idx, ptr) = (c.values::<T>().unwrap(), c.indices(), &c.indptr);
        let ws = w.buf.as_slice::<T>().ok_or_else(|| Error::dtype_mismatch("dot", c.data.dtype(), w.buf.dtype()))?;
        let work = idx.len() * n;
        if work < PAR_WORK {
            if let Some(out) = small_f32(m, n, ws, ptr, idx, vals) {
                return NDArray::from_vec(out, &[m, n]);
            }
        }
        let out = fill_rows(m, n, 8, work, |r, orow| {
            let s = ptr[r] as usize;
            gather_sum_row(
                orow,
                ws,
                ptr[r + 1] as usize - s,
                |q| (idx[s + q] as usize, vals[s + q]),
                // Prefetch across row ends too: a task handles consecutive rows.
                |q| idx.get(s + q + PREFETCH_AHEAD).map(|&j| j as usize),
            );
        });
        NDArray::from_vec(out, &[m, n])?
    }))
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

/// `csr^T (k x m) . dense (m x n)` -> row_sparse `k x n` over exactly the columns present in
/// the csr, no autograd and no dense intermediate. `groups`: the csr's column grouping when it
/// was prepared ahead (computed here otherwise).
pub(crate) fn csr_t_dense_rsp(
    c: &CsrData,
    g: &DenseData,
    groups: Option<Arc<ColumnGroups>>,
) -> Result<NDArray> {
    let [m, k] = c.shape;
    if g.shape[0] != m {
        return Err(Error::shape(
            "dot",
            format!(
                "csr^T {:?} x dense {:?}: inner dimensions differ",
                c.shape, g.shape
            ),
        ));
    }
    let n = g.shape[1];
    let computed;
    let gr = match &groups {
        Some(g) => &**g,
        None => {
            computed = ColumnGroups::compute(c);
            &computed
        }
    };
    Ok(float_dispatch!(c.data.dtype(), "dot", T => {
        let gs = g.buf.as_slice::<T>().ok_or_else(|| Error::dtype_mismatch("dot", c.data.dtype(), g.buf.dtype()))?;
        let vals = Some(c.values::<T>().unwrap());
        let data = segment_sum_grouped(&gr.starts, &gr.order, &gr.rows, vals, gs, n);
        NDArray::from_data(ArrayData::RowSparse(RowSparseData {
            shape: vec![k, n],
            indices: IndexStorage::from(gr.uniq.clone()),
            data: Storage::from_vec(data),
        }))
    }))
}

/// `csr (m x k) . row_sparse (k x n)` -> dense: a non-zero at column j meets stored row j of
/// the weight, if any (binary search in the sorted row ids).
pub(crate) fn csr_rsp_raw(c: &CsrData, w: &RowSparseData) -> Result<NDArray> {
    let [m, k] = c.shape;
    if w.shape.len() != 2 || w.shape[0] != k {
        return Err(Error::shape(
            "dot",
            format!(
                "csr {:?} x row_sparse {:?}: inner dimensions differ",
                c.shape, w.shape
            ),
        ));
    }
    let n = w.shape[1];
    Ok(float_dispatch!(c.data.dtype(), "dot", T => {
        let (vals, idx, ptr) = (c.values::<T>().unwrap(), c.indices(), &c.indptr);
        let ws = w.data.as_slice::<T>().ok_or_else(|| Error::dtype_mismatch("dot", c.data.dtype(), w.data.dtype()))?;
        let wid = &w.indices;
        let mut out = vec![T::zero(); m * n];
        if n > 0 {
            for_each_row(&mut out, n, 8, c.nnz() * n, |r, orow| {
                for p in ptr[r] as usize..ptr[r + 1] as usize {
                    if let Ok(q) = wid.binary_search(&idx[p]) {
                        axpy(orow, vals[p], &ws[q * n..(q + 1) * n]);
                    }
                }
            });
        }
        NDArray::from_vec(out, &[m, n])?
    }))
}

/// `dense (m x k) . csr (k x n)` (or `. csr^T` when `tb`, csr then `n x k`) -> dense `m x n`.
pub(crate) fn dense_csr_raw(a: &DenseData, c: &CsrData, tb: bool) -> Result<NDArray> {
    let (m, k) = (a.shape[0], a.shape[1]);
    let [cr, cc] = c.shape;
    let (ck, n) = if tb { (cc, cr) } else { (cr, cc) };
    if ck != k {
        return Err(Error::shape(
            "dot",
            format!(
                "dense {:?} x csr{} {:?}: inner dimensions differ",
                a.shape,
                if tb { "^T" } else { "" },
                c.shape
            ),
        ));
    }
    Ok(float_dispatch!(c.data.dtype(), "dot", T => {
        let (vals, idx, ptr) = (c.values::<T>().unwrap(), c.indices(), &c.indptr);
        let xs = a.buf.as_slice::<T>().ok_or_else(|| Error::dtype_mismatch("dot", a.buf.dtype(), c.data.dtype()))?;
        let mut out = vec![T::zero(); m * n];
        if n > 0 {
            let work = c.nnz() * m;
            for_each_row(&mut out, n, 4, work, |i, orow| {
                let arow = &xs[i * k..(i + 1) * k];
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
                                let j = idx[p] as usize;
                                orow[j] += av * vals[p];
                            }
                        }
                    }
                }
            });
        }
        NDArray::from_vec(out, &[m, n])?
    }))
}

/// `dot(x, w)` for a csr `x` and a dense `w` -> dense, recorded: the gradient of `w` is
/// `x^T . dy` as row_sparse over the columns present in `x` (computed without a dense
/// intermediate). `x` gets a dense gradient `dy . w^T` only if it requires one.
pub fn dot_csr_dense(x: &NDArray, w: &NDArray) -> Result<NDArray> {
    // Each operand is read once (dtype, storage and values from one guard; the weight in
    // place): lock round trips and buffer-handle clones are atomic operations, several per
    // step of a small batch otherwise.
    if x.same_array(w) {
        return Err(Error::stype(
            "dot",
            "needs a csr and a dense operand, got one array twice",
        ));
    }
    let out = {
        let (xg, wg) = (x.read(), w.read());
        if xg.dtype() != wg.dtype() {
            return Err(Error::dtype_mismatch("dot", xg.dtype(), wg.dtype()));
        }
        let ArrayData::Csr(c) = &*xg else {
            return Err(Error::stype(
                "dot",
                format!("needs a csr operand, got {:?}", xg.stype()),
            ));
        };
        let wd = crate::ndarray::dense_cow(&wg)?;
        check_2d(&wd, "dot")?;
        csr_dense_raw(c, &wd)?
    };
    // The backward is written with operators on the operands' handles (the batch's handle
    // keeps its prepared column grouping), so it runs wherever the operands live.
    let (xc, wc) = (x.clone(), w.clone());
    Ok(record_op("dot_csr_dense", out, &[x, w], move |g| {
        let gw = csr_t_dense_of(&xc, g)?;
        let gx = if xc.requires_grad() {
            Some(dense_of(g)?.dot_t(&wc, false, true)?)
        } else {
            None
        };
        Ok(vec![gx, Some(gw)])
    }))
}

/// `dot(x^T, g)` for a csr `x` (`m x k`) and a dense `g` (`m x n`): a `k x n` result holding
/// only the rows of the columns present in `x`, as row_sparse (`out_stype = RowSparse`) or
/// dense. Recorded: the gradient of `g` is `x . dy`.
pub fn dot_csr_t_dense(x: &NDArray, g: &NDArray, out_stype: SType) -> Result<NDArray> {
    let rsp = csr_t_dense_of(x, g)?;
    let out = match out_stype {
        SType::RowSparse => rsp,
        SType::Dense => super::cast_storage(&rsp, SType::Dense)?,
        SType::Csr => {
            return Err(Error::stype(
                "dot",
                "csr^T x dense can produce row_sparse or dense, not csr",
            ))
        }
    };
    let xc = x.clone();
    Ok(record_op("dot_csr_t_dense", out, &[x, g], move |dy| {
        // x . dy: the csr x row_sparse kernel for a row_sparse head gradient, csr x dense
        // otherwise.
        let gg = match dy.stype() {
            SType::RowSparse => dot_csr_rsp(&xc, dy)?,
            _ => dot_csr_dense(&xc, &dense_of(dy)?)?,
        };
        Ok(vec![None, Some(gg)])
    }))
}

/// `dot(x, w)` for a csr `x` and a row_sparse `w` -> dense; the gradient of `w` is row_sparse.
pub fn dot_csr_rsp(x: &NDArray, w: &NDArray) -> Result<NDArray> {
    same_dtype("dot", x, w)?;
    let c = csr_of(x, "dot")?;
    let r = match &*w.read() {
        ArrayData::RowSparse(r) => r.clone(),
        other => {
            return Err(Error::stype(
                "dot",
                format!("needs a row_sparse weight, got {:?}", other.stype()),
            ))
        }
    };
    let out = csr_rsp_raw(&c, &r)?;
    let xc = x.clone();
    Ok(record_op("dot_csr_rsp", out, &[x, w], move |g| {
        Ok(vec![None, Some(csr_t_dense_of(&xc, g)?)])
    }))
}

/// `dot(a, x)` (or `dot(a, x^T)` with `transpose_b`) for a dense `a` and a csr `x` -> dense.
/// The gradient of `a` is `dy . x^T` (or `dy . x`).
pub fn dot_dense_csr(a: &NDArray, x: &NDArray, transpose_b: bool) -> Result<NDArray> {
    same_dtype("dot", a, x)?;
    let c = csr_of(x, "dot")?;
    let out = dense_csr_raw(&dense2(a, "dot")?, &c, transpose_b)?;
    let xc = x.clone();
    Ok(record_op("dot_dense_csr", out, &[a, x], move |g| {
        Ok(vec![
            Some(dot_dense_csr(&dense_of(g)?, &xc, !transpose_b)?),
            None,
        ])
    }))
}

/// Storage-type dispatch for `dot_t`: `Ok(None)` means no sparse kernel for this combination.
/// `sa` and `sb` are the operands' storage types, as the caller read them.
pub(crate) fn dispatch(
    a: &NDArray,
    b: &NDArray,
    (sa, sb): (SType, SType),
    ta: bool,
    tb: bool,
) -> Result<Option<NDArray>> {
    use SType::*;
    Ok(match (sa, sb, ta, tb) {
        (Csr, Dense, false, false) => Some(dot_csr_dense(a, b)?),
        (Csr, Dense, true, false) => Some(dot_csr_t_dense(a, b, RowSparse)?),
        (Csr, RowSparse, false, false) => Some(dot_csr_rsp(a, b)?),
        (Dense, Csr, false, tb) => Some(dot_dense_csr(a, b, tb)?),
        _ => None,
    })
}
