//! Sparse op sparse and sparse op dense on a CUDA device (`kernels/sparse.cu`): the merges of
//! two csr or two row_sparse arrays (union or intersection of the stored entries, and the
//! gradient accumulation of row_sparse gradients), the stored values combined with a dense
//! operand, and sparse +- dense into a dense result.
//!
//! The structure of a result (its row ids, or row pointers and column ids) and, for every
//! result entry, where each operand stores it, are worked out on the host from the index
//! arrays' host copies (the same sorted merges as the CPU's); one kernel then combines the
//! values by those positions. The positions travel in one upload per call.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, PushKernelArg};

// `merge_one` in `sparse.cu` numbers the binary ops as the elementwise kernels do.
use super::elementwise::{binary_code as code, float_error, float_only, kname, same_dtype, typed};
use super::index::CudaIndex;
use super::launch::{driver_err, grid};
use super::storage::{with_cuda, CudaElement, CudaStorage};
use crate::dtype::SType;
use crate::error::{Error, Result};
use crate::ops::BinaryOp;
use crate::storage::{Merge, SparseLayout, SparseParts, WithDense};

type Layout<'a> = SparseLayout<'a, CudaIndex>;

/// A float operand, or the backend's float-only error.
fn check_float(op: &'static str, x: &CudaStorage) -> Result<()> {
    if x.dtype().is_float() {
        Ok(())
    } else {
        Err(float_error(op, x))
    }
}

/// Host positions as one device array.
fn upload(x: &CudaStorage, op: &'static str, v: &[i64]) -> Result<CudaSlice<i64>> {
    if v.is_empty() {
        return CudaStorage::alloc::<i64>(&x.dev, op, 0);
    }
    x.dev.stream.clone_htod(v).map_err(driver_err(op))
}

/// A csr layout's parts on the host, checked to fit `values` stored values.
struct HostCsr<'a> {
    rows: usize,
    cols: usize,
    indptr: &'a [i64],
    idx: &'a [i64],
    offset: usize,
}

fn host_csr<'a>(op: &'static str, l: &Layout<'a>, values: usize) -> Result<Option<HostCsr<'a>>> {
    let SparseLayout::Csr {
        shape: [rows, cols],
        indptr,
        indices,
        offset,
    } = *l
    else {
        return Ok(None);
    };
    let (p, idx) = (indptr.host.as_slice(), indices.host.as_slice());
    let nnz = p.last().copied().unwrap_or(0);
    let fits = p.len() == rows + 1
        && p.first() == Some(&0)
        && p.windows(2).all(|w| w[0] <= w[1])
        && nnz >= 0
        && offset + nnz as usize <= idx.len()
        && offset + nnz as usize <= values
        && idx[offset..offset + nnz as usize]
            .iter()
            .all(|&c| c >= 0 && (c as usize) < cols);
    if !fits {
        return Err(Error::format(
            SType::Csr,
            format!("{op}: row pointers or column ids do not fit the stored values"),
        ));
    }
    Ok(Some(HostCsr {
        rows,
        cols,
        indptr: p,
        idx,
        offset,
    }))
}

/// A row_sparse layout's row ids, row length and element count, checked against `values`
/// stored values.
type HostRsp<'a> = (&'a [i64], usize, usize);

fn host_rsp<'a>(op: &'static str, l: &Layout<'a>, values: usize) -> Result<Option<HostRsp<'a>>> {
    let SparseLayout::RowSparse { shape, indices } = *l else {
        return Ok(None);
    };
    let rows = shape.first().copied().unwrap_or(0);
    let width: usize = shape.iter().skip(1).product();
    let ids = indices.host.as_slice();
    if ids.len() * width != values || ids.iter().any(|&i| i < 0 || i as usize >= rows) {
        return Err(Error::format(
            SType::RowSparse,
            format!("{op}: row ids or values do not fit the shape"),
        ));
    }
    Ok(Some((ids, width, rows * width)))
}

/// Merge two sorted id lists: the union (or the intersection) into `out`, with each side's
/// position of every result id (`base + i`, or -1 where that side lacks it).
fn merge_sorted(
    (a, base_a): (&[i64], usize),
    (b, base_b): (&[i64], usize),
    union: bool,
    out: &mut Vec<i64>,
    pa: &mut Vec<i64>,
    pb: &mut Vec<i64>,
) {
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let x = a.get(i).copied().unwrap_or(i64::MAX);
        let y = b.get(j).copied().unwrap_or(i64::MAX);
        if x == y {
            out.push(x);
            pa.push((base_a + i) as i64);
            pb.push((base_b + j) as i64);
            i += 1;
            j += 1;
        } else if x < y {
            if union {
                out.push(x);
                pa.push((base_a + i) as i64);
                pb.push(-1);
            }
            i += 1;
        } else {
            if union {
                out.push(y);
                pa.push(-1);
                pb.push((base_b + j) as i64);
            }
            j += 1;
        }
    }
}

