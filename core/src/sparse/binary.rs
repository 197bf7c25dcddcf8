//! Elementwise binary ops with sparse operands: rs +- rs -> rs, csr +- csr -> csr,
//! sparse +- dense -> dense, rs * rs and rs * dense -> rs, csr * dense -> csr, and csr times or
//! divided by a dense row / column vector -> csr. Other combinations return `None` (dense
//! fallback).

use std::sync::Arc;

use crate::autograd::record_op;
use crate::dtype::{Element, Float};
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData, DenseData, RowSparseData};
use crate::ops::{sum_to_shape, BinaryOp};
use crate::storage::{IndexStorage, Storage};
use crate::{float_dispatch, NDArray};

fn f<T: Float>(op: BinaryOp, a: T, b: T) -> T {
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        _ => a / b,
    }
}

/// rs (op) rs over the union (add/sub) or intersection (mul) of the stored rows.
fn rsp_rsp<T: Float>(op: BinaryOp, a: &RowSparseData, b: &RowSparseData) -> RowSparseData {
    let (av, bv) = (
        a.data.as_slice::<T>().unwrap(),
        b.data.as_slice::<T>().unwrap(),
    );
    let rl = a.row_len();
    let union = op != BinaryOp::Mul;
    let (mut i, mut j) = (0, 0);
    let mut idx = Vec::with_capacity(a.nnr() + b.nnr());
    let mut out: Vec<T> = Vec::with_capacity((a.nnr() + b.nnr()) * rl);
    let zero = vec![T::zero(); rl];
    while i < a.nnr() || j < b.nnr() {
        let ra = a.indices.get(i).copied().unwrap_or(i64::MAX);
        let rb = b.indices.get(j).copied().unwrap_or(i64::MAX);
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
    RowSparseData {
        shape: a.shape.clone(),
        indices: IndexStorage::from(idx),
        data: Storage::from_vec(out),
    }
}

/// csr +- csr -> csr, row by row merge of the sorted column indices.
fn csr_csr<T: Float>(op: BinaryOp, a: &CsrData, b: &CsrData) -> CsrData {
    let (av, bv) = (a.values::<T>().unwrap(), b.values::<T>().unwrap());
    let (ai, bi) = (a.indices(), b.indices());
    let mut indptr = Vec::with_capacity(a.shape[0] + 1);
    indptr.push(0i64);
    let mut idx = Vec::with_capacity(a.nnz() + b.nnz());
    let mut out: Vec<T> = Vec::with_capacity(a.nnz() + b.nnz());
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
                idx.push(ca);
                out.push(f(op, av[p], T::zero()));
                p += 1;
            } else {
                idx.push(cb);
                out.push(f(op, T::zero(), bv[q]));
                q += 1;
            }
        }
        indptr.push(idx.len() as i64);
    }
    CsrData {
        shape: a.shape,
        indptr: IndexStorage::from(indptr),
        indices: IndexStorage::from(idx),
        data: Storage::from_vec(out),
        offset: 0,
    }
}

/// Visit every stored entry of a sparse array as (flat dense position, value index).
#[allow(clippy::needless_range_loop)] // p indexes both the indices and the caller's values
fn for_each_stored(s: &ArrayData, mut visit: impl FnMut(usize, usize)) {
    match s {
        ArrayData::Csr(c) => {
            let idx = c.indices();
            for r in 0..c.shape[0] {
                for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
                    visit(r * c.shape[1] + idx[p] as usize, p);
                }
            }
        }
        ArrayData::RowSparse(r) => {
            let rl = r.row_len();
            for (k, &row) in r.indices.iter().enumerate() {
                for e in 0..rl {
                    visit(row as usize * rl + e, k * rl + e);
                }
            }
        }
        ArrayData::Dense(_) => {}
    }
}

fn stored_values<T: Element>(s: &ArrayData) -> &[T] {
    match s {
        ArrayData::Csr(c) => c.values::<T>().unwrap(),
        ArrayData::RowSparse(r) => r.data.as_slice::<T>().unwrap(),
        ArrayData::Dense(d) => d.buf.as_slice::<T>().unwrap(),
    }
}

/// sparse +- dense (either order) -> dense.
fn sparse_dense_add<T: Float>(
    op: BinaryOp,
    s: &ArrayData,
    d: &DenseData,
    sparse_left: bool,
) -> DenseData {
    let dv = d.buf.as_slice::<T>().unwrap();
    let sv = stored_values::<T>(s);
    let mut out: Vec<T> = if sparse_left {
        crate::ops::map_slice(dv, |x| f(op, T::zero(), x))
    } else {
        dv.to_vec()
    };
    for_each_stored(s, |pos, k| {
        out[pos] = if sparse_left {
            f(op, sv[k], dv[pos])
        } else {
            f(op, dv[pos], sv[k])
        };
    });
    DenseData {
        shape: d.shape.clone(),
        buf: Storage::from_vec(out),
    }
}

