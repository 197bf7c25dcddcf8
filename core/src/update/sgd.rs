//! SGD (plain and with momentum), Nesterov momentum (NAG), signSGD and Signum.

use crate::error::Result;
use crate::storage::UpdateRule;
use crate::NDArray;

use super::args::{check_finite, UpdateArgs};
use super::checked_run;

/// The momentum of [`sgd_mom_update`] and [`nag_mom_update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MomentumParams {
    /// Momentum `mu` (finite).
    pub momentum: f64,
}

/// The hyper-parameters of [`signum_update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SignumParams {
    /// Momentum `mu` (finite).
    pub momentum: f64,
    /// Decoupled weight decay applied with the sign step (finite).
    pub wd_lh: f64,
}

/// Plain SGD (MXNet `sgd_update`), in place:
/// `w <- (1 - lr*wd)*w - lr*clip(rescale*g)`.
///
/// Fails, before writing anything, on a non-float or non-dense weight, a gradient of another
/// shape, dtype or a csr one, row ids out of order or range, or non-finite arguments.
///
/// ```
/// use sparrow_core::update::{sgd_update, UpdateArgs};
/// use sparrow_core::NDArray;
/// let w = NDArray::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
/// let g = NDArray::from_vec(vec![0.5f32, -0.5], &[2]).unwrap();
/// sgd_update(&w, &g, &UpdateArgs::new(0.1, ())).unwrap();
/// assert_eq!(w.to_vec::<f32>().unwrap(), vec![0.95, 2.05]);
/// ```
pub fn sgd_update(weight: &NDArray, grad: &NDArray, args: &UpdateArgs) -> Result<()> {
    const OP: &str = "sgd_update";
    args.check(OP)?;
    checked_run(OP, weight, grad, [], args, UpdateRule::Sgd).map(drop)
}

/// SGD with momentum (MXNet `sgd_mom_update`), in place:
/// `m <- mu*m - lr*wd*w - lr*clip(rescale*g); w <- w + m`.
///
/// `mom` is the momentum state, dense and shaped like the weight. Fails as [`sgd_update`] does,
/// and on a state of another shape, dtype or storage type.
pub fn sgd_mom_update(
    weight: &NDArray,
    grad: &NDArray,
    mom: &NDArray,
    args: &UpdateArgs<MomentumParams>,
) -> Result<()> {
    const OP: &str = "sgd_mom_update";
    args.check(OP)?;
    check_finite(OP, &[("momentum", args.hyper.momentum)])?;
    let rule = UpdateRule::SgdMom {
        momentum: args.hyper.momentum,
    };
    checked_run(OP, weight, grad, [("mom", mom)], args, rule).map(drop)
}

/// Nesterov accelerated gradient (MXNet `nag_mom_update`), in place. Per element, with
/// `h = clip(rescale*g)`:
/// `m <- mu*m; w <- w - m + (mu + 1)*(m - lr*(h + wd*w)); m <- m - lr*(h + wd*w)`.
/// As in MXNet 1.9.1, whose kernel runs in place, the last line reads the *updated* weight.
///
/// `mom` is the momentum state. Fails as [`sgd_mom_update`] does.
pub fn nag_mom_update(
    weight: &NDArray,
    grad: &NDArray,
    mom: &NDArray,
    args: &UpdateArgs<MomentumParams>,
) -> Result<()> {
    const OP: &str = "nag_mom_update";
    args.check(OP)?;
    check_finite(OP, &[("momentum", args.hyper.momentum)])?;
    let rule = UpdateRule::NagMom {
        momentum: args.hyper.momentum,
    };
    checked_run(OP, weight, grad, [("mom", mom)], args, rule).map(drop)
}

/// signSGD (MXNet `signsgd_update`), in place: `w <- (1 - lr*wd)*w - lr*sign(g)`.
///
/// Only the gradient's sign counts, so `rescale_grad` and `clip_gradient` change nothing (they
/// are still checked). Fails as [`sgd_update`] does.
pub fn signsgd_update(weight: &NDArray, grad: &NDArray, args: &UpdateArgs) -> Result<()> {
    const OP: &str = "signsgd_update";
    args.check(OP)?;
    checked_run(OP, weight, grad, [], args, UpdateRule::SignSgd).map(drop)
}

/// Signum (MXNet `signum_update`), in place:
/// `m <- mu*m - (1-mu)*wd*w - (1-mu)*clip(rescale*g); w <- (1 - lr*wd_lh)*w + lr*sign(m)`.
///
/// `mom` is the momentum state. Fails as [`sgd_mom_update`] does.
pub fn signum_update(
    weight: &NDArray,
    grad: &NDArray,
    mom: &NDArray,
    args: &UpdateArgs<SignumParams>,
) -> Result<()> {
    const OP: &str = "signum_update";
    args.check(OP)?;
    let h = &args.hyper;
    check_finite(OP, &[("momentum", h.momentum), ("wd_lh", h.wd_lh)])?;
    let rule = UpdateRule::Signum {
        momentum: h.momentum,
        wd_lh: h.wd_lh,
    };
    checked_run(OP, weight, grad, [("mom", mom)], args, rule).map(drop)
}
