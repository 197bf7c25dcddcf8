//! Adam, AdamW, Adamax and Nadam.

use sparrow_core::{Float, NDArray, Result};

use super::driver::apply_elementwise;
use super::{cast, clip, dispatch_float, Optimizer, OptimizerOptions, State, StepCtx};

macro_rules! impl_optimizer {
    ($ty:ty, $name:expr, $states:expr) => {
        impl Optimizer for $ty {
            fn name(&self) -> &'static str {
                $name
            }
            fn options(&self) -> &OptimizerOptions {
                &self.opts
            }
            fn options_mut(&mut self) -> &mut OptimizerOptions {
                &mut self.opts
            }
            fn create_state(&self, _index: usize, weight: &NDArray) -> Result<State> {
                let mut s = State::zeros_like(weight, $states)?;
                self.init_scalars(&mut s);
                Ok(s)
            }
            fn step(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
                dispatch_float!(self, ctx, w, g, st)
            }
        }
    };
}
pub(crate) use impl_optimizer;

/// Adam (MXNet `adam_update`).
///
/// `h = clip(rescale*g + wd*w); m <- b1*m + (1-b1)*h; v <- b2*v + (1-b2)*h^2;
/// w <- w - lr_t*m/(sqrt(v) + eps)` with `lr_t = lr*sqrt(1-b2^t)/(1-b1^t)` computed in f64 and
/// rounded once to the weight's dtype, `t` counted per parameter.
pub struct Adam {
    /// Shared options (MXNet's default learning rate is 0.001).
    pub opts: OptimizerOptions,
    /// First-moment decay (0.9).
    pub beta1: f64,
    /// Second-moment decay (0.999).
    pub beta2: f64,
    /// Denominator guard (1e-8).
    pub epsilon: f64,
}

/// `lr*sqrt(1-b2^t)/(1-b1^t)` in f64, as MXNet's Python side computes it.
pub(crate) fn bias_corrected_lr(lr: f64, beta1: f64, beta2: f64, t: u64) -> f64 {
    let t = t as i32;
    let coef1 = 1.0 - beta1.powi(t);
    let coef2 = 1.0 - beta2.powi(t);
    lr * coef2.sqrt() / coef1
}

impl Adam {
    /// Adam with MXNet's defaults for the betas and epsilon.
    pub fn new(learning_rate: f64) -> Self {
        Adam {
            opts: OptimizerOptions::new(learning_rate),
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
        }
    }
    fn init_scalars(&self, _s: &mut State) {}

    fn run<T: Float>(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let lr: T = cast(bias_corrected_lr(ctx.lr, self.beta1, self.beta2, ctx.t));
        let (wd, rg): (T, T) = (cast(ctx.wd), cast(ctx.rescale_grad));
        let (b1, b2, eps): (T, T, T) = (cast(self.beta1), cast(self.beta2), cast(self.epsilon));
        let c: Option<T> = ctx.clip_gradient.map(cast);
        let one = T::one();
        let states = st.handles();
        apply_elementwise::<T, 2, _>(
            "adam_update",
            w,
            g,
            &states,
            ctx.lazy_update,
            move |w, g, [m, v]| {
                let h = clip(g * rg + *w * wd, c);
                *m = b1 * *m + (one - b1) * h;
                *v = b2 * *v + (one - b2) * h * h;
                *w = *w - lr * *m / (v.sqrt() + eps);
            },
        )
    }
}
impl_optimizer!(Adam, "adam", &["mean", "var"]);

/// AdamW with decoupled weight decay, as MXNet's `contrib.adamw_update` is driven by GluonNLP's
/// `AdamW`/`BERTAdam` (`lr = 1`, `eta = ` the bias-corrected rate):
/// `h = clip(rescale*g); m <- b1*m + (1-b1)*h; v <- b2*v + (1-b2)*h^2;
/// w <- w - lr_t*(m/(sqrt(v) + eps) + wd*w)`, `lr_t` as in [`Adam`].
pub struct AdamW {
    /// Shared options.
    pub opts: OptimizerOptions,
    /// First-moment decay (0.9).
    pub beta1: f64,
    /// Second-moment decay (0.999).
    pub beta2: f64,
    /// Denominator guard (1e-6, GluonNLP's default).
    pub epsilon: f64,
    /// Apply the bias correction to the rate (default true).
    pub correct_bias: bool,
}

impl AdamW {
    /// AdamW with GluonNLP's defaults.
    pub fn new(learning_rate: f64) -> Self {
        AdamW {
            opts: OptimizerOptions::new(learning_rate),
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-6,
            correct_bias: true,
        }
    }
    fn init_scalars(&self, _s: &mut State) {}

    fn run<T: Float>(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let eta: T = cast(if self.correct_bias {
            bias_corrected_lr(ctx.lr, self.beta1, self.beta2, ctx.t)
        } else {
            ctx.lr
        });
        let (wd, rg): (T, T) = (cast(ctx.wd), cast(ctx.rescale_grad));
        let (b1, b2, eps): (T, T, T) = (cast(self.beta1), cast(self.beta2), cast(self.epsilon));
        let c: Option<T> = ctx.clip_gradient.map(cast);
        let one = T::one();
        let states = st.handles();
        apply_elementwise::<T, 2, _>(
            "adamw_update",
            w,
            g,
            &states,
            ctx.lazy_update,
            move |w, g, [m, v]| {
                let h = clip(g * rg, c);
                *m = b1 * *m + (one - b1) * h;
                *v = b2 * *v + (one - b2) * h * h;
                *w = *w - eta * (*m / (v.sqrt() + eps) + wd * *w);
            },
        )
    }
}
impl_optimizer!(AdamW, "adamw", &["mean", "var"]);

