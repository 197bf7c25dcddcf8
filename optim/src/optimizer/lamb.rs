//! LAMB: Adam's direction scaled per layer by the trust ratio `||w|| / ||g||`.

use std::sync::Mutex;

use sparrow_core::{Float, NDArray, Result};

use super::adam::impl_optimizer;
use super::driver::apply_chunks;
use super::{cast, clip, dispatch_float, Optimizer, OptimizerOptions, State, StepCtx};

/// LAMB (MXNet `lamb_update_phase1` / `lamb_update_phase2`):
/// `h = clip(rescale*g); m <- b1*m + (1-b1)*h; v <- b2*v + (1-b2)*h^2;
/// u = m_hat/(sqrt(v_hat) + eps) + wd*w` (`m_hat = m/(1-b1^t)`, `v_hat = v/(1-b2^t)` with bias
/// correction, else `m`, `v`); `r1 = ||w||` clamped to `[lower_bound, upper_bound]` when set,
/// `r2 = ||u||`; `w <- w - lr*(r1/r2)*u` (just `lr` when either norm is 0).
///
/// No temporary the size of the weight is made: a first pass updates `m`, `v` and accumulates
/// both norms (in f64), a second recomputes `u` from the new moments and applies it. With a lazy
/// row_sparse update the norms are taken over the rows the gradient holds (MXNet has no sparse
/// LAMB); in standard mode over the whole weight.
pub struct Lamb {
    /// Shared options (MXNet's default learning rate is 0.001).
    pub opts: OptimizerOptions,
    /// 0.9 by default.
    pub beta1: f64,
    /// 0.999 by default.
    pub beta2: f64,
    /// 1e-6 by default.
    pub epsilon: f64,
    /// Lower bound on `||w||`.
    pub lower_bound: Option<f64>,
    /// Upper bound on `||w||`.
    pub upper_bound: Option<f64>,
    /// Bias-correct the moments (default true).
    pub bias_correction: bool,
}

impl Lamb {
    /// LAMB with MXNet's defaults.
    pub fn new(learning_rate: f64) -> Self {
        Lamb {
            opts: OptimizerOptions::new(learning_rate),
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-6,
            lower_bound: None,
            upper_bound: None,
            bias_correction: true,
        }
    }
    fn init_scalars(&self, _s: &mut State) {}

    fn run<T: Float>(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let (wd, rg): (T, T) = (cast(ctx.wd), cast(ctx.rescale_grad));
        let (b1, b2, eps): (T, T, T) = (cast(self.beta1), cast(self.beta2), cast(self.epsilon));
        let (d1, d2): (T, T) = if self.bias_correction {
            let t = ctx.t as i32;
            (
                cast(1.0 - self.beta1.powi(t)),
                cast(1.0 - self.beta2.powi(t)),
            )
        } else {
            (T::one(), T::one())
        };
        let c: Option<T> = ctx.clip_gradient.map(cast);
        let one = T::one();
        let dir = move |w: T, m: T, v: T| (m / d1) / ((v / d2).sqrt() + eps) + wd * w;
        let states = st.handles();
        let norms = Mutex::new((0.0f64, 0.0f64));
        apply_chunks::<T, 2, _>(
            "lamb_update_phase1",
            w,
            g,
            &states,
            ctx.lazy_update,
            |w, g, [m, v]| {
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
            },
        )?;
        let (sw, su) = norms.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut r1 = sw.sqrt();
        if let Some(lb) = self.lower_bound.filter(|b| *b >= 0.0) {
            r1 = r1.max(lb);
        }
        if let Some(ub) = self.upper_bound.filter(|b| *b >= 0.0) {
            r1 = r1.min(ub);
        }
        let r2 = su.sqrt();
        let lr: T = cast(if r1 == 0.0 || r2 == 0.0 {
            ctx.lr
        } else {
            ctx.lr * (r1 / r2)
        });
        apply_chunks::<T, 2, _>(
            "lamb_update_phase2",
            w,
            g,
            &states,
            ctx.lazy_update,
            |w, _g, [m, v]| {
                for j in 0..w.len() {
                    let u = dir(w[j], m[j], v[j]);
                    w[j] = w[j] - lr * u;
                }
            },
        )
    }
}
impl_optimizer!(Lamb, "lamb", &["mean", "var"]);
