//! Zero-preserving unary ops on csr and row_sparse arrays (MXNet's 25 that keep the storage
//! type: abs, sign, round, rint, ceil, floor, trunc, fix, square, sqrt, cbrt, sin, tan, arcsin,
//! arctan, sinh, tanh, arcsinh, arctanh, expm1, log1p, degrees, radians, relu, negative; and
//! scalar mul/div, clip with `a_min <= 0 <= a_max`): the function maps only the stored values
//! and the storage type is kept. Ops that do not map 0 to 0 take the dense path.
//!
//! The backward keeps sparsity too. With `f'(0) = c`, the gradient is `c * g + D * g` where
//! `D = f'(x) - c` is zero wherever `x` stores nothing, so `D` is sparse in `x`'s structure:
//! for `c = 0` (abs, sign, relu, square, the roundings) the gradient is sparse whatever the
//! head gradient `g` is; otherwise it is sparse when `g` is, and dense by design when `g` is
//! dense (then the exact gradient is dense: `sin'(0) = 1`). sqrt and cbrt, whose derivative is
//! unbounded at 0, take it as 0 at the entries `x` does not store (MXNet's convention).

use crate::autograd::record_op;
use crate::error::Result;
use crate::ndarray::{ArrayData, CsrData, RowSparseData};
use crate::storage::Map;
use crate::NDArray;

/// `f'(v) - f'(0)` over the stored values `v` (and the outputs `y` there), as a dense 1-D array.
type Deriv = fn(&NDArray, &NDArray) -> Result<NDArray>;

/// A zero-preserving unary op: its recorded name, the map over stored values, `f'(0)` and
/// the rest of its derivative (`None`: `f'` is the constant `f'(0)`).
#[derive(Clone, Copy)]
pub(crate) struct ZeroOp {
    name: &'static str,
    map: Map,
    slope_at_zero: f64,
    deriv: Option<Deriv>,
}

fn zero_deriv(v: &NDArray, _: &NDArray) -> Result<NDArray> {
    v.mul_scalar(0.0)
}

fn op(name: &'static str, map: Map, slope_at_zero: f64, deriv: Option<Deriv>) -> ZeroOp {
    ZeroOp {
        name,
        map,
        slope_at_zero,
        deriv,
    }
}

impl ZeroOp {
    /// The op for a dispatch name, if it preserves zeros with these arguments (`s`, `hi`:
    /// the scalar of mul/div, the bounds of clip).
    pub(crate) fn from_name(name: &str, s: f64, hi: f64) -> Option<ZeroOp> {
        const DEG: f64 = 180.0 / std::f64::consts::PI;
        const RAD: f64 = std::f64::consts::PI / 180.0;
        Some(match name {
            "neg" => op("neg", Map::Neg, -1.0, None),
            "abs" => op("abs", Map::Abs, 0.0, Some(|v, _| v.map_raw(Map::Sign))),
            "sign" => op("sign", Map::Sign, 0.0, Some(zero_deriv)),
            "relu" => op("relu", Map::Relu, 0.0, Some(|v, _| v.greater_scalar(0.0))),
            "sqrt" => op("sqrt", Map::Sqrt, 0.0, Some(|_, y| y.rdiv_scalar(0.5))),
            "cbrt" => op(
                "cbrt",
                Map::Cbrt,
                0.0,
                Some(|_, y| y.square()?.rdiv_scalar(1.0 / 3.0)),
            ),
            "square" => op("square", Map::Square, 0.0, Some(|v, _| v.mul_scalar(2.0))),
            "round" => op("round", Map::Round, 0.0, Some(zero_deriv)),
            "rint" => op("rint", Map::Rint, 0.0, Some(zero_deriv)),
            "ceil" => op("ceil", Map::Ceil, 0.0, Some(zero_deriv)),
            "floor" => op("floor", Map::Floor, 0.0, Some(zero_deriv)),
            "trunc" => op("trunc", Map::Trunc, 0.0, Some(zero_deriv)),
            "fix" => op("fix", Map::Trunc, 0.0, Some(zero_deriv)),
            "sin" => op(
                "sin",
                Map::Sin,
                1.0,
                Some(|v, _| v.map_raw(Map::Cos)?.add_scalar(-1.0)),
            ),
            "tan" => op("tan", Map::Tan, 1.0, Some(|_, y| y.square())),
            "arcsin" => op(
                "arcsin",
                Map::Arcsin,
                1.0,
                Some(|v, _| {
                    v.square()?
                        .rsub_scalar(1.0)?
                        .sqrt()?
                        .rdiv_scalar(1.0)?
                        .add_scalar(-1.0)
                }),
            ),
            "arctan" => op(
                "arctan",
                Map::Arctan,
                1.0,
                Some(|v, _| {
                    v.square()?
                        .add_scalar(1.0)?
                        .rdiv_scalar(1.0)?
                        .add_scalar(-1.0)
                }),
            ),
            "sinh" => op(
                "sinh",
                Map::Sinh,
                1.0,
                Some(|v, _| v.map_raw(Map::Cosh)?.add_scalar(-1.0)),
            ),
            "tanh" => op("tanh", Map::Tanh, 1.0, Some(|_, y| y.square()?.neg())),
            "arcsinh" => op(
                "arcsinh",
                Map::Arcsinh,
                1.0,
                Some(|v, _| {
                    v.square()?
                        .add_scalar(1.0)?
                        .sqrt()?
                        .rdiv_scalar(1.0)?
                        .add_scalar(-1.0)
                }),
            ),
            "arctanh" => op(
                "arctanh",
                Map::Arctanh,
                1.0,
                Some(|v, _| {
                    v.square()?
                        .rsub_scalar(1.0)?
                        .rdiv_scalar(1.0)?
                        .add_scalar(-1.0)
                }),
            ),
            "expm1" => op("expm1", Map::Expm1, 1.0, Some(|_, y| Ok(y.clone()))),
            "log1p" => op(
                "log1p",
                Map::Log1p,
                1.0,
                Some(|v, _| v.add_scalar(1.0)?.rdiv_scalar(1.0)?.add_scalar(-1.0)),
            ),
            "degrees" => op("degrees", Map::MulScalar(DEG), DEG, None),
            "radians" => op("radians", Map::MulScalar(RAD), RAD, None),
            "mul_scalar" if s.is_finite() => op("mul_scalar", Map::MulScalar(s), s, None),
            "div_scalar" if s != 0.0 && !s.is_nan() => {
                op("div_scalar", Map::DivScalar(s), 1.0 / s, None)
            }
            "clip" if s <= 0.0 && 0.0 <= hi => ZeroOp {
                name: "clip",
                map: Map::Clip(s, hi),
                slope_at_zero: 1.0,
                // The mask of the inside is 1 at 0: D = inside(v) - 1. Its bounds are not
                // captured by a plain fn, so the backward computes it from `map` below.
                deriv: None,
            },
            _ => return None,
        })
    }

