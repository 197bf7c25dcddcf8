//! FTRL-Proximal and FTML.

use sparrow_core::{Float, NDArray, Result};

use super::adam::impl_optimizer;
use super::driver::apply_elementwise;
use super::{cast, clip, dispatch_float, sign, Optimizer, OptimizerOptions, State, StepCtx};

/// FTRL-Proximal (MXNet `ftrl_update`):
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
    fn init_scalars(&self, _s: &mut State) {}

    fn run<T: Float>(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let (lr, wd, rg): (T, T, T) = (cast(ctx.lr), cast(ctx.wd), cast(ctx.rescale_grad));
        let (l1, beta): (T, T) = (cast(self.lambda1), cast(self.beta));
        let c: Option<T> = ctx.clip_gradient.map(cast);
        let states = st.handles();
        apply_elementwise::<T, 2, _>(
            "ftrl_update",
            w,
            g,
            &states,
            ctx.lazy_update,
            move |w, g, [z, n]| {
                let h = clip(g * rg, c);
                *z = *z + (h - ((*n + h * h).sqrt() - n.sqrt()) * *w / lr);
                *n = *n + h * h;
                let on = if z.abs() > l1 { T::one() } else { T::zero() };
                *w = (sign(*z) * l1 - *z) / ((beta + n.sqrt()) / lr + wd) * on;
            },
        )
    }
}
impl_optimizer!(Ftrl, "ftrl", &["z", "n"]);

/// FTML, Follow the Moving Leader (MXNet `ftml_update`):
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
    fn init_scalars(&self, _s: &mut State) {}

    fn run<T: Float>(&self, ctx: &StepCtx, w: &NDArray, g: &NDArray, st: &mut State) -> Result<()> {
        let (lr, wd, rg): (T, T, T) = (cast(ctx.lr), cast(ctx.wd), cast(ctx.rescale_grad));
        let (b1, b2, eps): (T, T, T) = (cast(self.beta1), cast(self.beta2), cast(self.epsilon));
        // MXNet evaluates the powers in the kernel's dtype.
        let t: T = cast(ctx.t as f64);
        let (c1, c2) = (T::one() - b1.powf(t), T::one() - b2.powf(t));
        let c: Option<T> = ctx.clip_gradient.map(cast);
        let one = T::one();
        let states = st.handles();
        apply_elementwise::<T, 3, _>(
            "ftml_update",
            w,
            g,
            &states,
            ctx.lazy_update,
            move |w, g, [d, v, z]| {
                let h = clip(rg * g + wd * *w, c);
                *v = b2 * *v + (one - b2) * (h * h);
                let d_t = c1 / lr * ((*v / c2).sqrt() + eps);
                *z = b1 * *z + (one - b1) * h - (d_t - b1 * *d) * *w;
                *d = d_t;
                *w = -*z / d_t;
            },
        )
    }
}
impl_optimizer!(Ftml, "ftml", &["d", "v", "z"]);
