//! The CPU's update family ([`UpdateOps`]): each [`UpdateRule`] is matched once, outside the
//! span loop of `super::update`, so every rule is its own monomorphized per-element loop (the
//! formulas of MXNet 1.9.1's kernels, in the weight's dtype).

use std::ops::Range;
use std::sync::{Arc, Mutex};

use super::update::{
    apply_chunks, apply_elementwise, apply_packed, apply_rows, apply_zip, host_grad, HostGrad,
};
use super::CpuStorage;
use crate::error::{Error, Result};
use crate::ops::map_assign;
use crate::storage::{GradRef, UpdateOps, UpdateRule, UpdateScalars};
use crate::{DType, Element, Float};

/// Round an f64 hyper-parameter to the kernel's element type (MXNet passes f32 to f32 kernels).
#[inline]
fn cast<T: Float>(v: f64) -> T {
    <T as Element>::from_f64(v)
}

/// MXNet's `clip::Map`: clamp to `[-c, c]` when clipping is on.
#[inline]
fn clip<T: Float>(x: T, c: Option<T>) -> T {
    match c {
        Some(c) => {
            if x > c {
                c
            } else if x < -c {
                -c
            } else {
                x
            }
        }
        None => x,
    }
}

/// The sign as MXNet's `sign::Map` computes it (0 for 0).
#[inline]
fn sign<T: Float>(x: T) -> T {
    if x > T::zero() {
        T::one()
    } else if x < T::zero() {
        -T::one()
    } else {
        T::zero()
    }
}

/// The shared scalars rounded to `T`.
struct Scalars<T> {
    lr: T,
    wd: T,
    /// `rescale_grad`.
    rg: T,
    /// `clip_gradient`.
    clip: Option<T>,
}

/// The shared scalars rounded to `T`, as every rule reads them.
fn scalars<T: Float>(s: &UpdateScalars) -> Scalars<T> {
    Scalars {
        lr: cast(s.lr),
        wd: cast(s.wd),
        rg: cast(s.rescale_grad),
        clip: s.clip.map(cast),
    }
}

/// The `N` states of a rule as typed slices, each checked to hold the weight's `n` elements.
fn typed_states<'a, T: Float, const N: usize>(
    op: &'static str,
    states: &'a mut [&mut CpuStorage],
    n: usize,
    dtype_err: impl Fn() -> Error,
) -> Result<[&'a mut [T]; N]> {
    if states.len() != N {
        return Err(Error::arg(
            op,
            format!("expects {N} state arrays, got {}", states.len()),
        ));
    }
    let mut out: [&mut [T]; N] = std::array::from_fn(|_| Default::default());
    for (o, s) in out.iter_mut().zip(states.iter_mut()) {
        let s = s.writable::<T>(op)?.ok_or_else(&dtype_err)?;
        if s.len() != n {
            return Err(Error::shape(op, "state size differs from the weight's"));
        }
        *o = s;
    }
    Ok(out)
}

/// One COCOB step of one element, shared by the five-array and the packed layouts so that
/// both compute the same bits.
#[derive(Clone, Copy)]
struct CocobStep<T> {
    lr: T,
    wd: T,
    rg: T,
    c: Option<T>,
}

impl<T: Float> CocobStep<T> {
    /// `h = clip(rescale*g) + wd*w`; `w0 <- w` while `l = 0`; `l <- max(l, |h|)`; once `l > 0`:
    /// `s += |h|; r <- max(r - h*(w - w0), 0); theta += h;
    /// w <- w0 - lr * theta / (l * max(s + l, alpha*l)) * (l + r)`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn apply(
        self,
        alpha: T,
        w: &mut T,
        g: T,
        l: &mut T,
        s: &mut T,
        r: &mut T,
        th: &mut T,
        w0: &mut T,
    ) {
        let zero = T::zero();
        let h = clip(g * self.rg, self.c) + self.wd * *w;
        if *l == zero {
            *w0 = *w;
        }
        let a = h.abs();
        if a > *l {
            *l = a;
        }
        // Nothing seen yet: no bet.
        if *l == zero {
            return;
        }
        *s = *s + a;
        let won = *r - h * (*w - *w0);
        *r = if won > zero { won } else { zero };
        *th = *th + h;
        let scale = if *s + *l > alpha * *l {
            *s + *l
        } else {
            alpha * *l
        };
        *w = *w0 - self.lr * *th / (*l * scale) * (*l + *r);
    }
}