/// Adamax (MXNet's Python `Adamax`): `h = clip(rescale*g + wd*w); m <- b1*m + (1-b1)*h;
/// u <- max(b2*u, |h|); w <- w - lr/(1-b1^t) * m/u`.
///
/// Where `u == 0` (every gradient so far was zero, hence `m == 0`) the step is 0; MXNet divides
/// 0 by 0 there and writes NaN.
pub struct Adamax {
    /// Shared options (MXNet's default learning rate is 0.002).
    pub opts: OptimizerOptions,
    /// First-moment decay (0.9).
    pub beta1: f64,
    /// Infinity-norm decay (0.999).
    pub beta2: f64,
}

impl Adamax {
    /// Adamax with MXNet's defaults.
    pub fn new(learning_rate: f64) -> Self {
        Adamax {
            opts: OptimizerOptions::new(learning_rate),
            beta1: 0.9,
            beta2: 0.999,
        }
    }
    fn init_scalars(&self, _s: &mut State) {}

    fn run<T: Float>(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let lr: T = cast(ctx.lr / (1.0 - self.beta1.powi(ctx.t as i32)));
        let (wd, rg): (T, T) = (cast(ctx.wd), cast(ctx.rescale_grad));
        let (b1, b2): (T, T) = (cast(self.beta1), cast(self.beta2));
        let c: Option<T> = ctx.clip_gradient.map(cast);
        let one = T::one();
        let states = st.handles();
        apply_elementwise::<T, 2, _>(
            "adamax_update",
            w,
            g,
            &states,
            ctx.lazy_update,
            move |w, g, [m, u]| {
                let h = clip(g * rg + wd * *w, c);
                *m = b1 * *m + (one - b1) * h;
                *u = (b2 * *u).max(h.abs());
                if *u != T::zero() {
                    *w = *w - lr * *m / *u;
                }
            },
        )
    }
}
impl_optimizer!(Adamax, "adamax", &["mean", "inf_norm"]);

/// Nadam (MXNet's Python `Nadam`), Adam with Nesterov momentum and a momentum schedule:
/// `mu_t = b1*(1 - 0.5*0.96^(t*sd))`, `M_t = prod mu_1..mu_t`,
/// `h = clip(rescale*g + wd*w); m <- b1*m + (1-b1)*h; v <- b2*v + (1-b2)*h^2;
/// mbar = (1-mu_t)*h/(1-M_t) + mu_{t+1}*m/(1-M_t*mu_{t+1});
/// w <- w - lr*mbar/(sqrt(v/(1-b2^t)) + eps)`.
///
/// MXNet keeps one `M_t` for the whole optimizer (multiplied once per parameter update, so it
/// depends on how many parameters there are); sparrow keeps it per parameter in the state, which
/// is the published algorithm and equals MXNet for a single parameter.
pub struct Nadam {
    /// Shared options (MXNet's default learning rate is 0.001).
    pub opts: OptimizerOptions,
    /// First-moment decay (0.9).
    pub beta1: f64,
    /// Second-moment decay (0.999).
    pub beta2: f64,
    /// Denominator guard (1e-8).
    pub epsilon: f64,
    /// Momentum schedule decay (0.004).
    pub schedule_decay: f64,
}

impl Nadam {
    /// Nadam with MXNet's defaults.
    pub fn new(learning_rate: f64) -> Self {
        Nadam {
            opts: OptimizerOptions::new(learning_rate),
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            schedule_decay: 0.004,
        }
    }
    fn init_scalars(&self, s: &mut State) {
        s.set_scalar("m_schedule", 1.0);
    }

    fn run<T: Float>(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let t = ctx.t as f64;
        let mom_t = self.beta1 * (1.0 - 0.5 * 0.96f64.powf(t * self.schedule_decay));
        let mom_t1 = self.beta1 * (1.0 - 0.5 * 0.96f64.powf((t + 1.0) * self.schedule_decay));
        let sched = st.scalar("m_schedule").unwrap_or(1.0) * mom_t;
        let sched_next = sched * mom_t1;
        let (wd, rg, lr): (T, T, T) = (cast(ctx.wd), cast(ctx.rescale_grad), cast(ctx.lr));
        let (b1, b2, eps): (T, T, T) = (cast(self.beta1), cast(self.beta2), cast(self.epsilon));
        let d_g: T = cast(1.0 - sched);
        let d_m: T = cast(1.0 - sched_next);
        let d_v: T = cast(1.0 - self.beta2.powi(ctx.t as i32));
        let (c_g, c_m): (T, T) = (cast(1.0 - mom_t), cast(mom_t1));
        let c: Option<T> = ctx.clip_gradient.map(cast);
        let one = T::one();
        let states = st.handles();
        apply_elementwise::<T, 2, _>(
            "nadam_update",
            w,
            g,
            &states,
            ctx.lazy_update,
            move |w, g, [m, v]| {
                let h = clip(g * rg + wd * *w, c);
                *m = b1 * *m + (one - b1) * h;
                *v = b2 * *v + (one - b2) * h * h;
                let mbar = c_g * (h / d_g) + c_m * (*m / d_m);
                *w = *w - lr * mbar / ((*v / d_v).sqrt() + eps);
            },
        )?;
        st.set_scalar("m_schedule", sched);
        Ok(())
    }
}
impl_optimizer!(Nadam, "nadam", &["mean", "var"]);
