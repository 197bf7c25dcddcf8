//! The host kernels of the activations of `ops::activation` ([`ActFn`]): one closure per
//! activation forward and one per backward (from the input), each matched once outside the
//! loop as every map is (`map.rs`), so the eager operator, its planned form and a fused
//! chain compute the same bits. The transcendental parts go through `Float`'s `_fast`
//! functions, branch-free for f32 (`act_math.rs`), so the loops vectorize; the closures are
//! inlined always (the larger backward ones otherwise stay calls inside the SIMD loop).

use super::map::{sigmoid, softplus, GradSink, MapSink};
use crate::dtype::{Element, Float};
use crate::ops::{ActFn, SELU_ALPHA, SELU_LAMBDA};

#[inline]
fn c<T: Float>(v: f64) -> T {
    <T as Element>::from_f64(v)
}

/// `sqrt(2 / pi)`, GELU's tanh approximation's scale.
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
/// The cubic coefficient of GELU's tanh approximation.
const GELU_CUBIC: f64 = 0.044_715;

/// `tanh(softplus(x))` and `1 - tanh(softplus(x))^2` without a log or a tanh: with `n = e^x
/// (e^x + 2)`, `tanh(ln(1 + e^x)) = n / (n + 2)` and `1 - t^2 = 4 (n + 1) / (n + 2)^2` (no
/// cancellation). Past `x = 20`, `t` is 1 in both float types; `e^x` is capped there so
/// `(n + 2)^2` stays finite.
#[inline(always)]
fn mish_tanh<T: Float>(x: T) -> (T, T) {
    let (one, two, four) = (T::one(), c::<T>(2.0), c::<T>(4.0));
    let e = x.min(c::<T>(20.0)).exp_fast();
    let n = e * (e + two);
    let d = n + two;
    (n / d, four * (n + one) / (d * d))
}

/// `f` over every element.
pub(super) fn act_map<T: Float, K: MapSink<T>>(k: K, f: ActFn) -> K::Out {
    let (zero, one, half) = (T::zero(), T::one(), c::<T>(0.5));
    match f {
        ActFn::Elu(a) => {
            let a = c::<T>(a);
            k.run(
                #[inline(always)]
                move |x: T| if x > zero { x } else { a * x.expm1_fast() },
            )
        }
        ActFn::Selu => {
            let (l, la) = (c::<T>(SELU_LAMBDA), c::<T>(SELU_LAMBDA * SELU_ALPHA));
            k.run(
                #[inline(always)]
                move |x: T| if x > zero { l * x } else { la * x.expm1_fast() },
            )
        }
        ActFn::Gelu => k.run(
            #[inline(always)]
            |x: T| x * x.normal_cdf_pdf_fast().0,
        ),
        ActFn::GeluTanh => {
            let (s, k3) = (c::<T>(SQRT_2_OVER_PI), c::<T>(GELU_CUBIC));
            k.run(
                #[inline(always)]
                move |x: T| half * x * (one + (s * (x + k3 * x * x * x)).tanh_fast()),
            )
        }
        ActFn::Swish(b) => {
            let b = c::<T>(b);
            k.run(
                #[inline(always)]
                move |x: T| x * sigmoid(b * x),
            )
        }
        ActFn::Softsign => k.run(
            #[inline(always)]
            move |x: T| x / (one + x.abs()),
        ),
        ActFn::LogSigmoid => k.run(
            #[inline(always)]
            |x: T| -softplus(-x),
        ),
        ActFn::Mish => k.run(
            #[inline(always)]
            move |x: T| x * mish_tanh(x).0,
        ),
    }
}

/// `g * f'(x)` over every (gradient, input) pair.
pub(super) fn act_grad<T: Float, K: GradSink<T>>(k: K, f: ActFn) -> K::Out {
    let (zero, one, half) = (T::zero(), T::one(), c::<T>(0.5));
    match f {
        ActFn::Elu(a) => {
            let a = c::<T>(a);
            k.run(
                #[inline(always)]
                move |g: T, x: T| if x > zero { g } else { g * a * x.exp_fast() },
            )
        }
        ActFn::Selu => {
            let (l, la) = (c::<T>(SELU_LAMBDA), c::<T>(SELU_LAMBDA * SELU_ALPHA));
            k.run(
                #[inline(always)]
                move |g: T, x: T| {
                    if x > zero {
                        g * l
                    } else {
                        g * la * x.exp_fast()
                    }
                },
            )
        }
        ActFn::Gelu => k.run(
            #[inline(always)]
            |g: T, x: T| {
                // Phi(x) + x phi(x).
                let (cdf, pdf) = x.normal_cdf_pdf_fast();
                g * (cdf + x * pdf)
            },
        ),
        ActFn::GeluTanh => {
            let (s, k3) = (c::<T>(SQRT_2_OVER_PI), c::<T>(GELU_CUBIC));
            let k3x3 = c::<T>(3.0 * GELU_CUBIC);
            k.run(
                #[inline(always)]
                move |g: T, x: T| {
                    let x2 = x * x;
                    let t = (s * (x + k3 * x2 * x)).tanh_fast();
                    g * (half * (one + t) + half * x * (one - t * t) * s * (one + k3x3 * x2))
                },
            )
        }
        ActFn::Swish(b) => {
            let b = c::<T>(b);
            k.run(
                #[inline(always)]
                move |g: T, x: T| {
                    let s = sigmoid(b * x);
                    g * (s + b * x * s * (one - s))
                },
            )
        }
        ActFn::Softsign => k.run(
            #[inline(always)]
            move |g: T, x: T| {
                let d = one + x.abs();
                g / (d * d)
            },
        ),
        ActFn::LogSigmoid => k.run(
            #[inline(always)]
            |g: T, x: T| g * sigmoid(-x),
        ),
        ActFn::Mish => k.run(
            #[inline(always)]
            move |g: T, x: T| {
                let (t, one_minus_t2) = mish_tanh(x);
                g * (t + x * one_minus_t2 * sigmoid(x))
            },
        ),
    }
}
