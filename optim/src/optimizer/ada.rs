//! AdaGrad, AdaDelta and RMSProp (plain and centered).

use sparrow_core::update::{
    adadelta_update, adagrad_update, rmsprop_update, rmspropalex_update, AdaDeltaParams,
    AdaGradParams, RmsPropAlexParams, RmsPropParams,
};
use sparrow_core::{NDArray, Result};

use super::{OptimizerOptions, Rule, State, StepCtx};

/// AdaGrad (MXNet's `AdaGrad`, core's `adagrad_update`):
/// `h = clip(rescale*g); s <- s + h^2; w <- w + (h/sqrt(s + eps) + wd*w) * -lr`, eps inside the
/// square root. MXNet's sparse kernel refuses `wd != 0`; here the same formula applies.
pub struct AdaGrad {
    /// Shared options.
    pub opts: OptimizerOptions,
    /// The `float_stable_eps` (1e-7).
    pub eps: f64,
}

impl AdaGrad {
    /// AdaGrad with eps 1e-7.
    pub fn new(learning_rate: f64) -> Self {
        AdaGrad {
            opts: OptimizerOptions::new(learning_rate),
            eps: 1e-7,
        }
    }
}

impl Rule for AdaGrad {
    const NAME: &'static str = "adagrad";
    fn state_names(&self) -> &'static [&'static str] {
        &["history"]
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let [history] = st.arrays_n(Self::NAME)?;
        let hyper = AdaGradParams { epsilon: self.eps };
        adagrad_update(w, g, history, &ctx.args(hyper))
    }
}

/// AdaDelta (MXNet's Python `AdaDelta`, core's `adadelta_update`). Like MXNet it uses no
/// learning rate: `h = clip(rescale*g); a <- rho*a + (1-rho)*h^2;
/// d = sqrt(b + eps)/sqrt(a + eps)*h; b <- rho*b + (1-rho)*d^2; w <- w - (d + wd*w)`.
pub struct AdaDelta {
    /// Shared options (the learning rate is unused, as in MXNet).
    pub opts: OptimizerOptions,
    /// Decay (0.9).
    pub rho: f64,
    /// Guard (1e-5).
    pub epsilon: f64,
}

impl AdaDelta {
    /// AdaDelta with MXNet's defaults.
    pub fn new() -> Self {
        AdaDelta {
            opts: OptimizerOptions::new(1.0),
            rho: 0.9,
            epsilon: 1e-5,
        }
    }
}

impl Default for AdaDelta {
    fn default() -> Self {
        Self::new()
    }
}

impl Rule for AdaDelta {
    const NAME: &'static str = "adadelta";
    fn state_names(&self) -> &'static [&'static str] {
        &["acc_grad", "acc_delta"]
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let [acc_grad, acc_delta] = st.arrays_n(Self::NAME)?;
        let hyper = AdaDeltaParams {
            rho: self.rho,
            epsilon: self.epsilon,
        };
        adadelta_update(w, g, acc_grad, acc_delta, &ctx.args(hyper))
    }
}

/// RMSProp. Plain (Tieleman & Hinton, core's `rmsprop_update`):
/// `h = clip(rescale*g + wd*w); n <- (1-g1)*h^2 + g1*n; w <- w - lr*h/sqrt(n + eps)`.
/// Centered (Graves, core's `rmspropalex_update`): also `s <- (1-g1)*h + g1*s;
/// d <- g2*d - lr*h/sqrt(n - s^2 + eps); w <- w + d`. Optionally clips the weight to
/// `[-clip_weights, clip_weights]`.
pub struct RMSProp {
    /// Shared options (MXNet's default learning rate is 0.001).
    pub opts: OptimizerOptions,
    /// Decay of the squared-gradient average (0.9).
    pub gamma1: f64,
    /// Momentum of the centered version (0.9).
    pub gamma2: f64,
    /// Guard (1e-8).
    pub epsilon: f64,
    /// Graves' centered version.
    pub centered: bool,
    /// Clip weights to this bound when set (and > 0).
    pub clip_weights: Option<f64>,
}

impl RMSProp {
    /// Plain RMSProp with MXNet's defaults.
    pub fn new(learning_rate: f64) -> Self {
        RMSProp {
            opts: OptimizerOptions::new(learning_rate),
            gamma1: 0.9,
            gamma2: 0.9,
            epsilon: 1e-8,
            centered: false,
            clip_weights: None,
        }
    }
    /// Centered RMSProp with MXNet's defaults.
    pub fn centered(learning_rate: f64) -> Self {
        RMSProp {
            centered: true,
            ..Self::new(learning_rate)
        }
    }
}

impl Rule for RMSProp {
    const NAME: &'static str = "rmsprop";
    fn state_names(&self) -> &'static [&'static str] {
        if self.centered {
            &["n", "g", "delta"]
        } else {
            &["n"]
        }
    }
    fn apply(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let clip_weights = self.clip_weights.filter(|c| *c > 0.0);
        if !self.centered {
            let [n] = st.arrays_n(Self::NAME)?;
            let hyper = RmsPropParams {
                gamma1: self.gamma1,
                epsilon: self.epsilon,
                clip_weights,
            };
            return rmsprop_update(w, g, n, &ctx.args(hyper));
        }
        let [n, avg, delta] = st.arrays_n(Self::NAME)?;
        let hyper = RmsPropAlexParams {
            gamma1: self.gamma1,
            gamma2: self.gamma2,
            epsilon: self.epsilon,
            clip_weights,
        };
        rmspropalex_update(w, g, n, avg, delta, &ctx.args(hyper))
    }
}