/// [`UpdateOps::update`] in the element type `T` (the weight's).
fn update_typed<T: Float>(
    w: &mut CpuStorage,
    rows: usize,
    grad: GradRef<'_, CpuStorage, Arc<Vec<i64>>>,
    states: &mut [&mut CpuStorage],
    sc: &UpdateScalars,
    rule: &UpdateRule,
    lazy: bool,
) -> Result<[f64; 2]> {
    let op = rule.name();
    let dtype_err = || Error::dtype(op, "weight, gradient and states must share one float dtype");
    let w = w.writable::<T>(op)?.ok_or_else(dtype_err)?;
    let n = w.len();
    let Scalars {
        lr,
        wd,
        rg,
        clip: c,
    } = scalars::<T>(sc);
    let one = T::one();
    macro_rules! states {
        ($n:literal) => {
            typed_states::<T, $n>(op, states, n, dtype_err)?
        };
    }
    // The states are checked before the gradient, as the span loop always did.
    let checked: HostGrad<'_, T>;
    macro_rules! grad {
        () => {{
            checked = host_grad::<T>(op, grad, n, rows, dtype_err)?;
            &checked
        }};
    }
    match *rule {
        UpdateRule::Sgd => {
            let g = grad!();
            // The clip test is hoisted out of the element loop so the common unclipped update is
            // a straight-line fused multiply-add LLVM vectorizes.
            let decay = one - lr * wd;
            match c {
                Some(_) => apply_elementwise::<T, 0, _>(w, rows, g, [], lazy, move |w, g, []| {
                    *w = decay * *w - lr * clip(rg * g, c)
                }),
                None => {
                    // Span-level loops rather than the per-element callback: this is the whole
                    // update of the common case, run 8 lanes wide on AVX2 (bit-identical to the
                    // plain loop); a small lazy row_sparse step is one loop over its rows.
                    let step = lr * rg;
                    apply_zip(
                        w,
                        rows,
                        g,
                        lazy,
                        move |w: T, g: T| decay * w - step * g,
                        move |w: &mut [T]| {
                            if decay != one {
                                map_assign(w, |w| decay * w);
                            }
                        },
                    )?
                }
            }
        }
        UpdateRule::SgdMom { momentum } => {
            let st = states!(1);
            let mu: T = cast(momentum);
            apply_elementwise::<T, 1, _>(w, rows, grad!(), st, lazy, move |w, g, [m]| {
                *m = match c {
                    Some(_) => mu * *m - lr * wd * *w - lr * clip(rg * g, c),
                    None => mu * *m - lr * wd * *w - lr * rg * g,
                };
                *w = *w + *m;
            })
        }
        UpdateRule::NagMom { momentum } => {
            let st = states!(1);
            let mu: T = cast(momentum);
            apply_elementwise::<T, 1, _>(w, rows, grad!(), st, lazy, move |w, g, [m]| {
                let gr = match c {
                    Some(_) => clip(rg * g, c),
                    None => rg * g,
                };
                *m = mu * *m;
                *w = *w - *m + (mu + one) * (*m - lr * (gr + wd * *w));
                *m = *m - lr * (gr + wd * *w);
            })
        }
        UpdateRule::SignSgd => {
            apply_elementwise::<T, 0, _>(w, rows, grad!(), [], lazy, move |w, g, []| {
                *w = (one - lr * wd) * *w - lr * sign(g);
            })
        }
        UpdateRule::Signum { momentum, wd_lh } => {
            let st = states!(1);
            let mu: T = cast(momentum);
            let wd_lh: T = cast(wd_lh);
            apply_elementwise::<T, 1, _>(w, rows, grad!(), st, lazy, move |w, g, [m]| {
                *m = match c {
                    Some(_) => mu * *m - (one - mu) * wd * *w - (one - mu) * clip(rg * g, c),
                    None => mu * *m - (one - mu) * wd * *w - (one - mu) * rg * g,
                };
                *w = (one - lr * wd_lh) * *w + lr * sign(*m);
            })
        }
        UpdateRule::Adam {
            beta1,
            beta2,
            epsilon,
        } => {
            let st = states!(2);
            let (b1, b2, eps): (T, T, T) = (cast(beta1), cast(beta2), cast(epsilon));
            apply_elementwise::<T, 2, _>(w, rows, grad!(), st, lazy, move |w, g, [m, v]| {
                let h = clip(g * rg + *w * wd, c);
                *m = b1 * *m + (one - b1) * h;
                *v = b2 * *v + (one - b2) * h * h;
                *w = *w - lr * *m / (v.sqrt() + eps);
            })
        }
        UpdateRule::AdamW {
            beta1,
            beta2,
            epsilon,
        } => {
            let st = states!(2);
            let eta = lr;
            let (b1, b2, eps): (T, T, T) = (cast(beta1), cast(beta2), cast(epsilon));
            apply_elementwise::<T, 2, _>(w, rows, grad!(), st, lazy, move |w, g, [m, v]| {
                let h = clip(g * rg, c);
                *m = b1 * *m + (one - b1) * h;
                *v = b2 * *v + (one - b2) * h * h;
                *w = *w - eta * (*m / (v.sqrt() + eps) + wd * *w);
            })
        }
        UpdateRule::Adamax { beta1, beta2 } => {
            let st = states!(2);
            let (b1, b2): (T, T) = (cast(beta1), cast(beta2));
            apply_elementwise::<T, 2, _>(w, rows, grad!(), st, lazy, move |w, g, [m, u]| {
                let h = clip(g * rg + wd * *w, c);
                *m = b1 * *m + (one - b1) * h;
                *u = (b2 * *u).max(h.abs());
                if *u != T::zero() {
                    *w = *w - lr * *m / *u;
                }
            })
        }
        UpdateRule::Nadam {
            beta1,
            beta2,
            epsilon,
            d_g,
            d_m,
            d_v,
            c_g,
            c_m,
        } => {
            let st = states!(2);
            let (b1, b2, eps): (T, T, T) = (cast(beta1), cast(beta2), cast(epsilon));
            let (d_g, d_m, d_v): (T, T, T) = (cast(d_g), cast(d_m), cast(d_v));
            let (c_g, c_m): (T, T) = (cast(c_g), cast(c_m));
            apply_elementwise::<T, 2, _>(w, rows, grad!(), st, lazy, move |w, g, [m, v]| {
                let h = clip(g * rg + wd * *w, c);
                *m = b1 * *m + (one - b1) * h;
                *v = b2 * *v + (one - b2) * h * h;
                let mbar = c_g * (h / d_g) + c_m * (*m / d_m);
                *w = *w - lr * mbar / ((*v / d_v).sqrt() + eps);
            })
        }
        UpdateRule::AdaGrad { epsilon } => {
            let st = states!(1);
            let eps: T = cast(epsilon);
            apply_elementwise::<T, 1, _>(w, rows, grad!(), st, lazy, move |w, g, [s]| {
                let h = clip(g * rg, c);
                *s = *s + h * h;
                let div = h / (*s + eps).sqrt();
                *w = *w + (div + *w * wd) * -lr;
            })
        }
        UpdateRule::AdaDelta { rho, epsilon } => {
            let st = states!(2);
            let (rho, eps): (T, T) = (cast(rho), cast(epsilon));
            apply_elementwise::<T, 2, _>(w, rows, grad!(), st, lazy, move |w, g, [a, b]| {
                let h = clip(g * rg, c);
                *a = rho * *a + (one - rho) * h * h;
                let d = (*b + eps).sqrt() / (*a + eps).sqrt() * h;
                *b = rho * *b + (one - rho) * d * d;
                *w = *w - (d + wd * *w);
            })
        }
        UpdateRule::RmsProp {
            gamma1,
            epsilon,
            clip_weights,
        } => {
            let st = states!(1);
            let (g1, eps): (T, T) = (cast(gamma1), cast(epsilon));
            let cw: Option<T> = clip_weights.map(cast);
            apply_elementwise::<T, 1, _>(w, rows, grad!(), st, lazy, move |w, g, [n]| {
                let h = clip(rg * g + wd * *w, c);
                *n = (one - g1) * (h * h) + g1 * *n;
                *w = clip(*w - lr * (h / (*n + eps).sqrt()), cw);
            })
        }
        UpdateRule::RmsPropAlex {
            gamma1,
            gamma2,
            epsilon,
            clip_weights,
        } => {
            let st = states!(3);
            let (g1, g2, eps): (T, T, T) = (cast(gamma1), cast(gamma2), cast(epsilon));
            let cw: Option<T> = clip_weights.map(cast);
            apply_elementwise::<T, 3, _>(w, rows, grad!(), st, lazy, move |w, g, [n, s, d]| {
                let h = clip(rg * g + wd * *w, c);
                *n = (one - g1) * h * h + g1 * *n;
                *s = (one - g1) * h + g1 * *s;
                *d = g2 * *d - (lr * h / (*n - *s * *s + eps).sqrt());
                *w = clip(*w + *d, cw);
            })
        }
        UpdateRule::Ftrl { lambda1, beta } => {
            let st = states!(2);
            let (l1, beta): (T, T) = (cast(lambda1), cast(beta));
            apply_elementwise::<T, 2, _>(w, rows, grad!(), st, lazy, move |w, g, [z, n]| {
                let h = clip(g * rg, c);
                *z = *z + (h - ((*n + h * h).sqrt() - n.sqrt()) * *w / lr);
                *n = *n + h * h;
                let on = if z.abs() > l1 { T::one() } else { T::zero() };
                *w = (sign(*z) * l1 - *z) / ((beta + n.sqrt()) / lr + wd) * on;
            })
        }
        UpdateRule::GroupAdaGrad { epsilon } => {
            // One history value per row, not per element.
            let [hist] = typed_states::<T, 1>(op, states, rows, dtype_err)?;
            let eps: T = cast(epsilon);
            let g = grad!();
            let rl = n.checked_div(rows).unwrap_or(0);
            let len: T = cast(rl as f64);
            apply_rows(op, w, rows, g, hist, lazy, move |w, g, h| {
                // A zero gradient row adds 0 to the history and subtracts 0 from the weight:
                // the absent rows of a standard row_sparse update stay exactly as they are.
                let Some(g) = g else { return };
                // The sum of squares in eight interleaved partial sums, added pairwise at the
                // end: one running sum (MXNet's order) is a chain of dependent adds that keeps
                // the loop from vectorizing; the history can differ from MXNet's in the last
                // bit. Then, as in MXNet's kernel, divided by the row length, and each
                // element's step recomputes its clipped value.
                let sq = |gj: T| {
                    let x = clip(gj * rg, c);
                    x * x
                };
                let mut acc = [T::zero(); 8];
                let mut lanes = g.chunks_exact(8);
                for ch in &mut lanes {
                    for (a, &gj) in acc.iter_mut().zip(ch) {
                        *a = *a + sq(gj);
                    }
                }
                let tail = lanes
                    .remainder()
                    .iter()
                    .fold(T::zero(), |s, &gj| s + sq(gj));
                let ssq = ((acc[0] + acc[1]) + (acc[2] + acc[3]))
                    + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
                    + tail;
                *h = *h + ssq / len;
                let denom = h.sqrt() + eps;
                for (wj, &gj) in w.iter_mut().zip(g) {
                    *wj = *wj - lr * clip(gj * rg, c) / denom;
                }
            })?
        }
        UpdateRule::Cocob { alpha } => {
            let st = states!(5);
            let (alpha, step) = (cast(alpha), CocobStep { lr, wd, rg, c });
            apply_elementwise::<T, 5, _>(
                w,
                rows,
                grad!(),
                st,
                lazy,
                move |w, g, [l, s, r, th, w0]| step.apply(alpha, w, g, l, s, r, th, w0),
            )
        }
        UpdateRule::CocobPacked { alpha } => {
            // One state array of 5 values per element (checked against the weight's size).
            let [st] = typed_states::<T, 1>(op, states, 5 * n, dtype_err)?;
            let (alpha, step) = (cast(alpha), CocobStep { lr, wd, rg, c });
            apply_packed::<T, 5, _>(w, rows, grad!(), st, lazy, move |w, g, st| {
                let [l, s, r, th, w0] = st;
                step.apply(alpha, w, g, l, s, r, th, w0)
            })
        }
        UpdateRule::Ftml {
            beta1,
            beta2,
            epsilon,
            t,
        } => {
            let st = states!(3);
            let (b1, b2, eps): (T, T, T) = (cast(beta1), cast(beta2), cast(epsilon));
            let t: T = cast(t as f64);
            let (c1, c2) = (T::one() - b1.powf(t), T::one() - b2.powf(t));
            apply_elementwise::<T, 3, _>(w, rows, grad!(), st, lazy, move |w, g, [d, v, z]| {
                let h = clip(rg * g + wd * *w, c);
                *v = b2 * *v + (one - b2) * (h * h);
                let d_t = c1 / lr * ((*v / c2).sqrt() + eps);
                *z = b1 * *z + (one - b1) * h - (d_t - b1 * *d) * *w;
                *d = d_t;
                *w = -*z / d_t;
            })
        }
        UpdateRule::LambPhase1 {
            beta1,
            beta2,
            epsilon,
            d1,
            d2,
        } => {
            let st = states!(2);
            let (b1, b2, eps): (T, T, T) = (cast(beta1), cast(beta2), cast(epsilon));
            let (d1, d2): (T, T) = (cast(d1), cast(d2));
            let dir = move |w: T, m: T, v: T| (m / d1) / ((v / d2).sqrt() + eps) + wd * w;
            let norms = Mutex::new((0.0f64, 0.0f64));
            apply_chunks::<T, 2, _>(w, rows, grad!(), st, lazy, |w, g, [m, v]| {
                let (mut sw, mut su) = (0.0f64, 0.0f64);
                for j in 0..w.len() {
                    let h = clip(g.map_or(T::zero(), |g| g[j]) * rg, c);
                    m[j] = b1 * m[j] + (one - b1) * h;
                    v[j] = b2 * v[j] + (one - b2) * h * h;
                    let u = dir(w[j], m[j], v[j]).to_f64();
                    let wj = w[j].to_f64();
                    sw += wj * wj;
                    su += u * u;
                }
                let mut n = norms.lock().unwrap_or_else(|e| e.into_inner());
                n.0 += sw;
                n.1 += su;
            });
            let (sw, su) = norms.into_inner().unwrap_or_else(|e| e.into_inner());
            return Ok([sw, su]);
        }
        UpdateRule::LambPhase2 {
            epsilon,
            d1,
            d2,
            lr,
        } => {
            let st = states!(2);
            let eps: T = cast(epsilon);
            let (d1, d2): (T, T) = (cast(d1), cast(d2));
            let lr: T = cast(lr);
            let dir = move |w: T, m: T, v: T| (m / d1) / ((v / d2).sqrt() + eps) + wd * w;
            apply_chunks::<T, 2, _>(w, rows, grad!(), st, lazy, |w, _g, [m, v]| {
                for j in 0..w.len() {
                    let u = dir(w[j], m[j], v[j]);
                    w[j] = w[j] - lr * u;
                }
            })
        }
    }
    Ok([0.0, 0.0])
}

