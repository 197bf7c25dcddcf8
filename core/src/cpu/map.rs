//! The CPU's elementwise family ([`ElementwiseOps`]): each operator variant is matched once,
//! outside the loop, so every arm is its own monomorphized (vectorizable) slice loop.

use super::broadcast::broadcast_apply;
use super::elementwise::{map_slice, zip_slices};
use super::{CpuStorage, HostElement};
use crate::dtype::{Element, Float};
use crate::error::{Error, Result};
use crate::ops::BinaryOp;
use crate::storage::{CmpOp, ElementwiseOps, Map, MapGrad};
use crate::{float_dispatch, with_buffer};

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

fn map_typed<T: Float>(s: &[T], op: Map) -> Vec<T> {
    let (zero, one) = (T::zero(), T::one());
    match op {
        Map::Neg => map_slice(s, |x: T| -x),
        Map::Exp => map_slice(s, |x: T| x.exp()),
        Map::Log => map_slice(s, |x: T| x.ln()),
        Map::Sqrt => map_slice(s, |x: T| x.sqrt()),
        Map::Square => map_slice(s, |x: T| x * x),
        Map::Abs => map_slice(s, |x: T| x.abs()),
        Map::Sign => map_slice(s, |x: T| {
            if x > zero {
                one
            } else if x < zero {
                -one
            } else {
                zero
            }
        }),
        Map::Sigmoid => map_slice(s, sigmoid::<T>),
        Map::Relu => map_slice(s, |x: T| if x > zero { x } else { zero }),
        Map::Tanh => map_slice(s, |x: T| x.tanh()),
        Map::Softrelu => map_slice(s, softplus::<T>),
        Map::LeakyRelu(a) => {
            let a = c::<T>(a);
            map_slice(s, |x: T| if x > zero { x } else { a * x })
        }
        Map::LeakyReluSlope(a) => {
            let a = c::<T>(a);
            map_slice(s, |x: T| if x > zero { one } else { a })
        }
        Map::AddScalar(v) => {
            let v = c::<T>(v);
            map_slice(s, |x: T| x + v)
        }
        Map::RsubScalar(v) => {
            let v = c::<T>(v);
            map_slice(s, |x: T| v - x)
        }
        Map::MulScalar(v) => {
            let v = c::<T>(v);
            map_slice(s, |x: T| x * v)
        }
        Map::DivScalar(v) => {
            let v = c::<T>(v);
            map_slice(s, |x: T| x / v)
        }
        Map::RdivScalar(v) => {
            let v = c::<T>(v);
            map_slice(s, |x: T| v / x)
        }
        Map::PowScalar(p) => {
            let p = c::<T>(p);
            map_slice(s, |x: T| x.powf(p))
        }
        Map::MaximumScalar(v) => {
            let v = c::<T>(v);
            map_slice(s, |x: T| if x >= v { x } else { v })
        }
        Map::MinimumScalar(v) => {
            let v = c::<T>(v);
            map_slice(s, |x: T| if x <= v { x } else { v })
        }
        Map::Clip(lo, hi) => {
            let (lo, hi) = (c::<T>(lo), c::<T>(hi));
            map_slice(s, |x: T| x.max(lo).min(hi))
        }
        Map::InsideMask(lo, hi) => {
            let (lo, hi) = (c::<T>(lo), c::<T>(hi));
            map_slice(s, |x: T| if x >= lo && x <= hi { one } else { zero })
        }
        Map::Sin => map_slice(s, |x: T| x.sin()),
        Map::Cos => map_slice(s, |x: T| x.cos()),
        Map::Tan => map_slice(s, |x: T| x.tan()),
        Map::Arcsin => map_slice(s, |x: T| x.asin()),
        Map::Arctan => map_slice(s, |x: T| x.atan()),
        Map::Sinh => map_slice(s, |x: T| x.sinh()),
        Map::Cosh => map_slice(s, |x: T| x.cosh()),
        Map::Arcsinh => map_slice(s, |x: T| x.asinh()),
        Map::Arctanh => map_slice(s, |x: T| x.atanh()),
        Map::Expm1 => map_slice(s, |x: T| x.exp_m1()),
        Map::Log1p => map_slice(s, |x: T| x.ln_1p()),
        Map::Cbrt => map_slice(s, |x: T| x.cbrt()),
        Map::Round => map_slice(s, |x: T| x.round()),
        Map::Rint => map_slice(s, |x: T| rint(x)),
        Map::Ceil => map_slice(s, |x: T| x.ceil()),
        Map::Floor => map_slice(s, |x: T| x.floor()),
        Map::Trunc => map_slice(s, |x: T| x.trunc()),
    }
}

/// Round half to even (C's `rint` in the default rounding mode).
#[inline]
fn rint<T: Float>(x: T) -> T {
    let r = x.round();
    let half = <T as Element>::from_f64(0.5);
    if (x - x.trunc()).abs() == half {
        // A tie: of the two neighbours, the even one.
        let two = <T as Element>::from_f64(2.0);
        (x / two).round() * two
    } else {
        r
    }
}

fn map_grad_typed<T: Float>(g: &[T], s: &[T], op: MapGrad) -> Vec<T> {
    let (zero, one) = (T::zero(), T::one());
    match op {
        MapGrad::SigmoidFromOutput => zip_slices(g, s, |gv: T, y: T| gv * y * (one - y)),
        MapGrad::ReluFromInput => zip_slices(g, s, |gv: T, x: T| if x > zero { gv } else { zero }),
        MapGrad::TanhFromOutput => zip_slices(g, s, |gv: T, y: T| gv * (one - y * y)),
        MapGrad::SoftreluFromInput => zip_slices(g, s, |gv: T, x: T| gv * sigmoid(x)),
    }
}

