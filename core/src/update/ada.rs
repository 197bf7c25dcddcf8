//! AdaGrad, AdaDelta and RMSProp (plain and centered).

use crate::error::{Error, Result};
use crate::storage::UpdateRule;
use crate::NDArray;

use super::args::{check_finite, UpdateArgs};
use super::checked_run;

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
    let rule = UpdateRule::AdaGrad {
        epsilon: args.hyper.epsilon,
    };
    checked_run(OP, weight, grad, [("history", history)], args, rule).map(drop)
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
    let rule = UpdateRule::AdaDelta {
        rho: h.rho,
        epsilon: h.epsilon,
    };
    checked_run(OP, weight, grad, states, args, rule).map(drop)
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
    let rule = UpdateRule::RmsProp {
        gamma1: h.gamma1,
        epsilon: h.epsilon,
        clip_weights: h.clip_weights,
    };
    checked_run(OP, weight, grad, [("n", n)], args, rule).map(drop)
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
    let rule = UpdateRule::RmsPropAlex {
        gamma1: h.gamma1,
        gamma2: h.gamma2,
        epsilon: h.epsilon,
        clip_weights: h.clip_weights,
    };
    checked_run(
        OP,
        weight,
        grad,
        [("n", n), ("g", g), ("delta", delta)],
        args,
        rule,
    )
    .map(drop)
}