/// One update of a half (f16 / bf16) weight without a master copy: the weight, the gradient
/// and the states (all of the weight's dtype) widened to f32, `rule` applied in f32, and the
/// weight and states stored back rounded to nearest even (MXNet's update of an f16 weight
/// without `multi_precision`). Costs a widening of the whole weight and states per call, also
/// for a lazy row_sparse gradient; `multi_precision` (an f32 master, see sparrow-optim) avoids
/// the repeated rounding of the states.
fn update_half<H: Element>(
    w: &mut CpuStorage,
    rows: usize,
    grad: GradRef<'_, CpuStorage, Arc<Vec<i64>>>,
    states: &mut [&mut CpuStorage],
    sc: &UpdateScalars,
    rule: &UpdateRule,
    lazy: bool,
) -> Result<[f64; 2]> {
    let op = rule.name();
    let dtype = w.dtype();
    let gvals = match grad {
        GradRef::Dense(g) => g,
        GradRef::RowSparse { values, .. } => values,
    };
    if let Some(other) = std::iter::once(gvals.dtype())
        .chain(states.iter().map(|s| s.dtype()))
        .find(|&d| d != dtype)
    {
        return Err(Error::dtype_mismatch(op, dtype, other));
    }
    let mut w32 = w.cast(DType::F32);
    let g32 = gvals.cast(DType::F32);
    let g = match grad {
        GradRef::Dense(_) => GradRef::Dense(&g32),
        GradRef::RowSparse {
            indices, row_len, ..
        } => GradRef::RowSparse {
            indices,
            values: &g32,
            row_len,
        },
    };
    let mut s32: Vec<CpuStorage> = states.iter().map(|s| s.cast(DType::F32)).collect();
    let mut refs: Vec<&mut CpuStorage> = s32.iter_mut().collect();
    let norms = update_typed::<f32>(&mut w32, rows, g, &mut refs, sc, rule, lazy)?;
    store_rounded_all::<H>(w, &w32, op)?;
    for (s, s32) in states.iter_mut().zip(&s32) {
        store_rounded_all::<H>(s, s32, op)?;
    }
    Ok(norms)
}

