//! Adam, AdamW, Adamax and Nadam.

use crate::error::Result;
use crate::storage::UpdateRule;
use crate::NDArray;

use super::args::{check_count, check_finite, UpdateArgs};
use super::checked_run;

/// The hyper-parameters of [`adam_update`] and [`adamw_update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamParams {
    /// First-moment decay (MXNet's default 0.9).
    pub beta1: f64,
    /// Second-moment decay (0.999).
    pub beta2: f64,
    /// Denominator guard (1e-8 for Adam, 1e-6 for GluonNLP's AdamW).
    pub epsilon: f64,
}

impl AdamParams {
    /// The rule of Adam (`decoupled`: AdamW) with these parameters.
    fn rule(&self, decoupled: bool) -> UpdateRule {
        let (beta1, beta2, epsilon) = (self.beta1, self.beta2, self.epsilon);
        if decoupled {
            UpdateRule::AdamW {
                beta1,
                beta2,
                epsilon,
            }
        } else {
            UpdateRule::Adam {
                beta1,
                beta2,
                epsilon,
            }
        }
    }

    fn check(&self, op: &'static str) -> Result<()> {
        check_finite(
            op,
            &[
                ("beta1", self.beta1),
                ("beta2", self.beta2),
                ("epsilon", self.epsilon),
            ],
        )
    }
}

/// The hyper-parameters of [`adamax_update`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamaxParams {
    /// First-moment decay (0.9).
    pub beta1: f64,
    /// Infinity-norm decay (0.999).
    pub beta2: f64,
}

/// The hyper-parameters of [`nadam_update`], with the step's position in the momentum
/// schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NadamParams {
    /// First-moment decay (0.9).
    pub beta1: f64,
    /// Second-moment decay (0.999).
    pub beta2: f64,
    /// Denominator guard (1e-8).
    pub epsilon: f64,
    /// Momentum schedule decay (0.004).
    pub schedule_decay: f64,
    /// This update's number, from 1.
    pub t: u64,
    /// The momentum-schedule product `M_{t-1}` before this update (1 before the first), as
    /// the previous call returned it.
    pub m_schedule: f64,
}

/// Adam (MXNet `adam_update`), in place:
/// `h = clip(rescale*g + wd*w); m <- b1*m + (1-b1)*h; v <- b2*v + (1-b2)*h^2;
/// w <- w - lr*m/(sqrt(v) + eps)`.
///
/// As in MXNet, `args.lr` is the rate this step uses: MXNet's Python optimizer passes the
/// bias-corrected `lr*sqrt(1-b2^t)/(1-b1^t)`, computed in f64. `mean` and `var` are the moment
/// states, dense and shaped like the weight.
///
/// Fails, before writing anything, on a non-float or non-dense weight, a gradient of another
/// shape or dtype or a csr one, states of another shape, dtype or storage type (or one array
/// passed twice), row ids out of order or range, or non-finite arguments.
///
/// ```
/// use sparrow_core::update::{adam_update, AdamParams, UpdateArgs};
/// use sparrow_core::{DType, NDArray};
/// let w = NDArray::from_vec(vec![1.0f64, 1.0], &[2]).unwrap();
/// let g = NDArray::from_vec(vec![2.0f64, -2.0], &[2]).unwrap();
/// let m = NDArray::zeros(&[2], DType::F64).unwrap();
/// let v = NDArray::zeros(&[2], DType::F64).unwrap();
/// let hyper = AdamParams { beta1: 0.9, beta2: 0.999, epsilon: 1e-8 };
/// adam_update(&w, &g, &m, &v, &UpdateArgs::new(0.01, hyper)).unwrap();
/// assert!(w.to_vec::<f64>().unwrap()[0] < 1.0);
/// ```
pub fn adam_update(
    weight: &NDArray,
    grad: &NDArray,
    mean: &NDArray,
    var: &NDArray,
    args: &UpdateArgs<AdamParams>,
) -> Result<()> {
    adam_like("adam_update", false, weight, grad, mean, var, args)
}

/// AdamW with decoupled weight decay, as MXNet's `contrib.adamw_update` is driven by GluonNLP's
/// `AdamW`/`BERTAdam` (its `lr = 1`, its `eta` = `args.lr`, the bias-corrected rate), in place:
/// `h = clip(rescale*g); m <- b1*m + (1-b1)*h; v <- b2*v + (1-b2)*h^2;
/// w <- w - lr*(m/(sqrt(v) + eps) + wd*w)`.
///
/// States and failures as for [`adam_update`].
pub fn adamw_update(
    weight: &NDArray,
    grad: &NDArray,
    mean: &NDArray,
    var: &NDArray,
    args: &UpdateArgs<AdamParams>,
) -> Result<()> {
    adam_like("adamw_update", true, weight, grad, mean, var, args)
}