fn zip_typed<T: Float>(
    op: BinaryOp,
    x: &[T],
    xs: &[usize],
    y: &[T],
    ys: &[usize],
    out: &[usize],
) -> Vec<T> {
    match op {
        BinaryOp::Add => broadcast_apply(x, xs, y, ys, out, |p, q| p + q),
        BinaryOp::Sub => broadcast_apply(x, xs, y, ys, out, |p, q| p - q),
        BinaryOp::Mul => broadcast_apply(x, xs, y, ys, out, |p, q| p * q),
        BinaryOp::Div => broadcast_apply(x, xs, y, ys, out, |p, q| p / q),
        BinaryOp::Pow => broadcast_apply(x, xs, y, ys, out, |p: T, q: T| p.powf(q)),
        BinaryOp::Maximum => broadcast_apply(x, xs, y, ys, out, |p, q| if p >= q { p } else { q }),
        BinaryOp::Minimum => broadcast_apply(x, xs, y, ys, out, |p, q| if p <= q { p } else { q }),
    }
}

fn compare_typed<T: Element>(
    op: CmpOp,
    x: &[T],
    xs: &[usize],
    y: &[T],
    ys: &[usize],
    out: &[usize],
) -> Vec<T> {
    let (one, zero) = (T::from_f64(1.0), T::from_f64(0.0));
    let b = |t: bool| if t { one } else { zero };
    match op {
        CmpOp::Eq => broadcast_apply(x, xs, y, ys, out, |p, q| b(p == q)),
        CmpOp::Ne => broadcast_apply(x, xs, y, ys, out, |p, q| b(p != q)),
        CmpOp::Gt => broadcast_apply(x, xs, y, ys, out, |p, q| b(p > q)),
        CmpOp::Ge => broadcast_apply(x, xs, y, ys, out, |p, q| b(p >= q)),
        CmpOp::Lt => broadcast_apply(x, xs, y, ys, out, |p, q| b(p < q)),
        CmpOp::Le => broadcast_apply(x, xs, y, ys, out, |p, q| b(p <= q)),
    }
}

fn compare_scalar_typed<T: Element>(op: CmpOp, x: &[T], s: f64) -> Vec<T> {
    let (one, zero) = (T::from_f64(1.0), T::from_f64(0.0));
    let b = |t: bool| if t { one } else { zero };
    match op {
        CmpOp::Eq => map_slice(x, |p| b(p.to_f64() == s)),
        CmpOp::Ne => map_slice(x, |p| b(p.to_f64() != s)),
        CmpOp::Gt => map_slice(x, |p| b(p.to_f64() > s)),
        CmpOp::Ge => map_slice(x, |p| b(p.to_f64() >= s)),
        CmpOp::Lt => map_slice(x, |p| b(p.to_f64() < s)),
        CmpOp::Le => map_slice(x, |p| b(p.to_f64() <= s)),
    }
}

impl ElementwiseOps for CpuStorage {
    fn map(&self, op: Map) -> Result<Self> {
        crate::cpu::half::via_f32!(x = self => x.map(op));
        Ok(float_dispatch!(self.dtype(), op.name(), T => {
            T::into_buffer(map_typed(T::slice(self).unwrap(), op))
        }))
    }

    fn map_grad(&self, saved: &Self, op: MapGrad) -> Result<Self> {
        crate::cpu::half::via_f32!(g = self, s = saved => g.map_grad(s, op));
        if self.dtype() != saved.dtype() {
            return Err(Error::dtype_mismatch(
                op.name(),
                self.dtype(),
                saved.dtype(),
            ));
        }
        Ok(float_dispatch!(self.dtype(), op.name(), T => {
            T::into_buffer(map_grad_typed(T::slice(self).unwrap(), T::slice(saved).unwrap(), op))
        }))
    }

    fn zip(
        &self,
        xs: &[usize],
        y: &Self,
        ys: &[usize],
        out: &[usize],
        op: BinaryOp,
    ) -> Result<Self> {
        crate::cpu::half::via_f32!(a = self, b = y => a.zip(xs, b, ys, out, op));
        if self.dtype() != y.dtype() {
            return Err(Error::dtype_mismatch(op.name(), self.dtype(), y.dtype()));
        }
        Ok(float_dispatch!(self.dtype(), op.name(), T => {
            T::into_buffer(zip_typed(op, T::slice(self).unwrap(), xs, T::slice(y).unwrap(), ys, out))
        }))
    }

    fn compare(
        &self,
        xs: &[usize],
        y: &Self,
        ys: &[usize],
        out: &[usize],
        op: CmpOp,
    ) -> Result<Self> {
        if self.dtype() != y.dtype() {
            return Err(Error::dtype_mismatch("compare", self.dtype(), y.dtype()));
        }
        Ok(with_buffer!(self, x => {
            let y = y.as_slice().unwrap();
            HostElement::into_buffer(compare_typed(op, x.as_slice(), xs, y, ys, out))
        }))
    }

    fn compare_scalar(&self, s: f64, op: CmpOp) -> Result<Self> {
        Ok(with_buffer!(self, x => {
            HostElement::into_buffer(compare_scalar_typed(op, x.as_slice(), s))
        }))
    }
}
