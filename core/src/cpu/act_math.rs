//! Branch-free f32 `tanh`, normal CDF and density (through a fitted `erfc`) and `expm1` that
//! LLVM vectorizes, for the activations (`cpu/activation.rs`): libm's are calls per element,
//! which left GELU, ELU and Mish an order of magnitude behind vectorized libraries. Each is built on [`exp_f32`] and polynomials, and
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

/// `t Q(t)` of [`erfc_f32`]: `erfc(a) e^(a^2)` for `a >= 0`. `Q` is a degree-10 polynomial
/// fitted to `erfc(a) e^(a^2) / t` over `a` in [0, 10] (relative least squares on Chebyshev
/// nodes; relative error 1e-8 in exact arithmetic, 1.6e-7 in f32; `Q(0) = 1 / (2 sqrt(pi))`,
/// the tail's asymptote).
#[inline(always)]
fn erfc_scaled(a: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.5 * a);
    t * (0.282_087_4
        + t * (0.282_276_65
            + t * (0.244_961_07
                + t * (0.186_680_6
                    + t * (0.051_583_89
                        + t * (0.041_701_55
                            + t * (-0.029_458_865
                                + t * (-0.284_406_08
                                    + t * (0.379_801_65
                                        + t * (-0.191_136_86 + t * 0.035_909_015))))))))))
}

/// The normal distribution's CDF and density at `x`, `(Phi(x), phi(x))`, from one
/// exponential `e^(-x^2 / 2)` (GELU's forward needs the first, its backward both).
#[inline(always)]
pub(crate) fn normal_cdf_pdf_f32(x: f32) -> (f32, f32) {
    let e = exp_nonpos_f32(-0.5 * (x * x));
    // Phi(x) = erfc(-x / sqrt 2) / 2.
    let half_tail = 0.5 * erfc_scaled(x.abs() * std::f32::consts::FRAC_1_SQRT_2) * e;
    let cdf = if x <= 0.0 { half_tail } else { 1.0 - half_tail };
    (cdf, e * 0.398_942_3)
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

    /// `erfc(x)` as `erfc_scaled(|x|) e^(-x^2)` for `x >= 0` (the one exponential's argument is
    /// `<= 0`), `2 - erfc(|x|)` for negative `x`. In f32: under 5e-7 relative for `|x| < 1`,
    /// 2e-6 for `|x| < 4` and 1e-5 out to `x = 8` (erfc ~1e-29): the rounding of `x^2`
    /// dominates.
    fn erfc_f32(x: f32) -> f32 {
        let a = x.abs();
        let r = erfc_scaled(a) * exp_nonpos_f32(-(a * a));
        if x >= 0.0 {
            r
        } else {
            2.0 - r
        }
    }

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
    fn normal_cdf_and_density_match_erfc_and_exp() {
        let cdf = |x: f32| normal_cdf_pdf_f32(x).0;
        let pdf = |x: f32| normal_cdf_pdf_f32(x).1;
        let want_cdf = |x: f64| 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
        let want_pdf = |x: f64| (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let (e, x) = worst(cdf, want_cdf, -5.0, 12.0);
        assert!(e < 2e-6, "cdf: {e:e} at {x}");
        let (e, x) = worst(pdf, want_pdf, -5.0, 5.0);
        assert!(e < 2e-6, "pdf: {e:e} at {x}");
        assert_eq!(normal_cdf_pdf_f32(f32::INFINITY), (1.0, 0.0));
        assert_eq!(normal_cdf_pdf_f32(f32::NEG_INFINITY), (0.0, 0.0));
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
