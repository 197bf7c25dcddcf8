//! Elementwise unary operators, activations, scalar arithmetic and comparisons. Each names
//! its kernel with a [`Map`] (or [`MapGrad`], [`CmpOp`]) and the array's storage runs it on
//! whichever backend holds it (`crate::storage::elementwise`).

use crate::autograd::record_op;
use crate::error::Result;
use crate::storage::{CmpOp, Map, MapGrad};
use crate::{NDArray, SType};

impl NDArray {
    /// `op` over a dense view of `self`, not recorded.
    pub(crate) fn map_raw(&self, op: Map) -> Result<NDArray> {
        // The one dense path of every unary and scalar operator: a sparse operand that got
        // here has no sparse kernel for `op`.
        crate::sparse::densifying(op.name(), &[self])?;
        let d = self.dense_data()?;
        NDArray::from_buffer(d.buf.map(op)?, &d.shape)
    }
}

/// The fused backward `op` of head gradient `g` and saved array `s`, as one pass instead of a
/// chain of 2-3 allocating ops: these are the activations of every MLP step, so their backward
/// runs once per layer per batch. `None` when `g` is not a dense array of exactly `s`'s shape
/// and dtype (a sparse head gradient), where the caller keeps the composite form.
fn fused_grad(g: &NDArray, s: &NDArray, op: MapGrad) -> Result<Option<NDArray>> {
    if g.stype() != SType::Dense || s.stype() != SType::Dense {
        return Ok(None);
    }
    let (gd, sd) = (g.dense_data()?, s.dense_data()?);
    if gd.shape != sd.shape || gd.buf.dtype() != sd.buf.dtype() {
        return Ok(None);
    }
    Ok(Some(NDArray::from_buffer(
        gd.buf.map_grad(&sd.buf, op)?,
        &sd.shape,
    )?))
}

impl NDArray {
    /// `-x`.
    pub fn neg(&self) -> Result<NDArray> {
        crate::graph::traced!(Op::Unary(UnaryFn::Neg), [self], self.neg());
        if let Some(out) = crate::sparse::dispatch_unary("neg", self)? {
            return Ok(out);
        }
        let out = self.map_raw(Map::Neg)?;
        Ok(record_op("neg", out, &[self], |g| Ok(vec![Some(g.neg()?)])))
    }

