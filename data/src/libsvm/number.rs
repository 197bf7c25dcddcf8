//! Number parsing for LibSVM tokens.
//!
//! Values are parsed straight to `f32` (not through `f64`, which would round twice) and are
//! correctly rounded: the common short decimals take Clinger's exact fast path (an integer
//! mantissa below 2^24 and a power of ten up to 10^10 are both exact in `f32`, so one IEEE
//! division or multiplication rounds correctly); everything else goes to `str::parse::<f32>`,
//! which is correctly rounded for any input.

/// Powers of ten that are exact in `f32` (5^10 < 2^24).
const P10: [f32; 11] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10];

/// Largest mantissa exact in f32.
const MAX_EXACT: u64 = 1 << 24;

/// Parse a decimal float token to `f32`, correctly rounded. `None` if it is not a number.
#[inline]
pub fn parse_f32(tok: &[u8]) -> Option<f32> {
    if let Some(v) = fast_f32(tok) {
        return Some(v);
    }
    slow_f32(tok)
}

#[inline]
fn fast_f32(tok: &[u8]) -> Option<f32> {
    let (neg, digits) = match tok.first()? {
        b'-' => (true, &tok[1..]),
        b'+' => (false, &tok[1..]),
        _ => (false, tok),
    };
    let mut m: u64 = 0;
    let mut nd = 0usize; // digits consumed into m (caps overflow)
    let mut frac = 0usize; // digits after the point
    let mut seen_point = false;
    let mut any = false;
    for &b in digits {
        match b {
            b'0'..=b'9' => {
                any = true;
                if m == 0 && b == b'0' {
                    // leading zeros do not add significant digits
                } else {
                    nd += 1;
                    if nd > 9 {
                        return None;
                    }
                    m = m * 10 + (b - b'0') as u64;
                }
                if seen_point {
                    frac += 1;
                }
            }
            b'.' if !seen_point => seen_point = true,
            _ => return None, // exponent, inf, nan, junk: exact slow path decides
        }
    }
    if !any || m > MAX_EXACT || frac >= P10.len() {
        return None;
    }
    let v = m as f32 / P10[frac];
    Some(if neg { -v } else { v })
}

#[cold]
fn slow_f32(tok: &[u8]) -> Option<f32> {
    let s = std::str::from_utf8(tok).ok()?;
    s.parse::<f32>().ok()
}

/// `10^-k` rounded to the nearest `f64` (Rust float literals are correctly rounded).
const INV_P10_64: [f64; 16] = [
    1e0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9, 1e-10, 1e-11, 1e-12, 1e-13, 1e-14,
    1e-15,
];

/// `decimal_to_f32` declines results whose low 29 `f64` fraction bits lie within this many
/// units of an `f32` halfway pattern (`0x1000_0000`); see there.
const HALFWAY_SLACK: u64 = 3;

/// Powers of ten as integers, for joining digit runs.
const P10_U64: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// The line fast path's value parser: a plain decimal `[+-]digits[.digits]` starting at `i`
/// and ending at a blank or at `end` (the end of the line's content). Returns the value and the
/// position after it, or `None` for anything else (exponents, `inf`, junk, more than 15
/// significant-or-not digits, a result whose correct rounding this shortcut cannot guarantee):
/// the caller then hands the whole line to the general parser, which decides.
///
/// Correct rounding: the digits form an integer `m < 10^15 < 2^53` (exact in `f64`) scaled by
/// `10^-k`, `k <= 15`; [`decimal_to_f32`] rounds that to `f32` and declines the values whose
/// rounding it cannot guarantee (near an `f32` halfway point, or outside the normal `f32`
/// range), which `str::parse::<f32>` then decides.
#[inline(always)]
pub(crate) fn decimal_at(buf: &[u8], i: usize, end: usize) -> Option<(f32, usize)> {
    use super::swar::{digit_count, digits_value, load8};
    let mut j = i;
    let neg = match buf.get(j) {
        Some(b'-') => {
            j += 1;
            true
        }
        Some(b'+') => {
            j += 1;
            false
        }
        _ => false,
    };
    let x = load8(buf, j);
    let n_int = digit_count(x);
    if n_int == 8 {
        return None;
    }
    let mut m = if n_int > 0 { digits_value(x, n_int) } else { 0 };
    j += n_int;
    let mut n_frac = 0;
    // `j <= end` here and the byte at `end` is a newline, `#` or past the buffer, so a `.` seen
    // here is inside the line.
    if buf.get(j) == Some(&b'.') {
        j += 1;
        loop {
            let x = load8(buf, j);
            let n = digit_count(x);
            if n_int + n_frac + n > 15 {
                return None;
            }
            if n > 0 {
                m = m * P10_U64[n] + digits_value(x, n);
            }
            j += n;
            n_frac += n;
            if n < 8 {
                break;
            }
        }
    }
    if n_int + n_frac == 0 {
        return None;
    }
    if j != end && !matches!(buf.get(j), Some(b' ' | b'\t' | b'\r')) {
        return None;
    }
    Some((decimal_to_f32(m, n_frac, neg)?, j))
}

