//! Elementwise binary ops with sparse operands: rs op rs -> rs and csr op csr -> csr for op in
//! add, sub, mul, maximum, minimum (zero-preserving: the union of the stored entries, the
//! intersection for mul),
//! sparse +- dense -> dense, rs * rs and rs * dense -> rs, csr * dense -> csr, and csr times or
//! divided by a dense row / column vector -> csr. Other combinations return `None` (dense
//! fallback).

use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::ndarray::{ArrayData, CsrData, DenseData, RowSparseData};
use crate::ops::{sum_to_shape, BinaryOp};
use crate::storage::{Merge, Storage, WithDense};
use crate::NDArray;

/// The same sparse structure with new stored values (`vals` aligned with the stored values).
pub(super) fn with_values(s: &ArrayData, vals: Storage) -> Result<ArrayData> {
    Ok(match s {
        ArrayData::Csr(c) => ArrayData::Csr(CsrData {
            shape: c.shape,
            indptr: c.indptr.clone(),
            indices: if c.offset == 0 {
                c.indices.clone()
            } else {
                c.indices.index_range(c.offset..c.offset + c.nnz())?
            },
            data: vals,
            offset: 0,
        }),
        ArrayData::RowSparse(r) => ArrayData::RowSparse(RowSparseData {
            shape: r.shape.clone(),
            indices: r.indices.clone(),
            data: vals,
        }),
        ArrayData::Dense(d) => ArrayData::Dense(DenseData {
            shape: d.shape.clone(),
            buf: vals,
        }),
    })
}

/// `s op d` for `Add` / `Sub` with a sparse `s` and a dense `d` of its shape (`sparse_left`
/// says which operand is on the left): dense.
fn scatter(op: BinaryOp, s: &ArrayData, d: &DenseData, sparse_left: bool) -> Result<ArrayData> {
    let buf = match s {
        ArrayData::Csr(c) => c
            .data
            .scatter_dense(c.sparse_layout(), &d.buf, op, sparse_left)?,
        ArrayData::RowSparse(r) => {
            r.data
                .scatter_dense(r.sparse_layout(), &d.buf, op, sparse_left)?
        }
        ArrayData::Dense(_) => return Err(Error::stype(op.name(), "needs a sparse operand")),
    };
    Ok(ArrayData::Dense(DenseData {
        shape: d.shape.clone(),
        buf,
    }))
}

/// The stored values of sparse `s` combined with dense `d` as `how` says, in `s`'s structure.
fn combine(s: &ArrayData, d: &DenseData, how: WithDense) -> Result<ArrayData> {
    let vals = match s {
        ArrayData::Csr(c) => c.data.with_dense(c.sparse_layout(), &d.buf, how)?,
        ArrayData::RowSparse(r) => r.data.with_dense(r.sparse_layout(), &d.buf, how)?,
        ArrayData::Dense(_) => return Err(Error::stype("binary", "needs a sparse operand")),
    };
    with_values(s, vals)
}

/// The sparse kernel of `op(a, b)`, if there is one for these storage types and shapes.
fn raw(op: BinaryOp, da: &ArrayData, db: &ArrayData) -> Result<Option<ArrayData>> {
    use ArrayData::*;
    use BinaryOp::*;
    let same = da.shape() == db.shape();
    let dt = da.dtype();
    if !dt.is_float() {
        return Err(Error::dtype(
            "binary",
            format!("needs a float32 or float64 array, got {}", dt.name()),
        ));
    }
    Ok(match (op, da, db) {
        (Add | Sub | Mul | Maximum | Minimum, RowSparse(a), RowSparse(b)) if same => {
            let p = a.data.merge(
                a.sparse_layout(),
                &b.data,
                b.sparse_layout(),
                Merge::Binary(op),
            )?;
            Some(RowSparse(RowSparseData {
                shape: a.shape.clone(),
                indices: p.indices,
                data: p.values,
            }))
        }
        (Add | Sub | Mul | Maximum | Minimum, Csr(a), Csr(b)) if same => {
            let p = a.data.merge(
                a.sparse_layout(),
                &b.data,
                b.sparse_layout(),
                Merge::Binary(op),
            )?;
            let Some(indptr) = p.indptr else {
                return Err(Error::stype("binary", "csr merge without row pointers"));
            };
            Some(Csr(CsrData {
                shape: a.shape,
                indptr,
                indices: p.indices,
                data: p.values,
                offset: 0,
            }))
        }
        (Add | Sub, Csr(_) | RowSparse(_), Dense(d)) if same => Some(scatter(op, da, d, true)?),
        (Add | Sub, Dense(d), Csr(_) | RowSparse(_)) if same => Some(scatter(op, db, d, false)?),
        (Mul, Csr(_) | RowSparse(_), Dense(d)) if same => Some(combine(da, d, WithDense::Mul)?),
        (Mul, Dense(d), Csr(_) | RowSparse(_)) if same => Some(combine(db, d, WithDense::Mul)?),
        (Mul | Div, Csr(c), Dense(v)) => {
            let [m, n] = c.shape;
            match v.shape.as_slice() {
                [k] | [1, k] if *k == n => Some(combine(da, v, WithDense::AlongRows(op))?),
                [k, 1] if *k == m => Some(combine(da, v, WithDense::AlongCols(op))?),
                _ => None,
            }
        }
        _ => None,
    })
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
            BinaryOp::Maximum | BinaryOp::Minimum => {
                // Where b wins (a < b for maximum, a > b for minimum; ties go to a, as on the
                // dense path): zero wherever neither operand stores a value, so sparse.
                let d = ac.sub(&bc)?;
                let dv = super::unary::stored_values(&d)?;
                let b_wins = if op == BinaryOp::Maximum {
                    dv.lesser_scalar(0.0)?
                } else {
                    dv.greater_scalar(0.0)?
                };
                let to_b = g.mul(&super::unary::with_stored(&d, &b_wins)?)?;
                (g.sub(&to_b)?, to_b)
            }
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
