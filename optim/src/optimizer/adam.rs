//! Adam, AdamW, Adamax and Nadam.

use sparrow_core::update::{
    adam_update, adamax_update, adamw_update, nadam_update, pow_count, AdamParams, AdamaxParams,
    NadamParams, UpdateArgs,
};
use sparrow_core::{NDArray, Result};

use super::{OptimizerOptions, Rule, State, StepCtx};

/// Adam (core's `adam_update`).
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
fn bias_corrected_lr(lr: f64, beta1: f64, beta2: f64, t: u64) -> f64 {
    let coef1 = 1.0 - pow_count(beta1, t);
    let coef2 = 1.0 - pow_count(beta2, t);
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
}

impl Rule for Adam {
    const NAME: &'static str = "adam";
    fn state_names(&self) -> &'static [&'static str] {
        &["mean", "var"]
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let [mean, var] = st.arrays_n(Self::NAME)?;
        let hyper = AdamParams {
            beta1: self.beta1,
            beta2: self.beta2,
            epsilon: self.epsilon,
        };
        let args = UpdateArgs {
            lr: bias_corrected_lr(ctx.lr, self.beta1, self.beta2, ctx.t),
            ..ctx.args(hyper)
        };
        adam_update(w, g, mean, var, &args)
    }
}

/// AdamW with decoupled weight decay (core's `adamw_update`), as MXNet's
/// `contrib.adamw_update` is driven by GluonNLP's `AdamW`/`BERTAdam` (`lr = 1`, `eta = ` the
/// bias-corrected rate): `h = clip(rescale*g); m <- b1*m + (1-b1)*h; v <- b2*v + (1-b2)*h^2;
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
}

impl Rule for AdamW {
    const NAME: &'static str = "adamw";
    fn state_names(&self) -> &'static [&'static str] {
        &["mean", "var"]
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let [mean, var] = st.arrays_n(Self::NAME)?;
        let hyper = AdamParams {
            beta1: self.beta1,
            beta2: self.beta2,
            epsilon: self.epsilon,
        };
        let eta = if self.correct_bias {
            bias_corrected_lr(ctx.lr, self.beta1, self.beta2, ctx.t)
        } else {
            ctx.lr
        };
        let args = UpdateArgs {
            lr: eta,
            ..ctx.args(hyper)
        };
        adamw_update(w, g, mean, var, &args)
    }
}

/// Adamax (MXNet's Python `Adamax`, core's `adamax_update`): `h = clip(rescale*g + wd*w);
/// m <- b1*m + (1-b1)*h; u <- max(b2*u, |h|); w <- w - lr/(1-b1^t) * m/u`.
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
}

impl Rule for Adamax {
    const NAME: &'static str = "adamax";
    fn state_names(&self) -> &'static [&'static str] {
        &["mean", "inf_norm"]
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let [mean, inf_norm] = st.arrays_n(Self::NAME)?;
        let hyper = AdamaxParams {
            beta1: self.beta1,
            beta2: self.beta2,
        };
        let args = UpdateArgs {
            lr: ctx.lr / (1.0 - pow_count(self.beta1, ctx.t)),
            ..ctx.args(hyper)
        };
        adamax_update(w, g, mean, inf_norm, &args)
    }
}

/// Nadam (MXNet's Python `Nadam`, core's `nadam_update`), Adam with Nesterov momentum and a
/// momentum schedule: `mu_t = b1*(1 - 0.5*0.96^(t*sd))`, `M_t = prod mu_1..mu_t`,
/// `h = clip(rescale*g + wd*w); m <- b1*m + (1-b1)*h; v <- b2*v + (1-b2)*h^2;
/// mbar = (1-mu_t)*h/(1-M_t) + mu_{t+1}*m/(1-M_t*mu_{t+1});
/// w <- w - lr*mbar/(sqrt(v/(1-b2^t)) + eps)`.
///
/// MXNet keeps one `M_t` for the whole optimizer (multiplied once per parameter update, so it
/// depends on how many parameters there are); sparrow keeps it per parameter in the state
/// (scalar `m_schedule`), which is the published algorithm and equals MXNet for a single
/// parameter.
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
}

impl Rule for Nadam {
    const NAME: &'static str = "nadam";
    fn state_names(&self) -> &'static [&'static str] {
        &["mean", "var"]
    }
    fn init_scalars(&self, s: &mut State) {
        s.set_scalar("m_schedule", 1.0);
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let [mean, var] = st.arrays_n(Self::NAME)?;
        let hyper = NadamParams {
            beta1: self.beta1,
            beta2: self.beta2,
            epsilon: self.epsilon,
            schedule_decay: self.schedule_decay,
            t: ctx.t,
            m_schedule: st.scalar("m_schedule").unwrap_or(1.0),
        };
        let m_schedule = nadam_update(w, g, mean, var, &ctx.args(hyper))?;
        st.set_scalar("m_schedule", m_schedule);
        Ok(())
    }
}
