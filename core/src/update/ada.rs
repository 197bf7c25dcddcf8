//! AdaGrad, AdaDelta and RMSProp (plain and centered).

use crate::error::{Error, Result};
use crate::{float_dispatch, Float, NDArray};

use super::args::{check_finite, UpdateArgs};
use super::check::check_arrays;
use super::Scalars;
use super::{cast, clip};
use crate::cpu::update::apply_elementwise;

/// The hyper-parameters of [`adagrad_update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaGradParams {
    /// The guard added inside the square root (MXNet's `float_stable_eps`, 1e-7).
    pub epsilon: f64,
}

/// The hyper-parameters of [`adadelta_update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaDeltaParams {
    /// Decay (0.9).
    pub rho: f64,
    /// Guard (1e-5).
    pub epsilon: f64,
}

/// The hyper-parameters of [`rmsprop_update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RmsPropParams {
    /// Decay of the squared-gradient average (0.9).
    pub gamma1: f64,
    /// Guard (1e-8).
    pub epsilon: f64,
    /// Clip the updated weight to `[-c, c]` when set (`c > 0`).
    pub clip_weights: Option<f64>,
}

/// The hyper-parameters of [`rmspropalex_update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RmsPropAlexParams {
    /// Decay of the gradient and squared-gradient averages (0.9).
    pub gamma1: f64,
    /// Momentum of the step (0.9).
    pub gamma2: f64,
    /// Guard (1e-8).
    pub epsilon: f64,
    /// Clip the updated weight to `[-c, c]` when set (`c > 0`).
    pub clip_weights: Option<f64>,
}

/// Fail when a weight clip is set but not greater than 0 (or NaN).
fn check_clip_weights(op: &'static str, c: Option<f64>) -> Result<()> {
    match c {
        Some(c) if c.is_nan() || c <= 0.0 => Err(Error::arg(
            op,
            format!("clip_weights must be > 0 (None turns it off), got {c}"),
        )),
        _ => Ok(()),
    }
}

/// AdaGrad (MXNet's `AdaGrad`: its dense path in Python, its row_sparse path
/// `adagrad_update`), in place:
/// `h = clip(rescale*g); s <- s + h^2; w <- w + (h/sqrt(s + eps) + wd*w) * -lr`.
/// MXNet's sparse kernel refuses `wd != 0`; here the same formula applies.
///
/// `history` is the state, dense and shaped like the weight. Fails, before writing anything,
/// on a non-float or non-dense weight, a gradient of another shape or dtype or a csr one, a
/// state of another shape, dtype or storage type, row ids out of order or range, or
/// non-finite arguments.
pub fn adagrad_update(
    weight: &NDArray,
    grad: &NDArray,
    history: &NDArray,
    args: &UpdateArgs<AdaGradParams>,
) -> Result<()> {
    const OP: &str = "adagrad_update";
    args.check(OP)?;
    check_finite(OP, &[("epsilon", args.hyper.epsilon)])?;
    let dtype = check_arrays(OP, weight, grad, &[("history", history)])?;
    float_dispatch!(dtype, OP, T => adagrad::<T>(weight, grad, history, args))
}

fn adagrad<T: Float>(
    w: &NDArray,
    g: &NDArray,
    history: &NDArray,
    args: &UpdateArgs<AdaGradParams>,
) -> Result<()> {
    let Scalars {
        lr,
        wd,
        rg,
        clip: c,
    } = args.scalars::<T>();
    let eps: T = cast(args.hyper.epsilon);
    apply_elementwise::<T, 1, _>(
        "adagrad_update",
        w,
        g,
        [history],
        args.lazy(),
        move |w, g, [s]| {
            let h = clip(g * rg, c);
            *s = *s + h * h;
            let div = h / (*s + eps).sqrt();
            *w = *w + (div + *w * wd) * -lr;
        },
    )
}

/// AdaDelta (MXNet's Python `AdaDelta`), in place. Like MXNet it uses no learning rate
/// (`args.lr` is checked, then ignored):
/// `h = clip(rescale*g); a <- rho*a + (1-rho)*h^2; d = sqrt(b + eps)/sqrt(a + eps)*h;
/// b <- rho*b + (1-rho)*d^2; w <- w - (d + wd*w)`.
///
/// `acc_grad` (`a`) and `acc_delta` (`b`) are the states; failures as for [`adagrad_update`].
pub fn adadelta_update(
    weight: &NDArray,
    grad: &NDArray,
    acc_grad: &NDArray,
    acc_delta: &NDArray,
    args: &UpdateArgs<AdaDeltaParams>,
) -> Result<()> {
    const OP: &str = "adadelta_update";
    args.check(OP)?;
    let h = &args.hyper;
    check_finite(OP, &[("rho", h.rho), ("epsilon", h.epsilon)])?;
    let states = [("acc_grad", acc_grad), ("acc_delta", acc_delta)];
    let dtype = check_arrays(OP, weight, grad, &states)?;
    float_dispatch!(dtype, OP, T => adadelta::<T>(weight, grad, [acc_grad, acc_delta], args))
}

