//! Zero-preserving unary ops on csr and row_sparse arrays (abs, sign, neg, relu, sqrt, square,
//! clip with a_min <= 0 <= a_max, scalar mul/div): the function maps only the stored values and
//! the storage type is kept. Ops that do not map 0 to 0 take the dense path.

use crate::autograd::record_op;
use crate::error::Result;
use crate::ndarray::{ArrayData, CsrData, RowSparseData};
use crate::storage::Map;
use crate::{NDArray, SType};

/// A zero-preserving unary op.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ZeroOp {
    Neg,
    Abs,
    Sign,
    Relu,
    Sqrt,
    Square,
    MulScalar(f64),
    DivScalar(f64),
    Clip(f64, f64),
}

impl ZeroOp {
    /// The op for a dispatch name, if it preserves zeros with these arguments.
    pub(crate) fn from_name(name: &str, s: f64, hi: f64) -> Option<ZeroOp> {
        Some(match name {
            "neg" => ZeroOp::Neg,
            "abs" => ZeroOp::Abs,
            "sign" => ZeroOp::Sign,
            "relu" => ZeroOp::Relu,
            "sqrt" => ZeroOp::Sqrt,
            "square" => ZeroOp::Square,
            "mul_scalar" if s.is_finite() => ZeroOp::MulScalar(s),
            "div_scalar" if s != 0.0 && !s.is_nan() => ZeroOp::DivScalar(s),
            "clip" if s <= 0.0 && 0.0 <= hi => ZeroOp::Clip(s, hi),
            _ => return None,
        })
    }

    /// Whether `name` is the recorded name of a zero-preserving op (a node of that name with
    /// a sparse input is this module's kernel: the dense path never sees sparse operands).
    pub(crate) fn is_name(name: &str) -> bool {
        Self::from_name(name, 1.0, 1.0).is_some()
    }

    /// The elementwise map that computes it (the same loop as on a dense array).
    fn map(self) -> Map {
        match self {
            ZeroOp::Neg => Map::Neg,
            ZeroOp::Abs => Map::Abs,
            ZeroOp::Sign => Map::Sign,
            ZeroOp::Relu => Map::Relu,
            ZeroOp::Sqrt => Map::Sqrt,
            ZeroOp::Square => Map::Square,
            ZeroOp::MulScalar(s) => Map::MulScalar(s),
            ZeroOp::DivScalar(s) => Map::DivScalar(s),
            ZeroOp::Clip(lo, hi) => Map::Clip(lo, hi),
        }
    }

    fn name(self) -> &'static str {
        match self {
            ZeroOp::Neg => "neg",
            ZeroOp::Abs => "abs",
            ZeroOp::Sign => "sign",
            ZeroOp::Relu => "relu",
            ZeroOp::Sqrt => "sqrt",
            ZeroOp::Square => "square",
            ZeroOp::MulScalar(_) => "mul_scalar",
            ZeroOp::DivScalar(_) => "div_scalar",
            ZeroOp::Clip(..) => "clip",
        }
    }
}

/// Apply `op` to the stored values of an array, keeping its structure.
fn map_stored(d: &ArrayData, op: Map) -> Result<ArrayData> {
    Ok(match d {
        ArrayData::Csr(c) => {
            let nnz = c.nnz();
            let (indices, data) = if c.offset == 0 {
                // The whole buffer when it holds exactly this array's values (the common
                // case); else only this array's values are mapped.
                let data = if c.data.len() == nnz {
                    c.data.map(op)?
                } else {
                    c.data.gather(0..nnz)?.map(op)?
                };
                (c.indices.clone(), data)
            } else {
                // A row slice: its own values and column ids, copied out of the parent's.
                let range = c.offset..c.offset + nnz;
                (
                    c.indices.index_range(range.clone())?,
                    c.data.gather(range)?.map(op)?,
                )
            };
            ArrayData::Csr(CsrData {
                shape: c.shape,
                indptr: c.indptr.clone(),
                indices,
                data,
                offset: 0,
            })
        }
        ArrayData::RowSparse(r) => ArrayData::RowSparse(RowSparseData {
            shape: r.shape.clone(),
            indices: r.indices.clone(),
            data: r.data.map(op)?,
        }),
        ArrayData::Dense(dd) => ArrayData::Dense(crate::ndarray::DenseData {
            shape: dd.shape.clone(),
            buf: dd.buf.map(op)?,
        }),
    })
}

/// The sparse kernel of a zero-preserving unary op, recorded. The backward multiplies the
/// output gradient by the op's derivative evaluated on the densified input.
pub(crate) fn unary(op: ZeroOp, a: &NDArray) -> Result<NDArray> {
    let d = a.data();
    let out = NDArray::from_data(map_stored(&d, op.map())?);
    let x = a.clone();
    let y = out.detach();
    Ok(record_op(op.name(), out, &[a], move |g| {
        let xd = x.tostype(SType::Dense)?;
        let gx = match op {
            ZeroOp::Neg => g.neg()?,
            ZeroOp::Abs => g.mul(&xd.sign()?)?,
            ZeroOp::Sign => x.zeros_like(),
            ZeroOp::Relu => g.mul(&xd.greater_scalar(0.0)?)?,
            ZeroOp::Sqrt => g.div(&y.tostype(SType::Dense)?.mul_scalar(2.0)?)?,
            ZeroOp::Square => g.mul(&xd.mul_scalar(2.0)?)?,
            ZeroOp::MulScalar(s) => g.mul_scalar(s)?,
            ZeroOp::DivScalar(s) => g.div_scalar(s)?,
            ZeroOp::Clip(lo, hi) => {
                let inside = xd
                    .greater_equal_scalar(lo)?
                    .mul(&xd.lesser_equal_scalar(hi)?)?;
                g.mul(&inside)?
            }
        };
        Ok(vec![Some(gx)])
    }))
}
