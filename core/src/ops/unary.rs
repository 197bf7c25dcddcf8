//! Elementwise unary operators, activations, scalar arithmetic and comparisons.

use crate::autograd::record_op;
use crate::dtype::{Element, Float};
use crate::error::Result;
use crate::float_dispatch;
use crate::NDArray;
#[allow(unused_imports)]
use num_traits::{One, Zero};

/// Map a float expression over a dense view of `$a` (no autograd).
macro_rules! float_map {
    ($a:expr, $op:expr, |$x:ident: $T:ident| $e:expr) => {{
        let d = $a.dense_data()?;
        float_dispatch!(d.buf.dtype(), $op, $T => {
            let s = d.buf.as_slice::<$T>().unwrap();
            NDArray::from_vec(super::map_slice(s, |$x: $T| $e), &d.shape)?
        })
    }};
}

/// Backward of an elementwise op as one fused pass `dx[i] = f(g[i], s[i])` over the incoming
/// gradient `g` and one saved array `s` of the same shape (the op's input or output), instead of
/// a chain of 2-3 allocating ops. Evaluates to `None` when `g` is not a dense array of exactly
/// `s`'s shape and dtype (a sparse head gradient), where the caller keeps the composite form.
/// These are the activations of every MLP step, so their backward runs once per layer per batch.
macro_rules! fused_grad {
    ($g:expr, $s:expr, $op:expr, |$gv:ident, $sv:ident : $T:ident| $e:expr) => {{
        let (g, s) = (&$g, &$s);
        if g.stype() != crate::SType::Dense || s.stype() != crate::SType::Dense {
            None
        } else {
            let (gd, sd) = (g.dense_data()?, s.dense_data()?);
            if gd.shape != sd.shape || gd.buf.dtype() != sd.buf.dtype() {
                None
            } else {
                Some(float_dispatch!(sd.buf.dtype(), $op, $T => {
                    let gs = gd.buf.as_slice::<$T>().unwrap();
                    let ss = sd.buf.as_slice::<$T>().unwrap();
                    NDArray::from_vec(super::zip_slices(gs, ss, |$gv: $T, $sv: $T| $e), &sd.shape)?
                }))
            }
        }
    }};
}

#[inline]
fn c<T: Float>(v: f64) -> T {
    <T as Element>::from_f64(v)
}

