//! Branch-free f32 `tanh`, `erfc` and `expm1` that LLVM vectorizes, for the activations
//! (`cpu/activation.rs`): libm's are calls per element, which left GELU, ELU and Mish an order
//! of magnitude behind vectorized libraries. Each is built on [`exp_f32`] and polynomials, and
//! selects between its pieces per element (both computed), so a loop over it compiles to SIMD.
//! Accuracy against f64 references is tested below.

use super::expf::{exp_f32, exp_nonpos_f32};

/// `tanh(x)`: the odd Taylor series for `|x| < 0.55` (9 terms, remainder under 2^-25
/// relative), else `(1 - e) / (1 + e)` with `e = e^(-2|x|) <= e^(-1.1)` (no cancellation).
#[inline(always)]
pub(crate) fn tanh_f32(x: f32) -> f32 {
    let z = x * x;
    let series = x
        * (1.0
            + z * (-1.0 / 3.0
                + z * (2.0 / 15.0
                    + z * (-17.0 / 315.0
                        + z * (62.0 / 2835.0
                            + z * (-1382.0 / 155_925.0
                                + z * (21844.0 / 6_081_075.0
                                    + z * (-929_569.0 / 638_512_875.0
                                        + z * (6_404_582.0 / 10_854_718_875.0)))))))));
    let e = exp_nonpos_f32(-2.0 * x.abs());
    let far = ((1.0 - e) / (1.0 + e)).copysign(x);
    if x.abs() < 0.55 {
        series
    } else {
        far
    }
}

/// `erfc(x)` by the Chebyshev-fitted form `t exp(-x^2 + P(t))`, `t = 1 / (1 + |x|/2)`, with
/// the nine coefficients of Press et al., *Numerical Recipes* (`erfcc`: relative error under
/// 1.2e-7 for every `x >= 0` in exact arithmetic); `2 - erfc(|x|)` for negative `x`. In f32:
/// under 5e-7 relative for `|x| < 1`, 2e-6 for `|x| < 4` and 1e-5 out to `x = 8` (erfc
/// ~1e-29): the rounding of `x^2` dominates.
#[inline(always)]
pub(crate) fn erfc_f32(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.5 * a);
    let p = -1.265_512_2
        + t * (1.000_023_7
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_204
                                + t * (1.488_515_9 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * exp_f32(p - a * a);
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// `e^x - 1`: its Taylor series for `|x| < 0.5` (10 terms), else `exp_f32(x) - 1` (at least
/// 0.39 in magnitude there: little cancellation).
#[inline(always)]
pub(crate) fn expm1_f32(x: f32) -> f32 {
    let series = x
        * (1.0
            + x * (1.0 / 2.0
                + x * (1.0 / 6.0
                    + x * (1.0 / 24.0
                        + x * (1.0 / 120.0
                            + x * (1.0 / 720.0
                                + x * (1.0 / 5040.0
                                    + x * (1.0 / 40320.0
                                        + x * (1.0 / 362_880.0 + x * (1.0 / 3_628_800.0))))))))));
    let far = exp_f32(x) - 1.0;
    if x.abs() < 0.5 {
        series
    } else {
        far
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worst relative error of `f` against `want` over `n + 1` points of `[lo, hi]`.
    fn worst(f: fn(f32) -> f32, want: fn(f64) -> f64, lo: f64, hi: f64) -> (f64, f32) {
        let n = 400_000;
        let mut w = (0.0f64, 0.0f32);
        for i in 0..=n {
            let x = (lo + (hi - lo) * i as f64 / n as f64) as f32;
            let (got, want) = (f(x) as f64, want(x as f64));
            let rel = if want == 0.0 {
                got.abs()
            } else {
                ((got - want) / want).abs()
            };
            if rel > w.0 {
                w = (rel, x);
            }
        }
        w
    }

    #[test]
    fn tanh_is_within_a_few_ulp() {
        let (e, x) = worst(tanh_f32, f64::tanh, -12.0, 12.0);
        assert!(e < 3.0 * f32::EPSILON as f64, "tanh: {e:e} at {x}");
        assert_eq!(tanh_f32(0.0), 0.0);
        assert_eq!(tanh_f32(1e-30), 1e-30);
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert!(tanh_f32(f32::NAN).is_nan());
    }

    #[test]
    fn erfc_keeps_its_relative_accuracy_into_the_tail() {
        // Against libm's f64 erfc: where erfc is above 1e-30 (|x| up to ~8.1; there the
        // rounding of x^2 in f32 dominates), and over the negative side (values in (1, 2)).
        let (e, x) = worst(erfc_f32, libm::erfc, 0.0, 8.0);
        assert!(e < 1e-5, "erfc: {e:e} at {x}");
        let (e, x) = worst(erfc_f32, libm::erfc, 0.0, 4.0);
        assert!(e < 2e-6, "erfc: {e:e} at {x}");
        let (e, x) = worst(erfc_f32, libm::erfc, 0.0, 1.0);
        assert!(e < 5e-7, "erfc: {e:e} at {x}");
        let (e, x) = worst(erfc_f32, libm::erfc, -8.0, 0.0);
        assert!(e < 3.0 * f32::EPSILON as f64, "erfc: {e:e} at {x}");
        assert_eq!(erfc_f32(f32::INFINITY), 0.0);
        assert_eq!(erfc_f32(f32::NEG_INFINITY), 2.0);
        assert!(erfc_f32(f32::NAN).is_nan());
    }

    #[test]
    fn expm1_is_exact_near_zero_and_close_elsewhere() {
        let (e, x) = worst(expm1_f32, f64::exp_m1, -0.5, 0.5);
        assert!(e < 2.0 * f32::EPSILON as f64, "expm1: {e:e} at {x}");
        let (e, x) = worst(expm1_f32, f64::exp_m1, -80.0, 80.0);
        assert!(e < 6.0 * f32::EPSILON as f64, "expm1: {e:e} at {x}");
        assert_eq!(expm1_f32(1e-30), 1e-30);
        assert_eq!(expm1_f32(-1000.0), -1.0);
        assert!(expm1_f32(f32::NAN).is_nan());
    }
}
