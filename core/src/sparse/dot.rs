//! Sparse matrix products: csr x dense, csr^T x dense -> row_sparse, csr x row_sparse,
//! dense x csr -> csr (and dense x csr or x csr^T -> dense), with their backwards. These operators validate, dispatch and
//! record; the kernels are the storage's (`crate::storage::sparse_dot`; on the CPU
//! `crate::cpu::sparse_dot`, multi-threaded with rayon: the work and the memory traffic are
//! proportional to the non-zeros and the rows they touch, never to the logical size of a huge
//! weight matrix).

use std::sync::Arc;

use super::groups::ColumnGroups;
use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData, DenseData, RowSparseData};
use crate::storage::CsrIndex;
use crate::{Device, NDArray, SType};

/// The structure of `c` as the storage seam takes it.
pub(crate) fn csr_index(c: &CsrData) -> CsrIndex<'_> {
    CsrIndex {
        shape: c.shape,
        indptr: &c.indptr,
        indices: &c.indices,
        offset: c.offset,
    }
}

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
pub(crate) fn csr_t_dense_of(x: &NDArray, g: &NDArray) -> Result<NDArray> {
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

/// [`csr_t_dense_of`] written over `out`, a row_sparse result of an earlier call that nobody
/// else holds (a planned graph's weight gradient from its last step): the stored rows go into
/// `out`'s values buffer, viewed at this product's length, and the row ids are the grouping's.
/// `Ok(false)`, nothing written, where that cannot be done without a new buffer (operands not
/// f32 / f64 on the host, `out` not a row_sparse of the result's shape and dtype, or its buffer
/// shorter than this product's rows); the caller then makes a new result.
pub(crate) fn csr_t_dense_over(x: &NDArray, g: &NDArray, out: &NDArray) -> Result<bool> {
    if x.same_array(g) || out.same_array(x) || out.same_array(g) {
        return Ok(false);
    }
    let (xg, gg) = (x.read(), g.read());
    let (ArrayData::Csr(c), ArrayData::Dense(gd)) = (&*xg, &*gg) else {
        return Ok(false);
    };
    let dtype = gd.buf.dtype();
    if c.data.dtype() != dtype
        || !matches!(dtype, crate::DType::F32 | crate::DType::F64)
        || gd.buf.device() != Device::Cpu
        || c.data.device() != Device::Cpu
        || gd.shape.len() != 2
        || gd.shape[0] != c.shape[0]
    {
        return Ok(false);
    }
    let (k, n) = (c.shape[1], gd.shape[1]);
    let gr = match x.cached_groups_for(c) {
        Some(g) => g,
        None => Arc::new(ColumnGroups::compute(c)),
    };
    let mut w = out.write();
    let ArrayData::RowSparse(r) = &mut *w else {
        return Ok(false);
    };
    let len = gr.uniq.len() * n;
    if r.shape != [k, n]
        || r.data.dtype() != dtype
        || r.data.device() != Device::Cpu
        || !(r.data.len() == len || r.data.set_view_len(len))
    {
        return Ok(false);
    }
    c.data
        .csr_t_dense_into(&csr_index(c), &gd.buf, n, &gr, &mut r.data)?;
    r.indices = gr.uniq_on(Device::Cpu)?;
    Ok(true)
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

/// `csr (m x k) . dense (k x n)` -> dense, no autograd. On the CPU: parallel over output rows;
/// each row is the sum of the rows of `w` picked by its non-zeros, written once.
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
    NDArray::from_buffer(c.data.csr_dense(&csr_index(c), &w.buf, n)?, &[m, n])
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
    let data = c.data.csr_t_dense(&csr_index(c), &g.buf, n, gr)?;
    // The row ids go where the product is (a row_sparse array lives on one device).
    let indices = gr.uniq_on(data.device())?;
    Ok(NDArray::from_data(ArrayData::RowSparse(RowSparseData {
        shape: vec![k, n],
        indices,
        data,
    })))
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
    NDArray::from_buffer(
        c.data.csr_rsp(&csr_index(c), &w.data, &w.indices, n)?,
        &[m, n],
    )
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
    NDArray::from_buffer(c.data.dense_csr(&csr_index(c), &a.buf, m, tb)?, &[m, n])
}

/// `op(a) . c` for a dense `a` (`m x k`, or `k x m` transposed when `ta`) and a csr `c`
/// (`k x n`) -> csr `m x n` whose rows all store the columns present in `c`. Not recorded.
pub(crate) fn dense_csr_to_csr_raw(a: &DenseData, c: &CsrData, ta: bool) -> Result<NDArray> {
    let (m, k) = if ta {
        (a.shape[1], a.shape[0])
    } else {
        (a.shape[0], a.shape[1])
    };
    let [ck, n] = c.shape;
    if ck != k {
        return Err(Error::shape(
            "dot",
            format!(
                "dense{} {:?} x csr {:?}: inner dimensions differ",
                if ta { "^T" } else { "" },
                a.shape,
                c.shape
            ),
        ));
    }
    let (indptr, indices, data) = c.data.dense_csr_to_csr(&csr_index(c), &a.buf, m, ta)?;
    Ok(NDArray::from_data(ArrayData::Csr(CsrData {
        shape: [m, n],
        indptr,
        indices,
        data,
        offset: 0,
    })))
}

/// `dot(x, w)` for a csr `x` and a dense `w` -> dense, recorded: the gradient of `w` is
/// `x^T . dy` as row_sparse over the columns present in `x` (computed without a dense
/// intermediate). `x` gets the dense gradient `dy . w^T` when it is part of the graph (a leaf
/// with a gradient attached or the output of a recorded operator, decided when the product is
/// recorded): dense by design, as `dy` and `w` are dense.
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
    // Whether x needs a gradient is decided now: during backward an intermediate x has
    // already handed its node to the engine and no longer looks like part of the graph.
    let need_x = x.requires_grad();
    let (xc, wc) = (x.clone(), w.clone());
    Ok(record_op("dot_csr_dense", out, &[x, w], move |g| {
        let gw = csr_t_dense_of(&xc, g)?;
        let gx = if need_x {
            Some(dense_of(g)?.dot_t(&wc, false, true)?)
        } else {
            None
        };
        Ok(vec![gx, Some(gw)])
    }))
}

