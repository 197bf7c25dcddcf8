//! AdaGrad, AdaDelta and RMSProp (plain and centered).

use sparrow_core::{Float, NDArray, Result};

use super::adam::impl_optimizer;
use super::driver::apply_elementwise;
use super::{cast, clip, dispatch_float, Optimizer, OptimizerOptions, State, StepCtx};

/// AdaGrad (MXNet's `AdaGrad`; dense path in Python, row_sparse path `adagrad_update`):
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
    fn init_scalars(&self, _s: &mut State) {}

    fn run<T: Float>(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let (lr, wd, rg, eps): (T, T, T, T) = (
            cast(ctx.lr),
            cast(ctx.wd),
            cast(ctx.rescale_grad),
            cast(self.eps),
        );
        let c: Option<T> = ctx.clip_gradient.map(cast);
        let states = st.handles();
        apply_elementwise::<T, 1, _>(
            "adagrad_update",
            w,
            g,
            &states,
            ctx.lazy_update,
            move |w, g, [s]| {
                let h = clip(g * rg, c);
                *s = *s + h * h;
                let div = h / (*s + eps).sqrt();
                *w = *w + (div + *w * wd) * -lr;
            },
        )
    }
}
impl_optimizer!(AdaGrad, "adagrad", &["history"]);

/// AdaDelta (MXNet's Python `AdaDelta`). Like MXNet it uses no learning rate:
/// `h = clip(rescale*g); a <- rho*a + (1-rho)*h^2; d = sqrt(b + eps)/sqrt(a + eps)*h;
/// b <- rho*b + (1-rho)*d^2; w <- w - (d + wd*w)`.
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
    fn init_scalars(&self, _s: &mut State) {}

    fn run<T: Float>(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let (wd, rg, rho, eps): (T, T, T, T) = (
            cast(ctx.wd),
            cast(ctx.rescale_grad),
            cast(self.rho),
            cast(self.epsilon),
        );
        let c: Option<T> = ctx.clip_gradient.map(cast);
        let one = T::one();
        let states = st.handles();
        apply_elementwise::<T, 2, _>(
            "adadelta_update",
            w,
            g,
            &states,
            ctx.lazy_update,
            move |w, g, [a, b]| {
                let h = clip(g * rg, c);
                *a = rho * *a + (one - rho) * h * h;
                let d = (*b + eps).sqrt() / (*a + eps).sqrt() * h;
                *b = rho * *b + (one - rho) * d * d;
                *w = *w - (d + wd * *w);
            },
        )
    }
}

impl Default for AdaDelta {
    fn default() -> Self {
        Self::new()
    }
}
impl_optimizer!(AdaDelta, "adadelta", &["acc_grad", "acc_delta"]);

/// RMSProp. Plain (Tieleman & Hinton, MXNet `rmsprop_update`):
/// `h = clip(rescale*g + wd*w); n <- (1-g1)*h^2 + g1*n; w <- w - lr*h/sqrt(n + eps)`.
/// Centered (Graves, MXNet `rmspropalex_update`): also `s <- (1-g1)*h + g1*s;
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

    fn run<T: Float>(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let (lr, wd, rg, eps): (T, T, T, T) = (
            cast(ctx.lr),
            cast(ctx.wd),
            cast(ctx.rescale_grad),
            cast(self.epsilon),
        );
        let (g1, g2): (T, T) = (cast(self.gamma1), cast(self.gamma2));
        let c: Option<T> = ctx.clip_gradient.map(cast);
        let cw: Option<T> = self.clip_weights.filter(|c| *c > 0.0).map(cast);
        let one = T::one();
        let states = st.handles();
        if !self.centered {
            apply_elementwise::<T, 1, _>(
                "rmsprop_update",
                w,
                g,
                &states,
                ctx.lazy_update,
                move |w, g, [n]| {
                    let h = clip(rg * g + wd * *w, c);
                    *n = (one - g1) * (h * h) + g1 * *n;
                    *w = clip(*w - lr * (h / (*n + eps).sqrt()), cw);
                },
            )
        } else {
            apply_elementwise::<T, 3, _>(
                "rmspropalex_update",
                w,
                g,
                &states,
                ctx.lazy_update,
                move |w, g, [n, s, d]| {
                    let h = clip(rg * g + wd * *w, c);
                    *n = (one - g1) * h * h + g1 * *n;
                    *s = (one - g1) * h + g1 * *s;
                    *d = g2 * *d - (lr * h / (*n - *s * *s + eps).sqrt());
                    *w = clip(*w + *d, cw);
                },
            )
        }
    }
}

impl Optimizer for RMSProp {
    fn name(&self) -> &'static str {
        "rmsprop"
    }
    fn options(&self) -> &OptimizerOptions {
        &self.opts
    }
    fn options_mut(&mut self) -> &mut OptimizerOptions {
        &mut self.opts
    }
    fn create_state(&self, _index: usize, weight: &NDArray) -> Result<State> {
        if self.centered {
            State::zeros_like(weight, &["n", "g", "delta"])
        } else {
            State::zeros_like(weight, &["n"])
        }
    }
    fn step(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        dispatch_float!(self, ctx, w, g, st)
    }
}
