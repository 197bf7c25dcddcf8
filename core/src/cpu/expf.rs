//! A branch-free `exp` for f32 that LLVM vectorizes.
//!
//! `f32::exp` is a call into libm, so a map like the sigmoid activation stays scalar and pays a
//! call per element. This is the classic Cody-Waite reduction `x = n ln2 + r`, |r| <= ln2/2, a
//! degree-6 polynomial for `e^r` (Cephes' coefficients) and `2^n` built from the exponent bits;
//! every step is plain arithmetic, so loops over it compile to SIMD. Accuracy: within 2 ulp of
//! the correctly rounded result over the whole normal range (tested below against f64 `exp`).

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split so that `n * LN2_HI` is exact for |n| < 2^12.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// 1.5 * 2^23: adding and subtracting it rounds an f32 of magnitude < 2^22 to an integer
/// (round-to-nearest-even, no SSE4.1 `round` needed).
const ROUND: f32 = 12_582_912.0;
/// Below this `e^x` is under f32's smallest normal; above, over f32::MAX.
const LO: f32 = -87.336_55;
const HI: f32 = 88.722_83;

/// `e^x` for f32, vectorizable; `x` above ~88.72 gives +inf, below ~-87.34 gives 0, NaN stays NaN.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    let (y, ni) = reduced(x.clamp(LO, HI));
    // n in [-126, 128]. n = 128 (only when x is at HI) is split as 2 * 2^127 so the bits stay a
    // finite power of two.
    let (ni, twice) = if ni > 127 { (127, 2.0) } else { (ni, 1.0) };
    let v = y * pow2(ni) * twice;
    // Out of range and NaN inputs: exact IEEE results instead of clamped values.
    if x > HI {
        f32::INFINITY
    } else if x < LO {
        0.0
    } else if x.is_nan() {
        x
    } else {
        v
    }
}

/// [`exp_f32`] for `x <= 0` (and NaN), bit for bit: with no positive input the upper clamp,
/// the `2^128` split and the overflow test drop out, ~a fifth of the vector loop. For the
/// logistic function, which only ever needs `e^-|x|`.
#[inline(always)]
pub fn exp_nonpos_f32(x: f32) -> f32 {
    let (y, ni) = reduced(x.max(LO));
    // n in [-126, 0] here: no split needed.
    let v = y * pow2(ni);
    if x < LO {
        0.0
    } else if x.is_nan() {
        x
    } else {
        v
    }
}

/// The shared core for a clamped `xc`: `e^xc = y * 2^n` with `y = e^r` from the polynomial
/// and the integer `n`.
#[inline(always)]
fn reduced(xc: f32) -> (f32, i32) {
    let kn = xc * LOG2E + ROUND;
    let n = kn - ROUND;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // The integer n sits in the low mantissa bits of `kn` (|n| < 2^22 after ROUND), so it is
    // read with integer arithmetic: `n as i32` is a saturating, NaN-checking conversion that
    // LLVM keeps scalar, and it made the whole map scalar (measured: sigmoid maps ~3x slower).
    let ni = (kn.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    (y, ni)
}

/// `2^n` through the exponent field, for `n` in [-126, 127].
#[inline(always)]
fn pow2(n: i32) -> f32 {
    f32::from_bits(((n + 127) as u32) << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn within_two_ulp_over_the_normal_range() {
        let mut worst = (0, 0.0f32);
        let n = 2_000_000;
        for i in 0..=n {
            let x = LO + (HI - LO) * i as f32 / n as f32;
            let want = (x as f64).exp() as f32;
            if want == 0.0 || !want.is_normal() {
                continue;
            }
            let u = ulps(exp_f32(x), want);
            if u > worst.0 {
                worst = (u, x);
            }
        }
        assert!(worst.0 <= 2, "worst {} ulp at x = {}", worst.0, worst.1);
    }

    #[test]
    fn nonpositive_variant_is_bit_identical() {
        let n = 1_000_000;
        for i in 0..=n {
            let x = LO * 1.01 * i as f32 / n as f32;
            assert_eq!(exp_nonpos_f32(x).to_bits(), exp_f32(x).to_bits(), "x = {x}");
        }
        for x in [
            0.0,
            -0.0,
            -1e-30,
            LO,
            -87.0,
            -88.0,
            -1000.0,
            f32::NEG_INFINITY,
        ] {
            assert_eq!(exp_nonpos_f32(x).to_bits(), exp_f32(x).to_bits(), "x = {x}");
        }
        assert!(exp_nonpos_f32(f32::NAN).is_nan());
    }

    #[test]
    fn edges() {
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(-1000.0), 0.0);
        assert_eq!(exp_f32(1000.0), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert!((exp_f32(1.0) - std::f32::consts::E).abs() <= f32::EPSILON * 3.0);
    }
}
