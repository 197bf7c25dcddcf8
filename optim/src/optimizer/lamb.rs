//! LAMB: Adam's direction scaled per layer by the trust ratio `||w|| / ||u||`.

use sparrow_core::update::{lamb_update, LambParams};
use sparrow_core::{NDArray, Result};

use super::{OptimizerOptions, Rule, State, StepCtx};

/// LAMB (MXNet `lamb_update_phase1` / `lamb_update_phase2`, core's `lamb_update`):
/// `h = clip(rescale*g); m <- b1*m + (1-b1)*h; v <- b2*v + (1-b2)*h^2;
/// u = m_hat/(sqrt(v_hat) + eps) + wd*w` (`m_hat = m/(1-b1^t)`, `v_hat = v/(1-b2^t)` with bias
/// correction, else `m`, `v`); `r1 = ||w||` clamped to `[lower_bound, upper_bound]` when set,
/// `r2 = ||u||`; `w <- w - lr*(r1/r2)*u` (just `lr` when either norm is 0).
///
/// With a lazy row_sparse update the norms are taken over the rows the gradient holds (MXNet
/// has no sparse LAMB); in standard mode over the whole weight.
pub struct Lamb {
    /// Shared options (MXNet's default learning rate is 0.001).
    pub opts: OptimizerOptions,
    /// 0.9 by default.
    pub beta1: f64,
    /// 0.999 by default.
    pub beta2: f64,
    /// 1e-6 by default.
    pub epsilon: f64,
    /// Lower bound on `||w||` (a negative bound is ignored).
    pub lower_bound: Option<f64>,
    /// Upper bound on `||w||` (a negative bound is ignored).
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
}

impl Rule for Lamb {
    const NAME: &'static str = "lamb";
    fn state_names(&self) -> &'static [&'static str] {
        &["mean", "var"]
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let [mean, var] = st.arrays_n(Self::NAME)?;
        let hyper = LambParams {
            beta1: self.beta1,
            beta2: self.beta2,
            epsilon: self.epsilon,
            t: ctx.t,
            bias_correction: self.bias_correction,
            lower_bound: self.lower_bound.filter(|b| *b >= 0.0),
            upper_bound: self.upper_bound.filter(|b| *b >= 0.0),
        };
        lamb_update(w, g, mean, var, &ctx.args(hyper))
    }
}