/// [`adam_update`] (`decoupled = false`) or [`adamw_update`]: the same checks and states, the
/// weight decay inside or outside the adaptive step.
fn adam_like(
    op: &'static str,
    decoupled: bool,
    weight: &NDArray,
    grad: &NDArray,
    mean: &NDArray,
    var: &NDArray,
    args: &UpdateArgs<AdamParams>,
) -> Result<()> {
    args.check(op)?;
    args.hyper.check(op)?;
    let states = [("mean", mean), ("var", var)];
    checked_run(op, weight, grad, states, args, args.hyper.rule(decoupled)).map(drop)
}

/// Adamax (MXNet's Python `Adamax`), in place: `h = clip(rescale*g + wd*w);
/// m <- b1*m + (1-b1)*h; u <- max(b2*u, |h|); w <- w - lr*m/u`.
///
/// `args.lr` is the rate this step uses; MXNet's optimizer passes `lr/(1-b1^t)`. Where `u == 0`
/// (every gradient so far was zero, hence `m == 0`) the step is 0; MXNet divides 0 by 0 there
/// and writes NaN. `mean` and `inf_norm` are the states; failures as for [`adam_update`].
pub fn adamax_update(
    weight: &NDArray,
    grad: &NDArray,
    mean: &NDArray,
    inf_norm: &NDArray,
    args: &UpdateArgs<AdamaxParams>,
) -> Result<()> {
    const OP: &str = "adamax_update";
    args.check(OP)?;
    let h = &args.hyper;
    check_finite(OP, &[("beta1", h.beta1), ("beta2", h.beta2)])?;
    let rule = UpdateRule::Adamax {
        beta1: h.beta1,
        beta2: h.beta2,
    };
    checked_run(
        OP,
        weight,
        grad,
        [("mean", mean), ("inf_norm", inf_norm)],
        args,
        rule,
    )
    .map(drop)
}

/// Nadam (MXNet's Python `Nadam`), Adam with Nesterov momentum and a momentum schedule, in
/// place: `mu_t = b1*(1 - 0.5*0.96^(t*sd))`, `M_t = M_{t-1}*mu_t`,
/// `h = clip(rescale*g + wd*w); m <- b1*m + (1-b1)*h; v <- b2*v + (1-b2)*h^2;
/// mbar = (1-mu_t)*h/(1-M_t) + mu_{t+1}*m/(1-M_t*mu_{t+1});
/// w <- w - lr*mbar/(sqrt(v/(1-b2^t)) + eps)`. The schedule terms are computed in f64.
///
/// Returns `M_t`, the `m_schedule` of the next update. `mean` and `var` are the states;
/// failures as for [`adam_update`], and when `t` is 0.
pub fn nadam_update(
    weight: &NDArray,
    grad: &NDArray,
    mean: &NDArray,
    var: &NDArray,
    args: &UpdateArgs<NadamParams>,
) -> Result<f64> {
    const OP: &str = "nadam_update";
    args.check(OP)?;
    let h = &args.hyper;
    check_finite(
        OP,
        &[
            ("beta1", h.beta1),
            ("beta2", h.beta2),
            ("epsilon", h.epsilon),
            ("schedule_decay", h.schedule_decay),
            ("m_schedule", h.m_schedule),
        ],
    )?;
    check_count(OP, h.t)?;
    let p = &args.hyper;
    // The momentum schedule, in f64 (the backend rounds the terms to the weight's dtype).
    let t = p.t as f64;
    let mom_t = p.beta1 * (1.0 - 0.5 * 0.96f64.powf(t * p.schedule_decay));
    let mom_t1 = p.beta1 * (1.0 - 0.5 * 0.96f64.powf((t + 1.0) * p.schedule_decay));
    let sched = p.m_schedule * mom_t;
    let sched_next = sched * mom_t1;
    let rule = UpdateRule::Nadam {
        beta1: p.beta1,
        beta2: p.beta2,
        epsilon: p.epsilon,
        d_g: 1.0 - sched,
        d_m: 1.0 - sched_next,
        d_v: 1.0 - super::pow_count(p.beta2, p.t),
        c_g: 1.0 - mom_t,
        c_m: mom_t1,
    };
    checked_run(OP, weight, grad, [("mean", mean), ("var", var)], args, rule)?;
    Ok(sched)
}