    /// `exp(x)`.
    pub fn exp(&self) -> Result<NDArray> {
        crate::graph::traced!(Op::Unary(UnaryFn::Exp), [self], self.exp());
        let out = self.map_raw(Map::Exp)?;
        let y = out.detach();
        Ok(record_op("exp", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&y)?)])
        }))
    }

    /// Natural logarithm.
    pub fn log(&self) -> Result<NDArray> {
        crate::graph::traced!(Op::Unary(UnaryFn::Log), [self], self.log());
        let out = self.map_raw(Map::Log)?;
        let x = self.clone();
        Ok(record_op("log", out, &[self], move |g| {
            Ok(vec![Some(g.div(&x)?)])
        }))
    }

    /// Square root.
    pub fn sqrt(&self) -> Result<NDArray> {
        crate::graph::traced!(Op::Unary(UnaryFn::Sqrt), [self], self.sqrt());
        if let Some(out) = crate::sparse::dispatch_unary("sqrt", self)? {
            return Ok(out);
        }
        let out = self.map_raw(Map::Sqrt)?;
        let y = out.detach();
        Ok(record_op("sqrt", out, &[self], move |g| {
            Ok(vec![Some(g.div(&y.mul_scalar(2.0)?)?)])
        }))
    }

    /// `x * x`.
    pub fn square(&self) -> Result<NDArray> {
        crate::graph::traced!(Op::Unary(UnaryFn::Square), [self], self.square());
        if let Some(out) = crate::sparse::dispatch_unary("square", self)? {
            return Ok(out);
        }
        let out = self.map_raw(Map::Square)?;
        let x = self.clone();
        Ok(record_op("square", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&x.mul_scalar(2.0)?)?)])
        }))
    }

    /// `|x|` (gradient sign(x), 0 at 0).
    pub fn abs(&self) -> Result<NDArray> {
        crate::graph::traced!(Op::Unary(UnaryFn::Abs), [self], self.abs());
        if let Some(out) = crate::sparse::dispatch_unary("abs", self)? {
            return Ok(out);
        }
        let out = self.map_raw(Map::Abs)?;
        let x = self.clone();
        Ok(record_op("abs", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&x.sign()?)?)])
        }))
    }

    /// `sign(x)` in {-1, 0, 1}; gradient zero.
    pub fn sign(&self) -> Result<NDArray> {
        crate::graph::traced!(Op::Unary(UnaryFn::Sign), [self], self.sign());
        if let Some(out) = crate::sparse::dispatch_unary("sign", self)? {
            return Ok(out);
        }
        let out = self.map_raw(Map::Sign)?;
        // Zero, in the head gradient's storage type (an empty row_sparse one stays sparse).
        Ok(record_op("sign", out, &[self], |g| {
            Ok(vec![Some(match g.stype() {
                SType::Dense => g.zeros_like(),
                st => crate::sparse::zeros_stype_on(&g.shape(), g.dtype(), st, g.device())?,
            })])
        }))
    }

    /// Logistic sigmoid `1 / (1 + exp(-x))`, stable for large |x|.
    pub fn sigmoid(&self) -> Result<NDArray> {
        crate::graph::traced!(Op::Unary(UnaryFn::Sigmoid), [self], self.sigmoid());
        let out = self.map_raw(Map::Sigmoid)?;
        let y = out.detach();
        Ok(record_op("sigmoid", out, &[self], move |g| {
            // dy/dx = y (1 - y)
            let dx = match fused_grad(g, &y, MapGrad::SigmoidFromOutput)? {
                Some(dx) => dx,
                None => g.mul(&y.mul(&y.rsub_scalar(1.0)?)?)?,
            };
            Ok(vec![Some(dx)])
        }))
    }

    /// `max(x, 0)`.
    pub fn relu(&self) -> Result<NDArray> {
        crate::graph::traced!(Op::Unary(UnaryFn::Relu), [self], self.relu());
        if let Some(out) = crate::sparse::dispatch_unary("relu", self)? {
            return Ok(out);
        }
        let out = self.map_raw(Map::Relu)?;
        let x = self.clone();
        Ok(record_op("relu", out, &[self], move |g| {
            let dx = match fused_grad(g, &x, MapGrad::ReluFromInput)? {
                Some(dx) => dx,
                None => g.mul(&x.greater_scalar(0.0)?)?,
            };
            Ok(vec![Some(dx)])
        }))
    }

    /// Hyperbolic tangent (keeps csr and row_sparse, forward and backward).
    pub fn tanh(&self) -> Result<NDArray> {
        crate::graph::traced!(Op::Unary(UnaryFn::Tanh), [self], self.tanh());
        if let Some(out) = crate::sparse::dispatch_unary("tanh", self)? {
            return Ok(out);
        }
        let out = self.map_raw(Map::Tanh)?;
        let y = out.detach();
        Ok(record_op("tanh", out, &[self], move |g| {
            let dx = match fused_grad(g, &y, MapGrad::TanhFromOutput)? {
                Some(dx) => dx,
                None => g.mul(&y.square()?.rsub_scalar(1.0)?)?,
            };
            Ok(vec![Some(dx)])
        }))
    }

    /// softrelu / softplus `log(1 + exp(x))`, stable for large |x|.
    pub fn softrelu(&self) -> Result<NDArray> {
        crate::graph::traced!(Op::Unary(UnaryFn::Softrelu), [self], self.softrelu());
        let out = self.map_raw(Map::Softrelu)?;
        let x = self.clone();
        Ok(record_op("softrelu", out, &[self], move |g| {
            let dx = match fused_grad(g, &x, MapGrad::SoftreluFromInput)? {
                Some(dx) => dx,
                None => g.mul(&x.sigmoid()?)?,
            };
            Ok(vec![Some(dx)])
        }))
    }

    /// Leaky ReLU: `x` for x > 0, `slope * x` otherwise.
    pub fn leaky_relu(&self, slope: f64) -> Result<NDArray> {
        crate::graph::traced!(
            Op::Scalar(ScalarFn::LeakyRelu, slope),
            [self],
            self.leaky_relu(slope)
        );
        let out = self.map_raw(Map::LeakyRelu(slope))?;
        let x = self.clone();
        Ok(record_op("leaky_relu", out, &[self], move |g| {
            let d = x.map_raw(Map::LeakyReluSlope(slope))?;
            Ok(vec![Some(g.mul(&d)?)])
        }))
    }

    /// `x + s`.
    pub fn add_scalar(&self, s: f64) -> Result<NDArray> {
        crate::graph::traced!(Op::Scalar(ScalarFn::Add, s), [self], self.add_scalar(s));
        let out = self.map_raw(Map::AddScalar(s))?;
        Ok(record_op("add_scalar", out, &[self], |g| {
            Ok(vec![Some(g.clone())])
        }))
    }

    /// `x - s`.
    pub fn sub_scalar(&self, s: f64) -> Result<NDArray> {
        crate::graph::traced!(Op::Scalar(ScalarFn::Sub, s), [self], self.sub_scalar(s));
        self.add_scalar(-s)
    }

    /// `s - x`.
    pub fn rsub_scalar(&self, s: f64) -> Result<NDArray> {
        crate::graph::traced!(Op::Scalar(ScalarFn::RSub, s), [self], self.rsub_scalar(s));
        let out = self.map_raw(Map::RsubScalar(s))?;
        Ok(record_op("rsub_scalar", out, &[self], |g| {
            Ok(vec![Some(g.neg()?)])
        }))
    }

    /// `x * s` (keeps the storage type of sparse arrays).
    pub fn mul_scalar(&self, s: f64) -> Result<NDArray> {
        crate::graph::traced!(Op::Scalar(ScalarFn::Mul, s), [self], self.mul_scalar(s));
        if let Some(out) = crate::sparse::dispatch_scalar("mul_scalar", self, s)? {
            return Ok(out);
        }
        let out = self.map_raw(Map::MulScalar(s))?;
        Ok(record_op("mul_scalar", out, &[self], move |g| {
            Ok(vec![Some(g.mul_scalar(s)?)])
        }))
    }

    /// `x / s` (keeps the storage type of sparse arrays).
    pub fn div_scalar(&self, s: f64) -> Result<NDArray> {
        crate::graph::traced!(Op::Scalar(ScalarFn::Div, s), [self], self.div_scalar(s));
        if let Some(out) = crate::sparse::dispatch_scalar("div_scalar", self, s)? {
            return Ok(out);
        }
        let out = self.map_raw(Map::DivScalar(s))?;
        Ok(record_op("div_scalar", out, &[self], move |g| {
            Ok(vec![Some(g.div_scalar(s)?)])
        }))
    }

    /// `s / x`.
    pub fn rdiv_scalar(&self, s: f64) -> Result<NDArray> {
        crate::graph::traced!(Op::Scalar(ScalarFn::RDiv, s), [self], self.rdiv_scalar(s));
        let out = self.map_raw(Map::RdivScalar(s))?;
        let x = self.clone();
        Ok(record_op("rdiv_scalar", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&x.square()?.rdiv_scalar(-s)?)?)])
        }))
    }

    /// `x ^ p`.
    pub fn pow_scalar(&self, p: f64) -> Result<NDArray> {
        crate::graph::traced!(Op::Scalar(ScalarFn::Pow, p), [self], self.pow_scalar(p));
        let out = self.map_raw(Map::PowScalar(p))?;
        let x = self.clone();
        Ok(record_op("pow_scalar", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&x.pow_scalar(p - 1.0)?.mul_scalar(p)?)?)])
        }))
    }

    /// `max(x, s)`.
    pub fn maximum_scalar(&self, s: f64) -> Result<NDArray> {
        crate::graph::traced!(
            Op::Scalar(ScalarFn::Maximum, s),
            [self],
            self.maximum_scalar(s)
        );
        let out = self.map_raw(Map::MaximumScalar(s))?;
        let x = self.clone();
        Ok(record_op("maximum_scalar", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&x.greater_equal_scalar(s)?)?)])
        }))
    }

    /// `min(x, s)`.
    pub fn minimum_scalar(&self, s: f64) -> Result<NDArray> {
        crate::graph::traced!(
            Op::Scalar(ScalarFn::Minimum, s),
            [self],
            self.minimum_scalar(s)
        );
        let out = self.map_raw(Map::MinimumScalar(s))?;
        let x = self.clone();
        Ok(record_op("minimum_scalar", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&x.lesser_equal_scalar(s)?)?)])
        }))
    }

    /// Clip to `[a_min, a_max]`; the gradient passes where the value was inside.
    pub fn clip(&self, a_min: f64, a_max: f64) -> Result<NDArray> {
        crate::graph::traced!(Op::Clip(a_min, a_max), [self], self.clip(a_min, a_max));
        if a_min > a_max {
            return Err(crate::Error::arg(
                "clip",
                format!("a_min {a_min} > a_max {a_max}"),
            ));
        }
        if let Some(out) = crate::sparse::dispatch_clip(self, a_min, a_max)? {
            return Ok(out);
        }
        let out = self.map_raw(Map::Clip(a_min, a_max))?;
        let x = self.clone();
        Ok(record_op("clip", out, &[self], move |g| {
            let inside = x.map_raw(Map::InsideMask(a_min, a_max))?;
            Ok(vec![Some(g.mul(&inside)?)])
        }))
    }
}