/// Numerically stable log(1 + exp(x)).
#[inline]
pub(crate) fn softplus<T: Float>(x: T) -> T {
    if x > T::zero() {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

/// Numerically stable logistic function.
#[inline]
pub fn sigmoid<T: Float>(x: T) -> T {
    // exp of -|x| never overflows; the sign only selects between s and e*s. Written without a
    // data-dependent branch around the exp: activations have random signs, and a mispredicted
    // branch per element cost more than the exp itself.
    let e = (-x.abs()).exp_fast_nonpos();
    let s = T::one() / (T::one() + e);
    if x >= T::zero() {
        s
    } else {
        e * s
    }
}

impl NDArray {
    /// `-x`.
    pub fn neg(&self) -> Result<NDArray> {
        if let Some(out) = crate::sparse::dispatch_unary("neg", self)? {
            return Ok(out);
        }
        let out = float_map!(self, "neg", |x: T| -x);
        Ok(record_op("neg", out, &[self], |g| Ok(vec![Some(g.neg()?)])))
    }

    /// `exp(x)`.
    pub fn exp(&self) -> Result<NDArray> {
        let out = float_map!(self, "exp", |x: T| x.exp());
        let y = out.detach();
        Ok(record_op("exp", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&y)?)])
        }))
    }

    /// Natural logarithm.
    pub fn log(&self) -> Result<NDArray> {
        let out = float_map!(self, "log", |x: T| x.ln());
        let x = self.clone();
        Ok(record_op("log", out, &[self], move |g| {
            Ok(vec![Some(g.div(&x)?)])
        }))
    }

    /// Square root.
    pub fn sqrt(&self) -> Result<NDArray> {
        if let Some(out) = crate::sparse::dispatch_unary("sqrt", self)? {
            return Ok(out);
        }
        let out = float_map!(self, "sqrt", |x: T| x.sqrt());
        let y = out.detach();
        Ok(record_op("sqrt", out, &[self], move |g| {
            Ok(vec![Some(g.div(&y.mul_scalar(2.0)?)?)])
        }))
    }

    /// `x * x`.
    pub fn square(&self) -> Result<NDArray> {
        if let Some(out) = crate::sparse::dispatch_unary("square", self)? {
            return Ok(out);
        }
        let out = float_map!(self, "square", |x: T| x * x);
        let x = self.clone();
        Ok(record_op("square", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&x.mul_scalar(2.0)?)?)])
        }))
    }

    /// `|x|` (gradient sign(x), 0 at 0).
    pub fn abs(&self) -> Result<NDArray> {
        if let Some(out) = crate::sparse::dispatch_unary("abs", self)? {
            return Ok(out);
        }
        let out = float_map!(self, "abs", |x: T| x.abs());
        let x = self.clone();
        Ok(record_op("abs", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&x.sign()?)?)])
        }))
    }

    /// `sign(x)` in {-1, 0, 1}; gradient zero.
    pub fn sign(&self) -> Result<NDArray> {
        if let Some(out) = crate::sparse::dispatch_unary("sign", self)? {
            return Ok(out);
        }
        let out = float_map!(self, "sign", |x: T| if x > T::zero() {
            T::one()
        } else if x < T::zero() {
            -T::one()
        } else {
            T::zero()
        });
        Ok(record_op("sign", out, &[self], |g| {
            Ok(vec![Some(g.zeros_like())])
        }))
    }

    /// Logistic sigmoid `1 / (1 + exp(-x))`, stable for large |x|.
    pub fn sigmoid(&self) -> Result<NDArray> {
        let out = float_map!(self, "sigmoid", |x: T| sigmoid(x));
        let y = out.detach();
        Ok(record_op("sigmoid", out, &[self], move |g| {
            // dy/dx = y (1 - y)
            let dx = match fused_grad!(g, y, "sigmoid backward", |gv, yv: T| gv
                * yv
                * (T::one() - yv))
            {
                Some(dx) => dx,
                None => g.mul(&y.mul(&y.rsub_scalar(1.0)?)?)?,
            };
            Ok(vec![Some(dx)])
        }))
    }

    /// `max(x, 0)`.
    pub fn relu(&self) -> Result<NDArray> {
        if let Some(out) = crate::sparse::dispatch_unary("relu", self)? {
            return Ok(out);
        }
        let out = float_map!(self, "relu", |x: T| if x > T::zero() {
            x
        } else {
            T::zero()
        });
        let x = self.clone();
        Ok(record_op("relu", out, &[self], move |g| {
            let dx = match fused_grad!(g, x, "relu backward", |gv, xv: T| if xv > T::zero() {
                gv
            } else {
                T::zero()
            }) {
                Some(dx) => dx,
                None => g.mul(&x.greater_scalar(0.0)?)?,
            };
            Ok(vec![Some(dx)])
        }))
    }

    /// Hyperbolic tangent.
    pub fn tanh(&self) -> Result<NDArray> {
        let out = float_map!(self, "tanh", |x: T| x.tanh());
        let y = out.detach();
        Ok(record_op("tanh", out, &[self], move |g| {
            let dx = match fused_grad!(g, y, "tanh backward", |gv, yv: T| gv * (T::one() - yv * yv))
            {
                Some(dx) => dx,
                None => g.mul(&y.square()?.rsub_scalar(1.0)?)?,
            };
            Ok(vec![Some(dx)])
        }))
    }

    /// softrelu / softplus `log(1 + exp(x))`, stable for large |x|.
    pub fn softrelu(&self) -> Result<NDArray> {
        let out = float_map!(self, "softrelu", |x: T| softplus(x));
        let x = self.clone();
        Ok(record_op("softrelu", out, &[self], move |g| {
            let dx = match fused_grad!(g, x, "softrelu backward", |gv, xv: T| gv * sigmoid(xv)) {
                Some(dx) => dx,
                None => g.mul(&x.sigmoid()?)?,
            };
            Ok(vec![Some(dx)])
        }))
    }

    /// Leaky ReLU: `x` for x > 0, `slope * x` otherwise.
    pub fn leaky_relu(&self, slope: f64) -> Result<NDArray> {
        let out = float_map!(self, "leaky_relu", |x: T| if x > T::zero() {
            x
        } else {
            c::<T>(slope) * x
        });
        let x = self.clone();
        Ok(record_op("leaky_relu", out, &[self], move |g| {
            let d = float_map!(x, "leaky_relu", |v: T| if v > T::zero() {
                T::one()
            } else {
                c::<T>(slope)
            });
            Ok(vec![Some(g.mul(&d)?)])
        }))
    }

    /// `x + s`.
    pub fn add_scalar(&self, s: f64) -> Result<NDArray> {
        let out = float_map!(self, "add_scalar", |x: T| x + c::<T>(s));
        Ok(record_op("add_scalar", out, &[self], |g| {
            Ok(vec![Some(g.clone())])
        }))
    }

    /// `x - s`.
    pub fn sub_scalar(&self, s: f64) -> Result<NDArray> {
        self.add_scalar(-s)
    }

    /// `s - x`.
    pub fn rsub_scalar(&self, s: f64) -> Result<NDArray> {
        let out = float_map!(self, "rsub_scalar", |x: T| c::<T>(s) - x);
        Ok(record_op("rsub_scalar", out, &[self], |g| {
            Ok(vec![Some(g.neg()?)])
        }))
    }

    /// `x * s` (keeps the storage type of sparse arrays).
    pub fn mul_scalar(&self, s: f64) -> Result<NDArray> {
        if let Some(out) = crate::sparse::dispatch_scalar("mul_scalar", self, s)? {
            return Ok(out);
        }
        let out = float_map!(self, "mul_scalar", |x: T| x * c::<T>(s));
        Ok(record_op("mul_scalar", out, &[self], move |g| {
            Ok(vec![Some(g.mul_scalar(s)?)])
        }))
    }

    /// `x / s` (keeps the storage type of sparse arrays).
    pub fn div_scalar(&self, s: f64) -> Result<NDArray> {
        if let Some(out) = crate::sparse::dispatch_scalar("div_scalar", self, s)? {
            return Ok(out);
        }
        let out = float_map!(self, "div_scalar", |x: T| x / c::<T>(s));
        Ok(record_op("div_scalar", out, &[self], move |g| {
            Ok(vec![Some(g.div_scalar(s)?)])
        }))
    }

    /// `s / x`.
    pub fn rdiv_scalar(&self, s: f64) -> Result<NDArray> {
        let out = float_map!(self, "rdiv_scalar", |x: T| c::<T>(s) / x);
        let x = self.clone();
        Ok(record_op("rdiv_scalar", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&x.square()?.rdiv_scalar(-s)?)?)])
        }))
    }

    /// `x ^ p`.
    pub fn pow_scalar(&self, p: f64) -> Result<NDArray> {
        let out = float_map!(self, "pow_scalar", |x: T| x.powf(c::<T>(p)));
        let x = self.clone();
        Ok(record_op("pow_scalar", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&x.pow_scalar(p - 1.0)?.mul_scalar(p)?)?)])
        }))
    }

    /// `max(x, s)`.
    pub fn maximum_scalar(&self, s: f64) -> Result<NDArray> {
        let out = float_map!(self, "maximum_scalar", |x: T| if x >= c::<T>(s) {
            x
        } else {
            c::<T>(s)
        });
        let x = self.clone();
        Ok(record_op("maximum_scalar", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&x.greater_equal_scalar(s)?)?)])
        }))
    }

    /// `min(x, s)`.
    pub fn minimum_scalar(&self, s: f64) -> Result<NDArray> {
        let out = float_map!(self, "minimum_scalar", |x: T| if x <= c::<T>(s) {
            x
        } else {
            c::<T>(s)
        });
        let x = self.clone();
        Ok(record_op("minimum_scalar", out, &[self], move |g| {
            Ok(vec![Some(g.mul(&x.lesser_equal_scalar(s)?)?)])
        }))
    }

    /// Clip to `[a_min, a_max]`; the gradient passes where the value was inside.
    pub fn clip(&self, a_min: f64, a_max: f64) -> Result<NDArray> {
        if a_min > a_max {
            return Err(crate::Error::arg(
                "clip",
                format!("a_min {a_min} > a_max {a_max}"),
            ));
        }
        if let Some(out) = crate::sparse::dispatch_clip(self, a_min, a_max)? {
            return Ok(out);
        }
        let out = float_map!(self, "clip", |x: T| x.max(c::<T>(a_min)).min(c::<T>(a_max)));
        let x = self.clone();
        Ok(record_op("clip", out, &[self], move |g| {
            let inside = float_map!(
                x,
                "clip",
                |v: T| if v >= c::<T>(a_min) && v <= c::<T>(a_max) {
                    T::one()
                } else {
                    T::zero()
                }
            );
            Ok(vec![Some(g.mul(&inside)?)])
        }))
    }
}

