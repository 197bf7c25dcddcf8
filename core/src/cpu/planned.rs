//! The CPU's kernels for planned graph nodes ([`PlannedOps`]): each computes what its eager
//! twin computes (the same per-element closures, the same summation order) into a given
//! buffer, so a planned training step allocates nothing for these nodes and gets eager's bits.

use super::broadcast::broadcast_apply_to;
use super::elementwise::zip_slices_to;
use super::linalg::bce_loss;
use super::map::{map_grad_with, sigmoid, GradToSlice};
use super::reduce::fold_axes_to;
use super::{CpuStorage, HostElement};
use crate::dtype::{Element, Float};
use crate::error::{Error, Result};
use crate::float_dispatch;
use crate::ops::fused::FusedAct;
use crate::ops::BinaryOp;
use crate::storage::{MapGrad, PlannedOps};
use num_traits::Zero;

/// `out`'s elements as `T`, checked to be `len` of them.
fn dst<'a, T: crate::dtype::Element>(
    op: &'static str,
    out: &'a mut CpuStorage,
    len: usize,
) -> Result<&'a mut [T]> {
    let have = out.dtype();
    match out.writable::<T>(op)? {
        Some(s) if s.len() == len => Ok(s),
        Some(s) => Err(Error::shape(
            op,
            format!(
                "output buffer holds {} elements, the result has {len}",
                s.len()
            ),
        )),
        None => Err(Error::dtype(
            op,
            format!(
                "output buffer is {}, the operands another dtype",
                have.name()
            ),
        )),
    }
}

/// Typed operand `x` of `op`, of the dtype `T` dispatched on.
fn src<'a, T: HostElement>(op: &'static str, x: &'a CpuStorage) -> Result<&'a [T]> {
    T::slice(x).ok_or_else(|| Error::dtype(op, "operands of different dtypes"))
}

/// Per element `g * act'(y)` from the output `y`: the closures of the eager `bias_act`
/// backward (`grad_from_output` in `linalg.rs`).
fn act_grad<T: Float>(act: FusedAct, g: T, y: T) -> T {
    match act {
        FusedAct::Sigmoid => g * (y * (T::one() - y)),
        FusedAct::Tanh => g * (T::one() - y * y),
        FusedAct::Relu => {
            if y > T::zero() {
                g
            } else {
                T::zero()
            }
        }
    }
}

impl PlannedOps for CpuStorage {
    fn map_grad_into(&self, saved: &Self, op: MapGrad, out: &mut Self) -> Result<()> {
        let name = op.name();
        float_dispatch!(self.dtype(), name, T => {
            let (g, s) = (src::<T>(name, self)?, src::<T>(name, saved)?);
            if g.len() != s.len() {
                return Err(Error::shape(name, "gradient and saved array differ in length"));
            }
            let o = dst::<T>(name, out, g.len())?;
            // The closures of the eager `map_grad`.
            map_grad_with(GradToSlice(g, s, o), op);
        });
        Ok(())
    }

    fn zip_into(
        &self,
        xs: &[usize],
        y: &Self,
        ys: &[usize],
        shape: &[usize],
        op: BinaryOp,
        out: &mut Self,
    ) -> Result<()> {
        let name = op.name();
        float_dispatch!(self.dtype(), name, T => {
            let (a, b) = (src::<T>(name, self)?, src::<T>(name, y)?);
            let o = dst::<T>(name, out, shape.iter().product())?;
            // The closures of the eager `zip` (`map.rs`).
            match op {
                BinaryOp::Add => broadcast_apply_to(a, xs, b, ys, shape, o, |p: T, q: T| p + q),
                BinaryOp::Sub => broadcast_apply_to(a, xs, b, ys, shape, o, |p: T, q: T| p - q),
                BinaryOp::Mul => broadcast_apply_to(a, xs, b, ys, shape, o, |p: T, q: T| p * q),
                BinaryOp::Div => broadcast_apply_to(a, xs, b, ys, shape, o, |p: T, q: T| p / q),
                BinaryOp::Pow => broadcast_apply_to(a, xs, b, ys, shape, o, |p: T, q: T| p.powf(q)),
                BinaryOp::Maximum => broadcast_apply_to(a, xs, b, ys, shape, o, |p: T, q: T| if p >= q { p } else { q }),
                BinaryOp::Minimum => broadcast_apply_to(a, xs, b, ys, shape, o, |p: T, q: T| if p <= q { p } else { q }),
            }
        });
        Ok(())
    }

