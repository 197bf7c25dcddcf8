//! SGD (with momentum), Nesterov momentum (NAG) and Signum / signSGD.

use sparrow_core::update::{
    nag_mom_update, sgd_mom_update, sgd_update, signsgd_update, signum_update, MomentumParams,
    SignumParams,
};
use sparrow_core::{NDArray, Result};

use super::{OptimizerOptions, Rule, State, StepCtx};

/// The state of the momentum optimizers: one array, or none without momentum.
fn momentum_state(momentum: f64) -> &'static [&'static str] {
    if momentum == 0.0 {
        &[]
    } else {
        &["momentum"]
    }
}

/// Stochastic gradient descent with optional momentum (core's `sgd_update` /
/// `sgd_mom_update`).
///
/// Without momentum: `w <- (1 - lr*wd)*w - lr*clip(rescale*g)`.
/// With momentum `mu`: `m <- mu*m - lr*wd*w - lr*clip(rescale*g); w <- w + m`.
pub struct Sgd {
    /// Shared options.
    pub opts: OptimizerOptions,
    /// Momentum `mu` (0 = plain SGD, no state).
    pub momentum: f64,
}

impl Sgd {
    /// Plain SGD.
    pub fn new(learning_rate: f64) -> Self {
        Sgd {
            opts: OptimizerOptions::new(learning_rate),
            momentum: 0.0,
        }
    }
    /// SGD with momentum.
    pub fn with_momentum(learning_rate: f64, momentum: f64) -> Self {
        Sgd {
            opts: OptimizerOptions::new(learning_rate),
            momentum,
        }
    }
}

impl Rule for Sgd {
    const NAME: &'static str = "sgd";
    fn state_names(&self) -> &'static [&'static str] {
        momentum_state(self.momentum)
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        if self.momentum == 0.0 {
            return sgd_update(w, g, &ctx.args(()));
        }
        let [mom] = st.arrays_n(Self::NAME)?;
        let hyper = MomentumParams {
            momentum: self.momentum,
        };
        sgd_mom_update(w, g, mom, &ctx.args(hyper))
    }
}

/// Nesterov accelerated gradient (core's `nag_mom_update`; plain SGD when momentum is 0).
///
/// Per element, with `h = clip(rescale*g) + wd*w`:
/// `m <- mu*m; w <- w - m + (mu + 1)*(m - lr*h); m <- m - lr*(clip(rescale*g) + wd*w)`.
/// As in MXNet 1.9.1, whose kernel runs in place, the last line reads the *updated* weight.
pub struct Nag {
    /// Shared options.
    pub opts: OptimizerOptions,
    /// Momentum `mu`.
    pub momentum: f64,
}

impl Nag {
    /// NAG with momentum `mu`.
    pub fn new(learning_rate: f64, momentum: f64) -> Self {
        Nag {
            opts: OptimizerOptions::new(learning_rate),
            momentum,
        }
    }
}

impl Rule for Nag {
    const NAME: &'static str = "nag";
    fn state_names(&self) -> &'static [&'static str] {
        momentum_state(self.momentum)
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        if self.momentum == 0.0 {
            return sgd_update(w, g, &ctx.args(()));
        }
        let [mom] = st.arrays_n(Self::NAME)?;
        let hyper = MomentumParams {
            momentum: self.momentum,
        };
        nag_mom_update(w, g, mom, &ctx.args(hyper))
    }
}

/// Signum (core's `signum_update`), or signSGD when momentum is 0 (`signsgd_update`).
///
/// Signum: `m <- mu*m - (1-mu)*wd*w - (1-mu)*clip(rescale*g); w <- (1 - lr*wd_lh)*w + lr*sign(m)`.
/// signSGD: `w <- (1 - lr*wd)*w - lr*sign(g)`.
pub struct Signum {
    /// Shared options (MXNet's default learning rate is 0.01).
    pub opts: OptimizerOptions,
    /// Momentum `mu` (default 0.9).
    pub momentum: f64,
    /// Decoupled weight decay (default 0).
    pub wd_lh: f64,
}

impl Signum {
    /// Signum with momentum 0.9 and no decoupled decay.
    pub fn new(learning_rate: f64) -> Self {
        Signum {
            opts: OptimizerOptions::new(learning_rate),
            momentum: 0.9,
            wd_lh: 0.0,
        }
    }
}

impl Rule for Signum {
    const NAME: &'static str = "signum";
    fn state_names(&self) -> &'static [&'static str] {
        momentum_state(self.momentum)
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        if self.momentum == 0.0 {
            return signsgd_update(w, g, &ctx.args(()));
        }
        let [mom] = st.arrays_n(Self::NAME)?;
        let hyper = SignumParams {
            momentum: self.momentum,
            wd_lh: self.wd_lh,
        };
        signum_update(w, g, mom, &ctx.args(hyper))
    }
}