/// Write the f32 buffer `src` into the half buffer `dst` (same length), rounded.
fn store_rounded_all<H: Element>(
    dst: &mut CpuStorage,
    src: &CpuStorage,
    op: &'static str,
) -> Result<()> {
    let src = src
        .as_slice::<f32>()
        .ok_or_else(|| Error::dtype(op, "f32 copy expected"))?;
    let d = dst
        .writable::<H>(op)?
        .ok_or_else(|| Error::dtype(op, "half buffer expected"))?;
    use rayon::prelude::*;
    d.par_iter_mut()
        .with_min_len(1 << 14)
        .zip(src.par_iter())
        .for_each(|(o, &x)| *o = H::from_f64(x as f64));
    Ok(())
}

/// Write `src` rounded into the half buffer `dst` at `start..start + src.len()`.
fn store_rounded(dst: &mut CpuStorage, start: usize, src: &[f32], op: &'static str) -> Result<()> {
    fn put<H: Element>(
        dst: &mut CpuStorage,
        start: usize,
        src: &[f32],
        op: &'static str,
    ) -> Result<()> {
        let d = dst
            .writable::<H>(op)?
            .ok_or_else(|| Error::dtype(op, "half buffer expected"))?;
        d[start..start + src.len()]
            .iter_mut()
            .zip(src)
            .for_each(|(o, &x)| *o = H::from_f64(x as f64));
        Ok(())
    }
    match dst.dtype() {
        DType::F16 => put::<half::f16>(dst, start, src, op),
        DType::BF16 => put::<half::bf16>(dst, start, src, op),
        other => Err(float_error(op, other)),
    }
}