/// `out[k, j] = a[pa[k], j] op b[pb[k], j]` on the device (`merge_*`).
fn combine_t<T: CudaElement>(
    a: &CudaStorage,
    b: &CudaStorage,
    (pa, pb): (&[i64], &[i64]),
    width: usize,
    op: i32,
) -> Result<CudaStorage> {
    const OP: &str = "sparse merge";
    let (av, bv) = (typed::<T>(OP, a)?, typed::<T>(OP, b)?);
    let items = pa.len();
    let mut out = CudaStorage::alloc::<T>(&a.dev, OP, items * width)?;
    if items * width > 0 {
        let packed: Vec<i64> = pa.iter().chain(pb).copied().collect();
        let pos = upload(a, OP, &packed)?;
        let f = a.dev.function("sparse.cu", kname("merge", T::SUFFIX))?;
        let (i64_, w64) = (items as u64, width as u64);
        let mut l = a.dev.stream.launch_builder(&f);
        let (pa_dev, pb_dev) = (pos.slice(..items), pos.slice(items..));
        l.arg(av).arg(&pa_dev).arg(bv).arg(&pb_dev);
        l.arg(&mut out).arg(&i64_).arg(&w64).arg(&op);
        // SAFETY: every position is -1 or a stored row (entry) of its operand, whose values
        // hold `width` each (checked by `host_rsp` / `host_csr`); out holds items x width.
        unsafe { l.launch(grid(items * width)) }.map_err(driver_err(OP))?;
    }
    Ok(a.with(out))
}

/// See `SparseOps::merge`.
pub(super) fn merge(
    a: &CudaStorage,
    la: Layout<'_>,
    b: &CudaStorage,
    lb: Layout<'_>,
    op: Merge,
) -> Result<SparseParts<CudaStorage, CudaIndex>> {
    const OP: &str = "sparse merge";
    same_dtype(OP, a, b)?;
    let (code, union) = match op {
        Merge::AddGrads => (0, true),
        Merge::Binary(
            o @ (BinaryOp::Add | BinaryOp::Sub | BinaryOp::Maximum | BinaryOp::Minimum),
        ) => {
            check_float(OP, a)?;
            (code(o), true)
        }
        Merge::Binary(BinaryOp::Mul) => {
            check_float(OP, a)?;
            (code(BinaryOp::Mul), false)
        }
        Merge::Binary(o) => {
            return Err(Error::arg(
                OP,
                format!("{} of two sparse arrays is not a merge", o.name()),
            ))
        }
    };
    let ordinal = a.dev.ordinal;
    let (mut ids, mut pa, mut pb) = (Vec::new(), Vec::new(), Vec::new());
    if let (Some((ai, wa, _)), Some((bi, wb, _))) =
        (host_rsp(OP, &la, a.len())?, host_rsp(OP, &lb, b.len())?)
    {
        if wa != wb {
            return Err(Error::shape(OP, format!("rows of {wa} and {wb} values")));
        }
        merge_sorted((ai, 0), (bi, 0), union, &mut ids, &mut pa, &mut pb);
        let values = with_cuda!(&a.buf, _s, T => combine_t::<T>(a, b, (&pa, &pb), wa, code))?;
        return Ok(SparseParts {
            indptr: None,
            indices: CudaIndex::upload(ordinal, Arc::new(ids))?,
            values,
        });
    }
    let (Some(ca), Some(cb)) = (host_csr(OP, &la, a.len())?, host_csr(OP, &lb, b.len())?) else {
        return Err(Error::stype(
            OP,
            "operands are not both csr or both row_sparse",
        ));
    };
    if ca.rows != cb.rows {
        return Err(Error::shape(
            OP,
            format!("{} rows and {} rows", ca.rows, cb.rows),
        ));
    }
    let mut indptr = Vec::with_capacity(ca.rows + 1);
    indptr.push(0i64);
    for r in 0..ca.rows {
        let (s, e) = (
            ca.offset + ca.indptr[r] as usize,
            ca.offset + ca.indptr[r + 1] as usize,
        );
        let (t, f) = (
            cb.offset + cb.indptr[r] as usize,
            cb.offset + cb.indptr[r + 1] as usize,
        );
        merge_sorted(
            (&ca.idx[s..e], s),
            (&cb.idx[t..f], t),
            union,
            &mut ids,
            &mut pa,
            &mut pb,
        );
        indptr.push(ids.len() as i64);
    }
    let values = with_cuda!(&a.buf, _s, T => combine_t::<T>(a, b, (&pa, &pb), 1, code))?;
    Ok(SparseParts {
        indptr: Some(CudaIndex::upload(ordinal, Arc::new(indptr))?),
        indices: CudaIndex::upload(ordinal, Arc::new(ids))?,
        values,
    })
}

/// Where in a dense operand each stored entry of `l` falls (`Mul`, `scatter`: the dense array
/// of the sparse one's shape; `AlongRows`: a vector over the columns; `AlongCols`: over the
/// rows), in units of `width` values, with the values' offset and the dense length expected.
struct Positions {
    pos: Vec<i64>,
    width: usize,
    offset: usize,
    dense_len: usize,
}

