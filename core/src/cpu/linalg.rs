//! The CPU's dense-product family ([`LinalgOps`]): products through `gemm_into` (with the
//! `tiny` shapes first for the 2-D `dot`), and the loops of the fused bias + activation and
//! sigmoid binary cross-entropy operators. Each activation is matched once, outside its loop,
//! so every arm is its own monomorphized (vectorizable) loop.

use rayon::prelude::*;

use super::elementwise::{map_assign, zip_assign, zip_slices, PAR_THRESHOLD};
use super::gemm::{gemm_into, strides, GemmScalar, PARALLEL_MNK};
use super::map::sigmoid;
use super::{CpuStorage, HostElement};
use crate::dtype::Float;
use crate::error::{Error, Result};
use crate::float_dispatch;
use crate::ops::fused::FusedAct;
use crate::storage::{LinalgOps, MatMul};

/// Row length from which `bias_act` adds the bias and applies the activation in one pass per
/// row: 32 floats are one iteration of the 4x-unrolled 8-lane loop `zip_assign` compiles to.
const FUSE_MIN_UNITS: usize = 32;

/// `(a, b)` typed as `T`, or a dtype error naming `op` (the operator checked already; this
/// keeps a backend call with mixed dtypes an error, not a panic).
fn pair<'a, T: HostElement>(
    op: &'static str,
    a: &'a CpuStorage,
    b: &'a CpuStorage,
) -> Result<(&'a [T], &'a [T])> {
    match (T::slice(a), T::slice(b)) {
        (Some(x), Some(y)) => Ok((x, y)),
        _ => Err(Error::dtype_mismatch(op, a.dtype(), b.dtype())),
    }
}

/// The 2-D product of [`LinalgOps::matmul`]: the tiny kernels when they take the shape, else
/// `gemm_into` into a recycled buffer.
fn matmul_typed<T: GemmScalar>(a: &[T], b: &[T], mm: &MatMul) -> Vec<T> {
    let (m, n, k) = (mm.m, mm.n, mm.k);
    let (a_rs, a_cs) = strides(mm.a_cols(), mm.ta);
    let (b_rs, b_cs) = strides(mm.b_cols(), mm.tb);
    match super::tiny::product(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs) {
        Some(out) => out,
        None => {
            // gemm overwrites every element (it never reads dst), so a recycled buffer
            // serves: large weight gradients (X^T G) then reuse the previous step's memory.
            let mut out = crate::recycle::overwritable_vec::<T>(m * n);
            gemm_into(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, &mut out);
            out
        }
    }
}

/// [`matmul_typed`] written into `out` (`m * n` elements): the same kernel choice, so the
/// same bits; a tiny product's kernels write straight into `out`.
fn matmul_into_typed<T: GemmScalar>(a: &[T], b: &[T], mm: &MatMul, out: &mut [T]) {
    let (m, n, k) = (mm.m, mm.n, mm.k);
    let (a_rs, a_cs) = strides(mm.a_cols(), mm.ta);
    let (b_rs, b_cs) = strides(mm.b_cols(), mm.tb);
    if !super::tiny::product_to(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, out) {
        gemm_into(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, out)
    }
}

/// `out` typed as `T` and of `len` elements, or an error naming `op` (the executor sized it
/// from the graph; this keeps a mismatch an error, not a panic).
fn out_slice<'a, T: crate::dtype::Element>(
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
        None => Err(Error::dtype_mismatch(op, T::DTYPE, have)),
    }
}

/// The batch of products of [`LinalgOps::batched_matmul`].
fn batched_typed<T: GemmScalar>(
    x: &[T],
    y: &[T],
    mm: &MatMul,
    offsets: &[(usize, usize)],
) -> Vec<T> {
    let (m, n, k) = (mm.m, mm.n, mm.k);
    let (a_len, b_len) = (m * k, k * n);
    let (a_rs, a_cs) = strides(mm.a_cols(), mm.ta);
    let (b_rs, b_cs) = strides(mm.b_cols(), mm.tb);
    let nb = offsets.len();
    let mut out = vec![<T as num_traits::Zero>::zero(); nb * m * n];
    let one = |(i, dst): (usize, &mut [T])| {
        let (oa, ob) = offsets[i];
        gemm_into(
            m,
            n,
            k,
            &x[oa..oa + a_len],
            a_rs,
            a_cs,
            &y[ob..ob + b_len],
            b_rs,
            b_cs,
            dst,
        );
    };
    if m * n > 0 {
        // Big matrices parallelise inside gemm_into; smaller ones (which gemm_into runs on
        // one thread) parallelise over the batch.
        if nb > 1 && m.saturating_mul(n).saturating_mul(k) < PARALLEL_MNK {
            out.par_chunks_mut(m * n).enumerate().for_each(one);
        } else {
            out.chunks_mut(m * n).enumerate().for_each(one);
        }
    }
    out
}

/// `v[i] = act(v[i])`, in parallel chunks above [`PAR_THRESHOLD`] (as the standalone
/// activation ops are), on this thread below it.
fn apply_in_place<T: Float + Send>(act: FusedAct, v: &mut [T]) {
    if v.len() >= PAR_THRESHOLD {
        v.par_chunks_mut(PAR_THRESHOLD / 2)
            .for_each(|c| apply_chunk(act, c));
    } else {
        apply_chunk(act, v);
    }
}