/// `dot(x^T, g)` for a csr `x` (`m x k`) and a dense `g` (`m x n`): a `k x n` result holding
/// only the rows of the columns present in `x`, as row_sparse (`out_stype = RowSparse`) or
/// dense. Recorded: the gradient of `g` is `x . dy`; `x`, when it is part of the graph, gets
/// the dense gradient `g . dy^T` (dense by design for a dense `dy`; a row_sparse `dy` is
/// densified for it, with the fallback warning).
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
    let need_x = x.requires_grad();
    let (xc, gc) = (x.clone(), g.clone());
    Ok(record_op("dot_csr_t_dense", out, &[x, g], move |dy| {
        // x . dy: the csr x row_sparse kernel for a row_sparse head gradient, csr x dense
        // otherwise.
        let gg = match dy.stype() {
            SType::RowSparse => dot_csr_rsp(&xc, dy)?,
            _ => dot_csr_dense(&xc, &dense_of(dy)?)?,
        };
        let gx = if need_x {
            if dy.stype() != SType::Dense {
                super::fallback("dot_csr_t_dense", &[SType::Csr, dy.stype()])?;
            }
            Some(dense_of(&gc)?.dot_t(&dense_of(dy)?, false, true)?)
        } else {
            None
        };
        Ok(vec![gx, Some(gg)])
    }))
}

/// `dot(x, w)` for a csr `x` and a row_sparse `w` -> dense; the gradient of `w` is row_sparse.
/// `x`, when it is part of the graph, gets the dense gradient `dy . w^T` (`w` densified for
/// it, with the fallback warning).
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
    let need_x = x.requires_grad();
    let (xc, wc) = (x.clone(), w.clone());
    Ok(record_op("dot_csr_rsp", out, &[x, w], move |g| {
        let gx = if need_x {
            super::fallback("dot_csr_rsp", &[SType::Csr, SType::RowSparse])?;
            Some(dense_of(g)?.dot_t(&dense_of(&wc)?, false, true)?)
        } else {
            None
        };
        Ok(vec![gx, Some(csr_t_dense_of(&xc, g)?)])
    }))
}

/// `dot(a, x)` (or `dot(a, x^T)` with `transpose_b`) for a dense `a` and a csr `x` -> dense:
/// MXNet's `dot(default, csr, forward_stype='default')`; `dot` itself gives this only with
/// `transpose_b` (without, it is [`dot_dense_csr_to_csr`], as in MXNet). The gradient of `a`
/// is `dy . x^T` (or `dy . x`); `x`, when it is part of the graph, gets the dense gradient
/// `a^T . dy` (or `dy^T . a`), dense by design.
pub fn dot_dense_csr(a: &NDArray, x: &NDArray, transpose_b: bool) -> Result<NDArray> {
    same_dtype("dot", a, x)?;
    let c = csr_of(x, "dot")?;
    let out = dense_csr_raw(&dense2(a, "dot")?, &c, transpose_b)?;
    let need_x = x.requires_grad();
    let (ac, xc) = (a.clone(), x.clone());
    Ok(record_op("dot_dense_csr", out, &[a, x], move |g| {
        let gd = dense_of(g)?;
        let gx = match (need_x, transpose_b) {
            (false, _) => None,
            (true, false) => Some(ac.dot_t(&gd, true, false)?),
            (true, true) => Some(gd.dot_t(&ac, true, false)?),
        };
        Ok(vec![Some(dot_dense_csr(&gd, &xc, !transpose_b)?), gx])
    }))
}

