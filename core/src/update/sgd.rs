//! SGD (plain and with momentum), Nesterov momentum (NAG), signSGD and Signum.

use crate::error::Result;
use crate::ops::map_assign;
use crate::{float_dispatch, Float, NDArray};

use super::args::{check_finite, UpdateArgs};
use super::check::check_arrays;
use super::Scalars;
use super::{cast, clip, sign};
use crate::cpu::update::{apply_elementwise, apply_zip};

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
    let dtype = check_arrays(OP, weight, grad, &[])?;
    float_dispatch!(dtype, OP, T => sgd::<T>(weight, grad, args))
}

fn sgd<T: Float>(w: &NDArray, g: &NDArray, args: &UpdateArgs) -> Result<()> {
    const OP: &str = "sgd_update";
    let Scalars {
        lr,
        wd,
        rg,
        clip: c,
    } = args.scalars::<T>();
    let one = T::one();
    // The clip test is hoisted out of the element loop so the common unclipped update is a
    // straight-line fused multiply-add LLVM vectorizes.
    let decay = one - lr * wd;
    match c {
        Some(_) => apply_elementwise::<T, 0, _>(OP, w, g, [], args.lazy(), move |w, g, []| {
            *w = decay * *w - lr * clip(rg * g, c)
        }),
        None => {
            // Span-level loops rather than the per-element callback: this is the whole update
            // of the common case, run 8 lanes wide on AVX2 (bit-identical to the plain loop); a
            // small lazy row_sparse step is one loop over its rows.
            let step = lr * rg;
            apply_zip(
                OP,
                w,
                g,
                args.lazy(),
                move |w: T, g: T| decay * w - step * g,
                move |w: &mut [T]| {
                    if decay != one {
                        map_assign(w, |w| decay * w);
                    }
                },
            )
        }
    }
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
    let dtype = check_arrays(OP, weight, grad, &[("mom", mom)])?;
    float_dispatch!(dtype, OP, T => sgd_mom::<T>(weight, grad, mom, args))
}

fn sgd_mom<T: Float>(
    w: &NDArray,
    g: &NDArray,
    mom: &NDArray,
    args: &UpdateArgs<MomentumParams>,
) -> Result<()> {
    let Scalars {
        lr,
        wd,
        rg,
        clip: c,
    } = args.scalars::<T>();
    let mu: T = cast(args.hyper.momentum);
    apply_elementwise::<T, 1, _>(
        "sgd_mom_update",
        w,
        g,
        [mom],
        args.lazy(),
        move |w, g, [m]| {
            *m = match c {
                Some(_) => mu * *m - lr * wd * *w - lr * clip(rg * g, c),
                None => mu * *m - lr * wd * *w - lr * rg * g,
            };
            *w = *w + *m;
        },
    )
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
    let dtype = check_arrays(OP, weight, grad, &[("mom", mom)])?;
    float_dispatch!(dtype, OP, T => nag_mom::<T>(weight, grad, mom, args))
}

fn nag_mom<T: Float>(
    w: &NDArray,
    g: &NDArray,
    mom: &NDArray,
    args: &UpdateArgs<MomentumParams>,
) -> Result<()> {
    let Scalars {
        lr,
        wd,
        rg,
        clip: c,
    } = args.scalars::<T>();
    let mu: T = cast(args.hyper.momentum);
    let one = T::one();
    apply_elementwise::<T, 1, _>(
        "nag_mom_update",
        w,
        g,
        [mom],
        args.lazy(),
        move |w, g, [m]| {
            let gr = match c {
                Some(_) => clip(rg * g, c),
                None => rg * g,
            };
            *m = mu * *m;
            *w = *w - *m + (mu + one) * (*m - lr * (gr + wd * *w));
            *m = *m - lr * (gr + wd * *w);
        },
    )
}

/// signSGD (MXNet `signsgd_update`), in place: `w <- (1 - lr*wd)*w - lr*sign(g)`.
///
/// Only the gradient's sign counts, so `rescale_grad` and `clip_gradient` change nothing (they
/// are still checked). Fails as [`sgd_update`] does.
pub fn signsgd_update(weight: &NDArray, grad: &NDArray, args: &UpdateArgs) -> Result<()> {
    const OP: &str = "signsgd_update";
    args.check(OP)?;
    let dtype = check_arrays(OP, weight, grad, &[])?;
    float_dispatch!(dtype, OP, T => signsgd::<T>(weight, grad, args))
}

fn signsgd<T: Float>(w: &NDArray, g: &NDArray, args: &UpdateArgs) -> Result<()> {
    let (lr, wd): (T, T) = (cast(args.lr), cast(args.wd));
    let one = T::one();
    apply_elementwise::<T, 0, _>("signsgd_update", w, g, [], args.lazy(), move |w, g, []| {
        *w = (one - lr * wd) * *w - lr * sign(g);
    })
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
    let dtype = check_arrays(OP, weight, grad, &[("mom", mom)])?;
    float_dispatch!(dtype, OP, T => signum::<T>(weight, grad, mom, args))
}

fn signum<T: Float>(
    w: &NDArray,
    g: &NDArray,
    mom: &NDArray,
    args: &UpdateArgs<SignumParams>,
) -> Result<()> {
    let Scalars {
        lr,
        wd,
        rg,
        clip: c,
    } = args.scalars::<T>();
    let mu: T = cast(args.hyper.momentum);
    let wd_lh: T = cast(args.hyper.wd_lh);
    let one = T::one();
    apply_elementwise::<T, 1, _>(
        "signum_update",
        w,
        g,
        [mom],
        args.lazy(),
        move |w, g, [m]| {
            *m = match c {
                Some(_) => mu * *m - (one - mu) * wd * *w - (one - mu) * clip(rg * g, c),
                None => mu * *m - (one - mu) * wd * *w - (one - mu) * rg * g,
            };
            *w = (one - lr * wd_lh) * *w + lr * sign(*m);
        },
    )
}
