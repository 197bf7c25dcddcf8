//! Zero-preserving unary ops on csr and row_sparse arrays (abs, sign, neg, relu, sqrt, square,
//! clip with a_min <= 0 <= a_max, scalar mul/div): the function maps only the stored values and
//! the storage type is kept. Ops that do not map 0 to 0 take the dense path.

use std::sync::Arc;

use crate::autograd::record_op;
use crate::dtype::{Element, Float};
use crate::error::Result;
use crate::ndarray::{ArrayData, CsrData, RowSparseData};
use crate::ops::map_slice;
use crate::storage::{IndexStorage, Storage};
use crate::{float_dispatch, NDArray, SType};

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

    fn apply<T: Float>(self, x: T) -> T {
        let c = |v: f64| <T as Element>::from_f64(v);
        match self {
            ZeroOp::Neg => -x,
            ZeroOp::Abs => x.abs(),
            ZeroOp::Sign => {
                if x > T::zero() {
                    T::one()
                } else if x < T::zero() {
                    -T::one()
                } else {
                    T::zero()
                }
            }
            ZeroOp::Relu => {
                if x > T::zero() {
                    x
                } else {
                    T::zero()
                }
            }
            ZeroOp::Sqrt => x.sqrt(),
            ZeroOp::Square => x * x,
            ZeroOp::MulScalar(s) => x * c(s),
            ZeroOp::DivScalar(s) => x / c(s),
            ZeroOp::Clip(lo, hi) => x.max(c(lo)).min(c(hi)),
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

/// Apply `f` to the stored values of a sparse array, keeping its structure.
pub(crate) fn map_stored<T: Element>(d: &ArrayData, f: impl Fn(T) -> T + Sync + Send) -> ArrayData {
    match d {
        ArrayData::Csr(c) => {
            let vals = c.values::<T>().expect("dtype checked by caller");
            let nnz = c.nnz();
            let indices = if c.offset == 0 {
                c.indices.clone()
            } else {
                IndexStorage::from(Arc::new(c.indices().to_vec()))
            };
            ArrayData::Csr(CsrData {
                shape: c.shape,
                indptr: c.indptr.clone(),
                indices,
                data: Storage::from_vec(map_slice(&vals[..nnz], f)),
                offset: 0,
            })
        }
        ArrayData::RowSparse(r) => ArrayData::RowSparse(RowSparseData {
            shape: r.shape.clone(),
            indices: r.indices.clone(),
            data: Storage::from_vec(map_slice(r.data.as_slice::<T>().expect("dtype"), f)),
        }),
        ArrayData::Dense(dd) => ArrayData::Dense(crate::ndarray::DenseData {
            shape: dd.shape.clone(),
            buf: Storage::from_vec(map_slice(dd.buf.as_slice::<T>().expect("dtype"), f)),
        }),
    }
}

/// The sparse kernel of a zero-preserving unary op, recorded. The backward multiplies the
/// output gradient by the op's derivative evaluated on the densified input.
pub(crate) fn unary(op: ZeroOp, a: &NDArray) -> Result<NDArray> {
    let d = a.data();
    let out = float_dispatch!(d.dtype(), op.name(), T => NDArray::from_data(map_stored::<T>(&d, |x| op.apply(x))));
    let x = a.clone();
    let y = out.detach();
    Ok(record_op(op.name(), out, &[a], move |g| {
        let xd = x.tostype(SType::Dense)?;
        let gx = match op {
            ZeroOp::Neg => g.neg()?,
            ZeroOp::Abs => g.mul(&xd.sign()?)?,
            ZeroOp::Sign => NDArray::zeros(&x.shape(), x.dtype())?,
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
