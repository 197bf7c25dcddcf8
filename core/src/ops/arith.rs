//! Elementwise binary arithmetic with broadcasting, and scalar arithmetic.

use super::broadcast::broadcast_shapes;
use super::reduce::sum_to_shape;
use crate::autograd::record_op;
use crate::error::{Error, Result};
use crate::NDArray;

/// Which binary operator (shared kernel, per-op formula and backward).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// a + b
    Add,
    /// a - b
    Sub,
    /// a * b
    Mul,
    /// a / b
    Div,
    /// a ^ b
    Pow,
    /// max(a, b)
    Maximum,
    /// min(a, b)
    Minimum,
}

impl BinaryOp {
    /// The operator's name in errors and on the tape.
    pub(crate) fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
        }
    }
}

/// Dense broadcasting binary op without autograd.
pub(crate) fn binary_raw(op: BinaryOp, a: &NDArray, b: &NDArray) -> Result<NDArray> {
    crate::sparse::densifying(op.name(), &[a, b])?;
    let (da, db) = (a.dense_data()?, b.dense_data()?);
    if da.buf.dtype() != db.buf.dtype() {
        return Err(Error::dtype_mismatch(
            op.name(),
            da.buf.dtype(),
            db.buf.dtype(),
        ));
    }
    let out_shape = broadcast_shapes(op.name(), &da.shape, &db.shape)?;
    NDArray::from_buffer(
        da.buf.zip(&da.shape, &db.buf, &db.shape, &out_shape, op)?,
        &out_shape,
    )
}

/// A broadcasting binary op with its backward.
pub fn binary(op: BinaryOp, a: &NDArray, b: &NDArray) -> Result<NDArray> {
    crate::graph::traced!(Op::Binary(op), [a, b], binary(op, a, b));
    if let Some(out) = crate::sparse::dispatch_binary(op, a, b)? {
        return Ok(out);
    }
    let out = binary_raw(op, a, b)?;
    let (ac, bc) = (a.clone(), b.clone());
    let (ash, bsh) = (a.shape(), b.shape());
    Ok(record_op(op.name(), out, &[a, b], move |g| {
        let (ga, gb) = match op {
            BinaryOp::Add => (g.clone(), g.clone()),
            BinaryOp::Sub => (g.clone(), g.neg()?),
            BinaryOp::Mul => (g.mul(&bc)?, g.mul(&ac)?),
            BinaryOp::Div => {
                let ga = g.div(&bc)?;
                // d(a/b)/db = -a / b^2
                let gb = g.mul(&ac)?.div(&bc.mul(&bc)?)?.neg()?;
                (ga, gb)
            }
            BinaryOp::Pow => {
                // d/da = b a^(b-1); d/db = a^b ln a (taken as 0 where a <= 0 to stay finite)
                let ga = g.mul(&bc)?.mul(&ac.pow(&bc.add_scalar(-1.0)?)?)?;
                let ln_a = ac.maximum_scalar(f64::MIN_POSITIVE)?.log()?;
                let gb = g
                    .mul(&ac.pow(&bc)?)?
                    .mul(&ln_a)?
                    .mul(&ac.greater_scalar(0.0)?)?;
                (ga, gb)
            }
            BinaryOp::Maximum | BinaryOp::Minimum => {
                // The gradient goes to a where a wins (ties to a), else to b.
                let a_wins = if op == BinaryOp::Maximum {
                    ac.greater_equal(&bc)?
                } else {
                    ac.lesser_equal(&bc)?
                };
                let ga = g.mul(&a_wins)?;
                let gb = g.mul(&a_wins.rsub_scalar(1.0)?)?;
                (ga, gb)
            }
        };
        Ok(vec![
            Some(sum_to_shape(&ga, &ash)?),
            Some(sum_to_shape(&gb, &bsh)?),
        ])
    }))
}

impl NDArray {
    /// `self + other` with broadcasting.
    pub fn add(&self, other: &NDArray) -> Result<NDArray> {
        binary(BinaryOp::Add, self, other)
    }
    /// `self - other` with broadcasting.
    pub fn sub(&self, other: &NDArray) -> Result<NDArray> {
        binary(BinaryOp::Sub, self, other)
    }
    /// `self * other` with broadcasting.
    pub fn mul(&self, other: &NDArray) -> Result<NDArray> {
        binary(BinaryOp::Mul, self, other)
    }
    /// `self / other` with broadcasting.
    pub fn div(&self, other: &NDArray) -> Result<NDArray> {
        binary(BinaryOp::Div, self, other)
    }
    /// `self ^ other` with broadcasting.
    pub fn pow(&self, other: &NDArray) -> Result<NDArray> {
        binary(BinaryOp::Pow, self, other)
    }
    /// Elementwise maximum with broadcasting.
    pub fn maximum(&self, other: &NDArray) -> Result<NDArray> {
        binary(BinaryOp::Maximum, self, other)
    }
    /// Elementwise minimum with broadcasting.
    pub fn minimum(&self, other: &NDArray) -> Result<NDArray> {
        binary(BinaryOp::Minimum, self, other)
    }
}