fn cmp_arrays<T: Element>(
    x: &[T],
    ash: &[usize],
    y: &[T],
    bsh: &[usize],
    shape: &[usize],
    f: impl Fn(T, T) -> bool + Sync + Send,
) -> Vec<T> {
    let (one, zero) = (T::from_f64(1.0), T::from_f64(0.0));
    super::broadcast::broadcast_apply(
        x,
        ash,
        y,
        bsh,
        shape,
        |p, q| if f(p, q) { one } else { zero },
    )
}

fn cmp_scalar<T: Element>(x: &[T], s: f64, f: impl Fn(f64, f64) -> bool + Sync + Send) -> Vec<T> {
    let (one, zero) = (T::from_f64(1.0), T::from_f64(0.0));
    super::map_slice(x, |p| if f(p.to_f64(), s) { one } else { zero })
}

macro_rules! comparison {
    ($name:ident, $sname:ident, $op:tt, $doc:literal) => {
        impl NDArray {
            #[doc = concat!("Elementwise `a ", $doc, " b` with broadcasting, as 1/0 of the input dtype (not differentiable).")]
            pub fn $name(&self, other: &NDArray) -> Result<NDArray> {
                let (da, db) = (self.dense_data()?, other.dense_data()?);
                if da.buf.dtype() != db.buf.dtype() {
                    return Err(crate::Error::dtype_mismatch(stringify!($name), da.buf.dtype(), db.buf.dtype()));
                }
                let shape = super::broadcast_shapes(stringify!($name), &da.shape, &db.shape)?;
                Ok(crate::with_buffer!(&da.buf, x => {
                    let y = db.buf.as_slice().unwrap();
                    NDArray::from_vec(cmp_arrays(x.as_slice(), &da.shape, y, &db.shape, &shape, |p, q| p $op q), &shape)?
                }))
            }
            #[doc = concat!("Elementwise `a ", $doc, " s` against a scalar, as 1/0 of the input dtype.")]
            pub fn $sname(&self, s: f64) -> Result<NDArray> {
                let d = self.dense_data()?;
                Ok(crate::with_buffer!(&d.buf, x => NDArray::from_vec(cmp_scalar(x.as_slice(), s, |p, q| p $op q), &d.shape)?))
            }
        }
    };
}

comparison!(equal, equal_scalar, ==, "==");
comparison!(not_equal, not_equal_scalar, !=, "!=");
comparison!(greater, greater_scalar, >, ">");
comparison!(greater_equal, greater_equal_scalar, >=, ">=");
comparison!(lesser, lesser_scalar, <, "<");
comparison!(lesser_equal, lesser_equal_scalar, <=, "<=");