/// The loop of [`apply_in_place`]. The match is outside the loop: with it inside, the loop
/// stayed scalar (callgrind: 7x the instructions of the vectorized map).
fn apply_chunk<T: Float>(act: FusedAct, v: &mut [T]) {
    match act {
        FusedAct::Sigmoid => map_assign(v, |x: T| sigmoid(x)),
        FusedAct::Tanh => map_assign(v, |x: T| x.tanh()),
        FusedAct::Relu => map_assign(v, |x: T| if x > T::zero() { x } else { T::zero() }),
    }
}

/// `row[j] = act(row[j] + b[j])` for every `units`-long row of `v`, in one pass per row on
/// the calling thread (AVX2 through [`zip_assign`]); bit-identical to adding the bias and then
/// applying [`apply_in_place`]. The match is outside the loops, as there.
fn add_bias_apply<T: Float>(act: FusedAct, v: &mut [T], b: &[T]) {
    fn rows<T: Float>(v: &mut [T], b: &[T], f: impl Fn(T, T) -> T + Copy) {
        for row in v.chunks_exact_mut(b.len()) {
            zip_assign(row, b, f);
        }
    }
    match act {
        FusedAct::Sigmoid => rows(v, b, |x: T, c: T| sigmoid(x + c)),
        FusedAct::Tanh => rows(v, b, |x: T, c: T| (x + c).tanh()),
        FusedAct::Relu => rows(v, b, |x: T, c: T| {
            let y = x + c;
            if y > T::zero() {
                y
            } else {
                T::zero()
            }
        }),
    }
}

/// `act(y + b)` per row, as a new vector.
fn bias_act_typed<T: Float + Send>(
    ys: &[T],
    bs: &[T],
    units: usize,
    act: Option<FusedAct>,
) -> Vec<T> {
    let mut out = ys.to_vec();
    bias_act_in_place_typed(&mut out, bs, units, act);
    out
}

/// `out[r, j] = act(out[r, j] + b[j])` in place: the loops of [`bias_act_typed`], which copies
/// `y` and runs this, so a planned graph writing into its own buffer gets the same bits.
fn bias_act_in_place_typed<T: Float + Send>(
    out: &mut [T],
    bs: &[T],
    units: usize,
    act: Option<FusedAct>,
) {
    if units > 0 {
        match act {
            // Small outputs (a training step's few rows) with rows of at least one unrolled
            // AVX2 iteration: bias and activation in one pass per row. Narrower rows would
            // run the activation in the loop's scalar tail, so they (and large outputs) add
            // the bias per row and map the activation over the whole buffer.
            Some(a) if out.len() < PAR_THRESHOLD && units >= FUSE_MIN_UNITS => {
                add_bias_apply(a, out, bs)
            }
            _ => {
                for row in out.chunks_exact_mut(units) {
                    zip_assign(row, bs, |v: T, c: T| v + c);
                }
                if let Some(a) = act {
                    apply_in_place(a, out);
                }
            }
        }
    }
}

/// `g[i] * act'(x_i)` from the outputs `y[i] = act(x_i)`.
fn grad_from_output<T: Float + Send + Sync>(act: FusedAct, g: &[T], y: &[T]) -> Vec<T> {
    match act {
        FusedAct::Sigmoid => zip_slices(g, y, |gv: T, yv: T| gv * (yv * (T::one() - yv))),
        FusedAct::Tanh => zip_slices(g, y, |gv: T, yv: T| gv * (T::one() - yv * yv)),
        FusedAct::Relu => zip_slices(
            g,
            y,
            |gv: T, yv: T| if yv > T::zero() { gv } else { T::zero() },
        ),
    }
}

/// Sums of the rows of a row-major `(len / units, units)` matrix.
fn column_sums_typed<T: Float>(g: &[T], units: usize) -> Vec<T> {
    let mut acc = vec![T::zero(); units];
    if units > 0 {
        for row in g.chunks_exact(units) {
            for (a, &v) in acc.iter_mut().zip(row) {
                *a = *a + v;
            }
        }
    }
    acc
}

/// The sigmoid binary cross-entropy of one logit `x` and label `z`.
#[inline]
pub(crate) fn bce_loss<T: Float>(x: T, z: T) -> T {
    // max(x, 0) - x z + log(1 + exp(-|x|)): finite for any |x|.
    let zero = T::zero();
    let relu = if x > zero { x } else { zero };
    relu - x * z + (-x.abs()).exp_fast_nonpos().ln_1p()
}

impl LinalgOps for CpuStorage {
    fn matmul(&self, rhs: &Self, mm: &MatMul) -> Result<Self> {
        crate::cpu::half::via_f32!(a = self, b = rhs => a.matmul(b, mm));
        Ok(float_dispatch!(self.dtype(), "dot", T => {
            let (a, b) = pair::<T>("dot", self, rhs)?;
            T::into_buffer(matmul_typed(a, b, mm))
        }))
    }