/// The error of a dtype the update family has no kernel for.
fn float_error(op: &'static str, dtype: DType) -> Error {
    Error::dtype(
        op,
        format!("needs a float32 or float64 array, got {}", dtype.name()),
    )
}

impl UpdateOps for CpuStorage {
    #[inline]
    fn update(
        &mut self,
        rows: usize,
        grad: GradRef<'_, Self, Self::Index>,
        states: &mut [&mut Self],
        scalars: &UpdateScalars,
        rule: &UpdateRule,
        lazy: bool,
    ) -> Result<[f64; 2]> {
        match self.dtype() {
            DType::F32 => update_typed::<f32>(self, rows, grad, states, scalars, rule, lazy),
            DType::F64 => update_typed::<f64>(self, rows, grad, states, scalars, rule, lazy),
            DType::F16 => update_half::<half::f16>(self, rows, grad, states, scalars, rule, lazy),
            DType::BF16 => update_half::<half::bf16>(self, rows, grad, states, scalars, rule, lazy),
            other => Err(float_error(rule.name(), other)),
        }
    }

    fn sum_sq_range(&self, range: Range<usize>) -> Result<f64> {
        fn sum<T: Float>(v: &[T]) -> f64 {
            v.iter()
                .map(|&x| {
                    let x = x.to_f64();
                    x * x
                })
                .sum()
        }
        match self {
            CpuStorage::F32(v) => Ok(sum(&v[range])),
            CpuStorage::F64(v) => Ok(sum(&v[range])),
            CpuStorage::F16(v) => Ok(v[range].iter().map(|x| x.to_f64() * x.to_f64()).sum()),
            CpuStorage::BF16(v) => Ok(v[range].iter().map(|x| x.to_f64() * x.to_f64()).sum()),
            other => Err(float_error("stored_sum_sq", other.dtype())),
        }
    }

    fn scale_range(&mut self, range: Range<usize>, factor: f64) -> Result<()> {
        fn scale<T: Float>(v: &mut [T], f: f64) {
            let f = <T as Element>::from_f64(f);
            v.iter_mut().for_each(|x| *x = *x * f);
        }
        let dtype = self.dtype();
        if let Some(s) = self.as_mut_slice::<f32>() {
            scale(&mut s[range], factor);
        } else if let Some(s) = self.as_mut_slice::<f64>() {
            scale(&mut s[range], factor);
        } else if dtype.is_half() {
            // In f32 (the factor rounded to f32 first, as for an f32 array), rounded once.
            let f = factor as f32;
            let scaled = self.gather(range.clone()).cast(DType::F32);
            let scaled: Vec<f32> = scaled
                .as_slice::<f32>()
                .unwrap_or(&[])
                .iter()
                .map(|&x| x * f)
                .collect();
            store_rounded(self, range.start, &scaled, "scale_stored")?;
        } else {
            return Err(float_error("scale_stored", dtype));
        }
        Ok(())
    }
}
