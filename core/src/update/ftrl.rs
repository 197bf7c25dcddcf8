//! FTRL-Proximal and FTML.

use crate::error::Result;
use crate::storage::UpdateRule;
use crate::NDArray;

use super::args::{check_count, check_finite, UpdateArgs};
use super::checked_run;

/// The hyper-parameters of [`ftrl_update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FtrlParams {
    /// L1 strength (MXNet's default 0.01).
    pub lambda1: f64,
    /// Per-coordinate rate offset (1).
    pub beta: f64,
}

/// The hyper-parameters of [`ftml_update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FtmlParams {
    /// 0.6 by default.
    pub beta1: f64,
    /// 0.999 by default.
    pub beta2: f64,
    /// 1e-8 by default.
    pub epsilon: f64,
    /// This update's number, from 1 (the bias corrections use it).
    pub t: u64,
}

/// FTRL-Proximal (MXNet `ftrl_update`), in place:
/// `h = clip(rescale*g); z <- z + h - (sqrt(n + h^2) - sqrt(n))*w/lr; n <- n + h^2;
/// w <- (sign(z)*lambda1 - z)/((beta + sqrt(n))/lr + wd)` where `|z| > lambda1`, else 0.
///
/// With a dense weight and a row_sparse gradient MXNet 1.9.1 has no sparse kernel and falls
/// back to the dense one: that is [`super::RowSparseMode::Standard`] here (every row recomputed,
/// absent rows with a zero gradient, which also sets never-touched rows to 0).
/// [`super::RowSparseMode::Lazy`] is the true lazy update MXNet only offers for row_sparse
/// weights.
///
/// `z` and `n` are the states, dense and shaped like the weight. Fails, before writing
/// anything, on a non-float or non-dense weight, a gradient of another shape or dtype or a csr
/// one, states of another shape, dtype or storage type (or one array passed twice), row ids
/// out of order or range, or non-finite arguments.
pub fn ftrl_update(
    weight: &NDArray,
    grad: &NDArray,
    z: &NDArray,
    n: &NDArray,
    args: &UpdateArgs<FtrlParams>,
) -> Result<()> {
    const OP: &str = "ftrl_update";
    args.check(OP)?;
    let h = &args.hyper;
    check_finite(OP, &[("lambda1", h.lambda1), ("beta", h.beta)])?;
    let rule = UpdateRule::Ftrl {
        lambda1: h.lambda1,
        beta: h.beta,
    };
    checked_run(OP, weight, grad, [("z", z), ("n", n)], args, rule).map(drop)
}

/// FTML, Follow the Moving Leader (MXNet `ftml_update`), in place:
/// `h = clip(rescale*g + wd*w); v <- b2*v + (1-b2)*h^2;
/// d_t = (1-b1^t)/lr * (sqrt(v/(1-b2^t)) + eps); z <- b1*z + (1-b1)*h - (d_t - b1*d)*w;
/// d <- d_t; w <- -z/d_t`. As in MXNet, the powers are evaluated in the weight's dtype.
///
/// `d`, `v` and `z` are the states; failures as for [`ftrl_update`], and when `t` is 0.
pub fn ftml_update(
    weight: &NDArray,
    grad: &NDArray,
    d: &NDArray,
    v: &NDArray,
    z: &NDArray,
    args: &UpdateArgs<FtmlParams>,
) -> Result<()> {
    const OP: &str = "ftml_update";
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
    let rule = UpdateRule::Ftml {
        beta1: h.beta1,
        beta2: h.beta2,
        epsilon: h.epsilon,
        t: h.t,
    };
    checked_run(OP, weight, grad, [("d", d), ("v", v), ("z", z)], args, rule).map(drop)
}