/// `dot(a, x)` for a dense `a` (`m x k`) and a csr `x` (`k x n`) -> csr `m x n`, MXNet's
/// `dot(default, csr) = csr` and what `dot` / `matmul` return for these storage types: column
/// `j` of the product can be non-zero only where `x` has an entry in column `j`, so every row
/// stores the same columns, those present in `x` (MXNet's layout). Worth it when `x` touches
/// few of its columns; [`dot_dense_csr`] gives the dense product.
///
/// Recorded. With head gradient `dy` (csr over the output's columns, or dense): `a` gets the
/// dense `dy . x^T`; `x`, when it is part of the graph, gets `a^T . dy`: csr over `dy`'s
/// columns for a csr `dy` (exact: `dy` is zero elsewhere), dense by design for a dense `dy`.
///
/// ```
/// use sparrow_core::{NDArray, SType};
/// let a = NDArray::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
/// // x = [[0, 5, 0], [0, 0, 6]]: only columns 1 and 2 hold entries.
/// let x = NDArray::csr_from_parts(vec![5.0f32, 6.0], vec![1, 2], vec![0, 1, 2], [2, 3]).unwrap();
/// let y = a.dot(&x).unwrap();
/// assert_eq!(y.stype(), SType::Csr);
/// assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 5.0, 12.0, 0.0, 15.0, 24.0]);
/// ```
pub fn dot_dense_csr_to_csr(a: &NDArray, x: &NDArray) -> Result<NDArray> {
    same_dtype("dot", a, x)?;
    let c = csr_of(x, "dot")?;
    let out = dense_csr_to_csr_raw(&dense2(a, "dot")?, &c, false)?;
    let need_x = x.requires_grad();
    let (ac, xc) = (a.clone(), x.clone());
    Ok(record_op("dot_dense_csr_to_csr", out, &[a, x], move |g| {
        // dy . x^T: a csr dy is made dense for it (the product is dense m x k either way).
        let ga = dot_dense_csr(&dense_of(g)?, &xc, true)?;
        let gx = if !need_x {
            None
        } else if g.stype() == SType::Csr {
            let gc = csr_of(g, "dot")?;
            Some(dense_csr_to_csr_raw(&dense2(&ac, "dot")?, &gc, true)?)
        } else {
            Some(ac.dot_t(&dense_of(g)?, true, false)?)
        };
        Ok(vec![Some(ga), gx])
    }))
}

/// `dot(a, b)` for two csr operands -> csr (the sparse product kernel; on the CPU Gustavson's
/// row-by-row algorithm, rows in parallel). Recorded: with a dense head gradient `dy` both
/// operands get the exact dense gradients `dy . b^T` and `a^T . dy` (dense by design); a
/// sparse `dy` is densified for them (with the fallback warning, an error in strict mode).
pub fn dot_csr_csr(a: &NDArray, b: &NDArray) -> Result<NDArray> {
    same_dtype("dot", a, b)?;
    let (ca, cb) = (csr_of(a, "dot")?, csr_of(b, "dot")?);
    let ([m, k], [k2, n]) = (ca.shape, cb.shape);
    if k != k2 {
        return Err(Error::shape(
            "dot",
            format!(
                "csr {:?} . csr {:?}: inner dimensions differ",
                ca.shape, cb.shape
            ),
        ));
    }
    if !ca.data.dtype().is_float() {
        return Err(Error::dtype(
            "dot",
            format!(
                "needs float32 or float64 arrays, got {}",
                ca.data.dtype().name()
            ),
        ));
    }
    let p = ca
        .data
        .csr_product(ca.sparse_layout(), &cb.data, cb.sparse_layout())?;
    let Some(indptr) = p.indptr else {
        return Err(Error::stype("dot", "csr product without row pointers"));
    };
    let out = NDArray::from_data(ArrayData::Csr(CsrData {
        shape: [m, n],
        indptr,
        indices: p.indices,
        data: p.values,
        offset: 0,
    }));
    let (need_a, need_b) = (a.requires_grad(), b.requires_grad());
    let (ac, bc) = (a.clone(), b.clone());
    Ok(record_op("dot_csr_csr", out, &[a, b], move |g| {
        if g.stype() != SType::Dense {
            super::fallback("dot_csr_csr", &[SType::Csr, SType::Csr, g.stype()])?;
        }
        let gd = dense_of(g)?;
        let ga = if need_a {
            Some(dot_dense_csr(&gd, &bc, true)?)
        } else {
            None
        };
        let gb = if need_b {
            Some(dot_csr_t_dense(&ac, &gd, SType::Dense)?)
        } else {
            None
        };
        Ok(vec![ga, gb])
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
        // MXNet: dot(default, csr) = csr, dot(default, csr^T) = default.
        (Dense, Csr, false, false) => Some(dot_dense_csr_to_csr(a, b)?),
        (Dense, Csr, false, true) => Some(dot_dense_csr(a, b, true)?),
        (Csr, Csr, false, false) => Some(dot_csr_csr(a, b)?),
        _ => None,
    })
}
