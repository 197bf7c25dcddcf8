//! COCOB, coin betting (Orabona and Tommasi, "Training Deep Networks without Learning Rates
//! Through Coin Betting", 2017): a parameter-free per-coordinate update.

use crate::error::Result;
use crate::storage::UpdateRule;
use crate::NDArray;

use super::args::{check_finite, UpdateArgs};
use super::check::check_arrays_shaped;
use super::{checked_run, run};

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
    check_alpha(OP, args)?;
    let h = &args.hyper;
    let rule = UpdateRule::Cocob { alpha: h.alpha };
    let states = [("l", l), ("s", s), ("r", r), ("theta", theta), ("w0", w0)];
    checked_run(OP, weight, grad, states, args, rule).map(drop)
}

/// The number of state values [`cocob_packed_update`] keeps per weight element.
pub const COCOB_STATES: usize = 5;

/// [`cocob_update`] with the five states of each element side by side in one array `state`
/// of the weight's shape plus a last axis of [`COCOB_STATES`]: `state[.., 0..5]` is
/// `l, s, r, theta, w0`. Same formula, same bits as [`cocob_update`] on the five arrays.
///
/// The layout is for speed: a lazy row_sparse step touches rows scattered through the table,
/// and each separate state array costs a cache miss per row; packed, the five states of a row
/// come in one (for a one-column weight, 20 bytes a row).
///
/// ```
/// use sparrow_core::update::{cocob_packed_update, CocobParams, UpdateArgs};
/// use sparrow_core::{DType, NDArray};
/// let w = NDArray::from_vec(vec![1.0f32, 2.0], &[2, 1]).unwrap();
/// let state = NDArray::zeros(&[2, 1, 5], DType::F32).unwrap();
/// let g = NDArray::row_sparse_from_parts(vec![0.5f32], vec![1], &[2, 1]).unwrap();
/// let args = UpdateArgs::new(1.0, CocobParams { alpha: 20.0 });
/// cocob_packed_update(&w, &g, &state, &args).unwrap();
/// let st = state.to_vec::<f32>().unwrap();
/// // Row 1's l, s, theta and w0 after one gradient of 0.5; row 0 untouched.
/// assert_eq!(&st[5..], &[0.5, 0.5, 0.0, 0.5, 2.0]);
/// assert_eq!(&st[..5], &[0.0; 5]);
/// ```
///
/// Fails, before writing anything, as [`cocob_update`] does, and on a state of another shape.
pub fn cocob_packed_update(
    weight: &NDArray,
    grad: &NDArray,
    state: &NDArray,
    args: &UpdateArgs<CocobParams>,
) -> Result<()> {
    const OP: &str = "cocob_packed_update";
    check_alpha(OP, args)?;
    let mut shape = weight.shape().to_vec();
    shape.push(COCOB_STATES);
    check_arrays_shaped(OP, weight, grad, &[("packed", state)], Some(&shape))?;
    let rule = UpdateRule::CocobPacked {
        alpha: args.hyper.alpha,
    };
    run(weight, grad, [state], args, rule).map(drop)
}

/// The shared arguments' checks and a finite, positive `alpha`.
fn check_alpha(op: &'static str, args: &UpdateArgs<CocobParams>) -> Result<()> {
    args.check(op)?;
    let alpha = args.hyper.alpha;
    check_finite(op, &[("alpha", alpha)])?;
    if alpha <= 0.0 {
        return Err(crate::Error::arg(
            op,
            format!("alpha must be positive, got {alpha}"),
        ));
    }
    Ok(())
}