    /// Whether `name` is the recorded name of a zero-preserving op (a node of that name with
    /// a sparse input is this module's kernel: the dense path never sees sparse operands).
    pub(crate) fn is_name(name: &str) -> bool {
        Self::from_name(name, 1.0, 1.0).is_some()
    }

    /// `f'(v) - f'(0)` over stored values `v` with outputs `y`, or `None` when it is zero.
    fn rest_of_derivative(self, v: &NDArray, y: &NDArray) -> Result<Option<NDArray>> {
        if let Map::Clip(lo, hi) = self.map {
            return Ok(Some(v.map_raw(Map::InsideMask(lo, hi))?.add_scalar(-1.0)?));
        }
        self.deriv.map(|d| d(v, y)).transpose()
    }
}

/// The stored values of a sparse array as a dense 1-D array (sharing the buffer when it holds
/// exactly them), and the array's structure to put values of that length back into.
pub(crate) fn stored_values(a: &NDArray) -> Result<NDArray> {
    let d = a.read();
    let vals = match &*d {
        ArrayData::Csr(c) => {
            let nnz = c.nnz();
            if c.offset == 0 && c.data.len() == nnz {
                c.data.clone()
            } else {
                c.data.gather(c.offset..c.offset + nnz)?
            }
        }
        ArrayData::RowSparse(r) => r.data.clone(),
        ArrayData::Dense(dd) => dd.buf.clone(),
    };
    let n = vals.len();
    NDArray::from_buffer(vals, &[n])
}

/// `a`'s sparse structure with new stored values `vals` (a dense 1-D array as long as
/// [`stored_values`] of `a`).
pub(crate) fn with_stored(a: &NDArray, vals: &NDArray) -> Result<NDArray> {
    let v = vals.dense_data()?.buf;
    let d = a.read();
    Ok(NDArray::from_data(super::binary::with_values(&d, v)?))
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

/// The sparse kernel of a zero-preserving unary op, recorded. The backward is
/// `f'(0) * g + D * g` with `D` sparse in the input's structure (see the module docs).
pub(crate) fn unary(op: ZeroOp, a: &NDArray) -> Result<NDArray> {
    let d = a.data();
    let out = NDArray::from_data(map_stored(&d, op.map)?);
    drop(d);
    let (x, y) = (a.detach(), out.detach());
    Ok(record_op(op.name, out, &[a], move |g| {
        let rest = op.rest_of_derivative(&stored_values(&x)?, &stored_values(&y)?)?;
        let sparse_part = match rest {
            Some(dv) => Some(with_stored(&x, &dv)?.mul(g)?),
            None => None,
        };
        let gx = match (op.slope_at_zero, sparse_part) {
            (0.0, Some(p)) => p,
            (c, None) => g.mul_scalar(c)?,
            (c, Some(p)) => {
                let scaled = if c == 1.0 {
                    g.clone()
                } else {
                    g.mul_scalar(c)?
                };
                scaled.add(&p)?
            }
        };
        Ok(vec![Some(gx)])
    }))
}