/// `m / 10^k` (negated if `neg`) correctly rounded to `f32`, for `m < 10^15` and `k <= 15`, or
/// `None` in the rare cases the shortcut cannot guarantee.
///
/// A multiplication by the rounded reciprocal `fl(10^-k)` instead of the division of
/// [`decimal_at`]'s proof: the division's 13-20 cycles of latency were ~15% of the whole
/// parse (perf annotate of a LibSVMIter pass). The product carries two roundings, so `y` is
/// within 2 `f64` ulps of the exact quotient `q` (relative error <= 2u + u^2, u = 2^-53), not
/// within half an ulp. Rounding to `f32` can then differ from `q`'s correct rounding only if an
/// `f32` halfway point lies between `y` and `q` (or on one of them); halfway points are the
/// `f64`s whose low 29 fraction bits are exactly `0x1000_0000`, so declining every `y` within
/// [`HALFWAY_SLACK`] (3 > 2) ulps of that pattern leaves `q` and `y` on the same side of every
/// halfway point for all accepted results (about 7 in 2^29 values are declined). Results
/// outside the normal `f32` range are declined as before.
#[inline(always)]
pub(crate) fn decimal_to_f32(m: u64, k: usize, neg: bool) -> Option<f32> {
    // m < 2^53: the signed conversion is exact and a single instruction.
    let y = (m as i64) as f64 * *INV_P10_64.get(k)?;
    let v = if y == 0.0 {
        0.0
    } else {
        if !(f32::MIN_POSITIVE as f64..=f32::MAX as f64).contains(&y) {
            return None;
        }
        let low = y.to_bits() & 0x1FFF_FFFF;
        if low.abs_diff(0x1000_0000) <= HALFWAY_SLACK {
            return None;
        }
        y as f32
    };
    Some(if neg { -v } else { v })
}

/// Why an index token was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexErr {
    /// Not a plain decimal integer.
    NotInteger,
    /// Starts with `-`.
    Negative,
    /// Does not fit in i64.
    TooLarge,
}

/// Parse a non-negative decimal integer token (an optional leading `+` is accepted).
#[inline]
pub fn parse_index(tok: &[u8]) -> Result<i64, IndexErr> {
    let digits = match tok.first() {
        Some(b'-') => {
            return if tok.len() > 1 && tok[1..].iter().all(u8::is_ascii_digit) {
                Err(IndexErr::Negative)
            } else {
                Err(IndexErr::NotInteger)
            }
        }
        Some(b'+') => &tok[1..],
        Some(_) => tok,
        None => return Err(IndexErr::NotInteger),
    };
    if digits.is_empty() {
        return Err(IndexErr::NotInteger);
    }
    let mut v: i64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(IndexErr::NotInteger);
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(d as i64))
            .ok_or(IndexErr::TooLarge)?;
    }
    Ok(v)
}