/// The backward of a unary op from its input `x`, output `y` and head gradient `g`.
type UnaryGrad = fn(&NDArray, &NDArray, &NDArray) -> Result<NDArray>;

impl NDArray {
    /// A zero-preserving unary op: the sparse kernel for csr and row_sparse arrays (storage
    /// type kept forward and backward, `crate::sparse` `unary`), else `map` over the dense
    /// array with the backward `grad`.
    fn zero_preserving(&self, name: &'static str, map: Map, grad: UnaryGrad) -> Result<NDArray> {
        if let Some(out) = crate::sparse::dispatch_unary(name, self)? {
            return Ok(out);
        }
        let out = self.map_raw(map)?;
        let (x, y) = (self.clone(), out.detach());
        Ok(record_op(name, out, &[self], move |g| {
            Ok(vec![Some(grad(&x, &y, g)?)])
        }))
    }

    /// `sin(x)`. Keeps csr and row_sparse, forward and backward.
    pub fn sin(&self) -> Result<NDArray> {
        self.zero_preserving("sin", Map::Sin, |x, _, g| g.mul(&x.map_raw(Map::Cos)?))
    }

    /// `tan(x)`. Keeps csr and row_sparse, forward and backward.
    pub fn tan(&self) -> Result<NDArray> {
        self.zero_preserving("tan", Map::Tan, |_, y, g| {
            g.mul(&y.square()?.add_scalar(1.0)?)
        })
    }