    fn batched_matmul(&self, rhs: &Self, mm: &MatMul, offsets: &[(usize, usize)]) -> Result<Self> {
        crate::cpu::half::via_f32!(a = self, b = rhs => a.batched_matmul(b, mm, offsets));
        Ok(float_dispatch!(self.dtype(), "matmul", T => {
            let (a, b) = pair::<T>("matmul", self, rhs)?;
            T::into_buffer(batched_typed(a, b, mm, offsets))
        }))
    }

    fn bias_act(&self, bias: &Self, units: usize, act: Option<FusedAct>) -> Result<Self> {
        crate::cpu::half::via_f32!(y = self, b = bias => y.bias_act(b, units, act));
        Ok(float_dispatch!(self.dtype(), "bias_act", T => {
            let (ys, bs) = pair::<T>("bias_act", self, bias)?;
            T::into_buffer(bias_act_typed(ys, bs, units, act))
        }))
    }

    fn matmul_into(&self, rhs: &Self, mm: &MatMul, out: &mut Self) -> Result<()> {
        float_dispatch!(self.dtype(), "dot", T => {
            let (a, b) = pair::<T>("dot", self, rhs)?;
            matmul_into_typed(a, b, mm, out_slice::<T>("dot", out, mm.m * mm.n)?)
        });
        Ok(())
    }

    fn bias_act_in_place(
        &mut self,
        bias: &Self,
        units: usize,
        act: Option<FusedAct>,
    ) -> Result<()> {
        if self.dtype() != bias.dtype() {
            return Err(Error::dtype_mismatch(
                "bias_act",
                self.dtype(),
                bias.dtype(),
            ));
        }
        let len = self.len();
        float_dispatch!(bias.dtype(), "bias_act", T => {
            let bs = T::slice(bias).unwrap();
            bias_act_in_place_typed(out_slice::<T>("bias_act", self, len)?, bs, units, act)
        });
        Ok(())
    }

    fn bias_act_into(
        &self,
        bias: &Self,
        units: usize,
        act: Option<FusedAct>,
        out: &mut Self,
    ) -> Result<()> {
        float_dispatch!(self.dtype(), "bias_act", T => {
            let (ys, bs) = pair::<T>("bias_act", self, bias)?;
            let o = out_slice::<T>("bias_act", out, ys.len())?;
            o.copy_from_slice(ys);
            bias_act_in_place_typed(o, bs, units, act)
        });
        Ok(())
    }

    fn bias_act_grad(&self, out: &Self, units: usize, act: FusedAct) -> Result<(Self, Self)> {
        crate::cpu::half::via_f32!(g = self, y = out => g.bias_act_grad(y, units, act));
        const OP: &str = "bias_act backward";
        Ok(float_dispatch!(out.dtype(), OP, T => {
            let (gs, ys) = pair::<T>(OP, self, out)?;
            let gp = grad_from_output(act, gs, ys);
            let db = column_sums_typed(&gp, units);
            (T::into_buffer(gp), T::into_buffer(db))
        }))
    }

    fn act_derivative(&self, act: FusedAct) -> Result<Self> {
        crate::cpu::half::via_f32!(y = self => y.act_derivative(act));
        Ok(float_dispatch!(self.dtype(), "bias_act backward", T => {
            let ys = T::slice(self).unwrap();
            T::into_buffer(grad_from_output(act, &vec![1.0 as T; ys.len()], ys))
        }))
    }

    fn column_sums(&self, units: usize) -> Result<Self> {
        crate::cpu::half::via_f32!(y = self => y.column_sums(units));
        Ok(float_dispatch!(self.dtype(), "bias_act backward", T => {
            T::into_buffer(column_sums_typed(T::slice(self).unwrap(), units))
        }))
    }

    fn sigmoid_bce(&self, z: &Self) -> Result<Self> {
        crate::cpu::half::via_f32!(x = self, zz = z => x.sigmoid_bce(zz));
        const OP: &str = "SigmoidBinaryCrossEntropyLoss";
        Ok(float_dispatch!(self.dtype(), OP, T => {
            let (xs, zs) = pair::<T>(OP, self, z)?;
            T::into_buffer(zip_slices(xs, zs, bce_loss::<T>))
        }))
    }

    fn sigmoid_bce_grad(&self, x: &Self, z: &Self, need_dz: bool) -> Result<(Self, Option<Self>)> {
        crate::cpu::half::via_f32!(g = self, xx = x, zz = z => g.sigmoid_bce_grad(xx, zz, need_dz));
        const OP: &str = "SigmoidBinaryCrossEntropyLoss backward";
        Ok(float_dispatch!(self.dtype(), OP, T => {
            let (gs, xs) = pair::<T>(OP, self, x)?;
            let (_, zs) = pair::<T>(OP, self, z)?;
            let dx: Vec<T> = gs.iter().zip(xs).zip(zs).map(|((&g, &x), &z)| g * (sigmoid(x) - z)).collect();
            let dz = need_dz.then(|| T::into_buffer(zip_slices(gs, xs, |g: T, x: T| -g * x)));
            (T::into_buffer(dx), dz)
        }))
    }
}
