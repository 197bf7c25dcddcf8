//! The CPU's elementwise family ([`ElementwiseOps`]): each operator variant is matched once,
//! outside the loop, so every arm is its own monomorphized (vectorizable) slice loop.

use super::broadcast::broadcast_apply;
use super::elementwise::{map_in_place, map_slice, map_slice_to, zip_slices, zip_slices_to};
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

/// Where a map's results go: a new vector, another buffer, or the input itself. The one match
/// over [`Map`] ([`map_with`]) serves all three, so a planned graph's output written into its
/// buffer or in place holds the same bits as the operator's new array.
pub(super) trait MapSink<T> {
    /// What the map returns.
    type Out;
    /// Apply `f` to every element.
    fn run(self, f: impl Fn(T) -> T + Sync + Send) -> Self::Out;
}

/// Where a fused backward's results go (gradient, saved array): a new vector or another
/// buffer. The one match over [`MapGrad`] ([`map_grad_with`]) serves the eager backward and
/// the planned node alike.
pub(crate) trait GradSink<T> {
    /// What the backward returns.
    type Out;
    /// Apply `f(g, s)` to every pair.
    fn run(self, f: impl Fn(T, T) -> T + Sync + Send) -> Self::Out;
}

/// The gradients as a new vector.
struct GradToVec<'a, T>(&'a [T], &'a [T]);
/// The gradients written into a buffer of the same length.
pub(crate) struct GradToSlice<'a, T>(
    pub(crate) &'a [T],
    pub(crate) &'a [T],
    pub(crate) &'a mut [T],
);

impl<T: Copy + Send + Sync> GradSink<T> for GradToVec<'_, T> {
    type Out = Vec<T>;
    fn run(self, f: impl Fn(T, T) -> T + Sync + Send) -> Vec<T> {
        zip_slices(self.0, self.1, f)
    }
}
impl<T: Copy + Send + Sync> GradSink<T> for GradToSlice<'_, T> {
    type Out = ();
    fn run(self, f: impl Fn(T, T) -> T + Sync + Send) {
        zip_slices_to(self.0, self.1, self.2, f)
    }
}

/// The fused backward `op` of (gradient, saved array) pairs.
pub(crate) fn map_grad_with<T: Float, K: GradSink<T>>(k: K, op: MapGrad) -> K::Out {
    let (zero, one) = (T::zero(), T::one());
    match op {
        MapGrad::SigmoidFromOutput => k.run(|gv: T, y: T| gv * y * (one - y)),
        MapGrad::ReluFromInput => k.run(|gv: T, x: T| if x > zero { gv } else { zero }),
        MapGrad::TanhFromOutput => k.run(|gv: T, y: T| gv * (one - y * y)),
        MapGrad::SoftreluFromInput => k.run(|gv: T, x: T| gv * sigmoid(x)),
        MapGrad::Act(f) => super::activation::act_grad(k, f),
    }
}

/// The results as a new vector.
struct ToVec<'a, T>(&'a [T]);
/// The results written into a buffer of the input's length.
struct ToSlice<'a, T>(&'a [T], &'a mut [T]);
/// The results written over the input.
struct InPlace<'a, T>(&'a mut [T]);

impl<T: Copy + Send + Sync> MapSink<T> for ToVec<'_, T> {
    type Out = Vec<T>;
    fn run(self, f: impl Fn(T) -> T + Sync + Send) -> Vec<T> {
        map_slice(self.0, f)
    }
}
impl<T: Copy + Send + Sync> MapSink<T> for ToSlice<'_, T> {
    type Out = ();
    fn run(self, f: impl Fn(T) -> T + Sync + Send) {
        map_slice_to(self.0, self.1, f)
    }
}
impl<T: Copy + Send + Sync> MapSink<T> for InPlace<'_, T> {
    type Out = ();
    fn run(self, f: impl Fn(T) -> T + Sync + Send) {
        map_in_place(self.0, f)
    }
}

/// Elements per block of a fused chain of maps: the block stays in L1 (16 KB of f32) while
/// every map of the chain passes over it, so the chain reads and writes memory once.
const CHAIN_BLOCK: usize = 4096;

/// Run `f(start, block)` over `dst` in blocks of [`CHAIN_BLOCK`] elements, in parallel when
/// `dst` is large enough for the standalone maps to run in parallel.
fn chain_blocks<T: Send>(dst: &mut [T], f: impl Fn(usize, &mut [T]) + Sync + Send) {
    use rayon::prelude::*;
    if dst.len() >= super::elementwise::PAR_THRESHOLD {
        dst.par_chunks_mut(CHAIN_BLOCK)
            .enumerate()
            .for_each(|(i, b)| f(i * CHAIN_BLOCK, b));
    } else {
        for (i, b) in dst.chunks_mut(CHAIN_BLOCK).enumerate() {
            f(i * CHAIN_BLOCK, b);
        }
    }
}

fn map_typed<T: Float>(s: &[T], op: Map) -> Vec<T> {
    map_with(ToVec(s), op)
}