fn adadelta<T: Float>(
    w: &NDArray,
    g: &NDArray,
    states: [&NDArray; 2],
    args: &UpdateArgs<AdaDeltaParams>,
) -> Result<()> {
    let (wd, rg, rho, eps): (T, T, T, T) = (
        cast(args.wd),
        cast(args.rescale_grad),
        cast(args.hyper.rho),
        cast(args.hyper.epsilon),
    );
    let c: Option<T> = args.clip_gradient.map(cast);
    let one = T::one();
    apply_elementwise::<T, 2, _>(
        "adadelta_update",
        w,
        g,
        states,
        args.lazy(),
        move |w, g, [a, b]| {
            let h = clip(g * rg, c);
            *a = rho * *a + (one - rho) * h * h;
            let d = (*b + eps).sqrt() / (*a + eps).sqrt() * h;
            *b = rho * *b + (one - rho) * d * d;
            *w = *w - (d + wd * *w);
        },
    )
}

/// RMSProp as Tieleman & Hinton describe it (MXNet `rmsprop_update`), in place:
/// `h = clip(rescale*g + wd*w); n <- (1-g1)*h^2 + g1*n; w <- w - lr*h/sqrt(n + eps)`, then
/// `w` clipped to `[-clip_weights, clip_weights]` when set.
///
/// `n` is the state; failures as for [`adagrad_update`].
pub fn rmsprop_update(
    weight: &NDArray,
    grad: &NDArray,
    n: &NDArray,
    args: &UpdateArgs<RmsPropParams>,
) -> Result<()> {
    const OP: &str = "rmsprop_update";
    args.check(OP)?;
    let h = &args.hyper;
    check_finite(OP, &[("gamma1", h.gamma1), ("epsilon", h.epsilon)])?;
    check_clip_weights(OP, h.clip_weights)?;
    let dtype = check_arrays(OP, weight, grad, &[("n", n)])?;
    float_dispatch!(dtype, OP, T => rmsprop::<T>(weight, grad, n, args))
}

fn rmsprop<T: Float>(
    w: &NDArray,
    g: &NDArray,
    n: &NDArray,
    args: &UpdateArgs<RmsPropParams>,
) -> Result<()> {
    let p = &args.hyper;
    let (lr, wd, rg, eps): (T, T, T, T) = (
        cast(args.lr),
        cast(args.wd),
        cast(args.rescale_grad),
        cast(p.epsilon),
    );
    let g1: T = cast(p.gamma1);
    let c: Option<T> = args.clip_gradient.map(cast);
    let cw: Option<T> = p.clip_weights.map(cast);
    let one = T::one();
    apply_elementwise::<T, 1, _>(
        "rmsprop_update",
        w,
        g,
        [n],
        args.lazy(),
        move |w, g, [n]| {
            let h = clip(rg * g + wd * *w, c);
            *n = (one - g1) * (h * h) + g1 * *n;
            *w = clip(*w - lr * (h / (*n + eps).sqrt()), cw);
        },
    )
}

/// Centered RMSProp as Graves describes it (MXNet `rmspropalex_update`), in place:
/// `h = clip(rescale*g + wd*w); n <- (1-g1)*h^2 + g1*n; s <- (1-g1)*h + g1*s;
/// d <- g2*d - lr*h/sqrt(n - s^2 + eps); w <- w + d`, then `w` clipped to
/// `[-clip_weights, clip_weights]` when set.
///
/// `n`, `g` (here `s`, the gradient average) and `delta` are the states; failures as for
/// [`adagrad_update`].
pub fn rmspropalex_update(
    weight: &NDArray,
    grad: &NDArray,
    n: &NDArray,
    g: &NDArray,
    delta: &NDArray,
    args: &UpdateArgs<RmsPropAlexParams>,
) -> Result<()> {
    const OP: &str = "rmspropalex_update";
    args.check(OP)?;
    let h = &args.hyper;
    check_finite(
        OP,
        &[
            ("gamma1", h.gamma1),
            ("gamma2", h.gamma2),
            ("epsilon", h.epsilon),
        ],
    )?;
    check_clip_weights(OP, h.clip_weights)?;
    let dtype = check_arrays(OP, weight, grad, &[("n", n), ("g", g), ("delta", delta)])?;
    float_dispatch!(dtype, OP, T => rmspropalex::<T>(weight, grad, [n, g, delta], args))
}

fn rmspropalex<T: Float>(
    w: &NDArray,
    g: &NDArray,
    states: [&NDArray; 3],
    args: &UpdateArgs<RmsPropAlexParams>,
) -> Result<()> {
    let p = &args.hyper;
    let (lr, wd, rg, eps): (T, T, T, T) = (
        cast(args.lr),
        cast(args.wd),
        cast(args.rescale_grad),
        cast(p.epsilon),
    );
    let (g1, g2): (T, T) = (cast(p.gamma1), cast(p.gamma2));
    let c: Option<T> = args.clip_gradient.map(cast);
    let cw: Option<T> = p.clip_weights.map(cast);
    let one = T::one();
    apply_elementwise::<T, 3, _>(
        "rmspropalex_update",
        w,
        g,
        states,
        args.lazy(),
        move |w, g, [n, s, d]| {
            let h = clip(rg * g + wd * *w, c);
            *n = (one - g1) * h * h + g1 * *n;
            *s = (one - g1) * h + g1 * *s;
            *d = g2 * *d - (lr * h / (*n - *s * *s + eps).sqrt());
            *w = clip(*w + *d, cw);
        },
    )
}
