//! LAMB: Adam's direction scaled per layer by the trust ratio `||w|| / ||u||`.

use crate::error::Result;
use crate::storage::UpdateRule;
use crate::NDArray;

use super::args::{check_bound, check_count, check_finite, UpdateArgs};
use super::check::check_arrays;
use super::run;

/// The hyper-parameters of [`lamb_update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LambParams {
    /// 0.9 by default.
    pub beta1: f64,
    /// 0.999 by default.
    pub beta2: f64,
    /// 1e-6 by default.
    pub epsilon: f64,
    /// This update's number, from 1 (the bias correction uses it).
    pub t: u64,
    /// Bias-correct the moments (default true).
    pub bias_correction: bool,
    /// Lower bound on `||w||` when set (`>= 0`).
    pub lower_bound: Option<f64>,
    /// Upper bound on `||w||` when set (`>= 0`).
    pub upper_bound: Option<f64>,
}

/// LAMB (MXNet `lamb_update_phase1` then `lamb_update_phase2`), in place:
/// `h = clip(rescale*g); m <- b1*m + (1-b1)*h; v <- b2*v + (1-b2)*h^2;
/// u = m_hat/(sqrt(v_hat) + eps) + wd*w` (`m_hat = m/(1-b1^t)`, `v_hat = v/(1-b2^t)` with
/// bias correction, else `m`, `v`); `r1 = ||w||` clamped to `[lower_bound, upper_bound]` when
/// set, `r2 = ||u||`; `w <- w - lr*(r1/r2)*u` (just `lr` when either norm is 0).
///
/// No temporary the size of the weight is made: a first pass updates `m`, `v` and accumulates
/// both norms (in f64), a second recomputes `u` from the new moments and applies it. With a lazy
/// row_sparse update the norms are taken over the rows the gradient holds (MXNet has no sparse
/// LAMB); in standard mode over the whole weight.
///
/// `mean` and `var` are the states, dense and shaped like the weight. Fails, before writing
/// anything, on a non-float or non-dense weight, a gradient of another shape or dtype or a csr
/// one, states of another shape, dtype or storage type (or one array passed twice), row ids
/// out of order or range, non-finite arguments, a negative bound, or `t` of 0.
pub fn lamb_update(
    weight: &NDArray,
    grad: &NDArray,
    mean: &NDArray,
    var: &NDArray,
    args: &UpdateArgs<LambParams>,
) -> Result<()> {
    const OP: &str = "lamb_update";
    args.check(OP)?;
    let h = &args.hyper;
    check_finite(
        OP,
        &[
            ("beta1", h.beta1),
            ("beta2", h.beta2),
            ("epsilon", h.epsilon),
        ],
    )?;
    check_count(OP, h.t)?;
    check_bound(OP, "lower_bound", h.lower_bound, 0.0)?;
    check_bound(OP, "upper_bound", h.upper_bound, 0.0)?;
    check_arrays(OP, weight, grad, &[("mean", mean), ("var", var)])?;
    let (d1, d2) = if h.bias_correction {
        (
            1.0 - super::pow_count(h.beta1, h.t),
            1.0 - super::pow_count(h.beta2, h.t),
        )
    } else {
        (1.0, 1.0)
    };
    let phase1 = UpdateRule::LambPhase1 {
        beta1: h.beta1,
        beta2: h.beta2,
        epsilon: h.epsilon,
        d1,
        d2,
    };
    let [sw, su] = run(weight, grad, [mean, var], args, phase1)?;
    let mut r1 = sw.sqrt();
    if let Some(lb) = h.lower_bound {
        r1 = r1.max(lb);
    }
    if let Some(ub) = h.upper_bound {
        r1 = r1.min(ub);
    }
    let r2 = su.sqrt();
    let lr = if r1 == 0.0 || r2 == 0.0 {
        args.lr
    } else {
        args.lr * (r1 / r2)
    };
    let phase2 = UpdateRule::LambPhase2 {
        epsilon: h.epsilon,
        d1,
        d2,
        lr,
    };
    run(weight, grad, [mean, var], args, phase2).map(drop)
}