fn map_with<T: Float, K: MapSink<T>>(k: K, op: Map) -> K::Out {
    let (zero, one) = (T::zero(), T::one());
    match op {
        Map::Neg => k.run(|x: T| -x),
        Map::Exp => k.run(|x: T| x.exp()),
        Map::Log => k.run(|x: T| x.ln()),
        Map::Sqrt => k.run(|x: T| x.sqrt()),
        Map::Square => k.run(|x: T| x * x),
        Map::Abs => k.run(|x: T| x.abs()),
        Map::Sign => k.run(|x: T| {
            if x > zero {
                one
            } else if x < zero {
                -one
            } else {
                zero
            }
        }),
        Map::Sigmoid => k.run(sigmoid::<T>),
        Map::Relu => k.run(|x: T| if x > zero { x } else { zero }),
        Map::Tanh => k.run(|x: T| x.tanh()),
        Map::Softrelu => k.run(softplus::<T>),
        Map::LeakyRelu(a) => {
            let a = c::<T>(a);
            k.run(|x: T| if x > zero { x } else { a * x })
        }
        Map::LeakyReluSlope(a) => {
            let a = c::<T>(a);
            k.run(|x: T| if x > zero { one } else { a })
        }
        Map::AddScalar(v) => {
            let v = c::<T>(v);
            k.run(|x: T| x + v)
        }
        Map::RsubScalar(v) => {
            let v = c::<T>(v);
            k.run(|x: T| v - x)
        }
        Map::MulScalar(v) => {
            let v = c::<T>(v);
            k.run(|x: T| x * v)
        }
        Map::DivScalar(v) => {
            let v = c::<T>(v);
            k.run(|x: T| x / v)
        }
        Map::RdivScalar(v) => {
            let v = c::<T>(v);
            k.run(|x: T| v / x)
        }
        Map::PowScalar(p) => {
            let p = c::<T>(p);
            k.run(|x: T| x.powf(p))
        }
        Map::MaximumScalar(v) => {
            let v = c::<T>(v);
            k.run(|x: T| if x >= v { x } else { v })
        }
        Map::MinimumScalar(v) => {
            let v = c::<T>(v);
            k.run(|x: T| if x <= v { x } else { v })
        }
        Map::Clip(lo, hi) => {
            let (lo, hi) = (c::<T>(lo), c::<T>(hi));
            k.run(|x: T| x.max(lo).min(hi))
        }
        Map::InsideMask(lo, hi) => {
            let (lo, hi) = (c::<T>(lo), c::<T>(hi));
            k.run(|x: T| if x >= lo && x <= hi { one } else { zero })
        }
        Map::Sin => k.run(|x: T| x.sin()),
        Map::Cos => k.run(|x: T| x.cos()),
        Map::Tan => k.run(|x: T| x.tan()),
        Map::Arcsin => k.run(|x: T| x.asin()),
        Map::Arctan => k.run(|x: T| x.atan()),
        Map::Sinh => k.run(|x: T| x.sinh()),
        Map::Cosh => k.run(|x: T| x.cosh()),
        Map::Arcsinh => k.run(|x: T| x.asinh()),
        Map::Arctanh => k.run(|x: T| x.atanh()),
        Map::Expm1 => k.run(|x: T| x.exp_m1()),
        Map::Log1p => k.run(|x: T| x.ln_1p()),
        Map::Cbrt => k.run(|x: T| x.cbrt()),
        Map::Round => k.run(|x: T| x.round()),
        Map::Rint => k.run(|x: T| rint(x)),
        Map::Ceil => k.run(|x: T| x.ceil()),
        Map::Floor => k.run(|x: T| x.floor()),
        Map::Trunc => k.run(|x: T| x.trunc()),
        Map::Act(f) => super::activation::act_map(k, f),
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
    map_grad_with(GradToVec(g, s), op)
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

    fn map_into(&self, op: Map, out: &mut Self) -> Result<()> {
        if self.dtype() != out.dtype() {
            return Err(Error::dtype_mismatch(op.name(), self.dtype(), out.dtype()));
        }
        float_dispatch!(self.dtype(), op.name(), T => {
            let src = T::slice(self).unwrap();
            let dst = out.writable::<T>(op.name())?.unwrap();
            if dst.len() != src.len() {
                return Err(Error::shape(
                    op.name(),
                    format!("output buffer holds {} elements, the input {}", dst.len(), src.len()),
                ));
            }
            map_with(ToSlice(src, dst), op)
        });
        Ok(())
    }

    fn map_in_place(&mut self, op: Map) -> Result<()> {
        float_dispatch!(self.dtype(), op.name(), T => {
            map_with(InPlace(self.writable::<T>(op.name())?.unwrap()), op)
        });
        Ok(())
    }

    fn map_chain_into(&self, ops: &[Map], out: &mut Self) -> Result<()> {
        let Some((&head, rest)) = ops.split_first() else {
            return Err(Error::arg("map chain", "a chain needs at least one map"));
        };
        if self.dtype() != out.dtype() {
            return Err(Error::dtype_mismatch(
                head.name(),
                self.dtype(),
                out.dtype(),
            ));
        }
        float_dispatch!(self.dtype(), head.name(), T => {
            let src = T::slice(self).unwrap();
            let dst = out.writable::<T>(head.name())?.unwrap();
            if dst.len() != src.len() {
                return Err(Error::shape(
                    head.name(),
                    format!("output buffer holds {} elements, the input {}", dst.len(), src.len()),
                ));
            }
            chain_blocks(dst, |start, block| {
                map_with(ToSlice(&src[start..start + block.len()], block), head);
                for &op in rest {
                    map_with(InPlace(block), op);
                }
            })
        });
        Ok(())
    }

    fn map_chain_in_place(&mut self, ops: &[Map]) -> Result<()> {
        let name = ops.first().map_or("map chain", |m| m.name());
        float_dispatch!(self.dtype(), name, T => {
            chain_blocks(self.writable::<T>(name)?.unwrap(), |_, block| {
                for &op in ops {
                    map_with(InPlace(block), op);
                }
            })
        });
        Ok(())
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
