//! FTRL-Proximal and FTML.

use sparrow_core::update::{ftml_update, ftrl_update, FtmlParams, FtrlParams};
use sparrow_core::{NDArray, Result};

use super::{OptimizerOptions, Rule, State, StepCtx};

/// FTRL-Proximal (core's `ftrl_update`):
/// `h = clip(rescale*g); z <- z + h - (sqrt(n + h^2) - sqrt(n))*w/lr; n <- n + h^2;
/// w <- (sign(z)*lambda1 - z)/((beta + sqrt(n))/lr + wd)` where `|z| > lambda1`, else 0.
///
/// With a dense weight and a row_sparse gradient MXNet 1.9.1 has no sparse kernel and falls
/// back to the dense one: that is `lazy_update = false` here (every row recomputed, absent rows
/// with a zero gradient, which also sets never-touched rows to 0). `lazy_update = true` (the
/// default) is the true lazy update MXNet only offers for row_sparse weights.
pub struct Ftrl {
    /// Shared options (MXNet's default learning rate is 0.1).
    pub opts: OptimizerOptions,
    /// L1 strength (0.01).
    pub lambda1: f64,
    /// Per-coordinate rate offset (1).
    pub beta: f64,
}

impl Ftrl {
    /// FTRL with MXNet's defaults for lambda1 and beta.
    pub fn new(learning_rate: f64) -> Self {
        Ftrl {
            opts: OptimizerOptions::new(learning_rate),
            lambda1: 0.01,
            beta: 1.0,
        }
    }
}

impl Rule for Ftrl {
    const NAME: &'static str = "ftrl";
    fn state_names(&self) -> &'static [&'static str] {
        &["z", "n"]
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let [z, n] = st.arrays_n(Self::NAME)?;
        let hyper = FtrlParams {
            lambda1: self.lambda1,
            beta: self.beta,
        };
        ftrl_update(w, g, z, n, &ctx.args(hyper))
    }
}

/// FTML, Follow the Moving Leader (core's `ftml_update`):
/// `h = clip(rescale*g + wd*w); v <- b2*v + (1-b2)*h^2;
/// d_t = (1-b1^t)/lr * (sqrt(v/(1-b2^t)) + eps); z <- b1*z + (1-b1)*h - (d_t - b1*d)*w;
/// d <- d_t; w <- -z/d_t`.
pub struct Ftml {
    /// Shared options (MXNet's default learning rate is 0.01).
    pub opts: OptimizerOptions,
    /// 0.6 by default.
    pub beta1: f64,
    /// 0.999 by default.
    pub beta2: f64,
    /// 1e-8 by default.
    pub epsilon: f64,
}

impl Ftml {
    /// FTML with MXNet's defaults.
    pub fn new(learning_rate: f64) -> Self {
        Ftml {
            opts: OptimizerOptions::new(learning_rate),
            beta1: 0.6,
            beta2: 0.999,
            epsilon: 1e-8,
        }
    }
}

impl Rule for Ftml {
    const NAME: &'static str = "ftml";
    fn state_names(&self) -> &'static [&'static str] {
        &["d", "v", "z"]
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let [d, v, z] = st.arrays_n(Self::NAME)?;
        let hyper = FtmlParams {
            beta1: self.beta1,
            beta2: self.beta2,
            epsilon: self.epsilon,
            t: ctx.t,
        };
        ftml_update(w, g, d, v, z, &ctx.args(hyper))
    }
}