/// Parse a signed decimal integer token over the whole `i64` range (`-9223372036854775808`
/// included; an optional `+`). `None` if it is not one or does not fit.
pub fn parse_i64(tok: &[u8]) -> Option<i64> {
    let (neg, digits) = match tok.first()? {
        b'-' => (true, &tok[1..]),
        b'+' => (false, &tok[1..]),
        _ => (false, tok),
    };
    if digits.is_empty() {
        return None;
    }
    // Accumulated negatively: |i64::MIN| does not fit in i64, i64::MAX's negation does.
    let mut v: i64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_sub(d as i64)?;
    }
    if neg {
        Some(v)
    } else {
        v.checked_neg()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn signed_integers_cover_i64() {
        for (s, want) in [
            ("0", Some(0)),
            ("-0", Some(0)),
            ("+7", Some(7)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775807", Some(i64::MAX)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
            ("", None),
            ("-", None),
            ("+", None),
            ("1.0", None),
            ("1e3", None),
            ("--1", None),
            (" 1", None),
        ] {
            assert_eq!(parse_i64(s.as_bytes()), want, "{s:?}");
        }
    }

    proptest! {
        /// Every i64 printed in decimal reads back.
        #[test]
        fn any_i64_round_trips(v in any::<i64>()) {
            prop_assert_eq!(parse_i64(v.to_string().as_bytes()), Some(v));
        }
    }

    #[test]
    fn fast_path_cases() {
        for s in [
            "0",
            "1",
            "-1",
            "+1",
            "0.5",
            ".5",
            "5.",
            "0.1234567",
            "16777216",
            "1e3",
            "1E-3",
            "3.4028235e38",
            "1e-45",
            "inf",
            "-inf",
            "NaN",
            "0.00000000001",
            "123456789012",
        ] {
            let want = s.parse::<f32>().unwrap();
            let got = parse_f32(s.as_bytes()).unwrap();
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{s}: {got} vs {want}"
            );
        }
        for s in ["", "-", ".", "1.2.3", "1e", "abc", "1,5", "0x10", "1 "] {
            assert_eq!(parse_f32(s.as_bytes()), None, "{s:?}");
        }
    }

    #[test]
    fn index_cases() {
        assert_eq!(parse_index(b"0"), Ok(0));
        assert_eq!(parse_index(b"+7"), Ok(7));
        assert_eq!(parse_index(b"9223372036854775807"), Ok(i64::MAX));
        assert_eq!(parse_index(b"9223372036854775808"), Err(IndexErr::TooLarge));
        assert_eq!(parse_index(b"-3"), Err(IndexErr::Negative));
        assert_eq!(parse_index(b"-"), Err(IndexErr::NotInteger));
        assert_eq!(parse_index(b"1.0"), Err(IndexErr::NotInteger));
        assert_eq!(parse_index(b""), Err(IndexErr::NotInteger));
    }

    /// `decimal_at` on a whole token: `Some` must agree with `str::parse::<f32>` bit for bit.
    fn check_decimal(s: &str) -> Option<f32> {
        let got = decimal_at(s.as_bytes(), 0, s.len()).map(|(v, j)| {
            assert_eq!(j, s.len(), "{s}");
            v
        });
        if let Some(v) = got {
            let want = s.parse::<f32>().unwrap();
            assert_eq!(v.to_bits(), want.to_bits(), "{s}");
        }
        got
    }

    /// The reciprocal-multiply shortcut against `str::parse::<f32>` on millions of decimals,
    /// including ones built to sit exactly at or next to `f32` halfway points, where a
    /// two-rounding product could round the wrong way if it were accepted.
    #[test]
    fn decimal_to_f32_is_correctly_rounded_or_declines() {
        let check = |m: u64, k: usize| {
            let Some(got) = decimal_to_f32(m, k, false) else {
                // Declines the exact quotient itself calls for (a true halfway point, e.g. the odd
                // integers between 2^24 and 2^25) do not count against the shortcut.
                let exact = m as f64 / 10f64.powi(k as i32);
                return exact.to_bits() & 0x1FFF_FFFF == 0x1000_0000;
            };
            let text = format!("{m}e-{k}");
            let want = text.parse::<f32>().unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "{text}");
            true
        };
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut extra_declines = 0usize;
        for _ in 0..2_000_000 {
            let k = (next() % 16) as usize;
            let digits = 1 + next() % 15;
            let m = next() % 10u64.pow(digits as u32);
            extra_declines += usize::from(!check(m, k));
        }
        // ~7 in 2^29 by design: a handful at most in 2M.
        assert!(
            extra_declines < 50,
            "declined {extra_declines} of 2M random decimals"
        );
        // Exact f32 halfway points (a + ulp/2 for random f32 a) printed as short decimals:
        // those with <= 15 significant digits are representable as m / 10^k.
        let mut halfway_hits = 0;
        for _ in 0..200_000 {
            let a = f32::from_bits(0x3000_0000 + (next() % 0x1800_0000) as u32);
            let h = (a as f64 + f64::from(a.next_up())) / 2.0;
            for k in 1..=15usize {
                let scaled = h * 10f64.powi(k as i32);
                if scaled >= 1e15 {
                    break;
                }
                let m = scaled.round() as u64;
                for d in [m.saturating_sub(1), m, m + 1] {
                    if (d as f64 / 10f64.powi(k as i32)) == h {
                        halfway_hits += 1;
                    }
                    check(d, k);
                }
            }
        }
        assert!(
            halfway_hits > 0,
            "the halfway construction found no exact cases"
        );
    }

    #[test]
    fn decimal_at_cases() {
        for s in [
            "0",
            "-0",
            "+1",
            "1",
            "-1",
            "0.5",
            ".5",
            "5.",
            "-.5",
            "0.3477131",
            "0.01532944",
            "0.0000000001",
            "1234567.8",
            "0.12345678901234",
            "1677721.0626",
            "3.4028235",
        ] {
            assert!(check_decimal(s).is_some(), "{s} should take the fast path");
        }
        for s in [
            "",
            "-",
            ".",
            "+.",
            "1e3",
            "inf",
            "nan",
            "12345678",
            "0.1234567890123456",
            "1.2.3",
            "1,2",
            "0x1",
            "--1",
        ] {
            assert!(
                check_decimal(s).is_none(),
                "{s} should be left to the general parser"
            );
        }
        // Blank and end-of-content terminators; anything else sends the line to the slow path.
        assert_eq!(decimal_at(b"1.5 7:1", 0, 7), Some((1.5, 3)));
        assert_eq!(decimal_at(b"2\t", 0, 2), Some((2.0, 1)));
        assert_eq!(decimal_at(b"2#c", 0, 1), Some((2.0, 1)));
        assert_eq!(decimal_at(b"2:", 0, 2), None);
        // Halfway between the f32s 1677721 and 1677721.125, exact in f64: the shortcut must
        // refuse it (rounding twice could go the wrong way) and leave it to the exact parser.
        assert_eq!(decimal_at(b"1677721.0625", 0, 12), None);
        // 1677721.7 rounds to the f32 1677721.75 (spacing 0.125 there).
        assert_eq!(
            decimal_at(b"1677721.7", 0, 9).map(|p| p.0.to_bits()),
            Some((1677721.0f32 + 0.75).to_bits())
        );
    }

    proptest! {
        /// Decimal strings of every shape parse exactly as `str::parse::<f32>` does.
        #[test]
        fn matches_std(int in 0u64..100_000_000, frac in 0u64..1_000_000_000, fd in 0usize..12,
                       neg in any::<bool>(), lead in 0usize..3) {
            let f = format!("{:0width$}", frac % 10u64.pow(fd.min(9) as u32).max(1), width = fd);
            let s = format!("{}{}{}.{}", if neg {"-"} else {""}, "0".repeat(lead), int, f);
            let want = s.parse::<f32>().unwrap();
            prop_assert_eq!(parse_f32(s.as_bytes()).unwrap().to_bits(), want.to_bits(), "{}", s);
        }

        /// Short decimals of every shape, and the halfway points between neighbouring f32s
        /// printed in full: the fast path either declines or agrees with `str::parse::<f32>`.
        #[test]
        fn decimal_at_matches_std(int in 0u64..10_000_000, frac in 0u64..100_000_000,
                                  fd in 0usize..9, neg in any::<bool>(), bits in 1u32..0x7f7f_ffff) {
            let f = format!("{:0width$}", frac % 10u64.pow(fd as u32), width = fd);
            let s = format!("{}{}.{}", if neg {"-"} else {""}, int, f);
            check_decimal(&s);
            let a = f32::from_bits(bits) as f64;
            let b = f32::from_bits(bits + 1) as f64;
            let mid = format!("{}", (a + b) / 2.0);
            if mid.len() <= 17 && !mid.contains('e') {
                check_decimal(&mid);
            }
        }

        /// Any f32 printed with `{}` (shortest round trip) or `%.7g`-like reads back exactly.
        #[test]
        fn roundtrip_bits(bits in any::<u32>()) {
            let x = f32::from_bits(bits);
            prop_assume!(x.is_finite());
            let s = format!("{x}");
            prop_assert_eq!(parse_f32(s.as_bytes()).unwrap().to_bits(), x.to_bits());
            let e = format!("{x:e}");
            prop_assert_eq!(parse_f32(e.as_bytes()).unwrap().to_bits(), x.to_bits());
        }
    }
}
