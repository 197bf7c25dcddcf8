//! SGD (with momentum), Nesterov momentum (NAG) and Signum / signSGD.

use sparrow_core::ops::map_assign;
use sparrow_core::{Float, NDArray, Result};

use super::driver::{apply_elementwise, apply_zip};
use super::{cast, clip, dispatch_float, sign, Optimizer, OptimizerOptions, State, StepCtx};

/// Stochastic gradient descent with optional momentum (MXNet `sgd_update` / `sgd_mom_update`).
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

    fn run<T: Float>(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let (lr, wd, rg): (T, T, T) = (cast(ctx.lr), cast(ctx.wd), cast(ctx.rescale_grad));
        let c: Option<T> = ctx.clip_gradient.map(cast);
        let one = T::one();
        if self.momentum == 0.0 {
            // The clip test is hoisted out of the element loop so the common unclipped update is
            // a straight-line fused multiply-add LLVM vectorizes.
            let decay = one - lr * wd;
            match c {
                Some(_) => apply_elementwise::<T, 0, _>(
                    "sgd_update",
                    w,
                    g,
                    &[],
                    ctx.lazy_update,
                    move |w, g, []| *w = decay * *w - lr * clip(rg * g, c),
                ),
                None => {
                    // Span-level loops rather than the per-element callback: this is the whole
                    // update of the common case, run 8 lanes wide on AVX2 (bit-identical to the
                    // plain loop); a small lazy row_sparse step is one loop over its rows.
                    let step = lr * rg;
                    apply_zip(
                        "sgd_update",
                        w,
                        g,
                        ctx.lazy_update,
                        move |w: T, g: T| decay * w - step * g,
                        move |w: &mut [T]| {
                            if decay != one {
                                map_assign(w, |w| decay * w);
                            }
                        },
                    )
                }
            }
        } else {
            let mu: T = cast(self.momentum);
            let states = st.handles();
            apply_elementwise::<T, 1, _>(
                "sgd_mom_update",
                w,
                g,
                &states,
                ctx.lazy_update,
                move |w, g, [m]| {
                    *m = match c {
                        Some(_) => mu * *m - lr * wd * *w - lr * clip(rg * g, c),
                        None => mu * *m - lr * wd * *w - lr * rg * g,
                    };
                    *w = *w + *m;
                },
            )
        }
    }
}

impl Optimizer for Sgd {
    fn name(&self) -> &'static str {
        "sgd"
    }
    fn options(&self) -> &OptimizerOptions {
        &self.opts
    }
    fn options_mut(&mut self) -> &mut OptimizerOptions {
        &mut self.opts
    }
    fn create_state(&self, _index: usize, weight: &NDArray) -> Result<State> {
        if self.momentum == 0.0 {
            State::zeros_like(weight, &[])
        } else {
            State::zeros_like(weight, &["momentum"])
        }
    }
    fn step(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        dispatch_float!(self, ctx, w, g, st)
    }
}

/// Nesterov accelerated gradient (MXNet `nag_mom_update`; plain SGD when momentum is 0).
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

    fn run<T: Float>(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        if self.momentum == 0.0 {
            let sgd = Sgd {
                opts: OptimizerOptions::new(ctx.lr),
                momentum: 0.0,
            };
            return sgd.run::<T>(ctx, w, g, st);
        }
        let (lr, wd, rg): (T, T, T) = (cast(ctx.lr), cast(ctx.wd), cast(ctx.rescale_grad));
        let c: Option<T> = ctx.clip_gradient.map(cast);
        let mu: T = cast(self.momentum);
        let one = T::one();
        let states = st.handles();
        apply_elementwise::<T, 1, _>(
            "nag_mom_update",
            w,
            g,
            &states,
            ctx.lazy_update,
            move |w, g, [m]| {
                let gr = match c {
                    Some(_) => clip(rg * g, c),
                    None => rg * g,
                };
                *m = mu * *m;
                *w = *w - *m + (mu + one) * (*m - lr * (gr + wd * *w));
                *m = *m - lr * (gr + wd * *w);
            },
        )
    }
}

impl Optimizer for Nag {
    fn name(&self) -> &'static str {
        "nag"
    }
    fn options(&self) -> &OptimizerOptions {
        &self.opts
    }
    fn options_mut(&mut self) -> &mut OptimizerOptions {
        &mut self.opts
    }
    fn create_state(&self, _index: usize, weight: &NDArray) -> Result<State> {
        if self.momentum == 0.0 {
            State::zeros_like(weight, &[])
        } else {
            State::zeros_like(weight, &["momentum"])
        }
    }
    fn step(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        dispatch_float!(self, ctx, w, g, st)
    }
}

/// Signum (MXNet `signum_update`), or signSGD when momentum is 0 (`signsgd_update`).
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

    fn run<T: Float>(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let (lr, wd, rg): (T, T, T) = (cast(ctx.lr), cast(ctx.wd), cast(ctx.rescale_grad));
        let c: Option<T> = ctx.clip_gradient.map(cast);
        let one = T::one();
        if self.momentum == 0.0 {
            return apply_elementwise::<T, 0, _>(
                "signsgd_update",
                w,
                g,
                &[],
                ctx.lazy_update,
                move |w, g, []| {
                    *w = (one - lr * wd) * *w - lr * sign(g);
                },
            );
        }
        let mu: T = cast(self.momentum);
        let wd_lh: T = cast(self.wd_lh);
        let states = st.handles();
        apply_elementwise::<T, 1, _>(
            "signum_update",
            w,
            g,
            &states,
            ctx.lazy_update,
            move |w, g, [m]| {
                *m = match c {
                    Some(_) => mu * *m - (one - mu) * wd * *w - (one - mu) * clip(rg * g, c),
                    None => mu * *m - (one - mu) * wd * *w - (one - mu) * rg * g,
                };
                *w = (one - lr * wd_lh) * *w + lr * sign(*m);
            },
        )
    }
}

impl Optimizer for Signum {
    fn name(&self) -> &'static str {
        "signum"
    }
    fn options(&self) -> &OptimizerOptions {
        &self.opts
    }
    fn options_mut(&mut self) -> &mut OptimizerOptions {
        &mut self.opts
    }
    fn create_state(&self, _index: usize, weight: &NDArray) -> Result<State> {
        if self.momentum == 0.0 {
            State::zeros_like(weight, &[])
        } else {
            State::zeros_like(weight, &["momentum"])
        }
    }
    fn step(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        dispatch_float!(self, ctx, w, g, st)
    }
}