/// sparse * dense (same shape) -> sparse of the same structure.
fn sparse_mul_dense<T: Float>(s: &ArrayData, d: &DenseData) -> ArrayData {
    let dv = d.buf.as_slice::<T>().unwrap();
    let sv = stored_values::<T>(s);
    let mut out = vec![T::zero(); sv.len()];
    for_each_stored(s, |pos, k| out[k] = sv[k] * dv[pos]);
    with_values(s, out)
}

/// The same sparse structure with new stored values (`vals` aligned with `stored_values`).
fn with_values<T: Element>(s: &ArrayData, vals: Vec<T>) -> ArrayData {
    match s {
        ArrayData::Csr(c) => ArrayData::Csr(CsrData {
            shape: c.shape,
            indptr: c.indptr.clone(),
            indices: if c.offset == 0 {
                c.indices.clone()
            } else {
                IndexStorage::from(Arc::new(c.indices().to_vec()))
            },
            data: Storage::from_vec(vals),
            offset: 0,
        }),
        ArrayData::RowSparse(r) => ArrayData::RowSparse(RowSparseData {
            shape: r.shape.clone(),
            indices: r.indices.clone(),
            data: Storage::from_vec(vals),
        }),
        ArrayData::Dense(d) => ArrayData::Dense(DenseData {
            shape: d.shape.clone(),
            buf: Storage::from_vec(vals),
        }),
    }
}

/// csr (op) a dense vector broadcast along rows (`[n]` or `[1, n]`) or columns (`[m, 1]`).
fn csr_bcast<T: Float>(op: BinaryOp, c: &CsrData, v: &DenseData, along_rows: bool) -> ArrayData {
    let vv = v.buf.as_slice::<T>().unwrap();
    let sv = c.values::<T>().unwrap();
    let idx = c.indices();
    let mut out = vec![T::zero(); sv.len()];
    for r in 0..c.shape[0] {
        for p in c.indptr[r] as usize..c.indptr[r + 1] as usize {
            let b = if along_rows {
                vv[idx[p] as usize]
            } else {
                vv[r]
            };
            out[p] = f(op, sv[p], b);
        }
    }
    with_values(&ArrayData::Csr(c.clone()), out)
}

/// The sparse kernel of `op(a, b)`, if there is one for these storage types and shapes.
fn raw(op: BinaryOp, da: &ArrayData, db: &ArrayData) -> Result<Option<ArrayData>> {
    use ArrayData::*;
    use BinaryOp::*;
    let same = da.shape() == db.shape();
    let dt = da.dtype();
    Ok(float_dispatch!(dt, "binary", T => match (op, da, db) {
        (Add | Sub | Mul, RowSparse(a), RowSparse(b)) if same => Some(RowSparse(rsp_rsp::<T>(op, a, b))),
        (Add | Sub, Csr(a), Csr(b)) if same => Some(Csr(csr_csr::<T>(op, a, b))),
        (Add | Sub, Csr(_) | RowSparse(_), Dense(d)) if same => Some(Dense(sparse_dense_add::<T>(op, da, d, true))),
        (Add | Sub, Dense(d), Csr(_) | RowSparse(_)) if same => Some(Dense(sparse_dense_add::<T>(op, db, d, false))),
        (Mul, Csr(_) | RowSparse(_), Dense(d)) if same => Some(sparse_mul_dense::<T>(da, d)),
        (Mul, Dense(d), Csr(_) | RowSparse(_)) if same => Some(sparse_mul_dense::<T>(db, d)),
        (Mul | Div, Csr(c), Dense(v)) => {
            let [m, n] = c.shape;
            match v.shape.as_slice() {
                [k] | [1, k] if *k == n => Some(csr_bcast::<T>(op, c, v, true)),
                [k, 1] if *k == m => Some(csr_bcast::<T>(op, c, v, false)),
                _ => None,
            }
        }
        _ => None,
    }))
}

/// Sparse dispatch for a binary op, recorded. `Ok(None)`: no sparse kernel.
pub(crate) fn binary(op: BinaryOp, a: &NDArray, b: &NDArray) -> Result<Option<NDArray>> {
    let (da, db) = (a.data(), b.data());
    if da.dtype() != db.dtype() {
        return Err(Error::dtype_mismatch("binary", da.dtype(), db.dtype()));
    }
    let Some(out) = raw(op, &da, &db)? else {
        return Ok(None);
    };
    let out = NDArray::from_data(out);
    let (ac, bc) = (a.clone(), b.clone());
    let (ash, bsh) = (a.shape(), b.shape());
    Ok(Some(record_op("sparse_binary", out, &[a, b], move |g| {
        let (ga, gb) = match op {
            BinaryOp::Add => (g.clone(), g.clone()),
            BinaryOp::Sub => (g.clone(), g.neg()?),
            BinaryOp::Mul => (g.mul(&bc)?, g.mul(&ac)?),
            _ => {
                let bd = bc.tostype(crate::SType::Dense)?;
                (g.div(&bd)?, g.mul(&ac)?.div(&bd.square()?)?.neg()?)
            }
        };
        Ok(vec![
            Some(sum_to_shape(&ga, &ash)?),
            Some(sum_to_shape(&gb, &bsh)?),
        ])
    })))
}