#[derive(Clone, Copy)]
enum Against {
    Whole,
    Columns,
    Rows,
}

fn positions(
    op: &'static str,
    l: &Layout<'_>,
    values: usize,
    against: Against,
) -> Result<Positions> {
    if let Some((ids, width, dense_len)) = host_rsp(op, l, values)? {
        if !matches!(against, Against::Whole) {
            return Err(Error::stype(
                op,
                "a row_sparse array broadcasts against its own shape only",
            ));
        }
        return Ok(Positions {
            pos: ids.to_vec(),
            width,
            offset: 0,
            dense_len,
        });
    }
    let Some(c) = host_csr(op, l, values)? else {
        return Err(Error::stype(op, "needs a csr or row_sparse array"));
    };
    let nnz = c.indptr[c.rows] as usize;
    let mut pos = Vec::with_capacity(nnz);
    for r in 0..c.rows {
        for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
            let col = c.idx[c.offset + p];
            pos.push(match against {
                Against::Whole => (r * c.cols) as i64 + col,
                Against::Columns => col,
                Against::Rows => r as i64,
            });
        }
    }
    let dense_len = match against {
        Against::Whole => c.rows * c.cols,
        Against::Columns => c.cols,
        Against::Rows => c.rows,
    };
    Ok(Positions {
        pos,
        width: 1,
        offset: c.offset,
        dense_len,
    })
}

/// `with_dense_*` or `scatter_*` over the positions: one launch per call (two for scatter).
fn dense_kernel_t<T: CudaElement>(
    s: &CudaStorage,
    d: &CudaStorage,
    p: &Positions,
    op: i32,
    scatter: Option<bool>,
) -> Result<CudaStorage> {
    const OP: &str = "sparse binary";
    let (sv, dv) = (typed::<T>(OP, s)?, typed::<T>(OP, d)?);
    if dv.len() != p.dense_len {
        return Err(Error::shape(
            OP,
            format!(
                "dense operand of {} values, {} expected",
                dv.len(),
                p.dense_len
            ),
        ));
    }
    let n = p.pos.len();
    let (n64, w64, off) = (n as u64, p.width as u64, p.offset as u64);
    let pos = upload(s, OP, &p.pos)?;
    let dev = &s.dev;
    let mut out;
    let sparse_left = match scatter {
        Some(left) => {
            out = CudaStorage::alloc::<T>(dev, OP, dv.len())?;
            let left = i32::from(left);
            if !dv.is_empty() {
                let f = dev.function("sparse.cu", kname("scatter_init", T::SUFFIX))?;
                let total = dv.len() as u64;
                let mut l = dev.stream.launch_builder(&f);
                l.arg(dv).arg(&mut out).arg(&total).arg(&op).arg(&left);
                // SAFETY: out and d hold `total` values each.
                unsafe { l.launch(grid(dv.len())) }.map_err(driver_err(OP))?;
            }
            left
        }
        None => {
            out = CudaStorage::alloc::<T>(dev, OP, n * p.width)?;
            1
        }
    };
    if n * p.width > 0 {
        let name = if scatter.is_some() {
            "scatter_dense"
        } else {
            "with_dense"
        };
        let f = dev.function("sparse.cu", kname(name, T::SUFFIX))?;
        let mut l = dev.stream.launch_builder(&f);
        l.arg(sv).arg(&off).arg(&pos).arg(dv).arg(&mut out);
        l.arg(&n64).arg(&w64).arg(&op).arg(&sparse_left);
        // SAFETY: `positions` checked the layout against the stored values (offset + n x width
        // of them) and built every position inside the dense operand, whose length was checked
        // above (out: n x width values, or the dense length when scattering).
        unsafe { l.launch(grid(n * p.width)) }.map_err(driver_err(OP))?;
    }
    Ok(s.with(out))
}

/// See `SparseOps::with_dense`.
pub(super) fn with_dense(
    s: &CudaStorage,
    l: Layout<'_>,
    d: &CudaStorage,
    op: WithDense,
) -> Result<CudaStorage> {
    const OP: &str = "sparse binary";
    same_dtype(OP, s, d)?;
    let (against, o) = match op {
        WithDense::Mul => (Against::Whole, BinaryOp::Mul),
        WithDense::AlongRows(o) => (Against::Columns, o),
        WithDense::AlongCols(o) => (Against::Rows, o),
    };
    let p = positions(OP, &l, s.len(), against)?;
    float_only!(s, OP, T => dense_kernel_t::<T>(s, d, &p, code(o), None))
}

/// See `SparseOps::scatter_dense`.
pub(super) fn scatter_dense(
    s: &CudaStorage,
    l: Layout<'_>,
    d: &CudaStorage,
    op: BinaryOp,
    sparse_left: bool,
) -> Result<CudaStorage> {
    same_dtype(op.name(), s, d)?;
    let p = positions(op.name(), &l, s.len(), Against::Whole)?;
    float_only!(s, op.name(), T => dense_kernel_t::<T>(s, d, &p, code(op), Some(sparse_left)))
}
