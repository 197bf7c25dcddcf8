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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
