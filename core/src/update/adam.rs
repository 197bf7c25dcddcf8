//! Adam, AdamW, Adamax and Nadam.

use crate::error::Result;
use crate::{float_dispatch, Float, NDArray};

use super::args::{check_count, check_finite, UpdateArgs};
use super::cast;
use super::check::check_arrays;
use super::clip;
use super::Scalars;
use crate::cpu::update::apply_elementwise;

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
    const OP: &str = "adam_update";
    args.check(OP)?;
    args.hyper.check(OP)?;
    let dtype = check_arrays(OP, weight, grad, &[("mean", mean), ("var", var)])?;
    float_dispatch!(dtype, OP, T => adam::<T>(weight, grad, [mean, var], args))
}

fn adam<T: Float>(
    w: &NDArray,
    g: &NDArray,
    states: [&NDArray; 2],
    args: &UpdateArgs<AdamParams>,
) -> Result<()> {
    let Scalars {
        lr,
        wd,
        rg,
        clip: c,
    } = args.scalars::<T>();
    let h = &args.hyper;
    let (b1, b2, eps): (T, T, T) = (cast(h.beta1), cast(h.beta2), cast(h.epsilon));
    let one = T::one();
    apply_elementwise::<T, 2, _>(
        "adam_update",
        w,
        g,
        states,
        args.lazy(),
        move |w, g, [m, v]| {
            let h = clip(g * rg + *w * wd, c);
            *m = b1 * *m + (one - b1) * h;
            *v = b2 * *v + (one - b2) * h * h;
            *w = *w - lr * *m / (v.sqrt() + eps);
        },
    )
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
    const OP: &str = "adamw_update";
    args.check(OP)?;
    args.hyper.check(OP)?;
    let dtype = check_arrays(OP, weight, grad, &[("mean", mean), ("var", var)])?;
    float_dispatch!(dtype, OP, T => adamw::<T>(weight, grad, [mean, var], args))
}

fn adamw<T: Float>(
    w: &NDArray,
    g: &NDArray,
    states: [&NDArray; 2],
    args: &UpdateArgs<AdamParams>,
) -> Result<()> {
    let Scalars {
        lr: eta,
        wd,
        rg,
        clip: c,
    } = args.scalars::<T>();
    let h = &args.hyper;
    let (b1, b2, eps): (T, T, T) = (cast(h.beta1), cast(h.beta2), cast(h.epsilon));
    let one = T::one();
    apply_elementwise::<T, 2, _>(
        "adamw_update",
        w,
        g,
        states,
        args.lazy(),
        move |w, g, [m, v]| {
            let h = clip(g * rg, c);
            *m = b1 * *m + (one - b1) * h;
            *v = b2 * *v + (one - b2) * h * h;
            *w = *w - eta * (*m / (v.sqrt() + eps) + wd * *w);
        },
    )
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
    let dtype = check_arrays(OP, weight, grad, &[("mean", mean), ("inf_norm", inf_norm)])?;
    float_dispatch!(dtype, OP, T => adamax::<T>(weight, grad, [mean, inf_norm], args))
}

fn adamax<T: Float>(
    w: &NDArray,
    g: &NDArray,
    states: [&NDArray; 2],
    args: &UpdateArgs<AdamaxParams>,
) -> Result<()> {
    let Scalars {
        lr,
        wd,
        rg,
        clip: c,
    } = args.scalars::<T>();
    let (b1, b2): (T, T) = (cast(args.hyper.beta1), cast(args.hyper.beta2));
    let one = T::one();
    apply_elementwise::<T, 2, _>(
        "adamax_update",
        w,
        g,
        states,
        args.lazy(),
        move |w, g, [m, u]| {
            let h = clip(g * rg + wd * *w, c);
            *m = b1 * *m + (one - b1) * h;
            *u = (b2 * *u).max(h.abs());
            if *u != T::zero() {
                *w = *w - lr * *m / *u;
            }
        },
    )
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
    let dtype = check_arrays(OP, weight, grad, &[("mean", mean), ("var", var)])?;
    float_dispatch!(dtype, OP, T => nadam::<T>(weight, grad, [mean, var], args))
}

fn nadam<T: Float>(
    w: &NDArray,
    g: &NDArray,
    states: [&NDArray; 2],
    args: &UpdateArgs<NadamParams>,
) -> Result<f64> {
    let p = &args.hyper;
    let t = p.t as f64;
    let mom_t = p.beta1 * (1.0 - 0.5 * 0.96f64.powf(t * p.schedule_decay));
    let mom_t1 = p.beta1 * (1.0 - 0.5 * 0.96f64.powf((t + 1.0) * p.schedule_decay));
    let sched = p.m_schedule * mom_t;
    let sched_next = sched * mom_t1;
    let (wd, rg, lr): (T, T, T) = (cast(args.wd), cast(args.rescale_grad), cast(args.lr));
    let (b1, b2, eps): (T, T, T) = (cast(p.beta1), cast(p.beta2), cast(p.epsilon));
    let d_g: T = cast(1.0 - sched);
    let d_m: T = cast(1.0 - sched_next);
    let d_v: T = cast(1.0 - super::pow_count(p.beta2, p.t));
    let (c_g, c_m): (T, T) = (cast(1.0 - mom_t), cast(mom_t1));
    let c: Option<T> = args.clip_gradient.map(cast);
    let one = T::one();
    apply_elementwise::<T, 2, _>(
        "nadam_update",
        w,
        g,
        states,
        args.lazy(),
        move |w, g, [m, v]| {
            let h = clip(g * rg + wd * *w, c);
            *m = b1 * *m + (one - b1) * h;
            *v = b2 * *v + (one - b2) * h * h;
            let mbar = c_g * (h / d_g) + c_m * (*m / d_m);
            *w = *w - lr * mbar / ((*v / d_v).sqrt() + eps);
        },
    )?;
    Ok(sched)
}