    /// `arcsin(x)` (inverse sine). Keeps csr and row_sparse, forward and backward.
    pub fn arcsin(&self) -> Result<NDArray> {
        self.zero_preserving("arcsin", Map::Arcsin, |x, _, g| {
            g.div(&x.square()?.rsub_scalar(1.0)?.sqrt()?)
        })
    }

    /// `arctan(x)` (inverse tangent). Keeps csr and row_sparse, forward and backward.
    pub fn arctan(&self) -> Result<NDArray> {
        self.zero_preserving("arctan", Map::Arctan, |x, _, g| {
            g.div(&x.square()?.add_scalar(1.0)?)
        })
    }

    /// `sinh(x)`. Keeps csr and row_sparse, forward and backward.
    pub fn sinh(&self) -> Result<NDArray> {
        self.zero_preserving("sinh", Map::Sinh, |x, _, g| g.mul(&x.map_raw(Map::Cosh)?))
    }

    /// `arcsinh(x)`. Keeps csr and row_sparse, forward and backward.
    pub fn arcsinh(&self) -> Result<NDArray> {
        self.zero_preserving("arcsinh", Map::Arcsinh, |x, _, g| {
            g.div(&x.square()?.add_scalar(1.0)?.sqrt()?)
        })
    }

    /// `arctanh(x)`. Keeps csr and row_sparse, forward and backward.
    pub fn arctanh(&self) -> Result<NDArray> {
        self.zero_preserving("arctanh", Map::Arctanh, |x, _, g| {
            g.div(&x.square()?.rsub_scalar(1.0)?)
        })
    }

    /// `exp(x) - 1`, exact for small `x`. Keeps csr and row_sparse, forward and backward.
    pub fn expm1(&self) -> Result<NDArray> {
        self.zero_preserving("expm1", Map::Expm1, |_, y, g| g.mul(&y.add_scalar(1.0)?))
    }

    /// `ln(1 + x)`, exact for small `x`. Keeps csr and row_sparse, forward and backward.
    pub fn log1p(&self) -> Result<NDArray> {
        self.zero_preserving("log1p", Map::Log1p, |x, _, g| g.div(&x.add_scalar(1.0)?))
    }

    /// The cube root. Keeps csr and row_sparse, forward and backward.
    pub fn cbrt(&self) -> Result<NDArray> {
        self.zero_preserving("cbrt", Map::Cbrt, |_, y, g| {
            g.div(&y.square()?.mul_scalar(3.0)?)
        })
    }

