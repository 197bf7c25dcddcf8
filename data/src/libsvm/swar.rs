//! Eight ASCII digits at a time ("SIMD within a register").
//!
//! The byte-at-a-time digit loops were the hottest code of the reader: every index and value
//! ends after a data-dependent number of digits, so the loop exit mispredicts on nearly every
//! token. Here one 8-byte load, a subtract/add/mask and a `trailing_zeros` find the length of a
//! digit run, and three multiplies give its value, with no branch per digit.
//!
//! Bytes are taken little-endian, so byte 0 of the word is the first character.

/// `0x30` ('0') in every byte.
const ZEROS: u64 = 0x3030_3030_3030_3030;
/// Added to a digit byte (<= 0x39) it stays below 0x80; added to anything above '9' it reaches
/// the high bit.
const ABOVE_NINE: u64 = 0x4646_4646_4646_4646;
/// The high bit of every byte.
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The 8 bytes of `buf` starting at `i`; past the end of `buf` the missing bytes read as 0
/// (not a digit, so digit runs always stop inside `buf`).
#[inline(always)]
pub(crate) fn load8(buf: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    match buf.get(i..i.saturating_add(8)) {
        Some(s) => a.copy_from_slice(s),
        None => {
            let rest = buf.get(i..).unwrap_or(&[]);
            a[..rest.len()].copy_from_slice(rest);
        }
    }
    u64::from_le_bytes(a)
}

/// Number of leading ASCII digits of the word (0..=8).
///
/// Exact even though the subtraction may borrow across bytes: bytes before the first
/// non-digit are digits, which neither borrow nor carry, so the first flagged byte is the first
/// non-digit; whatever happens above it is ignored.
#[inline(always)]
pub(crate) fn digit_count(x: u64) -> usize {
    let flags = (x.wrapping_sub(ZEROS) | x.wrapping_add(ABOVE_NINE)) & HIGH;
    (flags.trailing_zeros() / 8) as usize
}

/// Decimal value of the first `n` bytes of the word, which must be digits, `1 <= n <= 8`.
#[inline(always)]
pub(crate) fn digits_value(x: u64, n: usize) -> u64 {
    debug_assert!((1..=8).contains(&n));
    // Move the n digits to the top bytes; the zero bytes shifted in act as leading zeros and
    // the bytes after the run (with any borrow they caused) fall off the end.
    let v = x.wrapping_sub(ZEROS) << (64 - 8 * n as u32);
    // Pairs of digits, then the classic two-multiply reduction of four pairs.
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    let lo = (v & 0x0000_00FF_0000_00FF).wrapping_mul(100 + (1_000_000 << 32));
    let hi = ((v >> 16) & 0x0000_00FF_0000_00FF).wrapping_mul(1 + (10_000 << 32));
    lo.wrapping_add(hi) >> 32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn scalar(bytes: &[u8]) -> (usize, u64) {
        let n = bytes
            .iter()
            .take(8)
            .take_while(|b| b.is_ascii_digit())
            .count();
        let v = bytes[..n]
            .iter()
            .fold(0u64, |v, b| v * 10 + (b - b'0') as u64);
        (n, v)
    }

    #[test]
    fn examples() {
        for (s, n, v) in [
            (&b"12345678"[..], 8, 12345678),
            (b"0:1", 1, 0),
            (b"428463:0", 6, 428463),
            (b"3477131 ", 7, 3477131),
            (b"", 0, 0),
            (b"9", 1, 9),
            (b"00000001", 8, 1),
            (b"99999999", 8, 99999999),
            (b"1/2", 1, 1),
            (b"12\xff34", 2, 12),
        ] {
            let x = load8(s, 0);
            assert_eq!(digit_count(x), n, "{s:?}");
            if n > 0 {
                assert_eq!(digits_value(x, n), v, "{s:?}");
            }
        }
    }

    proptest! {
        #[test]
        fn matches_scalar(bytes in proptest::collection::vec(any::<u8>(), 0..12),
                          digits in proptest::collection::vec(b'0'..=b'9', 0..9), at in 0usize..4) {
            let mut buf = digits.clone();
            buf.extend_from_slice(&bytes);
            let i = at.min(buf.len());
            let x = load8(&buf, i);
            let (n, v) = scalar(&buf[i..]);
            prop_assert_eq!(digit_count(x), n);
            if n > 0 {
                prop_assert_eq!(digits_value(x, n), v);
            }
        }
    }
}