    fn broadcast_into(&self, shape: &[usize], to: &[usize], out: &mut Self) -> Result<()> {
        let (zeros, ones) = ([0u8; 1], [1usize]);
        float_dispatch!(self.dtype(), "broadcast_to", T => {
            let a = src::<T>("broadcast_to", self)?;
            let o = dst::<T>("broadcast_to", out, to.iter().product())?;
            broadcast_apply_to(a, shape, &zeros[..], &ones[..], to, o, |x: T, _| x)
        });
        Ok(())
    }

    fn sum_into(&self, shape: &[usize], axes: &[usize], out: &mut Self) -> Result<()> {
        float_dispatch!(self.dtype(), "sum", T => {
            let a = src::<T>("sum", self)?;
            let n = shape.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, d)| d).product();
            let o = dst::<T>("sum", out, n)?;
            // The eager float sum's fold (`typed_float` in `reduce.rs`).
            fold_axes_to(a, shape, axes, T::zero(), |p: T, q: T| p + q, o)?
        });
        Ok(())
    }

    fn bias_act_grad_input_into(&self, y: &Self, act: FusedAct, out: &mut Self) -> Result<()> {
        const OP: &str = "bias_act backward";
        float_dispatch!(self.dtype(), OP, T => {
            let (g, ys) = (src::<T>(OP, self)?, src::<T>(OP, y)?);
            if g.len() != ys.len() {
                return Err(Error::shape(OP, "gradient and output differ in length"));
            }
            let o = dst::<T>(OP, out, g.len())?;
            match act {
                FusedAct::Sigmoid => zip_slices_to(g, ys, o, |gv: T, yv: T| act_grad(FusedAct::Sigmoid, gv, yv)),
                FusedAct::Tanh => zip_slices_to(g, ys, o, |gv: T, yv: T| act_grad(FusedAct::Tanh, gv, yv)),
                FusedAct::Relu => zip_slices_to(g, ys, o, |gv: T, yv: T| act_grad(FusedAct::Relu, gv, yv)),
            }
        });
        Ok(())
    }

    fn bias_act_grad_bias_into(
        &self,
        y: &Self,
        units: usize,
        act: FusedAct,
        out: &mut Self,
    ) -> Result<()> {
        const OP: &str = "bias_act backward";
        float_dispatch!(self.dtype(), OP, T => {
            let (g, ys) = (src::<T>(OP, self)?, src::<T>(OP, y)?);
            if g.len() != ys.len() || units == 0 || g.len() % units != 0 {
                return Err(Error::shape(OP, "gradient and output differ, or rows do not divide"));
            }
            let o = dst::<T>(OP, out, units)?;
            // Row by row in order from zero, as `column_sums` of the eager input gradient.
            o.fill(T::zero());
            for (gr, yr) in g.chunks_exact(units).zip(ys.chunks_exact(units)) {
                for ((a, &gv), &yv) in o.iter_mut().zip(gr).zip(yr) {
                    *a += act_grad(act, gv, yv);
                }
            }
        });
        Ok(())
    }

    fn column_sums_into(&self, units: usize, out: &mut Self) -> Result<()> {
        const OP: &str = "bias_act backward";
        float_dispatch!(self.dtype(), OP, T => {
            let g = src::<T>(OP, self)?;
            let o = dst::<T>(OP, out, units)?;
            o.fill(T::zero());
            if units > 0 {
                for row in g.chunks_exact(units) {
                    for (a, &v) in o.iter_mut().zip(row) {
                        *a += v;
                    }
                }
            }
        });
        Ok(())
    }

    fn sigmoid_bce_into(&self, z: &Self, out: &mut Self) -> Result<()> {
        const OP: &str = "SigmoidBinaryCrossEntropyLoss";
        float_dispatch!(self.dtype(), OP, T => {
            let (xs, zs) = (src::<T>(OP, self)?, src::<T>(OP, z)?);
            if xs.len() != zs.len() {
                return Err(Error::shape(OP, "logits and labels differ in length"));
            }
            // The eager kernel's loop (`zip_slices` of `bce_loss`).
            zip_slices_to(xs, zs, dst::<T>(OP, out, xs.len())?, bce_loss::<T>)
        });
        Ok(())
    }

    fn sigmoid_bce_grad_into(&self, x: &Self, z: &Self, out: &mut Self) -> Result<()> {
        const OP: &str = "SigmoidBinaryCrossEntropyLoss backward";
        float_dispatch!(self.dtype(), OP, T => {
            let (g, xs, zs) = (src::<T>(OP, self)?, src::<T>(OP, x)?, src::<T>(OP, z)?);
            if g.len() != xs.len() || g.len() != zs.len() {
                return Err(Error::shape(OP, "operands differ in length"));
            }
            let o = dst::<T>(OP, out, g.len())?;
            for (((d, &gv), &xv), &zv) in o.iter_mut().zip(g).zip(xs).zip(zs) {
                *d = gv * (sigmoid(xv) - zv);
            }
        });
        Ok(())
    }

    fn copy_into(&self, out: &mut Self) -> Result<()> {
        float_dispatch!(self.dtype(), "reshape", T => {
            let a = src::<T>("reshape", self)?;
            dst::<T>("reshape", out, a.len())?.copy_from_slice(a);
        });
        Ok(())
    }

    fn check_class_ids_into(&self, classes: usize, out: &mut Self) -> Result<()> {
        const OP: &str = "check_class_ids";
        float_dispatch!(self.dtype(), OP, T => {
            let a = src::<T>(OP, self)?;
            // The eager operator's test, on the same f64 values.
            if let Some((k, v)) = a
                .iter()
                .map(|x| x.to_f64())
                .enumerate()
                .find(|&(_, v)| v.fract() != 0.0 || v < 0.0 || v >= classes as f64)
            {
                return Err(Error::index(
                    OP,
                    format!("label {v} at position {k} is not a class in [0, {classes})"),
                ));
            }
            dst::<T>(OP, out, a.len())?.copy_from_slice(a);
        });
        Ok(())
    }

    fn dropout_mask_into(&mut self, p: f64, key: u64) -> Result<()> {
        use rand::RngExt;
        const OP: &str = "dropout_mask";
        // The eager operator's values: its Bernoulli draws of a kept element (probability
        // `1 - p`, the same chunked streams of `key`), each times `1 / (1 - p)` in `T`.
        let (q, keep) = (1.0 - p, 1.0 / (1.0 - p));
        match self.dtype() {
            crate::DType::F32 => {
                let (one, k) = (1.0f32, keep as f32);
                let o = dst::<f32>(OP, self, self.len())?;
                super::random::fill_into(key, o, |r| if r.random_bool(q) { one * k } else { 0.0 });
            }
            crate::DType::F64 => {
                let o = dst::<f64>(OP, self, self.len())?;
                super::random::fill_into(key, o, |r| if r.random_bool(q) { keep } else { 0.0 });
            }
            other => {
                return Err(Error::dtype(
                    OP,
                    format!("a planned mask is float32 or float64, not {}", other.name()),
                ))
            }
        }
        Ok(())
    }

    fn one_hot_into(&self, depth: usize, on: f64, off: f64, out: &mut Self) -> Result<()> {
        const OP: &str = "one_hot";
        float_dispatch!(self.dtype(), OP, T => {
            let a = src::<T>(OP, self)?;
            let n = a.len().checked_mul(depth).ok_or_else(|| {
                Error::shape(OP, format!("{} x {depth} elements overflow usize", a.len()))
            })?;
            // The eager operator's check (`index_values`), then its kernel (`one_hot_typed`).
            for (k, x) in a.iter().map(|x| x.to_f64()).enumerate() {
                if !(x.is_finite() && x.fract() == 0.0 && x.abs() < 9_223_372_036_854_775_808.0) {
                    return Err(Error::index(
                        OP,
                        format!("index {x} at position {k} is not an integer"),
                    ));
                }
            }
            let o = dst::<T>(OP, out, n)?;
            let (on, off) = (<T as Element>::from_f64(on), <T as Element>::from_f64(off));
            o.fill(off);
            for (r, x) in a.iter().enumerate() {
                let i = x.to_f64() as i64;
                if i >= 0 && (i as usize) < depth {
                    o[r * depth + i as usize] = on;
                }
            }
        });
        Ok(())
    }
}
