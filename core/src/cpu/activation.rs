//! The host kernels of the activations of `ops::activation` ([`ActFn`]): one closure per
//! activation forward and one per backward (from the input), each matched once outside the
//! loop as every map is (`map.rs`), so the eager operator, its planned form and a fused
//! chain compute the same bits.

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
/// `1 / sqrt(2 pi)`, the normal density at 0.
const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;

/// `f` over every element.
pub(super) fn act_map<T: Float, K: MapSink<T>>(k: K, f: ActFn) -> K::Out {
    let (zero, one, half) = (T::zero(), T::one(), c::<T>(0.5));
    match f {
        ActFn::Elu(a) => {
            let a = c::<T>(a);
            k.run(move |x: T| if x > zero { x } else { a * x.exp_m1() })
        }
        ActFn::Selu => {
            let (l, la) = (c::<T>(SELU_LAMBDA), c::<T>(SELU_LAMBDA * SELU_ALPHA));
            k.run(move |x: T| if x > zero { l * x } else { la * x.exp_m1() })
        }
        ActFn::Gelu => {
            let r = c::<T>(std::f64::consts::FRAC_1_SQRT_2);
            k.run(move |x: T| half * x * (one + (x * r).erf()))
        }
        ActFn::GeluTanh => {
            let (s, k3) = (c::<T>(SQRT_2_OVER_PI), c::<T>(GELU_CUBIC));
            k.run(move |x: T| half * x * (one + (s * (x + k3 * x * x * x)).tanh()))
        }
        ActFn::Swish(b) => {
            let b = c::<T>(b);
            k.run(move |x: T| x * sigmoid(b * x))
        }
        ActFn::Softsign => k.run(move |x: T| x / (one + x.abs())),
        ActFn::LogSigmoid => k.run(|x: T| -softplus(-x)),
        ActFn::Mish => k.run(|x: T| x * softplus(x).tanh()),
    }
}

/// `g * f'(x)` over every (gradient, input) pair.
pub(super) fn act_grad<T: Float, K: GradSink<T>>(k: K, f: ActFn) -> K::Out {
    let (zero, one, half) = (T::zero(), T::one(), c::<T>(0.5));
    match f {
        ActFn::Elu(a) => {
            let a = c::<T>(a);
            k.run(move |g: T, x: T| if x > zero { g } else { g * a * x.exp() })
        }
        ActFn::Selu => {
            let (l, la) = (c::<T>(SELU_LAMBDA), c::<T>(SELU_LAMBDA * SELU_ALPHA));
            k.run(move |g: T, x: T| if x > zero { g * l } else { g * la * x.exp() })
        }
        ActFn::Gelu => {
            let (r, d) = (
                c::<T>(std::f64::consts::FRAC_1_SQRT_2),
                c::<T>(INV_SQRT_2PI),
            );
            // Phi(x) + x phi(x).
            k.run(move |g: T, x: T| {
                g * (half * (one + (x * r).erf()) + x * d * (-half * x * x).exp())
            })
        }
        ActFn::GeluTanh => {
            let (s, k3) = (c::<T>(SQRT_2_OVER_PI), c::<T>(GELU_CUBIC));
            let k3x3 = c::<T>(3.0 * GELU_CUBIC);
            k.run(move |g: T, x: T| {
                let x2 = x * x;
                let t = (s * (x + k3 * x2 * x)).tanh();
                g * (half * (one + t) + half * x * (one - t * t) * s * (one + k3x3 * x2))
            })
        }
        ActFn::Swish(b) => {
            let b = c::<T>(b);
            k.run(move |g: T, x: T| {
                let s = sigmoid(b * x);
                g * (s + b * x * s * (one - s))
            })
        }
        ActFn::Softsign => k.run(move |g: T, x: T| {
            let d = one + x.abs();
            g / (d * d)
        }),
        ActFn::LogSigmoid => k.run(|g: T, x: T| g * sigmoid(-x)),
        ActFn::Mish => k.run(move |g: T, x: T| {
            let t = softplus(x).tanh();
            g * (t + x * (one - t * t) * sigmoid(x))
        }),
    }
}