    /// Radians to degrees. Keeps csr and row_sparse, forward and backward.
    pub fn degrees(&self) -> Result<NDArray> {
        self.zero_preserving(
            "degrees",
            Map::MulScalar(180.0 / std::f64::consts::PI),
            |_, _, g| g.mul_scalar(180.0 / std::f64::consts::PI),
        )
    }

    /// Degrees to radians. Keeps csr and row_sparse, forward and backward.
    pub fn radians(&self) -> Result<NDArray> {
        self.zero_preserving(
            "radians",
            Map::MulScalar(std::f64::consts::PI / 180.0),
            |_, _, g| g.mul_scalar(std::f64::consts::PI / 180.0),
        )
    }

    /// The nearest whole number, halves away from zero (gradient zero). Keeps csr and row_sparse, forward and backward.
    pub fn round(&self) -> Result<NDArray> {
        self.zero_preserving("round", Map::Round, |_, _, g| g.mul_scalar(0.0))
    }

    /// The nearest whole number, halves to even (gradient zero). Keeps csr and row_sparse, forward and backward.
    pub fn rint(&self) -> Result<NDArray> {
        self.zero_preserving("rint", Map::Rint, |_, _, g| g.mul_scalar(0.0))
    }

    /// The smallest whole number `>= x` (gradient zero). Keeps csr and row_sparse, forward and backward.
    pub fn ceil(&self) -> Result<NDArray> {
        self.zero_preserving("ceil", Map::Ceil, |_, _, g| g.mul_scalar(0.0))
    }

    /// The largest whole number `<= x` (gradient zero). Keeps csr and row_sparse, forward and backward.
    pub fn floor(&self) -> Result<NDArray> {
        self.zero_preserving("floor", Map::Floor, |_, _, g| g.mul_scalar(0.0))
    }

    /// `x` rounded toward zero (gradient zero). Keeps csr and row_sparse, forward and backward.
    pub fn trunc(&self) -> Result<NDArray> {
        self.zero_preserving("trunc", Map::Trunc, |_, _, g| g.mul_scalar(0.0))
    }

    /// `x` rounded toward zero, MXNet's `fix` (the same as [`NDArray::trunc`]; gradient zero). Keeps csr and row_sparse, forward and backward.
    pub fn fix(&self) -> Result<NDArray> {
        self.zero_preserving("fix", Map::Trunc, |_, _, g| g.mul_scalar(0.0))
    }
}

macro_rules! comparison {
    ($name:ident, $sname:ident, $op:expr, $doc:literal) => {
        impl NDArray {
            #[doc = concat!("Elementwise `a ", $doc, " b` with broadcasting, as 1/0 of the input dtype (not differentiable).")]
            pub fn $name(&self, other: &NDArray) -> Result<NDArray> {
                crate::graph::traced!(Op::Compare(CmpFn::of($op)), [self, other], self.$name(other));
                crate::sparse::densifying(stringify!($name), &[self, other])?;
                let (da, db) = (self.dense_data()?, other.dense_data()?);
                if da.buf.dtype() != db.buf.dtype() {
                    return Err(crate::Error::dtype_mismatch(stringify!($name), da.buf.dtype(), db.buf.dtype()));
                }
                let shape = super::broadcast_shapes(stringify!($name), &da.shape, &db.shape)?;
                NDArray::from_buffer(da.buf.compare(&da.shape, &db.buf, &db.shape, &shape, $op)?, &shape)
            }
            #[doc = concat!("Elementwise `a ", $doc, " s` against a scalar, as 1/0 of the input dtype.")]
            pub fn $sname(&self, s: f64) -> Result<NDArray> {
                crate::graph::traced!(Op::CompareScalar(CmpFn::of($op), s), [self], self.$sname(s));
                crate::sparse::densifying(stringify!($sname), &[self])?;
                let d = self.dense_data()?;
                NDArray::from_buffer(d.buf.compare_scalar(s, $op)?, &d.shape)
            }
        }
    };
}

comparison!(equal, equal_scalar, CmpOp::Eq, "==");
comparison!(not_equal, not_equal_scalar, CmpOp::Ne, "!=");
comparison!(greater, greater_scalar, CmpOp::Gt, ">");
comparison!(greater_equal, greater_equal_scalar, CmpOp::Ge, ">=");
comparison!(lesser, lesser_scalar, CmpOp::Lt, "<");
comparison!(lesser_equal, lesser_equal_scalar, CmpOp::Le, "<=");
