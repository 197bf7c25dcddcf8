//! FTRL-Proximal and FTML.

use crate::error::Result;
use crate::{float_dispatch, Float, NDArray};

use super::args::{check_count, check_finite, UpdateArgs};
use super::check::check_arrays;
use super::Scalars;
use super::{cast, clip, sign};
use crate::cpu::update::apply_elementwise;

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
    let dtype = check_arrays(OP, weight, grad, &[("z", z), ("n", n)])?;
    float_dispatch!(dtype, OP, T => ftrl::<T>(weight, grad, [z, n], args))
}

fn ftrl<T: Float>(
    w: &NDArray,
    g: &NDArray,
    states: [&NDArray; 2],
    args: &UpdateArgs<FtrlParams>,
) -> Result<()> {
    let Scalars {
        lr,
        wd,
        rg,
        clip: c,
    } = args.scalars::<T>();
    let (l1, beta): (T, T) = (cast(args.hyper.lambda1), cast(args.hyper.beta));
    apply_elementwise::<T, 2, _>(
        "ftrl_update",
        w,
        g,
        states,
        args.lazy(),
        move |w, g, [z, n]| {
            let h = clip(g * rg, c);
            *z = *z + (h - ((*n + h * h).sqrt() - n.sqrt()) * *w / lr);
            *n = *n + h * h;
            let on = if z.abs() > l1 { T::one() } else { T::zero() };
            *w = (sign(*z) * l1 - *z) / ((beta + n.sqrt()) / lr + wd) * on;
        },
    )
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
    let dtype = check_arrays(OP, weight, grad, &[("d", d), ("v", v), ("z", z)])?;
    float_dispatch!(dtype, OP, T => ftml::<T>(weight, grad, [d, v, z], args))
}

fn ftml<T: Float>(
    w: &NDArray,
    g: &NDArray,
    states: [&NDArray; 3],
    args: &UpdateArgs<FtmlParams>,
) -> Result<()> {
    let p = &args.hyper;
    let Scalars {
        lr,
        wd,
        rg,
        clip: c,
    } = args.scalars::<T>();
    let (b1, b2, eps): (T, T, T) = (cast(p.beta1), cast(p.beta2), cast(p.epsilon));
    let t: T = cast(p.t as f64);
    let (c1, c2) = (T::one() - b1.powf(t), T::one() - b2.powf(t));
    let one = T::one();
    apply_elementwise::<T, 3, _>(
        "ftml_update",
        w,
        g,
        states,
        args.lazy(),
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
