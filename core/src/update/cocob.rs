//! COCOB, coin betting (Orabona and Tommasi, "Training Deep Networks without Learning Rates
//! Through Coin Betting", 2017): a parameter-free per-coordinate update.

use crate::error::Result;
use crate::storage::UpdateRule;
use crate::NDArray;

use super::args::{check_finite, UpdateArgs};
use super::checked_run;

/// The hyper-parameters of [`cocob_update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CocobParams {
    /// Caps the bet while few gradients have been seen (100 in the paper).
    pub alpha: f64,
}

/// COCOB-Backprop, in place, per coordinate: with `h = clip(rescale*g) + wd*w`,
/// `w0 <- w` while nothing was seen (`l = 0`); `l <- max(l, |h|)`; then, once `l > 0`,
/// `s <- s + |h|; r <- max(r - h*(w - w0), 0); theta <- theta + h;
/// w <- w0 - lr * theta / (l * max(s + l, alpha*l)) * (l + r)`.
///
/// The step needs no learning rate: the bet grows with the wealth `r` won so far. `lr` scales
/// it (1 is the paper's algorithm). Like the coin-betting updates of Vowpal Wabbit (`--coin`)
/// it adapts to each coordinate's gradient scale, which suits sparse linear models whose
/// features differ in frequency and range.
///
/// The states `l` (largest |h|), `s` (sum of |h|), `r` (reward), `theta` (sum of h) and `w0`
/// (the weight at the coordinate's first gradient) are dense and shaped like the weight.
/// Fails, before writing anything, as the other update operators do, and on a non-finite or
/// non-positive `alpha`.
#[allow(clippy::too_many_arguments)]
pub fn cocob_update(
    weight: &NDArray,
    grad: &NDArray,
    l: &NDArray,
    s: &NDArray,
    r: &NDArray,
    theta: &NDArray,
    w0: &NDArray,
    args: &UpdateArgs<CocobParams>,
) -> Result<()> {
    const OP: &str = "cocob_update";
    args.check(OP)?;
    let h = &args.hyper;
    check_finite(OP, &[("alpha", h.alpha)])?;
    if h.alpha <= 0.0 {
        return Err(crate::Error::arg(
            OP,
            format!("alpha must be positive, got {}", h.alpha),
        ));
    }
    let rule = UpdateRule::Cocob { alpha: h.alpha };
    let states = [("l", l), ("s", s), ("r", r), ("theta", theta), ("w0", w0)];
    checked_run(OP, weight, grad, states, args, rule).map(drop)
}
